package drivertest

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	pgcoord "github.com/pgcoord/pgcoord/clients/go"
)

// The queue calls one by one, as a program without the Worker makes them.
func TestQueueCalls(t *testing.T) {
	eachDriver(t, func(t *testing.T, e *env) {
		ctx := context.Background()
		c := e.c
		queue := e.prefix + "calls"
		id, err := c.Enqueue(ctx, e.db, queue, map[string]int{"n": 1}, nil)
		if err != nil {
			t.Fatal(err)
		}
		jobs, err := c.Claim(ctx, queue, 5, 10*time.Second, "test")
		if err != nil || len(jobs) != 1 || jobs[0].ID != id || jobs[0].Attempt != 1 {
			t.Fatalf("claim: %v %+v", err, jobs)
		}
		j := jobs[0]
		var p struct{ N int }
		if err := j.Decode(&p); err != nil || p.N != 1 {
			t.Fatalf("payload %s: %v", j.Payload, err)
		}
		r, err := c.Renew(ctx, []int64{j.ID, j.ID + 1000000}, []int64{j.Token, 1}, 10*time.Second)
		if err != nil || len(r.Lost) != 1 || r.Lost[0] != j.ID+1000000 || len(r.Cancelled) != 0 {
			t.Fatalf("renew: %v %+v", err, r)
		}
		big := strings.Repeat("x", pgcoord.ResultMaxBytes)
		if err := c.Complete(ctx, j.ID, j.Token, big); !errors.Is(err, pgcoord.ErrUsage) {
			t.Fatalf("a result over 64 kB: %v", err)
		}
		if err := c.Complete(ctx, j.ID, j.Token+1, nil); !errors.Is(err, pgcoord.ErrStale) {
			t.Fatalf("a stale token: %v", err)
		}
		if err := c.Complete(ctx, j.ID, j.Token, map[string]string{"answer": "42"}); err != nil {
			t.Fatal(err)
		}
		wctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		info, err := c.WaitResult(wctx, id, nil)
		cancel()
		if err != nil || info.Status != "succeeded" || string(info.Result) != `{"answer": "42"}` {
			t.Fatalf("result: %v %+v %s", err, info, info.Result)
		}

		// fail: retried with the delay asked for, then dead when out of attempts.
		id2, _ := c.Enqueue(ctx, e.db, queue, 2, &pgcoord.EnqueueOptions{MaxAttempts: 2})
		jobs, _ = c.Claim(ctx, queue, 1, 10*time.Second, "")
		if len(jobs) != 1 {
			t.Fatal("no job")
		}
		o, err := c.Fail(ctx, id2, jobs[0].Token, "boom", &pgcoord.FailOptions{RetryIn: time.Millisecond})
		if err != nil || o != pgcoord.OutcomeRetried {
			t.Fatalf("fail: %v %v", o, err)
		}
		poll(t, 10*time.Second, "the retry", func() bool {
			jobs, err = c.Claim(ctx, queue, 1, 10*time.Second, "")
			return err == nil && len(jobs) == 1
		})
		if jobs[0].Attempt != 2 {
			t.Fatalf("attempt %d", jobs[0].Attempt)
		}
		if o, err = c.Fail(ctx, id2, jobs[0].Token, "boom", nil); err != nil || o != pgcoord.OutcomeDead {
			t.Fatalf("fail: %v %v", o, err)
		}
		if st, err := c.JobStatus(ctx, id2); err != nil || st.Status != "failed" || st.Attempts != 2 {
			t.Fatalf("status: %v %+v", err, st)
		}

		// cancel of a pending job; a second is a conflict; an unknown id is not found.
		id3, _ := c.Enqueue(ctx, e.db, queue, 3, nil)
		if was, err := c.Cancel(ctx, id3); err != nil || was {
			t.Fatalf("cancel: %v %v", was, err)
		}
		if _, err := c.Cancel(ctx, id3); !errors.Is(err, pgcoord.ErrConflict) {
			t.Fatalf("second cancel: %v", err)
		}
		if _, err := c.JobStatus(ctx, 1<<60); !errors.Is(err, pgcoord.ErrNotFound) {
			t.Fatalf("unknown job: %v", err)
		}
		wctx, cancel = context.WithTimeout(ctx, 200*time.Millisecond)
		id4, _ := c.Enqueue(ctx, e.db, queue, 4, nil)
		if _, err := c.WaitResult(wctx, id4, nil); !errors.Is(err, pgcoord.ErrNotFinished) {
			t.Fatalf("unfinished: %v", err)
		}
		cancel()
		jobs, _ = c.Claim(ctx, queue, 1, 10*time.Second, "")
		if n, err := c.ReleaseJobs(ctx, []int64{jobs[0].ID}, []int64{jobs[0].Token}, false); err != nil || n != 1 {
			t.Fatalf("release: %d %v", n, err)
		}
		if _, err := c.Reap(ctx); err != nil && !errors.Is(err, pgcoord.ErrRetryLater) {
			t.Fatal(err)
		}
	})
}

// workerDB is a pool of its own for a worker, named so that a test can end its sessions.
func workerDB(t *testing.T, driver, app string) (*sql.DB, *pgcoord.Client) {
	db := open(t, driver, withParams(dsn, "application_name", app))
	c, err := pgcoord.New(context.Background(), db, &pgcoord.Options{Schema: schema})
	if err != nil {
		t.Fatal(err)
	}
	return db, c
}

func status(t *testing.T, e *env, id int64) (string, int) {
	t.Helper()
	info, err := e.c.JobStatus(context.Background(), id)
	if err != nil {
		t.Fatal(err)
	}
	return info.Status, info.Attempts
}

// runWorker runs w until the test ends or stop is called; done gives Run's error once.
func runWorker(t *testing.T, w *pgcoord.Worker) (stop func(), done <-chan error) {
	ctx, cancel := context.WithCancel(context.Background())
	ch := make(chan error, 1)
	ended := make(chan struct{})
	go func() { ch <- w.Run(ctx); close(ended) }()
	t.Cleanup(func() {
		cancel()
		select {
		case <-ended:
		case <-time.After(30 * time.Second):
			t.Error("the worker did not stop")
		}
	})
	return cancel, ch
}

// The worker with each driver (pgx listens, lib/pq polls): every job once, results stored,
// a handler's error fails the attempt, a panic too, RetryAfter defers.
func TestWorkerJobs(t *testing.T) {
	eachDriver(t, func(t *testing.T, e *env) {
		ctx := context.Background()
		queue := e.prefix + "jobs"
		var runs sync.Map
		w := pgcoord.NewWorker(e.c, pgcoord.WorkerOptions{Concurrency: 4, Lease: 5 * time.Second, PollInterval: 500 * time.Millisecond})
		w.Handle(queue, func(ctx context.Context, j *pgcoord.Job) (interface{}, error) {
			n, _ := runs.LoadOrStore(j.ID, new(int32))
			atomic.AddInt32(n.(*int32), 1)
			var p struct{ K string }
			_ = j.Decode(&p)
			switch p.K {
			case "fail":
				return nil, errors.New("it failed")
			case "panic":
				panic("oops")
			case "defer":
				if j.Attempt == 1 && atomic.LoadInt32(n.(*int32)) == 1 {
					return nil, pgcoord.RetryAfter(10 * time.Millisecond)
				}
			}
			return map[string]interface{}{"id": j.ID}, nil
		})
		_, done := runWorker(t, w)
		var ids []int64
		for i := 0; i < 30; i++ {
			id, err := e.c.Enqueue(ctx, e.db, queue, map[string]string{"K": "ok"}, nil)
			if err != nil {
				t.Fatal(err)
			}
			ids = append(ids, id)
		}
		fid, _ := e.c.Enqueue(ctx, e.db, queue, map[string]string{"K": "fail"}, &pgcoord.EnqueueOptions{MaxAttempts: 1})
		pid, _ := e.c.Enqueue(ctx, e.db, queue, map[string]string{"K": "panic"}, &pgcoord.EnqueueOptions{MaxAttempts: 1})
		did, _ := e.c.Enqueue(ctx, e.db, queue, map[string]string{"K": "defer"}, nil)
		for _, id := range append(ids, did) {
			wctx, cancel := context.WithTimeout(ctx, 20*time.Second)
			info, err := e.c.WaitResult(wctx, id, nil)
			cancel()
			if err != nil || info.Status != "succeeded" {
				t.Fatalf("job %d: %v %+v", id, err, info)
			}
			var r struct{ ID int64 }
			if json.Unmarshal(info.Result, &r) != nil || r.ID != id {
				t.Fatalf("job %d: result %s", id, info.Result)
			}
		}
		for _, id := range ids {
			if n, _ := runs.Load(id); atomic.LoadInt32(n.(*int32)) != 1 {
				t.Fatalf("job %d ran %d times", id, *n.(*int32))
			}
		}
		for _, id := range []int64{fid, pid} {
			poll(t, 20*time.Second, "the failure", func() bool { st, _ := status(t, e, id); return st == "failed" })
		}
		var lastErr string
		_ = e.other.QueryRow("SELECT last_error FROM "+q(schema)+".job_history WHERE id = $1", pid).Scan(&lastErr)
		if !strings.Contains(lastErr, "panicked: oops") {
			t.Fatalf("the panic's error: %q", lastErr)
		}
		if st, at := status(t, e, did); st != "succeeded" || at != 1 {
			t.Fatalf("the deferred job: %s, %d attempts", st, at)
		}
		select {
		case err := <-done:
			t.Fatalf("Run returned early: %v", err)
		default:
		}
		if e.driver == "pgx" && !w.Listening() {
			t.Fatal("the pgx worker does not listen")
		}
		if e.driver == "postgres" && w.Listening() {
			t.Fatal("the lib/pq worker listens")
		}
	})
}

// A running job cancelled from another session: its handler's context is cancelled, the job
// ends cancelled, the worker goes on.
func TestWorkerCancel(t *testing.T) {
	eachDriver(t, func(t *testing.T, e *env) {
		ctx := context.Background()
		queue := e.prefix + "cancel"
		saw := make(chan bool, 1)
		w := pgcoord.NewWorker(e.c, pgcoord.WorkerOptions{Concurrency: 2, Lease: 3 * time.Second, PollInterval: 200 * time.Millisecond})
		w.Handle(queue, func(ctx context.Context, j *pgcoord.Job) (interface{}, error) {
			select {
			case <-ctx.Done():
				saw <- j.Cancelled()
				return nil, ctx.Err()
			case <-time.After(20 * time.Second):
				saw <- false
				return nil, nil
			}
		})
		runWorker(t, w)
		id, _ := e.c.Enqueue(ctx, e.db, queue, 1, nil)
		poll(t, 10*time.Second, "the job to run", func() bool { st, _ := status(t, e, id); return st == "running" })
		if was, err := e.c.Cancel(ctx, id); err != nil || !was {
			t.Fatalf("cancel: %v %v", was, err)
		}
		select {
		case c := <-saw:
			if !c {
				t.Fatal("the handler did not see a cancel")
			}
		case <-time.After(10 * time.Second):
			t.Fatal("the handler's context was not cancelled")
		}
		if st, _ := status(t, e, id); st != "cancelled" {
			t.Fatalf("status %s", st)
		}
	})
}

// The worker's sessions terminated (pg_terminate_backend) while it works: it reconnects, and
// every job runs exactly once.
func TestWorkerLostSession(t *testing.T) {
	if dsn == "" {
		t.Skip("PGCOORD_TEST_DSN is not set")
	}
	for _, d := range drivers {
		d := d
		t.Run(d, func(t *testing.T) {
			e := &env{driver: d, db: open(t, d, dsn), other: open(t, d, dsn), prefix: fmt.Sprintf("goclient-%d-%s-", os.Getpid(), d)}
			var err error
			if e.c, err = pgcoord.New(context.Background(), e.db, &pgcoord.Options{Schema: schema}); err != nil {
				t.Fatal(err)
			}
			app := fmt.Sprintf("gotest-lost-%d-%s", os.Getpid(), d)
			_, wc := workerDB(t, d, app)
			ctx := context.Background()
			queue := e.prefix + "lost"
			var runs sync.Map
			release := make(chan struct{})
			w := pgcoord.NewWorker(wc, pgcoord.WorkerOptions{Concurrency: 3, Lease: 3 * time.Second, PollInterval: 200 * time.Millisecond})
			w.Handle(queue, func(ctx context.Context, j *pgcoord.Job) (interface{}, error) {
				n, _ := runs.LoadOrStore(j.ID, new(int32))
				atomic.AddInt32(n.(*int32), 1)
				<-release
				return nil, nil
			})
			runWorker(t, w)
			var ids []int64
			for i := 0; i < 6; i++ {
				id, _ := e.c.Enqueue(ctx, e.db, queue, i, nil)
				ids = append(ids, id)
			}
			poll(t, 10*time.Second, "three running jobs", func() bool {
				var n int
				_ = e.other.QueryRow("SELECT count(*) FROM "+q(schema)+".jobs WHERE queue = $1 AND status = 'running'", queue).Scan(&n)
				return n == 3
			})
			var killed int
			if err := e.other.QueryRow("SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity WHERE application_name = $1", app).Scan(&killed); err != nil || killed == 0 {
				t.Fatalf("terminated %d sessions: %v", killed, err)
			}
			close(release)
			for _, id := range ids {
				id := id
				poll(t, 20*time.Second, fmt.Sprintf("job %d to succeed", id), func() bool { st, _ := status(t, e, id); return st == "succeeded" })
				if n, _ := runs.Load(id); atomic.LoadInt32(n.(*int32)) != 1 {
					t.Fatalf("job %d ran %d times", id, *n.(*int32))
				}
				if _, at := status(t, e, id); at != 1 {
					t.Fatalf("job %d: %d attempts", id, at)
				}
			}
			if d == "pgx" {
				// Its LISTEN session was terminated too: a new one is up.
				poll(t, 20*time.Second, "the worker to listen again", func() bool {
					var n int
					_ = e.other.QueryRow("SELECT count(*) FROM pg_stat_activity WHERE application_name = $1"+
						" AND query LIKE 'LISTEN%'", app).Scan(&n)
					return n > 0 && w.Listening()
				})
			}
		})
	}
}

// A worker process SIGKILLed mid-job: a second worker completes the job once its lease ran
// out (attempt 2). The killed worker is this test binary, run again as a hanging worker.
func TestWorkerRescue(t *testing.T) {
	if os.Getenv("PGCOORD_TEST_HANG_QUEUE") != "" {
		hangingWorker()
		return
	}
	eachDriver(t, func(t *testing.T, e *env) {
		if e.driver != "pgx" {
			t.Skip("one driver is enough: the rescue is the server's and the other worker's")
		}
		ctx := context.Background()
		queue := e.prefix + "rescue"
		id, _ := e.c.Enqueue(ctx, e.db, queue, 1, nil)
		cmd := exec.Command(os.Args[0], "-test.run=^TestWorkerRescue$")
		cmd.Env = append(os.Environ(), "PGCOORD_TEST_HANG_QUEUE="+queue, "PGCOORD_TEST_SCHEMA="+schema, "PGCOORD_TEST_DRIVER="+e.driver)
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		defer func() { _ = cmd.Process.Kill(); _ = cmd.Wait() }()
		poll(t, 20*time.Second, "the job to run in the other process", func() bool { st, _ := status(t, e, id); return st == "running" })
		_ = cmd.Process.Signal(syscall.SIGKILL)
		_ = cmd.Wait()
		w := pgcoord.NewWorker(e.c, pgcoord.WorkerOptions{Lease: 1500 * time.Millisecond, PollInterval: 200 * time.Millisecond, ReapInterval: 200 * time.Millisecond})
		attempt := make(chan int, 1)
		w.Handle(queue, func(ctx context.Context, j *pgcoord.Job) (interface{}, error) {
			attempt <- j.Attempt
			return nil, nil
		})
		runWorker(t, w)
		select {
		case a := <-attempt:
			if a != 2 {
				t.Fatalf("attempt %d", a)
			}
		case <-time.After(20 * time.Second):
			t.Fatal("the job was not rescued")
		}
		poll(t, 10*time.Second, "the rescued job to succeed", func() bool { st, _ := status(t, e, id); return st == "succeeded" })
	})
}

func hangingWorker() {
	db, err := sql.Open(os.Getenv("PGCOORD_TEST_DRIVER"), dsn)
	if err != nil {
		os.Exit(3)
	}
	c, err := pgcoord.New(context.Background(), db, &pgcoord.Options{Schema: os.Getenv("PGCOORD_TEST_SCHEMA")})
	if err != nil {
		os.Exit(3)
	}
	w := pgcoord.NewWorker(c, pgcoord.WorkerOptions{Lease: 1500 * time.Millisecond, ReapInterval: -1})
	w.Handle(os.Getenv("PGCOORD_TEST_HANG_QUEUE"), func(ctx context.Context, j *pgcoord.Job) (interface{}, error) {
		select {}
	})
	_ = w.Run(context.Background())
	os.Exit(0)
}

// A graceful stop: no new claims, a running handler that finishes within the grace is
// completed; one that does not is told (its context) and its job released to the queue.
func TestWorkerGracefulStop(t *testing.T) {
	eachDriver(t, func(t *testing.T, e *env) {
		ctx := context.Background()
		queue := e.prefix + "grace"
		w := pgcoord.NewWorker(e.c, pgcoord.WorkerOptions{Concurrency: 2, Lease: 5 * time.Second, Grace: time.Second, PollInterval: 200 * time.Millisecond})
		told := make(chan struct{}, 1)
		w.Handle(queue, func(ctx context.Context, j *pgcoord.Job) (interface{}, error) {
			var p string
			_ = j.Decode(&p)
			if p == "quick" {
				time.Sleep(400 * time.Millisecond)
				return "done", nil
			}
			<-ctx.Done()
			told <- struct{}{}
			return nil, ctx.Err()
		})
		quick, _ := e.c.Enqueue(ctx, e.db, queue, "quick", nil)
		slow, _ := e.c.Enqueue(ctx, e.db, queue, "slow", nil)
		stop, done := runWorker(t, w)
		poll(t, 10*time.Second, "both jobs to run", func() bool {
			a, _ := status(t, e, quick)
			b, _ := status(t, e, slow)
			return a == "running" && b == "running"
		})
		later, _ := e.c.Enqueue(ctx, e.db, queue, "quick", nil)
		stop()
		select {
		case err := <-done:
			if err != nil {
				t.Fatal(err)
			}
		case <-time.After(10 * time.Second):
			t.Fatal("Run did not return")
		}
		select {
		case <-told:
		case <-time.After(5 * time.Second):
			t.Fatal("the slow handler's context was not cancelled")
		}
		if st, _ := status(t, e, quick); st != "succeeded" {
			t.Fatalf("quick: %s", st)
		}
		if st, at := status(t, e, slow); st != "pending" || at != 0 {
			t.Fatalf("slow: %s, %d attempts", st, at)
		}
		if st, _ := status(t, e, later); st != "pending" {
			t.Fatalf("the job enqueued after the stop: %s", st)
		}
	})
}

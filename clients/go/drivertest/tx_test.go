package drivertest

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"sync"
	"testing"
	"time"

	pgcoord "github.com/pgcoord/pgcoord/clients/go"
)

// raise makes the server fail the statement with a SQLSTATE (a real server error, through the
// driver's own error type).
func raise(tx *sql.Tx, code string) error {
	_, err := tx.Exec(fmt.Sprintf("DO $$ BEGIN RAISE EXCEPTION 'raised %s' USING ERRCODE = '%s'; END $$", code, code))
	return err
}

func TestTxRetries(t *testing.T) {
	eachDriver(t, func(t *testing.T, e *env) {
		ctx := context.Background()
		fast := &pgcoord.TxOptions{BaseDelay: time.Millisecond, MaxDelay: 5 * time.Millisecond}
		n := 0
		err := e.c.Tx(ctx, fast, func(tx *sql.Tx) error {
			n++
			if n <= 2 {
				return raise(tx, "40001")
			}
			return nil
		})
		if err != nil || n != 3 {
			t.Errorf("serialization failures: %v after %d runs, want nil after 3", err, n)
		}
		n = 0
		err = e.c.Tx(ctx, fast, func(tx *sql.Tx) error { n++; return raise(tx, "23505") })
		var pe *pgcoord.Error
		if n != 1 || pgcoord.SQLState(err) != "23505" || errors.Is(err, pgcoord.ErrRetry) || errors.As(err, &pe) {
			t.Errorf("a unique violation ran %d times, returned %v (want the caller's own error, once)", n, err)
		}
		n = 0
		o := *fast
		o.MaxAttempts = 3
		err = e.c.Tx(ctx, &o, func(tx *sql.Tx) error { n++; return raise(tx, "40P01") })
		if n != 3 || !errors.Is(err, pgcoord.ErrRetry) || pgcoord.SQLState(err) != "40P01" {
			t.Errorf("bound: %d runs, %v", n, err)
		}
		mine := errors.New("mine")
		if err := e.c.Tx(ctx, nil, func(tx *sql.Tx) error { return mine }); err != mine {
			t.Errorf("the caller's error: %v", err)
		}
	})
}

// A real deadlock: two transactions lock two rows in opposite orders; the server kills one
// (40P01), the runner runs it again, both end committed.
func TestTxDeadlockRetried(t *testing.T) {
	eachDriver(t, func(t *testing.T, e *env) {
		ctx := context.Background()
		table := q(fmt.Sprintf("goclient_dl_%d_%s", os.Getpid(), e.driver))
		if _, err := e.other.Exec("CREATE TABLE " + table + " (id int PRIMARY KEY, n int); INSERT INTO " + table + " VALUES (1, 0), (2, 0)"); err != nil {
			t.Fatal(err)
		}
		defer func() { _, _ = e.other.Exec("DROP TABLE " + table) }()
		var mu sync.Mutex
		runs, retries := 0, 0
		both := make(chan struct{})
		var once sync.Once
		var arrived int
		var wg sync.WaitGroup
		errs := make([]error, 2)
		for i := 0; i < 2; i++ {
			i := i
			wg.Add(1)
			go func() {
				defer wg.Done()
				first, second := 1+i, 2-i
				errs[i] = e.c.Tx(ctx, &pgcoord.TxOptions{OnRetry: func(int, error) {
					mu.Lock()
					retries++
					mu.Unlock()
				}}, func(tx *sql.Tx) error {
					mu.Lock()
					runs++
					mu.Unlock()
					if _, err := tx.Exec("UPDATE "+table+" SET n = n + 1 WHERE id = $1", first); err != nil {
						return err
					}
					mu.Lock()
					arrived++
					if arrived == 2 {
						once.Do(func() { close(both) })
					}
					mu.Unlock()
					select {
					case <-both:
					case <-time.After(5 * time.Second):
					}
					_, err := tx.Exec("UPDATE "+table+" SET n = n + 1 WHERE id = $1", second)
					return err
				})
			}()
		}
		wg.Wait()
		if errs[0] != nil || errs[1] != nil {
			t.Fatalf("errors: %v, %v", errs[0], errs[1])
		}
		var total int
		if err := e.other.QueryRow("SELECT sum(n) FROM " + table).Scan(&total); err != nil {
			t.Fatal(err)
		}
		if total != 4 || retries < 1 {
			t.Errorf("sum %d (want 4), %d runs, %d retries (want at least one)", total, runs, retries)
		}
	})
}

// The session ends while COMMIT runs (a deferred trigger holds it): the runner says the
// outcome is unknown, and does not run the function again.
func TestTxCommitUnknown(t *testing.T) {
	eachDriver(t, func(t *testing.T, e *env) {
		ctx := context.Background()
		table := q(fmt.Sprintf("goclient_cu_%d_%s", os.Getpid(), e.driver))
		fn := q(fmt.Sprintf("goclient_cu_slow_%d_%s", os.Getpid(), e.driver))
		for _, s := range []string{
			"CREATE TABLE " + table + " (id int)",
			"CREATE FUNCTION " + fn + "() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN PERFORM pg_sleep(30); RETURN NULL; END $$",
			"CREATE CONSTRAINT TRIGGER slow AFTER INSERT ON " + table + " DEFERRABLE INITIALLY DEFERRED FOR EACH ROW EXECUTE FUNCTION " + fn + "()",
		} {
			if _, err := e.other.Exec(s); err != nil {
				t.Fatal(err)
			}
		}
		defer func() { _, _ = e.other.Exec("DROP TABLE " + table + "; DROP FUNCTION " + fn + "()") }()
		pid := make(chan int, 1)
		go func() {
			p := <-pid
			end := time.Now().Add(20 * time.Second)
			for time.Now().Before(end) {
				var inCommit bool
				_ = e.other.QueryRow("SELECT state = 'active' AND query ILIKE 'commit%' FROM pg_stat_activity WHERE pid = $1", p).Scan(&inCommit)
				if inCommit {
					_, _ = e.other.Exec("SELECT pg_terminate_backend($1)", p)
					return
				}
				time.Sleep(20 * time.Millisecond)
			}
		}()
		runs := 0
		err := e.c.Tx(ctx, nil, func(tx *sql.Tx) error {
			runs++
			var p int
			if err := tx.QueryRow("SELECT pg_backend_pid()").Scan(&p); err != nil {
				return err
			}
			if runs == 1 {
				pid <- p
			}
			_, err := tx.Exec("INSERT INTO " + table + " VALUES (1)")
			return err
		})
		if !errors.Is(err, pgcoord.ErrCommitUnknown) || !errors.Is(err, pgcoord.ErrLost) || runs != 1 {
			t.Errorf("commit on a terminated session: %v after %d runs", err, runs)
		}
	})
}

func TestLeaseAndFencing(t *testing.T) {
	eachDriver(t, func(t *testing.T, e *env) {
		ctx := context.Background()
		name := e.prefix + "leader"
		cctx, cancel := context.WithTimeout(ctx, 20*time.Second)
		defer cancel()
		// A name new on this timeline is held back one TTL: Campaign waits it out.
		a, err := e.c.Campaign(cctx, name, "a", 600*time.Millisecond, nil)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := e.c.Acquire(ctx, name, "b", 600*time.Millisecond, nil); !errors.Is(err, pgcoord.ErrLeaseHeld) || !errors.Is(err, pgcoord.ErrConflict) {
			t.Errorf("second holder: %v", err)
		}
		// Held across several TTLs by the background renewal.
		time.Sleep(1500 * time.Millisecond)
		if closed(a.Lost()) {
			t.Fatalf("lost while renewed: %v", a.Err())
		}
		write := func(token int64) error {
			return e.c.Tx(ctx, nil, func(tx *sql.Tx) error { return e.c.FenceCheck(ctx, tx, name, token) })
		}
		if err := write(a.Token()); err != nil {
			t.Errorf("fence check with the current token: %v", err)
		}
		// Someone ends a's lease behind its back: the next renewal sees it, Lost closes.
		var st string
		if err := e.other.QueryRow(fmt.Sprintf("SELECT %s.lease_release($1, $2)", q(schema)), name, a.Token()).Scan(&st); err != nil || st != "ok" {
			t.Fatalf("release behind its back: %q %v", st, err)
		}
		select {
		case <-a.Lost():
		case <-time.After(10 * time.Second):
			t.Fatal("Lost not closed after the lease was released behind its back")
		}
		if !errors.Is(a.Err(), pgcoord.ErrLeaseLost) {
			t.Errorf("Err = %v", a.Err())
		}
		b, err := e.c.Campaign(cctx, name, "b", 600*time.Millisecond, nil)
		if err != nil {
			t.Fatal(err)
		}
		if b.Token() <= a.Token() {
			t.Errorf("tokens %d then %d", a.Token(), b.Token())
		}
		err = write(a.Token())
		var pe *pgcoord.Error
		if !errors.Is(err, pgcoord.ErrFenced) || !errors.As(err, &pe) || pe.SQLState != "PCF01" || pe.Class != pgcoord.ClassFenced {
			t.Errorf("stale token: %v", err)
		}
		if err := write(b.Token() + 1000); !errors.Is(err, pgcoord.ErrNotFound) {
			t.Errorf("a token never granted: %v", err)
		}
		if err := b.Release(ctx); err != nil {
			t.Error(err)
		}
		// Without renewal, Lost closes when the TTL passes.
		c, err := e.c.Acquire(ctx, name, "c", 300*time.Millisecond, &pgcoord.LeaseOptions{NoAutoRenew: true})
		if err != nil {
			t.Fatal(err)
		}
		select {
		case <-c.Lost():
		case <-time.After(5 * time.Second):
			t.Fatal("Lost not closed after the TTL passed without renewal")
		}
		if err := c.Renew(ctx); !errors.Is(err, pgcoord.ErrLeaseLost) {
			t.Errorf("Renew after the loss: %v", err)
		}
		if _, err := e.c.Acquire(ctx, "", "x", time.Second, nil); !errors.Is(err, pgcoord.ErrUsage) {
			t.Errorf("empty lease name: %v", err)
		}
	})
}

func TestEnqueue(t *testing.T) {
	eachDriver(t, func(t *testing.T, e *env) {
		ctx := context.Background()
		queue := e.prefix + "q"
		exists := func(id int64) (status string) {
			_ = e.other.QueryRow(fmt.Sprintf("SELECT status FROM %s.jobs WHERE id = $1", q(schema)), id).Scan(&status)
			return status
		}
		// In a transaction that rolls back: the job never exists.
		tx, err := e.db.BeginTx(ctx, nil)
		if err != nil {
			t.Fatal(err)
		}
		id, err := e.c.Enqueue(ctx, tx, queue, map[string]int{"n": 1}, nil)
		if err != nil || id <= 0 {
			t.Fatalf("enqueue: %d %v", id, err)
		}
		_ = tx.Rollback()
		if s := exists(id); s != "" {
			t.Errorf("a job enqueued in a rolled back transaction exists: %s", s)
		}
		tx, _ = e.db.BeginTx(ctx, nil)
		id, err = e.c.Enqueue(ctx, tx, queue, json.RawMessage(`{"n": 2}`), &pgcoord.EnqueueOptions{UniqueKey: "u1", Priority: 5})
		if err != nil {
			t.Fatal(err)
		}
		if err := tx.Commit(); err != nil {
			t.Fatal(err)
		}
		if s := exists(id); s != "pending" {
			t.Errorf("committed job: %q", s)
		}
		if _, err := e.c.Enqueue(ctx, e.db, queue, 3, &pgcoord.EnqueueOptions{UniqueKey: "u1"}); !errors.Is(err, pgcoord.ErrDuplicate) {
			t.Errorf("taken unique key: %v", err)
		}
		later, err := e.c.Enqueue(ctx, e.db, queue, "later", &pgcoord.EnqueueOptions{RunAt: time.Now().Add(time.Hour),
			MaxAttempts: 3, MaxDeferrals: new(int), Key: "k"})
		if err != nil || exists(later) != "scheduled" {
			t.Errorf("scheduled: %v %q", err, exists(later))
		}
		after, err := e.c.Enqueue(ctx, e.db, queue, "after", &pgcoord.EnqueueOptions{After: []int64{id}})
		if err != nil || exists(after) != "waiting" {
			t.Errorf("waiting for a dependency: %v %q", err, exists(after))
		}
		ids, err := e.c.EnqueueMany(ctx, e.db, queue, []pgcoord.NewJob{
			{Payload: "a", UniqueKey: `qu"ote\`}, {Payload: "b", UniqueKey: "u1"}, {Payload: nil},
		}, nil)
		if err != nil || len(ids) != 3 || ids[0] <= 0 || ids[1] != 0 || ids[2] <= ids[0] {
			t.Errorf("many: %v %v", ids, err)
		}
		var uk string
		_ = e.other.QueryRow(fmt.Sprintf("SELECT unique_key FROM %s.jobs WHERE id = $1", q(schema)), ids[0]).Scan(&uk)
		if uk != `qu"ote\` {
			t.Errorf("unique key stored as %q", uk)
		}
		checks := []struct {
			err  error
			code string
			is   error
		}{
			{func() error { _, err := e.c.Enqueue(ctx, e.db, "", 1, nil); return err }(), "22023", pgcoord.ErrUsage},
			{func() error { _, err := e.c.Enqueue(ctx, e.db, queue, json.RawMessage("{"), nil); return err }(), "22P02", pgcoord.ErrUsage},
			{func() error {
				_, err := e.c.Enqueue(ctx, e.db, queue, 1, &pgcoord.EnqueueOptions{Group: e.prefix + "nogroup"})
				return err
			}(), "P0002", pgcoord.ErrNotFound},
			{func() error {
				_, err := e.c.Enqueue(ctx, e.db, queue, 1, &pgcoord.EnqueueOptions{Priority: 40000})
				return err
			}(), "22023", pgcoord.ErrUsage},
		}
		for i, c := range checks {
			if pgcoord.SQLState(c.err) != c.code || !errors.Is(c.err, c.is) {
				t.Errorf("refusal %d: %v, want SQLSTATE %s", i, c.err, c.code)
			}
		}
	})
}

// Command worker is the Go client's bench program for bench/clients/run (the contract is in
// bench/clients/README.md): PGCOORD_BENCH_MODE=work runs the client's Worker (pgx v4's stdlib
// driver, LISTEN unless PGCOORD_BENCH_LISTEN=0), enqueue times one EnqueueMany, and locks counts
// try-lock + unlock pairs of one name through the client's session locks.
package main

import (
	"bufio"
	"context"
	"database/sql"
	"encoding/json"
	"fmt"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"time"

	_ "github.com/jackc/pgx/v4/stdlib"

	pgcoord "github.com/pgcoord/pgcoord/clients/go"
)

var out = bufio.NewWriter(os.Stdout)

func die(format string, args ...interface{}) {
	_ = out.Flush()
	fmt.Fprintf(os.Stderr, "bench worker: "+format+"\n", args...)
	os.Exit(1)
}

func envInt(name string, def int) int {
	v := os.Getenv(name)
	if v == "" {
		return def
	}
	n, err := strconv.Atoi(v)
	if err != nil {
		die("%s is not an integer: %q", name, v)
	}
	return n
}

func main() {
	ctx := context.Background()
	db, err := sql.Open("pgx", os.Getenv("PGCOORD_BENCH_DSN"))
	if err != nil {
		die("%v", err)
	}
	db.SetMaxIdleConns(64)
	c, err := pgcoord.New(ctx, db, &pgcoord.Options{Schema: os.Getenv("PGCOORD_BENCH_SCHEMA")})
	if err != nil {
		die("%v", err)
	}
	queue := os.Getenv("PGCOORD_BENCH_QUEUE")
	switch mode := os.Getenv("PGCOORD_BENCH_MODE"); mode {
	case "work":
		work(ctx, c, queue)
	case "enqueue":
		n := envInt("PGCOORD_BENCH_JOBS", 1000)
		jobs := make([]pgcoord.NewJob, n)
		for i := range jobs {
			jobs[i].Payload = json.RawMessage(`{"i": ` + strconv.Itoa(i) + `}`)
		}
		t0 := time.Now()
		if _, err := c.EnqueueMany(ctx, db, queue, jobs, nil); err != nil {
			die("%v", err)
		}
		fmt.Fprintf(out, "{\"enqueued\": %d, \"seconds\": %.6f}\n", n, time.Since(t0).Seconds())
	case "locks":
		secs := envInt("PGCOORD_BENCH_SECONDS", 5)
		name := "bench-lock-" + queue
		end := time.Now().Add(time.Duration(secs) * time.Second)
		t0 := time.Now()
		pairs := 0
		for time.Now().Before(end) {
			l, err := c.TryLock(ctx, name, nil)
			if err != nil {
				die("try lock: %v", err)
			}
			if err := l.Unlock(ctx); err != nil {
				die("unlock: %v", err)
			}
			pairs++
		}
		fmt.Fprintf(out, "{\"pairs\": %d, \"seconds\": %.6f}\n", pairs, time.Since(t0).Seconds())
	default:
		die("PGCOORD_BENCH_MODE must be work, enqueue or locks, got %q", mode)
	}
	_ = out.Flush()
}

func work(ctx context.Context, c *pgcoord.Client, queue string) {
	conc := envInt("PGCOORD_BENCH_CONCURRENCY", 16)
	stopAfter := int64(envInt("PGCOORD_BENCH_STOP_AFTER", 0))
	handler := os.Getenv("PGCOORD_BENCH_HANDLER")
	var sleep time.Duration
	switch {
	case handler == "" || handler == "noop" || handler == "latency":
	case strings.HasPrefix(handler, "sleep:"):
		ms, err := strconv.Atoi(strings.TrimPrefix(handler, "sleep:"))
		if err != nil {
			die("bad handler %q", handler)
		}
		sleep = time.Duration(ms) * time.Millisecond
	default:
		die("PGCOORD_BENCH_HANDLER must be noop, sleep:MS or latency, got %q", handler)
	}
	w := pgcoord.NewWorker(c, pgcoord.WorkerOptions{Concurrency: conc, NoListen: os.Getenv("PGCOORD_BENCH_LISTEN") == "0",
		Lease: time.Duration(envInt("PGCOORD_BENCH_LEASE_MS", 30000)) * time.Millisecond})
	// SIGTERM stops it gracefully (0 as PGCOORD_BENCH_STOP_AFTER: only SIGTERM does).
	term := make(chan os.Signal, 1)
	signal.Notify(term, syscall.SIGTERM)
	go func() {
		<-term
		w.Stop(30 * time.Second)
	}()
	var handled int64
	var lat = make(chan int64, 4096)
	done := make(chan struct{})
	go func() {
		for v := range lat {
			fmt.Fprintf(out, "lat_us %d\n", v)
		}
		close(done)
	}()
	w.Handle(queue, func(ctx context.Context, j *pgcoord.Job) (interface{}, error) {
		if handler == "latency" {
			now := time.Now().UnixMicro()
			var p struct {
				T int64 `json:"t_us"`
			}
			if err := j.Decode(&p); err != nil {
				return nil, err
			}
			lat <- now - p.T
		}
		if sleep > 0 {
			select {
			case <-time.After(sleep):
			case <-ctx.Done():
				return nil, ctx.Err()
			}
		}
		if n := atomic.AddInt64(&handled, 1); stopAfter > 0 && n == stopAfter {
			w.Stop(30 * time.Second)
		}
		return nil, nil
	})
	fmt.Fprintln(out, "ready")
	_ = out.Flush()
	if err := w.Run(ctx); err != nil {
		die("%v", err)
	}
	close(lat)
	<-done
	fmt.Fprintf(out, "{\"handled\": %d}\n", atomic.LoadInt64(&handled))
}

package drivertest

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	pgcoord "github.com/pgcoord/pgcoord/clients/go"
)

// The client behind a real PgBouncer in transaction mode (PGCOORD_TEST_POOLER_DSN, set by
// tests/cli/client_go_pgbouncer.sh), with each driver: the probe finds it (and finds nothing
// on the direct DSN), a session lock is refused and leaves nothing held, a transaction lock
// works, the worker polls instead of LISTEN and works its jobs, WaitResult polls.
func TestBehindPgBouncer(t *testing.T) {
	bouncer := os.Getenv("PGCOORD_TEST_POOLER_DSN")
	if bouncer == "" || dsn == "" {
		t.Skip("PGCOORD_TEST_POOLER_DSN is not set (tests/cli/client_go_pgbouncer.sh sets it)")
	}
	for _, d := range drivers {
		d := d
		t.Run(d, func(t *testing.T) {
			ctx := context.Background()
			e := pooledEnv(t, d, bouncer, "pooler")
			c := e.c
			p, err := c.Pooler(ctx, false)
			if err != nil || p.Mode != "transaction" || p.SessionKept() {
				t.Fatalf("Pooler behind PgBouncer: %+v, %v", p, err)
			}
			t.Logf("behind PgBouncer: %s", p.Why)
			cd, err := pgcoord.New(ctx, e.other, &pgcoord.Options{Schema: schema})
			if err != nil {
				t.Fatal(err)
			}
			if pd, err := cd.Pooler(ctx, false); err != nil || pd.Mode != "none" {
				t.Errorf("Pooler direct: %+v, %v", pd, err)
			}

			name := e.prefix + "lock"
			sessionLocksRefused(t, e, name, "transaction-mode pooler is in between", "XactLock")

			tx, err := e.db.BeginTx(ctx, nil)
			if err != nil {
				t.Fatal(err)
			}
			if err := c.XactLock(ctx, tx, name, &pgcoord.LockOptions{Timeout: time.Second}); err != nil {
				t.Fatalf("XactLock behind PgBouncer: %v", err)
			}
			if n := e.held(t, name); n != 1 {
				t.Errorf("the transaction lock: %d held, want 1", n)
			}
			_ = tx.Rollback()
			poll(t, 10*time.Second, "the transaction lock to go with its rollback", func() bool { return e.held(t, name) == 0 })

			queue := e.prefix + "q"
			var logs []string
			var mu sync.Mutex
			w := pgcoord.NewWorker(c, pgcoord.WorkerOptions{Concurrency: 4, Lease: 5 * time.Second,
				PollInterval: 300 * time.Millisecond, Logf: func(f string, a ...interface{}) {
					mu.Lock()
					logs = append(logs, fmt.Sprintf(f, a...))
					mu.Unlock()
				}})
			w.Handle(queue, func(ctx context.Context, j *pgcoord.Job) (interface{}, error) {
				return map[string]int64{"id": j.ID}, nil
			})
			runWorker(t, w)
			var ids []int64
			for i := 0; i < 20; i++ {
				id, err := c.Enqueue(ctx, e.db, queue, map[string]int{"i": i}, nil)
				if err != nil {
					t.Fatal(err)
				}
				ids = append(ids, id)
			}
			for _, id := range ids {
				wctx, cancel := context.WithTimeout(ctx, 30*time.Second)
				info, err := c.WaitResult(wctx, id, nil)
				cancel()
				if err != nil || info.Status != "succeeded" {
					t.Fatalf("job %d behind PgBouncer: %v %+v", id, err, info)
				}
			}
			mu.Lock()
			joined := strings.Join(logs, "\n")
			mu.Unlock()
			if !strings.Contains(joined, "no LISTEN, polling") {
				t.Errorf("the worker did not say it polls behind the pooler; its log:\n%s", joined)
			}
		})
	}
}

// The client behind a PgBouncer in statement mode (PGCOORD_TEST_POOLER_STATEMENT_DSN), which
// refuses transactions: the probe says "statement" and a session lock is refused, naming it,
// with nothing left held.
func TestBehindPgBouncerStatementMode(t *testing.T) {
	bouncer := os.Getenv("PGCOORD_TEST_POOLER_STATEMENT_DSN")
	if bouncer == "" || dsn == "" {
		t.Skip("PGCOORD_TEST_POOLER_STATEMENT_DSN is not set (tests/cli/client_go_pgbouncer.sh sets it)")
	}
	for _, d := range drivers {
		d := d
		t.Run(d, func(t *testing.T) {
			ctx := context.Background()
			e := pooledEnv(t, d, bouncer, "stmtpooler")
			p, err := e.c.Pooler(ctx, false)
			if err != nil || p.Mode != "statement" || p.SessionKept() {
				t.Fatalf("Pooler behind PgBouncer in statement mode: %+v, %v", p, err)
			}
			t.Logf("behind PgBouncer in statement mode: %s", p.Why)
			sessionLocksRefused(t, e, e.prefix+"lock", "statement-mode pooler is in between")
		})
	}
}

// pooledEnv is driver d's view of the server through the pooler at bouncer: a pool with the
// driver's setting for a transaction-mode pooler (clients/go/README.md: pgx's statement cache
// prepares named statements, which the pooler cannot keep, and lib/pq sends a statement's
// Parse and its Bind in two round trips, which it may route to two server sessions;
// binary_parameters makes it one), its client, and a direct pool that watches.
func pooledEnv(t *testing.T, d, bouncer, tag string) *env {
	t.Helper()
	bdsn := withParams(bouncer, "statement_cache_mode", "describe")
	if d == "postgres" {
		bdsn = withParams(bouncer, "binary_parameters", "yes")
	}
	e := &env{driver: d, db: open(t, d, bdsn), other: open(t, d, dsn),
		prefix: fmt.Sprintf("goclient-%d-%s-%s-", os.Getpid(), d, tag)}
	c, err := pgcoord.New(context.Background(), e.db, &pgcoord.Options{Schema: schema})
	if err != nil {
		t.Fatal(err)
	}
	e.c = c
	return e
}

// sessionLocksRefused checks that TryLock and Lock of name are refused with ErrPooler (a usage
// error) whose message has every one of want, and that nothing is left held.
func sessionLocksRefused(t *testing.T, e *env, name string, want ...string) {
	t.Helper()
	ctx := context.Background()
	for _, try := range []bool{true, false} {
		var l *pgcoord.Lock
		var err error
		if try {
			l, err = e.c.TryLock(ctx, name, nil)
		} else {
			l, err = e.c.Lock(ctx, name, &pgcoord.LockOptions{Timeout: time.Second})
		}
		ok := l == nil && errors.Is(err, pgcoord.ErrPooler) && errors.Is(err, pgcoord.ErrUsage)
		for _, w := range want {
			ok = ok && strings.Contains(err.Error(), w)
		}
		if !ok {
			t.Errorf("session lock (try %v) behind PgBouncer: %v, %v", try, l, err)
		}
	}
	if n := e.held(t, name); n != 0 {
		t.Errorf("%d advisory locks held after the refused session locks", n)
	}
}

package drivertest

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	pgcoord "github.com/pgcoord/pgcoord/clients/go"
)

func TestProtocolVersion(t *testing.T) {
	eachDriver(t, func(t *testing.T, e *env) {
		ctx := context.Background()
		_, err := pgcoord.New(ctx, e.db, &pgcoord.Options{Schema: "no_such_schema_goclient"})
		if !errors.Is(err, pgcoord.ErrProtocolVersion) || !strings.Contains(err.Error(), "pgcoord init --schema no_such_schema_goclient") {
			t.Errorf("missing schema: %v", err)
		}
		// A schema speaking another version, with a name that needs quoting.
		odd := fmt.Sprintf(`goclient "v2" %d %s`, os.Getpid(), e.driver)
		if _, err := e.other.Exec("CREATE SCHEMA " + q(odd)); err != nil {
			t.Fatal(err)
		}
		defer func() { _, _ = e.other.Exec("DROP SCHEMA " + q(odd) + " CASCADE") }()
		if _, err := e.other.Exec("CREATE FUNCTION " + q(odd) + ".protocol_version() RETURNS integer LANGUAGE sql AS 'SELECT 2'"); err != nil {
			t.Fatal(err)
		}
		_, err = pgcoord.New(ctx, e.db, &pgcoord.Options{Schema: odd})
		if !errors.Is(err, pgcoord.ErrProtocolVersion) || !strings.Contains(err.Error(), "speaks protocol version 2, this client speaks version 1") ||
			!strings.Contains(err.Error(), "pgcoord init") {
			t.Errorf("version 2: %v", err)
		}
		if _, err := e.other.Exec("CREATE OR REPLACE FUNCTION " + q(odd) + ".protocol_version() RETURNS integer LANGUAGE sql AS 'SELECT 1'"); err != nil {
			t.Fatal(err)
		}
		if _, err := pgcoord.New(ctx, e.db, &pgcoord.Options{Schema: odd}); err != nil {
			t.Errorf("version 1 in a schema whose name needs quoting: %v", err)
		}
		if _, err := pgcoord.New(ctx, e.db, &pgcoord.Options{Schema: "a$b"}); !errors.Is(err, pgcoord.ErrUsage) {
			t.Errorf("bad schema name: %v", err)
		}
	})
}

func TestLockAndUnlock(t *testing.T) {
	eachDriver(t, func(t *testing.T, e *env) {
		ctx := context.Background()
		name := e.prefix + "x"
		l, err := e.c.Lock(ctx, name, &pgcoord.LockOptions{Timeout: time.Second})
		if err != nil {
			t.Fatal(err)
		}
		if l.Key() != pgcoord.Key(name) || l.Name() != name {
			t.Error("key and name")
		}
		if n := e.held(t, name); n != 1 {
			t.Errorf("held %d", n)
		}
		_, err = e.c.TryLock(ctx, name, nil)
		var pe *pgcoord.Error
		if !errors.Is(err, pgcoord.ErrLockBusy) || !errors.As(err, &pe) || pe.Class != pgcoord.ClassConflict {
			t.Errorf("second TryLock: %v", err)
		}
		if err := l.Unlock(ctx); err != nil {
			t.Fatal(err)
		}
		if n := e.held(t, name); n != 0 {
			t.Errorf("held %d after Unlock", n)
		}
		if err := l.Unlock(ctx); !errors.Is(err, pgcoord.ErrNotHeld) {
			t.Errorf("second Unlock: %v", err)
		}
		if closed(l.Lost()) {
			t.Error("Lost closed by Unlock")
		}
		poll(t, 5*time.Second, "every connection back in the pool", func() bool { return e.db.Stats().InUse == 0 })
		for _, bad := range []string{"", strings.Repeat("x", 256), "bad\xff"} {
			if _, err := e.c.Lock(ctx, bad, nil); !errors.Is(err, pgcoord.ErrUsage) {
				t.Errorf("Lock(%q): %v", bad, err)
			}
		}
		// Shared holders share; an exclusive one waits for them.
		s1, err := e.c.TryLock(ctx, name, &pgcoord.LockOptions{Shared: true})
		if err != nil {
			t.Fatal(err)
		}
		s2, err := e.c.TryLock(ctx, name, &pgcoord.LockOptions{Shared: true})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := e.c.TryLock(ctx, name, nil); !errors.Is(err, pgcoord.ErrLockBusy) {
			t.Errorf("exclusive over shared: %v", err)
		}
		if err := s1.Unlock(ctx); err != nil {
			t.Error(err)
		}
		if err := s2.Unlock(ctx); err != nil {
			t.Error(err)
		}
	})
}

// The wait's bound is the caller's, whatever the session's statement_timeout and lock_timeout:
// a statement_timeout of 100 ms does not cut a 1.5 s wait short, and a lock_timeout of 60 s
// does not stretch a 300 ms one.
func TestLockWaitBound(t *testing.T) {
	eachDriver(t, func(t *testing.T, e *env) {
		ctx := context.Background()
		name := e.prefix + "w"
		db := open(t, e.driver, withParams(dsn, "statement_timeout", "100", "lock_timeout", "60000"))
		c, err := pgcoord.New(ctx, db, &pgcoord.Options{Schema: schema})
		if err != nil {
			t.Fatal(err)
		}
		var st string
		if err := db.QueryRow("SHOW statement_timeout").Scan(&st); err != nil || st != "100ms" {
			t.Fatalf("the session's statement_timeout is %q (%v), want 100ms", st, err)
		}
		a, err := e.c.Lock(ctx, name, nil)
		if err != nil {
			t.Fatal(err)
		}
		t0 := time.Now()
		_, err = c.Lock(ctx, name, &pgcoord.LockOptions{Timeout: 300 * time.Millisecond})
		took := time.Since(t0)
		if !errors.Is(err, pgcoord.ErrLockTimeout) || took < 280*time.Millisecond || took > 5*time.Second {
			t.Errorf("timed wait: %v after %v", err, took)
		}
		if n := e.waiting(t, name); n != 0 {
			t.Errorf("%d sessions still queued after a timeout", n)
		}
		// The same bound from the context's deadline.
		dctx, cancel := context.WithTimeout(ctx, 300*time.Millisecond)
		_, err = c.Lock(dctx, name, nil)
		cancel()
		if !errors.Is(err, pgcoord.ErrLockTimeout) {
			t.Errorf("wait bounded by the context: %v", err)
		}
		go func() {
			time.Sleep(600 * time.Millisecond)
			_ = a.Unlock(ctx)
		}()
		t0 = time.Now()
		b, err := c.Lock(ctx, name, &pgcoord.LockOptions{Timeout: 5 * time.Second})
		if err != nil {
			t.Fatalf("a wait longer than the session's statement_timeout: %v after %v", err, time.Since(t0))
		}
		if err := b.Unlock(ctx); err != nil {
			t.Error(err)
		}
		// The session's own settings are back after the wait.
		if err := db.QueryRow("SHOW statement_timeout").Scan(&st); err != nil || st != "100ms" {
			t.Errorf("statement_timeout after a wait is %q (%v)", st, err)
		}
		// A cancel ends the wait too, and leaves nothing queued or held.
		a, err = e.c.Lock(ctx, name, nil)
		if err != nil {
			t.Fatal(err)
		}
		cctx, ccancel := context.WithCancel(ctx)
		go func() { time.Sleep(200 * time.Millisecond); ccancel() }()
		_, err = c.Lock(cctx, name, nil)
		if err == nil || errors.Is(err, pgcoord.ErrLockTimeout) {
			t.Errorf("cancelled wait: %v", err)
		}
		poll(t, 5*time.Second, "no session queued after a cancel", func() bool { return e.waiting(t, name) == 0 })
		if err := a.Unlock(ctx); err != nil {
			t.Error(err)
		}
	})
}

// A terminated session: Lost closes within the heartbeat's bound, Unlock says lost, and the
// lock is free for others.
func TestLockLostWhenSessionTerminated(t *testing.T) {
	eachDriver(t, func(t *testing.T, e *env) {
		ctx := context.Background()
		name := e.prefix + "t"
		l, err := e.c.Lock(ctx, name, nil)
		if err != nil {
			t.Fatal(err)
		}
		pid := e.holderPid(t, name)
		if _, err := e.other.Exec("SELECT pg_terminate_backend($1)", pid); err != nil {
			t.Fatal(err)
		}
		t0 := time.Now()
		select {
		case <-l.Lost():
		case <-time.After(15 * time.Second):
			t.Fatal("Lost not closed 15 s after the session was terminated")
		}
		t.Logf("%s: lost seen %v after pg_terminate_backend", e.driver, time.Since(t0).Round(time.Millisecond))
		if !errors.Is(l.Err(), pgcoord.ErrLockLost) || !errors.Is(l.Err(), pgcoord.ErrLost) {
			t.Errorf("Err = %v", l.Err())
		}
		if err := l.Unlock(ctx); !errors.Is(err, pgcoord.ErrLockLost) {
			t.Errorf("Unlock of a lost lock: %v", err)
		}
		l2, err := e.c.TryLock(ctx, name, nil)
		if err != nil {
			t.Fatalf("the lock should be free: %v", err)
		}
		if err := l2.Unlock(ctx); err != nil {
			t.Error(err)
		}
	})
}

func TestXactLock(t *testing.T) {
	eachDriver(t, func(t *testing.T, e *env) {
		ctx := context.Background()
		name := e.prefix + "x"
		tx1, err := e.db.BeginTx(ctx, nil)
		if err != nil {
			t.Fatal(err)
		}
		if err := e.c.XactLock(ctx, tx1, name, &pgcoord.LockOptions{Timeout: time.Second}); err != nil {
			t.Fatal(err)
		}
		tx2, err := e.db.BeginTx(ctx, nil)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := tx2.Exec("SET LOCAL statement_timeout = '4s'"); err != nil {
			t.Fatal(err)
		}
		if err := e.c.TryXactLock(ctx, tx2, name, nil); !errors.Is(err, pgcoord.ErrLockBusy) {
			t.Errorf("TryXactLock while held: %v", err)
		}
		t0 := time.Now()
		err = e.c.XactLock(ctx, tx2, name, &pgcoord.LockOptions{Timeout: 200 * time.Millisecond})
		if !errors.Is(err, pgcoord.ErrLockTimeout) || time.Since(t0) < 180*time.Millisecond {
			t.Errorf("XactLock timeout: %v after %v", err, time.Since(t0))
		}
		// The transaction is still usable, with its own settings back.
		var st string
		if err := tx2.QueryRow("SHOW statement_timeout").Scan(&st); err != nil || st != "4s" {
			t.Errorf("tx2 after the timeout: %q, %v", st, err)
		}
		_ = tx1.Rollback()
		if err := e.c.TryXactLock(ctx, tx2, name, nil); err != nil {
			t.Errorf("after the holder rolled back: %v", err)
		}
		if n := e.held(t, name); n != 1 {
			t.Errorf("held %d", n)
		}
		_ = tx2.Commit()
		if n := e.held(t, name); n != 0 {
			t.Errorf("held %d after commit", n)
		}
		var nilTx *sql.Tx
		if err := e.c.XactLock(ctx, nilTx, name, nil); !errors.Is(err, pgcoord.ErrUsage) {
			t.Errorf("nil tx: %v", err)
		}
	})
}

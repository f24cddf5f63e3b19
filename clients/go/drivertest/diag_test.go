package drivertest

import (
	"context"
	"database/sql"
	"errors"
	"reflect"
	"testing"
	"time"

	pgcoord "github.com/pgcoord/pgcoord/clients/go"
)

// A real chain: A holds the lock of a name (the client's Lock), B holds a row lock and waits
// for A's lock, C waits for B's row. The forest has A as the root, B below it and C below B;
// lock_holders of the name has A granted and B waiting.
func TestDiagnostics(t *testing.T) {
	eachDriver(t, func(t *testing.T, e *env) {
		ctx := context.Background()
		name := e.prefix + "diag"
		table := q(schema) + "." + q("diag_"+e.driver)
		if _, err := e.other.Exec("CREATE TABLE " + table + " (id int PRIMARY KEY)"); err != nil {
			t.Fatal(err)
		}
		defer func() { _, _ = e.other.Exec("DROP TABLE IF EXISTS " + table) }()
		if _, err := e.other.Exec("INSERT INTO " + table + " VALUES (1)"); err != nil {
			t.Fatal(err)
		}

		a, err := e.c.Lock(ctx, name, &pgcoord.LockOptions{Timeout: time.Second})
		if err != nil {
			t.Fatal(err)
		}
		defer func() { _ = a.Unlock(ctx) }()
		pa := e.holderPid(t, name)

		// B and C on connections of their own; each one's blocking statement runs in a
		// goroutine, and the cleanup ends both sessions whatever the test's outcome.
		var pids []int
		var done []chan error
		defer func() {
			for _, p := range pids {
				_, _ = e.other.Exec("SELECT pg_catalog.pg_terminate_backend($1)", p)
			}
			for _, ch := range done {
				select {
				case <-ch:
				case <-time.After(30 * time.Second):
					t.Error("a blocked session did not end after its backend was terminated")
				}
			}
		}()
		session := func(stmts ...string) (*sql.Conn, int) {
			conn, err := e.other.Conn(ctx)
			if err != nil {
				t.Fatal(err)
			}
			var pid int
			if err := conn.QueryRowContext(ctx, "SELECT pg_catalog.pg_backend_pid()").Scan(&pid); err != nil {
				_ = conn.Close()
				t.Fatal(err)
			}
			pids = append(pids, pid)
			for _, s := range stmts {
				if _, err := conn.ExecContext(ctx, s); err != nil {
					t.Fatal(err)
				}
			}
			return conn, pid
		}
		block := func(conn *sql.Conn, stmt string, args ...interface{}) {
			ch := make(chan error, 1)
			done = append(done, ch)
			go func() {
				_, err := conn.ExecContext(ctx, stmt, args...)
				_ = conn.Close()
				ch <- err
			}()
		}
		cb, pb := session("BEGIN", "SELECT id FROM "+table+" WHERE id = 1 FOR UPDATE")
		block(cb, "SELECT pg_catalog.pg_advisory_lock($1::bigint)", pgcoord.Key(name))
		cc, pc := session("BEGIN")
		poll(t, 30*time.Second, "B waiting for A's lock", func() bool { return e.waiting(t, name) == 1 })
		block(cc, "SELECT id FROM "+table+" WHERE id = 1 FOR UPDATE")

		var f pgcoord.Forest
		poll(t, 30*time.Second, "C in the forest below B", func() bool {
			f, err = e.c.BlockingForest(ctx)
			if err != nil {
				t.Fatal(err)
			}
			s, ok := f.Session(pc)
			return ok && s.Depth == 2
		})
		ra, _ := f.Session(pa)
		rb, _ := f.Session(pb)
		rc, _ := f.Session(pc)
		if !ra.Root || ra.Depth != 0 || len(ra.BlockedBy) != 0 || !reflect.DeepEqual(ra.Blocks, []int{pb}) || ra.BlocksTotal != 2 {
			t.Errorf("A: %+v", ra)
		}
		if rb.Root || rb.Depth != 1 || !reflect.DeepEqual(rb.BlockedBy, []int{pa}) || !reflect.DeepEqual(rb.Blocks, []int{pc}) ||
			rb.WaitLocktype != "advisory" || rb.WaitMode != "ExclusiveLock" || rb.State != "active" || rb.InCycle {
			t.Errorf("B: %+v", rb)
		}
		if rc.Root || !reflect.DeepEqual(rc.BlockedBy, []int{pb}) || len(rc.Blocks) != 0 || rc.WaitLocktype != "transactionid" ||
			rc.BackendStart.IsZero() || rc.XactAge <= 0 || rc.Query == "" {
			t.Errorf("C: %+v", rc)
		}
		found := false
		for _, r := range f.Roots() {
			found = found || r.PID == pa
			if r.PID == pb || r.PID == pc {
				t.Errorf("a waiter among the roots: %+v", r)
			}
		}
		if !found {
			t.Errorf("A is not among the roots: %+v", f.Roots())
		}
		if ch := f.Children(pa); len(ch) != 1 || ch[0].PID != pb {
			t.Errorf("children of A: %+v", ch)
		}
		var tree *pgcoord.BlockingTree
		for _, tr := range f.Trees() {
			if tr.PID == pa {
				tr := tr
				tree = &tr
			}
		}
		if tree == nil || len(tree.Children) != 1 || tree.Children[0].PID != pb ||
			len(tree.Children[0].Children) != 1 || tree.Children[0].Children[0].PID != pc ||
			len(tree.Children[0].Children[0].Children) != 0 {
			t.Errorf("tree of A: %+v", tree)
		}

		for _, get := range []func() ([]pgcoord.LockHolder, error){
			func() ([]pgcoord.LockHolder, error) { return e.c.LockHolders(ctx, name) },
			func() ([]pgcoord.LockHolder, error) { return e.c.LockHoldersKey(ctx, pgcoord.Key(name)) },
		} {
			hs, err := get()
			if err != nil {
				t.Fatal(err)
			}
			if len(hs) != 2 || hs[0].PID != pa || !hs[0].Granted || hs[0].Mode != "ExclusiveLock" || hs[0].IsSelf ||
				hs[0].BackendStart.IsZero() || hs[1].PID != pb || hs[1].Granted || hs[1].State != "active" {
				t.Errorf("lock holders: %+v", hs)
			}
		}
		if hs, err := e.c.LockHolders(ctx, name+"-free"); err != nil || len(hs) != 0 {
			t.Errorf("lock holders of a free name: %+v, %v", hs, err)
		}
		if _, err := e.c.LockHolders(ctx, ""); !errors.Is(err, pgcoord.ErrUsage) {
			t.Errorf("lock holders of an empty name: %v", err)
		}
	})
}

package drivertest

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"reflect"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	pgcoord "github.com/pgcoord/pgcoord/clients/go"
)

// TestSeedLab runs the five experiments of "Advisory Locks in Postgres Used From Go Programs
// Safely" through the client, with the lab's pool settings (SetMaxOpenConns(10)), and prints
// its five lines. Lines 1 and 3 read as in the article. Lines 2, 4 and 5 show the trap closed:
//
//  2. The article takes a lock on connection A and "unlocks" it from connection B, which
//     returns false and leaves the lock held by an idle pooled connection. With the client
//     that program cannot be written: the only unlock is the method Unlock of the *Lock that
//     took the lock, which runs on the connection the *Lock owns (TestUnlockBelongsToTheHandle
//     checks the API has no other). Another caller can only try to take the lock: busy.
//  4. A session lock stacks on one session (two locks, two unlocks). The client never puts
//     two locks on one pooled session: each *Lock has its own, so there is no hidden count
//     for an unlock to miss.
//  5. Nothing leaked, so there is nothing for the pool's idle limits to clean up; and after
//     db.Close(), even a lock still held by a handle is released.
func TestSeedLab(t *testing.T) {
	eachDriver(t, func(t *testing.T, e *env) {
		ctx := context.Background()
		job := e.prefix + "nightly-report"
		var lines []string
		say := func(format string, args ...interface{}) {
			s := fmt.Sprintf(format, args...)
			fmt.Println(s)
			lines = append(lines, s)
		}

		// 1. A singleton job: five instances try, one runs it.
		var ran atomic.Int32
		var wg sync.WaitGroup
		start := make(chan struct{})
		for i := 1; i <= 5; i++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				<-start
				l, err := e.c.TryLock(ctx, job, nil)
				if errors.Is(err, pgcoord.ErrLockBusy) {
					return
				}
				if err != nil {
					t.Error(err)
					return
				}
				defer func() {
					if err := l.Unlock(ctx); err != nil {
						t.Error(err)
					}
				}()
				ran.Add(1)
				time.Sleep(150 * time.Millisecond) // the job
			}()
		}
		close(start)
		wg.Wait()
		say("1. five instances tried a singleton job, instances that ran it: %d", ran.Load())

		// 2. The pool trap, closed: the unlock can only be the handle's own.
		a, err := e.c.TryLock(ctx, job+"+1", nil)
		if err != nil {
			t.Fatal(err)
		}
		_, other := e.c.TryLock(ctx, job+"+1", nil) // another connection can only try
		heldWhile := e.held(t, job+"+1")
		unlockErr := a.Unlock(ctx)
		say("2. lock taken=%v, another connection's try while held=%v (an unlock from it cannot be written),"+
			" locks held while held: %d, after the handle's Unlock: %d",
			a != nil, errors.Is(other, pgcoord.ErrLockBusy) == false, heldWhile, e.held(t, job+"+1"))
		if unlockErr != nil {
			t.Error(unlockErr)
		}

		// 3. A transaction lock releases itself at commit or rollback.
		tx, err := e.db.BeginTx(ctx, nil)
		if err != nil {
			t.Fatal(err)
		}
		holder := e.c.TryXactLock(ctx, tx, job+"+2", nil) == nil
		var second bool
		if err := e.c.Tx(ctx, nil, func(tx2 *sql.Tx) error {
			second = e.c.TryXactLock(ctx, tx2, job+"+2", nil) == nil
			return nil
		}); err != nil {
			t.Fatal(err)
		}
		_ = tx.Rollback()
		var after bool
		if err := e.c.Tx(ctx, nil, func(tx2 *sql.Tx) error {
			after = e.c.TryXactLock(ctx, tx2, job+"+2", nil) == nil
			return nil
		}); err != nil {
			t.Fatal(err)
		}
		say("3. xact lock: holder=%v, second caller while held=%v, after rollback=%v", holder, second, after)

		// 4. Two locks of one name never share a session.
		first, err := e.c.Lock(ctx, job+"+3", &pgcoord.LockOptions{Timeout: time.Second})
		if err != nil {
			t.Fatal(err)
		}
		_, again := e.c.TryLock(ctx, job+"+3", nil)
		firstUnlock := first.Unlock(ctx) == nil
		stillHeld := e.held(t, job+"+3")
		secondUnlock := first.Unlock(ctx)
		say("4. locked twice: second lock while held=%v (one lock per handle, no count on a shared session),"+
			" first unlock=%v (locks still held: %d), second unlock=%v",
			again == nil, firstUnlock, stillHeld, errors.Is(secondUnlock, pgcoord.ErrNotHeld) == false)

		// 5. Nothing leaked into the pool; db.Close() releases what handles still hold.
		before := e.held(t, job+"+1") + e.held(t, job+"+3")
		kept, err := e.c.Lock(ctx, job+"+4", nil)
		if err != nil {
			t.Fatal(err)
		}
		_ = e.db.Close()
		poll(t, 15*time.Second, "the lock of a handle to be released after db.Close()", func() bool { return e.held(t, job+"+4") == 0 })
		<-kept.Lost()
		say("5. leaked lock rows before the pool closed its idle connections: %d, after db.Close() (a handle still holding one): %d",
			before, e.held(t, job+"+4"))
		if !errors.Is(kept.Err(), pgcoord.ErrLockLost) || !errors.Is(kept.Err(), pgcoord.ErrDBClosed) {
			t.Errorf("Err after db.Close() = %v", kept.Err())
		}

		want := []string{
			"1. five instances tried a singleton job, instances that ran it: 1",
			"2. lock taken=true, another connection's try while held=false (an unlock from it cannot be written), locks held while held: 1, after the handle's Unlock: 0",
			"3. xact lock: holder=true, second caller while held=false, after rollback=true",
			"4. locked twice: second lock while held=false (one lock per handle, no count on a shared session), first unlock=true (locks still held: 0), second unlock=false",
			"5. leaked lock rows before the pool closed its idle connections: 0, after db.Close() (a handle still holding one): 0",
		}
		if strings.Join(lines, "\n") != strings.Join(want, "\n") {
			t.Errorf("the lab printed\n%s\nwant\n%s", strings.Join(lines, "\n"), strings.Join(want, "\n"))
		}
	})
}

// TestUnlockBelongsToTheHandle checks the API that makes the seed's experiment 2 impossible to
// write. That experiment needs "unlock key K" to be callable from anywhere; the client offers
// only (*Lock).Unlock(ctx), a method of the handle that took the lock, and the handle does not
// expose its connection. What follows is a compile-time property, checked here by reflection
// so that a change to the API fails a test: no method of Client unlocks or releases a lock by
// name (LeaseRelease ends a lease, which no session holds, by its token; ReleaseJobs returns
// claimed jobs to their queue by their claim tokens),
// *Lock has no exported field (its *sql.Conn is unexported), and Unlock takes only a context.
func TestUnlockBelongsToTheHandle(t *testing.T) {
	ct := reflect.TypeOf(&pgcoord.Client{})
	for i := 0; i < ct.NumMethod(); i++ {
		m := ct.Method(i)
		// LeaseRelease ends a lease, a row of the schema, by its token: any session may.
		// ReleaseJobs returns claimed jobs to the queue by their tokens: rows, no lock.
		if m.Name == "LeaseRelease" || m.Name == "ReleaseJobs" {
			continue
		}
		if strings.Contains(m.Name, "Unlock") || strings.Contains(m.Name, "Release") {
			t.Errorf("Client has a method %s: an unlock by name could run on another pooled session", m.Name)
		}
	}
	lt := reflect.TypeOf(pgcoord.Lock{})
	for i := 0; i < lt.NumField(); i++ {
		if lt.Field(i).IsExported() {
			t.Errorf("Lock exposes field %s", lt.Field(i).Name)
		}
	}
	lp := reflect.TypeOf(&pgcoord.Lock{})
	for i := 0; i < lp.NumMethod(); i++ {
		m := lp.Method(i)
		for j := 0; j < m.Type.NumOut(); j++ {
			if m.Type.Out(j) == reflect.TypeOf(&sql.Conn{}) || m.Type.Out(j) == reflect.TypeOf(&sql.DB{}) {
				t.Errorf("Lock.%s hands out its connection", m.Name)
			}
		}
	}
	u, ok := lp.MethodByName("Unlock")
	if !ok || u.Type.NumIn() != 2 || u.Type.In(1) != reflect.TypeOf((*context.Context)(nil)).Elem() {
		t.Errorf("Unlock should be func(*Lock, context.Context) error, is %v", u.Type)
	}
	var f func(*pgcoord.Lock, context.Context) error = (*pgcoord.Lock).Unlock
	_ = f
}

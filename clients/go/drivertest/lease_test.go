package drivertest

import (
	"context"
	"errors"
	"testing"
	"time"

	pgcoord "github.com/pgcoord/pgcoord/clients/go"
)

// The one-call lease functions: a token kept by the caller and passed by hand, as a process
// that renews on its own schedule (or another process) does. Every refusal is an answer.
func TestLeaseOneCalls(t *testing.T) {
	eachDriver(t, func(t *testing.T, e *env) {
		ctx := context.Background()
		name := e.prefix + "one-call"
		// A name new on this timeline may be held back one TTL: ask until it is granted.
		var a pgcoord.LeaseInfo
		for deadline := time.Now().Add(10 * time.Second); ; {
			var err error
			if a, err = e.c.LeaseAcquire(ctx, name, "a", 2*time.Second); err != nil {
				t.Fatal(err)
			}
			if a.Granted {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("not granted within 10 s: %+v", a)
			}
			time.Sleep(50 * time.Millisecond)
		}
		if a.Status != "ok" || a.Holder != "a" || a.Token <= 0 || a.Remaining() <= 0 || a.Remaining() > 2*time.Second {
			t.Errorf("granted: %+v (remaining %v)", a, a.Remaining())
		}
		b, err := e.c.LeaseAcquire(ctx, name, "b", time.Second)
		if err != nil || b.Granted || b.Status != "held" || b.Holder != "a" || b.Token != a.Token || b.Remaining() <= 0 {
			t.Errorf("held by a: %+v %v", b, err)
		}
		r, err := e.c.LeaseRenew(ctx, name, a.Token, 5*time.Second)
		if err != nil || r.Status != "ok" || !r.Granted || r.Token != a.Token || r.Remaining() <= 2*time.Second {
			t.Errorf("renewal: %+v (remaining %v) %v", r, r.Remaining(), err)
		}
		if st, err := e.c.LeaseRelease(ctx, name, a.Token); err != nil || st != "ok" {
			t.Errorf("release: %q %v", st, err)
		}
		if st, err := e.c.LeaseRelease(ctx, name, a.Token); err != nil || st != "released" {
			t.Errorf("second release: %q %v", st, err)
		}
		if r, err := e.c.LeaseRenew(ctx, name, a.Token, time.Second); err != nil || r.Status != "released" || r.Granted {
			t.Errorf("renewal after release: %+v %v", r, err)
		}
		b, err = e.c.LeaseAcquire(ctx, name, "b", time.Second)
		if err != nil || !b.Granted || b.Token <= a.Token {
			t.Fatalf("acquire after release: %+v %v", b, err)
		}
		if r, err := e.c.LeaseRenew(ctx, name, a.Token, time.Second); err != nil || r.Status != "superseded" || r.Granted {
			t.Errorf("renewal of a superseded token: %+v %v", r, err)
		}
		if st, err := e.c.LeaseRelease(ctx, name, a.Token); err != nil || st != "superseded" {
			t.Errorf("release of a superseded token: %q %v", st, err)
		}
		if r, err := e.c.LeaseRenew(ctx, name+"-none", 1, time.Second); err != nil || r.Status != "unknown" {
			t.Errorf("renewal of an unknown lease: %+v %v", r, err)
		}
		if st, err := e.c.LeaseRelease(ctx, name+"-none", 1); err != nil || st != "unknown" {
			t.Errorf("release of an unknown lease: %q %v", st, err)
		}
		if _, err := e.c.LeaseAcquire(ctx, "", "x", time.Second); !errors.Is(err, pgcoord.ErrUsage) {
			t.Errorf("empty lease name: %v", err)
		}
		if _, err := e.c.LeaseRenew(ctx, name, b.Token, 0); !errors.Is(err, pgcoord.ErrUsage) {
			t.Errorf("a ttl of 0: %v", err)
		}
		if st, err := e.c.LeaseRelease(ctx, name, b.Token); err != nil || st != "ok" {
			t.Errorf("release of b: %q %v", st, err)
		}
	})
}

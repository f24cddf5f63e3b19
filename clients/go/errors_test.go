package pgcoord

import (
	"context"
	"database/sql/driver"
	"errors"
	"fmt"
	"testing"
	"time"
)

// stateErr stands for a driver's error type: pgx's *pgconn.PgError and lib/pq's *pq.Error
// both have a method SQLState() string.
type stateErr struct{ code string }

func (e *stateErr) Error() string    { return "server error " + e.code }
func (e *stateErr) SQLState() string { return e.code }

func TestErrorClasses(t *testing.T) {
	cases := []struct {
		code     string
		class    Class
		sentinel error
	}{
		{"40001", ClassRetry, ErrRetry},
		{"40P01", ClassRetry, ErrRetry},
		{"PCF01", ClassFenced, ErrFenced},
		{"PCF02", ClassNotFound, ErrNotFound},
		{"P0002", ClassNotFound, ErrNotFound},
		{"PCF03", ClassConflict, ErrConflict},
		{"23505", ClassConflict, ErrConflict},
		{"55000", ClassConflict, ErrConflict},
		{"22023", ClassUsage, ErrUsage},
		{"22P02", ClassUsage, ErrUsage},
		{"22004", ClassUsage, ErrUsage},
		{"25006", ClassRetryLater, ErrRetryLater},
		{"08006", ClassLost, ErrLost},
		{"57P01", ClassLost, ErrLost},
		{"XX000", ClassOther, nil},
	}
	for _, c := range cases {
		// Wrapped by the caller, then by the client: both layers are seen through.
		err := wrap("op", fmt.Errorf("context: %w", &stateErr{c.code}))
		var e *Error
		if !errors.As(err, &e) || e.SQLState != c.code || e.Class != c.class {
			t.Errorf("%s: got %#v, want class %v", c.code, err, c.class)
			continue
		}
		if c.sentinel != nil && !errors.Is(err, c.sentinel) {
			t.Errorf("%s: errors.Is(err, %v) is false", c.code, c.sentinel)
		}
		var se *stateErr
		if !errors.As(err, &se) {
			t.Errorf("%s: the driver's error is not reachable through errors.As", c.code)
		}
		if SQLState(err) != c.code {
			t.Errorf("SQLState = %q, want %q", SQLState(err), c.code)
		}
	}
	if got := wrap("op", driver.ErrBadConn); !errors.Is(got, ErrLost) {
		t.Errorf("a bad connection should be class lost: %v", got)
	}
	if got := wrap("op", context.DeadlineExceeded); !errors.Is(got, ErrRetryLater) || !errors.Is(got, context.DeadlineExceeded) {
		t.Errorf("a deadline should be class retry later and still match context.DeadlineExceeded: %v", got)
	}
	e := &Error{Op: "lock", Class: ClassConflict, Kind: ErrLockBusy, Msg: "held"}
	if !errors.Is(e, ErrLockBusy) || !errors.Is(e, ErrConflict) || errors.Is(e, ErrLockLost) {
		t.Error("kind and class sentinels")
	}
	if e.Error() != "pgcoord: lock: held" {
		t.Errorf("message %q", e.Error())
	}
}

func TestCommitErrors(t *testing.T) {
	if err := commitError(&stateErr{"40001"}); errors.Is(err, ErrCommitUnknown) || !errors.Is(err, ErrRetry) {
		t.Errorf("a serialization failure at commit is a definite rollback, to be retried: %v", err)
	}
	if err := commitError(fmt.Errorf("read: %w", driver.ErrBadConn)); !errors.Is(err, ErrCommitUnknown) {
		t.Errorf("a session lost during commit: %v", err)
	}
	if err := commitError(errors.New("commit unexpectedly resulted in rollback")); errors.Is(err, ErrCommitUnknown) {
		t.Errorf("a rollback answered by the server is not unknown: %v", err)
	}
}

func TestBackoff(t *testing.T) {
	for attempt := 1; attempt <= 20; attempt++ {
		max := 10 * time.Millisecond << uint(attempt-1)
		if max > time.Second || max <= 0 {
			max = time.Second
		}
		for i := 0; i < 50; i++ {
			if d := backoff(attempt, 10*time.Millisecond, time.Second); d < 0 || d > max {
				t.Fatalf("backoff(%d) = %v, outside [0, %v]", attempt, d, max)
			}
		}
	}
}

func TestArrayLiterals(t *testing.T) {
	a, q, bs := `plain`, `qu"ote`, `back\slash`
	if got := textArray([]*string{&a, nil, &q, &bs}); got != `{"plain",NULL,"qu\"ote","back\\slash"}` {
		t.Errorf("textArray = %s", got)
	}
	if got := bigintArray([]int64{1, -2, 9223372036854775807}); got != `{1,-2,9223372036854775807}` {
		t.Errorf("bigintArray = %s", got)
	}
}

func TestSchemaQuoting(t *testing.T) {
	if got := QuoteIdentifier(`we"ird`); got != `"we""ird"` {
		t.Errorf("QuoteIdentifier = %s", got)
	}
	for _, bad := range []string{"a$b", "a\nb", string(make([]byte, 64))} {
		if err := checkSchema(bad); !errors.Is(err, ErrUsage) {
			t.Errorf("checkSchema(%q) = %v", bad, err)
		}
	}
}

package pgcoord

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"math/rand"
	"sync"
	"time"
)

// TxOptions configure Client.Tx. The zero value runs at the pool's default isolation, read
// and write, at most DefaultTxAttempts times, with backoff from 10 ms capped at one second.
type TxOptions struct {
	// Isolation is the transaction's isolation level (sql.LevelSerializable, ...).
	Isolation sql.IsolationLevel
	// ReadOnly makes the transaction read-only.
	ReadOnly bool
	// MaxAttempts bounds the runs of the function, the first included; 0 is DefaultTxAttempts.
	MaxAttempts int
	// BaseDelay is the first backoff's cap; each retry doubles it up to MaxDelay. The wait
	// before a retry is drawn uniformly between zero and that cap (full jitter). 0 is 10 ms.
	BaseDelay time.Duration
	// MaxDelay caps the backoff; 0 is one second.
	MaxDelay time.Duration
	// OnRetry, if set, is called before each retry with the attempt that failed (1 for the
	// first) and its error.
	OnRetry func(attempt int, err error)
}

// DefaultTxAttempts is how many times Client.Tx runs a function that keeps failing with a
// serialization failure or a deadlock.
const DefaultTxAttempts = 10

var (
	jitterMu sync.Mutex
	jitter   = rand.New(rand.NewSource(time.Now().UnixNano()))
)

// backoff returns the wait before retry number attempt (1 for the first retry): uniform in
// [0, min(max, base*2^(attempt-1))].
func backoff(attempt int, base, max time.Duration) time.Duration {
	d := base
	for i := 1; i < attempt && d < max; i++ {
		d *= 2
	}
	if d > max {
		d = max
	}
	if d <= 0 {
		return 0
	}
	jitterMu.Lock()
	defer jitterMu.Unlock()
	return time.Duration(jitter.Int63n(int64(d) + 1))
}

// Tx runs fn in a transaction and commits it; it runs the whole transaction again, with
// jittered and capped backoff, when fn or the COMMIT fails with a serialization failure
// (40001) or a deadlock (40P01), at most opts.MaxAttempts times. Any other error of fn rolls
// the transaction back and is returned as it is (never retried). fn must not commit or roll
// back tx itself, and should have no side effects outside tx, since it may run more than once.
//
// When the session ends after COMMIT was sent and before its answer came, the error matches
// ErrCommitUnknown: the transaction may or may not have committed, and Tx does not run it
// again. When the retries run out, the error matches ErrRetry and wraps the last failure.
func (c *Client) Tx(ctx context.Context, opts *TxOptions, fn func(tx *sql.Tx) error) error {
	var o TxOptions
	if opts != nil {
		o = *opts
	}
	if fn == nil {
		return usageErr("tx", "fn must not be nil")
	}
	if o.MaxAttempts <= 0 {
		o.MaxAttempts = DefaultTxAttempts
	}
	if o.BaseDelay <= 0 {
		o.BaseDelay = 10 * time.Millisecond
	}
	if o.MaxDelay <= 0 {
		o.MaxDelay = time.Second
	}
	for attempt := 1; ; attempt++ {
		err := c.txOnce(ctx, &o, fn)
		if err == nil {
			return nil
		}
		if !errors.Is(err, ErrRetry) || errors.Is(err, ErrCommitUnknown) {
			return err
		}
		if attempt >= o.MaxAttempts {
			return &Error{Op: "tx", SQLState: SQLState(err), Class: ClassRetry, Err: err,
				Msg: fmt.Sprintf("gave up after %d attempts: %v", attempt, err)}
		}
		if o.OnRetry != nil {
			o.OnRetry(attempt, err)
		}
		t := time.NewTimer(backoff(attempt, o.BaseDelay, o.MaxDelay))
		select {
		case <-ctx.Done():
			t.Stop()
			return &Error{Op: "tx", Class: ClassRetryLater, Err: ctx.Err(),
				Msg: fmt.Sprintf("%v before attempt %d (the last failed with: %v)", ctx.Err(), attempt+1, err)}
		case <-t.C:
		}
	}
}

// txOnce runs one attempt. Its error is an *Error whose class says whether to retry.
func (c *Client) txOnce(ctx context.Context, o *TxOptions, fn func(tx *sql.Tx) error) (err error) {
	tx, err := c.db.BeginTx(ctx, &sql.TxOptions{Isolation: o.Isolation, ReadOnly: o.ReadOnly})
	if err != nil {
		return wrap("tx: begin", err)
	}
	done := false
	defer func() {
		if !done {
			_ = tx.Rollback()
		}
	}()
	if ferr := fn(tx); ferr != nil {
		done = true
		_ = tx.Rollback()
		st := SQLState(ferr)
		if ClassOf(st) == ClassRetry {
			return &Error{Op: "tx", SQLState: st, Class: ClassRetry, Msg: ferr.Error(), Err: ferr}
		}
		// The caller's own error, untouched: Tx never retries it.
		return ferr
	}
	if ctx.Err() != nil {
		done = true
		_ = tx.Rollback()
		return wrap("tx: before commit (rolled back)", ctx.Err())
	}
	done = true
	cerr := tx.Commit()
	if cerr == nil {
		return nil
	}
	return commitError(cerr)
}

// commitError tells a COMMIT that failed (the server answered: rolled back) from one whose
// outcome is unknown (the session ended after COMMIT was sent).
func commitError(err error) error {
	st := SQLState(err)
	if st != "" && ClassOf(st) != ClassLost {
		return wrap("tx: commit failed (rolled back)", err)
	}
	if errors.Is(err, sql.ErrTxDone) {
		return wrap("tx: commit: the transaction was already rolled back", err)
	}
	var safe interface{ SafeToRetry() bool }
	if errors.As(err, &safe) && safe.SafeToRetry() {
		// pgx: the COMMIT was never sent.
		return wrap("tx: commit not sent (rolled back)", err)
	}
	if !isLostCause(err) && ClassOf(st) != ClassLost && !errors.Is(err, context.Canceled) &&
		!errors.Is(err, context.DeadlineExceeded) {
		// An answer that is not an error of the server: pgx's "commit unexpectedly resulted in
		// rollback", lib/pq's "in a failed transaction" (a statement of fn failed unseen).
		return &Error{Op: "tx", Class: ClassOther, Err: err, Msg: "commit failed (rolled back): " + err.Error()}
	}
	return &Error{Op: "tx", SQLState: st, Class: ClassLost, Kind: ErrCommitUnknown, Err: err,
		Msg: "the session ended after COMMIT was sent: the transaction may or may not have committed (" +
			err.Error() + ")"}
}

package pgcoord

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"errors"
	"fmt"
	"io"
	"net"
	"strings"
	"unicode/utf8"
)

// Class says what a caller can do about an error. The classes are the protocol's
// (docs/PROTOCOL.md, "Errors"); the pgcoord tool's exit codes follow the same ones.
type Class int

const (
	// ClassOther is an error none of the classes below describes: report it.
	ClassOther Class = iota
	// ClassUsage is a bad argument: fix the call; the same call cannot succeed.
	ClassUsage
	// ClassConflict is a state that refuses the call: the name is held, the unique key is
	// taken, the object is in the wrong state.
	ClassConflict
	// ClassNotFound is a job, group, schedule, lease or token that does not exist.
	ClassNotFound
	// ClassFenced is a fencing token older than the newest one granted: stop writing.
	ClassFenced
	// ClassRetry is a serialization failure or a deadlock: run the whole transaction again.
	ClassRetry
	// ClassRetryLater is transient: a lock wait timed out, the server is a standby.
	ClassRetryLater
	// ClassLost is a session that ended: assume nothing about the statement in flight.
	ClassLost
)

var classNames = [...]string{"other", "usage", "conflict", "not found", "fenced", "retry", "retry later", "lost"}

// String names the class as docs/PROTOCOL.md does.
func (c Class) String() string {
	if c < 0 || int(c) >= len(classNames) {
		return fmt.Sprintf("Class(%d)", int(c))
	}
	return classNames[c]
}

// Sentinel errors. Every error the package returns is an *Error, which matches its class's
// sentinel (ErrUsage ... ErrLost) and, when it has one, its kind's sentinel (ErrLockBusy ...)
// under errors.Is; errors.As to *Error gives its SQLSTATE and class, and errors.As to the
// driver's own error type (*pgconn.PgError, *pq.Error) still works through Unwrap.
var (
	// ErrUsage matches errors of class ClassUsage.
	ErrUsage = errors.New("pgcoord: bad argument")
	// ErrConflict matches errors of class ClassConflict.
	ErrConflict = errors.New("pgcoord: conflict")
	// ErrNotFound matches errors of class ClassNotFound.
	ErrNotFound = errors.New("pgcoord: not found")
	// ErrFenced matches a stale fencing token (SQLSTATE PCF01).
	ErrFenced = errors.New("pgcoord: stale fencing token")
	// ErrRetry matches a serialization failure or deadlock (40001, 40P01).
	ErrRetry = errors.New("pgcoord: transaction must be run again")
	// ErrRetryLater matches errors of class ClassRetryLater.
	ErrRetryLater = errors.New("pgcoord: try again later")
	// ErrLost matches errors of class ClassLost: the session ended.
	ErrLost = errors.New("pgcoord: session lost")

	// ErrProtocolVersion: the schema speaks another protocol version than this client.
	ErrProtocolVersion = errors.New("pgcoord: protocol version mismatch")
	// ErrLockBusy: TryLock or TryXactLock found the lock held by another session.
	ErrLockBusy = errors.New("pgcoord: lock is held by another session")
	// ErrLockTimeout: the wait for a lock reached its deadline; nothing is held or queued.
	ErrLockTimeout = errors.New("pgcoord: timed out waiting for the lock")
	// ErrLockLost: the lock's session ended, or its heartbeat failed within its bound.
	ErrLockLost = errors.New("pgcoord: lock lost")
	// ErrNotHeld: Unlock of a lock already unlocked.
	ErrNotHeld = errors.New("pgcoord: lock not held")
	// ErrCommitUnknown: the session ended after COMMIT was sent and before its answer came:
	// the transaction may or may not have committed.
	ErrCommitUnknown = errors.New("pgcoord: commit outcome unknown")
	// ErrLeaseHeld: the lease is held by another holder (or held back after a failover).
	ErrLeaseHeld = errors.New("pgcoord: lease held by another holder")
	// ErrLeaseLost: a renewal found the lease expired, released or superseded, or the TTL
	// passed without a successful renewal.
	ErrLeaseLost = errors.New("pgcoord: lease lost")
	// ErrDuplicate: Enqueue's unique key is taken by a pending or running job of the queue.
	ErrDuplicate = errors.New("pgcoord: unique key taken")
	// ErrDBClosed: the *sql.DB the client works on was closed.
	ErrDBClosed = errors.New("pgcoord: database closed")
	// ErrStale: a claim token that is no longer the job's (cancelled, reaped, claimed again):
	// Complete, Fail or RetryLater recorded nothing.
	ErrStale = errors.New("pgcoord: stale claim token")
	// ErrNotFinished: WaitResult's context ended before the job finished.
	ErrNotFinished = errors.New("pgcoord: job not finished")
	// ErrNoListen: the driver offers no LISTEN to NewListener; the worker polls instead.
	ErrNoListen = errors.New("pgcoord: the driver has no LISTEN")
	// ErrPooler: a session lock behind a pooler that does not keep the client on one server
	// session (PgBouncer's transaction or statement mode); see Client.Pooler.
	ErrPooler = errors.New("pgcoord: the pooler in between cannot keep this")
	// ErrWorkerStopped: the Worker's Run ended (or was never started) where it must be running.
	ErrWorkerStopped = errors.New("pgcoord: worker stopped")
)

var classSentinels = map[Class]error{
	ClassUsage: ErrUsage, ClassConflict: ErrConflict, ClassNotFound: ErrNotFound, ClassFenced: ErrFenced,
	ClassRetry: ErrRetry, ClassRetryLater: ErrRetryLater, ClassLost: ErrLost,
}

// Error is the error every call of the package returns.
type Error struct {
	Op       string // what the client was doing: "lock", "unlock", "tx", "enqueue", ...
	SQLState string // the server's SQLSTATE, or "" when the error did not come from the server
	Class    Class  // what the caller can do about it
	Msg      string // the message, without the "pgcoord: Op: " prefix
	Kind     error  // a sentinel of this package (ErrLockBusy, ...) or nil
	Err      error  // the cause: the driver's error, a context error, or nil
}

// Error formats the error as "pgcoord: OP: MESSAGE".
func (e *Error) Error() string {
	var b strings.Builder
	b.WriteString("pgcoord: ")
	if e.Op != "" {
		b.WriteString(e.Op)
		b.WriteString(": ")
	}
	b.WriteString(e.Msg)
	return b.String()
}

// Unwrap returns the cause (the driver's error or a context error).
func (e *Error) Unwrap() error { return e.Err }

// Is matches the error's kind and the sentinel of its class.
func (e *Error) Is(target error) bool {
	if target == nil {
		return false
	}
	if e.Kind != nil && target == e.Kind {
		return true
	}
	return classSentinels[e.Class] == target
}

// SQLState returns the SQLSTATE of err (or of the first error it wraps that has one), or ""
// when there is none. It recognises any error with a method SQLState() string: pgx's
// *pgconn.PgError (v4 and v5), lib/pq's *pq.Error, and this package's *Error.
func SQLState(err error) string {
	var e *Error
	if errors.As(err, &e) && e.SQLState != "" {
		return e.SQLState
	}
	var s interface{ SQLState() string }
	if errors.As(err, &s) {
		return s.SQLState()
	}
	return ""
}

// ClassOf returns the class of an SQLSTATE, as docs/PROTOCOL.md lists them.
func ClassOf(sqlstate string) Class {
	switch sqlstate {
	case "":
		return ClassOther
	case "40001", "40P01":
		return ClassRetry
	case "PCF01":
		return ClassFenced
	case "PCF02", "P0002":
		return ClassNotFound
	case "PCF03", "23505", "55000":
		return ClassConflict
	case "25006", "55P03", "57014", "53300":
		return ClassRetryLater
	case "57P01", "57P02", "57P03":
		return ClassLost
	}
	switch sqlstate[:2] {
	case "08":
		return ClassLost
	case "22", "42":
		return ClassUsage
	case "23":
		return ClassConflict
	}
	return ClassOther
}

// isLostCause says whether err, which carries no SQLSTATE, means the session is gone: the
// driver reports a bad or closed connection, or the network failed.
func isLostCause(err error) bool {
	if err == nil {
		return false
	}
	if errors.Is(err, driver.ErrBadConn) || errors.Is(err, sql.ErrConnDone) || errors.Is(err, io.EOF) ||
		errors.Is(err, io.ErrUnexpectedEOF) {
		return true
	}
	var ne net.Error
	if errors.As(err, &ne) {
		return true
	}
	msg := err.Error()
	return strings.Contains(msg, "conn closed") || strings.Contains(msg, "connection reset") ||
		strings.Contains(msg, "broken pipe") || strings.Contains(msg, "bad connection")
}

// wrap makes the *Error of a driver or context error met during op.
func wrap(op string, err error) error {
	if err == nil {
		return nil
	}
	var e *Error
	if errors.As(err, &e) {
		return err
	}
	st := SQLState(err)
	cl := ClassOf(st)
	switch {
	case st != "":
	case errors.Is(err, context.DeadlineExceeded) || errors.Is(err, context.Canceled):
		cl = ClassRetryLater
	case isLostCause(err):
		cl = ClassLost
	}
	return &Error{Op: op, SQLState: st, Class: cl, Msg: err.Error(), Err: err}
}

func usageErr(op, format string, args ...interface{}) error {
	return &Error{Op: op, Class: ClassUsage, Msg: fmt.Sprintf(format, args...)}
}

func isUsage(err error) bool { return errors.Is(err, ErrUsage) }

// checkName applies the protocol's rule for names: 1 to max bytes of valid UTF-8.
func checkName(what, name string, max int) error {
	if name == "" {
		return usageErr("", "%s is empty", what)
	}
	if len(name) > max {
		return usageErr("", "%s is %d bytes, longer than %d", what, len(name), max)
	}
	if !utf8.ValidString(name) {
		for i, r := range name {
			if r == utf8.RuneError {
				return usageErr("", "%s is not valid UTF-8: byte 0x%02x at offset %d", what, name[i], i)
			}
		}
	}
	return nil
}

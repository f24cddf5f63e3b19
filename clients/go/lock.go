package pgcoord

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"errors"
	"fmt"
	"sync"
	"time"
)

// A session-level advisory lock belongs to the server session that took it. Taken through a
// pool with db.QueryRow and released with db.Exec, the release very often lands on another
// session: it returns false, nothing fails, and the lock stays held by an idle pooled
// connection for as long as that connection lives (the first seed's experiment 2).
//
// This file makes that mistake impossible to write: a *Lock owns the *sql.Conn it was taken
// on, for its whole life, and the only way to release it is its own Unlock method, which runs
// on that connection. There is no function that unlocks a name, and no way to reach the
// handle's connection. When the answer of a lock statement is uncertain (an error, a timeout),
// the session is dropped rather than given back to the pool: a dropped session releases
// every lock it held, so no path leaves a held lock in the pool.

// LockOptions configure Lock and XactLock. The zero value takes an exclusive lock and waits
// until the context is done.
type LockOptions struct {
	// Timeout bounds the wait. It is the server's lock_timeout for the one waiting statement,
	// whose statement_timeout is off: neither the role's statement_timeout nor its lock_timeout
	// cuts the wait short or stretches it. 0 waits until ctx is done (its deadline, if any, is
	// then the bound).
	Timeout time.Duration
	// Shared takes the lock in share mode: shared holders exclude exclusive ones only.
	Shared bool
}

// backstop is how long after the server's lock_timeout the client gives up on its own.
const backstop = 5 * time.Second

var (
	sqlTry = [2]string{"SELECT pg_catalog.pg_try_advisory_lock($1::bigint)",
		"SELECT pg_catalog.pg_try_advisory_lock_shared($1::bigint)"}
	sqlWait = [2]string{"SELECT pg_catalog.pg_advisory_lock($1::bigint)",
		"SELECT pg_catalog.pg_advisory_lock_shared($1::bigint)"}
	sqlUnlock = [2]string{"SELECT pg_catalog.pg_advisory_unlock($1::bigint)",
		"SELECT pg_catalog.pg_advisory_unlock_shared($1::bigint)"}
	sqlXactTry = [2]string{"SELECT pg_catalog.pg_try_advisory_xact_lock($1::bigint)",
		"SELECT pg_catalog.pg_try_advisory_xact_lock_shared($1::bigint)"}
	sqlXactWait = [2]string{"SELECT pg_catalog.pg_advisory_xact_lock($1::bigint)",
		"SELECT pg_catalog.pg_advisory_xact_lock_shared($1::bigint)"}
)

// The wait's own settings, local to the transaction (or savepoint) around it.
const sqlWaitSettings = "SELECT pg_catalog.set_config('statement_timeout', '0', true)," +
	" pg_catalog.set_config('lock_timeout', $1, true)"

// Does this session hold the key, granted, in this mode? A bigint key appears in pg_locks as
// classid (high 32 bits), objid (low 32 bits) and objsubid 1.
const sqlGranted = "SELECT EXISTS (SELECT 1 FROM pg_catalog.pg_locks WHERE locktype = 'advisory'" +
	" AND pid = pg_catalog.pg_backend_pid() AND granted" +
	" AND database = (SELECT oid FROM pg_catalog.pg_database WHERE datname = pg_catalog.current_database())" +
	" AND classid::bigint = $1 AND objid::bigint = $2 AND objsubid = 1 AND mode = $3)"

func shareIdx(shared bool) int {
	if shared {
		return 1
	}
	return 0
}

// describe names a lock in messages: its name and its key.
func describe(name string) string {
	return fmt.Sprintf("%q (key %d)", name, Key(name))
}

// Lock is a held session-level advisory lock. It owns one pooled connection for its whole
// life and releases the lock on that connection only, through Unlock; it is not re-entrant
// (a second Lock of the same name, from the same process, waits for this one like any other
// session). A Lock is safe for concurrent use.
type Lock struct {
	c      *Client
	name   string
	key    int64
	shared bool

	conn *sql.Conn     // the session the lock lives on; never exposed
	sess *session      // its server session, for the bound of statements without a deadline
	sem  chan struct{} // one slot: whoever holds it may use conn
	lost chan struct{} // closed when the lock is lost

	mu       sync.Mutex
	unlocked bool
	lostErr  error
}

// Name returns the lock's name.
func (l *Lock) Name() string { return l.name }

// Key returns the lock's advisory key, Key(Name()).
func (l *Lock) Key() int64 { return l.key }

// Lost returns a channel that is closed when the lock is lost: its session ended (the server
// was restarted, the backend was terminated, the network failed), a heartbeat had no answer
// within Options.HeartbeatTimeout, or the *sql.DB was closed. It is not closed by Unlock.
func (l *Lock) Lost() <-chan struct{} { return l.lost }

// Err returns why the lock was lost (errors.Is ErrLockLost), or nil while it is not.
func (l *Lock) Err() error {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.lostErr
}

// Lock takes the session-level advisory lock of name (key Key(name)), waiting for it under
// opts.Timeout and ctx. On a timeout nothing is held or queued, and the error matches
// ErrLockTimeout. The lock keeps one connection of the pool until Unlock: a program that holds
// as many locks as db.SetMaxOpenConns allows has no connection left for anything else.
func (c *Client) Lock(ctx context.Context, name string, opts *LockOptions) (*Lock, error) {
	return c.lock(ctx, name, opts, false)
}

// TryLock takes the session-level advisory lock of name if no other session holds it, and
// fails at once with an error matching ErrLockBusy otherwise.
func (c *Client) TryLock(ctx context.Context, name string, opts *LockOptions) (*Lock, error) {
	return c.lock(ctx, name, opts, true)
}

func (c *Client) lock(ctx context.Context, name string, opts *LockOptions, try bool) (*Lock, error) {
	var o LockOptions
	if opts != nil {
		o = *opts
	}
	op := "lock"
	if try {
		op = "try lock"
	}
	if err := checkName("lock name", name, NameMaxBytes); err != nil {
		err.(*Error).Op = op
		return nil, err
	}
	if o.Timeout < 0 {
		return nil, usageErr(op, "timeout must not be negative, got %v", o.Timeout)
	}
	// Behind a transaction-mode pooler the lock would be taken on a server session this
	// client does not keep: refused, as the C library and the other clients refuse it.
	if err := c.sessionLockRefusal(ctx, op, name); err != nil {
		return nil, err
	}
	conn, err := c.db.Conn(ctx)
	if err != nil {
		return nil, c.connErr(op, err)
	}
	l := &Lock{c: c, name: name, key: Key(name), shared: o.Shared, conn: conn,
		sem: make(chan struct{}, 1), lost: make(chan struct{})}
	var got bool
	if try {
		got, err = l.try(ctx)
	} else {
		got, err = l.wait(ctx, o.Timeout)
	}
	if err != nil {
		return nil, err
	}
	if !got {
		_ = conn.Close()
		return nil, &Error{Op: op, Class: ClassConflict, Kind: ErrLockBusy,
			Msg: fmt.Sprintf("lock %s is held by another session", describe(name))}
	}
	c.hold(l)
	return l, nil
}

func (c *Client) connErr(op string, err error) error {
	if dbClosed(c.db) {
		return &Error{Op: op, Class: ClassUsage, Kind: ErrDBClosed, Msg: "the *sql.DB is closed", Err: err}
	}
	return wrap(op+": taking a connection from the pool", err)
}

// drop ends the session of conn instead of giving it back to the pool: database/sql closes a
// connection whose Raw function returns driver.ErrBadConn. The server then releases every lock
// the session held.
func drop(conn *sql.Conn) {
	_ = conn.Raw(func(interface{}) error { return driver.ErrBadConn })
	_ = conn.Close()
}

func (l *Lock) try(ctx context.Context) (bool, error) {
	var got bool
	err := l.c.quick(ctx, l.conn, &l.sess, sqlTry[shareIdx(l.shared)], l.key, &got)
	if err != nil {
		// The answer is unknown: the lock may have been granted. Drop the session.
		drop(l.conn)
		return false, wrap("try lock "+describe(l.name), err)
	}
	return got, nil
}

// wait runs the blocking form in a transaction of its own on the lock's connection, with
// statement_timeout off and lock_timeout set for that transaction only (a session lock outlives
// the COMMIT). On any error it looks at pg_locks: the server can grant the lock in the same
// instant as the timeout or the cancel fires, and the lock then survives the error.
func (l *Lock) wait(ctx context.Context, timeout time.Duration) (bool, error) {
	lockTimeout := "0"
	qctx := ctx
	if timeout > 0 {
		lockTimeout = fmt.Sprintf("%dms", ceilMs(timeout))
		var cancel context.CancelFunc
		qctx, cancel = context.WithTimeout(ctx, timeout+backstop)
		defer cancel()
	} else if dl, ok := ctx.Deadline(); ok {
		lockTimeout = fmt.Sprintf("%dms", ceilMs(time.Until(dl)))
	}
	what := describe(l.name)
	werr := func() error {
		tx, err := l.conn.BeginTx(qctx, nil)
		if err != nil {
			return err
		}
		defer func() { _ = tx.Rollback() }()
		if _, err := tx.ExecContext(qctx, sqlWaitSettings, lockTimeout); err != nil {
			return err
		}
		if _, err := tx.ExecContext(qctx, sqlWait[shareIdx(l.shared)], l.key); err != nil {
			return err
		}
		return tx.Commit()
	}()
	if werr == nil {
		return true, nil
	}
	granted, gerr := l.grantedNow()
	if gerr != nil {
		// Nothing can be known of the session: drop it, which releases anything it holds.
		drop(l.conn)
	} else if granted {
		return true, nil
	} else {
		_ = l.conn.Close()
	}
	if timedOut(ctx, qctx, werr) {
		return false, &Error{Op: "lock", SQLState: SQLState(werr), Class: ClassRetryLater, Kind: ErrLockTimeout, Err: werr,
			Msg: fmt.Sprintf("timed out after %v waiting for lock %s", timeoutOf(ctx, timeout), what)}
	}
	return false, wrap("waiting for lock "+what, werr)
}

// timedOut says whether a wait ended by its deadline: the server's lock_timeout (55P03), or
// the context's deadline (pgx reports the context's error; lib/pq the server's "canceling
// statement" that its cancel request caused), and not by the caller's cancel.
func timedOut(ctx, qctx context.Context, err error) bool {
	if ctx.Err() == context.Canceled {
		return false
	}
	return SQLState(err) == "55P03" || errors.Is(err, context.DeadlineExceeded) ||
		qctx.Err() == context.DeadlineExceeded
}

func timeoutOf(ctx context.Context, timeout time.Duration) interface{} {
	if timeout > 0 {
		return timeout
	}
	return "the context's deadline"
}

func ceilMs(d time.Duration) int64 {
	ms := int64((d + time.Millisecond - 1) / time.Millisecond)
	if ms < 1 {
		ms = 1
	}
	if ms > 2147483647 {
		ms = 2147483647
	}
	return ms
}

// grantedNow asks pg_locks whether the lock's session holds its key now, bounded on its own
// (the caller's context may be done).
func (l *Lock) grantedNow() (bool, error) {
	ctx, cancel := context.WithTimeout(context.Background(), l.c.opts.StatementTimeout)
	defer cancel()
	mode := "ExclusiveLock"
	if l.shared {
		mode = "ShareLock"
	}
	u := uint64(l.key)
	var g bool
	err := l.conn.QueryRowContext(ctx, sqlGranted, int64(u>>32), int64(u&0xffffffff), mode).Scan(&g)
	return g, err
}

// markLost records the loss once and closes Lost.
func (l *Lock) markLost(err error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.lostErr != nil {
		return
	}
	l.lostErr = err
	close(l.lost)
}

func (l *Lock) lostError(msg string, cause error) error {
	return &Error{Op: "lock " + describe(l.name), SQLState: SQLState(cause), Class: ClassLost, Kind: ErrLockLost,
		Msg: msg, Err: cause}
}

// check is one heartbeat of the lock, run by the client's heartbeat (heartbeat.go): it checks
// the session, bounded by HeartbeatTimeout whatever the driver does with a cancelled context
// (the check runs aside, and the bound is the handle's own timer). A failed or late check marks
// the lock lost and drops the session; so does a closed *sql.DB, so that db.Close leaves no
// lock held. A lock whose connection is in use (Unlock) is not checked this time.
func (l *Lock) check(dbGone bool) {
	select {
	case l.sem <- struct{}{}:
	default:
		return
	}
	l.mu.Lock()
	gone := l.unlocked || l.lostErr != nil
	l.mu.Unlock()
	if gone {
		<-l.sem
		return
	}
	if dbGone {
		l.markLost(l.lostError("lost: the *sql.DB was closed; its session was ended, which released the lock", ErrDBClosed))
		l.c.forget(l)
		drop(l.conn)
		<-l.sem
		return
	}
	res := make(chan error, 1)
	ctx, cancel := context.WithTimeout(context.Background(), l.c.opts.HeartbeatTimeout)
	go func() {
		var one int
		err := l.conn.QueryRowContext(ctx, "SELECT 1").Scan(&one)
		if err != nil {
			drop(l.conn)
		}
		cancel()
		res <- err
		<-l.sem
	}()
	timer := time.NewTimer(l.c.opts.HeartbeatTimeout)
	select {
	case err := <-res:
		timer.Stop()
		if err != nil {
			l.markLost(l.lostError("lost: its session ended: "+err.Error(), err))
			l.c.forget(l)
		}
	case <-timer.C:
		cancel()
		l.markLost(l.lostError(fmt.Sprintf("lost: the heartbeat had no answer within %v; the session is dropped",
			l.c.opts.HeartbeatTimeout), context.DeadlineExceeded))
		l.c.forget(l)
	}
}

// Unlock releases the lock on the connection it was taken on, and gives that connection back
// to the pool. If the unlock's answer does not come (ctx done, session lost), the session is
// dropped instead, which releases the lock too: after Unlock returns, whatever it returns, the
// lock is no longer held by this program. A second Unlock fails with ErrNotHeld; the Unlock of
// a lost lock fails with ErrLockLost.
func (l *Lock) Unlock(ctx context.Context) error {
	l.mu.Lock()
	if l.unlocked {
		l.mu.Unlock()
		return &Error{Op: "unlock", Class: ClassUsage, Kind: ErrNotHeld,
			Msg: fmt.Sprintf("lock %s was already unlocked", describe(l.name))}
	}
	l.unlocked = true
	l.mu.Unlock()
	l.c.forget(l)
	select {
	case <-l.lost:
		return l.Err()
	default:
	}
	select {
	case l.sem <- struct{}{}:
	case <-ctx.Done():
		// The heartbeat is using the connection: drop the session once it is done with it.
		go func() {
			l.sem <- struct{}{}
			drop(l.conn)
			<-l.sem
		}()
		return wrap("unlock "+describe(l.name)+" (the session will be dropped)", ctx.Err())
	}
	defer func() { <-l.sem }()
	select {
	case <-l.lost:
		return l.Err()
	default:
	}
	var ok bool
	err := l.c.quick(ctx, l.conn, &l.sess, sqlUnlock[shareIdx(l.shared)], l.key, &ok)
	if err != nil {
		drop(l.conn)
		return wrap("unlock "+describe(l.name)+" (the session was dropped, which released it)", err)
	}
	if !ok {
		drop(l.conn)
		return &Error{Op: "unlock", Class: ClassLost, Kind: ErrLockLost,
			Msg: fmt.Sprintf("the server says lock %s was not held by its session", describe(l.name))}
	}
	return l.conn.Close()
}

// XactLock takes the transaction-level advisory lock of name in tx, waiting under
// opts.Timeout and ctx; it is released when tx commits or rolls back, and has no unlock. The
// wait runs under a savepoint with statement_timeout off and its own lock_timeout, and the
// transaction's settings are put back after it: a timeout (ErrLockTimeout) leaves tx usable.
// It takes a *sql.Tx, so it cannot be called outside a transaction.
func (c *Client) XactLock(ctx context.Context, tx *sql.Tx, name string, opts *LockOptions) error {
	var o LockOptions
	if opts != nil {
		o = *opts
	}
	if tx == nil {
		return usageErr("xact lock", "a transaction lock needs a transaction: tx is nil")
	}
	if err := checkName("lock name", name, NameMaxBytes); err != nil {
		err.(*Error).Op = "xact lock"
		return err
	}
	if o.Timeout < 0 {
		return usageErr("xact lock", "timeout must not be negative, got %v", o.Timeout)
	}
	lockTimeout := "0"
	qctx := ctx
	if o.Timeout > 0 {
		lockTimeout = fmt.Sprintf("%dms", ceilMs(o.Timeout))
		var cancel context.CancelFunc
		qctx, cancel = context.WithTimeout(ctx, o.Timeout+backstop)
		defer cancel()
	} else if dl, ok := ctx.Deadline(); ok {
		lockTimeout = fmt.Sprintf("%dms", ceilMs(time.Until(dl)))
	}
	what := describe(name)
	if _, err := tx.ExecContext(qctx, "SAVEPOINT pgcoord_lock"); err != nil {
		return wrap("xact lock "+what, err)
	}
	var st, lt string
	err := tx.QueryRowContext(qctx, "WITH s AS MATERIALIZED (SELECT pg_catalog.current_setting('statement_timeout') AS st,"+
		" pg_catalog.current_setting('lock_timeout') AS lt)"+
		" SELECT s.st, s.lt, pg_catalog.set_config('statement_timeout', '0', true),"+
		" pg_catalog.set_config('lock_timeout', $1, true) FROM s", lockTimeout).Scan(&st, &lt, new(string), new(string))
	if err == nil {
		_, err = tx.ExecContext(qctx, sqlXactWait[shareIdx(o.Shared)], Key(name))
	}
	if err == nil {
		_, err = tx.ExecContext(qctx, "SELECT pg_catalog.set_config('statement_timeout', $1, true),"+
			" pg_catalog.set_config('lock_timeout', $2, true)", st, lt)
	}
	if err == nil {
		_, err = tx.ExecContext(qctx, "RELEASE SAVEPOINT pgcoord_lock")
		if err == nil {
			return nil
		}
		return wrap("xact lock "+what, err)
	}
	// Back to before the wait: the settings and the error state go, and so does a lock
	// granted in the same instant as the timeout (the subtransaction held it).
	rctx, cancel := c.bounded(context.Background())
	defer cancel()
	if _, rerr := tx.ExecContext(rctx, "ROLLBACK TO SAVEPOINT pgcoord_lock"); rerr == nil {
		_, _ = tx.ExecContext(rctx, "RELEASE SAVEPOINT pgcoord_lock")
	}
	if timedOut(ctx, qctx, err) {
		return &Error{Op: "xact lock", SQLState: SQLState(err), Class: ClassRetryLater, Kind: ErrLockTimeout, Err: err,
			Msg: fmt.Sprintf("timed out after %v waiting for lock %s", timeoutOf(ctx, o.Timeout), what)}
	}
	return wrap("waiting for lock "+what, err)
}

// TryXactLock takes the transaction-level advisory lock of name in tx if no other session
// holds it, and fails at once with an error matching ErrLockBusy otherwise.
func (c *Client) TryXactLock(ctx context.Context, tx *sql.Tx, name string, opts *LockOptions) error {
	var o LockOptions
	if opts != nil {
		o = *opts
	}
	if tx == nil {
		return usageErr("try xact lock", "a transaction lock needs a transaction: tx is nil")
	}
	if err := checkName("lock name", name, NameMaxBytes); err != nil {
		err.(*Error).Op = "try xact lock"
		return err
	}
	var got bool
	if err := tx.QueryRowContext(ctx, sqlXactTry[shareIdx(o.Shared)], Key(name)).Scan(&got); err != nil {
		return wrap("try xact lock "+describe(name), err)
	}
	if !got {
		return &Error{Op: "try xact lock", Class: ClassConflict, Kind: ErrLockBusy,
			Msg: fmt.Sprintf("lock %s is held by another session", describe(name))}
	}
	return nil
}

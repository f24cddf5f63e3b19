package pgcoord

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"sync"
	"time"
)

// LeaseOptions configure Acquire and Campaign. The zero value renews in the background.
type LeaseOptions struct {
	// NoAutoRenew turns off the background renewal (every third of the TTL); the caller then
	// calls Renew itself, and Lost closes when the TTL passes without a successful renewal.
	NoAutoRenew bool
	// RetryInterval is how often Campaign tries again while another holder has the lease and
	// its expiry is further away; 0 is one second.
	RetryInterval time.Duration
	// LockTimeout bounds the grant's wait for writers that checked the previous token
	// (fence_check holds the row until their transaction ends); 0 is one second.
	LockTimeout time.Duration
}

// LeaseMaxBytes is the longest lease name and holder, in bytes (lease_check_args).
const LeaseMaxBytes = 200

// Lease is a lease granted by the server's lease_acquire(): a name held by one holder until
// it expires, with a fencing token that grows with every grant. Pass Token to the writes the
// lease protects and check it there with Client.FenceCheck. A Lease is safe for concurrent
// use.
type Lease struct {
	c      *Client
	name   string
	holder string
	ttl    time.Duration
	token  int64

	mu       sync.Mutex
	expires  time.Time // local clock: from before the call that granted or renewed it
	lostErr  error
	released bool
	lost     chan struct{}
	stop     chan struct{}
	stopOnce sync.Once
}

// Name returns the lease's name.
func (l *Lease) Name() string { return l.name }

// Holder returns the holder the lease was granted to.
func (l *Lease) Holder() string { return l.holder }

// Token returns the lease's fencing token.
func (l *Lease) Token() int64 { return l.token }

// Lost returns a channel that is closed when the lease is lost: a renewal found it expired,
// released or superseded, or the TTL passed (by this process's clock, counted from before the
// last successful grant or renewal was sent) without a successful renewal. It is not closed by
// Release.
func (l *Lease) Lost() <-chan struct{} { return l.lost }

// Err returns why the lease was lost (errors.Is ErrLeaseLost), or nil while it is not.
func (l *Lease) Err() error {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.lostErr
}

type leaseRow struct {
	granted   bool
	token     int64
	holder    sql.NullString
	expiresAt sql.NullTime
	dbNow     time.Time
}

func checkLease(op, name, holder string, ttl time.Duration) error {
	if err := checkName("lease name", name, LeaseMaxBytes); err != nil {
		err.(*Error).Op = op
		return err
	}
	if len(holder) > LeaseMaxBytes {
		return usageErr(op, "lease holder is %d bytes, longer than %d", len(holder), LeaseMaxBytes)
	}
	if ttl < time.Millisecond {
		return usageErr(op, "lease ttl must be at least 1ms, got %v", ttl)
	}
	return nil
}

func (c *Client) acquireOnce(ctx context.Context, name, holder string, ttl time.Duration, o *LeaseOptions) (*Lease, *leaseRow, error) {
	lt := o.LockTimeout
	if lt <= 0 {
		lt = time.Second
	}
	qctx, cancel := c.bounded(ctx)
	defer cancel()
	start := time.Now()
	var r leaseRow
	err := c.db.QueryRowContext(qctx, c.sql("SELECT granted, token, holder, expires_at, db_now"+
		" FROM @S@.lease_acquire($1::text, $2::text, $3::bigint, $4::integer)"),
		name, holder, int64(ttl/time.Millisecond), ceilMs(lt)).Scan(&r.granted, &r.token, &r.holder, &r.expiresAt, &r.dbNow)
	if err != nil {
		return nil, nil, wrap(fmt.Sprintf("acquire lease %q", name), err)
	}
	if !r.granted {
		return nil, &r, nil
	}
	l := &Lease{c: c, name: name, holder: holder, ttl: ttl, token: r.token, expires: start.Add(ttl),
		lost: make(chan struct{}), stop: make(chan struct{})}
	go l.watch(!o.NoAutoRenew)
	return l, &r, nil
}

func heldError(name string, r *leaseRow) error {
	msg := fmt.Sprintf("lease %q is held by %q (token %d)", name, r.holder.String, r.token)
	if r.expiresAt.Valid {
		msg += fmt.Sprintf(" for %v more", r.expiresAt.Time.Sub(r.dbNow).Round(time.Millisecond))
	}
	if r.holder.String == "" {
		msg = fmt.Sprintf("lease %q is held back for %v: a name not yet granted on this server's timeline waits one"+
			" TTL, so that a grant made by a former primary has run out (docs/design/timeline-tokens.md)",
			name, r.expiresAt.Time.Sub(r.dbNow).Round(time.Millisecond))
	}
	return &Error{Op: "acquire", Class: ClassConflict, Kind: ErrLeaseHeld, Msg: msg}
}

// Acquire asks once for the lease of name for holder, for ttl. When someone else holds it,
// the error matches ErrLeaseHeld and says who and for how long. A granted lease renews itself
// every ttl/3 unless opts.NoAutoRenew; watch Lost.
func (c *Client) Acquire(ctx context.Context, name, holder string, ttl time.Duration, opts *LeaseOptions) (*Lease, error) {
	var o LeaseOptions
	if opts != nil {
		o = *opts
	}
	if err := checkLease("acquire", name, holder, ttl); err != nil {
		return nil, err
	}
	l, r, err := c.acquireOnce(ctx, name, holder, ttl, &o)
	if err != nil {
		return nil, err
	}
	if l == nil {
		return nil, heldError(name, r)
	}
	return l, nil
}

// Campaign waits until the lease of name is granted to holder (leader election), trying again
// when the current holder's lease runs out and every opts.RetryInterval, until ctx is done.
func (c *Client) Campaign(ctx context.Context, name, holder string, ttl time.Duration, opts *LeaseOptions) (*Lease, error) {
	var o LeaseOptions
	if opts != nil {
		o = *opts
	}
	if err := checkLease("campaign", name, holder, ttl); err != nil {
		return nil, err
	}
	every := o.RetryInterval
	if every <= 0 {
		every = time.Second
	}
	for {
		l, r, err := c.acquireOnce(ctx, name, holder, ttl, &o)
		if l != nil {
			return l, nil
		}
		wait := every
		if err != nil {
			var e *Error
			if !errors.As(err, &e) || (e.Class != ClassRetryLater && e.Class != ClassLost) || ctx.Err() != nil {
				return nil, err
			}
		} else if r.expiresAt.Valid {
			if d := r.expiresAt.Time.Sub(r.dbNow) + 5*time.Millisecond; d < wait {
				wait = d
			}
		}
		if wait < time.Millisecond {
			wait = time.Millisecond
		}
		t := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			t.Stop()
			return nil, &Error{Op: "campaign", Class: ClassRetryLater, Err: ctx.Err(),
				Msg: fmt.Sprintf("lease %q not granted: %v", name, ctx.Err())}
		case <-t.C:
		}
	}
}

func (l *Lease) markLost(msg string, cause error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.lostErr != nil || l.released {
		return
	}
	l.lostErr = &Error{Op: fmt.Sprintf("lease %q", l.name), Class: ClassLost, Kind: ErrLeaseLost, Msg: msg, Err: cause}
	close(l.lost)
}

// watch closes Lost at the local expiry, and renews every ttl/3 when auto is set.
func (l *Lease) watch(auto bool) {
	for {
		l.mu.Lock()
		exp := l.expires
		done := l.lostErr != nil || l.released
		l.mu.Unlock()
		if done {
			return
		}
		wait := time.Until(exp)
		if auto && l.ttl/3 < wait {
			wait = l.ttl / 3
		}
		if wait <= 0 {
			l.markLost(fmt.Sprintf("lost: its ttl of %v passed without a renewal", l.ttl), nil)
			return
		}
		t := time.NewTimer(wait)
		select {
		case <-l.stop:
			t.Stop()
			return
		case <-t.C:
		}
		if auto && time.Until(exp) > 0 {
			ctx, cancel := context.WithDeadline(context.Background(), exp)
			_ = l.Renew(ctx)
			cancel()
		}
	}
}

// Renew extends the lease by its TTL from now. When the server says it is no longer held
// (expired, released, superseded), the lease is lost: Lost closes and the error matches
// ErrLeaseLost. Other errors (a session lost, a timeout) leave it held until its TTL passes.
func (l *Lease) Renew(ctx context.Context) error {
	if err := l.Err(); err != nil {
		return err
	}
	qctx, cancel := l.c.bounded(ctx)
	defer cancel()
	start := time.Now()
	var status string
	err := l.c.db.QueryRowContext(qctx, l.c.sql("SELECT status FROM @S@.lease_renew($1::text, $2::bigint, $3::bigint)"),
		l.name, l.token, int64(l.ttl/time.Millisecond)).Scan(&status)
	if err != nil {
		return wrap(fmt.Sprintf("renew lease %q", l.name), err)
	}
	if status != "ok" {
		l.markLost(fmt.Sprintf("lost: the server says %s", status), nil)
		if e := l.Err(); e != nil {
			return e
		}
		return &Error{Op: "renew", Class: ClassUsage, Kind: ErrNotHeld, Msg: fmt.Sprintf("lease %q was released", l.name)}
	}
	l.mu.Lock()
	if n := start.Add(l.ttl); n.After(l.expires) {
		l.expires = n
	}
	l.mu.Unlock()
	return nil
}

// Release ends the lease (resign), so that a candidate gets it at once, and stops the
// background renewal. Releasing a lease already lost or superseded fails with ErrLeaseLost.
func (l *Lease) Release(ctx context.Context) error {
	l.mu.Lock()
	if l.released {
		l.mu.Unlock()
		return &Error{Op: "release", Class: ClassUsage, Kind: ErrNotHeld, Msg: fmt.Sprintf("lease %q was already released", l.name)}
	}
	l.released = true
	l.mu.Unlock()
	l.stopOnce.Do(func() { close(l.stop) })
	qctx, cancel := l.c.bounded(ctx)
	defer cancel()
	var status string
	err := l.c.db.QueryRowContext(qctx, l.c.sql("SELECT @S@.lease_release($1::text, $2::bigint)"), l.name, l.token).Scan(&status)
	if err != nil {
		return wrap(fmt.Sprintf("release lease %q", l.name), err)
	}
	if status != "ok" && status != "released" {
		return &Error{Op: "release", Class: ClassLost, Kind: ErrLeaseLost,
			Msg: fmt.Sprintf("lease %q was not released: the server says %s", l.name, status)}
	}
	return nil
}

// FenceCheck checks, inside the transaction tx that writes what the token protects, that
// token is still the newest granted for name; the row stays locked until tx ends, so no newer
// token can be granted before it commits. A stale token fails with an error matching ErrFenced
// (SQLSTATE PCF01): roll back and stop. A token never granted matches ErrNotFound (PCF02).
func (c *Client) FenceCheck(ctx context.Context, tx *sql.Tx, name string, token int64) error {
	if tx == nil {
		return usageErr("fence check", "a fencing check needs the writer's transaction: tx is nil")
	}
	var got int64
	err := tx.QueryRowContext(ctx, c.sql("SELECT @S@.fence_check($1::text, $2::bigint)"), name, token).Scan(&got)
	if err != nil {
		return wrap(fmt.Sprintf("fence check %q token %d", name, token), err)
	}
	return nil
}

// FenceNext hands a fencing token for name to holder, who holds the name by other means (a
// session lock). It fails with an error matching ErrConflict (PCF03) while a lease on the name
// is held. Run it outside a transaction of the caller: the token must be visible at once.
func (c *Client) FenceNext(ctx context.Context, name, holder string) (int64, error) {
	if err := checkLease("fence next", name, holder, time.Millisecond); err != nil {
		return 0, err
	}
	qctx, cancel := c.bounded(ctx)
	defer cancel()
	var token int64
	err := c.db.QueryRowContext(qctx, c.sql("SELECT @S@.fence_next($1::text, $2::text)"), name, holder).Scan(&token)
	if err != nil {
		return 0, wrap(fmt.Sprintf("fence next %q", name), err)
	}
	return token, nil
}

// LeaseInfo is the server's answer to one call of LeaseAcquire or LeaseRenew: the lease's row
// as that call left it.
type LeaseInfo struct {
	Name string
	// Granted says whether LeaseAcquire granted the lease to the caller; when false, Token,
	// Holder and ExpiresAt describe the current holder. For LeaseRenew it is Status == "ok".
	Granted bool
	// Status is LeaseRenew's answer: "ok" (renewed), "expired" (it lapsed, nobody took it
	// yet: acquire it again), "released", "superseded" (a newer token was granted: stop) or
	// "unknown" (no such name or token). LeaseAcquire sets "ok" when granted, else "held".
	Status    string
	Token     int64     // the fencing token of the grant
	Holder    string    // who holds it
	GrantedAt time.Time // zero when the server has none
	ExpiresAt time.Time // when it runs out by the database's clock; zero when it has none
	DBNow     time.Time // the database's clock when the answer was made
}

// Remaining is what is left of the lease by the database's clock (0 when released or expired),
// whatever the local clock says.
func (i LeaseInfo) Remaining() time.Duration {
	if i.ExpiresAt.IsZero() || !i.ExpiresAt.After(i.DBNow) {
		return 0
	}
	return i.ExpiresAt.Sub(i.DBNow)
}

// LeaseAcquire asks once for the lease of name for holder, for ttl, with no handle and no
// renewal: the call Acquire is built on, for a caller that keeps the token itself and renews
// on its own schedule (or from another process) with LeaseRenew. A lease held by someone else
// is an answer (Granted false, with the holder's token and expiry), not an error. It waits at
// most one second for writers that checked the previous token (ErrRetryLater, 55P03, after).
func (c *Client) LeaseAcquire(ctx context.Context, name, holder string, ttl time.Duration) (LeaseInfo, error) {
	if err := checkLease("lease acquire", name, holder, ttl); err != nil {
		return LeaseInfo{}, err
	}
	qctx, cancel := c.bounded(ctx)
	defer cancel()
	info := LeaseInfo{Name: name}
	row := c.db.QueryRowContext(qctx, c.sql("SELECT granted, token, holder, granted_at, expires_at, db_now"+
		" FROM @S@.lease_acquire($1::text, $2::text, $3::bigint, $4::integer)"),
		name, holder, int64(ttl/time.Millisecond), 1000)
	if err := info.scan(row, true); err != nil {
		return LeaseInfo{}, wrap(fmt.Sprintf("acquire lease %q", name), err)
	}
	return info, nil
}

// LeaseRenew renews once, for ttl from now, the lease of name granted with token. A token
// that no longer holds it is an answer, not an error: Status says why ("expired", "released",
// "superseded", "unknown") and the caller stops what the lease protected.
func (c *Client) LeaseRenew(ctx context.Context, name string, token int64, ttl time.Duration) (LeaseInfo, error) {
	if err := checkLease("lease renew", name, "", ttl); err != nil {
		return LeaseInfo{}, err
	}
	qctx, cancel := c.bounded(ctx)
	defer cancel()
	info := LeaseInfo{Name: name}
	row := c.db.QueryRowContext(qctx, c.sql("SELECT status, token, holder, granted_at, expires_at, db_now"+
		" FROM @S@.lease_renew($1::text, $2::bigint, $3::bigint)"), name, token, int64(ttl/time.Millisecond))
	if err := info.scan(row, false); err != nil {
		return LeaseInfo{}, wrap(fmt.Sprintf("renew lease %q", name), err)
	}
	return info, nil
}

// LeaseRelease ends the lease of name granted with token, so that a candidate gets it at once,
// and returns the server's status: "ok", "released" (already), "superseded" (a newer token
// exists) or "unknown" (no such name or token). The status is an answer, not an error.
func (c *Client) LeaseRelease(ctx context.Context, name string, token int64) (string, error) {
	if err := checkLease("lease release", name, "", time.Millisecond); err != nil {
		return "", err
	}
	qctx, cancel := c.bounded(ctx)
	defer cancel()
	var status string
	err := c.db.QueryRowContext(qctx, c.sql("SELECT @S@.lease_release($1::text, $2::bigint)"), name, token).Scan(&status)
	if err != nil {
		return "", wrap(fmt.Sprintf("release lease %q", name), err)
	}
	return status, nil
}

func (i *LeaseInfo) scan(row *sql.Row, acquire bool) error {
	var (
		granted          bool
		status, holder   sql.NullString
		token            sql.NullInt64
		grantedAt, until sql.NullTime
	)
	first := interface{}(&status)
	if acquire {
		first = &granted
	}
	if err := row.Scan(first, &token, &holder, &grantedAt, &until, &i.DBNow); err != nil {
		return err
	}
	if acquire {
		i.Granted, i.Status = granted, "held"
		if granted {
			i.Status = "ok"
		}
	} else {
		i.Status = status.String
		i.Granted = i.Status == "ok"
	}
	i.Token, i.Holder = token.Int64, holder.String
	if grantedAt.Valid {
		i.GrantedAt = grantedAt.Time
	}
	if until.Valid {
		i.ExpiresAt = until.Time
	}
	return nil
}

package pgcoord

import (
	"context"
	"database/sql"
	"fmt"
	"reflect"
	"sync"
	"sync/atomic"
	"time"
)

// One heartbeat per client for all its held session locks: a goroutine started with the first
// lock and ended at the first tick that finds none held, which checks each held lock every
// HeartbeatInterval (Lock.check), and the pool's closing once per tick for all of them.

type heartbeats struct {
	mu      sync.Mutex
	locks   map[*Lock]struct{}
	running bool

	smu      sync.Mutex
	sessions map[interface{}]*session // by the driver's connection
}

// hold adds l to the locks the heartbeat checks, starting the heartbeat if it is not running.
func (c *Client) hold(l *Lock) {
	h := &c.hb
	h.mu.Lock()
	if h.locks == nil {
		h.locks = map[*Lock]struct{}{}
	}
	h.locks[l] = struct{}{}
	if !h.running {
		h.running = true
		go c.heartbeat()
	}
	h.mu.Unlock()
}

// forget takes l out of the heartbeat's locks (unlocked or lost).
func (c *Client) forget(l *Lock) {
	c.hb.mu.Lock()
	delete(c.hb.locks, l)
	c.hb.mu.Unlock()
}

func (c *Client) heartbeat() {
	h := &c.hb
	t := time.NewTicker(c.opts.HeartbeatInterval)
	defer t.Stop()
	var ls []*Lock
	for range t.C {
		h.mu.Lock()
		if len(h.locks) == 0 {
			h.running = false
			h.mu.Unlock()
			return
		}
		ls = ls[:0]
		for l := range h.locks {
			ls = append(ls, l)
		}
		h.mu.Unlock()
		gone := dbClosed(c.db)
		for _, l := range ls {
			go l.check(gone)
		}
		for i := range ls {
			ls[i] = nil
		}
	}
}

// session identifies a server session: its pid and its start (microseconds since the epoch),
// which together cannot name another session later given the same pid.
type session struct {
	pid   int64
	start int64
}

const sqlSession = "SELECT a.pid, (extract(epoch FROM a.backend_start) * 1000000)::bigint" +
	" FROM pg_catalog.pg_stat_get_activity(pg_catalog.pg_backend_pid()) a"

const sqlEndSession = "SELECT pg_catalog.pg_terminate_backend(a.pid)" +
	" FROM pg_catalog.pg_stat_get_activity($1::integer) a" +
	" WHERE (extract(epoch FROM a.backend_start) * 1000000)::bigint = $2"

// sessionOf returns the server session of conn, asked once per driver connection (nil when
// it cannot be known: the caller then bounds its statements with a context).
func (c *Client) sessionOf(ctx context.Context, conn *sql.Conn) (*session, error) {
	var key interface{}
	_ = conn.Raw(func(dc interface{}) error {
		key = dc
		return nil
	})
	if key == nil || reflect.TypeOf(key).Kind() != reflect.Ptr {
		return nil, nil
	}
	h := &c.hb
	h.smu.Lock()
	s := h.sessions[key]
	h.smu.Unlock()
	if s != nil {
		return s, nil
	}
	qctx, cancel := c.bounded(ctx)
	defer cancel()
	s = &session{}
	if err := conn.QueryRowContext(qctx, sqlSession).Scan(&s.pid, &s.start); err != nil {
		return nil, err
	}
	h.smu.Lock()
	if h.sessions == nil || len(h.sessions) >= 1024 {
		// Connections come and go: forget them all now and then (each costs one statement
		// to learn again).
		h.sessions = map[interface{}]*session{}
	}
	h.sessions[key] = s
	h.smu.Unlock()
	return s, nil
}

// quick runs a statement that never waits on conn, returning one bool, bounded by the
// client's statement timeout. With a ctx that has a deadline or can be cancelled, the bound is
// a context as usual. With one that cannot (context.Background), a context would cost the
// drivers a goroutine per statement (pgx watches any cancellable context, and so does
// database/sql's Rows): the bound is a timer instead, which, if the answer is late, ends the
// statement's session from another connection of the pool (pg_terminate_backend of exactly
// that session), so that the statement fails and its caller drops the connection.
func (c *Client) quick(ctx context.Context, conn *sql.Conn, sp **session, query string, arg int64, dest *bool) error {
	if ctx.Done() == nil && *sp == nil {
		s, err := c.sessionOf(ctx, conn)
		if err != nil {
			return err
		}
		*sp = s
	}
	s := *sp
	if ctx.Done() != nil || s == nil {
		qctx, cancel := c.bounded(ctx)
		defer cancel()
		return conn.QueryRowContext(qctx, query, arg).Scan(dest)
	}
	var fired int32
	t := time.AfterFunc(c.opts.StatementTimeout, func() {
		atomic.StoreInt32(&fired, 1)
		c.endSession(s)
	})
	err := conn.QueryRowContext(ctx, query, arg).Scan(dest)
	t.Stop()
	if err != nil && atomic.LoadInt32(&fired) == 1 {
		return fmt.Errorf("no answer within the statement timeout (%v), the session was ended: %w",
			c.opts.StatementTimeout, err)
	}
	return err
}

func (c *Client) endSession(s *session) {
	ctx, cancel := c.bounded(context.Background())
	defer cancel()
	_, _ = c.db.ExecContext(ctx, sqlEndSession, s.pid, s.start)
}

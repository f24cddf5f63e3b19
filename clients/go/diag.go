package pgcoord

import (
	"context"
	"database/sql"
	"fmt"
	"strconv"
	"strings"
	"time"
)

// BlockingSession is one row of the server's blocking_forest(): a session that waits for a
// lock or blocks one (docs/PROTOCOL.md, "Diagnostics"). A blocker that has no row of its own
// (a prepared transaction is PID 0) has only PID, Blocks and State; the other fields are then
// their zero values.
type BlockingSession struct {
	PID int
	// BlockedBy are the sessions it waits for (pg_blocking_pids, without duplicates); empty
	// when it waits for no one.
	BlockedBy []int
	// Blocks are the sessions waiting directly for it.
	Blocks []int
	// Root says it blocks someone and waits for no one: the session to look at first.
	Root bool
	// Depth is the distance from the nearest root (0 for a root), -1 in a wait cycle that no
	// root leads to.
	Depth int
	// BlocksTotal counts the sessions waiting for it, directly or through others.
	BlocksTotal int
	// InCycle says it is part of a wait cycle (a deadlock not broken yet).
	InCycle bool
	// WaitLocktype, WaitMode and WaitTarget are the lock it waits for, the target in one line
	// ("relation public.orders", `advisory 4242 "nightly"`, ...); "" when it waits for none.
	WaitLocktype, WaitMode, WaitTarget string
	// Waited is how long it has waited for that lock (PostgreSQL 14 and later; 0 otherwise).
	Waited time.Duration
	// State is pg_stat_activity's state ("active", "idle in transaction", ...), or
	// "prepared transaction" for PID 0.
	State                    string
	WaitEventType, WaitEvent string
	Database, Usename        string
	ApplicationName          string
	Client                   string // "host:port", "local" for a Unix socket
	BackendType              string
	BackendStart             time.Time
	// XactAge, QueryAge and StateAge are ages by the server's clock: of its transaction, of
	// its current or last query, of its state; 0 where not applicable (no transaction, no
	// query).
	XactAge, QueryAge, StateAge time.Duration
	// Query is its current or last query; reading other roles' queries needs
	// pg_read_all_stats.
	Query string
}

// Forest is the blocking forest, as BlockingForest returns it: roots first, then by depth.
type Forest []BlockingSession

// BlockingTree is a session of the forest with the sessions waiting directly for it.
type BlockingTree struct {
	BlockingSession
	Children []BlockingTree
}

// BlockingForest reads who waits for whom now (the server's blocking_forest(), what `pgcoord
// blockers --json` shows): one BlockingSession per session that waits for a lock or blocks
// one, in the current database plus the sessions of other databases that wait for or block
// one of them. The calling session (a connection of the pool) is left out.
func (c *Client) BlockingForest(ctx context.Context) (Forest, error) {
	qctx, cancel := c.bounded(ctx)
	defer cancel()
	rows, err := c.db.QueryContext(qctx, c.sql("SELECT pid, blocked_by::text, blocks::text, root, depth,"+
		" blocks_total, in_cycle, wait_locktype, wait_mode, wait_target, waited_ms, state, wait_event_type,"+
		" wait_event, database, usename, application_name, client, backend_type, backend_start,"+
		" xact_age_ms, query_age_ms, state_age_ms, query FROM @S@.blocking_forest()"))
	if err != nil {
		return nil, wrap("blocking forest", err)
	}
	defer rows.Close()
	var f Forest
	for rows.Next() {
		var (
			s                                            BlockingSession
			blockedBy, blocks                            string
			root, inCycle                                sql.NullBool
			depth, total                                 sql.NullInt64
			waited, xact, query, state                   sql.NullInt64
			lt, mode, target, st, wet, we, db, user, app sql.NullString
			client, btype, text                          sql.NullString
			start                                        sql.NullTime
		)
		if err := rows.Scan(&s.PID, &blockedBy, &blocks, &root, &depth, &total, &inCycle, &lt, &mode,
			&target, &waited, &st, &wet, &we, &db, &user, &app, &client, &btype, &start, &xact, &query,
			&state, &text); err != nil {
			return nil, wrap("blocking forest", err)
		}
		if s.BlockedBy, err = intArray(blockedBy); err == nil {
			s.Blocks, err = intArray(blocks)
		}
		if err != nil {
			return nil, wrap("blocking forest", err)
		}
		s.Root, s.InCycle = root.Bool, inCycle.Bool
		s.Depth = -1
		if depth.Valid {
			s.Depth = int(depth.Int64)
		}
		s.BlocksTotal = int(total.Int64)
		s.WaitLocktype, s.WaitMode, s.WaitTarget = lt.String, mode.String, target.String
		s.Waited = time.Duration(waited.Int64) * time.Millisecond
		s.State, s.WaitEventType, s.WaitEvent = st.String, wet.String, we.String
		s.Database, s.Usename, s.ApplicationName = db.String, user.String, app.String
		s.Client, s.BackendType, s.BackendStart = client.String, btype.String, start.Time
		s.XactAge = time.Duration(xact.Int64) * time.Millisecond
		s.QueryAge = time.Duration(query.Int64) * time.Millisecond
		s.StateAge = time.Duration(state.Int64) * time.Millisecond
		s.Query = text.String
		f = append(f, s)
	}
	if err := rows.Err(); err != nil {
		return nil, wrap("blocking forest", err)
	}
	return f, nil
}

// intArray reads the text form of an integer[] ("{1,2}").
func intArray(s string) ([]int, error) {
	s = strings.TrimSuffix(strings.TrimPrefix(s, "{"), "}")
	if s == "" {
		return nil, nil
	}
	parts := strings.Split(s, ",")
	out := make([]int, len(parts))
	for i, p := range parts {
		n, err := strconv.Atoi(p)
		if err != nil {
			return nil, fmt.Errorf("integer array %q: %w", s, err)
		}
		out[i] = n
	}
	return out, nil
}

// Session returns the row of pid, if the forest has one.
func (f Forest) Session(pid int) (BlockingSession, bool) {
	for _, s := range f {
		if s.PID == pid {
			return s, true
		}
	}
	return BlockingSession{}, false
}

// Roots returns the sessions that block others and wait for no one, in the forest's order.
func (f Forest) Roots() []BlockingSession {
	var out []BlockingSession
	for _, s := range f {
		if s.Root {
			out = append(out, s)
		}
	}
	return out
}

// Children returns the sessions waiting directly for pid, in the order of its Blocks.
func (f Forest) Children(pid int) []BlockingSession {
	s, ok := f.Session(pid)
	if !ok {
		return nil
	}
	var out []BlockingSession
	for _, w := range s.Blocks {
		if ws, ok := f.Session(w); ok {
			out = append(out, ws)
		}
	}
	return out
}

// Trees returns the forest as trees, one per root, each session with the sessions waiting
// directly for it below. A session waiting for two sessions appears under both; a wait cycle
// that no root leads to appears in no tree (its sessions have InCycle and Depth -1), and a
// cycle below a root stops where it would enter a session of its own path again.
func (f Forest) Trees() []BlockingTree {
	var out []BlockingTree
	for _, r := range f.Roots() {
		out = append(out, f.tree(r, map[int]bool{}))
	}
	return out
}

func (f Forest) tree(s BlockingSession, path map[int]bool) BlockingTree {
	t := BlockingTree{BlockingSession: s}
	path[s.PID] = true
	for _, w := range f.Children(s.PID) {
		if !path[w.PID] {
			t.Children = append(t.Children, f.tree(w, path))
		}
	}
	delete(path, s.PID)
	return t
}

// LockHolder is one row of the server's lock_holders(): a session that holds or waits for an
// advisory lock.
type LockHolder struct {
	PID int
	// Mode is "ExclusiveLock" or "ShareLock".
	Mode    string
	Granted bool
	// ApplicationName, ClientAddr ("" for a Unix socket) and State are the session's, from
	// pg_stat_activity.
	ApplicationName, ClientAddr, State string
	// WaitStart is since when a waiter waits (PostgreSQL 14 and later; zero otherwise and for
	// a holder).
	WaitStart    time.Time
	StateChange  time.Time
	BackendStart time.Time
	// AcquiredAt is when a holder took the lock, where that is known (pgcoord's lock-holding
	// transactions, and session locks recorded by `pgcoord run`); zero otherwise.
	AcquiredAt time.Time
	// IsSelf says the row is the calling session (a connection of the pool).
	IsSelf bool
}

// LockHolders returns who holds or waits for the advisory lock of the name (the key Key(name)
// that Lock and XactLock take, and `pgcoord run --lock NAME`), in the current database:
// holders first, then waiters in the order they began waiting. It is what `pgcoord locks`
// shows for one lock.
func (c *Client) LockHolders(ctx context.Context, name string) ([]LockHolder, error) {
	if err := checkName("lock name", name, NameMaxBytes); err != nil {
		err.(*Error).Op = "lock holders"
		return nil, err
	}
	return c.lockHolders(ctx, Key(name), describe(name))
}

// LockHoldersKey is LockHolders for a bigint advisory key, as pg_advisory_lock(bigint) takes
// it.
func (c *Client) LockHoldersKey(ctx context.Context, key int64) ([]LockHolder, error) {
	return c.lockHolders(ctx, key, fmt.Sprintf("key %d", key))
}

func (c *Client) lockHolders(ctx context.Context, key int64, what string) ([]LockHolder, error) {
	op := "lock holders of " + what
	qctx, cancel := c.bounded(ctx)
	defer cancel()
	rows, err := c.db.QueryContext(qctx, c.sql("SELECT pid, mode, granted, application_name, client_addr,"+
		" state, wait_start, state_change, backend_start, acquired_at, is_self"+
		" FROM @S@.lock_holders($1::bigint)"), key)
	if err != nil {
		return nil, wrap(op, err)
	}
	defer rows.Close()
	var out []LockHolder
	for rows.Next() {
		var (
			h                                  LockHolder
			mode, app, addr, state             sql.NullString
			granted, self                      sql.NullBool
			waitStart, change, start, acquired sql.NullTime
		)
		if err := rows.Scan(&h.PID, &mode, &granted, &app, &addr, &state, &waitStart, &change, &start,
			&acquired, &self); err != nil {
			return nil, wrap(op, err)
		}
		h.Mode, h.Granted, h.IsSelf = mode.String, granted.Bool, self.Bool
		h.ApplicationName, h.ClientAddr, h.State = app.String, addr.String, state.String
		h.WaitStart, h.StateChange, h.BackendStart, h.AcquiredAt = waitStart.Time, change.Time, start.Time, acquired.Time
		out = append(out, h)
	}
	if err := rows.Err(); err != nil {
		return nil, wrap(op, err)
	}
	return out, nil
}

package pgcoord

import (
	"context"
	"crypto/rand"
	"database/sql"
	"database/sql/driver"
	"encoding/hex"
	"errors"
	"fmt"
	"reflect"
	"strings"
	"sync"
	"time"
)

// PoolerInfo says what sits between the client and PostgreSQL, as Client.Pooler found it.
type PoolerInfo struct {
	// Mode is "none" (a direct session, or a pooler that keeps a client on one server
	// session the probe could not tell from one), "session" (a pooler in session mode),
	// "transaction" (a pooler that may move a client to another server session between
	// transactions: PgBouncer's pool_mode = transaction), "statement" (one that refuses
	// transactions: pool_mode = statement), or "unknown" (something is in between and its
	// kind did not show; treated as not keeping the session).
	Mode string
	// Why is what showed it, in one line.
	Why string
	// ClientPID is the backend pid the driver was told when it connected (pgx says it; 0
	// when the driver does not), ServerPID the one pg_backend_pid() gave.
	ClientPID, ServerPID int
}

// SessionKept says whether a session-level state (a session lock, LISTEN) stays on the
// server session the client used: false behind a transaction-mode pooler, or an unknown one.
func (p PoolerInfo) SessionKept() bool { return p.Mode == "none" || p.Mode == "session" }

// poolerProbeWait bounds the probe's waits: for a second connection, for a statement queued
// behind another client's transaction, and for the notification.
const poolerProbeWait = 2 * time.Second

type poolerCache struct {
	mu   sync.Mutex
	info *PoolerInfo
}

// Pooler finds what sits between the client and PostgreSQL, once per Client (the answer is
// kept; thorough tests again), as the C library's pgc_conn_pooler() and the other clients do:
//
//   - a session whose pid, as the driver was told it at connect, is pg_backend_pid() is
//     direct (one round trip; pgx tells it, lib/pq does not);
//   - otherwise the probe sets a setting of its own on one connection of the pool, opens a
//     transaction on a second one, and asks the first for its pid and the setting again. A
//     transaction-mode pooler shows itself: the second connection is given the first one's
//     server session, or the first one's statement waits for the transaction to end, runs on
//     another server session, or has lost the setting;
//   - when none of that shows and the driver can wait for notifications (pgx), a NOTIFY from
//     the second connection that never reaches a LISTEN on the first tells a transaction-mode
//     pooler from a session-mode one.
//
// Options.Pooler, when set, is taken as the answer instead. The probe needs two connections
// of the pool at once: with SetMaxOpenConns(1), and a driver that does not tell its startup
// pid, the answer is "unknown".
func (c *Client) Pooler(ctx context.Context, thorough bool) (PoolerInfo, error) {
	if c.opts.Pooler != "" {
		return PoolerInfo{Mode: c.opts.Pooler, Why: "as Options.Pooler says"}, nil
	}
	c.pooler.mu.Lock()
	defer c.pooler.mu.Unlock()
	if c.pooler.info != nil && !thorough {
		return *c.pooler.info, nil
	}
	p, err := c.probePooler(ctx)
	if err != nil {
		return PoolerInfo{}, err
	}
	c.pooler.info = &p
	return p, nil
}

// startupPID is the backend pid the driver was told at connect, when it says (pgx's stdlib
// connection: Conn().PgConn().PID()); 0 otherwise. Found by reflection: no driver is imported.
func startupPID(dc interface{}) int {
	v := reflect.ValueOf(dc)
	for _, name := range []string{"Conn", "PgConn", "PID"} {
		m := v.MethodByName(name)
		if !m.IsValid() || m.Type().NumIn() != 0 || m.Type().NumOut() != 1 {
			return 0
		}
		v = m.Call(nil)[0]
		if v.Kind() == reflect.Ptr && v.IsNil() {
			return 0
		}
	}
	switch v.Kind() {
	case reflect.Uint32, reflect.Uint64, reflect.Uint:
		return int(v.Uint())
	case reflect.Int32, reflect.Int64, reflect.Int:
		return int(v.Int())
	}
	return 0
}

func (c *Client) probePooler(ctx context.Context) (PoolerInfo, error) {
	const op = "pooler probe"
	conn1, err := c.db.Conn(ctx)
	if err != nil {
		return PoolerInfo{}, c.connErr(op, err)
	}
	healthy := true
	defer func() {
		if healthy {
			_ = conn1.Close()
		} else {
			drop(conn1)
		}
	}()
	var p PoolerInfo
	_ = conn1.Raw(func(dc interface{}) error {
		p.ClientPID = startupPID(dc)
		return nil
	})
	qctx, cancel := c.bounded(ctx)
	defer cancel()
	if err := conn1.QueryRowContext(qctx, "SELECT pg_catalog.pg_backend_pid()").Scan(&p.ServerPID); err != nil {
		healthy = false
		return PoolerInfo{}, wrap(op, err)
	}
	if p.ClientPID != 0 && p.ClientPID == p.ServerPID {
		p.Mode, p.Why = "none", fmt.Sprintf("direct session: the driver's backend pid (%d) is the server's", p.ServerPID)
		return p, nil
	}
	between := ""
	if p.ClientPID != 0 {
		between = fmt.Sprintf("something is in between (the driver was told pid %d, the server says %d)", p.ClientPID, p.ServerPID)
	}
	var tok [8]byte
	_, _ = rand.Read(tok[:])
	token := hex.EncodeToString(tok[:])
	if _, err := conn1.ExecContext(qctx, "SELECT pg_catalog.set_config('pgcoord.pooler_probe', $1, false)", token); err != nil {
		healthy = false
		return PoolerInfo{}, wrap(op, err)
	}
	defer func() {
		if healthy {
			rctx, rcancel := c.bounded(context.Background())
			defer rcancel()
			_, _ = conn1.ExecContext(rctx, "SELECT pg_catalog.set_config('pgcoord.pooler_probe', '', false)")
		}
	}()

	// A second connection, in a transaction, for as long as the first one is asked again.
	cctx, ccancel := context.WithTimeout(ctx, poolerProbeWait)
	conn2, err := c.db.Conn(cctx)
	ccancel()
	if err != nil {
		if ctx.Err() != nil {
			return PoolerInfo{}, c.connErr(op, err)
		}
		p.Mode = "unknown"
		p.Why = "the pool gave no second connection for the probe within " + poolerProbeWait.String() +
			" (SetMaxOpenConns(1)?); set Options.Pooler to \"none\" for a direct connection"
		if between != "" {
			p.Why = between + "; " + p.Why
		}
		return p, nil
	}
	defer conn2.Close()
	tx, err := conn2.BeginTx(qctx, nil)
	if err != nil {
		if isStatementMode(err) {
			p.Mode, p.Why = "statement", "BEGIN was refused: "+firstLine(err)
			return p, nil
		}
		// lib/pq turns the pooler's FATAL into driver.ErrBadConn and drops its message: a
		// BEGIN that ends its connection while the first one still answers is the same refusal.
		if errors.Is(err, driver.ErrBadConn) && ctx.Err() == nil {
			var again int
			if conn1.QueryRowContext(qctx, "SELECT pg_catalog.pg_backend_pid()").Scan(&again) == nil {
				p.Mode = "statement"
				p.Why = "BEGIN ended its connection while single statements ran (the driver tells no more:" +
					" a pooler in statement mode refuses transactions)"
				return p, nil
			}
		}
		return PoolerInfo{}, wrap(op, err)
	}
	defer func() { _ = tx.Rollback() }()
	var pid2 int
	if err := tx.QueryRowContext(qctx, "SELECT pg_catalog.pg_backend_pid()").Scan(&pid2); err != nil {
		if isStatementMode(err) {
			p.Mode, p.Why = "statement", "a statement in a transaction was refused: "+firstLine(err)
			return p, nil
		}
		return PoolerInfo{}, wrap(op, err)
	}
	if pid2 == p.ServerPID {
		p.Mode = "transaction"
		p.Why = fmt.Sprintf("another client's transaction was given this client's server session (pid %d)", pid2)
		return p, nil
	}
	wctx, wcancel := context.WithTimeout(ctx, poolerProbeWait)
	defer wcancel()
	var again int
	var setting sql.NullString
	err = conn1.QueryRowContext(wctx, "SELECT pg_catalog.pg_backend_pid(), pg_catalog.current_setting('pgcoord.pooler_probe', true)").
		Scan(&again, &setting)
	switch {
	case err != nil && ctx.Err() == nil && wctx.Err() != nil:
		healthy = false
		p.Mode = "transaction"
		p.Why = "a statement outside any transaction waited for another client's transaction to end (the pool was exhausted)"
		return p, nil
	case err != nil:
		healthy = false
		return PoolerInfo{}, wrap(op, err)
	case again != p.ServerPID:
		p.Mode = "transaction"
		p.Why = fmt.Sprintf("two statements of one connection ran on two server sessions (pid %d, then %d)", p.ServerPID, again)
		return p, nil
	case setting.String != token:
		p.Mode = "transaction"
		p.Why = "a session setting was gone at the connection's next statement"
		return p, nil
	}

	// No sign yet: a NOTIFY that reaches a LISTEN of the first connection, where the driver
	// can wait for notifications.
	canWait := false
	_ = conn1.Raw(func(dc interface{}) error {
		canWait = waitMethod(dc).IsValid()
		return nil
	})
	if !canWait {
		if between != "" {
			p.Mode, p.Why = "unknown", between+", and its kind did not show"
		} else {
			p.Mode = "none"
			p.Why = fmt.Sprintf("one server session (pid %d) kept the connection's setting while another transaction ran; the driver tells no startup pid and cannot wait for notifications, so a session-mode pooler would look the same", p.ServerPID)
		}
		return p, nil
	}
	channel := "pgcoord_pooler_probe_" + token
	l := &connListener{conn: conn1}
	if err := l.Listen(qctx, channel); err != nil {
		healthy = false
		return PoolerInfo{}, wrap(op, err)
	}
	defer func() {
		if healthy {
			uctx, ucancel := c.bounded(context.Background())
			defer ucancel()
			_ = l.Unlisten(uctx, channel)
		}
	}()
	if _, err := tx.ExecContext(qctx, "SELECT pg_catalog.pg_notify($1, '')", channel); err != nil {
		return PoolerInfo{}, wrap(op, err)
	}
	if err := tx.Commit(); err != nil {
		return PoolerInfo{}, wrap(op, err)
	}
	nctx, ncancel := context.WithTimeout(ctx, poolerProbeWait)
	defer ncancel()
	n, err := l.Wait(nctx)
	switch {
	case err == nil && n.Channel == channel:
		if between != "" {
			p.Mode, p.Why = "session", between+", and it kept this client on one server session (a LISTEN heard a NOTIFY)"
		} else {
			p.Mode, p.Why = "none", "one server session kept the setting and heard a NOTIFY"
		}
	case err != nil && ctx.Err() == nil && nctx.Err() != nil:
		// The wait was cut by its own deadline: the driver's connection may be unusable.
		healthy = false
		p.Mode = "transaction"
		p.Why = "a NOTIFY never reached this client's LISTEN: the LISTEN stayed on a server session the client no longer has"
	case err != nil:
		healthy = false
		return PoolerInfo{}, wrap(op, err)
	default:
		p.Mode, p.Why = "unknown", "the LISTEN heard another channel"
	}
	return p, nil
}

// isStatementMode says whether err is a pooler's refusal of a transaction (PgBouncer in
// statement mode: "transaction blocks not allowed in statement pooling mode").
func isStatementMode(err error) bool {
	return strings.Contains(strings.ToLower(err.Error()), "statement pooling mode")
}

func firstLine(err error) string {
	s, _, _ := strings.Cut(err.Error(), "\n")
	return s
}

// what says what is in between, for a message: "a transaction-mode pooler is in between (why)".
func (p PoolerInfo) what() string {
	if p.Mode == "unknown" {
		return "cannot tell whether the pooler in between keeps this session (" + p.Why + ")"
	}
	return "a " + p.Mode + "-mode pooler is in between (" + p.Why + ")"
}

// sessionLockRefusal is the error of a session lock behind a pooler that does not keep the
// session, or nil: the C library's and the Python client's refusals, in the same words.
func (c *Client) sessionLockRefusal(ctx context.Context, op, name string) error {
	p, err := c.Pooler(ctx, false)
	if err != nil {
		return err
	}
	var fix string
	switch p.Mode {
	case "none", "session":
		return nil
	case "statement":
		fix = "no advisory lock can be kept through it; connect to PostgreSQL directly, or through a pool in" +
			" session or transaction mode"
	case "transaction":
		fix = "a session lock would be taken on a server session this client does not keep, and could be" +
			" neither trusted nor released; hold it in a transaction with XactLock, or use a lease, or connect" +
			" to PostgreSQL directly or through a session-mode pool"
	default:
		fix = "a session lock could be taken on a server session this client does not keep; hold it in a" +
			" transaction with XactLock, or use a lease, or set Options.Pooler if you know what is in between"
	}
	return &Error{Op: op, Class: ClassUsage, Kind: ErrPooler,
		Msg: fmt.Sprintf("lock %s: %s: %s", describe(name), p.what(), fix)}
}

// Command pgcoord-conformance is the Go client's conformance adapter.
//
// The protocol is tests/conformance/README.md: one JSON request a line on stdin, one JSON
// answer a line on stdout, in order, each written at once. Every op runs on the Go client's
// API (a pgcoord.Client on one *sql.DB opened with pgx v4's stdlib driver: the adapter's
// sessions) except `sql`, the runner's look at a session of that pool, and `init`, which runs
// `pgcoord init --schema` as the client's README says to. `work` runs the client's Worker on
// that pool (LISTEN through pgx), its handlers writing the events as they start and end.
//
// PGCOORD_BIN names the pgcoord tool for `init` (else build/pgcoord under PGCOORD_SRC, else
// pgcoord on PATH). End of input exits, releasing everything with the sessions.
//
// The Go client's session lock is a handle on a session of its own, and is not re-entrant: a
// second Lock of a name the program holds is another session, which waits. The protocol's
// `lock` of a name the adapter already holds in session mode is the server's count for one
// session (taken twice, released twice); the adapter keeps that count on the handle it holds.
package main

import (
	"bufio"
	"bytes"
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/jackc/pgx/v4/stdlib"

	pgcoord "github.com/pgcoord/pgcoord/clients/go"
)

const protocol = 1

var features = []string{"queue", "results", "keys", "locks", "leases", "tx", "diag"}

var isolations = map[string]sql.IsolationLevel{
	"read committed": sql.LevelReadCommitted, "repeatable read": sql.LevelRepeatableRead,
	"serializable": sql.LevelSerializable,
}

// answerErr is an error answer: kind, sqlstate, message.
type answerErr struct {
	kind, sqlstate, msg string
}

func (a *answerErr) Error() string { return a.msg }

func fail(kind, format string, args ...interface{}) error {
	return &answerErr{kind: kind, msg: fmt.Sprintf(format, args...)}
}

// kindOf is the protocol's error kind of an error: the client's classes, and for the server's
// own errors in `tx` and `sql` (which the client hands back as they are) their SQLSTATE.
func kindOf(err error) string {
	var pe *pgcoord.Error
	if errors.As(err, &pe) {
		switch {
		case errors.Is(err, pgcoord.ErrProtocolVersion):
			return "schema"
		case errors.Is(err, pgcoord.ErrLockTimeout):
			// A wait that ran out is "conflict" in the protocol, though the client files it
			// under ClassRetryLater.
			return "conflict"
		case errors.Is(err, pgcoord.ErrStale):
			return "stale"
		case errors.Is(err, pgcoord.ErrNotHeld):
			return "lost"
		}
		switch pe.Class {
		case pgcoord.ClassUsage:
			return "usage"
		case pgcoord.ClassConflict:
			return "conflict"
		case pgcoord.ClassNotFound:
			return "not_found"
		case pgcoord.ClassFenced:
			return "fenced"
		case pgcoord.ClassRetry, pgcoord.ClassRetryLater:
			return "retry_later"
		case pgcoord.ClassLost:
			return "lost"
		}
		if pe.SQLState != "" {
			return "sql"
		}
		return "internal"
	}
	st := pgcoord.SQLState(err)
	switch {
	case st == "":
		// No answer from the server: the session or the connection failed.
		return "lost"
	case pgcoord.ClassOf(st) == pgcoord.ClassRetry || pgcoord.ClassOf(st) == pgcoord.ClassRetryLater:
		return "retry_later"
	case pgcoord.ClassOf(st) == pgcoord.ClassLost:
		return "lost"
	}
	return "sql"
}

type request map[string]interface{}

func (r request) str(name string, required bool) (string, error) {
	v, ok := r[name]
	if !ok || v == nil {
		if required {
			return "", fail("usage", "%s must be a string", name)
		}
		return "", nil
	}
	s, ok := v.(string)
	if !ok {
		return "", fail("usage", "%s must be a string", name)
	}
	return s, nil
}

// integer reads an integer argument exactly (a key or token needs all 64 bits).
func (r request) integer(name string, def *int64) (int64, error) {
	v, ok := r[name]
	if !ok || v == nil {
		if def != nil {
			return *def, nil
		}
		return 0, fail("usage", "%s must be an integer", name)
	}
	n, ok := v.(json.Number)
	if !ok {
		return 0, fail("usage", "%s must be an integer", name)
	}
	i, err := n.Int64()
	if err != nil {
		return 0, fail("usage", "%s must be an integer, got %s", name, n)
	}
	return i, nil
}

func dflt(i int64) *int64 { return &i }

func ms(i int64) time.Duration { return time.Duration(i) * time.Millisecond }

// held is one lock the adapter holds: a session lock's handle (count: how many times the
// adapter took it, as the server counts one session's locks), or a transaction of its own
// that holds a transaction lock until unlock.
type held struct {
	lock  *pgcoord.Lock
	count int
	tx    *sql.Tx
}

type adapter struct {
	dsn, schema string
	db          *sql.DB
	c           *pgcoord.Client
	locks       map[string][]*held
	work        *work
	afterAnswer func()     // work's start: its events come after its answer
	wmu         sync.Mutex // answers and events share stdout
	out         *bufio.Writer
}

func (a *adapter) write(obj map[string]interface{}) {
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(obj); err != nil {
		b.Reset()
		fmt.Fprintf(&b, `{"id":null,"ok":false,"error":{"kind":"internal","sqlstate":null,"message":%q}}`+"\n", err.Error())
	}
	a.wmu.Lock()
	defer a.wmu.Unlock()
	_, _ = a.out.Write(b.Bytes())
	_ = a.out.Flush()
}

// client is the connected client; a schema that did not exist at connect (init follows) is
// checked here, at the first call that needs it.
func (a *adapter) client(ctx context.Context) (*pgcoord.Client, error) {
	if a.db == nil {
		return nil, fail("usage", "not connected: send connect first")
	}
	if a.c == nil {
		c, err := pgcoord.New(ctx, a.db, &pgcoord.Options{Schema: a.schema})
		if err != nil {
			return nil, err
		}
		a.c = c
	}
	return a.c, nil
}

func (a *adapter) close() {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	for _, hs := range a.locks {
		for _, h := range hs {
			if h.tx != nil {
				_ = h.tx.Rollback()
			} else {
				_ = h.lock.Unlock(ctx)
			}
		}
	}
	a.locks = map[string][]*held{}
	if a.db != nil {
		_ = a.db.Close()
	}
	a.db, a.c = nil, nil
}

func (a *adapter) opHello(r request) (map[string]interface{}, error) {
	return map[string]interface{}{"language": "go", "client_version": pgcoord.Version, "protocol": protocol,
		"features": features}, nil
}

func (a *adapter) opConnect(r request) (map[string]interface{}, error) {
	dsn, err := r.str("dsn", true)
	if err != nil {
		return nil, err
	}
	schema, err := r.str("schema", true)
	if err != nil {
		return nil, err
	}
	a.close()
	db, err := sql.Open("pgx", dsn)
	if err != nil {
		return nil, fail("usage", "opening %s: %v", "the DSN", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if err := db.PingContext(ctx); err != nil {
		_ = db.Close()
		return nil, &answerErr{kind: "lost", sqlstate: pgcoord.SQLState(err), msg: "connecting: " + err.Error()}
	}
	a.db, a.dsn, a.schema = db, dsn, schema
	// The protocol version is checked here when the schema exists; a schema not created yet
	// (init follows) is checked at the client's first call instead.
	if _, err := a.client(ctx); err != nil {
		if st := pgcoord.SQLState(err); errors.Is(err, pgcoord.ErrProtocolVersion) && (st == "3F000" || st == "42883") {
			return map[string]interface{}{}, nil
		}
		return nil, err
	}
	return map[string]interface{}{}, nil
}

func (a *adapter) opInit(r request) (map[string]interface{}, error) {
	if a.db == nil {
		return nil, fail("usage", "not connected: send connect first")
	}
	var exe string
	cands := []string{os.Getenv("PGCOORD_BIN")}
	if src := os.Getenv("PGCOORD_SRC"); src != "" {
		cands = append(cands, filepath.Join(src, "build", "pgcoord"))
	}
	if p, err := exec.LookPath("pgcoord"); err == nil {
		cands = append(cands, p)
	}
	for _, c := range cands {
		if st, err := os.Stat(c); c != "" && err == nil && !st.IsDir() && st.Mode()&0o111 != 0 {
			exe = c
			break
		}
	}
	if exe == "" {
		return nil, fail("internal", "no pgcoord tool for init: set PGCOORD_BIN")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 120*time.Second)
	defer cancel()
	var stderr bytes.Buffer
	cmd := exec.CommandContext(ctx, exe, "-d", a.dsn, "init", "--schema", a.schema)
	cmd.Stderr = &stderr
	if err := cmd.Run(); err != nil {
		return nil, fail("schema", "pgcoord init: %v: %s", err, strings.TrimSpace(stderr.String()))
	}
	a.c = nil
	if _, err := a.client(ctx); err != nil {
		return nil, err
	}
	return map[string]interface{}{}, nil
}

// ---- locks ----------------------------------------------------------------------------------

func (a *adapter) opLockKey(r request) (map[string]interface{}, error) {
	name, err := r.str("name", true)
	if err != nil {
		return nil, err
	}
	if err := pgcoord.CheckLockName(name); err != nil {
		return nil, err
	}
	return map[string]interface{}{"key": pgcoord.Key(name)}, nil
}

func (a *adapter) opLock(r request) (map[string]interface{}, error) {
	ctx := context.Background()
	c, err := a.client(ctx)
	if err != nil {
		return nil, err
	}
	name, err := r.str("name", true)
	if err != nil {
		return nil, err
	}
	mode, err := r.str("mode", false)
	if err != nil {
		return nil, err
	}
	wait, err := r.integer("wait_ms", dflt(0))
	if err != nil {
		return nil, err
	}
	if mode == "" {
		mode = "session"
	}
	if (mode != "session" && mode != "xact") || wait < 0 {
		return nil, fail("usage", "mode must be session or xact, wait_ms >= 0")
	}
	if err := pgcoord.CheckLockName(name); err != nil {
		return nil, err
	}
	var h *held
	if mode == "session" {
		// Held by this adapter's session already: the server would count it once more.
		for _, o := range a.locks[name] {
			if o.lock != nil {
				o.count++
				return map[string]interface{}{"acquired": true}, nil
			}
		}
		var l *pgcoord.Lock
		if wait == 0 {
			l, err = c.TryLock(ctx, name, nil)
		} else {
			l, err = c.Lock(ctx, name, &pgcoord.LockOptions{Timeout: ms(wait)})
		}
		if errors.Is(err, pgcoord.ErrLockBusy) || errors.Is(err, pgcoord.ErrLockTimeout) {
			return map[string]interface{}{"acquired": false}, nil
		}
		if err != nil {
			return nil, err
		}
		h = &held{lock: l, count: 1}
	} else {
		tx, err := a.db.BeginTx(ctx, nil)
		if err != nil {
			return nil, err
		}
		if wait == 0 {
			err = c.TryXactLock(ctx, tx, name, nil)
		} else {
			err = c.XactLock(ctx, tx, name, &pgcoord.LockOptions{Timeout: ms(wait)})
		}
		if err != nil {
			_ = tx.Rollback()
			if errors.Is(err, pgcoord.ErrLockBusy) || errors.Is(err, pgcoord.ErrLockTimeout) {
				return map[string]interface{}{"acquired": false}, nil
			}
			return nil, err
		}
		h = &held{tx: tx}
	}
	a.locks[name] = append(a.locks[name], h)
	return map[string]interface{}{"acquired": true}, nil
}

func (a *adapter) opUnlock(r request) (map[string]interface{}, error) {
	name, err := r.str("name", true)
	if err != nil {
		return nil, err
	}
	hs := a.locks[name]
	if len(hs) == 0 {
		return map[string]interface{}{"released": false}, nil
	}
	h := hs[len(hs)-1]
	if h.lock != nil && h.count > 1 {
		h.count--
		return map[string]interface{}{"released": true}, nil
	}
	if len(hs) == 1 {
		delete(a.locks, name)
	} else {
		a.locks[name] = hs[:len(hs)-1]
	}
	if h.tx != nil {
		if err := h.tx.Rollback(); err != nil {
			return nil, fail("lost", "ending the transaction that held the lock: %v", err)
		}
		return map[string]interface{}{"released": true}, nil
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if err := h.lock.Unlock(ctx); err != nil {
		if errors.Is(err, pgcoord.ErrNotHeld) {
			return map[string]interface{}{"released": false}, nil
		}
		return nil, err
	}
	return map[string]interface{}{"released": true}, nil
}

// ---- leases and fencing ---------------------------------------------------------------------

func (a *adapter) leaseArgs(r request, withToken bool) (c *pgcoord.Client, name string, token int64, err error) {
	if c, err = a.client(context.Background()); err != nil {
		return
	}
	if name, err = r.str("name", true); err != nil {
		return
	}
	if withToken {
		token, err = r.integer("token", nil)
	}
	return
}

func (a *adapter) opLeaseAcquire(r request) (map[string]interface{}, error) {
	c, name, _, err := a.leaseArgs(r, false)
	if err != nil {
		return nil, err
	}
	holder, err := r.str("holder", false)
	if err != nil {
		return nil, err
	}
	ttl, err := r.integer("ttl_ms", nil)
	if err != nil {
		return nil, err
	}
	info, err := c.LeaseAcquire(context.Background(), name, holder, ms(ttl))
	if err != nil {
		return nil, err
	}
	var token interface{}
	if info.Granted {
		token = info.Token
	}
	return map[string]interface{}{"acquired": info.Granted, "token": token}, nil
}

func (a *adapter) opLeaseRenew(r request) (map[string]interface{}, error) {
	c, name, token, err := a.leaseArgs(r, true)
	if err != nil {
		return nil, err
	}
	ttl, err := r.integer("ttl_ms", nil)
	if err != nil {
		return nil, err
	}
	info, err := c.LeaseRenew(context.Background(), name, token, ms(ttl))
	if err != nil {
		return nil, err
	}
	if info.Status != "ok" {
		return nil, fail("stale", "lease %q: token %d was not renewed: %s", name, token, info.Status)
	}
	return map[string]interface{}{}, nil
}

func (a *adapter) opLeaseRelease(r request) (map[string]interface{}, error) {
	c, name, token, err := a.leaseArgs(r, true)
	if err != nil {
		return nil, err
	}
	status, err := c.LeaseRelease(context.Background(), name, token)
	if err != nil {
		return nil, err
	}
	// As the C library: released (now or before) is done; a newer token is stale.
	switch status {
	case "ok", "released":
		return map[string]interface{}{}, nil
	case "superseded":
		return nil, fail("stale", "lease %q: token %d is stale, a newer token was granted", name, token)
	}
	return nil, fail("not_found", "lease %q has no token %d", name, token)
}

func (a *adapter) opFenceCheck(r request) (map[string]interface{}, error) {
	c, name, token, err := a.leaseArgs(r, true)
	if err != nil {
		return nil, err
	}
	ctx := context.Background()
	// In a transaction of its own, as a writer checks its token.
	if err := c.Tx(ctx, nil, func(tx *sql.Tx) error { return c.FenceCheck(ctx, tx, name, token) }); err != nil {
		return nil, err
	}
	return map[string]interface{}{}, nil
}

// ---- transactions and SQL -------------------------------------------------------------------

func (a *adapter) opTx(r request) (map[string]interface{}, error) {
	ctx := context.Background()
	c, err := a.client(ctx)
	if err != nil {
		return nil, err
	}
	list, ok := r["statements"].([]interface{})
	stmts := make([]string, 0, len(list))
	for _, s := range list {
		t, isStr := s.(string)
		ok = ok && isStr
		stmts = append(stmts, t)
	}
	if !ok {
		return nil, fail("usage", "statements must be a list of strings")
	}
	iso, err := r.str("isolation", false)
	if err != nil {
		return nil, err
	}
	level, ok := isolations[iso]
	if iso != "" && !ok {
		return nil, fail("usage", "isolation must be read committed, repeatable read or serializable")
	}
	attempts, err := r.integer("max_attempts", dflt(10))
	if err != nil {
		return nil, err
	}
	if attempts < 1 {
		return nil, fail("usage", "max_attempts must be at least 1")
	}
	runs := 0
	err = c.Tx(ctx, &pgcoord.TxOptions{Isolation: level, MaxAttempts: int(attempts)}, func(tx *sql.Tx) error {
		runs++
		for _, s := range stmts {
			if _, err := tx.ExecContext(ctx, s); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	return map[string]interface{}{"attempts": runs}, nil
}

// opSQL runs one simple-protocol statement (several, separated by semicolons) on a session of
// the adapter's pool, and answers the last result's rows as the server's text.
func (a *adapter) opSQL(r request) (map[string]interface{}, error) {
	if a.db == nil {
		return nil, fail("usage", "not connected: send connect first")
	}
	stmt, err := r.str("statement", true)
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	conn, err := a.db.Conn(ctx)
	if err != nil {
		return nil, err
	}
	defer conn.Close()
	rows := [][]interface{}{}
	err = conn.Raw(func(dc interface{}) error {
		sc, ok := dc.(*stdlib.Conn)
		if !ok {
			return fail("internal", "the pool's driver is not pgx's stdlib")
		}
		results, err := sc.Conn().PgConn().Exec(ctx, stmt).ReadAll()
		if err != nil {
			return err
		}
		if len(results) == 0 {
			return nil
		}
		last := results[len(results)-1]
		for _, row := range last.Rows {
			out := make([]interface{}, len(row))
			for j, v := range row {
				if v != nil {
					out[j] = string(v)
				}
			}
			rows = append(rows, out)
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	return map[string]interface{}{"rows": rows}, nil
}

// ---- the loop -------------------------------------------------------------------------------

func (a *adapter) dispatch(r request) {
	id := r["id"]
	op, _ := r["op"].(string)
	var ans map[string]interface{}
	var err error
	switch {
	case op == "":
		err = fail("usage", "a request needs an op")
	case op == "kill":
		_ = a.out.Flush()
		_ = syscall.Kill(os.Getpid(), syscall.SIGKILL)
		select {}
	case op == "quit":
		a.write(map[string]interface{}{"id": id, "ok": true})
		a.close()
		os.Exit(0)
	default:
		fn := map[string]func(request) (map[string]interface{}, error){
			"hello": a.opHello, "connect": a.opConnect, "init": a.opInit, "lock_key": a.opLockKey,
			"lock": a.opLock, "unlock": a.opUnlock, "lease_acquire": a.opLeaseAcquire,
			"lease_renew": a.opLeaseRenew, "lease_release": a.opLeaseRelease, "fence_check": a.opFenceCheck,
			"tx": a.opTx, "sql": a.opSQL, "enqueue": a.opEnqueue, "enqueue_many": a.opEnqueueMany,
			"claim": a.opClaim, "complete": a.opComplete, "fail": a.opFail, "release": a.opRelease,
			"renew": a.opRenew, "cancel": a.opCancel, "reap": a.opReap, "job": a.opJob,
			"job_result": a.opJobResult, "flow_set": a.opFlowSet, "work": a.opWork, "stop": a.opStop,
			"lock_holders": a.opLockHolders, "blocking_forest": a.opBlockingForest,
		}[op]
		if fn == nil {
			err = fail("usage", "unknown op %s", op)
		} else {
			ans, err = fn(r)
		}
	}
	if err != nil {
		var ae *answerErr
		e := map[string]interface{}{"message": err.Error(), "sqlstate": nil}
		if errors.As(err, &ae) {
			e["kind"] = ae.kind
			if ae.sqlstate != "" {
				e["sqlstate"] = ae.sqlstate
			}
		} else {
			e["kind"] = kindOf(err)
			if st := pgcoord.SQLState(err); st != "" {
				e["sqlstate"] = st
			}
		}
		a.write(map[string]interface{}{"id": id, "ok": false, "error": e})
		return
	}
	ans["id"], ans["ok"] = id, true
	a.write(ans)
	if a.afterAnswer != nil {
		f := a.afterAnswer
		a.afterAnswer = nil
		f()
	}
}

func main() {
	a := &adapter{locks: map[string][]*held{}, out: bufio.NewWriter(os.Stdout)}
	in := bufio.NewScanner(os.Stdin)
	in.Buffer(make([]byte, 64*1024), 64*1024*1024)
	for in.Scan() {
		line := bytes.TrimSpace(in.Bytes())
		if len(line) == 0 {
			continue
		}
		dec := json.NewDecoder(bytes.NewReader(line))
		dec.UseNumber()
		var r request
		if err := dec.Decode(&r); err != nil || r == nil {
			msg := "a request is an object"
			if err != nil {
				msg = "bad JSON: " + err.Error()
			}
			a.write(map[string]interface{}{"id": nil, "ok": false,
				"error": map[string]interface{}{"kind": "usage", "sqlstate": nil, "message": msg}})
			continue
		}
		a.dispatch(r)
	}
	// The runner is gone: close the sessions, which releases whatever they held.
	a.close()
}

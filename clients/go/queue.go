package pgcoord

import (
	"bytes"
	"context"
	"database/sql"
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
	"time"
)

// ResultMaxBytes is the largest job result the server keeps (complete()'s bound): a larger
// result is refused with an error of class ClassUsage.
const ResultMaxBytes = 65536

// Job is a claimed job: what Claim returns, and what a Worker's handler gets. Its run is
// identified by ID and Token together; every call that ends or extends the run names both.
type Job struct {
	ID          int64           // the job's id
	Token       int64           // the claim's token: a newer claim, a cancel or a reap makes it stale
	Queue       string          // the queue it was claimed from
	Attempt     int             // this run's attempt, 1 for the first
	MaxAttempts int             // the attempts it may use before it fails for good
	Priority    int             // its priority, higher first
	Payload     json.RawMessage // its payload, as the server's jsonb prints it
	Key         string          // its concurrency key, "" for none

	w *Worker // the worker that holds it, nil for a job of Claim
	h *held
}

// Decode unmarshals the job's payload into v (encoding/json).
func (j *Job) Decode(v interface{}) error {
	if err := json.Unmarshal(j.Payload, v); err != nil {
		return usageErr("decode", "job %d: payload does not decode: %v", j.ID, err)
	}
	return nil
}

// Backoff is the retry delay after a failed attempt: min(Base * 2^(attempt-1), Max), with
// jitter in [delay/2, delay], computed by the server. The zero value is the protocol's
// default: 1 s doubling up to one hour.
type Backoff struct {
	Base time.Duration
	Max  time.Duration
}

func (b Backoff) ms() (int64, int64) {
	base, max := b.Base, b.Max
	if base <= 0 {
		base = time.Second
	}
	if max <= 0 {
		max = time.Hour
	}
	return int64(base / time.Millisecond), int64(max / time.Millisecond)
}

// FailOptions configure Fail. The zero value retries with the default Backoff.
type FailOptions struct {
	// Backoff is the retry delay (the zero value: the default).
	Backoff Backoff
	// RetryIn, when above 0, retries after exactly this long instead of the backoff.
	RetryIn time.Duration
}

// Outcome is what Fail and RetryLater did with a job.
type Outcome string

const (
	// OutcomeRetried: the job returns to the queue (after the backoff or the delay).
	OutcomeRetried Outcome = "retried"
	// OutcomeDead: the job was out of attempts (or deferrals) and failed for good.
	OutcomeDead Outcome = "dead"
)

// Completion is one job to Complete in CompleteMany, with its result (nil: none).
type Completion struct {
	ID, Token int64
	// Result is the job's answer: a json.RawMessage is sent as it is, anything else goes
	// through encoding/json; at most ResultMaxBytes. nil stores no result.
	Result interface{}
}

// RenewResult is what Renew found of the jobs it was given.
type RenewResult struct {
	// Lost lists the ids whose claim is no longer held (lease ran out and reaped, claimed
	// again, or cancelled): stop their side effects; an outcome would be refused as stale.
	Lost []int64
	// Cancelled lists those of Lost that an administrator cancelled.
	Cancelled []int64
}

// ReapResult is one reaper pass.
type ReapResult struct {
	Failed   int64 // expired jobs with no attempt left, failed for good
	Returned int64 // expired jobs returned to pending
	Aged     int64 // pending jobs raised by aging
	Purged   int64 // history rows trimmed
}

// JobInfo is a job's status as JobStatus and WaitResult give it.
type JobInfo struct {
	ID int64
	// Status is waiting, scheduled, pending, running, or (finished) succeeded, failed,
	// cancelled.
	Status   string
	Attempts int
	// Result is the result a succeeded job's handler gave (nil: none, or not finished).
	Result json.RawMessage
}

// Finished says whether the status is a final one.
func (i JobInfo) Finished() bool { return finished(i.Status) }

func finished(st string) bool { return st == "succeeded" || st == "failed" || st == "cancelled" }

// FlowSettings are a flow queue's settings (queue_flow_set) or, with Key set, a key's own
// (queue_key_set). A nil field keeps the setting; a pointer to 0 removes it.
type FlowSettings struct {
	// Key, when not "", sets that key's own settings (its Limit, Rate, Weight).
	Key string
	// Limit is the jobs of one key running at once (the key's own with Key).
	Limit *int
	// Rate bounds the starts of the queue (or, with Key, of that key).
	Rate *Rate
	// KeyRate bounds the starts of each key (queue settings only).
	KeyRate *Rate
	// Fair makes keys take turns by virtual time (queue settings only).
	Fair *bool
	// Weight is a key's share of claims in a fair queue, 1..10000 (key settings only).
	Weight *int
}

// Rate is N starts per Per. A Rate with N 0 removes the rate.
type Rate struct {
	N   int
	Per time.Duration
}

const (
	sqlClaim = "SELECT id, token, attempts, max_attempts, priority, payload, key" +
		" FROM @S@.claim($1::text, $2::integer, $3::bigint, $4::text)"
	sqlComplete   = "SELECT id FROM @S@.complete($1::bigint[], $2::bigint[], NULL::integer[], NULL::text[], $3::jsonb[])"
	sqlCompleteNR = "SELECT id FROM @S@.complete($1::bigint[], $2::bigint[])"
	sqlFail       = "SELECT @S@.fail($1::bigint, $2::bigint, $3::text, $4::bigint, $5::bigint, NULL::integer, NULL::text, $6::bigint)"
	sqlRetryLater = "SELECT @S@.retry_later($1::bigint, $2::bigint, $3::bigint)"
	sqlRelease    = "SELECT @S@.release($1::bigint[], $2::bigint[], $3::boolean)"
	sqlRenew      = "SELECT id, status FROM @S@.renew($1::bigint[], $2::bigint[], $3::bigint)"
	sqlCancel     = "SELECT @S@.cancel($1::bigint)"
	sqlReap       = "SELECT failed, returned, aged, purged FROM @S@.reap()"
	sqlJobResult  = "SELECT status, result FROM @S@.job_result($1::bigint)"
	sqlJobInfo    = "SELECT status, attempts FROM @S@.jobs WHERE id = $1::bigint" +
		" UNION ALL SELECT status, attempts FROM @S@.job_history WHERE id = $1::bigint LIMIT 1"
	sqlNextRun  = "SELECT @S@.next_run_ms($1::text[])"
	sqlChannel  = "SELECT channel FROM @S@.queue_settings"
	sqlFlowSet  = "SELECT @S@.queue_flow_set($1::text, $2::integer, $3::integer, $4::bigint, $5::integer, $6::bigint, $7::integer)"
	sqlKeySet   = "SELECT @S@.queue_key_set($1::text, $2::text, $3::integer, $4::integer, $5::integer, $6::bigint)"
	sqlRegister = "SELECT @S@.worker_register($1::text, $2::text[], $3::integer)"
	sqlUnreg    = "SELECT @S@.worker_unregister($1::text)"
)

// The completions of finished jobs, then a claim, in one statement: one round trip and
// one commit for both (what the C worker's pipeline does). Complete may run in any
// transaction; the claim still commits at once, with the statement. The lateral reference
// to c makes the claim run after the completions, so it sees the room they left.
const sqlCompleteClaim = "WITH c AS MATERIALIZED (SELECT pg_catalog.array_to_string(pg_catalog.array_agg(d.id), ',') AS done" +
	" FROM @S@.complete($1::bigint[], $2::bigint[], NULL::integer[], NULL::text[], $3::jsonb[]) d)" +
	" SELECT c.done, j.id, j.token, j.attempts, j.max_attempts, j.priority, j.payload, j.key FROM c" +
	" LEFT JOIN LATERAL (SELECT * FROM @S@.claim($4::text, $5::integer, $6::bigint, $7::text)" +
	" WHERE c.done IS NULL OR c.done IS NOT NULL) j ON true"

// Claim claims up to max runnable jobs of queue for lease (the protocol's claim(), which takes
// the flow claim for a flow queue), recording worker (may be "") on them. No job is an empty
// slice, not an error. The caller renews each job within its lease (Renew) and ends it with
// Complete, Fail, RetryLater or Release; a Worker does all of that itself.
func (c *Client) Claim(ctx context.Context, queue string, max int, lease time.Duration, worker string) ([]*Job, error) {
	if err := checkName("queue name", queue, QueueNameMaxBytes); err != nil {
		err.(*Error).Op = "claim"
		return nil, err
	}
	if max < 1 {
		return nil, usageErr("claim", "max must be at least 1, got %d", max)
	}
	if lease < time.Millisecond {
		return nil, usageErr("claim", "the lease must be at least 1 ms, got %v", lease)
	}
	return c.claim(ctx, c.db, queue, max, lease, worker)
}

func (c *Client) claim(ctx context.Context, q Querier, queue string, max int, lease time.Duration, worker string) ([]*Job, error) {
	var w interface{}
	if worker != "" {
		w = worker
	}
	rows, err := q.QueryContext(ctx, c.sql(sqlClaim), queue, int64(max), durMs(lease), w)
	if err != nil {
		return nil, wrap(fmt.Sprintf("claim from queue %q", queue), err)
	}
	defer rows.Close()
	var jobs []*Job
	for rows.Next() {
		j := &Job{Queue: queue}
		var payload []byte
		var key sql.NullString
		var attempts, maxAttempts, prio int64
		if err := rows.Scan(&j.ID, &j.Token, &attempts, &maxAttempts, &prio, &payload, &key); err != nil {
			return nil, wrap("claim", err)
		}
		j.Attempt, j.MaxAttempts, j.Priority = int(attempts), int(maxAttempts), int(prio)
		j.Payload = json.RawMessage(payload) // Scan into a []byte copies
		j.Key = key.String
		jobs = append(jobs, j)
	}
	if err := rows.Err(); err != nil {
		return nil, wrap(fmt.Sprintf("claim from queue %q", queue), err)
	}
	return jobs, nil
}

// QueueNameMaxBytes is the longest queue name, concurrency key or group name, in bytes.
const QueueNameMaxBytes = 128

func durMs(d time.Duration) int64 {
	ms := int64(d / time.Millisecond)
	if d > 0 && ms == 0 {
		ms = 1
	}
	return ms
}

// encodeResult turns a handler's result into JSON text, or nil for none; over ResultMaxBytes
// is a usage error.
func encodeResult(op string, id int64, v interface{}) (*string, error) {
	if v == nil {
		return nil, nil
	}
	var b []byte
	switch r := v.(type) {
	case json.RawMessage:
		if r == nil {
			return nil, nil
		}
		if !json.Valid(r) {
			return nil, &Error{Op: op, SQLState: "22P02", Class: ClassUsage, Msg: fmt.Sprintf("job %d: the result is not JSON", id)}
		}
		b = r
	default:
		var buf bytes.Buffer
		enc := json.NewEncoder(&buf)
		enc.SetEscapeHTML(false)
		if err := enc.Encode(v); err != nil {
			return nil, usageErr(op, "job %d: the result cannot be encoded as JSON: %v", id, err)
		}
		b = bytes.TrimRight(buf.Bytes(), "\n")
	}
	if len(b) > ResultMaxBytes {
		return nil, &Error{Op: op, SQLState: "22023", Class: ClassUsage,
			Msg: fmt.Sprintf("job %d: the result is %d bytes, more than %d", id, len(b), ResultMaxBytes)}
	}
	s := string(b)
	return &s, nil
}

// Complete ends the run (id, token) as succeeded, storing result (nil: none; see Completion).
// A stale token (the job was cancelled, reaped or claimed again) is an error matching
// ErrStale, and nothing is recorded. A result over ResultMaxBytes or that is not JSON is
// refused (ClassUsage) and the job is left running.
func (c *Client) Complete(ctx context.Context, id, token int64, result interface{}) error {
	stale, err := c.CompleteMany(ctx, []Completion{{ID: id, Token: token, Result: result}})
	if err != nil {
		return err
	}
	if len(stale) > 0 {
		return staleErr("complete", id, token)
	}
	return nil
}

// CompleteMany completes several runs in one statement (one transaction): all are recorded,
// or none when a result is refused. It returns the ids whose token was stale.
func (c *Client) CompleteMany(ctx context.Context, done []Completion) (stale []int64, err error) {
	return c.completeMany(ctx, c.db, done)
}

func (c *Client) completeMany(ctx context.Context, q Querier, done []Completion) (stale []int64, err error) {
	if len(done) == 0 {
		return nil, nil
	}
	ids := make([]int64, len(done))
	toks := make([]int64, len(done))
	results := make([]*string, len(done))
	any := false
	for i, d := range done {
		ids[i], toks[i] = d.ID, d.Token
		if results[i], err = encodeResult("complete", d.ID, d.Result); err != nil {
			return nil, err
		}
		any = any || results[i] != nil
	}
	var rows *sql.Rows
	if any {
		rows, err = q.QueryContext(ctx, c.sql(sqlComplete), bigintArray(ids), bigintArray(toks), textArray(results))
	} else {
		rows, err = q.QueryContext(ctx, c.sql(sqlCompleteNR), bigintArray(ids), bigintArray(toks))
	}
	if err != nil {
		return nil, wrap("complete", err)
	}
	defer rows.Close()
	got := make(map[int64]bool, len(done))
	for rows.Next() {
		var id int64
		if err := rows.Scan(&id); err != nil {
			return nil, wrap("complete", err)
		}
		got[id] = true
	}
	if err := rows.Err(); err != nil {
		return nil, wrap("complete", err)
	}
	for _, id := range ids {
		if !got[id] {
			stale = append(stale, id)
		}
	}
	return stale, nil
}

// completeClaim completes done and then claims up to max jobs of queue, in one statement.
func (c *Client) completeClaim(ctx context.Context, q Querier, done []Completion, queue string, max int,
	lease time.Duration, worker string) (stale []int64, jobs []*Job, err error) {
	ids := make([]int64, len(done))
	toks := make([]int64, len(done))
	var results []*string
	for i, d := range done {
		ids[i], toks[i] = d.ID, d.Token
		r, err := encodeResult("complete", d.ID, d.Result)
		if err != nil {
			return nil, nil, err
		}
		if r != nil && results == nil {
			results = make([]*string, len(done))
		}
		if r != nil {
			results[i] = r
		}
	}
	var res interface{}
	if results != nil {
		res = textArray(results)
	}
	var w interface{}
	if worker != "" {
		w = worker
	}
	rows, err := q.QueryContext(ctx, c.sql(sqlCompleteClaim), bigintArray(ids), bigintArray(toks), res,
		queue, int64(max), durMs(lease), w)
	if err != nil {
		return nil, nil, wrap(fmt.Sprintf("complete, then claim from queue %q", queue), err)
	}
	defer rows.Close()
	var doneText sql.NullString
	for rows.Next() {
		var id, token, attempts, maxAttempts, prio sql.NullInt64
		var payload []byte
		var key sql.NullString
		if err := rows.Scan(&doneText, &id, &token, &attempts, &maxAttempts, &prio, &payload, &key); err != nil {
			return nil, nil, wrap("complete, then claim", err)
		}
		if !id.Valid {
			continue
		}
		jobs = append(jobs, &Job{Queue: queue, ID: id.Int64, Token: token.Int64, Attempt: int(attempts.Int64),
			MaxAttempts: int(maxAttempts.Int64), Priority: int(prio.Int64), Payload: json.RawMessage(payload),
			Key: key.String})
	}
	if err := rows.Err(); err != nil {
		return nil, nil, wrap(fmt.Sprintf("complete, then claim from queue %q", queue), err)
	}
	got := make(map[int64]bool, len(done))
	for _, f := range strings.Split(doneText.String, ",") {
		if n, err := strconv.ParseInt(f, 10, 64); err == nil {
			got[n] = true
		}
	}
	for _, id := range ids {
		if !got[id] {
			stale = append(stale, id)
		}
	}
	return stale, jobs, nil
}

func staleErr(op string, id, token int64) error {
	return &Error{Op: op, Class: ClassConflict, Kind: ErrStale,
		Msg: fmt.Sprintf("job %d is not running under token %d: it was cancelled, or its lease expired and it was reclaimed", id, token)}
}

// Fail records a failed attempt of the run (id, token) with its error text: the job returns
// to the queue after the backoff (or opts.RetryIn), or fails for good when out of attempts
// (OutcomeDead). A stale token is an error matching ErrStale.
func (c *Client) Fail(ctx context.Context, id, token int64, errText string, opts *FailOptions) (Outcome, error) {
	return c.fail(ctx, c.db, id, token, errText, opts)
}

func (c *Client) fail(ctx context.Context, q Querier, id, token int64, errText string, opts *FailOptions) (Outcome, error) {
	var o FailOptions
	if opts != nil {
		o = *opts
	}
	if o.Backoff.Base < 0 || o.Backoff.Max < 0 || o.RetryIn < 0 {
		return "", usageErr("fail", "backoff and retry delay must not be negative")
	}
	base, max := o.Backoff.ms()
	var retryIn interface{}
	if o.RetryIn > 0 {
		retryIn = durMs(o.RetryIn)
	}
	return c.outcome(ctx, q, "fail", id, token, sqlFail, id, token, errText, base, max, retryIn)
}

// RetryLater defers the run (id, token) by delay without counting an attempt ("not now"); a
// job deferred its max_deferrals times fails for good instead (OutcomeDead).
func (c *Client) RetryLater(ctx context.Context, id, token int64, delay time.Duration) (Outcome, error) {
	if delay < 0 {
		return "", usageErr("retry later", "the delay must not be negative, got %v", delay)
	}
	return c.outcome(ctx, c.db, "retry later", id, token, sqlRetryLater, id, token, durMs(delay))
}

func (c *Client) outcome(ctx context.Context, q Querier, op string, id, token int64, stmt string, args ...interface{}) (Outcome, error) {
	rows, err := q.QueryContext(ctx, c.sql(stmt), args...)
	if err != nil {
		return "", wrap(op, err)
	}
	defer rows.Close()
	var o sql.NullString
	if rows.Next() {
		if err := rows.Scan(&o); err != nil {
			return "", wrap(op, err)
		}
	}
	if err := rows.Err(); err != nil {
		return "", wrap(op, err)
	}
	switch Outcome(o.String) {
	case OutcomeRetried, OutcomeDead:
		return Outcome(o.String), nil
	}
	return "", staleErr(op, id, token)
}

// ReleaseJobs returns the runs (ids[i], tokens[i]) to pending at once, giving back their
// attempts; started says their handlers had begun. Stale pairs are ignored. It returns how
// many were released.
func (c *Client) ReleaseJobs(ctx context.Context, ids, tokens []int64, started bool) (int, error) {
	if len(ids) != len(tokens) {
		return 0, usageErr("release", "ids and tokens have different lengths (%d, %d)", len(ids), len(tokens))
	}
	if len(ids) == 0 {
		return 0, nil
	}
	var n int64
	if err := c.db.QueryRowContext(ctx, c.sql(sqlRelease), bigintArray(ids), bigintArray(tokens), started).Scan(&n); err != nil {
		return 0, wrap("release", err)
	}
	return int(n), nil
}

// Renew extends the leases of the runs (ids[i], tokens[i]) to now + lease, in one call, and
// says which are no longer held (and which of those were cancelled).
func (c *Client) Renew(ctx context.Context, ids, tokens []int64, lease time.Duration) (RenewResult, error) {
	if len(ids) != len(tokens) {
		return RenewResult{}, usageErr("renew", "ids and tokens have different lengths (%d, %d)", len(ids), len(tokens))
	}
	if lease < time.Millisecond {
		return RenewResult{}, usageErr("renew", "the lease must be at least 1 ms, got %v", lease)
	}
	return c.renew(ctx, c.db, ids, tokens, lease)
}

func (c *Client) renew(ctx context.Context, q Querier, ids, tokens []int64, lease time.Duration) (RenewResult, error) {
	var r RenewResult
	if len(ids) == 0 {
		return r, nil
	}
	rows, err := q.QueryContext(ctx, c.sql(sqlRenew), bigintArray(ids), bigintArray(tokens), durMs(lease))
	if err != nil {
		return r, wrap("renew", err)
	}
	defer rows.Close()
	status := make(map[int64]string, len(ids))
	for rows.Next() {
		var id int64
		var st string
		if err := rows.Scan(&id, &st); err != nil {
			return r, wrap("renew", err)
		}
		status[id] = st
	}
	if err := rows.Err(); err != nil {
		return r, wrap("renew", err)
	}
	for _, id := range ids {
		switch status[id] {
		case "held":
		case "cancelled":
			r.Lost = append(r.Lost, id)
			r.Cancelled = append(r.Cancelled, id)
		default:
			r.Lost = append(r.Lost, id)
		}
	}
	return r, nil
}

// Cancel cancels a live job; it returns whether it was running (its worker's handler then
// sees the cancel at the next renewal). A finished job is an error of class ClassConflict, an
// unknown one matches ErrNotFound.
func (c *Client) Cancel(ctx context.Context, id int64) (wasRunning bool, err error) {
	if err := c.db.QueryRowContext(ctx, c.sql(sqlCancel), id).Scan(&wasRunning); err != nil {
		return false, wrap(fmt.Sprintf("cancel job %d", id), err)
	}
	return wasRunning, nil
}

// Reap runs one pass of the reaper (expired leases back to pending, aging, history trim).
// Another pass running is an error of class ClassRetryLater (55P03).
func (c *Client) Reap(ctx context.Context) (ReapResult, error) {
	var r ReapResult
	if err := c.db.QueryRowContext(ctx, c.sql(sqlReap)).Scan(&r.Failed, &r.Returned, &r.Aged, &r.Purged); err != nil {
		return r, wrap("reap", err)
	}
	return r, nil
}

// JobStatus returns a job's status and attempts (and a finished job's result). An unknown id
// (or one trimmed from the history) matches ErrNotFound.
func (c *Client) JobStatus(ctx context.Context, id int64) (JobInfo, error) {
	info := JobInfo{ID: id}
	var attempts int64
	err := c.db.QueryRowContext(ctx, c.sql(sqlJobInfo), id).Scan(&info.Status, &attempts)
	if err == sql.ErrNoRows {
		return info, notFound(id)
	}
	if err != nil {
		return info, wrap(fmt.Sprintf("job %d", id), err)
	}
	info.Attempts = int(attempts)
	if info.Finished() {
		r, err := c.jobResult(ctx, c.db, id)
		if err == nil {
			info.Result = r.Result
		}
	}
	return info, nil
}

func notFound(id int64) error {
	return &Error{Op: "job", SQLState: "P0002", Class: ClassNotFound, Msg: fmt.Sprintf("no job has id %d", id)}
}

func (c *Client) jobResult(ctx context.Context, q Querier, id int64) (JobInfo, error) {
	info := JobInfo{ID: id}
	rows, err := q.QueryContext(ctx, c.sql(sqlJobResult), id)
	if err != nil {
		return info, wrap(fmt.Sprintf("result of job %d", id), err)
	}
	defer rows.Close()
	var st sql.NullString
	var res []byte
	if rows.Next() {
		if err := rows.Scan(&st, &res); err != nil {
			return info, wrap("job result", err)
		}
	}
	if err := rows.Err(); err != nil {
		return info, wrap(fmt.Sprintf("result of job %d", id), err)
	}
	if !st.Valid {
		return info, notFound(id)
	}
	info.Status = st.String
	if res != nil {
		info.Result = json.RawMessage(append([]byte(nil), res...))
	}
	return info, nil
}

// JobResult returns a job's status and, once it succeeded, the result its handler gave (nil:
// none). It does not wait; see WaitResult.
func (c *Client) JobResult(ctx context.Context, id int64) (JobInfo, error) {
	return c.jobResult(ctx, c.db, id)
}

// WaitResultOptions configure WaitResult.
type WaitResultOptions struct {
	// Listener, when not nil, is a listener of the caller's that WaitResult uses to hear
	// completions at once; otherwise it opens one when the driver allows (see NewListener)
	// and polls every PollInterval when not.
	Listener Listener
	// PollInterval is how often it looks without a notification; 0 is one second with a
	// listener and 50 ms without.
	PollInterval time.Duration
}

// WaitResult waits until the job has finished, or ctx is done, and returns its status and
// result. A job still unfinished when ctx's deadline passes is an error matching
// ErrNotFinished (class ClassConflict) that carries the last status seen.
func (c *Client) WaitResult(ctx context.Context, id int64, opts *WaitResultOptions) (JobInfo, error) {
	var o WaitResultOptions
	if opts != nil {
		o = *opts
	}
	l := o.Listener
	kept := true
	if l == nil {
		// Behind a transaction-mode pooler a LISTEN would not be heard: it polls.
		if p, err := c.Pooler(ctx, false); err == nil {
			kept = p.SessionKept()
		}
	}
	if l == nil && kept && ctx.Err() == nil {
		if nl, err := NewListener(ctx, c.db); err == nil {
			l = nl
			defer nl.Close()
		}
	}
	chanName := ""
	if l != nil && ctx.Err() == nil {
		ch, err := c.QueueChannel(ctx)
		if err == nil {
			chanName = ch + ".result"
			err = l.Listen(ctx, chanName)
		}
		if err != nil {
			l = nil // looks alone, then
		} else if o.Listener != nil {
			defer func() {
				uctx, cancel := c.bounded(context.Background())
				defer cancel()
				_ = l.Unlisten(uctx, chanName)
			}()
		}
	} else {
		l = nil
	}
	every := o.PollInterval
	if every <= 0 {
		every = time.Second
		if l == nil {
			every = 50 * time.Millisecond
		}
	}
	want := strconv.FormatInt(id, 10)
	for {
		// Each look is bounded on its own: a wait whose time is up still looks once more.
		lctx, lcancel := c.bounded(context.Background())
		info, err := c.jobResult(lctx, c.db, id)
		lcancel()
		if err == nil && info.Finished() {
			return info, nil
		}
		if err != nil {
			return info, err
		}
		if ctx.Err() != nil {
			return info, &Error{Op: "wait for result", Class: ClassConflict, Kind: ErrNotFinished, Err: ctx.Err(),
				Msg: fmt.Sprintf("job %d is still %s", id, info.Status)}
		}
		wctx, cancel := context.WithTimeout(ctx, every)
		if l != nil {
			for {
				n, err := l.Wait(wctx)
				if err != nil || (n.Channel == chanName && strings.TrimSpace(n.Payload) == want) {
					break
				}
			}
		} else {
			<-wctx.Done()
		}
		cancel()
	}
}

// QueueChannel returns the schema's queue channel (queue_settings.channel): enqueues notify
// it, and completions with a result notify QueueChannel()+".result".
func (c *Client) QueueChannel(ctx context.Context) (string, error) {
	var ch string
	if err := c.db.QueryRowContext(ctx, c.sql(sqlChannel)).Scan(&ch); err != nil {
		return "", wrap("queue channel", err)
	}
	return ch, nil
}

// SetFlow changes a queue's flow settings (queue_flow_set), or with s.Key a key's own
// (queue_key_set); the queue becomes a flow queue.
func (c *Client) SetFlow(ctx context.Context, queue string, s FlowSettings) error {
	keep := func(p *int) int64 {
		if p == nil {
			return -1
		}
		return int64(*p)
	}
	rate := func(r *Rate) (int64, int64) {
		if r == nil {
			return -1, -1
		}
		if r.N == 0 {
			return 0, 0
		}
		return int64(r.N), durMs(r.Per)
	}
	var err error
	if s.Key != "" {
		n, per := rate(s.Rate)
		_, err = c.db.ExecContext(ctx, c.sql(sqlKeySet), queue, s.Key, keep(s.Limit), keep(s.Weight), n, per)
	} else {
		n, per := rate(s.Rate)
		kn, kper := rate(s.KeyRate)
		fair := int64(-1)
		if s.Fair != nil {
			fair = 0
			if *s.Fair {
				fair = 1
			}
		}
		_, err = c.db.ExecContext(ctx, c.sql(sqlFlowSet), queue, keep(s.Limit), n, per, kn, kper, fair)
	}
	return wrap(fmt.Sprintf("flow settings of queue %q", queue), err)
}

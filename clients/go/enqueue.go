package pgcoord

import (
	"context"
	"database/sql"
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
	"time"
)

// Querier is what Enqueue runs on: the caller's *sql.Tx (the job exists only if that
// transaction commits), a *sql.Conn, or the *sql.DB itself (a transaction of its own).
type Querier interface {
	QueryContext(ctx context.Context, query string, args ...interface{}) (*sql.Rows, error)
}

// EnqueueOptions are the options of the protocol's enqueue(); the zero value enqueues a job
// that runs now, at priority 0, with the queue's defaults.
type EnqueueOptions struct {
	// Priority orders the queue: higher runs first, -32768 to 32767.
	Priority int
	// RunAt delays the job until then; the zero time runs it now.
	RunAt time.Time
	// MaxAttempts is how many times the job may run; 0 is the protocol's default (25).
	MaxAttempts int
	// MaxDeferrals is how many times the job may be put back without running (a key limit, a
	// rate); nil is the protocol's default (100).
	MaxDeferrals *int
	// UniqueKey (Enqueue only): at most one pending or running job of the queue has it; a job
	// whose key is taken is not enqueued (ErrDuplicate). EnqueueMany takes it per job.
	UniqueKey string
	// Key is the concurrency key of the jobs (flow control: key limits, fair shares).
	Key string
	// After lists jobs the new ones wait for: they run once the last of them succeeds.
	After []int64
	// RunAnyway runs the jobs even when a job of After fails for good or is cancelled
	// (otherwise they are cancelled too).
	RunAnyway bool
	// Group adds the jobs to an open job group.
	Group string
}

// NewJob is one job of EnqueueMany.
type NewJob struct {
	// Payload is the job's JSON: a json.RawMessage is sent as it is, anything else goes
	// through encoding/json.
	Payload interface{}
	// UniqueKey, when not "", skips the job if a pending or running job of the queue has it.
	UniqueKey string
}

const sqlEnqueue = "SELECT ord, id FROM @S@.enqueue($1::text, $2::text[], $3::text[], $4::integer," +
	" $5::timestamptz, $6::integer, $7::integer, $8::text, $9::bigint[], $10::boolean, $11::text)"

// Enqueue adds one job to queue, on q: pass the caller's *sql.Tx to enqueue in its
// transaction. It returns the job's id; when opts.UniqueKey is taken, the error matches
// ErrDuplicate. Server refusals (a bad name, a payload over the limit, a closed group, a
// dependency that does not exist) come back as *Error with the protocol's SQLSTATE and class.
func (c *Client) Enqueue(ctx context.Context, q Querier, queue string, payload interface{}, opts *EnqueueOptions) (int64, error) {
	var o EnqueueOptions
	if opts != nil {
		o = *opts
	}
	ids, err := c.enqueue(ctx, q, queue, []NewJob{{Payload: payload, UniqueKey: o.UniqueKey}}, &o, "enqueue")
	if err != nil {
		return 0, err
	}
	if ids[0] == 0 {
		return 0, &Error{Op: "enqueue", Class: ClassConflict, Kind: ErrDuplicate,
			Msg: fmt.Sprintf("queue %q already has a pending or running job with unique key %q", queue, o.UniqueKey)}
	}
	return ids[0], nil
}

// EnqueueMany adds jobs to queue in one statement, all or nothing, on q. It returns their ids
// in order; a job skipped because its unique key is taken has id 0. opts.UniqueKey is ignored:
// each NewJob has its own.
func (c *Client) EnqueueMany(ctx context.Context, q Querier, queue string, jobs []NewJob, opts *EnqueueOptions) ([]int64, error) {
	var o EnqueueOptions
	if opts != nil {
		o = *opts
	}
	if len(jobs) == 0 {
		return []int64{}, nil
	}
	return c.enqueue(ctx, q, queue, jobs, &o, "enqueue many")
}

func (c *Client) enqueue(ctx context.Context, q Querier, queue string, jobs []NewJob, o *EnqueueOptions, op string) ([]int64, error) {
	if q == nil {
		return nil, usageErr(op, "q must not be nil: pass a *sql.Tx, *sql.Conn or *sql.DB")
	}
	payloads := make([]*string, len(jobs))
	keys := make([]*string, len(jobs))
	anyKey := false
	for i, j := range jobs {
		var text string
		switch p := j.Payload.(type) {
		case json.RawMessage:
			text = string(p)
		default:
			b, err := json.Marshal(p)
			if err != nil {
				return nil, usageErr(op, "payload %d cannot be encoded as JSON: %v", i+1, err)
			}
			text = string(b)
		}
		payloads[i] = &text
		if j.UniqueKey != "" {
			k := j.UniqueKey
			keys[i] = &k
			anyKey = true
		}
	}
	var ukeys, runAt, maxAttempts, maxDeferrals, key, after, runAnyway, group interface{}
	if anyKey {
		ukeys = textArray(keys)
	}
	if !o.RunAt.IsZero() {
		runAt = o.RunAt
	}
	if o.MaxAttempts != 0 {
		maxAttempts = int64(o.MaxAttempts)
	}
	if o.MaxDeferrals != nil {
		maxDeferrals = int64(*o.MaxDeferrals)
	}
	if o.Key != "" {
		key = o.Key
	}
	if o.After != nil {
		after = bigintArray(o.After)
	}
	if o.RunAnyway {
		runAnyway = true
	}
	if o.Group != "" {
		group = o.Group
	}
	rows, err := q.QueryContext(ctx, c.sql(sqlEnqueue), queue, textArray(payloads), ukeys, int64(o.Priority),
		runAt, maxAttempts, maxDeferrals, key, after, runAnyway, group)
	if err != nil {
		return nil, wrap(fmt.Sprintf("%s to queue %q", op, queue), err)
	}
	defer rows.Close()
	ids := make([]int64, len(jobs))
	for rows.Next() {
		var ord int64
		var id sql.NullInt64
		if err := rows.Scan(&ord, &id); err != nil {
			return nil, wrap(op, err)
		}
		if ord < 1 || ord > int64(len(jobs)) {
			return nil, &Error{Op: op, Msg: fmt.Sprintf("unexpected answer from the server: row %d of %d jobs", ord, len(jobs))}
		}
		ids[ord-1] = id.Int64
	}
	if err := rows.Err(); err != nil {
		return nil, wrap(fmt.Sprintf("%s to queue %q", op, queue), err)
	}
	return ids, nil
}

// textArray writes a text[] literal, to be sent as one parameter and cast by the statement
// (drivers differ in how they take Go slices; every driver takes a string). nil is NULL.
func textArray(v []*string) string {
	var b strings.Builder
	b.WriteByte('{')
	for i, s := range v {
		if i > 0 {
			b.WriteByte(',')
		}
		if s == nil {
			b.WriteString("NULL")
			continue
		}
		b.WriteByte('"')
		for j := 0; j < len(*s); j++ {
			if ch := (*s)[j]; ch == '"' || ch == '\\' {
				b.WriteByte('\\')
			}
			b.WriteByte((*s)[j])
		}
		b.WriteByte('"')
	}
	b.WriteByte('}')
	return b.String()
}

func bigintArray(v []int64) string {
	var b strings.Builder
	b.WriteByte('{')
	for i, n := range v {
		if i > 0 {
			b.WriteByte(',')
		}
		b.WriteString(strconv.FormatInt(n, 10))
	}
	b.WriteByte('}')
	return b.String()
}

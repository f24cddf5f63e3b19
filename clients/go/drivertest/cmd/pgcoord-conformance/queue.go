package main

// The ops of the features queue, keys and results, on the client's queue calls and its
// Worker.

import (
	"bytes"
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"sync/atomic"
	"syscall"
	"time"
	"unsafe"

	pgcoord "github.com/pgcoord/pgcoord/clients/go"
)

// monoMs is CLOCK_MONOTONIC in milliseconds, the clock every adapter's events share.
func monoMs() int64 {
	var ts syscall.Timespec
	_, _, _ = syscall.Syscall(syscall.SYS_CLOCK_GETTIME, 1 /* CLOCK_MONOTONIC */, uintptr(unsafe.Pointer(&ts)), 0)
	return ts.Sec*1000 + ts.Nsec/1000000
}

// raw is an argument's JSON as it came (nil: absent or null).
func (r request) raw(name string) (json.RawMessage, error) {
	v, ok := r[name]
	if !ok || v == nil {
		return nil, nil
	}
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		return nil, fail("usage", "%s: %v", name, err)
	}
	return json.RawMessage(bytes.TrimRight(b.Bytes(), "\n")), nil
}

func (r request) ints(name string) ([]int64, error) {
	v, ok := r[name]
	if !ok || v == nil {
		return nil, nil
	}
	l, ok := v.([]interface{})
	if !ok {
		return nil, fail("usage", "%s must be a list of integers", name)
	}
	out := make([]int64, len(l))
	for i, x := range l {
		n, ok := x.(json.Number)
		if !ok {
			return nil, fail("usage", "%s must be a list of integers", name)
		}
		var err error
		if out[i], err = n.Int64(); err != nil {
			return nil, fail("usage", "%s must be a list of integers", name)
		}
	}
	return out, nil
}

func (r request) rate(name string) (*pgcoord.Rate, error) {
	v, ok := r[name]
	if !ok || v == nil {
		return nil, nil
	}
	m, ok := v.(map[string]interface{})
	if !ok {
		return nil, fail("usage", "%s must be {\"n\": N, \"per_ms\": MS}", name)
	}
	sub := request(m)
	n, err := sub.integer("n", nil)
	if err != nil {
		return nil, err
	}
	per, err := sub.integer("per_ms", nil)
	if err != nil {
		return nil, err
	}
	return &pgcoord.Rate{N: int(n), Per: ms(per)}, nil
}

func bg() (context.Context, context.CancelFunc) {
	return context.WithTimeout(context.Background(), 60*time.Second)
}

func (a *adapter) opEnqueue(r request) (map[string]interface{}, error) {
	c, err := a.client(context.Background())
	if err != nil {
		return nil, err
	}
	queue, err := r.str("queue", true)
	if err != nil {
		return nil, err
	}
	payload, err := r.raw("payload")
	if err != nil {
		return nil, err
	}
	if payload == nil {
		payload = json.RawMessage("{}")
	}
	var o pgcoord.EnqueueOptions
	prio, err := r.integer("priority", dflt(0))
	if err != nil {
		return nil, err
	}
	o.Priority = int(prio)
	delay, err := r.integer("delay_ms", dflt(0))
	if err != nil {
		return nil, err
	}
	if delay > 0 {
		o.RunAt = time.Now().Add(ms(delay))
	}
	if at, err := r.str("run_at", false); err != nil {
		return nil, err
	} else if at != "" {
		if o.RunAt, err = time.Parse(time.RFC3339Nano, at); err != nil {
			return nil, fail("usage", "run_at: %v", err)
		}
	}
	if o.UniqueKey, err = r.str("unique_key", false); err != nil {
		return nil, err
	}
	if o.Key, err = r.str("key", false); err != nil {
		return nil, err
	}
	if o.Group, err = r.str("group", false); err != nil {
		return nil, err
	}
	ma, err := r.integer("max_attempts", dflt(0))
	if err != nil {
		return nil, err
	}
	o.MaxAttempts = int(ma)
	if o.After, err = r.ints("after"); err != nil {
		return nil, err
	}
	switch pol, _ := r.str("on_dep_failure", false); pol {
	case "", "cancel":
	case "run":
		o.RunAnyway = true
	default:
		return nil, fail("usage", "on_dep_failure is cancel or run")
	}
	txMode, err := r.str("tx", false)
	if err != nil {
		return nil, err
	}
	ctx, cancel := bg()
	defer cancel()
	switch txMode {
	case "":
		id, err := c.Enqueue(ctx, a.db, queue, payload, &o)
		if err != nil {
			return nil, err
		}
		return map[string]interface{}{"job_id": id}, nil
	case "commit", "rollback":
		var id int64
		err := c.Tx(ctx, nil, func(tx *sql.Tx) error {
			var err error
			if id, err = c.Enqueue(ctx, tx, queue, payload, &o); err != nil {
				return err
			}
			if txMode == "rollback" {
				return errRollback
			}
			return nil
		})
		if errors.Is(err, errRollback) {
			return map[string]interface{}{"job_id": 0}, nil
		}
		if err != nil {
			return nil, err
		}
		return map[string]interface{}{"job_id": id}, nil
	}
	return nil, fail("usage", "tx is commit or rollback")
}

var errRollback = errors.New("rolled back as asked")

func (a *adapter) opEnqueueMany(r request) (map[string]interface{}, error) {
	c, err := a.client(context.Background())
	if err != nil {
		return nil, err
	}
	queue, err := r.str("queue", true)
	if err != nil {
		return nil, err
	}
	pl, ok := r["payloads"].([]interface{})
	if !ok {
		return nil, fail("usage", "payloads must be a list")
	}
	var keys []interface{}
	if v, ok := r["unique_keys"]; ok && v != nil {
		if keys, ok = v.([]interface{}); !ok || len(keys) != len(pl) {
			return nil, fail("usage", "unique_keys must be a list as long as payloads")
		}
	}
	jobs := make([]pgcoord.NewJob, len(pl))
	for i, p := range pl {
		b, err := request{"p": p}.raw("p")
		if err != nil {
			return nil, err
		}
		if b == nil {
			b = json.RawMessage("null")
		}
		jobs[i].Payload = b
		if keys != nil {
			jobs[i].UniqueKey, _ = keys[i].(string)
		}
	}
	ctx, cancel := bg()
	defer cancel()
	ids, err := c.EnqueueMany(ctx, a.db, queue, jobs, nil)
	if err != nil {
		return nil, err
	}
	return map[string]interface{}{"job_ids": ids}, nil
}

func jobJSON(j *pgcoord.Job) map[string]interface{} {
	var key interface{}
	if j.Key != "" {
		key = j.Key
	}
	return map[string]interface{}{"job_id": j.ID, "token": j.Token, "attempt": j.Attempt, "payload": j.Payload, "key": key}
}

func (a *adapter) opClaim(r request) (map[string]interface{}, error) {
	c, err := a.client(context.Background())
	if err != nil {
		return nil, err
	}
	queue, err := r.str("queue", true)
	if err != nil {
		return nil, err
	}
	max, err := r.integer("max", dflt(1))
	if err != nil {
		return nil, err
	}
	lease, err := r.integer("lease_ms", dflt(30000))
	if err != nil {
		return nil, err
	}
	ctx, cancel := bg()
	defer cancel()
	jobs, err := c.Claim(ctx, queue, int(max), ms(lease), "")
	if err != nil {
		return nil, err
	}
	out := []interface{}{}
	for _, j := range jobs {
		out = append(out, jobJSON(j))
	}
	return map[string]interface{}{"jobs": out}, nil
}

func idToken(r request) (int64, int64, error) {
	id, err := r.integer("job_id", nil)
	if err != nil {
		return 0, 0, err
	}
	tok, err := r.integer("token", nil)
	return id, tok, err
}

func (a *adapter) opComplete(r request) (map[string]interface{}, error) {
	c, err := a.client(context.Background())
	if err != nil {
		return nil, err
	}
	id, tok, err := idToken(r)
	if err != nil {
		return nil, err
	}
	res, err := r.raw("result")
	if err != nil {
		return nil, err
	}
	var result interface{}
	if res != nil {
		result = res
	}
	ctx, cancel := bg()
	defer cancel()
	if err := c.Complete(ctx, id, tok, result); err != nil {
		return nil, err
	}
	return map[string]interface{}{}, nil
}

func (a *adapter) opFail(r request) (map[string]interface{}, error) {
	c, err := a.client(context.Background())
	if err != nil {
		return nil, err
	}
	id, tok, err := idToken(r)
	if err != nil {
		return nil, err
	}
	text, err := r.str("error", false)
	if err != nil {
		return nil, err
	}
	retry, err := r.integer("retry_in_ms", dflt(-1))
	if err != nil {
		return nil, err
	}
	var o pgcoord.FailOptions
	if retry >= 0 {
		// The C adapter's retry_in: exactly that delay (0: at once).
		o.Backoff = pgcoord.Backoff{Base: ms(retry) + time.Nanosecond, Max: ms(retry) + time.Nanosecond}
		if retry > 0 {
			o.RetryIn = ms(retry)
		}
	}
	ctx, cancel := bg()
	defer cancel()
	out, err := c.Fail(ctx, id, tok, text, &o)
	if err != nil {
		return nil, err
	}
	return map[string]interface{}{"dead": out == pgcoord.OutcomeDead}, nil
}

func (a *adapter) opRelease(r request) (map[string]interface{}, error) {
	c, err := a.client(context.Background())
	if err != nil {
		return nil, err
	}
	id, tok, err := idToken(r)
	if err != nil {
		return nil, err
	}
	ctx, cancel := bg()
	defer cancel()
	if _, err := c.ReleaseJobs(ctx, []int64{id}, []int64{tok}, true); err != nil {
		return nil, err
	}
	return map[string]interface{}{}, nil
}

func (a *adapter) opRenew(r request) (map[string]interface{}, error) {
	c, err := a.client(context.Background())
	if err != nil {
		return nil, err
	}
	ids, err := r.ints("job_ids")
	if err != nil {
		return nil, err
	}
	toks, err := r.ints("tokens")
	if err != nil {
		return nil, err
	}
	lease, err := r.integer("lease_ms", dflt(30000))
	if err != nil {
		return nil, err
	}
	ctx, cancel := bg()
	defer cancel()
	res, err := c.Renew(ctx, ids, toks, ms(lease))
	if err != nil {
		return nil, err
	}
	lost, cancelled := res.Lost, res.Cancelled
	if lost == nil {
		lost = []int64{}
	}
	if cancelled == nil {
		cancelled = []int64{}
	}
	return map[string]interface{}{"lost": lost, "cancelled": cancelled}, nil
}

func (a *adapter) opCancel(r request) (map[string]interface{}, error) {
	c, err := a.client(context.Background())
	if err != nil {
		return nil, err
	}
	id, err := r.integer("job_id", nil)
	if err != nil {
		return nil, err
	}
	ctx, cancel := bg()
	defer cancel()
	was, err := c.Cancel(ctx, id)
	if err != nil {
		return nil, err
	}
	return map[string]interface{}{"was_running": was}, nil
}

func (a *adapter) opReap(r request) (map[string]interface{}, error) {
	c, err := a.client(context.Background())
	if err != nil {
		return nil, err
	}
	ctx, cancel := bg()
	defer cancel()
	res, err := c.Reap(ctx)
	if pgcoord.SQLState(err) == "55P03" {
		return nil, &answerErr{kind: "conflict", sqlstate: "55P03", msg: err.Error()}
	}
	if err != nil {
		return nil, err
	}
	return map[string]interface{}{"returned": res.Returned, "failed": res.Failed}, nil
}

func (a *adapter) opJob(r request) (map[string]interface{}, error) {
	c, err := a.client(context.Background())
	if err != nil {
		return nil, err
	}
	id, err := r.integer("job_id", nil)
	if err != nil {
		return nil, err
	}
	ctx, cancel := bg()
	defer cancel()
	info, err := c.JobStatus(ctx, id)
	if err != nil {
		return nil, err
	}
	return map[string]interface{}{"status": info.Status, "attempts": info.Attempts}, nil
}

func (a *adapter) opJobResult(r request) (map[string]interface{}, error) {
	c, err := a.client(context.Background())
	if err != nil {
		return nil, err
	}
	id, err := r.integer("job_id", nil)
	if err != nil {
		return nil, err
	}
	wait, err := r.integer("wait_ms", dflt(0))
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithTimeout(context.Background(), ms(wait))
	defer cancel()
	info, err := c.WaitResult(ctx, id, nil)
	if err != nil {
		return nil, err
	}
	var res interface{}
	if info.Result != nil {
		res = info.Result
	}
	return map[string]interface{}{"status": info.Status, "result": res}, nil
}

func (a *adapter) opFlowSet(r request) (map[string]interface{}, error) {
	c, err := a.client(context.Background())
	if err != nil {
		return nil, err
	}
	queue, err := r.str("queue", true)
	if err != nil {
		return nil, err
	}
	var s pgcoord.FlowSettings
	if s.Key, err = r.str("key", false); err != nil {
		return nil, err
	}
	if v, ok := r["key_limit"]; ok && v != nil {
		n, err := r.integer("key_limit", nil)
		if err != nil {
			return nil, err
		}
		l := int(n)
		s.Limit = &l
	}
	if s.Key != "" {
		if s.Rate, err = r.rate("key_rate"); err != nil {
			return nil, err
		}
	} else {
		if s.Rate, err = r.rate("rate"); err != nil {
			return nil, err
		}
		if s.KeyRate, err = r.rate("key_rate"); err != nil {
			return nil, err
		}
	}
	ctx, cancel := bg()
	defer cancel()
	if err := c.SetFlow(ctx, queue, s); err != nil {
		return nil, err
	}
	return map[string]interface{}{}, nil
}

// ---- the worker ---------------------------------------------------------------------------------

type work struct {
	w       *pgcoord.Worker
	handled int64
	ended   chan struct{}
}

func (a *adapter) event(name string, fields map[string]interface{}) {
	fields["event"] = name
	fields["t_ms"] = monoMs()
	a.write(fields)
}

func (a *adapter) opWork(r request) (map[string]interface{}, error) {
	if a.work != nil {
		select {
		case <-a.work.ended:
			a.work = nil
		default:
			return nil, fail("usage", "work is already running: stop it first")
		}
	}
	c, err := a.client(context.Background())
	if err != nil {
		return nil, err
	}
	var queues []string
	if q, err := r.str("queue", false); err != nil {
		return nil, err
	} else if q != "" {
		queues = append(queues, q)
	}
	if v, ok := r["queues"].([]interface{}); ok {
		for _, q := range v {
			s, ok := q.(string)
			if !ok {
				return nil, fail("usage", "queues must be a list of names")
			}
			queues = append(queues, s)
		}
	}
	if len(queues) == 0 {
		return nil, fail("usage", "work needs a queue")
	}
	conc, err := r.integer("concurrency", dflt(1))
	if err != nil {
		return nil, err
	}
	lease, err := r.integer("lease_ms", dflt(30000))
	if err != nil {
		return nil, err
	}
	stopAfter, err := r.integer("stop_after", dflt(0))
	if err != nil {
		return nil, err
	}
	hm, _ := r["handler"].(map[string]interface{})
	h := request(hm)
	do, _ := h.str("do", false)
	if do == "" {
		do = "ok"
	}
	hms, err := h.integer("ms", dflt(0))
	if err != nil {
		return nil, err
	}
	errText, _ := h.str("error", false)
	if errText == "" {
		errText = "failed"
	}
	result, err := h.raw("result")
	if err != nil {
		return nil, err
	}
	switch do {
	case "ok", "fail", "sleep", "hang", "result", "check_cancel":
	default:
		return nil, fail("usage", "unknown handler %q", do)
	}
	wk := &work{ended: make(chan struct{})}
	wk.w = pgcoord.NewWorker(c, pgcoord.WorkerOptions{Concurrency: int(conc), Lease: ms(lease)})
	handler := func(ctx context.Context, j *pgcoord.Job) (interface{}, error) {
		var key interface{}
		if j.Key != "" {
			key = j.Key
		}
		a.event("job_started", map[string]interface{}{"job_id": j.ID, "attempt": j.Attempt, "key": key})
		outcome := "succeeded"
		var res interface{}
		var herr error
		switch do {
		case "fail":
			outcome, herr = "failed", errors.New(errText)
		case "sleep":
			select {
			case <-ctx.Done():
			case <-time.After(ms(hms)):
			}
		case "hang":
			<-ctx.Done()
		case "result":
			if result != nil {
				res = result
			}
		case "check_cancel":
			d := ms(hms)
			if d <= 0 {
				d = 30 * time.Second
			}
			select {
			case <-ctx.Done():
			case <-time.After(d):
			}
		}
		if j.Cancelled() {
			outcome, herr = "cancelled", ctx.Err()
		} else if j.Lost() {
			outcome, herr = "lost", ctx.Err()
		}
		a.event("job_ended", map[string]interface{}{"job_id": j.ID, "outcome": outcome})
		if n := atomic.AddInt64(&wk.handled, 1); stopAfter > 0 && n == stopAfter {
			wk.w.Stop(30 * time.Second)
		}
		return res, herr
	}
	for _, q := range queues {
		wk.w.Handle(q, handler)
	}
	a.work = wk
	run := func() {
		err := wk.w.Run(context.Background())
		ev := map[string]interface{}{"handled": atomic.LoadInt64(&wk.handled)}
		if err != nil {
			ev["error"] = map[string]interface{}{"kind": kindOf(err), "message": err.Error()}
		}
		a.event("done", ev)
		close(wk.ended)
	}
	a.afterAnswer = func() { go run() }
	return map[string]interface{}{"started": true}, nil
}

func (a *adapter) opStop(r request) (map[string]interface{}, error) {
	grace, err := r.integer("grace_ms", dflt(5000))
	if err != nil {
		return nil, err
	}
	wk := a.work
	if wk == nil {
		return map[string]interface{}{"stopped": false, "handled": 0}, nil
	}
	wk.w.Stop(ms(grace))
	<-wk.ended
	a.work = nil
	return map[string]interface{}{"stopped": true, "handled": atomic.LoadInt64(&wk.handled)}, nil
}

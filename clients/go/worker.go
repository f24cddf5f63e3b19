package pgcoord

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// HandlerFunc handles one job. Its return value is stored as the job's result (nil: none;
// JSON of at most ResultMaxBytes, see Completion); an error fails the attempt, and the job is
// retried after the worker's Backoff until its attempts run out (return RetryAfter(d) to
// defer it without counting an attempt). ctx is cancelled when the job is cancelled
// (Job.Cancelled), when this worker no longer holds it (Job.Lost: its lease ran out or its
// session could not renew it), and when a graceful stop's grace is over; a handler that sees
// ctx done should stop its side effects and return: its outcome is then not recorded.
type HandlerFunc func(ctx context.Context, job *Job) (interface{}, error)

// WorkerOptions configure a Worker. The zero value is the defaults.
type WorkerOptions struct {
	// Concurrency is how many handlers run at once (one goroutine each); 0 is 4. The worker
	// claims only for idle handlers.
	Concurrency int
	// Lease is each claim's lease, renewed every third of it for all held jobs in one call;
	// 0 is 30 s.
	Lease time.Duration
	// PollInterval is the slowest poll: with LISTEN, a claim this often as well; without,
	// polls go from 10 ms after work up to this when idle. 0 is 2 s.
	PollInterval time.Duration
	// Grace is how long a graceful stop (Run's ctx done) waits for running handlers before it
	// cancels their contexts and releases their jobs to the queue; 0 is 30 s.
	Grace time.Duration
	// Backoff is the retry delay after a handler's error (the zero value: 1 s doubling up to
	// one hour, the protocol's default).
	Backoff Backoff
	// ReapInterval is how often this worker runs the reaper (expired leases back to the
	// queue); 0 is 1 s, a negative value never.
	ReapInterval time.Duration
	// NoListen turns LISTEN wake-ups off: the worker polls adaptively (what it does anyway on
	// a driver without LISTEN, or behind a transaction-mode pooler).
	NoListen bool
	// Listener makes the worker's LISTEN session, again after a lost one; nil is NewListener
	// on the client's pool (pgx's stdlib adapter; other drivers then poll).
	Listener func(ctx context.Context) (Listener, error)
	// WorkerID is recorded on claimed jobs; "" is host:pid.
	WorkerID string
	// Logf, when not nil, gets the worker's log lines (lost sessions, stale completions, the
	// reaper's work).
	Logf func(format string, args ...interface{})
}

// Worker runs handlers for the jobs of its queues: it claims for idle handlers only,
// renews every held job's lease every third of the lease in one call, completes finished
// jobs in batches, fails the ones whose handler returned an error (with the protocol's
// backoff), tells a handler through its context when its job is cancelled or lost, wakes on
// LISTEN where the driver allows and polls adaptively otherwise, reaps expired leases, and
// stops gracefully. It works through the Client's pool: a lost session costs one statement,
// which is tried again on a new one with backoff; the jobs it held meanwhile stay its own
// while their leases last.
type Worker struct {
	c        *Client
	o        WorkerOptions
	handlers map[string]HandlerFunc
	queues   []string

	mu      sync.Mutex
	running bool
	done    []finished_
	wake    chan struct{}
	stopReq chan struct{}
	stopOne sync.Once
	grace   int64 // atomic: nanoseconds, the grace of the stop requested

	notes chan Notification // from the listener goroutine

	handled   int64 // atomic
	listening int32 // atomic
	held      map[int64]*held
}

type held struct {
	job       *Job
	fn        HandlerFunc
	ctx       context.Context
	cancel    context.CancelFunc
	state     int32 // atomic: 0 held, 1 lost, 2 cancelled
	renewedAt time.Time
	finished  bool
}

type finished_ struct {
	h      *held
	result interface{}
	err    error
}

// NewWorker makes a worker on c; register handlers with Handle, then call Run.
func NewWorker(c *Client, opts WorkerOptions) *Worker {
	o := opts
	if o.Concurrency <= 0 {
		o.Concurrency = 4
	}
	if o.Lease <= 0 {
		o.Lease = 30 * time.Second
	}
	if o.PollInterval <= 0 {
		o.PollInterval = 2 * time.Second
	}
	if o.Grace <= 0 {
		o.Grace = 30 * time.Second
	}
	if o.ReapInterval == 0 {
		o.ReapInterval = time.Second
	}
	if o.WorkerID == "" {
		host, _ := os.Hostname()
		o.WorkerID = fmt.Sprintf("%s:%d", host, os.Getpid())
	}
	return &Worker{c: c, o: o, handlers: map[string]HandlerFunc{}, wake: make(chan struct{}, 1),
		stopReq: make(chan struct{}), notes: make(chan Notification, 64), held: map[int64]*held{}}
}

// Handle registers fn for the jobs of queue. Call it before Run.
func (w *Worker) Handle(queue string, fn HandlerFunc) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.handlers[queue] = fn
}

// Handled returns how many jobs this worker's handlers have finished (with any outcome).
func (w *Worker) Handled() int64 { return atomic.LoadInt64(&w.handled) }

// Listening says whether the worker has a LISTEN session now (else it polls).
func (w *Worker) Listening() bool { return atomic.LoadInt32(&w.listening) == 1 }

// Stop asks a running worker to stop gracefully, as Run's ctx ending does, with grace for its
// running handlers (0: at once; the handlers' contexts are cancelled and their jobs released).
// It returns at once; Run returns once the worker has stopped. A second Stop may shorten the
// grace.
func (w *Worker) Stop(grace time.Duration) {
	atomic.StoreInt64(&w.grace, int64(grace))
	w.stopOne.Do(func() { close(w.stopReq) })
	w.poke()
}

func (w *Worker) poke() {
	select {
	case w.wake <- struct{}{}:
	default:
	}
}

func (w *Worker) logf(format string, args ...interface{}) {
	if w.o.Logf != nil {
		w.o.Logf(format, args...)
	}
}

// Cancelled says whether an administrator cancelled the job while its handler ran (the
// handler's context is then cancelled too). Only for jobs a Worker runs.
func (j *Job) Cancelled() bool { return j.h != nil && atomic.LoadInt32(&j.h.state) == 2 }

// Lost says whether the worker no longer holds the job (its lease ran out, it was cancelled
// or claimed again): its outcome will not be recorded. Only for jobs a Worker runs.
func (j *Job) Lost() bool { return j.h != nil && atomic.LoadInt32(&j.h.state) != 0 }

// RetryAfter returns an error that makes the worker defer the job by d ("not now": a rate
// limit, a resource not ready) with retry_later, which gives the attempt back.
func RetryAfter(d time.Duration) error { return &retryAfter{d} }

type retryAfter struct{ d time.Duration }

func (r *retryAfter) Error() string { return fmt.Sprintf("retry after %v", r.d) }

// Run works jobs until ctx is done or Stop is called, then stops gracefully: no new claims,
// the running handlers get the grace (WorkerOptions.Grace after ctx, Stop's own), then their
// contexts are cancelled and their jobs released to the queue; the outcomes of those that
// finished are recorded. It returns nil after a graceful stop, or an error without a handler
// or when it is run twice at once.
func (w *Worker) Run(ctx context.Context) error {
	w.mu.Lock()
	if w.running {
		w.mu.Unlock()
		return usageErr("worker", "Run is already running")
	}
	if len(w.handlers) == 0 {
		w.mu.Unlock()
		return usageErr("worker", "no handler: call Handle before Run")
	}
	w.queues = w.queues[:0]
	for q := range w.handlers {
		if err := checkName("queue name", q, QueueNameMaxBytes); err != nil {
			w.mu.Unlock()
			err.(*Error).Op = "worker"
			return err
		}
		w.queues = append(w.queues, q)
	}
	sort.Strings(w.queues)
	w.running = true
	w.mu.Unlock()
	defer func() {
		w.mu.Lock()
		w.running = false
		w.mu.Unlock()
	}()
	d := newDispatch(w)
	return d.run(ctx)
}

// ---- the dispatcher ------------------------------------------------------------------------

type dispatch struct {
	w           *Worker
	more        []bool
	rr          int
	nextClaim   time.Time
	idlePoll    time.Duration
	nextHB      time.Time
	hbNow       bool
	nextReap    time.Time
	nextReg     time.Time
	ownChannel  string
	channel     string // the queue channel, for forward
	registered  bool
	stopping    bool
	stopAt      time.Time
	deadline    time.Time // the grace's end
	released    bool
	pending     []finished_ // outcomes not yet recorded
	errBackoff  time.Duration
	lastErr     string
	lastErrAt   time.Time
	lctx        context.Context
	lcancel     context.CancelFunc
	lwg         sync.WaitGroup
	queuesArray string
	jobs        chan *held // claimed jobs to the handler goroutines
}

func newDispatch(w *Worker) *dispatch {
	var b [6]byte
	_, _ = rand.Read(b[:])
	d := &dispatch{w: w, more: make([]bool, len(w.queues)), idlePoll: 10 * time.Millisecond,
		ownChannel: "pgcoord_w_" + hex.EncodeToString(b[:])}
	qs := make([]*string, len(w.queues))
	for i := range w.queues {
		qs[i] = &w.queues[i]
	}
	d.queuesArray = textArray(qs)
	return d
}

// bg is a context for the dispatcher's statements: they outlive Run's ctx (the stop records
// outcomes and releases jobs after it), each bounded by the client's statement timeout.
func (d *dispatch) bg() (context.Context, context.CancelFunc) {
	return d.w.c.bounded(context.Background())
}

func (d *dispatch) run(ctx context.Context) error {
	w := d.w
	now := time.Now()
	for i := range d.more {
		d.more[i] = true
	}
	d.nextClaim = now
	d.nextHB = now.Add(w.o.Lease / 3)
	if w.o.ReapInterval > 0 {
		d.nextReap = now.Add(w.o.ReapInterval / 2)
	}
	// Concurrency handler goroutines for the whole run: the held jobs are never more, so a
	// claimed job never waits for the channel.
	d.jobs = make(chan *held, w.o.Concurrency)
	for i := 0; i < w.o.Concurrency; i++ {
		go d.handle(d.jobs)
	}
	defer close(d.jobs)
	d.lctx, d.lcancel = context.WithCancel(context.Background())
	listen := !w.o.NoListen
	if listen && w.o.Listener == nil {
		// A LISTEN behind a transaction-mode pooler stays on a server session the worker
		// does not keep: it polls instead.
		if p, err := w.c.Pooler(ctx, false); err == nil && !p.SessionKept() {
			d.logf("%s: no LISTEN, polling (10 ms to %v when idle)", p.what(), w.o.PollInterval)
			listen = false
		}
	}
	if listen {
		d.lwg.Add(1)
		go d.listen()
	}
	defer func() {
		d.lcancel()
		d.lwg.Wait()
		d.unregister()
	}()
	for {
		now = time.Now()
		if !d.stopping {
			select {
			case <-ctx.Done():
				w.stopOne.Do(func() {
					atomic.StoreInt64(&w.grace, int64(w.o.Grace))
					close(w.stopReq)
				})
			default:
			}
			select {
			case <-w.stopReq:
				d.stopping = true
				d.stopAt = now
				d.logf("stopping: no new claims; waiting up to %v for %d running job(s)",
					time.Duration(atomic.LoadInt64(&w.grace)), d.running())
				d.unregister()
			default:
			}
		}
		if d.stopping {
			// Stop may be called again with a shorter grace.
			d.deadline = d.stopAt.Add(time.Duration(atomic.LoadInt64(&w.grace)))
		}
		d.takeDone()
		d.readNotes()
		if d.stopping && len(w.held) == 0 && len(d.pending) == 0 {
			return nil
		}
		if d.stopping && !d.released && !now.Before(d.deadline) {
			d.releaseRunning()
		}
		if d.stopping && d.released && len(d.pending) == 0 {
			// What finished is recorded; the released jobs' handlers were told (their
			// contexts are cancelled) and their outcomes would be stale.
			return nil
		}
		err := d.step(now)
		if err != nil {
			d.noteError(err)
			if d.stopping && errors.Is(err, ErrDBClosed) {
				return nil
			}
		} else {
			d.errBackoff = 0
		}
		d.sleep(ctx, err != nil)
	}
}

func (d *dispatch) logf(format string, args ...interface{}) { d.w.logf(format, args...) }

func (d *dispatch) running() int {
	n := 0
	for _, h := range d.w.held {
		if !h.finished {
			n++
		}
	}
	return n
}

func (d *dispatch) noteError(err error) {
	msg := err.Error()
	if msg != d.lastErr || time.Since(d.lastErrAt) >= 10*time.Second {
		d.logf("%s", msg)
		d.lastErr, d.lastErrAt = msg, time.Now()
	}
	if d.errBackoff == 0 {
		d.errBackoff = 50 * time.Millisecond
	} else if d.errBackoff < 2*time.Second {
		d.errBackoff *= 2
	}
}

// takeDone moves the handlers' outcomes to pending.
func (d *dispatch) takeDone() {
	w := d.w
	w.mu.Lock()
	fresh := w.done
	w.done = nil
	w.mu.Unlock()
	for _, f := range fresh {
		f.h.finished = true
	}
	d.pending = append(d.pending, fresh...)
}

// readNotes takes the notifications the listener passed on.
func (d *dispatch) readNotes() {
	for {
		select {
		case n := <-d.w.notes:
			d.note(n)
		default:
			return
		}
	}
}

func (d *dispatch) note(n Notification) {
	w := d.w
	if n.Channel == "" {
		// The listener is up: everything may be worth a claim.
		for i := range d.more {
			d.more[i] = true
		}
		return
	}
	if n.Channel == d.ownChannel && strings.HasPrefix(n.Payload, "cancel ") {
		if id, err := strconv.ParseInt(strings.TrimPrefix(n.Payload, "cancel "), 10, 64); err == nil {
			if _, ok := w.held[id]; ok {
				d.hbNow = true
			}
		}
		return
	}
	for i, q := range w.queues {
		if n.Payload == q {
			d.more[i] = true
			// Picked while full (the registration is up to a second old): pass it on. The
			// handlers that returned are not busy: their outcomes go with the next claim.
			if n.Channel == d.ownChannel && d.free()+len(d.pending) <= 0 {
				d.forward(q)
			}
		}
	}
}

func (d *dispatch) forward(queue string) {
	ctx, cancel := d.bg()
	defer cancel()
	var err error
	if d.channel == "" {
		d.channel, err = d.w.c.QueueChannel(ctx)
	}
	if err == nil {
		_, _ = d.w.c.db.ExecContext(ctx, "SELECT pg_catalog.pg_notify($1, $2)", d.channel, queue)
	}
	d.register(0)
}

func (d *dispatch) free() int {
	if d.stopping {
		return 0
	}
	return d.w.o.Concurrency - len(d.w.held)
}

// step records outcomes, renews when due, claims for idle handlers, reaps when due.
func (d *dispatch) step(now time.Time) error {
	w := d.w
	if !d.stopping && !now.Before(d.nextClaim) {
		for i := range d.more {
			d.more[i] = true
		}
		d.nextClaim = now.Add(d.pollEvery())
	}
	if err := d.settle(); err != nil {
		return err
	}
	if (now.After(d.nextHB) || d.hbNow) && len(w.held) > 0 {
		if err := d.heartbeat(); err != nil {
			d.expire(now)
			return err
		}
	}
	if len(w.held) == 0 {
		d.nextHB = now.Add(w.o.Lease / 3)
	}
	if d.stopping {
		return nil
	}
	if err := d.claim(); err != nil {
		return err
	}
	if w.Listening() && !now.Before(d.nextReg) {
		d.register(d.free())
	}
	if w.o.ReapInterval > 0 && !now.Before(d.nextReap) {
		ctx, cancel := d.bg()
		r, err := w.c.Reap(ctx)
		cancel()
		if err == nil && r.Returned+r.Failed > 0 {
			d.logf("reaper: %d expired lease(s) returned to pending, %d failed", r.Returned, r.Failed)
		}
		j := time.Duration(0)
		if w.o.ReapInterval > 1 {
			j = time.Duration(time.Now().UnixNano() % int64(w.o.ReapInterval))
		}
		d.nextReap = time.Now().Add(w.o.ReapInterval/2 + j)
	}
	return nil
}

func (d *dispatch) pollEvery() time.Duration {
	if d.w.Listening() {
		return d.w.o.PollInterval
	}
	return d.idlePoll
}

// expire marks lost the jobs whose lease passed without a renewal.
func (d *dispatch) expire(now time.Time) {
	for id, h := range d.w.held {
		if now.Sub(h.renewedAt) >= d.w.o.Lease {
			d.lose(h, false)
			if h.finished {
				delete(d.w.held, id)
			}
		}
	}
}

func (d *dispatch) lose(h *held, cancelled bool) {
	st := int32(1)
	if cancelled {
		st = 2
	}
	if atomic.CompareAndSwapInt32(&h.state, 0, st) {
		h.cancel()
	}
}

// settle records the outcomes of finished handlers: the completions in one call, failures
// and deferrals one each. A job lost meanwhile records nothing.
func (d *dispatch) settle() error {
	w := d.w
	if len(d.pending) == 0 {
		return nil
	}
	var comps []Completion
	var compH []*held
	var rest []finished_
	for _, f := range d.pending {
		if atomic.LoadInt32(&f.h.state) != 0 {
			delete(w.held, f.h.job.ID)
			continue
		}
		if f.err == nil {
			comps = append(comps, Completion{ID: f.h.job.ID, Token: f.h.job.Token, Result: f.result})
			compH = append(compH, f.h)
		} else {
			rest = append(rest, f)
		}
	}
	d.pending = d.pending[:0]
	var firstErr error
	if len(comps) > 0 {
		// The next claim goes with the completions when a handler is (or they make one) idle.
		qi, share, claim := d.pick(len(comps))
		sent := time.Now()
		ctx, cancel := d.bg()
		var stale []int64
		var jobs []*Job
		var err error
		if claim {
			stale, jobs, err = w.c.completeClaim(ctx, w.c.db, comps, w.queues[qi], share, w.o.Lease, w.o.WorkerID)
		} else {
			stale, err = w.c.completeMany(ctx, w.c.db, comps)
		}
		cancel()
		if err != nil && errors.Is(err, ErrUsage) {
			// A result the server (or the client's bound) refused: each job alone, and the
			// refused ones fail their attempt with the reason, so the others are not held back.
			for i, c := range comps {
				ctx, cancel := d.bg()
				s, err := w.c.completeMany(ctx, w.c.db, []Completion{c})
				cancel()
				if err != nil && errors.Is(err, ErrUsage) {
					d.logf("job %d: the handler's result was refused: %v", c.ID, err)
					rest = append(rest, finished_{h: compH[i], err: fmt.Errorf("the handler's result was refused: %v", err)})
					continue
				}
				if err != nil {
					d.pending = append(d.pending, finished_{h: compH[i], result: c.Result})
					firstErr = err
					continue
				}
				d.completed(compH[i:i+1], s)
			}
		} else if err != nil {
			// The answer did not come: send them again (a completion that did commit comes
			// back stale, never twice).
			for i, c := range comps {
				d.pending = append(d.pending, finished_{h: compH[i], result: c.Result})
			}
			return err
		} else {
			d.completed(compH, stale)
			if claim {
				d.claimed(qi, share, jobs, sent)
			}
		}
	}
	for _, f := range rest {
		if atomic.LoadInt32(&f.h.state) != 0 {
			delete(w.held, f.h.job.ID)
			continue
		}
		ctx, cancel := d.bg()
		var err error
		var ra *retryAfter
		if errors.As(f.err, &ra) {
			_, err = w.c.outcome(ctx, w.c.db, "retry later", f.h.job.ID, f.h.job.Token, sqlRetryLater,
				f.h.job.ID, f.h.job.Token, durMs(ra.d))
		} else {
			bo := w.o.Backoff
			_, err = w.c.fail(ctx, w.c.db, f.h.job.ID, f.h.job.Token, f.err.Error(), &FailOptions{Backoff: bo})
		}
		cancel()
		if err != nil && errors.Is(err, ErrStale) {
			d.logf("job %d: its failure was stale (lease lost or cancelled)", f.h.job.ID)
			err = nil
		}
		if err != nil {
			d.pending = append(d.pending, f)
			if firstErr == nil {
				firstErr = err
			}
			continue
		}
		d.markMore(f.h.job.Queue)
		delete(w.held, f.h.job.ID)
	}
	return firstErr
}

func (d *dispatch) completed(hs []*held, stale []int64) {
	for _, id := range stale {
		d.logf("job %d: its completion was stale (lease lost or cancelled)", id)
	}
	for _, h := range hs {
		if h.job.Key != "" {
			// A keyed job's end leaves room under its key's limit.
			d.markMore(h.job.Queue)
		}
		delete(d.w.held, h.job.ID)
	}
}

func (d *dispatch) markMore(queue string) {
	for i, q := range d.w.queues {
		if q == queue {
			d.more[i] = true
		}
	}
}

// heartbeat renews every held job's lease in one call, and tells the handlers of the jobs it
// no longer holds.
func (d *dispatch) heartbeat() error {
	w := d.w
	ids := make([]int64, 0, len(w.held))
	toks := make([]int64, 0, len(w.held))
	for _, h := range w.held {
		if atomic.LoadInt32(&h.state) == 0 {
			ids = append(ids, h.job.ID)
			toks = append(toks, h.job.Token)
		}
	}
	sent := time.Now()
	ctx, cancel := d.bg()
	r, err := w.c.renew(ctx, w.c.db, ids, toks, w.o.Lease)
	cancel()
	if err != nil {
		return err
	}
	d.hbNow = false
	d.nextHB = sent.Add(w.o.Lease / 3)
	cancelled := map[int64]bool{}
	for _, id := range r.Cancelled {
		cancelled[id] = true
	}
	lost := map[int64]bool{}
	for _, id := range r.Lost {
		lost[id] = true
	}
	for _, id := range ids {
		h := w.held[id]
		if lost[id] {
			if cancelled[id] {
				d.logf("job %d was cancelled", id)
			} else {
				d.logf("job %d: lease lost (reaped or claimed elsewhere)", id)
			}
			d.lose(h, cancelled[id])
			if h.finished {
				delete(w.held, id)
			}
			continue
		}
		h.renewedAt = sent
	}
	return nil
}

// pick chooses the next claim: the queue (round robin among those worth a claim) and how
// many, the free slots (with extra more about to be freed) shared among those queues.
func (d *dispatch) pick(extra int) (qi, share int, ok bool) {
	if d.stopping {
		return 0, 0, false
	}
	w := d.w
	free := w.o.Concurrency - len(w.held) + extra
	eligible := 0
	for _, m := range d.more {
		if m {
			eligible++
		}
	}
	if free <= 0 || eligible == 0 {
		return 0, 0, false
	}
	n := len(w.queues)
	for i := 0; i < n; i++ {
		qi = (d.rr + i) % n
		if d.more[qi] {
			break
		}
	}
	d.rr = (qi + 1) % n
	share = free / eligible
	if share < 1 {
		share = 1
	}
	if share > 1000 {
		share = 1000
	}
	return qi, share, true
}

// claim claims for the idle handlers, the free slots shared among the queues worth claiming.
func (d *dispatch) claim() error {
	w := d.w
	for {
		qi, share, ok := d.pick(0)
		if !ok {
			return nil
		}
		sent := time.Now()
		ctx, cancel := d.bg()
		jobs, err := w.c.claim(ctx, w.c.db, w.queues[qi], share, w.o.Lease, w.o.WorkerID)
		cancel()
		if err != nil {
			return err
		}
		d.claimed(qi, share, jobs, sent)
	}
}

// claimed starts the jobs a claim of share jobs from queue qi returned; a short answer means
// the queue has no more for now.
func (d *dispatch) claimed(qi, share int, jobs []*Job, sent time.Time) {
	w := d.w
	if len(jobs) < share {
		d.more[qi] = false
	}
	if len(jobs) > 0 {
		d.idlePoll = 10 * time.Millisecond
		if len(w.held) == 0 {
			d.nextHB = sent.Add(w.o.Lease / 3)
		}
	}
	for _, j := range jobs {
		d.start(j, sent)
	}
	if d.more[qi] {
		return
	}
	for _, m := range d.more {
		if m {
			return
		}
	}
	d.idle()
}

// idle sets the next claim when every queue came back short: the poll (growing while idle
// without LISTEN), or sooner, when a scheduled job or a rate's next start is due.
func (d *dispatch) idle() {
	w := d.w
	wait := w.o.PollInterval
	if !w.Listening() {
		wait = d.idlePoll
		d.idlePoll *= 2
		if d.idlePoll > w.o.PollInterval {
			d.idlePoll = w.o.PollInterval
		}
	}
	ctx, cancel := d.bg()
	var nr *float64
	err := w.c.db.QueryRowContext(ctx, w.c.sql(sqlNextRun), d.queuesArray).Scan(&nr)
	cancel()
	if err == nil && nr != nil {
		next := time.Duration(*nr * float64(time.Millisecond))
		if next < 5*time.Millisecond {
			next = 5 * time.Millisecond
		}
		if next < wait {
			wait = next
		}
	}
	d.nextClaim = time.Now().Add(wait)
}

// start hands a claimed job to the handler goroutines.
func (d *dispatch) start(j *Job, claimed time.Time) {
	w := d.w
	ctx, cancel := context.WithCancel(context.Background())
	h := &held{job: j, fn: w.handlers[j.Queue], ctx: ctx, cancel: cancel, renewedAt: claimed}
	j.w, j.h = w, h
	w.held[j.ID] = h
	d.jobs <- h
}

// handle runs the handlers of the jobs it is given, one at a time, until the run ends.
func (d *dispatch) handle(jobs <-chan *held) {
	w := d.w
	for h := range jobs {
		var res interface{}
		var err error
		func() {
			defer func() {
				if p := recover(); p != nil {
					err = fmt.Errorf("the handler panicked: %v", p)
				}
			}()
			res, err = h.fn(h.ctx, h.job)
		}()
		atomic.AddInt64(&w.handled, 1)
		w.mu.Lock()
		w.done = append(w.done, finished_{h: h, result: res, err: err})
		w.mu.Unlock()
		h.cancel()
		w.poke()
	}
}

// releaseRunning ends the grace: the running handlers' contexts are cancelled and their jobs
// released to the queue at once (their outcomes, if they still come, are stale).
func (d *dispatch) releaseRunning() {
	w := d.w
	d.released = true
	var ids, toks []int64
	var hs []*held
	for _, h := range w.held {
		if !h.finished && atomic.LoadInt32(&h.state) == 0 {
			ids = append(ids, h.job.ID)
			toks = append(toks, h.job.Token)
			hs = append(hs, h)
		}
	}
	if len(ids) == 0 {
		return
	}
	d.logf("grace period over: releasing %d unfinished job(s)", len(ids))
	for _, h := range hs {
		d.lose(h, false)
	}
	ctx, cancel := d.bg()
	_, err := w.c.ReleaseJobs(ctx, ids, toks, true)
	cancel()
	if err != nil {
		d.logf("releasing the unfinished jobs: %v (they return after their lease)", err)
	}
}

// sleep waits for a handler's end, a notification, or the next timer.
func (d *dispatch) sleep(ctx context.Context, afterError bool) {
	w := d.w
	now := time.Now()
	until := now.Add(time.Hour)
	if len(w.held) > 0 && d.nextHB.Before(until) {
		until = d.nextHB
	}
	if !d.stopping {
		if d.free() > 0 && d.nextClaim.Before(until) {
			until = d.nextClaim
		}
		anyMore := false
		for _, m := range d.more {
			anyMore = anyMore || m
		}
		if anyMore && d.free() > 0 {
			until = now
		}
		if w.o.ReapInterval > 0 && d.nextReap.Before(until) {
			until = d.nextReap
		}
		if w.Listening() && d.nextReg.Before(until) {
			until = d.nextReg
		}
	} else if !d.released && d.deadline.Before(until) {
		until = d.deadline
	}
	if len(d.pending) > 0 || d.hbNow || (d.stopping && len(w.held) == 0) {
		until = now // including a stop whose last outcome was just recorded: exit now
	}
	if afterError {
		if e := now.Add(d.errBackoff); e.After(until) {
			until = e
		}
	}
	wait := time.Until(until)
	if wait <= 0 {
		return
	}
	stopCh, doneCh := w.stopReq, ctx.Done()
	if d.stopping {
		stopCh, doneCh = nil, nil
	}
	t := time.NewTimer(wait)
	defer t.Stop()
	select {
	case <-w.wake:
	case n := <-w.notes:
		d.note(n)
	case <-stopCh:
	case <-doneCh:
	case <-t.C:
	}
}

// ---- LISTEN ---------------------------------------------------------------------------------

// listen keeps a LISTEN session on the queue channel and the worker's own, passing what it
// hears to the dispatcher; after a lost session it makes another, with backoff, and the
// worker polls meanwhile.
func (d *dispatch) listen() {
	defer d.lwg.Done()
	w := d.w
	backoff := 100 * time.Millisecond
	warned := false
	for d.lctx.Err() == nil {
		l, err := d.openListener()
		if err != nil {
			if errors.Is(err, ErrNoListen) {
				d.logf("LISTEN is not available (%v): polling instead (10 ms to %v when idle)", err, w.o.PollInterval)
				return
			}
			if !warned {
				d.logf("cannot LISTEN (polling meanwhile): %v", err)
				warned = true
			}
			select {
			case <-d.lctx.Done():
				return
			case <-time.After(backoff):
			}
			if backoff < 5*time.Second {
				backoff *= 2
			}
			continue
		}
		backoff, warned = 100*time.Millisecond, false
		atomic.StoreInt32(&w.listening, 1)
		// Something may have been enqueued before the LISTEN: claim now.
		select {
		case w.notes <- Notification{}:
		default:
		}
		w.poke()
		for {
			n, err := l.Wait(d.lctx)
			if err != nil {
				break
			}
			select {
			case w.notes <- n:
			default: // full: the dispatcher has plenty to look at; claims catch up
			}
			w.poke()
		}
		atomic.StoreInt32(&w.listening, 0)
		_ = l.Close()
		if d.lctx.Err() == nil {
			d.logf("LISTEN session lost; polling until a new one is up")
		}
	}
}

func (d *dispatch) openListener() (Listener, error) {
	w := d.w
	ctx, cancel := w.c.bounded(d.lctx)
	defer cancel()
	var l Listener
	var err error
	if w.o.Listener != nil {
		l, err = w.o.Listener(ctx)
	} else {
		l, err = NewListener(ctx, w.c.db)
	}
	if err != nil {
		return nil, err
	}
	ch, err := w.c.QueueChannel(ctx)
	if err == nil {
		err = l.Listen(ctx, ch)
	}
	if err == nil {
		err = l.Listen(ctx, d.ownChannel)
	}
	if err != nil {
		_ = l.Close()
		return nil, err
	}
	return l, nil
}

// register records (or refreshes) the worker's channel and free slots for targeted wake-ups.
func (d *dispatch) register(free int) {
	w := d.w
	if free < 0 {
		free = 0
	}
	ctx, cancel := d.bg()
	_, err := w.c.db.ExecContext(ctx, w.c.sql(sqlRegister), d.ownChannel, d.queuesArray, int64(free))
	cancel()
	d.nextReg = time.Now().Add(time.Second)
	if err == nil {
		d.registered = true
	}
}

func (d *dispatch) unregister() {
	if !d.registered {
		return
	}
	ctx, cancel := d.bg()
	_, _ = d.w.c.db.ExecContext(ctx, d.w.c.sql(sqlUnreg), d.ownChannel)
	cancel()
	d.registered = false
}

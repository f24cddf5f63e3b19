/* worker.c - pgc_worker: one dispatcher connection feeding K handler threads
 *
 * Design: a single dispatcher thread owns the worker's one connection. It LISTENs, claims jobs
 * in batches into a local ready list, and flushes the completions the handler threads leave in a
 * done list: the completions of many jobs and the next claim go to the server as one batch of
 * the connection layer (one pipeline), which the server runs as one implicit transaction, so a
 * busy worker pays one round trip and one commit per batch rather than two per job. Handler
 * threads never touch the connection. A job counts as completed only once the statement that
 * deleted it has committed (the whole batch came back without error).
 *
 * Leases are renewed for every held job (ready, running, done-but-unflushed) every lease/3.
 * A job whose heartbeat comes back empty is lost: it is dropped when it has not started, and
 * pgc_job_lost() turns true for its handler when it has.
 *
 * Wake-ups: a NOTIFY on the schema's channel naming one of our queues, a completion that frees
 * capacity, the timer of the earliest scheduled run_at, or the fallback poll. When LISTEN cannot
 * work (pgc_conn_pooler() finds a pooler that hands us another server session per transaction)
 * the worker polls adaptively, 10 ms doubling up to poll_ms while the queues are empty.
 *
 * Everything the worker keeps on its session (its LISTENs, its registration in the workers
 * table, its settings) is set up again by setup_session() on every new session. */
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "conn/conn_int.h"
#include "queue/queue_int.h"

typedef struct wjob {
	pgc_job job;
	atomic_bool lost;
	atomic_bool cancelled;  /* lost because pgc_queue_cancel() cancelled it */
	bool started;
	int64_t claimed_ms;     /* CLOCK_MONOTONIC when its claim's rows came back */
	pgc_job_result result;
	struct wjob *next;      /* in the ready or done list */
	struct wjob *hnext, *hprev; /* in the held list */
} wjob;

struct pgc_worker {
	pgc_worker_options o;
	char **queues;
	char *queues_lit;       /* the queue names as one text[] literal */
	char *dsn, *schema, *worker_id, *app;
	pgc_job_handler handler;
	void *handler_arg;

	pgc_conn *conn;
	pgc_queue *q;
	atomic_bool listening; /* read by pgc_worker_get_stats from other threads */
	bool pooled, pooler_logged; /* the session is not kept (a pooler): no LISTEN, no vacuum */
	char own_channel[64];   /* LISTENed; registered in the workers table for targeted wake-ups */
	bool registered, register_warned;
	bool started;
	pthread_t dispatcher;
	pthread_t vacuumer;
	bool have_vacuumer;
	pthread_t scheduler;      /* opts.cron: fires the schema's due cron ticks */
	bool have_scheduler;
	pthread_t *threads;
	int n_threads;

	pthread_mutex_t mu;
	pthread_cond_t cv;        /* handler threads wait for ready jobs */
	wjob *ready_head, *ready_tail;
	int n_ready, n_running;
	wjob *done_head;
	int n_done;
	wjob held;                /* sentinel of the held list (ready, running, done) */
	int n_held;
	bool exit_threads;

	int wake[2];              /* the dispatcher's wake-up pipe */
	int vac_wake[2];          /* the maintenance thread's */
	int cron_wake[2];         /* the scheduler thread's */
	atomic_bool wake_pending;
	atomic_bool stop_requested;
	atomic_llong grace_ms;
	bool stopped;

	int rc;
	pgc_error err;

	atomic_long s_claimed, s_completed, s_failed, s_retried, s_stale, s_released, s_reaped;
	atomic_long s_cancelled;
	atomic_long s_wakeups;
	atomic_long s_cron_enqueued;
	atomic_long s_reconnects;
};

static void wlog(pgc_worker *w, pgc_log_level level, const char *fmt, ...) PGC_PRINTF(3, 4);
static void wlog(pgc_worker *w, pgc_log_level level, const char *fmt, ...)
{
	if (w->o.log == NULL)
		return;
	char buf[1024];
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(buf, sizeof buf, fmt, ap);
	va_end(ap);
	w->o.log(level, buf, w->o.log_arg);
}

static void wake(pgc_worker *w)
{
	if (atomic_exchange(&w->wake_pending, true))
		return;
	char b = 1;
	ssize_t n = write(w->wake[1], &b, 1);
	(void)n; /* a full pipe wakes the loop anyway */
}

bool pgc_job_lost(const pgc_job *job)
{
	if (job == NULL || job->internal == NULL)
		return false;
	return atomic_load(&((const wjob *)job->internal)->lost);
}

bool pgc_job_cancelled(const pgc_job *job)
{
	if (job == NULL || job->internal == NULL)
		return false;
	return atomic_load(&((const wjob *)job->internal)->cancelled);
}

static void held_add(pgc_worker *w, wjob *j)
{
	j->hnext = w->held.hnext;
	j->hprev = &w->held;
	w->held.hnext->hprev = j;
	w->held.hnext = j;
	w->n_held++;
}

static void held_remove(pgc_worker *w, wjob *j)
{
	j->hprev->hnext = j->hnext;
	j->hnext->hprev = j->hprev;
	j->hnext = j->hprev = NULL;
	w->n_held--;
}

/* ---- handler threads ---------------------------------------------------------------------- */

static void *handler_main(void *arg)
{
	pgc_worker *w = arg;
	pthread_mutex_lock(&w->mu);
	for (;;) {
		while (w->ready_head == NULL && !w->exit_threads)
			pthread_cond_wait(&w->cv, &w->mu);
		if (w->exit_threads)
			break;
		wjob *j = w->ready_head;
		w->ready_head = j->next;
		if (w->ready_head == NULL)
			w->ready_tail = NULL;
		w->n_ready--;
		w->n_running++;
		j->started = true;
		pthread_mutex_unlock(&w->mu);

		memset(&j->result, 0, sizeof j->result);
		j->result.outcome = PGC_JOB_COMPLETE;
		if (!atomic_load(&j->lost))
			w->handler(&j->job, &j->result, w->handler_arg);

		pthread_mutex_lock(&w->mu);
		w->n_running--;
		j->next = w->done_head;
		w->done_head = j;
		w->n_done++;
		wake(w);
	}
	pthread_mutex_unlock(&w->mu);
	return NULL;
}

/* ---- connection --------------------------------------------------------------------------- */

/* The library never prints: the server's notices and warnings on the worker's sessions (a
 * RAISE in a trigger on the jobs table, a terminated session's last word) go to its log. */
static void on_notice(const char *severity, const char *message, void *arg)
{
	pgc_worker *w = arg;
	wlog(w, strcmp(severity, "WARNING") == 0 ? PGC_LOG_WARN : PGC_LOG_DEBUG, "server %s: %s",
	     severity, message);
}

/* The options of the worker's sessions. */
/* The dispatcher's session must find out that its server stopped answering (frozen, or cut
 * off with its sockets open: nothing tells the client) while the leases it renews still run:
 * a tenth of the lease for a statement (then the cancel, answered or not within 5 s) and for
 * each host's connection attempt, so that a heartbeat sent a third of the way into the lease
 * has reached the new primary well before the lease ends. Between 2 s (the shortest
 * connect_timeout libpq keeps) and the usual 60 s and 10 s. The vacuum thread's session keeps
 * the defaults: a VACUUM may take long, and it holds no lease. */
static pgc_conn_options conn_options(pgc_worker *w, bool dispatcher)
{
	pgc_conn_options co = PGC_CONN_OPTIONS_INIT;
	co.application_name = w->app;
	co.notice_fn = on_notice;
	co.notice_arg = w;
	if (dispatcher) {
		int64_t bound = w->o.lease_ms / 10;
		bound = bound < 2000 ? 2000 : bound > PGC__CALL_TIMEOUT_DEFAULT_MS ? PGC__CALL_TIMEOUT_DEFAULT_MS : bound;
		co.call_timeout_ms = bound;
		if (bound / 1000 < co.connect_timeout_s)
			co.connect_timeout_s = (int)(bound / 1000);
	}
	return co;
}

static int free_slots(pgc_worker *w);
static void register_self(pgc_worker *w, int slots);
static void unregister_self(pgc_worker *w);

/* What the worker keeps on its session, set up on every new session: first the pooler probe.
 * Through a transaction- or statement-mode pooler (or one whose kind cannot be told) each
 * transaction may run on another server session: LISTEN cannot work there, so the worker
 * polls (and the layer stops preparing statements on its own). Otherwise the session's
 * settings, the LISTENs (recorded on the session, and forgotten with it) and the
 * registration. */
static int setup_session(pgc_worker *w, pgc_error *err)
{
	w->listening = false;
	pgc_pooler_info p;
	int rc = pgc_conn_pooler(w->conn, 0, 0, &p, err);
	if (rc != PGC_OK)
		return rc;
	w->pooled = !pgc__queue_session_kept(&p);
	if (w->pooled) {
		unregister_self(w); /* from an earlier session: nobody listens on its channel now */
		if (!w->pooler_logged) {
			char what[PGC_ERROR_MESSAGE_MAX];
			pgc__queue_pooler_what(&p, what, sizeof what);
			wlog(w, PGC_LOG_WARN, "%s: LISTEN cannot work, polling instead (every 10 ms to %lld ms when idle)%s",
			     what, (long long)w->o.poll_ms, p.mode == PGC_POOLER_UNKNOWN ? "" : ", statements unprepared");
		}
		w->pooler_logged = true;
		return PGC_OK;
	}
	/* The queue's statements are short; JIT compilation (triggered by estimates on small,
	 * freshly created tables) would cost more than it saves. */
	if ((rc = pgc__command(w->conn, "SET jit = off", err)) != PGC_OK)
		return rc;
	if (w->o.listen) {
		if ((rc = pgc__listen(w->conn, w->q->channel, err)) != PGC_OK)
			return rc;
		/* And a channel of our own: an enqueue wakes one worker with free slots. */
		if ((rc = pgc__listen(w->conn, w->own_channel, err)) != PGC_OK)
			return rc;
		w->listening = true;
		register_self(w, free_slots(w));
	}
	return PGC_OK;
}

/* Sleeps up to ms on one of the worker's pipes alone (what the server sends meanwhile waits). */
static void pipe_wait(int fd, int64_t ms)
{
	struct pollfd pfd = { fd, POLLIN, 0 };
	(void)poll(&pfd, 1, (int)ms);
}

/* ---- the dispatcher ----------------------------------------------------------------------- */


static wjob *job_from_row(PGresult *res, int r, const char *queue)
{
	size_t qlen = strlen(queue) + 1, plen = pgc__queue_payload_size(res, r);
	wjob *j = calloc(1, sizeof *j + qlen + plen);
	if (j == NULL)
		return NULL;
	char *qn = (char *)(j + 1);
	memcpy(qn, queue, qlen);
	pgc__queue_job_from_row(res, r, qn, qn + qlen, &j->job);
	j->job.internal = j;
	atomic_init(&j->lost, false);
	atomic_init(&j->cancelled, false);
	j->claimed_ms = pgc__now_ms();
	return j;
}

/* Puts claimed rows on the ready list. */
static void take_claimed(pgc_worker *w, PGresult *res, const char *queue)
{
	int rows = PQntuples(res);
	if (rows == 0)
		return;
	wjob *head = NULL, *tail = NULL;
	for (int r = 0; r < rows; r++) {
		wjob *j = job_from_row(res, r, queue);
		if (j == NULL) {
			/* Out of memory: the job comes back to pending when its lease expires. */
			wlog(w, PGC_LOG_ERROR, "out of memory: job %s left to its lease", PQgetvalue(res, r, 0));
			continue;
		}
		if (tail)
			tail->next = j;
		else
			head = j;
		tail = j;
	}
	long taken = 0;
	for (wjob *j = head; j; j = j->next)
		taken++;
	atomic_fetch_add(&w->s_claimed, taken);
	pthread_mutex_lock(&w->mu);
	for (wjob *j = head; j; j = j->next) {
		held_add(w, j);
		w->n_ready++;
	}
	if (head != NULL) {
		if (w->ready_tail)
			w->ready_tail->next = head;
		else
			w->ready_head = head;
		w->ready_tail = tail;
	}
	pthread_cond_broadcast(&w->cv);
	pthread_mutex_unlock(&w->mu);
}

static int free_slots(pgc_worker *w)
{
	int cap = w->o.concurrency + w->o.prefetch;
	pthread_mutex_lock(&w->mu);
	int used = w->n_ready + w->n_running;
	pthread_mutex_unlock(&w->mu);
	return cap - used;
}

static void job_free(pgc_worker *w, wjob *j)
{
	pthread_mutex_lock(&w->mu);
	held_remove(w, j);
	pthread_mutex_unlock(&w->mu);
	free(j);
}

/* The dispatcher's state between the steps of its loop. */
typedef struct dstate {
	bool *more;          /* per queue: worth claiming */
	bool *forward;       /* per queue: a targeted wake-up to pass on to everyone */
	bool *plain;         /* per queue: not a flow queue at the last claim, so its claims
	                        leave claim_flow() out (QS_PROMOTE says which it is) */
	size_t rr;           /* next queue to claim from */
	int64_t next_claim;  /* monotonic ms when the timer says claim */
	int64_t next_hb, next_reap, next_register;
	int64_t hb_every;
	bool hb_now;         /* a job we hold may have been cancelled: renew (and so check) now */
	int64_t idle_poll;   /* adaptive poll interval without LISTEN */
	bool stopping;
	int64_t stop_started, stop_deadline;
	wjob *pending_done;  /* completions taken from the threads, not yet committed */
	int64_t first_done_at;
	int running, ready;  /* the threads' counts when the finished jobs were taken */
	bool once_waiting;   /* --once: idle, waiting for a rate or a job due within once_wait_ms */
	char last_error[PGC_ERROR_MESSAGE_MAX];
	int64_t last_error_at;
} dstate;

static bool any_more(const pgc_worker *w, const dstate *d)
{
	bool more = false;
	for (size_t i = 0; i < w->o.n_queues; i++)
		more |= d->more[i];
	return more;
}

static size_t cancelled_among(pgc_worker *w, const int64_t *ids, const bool *gone, size_t n, bool *cancelled);
/* The queue is worth claiming again. */
static void mark_more(pgc_worker *w, dstate *d, const char *queue)
{
	for (size_t i = 0; i < w->o.n_queues; i++)
		if (strcmp(w->o.queues[i], queue) == 0)
			d->more[i] = true;
}

/* Failures and snoozes go one by one (they are rare); completions are returned for the batch. */
static int settle_others(pgc_worker *w, dstate *d, wjob **done, pgc_error *err)
{
	wjob **pp = done;
	while (*pp) {
		wjob *j = *pp;
		if (j->result.outcome == PGC_JOB_COMPLETE && !atomic_load(&j->lost)) {
			pp = &j->next;
			continue;
		}
		int rc = PGC_OK;
		if (atomic_load(&j->lost)) {
			/* Its outcome is not ours to record: a cancelled job stays cancelled. */
			atomic_fetch_add(atomic_load(&j->cancelled) ? &w->s_cancelled : &w->s_stale, 1);
		} else if (j->result.outcome == PGC_JOB_RETRY_LATER) {
			bool dead = false;
			rc = pgc_queue_defer(w->q, j->job.id, j->job.token,
			                     j->result.delay_ms < 0 ? 0 : j->result.delay_ms, &dead, err);
			if (rc == PGC_OK && dead) {
				atomic_fetch_add(&w->s_failed, 1);
				wlog(w, PGC_LOG_WARN, "job %lld failed for good: deferred as often as its max_deferrals allows",
				     (long long)j->job.id);
			} else if (rc == PGC_OK) {
				atomic_fetch_add(&w->s_retried, 1);
			}
		} else {
			bool dead = false;
			j->result.error[sizeof j->result.error - 1] = '\0';
			rc = pgc_queue_fail(w->q, j->job.id, j->job.token, j->result.error, &w->o.backoff,
			                    &dead, err);
			if (rc == PGC_ESQL && strncmp(err->sqlstate, "22", 2) == 0) {
				/* The server refused the text itself (not valid in its encoding): record the
				 * failure anyway, or the job would stay running under our heartbeats. */
				char why[PGC_JOB_ERROR_MAX];
				snprintf(why, sizeof why, "(the handler's error text was rejected: %s)", err->message);
				for (char *c = why; *c; c++)
					if ((unsigned char)*c >= 0x80)
						*c = '?';
				rc = pgc_queue_fail(w->q, j->job.id, j->job.token, why, &w->o.backoff, &dead, err);
			}
			if (rc == PGC_OK) {
				atomic_fetch_add(&w->s_failed, 1);
				if (dead)
					wlog(w, PGC_LOG_WARN, "job %lld failed for good after %d attempt%s: %.300s",
					     (long long)j->job.id, j->job.attempt, j->job.attempt == 1 ? "" : "s",
					     j->result.error);
			}
		}
		if (rc == PGC_ESTALE) {
			bool cancelled = false;
			cancelled_among(w, &j->job.id, NULL, 1, &cancelled);
			atomic_fetch_add(cancelled ? &w->s_cancelled : &w->s_stale, 1);
			if (cancelled)
				wlog(w, PGC_LOG_INFO, "job %lld was cancelled before its outcome was recorded: it stays cancelled",
				     (long long)j->job.id);
			else
				wlog(w, PGC_LOG_WARN, "job %lld: %s", (long long)j->job.id, err->message);
			rc = PGC_OK;
		}
		if (rc != PGC_OK)
			return rc; /* keep it (and the rest) for the next round */
		/* The job may be due again soon: a claim (empty or not) recomputes the run_at timer. */
		mark_more(w, d, j->job.queue);
		*pp = j->next;
		job_free(w, j);
	}
	return PGC_OK;
}

/* Heartbeat of every held job, in the round trip. Builds the arrays; returns false if none. */
static bool heartbeat_arrays(pgc_worker *w, pgc__sb *ia, pgc__sb *ta, int64_t **ids_out,
                             size_t *n_out)
{
	pthread_mutex_lock(&w->mu);
	size_t n = (size_t)w->n_held;
	int64_t *ids = n ? malloc(n * 2 * sizeof *ids) : NULL;
	size_t k = 0;
	if (ids != NULL)
		for (wjob *j = w->held.hnext; j != &w->held && k < n; j = j->hnext, k++) {
			ids[k] = j->job.id;
			ids[n + k] = j->job.token;
		}
	pthread_mutex_unlock(&w->mu);
	if (ids == NULL || k == 0) {
		free(ids);
		return false;
	}
	pgc__sb_int_array(ia, k, ids);
	pgc__sb_int_array(ta, k, ids + n);
	*ids_out = ids;
	*n_out = k;
	return !(ia->oom || ta->oom);
}

/* Of the n jobs in ids whose rows are gone (gone[i]; NULL: all of them), which the history
 * shows cancelled, into cancelled[i]: one statement, sent only when a job was found gone. A
 * job that is not found there lost its lease (reaped, claimed elsewhere since), or its answer
 * was lost with the session: it is not taken for cancelled. Returns how many were. */
static size_t cancelled_among(pgc_worker *w, const int64_t *ids, const bool *gone, size_t n, bool *cancelled)
{
	memset(cancelled, 0, n * sizeof *cancelled);
	int64_t *ask = malloc(n * sizeof *ask);
	size_t k = 0;
	for (size_t i = 0; ask != NULL && i < n; i++)
		if (gone == NULL || gone[i])
			ask[k++] = ids[i];
	pgc__sb a = PGC__SB_INIT;
	size_t found = 0;
	if (k > 0) {
		pgc__sb_int_array(&a, k, ask);
		const char *v[1] = { a.buf };
		int rc;
		pgc_error e;
		PGresult *res = a.oom ? NULL : pgc__queue_run_text(w->q,
		        "SELECT id FROM @S@.job_history WHERE id = ANY ($1::bigint[]) AND status = 'cancelled'",
		        1, v, &rc, &e);
		for (int r = 0; res != NULL && r < PQntuples(res); r++) {
			int64_t id = atoll(PQgetvalue(res, r, 0));
			for (size_t i = 0; i < n; i++)
				if (ids[i] == id && (gone == NULL || gone[i]) && !cancelled[i]) {
					cancelled[i] = true;
					found++;
				}
		}
		PQclear(res);
	}
	pgc__sb_free(&a);
	free(ask);
	return found;
}

/* A job whose heartbeat came back empty is no longer ours: cancelled (the history says so), or
 * its lease was lost. Its handler is told (pgc_job_cancelled() is set before pgc_job_lost(), so
 * a handler that sees it lost can tell why); a job that had not started is dropped. */
static void mark_lost(pgc_worker *w, PGresult *res, const int64_t *ids, size_t n)
{
	int rows = PQntuples(res);
	if ((size_t)rows == n)
		return;
	bool *alive = calloc(n, sizeof *alive), *gone = calloc(n, sizeof *gone), *cancelled = calloc(n, sizeof *cancelled);
	if (alive == NULL || gone == NULL || cancelled == NULL) {
		free(alive);
		free(gone);
		free(cancelled);
		return;
	}
	for (int r = 0; r < rows; r++) {
		int64_t id = atoll(PQgetvalue(res, r, 0));
		for (size_t i = 0; i < n; i++)
			if (ids[i] == id)
				alive[i] = true;
	}
	for (size_t i = 0; i < n; i++)
		gone[i] = !alive[i];
	cancelled_among(w, ids, gone, n, cancelled);
	pthread_mutex_lock(&w->mu);
	for (wjob *j = w->held.hnext; j != &w->held; j = j->hnext) {
		for (size_t i = 0; i < n; i++) {
			if (ids[i] != j->job.id || alive[i] || atomic_load(&j->lost))
				continue;
			if (cancelled[i]) {
				atomic_store(&j->cancelled, true);
				wlog(w, PGC_LOG_INFO, "job %lld was cancelled: %s", (long long)j->job.id,
				     j->started ? "telling its handler to stop" : "dropped before it started");
			} else {
				wlog(w, PGC_LOG_WARN, "job %lld: lease lost (reaped or reclaimed elsewhere)",
				     (long long)j->job.id);
			}
			atomic_store(&j->lost, true);
		}
	}
	/* Lost jobs that have not started are dropped from the ready list. */
	wjob **pp = &w->ready_head;
	w->ready_tail = NULL;
	while (*pp) {
		wjob *j = *pp;
		if (atomic_load(&j->lost)) {
			*pp = j->next;
			w->n_ready--;
			if (atomic_load(&j->cancelled))
				atomic_fetch_add(&w->s_cancelled, 1);
			held_remove(w, j);
			free(j);
			continue;
		}
		w->ready_tail = j;
		pp = &j->next;
	}
	pthread_mutex_unlock(&w->mu);
	free(alive);
	free(gone);
	free(cancelled);
}

/* Some completions changed nothing: the jobs were cancelled before them (the history says so),
 * or their leases were lost. ids holds the n jobs sent, res the ids completed. */
static void stale_completions(pgc_worker *w, PGresult *res, const int64_t *ids, size_t n)
{
	bool *gone = calloc(n, sizeof *gone), *cancelled = calloc(n, sizeof *cancelled);
	size_t n_gone = 0, n_cancelled = 0;
	if (gone != NULL && cancelled != NULL) {
		for (size_t i = 0; i < n; i++) {
			gone[i] = true;
			for (int r = 0; r < PQntuples(res) && gone[i]; r++)
				gone[i] = atoll(PQgetvalue(res, r, 0)) != ids[i];
			n_gone += gone[i];
		}
		n_cancelled = cancelled_among(w, ids, gone, n, cancelled);
		for (size_t i = 0; i < n; i++)
			if (cancelled[i])
				wlog(w, PGC_LOG_INFO, "job %lld was cancelled before its completion was recorded: it stays cancelled",
				     (long long)ids[i]);
	} else {
		n_gone = n - (size_t)PQntuples(res);
	}
	free(gone);
	free(cancelled);
	atomic_fetch_add(&w->s_cancelled, (long)n_cancelled);
	atomic_fetch_add(&w->s_stale, (long)(n_gone - n_cancelled));
	if (n_gone > n_cancelled)
		wlog(w, PGC_LOG_WARN, "%zu completion(s) were stale: lease lost before completion", n_gone - n_cancelled);
}

/* One round trip: completions of `done` (only PGC_JOB_COMPLETE ones), the heartbeat when due,
 * and (when claim) claims for the queues worth claiming, as one batch. */
static int round_trip(pgc_worker *w, dstate *d, wjob **done, bool do_hb, bool claim, pgc_error *err)
{
	int rc = PGC_OK;
	size_t n_done = 0;
	for (wjob *j = *done; j; j = j->next)
		n_done++;
	pgc__sb cia = { 0 }, cta = { 0 }, hia = { 0 }, hta = { 0 };
	int64_t *cids = NULL, *hb_ids = NULL;
	size_t n_hb = 0;
	pgc__batch *b = NULL;
	if (n_done > 0) {
		cids = malloc(n_done * 2 * sizeof *cids);
		if (cids == NULL)
			return pgc__err(err, PGC_ENOMEM, "out of memory");
		size_t k = 0;
		for (wjob *j = *done; j; j = j->next, k++) {
			cids[k] = j->job.id;
			cids[n_done + k] = j->job.token;
		}
		pgc__sb_int_array(&cia, n_done, cids);
		pgc__sb_int_array(&cta, n_done, cids + n_done);
	}
	if (do_hb && !heartbeat_arrays(w, &hia, &hta, &hb_ids, &n_hb))
		do_hb = false;

	/* Which queues to claim from, and how many (none when only completions and the heartbeat
	 * are due). */
	size_t nq = w->o.n_queues;
	int slots = d->stopping || !claim ? 0 : free_slots(w);
	int claim_n[64];
	size_t claim_q[64], n_claims = 0;
	int eligible = 0;
	for (size_t i = 0; i < nq; i++)
		eligible += d->more[i];
	/* The queues worth claiming share the free slots; the rest of the division goes one slot
	 * each to the first in turn from rr, and the turn advances every trip. With fewer slots
	 * than queues, as many queues as slots get one each. */
	for (size_t i = 0; i < nq && slots > 0 && eligible > 0; i++) {
		size_t qi = (d->rr + i) % nq;
		if (!d->more[qi])
			continue;
		int share = slots / eligible + ((int)n_claims < slots % eligible ? 1 : 0);
		if (share < 1)
			break;
		claim_q[n_claims] = qi;
		claim_n[n_claims] = share > 1000 ? 1000 : share;
		n_claims++;
	}
	d->rr = (d->rr + 1) % nq;
	/* The claims of a batch go in the order of the queue names: a rate-limited queue's claim
	 * waits for the queue's row, and two workers taking two such rows in opposite orders in one
	 * transaction would deadlock. */
	for (size_t a = 1; a < n_claims; a++)
		for (size_t c = a; c > 0 && strcmp(w->o.queues[claim_q[c - 1]], w->o.queues[claim_q[c]]) > 0; c--) {
			size_t tq = claim_q[c];
			int tn = claim_n[c];
			claim_q[c] = claim_q[c - 1];
			claim_n[c] = claim_n[c - 1];
			claim_q[c - 1] = tq;
			claim_n[c - 1] = tn;
		}

	if (n_done == 0 && !do_hb && n_claims == 0)
		goto out;
	if (cia.oom || cta.oom || hia.oom || hta.oom || (b = pgc__batch_new(w->conn)) == NULL) {
		rc = pgc__err(err, PGC_ENOMEM, "out of memory");
		goto out;
	}
	/* The parameters stay valid until the batch has run. */
	char lease[24], maxs[64][16];
	snprintf(lease, sizeof lease, "%lld", (long long)w->o.lease_ms);
	const char *cv[2] = { cia.buf, cta.buf }, *hv[3] = { hia.buf, hta.buf, lease };
	const char *qv[64][4];
	int i_done = 0, i_hb = 0, i_claim[64], i_flow[64], i_promote[64], added = 0;
	if (n_done > 0)
		added |= i_done = pgc__queue_batch_add(w->q, b, QS_COMPLETE, 2, cv);
	if (do_hb)
		added |= i_hb = pgc__queue_batch_add(w->q, b, QS_HEARTBEAT, 3, hv);
	for (size_t c = 0; c < n_claims; c++) {
		snprintf(maxs[c], sizeof maxs[c], "%d", claim_n[c]);
		qv[c][0] = w->o.queues[claim_q[c]];
		qv[c][1] = maxs[c];
		qv[c][2] = lease;
		qv[c][3] = w->worker_id;
		/* The same statements for every queue: the cache parses each once per batch. The
		 * flow claim goes first, and only for queues that may be flow queues. */
		added |= i_promote[c] = pgc__queue_batch_add(w->q, b, QS_PROMOTE, 1, qv[c]);
		i_flow[c] = -1;
		if (!d->plain[claim_q[c]])
			added |= i_flow[c] = pgc__queue_batch_add(w->q, b, QS_CLAIM_FLOW, 4, qv[c]);
		added |= i_claim[c] = pgc__queue_batch_add(w->q, b, QS_CLAIM, 4, qv[c]);
	}
	/* Every answer counts only once the whole batch (one implicit transaction) committed. */
	rc = added < 0 ? pgc__err(err, PGC_ENOMEM, "out of memory") : pgc__batch_run(b, NULL, err);
	PGresult *done_res = NULL, *hb_res = NULL, *claim_res[64], *flow_res[64], *promote_res[64];
	if (rc == PGC_OK && n_done > 0)
		done_res = pgc__queue_result(b, i_done, &rc, err);
	if (rc == PGC_OK && do_hb)
		hb_res = pgc__queue_result(b, i_hb, &rc, err);
	for (size_t c = 0; rc == PGC_OK && c < n_claims; c++) {
		promote_res[c] = pgc__queue_result(b, i_promote[c], &rc, err);
		flow_res[c] = rc == PGC_OK && i_flow[c] >= 0 ? pgc__queue_result(b, i_flow[c], &rc, err) : NULL;
		if (rc == PGC_OK)
			claim_res[c] = pgc__queue_result(b, i_claim[c], &rc, err);
	}
	if (rc != PGC_OK)
		goto out;
	if (n_done > 0) {
		int rows = PQntuples(done_res);
		atomic_fetch_add(&w->s_completed, rows);
		if ((size_t)rows != n_done)
			stale_completions(w, done_res, cids, n_done);
		while (*done) {
			wjob *j = *done;
			*done = j->next;
			/* A keyed job's end leaves room under its key's limit: claim again. */
			if (j->job.key != NULL)
				mark_more(w, d, j->job.queue);
			job_free(w, j);
		}
	}
	if (do_hb)
		mark_lost(w, hb_res, hb_ids, n_hb);
	for (size_t c = 0; c < n_claims; c++) {
		PGresult *res = flow_res[c] != NULL && PQntuples(flow_res[c]) > 0 ? flow_res[c] : claim_res[c];
		size_t qi = claim_q[c];
		int rows = PQntuples(res);
		bool flow = PQntuples(promote_res[c]) == 1 && strcmp(PQgetvalue(promote_res[c], 0, 1), "t") == 0;
		bool missed = flow && d->plain[qi]; /* it turned into a flow queue: claim it again */
		d->plain[qi] = !flow;
		if (rows < claim_n[c] && !missed)
			d->more[qi] = false;
		take_claimed(w, res, w->o.queues[qi]);
		if (rows > 0)
			d->idle_poll = 10;
	}
out:
	pgc__batch_free(b);
	pgc__sb_free(&cia);
	pgc__sb_free(&cta);
	pgc__sb_free(&hia);
	pgc__sb_free(&hta);
	free(cids);
	free(hb_ids);
	return rc;
}

/* How long until the earliest scheduled job of our queues, in ms (-1: none). */
static int64_t next_run_ms(pgc_worker *w)
{
	const char *v[1] = { w->queues_lit };
	int rc;
	pgc_error e;
	PGresult *res = pgc__queue_run(w->q, QS_NEXT_RUN, 1, v, &rc, &e);
	if (res == NULL)
		return -1;
	bool none = PQgetisnull(res, 0, 0);
	int64_t ms = none ? -1 : (int64_t)atof(PQgetvalue(res, 0, 0));
	PQclear(res);
	if (!none && ms < 0)
		ms = 0;
	return ms;
}

/* --once, with nothing held and every claim short: how long to wait before claiming again, or
 * -1 to stop. A start that a rate allows later is always waited for (the drain goes at the
 * rate's pace); a scheduled job (run_at, a retry's backoff) only when it is due within
 * once_wait_ms. A rate's next start counts while it is at most one interval old, not only
 * while it is ahead as in next_run_ms(): a claim that came back short an instant before it
 * must not end the drain, and with the keys held by others as well the wait ends after one
 * interval. Paused queues and keys at their limit count for nothing: what frees them is not
 * this worker's doing. On an error it stops: --once must end. */
static int64_t once_next_ms(pgc_worker *w)
{
	const char *v[1] = { w->queues_lit };
	int rc;
	pgc_error e;
	PGresult *res = pgc__queue_run_text(w->q,
	        "SELECT (SELECT extract(epoch FROM (min(x.run_at) - clock_timestamp())) * 1000"
	        "          FROM unnest($1::text[]) AS u(q)"
	        "         CROSS JOIN LATERAL (SELECT j.run_at FROM @S@.jobs j WHERE j.queue = u.q"
	        "                               AND j.status = 'scheduled' ORDER BY j.run_at LIMIT 1) x"
	        "         WHERE NOT EXISTS (SELECT 1 FROM @S@.queues s WHERE s.name = u.q AND s.paused)),"
	        "       (SELECT extract(epoch FROM (min(z.t) - clock_timestamp())) * 1000 FROM ("
	        "        SELECT s.rate_next - s.rate_ms * 0.05 * interval '1 millisecond' AS t"
	        "          FROM @S@.queues s"
	        "         WHERE s.name = ANY ($1::text[]) AND s.flow AND NOT s.paused"
	        "           AND s.rate_next > clock_timestamp() - s.rate_ms * interval '1 millisecond'"
	        "           AND EXISTS (SELECT 1 FROM @S@.jobs j WHERE j.queue = s.name AND j.status = 'pending')"
	        "        UNION ALL"
	        "        SELECT k.rate_next - coalesce(k.rate_ms, s.key_rate_ms) * 0.05 * interval '1 millisecond'"
	        "          FROM @S@.queues s JOIN @S@.job_keys k ON k.queue = s.name"
	        "         WHERE s.name = ANY ($1::text[]) AND s.flow AND NOT s.paused"
	        "           AND k.rate_next > clock_timestamp()"
	        "                             - coalesce(k.rate_ms, s.key_rate_ms) * interval '1 millisecond'"
	        "           AND (k.lim IS NULL OR k.running < k.lim)"
	        "           AND EXISTS (SELECT 1 FROM @S@.jobs j WHERE j.queue = k.queue AND j.key = k.key"
	        "                          AND j.status = 'pending')) z)",
	        1, v, &rc, &e);
	if (res == NULL) {
		wlog(w, PGC_LOG_WARN, "cannot tell what is due soon: %s", e.message);
		return -1;
	}
	int64_t sched = PQgetisnull(res, 0, 0) ? -1 : (int64_t)atof(PQgetvalue(res, 0, 0));
	int64_t rate = PQgetisnull(res, 0, 1) ? -1 : (int64_t)atof(PQgetvalue(res, 0, 1));
	bool has_sched = !PQgetisnull(res, 0, 0);
	bool has_rate = !PQgetisnull(res, 0, 1);
	PQclear(res);
	if (has_sched && sched < 0)
		sched = 0;
	if (has_rate && rate < 0)
		rate = 0;
	int64_t wait = has_rate ? rate : -1;
	if (has_sched && sched <= w->o.once_wait_ms && (wait < 0 || sched < wait))
		wait = sched;
	return wait;
}

/* Registers (or refreshes) this worker's channel and free slots. Errors are logged, not fatal:
 * without a registration the worker is still woken by the broadcast and the poll. */
static void register_self(pgc_worker *w, int slots)
{
	if (!w->listening)
		return;
	char fs[16];
	snprintf(fs, sizeof fs, "%d", slots < 0 ? 0 : slots);
	const char *v[3] = { w->own_channel, w->queues_lit, fs };
	int rc;
	pgc_error e;
	PGresult *res = pgc__queue_run_text(w->q,
	        "INSERT INTO @S@.workers (channel, queues, free) VALUES ($1, $2::text[], $3::int)"
	        " ON CONFLICT (channel) DO UPDATE SET queues = excluded.queues, free = excluded.free,"
	        " seen_at = clock_timestamp()", 3, v, &rc, &e);
	if (res != NULL)
		w->registered = true;
	else if (!w->register_warned) {
		wlog(w, PGC_LOG_WARN, "cannot register for targeted wake-ups (woken with everyone instead): %s",
		     e.message);
		w->register_warned = true;
	}
	PQclear(res);
}

static void unregister_self(pgc_worker *w)
{
	if (!w->registered || !pgc__conn_ok(w->conn))
		return;
	const char *v[1] = { w->own_channel };
	int rc;
	pgc_error e;
	PQclear(pgc__queue_run_text(w->q, "DELETE FROM @S@.workers WHERE channel = $1", 1, v, &rc, &e));
	w->registered = false;
}

/* Notifications may also have arrived during another statement: they wait on the session. */
static void read_notifications(pgc_worker *w, dstate *d, bool consume)
{
	PGnotify *n;
	while ((n = pgc__notify(w->conn, consume)) != NULL) {
		consume = false;
		/* "cancel ID" on our own channel (pgc_queue_cancel): a hint, since anyone may notify
		 * anything; when we hold that job, the leases are renewed at once, which tells. */
		long long cid;
		char tail;
		if (strcmp(n->relname, w->own_channel) == 0 && sscanf(n->extra, "cancel %lld%c", &cid, &tail) == 1) {
			pthread_mutex_lock(&w->mu);
			for (wjob *j = w->held.hnext; j != &w->held && !d->hb_now; j = j->hnext)
				d->hb_now = j->job.id == cid;
			pthread_mutex_unlock(&w->mu);
		}
		for (size_t i = 0; i < w->o.n_queues; i++)
			if (strcmp(n->extra, w->o.queues[i]) == 0) {
				d->more[i] = true;
				atomic_fetch_add(&w->s_wakeups, 1);
				/* Picked for a wake-up while full (our registration is up to a second
				 * old): pass it on to everyone, or the job would wait for our slots. */
				if (strcmp(n->relname, w->own_channel) == 0 && free_slots(w) <= 0)
					d->forward[i] = true;
			}
		PQfreemem(n);
	}
}

/* Releases the unstarted jobs, or (started_ones) the running ones; jobs whose handler already
 * returned (in the threads' done list or in `flushing`, the dispatcher's) are left alone: their
 * outcome is on its way. */
static void release_jobs(pgc_worker *w, bool started_ones, wjob *flushing)
{
	/* Collect ready (unstarted) or running jobs and give them back. */
	pthread_mutex_lock(&w->mu);
	size_t n = 0;
	for (wjob *j = w->held.hnext; j != &w->held; j = j->hnext)
		n++;
	int64_t *ids = n ? malloc(2 * n * sizeof *ids) : NULL;
	size_t k = 0;
	if (!started_ones) {
		wjob *j = w->ready_head;
		w->ready_head = w->ready_tail = NULL;
		w->n_ready = 0;
		while (j) {
			wjob *next = j->next;
			if (ids != NULL) {
				ids[k] = j->job.id;
				ids[n + k] = j->job.token;
				k++;
			}
			held_remove(w, j);
			free(j);
			j = next;
		}
	} else if (ids != NULL) {
		for (wjob *j = w->held.hnext; j != &w->held; j = j->hnext) {
			if (!j->started || atomic_load(&j->lost))
				continue;
			bool in_done = false;
			for (wjob *x = w->done_head; x; x = x->next)
				if (x == j)
					in_done = true;
			for (wjob *x = flushing; x; x = x->next)
				if (x == j)
					in_done = true;
			if (in_done)
				continue;
			atomic_store(&j->lost, true);
			ids[k] = j->job.id;
			ids[n + k] = j->job.token;
			k++;
		}
	}
	pthread_mutex_unlock(&w->mu);
	if (k > 0) {
		pgc_error e;
		if (pgc_queue_release(w->q, k, ids, ids + n, started_ones, &e) == PGC_OK) {
			atomic_fetch_add(&w->s_released, (long)k);
			wlog(w, PGC_LOG_INFO, "released %zu %s job(s) back to pending", k,
			     started_ones ? "unfinished" : "unstarted");
		} else {
			wlog(w, PGC_LOG_WARN, "cannot release %zu job(s) (they return after their lease): %s",
			     k, e.message);
		}
	}
	free(ids);
}

static bool reconnect(pgc_worker *w, dstate *d)
{
	int64_t delay = 100;
	while (!atomic_load(&w->stop_requested)) {
		pgc_error e;
		if (pgc__reconnect(w->conn, &e) == PGC_OK) {
			if (setup_session(w, &e) == PGC_OK) {
				wlog(w, PGC_LOG_INFO, "reconnected");
				atomic_fetch_add(&w->s_reconnects, 1);
				for (size_t i = 0; i < w->o.n_queues; i++)
					d->more[i] = true;
				return true;
			}
			wlog(w, PGC_LOG_WARN, "after reconnecting: %s", e.message);
		}
		/* At most a second between attempts: the worker is back within a second of a new
		 * primary accepting writes. */
		pipe_wait(w->wake[0], delay);
		delay = delay * 2 > 1000 ? 1000 : delay * 2;
	}
	return false;
}

/* What a step of the dispatcher's loop says to do next. */
typedef enum step { STEP_ON, STEP_AGAIN, STEP_EXIT } step;

/* Stop handling: a stop request ends the claims and releases the jobs not started; the grace
 * period then releases the running ones. Also takes the jobs the threads finished. STEP_EXIT
 * once nothing is left to wait for. */
static step stop_step(pgc_worker *w, dstate *d, int64_t now)
{
	if (d->stopping && d->stop_deadline != INT64_MAX &&
	    d->stop_started + atomic_load(&w->grace_ms) < d->stop_deadline)
		d->stop_deadline = d->stop_started + atomic_load(&w->grace_ms); /* stop sooner */
	if (!d->stopping && atomic_load(&w->stop_requested)) {
		d->stopping = true;
		d->stop_started = now;
		d->stop_deadline = now + atomic_load(&w->grace_ms);
		wlog(w, PGC_LOG_INFO, "stopping: no new claims; waiting up to %lld ms for running jobs",
		     (long long)atomic_load(&w->grace_ms));
		release_jobs(w, false, d->pending_done);
		unregister_self(w);
	}
	/* Take the finished jobs. */
	pthread_mutex_lock(&w->mu);
	wjob *fresh = w->done_head;
	w->done_head = NULL;
	w->n_done = 0;
	d->running = w->n_running;
	d->ready = w->n_ready;
	pthread_mutex_unlock(&w->mu);
	atomic_store(&w->wake_pending, false);
	while (fresh) {
		wjob *next = fresh->next;
		fresh->next = d->pending_done;
		d->pending_done = fresh;
		fresh = next;
	}
	if (d->stopping && d->running == 0 && d->ready == 0 && d->pending_done == NULL)
		return STEP_EXIT;
	if (d->stopping && now >= d->stop_deadline && d->running > 0) {
		wlog(w, PGC_LOG_WARN, "grace period over: releasing %d unfinished job(s)", d->running);
		release_jobs(w, true, d->pending_done);
		d->stop_deadline = INT64_MAX;
	}
	if (d->stopping && d->stop_deadline == INT64_MAX && d->pending_done == NULL)
		return STEP_EXIT;
	return STEP_ON;
}

/* The session: a new one when it is gone (not while stopping: what is held returns to pending
 * after its lease), then the notifications, and the wake-ups picked for us while we are full,
 * passed on to everyone. */
static step session_step(pgc_worker *w, dstate *d, int64_t now)
{
	if (!pgc__conn_ok(w->conn)) {
		if (d->stopping)
			return STEP_EXIT;
		wlog(w, PGC_LOG_WARN, "connection lost; reconnecting");
		if (!reconnect(w, d))
			return STEP_AGAIN;
	}
	read_notifications(w, d, false);
	for (size_t i = 0; i < w->o.n_queues; i++) {
		if (!d->forward[i])
			continue;
		d->forward[i] = false;
		const char *fv[2] = { w->q->channel, w->o.queues[i] };
		int frc;
		pgc_error fe;
		PQclear(pgc__exec(w->conn, "SELECT pg_notify($1, $2)", 2, fv, &frc, &fe));
		register_self(w, 0);
		d->next_register = now + 1000;
	}
	return STEP_ON;
}

/* Settles the failures and snoozes, then the round trip when there is something to send:
 * completions, the heartbeat when due, the claims when slots are free. Completions alone wait
 * up to flush_ms for company (STEP_AGAIN). *rc is the pgc code of what was sent. */
static step trip_step(pgc_worker *w, dstate *d, int64_t now, int *rc, pgc_error *e)
{
	*rc = settle_others(w, d, &d->pending_done, e);
	if (*rc != PGC_OK)
		return STEP_ON;
	bool recheck = false;
	if (w->o.once && !d->stopping && d->pending_done == NULL && !any_more(w, d)) {
		/* Once, with nothing held: one more claim of every queue decides whether to stop. */
		pthread_mutex_lock(&w->mu);
		recheck = w->n_held == 0 && !d->once_waiting;
		pthread_mutex_unlock(&w->mu);
	}
	/* The claim timer starts a sweep: every queue is worth a claim again. A sweep may take
	 * several trips (fewer free slots than queues), so the timer moves on at once: it must not
	 * start the sweep over on every trip, or an idle worker never sleeps. The trip that finds
	 * the last queue empty sets it from the next run_at. */
	if (now >= d->next_claim || recheck) {
		for (size_t i = 0; i < w->o.n_queues; i++)
			d->more[i] = true;
		d->next_claim = now + (w->listening ? w->o.poll_ms : d->idle_poll);
	}
	bool do_hb = now >= d->next_hb || d->hb_now;
	bool want_claim = false;
	if (!d->stopping) {
		int slots = free_slots(w);
		int cap = w->o.concurrency + w->o.prefetch;
		want_claim = any_more(w, d) && slots > 0 && (d->ready < w->o.concurrency || slots * 2 >= cap);
	}
	if (d->pending_done != NULL && d->first_done_at == 0)
		d->first_done_at = now;
	if (d->pending_done != NULL && !want_claim && !do_hb && !d->stopping &&
	    now - d->first_done_at < w->o.flush_ms) {
		/* Give other handlers a moment to finish so their completions share a trip. */
		pipe_wait(w->wake[0], w->o.flush_ms - (now - d->first_done_at));
		return STEP_AGAIN;
	}
	d->first_done_at = 0;
	if (d->pending_done == NULL && !do_hb && !want_claim)
		return STEP_ON;
	bool any_more_before = any_more(w, d);
	if (want_claim)
		d->once_waiting = false;
	*rc = round_trip(w, d, &d->pending_done, do_hb, want_claim, e);
	if (*rc == PGC_OK && do_hb) {
		d->next_hb = pgc__now_ms() + d->hb_every;
		d->hb_now = false;
	}
	if (*rc == PGC_OK && w->o.once && want_claim && !any_more(w, d)) {
		/* Once: every queue came back short and nothing is held any more (a job that failed
		 * or was deferred to now makes its queue worth claiming again first). */
		pthread_mutex_lock(&w->mu);
		bool idle = w->n_held == 0;
		pthread_mutex_unlock(&w->mu);
		int64_t wait = idle ? once_next_ms(w) : -1;
		if (idle && wait >= 0) {
			/* A rate's next start, or a job due within once_wait_ms: claim again then (or
			 * sooner, on a notification). */
			wlog(w, PGC_LOG_DEBUG, "once: claiming again in %lld ms", (long long)wait);
			d->once_waiting = true;
			d->next_claim = pgc__now_ms() + (wait < 5 ? 5 : wait);
			return STEP_ON;
		}
		if (idle) {
			wlog(w, PGC_LOG_INFO, "no runnable job left in its queues: stopping");
			pgc_worker_stop(w, 0);
			return STEP_ON;
		}
	}
	if (*rc == PGC_OK && want_claim && any_more_before && !any_more(w, d)) {
		/* Empty: sleep until the next run_at, a notification or the poll. */
		int64_t nr = next_run_ms(w);
		int64_t wait = w->listening ? w->o.poll_ms : d->idle_poll;
		if (!w->listening)
			d->idle_poll = d->idle_poll * 2 > w->o.poll_ms ? w->o.poll_ms : d->idle_poll * 2;
		if (nr >= 0 && nr < wait)
			wait = nr < 5 ? 5 : nr;
		d->next_claim = pgc__now_ms() + wait;
	}
	return STEP_ON;
}

/* A step failed: the same error over and over is said once every 10 s; after a server error
 * (not the connection) the dispatcher pauses a little before trying again. */
static void error_step(pgc_worker *w, dstate *d, int64_t now, const pgc_error *e)
{
	if (strcmp(e->message, d->last_error) != 0 || now - d->last_error_at >= 10000) {
		wlog(w, PGC_LOG_WARN, "%s", e->message);
		snprintf(d->last_error, sizeof d->last_error, "%s", e->message);
		d->last_error_at = now;
	}
	if (pgc__conn_ok(w->conn))
		pipe_wait(w->wake[0], 200);
}

/* Maintenance when due: the registration's refresh, and the reaper. */
static void maintenance_step(pgc_worker *w, dstate *d)
{
	int64_t now = pgc__now_ms();
	if (!d->stopping && w->listening && now >= d->next_register) {
		register_self(w, free_slots(w));
		d->next_register = now + 1000;
	}
	if (!d->stopping && w->o.reap_ms > 0 && now >= d->next_reap) {
		pgc_reap_result rr;
		pgc_error e;
		int rc = pgc_queue_reap(w->q, &rr, &e);
		if (rc == PGC_OK) {
			long n = rr.returned + rr.dead;
			if (n > 0) {
				atomic_fetch_add(&w->s_reaped, n);
				wlog(w, PGC_LOG_INFO, "reaper: %ld expired lease(s) returned to pending, %ld failed",
				     rr.returned, rr.dead);
			}
		} else if (rc != PGC_EBUSY) {
			wlog(w, PGC_LOG_WARN, "reaper: %s", e.message);
		}
		/* Jitter the period so that workers do not line up. */
		d->next_reap = now + w->o.reap_ms / 2 + (int64_t)(random() % (w->o.reap_ms + 1));
	}
}

/* Sleeps until something happens: a handler finishes or a stop is asked for (the wake-up
 * pipe), the server sends something (a notification), or a timer is due (heartbeat, claim,
 * reaper, the grace period). */
static void sleep_step(pgc_worker *w, dstate *d)
{
	pthread_mutex_lock(&w->mu);
	bool work = w->done_head != NULL;
	/* Stopping, with the last completions just sent and no handler left: stop_step ends the
	 * loop now. The handler's wake-up may have been drained already, so nothing would end
	 * the wait but the next heartbeat or the grace period. */
	if (d->stopping && d->pending_done == NULL && w->n_running == 0 && w->n_ready == 0)
		work = true;
	pthread_mutex_unlock(&w->mu);
	if (work)
		return;
	int64_t now = pgc__now_ms();
	bool more = any_more(w, d);
	int64_t until = d->hb_now ? now : d->next_hb;
	if (!d->stopping) {
		if (more && free_slots(w) > 0)
			until = now;
		if (d->next_claim < until)
			until = d->next_claim;
		if (w->o.reap_ms > 0 && d->next_reap < until)
			until = d->next_reap;
	} else if (d->stop_deadline < until) {
		until = d->stop_deadline;
	}
	int64_t timeout = until <= now ? 0 : until - now > 60000 ? 60000 : until - now;
	if (timeout == 0 && more && free_slots(w) > 0)
		return;
	int r = pgc__wait_input(w->conn, w->wake[0], timeout);
	if (r == PGC__WAIT_FD) {
		char buf[64];
		while (read(w->wake[0], buf, sizeof buf) > 0)
			;
		read_notifications(w, d, true); /* what may have come with it, never waiting */
	} else if (r == PGC__WAIT_INPUT) {
		read_notifications(w, d, false);
	} else if (r == PGC__WAIT_LOST) {
		pgc__session_lost(w->conn, "the connection was lost while the worker waited");
	}
}

static void *dispatcher_main(void *arg)
{
	pgc_worker *w = arg;
	dstate d;
	memset(&d, 0, sizeof d);
	d.more = calloc(w->o.n_queues, sizeof *d.more);
	d.forward = calloc(w->o.n_queues, sizeof *d.forward);
	d.plain = calloc(w->o.n_queues, sizeof *d.plain);
	if (d.more == NULL || d.forward == NULL || d.plain == NULL) {
		w->rc = pgc__err(&w->err, PGC_ENOMEM, "out of memory");
		goto exit;
	}
	for (size_t i = 0; i < w->o.n_queues; i++)
		d.more[i] = true;
	int64_t now = pgc__now_ms();
	d.hb_every = w->o.lease_ms / 3 > 0 ? w->o.lease_ms / 3 : 1;
	d.next_hb = now + d.hb_every;
	d.next_reap = now + (w->o.reap_ms > 0 ? w->o.reap_ms / 2 : 0);
	d.next_claim = now;
	d.idle_poll = 10;

	for (;;) {
		now = pgc__now_ms();
		step s = stop_step(w, &d, now);
		if (s == STEP_ON)
			s = session_step(w, &d, now);
		if (s == STEP_EXIT)
			break;
		if (s == STEP_AGAIN)
			continue;
		int rc;
		pgc_error e;
		if (trip_step(w, &d, now, &rc, &e) == STEP_AGAIN)
			continue;
		if (rc != PGC_OK && rc != PGC_ESTALE) {
			error_step(w, &d, now, &e);
			continue;
		}
		maintenance_step(w, &d);
		sleep_step(w, &d);
	}
exit:
	/* Whatever is still held is no longer ours to finish (released, or left to its lease when
	 * the connection is gone): tell the handlers still running. */
	pthread_mutex_lock(&w->mu);
	for (wjob *j = w->held.hnext; j != &w->held; j = j->hnext)
		atomic_store(&j->lost, true);
	w->exit_threads = true;
	pthread_cond_broadcast(&w->cv);
	pthread_mutex_unlock(&w->mu);
	char b = 1;
	ssize_t n = write(w->cron_wake[1], &b, 1); /* the scheduler thread stops with it */
	(void)n;
	free(d.more);
	free(d.forward);
	free(d.plain);
	return NULL;
}

/* ---- maintenance: vacuum the jobs table between autovacuum rounds ------------------------- */

static void *vacuum_main(void *arg)
{
	pgc_worker *w = arg;
	pgc_conn *c = NULL;
	pgc_queue *q = NULL;
	int64_t delay = 1000;
	while (!atomic_load(&w->stop_requested)) {
		pipe_wait(w->vac_wake[0], delay);
		if (atomic_load(&w->stop_requested))
			break;
		pgc_error e;
		if (c == NULL) {
			pgc_conn_options co = conn_options(w, false);
			pgc_queue_options qo = PGC_QUEUE_OPTIONS_INIT;
			qo.schema = w->schema;
			qo.prepare = false;
			if (pgc_connect(w->dsn, &co, &c, &e) != PGC_OK || pgc_queue_open(c, &qo, &q, &e) != PGC_OK) {
				pgc_conn_close(c);
				c = NULL;
				delay = 5000;
				continue;
			}
		}
		bool did = false;
		int rc = pgc_queue_vacuum(q, w->o.vacuum_dead_tuples, &did, &e);
		delay = 1000;
		if (rc == PGC_OK && did)
			wlog(w, PGC_LOG_DEBUG, "vacuumed the jobs table");
		else if (rc == PGC_EPOOLER) {
			wlog(w, PGC_LOG_INFO, "not vacuuming the jobs table: %s", e.message);
			break; /* the same route every time */
		} else if (rc != PGC_OK && rc != PGC_EBUSY)
			wlog(w, PGC_LOG_WARN, "vacuum: %s", e.message);
		if (!pgc__conn_ok(c)) {
			pgc_queue_close(q);
			pgc_conn_close(c);
			q = NULL;
			c = NULL;
		}
	}
	pgc_queue_close(q);
	pgc_conn_close(c);
	return NULL;
}

/* ---- the scheduler: cron ticks fired by the worker ----------------------------------------- */

static bool worker_exiting(pgc_worker *w)
{
	if (atomic_load(&w->stop_requested))
		return true;
	pthread_mutex_lock(&w->mu);
	bool e = w->exit_threads;
	pthread_mutex_unlock(&w->mu);
	return e;
}

/* opts.cron: what pgcoord cron run does, on a session of its own so that the claims of the
 * dispatcher never wait for a tick's transaction: pgc_cron_fire_due() at once while batches
 * come back full, otherwise when the next tick is due by the server's clock, at least every
 * second (edits are seen), at most every 20 ms. It stops with the dispatcher. */
static void *scheduler_main(void *arg)
{
	pgc_worker *w = arg;
	pgc_conn *c = NULL;
	int64_t delay = 0, last_warn = 0;
	char last_error[256] = "";
	while (!worker_exiting(w)) {
		if (delay > 0)
			pipe_wait(w->cron_wake[0], delay);
		if (worker_exiting(w))
			break;
		pgc_error e;
		if (c == NULL) {
			pgc_conn_options co = conn_options(w, false);
			if (pgc_connect(w->dsn, &co, &c, &e) != PGC_OK) {
				if (strcmp(e.message, last_error) != 0)
					wlog(w, PGC_LOG_WARN, "cron: %s", e.message);
				snprintf(last_error, sizeof last_error, "%s", e.message);
				c = NULL;
				delay = 1000;
				continue;
			}
		}
		pgc_cron_fire_result r;
		int rc = pgc_cron_fire_due(c, w->schema, w->worker_id, PGC_CRON_WORKER_BATCH, PGC_CRON_LOOKAHEAD_MS, &r,
		                           &e);
		int64_t now = pgc__now_ms();
		if (rc != PGC_OK) {
			if (strcmp(e.message, last_error) != 0)
				wlog(w, PGC_LOG_WARN, "cron: %s", e.message);
			snprintf(last_error, sizeof last_error, "%s", e.message);
			if (!pgc__conn_ok(c)) {
				pgc_conn_close(c);
				c = NULL;
			}
			delay = 1000;
			continue;
		}
		last_error[0] = '\0';
		atomic_fetch_add(&w->s_cron_enqueued, r.enqueued);
		if (r.missed > 0 || r.skipped > 0)
			wlog(w, PGC_LOG_INFO, "cron: %ld enqueued, %ld missed, %ld skipped (overlap)", r.enqueued, r.missed,
			     r.skipped);
		if (r.failed > 0 && now - last_warn >= 60000) {
			wlog(w, PGC_LOG_WARN, "cron: schedule %s cannot be fired on this host: %s", r.failed_name,
			     r.failed_err.message);
			last_warn = now;
		}
		if (r.schedules >= PGC_CRON_WORKER_BATCH) {
			delay = 0;
			continue;
		}
		delay = r.next_due_ms < 0 || r.next_due_ms > 1000 || r.failed > 0 ? 1000 : r.next_due_ms;
		if (delay < 20)
			delay = 20;
	}
	pgc_conn_close(c);
	return NULL;
}

/* ---- public ------------------------------------------------------------------------------- */

static char *dup_or(const char *s, const char *fallback)
{
	return strdup(s ? s : fallback);
}

int pgc_worker_new(const pgc_worker_options *opts, pgc_job_handler handler, void *handler_arg,
                   pgc_worker **out, pgc_error *err)
{
	pgc_error_clear(err);
	if (out == NULL || opts == NULL || handler == NULL)
		return pgc__err(err, PGC_EUSAGE, "pgc_worker_new: opts, handler and out must not be NULL");
	*out = NULL;
	if (opts->queues == NULL || opts->n_queues == 0 || opts->n_queues > 64)
		return pgc__err(err, PGC_EUSAGE, "pgc_worker_new: give 1 to 64 queues");
	for (size_t i = 0; i < opts->n_queues; i++) {
		pgc_error e;
		if (opts->queues[i] == NULL || *opts->queues[i] == '\0' ||
		    strlen(opts->queues[i]) > PGC_QUEUE_NAME_MAX)
			return pgc__err(err, PGC_EUSAGE, "pgc_worker_new: queue name %zu is empty or too long", i + 1);
		if (pgc_name_check("queue name", opts->queues[i], PGC_QUEUE_NAME_MAX, &e) != PGC_OK)
			return pgc__err(err, PGC_EUSAGE, "pgc_worker_new: %s (queue %zu)", e.message, i + 1);
	}
	if (opts->concurrency < 1 || opts->concurrency > 1024 || opts->prefetch < 0 || opts->prefetch > 100000)
		return pgc__err(err, PGC_EUSAGE, "pgc_worker_new: concurrency must be 1..1024, prefetch 0..100000");
	if (opts->lease_ms < 100 || opts->poll_ms < 1 || opts->flush_ms < 0 || opts->reap_ms < 0)
		return pgc__err(err, PGC_EUSAGE, "pgc_worker_new: lease >= 100 ms, poll >= 1 ms, flush and reap >= 0");
	if (opts->backoff.base_ms < 0 || opts->backoff.max_ms < 0 || opts->vacuum_dead_tuples < 0)
		return pgc__err(err, PGC_EUSAGE, "pgc_worker_new: backoff and vacuum_dead_tuples must not be negative");
	if (opts->once_wait_ms < 0)
		return pgc__err(err, PGC_EUSAGE, "pgc_worker_new: once_wait_ms must not be negative");

	pgc_worker *w = calloc(1, sizeof *w);
	if (w == NULL)
		return pgc__err(err, PGC_ENOMEM, "out of memory");
	w->o = *opts;
	w->handler = handler;
	w->handler_arg = handler_arg;
	w->wake[0] = w->wake[1] = -1;
	w->vac_wake[0] = w->vac_wake[1] = -1;
	w->cron_wake[0] = w->cron_wake[1] = -1;
	w->held.hnext = w->held.hprev = &w->held;
	pthread_mutex_init(&w->mu, NULL);
	pthread_cond_init(&w->cv, NULL);
	char host[128] = "";
	gethostname(host, sizeof host - 1);
	char wid[200];
	snprintf(wid, sizeof wid, "%s:%d", host, (int)getpid());
	w->queues = calloc(opts->n_queues, sizeof *w->queues);
	w->dsn = opts->dsn ? strdup(opts->dsn) : NULL;
	w->schema = dup_or(opts->schema, PGC_SCHEMA_DEFAULT);
	w->worker_id = dup_or(opts->worker_id, wid);
	w->app = dup_or(opts->application_name, "pgcoord/worker");
	bool oom = w->queues == NULL || (opts->dsn && !w->dsn) || !w->schema || !w->worker_id || !w->app;
	for (size_t i = 0; !oom && i < opts->n_queues; i++)
		oom = (w->queues[i] = strdup(opts->queues[i])) == NULL;
	if (!oom) {
		pgc__sb lit = PGC__SB_INIT;
		pgc__sb_text_array(&lit, opts->n_queues, (const char *const *)w->queues);
		w->queues_lit = lit.buf;
		oom = lit.oom;
	}
	if (oom) {
		pgc_worker_free(w);
		return pgc__err(err, PGC_ENOMEM, "out of memory");
	}
	w->o.queues = (const char *const *)w->queues;
	w->o.dsn = w->dsn;
	w->o.schema = w->schema;
	w->o.worker_id = w->worker_id;
	w->o.application_name = w->app;
	if (pipe2(w->wake, O_CLOEXEC | O_NONBLOCK) != 0 || pipe2(w->vac_wake, O_CLOEXEC | O_NONBLOCK) != 0 ||
	    pipe2(w->cron_wake, O_CLOEXEC | O_NONBLOCK) != 0) {
		pgc_worker_free(w);
		return pgc__err(err, PGC_EINTERNAL, "cannot create a pipe: %s", strerror(errno));
	}
	pgc_conn_options co = conn_options(w, true);
	int rc = pgc_connect(w->dsn, &co, &w->conn, err);
	if (rc == PGC_OK) {
		pgc_queue_options qo = PGC_QUEUE_OPTIONS_INIT;
		qo.schema = w->schema;
		rc = pgc_queue_open(w->conn, &qo, &w->q, err);
	}
	if (rc == PGC_OK && opts->cron) {
		/* The cron tables must be there (asking for a schedule that need not exist: the answer
		 * is PGC_ENOSCHEMA without them), so that a worker that cannot fire ticks says so now. */
		pgc_cron_info *xs = NULL;
		size_t nx = 0;
		rc = pgc_cron_list(w->conn, w->schema, "-", &xs, &nx, err);
		pgc_cron_infos_free(xs, nx);
		if (rc == PGC_ENOTFOUND) {
			pgc_error_clear(err);
			rc = PGC_OK;
		}
	}
	if (rc == PGC_OK) {
		/* A channel of its own, the same on every session, so that the registration a new
		 * session makes replaces the old one. */
		snprintf(w->own_channel, sizeof w->own_channel, "%.30s.w.%08lx%08lx", w->schema,
		         (unsigned long)random() & 0xffffffffUL, (unsigned long)getpid() & 0xffffffffUL);
		rc = setup_session(w, err);
	}
	if (rc != PGC_OK) {
		pgc_worker_free(w);
		return rc;
	}
	*out = w;
	return PGC_OK;
}

int pgc_worker_start(pgc_worker *w, pgc_error *err)
{
	pgc_error_clear(err);
	if (w == NULL || w->started)
		return pgc__err(err, PGC_EUSAGE, "pgc_worker_start: no worker, or already started");
	w->threads = calloc((size_t)w->o.concurrency, sizeof *w->threads);
	if (w->threads == NULL)
		return pgc__err(err, PGC_ENOMEM, "out of memory");
	pthread_attr_t attr;
	pthread_attr_init(&attr);
	pthread_attr_setstacksize(&attr, 256 * 1024);
	for (int i = 0; i < w->o.concurrency; i++) {
		if (pthread_create(&w->threads[i], &attr, handler_main, w) != 0) {
			pthread_mutex_lock(&w->mu);
			w->exit_threads = true;
			pthread_cond_broadcast(&w->cv);
			pthread_mutex_unlock(&w->mu);
			for (int k = 0; k < i; k++)
				pthread_join(w->threads[k], NULL);
			pthread_attr_destroy(&attr);
			return pgc__err(err, PGC_EINTERNAL, "cannot start a handler thread");
		}
		w->n_threads++;
	}
	if (w->o.vacuum_dead_tuples > 0 && w->o.reap_ms > 0 && w->pooled)
		wlog(w, PGC_LOG_INFO, "not vacuuming the jobs table through this pooler (the vacuum's session lock"
		     " could stay behind on a pooled server connection): autovacuum does it");
	else if (w->o.vacuum_dead_tuples > 0 && w->o.reap_ms > 0)
		w->have_vacuumer = pthread_create(&w->vacuumer, &attr, vacuum_main, w) == 0;
	if (w->o.cron && pthread_create(&w->scheduler, &attr, scheduler_main, w) != 0)
		wlog(w, PGC_LOG_ERROR, "cannot start the cron scheduler thread: no ticks are fired by this worker");
	else if (w->o.cron)
		w->have_scheduler = true;
	if (pthread_create(&w->dispatcher, &attr, dispatcher_main, w) != 0) {
		pthread_mutex_lock(&w->mu);
		w->exit_threads = true;
		pthread_cond_broadcast(&w->cv);
		pthread_mutex_unlock(&w->mu);
		for (int k = 0; k < w->n_threads; k++)
			pthread_join(w->threads[k], NULL);
		w->n_threads = 0;
		pthread_attr_destroy(&attr);
		return pgc__err(err, PGC_EINTERNAL, "cannot start the dispatcher thread");
	}
	pthread_attr_destroy(&attr);
	w->started = true;
	return PGC_OK;
}

void pgc_worker_stop(pgc_worker *w, int64_t grace_ms)
{
	if (w == NULL)
		return;
	atomic_store(&w->grace_ms, grace_ms < 0 ? 0 : grace_ms);
	atomic_store(&w->stop_requested, true);
	char b = 1;
	ssize_t n = write(w->wake[1], &b, 1);
	n = write(w->vac_wake[1], &b, 1);
	n = write(w->cron_wake[1], &b, 1);
	(void)n;
}

int pgc_worker_wait(pgc_worker *w, pgc_error *err)
{
	pgc_error_clear(err);
	if (w == NULL)
		return pgc__err(err, PGC_EUSAGE, "pgc_worker_wait: w must not be NULL");
	if (w->started && !w->stopped) {
		pthread_join(w->dispatcher, NULL);
		if (w->have_vacuumer)
			pthread_join(w->vacuumer, NULL);
		if (w->have_scheduler)
			pthread_join(w->scheduler, NULL);
		for (int i = 0; i < w->n_threads; i++)
			pthread_join(w->threads[i], NULL);
		w->stopped = true;
		/* Free what is left (released or lost jobs). */
		pthread_mutex_lock(&w->mu);
		while (w->held.hnext != &w->held) {
			wjob *j = w->held.hnext;
			held_remove(w, j);
			free(j);
		}
		pthread_mutex_unlock(&w->mu);
	}
	if (w->rc != PGC_OK && err != NULL)
		*err = w->err;
	return w->rc;
}

void pgc_worker_get_stats(pgc_worker *w, pgc_worker_stats *out)
{
	if (w == NULL || out == NULL)
		return;
	out->claimed = atomic_load(&w->s_claimed);
	out->completed = atomic_load(&w->s_completed);
	out->failed = atomic_load(&w->s_failed);
	out->retried = atomic_load(&w->s_retried);
	out->stale = atomic_load(&w->s_stale);
	out->released = atomic_load(&w->s_released);
	out->reaped = atomic_load(&w->s_reaped);
	out->wakeups = atomic_load(&w->s_wakeups);
	out->cron_enqueued = atomic_load(&w->s_cron_enqueued);
	out->cancelled = atomic_load(&w->s_cancelled);
	out->reconnects = atomic_load(&w->s_reconnects);
	out->listening = w->listening;
}

int64_t pgc_job_claimed_ms(const pgc_job *job)
{
	if (job == NULL || job->internal == NULL)
		return -1;
	return pgc__now_ms() - ((const wjob *)job->internal)->claimed_ms;
}

void pgc_worker_free(pgc_worker *w)
{
	if (w == NULL)
		return;
	if (w->started && !w->stopped) {
		pgc_worker_stop(w, 0);
		pgc_error e;
		if (pgc_worker_wait(w, &e) != PGC_OK)
			e.code = 0; /* the error was for the caller of wait */
	}
	pgc_queue_close(w->q);
	pgc_conn_close(w->conn);
	if (w->wake[0] >= 0)
		close(w->wake[0]);
	if (w->wake[1] >= 0)
		close(w->wake[1]);
	if (w->vac_wake[0] >= 0)
		close(w->vac_wake[0]);
	if (w->vac_wake[1] >= 0)
		close(w->vac_wake[1]);
	for (int i = 0; i < 2; i++)
		if (w->cron_wake[i] >= 0)
			close(w->cron_wake[i]);
	if (w->queues)
		for (size_t i = 0; i < w->o.n_queues; i++)
			free(w->queues[i]);
	free(w->queues);
	free(w->queues_lit);
	free(w->dsn);
	free(w->schema);
	free(w->worker_id);
	free(w->app);
	free(w->threads);
	pthread_mutex_destroy(&w->mu);
	pthread_cond_destroy(&w->cv);
	free(w);
}

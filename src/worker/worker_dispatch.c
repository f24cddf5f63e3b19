/* worker_dispatch.c - the dispatcher's loop and the handler threads it feeds
 *
 * The handler threads take jobs from the ready list and leave them on the done list, waking the
 * dispatcher through its pipe; the dispatcher owns the session (set up again on every new one),
 * settles failures and deferrals one by one, gives the round trip (worker_trip.c) the
 * completions, the heartbeats and the claims to send, marks the jobs whose leases came back
 * lost or cancelled, and runs the steps of its loop: stop, session, trip, maintenance, sleep. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "worker_int.h"

static void wake(pgc_worker *w)
{
	if (atomic_exchange(&w->wake_pending, true))
		return;
	char b = 1;
	ssize_t n = write(w->wake[1], &b, 1);
	(void)n; /* a full pipe wakes the loop anyway */
}

/* ---- handler threads ---------------------------------------------------------------------- */

/* A handler's output as the server takes it: cut to its buffer, and every byte that is not
 * part of valid UTF-8 replaced with '?', so that one handler's bytes cannot fail the
 * completion batch of the others. */
static void output_sanitize(char *s, size_t size)
{
	s[size - 1] = '\0';
	unsigned char *p = (unsigned char *)s;
	while (*p) {
		size_t n = pgc__utf8_len(p);
		if (n == 0)
			*p++ = '?';
		else
			p += n;
	}
}

void *pgc__worker_handler_main(void *arg)
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
		j->result.exit_status = -1;
		if (!atomic_load(&j->lost))
			w->handler(&j->job, &j->result, w->handler_arg);
		output_sanitize(j->result.output, sizeof j->result.output);

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
	pgc__worker_log(w, strcmp(severity, "WARNING") == 0 ? PGC_LOG_WARN : PGC_LOG_DEBUG,
	                "server %s: %s", severity, message);
}

/* The options of the worker's sessions. */
/* The dispatcher's session must find out that its server stopped answering (frozen, or cut
 * off with its sockets open: nothing tells the client) while the leases it renews still run:
 * a tenth of the lease for a statement (then the cancel, answered or not within 5 s) and for
 * each host's connection attempt, so that a heartbeat sent a third of the way into the lease
 * has reached the new primary well before the lease ends. Between 2 s (the shortest
 * connect_timeout libpq keeps) and the usual 60 s and 10 s. The vacuum thread's session keeps
 * the defaults: a VACUUM may take long, and it holds no lease. */
pgc_conn_options pgc__worker_conn_options(pgc_worker *w, bool dispatcher)
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

static void register_self(pgc_worker *w, int slots);
static void unregister_self(pgc_worker *w);

/* What the worker keeps on its session, set up on every new session: first the pooler probe.
 * Through a transaction- or statement-mode pooler (or one whose kind cannot be told) each
 * transaction may run on another server session: LISTEN cannot work there, so the worker
 * polls (and the layer stops preparing statements on its own). Otherwise the session's
 * settings, the LISTENs (recorded on the session, and forgotten with it) and the
 * registration. */
int pgc__worker_setup_session(pgc_worker *w, pgc_error *err)
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
			pgc__worker_log(w, PGC_LOG_WARN, "%s: LISTEN cannot work, polling instead (every 10 ms to %lld ms when idle)%s",
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
		register_self(w, pgc__worker_free_slots(w));
	}
	return PGC_OK;
}

/* ---- the dispatcher ----------------------------------------------------------------------- */

int pgc__worker_free_slots(pgc_worker *w)
{
	int cap = w->o.concurrency + w->o.prefetch;
	pthread_mutex_lock(&w->mu);
	int used = w->n_ready + w->n_running;
	pthread_mutex_unlock(&w->mu);
	return cap - used;
}

void pgc__worker_job_free(pgc_worker *w, wjob *j)
{
	pthread_mutex_lock(&w->mu);
	pgc__worker_held_remove(w, j);
	pthread_mutex_unlock(&w->mu);
	free(j->result.result_json);
	free(j);
}

static bool any_more(const pgc_worker *w, const dstate *d)
{
	bool more = false;
	for (size_t i = 0; i < w->o.n_queues; i++)
		more |= d->more[i];
	return more;
}

static size_t cancelled_among(pgc_worker *w, const int64_t *ids, const bool *gone, size_t n, bool *cancelled);
/* The queue is worth claiming again. */
void pgc__worker_mark_more(pgc_worker *w, dstate *d, const char *queue)
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
				pgc__worker_log(w, PGC_LOG_WARN, "job %lld failed for good: deferred as often as its max_deferrals allows",
				                (long long)j->job.id);
			} else if (rc == PGC_OK) {
				atomic_fetch_add(&w->s_retried, 1);
			}
		} else {
			bool dead = false;
			j->result.error[sizeof j->result.error - 1] = '\0';
			rc = pgc__queue_fail_run(w->q, j->job.id, j->job.token, j->result.error,
			                         j->result.exit_status, j->result.output, &w->o.backoff,
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
					pgc__worker_log(w, PGC_LOG_WARN, "job %lld failed for good after %d attempt%s: %.300s",
					                (long long)j->job.id, j->job.attempt, j->job.attempt == 1 ? "" : "s",
					                j->result.error);
			}
		}
		if (rc == PGC_ESTALE) {
			bool cancelled = false;
			cancelled_among(w, &j->job.id, NULL, 1, &cancelled);
			atomic_fetch_add(cancelled ? &w->s_cancelled : &w->s_stale, 1);
			if (cancelled)
				pgc__worker_log(w, PGC_LOG_INFO, "job %lld was cancelled before its outcome was recorded: it stays cancelled",
				                (long long)j->job.id);
			else
				pgc__worker_log(w, PGC_LOG_WARN, "job %lld: %s", (long long)j->job.id, err->message);
			rc = PGC_OK;
		}
		if (rc != PGC_OK)
			return rc; /* keep it (and the rest) for the next round */
		/* The job may be due again soon: a claim (empty or not) recomputes the run_at timer. */
		pgc__worker_mark_more(w, d, j->job.queue);
		*pp = j->next;
		pgc__worker_job_free(w, j);
	}
	return PGC_OK;
}

/* Heartbeat of every held job, in the round trip. Builds the arrays; returns false if none. */
bool pgc__worker_heartbeat_arrays(pgc_worker *w, pgc__sb *ia, pgc__sb *ta, int64_t **ids_out,
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

/* A job that renew() says is no longer held is no longer ours: cancelled, or its lease was
 * lost. Its handler is told (pgc_job_cancelled() is set before pgc_job_lost(), so a handler
 * that sees it lost can tell why); a job that had not started is dropped. */
void pgc__worker_mark_lost(pgc_worker *w, PGresult *res, const int64_t *ids, size_t n)
{
	bool *gone = calloc(n, sizeof *gone), *cancelled = calloc(n, sizeof *cancelled);
	if (gone == NULL || cancelled == NULL) {
		free(gone);
		free(cancelled);
		return;
	}
	pgc__queue_renewed(res, n, ids, gone, cancelled);
	bool any = false;
	for (size_t i = 0; i < n; i++)
		any |= gone[i];
	if (!any) {
		free(gone);
		free(cancelled);
		return;
	}
	pthread_mutex_lock(&w->mu);
	for (wjob *j = w->held.hnext; j != &w->held; j = j->hnext) {
		for (size_t i = 0; i < n; i++) {
			if (ids[i] != j->job.id || !gone[i] || atomic_load(&j->lost))
				continue;
			if (cancelled[i]) {
				atomic_store(&j->cancelled, true);
				pgc__worker_log(w, PGC_LOG_INFO, "job %lld was cancelled: %s", (long long)j->job.id,
				                j->started ? "telling its handler to stop" : "dropped before it started");
			} else {
				pgc__worker_log(w, PGC_LOG_WARN, "job %lld: lease lost (reaped or reclaimed elsewhere)",
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
			pgc__worker_held_remove(w, j);
			free(j);
			continue;
		}
		w->ready_tail = j;
		pp = &j->next;
	}
	pthread_mutex_unlock(&w->mu);
	free(gone);
	free(cancelled);
}

/* Some completions changed nothing: the jobs were cancelled before them (the history says so),
 * or their leases were lost. ids holds the n jobs sent, res the ids completed. */
void pgc__worker_stale_completions(pgc_worker *w, PGresult *res, const int64_t *ids, size_t n)
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
				pgc__worker_log(w, PGC_LOG_INFO, "job %lld was cancelled before its completion was recorded: it stays cancelled",
				                (long long)ids[i]);
	} else {
		n_gone = n - (size_t)PQntuples(res);
	}
	free(gone);
	free(cancelled);
	atomic_fetch_add(&w->s_cancelled, (long)n_cancelled);
	atomic_fetch_add(&w->s_stale, (long)(n_gone - n_cancelled));
	if (n_gone > n_cancelled)
		pgc__worker_log(w, PGC_LOG_WARN, "%zu completion(s) were stale: lease lost before completion", n_gone - n_cancelled);
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
		pgc__worker_log(w, PGC_LOG_WARN, "cannot tell what is due soon: %s", e.message);
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
	PGresult *res = pgc__queue_run_text(w->q, "SELECT @S@.worker_register($1, $2::text[], $3::int)", 3, v,
	                                    &rc, &e);
	if (res != NULL)
		w->registered = true;
	else if (!w->register_warned) {
		pgc__worker_log(w, PGC_LOG_WARN, "cannot register for targeted wake-ups (woken with everyone instead): %s",
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
	PQclear(pgc__queue_run_text(w->q, "SELECT @S@.worker_unregister($1)", 1, v, &rc, &e));
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
				if (strcmp(n->relname, w->own_channel) == 0 &&
				    pgc__worker_free_slots(w) <= 0)
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
			pgc__worker_held_remove(w, j);
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
			pgc__worker_log(w, PGC_LOG_INFO, "released %zu %s job(s) back to pending",
			                k, started_ones ? "unfinished" : "unstarted");
		} else {
			pgc__worker_log(w, PGC_LOG_WARN, "cannot release %zu job(s) (they return after their lease): %s",
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
			if (pgc__worker_setup_session(w, &e) == PGC_OK) {
				pgc__worker_log(w, PGC_LOG_INFO, "reconnected");
				atomic_fetch_add(&w->s_reconnects, 1);
				for (size_t i = 0; i < w->o.n_queues; i++)
					d->more[i] = true;
				return true;
			}
			pgc__worker_log(w, PGC_LOG_WARN, "after reconnecting: %s", e.message);
		}
		/* At most a second between attempts: the worker is back within a second of a new
		 * primary accepting writes. */
		pgc__worker_pipe_wait(w->wake[0], delay);
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
		pgc__worker_log(w, PGC_LOG_INFO, "stopping: no new claims; waiting up to %lld ms for running jobs",
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
		pgc__worker_log(w, PGC_LOG_WARN, "grace period over: releasing %d unfinished job(s)", d->running);
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
		pgc__worker_log(w, PGC_LOG_WARN, "connection lost; reconnecting");
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
		int slots = pgc__worker_free_slots(w);
		int cap = w->o.concurrency + w->o.prefetch;
		want_claim = any_more(w, d) && slots > 0 && (d->ready < w->o.concurrency || slots * 2 >= cap);
	}
	if (d->pending_done != NULL && d->first_done_at == 0)
		d->first_done_at = now;
	if (d->pending_done != NULL && !want_claim && !do_hb && !d->stopping &&
	    now - d->first_done_at < w->o.flush_ms) {
		/* Give other handlers a moment to finish so their completions share a trip. */
		pgc__worker_pipe_wait(w->wake[0], w->o.flush_ms - (now - d->first_done_at));
		return STEP_AGAIN;
	}
	d->first_done_at = 0;
	if (d->pending_done == NULL && !do_hb && !want_claim)
		return STEP_ON;
	bool any_more_before = any_more(w, d);
	if (want_claim)
		d->once_waiting = false;
	*rc = pgc__worker_round_trip(w, d, &d->pending_done, do_hb, want_claim, e);
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
			pgc__worker_log(w, PGC_LOG_DEBUG, "once: claiming again in %lld ms",
			                (long long)wait);
			d->once_waiting = true;
			d->next_claim = pgc__now_ms() + (wait < 5 ? 5 : wait);
			return STEP_ON;
		}
		if (idle) {
			pgc__worker_log(w, PGC_LOG_INFO,
			                "no runnable job left in its queues: stopping");
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
		pgc__worker_log(w, PGC_LOG_WARN, "%s", e->message);
		snprintf(d->last_error, sizeof d->last_error, "%s", e->message);
		d->last_error_at = now;
	}
	if (pgc__conn_ok(w->conn))
		pgc__worker_pipe_wait(w->wake[0], 200);
}

/* Maintenance when due: the registration's refresh, and the reaper. */
static void maintenance_step(pgc_worker *w, dstate *d)
{
	int64_t now = pgc__now_ms();
	if (!d->stopping && w->listening && now >= d->next_register) {
		register_self(w, pgc__worker_free_slots(w));
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
				pgc__worker_log(w, PGC_LOG_INFO, "reaper: %ld expired lease(s) returned to pending, %ld failed",
				                rr.returned, rr.dead);
			}
		} else if (rc != PGC_EBUSY) {
			pgc__worker_log(w, PGC_LOG_WARN, "reaper: %s", e.message);
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
		if (more && pgc__worker_free_slots(w) > 0)
			until = now;
		if (d->next_claim < until)
			until = d->next_claim;
		if (w->o.reap_ms > 0 && d->next_reap < until)
			until = d->next_reap;
	} else if (d->stop_deadline < until) {
		until = d->stop_deadline;
	}
	int64_t timeout = until <= now ? 0 : until - now > 60000 ? 60000 : until - now;
	if (timeout == 0 && more && pgc__worker_free_slots(w) > 0)
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

void *pgc__worker_dispatcher_main(void *arg)
{
	pgc_worker *w = arg;
	dstate d;
	memset(&d, 0, sizeof d);
	d.more = calloc(w->o.n_queues, sizeof *d.more);
	d.forward = calloc(w->o.n_queues, sizeof *d.forward);
	if (d.more == NULL || d.forward == NULL) {
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
	return NULL;
}

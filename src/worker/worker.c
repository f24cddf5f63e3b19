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
 * table, its settings) is set up again by pgc__worker_setup_session() on every new session.
 *
 * The files: worker.c the public calls (the options' checks, create, start, stop, wait, free,
 * the stats and what a handler asks of its job); worker_dispatch.c the dispatcher's loop and the
 * handler threads; worker_trip.c its round trip; worker_side.c the vacuum and cron threads;
 * worker_int.h what they share. */
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "worker_int.h"

void pgc__worker_log(pgc_worker *w, pgc_log_level level, const char *fmt, ...)
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

/* ---- public ------------------------------------------------------------------------------- */

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
	if (opts->queues == NULL || opts->n_queues == 0 || opts->n_queues > PGC_WORKER_QUEUES_MAX)
		return pgc__err(err, PGC_EUSAGE, "pgc_worker_new: give 1 to %d queues", PGC_WORKER_QUEUES_MAX);
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
	pgc_conn_options co = pgc__worker_conn_options(w, true);
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
		rc = pgc__worker_setup_session(w, err);
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
		if (pthread_create(&w->threads[i], &attr, pgc__worker_handler_main, w) != 0) {
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
		pgc__worker_log(w, PGC_LOG_INFO, "not vacuuming the jobs table through this pooler (the vacuum's session lock"
		                " could stay behind on a pooled server connection): autovacuum does it");
	else if (w->o.vacuum_dead_tuples > 0 && w->o.reap_ms > 0)
		w->have_vacuumer =
			pthread_create(&w->vacuumer, &attr, pgc__worker_vacuum_main, w) == 0;
	if (w->o.cron && pthread_create(&w->scheduler, &attr, pgc__worker_scheduler_main, w) != 0)
		pgc__worker_log(w, PGC_LOG_ERROR, "cannot start the cron scheduler thread: no ticks are fired by this worker");
	else if (w->o.cron)
		w->have_scheduler = true;
	if (pthread_create(&w->dispatcher, &attr, pgc__worker_dispatcher_main, w) != 0) {
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
			pgc__worker_held_remove(w, j);
			free(j->result.result_json);
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
		(void)!pgc_worker_wait(w, NULL); /* its error is for the caller of wait */
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

/* worker_side.c - the worker's side threads, each on a session of its own: the vacuum of the
 * jobs table and the cron scheduler (opts.cron)
 *
 * They hold no job: what they share with the rest is the stop (the request, and for the
 * scheduler the dispatcher's end), their wake-up pipes, the log and the counters. A lost
 * session is opened again on their next round. */
#include <stdio.h>
#include <string.h>

#include "worker_int.h"

/* ---- maintenance: vacuum the jobs table between autovacuum rounds ------------------------- */

void *pgc__worker_vacuum_main(void *arg)
{
	pgc_worker *w = arg;
	pgc_conn *c = NULL;
	pgc_queue *q = NULL;
	int64_t delay = 1000;
	while (!atomic_load(&w->stop_requested)) {
		pgc__worker_pipe_wait(w->vac_wake[0], delay);
		if (atomic_load(&w->stop_requested))
			break;
		pgc_error e;
		if (c == NULL) {
			pgc_conn_options co = pgc__worker_conn_options(w, false);
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
			pgc__worker_log(w, PGC_LOG_DEBUG, "vacuumed the jobs table");
		else if (rc == PGC_EPOOLER) {
			pgc__worker_log(w, PGC_LOG_INFO, "not vacuuming the jobs table: %s",
			                e.message);
			break; /* the same route every time */
		} else if (rc != PGC_OK && rc != PGC_EBUSY)
			pgc__worker_log(w, PGC_LOG_WARN, "vacuum: %s", e.message);
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
void *pgc__worker_scheduler_main(void *arg)
{
	pgc_worker *w = arg;
	pgc_conn *c = NULL;
	int64_t delay = 0, last_warn = 0;
	char last_error[256] = "";
	while (!worker_exiting(w)) {
		if (delay > 0)
			pgc__worker_pipe_wait(w->cron_wake[0], delay);
		if (worker_exiting(w))
			break;
		pgc_error e;
		if (c == NULL) {
			pgc_conn_options co = pgc__worker_conn_options(w, false);
			if (pgc_connect(w->dsn, &co, &c, &e) != PGC_OK) {
				if (strcmp(e.message, last_error) != 0)
					pgc__worker_log(w, PGC_LOG_WARN, "cron: %s", e.message);
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
				pgc__worker_log(w, PGC_LOG_WARN, "cron: %s", e.message);
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
			pgc__worker_log(w, PGC_LOG_INFO, "cron: %ld enqueued, %ld missed, %ld skipped (overlap)", r.enqueued, r.missed,
			                r.skipped);
		if (r.failed > 0 && now - last_warn >= 60000) {
			pgc__worker_log(w, PGC_LOG_WARN, "cron: schedule %s cannot be fired on this host: %s", r.failed_name,
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

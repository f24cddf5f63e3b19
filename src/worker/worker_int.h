/* worker_int.h - what the worker's files share (private to src/worker/): the worker, the slot
 * a claimed job lives in while this worker holds it, the dispatcher's state, and the calls
 * from one file to another */
#ifndef PGCOORD_WORKER_INT_H
#define PGCOORD_WORKER_INT_H

#include <poll.h>
#include <pthread.h>
#include <stdatomic.h>

#include "conn/conn_int.h"
#include "queue/queue_int.h"

/* A claimed job, from the claim until its outcome is committed or it is dropped: on the held
 * list all that time, and on the ready list (claimed, not started) or the done list (its
 * handler returned) on the way. */
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

/* The dispatcher's state between the steps of its loop. */
typedef struct dstate {
	bool *more;          /* per queue: worth claiming */
	bool *forward;       /* per queue: a targeted wake-up to pass on to everyone */
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

/* ---- worker.c ---------------------------------------------------------------------------- */

/* A line to opts.log, when there is one. */
void pgc__worker_log(pgc_worker *w, pgc_log_level level, const char *fmt, ...) PGC_PRINTF(3, 4);

/* The held list, under w->mu. */
static inline void pgc__worker_held_add(pgc_worker *w, wjob *j)
{
	j->hnext = w->held.hnext;
	j->hprev = &w->held;
	w->held.hnext->hprev = j;
	w->held.hnext = j;
	w->n_held++;
}

static inline void pgc__worker_held_remove(pgc_worker *w, wjob *j)
{
	j->hprev->hnext = j->hnext;
	j->hnext->hprev = j->hprev;
	j->hnext = j->hprev = NULL;
	w->n_held--;
}

/* Sleeps up to ms on one of the worker's pipes alone (what the server sends meanwhile waits). */
static inline void pgc__worker_pipe_wait(int fd, int64_t ms)
{
	struct pollfd pfd = { fd, POLLIN, 0 };
	(void)poll(&pfd, 1, (int)ms);
}

/* ---- worker_dispatch.c ------------------------------------------------------------------- */

/* Each is described where it is defined. */
void *pgc__worker_handler_main(void *arg);
void *pgc__worker_dispatcher_main(void *arg);
pgc_conn_options pgc__worker_conn_options(pgc_worker *w, bool dispatcher);
int pgc__worker_setup_session(pgc_worker *w, pgc_error *err);
int pgc__worker_free_slots(pgc_worker *w);
void pgc__worker_job_free(pgc_worker *w, wjob *j);
void pgc__worker_mark_more(pgc_worker *w, dstate *d, const char *queue);
bool pgc__worker_heartbeat_arrays(pgc_worker *w, pgc__sb *ia, pgc__sb *ta, int64_t **ids_out,
                                  size_t *n_out);
void pgc__worker_mark_lost(pgc_worker *w, PGresult *res, const int64_t *ids, size_t n);
void pgc__worker_stale_completions(pgc_worker *w, PGresult *res, const int64_t *ids, size_t n);

/* ---- worker_trip.c ----------------------------------------------------------------------- */

int pgc__worker_round_trip(pgc_worker *w, dstate *d, wjob **done, bool do_hb, bool claim,
                           pgc_error *err);

/* ---- worker_side.c ----------------------------------------------------------------------- */

void *pgc__worker_vacuum_main(void *arg);
void *pgc__worker_scheduler_main(void *arg);

#endif

/* pgcoord/queue.h - the job queue: enqueue, claim with SKIP LOCKED and a claim token, leases,
 * complete/fail/retry, a reaper, and pgc_worker, a pool of handler threads
 *
 * Delivery is at least once. A claim gives every job a fresh claim token and a lease on the
 * database clock; complete, fail, retry-later and heartbeat take the job id and that token, and
 * change nothing when the token is no longer current (PGC_ESTALE): the job's lease expired and
 * the reaper returned it, or another claim owns it now. Finished jobs leave the live table at
 * once for job_history (succeeded, failed = dead letter, cancelled), trimmed by retention.
 *
 * The schema comes from migration 002 (pgc_schema_init). Every function takes a pgc_queue
 * handle bound to one pgc_conn and one schema. */
#ifndef PGCOORD_QUEUE_H
#define PGCOORD_QUEUE_H

#include <stdbool.h>

#include "conn.h"
#include "duration.h"

#ifdef __cplusplus
extern "C" {
#endif

/* The advisory key the reaper takes with pg_try_advisory_xact_lock, so that one reaper runs at a
 * time: 0x7067635f72656170, the ASCII bytes of "pgc_reap". Held for one short transaction. */
#define PGC_QUEUE_REAPER_LOCK_KEY INT64_C(0x7067635f72656170)

/* The advisory key pgc_queue_vacuum holds (pg_try_advisory_lock, session scope) while it
 * vacuums, so that one vacuum of the jobs table runs at a time: "pgc_vacu". */
#define PGC_QUEUE_VACUUM_LOCK_KEY INT64_C(0x7067635f76616375)

/* Bounds checked by the library (the server checks them again). */
#define PGC_QUEUE_NAME_MAX 128     /* bytes */
#define PGC_QUEUE_KEY_MAX 128      /* bytes of a concurrency key */
#define PGC_QUEUE_GROUP_MAX 128    /* bytes of a job group's name */
#define PGC_QUEUE_PRIORITY_MIN (-32768)
#define PGC_QUEUE_PRIORITY_MAX 32767
#define PGC_QUEUE_MAX_ATTEMPTS_DEFAULT 25
#define PGC_QUEUE_MAX_DEFERRALS_DEFAULT 100

/* A handle on the queue tables of one schema, used through one connection. Not thread-safe
 * (like its pgc_conn). Close it before its connection; a handle whose connection was closed
 * first can still be closed (and pgc_queue_channel() read), and every other call on it
 * returns PGC_EUSAGE. Several handles may share a connection. */
typedef struct pgc_queue pgc_queue;

typedef struct pgc_queue_options {
	const char *schema; /* NULL: "pgcoord" */
	/* Run the hot statements (enqueue, claim, complete, fail, heartbeat, ...) through the
	 * connection's statement cache, which plans each once per session and which every handle
	 * on the connection shares; false keeps this handle's statements out of it (each is then
	 * planned every time, as one-shot commands do). Either way the connection stops preparing
	 * on its own once pgc_conn_pooler() finds a transaction-mode pooler, or prepared
	 * statements keep disappearing under it. */
	bool prepare;
} pgc_queue_options;

#define PGC_QUEUE_OPTIONS_INIT { NULL, true }

/* Opens a handle. Checks that the queue schema is installed.
 * Errors: PGC_EUSAGE, PGC_ENOSCHEMA (run pgcoord init), PGC_ESQL, PGC_ECONNLOST, PGC_ENOMEM.
 * On success *out is owned by the caller: pgc_queue_close(). */
PGC_EXTERN PGC_MUSTCHECK int pgc_queue_open(pgc_conn *conn, const pgc_queue_options *opts,
                                            pgc_queue **out, pgc_error *err);

/* Frees the handle (not the connection), before or after its connection was closed. Sends
 * nothing: what the handle prepared stays in the connection's cache for the other handles.
 * NULL is accepted. */
PGC_EXTERN void pgc_queue_close(pgc_queue *q);

/* What becomes of a job whose dependency (pgc_job_options.after) fails for good or is
 * cancelled. */
typedef enum pgc_dep_policy {
	PGC_DEP_CANCEL = 0, /* the dependent is cancelled, last_error "dependency N failed" (or
	                       "dependency N was cancelled"); its own dependents follow their policy */
	PGC_DEP_RUN = 1     /* the dependent runs all the same once no dependency is live */
} pgc_dep_policy;

/* Options for enqueued jobs. */
typedef struct pgc_job_options {
	int priority;           /* higher runs first; -32768..32767; default 0 */
	int64_t delay_ms;       /* run no earlier than now + delay (database clock); default 0 */
	const char *run_at;     /* or an absolute, finite timestamptz (ISO 8601 with an offset
	                           reads the same under every DateStyle; the server refuses
	                           infinity, SQLSTATE 23514); NULL: use delay_ms. Setting both is
	                           PGC_EUSAGE. */
	int max_attempts;       /* >= 1; 0 means the default (25) */
	const char *unique_key; /* NULL, or at most one pending-or-running job per key and queue */
	int max_deferrals;      /* "try later" answers (pgc_queue_defer) allowed before the next
	                           one fails the job for good; >= 1; 0 means the default (100) */
	const char *key;        /* NULL, or the job's concurrency key (1 to PGC_QUEUE_KEY_MAX
	                           bytes): the key's limit, rate and fair share apply to it
	                           (pgc_queue_flow_set, pgc_queue_key_set). The first keyed job
	                           makes its queue a flow queue, claimed by claim_flow() */
	const int64_t *after;   /* n_after ids of jobs that must succeed first (each must exist,
	                           live or in the history; at most PGC_QUEUE_AFTER_MAX): while one
	                           is live the job is "waiting", never claimed. A dependency that
	                           has already succeeded is satisfied at once; one that has failed
	                           or been cancelled applies on_dep_failure at once */
	size_t n_after;
	pgc_dep_policy on_dep_failure; /* default PGC_DEP_CANCEL */
	const char *group;      /* NULL, or an open group the job joins (pgc_queue_group_add) */
} pgc_job_options;

#define PGC_JOB_OPTIONS_INIT { 0, 0, NULL, 0, NULL, 0, NULL, NULL, 0, PGC_DEP_CANCEL, NULL }

/* The most dependencies one job may have. */
#define PGC_QUEUE_AFTER_MAX 1000

/* Enqueues one job on q's connection, inside the caller's transaction when one is open (the job
 * becomes visible only when it commits; the wake-up notification is sent at commit too).
 * payload is JSON text, validated by the server. opts may be NULL. *out_id (may be NULL) gets
 * the job's id.
 * Errors: PGC_EUSAGE (NULL or empty queue, queue over 128 bytes, negative delay, max_attempts
 * or max_deferrals < 0, priority out of range, run_at and delay both set, after NULL with
 * n_after > 0, an id < 1, more than PGC_QUEUE_AFTER_MAX, unknown policy, empty group),
 * PGC_EDUPLICATE (unique_key taken; *out_id is 0), PGC_ENOTFOUND (a job of after or the group
 * does not exist; the message names it), PGC_EFINISHED (the group is closed), PGC_ESQL
 * (invalid JSON: SQLSTATE 22P02; payload over the size limit: 22023; bad run_at),
 * PGC_ECONNLOST. Nothing is enqueued on error. A job enqueued after a dependency that already
 * failed, under PGC_DEP_CANCEL, is enqueued and cancelled at once: its id is returned and
 * pgc_queue_show() tells why. */
PGC_EXTERN PGC_MUSTCHECK int pgc_queue_enqueue(pgc_queue *q, const char *queue, const char *payload,
                                               const pgc_job_options *opts, int64_t *out_id,
                                               pgc_error *err);

/* Enqueues n jobs in one statement, all or nothing. payloads[i] is JSON text; unique_keys may be
 * NULL, or have n entries (each may be NULL). A job whose unique key is taken is skipped: its
 * ids[i] is 0. ids (may be NULL) receives n ids; *inserted (may be NULL) how many were
 * enqueued. On a bad payload *bad_index (may be NULL) gets its 0-based index, else -1.
 * Every job of the call has opts' dependencies and group (the ids of the call's own jobs do
 * not exist yet: a job of a batch cannot wait for another of the same batch).
 * Errors: as pgc_queue_enqueue, except that duplicates are not an error. */
PGC_EXTERN PGC_MUSTCHECK int pgc_queue_enqueue_many(pgc_queue *q, const char *queue, size_t n,
                                                    const char *const *payloads,
                                                    const char *const *unique_keys,
                                                    const pgc_job_options *opts, int64_t *ids,
                                                    size_t *inserted, long *bad_index,
                                                    pgc_error *err);

/* A claimed job. Strings are owned by the array returned by pgc_queue_claim. */
typedef struct pgc_job {
	int64_t id;
	int64_t token;      /* the claim token: pass it back to complete/fail/retry/heartbeat */
	const char *queue;
	const char *payload; /* JSON text */
	int attempt;         /* 1 for the first run */
	int max_attempts;
	int priority;
	void *internal;      /* used by pgc_worker; NULL otherwise */
	const char *key;     /* its concurrency key, or NULL */
} pgc_job;

/* Claims up to max jobs of queue (highest effective priority first, then run_at, then id),
 * after promoting its scheduled jobs that are due to pending,
 * with FOR UPDATE SKIP LOCKED in one statement, in its own implicit transaction or the
 * caller's. Each gets a fresh token and a lease of lease_ms on the database clock. A paused
 * queue gives nothing. worker_id (may be NULL) is recorded for inspection.
 * On success *jobs is an array of *n jobs, freed with pgc_queue_jobs_free().
 * Errors: PGC_EUSAGE, PGC_EEMPTY (nothing runnable: *n is 0, *jobs NULL), PGC_ESQL,
 * PGC_ECONNLOST. */
PGC_EXTERN PGC_MUSTCHECK int pgc_queue_claim(pgc_queue *q, const char *queue, int max,
                                             int64_t lease_ms, const char *worker_id,
                                             pgc_job **jobs, size_t *n, pgc_error *err);

/* Frees an array from pgc_queue_claim. NULL is accepted. */
PGC_EXTERN void pgc_queue_jobs_free(pgc_job *jobs, size_t n);

/* Marks a running job succeeded: it leaves the live table (kept in job_history while
 * succeeded_retention is not zero). Errors: PGC_EUSAGE, PGC_ESTALE (the token is not current:
 * nothing changed), PGC_ESQL, PGC_ECONNLOST. */
PGC_EXTERN PGC_MUSTCHECK int pgc_queue_complete(pgc_queue *q, int64_t id, int64_t token,
                                                pgc_error *err);

/* The largest result a job may keep (pgc_queue_complete_result, pgc_job_result.result_json):
 * 65536 bytes of JSON text as the server prints it (jsonb). */
#define PGC_JOB_RESULT_MAX 65536

/* pgc_queue_complete() with a result: result_json (JSON text, NULL: none) is kept with the job
 * in job_history, where pgc_queue_job_result() and pgc_queue_result_wait() read it, and the
 * completion wakes whoever waits for it (the channel pgc_queue_channel() followed by
 * ".result", payload the id). Errors: PGC_EUSAGE (result_json is not JSON, or bigger than
 * PGC_JOB_RESULT_MAX: nothing changed), PGC_ESTALE, PGC_ESQL, PGC_ECONNLOST. */
PGC_EXTERN PGC_MUSTCHECK int pgc_queue_complete_result(pgc_queue *q, int64_t id, int64_t token,
                                                       const char *result_json, pgc_error *err);

/* A job's status and result: *status (a static string: "waiting", "scheduled", "pending",
 * "running", "succeeded", "failed" or "cancelled") and *result_json (JSON text to free(), or
 * NULL: none, always for a job that has not succeeded). A succeeded job without a result is in
 * the history only while succeeded_retention keeps it. Errors: PGC_EUSAGE, PGC_ENOTFOUND (no
 * job has the id, or it left the history), PGC_ESQL, PGC_ECONNLOST. */
PGC_EXTERN PGC_MUSTCHECK int pgc_queue_job_result(pgc_queue *q, int64_t id, const char **status,
                                                  char **result_json, pgc_error *err);

/* Waits up to timeout_ms (0: look once) for job id to finish, then gives its status and result
 * as pgc_queue_job_result() does. LISTENs on q's session for the call's length (it must not be
 * in a transaction; notifications of other channels that arrive meanwhile are consumed) and is
 * woken by the job's completion with a result; it also looks every second, so that a job that
 * ends without a result (failed, cancelled) is seen too. On PGC_ETIMEDOUT *status is the job's
 * live status. Not thread-safe with other calls on q's session.
 * Errors: PGC_EUSAGE (NULL arguments, negative timeout, in a transaction), PGC_ENOTFOUND,
 * PGC_ETIMEDOUT, PGC_ESQL, PGC_ECONNLOST. */
PGC_EXTERN PGC_MUSTCHECK int pgc_queue_result_wait(pgc_queue *q, int64_t id, int64_t timeout_ms,
                                                   const char **status, char **result_json,
                                                   pgc_error *err);

/* Completes n jobs in one statement. stale (may be NULL) gets n flags: true for a job whose
 * token was not current (nothing changed for it). *done (may be NULL) counts the completed.
 * Outside a transaction of the caller's, a completion (or pgc_queue_fail) that the server
 * aborted to break a deadlock with concurrent enqueues of dependents is run again, up to 5
 * times; inside one, the deadlock (ESQL, 40P01) is the caller's to retry.
 * Errors: PGC_EUSAGE, PGC_ESQL, PGC_ECONNLOST (then nothing is known to be completed). */
PGC_EXTERN PGC_MUSTCHECK int pgc_queue_complete_many(pgc_queue *q, size_t n, const int64_t *ids,
                                                     const int64_t *tokens, bool *stale,
                                                     size_t *done, pgc_error *err);

/* Backoff after a failure: delay = min(base_ms * 2^(attempt-1), max_ms), then full jitter in
 * [delay/2, delay], computed by the server. */
typedef struct pgc_backoff {
	int64_t base_ms; /* default 1000 */
	int64_t max_ms;  /* default 3600000 */
} pgc_backoff;

#define PGC_BACKOFF_INIT { 1000, 3600000 }

/* Records a failed attempt with error text (may be NULL). When attempts remain the job returns
 * to pending after the backoff (backoff may be NULL for the default); otherwise it moves to
 * job_history as failed (the dead letter) with its last error and error history. *dead (may be
 * NULL) says which. Errors: PGC_EUSAGE, PGC_ESTALE, PGC_ESQL, PGC_ECONNLOST. */
PGC_EXTERN PGC_MUSTCHECK int pgc_queue_fail(pgc_queue *q, int64_t id, int64_t token,
                                            const char *error_text, const pgc_backoff *backoff,
                                            bool *dead, pgc_error *err);

/* Defers a running job: it returns to pending to run again after delay_ms, without counting
 * the attempt (a snooze, e.g. a rate limit), and its deferral count goes up by one. A job
 * already deferred max_deferrals times (pgc_job_options) is not deferred again: the request
 * counts as a failed attempt that ends it, and it moves to job_history as failed with the
 * reason in last_error, so that a handler that always says "not now" cannot keep a job for
 * ever. *dead (may be NULL) says which happened.
 * Errors: PGC_EUSAGE, PGC_ESTALE, PGC_ESQL, PGC_ECONNLOST. */
PGC_EXTERN PGC_MUSTCHECK int pgc_queue_defer(pgc_queue *q, int64_t id, int64_t token,
                                             int64_t delay_ms, bool *dead, pgc_error *err);

/* pgc_queue_defer() without *dead. */
PGC_EXTERN PGC_MUSTCHECK int pgc_queue_retry_later(pgc_queue *q, int64_t id, int64_t token,
                                                   int64_t delay_ms, pgc_error *err);

/* Extends the leases of n running jobs to now + lease_ms, in one statement. lost (may be NULL)
 * gets n flags: true for a job whose token is no longer current (cancelled or lost). Errors: PGC_EUSAGE, PGC_ESQL,
 * PGC_ECONNLOST. */
PGC_EXTERN PGC_MUSTCHECK int pgc_queue_heartbeat(pgc_queue *q, size_t n, const int64_t *ids,
                                                 const int64_t *tokens, int64_t lease_ms,
                                                 bool *lost, pgc_error *err);

/* Returns n running jobs to pending at once (a worker shutting down). A release is not an
 * attempt: the attempt the claim counted is given back, so a job released at every stop still
 * gets its max_attempts runs (a lease that expired, a worker that crashed, still counts: the
 * reaper cannot tell whether the job ran). started says that the handlers had begun: then
 * last_error notes the release. Stale tokens are ignored.
 * Errors: PGC_EUSAGE, PGC_ESQL, PGC_ECONNLOST. */
PGC_EXTERN PGC_MUSTCHECK int pgc_queue_release(pgc_queue *q, size_t n, const int64_t *ids,
                                               const int64_t *tokens, bool started,
                                               pgc_error *err);

/* What one reaper pass did. */
typedef struct pgc_reap_result {
	long returned; /* expired leases returned to pending */
	long dead;     /* expired leases with no attempts left, moved to failed */
	long aged;     /* pending jobs raised ahead of newer work after waiting `aging` */
	long purged;   /* history rows past their retention, deleted */
} pgc_reap_result;

/* One reaper pass in its own transaction, under pg_try_advisory_xact_lock(
 * PGC_QUEUE_REAPER_LOCK_KEY): returns expired leases (checking that each job is still running
 * under the token that expired, so a job that finished is never touched), ages waiting jobs,
 * trims the history. Must be called outside a transaction. out may be NULL.
 * Errors: PGC_EUSAGE, PGC_EBUSY (another reaper is running: nothing done), PGC_ESQL,
 * PGC_ECONNLOST. */
PGC_EXTERN PGC_MUSTCHECK int pgc_queue_reap(pgc_queue *q, pgc_reap_result *out, pgc_error *err);

/* Vacuums the jobs table when the statistics show at least min_dead dead tuples in it, so that
 * a busy queue does not wait for autovacuum's next round (autovacuum_naptime, a minute by
 * default) while its claim index fills with dead entries. One vacuum at a time, under
 * PGC_QUEUE_VACUUM_LOCK_KEY, a session lock: so it runs only where the session is kept. It asks
 * pgc_conn_pooler() first (one round trip on a direct session; the answer is kept until a
 * reconnect) and refuses a transaction-mode or statement-mode pooler, or one whose kind cannot
 * be told, where the unlock could run on another server session than the lock and leave it
 * held there for good. Must be called outside a transaction. *vacuumed (may be NULL) says
 * whether it ran. Errors: PGC_EUSAGE, PGC_EPOOLER (such a pooler is in between: nothing
 * done), PGC_EBUSY (another session is vacuuming it), PGC_ESQL, PGC_ECONNLOST. */
PGC_EXTERN PGC_MUSTCHECK int pgc_queue_vacuum(pgc_queue *q, long min_dead, bool *vacuumed,
                                              pgc_error *err);

/* Pauses (paused = true) or resumes a queue: a paused queue's jobs are not claimed. Resuming
 * wakes the workers. The queue is created when missing. Errors: PGC_EUSAGE, PGC_ESQL,
 * PGC_ECONNLOST. */
PGC_EXTERN PGC_MUSTCHECK int pgc_queue_pause(pgc_queue *q, const char *queue, bool paused,
                                             pgc_error *err);

/* Cancels a live job: it moves to job_history as cancelled, whatever happens to it afterwards.
 * A pending or scheduled job simply never runs. A running job is cancelled too: its claim
 * token stops being current, so whatever its handler returns later changes nothing (a
 * completion, failure or deferral is stale), and the workers serving its queue are notified
 * on their own channels (at commit): the one holding it renews its leases at once, sees the job
 * cancelled, and tells its handler (pgc_job_cancelled(); pgcoord worker stops the command's
 * process group: SIGTERM, SIGKILL after --grace). A worker that missed the notification
 * (reconnecting, polling behind a pooler) finds out at its next lease renewal, within a third
 * of the lease. The job's unique key is free from the cancel on, although its handler may still
 * be stopping. A cancel racing the job's completion has one outcome: the job is cancelled (the
 * completion is stale), or it finished first and the cancel fails with PGC_EFINISHED.
 * Errors: PGC_EUSAGE, PGC_EFINISHED (the job is in the history already: succeeded, failed or
 * cancelled; the message says which), PGC_ENOTFOUND (no such job, live or in the history),
 * PGC_ESQL, PGC_ECONNLOST. */
PGC_EXTERN PGC_MUSTCHECK int pgc_queue_cancel(pgc_queue *q, int64_t id, pgc_error *err);

/* pgc_queue_cancel(), also saying whether the job was running when it was cancelled
 * (*was_running, may be NULL; false on error). */
PGC_EXTERN PGC_MUSTCHECK int pgc_queue_cancel_job(pgc_queue *q, int64_t id, bool *was_running,
                                                  pgc_error *err);

/* Runs a failed or cancelled job again: it returns from job_history to pending with its
 * attempts reset. Errors: PGC_EUSAGE, PGC_ENOTFOUND (no failed or cancelled job with this id),
 * PGC_EDUPLICATE (its unique key is taken again), PGC_ESQL, PGC_ECONNLOST. */
PGC_EXTERN PGC_MUSTCHECK int pgc_queue_retry(pgc_queue *q, int64_t id, pgc_error *err);

/* Deletes finished jobs from job_history that finished more than older_than_ms ago. queue may
 * be NULL (all queues); status NULL means succeeded, failed and cancelled, else one of them.
 * *purged (may be NULL) counts them. The rows go in batches of 1000, as pgc_queue_bulk_run()
 * does (outside a transaction each batch commits on its own).
 * Errors: PGC_EUSAGE, PGC_ESQL, PGC_ECONNLOST (the batches before it stay done). */
PGC_EXTERN PGC_MUSTCHECK int pgc_queue_purge(pgc_queue *q, const char *queue, const char *status,
                                             int64_t older_than_ms, long *purged, pgc_error *err);

/* ---- bulk operations: many jobs, in short batches ---- */

typedef enum pgc_queue_bulk_op {
	PGC_BULK_CANCEL = 0, /* pending and scheduled jobs move to job_history as cancelled; a running
	                        job is never cancelled (it is not matched) */
	PGC_BULK_RETRY = 1,  /* failed (dead-lettered) or cancelled jobs return to pending, attempts
	                        and deferrals reset, as pgc_queue_retry() does; one whose unique key
	                        a live job holds now stays where it is (counted as skipped) */
	PGC_BULK_PURGE = 2   /* finished jobs are deleted from job_history */
} pgc_queue_bulk_op;

/* Which jobs a bulk operation touches: all of the given filters must match. */
typedef struct pgc_queue_bulk {
	pgc_queue_bulk_op op;
	const char *queue;      /* the queue; required for cancel and retry, NULL for purge means
	                           every queue */
	const char *status;     /* cancel: "pending" or "scheduled" (NULL: both); retry: "failed" or
	                           "cancelled" (NULL: failed); purge: "succeeded", "failed" or
	                           "cancelled" (NULL: all three) */
	int64_t older_than_ms;  /* only jobs created (cancel) or finished (retry, purge) more than
	                           this long ago on the database clock; 0: any age */
	const char *key_prefix; /* only jobs whose unique key starts with these characters, compared
	                           as they are (no wildcards: "_" and "%" are themselves); NULL: any
	                           job, with a key or not */
	int batch_size;         /* jobs per transaction, 1..10000; 0: 1000 */
	int64_t upto_id;        /* only jobs with an id up to this one; 0: no bound.
	                           pgc_queue_bulk_count() sets it, so that the run after it touches
	                           the jobs that were counted and none enqueued since */
	void (*progress)(long done, void *arg); /* may be NULL: called after every batch with the
	                                           running total */
	void *progress_arg;
} pgc_queue_bulk;

#define PGC_QUEUE_BULK_INIT { PGC_BULK_CANCEL, NULL, NULL, 0, NULL, 0, 0, NULL, NULL }

typedef struct pgc_queue_bulk_result {
	long done;    /* jobs cancelled, retried or purged */
	long skipped; /* retry: jobs left in the history because their unique key is taken */
	long batches; /* transactions it took */
} pgc_queue_bulk_result;

/* Counts the jobs b matches now into *count, and sets b->upto_id to the highest of their ids
 * (0 when none matches). Changes nothing else.
 * Errors: PGC_EUSAGE (see pgc_queue_bulk_run), PGC_ENOTFOUND (b->queue names no queue),
 * PGC_ESQL, PGC_ECONNLOST. */
PGC_EXTERN PGC_MUSTCHECK int pgc_queue_bulk_count(pgc_queue *q, pgc_queue_bulk *b, long *count,
                                                  pgc_error *err);

/* Runs a bulk operation in batches of b->batch_size jobs taken in id order, each batch one
 * statement: outside a transaction each commits on its own, so a million jobs never hold the
 * table or many row locks for long; inside the caller's transaction they all belong to it.
 * A batch locks its jobs with FOR UPDATE, in id order: it waits the few milliseconds a claim
 * that took one of them needs, and a job that became running meanwhile is not matched any
 * more. Workers are never blocked by it (their claims skip locked rows). The arguments are all
 * checked before the first batch runs: on PGC_EUSAGE nothing was done. *out (may be NULL) says
 * what was done, also on an error in a later batch (the batches before it stay done).
 * Errors: PGC_EUSAGE (q or b NULL, unknown op, queue missing for cancel or retry or not a valid
 * name, a status that does not fit the op, older_than_ms or upto_id negative, key_prefix
 * empty, batch_size out of range), PGC_ESQL, PGC_ECONNLOST. */
PGC_EXTERN PGC_MUSTCHECK int pgc_queue_bulk_run(pgc_queue *q, const pgc_queue_bulk *b,
                                                pgc_queue_bulk_result *out, pgc_error *err);

/* The queue settings. */
typedef struct pgc_queue_config {
	int64_t aging_ms;               /* a pending job that waited this long goes first; 300000 */
	int64_t succeeded_retention_ms; /* 0 keeps no history of succeeded jobs; 1 day */
	int64_t failed_retention_ms;    /* failed and cancelled jobs; 7 days */
	int max_payload_bytes;          /* 1048576 */
} pgc_queue_config;

/* Reads the settings. Errors: PGC_EUSAGE, PGC_ESQL, PGC_ECONNLOST. */
PGC_EXTERN PGC_MUSTCHECK int pgc_queue_config_get(pgc_queue *q, pgc_queue_config *out,
                                                  pgc_error *err);

/* Sets the settings whose fields are >= 0 in cfg (-1 leaves one unchanged).
 * Errors: PGC_EUSAGE (aging 0, payload limit 0), PGC_ESQL, PGC_ECONNLOST. */
PGC_EXTERN PGC_MUSTCHECK int pgc_queue_config_set(pgc_queue *q, const pgc_queue_config *cfg,
                                                  pgc_error *err);

/* Per-queue figures. */
typedef struct pgc_queue_stat {
	char queue[PGC_QUEUE_NAME_MAX + 1];
	bool paused;
	long pending;           /* runnable now */
	long scheduled;         /* waiting for their run_at */
	long running;
	long succeeded;         /* in the retained history */
	long failed;
	long cancelled;
	double oldest_pending_s; /* age of the oldest runnable job, seconds; 0 when none */
	long completed_1m;      /* succeeded in the last minute (needs succeeded_retention > 0) */
	long failed_1m;         /* failed in the last minute */
	long waiting;           /* waiting for their dependencies (pgc_job_options.after) */
} pgc_queue_stat;

/* Vacuum health of the queue tables, and what holds the xmin horizon back. */
typedef struct pgc_queue_health {
	long jobs_live_tuples, jobs_dead_tuples;
	long history_live_tuples, history_dead_tuples;
	char jobs_last_autovacuum[40];    /* timestamptz text, "" when never */
	char history_last_autovacuum[40];
	int horizon_pid;                  /* the backend with the oldest xmin, 0 when none */
	long horizon_xmin_age;            /* its age(backend_xmin) in transactions */
	double horizon_xact_age_s;        /* how long its transaction has been open */
	char horizon_application[64];
	char horizon_state[32];
	char horizon_slot[64];            /* a replication slot holding the horizon, or "" */
	long horizon_slot_xmin_age;
} pgc_queue_health;

/* Counts per queue (queue NULL: every queue, ordered by name) and, when health is non-NULL,
 * the tables' vacuum health. *stats is an array of *n entries, free with pgc_free.
 * Errors: PGC_EUSAGE, PGC_ENOTFOUND (queue given and unknown), PGC_ESQL, PGC_ECONNLOST. */
PGC_EXTERN PGC_MUSTCHECK int pgc_queue_stats(pgc_queue *q, const char *queue,
                                             pgc_queue_stat **stats, size_t *n,
                                             pgc_queue_health *health, pgc_error *err);

/* A job as inspected (live or finished). Strings point into the same allocation; NULL when the
 * column is NULL. */
typedef struct pgc_job_info {
	int64_t id;
	const char *queue;
	const char *status; /* waiting (for dependencies), scheduled (run_at in the future), pending,
	                       running, succeeded, failed, cancelled */
	int priority;
	bool aged;          /* raised ahead by the aging rule */
	int attempts;
	int max_attempts;
	const char *run_at, *created_at, *started_at, *finished_at, *lease_until; /* ISO 8601 */
	const char *worker;
	const char *last_error;
	const char *errors;  /* JSON array of {attempt, error} (the last 5), or NULL */
	const char *unique_key;
	const char *payload; /* JSON */
	int deferrals;       /* "try later" answers so far (pgc_queue_defer) */
	int max_deferrals;   /* the most it may have; the next one fails it */
	const char *key;     /* its concurrency key, or NULL */
	const char *held;    /* why a pending job is not running although due: "its key K is at
	                        its limit 2", "its key K is rate-limited until T", "queue Q is
	                        rate-limited until T", "queue Q is paused"; for a waiting job
	                        "waiting for job N" (its lowest live dependency) and ", and M more";
	                        NULL otherwise */
	/* The last attempt's end, for the run log (migration 015): the exit status of the
	 * command a worker ran (-1: none or not a command), the end of its standard error (at
	 * most PGC_JOB_OUTPUT_MAX - 1 bytes, or NULL), and how long it took in ms (finished:
	 * started_at to finished_at; running: so far; -1 otherwise). */
	int exit_status;
	const char *output;
	int64_t duration_ms;
} pgc_job_info;

/* One job by id (live first, then history). *out is freed with pgc_free.
 * Errors: PGC_EUSAGE, PGC_ENOTFOUND, PGC_ESQL, PGC_ECONNLOST. */
PGC_EXTERN PGC_MUSTCHECK int pgc_queue_show(pgc_queue *q, int64_t id, pgc_job_info **out,
                                            pgc_error *err);

/* Lists up to limit jobs of queue (NULL: all) with status (NULL: all), newest id first.
 * *out is an array of *n, freed with pgc_queue_infos_free.
 * Errors: PGC_EUSAGE (unknown status, limit < 1), PGC_ESQL, PGC_ECONNLOST. */
PGC_EXTERN PGC_MUSTCHECK int pgc_queue_list(pgc_queue *q, const char *queue, const char *status,
                                            long limit, pgc_job_info ***out, size_t *n,
                                            pgc_error *err);
PGC_EXTERN void pgc_queue_infos_free(pgc_job_info **infos, size_t n);

/* ---- job groups ----------------------------------------------------------------------------- */

/* A group collects jobs (pgc_job_options.group, from any queue). Once it is closed and each
 * member has ended, one job is enqueued into its on-complete queue, exactly once, its payload
 * the group's payload with a member "group": {"name", "succeeded", "failed", "cancelled"}.
 * Each member is counted once, in the transaction of its final transition (a job the reaper
 * fails out of attempts is counted then; a member retried from the history is not counted
 * again). The SQL functions group_add(), group_close() and group_remove() do the same for
 * other languages, and enqueue()'s p_group adds members. */
typedef struct pgc_job_group {
	char name[PGC_QUEUE_GROUP_MAX + 1];
	char on_complete_queue[PGC_QUEUE_NAME_MAX + 1];
	const char *payload;      /* JSON object; in the same allocation */
	long members;             /* jobs added */
	long succeeded, failed, cancelled; /* members that ended so */
	bool sealed;              /* closed: takes no more members */
	bool done;                /* its on-complete job was enqueued */
	int64_t on_complete_job;  /* that job's id, 0 before */
	char created_at[40], closed_at[40], done_at[40]; /* ISO 8601, "" when not yet */
} pgc_job_group;

/* Creates an open group named name whose on-complete job goes to on_complete_queue with
 * payload (a JSON object; NULL: {}).
 * Errors: PGC_EUSAGE (NULL or empty names, names too long), PGC_EDUPLICATE (the name is
 * taken), PGC_ESQL (payload not JSON: 22P02; not an object: 22023), PGC_ECONNLOST. */
PGC_EXTERN PGC_MUSTCHECK int pgc_queue_group_add(pgc_queue *q, const char *name,
                                                 const char *on_complete_queue,
                                                 const char *payload, pgc_error *err);

/* Closes (seals) group name: it takes no more members. When each member has ended already,
 * its on-complete job is enqueued now, in the same transaction. *on_complete_id (may be NULL)
 * gets that job's id, or 0 while members are still to end. Closing a closed group is not an
 * error. Errors: PGC_EUSAGE, PGC_ENOTFOUND, PGC_ESQL, PGC_ECONNLOST. */
PGC_EXTERN PGC_MUSTCHECK int pgc_queue_group_close(pgc_queue *q, const char *name,
                                                   int64_t *on_complete_id, pgc_error *err);

/* Removes group name: one that is done, or open with every member ended (or none). A closed
 * group whose members have not all ended, or an open one with members still live, is
 * refused with PGC_EBUSY: its on-complete job is still to come.
 * Errors: PGC_EUSAGE, PGC_ENOTFOUND, PGC_EBUSY, PGC_ESQL, PGC_ECONNLOST. */
PGC_EXTERN PGC_MUSTCHECK int pgc_queue_group_remove(pgc_queue *q, const char *name, pgc_error *err);

/* Group name in *out (one allocation, pgc_free).
 * Errors: PGC_EUSAGE, PGC_ENOTFOUND, PGC_ESQL, PGC_ECONNLOST, PGC_ENOMEM. */
PGC_EXTERN PGC_MUSTCHECK int pgc_queue_group_show(pgc_queue *q, const char *name,
                                                  pgc_job_group **out, pgc_error *err);

/* Every group, by name, as an array of *n in one allocation (pgc_free).
 * Errors: PGC_EUSAGE, PGC_ESQL, PGC_ECONNLOST, PGC_ENOMEM. */
PGC_EXTERN PGC_MUSTCHECK int pgc_queue_group_list(pgc_queue *q, pgc_job_group **out, size_t *n,
                                                  pgc_error *err);

/* ---- flow control: concurrency keys, rate limits, fair shares ---------------------------- */

/* A job may carry a concurrency key (pgc_job_options.key). A queue with keyed jobs or flow
 * settings is a flow queue; its claims (pgc_queue_claim, the worker) go through the SQL
 * function claim_flow(), which in one transaction takes, for each key with room, the head
 * pending jobs of that key, so a saturated key costs a claim nothing however long its backlog:
 *  - a key runs at most its limit of jobs at once (its own, else the queue's key_limit), across
 *    every worker and host; the database counts them (see docs/INTERNALS.md) and a guard
 *    trigger refuses any claim past the limit;
 *  - a rate (the queue's for all its jobs, a key's for its own) spaces starts evenly, at most
 *    n per per_ms on the database clock with a tolerance of 5% of per_ms for bursts; a claim
 *    that finds a rate used up takes other keys' jobs, and the worker sleeps until the next
 *    start it allows (as for a scheduled run_at);
 *  - without fair shares, claims take the jobs of highest effective priority first among the
 *    heads of the keys with room (as the plain claim does), looking at no more than twice as
 *    many keys as jobs asked for (at least 16), the least served first, so that a claim costs
 *    the same however many keys there are; with them, the keys take turns in order of a
 *    virtual time that each claimed job advances by 1/weight, and priority (with aging)
 *    orders only the jobs of one key, and breaks ties between keys. Unkeyed jobs of a fair
 *    queue share one turn, as one more key of weight 1. */

/* A queue's flow settings. In pgc_queue_flow_set a field of -1 (a rate's n of -1) leaves the
 * setting as it is; 0 clears it. */
typedef struct pgc_queue_flow {
	int key_limit;     /* jobs running at once per key, unless the key has its own; 0: none */
	pgc_rate rate;     /* starts of the queue's jobs, keyed or not; n 0: none */
	pgc_rate key_rate; /* starts per key, unless the key has its own; n 0: none */
	int fair;          /* 1: keys take turns (fair shares), 0: by priority */
	bool flow;         /* get only: the queue is a flow queue */
	int64_t rate_wait_ms; /* get only: > 0 when the queue's rate allows its next start this
	                         far from now */
} pgc_queue_flow;

#define PGC_QUEUE_FLOW_UNCHANGED { -1, { -1, 0 }, { -1, 0 }, -1, false, 0 }

/* Reads queue's flow settings. Errors: PGC_EUSAGE, PGC_ENOTFOUND (no such queue), PGC_ESQL,
 * PGC_ECONNLOST. */
PGC_EXTERN PGC_MUSTCHECK int pgc_queue_flow_get(pgc_queue *q, const char *queue,
                                                pgc_queue_flow *out, pgc_error *err);

/* Changes queue's flow settings (the queue is created when unknown) and makes it a flow
 * queue. A new key_limit applies at once to the keys without one of their own: a key already
 * over it runs no new job until it is under. Wakes the workers of the queue.
 * Errors: PGC_EUSAGE (a field below -1, a rate with n > 0 and per_ms < 1, n over
 * PGC_RATE_MAX_N), PGC_ESQL, PGC_ECONNLOST. */
PGC_EXTERN PGC_MUSTCHECK int pgc_queue_flow_set(pgc_queue *q, const char *queue,
                                                const pgc_queue_flow *set, pgc_error *err);

/* One key's own settings. In pgc_queue_key_set a field of -1 (a rate's n of -1) leaves it as
 * it is; 0 clears it (the queue's setting applies again). */
typedef struct pgc_queue_key_settings {
	int limit;     /* jobs of the key running at once; 0: the queue's key_limit */
	int weight;    /* its share under fair shares, 1..10000; 0: 1 */
	pgc_rate rate; /* its starts; n 0: the queue's key_rate */
} pgc_queue_key_settings;

#define PGC_QUEUE_KEY_UNCHANGED { -1, -1, { -1, 0 } }
#define PGC_QUEUE_WEIGHT_MAX 10000

/* Sets key's own settings in queue (both are created when unknown; the queue becomes a flow
 * queue). Takes effect at the next claim. Errors: PGC_EUSAGE (key NULL, empty or over
 * PGC_QUEUE_KEY_MAX bytes, a field below -1, weight over PGC_QUEUE_WEIGHT_MAX, a bad rate),
 * PGC_ESQL, PGC_ECONNLOST. */
PGC_EXTERN PGC_MUSTCHECK int pgc_queue_key_set(pgc_queue *q, const char *queue, const char *key,
                                               const pgc_queue_key_settings *set, pgc_error *err);

/* Removes key's own settings: the queue's apply again (the key's row goes once it has no live
 * job). Errors: PGC_EUSAGE, PGC_ENOTFOUND (the key has no settings or jobs in queue), PGC_ESQL,
 * PGC_ECONNLOST. */
PGC_EXTERN PGC_MUSTCHECK int pgc_queue_key_reset(pgc_queue *q, const char *queue, const char *key,
                                                 pgc_error *err);

/* A key as the database sees it now. */
typedef struct pgc_queue_key_info {
	char queue[PGC_QUEUE_NAME_MAX + 1];
	char key[PGC_QUEUE_KEY_MAX + 1];
	pgc_queue_key_settings own; /* its own settings (0: none) */
	int limit;                  /* the limit in force; 0: none */
	pgc_rate rate;              /* the rate in force; n 0: none */
	long running;               /* its jobs running now */
	long pending;               /* runnable now (pending) */
	long scheduled;             /* waiting for their run_at */
	double oldest_pending_s;    /* how long its oldest pending job has waited; 0: none */
	bool at_limit;              /* running >= limit: its pending jobs are held back */
	int64_t rate_wait_ms;       /* > 0: its rate allows the next start this far from now */
	char next_start_at[40];     /* that time (ISO 8601), or "" */
} pgc_queue_key_info;

/* The keys of queue that have settings of their own or live jobs, ordered by key; key (may
 * be NULL) picks one. *out is an array of *n, freed with pgc_free.
 * Errors: PGC_EUSAGE, PGC_ENOTFOUND (key given and unknown in queue), PGC_ESQL,
 * PGC_ECONNLOST. */
PGC_EXTERN PGC_MUSTCHECK int pgc_queue_keys(pgc_queue *q, const char *queue, const char *key,
                                            pgc_queue_key_info **out, size_t *n, pgc_error *err);

/* The notification channel of q's schema (owned by q). */
PGC_EXTERN const char *pgc_queue_channel(const pgc_queue *q);

/* ---- browsing: bounded reads for dashboards (queue_browse.c) ---- */

/* pgc_queue_stats() with every count stopped at cap (1..100000000): a count equal to cap means
 * "at least cap". Each count then reads at most cap index entries, so a page that polls it
 * stays fast however long the history is. completed_1m and failed_1m are exact up to cap;
 * past it they are estimated from the time the newest cap of them took (cap jobs in 6 s: 10
 * times cap a minute), so they may exceed cap. oldest_pending_s is read from indexes as in
 * pgc_queue_stats(). Its plan is many small index scans whose summed estimate passes
 * jit_above_cost: on a session with jit on, compiling it costs more than running it
 * (pgcoord web sets jit = off). *stats (free with pgc_free) and *n as there; no table health.
 * Errors: PGC_EUSAGE (also cap out of range), PGC_ENOTFOUND, PGC_ESQL, PGC_ECONNLOST. */
PGC_EXTERN PGC_MUSTCHECK int pgc_queue_stats_capped(pgc_queue *q, const char *queue, long cap,
                                                    pgc_queue_stat **stats, size_t *n,
                                                    pgc_error *err);

/* Which jobs pgc_queue_browse() returns: all of the given filters must match. */
typedef struct pgc_queue_browse_filter {
	const char *queue;      /* NULL: every queue */
	const char *status;     /* one of the statuses of pgc_job_info, or NULL: all */
	const char *key_prefix; /* unique keys starting with these characters, compared as they are
	                           (no wildcards); NULL: any job */
	const char *text;       /* only jobs whose payload (as JSON text) or last error contains
	                           this text, compared as it is (case-sensitive, no wildcards);
	                           NULL: any */
	int64_t before_id;      /* keyset cursor: only ids below it (0: from the newest) */
	long limit;             /* jobs per page, 1..1000; 0: 50 */
	long max_scan;          /* the most jobs one call examines, 1..1000000; 0: 10000 */
	bool text_in_errors_only; /* text is looked for in last_error only, not in payloads (a
	                             dashboard that hides payloads must not let a search tell what
	                             they hold) */
	const char *job_key;    /* only jobs with this concurrency key (exact, 1 to
	                           PGC_QUEUE_KEY_MAX bytes); NULL: any job */
} pgc_queue_browse_filter;

#define PGC_QUEUE_BROWSE_FILTER_INIT { NULL, NULL, NULL, NULL, 0, 0, 0, false, NULL }

/* One page of jobs matching f, live and finished together, newest id first, by keyset on the
 * id (never OFFSET): a call examines at most f->max_scan jobs below f->before_id, so a filter
 * that matches few jobs of a long history is bounded too. *next_before (may be NULL) is the
 * cursor of the next page: pass it as before_id; 0 when every job below the cursor was
 * examined. A page may hold fewer than limit jobs (none at all) and still have a next one,
 * when the scan bound was reached first: paging on until *next_before is 0 sees every job
 * that stays put exactly once. *out is an array of *n, freed with pgc_queue_infos_free.
 * Errors: PGC_EUSAGE (NULL arguments, a bad queue name, an unknown status, empty key_prefix
 * or text, job_key empty or longer than PGC_QUEUE_KEY_MAX, negative before_id, limit or
 * max_scan out of range), PGC_ESQL, PGC_ECONNLOST. */
PGC_EXTERN PGC_MUSTCHECK int pgc_queue_browse(pgc_queue *q, const pgc_queue_browse_filter *f,
                                              pgc_job_info ***out, size_t *n,
                                              int64_t *next_before, pgc_error *err);

/* Why a job is not running, as far as the queue can tell. */
typedef struct pgc_job_wait {
	bool live;          /* the job is in the live table (scheduled, pending or running) */
	bool running;
	bool scheduled;     /* its run_at is in the future */
	double run_in_s;    /* scheduled: seconds until its run_at */
	bool paused;        /* its queue is paused */
	long ahead;         /* pending jobs a claim takes first (at most 10000): of its queue's
	                       unkeyed jobs, or of its key's jobs for a keyed job */
	long workers;       /* workers registered for its queue, seen in the last 10 s (only those
	                       that LISTEN register: pollers behind a pooler do not) */
	long free_slots;    /* their free handler threads */
	char reason[256];   /* one line: "" when running or finished */
} pgc_job_wait;

/* Fills *out for job id. A finished job (history) has live false and no reason.
 * Errors: PGC_EUSAGE, PGC_ENOTFOUND (no live job and no history row with this id), PGC_ESQL,
 * PGC_ECONNLOST. */
PGC_EXTERN PGC_MUSTCHECK int pgc_queue_job_wait(pgc_queue *q, int64_t id, pgc_job_wait *out,
                                                pgc_error *err);

/* A worker registered in the workers table (listening workers, for targeted wake-ups). */
typedef struct pgc_queue_worker {
	char channel[64];   /* its own notification channel */
	char queues[512];   /* the queues it serves, as a PostgreSQL array literal ({a,b}) */
	int free;           /* free handler threads when it last registered */
	double seen_s;      /* seconds since it last registered */
} pgc_queue_worker;

/* The registered workers, most recently seen first (at most 1000). *out (free with pgc_free)
 * and *n. Errors: PGC_EUSAGE, PGC_ENOMEM, PGC_ESQL, PGC_ECONNLOST. */
PGC_EXTERN PGC_MUSTCHECK int pgc_queue_workers(pgc_queue *q, pgc_queue_worker **out, size_t *n,
                                               pgc_error *err);

/* ---- pgc_worker: handlers on K threads ------------------------------------------------- */

/* A pgc_worker owns one connection and one dispatcher thread that claims jobs in batches for
 * its K handler threads and sends their completions (many per statement) together with the
 * next claim and the lease renewals in one pipelined round trip; the threads never touch the
 * connection. One connection's statements use one server core: to use more, run more workers
 * (the benchmark's "2 workers" rows; `pgcoord worker --connections N`). Each listening worker
 * registers a channel of its own in SCHEMA.workers so that an enqueue wakes one worker with
 * free slots, not all of them. Every worker also runs the reaper (one at a time per database)
 * and, on a second connection, vacuums the jobs table when dead tuples pile up (except through
 * a pooler that pgc_queue_vacuum() refuses: the worker logs once that autovacuum is left to
 * do it). Server notices and warnings on its sessions go to its log. */

typedef enum pgc_job_outcome {
	PGC_JOB_COMPLETE = 0,    /* done */
	PGC_JOB_FAIL = 1,        /* failed: retried with backoff, or dead after max_attempts */
	PGC_JOB_RETRY_LATER = 2  /* not now: run again after delay_ms, attempt not counted, up to
	                            the job's max_deferrals (pgc_queue_defer) */
} pgc_job_outcome;

#define PGC_JOB_ERROR_MAX 2048
#define PGC_JOB_OUTPUT_MAX 1024

/* Filled by the handler; the worker allocates it (new fields are added at the end). */
typedef struct pgc_job_result {
	pgc_job_outcome outcome; /* preset to PGC_JOB_COMPLETE */
	int64_t delay_ms;        /* for PGC_JOB_RETRY_LATER */
	char error[PGC_JOB_ERROR_MAX]; /* for PGC_JOB_FAIL */
	/* For the run log, recorded with a completion or a failure (pgc_job_info): the exit
	 * status of the command the handler ran (preset to -1: none; 128 + N for signal N) and
	 * the end of its output, valid UTF-8 (preset to ""; the worker cuts it at
	 * PGC_JOB_OUTPUT_MAX - 1 bytes). */
	int exit_status;
	char output[PGC_JOB_OUTPUT_MAX];
	/* The job's result, recorded with a completion (pgc_queue_complete_result): JSON text
	 * malloc'd by the handler (preset to NULL: none), freed by the worker with free() whatever
	 * the outcome. A result that is not JSON or is bigger than PGC_JOB_RESULT_MAX fails the
	 * attempt instead (retried as any failure; the error says why). */
	char *result_json;
} pgc_job_result;

/* Runs one job. Called on one of the worker's threads; must be thread-safe with itself. */
typedef void (*pgc_job_handler)(const pgc_job *job, pgc_job_result *result, void *arg);

typedef enum pgc_log_level { PGC_LOG_DEBUG = 0, PGC_LOG_INFO = 1, PGC_LOG_WARN = 2,
                             PGC_LOG_ERROR = 3 } pgc_log_level;

/* Receives the worker's log lines (one line, no newline). Called from the worker's threads. */
typedef void (*pgc_log_fn)(pgc_log_level level, const char *message, void *arg);

/* The most queues one worker serves (pgc_worker_options.n_queues). */
#define PGC_WORKER_QUEUES_MAX 64

typedef struct pgc_worker_options {
	const char *dsn;            /* as pgc_connect; NULL: environment */
	const char *schema;         /* NULL: "pgcoord" */
	const char *const *queues;  /* queue names, n_queues of them (required) */
	size_t n_queues;            /* 1 to PGC_WORKER_QUEUES_MAX */
	int concurrency;            /* handler threads; default 4 */
	int prefetch;               /* claimed jobs held ready beyond the running ones; default 0:
	                               claim only for idle threads, so that no job waits in one
	                               worker while another is idle. Short jobs gain from more
	                               (bigger batches per round trip). */
	int64_t lease_ms;           /* default 30000; renewed every lease/3 */
	int64_t poll_ms;            /* fallback poll with LISTEN; default 2000 */
	int64_t flush_ms;           /* completions wait at most this for company; default 1 */
	int64_t reap_ms;            /* reaper period; default 1000 (0: never reap) */
	pgc_backoff backoff;        /* failures */
	bool listen;                /* LISTEN/NOTIFY wake-ups (default true); without, or behind a
	                               transaction pooler, adaptive polling 10 ms..poll_ms */
	const char *worker_id;      /* recorded on claimed jobs; NULL: host:pid */
	const char *application_name; /* NULL: "pgcoord/worker" */
	pgc_log_fn log;             /* may be NULL */
	void *log_arg;
	long vacuum_dead_tuples;    /* a maintenance thread (own connection) vacuums the jobs table
	                               when it has this many dead tuples, checked every second;
	                               default 20000; 0: leave it to autovacuum (as behind a
	                               transaction-mode pooler, whatever this says) */
	bool once;                  /* stop by itself once no job of its queues could start
	                               within once_wait_ms and the jobs it holds are finished:
	                               for batches and tests. It waits for the next start a rate
	                               allows (so a rate-limited queue is drained at its pace), for
	                               keys at their limit while it holds jobs of theirs, and for
	                               jobs scheduled (run_at, a retry's backoff) within
	                               once_wait_ms of the moment it would stop. Jobs scheduled
	                               later, jobs waiting for dependencies or running in other
	                               workers, pending jobs of keys at the limit others hold, and
	                               paused queues do not keep it going.
	                               pgc_worker_wait() then returns PGC_OK. Default false. */
	bool cron;                  /* also be a cron scheduler: a thread with a session of its own
	                               fires the due ticks of the schema's schedules, as pgcoord
	                               cron run does (pgc_cron_fire_due, see <pgcoord/cron.h>),
	                               whatever queues this worker works on; until the worker
	                               stops. Default false. */
	int64_t once_wait_ms;       /* with once: how far ahead a scheduled job keeps the worker
	                               waiting for it; default 0 (only jobs due now count) */
} pgc_worker_options;

#define PGC_WORKER_OPTIONS_INIT { NULL, NULL, NULL, 0, 4, 0, 30000, 2000, 1, 1000, \
		PGC_BACKOFF_INIT, true, NULL, NULL, NULL, NULL, 20000, false, false, 0 }

/* Schedules the cron thread of a worker (opts.cron) fires per transaction. */
#define PGC_CRON_WORKER_BATCH 100

typedef struct pgc_worker pgc_worker;

typedef struct pgc_worker_stats {
	long claimed, completed, failed, retried, stale, released;
	long reaped;   /* jobs this worker's reaper returned or failed */
	bool listening;
	long wakeups;  /* notifications received that named one of its queues */
	long cron_enqueued; /* opts.cron: jobs its scheduler thread enqueued for cron ticks */
	long cancelled; /* jobs it held that pgc_queue_cancel() cancelled (their outcome ignored) */
	long reconnects; /* times its dispatcher session was lost and opened again */
} pgc_worker_stats;

/* Creates a worker (connects, checks the schema, and with opts.cron the cron tables, LISTENs).
 * Nothing runs until pgc_worker_start. Errors: PGC_EUSAGE, PGC_ECONNECT, PGC_ENOSCHEMA,
 * PGC_ESQL, PGC_ENOMEM. */
PGC_EXTERN PGC_MUSTCHECK int pgc_worker_new(const pgc_worker_options *opts,
                                            pgc_job_handler handler, void *handler_arg,
                                            pgc_worker **out, pgc_error *err);

/* Starts the dispatcher and the handler threads. Errors: PGC_EUSAGE (already started),
 * PGC_ENOMEM, PGC_EINTERNAL (thread creation). */
PGC_EXTERN PGC_MUSTCHECK int pgc_worker_start(pgc_worker *w, pgc_error *err);

/* Asks the worker to stop: no new claims; running handlers get grace_ms to finish, then their
 * jobs are released to pending and pgc_job_lost() turns true for them. Async-signal-safe
 * (one write to a pipe) and thread-safe. */
PGC_EXTERN void pgc_worker_stop(pgc_worker *w, int64_t grace_ms);

/* Waits for the worker to stop (after pgc_worker_stop, or after a fatal error) and joins its
 * threads; handlers still running are waited for. Returns the fatal error, if any. */
PGC_EXTERN PGC_MUSTCHECK int pgc_worker_wait(pgc_worker *w, pgc_error *err);

/* Counters so far. Thread-safe. */
PGC_EXTERN void pgc_worker_get_stats(pgc_worker *w, pgc_worker_stats *out);

/* Frees a stopped worker (stops and waits first if needed). NULL is accepted. */
PGC_EXTERN void pgc_worker_free(pgc_worker *w);

/* True once the job passed to a handler is no longer this worker's: its lease was lost, it was
 * cancelled (pgc_job_cancelled() is then true too), or the worker stopped past its grace
 * period. A handler should give up then: what it returns is not recorded. Thread-safe; cheap
 * enough to call in a handler's inner loop. */
PGC_EXTERN bool pgc_job_lost(const pgc_job *job);

/* Milliseconds since the claim that took the job passed to a handler came back (called as the
 * handler starts: how long the job waited in the worker for a free thread), by
 * CLOCK_MONOTONIC; -1 for a job not claimed by a pgc_worker. Thread-safe. */
PGC_EXTERN int64_t pgc_job_claimed_ms(const pgc_job *job);

/* True once the job passed to a handler was cancelled (pgc_queue_cancel(), pgcoord queue
 * cancel) while this worker held it. The job is cancelled in the history whatever the handler
 * returns from then on; it should stop its work (undo what it can) and return. The worker
 * finds out right away from the notification the cancel sends, or at its next lease renewal
 * (every lease/3) when it missed it. Set before pgc_job_lost() turns true. False for a job
 * not claimed by a pgc_worker. Thread-safe. */
PGC_EXTERN bool pgc_job_cancelled(const pgc_job *job);

#ifdef __cplusplus
}
#endif
#endif

/* queue_int.h - private declarations of the queue's files, shared with the worker (worker/) */
#ifndef PGCOORD_QUEUE_INT_H
#define PGCOORD_QUEUE_INT_H

#include "conn/conn_int.h"

/* The statements of a handle, expanded once when it opens; the hot ones go through the
 * session's statement cache. */
enum {
	QS_ENQUEUE,
	QS_CLAIM,
	QS_COMPLETE,
	QS_FAIL,
	QS_SNOOZE,
	QS_HEARTBEAT,
	QS_RELEASE,
	QS_NEXT_RUN,
	QS_JOB_RESULT,
	QS_COUNT
};

struct pgc_queue {
	pgc_conn *conn;         /* NULL once the connection was closed under the handle */
	char *schema;
	char *quoted;           /* PQescapeIdentifier(schema) */
	char channel[64];       /* NOTIFY channel of this schema */
	unsigned flags;         /* the call flags of its statements: PGC__CACHED, or 0 */
	char *sql[QS_COUNT];    /* expanded statement text */
	struct pgc_queue *next; /* the other handles open on the same session */
};

/* PGC_OK when q is usable: not NULL, and its connection not closed (PGC_EUSAGE, naming fn). */
int pgc__queue_usable(const pgc_queue *q, const char *fn, pgc_error *err);

/* The result of statement i of a batch that ran: pgc__batch_result(), and when that is NULL
 * although *rc says PGC_OK (the server skipped the statement), *rc becomes PGC_EINTERNAL with
 * err filled. Never NULL while *rc is PGC_OK. */
PGresult *pgc__queue_result(const pgc__batch *b, int i, int *rc, pgc_error *err);

/* Runs a template ("@S@" is q's schema) once, outside the statement cache. */
PGresult *pgc__queue_run_text(pgc_queue *q, const char *tmpl, int n, const char *const *vals,
                              int *rc, pgc_error *err);

/* The one check of a queue name given by a caller (PGC_EUSAGE, naming fn). */
int pgc__queue_check_name(const char *fn, const char *queue, pgc_error *err);

/* The one check of a concurrency key (NULL is accepted unless required): 1 to
 * PGC_QUEUE_KEY_MAX bytes (PGC_EUSAGE, naming fn). */
int pgc__queue_check_key(const char *fn, const char *key, bool required, pgc_error *err);

/* The one check of a job group's name: 1 to PGC_QUEUE_GROUP_MAX bytes (PGC_EUSAGE, naming fn). */
int pgc__queue_check_group(const char *fn, const char *group, pgc_error *err);

/* A server error of enqueue() and the group functions as the library's code: P0002 (no such
 * job or group) is PGC_ENOTFOUND, 55000 (a closed group) PGC_EFINISHED; err is updated.
 * Other codes come back unchanged. */
int pgc__queue_recode(int rc, pgc_error *err);

/* Runs statement stmt of q under the session's default bound, through the statement cache
 * unless the handle was opened without it. Same results as pgc__query(), except that a
 * statement the server did not run (an empty result) is PGC_EINTERNAL. */
PGresult *pgc__queue_run(pgc_queue *q, int stmt, int n, const char *const *vals, int *rc,
                         pgc_error *err);

/* pgc_queue_fail with what a command ended with (migration 015): its exit status (< 0: none)
 * and the tail of its output (NULL or "": none; at most 1023 bytes). */
int pgc__queue_fail_run(pgc_queue *q, int64_t id, int64_t token, const char *error_text, int exit_status,
                        const char *output, const pgc_backoff *backoff, bool *dead, pgc_error *err);

/* Adds statement stmt of q to a batch on q's session (as pgc__batch_add). */
int pgc__queue_batch_add(pgc_queue *q, pgc__batch *b, int stmt, int n, const char *const *vals);

/* The five parameters of QS_COMPLETE (complete()): ids, tokens, and the exit statuses, outputs
 * and results when any element says something (else NULL). */
typedef struct pgc__queue_complete_lits {
	pgc__sb ia, ta, ea, oa, ra;
	const char *v[5];
} pgc__queue_complete_lits;

/* Fills l from n jobs: exit_statuses (< 0: none), outputs ("" or NULL: none) and results
 * (JSON text, NULL: none) may each be NULL. PGC_ENOMEM (l freed) or PGC_OK (free l with
 * pgc__queue_complete_args_free). */
int pgc__queue_complete_args(size_t n, const int64_t *ids, const int64_t *tokens,
                             const int *exit_statuses, const char *const *outputs,
                             const char *const *results, pgc__queue_complete_lits *l,
                             pgc_error *err);
void pgc__queue_complete_args_free(pgc__queue_complete_lits *l);

/* pgc_queue_complete_many with what each run ended with and its result (as
 * pgc__queue_complete_args); a result the server refuses (not JSON, over PGC_JOB_RESULT_MAX)
 * is PGC_EUSAGE, and then nothing was completed. */
int pgc__queue_complete_run(pgc_queue *q, size_t n, const int64_t *ids, const int64_t *tokens,
                            const int *exit_statuses, const char *const *outputs,
                            const char *const *results, bool *stale, size_t *done, pgc_error *err);

/* Reads renew()'s rows (QS_HEARTBEAT: id, status) for the n jobs of ids: lost[i] when job i is
 * no longer held, and cancelled[i] (may be NULL) when that is because it was cancelled. */
void pgc__queue_renewed(const PGresult *res, size_t n, const int64_t *ids, bool *lost, bool *cancelled);

/* Whether a session behind what pgc_conn_pooler() found keeps its server session (no pooler,
 * or a session-mode one): only then can session state (a session lock, a LISTEN) be trusted. */
bool pgc__queue_session_kept(const pgc_pooler_info *p);

/* What is in between, for a message: "a transaction-mode pooler is in between (why)". */
void pgc__queue_pooler_what(const pgc_pooler_info *p, char *buf, size_t n);

/* ---- the rows of a claim (QS_CLAIM's, claim()'s columns: id, token, attempts,
 * max_attempts, priority, payload, key) ---- */

/* The bytes row r's payload and key take, with their terminators. */
size_t pgc__queue_payload_size(const PGresult *res, int r);

/* The one decoder of a claimed row: fills job from row r, copying the payload and then the key
 * (if any) to payload (pgc__queue_payload_size() bytes) and keeping queue as given; internal
 * is NULL. */
void pgc__queue_job_from_row(const PGresult *res, int r, const char *queue, char *payload,
                             pgc_job *job);

/* ---- inspection (queue_admin.c; queue_browse.c uses them too) ---- */

/* The statement that reads jobs as pgc_job_info rows, live ones and history together: a
 * format with three %s, the WHERE of the live table, the WHERE of the history, the LIMIT. */
/* Why the live job aliased A is held (text, NULL when nothing holds it): waiting for its
 * dependencies, or due and pending while its queue is paused, its key is at its limit or
 * rate-limited, or its queue is rate-limited. A format for snprintf (its %% are doubled). */
#define PGC__QUEUE_HELD_SQL(A) \
	"CASE WHEN " A ".status = 'waiting' THEN (SELECT 'waiting for job ' || min(d.dep)" \
	"   || CASE WHEN count(*) > 1 THEN ', and ' || (count(*) - 1) || ' more' ELSE '' END" \
	"   FROM @S@.job_deps d WHERE d.job = " A ".id)" \
	"  WHEN " A ".status = 'pending' AND " A ".run_at <= clock_timestamp() THEN (SELECT CASE" \
	"   WHEN qq.paused THEN 'queue ' || qq.name || ' is paused'" \
	"   WHEN kk.lim IS NOT NULL AND (SELECT count(*) FROM @S@.jobs r WHERE r.queue = kk.queue" \
	"    AND r.key = kk.key AND r.status = 'running') >= kk.lim" \
	"    THEN format('its key %%s is at its limit %%s', kk.key, kk.lim)" \
	"   WHEN kk.rate_next - coalesce(kk.rate_ms, qq.key_rate_ms) * 0.05 * interval '1 millisecond'" \
	"    > clock_timestamp() THEN format('its key %%s is rate-limited until %%s', kk.key," \
	"    to_json(kk.rate_next - coalesce(kk.rate_ms, qq.key_rate_ms) * 0.05 * interval '1 millisecond')#>>'{}')" \
	"   WHEN qq.rate_next - qq.rate_ms * 0.05 * interval '1 millisecond' > clock_timestamp()" \
	"    THEN format('queue %%s is rate-limited until %%s', qq.name," \
	"    to_json(qq.rate_next - qq.rate_ms * 0.05 * interval '1 millisecond')#>>'{}')" \
	"   END FROM @S@.queues qq LEFT JOIN @S@.job_keys kk ON kk.queue = qq.name AND kk.key = " A ".key" \
	"   WHERE qq.name = " A ".queue) END"

/* The age in seconds of queue q.name's oldest runnable job (pending, aged or not, or scheduled
 * and due), 0 when none: each part one probe of its own index (jobs_waiting; jobs_claim for
 * aged unkeyed jobs, jobs_aged_key for aged keyed ones). A run_at of -infinity (refused since
 * 014_finite_run_at.sql, but a table may still hold one) is left out: no row may break the view. */
#define PGC__QUEUE_OLDEST_PENDING_SQL \
	" coalesce(extract(epoch FROM statement_timestamp() - least(" \
	"   (SELECT run_at FROM @S@.jobs WHERE queue = q.name AND status = 'pending'" \
	"     AND eff_priority < 32768 AND isfinite(run_at) ORDER BY run_at LIMIT 1)," \
	"   (SELECT run_at FROM @S@.jobs WHERE queue = q.name AND status = 'pending'" \
	"     AND key IS NULL AND eff_priority = 32768 AND isfinite(run_at) ORDER BY run_at LIMIT 1)," \
	"   (SELECT run_at FROM @S@.jobs WHERE queue = q.name AND status = 'pending'" \
	"     AND key IS NOT NULL AND eff_priority = 32768 AND isfinite(run_at) ORDER BY run_at LIMIT 1)," \
	"   (SELECT run_at FROM @S@.jobs WHERE queue = q.name AND status = 'scheduled'" \
	"     AND run_at <= statement_timestamp() AND isfinite(run_at) ORDER BY run_at LIMIT 1))), 0)"

/* The rows of a statistics statement as pgc_queue_stats() returns them (queue_admin.c); res
 * is cleared. */
int pgc__queue_stat_rows(PGresult *res, const char *queue, pgc_queue_stat **out, int *rows, pgc_error *err);

extern const char pgc__queue_info_select[];

/* Row r of a pgc__queue_info_select result as one allocation (free()), or NULL when out of
 * memory. */
pgc_job_info *pgc__queue_info_from_row(PGresult *res, int r);

#endif

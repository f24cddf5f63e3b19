/* queue_admin.c - the job queue's maintenance and administration: the reaper, the vacuum,
 * pause, cancel, retry, purge, settings, statistics and inspection
 *
 * These run rarely, so their statements are not kept in the statement cache; like the hot path
 * (queue.c) they are constant text with the schema put in, values as parameters. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "queue_int.h"

/* ---- reaper ----------------------------------------------------------------------------- */

static const char reap_leases_sql[] =
	"WITH expired AS MATERIALIZED ("
	" SELECT id, token FROM @S@.jobs"
	" WHERE status = 'running' AND lease_until < clock_timestamp()"
	" ORDER BY id LIMIT 1000 FOR UPDATE SKIP LOCKED),"
	" dead AS (DELETE FROM @S@.jobs j"
	"  WHERE j.id = ANY (ARRAY(SELECT id FROM expired))"
	"  AND j.token = ANY (ARRAY(SELECT token FROM expired)) AND j.status = 'running'"
	"  AND j.attempts >= j.max_attempts"
	"  RETURNING j, 'lease expired (worker ' || coalesce(j.worker, '?') || ')' AS why),"
	" hist AS (INSERT INTO @S@.job_history SELECT h.* FROM dead x,"
	"  @S@.job_history_row(x.j, 'failed', x.why, @S@.push_error((x.j).errors, (x.j).attempts, x.why),"
	"   (x.j).exit_status, (x.j).output) h),"
	" back AS (UPDATE @S@.jobs j SET status = 'pending', token = NULL, lease_until = NULL,"
	"  last_error = 'lease expired (worker ' || coalesce(j.worker, '?') || ')',"
	"  errors = @S@.push_error(j.errors, j.attempts,"
	"                          'lease expired (worker ' || coalesce(j.worker, '?') || ')'),"
	"  eff_priority = j.priority, run_at = clock_timestamp()"
	" WHERE j.id = ANY (ARRAY(SELECT id FROM expired))"
	"  AND j.token = ANY (ARRAY(SELECT token FROM expired)) AND j.status = 'running'"
	"  AND j.attempts < j.max_attempts RETURNING j.queue, j.key),"
	" ended AS (INSERT INTO @S@.job_key_done SELECT e.* FROM"
	"  (SELECT (j).queue, (j).key FROM dead UNION ALL SELECT queue, key FROM back) x,"
	"  @S@.job_key_ended(x.queue, x.key) e)"
	" SELECT (SELECT count(*) FROM dead), (SELECT count(*) FROM back),"
	"  (SELECT count(pg_notify(s.channel, b.queue))"
	"   FROM (SELECT DISTINCT queue FROM back) b, @S@.queue_settings s)";

static const char reap_aging_sql[] =
	"WITH old AS MATERIALIZED ("
	" SELECT x.id FROM @S@.queues q, @S@.queue_settings s,"
	" LATERAL (SELECT id FROM @S@.jobs"
	"  WHERE queue = q.name AND status = 'pending' AND eff_priority < 32768"
	"  AND run_at < statement_timestamp() - s.aging ORDER BY run_at LIMIT 1000"
	"  FOR UPDATE SKIP LOCKED) x)"
	" UPDATE @S@.jobs j SET eff_priority = 32768"
	" WHERE j.id = ANY (ARRAY(SELECT id FROM old)) AND j.status = 'pending'";

static const char reap_history_sql[] =
	"DELETE FROM @S@.job_history h WHERE h.id IN ("
	" SELECT x.id FROM @S@.queues q, @S@.queue_settings s,"
	"  unnest(array['succeeded', 'failed', 'cancelled']) AS st(status),"
	" LATERAL (SELECT id FROM @S@.job_history"
	"  WHERE queue = q.name AND status = st.status"
	"  AND finished_at < statement_timestamp() - CASE WHEN st.status = 'succeeded'"
	"      THEN s.succeeded_retention ELSE s.failed_retention END"
	"  ORDER BY finished_at LIMIT 5000) x)";

/* The reaper's work, in its transaction: leases, aging, history, registrations. */
static const char *const reap_work[] = {
	reap_leases_sql, reap_aging_sql, reap_history_sql,
	/* Workers that stopped refreshing their registration are gone. */
	"DELETE FROM @S@.workers WHERE seen_at < clock_timestamp() - interval '1 minute'",
	/* Ended jobs of keys no claim looked at are folded; keys with nothing left go. */
	"SELECT @S@.job_keys_tidy()",
};
#define REAP_WORK (sizeof reap_work / sizeof reap_work[0])

/* Opens the reaper's transaction and takes its key, in one round trip. */
static int reap_begin(pgc_queue *q, pgc_error *err)
{
	char key[32];
	snprintf(key, sizeof key, "%lld", (long long)PGC_QUEUE_REAPER_LOCK_KEY);
	const char *kp[1] = { key };
	pgc__batch *b = pgc__batch_new(q->conn);
	if (b == NULL)
		return pgc__err(err, PGC_ENOMEM, "out of memory");
	int added = pgc__batch_add(b, "BEGIN", 0, NULL, 0);
	/* Small tables with no statistics yet make the planner guess large; JIT compiling these
	 * millisecond statements would take longer than running them. */
	if (added >= 0)
		added = pgc__batch_add(b, "SET LOCAL jit = off", 0, NULL, 0);
	int lock = added < 0 ? added : pgc__batch_add(b, "SELECT pg_try_advisory_xact_lock($1::bigint)", 1, kp, 0);
	int rc = lock < 0 ? pgc__err(err, PGC_ENOMEM, "out of memory") : pgc__batch_run(b, NULL, err);
	PGresult *got = rc == PGC_OK ? pgc__queue_result(b, lock, &rc, err) : NULL;
	if (rc == PGC_OK && strcmp(PQgetvalue(got, 0, 0), "t") != 0)
		rc = pgc__err(err, PGC_EBUSY, "another reaper is running");
	pgc__batch_free(b);
	return rc;
}

int pgc_queue_reap(pgc_queue *q, pgc_reap_result *out, pgc_error *err)
{
	pgc_error_clear(err);
	pgc_reap_result r = { 0, 0, 0, 0 };
	if (out != NULL)
		*out = r;
	if (pgc__queue_usable(q, "pgc_queue_reap", err) != PGC_OK)
		return PGC_EUSAGE;
	if (pgc__in_transaction(q->conn))
		return pgc__err(err, PGC_EUSAGE, "pgc_queue_reap must run outside a transaction");
	int rc = reap_begin(q, err);
	if (rc != PGC_OK) {
		(void)pgc__rollback(q->conn);
		return rc;
	}
	/* The work and its COMMIT in a second round trip. */
	char *sql[REAP_WORK] = { NULL };
	pgc__batch *b = pgc__batch_new(q->conn);
	bool oom = b == NULL;
	for (size_t i = 0; i < REAP_WORK && !oom; i++)
		oom = (sql[i] = pgc__sql_schema(reap_work[i], q->quoted)) == NULL ||
		      pgc__batch_add(b, sql[i], 0, NULL, 0) < 0;
	oom = oom || pgc__batch_add(b, "COMMIT", 0, NULL, 0) < 0;
	rc = oom ? pgc__err(err, PGC_ENOMEM, "out of memory") : pgc__batch_run(b, NULL, err);
	PGresult *res[REAP_WORK + 1] = { NULL };
	for (int i = 0; rc == PGC_OK && i <= (int)REAP_WORK; i++)
		res[i] = pgc__queue_result(b, i, &rc, err);
	if (rc == PGC_OK) {
		r.dead = atol(PQgetvalue(res[0], 0, 0));
		r.returned = atol(PQgetvalue(res[0], 0, 1));
		r.aged = atol(PQcmdTuples(res[1]));
		r.purged = atol(PQcmdTuples(res[2]));
	}
	pgc__batch_free(b);
	for (size_t i = 0; i < REAP_WORK; i++)
		free(sql[i]);
	if (rc != PGC_OK) {
		(void)pgc__rollback(q->conn);
		return rc;
	}
	if (out != NULL)
		*out = r;
	return PGC_OK;
}

bool pgc__queue_session_kept(const pgc_pooler_info *p)
{
	return p->mode == PGC_POOLER_NONE || p->mode == PGC_POOLER_SESSION;
}

void pgc__queue_pooler_what(const pgc_pooler_info *p, char *buf, size_t n)
{
	if (p->mode == PGC_POOLER_UNKNOWN)
		snprintf(buf, n, "cannot tell whether the pooler in between keeps this session (%s)", p->why);
	else
		snprintf(buf, n, "a %s-mode pooler is in between (%s)", pgc_pooler_mode_name(p->mode), p->why);
}

int pgc_queue_vacuum(pgc_queue *q, long min_dead, bool *vacuumed, pgc_error *err)
{
	pgc_error_clear(err);
	if (vacuumed != NULL)
		*vacuumed = false;
	if (q == NULL || min_dead < 0)
		return pgc__err(err, PGC_EUSAGE, "pgc_queue_vacuum: q must not be NULL and min_dead not negative");
	if (pgc__queue_usable(q, "pgc_queue_vacuum", err) != PGC_OK)
		return PGC_EUSAGE;
	if (pgc__in_transaction(q->conn))
		return pgc__err(err, PGC_EUSAGE, "pgc_queue_vacuum must run outside a transaction");
	/* Its lock is a session lock, taken and released by two statements: where those may run
	 * on two server sessions, the unlock misses and the lock stays on a pooled server
	 * connection for good. */
	pgc_pooler_info p;
	int rc = pgc_conn_pooler(q->conn, 0, 0, &p, err);
	if (rc != PGC_OK)
		return rc;
	if (!pgc__queue_session_kept(&p)) {
		char what[PGC_ERROR_MESSAGE_MAX];
		pgc__queue_pooler_what(&p, what, sizeof what);
		return pgc__err(err, PGC_EPOOLER,
		                "pgc_queue_vacuum: %s: its session lock could stay behind on a pooled server"
		                " connection; vacuum through a direct or session-mode connection, or leave it to"
		                " autovacuum", what);
	}
	const char *v[1] = { q->schema };
	PGresult *res = pgc__exec(q->conn,
	        "SELECT n_dead_tup FROM pg_catalog.pg_stat_user_tables"
	        " WHERE schemaname = $1 AND relname = 'jobs'", 1, v, &rc, err);
	if (res == NULL)
		return rc;
	long dead = PQntuples(res) == 1 ? atol(PQgetvalue(res, 0, 0)) : 0;
	PQclear(res);
	if (dead < min_dead)
		return PGC_OK;
	char key[32];
	snprintf(key, sizeof key, "%lld", (long long)PGC_QUEUE_VACUUM_LOCK_KEY);
	const char *kp[1] = { key };
	res = pgc__exec(q->conn, "SELECT pg_try_advisory_lock($1::bigint)", 1, kp, &rc, err);
	if (res == NULL)
		return rc;
	bool got = strcmp(PQgetvalue(res, 0, 0), "t") == 0;
	PQclear(res);
	if (!got)
		return pgc__err(err, PGC_EBUSY, "another session is vacuuming the jobs table");
	char *sql = pgc__sql_schema("VACUUM (SKIP_LOCKED) @S@.jobs", q->quoted);
	if (sql == NULL)
		rc = pgc__err(err, PGC_ENOMEM, "out of memory");
	else
		rc = pgc__command(q->conn, sql, err);
	free(sql);
	pgc_error e2;
	res = pgc__exec(q->conn, "SELECT pg_advisory_unlock($1::bigint)", 1, kp, NULL, &e2);
	PQclear(res);
	if (rc == PGC_OK && vacuumed != NULL)
		*vacuumed = true;
	return rc;
}

/* ---- admin ------------------------------------------------------------------------------ */

int pgc_queue_pause(pgc_queue *q, const char *queue, bool paused, pgc_error *err)
{
	pgc_error_clear(err);
	if (pgc__queue_usable(q, "pgc_queue_pause", err) != PGC_OK)
		return PGC_EUSAGE;
	int rc = pgc__queue_check_name("pgc_queue_pause", queue, err);
	if (rc != PGC_OK)
		return rc;
	const char *v[2] = { queue, paused ? "t" : "f" };
	PGresult *res = pgc__queue_run_text(q,
	        "WITH u AS (INSERT INTO @S@.queues (name, paused) VALUES ($1, $2::boolean)"
	        " ON CONFLICT (name) DO UPDATE SET paused = excluded.paused RETURNING paused)"
	        " SELECT CASE WHEN NOT u.paused THEN pg_notify(s.channel, $1) END"
	        " FROM u, @S@.queue_settings s", 2, v, &rc, err);
	if (res == NULL)
		return rc;
	PQclear(res);
	return PGC_OK;
}

/* A call on one job by id (fn's): checks q and id, then runs tmpl with the id as $1. */
static PGresult *run_on_job(pgc_queue *q, const char *fn, int64_t id, const char *tmpl, int *rc,
                            pgc_error *err)
{
	pgc_error_clear(err);
	if (q == NULL || id <= 0) {
		*rc = pgc__err(err, PGC_EUSAGE, "%s: q must not be NULL and id positive", fn);
		return NULL;
	}
	if ((*rc = pgc__queue_usable(q, fn, err)) != PGC_OK)
		return NULL;
	char ids[24];
	snprintf(ids, sizeof ids, "%lld", (long long)id);
	const char *v[1] = { ids };
	return pgc__queue_run_text(q, tmpl, 1, v, rc, err);
}

/* Cancels a live job in one statement: the row is locked, deleted and written to the history
 * as cancelled, and when it was running the workers serving its queue get a notification on
 * their own channels (sent at commit, so only for a cancel that happened). The lock decides a
 * race with the job's completion: whichever comes second finds the row gone (a completion is
 * then stale; a cancel looks in the history, with a snapshot taken after the wait, and says
 * how the job ended). A worker takes the notification as a hint only: it renews its leases at
 * once, and a job whose row is gone and whose history says cancelled is cancelled for it. */
int pgc_queue_cancel_job(pgc_queue *q, int64_t id, bool *was_running, pgc_error *err)
{
	if (was_running != NULL)
		*was_running = false;
	char sql[4096];
	snprintf(sql, sizeof sql,
	         "WITH j AS MATERIALIZED (SELECT id, status FROM @S@.jobs WHERE id = $1::bigint FOR UPDATE),"
	         " d AS (DELETE FROM @S@.jobs x WHERE x.id = $1::bigint AND EXISTS (SELECT 1 FROM j)"
	         "  RETURNING x.*, x AS r),"
	         " h AS (INSERT INTO @S@.job_history SELECT h.* FROM d,"
	         "  @S@.job_history_row(d.r, 'cancelled', CASE WHEN d.status = 'running'"
	         "   THEN 'cancelled while running on ' || coalesce(d.worker, '?') ELSE d.last_error END,"
	         "   d.errors, (d.r).exit_status, (d.r).output) h),"
	         /* A waiting job's edges go with it (job_ends_fold() would find none). */
	         " unedge AS (DELETE FROM @S@.job_deps e WHERE e.job = $1::bigint"
	         "  AND EXISTS (SELECT 1 FROM d WHERE d.status = 'waiting')),"
	         /* A keyed job's run ended: a row for the next claim of its key to fold. */
	         " ended AS (INSERT INTO @S@.job_key_done SELECT e.* FROM d,"
	         "  @S@.job_key_ended(d.queue, d.key) e WHERE d.status = 'running'),"
	         " n AS (SELECT count(pg_notify(w.channel, 'cancel ' || d.id)) AS sent"
	         "  FROM d JOIN @S@.workers w ON d.queue = ANY (w.queues) WHERE d.status = 'running')"
	         " SELECT (SELECT status FROM j), (SELECT count(*) FROM d), (SELECT sent FROM n)");
	int rc;
	PGresult *res = run_on_job(q, "pgc_queue_cancel", id, sql, &rc, err);
	if (res == NULL)
		return rc;
	bool none = PQgetisnull(res, 0, 0);
	bool running = !none && strcmp(PQgetvalue(res, 0, 0), "running") == 0;
	long done = atol(PQgetvalue(res, 0, 1));
	PQclear(res);
	if (!none && done == 1) {
		if (was_running != NULL)
			*was_running = running;
		return PGC_OK;
	}
	if (!none)
		return pgc__err(err, PGC_EINTERNAL, "job %lld was locked but not cancelled", (long long)id);
	/* Not live: finished (perhaps while we waited for its row), or unknown. A new statement,
	 * so that a completion that committed during the wait is seen. */
	res = run_on_job(q, "pgc_queue_cancel", id, "SELECT status FROM @S@.job_history WHERE id = $1::bigint",
	                 &rc, err);
	if (res == NULL)
		return rc;
	char status[16] = "";
	if (PQntuples(res) == 1)
		snprintf(status, sizeof status, "%s", PQgetvalue(res, 0, 0));
	PQclear(res);
	if (status[0] != '\0')
		return pgc__err(err, PGC_EFINISHED, "job %lld has already finished (%s): nothing to cancel",
		                (long long)id, status);
	return pgc__err(err, PGC_ENOTFOUND, "no job with id %lld (never enqueued, or finished and no longer"
	                " in the history)", (long long)id);
}

int pgc_queue_cancel(pgc_queue *q, int64_t id, pgc_error *err)
{
	return pgc_queue_cancel_job(q, id, NULL, err);
}

int pgc_queue_retry(pgc_queue *q, int64_t id, pgc_error *err)
{
	int rc;
	PGresult *res = run_on_job(q, "pgc_queue_retry", id,
	        "WITH h AS MATERIALIZED (SELECT * FROM @S@.job_history WHERE id = $1::bigint"
	        "  AND status IN ('failed', 'cancelled') FOR UPDATE),"
	        " ins AS (INSERT INTO @S@.jobs (id, queue, status, priority, eff_priority, run_at,"
	        "  attempts, max_attempts, last_error, errors, unique_key, created_at, payload,"
	        "  deferrals, max_deferrals, key, has_dependents)"
	        "  SELECT id, queue, 'pending', priority, priority, clock_timestamp(), 0, max_attempts,"
	        "   last_error, errors, unique_key, created_at, payload, 0, max_deferrals, key,"
	        "   has_dependents FROM h"
	        "  ON CONFLICT (queue, unique_key) WHERE unique_key IS NOT NULL DO NOTHING"
	        "  RETURNING id, queue),"
	        " del AS (DELETE FROM @S@.job_history x WHERE x.id = ANY (ARRAY(SELECT id FROM ins)))"
	        " SELECT (SELECT count(*) FROM h), (SELECT count(*) FROM ins),"
	        "  (SELECT count(pg_notify(s.channel, ins.queue)) FROM ins, @S@.queue_settings s)",
	        &rc, err);
	if (res == NULL)
		return rc;
	long found = atol(PQgetvalue(res, 0, 0)), back = atol(PQgetvalue(res, 0, 1));
	PQclear(res);
	if (found == 0)
		return pgc__err(err, PGC_ENOTFOUND, "no failed or cancelled job with id %lld", (long long)id);
	if (back == 0) {
		/* Nothing changed: the history row stays where it was. */
		return pgc__err(err, PGC_EDUPLICATE,
		                "job %lld has a unique key that a pending or running job holds now", (long long)id);
	}
	return PGC_OK;
}

static bool valid_status(const char *s)
{
	static const char *const all[] = { "waiting", "scheduled", "pending", "running", "succeeded",
	                                   "failed", "cancelled" };
	for (size_t i = 0; i < sizeof all / sizeof all[0]; i++)
		if (strcmp(s, all[i]) == 0)
			return true;
	return false;
}

int pgc_queue_purge(pgc_queue *q, const char *queue, const char *status, int64_t older_than_ms,
                    long *purged, pgc_error *err)
{
	pgc_error_clear(err);
	if (purged != NULL)
		*purged = 0;
	if (q == NULL || older_than_ms < 0)
		return pgc__err(err, PGC_EUSAGE, "pgc_queue_purge: q must not be NULL and the age not negative");
	if (status != NULL && (strcmp(status, "succeeded") != 0 && strcmp(status, "failed") != 0 &&
	                       strcmp(status, "cancelled") != 0))
		return pgc__err(err, PGC_EUSAGE, "cannot purge status \"%.40s\": use succeeded, failed or cancelled", status);
	pgc_queue_bulk b = PGC_QUEUE_BULK_INIT;
	b.op = PGC_BULK_PURGE;
	b.queue = queue;
	b.status = status;
	b.older_than_ms = older_than_ms;
	pgc_queue_bulk_result r;
	int rc = pgc_queue_bulk_run(q, &b, &r, err);
	if (purged != NULL)
		*purged = r.done;
	return rc;
}

/* ---- bulk operations ------------------------------------------------------------------------ */

/* The filters of each operation; $1 queue, $2 status, $3 age in ms, $4 key prefix, $5 the
 * highest id. The batches add $6 (the last id of the batch before) and $7 (the batch size). */
#define BULK_COMMON \
	" AND ($1::text IS NULL OR queue = $1) AND ($2::text IS NULL OR status = $2)" \
	" AND ($4::text IS NULL OR left(unique_key, length($4)) = $4)" \
	" AND ($5::bigint = 0 OR id <= $5)"
#define BULK_AGE(col) \
	" AND ($3::bigint = 0 OR " col " < statement_timestamp() - $3::bigint * interval '1 millisecond')"

static const char *const bulk_where[] = {
	[PGC_BULK_CANCEL] = "status IN ('pending', 'scheduled', 'waiting')" BULK_COMMON BULK_AGE("created_at"),
	[PGC_BULK_RETRY] = "status IN ('failed', 'cancelled')" BULK_COMMON BULK_AGE("finished_at"),
	[PGC_BULK_PURGE] = "true" BULK_COMMON BULK_AGE("finished_at"),
};

static const char *const bulk_table[] = {
	[PGC_BULK_CANCEL] = "jobs", [PGC_BULK_RETRY] = "job_history", [PGC_BULK_PURGE] = "job_history",
};

/* Every batch returns: the jobs it picked, the highest id among them, the jobs done. */
static const char *const bulk_batch[] = {
	[PGC_BULK_CANCEL] =
	"WITH pick AS MATERIALIZED (SELECT id FROM @S@.jobs WHERE %s AND id > $6::bigint"
	"  ORDER BY id LIMIT $7::int FOR UPDATE),"
	" d AS (DELETE FROM @S@.jobs x WHERE x.id = ANY (ARRAY(SELECT id FROM pick))"
	"  AND x.status <> 'running' RETURNING x.*, x AS r),"
	" h AS (INSERT INTO @S@.job_history SELECT h.* FROM d,"
	"  @S@.job_history_row(d.r, 'cancelled', d.last_error, d.errors, (d.r).exit_status, (d.r).output) h"
	" ORDER BY d.id),"
	" unedge AS (DELETE FROM @S@.job_deps e"
	"  WHERE e.job = ANY (ARRAY(SELECT id FROM d WHERE status = 'waiting')))"
	" SELECT (SELECT count(*) FROM pick), (SELECT max(id) FROM pick), (SELECT count(*) FROM d), 0",

	[PGC_BULK_RETRY] =
	"WITH pick AS MATERIALIZED (SELECT * FROM @S@.job_history WHERE %s AND id > $6::bigint"
	"  ORDER BY id LIMIT $7::int FOR UPDATE),"
	" ins AS (INSERT INTO @S@.jobs (id, queue, status, priority, eff_priority, run_at,"
	"  attempts, max_attempts, last_error, errors, unique_key, created_at, payload,"
	"  deferrals, max_deferrals, key, has_dependents)"
	"  SELECT id, queue, 'pending', priority, priority, clock_timestamp(), 0, max_attempts,"
	"   last_error, errors, unique_key, created_at, payload, 0, max_deferrals, key,"
	"   has_dependents FROM pick"
	"  ORDER BY id"
	"  ON CONFLICT (queue, unique_key) WHERE unique_key IS NOT NULL DO NOTHING"
	"  RETURNING id, queue),"
	" del AS (DELETE FROM @S@.job_history x WHERE x.id = ANY (ARRAY(SELECT id FROM ins)))"
	" SELECT (SELECT count(*) FROM pick), (SELECT max(id) FROM pick), (SELECT count(*) FROM ins),"
	"  (SELECT count(pg_notify(s.channel, n.queue))"
	"   FROM (SELECT DISTINCT queue FROM ins) n, @S@.queue_settings s)",

	[PGC_BULK_PURGE] =
	"WITH pick AS MATERIALIZED (SELECT id FROM @S@.job_history WHERE %s AND id > $6::bigint"
	"  ORDER BY id LIMIT $7::int FOR UPDATE),"
	" d AS (DELETE FROM @S@.job_history x WHERE x.id = ANY (ARRAY(SELECT id FROM pick))"
	"  RETURNING x.id)"
	" SELECT (SELECT count(*) FROM pick), (SELECT max(id) FROM pick), (SELECT count(*) FROM d), 0",
};

#define BULK_BATCH_DEFAULT 1000
#define BULK_BATCH_MAX 10000

static int bulk_check(const char *fn, const pgc_queue *q, const pgc_queue_bulk *b, pgc_error *err)
{
	if (q == NULL || b == NULL)
		return pgc__err(err, PGC_EUSAGE, "%s: q and b must not be NULL", fn);
	if (pgc__queue_usable(q, fn, err) != PGC_OK)
		return PGC_EUSAGE;
	if (b->op != PGC_BULK_CANCEL && b->op != PGC_BULK_RETRY && b->op != PGC_BULK_PURGE)
		return pgc__err(err, PGC_EUSAGE, "%s: unknown operation %d", fn, (int)b->op);
	if (b->queue != NULL || b->op != PGC_BULK_PURGE) {
		int rc = pgc__queue_check_name(fn, b->queue, err);
		if (rc != PGC_OK)
			return rc;
	}
	static const char *const statuses[][3] = {
		[PGC_BULK_CANCEL] = { "pending", "scheduled", "waiting" },
		[PGC_BULK_RETRY] = { "failed", "cancelled", NULL },
		[PGC_BULK_PURGE] = { "succeeded", "failed", "cancelled" },
	};
	static const char *const said[] = {
		[PGC_BULK_CANCEL] = "pending or scheduled, or waiting",
		[PGC_BULK_RETRY] = "failed or cancelled",
		[PGC_BULK_PURGE] = "succeeded, failed or cancelled",
	};
	if (b->status != NULL) {
		bool ok = false;
		for (int i = 0; i < 3; i++)
			ok |= statuses[b->op][i] != NULL && strcmp(b->status, statuses[b->op][i]) == 0;
		if (!ok)
			return pgc__err(err, PGC_EUSAGE, "%s: status \"%.40s\" does not fit: use %s", fn,
			                b->status, said[b->op]);
	}
	if (b->older_than_ms < 0 || b->upto_id < 0)
		return pgc__err(err, PGC_EUSAGE, "%s: older_than_ms and upto_id must not be negative", fn);
	if (b->key_prefix != NULL && *b->key_prefix == '\0')
		return pgc__err(err, PGC_EUSAGE, "%s: the key prefix is empty (NULL matches any job)", fn);
	if (b->batch_size < 0 || b->batch_size > BULK_BATCH_MAX)
		return pgc__err(err, PGC_EUSAGE, "%s: batch_size must be 1..%d (0: %d)", fn, BULK_BATCH_MAX,
		                BULK_BATCH_DEFAULT);
	return PGC_OK;
}

/* The parameters $1..$5 of b, in the caller's buffers. */
static void bulk_params(const pgc_queue_bulk *b, const char *v[5], char age[24], char upto[24])
{
	snprintf(age, 24, "%lld", (long long)b->older_than_ms);
	snprintf(upto, 24, "%lld", (long long)b->upto_id);
	/* Retry takes the failed jobs unless told otherwise. */
	v[0] = b->queue;
	v[1] = b->status != NULL ? b->status : b->op == PGC_BULK_RETRY ? "failed" : NULL;
	v[2] = age;
	v[3] = b->key_prefix;
	v[4] = upto;
}

int pgc_queue_bulk_count(pgc_queue *q, pgc_queue_bulk *b, long *count, pgc_error *err)
{
	pgc_error_clear(err);
	if (count != NULL)
		*count = 0;
	int rc = bulk_check("pgc_queue_bulk_count", q, b, err);
	if (rc != PGC_OK)
		return rc;
	char sql[1024], age[24], upto[24];
	/* A queue that was never made (no enqueue, pause or config ever named it) is a mistake:
	 * most likely a misspelt name, which must not read as "nothing to do". */
	snprintf(sql, sizeof sql, "SELECT count(*), coalesce(max(id), 0),"
	         " $1::text IS NULL OR EXISTS (SELECT 1 FROM @S@.queues WHERE name = $1)"
	         " FROM @S@.%s WHERE %s", bulk_table[b->op], bulk_where[b->op]);
	const char *v[5];
	bulk_params(b, v, age, upto);
	PGresult *res = pgc__queue_run_text(q, sql, 5, v, &rc, err);
	if (res == NULL)
		return rc;
	if (strcmp(PQgetvalue(res, 0, 2), "t") != 0) {
		PQclear(res);
		return pgc__err(err, PGC_ENOTFOUND, "no queue named \"%.100s\"", b->queue);
	}
	if (count != NULL)
		*count = atol(PQgetvalue(res, 0, 0));
	b->upto_id = atoll(PQgetvalue(res, 0, 1));
	PQclear(res);
	return PGC_OK;
}

int pgc_queue_bulk_run(pgc_queue *q, const pgc_queue_bulk *b, pgc_queue_bulk_result *out,
                       pgc_error *err)
{
	pgc_error_clear(err);
	pgc_queue_bulk_result r = { 0, 0, 0 };
	if (out != NULL)
		*out = r;
	int rc = bulk_check("pgc_queue_bulk_run", q, b, err);
	if (rc != PGC_OK)
		return rc;
	char tmpl[4096], age[24], upto[24], after[24] = "0", lim[16];
	snprintf(tmpl, sizeof tmpl, bulk_batch[b->op], bulk_where[b->op]);
	char *sql = pgc__sql_schema(tmpl, q->quoted);
	if (sql == NULL)
		return pgc__err(err, PGC_ENOMEM, "out of memory");
	snprintf(lim, sizeof lim, "%d", b->batch_size ? b->batch_size : BULK_BATCH_DEFAULT);
	const char *v[7];
	bulk_params(b, v, age, upto);
	v[5] = after;
	v[6] = lim;
	/* Keyset by id: every batch starts after the last id the one before looked at, so a job
	 * left where it was (a retry whose key is taken) is not looked at twice, and the run ends. */
	for (;;) {
		PGresult *res = pgc__exec(q->conn, sql, 7, v, &rc, err);
		if (res == NULL)
			break;
		long picked = atol(PQgetvalue(res, 0, 0));
		if (picked > 0) {
			long done = atol(PQgetvalue(res, 0, 2));
			snprintf(after, sizeof after, "%s", PQgetvalue(res, 0, 1));
			r.done += done;
			if (b->op == PGC_BULK_RETRY)
				r.skipped += picked - done;
			r.batches++;
		}
		PQclear(res);
		if (picked == 0)
			break;
		if (out != NULL)
			*out = r;
		if (b->progress != NULL)
			b->progress(r.done, b->progress_arg);
	}
	free(sql);
	if (out != NULL)
		*out = r;
	return rc;
}

int pgc_queue_config_get(pgc_queue *q, pgc_queue_config *out, pgc_error *err)
{
	pgc_error_clear(err);
	if (q == NULL || out == NULL)
		return pgc__err(err, PGC_EUSAGE, "pgc_queue_config_get: q and out must not be NULL");
	if (pgc__queue_usable(q, "pgc_queue_config_get", err) != PGC_OK)
		return PGC_EUSAGE;
	int rc;
	PGresult *res = pgc__queue_run_text(q,
	        "SELECT (extract(epoch FROM aging) * 1000)::bigint,"
	        " (extract(epoch FROM succeeded_retention) * 1000)::bigint,"
	        " (extract(epoch FROM failed_retention) * 1000)::bigint, max_payload_bytes"
	        " FROM @S@.queue_settings", 0, NULL, &rc, err);
	if (res == NULL)
		return rc;
	out->aging_ms = atoll(PQgetvalue(res, 0, 0));
	out->succeeded_retention_ms = atoll(PQgetvalue(res, 0, 1));
	out->failed_retention_ms = atoll(PQgetvalue(res, 0, 2));
	out->max_payload_bytes = atoi(PQgetvalue(res, 0, 3));
	PQclear(res);
	return PGC_OK;
}

int pgc_queue_config_set(pgc_queue *q, const pgc_queue_config *cfg, pgc_error *err)
{
	pgc_error_clear(err);
	if (q == NULL || cfg == NULL)
		return pgc__err(err, PGC_EUSAGE, "pgc_queue_config_set: q and cfg must not be NULL");
	if (pgc__queue_usable(q, "pgc_queue_config_set", err) != PGC_OK)
		return PGC_EUSAGE;
	if (cfg->aging_ms == 0)
		return pgc__err(err, PGC_EUSAGE, "the aging time must be positive");
	if (cfg->max_payload_bytes == 0)
		return pgc__err(err, PGC_EUSAGE, "the payload limit must be positive");
	char a[24], s[24], f[24], m[16];
	snprintf(a, sizeof a, "%lld", (long long)cfg->aging_ms);
	snprintf(s, sizeof s, "%lld", (long long)cfg->succeeded_retention_ms);
	snprintf(f, sizeof f, "%lld", (long long)cfg->failed_retention_ms);
	snprintf(m, sizeof m, "%d", cfg->max_payload_bytes);
	const char *v[4] = { a, s, f, m };
	int rc;
	PGresult *res = pgc__queue_run_text(q,
	        "UPDATE @S@.queue_settings SET"
	        " aging = CASE WHEN $1::bigint < 0 THEN aging ELSE $1::bigint * interval '1 millisecond' END,"
	        " succeeded_retention = CASE WHEN $2::bigint < 0 THEN succeeded_retention"
	        "  ELSE $2::bigint * interval '1 millisecond' END,"
	        " failed_retention = CASE WHEN $3::bigint < 0 THEN failed_retention"
	        "  ELSE $3::bigint * interval '1 millisecond' END,"
	        " max_payload_bytes = CASE WHEN $4::int < 0 THEN max_payload_bytes ELSE $4::int END",
	        4, v, &rc, err);
	if (res == NULL)
		return rc;
	PQclear(res);
	return PGC_OK;
}

/* ---- inspection --------------------------------------------------------------------------- */

/* The rows of a statistics statement (name, paused, pending, scheduled, running, succeeded,
 * failed, cancelled, oldest pending age, completed and failed in the last minute, waiting) as an array
 * (free()) in *out and its length in *rows; res is cleared. PGC_ENOTFOUND when queue (not NULL)
 * gave no row. */
int pgc__queue_stat_rows(PGresult *res, const char *queue, pgc_queue_stat **out, int *rows_out, pgc_error *err)
{
	*out = NULL;
	*rows_out = 0;
	int rows = PQntuples(res);
	if (queue != NULL && rows == 0) {
		PQclear(res);
		return pgc__err(err, PGC_ENOTFOUND, "no queue named \"%.100s\"", queue);
	}
	pgc_queue_stat *a = calloc(rows ? (size_t)rows : 1, sizeof *a);
	if (a == NULL) {
		PQclear(res);
		return pgc__err(err, PGC_ENOMEM, "out of memory");
	}
	for (int r = 0; r < rows; r++) {
		snprintf(a[r].queue, sizeof a[r].queue, "%s", PQgetvalue(res, r, 0));
		a[r].paused = strcmp(PQgetvalue(res, r, 1), "t") == 0;
		a[r].pending = atol(PQgetvalue(res, r, 2));
		a[r].scheduled = atol(PQgetvalue(res, r, 3));
		a[r].running = atol(PQgetvalue(res, r, 4));
		a[r].succeeded = atol(PQgetvalue(res, r, 5));
		a[r].failed = atol(PQgetvalue(res, r, 6));
		a[r].cancelled = atol(PQgetvalue(res, r, 7));
		a[r].oldest_pending_s = atof(PQgetvalue(res, r, 8));
		a[r].completed_1m = atol(PQgetvalue(res, r, 9));
		a[r].failed_1m = atol(PQgetvalue(res, r, 10));
		a[r].waiting = atol(PQgetvalue(res, r, 11));
	}
	PQclear(res);
	*out = a;
	*rows_out = rows;
	return PGC_OK;
}

int pgc_queue_stats(pgc_queue *q, const char *queue, pgc_queue_stat **stats, size_t *n,
                    pgc_queue_health *health, pgc_error *err)
{
	pgc_error_clear(err);
	if (stats != NULL)
		*stats = NULL;
	if (n != NULL)
		*n = 0;
	if (q == NULL || stats == NULL || n == NULL)
		return pgc__err(err, PGC_EUSAGE, "pgc_queue_stats: q, stats and n must not be NULL");
	if (pgc__queue_usable(q, "pgc_queue_stats", err) != PGC_OK)
		return PGC_EUSAGE;
	if (queue != NULL) {
		int rc = pgc__queue_check_name("pgc_queue_stats", queue, err);
		if (rc != PGC_OK)
			return rc;
	}
	const char *v[1] = { queue };
	int rc;
	PGresult *res = pgc__queue_run_text(q,
	        "SELECT q.name, q.paused,"
	        /* Runnable: pending, and scheduled jobs already due (promoted at the next claim). */
	        " (SELECT count(*) FROM @S@.jobs WHERE queue = q.name AND status = 'pending')"
	        " + (SELECT count(*) FROM @S@.jobs WHERE queue = q.name AND status = 'scheduled'"
	        "   AND run_at <= statement_timestamp()),"
	        " (SELECT count(*) FROM @S@.jobs WHERE queue = q.name AND status = 'scheduled'"
	        "   AND run_at > statement_timestamp()),"
	        " (SELECT count(*) FROM @S@.jobs WHERE queue = q.name AND status = 'running'),"
	        " (SELECT count(*) FROM @S@.job_history WHERE queue = q.name AND status = 'succeeded'),"
	        " (SELECT count(*) FROM @S@.job_history WHERE queue = q.name AND status = 'failed'),"
	        " (SELECT count(*) FROM @S@.job_history WHERE queue = q.name AND status = 'cancelled'),"
	        PGC__QUEUE_OLDEST_PENDING_SQL ","
	        " (SELECT count(*) FROM @S@.job_history WHERE queue = q.name AND status = 'succeeded'"
	        "   AND finished_at > statement_timestamp() - interval '1 minute'),"
	        " (SELECT count(*) FROM @S@.job_history WHERE queue = q.name AND status = 'failed'"
	        "   AND finished_at > statement_timestamp() - interval '1 minute'),"
	        " (SELECT count(*) FROM @S@.jobs WHERE queue = q.name AND status = 'waiting')"
	        " FROM @S@.queues q WHERE $1::text IS NULL OR q.name = $1 ORDER BY q.name",
	        1, v, &rc, err);
	if (res == NULL)
		return rc;
	int rows = 0;
	pgc_queue_stat *a = NULL;
	if ((rc = pgc__queue_stat_rows(res, queue, &a, &rows, err)) != PGC_OK)
		return rc;
	if (health != NULL) {
		memset(health, 0, sizeof *health);
		const char *sv[1] = { q->schema };
		res = pgc__exec(q->conn,
		        "SELECT relname, n_live_tup, n_dead_tup,"
		        " coalesce(to_json(greatest(last_autovacuum, last_vacuum))#>>'{}', '')"
		        " FROM pg_catalog.pg_stat_user_tables"
		        " WHERE schemaname = $1 AND relname IN ('jobs', 'job_history')", 1, sv, &rc, err);
		if (res == NULL) {
			free(a);
			return rc;
		}
		for (int r = 0; r < PQntuples(res); r++) {
			bool jobs = strcmp(PQgetvalue(res, r, 0), "jobs") == 0;
			long live = atol(PQgetvalue(res, r, 1)), dead = atol(PQgetvalue(res, r, 2));
			if (jobs) {
				health->jobs_live_tuples = live;
				health->jobs_dead_tuples = dead;
				snprintf(health->jobs_last_autovacuum, sizeof health->jobs_last_autovacuum, "%s",
				         PQgetvalue(res, r, 3));
			} else {
				health->history_live_tuples = live;
				health->history_dead_tuples = dead;
				snprintf(health->history_last_autovacuum, sizeof health->history_last_autovacuum,
				         "%s", PQgetvalue(res, r, 3));
			}
		}
		PQclear(res);
		res = pgc__exec(q->conn,
		        "SELECT pid, age(backend_xmin), coalesce(extract(epoch FROM clock_timestamp() - xact_start), 0),"
		        " coalesce(application_name, ''), coalesce(state, '')"
		        " FROM pg_catalog.pg_stat_activity WHERE backend_xmin IS NOT NULL"
		        " AND pid <> pg_backend_pid()"
		        " ORDER BY age(backend_xmin) DESC LIMIT 1", 0, NULL, &rc, err);
		if (res == NULL) {
			free(a);
			return rc;
		}
		if (PQntuples(res) == 1) {
			health->horizon_pid = atoi(PQgetvalue(res, 0, 0));
			health->horizon_xmin_age = atol(PQgetvalue(res, 0, 1));
			health->horizon_xact_age_s = atof(PQgetvalue(res, 0, 2));
			snprintf(health->horizon_application, sizeof health->horizon_application, "%s",
			         PQgetvalue(res, 0, 3));
			snprintf(health->horizon_state, sizeof health->horizon_state, "%s", PQgetvalue(res, 0, 4));
		}
		PQclear(res);
		res = pgc__exec(q->conn,
		        "SELECT slot_name, greatest(age(xmin), age(catalog_xmin))"
		        " FROM pg_catalog.pg_replication_slots WHERE xmin IS NOT NULL OR catalog_xmin IS NOT NULL"
		        " ORDER BY 2 DESC LIMIT 1", 0, NULL, &rc, err);
		if (res == NULL) {
			free(a);
			return rc;
		}
		if (PQntuples(res) == 1) {
			snprintf(health->horizon_slot, sizeof health->horizon_slot, "%s", PQgetvalue(res, 0, 0));
			health->horizon_slot_xmin_age = atol(PQgetvalue(res, 0, 1));
		}
		PQclear(res);
	}
	*stats = a;
	*n = (size_t)rows;
	return PGC_OK;
}

/* Columns: id queue status priority aged attempts max_attempts run_at created_at started_at
 * finished_at lease_until worker last_error errors unique_key payload deferrals
 * max_deferrals key held. */
#define INFO_COLS 24

pgc_job_info *pgc__queue_info_from_row(PGresult *res, int r)
{
	size_t total = sizeof(pgc_job_info);
	for (int c = 0; c < INFO_COLS; c++)
		total += (size_t)PQgetlength(res, r, c) + 1;
	pgc_job_info *info = calloc(1, total);
	if (info == NULL)
		return NULL;
	char *p = (char *)(info + 1);
	const char **slots[INFO_COLS] = { NULL, &info->queue, &info->status, NULL, NULL, NULL, NULL,
	                                  &info->run_at, &info->created_at, &info->started_at,
	                                  &info->finished_at, &info->lease_until, &info->worker,
	                                  &info->last_error, &info->errors, &info->unique_key,
	                                  &info->payload, NULL, NULL, &info->key, &info->held, NULL,
	                                  &info->output, NULL };
	for (int c = 0; c < INFO_COLS; c++) {
		if (slots[c] == NULL || PQgetisnull(res, r, c))
			continue;
		size_t len = (size_t)PQgetlength(res, r, c);
		memcpy(p, PQgetvalue(res, r, c), len + 1);
		*slots[c] = p;
		p += len + 1;
	}
	info->id = atoll(PQgetvalue(res, r, 0));
	info->priority = atoi(PQgetvalue(res, r, 3));
	info->aged = strcmp(PQgetvalue(res, r, 4), "t") == 0;
	info->attempts = atoi(PQgetvalue(res, r, 5));
	info->max_attempts = atoi(PQgetvalue(res, r, 6));
	info->deferrals = atoi(PQgetvalue(res, r, 17));
	info->max_deferrals = atoi(PQgetvalue(res, r, 18));
	info->exit_status = PQgetisnull(res, r, 21) ? -1 : atoi(PQgetvalue(res, r, 21));
	info->duration_ms = PQgetisnull(res, r, 23) ? -1 : atoll(PQgetvalue(res, r, 23));
	return info;
}

#define TS(x) "to_json(" x ")#>>'{}'"
/* Milliseconds from a to b, NULL when either is (a job cancelled before it started). */
#define MS_SINCE(a, b) "round(extract(epoch FROM " b " - " a ") * 1000)::int8"
const char pgc__queue_info_select[] =
	"SELECT * FROM ("
	" SELECT id, queue, status, priority, eff_priority > 32767 AS aged, attempts, max_attempts,"
	"  " TS("run_at") ", " TS("created_at") ", " TS("started_at") ", NULL::text AS finished_at,"
	"  " TS("lease_until") ", worker, last_error, errors::text, unique_key, payload::text,"
	"  deferrals, max_deferrals, key,"
	"  " PGC__QUEUE_HELD_SQL("x") ", exit_status, output,"
	"  CASE WHEN status = 'running' THEN " MS_SINCE("started_at", "clock_timestamp()") " END"
	" FROM @S@.jobs x WHERE %s"
	" UNION ALL"
	" SELECT id, queue, status, priority, false, attempts, max_attempts,"
	"  " TS("run_at") ", " TS("created_at") ", " TS("started_at") ", " TS("finished_at") ","
	"  NULL, worker, last_error, errors::text, unique_key, payload::text,"
	"  deferrals, max_deferrals, key, NULL, exit_status, output,"
	"  " MS_SINCE("started_at", "finished_at")
	" FROM @S@.job_history WHERE %s) x ORDER BY id DESC LIMIT %s";

int pgc_queue_show(pgc_queue *q, int64_t id, pgc_job_info **out, pgc_error *err)
{
	pgc_error_clear(err);
	if (out != NULL)
		*out = NULL;
	if (q == NULL || out == NULL || id <= 0)
		return pgc__err(err, PGC_EUSAGE, "pgc_queue_show: q and out must not be NULL, id positive");
	if (pgc__queue_usable(q, "pgc_queue_show", err) != PGC_OK)
		return PGC_EUSAGE;
	char sql[4096], ids[24];
	snprintf(sql, sizeof sql, pgc__queue_info_select, "id = $1::bigint", "id = $1::bigint", "1");
	snprintf(ids, sizeof ids, "%lld", (long long)id);
	const char *v[1] = { ids };
	int rc;
	PGresult *res = pgc__queue_run_text(q, sql, 1, v, &rc, err);
	if (res == NULL)
		return rc;
	if (PQntuples(res) == 0) {
		PQclear(res);
		return pgc__err(err, PGC_ENOTFOUND, "no job with id %lld", (long long)id);
	}
	*out = pgc__queue_info_from_row(res, 0);
	PQclear(res);
	if (*out == NULL)
		return pgc__err(err, PGC_ENOMEM, "out of memory");
	return PGC_OK;
}

int pgc_queue_list(pgc_queue *q, const char *queue, const char *status, long limit,
                   pgc_job_info ***out, size_t *n, pgc_error *err)
{
	pgc_error_clear(err);
	if (out != NULL)
		*out = NULL;
	if (n != NULL)
		*n = 0;
	if (q == NULL || out == NULL || n == NULL || limit < 1)
		return pgc__err(err, PGC_EUSAGE, "pgc_queue_list: q, out and n must not be NULL, limit >= 1");
	if (pgc__queue_usable(q, "pgc_queue_list", err) != PGC_OK)
		return PGC_EUSAGE;
	if (queue != NULL && pgc__queue_check_name("pgc_queue_list", queue, err) != PGC_OK)
		return PGC_EUSAGE;
	if (status != NULL && !valid_status(status))
		return pgc__err(err, PGC_EUSAGE,
		                "unknown status \"%.40s\": use waiting, scheduled, pending, running, succeeded, failed or cancelled", status);
	char sql[4096], lim[24];
	const char *where = "($1::text IS NULL OR queue = $1) AND ($2::text IS NULL OR status = $2)";
	snprintf(sql, sizeof sql, pgc__queue_info_select, where, where, "$3::bigint");
	snprintf(lim, sizeof lim, "%ld", limit);
	const char *v[3] = { queue, status, lim };
	int rc;
	PGresult *res = pgc__queue_run_text(q, sql, 3, v, &rc, err);
	if (res == NULL)
		return rc;
	int rows = PQntuples(res);
	pgc_job_info **a = calloc(rows ? (size_t)rows : 1, sizeof *a);
	if (a == NULL) {
		PQclear(res);
		return pgc__err(err, PGC_ENOMEM, "out of memory");
	}
	for (int r = 0; r < rows; r++) {
		a[r] = pgc__queue_info_from_row(res, r);
		if (a[r] == NULL) {
			pgc_queue_infos_free(a, (size_t)r);
			PQclear(res);
			return pgc__err(err, PGC_ENOMEM, "out of memory");
		}
	}
	PQclear(res);
	*out = a;
	*n = (size_t)rows;
	return PGC_OK;
}

void pgc_queue_infos_free(pgc_job_info **infos, size_t n)
{
	if (infos == NULL)
		return;
	for (size_t i = 0; i < n; i++)
		free(infos[i]);
	free(infos);
}

/* queue_admin.c - the job queue's maintenance and administration: the reaper, the vacuum,
 * pause, cancel, retry, purge, settings, statistics and inspection
 *
 * Every change is a call of a SQL function of the protocol (docs/PROTOCOL.md, "Queue:
 * administration"): reap(), cancel(), retry(), queue_pause(), queue_config_set(), and the
 * bulk actions one batch per call (bulk_cancel(), bulk_retry(), bulk_purge()); the reads are
 * plain SELECTs. These run rarely, so their statements are not kept in the statement cache;
 * like the hot path (queue.c) they are constant text with the schema put in, values as
 * parameters. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "queue_int.h"

/* ---- reaper ----------------------------------------------------------------------------- */

/* A refusal of one of the administration functions as the error this library gave before the
 * decision moved into SQL: the function's message, the library's code, no SQLSTATE (a refusal
 * is an answer, not a failed statement). Other errors are left as they are. */
static int refusal(int rc, pgc_error *err)
{
	static const struct {
		const char *sqlstate;
		int code;
	} map[] = {
		{ "P0002", PGC_ENOTFOUND }, { "55000", PGC_EFINISHED },
		{ "23505", PGC_EDUPLICATE }, { "55P03", PGC_EBUSY },
	};
	if (rc != PGC_ESQL || err == NULL)
		return rc;
	for (size_t i = 0; i < sizeof map / sizeof map[0]; i++) {
		if (strcmp(err->sqlstate, map[i].sqlstate) == 0) {
			char msg[PGC_ERROR_MESSAGE_MAX];
			snprintf(msg, sizeof msg, "%s", err->message);
			return pgc__err(err, map[i].code, "%s", msg);
		}
	}
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
	/* One statement, its own transaction: SQL reap() takes the reaper's lock and does the
	 * leases, aging, retention, registrations and the key ledger. */
	int rc;
	PGresult *res = pgc__queue_run_text(q, "SELECT failed, returned, aged, purged FROM @S@.reap()", 0, NULL,
	                                    &rc, err);
	if (res == NULL)
		return refusal(rc, err);
	r.dead = atol(PQgetvalue(res, 0, 0));
	r.returned = atol(PQgetvalue(res, 0, 1));
	r.aged = atol(PQgetvalue(res, 0, 2));
	r.purged = atol(PQgetvalue(res, 0, 3));
	PQclear(res);
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
	PGresult *res = pgc__queue_run_text(q, "SELECT @S@.queue_pause($1, $2::boolean)", 2, v, &rc, err);
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

/* Cancels a live job: SQL cancel() (its comment says how a race with the job's completion
 * ends) says whether it was running, or raises P0002 (unknown) or 55000 (finished). */
int pgc_queue_cancel_job(pgc_queue *q, int64_t id, bool *was_running, pgc_error *err)
{
	if (was_running != NULL)
		*was_running = false;
	int rc;
	PGresult *res = run_on_job(q, "pgc_queue_cancel", id, "SELECT @S@.cancel($1::bigint)", &rc, err);
	if (res == NULL)
		return refusal(rc, err);
	if (was_running != NULL)
		*was_running = strcmp(PQgetvalue(res, 0, 0), "t") == 0;
	PQclear(res);
	return PGC_OK;
}

int pgc_queue_cancel(pgc_queue *q, int64_t id, pgc_error *err)
{
	return pgc_queue_cancel_job(q, id, NULL, err);
}

int pgc_queue_retry(pgc_queue *q, int64_t id, pgc_error *err)
{
	int rc;
	PGresult *res = run_on_job(q, "pgc_queue_retry", id, "SELECT @S@.retry($1::bigint)", &rc, err);
	if (res == NULL)
		return refusal(rc, err); /* 23505: the history row stays where it was */
	PQclear(res);
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

/* One batch of each operation: SQL bulk_cancel(), bulk_retry(), bulk_purge(), with the filters
 * $1..$5, the last id of the batch before ($6) and the batch size ($7). Each returns the jobs
 * it picked, the highest id among them, the jobs done. */
static const char *const bulk_batch[] = {
	[PGC_BULK_CANCEL] = "SELECT picked, last_id, done FROM @S@.bulk_cancel($1, $2, $3::bigint, $4,"
	                    " $5::bigint, $6::bigint, $7::int)",
	[PGC_BULK_RETRY] = "SELECT picked, last_id, done FROM @S@.bulk_retry($1, $2, $3::bigint, $4,"
	                   " $5::bigint, $6::bigint, $7::int)",
	[PGC_BULK_PURGE] = "SELECT picked, last_id, done FROM @S@.bulk_purge($1, $2, $3::bigint, $4,"
	                   " $5::bigint, $6::bigint, $7::int)",
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
	char age[24], upto[24], after[24] = "0", lim[16];
	char *sql = pgc__sql_schema(bulk_batch[b->op], q->quoted);
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
	        "SELECT aging_ms, succeeded_retention_ms, failed_retention_ms, max_payload_bytes"
	        " FROM @S@.queue_config()", 0, NULL, &rc, err);
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
	        "SELECT @S@.queue_config_set($1::bigint, $2::bigint, $3::bigint, $4::int)", 4, v, &rc, err);
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

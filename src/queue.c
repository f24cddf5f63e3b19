/* queue.c - the job queue: enqueue, claim, complete/fail/retry, heartbeat, reaper, admin
 *
 * Every statement is constant text with the quoted schema name put in once, when the handle is
 * opened; values travel as parameters, arrays as array literals in one parameter. The hot
 * statements are prepared once per handle. Correctness lives in the statements themselves:
 * a claim is one WITH ... FOR UPDATE SKIP LOCKED ... UPDATE ... RETURNING; every change to a
 * running job names its id and claim token and its WHERE clause requires status = 'running'
 * with that token, so a stale caller changes nothing. */
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "internal.h"
#include "queue_int.h"

static atomic_int handle_seq;

/* ---- statements ----------------------------------------------------------------------------- */

/* Templates: every "@S@" becomes the quoted schema name. */
static const char *const templates[QS_COUNT] = {
	[QS_ENQUEUE] =
	"SELECT ord, id FROM @S@.enqueue($1, $2::text[], $3::text[], $4::int,"
	" coalesce($5::timestamptz, clock_timestamp() + $6::bigint * interval '1 millisecond'), $7::int)",

	[QS_CLAIM] =
	"WITH picked AS MATERIALIZED ("
	" SELECT id FROM @S@.jobs"
	" WHERE queue = $1 AND status = 'pending' AND run_at <= clock_timestamp()"
	"  AND NOT EXISTS (SELECT 1 FROM @S@.queues WHERE name = $1 AND paused)"
	" ORDER BY eff_priority DESC, run_at, id"
	" LIMIT $2 FOR UPDATE SKIP LOCKED)"
	" UPDATE @S@.jobs j SET status = 'running', attempts = j.attempts + 1,"
	"  token = nextval((SELECT token_seq FROM @S@.queue_settings)),"
	"  lease_until = clock_timestamp() + $3::bigint * interval '1 millisecond',"
	"  worker = $4, started_at = clock_timestamp()"
	" WHERE j.id = ANY (ARRAY(SELECT id FROM picked))"
	" RETURNING j.id, j.token, j.attempts, j.max_attempts, j.priority, j.payload",

	[QS_COMPLETE] =
	"WITH done AS ("
	" DELETE FROM @S@.jobs j"
	" WHERE j.id = ANY ($1::bigint[]) AND j.token = ANY ($2::bigint[]) AND j.status = 'running'"
	" RETURNING j.*),"
	" kept AS (INSERT INTO @S@.job_history (id, queue, status, priority, run_at, attempts,"
	"  max_attempts, worker, last_error, errors, unique_key, created_at, started_at, payload)"
	" SELECT id, queue, 'succeeded', priority, run_at, attempts, max_attempts, worker, NULL,"
	"  errors, unique_key, created_at, started_at, payload FROM done"
	" WHERE (SELECT succeeded_retention > interval '0' FROM @S@.queue_settings))"
	" SELECT id FROM done",

	[QS_FAIL] =
	"WITH j AS MATERIALIZED ("
	" SELECT id, attempts, max_attempts,"
	"  clock_timestamp() + least($4::float8 * power(2, attempts - 1), $5::float8)"
	"   * (0.5 + random() * 0.5) * interval '1 millisecond' AS next_at"
	" FROM @S@.jobs"
	" WHERE id = $1::bigint AND token = $2::bigint AND status = 'running' FOR UPDATE),"
	" dead AS (DELETE FROM @S@.jobs d"
	"  WHERE d.id = $1 AND (SELECT attempts >= max_attempts FROM j) RETURNING d.*),"
	" hist AS (INSERT INTO @S@.job_history (id, queue, status, priority, run_at, attempts,"
	"  max_attempts, worker, last_error, errors, unique_key, created_at, started_at, payload)"
	" SELECT id, queue, 'failed', priority, run_at, attempts, max_attempts, worker, $3,"
	"  @S@.push_error(errors, attempts, $3), unique_key, created_at, started_at, payload FROM dead),"
	" again AS (UPDATE @S@.jobs u SET token = NULL, lease_until = NULL,"
	"  status = CASE WHEN (SELECT next_at FROM j) > clock_timestamp() THEN 'scheduled'"
	"   ELSE 'pending' END,"
	"  last_error = $3, errors = @S@.push_error(u.errors, u.attempts, $3),"
	"  eff_priority = u.priority, run_at = (SELECT next_at FROM j)"
	"  WHERE u.id = $1 AND (SELECT attempts < max_attempts FROM j) RETURNING u.id)"
	" SELECT (SELECT count(*) FROM dead), (SELECT count(*) FROM again)",

	[QS_SNOOZE] =
	"UPDATE @S@.jobs SET token = NULL, lease_until = NULL,"
	" status = CASE WHEN $3::bigint > 0 THEN 'scheduled' ELSE 'pending' END,"
	" attempts = greatest(attempts - 1, 0), eff_priority = priority,"
	" run_at = clock_timestamp() + $3::bigint * interval '1 millisecond'"
	" WHERE id = $1 AND token = $2 AND status = 'running' RETURNING id",

	[QS_HEARTBEAT] =
	"UPDATE @S@.jobs j SET lease_until = clock_timestamp() + $3::bigint * interval '1 millisecond'"
	" WHERE j.id = ANY ($1::bigint[]) AND j.token = ANY ($2::bigint[]) AND j.status = 'running'"
	" RETURNING j.id",

	[QS_RELEASE] =
	"WITH r AS (UPDATE @S@.jobs j SET status = 'pending', token = NULL, lease_until = NULL,"
	"  attempts = greatest(j.attempts - $3::int, 0), eff_priority = j.priority,"
	"  run_at = clock_timestamp()"
	" WHERE j.id = ANY ($1::bigint[]) AND j.token = ANY ($2::bigint[]) AND j.status = 'running'"
	" RETURNING j.queue)"
	" SELECT count(*), count(pg_notify(s.channel, q.queue))"
	" FROM (SELECT DISTINCT queue FROM r) q, @S@.queue_settings s",

	[QS_PROMOTE] =
	"UPDATE @S@.jobs SET status = 'pending'"
	" WHERE id = ANY (ARRAY(SELECT id FROM @S@.jobs"
	"  WHERE queue = $1 AND status = 'scheduled' AND run_at <= statement_timestamp()"
	"  ORDER BY run_at LIMIT 1000 FOR UPDATE SKIP LOCKED)) AND status = 'scheduled'",

	[QS_NEXT_RUN] =
	"SELECT extract(epoch FROM (min(x.run_at) - clock_timestamp())) * 1000"
	" FROM unnest($1::text[]) AS u(q)"
	" CROSS JOIN LATERAL (SELECT run_at FROM @S@.jobs"
	"  WHERE queue = u.q AND status = 'scheduled' ORDER BY run_at LIMIT 1) x"
	" WHERE NOT EXISTS (SELECT 1 FROM @S@.queues WHERE name = u.q AND paused)",
};

static char *expand_schema(const char *tmpl, const char *quoted)
{
	pgc__sb b = PGC__SB_INIT;
	const char *p = tmpl, *hit;
	while ((hit = strstr(p, "@S@")) != NULL) {
		if (pgc__sb_grow(&b, (size_t)(hit - p))) {
			memcpy(b.buf + b.len, p, (size_t)(hit - p));
			b.len += (size_t)(hit - p);
			b.buf[b.len] = '\0';
		}
		pgc__sb_puts(&b, quoted);
		p = hit + 3;
	}
	pgc__sb_puts(&b, p);
	if (b.oom) {
		pgc__sb_free(&b);
		return NULL;
	}
	return b.buf;
}

char *pgc__queue_sql(pgc_queue *q, const char *tmpl)
{
	return expand_schema(tmpl, q->quoted);
}

PGresult *pgc__queue_run(pgc_queue *q, int stmt, int nparams, const char *const *values, int *rc,
                         pgc_error *err)
{
	PGconn *pg = pgc_conn_pg(q->conn);
	PGresult *res;
	if (q->prepare) {
		if (!q->prepared[stmt]) {
			res = PQprepare(pg, q->stmt_name[stmt], q->sql[stmt], 0, NULL);
			if (res == NULL || PQresultStatus(res) != PGRES_COMMAND_OK) {
				*rc = pgc__err_result(err, pg, res, NULL);
				PQclear(res);
				return NULL;
			}
			PQclear(res);
			q->prepared[stmt] = true;
		}
		res = PQexecPrepared(pg, q->stmt_name[stmt], nparams, values, NULL, NULL, 0);
	} else {
		res = PQexecParams(pg, q->sql[stmt], nparams, NULL, values, NULL, NULL, 0);
	}
	ExecStatusType st = res ? PQresultStatus(res) : PGRES_FATAL_ERROR;
	if (st == PGRES_COMMAND_OK || st == PGRES_TUPLES_OK) {
		*rc = PGC_OK;
		return res;
	}
	*rc = pgc__err_result(err, pg, res, NULL);
	PQclear(res);
	return NULL;
}

/* Runs ad-hoc text (already expanded) with parameters. */
static PGresult *run_text(pgc_queue *q, const char *tmpl, int nparams, const char *const *values,
                          int *rc, pgc_error *err)
{
	char *sql = pgc__queue_sql(q, tmpl);
	if (sql == NULL) {
		*rc = pgc__err(err, PGC_ENOMEM, "out of memory");
		return NULL;
	}
	PGresult *res = pgc__exec(q->conn, sql, nparams, values, rc, err);
	free(sql);
	return res;
}

/* ---- handle ----------------------------------------------------------------------------- */

static int check_queue_name(const char *fn, const char *queue, pgc_error *err)
{
	if (queue == NULL || *queue == '\0')
		return pgc__err(err, PGC_EUSAGE, "%s: queue name is empty", fn);
	if (strlen(queue) > PGC_QUEUE_NAME_MAX)
		return pgc__err(err, PGC_EUSAGE, "%s: queue name is longer than %d bytes", fn,
		                PGC_QUEUE_NAME_MAX);
	return PGC_OK;
}

int pgc_queue_open(pgc_conn *conn, const pgc_queue_options *opts, pgc_queue **out, pgc_error *err)
{
	pgc_error_clear(err);
	if (conn == NULL || out == NULL)
		return pgc__err(err, PGC_EUSAGE, "pgc_queue_open: conn and out must not be NULL");
	*out = NULL;
	pgc_queue_options defaults = PGC_QUEUE_OPTIONS_INIT;
	if (opts == NULL)
		opts = &defaults;
	const char *schema = opts->schema ? opts->schema : PGC_SCHEMA_DEFAULT;
	if (*schema == '\0' || strlen(schema) > 63)
		return pgc__err(err, PGC_EUSAGE, "pgc_queue_open: schema name is empty or longer than 63 bytes");
	pgc_queue *q = calloc(1, sizeof *q);
	if (q == NULL)
		return pgc__err(err, PGC_ENOMEM, "out of memory");
	q->conn = conn;
	q->prepare = opts->prepare;
	q->schema = strdup(schema);
	q->quoted = pgc__quote_ident(conn, schema, err);
	if (q->schema == NULL || q->quoted == NULL) {
		int rc = q->schema == NULL ? pgc__err(err, PGC_ENOMEM, "out of memory") : PGC_EUSAGE;
		pgc_queue_close(q);
		return rc;
	}
	int seq = atomic_fetch_add(&handle_seq, 1);
	for (int i = 0; i < QS_COUNT; i++) {
		q->sql[i] = expand_schema(templates[i], q->quoted);
		snprintf(q->stmt_name[i], sizeof q->stmt_name[i], "pgcq_%d_%d", seq, i);
		if (q->sql[i] == NULL) {
			pgc_queue_close(q);
			return pgc__err(err, PGC_ENOMEM, "out of memory");
		}
	}
	/* Is the queue schema there? Also learn the notification channel. */
	const char *p[1] = { schema };
	int rc;
	PGresult *res = pgc__exec(conn,
	        "SELECT EXISTS (SELECT 1 FROM pg_catalog.pg_class c"
	        " JOIN pg_catalog.pg_namespace n ON n.oid = c.relnamespace"
	        " WHERE n.nspname = $1 AND c.relname = 'queue_settings')", 1, p, &rc, err);
	if (res == NULL) {
		pgc_queue_close(q);
		return rc;
	}
	bool exists = strcmp(PQgetvalue(res, 0, 0), "t") == 0;
	PQclear(res);
	if (!exists) {
		pgc_queue_close(q);
		return pgc__err(err, PGC_ENOSCHEMA,
		                "the queue tables are not installed in schema %s: run pgcoord init", schema);
	}
	res = run_text(q, "SELECT channel FROM @S@.queue_settings", 0, NULL, &rc, err);
	if (res == NULL) {
		pgc_queue_close(q);
		return rc;
	}
	if (PQntuples(res) == 1)
		snprintf(q->channel, sizeof q->channel, "%s", PQgetvalue(res, 0, 0));
	PQclear(res);
	*out = q;
	return PGC_OK;
}

void pgc_queue_close(pgc_queue *q)
{
	if (q == NULL)
		return;
	/* Drop our prepared statements when the session can take it, so a long-lived connection
	 * that opens many handles does not collect them. */
	if (q->conn && pgc_conn_pg(q->conn) && PQstatus(pgc_conn_pg(q->conn)) == CONNECTION_OK &&
	    PQtransactionStatus(pgc_conn_pg(q->conn)) == PQTRANS_IDLE &&
	    PQpipelineStatus(pgc_conn_pg(q->conn)) == PQ_PIPELINE_OFF) {
		for (int i = 0; i < QS_COUNT; i++) {
			if (!q->prepared[i])
				continue;
			char sql[64];
			snprintf(sql, sizeof sql, "DEALLOCATE %s", q->stmt_name[i]);
			PQclear(PQexec(pgc_conn_pg(q->conn), sql));
		}
	}
	for (int i = 0; i < QS_COUNT; i++)
		free(q->sql[i]);
	free(q->schema);
	if (q->quoted)
		PQfreemem(q->quoted);
	free(q);
}

const char *pgc_queue_channel(const pgc_queue *q)
{
	return q ? q->channel : NULL;
}

/* ---- enqueue -------------------------------------------------------------------------------- */

static int check_job_options(const char *fn, const pgc_job_options *o, pgc_error *err)
{
	if (o->priority < PGC_QUEUE_PRIORITY_MIN || o->priority > PGC_QUEUE_PRIORITY_MAX)
		return pgc__err(err, PGC_EUSAGE, "%s: priority %d is out of range %d..%d", fn, o->priority,
		                PGC_QUEUE_PRIORITY_MIN, PGC_QUEUE_PRIORITY_MAX);
	if (o->delay_ms < 0)
		return pgc__err(err, PGC_EUSAGE, "%s: delay must not be negative", fn);
	if (o->run_at != NULL && o->delay_ms != 0)
		return pgc__err(err, PGC_EUSAGE, "%s: give run_at or a delay, not both", fn);
	if (o->run_at != NULL && *o->run_at == '\0')
		return pgc__err(err, PGC_EUSAGE, "%s: run_at is empty", fn);
	if (o->max_attempts < 0)
		return pgc__err(err, PGC_EUSAGE, "%s: max_attempts must be at least 1, not %d", fn,
		                o->max_attempts);
	return PGC_OK;
}

int pgc__queue_enqueue_arrays(pgc_queue *q, const char *queue, const char *payload_array,
                              const char *key_array, const pgc_job_options *o, PGresult **out,
                              long *bad_index, pgc_error *err)
{
	char prio[16], delay[24], maxa[16];
	snprintf(prio, sizeof prio, "%d", o->priority);
	snprintf(delay, sizeof delay, "%lld", (long long)o->delay_ms);
	snprintf(maxa, sizeof maxa, "%d", o->max_attempts ? o->max_attempts : PGC_QUEUE_MAX_ATTEMPTS_DEFAULT);
	const char *v[7] = { queue, payload_array, key_array, prio, o->run_at, delay, maxa };
	PGconn *pg = pgc_conn_pg(q->conn);
	PGresult *res;
	int rc = PGC_OK;
	if (q->prepare && !q->prepared[QS_ENQUEUE]) {
		res = PQprepare(pg, q->stmt_name[QS_ENQUEUE], q->sql[QS_ENQUEUE], 0, NULL);
		if (res == NULL || PQresultStatus(res) != PGRES_COMMAND_OK) {
			rc = pgc__err_result(err, pg, res, NULL);
			PQclear(res);
			return rc;
		}
		PQclear(res);
		q->prepared[QS_ENQUEUE] = true;
	}
	res = q->prepare ? PQexecPrepared(pg, q->stmt_name[QS_ENQUEUE], 7, v, NULL, NULL, 0)
	                 : PQexecParams(pg, q->sql[QS_ENQUEUE], 7, NULL, v, NULL, NULL, 0);
	if (res != NULL && PQresultStatus(res) == PGRES_TUPLES_OK) {
		*out = res;
		return PGC_OK;
	}
	/* The server names a bad payload's 1-based position in the error's column field. */
	const char *col = res ? PQresultErrorField(res, PG_DIAG_COLUMN_NAME) : NULL;
	if (bad_index != NULL && col != NULL && *col >= '0' && *col <= '9')
		*bad_index = atol(col) - 1;
	rc = pgc__err_result(err, pg, res, NULL);
	PQclear(res);
	return rc;
}

int pgc_queue_enqueue(pgc_queue *q, const char *queue, const char *payload,
                      const pgc_job_options *opts, int64_t *out_id, pgc_error *err)
{
	pgc_error_clear(err);
	if (out_id != NULL)
		*out_id = 0;
	if (q == NULL || payload == NULL)
		return pgc__err(err, PGC_EUSAGE, "pgc_queue_enqueue: q and payload must not be NULL");
	int rc = check_queue_name("pgc_queue_enqueue", queue, err);
	if (rc != PGC_OK)
		return rc;
	pgc_job_options defaults = PGC_JOB_OPTIONS_INIT;
	if (opts == NULL)
		opts = &defaults;
	if ((rc = check_job_options("pgc_queue_enqueue", opts, err)) != PGC_OK)
		return rc;
	pgc__sb pa = { 0 }, ka = { 0 };
	pgc__sb_text_array(&pa, 1, &payload);
	if (opts->unique_key != NULL)
		pgc__sb_text_array(&ka, 1, &opts->unique_key);
	if (pa.oom || ka.oom) {
		pgc__sb_free(&pa);
		pgc__sb_free(&ka);
		return pgc__err(err, PGC_ENOMEM, "out of memory");
	}
	PGresult *res = NULL;
	rc = pgc__queue_enqueue_arrays(q, queue, pa.buf, ka.buf, opts, &res, NULL, err);
	pgc__sb_free(&pa);
	pgc__sb_free(&ka);
	if (rc != PGC_OK)
		return rc;
	if (PQntuples(res) != 1) {
		int rows = PQntuples(res);
		PQclear(res);
		return pgc__err(err, PGC_EINTERNAL, "enqueue returned %d rows", rows);
	}
	if (PQgetisnull(res, 0, 1)) {
		PQclear(res);
		return pgc__err(err, PGC_EDUPLICATE,
		                "a job with unique key \"%.100s\" is already pending or running in queue %.100s",
		                opts->unique_key, queue);
	}
	if (out_id != NULL)
		*out_id = atoll(PQgetvalue(res, 0, 1));
	PQclear(res);
	return PGC_OK;
}

int pgc_queue_enqueue_many(pgc_queue *q, const char *queue, size_t n, const char *const *payloads,
                           const char *const *unique_keys, const pgc_job_options *opts,
                           int64_t *ids, size_t *inserted, long *bad_index, pgc_error *err)
{
	pgc_error_clear(err);
	if (inserted != NULL)
		*inserted = 0;
	if (bad_index != NULL)
		*bad_index = -1;
	if (q == NULL || (n > 0 && payloads == NULL))
		return pgc__err(err, PGC_EUSAGE, "pgc_queue_enqueue_many: q and payloads must not be NULL");
	int rc = check_queue_name("pgc_queue_enqueue_many", queue, err);
	if (rc != PGC_OK)
		return rc;
	pgc_job_options defaults = PGC_JOB_OPTIONS_INIT;
	if (opts == NULL)
		opts = &defaults;
	if (opts->unique_key != NULL)
		return pgc__err(err, PGC_EUSAGE, "pgc_queue_enqueue_many: give unique keys in unique_keys, not in opts");
	if ((rc = check_job_options("pgc_queue_enqueue_many", opts, err)) != PGC_OK)
		return rc;
	for (size_t i = 0; i < n; i++) {
		if (payloads[i] == NULL) {
			if (bad_index != NULL)
				*bad_index = (long)i;
			return pgc__err(err, PGC_EUSAGE, "pgc_queue_enqueue_many: payload %zu is NULL", i + 1);
		}
	}
	if (n == 0)
		return PGC_OK;
	pgc__sb pa = { 0 }, ka = { 0 };
	pgc__sb_text_array(&pa, n, payloads);
	if (unique_keys != NULL)
		pgc__sb_text_array(&ka, n, unique_keys);
	if (pa.oom || ka.oom) {
		pgc__sb_free(&pa);
		pgc__sb_free(&ka);
		return pgc__err(err, PGC_ENOMEM, "out of memory");
	}
	PGresult *res = NULL;
	rc = pgc__queue_enqueue_arrays(q, queue, pa.buf, ka.buf, opts, &res, bad_index, err);
	pgc__sb_free(&pa);
	pgc__sb_free(&ka);
	if (rc != PGC_OK)
		return rc;
	size_t count = 0;
	int rows = PQntuples(res);
	for (int r = 0; r < rows; r++) {
		long ord = atol(PQgetvalue(res, r, 0)) - 1;
		bool dup = PQgetisnull(res, r, 1);
		if (!dup)
			count++;
		if (ids != NULL && ord >= 0 && (size_t)ord < n)
			ids[ord] = dup ? 0 : atoll(PQgetvalue(res, r, 1));
	}
	PQclear(res);
	if (inserted != NULL)
		*inserted = count;
	return PGC_OK;
}

/* ---- claim, complete, fail ---------------------------------------------------------------- */

int pgc__queue_claim_result(PGresult *res, const char *queue, pgc_job **jobs, size_t *n)
{
	int rows = PQntuples(res);
	*jobs = NULL;
	*n = 0;
	if (rows == 0)
		return PGC_EEMPTY;
	size_t qlen = strlen(queue) + 1, total = 0;
	for (int r = 0; r < rows; r++)
		total += (size_t)PQgetlength(res, r, 5) + 1;
	/* One block: the array, then the queue name once, then the payloads. */
	size_t head = (size_t)rows * sizeof(pgc_job);
	char *block = malloc(head + qlen + total);
	if (block == NULL)
		return PGC_ENOMEM;
	pgc_job *a = (pgc_job *)block;
	char *qname = block + head;
	memcpy(qname, queue, qlen);
	char *p = qname + qlen;
	for (int r = 0; r < rows; r++) {
		a[r].id = atoll(PQgetvalue(res, r, 0));
		a[r].token = atoll(PQgetvalue(res, r, 1));
		a[r].attempt = atoi(PQgetvalue(res, r, 2));
		a[r].max_attempts = atoi(PQgetvalue(res, r, 3));
		a[r].priority = atoi(PQgetvalue(res, r, 4));
		a[r].queue = qname;
		size_t len = (size_t)PQgetlength(res, r, 5);
		memcpy(p, PQgetvalue(res, r, 5), len + 1);
		a[r].payload = p;
		a[r].internal = NULL;
		p += len + 1;
	}
	*jobs = a;
	*n = (size_t)rows;
	return PGC_OK;
}

int pgc_queue_claim(pgc_queue *q, const char *queue, int max, int64_t lease_ms,
                    const char *worker_id, pgc_job **jobs, size_t *n, pgc_error *err)
{
	pgc_error_clear(err);
	if (jobs != NULL)
		*jobs = NULL;
	if (n != NULL)
		*n = 0;
	if (q == NULL || jobs == NULL || n == NULL)
		return pgc__err(err, PGC_EUSAGE, "pgc_queue_claim: q, jobs and n must not be NULL");
	int rc = check_queue_name("pgc_queue_claim", queue, err);
	if (rc != PGC_OK)
		return rc;
	if (max < 1)
		return pgc__err(err, PGC_EUSAGE, "pgc_queue_claim: max must be at least 1");
	if (lease_ms < 1)
		return pgc__err(err, PGC_EUSAGE, "pgc_queue_claim: the lease must be at least 1 ms");
	char maxs[16], lease[24];
	snprintf(maxs, sizeof maxs, "%d", max);
	snprintf(lease, sizeof lease, "%lld", (long long)lease_ms);
	const char *v[4] = { queue, maxs, lease, worker_id };
	/* Scheduled jobs that are due become pending first. */
	PGresult *res = pgc__queue_run(q, QS_PROMOTE, 1, v, &rc, err);
	if (res == NULL)
		return rc;
	PQclear(res);
	res = pgc__queue_run(q, QS_CLAIM, 4, v, &rc, err);
	if (res == NULL)
		return rc;
	rc = pgc__queue_claim_result(res, queue, jobs, n);
	PQclear(res);
	if (rc == PGC_EEMPTY)
		return pgc__err(err, PGC_EEMPTY, "no runnable job in queue %.100s", queue);
	if (rc == PGC_ENOMEM)
		return pgc__err(err, PGC_ENOMEM, "out of memory (the claimed jobs return after their lease)");
	return rc;
}

void pgc_queue_jobs_free(pgc_job *jobs, size_t n)
{
	(void)n; /* one block */
	free(jobs);
}

/* Marks which of ids[] came back in column 0 of res. */
static size_t mark_returned(PGresult *res, size_t n, const int64_t *ids, bool *flags, bool present)
{
	int rows = PQntuples(res);
	if (flags != NULL)
		for (size_t i = 0; i < n; i++)
			flags[i] = !present;
	if (flags != NULL) {
		for (int r = 0; r < rows; r++) {
			int64_t id = atoll(PQgetvalue(res, r, 0));
			for (size_t i = 0; i < n; i++)
				if (ids[i] == id) {
					flags[i] = present;
					break;
				}
		}
	}
	return (size_t)rows;
}

static int id_token_arrays(size_t n, const int64_t *ids, const int64_t *tokens, pgc__sb *ia,
                           pgc__sb *ta, pgc_error *err)
{
	pgc__sb_int_array(ia, n, ids);
	pgc__sb_int_array(ta, n, tokens);
	if (ia->oom || ta->oom) {
		pgc__sb_free(ia);
		pgc__sb_free(ta);
		return pgc__err(err, PGC_ENOMEM, "out of memory");
	}
	return PGC_OK;
}

int pgc_queue_complete_many(pgc_queue *q, size_t n, const int64_t *ids, const int64_t *tokens,
                            bool *stale, size_t *done, pgc_error *err)
{
	pgc_error_clear(err);
	if (done != NULL)
		*done = 0;
	if (q == NULL || (n > 0 && (ids == NULL || tokens == NULL)))
		return pgc__err(err, PGC_EUSAGE, "pgc_queue_complete_many: q, ids and tokens must not be NULL");
	if (n == 0)
		return PGC_OK;
	pgc__sb ia = { 0 }, ta = { 0 };
	int rc = id_token_arrays(n, ids, tokens, &ia, &ta, err);
	if (rc != PGC_OK)
		return rc;
	const char *v[2] = { ia.buf, ta.buf };
	PGresult *res = pgc__queue_run(q, QS_COMPLETE, 2, v, &rc, err);
	pgc__sb_free(&ia);
	pgc__sb_free(&ta);
	if (res == NULL)
		return rc;
	size_t k = mark_returned(res, n, ids, stale, false);
	PQclear(res);
	if (done != NULL)
		*done = k;
	return PGC_OK;
}

int pgc_queue_complete(pgc_queue *q, int64_t id, int64_t token, pgc_error *err)
{
	size_t done = 0;
	int rc = pgc_queue_complete_many(q, 1, &id, &token, NULL, &done, err);
	if (rc != PGC_OK)
		return rc;
	if (done == 0)
		return pgc__err(err, PGC_ESTALE,
		                "job %lld is not running under token %lld: its lease expired or it was reclaimed",
		                (long long)id, (long long)token);
	return PGC_OK;
}

int pgc_queue_fail(pgc_queue *q, int64_t id, int64_t token, const char *error_text,
                   const pgc_backoff *backoff, bool *dead, pgc_error *err)
{
	pgc_error_clear(err);
	if (dead != NULL)
		*dead = false;
	if (q == NULL)
		return pgc__err(err, PGC_EUSAGE, "pgc_queue_fail: q must not be NULL");
	pgc_backoff def = PGC_BACKOFF_INIT;
	if (backoff == NULL)
		backoff = &def;
	if (backoff->base_ms < 0 || backoff->max_ms < 0)
		return pgc__err(err, PGC_EUSAGE, "pgc_queue_fail: backoff must not be negative");
	char ids[24], toks[24], base[24], maxb[24];
	snprintf(ids, sizeof ids, "%lld", (long long)id);
	snprintf(toks, sizeof toks, "%lld", (long long)token);
	snprintf(base, sizeof base, "%lld", (long long)backoff->base_ms);
	snprintf(maxb, sizeof maxb, "%lld", (long long)backoff->max_ms);
	const char *v[5] = { ids, toks, error_text ? error_text : "", base, maxb };
	int rc;
	PGresult *res = pgc__queue_run(q, QS_FAIL, 5, v, &rc, err);
	if (res == NULL)
		return rc;
	long d = atol(PQgetvalue(res, 0, 0)), again = atol(PQgetvalue(res, 0, 1));
	PQclear(res);
	if (d + again == 0)
		return pgc__err(err, PGC_ESTALE,
		                "job %lld is not running under token %lld: its lease expired or it was reclaimed",
		                (long long)id, (long long)token);
	if (dead != NULL)
		*dead = d > 0;
	return PGC_OK;
}

int pgc_queue_retry_later(pgc_queue *q, int64_t id, int64_t token, int64_t delay_ms, pgc_error *err)
{
	pgc_error_clear(err);
	if (q == NULL || delay_ms < 0)
		return pgc__err(err, PGC_EUSAGE, "pgc_queue_retry_later: q must not be NULL and delay_ms not negative");
	char ids[24], toks[24], d[24];
	snprintf(ids, sizeof ids, "%lld", (long long)id);
	snprintf(toks, sizeof toks, "%lld", (long long)token);
	snprintf(d, sizeof d, "%lld", (long long)delay_ms);
	const char *v[3] = { ids, toks, d };
	int rc;
	PGresult *res = pgc__queue_run(q, QS_SNOOZE, 3, v, &rc, err);
	if (res == NULL)
		return rc;
	int rows = PQntuples(res);
	PQclear(res);
	if (rows == 0)
		return pgc__err(err, PGC_ESTALE,
		                "job %lld is not running under token %lld: its lease expired or it was reclaimed",
		                (long long)id, (long long)token);
	return PGC_OK;
}

int pgc_queue_heartbeat(pgc_queue *q, size_t n, const int64_t *ids, const int64_t *tokens,
                        int64_t lease_ms, bool *lost, pgc_error *err)
{
	pgc_error_clear(err);
	if (q == NULL || (n > 0 && (ids == NULL || tokens == NULL)) || lease_ms < 1)
		return pgc__err(err, PGC_EUSAGE, "pgc_queue_heartbeat: q, ids and tokens must not be NULL, lease_ms >= 1");
	if (n == 0)
		return PGC_OK;
	pgc__sb ia = { 0 }, ta = { 0 };
	int rc = id_token_arrays(n, ids, tokens, &ia, &ta, err);
	if (rc != PGC_OK)
		return rc;
	char lease[24];
	snprintf(lease, sizeof lease, "%lld", (long long)lease_ms);
	const char *v[3] = { ia.buf, ta.buf, lease };
	PGresult *res = pgc__queue_run(q, QS_HEARTBEAT, 3, v, &rc, err);
	pgc__sb_free(&ia);
	pgc__sb_free(&ta);
	if (res == NULL)
		return rc;
	mark_returned(res, n, ids, lost, false);
	PQclear(res);
	return PGC_OK;
}

int pgc_queue_release(pgc_queue *q, size_t n, const int64_t *ids, const int64_t *tokens,
                      bool started, pgc_error *err)
{
	pgc_error_clear(err);
	if (q == NULL || (n > 0 && (ids == NULL || tokens == NULL)))
		return pgc__err(err, PGC_EUSAGE, "pgc_queue_release: q, ids and tokens must not be NULL");
	if (n == 0)
		return PGC_OK;
	pgc__sb ia = { 0 }, ta = { 0 };
	int rc = id_token_arrays(n, ids, tokens, &ia, &ta, err);
	if (rc != PGC_OK)
		return rc;
	const char *v[3] = { ia.buf, ta.buf, started ? "0" : "1" };
	PGresult *res = pgc__queue_run(q, QS_RELEASE, 3, v, &rc, err);
	pgc__sb_free(&ia);
	pgc__sb_free(&ta);
	if (res == NULL)
		return rc;
	PQclear(res);
	return PGC_OK;
}

/* ---- reaper ----------------------------------------------------------------------------- */

static const char reap_leases_sql[] =
	"WITH expired AS MATERIALIZED ("
	" SELECT id, token FROM @S@.jobs"
	" WHERE status = 'running' AND lease_until < clock_timestamp()"
	" ORDER BY id LIMIT 1000 FOR UPDATE SKIP LOCKED),"
	" dead AS (DELETE FROM @S@.jobs j"
	"  WHERE j.id = ANY (ARRAY(SELECT id FROM expired))"
	"  AND j.token = ANY (ARRAY(SELECT token FROM expired)) AND j.status = 'running'"
	"  AND j.attempts >= j.max_attempts RETURNING j.*),"
	" hist AS (INSERT INTO @S@.job_history (id, queue, status, priority, run_at, attempts,"
	"  max_attempts, worker, last_error, errors, unique_key, created_at, started_at, payload)"
	" SELECT id, queue, 'failed', priority, run_at, attempts, max_attempts, worker,"
	"  'lease expired (worker ' || coalesce(worker, '?') || ')',"
	"  @S@.push_error(errors, attempts, 'lease expired (worker ' || coalesce(worker, '?') || ')'),"
	"  unique_key, created_at, started_at, payload FROM dead),"
	" back AS (UPDATE @S@.jobs j SET status = 'pending', token = NULL, lease_until = NULL,"
	"  last_error = 'lease expired (worker ' || coalesce(j.worker, '?') || ')',"
	"  errors = @S@.push_error(j.errors, j.attempts,"
	"                          'lease expired (worker ' || coalesce(j.worker, '?') || ')'),"
	"  eff_priority = j.priority, run_at = clock_timestamp()"
	" WHERE j.id = ANY (ARRAY(SELECT id FROM expired))"
	"  AND j.token = ANY (ARRAY(SELECT token FROM expired)) AND j.status = 'running'"
	"  AND j.attempts < j.max_attempts RETURNING j.queue)"
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

int pgc_queue_reap(pgc_queue *q, pgc_reap_result *out, pgc_error *err)
{
	pgc_error_clear(err);
	pgc_reap_result r = { 0, 0, 0, 0 };
	if (out != NULL)
		*out = r;
	if (q == NULL)
		return pgc__err(err, PGC_EUSAGE, "pgc_queue_reap: q must not be NULL");
	if (pgc__in_transaction(q->conn))
		return pgc__err(err, PGC_EUSAGE, "pgc_queue_reap must run outside a transaction");
	int rc = pgc_exec(q->conn, "BEGIN", err);
	if (rc != PGC_OK)
		return rc;
	/* Small tables with no statistics yet make the planner guess large; JIT compiling these
	 * millisecond statements would take longer than running them. */
	if ((rc = pgc_exec(q->conn, "SET LOCAL jit = off", err)) != PGC_OK)
		goto fail;
	char key[32];
	snprintf(key, sizeof key, "%lld", (long long)PGC_QUEUE_REAPER_LOCK_KEY);
	const char *kp[1] = { key };
	PGresult *res = pgc__exec(q->conn, "SELECT pg_try_advisory_xact_lock($1::bigint)", 1, kp, &rc, err);
	if (res == NULL)
		goto fail;
	bool got = strcmp(PQgetvalue(res, 0, 0), "t") == 0;
	PQclear(res);
	if (!got) {
		PQclear(PQexec(pgc_conn_pg(q->conn), "ROLLBACK"));
		return pgc__err(err, PGC_EBUSY, "another reaper is running");
	}
	if ((res = run_text(q, reap_leases_sql, 0, NULL, &rc, err)) == NULL)
		goto fail;
	r.dead = atol(PQgetvalue(res, 0, 0));
	r.returned = atol(PQgetvalue(res, 0, 1));
	PQclear(res);
	if ((res = run_text(q, reap_aging_sql, 0, NULL, &rc, err)) == NULL)
		goto fail;
	r.aged = atol(PQcmdTuples(res));
	PQclear(res);
	if ((res = run_text(q, reap_history_sql, 0, NULL, &rc, err)) == NULL)
		goto fail;
	r.purged = atol(PQcmdTuples(res));
	PQclear(res);
	/* Workers that stopped refreshing their registration are gone. */
	if ((res = run_text(q, "DELETE FROM @S@.workers WHERE seen_at < clock_timestamp() - interval '1 minute'",
	                    0, NULL, &rc, err)) == NULL)
		goto fail;
	PQclear(res);
	if ((rc = pgc_exec(q->conn, "COMMIT", err)) != PGC_OK)
		return rc;
	if (out != NULL)
		*out = r;
	return PGC_OK;
fail:
	if (PQstatus(pgc_conn_pg(q->conn)) == CONNECTION_OK)
		PQclear(PQexec(pgc_conn_pg(q->conn), "ROLLBACK"));
	return rc;
}

int pgc_queue_vacuum(pgc_queue *q, long min_dead, bool *vacuumed, pgc_error *err)
{
	pgc_error_clear(err);
	if (vacuumed != NULL)
		*vacuumed = false;
	if (q == NULL || min_dead < 0)
		return pgc__err(err, PGC_EUSAGE, "pgc_queue_vacuum: q must not be NULL and min_dead not negative");
	if (pgc__in_transaction(q->conn))
		return pgc__err(err, PGC_EUSAGE, "pgc_queue_vacuum must run outside a transaction");
	int rc;
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
	char *sql = pgc__queue_sql(q, "VACUUM (SKIP_LOCKED) @S@.jobs");
	if (sql == NULL)
		rc = pgc__err(err, PGC_ENOMEM, "out of memory");
	else
		rc = pgc_exec(q->conn, sql, err);
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
	if (q == NULL)
		return pgc__err(err, PGC_EUSAGE, "pgc_queue_pause: q must not be NULL");
	int rc = check_queue_name("pgc_queue_pause", queue, err);
	if (rc != PGC_OK)
		return rc;
	const char *v[2] = { queue, paused ? "t" : "f" };
	PGresult *res = run_text(q,
	        "WITH u AS (INSERT INTO @S@.queues (name, paused) VALUES ($1, $2::boolean)"
	        " ON CONFLICT (name) DO UPDATE SET paused = excluded.paused RETURNING paused)"
	        " SELECT CASE WHEN NOT u.paused THEN pg_notify(s.channel, $1) END"
	        " FROM u, @S@.queue_settings s", 2, v, &rc, err);
	if (res == NULL)
		return rc;
	PQclear(res);
	return PGC_OK;
}

static const char history_cols[] =
	"id, queue, status, priority, run_at, attempts, max_attempts, worker, last_error, errors,"
	" unique_key, created_at, started_at, payload";

int pgc_queue_cancel(pgc_queue *q, int64_t id, pgc_error *err)
{
	pgc_error_clear(err);
	if (q == NULL || id <= 0)
		return pgc__err(err, PGC_EUSAGE, "pgc_queue_cancel: q must not be NULL and id positive");
	char ids[24];
	snprintf(ids, sizeof ids, "%lld", (long long)id);
	const char *v[1] = { ids };
	char sql[1024];
	snprintf(sql, sizeof sql,
	         "WITH j AS MATERIALIZED (SELECT id, status FROM @S@.jobs WHERE id = $1::bigint FOR UPDATE),"
	         " d AS (DELETE FROM @S@.jobs x WHERE x.id = $1::bigint"
	         "  AND (SELECT status <> 'running' FROM j) RETURNING x.*),"
	         " h AS (INSERT INTO @S@.job_history (%s)"
	         "  SELECT id, queue, 'cancelled', priority, run_at, attempts, max_attempts, worker,"
	         "   last_error, errors, unique_key, created_at, started_at, payload FROM d)"
	         " SELECT (SELECT status FROM j), (SELECT count(*) FROM d)", history_cols);
	int rc;
	PGresult *res = run_text(q, sql, 1, v, &rc, err);
	if (res == NULL)
		return rc;
	bool none = PQgetisnull(res, 0, 0);
	long done = atol(PQgetvalue(res, 0, 1));
	PQclear(res);
	if (none)
		return pgc__err(err, PGC_ENOTFOUND, "no pending or scheduled job with id %lld", (long long)id);
	if (done == 0)
		return pgc__err(err, PGC_EBUSY, "job %lld is running and cannot be cancelled", (long long)id);
	return PGC_OK;
}

int pgc_queue_retry(pgc_queue *q, int64_t id, pgc_error *err)
{
	pgc_error_clear(err);
	if (q == NULL || id <= 0)
		return pgc__err(err, PGC_EUSAGE, "pgc_queue_retry: q must not be NULL and id positive");
	char ids[24];
	snprintf(ids, sizeof ids, "%lld", (long long)id);
	const char *v[1] = { ids };
	int rc;
	PGresult *res = run_text(q,
	        "WITH h AS MATERIALIZED (SELECT * FROM @S@.job_history WHERE id = $1::bigint"
	        "  AND status IN ('failed', 'cancelled') FOR UPDATE),"
	        " ins AS (INSERT INTO @S@.jobs (id, queue, status, priority, eff_priority, run_at,"
	        "  attempts, max_attempts, last_error, errors, unique_key, created_at, payload)"
	        "  SELECT id, queue, 'pending', priority, priority, clock_timestamp(), 0, max_attempts,"
	        "   last_error, errors, unique_key, created_at, payload FROM h"
	        "  ON CONFLICT (queue, unique_key) WHERE unique_key IS NOT NULL DO NOTHING"
	        "  RETURNING id, queue),"
	        " del AS (DELETE FROM @S@.job_history x WHERE x.id = ANY (ARRAY(SELECT id FROM ins)))"
	        " SELECT (SELECT count(*) FROM h), (SELECT count(*) FROM ins),"
	        "  (SELECT count(pg_notify(s.channel, ins.queue)) FROM ins, @S@.queue_settings s)",
	        1, v, &rc, err);
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
	static const char *const all[] = { "scheduled", "pending", "running", "succeeded", "failed",
	                                   "cancelled" };
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
	if (queue != NULL) {
		int rc = check_queue_name("pgc_queue_purge", queue, err);
		if (rc != PGC_OK)
			return rc;
	}
	char age[24];
	snprintf(age, sizeof age, "%lld", (long long)older_than_ms);
	const char *v[3] = { queue, status, age };
	int rc;
	PGresult *res = run_text(q,
	        "DELETE FROM @S@.job_history WHERE ($1::text IS NULL OR queue = $1)"
	        " AND ($2::text IS NULL OR status = $2)"
	        " AND finished_at < statement_timestamp() - $3::bigint * interval '1 millisecond'",
	        3, v, &rc, err);
	if (res == NULL)
		return rc;
	if (purged != NULL)
		*purged = atol(PQcmdTuples(res));
	PQclear(res);
	return PGC_OK;
}

int pgc_queue_config_get(pgc_queue *q, pgc_queue_config *out, pgc_error *err)
{
	pgc_error_clear(err);
	if (q == NULL || out == NULL)
		return pgc__err(err, PGC_EUSAGE, "pgc_queue_config_get: q and out must not be NULL");
	int rc;
	PGresult *res = run_text(q,
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
	PGresult *res = run_text(q,
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
	if (queue != NULL) {
		int rc = check_queue_name("pgc_queue_stats", queue, err);
		if (rc != PGC_OK)
			return rc;
	}
	const char *v[1] = { queue };
	int rc;
	PGresult *res = run_text(q,
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
	        " coalesce(extract(epoch FROM statement_timestamp() - least("
	        "   (SELECT run_at FROM @S@.jobs WHERE queue = q.name AND status = 'pending'"
	        "     AND eff_priority < 32768 ORDER BY run_at LIMIT 1),"
	        "   (SELECT run_at FROM @S@.jobs WHERE queue = q.name AND status = 'pending'"
	        "     AND eff_priority = 32768 ORDER BY run_at LIMIT 1),"
	        "   (SELECT run_at FROM @S@.jobs WHERE queue = q.name AND status = 'scheduled'"
	        "     AND run_at <= statement_timestamp() ORDER BY run_at LIMIT 1))), 0),"
	        " (SELECT count(*) FROM @S@.job_history WHERE queue = q.name AND status = 'succeeded'"
	        "   AND finished_at > statement_timestamp() - interval '1 minute'),"
	        " (SELECT count(*) FROM @S@.job_history WHERE queue = q.name AND status = 'failed'"
	        "   AND finished_at > statement_timestamp() - interval '1 minute')"
	        " FROM @S@.queues q WHERE $1::text IS NULL OR q.name = $1 ORDER BY q.name",
	        1, v, &rc, err);
	if (res == NULL)
		return rc;
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
	}
	PQclear(res);
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
 * finished_at lease_until worker last_error errors unique_key payload. */
#define INFO_COLS 17

static pgc_job_info *info_from_row(PGresult *res, int r)
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
	                                  &info->payload };
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
	return info;
}

#define TS(x) "to_json(" x ")#>>'{}'"
static const char info_select[] =
	"SELECT * FROM ("
	" SELECT id, queue, status, priority, eff_priority > 32767 AS aged, attempts, max_attempts,"
	"  " TS("run_at") ", " TS("created_at") ", " TS("started_at") ", NULL::text AS finished_at,"
	"  " TS("lease_until") ", worker, last_error, errors::text, unique_key, payload::text"
	" FROM @S@.jobs WHERE %s"
	" UNION ALL"
	" SELECT id, queue, status, priority, false, attempts, max_attempts,"
	"  " TS("run_at") ", " TS("created_at") ", " TS("started_at") ", " TS("finished_at") ","
	"  NULL, worker, last_error, errors::text, unique_key, payload::text"
	" FROM @S@.job_history WHERE %s) x ORDER BY id DESC LIMIT %s";

int pgc_queue_show(pgc_queue *q, int64_t id, pgc_job_info **out, pgc_error *err)
{
	pgc_error_clear(err);
	if (out != NULL)
		*out = NULL;
	if (q == NULL || out == NULL || id <= 0)
		return pgc__err(err, PGC_EUSAGE, "pgc_queue_show: q and out must not be NULL, id positive");
	char sql[2048], ids[24];
	snprintf(sql, sizeof sql, info_select, "id = $1::bigint", "id = $1::bigint", "1");
	snprintf(ids, sizeof ids, "%lld", (long long)id);
	const char *v[1] = { ids };
	int rc;
	PGresult *res = run_text(q, sql, 1, v, &rc, err);
	if (res == NULL)
		return rc;
	if (PQntuples(res) == 0) {
		PQclear(res);
		return pgc__err(err, PGC_ENOTFOUND, "no job with id %lld", (long long)id);
	}
	*out = info_from_row(res, 0);
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
	if (status != NULL && !valid_status(status))
		return pgc__err(err, PGC_EUSAGE,
		                "unknown status \"%.40s\": use scheduled, pending, running, succeeded, failed or cancelled", status);
	char sql[2048], lim[24];
	const char *where = "($1::text IS NULL OR queue = $1) AND ($2::text IS NULL OR status = $2)";
	snprintf(sql, sizeof sql, info_select, where, where, "$3::bigint");
	snprintf(lim, sizeof lim, "%ld", limit);
	const char *v[3] = { queue, status, lim };
	int rc;
	PGresult *res = run_text(q, sql, 3, v, &rc, err);
	if (res == NULL)
		return rc;
	int rows = PQntuples(res);
	pgc_job_info **a = calloc(rows ? (size_t)rows : 1, sizeof *a);
	if (a == NULL) {
		PQclear(res);
		return pgc__err(err, PGC_ENOMEM, "out of memory");
	}
	for (int r = 0; r < rows; r++) {
		a[r] = info_from_row(res, r);
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

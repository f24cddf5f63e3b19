/* queue.c - the job queue's hot path: enqueue, claim, complete/fail/retry, heartbeat, release
 *
 * Every statement is constant text with the quoted schema name put in once, when the handle is
 * opened; values travel as parameters, arrays as array literals in one parameter. Every one
 * goes through the connection layer; the hot ones through the session's statement cache, which
 * every handle on the session shares (a handle opened with prepare = false stays out of it).
 * Each statement calls one function of the protocol (docs/PROTOCOL.md), where correctness
 * lives: a claim is one FOR UPDATE SKIP LOCKED ... UPDATE ... RETURNING (claim()); every change
 * to a running job names its id and claim token and requires status = 'running' with that
 * token, so a stale caller changes nothing. */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "queue_int.h"

/* ---- statements ----------------------------------------------------------------------------- */

/* Templates: every "@S@" becomes the quoted schema name. */
static const char *const templates[QS_COUNT] = {
	[QS_ENQUEUE] =
	("SELECT ord, id FROM @S@.enqueue($1, $2::text[], $3::text[], $4::int,"
	 " coalesce($5::timestamptz, clock_timestamp() + $6::bigint * interval '1 millisecond'), $7::int,"
	 " $8::int, $9::text, $10::bigint[], $11::boolean, $12::text)"),

	/* Every statement of a job's life is a call of the protocol's function (docs/PROTOCOL.md,
	 * src/schema/functions/): the library calls what any client calls. */
	[QS_CLAIM] =
	("SELECT id, token, attempts, max_attempts, priority, payload, key"
	 " FROM @S@.claim($1, $2::int, $3::bigint, $4)"),

	/* $3, $4 and $5: NULL, or one element per job in the order of $1 (what a command ended
	 * with, the handler's result). */
	[QS_COMPLETE] =
	"SELECT id FROM @S@.complete($1::bigint[], $2::bigint[], $3::int[], $4::text[], $5::jsonb[])",

	[QS_FAIL] =
	"SELECT @S@.fail($1::bigint, $2::bigint, $3, $4::bigint, $5::bigint, $6::int, $7, $8::bigint)",

	[QS_SNOOZE] = "SELECT @S@.retry_later($1::bigint, $2::bigint, $3::bigint)",

	[QS_HEARTBEAT] = "SELECT id, status FROM @S@.renew($1::bigint[], $2::bigint[], $3::bigint)",

	[QS_RELEASE] = "SELECT @S@.release($1::bigint[], $2::bigint[], $3::boolean)",

	[QS_JOB_RESULT] = "SELECT status, result FROM @S@.job_result($1::bigint)",

	/* The next scheduled run_at, or the next start a rate allows to pending jobs, in ms
	 * (next_run_ms(): a function, so that its plan is made once per session). */
	[QS_NEXT_RUN] = "SELECT @S@.next_run_ms($1::text[])",
};

/* The handle's statement stmt, as one call under the session's default bound. A cached
 * statement whose Parse the server refused as a duplicate (42P05) did not run, yet comes back
 * as an empty result: that is an error here, not an answer without rows. */
static PGresult *run_stmt(pgc_queue *q, int stmt, int n, const char *const *vals, unsigned flags,
                          int *rc, pgc_error *err)
{
	pgc__call call = PGC__CALL_INIT;
	call.flags = q->flags | flags;
	PGresult *res = pgc__query(q->conn, q->sql[stmt], n, vals, &call, rc, err);
	if (*rc == PGC_OK && PQresultStatus(res) == PGRES_EMPTY_QUERY) {
		PQclear(res);
		*rc = pgc__err(err, PGC_EINTERNAL, "the server did not run the statement");
		return NULL;
	}
	return res;
}

PGresult *pgc__queue_run(pgc_queue *q, int stmt, int n, const char *const *vals, int *rc,
                         pgc_error *err)
{
	return run_stmt(q, stmt, n, vals, 0, rc, err);
}

/* A job's end (complete, fail) outside the caller's transaction, run again when it lost a
 * deadlock: it was its own transaction, so nothing of it happened. An enqueue with
 * dependencies locks the dependencies' rows in id order (enqueue()), while a batch
 * completion deletes its rows in the order its plan reads them (a bitmap scan reads the heap's
 * order), so the two can wait for each other; the server breaks the cycle by aborting one.
 * Deleting in id order would remove the cycle at the price of a lock record per job on the
 * hot path, not measured yet. Inside the caller's transaction the deadlock aborted that
 * transaction: the caller decides (pgc_tx_run retries 40P01). */
static PGresult *run_end(pgc_queue *q, int stmt, int n, const char *const *vals, int *rc, pgc_error *err)
{
	bool own = q->conn != NULL && !pgc__in_transaction(q->conn);
	for (int attempt = 1;; attempt++) {
		pgc_error e = PGC_ERROR_INIT;
		PGresult *res = pgc__queue_run(q, stmt, n, vals, rc, &e);
		if (res != NULL)
			return res;
		if (!own || attempt == 5 || *rc != PGC_ESQL || strcmp(e.sqlstate, "40P01") != 0) {
			if (err != NULL)
				*err = e;
			return NULL;
		}
	}
}

int pgc__queue_batch_add(pgc_queue *q, pgc__batch *b, int stmt, int n, const char *const *vals)
{
	return pgc__batch_add(b, q->sql[stmt], n, vals, q->flags);
}

PGresult *pgc__queue_result(const pgc__batch *b, int i, int *rc, pgc_error *err)
{
	PGresult *r = pgc__batch_result(b, i);
	if (r == NULL && *rc == PGC_OK)
		*rc = pgc__err(err, PGC_EINTERNAL, "statement %d of a batch did not run", i + 1);
	return r;
}

PGresult *pgc__queue_run_text(pgc_queue *q, const char *tmpl, int n, const char *const *vals,
                              int *rc, pgc_error *err)
{
	char *sql = pgc__sql_schema(tmpl, q->quoted);
	if (sql == NULL) {
		*rc = pgc__err(err, PGC_ENOMEM, "out of memory");
		return NULL;
	}
	PGresult *res = pgc__exec(q->conn, sql, n, vals, rc, err);
	free(sql);
	return res;
}

/* ---- handle ----------------------------------------------------------------------------- */

int pgc__queue_check_name(const char *fn, const char *queue, pgc_error *err)
{
	if (queue == NULL || *queue == '\0')
		return pgc__err(err, PGC_EUSAGE, "%s: queue name is empty", fn);
	pgc_error e;
	if (pgc_name_check("queue name", queue, PGC_QUEUE_NAME_MAX, &e) != PGC_OK)
		return pgc__err(err, PGC_EUSAGE, "%s: %s", fn, e.message);
	return PGC_OK;
}

int pgc__queue_check_key(const char *fn, const char *key, bool required, pgc_error *err)
{
	if (key == NULL)
		return required ? pgc__err(err, PGC_EUSAGE, "%s: the key must not be NULL", fn) : PGC_OK;
	if (*key == '\0')
		return pgc__err(err, PGC_EUSAGE, "%s: the concurrency key is empty", fn);
	size_t len = strlen(key);
	if (len > PGC_QUEUE_KEY_MAX)
		return pgc__err(err, PGC_EUSAGE, "%s: the concurrency key is %zu bytes, longer than %d", fn,
		                len, PGC_QUEUE_KEY_MAX);
	return PGC_OK;
}

/* The handles open on one session, attached to it: when the connection closes first, they are
 * marked gone (conn NULL), so that a later call fails with PGC_EUSAGE instead of touching
 * freed memory. */
typedef struct queue_handles {
	pgc_queue *head;
} queue_handles;

static void handles_close(pgc_conn *c, void *state)
{
	(void)c;
	queue_handles *h = state;
	for (pgc_queue *q = h->head, *next; q != NULL; q = next) {
		next = q->next;
		q->conn = NULL;
		q->next = NULL;
	}
	free(h);
}

static const pgc__attach_ops queue_ops = { "queue", NULL, handles_close, NULL, NULL };

static int handle_link(pgc_queue *q, pgc_error *err)
{
	queue_handles *h = pgc__attached(q->conn, &queue_ops);
	if (h == NULL) {
		if ((h = calloc(1, sizeof *h)) == NULL)
			return pgc__err(err, PGC_ENOMEM, "out of memory");
		int rc = pgc__attach(q->conn, &queue_ops, h, err);
		if (rc != PGC_OK) {
			free(h);
			return rc;
		}
	}
	q->next = h->head;
	h->head = q;
	return PGC_OK;
}

static void handle_unlink(pgc_queue *q)
{
	queue_handles *h = q->conn ? pgc__attached(q->conn, &queue_ops) : NULL;
	for (pgc_queue **pp = h ? &h->head : NULL; pp && *pp; pp = &(*pp)->next)
		if (*pp == q) {
			*pp = q->next;
			break;
		}
	if (h != NULL && h->head == NULL) {
		pgc__detach(q->conn, &queue_ops);
		free(h);
	}
}

int pgc__queue_usable(const pgc_queue *q, const char *fn, pgc_error *err)
{
	if (q == NULL)
		return pgc__err(err, PGC_EUSAGE, "%s: q must not be NULL", fn);
	if (q->conn == NULL)
		return pgc__err(err, PGC_EUSAGE, "%s: the connection of this queue handle was closed", fn);
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
	int rc = pgc__check_schema(schema, err);
	if (rc != PGC_OK)
		return rc;
	pgc_queue *q = calloc(1, sizeof *q);
	if (q == NULL)
		return pgc__err(err, PGC_ENOMEM, "out of memory");
	q->conn = conn;
	/* The statement cache is the session's: a handle that must not prepare stays out of it. */
	q->flags = opts->prepare ? PGC__CACHED : 0;
	q->schema = strdup(schema);
	q->quoted = pgc__quote_ident(conn, schema, err);
	if (q->schema == NULL || q->quoted == NULL) {
		rc = q->schema == NULL ? pgc__err(err, PGC_ENOMEM, "out of memory") : PGC_EUSAGE;
		pgc_queue_close(q);
		return rc;
	}
	for (int i = 0; i < QS_COUNT; i++) {
		q->sql[i] = pgc__sql_schema(templates[i], q->quoted);
		if (q->sql[i] == NULL) {
			pgc_queue_close(q);
			return pgc__err(err, PGC_ENOMEM, "out of memory");
		}
	}
	/* Is the queue schema there? Also learn the notification channel. */
	const char *p[1] = { schema };
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
		char init[160];
		pgc__init_cmd(schema, init, sizeof init);
		pgc_queue_close(q);
		return pgc__err(err, PGC_ENOSCHEMA,
		                "the queue tables are not installed in schema %s: run %s", schema, init);
	}
	res = pgc__queue_run_text(q, "SELECT channel FROM @S@.queue_settings", 0, NULL, &rc, err);
	if (res == NULL) {
		pgc_queue_close(q);
		return rc;
	}
	if (PQntuples(res) == 1)
		snprintf(q->channel, sizeof q->channel, "%s", PQgetvalue(res, 0, 0));
	PQclear(res);
	if ((rc = handle_link(q, err)) != PGC_OK) {
		pgc_queue_close(q);
		return rc;
	}
	*out = q;
	return PGC_OK;
}

void pgc_queue_close(pgc_queue *q)
{
	if (q == NULL)
		return;
	/* Its statements stay in the session's cache: other handles on the session share them. */
	handle_unlink(q);
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
	if (o->max_deferrals < 0)
		return pgc__err(err, PGC_EUSAGE, "%s: max_deferrals must be at least 1, not %d", fn,
		                o->max_deferrals);
	if (o->n_after > 0 && o->after == NULL)
		return pgc__err(err, PGC_EUSAGE, "%s: after must not be NULL when n_after is %zu", fn, o->n_after);
	if (o->n_after > PGC_QUEUE_AFTER_MAX)
		return pgc__err(err, PGC_EUSAGE, "%s: a job may wait for at most %d jobs, not %zu", fn,
		                PGC_QUEUE_AFTER_MAX, o->n_after);
	for (size_t i = 0; i < o->n_after; i++)
		if (o->after[i] < 1)
			return pgc__err(err, PGC_EUSAGE, "%s: dependency id %lld is not a job id", fn,
			                (long long)o->after[i]);
	if (o->on_dep_failure != PGC_DEP_CANCEL && o->on_dep_failure != PGC_DEP_RUN)
		return pgc__err(err, PGC_EUSAGE, "%s: unknown dependency policy %d", fn, (int)o->on_dep_failure);
	if (o->group != NULL) {
		int rc = pgc__queue_check_group(fn, o->group, err);
		if (rc != PGC_OK)
			return rc;
	}
	return pgc__queue_check_key(fn, o->key, false, err);
}

int pgc__queue_check_group(const char *fn, const char *group, pgc_error *err)
{
	if (group == NULL || *group == '\0')
		return pgc__err(err, PGC_EUSAGE, "%s: the group name is empty", fn);
	size_t len = strlen(group);
	if (len > PGC_QUEUE_GROUP_MAX)
		return pgc__err(err, PGC_EUSAGE, "%s: the group name is %zu bytes, longer than %d", fn, len,
		                PGC_QUEUE_GROUP_MAX);
	return PGC_OK;
}

int pgc__queue_recode(int rc, pgc_error *err)
{
	if (rc != PGC_ESQL || err == NULL)
		return rc;
	/* enqueue() and the group functions say "not found" and "closed" with these. */
	if (strcmp(err->sqlstate, "P0002") == 0)
		rc = PGC_ENOTFOUND;
	else if (strcmp(err->sqlstate, "55000") == 0)
		rc = PGC_EFINISHED;
	else
		return rc;
	err->code = rc;
	err->klass = PGC_CLASS_USAGE;
	return rc;
}

/* The enqueue statement with its arrays; *out is the result. */
/* Enqueues n payloads (with their unique keys, or none when keys is NULL) in one statement:
 * both go to the server as one text[] literal each. */
static int enqueue_arrays(pgc_queue *q, const char *queue, size_t n, const char *const *payloads,
                          const char *const *keys, const pgc_job_options *o, PGresult **out,
                          long *bad_index, pgc_error *err)
{
	pgc__sb pa = PGC__SB_INIT, ka = PGC__SB_INIT;
	pgc__sb_text_array(&pa, n, payloads);
	if (keys != NULL)
		pgc__sb_text_array(&ka, n, keys);
	if (pa.oom || ka.oom) {
		pgc__sb_free(&pa);
		pgc__sb_free(&ka);
		return pgc__err(err, PGC_ENOMEM, "out of memory");
	}
	char prio[16], delay[24], maxa[16], maxd[16];
	snprintf(prio, sizeof prio, "%d", o->priority);
	snprintf(delay, sizeof delay, "%lld", (long long)o->delay_ms);
	snprintf(maxa, sizeof maxa, "%d", o->max_attempts ? o->max_attempts : PGC_QUEUE_MAX_ATTEMPTS_DEFAULT);
	snprintf(maxd, sizeof maxd, "%d", o->max_deferrals ? o->max_deferrals : PGC_QUEUE_MAX_DEFERRALS_DEFAULT);
	pgc__sb da = PGC__SB_INIT;
	if (o->n_after > 0) {
		pgc__sb_int_array(&da, o->n_after, o->after);
		if (da.oom) {
			pgc__sb_free(&pa);
			pgc__sb_free(&ka);
			return pgc__err(err, PGC_ENOMEM, "out of memory");
		}
	}
	const char *v[12] = { queue, pa.buf, ka.buf, prio, o->run_at, delay, maxa, maxd, o->key,
	                      o->n_after > 0 ? da.buf : NULL,
	                      o->on_dep_failure == PGC_DEP_RUN ? "t" : "f", o->group };
	int rc;
	PGresult *res = run_stmt(q, QS_ENQUEUE, 12, v, PGC__KEEP_ERROR, &rc, err);
	pgc__sb_free(&pa);
	pgc__sb_free(&ka);
	pgc__sb_free(&da);
	rc = pgc__queue_recode(rc, err);
	if (rc == PGC_OK) {
		*out = res;
		return PGC_OK;
	}
	/* The server names a bad payload's 1-based position in the error's column field. */
	const char *col = res ? PQresultErrorField(res, PG_DIAG_COLUMN_NAME) : NULL;
	if (bad_index != NULL && col != NULL && *col >= '0' && *col <= '9')
		*bad_index = atol(col) - 1;
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
	if (pgc__queue_usable(q, "pgc_queue_enqueue", err) != PGC_OK)
		return PGC_EUSAGE;
	int rc = pgc__queue_check_name("pgc_queue_enqueue", queue, err);
	if (rc != PGC_OK)
		return rc;
	pgc_job_options defaults = PGC_JOB_OPTIONS_INIT;
	if (opts == NULL)
		opts = &defaults;
	if ((rc = check_job_options("pgc_queue_enqueue", opts, err)) != PGC_OK)
		return rc;
	PGresult *res = NULL;
	rc = enqueue_arrays(q, queue, 1, &payload, opts->unique_key != NULL ? &opts->unique_key : NULL,
	                    opts, &res, NULL, err);
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
	if (pgc__queue_usable(q, "pgc_queue_enqueue_many", err) != PGC_OK)
		return PGC_EUSAGE;
	int rc = pgc__queue_check_name("pgc_queue_enqueue_many", queue, err);
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
	PGresult *res = NULL;
	rc = enqueue_arrays(q, queue, n, payloads, unique_keys, opts, &res, bad_index, err);
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

/* The key (column 6) may be NULL. */
static bool row_has_key(const PGresult *res, int r)
{
	return PQnfields(res) > 6 && !PQgetisnull(res, r, 6);
}

size_t pgc__queue_payload_size(const PGresult *res, int r)
{
	size_t n = (size_t)PQgetlength(res, r, 5) + 1;
	if (row_has_key(res, r))
		n += (size_t)PQgetlength(res, r, 6) + 1;
	return n;
}

void pgc__queue_job_from_row(const PGresult *res, int r, const char *queue, char *payload,
                             pgc_job *job)
{
	size_t plen = (size_t)PQgetlength(res, r, 5) + 1;
	memcpy(payload, PQgetvalue(res, r, 5), plen);
	job->key = NULL;
	if (row_has_key(res, r)) {
		memcpy(payload + plen, PQgetvalue(res, r, 6), (size_t)PQgetlength(res, r, 6) + 1);
		job->key = payload + plen;
	}
	job->id = atoll(PQgetvalue(res, r, 0));
	job->token = atoll(PQgetvalue(res, r, 1));
	job->attempt = atoi(PQgetvalue(res, r, 2));
	job->max_attempts = atoi(PQgetvalue(res, r, 3));
	job->priority = atoi(PQgetvalue(res, r, 4));
	job->queue = queue;
	job->payload = payload;
	job->internal = NULL;
}

/* Turns the rows of a claim into a job array; PGC_EEMPTY, PGC_ENOMEM or PGC_OK. */
static int claim_result(const PGresult *res, const char *queue, pgc_job **jobs, size_t *n)
{
	int rows = PQntuples(res);
	if (rows == 0)
		return PGC_EEMPTY;
	size_t qlen = strlen(queue) + 1, total = 0;
	for (int r = 0; r < rows; r++)
		total += pgc__queue_payload_size(res, r);
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
		pgc__queue_job_from_row(res, r, qname, p, &a[r]);
		p += pgc__queue_payload_size(res, r);
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
	if (pgc__queue_usable(q, "pgc_queue_claim", err) != PGC_OK)
		return PGC_EUSAGE;
	int rc = pgc__queue_check_name("pgc_queue_claim", queue, err);
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
	/* claim() promotes the due scheduled jobs first, and takes the flow claim when needed. */
	PGresult *res = pgc__queue_run(q, QS_CLAIM, 4, v, &rc, err);
	if (res != NULL) {
		rc = claim_result(res, queue, jobs, n);
		PQclear(res);
	}
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

/* A completion's error as the C API says it: a result the server refused (not JSON, over the
 * bound, 22xxx) is the caller's input, PGC_EUSAGE; err is updated. */
static int complete_recode(int rc, pgc_error *err)
{
	if (rc != PGC_ESQL || err == NULL || strncmp(err->sqlstate, "22", 2) != 0)
		return rc;
	err->code = PGC_EUSAGE;
	err->klass = PGC_CLASS_USAGE;
	return PGC_EUSAGE;
}

int pgc__queue_complete_args(size_t n, const int64_t *ids, const int64_t *tokens,
                             const int *exit_statuses, const char *const *outputs,
                             const char *const *results, pgc__queue_complete_lits *l,
                             pgc_error *err)
{
	memset(l, 0, sizeof *l);
	pgc__sb_int_array(&l->ia, n, ids);
	pgc__sb_int_array(&l->ta, n, tokens);
	/* Only the arrays someone said something in: most completions carry none. */
	bool said = false;
	for (size_t i = 0; exit_statuses != NULL && i < n && !said; i++)
		said = exit_statuses[i] >= 0;
	if (said) {
		pgc__sb_putc(&l->ea, '{');
		for (size_t i = 0; i < n; i++) {
			char num[16];
			snprintf(num, sizeof num, "%s%d", i ? "," : "", exit_statuses[i]);
			pgc__sb_puts(&l->ea, exit_statuses[i] >= 0 ? num : i ? ",NULL" : "NULL");
		}
		pgc__sb_putc(&l->ea, '}');
	}
	said = false;
	for (size_t i = 0; outputs != NULL && i < n && !said; i++)
		said = outputs[i] != NULL && outputs[i][0] != '\0';
	if (said)
		pgc__sb_text_array(&l->oa, n, outputs);
	said = false;
	for (size_t i = 0; results != NULL && i < n && !said; i++)
		said = results[i] != NULL;
	if (said)
		pgc__sb_text_array(&l->ra, n, results);
	if (l->ia.oom || l->ta.oom || l->ea.oom || l->oa.oom || l->ra.oom) {
		pgc__queue_complete_args_free(l);
		return pgc__err(err, PGC_ENOMEM, "out of memory");
	}
	l->v[0] = l->ia.buf;
	l->v[1] = l->ta.buf;
	l->v[2] = l->ea.buf;
	l->v[3] = l->oa.buf;
	l->v[4] = l->ra.buf;
	return PGC_OK;
}

void pgc__queue_complete_args_free(pgc__queue_complete_lits *l)
{
	pgc__sb_free(&l->ia);
	pgc__sb_free(&l->ta);
	pgc__sb_free(&l->ea);
	pgc__sb_free(&l->oa);
	pgc__sb_free(&l->ra);
}

int pgc__queue_complete_run(pgc_queue *q, size_t n, const int64_t *ids, const int64_t *tokens,
                            const int *exit_statuses, const char *const *outputs,
                            const char *const *results, bool *stale, size_t *done, pgc_error *err)
{
	pgc_error_clear(err);
	if (done != NULL)
		*done = 0;
	if (q == NULL || (n > 0 && (ids == NULL || tokens == NULL)))
		return pgc__err(err, PGC_EUSAGE, "pgc_queue_complete_many: q, ids and tokens must not be NULL");
	if (pgc__queue_usable(q, "pgc_queue_complete_many", err) != PGC_OK)
		return PGC_EUSAGE;
	if (n == 0)
		return PGC_OK;
	pgc__queue_complete_lits l;
	int rc = pgc__queue_complete_args(n, ids, tokens, exit_statuses, outputs, results, &l, err);
	if (rc != PGC_OK)
		return rc;
	PGresult *res = run_end(q, QS_COMPLETE, 5, l.v, &rc, err);
	pgc__queue_complete_args_free(&l);
	if (res == NULL)
		return complete_recode(rc, err);
	size_t k = mark_returned(res, n, ids, stale, false);
	PQclear(res);
	if (done != NULL)
		*done = k;
	return PGC_OK;
}

int pgc_queue_complete_many(pgc_queue *q, size_t n, const int64_t *ids, const int64_t *tokens,
                            bool *stale, size_t *done, pgc_error *err)
{
	return pgc__queue_complete_run(q, n, ids, tokens, NULL, NULL, NULL, stale, done, err);
}

int pgc_queue_complete_result(pgc_queue *q, int64_t id, int64_t token, const char *result_json,
                              pgc_error *err)
{
	size_t done = 0;
	const char *r[1] = { result_json };
	int rc = pgc__queue_complete_run(q, 1, &id, &token, NULL, NULL, r, NULL, &done, err);
	if (rc != PGC_OK)
		return rc;
	if (done == 0)
		return pgc__err(err, PGC_ESTALE,
		                "job %lld is not running under token %lld: its lease expired or it was reclaimed",
		                (long long)id, (long long)token);
	return PGC_OK;
}

int pgc_queue_complete(pgc_queue *q, int64_t id, int64_t token, pgc_error *err)
{
	return pgc_queue_complete_result(q, id, token, NULL, err);
}

int pgc_queue_fail(pgc_queue *q, int64_t id, int64_t token, const char *error_text,
                   const pgc_backoff *backoff, bool *dead, pgc_error *err)
{
	return pgc__queue_fail_run(q, id, token, error_text, -1, NULL, backoff, dead, err);
}

/* The outcome fail() and retry_later() name: PGC_OK with *dead set, or PGC_ESTALE. */
static int end_outcome(PGresult *res, int64_t id, int64_t token, bool *dead, pgc_error *err)
{
	const char *o = PQntuples(res) == 1 ? PQgetvalue(res, 0, 0) : "";
	bool is_dead = strcmp(o, "dead") == 0, retried = strcmp(o, "retried") == 0;
	PQclear(res);
	if (!is_dead && !retried)
		return pgc__err(err, PGC_ESTALE,
		                "job %lld is not running under token %lld: its lease expired or it was reclaimed",
		                (long long)id, (long long)token);
	if (dead != NULL)
		*dead = is_dead;
	return PGC_OK;
}

int pgc__queue_fail_run(pgc_queue *q, int64_t id, int64_t token, const char *error_text, int exit_status,
                        const char *output, const pgc_backoff *backoff, bool *dead, pgc_error *err)
{
	pgc_error_clear(err);
	if (dead != NULL)
		*dead = false;
	if (pgc__queue_usable(q, "pgc_queue_fail", err) != PGC_OK)
		return PGC_EUSAGE;
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
	char ex[16];
	snprintf(ex, sizeof ex, "%d", exit_status);
	const char *v[8] = { ids, toks, error_text ? error_text : "", base, maxb, exit_status >= 0 ? ex : NULL,
	                     output, NULL };
	int rc;
	PGresult *res = run_end(q, QS_FAIL, 8, v, &rc, err);
	if (res == NULL)
		return rc;
	return end_outcome(res, id, token, dead, err);
}

int pgc_queue_retry_later(pgc_queue *q, int64_t id, int64_t token, int64_t delay_ms, pgc_error *err)
{
	return pgc_queue_defer(q, id, token, delay_ms, NULL, err);
}

int pgc_queue_defer(pgc_queue *q, int64_t id, int64_t token, int64_t delay_ms, bool *dead,
                    pgc_error *err)
{
	pgc_error_clear(err);
	if (dead != NULL)
		*dead = false;
	if (q == NULL || delay_ms < 0)
		return pgc__err(err, PGC_EUSAGE, "pgc_queue_defer: q must not be NULL and delay_ms not negative");
	if (pgc__queue_usable(q, "pgc_queue_defer", err) != PGC_OK)
		return PGC_EUSAGE;
	char ids[24], toks[24], d[24];
	snprintf(ids, sizeof ids, "%lld", (long long)id);
	snprintf(toks, sizeof toks, "%lld", (long long)token);
	snprintf(d, sizeof d, "%lld", (long long)delay_ms);
	const char *v[3] = { ids, toks, d };
	int rc;
	PGresult *res = pgc__queue_run(q, QS_SNOOZE, 3, v, &rc, err);
	if (res == NULL)
		return rc;
	return end_outcome(res, id, token, dead, err);
}

int pgc_queue_heartbeat(pgc_queue *q, size_t n, const int64_t *ids, const int64_t *tokens,
                        int64_t lease_ms, bool *lost, pgc_error *err)
{
	pgc_error_clear(err);
	if (q == NULL || (n > 0 && (ids == NULL || tokens == NULL)) || lease_ms < 1)
		return pgc__err(err, PGC_EUSAGE, "pgc_queue_heartbeat: q, ids and tokens must not be NULL, lease_ms >= 1");
	if (pgc__queue_usable(q, "pgc_queue_heartbeat", err) != PGC_OK)
		return PGC_EUSAGE;
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
	if (lost != NULL)
		pgc__queue_renewed(res, n, ids, lost, NULL);
	PQclear(res);
	return PGC_OK;
}

void pgc__queue_renewed(const PGresult *res, size_t n, const int64_t *ids, bool *lost, bool *cancelled)
{
	for (size_t i = 0; i < n; i++) {
		lost[i] = true;
		if (cancelled != NULL)
			cancelled[i] = false;
	}
	for (int r = 0; r < PQntuples(res); r++) {
		int64_t id = atoll(PQgetvalue(res, r, 0));
		const char *st = PQgetvalue(res, r, 1);
		for (size_t i = 0; i < n; i++)
			if (ids[i] == id) {
				lost[i] = strcmp(st, "held") != 0;
				if (cancelled != NULL)
					cancelled[i] = strcmp(st, "cancelled") == 0;
			}
	}
}

int pgc_queue_release(pgc_queue *q, size_t n, const int64_t *ids, const int64_t *tokens,
                      bool started, pgc_error *err)
{
	pgc_error_clear(err);
	if (q == NULL || (n > 0 && (ids == NULL || tokens == NULL)))
		return pgc__err(err, PGC_EUSAGE, "pgc_queue_release: q, ids and tokens must not be NULL");
	if (pgc__queue_usable(q, "pgc_queue_release", err) != PGC_OK)
		return PGC_EUSAGE;
	if (n == 0)
		return PGC_OK;
	pgc__sb ia = { 0 }, ta = { 0 };
	int rc = id_token_arrays(n, ids, tokens, &ia, &ta, err);
	if (rc != PGC_OK)
		return rc;
	const char *v[3] = { ia.buf, ta.buf, started ? "t" : "f" };
	PGresult *res = pgc__queue_run(q, QS_RELEASE, 3, v, &rc, err);
	pgc__sb_free(&ia);
	pgc__sb_free(&ta);
	if (res == NULL)
		return rc;
	PQclear(res);
	return PGC_OK;
}

/* ---- results ------------------------------------------------------------------------------- */

/* The statuses job_result() gives, as the static strings the API returns. */
static const char *const job_statuses[] = { "waiting", "scheduled", "pending", "running",
	                                        "succeeded", "failed", "cancelled" };

static bool status_finished(const char *st)
{
	return strcmp(st, "succeeded") == 0 || strcmp(st, "failed") == 0 || strcmp(st, "cancelled") == 0;
}

/* One job_result() call: *status (static) and *result_json (malloc'd, NULL: none). */
static int job_result_once(pgc_queue *q, int64_t id, const char **status, char **result_json,
                           pgc_error *err)
{
	char ids[24];
	snprintf(ids, sizeof ids, "%lld", (long long)id);
	const char *v[1] = { ids };
	int rc;
	PGresult *res = run_stmt(q, QS_JOB_RESULT, 1, v, PGC__KEEP_ERROR, &rc, err);
	if (res == NULL || rc != PGC_OK) {
		PQclear(res);
		return pgc__queue_recode(rc, err);
	}
	if (PQntuples(res) != 1) {
		PQclear(res);
		return pgc__err(err, PGC_EINTERNAL, "job_result returned no row");
	}
	const char *st = PQgetvalue(res, 0, 0);
	*status = NULL;
	for (size_t i = 0; i < sizeof job_statuses / sizeof job_statuses[0]; i++)
		if (strcmp(st, job_statuses[i]) == 0)
			*status = job_statuses[i];
	if (*status == NULL) {
		rc = pgc__err(err, PGC_EINTERNAL, "job %lld has an unknown status \"%.40s\"", (long long)id, st);
		PQclear(res);
		return rc;
	}
	if (!PQgetisnull(res, 0, 1) && (*result_json = strdup(PQgetvalue(res, 0, 1))) == NULL) {
		PQclear(res);
		return pgc__err(err, PGC_ENOMEM, "out of memory");
	}
	PQclear(res);
	return PGC_OK;
}

int pgc_queue_job_result(pgc_queue *q, int64_t id, const char **status, char **result_json,
                         pgc_error *err)
{
	pgc_error_clear(err);
	if (status != NULL)
		*status = NULL;
	if (result_json != NULL)
		*result_json = NULL;
	if (status == NULL || result_json == NULL)
		return pgc__err(err, PGC_EUSAGE, "pgc_queue_job_result: status and result_json must not be NULL");
	if (pgc__queue_usable(q, "pgc_queue_job_result", err) != PGC_OK)
		return PGC_EUSAGE;
	return job_result_once(q, id, status, result_json, err);
}

/* How long the wait lets pass between two looks when no notification comes: a job that ended
 * without a result (failed, cancelled, completed by a client that gave none) notifies nobody. */
#define RESULT_RECHECK_MS 1000

int pgc_queue_result_wait(pgc_queue *q, int64_t id, int64_t timeout_ms, const char **status,
                          char **result_json, pgc_error *err)
{
	pgc_error_clear(err);
	if (status != NULL)
		*status = NULL;
	if (result_json != NULL)
		*result_json = NULL;
	if (status == NULL || result_json == NULL || timeout_ms < 0)
		return pgc__err(err, PGC_EUSAGE,
		                "pgc_queue_result_wait: status and result_json must not be NULL, timeout_ms not negative");
	if (pgc__queue_usable(q, "pgc_queue_result_wait", err) != PGC_OK)
		return PGC_EUSAGE;
	if (pgc__in_transaction(q->conn))
		return pgc__err(err, PGC_EUSAGE,
		                "pgc_queue_result_wait: not inside a transaction (its LISTEN would start at commit)");
	char chan[80];
	snprintf(chan, sizeof chan, "%s.result", q->channel);
	int64_t deadline = pgc__now_ms() + timeout_ms;
	/* Listening before the first look: a completion after it is heard. */
	int rc = pgc__listen(q->conn, chan, err);
	if (rc != PGC_OK)
		return rc;
	for (;;) {
		rc = job_result_once(q, id, status, result_json, err);
		if (rc != PGC_OK || status_finished(*status))
			break;
		int64_t left = deadline - pgc__now_ms();
		if (left <= 0) {
			rc = pgc__err(err, PGC_ETIMEDOUT, "job %lld is still %s after %lld ms", (long long)id, *status,
			              (long long)timeout_ms);
			break;
		}
		bool heard = false;
		while (!heard) {
			left = deadline - pgc__now_ms();
			if (left <= 0)
				break;
			int w = pgc__wait_input(q->conn, -1, left < RESULT_RECHECK_MS ? left : RESULT_RECHECK_MS);
			if (w == PGC__WAIT_LOST) {
				pgc_error_clear(err);
				rc = pgc__err(err, PGC_ECONNLOST, "the session was lost while waiting for job %lld", (long long)id);
				goto out;
			}
			if (w != PGC__WAIT_INPUT)
				break; /* the slow look, or the bound */
			PGnotify *n;
			bool consume = true;
			while ((n = pgc__notify(q->conn, consume)) != NULL) {
				consume = false;
				heard |= strcmp(n->relname, chan) == 0 && atoll(n->extra) == id;
				PQfreemem(n);
			}
		}
	}
out:
	{
		pgc_error e;
		(void)pgc__unlisten(q->conn, chan, &e);
	}
	if (rc != PGC_OK && rc != PGC_ETIMEDOUT) {
		free(*result_json);
		*result_json = NULL;
	}
	return rc;
}

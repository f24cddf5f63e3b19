/* rowlock.c - rows locked in one global order, and explicit table locks
 *
 * pgc_lock_rows() is the seed's "lock every resource of a transaction in one stable order":
 * the keys are sorted and deduplicated, and one statement locks them in key order (ORDER BY
 * sits below the locking clause in the plan). Both calls run inside the caller's transaction;
 * when a pgc_tx_run() body gave a lock_timeout, a wait is bounded by it alone (the server's
 * statement_timeout is off for the locking statement). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "conn/conn_int.h"
#include "tx_int.h"

/* The bound of a locking statement that may wait: the runner's lock_timeout when it set one
 * (statement_timeout off for this statement, so that it alone decides), else the session's
 * settings and default call timeout. */
static pgc__call wait_bound(pgc_conn *conn, bool waits)
{
	pgc__call call = PGC__CALL_INIT;
	call.flags = PGC__CACHED;
	pgc__tx_state *ts = pgc__tx_state_of(conn);
	if (waits && ts != NULL && ts->lock_timeout_ms > 0) {
		call.statement_timeout_ms = 0;
		call.timeout_ms = ts->lock_timeout_ms + 5000;
	}
	return call;
}

/* "name" or "schema.name", each part quoted. malloc'd; NULL with err filled. */
static char *quote_table(pgc_conn *conn, const char *table, pgc_error *err)
{
	const char *dot = strchr(table, '.');
	if (dot == NULL) {
		char *q = pgc__quote_ident(conn, table, err);
		char *out = q ? strdup(q) : NULL;
		if (q != NULL && out == NULL)
			pgc__err(err, PGC_ENOMEM, "out of memory");
		PQfreemem(q);
		return out;
	}
	if (dot == table || dot[1] == '\0')
		return pgc__err(err, PGC_EUSAGE, "table name \"%.100s\" has an empty part", table), NULL;
	char *schema = strndup(table, (size_t)(dot - table));
	if (schema == NULL)
		return pgc__err(err, PGC_ENOMEM, "out of memory"), NULL;
	char *qs = pgc__quote_ident(conn, schema, err);
	char *qt = qs ? pgc__quote_ident(conn, dot + 1, err) : NULL;
	free(schema);
	char *out = NULL;
	if (qs != NULL && qt != NULL) {
		size_t n = strlen(qs) + strlen(qt) + 2;
		out = malloc(n);
		if (out == NULL)
			pgc__err(err, PGC_ENOMEM, "out of memory");
		else
			snprintf(out, n, "%s.%s", qs, qt);
	}
	PQfreemem(qs);
	PQfreemem(qt);
	return out;
}

static int cmp_i64(const void *a, const void *b)
{
	int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
	return (x > y) - (x < y);
}

int pgc_lock_rows(pgc_conn *conn, const char *table, const char *key_column, const int64_t *ids,
                  size_t n, pgc_row_lock mode, pgc_wait_policy wait_policy, bool *locked,
                  pgc_error *err)
{
	pgc_error_clear(err);
	if (conn == NULL || table == NULL || key_column == NULL || *table == '\0' || *key_column == '\0')
		return pgc__err(err, PGC_EUSAGE, "pgc_lock_rows: conn, table and key_column must be given");
	if (ids == NULL && n > 0)
		return pgc__err(err, PGC_EUSAGE, "pgc_lock_rows: ids must not be NULL when n > 0");
	const char *clause = pgc_row_lock_sql(mode);
	if (clause == NULL)
		return pgc__err(err, PGC_EUSAGE, "pgc_lock_rows: mode %d is not a pgc_row_lock", (int)mode);
	if ((int)wait_policy < PGC_ROWS_WAIT || (int)wait_policy > PGC_ROWS_SKIP_LOCKED)
		return pgc__err(err, PGC_EUSAGE, "pgc_lock_rows: wait_policy %d is not a pgc_wait_policy", (int)wait_policy);
	int rc = pgc__tx_usable(conn, "pgc_lock_rows", err);
	if (rc != PGC_OK)
		return rc;
	for (size_t i = 0; i < n && locked != NULL; i++)
		locked[i] = false;
	if (n == 0)
		return PGC_OK;

	/* The sorted, distinct keys: the array parameter and the lookup table for the answer. */
	int64_t *keys = malloc(n * sizeof *keys);
	bool *got = calloc(n, sizeof *got);
	pgc__sb param = PGC__SB_INIT;
	char *qt = NULL, *qk = NULL, *sql = NULL;
	PGresult *res = NULL;
	if (keys == NULL || got == NULL) {
		rc = pgc__err(err, PGC_ENOMEM, "out of memory");
		goto out;
	}
	memcpy(keys, ids, n * sizeof *keys);
	qsort(keys, n, sizeof *keys, cmp_i64);
	size_t nk = 0;
	for (size_t i = 0; i < n; i++)
		if (nk == 0 || keys[nk - 1] != keys[i])
			keys[nk++] = keys[i];
	pgc__sb_int_array(&param, nk, keys);
	if (param.oom) {
		rc = pgc__err(err, PGC_ENOMEM, "out of memory");
		goto out;
	}

	qt = quote_table(conn, table, err);
	qk = qt ? pgc__quote_ident(conn, key_column, err) : NULL;
	if (qt == NULL || qk == NULL) {
		rc = err && err->code ? err->code : PGC_EUSAGE;
		goto out;
	}
	const char *policy = wait_policy == PGC_ROWS_NOWAIT ? " NOWAIT"
	                     : wait_policy == PGC_ROWS_SKIP_LOCKED ? " SKIP LOCKED" : "";
	size_t len = strlen(qt) + 3 * strlen(qk) + 128;
	sql = malloc(len);
	if (sql == NULL) {
		rc = pgc__err(err, PGC_ENOMEM, "out of memory");
		goto out;
	}
	/* ORDER BY sits below the locking clause in the plan: rows are locked in key order. */
	snprintf(sql, len, "SELECT %s FROM %s WHERE %s = ANY($1::int8[]) ORDER BY %s %s%s", qk, qt,
	         qk, qk, clause, policy);
	const char *values[1] = { param.buf };
	pgc__call call = wait_bound(conn, wait_policy == PGC_ROWS_WAIT);
	res = pgc__query(conn, sql, 1, values, &call, &rc, err);
	if (res == NULL)
		goto out;
	for (int r = 0; r < PQntuples(res); r++) {
		if (PQgetisnull(res, r, 0))
			continue;
		int64_t k = strtoll(PQgetvalue(res, r, 0), NULL, 10);
		int64_t *hit = bsearch(&k, keys, nk, sizeof *keys, cmp_i64);
		if (hit != NULL)
			got[hit - keys] = true;
	}
	for (size_t i = 0; i < n && locked != NULL; i++) {
		int64_t *hit = bsearch(&ids[i], keys, nk, sizeof *keys, cmp_i64);
		locked[i] = hit != NULL && got[hit - keys];
	}
	rc = PGC_OK;
out:
	PQclear(res);
	free(sql);
	PQfreemem(qk);
	free(qt);
	pgc__sb_free(&param);
	free(got);
	free(keys);
	return rc;
}

int pgc_lock_table(pgc_conn *conn, const char *table, pgc_table_lock mode, bool nowait,
                   pgc_error *err)
{
	pgc_error_clear(err);
	if (conn == NULL || table == NULL || *table == '\0')
		return pgc__err(err, PGC_EUSAGE, "pgc_lock_table: conn and table must be given");
	const char *m = pgc_table_lock_sql(mode);
	if (m == NULL)
		return pgc__err(err, PGC_EUSAGE, "pgc_lock_table: mode %d is not a pgc_table_lock (the mode is always explicit)", (int)mode);
	int rc = pgc__tx_usable(conn, "pgc_lock_table", err);
	if (rc != PGC_OK)
		return rc;
	char *qt = quote_table(conn, table, err);
	if (qt == NULL)
		return err && err->code ? err->code : PGC_EUSAGE;
	size_t len = strlen(qt) + 64;
	char *sql = malloc(len);
	if (sql == NULL) {
		free(qt);
		return pgc__err(err, PGC_ENOMEM, "out of memory");
	}
	snprintf(sql, len, "LOCK TABLE %s IN %s MODE%s", qt, m, nowait ? " NOWAIT" : "");
	pgc__call call = wait_bound(conn, !nowait);
	call.flags = 0;
	PGresult *res = pgc__query(conn, sql, 0, NULL, &call, &rc, err);
	PQclear(res);
	free(sql);
	free(qt);
	return rc;
}


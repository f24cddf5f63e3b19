/* queue_group.c - job groups: add, close, remove, show, list
 *
 * The decisions live in SQL (src/schema/functions/): group_add(), group_close(), group_remove(), and
 * the fold at commit of every transaction that ends a member, which counts it once under the
 * group's row lock and enqueues the on-complete job once. These calls run rarely, outside the
 * statement cache, with values as parameters. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "queue_int.h"

static int group_args(pgc_queue *q, const char *fn, const char *name, pgc_error *err)
{
	pgc_error_clear(err);
	if (pgc__queue_usable(q, fn, err) != PGC_OK)
		return PGC_EUSAGE;
	return pgc__queue_check_group(fn, name, err);
}

int pgc_queue_group_add(pgc_queue *q, const char *name, const char *on_complete_queue,
                        const char *payload, pgc_error *err)
{
	int rc = group_args(q, "pgc_queue_group_add", name, err);
	if (rc != PGC_OK)
		return rc;
	if ((rc = pgc__queue_check_name("pgc_queue_group_add", on_complete_queue, err)) != PGC_OK)
		return rc;
	const char *v[3] = { name, on_complete_queue, payload };
	PGresult *res = pgc__queue_run_text(q, "SELECT @S@.group_add($1, $2, $3::jsonb)", 3, v, &rc, err);
	if (res == NULL) {
		if (rc == PGC_ESQL && err != NULL && strcmp(err->sqlstate, "23505") == 0) {
			err->code = PGC_EDUPLICATE;
			err->klass = PGC_CLASS_USAGE;
			return PGC_EDUPLICATE;
		}
		return rc;
	}
	PQclear(res);
	return PGC_OK;
}

int pgc_queue_group_close(pgc_queue *q, const char *name, int64_t *on_complete_id, pgc_error *err)
{
	if (on_complete_id != NULL)
		*on_complete_id = 0;
	int rc = group_args(q, "pgc_queue_group_close", name, err);
	if (rc != PGC_OK)
		return rc;
	const char *v[1] = { name };
	PGresult *res = pgc__queue_run_text(q, "SELECT @S@.group_close($1)", 1, v, &rc, err);
	if (res == NULL)
		return pgc__queue_recode(rc, err);
	if (on_complete_id != NULL && !PQgetisnull(res, 0, 0))
		*on_complete_id = atoll(PQgetvalue(res, 0, 0));
	PQclear(res);
	return PGC_OK;
}

int pgc_queue_group_remove(pgc_queue *q, const char *name, pgc_error *err)
{
	int rc = group_args(q, "pgc_queue_group_remove", name, err);
	if (rc != PGC_OK)
		return rc;
	const char *v[1] = { name };
	PGresult *res = pgc__queue_run_text(q, "SELECT @S@.group_remove($1)", 1, v, &rc, err);
	if (res == NULL) {
		rc = pgc__queue_recode(rc, err);
		if (rc == PGC_EFINISHED) {
			/* Not finished: its on-complete job is still to come. */
			err->code = rc = PGC_EBUSY;
		}
		return rc;
	}
	PQclear(res);
	return PGC_OK;
}

#define TS(x) "coalesce(to_json(" x ")#>>'{}', '')"
static const char group_select[] =
	"SELECT name, on_complete_queue, payload::text, members, succeeded, failed, cancelled, sealed,"
	" on_complete_job IS NOT NULL, coalesce(on_complete_job, 0), " TS("created_at") ","
	" " TS("closed_at") ", " TS("done_at") " FROM @S@.job_groups"
	" WHERE $1::text IS NULL OR name = $1 ORDER BY name";

/* The rows of group_select as one allocation: the array, then the payloads. */
static pgc_job_group *groups_from(const PGresult *res)
{
	int rows = PQntuples(res);
	size_t total = (size_t)(rows ? rows : 1) * sizeof(pgc_job_group);
	for (int r = 0; r < rows; r++)
		total += (size_t)PQgetlength(res, r, 2) + 1;
	pgc_job_group *a = calloc(1, total);
	if (a == NULL)
		return NULL;
	char *p = (char *)(a + (rows ? rows : 1));
	for (int r = 0; r < rows; r++) {
		pgc_job_group *g = &a[r];
		snprintf(g->name, sizeof g->name, "%s", PQgetvalue(res, r, 0));
		snprintf(g->on_complete_queue, sizeof g->on_complete_queue, "%s", PQgetvalue(res, r, 1));
		size_t len = (size_t)PQgetlength(res, r, 2);
		memcpy(p, PQgetvalue(res, r, 2), len + 1);
		g->payload = p;
		p += len + 1;
		g->members = atol(PQgetvalue(res, r, 3));
		g->succeeded = atol(PQgetvalue(res, r, 4));
		g->failed = atol(PQgetvalue(res, r, 5));
		g->cancelled = atol(PQgetvalue(res, r, 6));
		g->sealed = strcmp(PQgetvalue(res, r, 7), "t") == 0;
		g->done = strcmp(PQgetvalue(res, r, 8), "t") == 0;
		g->on_complete_job = atoll(PQgetvalue(res, r, 9));
		snprintf(g->created_at, sizeof g->created_at, "%s", PQgetvalue(res, r, 10));
		snprintf(g->closed_at, sizeof g->closed_at, "%s", PQgetvalue(res, r, 11));
		snprintf(g->done_at, sizeof g->done_at, "%s", PQgetvalue(res, r, 12));
	}
	return a;
}

int pgc_queue_group_show(pgc_queue *q, const char *name, pgc_job_group **out, pgc_error *err)
{
	if (out != NULL)
		*out = NULL;
	int rc = group_args(q, "pgc_queue_group_show", name, err);
	if (rc != PGC_OK)
		return rc;
	if (out == NULL)
		return pgc__err(err, PGC_EUSAGE, "pgc_queue_group_show: out must not be NULL");
	const char *v[1] = { name };
	PGresult *res = pgc__queue_run_text(q, group_select, 1, v, &rc, err);
	if (res == NULL)
		return rc;
	if (PQntuples(res) == 0) {
		PQclear(res);
		return pgc__err(err, PGC_ENOTFOUND, "no job group named \"%.128s\"", name);
	}
	*out = groups_from(res);
	PQclear(res);
	return *out == NULL ? pgc__err(err, PGC_ENOMEM, "out of memory") : PGC_OK;
}

int pgc_queue_group_list(pgc_queue *q, pgc_job_group **out, size_t *n, pgc_error *err)
{
	pgc_error_clear(err);
	if (out != NULL)
		*out = NULL;
	if (n != NULL)
		*n = 0;
	if (out == NULL || n == NULL)
		return pgc__err(err, PGC_EUSAGE, "pgc_queue_group_list: out and n must not be NULL");
	if (pgc__queue_usable(q, "pgc_queue_group_list", err) != PGC_OK)
		return PGC_EUSAGE;
	const char *v[1] = { NULL };
	int rc;
	PGresult *res = pgc__queue_run_text(q, group_select, 1, v, &rc, err);
	if (res == NULL)
		return rc;
	size_t rows = (size_t)PQntuples(res);
	*out = groups_from(res);
	PQclear(res);
	if (*out == NULL)
		return pgc__err(err, PGC_ENOMEM, "out of memory");
	*n = rows;
	return PGC_OK;
}

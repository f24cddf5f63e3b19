/* queue_flow.c - flow control settings of the queue: key limits, rates, fair shares, and what
 * the keys look like now
 *
 * The claim itself is the SQL function claim_flow() (src/schema/functions/claim_flow.sql), called by queue.c and
 * the worker in the claim's round trip; here are the settings it reads (queues, job_keys),
 * changed by SQL queue_flow_set(), queue_key_set() and queue_key_reset(), and the figures of
 * each key. A change of the settings takes effect at the next claim, and wakes the queue's
 * workers. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "queue_int.h"

static int check_rate(const char *fn, const char *what, const pgc_rate *r, pgc_error *err)
{
	if (r->n < -1 || r->n > PGC_RATE_MAX_N)
		return pgc__err(err, PGC_EUSAGE, "%s: %s: n must be -1 (unchanged), 0 (none) or 1..%d, not %d",
		                fn, what, PGC_RATE_MAX_N, r->n);
	if (r->n > 0 && r->per_ms < 1)
		return pgc__err(err, PGC_EUSAGE, "%s: %s: the interval must be at least 1 ms", fn, what);
	return PGC_OK;
}

int pgc_queue_flow_get(pgc_queue *q, const char *queue, pgc_queue_flow *out, pgc_error *err)
{
	pgc_error_clear(err);
	if (q == NULL || out == NULL)
		return pgc__err(err, PGC_EUSAGE, "pgc_queue_flow_get: q and out must not be NULL");
	if (pgc__queue_usable(q, "pgc_queue_flow_get", err) != PGC_OK)
		return PGC_EUSAGE;
	int rc = pgc__queue_check_name("pgc_queue_flow_get", queue, err);
	if (rc != PGC_OK)
		return rc;
	const char *v[1] = { queue };
	PGresult *res = pgc__queue_run_text(q,
	        "SELECT coalesce(key_limit, 0), coalesce(rate_n, 0), coalesce(rate_ms, 0),"
	        " coalesce(key_rate_n, 0), coalesce(key_rate_ms, 0), fair, flow,"
	        " coalesce(greatest(0, ceil(extract(epoch FROM rate_next - rate_ms * 0.05 * interval '1 millisecond'"
	        "  - clock_timestamp()) * 1000)), 0)"
	        " FROM @S@.queues WHERE name = $1", 1, v, &rc, err);
	if (res == NULL)
		return rc;
	if (PQntuples(res) == 0) {
		PQclear(res);
		return pgc__err(err, PGC_ENOTFOUND, "no queue named \"%.100s\"", queue);
	}
	out->key_limit = atoi(PQgetvalue(res, 0, 0));
	out->rate.n = atoi(PQgetvalue(res, 0, 1));
	out->rate.per_ms = atoll(PQgetvalue(res, 0, 2));
	out->key_rate.n = atoi(PQgetvalue(res, 0, 3));
	out->key_rate.per_ms = atoll(PQgetvalue(res, 0, 4));
	out->fair = strcmp(PQgetvalue(res, 0, 5), "t") == 0;
	out->flow = strcmp(PQgetvalue(res, 0, 6), "t") == 0;
	out->rate_wait_ms = atoll(PQgetvalue(res, 0, 7));
	PQclear(res);
	return PGC_OK;
}

int pgc_queue_flow_set(pgc_queue *q, const char *queue, const pgc_queue_flow *set, pgc_error *err)
{
	pgc_error_clear(err);
	if (q == NULL || set == NULL)
		return pgc__err(err, PGC_EUSAGE, "pgc_queue_flow_set: q and set must not be NULL");
	if (pgc__queue_usable(q, "pgc_queue_flow_set", err) != PGC_OK)
		return PGC_EUSAGE;
	int rc = pgc__queue_check_name("pgc_queue_flow_set", queue, err);
	if (rc != PGC_OK)
		return rc;
	if (set->key_limit < -1)
		return pgc__err(err, PGC_EUSAGE, "pgc_queue_flow_set: key_limit must be -1 (unchanged), 0 (none)"
		                " or positive, not %d", set->key_limit);
	if (set->fair < -1 || set->fair > 1)
		return pgc__err(err, PGC_EUSAGE, "pgc_queue_flow_set: fair must be -1, 0 or 1, not %d", set->fair);
	if ((rc = check_rate("pgc_queue_flow_set", "rate", &set->rate, err)) != PGC_OK ||
	    (rc = check_rate("pgc_queue_flow_set", "key_rate", &set->key_rate, err)) != PGC_OK)
		return rc;
	char lim[16], rn[16], rms[24], krn[16], krms[24], fair[8];
	snprintf(lim, sizeof lim, "%d", set->key_limit);
	snprintf(rn, sizeof rn, "%d", set->rate.n);
	snprintf(rms, sizeof rms, "%lld", (long long)set->rate.per_ms);
	snprintf(krn, sizeof krn, "%d", set->key_rate.n);
	snprintf(krms, sizeof krms, "%lld", (long long)set->key_rate.per_ms);
	snprintf(fair, sizeof fair, "%d", set->fair);
	const char *v[7] = { queue, lim, rn, rms, krn, krms, fair };
	/* SQL queue_flow_set(): the keys without a limit of their own take the new default; a rate
	 * that changes starts afresh. */
	PGresult *res = pgc__queue_run_text(q,
	        "SELECT @S@.queue_flow_set($1, $2::int, $3::int, $4::bigint, $5::int, $6::bigint, $7::int)",
	        7, v, &rc, err);
	if (res == NULL)
		return rc;
	PQclear(res);
	return PGC_OK;
}

static int check_key_args(const char *fn, pgc_queue *q, const char *queue, const char *key,
                          pgc_error *err)
{
	if (pgc__queue_usable(q, fn, err) != PGC_OK)
		return PGC_EUSAGE;
	int rc = pgc__queue_check_name(fn, queue, err);
	if (rc == PGC_OK)
		rc = pgc__queue_check_key(fn, key, true, err);
	return rc;
}

int pgc_queue_key_set(pgc_queue *q, const char *queue, const char *key,
                      const pgc_queue_key_settings *set, pgc_error *err)
{
	pgc_error_clear(err);
	if (set == NULL)
		return pgc__err(err, PGC_EUSAGE, "pgc_queue_key_set: set must not be NULL");
	int rc = check_key_args("pgc_queue_key_set", q, queue, key, err);
	if (rc != PGC_OK)
		return rc;
	if (set->limit < -1)
		return pgc__err(err, PGC_EUSAGE, "pgc_queue_key_set: limit must be -1 (unchanged), 0 (the queue's)"
		                " or positive, not %d", set->limit);
	if (set->weight < -1 || set->weight > PGC_QUEUE_WEIGHT_MAX)
		return pgc__err(err, PGC_EUSAGE, "pgc_queue_key_set: weight must be -1 (unchanged), 0 (1) or 1..%d,"
		                " not %d", PGC_QUEUE_WEIGHT_MAX, set->weight);
	if ((rc = check_rate("pgc_queue_key_set", "rate", &set->rate, err)) != PGC_OK)
		return rc;
	char lim[16], w[16], rn[16], rms[24];
	snprintf(lim, sizeof lim, "%d", set->limit);
	snprintf(w, sizeof w, "%d", set->weight);
	snprintf(rn, sizeof rn, "%d", set->rate.n);
	snprintf(rms, sizeof rms, "%lld", (long long)set->rate.per_ms);
	const char *v[6] = { queue, key, lim, w, rn, rms };
	PGresult *res = pgc__queue_run_text(q,
	        "SELECT @S@.queue_key_set($1, $2, $3::int, $4::int, $5::int, $6::bigint)", 6, v, &rc, err);
	if (res == NULL)
		return rc;
	PQclear(res);
	return PGC_OK;
}

int pgc_queue_key_reset(pgc_queue *q, const char *queue, const char *key, pgc_error *err)
{
	pgc_error_clear(err);
	int rc = check_key_args("pgc_queue_key_reset", q, queue, key, err);
	if (rc != PGC_OK)
		return rc;
	const char *v[2] = { queue, key };
	PGresult *res = pgc__queue_run_text(q, "SELECT @S@.queue_key_reset($1, $2)", 2, v, &rc, err);
	if (res == NULL) {
		if (rc == PGC_ESQL && err != NULL && strcmp(err->sqlstate, "P0002") == 0)
			return pgc__err(err, PGC_ENOTFOUND, "queue \"%.100s\" has no key \"%.100s\"", queue, key);
		return rc;
	}
	PQclear(res);
	return PGC_OK;
}

/* The figures of the keys: own settings, what is in force, the counts, the next start. */
static const char keys_sql[] =
	"SELECT k.queue, k.key, coalesce(k.max_running, 0), coalesce(k.weight, 0), coalesce(k.rate_n, 0),"
	" coalesce(k.rate_ms, 0), coalesce(k.lim, 0), coalesce(k.rate_n, q.key_rate_n, 0),"
	" coalesce(k.rate_ms, q.key_rate_ms, 0),"
	" (SELECT count(*) FROM @S@.jobs j WHERE j.queue = k.queue AND j.key = k.key AND j.status = 'running'),"
	" (SELECT count(*) FROM @S@.jobs j WHERE j.queue = k.queue AND j.key = k.key AND j.status = 'pending'),"
	" (SELECT count(*) FROM @S@.jobs j WHERE j.queue = k.queue AND j.key = k.key AND j.status = 'scheduled'),"
	" coalesce(extract(epoch FROM statement_timestamp() - (SELECT min(j.run_at) FROM @S@.jobs j"
	"  WHERE j.queue = k.queue AND j.key = k.key AND j.status = 'pending' AND isfinite(j.run_at))), 0),"
	" greatest(0, ceil(extract(epoch FROM k.rate_next"
	"  - coalesce(k.rate_ms, q.key_rate_ms) * 0.05 * interval '1 millisecond' - clock_timestamp()) * 1000)),"
	" coalesce(to_json(k.rate_next - coalesce(k.rate_ms, q.key_rate_ms) * 0.05 * interval '1 millisecond')#>>'{}', '')"
	" FROM @S@.job_keys k JOIN @S@.queues q ON q.name = k.queue"
	" WHERE k.queue = $1 AND ($2::text IS NULL OR k.key = $2) ORDER BY k.key";

int pgc_queue_keys(pgc_queue *q, const char *queue, const char *key, pgc_queue_key_info **out,
                   size_t *n, pgc_error *err)
{
	pgc_error_clear(err);
	if (out != NULL)
		*out = NULL;
	if (n != NULL)
		*n = 0;
	if (q == NULL || out == NULL || n == NULL)
		return pgc__err(err, PGC_EUSAGE, "pgc_queue_keys: q, out and n must not be NULL");
	if (pgc__queue_usable(q, "pgc_queue_keys", err) != PGC_OK)
		return PGC_EUSAGE;
	int rc = pgc__queue_check_name("pgc_queue_keys", queue, err);
	if (rc == PGC_OK)
		rc = pgc__queue_check_key("pgc_queue_keys", key, false, err);
	if (rc != PGC_OK)
		return rc;
	const char *v[2] = { queue, key };
	PGresult *res = pgc__queue_run_text(q, keys_sql, 2, v, &rc, err);
	if (res == NULL)
		return rc;
	int rows = PQntuples(res);
	if (key != NULL && rows == 0) {
		PQclear(res);
		return pgc__err(err, PGC_ENOTFOUND, "queue \"%.100s\" has no key \"%.100s\"", queue, key);
	}
	pgc_queue_key_info *a = calloc(rows ? (size_t)rows : 1, sizeof *a);
	if (a == NULL) {
		PQclear(res);
		return pgc__err(err, PGC_ENOMEM, "out of memory");
	}
	for (int r = 0; r < rows; r++) {
		pgc_queue_key_info *k = &a[r];
		snprintf(k->queue, sizeof k->queue, "%s", PQgetvalue(res, r, 0));
		snprintf(k->key, sizeof k->key, "%s", PQgetvalue(res, r, 1));
		k->own.limit = atoi(PQgetvalue(res, r, 2));
		k->own.weight = atoi(PQgetvalue(res, r, 3));
		k->own.rate.n = atoi(PQgetvalue(res, r, 4));
		k->own.rate.per_ms = atoll(PQgetvalue(res, r, 5));
		k->limit = atoi(PQgetvalue(res, r, 6));
		k->rate.n = atoi(PQgetvalue(res, r, 7));
		k->rate.per_ms = atoll(PQgetvalue(res, r, 8));
		k->running = atol(PQgetvalue(res, r, 9));
		k->pending = atol(PQgetvalue(res, r, 10));
		k->scheduled = atol(PQgetvalue(res, r, 11));
		k->oldest_pending_s = atof(PQgetvalue(res, r, 12));
		k->at_limit = k->limit > 0 && k->running >= k->limit;
		k->rate_wait_ms = PQgetisnull(res, r, 13) ? 0 : atoll(PQgetvalue(res, r, 13));
		if (k->rate_wait_ms > 0)
			snprintf(k->next_start_at, sizeof k->next_start_at, "%s", PQgetvalue(res, r, 14));
	}
	PQclear(res);
	*out = a;
	*n = (size_t)rows;
	return PGC_OK;
}

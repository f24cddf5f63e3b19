/* render.c - one JSON rendering per library object, used by the commands' --json and by the
 * web API alike, so that an object has one shape wherever it is read */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#include "render.h"

void render_rate(FILE *f, const char *name, const pgc_rate *r)
{
	if (r->n <= 0)
		fprintf(f, ",\"%s\":null", name);
	else
		fprintf(f, ",\"%s\":{\"n\":%d,\"per_ms\":%lld}", name, r->n, (long long)r->per_ms);
}

void render_key(FILE *f, const pgc_queue_key_info *k)
{
	fputs("{\"queue\":", f);
	json_str(f, k->queue);
	fputs(",\"key\":", f);
	json_str(f, k->key);
	fputs(",\"own\":{\"limit\":", f);
	if (k->own.limit > 0)
		fprintf(f, "%d", k->own.limit);
	else
		fputs("null", f);
	fputs(",\"weight\":", f);
	if (k->own.weight > 0)
		fprintf(f, "%d", k->own.weight);
	else
		fputs("null", f);
	render_rate(f, "rate", &k->own.rate);
	fputs("},\"limit\":", f);
	if (k->limit > 0)
		fprintf(f, "%d", k->limit);
	else
		fputs("null", f);
	render_rate(f, "rate", &k->rate);
	fprintf(f, ",\"weight\":%d,\"running\":%ld,\"pending\":%ld,\"scheduled\":%ld,"
	       "\"oldest_pending_s\":%.3f,\"held_by_limit\":%ld,\"held_by_rate\":%ld,"
	       "\"next_start_at\":", k->own.weight > 0 ? k->own.weight : 1, k->running, k->pending,
	       k->scheduled, k->oldest_pending_s, k->at_limit ? k->pending : 0,
	       !k->at_limit && k->rate_wait_ms > 0 ? k->pending : 0);
	json_str(f, k->next_start_at[0] ? k->next_start_at : NULL);
	fputs("}", f);
}

/* The keys of the flow queues among st[] that have a limit or a rate in force: the stats show
 * them. *out is freed with free(). */
int cli_flow_keys(pgc_queue *q, const pgc_queue_stat *st, size_t n, pgc_queue_key_info **out,
                     size_t *nk, pgc_error *err)
{
	*out = NULL;
	*nk = 0;
	for (size_t i = 0; i < n; i++) {
		pgc_queue_flow f;
		pgc_queue_key_info *k;
		size_t m;
		if (pgc_queue_flow_get(q, st[i].queue, &f, err) != PGC_OK)
			return err->code;
		if (!f.flow)
			continue;
		if (pgc_queue_keys(q, st[i].queue, NULL, &k, &m, err) != PGC_OK)
			return err->code;
		pgc_queue_key_info *grown = realloc(*out, (*nk + m + 1) * sizeof **out);
		if (grown == NULL) {
			pgc_free(k);
			err->code = PGC_ENOMEM;
			snprintf(err->message, sizeof err->message, "out of memory");
			return PGC_ENOMEM;
		}
		*out = grown;
		for (size_t j = 0; j < m; j++)
			if (k[j].limit > 0 || k[j].rate.n > 0)
				(*out)[(*nk)++] = k[j];
		pgc_free(k);
	}
	return PGC_OK;
}

void render_time_us(json_w *w, const char *key, int64_t us)
{
	if (us == 0) {
		json_null(w, key);
		return;
	}
	time_t s = (time_t)(us / 1000000);
	int64_t frac = us % 1000000;
	if (frac < 0) {
		frac += 1000000;
		s--;
	}
	struct tm tm;
	char d[32], b[48];
	if (gmtime_r(&s, &tm) == NULL || strftime(d, sizeof d, "%Y-%m-%dT%H:%M:%S", &tm) == 0) {
		json_null(w, key);
		return;
	}
	snprintf(b, sizeof b, "%s.%06" PRId64 "Z", d, frac);
	json_s(w, key, b);
}

void render_lease(json_w *w, const char *key, const pgc_lease_info *l)
{
	json_obj(w, key);
	json_s(w, "name", l->name);
	json_i(w, "token", l->token);
	json_s(w, "kind", l->kind);
	json_s(w, "holder", l->holder);
	json_b(w, "held", l->held);
	json_i_or_null(w, "ttl_ms", l->ttl_ms > 0, l->ttl_ms);
	render_time_us(w, "granted_at", l->granted_at_us);
	render_time_us(w, "renewed_at", l->renewed_at_us);
	render_time_us(w, "expires_at", l->expires_at_us);
	render_time_us(w, "released_at", l->released_at_us);
	/* By the server's clock: negative once it has run out. */
	json_i_or_null(w, "expires_in_ms", l->expires_at_us != 0, (l->expires_at_us - l->db_now_us) / 1000);
	json_obj_end(w);
}

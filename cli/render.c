/* render.c - one JSON rendering per library object, used by the commands' --json and by the
 * web API alike, so that an object has one shape wherever it is read */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "render.h"

void render_rate(json_w *w, const char *key, const pgc_rate *r)
{
	if (r->n <= 0) {
		json_null(w, key);
		return;
	}
	json_obj(w, key);
	json_i(w, "n", r->n);
	json_i(w, "per_ms", r->per_ms);
	json_obj_end(w);
}

void render_key(json_w *w, const char *key, const pgc_queue_key_info *k)
{
	json_obj(w, key);
	json_s(w, "queue", k->queue);
	json_s(w, "key", k->key);
	json_obj(w, "own");
	json_i_or_null(w, "limit", k->own.limit > 0, k->own.limit);
	json_i_or_null(w, "weight", k->own.weight > 0, k->own.weight);
	render_rate(w, "rate", &k->own.rate);
	json_obj_end(w);
	json_i_or_null(w, "limit", k->limit > 0, k->limit);
	render_rate(w, "rate", &k->rate);
	json_i(w, "weight", k->own.weight > 0 ? k->own.weight : 1);
	json_i(w, "running", k->running);
	json_i(w, "pending", k->pending);
	json_i(w, "scheduled", k->scheduled);
	json_f(w, "oldest_pending_s", k->oldest_pending_s, 3);
	json_i(w, "held_by_limit", k->at_limit ? k->pending : 0);
	json_i(w, "held_by_rate", !k->at_limit && k->rate_wait_ms > 0 ? k->pending : 0);
	json_s(w, "next_start_at", k->next_start_at[0] ? k->next_start_at : NULL);
	json_obj_end(w);
}

void render_queue_stat(json_w *w, const char *key, const pgc_queue_stat *st)
{
	json_obj(w, key);
	json_s(w, "queue", st->queue);
	json_b(w, "paused", st->paused);
	json_i(w, "pending", st->pending);
	json_i(w, "scheduled", st->scheduled);
	json_i(w, "running", st->running);
	json_i(w, "succeeded", st->succeeded);
	json_i(w, "failed", st->failed);
	json_i(w, "cancelled", st->cancelled);
	json_f(w, "oldest_pending_s", st->oldest_pending_s, 3);
	json_i(w, "completed_1m", st->completed_1m);
	json_i(w, "failed_1m", st->failed_1m);
	json_i(w, "waiting", st->waiting);
	json_obj_end(w);
}

void render_job_wait(json_w *w, const char *key, const pgc_job_wait *jw)
{
	json_obj(w, key);
	json_b(w, "live", jw->live);
	json_b(w, "running", jw->running);
	json_b(w, "scheduled", jw->scheduled);
	json_f(w, "run_in_s", jw->run_in_s, 3);
	json_b(w, "paused", jw->paused);
	json_i(w, "ahead", jw->ahead);
	json_i(w, "workers", jw->workers);
	json_i(w, "free_slots", jw->free_slots);
	json_s(w, "reason", jw->reason[0] ? jw->reason : NULL);
	json_obj_end(w);
}

/* A prefix of s of at most max bytes, cut on a character boundary. */
static void json_prefix(json_w *w, const char *key, const char *s, size_t max)
{
	size_t n = strlen(s);
	if (n <= max) {
		json_s(w, key, s);
		return;
	}
	while (max > 0 && ((unsigned char)s[max] & 0xc0) == 0x80)
		max--;
	char *cut = strndup(s, max);
	json_s(w, key, cut);
	free(cut);
}

void render_job(json_w *w, const char *key, const pgc_job_info *j, const pgc_job_wait *jw, unsigned flags)
{
	bool hide = (flags & RENDER_HIDE_PAYLOAD) != 0;
	json_obj(w, key);
	json_i(w, "id", j->id);
	json_s(w, "queue", j->queue);
	json_s(w, "status", j->status);
	json_i(w, "priority", j->priority);
	json_b(w, "aged", j->aged);
	json_i(w, "attempts", j->attempts);
	json_i(w, "max_attempts", j->max_attempts);
	json_i(w, "deferrals", j->deferrals);
	json_i(w, "max_deferrals", j->max_deferrals);
	json_s(w, "run_at", j->run_at);
	json_s(w, "created_at", j->created_at);
	json_s(w, "started_at", j->started_at);
	json_s(w, "finished_at", j->finished_at);
	json_s(w, "lease_until", j->lease_until);
	json_s(w, "worker", j->worker);
	json_s(w, "unique_key", j->unique_key);
	json_s(w, "key", j->key);
	json_s(w, "held", j->held);
	json_s(w, "last_error", j->last_error);
	/* A failure's last line (a traceback's exception) for the lists; the whole in last_error. */
	char last[PGC_JOB_ERROR_MAX];
	json_s(w, "error_line", j->last_error != NULL ? cli_last_line(j->last_error, last, sizeof last) : NULL);
	json_i_or_null(w, "exit_status", j->exit_status >= 0, j->exit_status);
	json_i_or_null(w, "duration_ms", j->duration_ms >= 0, j->duration_ms);
	json_u(w, "payload_bytes", j->payload ? strlen(j->payload) : 0);
	json_b(w, "payload_hidden", hide);
	if (flags & RENDER_FULL) {
		json_s(w, "output", j->output);
		/* errors and payload are JSON from the server (jsonb) already. */
		json_raw(w, "errors", j->errors ? j->errors : "[]");
		json_raw(w, "payload", hide || j->payload == NULL ? "null" : j->payload);
	} else if (hide || j->payload == NULL) {
		json_null(w, "payload_preview");
	} else {
		json_prefix(w, "payload_preview", j->payload, 160);
	}
	if (jw != NULL)
		render_job_wait(w, "wait", jw);
	json_obj_end(w);
}

/* An instant in the schedule's zone (ISO 8601 with its offset), null for 0. */
void render_cron_time(json_w *w, const char *key, const pgc_cron *c, int64_t us)
{
	char b[PGC_CRON_TIME_MAX];
	pgc_error err;
	if (us == 0 || c == NULL || pgc_cron_format_local(c, us / 1000000 - (us % 1000000 < 0), b, sizeof b, &err) != PGC_OK)
		json_null(w, key);
	else
		json_s(w, key, b);
}

void render_cron_run_members(json_w *w, const pgc_cron_run *r)
{
	json_s(w, "job_status", r->job_status[0] ? r->job_status : NULL);
	bool known = r->job_status[0] && strcmp(r->job_status, "gone") != 0;
	json_i_or_null(w, "attempts", known, r->attempts);
	json_i_or_null(w, "max_attempts", known, r->max_attempts);
	json_i_or_null(w, "exit_status", r->exit_status >= 0, r->exit_status);
	json_i_or_null(w, "duration_ms", r->duration_ms >= 0, r->duration_ms);
	json_s(w, "error", r->error);
	json_s(w, "output", r->output);
}

void render_schedule(json_w *w, const char *key, const pgc_cron_info *x, const pgc_cron_run *last, unsigned flags)
{
	bool hide = (flags & RENDER_HIDE_PAYLOAD) != 0;
	pgc_cron *c = NULL;
	pgc_error err;
	if (pgc_cron_parse(x->expr, x->tz, &c, &err) != PGC_OK)
		c = NULL;
	char d[PGC_DURATION_FORMAT_MAX];
	json_obj(w, key);
	json_s(w, "name", x->name);
	json_s(w, "schedule", x->expr);
	json_s(w, "tz", x->tz);
	json_s(w, "queue", x->queue);
	/* command and payload are JSON from the server already. */
	json_raw(w, "command", hide || x->command == NULL ? "null" : x->command);
	json_i_or_null(w, "max_attempts", x->max_attempts > 0, x->max_attempts);
	json_raw(w, "payload", hide || x->payload == NULL ? "null" : x->payload);
	json_u(w, "payload_bytes", x->payload ? strlen(x->payload) : 0);
	json_b(w, "payload_hidden", hide);
	json_s(w, "catch_up", pgc_cron_catch_up_name(x->catch_up));
	json_s(w, "catch_up_window", cli_duration_str(x->catch_up_window_ms, d));
	json_i(w, "catch_up_max", x->catch_up_max);
	json_s(w, "overlap", pgc_cron_overlap_name(x->overlap));
	json_s(w, "jitter", cli_duration_str(x->jitter_ms, d));
	json_b(w, "paused", x->paused);
	render_cron_time(w, "next_tick", c, x->paused ? 0 : x->next_tick_us);
	render_cron_time(w, "last_tick", c, x->last_tick_us);
	json_s(w, "last_outcome", x->last_outcome);
	/* The last run's job (the run log), or null when it has none. */
	if (last != NULL && last->tick.job_id > 0) {
		json_obj(w, "last_job");
		json_i(w, "id", last->tick.job_id);
		render_cron_run_members(w, last);
		json_obj_end(w);
	} else {
		json_null(w, "last_job");
	}
	render_cron_time(w, "last_fired_at", c, x->last_fired_us);
	render_cron_time(w, "last_success", c, x->last_success_us);
	json_i(w, "fired", x->fired);
	json_i(w, "missed", x->missed);
	json_i(w, "skipped", x->skipped);
	json_s(w, "last_scheduler", x->last_scheduler);
	render_cron_time(w, "seen_at", c, x->seen_us);
	/* By the server's clock: how long the next tick is past due. */
	double overdue = !x->paused && x->next_tick_us > 0 && x->db_now_us > x->next_tick_us
	                 ? (double)(x->db_now_us - x->next_tick_us) / 1e6 : 0.0;
	json_f(w, "overdue_s", overdue, 3);
	render_cron_time(w, "created_at", c, x->created_us);
	render_cron_time(w, "updated_at", c, x->updated_us);
	json_obj_end(w);
	pgc_cron_free(c);
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

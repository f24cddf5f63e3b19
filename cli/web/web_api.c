/* web_api.c - pgcoord web's JSON API and /metrics, each path one handler over the library
 *
 * Every handler takes one session of the pool for the length of its calls and gives it back;
 * what it writes goes to the response's memory stream. Reads are bounded (capped counts, keyset
 * pages with a scan bound); the paths and their fields are documented in pgcoord-web(1). */
#include <inttypes.h>
#include <math.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "diag_out.h"
#include "render.h"
#include "web.h"

/* ---- helpers ---- */

static int64_t mono_ms(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* The schema as it appears in a GRANT: quoted when it needs to be. */
static void grant_hint(const web_server *srv, char *buf, size_t size)
{
	const char *s = srv->schema ? srv->schema : "pgcoord";
	bool plain = s[0] != '\0' && !(s[0] >= '0' && s[0] <= '9');
	for (const char *p = s; *p && plain; p++)
		plain = (*p >= 'a' && *p <= 'z') || (*p >= '0' && *p <= '9') || *p == '_';
	char q[160];
	if (plain) {
		snprintf(q, sizeof q, "%s", s);
	} else {
		size_t o = 0;
		q[o++] = '"';
		for (const char *p = s; *p && o + 3 < sizeof q; p++) {
			if (*p == '"')
				q[o++] = '"';
			q[o++] = *p;
		}
		q[o++] = '"';
		q[o] = '\0';
	}
	snprintf(buf, size, "GRANT USAGE ON SCHEMA %s TO <role>; GRANT SELECT ON ALL TABLES IN SCHEMA %s TO <role>",
	         q, q);
}

/* The response for a failed library call: 503 when the server could not be reached (the
 * session is reopened by the next request), 403 with what to grant for 42501, 404, 400, 500. */
static void db_error(web_req *r, web_resp *out, const pgc_error *err)
{
	int status = 500;
	if (err->code == PGC_ECONNLOST || err->code == PGC_ECONNECT || err->code == PGC_ETIMEDOUT ||
	    err->code == PGC_EAUTH || err->code == PGC_ECONFIG)
		status = 503;
	else if (err->code == PGC_ENOTFOUND)
		status = 404;
	else if (err->code == PGC_EDUPLICATE || err->code == PGC_EFINISHED)
		status = 409;
	else if (err->code == PGC_EUSAGE)
		status = 400;
	else if (err->code == PGC_ENOSCHEMA)
		status = 503;
	if (strcmp(err->sqlstate, "42501") == 0) {
		char hint[400];
		grant_hint(r->srv, hint, sizeof hint);
		web_error(out, 403, NULL, "%s", err->message);
		/* The error object gets what to grant, for the panel to say. */
		fclose(out->f);
		free(out->body);
		out->body = NULL;
		out->f = open_memstream(&out->body, &out->len);
		if (out->f == NULL)
			return;
		json_w w = json_w_on(out->f);
		json_obj(&w, NULL);
		json_obj(&w, "error");
		json_s(&w, "message", err->message);
		json_s(&w, "sqlstate", "42501");
		json_s(&w, "needs", hint);
		json_obj_end(&w);
		json_obj_end(&w);
		fputc('\n', out->f);
		return;
	}
	web_error(out, status, NULL, "%s", err->message);
}

static bool check_args(web_req *r, web_resp *out, const char *const *names)
{
	const char *bad = web_unknown_arg(r, names);
	if (bad == NULL)
		return true;
	web_error(out, 400, bad, "unknown parameter \"%.100s\"", bad);
	return false;
}

/* Parses parameter name as an integer in [min, max]; absent: *v unchanged. */
static bool int_arg(web_req *r, web_resp *out, const char *name, long long min, long long max, long long *v)
{
	const char *s = web_arg(r, name);
	if (s == NULL)
		return true;
	if (!cli_parse_int(s, min, max, v)) {
		web_error(out, 400, name, "%s must be a whole number from %lld to %lld", name, min, max);
		return false;
	}
	return true;
}

/* Parameter name as a queue name (or NULL when absent); false after a 400. */
static bool name_arg(web_req *r, web_resp *out, const char *name, const char **v)
{
	*v = web_arg(r, name);
	if (*v == NULL)
		return true;
	pgc_error e;
	if (pgc_name_check(name, *v, PGC_QUEUE_NAME_MAX, &e) != PGC_OK) {
		web_error(out, 400, name, "%s", e.message);
		return false;
	}
	return true;
}

/* ---- GET handlers ---- */

static void api_config(web_req *r, web_resp *out)
{
	static const char *const ok[] = { NULL };
	if (!check_args(r, out, ok))
		return;
	const web_server *srv = r->srv;
	json_w w = json_w_on(out->f);
	json_obj(&w, NULL);
	json_s(&w, "version", pgc_version());
	json_s(&w, "schema", srv->schema ? srv->schema : "pgcoord");
	json_b(&w, "actions", srv->allow_actions);
	json_b(&w, "terminate", srv->allow_actions && srv->allow_terminate);
	json_b(&w, "hide_payloads", srv->hide_payloads);
	json_b(&w, "auth", srv->creds != NULL);
	json_i(&w, "refresh_ms", srv->refresh_ms);
	json_i(&w, "count_cap", WEB_COUNT_CAP);
	json_obj_end(&w);
	fputc('\n', out->f);
	out->status = 200;
}

static void api_queues(web_req *r, web_resp *out, web_slot *s, pgc_error *err)
{
	static const char *const ok[] = { "queue", NULL };
	const char *queue;
	if (!check_args(r, out, ok) || !name_arg(r, out, "queue", &queue))
		return;
	pgc_queue_stat *st;
	size_t n;
	if (pgc_queue_stats_capped(s->q, queue, WEB_COUNT_CAP, &st, &n, err) != PGC_OK) {
		db_error(r, out, err);
		return;
	}
	json_w w = json_w_on(out->f);
	json_obj(&w, NULL);
	json_i(&w, "count_cap", WEB_COUNT_CAP);
	json_arr(&w, "queues");
	for (size_t i = 0; i < n; i++)
		render_queue_stat(&w, NULL, &st[i]);
	json_arr_end(&w);
	json_obj_end(&w);
	fputc('\n', out->f);
	pgc_free(st);
	out->status = 200;
}

/* The most keys one answer lists; total says how many there are. */
#define WEB_KEYS_MAX 500

static void api_keys(web_req *r, web_resp *out, web_slot *s, pgc_error *err)
{
	static const char *const ok[] = { "queue", "key", NULL };
	const char *queue, *key = web_arg(r, "key");
	if (!check_args(r, out, ok) || !name_arg(r, out, "queue", &queue))
		return;
	if (queue == NULL) {
		web_error(out, 400, "queue", "queue is needed");
		return;
	}
	if (key != NULL && (key[0] == '\0' || strlen(key) > PGC_QUEUE_KEY_MAX)) {
		web_error(out, 400, "key", "key must be 1 to %d bytes", PGC_QUEUE_KEY_MAX);
		return;
	}
	pgc_queue_key_info *k;
	size_t n;
	int rc = pgc_queue_keys(s->q, queue, key, &k, &n, err);
	if (rc == PGC_ENOTFOUND) {
		web_error(out, 404, "key", "%s", err->message);
		return;
	}
	if (rc != PGC_OK) {
		db_error(r, out, err);
		return;
	}
	json_w w = json_w_on(out->f);
	json_obj(&w, NULL);
	json_s(&w, "queue", queue);
	json_arr(&w, "keys");
	for (size_t i = 0; i < n && i < WEB_KEYS_MAX; i++)
		render_key(&w, NULL, &k[i]);
	json_arr_end(&w);
	json_u(&w, "total", n);
	json_obj_end(&w);
	fputc('\n', out->f);
	pgc_free(k);
	out->status = 200;
}

static void api_workers(web_req *r, web_resp *out, web_slot *s, pgc_error *err)
{
	static const char *const ok[] = { NULL };
	if (!check_args(r, out, ok))
		return;
	pgc_queue_worker *w;
	size_t n;
	if (pgc_queue_workers(s->q, &w, &n, err) != PGC_OK) {
		db_error(r, out, err);
		return;
	}
	json_w j = json_w_on(out->f);
	json_obj(&j, NULL);
	json_arr(&j, "workers");
	for (size_t i = 0; i < n; i++) {
		json_obj(&j, NULL);
		json_s(&j, "channel", w[i].channel);
		json_s(&j, "queues", w[i].queues);
		json_i(&j, "free", w[i].free);
		json_f(&j, "seen_s", w[i].seen_s, 3);
		json_b(&j, "alive", w[i].seen_s < 10);
		json_obj_end(&j);
	}
	json_arr_end(&j);
	json_obj_end(&j);
	fputc('\n', out->f);
	pgc_free(w);
	out->status = 200;
}

static void api_jobs(web_req *r, web_resp *out, web_slot *s, pgc_error *err)
{
	static const char *const ok[] = { "queue", "status", "key", "key_prefix", "q", "after", "limit", NULL };
	pgc_queue_browse_filter bf = PGC_QUEUE_BROWSE_FILTER_INIT;
	long long after = 0, limit = 50;
	if (!check_args(r, out, ok) || !name_arg(r, out, "queue", &bf.queue) ||
	    !int_arg(r, out, "after", 1, INT64_MAX, &after) || !int_arg(r, out, "limit", 1, 500, &limit))
		return;
	bf.status = web_arg(r, "status");
	static const char *const statuses[] = { "waiting", "scheduled", "pending", "running", "succeeded",
	                                        "failed", "cancelled" };
	bool known = bf.status == NULL;
	for (size_t i = 0; i < sizeof statuses / sizeof statuses[0] && !known; i++)
		known = strcmp(bf.status, statuses[i]) == 0;
	if (!known) {
		web_error(out, 400, "status",
		          "status must be waiting, scheduled, pending, running, succeeded, failed or cancelled");
		return;
	}
	bf.key_prefix = web_arg(r, "key_prefix");
	bf.job_key = web_arg(r, "key");
	bf.text = web_arg(r, "q");
	if (bf.key_prefix != NULL && (bf.key_prefix[0] == '\0' || strlen(bf.key_prefix) > 1024)) {
		web_error(out, 400, "key_prefix", "key_prefix must be 1 to 1024 bytes");
		return;
	}
	if (bf.job_key != NULL && (bf.job_key[0] == '\0' || strlen(bf.job_key) > PGC_QUEUE_KEY_MAX)) {
		web_error(out, 400, "key", "key must be 1 to %d bytes", PGC_QUEUE_KEY_MAX);
		return;
	}
	if (bf.text != NULL && (bf.text[0] == '\0' || strlen(bf.text) > 1024)) {
		web_error(out, 400, "q", "q must be 1 to 1024 bytes");
		return;
	}
	/* With hidden payloads, a search must not tell what they hold: it looks at errors only. */
	bf.text_in_errors_only = r->srv->hide_payloads;
	bf.before_id = after;
	bf.limit = (long)limit;
	pgc_job_info **js;
	size_t n;
	int64_t next;
	if (pgc_queue_browse(s->q, &bf, &js, &n, &next, err) != PGC_OK) {
		db_error(r, out, err);
		return;
	}
	unsigned flags = r->srv->hide_payloads ? RENDER_HIDE_PAYLOAD : 0;
	json_w w = json_w_on(out->f);
	json_obj(&w, NULL);
	json_arr(&w, "jobs");
	for (size_t i = 0; i < n; i++)
		render_job(&w, NULL, js[i], NULL, flags);
	json_arr_end(&w);
	json_i_or_null(&w, "next", next > 0, next);
	json_i(&w, "limit", limit);
	json_obj_end(&w);
	fputc('\n', out->f);
	pgc_queue_infos_free(js, n);
	out->status = 200;
}

static void api_job(web_req *r, web_resp *out, web_slot *s, int64_t id, pgc_error *err)
{
	static const char *const ok[] = { NULL };
	if (!check_args(r, out, ok))
		return;
	pgc_job_info *j;
	pgc_job_wait w;
	if (pgc_queue_show(s->q, id, &j, err) != PGC_OK) {
		db_error(r, out, err);
		return;
	}
	if (pgc_queue_job_wait(s->q, id, &w, err) != PGC_OK && err->code != PGC_ENOTFOUND) {
		pgc_free(j);
		db_error(r, out, err);
		return;
	}
	if (err->code == PGC_ENOTFOUND) /* gone between the two reads */
		memset(&w, 0, sizeof w);
	json_w jw = json_w_on(out->f);
	json_obj(&jw, NULL);
	render_job(&jw, "job", j, &w, RENDER_FULL | (r->srv->hide_payloads ? RENDER_HIDE_PAYLOAD : 0));
	json_obj_end(&jw);
	fputc('\n', out->f);
	pgc_free(j);
	out->status = 200;
}

static void api_schedules(web_req *r, web_resp *out, web_slot *s, pgc_error *err)
{
	static const char *const ok[] = { NULL };
	if (!check_args(r, out, ok))
		return;
	pgc_cron_info *xs;
	size_t n, nr = 0;
	pgc_cron_run *runs = NULL;
	if (pgc_cron_list(s->conn, r->srv->schema, NULL, &xs, &n, err) != PGC_OK) {
		db_error(r, out, err);
		return;
	}
	/* Each schedule's last run with its job (both lists are by name), as cron list shows. */
	if (pgc_cron_runs(s->conn, r->srv->schema, NULL, 1, PGC_CRON_RUNS_COME, &runs, &nr, err) != PGC_OK) {
		pgc_cron_infos_free(xs, n);
		db_error(r, out, err);
		return;
	}
	unsigned flags = r->srv->hide_payloads ? RENDER_HIDE_PAYLOAD : 0;
	json_w w = json_w_on(out->f);
	json_obj(&w, NULL);
	json_arr(&w, "schedules");
	for (size_t i = 0, k = 0; i < n; i++) {
		while (k < nr && strcmp(runs[k].schedule, xs[i].name) < 0)
			k++;
		render_schedule(&w, NULL, &xs[i], k < nr && strcmp(runs[k].schedule, xs[i].name) == 0 ? &runs[k] : NULL,
		                flags);
	}
	json_arr_end(&w);
	json_obj_end(&w);
	fputc('\n', out->f);
	pgc_cron_runs_free(runs, nr);
	pgc_cron_infos_free(xs, n);
	out->status = 200;
}

static void api_leases(web_req *r, web_resp *out, web_slot *s, pgc_error *err)
{
	static const char *const ok[] = { NULL };
	if (!check_args(r, out, ok))
		return;
	pgc_lease_options lo = PGC_LEASE_OPTIONS_INIT;
	lo.schema = r->srv->schema;
	lo.timeout_ms = WEB_STATEMENT_MS + 1000;
	pgc_lease_info *ls;
	size_t n;
	if (pgc_lease_list(s->conn, &lo, &ls, &n, err) != PGC_OK) {
		db_error(r, out, err);
		return;
	}
	json_w w = json_w_on(out->f);
	json_obj(&w, NULL);
	json_arr(&w, "leases");
	for (size_t i = 0; i < n; i++)
		render_lease(&w, NULL, &ls[i]);
	json_arr_end(&w);
	json_obj_end(&w);
	fputc('\n', out->f);
	pgc_free(ls);
	out->status = 200;
}

static int take_snapshot(web_req *r, web_slot *s, pgc_diag_snapshot **snap, pgc_error *err)
{
	pgc_diag_options o = PGC_DIAG_OPTIONS_INIT;
	o.schema = r->srv->schema;
	int rc = pgc_diag_snapshot_take(s->conn, &o, snap, err);
	if (rc == PGC_ESQL && strcmp(err->sqlstate, "42501") == 0) {
		/* A role that may not read the schema still sees the locks, without their names. */
		o.names = false;
		rc = pgc_diag_snapshot_take(s->conn, &o, snap, err);
	}
	return rc;
}

static void api_locks(web_req *r, web_resp *out, web_slot *s, pgc_error *err)
{
	static const char *const ok[] = { NULL };
	if (!check_args(r, out, ok))
		return;
	pgc_diag_snapshot *snap;
	if (take_snapshot(r, s, &snap, err) != PGC_OK) {
		db_error(r, out, err);
		return;
	}
	json_w w = json_w_on(out->f);
	json_obj(&w, NULL);
	json_s(&w, "taken_at", snap->taken_at);
	json_b(&w, "names_available", snap->names_available);
	json_arr(&w, "locks");
	for (size_t i = 0; i < snap->nlocks; i++) {
		const pgc_diag_lock *l = &snap->locks[i];
		if (l->key == NULL)
			continue;
		const pgc_diag_session *ss = pgc_diag_session_find(snap, l->pid);
		char key[PGC_KEY_FORMAT_MAX];
		pgc_key_format(l->key, key, sizeof key);
		json_obj(&w, NULL);
		json_i(&w, "pid", l->pid);
		json_s(&w, "key", key);
		json_s(&w, "space", pgc_key_space_name(l->key->kind));
		json_s(&w, "name", l->key->name[0] ? l->key->name : NULL);
		json_s(&w, "mode", l->mode);
		json_b(&w, "granted", l->granted);
		json_f(&w, "waited_s", l->waited_s < 0 ? (double)NAN : l->waited_s, 3);
		json_s(&w, "application", ss ? ss->application : NULL);
		json_s(&w, "user", ss ? ss->user : NULL);
		json_s(&w, "state", ss ? ss->state : NULL);
		json_f(&w, "xact_age_s", ss == NULL || ss->xact_age_s < 0 ? (double)NAN : ss->xact_age_s, 3);
		json_s(&w, "backend_start", ss ? ss->backend_start : NULL);
		json_obj_end(&w);
	}
	json_arr_end(&w);
	json_obj_end(&w);
	fputc('\n', out->f);
	pgc_diag_snapshot_free(snap);
	out->status = 200;
}

static void api_blockers(web_req *r, web_resp *out, web_slot *s, pgc_error *err)
{
	static const char *const ok[] = { NULL };
	if (!check_args(r, out, ok))
		return;
	pgc_diag_snapshot *snap;
	if (take_snapshot(r, s, &snap, err) != PGC_OK) {
		db_error(r, out, err);
		return;
	}
	diag_json_forest(out->f, snap);
	pgc_diag_snapshot_free(snap);
	out->status = 200;
}

#define WEB_DOCTOR_MS 30000

static void api_doctor(web_req *r, web_resp *out, web_slot *s, pgc_error *err)
{
	static const char *const ok[] = { NULL };
	if (!check_args(r, out, ok))
		return;
	web_server *srv = r->srv;
	/* The doctor opens a session of its own and may wait for a pooler: it runs at most once
	 * per WEB_DOCTOR_MS whatever the number of pages polling it. */
	pthread_mutex_lock(&srv->doctor_mu);
	int64_t now = mono_ms();
	if (srv->doctor_at_ms == 0 || now - srv->doctor_at_ms >= WEB_DOCTOR_MS) {
		pgc_doctor_options o = PGC_DOCTOR_OPTIONS_INIT;
		o.schema = srv->schema;
		pgc_doctor_report rep;
			if (pgc_doctor_run(s->conn, &o, &rep, err) != PGC_OK) {
			pthread_mutex_unlock(&srv->doctor_mu);
			db_error(r, out, err);
			return;
		}
		srv->doctor = rep;
		srv->doctor_at_ms = now;
		cli_fmt_time_us((int64_t)time(NULL) * 1000000, srv->doctor_taken, sizeof srv->doctor_taken);
	}
	json_w w = json_w_on(out->f);
	json_obj(&w, NULL);
	json_s(&w, "checked_at", srv->doctor_taken);
	json_f(&w, "age_s", (double)(now - srv->doctor_at_ms) / 1000.0, 1);
	json_s(&w, "worst", pgc_doctor_severity_name(srv->doctor.worst));
	json_arr(&w, "findings");
	for (int i = 0; i < srv->doctor.count; i++) {
		const pgc_doctor_finding *x = &srv->doctor.findings[i];
		json_obj(&w, NULL);
		json_s(&w, "check", x->check);
		json_s(&w, "severity", pgc_doctor_severity_name(x->severity));
		json_s(&w, "value", x->value);
		json_s(&w, "message", x->message);
		json_s(&w, "fix", x->fix[0] ? x->fix : NULL);
		json_obj_end(&w);
	}
	json_arr_end(&w);
	json_obj_end(&w);
	fputc('\n', out->f);
	pthread_mutex_unlock(&srv->doctor_mu);
	out->status = 200;
}

static void api_metrics(web_req *r, web_resp *out, web_slot *s, pgc_error *err)
{
	static const char *const ok[] = { NULL };
	if (!check_args(r, out, ok))
		return;
	pgc_queue_stat *st;
	size_t n;
	if (pgc_queue_stats_capped(s->q, NULL, WEB_COUNT_CAP, &st, &n, err) != PGC_OK) {
		db_error(r, out, err);
		return;
	}
	pgc_cron_info *xs = NULL;
	size_t nx = 0;
	if (pgc_cron_list(s->conn, r->srv->schema, NULL, &xs, &nx, err) != PGC_OK) {
		pgc_free(st);
		db_error(r, out, err);
		return;
	}
	pgc_queue_key_info *k = NULL;
	size_t nk = 0;
	if (cli_flow_keys(s->q, st, n, &k, &nk, err) != PGC_OK) {
		pgc_free(st);
		pgc_cron_infos_free(xs, nx);
		db_error(r, out, err);
		return;
	}
	cli_prom_queue_stats(out->f, st, n, NULL);
	cli_prom_queue_keys(out->f, k, nk);
	cli_prom_cron(out->f, xs, nx);
	free(k);
	pgc_free(st);
	pgc_cron_infos_free(xs, nx);
	out->status = 200;
	out->type = "text/plain; version=0.0.4; charset=utf-8";
}

/* ---- actions (POST, only with --allow-actions) ---- */

/* One line on stderr per action: who, from where, what, how many. */
static void log_action(const web_req *r, const char *fmt, ...) PGC_PRINTF(2, 3);
static void log_action(const web_req *r, const char *fmt, ...)
{
	char what[600];
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(what, sizeof what, fmt, ap);
	va_end(ap);
	fprintf(stderr, "pgcoord: web: action by %s from %s: %s\n", r->who ? cli_esc(r->who) : "-", r->client,
	        cli_esc(what));
	fflush(stderr);
}

static void done(web_resp *out, const char *msg, long rows)
{
	out->status = 200;
	json_w w = json_w_on(out->f);
	json_obj(&w, NULL);
	json_b(&w, "ok", true);
	json_s(&w, "message", msg);
	json_i(&w, "rows", rows);
	json_obj_end(&w);
	fputc('\n', out->f);
}

static void act_job(web_req *r, web_resp *out, web_slot *s, int64_t id, const char *verb, pgc_error *err)
{
	static const char *const ok[] = { NULL };
	if (!check_args(r, out, ok))
		return;
	char msg[200];
	if (strcmp(verb, "retry") == 0) {
		if (pgc_queue_retry(s->q, id, err) != PGC_OK) {
			log_action(r, "retry job %" PRId64 ": refused: %s", id, err->message);
			db_error(r, out, err);
			return;
		}
		snprintf(msg, sizeof msg, "job %" PRId64 " returns to pending", id);
	} else {
		bool was_running = false;
		if (pgc_queue_cancel_job(s->q, id, &was_running, err) != PGC_OK) {
			log_action(r, "cancel job %" PRId64 ": refused: %s", id, err->message);
			db_error(r, out, err);
			return;
		}
		snprintf(msg, sizeof msg, "job %" PRId64 " cancelled%s", id, was_running ? " (it was running: its worker stops it)" : "");
	}
	log_action(r, "%s job %" PRId64 ": 1 job", verb, id);
	done(out, msg, 1);
}

static void act_queue(web_req *r, web_resp *out, web_slot *s, const char *name, bool pause, pgc_error *err)
{
	static const char *const ok[] = { NULL };
	if (!check_args(r, out, ok))
		return;
	pgc_error e;
	if (pgc_name_check("queue name", name, PGC_QUEUE_NAME_MAX, &e) != PGC_OK) {
		web_error(out, 400, "queue", "%s", e.message);
		return;
	}
	if (pgc_queue_pause(s->q, name, pause, err) != PGC_OK) {
		db_error(r, out, err);
		return;
	}
	log_action(r, "%s queue %s: 1 queue", pause ? "pause" : "resume", name);
	char msg[200];
	snprintf(msg, sizeof msg, "queue %.128s %s", name, pause ? "paused" : "resumed");
	done(out, msg, 1);
}

static void act_bulk(web_req *r, web_resp *out, web_slot *s, pgc_error *err)
{
	static const char *const ok[] = { "op", "queue", "status", "key_prefix", "older_than", "dry_run", "confirm", "upto",
	                                  NULL };
	if (!check_args(r, out, ok))
		return;
	pgc_queue_bulk b = PGC_QUEUE_BULK_INIT;
	const char *op = web_arg(r, "op");
	if (op == NULL || (strcmp(op, "cancel") != 0 && strcmp(op, "retry") != 0 && strcmp(op, "purge") != 0)) {
		web_error(out, 400, "op", "op must be cancel, retry or purge");
		return;
	}
	b.op = strcmp(op, "cancel") == 0 ? PGC_BULK_CANCEL : strcmp(op, "retry") == 0 ? PGC_BULK_RETRY : PGC_BULK_PURGE;
	if (!name_arg(r, out, "queue", &b.queue))
		return;
	if (b.queue == NULL && b.op != PGC_BULK_PURGE) {
		web_error(out, 400, "queue", "queue is needed for a bulk %s", op);
		return;
	}
	b.status = web_arg(r, "status");
	b.key_prefix = web_arg(r, "key_prefix");
	const char *older = web_arg(r, "older_than");
	if (older != NULL) {
		pgc_error e;
		if (pgc_duration_parse(older, &b.older_than_ms, &e) != PGC_OK) {
			web_error(out, 400, "older_than", "older_than: %s", e.message);
			return;
		}
	}
	const char *dry = web_arg(r, "dry_run");
	if (dry != NULL && strcmp(dry, "1") != 0 && strcmp(dry, "true") != 0) {
		web_error(out, 400, "dry_run", "dry_run must be 1");
		return;
	}
	long long confirm = -1, upto = 0;
	if (!int_arg(r, out, "confirm", 0, INT64_MAX, &confirm) || !int_arg(r, out, "upto", 0, INT64_MAX, &upto))
		return;
	if (dry == NULL && (confirm < 0 || web_arg(r, "upto") == NULL)) {
		web_error(out, 400, confirm < 0 ? "confirm" : "upto", "a bulk %s runs only with confirm=COUNT and upto=ID "
		          "from its dry run (dry_run=1)", op);
		return;
	}
	b.upto_id = upto;
	long count;
	if (pgc_queue_bulk_count(s->q, &b, &count, err) != PGC_OK) {
		db_error(r, out, err);
		return;
	}
	if (dry != NULL) {
		out->status = 200;
		char msg[64];
		snprintf(msg, sizeof msg, "%ld jobs match", count);
		json_w w = json_w_on(out->f);
		json_obj(&w, NULL);
		json_b(&w, "ok", true);
		json_b(&w, "dry_run", true);
		json_i(&w, "count", count);
		json_i(&w, "upto", b.upto_id);
		json_s(&w, "message", msg);
		json_obj_end(&w);
		fputc('\n', out->f);
		return;
	}
	if (count != confirm) {
		log_action(r, "bulk %s queue %s: refused: %ld jobs match now, %lld were confirmed", op,
		           b.queue ? b.queue : "(all)", count, confirm);
		web_error(out, 409, "confirm", "%ld jobs match now, not %lld: count again (dry_run=1)", count, confirm);
		return;
	}
	pgc_queue_bulk_result res = { 0, 0, 0 };
	int rc = pgc_queue_bulk_run(s->q, &b, &res, err);
	log_action(r, "bulk %s queue %s status %s key prefix %s: %ld jobs%s", op, b.queue ? b.queue : "(all)",
	           b.status ? b.status : "(default)", b.key_prefix ? b.key_prefix : "(any)", res.done,
	           rc == PGC_OK ? "" : " before an error");
	if (rc != PGC_OK) {
		db_error(r, out, err);
		return;
	}
	out->status = 200;
	char msg[64];
	snprintf(msg, sizeof msg, "%ld jobs: %s", res.done, op);
	json_w w = json_w_on(out->f);
	json_obj(&w, NULL);
	json_b(&w, "ok", true);
	json_i(&w, "rows", res.done);
	json_i(&w, "skipped", res.skipped);
	json_i(&w, "batches", res.batches);
	json_s(&w, "message", msg);
	json_obj_end(&w);
	fputc('\n', out->f);
}

static void act_schedule(web_req *r, web_resp *out, web_slot *s, const char *name, const char *verb, pgc_error *err)
{
	static const char *const ok[] = { NULL };
	if (!check_args(r, out, ok))
		return;
	char msg[300];
	int64_t job = 0;
	int rc = strcmp(verb, "trigger") == 0 ? pgc_cron_trigger(s->conn, r->srv->schema, name, &job, err)
	         : pgc_cron_pause(s->conn, r->srv->schema, name, strcmp(verb, "pause") == 0, err);
	if (rc != PGC_OK) {
		log_action(r, "%s schedule %s: refused: %s", verb, name, err->message);
		db_error(r, out, err);
		return;
	}
	if (job > 0)
		snprintf(msg, sizeof msg, "schedule %.200s triggered: job %" PRId64, name, job);
	else
		snprintf(msg, sizeof msg, "schedule %.200s: %s", name, strcmp(verb, "pause") == 0 ? "paused" : "resumed");
	log_action(r, "%s schedule %s: 1 schedule", verb, name);
	done(out, msg, 1);
}

static void act_session(web_req *r, web_resp *out, web_slot *s, int pid, const char *verb, pgc_error *err)
{
	static const char *const ok[] = { "backend_start", NULL };
	if (!check_args(r, out, ok))
		return;
	bool terminate = strcmp(verb, "terminate") == 0;
	if (terminate && !r->srv->allow_terminate) {
		web_error(out, 403, NULL, "terminating sessions is off: start pgcoord web with --allow-terminate");
		return;
	}
	const char *start = web_arg(r, "backend_start");
	if (start == NULL || start[0] == '\0') {
		web_error(out, 400, "backend_start", "backend_start is needed: the start of the session named (from "
		          "/api/blockers), so that a pid reused by a new session is not hit");
		return;
	}
	pgc_diag_signal_result res;
	if (pgc_diag_signal_session(s->conn, pid, start, terminate ? PGC_DIAG_TERMINATE : PGC_DIAG_CANCEL, 5000, &res,
	                            err) != PGC_OK) {
		log_action(r, "%s pid %d: refused: %s", verb, pid, err->message);
		if (strcmp(err->sqlstate, "42501") == 0) {
			web_error(out, 403, NULL, "%s", err->message);
			return;
		}
		db_error(r, out, err);
		return;
	}
	log_action(r, "%s pid %d (started %s): %s", verb, pid, start,
	           !res.done ? "not done" : res.gone ? "session gone" : "done");
	out->status = 200;
	char msg[400];
	snprintf(msg, sizeof msg, "pid %d: %s", pid, !res.done ? (res.warning[0] ? res.warning : "not done")
	         : res.gone ? "the session is gone" : terminate ? "terminated" : "query cancelled");
	json_w w = json_w_on(out->f);
	json_obj(&w, NULL);
	json_b(&w, "ok", res.done);
	json_b(&w, "done", res.done);
	json_b(&w, "gone", res.gone);
	json_s(&w, "state", res.gone ? NULL : res.state);
	json_s(&w, "message", msg);
	json_i(&w, "rows", 1);
	json_obj_end(&w);
	fputc('\n', out->f);
}

/* Splits "/api/<what>/<middle>/<verb>" with verb one of verbs: *middle (allocated) and the
 * verb; false when the path is not of that form. middle may hold "/" (a queue name). */
static bool split_action(const char *p, const char *prefix, const char *const *verbs, char **middle, const char **verb)
{
	size_t lp = strlen(prefix), n = strlen(p);
	if (strncmp(p, prefix, lp) != 0)
		return false;
	for (const char *const *v = verbs; *v; v++) {
		size_t lv = strlen(*v);
		if (n > lp + lv + 1 && p[n - lv - 1] == '/' && strcmp(p + n - lv, *v) == 0) {
			*middle = strndup(p + lp, n - lp - lv - 1);
			*verb = *v;
			return *middle != NULL;
		}
	}
	return false;
}

static void web_actions(web_req *r, web_resp *out)
{
	const char *p = r->path;
	static const char *const job_verbs[] = { "retry", "cancel", NULL };
	static const char *const queue_verbs[] = { "pause", "resume", NULL };
	static const char *const cron_verbs[] = { "pause", "resume", "trigger", NULL };
	static const char *const session_verbs[] = { "cancel", "terminate", NULL };
	char *middle = NULL;
	const char *verb = NULL;
	enum { NONE, BULK, JOB, QUEUE, CRON, SESSION } what = NONE;
	if (strcmp(p, "/api/jobs/bulk") == 0)
		what = BULK;
	else if (split_action(p, "/api/jobs/", job_verbs, &middle, &verb))
		what = JOB;
	else if (split_action(p, "/api/queues/", queue_verbs, &middle, &verb))
		what = QUEUE;
	else if (split_action(p, "/api/schedules/", cron_verbs, &middle, &verb))
		what = CRON;
	else if (split_action(p, "/api/sessions/", session_verbs, &middle, &verb))
		what = SESSION;
	long long num = 0;
	if ((what == JOB && !cli_parse_int(middle, 1, INT64_MAX, &num)) ||
	    (what == SESSION && !cli_parse_int(middle, 1, 2147483647, &num)))
		what = NONE;
	if (what == NONE) {
		free(middle);
		web_error(out, 404, NULL, "no such action: POST %.200s", p);
		return;
	}
	pgc_error err;
	web_slot *s = web_pool_get(r->srv, &err);
	if (s == NULL) {
		free(middle);
		db_error(r, out, &err);
		return;
	}
	bool needs_queue = what == BULK || what == JOB || what == QUEUE;
	if (needs_queue && web_slot_queue(r->srv, s, &err) != PGC_OK) {
		free(middle);
		db_error(r, out, &err);
		web_pool_put(r->srv, s, &err);
		return;
	}
	pgc_error_clear(&err);
	switch (what) {
	case BULK: act_bulk(r, out, s, &err); break;
	case JOB: act_job(r, out, s, num, verb, &err); break;
	case QUEUE: act_queue(r, out, s, middle, strcmp(verb, "pause") == 0, &err); break;
	case CRON: act_schedule(r, out, s, middle, verb, &err); break;
	case SESSION: act_session(r, out, s, (int)num, verb, &err); break;
	case NONE: break;
	}
	free(middle);
	web_pool_put(r->srv, s, &err);
}

/* ---- routing ---- */

/* A job id from the text between "/api/jobs/" and the next "/" or the end; 0 if none. */
static int64_t path_id(const char *p, const char **rest)
{
	char *end;
	if (*p < '1' || *p > '9')
		return 0;
	long long v = strtoll(p, &end, 10);
	if (*end != '\0' && *end != '/')
		return 0;
	*rest = end;
	return v;
}

void web_api(web_req *r, web_resp *out)
{
	const char *p = r->path;
	bool post = strcmp(r->method, "POST") == 0;
	if (strcmp(p, "/api/config") == 0 && !post) {
		api_config(r, out);
		return;
	}
	enum { NONE, QUEUES, KEYS, WORKERS, JOBS, JOB, SCHEDULES, LEASES, LOCKS, BLOCKERS, DOCTOR, METRICS } what = NONE;
	int64_t id = 0;
	const char *rest = "";
	if (strcmp(p, "/api/queues") == 0)
		what = QUEUES;
	else if (strcmp(p, "/api/keys") == 0)
		what = KEYS;
	else if (strcmp(p, "/api/workers") == 0)
		what = WORKERS;
	else if (strcmp(p, "/api/jobs") == 0)
		what = JOBS;
	else if (strncmp(p, "/api/jobs/", 10) == 0 && (id = path_id(p + 10, &rest)) > 0 && *rest == '\0')
		what = JOB;
	else if (strcmp(p, "/api/schedules") == 0)
		what = SCHEDULES;
	else if (strcmp(p, "/api/leases") == 0)
		what = LEASES;
	else if (strcmp(p, "/api/locks") == 0)
		what = LOCKS;
	else if (strcmp(p, "/api/blockers") == 0)
		what = BLOCKERS;
	else if (strcmp(p, "/api/doctor") == 0)
		what = DOCTOR;
	else if (strcmp(p, "/metrics") == 0)
		what = METRICS;
	if (post) {
		web_actions(r, out);
		return;
	}
	if (what == NONE) {
		web_error(out, 404, NULL, "no such path: %.200s", p);
		return;
	}
	pgc_error err;
	web_slot *s = web_pool_get(r->srv, &err);
	if (s == NULL) {
		db_error(r, out, &err);
		return;
	}
	/* The handler leaves in err what a failed call said, which may have broken the session. */
	bool needs_queue = what == QUEUES || what == WORKERS || what == JOBS || what == JOB || what == METRICS;
	if (needs_queue && web_slot_queue(r->srv, s, &err) != PGC_OK) {
		db_error(r, out, &err);
		web_pool_put(r->srv, s, &err);
		return;
	}
	pgc_error_clear(&err);
	switch (what) {
	case QUEUES: api_queues(r, out, s, &err); break;
	case KEYS: api_keys(r, out, s, &err); break;
	case WORKERS: api_workers(r, out, s, &err); break;
	case JOBS: api_jobs(r, out, s, &err); break;
	case JOB: api_job(r, out, s, id, &err); break;
	case SCHEDULES: api_schedules(r, out, s, &err); break;
	case LEASES: api_leases(r, out, s, &err); break;
	case LOCKS: api_locks(r, out, s, &err); break;
	case BLOCKERS: api_blockers(r, out, s, &err); break;
	case DOCTOR: api_doctor(r, out, s, &err); break;
	case METRICS: api_metrics(r, out, s, &err); break;
	case NONE: break;
	}
	web_pool_put(r->srv, s, &err);
}

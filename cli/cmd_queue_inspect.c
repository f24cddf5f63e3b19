/* cmd_queue_inspect.c - pgcoord queue stats, list, show and limit: what the queues hold, a job in
 * full, the keys of a flow queue and their settings */
#include <errno.h>
#include <getopt.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>
#include <unistd.h>

#include "cmd_queue_int.h"
#include "diag_out.h"
#include "render.h"

static void print_keys_table(const pgc_queue_key_info *k, size_t n, size_t max);

/* ---- stats ---------------------------------------------------------------------------------- */

static void print_flow_stats(const pgc_queue_key_info *k, size_t nk, bool prometheus)
{
	if (prometheus) {
		cli_prom_queue_keys(stdout, k, nk);
		return;
	}
	if (nk == 0)
		return;
	putchar('\n');
	print_keys_table(k, nk, 50);
}

static void print_stats(const pgc_queue_stat *st, size_t n, const pgc_queue_health *h,
                        const pgc_queue_key_info *k, size_t nk, bool prometheus)
{
	if (prometheus) {
		cli_prom_queue_stats(stdout, st, n, h);
		print_flow_stats(k, nk, true);
		return;
	}
	if (g_cli.json) {
		json_w w = json_w_on(stdout);
		json_obj(&w, NULL);
		json_arr(&w, "queues");
		for (size_t i = 0; i < n; i++)
			render_queue_stat(&w, NULL, &st[i]);
		json_arr_end(&w);
		json_obj(&w, "tables");
		json_obj(&w, "jobs");
		json_i(&w, "live_tuples", h->jobs_live_tuples);
		json_i(&w, "dead_tuples", h->jobs_dead_tuples);
		json_s(&w, "last_autovacuum", h->jobs_last_autovacuum[0] ? h->jobs_last_autovacuum : NULL);
		json_obj_end(&w);
		json_obj(&w, "job_history");
		json_i(&w, "live_tuples", h->history_live_tuples);
		json_i(&w, "dead_tuples", h->history_dead_tuples);
		json_s(&w, "last_autovacuum", h->history_last_autovacuum[0] ? h->history_last_autovacuum : NULL);
		json_obj_end(&w);
		json_obj_end(&w);
		if (h->horizon_pid == 0) {
			json_null(&w, "xmin_horizon");
		} else {
			json_obj(&w, "xmin_horizon");
			json_i(&w, "pid", h->horizon_pid);
			json_i(&w, "xmin_age", h->horizon_xmin_age);
			json_f(&w, "xact_age_s", h->horizon_xact_age_s, 3);
			json_s(&w, "application_name", h->horizon_application);
			json_s(&w, "state", h->horizon_state);
			json_obj_end(&w);
		}
		if (h->horizon_slot[0] == '\0') {
			json_null(&w, "replication_slot");
		} else {
			json_obj(&w, "replication_slot");
			json_s(&w, "name", h->horizon_slot);
			json_i(&w, "xmin_age", h->horizon_slot_xmin_age);
			json_obj_end(&w);
		}
		json_arr(&w, "keys");
		for (size_t i = 0; i < nk; i++)
			render_key(&w, NULL, &k[i]);
		json_arr_end(&w);
		json_obj_end(&w);
		fputc('\n', stdout);
		return;
	}
	printf("%-20s %6s %8s %9s %7s %9s %7s %9s %9s %7s %9s %7s\n", "QUEUE", "PAUSED", "PENDING",
	       "SCHEDULED", "RUNNING", "SUCCEEDED", "FAILED", "CANCELLED", "OLDEST_S", "DONE/1M",
	       "FAILED/1M", "WAITING");
	for (size_t i = 0; i < n; i++)
		printf("%-20s %6s %8ld %9ld %7ld %9ld %7ld %9ld %9.1f %7ld %9ld %7ld\n", cli_esc(st[i].queue),
		       st[i].paused ? "yes" : "no", st[i].pending, st[i].scheduled, st[i].running,
		       st[i].succeeded, st[i].failed, st[i].cancelled, st[i].oldest_pending_s,
		       st[i].completed_1m, st[i].failed_1m, st[i].waiting);
	if (n == 0)
		puts("(no queues yet)");
	print_flow_stats(k, nk, false);
	char t[CLI_TIME_MAX];
	printf("\ntable jobs: %ld live, %ld dead tuples, last vacuum %s\n", h->jobs_live_tuples,
	       h->jobs_dead_tuples,
	       h->jobs_last_autovacuum[0] ? cli_fmt_time(h->jobs_last_autovacuum, t, sizeof t) : "never");
	printf("table job_history: %ld live, %ld dead tuples, last vacuum %s\n", h->history_live_tuples,
	       h->history_dead_tuples,
	       h->history_last_autovacuum[0] ? cli_fmt_time(h->history_last_autovacuum, t, sizeof t) : "never");
	if (h->horizon_pid != 0)
		printf("xmin horizon: pid %d (%s, %s) holds xmin %ld transaction%s old, transaction open %.1f s\n",
		       h->horizon_pid, h->horizon_application[0] ? cli_esc(h->horizon_application) : "?",
		       h->horizon_state[0] ? h->horizon_state : "?", h->horizon_xmin_age,
		       h->horizon_xmin_age == 1 ? "" : "s", h->horizon_xact_age_s);
	else
		puts("xmin horizon: no other session holds back vacuum");
	if (h->horizon_slot[0] != '\0')
		printf("replication slot %s holds xmin %ld transaction%s old\n", cli_esc(h->horizon_slot),
		       h->horizon_slot_xmin_age, h->horizon_slot_xmin_age == 1 ? "" : "s");
}

int queue_do_stats(int argc, char **argv)
{
	qargs a;
	queue_args_init(&a);
	const cli_opt opts[] = {
		QUEUE_OPT_BOOL(&a, "prometheus", prometheus),
		QUEUE_OPT(&a, "watch", "D"),
		QUEUE_OPTS_COMMON(&a),
	};
	int rc = queue_parse("stats", opts, argc, argv, &a, 1);
	if (rc != 0)
		return rc < 0 ? 0 : rc;
	if (a.prometheus && g_cli.json)
		return cli_usage_error("queue stats", "give --json or --prometheus, not both");
	const char *queue = a.npos ? a.pos[0] : NULL;
	if (queue != NULL && *queue == '\0')
		return cli_usage_error("queue stats", "the queue name must not be empty");
	pgc_error nerr;
	if (queue != NULL && pgc_name_check("queue name", queue, PGC_QUEUE_NAME_MAX, &nerr) != PGC_OK)
		return cli_usage_error("queue stats", "%s", nerr.message);
	pgc_conn *conn;
	pgc_queue *q;
	if ((rc = queue_open("stats", a.schema, &conn, &q)) != 0)
		return rc;
	for (;;) {
		pgc_queue_stat *st;
		size_t n;
		pgc_queue_health h;
		pgc_error err;
		if (pgc_queue_stats(q, queue, &st, &n, &h, &err) != PGC_OK) {
			rc = cli_report(&err);
			break;
		}
		pgc_queue_key_info *k;
		size_t nk;
		if (cli_flow_keys(q, st, n, &k, &nk, &err) != PGC_OK) {
			pgc_free(st);
			free(k);
			rc = cli_report(&err);
			break;
		}
		bool screen = a.watch_ms > 0 && !g_cli.json && !a.prometheus;
		if (screen)
			diag_watch_header(stdout, "queue stats", a.watch_ms, NULL);
		print_stats(st, n, &h, k, nk, a.prometheus);
		if (screen)
			diag_watch_footer(stdout);
		pgc_free(st);
		free(k);
		fflush(stdout);
		if (a.watch_ms == 0)
			break;
		struct timespec ts = { (time_t)(a.watch_ms / 1000), (long)(a.watch_ms % 1000) * 1000000L };
		nanosleep(&ts, NULL);
	}
	pgc_queue_close(q);
	pgc_conn_close(conn);
	return rc;
}

/* ---- list and show -------------------------------------------------------------------------- */

int queue_do_list(int argc, char **argv)
{
	qargs a;
	queue_args_init(&a);
	const cli_opt opts[] = {
		QUEUE_OPT_STR(&a, "status", status, "S"),
		QUEUE_OPT(&a, "limit", "N"),
		QUEUE_OPTS_COMMON(&a),
	};
	int rc = queue_parse("list", opts, argc, argv, &a, 1);
	if (rc != 0)
		return rc < 0 ? 0 : rc;
	const char *queue = a.npos ? a.pos[0] : NULL;
	if (queue != NULL && *queue == '\0')
		return cli_usage_error("queue list", "the queue name must not be empty");
	pgc_error nerr;
	if (queue != NULL && pgc_name_check("queue name", queue, PGC_QUEUE_NAME_MAX, &nerr) != PGC_OK)
		return cli_usage_error("queue list", "%s", nerr.message);
	pgc_conn *conn;
	pgc_queue *q;
	if ((rc = queue_open("list", a.schema, &conn, &q)) != 0)
		return rc;
	pgc_job_info **list;
	size_t n;
	pgc_error err;
	if (pgc_queue_list(q, queue, a.status, (long)a.limit, &list, &n, &err) != PGC_OK) {
		rc = cli_report(&err);
	} else {
		if (!g_cli.json)
			printf("%-10s %-16s %-10s %5s %8s %-20s %s\n", "ID", "QUEUE", "STATUS", "PRIO",
			       "ATTEMPTS", "RUN_AT", "LAST_ERROR");
		json_w w = json_w_on(stdout);
		for (size_t i = 0; i < n; i++) {
			const pgc_job_info *j = list[i];
			if (g_cli.json) {
				/* The CLI's list keeps the detailed view: a script reads the payload. */
				render_job(&w, NULL, j, NULL, RENDER_FULL);
				if (i + 1 == n)
					fputc('\n', stdout);
				continue;
			}
			char att[24];
			snprintf(att, sizeof att, "%d/%d", j->attempts, j->max_attempts);
			/* The error's last line: a traceback's exception, not its first line. */
			char last[PGC_JOB_ERROR_MAX], errl[61], when[CLI_TIME_MAX];
			cli_escape(cli_last_line(j->last_error, last, sizeof last), errl, sizeof errl);
			cli_fmt_time(j->run_at, when, sizeof when);
			printf("%-10lld %-16s %-10s %5d %8s %-20s %s\n", (long long)j->id, cli_esc(j->queue),
			       j->status, j->priority, att, when, errl);
		}
		pgc_queue_infos_free(list, n);
	}
	pgc_queue_close(q);
	pgc_conn_close(conn);
	return rc;
}

int queue_do_show(int argc, char **argv)
{
	qargs a;
	queue_args_init(&a);
	const cli_opt opts[] = {
		QUEUE_OPTS_COMMON(&a),
	};
	int rc = queue_parse("show", opts, argc, argv, &a, 1);
	if (rc != 0)
		return rc < 0 ? 0 : rc;
	int64_t id;
	if (!queue_parse_id("show", a.npos ? a.pos[0] : NULL, &id, &rc))
		return rc;
	pgc_conn *conn;
	pgc_queue *q;
	if ((rc = queue_open("show", a.schema, &conn, &q)) != 0)
		return rc;
	pgc_job_info *j;
	pgc_job_wait w;
	pgc_error err;
	/* Why it waits: the library's one answer, which the dashboard gives too. */
	if (pgc_queue_show(q, id, &j, &err) != PGC_OK) {
		rc = cli_report(&err);
	} else if (pgc_queue_job_wait(q, id, &w, &err) != PGC_OK && err.code != PGC_ENOTFOUND) {
		rc = cli_report(&err);
		pgc_free(j);
	} else {
		if (err.code == PGC_ENOTFOUND) /* gone between the two reads */
			memset(&w, 0, sizeof w);
		if (g_cli.json) {
			json_w jw = json_w_on(stdout);
			render_job(&jw, NULL, j, &w, RENDER_FULL);
			fputc('\n', stdout);
		} else {
			/* One label form, "name:" padded to one column; timestamps as everywhere. */
			printf("%-14s%lld\n%-14s%s\n%-14s%s%s\n%-14s%d\n%-14s%d of %d\n", "id:",
			       (long long)j->id, "queue:", cli_esc(j->queue), "status:", j->status,
			       j->aged ? " (aged: runs ahead of newer work)" : "", "priority:", j->priority,
			       "attempts:", j->attempts, j->max_attempts);
			printf("%-14s%d of %d\n", "deferrals:", j->deferrals, j->max_deferrals);
			if (w.reason[0] != '\0')
				printf("%-14s%s\n", "waiting:", cli_esc(w.reason));
			if (j->exit_status >= 0)
				printf("%-14s%d\n", "exit:", j->exit_status);
			if (j->duration_ms >= 0) {
				char d[PGC_DURATION_FORMAT_MAX];
				printf("%-14s%s%s\n", "duration:", cli_duration_str(j->duration_ms, d),
				       strcmp(j->status, "running") == 0 ? " so far" : "");
			}
			const char *keys[] = { "run_at:", "created_at:", "started_at:", "finished_at:",
			                       "lease_until:", "worker:", "unique_key:", "key:", "waiting:",
			                       "last_error:", "output:", "errors:", "payload:" };
			const char *vals[] = { j->run_at, j->created_at, j->started_at, j->finished_at,
			                       j->lease_until, j->worker, j->unique_key, j->key, j->held,
			                       j->last_error, j->output, j->errors, j->payload };
			for (size_t i = 0; i < sizeof keys / sizeof keys[0]; i++) {
				char t[8192];
				if (vals[i] == NULL)
					continue;
				/* errors and payload are JSON text, escaped already and as long as they are. */
				printf("%-14s%s\n", keys[i], i < 5    ? cli_fmt_time(vals[i], t, sizeof t)
				                              : i < 11 ? cli_escape(vals[i], t, sizeof t)
				                                       : vals[i]);
			}
		}
		pgc_free(j);
	}
	pgc_queue_close(q);
	pgc_conn_close(conn);
	return rc;
}

/* "50/1s", or "none". */
const char *queue_rate_str(const pgc_rate *r, char *buf, size_t size)
{
	char d[PGC_DURATION_FORMAT_MAX];
	if (r->n <= 0)
		snprintf(buf, size, "none");
	else
		snprintf(buf, size, "%d/%s", r->n, cli_duration_str(r->per_ms, d));
	return buf;
}

/* ---- limit: one key's settings, the keys of a queue ------------------------------------------ */

/* Why a key's pending jobs wait, for people: "at its limit", "rate-limited until T", "". */
static const char *key_held(const pgc_queue_key_info *k, char *buf, size_t size)
{
	char t[CLI_TIME_MAX];
	if (k->pending == 0)
		snprintf(buf, size, "-");
	else if (k->at_limit)
		snprintf(buf, size, "at its limit %d", k->limit);
	else if (k->rate_wait_ms > 0)
		snprintf(buf, size, "rate-limited until %s", cli_fmt_time(k->next_start_at, t, sizeof t));
	else
		snprintf(buf, size, "-");
	return buf;
}

static void print_keys_table(const pgc_queue_key_info *k, size_t n, size_t max)
{
	printf("%-20s %-20s %7s %5s %10s %6s %8s %9s %9s  %s\n", "QUEUE", "KEY", "RUNNING", "LIMIT",
	       "RATE", "WEIGHT", "PENDING", "SCHEDULED", "OLDEST_S", "HELD");
	for (size_t i = 0; i < n && i < max; i++) {
		char lim[16], r[48], held[96];
		snprintf(lim, sizeof lim, "%d", k[i].limit);
		char qn[21], kn[21];
		snprintf(qn, sizeof qn, "%s", cli_esc(k[i].queue));
		snprintf(kn, sizeof kn, "%s", cli_esc(k[i].key));
		printf("%-20s %-20s %7ld %5s %10s %6d %8ld %9ld %9.1f  %s\n", qn, kn, k[i].running,
		       k[i].limit > 0 ? lim : "none", queue_rate_str(&k[i].rate, r, sizeof r),
		       k[i].own.weight > 0 ? k[i].own.weight : 1, k[i].pending, k[i].scheduled,
		       k[i].oldest_pending_s, key_held(&k[i], held, sizeof held));
	}
	if (n > max)
		printf("(%zu more keys: pgcoord queue limit %s)\n", n - max, cli_esc(k[0].queue));
}

int queue_do_limit(int argc, char **argv)
{
	qargs a;
	queue_args_init(&a);
	const cli_opt opts[] = {
		QUEUE_OPT(&a, "limit", "N|none"),
		QUEUE_OPT(&a, "weight", "W|none"),
		QUEUE_OPT(&a, "rate", "N/D|none"),
		QUEUE_OPT_BOOL(&a, "remove", remove),
		QUEUE_OPTS_COMMON(&a),
	};
	int rc = queue_parse("limit", opts, argc, argv, &a, 2);
	if (rc != 0)
		return rc < 0 ? 0 : rc;
	if (a.npos == 0)
		return cli_usage_error("queue limit", "a queue name is required");
	const char *queue = a.pos[0], *key = a.npos > 1 ? a.pos[1] : NULL;
	pgc_error nerr;
	if (pgc_name_check("queue name", queue, PGC_QUEUE_NAME_MAX, &nerr) != PGC_OK)
		return cli_usage_error("queue limit", "%s", nerr.message);
	if (key != NULL && *key == '\0')
		return cli_usage_error("queue limit", "the key must not be empty");
	if (key != NULL && strlen(key) > PGC_QUEUE_KEY_MAX)
		return cli_usage_error("queue limit", "the key is %zu bytes, longer than %d", strlen(key),
		                       PGC_QUEUE_KEY_MAX);
	bool change = a.key_lim >= 0 || a.weight >= 0 || a.rate.n >= 0;
	if ((change || a.remove) && key == NULL)
		return cli_usage_error("queue limit", "--limit, --weight, --rate and --remove need a KEY");
	if (change && a.remove)
		return cli_usage_error("queue limit", "give --remove alone");
	pgc_conn *conn;
	pgc_queue *q;
	if ((rc = queue_open("limit", a.schema, &conn, &q)) != 0)
		return rc;
	pgc_error err;
	pgc_queue_key_settings ks = PGC_QUEUE_KEY_UNCHANGED;
	ks.limit = a.key_lim;
	ks.weight = a.weight;
	ks.rate = a.rate;
	pgc_queue_key_info *k = NULL;
	size_t n = 0;
	if (a.remove) {
		if (pgc_queue_key_reset(q, queue, key, &err) != PGC_OK)
			rc = cli_report(&err);
		else if (g_cli.json) {
			fputs("{\"queue\":", stdout);
			json_str(stdout, queue);
			fputs(",\"key\":", stdout);
			json_str(stdout, key);
			fputs(",\"removed\":true}\n", stdout);
		} else if (!g_cli.quiet)
			printf("removed the settings of key %s in queue %s\n", cli_esc(key), cli_esc(queue));
	} else if (change && pgc_queue_key_set(q, queue, key, &ks, &err) != PGC_OK) {
		rc = cli_report(&err);
	} else if (pgc_queue_keys(q, queue, key, &k, &n, &err) != PGC_OK) {
		rc = cli_report(&err);
	} else if (g_cli.json) {
		json_w w = json_w_on(stdout);
		for (size_t i = 0; i < n; i++)
			render_key(&w, NULL, &k[i]);
		if (n > 0)
			fputc('\n', stdout);
	} else if (!g_cli.quiet && key == NULL) {
		if (n == 0)
			printf("(queue %s has no keys)\n", cli_esc(queue));
		else
			print_keys_table(k, n, n);
	} else if (!g_cli.quiet) {
		char lim[48], r[48], held[96];
		if (k[0].limit > 0)
			snprintf(lim, sizeof lim, "%d (%s)", k[0].limit, k[0].own.limit > 0 ? "its own" : "the queue's");
		else
			snprintf(lim, sizeof lim, "none");
		char rr[64];
		queue_rate_str(&k[0].rate, r, sizeof r);
		snprintf(rr, sizeof rr, "%s%s", r, k[0].rate.n <= 0 ? "" : k[0].own.rate.n > 0 ? " (its own)" : " (the queue's)");
		printf("%-16s%s\n%-16s%s\n%-16s%s\n%-16s%s\n%-16s%d%s\n%-16s%ld\n%-16s%ld\n%-16s%ld\n"
		       "%-16s%.1f s\n%-16s%s\n", "queue:", cli_esc(k[0].queue), "key:", cli_esc(k[0].key),
		       "limit:", lim, "rate:", rr, "weight:", k[0].own.weight > 0 ? k[0].own.weight : 1,
		       k[0].own.weight > 0 ? " (its own)" : "", "running:", k[0].running, "pending:",
		       k[0].pending, "scheduled:", k[0].scheduled, "oldest_pending:", k[0].oldest_pending_s,
		       "held:", key_held(&k[0], held, sizeof held));
	}
	pgc_free(k);
	pgc_queue_close(q);
	pgc_conn_close(conn);
	return rc;
}

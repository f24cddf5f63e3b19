/* cmd_queue_group.c - pgcoord queue group: groups of jobs and their on-complete job */
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

/* ---- group ---------------------------------------------------------------------------------- */

static void print_group(const pgc_job_group *g)
{
	if (g_cli.json) {
		fputs("{\"name\":", stdout);
		json_str(stdout, g->name);
		fputs(",\"on_complete_queue\":", stdout);
		json_str(stdout, g->on_complete_queue);
		printf(",\"payload\":%s,\"members\":%ld,\"succeeded\":%ld,\"failed\":%ld,\"cancelled\":%ld,"
		       "\"sealed\":%s,\"done\":%s,\"on_complete_job\":", g->payload, g->members, g->succeeded,
		       g->failed, g->cancelled, g->sealed ? "true" : "false", g->done ? "true" : "false");
		if (g->on_complete_job > 0)
			printf("%lld", (long long)g->on_complete_job);
		else
			fputs("null", stdout);
		const char *tk[] = { "created_at", "closed_at", "done_at" };
		const char *tv[] = { g->created_at, g->closed_at, g->done_at };
		for (int i = 0; i < 3; i++) {
			printf(",\"%s\":", tk[i]);
			json_str(stdout, tv[i][0] ? tv[i] : NULL);
		}
		fputs("}\n", stdout);
		return;
	}
	char t[CLI_TIME_MAX], oc[32] = "-";
	if (g->on_complete_job > 0)
		snprintf(oc, sizeof oc, "%lld", (long long)g->on_complete_job);
	printf("%-20s%s\n%-20s%s\n%-20s%s\n%-20s%ld\n%-20s%ld succeeded, %ld failed, %ld cancelled\n"
	       "%-20s%s\n%-20s%s\n", "group:", cli_esc(g->name), "on-complete queue:",
	       cli_esc(g->on_complete_queue), "payload:", g->payload, "members:", g->members,
	       "ended:", g->succeeded, g->failed, g->cancelled, "state:",
	       g->done ? "done" : g->sealed ? "closed, waiting for its members" : "open",
	       "on-complete job:", oc);
	printf("%-20s%s\n", "created_at:", cli_fmt_time(g->created_at, t, sizeof t));
	if (g->closed_at[0])
		printf("%-20s%s\n", "closed_at:", cli_fmt_time(g->closed_at, t, sizeof t));
	if (g->done_at[0])
		printf("%-20s%s\n", "done_at:", cli_fmt_time(g->done_at, t, sizeof t));
}

int queue_do_group(int argc, char **argv)
{
	qargs a;
	queue_args_init(&a);
	const cli_opt opts[] = {
		QUEUE_OPT(&a, "on-complete-queue", "Q"),
		QUEUE_OPT_STR(&a, "payload", payload, "JSON"),
		QUEUE_OPTS_COMMON(&a),
	};
	int rc = queue_parse("group", opts, argc, argv, &a, 2);
	if (rc != 0)
		return rc < 0 ? 0 : rc;
	if (a.npos == 0)
		return cli_usage_error("queue group", "give add, close, show, list or remove");
	const char *what = a.pos[0];
	static const char *const subs[] = { "add", "close", "show", "list", "remove" };
	bool known = false;
	for (size_t i = 0; i < sizeof subs / sizeof subs[0]; i++)
		known |= strcmp(what, subs[i]) == 0;
	if (!known)
		return cli_usage_error("queue group", "unknown group subcommand \"%s\": give add, close, show,"
		                       " list or remove", what);
	a.pos[0] = a.pos[1];
	a.npos--;
	bool list = strcmp(what, "list") == 0, add = strcmp(what, "add") == 0;
	const char *name = a.npos ? a.pos[0] : NULL;
	if (list && name != NULL)
		return cli_usage_error("queue group", "unexpected argument \"%s\"", name);
	if (!list && name == NULL)
		return cli_usage_error("queue group", "a group name is required");
	if (name != NULL && *name == '\0')
		return cli_usage_error("queue group", "the group name must not be empty");
	if (name != NULL && strlen(name) > PGC_QUEUE_GROUP_MAX)
		return cli_usage_error("queue group", "the group name is longer than %d bytes", PGC_QUEUE_GROUP_MAX);
	if (add && a.on_complete_queue == NULL)
		return cli_usage_error("queue group", "group add needs --on-complete-queue");
	if (!add && (a.on_complete_queue != NULL || a.payload != NULL))
		return cli_usage_error("queue group", "--on-complete-queue and --payload apply to group add only");
	pgc_error nerr;
	if (a.on_complete_queue != NULL &&
	    pgc_name_check("queue name", a.on_complete_queue, PGC_QUEUE_NAME_MAX, &nerr) != PGC_OK)
		return cli_usage_error("queue group", "--on-complete-queue: %s", nerr.message);
	pgc_conn *conn;
	pgc_queue *q;
	if ((rc = queue_open("group", a.schema, &conn, &q)) != 0)
		return rc;
	pgc_error err;
	int64_t fired = 0;
	if (add) {
		if (pgc_queue_group_add(q, name, a.on_complete_queue, a.payload, &err) != PGC_OK)
			rc = cli_report(&err);
		else if (g_cli.json) {
			fputs("{\"group\":", stdout);
			json_str(stdout, name);
			fputs(",\"added\":true}\n", stdout);
		} else if (!g_cli.quiet)
			printf("added group %s (on complete: queue %s)\n", cli_esc(name), cli_esc(a.on_complete_queue));
	} else if (strcmp(what, "close") == 0) {
		if (pgc_queue_group_close(q, name, &fired, &err) != PGC_OK)
			rc = cli_report(&err);
		else if (g_cli.json) {
			fputs("{\"group\":", stdout);
			json_str(stdout, name);
			fputs(",\"closed\":true,\"on_complete_job\":", stdout);
			if (fired > 0)
				printf("%lld}\n", (long long)fired);
			else
				fputs("null}\n", stdout);
		} else if (!g_cli.quiet) {
			if (fired > 0)
				printf("closed group %s: every member has ended, on-complete job %lld\n", cli_esc(name),
				       (long long)fired);
			else
				printf("closed group %s: its on-complete job follows its last member\n", cli_esc(name));
		}
	} else if (strcmp(what, "remove") == 0) {
		if (pgc_queue_group_remove(q, name, &err) != PGC_OK)
			rc = cli_report(&err);
		else if (g_cli.json) {
			fputs("{\"group\":", stdout);
			json_str(stdout, name);
			fputs(",\"removed\":true}\n", stdout);
		} else if (!g_cli.quiet)
			printf("removed group %s\n", cli_esc(name));
	} else if (!list) {
		pgc_job_group *g;
		if (pgc_queue_group_show(q, name, &g, &err) != PGC_OK) {
			rc = cli_report(&err);
		} else {
			print_group(g);
			pgc_free(g);
		}
	} else {
		pgc_job_group *g;
		size_t n;
		if (pgc_queue_group_list(q, &g, &n, &err) != PGC_OK) {
			rc = cli_report(&err);
		} else {
			if (!g_cli.json)
				printf("%-24s %-20s %7s %9s %6s %9s %-7s %s\n", "GROUP", "ON_COMPLETE", "MEMBERS",
				       "SUCCEEDED", "FAILED", "CANCELLED", "STATE", "JOB");
			for (size_t i = 0; i < n; i++) {
				if (g_cli.json) {
					print_group(&g[i]);
					continue;
				}
				char oc[32] = "-";
				if (g[i].on_complete_job > 0)
					snprintf(oc, sizeof oc, "%lld", (long long)g[i].on_complete_job);
				printf("%-24s %-20s %7ld %9ld %6ld %9ld %-7s %s\n", cli_esc(g[i].name),
				       cli_esc(g[i].on_complete_queue), g[i].members, g[i].succeeded, g[i].failed,
				       g[i].cancelled, g[i].done ? "done" : g[i].sealed ? "closed" : "open", oc);
			}
			if (!g_cli.json && n == 0)
				puts("(no groups)");
			pgc_free(g);
		}
	}
	pgc_queue_close(q);
	pgc_conn_close(conn);
	return rc;
}

/* cmd_queue_config.c - pgcoord queue pause, resume and config: a queue's state and settings,
 * its flow control included */
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

int queue_do_pause(int argc, char **argv)
{
	const char *sub = argv[0]; /* pause or resume */
	qargs a;
	queue_args_init(&a);
	const cli_opt opts[] = {
		QUEUE_OPTS_COMMON(&a),
	};
	int rc = queue_parse(sub, opts, argc, argv, &a, 1);
	if (rc != 0)
		return rc < 0 ? 0 : rc;
	char cmd[40];
	snprintf(cmd, sizeof cmd, "queue %s", sub);
	if (a.npos == 0)
		return cli_usage_error(cmd, "a queue name is required");
	if (*a.pos[0] == '\0')
		return cli_usage_error(cmd, "the queue name must not be empty");
	if (strlen(a.pos[0]) > PGC_QUEUE_NAME_MAX)
		return cli_usage_error(cmd, "the queue name is longer than %d bytes", PGC_QUEUE_NAME_MAX);
	pgc_error nerr;
	if (pgc_name_check("queue name", a.pos[0], PGC_QUEUE_NAME_MAX, &nerr) != PGC_OK)
		return cli_usage_error(cmd, "%s", nerr.message);
	pgc_conn *conn;
	pgc_queue *q;
	if ((rc = queue_open(sub, a.schema, &conn, &q)) != 0)
		return rc;
	pgc_error err;
	bool pause = strcmp(sub, "pause") == 0;
	if (pgc_queue_pause(q, a.pos[0], pause, &err) != PGC_OK) {
		rc = cli_report(&err);
	} else if (g_cli.json) {
		fputs("{\"queue\":", stdout);
		json_str(stdout, a.pos[0]);
		printf(",\"paused\":%s}\n", pause ? "true" : "false");
	} else if (!g_cli.quiet) {
		printf("queue %s %s\n", cli_esc(a.pos[0]), pause ? "paused" : "resumed");
	}
	pgc_queue_close(q);
	pgc_conn_close(conn);
	return rc;
}

static int config_flow(pgc_queue *q, const char *queue, const qargs *a)
{
	pgc_error err;
	pgc_queue_flow f = PGC_QUEUE_FLOW_UNCHANGED;
	f.key_limit = a->key_limit;
	f.rate = a->rate;
	f.key_rate = a->key_rate;
	f.fair = a->fair;
	bool change = f.key_limit >= 0 || f.rate.n >= 0 || f.key_rate.n >= 0 || f.fair >= 0;
	if (change && pgc_queue_flow_set(q, queue, &f, &err) != PGC_OK)
		return cli_report(&err);
	if (pgc_queue_flow_get(q, queue, &f, &err) != PGC_OK)
		return cli_report(&err);
	char r1[48], r2[48];
	if (g_cli.json) {
		json_w w = json_w_on(stdout);
		json_obj(&w, NULL);
		json_s(&w, "queue", queue);
		json_b(&w, "flow", f.flow);
		json_i_or_null(&w, "key_limit", f.key_limit > 0, f.key_limit);
		render_rate(&w, "rate", &f.rate);
		render_rate(&w, "key_rate", &f.key_rate);
		json_b(&w, "fair", f.fair);
		json_obj_end(&w);
		fputc('\n', stdout);
	} else if (!g_cli.quiet) {
		char lim[16];
		snprintf(lim, sizeof lim, "%d", f.key_limit);
		printf("queue:       %s\nflow:        %s\nkey_limit:   %s\nrate:        %s\n"
		       "key_rate:    %s\nfair:        %s\n", cli_esc(queue), f.flow ? "on" : "off",
		       f.key_limit > 0 ? lim : "none", queue_rate_str(&f.rate, r1, sizeof r1),
		       queue_rate_str(&f.key_rate, r2, sizeof r2), f.fair ? "on" : "off");
	}
	return 0;
}

int queue_do_config(int argc, char **argv)
{
	qargs a;
	queue_args_init(&a);
	const cli_opt opts[] = {
		QUEUE_OPT(&a, "aging", "D"),
		QUEUE_OPT(&a, "succeeded-retention", "D"),
		QUEUE_OPT(&a, "failed-retention", "D"),
		QUEUE_OPT(&a, "max-payload", "BYTES"),
		QUEUE_OPT(&a, "key-limit", "N|none"),
		QUEUE_OPT(&a, "rate", "N/D|none"),
		QUEUE_OPT(&a, "key-rate", "N/D|none"),
		QUEUE_OPT(&a, "fair", "on|off"),
		QUEUE_OPTS_COMMON(&a),
	};
	int rc = queue_parse("config", opts, argc, argv, &a, 1);
	if (rc != 0)
		return rc < 0 ? 0 : rc;
	bool global = a.aging_ms >= 0 || a.sret_ms >= 0 || a.fret_ms >= 0 || a.max_payload >= 0;
	bool flow = a.key_limit >= 0 || a.rate.n >= 0 || a.key_rate.n >= 0 || a.fair >= 0;
	const char *queue = a.npos ? a.pos[0] : NULL;
	if (flow && queue == NULL)
		return cli_usage_error("queue config", "--key-limit, --rate, --key-rate and --fair need a QUEUE");
	if (global && queue != NULL)
		return cli_usage_error("queue config", "--aging, --succeeded-retention, --failed-retention and"
		                       " --max-payload apply to every queue: give them without QUEUE");
	pgc_error nerr;
	if (queue != NULL && pgc_name_check("queue name", queue, PGC_QUEUE_NAME_MAX, &nerr) != PGC_OK)
		return cli_usage_error("queue config", "%s", nerr.message);
	pgc_conn *conn;
	pgc_queue *q;
	if ((rc = queue_open("config", a.schema, &conn, &q)) != 0)
		return rc;
	pgc_error err;
	pgc_queue_config cfg = { a.aging_ms, a.sret_ms, a.fret_ms, (int)a.max_payload };
	if (queue != NULL) {
		rc = config_flow(q, queue, &a);
	} else if (global && pgc_queue_config_set(q, &cfg, &err) != PGC_OK) {
		rc = cli_report(&err);
	} else if (pgc_queue_config_get(q, &cfg, &err) != PGC_OK) {
		rc = cli_report(&err);
	} else if (g_cli.json) {
		printf("{\"aging_ms\":%lld,\"succeeded_retention_ms\":%lld,\"failed_retention_ms\":%lld,"
		       "\"max_payload_bytes\":%d}\n", (long long)cfg.aging_ms,
		       (long long)cfg.succeeded_retention_ms, (long long)cfg.failed_retention_ms,
		       cfg.max_payload_bytes);
	} else if (!g_cli.quiet) {
		char d1[PGC_DURATION_FORMAT_MAX], d2[PGC_DURATION_FORMAT_MAX], d3[PGC_DURATION_FORMAT_MAX];
		printf("aging:               %s\nsucceeded_retention: %s\n"
		       "failed_retention:    %s\nmax_payload:         %d bytes\n",
		       cli_duration_str(cfg.aging_ms, d1), cli_duration_str(cfg.succeeded_retention_ms, d2),
		       cli_duration_str(cfg.failed_retention_ms, d3), cfg.max_payload_bytes);
	}
	pgc_queue_close(q);
	pgc_conn_close(conn);
	return rc;
}

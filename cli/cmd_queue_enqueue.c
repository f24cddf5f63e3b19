/* cmd_queue_enqueue.c - pgcoord queue enqueue: one job, or a file of payloads one per line */
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

/* ---- enqueue -------------------------------------------------------------------------------- */

static const char *strip_payload_prefix(const char *msg)
{
	/* "payload 3 is not valid JSON: ..." -> "not valid JSON: ..." */
	if (strncmp(msg, "payload ", 8) != 0)
		return msg;
	const char *p = msg + 8;
	while (*p >= '0' && *p <= '9')
		p++;
	if (strncmp(p, " is ", 4) == 0)
		return p + 4;
	return msg;
}

static int enqueue_file(pgc_conn *conn, pgc_queue *q, const char *queue, const char *path,
                        const pgc_job_options *jo)
{
	cli_lines l;
	int rc = cli_read_lines(path, &l);
	if (rc != 0)
		return rc;
	const char *name = strcmp(path, "-") == 0 ? "standard input" : path;
	if (l.n == 0) {
		cli_lines_free(&l);
		cli_errorf("%s has no jobs (no non-blank line)", name);
		return EXIT_DATAERR;
	}
	pgc_error err;
	/* Check the size limit here first: a line far over it (say 100 MB) would otherwise be
	 * escaped into a second copy, sent, and parsed by the server only to be refused. The
	 * server's check stays the authority. */
	pgc_queue_config cfg;
	if (pgc_queue_config_get(q, &cfg, &err) == PGC_OK && cfg.max_payload_bytes > 0) {
		for (size_t i = 0; i < l.n; i++) {
			size_t len = strlen(l.line[i]);
			if (len > (size_t)cfg.max_payload_bytes) {
				cli_errorf("%s line %ld: %zu bytes, over the limit of %d bytes", name, l.lineno[i],
				           len, cfg.max_payload_bytes);
				cli_errorf("nothing was enqueued");
				cli_lines_free(&l);
				return EXIT_DATAERR;
			}
		}
	}
	bool tty = isatty(STDERR_FILENO) && !g_cli.quiet && l.n >= 10000;
	/* One transaction: all or nothing. */
	if (pgc_exec(conn, "BEGIN", &err) != PGC_OK) {
		cli_lines_free(&l);
		rc = cli_report(&err);
		cli_errorf("nothing was enqueued");
		return rc;
	}
	size_t chunk = 5000, total = 0;
	for (size_t at = 0; at < l.n; at += chunk) {
		size_t k = l.n - at < chunk ? l.n - at : chunk;
		size_t ins = 0;
		long bad = -1;
		rc = pgc_queue_enqueue_many(q, queue, k, (const char *const *)l.line + at, NULL, jo, NULL,
		                            &ins, &bad, &err);
		if (rc != PGC_OK) {
			pgc_error e2;
			(void)!pgc_exec(conn, "ROLLBACK", &e2);
			if (tty)
				fputc('\n', stderr);
			if (bad >= 0 && (size_t)bad < k) {
				cli_errorf("%s line %ld: %s%s%s", name, l.lineno[at + (size_t)bad],
				           strip_payload_prefix(err.message), err.detail[0] ? ": " : "", err.detail);
				cli_errorf("nothing was enqueued");
				cli_lines_free(&l);
				return EXIT_DATAERR;
			}
			rc = cli_report(&err);
			cli_errorf("nothing was enqueued");
			cli_lines_free(&l);
			return rc;
		}
		total += ins;
		if (tty)
			fprintf(stderr, "\renqueued %zu/%zu", at + k, l.n);
	}
	if (tty)
		fputc('\n', stderr);
	if (pgc_exec(conn, "COMMIT", &err) != PGC_OK) {
		size_t n = l.n;
		cli_lines_free(&l);
		rc = cli_report(&err);
		/* A session lost while COMMIT was on its way leaves the outcome unknown: say so,
		 * rather than let a script retry a batch that may have landed. */
		if (err.code == PGC_ECONNLOST)
			cli_errorf("the session was lost during COMMIT: the %zu job%s may or may not have been enqueued",
			           n, n == 1 ? "" : "s");
		return rc;
	}
	if (g_cli.json) {
		fputs("{\"queue\":", stdout);
		json_str(stdout, queue);
		printf(",\"enqueued\":%zu,\"skipped\":%zu}\n", total, l.n - total);
	} else if (!g_cli.quiet) {
		printf("enqueued %zu job%s in queue %s", total, total == 1 ? "" : "s", cli_esc(queue));
		if (l.n > total)
			printf(" (%zu skipped: unique key taken)", l.n - total);
		putchar('\n');
	}
	cli_lines_free(&l);
	return 0;
}

int queue_do_enqueue(int argc, char **argv)
{
	qargs a;
	queue_args_init(&a);
	const cli_opt opts[] = {
		QUEUE_OPT_STR(&a, "payload", payload, "JSON"),
		QUEUE_OPT_STR(&a, "file", file, "FILE"),
		QUEUE_OPT(&a, "priority", "N"),
		QUEUE_OPT(&a, "delay", "D"),
		QUEUE_OPT_STR(&a, "run-at", run_at, "TIME"),
		QUEUE_OPT(&a, "max-attempts", "N"),
		QUEUE_OPT_STR(&a, "unique-key", unique_key, "K"),
		QUEUE_OPT(&a, "max-deferrals", "N"),
		QUEUE_OPT(&a, "key", "K"),
		QUEUE_OPT(&a, "after", "ID,ID,..."),
		QUEUE_OPT(&a, "on-dep-failure", "cancel|run"),
		QUEUE_OPT(&a, "group", "G"),
		QUEUE_OPTS_COMMON(&a),
	};
	int rc = queue_parse("enqueue", opts, argc, argv, &a, 2);
	if (rc != 0)
		return rc < 0 ? 0 : rc;
	if (a.npos == 0)
		return cli_usage_error("queue enqueue", "a queue name is required");
	const char *queue = a.pos[0];
	if (*queue == '\0')
		return cli_usage_error("queue enqueue", "the queue name must not be empty");
	if (strlen(queue) > PGC_QUEUE_NAME_MAX)
		return cli_usage_error("queue enqueue", "the queue name is longer than %d bytes", PGC_QUEUE_NAME_MAX);
	pgc_error nerr;
	if (pgc_name_check("queue name", queue, PGC_QUEUE_NAME_MAX, &nerr) != PGC_OK)
		return cli_usage_error("queue enqueue", "%s", nerr.message);
	if (a.npos == 2) {
		if (strcmp(a.pos[1], "-") != 0)
			return cli_usage_error("queue enqueue", "unexpected argument \"%s\"", a.pos[1]);
		if (a.file != NULL)
			return cli_usage_error("queue enqueue", "give --file or -, not both");
		a.file = "-";
	}
	if (a.payload != NULL && a.file != NULL)
		return cli_usage_error("queue enqueue", "give --payload or --file, not both");
	if (a.has_delay && a.run_at != NULL)
		return cli_usage_error("queue enqueue", "give --delay or --run-at, not both");
	if (a.unique_key != NULL && a.file != NULL)
		return cli_usage_error("queue enqueue", "--unique-key applies to one job, not to a file");
	if (a.unique_key != NULL && *a.unique_key == '\0')
		return cli_usage_error("queue enqueue", "--unique-key must not be empty");
	/* --run-at's TIME, in the one grammar of TIME options, sent as ISO 8601 in UTC (or, for
	 * a duration, as the delay it is, on the server's clock). */
	char run_at[CLI_TIME_ISO_MAX];
	if (a.run_at != NULL) {
		cli_time t;
		int trc;
		if (!cli_time_opt("queue enqueue", "--run-at", a.run_at, NULL, &t, &trc))
			return trc;
		if (t.relative) {
			a.delay_ms = t.rel_ms;
			a.run_at = NULL;
		} else {
			a.run_at = cli_time_iso(&t, run_at);
		}
	}
	if (a.on_dep_failure >= 0 && !a.has_after)
		return cli_usage_error("queue enqueue", "--on-dep-failure needs --after");

	pgc_job_options jo = PGC_JOB_OPTIONS_INIT;
	jo.priority = (int)a.priority;
	jo.delay_ms = a.delay_ms;
	jo.run_at = a.run_at;
	jo.max_attempts = (int)a.max_attempts;
	jo.max_deferrals = (int)a.max_deferrals;
	jo.key = a.key;
	jo.after = a.has_after ? a.after : NULL;
	jo.n_after = a.n_after;
	if (a.on_dep_failure >= 0)
		jo.on_dep_failure = (pgc_dep_policy)a.on_dep_failure;
	jo.group = a.group;

	pgc_conn *conn;
	pgc_queue *q;
	if ((rc = queue_open("enqueue", a.schema, &conn, &q)) != 0) {
		/* Nothing was sent yet, whatever ended the session: a script may try again. */
		cli_errorf("nothing was enqueued");
		return rc;
	}
	pgc_error err;
	if (a.file != NULL) {
		rc = enqueue_file(conn, q, queue, a.file, &jo);
	} else {
		jo.unique_key = a.unique_key;
		int64_t id = 0;
		if (pgc_queue_enqueue(q, queue, a.payload ? a.payload : "{}", &jo, &id, &err) != PGC_OK) {
			if (strncmp(err.message, "payload 1 is ", 13) == 0) {
				/* Name the option rather than an array position. */
				char msg[PGC_ERROR_MESSAGE_MAX + 16];
				snprintf(msg, sizeof msg, "--payload is %s", err.message + 13);
				snprintf(err.message, sizeof err.message, "%s", msg);
			}
			bool standby = strcmp(err.sqlstate, "25006") == 0 || strcmp(err.sqlstate, "55000") == 0;
			rc = cli_report(&err);
			/* The statement commits by itself: a session lost while it was on its way leaves
			 * the outcome unknown (a standby's refusal is known: nothing was written). */
			if (err.code == PGC_ECONNLOST && !standby)
				cli_errorf("the session was lost while the job was sent: it may or may not have been enqueued");
		} else if (g_cli.json) {
			fputs("{\"queue\":", stdout);
			json_str(stdout, queue);
			printf(",\"id\":%lld}\n", (long long)id);
		} else if (!g_cli.quiet) {
			printf("enqueued job %lld in queue %s\n", (long long)id, cli_esc(queue));
		}
	}
	pgc_queue_close(q);
	pgc_conn_close(conn);
	return rc;
}

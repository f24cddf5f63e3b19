/* cmd_queue_bulk.c - pgcoord queue retry, cancel and purge: one job, or the bulk forms (cancel
 * --all, retry --all, purge), which count first, ask on a terminal (or take --yes), then work
 * in short batches through pgc_queue_bulk_run */
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

/* ---- retry, cancel, purge, pause, resume, config ------------------------------------------ */

/* ---- bulk: cancel --all, retry --all, purge ------------------------------------------------ */

typedef struct bulk_tty {
	long total;
	const char *verb;
} bulk_tty;

static void bulk_progress(long done, void *arg)
{
	const bulk_tty *t = arg;
	fprintf(stderr, "\r%s %ld/%ld", t->verb, done, t->total);
}

/* Reads the answer to the question on standard input (a terminal): yes or y. */
static bool confirmed(void)
{
	char line[64];
	fputs("Type yes to go on: ", stderr);
	fflush(stderr);
	if (fgets(line, sizeof line, stdin) == NULL)
		return false;
	line[strcspn(line, "\r\n")] = '\0';
	return strcasecmp(line, "yes") == 0 || strcasecmp(line, "y") == 0;
}

static int do_bulk(const char *sub, const qargs *a)
{
	char cmd[40];
	snprintf(cmd, sizeof cmd, "queue %s", sub);
	pgc_queue_bulk b = PGC_QUEUE_BULK_INIT;
	b.op = strcmp(sub, "cancel") == 0 ? PGC_BULK_CANCEL : strcmp(sub, "retry") == 0 ? PGC_BULK_RETRY
	                                                                                  : PGC_BULK_PURGE;
	b.queue = a->npos ? a->pos[0] : NULL;
	b.status = a->status;
	b.older_than_ms = a->older_than_ms;
	b.key_prefix = a->key_prefix;
	b.batch_size = (int)a->batch;
	static const char *const statuses[][3] = {
		[PGC_BULK_CANCEL] = { "pending", "scheduled", "waiting" },
		[PGC_BULK_RETRY] = { "failed", "cancelled", NULL },
		[PGC_BULK_PURGE] = { "succeeded", "failed", "cancelled" },
	};
	static const char *const said[] = {
		[PGC_BULK_CANCEL] = "pending or scheduled, or waiting",
		[PGC_BULK_RETRY] = "failed or cancelled",
		[PGC_BULK_PURGE] = "succeeded, failed or cancelled",
	};
	/* Everything is checked before anything is done. */
	if (b.op != PGC_BULK_PURGE && b.queue == NULL)
		return cli_usage_error(cmd, "--all needs a QUEUE (pgcoord queue %s --all QUEUE)", sub);
	if (b.queue != NULL && *b.queue == '\0')
		return cli_usage_error(cmd, "the queue name must not be empty");
	pgc_error nerr;
	if (b.queue != NULL && pgc_name_check("queue name", b.queue, PGC_QUEUE_NAME_MAX, &nerr) != PGC_OK)
		return cli_usage_error(cmd, "%s", nerr.message);
	if (b.status != NULL) {
		bool ok = false;
		for (int i = 0; i < 3; i++)
			ok |= statuses[b.op][i] != NULL && strcmp(b.status, statuses[b.op][i]) == 0;
		if (!ok)
			return cli_usage_error(cmd, "--status must be %s, not \"%s\"", said[b.op], b.status);
	}
	if (!a->yes && !isatty(STDIN_FILENO))
		return cli_usage_error(cmd, "this asks for confirmation, and standard input is not a terminal:"
		                       " pass --yes to go on without it");
	pgc_conn *conn;
	pgc_queue *q;
	int rc = queue_open(sub, a->schema, &conn, &q);
	if (rc != 0)
		return rc;
	pgc_error err;
	long count = 0;
	pgc_queue_bulk_result r = { 0, 0, 0 };
	static const char *const verb[] = { [PGC_BULK_CANCEL] = "cancelled", [PGC_BULK_RETRY] = "retried",
	                                    [PGC_BULK_PURGE] = "purged" };
	static const char *const what[] = {
		[PGC_BULK_CANCEL] = "pending or scheduled job%s (running jobs are never cancelled)",
		[PGC_BULK_RETRY] = "%s job%s from the history",
		[PGC_BULK_PURGE] = "finished job%s from the history",
	};
	if (pgc_queue_bulk_count(q, &b, &count, &err) != PGC_OK) {
		rc = cli_report(&err);
		goto out;
	}
	char where[PGC_QUEUE_NAME_MAX + 32] = " of every queue";
	if (b.queue != NULL)
		snprintf(where, sizeof where, " of queue %s", cli_esc(b.queue));
	if (count == 0) {
		if (!g_cli.quiet && !g_cli.json)
			fprintf(stderr, "pgcoord: no job matches: nothing %s\n", verb[b.op]);
	} else {
		if (!g_cli.quiet || !a->yes) {
			char desc[200];
			if (b.op == PGC_BULK_RETRY)
				snprintf(desc, sizeof desc, what[b.op], b.status ? b.status : "failed", count == 1 ? "" : "s");
			else
				snprintf(desc, sizeof desc, what[b.op], count == 1 ? "" : "s");
			static const char *const act[] = { "cancel", "retry", "delete" };
			fprintf(stderr, "pgcoord: %s %s %ld %s%s\n", a->yes ? "going to" : "this will",
			        act[b.op], count, desc, where);
		}
		if (!a->yes && !confirmed()) {
			cli_errorf("not confirmed: nothing was %s", verb[b.op]);
			rc = EXIT_CONFLICT;
			goto out;
		}
		bulk_tty t = { count, verb[b.op] };
		bool tty = isatty(STDERR_FILENO) && !g_cli.quiet && count >= 10000;
		if (tty) {
			b.progress = bulk_progress;
			b.progress_arg = &t;
		}
		rc = pgc_queue_bulk_run(q, &b, &r, &err);
		if (tty)
			fputc('\n', stderr);
		if (rc != PGC_OK) {
			rc = cli_report(&err);
			cli_errorf("%ld job%s %s before the error (each batch commits on its own)", r.done,
			           r.done == 1 ? "" : "s", verb[b.op]);
			goto out;
		}
	}
	rc = 0;
	if (g_cli.json) {
		fputs("{\"queue\":", stdout);
		json_str(stdout, b.queue);
		printf(",\"matched\":%ld,\"%s\":%ld", count, verb[b.op], r.done);
		if (b.op == PGC_BULK_RETRY)
			printf(",\"skipped\":%ld", r.skipped);
		puts("}");
	} else if (!g_cli.quiet) {
		printf("%s %ld job%s%s", verb[b.op], r.done, r.done == 1 ? "" : "s", where);
		if (r.skipped > 0)
			printf(" (%ld skipped: unique key taken by a live job)", r.skipped);
		if (r.done < count && b.op != PGC_BULK_RETRY)
			printf(" (%ld changed meanwhile)", count - r.done);
		putchar('\n');
	}
out:
	pgc_queue_close(q);
	pgc_conn_close(conn);
	return rc;
}

int queue_do_id_action(int argc, char **argv)
{
	const char *sub = argv[0]; /* retry or cancel */
	qargs a;
	queue_args_init(&a);
	const cli_opt opts[] = {
		/* retry and cancel: ID, or the bulk form with --all */
		QUEUE_OPT_BOOL(&a, "all", all),
		QUEUE_OPT_STR(&a, "status", status, "S"),
		QUEUE_OPT(&a, "older-than", "D"),
		QUEUE_OPT(&a, "key-prefix", "P"),
		QUEUE_OPT(&a, "batch-size", "N"),
		QUEUE_OPT_BOOL(&a, "yes", yes),
		QUEUE_OPTS_COMMON(&a),
	};
	int rc = queue_parse(sub, opts, argc, argv, &a, 1);
	if (rc != 0)
		return rc < 0 ? 0 : rc;
	if (a.all)
		return do_bulk(sub, &a);
	char cmd[40];
	snprintf(cmd, sizeof cmd, "queue %s", sub);
	if (a.status != NULL || a.has_older || a.key_prefix != NULL || a.batch != 0 || a.yes)
		return cli_usage_error(cmd, "--status, --older-than, --key-prefix, --batch-size and --yes"
		                       " go with --all QUEUE, not with an ID");
	int64_t id;
	if (!queue_parse_id(sub, a.npos ? a.pos[0] : NULL, &id, &rc))
		return rc;
	pgc_conn *conn;
	pgc_queue *q;
	if ((rc = queue_open(sub, a.schema, &conn, &q)) != 0)
		return rc;
	pgc_error err;
	bool retry = strcmp(sub, "retry") == 0, was_running = false;
	int r = retry ? pgc_queue_retry(q, id, &err) : pgc_queue_cancel_job(q, id, &was_running, &err);
	if (r != PGC_OK) {
		rc = cli_report(&err);
	} else if (g_cli.json && retry) {
		printf("{\"id\":%lld,\"status\":\"pending\"}\n", (long long)id);
	} else if (g_cli.json) {
		printf("{\"id\":%lld,\"status\":\"cancelled\",\"was_running\":%s}\n", (long long)id,
		       was_running ? "true" : "false");
	} else if (!g_cli.quiet && retry) {
		printf("job %lld is pending again\n", (long long)id);
	} else if (!g_cli.quiet) {
		printf(was_running ? "job %lld cancelled while running: its worker has been told to stop it\n"
		                   : "job %lld cancelled\n", (long long)id);
	}
	pgc_queue_close(q);
	pgc_conn_close(conn);
	return rc;
}

int queue_do_purge(int argc, char **argv)
{
	qargs a;
	queue_args_init(&a);
	const cli_opt opts[] = {
		QUEUE_OPT_STR(&a, "status", status, "S"),
		QUEUE_OPT(&a, "older-than", "D"),
		QUEUE_OPT(&a, "key-prefix", "P"),
		QUEUE_OPT(&a, "batch-size", "N"),
		QUEUE_OPT_BOOL(&a, "yes", yes),
		QUEUE_OPTS_COMMON(&a),
	};
	int rc = queue_parse("purge", opts, argc, argv, &a, 1);
	if (rc != 0)
		return rc < 0 ? 0 : rc;
	return do_bulk("purge", &a);
}

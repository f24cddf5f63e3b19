/* cmd_cancel.c - pgcoord cancel / terminate: stop a query or end a session, after showing who
 * it is and getting a confirmation */
#include <getopt.h>
#include <string.h>
#include <unistd.h>

#include "diag_out.h"

static void usage(FILE *f, bool terminate)
{
	if (terminate)
		fputs("Usage: pgcoord [-d DSN] terminate [OPTIONS] PID\n"
		      "\n"
		      "Ends the session PID with pg_terminate_backend(): its transaction rolls back\n"
		      "and its locks, session advisory locks included, are released. First shows\n"
		      "who that is (user, application, state, transaction age, query, what it\n"
		      "blocks); then needs --yes, or the pid typed back on a terminal.\n", f);
	else
		fputs("Usage: pgcoord [-d DSN] cancel [OPTIONS] PID\n"
		      "\n"
		      "Cancels the current query of session PID with pg_cancel_backend(): the\n"
		      "statement fails, an open transaction is left aborted, the session stays.\n"
		      "First shows who that is (user, application, state, transaction age, query,\n"
		      "what it blocks); then needs --yes, or the pid typed back on a terminal.\n", f);
	fputs("\n"
	      "Options:\n"
	      "  -y, --yes        do it without asking\n"
	      "      --wait=D     how long to watch the outcome (default: 5s)\n"
	      "      --json       print the session and the outcome as one JSON object\n"
	      "  -h, --help       show this help and exit\n"
	      "\n"
	      "Exit status: 0 done, 1 no such session / not done / not confirmed,\n"
	      "64 usage (also: without --yes when standard input is not a terminal, or PID\n"
	      "is pgcoord's own backend), 69 database unavailable.\n", f);
}

static int signal_cmd(int argc, char **argv, bool terminate)
{
	const char *cmd = terminate ? "terminate" : "cancel";
	const char *verb = terminate ? "terminate" : "cancel the query of";
	enum { OPT_WAIT = 256, OPT_JSON };
	static const struct option longopts[] = {
		{ "yes", no_argument, NULL, 'y' },
		{ "wait", required_argument, NULL, OPT_WAIT },
		{ "json", no_argument, NULL, OPT_JSON },
		{ "help", no_argument, NULL, 'h' },
		{ NULL, 0, NULL, 0 },
	};
	bool yes = false, json = g_cli.json;
	int64_t wait_ms = 5000;
	int ch;
	opterr = 0;
	while ((ch = getopt_long(argc, argv, ":yh", longopts, NULL)) != -1) {
		switch (ch) {
		case 'y': yes = true; break;
		case OPT_WAIT: {
			pgc_error err;
			if (pgc_duration_parse(optarg, &wait_ms, &err) != PGC_OK)
				return cli_usage_error(cmd, "--wait: %s", err.message);
			if (wait_ms > 3600000)
				return cli_usage_error(cmd, "--wait must be at most 1h");
			break;
		}
		case OPT_JSON: json = true; break;
		case 'h':
			usage(stdout, terminate);
			return 0;
		default:
			return cli_getopt_error(cmd, ch, argv);
		}
	}
	if (optind >= argc)
		return cli_usage_error(cmd, "no PID given");
	if (optind + 1 < argc)
		return cli_usage_error(cmd, "unexpected argument \"%s\"", argv[optind + 1]);
	long long pid;
	if (!cli_parse_int(argv[optind], 1, 2147483647, &pid))
		return cli_usage_error(cmd, "invalid pid \"%s\": expected a positive number", argv[optind]);

	pgc_conn *conn = NULL;
	int rc = cli_connect(cmd, &conn);
	if (rc != 0)
		return rc;
	if (pid == pgc_conn_backend_pid(conn)) {
		pgc_conn_close(conn);
		return cli_usage_error(cmd, "pid %lld is this pgcoord session's own backend; refusing", pid);
	}
	pgc_diag_options o = PGC_DIAG_OPTIONS_INIT;
	o.all_databases = true;
	pgc_diag_snapshot *snap = NULL;
	rc = diag_take(conn, &o, &snap);
	if (rc != 0) {
		pgc_conn_close(conn);
		return rc;
	}
	const pgc_diag_session *s = pgc_diag_session_find(snap, (int)pid);
	if (s == NULL || !s->known) {
		cli_errorf("no session with pid %lld", pid);
		pgc_diag_snapshot_free(snap);
		pgc_conn_close(conn);
		return EXIT_CONFLICT;
	}
	if (!json && !g_cli.quiet) {
		diag_describe(stdout, snap, s);
		fflush(stdout);
	}

	if (!yes) {
		if (!isatty(STDIN_FILENO)) {
			cli_errorf("refusing to %s pid %lld without --yes: standard input is not a terminal "
			           "to confirm on; nothing was done", verb, pid);
			pgc_diag_snapshot_free(snap);
			pgc_conn_close(conn);
			return EXIT_USAGE;
		}
		fprintf(stderr, "Type the pid (%lld) to %s it, anything else to stop: ", pid, verb);
		fflush(stderr);
		char line[64] = "";
		if (fgets(line, sizeof line, stdin) == NULL)
			line[0] = '\0';
		line[strcspn(line, "\r\n")] = '\0';
		long long typed;
		if (!cli_parse_int(line, 1, 2147483647, &typed) || typed != pid) {
			cli_errorf("not confirmed; nothing was done");
			pgc_diag_snapshot_free(snap);
			pgc_conn_close(conn);
			return EXIT_CONFLICT;
		}
	}

	pgc_diag_signal_result res;
	pgc_error err = PGC_ERROR_INIT;
	rc = pgc_diag_signal(conn, (int)pid, terminate ? PGC_DIAG_TERMINATE : PGC_DIAG_CANCEL,
	                     (int)wait_ms, &res, &err);
	if (rc != PGC_OK) {
		int code = cli_report(&err);
		/* The session ended meanwhile, or the server refused (no privilege): not done. */
		if (rc == PGC_ENOTFOUND || strcmp(err.sqlstate, "42501") == 0)
			code = EXIT_CONFLICT;
		pgc_diag_snapshot_free(snap);
		pgc_conn_close(conn);
		return code;
	}
	bool ok = res.done && (terminate ? res.gone : (res.gone || strcmp(res.state, "active") != 0));
	char waited[32];
	diag_fmt_dur(wait_ms / 1000.0, waited, sizeof waited);
	if (json) {
		printf("{\"action\":\"%s\",\"pid\":%lld,\"done\":%s,\"gone\":%s,\"state\":", cmd, pid,
		       res.done ? "true" : "false", res.gone ? "true" : "false");
		json_str(stdout, res.gone ? NULL : res.state);
		fputs(",\"warning\":", stdout);
		json_str(stdout, res.warning[0] ? res.warning : NULL);
		fputs(",\"session\":", stdout);
		diag_json_session(stdout, snap, s, false);
		fputs("}\n", stdout);
	} else if (!res.done) {
		cli_errorf("the server did not %s pid %lld%s%s", verb, pid, res.warning[0] ? ": " : "",
		           res.warning);
	} else if (terminate) {
		if (res.gone)
			printf("terminated pid %lld: the session is gone\n", pid);
		else
			cli_errorf("the server signalled pid %lld but the session is still there after %s "
			           "(state: %s)", pid, waited, diag_or_dash(res.state));
	} else {
		if (res.gone)
			printf("canceled pid %lld; the session has ended since\n", pid);
		else if (ok && s->state != NULL && strcmp(s->state, "active") != 0)
			printf("pid %lld was %s, not running a query: the cancel had nothing to stop\n",
			       pid, diag_or_dash(s->state));
		else if (ok)
			printf("canceled the query of pid %lld; the session is now %s\n", pid,
			       diag_or_dash(res.state));
		else
			cli_errorf("the server signalled pid %lld but it is still running its query after %s",
			           pid, waited);
	}
	pgc_diag_snapshot_free(snap);
	pgc_conn_close(conn);
	return ok ? 0 : EXIT_CONFLICT;
}

int cmd_cancel(int argc, char **argv)
{
	return signal_cmd(argc, argv, false);
}

int cmd_terminate(int argc, char **argv)
{
	return signal_cmd(argc, argv, true);
}

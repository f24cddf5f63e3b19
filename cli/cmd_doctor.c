/* cmd_doctor.c - pgcoord doctor: check the path to the server and its settings */
#include <getopt.h>
#include <string.h>

#include "cli.h"

static void usage(FILE *f)
{
	fputs("Usage: pgcoord [-d DSN] doctor [--json] [--schema NAME] [--no-pooler-check]\n"
	      "                              [--advisory-age D]\n"
	      "\n"
	      "Checks for coordination hazards and prints one line per finding, with its\n"
	      "severity and the fix: a transaction-mode pooler in between (session locks and\n"
	      "LISTEN are unsafe through it), lock_timeout, statement_timeout and\n"
	      "idle_in_transaction_session_timeout at 0 for this role, log_lock_waits off,\n"
	      "deadlock_timeout, the shared lock table (and the advisory locks' share of it),\n"
	      "lock waits longer than deadlock_timeout now and their blockers, advisory locks\n"
	      "held for long, sessions idle in transaction now, sessions without an\n"
	      "application_name, foreign keys without an index on their referencing columns,\n"
	      "and the pgcoord schema version.\n"
	      "\n"
	      "Options:\n"
	      "      --json             one JSON object with every finding\n"
	      "      --schema=NAME      pgcoord schema to check (default: pgcoord)\n"
	      "      --no-pooler-check  do not open a second session to look for a pooler\n"
	      "      --advisory-age=D   report advisory locks held at least D (default: 1h;\n"
	      "                         D: 90s, 30m, 2h, 1d)\n"
	      "  -h, --help             show this help and exit\n"
	      "\n"
	      "Exit status: 0 nothing to fix, 1 warnings, 2 errors; 64 usage error,\n"
	      "69 database unavailable, 70 internal error.\n", f);
}

int cmd_doctor(int argc, char **argv)
{
	enum { OPT_JSON = 256, OPT_SCHEMA, OPT_NO_POOLER, OPT_ADVISORY_AGE };
	static const struct option longopts[] = {
		{ "json", no_argument, NULL, OPT_JSON },
		{ "schema", required_argument, NULL, OPT_SCHEMA },
		{ "no-pooler-check", no_argument, NULL, OPT_NO_POOLER },
		{ "advisory-age", required_argument, NULL, OPT_ADVISORY_AGE },
		{ "help", no_argument, NULL, 'h' },
		{ NULL, 0, NULL, 0 },
	};
	bool json = g_cli.json;
	pgc_doctor_options opts = PGC_DOCTOR_OPTIONS_INIT;
	int ch, rc;
	opterr = 0;
	while ((ch = getopt_long(argc, argv, ":h", longopts, NULL)) != -1) {
		switch (ch) {
		case OPT_JSON:
			json = g_cli.json = true;
			break;
		case OPT_SCHEMA:
			opts.schema = optarg;
			break;
		case OPT_NO_POOLER:
			opts.check_pooler = false;
			break;
		case OPT_ADVISORY_AGE:
			if (!cli_duration_opt("doctor", "--advisory-age", optarg, 1000, INT64_C(30) * 86400000,
			                      &opts.advisory_age_ms, &rc))
				return rc;
			break;
		case 'h':
			usage(stdout);
			return 0;
		default:
			return cli_getopt_error("doctor", ch, argv);
		}
	}
	if (optind < argc)
		return cli_usage_error("doctor", "unexpected argument \"%s\"", argv[optind]);
	if (opts.schema != NULL && (*opts.schema == '\0' || strlen(opts.schema) > 63))
		return cli_usage_error("doctor", "--schema must be 1 to 63 bytes long");

	pgc_conn *conn;
	rc = cli_connect("doctor", &conn);
	if (rc != 0)
		return rc;
	pgc_doctor_report report;
	pgc_error err = PGC_ERROR_INIT;
	if (pgc_doctor_run(conn, &opts, &report, &err) != PGC_OK) {
		rc = cli_report(&err);
		pgc_conn_close(conn);
		return rc;
	}
	pgc_conn_close(conn);

	int errors = 0, warnings = 0;
	for (int i = 0; i < report.count; i++) {
		errors += report.findings[i].severity == PGC_DOCTOR_ERROR;
		warnings += report.findings[i].severity == PGC_DOCTOR_WARNING;
	}
	if (json) {
		fputs("{\"findings\":[", stdout);
		for (int i = 0; i < report.count; i++) {
			const pgc_doctor_finding *f = &report.findings[i];
			fputs(i ? ",{\"check\":" : "{\"check\":", stdout);
			json_str(stdout, f->check);
			fputs(",\"severity\":", stdout);
			json_str(stdout, pgc_doctor_severity_name(f->severity));
			fputs(",\"value\":", stdout);
			json_str(stdout, f->value);
			fputs(",\"message\":", stdout);
			json_str(stdout, f->message);
			fputs(",\"fix\":", stdout);
			json_str(stdout, f->fix);
			fputc('}', stdout);
		}
		printf("],\"errors\":%d,\"warnings\":%d,\"worst\":\"%s\"}\n", errors, warnings,
		       pgc_doctor_severity_name(report.worst));
	} else {
		for (int i = 0; i < report.count; i++) {
			const pgc_doctor_finding *f = &report.findings[i];
			if (g_cli.quiet && f->severity < PGC_DOCTOR_WARNING)
				continue;
			printf("%-7s  %s: %s", pgc_doctor_severity_name(f->severity), f->check, f->message);
			if (f->fix[0] != '\0')
				printf(". Fix: %s", f->fix);
			fputc('\n', stdout);
		}
		if (!g_cli.quiet || errors + warnings > 0)
			printf("doctor: %d error%s, %d warning%s\n", errors, errors == 1 ? "" : "s", warnings,
			       warnings == 1 ? "" : "s");
	}
	return report.worst == PGC_DOCTOR_ERROR ? 2 : report.worst == PGC_DOCTOR_WARNING ? 1 : 0;
}

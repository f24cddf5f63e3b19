/* cmd_init.c - pgcoord init: create or upgrade the pgcoord schema */
#include <getopt.h>
#include <string.h>

#include "cli.h"

static void usage(FILE *f)
{
	fputs("Usage: pgcoord [-d DSN] init [--schema NAME]\n"
	      "\n"
	      "Creates the pgcoord schema, or upgrades it by applying the migrations it lacks.\n"
	      "Each migration runs in its own transaction under a transaction-scoped advisory\n"
	      "lock, so any number of processes may run init at once.\n"
	      "\n"
	      "Options:\n"
	      "      --schema=NAME  schema to create or upgrade (default: pgcoord)\n"
	      "  -h, --help         show this help and exit\n", f);
}

int cmd_init(int argc, char **argv)
{
	static const struct option longopts[] = {
		{ "schema", required_argument, NULL, 's' },
		{ "help", no_argument, NULL, 'h' },
		{ NULL, 0, NULL, 0 },
	};
	const char *schema = PGC_SCHEMA_DEFAULT;
	int ch;
	opterr = 0;
	while ((ch = getopt_long(argc, argv, ":h", longopts, NULL)) != -1) {
		switch (ch) {
		case 's':
			schema = optarg;
			break;
		case 'h':
			usage(stdout);
			return 0;
		case ':':
			return cli_usage_error("init", "option %s needs a value", argv[optind - 1]);
		default:
			return cli_usage_error("init", "unknown option %s", argv[optind - 1]);
		}
	}
	if (optind < argc)
		return cli_usage_error("init", "unexpected argument \"%s\"", argv[optind]);
	if (*schema == '\0')
		return cli_usage_error("init", "--schema must not be empty");

	pgc_conn *conn;
	int rc = cli_connect("init", &conn);
	if (rc != 0)
		return rc;
	pgc_error err = PGC_ERROR_INIT;
	int applied = 0, version = 0;
	if (pgc_schema_init(conn, schema, &applied, &version, &err) != PGC_OK) {
		rc = cli_report(&err);
		pgc_conn_close(conn);
		return rc;
	}
	pgc_conn_close(conn);
	if (g_cli.json) {
		fputs("{\"schema\":", stdout);
		json_str(stdout, schema);
		printf(",\"applied\":%d,\"version\":%d}\n", applied, version);
	} else if (!g_cli.quiet) {
		if (applied > 0)
			printf("schema %s: applied %d migration%s, now at version %d\n", schema, applied,
			       applied == 1 ? "" : "s", version);
		else
			printf("schema %s: up to date at version %d\n", schema, version);
	}
	return 0;
}

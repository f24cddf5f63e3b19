/* cmd_init.c - pgcoord init: create or upgrade the pgcoord schema */
#include <getopt.h>
#include <string.h>

#include "cli.h"

static void usage(FILE *f)
{
	fputs("Usage: pgcoord [-d DSN] init [--schema NAME] [--worker-role ROLE [--login]]\n"
	      "\n"
	      "Creates the pgcoord schema, or upgrades it by applying the migrations it lacks.\n"
	      "Each migration runs in its own transaction under a transaction-scoped advisory\n"
	      "lock, so any number of processes may run init at once. Then re-creates each\n"
	      "SQL function whose definition changed, and reports on stderr each migration\n"
	      "whose recorded checksum differs from this pgcoord's (edited after it was\n"
	      "applied): init cannot repair that, and still exits 0; pgcoord doctor says how.\n"
	      "\n"
	      "With --worker-role, also creates ROLE when missing (NOLOGIN unless --login) and\n"
	      "grants it exactly what a queue worker needs on the schema: claim, heartbeat,\n"
	      "complete, fail, retry and reap jobs, register for wake-ups; nothing else.\n"
	      "Re-running grants the same set again. Give it a password with ALTER ROLE.\n"
	      "\n"
	      "Options:\n"
	      "      --schema=NAME       schema to create or upgrade (default: pgcoord)\n"
	      "      --worker-role=ROLE  create ROLE if missing and grant it a worker's rights\n"
	      "      --login             create ROLE with LOGIN (or add LOGIN to it)\n"
	      "  -h, --help              show this help and exit\n", f);
}

int cmd_init(int argc, char **argv)
{
	static const struct option longopts[] = {
		{ "schema", required_argument, NULL, 's' },
		{ "worker-role", required_argument, NULL, 'r' },
		{ "login", no_argument, NULL, 'l' },
		{ "help", no_argument, NULL, 'h' },
		{ NULL, 0, NULL, 0 },
	};
	const char *schema = PGC_SCHEMA_DEFAULT;
	const char *role = NULL;
	bool login = false;
	int ch;
	opterr = 0;
	while ((ch = getopt_long(argc, argv, ":h", longopts, NULL)) != -1) {
		switch (ch) {
		case 's':
			schema = optarg;
			break;
		case 'r':
			role = optarg;
			break;
		case 'l':
			login = true;
			break;
		case 'h':
			usage(stdout);
			return 0;
		default:
			return cli_getopt_error("init", ch, argv);
		}
	}
	if (optind < argc)
		return cli_usage_error("init", "unexpected argument \"%s\"", argv[optind]);
	if (*schema == '\0')
		return cli_usage_error("init", "--schema must not be empty");
	if (role != NULL && *role == '\0')
		return cli_usage_error("init", "--worker-role must not be empty");
	if (login && role == NULL)
		return cli_usage_error("init", "--login needs --worker-role");

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
	/* A migration edited after it was applied is reported, not repaired: the schema may differ
	 * from a fresh one in what the edit changed, and only a person can tell how. */
	pgc_schema_drift drift[16];
	int ndrift = 0;
	if (pgc_schema_check(conn, schema, drift, 16, &ndrift, &err) != PGC_OK) {
		rc = cli_report(&err);
		pgc_conn_close(conn);
		return rc;
	}
	int shown = ndrift < 16 ? ndrift : 16;
	for (int i = 0; i < shown; i++)
		fprintf(stderr, "pgcoord: init: migration %03d_%s.sql was changed after schema %s applied it"
		        " (recorded checksum %.12s, this pgcoord's %.12s): run pgcoord doctor\n",
		        drift[i].version, drift[i].name, schema, drift[i].recorded, drift[i].shipped);
	if (ndrift > shown)
		fprintf(stderr, "pgcoord: init: %d more migrations were changed after they were applied\n",
		        ndrift - shown);
	bool created = false;
	if (role != NULL) {
		pgc_worker_role_options ro = PGC_WORKER_ROLE_OPTIONS_INIT;
		ro.login = login;
		if (pgc_schema_grant_worker(conn, schema, role, &ro, &created, &err) != PGC_OK) {
			rc = cli_report(&err);
			pgc_conn_close(conn);
			return rc;
		}
	}
	pgc_conn_close(conn);
	if (g_cli.json) {
		fputs("{\"schema\":", stdout);
		json_str(stdout, schema);
		printf(",\"applied\":%d,\"version\":%d,\"changed_migrations\":[", applied, version);
		for (int i = 0; i < shown; i++) {
			printf("%s{\"version\":%d,\"name\":", i ? "," : "", drift[i].version);
			json_str(stdout, drift[i].name);
			fputs(",\"recorded\":", stdout);
			json_str(stdout, drift[i].recorded);
			fputs(",\"shipped\":", stdout);
			json_str(stdout, drift[i].shipped);
			fputs("}", stdout);
		}
		fputs("]", stdout);
		if (role != NULL) {
			fputs(",\"worker_role\":", stdout);
			json_str(stdout, role);
			printf(",\"role_created\":%s", created ? "true" : "false");
		}
		fputs("}\n", stdout);
	} else if (!g_cli.quiet) {
		if (applied > 0)
			printf("schema %s: applied %d migration%s, now at version %d\n", schema, applied,
			       applied == 1 ? "" : "s", version);
		else
			printf("schema %s: up to date at version %d\n", schema, version);
		if (role != NULL)
			printf("worker role %s: %sgranted a worker's rights on schema %s\n", role,
			       created ? "created and " : "", schema);
	}
	return 0;
}

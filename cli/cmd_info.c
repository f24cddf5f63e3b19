/* cmd_info.c - pgcoord info: connect and show the server, the session and the schema */
#include <getopt.h>
#include <libpq-fe.h>
#include <string.h>

#include "cli.h"

static void usage(FILE *f)
{
	fputs("Usage: pgcoord [-d DSN] info [--schema NAME]\n"
	      "\n"
	      "Connects and shows the server version, which host of the DSN answered,\n"
	      "whether it is a primary or a standby and its timeline, this session's\n"
	      "backend pid, the DSN (password masked) and the installed pgcoord schema\n"
	      "version.\n"
	      "\n"
	      "Options:\n"
	      "      --schema=NAME  schema to look at (default: pgcoord)\n"
	      "  -h, --help         show this help and exit\n", f);
}

int cmd_info(int argc, char **argv)
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
		default:
			return cli_getopt_error("info", ch, argv);
		}
	}
	if (optind < argc)
		return cli_usage_error("info", "unexpected argument \"%s\"", argv[optind]);
	if (*schema == '\0')
		return cli_usage_error("info", "--schema must not be empty");

	pgc_conn *conn;
	int rc = cli_connect("info", &conn);
	if (rc != 0)
		return rc;
	pgc_error err = PGC_ERROR_INIT;
	int version = 0;
	if (pgc_schema_version(conn, schema, &version, &err) != PGC_OK) {
		rc = cli_report(&err);
		pgc_conn_close(conn);
		return rc;
	}
	pgc_server_role role;
	if (pgc_server_role_get(conn, &role, &err) != PGC_OK) {
		rc = cli_report(&err);
		pgc_conn_close(conn);
		return rc;
	}
	PGconn *pg = pgc_conn_pg(conn);
	const char *server = PQparameterStatus(pg, "server_version");
	const char *user = PQuser(pg), *db = PQdb(pg);
	if (g_cli.json) {
		fputs("{\"server_version\":", stdout);
		json_str(stdout, server);
		printf(",\"server_version_num\":%d,\"backend_pid\":%d,\"user\":", pgc_conn_server_version(conn),
		       pgc_conn_backend_pid(conn));
		json_str(stdout, user);
		fputs(",\"database\":", stdout);
		json_str(stdout, db);
		fputs(",\"dsn\":", stdout);
		json_str(stdout, pgc_conn_dsn_masked(conn));
		fputs(",\"host\":", stdout);
		json_str(stdout, role.host);
		fputs(",\"port\":", stdout);
		json_str(stdout, role.port);
		fputs(",\"role\":", stdout);
		json_str(stdout, role.standby ? "standby" : "primary");
		printf(",\"in_recovery\":%s,\"timeline\":%lld,\"timeline_source\":",
		       role.standby ? "true" : "false", (long long)role.timeline);
		json_str(stdout, role.timeline_source);
		fputs(",\"schema\":", stdout);
		json_str(stdout, schema);
		printf(",\"schema_version\":%d,\"schema_latest\":%d,\"pgcoord_version\":", version,
		       pgc_schema_latest());
		json_str(stdout, pgc_version());
		fputs("}\n", stdout);
	} else {
		printf("server:   PostgreSQL %s\n", server ? server : "?");
		printf("host:     %s port %s\n", cli_esc(role.host), cli_esc(role.port));
		if (role.timeline == 0)
			printf("role:     %s, timeline not visible to this role\n",
			       role.standby ? "standby (in recovery)" : "primary");
		else if (strcmp(role.timeline_source, "checkpoint") == 0)
			printf("role:     standby (in recovery), timeline %lld (of its last restartpoint)\n",
			       (long long)role.timeline);
		else
			printf("role:     %s, timeline %lld\n", role.standby ? "standby (in recovery)" : "primary",
			       (long long)role.timeline);
		printf("session:  backend pid %d, user %s, database %s\n", pgc_conn_backend_pid(conn),
		       user ? cli_esc(user) : "?", db ? cli_esc(db) : "?");
		const char *dsn = pgc_conn_dsn_masked(conn);
		printf("dsn:      %s\n", dsn && *dsn ? dsn : "(libpq defaults and PG* variables)");
		if (version == 0 && strcmp(schema, PGC_SCHEMA_DEFAULT) == 0)
			printf("schema:   %s not installed (run: pgcoord init)\n", schema);
		else if (version == 0)
			printf("schema:   %s not installed (run: pgcoord init --schema %s)\n", cli_esc(schema),
			       cli_esc(schema));
		else
			printf("schema:   %s at version %d (this pgcoord knows %d)\n", cli_esc(schema), version,
			       pgc_schema_latest());
		printf("pgcoord:  %s\n", pgc_version());
	}
	pgc_conn_close(conn);
	return 0;
}

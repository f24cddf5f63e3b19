/* test_conn.c - connections, server errors and the schema against a real server */
#include <libpq-fe.h>
#include <unistd.h>

#include "conn/conn_int.h"
#include "../t.h"

static void conn__connect_and_query(void)
{
	pgc_conn *c = t_connect("pgcoord/test-conn");
	T_ASSERT(pgc_conn_server_version(c) >= 120000);
	T_ASSERT(pgc_conn_backend_pid(c) > 0);
	PGresult *res = PQexec(pgc_conn_pg(c),
	        "SELECT current_setting('application_name'), pg_backend_pid()");
	T_ASSERT_INT_EQ(PQresultStatus(res), PGRES_TUPLES_OK);
	T_ASSERT_STR_EQ(PQgetvalue(res, 0, 0), "pgcoord/test-conn");
	T_ASSERT_INT_EQ(atoi(PQgetvalue(res, 0, 1)), pgc_conn_backend_pid(c));
	PQclear(res);
	/* keepalives and the connect timeout are set by default */
	PQconninfoOption *info = PQconninfo(pgc_conn_pg(c));
	int seen = 0;
	for (PQconninfoOption *o = info; o && o->keyword; o++) {
		if (strcmp(o->keyword, "keepalives_idle") == 0) {
			T_ASSERT_STR_EQ(o->val, "10");
			seen++;
		} else if (strcmp(o->keyword, "connect_timeout") == 0) {
			T_ASSERT_STR_EQ(o->val, "10");
			seen++;
		}
	}
	PQconninfoFree(info);
	T_ASSERT_INT_EQ(seen, 2);
	pgc_conn_close(c);
	pgc_conn_close(NULL);
}

static void conn__dsn_application_name_wins(void)
{
	char dsn[1024];
	const char *base = t_dsn();
	if (strncmp(base, "postgres", 8) == 0)
		snprintf(dsn, sizeof dsn, "%s%sapplication_name=from-dsn", base, strchr(base, '?') ? "&" : "?");
	else
		snprintf(dsn, sizeof dsn, "%s application_name=from-dsn", base);
	pgc_conn *c = NULL;
	pgc_error err;
	T_ASSERT_INT_EQ(pgc_connect(dsn, NULL, &c, &err), PGC_OK);
	PGresult *res = PQexec(pgc_conn_pg(c), "SHOW application_name");
	T_ASSERT_STR_EQ(PQgetvalue(res, 0, 0), "from-dsn");
	PQclear(res);
	pgc_conn_close(c);
}

static void conn__bad_dsn_is_masked(void)
{
	pgc_conn *c = (pgc_conn *)0x1;
	pgc_error err;
	/* Port 1 on loopback refuses at once. */
	int rc = pgc_connect("postgresql://alice:hunter2@127.0.0.1:1/db?connect_timeout=3", NULL, &c, &err);
	T_ASSERT_INT_EQ(rc, PGC_ECONNECT);
	T_ASSERT(c == NULL);
	T_ASSERT_INT_EQ(err.code, PGC_ECONNECT);
	T_ASSERT_INT_EQ(err.klass, PGC_CLASS_RETRY_LATER);
	T_ASSERT_CONTAINS(err.message, "postgresql://alice:****@127.0.0.1:1/db");
	T_ASSERT_NOT_CONTAINS(err.message, "hunter2");
	T_ASSERT_STR_EQ(err.sqlstate, "");

	rc = pgc_connect("host=127.0.0.1 port=1 password='hunter 2' connect_timeout=3", NULL, &c, &err);
	T_ASSERT_INT_EQ(rc, PGC_ECONNECT);
	T_ASSERT_NOT_CONTAINS(err.message, "hunter");
	T_ASSERT_CONTAINS(err.message, "password='****'");

	/* A malformed DSN is a usage error, and libpq's quoted fragments of it are not echoed. */
	T_ASSERT_INT_EQ(pgc_connect("not a dsn at all", NULL, &c, &err), PGC_EUSAGE);
	T_ASSERT_CONTAINS(err.message, "invalid connection string");
	T_ASSERT_INT_EQ(pgc_connect("postgresql://u:pw@x?hunter@h/db", NULL, &c, &err), PGC_EUSAGE);
	T_ASSERT_NOT_CONTAINS(err.message, "hunter");
	/* A misspelt keyword: libpq refuses the string, and its values are all masked. */
	T_ASSERT_INT_EQ(pgc_connect("host=h pasword=hunter2", NULL, &c, &err), PGC_EUSAGE);
	T_ASSERT_NOT_CONTAINS(err.message, "hunter");
	T_ASSERT_CONTAINS(err.message, "pasword=****");
	T_ASSERT_INT_EQ(pgc_connect(NULL, NULL, NULL, &err), PGC_EUSAGE);
	pgc_conn_options bad = PGC_CONN_OPTIONS_INIT;
	bad.connect_timeout_s = -1;
	T_ASSERT_INT_EQ(pgc_connect(t_dsn(), &bad, &c, &err), PGC_EUSAGE);
}

static void conn__server_error_fields(void)
{
	pgc_conn *c = t_connect(NULL);
	pgc_error err;
	T_ASSERT_INT_EQ(pgc_exec(c, "SELECT FROM nosuchtable_pgcoord_test", &err), PGC_ESQL);
	T_ASSERT_STR_EQ(err.sqlstate, "42P01");
	T_ASSERT_INT_EQ(err.klass, PGC_CLASS_FATAL);
	T_ASSERT_CONTAINS(err.message, "nosuchtable_pgcoord_test");
	T_ASSERT_INT_EQ(err.position, 13);
	T_ASSERT_INT_EQ(pgc_exec(c, "SELEC 1", &err), PGC_ESQL);
	T_ASSERT_STR_EQ(err.sqlstate, "42601");
	T_ASSERT_INT_EQ(err.position, 1);
	/* The connection stays usable. */
	T_ASSERT_INT_EQ(pgc_exec(c, "SELECT 1", &err), PGC_OK);
	T_ASSERT_INT_EQ(pgc_exec(NULL, "SELECT 1", &err), PGC_EUSAGE);
	T_ASSERT_INT_EQ(pgc_exec(c, NULL, &err), PGC_EUSAGE);
	pgc_conn_close(c);
}

static void conn__terminated_session_is_connlost(void)
{
	pgc_conn *victim = t_connect("pgcoord/victim");
	pgc_conn *killer = t_connect(NULL);
	char pid[16];
	snprintf(pid, sizeof pid, "%d", pgc_conn_backend_pid(victim));
	const char *p[1] = { pid };
	int rc;
	pgc_error err;
	PGresult *res = pgc__exec(killer, "SELECT pg_terminate_backend($1::int, 5000)", 1, p, &rc, &err);
	T_ASSERT(res != NULL);
	T_ASSERT_STR_EQ(PQgetvalue(res, 0, 0), "t");
	PQclear(res);
	rc = pgc_exec(victim, "SELECT 1", &err);
	T_ASSERT_INT_EQ(rc, PGC_ECONNLOST);
	T_ASSERT_INT_EQ(err.klass, PGC_CLASS_RETRY_LATER);
	pgc_conn_close(victim);
	pgc_conn_close(killer);
}

static void schema__init_idempotent_and_named(void)
{
	pgc_conn *c = t_connect(NULL);
	pgc_error err;
	const char *schema = "pgc test \"schema\"";
	char sql[256];
	T_ASSERT_INT_EQ(pgc_exec(c, "DROP SCHEMA IF EXISTS \"pgc test \"\"schema\"\"\" CASCADE", &err), PGC_OK);
	int version = -1, applied = -1;
	T_ASSERT_INT_EQ(pgc_schema_version(c, schema, &version, &err), PGC_OK);
	T_ASSERT_INT_EQ(version, 0);
	T_ASSERT_INT_EQ(pgc_schema_init(c, schema, &applied, &version, &err), PGC_OK);
	T_ASSERT_INT_EQ(applied, pgc_schema_latest());
	T_ASSERT_INT_EQ(version, pgc_schema_latest());
	T_ASSERT_INT_EQ(pgc_schema_init(c, schema, &applied, &version, &err), PGC_OK);
	T_ASSERT_INT_EQ(applied, 0);
	T_ASSERT_INT_EQ(pgc_schema_version(c, schema, &version, &err), PGC_OK);
	T_ASSERT_INT_EQ(version, pgc_schema_latest());
	/* Inside a transaction it refuses; empty and over-long names are usage errors. */
	T_ASSERT_INT_EQ(pgc_exec(c, "BEGIN", &err), PGC_OK);
	T_ASSERT_INT_EQ(pgc_schema_init(c, schema, NULL, NULL, &err), PGC_EUSAGE);
	T_ASSERT_INT_EQ(pgc_exec(c, "ROLLBACK", &err), PGC_OK);
	T_ASSERT_INT_EQ(pgc_schema_init(c, "", NULL, NULL, &err), PGC_EUSAGE);
	memset(sql, 'a', 100);
	sql[100] = '\0';
	T_ASSERT_INT_EQ(pgc_schema_init(c, sql, NULL, NULL, &err), PGC_EUSAGE);
	T_ASSERT_INT_EQ(pgc_schema_init(NULL, NULL, NULL, NULL, &err), PGC_EUSAGE);
	/* A schema newer than this library is refused, not downgraded. */
	T_ASSERT_INT_EQ(pgc_exec(c, "INSERT INTO \"pgc test \"\"schema\"\"\".migrations (version, name) VALUES (999, 'future')", &err), PGC_OK);
	T_ASSERT_INT_EQ(pgc_schema_init(c, schema, NULL, NULL, &err), PGC_ESCHEMA_VERSION);
	T_ASSERT_CONTAINS(err.message, "999");
	T_ASSERT_INT_EQ(pgc_exec(c, "DROP SCHEMA \"pgc test \"\"schema\"\"\" CASCADE", &err), PGC_OK);
	pgc_conn_close(c);
}

static void on_notice(const char *severity, const char *message, void *arg)
{
	char *buf = arg;
	snprintf(buf, 256, "%s: %s", severity, message);
}

static void conn__notices_never_printed(void)
{
	/* The default drops notices: nothing reaches stderr. */
	fflush(stderr);
	int saved = dup(2);
	FILE *tmp = tmpfile();
	T_ASSERT(tmp != NULL);
	dup2(fileno(tmp), 2);
	pgc_conn *c = t_connect(NULL);
	pgc_error err;
	int rc = pgc_exec(c, "DO $$BEGIN RAISE NOTICE 'quiet please'; RAISE WARNING 'me too'; END$$", &err);
	pgc_conn_close(c);
	fflush(stderr);
	dup2(saved, 2);
	close(saved);
	T_ASSERT_INT_EQ(rc, PGC_OK);
	T_ASSERT_INT_EQ(ftell(tmp), 0);
	fclose(tmp);

	/* A callback gets them. */
	char got[256] = "";
	pgc_conn_options opts = PGC_CONN_OPTIONS_INIT;
	opts.notice_fn = on_notice;
	opts.notice_arg = got;
	T_ASSERT_INT_EQ(pgc_connect(t_dsn(), &opts, &c, &err), PGC_OK);
	T_ASSERT_INT_EQ(pgc_exec(c, "DO $$BEGIN RAISE WARNING 'look\nhere'; END$$", &err), PGC_OK);
	T_ASSERT_STR_EQ(got, "WARNING: look here");
	pgc_conn_close(c);
}

int main(int argc, char **argv)
{
	static const t_case cases[] = {
		{ "conn__connect_and_query", conn__connect_and_query },
		{ "conn__dsn_application_name_wins", conn__dsn_application_name_wins },
		{ "conn__bad_dsn_is_masked", conn__bad_dsn_is_masked },
		{ "conn__server_error_fields", conn__server_error_fields },
		{ "conn__terminated_session_is_connlost", conn__terminated_session_is_connlost },
		{ "schema__init_idempotent_and_named", schema__init_idempotent_and_named },
		{ "conn__notices_never_printed", conn__notices_never_printed },
		{ NULL, NULL },
	};
	return t_main(argc, argv, cases);
}

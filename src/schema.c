/* schema.c - creating and upgrading the pgcoord schema with versioned migrations
 *
 * Each migration runs in its own transaction that first takes a transaction-scoped advisory
 * lock on PGC_MIGRATION_LOCK_KEY, then re-reads the schema's version. Concurrent callers queue
 * on the lock; the first applies the migration and the others find it applied and move on, so
 * every migration is applied exactly once whatever the number of processes. The lock ends with
 * the transaction, so a crash mid-migration leaves nothing held. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "internal.h"
#include "migrations.h"

#define SCHEMA_NAME_MAX 63 /* NAMEDATALEN - 1 */

int pgc_schema_latest(void)
{
	return pgc__migration_count;
}

static int check_schema_name(const char *schema, pgc_error *err)
{
	if (*schema == '\0')
		return pgc__err(err, PGC_EUSAGE, "schema name is empty");
	if (strlen(schema) > SCHEMA_NAME_MAX)
		return pgc__err(err, PGC_EUSAGE, "schema name is longer than %d bytes", SCHEMA_NAME_MAX);
	return PGC_OK;
}

/* Reads the version inside the current transaction (or autocommit). */
static int read_version(pgc_conn *conn, const char *schema, int *version, pgc_error *err)
{
	int rc;
	const char *params[1] = { schema };
	/* Read the catalog with the statement's snapshot rather than a name lookup (to_regclass),
	 * which would trust a cached "no such table" from before we waited for the migration lock
	 * and so miss a table another process has just created. */
	PGresult *res = pgc__exec(conn,
	        "SELECT EXISTS (SELECT 1 FROM pg_catalog.pg_class c"
	        " JOIN pg_catalog.pg_namespace n ON n.oid = c.relnamespace"
	        " WHERE n.nspname = $1 AND c.relname = 'migrations')", 1, params, &rc, err);
	if (res == NULL)
		return rc;
	bool exists = strcmp(PQgetvalue(res, 0, 0), "t") == 0;
	PQclear(res);
	if (!exists) {
		*version = 0;
		return PGC_OK;
	}
	char *q = pgc__quote_ident(conn, schema, err);
	if (q == NULL)
		return PGC_EUSAGE;
	char sql[256];
	snprintf(sql, sizeof sql, "SELECT coalesce(max(version), 0) FROM %s.migrations", q);
	PQfreemem(q);
	res = pgc__exec(conn, sql, 0, NULL, &rc, err);
	if (res == NULL)
		return rc;
	*version = atoi(PQgetvalue(res, 0, 0));
	PQclear(res);
	return PGC_OK;
}

int pgc_schema_version(pgc_conn *conn, const char *schema, int *version, pgc_error *err)
{
	pgc_error_clear(err);
	if (conn == NULL || version == NULL)
		return pgc__err(err, PGC_EUSAGE, "pgc_schema_version: conn and version must not be NULL");
	if (schema == NULL)
		schema = PGC_SCHEMA_DEFAULT;
	int rc = check_schema_name(schema, err);
	if (rc != PGC_OK)
		return rc;
	return read_version(conn, schema, version, err);
}

/* Replaces every @schema@ in sql with quoted. Returns a malloc'd string or NULL. */
static char *expand(const char *sql, const char *quoted)
{
	static const char tag[] = "@schema@";
	size_t n = 0, tl = sizeof tag - 1, ql = strlen(quoted);
	for (const char *p = strstr(sql, tag); p; p = strstr(p + tl, tag))
		n++;
	char *out = malloc(strlen(sql) + n * ql + 1);
	if (out == NULL)
		return NULL;
	char *o = out;
	const char *p = sql, *hit;
	while ((hit = strstr(p, tag)) != NULL) {
		memcpy(o, p, (size_t)(hit - p));
		o += hit - p;
		memcpy(o, quoted, ql);
		o += ql;
		p = hit + tl;
	}
	strcpy(o, p);
	return out;
}

static void rollback(pgc_conn *conn)
{
	PQclear(PQexec(conn->pg, "ROLLBACK"));
}

/* Applies migration m (when still needed) in one transaction. *did says whether it ran. */
static int apply_one(pgc_conn *conn, const char *schema, const char *quoted, const pgc_migration *m,
                     bool *did, pgc_error *err)
{
	int rc;
	*did = false;
	if ((rc = pgc_exec(conn, "BEGIN", err)) != PGC_OK)
		return rc;
	char key[32];
	snprintf(key, sizeof key, "%lld", (long long)PGC_MIGRATION_LOCK_KEY);
	const char *kp[1] = { key };
	PGresult *res = pgc__exec(conn, "SELECT pg_advisory_xact_lock($1::bigint)", 1, kp, &rc, err);
	if (res == NULL)
		goto fail;
	PQclear(res);

	int current;
	if ((rc = read_version(conn, schema, &current, err)) != PGC_OK)
		goto fail;
	if (current >= m->version) {
		rollback(conn);
		return PGC_OK;
	}
	if (current != m->version - 1) {
		rc = pgc__err(err, PGC_EINTERNAL, "schema %s is at version %d, cannot apply migration %d",
		              schema, current, m->version);
		goto fail;
	}
	if (current == 0) {
		char sql[512];
		snprintf(sql, sizeof sql,
		         "CREATE SCHEMA IF NOT EXISTS %s;"
		         "CREATE TABLE %s.migrations ("
		         " version integer PRIMARY KEY,"
		         " name text NOT NULL,"
		         " applied_at timestamptz NOT NULL DEFAULT clock_timestamp(),"
		         " applied_by text NOT NULL DEFAULT current_user)",
		         quoted, quoted);
		if ((rc = pgc_exec(conn, sql, err)) != PGC_OK)
			goto fail;
	}
	char *body = expand(m->sql, quoted);
	if (body == NULL) {
		rc = pgc__err(err, PGC_ENOMEM, "out of memory");
		goto fail;
	}
	rc = pgc_exec(conn, body, err);
	free(body);
	if (rc != PGC_OK) {
		char msg[PGC_ERROR_MESSAGE_MAX];
		snprintf(msg, sizeof msg, "migration %03d_%s: %s", m->version, m->name, err ? err->message : "");
		if (err)
			pgc__copy_line(err->message, sizeof err->message, msg);
		goto fail;
	}
	char sql[256], ver[16];
	snprintf(sql, sizeof sql, "INSERT INTO %s.migrations (version, name) VALUES ($1::int, $2)", quoted);
	snprintf(ver, sizeof ver, "%d", m->version);
	const char *ip[2] = { ver, m->name };
	res = pgc__exec(conn, sql, 2, ip, &rc, err);
	if (res == NULL)
		goto fail;
	PQclear(res);
	if ((rc = pgc_exec(conn, "COMMIT", err)) != PGC_OK)
		return rc;
	*did = true;
	return PGC_OK;
fail:
	if (PQstatus(conn->pg) == CONNECTION_OK)
		rollback(conn);
	return rc;
}

int pgc_schema_init(pgc_conn *conn, const char *schema, int *applied, int *version, pgc_error *err)
{
	pgc_error_clear(err);
	if (conn == NULL)
		return pgc__err(err, PGC_EUSAGE, "pgc_schema_init: conn must not be NULL");
	if (schema == NULL)
		schema = PGC_SCHEMA_DEFAULT;
	int rc = check_schema_name(schema, err);
	if (rc != PGC_OK)
		return rc;
	if (pgc__in_transaction(conn))
		return pgc__err(err, PGC_EUSAGE, "pgc_schema_init must run outside a transaction: each migration commits on its own");

	int current;
	if ((rc = read_version(conn, schema, &current, err)) != PGC_OK)
		return rc;
	if (current > pgc__migration_count)
		return pgc__err(err, PGC_ESCHEMA_VERSION,
		                "schema %s is at version %d but this pgcoord knows only up to %d: upgrade pgcoord",
		                schema, current, pgc__migration_count);

	char *quoted = pgc__quote_ident(conn, schema, err);
	if (quoted == NULL)
		return PGC_EUSAGE;
	int count = 0;
	for (int i = current; i < pgc__migration_count; i++) {
		bool did;
		rc = apply_one(conn, schema, quoted, &pgc__migrations[i], &did, err);
		if (rc != PGC_OK)
			break;
		count += did;
	}
	PQfreemem(quoted);
	if (rc != PGC_OK)
		return rc;
	if (applied)
		*applied = count;
	if (version)
		*version = pgc__migration_count;
	return PGC_OK;
}

/* schema.c - creating and upgrading the pgcoord schema with versioned migrations
 *
 * Each migration runs in its own transaction that first takes a transaction-scoped advisory
 * lock on PGC_MIGRATION_LOCK_KEY, then re-reads the schema's version. Concurrent callers queue
 * on the lock; the first applies the migration and the others find it applied and move on, so
 * every migration is applied exactly once whatever the number of processes. The lock ends with
 * the transaction, so a crash mid-migration leaves nothing held.
 *
 * Migrations hold tables, indexes and data, and are frozen once shipped: the runner records
 * each one's SHA-256 (migrations.checksum) and reports a file that changed after it was applied
 * (pgc_schema_check). Functions and the triggers they back are not in migrations: each has one
 * file in src/schema/functions/ with its current definition, re-created after the migrations,
 * under the same lock and with check_function_bodies off (as pg_dump does), whenever its text's
 * checksum differs from the one recorded in function_versions. The runner creates its own two
 * pieces of bookkeeping (that column and that table) when missing, under the lock. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "conn/conn_int.h"
#include "migrations.h"

#define ROLE_NAME_MAX 63 /* NAMEDATALEN - 1 */

/* Migrations may rebuild an index of a large jobs table, and wait for another process's
 * migration: their bound is generous, but there is one. */
#define MIGRATION_TIMEOUT_MS (60 * 60 * 1000)

#define MIGRATIONS_MAX 999 /* NNN_name.sql: three digits */

int pgc_schema_latest(void)
{
	return pgc__migration_count;
}

/* Runs SQL text (several statements) under the migrations' bound. */
static int run_sql(pgc_conn *conn, const char *sql, pgc_error *err)
{
	pgc__call call = pgc__bound(MIGRATION_TIMEOUT_MS, -1);
	call.flags = PGC__SIMPLE;
	int rc;
	PQclear(pgc__query(conn, sql, 0, NULL, &call, &rc, err));
	return rc;
}

static const char *const books_sql =
        "ALTER TABLE @S@.migrations ADD COLUMN IF NOT EXISTS checksum text;"
        "CREATE TABLE IF NOT EXISTS @S@.function_versions ("
        " name text PRIMARY KEY,"
        " checksum text NOT NULL,"
        " applied_at timestamptz NOT NULL DEFAULT clock_timestamp());"
        "COMMENT ON TABLE @S@.function_versions IS"
        " 'pgcoord: the checksum of each function file as last created (src/schema/functions)'";

/* Whether schema's migrations table has its checksum column (and, with functions, whether the
 * function_versions table exists), asked of the catalog. */
static int has_books(pgc_conn *conn, const char *schema, bool functions, bool *have,
                     pgc_error *err)
{
#define HAS_CHECKSUM                                                                        \
	"SELECT EXISTS (SELECT 1 FROM pg_catalog.pg_attribute a"                                    \
	"  JOIN pg_catalog.pg_class c ON c.oid = a.attrelid"                                        \
	"  JOIN pg_catalog.pg_namespace n ON n.oid = c.relnamespace"                                \
	"  WHERE n.nspname = $1 AND c.relname = 'migrations' AND a.attname = 'checksum'"            \
	"    AND NOT a.attisdropped)"
	static const char column[] = HAS_CHECKSUM;
	static const char both[] = HAS_CHECKSUM
	        " AND EXISTS (SELECT 1 FROM pg_catalog.pg_class c"
	        "  JOIN pg_catalog.pg_namespace n ON n.oid = c.relnamespace"
	        "  WHERE n.nspname = $1 AND c.relname = 'function_versions')";
#undef HAS_CHECKSUM
	int rc;
	const char *p[1] = { schema };
	PGresult *res = pgc__exec(conn, functions ? both : column, 1, p, &rc, err);
	if (res == NULL)
		return rc;
	*have = strcmp(PQgetvalue(res, 0, 0), "t") == 0;
	PQclear(res);
	return PGC_OK;
}

/* Creates the runner's bookkeeping when missing: the checksum column of migrations and the
 * function_versions table. Asked of the catalog first, so that an up-to-date schema takes no
 * lock on migrations. The caller holds the migration lock. */
static int ensure_books(pgc_conn *conn, const char *schema, const char *quoted, pgc_error *err)
{
	int rc;
	bool have = false;
	if ((rc = has_books(conn, schema, true, &have, err)) != PGC_OK)
		return rc;
	if (have)
		return PGC_OK;
	char *sql = pgc__sql_schema(books_sql, quoted);
	if (sql == NULL)
		return pgc__err(err, PGC_ENOMEM, "out of memory");
	rc = run_sql(conn, sql, err);
	free(sql);
	return rc;
}

/* Records the shipped checksum of the applied migrations that have none (applied before
 * checksums were recorded): the baseline that later runs compare against. */
static int baseline_checksums(pgc_conn *conn, const char *quoted, pgc_error *err)
{
	int64_t vn[MIGRATIONS_MAX];
	const char *cn[MIGRATIONS_MAX];
	if (pgc__migration_count > MIGRATIONS_MAX)
		return pgc__err(err, PGC_EINTERNAL, "more migrations than the baseline handles");
	for (int i = 0; i < pgc__migration_count; i++) {
		vn[i] = pgc__migrations[i].version;
		cn[i] = pgc__migrations[i].checksum;
	}
	pgc__sb vs = PGC__SB_INIT, cs = PGC__SB_INIT;
	pgc__sb_int_array(&vs, (size_t)pgc__migration_count, vn);
	pgc__sb_text_array(&cs, (size_t)pgc__migration_count, cn);
	int rc;
	char sql[256];
	snprintf(sql, sizeof sql,
	         "UPDATE %s.migrations m SET checksum = u.c"
	         " FROM unnest($1::bigint[], $2::text[]) AS u(v, c)"
	         " WHERE m.version = u.v AND m.checksum IS NULL", quoted);
	if (vs.oom || cs.oom || vs.buf == NULL || cs.buf == NULL) {
		rc = pgc__err(err, PGC_ENOMEM, "out of memory");
	} else {
		const char *p[2] = { vs.buf, cs.buf };
		PQclear(pgc__exec(conn, sql, 2, p, &rc, err));
	}
	pgc__sb_free(&vs);
	pgc__sb_free(&cs);
	return rc;
}

/* (Re-)creates every function whose file's checksum differs from the one recorded, and records
 * the new one. The caller holds the migration lock, in a transaction, with the schema at the
 * latest version and the bookkeeping in place. *count receives how many files ran. */
static int apply_functions(pgc_conn *conn, const char *quoted, int *count, pgc_error *err)
{
	int rc;
	char sql[256];
	*count = 0;
	snprintf(sql, sizeof sql, "SELECT name, checksum FROM %s.function_versions", quoted);
	PGresult *have = pgc__exec(conn, sql, 0, NULL, &rc, err);
	if (have == NULL)
		return rc;
	/* Bodies refer to tables, types and other functions by name: checked when first run, so
	 * that the files may be created in any order. */
	if ((rc = run_sql(conn, "SET LOCAL check_function_bodies = off", err)) != PGC_OK)
		goto out;
	snprintf(sql, sizeof sql,
	         "INSERT INTO %s.function_versions AS v (name, checksum) VALUES ($1, $2)"
	         " ON CONFLICT (name) DO UPDATE SET checksum = excluded.checksum,"
	         " applied_at = clock_timestamp()", quoted);
	for (int i = 0; i < pgc__function_count; i++) {
		const pgc_sql_function *f = &pgc__functions[i];
		bool same = false;
		for (int r = 0; r < PQntuples(have) && !same; r++)
			same = strcmp(PQgetvalue(have, r, 0), f->name) == 0
			       && strcmp(PQgetvalue(have, r, 1), f->checksum) == 0;
		if (same)
			continue;
		char *body = pgc__sql_schema(f->sql, quoted);
		if (body == NULL) {
			rc = pgc__err(err, PGC_ENOMEM, "out of memory");
			goto out;
		}
		rc = run_sql(conn, body, err);
		free(body);
		if (rc != PGC_OK) {
			char msg[PGC_ERROR_MESSAGE_MAX];
			snprintf(msg, sizeof msg, "function %s.sql: %s", f->name, err ? err->message : "");
			if (err)
				pgc__copy_line(err->message, sizeof err->message, msg);
			goto out;
		}
		const char *p[2] = { f->name, f->checksum };
		PQclear(pgc__exec(conn, sql, 2, p, &rc, err));
		if (rc != PGC_OK)
			goto out;
		(*count)++;
	}
out:
	PQclear(have);
	return rc;
}

/* Takes the migration lock in the current transaction. */
static int migration_lock(pgc_conn *conn, pgc_error *err)
{
	int rc;
	char key[32];
	snprintf(key, sizeof key, "%lld", (long long)PGC_MIGRATION_LOCK_KEY);
	const char *kp[1] = { key };
	pgc__call lcall = pgc__bound(MIGRATION_TIMEOUT_MS, -1);
	lcall.statement_timeout_ms = 0;
	lcall.lock_timeout_ms = 0;
	PQclear(pgc__query(conn, "SELECT pg_advisory_xact_lock($1::bigint)", 1, kp, &lcall, &rc, err));
	return rc;
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
	int rc = pgc__check_schema(schema, err);
	if (rc != PGC_OK)
		return rc;
	return read_version(conn, schema, version, err);
}

/* Applies migration m (when still needed) in one transaction. *did says whether it ran. */
static int apply_one(pgc_conn *conn, const char *schema, const char *quoted, const pgc_migration *m,
                     bool *did, pgc_error *err)
{
	int rc;
	*did = false;
	if ((rc = run_sql(conn, "BEGIN", err)) != PGC_OK)
		return rc;
	if ((rc = migration_lock(conn, err)) != PGC_OK)
		goto fail;

	int current;
	if ((rc = read_version(conn, schema, &current, err)) != PGC_OK)
		goto fail;
	if (current >= m->version) {
		(void)pgc__rollback(conn);
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
		if ((rc = run_sql(conn, sql, err)) != PGC_OK)
			goto fail;
	}
	if ((rc = ensure_books(conn, schema, quoted, err)) != PGC_OK)
		goto fail;
	char *body = pgc__sql_schema(m->sql, quoted);
	if (body == NULL) {
		rc = pgc__err(err, PGC_ENOMEM, "out of memory");
		goto fail;
	}
	rc = run_sql(conn, body, err);
	free(body);
	if (rc != PGC_OK) {
		char msg[PGC_ERROR_MESSAGE_MAX];
		snprintf(msg, sizeof msg, "migration %03d_%s: %s", m->version, m->name, err ? err->message : "");
		if (err)
			pgc__copy_line(err->message, sizeof err->message, msg);
		goto fail;
	}
	char sql[256], ver[16];
	snprintf(sql, sizeof sql, "INSERT INTO %s.migrations (version, name, checksum) VALUES ($1::int, $2, $3)",
	         quoted);
	snprintf(ver, sizeof ver, "%d", m->version);
	const char *ip[3] = { ver, m->name, m->checksum };
	PGresult *res = pgc__exec(conn, sql, 3, ip, &rc, err);
	if (res == NULL)
		goto fail;
	PQclear(res);
	/* The last migration's transaction creates the functions too, so that no one sees the
	 * schema at its latest version without them. */
	int nf;
	if (m->version == pgc__migration_count && (rc = apply_functions(conn, quoted, &nf, err)) != PGC_OK)
		goto fail;
	if ((rc = run_sql(conn, "COMMIT", err)) != PGC_OK)
		return rc;
	*did = true;
	return PGC_OK;
fail:
	(void)pgc__rollback(conn);
	return rc;
}

/* The step after the migrations, in a transaction of its own under the lock: the bookkeeping,
 * the baseline checksums, and the functions whose files changed. */
static int sync_functions(pgc_conn *conn, const char *schema, const char *quoted, pgc_error *err)
{
	int rc, version, nf;
	if ((rc = run_sql(conn, "BEGIN", err)) != PGC_OK)
		return rc;
	if ((rc = migration_lock(conn, err)) != PGC_OK)
		goto fail;
	if ((rc = read_version(conn, schema, &version, err)) != PGC_OK)
		goto fail;
	if (version != pgc__migration_count) {
		rc = pgc__err(err, PGC_ESCHEMA_VERSION, "schema %s is at version %d, not %d: another pgcoord"
		              " changed it meanwhile", schema, version, pgc__migration_count);
		goto fail;
	}
	if ((rc = ensure_books(conn, schema, quoted, err)) != PGC_OK
	    || (rc = baseline_checksums(conn, quoted, err)) != PGC_OK
	    || (rc = apply_functions(conn, quoted, &nf, err)) != PGC_OK)
		goto fail;
	return run_sql(conn, "COMMIT", err);
fail:
	(void)pgc__rollback(conn);
	return rc;
}

int pgc_schema_init(pgc_conn *conn, const char *schema, int *applied, int *version, pgc_error *err)
{
	pgc_error_clear(err);
	if (conn == NULL)
		return pgc__err(err, PGC_EUSAGE, "pgc_schema_init: conn must not be NULL");
	if (schema == NULL)
		schema = PGC_SCHEMA_DEFAULT;
	int rc = pgc__check_schema(schema, err);
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
	if (rc == PGC_OK)
		rc = sync_functions(conn, schema, quoted, err);
	PQfreemem(quoted);
	if (rc != PGC_OK)
		return rc;
	if (applied)
		*applied = count;
	if (version)
		*version = pgc__migration_count;
	return PGC_OK;
}

int pgc_schema_check(pgc_conn *conn, const char *schema, pgc_schema_drift *out, int max,
                     int *count, pgc_error *err)
{
	pgc_error_clear(err);
	if (conn == NULL || count == NULL || max < 0 || (out == NULL && max > 0))
		return pgc__err(err, PGC_EUSAGE, "pgc_schema_check: conn and count must not be NULL, nor out when max > 0");
	*count = 0;
	if (schema == NULL)
		schema = PGC_SCHEMA_DEFAULT;
	int rc = pgc__check_schema(schema, err);
	if (rc != PGC_OK)
		return rc;
	/* Only a schema whose migrations table has the column can have recorded anything. */
	bool have = false;
	if ((rc = has_books(conn, schema, false, &have, err)) != PGC_OK)
		return rc;
	if (!have)
		return PGC_OK;
	char *q = pgc__quote_ident(conn, schema, err);
	if (q == NULL)
		return PGC_EUSAGE;
	char sql[256];
	snprintf(sql, sizeof sql,
	         "SELECT version, checksum FROM %s.migrations WHERE checksum IS NOT NULL ORDER BY version", q);
	PQfreemem(q);
	PGresult *res = pgc__exec(conn, sql, 0, NULL, &rc, err);
	if (res == NULL)
		return rc;
	for (int r = 0; r < PQntuples(res); r++) {
		int v = atoi(PQgetvalue(res, r, 0));
		if (v < 1 || v > pgc__migration_count)
			continue; /* newer than this library: pgc_schema_version says so */
		const pgc_migration *m = &pgc__migrations[v - 1];
		const char *rec = PQgetvalue(res, r, 1);
		if (strcmp(rec, m->checksum) == 0)
			continue;
		if (*count < max) {
			pgc_schema_drift *d = &out[*count];
			d->version = v;
			d->name = m->name;
			d->shipped = m->checksum;
			pgc__copy_line(d->recorded, sizeof d->recorded, rec);
		}
		(*count)++;
	}
	PQclear(res);
	return PGC_OK;
}

/* ---- the least-privilege worker role -------------------------------------------------------- */

/* The statements that give a worker role its rights, "@S@" standing for the quoted schema and
 * "@R@" for the quoted role. The REVOKEs come first so that a re-run ends with exactly this set: revoking a
 * table's privileges also revokes its column privileges. */
static const char *const worker_grants[] = {
	"REVOKE ALL ON ALL TABLES IN SCHEMA @S@ FROM @R@",
	"REVOKE ALL ON ALL SEQUENCES IN SCHEMA @S@ FROM @R@",
	"REVOKE ALL ON SCHEMA @S@ FROM @R@",
	"GRANT USAGE ON SCHEMA @S@ TO @R@",
	"GRANT SELECT ON @S@.queue_settings, @S@.queues TO @R@",
	"GRANT SELECT, DELETE ON @S@.jobs TO @R@",
	("GRANT UPDATE (status, attempts, token, lease_until, worker, started_at, last_error, errors,"
	 " eff_priority, run_at, deferrals, exit_status, output) ON @S@.jobs TO @R@"),
	"GRANT INSERT, DELETE ON @S@.job_history TO @R@",
	"GRANT SELECT (id, queue, status, finished_at, result) ON @S@.job_history TO @R@",
	"GRANT SELECT, INSERT, UPDATE, DELETE ON @S@.workers TO @R@",
	"GRANT USAGE ON SEQUENCE @S@.claim_token_seq TO @R@",
	"GRANT EXECUTE ON FUNCTION @S@.push_error(jsonb, integer, text) TO @R@",
	/* Flow control (011_flow.sql, claim_flow()): claims keep their keys' counts and the
	 * rates' state, the reaper folds and tidies keys. */
	"GRANT SELECT, UPDATE, DELETE ON @S@.job_keys TO @R@",
	"GRANT SELECT, INSERT, DELETE ON @S@.job_key_done TO @R@",
	"GRANT UPDATE (rate_next, nokey_vtime) ON @S@.queues TO @R@",
	/* Dependencies and groups (012_deps.sql, job_ends_fold()): ending a job others wait for folds its end at
	 * commit, counts its group (group_fire() enqueues as the schema's owner) and releases or
	 * cancels its dependents. */
	"GRANT SELECT, INSERT, DELETE ON @S@.job_ends TO @R@",
	"GRANT SELECT, DELETE ON @S@.job_deps TO @R@",
	"GRANT SELECT, UPDATE ON @S@.job_groups TO @R@",
	"GRANT SELECT, DELETE ON @S@.job_group_jobs TO @R@",
};

static int check_role_name(const char *role, pgc_error *err)
{
	if (role == NULL || *role == '\0')
		return pgc__err(err, PGC_EUSAGE, "worker role name is empty");
	if (strlen(role) > ROLE_NAME_MAX)
		return pgc__err(err, PGC_EUSAGE, "worker role name is longer than %d bytes", ROLE_NAME_MAX);
	/* GRANT ... TO "public" means every role, whatever the quoting; "none" and "pg_" names are
	 * reserved by the server. */
	if (strcmp(role, "public") == 0 || strcmp(role, "none") == 0)
		return pgc__err(err, PGC_EUSAGE, "worker role name \"%s\" is reserved", role);
	if (strncmp(role, "pg_", 3) == 0)
		return pgc__err(err, PGC_EUSAGE, "worker role name \"%s\" is reserved: names starting with pg_ belong to the server", role);
	return PGC_OK;
}

/* Runs one grant statement, its @S@ and @R@ replaced by the quoted schema and role in a single
 * pass, so that a tag inside a quoted name is never expanded again. */
static int run_grant(pgc_conn *conn, const char *tmpl, const char *qs, const char *qr, pgc_error *err)
{
	size_t n = strlen(tmpl) + 1, ls = strlen(qs), lr = strlen(qr);
	for (const char *p = tmpl; (p = strchr(p, '@')) != NULL; p++)
		n += ls + lr; /* generous: at most one name per '@' */
	char *sql = malloc(n), *o = sql;
	if (sql == NULL)
		return pgc__err(err, PGC_ENOMEM, "out of memory");
	for (const char *p = tmpl; *p;) {
		if (strncmp(p, "@S@", 3) == 0) {
			memcpy(o, qs, ls);
			o += ls;
			p += 3;
		} else if (strncmp(p, "@R@", 3) == 0) {
			memcpy(o, qr, lr);
			o += lr;
			p += 3;
		} else {
			*o++ = *p++;
		}
	}
	*o = '\0';
	int rc = run_sql(conn, sql, err);
	free(sql);
	return rc;
}

static int grant_worker(pgc_conn *conn, const char *schema, const char *qs, const char *role,
                        const char *qr, bool login, bool *created, pgc_error *err)
{
	int rc;
	char key[32];
	snprintf(key, sizeof key, "%lld", (long long)PGC_MIGRATION_LOCK_KEY);
	const char *kp[1] = { key };
	PGresult *res = pgc__exec(conn, "SELECT pg_advisory_xact_lock($1::bigint)", 1, kp, &rc, err);
	if (res == NULL)
		return rc;
	PQclear(res);

	int version;
	if ((rc = read_version(conn, schema, &version, err)) != PGC_OK)
		return rc;
	if (version < pgc__migration_count) {
		char init[160];
		return pgc__err(err, PGC_ENOSCHEMA, "schema %s is at version %d, not %d: run %s first",
		                schema, version, pgc__migration_count, pgc__init_cmd(schema, init, sizeof init));
	}

	const char *rp[2] = { role, schema };
	res = pgc__exec(conn,
	        "SELECT r.rolsuper, r.rolname = current_user, r.rolcanlogin"
	        " FROM pg_catalog.pg_roles r WHERE r.rolname = $1", 1, rp, &rc, err);
	if (res == NULL)
		return rc;
	bool exists = PQntuples(res) == 1;
	bool super = exists && strcmp(PQgetvalue(res, 0, 0), "t") == 0;
	bool self = exists && strcmp(PQgetvalue(res, 0, 1), "t") == 0;
	bool can_login = exists && strcmp(PQgetvalue(res, 0, 2), "t") == 0;
	PQclear(res);
	if (super)
		return pgc__err(err, PGC_EUSAGE, "role %s is a superuser: a worker role must be an ordinary role", role);
	if (self)
		return pgc__err(err, PGC_EUSAGE, "role %s is the current user: a worker role must be a role of its own", role);

	const char *fmt = NULL;
	if (!exists)
		fmt = login ? "CREATE ROLE @R@ LOGIN" : "CREATE ROLE @R@ NOLOGIN";
	else if (login && !can_login)
		fmt = "ALTER ROLE @R@ LOGIN";
	if (fmt != NULL && (rc = run_grant(conn, fmt, qs, qr, err)) != PGC_OK)
		return rc;
	for (size_t i = 0; i < sizeof worker_grants / sizeof worker_grants[0]; i++)
		if ((rc = run_grant(conn, worker_grants[i], qs, qr, err)) != PGC_OK)
			return rc;

	/* A role that reaches more than we granted (through membership in the schema owner, in
	 * pg_read_all_data or pg_write_all_data, or grants by another user) would make the promise
	 * of least privilege false: refuse it rather than report success. */
	res = pgc__exec(conn,
	        "SELECT pg_catalog.has_schema_privilege($1, n.oid, 'CREATE')"
	        "  OR pg_catalog.has_table_privilege($1, m.oid, 'SELECT, INSERT, UPDATE, DELETE')"
	        "  OR pg_catalog.has_table_privilege($1, j.oid, 'INSERT')"
	        "  OR pg_catalog.has_column_privilege($1, j.oid, 'payload', 'UPDATE')"
	        " FROM pg_catalog.pg_namespace n"
	        " JOIN pg_catalog.pg_class m ON m.relnamespace = n.oid AND m.relname = 'migrations'"
	        " JOIN pg_catalog.pg_class j ON j.relnamespace = n.oid AND j.relname = 'jobs'"
	        " WHERE n.nspname = $2", 2, rp, &rc, err);
	if (res == NULL)
		return rc;
	bool more = PQntuples(res) != 1 || strcmp(PQgetvalue(res, 0, 0), "f") != 0;
	PQclear(res);
	if (more)
		return pgc__err(err, PGC_EUSAGE,
		                "role %s has more rights on schema %s than a worker needs (through a"
		                " membership or other grants): use a role of its own", role, schema);
	if (created)
		*created = !exists;
	return PGC_OK;
}

int pgc_schema_grant_worker(pgc_conn *conn, const char *schema, const char *role,
                            const pgc_worker_role_options *opts, bool *created, pgc_error *err)
{
	pgc_error_clear(err);
	if (created)
		*created = false;
	if (conn == NULL)
		return pgc__err(err, PGC_EUSAGE, "pgc_schema_grant_worker: conn must not be NULL");
	if (schema == NULL)
		schema = PGC_SCHEMA_DEFAULT;
	int rc = pgc__check_schema(schema, err);
	if (rc != PGC_OK)
		return rc;
	if ((rc = check_role_name(role, err)) != PGC_OK)
		return rc;
	if (pgc__in_transaction(conn))
		return pgc__err(err, PGC_EUSAGE, "pgc_schema_grant_worker must run outside a transaction");
	pgc_worker_role_options defaults = PGC_WORKER_ROLE_OPTIONS_INIT;
	if (opts == NULL)
		opts = &defaults;

	char *qs = pgc__quote_ident(conn, schema, err);
	if (qs == NULL)
		return PGC_EUSAGE;
	char *qr = pgc__quote_ident(conn, role, err);
	if (qr == NULL) {
		PQfreemem(qs);
		return PGC_EUSAGE;
	}
	if ((rc = run_sql(conn, "BEGIN", err)) == PGC_OK) {
		rc = grant_worker(conn, schema, qs, role, qr, opts->login, created, err);
		if (rc == PGC_OK)
			rc = run_sql(conn, "COMMIT", err);
		else
			(void)pgc__rollback(conn);
		if (rc != PGC_OK && created)
			*created = false;
	}
	PQfreemem(qs);
	PQfreemem(qr);
	return rc;
}

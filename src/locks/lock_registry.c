/* lock_registry.c - the name registry (a lock name and its key in the schema's lock_names),
 * and who holds a key (pg_locks, with when each holder took it where that is known)
 *
 * The registry makes a collision of two names on one key an error rather than a silent shared
 * lock: a named key is recorded on its first use by this session, and the answer is remembered
 * in the connection's table (pgc__lock_table: registry, verified) until the session or the
 * schema changes. The holders read pg_locks and pg_stat_activity; when a lock was taken comes
 * from the held transaction's start or from lock_holds (lock_hold.c, PGC_LOCK_RECORD).
 *
 * Relies on lock.c's invariants: a lost session resets the table's registry cache (lock.c's
 * table_lost), so a new session checks again; and on the key checks of lock.c
 * (pgc__lock_check_key) before any key reaches a statement. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "locks_int.h"

/* ---- the name registry ------------------------------------------------------------------ */

/* Whether schema $1 has table $2 (the registry, lock_holds): read from the catalog. */
const char pgc__lock_sql_table_exists[] =
	"SELECT EXISTS (SELECT 1 FROM pg_catalog.pg_class c"
	" JOIN pg_catalog.pg_namespace n ON n.oid = c.relnamespace"
	" WHERE n.nspname = $1 AND c.relname = $2)";

/* SQL lock_name_register(), one row always: whether this call recorded the name, and what the
 * registry held for this key and for this name before it. */
static const char sql_registry_record[] =
	"SELECT inserted, recorded_name, recorded_key::text FROM @S@.lock_name_register($1::bigint, $2)";

int pgc__lock_registry_check(pgc_conn *conn, pgc__lock_table *t, const pgc_key *key, unsigned flags,
                             const char *schema, pgc_error *err)
{
	if (key->name[0] == '\0' || (flags & PGC_LOCK_NO_REGISTRY))
		return PGC_OK;
	if (schema == NULL)
		schema = PGC_SCHEMA_DEFAULT;
	int rc = pgc__check_schema(schema, err);
	if (rc != PGC_OK)
		return rc;
	if (strcmp(schema, t->registry_schema) != 0) {
		snprintf(t->registry_schema, sizeof t->registry_schema, "%s", schema);
		t->registry = 0;
		t->nverified = 0;
	}
	for (size_t i = 0; i < t->nverified; i++)
		if (t->verified[i] == key->id)
			return PGC_OK;
	if (t->registry == 0) {
		const char *p[2] = { schema, "lock_names" };
		PGresult *r = pgc__exec_cached(conn, pgc__lock_sql_table_exists, 2, p, &rc, err);
		bool present;
		if (r == NULL || (rc = pgc__lock_answer_bool(r, &present, err)) != PGC_OK)
			return rc;
		t->registry = present ? 1 : -1;
	}
	if (t->registry < 0)
		return PGC_OK;

	char *q = pgc__quote_ident(conn, schema, err);
	if (q == NULL)
		return PGC_EUSAGE;
	char *sql = pgc__sql_schema(sql_registry_record, q);
	PQfreemem(q);
	if (sql == NULL)
		return pgc__err(err, PGC_ENOMEM, "out of memory");
	char id[24];
	snprintf(id, sizeof id, "%lld", (long long)key->id);
	const char *p[2] = { id, key->name };
	/* In the caller's transaction a failure must cost only this statement. */
	pgc__call call = PGC__CALL_INIT;
	call.flags = PGC__CACHED | PGC__SAVEPOINT;
	rc = PGC_OK;
	for (int attempt = 0;; attempt++) {
		PGresult *r = pgc__query(conn, sql, 2, p, &call, &rc, err);
		if (r == NULL)
			break;
		if (PQntuples(r) != 1 || PQnfields(r) != 3) {
			PQclear(r);
			rc = pgc__err(err, PGC_EINTERNAL, "unexpected answer from the server recording lock name \"%s\"", key->name);
			break;
		}
		bool inserted = strcmp(PQgetvalue(r, 0, 0), "t") == 0;
		bool has_name = !PQgetisnull(r, 0, 1), has_key = !PQgetisnull(r, 0, 2);
		if (!inserted && has_name && strcmp(PQgetvalue(r, 0, 1), key->name) != 0)
			rc = pgc__err(err, PGC_ECOLLISION,
			              "lock names \"%s\" and \"%s\" both map to key %s (recorded in %s.lock_names); rename one",
			              key->name, PQgetvalue(r, 0, 1), id, schema);
		else if (!inserted && has_key && strcmp(PQgetvalue(r, 0, 2), id) != 0)
			rc = pgc__err(err, PGC_ECOLLISION,
			              "lock name \"%s\" is recorded with key %s in %s.lock_names, but hashes to %s",
			              key->name, PQgetvalue(r, 0, 2), schema, id);
		bool again = !inserted && !has_name && !has_key;
		PQclear(r);
		/* Nothing inserted and nothing visible: another session inserted it concurrently
		 * and committed after our snapshot. The next statement sees it. */
		if (rc != PGC_OK || !again)
			break;
		if (attempt == 2) {
			rc = pgc__err(err, PGC_EINTERNAL, "cannot record lock name \"%s\" in %s.lock_names", key->name, schema);
			break;
		}
	}
	free(sql);
	if (rc == PGC_OK) {
		if (t->nverified == PGC__LOCK_VERIFIED_MAX)
			t->nverified = 0;
		t->verified[t->nverified++] = key->id;
	}
	return rc;
}

int pgc_key_lookup_name(pgc_conn *conn, const char *schema, pgc_key *key, pgc_error *err)
{
	pgc_error_clear(err);
	if (conn == NULL || key == NULL)
		return pgc__err(err, PGC_EUSAGE, "pgc_key_lookup_name: conn and key must not be NULL");
	int rc = pgc__lock_check_key(key, err);
	if (rc != PGC_OK)
		return rc;
	if (schema == NULL)
		schema = PGC_SCHEMA_DEFAULT;
	if ((rc = pgc__check_schema(schema, err)) != PGC_OK)
		return rc;
	key->name[0] = '\0';
	if (key->kind != PGC_KEY_INT64)
		return PGC_OK;
	const char *p[2] = { schema, "lock_names" };
	PGresult *r = pgc__exec(conn, pgc__lock_sql_table_exists, 2, p, &rc, err);
	bool present;
	if (r == NULL || (rc = pgc__lock_answer_bool(r, &present, err)) != PGC_OK)
		return rc;
	if (!present)
		return PGC_OK;
	char *q = pgc__quote_ident(conn, schema, err);
	if (q == NULL)
		return PGC_EUSAGE;
	char *sql = pgc__sql_schema("SELECT name FROM @S@.lock_names WHERE key = $1::bigint", q);
	PQfreemem(q);
	if (sql == NULL)
		return pgc__err(err, PGC_ENOMEM, "out of memory");
	char id[24];
	snprintf(id, sizeof id, "%lld", (long long)key->id);
	const char *v[1] = { id };
	r = pgc__exec(conn, sql, 1, v, &rc, err);
	free(sql);
	if (r == NULL)
		return rc;
	if (PQntuples(r) == 1)
		snprintf(key->name, sizeof key->name, "%s", PQgetvalue(r, 0, 0));
	PQclear(r);
	return PGC_OK;
}

/* ---- who holds a key -------------------------------------------------------------------- */

/* Timestamps in ISO 8601 whatever the session's DateStyle. When a lock was taken is known for
 * pgcoord's held transactions (behind a transaction-mode pooler): their transaction starts
 * just before the lock; and for session locks taken with PGC_LOCK_RECORD, from the schema's
 * lock_holds (%3$s: the join, or nothing). pg_locks does not say it otherwise. */
#define HOLDERS_TS(x) "coalesce(to_json(" x ")#>>'{}', '')"
static const char holders_sql[] =
	"SELECT l.pid, coalesce(a.application_name, ''), coalesce(host(a.client_addr), ''),"
	" l.mode, l.granted, " HOLDERS_TS("%1$s") ", coalesce(a.state, ''),"
	" " HOLDERS_TS("a.state_change") ", " HOLDERS_TS("a.backend_start") ","
	" l.pid = pg_backend_pid(),"
	" " HOLDERS_TS("CASE WHEN l.granted THEN coalesce(%2$s, CASE WHEN a.application_name = '"
	               PGC_LOCK_HOLDER_APPLICATION "' THEN a.xact_start END) END")
	" FROM pg_catalog.pg_locks l LEFT JOIN pg_catalog.pg_stat_activity a ON a.pid = l.pid%3$s"
	" WHERE l.locktype = 'advisory'"
	" AND l.database = (SELECT oid FROM pg_catalog.pg_database WHERE datname = current_database())"
	" AND l.classid = $1::oid AND l.objid = $2::oid AND l.objsubid = $3::int2"
	" ORDER BY l.granted DESC, %1$s NULLS FIRST, l.pid, l.mode";
static const char holders_join[] =
	" LEFT JOIN @S@.lock_holds lh ON l.granted AND lh.pid = l.pid"
	" AND lh.backend_start = a.backend_start AND lh.classid = l.classid AND lh.objid = l.objid"
	" AND lh.objsubid = l.objsubid";

/* quoted: the schema whose lock_holds to join, or NULL. */
static int holders(pgc_conn *conn, const pgc_key *key, const char *quoted, pgc_lock_holder **out,
                   size_t *n, pgc_error *err)
{
	char c[16], o[16], sub[8];
	const char *p[3];
	pgc__lock_identity_params(key, c, o, sub, p);
	char *join = quoted != NULL ? pgc__sql_schema(holders_join, quoted) : NULL;
	if (quoted != NULL && join == NULL)
		return pgc__err(err, PGC_ENOMEM, "out of memory");
	char sql[4096];
	snprintf(sql, sizeof sql, holders_sql,
	         pgc_conn_server_version(conn) >= 140000 ? "l.waitstart" : "NULL::timestamptz",
	         join != NULL ? "lh.acquired_at" : "NULL::timestamptz", join != NULL ? join : "");
	free(join);
	int rc;
	PGresult *r = pgc__exec(conn, sql, 3, p, &rc, err);
	if (r == NULL)
		return rc;
	int rows = PQntuples(r);
	if (rows > 0) {
		pgc_lock_holder *h = calloc((size_t)rows, sizeof *h);
		if (h == NULL) {
			PQclear(r);
			return pgc__err(err, PGC_ENOMEM, "out of memory");
		}
		for (int i = 0; i < rows; i++) {
			h[i].pid = atoi(PQgetvalue(r, i, 0));
			snprintf(h[i].application_name, sizeof h[i].application_name, "%s", PQgetvalue(r, i, 1));
			snprintf(h[i].client_addr, sizeof h[i].client_addr, "%s", PQgetvalue(r, i, 2));
			h[i].shared = strcmp(PQgetvalue(r, i, 3), "ShareLock") == 0;
			h[i].granted = strcmp(PQgetvalue(r, i, 4), "t") == 0;
			snprintf(h[i].wait_start, sizeof h[i].wait_start, "%s", PQgetvalue(r, i, 5));
			snprintf(h[i].state, sizeof h[i].state, "%s", PQgetvalue(r, i, 6));
			snprintf(h[i].state_change, sizeof h[i].state_change, "%s", PQgetvalue(r, i, 7));
			snprintf(h[i].backend_start, sizeof h[i].backend_start, "%s", PQgetvalue(r, i, 8));
			h[i].is_self = strcmp(PQgetvalue(r, i, 9), "t") == 0;
			snprintf(h[i].acquired_at, sizeof h[i].acquired_at, "%s", PQgetvalue(r, i, 10));
		}
		*out = h;
		*n = (size_t)rows;
	}
	PQclear(r);
	return PGC_OK;
}

static int holders_args(const char *fn, pgc_conn *conn, const pgc_key *key, pgc_lock_holder **out,
                        size_t *n, pgc_error *err)
{
	if (conn == NULL || key == NULL || out == NULL || n == NULL)
		return pgc__err(err, PGC_EUSAGE, "%s: conn, key, out and n must not be NULL", fn);
	*out = NULL;
	*n = 0;
	int rc = pgc__lock_check_key(key, err);
	if (rc != PGC_OK)
		return rc;
	uint32_t classid, objid;
	int sub;
	if (pgc_key_to_pg_locks(key, &classid, &objid, &sub) != PGC_OK)
		return pgc__err(err, PGC_EUSAGE, "unknown key kind");
	return PGC_OK;
}

int pgc_lock_holders(pgc_conn *conn, const pgc_key *key, pgc_lock_holder **out, size_t *n,
                     pgc_error *err)
{
	pgc_error_clear(err);
	int rc = holders_args("pgc_lock_holders", conn, key, out, n, err);
	return rc != PGC_OK ? rc : holders(conn, key, NULL, out, n, err);
}

int pgc_lock_holders_recorded(pgc_conn *conn, const pgc_key *key, const char *schema,
                              pgc_lock_holder **out, size_t *n, pgc_error *err)
{
	pgc_error_clear(err);
	int rc = holders_args("pgc_lock_holders_recorded", conn, key, out, n, err);
	if (rc != PGC_OK)
		return rc;
	char *q;
	bool present;
	rc = pgc__lock_holds_present(conn, NULL, schema ? schema : PGC_SCHEMA_DEFAULT, &q, &present, err);
	if (rc == PGC_OK)
		rc = holders(conn, key, present ? q : NULL, out, n, err);
	PQfreemem(q);
	return rc;
}

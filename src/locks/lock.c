/* lock.c - session and transaction advisory locks, their deadlines, and lock-loss detection
 *
 * Invariants:
 * - A pgc_lock handle belongs to one pgc_conn and is released through that connection's
 *   session only; every unlock's boolean is read, and false is PGC_ENOTHELD.
 * - The connection's table (attached to it, see conn_int.h) counts acquisitions per (key,
 *   mode) exactly as the server does: it changes only on a definite answer from the server, or
 *   when the session is known gone (the layer tells the table, which marks every handle lost).
 * - A waiting acquire runs under its own lock_timeout, with the server's statement_timeout off
 *   for that one statement (whatever the role or database set: the caller's deadline is the
 *   one that counts) and a client-side backstop. Any error ends with a look at pg_locks for
 *   this session, because the server can grant the lock in the same instant as the timeout or
 *   a cancel fires (the lock then survives the error). "Timed out" always means nothing held
 *   and nothing queued.
 * - A session lock is never taken through a transaction-mode pooler, where it would be taken
 *   on a server session the client does not keep: the first session lock of a connection asks
 *   the pooler probe. Through such a pooler a lock can instead be held as a transaction lock
 *   in a transaction of its own (PGC_LOCK_HOLD_XACT): the pooler keeps one server session for
 *   the transaction's whole life, the heartbeat runs in it, and the release is its COMMIT. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "locks_int.h"

#define WAIT_BACKSTOP_MS 5000       /* client deadline beyond the server's lock_timeout */
#define CLOSE_UNLOCK_MS 2000        /* pgc_conn_close: bound on the final unlock */
#define STATEMENT_DEADLINE_MS 30000 /* bound on a lock statement that does not wait */
#define VERIFIED_MAX 64             /* named keys verified against the registry, per connection */

unsigned long pgc__lock_race_granted;

struct pgc_lock {
	pgc_conn *conn;
	pgc_key key;
	bool shared;
	bool hold;     /* PGC_LOCK_HOLD_XACT: a transaction lock held by an open transaction */
	bool lost;     /* the session ended while this acquisition was held */
	char *recorded; /* PGC_LOCK_RECORD: the quoted schema whose lock_holds has its row */
	pgc_lock *prev, *next;
};

typedef struct lock_table {
	pgc_held_lock *held;
	size_t nheld, capheld;
	pgc_lock *handles;
	pgc_lock *hold;         /* the held transaction's lock, or NULL */
	int registry;           /* 0 unknown, 1 present, -1 absent, for registry_schema */
	char registry_schema[64];
	int holds;              /* the same for lock_holds in holds_schema (PGC_LOCK_RECORD) */
	char holds_schema[64];
	int64_t verified[VERIFIED_MAX];
	size_t nverified;
	bool pooler_checked;    /* session locks were found safe on this session */
	/* What the last loss took, until pgc_conn_check() reports it once. */
	size_t lost_count;
	char lost_first[PGC_KEY_NAME_MAX + 64];
} lock_table;

/* ---- SQL: constant texts, indexed [pair][shared] ---------------------------------------- */

static const char *const sql_try[2][2] = {
	{ "SELECT pg_try_advisory_lock($1::bigint)", "SELECT pg_try_advisory_lock_shared($1::bigint)" },
	{ "SELECT pg_try_advisory_lock($1::int, $2::int)", "SELECT pg_try_advisory_lock_shared($1::int, $2::int)" },
};
static const char *const sql_unlock[2][2] = {
	{ "SELECT pg_advisory_unlock($1::bigint)", "SELECT pg_advisory_unlock_shared($1::bigint)" },
	{ "SELECT pg_advisory_unlock($1::int, $2::int)", "SELECT pg_advisory_unlock_shared($1::int, $2::int)" },
};
static const char *const sql_xact_try[2][2] = {
	{ "SELECT pg_try_advisory_xact_lock($1::bigint)", "SELECT pg_try_advisory_xact_lock_shared($1::bigint)" },
	{ "SELECT pg_try_advisory_xact_lock($1::int, $2::int)", "SELECT pg_try_advisory_xact_lock_shared($1::int, $2::int)" },
};
static const char *const sql_wait[2][2] = {
	{ "SELECT pg_advisory_lock($1::bigint)", "SELECT pg_advisory_lock_shared($1::bigint)" },
	{ "SELECT pg_advisory_lock($1::int, $2::int)", "SELECT pg_advisory_lock_shared($1::int, $2::int)" },
};
static const char *const sql_xact_wait[2][2] = {
	{ "SELECT pg_advisory_xact_lock($1::bigint)", "SELECT pg_advisory_xact_lock_shared($1::bigint)" },
	{ "SELECT pg_advisory_xact_lock($1::int, $2::int)", "SELECT pg_advisory_xact_lock_shared($1::int, $2::int)" },
};

static const char sql_granted[] =
	"SELECT EXISTS (SELECT 1 FROM pg_catalog.pg_locks WHERE locktype = 'advisory'"
	" AND pid = pg_backend_pid() AND granted"
	" AND database = (SELECT oid FROM pg_catalog.pg_database WHERE datname = current_database())"
	" AND classid = $1::oid AND objid = $2::oid AND objsubid = $3::int2 AND mode = $4)";

/* The held transaction: read committed whatever the session's default (so that it holds no
 * snapshot between statements), never ended by the idle-in-transaction timeout, and named so
 * that doctor, blockers and activity know it for what it is. */
static const char sql_hold_begin[] = "BEGIN ISOLATION LEVEL READ COMMITTED";
static const char sql_hold_settings[] =
	"SELECT pg_catalog.set_config('idle_in_transaction_session_timeout', '0', true),"
	" pg_catalog.set_config('application_name', $1, true)";
static const char sql_hold_settings_17[] =
	"SELECT pg_catalog.set_config('idle_in_transaction_session_timeout', '0', true),"
	" pg_catalog.set_config('transaction_timeout', '0', true),"
	" pg_catalog.set_config('application_name', $1, true)";

/* ---- the per-connection table ----------------------------------------------------------- */

static const char *describe(const pgc_key *key, char *buf, size_t n)
{
	if (pgc_key_describe(key, buf, n) < 0)
		snprintf(buf, n, "?");
	return buf;
}

static size_t held_total(const lock_table *t)
{
	size_t n = 0;
	for (size_t i = 0; t && i < t->nheld; i++)
		n += (size_t)t->held[i].count;
	return n;
}

/* The session is gone: the server released everything. Handles stay valid, marked lost. */
static void table_lost(pgc_conn *c, void *state, const char *reason)
{
	(void)c;
	(void)reason;
	lock_table *t = state;
	t->lost_count = held_total(t);
	if (t->nheld > 0)
		describe(&t->held[0].key, t->lost_first, sizeof t->lost_first);
	t->nheld = 0;
	t->hold = NULL;
	t->registry = 0;
	t->holds = 0;
	t->nverified = 0;
	t->pooler_checked = false;
	for (pgc_lock *l = t->handles; l; l = l->next)
		l->lost = true;
}

/* pgc_conn_check()'s report of a loss that took locks, once. */
static int table_loss(const void *state, const char *reason, pgc_error *err)
{
	lock_table *t = (lock_table *)state;
	size_t had = t->lost_count;
	if (had == 0)
		return 0;
	t->lost_count = 0;
	if (had == 1)
		return pgc__err(err, PGC_ELOCKLOST, "lock %s lost: %s", t->lost_first, reason);
	return pgc__err(err, PGC_ELOCKLOST, "%zu locks lost (%s, ...): %s", had, t->lost_first, reason);
}

static bool table_holds(const void *state)
{
	return held_total(state) > 0;
}

static void table_free(lock_table *t)
{
	while (t->handles) {
		pgc_lock *l = t->handles;
		t->handles = l->next;
		free(l->recorded);
		free(l);
	}
	free(t->held);
	free(t);
}

/* The handle closes: release what is still held now rather than when the backend gets round
 * to noticing the end of the session, so the next holder does not wait for it. Bounded: a
 * dead network must not hang a close. */
static int release_all(pgc_conn *c, lock_table *t, pgc_error *err)
{
	if (t->nheld == 0 || !pgc__conn_ok(c) || pgc__busy(c))
		return PGC_OK;
	if (t->hold != NULL) {
		/* Ending the held transaction is what releases its lock. */
		(void)pgc__rollback(c);
		return PGC_OK;
	}
	if (pgc__tx_status(c) == PQTRANS_INERROR)
		(void)pgc__rollback(c);
	pgc__call call = pgc__bound(CLOSE_UNLOCK_MS, -1);
	call.on_deadline = PGC__DROP;
	int rc;
	PQclear(pgc__query(c, "SELECT pg_advisory_unlock_all()", 0, NULL, &call, &rc, err));
	return rc;
}

static void table_close(pgc_conn *c, void *state)
{
	lock_table *t = state;
	(void)release_all(c, t, NULL);
	table_free(t);
}

static const pgc__attach_ops lock_ops = {
	"locks", table_lost, table_close, table_holds, table_loss,
};

static lock_table *table_of(pgc_conn *conn, pgc_error *err)
{
	lock_table *t = pgc__attached(conn, &lock_ops);
	if (t != NULL)
		return t;
	t = calloc(1, sizeof *t);
	if (t == NULL) {
		pgc__err(err, PGC_ENOMEM, "out of memory");
		return NULL;
	}
	if (pgc__attach(conn, &lock_ops, t, err) != PGC_OK) {
		free(t);
		return NULL;
	}
	return t;
}

static pgc_held_lock *held_find(lock_table *t, const pgc_key *key, bool shared)
{
	for (size_t i = 0; i < t->nheld; i++)
		if (t->held[i].shared == shared && pgc_key_equal(&t->held[i].key, key))
			return &t->held[i];
	return NULL;
}

static int held_count(lock_table *t, const pgc_key *key, bool shared)
{
	pgc_held_lock *h = held_find(t, key, shared);
	return h ? h->count : 0;
}

/* Records one more acquisition and makes its handle. */
static int held_add(pgc_conn *conn, lock_table *t, const pgc_key *key, bool shared, pgc_lock **out,
                    pgc_error *err)
{
	pgc_lock *l = calloc(1, sizeof *l);
	if (l == NULL)
		return pgc__err(err, PGC_ENOMEM, "out of memory");
	pgc_held_lock *h = held_find(t, key, shared);
	if (h == NULL) {
		if (t->nheld == t->capheld) {
			size_t cap = t->capheld ? t->capheld * 2 : 8;
			pgc_held_lock *n = realloc(t->held, cap * sizeof *n);
			if (n == NULL) {
				free(l);
				return pgc__err(err, PGC_ENOMEM, "out of memory");
			}
			t->held = n;
			t->capheld = cap;
		}
		h = &t->held[t->nheld++];
		h->key = *key;
		h->shared = shared;
		h->count = 0;
	}
	h->count++;
	l->conn = conn;
	l->key = *key;
	l->shared = shared;
	l->next = t->handles;
	if (t->handles)
		t->handles->prev = l;
	t->handles = l;
	*out = l;
	return PGC_OK;
}

static void held_dec(lock_table *t, const pgc_key *key, bool shared)
{
	pgc_held_lock *h = held_find(t, key, shared);
	if (h == NULL)
		return;
	if (--h->count <= 0) {
		size_t i = (size_t)(h - t->held);
		memmove(&t->held[i], &t->held[i + 1], (t->nheld - i - 1) * sizeof *h);
		t->nheld--;
	}
}

static void handle_unlink(lock_table *t, pgc_lock *l)
{
	if (l->prev)
		l->prev->next = l->next;
	else if (t->handles == l)
		t->handles = l->next;
	if (l->next)
		l->next->prev = l->prev;
	l->prev = l->next = NULL;
}

/* ---- parameters ------------------------------------------------------------------------- */

typedef struct key_params {
	char a[24], b[24];
	const char *v[2];
	int n;
} key_params;

static void key_params_set(key_params *p, const pgc_key *key)
{
	if (key->kind == PGC_KEY_INT64) {
		snprintf(p->a, sizeof p->a, "%lld", (long long)key->id);
		p->n = 1;
	} else {
		snprintf(p->a, sizeof p->a, "%ld", (long)key->key1);
		snprintf(p->b, sizeof p->b, "%ld", (long)key->key2);
		p->n = 2;
	}
	p->v[0] = p->a;
	p->v[1] = p->b;
}

static int check_key(const pgc_key *key, pgc_error *err)
{
	if (key->kind != PGC_KEY_INT64 && key->kind != PGC_KEY_PAIR)
		return pgc__err(err, PGC_EUSAGE, "unknown key kind %d", (int)key->kind);
	if (key->kind == PGC_KEY_PAIR && key->name[0] != '\0')
		return pgc__err(err, PGC_EUSAGE, "a named key must be a bigint key (pgc_key_from_name)");
	if (memchr(key->name, '\0', sizeof key->name) == NULL)
		return pgc__err(err, PGC_EUSAGE, "key name is not NUL-terminated");
	/* A name set by hand rather than by pgc_key_from_name goes to the registry too. */
	if (key->name[0] != '\0')
		return pgc_name_check("lock name", key->name, PGC_KEY_NAME_MAX, err);
	return PGC_OK;
}

/* ---- statements ------------------------------------------------------------------------- */

/* The one boolean a lock statement answers, or PGC_EINTERNAL when the answer has another
 * shape (never trust a missing value for "true"). */
static int answer_bool(PGresult *r, bool *out, pgc_error *err)
{
	if (PQntuples(r) != 1 || PQnfields(r) < 1 || PQgetisnull(r, 0, 0)) {
		int rows = PQntuples(r);
		PQclear(r);
		return pgc__err(err, PGC_EINTERNAL, "unexpected answer from the server: %d rows where one boolean was due", rows);
	}
	*out = strcmp(PQgetvalue(r, 0, 0), "t") == 0;
	PQclear(r);
	return PGC_OK;
}

/* Runs one of the lock statements that never wait (try-lock, unlock) as a prepared statement
 * of the session. Each is bounded by STATEMENT_DEADLINE_MS: a server that does not answer by
 * then is treated as gone, and the session is closed (which is also what releases its locks
 * on the server). Returns the result, or NULL with *rc and err set. */
static PGresult *exec_quick(pgc_conn *conn, const char *sql, const key_params *p, int *rc, pgc_error *err)
{
	pgc__call call = pgc__bound(STATEMENT_DEADLINE_MS, -1);
	call.on_deadline = PGC__DROP;
	call.flags = PGC__CACHED;
	return pgc__query(conn, sql, p->n, p->v, &call, rc, err);
}

/* The pg_locks identity of key as three parameters, in the caller's buffers. */
static void identity_params(const pgc_key *key, char c[16], char o[16], char s[8], const char *p[3])
{
	uint32_t classid = 0, objid = 0;
	int sub = 0;
	if (pgc_key_to_pg_locks(key, &classid, &objid, &sub) != PGC_OK) {
		/* Every caller has checked the key: the zeros match no lock. */
	}
	snprintf(c, 16, "%u", classid);
	snprintf(o, 16, "%u", objid);
	snprintf(s, 8, "%d", sub);
	p[0] = c;
	p[1] = o;
	p[2] = s;
}

/* Does this session hold key in this mode right now, by pg_locks? */
static int granted_now(pgc_conn *conn, const pgc_key *key, bool shared, bool *out, pgc_error *err)
{
	char c[16], o[16], s[8];
	const char *p[4];
	identity_params(key, c, o, s, p);
	p[3] = shared ? "ShareLock" : "ExclusiveLock";
	int rc;
	PGresult *r = pgc__exec_cached(conn, sql_granted, 4, p, &rc, err);
	if (r == NULL)
		return rc;
	return answer_bool(r, out, err);
}

/* ---- the name registry ------------------------------------------------------------------ */

/* Whether schema $1 has table $2 (the registry, lock_holds): read from the catalog. */
static const char sql_table_exists[] =
	"SELECT EXISTS (SELECT 1 FROM pg_catalog.pg_class c"
	" JOIN pg_catalog.pg_namespace n ON n.oid = c.relnamespace"
	" WHERE n.nspname = $1 AND c.relname = $2)";

/* One row always: whether this statement inserted the name, and what the registry held for
 * this key and for this name before it (the CTE's insert is not visible to the subqueries).
 * key and name are both unique, so each subquery finds at most one row. */
static const char sql_registry_record[] =
	"WITH ins AS (INSERT INTO @S@.lock_names (key, name) VALUES ($1::bigint, $2)"
	" ON CONFLICT DO NOTHING RETURNING key)"
	" SELECT (SELECT count(*) FROM ins),"
	" (SELECT name FROM @S@.lock_names WHERE key = $1::bigint),"
	" (SELECT key::text FROM @S@.lock_names WHERE name = $2)";

static int registry_check(pgc_conn *conn, lock_table *t, const pgc_key *key, unsigned flags,
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
		PGresult *r = pgc__exec_cached(conn, sql_table_exists, 2, p, &rc, err);
		bool present;
		if (r == NULL || (rc = answer_bool(r, &present, err)) != PGC_OK)
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
		bool inserted = strcmp(PQgetvalue(r, 0, 0), "1") == 0;
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
		if (t->nverified == VERIFIED_MAX)
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
	int rc = check_key(key, err);
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
	PGresult *r = pgc__exec(conn, sql_table_exists, 2, p, &rc, err);
	bool present;
	if (r == NULL || (rc = answer_bool(r, &present, err)) != PGC_OK)
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

/* ---- acquiring -------------------------------------------------------------------------- */

#define KNOWN_FLAGS                                                                                \
	(PGC_LOCK_SHARED | PGC_LOCK_TRY | PGC_LOCK_NO_REGISTRY | PGC_LOCK_HOLD_XACT | PGC_LOCK_AUTO_SCOPE | \
	 PGC_LOCK_RECORD)
#define TIMEOUT_MAX_MS INT64_C(2147483647) /* lock_timeout's limit, about 24.8 days */

static int check_args(pgc_conn *conn, const pgc_key *key, unsigned flags, int64_t timeout_ms,
                      const char *fn, pgc_error *err)
{
	if (conn == NULL || key == NULL)
		return pgc__err(err, PGC_EUSAGE, "%s: conn and key must not be NULL", fn);
	if (flags & ~KNOWN_FLAGS)
		return pgc__err(err, PGC_EUSAGE, "%s: unknown flags 0x%x", fn, flags & ~KNOWN_FLAGS);
	if ((flags & PGC_LOCK_HOLD_XACT) && (flags & PGC_LOCK_AUTO_SCOPE))
		return pgc__err(err, PGC_EUSAGE, "%s: give PGC_LOCK_HOLD_XACT or PGC_LOCK_AUTO_SCOPE, not both", fn);
	if (timeout_ms < PGC_WAIT_FOREVER)
		return pgc__err(err, PGC_EUSAGE, "%s: timeout_ms must be >= 0, or PGC_WAIT_FOREVER (-1)", fn);
	if (timeout_ms > TIMEOUT_MAX_MS)
		return pgc__err(err, PGC_EUSAGE, "%s: timeout_ms is longer than %lld ms; use PGC_WAIT_FOREVER", fn,
		                (long long)TIMEOUT_MAX_MS);
	int rc = check_key(key, err);
	if (rc != PGC_OK)
		return rc;
	if (!pgc__conn_ok(conn))
		return pgc__err(err, PGC_ECONNLOST, "connection to the server lost");
	PGTransactionStatusType st = pgc__tx_status(conn);
	if (pgc__busy(conn) || st == PQTRANS_ACTIVE)
		return pgc__err(err, PGC_EUSAGE, "%s: the connection is busy with another command", fn);
	if (st == PQTRANS_INERROR)
		return pgc__err(err, PGC_EUSAGE,
		                "%s: the current transaction is aborted; roll it back before taking a lock", fn);
	return PGC_OK;
}

/* The waiting form, shared by session and transaction locks. For a session lock, *granted
 * says whether the lock is held on return (also after a timeout that lost the race). */
static int wait_lock(pgc_conn *conn, lock_table *t, const pgc_key *key, bool shared, bool xact,
                     int64_t timeout_ms, int cancel_fd, bool *granted, pgc_error *err)
{
	int pair = key->kind == PGC_KEY_PAIR;
	const char *sql = xact ? sql_xact_wait[pair][shared] : sql_wait[pair][shared];
	int before = xact ? 0 : held_count(t, key, shared);
	*granted = false;
	key_params kp;
	key_params_set(&kp, key);
	/* The caller's deadline is the lock_timeout of this one statement; statement_timeout is
	 * off for it, so that neither the role's nor the database's settings cut the wait short.
	 * In a transaction block it runs under a savepoint: a timeout costs nothing else. */
	pgc__call call = pgc__bound(timeout_ms == PGC_WAIT_FOREVER ? PGC_WAIT_FOREVER : timeout_ms + WAIT_BACKSTOP_MS,
	                            cancel_fd);
	call.flags = PGC__CACHED | PGC__SAVEPOINT;
	call.statement_timeout_ms = 0;
	call.lock_timeout_ms = timeout_ms == PGC_WAIT_FOREVER ? 0 : timeout_ms;
	pgc_error serr;
	int rc;
	PGresult *res = pgc__query(conn, sql, kp.n, kp.v, &call, &rc, &serr);
	if (res != NULL) {
		PQclear(res);
		/* A session lock is held from here on: the caller records it. */
		*granted = true;
		return PGC_OK;
	}
	if (!pgc__conn_ok(conn)) {
		if (err != NULL)
			*err = serr;
		return rc;
	}
	if (!xact && before == 0) {
		bool g = false;
		int grc = granted_now(conn, key, shared, &g, err);
		if (grc != PGC_OK)
			return grc;
		if (g) {
			/* Granted in the same instant as the error: the lock is ours. */
			__atomic_add_fetch(&pgc__lock_race_granted, 1, __ATOMIC_RELAXED);
			*granted = true;
			return PGC_OK;
		}
	}
	char d[PGC_KEY_NAME_MAX + 64];
	describe(key, d, sizeof d);
	if (strcmp(serr.sqlstate, "55P03") == 0 || rc == PGC_ETIMEDOUT)
		return pgc__err(err, PGC_ETIMEDOUT, "timed out after %lld ms waiting for lock %s",
		                (long long)timeout_ms, d);
	if (rc == PGC_EINTR)
		return pgc__err(err, PGC_EINTR, "interrupted while waiting for lock %s", d);
	if (err != NULL) {
		*err = serr;
		pgc__err_prefix(err, "waiting for lock %s", d);
	}
	return rc;
}

/* Session locks are never taken where the session is not kept: asks the pooler probe once per
 * session. *hold is set when the lock is to be held in a transaction instead. */
static int choose_scope(pgc_conn *conn, lock_table *t, unsigned flags, bool *hold, pgc_error *err)
{
	*hold = (flags & PGC_LOCK_HOLD_XACT) != 0;
	if (*hold || t->pooler_checked)
		return PGC_OK;
	pgc_pooler_info p;
	int rc = pgc_conn_pooler(conn, 0, 0, &p, err);
	if (rc != PGC_OK)
		return rc;
	if (p.mode == PGC_POOLER_STATEMENT)
		return pgc__err(err, PGC_EPOOLER,
		                "a statement-mode pooler is in between (%s): no advisory lock can be kept through it;"
		                " connect straight to PostgreSQL, or through a pool in session or transaction mode",
		                p.why);
	if (p.mode == PGC_POOLER_TRANSACTION || p.mode == PGC_POOLER_UNKNOWN) {
		if (flags & PGC_LOCK_AUTO_SCOPE) {
			*hold = true;
			return PGC_OK;
		}
		if (p.mode == PGC_POOLER_TRANSACTION)
			return pgc__err(err, PGC_EPOOLER,
			                "a transaction-mode pooler is in between (%s): a session lock would be taken on a"
			                " server session this client does not keep, and could neither be trusted nor"
			                " released; connect straight to PostgreSQL or through a pool in session mode, or"
			                " hold the lock in a transaction (PGC_LOCK_HOLD_XACT, as pgcoord run does on its own)",
			                p.why);
		return pgc__err(err, PGC_EPOOLER,
		                "cannot tell whether the pooler in between keeps this session (%s): call"
		                " pgc_conn_pooler() outside a transaction first, or hold the lock in a transaction"
		                " (PGC_LOCK_HOLD_XACT)", p.why);
	}
	t->pooler_checked = true;
	return PGC_OK;
}

/* PGC_LOCK_HOLD_XACT: a transaction of its own that holds a transaction lock until release. */
static int hold_acquire(pgc_conn *conn, lock_table *t, const pgc_key *key, const pgc_lock_options *opts,
                        pgc_lock **out, pgc_error *err)
{
	if (t->hold != NULL)
		return pgc__err(err, PGC_EUSAGE, "pgc_lock_acquire: this connection already holds a lock in a transaction of its own");
	if (pgc__in_transaction(conn))
		return pgc__err(err, PGC_EUSAGE,
		                "pgc_lock_acquire: PGC_LOCK_HOLD_XACT needs a connection outside a transaction (it opens one)");
	bool shared = (opts->flags & PGC_LOCK_SHARED) != 0;
	int pair = key->kind == PGC_KEY_PAIR;
	const char *app = PGC_LOCK_HOLDER_APPLICATION;
	const char *v[1] = { app };
	pgc__batch *b = pgc__batch_new(conn);
	if (b == NULL)
		return pgc__err(err, PGC_ENOMEM, "out of memory");
	(void)pgc__batch_add(b, sql_hold_begin, 0, NULL, 0);
	(void)pgc__batch_add(b, pgc_conn_server_version(conn) >= 170000 ? sql_hold_settings_17 : sql_hold_settings,
	                     1, v, PGC__CACHED);
	int rc = pgc__batch_run(b, NULL, err);
	pgc__batch_free(b);
	if (rc != PGC_OK) {
		(void)pgc__rollback(conn);
		return rc;
	}
	if ((opts->flags & PGC_LOCK_TRY) || opts->timeout_ms == 0) {
		key_params kp;
		key_params_set(&kp, key);
		PGresult *r = exec_quick(conn, sql_xact_try[pair][shared], &kp, &rc, err);
		bool got = false;
		if (r != NULL)
			rc = answer_bool(r, &got, err);
		if (!got) {
			(void)pgc__rollback(conn);
			if (r == NULL || rc != PGC_OK)
				return rc;
			char d[PGC_KEY_NAME_MAX + 64];
			return pgc__err(err, PGC_EBUSY, "lock %s is held by another session", describe(key, d, sizeof d));
		}
	} else {
		bool granted;
		rc = wait_lock(conn, t, key, shared, true, opts->timeout_ms, opts->cancel_fd, &granted, err);
		if (rc != PGC_OK) {
			(void)pgc__rollback(conn);
			return rc;
		}
	}
	/* The lock statement's portal would keep its snapshot while the transaction sits idle:
	 * a statement in the simple protocol drops it. */
	if ((rc = pgc__command(conn, "SELECT 1", err)) != PGC_OK || (rc = held_add(conn, t, key, shared, out, err)) != PGC_OK) {
		(void)pgc__rollback(conn);
		return rc;
	}
	(*out)->hold = true;
	t->hold = *out;
	return PGC_OK;
}

/* ---- when a lock was taken (PGC_LOCK_RECORD) -------------------------------------------- */

/* The session's row for the key, after deleting the rows of sessions that are gone (a pid not
 * seen, or seen with another backend_start; a session hidden from this role keeps its rows). */
static const char sql_hold_record[] =
	"WITH gone AS (DELETE FROM @S@.lock_holds h WHERE NOT EXISTS (SELECT 1"
	" FROM pg_catalog.pg_stat_activity a WHERE a.pid = h.pid"
	" AND (a.backend_start IS NULL OR a.backend_start = h.backend_start)))"
	" INSERT INTO @S@.lock_holds (pid, backend_start, classid, objid, objsubid)"
	" SELECT pid, backend_start, $1::oid, $2::oid, $3::int2 FROM pg_catalog.pg_stat_activity"
	" WHERE pid = pg_backend_pid()"
	" ON CONFLICT (pid, backend_start, classid, objid, objsubid)"
	" DO UPDATE SET acquired_at = clock_timestamp()";
static const char sql_hold_forget[] =
	"DELETE FROM @S@.lock_holds WHERE pid = pg_backend_pid()"
	" AND classid = $1::oid AND objid = $2::oid AND objsubid = $3::int2";

/* Whether schema has a lock_holds (it is older than the recording, or not installed, when not),
 * remembered in cache (the session's lock table, or NULL) until the session changes. *quoted
 * (PQfreemem) is the quoted schema name when it has. */
static int holds_present(pgc_conn *conn, lock_table *cache, const char *schema, char **quoted,
                         bool *present, pgc_error *err)
{
	*present = false;
	*quoted = NULL;
	int rc = pgc__check_schema(schema, err);
	if (rc != PGC_OK)
		return rc;
	if (cache == NULL || cache->holds == 0 || strcmp(cache->holds_schema, schema) != 0) {
		const char *p[2] = { schema, "lock_holds" };
		PGresult *r = pgc__exec_cached(conn, sql_table_exists, 2, p, &rc, err);
		if (r == NULL || (rc = answer_bool(r, present, err)) != PGC_OK)
			return rc;
		if (cache != NULL) {
			snprintf(cache->holds_schema, sizeof cache->holds_schema, "%s", schema);
			cache->holds = *present ? 1 : -1;
		}
	}
	if (cache != NULL)
		*present = cache->holds > 0;
	if (!*present)
		return PGC_OK;
	*quoted = pgc__quote_ident(conn, schema, err);
	return *quoted != NULL ? PGC_OK : PGC_EUSAGE;
}

/* Runs tmpl (with @S@) for key on schema's lock_holds, when it has one; *quoted_out (free) is
 * then the quoted schema name. */
static int holds_exec(pgc_conn *conn, lock_table *t, const char *schema, const char *tmpl,
                      const pgc_key *key, char **quoted_out, pgc_error *err)
{
	char *q;
	bool present;
	int rc = holds_present(conn, t, schema, &q, &present, err);
	if (rc != PGC_OK || !present) {
		PQfreemem(q);
		return rc;
	}
	char *sql = pgc__sql_schema(tmpl, q);
	if (sql == NULL) {
		PQfreemem(q);
		return pgc__err(err, PGC_ENOMEM, "out of memory");
	}
	char c[16], o[16], sub[8];
	const char *p[3];
	identity_params(key, c, o, sub, p);
	/* In the caller's transaction a failure must cost only this statement. */
	pgc__call call = pgc__bound(STATEMENT_DEADLINE_MS, -1);
	call.on_deadline = PGC__DROP;
	call.flags = PGC__CACHED | PGC__SAVEPOINT;
	PGresult *r = pgc__query(conn, sql, 3, p, &call, &rc, err);
	free(sql);
	bool done = r != NULL;
	PQclear(r);
	if (done && (*quoted_out = strdup(q)) == NULL)
		rc = pgc__err(err, PGC_ENOMEM, "out of memory");
	PQfreemem(q);
	return rc;
}

/* After the first acquisition of key by this session: record when. */
static int hold_record(pgc_conn *conn, lock_table *t, pgc_lock *l, const char *schema, pgc_error *err)
{
	pgc_held_lock *h = held_find(t, &l->key, l->shared);
	if (h == NULL || h->count != 1)
		return PGC_OK; /* stacked: the first acquisition's time stands */
	return holds_exec(conn, t, schema ? schema : PGC_SCHEMA_DEFAULT, sql_hold_record, &l->key,
	                  &l->recorded, err);
}

/* Records the acquisition in *out; when that fails, the lock is given back (the caller gets
 * the error and no lock it does not know about). */
static int recorded_or_released(pgc_conn *conn, lock_table *t, pgc_lock **out, const char *schema,
                                pgc_error *err)
{
	int rc = hold_record(conn, t, *out, schema, err);
	if (rc == PGC_OK)
		return PGC_OK;
	pgc_error keep;
	if (err != NULL)
		keep = *err;
	pgc_error ignore;
	if (pgc_lock_release(*out, &ignore) != PGC_OK) {
		/* Lost or not held: nothing more to give back. */
	}
	*out = NULL;
	if (err != NULL)
		*err = keep;
	return rc;
}

int pgc_lock_acquire_ex(pgc_conn *conn, const pgc_key *key, const pgc_lock_options *opts,
                        pgc_lock **out, pgc_error *err)
{
	pgc_error_clear(err);
	if (out == NULL)
		return pgc__err(err, PGC_EUSAGE, "pgc_lock_acquire: out must not be NULL");
	*out = NULL;
	pgc_lock_options defaults = PGC_LOCK_OPTIONS_INIT;
	if (opts == NULL)
		opts = &defaults;
	int rc = check_args(conn, key, opts->flags, opts->timeout_ms, "pgc_lock_acquire", err);
	if (rc != PGC_OK)
		return rc;
	lock_table *t = table_of(conn, err);
	if (t == NULL)
		return PGC_ENOMEM;
	bool hold;
	if ((rc = choose_scope(conn, t, opts->flags, &hold, err)) != PGC_OK)
		return rc;
	if ((rc = registry_check(conn, t, key, opts->flags, opts->schema, err)) != PGC_OK)
		return rc;
	if (hold)
		return hold_acquire(conn, t, key, opts, out, err);
	bool shared = (opts->flags & PGC_LOCK_SHARED) != 0;
	int pair = key->kind == PGC_KEY_PAIR;

	if ((opts->flags & PGC_LOCK_TRY) || opts->timeout_ms == 0) {
		key_params kp;
		key_params_set(&kp, key);
		PGresult *r = exec_quick(conn, sql_try[pair][shared], &kp, &rc, err);
		if (r == NULL)
			return rc;
		bool got;
		if ((rc = answer_bool(r, &got, err)) != PGC_OK)
			return rc;
		if (!got) {
			char d[PGC_KEY_NAME_MAX + 64];
			return pgc__err(err, PGC_EBUSY, "lock %s is held by another session", describe(key, d, sizeof d));
		}
		if ((rc = held_add(conn, t, key, shared, out, err)) != PGC_OK)
			return rc;
		return (opts->flags & PGC_LOCK_RECORD) ? recorded_or_released(conn, t, out, opts->schema, err) : PGC_OK;
	}

	bool granted;
	rc = wait_lock(conn, t, key, shared, false, opts->timeout_ms, opts->cancel_fd, &granted, err);
	if (granted) {
		pgc_error keep;
		if (rc != PGC_OK && err != NULL)
			keep = *err;
		int arc = held_add(conn, t, key, shared, out, err);
		if (arc != PGC_OK)
			return arc;
		if (rc == PGC_OK && (opts->flags & PGC_LOCK_RECORD))
			return recorded_or_released(conn, t, out, opts->schema, err);
		if (rc != PGC_OK) {
			/* Held, but something after it failed: give the lock back rather than return an
			 * error with a lock the caller does not know about. */
			pgc_error ignore;
			if (pgc_lock_release(*out, &ignore) != PGC_OK) {
				/* Lost or not held: nothing more to give back. */
			}
			*out = NULL;
			if (err != NULL)
				*err = keep;
			return rc;
		}
	}
	return rc;
}

int pgc_lock_acquire(pgc_conn *conn, const pgc_key *key, unsigned int flags, int64_t timeout_ms,
                     pgc_lock **out, pgc_error *err)
{
	pgc_lock_options o = PGC_LOCK_OPTIONS_INIT;
	o.flags = flags;
	o.timeout_ms = timeout_ms;
	return pgc_lock_acquire_ex(conn, key, &o, out, err);
}

/* ---- releasing -------------------------------------------------------------------------- */

static void handle_free(pgc_lock *l)
{
	lock_table *t = l->conn ? pgc__attached(l->conn, &lock_ops) : NULL;
	if (t != NULL) {
		handle_unlink(t, l);
		if (t->hold == l)
			t->hold = NULL;
	}
	free(l->recorded);
	free(l);
}

/* The held transaction ends: its COMMIT, answered, proves the lock was held until then. */
static int hold_release(pgc_lock *lock, lock_table *t, const char *d, pgc_error *err)
{
	pgc_conn *conn = lock->conn;
	PGTransactionStatusType st = pgc__tx_status(conn);
	int rc;
	if (st != PQTRANS_INTRANS) {
		/* Aborted (a cancel hit a heartbeat) or ended behind our back: the lock was or is
		 * being lost; end what is left. */
		(void)pgc__rollback(conn);
		held_dec(t, &lock->key, lock->shared);
		handle_free(lock);
		return pgc__err(err, PGC_ELOCKLOST, "lock %s was lost: its transaction %s", d,
		                st == PQTRANS_INERROR ? "failed" : "ended");
	}
	pgc__call call = pgc__bound(STATEMENT_DEADLINE_MS, -1);
	call.on_deadline = PGC__DROP;
	call.flags = PGC__SIMPLE;
	PGresult *r = pgc__query(conn, "COMMIT", 0, NULL, &call, &rc, err);
	bool committed = r != NULL && strcmp(PQcmdStatus(r), "COMMIT") == 0;
	PQclear(r);
	held_dec(t, &lock->key, lock->shared);
	handle_free(lock);
	if (!committed) {
		if (!pgc__conn_ok(conn))
			return pgc__err(err, PGC_ELOCKLOST, "lock %s was lost: its session ended", d);
		return pgc__err(err, PGC_ELOCKLOST, "lock %s was lost: its transaction had failed", d);
	}
	return PGC_OK;
}

/* The lock is no longer held by this session: its row goes. A failure leaves a row that the
 * holders query ignores (it joins rows to granted locks only) and that the next recording of
 * the key by this session replaces. */
static void hold_forget(pgc_conn *conn, const pgc_lock *lock)
{
	char *sql = pgc__sql_schema(sql_hold_forget, lock->recorded);
	if (sql == NULL)
		return;
	char c[16], o[16], sub[8];
	const char *p[3];
	identity_params(&lock->key, c, o, sub, p);
	pgc__call call = pgc__bound(STATEMENT_DEADLINE_MS, -1);
	call.on_deadline = PGC__DROP;
	call.flags = PGC__CACHED | PGC__SAVEPOINT;
	int rc;
	pgc_error ignore;
	PQclear(pgc__query(conn, sql, 3, p, &call, &rc, &ignore));
	free(sql);
}

int pgc_lock_release(pgc_lock *lock, pgc_error *err)
{
	pgc_error_clear(err);
	if (lock == NULL)
		return pgc__err(err, PGC_EUSAGE, "pgc_lock_release: lock must not be NULL");
	pgc_conn *conn = lock->conn;
	lock_table *t = pgc__attached(conn, &lock_ops);
	char d[PGC_KEY_NAME_MAX + 64];
	describe(&lock->key, d, sizeof d);
	int rc;
	if (!lock->lost && !pgc__conn_ok(conn))
		pgc__session_lost(conn, "connection to the server lost");
	if (lock->lost) {
		handle_free(lock);
		return pgc__err(err, PGC_ELOCKLOST, "lock %s was lost: its session ended", d);
	}
	if (pgc__busy(conn) || pgc__tx_status(conn) == PQTRANS_ACTIVE) {
		/* Keep the handle: the caller can release it once the connection is free. */
		return pgc__err(err, PGC_EUSAGE, "pgc_lock_release: the connection is busy with another command");
	}
	if (lock->hold)
		return hold_release(lock, t, d, err);
	if (pgc__tx_status(conn) == PQTRANS_INERROR) {
		/* The failed transaction can only end in a rollback; doing it here is what keeps
		 * "current transaction is aborted" from leaking the session lock. */
		if (!pgc__rollback(conn)) {
			handle_free(lock);
			return pgc__err(err, PGC_ELOCKLOST, "lock %s was lost: its session ended", d);
		}
	}
	key_params kp;
	key_params_set(&kp, &lock->key);
	int pair = lock->key.kind == PGC_KEY_PAIR;
	pgc__clear_notice(conn);
	PGresult *r = exec_quick(conn, sql_unlock[pair][lock->shared], &kp, &rc, err);
	if (r == NULL) {
		if (!pgc__conn_ok(conn))
			rc = pgc__err(err, PGC_ELOCKLOST, "lock %s was lost: its session ended", d);
		handle_free(lock);
		return rc;
	}
	bool ok;
	if ((rc = answer_bool(r, &ok, err)) != PGC_OK) {
		/* Not known whether the server let go: the session is not to be trusted. */
		pgc__drop(conn);
		pgc__session_lost(conn, "an unexpected answer to an unlock");
		handle_free(lock);
		return rc;
	}
	held_dec(t, &lock->key, lock->shared);
	bool shared = lock->shared;
	if (ok && lock->recorded != NULL && held_find(t, &lock->key, lock->shared) == NULL)
		hold_forget(conn, lock);
	handle_free(lock);
	if (!ok) {
		rc = pgc__err(err, PGC_ENOTHELD,
		              "the server says this session does not hold %s lock %s (released behind the library's back?)",
		              shared ? "shared" : "exclusive", d);
		if (err != NULL)
			pgc__copy_line(err->detail, sizeof err->detail, pgc__last_notice(conn, NULL));
		return rc;
	}
	return PGC_OK;
}

const pgc_key *pgc_lock_key(const pgc_lock *lock)
{
	return lock ? &lock->key : NULL;
}

bool pgc_lock_shared(const pgc_lock *lock)
{
	return lock ? lock->shared : false;
}

bool pgc_lock_held_in_transaction(const pgc_lock *lock)
{
	return lock ? lock->hold : false;
}

pgc_conn *pgc_lock_conn(const pgc_lock *lock)
{
	return lock ? lock->conn : NULL;
}

int pgc_conn_locks(const pgc_conn *conn, pgc_held_lock **out, size_t *n, pgc_error *err)
{
	pgc_error_clear(err);
	if (conn == NULL || out == NULL || n == NULL)
		return pgc__err(err, PGC_EUSAGE, "pgc_conn_locks: conn, out and n must not be NULL");
	*out = NULL;
	*n = 0;
	const lock_table *t = pgc__attached(conn, &lock_ops);
	if (t == NULL || t->nheld == 0)
		return PGC_OK;
	pgc_held_lock *copy = malloc(t->nheld * sizeof *copy);
	if (copy == NULL)
		return pgc__err(err, PGC_ENOMEM, "out of memory");
	memcpy(copy, t->held, t->nheld * sizeof *copy);
	*out = copy;
	*n = t->nheld;
	return PGC_OK;
}

size_t pgc_conn_lock_count(const pgc_conn *conn)
{
	return conn ? held_total(pgc__attached(conn, &lock_ops)) : 0;
}

int pgc_conn_close_locks(pgc_conn *conn, pgc_held_lock **released, size_t *n, pgc_error *err)
{
	pgc_error_clear(err);
	if (released)
		*released = NULL;
	if (n)
		*n = 0;
	if (conn == NULL)
		return PGC_OK;
	lock_table *t = pgc__attached(conn, &lock_ops);
	int rc = PGC_OK;
	if (t != NULL) {
		pgc__detach(conn, &lock_ops);
		if (released != NULL && t->nheld > 0) {
			*released = malloc(t->nheld * sizeof **released);
			if (*released != NULL)
				memcpy(*released, t->held, t->nheld * sizeof **released);
		}
		if (n != NULL)
			*n = t->nheld;
		rc = release_all(conn, t, err);
		table_free(t);
	}
	pgc_conn_close(conn);
	return rc;
}

/* ---- transaction locks ------------------------------------------------------------------ */

static int xact_one(pgc_conn *conn, lock_table *t, const pgc_key *key, unsigned flags,
                    int64_t timeout_ms, pgc_error *err)
{
	bool shared = (flags & PGC_LOCK_SHARED) != 0;
	int pair = key->kind == PGC_KEY_PAIR;
	int rc;
	if ((flags & PGC_LOCK_TRY) || timeout_ms == 0) {
		key_params kp;
		key_params_set(&kp, key);
		PGresult *r = pgc__exec_cached(conn, sql_xact_try[pair][shared], kp.n, kp.v, &rc, err);
		if (r == NULL)
			return rc;
		bool got;
		if ((rc = answer_bool(r, &got, err)) != PGC_OK)
			return rc;
		if (!got) {
			char d[PGC_KEY_NAME_MAX + 64];
			return pgc__err(err, PGC_EBUSY, "lock %s is held by another session", describe(key, d, sizeof d));
		}
		return PGC_OK;
	}
	bool granted;
	return wait_lock(conn, t, key, shared, true, timeout_ms, -1, &granted, err);
}

static int xact_check(pgc_conn *conn, const char *fn, unsigned flags, pgc_error *err)
{
	if (flags & (PGC_LOCK_HOLD_XACT | PGC_LOCK_AUTO_SCOPE))
		return pgc__err(err, PGC_EUSAGE, "%s: PGC_LOCK_HOLD_XACT and PGC_LOCK_AUTO_SCOPE are for pgc_lock_acquire", fn);
	if (pgc__tx_status(conn) != PQTRANS_INTRANS)
		return pgc__err(err, PGC_EUSAGE,
		                "%s needs an open transaction (BEGIN first): in autocommit the server would release the lock at once",
		                fn);
	return PGC_OK;
}

int pgc_xact_lock(pgc_conn *conn, const pgc_key *key, unsigned int flags, int64_t timeout_ms,
                  pgc_error *err)
{
	pgc_error_clear(err);
	int rc = check_args(conn, key, flags, timeout_ms, "pgc_xact_lock", err);
	if (rc != PGC_OK || (rc = xact_check(conn, "pgc_xact_lock", flags, err)) != PGC_OK)
		return rc;
	lock_table *t = table_of(conn, err);
	if (t == NULL)
		return PGC_ENOMEM;
	if ((rc = registry_check(conn, t, key, flags, NULL, err)) != PGC_OK)
		return rc;
	return xact_one(conn, t, key, flags, timeout_ms, err);
}

/* The canonical order: bigint keys first, ascending, then pairs, ascending. */
static int key_cmp(const void *pa, const void *pb)
{
	const pgc_key *a = pa, *b = pb;
	if (a->kind != b->kind)
		return a->kind < b->kind ? -1 : 1;
	if (a->kind == PGC_KEY_INT64)
		return a->id < b->id ? -1 : a->id > b->id;
	if (a->key1 != b->key1)
		return a->key1 < b->key1 ? -1 : 1;
	return a->key2 < b->key2 ? -1 : a->key2 > b->key2;
}

#define MANY_MAX 10000

int pgc_xact_lock_many(pgc_conn *conn, const pgc_key *keys, size_t n, unsigned int flags,
                       int64_t timeout_ms, pgc_error *err)
{
	pgc_error_clear(err);
	if (keys == NULL || n == 0 || n > MANY_MAX)
		return pgc__err(err, PGC_EUSAGE, "pgc_xact_lock_many: keys must hold 1 to %d keys", MANY_MAX);
	int rc = check_args(conn, &keys[0], flags, timeout_ms, "pgc_xact_lock_many", err);
	if (rc != PGC_OK || (rc = xact_check(conn, "pgc_xact_lock_many", flags, err)) != PGC_OK)
		return rc;
	for (size_t i = 1; i < n; i++)
		if ((rc = check_key(&keys[i], err)) != PGC_OK)
			return rc;
	lock_table *t = table_of(conn, err);
	if (t == NULL)
		return PGC_ENOMEM;
	pgc_key *sorted = malloc(n * sizeof *sorted);
	if (sorted == NULL)
		return pgc__err(err, PGC_ENOMEM, "out of memory");
	memcpy(sorted, keys, n * sizeof *sorted);
	qsort(sorted, n, sizeof *sorted, key_cmp);
	size_t m = 0;
	for (size_t i = 0; i < n; i++)
		if (m == 0 || key_cmp(&sorted[m - 1], &sorted[i]) != 0)
			sorted[m++] = sorted[i];
	for (size_t i = 0; i < m && rc == PGC_OK; i++)
		rc = registry_check(conn, t, &sorted[i], flags, NULL, err);
	if (rc != PGC_OK) {
		free(sorted);
		return rc;
	}
	/* All or nothing: the locks are taken under a savepoint, and a failure rolls back to it,
	 * which releases the transaction locks this call took and keeps the caller's. */
	if ((rc = pgc__command(conn, "SAVEPOINT pgc_lock_many", err)) != PGC_OK) {
		free(sorted);
		return rc;
	}
	int64_t deadline = timeout_ms > 0 ? pgc__now_ms() + timeout_ms : 0;
	for (size_t i = 0; i < m && rc == PGC_OK; i++) {
		int64_t left = timeout_ms;
		if (timeout_ms > 0) {
			left = deadline - pgc__now_ms();
			if (left <= 0) {
				char d[PGC_KEY_NAME_MAX + 64];
				rc = pgc__err(err, PGC_ETIMEDOUT, "timed out after %lld ms waiting for lock %s",
				              (long long)timeout_ms, describe(&sorted[i], d, sizeof d));
				break;
			}
		}
		rc = xact_one(conn, t, &sorted[i], flags, left, err);
		if (rc == PGC_ETIMEDOUT && err != NULL && timeout_ms > 0) {
			char d[PGC_KEY_NAME_MAX + 64];
			pgc__err(err, PGC_ETIMEDOUT, "timed out after %lld ms waiting for lock %s (%zu of %zu)",
			         (long long)timeout_ms, describe(&sorted[i], d, sizeof d), i + 1, m);
		}
	}
	free(sorted);
	if (!pgc__conn_ok(conn))
		return rc;
	if (rc != PGC_OK) {
		pgc_error ignore;
		if (pgc__command(conn, "ROLLBACK TO SAVEPOINT pgc_lock_many", &ignore) == PGC_OK)
			(void)pgc__command(conn, "RELEASE SAVEPOINT pgc_lock_many", &ignore);
		return rc;
	}
	return pgc__command(conn, "RELEASE SAVEPOINT pgc_lock_many", err);
}

/* ---- lock loss -------------------------------------------------------------------------- */

/* A check failed while watching lock: a lost session is this lock's loss, whatever else the
 * table held (its message names the first lock: name this one). */
static int watch_lost(pgc_lock *lock, int rc, pgc_error *err)
{
	if (!lock->lost || (rc != PGC_ELOCKLOST && rc != PGC_ECONNLOST))
		return rc;
	if (err != NULL) {
		char d[PGC_KEY_NAME_MAX + 64], msg[PGC_ERROR_MESSAGE_MAX];
		const char *why = strstr(err->message, ": ");
		snprintf(msg, sizeof msg, "lock %s lost%s", describe(&lock->key, d, sizeof d),
		         why ? why : ": its session ended");
		pgc__copy_line(err->message, sizeof err->message, msg);
		err->code = PGC_ELOCKLOST;
		err->klass = PGC_CLASS_FATAL;
	}
	return PGC_ELOCKLOST;
}

int pgc_lock_check(pgc_lock *lock, int heartbeat_timeout_ms, pgc_error *err)
{
	pgc_error_clear(err);
	if (lock == NULL || heartbeat_timeout_ms < 0)
		return pgc__err(err, PGC_EUSAGE, "pgc_lock_check: lock must not be NULL and the timeout not negative");
	char d[PGC_KEY_NAME_MAX + 64];
	if (lock->lost)
		return pgc__err(err, PGC_ELOCKLOST, "lock %s was lost: its session ended", describe(&lock->key, d, sizeof d));
	int rc = pgc_conn_check(lock->conn, heartbeat_timeout_ms, err);
	if (rc != PGC_OK || lock->lost)
		return watch_lost(lock, rc, err);
	if (lock->hold && pgc__tx_status(lock->conn) != PQTRANS_INTRANS) {
		/* The held transaction failed (a cancel during a heartbeat) or ended: the lock goes
		 * with it. End it now, so that the lock is free for the next holder at once. */
		(void)pgc__rollback(lock->conn);
		lock_table *t = pgc__attached(lock->conn, &lock_ops);
		if (t != NULL)
			table_lost(lock->conn, t, "its transaction failed");
		return pgc__err(err, PGC_ELOCKLOST, "lock %s lost: its transaction failed (a cancelled heartbeat?)",
		                describe(&lock->key, d, sizeof d));
	}
	return PGC_OK;
}

int pgc_lock_watch(pgc_lock *lock, int64_t duration_ms, const pgc_watch_options *opts, pgc_error *err)
{
	pgc_error_clear(err);
	pgc_watch_options defaults = PGC_WATCH_OPTIONS_INIT;
	if (opts == NULL)
		opts = &defaults;
	if (lock == NULL || opts->interval_ms <= 0 || opts->heartbeat_timeout_ms <= 0 ||
	    duration_ms < PGC_WAIT_FOREVER)
		return pgc__err(err, PGC_EUSAGE,
		                "pgc_lock_watch: lock must not be NULL, intervals must be positive, duration >= -1");
	char d[PGC_KEY_NAME_MAX + 64];
	if (lock->lost)
		return pgc__err(err, PGC_ELOCKLOST, "lock %s was lost: its session ended", describe(&lock->key, d, sizeof d));
	int64_t end = duration_ms == PGC_WAIT_FOREVER ? -1 : pgc__now_ms() + duration_ms;
	int64_t next_beat = pgc__now_ms() + opts->interval_ms;
	for (;;) {
		int64_t now = pgc__now_ms();
		int hb = 0;
		if (now >= next_beat) {
			hb = opts->heartbeat_timeout_ms;
			next_beat = now + opts->interval_ms;
		}
		int rc = pgc_lock_check(lock, hb, err);
		if (rc != PGC_OK)
			return rc;
		now = pgc__now_ms();
		if (end >= 0 && now >= end)
			return PGC_OK;
		int64_t until = next_beat;
		if (end >= 0 && end < until)
			until = end;
		int w = pgc__wait_input(lock->conn, opts->wake_fd, until > now ? until - now : 0);
		if (w == PGC__WAIT_FD) {
			rc = pgc_lock_check(lock, 0, err);
			return rc;
		}
	}
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
	identity_params(key, c, o, sub, p);
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
	int rc = check_key(key, err);
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
	rc = holds_present(conn, NULL, schema ? schema : PGC_SCHEMA_DEFAULT, &q, &present, err);
	if (rc == PGC_OK)
		rc = holders(conn, key, present ? q : NULL, out, n, err);
	PQfreemem(q);
	return rc;
}

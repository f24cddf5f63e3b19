/* lock.c - session and transaction advisory locks, their deadlines, and lock-loss detection
 *
 * Invariants:
 * - A pgc_lock handle belongs to one pgc_conn and is released through that connection's
 *   session only; every unlock's boolean is read, and false is PGC_ENOTHELD.
 * - The connection's table counts acquisitions per (key, mode) exactly as the server does:
 *   it changes only on a definite answer from the server, or when the session is known gone.
 * - A waiting acquire puts its deadline on the server (lock_timeout, set and restored inside
 *   the one statement that waits) and keeps a client-side backstop. Any error ends with a look
 *   at pg_locks for this session, because the server can grant the lock in the same instant as
 *   the timeout or a cancel fires (the lock then survives the error). The error result is only
 *   read after ReadyForQuery, when the backend has left the wait queue, so "timed out" always
 *   means nothing held and nothing queued.
 * - Nothing here prints: notices and asynchronous errors go to a receiver that keeps the last
 *   one for messages. */
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>

#include "internal.h"

#define CANCEL_GRACE_MS 5000 /* after a cancel request, how long the answer may take */
#define WAIT_BACKSTOP_MS 5000 /* client deadline beyond the server's lock_timeout */
#define CLOSE_UNLOCK_MS 2000 /* pgc_conn_close: bound on the final unlock */
#define STATEMENT_DEADLINE_MS 30000 /* bound on a lock statement that does not wait */
#define VERIFIED_MAX 64      /* named keys verified against the registry, per connection */

unsigned long pgc__lock_race_granted;

struct pgc_lock {
	pgc_conn *conn;
	pgc_key key;
	bool shared;
	bool lost;     /* the session ended while this acquisition was held */
	pgc_lock *prev, *next;
};

typedef struct pgc__lock_table {
	pgc_held_lock *held;
	size_t nheld, capheld;
	pgc_lock *handles;
	unsigned prepared;      /* bit i: statement "pgc_lock_<i>" is prepared on the session */
	unsigned used;          /* bit i: statement i has run once on this session */
	int registry;           /* 0 unknown, 1 present, -1 absent, for registry_schema */
	char registry_schema[64];
	int64_t verified[VERIFIED_MAX];
	size_t nverified;
	char notice[256];       /* the last notice or asynchronous error from the server */
	char notice_state[6];
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

/* The waiting forms: $1 is the lock_timeout for this statement; the old value is restored in
 * the same statement, after the lock call. OFFSET 0 keeps the planner from merging the levels,
 * so the order of evaluation is the order written. */
#define WAIT_SQL(fn, args)                                                                   \
	"SELECT set_config('lock_timeout', w.old, true) FROM (SELECT s.old, " fn "(" args ")"   \
	" FROM (SELECT current_setting('lock_timeout') AS old,"                                 \
	" set_config('lock_timeout', $1, true) AS new OFFSET 0) s OFFSET 0) w"
static const char *const sql_wait[2][2] = {
	{ WAIT_SQL("pg_advisory_lock", "$2::bigint"), WAIT_SQL("pg_advisory_lock_shared", "$2::bigint") },
	{ WAIT_SQL("pg_advisory_lock", "$2::int, $3::int"), WAIT_SQL("pg_advisory_lock_shared", "$2::int, $3::int") },
};
static const char *const sql_xact_wait[2][2] = {
	{ WAIT_SQL("pg_advisory_xact_lock", "$2::bigint"), WAIT_SQL("pg_advisory_xact_lock_shared", "$2::bigint") },
	{ WAIT_SQL("pg_advisory_xact_lock", "$2::int, $3::int"), WAIT_SQL("pg_advisory_xact_lock_shared", "$2::int, $3::int") },
};

static const char sql_granted[] =
	"SELECT EXISTS (SELECT 1 FROM pg_catalog.pg_locks WHERE locktype = 'advisory'"
	" AND pid = pg_backend_pid() AND granted"
	" AND database = (SELECT oid FROM pg_catalog.pg_database WHERE datname = current_database())"
	" AND classid = $1::oid AND objid = $2::oid AND objsubid = $3::int2 AND mode = $4)";

/* ---- the per-connection table ----------------------------------------------------------- */

void pgc__locks_notice(pgc_conn *conn, const PGresult *res)
{
	lock_table *t = conn->locks;
	if (t == NULL)
		return;
	const char *msg = PQresultErrorField(res, PG_DIAG_MESSAGE_PRIMARY);
	const char *state = PQresultErrorField(res, PG_DIAG_SQLSTATE);
	pgc__copy_line(t->notice, sizeof t->notice, msg ? msg : PQresultErrorMessage(res));
	snprintf(t->notice_state, sizeof t->notice_state, "%s", state && strlen(state) == 5 ? state : "");
}

static lock_table *table_of(pgc_conn *conn, pgc_error *err)
{
	if (conn->locks != NULL)
		return conn->locks;
	lock_table *t = calloc(1, sizeof *t);
	if (t == NULL) {
		pgc__err(err, PGC_ENOMEM, "out of memory");
		return NULL;
	}
	conn->locks = t;
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

static size_t held_total(const lock_table *t)
{
	size_t n = 0;
	for (size_t i = 0; t && i < t->nheld; i++)
		n += (size_t)t->held[i].count;
	return n;
}

/* The session is gone: the server released everything. Handles stay valid, marked lost. */
static void table_lost(lock_table *t)
{
	t->nheld = 0;
	t->prepared = 0;
	t->registry = 0;
	t->nverified = 0;
	for (pgc_lock *l = t->handles; l; l = l->next)
		l->lost = true;
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
	return PGC_OK;
}

static const char *describe(const pgc_key *key, char *buf, size_t n)
{
	if (pgc_key_describe(key, buf, n) < 0)
		snprintf(buf, n, "?");
	return buf;
}

/* ---- statements ------------------------------------------------------------------------- */

static bool conn_usable(pgc_conn *conn)
{
	return conn->pg != NULL && PQstatus(conn->pg) == CONNECTION_OK;
}

typedef struct wait_ctl {
	int64_t deadline;    /* absolute pgc__now_ms(), or -1 */
	int cancel_fd;       /* -1 or a descriptor that abandons the wait */
	bool cancel_on_deadline; /* true: ask the server to cancel; false: drop the session */
	bool hit_deadline, hit_cancel, dropped;
} wait_ctl;

static void drop_session(pgc_conn *conn)
{
	/* Shutting the socket down ends the session on the server too (which releases its locks)
	 * and leaves the PGconn valid: libpq sees the failure and reports CONNECTION_BAD. */
	int fd = PQsocket(conn->pg);
	if (fd >= 0)
		shutdown(fd, SHUT_RDWR);
	PQconsumeInput(conn->pg);
}

static void send_cancel(pgc_conn *conn)
{
	PGcancel *c = PQgetCancel(conn->pg);
	if (c != NULL) {
		char buf[256];
		PQcancel(c, buf, sizeof buf);
		PQfreeCancel(c);
	}
}

/* Sends sql and collects its result under w's deadline and cancel descriptor. Returns the
 * result to look at (an error result when there was one), or NULL when the session failed;
 * *rc and err are set for NULL. The connection is idle again on return. */
static PGresult *collect(pgc_conn *conn, wait_ctl *w, int *rc, pgc_error *err)
{
	PGconn *pg = conn->pg;
	PGresult *keep = NULL;
	bool cancelled = false;
	int64_t hard = -1;
	for (;;) {
		if (!PQconsumeInput(pg))
			break;
		bool done = false;
		while (!PQisBusy(pg)) {
			PGresult *r = PQgetResult(pg);
			if (r == NULL) {
				done = true;
				break;
			}
			if (keep == NULL || (PQresultStatus(r) == PGRES_FATAL_ERROR &&
			                     PQresultStatus(keep) != PGRES_FATAL_ERROR)) {
				PQclear(keep);
				keep = r;
			} else {
				PQclear(r);
			}
		}
		if (done)
			break;
		int64_t now = pgc__now_ms();
		int64_t until = cancelled ? hard : w->deadline;
		if (until >= 0 && now >= until) {
			if (!cancelled && w->cancel_on_deadline) {
				w->hit_deadline = true;
				send_cancel(conn);
				cancelled = true;
				hard = now + CANCEL_GRACE_MS;
				continue;
			}
			if (!cancelled)
				w->hit_deadline = true;
			w->dropped = true;
			drop_session(conn);
			break;
		}
		struct pollfd fds[2] = { { PQsocket(pg), POLLIN, 0 }, { w->cancel_fd, POLLIN, 0 } };
		int nfds = (!cancelled && w->cancel_fd >= 0) ? 2 : 1;
		int left = until < 0 ? -1 : (int)(until - now > 1000000 ? 1000000 : until - now);
		int pr = poll(fds, (nfds_t)nfds, left);
		if (pr > 0 && nfds == 2 && fds[1].revents != 0 && !cancelled) {
			w->hit_cancel = true;
			send_cancel(conn);
			cancelled = true;
			hard = pgc__now_ms() + CANCEL_GRACE_MS;
		}
	}
	if (PQstatus(pg) != CONNECTION_OK) {
		/* Drain what libpq still has, so the handle is idle. */
		PGresult *r;
		while ((r = PQgetResult(pg)) != NULL)
			PQclear(r);
		PQclear(keep);
		*rc = pgc__err_result(err, pg, NULL, NULL);
		return NULL;
	}
	if (keep == NULL)
		*rc = pgc__err(err, PGC_EINTERNAL, "no result from the server");
	return keep;
}

static PGresult *exec_wait(pgc_conn *conn, const char *sql, int n, const char *const *vals,
                           wait_ctl *w, int *rc, pgc_error *err)
{
	if (!PQsendQueryParams(conn->pg, sql, n, NULL, vals, NULL, NULL, 0)) {
		*rc = pgc__err_result(err, conn->pg, NULL, NULL);
		return NULL;
	}
	return collect(conn, w, rc, err);
}

/* Turns collect()'s answer into exec_prepared()'s: a result that is not a success becomes an
 * error (*rc, err) and NULL; a dropped session says so. */
static PGresult *bounded_result(pgc_conn *conn, PGresult *r, int *rc, pgc_error *err)
{
	if (r == NULL) {
		if (!conn_usable(conn) && err != NULL && err->message[0] == '\0')
			pgc__err(err, PGC_ECONNLOST, "connection to the server lost");
		return NULL;
	}
	if (PQresultStatus(r) == PGRES_TUPLES_OK || PQresultStatus(r) == PGRES_COMMAND_OK) {
		*rc = PGC_OK;
		return r;
	}
	*rc = pgc__err_result(err, conn->pg, r, NULL);
	PQclear(r);
	return NULL;
}

/* Runs one of the lock statements that never wait (try-lock, unlock), prepared the second time
 * it is used on a session (a short-lived process such as pgcoord run pays one round trip; a
 * session that locks often gets prepared statements). A session that lost its prepared
 * statements (DISCARD ALL, DEALLOCATE) gets them again. Each round trip is bounded by
 * STATEMENT_DEADLINE_MS: a server that does not answer by then is treated as gone, and the
 * session is closed (which is also what releases its locks on the server). */
static PGresult *exec_prepared(pgc_conn *conn, lock_table *t, unsigned idx, const char *sql,
                               const key_params *p, int *rc, pgc_error *err)
{
	char name[32];
	snprintf(name, sizeof name, "pgc_lock_%u", idx);
	wait_ctl w = { pgc__now_ms() + STATEMENT_DEADLINE_MS, -1, false, false, false, false };
	if (!(t->used & (1u << idx))) {
		t->used |= 1u << idx;
		return bounded_result(conn, exec_wait(conn, sql, p->n, p->v, &w, rc, err), rc, err);
	}
	for (int attempt = 0; attempt < 2; attempt++) {
		if (!(t->prepared & (1u << idx))) {
			PGresult *r = NULL;
			if (PQsendPrepare(conn->pg, name, sql, p->n, NULL))
				r = collect(conn, &w, rc, err);
			else
				*rc = pgc__err_result(err, conn->pg, NULL, NULL);
			if (r == NULL)
				return bounded_result(conn, NULL, rc, err);
			const char *state = PQresultErrorField(r, PG_DIAG_SQLSTATE);
			if (PQresultStatus(r) != PGRES_COMMAND_OK && !(state && strcmp(state, "42P05") == 0)) {
				*rc = pgc__err_result(err, conn->pg, r, NULL);
				PQclear(r);
				return NULL;
			}
			PQclear(r);
			t->prepared |= 1u << idx;
		}
		PGresult *res = NULL;
		if (PQsendQueryPrepared(conn->pg, name, p->n, p->v, NULL, NULL, 0))
			res = collect(conn, &w, rc, err);
		else
			*rc = pgc__err_result(err, conn->pg, NULL, NULL);
		if (res == NULL)
			return bounded_result(conn, NULL, rc, err);
		if (PQresultStatus(res) == PGRES_TUPLES_OK) {
			*rc = PGC_OK;
			return res;
		}
		const char *state = PQresultErrorField(res, PG_DIAG_SQLSTATE);
		if (attempt == 0 && state && strcmp(state, "26000") == 0 &&
		    PQtransactionStatus(conn->pg) == PQTRANS_IDLE) {
			PQclear(res);
			t->prepared &= ~(1u << idx);
			continue;
		}
		*rc = pgc__err_result(err, conn->pg, res, NULL);
		PQclear(res);
		return NULL;
	}
	return NULL;
}

/* Runs a statement that needs no result (SAVEPOINT, ROLLBACK ...). */
static int exec_simple(pgc_conn *conn, const char *sql, pgc_error *err)
{
	PGresult *r = PQexec(conn->pg, sql);
	ExecStatusType st = r ? PQresultStatus(r) : PGRES_FATAL_ERROR;
	int rc = PGC_OK;
	if (st != PGRES_COMMAND_OK && st != PGRES_TUPLES_OK)
		rc = pgc__err_result(err, conn->pg, r, NULL);
	PQclear(r);
	return rc;
}

/* Does this session hold key in this mode right now, by pg_locks? */
static int granted_now(pgc_conn *conn, const pgc_key *key, bool shared, bool *out, pgc_error *err)
{
	uint32_t classid, objid;
	int sub;
	if (pgc_key_to_pg_locks(key, &classid, &objid, &sub) != PGC_OK)
		return pgc__err(err, PGC_EUSAGE, "unknown key kind");
	char c[16], o[16], s[4];
	snprintf(c, sizeof c, "%u", classid);
	snprintf(o, sizeof o, "%u", objid);
	snprintf(s, sizeof s, "%d", sub);
	const char *p[4] = { c, o, s, shared ? "ShareLock" : "ExclusiveLock" };
	int rc;
	PGresult *r = pgc__exec(conn, sql_granted, 4, p, &rc, err);
	if (r == NULL)
		return rc;
	*out = strcmp(PQgetvalue(r, 0, 0), "t") == 0;
	PQclear(r);
	return PGC_OK;
}

/* ---- the name registry ------------------------------------------------------------------ */

static int registry_check(pgc_conn *conn, lock_table *t, const pgc_key *key, unsigned flags,
                          const char *schema, pgc_error *err)
{
	if (key->name[0] == '\0' || (flags & PGC_LOCK_NO_REGISTRY))
		return PGC_OK;
	if (schema == NULL)
		schema = PGC_SCHEMA_DEFAULT;
	if (*schema == '\0' || strlen(schema) >= sizeof t->registry_schema)
		return pgc__err(err, PGC_EUSAGE, "invalid registry schema name");
	if (strcmp(schema, t->registry_schema) != 0) {
		snprintf(t->registry_schema, sizeof t->registry_schema, "%s", schema);
		t->registry = 0;
		t->nverified = 0;
	}
	for (size_t i = 0; i < t->nverified; i++)
		if (t->verified[i] == key->id)
			return PGC_OK;
	bool in_tx = PQtransactionStatus(conn->pg) == PQTRANS_INTRANS;
	int rc;
	if (t->registry == 0) {
		const char *p[1] = { schema };
		PGresult *r = pgc__exec(conn,
		        "SELECT EXISTS (SELECT 1 FROM pg_catalog.pg_class c"
		        " JOIN pg_catalog.pg_namespace n ON n.oid = c.relnamespace"
		        " WHERE n.nspname = $1 AND c.relname = 'lock_names')", 1, p, &rc, err);
		if (r == NULL)
			return rc;
		t->registry = strcmp(PQgetvalue(r, 0, 0), "t") == 0 ? 1 : -1;
		PQclear(r);
	}
	if (t->registry < 0)
		return PGC_OK;

	char *q = pgc__quote_ident(conn, schema, err);
	if (q == NULL)
		return PGC_EUSAGE;
	/* One row always: whether this statement inserted the name, and what the registry held
	 * for this key and for this name before it (the CTE's insert is not visible to the
	 * subqueries). key and name are both unique, so each subquery finds at most one row. */
	char sql[640];
	snprintf(sql, sizeof sql,
	         "WITH ins AS (INSERT INTO %s.lock_names (key, name) VALUES ($1::bigint, $2)"
	         " ON CONFLICT DO NOTHING RETURNING key)"
	         " SELECT (SELECT count(*) FROM ins),"
	         " (SELECT name FROM %s.lock_names WHERE key = $1::bigint),"
	         " (SELECT key::text FROM %s.lock_names WHERE name = $2)",
	         q, q, q);
	PQfreemem(q);
	char id[24];
	snprintf(id, sizeof id, "%lld", (long long)key->id);
	const char *p[2] = { id, key->name };
	if (in_tx && (rc = exec_simple(conn, "SAVEPOINT pgc_lock_registry", err)) != PGC_OK)
		return rc;
	rc = PGC_OK;
	for (int attempt = 0;; attempt++) {
		PGresult *r = pgc__exec(conn, sql, 2, p, &rc, err);
		if (r == NULL)
			break;
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
	if (in_tx) {
		if (rc != PGC_OK && PQtransactionStatus(conn->pg) == PQTRANS_INERROR)
			(void)exec_simple(conn, "ROLLBACK TO SAVEPOINT pgc_lock_registry", NULL);
		if (conn_usable(conn))
			(void)exec_simple(conn, "RELEASE SAVEPOINT pgc_lock_registry", NULL);
	}
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
	if (*schema == '\0' || strlen(schema) > 63)
		return pgc__err(err, PGC_EUSAGE, "invalid registry schema name");
	key->name[0] = '\0';
	if (key->kind != PGC_KEY_INT64)
		return PGC_OK;
	const char *p[1] = { schema };
	PGresult *r = pgc__exec(conn,
	        "SELECT EXISTS (SELECT 1 FROM pg_catalog.pg_class c"
	        " JOIN pg_catalog.pg_namespace n ON n.oid = c.relnamespace"
	        " WHERE n.nspname = $1 AND c.relname = 'lock_names')", 1, p, &rc, err);
	if (r == NULL)
		return rc;
	bool present = strcmp(PQgetvalue(r, 0, 0), "t") == 0;
	PQclear(r);
	if (!present)
		return PGC_OK;
	char *q = pgc__quote_ident(conn, schema, err);
	if (q == NULL)
		return PGC_EUSAGE;
	char sql[256], id[24];
	snprintf(sql, sizeof sql, "SELECT name FROM %s.lock_names WHERE key = $1::bigint", q);
	PQfreemem(q);
	snprintf(id, sizeof id, "%lld", (long long)key->id);
	const char *v[1] = { id };
	r = pgc__exec(conn, sql, 1, v, &rc, err);
	if (r == NULL)
		return rc;
	if (PQntuples(r) == 1)
		snprintf(key->name, sizeof key->name, "%s", PQgetvalue(r, 0, 0));
	PQclear(r);
	return PGC_OK;
}

/* ---- acquiring -------------------------------------------------------------------------- */

#define KNOWN_FLAGS (PGC_LOCK_SHARED | PGC_LOCK_TRY | PGC_LOCK_NO_REGISTRY)
#define TIMEOUT_MAX_MS INT64_C(2147483647) /* lock_timeout's limit, about 24.8 days */

static int check_args(pgc_conn *conn, const pgc_key *key, unsigned flags, int64_t timeout_ms,
                      const char *fn, pgc_error *err)
{
	if (conn == NULL || key == NULL)
		return pgc__err(err, PGC_EUSAGE, "%s: conn and key must not be NULL", fn);
	if (flags & ~KNOWN_FLAGS)
		return pgc__err(err, PGC_EUSAGE, "%s: unknown flags 0x%x", fn, flags & ~KNOWN_FLAGS);
	if (timeout_ms < PGC_WAIT_FOREVER)
		return pgc__err(err, PGC_EUSAGE, "%s: timeout_ms must be >= 0, or PGC_WAIT_FOREVER (-1)", fn);
	if (timeout_ms > TIMEOUT_MAX_MS)
		return pgc__err(err, PGC_EUSAGE, "%s: timeout_ms is longer than %lld ms; use PGC_WAIT_FOREVER", fn,
		                (long long)TIMEOUT_MAX_MS);
	int rc = check_key(key, err);
	if (rc != PGC_OK)
		return rc;
	if (!conn_usable(conn))
		return pgc__err(err, PGC_ECONNLOST, "connection to the server lost");
	if (PQisBusy(conn->pg) || PQtransactionStatus(conn->pg) == PQTRANS_ACTIVE)
		return pgc__err(err, PGC_EUSAGE, "%s: the connection is busy with another command", fn);
	if (PQtransactionStatus(conn->pg) == PQTRANS_INERROR)
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
	bool in_tx = PQtransactionStatus(conn->pg) == PQTRANS_INTRANS;
	int before = xact ? 0 : held_count(t, key, shared);
	int rc;
	*granted = false;

	key_params kp;
	key_params_set(&kp, key);
	char lt[24];
	snprintf(lt, sizeof lt, "%lld", (long long)(timeout_ms == PGC_WAIT_FOREVER ? 0 : timeout_ms));
	const char *vals[3] = { lt, kp.v[0], kp.v[1] };

	/* In a transaction block an error would doom the caller's transaction: wait under a
	 * savepoint, so that a timeout costs nothing but the savepoint. */
	if (in_tx && (rc = exec_simple(conn, "SAVEPOINT pgc_lock_wait", err)) != PGC_OK)
		return rc;
	wait_ctl w = { -1, cancel_fd, true, false, false, false };
	if (timeout_ms != PGC_WAIT_FOREVER)
		w.deadline = pgc__now_ms() + timeout_ms + WAIT_BACKSTOP_MS;
	PGresult *res = exec_wait(conn, sql, 1 + kp.n, vals, &w, &rc, err);
	if (res == NULL) {
		if (!conn_usable(conn))
			table_lost(t);
		return rc;
	}
	if (PQresultStatus(res) == PGRES_TUPLES_OK) {
		PQclear(res);
		/* A session lock is held from here on, whatever happens to the savepoint: the
		 * caller records it (and gives it back if rc is an error). */
		*granted = true;
		if (in_tx && (rc = exec_simple(conn, "RELEASE SAVEPOINT pgc_lock_wait", err)) != PGC_OK)
			return rc;
		return PGC_OK;
	}

	/* An error: timeout, cancel, deadlock, statement_timeout... */
	pgc_error serr;
	int code = pgc__err_result(&serr, conn->pg, res, NULL);
	PQclear(res);
	if (in_tx) {
		/* Undoes the statement's settings; a transaction lock granted in the race goes with
		 * the savepoint, a session lock survives it and is found below. */
		if ((rc = exec_simple(conn, "ROLLBACK TO SAVEPOINT pgc_lock_wait", err)) != PGC_OK ||
		    (rc = exec_simple(conn, "RELEASE SAVEPOINT pgc_lock_wait", err)) != PGC_OK)
			return rc;
	}
	if (!xact && before == 0) {
		bool g = false;
		if ((rc = granted_now(conn, key, shared, &g, err)) != PGC_OK)
			return rc;
		if (g) {
			/* Granted in the same instant as the error: the lock is ours. */
			__atomic_add_fetch(&pgc__lock_race_granted, 1, __ATOMIC_RELAXED);
			*granted = true;
			return PGC_OK;
		}
	}
	char d[PGC_KEY_NAME_MAX + 64];
	describe(key, d, sizeof d);
	if (strcmp(serr.sqlstate, "55P03") == 0 || (w.hit_deadline && !w.hit_cancel))
		return pgc__err(err, PGC_ETIMEDOUT, "timed out after %lld ms waiting for lock %s",
		                (long long)timeout_ms, d);
	if (w.hit_cancel && strcmp(serr.sqlstate, "57014") == 0)
		return pgc__err(err, PGC_EINTR, "interrupted while waiting for lock %s", d);
	if (err != NULL) {
		*err = serr;
		char msg[PGC_ERROR_MESSAGE_MAX];
		snprintf(msg, sizeof msg, "waiting for lock %s: %s", d, serr.message);
		pgc__copy_line(err->message, sizeof err->message, msg);
	}
	return code;
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
	if ((rc = registry_check(conn, t, key, opts->flags, opts->schema, err)) != PGC_OK)
		return rc;
	bool shared = (opts->flags & PGC_LOCK_SHARED) != 0;
	int pair = key->kind == PGC_KEY_PAIR;

	if ((opts->flags & PGC_LOCK_TRY) || opts->timeout_ms == 0) {
		key_params kp;
		key_params_set(&kp, key);
		PGresult *r = exec_prepared(conn, t, (unsigned)(pair * 2 + shared), sql_try[pair][shared], &kp,
		                            &rc, err);
		if (r == NULL) {
			if (!conn_usable(conn))
				table_lost(t);
			return rc;
		}
		bool got = strcmp(PQgetvalue(r, 0, 0), "t") == 0;
		PQclear(r);
		if (!got) {
			char d[PGC_KEY_NAME_MAX + 64];
			return pgc__err(err, PGC_EBUSY, "lock %s is held by another session", describe(key, d, sizeof d));
		}
		return held_add(conn, t, key, shared, out, err);
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
		if (rc != PGC_OK) {
			/* Held, but the savepoint could not be released: give the lock back rather
			 * than return an error with a lock the caller does not know about. */
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
	if (l->conn != NULL && l->conn->locks != NULL)
		handle_unlink(l->conn->locks, l);
	free(l);
}

int pgc_lock_release(pgc_lock *lock, pgc_error *err)
{
	pgc_error_clear(err);
	if (lock == NULL)
		return pgc__err(err, PGC_EUSAGE, "pgc_lock_release: lock must not be NULL");
	pgc_conn *conn = lock->conn;
	lock_table *t = conn->locks;
	char d[PGC_KEY_NAME_MAX + 64];
	describe(&lock->key, d, sizeof d);
	int rc;
	if (!lock->lost && !conn_usable(conn))
		table_lost(t);
	if (lock->lost) {
		handle_free(lock);
		return pgc__err(err, PGC_ELOCKLOST, "lock %s was lost: its session ended", d);
	}
	if (PQisBusy(conn->pg) || PQtransactionStatus(conn->pg) == PQTRANS_ACTIVE) {
		/* Keep the handle: the caller can release it once the connection is free. */
		return pgc__err(err, PGC_EUSAGE, "pgc_lock_release: the connection is busy with another command");
	}
	if (PQtransactionStatus(conn->pg) == PQTRANS_INERROR) {
		/* The failed transaction can only end in a rollback; doing it here is what keeps
		 * "current transaction is aborted" from leaking the session lock. */
		if ((rc = exec_simple(conn, "ROLLBACK", err)) != PGC_OK) {
			if (!conn_usable(conn))
				table_lost(t);
			handle_free(lock);
			return conn_usable(conn) ? rc : pgc__err(err, PGC_ELOCKLOST, "lock %s was lost: its session ended", d);
		}
	}
	key_params kp;
	key_params_set(&kp, &lock->key);
	int pair = lock->key.kind == PGC_KEY_PAIR;
	t->notice[0] = '\0';
	PGresult *r = exec_prepared(conn, t, (unsigned)(4 + pair * 2 + lock->shared),
	                            sql_unlock[pair][lock->shared], &kp, &rc, err);
	if (r == NULL) {
		if (!conn_usable(conn)) {
			table_lost(t);
			rc = pgc__err(err, PGC_ELOCKLOST, "lock %s was lost: its session ended", d);
		}
		handle_free(lock);
		return rc;
	}
	bool ok = strcmp(PQgetvalue(r, 0, 0), "t") == 0;
	PQclear(r);
	held_dec(t, &lock->key, lock->shared);
	bool shared = lock->shared;
	handle_free(lock);
	if (!ok) {
		rc = pgc__err(err, PGC_ENOTHELD,
		              "the server says this session does not hold %s lock %s (released behind the library's back?)",
		              shared ? "shared" : "exclusive", d);
		if (err != NULL)
			pgc__copy_line(err->detail, sizeof err->detail, t->notice);
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
	const lock_table *t = conn->locks;
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
	return conn ? held_total(conn->locks) : 0;
}

int pgc__locks_close(pgc_conn *conn, pgc_held_lock **released, size_t *n, pgc_error *err)
{
	if (released)
		*released = NULL;
	if (n)
		*n = 0;
	lock_table *t = conn->locks;
	if (t == NULL)
		return PGC_OK;
	int rc = PGC_OK;
	if (t->nheld > 0 && conn_usable(conn) && !PQisBusy(conn->pg)) {
		/* Release now rather than when the backend gets round to noticing the end of the
		 * session, so the next holder does not wait for it. Bounded: a dead network must
		 * not hang a close. */
		if (PQtransactionStatus(conn->pg) == PQTRANS_INERROR)
			(void)exec_simple(conn, "ROLLBACK", NULL);
		wait_ctl w = { pgc__now_ms() + CLOSE_UNLOCK_MS, -1, false, false, false, false };
		PGresult *r = exec_wait(conn, "SELECT pg_advisory_unlock_all()", 0, NULL, &w, &rc, err);
		if (r != NULL) {
			if (PQresultStatus(r) != PGRES_TUPLES_OK)
				rc = pgc__err_result(err, conn->pg, r, NULL);
			PQclear(r);
		}
	}
	if (released != NULL && t->nheld > 0) {
		*released = malloc(t->nheld * sizeof **released);
		if (*released != NULL) {
			memcpy(*released, t->held, t->nheld * sizeof **released);
			if (n)
				*n = t->nheld;
		}
	} else if (n != NULL) {
		*n = t->nheld;
	}
	while (t->handles) {
		pgc_lock *l = t->handles;
		t->handles = l->next;
		free(l);
	}
	free(t->held);
	free(t);
	conn->locks = NULL;
	return rc;
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
	int rc = pgc__locks_close(conn, released, n, err);
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
		PGresult *r = pgc__exec(conn, sql_xact_try[pair][shared], kp.n, kp.v, &rc, err);
		if (r == NULL) {
			if (!conn_usable(conn))
				table_lost(t);
			return rc;
		}
		bool got = strcmp(PQgetvalue(r, 0, 0), "t") == 0;
		PQclear(r);
		if (!got) {
			char d[PGC_KEY_NAME_MAX + 64];
			return pgc__err(err, PGC_EBUSY, "lock %s is held by another session", describe(key, d, sizeof d));
		}
		return PGC_OK;
	}
	bool granted;
	return wait_lock(conn, t, key, shared, true, timeout_ms, -1, &granted, err);
}

static int xact_check(pgc_conn *conn, const char *fn, pgc_error *err)
{
	if (PQtransactionStatus(conn->pg) != PQTRANS_INTRANS)
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
	if (rc != PGC_OK || (rc = xact_check(conn, "pgc_xact_lock", err)) != PGC_OK)
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
	if (rc != PGC_OK || (rc = xact_check(conn, "pgc_xact_lock_many", err)) != PGC_OK)
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
	if ((rc = exec_simple(conn, "SAVEPOINT pgc_lock_many", err)) != PGC_OK) {
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
	if (!conn_usable(conn))
		return rc;
	if (rc != PGC_OK) {
		pgc_error ignore;
		if (exec_simple(conn, "ROLLBACK TO SAVEPOINT pgc_lock_many", &ignore) == PGC_OK)
			(void)exec_simple(conn, "RELEASE SAVEPOINT pgc_lock_many", &ignore);
		return rc;
	}
	return exec_simple(conn, "RELEASE SAVEPOINT pgc_lock_many", err);
}

/* ---- lock loss -------------------------------------------------------------------------- */

int pgc_conn_socket(const pgc_conn *conn)
{
	if (conn == NULL || conn->pg == NULL || PQstatus(conn->pg) != CONNECTION_OK)
		return -1;
	return PQsocket(conn->pg);
}

/* The session is gone: empties the table and says why. */
static int report_lost(pgc_conn *conn, lock_table *t, const char *why, pgc_error *err)
{
	size_t had = held_total(t);
	char first[PGC_KEY_NAME_MAX + 64] = "";
	if (t->nheld > 0)
		describe(&t->held[0].key, first, sizeof first);
	char reason[PGC_ERROR_MESSAGE_MAX];
	if (why != NULL) {
		snprintf(reason, sizeof reason, "%s", why);
	} else if (t->notice[0] != '\0') {
		snprintf(reason, sizeof reason, "the server ended the session: %s%s%s%s", t->notice,
		         t->notice_state[0] ? " (SQLSTATE " : "", t->notice_state, t->notice_state[0] ? ")" : "");
	} else {
		char libpq[256];
		pgc__copy_line(libpq, sizeof libpq, conn->pg ? PQerrorMessage(conn->pg) : "");
		snprintf(reason, sizeof reason, "the connection was lost: %s", libpq[0] ? libpq : "no reason given");
	}
	table_lost(t);
	int rc;
	if (had > 0) {
		if (had == 1)
			rc = pgc__err(err, PGC_ELOCKLOST, "lock %s lost: %s", first, reason);
		else
			rc = pgc__err(err, PGC_ELOCKLOST, "%zu locks lost (%s, ...): %s", had, first, reason);
	} else {
		rc = pgc__err(err, PGC_ECONNLOST, "session lost: %s", reason);
	}
	if (err != NULL && t->notice_state[0] != '\0' && why == NULL)
		memcpy(err->sqlstate, t->notice_state, 6);
	return rc;
}

int pgc_conn_check(pgc_conn *conn, int heartbeat_timeout_ms, pgc_error *err)
{
	pgc_error_clear(err);
	if (conn == NULL || heartbeat_timeout_ms < 0)
		return pgc__err(err, PGC_EUSAGE, "pgc_conn_check: conn must not be NULL and the timeout not negative");
	lock_table *t = table_of(conn, err);
	if (t == NULL)
		return PGC_ENOMEM;
	if (conn->pg == NULL || PQstatus(conn->pg) != CONNECTION_OK)
		return report_lost(conn, t, NULL, err);
	if (PQisBusy(conn->pg))
		return pgc__err(err, PGC_EUSAGE, "pgc_conn_check: the connection is busy with another command");
	/* Whatever arrived unasked: a terminated backend sends its FATAL error and closes. */
	if (!PQconsumeInput(conn->pg) || PQstatus(conn->pg) != CONNECTION_OK)
		return report_lost(conn, t, NULL, err);
	if (heartbeat_timeout_ms == 0)
		return PGC_OK;
	wait_ctl w = { pgc__now_ms() + heartbeat_timeout_ms, -1, false, false, false, false };
	int rc;
	PGresult *r = exec_wait(conn, "SELECT 1", 0, NULL, &w, &rc, err);
	if (r == NULL) {
		if (w.dropped) {
			char why[128];
			snprintf(why, sizeof why, "the server did not answer a heartbeat within %d ms", heartbeat_timeout_ms);
			return report_lost(conn, t, why, err);
		}
		return report_lost(conn, t, NULL, err);
	}
	bool ok = PQresultStatus(r) == PGRES_TUPLES_OK;
	if (!ok)
		rc = pgc__err_result(err, conn->pg, r, "heartbeat");
	PQclear(r);
	if (!ok && !conn_usable(conn))
		return report_lost(conn, t, NULL, err);
	return ok ? PGC_OK : rc;
}

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
	}
	return PGC_ELOCKLOST;
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
	pgc_conn *conn = lock->conn;
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
		int rc = pgc_conn_check(conn, hb, err);
		if (rc != PGC_OK || lock->lost)
			return watch_lost(lock, rc, err);
		now = pgc__now_ms();
		if (end >= 0 && now >= end)
			return PGC_OK;
		int64_t until = next_beat;
		if (end >= 0 && end < until)
			until = end;
		struct pollfd fds[2] = { { pgc_conn_socket(conn), POLLIN, 0 }, { opts->wake_fd, POLLIN, 0 } };
		int nfds = opts->wake_fd >= 0 ? 2 : 1;
		int pr = poll(fds, (nfds_t)nfds, (int)(until > now ? until - now : 0));
		if (pr > 0 && nfds == 2 && fds[1].revents != 0) {
			rc = pgc_conn_check(conn, 0, err);
			if (rc != PGC_OK || lock->lost)
				return watch_lost(lock, rc, err);
			return PGC_OK;
		}
	}
}

/* ---- who holds a key -------------------------------------------------------------------- */

#define HOLDERS_SQL(waitstart)                                                                      \
	"SELECT l.pid, coalesce(a.application_name, ''), coalesce(host(a.client_addr), ''),"          \
	" l.mode, l.granted, coalesce(" waitstart "::text, ''), coalesce(a.state, ''),"               \
	" coalesce(a.state_change::text, ''), coalesce(a.backend_start::text, ''),"                    \
	" l.pid = pg_backend_pid()"                                                                     \
	" FROM pg_catalog.pg_locks l LEFT JOIN pg_catalog.pg_stat_activity a ON a.pid = l.pid"         \
	" WHERE l.locktype = 'advisory'"                                                                \
	" AND l.database = (SELECT oid FROM pg_catalog.pg_database WHERE datname = current_database())" \
	" AND l.classid = $1::oid AND l.objid = $2::oid AND l.objsubid = $3::int2"                     \
	" ORDER BY l.granted DESC, " waitstart " NULLS FIRST, l.pid, l.mode"

int pgc_lock_holders(pgc_conn *conn, const pgc_key *key, pgc_lock_holder **out, size_t *n,
                     pgc_error *err)
{
	pgc_error_clear(err);
	if (conn == NULL || key == NULL || out == NULL || n == NULL)
		return pgc__err(err, PGC_EUSAGE, "pgc_lock_holders: conn, key, out and n must not be NULL");
	*out = NULL;
	*n = 0;
	int rc = check_key(key, err);
	if (rc != PGC_OK)
		return rc;
	uint32_t classid, objid;
	int sub;
	if (pgc_key_to_pg_locks(key, &classid, &objid, &sub) != PGC_OK)
		return pgc__err(err, PGC_EUSAGE, "unknown key kind");
	char c[16], o[16], s[4];
	snprintf(c, sizeof c, "%u", classid);
	snprintf(o, sizeof o, "%u", objid);
	snprintf(s, sizeof s, "%d", sub);
	const char *p[3] = { c, o, s };
	const char *sql = conn->server_version >= 140000 ? HOLDERS_SQL("l.waitstart") : HOLDERS_SQL("NULL::timestamptz");
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
		}
		*out = h;
		*n = (size_t)rows;
	}
	PQclear(r);
	return PGC_OK;
}

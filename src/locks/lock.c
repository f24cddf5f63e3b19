/* lock.c - session advisory locks: the connection's table of them, acquiring under a deadline,
 * releasing, lock-loss detection, and the handle's accessors
 *
 * The other lock files hold one concept each and rely on the invariants below: lock_hold.c (a
 * lock held in a transaction of its own, and the record of when a lock was taken), lock_xact.c
 * (transaction locks), lock_registry.c (the name registry, and who holds a key). What they
 * share is declared in locks_int.h.
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

unsigned long pgc__lock_race_granted;

/* ---- SQL: constant texts, indexed [pair][shared] ---------------------------------------- */

static const char *const sql_try[2][2] = {
	{ "SELECT pg_try_advisory_lock($1::bigint)", "SELECT pg_try_advisory_lock_shared($1::bigint)" },
	{ "SELECT pg_try_advisory_lock($1::int, $2::int)", "SELECT pg_try_advisory_lock_shared($1::int, $2::int)" },
};
static const char *const sql_unlock[2][2] = {
	{ "SELECT pg_advisory_unlock($1::bigint)", "SELECT pg_advisory_unlock_shared($1::bigint)" },
	{ "SELECT pg_advisory_unlock($1::int, $2::int)", "SELECT pg_advisory_unlock_shared($1::int, $2::int)" },
};
const char *const pgc__lock_sql_xact_try[2][2] = {
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

/* ---- the per-connection table ----------------------------------------------------------- */

const char *pgc__lock_describe(const pgc_key *key, char *buf, size_t n)
{
	if (pgc_key_describe(key, buf, n) < 0)
		snprintf(buf, n, "?");
	return buf;
}

static size_t held_total(const pgc__lock_table *t)
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
	pgc__lock_table *t = state;
	t->lost_count = held_total(t);
	if (t->nheld > 0)
		pgc__lock_describe(&t->held[0].key, t->lost_first, sizeof t->lost_first);
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
	pgc__lock_table *t = (pgc__lock_table *)state;
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

static void table_free(pgc__lock_table *t)
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
static int release_all(pgc_conn *c, pgc__lock_table *t, pgc_error *err)
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
	pgc__lock_table *t = state;
	(void)release_all(c, t, NULL);
	table_free(t);
}

static const pgc__attach_ops lock_ops = {
	"locks", table_lost, table_close, table_holds, table_loss,
};

pgc__lock_table *pgc__lock_table_of(pgc_conn *conn, pgc_error *err)
{
	pgc__lock_table *t = pgc__attached(conn, &lock_ops);
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

pgc_held_lock *pgc__lock_held_find(pgc__lock_table *t, const pgc_key *key, bool shared)
{
	for (size_t i = 0; i < t->nheld; i++)
		if (t->held[i].shared == shared && pgc_key_equal(&t->held[i].key, key))
			return &t->held[i];
	return NULL;
}

static int held_count(pgc__lock_table *t, const pgc_key *key, bool shared)
{
	pgc_held_lock *h = pgc__lock_held_find(t, key, shared);
	return h ? h->count : 0;
}

/* Records one more acquisition and makes its handle. */
int pgc__lock_held_add(pgc_conn *conn, pgc__lock_table *t, const pgc_key *key, bool shared, pgc_lock **out,
                       pgc_error *err)
{
	pgc_lock *l = calloc(1, sizeof *l);
	if (l == NULL)
		return pgc__err(err, PGC_ENOMEM, "out of memory");
	pgc_held_lock *h = pgc__lock_held_find(t, key, shared);
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

void pgc__lock_held_dec(pgc__lock_table *t, const pgc_key *key, bool shared)
{
	pgc_held_lock *h = pgc__lock_held_find(t, key, shared);
	if (h == NULL)
		return;
	if (--h->count <= 0) {
		size_t i = (size_t)(h - t->held);
		memmove(&t->held[i], &t->held[i + 1], (t->nheld - i - 1) * sizeof *h);
		t->nheld--;
	}
}

static void handle_unlink(pgc__lock_table *t, pgc_lock *l)
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

void pgc__key_params_set(pgc__key_params *p, const pgc_key *key)
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

int pgc__lock_check_key(const pgc_key *key, pgc_error *err)
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
int pgc__lock_answer_bool(PGresult *r, bool *out, pgc_error *err)
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
 * of the session. Each is bounded by PGC__LOCK_STATEMENT_DEADLINE_MS: a server that does not
 * answer by then is treated as gone, and the session is closed (which is also what releases
 * its locks on the server). Returns the result, or NULL with *rc and err set. */
PGresult *pgc__lock_exec_quick(pgc_conn *conn, const char *sql, const pgc__key_params *p, int *rc, pgc_error *err)
{
	pgc__call call = pgc__bound(PGC__LOCK_STATEMENT_DEADLINE_MS, -1);
	call.on_deadline = PGC__DROP;
	call.flags = PGC__CACHED;
	return pgc__query(conn, sql, p->n, p->v, &call, rc, err);
}

/* The pg_locks identity of key as three parameters, in the caller's buffers. */
void pgc__lock_identity_params(const pgc_key *key, char c[16], char o[16], char s[8], const char *p[3])
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
	pgc__lock_identity_params(key, c, o, s, p);
	p[3] = shared ? "ShareLock" : "ExclusiveLock";
	int rc;
	PGresult *r = pgc__exec_cached(conn, sql_granted, 4, p, &rc, err);
	if (r == NULL)
		return rc;
	return pgc__lock_answer_bool(r, out, err);
}

/* ---- acquiring -------------------------------------------------------------------------- */

#define KNOWN_FLAGS                                                                                \
	(PGC_LOCK_SHARED | PGC_LOCK_TRY | PGC_LOCK_NO_REGISTRY | PGC_LOCK_HOLD_XACT | PGC_LOCK_AUTO_SCOPE | \
	 PGC_LOCK_RECORD)
#define TIMEOUT_MAX_MS INT64_C(2147483647) /* lock_timeout's limit, about 24.8 days */

int pgc__lock_check_args(pgc_conn *conn, const pgc_key *key, unsigned flags, int64_t timeout_ms,
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
	int rc = pgc__lock_check_key(key, err);
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
int pgc__lock_wait(pgc_conn *conn, pgc__lock_table *t, const pgc_key *key, bool shared, bool xact,
                   int64_t timeout_ms, int cancel_fd, bool *granted, pgc_error *err)
{
	int pair = key->kind == PGC_KEY_PAIR;
	const char *sql = xact ? sql_xact_wait[pair][shared] : sql_wait[pair][shared];
	int before = xact ? 0 : held_count(t, key, shared);
	*granted = false;
	pgc__key_params kp;
	pgc__key_params_set(&kp, key);
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
	pgc__lock_describe(key, d, sizeof d);
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
static int choose_scope(pgc_conn *conn, pgc__lock_table *t, unsigned flags, bool *hold, pgc_error *err)
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
	int rc = pgc__lock_check_args(conn, key, opts->flags, opts->timeout_ms, "pgc_lock_acquire", err);
	if (rc != PGC_OK)
		return rc;
	pgc__lock_table *t = pgc__lock_table_of(conn, err);
	if (t == NULL)
		return PGC_ENOMEM;
	bool hold;
	if ((rc = choose_scope(conn, t, opts->flags, &hold, err)) != PGC_OK)
		return rc;
	if ((rc = pgc__lock_registry_check(conn, t, key, opts->flags, opts->schema, err)) != PGC_OK)
		return rc;
	if (hold)
		return pgc__lock_hold_acquire(conn, t, key, opts, out, err);
	bool shared = (opts->flags & PGC_LOCK_SHARED) != 0;
	int pair = key->kind == PGC_KEY_PAIR;

	if ((opts->flags & PGC_LOCK_TRY) || opts->timeout_ms == 0) {
		pgc__key_params kp;
		pgc__key_params_set(&kp, key);
		PGresult *r = pgc__lock_exec_quick(conn, sql_try[pair][shared], &kp, &rc, err);
		if (r == NULL)
			return rc;
		bool got;
		if ((rc = pgc__lock_answer_bool(r, &got, err)) != PGC_OK)
			return rc;
		if (!got) {
			char d[PGC_KEY_NAME_MAX + 64];
			return pgc__err(err, PGC_EBUSY, "lock %s is held by another session", pgc__lock_describe(key, d, sizeof d));
		}
		if ((rc = pgc__lock_held_add(conn, t, key, shared, out, err)) != PGC_OK)
			return rc;
		return (opts->flags & PGC_LOCK_RECORD) ? pgc__lock_recorded_or_released(conn, t, out, opts->schema, err) : PGC_OK;
	}

	bool granted;
	rc = pgc__lock_wait(conn, t, key, shared, false, opts->timeout_ms, opts->cancel_fd, &granted, err);
	if (granted) {
		pgc_error keep;
		if (rc != PGC_OK && err != NULL)
			keep = *err;
		int arc = pgc__lock_held_add(conn, t, key, shared, out, err);
		if (arc != PGC_OK)
			return arc;
		if (rc == PGC_OK && (opts->flags & PGC_LOCK_RECORD))
			return pgc__lock_recorded_or_released(conn, t, out, opts->schema, err);
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

void pgc__lock_handle_free(pgc_lock *l)
{
	pgc__lock_table *t = l->conn ? pgc__attached(l->conn, &lock_ops) : NULL;
	if (t != NULL) {
		handle_unlink(t, l);
		if (t->hold == l)
			t->hold = NULL;
	}
	free(l->recorded);
	free(l);
}


int pgc_lock_release(pgc_lock *lock, pgc_error *err)
{
	pgc_error_clear(err);
	if (lock == NULL)
		return pgc__err(err, PGC_EUSAGE, "pgc_lock_release: lock must not be NULL");
	pgc_conn *conn = lock->conn;
	pgc__lock_table *t = pgc__attached(conn, &lock_ops);
	char d[PGC_KEY_NAME_MAX + 64];
	pgc__lock_describe(&lock->key, d, sizeof d);
	int rc;
	if (!lock->lost && !pgc__conn_ok(conn))
		pgc__session_lost(conn, "connection to the server lost");
	if (lock->lost) {
		pgc__lock_handle_free(lock);
		return pgc__err(err, PGC_ELOCKLOST, "lock %s was lost: its session ended", d);
	}
	if (pgc__busy(conn) || pgc__tx_status(conn) == PQTRANS_ACTIVE) {
		/* Keep the handle: the caller can release it once the connection is free. */
		return pgc__err(err, PGC_EUSAGE, "pgc_lock_release: the connection is busy with another command");
	}
	if (lock->hold)
		return pgc__lock_hold_release(lock, t, d, err);
	if (pgc__tx_status(conn) == PQTRANS_INERROR) {
		/* The failed transaction can only end in a rollback; doing it here is what keeps
		 * "current transaction is aborted" from leaking the session lock. */
		if (!pgc__rollback(conn)) {
			pgc__lock_handle_free(lock);
			return pgc__err(err, PGC_ELOCKLOST, "lock %s was lost: its session ended", d);
		}
	}
	pgc__key_params kp;
	pgc__key_params_set(&kp, &lock->key);
	int pair = lock->key.kind == PGC_KEY_PAIR;
	pgc__clear_notice(conn);
	PGresult *r = pgc__lock_exec_quick(conn, sql_unlock[pair][lock->shared], &kp, &rc, err);
	if (r == NULL) {
		if (!pgc__conn_ok(conn))
			rc = pgc__err(err, PGC_ELOCKLOST, "lock %s was lost: its session ended", d);
		pgc__lock_handle_free(lock);
		return rc;
	}
	bool ok;
	if ((rc = pgc__lock_answer_bool(r, &ok, err)) != PGC_OK) {
		/* Not known whether the server let go: the session is not to be trusted. */
		pgc__drop(conn);
		pgc__session_lost(conn, "an unexpected answer to an unlock");
		pgc__lock_handle_free(lock);
		return rc;
	}
	pgc__lock_held_dec(t, &lock->key, lock->shared);
	bool shared = lock->shared;
	if (ok && lock->recorded != NULL && pgc__lock_held_find(t, &lock->key, lock->shared) == NULL)
		pgc__lock_hold_forget(conn, lock);
	pgc__lock_handle_free(lock);
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
	const pgc__lock_table *t = pgc__attached(conn, &lock_ops);
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
	pgc__lock_table *t = pgc__attached(conn, &lock_ops);
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
		snprintf(msg, sizeof msg, "lock %s lost%s", pgc__lock_describe(&lock->key, d, sizeof d),
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
		return pgc__err(err, PGC_ELOCKLOST, "lock %s was lost: its session ended",
		                pgc__lock_describe(&lock->key, d, sizeof d));
	int rc = pgc_conn_check(lock->conn, heartbeat_timeout_ms, err);
	if (rc != PGC_OK || lock->lost)
		return watch_lost(lock, rc, err);
	if (lock->hold && pgc__tx_status(lock->conn) != PQTRANS_INTRANS) {
		/* The held transaction failed (a cancel during a heartbeat) or ended: the lock goes
		 * with it. End it now, so that the lock is free for the next holder at once. */
		(void)pgc__rollback(lock->conn);
		pgc__lock_table *t = pgc__attached(lock->conn, &lock_ops);
		if (t != NULL)
			table_lost(lock->conn, t, "its transaction failed");
		return pgc__err(err, PGC_ELOCKLOST, "lock %s lost: its transaction failed (a cancelled heartbeat?)",
		                pgc__lock_describe(&lock->key, d, sizeof d));
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
		return pgc__err(err, PGC_ELOCKLOST, "lock %s was lost: its session ended",
		                pgc__lock_describe(&lock->key, d, sizeof d));
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


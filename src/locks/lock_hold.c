/* lock_hold.c - a lock held in a transaction of its own (PGC_LOCK_HOLD_XACT), and the record
 * of when a session lock was taken (PGC_LOCK_RECORD)
 *
 * The held transaction is how a lock is kept through a transaction-mode pooler: lock.c's
 * pgc_lock_acquire_ex() sends it here when its pooler check (or the caller) says so, and
 * pgc_lock_release() sends the handle back here to end it. The record is the row of the
 * schema's lock_holds that says when this session took a key, written after the first
 * acquisition and deleted after the last release.
 *
 * Relies on lock.c's invariants: the connection's table (pgc__lock_table) counts acquisitions
 * as the server does, so an entry is added (pgc__lock_held_add) only once the server has granted
 * the lock and removed (pgc__lock_held_dec) only on its definite answer; at most one held
 * transaction per connection (t->hold), whose COMMIT is the release; a lost session has already
 * marked every handle lost and emptied the table (lock.c's table_lost). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "locks_int.h"

/* ---- the held transaction (PGC_LOCK_HOLD_XACT) ------------------------------------------ */

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

/* PGC_LOCK_HOLD_XACT: a transaction of its own that holds a transaction lock until release. */
int pgc__lock_hold_acquire(pgc_conn *conn, pgc__lock_table *t, const pgc_key *key, const pgc_lock_options *opts,
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
		pgc__key_params kp;
		pgc__key_params_set(&kp, key);
		PGresult *r = pgc__lock_exec_quick(conn, pgc__lock_sql_xact_try[pair][shared], &kp, &rc, err);
		bool got = false;
		if (r != NULL)
			rc = pgc__lock_answer_bool(r, &got, err);
		if (!got) {
			(void)pgc__rollback(conn);
			if (r == NULL || rc != PGC_OK)
				return rc;
			char d[PGC_KEY_NAME_MAX + 64];
			return pgc__err(err, PGC_EBUSY, "lock %s is held by another session", pgc__lock_describe(key, d, sizeof d));
		}
	} else {
		bool granted;
		rc = pgc__lock_wait(conn, t, key, shared, true, opts->timeout_ms, opts->cancel_fd, &granted, err);
		if (rc != PGC_OK) {
			(void)pgc__rollback(conn);
			return rc;
		}
	}
	/* The lock statement's portal would keep its snapshot while the transaction sits idle:
	 * a statement in the simple protocol drops it. */
	if ((rc = pgc__command(conn, "SELECT 1", err)) != PGC_OK ||
	    (rc = pgc__lock_held_add(conn, t, key, shared, out, err)) != PGC_OK) {
		(void)pgc__rollback(conn);
		return rc;
	}
	(*out)->hold = true;
	t->hold = *out;
	return PGC_OK;
}

/* The held transaction ends: its COMMIT, answered, proves the lock was held until then. */
int pgc__lock_hold_release(pgc_lock *lock, pgc__lock_table *t, const char *d, pgc_error *err)
{
	pgc_conn *conn = lock->conn;
	PGTransactionStatusType st = pgc__tx_status(conn);
	int rc;
	if (st != PQTRANS_INTRANS) {
		/* Aborted (a cancel hit a heartbeat) or ended behind our back: the lock was or is
		 * being lost; end what is left. */
		(void)pgc__rollback(conn);
		pgc__lock_held_dec(t, &lock->key, lock->shared);
		pgc__lock_handle_free(lock);
		return pgc__err(err, PGC_ELOCKLOST, "lock %s was lost: its transaction %s", d,
		                st == PQTRANS_INERROR ? "failed" : "ended");
	}
	pgc__call call = pgc__bound(PGC__LOCK_STATEMENT_DEADLINE_MS, -1);
	call.on_deadline = PGC__DROP;
	call.flags = PGC__SIMPLE;
	PGresult *r = pgc__query(conn, "COMMIT", 0, NULL, &call, &rc, err);
	bool committed = r != NULL && strcmp(PQcmdStatus(r), "COMMIT") == 0;
	PQclear(r);
	pgc__lock_held_dec(t, &lock->key, lock->shared);
	pgc__lock_handle_free(lock);
	if (!committed) {
		if (!pgc__conn_ok(conn))
			return pgc__err(err, PGC_ELOCKLOST, "lock %s was lost: its session ended", d);
		return pgc__err(err, PGC_ELOCKLOST, "lock %s was lost: its transaction had failed", d);
	}
	return PGC_OK;
}

/* ---- when a lock was taken (PGC_LOCK_RECORD) -------------------------------------------- */

/* The session's row for the key (SQL lock_hold_record(), which first deletes the rows of
 * sessions that are gone), and its removal after the last release. */
static const char sql_hold_record[] = "SELECT @S@.lock_hold_record($1::oid, $2::oid, $3::int2)";
static const char sql_hold_forget[] = "SELECT @S@.lock_hold_forget($1::oid, $2::oid, $3::int2)";

/* Whether schema has a lock_holds (it is older than the recording, or not installed, when not),
 * remembered in cache (the session's lock table, or NULL) until the session changes. *quoted
 * (PQfreemem) is the quoted schema name when it has. */
int pgc__lock_holds_present(pgc_conn *conn, pgc__lock_table *cache, const char *schema, char **quoted,
                            bool *present, pgc_error *err)
{
	*present = false;
	*quoted = NULL;
	int rc = pgc__check_schema(schema, err);
	if (rc != PGC_OK)
		return rc;
	if (cache == NULL || cache->holds == 0 || strcmp(cache->holds_schema, schema) != 0) {
		const char *p[2] = { schema, "lock_holds" };
		PGresult *r = pgc__exec_cached(conn, pgc__lock_sql_table_exists, 2, p, &rc, err);
		if (r == NULL || (rc = pgc__lock_answer_bool(r, present, err)) != PGC_OK)
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
static int holds_exec(pgc_conn *conn, pgc__lock_table *t, const char *schema, const char *tmpl,
                      const pgc_key *key, char **quoted_out, pgc_error *err)
{
	char *q;
	bool present;
	int rc = pgc__lock_holds_present(conn, t, schema, &q, &present, err);
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
	pgc__lock_identity_params(key, c, o, sub, p);
	/* In the caller's transaction a failure must cost only this statement. */
	pgc__call call = pgc__bound(PGC__LOCK_STATEMENT_DEADLINE_MS, -1);
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
static int hold_record(pgc_conn *conn, pgc__lock_table *t, pgc_lock *l, const char *schema, pgc_error *err)
{
	pgc_held_lock *h = pgc__lock_held_find(t, &l->key, l->shared);
	if (h == NULL || h->count != 1)
		return PGC_OK; /* stacked: the first acquisition's time stands */
	return holds_exec(conn, t, schema ? schema : PGC_SCHEMA_DEFAULT, sql_hold_record, &l->key,
	                  &l->recorded, err);
}

/* Records the acquisition in *out; when that fails, the lock is given back (the caller gets
 * the error and no lock it does not know about). */
int pgc__lock_recorded_or_released(pgc_conn *conn, pgc__lock_table *t, pgc_lock **out, const char *schema,
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

/* The lock is no longer held by this session: its row goes. A failure leaves a row that the
 * holders query ignores (it joins rows to granted locks only) and that the next recording of
 * the key by this session replaces. */
void pgc__lock_hold_forget(pgc_conn *conn, const pgc_lock *lock)
{
	char *sql = pgc__sql_schema(sql_hold_forget, lock->recorded);
	if (sql == NULL)
		return;
	char c[16], o[16], sub[8];
	const char *p[3];
	pgc__lock_identity_params(&lock->key, c, o, sub, p);
	pgc__call call = pgc__bound(PGC__LOCK_STATEMENT_DEADLINE_MS, -1);
	call.on_deadline = PGC__DROP;
	call.flags = PGC__CACHED | PGC__SAVEPOINT;
	int rc;
	pgc_error ignore;
	PQclear(pgc__query(conn, sql, 3, p, &call, &rc, &ignore));
	free(sql);
}

/* lock_xact.c - transaction advisory locks: one (pgc_xact_lock), or many at once in one order
 * (pgc_xact_lock_many)
 *
 * The server releases a transaction lock when the caller's transaction ends, so nothing is kept
 * in the connection's table: the table is only the place of the name registry's cache. Taking
 * many keys sorts them into one canonical order (so that two callers cannot deadlock on them)
 * and takes them under a savepoint, all or nothing.
 *
 * Relies on lock.c's invariants: the arguments are checked as for a session lock
 * (pgc__lock_check_args); a waiting lock runs under its own lock_timeout with statement_timeout
 * off, in a savepoint (pgc__lock_wait), so "timed out" means nothing held and nothing queued. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "locks_int.h"

static int xact_one(pgc_conn *conn, pgc__lock_table *t, const pgc_key *key, unsigned flags,
                    int64_t timeout_ms, pgc_error *err)
{
	bool shared = (flags & PGC_LOCK_SHARED) != 0;
	int pair = key->kind == PGC_KEY_PAIR;
	int rc;
	if ((flags & PGC_LOCK_TRY) || timeout_ms == 0) {
		pgc__key_params kp;
		pgc__key_params_set(&kp, key);
		PGresult *r = pgc__exec_cached(conn, pgc__lock_sql_xact_try[pair][shared], kp.n, kp.v, &rc, err);
		if (r == NULL)
			return rc;
		bool got;
		if ((rc = pgc__lock_answer_bool(r, &got, err)) != PGC_OK)
			return rc;
		if (!got) {
			char d[PGC_KEY_NAME_MAX + 64];
			return pgc__err(err, PGC_EBUSY, "lock %s is held by another session", pgc__lock_describe(key, d, sizeof d));
		}
		return PGC_OK;
	}
	bool granted;
	return pgc__lock_wait(conn, t, key, shared, true, timeout_ms, -1, &granted, err);
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
	int rc = pgc__lock_check_args(conn, key, flags, timeout_ms, "pgc_xact_lock", err);
	if (rc != PGC_OK || (rc = xact_check(conn, "pgc_xact_lock", flags, err)) != PGC_OK)
		return rc;
	pgc__lock_table *t = pgc__lock_table_of(conn, err);
	if (t == NULL)
		return PGC_ENOMEM;
	if ((rc = pgc__lock_registry_check(conn, t, key, flags, NULL, err)) != PGC_OK)
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
	int rc = pgc__lock_check_args(conn, &keys[0], flags, timeout_ms, "pgc_xact_lock_many", err);
	if (rc != PGC_OK || (rc = xact_check(conn, "pgc_xact_lock_many", flags, err)) != PGC_OK)
		return rc;
	for (size_t i = 1; i < n; i++)
		if ((rc = pgc__lock_check_key(&keys[i], err)) != PGC_OK)
			return rc;
	pgc__lock_table *t = pgc__lock_table_of(conn, err);
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
		rc = pgc__lock_registry_check(conn, t, &sorted[i], flags, NULL, err);
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
				              (long long)timeout_ms, pgc__lock_describe(&sorted[i], d, sizeof d));
				break;
			}
		}
		rc = xact_one(conn, t, &sorted[i], flags, left, err);
		if (rc == PGC_ETIMEDOUT && err != NULL && timeout_ms > 0) {
			char d[PGC_KEY_NAME_MAX + 64];
			pgc__err(err, PGC_ETIMEDOUT, "timed out after %lld ms waiting for lock %s (%zu of %zu)",
			         (long long)timeout_ms, pgc__lock_describe(&sorted[i], d, sizeof d), i + 1, m);
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


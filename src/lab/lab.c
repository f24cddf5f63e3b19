/* lab.c - the lab's catalogue and its runner
 *
 * The runner opens an observer session, creates the scratch schema, runs the experiment,
 * closes every session the experiment opened (which ends whatever they still hold) and drops
 * the schema. The experiments live one file per topic (lab_advisory.c, lab_tables.c,
 * lab_rows.c, lab_queue.c, lab_patterns.c); how they talk to the server is lab_session.c, how
 * they record what they saw is lab_record.c. */
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "lab_int.h"

/* The catalogue, in the order pgcoord lab runs it. Each claim names where the PostgreSQL
 * manual says it (chapter 13, "Concurrency Control", keeps its numbers across releases; other
 * pages by name), or, where the manual does not, the pattern it belongs to. */
static const struct {
	pgc_lab_info info;
	lab_fn fn;
} catalogue[] = {
	{ { "singleton", "five contenders try one session lock; exactly one runs the job",
	    "explicit locking, 13.3.5 advisory locks" }, lab_exp_singleton },
	{ { "pool-trap", "an unlock from another session returns false; the lock stays held",
	    "advisory lock functions (pg_advisory_unlock)" }, lab_exp_pool_trap },
	{ { "xact-rollback", "a transaction-level advisory lock is released by rollback",
	    "explicit locking, 13.3.5 advisory locks (transaction-level locks)" },
	  lab_exp_xact_rollback },
	{ { "stacked-unlock", "a session lock taken twice needs two unlocks",
	    "explicit locking, 13.3.5 advisory locks (session-level requests stack)" },
	  lab_exp_stacked_unlock },
	{ { "session-end", "a leaked session lock disappears when its session ends",
	    "explicit locking, 13.3.5 advisory locks (held until released or the session ends)" },
	  lab_exp_session_end },
	{ { "mvcc-read", "a plain SELECT does not wait for an uncommitted UPDATE; it sees the old row",
	    "concurrency control, 13.1 introduction (reading never blocks writing)" },
	  lab_exp_mvcc_read },
	{ { "oversell", "read-then-write oversells under concurrency; UPDATE ... WHERE stock > 0 never does",
	    "concurrency control, 13.2.1 read committed isolation level (UPDATE re-checks WHERE)" },
	  lab_exp_oversell },
	{ { "table-lock-matrix", "the 8x8 table-lock conflicts, measured with LOCK TABLE ... NOWAIT pairs",
	    "explicit locking, 13.3.1 table-level locks (conflicting lock modes)" },
	  lab_exp_table_lock_matrix },
	{ { "lock-table-needs-tx", "LOCK TABLE outside a transaction block is an error",
	    "SQL commands, LOCK (only in a transaction block)" }, lab_exp_lock_table_needs_tx },
	{ { "lock-table-default", "LOCK TABLE without a mode takes ACCESS EXCLUSIVE",
	    "SQL commands, LOCK (the default mode)" }, lab_exp_lock_table_default },
	{ { "row-lock-matrix", "the 4x4 row-lock conflicts, measured with SELECT ... NOWAIT pairs",
	    "explicit locking, 13.3.2 row-level locks (conflicting row-level locks)" },
	  lab_exp_row_lock_matrix },
	{ { "row-lock-self", "a transaction never conflicts with itself and can strengthen its row lock",
	    "explicit locking, 13.3.2 row-level locks" }, lab_exp_row_lock_self },
	{ { "key-share", "a non-key UPDATE coexists with FOR KEY SHARE; a DELETE waits",
	    "explicit locking, 13.3.2 row-level locks (FOR KEY SHARE)" }, lab_exp_key_share },
	{ { "fk-insert", "a child INSERT waits for a parent FOR UPDATE, not for a non-key UPDATE",
	    "explicit locking, 13.3.2 row-level locks (FOR KEY SHARE, as foreign keys take it)" },
	  lab_exp_fk_insert },
	{ { "nowait", "NOWAIT fails with 55P03 and aborts the transaction; a savepoint keeps it usable",
	    "SQL commands, SELECT: the locking clause (NOWAIT); SAVEPOINT" }, lab_exp_nowait },
	{ { "for-update-of", "FOR UPDATE OF o locks only orders; without OF the joined customers too",
	    "SQL commands, SELECT: the locking clause (OF)" }, lab_exp_for_update_of },
	{ { "limit-offset", "LIMIT locks only returned rows; rows skipped by OFFSET are locked too",
	    "SQL commands, SELECT: the locking clause (with LIMIT and OFFSET)" },
	  lab_exp_limit_offset },
	{ { "cte-lock", "a top-level FOR UPDATE does not lock a WITH query's rows; FOR UPDATE inside it does",
	    "SQL commands, SELECT: the locking clause (WITH queries)" }, lab_exp_cte_lock },
	{ { "lock-shape", "FOR UPDATE with GROUP BY, DISTINCT, aggregates, windows or UNION is rejected",
	    "SQL commands, SELECT: the locking clause (where it cannot be used)" },
	  lab_exp_lock_shape },
	{ { "recheck", "after a wait, READ COMMITTED returns the new row or none; REPEATABLE READ fails 40001",
	    "concurrency control, 13.2.1 read committed and 13.2.2 repeatable read isolation levels" },
	  lab_exp_recheck },
	{ { "savepoint-locks", "locks taken after a savepoint are released by ROLLBACK TO; earlier ones stay",
	    "SQL commands, ROLLBACK TO SAVEPOINT" }, lab_exp_savepoint_locks },
	{ { "unique-email", "check-then-insert with FOR UPDATE admits duplicates; ON CONFLICT lets one win",
	    "SQL commands, INSERT: ON CONFLICT; 13.2.1 read committed isolation level" },
	  lab_exp_unique_email },
	{ { "deadlock", "a lock cycle is detected (40P01), one victim; the same work in global order completes",
	    "explicit locking, 13.3.4 deadlocks" }, lab_exp_deadlock },
	{ { "advisory-shared", "shared advisory locks coexist; an exclusive one waits for them",
	    "advisory lock functions (shared and exclusive locks)" }, lab_exp_adv_shared },
	{ { "advisory-keyspaces", "the bigint and the int4-pair advisory key spaces are separate",
	    "advisory lock functions (bigint and int4-pair keys); the pg_locks view" },
	  lab_exp_adv_keyspaces },
	{ { "advisory-rollback", "a session advisory lock survives the rollback of its transaction",
	    "explicit locking, 13.3.5 advisory locks (session-level locks ignore transactions)" },
	  lab_exp_adv_rollback },
	{ { "advisory-xact-autocommit", "pg_advisory_xact_lock in autocommit is released at once",
	    "explicit locking, 13.3.5 advisory locks (transaction-level locks)" },
	  lab_exp_adv_xact_autocommit },
	{ { "advisory-limit", "a lock function evaluated before LIMIT locks every row; the subquery form locks LIMIT",
	    "explicit locking, 13.3.5 advisory locks (the LIMIT example)" }, lab_exp_adv_limit },
	{ { "skip-locked", "concurrent workers claim disjoint jobs with FOR UPDATE SKIP LOCKED",
	    "SQL commands, SELECT: the locking clause (SKIP LOCKED)" }, lab_exp_skip_locked },
	{ { "stale-completion", "completing a job with a stale owner updates zero rows",
	    "a job queue pattern: the completion checks the claim's owner" },
	  lab_exp_stale_completion },
	{ { "lease-recovery", "a job whose lease expired is recovered and claimed again",
	    "a job queue pattern: a reaper puts back claims whose lease expired" },
	  lab_exp_lease_recovery },
	{ { "blocking-pids", "pg_blocking_pids names an idle-in-transaction blocker",
	    "system information functions (pg_blocking_pids); pg_stat_activity" },
	  lab_exp_blocking_pids },
	{ { "cancel-terminate", "pg_cancel_backend keeps the session; pg_terminate_backend ends it and frees its locks",
	    "server signaling functions (pg_cancel_backend, pg_terminate_backend)" },
	  lab_exp_cancel_terminate },
	{ { "strong-lock-queue", "ALTER TABLE waits behind a reader; a new SELECT queues behind the ALTER",
	    "explicit locking, 13.3.1 table-level locks; SQL commands, ALTER TABLE" },
	  lab_exp_strong_lock_queue },
	{ { "lockrows-plan", "SELECT ... FOR UPDATE adds a LockRows node to the plan",
	    "SQL commands, EXPLAIN" }, lab_exp_lockrows_plan },
	{ { "row-locks-memory", "locking 100,000 rows FOR UPDATE adds no per-row entries to pg_locks",
	    "explicit locking, 13.3.2 row-level locks (row locks are not kept in memory)" },
	  lab_exp_row_locks_memory },
	{ { "row-wait-xid", "a row-lock waiter shows up as a ShareLock request on a transactionid",
	    "the pg_locks view (a row-lock wait is a wait for a transaction id)" },
	  lab_exp_row_wait_xid },
	{ { "lock-timeout", "lock_timeout ends a lock wait with 55P03",
	    "client connection defaults, statement behavior (lock_timeout)" },
	  lab_exp_lock_timeout },
	{ { "statement-timeout", "statement_timeout ends a long statement with 57014",
	    "client connection defaults, statement behavior (statement_timeout)" },
	  lab_exp_statement_timeout },
	{ { "write-skew", "two doctors each go off duty seeing the other on: both do under READ COMMITTED; SERIALIZABLE stops one with 40001",
	    "concurrency control, 13.2.3 serializable isolation level" }, lab_exp_write_skew },
	{ { "optimistic-version", "UPDATE ... WHERE v = $2 changes zero rows for the second writer; the first writer's change stands",
	    "concurrency control, 13.2.1 read committed isolation level (UPDATE re-checks WHERE)" },
	  lab_exp_optimistic_version },
	{ { "hot-upsert", "upserts of one hot key serialise on its row lock; distinct keys never wait",
	    "SQL commands, INSERT: ON CONFLICT DO UPDATE" }, lab_exp_hot_upsert },
	{ { "nowait-table-lock", "behind a table lock FOR UPDATE NOWAIT and SKIP LOCKED still wait; LOCK TABLE ... NOWAIT does not",
	    "SQL commands, SELECT: the locking clause (NOWAIT and SKIP LOCKED apply to rows); 13.3.1 table-level locks" },
	  lab_exp_nowait_table_lock },
	{ { "deadlock-timeout", "the deadlock check runs only after deadlock_timeout: 40P01 comes after 200 ms, then 1 s",
	    "server configuration, 20.12 lock management (deadlock_timeout)" },
	  lab_exp_deadlock_timeout },
	{ { "idle-in-tx-timeout", "idle_in_transaction_session_timeout ends an idle holder and frees its row for the waiter",
	    "server configuration, 20.11 client connection defaults (idle_in_transaction_session_timeout)" },
	  lab_exp_idle_in_tx_timeout },
	{ { "advisory-exhaust", "session advisory locks fill the shared lock table (53200) where rows FOR UPDATE do not",
	    "explicit locking, 13.3.5 advisory locks (the shared memory pool); 20.12 lock management (max_locks_per_transaction)" },
	  lab_exp_advisory_exhaust },
};

#define CATALOGUE_N (sizeof catalogue / sizeof catalogue[0])

static pgc_lab_info infos[CATALOGUE_N];
static pthread_once_t infos_once = PTHREAD_ONCE_INIT;

static void infos_init(void)
{
	for (size_t i = 0; i < CATALOGUE_N; i++)
		infos[i] = catalogue[i].info;
}

const pgc_lab_info *pgc_lab_list(size_t *count)
{
	pthread_once(&infos_once, infos_init);
	if (count != NULL)
		*count = CATALOGUE_N;
	return infos;
}

const pgc_lab_info *pgc_lab_find(const char *name)
{
	if (name == NULL)
		return NULL;
	pthread_once(&infos_once, infos_init);
	for (size_t i = 0; i < CATALOGUE_N; i++)
		if (strcmp(infos[i].name, name) == 0)
			return &infos[i];
	return NULL;
}

const pgc_lab_value *pgc_lab_value_get(const pgc_lab_result *result, const char *name)
{
	if (result == NULL || name == NULL)
		return NULL;
	for (int i = 0; i < result->nvalues && i < PGC_LAB_VALUES_MAX; i++)
		if (strcmp(result->values[i].name, name) == 0)
			return &result->values[i];
	return NULL;
}

/* ---- the runner ---- */

int pgc_lab_run(const char *dsn, const char *name, const pgc_lab_options *opts,
                pgc_lab_result *out, pgc_error *err)
{
	pgc_error_clear(err);
	if (name == NULL || out == NULL)
		return pgc__err(err, PGC_EUSAGE, "pgc_lab_run: name and out must not be NULL");
	pgc_lab_options defaults = PGC_LAB_OPTIONS_INIT;
	if (opts == NULL)
		opts = &defaults;
	if (opts->lock_timeout_ms < 100 || opts->lock_timeout_ms > 600000)
		return pgc__err(err, PGC_EUSAGE,
		                "pgc_lab_run: lock_timeout_ms must be between 100 and 600000, not %d",
		                opts->lock_timeout_ms);
	if (opts->key_base < 0 || opts->key_base > INT64_MAX - 1000)
		return pgc__err(err, PGC_EUSAGE, "pgc_lab_run: key_base must be between 0 and 2^63 - 1001");
	memset(out, 0, sizeof *out);
	size_t idx = 0;
	pgc_lab_list(NULL);
	while (idx < CATALOGUE_N && strcmp(infos[idx].name, name) != 0)
		idx++;
	if (idx == CATALOGUE_N)
		return pgc__err(err, PGC_ENOTFOUND, "no experiment named \"%.64s\"", name);

	lab *L = calloc(1, sizeof *L);
	if (L == NULL)
		return pgc__err(err, PGC_ENOMEM, "out of memory");
	L->dsn = dsn;
	L->info = &infos[idx];
	L->opts = *opts;
	if (L->opts.application_name == NULL)
		L->opts.application_name = "pgcoord/lab";
	L->res = out;
	out->info = L->info;
	pthread_mutex_init(&L->mu, NULL);
	pthread_condattr_t ca;
	pthread_condattr_init(&ca);
	pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
	pthread_cond_init(&L->cv, &ca);
	pthread_condattr_destroy(&ca);
	L->started_ms = pgc__now_ms();

	int rc = PGC_OK;
	lab_sess *obs = lab_open_observer(L);
	if (obs == NULL) {
		/* Nothing was created: the experiment could not start at all. */
		if (L->connect_err.code != PGC_OK) {
			rc = L->connect_err.code;
			if (err != NULL)
				*err = L->connect_err;
		} else {
			rc = pgc__err(err, PGC_ECONNECT, "%s", out->observation);
		}
		goto done;
	}
	L->obs = obs;
	L->key_base = opts->key_base != 0 ? opts->key_base : ((int64_t)obs->pid << 32) + 612001;
	snprintf(L->schema, sizeof L->schema, "pgc_lab_%s_%d", L->info->name, obs->pid);
	for (char *p = L->schema; *p; p++)
		if (*p == '-')
			*p = '_';
	snprintf(out->schema, sizeof out->schema, "%s", L->schema);
	pgc_error qerr = PGC_ERROR_INIT;
	L->qschema = pgc__quote_ident(obs->conn, L->schema, &qerr);
	if (L->qschema == NULL) {
		lab_fail(L, "cannot quote the schema name: %s", qerr.message);
	} else {
		char sql[200];
		snprintf(sql, sizeof sql, "CREATE SCHEMA %s", L->qschema);
		if (lab_exec(L, obs, sql))
			catalogue[idx].fn(L);
	}
	if (!L->failed && !L->verdict_set)
		lab_fail(L, "internal: the experiment ended without a verdict");
	if (L->failed)
		out->passed = false;

	/* Close the experiment's sessions first: whatever they hold ends with them. */
	for (int i = 1; i < L->nsess; i++)
		lab_close(L, &L->sess[i]);
	if (L->qschema != NULL && obs->conn != NULL) {
		if (opts->keep) {
			out->schema_kept = true;
		} else {
			char sql[200], state[6];
			snprintf(sql, sizeof sql, "DROP SCHEMA IF EXISTS %s CASCADE", L->qschema);
			bool was_failed = L->failed;
			if (lab_try(L, obs, sql, state) && state[0] != '\0') {
				if (out->passed) {
					out->passed = false;
					snprintf(out->observation, sizeof out->observation,
					         "cleanup: cannot drop schema %s: %s (SQLSTATE %s)", L->schema,
					         obs->lasterr, state);
				}
				out->schema_kept = true;
			} else if (!was_failed && L->failed) {
				out->passed = false;
				out->schema_kept = true;
			}
		}
	}
done:
	for (int i = 0; i < L->nsess; i++)
		lab_close(L, &L->sess[i]);
	if (L->qschema != NULL)
		PQfreemem(L->qschema);
	out->elapsed_ms = pgc__now_ms() - L->started_ms;
	pthread_cond_destroy(&L->cv);
	pthread_mutex_destroy(&L->mu);
	free(L);
	return rc;
}

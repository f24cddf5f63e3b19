/* lab_internal.h - what the lab's experiments share: sessions, bounded waits, verdicts
 *
 * An experiment is a function void exp_x(lab *L). It opens sessions with lab_open(), talks to
 * them only through the helpers below (every statement goes through the connection layer: sent
 * asynchronously and collected against a client-side deadline, on top of the server-side
 * lock_timeout/statement_timeout), records values with lab_vint()/lab_vbool()/lab_vtext() and
 * ends with lab_verdict(). When a helper returns false the failure is already recorded (first
 * one wins) and the experiment just returns: the runner turns it into a FAIL with that message
 * and cleans up. */
#ifndef PGCOORD_LAB_INTERNAL_H
#define PGCOORD_LAB_INTERNAL_H

#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>

#include "conn/conn_int.h"

#define LAB_SESSIONS_MAX 10

typedef struct lab_sess {
	pgc_conn *conn;      /* NULL once closed */
	int pid;             /* backend pid */
	char label[8];       /* "A", "B", ...; "lab" for the observer */
	char lasterr[256];   /* the last server error, one line */
} lab_sess;

typedef struct lab {
	const char *dsn;
	const pgc_lab_info *info;
	pgc_lab_options opts;
	pgc_lab_result *res;
	lab_sess *obs;                      /* the observer: creates the schema, reads pg_locks */
	lab_sess sess[LAB_SESSIONS_MAX];
	int nsess;
	char schema[64];
	char *qschema;                      /* schema, quoted (pgc__quote_ident) */
	int64_t key_base;                   /* (observer pid << 32) + 612001 */
	pthread_mutex_t mu;                 /* guards failure recording and the barrier */
	pthread_cond_t cv;
	int barrier_n, barrier_count;
	unsigned barrier_gen;
	bool failed;
	bool verdict_set;
	pgc_error connect_err;              /* why the last session could not connect */
	int64_t started_ms;
} lab;

typedef void (*lab_fn)(lab *L);

/* Records a failure (the first one wins; later ones are ignored). Thread-safe. */
void lab_fail(lab *L, const char *fmt, ...) PGC_PRINTF(2, 3);
bool lab_failed(lab *L);

/* The verdict and the one-line observation. */
void lab_verdict(lab *L, bool pass, const char *fmt, ...) PGC_PRINTF(3, 4);

/* Observed values, in the order recorded. Thread-safe. */
void lab_vint(lab *L, const char *name, long long v);
void lab_vbool(lab *L, const char *name, bool v);
void lab_vtext(lab *L, const char *name, const char *v);

/* ---- sessions and statements (lab_session.c) ---- */

/* Opens a new session (labelled A, B, C, ... in order) with search_path set to the scratch
 * schema, lock_timeout = opts.lock_timeout_ms and statement_timeout = that + 5 s. NULL on
 * failure (recorded). Not thread-safe: open sessions before starting threads. */
lab_sess *lab_open(lab *L);
/* The runner's observer, labelled "lab": the same timeouts, the default search_path. */
lab_sess *lab_open_observer(lab *L);
/* Closes a session early (its session locks go with it). */
void lab_close(lab *L, lab_sess *s);

/* Sends sql (with optional text parameters) without waiting. Without parameters (nparams 0,
 * params NULL) sql may hold several statements separated by semicolons. */
bool lab_send(lab *L, lab_sess *s, const char *sql, int nparams, const char *const *params);
/* Waits for the result of what was sent, at most timeout_ms (0: the lock timeout + 7 s).
 * state receives "" on success or the SQLSTATE of the error (the message is in s->lasterr);
 * *out (out may be NULL) the result on success (NULL after an error), which the caller
 * PQclear()s. false on a client-side failure (deadline passed: the query is cancelled, and
 * the session closed when the cancel is not answered; connection lost), which is recorded. */
bool lab_finish(lab *L, lab_sess *s, int timeout_ms, char state[6], PGresult **out);
/* Sends sql (no parameters) and collects its answer like lab_try, but a lost connection is an
 * outcome, not a failure: returns true with state "conn" when the session is gone. */
bool lab_try_or_lost(lab *L, lab_sess *s, const char *sql, char state[6]);

/* The last WARNING or NOTICE the server sent on s, one line ("" when none). */
const char *lab_notice(const lab_sess *s);

/* Runs sql and expects success. */
bool lab_exec(lab *L, lab_sess *s, const char *sql);
bool lab_execp(lab *L, lab_sess *s, const char *sql, int nparams, const char *const *params);
/* Runs sql and returns its result (rows), or NULL (recorded). */
PGresult *lab_query(lab *L, lab_sess *s, const char *sql, int nparams, const char *const *params);
/* Runs sql; state gets "" on success or the SQLSTATE of the error. false only on client-side
 * failures. */
bool lab_try(lab *L, lab_sess *s, const char *sql, char state[6]);
bool lab_tryp(lab *L, lab_sess *s, const char *sql, int nparams, const char *const *params,
              char state[6], PGresult **out);
/* First column of the first row as an integer / boolean / text copy. */
bool lab_int(lab *L, lab_sess *s, const char *sql, int nparams, const char *const *params,
             long long *out);
bool lab_bool(lab *L, lab_sess *s, const char *sql, int nparams, const char *const *params,
              bool *out);
bool lab_text(lab *L, lab_sess *s, const char *sql, int nparams, const char *const *params,
              char *out, size_t n);

/* After lab_send: waits until the observer sees s waiting for a lock (pg_stat_activity
 * wait_event_type = 'Lock') -> 1, or s's statement finished without being seen waiting -> 0.
 * -1 on failure (recorded; also when neither happened within the lock timeout). */
int lab_await_lock_wait(lab *L, lab_sess *s);

/* Advisory key n of this run: key_base + n. */
int64_t lab_key(lab *L, int n);
/* Formats v into buf (at least 24 bytes) and returns buf. */
const char *lab_fmt(char *buf, long long v);
/* Rows in pg_locks for the bigint advisory key (classid = high 32 bits, objid = low 32 bits,
 * objsubid = 1), through the observer. */
bool lab_adv_count(lab *L, int64_t key, long long *out);

/* ---- threads (lab.c) ---- */

/* Runs fn(L, sessions[i], i, arg) in n threads at once and joins them. Inside fn,
 * lab_barrier() waits until all n threads reach it (false on failure or after the lock
 * timeout + 5 s: the experiment then fails instead of hanging). */
typedef void (*lab_thread_fn)(lab *L, lab_sess *s, int i, void *arg);
bool lab_threads(lab *L, int n, lab_sess **sessions, lab_thread_fn fn, void *arg);
bool lab_barrier(lab *L);


/* ---- what several experiments share (lab_util.c) ---- */

/* "true" or "false". */
const char *lab_tf(bool b);
/* Creates table items (id int PRIMARY KEY, v int) with rows 1 .. rows, v = id. */
bool lab_make_items(lab *L, lab_sess *s, int rows);
/* Rows of items that session s cannot lock right now (SKIP LOCKED skips exactly those), as
 * "1,2", or "" when none. The probe runs in autocommit, so its own locks end with it. */
bool lab_locked_ids(lab *L, lab_sess *s, char *out, size_t n);
/* Sends sql (no parameters) on s and reports whether s had to wait for a lock (1), ran
 * through (0), or -1 (recorded). */
int lab_waits(lab *L, lab_sess *s, const char *sql);
/* Collects what was sent on s and expects success; *out (out may be NULL) gets its rows. */
bool lab_done_ok(lab *L, lab_sess *s, PGresult **out);

/* Opens sessions A and B over a one-row items table; A runs hold (a transaction that locks
 * row 1), then B's UPDATE of that row is sent and must be seen waiting for A. False when
 * anything else happened (recorded). */
bool lab_row_waiter(lab *L, const char *hold, lab_sess **a, lab_sess **b);

/* The conflict matrices the library encodes (lockmode.h). */
typedef enum lab_lock_kind {
	LAB_TABLE_LOCKS = 0, /* the 8 table-lock modes, LOCK TABLE t IN <mode> MODE */
	LAB_ROW_LOCKS = 1    /* the 4 row-lock modes, SELECT ... FOR <mode> */
} lab_lock_kind;

/* Measures a conflict matrix with two new sessions: for each pair of modes (held, asked)
 * session A takes the first in a transaction and B asks for the second with NOWAIT (55P03
 * means they conflict). Compares it with the documented table and records the values
 * (pairs, conflicts, mismatches, matrix) and the verdict. */
void lab_conflict_matrix(lab *L, lab_lock_kind kind);

/* ---- the experiments ---- */

/* Advisory locks (lab_advisory.c). */
void lab_exp_singleton(lab *L);
void lab_exp_pool_trap(lab *L);
void lab_exp_xact_rollback(lab *L);
void lab_exp_stacked_unlock(lab *L);
void lab_exp_session_end(lab *L);
void lab_exp_adv_shared(lab *L);
void lab_exp_adv_keyspaces(lab *L);
void lab_exp_adv_rollback(lab *L);
void lab_exp_adv_xact_autocommit(lab *L);
void lab_exp_adv_limit(lab *L);

/* Table locks (lab_tables.c). */
void lab_exp_table_lock_matrix(lab *L);
void lab_exp_lock_table_needs_tx(lab *L);
void lab_exp_lock_table_default(lab *L);
void lab_exp_strong_lock_queue(lab *L);

/* Row locks and locking reads (lab_rows.c). */
void lab_exp_mvcc_read(lab *L);
void lab_exp_row_lock_matrix(lab *L);
void lab_exp_row_lock_self(lab *L);
void lab_exp_key_share(lab *L);
void lab_exp_fk_insert(lab *L);
void lab_exp_nowait(lab *L);
void lab_exp_for_update_of(lab *L);
void lab_exp_limit_offset(lab *L);
void lab_exp_cte_lock(lab *L);
void lab_exp_lock_shape(lab *L);
void lab_exp_recheck(lab *L);
void lab_exp_lockrows_plan(lab *L);
void lab_exp_row_locks_memory(lab *L);
void lab_exp_row_wait_xid(lab *L);

/* The SKIP LOCKED job queue (lab_queue.c). */
void lab_exp_skip_locked(lab *L);
void lab_exp_stale_completion(lab *L);
void lab_exp_lease_recovery(lab *L);

/* Patterns, deadlocks, timeouts, blockers (lab_patterns.c). */
void lab_exp_oversell(lab *L);
void lab_exp_unique_email(lab *L);
void lab_exp_savepoint_locks(lab *L);
void lab_exp_deadlock(lab *L);
void lab_exp_blocking_pids(lab *L);
void lab_exp_cancel_terminate(lab *L);
void lab_exp_lock_timeout(lab *L);
void lab_exp_statement_timeout(lab *L);

/* Isolation and conditional writes (lab_isolation.c). */
void lab_exp_write_skew(lab *L);
void lab_exp_optimistic_version(lab *L);
void lab_exp_hot_upsert(lab *L);

/* Limits and timers: NOWAIT behind table locks, deadlock_timeout, idle-in-transaction
 * timeout, the shared lock table (lab_limits.c). */
void lab_exp_nowait_table_lock(lab *L);
void lab_exp_deadlock_timeout(lab *L);
void lab_exp_idle_in_tx_timeout(lab *L);
void lab_exp_advisory_exhaust(lab *L);

#endif

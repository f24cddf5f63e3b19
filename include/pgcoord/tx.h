/* pgcoord/tx.h - transactions that survive contention: a whole-transaction retry runner,
 * savepoints (rows locked in one global order and explicit table locks are in lock.h)
 *
 * pgc_tx_run() is the loop every application writes by hand and usually gets wrong: BEGIN with
 * the requested isolation, per-transaction timeouts, the caller's work, COMMIT; on a deadlock
 * (40P01) or a serialization failure (40001), raised by any statement or by COMMIT itself, roll
 * back, sleep with capped exponential backoff and full jitter, and run the whole transaction
 * again. Nothing else is retried: invalid SQL, violated constraints and permission errors come
 * back exactly as the server reported them.
 *
 * Connection loss. When the session dies before COMMIT was sent, the transaction is known to
 * be rolled back: the runner reconnects the same pgc_conn (same DSN and options; a new PGconn
 * under it, so do not keep what pgc_conn_pg() returned) and runs the transaction again. When it dies after
 * COMMIT was sent and before the answer came, nobody can know whether the transaction
 * committed: the runner returns PGC_ECOMMIT_UNKNOWN and never retries on its own. Only the
 * server's COMMIT tag means committed, and only an ERROR from the server in answer to COMMIT
 * means rolled back; no answer, a read error or a FATAL after COMMIT is "unknown". A failure
 * reported by libpq rather than the server (no SQLSTATE) before COMMIT counts as a lost
 * session, even when libpq still calls the connection good.
 *
 * The reconnect rule. A reconnect gives a new session, and everything that belonged to the old
 * one is gone: session advisory locks, LISTEN registrations, session-level SET, prepared
 * statements, temporary tables. The runner therefore reconnects only when
 *   - opts.reconnect is true (the default), and
 *   - the library tracks no session-scoped state on the conn (a session advisory lock held
 *     through the library, a LISTEN channel): then the runner refuses and returns
 *     PGC_ECONNLOST with a message saying why, so that no state is pretended to survive.
 * State the library cannot see (your own SET, PREPARE or temporary tables made through libpq)
 * is lost silently: if fn depends on it, set opts.reconnect = false, or re-create it inside fn.
 * Every reconnect is counted in pgc_tx_stats.reconnects and announced to the before_retry hook,
 * and pgc_conn_backend_pid() changes. A session ended by idle_in_transaction_session_timeout
 * (25P03) before COMMIT counts as lost before COMMIT, and is retried like any other loss.
 *
 * Thread-safety: every function here uses one pgc_conn, which must not be used by another
 * thread at the same time. Different conns may run transactions concurrently. */
#ifndef PGCOORD_TX_H
#define PGCOORD_TX_H

#include <stdbool.h>
#include <stdint.h>

#include "common.h"
#include "conn.h"
#include "error.h"
#include "lockmode.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Returned by a transaction body (or a savepoint body) to ask for a rollback without an
 * error; pgc_tx_run() and pgc_savepoint() then roll back and return this same value. It is
 * positive, so "rc < 0" still means failure and "rc == 0" means committed. */
#define PGC_TX_ROLLBACK 1

/* The body of a transaction. Runs inside BEGIN ... COMMIT on conn, possibly several times:
 * everything it does must be redone from the start on each call (decisions included), and side
 * effects outside the database must be idempotent or deferred until after the commit.
 * Return 0 to commit, PGC_TX_ROLLBACK to roll back without an error, or a negative pgc_code
 * after filling err (the runner passes its own pgc_error). Server errors must reach err with
 * their SQLSTATE, which is how the runner recognises 40P01 and 40001: pgc_exec() and the
 * other library calls do that; for libpq results use pgc_tx_check_result(). fn must not
 * end the transaction (COMMIT, ROLLBACK) itself. */
typedef int (*pgc_tx_fn)(pgc_conn *conn, void *arg, pgc_error *err);

typedef enum pgc_isolation {
	PGC_ISOLATION_DEFAULT = 0,         /* the session's default_transaction_isolation */
	PGC_ISOLATION_READ_COMMITTED = 1,
	PGC_ISOLATION_REPEATABLE_READ = 2,
	PGC_ISOLATION_SERIALIZABLE = 3
} pgc_isolation;

/* At most this many SQLSTATEs are kept in pgc_tx_stats.sqlstates (the first ones). */
#define PGC_TX_SQLSTATES_MAX 16

/* What happened during one pgc_tx_run() call. Reset at the start of the call, filled even
 * when it fails. */
typedef struct pgc_tx_stats {
	int attempts;             /* attempts made (1 when nothing was retried); each runs fn once,
	                             unless the reconnect before it failed */
	int64_t backoff_ms;       /* total time slept between attempts, milliseconds */
	int deadlocks;            /* 40P01 seen */
	int serialization_failures; /* 40001 seen */
	int lock_not_available;   /* 55P03 seen (retried only with retry_lock_not_available) */
	int reconnects;           /* new sessions opened after the old one died */
	/* The SQLSTATE of every failed attempt, in order: each retried failure ("" when it had
	 * none: a connection lost without a server message, a failed reconnect), and the server
	 * error that ended the call. nsqlstates counts them all, even past PGC_TX_SQLSTATES_MAX. */
	int nsqlstates;
	char sqlstates[PGC_TX_SQLSTATES_MAX][6];
} pgc_tx_stats;

/* Passed to the before_retry hook. */
typedef struct pgc_tx_retry_info {
	int attempt;              /* the attempt that just failed, from 1 */
	int max_attempts;
	const pgc_error *error;   /* why it failed */
	int64_t sleep_ms;         /* how long the runner will sleep before the next attempt */
	bool reconnect;           /* the session died: a new one is opened before the next attempt */
} pgc_tx_retry_info;

/* Called before each retry (after the rollback, before the sleep). Return 0 to go on; any
 * other value stops the runner, which then returns PGC_EINTR with the failure in err. */
typedef int (*pgc_tx_retry_hook)(const pgc_tx_retry_info *info, void *hook_arg);

typedef struct pgc_tx_options {
	pgc_isolation isolation;  /* default PGC_ISOLATION_DEFAULT */
	bool read_only;           /* BEGIN ... READ ONLY */
	bool deferrable;          /* only with SERIALIZABLE and read_only (else PGC_EUSAGE) */
	int max_attempts;         /* >= 1; default 10 */
	int backoff_base_ms;      /* first backoff ceiling; doubles per retry; default 10 */
	int backoff_max_ms;       /* cap of the ceiling; default 1000. The sleep before retry k is
	                             uniform in [0, min(backoff_max_ms, base * 2^(k-1))] ms */
	/* SET LOCAL for this transaction only, in milliseconds; 0 keeps the session's setting. */
	int64_t lock_timeout_ms;
	int64_t statement_timeout_ms;
	int64_t idle_in_transaction_timeout_ms;
	bool retry_lock_not_available; /* also retry 55P03 (NOWAIT, lock_timeout); default false */
	bool reconnect;           /* reconnect after a session died before COMMIT; default true */
	pgc_tx_retry_hook before_retry; /* may be NULL */
	void *hook_arg;
	pgc_tx_stats *stats;      /* filled when not NULL; owned by the caller */
} pgc_tx_options;

#define PGC_TX_OPTIONS_INIT \
	{ PGC_ISOLATION_DEFAULT, false, false, 10, 10, 1000, 0, 0, 0, false, true, NULL, NULL, NULL }

/* Runs fn(conn, arg, err) as one transaction, retrying the whole transaction as described at
 * the top of this file. opts may be NULL for the defaults.
 * Returns 0 when the transaction committed, PGC_TX_ROLLBACK when fn asked for a rollback (and
 * it was rolled back), or:
 *   PGC_EUSAGE          bad arguments, conn already inside a transaction (use
 *                       pgc_savepoint()), or fn misbehaved: ended the transaction itself, or
 *                       returned 0 although a statement had failed (the transaction is rolled
 *                       back when the session still allows it)
 *   PGC_ESQL            a server error that is not retried (err has its SQLSTATE, message,
 *                       detail, hint and position), including one raised by COMMIT
 *   PGC_ERETRY_EXHAUSTED  max_attempts attempts all failed with retryable errors; err carries
 *                       the last one (its SQLSTATE, class and message, prefixed with the count)
 *   PGC_ECOMMIT_UNKNOWN the session died after COMMIT was sent; the transaction may or may not
 *                       have committed. Never retried. The conn is dead; the next
 *                       pgc_tx_run() on it reconnects under the reconnect rule.
 *   PGC_ECONNLOST       the session died and could not be replaced (reconnect disabled or
 *                       refused under the reconnect rule); PGC_ECONNECT when reconnecting
 *                       failed on the last attempt
 *   PGC_EINTR           the before_retry hook asked to stop
 *   any negative code fn returned, with fn's err.
 * Thread-safety: see the top of this file; opts and stats must not be shared between threads
 * running at the same time. */
PGC_EXTERN PGC_MUSTCHECK int pgc_tx_run(pgc_conn *conn, const pgc_tx_options *opts,
                                        pgc_tx_fn fn, void *arg, pgc_error *err);

/* Runs fn(conn, arg, err) inside SAVEPOINT ... RELEASE SAVEPOINT. When fn fails or returns
 * PGC_TX_ROLLBACK, everything it did (its locks included) is rolled back to the savepoint and
 * the savepoint released, so the enclosing transaction stays usable: the NOWAIT case, where a
 * row that is "currently being edited" is reported and the transaction goes on. Nesting works
 * (each level gets its own savepoint).
 * Returns 0, PGC_TX_ROLLBACK, or fn's negative code with fn's err untouched (a 55P03 stays a
 * 55P03). A 40P01 or 40001 from fn is also rolled back to the savepoint but still means the
 * whole transaction must be retried: return it from your pgc_tx_run() body.
 * Errors of its own: PGC_EUSAGE (NULL conn or fn, not inside a transaction, or the transaction
 * is already aborted), PGC_ESQL / PGC_ECONNLOST from SAVEPOINT, RELEASE or ROLLBACK TO (for
 * example when fn released the savepoint itself). */
PGC_EXTERN PGC_MUSTCHECK int pgc_savepoint(pgc_conn *conn, pgc_tx_fn fn, void *arg,
                                           pgc_error *err);

/* The result of a libpq call made inside a transaction body, as the runner needs it: 0 when
 * res is a success (PGRES_COMMAND_OK, PGRES_TUPLES_OK or PGRES_EMPTY_QUERY), otherwise err
 * is filled from res (or from the connection when res is NULL) with the server's SQLSTATE,
 * message, detail, hint and position, and PGC_ESQL or PGC_ECONNLOST is returned. res is not
 * freed.
 * Errors: PGC_EUSAGE (conn NULL). */
struct pg_result;
PGC_EXTERN PGC_MUSTCHECK int pgc_tx_check_result(pgc_conn *conn, const struct pg_result *res,
                                                 pgc_error *err);

/* Parses an isolation level: "read-committed", "repeatable-read", "serializable" or
 * "default", case-insensitive, with '-', '_' or ' ' between the words. Returns false when
 * text is none of them (or NULL). Thread-safe. */
PGC_EXTERN bool pgc_isolation_parse(const char *text, pgc_isolation *out);

/* "read committed", "repeatable read", "serializable", "default"; NULL when out of range. */
PGC_EXTERN const char *pgc_isolation_name(pgc_isolation level);

#ifdef __cplusplus
}
#endif
#endif

/* pgcoord/diag.h - lock forensics: who waits for whom, decoded locks, cancel/terminate, probe
 *
 * A snapshot reads pg_stat_activity, pg_locks and pg_blocking_pids() in one SQL statement, so
 * the sessions, their locks and the wait-for edges describe the same moment. The snapshot is
 * plain data owned by the library: read its fields, then free it with pgc_diag_snapshot_free.
 * Nothing in this file prints. */
#ifndef PGCOORD_DIAG_H
#define PGCOORD_DIAG_H

#include <stdbool.h>
#include <stdint.h>

#include "conn.h"
#include "error.h"
#include "lock.h"
#include "lockmode.h"

#ifdef __cplusplus
extern "C" {
#endif

/* One row of pg_locks, decoded. Strings are owned by the snapshot (or probe result) and stay
 * valid until it is freed; NULL means "not applicable". */
typedef struct pgc_diag_lock {
	int pid;                   /* holder or waiter; 0 for a prepared transaction */
	const char *locktype;      /* "relation", "tuple", "transactionid", "advisory", ... */
	const char *mode;          /* as pg_locks shows it: "AccessExclusiveLock", "ShareLock", ... */
	pgc_table_lock table_mode; /* mode as a table-level mode for relation locks, else 0 */
	bool granted;
	bool fastpath;
	double waited_s;           /* seconds since the wait began; -1 when granted or unknown */
	const char *database;      /* database name; NULL for objects shared by all databases */
	unsigned int relation_oid; /* 0 when none */
	const char *relation;      /* "schema.name" when it resolves in this database, else the OID */
	const char *relkind;       /* "table", "index", "sequence", "view", ... or NULL */
	long page;                 /* -1 when none */
	long tuple;                /* -1 when none */
	const char *transactionid; /* the transaction waited for or held, as text */
	const char *virtualxid;
	/* An advisory lock's key as pgc_key_from_pg_locks() decodes it (PGC_KEY_INT64 or
	 * PGC_KEY_PAIR), with key->name the name registered for it in <schema>.lock_names ("" when
	 * none); NULL for every other lock type. pgc_key_format() prints it as --key takes it. */
	const pgc_key *key;
	const char *target;        /* one line: "relation public.orders", "advisory 4242
	                              \"nightly\"", "advisory 20,7", "transaction 735 (row (0,1)
	                              of public.orders)" */
} pgc_diag_lock;

/* One session (a row of pg_stat_activity) with what it holds, waits for and blocks. Ages are in
 * seconds on the server's clock, -1 when the column is NULL (no transaction, no query). */
typedef struct pgc_diag_session {
	int pid;
	bool known;                /* false: a blocker the snapshot has no row for (pid 0 is a
	                              prepared transaction); only pid and state are set */
	const char *database;
	const char *user;
	const char *application;
	const char *client;        /* "addr:port", "local" (unix socket), or NULL */
	const char *backend_type;  /* "client backend", "autovacuum worker", ... */
	const char *state;         /* "active", "idle in transaction", ... (NULL when unknown) */
	const char *wait_event_type;
	const char *wait_event;
	const char *query;         /* the whole text */
	double backend_age_s;
	double xact_age_s;
	double query_age_s;
	double state_age_s;
	const pgc_diag_lock *wants; /* the lock it waits for, or NULL */
	double waited_s;           /* how long it has waited for wants, -1 when unknown */
	const int *blocked_by;     /* pg_blocking_pids(pid), without duplicates */
	size_t nblocked_by;
	const int *blocks;         /* sessions waiting directly for this one */
	size_t nblocks;
	size_t blocks_total;       /* sessions waiting for this one directly or through others */
	const pgc_diag_lock *locks; /* its locks, granted ones first */
	size_t nlocks;
	bool root;                 /* blocks someone and waits for no one */
	bool queued_ddl;           /* waits for a SHARE UPDATE EXCLUSIVE or stronger relation lock
	                              while others queue behind it (strong-lock queueing) */
	int cycle;                 /* 0, or the 1-based number of the wait cycle it is part of */
	/* pgcoord's own lock-holding transaction (PGC_LOCK_HOLD_XACT, what pgcoord run uses
	 * through a transaction-mode pooler): application_name exactly "pgcoord/lock-holder",
	 * state "idle in transaction", no backend_xid and no backend_xmin, and nothing held but
	 * advisory locks and its own virtual transaction id. It sits idle in its transaction for
	 * as long as the lock is held, by design: sessions waiting for it wait for that lock. */
	bool pgcoord_holder;
	/* When the session started, ISO 8601 in UTC to the microsecond ("2026-12-01T11:47:53.
	 * 123456Z"): with the pid, names one session for pgc_diag_signal_session(), since a pid is
	 * reused once its session ends. NULL when not known. */
	const char *backend_start;
} pgc_diag_session;

/* A wait-for edge: waiter waits for blocker (from pg_blocking_pids). */
typedef struct pgc_diag_edge {
	int waiter;
	int blocker;
} pgc_diag_edge;

/* Sessions that wait for each other in a circle: a deadlock the server has not broken yet
 * (it checks after deadlock_timeout) or, rarely, one seen half-resolved. */
typedef struct pgc_diag_cycle {
	const int *pids;
	size_t npids;
} pgc_diag_cycle;

typedef struct pgc_diag_snapshot {
	const char *taken_at;      /* the server's clock when the snapshot was read, ISO 8601 */
	const char *database;      /* the current database */
	bool all_databases;
	int self_pid;              /* the backend that read the snapshot (left out of it) */
	pgc_diag_session *sessions; /* oldest transaction first, then sessions without one */
	size_t nsessions;
	pgc_diag_lock *locks;      /* grouped by session in the order of sessions */
	size_t nlocks;
	pgc_diag_edge *edges;
	size_t nedges;
	const int *roots;          /* root blockers, the one blocking most sessions first, except
	                              that pgcoord's own lock holders (pgcoord_holder) come after
	                              every other root: roots[0] is one only when all are */
	size_t nroots;
	pgc_diag_cycle *cycles;
	size_t ncycles;
	size_t nwaiting;           /* sessions waiting for a lock */
	bool names_available;      /* <schema>.lock_names was found and read */
	size_t nwaiting_elsewhere; /* sessions waiting for a lock in other databases, left out
	                              of this snapshot (0 with all_databases) */
	void *internal_;           /* owned by the library */
} pgc_diag_snapshot;

typedef struct pgc_diag_options {
	bool all_databases; /* every database, not only the current one (default false) */
	const char *schema; /* where lock_names lives; NULL means "pgcoord" */
	bool names;         /* look advisory keys up in <schema>.lock_names (default true) */
	bool include_self;  /* keep the session that reads the snapshot (default false) */
} pgc_diag_options;

#define PGC_DIAG_OPTIONS_INIT { false, NULL, true, false }

/* Reads one snapshot through conn. Without all_databases it holds the sessions of the current
 * database plus any session of another database that waits for or blocks one of them. Wait-for
 * edges come from pg_blocking_pids(), which knows the lock-mode conflicts and the wait queues;
 * cycles are found once and never followed round. Names come from <schema>.lock_names when that
 * table exists and can be read; otherwise key->name stays "" and names_available false.
 * May be called inside a transaction block (the server's cached activity is dropped first, so
 * each snapshot is current), not in a failed one. The session reading the snapshot is left out
 * unless include_self. On success *out owns a snapshot the caller frees with
 * pgc_diag_snapshot_free(). Not thread-safe for one conn.
 * Errors: PGC_EUSAGE (NULL conn or out, empty schema), PGC_ENOMEM, PGC_ESQL, PGC_ECONNLOST. */
PGC_EXTERN PGC_MUSTCHECK int pgc_diag_snapshot_take(pgc_conn *conn, const pgc_diag_options *opts,
                                                    pgc_diag_snapshot **out, pgc_error *err);

/* Frees a snapshot. NULL is accepted. */
PGC_EXTERN void pgc_diag_snapshot_free(pgc_diag_snapshot *snap);

/* The session with this pid in snap, or NULL. Thread-safe on a snapshot nobody frees. */
PGC_EXTERN const pgc_diag_session *pgc_diag_session_find(const pgc_diag_snapshot *snap, int pid);

/* Why waiter waits for blocker: the lock blocker holds on the object waiter wants, in a mode that
 * conflicts (a hard block, *queued false), or blocker's own earlier request for that object that
 * waiter is queued behind (a soft block, *queued true). NULL when neither is in the snapshot
 * (for example when blocker is a parallel query's leader and a worker holds the lock). queued may
 * be NULL. Thread-safe on a snapshot nobody frees. */
PGC_EXTERN const pgc_diag_lock *pgc_diag_blocking_lock(const pgc_diag_session *waiter,
                                                      const pgc_diag_session *blocker,
                                                      bool *queued);

/* ---- cancel and terminate ---- */

typedef enum pgc_diag_signal_kind {
	PGC_DIAG_CANCEL = 1,   /* pg_cancel_backend: stop the current query */
	PGC_DIAG_TERMINATE = 2 /* pg_terminate_backend: end the session */
} pgc_diag_signal_kind;

typedef struct pgc_diag_signal_result {
	bool done;             /* the server's function returned true */
	bool gone;             /* the session no longer exists afterwards */
	char state[64];        /* its state afterwards ("" when gone or unknown) */
	char warning[256];     /* the server's WARNING when the function returned false, or "" */
} pgc_diag_signal_result;

/* Cancels the query of, or terminates, the session pid, then watches it for up to wait_ms
 * (terminate: until it is gone; cancel: until its query stops) and fills out. The signal goes
 * through a short-lived second session with conn's settings and a notice_fn of its own, so that
 * the server's warning is captured and conn's notice_fn never hears it. A terminate that waits
 * (PostgreSQL 14 and later, wait_ms > 0) runs without the role's statement_timeout. The server's
 * functions may return false without an error (not a backend, no permission in old versions,
 * terminate timed out): then done is false and warning says why.
 * Errors: PGC_EUSAGE (pid <= 0, pid is conn's own backend, bad kind, negative wait_ms, NULL
 * arguments), PGC_ENOTFOUND (no session has that pid), PGC_ESQL (e.g. 42501 permission
 * denied), PGC_ECONNLOST. */
PGC_EXTERN PGC_MUSTCHECK int pgc_diag_signal(pgc_conn *conn, int pid, pgc_diag_signal_kind kind,
                                             int wait_ms, pgc_diag_signal_result *out,
                                             pgc_error *err);

/* pgc_diag_signal() for the session pid only while it is the one that started at
 * backend_start (pgc_diag_session.backend_start, as the snapshot gives it): the server
 * compares both in the statement that sends the signal, so a session that ended and whose
 * pid went to a new one is never hit. Errors: as pgc_diag_signal(), PGC_EUSAGE also for a
 * NULL or empty backend_start, and PGC_ENOTFOUND when no session has that pid and start. */
PGC_EXTERN PGC_MUSTCHECK int pgc_diag_signal_session(pgc_conn *conn, int pid,
                                                     const char *backend_start,
                                                     pgc_diag_signal_kind kind, int wait_ms,
                                                     pgc_diag_signal_result *out,
                                                     pgc_error *err);

/* ---- probe: which locks does a statement take? ---- */

typedef enum pgc_probe_outcome {
	PGC_PROBE_RAN = 0,               /* the statement ran; locks are what it held at the end */
	PGC_PROBE_LOCK_TIMEOUT = 1,      /* it waited longer than lock_timeout for a lock */
	PGC_PROBE_STATEMENT_TIMEOUT = 2, /* it ran longer than statement_timeout */
	PGC_PROBE_FAILED = 3             /* the statement failed (error holds the reason) */
} pgc_probe_outcome;

typedef struct pgc_probe_options {
	int64_t lock_timeout_ms;      /* lock_timeout for the statement; default 1000, > 0 */
	int64_t statement_timeout_ms; /* statement_timeout; default 10000, > 0 */
} pgc_probe_options;

#define PGC_PROBE_OPTIONS_INIT { 1000, 10000 }

typedef struct pgc_probe_result {
	pgc_probe_outcome outcome;
	pgc_error error;          /* the statement's error when outcome is not PGC_PROBE_RAN */
	char command_tag[64];     /* "ALTER TABLE", "SELECT 3", ... when it ran */
	double elapsed_s;
	bool observed;            /* the locks were seen by watching the statement from a second
	                             session before it ended, not read after it finished */
	pgc_diag_lock *locks;     /* relation-level locks on user relations, strongest first */
	size_t nlocks;
	size_t ncatalog_locks;    /* relation-level locks on system catalogs, left out of locks */
	const pgc_diag_lock *waited_for; /* PGC_PROBE_LOCK_TIMEOUT: the lock it could not get,
	                                    when it was seen (a lock of wait_snapshot) */
	const pgc_diag_snapshot *wait_snapshot; /* the moment it was seen waiting, or NULL; its
	                                           session is probe_pid */
	int probe_pid;            /* the backend that ran the statement */
	void *internal_;
	long rows_locked;         /* PGC_PROBE_RAN: rows it locked (changed by UPDATE, DELETE,
	                             MERGE, or returned by a SELECT with a locking clause); row locks
	                             live in the rows, not in pg_locks, and block other writers of
	                             those rows until the transaction ends */
	/* PGC_PROBE_RAN: when a SELECT takes row locks (FOR UPDATE, FOR NO KEY UPDATE, FOR SHARE,
	 * FOR KEY SHARE) that the statement itself does not use (it updates, deletes or inserts
	 * nothing, so the rows are only returned), one line saying which weaker mode, or none,
	 * suffices for what the rest of the transaction does with them; "" otherwise. */
	char row_lock_advice[512];
} pgc_probe_result;

/* Why a statement cannot be probed, or NULL when it can: empty text, more than one statement,
 * transaction control (BEGIN, COMMIT, ROLLBACK, SAVEPOINT, PREPARE TRANSACTION, ...), statements
 * that cannot run in a transaction block (VACUUM, CREATE/DROP INDEX CONCURRENTLY, REINDEX
 * CONCURRENTLY, CREATE/DROP DATABASE, ALTER SYSTEM, ...) and COPY FROM STDIN. Static string.
 * Thread-safe. */
PGC_EXTERN const char *pgc_probe_refusal(const char *sql);

/* Runs one statement on conn inside BEGIN ... ROLLBACK under lock_timeout_ms and
 * statement_timeout_ms (set with set_config(..., true) in that transaction: they replace the
 * role's, the database's and the session's settings, so the wait is neither cut short nor
 * stretched by them), reads which relation-level locks its backend holds before rolling back, and
 * returns them in *out. Rows and COPY TO data are dropped as they arrive. Nothing the statement does inside the transaction survives; effects that
 * ignore transactions do: sequence values it draws (nextval, serial, identity), session-level
 * advisory locks (until conn closes), files written by COPY TO, signals sent. When the statement
 * is still running after 100 ms a second session (same DSN) watches it, so that a lock wait or a
 * timeout can still be explained; when the server has not ended the statement 5 s after its
 * statement timeout it is cancelled, and the session closed if that is not answered within 5 s
 * (PGC_ETIMEDOUT). conn must be idle, outside a transaction. On PGC_OK *out owns a
 * result freed with pgc_probe_result_free(), whatever the statement's outcome.
 * Errors: PGC_EUSAGE (NULL arguments, conn in a transaction, bad timeouts, a statement that
 * cannot be probed: the message says why), PGC_ENOMEM, PGC_ECONNLOST, PGC_ETIMEDOUT, PGC_ESQL
 * (the probe's own queries failed). */
PGC_EXTERN PGC_MUSTCHECK int pgc_probe(pgc_conn *conn, const char *sql,
                                       const pgc_probe_options *opts, pgc_probe_result **out,
                                       pgc_error *err);

/* Frees a probe result. NULL is accepted. */
PGC_EXTERN void pgc_probe_result_free(pgc_probe_result *res);

#ifdef __cplusplus
}
#endif
#endif

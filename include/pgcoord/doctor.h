/* pgcoord/doctor.h - checks the path to the server and its settings for coordination hazards
 *
 * A transaction-mode pooler between the client and the server (session locks and LISTEN are
 * unsafe through it), waits without timeouts, invisible lock waits, the size of the shared
 * lock table that advisory locks use, sessions idle in transaction now (pgcoord's own lock
 * holders, which stay idle in transaction by design, counted apart), and the pgcoord schema's
 * version, its cron schedules (overdue: no scheduler runs; no success in two periods; paused),
 * and the replication picture: primary or standby, timeline, standbys and their sync
 * state, whether the DSN follows the primary, and what an asynchronous failover can lose. Each
 * finding has a severity, a one-line message and the fix. */
#ifndef PGCOORD_DOCTOR_H
#define PGCOORD_DOCTOR_H

#include <stdbool.h>
#include <stdint.h>

#include "common.h"
#include "conn.h"
#include "error.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef enum pgc_doctor_severity {
	PGC_DOCTOR_OK = 0,      /* checked, nothing to do */
	PGC_DOCTOR_INFO = 1,    /* worth knowing, nothing wrong */
	PGC_DOCTOR_WARNING = 2, /* a hazard: fix it when you can */
	PGC_DOCTOR_ERROR = 3    /* coordination is unsafe as things are */
} pgc_doctor_severity;

#define PGC_DOCTOR_FINDINGS_MAX 32

/* One finding. check is a stable identifier: "server", "pooler", "lock_timeout",
 * "statement_timeout", "idle_in_transaction_session_timeout", "log_lock_waits",
 * "deadlock_timeout", "lock_table", "lock_waits", "long_advisory", "idle_in_transaction",
 * "application_name", "fk_index", "schema", "cron", "replication", "dsn_hosts", "failover". */
typedef struct pgc_doctor_finding {
	char check[40];
	pgc_doctor_severity severity;
	char value[128];   /* what was observed ("0", "1s", "transaction", "3"), or "" */
	char message[512]; /* one line */
	char fix[512];     /* one line, "" when there is nothing to do */
} pgc_doctor_finding;

/* Plain memory owned by the caller; nothing to free. */
typedef struct pgc_doctor_report {
	int count;
	pgc_doctor_finding findings[PGC_DOCTOR_FINDINGS_MAX];
	pgc_doctor_severity worst; /* the highest severity among the findings */
} pgc_doctor_report;

typedef struct pgc_doctor_options {
	/* The pgcoord schema whose version is checked; NULL means "pgcoord". */
	const char *schema;
	/* Look for a pooler (opens a second session with the same DSN, on which the settings are
	 * then read; without it they are read on conn). Default true. */
	bool check_pooler;
	/* How long a statement may wait for a server connection while another client of the
	 * same DSN holds a transaction open before that counts as pooling, in ms. Default 2000. */
	int pooler_wait_ms;
	/* From how long a held advisory lock is reported (long_advisory), in ms, 1000 to 30 days.
	 * Default 3600000 (one hour). */
	int64_t advisory_age_ms;
} pgc_doctor_options;

#define PGC_DOCTOR_OPTIONS_INIT { NULL, true, 2000, INT64_C(3600000) }

/* Runs every check through conn (which must not be inside a transaction) and, for the pooler
 * check and the settings a new session of this role gets, one more short-lived session opened
 * with conn's DSN. Fills *out; the findings are in a fixed order, the pooler finding only when
 * opts->check_pooler.
 *
 * The pooler check: a transaction-mode pooler hands each transaction any server connection,
 * so the backend pid changes between two statements outside a transaction. The check holds a
 * transaction open on the second session (which takes one server connection) and asks conn
 * for its backend pid before and during it: a different pid, the second session landing on
 * conn's backend, or conn's statement queueing until the transaction ends all mean pooling.
 * A pooler that refuses transaction blocks (statement mode) is reported too.
 *
 * The idle_in_transaction check warns about every session idle in transaction except
 * pgcoord's own lock holders (PGC_LOCK_HOLD_XACT): application_name "pgcoord/lock-holder",
 * state exactly "idle in transaction", no backend_xid, no backend_xmin, and only advisory
 * locks and its own virtualxid in pg_locks. Those are counted in the message at INFO; one of
 * that name that holds more is counted with the others.
 *
 * What sessions do now is judged among the sessions this role may see (all of them with
 * pg_read_all_stats): lock_waits (waits longer than deadlock_timeout, with the first blocker
 * pg_blocking_pids() names), long_advisory (advisory locks of this database held at least
 * opts->advisory_age_ms: the time recorded by PGC_LOCK_RECORD when there is one, else the time
 * since an idle holder went idle, a lower bound; an active holder gives none and is left out),
 * application_name (client sessions without one). fk_index looks at the foreign keys of the
 * tables this role could index, bounded to 10 s. lock_table also judges the advisory locks'
 * own share of the shared lock table (WARNING from half, ERROR from 80%).
 *
 * Errors: PGC_EUSAGE (conn or out is NULL, conn is inside a transaction, bad options),
 * PGC_ECONNLOST, PGC_ESQL (the server refused a query every check needs). A check that
 * cannot be run (no permission, no second session) becomes a WARNING finding that says why.
 * Not thread-safe with respect to conn. */
PGC_EXTERN PGC_MUSTCHECK int pgc_doctor_run(pgc_conn *conn, const pgc_doctor_options *opts,
                                            pgc_doctor_report *out, pgc_error *err);

/* Where conn landed in a replicated cluster (pgc_server_role_get). Plain memory owned by the
 * caller; nothing to free. */
typedef struct pgc_server_role {
	bool standby;      /* pg_is_in_recovery(): a standby (or a server still recovering) */
	int64_t timeline;  /* the server's timeline; 0 when this role cannot see it */
	/* Where timeline comes from: "wal" (a primary's WAL insert position, current at once after
	 * a promotion), "walreceiver" (a standby's, when the role may read pg_stat_wal_receiver:
	 * pg_read_all_stats), "checkpoint" (a standby's last restartpoint: may lag), or "". */
	char timeline_source[16];
	char host[256];    /* the host (or socket directory) of a multi-host DSN that answered */
	char port[16];
} pgc_server_role;

/* Asks the server behind conn whether it is a primary or a standby and for its timeline, and
 * fills in which host and port of the DSN answered. Works for any role, on a primary and on a
 * standby. Must be called outside a failed transaction.
 * Errors: PGC_EUSAGE (conn or out is NULL), PGC_ECONNLOST, PGC_ETIMEDOUT, PGC_ESQL. */
PGC_EXTERN PGC_MUSTCHECK int pgc_server_role_get(pgc_conn *conn, pgc_server_role *out,
                                                 pgc_error *err);

/* "ok", "info", "warning", "error"; "unknown" for other values. Static string. */
PGC_EXTERN const char *pgc_doctor_severity_name(pgc_doctor_severity severity);

#ifdef __cplusplus
}
#endif
#endif

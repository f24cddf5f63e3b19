/* pgcoord/schema.h - the pgcoord schema: versioned migrations applied by pgc_schema_init */
#ifndef PGCOORD_SCHEMA_H
#define PGCOORD_SCHEMA_H

#include <stdbool.h>

#include "conn.h"

#ifdef __cplusplus
extern "C" {
#endif

/* The schema name used when a function is given NULL. */
#define PGC_SCHEMA_DEFAULT "pgcoord"

/* The advisory key every migration transaction takes with pg_advisory_xact_lock before it
 * looks at the migrations table, so that any number of processes can run init at once:
 * 0x7067636f6f7264, the ASCII bytes of "pgcoord". */
#define PGC_MIGRATION_LOCK_KEY INT64_C(0x7067636f6f7264)

/* The newest schema version this library knows. Thread-safe. */
PGC_EXTERN int pgc_schema_latest(void);

/* Creates the schema (when missing) and applies every migration newer than its current
 * version, each in its own transaction that first takes PGC_MIGRATION_LOCK_KEY. Safe to run
 * from many processes at once: each migration is applied exactly once. It records each
 * migration's checksum (the baseline, for those applied before checksums were recorded), and
 * (re)creates every SQL function whose definition differs from the one it last created, in
 * the last migration's transaction or in one of its own under the same lock. A migration
 * edited after it was applied is not an error here: see pgc_schema_check. schema may be NULL for
 * "pgcoord". applied (may be NULL) receives how many migrations this call applied; version
 * (may be NULL) the schema version afterwards. Must be called outside a transaction.
 * Errors: PGC_EUSAGE (empty or over-long schema name, a name with '$' or a control character,
 * or called inside a transaction),
 * PGC_ESCHEMA_VERSION (the schema is newer than this library), PGC_ESQL, PGC_ECONNLOST. */
PGC_EXTERN PGC_MUSTCHECK int pgc_schema_init(pgc_conn *conn, const char *schema, int *applied,
                                             int *version, pgc_error *err);

/* A migration whose text differs from the text the schema recorded when it applied it (the
 * file was edited after it was applied there): the schema may lack, or hold, what the edit
 * changed, and pgc_schema_init cannot repair that. */
typedef struct pgc_schema_drift {
	int version;       /* the migration's number */
	const char *name;  /* its name in this library (static) */
	const char *shipped; /* the SHA-256 of this library's text, in hex (static) */
	char recorded[65]; /* the SHA-256 the schema recorded, in hex */
} pgc_schema_drift;

/* Compares the checksums schema (NULL for "pgcoord") recorded for its applied migrations with
 * this library's. out receives the first max differing ones (out may be NULL when max is 0),
 * in version order; count the number of differing ones. A migration applied before checksums
 * were recorded counts as matching until pgc_schema_init records its baseline. Read-only.
 * Errors: PGC_EUSAGE, PGC_ESQL, PGC_ECONNLOST. */
PGC_EXTERN PGC_MUSTCHECK int pgc_schema_check(pgc_conn *conn, const char *schema,
                                              pgc_schema_drift *out, int max, int *count,
                                              pgc_error *err);

/* The installed version of schema (NULL for "pgcoord"): 0 when it is not installed.
 * Errors: PGC_EUSAGE, PGC_ESQL, PGC_ECONNLOST. */
PGC_EXTERN PGC_MUSTCHECK int pgc_schema_version(pgc_conn *conn, const char *schema, int *version,
                                                pgc_error *err);

/* Options for pgc_schema_grant_worker. Initialise with PGC_WORKER_ROLE_OPTIONS_INIT. */
typedef struct pgc_worker_role_options {
	bool login; /* create the role with LOGIN (or add LOGIN to an existing role); default
	             * NOLOGIN, for a group role that login roles are made members of */
} pgc_worker_role_options;
#define PGC_WORKER_ROLE_OPTIONS_INIT { false }

/* Creates role when it does not exist (NOLOGIN unless opts->login) and grants it exactly what a
 * queue worker needs on schema (NULL for "pgcoord"), after revoking whatever this user granted
 * it there before, so that the grants are the same after any number of calls:
 *   USAGE on the schema; SELECT on queue_settings and queues; SELECT and DELETE on jobs and
 *   UPDATE of its claim columns (status, attempts, token, lease_until, worker, started_at,
 *   last_error, errors, eff_priority, run_at; never payload, queue, priority, max_attempts or
 *   unique_key); INSERT on job_history and SELECT (id, queue, status, finished_at) and DELETE
 *   for the reaper's retention; SELECT, INSERT, UPDATE, DELETE on workers; USAGE on
 *   claim_token_seq.
 * Enough to claim, heartbeat, complete, fail, retry later, release and reap jobs, to register
 * for targeted wake-ups and to LISTEN; nothing on the lock registry, leases, fencing tokens,
 * migrations or any other table, no CREATE on the schema, and no enqueueing. These are table
 * and column grants: the role can change the state of any live job of the schema (complete,
 * fail or delete it), not only of those it claimed, though never its payload. The role cannot
 * VACUUM the jobs table (only its owner can): run such workers with vacuuming off. The schema
 * must be installed at the latest version (pgc_schema_init); re-run after an upgrade so new
 * tables are covered. Runs in its own transaction under PGC_MIGRATION_LOCK_KEY; must be called
 * outside a transaction by a user that owns the schema and may create roles. created (may be
 * NULL) says whether the role was created. Refuses a role that would hold more than a worker's
 * rights anyway: a superuser, the current user, or a role that reaches the schema's other
 * tables through membership (such as the schema owner's or pg_read_all_data).
 * Errors: PGC_EUSAGE (bad or reserved role name, "public", "none", a name starting with "pg_",
 * or a role with more rights, or called inside a transaction), PGC_ENOSCHEMA (the schema is
 * missing or older than this library), PGC_ESQL (say 42501 when this user may not create roles
 * or grant), PGC_ECONNLOST. Not thread-safe on one connection. */
PGC_EXTERN PGC_MUSTCHECK int pgc_schema_grant_worker(pgc_conn *conn, const char *schema,
                                                     const char *role,
                                                     const pgc_worker_role_options *opts,
                                                     bool *created, pgc_error *err);

#ifdef __cplusplus
}
#endif
#endif

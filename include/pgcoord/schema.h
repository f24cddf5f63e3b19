/* pgcoord/schema.h - the pgcoord schema: versioned migrations applied by pgc_schema_init */
#ifndef PGCOORD_SCHEMA_H
#define PGCOORD_SCHEMA_H

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
 * from many processes at once: each migration is applied exactly once. schema may be NULL for
 * "pgcoord". applied (may be NULL) receives how many migrations this call applied; version
 * (may be NULL) the schema version afterwards. Must be called outside a transaction.
 * Errors: PGC_EUSAGE (empty or over-long schema name, or called inside a transaction),
 * PGC_ESCHEMA_VERSION (the schema is newer than this library), PGC_ESQL, PGC_ECONNLOST. */
PGC_EXTERN PGC_MUSTCHECK int pgc_schema_init(pgc_conn *conn, const char *schema, int *applied,
                                             int *version, pgc_error *err);

/* The installed version of schema (NULL for "pgcoord"): 0 when it is not installed.
 * Errors: PGC_EUSAGE, PGC_ESQL, PGC_ECONNLOST. */
PGC_EXTERN PGC_MUSTCHECK int pgc_schema_version(pgc_conn *conn, const char *schema, int *version,
                                                pgc_error *err);

#ifdef __cplusplus
}
#endif
#endif

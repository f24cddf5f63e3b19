/* pgcoord/lockmode.h - PostgreSQL's table-level and row-level lock modes and their conflicts
 *
 * The conflict tables of PostgreSQL's documentation ("Explicit Locking"), encoded once, for
 * diagnostics (what does this lock block?) and for the lab (does the server agree?). */
#ifndef PGCOORD_LOCKMODE_H
#define PGCOORD_LOCKMODE_H

#include <stdbool.h>

#include "common.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Table-level modes, weakest to strongest, numbered as the server numbers them. */
typedef enum pgc_table_lock {
	PGC_ACCESS_SHARE = 1,
	PGC_ROW_SHARE = 2,
	PGC_ROW_EXCLUSIVE = 3,
	PGC_SHARE_UPDATE_EXCLUSIVE = 4,
	PGC_SHARE = 5,
	PGC_SHARE_ROW_EXCLUSIVE = 6,
	PGC_EXCLUSIVE = 7,
	PGC_ACCESS_EXCLUSIVE = 8
} pgc_table_lock;

#define PGC_TABLE_LOCK_COUNT 8

/* Row-level modes (the locking clauses), weakest to strongest. */
typedef enum pgc_row_lock {
	PGC_FOR_KEY_SHARE = 1,
	PGC_FOR_SHARE = 2,
	PGC_FOR_NO_KEY_UPDATE = 3,
	PGC_FOR_UPDATE = 4
} pgc_row_lock;

#define PGC_ROW_LOCK_COUNT 4

/* True when a lock in mode a held by one transaction blocks mode b requested by another.
 * Symmetric. Out-of-range modes conflict with nothing. Thread-safe. */
PGC_EXTERN bool pgc_table_lock_conflicts(pgc_table_lock a, pgc_table_lock b);
PGC_EXTERN bool pgc_row_lock_conflicts(pgc_row_lock a, pgc_row_lock b);

/* The mode's name as pg_locks shows it ("AccessExclusiveLock"), as LOCK TABLE spells it
 * ("ACCESS EXCLUSIVE"), and the locking clause of a row mode ("FOR NO KEY UPDATE"). Static
 * strings; NULL for out-of-range modes. */
PGC_EXTERN const char *pgc_table_lock_name(pgc_table_lock mode);
PGC_EXTERN const char *pgc_table_lock_sql(pgc_table_lock mode);
PGC_EXTERN const char *pgc_row_lock_sql(pgc_row_lock mode);

/* Parses a pg_locks mode name or a LOCK TABLE spelling (case-insensitive); 0 when unknown. */
PGC_EXTERN pgc_table_lock pgc_table_lock_parse(const char *name);

/* What holding mode means for everyone else, in words: "blocks every read and write of the
 * table", "blocks writes (INSERT, UPDATE, DELETE) and DDL, not reads", ... Static string;
 * NULL for out-of-range modes. Typical statements that take the mode: pgc_table_lock_takers. */
PGC_EXTERN const char *pgc_table_lock_blocks(pgc_table_lock mode);
PGC_EXTERN const char *pgc_table_lock_takers(pgc_table_lock mode);

/* What holding mode on the relation named what means for everyone else, as one sentence
 * ("blocks every read and write of public.orders until the transaction ends"), written into
 * buf (always NUL-terminated). Returns the length the whole text needs (as snprintf), or -1 for
 * an out-of-range mode or NULL arguments. Thread-safe. */
PGC_EXTERN int pgc_table_lock_blocks_on(pgc_table_lock mode, const char *what, char *buf,
                                        size_t size);

#ifdef __cplusplus
}
#endif
#endif

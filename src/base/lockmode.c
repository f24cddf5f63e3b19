/* lockmode.c - the table-level and row-level lock conflict tables of PostgreSQL's manual
 *
 * Bit i of table_conflicts[m] is set when mode m conflicts with mode i, as in the server's own
 * LockConflicts table (lock.c) and the "Conflicting Lock Modes" table of the documentation. */
#include <stdio.h>
#include <strings.h>

#include "base.h"

#define B(m) (1u << (m))

static const unsigned table_conflicts[PGC_TABLE_LOCK_COUNT + 1] = {
	[PGC_ACCESS_SHARE] = B(PGC_ACCESS_EXCLUSIVE),
	[PGC_ROW_SHARE] = B(PGC_EXCLUSIVE) | B(PGC_ACCESS_EXCLUSIVE),
	[PGC_ROW_EXCLUSIVE] = B(PGC_SHARE) | B(PGC_SHARE_ROW_EXCLUSIVE) | B(PGC_EXCLUSIVE) |
	                      B(PGC_ACCESS_EXCLUSIVE),
	[PGC_SHARE_UPDATE_EXCLUSIVE] = B(PGC_SHARE_UPDATE_EXCLUSIVE) | B(PGC_SHARE) |
	                               B(PGC_SHARE_ROW_EXCLUSIVE) | B(PGC_EXCLUSIVE) |
	                               B(PGC_ACCESS_EXCLUSIVE),
	[PGC_SHARE] = B(PGC_ROW_EXCLUSIVE) | B(PGC_SHARE_UPDATE_EXCLUSIVE) |
	              B(PGC_SHARE_ROW_EXCLUSIVE) | B(PGC_EXCLUSIVE) | B(PGC_ACCESS_EXCLUSIVE),
	[PGC_SHARE_ROW_EXCLUSIVE] = B(PGC_ROW_EXCLUSIVE) | B(PGC_SHARE_UPDATE_EXCLUSIVE) |
	                            B(PGC_SHARE) | B(PGC_SHARE_ROW_EXCLUSIVE) | B(PGC_EXCLUSIVE) |
	                            B(PGC_ACCESS_EXCLUSIVE),
	[PGC_EXCLUSIVE] = B(PGC_ROW_SHARE) | B(PGC_ROW_EXCLUSIVE) | B(PGC_SHARE_UPDATE_EXCLUSIVE) |
	                  B(PGC_SHARE) | B(PGC_SHARE_ROW_EXCLUSIVE) | B(PGC_EXCLUSIVE) |
	                  B(PGC_ACCESS_EXCLUSIVE),
	[PGC_ACCESS_EXCLUSIVE] = B(PGC_ACCESS_SHARE) | B(PGC_ROW_SHARE) | B(PGC_ROW_EXCLUSIVE) |
	                         B(PGC_SHARE_UPDATE_EXCLUSIVE) | B(PGC_SHARE) |
	                         B(PGC_SHARE_ROW_EXCLUSIVE) | B(PGC_EXCLUSIVE) |
	                         B(PGC_ACCESS_EXCLUSIVE),
};

/* "Conflicting Row-Level Locks": FOR UPDATE conflicts with all; FOR NO KEY UPDATE with all but
 * FOR KEY SHARE; FOR SHARE with the two update modes; FOR KEY SHARE only with FOR UPDATE. */
static const unsigned row_conflicts[PGC_ROW_LOCK_COUNT + 1] = {
	[PGC_FOR_KEY_SHARE] = B(PGC_FOR_UPDATE),
	[PGC_FOR_SHARE] = B(PGC_FOR_NO_KEY_UPDATE) | B(PGC_FOR_UPDATE),
	[PGC_FOR_NO_KEY_UPDATE] = B(PGC_FOR_SHARE) | B(PGC_FOR_NO_KEY_UPDATE) | B(PGC_FOR_UPDATE),
	[PGC_FOR_UPDATE] = B(PGC_FOR_KEY_SHARE) | B(PGC_FOR_SHARE) | B(PGC_FOR_NO_KEY_UPDATE) |
	                   B(PGC_FOR_UPDATE),
};

static const struct {
	const char *name, *sql, *blocks, *takers;
} table_modes[PGC_TABLE_LOCK_COUNT + 1] = {
	[PGC_ACCESS_SHARE] = { "AccessShareLock", "ACCESS SHARE",
		"blocks only ACCESS EXCLUSIVE (DROP, TRUNCATE, most ALTER TABLE, VACUUM FULL)",
		"SELECT" },
	[PGC_ROW_SHARE] = { "RowShareLock", "ROW SHARE",
		"blocks EXCLUSIVE and ACCESS EXCLUSIVE; reads and writes go on",
		"SELECT ... FOR UPDATE/NO KEY UPDATE/SHARE/KEY SHARE" },
	[PGC_ROW_EXCLUSIVE] = { "RowExclusiveLock", "ROW EXCLUSIVE",
		"blocks SHARE and stronger (CREATE INDEX, LOCK ... SHARE); reads and other writes go on",
		"INSERT, UPDATE, DELETE, MERGE" },
	[PGC_SHARE_UPDATE_EXCLUSIVE] = { "ShareUpdateExclusiveLock", "SHARE UPDATE EXCLUSIVE",
		"blocks schema changes and other vacuums; reads and writes go on",
		"VACUUM, ANALYZE, CREATE INDEX CONCURRENTLY, some ALTER TABLE" },
	[PGC_SHARE] = { "ShareLock", "SHARE",
		"blocks every write (INSERT, UPDATE, DELETE) and schema change; reads go on",
		"CREATE INDEX" },
	[PGC_SHARE_ROW_EXCLUSIVE] = { "ShareRowExclusiveLock", "SHARE ROW EXCLUSIVE",
		"blocks every write and schema change, and other SHARE ROW EXCLUSIVE; reads go on",
		"CREATE TRIGGER, some ALTER TABLE" },
	[PGC_EXCLUSIVE] = { "ExclusiveLock", "EXCLUSIVE",
		"blocks every write and locking read; only plain SELECT goes on",
		"REFRESH MATERIALIZED VIEW CONCURRENTLY" },
	[PGC_ACCESS_EXCLUSIVE] = { "AccessExclusiveLock", "ACCESS EXCLUSIVE",
		"blocks every read and write of the table until the transaction ends",
		"DROP TABLE, TRUNCATE, most ALTER TABLE, VACUUM FULL, LOCK TABLE without a mode" },
};

static const char *const row_sql[PGC_ROW_LOCK_COUNT + 1] = {
	[PGC_FOR_KEY_SHARE] = "FOR KEY SHARE",
	[PGC_FOR_SHARE] = "FOR SHARE",
	[PGC_FOR_NO_KEY_UPDATE] = "FOR NO KEY UPDATE",
	[PGC_FOR_UPDATE] = "FOR UPDATE",
};

static bool table_ok(int m)
{
	return m >= 1 && m <= PGC_TABLE_LOCK_COUNT;
}

static bool row_ok(int m)
{
	return m >= 1 && m <= PGC_ROW_LOCK_COUNT;
}

bool pgc_table_lock_conflicts(pgc_table_lock a, pgc_table_lock b)
{
	return table_ok((int)a) && table_ok((int)b) && (table_conflicts[a] & B(b)) != 0;
}

bool pgc_row_lock_conflicts(pgc_row_lock a, pgc_row_lock b)
{
	return row_ok((int)a) && row_ok((int)b) && (row_conflicts[a] & B(b)) != 0;
}

const char *pgc_table_lock_name(pgc_table_lock mode)
{
	return table_ok((int)mode) ? table_modes[mode].name : NULL;
}

const char *pgc_table_lock_sql(pgc_table_lock mode)
{
	return table_ok((int)mode) ? table_modes[mode].sql : NULL;
}

const char *pgc_table_lock_blocks(pgc_table_lock mode)
{
	return table_ok((int)mode) ? table_modes[mode].blocks : NULL;
}

const char *pgc_table_lock_takers(pgc_table_lock mode)
{
	return table_ok((int)mode) ? table_modes[mode].takers : NULL;
}

const char *pgc_row_lock_sql(pgc_row_lock mode)
{
	return row_ok((int)mode) ? row_sql[mode] : NULL;
}

pgc_table_lock pgc_table_lock_parse(const char *name)
{
	if (name == NULL)
		return 0;
	for (int m = 1; m <= PGC_TABLE_LOCK_COUNT; m++)
		if (strcasecmp(name, table_modes[m].name) == 0 || strcasecmp(name, table_modes[m].sql) == 0)
			return (pgc_table_lock)m;
	return 0;
}

/* The same facts as table_modes[].blocks, phrased about one named relation. */
static const char *const blocks_on[PGC_TABLE_LOCK_COUNT + 1] = {
	[PGC_ACCESS_SHARE] = "blocks only ACCESS EXCLUSIVE on %s (DROP, TRUNCATE, most ALTER TABLE, "
	                     "VACUUM FULL); reads and writes go on",
	[PGC_ROW_SHARE] = "blocks EXCLUSIVE and ACCESS EXCLUSIVE on %s (most ALTER TABLE, DROP, "
	                  "TRUNCATE); reads and writes go on",
	[PGC_ROW_EXCLUSIVE] = "blocks SHARE and stronger on %s (CREATE INDEX, most ALTER TABLE, "
	                      "DROP, TRUNCATE); reads and other writes go on",
	[PGC_SHARE_UPDATE_EXCLUSIVE] = "blocks schema changes, CREATE INDEX and VACUUM/ANALYZE of %s; "
	                               "reads and writes go on",
	[PGC_SHARE] = "blocks every write (INSERT, UPDATE, DELETE) and schema change of %s until the "
	              "transaction ends; reads go on",
	[PGC_SHARE_ROW_EXCLUSIVE] = "blocks every write and schema change of %s, and other SHARE ROW "
	                            "EXCLUSIVE locks on it; reads go on",
	[PGC_EXCLUSIVE] = "blocks every write and locking read (SELECT ... FOR UPDATE/SHARE) of %s; "
	                  "only plain SELECT goes on",
	[PGC_ACCESS_EXCLUSIVE] = "blocks every read and write of %s until the transaction ends",
};

int pgc_table_lock_blocks_on(pgc_table_lock mode, const char *what, char *buf, size_t size)
{
	if (!table_ok((int)mode) || what == NULL || (buf == NULL && size > 0))
		return -1;
	return snprintf(buf, size, blocks_on[mode], what);
}

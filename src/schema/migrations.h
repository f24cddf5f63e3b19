/* migrations.h - the schema migrations embedded from src/schema/migrations/ at build time */
#ifndef PGCOORD_MIGRATIONS_H
#define PGCOORD_MIGRATIONS_H

typedef struct pgc_migration {
	int version;      /* 1, 2, 3, ... without gaps */
	const char *name; /* from the file name */
	const char *sql;  /* with @schema@ where the quoted schema name goes */
} pgc_migration;

extern const pgc_migration pgc__migrations[];
extern const int pgc__migration_count;

#endif

/* migrations.h - the schema migrations and SQL functions embedded from src/schema/migrations/
 * and src/schema/functions/ at build time (tools/embed-sql.py) */
#ifndef PGCOORD_MIGRATIONS_H
#define PGCOORD_MIGRATIONS_H

typedef struct pgc_migration {
	int version;          /* 1, 2, 3, ... without gaps */
	const char *name;     /* from the file name */
	const char *checksum; /* SHA-256 of the file's text, in hex */
	const char *sql;      /* with @S@ where the quoted schema name goes */
} pgc_migration;

/* One file of src/schema/functions/: the current definition of the function(s) of its name,
 * re-created whenever its checksum differs from the one recorded in function_versions. */
typedef struct pgc_sql_function {
	const char *name;     /* from the file name: the function's name */
	const char *checksum; /* SHA-256 of the file's text, in hex */
	const char *sql;      /* with @S@ where the quoted schema name goes */
} pgc_sql_function;

extern const pgc_migration pgc__migrations[];
extern const int pgc__migration_count;
extern const pgc_sql_function pgc__functions[];
extern const int pgc__function_count;

#endif

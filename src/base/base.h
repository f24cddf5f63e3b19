/* base.h - the bottom of the library with pgcoord's types: errors (error.c), DSNs (dsn.c),
 * durations (duration.c), the lock conflict tables (lockmode.c) and the name rules (names.c).
 * Nothing here talks to a server: it is what every folder above may include. The only libpq
 * it knows is PGresult's error fields, which error.c reads. */
#ifndef PGCOORD_BASE_H
#define PGCOORD_BASE_H

#include <libpq-fe.h>
#include <stdbool.h>
#include <stddef.h>

#include "pgcoord.h"
#include "util/util.h"

/* ---- errors (error.c) ------------------------------------------------------------------- */

/* Fills err (may be NULL) with a client-side error and returns code. */
int pgc__err(pgc_error *err, int code, const char *fmt, ...) PGC_PRINTF(3, 4);

/* Fills err from a failed result (or from the connection when res is NULL) and returns the
 * matching code: PGC_ECONNLOST when the session is gone, PGC_ESQL otherwise. prefix (may be
 * NULL) is put before the server's message, "prefix: message". */
int pgc__err_result(pgc_error *err, PGconn *pg, const PGresult *res, const char *prefix);

/* Copies src into dst (size n), always NUL-terminated, replacing newlines with spaces and
 * dropping a trailing newline, so every message stays on one line. */
void pgc__copy_line(char *dst, size_t n, const char *src);

/* Puts prefix ": " before err's message (err may be NULL); the rest of err is kept. */
void pgc__err_prefix(pgc_error *err, const char *fmt, ...) PGC_PRINTF(2, 3);

/* ---- DSNs (dsn.c) -------------------------------------------------------------------------- */

/* Masks every value of a DSN (and all of a URI after its scheme), keys still shown: for a
 * string libpq refused, in which a misspelt keyword may hold a password. NULL when out of
 * memory. */
char *pgc__dsn_mask_all(const char *dsn);

/* ---- schema names (names.c) ---------------------------------------------------------------- */

/* The one rule for a schema name that the library puts into SQL (quoted with
 * PQescapeIdentifier): 1 to 63 bytes, no '$' (the migrations put the quoted name inside
 * dollar-quoted function bodies, where a '$' could end the quote early) and no control
 * characters (a line break would end a line comment around it just as early). NULL means the
 * default schema and is fine. Returns a pgc_code, naming what is wrong. */
int pgc__check_schema(const char *schema, pgc_error *err);

/* Expands every "@S@" in tmpl to quoted (a quoted schema name) in one pass. malloc'd; NULL
 * when out of memory. */
char *pgc__sql_schema(const char *tmpl, const char *quoted);

/* The command that installs schema, for messages: "pgcoord init" for the default (NULL),
 * "pgcoord init --schema NAME" otherwise, NAME in single quotes when a shell would need them.
 * Returns buf. */
const char *pgc__init_cmd(const char *schema, char *buf, size_t size);

#endif

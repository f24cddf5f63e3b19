/* internal.h - private declarations shared by the library's pillars; never installed
 *
 * The layers, bottom up: util/ (clock, buffers), error.c and dsn.c, the connection layer
 * (conn_int.h: the only code that sends statements), then the pillars (locks, transactions,
 * leases, the queue, diagnostics, the lab, doctor, schema), each talking to the server only
 * through the connection layer. docs/INTERNALS.md is the map. */
#ifndef PGCOORD_INTERNAL_H
#define PGCOORD_INTERNAL_H

#include <libpq-fe.h>
#include <stdbool.h>

#include "conn_int.h"
#include "pgcoord.h"

/* ---- schema names (schema.c) ---------------------------------------------------------------- */

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

/* ---- LISTEN (listen.c) ---------------------------------------------------------------------- */

/* LISTEN on channel (quoted here), recorded on the session: while any is recorded the session
 * holds state a reconnect would lose. A reconnect or a lost session forgets them. Returns a
 * pgc_code. */
int pgc__listen(pgc_conn *c, const char *channel, pgc_error *err);

/* UNLISTEN channel (nothing to do when it is not recorded, or the session is gone). */
int pgc__unlisten(pgc_conn *c, const char *channel, pgc_error *err);

/* How many channels the session listens on. */
int pgc__listening(const pgc_conn *c);

/* ---- transactions (tx.c) -------------------------------------------------------------------- */

/* A test hook, called by pgc_tx_run() right after COMMIT was sent and before its answer is
 * read (tests drop the connection there). NULL in normal use. */
extern void (*pgc__tx_commit_sent_hook)(pgc_conn *conn);

/* ---- locks (lock.c) ------------------------------------------------------------------------- */

/* How many waits ended in an error although the server had granted the lock (found by the
 * pg_locks check and reported as success). For tests; updated atomically. */
extern unsigned long pgc__lock_race_granted;

#endif

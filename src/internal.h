/* internal.h - private declarations shared by the library's files; never installed */
#ifndef PGCOORD_INTERNAL_H
#define PGCOORD_INTERNAL_H

#include <libpq-fe.h>
#include <stdbool.h>

#include "pgcoord.h"

struct pgc_conn {
	PGconn *pg;
	char *dsn;        /* the resolved DSN, kept for reconnects; never shown */
	char *dsn_masked; /* what we show */
	pgc_conn_options opts;
	char *application_name; /* owned copy of opts.application_name */
	int server_version;
	int backend_pid;

	/* tx: transactions and reconnects (tx.c, pgc__reconnect). session_state counts the
	 * session-scoped things held through this conn that a new session would not have (a
	 * session advisory lock, a LISTEN channel): code that keeps such state increments it while
	 * the state is held, and pgc__reconnect() refuses while it is non-zero. savepoint_depth
	 * names nested pgc_savepoint() levels. stmts caches the statements pgc_lock_rows()
	 * prepared on this session (gone with the session: cleared on reconnect). broken marks a
	 * session that libpq still calls CONNECTION_OK although a read or write on it failed
	 * (keepalive timeout, reset): only a reconnect makes it usable again. */
	bool broken;
	int session_state;
	int savepoint_depth;
	struct pgc__stmt *stmts;
	int nstmts;
	/* locks (src/lock.c): session locks held through this session, their open handles, the
	 * name-registry state and prepared statements; NULL until the first lock call. */
	struct pgc__lock_table *locks;
};

/* Fills err (may be NULL) with a client-side error and returns code. */
int pgc__err(pgc_error *err, int code, const char *fmt, ...) PGC_PRINTF(3, 4);

/* Fills err from a failed result (or from the connection when res is NULL) and returns the
 * matching code: PGC_ECONNLOST when the session is gone, PGC_ESQL otherwise. prefix (may be
 * NULL) is put before the server's message, "prefix: message". */
int pgc__err_result(pgc_error *err, PGconn *pg, const PGresult *res, const char *prefix);

/* Runs sql with text parameters. Returns the result on success (PGRES_COMMAND_OK or
 * PGRES_TUPLES_OK), NULL with err filled otherwise (*rc gets the code). */
PGresult *pgc__exec(pgc_conn *conn, const char *sql, int nparams, const char *const *values,
                    int *rc, pgc_error *err);

/* True when the session is inside a transaction block (idle, active or failed). */
bool pgc__in_transaction(const pgc_conn *conn);

/* Quotes an identifier with PQescapeIdentifier into a malloc'd string (free with PQfreemem).
 * Returns NULL with err filled on failure. */
char *pgc__quote_ident(pgc_conn *conn, const char *name, pgc_error *err);

/* Copies src into dst (size n), always NUL-terminated, replacing newlines with spaces and
 * dropping a trailing newline, so every message stays on one line. */
void pgc__copy_line(char *dst, size_t n, const char *src);

/* tx: replaces a dead session with a new one on the same handle (PQreset: same DSN, options
 * and PGconn pointer), under the reconnect rule of pgcoord/tx.h: refuses with PGC_ECONNLOST
 * when the conn was not opened from a DSN or holds session state (conn->session_state > 0),
 * returns PGC_ECONNECT when the server cannot be reached. Updates backend_pid and
 * server_version and resets savepoint_depth. */
int pgc__reconnect(pgc_conn *conn, pgc_error *err);

/* tx: forgets the statements prepared on the session (after a reconnect) and frees the cache
 * (at close). */
void pgc__tx_forget_statements(pgc_conn *conn);

/* tx: a test hook, called by pgc_tx_run() right after COMMIT was sent and before its answer
 * is read (tests drop the connection there). NULL in normal use. */
extern void (*pgc__tx_commit_sent_hook)(pgc_conn *conn);
/* locks: releases what conn still holds (bounded wait), frees the handles and the table, and
 * reports what was released (released and n may be NULL). Called by pgc_conn_close(). */
int pgc__locks_close(pgc_conn *conn, pgc_held_lock **released, size_t *n, pgc_error *err);

/* locks: keeps the last notice of a session that uses locks (called by conn.c's receiver). */
void pgc__locks_notice(pgc_conn *conn, const PGresult *res);

/* locks: how many waits ended in an error although the server had granted the lock (found by
 * the pg_locks check and reported as success). For tests; updated atomically. */
extern unsigned long pgc__lock_race_granted;

/* CLOCK_MONOTONIC in milliseconds. */
int64_t pgc__now_ms(void);

/* Masks every value of a DSN (and all of a URI after its scheme), keys still shown: for a
 * string libpq refused, in which a misspelt keyword may hold a password. NULL when out of
 * memory. */
char *pgc__dsn_mask_all(const char *dsn);

#endif

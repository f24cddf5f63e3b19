/* tx_int.h - what the transaction runner keeps on a session, shared with the row and table
 * locks (tx.c, rowlock.c) */
#ifndef PGCOORD_TX_INT_H
#define PGCOORD_TX_INT_H

#include "conn/conn_int.h"

typedef struct pgc__tx_state {
	int savepoint_depth;     /* nested pgc_savepoint() levels */
	int64_t lock_timeout_ms; /* the lock_timeout of the running pgc_tx_run() body, 0 if none */
} pgc__tx_state;

/* PGC_OK when c is inside a transaction that can take a statement; else PGC_EUSAGE or
 * PGC_ECONNLOST naming fn_name and what is wrong. */
int pgc__tx_usable(pgc_conn *conn, const char *fn_name, pgc_error *err);

/* The runner's state attached to c (made on first use); NULL when out of memory. */
pgc__tx_state *pgc__tx_state_of(pgc_conn *c);

/* ---- transactions (tx.c) -------------------------------------------------------------------- */

/* A test hook, called by pgc_tx_run() right after COMMIT was sent and before its answer is
 * read (tests drop the connection there). NULL in normal use. */
extern void (*pgc__tx_commit_sent_hook)(pgc_conn *conn);

#endif

/* conn_priv.h - struct pgc_conn, seen only by the connection layer (conn.c, conn_call.c,
 * conn_pooler.c); everything else goes through conn_int.h */
#ifndef PGCOORD_CONN_PRIV_H
#define PGCOORD_CONN_PRIV_H

#include "conn_int.h"

#define PGC__ATTACH_MAX 8
#define PGC__STMT_MAX 64 /* prepared statements kept per session; past it, statements run unnamed */

/* One entry of the statement cache: the statement's text, and its name on the server, which
 * is derived from the text (so that a pooler that hands us another client's server session
 * can only have the same text under that name). */
typedef struct pgc__stmt {
	uint64_t hash;
	char *sql;
	char name[32];
	bool prepared; /* prepared on the current session */
} pgc__stmt;

struct pgc_conn {
	PGconn *pg;
	char *dsn;              /* the resolved DSN, kept for reconnects and second sessions */
	char *dsn_masked;       /* what we show */
	char *application_name; /* owned copy of opts.application_name */
	pgc_conn_options opts;
	int server_version;
	int backend_pid;
	bool broken;            /* a read or write failed; only a reconnect helps */
	bool lost_told;         /* the attachments heard that this session is gone */

	/* What pgc__send() sent and pgc__await() has not collected yet. */
	pgc__batch *pending;
	/* A finished batch kept for the next call, so that a call allocates nothing. */
	pgc__batch *spare;
	/* A statement ran in single-row mode: libpq keeps that mode for the first statement of
	 * the next pipeline, until a statement outside a pipeline resets it. */
	bool single_row_left;

	/* The statement cache (conn_call.c). missing counts how often prepared statements
	 * vanished behind our back (SQLSTATE 26000): a session that keeps losing them (a pooler
	 * moving us between server sessions) stops preparing. */
	pgc__stmt stmts[PGC__STMT_MAX];
	int nstmts;
	int missing;
	bool no_prepare;

	/* What pgc_conn_pooler() found (conn_pooler.c), until the next reconnect. */
	bool pooler_known;
	pgc_pooler_info pooler;

	/* The last notice or asynchronous error from the server. */
	char notice[PGC_ERROR_MESSAGE_MAX];
	char notice_state[6];

	struct {
		const pgc__attach_ops *ops;
		void *state;
	} att[PGC__ATTACH_MAX];
	int natt;
};

/* conn_call.c: forgets that any statement is prepared (the session is new or lost them), and
 * frees the cache's texts (close). */
void pgc__stmts_forget(pgc_conn *c);
void pgc__stmts_free(pgc_conn *c);

/* conn_call.c: frees what was sent and not collected, and the batch kept for the next call
 * (reconnect, close). */
void pgc__batches_free(pgc_conn *c);

#endif

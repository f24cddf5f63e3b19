/* conn_int.h - the connection layer: the only code that sends statements to the server and
 * waits on a session's socket (conn.c, conn_call.c, conn_pooler.c)
 *
 * Every statement the library sends goes through one of the calls below, and every one of them
 * is bounded: a deadline (the caller's, or the session's default call timeout), an optional
 * descriptor that cancels the call, and a rule for an expired deadline (ask the server to
 * cancel, and drop the session when the cancel is not answered; or drop it at once when the
 * outcome of an unanswered statement must not be trusted). The first error the server sends is
 * the one reported. Nothing here blocks without a bound: connections are in libpq's nonblocking
 * mode and the layer polls the socket itself.
 *
 * The layer knows nothing of the pillars above it. What a pillar keeps per session (held
 * locks, LISTEN channels, queue handles) it attaches to the pgc_conn with pgc__attach(); the
 * layer tells every attachment when the session is lost and when the handle closes, the way
 * libpq-events tells its add-ons about PGEVT_CONNRESET and PGEVT_CONNDESTROY.
 *
 * Only the layer's files see struct pgc_conn (conn_priv.h); everything else uses the functions
 * declared here and libpq's PGresult accessors. */
#ifndef PGCOORD_CONN_INT_H
#define PGCOORD_CONN_INT_H

#include <libpq-fe.h>
#include <stdbool.h>

#include "base/base.h"
#include "pgcoord.h"
#include "util/util.h"

/* ---- bounds ----------------------------------------------------------------------------- */

/* A session's default bound on one statement, when pgc_conn_options.call_timeout_ms is 0. */
#define PGC__CALL_TIMEOUT_DEFAULT_MS 60000
/* After a cancel request, how long the server may take to answer before the session is
 * dropped. */
#define PGC__CANCEL_GRACE_MS 5000

typedef enum pgc__on_deadline {
	PGC__CANCEL = 0, /* ask the server to cancel; drop the session if that is not answered */
	PGC__DROP = 1    /* drop the session at once: an unseen outcome must not be trusted */
} pgc__on_deadline;

/* Flags of a call. */
#define PGC__SIMPLE 0x01u     /* simple query protocol: sql may hold several statements and
                                 takes no parameters */
#define PGC__CACHED 0x02u     /* a prepared statement of this session, from the statement
                                 cache (prepared in the same round trip on first use) */
#define PGC__SAVEPOINT 0x04u  /* inside a transaction block, run under a savepoint: a failure
                                 costs the savepoint, not the caller's transaction */
#define PGC__ROWS_DROP 0x08u  /* single-row mode, rows dropped: only the outcome counts */
#define PGC__COPY 0x10u       /* COPY OUT data is read and dropped; COPY IN is ended with an
                                 error; without this flag a COPY is an error */
#define PGC__KEEP_ERROR 0x20u /* a failed statement's result is returned (err filled, *rc the
                                 code) instead of NULL, for callers that read its fields */

/* How one call is bounded. Start from PGC__CALL_INIT; the out fields say how it ended. */
typedef struct pgc__call {
	/* From the moment the call is sent. 0: the session's default call timeout;
	 * PGC_WAIT_FOREVER: no deadline, only where the caller asked to wait without one. */
	int64_t timeout_ms;
	int cancel_fd;                /* -1, or a descriptor whose readability cancels the call */
	pgc__on_deadline on_deadline;
	unsigned flags;               /* PGC__* */
	/* This statement's own statement_timeout and lock_timeout, whatever the session's, role's
	 * or database's settings: -1 keeps the session's, 0 means none, > 0 milliseconds. The
	 * layer sets them with set_config(..., true) in the same round trip, just before the
	 * statement, and puts the old values back after it inside a transaction block. */
	int64_t statement_timeout_ms;
	int64_t lock_timeout_ms;
	/* Called every tick_ms (first after tick_first_ms) while the answer is awaited: the
	 * probe watches the session from another one. May be NULL. */
	void (*on_tick)(void *arg);
	void *tick_arg;
	int64_t tick_first_ms, tick_ms;
	/* Called with each completed command's tag ("INSERT 0 3"), with PGC__SIMPLE scripts. */
	void (*on_tag)(const char *tag, void *arg);
	void *tag_arg;
	/* out */
	bool hit_deadline;            /* the deadline passed */
	bool hit_cancel;              /* cancel_fd became readable */
	bool dropped;                 /* the layer closed the session */
} pgc__call;

#define PGC__CALL_INIT                                                                      \
	{ 0, -1, PGC__CANCEL, 0, -1, -1, NULL, NULL, 0, 0, NULL, NULL, false, false, false }

/* A call bounded by timeout_ms (0: the session's default) and cancelled through cancel_fd. */
pgc__call pgc__bound(int64_t timeout_ms, int cancel_fd);

/* ---- one statement ------------------------------------------------------------------------ */

/* Sends sql with its text parameters (n may be 0) and waits for the answer under call (NULL:
 * the session's default bound). Returns the result (PGRES_TUPLES_OK or PGRES_COMMAND_OK; with
 * PGC__SIMPLE the last command's) with *rc = PGC_OK, or NULL with *rc and err set from the
 * first error the server sent. On return the session is idle, or gone (PGC_ECONNLOST).
 * An expired deadline gives PGC_ETIMEDOUT (SQLSTATE 57014 when the server cancelled the
 * statement; call->dropped when the session was closed instead); a readable cancel_fd gives
 * PGC_EINTR. Free the result with PQclear. */
PGresult *pgc__query(pgc_conn *c, const char *sql, int n, const char *const *vals, pgc__call *call,
                     int *rc, pgc_error *err);

/* pgc__query with the session's default bound. */
PGresult *pgc__exec(pgc_conn *c, const char *sql, int n, const char *const *vals, int *rc,
                    pgc_error *err);

/* pgc__exec through the statement cache: planned once per session. */
PGresult *pgc__exec_cached(pgc_conn *c, const char *sql, int n, const char *const *vals, int *rc,
                           pgc_error *err);

/* Runs a command whose rows are not needed (BEGIN, COMMIT, SAVEPOINT, SET, DDL): simple
 * protocol, the session's default bound. Returns a pgc_code. */
int pgc__command(pgc_conn *c, const char *sql, pgc_error *err);

/* Rolls back whatever transaction is open, under the default bound. False when the session
 * is gone (the server then rolled back on its own); true otherwise. */
bool pgc__rollback(pgc_conn *c);

/* ---- asynchronous use --------------------------------------------------------------------- */

/* Sends a statement without waiting; its answer is collected with pgc__await(). call gives
 * the flags and the per-statement timeouts (its bound is read by pgc__await). The session must
 * be idle. Returns a pgc_code. */
int pgc__send(pgc_conn *c, const char *sql, int n, const char *const *vals, const pgc__call *call,
              pgc_error *err);

/* Waits, under call's bound (NULL: the default), for the answer to what pgc__send() sent; the
 * same result rules as pgc__query(). */
PGresult *pgc__await(pgc_conn *c, pgc__call *call, int *rc, pgc_error *err);

/* Whether the answer to what was sent is complete, reading what has arrived, never waiting:
 * 1 complete, 0 not yet, -1 the session is gone. */
int pgc__ready(pgc_conn *c);

/* True between pgc__send() and the end of pgc__await(). */
bool pgc__busy(const pgc_conn *c);

/* ---- pipelined batches ----------------------------------------------------------------------- */

/* Several statements sent at once and answered in one round trip. Outside a transaction block
 * the server runs them as one implicit transaction, committed when all succeeded: a failure
 * rolls them all back, and the statements after it do not run. */
typedef struct pgc__batch pgc__batch;

/* A new, empty batch on c; NULL when out of memory. */
pgc__batch *pgc__batch_new(pgc_conn *c);

/* Adds a statement (flags: 0 or PGC__CACHED). The parameter strings must stay valid until
 * pgc__batch_run() returns. Returns its index, or a negative pgc_code. */
int pgc__batch_add(pgc__batch *b, const char *sql, int n, const char *const *vals, unsigned flags);

/* Sends the batch and collects every answer under call (NULL: the default bound). Returns
 * PGC_OK when every statement succeeded, else the first error (err filled). A batch of cached
 * statements that finds them deallocated behind its back (SQLSTATE 26000) outside a
 * transaction block is sent again once, prepared anew. */
int pgc__batch_run(pgc__batch *b, pgc__call *call, pgc_error *err);

/* The result of statement i after pgc__batch_run() (owned by the batch), or NULL when it did
 * not run or failed. */
PGresult *pgc__batch_result(const pgc__batch *b, int i);

/* Frees the batch and its results. NULL is accepted. */
void pgc__batch_free(pgc__batch *b);

/* ---- waiting for input ----------------------------------------------------------------------- */

enum {
	PGC__WAIT_INPUT = 1,   /* the server sent something (read into libpq's buffer) */
	PGC__WAIT_FD = 2,      /* the extra descriptor became readable */
	PGC__WAIT_TIMEOUT = 0, /* nothing happened within the timeout */
	PGC__WAIT_LOST = -1    /* the session is gone */
};

/* Waits on an idle session until the server sends something (a notification, or the FATAL of
 * a terminated session), fd (may be -1) becomes readable, or timeout_ms passes (-1: no
 * limit). Returns a PGC__WAIT_* value. */
int pgc__wait_input(pgc_conn *c, int fd, int64_t timeout_ms);

/* The next notification that has arrived (free with PQfreemem), or NULL. Reads what is
 * waiting on the socket first when consume is true; never waits. */
PGnotify *pgc__notify(pgc_conn *c, bool consume);

/* ---- the session ----------------------------------------------------------------------------- */

/* Opens a second session like c (same DSN and options), named application_name (NULL: c's).
 * It is the library's own: its notices go to notice_fn(severity, message, notice_arg) (NULL:
 * nowhere), not to c's receiver. The caller closes it with pgc_conn_close(). Same errors as
 * pgc_connect(). */
int pgc__open_like(const pgc_conn *c, const char *application_name,
                   void (*notice_fn)(const char *, const char *, void *), void *notice_arg,
                   pgc_conn **out, pgc_error *err);

/* Replaces a lost session with a new one on the same handle: same DSN and options, a new
 * PGconn. The statement cache is forgotten, what the pooler probe learnt is forgotten, and
 * every attachment hears that the old session is gone. Does not check whether that is
 * acceptable to the caller (see pgc__holds_session_state). Same errors as pgc_connect(). */
int pgc__reconnect(pgc_conn *c, pgc_error *err);

/* Whether an attachment holds session state a new session would not have (a session lock, a
 * LISTEN): then a reconnect would silently drop it. */
bool pgc__holds_session_state(const pgc_conn *c);

/* True when the session can take a statement: connected, not marked broken. */
bool pgc__conn_ok(const pgc_conn *c);

/* Marks the session broken: a read or write failed although libpq still says CONNECTION_OK
 * (a keepalive timeout, a reset). Only a reconnect makes it usable again. */
void pgc__conn_set_broken(pgc_conn *c);

/* Closes the session's socket: the server ends the session (and releases what it held); the
 * handle stays valid and reports the session lost. */
void pgc__drop(pgc_conn *c);

/* libpq's view of the transaction (PQTRANS_*); PQTRANS_UNKNOWN when the session is gone. */
PGTransactionStatusType pgc__tx_status(const pgc_conn *c);

/* True inside a transaction block (idle, active or failed). */
bool pgc__in_transaction(const pgc_conn *c);

/* Looks, without reading anything, at whether the server ended the session while it sat
 * idle (pg_terminate_backend, idle_in_transaction_session_timeout, a shutdown): an
 * ErrorResponse of severity FATAL or PANIC waiting on the socket, or the end of the stream.
 * True, with err filled, when it did. Over TLS the bytes cannot be seen: false. */
bool pgc__died_while_idle(pgc_conn *c, pgc_error *err);

/* Quotes an identifier with PQescapeIdentifier into a malloc'd string (free with PQfreemem).
 * Returns NULL with err filled on failure. */
char *pgc__quote_ident(pgc_conn *c, const char *name, pgc_error *err);

/* The DSN the session was opened from, unmasked (never shown), and the options. */
const char *pgc__conn_dsn(const pgc_conn *c);
const pgc_conn_options *pgc__conn_options(const pgc_conn *c);

/* The last notice, warning or asynchronous error the server sent on this session (one line;
 * "" when none), with its SQLSTATE in state[6] when state is not NULL. */
const char *pgc__last_notice(const pgc_conn *c, char state[6]);
void pgc__clear_notice(pgc_conn *c);

/* How many statements the session's cache knows (prepared or not): for tests. */
int pgc__stmt_count(const pgc_conn *c);

/* The session's default call timeout, in milliseconds. */
int64_t pgc__call_timeout_ms(const pgc_conn *c);

/* ---- attachments ------------------------------------------------------------------------------ */

/* What a pillar attaches to a session. Every hook may be NULL. */
typedef struct pgc__attach_ops {
	const char *name;
	/* The session is gone (noticed by the layer, or replaced by a reconnect): forget what it
	 * held. Called once per session. reason says why, in one line. */
	void (*lost)(pgc_conn *c, void *state, const char *reason);
	/* The handle closes (the session may still be up): release what is left, bounded, and
	 * free state. */
	void (*close)(pgc_conn *c, void *state);
	/* Holds something a new session would not have. */
	bool (*holds)(const void *state);
	/* What losing the session cost, for pgc_conn_check()'s report: fills err (may be NULL)
	 * and returns a pgc_code (PGC_ELOCKLOST, naming the locks), or 0 when nothing was held.
	 * Called after lost(), and again by later checks of the same dead session. */
	int (*loss)(const void *state, const char *reason, pgc_error *err);
} pgc__attach_ops;

/* Attaches state under ops (one per ops on a session). Returns a pgc_code. */
int pgc__attach(pgc_conn *c, const pgc__attach_ops *ops, void *state, pgc_error *err);

/* The state attached under ops, or NULL. */
void *pgc__attached(const pgc_conn *c, const pgc__attach_ops *ops);

/* Removes the attachment without calling its hooks. */
void pgc__detach(pgc_conn *c, const pgc__attach_ops *ops);

/* Tells every attachment that the session is gone (at most once per session) and marks it
 * broken. The layer calls it when a call finds the session dead; pillars call it when they
 * find out first. */
void pgc__session_lost(pgc_conn *c, const char *reason);

/* ---- LISTEN (listen.c) ---------------------------------------------------------------------- */

/* LISTEN on channel (quoted here), recorded on the session: while any is recorded the session
 * holds state a reconnect would lose. A reconnect or a lost session forgets them. Returns a
 * pgc_code. */
int pgc__listen(pgc_conn *c, const char *channel, pgc_error *err);

/* UNLISTEN channel (nothing to do when it is not recorded, or the session is gone). */
int pgc__unlisten(pgc_conn *c, const char *channel, pgc_error *err);

/* How many channels the session listens on. */
int pgc__listening(const pgc_conn *c);

#endif

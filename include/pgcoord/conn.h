/* pgcoord/conn.h - one PostgreSQL session, DSN resolution and password masking */
#ifndef PGCOORD_CONN_H
#define PGCOORD_CONN_H

#include "common.h"
#include "error.h"

#ifdef __cplusplus
extern "C" {
#endif

/* An opaque handle on one PostgreSQL session. Session-scoped state (held session locks and
 * their counts, LISTEN channels) lives on it. A pgc_conn is not thread-safe: use one per
 * thread, or serialise access. */
typedef struct pgc_conn pgc_conn;

/* Libpq's connection handle, for callers that also use libpq directly. */
struct pg_conn;

typedef struct pgc_conn_options {
	/* application_name reported to the server (pg_stat_activity); NULL means "pgcoord". An
	 * application_name given in the DSN wins. */
	const char *application_name;
	int connect_timeout_s;     /* seconds; 0 = libpq's default (wait forever); default 10 */
	int keepalives_idle_s;     /* TCP keepalive idle time, seconds; default 10 */
	int keepalives_interval_s; /* seconds between keepalive probes; default 5 */
	int keepalives_count;      /* probes before the connection is declared dead; default 3 */
	/* Called with each NOTICE or WARNING the server sends on this session (severity such as
	 * "WARNING", and the one-line message); NULL drops them. The library never prints them. */
	void (*notice_fn)(const char *severity, const char *message, void *arg);
	void *notice_arg;
	/* How long the library waits for the answer to one of its own statements before it asks
	 * the server to cancel it (and closes the session when the cancel is not answered within
	 * 5 s): the bound on every statement whose caller gave no deadline of its own. 0 means
	 * 60000; PGC_WAIT_FOREVER (-1) means no bound. Waits the caller asked for (a lock timeout,
	 * a lease TTL, PGC_WAIT_FOREVER) are bounded by what the caller asked instead. */
	int64_t call_timeout_ms;
} pgc_conn_options;

#define PGC_CONN_OPTIONS_INIT { NULL, 10, 10, 5, 3, NULL, NULL, 0 }

/* Where the DSN came from, as reported by pgc_dsn_resolve(). */
typedef enum pgc_dsn_source {
	PGC_DSN_ARGUMENT = 0,    /* the explicit argument (-d/--dsn) */
	PGC_DSN_PGCOORD_DSN = 1, /* the PGCOORD_DSN environment variable */
	PGC_DSN_DATABASE_URL = 2,/* the DATABASE_URL environment variable */
	PGC_DSN_LIBPQ_ENV = 3    /* none: libpq's own PG* variables and defaults apply */
} pgc_dsn_source;

/* Picks the DSN to use: dsn when it is non-NULL and non-empty, else $PGCOORD_DSN, else
 * $DATABASE_URL, else "" (libpq then reads PGHOST, PGPORT, PGUSER, ...). The result points into
 * dsn or the environment and must not be freed; it stays valid while those do. source (may be
 * NULL) says which one was used. Never fails. */
PGC_EXTERN const char *pgc_dsn_resolve(const char *dsn, pgc_dsn_source *source);

/* A copy of dsn (a URI or a key=value conninfo string) with every password replaced by "****":
 * the userinfo password of a URI, a "password" query parameter, and a password=... keyword
 * (quoted or not). Malformed input is masked conservatively (everything after a password that
 * cannot be delimited). Returns NULL only when dsn is NULL or memory runs out. Free with
 * pgc_free(). Thread-safe. */
PGC_EXTERN char *pgc_dsn_mask(const char *dsn);

/* Opens a session. dsn is resolved with pgc_dsn_resolve() first, so NULL or "" falls back to
 * the environment. opts may be NULL for defaults. On success *out owns a new handle the
 * caller closes with pgc_conn_close().
 *
 * Several hosts ("host=a,b port=5432,5433", or the URI form) are tried in order, each for at
 * most connect_timeout seconds (the DSN's, else opts->connect_timeout_s; 0: no limit), and
 * target_session_attrs picks among them as in libpq (read-write follows the primary). Hosts
 * that come from a service file, or a host list with an empty entry, are left to libpq and
 * share one deadline.
 *
 * Errors, and the class that says what to do:
 *   PGC_EUSAGE (class USAGE): out is NULL, a negative option, or a connection string libpq
 *     cannot parse (shown with every value masked).
 *   PGC_ECONFIG (class CONFIG): a setting that can never work: an invalid sslmode,
 *     gssencmode, channel_binding or target_session_attrs, a port that is not a number from 1
 *     to 65535, host/port/hostaddr lists that do not match, a host name that does not resolve,
 *     a database that does not exist (3D000).
 *   PGC_EAUTH (class CONFIG): the server refused the credentials (SQLSTATE class 28, or 42501
 *     for a role without CONNECT), or asked for a password and none was given.
 *   PGC_ECONNECT (class RETRY_LATER): anything else, e.g. the server is down or starting up,
 *     refuses connections (53300 too many), or the connect timed out.
 *   PGC_ENOMEM.
 * Server errors keep their SQLSTATE; the message names the masked DSN and libpq's reason. */
PGC_EXTERN PGC_MUSTCHECK int pgc_connect(const char *dsn, const pgc_conn_options *opts,
                                         pgc_conn **out, pgc_error *err);

/* Closes the session and frees the handle. Anything session-scoped (session advisory locks)
 * ends with the session on the server. NULL is accepted. */
PGC_EXTERN void pgc_conn_close(pgc_conn *conn);

/* Frees the handle without a word to the server: no unlock, no Terminate message. Only this
 * process's descriptor of the session's socket is closed. A process that inherited the
 * socket (a command started with it open, as pgcoord run does) keeps the session, and the
 * session locks it holds, alive until the last such process closes it or exits, as flock(1)'s
 * lock lives while any process holds its descriptor. With no other holder the server sees the
 * socket close and ends the session, releasing everything it held. NULL is accepted. */
PGC_EXTERN void pgc_conn_abandon(pgc_conn *conn);

/* The server's version number (e.g. 150018), the backend pid of this session, the masked DSN
 * (owned by conn, valid until it is closed), and libpq's handle (owned by conn; do not close
 * it, and do not keep it across a reconnect: pgc_tx_run() and pgc_worker replace a lost
 * session with a new PGconn). The session is in libpq's nonblocking mode. Each returns 0 /
 * NULL when conn is NULL. */
PGC_EXTERN int pgc_conn_server_version(const pgc_conn *conn);
PGC_EXTERN int pgc_conn_backend_pid(const pgc_conn *conn);
PGC_EXTERN const char *pgc_conn_dsn_masked(const pgc_conn *conn);
PGC_EXTERN struct pg_conn *pgc_conn_pg(pgc_conn *conn);

/* Runs SQL text that returns no rows we need (SET, DDL, a script of several statements) and
 * reports the first server error in err. sql is sent as is, with no parameters: never paste
 * values into it. Bounded by the session's call timeout (pgc_conn_options.call_timeout_ms).
 * Errors: PGC_EUSAGE, PGC_ESQL, PGC_ETIMEDOUT, PGC_ECONNLOST. */
PGC_EXTERN PGC_MUSTCHECK int pgc_exec(pgc_conn *conn, const char *sql, pgc_error *err);

typedef struct pgc_exec_options {
	/* How long to wait for the whole text: 0, the session's call timeout; PGC_WAIT_FOREVER,
	 * no client-side bound (the server's statement_timeout still applies). When it passes the
	 * statement is cancelled (PGC_ETIMEDOUT), and the session closed if the cancel is not
	 * answered within 5 s. */
	int64_t timeout_ms;
	/* -1, or a descriptor whose readability cancels the running statement (PGC_EINTR). It is
	 * only polled, never read. */
	int cancel_fd;
	/* Called with each completed command's tag ("INSERT 0 3", "UPDATE 2"); may be NULL. */
	void (*on_tag)(const char *tag, void *arg);
	void *tag_arg;
} pgc_exec_options;

#define PGC_EXEC_OPTIONS_INIT { 0, -1, NULL, NULL }

/* pgc_exec() with options: a script's statements run one after the other (simple query
 * protocol), rows are dropped, COPY ... TO STDOUT data is read and dropped, and COPY
 * ... FROM STDIN is refused (the server gets an error in place of data). opts may be NULL.
 * Errors: as pgc_exec(), and PGC_EINTR. */
PGC_EXTERN PGC_MUSTCHECK int pgc_exec_ex(pgc_conn *conn, const char *sql,
                                         const pgc_exec_options *opts, pgc_error *err);

/* ---- Is the session alive ----------------------------------------------------------------- */

/* Checks that conn's session is alive, which is what keeps its session locks and LISTENs.
 * First reads whatever the server sent unasked (a terminated backend announces itself: the
 * socket becomes readable); then, when heartbeat_timeout_ms > 0, sends a cheap round trip
 * ("SELECT 1") that must be answered within heartbeat_timeout_ms, or the session is closed.
 * With heartbeat_timeout_ms 0 only the first, non-blocking part runs.
 * Returns 0 when the session is alive; when it is not, PGC_ELOCKLOST if it held locks (the
 * message names them and says why: the server's reason, or "no answer within N ms"), else
 * PGC_ECONNLOST. Errors also: PGC_EUSAGE (NULL conn, a negative timeout, a command in
 * progress). */
PGC_EXTERN PGC_MUSTCHECK int pgc_conn_check(pgc_conn *conn, int heartbeat_timeout_ms,
                                            pgc_error *err);

/* The socket of conn's session, to poll(2) for readability together with other descriptors;
 * call pgc_conn_check(conn, 0, ...) when it is readable. -1 when closed or NULL. The number
 * changes when the session is replaced by a reconnect. */
PGC_EXTERN int pgc_conn_socket(const pgc_conn *conn);

/* ---- Poolers ------------------------------------------------------------------------------ */

/* What sits between the client and the server. */
typedef enum pgc_pooler_mode {
	PGC_POOLER_UNKNOWN = 0,     /* could not tell (no second session could be opened) */
	PGC_POOLER_NONE = 1,        /* a direct session */
	PGC_POOLER_SESSION = 2,     /* a pooler or proxy that keeps each client on one server
	                               session: session locks and LISTEN are safe */
	PGC_POOLER_TRANSACTION = 3, /* a transaction-mode pooler: each transaction may run on
	                               another server session; session locks, LISTEN and prepared
	                               statements cannot be trusted; one open transaction keeps one
	                               server session for its whole life */
	PGC_POOLER_STATEMENT = 4    /* a statement-mode pooler: not even a transaction block */
} pgc_pooler_mode;

typedef struct pgc_pooler_info {
	pgc_pooler_mode mode;
	int libpq_pid;  /* the backend pid libpq was told at connect time */
	int server_pid; /* pg_backend_pid() on the first look */
	char why[256];  /* how it was found, one line */
} pgc_pooler_info;

/* Flags for pgc_conn_pooler(). */
#define PGC_POOLER_THOROUGH 1u /* always test with a second session (as pgcoord doctor does),
                                  even when libpq's backend pid matches the server's */

/* Finds out whether a pooler is in between, and which kind. A session whose backend pid, as
 * libpq learnt it when connecting, equals pg_backend_pid() talks to the server directly
 * (PgBouncer and the other poolers give clients a pid of their own); otherwise, or with
 * PGC_POOLER_THOROUGH, a second session like this one opens a transaction (refused: statement
 * mode) and this session asks for its pid again while that transaction is open: a statement
 * that waits for it, or lands on another backend, or on the backend the other client was
 * given, means transaction mode; otherwise each client keeps its server session. wait_ms
 * (100..60000; 0 means 2000) bounds that wait; when none of those signs shows, a notification
 * sent from the second session to a LISTEN of this one decides (through a transaction-mode
 * pooler it never arrives). The answer, an unknown one too, is kept until a reconnect; later
 * calls return it at once. Inside a transaction only the first look is possible: a session
 * whose pids differ is PGC_POOLER_UNKNOWN there, and that answer is not kept.
 * Errors: PGC_EUSAGE, PGC_ETIMEDOUT (the session did not answer at all), PGC_ESQL,
 * PGC_ECONNLOST. When the second session cannot be opened the mode is PGC_POOLER_UNKNOWN and
 * why says why; that is not an error. */
PGC_EXTERN PGC_MUSTCHECK int pgc_conn_pooler(pgc_conn *conn, unsigned int flags, int wait_ms,
                                             pgc_pooler_info *out, pgc_error *err);

/* A static name for a mode: "unknown", "none", "session", "transaction", "statement". */
PGC_EXTERN const char *pgc_pooler_mode_name(pgc_pooler_mode mode);

#ifdef __cplusplus
}
#endif
#endif

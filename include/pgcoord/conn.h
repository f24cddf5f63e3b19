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
} pgc_conn_options;

#define PGC_CONN_OPTIONS_INIT { NULL, 10, 10, 5, 3, NULL, NULL }

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
 * the environment. opts may be NULL for defaults. The connection is checked with a round trip
 * (server version, backend pid). On success *out owns a new handle the caller closes with
 * pgc_conn_close().
 * Errors: PGC_EUSAGE (out is NULL), PGC_ENOMEM, PGC_ECONNECT (class RETRY_LATER; the message
 * names the masked DSN and libpq's reason). */
PGC_EXTERN PGC_MUSTCHECK int pgc_connect(const char *dsn, const pgc_conn_options *opts,
                                         pgc_conn **out, pgc_error *err);

/* Closes the session and frees the handle. Anything session-scoped (session advisory locks)
 * ends with the session on the server. NULL is accepted. */
PGC_EXTERN void pgc_conn_close(pgc_conn *conn);

/* The server's version number (e.g. 150018), the backend pid of this session, the masked DSN
 * (owned by conn, valid until it is closed), and libpq's handle (owned by conn; do not close
 * it). Each returns 0 / NULL when conn is NULL. */
PGC_EXTERN int pgc_conn_server_version(const pgc_conn *conn);
PGC_EXTERN int pgc_conn_backend_pid(const pgc_conn *conn);
PGC_EXTERN const char *pgc_conn_dsn_masked(const pgc_conn *conn);
PGC_EXTERN struct pg_conn *pgc_conn_pg(pgc_conn *conn);

/* Runs one SQL command that returns no rows we need (SET, DDL, ...) and reports any server
 * error in err. sql is sent as is, with no parameters: never paste values into it.
 * Errors: PGC_EUSAGE, PGC_ESQL, PGC_ECONNLOST. */
PGC_EXTERN PGC_MUSTCHECK int pgc_exec(pgc_conn *conn, const char *sql, pgc_error *err);

/* Parses a duration: a non-negative integer followed by a unit "ms", "s", "m" or "h"
 * ("500ms", "2s", "5m", "1h"); a bare number means seconds; "1.5s" is accepted with up to
 * millisecond precision. The result is in milliseconds. Errors: PGC_EUSAGE naming what was
 * wrong (empty, bad number, unknown unit, overflow past 2^53 ms). Thread-safe. */
PGC_EXTERN PGC_MUSTCHECK int pgc_duration_parse(const char *text, int64_t *out_ms,
                                                pgc_error *err);

#ifdef __cplusplus
}
#endif
#endif

/* diag_signal.c - cancel the query of a session, or terminate it, and watch what became of it
 *
 * The signal goes through a short-lived session of its own: the server explains a false
 * answer only in a WARNING, which that session's notice_fn catches, so the caller's session
 * and its notice_fn never see it. */
#include <stdio.h>
#include <string.h>

#include "diag_int.h"

/* The server's explanation: its first WARNING, else the first notice of another severity
 * (notice_fn gets the severity as the server's language spells it). */
typedef struct warning_capture {
	char *buf;
	size_t size;
	bool warning; /* buf holds a WARNING */
} warning_capture;

static void capture_warning(const char *severity, const char *message, void *arg)
{
	warning_capture *c = arg;
	bool warning = severity != NULL && strcmp(severity, "WARNING") == 0;
	if (message == NULL || (c->buf[0] != '\0' && (c->warning || !warning)))
		return;
	pgc__copy_line(c->buf, c->size, message);
	c->warning = warning;
}

/* backend_start as pgc_diag_session.backend_start spells it. */
#define START_TEXT "pg_catalog.to_char(backend_start AT TIME ZONE 'UTC', 'YYYY-MM-DD\"T\"HH24:MI:SS.US\"Z\"')"

/* The state and query_start of pid (of the session that started at start, when not NULL), or
 * found = false. */
static int peek_session(pgc_conn *conn, int pid, const char *start, bool *found, char *state,
                        size_t ssize, char *qstart, size_t qsize, pgc_error *err)
{
	char p[16];
	snprintf(p, sizeof p, "%d", pid);
	const char *params[2] = { p, start };
	int rc;
	PGresult *r = pgc__exec(conn, "SELECT coalesce(state, ''), coalesce(query_start::text, '') "
	                              "FROM pg_catalog.pg_stat_activity WHERE pid = $1::int"
	                              " AND ($2::text IS NULL OR " START_TEXT " = $2)",
	                        2, params, &rc, err);
	if (r == NULL)
		return rc;
	*found = PQntuples(r) > 0;
	if (*found) {
		pgc__copy_line(state, ssize, PQgetvalue(r, 0, 0));
		pgc__copy_line(qstart, qsize, PQgetvalue(r, 0, 1));
	}
	PQclear(r);
	return PGC_OK;
}

static int check_args(pgc_conn *conn, int pid, pgc_diag_signal_kind kind, int wait_ms,
                      pgc_diag_signal_result *out, pgc_error *err)
{
	if (conn == NULL || out == NULL)
		return pgc__err(err, PGC_EUSAGE, "pgc_diag_signal: conn and out must not be NULL");
	memset(out, 0, sizeof *out);
	if (kind != PGC_DIAG_CANCEL && kind != PGC_DIAG_TERMINATE)
		return pgc__err(err, PGC_EUSAGE, "pgc_diag_signal: kind must be PGC_DIAG_CANCEL or PGC_DIAG_TERMINATE");
	if (pid <= 0)
		return pgc__err(err, PGC_EUSAGE, "invalid pid %d: must be a positive backend pid", pid);
	if (wait_ms < 0)
		return pgc__err(err, PGC_EUSAGE, "pgc_diag_signal: wait_ms must not be negative");
	if (pid == pgc_conn_backend_pid(conn))
		return pgc__err(err, PGC_EUSAGE, "pid %d is this session's own backend; refusing to %s it",
		                pid, kind == PGC_DIAG_CANCEL ? "cancel" : "terminate");
	return PGC_OK;
}

/* Sends the signal from a session like conn whose notices land in out->warning; fills
 * out->done. With start, only to the session of pid that started then (*found false when
 * there is none). */
static int send_signal(pgc_conn *conn, int pid, const char *start, pgc_diag_signal_kind kind,
                       int wait_ms, pgc_diag_signal_result *out, bool *found, pgc_error *err)
{
	char p[16], w[24];
	snprintf(p, sizeof p, "%d", pid);
	snprintf(w, sizeof w, "%d", wait_ms);
	const char *params[3] = { p, start, w };
	/* The checked forms name the session by pid and start in the statement that signals it. */
	const char *sql = start ? "SELECT pg_catalog.pg_terminate_backend(pid) FROM pg_catalog.pg_stat_activity"
	                          " WHERE pid = $1::int AND " START_TEXT " = $2"
	                        : "SELECT pg_catalog.pg_terminate_backend($1::int)";
	int nparams = start ? 2 : 1;
	pgc__call call = PGC__CALL_INIT;
	if (kind == PGC_DIAG_CANCEL) {
		sql = start ? "SELECT pg_catalog.pg_cancel_backend(pid) FROM pg_catalog.pg_stat_activity"
		              " WHERE pid = $1::int AND " START_TEXT " = $2"
		            : "SELECT pg_catalog.pg_cancel_backend($1::int)";
	} else if (pgc_conn_server_version(conn) >= 140000 && wait_ms > 0) {
		/* The server waits for the backend to exit and warns when it did not in time: that
		 * wait is the caller's, not bounded by the role's statement_timeout. */
		sql = start ? "SELECT pg_catalog.pg_terminate_backend(pid, $3::int8) FROM pg_catalog.pg_stat_activity"
		              " WHERE pid = $1::int AND " START_TEXT " = $2"
		            : "SELECT pg_catalog.pg_terminate_backend($1::int, $2::int8)";
		nparams = start ? 3 : 2;
		if (start == NULL)
			params[1] = w;
		call.statement_timeout_ms = 0;
		int64_t bound = pgc__call_timeout_ms(conn);
		call.timeout_ms = bound == PGC_WAIT_FOREVER ? PGC_WAIT_FOREVER : wait_ms + bound;
	}
	warning_capture cap = { out->warning, sizeof out->warning, false };
	pgc_conn *sig = NULL;
	int rc = pgc__open_like(conn, NULL, capture_warning, &cap, &sig, err);
	if (rc != PGC_OK)
		return rc;
	PGresult *r = pgc__query(sig, sql, nparams, params, &call, &rc, err);
	pgc_conn_close(sig);
	if (r == NULL)
		return rc;
	*found = PQntuples(r) > 0;
	out->done = *found && PQgetvalue(r, 0, 0)[0] == 't';
	PQclear(r);
	return PGC_OK;
}

static int signal_session(pgc_conn *conn, int pid, const char *start, pgc_diag_signal_kind kind,
                          int wait_ms, pgc_diag_signal_result *out, pgc_error *err)
{
	bool found = false;
	char state0[64] = "", qstart0[64] = "";
	int rc = peek_session(conn, pid, start, &found, state0, sizeof state0, qstart0, sizeof qstart0, err);
	if (rc != PGC_OK)
		return rc;
	if (found) {
		rc = send_signal(conn, pid, start, kind, wait_ms, out, &found, err);
		if (rc != PGC_OK)
			return rc;
	}
	if (!found && start != NULL)
		return pgc__err(err, PGC_ENOTFOUND, "no session with pid %d started at %.40s", pid, start);
	if (!found)
		return pgc__err(err, PGC_ENOTFOUND, "no session with pid %d", pid);

	/* Watch what became of it, within wait_ms. */
	int64_t deadline = pgc__now_ms() + wait_ms;
	for (;;) {
		char state[64] = "", qstart[64] = "";
		rc = peek_session(conn, pid, start, &found, state, sizeof state, qstart, sizeof qstart, err);
		if (rc != PGC_OK)
			return rc;
		if (!found) {
			out->gone = true;
			out->state[0] = '\0';
			break;
		}
		snprintf(out->state, sizeof out->state, "%s", state);
		if (!out->done)
			break;
		if (kind == PGC_DIAG_CANCEL && (strcmp(state, "active") != 0 || strcmp(qstart, qstart0) != 0))
			break;
		if (pgc__now_ms() >= deadline)
			break;
		pgc__sleep_ms(20);
	}
	return PGC_OK;
}

int pgc_diag_signal(pgc_conn *conn, int pid, pgc_diag_signal_kind kind, int wait_ms,
                    pgc_diag_signal_result *out, pgc_error *err)
{
	pgc_error_clear(err);
	int rc = check_args(conn, pid, kind, wait_ms, out, err);
	if (rc != PGC_OK)
		return rc;
	return signal_session(conn, pid, NULL, kind, wait_ms, out, err);
}

int pgc_diag_signal_session(pgc_conn *conn, int pid, const char *backend_start,
                            pgc_diag_signal_kind kind, int wait_ms, pgc_diag_signal_result *out,
                            pgc_error *err)
{
	pgc_error_clear(err);
	int rc = check_args(conn, pid, kind, wait_ms, out, err);
	if (rc != PGC_OK)
		return rc;
	if (backend_start == NULL || backend_start[0] == '\0')
		return pgc__err(err, PGC_EUSAGE, "pgc_diag_signal_session: backend_start must not be empty");
	return signal_session(conn, pid, backend_start, kind, wait_ms, out, err);
}

/* diag_signal.c - cancel the query of a session, or terminate it, and watch what became of it */
#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

#include "diag_int.h"

typedef struct notice_capture {
	char *buf;
	size_t size;
} notice_capture;

static void capture_warning(void *arg, const PGresult *res)
{
	notice_capture *c = arg;
	const char *sev = PQresultErrorField(res, PG_DIAG_SEVERITY_NONLOCALIZED);
	const char *msg = PQresultErrorField(res, PG_DIAG_MESSAGE_PRIMARY);
	if (msg == NULL || c->buf[0] != '\0')
		return;
	if (sev == NULL || strcmp(sev, "WARNING") == 0)
		pgc__copy_line(c->buf, c->size, msg);
}

static void sleep_ms(int ms)
{
	struct timespec ts = { ms / 1000, (long)(ms % 1000) * 1000000L };
	while (nanosleep(&ts, &ts) != 0 && errno == EINTR)
		;
}

/* The state and query_start of pid, or found = false. */
static int peek_session(pgc_conn *conn, int pid, bool *found, char *state, size_t ssize,
                        char *qstart, size_t qsize, pgc_error *err)
{
	char p[16];
	snprintf(p, sizeof p, "%d", pid);
	const char *params[1] = { p };
	int rc;
	PGresult *r = pgc__exec(conn, "SELECT coalesce(state, ''), coalesce(query_start::text, '') "
	                              "FROM pg_catalog.pg_stat_activity WHERE pid = $1::int",
	                        1, params, &rc, err);
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

int pgc_diag_signal(pgc_conn *conn, int pid, pgc_diag_signal_kind kind, int wait_ms,
                    pgc_diag_signal_result *out, pgc_error *err)
{
	pgc_error_clear(err);
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

	bool found = false;
	char state0[64] = "", qstart0[64] = "";
	int rc = peek_session(conn, pid, &found, state0, sizeof state0, qstart0, sizeof qstart0, err);
	if (rc != PGC_OK)
		return rc;
	if (!found)
		return pgc__err(err, PGC_ENOTFOUND, "no session with pid %d", pid);

	char p[16], w[24];
	snprintf(p, sizeof p, "%d", pid);
	snprintf(w, sizeof w, "%d", wait_ms);
	const char *params[2] = { p, w };
	const char *sql;
	int nparams = 1;
	if (kind == PGC_DIAG_CANCEL) {
		sql = "SELECT pg_catalog.pg_cancel_backend($1::int)";
	} else if (pgc_conn_server_version(conn) >= 140000 && wait_ms > 0) {
		/* The server waits for the backend to exit and warns when it did not in time. */
		sql = "SELECT pg_catalog.pg_terminate_backend($1::int, $2::int8)";
		nparams = 2;
	} else {
		sql = "SELECT pg_catalog.pg_terminate_backend($1::int)";
	}
	/* The server explains a false result only in a WARNING. A session of our own receives it,
	 * so the caller's notice receiver on conn (which libpq cannot hand back) is never touched. */
	pgc_conn *sig = NULL;
	rc = pgc__open_like(conn, NULL, &sig, err);
	if (rc != PGC_OK)
		return rc;
	notice_capture cap = { out->warning, sizeof out->warning };
	PQsetNoticeReceiver(pgc_conn_pg(sig), capture_warning, &cap);
	PGresult *r = pgc__exec(sig, sql, nparams, params, &rc, err);
	pgc_conn_close(sig);
	if (r == NULL)
		return rc;
	out->done = PQgetvalue(r, 0, 0)[0] == 't';
	PQclear(r);

	/* Watch what became of it, within wait_ms. */
	int64_t deadline = pgc__now_ms() + wait_ms;
	for (;;) {
		char state[64] = "", qstart[64] = "";
		rc = peek_session(conn, pid, &found, state, sizeof state, qstart, sizeof qstart, err);
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
		if (kind == PGC_DIAG_CANCEL &&
		    (strcmp(state, "active") != 0 || strcmp(qstart, qstart0) != 0))
			break;
		if (pgc__now_ms() >= deadline)
			break;
		sleep_ms(20);
	}
	return PGC_OK;
}


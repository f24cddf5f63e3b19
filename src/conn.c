/* conn.c - opening, checking and closing one PostgreSQL session
 *
 * A pgc_conn wraps one PGconn for its whole life: the library never swaps the session under a
 * caller, which is what makes session-scoped state (advisory locks, LISTEN) safe to track on
 * the handle. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "internal.h"

static char *dup_str(const char *s)
{
	return s ? strdup(s) : NULL;
}

/* Copies libpq's message into dst with every double-quoted part replaced by "...": libpq's
 * parse errors quote fragments of the connection string, and those may hold a password. */
static void scrub_quoted(char *dst, size_t n, const char *msg)
{
	size_t o = 0;
	bool in = false;
	for (const char *p = msg; *p && o + 6 < n; p++) {
		if (*p == '"') {
			if (!in) {
				memcpy(dst + o, "\"...\"", 5);
				o += 5;
			}
			in = !in;
		} else if (!in) {
			dst[o++] = *p;
		}
	}
	dst[o] = '\0';
}

/* A malformed DSN is the caller's mistake: say so showing only its keys; a value may be a
 * password under a misspelt keyword. */
static int check_dsn(const char *dsn, pgc_error *err)
{
	if (*dsn == '\0')
		return PGC_OK;
	char *msg = NULL;
	PQconninfoOption *opts = PQconninfoParse(dsn, &msg);
	if (opts != NULL) {
		PQconninfoFree(opts);
		return PGC_OK;
	}
	char reason[PGC_ERROR_MESSAGE_MAX], line[PGC_ERROR_MESSAGE_MAX];
	scrub_quoted(reason, sizeof reason, msg ? msg : "out of memory");
	pgc__copy_line(line, sizeof line, reason);
	PQfreemem(msg);
	char *masked = pgc__dsn_mask_all(dsn);
	int rc = pgc__err(err, msg ? PGC_EUSAGE : PGC_ENOMEM, "invalid connection string %s: %s",
	                  masked ? masked : "", line);
	pgc_free(masked);
	return rc;
}

/* libpq's default prints notices on stderr; a library must not. */
static void notice_receiver(void *arg, const PGresult *res)
{
	pgc_conn *c = arg;
	pgc__locks_notice(c, res);
	if (c->opts.notice_fn == NULL)
		return;
	char line[PGC_ERROR_MESSAGE_MAX];
	const char *sev = PQresultErrorField(res, PG_DIAG_SEVERITY);
	pgc__copy_line(line, sizeof line, PQresultErrorField(res, PG_DIAG_MESSAGE_PRIMARY));
	c->opts.notice_fn(sev ? sev : "NOTICE", line, c->opts.notice_arg);
}

int pgc_connect(const char *dsn, const pgc_conn_options *opts, pgc_conn **out, pgc_error *err)
{
	pgc_error_clear(err);
	if (out == NULL)
		return pgc__err(err, PGC_EUSAGE, "pgc_connect: out must not be NULL");
	*out = NULL;
	pgc_conn_options defaults = PGC_CONN_OPTIONS_INIT;
	if (opts == NULL)
		opts = &defaults;
	if (opts->connect_timeout_s < 0 || opts->keepalives_idle_s < 0 ||
	    opts->keepalives_interval_s < 0 || opts->keepalives_count < 0)
		return pgc__err(err, PGC_EUSAGE, "pgc_connect: timeouts and keepalive settings must not be negative");

	const char *resolved = pgc_dsn_resolve(dsn, NULL);
	int rc = check_dsn(resolved, err);
	if (rc != PGC_OK)
		return rc;
	pgc_conn *c = calloc(1, sizeof *c);
	if (c == NULL)
		return pgc__err(err, PGC_ENOMEM, "out of memory");
	c->opts = *opts;
	c->dsn = dup_str(resolved);
	c->dsn_masked = pgc_dsn_mask(resolved);
	c->application_name = dup_str(opts->application_name ? opts->application_name : "pgcoord");
	if (c->dsn == NULL || c->dsn_masked == NULL || c->application_name == NULL) {
		pgc_conn_close(c);
		return pgc__err(err, PGC_ENOMEM, "out of memory");
	}
	c->opts.application_name = c->application_name;

	char timeout[16], idle[16], interval[16], count[16];
	snprintf(timeout, sizeof timeout, "%d", opts->connect_timeout_s);
	snprintf(idle, sizeof idle, "%d", opts->keepalives_idle_s);
	snprintf(interval, sizeof interval, "%d", opts->keepalives_interval_s);
	snprintf(count, sizeof count, "%d", opts->keepalives_count);
	/* Settings before "dbname" can be overridden by the DSN; fallback_application_name only
	 * applies when neither the DSN nor PGAPPNAME names the application. */
	const char *keys[8], *vals[8];
	int n = 0;
	if (opts->connect_timeout_s > 0) {
		keys[n] = "connect_timeout";
		vals[n++] = timeout;
	}
	keys[n] = "keepalives";
	vals[n++] = "1";
	if (opts->keepalives_idle_s > 0) {
		keys[n] = "keepalives_idle";
		vals[n++] = idle;
	}
	if (opts->keepalives_interval_s > 0) {
		keys[n] = "keepalives_interval";
		vals[n++] = interval;
	}
	if (opts->keepalives_count > 0) {
		keys[n] = "keepalives_count";
		vals[n++] = count;
	}
	keys[n] = "dbname";
	vals[n++] = c->dsn;
	keys[n] = "fallback_application_name";
	vals[n++] = c->application_name;
	keys[n] = NULL;
	vals[n] = NULL;

	c->pg = PQconnectdbParams(keys, vals, 1);
	if (c->pg == NULL) {
		pgc_conn_close(c);
		return pgc__err(err, PGC_ENOMEM, "out of memory");
	}
	if (PQstatus(c->pg) != CONNECTION_OK) {
		char reason[PGC_ERROR_MESSAGE_MAX];
		pgc__copy_line(reason, sizeof reason, PQerrorMessage(c->pg));
		pgc__err(err, PGC_ECONNECT, "cannot connect to %s: %s",
		         *c->dsn_masked ? c->dsn_masked : "(libpq defaults and PG* variables)", reason);
		pgc_conn_close(c);
		return PGC_ECONNECT;
	}
	PQsetNoticeReceiver(c->pg, notice_receiver, c);
	c->server_version = PQserverVersion(c->pg);
	c->backend_pid = PQbackendPID(c->pg);
	*out = c;
	return PGC_OK;
}

void pgc_conn_close(pgc_conn *conn)
{
	if (conn == NULL)
		return;
	(void)pgc__locks_close(conn, NULL, NULL, NULL);
	if (conn->pg != NULL)
		PQfinish(conn->pg);
	free(conn->dsn);
	free(conn->dsn_masked);
	free(conn->application_name);
	pgc__tx_forget_statements(conn);
	free(conn);
}

int pgc_conn_server_version(const pgc_conn *conn)
{
	return conn ? conn->server_version : 0;
}

int pgc_conn_backend_pid(const pgc_conn *conn)
{
	return conn ? conn->backend_pid : 0;
}

const char *pgc_conn_dsn_masked(const pgc_conn *conn)
{
	return conn ? conn->dsn_masked : NULL;
}

struct pg_conn *pgc_conn_pg(pgc_conn *conn)
{
	return conn ? conn->pg : NULL;
}

bool pgc__in_transaction(const pgc_conn *conn)
{
	PGTransactionStatusType st = PQtransactionStatus(conn->pg);
	return st == PQTRANS_INTRANS || st == PQTRANS_INERROR || st == PQTRANS_ACTIVE;
}

PGresult *pgc__exec(pgc_conn *conn, const char *sql, int nparams, const char *const *values,
                    int *rc, pgc_error *err)
{
	PGresult *res = PQexecParams(conn->pg, sql, nparams, NULL, values, NULL, NULL, 0);
	ExecStatusType st = res ? PQresultStatus(res) : PGRES_FATAL_ERROR;
	if (st == PGRES_COMMAND_OK || st == PGRES_TUPLES_OK) {
		if (rc != NULL)
			*rc = PGC_OK;
		return res;
	}
	int code = pgc__err_result(err, conn->pg, res, NULL);
	PQclear(res);
	if (rc != NULL)
		*rc = code;
	return NULL;
}

int pgc_exec(pgc_conn *conn, const char *sql, pgc_error *err)
{
	pgc_error_clear(err);
	if (conn == NULL || sql == NULL)
		return pgc__err(err, PGC_EUSAGE, "pgc_exec: conn and sql must not be NULL");
	PGresult *res = PQexec(conn->pg, sql);
	ExecStatusType st = res ? PQresultStatus(res) : PGRES_FATAL_ERROR;
	/* Text with only comments is an empty query: nothing to do, not an error. */
	if (st == PGRES_COMMAND_OK || st == PGRES_TUPLES_OK || st == PGRES_EMPTY_QUERY) {
		PQclear(res);
		return PGC_OK;
	}
	int code = pgc__err_result(err, conn->pg, res, NULL);
	PQclear(res);
	return code;
}

char *pgc__quote_ident(pgc_conn *conn, const char *name, pgc_error *err)
{
	char *q = PQescapeIdentifier(conn->pg, name, strlen(name));
	if (q == NULL)
		pgc__err(err, PGC_EUSAGE, "invalid identifier: %s", PQerrorMessage(conn->pg));
	return q;
}

int pgc__reconnect(pgc_conn *conn, pgc_error *err)
{
	if (conn->dsn == NULL)
		return pgc__err(err, PGC_ECONNLOST, "session lost; not reconnecting: the connection was not opened from a DSN");
	if (conn->session_state > 0 || pgc_conn_lock_count(conn) > 0)
		return pgc__err(err, PGC_ECONNLOST,
		                "session lost while it held session-scoped state (advisory locks or LISTEN); not reconnecting, since a new session would not have it");
	PQreset(conn->pg);
	if (PQstatus(conn->pg) != CONNECTION_OK) {
		char reason[PGC_ERROR_MESSAGE_MAX];
		pgc__copy_line(reason, sizeof reason, PQerrorMessage(conn->pg));
		return pgc__err(err, PGC_ECONNECT, "cannot reconnect to %s: %s",
		                *conn->dsn_masked ? conn->dsn_masked : "(libpq defaults and PG* variables)",
		                reason);
	}
	conn->server_version = PQserverVersion(conn->pg);
	conn->backend_pid = PQbackendPID(conn->pg);
	conn->savepoint_depth = 0;
	conn->broken = false;
	pgc__tx_forget_statements(conn);
	return PGC_OK;
}

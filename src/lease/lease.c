/* lease.c - leases on the database clock, leader election and fencing tokens
 *
 * The decisions are made by SQL functions of src/schema/functions/ (lease_acquire,
 * lease_renew, lease_release, fence_next, fence_check), so that a holder written in any
 * language gets the same semantics; this file calls them with parameters, bounds every wait
 * and turns their answers into pgc codes.
 *
 * Invariants kept here: the local deadline of a lease is CLOCK_MONOTONIC taken before the
 * request was sent plus the TTL, never later than the server's expiry; grants and renewals
 * run outside a transaction so that a token given to the caller is committed; every call has
 * a deadline, and a call whose deadline passes shuts the session down, because the outcome of
 * a grant or renewal we did not see cannot be trusted. */
#include <inttypes.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "conn/conn_int.h"

#define DEFAULT_TIMEOUT_MS 30000
#define DEFAULT_LOCK_TIMEOUT_MS 1000

/* Database timestamps travel as microseconds since the Unix epoch. */
#define US(x) "coalesce((extract(epoch FROM " x ") * 1000000)::int8, 0)"

typedef struct call {
	pgc_conn *conn;
	char *schema_q;     /* quoted schema, PQfreemem */
	const char *schema; /* as given, for messages */
	int64_t timeout_ms;
	int64_t lock_timeout_ms;
} call;

static int check_name(const char *what, const char *name, pgc_error *err)
{
	if (name == NULL || *name == '\0')
		return pgc__err(err, PGC_EUSAGE, "%s must not be empty", what);
	return pgc_name_check(what, name, PGC_LEASE_NAME_MAX, err);
}

static int check_holder(const char *holder, pgc_error *err)
{
	if (holder == NULL)
		return pgc__err(err, PGC_EUSAGE, "lease holder must not be NULL");
	if (strlen(holder) > PGC_LEASE_HOLDER_MAX)
		return pgc__err(err, PGC_EUSAGE, "lease holder is longer than %d bytes", PGC_LEASE_HOLDER_MAX);
	return *holder == '\0' ? PGC_OK : pgc_name_check("lease holder", holder, 0, err);
}

/* Checks conn and opts, quotes the schema. */
static int call_begin(call *c, pgc_conn *conn, const pgc_lease_options *opts, const char *fn,
                      pgc_error *err)
{
	memset(c, 0, sizeof *c);
	if (conn == NULL)
		return pgc__err(err, PGC_EUSAGE, "%s: conn must not be NULL", fn);
	pgc_lease_options defaults = PGC_LEASE_OPTIONS_INIT;
	if (opts == NULL)
		opts = &defaults;
	if (opts->timeout_ms < 0 || opts->lock_timeout_ms < 0 || opts->poll_ms < 0)
		return pgc__err(err, PGC_EUSAGE, "%s: timeouts must not be negative", fn);
	if (opts->lock_timeout_ms > INT_MAX)
		return pgc__err(err, PGC_EUSAGE, "%s: lock_timeout_ms is too large", fn);
	const char *schema = opts->schema ? opts->schema : PGC_SCHEMA_DEFAULT;
	int rc = pgc__check_schema(schema, err);
	if (rc != PGC_OK)
		return rc;
	c->conn = conn;
	c->schema = schema;
	c->timeout_ms = opts->timeout_ms;
	c->lock_timeout_ms = opts->lock_timeout_ms ? opts->lock_timeout_ms : DEFAULT_LOCK_TIMEOUT_MS;
	c->schema_q = pgc__quote_ident(conn, schema, err);
	if (c->schema_q == NULL)
		return PGC_EUSAGE;
	return PGC_OK;
}

static void call_end(call *c)
{
	if (c->schema_q != NULL)
		PQfreemem(c->schema_q);
	c->schema_q = NULL;
}

/* Runs a statement of the lease functions (a template: "@S@" is the schema) and waits at most
 * timeout_ms for the whole answer. On timeout the session is closed (the outcome is unknown,
 * and a late answer must not be mistaken for the next one): PGC_ETIMEDOUT. The server's
 * statement_timeout is off for the statement: timeout_ms is the bound the caller chose. */
static PGresult *exec_bounded(call *c, const char *tmpl, int n, const char *const *vals,
                              int64_t timeout_ms, int *rc, pgc_error *err)
{
	char *sql = pgc__sql_schema(tmpl, c->schema_q);
	if (sql == NULL) {
		*rc = pgc__err(err, PGC_ENOMEM, "out of memory");
		return NULL;
	}
	pgc__call b = pgc__bound(timeout_ms, -1);
	b.on_deadline = PGC__DROP;
	b.statement_timeout_ms = 0;
	b.flags = PGC__CACHED;
	PGresult *r = pgc__query(c->conn, sql, n, vals, &b, rc, err);
	free(sql);
	return r;
}

/* Turns the server's errors that mean something here into their codes. busy_code is what a
 * lock timeout (55P03: fenced transactions of the previous token still open) becomes. */
static int map_error(call *c, int rc, pgc_error *e, int busy_code)
{
	if (rc != PGC_ESQL)
		return rc;
	const char *s = e->sqlstate;
	int code = rc;
	if (strcmp(s, "3F000") == 0 || strcmp(s, "42P01") == 0 || strcmp(s, "42883") == 0) {
		char msg[PGC_ERROR_MESSAGE_MAX], init[160];
		snprintf(msg, sizeof msg, "schema %s has no lease tables (%s): run %s", c->schema,
		         e->message, pgc__init_cmd(c->schema, init, sizeof init));
		pgc__copy_line(e->message, sizeof e->message, msg);
		code = PGC_ENOSCHEMA;
		e->klass = PGC_CLASS_USAGE;
	} else if (strcmp(s, PGC_SQLSTATE_FENCE_STALE) == 0) {
		code = PGC_ESTALE;
	} else if (strcmp(s, PGC_SQLSTATE_FENCE_UNKNOWN) == 0) {
		code = PGC_ENOTFOUND;
	} else if (strcmp(s, PGC_SQLSTATE_FENCE_LEASED) == 0) {
		code = PGC_EBUSY;
	} else if (strcmp(s, "55P03") == 0 && busy_code != 0) {
		char msg[PGC_ERROR_MESSAGE_MAX];
		snprintf(msg, sizeof msg, "transactions that checked the previous token are still open "
		         "after %" PRId64 " ms (%s)", c->lock_timeout_ms, e->message);
		pgc__copy_line(e->message, sizeof e->message, msg);
		code = busy_code;
	} else if (strcmp(s, "22023") == 0) {
		code = PGC_EUSAGE;
		e->klass = PGC_CLASS_USAGE;
	}
	e->code = code;
	return code;
}

static int64_t i64(const PGresult *r, int row, int col)
{
	if (PQgetisnull(r, row, col))
		return 0;
	return strtoll(PQgetvalue(r, row, col), NULL, 10);
}

static void copy_str(char *dst, size_t n, const char *src)
{
	snprintf(dst, n, "%s", src ? src : "");
}

static int64_t default_timeout(const call *c, int64_t fallback)
{
	return c->timeout_ms > 0 ? c->timeout_ms : fallback;
}

/* One acquire attempt. On PGC_EBUSY *out describes the holder, and *db_wait_ms (when not
 * NULL) is how long until its lease expires by the database clock (0 when unknown). */
static int acquire_once(call *c, const char *name, const char *holder, int64_t ttl_ms,
                        pgc_lease *out, int64_t *db_wait_ms, pgc_error *e)
{
	static const char sql[] =
		"SELECT granted, token, holder, " US("granted_at") ", " US("expires_at") ", "
		US("db_now") " FROM @S@.lease_acquire($1, $2, $3::int8, $4::int)";
	char ttl[24], lt[24];
	snprintf(ttl, sizeof ttl, "%" PRId64, ttl_ms);
	snprintf(lt, sizeof lt, "%" PRId64, c->lock_timeout_ms);
	const char *vals[4] = { name, holder, ttl, lt };
	int rc;
	memset(out, 0, sizeof *out);
	int64_t t0 = pgc__now_ms();
	PGresult *r = exec_bounded(c, sql, 4, vals, default_timeout(c, ttl_ms), &rc, e);
	if (r == NULL)
		return map_error(c, rc, e, PGC_EBUSY);
	if (PQntuples(r) != 1) {
		PQclear(r);
		return pgc__err(e, PGC_EINTERNAL, "lease_acquire returned no row");
	}
	copy_str(out->name, sizeof out->name, name);
	copy_str(out->holder, sizeof out->holder, PQgetvalue(r, 0, 2));
	out->token = i64(r, 0, 1);
	out->ttl_ms = ttl_ms;
	out->granted_at_us = i64(r, 0, 3);
	out->expires_at_us = i64(r, 0, 4);
	int64_t now_us = i64(r, 0, 5);
	bool granted = strcmp(PQgetvalue(r, 0, 0), "t") == 0;
	PQclear(r);
	if (granted) {
		out->deadline_ms = t0 + ttl_ms;
		return PGC_OK;
	}
	if (db_wait_ms != NULL)
		*db_wait_ms = out->expires_at_us > now_us ? (out->expires_at_us - now_us + 999) / 1000 : 0;
	double left = out->expires_at_us > now_us ? (out->expires_at_us - now_us) / 1e6 : 0;
	if (out->token == 0) /* no row: held back after a promotion (lease_acquire()) */
		return pgc__err(e, PGC_EBUSY, "lease \"%.80s\" is held back for %.3f s more: the server was promoted, "
		                "and a grant the old primary made may still be in use", name, left);
	return pgc__err(e, PGC_EBUSY, "lease \"%.80s\" is held by %.80s (token %" PRId64 ") for %.3f s more",
	                name, out->holder, out->token, left);
}

static int acquire_checks(pgc_conn *conn, const char *name, const char *holder, int64_t ttl_ms,
                          pgc_lease *out, const char *fn, pgc_error *e)
{
	if (conn == NULL || out == NULL)
		return pgc__err(e, PGC_EUSAGE, "%s: conn and out must not be NULL", fn);
	int rc;
	if ((rc = check_name("lease name", name, e)) != PGC_OK)
		return rc;
	if ((rc = check_holder(holder, e)) != PGC_OK)
		return rc;
	if (ttl_ms <= 0)
		return pgc__err(e, PGC_EUSAGE, "lease ttl must be positive, got %" PRId64 " ms", ttl_ms);
	if (ttl_ms > INT64_C(1) << 40)
		return pgc__err(e, PGC_EUSAGE, "lease ttl of %" PRId64 " ms is too large", ttl_ms);
	if (pgc__in_transaction(conn))
		return pgc__err(e, PGC_EUSAGE, "%s must run outside a transaction: the grant must commit before the token is used", fn);
	return PGC_OK;
}

int pgc_lease_acquire(pgc_conn *conn, const char *name, const char *holder, int64_t ttl_ms,
                      const pgc_lease_options *opts, pgc_lease *out, pgc_error *err)
{
	pgc_error local, *e = err ? err : &local;
	pgc_error_clear(e);
	int rc = acquire_checks(conn, name, holder, ttl_ms, out, "pgc_lease_acquire", e);
	if (rc != PGC_OK)
		return rc;
	call c;
	if ((rc = call_begin(&c, conn, opts, "pgc_lease_acquire", e)) != PGC_OK)
		return rc;
	rc = acquire_once(&c, name, holder, ttl_ms, out, NULL, e);
	call_end(&c);
	return rc;
}

/* Reads pending notifications; true when one says name was released. */
static bool take_notifies(pgc_conn *conn, const char *name, bool consume)
{
	bool hit = false;
	PGnotify *n;
	while ((n = pgc__notify(conn, consume)) != NULL) {
		consume = false;
		if (strcmp(n->relname, PGC_LEASE_CHANNEL) == 0 && strcmp(n->extra, name) == 0)
			hit = true;
		PQfreemem(n);
	}
	return hit;
}

/* Waits up to wait_ms for a release notification for name or the interrupt fd. */
static int campaign_sleep(call *c, const char *name, int64_t wait_ms, int interrupt_fd,
                          pgc_error *e)
{
	int64_t until = pgc__now_ms() + wait_ms;
	for (;;) {
		int64_t left = until - pgc__now_ms();
		if (left <= 0)
			return PGC_OK;
		int w = pgc__wait_input(c->conn, interrupt_fd, left);
		if (w == PGC__WAIT_FD)
			return pgc__err(e, PGC_EINTR, "interrupted while campaigning for \"%.80s\"", name);
		if (w == PGC__WAIT_LOST)
			return pgc__err(e, PGC_ECONNLOST, "connection to the server lost while campaigning for \"%.80s\"", name);
		if (w == PGC__WAIT_INPUT && take_notifies(c->conn, name, false))
			return PGC_OK;
	}
}

int pgc_lease_campaign(pgc_conn *conn, const char *name, const char *holder, int64_t ttl_ms,
                       int64_t wait_ms, const pgc_lease_options *opts, pgc_lease *out,
                       pgc_error *err)
{
	pgc_error local, *e = err ? err : &local;
	pgc_error_clear(e);
	int rc = acquire_checks(conn, name, holder, ttl_ms, out, "pgc_lease_campaign", e);
	if (rc != PGC_OK)
		return rc;
	if (wait_ms < -1)
		return pgc__err(e, PGC_EUSAGE, "pgc_lease_campaign: wait_ms must be -1 or more");
	call c;
	if ((rc = call_begin(&c, conn, opts, "pgc_lease_campaign", e)) != PGC_OK)
		return rc;
	int interrupt_fd = opts ? opts->interrupt_fd : -1;
	int64_t poll_ms = opts && opts->poll_ms > 0 ? opts->poll_ms : (ttl_ms / 3 > 0 ? ttl_ms / 3 : 1);
	int64_t start = pgc__now_ms();

	/* A release wakes the campaign at once, where notifications can arrive: not through a
	 * transaction-mode pooler, which may run the LISTEN on another server session. There the
	 * campaign polls. */
	pgc_pooler_info pi;
	bool listen = pgc_conn_pooler(conn, 0, 0, &pi, e) == PGC_OK &&
	              (pi.mode == PGC_POOLER_NONE || pi.mode == PGC_POOLER_SESSION);
	pgc_error_clear(e);
	if (listen && (rc = pgc__listen(conn, PGC_LEASE_CHANNEL, e)) != PGC_OK) {
		call_end(&c);
		return map_error(&c, rc, e, 0);
	}
	for (;;) {
		int64_t db_wait = 0;
		rc = acquire_once(&c, name, holder, ttl_ms, out, &db_wait, e);
		if (rc != PGC_EBUSY)
			break;
		/* A release that arrived while we asked: try again at once. */
		if (listen && take_notifies(conn, name, true))
			continue;
		int64_t sleep_ms = poll_ms;
		if (db_wait > 0 && db_wait + 2 < sleep_ms)
			sleep_ms = db_wait + 2; /* just after the holder's expiry */
		if (wait_ms >= 0) {
			int64_t left = start + wait_ms - pgc__now_ms();
			if (left <= 0) {
				char msg[PGC_ERROR_MESSAGE_MAX];
				snprintf(msg, sizeof msg, "gave up campaigning after %" PRId64 " ms: %s", wait_ms, e->message);
				rc = pgc__err(e, PGC_ETIMEDOUT, "%s", msg);
				break;
			}
			if (left < sleep_ms)
				sleep_ms = left;
		}
		if ((rc = campaign_sleep(&c, name, sleep_ms, interrupt_fd, e)) != PGC_OK)
			break;
	}
	if (listen && pgc__conn_ok(conn) && !pgc__in_transaction(conn)) {
		pgc_error ue;
		(void)pgc__unlisten(conn, PGC_LEASE_CHANNEL, &ue);
		take_notifies(conn, name, false);
	}
	call_end(&c);
	return rc;
}

int pgc_lease_renew(pgc_conn *conn, pgc_lease *lease, const pgc_lease_options *opts,
                    pgc_error *err)
{
	pgc_error local, *e = err ? err : &local;
	pgc_error_clear(e);
	if (conn == NULL || lease == NULL)
		return pgc__err(e, PGC_EUSAGE, "pgc_lease_renew: conn and lease must not be NULL");
	int rc;
	if ((rc = check_name("lease name", lease->name, e)) != PGC_OK)
		return rc;
	if (lease->ttl_ms <= 0 || lease->token <= 0)
		return pgc__err(e, PGC_EUSAGE, "pgc_lease_renew: the lease has no ttl or token (not from pgc_lease_acquire?)");
	if (pgc__in_transaction(conn))
		return pgc__err(e, PGC_EUSAGE, "pgc_lease_renew must run outside a transaction");
	call c;
	if ((rc = call_begin(&c, conn, opts, "pgc_lease_renew", e)) != PGC_OK)
		return rc;
	int64_t t0 = pgc__now_ms();
	int64_t timeout = c.timeout_ms;
	if (timeout == 0) {
		/* An answer after the deadline is of no use: the lease counts as lost by then. */
		timeout = lease->deadline_ms > t0 ? lease->deadline_ms - t0 : lease->ttl_ms;
	}
	static const char sql[] = "SELECT status, token, holder, " US("expires_at") ", " US("db_now")
	                          " FROM @S@.lease_renew($1, $2::int8, $3::int8)";
	char tok[24], ttl[24];
	snprintf(tok, sizeof tok, "%" PRId64, lease->token);
	snprintf(ttl, sizeof ttl, "%" PRId64, lease->ttl_ms);
	const char *vals[3] = { lease->name, tok, ttl };
	PGresult *r = exec_bounded(&c, sql, 3, vals, timeout, &rc, e);
	if (r == NULL) {
		rc = map_error(&c, rc, e, PGC_ETIMEDOUT);
		call_end(&c);
		return rc;
	}
	call_end(&c);
	if (PQntuples(r) != 1) {
		PQclear(r);
		return pgc__err(e, PGC_EINTERNAL, "lease_renew returned no row");
	}
	const char *status = PQgetvalue(r, 0, 0);
	if (strcmp(status, "ok") == 0) {
		lease->expires_at_us = i64(r, 0, 3);
		lease->deadline_ms = t0 + lease->ttl_ms;
		PQclear(r);
		return PGC_OK;
	}
	int64_t cur = i64(r, 0, 1);
	char who[PGC_LEASE_HOLDER_MAX + 1];
	copy_str(who, sizeof who, PQgetvalue(r, 0, 2));
	lease->deadline_ms = 0;
	if (strcmp(status, "superseded") == 0)
		rc = pgc__err(e, PGC_ESTALE, "lease \"%.80s\" lost: token %" PRId64 " was granted to %.80s since our token %" PRId64,
		              lease->name, cur, who, lease->token);
	else if (strcmp(status, "expired") == 0)
		rc = pgc__err(e, PGC_ESTALE, "lease \"%.80s\" (token %" PRId64 ") expired before it was renewed",
		              lease->name, lease->token);
	else if (strcmp(status, "released") == 0)
		rc = pgc__err(e, PGC_ESTALE, "lease \"%.80s\" (token %" PRId64 ") was released", lease->name, lease->token);
	else
		rc = pgc__err(e, PGC_ESTALE, "lease \"%.80s\" has no token %" PRId64, lease->name, lease->token);
	PQclear(r);
	return rc;
}

int pgc_lease_release(pgc_conn *conn, const char *name, int64_t token,
                      const pgc_lease_options *opts, pgc_error *err)
{
	pgc_error local, *e = err ? err : &local;
	pgc_error_clear(e);
	if (conn == NULL)
		return pgc__err(e, PGC_EUSAGE, "pgc_lease_release: conn must not be NULL");
	int rc;
	if ((rc = check_name("lease name", name, e)) != PGC_OK)
		return rc;
	if (token <= 0)
		return pgc__err(e, PGC_EUSAGE, "token must be positive, got %" PRId64, token);
	if (pgc__in_transaction(conn))
		return pgc__err(e, PGC_EUSAGE, "pgc_lease_release must run outside a transaction");
	call c;
	if ((rc = call_begin(&c, conn, opts, "pgc_lease_release", e)) != PGC_OK)
		return rc;
	static const char sql[] = "SELECT @S@.lease_release($1, $2::int8)";
	char tok[24];
	snprintf(tok, sizeof tok, "%" PRId64, token);
	const char *vals[2] = { name, tok };
	PGresult *r = exec_bounded(&c, sql, 2, vals, default_timeout(&c, DEFAULT_TIMEOUT_MS), &rc, e);
	if (r == NULL) {
		rc = map_error(&c, rc, e, PGC_ETIMEDOUT);
		call_end(&c);
		return rc;
	}
	call_end(&c);
	const char *status = PQntuples(r) == 1 ? PQgetvalue(r, 0, 0) : "";
	if (strcmp(status, "ok") == 0 || strcmp(status, "released") == 0)
		rc = PGC_OK;
	else if (strcmp(status, "superseded") == 0)
		rc = pgc__err(e, PGC_ESTALE, "lease \"%.80s\": token %" PRId64 " is stale, a newer token was granted",
		              name, token);
	else
		rc = pgc__err(e, PGC_ENOTFOUND, "lease \"%.80s\" has no token %" PRId64, name, token);
	PQclear(r);
	return rc;
}

#define INFO_COLUMNS                                                                        \
	"name, holder, kind, token, kind = 'lease' AND expires_at > clock_timestamp(), "         \
	"coalesce(ttl_ms, 0), " US("granted_at") ", " US("renewed_at") ", " US("expires_at") ", " \
	US("released_at") ", " US("clock_timestamp()")

static void read_info(const PGresult *r, int row, pgc_lease_info *out)
{
	memset(out, 0, sizeof *out);
	copy_str(out->name, sizeof out->name, PQgetvalue(r, row, 0));
	copy_str(out->holder, sizeof out->holder, PQgetvalue(r, row, 1));
	copy_str(out->kind, sizeof out->kind, PQgetvalue(r, row, 2));
	out->token = i64(r, row, 3);
	out->held = strcmp(PQgetvalue(r, row, 4), "t") == 0;
	out->ttl_ms = i64(r, row, 5);
	out->granted_at_us = i64(r, row, 6);
	out->renewed_at_us = i64(r, row, 7);
	out->expires_at_us = i64(r, row, 8);
	out->released_at_us = i64(r, row, 9);
	out->db_now_us = i64(r, row, 10);
}

int pgc_lease_get(pgc_conn *conn, const char *name, const pgc_lease_options *opts,
                  pgc_lease_info *out, pgc_error *err)
{
	pgc_error local, *e = err ? err : &local;
	pgc_error_clear(e);
	if (conn == NULL || out == NULL)
		return pgc__err(e, PGC_EUSAGE, "pgc_lease_get: conn and out must not be NULL");
	int rc;
	if ((rc = check_name("lease name", name, e)) != PGC_OK)
		return rc;
	call c;
	if ((rc = call_begin(&c, conn, opts, "pgc_lease_get", e)) != PGC_OK)
		return rc;
	static const char sql[] = "SELECT " INFO_COLUMNS " FROM @S@.leases WHERE name = $1";
	const char *vals[1] = { name };
	PGresult *r = exec_bounded(&c, sql, 1, vals, default_timeout(&c, DEFAULT_TIMEOUT_MS), &rc, e);
	if (r == NULL) {
		rc = map_error(&c, rc, e, 0);
		call_end(&c);
		return rc;
	}
	call_end(&c);
	if (PQntuples(r) == 0) {
		PQclear(r);
		return pgc__err(e, PGC_ENOTFOUND, "no lease or token named \"%.80s\"", name);
	}
	read_info(r, 0, out);
	PQclear(r);
	return PGC_OK;
}

int pgc_lease_list(pgc_conn *conn, const pgc_lease_options *opts, pgc_lease_info **out,
                   size_t *count, pgc_error *err)
{
	pgc_error local, *e = err ? err : &local;
	pgc_error_clear(e);
	if (conn == NULL || out == NULL || count == NULL)
		return pgc__err(e, PGC_EUSAGE, "pgc_lease_list: conn, out and count must not be NULL");
	*out = NULL;
	*count = 0;
	int rc;
	call c;
	if ((rc = call_begin(&c, conn, opts, "pgc_lease_list", e)) != PGC_OK)
		return rc;
	static const char sql[] = "SELECT " INFO_COLUMNS " FROM @S@.leases ORDER BY name";
	PGresult *r = exec_bounded(&c, sql, 0, NULL, default_timeout(&c, DEFAULT_TIMEOUT_MS), &rc, e);
	if (r == NULL) {
		rc = map_error(&c, rc, e, 0);
		call_end(&c);
		return rc;
	}
	call_end(&c);
	int n = PQntuples(r);
	if (n > 0) {
		pgc_lease_info *a = calloc((size_t)n, sizeof *a);
		if (a == NULL) {
			PQclear(r);
			return pgc__err(e, PGC_ENOMEM, "out of memory");
		}
		for (int i = 0; i < n; i++)
			read_info(r, i, &a[i]);
		*out = a;
		*count = (size_t)n;
	}
	PQclear(r);
	return PGC_OK;
}

int64_t pgc_lease_remaining_ms(const pgc_lease *lease)
{
	if (lease == NULL || lease->deadline_ms == 0)
		return 0;
	return lease->deadline_ms - pgc__now_ms();
}

int pgc_fence_check(pgc_conn *conn, const char *name, int64_t token,
                    const pgc_lease_options *opts, pgc_error *err)
{
	pgc_error local, *e = err ? err : &local;
	pgc_error_clear(e);
	if (conn == NULL)
		return pgc__err(e, PGC_EUSAGE, "pgc_fence_check: conn must not be NULL");
	int rc;
	if ((rc = check_name("fence name", name, e)) != PGC_OK)
		return rc;
	if (token <= 0)
		return pgc__err(e, PGC_EUSAGE, "fencing token must be positive, got %" PRId64, token);
	call c;
	if ((rc = call_begin(&c, conn, opts, "pgc_fence_check", e)) != PGC_OK)
		return rc;
	static const char sql[] = "SELECT @S@.fence_check($1, $2::int8)";
	char tok[24];
	snprintf(tok, sizeof tok, "%" PRId64, token);
	const char *vals[2] = { name, tok };
	PGresult *r = exec_bounded(&c, sql, 2, vals, default_timeout(&c, DEFAULT_TIMEOUT_MS), &rc, e);
	if (r == NULL)
		rc = map_error(&c, rc, e, 0);
	PQclear(r);
	call_end(&c);
	return rc;
}

int pgc_fence_next(pgc_conn *conn, const char *name, const char *holder,
                   const pgc_lease_options *opts, int64_t *out_token, pgc_error *err)
{
	pgc_error local, *e = err ? err : &local;
	pgc_error_clear(e);
	if (conn == NULL || out_token == NULL)
		return pgc__err(e, PGC_EUSAGE, "pgc_fence_next: conn and out_token must not be NULL");
	int rc;
	if ((rc = check_name("fence name", name, e)) != PGC_OK)
		return rc;
	if ((rc = check_holder(holder, e)) != PGC_OK)
		return rc;
	if (pgc__in_transaction(conn))
		return pgc__err(e, PGC_EUSAGE, "pgc_fence_next must run outside a transaction: the token must be committed before it is used");
	call c;
	if ((rc = call_begin(&c, conn, opts, "pgc_fence_next", e)) != PGC_OK)
		return rc;
	static const char sql[] = "SELECT @S@.fence_next($1, $2, $3::int)";
	char lt[24];
	snprintf(lt, sizeof lt, "%" PRId64, c.lock_timeout_ms);
	const char *vals[3] = { name, holder, lt };
	PGresult *r = exec_bounded(&c, sql, 3, vals, default_timeout(&c, DEFAULT_TIMEOUT_MS), &rc, e);
	if (r == NULL) {
		rc = map_error(&c, rc, e, PGC_ETIMEDOUT);
		call_end(&c);
		return rc;
	}
	call_end(&c);
	*out_token = i64(r, 0, 0);
	PQclear(r);
	return PGC_OK;
}

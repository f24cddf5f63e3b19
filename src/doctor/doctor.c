/* doctor.c - checks for coordination hazards between a client and its server
 *
 * The checks are a catalogue, run in order by pgc_doctor_run() as the lab runs its
 * experiments: each is a function that reads what it needs and adds its findings. A check
 * that cannot run records the failure once (the first one wins, as in the lab's helpers) and
 * returns; the runner stops there and returns that error.
 *
 * Everything is read, nothing is changed: the only writes are the pooler probe's BEGIN/COMMIT
 * with no work in it, on a second, short-lived session of the connection layer's. Settings
 * are read on another fresh session when the pooler is checked, so the values are what a new
 * session of this role gets (server, database and role defaults, the DSN's options), not what
 * the caller SET on conn. */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "conn/conn_int.h"

const char *pgc_doctor_severity_name(pgc_doctor_severity severity)
{
	switch (severity) {
	case PGC_DOCTOR_OK: return "ok";
	case PGC_DOCTOR_INFO: return "info";
	case PGC_DOCTOR_WARNING: return "warning";
	case PGC_DOCTOR_ERROR: return "error";
	}
	return "unknown";
}

static pgc_doctor_finding *add(pgc_doctor_report *r, const char *check, pgc_doctor_severity sev,
                               const char *value)
{
	if (r->count >= PGC_DOCTOR_FINDINGS_MAX)
		return NULL;
	pgc_doctor_finding *f = &r->findings[r->count++];
	memset(f, 0, sizeof *f);
	snprintf(f->check, sizeof f->check, "%s", check);
	f->severity = sev;
	pgc__copy_line(f->value, sizeof f->value, value ? value : "");
	if (sev > r->worst)
		r->worst = sev;
	return f;
}

static void say(char *dst, size_t n, const char *fmt, ...) PGC_PRINTF(3, 4);
static void say(char *dst, size_t n, const char *fmt, ...)
{
	char buf[1024];
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(buf, sizeof buf, fmt, ap);
	va_end(ap);
	pgc__copy_line(dst, n, buf);
}

#define FINDING(r_, ck_, sev_, val_, fx_, ...)                                             \
	do {                                                                                   \
		pgc_doctor_finding *f_ = add((r_), (ck_), (sev_), (val_));                         \
		if (f_ != NULL) {                                                                  \
			say(f_->message, sizeof f_->message, __VA_ARGS__);                             \
			pgc__copy_line(f_->fix, sizeof f_->fix, (fx_));                                \
		}                                                                                  \
	} while (0)

/* One value of a one-row answer; NULL with *rc set on failure. */
static PGresult *one_row(pgc_conn *conn, const char *sql, int *rc, pgc_error *e)
{
	PGresult *res = pgc__exec(conn, sql, 0, NULL, rc, e);
	if (res != NULL && PQntuples(res) != 1) {
		PQclear(res);
		*rc = pgc__err(e, PGC_EINTERNAL, "expected one row from: %.60s", sql);
		return NULL;
	}
	return res;
}

int pgc_server_role_get(pgc_conn *conn, pgc_server_role *out, pgc_error *err)
{
	pgc_error local, *e = err ? err : &local;
	pgc_error_clear(e);
	if (conn == NULL || out == NULL)
		return pgc__err(e, PGC_EUSAGE, "pgc_server_role_get: conn and out must not be NULL");
	memset(out, 0, sizeof *out);
	PGconn *pg = pgc_conn_pg(conn);
	if (pg != NULL) {
		snprintf(out->host, sizeof out->host, "%s", PQhost(pg) ? PQhost(pg) : "");
		snprintf(out->port, sizeof out->port, "%s", PQport(pg) ? PQport(pg) : "");
	}
	int rc;
	PGresult *res = one_row(conn, "SELECT pg_catalog.pg_is_in_recovery()", &rc, e);
	if (res == NULL)
		return rc;
	out->standby = strcmp(PQgetvalue(res, 0, 0), "t") == 0;
	PQclear(res);
	if (!out->standby) {
		/* The WAL insert position names the new timeline as soon as a promotion ends; the
		 * checkpoint's timeline waits for the first checkpoint after it. */
		res = one_row(conn, "SELECT ('x' || substr(pg_catalog.pg_walfile_name("
		              "pg_catalog.pg_current_wal_lsn()), 1, 8))::bit(32)::bigint", &rc, e);
		if (res == NULL)
			return rc;
		out->timeline = strtoll(PQgetvalue(res, 0, 0), NULL, 10);
		snprintf(out->timeline_source, sizeof out->timeline_source, "wal");
		PQclear(res);
		return PGC_OK;
	}
	/* A standby: its walreceiver's timeline needs pg_read_all_stats (others see NULL); the last
	 * restartpoint's is readable by every role but lags behind a timeline switch upstream. */
	res = one_row(conn, "SELECT (SELECT received_tli FROM pg_catalog.pg_stat_wal_receiver LIMIT 1)",
	              &rc, e);
	if (res == NULL)
		return rc;
	if (!PQgetisnull(res, 0, 0)) {
		out->timeline = strtoll(PQgetvalue(res, 0, 0), NULL, 10);
		snprintf(out->timeline_source, sizeof out->timeline_source, "walreceiver");
	}
	PQclear(res);
	if (out->timeline > 0)
		return PGC_OK;
	pgc_error ce = PGC_ERROR_INIT;
	res = one_row(conn, "SELECT timeline_id FROM pg_catalog.pg_control_checkpoint()", &rc, &ce);
	if (res == NULL) {
		if (strcmp(ce.sqlstate, "42501") == 0)
			return PGC_OK; /* not allowed to see it: timeline 0 */
		*e = ce;
		return rc;
	}
	out->timeline = strtoll(PQgetvalue(res, 0, 0), NULL, 10);
	snprintf(out->timeline_source, sizeof out->timeline_source, "checkpoint");
	PQclear(res);
	return PGC_OK;
}

/* One run: what the checks share. */
typedef struct doctor {
	pgc_conn *conn;
	const pgc_doctor_options *opts;
	const char *schema;
	pgc_doctor_report *out;
	pgc_error *err;
	int rc;              /* the first failure; PGC_OK while there is none */
	pgc_conn *fresh;     /* the session settings are read on, when not conn */
	bool fresh_tried;
	char user[128];
	char *quser;         /* user, quoted for the fixes */
	bool sees_all;       /* pg_read_all_stats: every session's activity is visible */
	pgc_server_role role; /* set by the replication check */
	bool role_known;
	int standbys;         /* visible in pg_stat_replication */
	int sync_standbys;    /* of them, sync or quorum */
	char lag[64];         /* the largest replay lag, "" when not visible */
} doctor;

typedef struct check check;
typedef void (*check_fn)(doctor *d, const check *ck);

struct check {
	const char *name;        /* the finding it adds */
	const char *description; /* one line: what it looks at */
	check_fn fn;
	bool pooler;             /* only with opts->check_pooler */
};

/* Records a failure (the first one wins) from e and returns false. */
static bool fail(doctor *d, const check *ck, int rc, const pgc_error *e)
{
	if (d->rc != PGC_OK)
		return false;
	d->rc = rc;
	if (d->err != NULL) {
		*d->err = *e;
		pgc__err_prefix(d->err, "%s check", ck->name);
	}
	return false;
}

/* Runs sql on c; NULL with the failure recorded. */
static PGresult *query(doctor *d, const check *ck, pgc_conn *c, const char *sql, int n,
                       const char *const *vals)
{
	int rc;
	pgc_error e = PGC_ERROR_INIT;
	PGresult *res = pgc__exec(c, sql, n, vals, &rc, &e);
	if (res == NULL)
		fail(d, ck, rc, &e);
	return res;
}

/* The session settings are read on: a new one like conn when the pooler is checked (opened on
 * first use, after the probe's own session has closed, so that the doctor never holds more
 * than two), else conn; conn too when the new one cannot be opened. */
static pgc_conn *settings_session(doctor *d)
{
	if (d->opts->check_pooler && !d->fresh_tried) {
		d->fresh_tried = true;
		pgc_error e = PGC_ERROR_INIT;
		if (pgc__open_like(d->conn, NULL, NULL, NULL, &d->fresh, &e) != PGC_OK)
			d->fresh = NULL;
	}
	return d->fresh != NULL ? d->fresh : d->conn;
}

/* A setting as a fresh session of this role sees it: value (with unit), source and the raw
 * number (raw may be NULL). False with the failure recorded. */
static bool setting(doctor *d, const check *ck, const char *name, char *value, size_t vn,
                    char *source, size_t sn, long long *raw)
{
	const char *params[1] = { name };
	PGresult *res = query(d, ck, settings_session(d),
	        "SELECT current_setting(name), source, setting FROM pg_catalog.pg_settings"
	        " WHERE name = $1", 1, params);
	if (res == NULL)
		return false;
	if (PQntuples(res) != 1) {
		PQclear(res);
		pgc_error e = PGC_ERROR_INIT;
		pgc__err(&e, PGC_EINTERNAL, "the server has no setting named %s", name);
		return fail(d, ck, PGC_EINTERNAL, &e);
	}
	snprintf(value, vn, "%s", PQgetvalue(res, 0, 0));
	snprintf(source, sn, "%s", PQgetvalue(res, 0, 1));
	if (raw != NULL)
		*raw = atoll(PQgetvalue(res, 0, 2));
	PQclear(res);
	return true;
}

/* ---- the checks ---- */

static void check_server(doctor *d, const check *ck)
{
	PGresult *res = query(d, ck, d->conn,
	        "SELECT current_setting('server_version'), current_user, current_database(),"
	        " pg_has_role(current_user, 'pg_read_all_stats', 'USAGE')", 0, NULL);
	if (res == NULL)
		return;
	char version[64], db[128];
	snprintf(version, sizeof version, "%s", PQgetvalue(res, 0, 0));
	snprintf(d->user, sizeof d->user, "%s", PQgetvalue(res, 0, 1));
	snprintf(db, sizeof db, "%s", PQgetvalue(res, 0, 2));
	d->sees_all = strcmp(PQgetvalue(res, 0, 3), "t") == 0;
	PQclear(res);
	pgc_error e = PGC_ERROR_INIT;
	if ((d->quser = pgc__quote_ident(d->conn, d->user, &e)) == NULL) {
		fail(d, ck, e.code, &e);
		return;
	}
	FINDING(d->out, ck->name, PGC_DOCTOR_OK, version, "", "PostgreSQL %s, user %s, database %s",
	        version, d->user, db);
}

static void check_pooler(doctor *d, const check *ck)
{
	/* The layer's probe, thorough: it tests with a second session of its own whatever
	 * libpq's backend pid says. */
	pgc_pooler_info p;
	pgc_error e = PGC_ERROR_INIT;
	int rc = pgc_conn_pooler(d->conn, PGC_POOLER_THOROUGH, d->opts->pooler_wait_ms, &p, &e);
	if (rc != PGC_OK) {
		fail(d, ck, rc, &e);
		return;
	}
	switch (p.mode) {
	case PGC_POOLER_STATEMENT:
		FINDING(d->out, ck->name, PGC_DOCTOR_ERROR, "statement",
		        "connect pgcoord straight to PostgreSQL, or through a pool in session mode",
		        "a statement-mode pooler is in between (%s): transactions, session locks and"
		        " LISTEN cannot work through it", p.why);
		break;
	case PGC_POOLER_TRANSACTION:
		FINDING(d->out, ck->name, PGC_DOCTOR_ERROR, "transaction",
		        "connect pgcoord straight to PostgreSQL (or through a pool in session mode) for"
		        " session locks, run, elect, workers and LISTEN; through this pooler use only"
		        " transaction-scoped locks inside one transaction",
		        "a transaction-mode pooler is in between: %s. Session advisory locks and LISTEN"
		        " are unsafe here: a lock is taken on a server connection you do not keep, an"
		        " unlock can land on another one and return false, and the lock stays held",
		        p.why);
		break;
	case PGC_POOLER_UNKNOWN:
		FINDING(d->out, ck->name, PGC_DOCTOR_WARNING, "unknown",
		        "check that the DSN allows a second connection, then run pgcoord doctor again",
		        "could not test for a pooler: %s", p.why);
		break;
	case PGC_POOLER_SESSION:
		FINDING(d->out, ck->name, PGC_DOCTOR_INFO, "session", "",
		        "a pooler or proxy is in between (libpq was told pid %d, the server says %d),"
		        " but each client keeps its server session: session locks are safe",
		        p.libpq_pid, p.server_pid);
		break;
	case PGC_POOLER_NONE:
		FINDING(d->out, ck->name, PGC_DOCTOR_OK, "none", "",
		        "direct session: the backend pid (%d) stays the same between statements",
		        p.server_pid);
		break;
	}
}

static const struct {
	const char *name;
	const char *suggest;
	const char *why;
} timeouts[] = {
	{ "lock_timeout", "5s", "a lock wait never ends on its own" },
	{ "statement_timeout", "5min", "a stuck statement runs (and holds its locks) forever" },
	{ "idle_in_transaction_session_timeout", "5min",
	  "a client that stops mid-transaction holds its locks until someone kills it" },
};

/* One of the timeouts above, named by the check. */
static void check_timeout(doctor *d, const check *ck)
{
	size_t i = 0;
	while (strcmp(timeouts[i].name, ck->name) != 0)
		i++;
	char value[64], source[64], fix[512];
	long long raw;
	if (!setting(d, ck, ck->name, value, sizeof value, source, sizeof source, &raw))
		return;
	if (raw == 0) {
		snprintf(fix, sizeof fix, "ALTER ROLE %s SET %s = '%s';", d->quser, ck->name,
		         timeouts[i].suggest);
		FINDING(d->out, ck->name, PGC_DOCTOR_WARNING, value, fix,
		        "%s is 0 (no limit) for role %s (source: %s): %s", ck->name, d->user, source,
		        timeouts[i].why);
	} else {
		FINDING(d->out, ck->name, PGC_DOCTOR_OK, value, "", "%s is %s for role %s (source: %s)",
		        ck->name, value, d->user, source);
	}
}

static void check_log_lock_waits(doctor *d, const check *ck)
{
	char value[64], source[64], dt_value[64];
	if (!setting(d, ck, "log_lock_waits", value, sizeof value, source, sizeof source, NULL) ||
	    !setting(d, ck, "deadlock_timeout", dt_value, sizeof dt_value, source, sizeof source, NULL))
		return;
	if (strcmp(value, "on") != 0)
		FINDING(d->out, ck->name, PGC_DOCTOR_WARNING, value,
		        "ALTER SYSTEM SET log_lock_waits = on; SELECT pg_reload_conf();",
		        "log_lock_waits is off: a session that waits longer than deadlock_timeout (%s) for a"
		        " lock leaves no trace in the server log", dt_value);
	else
		FINDING(d->out, ck->name, PGC_DOCTOR_OK, value, "",
		        "log_lock_waits is on: waits longer than deadlock_timeout (%s) are logged", dt_value);
}

static void check_deadlock_timeout(doctor *d, const check *ck)
{
	char dt_value[64], source[64];
	long long dt;
	if (!setting(d, ck, "deadlock_timeout", dt_value, sizeof dt_value, source, sizeof source, &dt))
		return;
	if (dt < 100)
		FINDING(d->out, ck->name, PGC_DOCTOR_WARNING, dt_value,
		        "ALTER SYSTEM SET deadlock_timeout = '1s'; SELECT pg_reload_conf();",
		        "deadlock_timeout is %s: every lock wait that long runs the deadlock check, which is"
		        " expensive under contention", dt_value);
	else if (dt > 10000)
		FINDING(d->out, ck->name, PGC_DOCTOR_WARNING, dt_value,
		        "ALTER SYSTEM SET deadlock_timeout = '1s'; SELECT pg_reload_conf();",
		        "deadlock_timeout is %s: a deadlock holds both sessions that long before one is"
		        " aborted (40P01), and log_lock_waits reports waits that late", dt_value);
	else
		FINDING(d->out, ck->name, PGC_DOCTOR_OK, dt_value, "",
		        "deadlock_timeout is %s: deadlocks are found (40P01) after that long", dt_value);
}

/* The shared lock table: table locks and advisory locks of all sessions share it. Advisory
 * locks are judged on their own too: a scheme that takes one per business object and keeps it
 * fills the table for every session ("out of shared memory"), and says who does it. */
static void check_lock_table(doctor *d, const check *ck)
{
	PGresult *res = query(d, ck, settings_session(d),
	        "SELECT current_setting('max_locks_per_transaction')::bigint,"
	        " current_setting('max_connections')::bigint,"
	        " current_setting('max_prepared_transactions')::bigint,"
	        " (SELECT count(*) FROM pg_catalog.pg_locks WHERE NOT fastpath),"
	        " (SELECT count(*) FROM pg_catalog.pg_locks WHERE locktype = 'advisory'),"
	        " top.pid, top.n, coalesce(nullif(a.application_name, ''), '-')"
	        " FROM (SELECT 1) AS one"
	        " LEFT JOIN (SELECT pid, count(*) AS n FROM pg_catalog.pg_locks WHERE locktype = 'advisory'"
	        "  GROUP BY pid ORDER BY count(*) DESC, pid LIMIT 1) AS top ON true"
	        " LEFT JOIN pg_catalog.pg_stat_activity a ON a.pid = top.pid", 0, NULL);
	if (res == NULL)
		return;
	long long mlpt = atoll(PQgetvalue(res, 0, 0)), mc = atoll(PQgetvalue(res, 0, 1));
	long long mpt = atoll(PQgetvalue(res, 0, 2)), used = atoll(PQgetvalue(res, 0, 3));
	long long advisory = atoll(PQgetvalue(res, 0, 4));
	char top_pid[24], top_app[64];
	snprintf(top_pid, sizeof top_pid, "%s", PQgetvalue(res, 0, 5));
	long long top_n = atoll(PQgetvalue(res, 0, 6));
	pgc__copy_line(top_app, sizeof top_app, PQgetvalue(res, 0, 7));
	PQclear(res);
	long long slots = mlpt * (mc + mpt);
	char slots_s[32];
	snprintf(slots_s, sizeof slots_s, "%lld", slots);
	pgc_doctor_severity sev = used * 10 >= slots * 9 ? PGC_DOCTOR_ERROR
	                          : used * 2 >= slots     ? PGC_DOCTOR_WARNING
	                                                  : PGC_DOCTOR_OK;
	pgc_doctor_severity adv = advisory * 10 >= slots * 8 ? PGC_DOCTOR_ERROR
	                          : advisory * 2 >= slots     ? PGC_DOCTOR_WARNING
	                                                      : PGC_DOCTOR_OK;
	char share[320] = "", fix[512];
	if (adv != PGC_DOCTOR_OK) {
		snprintf(share, sizeof share,
		         "; advisory locks alone take %lld%% of the slots (pid %s, application %s, holds %lld"
		         " of them): advisory locks kept per business object fill the table, and every"
		         " session's next lock fails with out of shared memory", slots > 0 ? advisory * 100 / slots : 0,
		         top_pid, top_app, top_n);
		snprintf(fix, sizeof fix,
		         "take advisory locks for the work in progress only and release them when it ends"
		         " (pid %s holds %lld; pgcoord locks --pid %s --advisory lists them), or raise"
		         " max_locks_per_transaction (takes a restart)", top_pid, top_n, top_pid);
	} else if (sev != PGC_DOCTOR_OK) {
		snprintf(fix, sizeof fix, "hold fewer advisory locks at once, or raise max_locks_per_transaction"
		         " (takes a restart)");
	} else {
		fix[0] = '\0';
	}
	FINDING(d->out, ck->name, sev > adv ? sev : adv, slots_s, fix,
	        "shared lock table: max_locks_per_transaction %lld x (max_connections %lld +"
	        " max_prepared_transactions %lld) = %lld slots, shared by table and advisory locks;"
	        " %lld in use now (%lld advisory)%s", mlpt, mc, mpt, slots, used, advisory, share);
}

/* An advisory key of pg_locks as pgcoord prints it, with its registered name when the schema's
 * registry has one: "name (key N)" or "N". False with the failure recorded when the session is
 * lost; a registry that cannot be read only leaves the name out. */
static bool key_words(doctor *d, const check *ck, const char *classid, const char *objid,
                      const char *objsubid, char *buf, size_t size)
{
	pgc_key key;
	if (pgc_key_from_pg_locks((uint32_t)strtoul(classid, NULL, 10), (uint32_t)strtoul(objid, NULL, 10),
	                          atoi(objsubid), &key) != PGC_OK) {
		snprintf(buf, size, "%s,%s,%s", classid, objid, objsubid);
		return true;
	}
	pgc_error e = PGC_ERROR_INIT;
	if (pgc_key_lookup_name(d->conn, d->schema, &key, &e) != PGC_OK) {
		if (e.code == PGC_ECONNLOST || e.code == PGC_ETIMEDOUT)
			return fail(d, ck, e.code, &e);
		key.name[0] = '\0';
	}
	char num[PGC_KEY_FORMAT_MAX];
	pgc_key_format(&key, num, sizeof num);
	if (key.name[0] != '\0')
		snprintf(buf, size, "%s (key %s)", key.name, num);
	else
		snprintf(buf, size, "key %s", num);
	return true;
}

/* Appends to buf, cut at its size. */
static void append(char *buf, size_t size, const char *fmt, ...) PGC_PRINTF(3, 4);
static void append(char *buf, size_t size, const char *fmt, ...)
{
	size_t len = strlen(buf);
	if (len + 1 >= size)
		return;
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(buf + len, size - len, fmt, ap);
	va_end(ap);
}

#define WAITS_NAMED 2  /* lock waits, long advisory locks named in a message (it has 512 bytes) */
#define GROUPS_NAMED 3 /* groups of sessions without an application_name */

/* Lock waits going on now that have lasted longer than deadlock_timeout (those log_lock_waits
 * would log), with the first session each waits for (pg_blocking_pids). The wait began at
 * pg_locks.waitstart (PostgreSQL 14 and later), else at the waiter's state_change (its
 * statement's start: an upper bound). */
/* What a finding over pg_stat_activity says when the role sees only its own roles' sessions. */
static const char *sessions_scope(const doctor *d)
{
	return d->sees_all ? "" : " (only sessions of roles you can see: grant pg_read_all_stats to see all)";
}

static void check_lock_waits(doctor *d, const check *ck)
{
	char dt_value[64], source[64];
	long long dt;
	if (!setting(d, ck, "deadlock_timeout", dt_value, sizeof dt_value, source, sizeof source, &dt))
		return;
	char dt_s[24];
	snprintf(dt_s, sizeof dt_s, "%lld", dt);
	const char *pp[1] = { dt_s };
	char sql[3072];
	snprintf(sql, sizeof sql,
	        "SELECT w.pid, coalesce(nullif(w.application_name, ''), '-'),"
	        " round(extract(epoch FROM clock_timestamp() - w.since)::numeric, 1)::text, w.mode,"
	        " CASE w.locktype WHEN 'relation' THEN 'table ' || w.relation::regclass::text"
	        "  WHEN 'tuple' THEN 'a row of ' || w.relation::regclass::text"
	        "  WHEN 'transactionid' THEN 'a row (or the end of transaction ' || w.transactionid::text || ')'"
	        "  WHEN 'advisory' THEN 'advisory' ELSE w.locktype END,"
	        " coalesce(w.classid::text, ''), coalesce(w.objid::text, ''), coalesce(w.objsubid::text, ''),"
	        " coalesce(b.pid::text, ''), coalesce(nullif(b.application_name, ''), '-'),"
	        " coalesce(b.state, 'not visible'),"
	        " coalesce(to_char(b.query_start, 'YYYY-MM-DD HH24:MI:SS TZ'), '-'),"
	        " count(*) OVER ()"
	        " FROM (SELECT a.pid, a.application_name, l.mode, l.locktype, l.relation, l.transactionid,"
	        "  l.classid, l.objid, l.objsubid, %s AS since, pg_catalog.pg_blocking_pids(a.pid) AS blockers"
	        "  FROM pg_catalog.pg_stat_activity a JOIN pg_catalog.pg_locks l ON l.pid = a.pid AND NOT l.granted"
	        "  WHERE a.wait_event_type = 'Lock' AND a.state IS NOT NULL AND a.pid <> pg_backend_pid()) AS w"
	        " LEFT JOIN pg_catalog.pg_stat_activity b ON b.pid = w.blockers[1]"
	        " WHERE w.since < clock_timestamp() - $1::bigint * interval '1 millisecond'"
	        " ORDER BY w.since, w.pid LIMIT %d",
	        pgc_conn_server_version(d->conn) >= 140000 ? "coalesce(l.waitstart, a.state_change)"
	                                                   : "a.state_change", WAITS_NAMED);
	PGresult *res = query(d, ck, d->conn, sql, 1, pp);
	if (res == NULL)
		return;
	const char *scope = sessions_scope(d);
	int rows = PQntuples(res);
	if (rows == 0) {
		PQclear(res);
		FINDING(d->out, ck->name, PGC_DOCTOR_OK, "0", "",
		        "no session has waited for a lock longer than deadlock_timeout (%s)%s", dt_value, scope);
		return;
	}
	long long total = atoll(PQgetvalue(res, 0, 12));
	char list[1024] = "", first_blocker[24] = "";
	bool blocker_idle = false; /* the first blocker is idle in transaction: a cancel does nothing */
	for (int i = 0; i < rows && d->rc == PGC_OK; i++) {
		char what[256];
		if (strcmp(PQgetvalue(res, i, 4), "advisory") == 0) {
			char k[200];
			if (!key_words(d, ck, PQgetvalue(res, i, 5), PQgetvalue(res, i, 6), PQgetvalue(res, i, 7),
			               k, sizeof k))
				break;
			snprintf(what, sizeof what, "advisory lock %s", k);
		} else {
			snprintf(what, sizeof what, "%s", PQgetvalue(res, i, 4));
		}
		append(list, sizeof list, "%spid %s (%s) waits %s s for %s on %s", i ? "; " : ": ",
		       PQgetvalue(res, i, 0), PQgetvalue(res, i, 1), PQgetvalue(res, i, 2),
		       PQgetvalue(res, i, 3), what);
		if (PQgetvalue(res, i, 8)[0] != '\0') {
			append(list, sizeof list, ", blocked by pid %s (%s, %s, query started %s)",
			       PQgetvalue(res, i, 8), PQgetvalue(res, i, 9), PQgetvalue(res, i, 10),
			       PQgetvalue(res, i, 11));
			if (first_blocker[0] == '\0') {
				snprintf(first_blocker, sizeof first_blocker, "%s", PQgetvalue(res, i, 8));
				blocker_idle = strncmp(PQgetvalue(res, i, 10), "idle in transaction", 19) == 0;
			}
		} else {
			append(list, sizeof list, ", blocker no longer seen");
		}
	}
	PQclear(res);
	if (d->rc != PGC_OK)
		return;
	char total_s[24], fix[512];
	snprintf(total_s, sizeof total_s, "%lld", total);
	if (first_blocker[0] != '\0' && blocker_idle)
		snprintf(fix, sizeof fix,
		         "see the whole chain with pgcoord blockers; if pid %s is stuck, end it with pgcoord"
		         " terminate %s (it is idle in transaction: a cancel does nothing); set lock_timeout"
		         " so that waits end on their own", first_blocker, first_blocker);
	else if (first_blocker[0] != '\0')
		snprintf(fix, sizeof fix,
		         "see the whole chain with pgcoord blockers; if pid %s is stuck, cancel its statement"
		         " with pgcoord cancel %s (or end the session with pgcoord terminate %s); set"
		         " lock_timeout so that waits end on their own", first_blocker, first_blocker,
		         first_blocker);
	else
		snprintf(fix, sizeof fix, "see the whole chain with pgcoord blockers; set lock_timeout so that"
		         " waits end on their own");
	FINDING(d->out, ck->name, PGC_DOCTOR_WARNING, total_s, fix,
	        "%lld session(s) waiting for a lock longer than deadlock_timeout (%s), as log_lock_waits"
	        " would log%s%s%s", total, dt_value, total > rows ? " (the oldest shown)" : "", list, scope);
}

/* Advisory locks held for long in this database. pg_locks does not say when a lock was granted:
 * pgcoord's own recorded holds (PGC_LOCK_RECORD: pgcoord run) have it in the schema's
 * lock_holds; a pgcoord lock holder's transaction (behind a transaction-mode pooler) began
 * just before its lock; otherwise a session that is idle (or idle in transaction) took its
 * locks before its state_change, so the age since then is a lower bound. A session running
 * a statement gives no bound (the lock may be the statement's), and is not reported. */
static void check_long_advisory(doctor *d, const check *ck)
{
	char *q = NULL;
	pgc_error e = PGC_ERROR_INIT;
	bool holds = false;
	if (pgc__check_schema(d->schema, &e) == PGC_OK) {
		const char *p[1] = { d->schema };
		PGresult *r = query(d, ck, d->conn,
		        "SELECT coalesce(bool_or(pg_catalog.has_schema_privilege(n.oid, 'USAGE')"
		        " AND pg_catalog.has_table_privilege(c.oid, 'SELECT')), false)"
		        " FROM pg_catalog.pg_class c JOIN pg_catalog.pg_namespace n ON n.oid = c.relnamespace"
		        " WHERE n.nspname = $1 AND c.relname = 'lock_holds'",
		        1, p);
		if (r == NULL)
			return;
		holds = strcmp(PQgetvalue(r, 0, 0), "t") == 0;
		PQclear(r);
		if (holds && (q = pgc__quote_ident(d->conn, d->schema, &e)) == NULL) {
			fail(d, ck, e.code, &e);
			return;
		}
	}
	char *join = holds ? pgc__sql_schema(
	        " LEFT JOIN @S@.lock_holds lh ON lh.pid = l.pid AND lh.backend_start = a.backend_start"
	        " AND lh.classid = l.classid AND lh.objid = l.objid AND lh.objsubid = l.objsubid", q) : NULL;
	PQfreemem(q);
	if (holds && join == NULL) {
		pgc__err(&e, PGC_ENOMEM, "out of memory");
		fail(d, ck, PGC_ENOMEM, &e);
		return;
	}
	char age_s[24];
	snprintf(age_s, sizeof age_s, "%lld", (long long)(d->opts->advisory_age_ms / 1000));
	const char *pp[2] = { age_s, PGC_LOCK_HOLDER_APPLICATION };
	char sql[3072];
	snprintf(sql, sizeof sql,
	        "SELECT h.pid, coalesce(nullif(h.application_name, ''), '-'), h.classid, h.objid, h.objsubid,"
	        " extract(epoch FROM clock_timestamp() - h.since)::bigint, h.how, count(*) OVER (),"
	        " extract(epoch FROM clock_timestamp() - h.backend_start)::bigint"
	        " FROM (SELECT l.pid, a.application_name, l.classid, l.objid, l.objsubid, a.backend_start,"
	        "  CASE WHEN %s IS NOT NULL THEN %s"
	        "   WHEN a.application_name = $2 AND a.state LIKE 'idle in transaction%%' THEN a.xact_start"
	        "   WHEN a.state LIKE 'idle%%' THEN a.state_change END AS since,"
	        "  CASE WHEN %s IS NOT NULL THEN 'recorded'"
	        "   WHEN a.application_name = $2 AND a.state LIKE 'idle in transaction%%' THEN 'transaction'"
	        "   ELSE 'idle' END AS how"
	        "  FROM pg_catalog.pg_locks l JOIN pg_catalog.pg_stat_activity a ON a.pid = l.pid%s"
	        "  WHERE l.locktype = 'advisory' AND l.granted AND l.pid <> pg_backend_pid()"
	        "  AND l.database = (SELECT oid FROM pg_catalog.pg_database WHERE datname = current_database())"
	        "  AND a.state IS NOT NULL) AS h"
	        " WHERE h.since < clock_timestamp() - $1::bigint * interval '1 second'"
	        " ORDER BY h.since, h.pid LIMIT %d",
	        join ? "lh.acquired_at" : "NULL::timestamptz", join ? "lh.acquired_at" : "NULL::timestamptz",
	        join ? "lh.acquired_at" : "NULL::timestamptz", join ? join : "", WAITS_NAMED);
	free(join);
	PGresult *res = query(d, ck, d->conn, sql, 2, pp);
	if (res == NULL)
		return;
	char threshold[PGC_DURATION_FORMAT_MAX];
	if (pgc_duration_format(d->opts->advisory_age_ms, threshold, sizeof threshold, NULL) != PGC_OK)
		snprintf(threshold, sizeof threshold, "?");
	const char *scope = sessions_scope(d);
	int rows = PQntuples(res);
	if (rows == 0) {
		PQclear(res);
		FINDING(d->out, ck->name, PGC_DOCTOR_OK, "0", "",
		        "no advisory lock in this database known to be held for %s or more%s", threshold, scope);
		return;
	}
	long long total = atoll(PQgetvalue(res, 0, 7));
	char list[1024] = "";
	for (int i = 0; i < rows; i++) {
		char k[200], age[PGC_DURATION_FORMAT_MAX];
		if (!key_words(d, ck, PQgetvalue(res, i, 2), PQgetvalue(res, i, 3), PQgetvalue(res, i, 4), k,
		               sizeof k))
			break;
		long long secs = atoll(PQgetvalue(res, i, 5));
		if (pgc_duration_format(secs * 1000, age, sizeof age, NULL) != PGC_OK)
			snprintf(age, sizeof age, "%llds", secs);
		const char *how = PQgetvalue(res, i, 6);
		char session[PGC_DURATION_FORMAT_MAX];
		if (pgc_duration_format(atoll(PQgetvalue(res, i, 8)) * 1000, session, sizeof session, NULL) != PGC_OK)
			snprintf(session, sizeof session, "?");
		append(list, sizeof list, "%spid %s (%s) holds %s %s%s", i ? "; " : ": ", PQgetvalue(res, i, 0),
		       PQgetvalue(res, i, 1), k, strcmp(how, "idle") == 0 ? "for at least " : "for ", age);
		if (strcmp(how, "recorded") == 0)
			append(list, sizeof list, " (recorded when taken)");
		else if (strcmp(how, "transaction") == 0)
			append(list, sizeof list, " (since its transaction began)");
		else
			append(list, sizeof list, " (idle that long, in a session %s old: pg_locks does not say when"
			       " a lock was taken)", session);
	}
	PQclear(res);
	if (d->rc != PGC_OK)
		return;
	char total_s[24];
	snprintf(total_s, sizeof total_s, "%lld", total);
	FINDING(d->out, ck->name, PGC_DOCTOR_WARNING, total_s,
	        "for long leadership use pgcoord elect or a lease (pgcoord lease), which expire and are"
	        " renewed; otherwise release the lock when its work ends",
	        "%lld advisory lock(s) held for %s or more%s%s: a lock held for hours pins its"
	        " connection, and nothing takes it over when the holder hangs%s", total, threshold,
	        total > rows ? " (the oldest shown)" : "", list, scope);
}

/* What a lock held through a transaction-mode pooler looks like (PGC_LOCK_HOLD_XACT, which
 * pgcoord run uses there): one transaction, idle for as long as the lock is held, named so
 * locally, with no xid and no snapshot, holding advisory locks and its own virtualxid and
 * nothing else. That is by design; such a session holding anything more is not. */

/* Sessions idle in transaction right now (other than ours). */
static void check_idle_in_transaction(doctor *d, const check *ck)
{
	char own1[24], own2[24];
	snprintf(own1, sizeof own1, "%d", pgc_conn_backend_pid(d->conn));
	snprintf(own2, sizeof own2, "%d", d->fresh ? pgc_conn_backend_pid(d->fresh) : 0);
	const char *pp[3] = { own1, own2, PGC_LOCK_HOLDER_APPLICATION };
	PGresult *res = query(d, ck, d->conn,
	        "SELECT count(*) FILTER (WHERE NOT by_design),"
	        " coalesce(max(extract(epoch FROM clock_timestamp() - state_change)) FILTER (WHERE NOT by_design),"
	        "  0)::bigint,"
	        " (array_agg(pid ORDER BY state_change) FILTER (WHERE NOT by_design))[1],"
	        " (array_agg(usename::text ORDER BY state_change) FILTER (WHERE NOT by_design))[1],"
	        " count(*) FILTER (WHERE by_design),"
	        " count(*) FILTER (WHERE named AND NOT by_design)"
	        " FROM (SELECT a.pid, a.usename, a.state_change, a.application_name = $3 AS named,"
	        "  a.application_name = $3 AND a.state = 'idle in transaction'"
	        "  AND a.backend_xid IS NULL AND a.backend_xmin IS NULL"
	        "  AND NOT EXISTS (SELECT FROM pg_catalog.pg_locks l WHERE l.pid = a.pid"
	        "   AND l.locktype <> 'advisory'"
	        "   AND NOT (l.locktype = 'virtualxid' AND l.virtualxid = l.virtualtransaction)) AS by_design"
	        "  FROM pg_catalog.pg_stat_activity a"
	        "  WHERE a.state LIKE 'idle in transaction%' AND a.pid <> pg_backend_pid()"
	        "  AND a.pid <> $1::int AND a.pid <> $2::int) AS idle", 3, pp);
	if (res == NULL)
		return;
	long long idle = atoll(PQgetvalue(res, 0, 0)), oldest = atoll(PQgetvalue(res, 0, 1));
	char oldest_pid[24], oldest_user[128];
	snprintf(oldest_pid, sizeof oldest_pid, "%s", PQgetvalue(res, 0, 2));
	snprintf(oldest_user, sizeof oldest_user, "%s", PQgetvalue(res, 0, 3));
	long long holders = atoll(PQgetvalue(res, 0, 4)), misnamed = atoll(PQgetvalue(res, 0, 5));
	PQclear(res);
	char idle_s[24], fix[512], holding[160] = "", named[160] = "";
	snprintf(idle_s, sizeof idle_s, "%lld", idle);
	if (holders > 0)
		snprintf(holding, sizeof holding,
		         "%lld pgcoord lock holder(s) idle in transaction by design; they hold no snapshot",
		         holders);
	if (misnamed > 0)
		snprintf(named, sizeof named,
		         " (%lld of them named " PGC_LOCK_HOLDER_APPLICATION " but holding an xid, a snapshot or a"
		         " relation lock)", misnamed);
	const char *scope = sessions_scope(d);
	if (idle > 0) {
		snprintf(fix, sizeof fix,
		         "see what it holds and whom it blocks with pgcoord locks --pid %s and pgcoord"
		         " blockers, end it with pgcoord terminate %s if it is stuck, and set"
		         " idle_in_transaction_session_timeout", oldest_pid, oldest_pid);
		FINDING(d->out, ck->name, PGC_DOCTOR_WARNING, idle_s, fix,
		        "%lld session(s) idle in transaction now%s; the oldest, pid %s (user %s), for %lld s:"
		        " it keeps every lock it took%s%s%s", idle, named, oldest_pid, oldest_user, oldest,
		        holding[0] ? "; " : "", holding, scope);
	} else if (holders > 0) {
		FINDING(d->out, ck->name, PGC_DOCTOR_INFO, idle_s, "",
		        "%s; no other session is idle in transaction%s", holding, scope);
	} else {
		FINDING(d->out, ck->name, PGC_DOCTOR_OK, idle_s, "",
		        "no other session is idle in transaction%s", scope);
	}
}

/* Client sessions without an application_name, by user and client address: in
 * pg_stat_activity, pgcoord blockers and the lock-wait log they are only a pid. Background
 * workers, this run's own sessions and sessions this role may not see are left out. */
static void check_application_name(doctor *d, const check *ck)
{
	char own[24];
	snprintf(own, sizeof own, "%d", d->fresh ? pgc_conn_backend_pid(d->fresh) : 0);
	const char *pp[1] = { own };
	char sql[1024];
	snprintf(sql, sizeof sql,
	        "SELECT coalesce(usename::text, '?'), coalesce(host(client_addr), 'local'), count(*),"
	        " sum(count(*)) OVER (), count(*) OVER ()"
	        " FROM pg_catalog.pg_stat_activity"
	        " WHERE backend_type = 'client backend' AND coalesce(application_name, '') = ''"
	        " AND state IS NOT NULL AND pid <> pg_backend_pid() AND pid <> $1::int"
	        " GROUP BY 1, 2 ORDER BY 3 DESC, 1, 2 LIMIT %d", GROUPS_NAMED);
	PGresult *res = query(d, ck, d->conn, sql, 1, pp);
	if (res == NULL)
		return;
	const char *scope = sessions_scope(d);
	int rows = PQntuples(res);
	if (rows == 0) {
		PQclear(res);
		FINDING(d->out, ck->name, PGC_DOCTOR_OK, "0", "",
		        "every client session has an application_name%s", scope);
		return;
	}
	long long total = atoll(PQgetvalue(res, 0, 3)), groups = atoll(PQgetvalue(res, 0, 4));
	char list[512] = "";
	for (int i = 0; i < rows; i++)
		append(list, sizeof list, "%s%s of user %s from %s", i ? ", " : ": ", PQgetvalue(res, i, 2),
		       PQgetvalue(res, i, 0), PQgetvalue(res, i, 1));
	if (groups > rows)
		append(list, sizeof list, ", ...");
	PQclear(res);
	char total_s[24];
	snprintf(total_s, sizeof total_s, "%lld", total);
	FINDING(d->out, ck->name, PGC_DOCTOR_WARNING, total_s,
	        "give each client an application_name (application_name=NAME in its connection string,"
	        " or PGAPPNAME) so that a blocker can be traced to its program",
	        "%lld client session(s) without an application_name%s: pg_stat_activity, pgcoord"
	        " blockers and log_lock_waits name them by pid only%s", total, list, scope);
}

/* Foreign keys whose referencing columns lead no index of the child: a delete or key update
 * of a parent row scans the child (and its row locks are taken the long way). Only tables
 * this role could index (it is a member of their owner) are looked at, as far as the
 * statement gets within FK_SCAN_MS. */
#define FK_SCAN_MS 10000
#define FK_NAMED 3

static void check_fk_index(doctor *d, const check *ck)
{
	char sql[3072];
	snprintf(sql, sizeof sql,
	        "SELECT c.conrelid::regclass::text, c.conname, c.confrelid::regclass::text,"
	        " format('CREATE INDEX %%sON %%I.%%I (%%s);', CASE WHEN t.relkind = 'p' THEN '' ELSE 'CONCURRENTLY ' END,"
	        "  n.nspname, t.relname, (SELECT string_agg(format('%%I', a.attname), ', ' ORDER BY k.i)"
	        "   FROM unnest(c.conkey) WITH ORDINALITY AS k(attnum, i)"
	        "   JOIN pg_catalog.pg_attribute a ON a.attrelid = c.conrelid AND a.attnum = k.attnum)),"
	        " count(*) OVER ()"
	        " FROM pg_catalog.pg_constraint c"
	        " JOIN pg_catalog.pg_class t ON t.oid = c.conrelid"
	        " JOIN pg_catalog.pg_namespace n ON n.oid = t.relnamespace"
	        " WHERE c.contype = 'f' AND c.conparentid = 0"
	        " AND n.nspname <> 'information_schema' AND n.nspname NOT LIKE 'pg\\_%%'"
	        " AND pg_catalog.pg_has_role(t.relowner, 'USAGE')"
	        " AND NOT EXISTS (SELECT FROM pg_catalog.pg_index i WHERE i.indrelid = c.conrelid"
	        "  AND i.indpred IS NULL AND i.indisvalid"
	        "  AND (string_to_array(i.indkey::text, ' ')::int2[])[1:cardinality(c.conkey)] @> c.conkey"
	        "  AND (string_to_array(i.indkey::text, ' ')::int2[])[1:cardinality(c.conkey)] <@ c.conkey)"
	        " ORDER BY 1, 2 LIMIT %d", FK_NAMED);
	pgc__call call = pgc__bound(FK_SCAN_MS, -1);
	int rc;
	pgc_error e = PGC_ERROR_INIT;
	PGresult *res = pgc__query(d->conn, sql, 0, NULL, &call, &rc, &e);
	if (res == NULL) {
		if (rc == PGC_ETIMEDOUT && strcmp(e.sqlstate, "57014") == 0) {
			char ms[PGC_DURATION_FORMAT_MAX];
			if (pgc_duration_format(FK_SCAN_MS, ms, sizeof ms, NULL) != PGC_OK)
				snprintf(ms, sizeof ms, "?");
			FINDING(d->out, ck->name, PGC_DOCTOR_INFO, "unknown", "",
			        "the foreign keys were not checked: reading the catalog took longer than %s", ms);
			return;
		}
		fail(d, ck, rc, &e);
		return;
	}
	int rows = PQntuples(res);
	if (rows == 0) {
		PQclear(res);
		FINDING(d->out, ck->name, PGC_DOCTOR_OK, "0", "",
		        "every foreign key of the tables %s can index has an index on its referencing columns",
		        d->user);
		return;
	}
	long long total = atoll(PQgetvalue(res, 0, 4));
	char list[640] = "", fix[512] = "";
	for (int i = 0; i < rows; i++) {
		append(list, sizeof list, "%s%s (%s, to %s)", i ? ", " : ": ", PQgetvalue(res, i, 0),
		       PQgetvalue(res, i, 1), PQgetvalue(res, i, 2));
		append(fix, sizeof fix, "%s%s", i ? " " : "", PQgetvalue(res, i, 3));
	}
	PQclear(res);
	char total_s[24];
	snprintf(total_s, sizeof total_s, "%lld", total);
	FINDING(d->out, ck->name, PGC_DOCTOR_WARNING, total_s, fix,
	        "%lld foreign key(s) without an index on the referencing columns%s%s: each delete or key"
	        " update of a parent row scans the child table%s", total,
	        total > rows ? " (the first shown)" : "", list,
	        total > rows ? "; the fix covers the ones shown, run doctor again for the rest" : "");
}

/* The pgcoord schema against this binary. */
static void check_schema(doctor *d, const check *ck)
{
	int sv = 0, latest = pgc_schema_latest();
	pgc_error e = PGC_ERROR_INIT;
	char sv_s[24];
	if (pgc_schema_version(d->conn, d->schema, &sv, &e) != PGC_OK) {
		if (e.code == PGC_ECONNLOST || e.code == PGC_EUSAGE) {
			fail(d, ck, e.code, &e);
			return;
		}
		FINDING(d->out, ck->name, PGC_DOCTOR_WARNING, "unknown",
		        "grant this role USAGE on the schema and SELECT on its migrations table",
		        "cannot read the version of schema %s: %s", d->schema, e.message);
		return;
	}
	snprintf(sv_s, sizeof sv_s, "%d", sv);
	char init[160];
	pgc__init_cmd(d->schema, init, sizeof init);
	if (sv == 0)
		FINDING(d->out, ck->name, PGC_DOCTOR_INFO, sv_s, init,
		        "schema %s is not installed (the queue, leases and elections need it; locks do"
		        " not)", d->schema);
	else if (sv < latest)
		FINDING(d->out, ck->name, PGC_DOCTOR_WARNING, sv_s, init,
		        "schema %s is at version %d, this pgcoord knows %d", d->schema, sv, latest);
	else if (sv > latest)
		FINDING(d->out, ck->name, PGC_DOCTOR_ERROR, sv_s, "upgrade pgcoord to a release that knows it",
		        "schema %s is at version %d, newer than this pgcoord (%d)", d->schema, sv, latest);
	else
		FINDING(d->out, ck->name, PGC_DOCTOR_OK, sv_s, "",
		        "schema %s is at version %d, as this pgcoord expects", d->schema, sv);
	if (sv == 0)
		return;
	/* A migration changed after it was applied here: the schema may lack what the change
	 * added, and no init repairs it (functions are re-created; tables are not). */
	pgc_schema_drift drift[8];
	int n = 0;
	if (pgc_schema_check(d->conn, d->schema, drift, 8, &n, &e) != PGC_OK) {
		FINDING(d->out, ck->name, PGC_DOCTOR_WARNING, "unknown",
		        "grant this role SELECT on the schema's migrations table",
		        "cannot read the migrations' checksums of schema %s: %s", d->schema, e.message);
		return;
	}
	for (int i = 0; i < n && i < 8; i++) {
		char fix[512];
		snprintf(fix, sizeof fix,
		         "compare schema %s with a fresh one (pg_dump --schema-only) for what"
		         " src/schema/migrations/%03d_%s.sql does, repair the difference by hand, then"
		         " record the shipped checksum: UPDATE %s.migrations SET checksum = '%s' WHERE"
		         " version = %d", d->schema, drift[i].version, drift[i].name, d->schema,
		         drift[i].shipped, drift[i].version);
		char v[24];
		snprintf(v, sizeof v, "%d", drift[i].version);
		FINDING(d->out, ck->name, PGC_DOCTOR_WARNING, v, fix,
		        "migration %03d_%s was changed after schema %s applied it: its recorded checksum"
		        " %.12s is not this pgcoord's %.12s", drift[i].version, drift[i].name, d->schema,
		        drift[i].recorded, drift[i].shipped);
	}
	if (n > 8)
		FINDING(d->out, ck->name, PGC_DOCTOR_WARNING, "", "run doctor again after the fixes above",
		        "%d more migrations of schema %s were changed after they were applied", n - 8, d->schema);
}

/* The cron schedules: stale (two ticks have come since the last success, or since it was
 * added when it never succeeded: its jobs fail, or nobody works its queue), overdue (its
 * next tick is more than a minute behind the server's clock: no scheduler runs), paused
 * (said, not warned). The ticks are the expression's own (pgc_cron_next), so a weekday
 * schedule is not stale on a Sunday. */
#define CRON_OVERDUE_US INT64_C(60000000)
#define CRON_NAMED 3 /* schedules named per kind in the message */

static void cron_name(char *buf, size_t size, int n, const char *name)
{
	size_t len = strlen(buf);
	if (n < CRON_NAMED && len < size)
		snprintf(buf + len, size - len, "%s%s", n > 0 ? ", " : "", name);
	else if (n == CRON_NAMED && len < size)
		snprintf(buf + len, size - len, ", ...");
}

static void check_cron(doctor *d, const check *ck)
{
	int sv = 0;
	pgc_error e = PGC_ERROR_INIT;
	if (pgc_schema_version(d->conn, d->schema, &sv, &e) != PGC_OK || sv == 0) {
		FINDING(d->out, ck->name, PGC_DOCTOR_OK, "0", "", "no cron schedules (schema %s is not installed)",
		        d->schema);
		return;
	}
	if (sv < pgc_schema_latest()) {
		char init[160];
		FINDING(d->out, ck->name, PGC_DOCTOR_INFO, "unknown", pgc__init_cmd(d->schema, init, sizeof init),
		        "the schedules are not checked: schema %s is older than this pgcoord", d->schema);
		return;
	}
	pgc_cron_info *xs = NULL;
	size_t n = 0;
	if (pgc_cron_list(d->conn, d->schema, NULL, &xs, &n, &e) != PGC_OK) {
		if (e.code == PGC_ECONNLOST || e.code == PGC_ETIMEDOUT) {
			fail(d, ck, e.code, &e);
			return;
		}
		FINDING(d->out, ck->name, PGC_DOCTOR_WARNING, "unknown",
		        "run doctor as the schema's owner (the cron tables are the owner's only)",
		        "cannot read the schedules of schema %s: %s", d->schema, e.message);
		return;
	}
	int stale = 0, overdue = 0, paused = 0, foreign = 0;
	char stale_s[256] = "", overdue_s[256] = "", paused_s[256] = "";
	int64_t worst_overdue_us = 0;
	for (size_t i = 0; i < n; i++) {
		const pgc_cron_info *x = &xs[i];
		if (x->paused) {
			cron_name(paused_s, sizeof paused_s, paused++, x->name);
			continue;
		}
		if (x->db_now_us - x->next_tick_us > CRON_OVERDUE_US) {
			cron_name(overdue_s, sizeof overdue_s, overdue++, x->name);
			if (x->db_now_us - x->next_tick_us > worst_overdue_us)
				worst_overdue_us = x->db_now_us - x->next_tick_us;
		}
		pgc_cron *c;
		pgc_error pe;
		if (pgc_cron_parse(x->expr, x->tz, &c, &pe) != PGC_OK) {
			foreign++; /* its zone is not in this host's tzdata: not judged here */
			continue;
		}
		/* Two ticks after the last success (or after it was added), both due by now. */
		int64_t since = (x->last_success_us != 0 ? x->last_success_us : x->created_us) / 1000000, t1, t2;
		if (pgc_cron_next(c, since, &t1, &pe) == PGC_OK && pgc_cron_next(c, t1, &t2, &pe) == PGC_OK &&
		    t2 * 1000000 <= x->db_now_us && x->last_tick_us / 1000000 >= t2)
			cron_name(stale_s, sizeof stale_s, stale++, x->name);
		pgc_cron_free(c);
	}
	char value[32];
	snprintf(value, sizeof value, "%zu", n);
	char tail[512] = "";
	if (paused > 0)
		snprintf(tail, sizeof tail, "; %d paused (%s)", paused, paused_s);
	if (foreign > 0) {
		size_t len = strlen(tail);
		snprintf(tail + len, sizeof tail - len, "; %d in zones this host's tzdata lacks", foreign);
	}
	if (overdue > 0) {
		char od[PGC_DURATION_FORMAT_MAX];
		/* Whole seconds, whole minutes past two of them: the size of the gap, not its digits. */
		int64_t ms = worst_overdue_us / 1000000 * 1000;
		if (ms >= 120000)
			ms = ms / 60000 * 60000;
		if (pgc_duration_format(ms, od, sizeof od, NULL) != PGC_OK)
			snprintf(od, sizeof od, "?");
		FINDING(d->out, ck->name, PGC_DOCTOR_WARNING, value,
		        "run pgcoord cron run (on one host or more) for this schema",
		        "%d of %zu schedules overdue by more than a minute, up to %s (%s): no scheduler fires them"
		        "%s%s%s", overdue, n, od, overdue_s, stale > 0 ? "; no success in two periods: " : "",
		        stale > 0 ? stale_s : "", tail);
	} else if (stale > 0) {
		FINDING(d->out, ck->name, PGC_DOCTOR_WARNING, value,
		        "see pgcoord cron show NAME and pgcoord queue list --status failed (is a worker running?)",
		        "%d of %zu schedules with no successful job in their last two periods (%s)%s", stale, n,
		        stale_s, tail);
	} else if (paused > 0) {
		FINDING(d->out, ck->name, PGC_DOCTOR_INFO, value, "pgcoord cron resume NAME",
		        "%zu schedules, none overdue or failing%s", n, tail);
	} else {
		FINDING(d->out, ck->name, PGC_DOCTOR_OK, value, "", "%zu schedules, none overdue or failing%s", n, tail);
	}
	pgc_cron_infos_free(xs, n);
}

/* Primary or standby, timeline, the standbys streaming from a primary and how. */
static void check_replication(doctor *d, const check *ck)
{
	pgc_error e = PGC_ERROR_INIT;
	int rc = pgc_server_role_get(d->conn, &d->role, &e);
	if (rc != PGC_OK) {
		fail(d, ck, rc, &e);
		return;
	}
	d->role_known = true;
	char tli[32];
	if (d->role.timeline > 0)
		snprintf(tli, sizeof tli, "timeline %lld", (long long)d->role.timeline);
	else
		snprintf(tli, sizeof tli, "timeline not visible to %s", d->user);
	if (d->role.standby) {
		FINDING(d->out, ck->name, PGC_DOCTOR_ERROR, "standby",
		        "connect to the primary: with several hosts in the DSN, add"
		        " target_session_attrs=read-write",
		        "%s:%s is a standby (in recovery, %s%s): leases, fencing tokens, the queue and"
		        " pgcoord init need the primary (writes fail with 25006), and an advisory lock"
		        " taken here excludes only sessions of this standby", d->role.host, d->role.port,
		        tli, strcmp(d->role.timeline_source, "checkpoint") == 0 ? ", of its last restartpoint" : "");
		return;
	}
	/* Every role sees the rows of pg_stat_replication; the state, the positions and the lags
	 * only with pg_read_all_stats (or as superuser): else they are NULL. */
	PGresult *res = query(d, ck, d->conn,
	        "SELECT count(*), count(*) FILTER (WHERE sync_state IN ('sync', 'quorum')),"
	        " count(*) FILTER (WHERE state IS NOT NULL),"
	        " coalesce(string_agg(coalesce(nullif(application_name, ''), client_addr::text, 'local')"
	        "  || ' ' || coalesce(sync_state, '?'), ', ' ORDER BY application_name), ''),"
	        " coalesce(max(replay_lag)::text, ''),"
	        " current_setting('synchronous_standby_names'), current_setting('synchronous_commit')"
	        " FROM pg_catalog.pg_stat_replication", 0, NULL);
	if (res == NULL)
		return;
	d->standbys = atoi(PQgetvalue(res, 0, 0));
	d->sync_standbys = atoi(PQgetvalue(res, 0, 1));
	int visible = atoi(PQgetvalue(res, 0, 2));
	char list[256], names[128], commit[32];
	snprintf(list, sizeof list, "%s", PQgetvalue(res, 0, 3));
	snprintf(d->lag, sizeof d->lag, "%s", PQgetvalue(res, 0, 4));
	snprintf(names, sizeof names, "%s", PQgetvalue(res, 0, 5));
	snprintf(commit, sizeof commit, "%s", PQgetvalue(res, 0, 6));
	PQclear(res);
	const char *scope = d->standbys > 0 && visible < d->standbys
	                    ? " (their state and lag are visible only with pg_read_all_stats)" : "";
	if (d->standbys == 0)
		FINDING(d->out, ck->name, PGC_DOCTOR_OK, "primary", "",
		        "%s:%s is a primary, %s; no standby streams from it; synchronous_standby_names"
		        " is '%s'", d->role.host, d->role.port, tli, names);
	else
		FINDING(d->out, ck->name, PGC_DOCTOR_OK, "primary", "",
		        "%s:%s is a primary, %s; %d standby(s) stream from it: %s%s%s; "
		        "synchronous_standby_names is '%s', synchronous_commit %s%s", d->role.host,
		        d->role.port, tli, d->standbys, list, d->lag[0] ? ", replay lag up to " : "",
		        d->lag, names, commit, scope);
}

/* The hosts the DSN names, and whether it follows the primary. */
static void check_dsn_hosts(doctor *d, const check *ck)
{
	/* The DSN as given: the layer connects host by host, so the session's own PGconn names
	 * only the host that answered. */
	const char *dsn = pgc_conn_dsn_masked(d->conn);
	PQconninfoOption *opts = PQconninfoParse(dsn ? dsn : "", NULL);
	char hosts[256] = "", tsa[32] = "";
	const char *env_tsa = getenv("PGTARGETSESSIONATTRS"), *env_host = getenv("PGHOST");
	for (PQconninfoOption *o = opts; o != NULL && o->keyword != NULL; o++) {
		if (o->val == NULL)
			continue;
		if (strcmp(o->keyword, "host") == 0 && hosts[0] == '\0')
			snprintf(hosts, sizeof hosts, "%s", o->val);
		else if (strcmp(o->keyword, "hostaddr") == 0 && hosts[0] == '\0')
			snprintf(hosts, sizeof hosts, "%s", o->val);
		else if (strcmp(o->keyword, "target_session_attrs") == 0)
			snprintf(tsa, sizeof tsa, "%s", o->val);
	}
	PQconninfoFree(opts);
	if (tsa[0] == '\0' && env_tsa != NULL)
		snprintf(tsa, sizeof tsa, "%s", env_tsa);
	if (hosts[0] == '\0' && env_host != NULL)
		snprintf(hosts, sizeof hosts, "%s", env_host);
	int n = 1;
	for (const char *p = hosts; *p; p++)
		n += *p == ',';
	char n_s[16];
	snprintf(n_s, sizeof n_s, "%d", n);
	bool follows = strcmp(tsa, "read-write") == 0 || strcmp(tsa, "primary") == 0;
	if (n > 1 && follows)
		FINDING(d->out, ck->name, PGC_DOCTOR_OK, n_s, "",
		        "the DSN names %d hosts with target_session_attrs=%s: after a failover, a new"
		        " connection finds the new primary", n, tsa);
	else if (n > 1)
		FINDING(d->out, ck->name, PGC_DOCTOR_WARNING, n_s, "add target_session_attrs=read-write to the DSN",
		        "the DSN names %d hosts with target_session_attrs=%s: a connection may land on a"
		        " standby, where leases and the queue fail and advisory locks exclude nothing"
		        " on the primary", n, tsa[0] ? tsa : "any");
	else
		FINDING(d->out, ck->name, PGC_DOCTOR_INFO, n_s, "",
		        "the DSN names one host: after a failover it must lead to the new primary (a"
		        " virtual IP, DNS or a proxy such as Patroni's), or list the hosts with"
		        " target_session_attrs=read-write");
}

/* What a failover can lose, and what pgcoord still guarantees. */
static void check_failover(doctor *d, const check *ck)
{
	if (!d->role_known || d->role.standby) {
		FINDING(d->out, ck->name, PGC_DOCTOR_INFO, "unknown", "run pgcoord doctor against the primary",
		        "whether replication is synchronous is known on the primary only");
		return;
	}
	char commit[32], source[64];
	if (!setting(d, ck, "synchronous_commit", commit, sizeof commit, source, sizeof source, NULL))
		return;
	static const char keeps[] =
	        "fencing tokens still never repeat nor go backwards (they fold in the timeline, which a"
	        " promotion raises): fence_check refuses a lost holder's token once a newer one exists,"
	        " and grants of names from before a promotion wait one TTL";
	bool sync_commit = strcmp(commit, "on") == 0 || strcmp(commit, "remote_write") == 0 ||
	                   strcmp(commit, "remote_apply") == 0;
	if (d->standbys == 0)
		FINDING(d->out, ck->name, PGC_DOCTOR_INFO, "none", "",
		        "no standby streams from this primary (as far as %s can see): a failover would"
		        " be to a backup, which loses every commit since; %s", d->user, keeps);
	else if (d->sync_standbys > 0 && sync_commit)
		FINDING(d->out, ck->name, PGC_DOCTOR_OK, "synchronous", "",
		        "replication to %d standby(s) is synchronous (synchronous_commit %s): a failover to"
		        " one of them loses no committed grant, renewal or job; %s", d->sync_standbys,
		        commit, keeps);
	else
		FINDING(d->out, ck->name, PGC_DOCTOR_WARNING, "asynchronous",
		        "set synchronous_standby_names (and synchronous_commit = on for this role) to"
		        " lose no commit in a failover",
		        "replication is asynchronous%s%s%s: a failover loses the commits not yet streamed:"
		        " the last lease grants and renewals, and jobs enqueued, claimed or completed in"
		        " the last moments (they come back or run again); %s", d->lag[0] ? " (replay lag now up to " : "", d->lag,
		        d->lag[0] ? ")" : "", keeps);
}

/* The catalogue, in the order of the findings. */
static const check checks[] = {
	{ "server", "the server's version, the user and the database", check_server, false },
	{ "pooler", "whether a pooler is in between, and whether it keeps each client's session",
	  check_pooler, true },
	{ "lock_timeout", "the lock_timeout a new session of this role gets", check_timeout, false },
	{ "statement_timeout", "the statement_timeout a new session of this role gets", check_timeout,
	  false },
	{ "idle_in_transaction_session_timeout",
	  "the idle_in_transaction_session_timeout a new session of this role gets", check_timeout,
	  false },
	{ "log_lock_waits", "whether lock waits longer than deadlock_timeout are logged",
	  check_log_lock_waits, false },
	{ "deadlock_timeout", "how long a lock wait lasts before the deadlock check runs",
	  check_deadlock_timeout, false },
	{ "lock_table", "the shared lock table's size, and how much of it is in use",
	  check_lock_table, false },
	{ "lock_waits", "lock waits going on now that have lasted longer than deadlock_timeout",
	  check_lock_waits, false },
	{ "long_advisory", "advisory locks in this database held longer than the advisory age",
	  check_long_advisory, false },
	{ "idle_in_transaction",
	  "the sessions idle in transaction now, apart from pgcoord's own lock holders",
	  check_idle_in_transaction, false },
	{ "application_name", "client sessions without an application_name, by user and address",
	  check_application_name, false },
	{ "fk_index", "foreign keys without an index on their referencing columns", check_fk_index,
	  false },
	{ "schema", "the pgcoord schema's version against this binary's", check_schema, false },
	{ "cron", "the cron schedules: overdue (no scheduler runs), no success in two periods, paused",
	  check_cron, false },
	{ "replication", "primary or standby, the timeline, and the standbys streaming from a primary",
	  check_replication, false },
	{ "dsn_hosts", "the hosts the DSN names, and whether it follows the primary after a failover",
	  check_dsn_hosts, false },
	{ "failover", "what a failover can lose (asynchronous replication), and what pgcoord keeps",
	  check_failover, false },
};

int pgc_doctor_run(pgc_conn *conn, const pgc_doctor_options *opts, pgc_doctor_report *out,
                   pgc_error *err)
{
	pgc_error_clear(err);
	if (conn == NULL || out == NULL)
		return pgc__err(err, PGC_EUSAGE, "pgc_doctor_run: conn and out must not be NULL");
	pgc_doctor_options defaults = PGC_DOCTOR_OPTIONS_INIT;
	if (opts == NULL)
		opts = &defaults;
	if (opts->pooler_wait_ms < 100 || opts->pooler_wait_ms > 60000)
		return pgc__err(err, PGC_EUSAGE,
		                "pgc_doctor_run: pooler_wait_ms must be between 100 and 60000, not %d",
		                opts->pooler_wait_ms);
	if (opts->advisory_age_ms < 1000 || opts->advisory_age_ms > INT64_C(30) * 86400000)
		return pgc__err(err, PGC_EUSAGE,
		                "pgc_doctor_run: advisory_age_ms must be between 1000 (1s) and 30 days,"
		                " not %lld", (long long)opts->advisory_age_ms);
	if (pgc__in_transaction(conn))
		return pgc__err(err, PGC_EUSAGE, "pgc_doctor_run: conn is inside a transaction");
	const char *schema = opts->schema ? opts->schema : PGC_SCHEMA_DEFAULT;
	if (*schema == '\0' || strlen(schema) > 63)
		return pgc__err(err, PGC_EUSAGE, "pgc_doctor_run: the schema name must be 1 to 63 bytes");
	memset(out, 0, sizeof *out);

	doctor d = { conn, opts, schema, out, err, PGC_OK, NULL, false, "", NULL, false,
	             { 0 }, false, 0, 0, "" };
	for (size_t i = 0; i < sizeof checks / sizeof checks[0] && d.rc == PGC_OK; i++)
		if (opts->check_pooler || !checks[i].pooler)
			checks[i].fn(&d, &checks[i]);
	pgc_conn_close(d.fresh);
	PQfreemem(d.quser);
	return d.rc;
}

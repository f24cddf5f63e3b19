/* lab_session.c - how the lab's experiments talk to the server: sessions, statements sent and
 * collected through the connection layer under a deadline, and what the observer reads
 *
 * Every statement goes through the connection layer: sent asynchronously (pgc__send), watched
 * without waiting (pgc__ready) and collected under a deadline (pgc__await, which cancels, and
 * closes a session whose cancel is not answered), so even a server that stops answering
 * cannot hang the lab; on the server side every session has lock_timeout and
 * statement_timeout set. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "lab_int.h"


int64_t lab_key(lab *L, int n)
{
	return L->key_base + n;
}

static const char *first_line(const char *sql, char *buf, size_t n)
{
	pgc__copy_line(buf, n, sql);
	if (strlen(buf) > 70)
		memcpy(buf + 67, "...", 4);
	return buf;
}

static lab_sess *open_session(lab *L, const char *label, bool set_path)
{
	if (L->nsess >= LAB_SESSIONS_MAX) {
		lab_fail(L, "internal: more than %d sessions", LAB_SESSIONS_MAX);
		return NULL;
	}
	lab_sess *s = &L->sess[L->nsess];
	memset(s, 0, sizeof *s);
	snprintf(s->label, sizeof s->label, "%s", label);
	char app[128];
	snprintf(app, sizeof app, "%s/%s/%s", L->opts.application_name, L->info->name, label);
	pgc_conn_options co = PGC_CONN_OPTIONS_INIT;
	co.application_name = app;
	pgc_error err = PGC_ERROR_INIT;
	if (pgc_connect(L->dsn, &co, &s->conn, &err) != PGC_OK) {
		L->connect_err = err;
		lab_fail(L, "session %s: %s", label, err.message);
		return NULL;
	}
	L->nsess++;
	s->pid = pgc_conn_backend_pid(s->conn);
	char lt[24], st[24];
	snprintf(lt, sizeof lt, "%dms", L->opts.lock_timeout_ms);
	snprintf(st, sizeof st, "%dms", L->opts.lock_timeout_ms + 5000);
	const char *params[4] = { lt, st, "60s", set_path ? L->qschema : NULL };
	/* Parameters, not pasted text: set_config() takes the values as data. The observer keeps
	 * the default search_path (it creates the schema before anyone uses it). */
	const char *sql = set_path
	        ? "SELECT set_config('lock_timeout', $1, false), set_config('statement_timeout', $2, false),"
	          " set_config('idle_in_transaction_session_timeout', $3, false),"
	          " set_config('search_path', $4, false), pg_backend_pid()"
	        : "SELECT set_config('lock_timeout', $1, false), set_config('statement_timeout', $2, false),"
	          " set_config('idle_in_transaction_session_timeout', $3, false), '', pg_backend_pid()";
	PGresult *res = lab_query(L, s, sql, set_path ? 4 : 3, params);
	if (res == NULL)
		return NULL;
	/* Behind a pooler the pid libpq got at connect time may not be the server's. */
	s->pid = atoi(PQgetvalue(res, 0, 4));
	PQclear(res);
	return s;
}

lab_sess *lab_open(lab *L)
{
	char label[8];
	snprintf(label, sizeof label, "%c", 'A' + (L->nsess - 1));
	return open_session(L, label, true);
}

lab_sess *lab_open_observer(lab *L)
{
	return open_session(L, "lab", false);
}

void lab_close(lab *L, lab_sess *s)
{
	(void)L;
	if (s != NULL && s->conn != NULL) {
		pgc_conn_close(s->conn);
		s->conn = NULL;
	}
}

const char *lab_notice(const lab_sess *s)
{
	return s->conn != NULL ? pgc__last_notice(s->conn, NULL) : "";
}

/* Sends sql on s. Without parameters it goes as a simple query, which may hold several
 * statements. The layer's answer, PGC_OK or its error, is returned with err filled. */
static int send_on(lab *L, lab_sess *s, const char *sql, int nparams, const char *const *params,
                   pgc_error *err)
{
	char sh[80];
	if (s == NULL || s->conn == NULL) {
		lab_fail(L, "internal: statement on a closed session: %s", first_line(sql, sh, sizeof sh));
		return PGC_EUSAGE;
	}
	if (pgc__busy(s->conn)) {
		lab_fail(L, "internal: session %s is still busy", s->label);
		return PGC_EUSAGE;
	}
	pgc__call call = PGC__CALL_INIT;
	call.flags = nparams == 0 && params == NULL ? PGC__SIMPLE : 0;
	return pgc__send(s->conn, sql, nparams, params, &call, err);
}

bool lab_send(lab *L, lab_sess *s, const char *sql, int nparams, const char *const *params)
{
	pgc_error err = PGC_ERROR_INIT;
	int rc = send_on(L, s, sql, nparams, params, &err);
	if (rc != PGC_OK && !lab_failed(L)) {
		char sh[80];
		lab_fail(L, "session %s: cannot send %s: %s", s->label, first_line(sql, sh, sizeof sh),
		         err.message);
	}
	return rc == PGC_OK;
}

/* Collects the answer to what was sent on s, bounded by timeout_ms: past it the layer asks the
 * server to cancel, and closes the session when the cancel is not answered either (whatever
 * it held ends with it). */
static bool finish(lab *L, lab_sess *s, int timeout_ms, char state[6], PGresult **out,
                   bool lost_ok)
{
	if (out != NULL)
		*out = NULL;
	state[0] = '\0';
	if (s == NULL || s->conn == NULL || !pgc__busy(s->conn)) {
		lab_fail(L, "internal: nothing sent on session %s", s ? s->label : "?");
		return false;
	}
	/* By default a little past the server's statement_timeout, so that the server's own error
	 * (which says what happened) normally arrives first. */
	if (timeout_ms <= 0)
		timeout_ms = L->opts.lock_timeout_ms + 7000;
	pgc__call call = pgc__bound(timeout_ms, -1);
	call.on_deadline = PGC__CANCEL;
	int rc;
	pgc_error err = PGC_ERROR_INIT;
	PGresult *res = pgc__await(s->conn, &call, &rc, &err);
	if (call.hit_deadline) {
		PQclear(res);
		lab_fail(L, "session %s: no answer within %d ms (cancelled%s)", s->label, timeout_ms,
		         call.dropped ? ", then closed" : "");
		return false;
	}
	if (rc == PGC_ECONNLOST) {
		if (lost_ok) {
			snprintf(state, 6, "%s", "conn");
			return true;
		}
		lab_fail(L, "session %s: connection lost: %s", s->label, err.message);
		return false;
	}
	if (rc != PGC_OK) {
		if (rc != PGC_ESQL && err.sqlstate[0] == '\0') {
			lab_fail(L, "session %s: %s", s->label, err.message);
			return false;
		}
		/* The server's error is an outcome the experiment looks at. */
		snprintf(state, 6, "%s", err.sqlstate[0] ? err.sqlstate : "?????");
		pgc__copy_line(s->lasterr, sizeof s->lasterr, err.message);
		return true;
	}
	if (out != NULL)
		*out = res;
	else
		PQclear(res);
	return true;
}

bool lab_finish(lab *L, lab_sess *s, int timeout_ms, char state[6], PGresult **out)
{
	return finish(L, s, timeout_ms, state, out, false);
}

bool lab_try_or_lost(lab *L, lab_sess *s, const char *sql, char state[6])
{
	state[0] = '\0';
	pgc_error err = PGC_ERROR_INIT;
	int rc = send_on(L, s, sql, 0, NULL, &err);
	if (rc == PGC_ECONNLOST) {
		snprintf(state, 6, "%s", "conn");
		return true;
	}
	if (rc != PGC_OK) {
		if (!lab_failed(L))
			lab_fail(L, "session %s: cannot send %s: %s", s->label, sql, err.message);
		return false;
	}
	return finish(L, s, 0, state, NULL, true);
}

bool lab_tryp(lab *L, lab_sess *s, const char *sql, int nparams, const char *const *params,
              char state[6], PGresult **out)
{
	if (out != NULL)
		*out = NULL;
	if (!lab_send(L, s, sql, nparams, params))
		return false;
	return lab_finish(L, s, 0, state, out);
}

bool lab_try(lab *L, lab_sess *s, const char *sql, char state[6])
{
	return lab_tryp(L, s, sql, 0, NULL, state, NULL);
}

PGresult *lab_query(lab *L, lab_sess *s, const char *sql, int nparams, const char *const *params)
{
	char state[6], sh[80];
	PGresult *res = NULL;
	if (!lab_tryp(L, s, sql, nparams, params, state, &res))
		return NULL;
	if (state[0] != '\0') {
		PQclear(res);
		lab_fail(L, "session %s: %s (SQLSTATE %s) in: %s", s->label, s->lasterr, state,
		         first_line(sql, sh, sizeof sh));
		return NULL;
	}
	if (res == NULL) {
		lab_fail(L, "session %s: no result for: %s", s->label, first_line(sql, sh, sizeof sh));
		return NULL;
	}
	return res;
}

bool lab_execp(lab *L, lab_sess *s, const char *sql, int nparams, const char *const *params)
{
	PGresult *res = lab_query(L, s, sql, nparams, params);
	PQclear(res);
	return res != NULL;
}

bool lab_exec(lab *L, lab_sess *s, const char *sql)
{
	return lab_execp(L, s, sql, 0, NULL);
}

static PGresult *one_value(lab *L, lab_sess *s, const char *sql, int nparams,
                           const char *const *params)
{
	char sh[80];
	PGresult *res = lab_query(L, s, sql, nparams, params);
	if (res == NULL)
		return NULL;
	if (PQntuples(res) < 1 || PQnfields(res) < 1) {
		PQclear(res);
		lab_fail(L, "session %s: no row from: %s", s->label, first_line(sql, sh, sizeof sh));
		return NULL;
	}
	return res;
}

bool lab_int(lab *L, lab_sess *s, const char *sql, int nparams, const char *const *params,
             long long *out)
{
	PGresult *res = one_value(L, s, sql, nparams, params);
	if (res == NULL)
		return false;
	*out = PQgetisnull(res, 0, 0) ? 0 : strtoll(PQgetvalue(res, 0, 0), NULL, 10);
	PQclear(res);
	return true;
}

bool lab_bool(lab *L, lab_sess *s, const char *sql, int nparams, const char *const *params,
              bool *out)
{
	PGresult *res = one_value(L, s, sql, nparams, params);
	if (res == NULL)
		return false;
	*out = strcmp(PQgetvalue(res, 0, 0), "t") == 0;
	PQclear(res);
	return true;
}

bool lab_text(lab *L, lab_sess *s, const char *sql, int nparams, const char *const *params,
              char *out, size_t n)
{
	PGresult *res = one_value(L, s, sql, nparams, params);
	if (res == NULL)
		return false;
	snprintf(out, n, "%s", PQgetvalue(res, 0, 0));
	PQclear(res);
	return true;
}

int lab_await_lock_wait(lab *L, lab_sess *s)
{
	char pid[24];
	lab_fmt(pid, s->pid);
	const char *params[1] = { pid };
	int64_t deadline = pgc__now_ms() + L->opts.lock_timeout_ms;
	for (;;) {
		int ready = pgc__ready(s->conn);
		if (ready < 0) {
			lab_fail(L, "session %s: connection lost while waiting", s->label);
			return -1;
		}
		if (ready == 1)
			return 0;
		bool waiting;
		if (!lab_bool(L, L->obs,
		              "SELECT coalesce(bool_or(wait_event_type = 'Lock'), false)"
		              " FROM pg_stat_activity WHERE pid = $1::int", 1, params, &waiting))
			return -1;
		if (waiting)
			return 1;
		if (pgc__now_ms() > deadline) {
			lab_fail(L, "session %s: neither waiting for a lock nor finished after %d ms",
			         s->label, L->opts.lock_timeout_ms);
			return -1;
		}
		pgc__sleep_ms(5);
	}
}

bool lab_adv_count(lab *L, int64_t key, long long *out)
{
	char k[24];
	lab_fmt(k, key);
	const char *params[1] = { k };
	return lab_int(L, L->obs,
	               "SELECT count(*) FROM pg_locks WHERE locktype = 'advisory'"
	               " AND database = (SELECT oid FROM pg_database WHERE datname = current_database())"
	               " AND classid = ($1::bigint >> 32)::oid"
	               " AND objid = ($1::bigint & 4294967295)::oid AND objsubid = 1",
	               1, params, out);
}

/* tx.c - the whole-transaction retry runner and savepoints
 *
 * One attempt is BEGIN, optional set_config(..., true) for the timeouts, the caller's body,
 * COMMIT. The runner classifies how an attempt ended:
 *   - committed, or rolled back at the body's request: done;
 *   - a server error whose SQLSTATE is retryable (40P01, 40001, optionally 55P03), raised by
 *     any statement or by COMMIT: the transaction is gone, so roll back and run it again;
 *   - the session died before COMMIT was sent: the server rolled the transaction back, so
 *     reconnect (under the reconnect rule in pgcoord/tx.h) and run it again;
 *   - the session died after COMMIT was sent: the outcome is unknown and only the caller can
 *     find out; never retried;
 *   - anything else: roll back and report it as the server said it.
 * "COMMIT was sent" is decided conservatively: from the moment libpq has written the COMMIT
 * message, any loss counts as unknown. Before writing it, the runner looks for a FATAL the
 * server may already have sent (pg_terminate_backend, idle_in_transaction_session_timeout)
 * while the session sat idle in the transaction, so that such a death is recognised as
 * "before COMMIT" rather than pessimistically reported as unknown. */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/random.h>
#include <time.h>
#include <unistd.h>

#include "conn/conn_int.h"
#include "tx_int.h"

void (*pgc__tx_commit_sent_hook)(pgc_conn *conn);

/* ---- per-session state ---- */

/* What the runner keeps on a session: the nesting depth of pgc_savepoint(), and the
 * lock_timeout a running pgc_tx_run() set (the bound of its lock waits). A new session has
 * neither. */
static void tx_lost(pgc_conn *c, void *state, const char *reason)
{
	(void)c;
	(void)reason;
	pgc__tx_state *s = state;
	s->savepoint_depth = 0;
	s->lock_timeout_ms = 0;
}

static void tx_close(pgc_conn *c, void *state)
{
	(void)c;
	free(state);
}

static const pgc__attach_ops tx_ops = { "transactions", tx_lost, tx_close, NULL, NULL };

pgc__tx_state *pgc__tx_state_of(pgc_conn *c)
{
	pgc__tx_state *s = pgc__attached(c, &tx_ops);
	if (s != NULL)
		return s;
	s = calloc(1, sizeof *s);
	if (s == NULL)
		return NULL;
	if (pgc__attach(c, &tx_ops, s, NULL) != PGC_OK) {
		free(s);
		return NULL;
	}
	return s;
}

/* ---- small helpers ---- */

static bool is_state(const pgc_error *e, const char *state)
{
	return strcmp(e->sqlstate, state) == 0;
}

static bool conn_dead(const pgc_conn *conn)
{
	return !pgc__conn_ok(conn);
}

/* A failure that came from libpq rather than from the server (no SQLSTATE): the socket failed
 * under us (a keepalive timeout, a reset), whether or not libpq marked the connection bad. */
static bool client_side_failure(const pgc_error *e)
{
	return e->sqlstate[0] == '\0' && (e->code == PGC_ESQL || e->code == PGC_ECONNLOST);
}

/* xorshift64*: enough for jitter, seeded per call so threads never share state. */
static uint64_t rng_next(uint64_t *s)
{
	uint64_t x = *s;
	x ^= x >> 12;
	x ^= x << 25;
	x ^= x >> 27;
	*s = x;
	return x * UINT64_C(2685821657736338717);
}

static uint64_t rng_seed(const void *salt)
{
	uint64_t seed = 0;
	if (getrandom(&seed, sizeof seed, GRND_NONBLOCK) != (ssize_t)sizeof seed) {
		struct timespec ts;
		clock_gettime(CLOCK_MONOTONIC, &ts);
		seed = (uint64_t)ts.tv_nsec ^ ((uint64_t)ts.tv_sec << 32) ^ ((uint64_t)getpid() << 16) ^
		       (uint64_t)(uintptr_t)salt;
	}
	return seed ? seed : UINT64_C(0x9e3779b97f4a7c15);
}

/* Full jitter: uniform in [0, min(cap, base * 2^(retry - 1))]. */
static int64_t backoff_ms(const pgc_tx_options *o, int retry, uint64_t *rng)
{
	int64_t ceiling = o->backoff_base_ms;
	for (int i = 1; i < retry && ceiling < o->backoff_max_ms; i++)
		ceiling *= 2;
	if (ceiling > o->backoff_max_ms)
		ceiling = o->backoff_max_ms;
	if (ceiling <= 0)
		return 0;
	return (int64_t)(rng_next(rng) % (uint64_t)(ceiling + 1));
}

static void record_state(pgc_tx_stats *st, const pgc_error *e)
{
	if (st->nsqlstates < PGC_TX_SQLSTATES_MAX)
		memcpy(st->sqlstates[st->nsqlstates], e->sqlstate, sizeof e->sqlstate);
	st->nsqlstates++;
	if (is_state(e, "40P01"))
		st->deadlocks++;
	else if (is_state(e, "40001"))
		st->serialization_failures++;
	else if (is_state(e, "55P03"))
		st->lock_not_available++;
}

/* Rolls back whatever is open, when the session still allows it. False when the session died
 * (the server then rolled back on its own). */
static bool rollback(pgc_conn *conn)
{
	return pgc__rollback(conn);
}

/* ---- one attempt ---- */

typedef enum outcome {
	OC_COMMITTED,
	OC_ROLLED_BACK,   /* the body asked for it */
	OC_RETRY,         /* retryable server error; rolled back */
	OC_LOST,          /* session died before COMMIT was sent */
	OC_UNKNOWN,       /* session died after COMMIT was sent */
	OC_FAIL           /* final error; rolled back where possible */
} outcome;

static const char *begin_sql(const pgc_tx_options *o)
{
	/* Every combination spelled out: the SQL text stays constant. */
	static const char *const plain[4][2] = {
		{ "BEGIN", "BEGIN READ ONLY" },
		{ "BEGIN ISOLATION LEVEL READ COMMITTED", "BEGIN ISOLATION LEVEL READ COMMITTED READ ONLY" },
		{ "BEGIN ISOLATION LEVEL REPEATABLE READ", "BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY" },
		{ "BEGIN ISOLATION LEVEL SERIALIZABLE", "BEGIN ISOLATION LEVEL SERIALIZABLE READ ONLY" },
	};
	if (o->deferrable)
		return "BEGIN ISOLATION LEVEL SERIALIZABLE READ ONLY DEFERRABLE";
	return plain[o->isolation][o->read_only ? 1 : 0];
}

/* set_config(name, value, true) for the timeouts that were given: SET LOCAL without pasting
 * values into SQL. One statement text per combination, so that each is prepared once. Returns
 * the number of parameters (0: nothing to set). */
static int timeouts_sql(const pgc_tx_options *o, char *sql, size_t size, char bufs[3][32],
                        const char *params[3])
{
	static const char *const names[3] = { "lock_timeout", "statement_timeout",
		                                  "idle_in_transaction_session_timeout" };
	const int64_t vals[3] = { o->lock_timeout_ms, o->statement_timeout_ms,
		                      o->idle_in_transaction_timeout_ms };
	snprintf(sql, size, "SELECT ");
	int n = 0;
	for (int i = 0; i < 3; i++) {
		if (vals[i] <= 0)
			continue;
		snprintf(bufs[n], sizeof bufs[n], "%" PRId64 "ms", vals[i]);
		params[n] = bufs[n];
		size_t len = strlen(sql);
		snprintf(sql + len, size - len, "%sset_config('%s', $%d, true)", n ? ", " : "", names[i], n + 1);
		n++;
	}
	return n;
}

static bool retryable(const pgc_tx_options *o, const pgc_error *e)
{
	return is_state(e, "40P01") || is_state(e, "40001") ||
	       (o->retry_lock_not_available && is_state(e, "55P03"));
}

/* Classifies a failed statement (or body) whose error is in err. */
static outcome failed(pgc_conn *conn, const pgc_tx_options *o, pgc_error *err)
{
	if (conn_dead(conn) || client_side_failure(err)) {
		pgc__conn_set_broken(conn);
		if (err->code != PGC_ECONNLOST) {
			/* The body reported something else, but the session is gone all the same. */
			err->code = PGC_ECONNLOST;
			err->klass = PGC_CLASS_RETRY_LATER;
			if (err->message[0] == '\0')
				pgc__copy_line(err->message, sizeof err->message, "connection to the server lost");
		}
		return OC_LOST;
	}
	bool retry = retryable(o, err);
	if (!rollback(conn))
		return OC_LOST;
	return retry ? OC_RETRY : OC_FAIL;
}

static outcome attempt(pgc_conn *conn, const pgc_tx_options *o, pgc_tx_fn fn, void *arg,
                       int *rc, pgc_error *err)
{
	pgc_error_clear(err);
	pgc__tx_state *ts = pgc__tx_state_of(conn);
	if (ts == NULL) {
		*rc = pgc__err(err, PGC_ENOMEM, "out of memory");
		return OC_FAIL;
	}
	ts->savepoint_depth = 0;
	/* BEGIN and the timeouts in one round trip. */
	char sql[256], bufs[3][32];
	const char *params[3];
	int np = timeouts_sql(o, sql, sizeof sql, bufs, params);
	pgc__batch *b = pgc__batch_new(conn);
	if (b == NULL) {
		*rc = pgc__err(err, PGC_ENOMEM, "out of memory");
		return OC_FAIL;
	}
	(void)pgc__batch_add(b, begin_sql(o), 0, NULL, 0);
	if (np > 0)
		(void)pgc__batch_add(b, sql, np, params, PGC__CACHED);
	*rc = pgc__batch_run(b, NULL, err);
	pgc__batch_free(b);
	if (*rc != PGC_OK)
		return failed(conn, o, err);
	ts->lock_timeout_ms = o->lock_timeout_ms;

	*rc = fn(conn, arg, err);
	ts = pgc__tx_state_of(conn);
	if (ts != NULL)
		ts->lock_timeout_ms = 0;
	if (*rc < 0) {
		if (err->code == PGC_OK) {
			/* The body failed without saying why; keep its code and say so. */
			pgc__err(err, *rc, "transaction body returned %d (%s) without details", *rc,
			         pgc_strerror(*rc));
		}
		return failed(conn, o, err);
	}
	if (conn_dead(conn)) {
		*rc = pgc__err(err, PGC_ECONNLOST, "connection to the server lost during the transaction body");
		return OC_LOST;
	}
	if (*rc == PGC_TX_ROLLBACK) {
		pgc_error_clear(err);
		rollback(conn);
		return OC_ROLLED_BACK;
	}
	if (*rc != PGC_OK) {
		int bad = *rc;
		*rc = pgc__err(err, PGC_EUSAGE, "transaction body returned %d; expected 0, PGC_TX_ROLLBACK or a negative pgc_code", bad);
		rollback(conn);
		return OC_FAIL;
	}
	switch (pgc__tx_status(conn)) {
	case PQTRANS_IDLE:
		*rc = pgc__err(err, PGC_EUSAGE, "the transaction body ended the transaction itself (COMMIT or ROLLBACK inside it)");
		return OC_FAIL;
	case PQTRANS_INERROR:
		*rc = pgc__err(err, PGC_EUSAGE, "the transaction body returned success after a statement failed; rolled back");
		rollback(conn);
		return OC_FAIL;
	case PQTRANS_INTRANS:
		break;
	default:
		*rc = pgc__err(err, PGC_EINTERNAL, "unexpected session state before COMMIT");
		rollback(conn);
		return OC_FAIL;
	}
	pgc_error_clear(err);
	if (pgc__died_while_idle(conn, err)) {
		*rc = PGC_ECONNLOST;
		return OC_LOST;
	}

	/* COMMIT is not cancelled at a deadline: an unanswered COMMIT has an unknown outcome,
	 * and the session is closed rather than trusted afterwards. */
	pgc__call call = PGC__CALL_INIT;
	call.flags = PGC__SIMPLE | PGC__KEEP_ERROR;
	call.on_deadline = PGC__DROP;
	if (pgc__send(conn, "COMMIT", 0, NULL, &call, err) != PGC_OK) {
		/* Not written (or not completely: the server never executes a partial message). */
		*rc = err->code ? err->code : PGC_ECONNLOST;
		if (conn_dead(conn))
			return OC_LOST;
		rollback(conn);
		return OC_FAIL;
	}
	if (pgc__tx_commit_sent_hook != NULL)
		pgc__tx_commit_sent_hook(conn);
	PGresult *last = pgc__await(conn, &call, rc, err);
	if (*rc == PGC_OK) {
		/* "ROLLBACK" as COMMIT's tag: the transaction had failed. */
		bool committed = last != NULL && strcmp(PQcmdStatus(last), "COMMIT") == 0;
		PQclear(last);
		if (committed)
			return OC_COMMITTED;
		*rc = pgc__err(err, PGC_EUSAGE, "COMMIT rolled back: the transaction had failed");
		return OC_FAIL;
	}
	/* Only an ERROR from the server proves that COMMIT was processed and failed. Anything
	 * else (no answer, a read error from libpq, a FATAL) leaves the outcome unknown. */
	const char *sev = last ? PQresultErrorField(last, PG_DIAG_SEVERITY_NONLOCALIZED) : NULL;
	bool server_error = last != NULL && err->sqlstate[0] != '\0' && !conn_dead(conn) &&
	                    !(sev != NULL && (strcmp(sev, "FATAL") == 0 || strcmp(sev, "PANIC") == 0));
	PQclear(last);
	if (!server_error) {
		pgc__conn_set_broken(conn);
		char msg[PGC_ERROR_MESSAGE_MAX];
		snprintf(msg, sizeof msg, "%s", err->message);
		char st[6];
		memcpy(st, err->sqlstate, sizeof st);
		*rc = pgc__err(err, PGC_ECOMMIT_UNKNOWN,
		               "connection lost after COMMIT was sent; the transaction may or may not have committed: %s",
		               msg);
		memcpy(err->sqlstate, st, sizeof st);
		return OC_UNKNOWN;
	}
	/* A server error raised by COMMIT (40001, a deferred constraint): rolled back. */
	return failed(conn, o, err);
}

/* ---- the runner ---- */

static int check_options(const pgc_tx_options *o, pgc_error *err)
{
	if ((int)o->isolation < PGC_ISOLATION_DEFAULT || (int)o->isolation > PGC_ISOLATION_SERIALIZABLE)
		return pgc__err(err, PGC_EUSAGE, "pgc_tx_run: isolation %d is not a pgc_isolation", (int)o->isolation);
	if (o->deferrable && !(o->isolation == PGC_ISOLATION_SERIALIZABLE && o->read_only))
		return pgc__err(err, PGC_EUSAGE, "pgc_tx_run: deferrable needs serializable isolation and read_only");
	if (o->max_attempts < 1)
		return pgc__err(err, PGC_EUSAGE, "pgc_tx_run: max_attempts must be at least 1");
	if (o->backoff_base_ms < 0 || o->backoff_max_ms < 0)
		return pgc__err(err, PGC_EUSAGE, "pgc_tx_run: backoff times must not be negative");
	if (o->lock_timeout_ms < 0 || o->statement_timeout_ms < 0 || o->idle_in_transaction_timeout_ms < 0)
		return pgc__err(err, PGC_EUSAGE, "pgc_tx_run: timeouts must not be negative (0 keeps the session's setting)");
	/* set_config takes an int of milliseconds. */
	if (o->lock_timeout_ms > INT32_MAX || o->statement_timeout_ms > INT32_MAX ||
	    o->idle_in_transaction_timeout_ms > INT32_MAX)
		return pgc__err(err, PGC_EUSAGE, "pgc_tx_run: timeouts must be below 2147483648 ms");
	return PGC_OK;
}

int pgc_tx_run(pgc_conn *conn, const pgc_tx_options *opts, pgc_tx_fn fn, void *arg, pgc_error *err)
{
	pgc_error local;
	if (err == NULL)
		err = &local;
	pgc_error_clear(err);
	pgc_tx_options defaults = PGC_TX_OPTIONS_INIT;
	const pgc_tx_options *o = opts ? opts : &defaults;
	pgc_tx_stats scratch;
	pgc_tx_stats *st = o->stats ? o->stats : &scratch;
	memset(st, 0, sizeof *st);
	if (conn == NULL || fn == NULL)
		return pgc__err(err, PGC_EUSAGE, "pgc_tx_run: conn and fn must not be NULL");
	int rc = check_options(o, err);
	if (rc != PGC_OK)
		return rc;
	if (!conn_dead(conn) && pgc__tx_status(conn) != PQTRANS_IDLE)
		return pgc__err(err, PGC_EUSAGE, "pgc_tx_run: the session is already inside a transaction (use pgc_savepoint for a nested unit)");

	uint64_t rng = rng_seed(conn);
	/* A session that died before this call (after an unknown COMMIT, say) is replaced first. */
	bool need_reconnect = conn_dead(conn);
	if (need_reconnect)
		pgc__err(err, PGC_ECONNLOST, "connection to the server lost before the transaction began");
	for (int attempt_no = 1;; attempt_no++) {
		st->attempts = attempt_no;
		outcome oc;
		if (need_reconnect) {
			if (!o->reconnect)
				return pgc__err(err, PGC_ECONNLOST, "the session was lost before this transaction; not reconnecting (disabled)");
			if (pgc__holds_session_state(conn))
				return pgc__err(err, PGC_ECONNLOST,
				                "session lost while it held session-scoped state (advisory locks or LISTEN); not reconnecting, since a new session would not have it");
			rc = pgc__reconnect(conn, err);
			if (rc == PGC_OK) {
				st->reconnects++;
				need_reconnect = false;
				oc = attempt(conn, o, fn, arg, &rc, err);
			} else {
				oc = OC_LOST; /* the server is not reachable now; try again after a pause */
			}
		} else {
			oc = attempt(conn, o, fn, arg, &rc, err);
		}

		switch (oc) {
		case OC_COMMITTED:
			pgc_error_clear(err);
			return PGC_OK;
		case OC_ROLLED_BACK:
			pgc_error_clear(err);
			return PGC_TX_ROLLBACK;
		case OC_UNKNOWN:
			return PGC_ECOMMIT_UNKNOWN;
		case OC_FAIL:
			if (err->sqlstate[0] != '\0')
				record_state(st, err);
			return rc;
		case OC_LOST:
			need_reconnect = true;
			if (!o->reconnect) {
				record_state(st, err);
				char msg[PGC_ERROR_MESSAGE_MAX];
				snprintf(msg, sizeof msg, "%s", err->message);
				char state[6];
				memcpy(state, err->sqlstate, sizeof state);
				pgc__err(err, PGC_ECONNLOST, "%s; not reconnecting (disabled)", msg);
				memcpy(err->sqlstate, state, sizeof state);
				return PGC_ECONNLOST;
			}
			break;
		case OC_RETRY:
			break;
		}
		record_state(st, err);
		if (attempt_no >= o->max_attempts) {
			if (err->code == PGC_ECONNECT)
				return PGC_ECONNECT;
			pgc_error last = *err;
			pgc__err(err, PGC_ERETRY_EXHAUSTED, "transaction failed %d time%s, giving up; last: %s",
			         attempt_no, attempt_no == 1 ? "" : "s", last.message);
			err->klass = last.klass;
			memcpy(err->sqlstate, last.sqlstate, sizeof err->sqlstate);
			memcpy(err->detail, last.detail, sizeof err->detail);
			memcpy(err->hint, last.hint, sizeof err->hint);
			err->position = last.position;
			return PGC_ERETRY_EXHAUSTED;
		}
		int64_t pause = backoff_ms(o, attempt_no, &rng);
		if (o->before_retry != NULL) {
			pgc_tx_retry_info info = { attempt_no, o->max_attempts, err, pause, need_reconnect };
			if (o->before_retry(&info, o->hook_arg) != 0) {
				char msg[PGC_ERROR_MESSAGE_MAX];
				snprintf(msg, sizeof msg, "%s", err->message);
				char state[6];
				memcpy(state, err->sqlstate, sizeof state);
				pgc__err(err, PGC_EINTR, "retry stopped by the caller after attempt %d; last: %s",
				         attempt_no, msg);
				memcpy(err->sqlstate, state, sizeof state);
				return PGC_EINTR;
			}
		}
		if (pause > 0)
			pgc__sleep_ms(pause);
		st->backoff_ms += pause;
	}
}

/* ---- savepoints ---- */

/* Runs one of SAVEPOINT / RELEASE SAVEPOINT / ROLLBACK TO SAVEPOINT on the level's name. The
 * name is made by the library from the nesting depth, never from caller input. */
static int savepoint_cmd(pgc_conn *conn, const char *verb, int depth, pgc_error *err)
{
	char sql[64];
	snprintf(sql, sizeof sql, "%s pgcoord_sp_%d", verb, depth);
	int rc = pgc__command(conn, sql, err);
	if (rc != PGC_OK)
		pgc__err_prefix(err, "%s", verb);
	return rc;
}

int pgc__tx_usable(pgc_conn *conn, const char *fn_name, pgc_error *err)
{
	if (conn_dead(conn))
		return pgc__err(err, PGC_ECONNLOST, "%s: connection to the server lost", fn_name);
	switch (pgc__tx_status(conn)) {
	case PQTRANS_INTRANS:
		return PGC_OK;
	case PQTRANS_INERROR:
		return pgc__err(err, PGC_EUSAGE, "%s: the transaction is aborted (a statement failed); roll it back first", fn_name);
	case PQTRANS_IDLE:
		return pgc__err(err, PGC_EUSAGE, "%s: not inside a transaction (run it in pgc_tx_run or after BEGIN)", fn_name);
	default:
		return pgc__err(err, PGC_EUSAGE, "%s: the session is busy", fn_name);
	}
}

int pgc_savepoint(pgc_conn *conn, pgc_tx_fn fn, void *arg, pgc_error *err)
{
	pgc_error local;
	if (err == NULL)
		err = &local;
	pgc_error_clear(err);
	if (conn == NULL || fn == NULL)
		return pgc__err(err, PGC_EUSAGE, "pgc_savepoint: conn and fn must not be NULL");
	int rc = pgc__tx_usable(conn, "pgc_savepoint", err);
	if (rc != PGC_OK)
		return rc;
	pgc__tx_state *ts = pgc__tx_state_of(conn);
	if (ts == NULL)
		return pgc__err(err, PGC_ENOMEM, "out of memory");
	int depth = ++ts->savepoint_depth;
	rc = savepoint_cmd(conn, "SAVEPOINT", depth, err);
	if (rc != PGC_OK) {
		ts->savepoint_depth = depth - 1;
		return rc;
	}
	rc = fn(conn, arg, err);
	if (rc < 0 && err->code == PGC_OK)
		pgc__err(err, rc, "savepoint body returned %d (%s) without details", rc, pgc_strerror(rc));
	if (rc > 0 && rc != PGC_TX_ROLLBACK)
		rc = pgc__err(err, PGC_EUSAGE, "savepoint body returned %d; expected 0, PGC_TX_ROLLBACK or a negative pgc_code", rc);
	if (rc == PGC_OK && !conn_dead(conn) && pgc__tx_status(conn) == PQTRANS_INERROR)
		rc = pgc__err(err, PGC_EUSAGE, "savepoint body returned success after a statement failed; rolled back to the savepoint");
	if (conn_dead(conn)) {
		ts->savepoint_depth = depth - 1;
		if (rc >= 0)
			rc = pgc__err(err, PGC_ECONNLOST, "connection to the server lost inside the savepoint");
		return rc;
	}

	pgc_error cleanup = PGC_ERROR_INIT;
	int crc = PGC_OK;
	if (rc != PGC_OK)
		crc = savepoint_cmd(conn, "ROLLBACK TO SAVEPOINT", depth, &cleanup);
	if (crc == PGC_OK)
		crc = savepoint_cmd(conn, "RELEASE SAVEPOINT", depth, &cleanup);
	ts->savepoint_depth = depth - 1;
	if (crc != PGC_OK) {
		/* The enclosing transaction is no longer usable: that matters more than the body's
		 * own outcome, which the message keeps. */
		if (rc < 0) {
			char msg[PGC_ERROR_MESSAGE_MAX];
			snprintf(msg, sizeof msg, "%s (after: %s)", cleanup.message, err->message);
			pgc__copy_line(cleanup.message, sizeof cleanup.message, msg);
		}
		*err = cleanup;
		return crc;
	}
	if (rc == PGC_TX_ROLLBACK)
		pgc_error_clear(err);
	return rc;
}

int pgc_tx_check_result(pgc_conn *conn, const struct pg_result *res, pgc_error *err)
{
	pgc_error_clear(err);
	if (conn == NULL)
		return pgc__err(err, PGC_EUSAGE, "pgc_tx_check_result: conn must not be NULL");
	ExecStatusType st = res ? PQresultStatus(res) : PGRES_FATAL_ERROR;
	if (st == PGRES_COMMAND_OK || st == PGRES_TUPLES_OK || st == PGRES_EMPTY_QUERY)
		return PGC_OK;
	return pgc__err_result(err, pgc_conn_pg(conn), res, NULL);
}

/* ---- isolation names ---- */

static const char *const isolation_names[4] = { "default", "read committed", "repeatable read",
	                                            "serializable" };

bool pgc_isolation_parse(const char *text, pgc_isolation *out)
{
	if (text == NULL || out == NULL)
		return false;
	char norm[32];
	size_t i = 0;
	for (; text[i] != '\0'; i++) {
		if (i + 1 >= sizeof norm)
			return false;
		char c = text[i];
		norm[i] = (c == '-' || c == '_') ? ' ' : c;
	}
	norm[i] = '\0';
	for (int l = 0; l < 4; l++) {
		if (strcasecmp(norm, isolation_names[l]) == 0) {
			*out = (pgc_isolation)l;
			return true;
		}
	}
	return false;
}

const char *pgc_isolation_name(pgc_isolation level)
{
	if ((int)level < 0 || (int)level > 3)
		return NULL;
	return isolation_names[level];
}

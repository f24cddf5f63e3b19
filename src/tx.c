/* tx.c - the whole-transaction retry runner, savepoints, ordered row locks, table locks
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
#include <errno.h>
#include <inttypes.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/random.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "internal.h"

void (*pgc__tx_commit_sent_hook)(pgc_conn *conn);

/* ---- small helpers ---- */

static bool is_state(const pgc_error *e, const char *state)
{
	return strcmp(e->sqlstate, state) == 0;
}

static bool conn_dead(const pgc_conn *conn)
{
	return conn->broken || PQstatus(conn->pg) == CONNECTION_BAD;
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

static void sleep_ms(int64_t ms)
{
	struct timespec ts = { (time_t)(ms / 1000), (long)(ms % 1000) * 1000000L };
	while (nanosleep(&ts, &ts) != 0 && errno == EINTR)
		;
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
	if (conn_dead(conn))
		return false;
	if (PQtransactionStatus(conn->pg) == PQTRANS_IDLE)
		return true;
	PGresult *res = PQexec(conn->pg, "ROLLBACK");
	PQclear(res);
	return !conn_dead(conn);
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

/* Sends set_config(name, value, true) for the timeouts that were given: SET LOCAL without
 * pasting values into SQL. */
static int set_timeouts(pgc_conn *conn, const pgc_tx_options *o, pgc_error *err)
{
	static const char *const names[3] = { "lock_timeout", "statement_timeout",
		                                  "idle_in_transaction_session_timeout" };
	const int64_t vals[3] = { o->lock_timeout_ms, o->statement_timeout_ms,
		                      o->idle_in_transaction_timeout_ms };
	char sql[256] = "SELECT ";
	char bufs[3][32];
	const char *params[3];
	int n = 0;
	for (int i = 0; i < 3; i++) {
		if (vals[i] <= 0)
			continue;
		snprintf(bufs[n], sizeof bufs[n], "%" PRId64 "ms", vals[i]);
		params[n] = bufs[n];
		char piece[96];
		snprintf(piece, sizeof piece, "%sset_config('%s', $%d, true)", n ? ", " : "", names[i], n + 1);
		strcat(sql, piece);
		n++;
	}
	if (n == 0)
		return PGC_OK;
	int rc;
	PGresult *res = pgc__exec(conn, sql, n, params, &rc, err);
	PQclear(res);
	return rc;
}


/* Looks, without consuming anything, at what the server sent while the session sat idle in
 * the transaction. Nothing is expected there; an ErrorResponse of severity FATAL or PANIC
 * (pg_terminate_backend, idle_in_transaction_session_timeout, shutdown) or the end of the
 * stream means the backend is gone and will never read a COMMIT. Over TLS the bytes cannot be
 * read without libpq, so the check is skipped and a later loss counts as "unknown". */
static bool died_while_idle(pgc_conn *conn, pgc_error *err)
{
	if (conn_dead(conn))
		return pgc__err(err, PGC_ECONNLOST, "connection to the server lost"), true;
	int fd = PQsocket(conn->pg);
	if (fd < 0)
		return pgc__err(err, PGC_ECONNLOST, "connection to the server lost"), true;
	if (PQsslInUse(conn->pg))
		return false;
	unsigned char buf[4096];
	ssize_t n = recv(fd, buf, sizeof buf, MSG_PEEK | MSG_DONTWAIT);
	if (n == 0)
		return pgc__err(err, PGC_ECONNLOST, "server closed the connection"), true;
	if (n < 0)
		return (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR)
		           ? false
		           : (pgc__err(err, PGC_ECONNLOST, "connection to the server lost: %s", strerror(errno)), true);
	size_t off = 0;
	while (off + 5 <= (size_t)n) {
		unsigned char type = buf[off];
		uint32_t len = (uint32_t)buf[off + 1] << 24 | (uint32_t)buf[off + 2] << 16 |
		               (uint32_t)buf[off + 3] << 8 | buf[off + 4];
		if (len < 4 || off + 1 + len > (size_t)n)
			break;
		if (type == 'E') {
			const char *sev = NULL, *state = "", *msg = "terminating connection";
			size_t p = off + 5, end = off + 1 + len;
			while (p < end && buf[p] != 0) {
				char code = (char)buf[p++];
				const char *val = (const char *)buf + p;
				size_t vlen = strnlen(val, end - p);
				if (p + vlen >= end)
					break;
				if (code == 'V' || (code == 'S' && sev == NULL))
					sev = val;
				else if (code == 'C')
					state = val;
				else if (code == 'M')
					msg = val;
				p += vlen + 1;
			}
			if (sev != NULL && (strcmp(sev, "FATAL") == 0 || strcmp(sev, "PANIC") == 0)) {
				pgc__err(err, PGC_ECONNLOST, "%s", msg);
				if (strlen(state) == 5) {
					memcpy(err->sqlstate, state, 6);
					err->klass = pgc_sqlstate_class(state);
				}
				return true;
			}
		}
		off += 1 + len;
	}
	return false;
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
		conn->broken = true;
		if (err->code != PGC_ECONNLOST) {
			/* The body reported something else, but the session is gone all the same. */
			err->code = PGC_ECONNLOST;
			err->klass = PGC_CLASS_RETRY_LATER;
			if (err->message[0] == '\0')
				pgc__copy_line(err->message, sizeof err->message, PQerrorMessage(conn->pg));
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
	conn->savepoint_depth = 0;
	PGresult *res = PQexec(conn->pg, begin_sql(o));
	if (PQresultStatus(res) != PGRES_COMMAND_OK) {
		*rc = pgc__err_result(err, conn->pg, res, NULL);
		PQclear(res);
		return failed(conn, o, err);
	}
	PQclear(res);
	*rc = set_timeouts(conn, o, err);
	if (*rc != PGC_OK)
		return failed(conn, o, err);

	*rc = fn(conn, arg, err);
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
	switch (PQtransactionStatus(conn->pg)) {
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
	if (died_while_idle(conn, err)) {
		*rc = PGC_ECONNLOST;
		return OC_LOST;
	}

	if (!PQsendQuery(conn->pg, "COMMIT")) {
		/* Not written (or not completely: the server never executes a partial message). */
		*rc = pgc__err_result(err, conn->pg, NULL, NULL);
		if (conn_dead(conn))
			return OC_LOST;
		rollback(conn);
		return OC_FAIL;
	}
	if (pgc__tx_commit_sent_hook != NULL)
		pgc__tx_commit_sent_hook(conn);
	PGresult *last = NULL;
	bool committed = false;
	while ((res = PQgetResult(conn->pg)) != NULL) {
		if (PQresultStatus(res) == PGRES_COMMAND_OK && strcmp(PQcmdStatus(res), "COMMIT") == 0)
			committed = true;
		PQclear(last);
		last = res;
	}
	if (committed) {
		/* The answer came, whatever happened to the session afterwards. */
		PQclear(last);
		*rc = PGC_OK;
		return OC_COMMITTED;
	}
	if (last != NULL && PQresultStatus(last) == PGRES_COMMAND_OK) {
		/* "ROLLBACK" as COMMIT's tag: the transaction had failed. */
		PQclear(last);
		*rc = pgc__err(err, PGC_EUSAGE, "COMMIT rolled back: the transaction had failed");
		return OC_FAIL;
	}
	/* Only an ERROR from the server proves that COMMIT was processed and failed. Anything
	 * else (no answer, a read error from libpq, a FATAL) leaves the outcome unknown. */
	const char *state = last ? PQresultErrorField(last, PG_DIAG_SQLSTATE) : NULL;
	const char *sev = last ? PQresultErrorField(last, PG_DIAG_SEVERITY_NONLOCALIZED) : NULL;
	bool server_error = state != NULL && strlen(state) == 5 && !conn_dead(conn) &&
	                    !(sev != NULL && (strcmp(sev, "FATAL") == 0 || strcmp(sev, "PANIC") == 0));
	if (!server_error) {
		pgc__err_result(err, conn->pg, last, NULL);
		PQclear(last);
		conn->broken = true;
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
	*rc = pgc__err_result(err, conn->pg, last, NULL);
	PQclear(last);
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
	if (!conn_dead(conn) && PQtransactionStatus(conn->pg) != PQTRANS_IDLE)
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
			rc = pgc__reconnect(conn, err);
			if (rc == PGC_ECONNLOST)
				return rc; /* refused under the reconnect rule */
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
			pgc__err(err, PGC_ERETRY_EXHAUSTED, "transaction failed %d times, giving up; last: %s",
			         attempt_no, last.message);
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
			sleep_ms(pause);
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
	PGresult *res = PQexec(conn->pg, sql);
	int rc = PGC_OK;
	if (PQresultStatus(res) != PGRES_COMMAND_OK)
		rc = pgc__err_result(err, conn->pg, res, verb);
	PQclear(res);
	return rc;
}

static int usable_transaction(pgc_conn *conn, const char *fn_name, pgc_error *err)
{
	if (conn_dead(conn))
		return pgc__err(err, PGC_ECONNLOST, "%s: connection to the server lost", fn_name);
	switch (PQtransactionStatus(conn->pg)) {
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
	int rc = usable_transaction(conn, "pgc_savepoint", err);
	if (rc != PGC_OK)
		return rc;
	int depth = ++conn->savepoint_depth;
	rc = savepoint_cmd(conn, "SAVEPOINT", depth, err);
	if (rc != PGC_OK) {
		conn->savepoint_depth = depth - 1;
		return rc;
	}
	rc = fn(conn, arg, err);
	if (rc < 0 && err->code == PGC_OK)
		pgc__err(err, rc, "savepoint body returned %d (%s) without details", rc, pgc_strerror(rc));
	if (rc > 0 && rc != PGC_TX_ROLLBACK)
		rc = pgc__err(err, PGC_EUSAGE, "savepoint body returned %d; expected 0, PGC_TX_ROLLBACK or a negative pgc_code", rc);
	if (rc == PGC_OK && !conn_dead(conn) && PQtransactionStatus(conn->pg) == PQTRANS_INERROR)
		rc = pgc__err(err, PGC_EUSAGE, "savepoint body returned success after a statement failed; rolled back to the savepoint");
	if (conn_dead(conn)) {
		conn->savepoint_depth = depth - 1;
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
	conn->savepoint_depth = depth - 1;
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

/* ---- explicit locks ---- */

/* "name" or "schema.name", each part quoted. malloc'd; NULL with err filled. */
static char *quote_table(pgc_conn *conn, const char *table, pgc_error *err)
{
	const char *dot = strchr(table, '.');
	if (dot == NULL) {
		char *q = pgc__quote_ident(conn, table, err);
		char *out = q ? strdup(q) : NULL;
		if (q != NULL && out == NULL)
			pgc__err(err, PGC_ENOMEM, "out of memory");
		PQfreemem(q);
		return out;
	}
	if (dot == table || dot[1] == '\0')
		return pgc__err(err, PGC_EUSAGE, "table name \"%.100s\" has an empty part", table), NULL;
	char *schema = strndup(table, (size_t)(dot - table));
	if (schema == NULL)
		return pgc__err(err, PGC_ENOMEM, "out of memory"), NULL;
	char *qs = pgc__quote_ident(conn, schema, err);
	char *qt = qs ? pgc__quote_ident(conn, dot + 1, err) : NULL;
	free(schema);
	char *out = NULL;
	if (qs != NULL && qt != NULL) {
		size_t n = strlen(qs) + strlen(qt) + 2;
		out = malloc(n);
		if (out == NULL)
			pgc__err(err, PGC_ENOMEM, "out of memory");
		else
			snprintf(out, n, "%s.%s", qs, qt);
	}
	PQfreemem(qs);
	PQfreemem(qt);
	return out;
}

/* Statements pgc_lock_rows() prepared on a session, by SQL text: planned once per session,
 * as pgbench -M prepared does, instead of parsed and planned on every call. Bounded; past the
 * bound, statements run unnamed. */
#define STMT_CACHE_MAX 32

struct pgc__stmt {
	char *sql;
	char name[32];
};

void pgc__tx_forget_statements(pgc_conn *conn)
{
	for (int i = 0; i < conn->nstmts; i++)
		free(conn->stmts[i].sql);
	free(conn->stmts);
	conn->stmts = NULL;
	conn->nstmts = 0;
}

/* Runs sql (one text parameter) as a prepared statement of this session, preparing it the
 * first time. */
static PGresult *exec_cached(pgc_conn *conn, const char *sql, const char *param, int *rc,
                             pgc_error *err)
{
	const char *values[1] = { param };
	struct pgc__stmt *hit = NULL;
	for (int i = 0; i < conn->nstmts && hit == NULL; i++)
		if (strcmp(conn->stmts[i].sql, sql) == 0)
			hit = &conn->stmts[i];
	if (hit == NULL && conn->nstmts < STMT_CACHE_MAX) {
		if (conn->stmts == NULL) {
			conn->stmts = calloc(STMT_CACHE_MAX, sizeof *conn->stmts);
			if (conn->stmts == NULL)
				return pgc__exec(conn, sql, 1, values, rc, err);
		}
		struct pgc__stmt *st = &conn->stmts[conn->nstmts];
		st->sql = strdup(sql);
		if (st->sql == NULL)
			return pgc__exec(conn, sql, 1, values, rc, err);
		snprintf(st->name, sizeof st->name, "pgcoord_lock_rows_%d", conn->nstmts);
		PGresult *res = PQprepare(conn->pg, st->name, sql, 1, NULL);
		if (PQresultStatus(res) != PGRES_COMMAND_OK) {
			*rc = pgc__err_result(err, conn->pg, res, NULL);
			PQclear(res);
			free(st->sql);
			st->sql = NULL;
			return NULL;
		}
		PQclear(res);
		conn->nstmts++;
		hit = st;
	}
	if (hit == NULL)
		return pgc__exec(conn, sql, 1, values, rc, err);
	PGresult *res = PQexecPrepared(conn->pg, hit->name, 1, values, NULL, NULL, 0);
	ExecStatusType st = res ? PQresultStatus(res) : PGRES_FATAL_ERROR;
	if (st == PGRES_TUPLES_OK) {
		*rc = PGC_OK;
		return res;
	}
	*rc = pgc__err_result(err, conn->pg, res, NULL);
	PQclear(res);
	if (err != NULL && strcmp(err->sqlstate, "26000") == 0) {
		/* Deallocated behind our back (DEALLOCATE ALL, DISCARD ALL): prepare it again next
		 * time. */
		pgc__tx_forget_statements(conn);
	}
	return NULL;
}

static int cmp_i64(const void *a, const void *b)
{
	int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
	return (x > y) - (x < y);
}

int pgc_lock_rows(pgc_conn *conn, const char *table, const char *key_column, const int64_t *ids,
                  size_t n, pgc_row_lock mode, pgc_wait_policy wait_policy, bool *locked,
                  pgc_error *err)
{
	pgc_error_clear(err);
	if (conn == NULL || table == NULL || key_column == NULL || *table == '\0' || *key_column == '\0')
		return pgc__err(err, PGC_EUSAGE, "pgc_lock_rows: conn, table and key_column must be given");
	if (ids == NULL && n > 0)
		return pgc__err(err, PGC_EUSAGE, "pgc_lock_rows: ids must not be NULL when n > 0");
	const char *clause = pgc_row_lock_sql(mode);
	if (clause == NULL)
		return pgc__err(err, PGC_EUSAGE, "pgc_lock_rows: mode %d is not a pgc_row_lock", (int)mode);
	if ((int)wait_policy < PGC_LOCK_WAIT || (int)wait_policy > PGC_LOCK_SKIP_LOCKED)
		return pgc__err(err, PGC_EUSAGE, "pgc_lock_rows: wait_policy %d is not a pgc_wait_policy", (int)wait_policy);
	int rc = usable_transaction(conn, "pgc_lock_rows", err);
	if (rc != PGC_OK)
		return rc;
	for (size_t i = 0; i < n && locked != NULL; i++)
		locked[i] = false;
	if (n == 0)
		return PGC_OK;

	/* The sorted, distinct keys: the array parameter and the lookup table for the answer. */
	int64_t *keys = malloc(n * sizeof *keys);
	bool *got = calloc(n, sizeof *got);
	char *param = malloc(n * 21 + 3);
	char *qt = NULL, *qk = NULL, *sql = NULL;
	PGresult *res = NULL;
	if (keys == NULL || got == NULL || param == NULL) {
		rc = pgc__err(err, PGC_ENOMEM, "out of memory");
		goto out;
	}
	memcpy(keys, ids, n * sizeof *keys);
	qsort(keys, n, sizeof *keys, cmp_i64);
	size_t nk = 0;
	for (size_t i = 0; i < n; i++)
		if (nk == 0 || keys[nk - 1] != keys[i])
			keys[nk++] = keys[i];
	char *p = param;
	*p++ = '{';
	for (size_t i = 0; i < nk; i++)
		p += sprintf(p, i ? ",%" PRId64 : "%" PRId64, keys[i]);
	*p++ = '}';
	*p = '\0';

	qt = quote_table(conn, table, err);
	qk = qt ? pgc__quote_ident(conn, key_column, err) : NULL;
	if (qt == NULL || qk == NULL) {
		rc = err && err->code ? err->code : PGC_EUSAGE;
		goto out;
	}
	const char *policy = wait_policy == PGC_LOCK_NOWAIT ? " NOWAIT"
	                     : wait_policy == PGC_LOCK_SKIP_LOCKED ? " SKIP LOCKED" : "";
	size_t len = strlen(qt) + 3 * strlen(qk) + 128;
	sql = malloc(len);
	if (sql == NULL) {
		rc = pgc__err(err, PGC_ENOMEM, "out of memory");
		goto out;
	}
	/* ORDER BY sits below the locking clause in the plan: rows are locked in key order. */
	snprintf(sql, len, "SELECT %s FROM %s WHERE %s = ANY($1::int8[]) ORDER BY %s %s%s", qk, qt,
	         qk, qk, clause, policy);
	res = exec_cached(conn, sql, param, &rc, err);
	if (res == NULL)
		goto out;
	for (int r = 0; r < PQntuples(res); r++) {
		if (PQgetisnull(res, r, 0))
			continue;
		int64_t k = strtoll(PQgetvalue(res, r, 0), NULL, 10);
		int64_t *hit = bsearch(&k, keys, nk, sizeof *keys, cmp_i64);
		if (hit != NULL)
			got[hit - keys] = true;
	}
	for (size_t i = 0; i < n && locked != NULL; i++) {
		int64_t *hit = bsearch(&ids[i], keys, nk, sizeof *keys, cmp_i64);
		locked[i] = hit != NULL && got[hit - keys];
	}
	rc = PGC_OK;
out:
	PQclear(res);
	free(sql);
	PQfreemem(qk);
	free(qt);
	free(param);
	free(got);
	free(keys);
	return rc;
}

int pgc_lock_table(pgc_conn *conn, const char *table, pgc_table_lock mode, bool nowait,
                   pgc_error *err)
{
	pgc_error_clear(err);
	if (conn == NULL || table == NULL || *table == '\0')
		return pgc__err(err, PGC_EUSAGE, "pgc_lock_table: conn and table must be given");
	const char *m = pgc_table_lock_sql(mode);
	if (m == NULL)
		return pgc__err(err, PGC_EUSAGE, "pgc_lock_table: mode %d is not a pgc_table_lock (the mode is always explicit)", (int)mode);
	int rc = usable_transaction(conn, "pgc_lock_table", err);
	if (rc != PGC_OK)
		return rc;
	char *qt = quote_table(conn, table, err);
	if (qt == NULL)
		return err && err->code ? err->code : PGC_EUSAGE;
	size_t len = strlen(qt) + 64;
	char *sql = malloc(len);
	if (sql == NULL) {
		free(qt);
		return pgc__err(err, PGC_ENOMEM, "out of memory");
	}
	snprintf(sql, len, "LOCK TABLE %s IN %s MODE%s", qt, m, nowait ? " NOWAIT" : "");
	PGresult *res = pgc__exec(conn, sql, 0, NULL, &rc, err);
	PQclear(res);
	free(sql);
	free(qt);
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
	return pgc__err_result(err, conn->pg, res, NULL);
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

/* test_layer.c - the connection layer against a real server: deadlines that cancel, cancels
 * that are not answered, the cancel descriptor, the first error kept, per-statement timeouts,
 * pipelined batches and the statement cache's rule, attachments, large parameters */
#include <fcntl.h>
#include <libpq-fe.h>
#include <pthread.h>
#include <signal.h>
#include <unistd.h>

#include "conn/conn_int.h"
#include "../t.h"

static PGresult *query(pgc_conn *c, const char *sql, pgc__call *call, int *rc, pgc_error *err)
{
	return pgc__query(c, sql, 0, NULL, call, rc, err);
}

static int64_t one_int(pgc_conn *c, const char *sql)
{
	int rc;
	pgc_error err;
	PGresult *r = pgc__exec(c, sql, 0, NULL, &rc, &err);
	if (r == NULL)
		T_FAIL("%s: %s", sql, err.message);
	int64_t v = strtoll(PQgetvalue(r, 0, 0), NULL, 10);
	PQclear(r);
	return v;
}

/* A deadline that passes cancels the statement; the session stays usable. */
static void layer__deadline_cancels(void)
{
	pgc_conn *c = t_connect("pgcoord/test-layer");
	pgc__call call = pgc__bound(300, -1);
	int rc;
	pgc_error err;
	int64_t t0 = pgc__now_ms();
	T_ASSERT(query(c, "SELECT pg_sleep(20)", &call, &rc, &err) == NULL);
	int64_t el = pgc__now_ms() - t0;
	T_ASSERT_INT_EQ(rc, PGC_ETIMEDOUT);
	T_ASSERT_STR_EQ(err.sqlstate, "57014");
	T_ASSERT(call.hit_deadline && !call.dropped);
	T_ASSERT(el >= 250 && el < 10000);
	T_ASSERT_INT_EQ(one_int(c, "SELECT 41 + 1"), 42);
	pgc_conn_close(c);
}

/* A server that answers neither the statement nor the cancel (its backend stopped): the
 * session is dropped within the cancel's grace. */
static void layer__unanswered_cancel_drops(void)
{
	pgc_conn *c = t_connect("pgcoord/test-layer");
	int pid = pgc_conn_backend_pid(c);
	if (kill(pid, SIGSTOP) != 0) {
		fprintf(stderr, "skipped: cannot signal the server's backend %d (a remote server?)\n", pid);
		exit(T_SKIP);
	}
	pgc__call call = pgc__bound(300, -1);
	int rc;
	pgc_error err;
	int64_t t0 = pgc__now_ms();
	PGresult *r = query(c, "SELECT 1", &call, &rc, &err);
	int64_t el = pgc__now_ms() - t0;
	kill(pid, SIGCONT);
	T_ASSERT(r == NULL);
	T_ASSERT_INT_EQ(rc, PGC_ETIMEDOUT);
	T_ASSERT(call.dropped);
	T_ASSERT_CONTAINS(err.message, "session was closed");
	T_ASSERT(el >= 300 && el < 300 + PGC__CANCEL_GRACE_MS + 5000);
	T_ASSERT(!pgc__conn_ok(c));
	pgc_conn_close(c);
}

static int pipefd[2];

static void *write_later(void *arg)
{
	(void)arg;
	pgc__sleep_ms(300);
	char b = 1;
	ssize_t n = write(pipefd[1], &b, 1);
	(void)n;
	return NULL;
}

/* The cancel descriptor interrupts a wait without a deadline. */
static void layer__cancel_fd(void)
{
	pgc_conn *c = t_connect("pgcoord/test-layer");
	T_ASSERT(pipe(pipefd) == 0);
	pthread_t th;
	pthread_create(&th, NULL, write_later, NULL);
	pgc__call call = pgc__bound(PGC_WAIT_FOREVER, pipefd[0]);
	int rc;
	pgc_error err;
	T_ASSERT(query(c, "SELECT pg_sleep(20)", &call, &rc, &err) == NULL);
	pthread_join(th, NULL);
	T_ASSERT_INT_EQ(rc, PGC_EINTR);
	T_ASSERT(call.hit_cancel);
	T_ASSERT_INT_EQ(one_int(c, "SELECT 7"), 7);
	close(pipefd[0]);
	close(pipefd[1]);
	pgc_conn_close(c);
}

/* A script's first error is the one reported, not what came after it. */
static void layer__first_error_kept(void)
{
	pgc_conn *c = t_connect("pgcoord/test-layer");
	pgc_error err;
	T_ASSERT_INT_EQ(pgc_exec(c, "SELECT 1; SELECT 1/0; SELECT no_such_column", &err), PGC_ESQL);
	T_ASSERT_STR_EQ(err.sqlstate, "22012");
	/* In a batch too: the failed statement, and nothing after it ran. */
	pgc__batch *b = pgc__batch_new(c);
	(void)pgc__batch_add(b, "SELECT 1", 0, NULL, 0);
	(void)pgc__batch_add(b, "SELECT 1/0", 0, NULL, 0);
	(void)pgc__batch_add(b, "SELECT no_such_column", 0, NULL, 0);
	T_ASSERT_INT_EQ(pgc__batch_run(b, NULL, &err), PGC_ESQL);
	T_ASSERT_STR_EQ(err.sqlstate, "22012");
	T_ASSERT(pgc__batch_result(b, 2) == NULL);
	pgc__batch_free(b);
	pgc_conn_close(c);
}

/* A statement's own statement_timeout wins over the session's, and inside a transaction block
 * the session's is back after it. */
static void layer__statement_timeout_override(void)
{
	pgc_conn *c = t_connect("pgcoord/test-layer");
	pgc_error err;
	T_ASSERT_INT_EQ(pgc_exec(c, "SET statement_timeout = '200ms'", &err), PGC_OK);
	int rc;
	pgc__call plain = PGC__CALL_INIT;
	T_ASSERT(query(c, "SELECT pg_sleep(0.6)", &plain, &rc, &err) == NULL);
	T_ASSERT_STR_EQ(err.sqlstate, "57014");
	pgc__call off = PGC__CALL_INIT;
	off.statement_timeout_ms = 0;
	PGresult *r = query(c, "SELECT pg_sleep(0.6)", &off, &rc, &err);
	if (r == NULL)
		T_FAIL("with the override: %s", err.message);
	PQclear(r);
	T_ASSERT_INT_EQ(pgc_exec(c, "BEGIN", &err), PGC_OK);
	off.flags = PGC__SAVEPOINT;
	r = query(c, "SELECT pg_sleep(0.6)", &off, &rc, &err);
	T_ASSERT(r != NULL);
	PQclear(r);
	r = pgc__exec(c, "SELECT current_setting('statement_timeout')", 0, NULL, &rc, &err);
	T_ASSERT_STR_EQ(PQgetvalue(r, 0, 0), "200ms");
	PQclear(r);
	/* A failure under a savepoint leaves the transaction usable. */
	T_ASSERT(query(c, "SELECT 1/0", &off, &rc, &err) == NULL);
	T_ASSERT_INT_EQ(pgc__tx_status(c), PQTRANS_INTRANS);
	T_ASSERT_INT_EQ(pgc_exec(c, "COMMIT", &err), PGC_OK);
	pgc_conn_close(c);
}

/* A cached statement that occurs twice in one batch is parsed once; after DEALLOCATE ALL the
 * batch is sent again outside a transaction block, and fails once inside one. */
static void layer__statement_cache_rule(void)
{
	pgc_conn *c = t_connect("pgcoord/test-layer");
	pgc_error err;
	const char *v1[1] = { "1" }, *v2[1] = { "2" };
	for (int round = 0; round < 3; round++) {
		pgc__batch *b = pgc__batch_new(c);
		(void)pgc__batch_add(b, "SELECT $1::int + 100", 1, v1, PGC__CACHED);
		(void)pgc__batch_add(b, "SELECT $1::int + 100", 1, v2, PGC__CACHED);
		(void)pgc__batch_add(b, "SELECT 7", 0, NULL, 0);
		int rc = pgc__batch_run(b, NULL, &err);
		if (rc != PGC_OK)
			T_FAIL("round %d: %s", round, err.message);
		T_ASSERT_STR_EQ(PQgetvalue(pgc__batch_result(b, 0), 0, 0), "101");
		T_ASSERT_STR_EQ(PQgetvalue(pgc__batch_result(b, 1), 0, 0), "102");
		T_ASSERT_STR_EQ(PQgetvalue(pgc__batch_result(b, 2), 0, 0), "7");
		pgc__batch_free(b);
		if (round == 1)
			T_ASSERT_INT_EQ(pgc_exec(c, "DEALLOCATE ALL", &err), PGC_OK);
	}
	T_ASSERT_INT_EQ(pgc__stmt_count(c), 1);
	T_ASSERT_INT_EQ(pgc_exec(c, "DEALLOCATE ALL; BEGIN", &err), PGC_OK);
	int rc;
	T_ASSERT(pgc__exec_cached(c, "SELECT $1::int + 100", 1, v1, &rc, &err) == NULL);
	T_ASSERT_STR_EQ(err.sqlstate, "26000");
	T_ASSERT_INT_EQ(pgc_exec(c, "ROLLBACK; BEGIN", &err), PGC_OK);
	PGresult *r = pgc__exec_cached(c, "SELECT $1::int + 100", 1, v1, &rc, &err);
	T_ASSERT(r != NULL);
	PQclear(r);
	T_ASSERT_INT_EQ(pgc_exec(c, "COMMIT", &err), PGC_OK);
	pgc_conn_close(c);
}

/* Attachments hear that the session is gone, once, and that the handle closes. */
typedef struct hooks {
	int lost, closed;
} hooks;

static void h_lost(pgc_conn *c, void *state, const char *reason)
{
	(void)c;
	(void)reason;
	((hooks *)state)->lost++;
}

static void h_close(pgc_conn *c, void *state)
{
	(void)c;
	((hooks *)state)->closed++;
}

static bool h_holds(const void *state)
{
	(void)state;
	return true;
}

static const pgc__attach_ops hook_ops = { "test", h_lost, h_close, h_holds, NULL };

static void layer__attachments(void)
{
	pgc_conn *c = t_connect("pgcoord/test-layer"), *k = t_connect("pgcoord/test-layer");
	hooks h = { 0, 0 };
	pgc_error err;
	T_ASSERT_INT_EQ(pgc__attach(c, &hook_ops, &h, &err), PGC_OK);
	T_ASSERT(pgc__holds_session_state(c));
	int pid = pgc_conn_backend_pid(c);
	char sql[64];
	snprintf(sql, sizeof sql, "SELECT pg_terminate_backend(%d)", pid);
	T_ASSERT_INT_EQ(one_int(k, "SELECT 1"), 1);
	T_ASSERT_INT_EQ(pgc_exec(k, sql, &err), PGC_OK);
	pgc__sleep_ms(200);
	T_ASSERT_INT_EQ(pgc_conn_check(c, 2000, &err), PGC_ECONNLOST);
	T_ASSERT_INT_EQ(h.lost, 1);
	T_ASSERT_INT_EQ(pgc_conn_check(c, 2000, &err), PGC_ECONNLOST);
	T_ASSERT_INT_EQ(h.lost, 1); /* once per session */
	T_ASSERT_INT_EQ(pgc__reconnect(c, &err), PGC_OK);
	T_ASSERT(pgc_conn_backend_pid(c) != pid);
	T_ASSERT_INT_EQ(one_int(c, "SELECT 5"), 5);
	T_ASSERT_INT_EQ(h.closed, 0);
	pgc_conn_close(c);
	T_ASSERT_INT_EQ(h.closed, 1);
	pgc_conn_close(k);
}

/* A parameter far larger than the socket's buffers goes out under the call's deadline. */
static void layer__large_parameter(void)
{
	pgc_conn *c = t_connect("pgcoord/test-layer");
	size_t n = 32u << 20;
	char *big = malloc(n + 1);
	T_ASSERT(big != NULL);
	memset(big, 'x', n);
	big[n] = '\0';
	const char *v[1] = { big };
	int rc;
	pgc_error err;
	PGresult *r = pgc__exec(c, "SELECT length($1::text)", 1, v, &rc, &err);
	if (r == NULL)
		T_FAIL("large parameter: %s", err.message);
	T_ASSERT_INT_EQ(strtoll(PQgetvalue(r, 0, 0), NULL, 10), (long long)n);
	PQclear(r);
	free(big);
	pgc_conn_close(c);
}

int main(int argc, char **argv)
{
	static const t_case cases[] = {
		{ "layer__deadline_cancels", layer__deadline_cancels },
		{ "layer__unanswered_cancel_drops", layer__unanswered_cancel_drops },
		{ "layer__cancel_fd", layer__cancel_fd },
		{ "layer__first_error_kept", layer__first_error_kept },
		{ "layer__statement_timeout_override", layer__statement_timeout_override },
		{ "layer__statement_cache_rule", layer__statement_cache_rule },
		{ "layer__attachments", layer__attachments },
		{ "layer__large_parameter", layer__large_parameter },
		{ NULL, NULL },
	};
	return t_main(argc, argv, cases);
}

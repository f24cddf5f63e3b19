/* test_lease.c - leases, fencing tokens and fence_check against a real server
 *
 * Each case runs in its own process with its own schema (pgc_lease_<pid>), so cases run in
 * parallel with each other and with the other areas' tests. */
#include <libpq-fe.h>
#include <pthread.h>
#include <time.h>
#include <unistd.h>

#include "conn/conn_int.h"
#include "../t.h"

static char schema[64];
static pgc_lease_options lopts = PGC_LEASE_OPTIONS_INIT;

static int64_t mono_ms(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static void drop_schema(void)
{
	pgc_conn *c = t_connect(NULL);
	char sql[160];
	snprintf(sql, sizeof sql, "DROP SCHEMA IF EXISTS \"%s\" CASCADE", schema);
	pgc_error err;
	if (pgc_exec(c, sql, &err) != PGC_OK)
		fprintf(stderr, "drop schema: %s\n", err.message);
	pgc_conn_close(c);
}

/* A fresh schema for this process, dropped at exit. */
static pgc_conn *setup(void)
{
	snprintf(schema, sizeof schema, "pgc_lease_%d", (int)getpid());
	lopts.schema = schema;
	pgc_conn *c = t_connect("pgcoord/test-lease");
	pgc_error err;
	if (pgc_schema_init(c, schema, NULL, NULL, &err) != PGC_OK)
		T_FAIL("init: %s", err.message);
	atexit(drop_schema);
	return c;
}

static void lease__acquire_renew_release(void)
{
	pgc_conn *a = setup(), *b = t_connect(NULL);
	pgc_error err;
	pgc_lease la, lb;
	int64_t t0 = mono_ms();
	T_ASSERT_INT_EQ(pgc_lease_acquire(a, "job", "alpha", 5000, &lopts, &la, &err), PGC_OK);
	int64_t t1 = mono_ms();
	T_ASSERT_INT_EQ(la.token, 1);
	T_ASSERT_STR_EQ(la.name, "job");
	T_ASSERT_STR_EQ(la.holder, "alpha");
	/* The local deadline counts from before the request: never after the server's expiry. */
	T_ASSERT(la.deadline_ms >= t0 + 5000 && la.deadline_ms <= t1 + 5000);
	T_ASSERT_INT_EQ(la.expires_at_us - la.granted_at_us, 5000 * 1000);
	T_ASSERT(pgc_lease_remaining_ms(&la) > 4000);

	/* Held: another holder gets EBUSY and learns who holds it. */
	T_ASSERT_INT_EQ(pgc_lease_acquire(b, "job", "beta", 5000, &lopts, &lb, &err), PGC_EBUSY);
	T_ASSERT_INT_EQ(err.code, PGC_EBUSY);
	T_ASSERT_CONTAINS(err.message, "alpha");
	T_ASSERT_STR_EQ(lb.holder, "alpha");
	T_ASSERT_INT_EQ(lb.token, 1);
	T_ASSERT_INT_EQ(lb.deadline_ms, 0);
	/* Even the same holder string does not get it twice: a grant is per token. */
	T_ASSERT_INT_EQ(pgc_lease_acquire(b, "job", "alpha", 5000, &lopts, &lb, &err), PGC_EBUSY);

	int64_t before = la.expires_at_us;
	sleep_ms(20);
	T_ASSERT_INT_EQ(pgc_lease_renew(a, &la, &lopts, &err), PGC_OK);
	T_ASSERT(la.expires_at_us > before);
	T_ASSERT_INT_EQ(la.token, 1);

	pgc_lease_info info;
	T_ASSERT_INT_EQ(pgc_lease_get(b, "job", &lopts, &info, &err), PGC_OK);
	T_ASSERT(info.held);
	T_ASSERT_INT_EQ(info.token, 1);
	T_ASSERT_STR_EQ(info.kind, "lease");
	T_ASSERT_STR_EQ(info.holder, "alpha");
	T_ASSERT_INT_EQ(info.ttl_ms, 5000);
	T_ASSERT_INT_EQ(info.expires_at_us, la.expires_at_us);
	T_ASSERT(info.db_now_us < info.expires_at_us);
	T_ASSERT_INT_EQ(info.released_at_us, 0);

	/* Release needs the right token; a stale or unknown one changes nothing. */
	T_ASSERT_INT_EQ(pgc_lease_release(b, "job", 7, &lopts, &err), PGC_ENOTFOUND);
	T_ASSERT_INT_EQ(pgc_lease_release(a, "job", 1, &lopts, &err), PGC_OK);
	T_ASSERT_INT_EQ(pgc_lease_release(a, "job", 1, &lopts, &err), PGC_OK); /* idempotent */
	T_ASSERT_INT_EQ(pgc_lease_get(b, "job", &lopts, &info, &err), PGC_OK);
	T_ASSERT(!info.held);
	T_ASSERT(info.released_at_us > 0);
	T_ASSERT_INT_EQ(info.expires_at_us, 0);
	/* A released lease cannot be renewed. */
	T_ASSERT_INT_EQ(pgc_lease_renew(a, &la, &lopts, &err), PGC_ESTALE);
	T_ASSERT_CONTAINS(err.message, "released");
	T_ASSERT_INT_EQ(la.deadline_ms, 0);

	T_ASSERT_INT_EQ(pgc_lease_acquire(b, "job", "beta", 5000, &lopts, &lb, &err), PGC_OK);
	T_ASSERT_INT_EQ(lb.token, 2);
	T_ASSERT_INT_EQ(pgc_lease_release(a, "job", 1, &lopts, &err), PGC_ESTALE);
	T_ASSERT_INT_EQ(pgc_lease_get(b, "job", &lopts, &info, &err), PGC_OK);
	T_ASSERT(info.held);
	T_ASSERT_STR_EQ(info.holder, "beta");

	T_ASSERT_INT_EQ(pgc_lease_get(b, "nosuch", &lopts, &info, &err), PGC_ENOTFOUND);
	pgc_lease_info *all = NULL;
	size_t n = 0;
	T_ASSERT_INT_EQ(pgc_lease_acquire(a, "another", "alpha", 5000, &lopts, &la, &err), PGC_OK);
	T_ASSERT_INT_EQ(la.token, 1); /* tokens count per name */
	T_ASSERT_INT_EQ(pgc_lease_list(a, &lopts, &all, &n, &err), PGC_OK);
	T_ASSERT_INT_EQ(n, 2);
	T_ASSERT_STR_EQ(all[0].name, "another");
	T_ASSERT_STR_EQ(all[1].name, "job");
	pgc_free(all);
	pgc_conn_close(a);
	pgc_conn_close(b);
}

static void lease__expiry_by_database_clock(void)
{
	pgc_conn *a = setup(), *b = t_connect(NULL);
	pgc_error err;
	pgc_lease la, lb;
	T_ASSERT_INT_EQ(pgc_lease_acquire(a, "short", "alpha", 300, &lopts, &la, &err), PGC_OK);
	sleep_ms(450);
	T_ASSERT(pgc_lease_remaining_ms(&la) < 0);
	/* Expired and not taken: renewing is refused all the same. */
	pgc_lease copy = la;
	T_ASSERT_INT_EQ(pgc_lease_renew(a, &copy, &lopts, &err), PGC_ESTALE);
	T_ASSERT_CONTAINS(err.message, "expired");
	T_ASSERT_INT_EQ(pgc_lease_acquire(b, "short", "beta", 300, &lopts, &lb, &err), PGC_OK);
	T_ASSERT_INT_EQ(lb.token, 2);
	T_ASSERT_INT_EQ(pgc_lease_renew(a, &la, &lopts, &err), PGC_ESTALE);
	T_ASSERT_CONTAINS(err.message, "token 2 was granted to beta");
	T_ASSERT_STR_EQ(err.sqlstate, "");
	pgc_conn_close(a);
	pgc_conn_close(b);
}

/* Many sessions race for one name: at most one holds it at a time, and every grant gets a
 * token no other grant got, each greater than the one before it. */
#define RACERS 6
#define ROUNDS 25
static pthread_mutex_t race_mu = PTHREAD_MUTEX_INITIALIZER;
static int race_holders, race_max_holders;
static int64_t race_tokens[RACERS * ROUNDS * 2];
static int race_ntokens;

static void *racer(void *arg)
{
	int id = (int)(intptr_t)arg;
	pgc_conn *c = t_connect(NULL);
	char holder[32];
	snprintf(holder, sizeof holder, "racer-%d", id);
	int won = 0, tries = 0;
	int64_t last = 0;
	while (won < ROUNDS && tries < 20000) {
		tries++;
		pgc_lease l;
		pgc_error err;
		int rc;
		int64_t token = 0;
		if (id % 2 == 0 || won % 3 != 0) {
			rc = pgc_lease_acquire(c, "race", holder, 10000, &lopts, &l, &err);
			token = l.token;
		} else {
			/* Lock-holder tokens come from the same counter. */
			rc = pgc_fence_next(c, "race", holder, &lopts, &token, &err);
		}
		if (rc == PGC_EBUSY)
			continue;
		if (rc != PGC_OK)
			T_FAIL("racer %d: %s", id, err.message);
		/* Leases exclude each other; lock tokens rely on the advisory lock for that. */
		bool is_lease = id % 2 == 0 || won % 3 != 0;
		pthread_mutex_lock(&race_mu);
		if (is_lease && ++race_holders > race_max_holders)
			race_max_holders = race_holders;
		race_tokens[race_ntokens++] = token;
		pthread_mutex_unlock(&race_mu);
		if (token <= last)
			T_FAIL("racer %d: token %lld after %lld", id, (long long)token, (long long)last);
		last = token;
		/* While a lease is held nobody else gets a token: its token stays the newest. */
		if (is_lease)
			T_ASSERT_INT_EQ(pgc_fence_check(c, "race", token, &lopts, &err), PGC_OK);
		pthread_mutex_lock(&race_mu);
		if (is_lease)
			race_holders--;
		pthread_mutex_unlock(&race_mu);
		if (is_lease) {
			rc = pgc_lease_release(c, "race", token, &lopts, &err);
			if (rc != PGC_OK)
				T_FAIL("racer %d release: %s", id, err.message);
		}
		won++;
	}
	T_ASSERT_INT_EQ(won, ROUNDS);
	pgc_conn_close(c);
	return NULL;
}

static int cmp64(const void *a, const void *b)
{
	int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
	return (x > y) - (x < y);
}

static void lease__concurrent_tokens_unique_and_increasing(void)
{
	pgc_conn *c = setup();
	pthread_t th[RACERS];
	for (int i = 0; i < RACERS; i++)
		pthread_create(&th[i], NULL, racer, (void *)(intptr_t)i);
	for (int i = 0; i < RACERS; i++)
		pthread_join(th[i], NULL);
	T_ASSERT_INT_EQ(race_ntokens, RACERS * ROUNDS);
	T_ASSERT_INT_EQ(race_max_holders, 1);
	qsort(race_tokens, (size_t)race_ntokens, sizeof race_tokens[0], cmp64);
	for (int i = 0; i < race_ntokens; i++)
		T_ASSERT_INT_EQ(race_tokens[i], i + 1); /* unique, no gaps: one per grant */
	pgc_conn_close(c);
}

static void fence__check_reports_stale_with_sqlstate(void)
{
	pgc_conn *a = setup(), *b = t_connect(NULL);
	pgc_error err;
	pgc_lease la, lb;
	T_ASSERT_INT_EQ(pgc_lease_acquire(a, "res", "alpha", 200, &lopts, &la, &err), PGC_OK);
	T_ASSERT_INT_EQ(pgc_fence_check(a, "res", la.token, &lopts, &err), PGC_OK);
	sleep_ms(300);
	/* Expired but nobody newer: the token is still the newest, writes still pass. */
	T_ASSERT_INT_EQ(pgc_fence_check(a, "res", la.token, &lopts, &err), PGC_OK);
	T_ASSERT_INT_EQ(pgc_lease_acquire(b, "res", "beta", 5000, &lopts, &lb, &err), PGC_OK);

	T_ASSERT_INT_EQ(pgc_fence_check(a, "res", la.token, &lopts, &err), PGC_ESTALE);
	T_ASSERT_STR_EQ(err.sqlstate, PGC_SQLSTATE_FENCE_STALE);
	T_ASSERT_CONTAINS(err.message, "stale fencing token 1");
	T_ASSERT_CONTAINS(err.detail, "beta");
	T_ASSERT_INT_EQ(pgc_fence_check(a, "res", lb.token, &lopts, &err), PGC_OK);
	T_ASSERT_INT_EQ(pgc_fence_check(a, "res", 99, &lopts, &err), PGC_ENOTFOUND);
	T_ASSERT_STR_EQ(err.sqlstate, PGC_SQLSTATE_FENCE_UNKNOWN);
	T_ASSERT_INT_EQ(pgc_fence_check(a, "nosuch", 1, &lopts, &err), PGC_ENOTFOUND);

	/* Any writer, plain SQL: the stale write fails inside its transaction and nothing of it
	 * is committed. */
	PGconn *pg = pgc_conn_pg(a);
	char sql[512];
	snprintf(sql, sizeof sql, "CREATE TABLE \"%s\".ledger (v int)", schema);
	T_ASSERT_INT_EQ(pgc_exec(a, sql, &err), PGC_OK);
	snprintf(sql, sizeof sql,
	         "BEGIN; SELECT \"%s\".fence_check('res', 1); INSERT INTO \"%s\".ledger VALUES (1); COMMIT",
	         schema, schema);
	PGresult *r = PQexec(pg, sql);
	T_ASSERT_INT_EQ(PQresultStatus(r), PGRES_FATAL_ERROR);
	T_ASSERT_STR_EQ(PQresultErrorField(r, PG_DIAG_SQLSTATE), "PCF01");
	PQclear(r);
	T_ASSERT_INT_EQ(pgc_exec(a, "ROLLBACK", &err), PGC_OK);
	snprintf(sql, sizeof sql,
	         "BEGIN; SELECT \"%s\".fence_check('res', 2); INSERT INTO \"%s\".ledger VALUES (2); COMMIT",
	         schema, schema);
	T_ASSERT_INT_EQ(pgc_exec(a, sql, &err), PGC_OK);
	snprintf(sql, sizeof sql, "SELECT string_agg(v::text, ',') FROM \"%s\".ledger", schema);
	r = PQexec(pg, sql);
	T_ASSERT_STR_EQ(PQgetvalue(r, 0, 0), "2");
	PQclear(r);
	pgc_conn_close(a);
	pgc_conn_close(b);
}

/* A grant waits for the transactions that checked the previous token, so that no write
 * guarded by an old token commits after a newer token exists; renewals do not wait. */
struct grant_arg {
	pgc_lease lease;
	int rc;
	int64_t done_ms;
	pgc_error err;
};

static void *grant_thread(void *p)
{
	struct grant_arg *g = p;
	pgc_conn *c = t_connect(NULL);
	pgc_lease_options o = lopts;
	o.lock_timeout_ms = 20000;
	g->rc = pgc_lease_acquire(c, "guarded", "beta", 5000, &o, &g->lease, &g->err);
	g->done_ms = mono_ms();
	pgc_conn_close(c);
	return NULL;
}

static void fence__grant_waits_for_checked_transaction(void)
{
	pgc_conn *holder = setup(), *writer = t_connect(NULL), *other = t_connect(NULL);
	pgc_error err;
	pgc_lease la, lb;
	T_ASSERT_INT_EQ(pgc_lease_acquire(holder, "guarded", "alpha", 1000, &lopts, &la, &err), PGC_OK);
	T_ASSERT_INT_EQ(pgc_exec(writer, "BEGIN", &err), PGC_OK);
	T_ASSERT_INT_EQ(pgc_fence_check(writer, "guarded", la.token, &lopts, &err), PGC_OK);
	/* The holder's renewal is not delayed by its own writers. */
	pgc_lease_options quick = lopts;
	quick.timeout_ms = 3000;
	T_ASSERT_INT_EQ(pgc_lease_renew(holder, &la, &quick, &err), PGC_OK);
	/* After expiry a grant must wait for the writer: with a short lock timeout it gives up
	 * with EBUSY, and the session stays usable. */
	sleep_ms(1200);
	pgc_lease_options o = lopts;
	o.lock_timeout_ms = 200;
	T_ASSERT_INT_EQ(pgc_lease_acquire(other, "guarded", "gamma", 5000, &o, &lb, &err), PGC_EBUSY);
	T_ASSERT_CONTAINS(err.message, "still open");
	T_ASSERT_STR_EQ(err.sqlstate, "55P03");
	struct grant_arg g;
	memset(&g, 0, sizeof g);
	pthread_t th;
	pthread_create(&th, NULL, grant_thread, &g);
	sleep_ms(500);
	T_ASSERT_INT_EQ(g.done_ms, 0); /* still waiting for the writer */
	/* The writer's transaction still sees its own token as current and commits. */
	T_ASSERT_INT_EQ(pgc_fence_check(writer, "guarded", la.token, &lopts, &err), PGC_OK);
	int64_t commit_ms = mono_ms();
	T_ASSERT_INT_EQ(pgc_exec(writer, "COMMIT", &err), PGC_OK);
	pthread_join(th, NULL);
	T_ASSERT_INT_EQ(g.rc, PGC_OK);
	T_ASSERT(g.done_ms >= commit_ms);
	T_ASSERT_INT_EQ(g.lease.token, 2);
	/* From now on the old token fails. */
	T_ASSERT_INT_EQ(pgc_exec(writer, "BEGIN", &err), PGC_OK);
	T_ASSERT_INT_EQ(pgc_fence_check(writer, "guarded", la.token, &lopts, &err), PGC_ESTALE);
	T_ASSERT_INT_EQ(pgc_exec(writer, "ROLLBACK", &err), PGC_OK);
	T_ASSERT_INT_EQ(pgc_lease_acquire(other, "guarded", "gamma", 5000, &lopts, &lb, &err), PGC_EBUSY);
	pgc_conn_close(holder);
	pgc_conn_close(writer);
	pgc_conn_close(other);
}

static void fence__next_shares_the_counter(void)
{
	pgc_conn *c = setup();
	pgc_error err;
	int64_t t = 0;
	pgc_lease l;
	T_ASSERT_INT_EQ(pgc_fence_next(c, "mixed", "locker", &lopts, &t, &err), PGC_OK);
	T_ASSERT_INT_EQ(t, 1);
	T_ASSERT_INT_EQ(pgc_fence_next(c, "mixed", "locker", &lopts, &t, &err), PGC_OK);
	T_ASSERT_INT_EQ(t, 2);
	pgc_lease_info info;
	T_ASSERT_INT_EQ(pgc_lease_get(c, "mixed", &lopts, &info, &err), PGC_OK);
	T_ASSERT_STR_EQ(info.kind, "lock");
	T_ASSERT(!info.held);
	/* A lock token does not block a lease, and the lease's token is greater. */
	T_ASSERT_INT_EQ(pgc_lease_acquire(c, "mixed", "leader", 5000, &lopts, &l, &err), PGC_OK);
	T_ASSERT_INT_EQ(l.token, 3);
	T_ASSERT_INT_EQ(pgc_fence_check(c, "mixed", 2, &lopts, &err), PGC_ESTALE);
	/* While the lease is held, no lock token is handed out. */
	T_ASSERT_INT_EQ(pgc_fence_next(c, "mixed", "locker", &lopts, &t, &err), PGC_EBUSY);
	T_ASSERT_STR_EQ(err.sqlstate, PGC_SQLSTATE_FENCE_LEASED);
	T_ASSERT_INT_EQ(pgc_lease_release(c, "mixed", l.token, &lopts, &err), PGC_OK);
	T_ASSERT_INT_EQ(pgc_fence_next(c, "mixed", "locker", &lopts, &t, &err), PGC_OK);
	T_ASSERT_INT_EQ(t, 4);
	T_ASSERT_INT_EQ(pgc_fence_check(c, "mixed", 3, &lopts, &err), PGC_ESTALE);
	T_ASSERT_INT_EQ(pgc_fence_check(c, "mixed", 4, &lopts, &err), PGC_OK);
	pgc_conn_close(c);
}

static void fence__tokens_cannot_be_lowered_or_deleted(void)
{
	pgc_conn *c = setup();
	pgc_error err;
	int64_t t;
	T_ASSERT_INT_EQ(pgc_fence_next(c, "kept", "x", &lopts, &t, &err), PGC_OK);
	T_ASSERT_INT_EQ(pgc_fence_next(c, "kept", "x", &lopts, &t, &err), PGC_OK);
	char sql[256];
	snprintf(sql, sizeof sql, "UPDATE \"%s\".leases SET token = 1 WHERE name = 'kept'", schema);
	T_ASSERT_INT_EQ(pgc_exec(c, sql, &err), PGC_ESQL);
	T_ASSERT_CONTAINS(err.message, "never go backwards");
	snprintf(sql, sizeof sql, "DELETE FROM \"%s\".leases", schema);
	T_ASSERT_INT_EQ(pgc_exec(c, sql, &err), PGC_ESQL);
	snprintf(sql, sizeof sql, "TRUNCATE \"%s\".leases", schema);
	T_ASSERT_INT_EQ(pgc_exec(c, sql, &err), PGC_ESQL);
	/* synchronous_commit off in the session does not make a grant lose its durability. */
	T_ASSERT_INT_EQ(pgc_exec(c, "SET synchronous_commit = off", &err), PGC_OK);
	pgc_lease l;
	T_ASSERT_INT_EQ(pgc_lease_acquire(c, "kept", "y", 1000, &lopts, &l, &err), PGC_OK);
	T_ASSERT_INT_EQ(l.token, 3);
	pgc_conn_close(c);
}

static void lease__bad_arguments(void)
{
	pgc_conn *c = setup();
	pgc_error err;
	pgc_lease l;
	char longname[PGC_LEASE_NAME_MAX + 2];
	memset(longname, 'n', sizeof longname - 1);
	longname[sizeof longname - 1] = '\0';
	T_ASSERT_INT_EQ(pgc_lease_acquire(NULL, "x", "h", 1000, &lopts, &l, &err), PGC_EUSAGE);
	T_ASSERT_INT_EQ(pgc_lease_acquire(c, "x", "h", 1000, &lopts, NULL, &err), PGC_EUSAGE);
	T_ASSERT_INT_EQ(pgc_lease_acquire(c, NULL, "h", 1000, &lopts, &l, &err), PGC_EUSAGE);
	T_ASSERT_INT_EQ(pgc_lease_acquire(c, "", "h", 1000, &lopts, &l, &err), PGC_EUSAGE);
	T_ASSERT_CONTAINS(err.message, "empty");
	T_ASSERT_INT_EQ(err.klass, PGC_CLASS_USAGE);
	T_ASSERT_INT_EQ(pgc_lease_acquire(c, longname, "h", 1000, &lopts, &l, &err), PGC_EUSAGE);
	T_ASSERT_INT_EQ(pgc_lease_acquire(c, "x", longname, 1000, &lopts, &l, &err), PGC_EUSAGE);
	T_ASSERT_INT_EQ(pgc_lease_acquire(c, "x", NULL, 1000, &lopts, &l, &err), PGC_EUSAGE);
	T_ASSERT_INT_EQ(pgc_lease_acquire(c, "x", "h", 0, &lopts, &l, &err), PGC_EUSAGE);
	T_ASSERT_INT_EQ(pgc_lease_acquire(c, "x", "h", -5, &lopts, &l, &err), PGC_EUSAGE);
	T_ASSERT_CONTAINS(err.message, "positive");
	pgc_lease_options bad = lopts;
	bad.timeout_ms = -1;
	T_ASSERT_INT_EQ(pgc_lease_acquire(c, "x", "h", 1000, &bad, &l, &err), PGC_EUSAGE);
	bad = lopts;
	bad.schema = "";
	T_ASSERT_INT_EQ(pgc_lease_acquire(c, "x", "h", 1000, &bad, &l, &err), PGC_EUSAGE);
	/* A grant inside the caller's transaction could be rolled back after the token was
	 * used: refused. */
	T_ASSERT_INT_EQ(pgc_exec(c, "BEGIN", &err), PGC_OK);
	T_ASSERT_INT_EQ(pgc_lease_acquire(c, "x", "h", 1000, &lopts, &l, &err), PGC_EUSAGE);
	T_ASSERT_CONTAINS(err.message, "outside a transaction");
	int64_t t;
	T_ASSERT_INT_EQ(pgc_fence_next(c, "x", "h", &lopts, &t, &err), PGC_EUSAGE);
	T_ASSERT_INT_EQ(pgc_exec(c, "ROLLBACK", &err), PGC_OK);
	T_ASSERT_INT_EQ(pgc_lease_renew(c, NULL, &lopts, &err), PGC_EUSAGE);
	memset(&l, 0, sizeof l);
	T_ASSERT_INT_EQ(pgc_lease_renew(c, &l, &lopts, &err), PGC_EUSAGE);
	T_ASSERT_INT_EQ(pgc_lease_release(c, "x", 0, &lopts, &err), PGC_EUSAGE);
	T_ASSERT_INT_EQ(pgc_fence_check(c, "x", -1, &lopts, &err), PGC_EUSAGE);
	T_ASSERT_INT_EQ(pgc_fence_next(c, "x", "h", &lopts, NULL, &err), PGC_EUSAGE);
	T_ASSERT_INT_EQ(pgc_lease_list(c, &lopts, NULL, NULL, &err), PGC_EUSAGE);
	T_ASSERT_INT_EQ(pgc_lease_campaign(c, "x", "h", 1000, -2, &lopts, &l, &err), PGC_EUSAGE);
	T_ASSERT_INT_EQ(pgc_lease_remaining_ms(NULL), 0);
	/* Nothing was created by any of it. */
	pgc_lease_info *all;
	size_t n = 9;
	T_ASSERT_INT_EQ(pgc_lease_list(c, &lopts, &all, &n, &err), PGC_OK);
	T_ASSERT_INT_EQ(n, 0);
	/* A schema without the tables: told to run init. */
	pgc_lease_options none = PGC_LEASE_OPTIONS_INIT;
	none.schema = "pgc_lease_no_such_schema";
	T_ASSERT_INT_EQ(pgc_lease_acquire(c, "x", "h", 1000, &none, &l, &err), PGC_ENOSCHEMA);
	T_ASSERT_CONTAINS(err.message, "pgcoord init");
	T_ASSERT_INT_EQ(pgc_fence_check(c, "x", 1, &none, &err), PGC_ENOSCHEMA);
	/* The session is still fine. */
	T_ASSERT_INT_EQ(pgc_exec(c, "SELECT 1", &err), PGC_OK);
	pgc_conn_close(c);
}

static void lease__unanswered_call_times_out(void)
{
	pgc_conn *c = setup(), *blocker = t_connect(NULL);
	pgc_error err;
	char sql[256];
	snprintf(sql, sizeof sql, "BEGIN; LOCK TABLE \"%s\".leases IN ACCESS EXCLUSIVE MODE", schema);
	T_ASSERT_INT_EQ(pgc_exec(blocker, sql, &err), PGC_OK);
	pgc_lease_options o = lopts;
	o.timeout_ms = 300;
	o.lock_timeout_ms = 30000;
	pgc_lease l;
	int64_t t0 = mono_ms();
	T_ASSERT_INT_EQ(pgc_lease_acquire(c, "slow", "h", 5000, &o, &l, &err), PGC_ETIMEDOUT);
	T_ASSERT(mono_ms() - t0 < 5000);
	T_ASSERT_CONTAINS(err.message, "outcome is unknown");
	/* The session was shut down: nothing can mistake a late answer for the next one. */
	T_ASSERT_INT_EQ(pgc_lease_get(c, "slow", &lopts, NULL, &err), PGC_EUSAGE);
	pgc_lease_info info;
	T_ASSERT_INT_EQ(pgc_lease_get(c, "slow", &lopts, &info, &err), PGC_ECONNLOST);
	T_ASSERT_INT_EQ(pgc_exec(blocker, "ROLLBACK", &err), PGC_OK);
	pgc_conn_close(c);
	pgc_conn_close(blocker);
}

struct campaign_arg {
	int rc;
	int64_t wait_ms;
	int interrupt_fd;
	pgc_lease lease;
	int64_t done_ms;
	pgc_error err;
};

static void *campaign_thread(void *p)
{
	struct campaign_arg *a = p;
	pgc_conn *c = t_connect(NULL);
	pgc_lease_options o = lopts;
	o.interrupt_fd = a->interrupt_fd;
	a->rc = pgc_lease_campaign(c, "camp", "follower", 10000, a->wait_ms, &o, &a->lease, &a->err);
	a->done_ms = mono_ms();
	pgc_conn_close(c);
	return NULL;
}

static void lease__campaign_wakes_on_release(void)
{
	pgc_conn *c = setup();
	pgc_error err;
	pgc_lease l;
	T_ASSERT_INT_EQ(pgc_lease_acquire(c, "camp", "leader", 10000, &lopts, &l, &err), PGC_OK);

	/* Not released: the campaign gives up after wait_ms. */
	struct campaign_arg a;
	memset(&a, 0, sizeof a);
	a.wait_ms = 300;
	a.interrupt_fd = -1;
	int64_t t0 = mono_ms();
	campaign_thread(&a);
	T_ASSERT_INT_EQ(a.rc, PGC_ETIMEDOUT);
	T_ASSERT(a.done_ms - t0 >= 300);

	/* The interrupt descriptor ends the wait. */
	int p[2];
	T_ASSERT(pipe(p) == 0);
	struct campaign_arg b;
	memset(&b, 0, sizeof b);
	b.wait_ms = 20000;
	b.interrupt_fd = p[0];
	pthread_t th;
	pthread_create(&th, NULL, campaign_thread, &b);
	sleep_ms(300);
	T_ASSERT(write(p[1], "x", 1) == 1);
	pthread_join(th, NULL);
	T_ASSERT_INT_EQ(b.rc, PGC_EINTR);
	close(p[0]);
	close(p[1]);

	/* Released: the follower has it long before the TTL (10 s) or its poll (3.3 s). */
	struct campaign_arg f;
	memset(&f, 0, sizeof f);
	f.wait_ms = 20000;
	f.interrupt_fd = -1;
	pthread_create(&th, NULL, campaign_thread, &f);
	sleep_ms(500);
	T_ASSERT_INT_EQ(f.done_ms, 0);
	int64_t released = mono_ms();
	T_ASSERT_INT_EQ(pgc_lease_release(c, "camp", l.token, &lopts, &err), PGC_OK);
	pthread_join(th, NULL);
	T_ASSERT_INT_EQ(f.rc, PGC_OK);
	T_ASSERT_INT_EQ(f.lease.token, l.token + 1);
	T_ASSERT(f.done_ms - released < 2500);
	/* The campaign stopped listening. */
	PGresult *r = PQexec(pgc_conn_pg(c), "SELECT count(*) FROM pg_listening_channels()");
	T_ASSERT_STR_EQ(PQgetvalue(r, 0, 0), "0");
	PQclear(r);
	pgc_conn_close(c);
}

static void lease__quoted_schema_name(void)
{
	pgc_conn *c = t_connect(NULL);
	const char *odd = "pgc lease \"odd\"";
	pgc_error err;
	T_ASSERT_INT_EQ(pgc_exec(c, "DROP SCHEMA IF EXISTS \"pgc lease \"\"odd\"\"\" CASCADE", &err), PGC_OK);
	T_ASSERT_INT_EQ(pgc_schema_init(c, odd, NULL, NULL, &err), PGC_OK);
	pgc_lease_options o = PGC_LEASE_OPTIONS_INIT;
	o.schema = odd;
	pgc_lease l;
	T_ASSERT_INT_EQ(pgc_lease_acquire(c, "q'uote\"d", "h", 1000, &o, &l, &err), PGC_OK);
	T_ASSERT_INT_EQ(pgc_fence_check(c, "q'uote\"d", l.token, &o, &err), PGC_OK);
	T_ASSERT_INT_EQ(pgc_lease_release(c, "q'uote\"d", l.token, &o, &err), PGC_OK);
	T_ASSERT_INT_EQ(pgc_exec(c, "DROP SCHEMA \"pgc lease \"\"odd\"\"\" CASCADE", &err), PGC_OK);
	pgc_conn_close(c);
}

int main(int argc, char **argv)
{
	static const t_case cases[] = {
		{ "lease__acquire_renew_release", lease__acquire_renew_release },
		{ "lease__expiry_by_database_clock", lease__expiry_by_database_clock },
		{ "lease__concurrent_tokens_unique_and_increasing", lease__concurrent_tokens_unique_and_increasing },
		{ "fence__check_reports_stale_with_sqlstate", fence__check_reports_stale_with_sqlstate },
		{ "fence__grant_waits_for_checked_transaction", fence__grant_waits_for_checked_transaction },
		{ "fence__next_shares_the_counter", fence__next_shares_the_counter },
		{ "fence__tokens_cannot_be_lowered_or_deleted", fence__tokens_cannot_be_lowered_or_deleted },
		{ "lease__bad_arguments", lease__bad_arguments },
		{ "lease__unanswered_call_times_out", lease__unanswered_call_times_out },
		{ "lease__campaign_wakes_on_release", lease__campaign_wakes_on_release },
		{ "lease__quoted_schema_name", lease__quoted_schema_name },
		{ NULL, NULL },
	};
	return t_main(argc, argv, cases);
}

/* test_lock.c - session and transaction advisory locks against a real server, with real
 * concurrent sessions (threads, one connection each) and real faults (pg_terminate_backend) */
#include <libpq-fe.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "locks/locks_int.h"
#include "../t.h"

/* This process's own key range, so that tests can run in parallel on one server. */
static int64_t K(int n)
{
	return (INT64_C(0x6C6B) << 40) | ((int64_t)getpid() << 8) | n;
}

static pgc_key KEY(int n)
{
	return pgc_key_int64(K(n));
}

/* pg_locks rows for key: all, granted only, or of one backend (pid > 0). */
static int lock_rows(pgc_conn *obs, const pgc_key *key, int pid, int granted_only)
{
	uint32_t c, o;
	int s;
	T_ASSERT_INT_EQ(pgc_key_to_pg_locks(key, &c, &o, &s), PGC_OK);
	char cs[16], os[16], ss[4], ps[16], gs[4];
	snprintf(cs, sizeof cs, "%u", c);
	snprintf(os, sizeof os, "%u", o);
	snprintf(ss, sizeof ss, "%d", s);
	snprintf(ps, sizeof ps, "%d", pid);
	snprintf(gs, sizeof gs, "%d", granted_only);
	const char *p[5] = { cs, os, ss, ps, gs };
	int rc;
	pgc_error err;
	PGresult *r = pgc__exec(obs,
	        "SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND classid = $1::oid"
	        " AND objid = $2::oid AND objsubid = $3::int2 AND ($4::int = 0 OR pid = $4::int)"
	        " AND ($5::int = 0 OR granted)", 5, p, &rc, &err);
	if (r == NULL)
		T_FAIL("pg_locks: %s", err.message);
	int n = atoi(PQgetvalue(r, 0, 0));
	PQclear(r);
	return n;
}

static PGresult *raw(pgc_conn *c, const char *sql)
{
	PGresult *r = PQexec(pgc_conn_pg(c), sql);
	return r;
}

static const char *raw1(pgc_conn *c, const char *sql, char *buf, size_t n)
{
	PGresult *r = raw(c, sql);
	if (PQresultStatus(r) != PGRES_TUPLES_OK)
		T_FAIL("%s: %s", sql, PQresultErrorMessage(r));
	snprintf(buf, n, "%s", PQgetvalue(r, 0, 0));
	PQclear(r);
	return buf;
}

static void terminate(pgc_conn *killer, int pid)
{
	char p[16];
	snprintf(p, sizeof p, "%d", pid);
	const char *v[1] = { p };
	int rc;
	pgc_error err;
	PGresult *r = pgc__exec(killer, "SELECT pg_terminate_backend($1::int, 5000)", 1, v, &rc, &err);
	if (r == NULL)
		T_FAIL("terminate: %s", err.message);
	T_ASSERT_STR_EQ(PQgetvalue(r, 0, 0), "t");
	PQclear(r);
}

/* ---- the five experiments of the Go lab, against the API -------------------------------- */

static pthread_barrier_t barrier;
static int singleton_ran;
static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;

static void *singleton_instance(void *arg)
{
	(void)arg;
	pgc_conn *c = t_connect("pgcoord/test-singleton");
	pgc_key k = KEY(1);
	pgc_lock *l = NULL;
	pgc_error err;
	pthread_barrier_wait(&barrier);
	int rc = pgc_lock_acquire(c, &k, PGC_LOCK_TRY, 0, &l, &err);
	/* Everyone has tried before the winner lets go. */
	pthread_barrier_wait(&barrier);
	if (rc == PGC_OK) {
		pthread_mutex_lock(&mu);
		singleton_ran++;
		pthread_mutex_unlock(&mu);
		sleep_ms(150);
		T_ASSERT_INT_EQ(pgc_lock_release(l, &err), PGC_OK);
	} else {
		T_ASSERT_INT_EQ(rc, PGC_EBUSY);
		T_ASSERT(l == NULL);
		T_ASSERT_CONTAINS(err.message, "held by another session");
	}
	pgc_conn_close(c);
	return NULL;
}

/* 1. Five instances try a singleton job; one runs it. */
static void lock__seed_singleton(void)
{
	pthread_t th[5];
	pthread_barrier_init(&barrier, NULL, 5);
	for (int i = 0; i < 5; i++)
		pthread_create(&th[i], NULL, singleton_instance, NULL);
	for (int i = 0; i < 5; i++)
		pthread_join(th[i], NULL);
	T_ASSERT_INT_EQ(singleton_ran, 1);
}

static void quiet(void *arg, const char *msg)
{
	(void)arg;
	(void)msg;
}

/* 2. The pool trap. With raw libpq the unlock from another session returns a false nobody
 * has to read and the lock stays held; through the API a release can only go to the holding
 * session, and a release after someone unlocked behind its back is PGC_ENOTHELD. */
static void lock__seed_pool_trap(void)
{
	pgc_conn *a = t_connect(NULL), *b = t_connect(NULL), *obs = t_connect(NULL);
	pgc_key k = KEY(2);
	pgc_lock *l;
	pgc_error err;
	T_ASSERT_INT_EQ(pgc_lock_acquire(a, &k, PGC_LOCK_TRY, 0, &l, &err), PGC_OK);
	T_ASSERT(pgc_lock_conn(l) == a);
	char sql[128], buf[16];
	snprintf(sql, sizeof sql, "SELECT pg_advisory_unlock(%lld)", (long long)K(2));
	/* The trap, still possible with raw libpq on another session. */
	PQsetNoticeProcessor(pgc_conn_pg(b), quiet, NULL);
	T_ASSERT_STR_EQ(raw1(b, sql, buf, sizeof buf), "f");
	T_ASSERT_INT_EQ(lock_rows(obs, &k, 0, 1), 1);
	/* The raw unlock on the holder's own session works behind the API's back... */
	T_ASSERT_STR_EQ(raw1(a, sql, buf, sizeof buf), "t");
	T_ASSERT_INT_EQ(lock_rows(obs, &k, 0, 0), 0);
	/* ...and the API says so instead of succeeding silently. */
	T_ASSERT_INT_EQ(pgc_lock_release(l, &err), PGC_ENOTHELD);
	T_ASSERT_CONTAINS(err.message, "does not hold exclusive lock");
	T_ASSERT_CONTAINS(err.detail, "lock");
	T_ASSERT_INT_EQ(pgc_conn_lock_count(a), 0);
	pgc_conn_close(a);
	pgc_conn_close(b);
	pgc_conn_close(obs);
}

/* 3. A transaction lock: held in the transaction, refused to others, gone after rollback;
 * refused outright in autocommit, where the server would drop it at once. */
static void lock__seed_xact(void)
{
	pgc_conn *a = t_connect(NULL), *b = t_connect(NULL);
	pgc_key k = KEY(3);
	pgc_error err;
	T_ASSERT_INT_EQ(pgc_xact_lock(a, &k, PGC_LOCK_TRY, 0, &err), PGC_EUSAGE);
	T_ASSERT_CONTAINS(err.message, "needs an open transaction");
	T_ASSERT_INT_EQ(pgc_exec(a, "BEGIN", &err), PGC_OK);
	T_ASSERT_INT_EQ(pgc_xact_lock(a, &k, PGC_LOCK_TRY, 0, &err), PGC_OK);
	T_ASSERT_INT_EQ(pgc_exec(b, "BEGIN", &err), PGC_OK);
	T_ASSERT_INT_EQ(pgc_xact_lock(b, &k, PGC_LOCK_TRY, 0, &err), PGC_EBUSY);
	/* A waiting one times out and leaves b's transaction usable. */
	T_ASSERT_INT_EQ(pgc_xact_lock(b, &k, 0, 100, &err), PGC_ETIMEDOUT);
	T_ASSERT_INT_EQ(PQtransactionStatus(pgc_conn_pg(b)), PQTRANS_INTRANS);
	T_ASSERT_INT_EQ(pgc_exec(a, "ROLLBACK", &err), PGC_OK);
	T_ASSERT_INT_EQ(pgc_xact_lock(b, &k, 0, 5000, &err), PGC_OK);
	T_ASSERT_INT_EQ(pgc_exec(b, "COMMIT", &err), PGC_OK);
	/* Nothing is left after commit, and the lock was never on the session table. */
	T_ASSERT_INT_EQ(lock_rows(a, &k, 0, 0), 0);
	T_ASSERT_INT_EQ(pgc_conn_lock_count(b), 0);
	pgc_conn_close(a);
	pgc_conn_close(b);
}

/* 4. Re-entrant counting: two acquisitions need two releases, and the count is visible. */
static void lock__seed_reentrant(void)
{
	pgc_conn *c = t_connect(NULL), *obs = t_connect(NULL);
	pgc_key k = KEY(4);
	pgc_lock *l1, *l2;
	pgc_error err;
	T_ASSERT_INT_EQ(pgc_lock_acquire(c, &k, 0, 1000, &l1, &err), PGC_OK);
	T_ASSERT_INT_EQ(pgc_lock_acquire(c, &k, 0, 1000, &l2, &err), PGC_OK);
	T_ASSERT(l1 != l2);
	pgc_held_lock *held;
	size_t n;
	T_ASSERT_INT_EQ(pgc_conn_locks(c, &held, &n, &err), PGC_OK);
	T_ASSERT_INT_EQ(n, 1);
	T_ASSERT_INT_EQ(held[0].count, 2);
	T_ASSERT(pgc_key_equal(&held[0].key, &k));
	T_ASSERT(!held[0].shared);
	pgc_free(held);
	T_ASSERT_INT_EQ(pgc_lock_release(l1, &err), PGC_OK);
	T_ASSERT_INT_EQ(lock_rows(obs, &k, 0, 1), 1); /* still held */
	T_ASSERT_INT_EQ(pgc_conn_lock_count(c), 1);
	T_ASSERT_INT_EQ(pgc_lock_release(l2, &err), PGC_OK);
	T_ASSERT_INT_EQ(lock_rows(obs, &k, 0, 0), 0);
	T_ASSERT_INT_EQ(pgc_conn_locks(c, &held, &n, &err), PGC_OK);
	T_ASSERT_INT_EQ(n, 0);
	T_ASSERT(held == NULL);
	pgc_conn_close(c);
	pgc_conn_close(obs);
}

/* 5. Session end releases everything, and closing says what it released. */
static void lock__seed_session_end(void)
{
	pgc_conn *c = t_connect(NULL), *obs = t_connect(NULL);
	pgc_key k1 = KEY(5), k2 = pgc_key_pair((int32_t)getpid(), 5);
	pgc_lock *l;
	pgc_error err;
	T_ASSERT_INT_EQ(pgc_lock_acquire(c, &k1, 0, 1000, &l, &err), PGC_OK);
	T_ASSERT_INT_EQ(pgc_lock_acquire(c, &k1, 0, 1000, &l, &err), PGC_OK);
	T_ASSERT_INT_EQ(pgc_lock_acquire(c, &k2, PGC_LOCK_SHARED, 1000, &l, &err), PGC_OK);
	T_ASSERT_INT_EQ(pgc_conn_lock_count(c), 3);
	T_ASSERT_INT_EQ(lock_rows(obs, &k1, 0, 1) + lock_rows(obs, &k2, 0, 1), 2);
	pgc_held_lock *rel;
	size_t n;
	T_ASSERT_INT_EQ(pgc_conn_close_locks(c, &rel, &n, &err), PGC_OK);
	T_ASSERT_INT_EQ(n, 2);
	T_ASSERT(pgc_key_equal(&rel[0].key, &k1));
	T_ASSERT_INT_EQ(rel[0].count, 2);
	T_ASSERT(pgc_key_equal(&rel[1].key, &k2));
	T_ASSERT(rel[1].shared);
	pgc_free(rel);
	/* Released before the connection went away: nobody has to wait for the backend to exit. */
	T_ASSERT_INT_EQ(lock_rows(obs, &k1, 0, 0) + lock_rows(obs, &k2, 0, 0), 0);
	/* And plain pgc_conn_close releases too. */
	c = t_connect(NULL);
	T_ASSERT_INT_EQ(pgc_lock_acquire(c, &k1, 0, 1000, &l, &err), PGC_OK);
	pgc_conn_close(c);
	T_ASSERT_INT_EQ(lock_rows(obs, &k1, 0, 0), 0);
	pgc_conn_close(obs);
}

/* ---- modes, key spaces, busy -------------------------------------------------------------- */

static void lock__modes_and_key_spaces(void)
{
	pgc_conn *a = t_connect(NULL), *b = t_connect(NULL), *c = t_connect(NULL);
	pgc_key k = KEY(6);
	pgc_lock *la, *lb, *lc;
	pgc_error err;
	T_ASSERT_INT_EQ(pgc_lock_acquire(a, &k, PGC_LOCK_TRY, 0, &la, &err), PGC_OK);
	T_ASSERT_INT_EQ(pgc_lock_acquire(b, &k, PGC_LOCK_TRY, 0, &lb, &err), PGC_EBUSY);
	T_ASSERT_INT_EQ(pgc_lock_acquire(b, &k, PGC_LOCK_SHARED | PGC_LOCK_TRY, 0, &lb, &err), PGC_EBUSY);
	/* timeout 0 means try once */
	T_ASSERT_INT_EQ(pgc_lock_acquire(b, &k, 0, 0, &lb, &err), PGC_EBUSY);
	/* The pair with the same pg_locks halves is another lock: separate key spaces. */
	uint32_t hi, lo;
	int sub;
	T_ASSERT_INT_EQ(pgc_key_to_pg_locks(&k, &hi, &lo, &sub), PGC_OK);
	pgc_key p = pgc_key_pair((int32_t)hi, (int32_t)lo);
	T_ASSERT_INT_EQ(pgc_lock_acquire(b, &p, PGC_LOCK_TRY, 0, &lb, &err), PGC_OK);
	T_ASSERT_INT_EQ(pgc_lock_release(lb, &err), PGC_OK);
	T_ASSERT_INT_EQ(pgc_lock_release(la, &err), PGC_OK);
	/* Shared holders coexist; an exclusive one waits for all of them. */
	T_ASSERT_INT_EQ(pgc_lock_acquire(a, &k, PGC_LOCK_SHARED | PGC_LOCK_TRY, 0, &la, &err), PGC_OK);
	T_ASSERT(pgc_lock_shared(la));
	T_ASSERT_INT_EQ(pgc_lock_acquire(b, &k, PGC_LOCK_SHARED, 1000, &lb, &err), PGC_OK);
	T_ASSERT_INT_EQ(pgc_lock_acquire(c, &k, PGC_LOCK_TRY, 0, &lc, &err), PGC_EBUSY);
	T_ASSERT_INT_EQ(pgc_lock_acquire(c, &k, 0, 100, &lc, &err), PGC_ETIMEDOUT);
	T_ASSERT_INT_EQ(pgc_lock_release(la, &err), PGC_OK);
	T_ASSERT_INT_EQ(pgc_lock_acquire(c, &k, 0, 100, &lc, &err), PGC_ETIMEDOUT);
	T_ASSERT_INT_EQ(pgc_lock_release(lb, &err), PGC_OK);
	T_ASSERT_INT_EQ(pgc_lock_acquire(c, &k, 0, 1000, &lc, &err), PGC_OK);
	T_ASSERT_INT_EQ(pgc_lock_release(lc, &err), PGC_OK);
	pgc_conn_close(a);
	pgc_conn_close(b);
	pgc_conn_close(c);
}

/* ---- deadlines ---------------------------------------------------------------------------- */

static atomic_int edge_stop; /* set by the main thread, read by the holder */

static void *edge_holder(void *arg)
{
	pgc_conn *h = arg;
	pgc_key k = KEY(7);
	unsigned seed = (unsigned)getpid();
	while (!edge_stop) {
		pgc_lock *l;
		pgc_error err;
		if (pgc_lock_acquire(h, &k, 0, 10000, &l, &err) != PGC_OK)
			T_FAIL("holder acquire: %s", err.message);
		/* Hold for about as long as the waiter is prepared to wait. */
		sleep_ms(2 + (int)(rand_r(&seed) % 5));
		if (pgc_lock_release(l, &err) != PGC_OK)
			T_FAIL("holder release: %s", err.message);
		if (rand_r(&seed) % 3 == 0)
			sleep_ms(1);
	}
	return NULL;
}

/* Hundreds of waits that end right at the edge while another session releases and takes the
 * lock again: every PGC_ETIMEDOUT holds nothing and has no request queued; every success
 * holds the lock, by pg_locks. */
static void lock__timeout_edge(void)
{
	pgc_conn *h = t_connect(NULL), *w = t_connect(NULL), *obs = t_connect(NULL);
	pgc_key k = KEY(7);
	pthread_t th;
	pthread_create(&th, NULL, edge_holder, h);
	int wpid = pgc_conn_backend_pid(w);
	int timeouts = 0, wins = 0;
	for (int i = 0; i < 2000 && timeouts < 300; i++) {
		pgc_lock *l = NULL;
		pgc_error err;
		int rc = pgc_lock_acquire(w, &k, 0, 1 + i % 4, &l, &err);
		if (rc == PGC_OK) {
			wins++;
			T_ASSERT_INT_EQ(lock_rows(obs, &k, wpid, 1), 1);
			T_ASSERT_INT_EQ(pgc_lock_release(l, &err), PGC_OK);
		} else {
			if (rc != PGC_ETIMEDOUT)
				T_FAIL("iteration %d: %d %s", i, rc, err.message);
			T_ASSERT(l == NULL);
			timeouts++;
			/* Neither granted nor waiting. */
			T_ASSERT_INT_EQ(lock_rows(obs, &k, wpid, 0), 0);
		}
		T_ASSERT_INT_EQ(pgc_conn_lock_count(w), 0);
	}
	edge_stop = 1;
	pthread_join(th, NULL);
	/* The server grants the lock in the same instant as lock_timeout fires often enough here
	 * (tens of times per run) that the pg_locks check is exercised, not only written. */
	fprintf(stderr, "timeouts %d, acquired %d (of which granted as the timeout fired: %lu)\n", timeouts,
	        wins, pgc__lock_race_granted);
	T_ASSERT(timeouts >= 100);
	char buf[32];
	T_ASSERT_STR_EQ(raw1(w, "SHOW lock_timeout", buf, sizeof buf), "0");
	pgc_conn_close(h);
	pgc_conn_close(w);
	pgc_conn_close(obs);
}

static void lock__timeout_keeps_transaction_and_settings(void)
{
	pgc_conn *h = t_connect(NULL), *w = t_connect(NULL), *obs = t_connect(NULL);
	pgc_key k = KEY(8);
	pgc_lock *hl, *l;
	pgc_error err;
	char buf[32];
	T_ASSERT_INT_EQ(pgc_lock_acquire(h, &k, 0, 1000, &hl, &err), PGC_OK);
	T_ASSERT_INT_EQ(pgc_exec(w, "SET lock_timeout = '7s'", &err), PGC_OK);
	/* Autocommit: times out after about the deadline; the caller's setting stays. */
	int64_t t0 = pgc__now_ms();
	T_ASSERT_INT_EQ(pgc_lock_acquire(w, &k, 0, 300, &l, &err), PGC_ETIMEDOUT);
	int64_t el = pgc__now_ms() - t0;
	T_ASSERT(el >= 280 && el < 20000);
	T_ASSERT_INT_EQ(err.code, PGC_ETIMEDOUT);
	T_ASSERT_INT_EQ(err.klass, PGC_CLASS_RETRY_LATER);
	T_ASSERT_CONTAINS(err.message, "timed out after 300 ms");
	T_ASSERT_STR_EQ(raw1(w, "SHOW lock_timeout", buf, sizeof buf), "7s");
	/* In a transaction block: the transaction survives, its settings too. */
	T_ASSERT_INT_EQ(pgc_exec(w, "BEGIN; SET LOCAL lock_timeout = '9s'; CREATE TEMP TABLE t (x int)", &err), PGC_OK);
	T_ASSERT_INT_EQ(pgc_lock_acquire(w, &k, 0, 100, &l, &err), PGC_ETIMEDOUT);
	T_ASSERT_INT_EQ(PQtransactionStatus(pgc_conn_pg(w)), PQTRANS_INTRANS);
	T_ASSERT_STR_EQ(raw1(w, "SHOW lock_timeout", buf, sizeof buf), "9s");
	T_ASSERT_INT_EQ(pgc_exec(w, "INSERT INTO t VALUES (1)", &err), PGC_OK);
	T_ASSERT_INT_EQ(lock_rows(obs, &k, pgc_conn_backend_pid(w), 0), 0);
	/* A session lock taken in a transaction block outlives its rollback. */
	T_ASSERT_INT_EQ(pgc_lock_release(hl, &err), PGC_OK);
	T_ASSERT_INT_EQ(pgc_lock_acquire(w, &k, 0, 1000, &l, &err), PGC_OK);
	T_ASSERT_STR_EQ(raw1(w, "SHOW lock_timeout", buf, sizeof buf), "9s");
	T_ASSERT_INT_EQ(pgc_exec(w, "ROLLBACK", &err), PGC_OK);
	T_ASSERT_STR_EQ(raw1(w, "SHOW lock_timeout", buf, sizeof buf), "7s");
	T_ASSERT_INT_EQ(lock_rows(obs, &k, pgc_conn_backend_pid(w), 1), 1);
	T_ASSERT_INT_EQ(pgc_lock_release(l, &err), PGC_OK);
	pgc_conn_close(h);
	pgc_conn_close(w);
	pgc_conn_close(obs);
}

static void *release_later(void *arg)
{
	pgc_lock *l = arg;
	pgc_error err;
	sleep_ms(300);
	T_ASSERT_INT_EQ(pgc_lock_release(l, &err), PGC_OK);
	return NULL;
}

/* A waiter gets the lock when the holder lets go, with a deadline and without one. */
static void lock__waiter_gets_lock(void)
{
	pgc_conn *h = t_connect(NULL), *w = t_connect(NULL);
	pgc_key k = KEY(9);
	pgc_lock *hl, *l;
	pgc_error err;
	for (int round = 0; round < 2; round++) {
		T_ASSERT_INT_EQ(pgc_lock_acquire(h, &k, 0, 1000, &hl, &err), PGC_OK);
		pthread_t th;
		pthread_create(&th, NULL, release_later, hl);
		int64_t t0 = pgc__now_ms();
		T_ASSERT_INT_EQ(pgc_lock_acquire(w, &k, 0, round == 0 ? 30000 : PGC_WAIT_FOREVER, &l, &err), PGC_OK);
		T_ASSERT(pgc__now_ms() - t0 >= 250);
		pthread_join(th, NULL);
		T_ASSERT_INT_EQ(pgc_lock_release(l, &err), PGC_OK);
	}
	pgc_conn_close(h);
	pgc_conn_close(w);
}

static int cancel_pipe[2];

static void *poke_later(void *arg)
{
	(void)arg;
	sleep_ms(300);
	ssize_t n = write(cancel_pipe[1], "x", 1);
	(void)n;
	return NULL;
}

typedef struct dl_arg {
	pgc_conn *conn;
	pgc_key want;
	int rc;
	pgc_error err;
	pgc_lock *got;
	atomic_int done; /* rc, err and got are set */
} dl_arg;

static void *deadlock_side(void *arg)
{
	dl_arg *a = arg;
	a->rc = pgc_lock_acquire(a->conn, &a->want, 0, 30000, &a->got, &a->err);
	atomic_store(&a->done, 1);
	return NULL;
}

/* Two sessions each hold one key and wait for the other's: the server's deadlock detector
 * aborts one wait with 40P01 (class retry-tx); that side holds nothing new, the other gets its
 * lock once the victim lets go of its own. */
static void lock__deadlock_detected(void)
{
	pgc_conn *a = t_connect(NULL), *b = t_connect(NULL), *obs = t_connect(NULL);
	pgc_key k1 = KEY(18), k2 = KEY(19);
	pgc_lock *la, *lb;
	pgc_error err;
	T_ASSERT_INT_EQ(pgc_lock_acquire(a, &k1, 0, 1000, &la, &err), PGC_OK);
	T_ASSERT_INT_EQ(pgc_lock_acquire(b, &k2, 0, 1000, &lb, &err), PGC_OK);
	dl_arg da = { a, k2, 0, PGC_ERROR_INIT, NULL, 0 }, db = { b, k1, 0, PGC_ERROR_INIT, NULL, 0 };
	pthread_t ta, tb;
	pthread_create(&ta, NULL, deadlock_side, &da);
	pthread_create(&tb, NULL, deadlock_side, &db);
	/* Whoever loses gives back its own key, so the winner can finish. */
	for (;;) {
		sleep_ms(20);
		if (atomic_load(&da.done) || atomic_load(&db.done))
			break;
	}
	/* The winner waits for the loser's key: the first side done is the loser. */
	dl_arg *loser = atomic_load(&da.done) ? &da : &db, *winner = loser == &da ? &db : &da;
	pthread_join(loser == &da ? ta : tb, NULL);
	T_ASSERT_INT_EQ(loser->rc, PGC_ESQL);
	T_ASSERT_STR_EQ(loser->err.sqlstate, "40P01");
	T_ASSERT_INT_EQ(loser->err.klass, PGC_CLASS_RETRY_TX);
	T_ASSERT_CONTAINS(loser->err.message, "waiting for lock");
	T_ASSERT(loser->got == NULL);
	T_ASSERT_INT_EQ(lock_rows(obs, &loser->want, pgc_conn_backend_pid(loser->conn), 0), 0);
	T_ASSERT_INT_EQ(pgc_conn_lock_count(loser->conn), 1);
	T_ASSERT_INT_EQ(pgc_lock_release(loser == &da ? la : lb, &err), PGC_OK);
	pthread_join(loser == &da ? tb : ta, NULL);
	T_ASSERT_INT_EQ(winner->rc, PGC_OK);
	T_ASSERT_INT_EQ(pgc_lock_release(winner->got, &err), PGC_OK);
	T_ASSERT_INT_EQ(pgc_lock_release(winner == &da ? la : lb, &err), PGC_OK);
	pgc_conn_close(a);
	pgc_conn_close(b);
	pgc_conn_close(obs);
}

/* A wait abandoned through cancel_fd: PGC_EINTR, nothing held or queued, session usable. */
static void lock__cancel_fd(void)
{
	pgc_conn *h = t_connect(NULL), *w = t_connect(NULL), *obs = t_connect(NULL);
	pgc_key k = KEY(10);
	pgc_lock *hl, *l;
	pgc_error err;
	T_ASSERT_INT_EQ(pgc_lock_acquire(h, &k, 0, 1000, &hl, &err), PGC_OK);
	T_ASSERT_INT_EQ(pipe(cancel_pipe), 0);
	pthread_t th;
	pthread_create(&th, NULL, poke_later, NULL);
	pgc_lock_options o = PGC_LOCK_OPTIONS_INIT;
	o.timeout_ms = PGC_WAIT_FOREVER;
	o.cancel_fd = cancel_pipe[0];
	T_ASSERT_INT_EQ(pgc_lock_acquire_ex(w, &k, &o, &l, &err), PGC_EINTR);
	T_ASSERT(l == NULL);
	pthread_join(th, NULL);
	T_ASSERT_INT_EQ(lock_rows(obs, &k, pgc_conn_backend_pid(w), 0), 0);
	T_ASSERT_INT_EQ(pgc_exec(w, "SELECT 1", &err), PGC_OK);
	T_ASSERT_INT_EQ(pgc_lock_release(hl, &err), PGC_OK);
	pgc_conn_close(h);
	pgc_conn_close(w);
	pgc_conn_close(obs);
}

/* Releasing inside a failed transaction still releases (the transaction is rolled back). */
static void lock__release_in_failed_transaction(void)
{
	pgc_conn *c = t_connect(NULL), *obs = t_connect(NULL);
	pgc_key k = KEY(11);
	pgc_lock *l;
	pgc_error err;
	T_ASSERT_INT_EQ(pgc_lock_acquire(c, &k, 0, 1000, &l, &err), PGC_OK);
	T_ASSERT_INT_EQ(pgc_exec(c, "BEGIN", &err), PGC_OK);
	T_ASSERT_INT_EQ(pgc_exec(c, "SELECT 1/0", &err), PGC_ESQL);
	T_ASSERT_INT_EQ(PQtransactionStatus(pgc_conn_pg(c)), PQTRANS_INERROR);
	/* Taking a lock there is refused clearly. */
	pgc_lock *l2;
	T_ASSERT_INT_EQ(pgc_lock_acquire(c, &k, 0, 1000, &l2, &err), PGC_EUSAGE);
	T_ASSERT_CONTAINS(err.message, "aborted");
	T_ASSERT_INT_EQ(pgc_lock_release(l, &err), PGC_OK);
	T_ASSERT_INT_EQ(PQtransactionStatus(pgc_conn_pg(c)), PQTRANS_IDLE);
	T_ASSERT_INT_EQ(lock_rows(obs, &k, 0, 0), 0);
	pgc_conn_close(c);
	pgc_conn_close(obs);
}

/* ---- transaction locks on many keys ----------------------------------------------------- */

static void *many_worker(void *arg)
{
	int dir = (int)(intptr_t)arg;
	pgc_conn *c = t_connect(NULL);
	pgc_key keys[4];
	for (int i = 0; i < 4; i++)
		keys[i] = KEY(dir ? 20 + i : 23 - i); /* opposite orders */
	keys[3] = dir ? pgc_key_pair(1, (int32_t)getpid()) : keys[3];
	for (int i = 0; i < 150; i++) {
		pgc_error err;
		T_ASSERT_INT_EQ(pgc_exec(c, "BEGIN", &err), PGC_OK);
		int rc = pgc_xact_lock_many(c, keys, 4, 0, 20000, &err);
		if (rc != PGC_OK)
			T_FAIL("xact_lock_many: %s (%s)", err.message, err.sqlstate);
		T_ASSERT_INT_EQ(pgc_exec(c, "COMMIT", &err), PGC_OK);
	}
	pgc_conn_close(c);
	return NULL;
}

/* Two sessions locking the same keys given in opposite orders never deadlock; a busy key
 * leaves none of the others held. */
static void lock__xact_many(void)
{
	pthread_t a, b;
	pthread_create(&a, NULL, many_worker, (void *)0);
	pthread_create(&b, NULL, many_worker, (void *)1);
	pthread_join(a, NULL);
	pthread_join(b, NULL);

	pgc_conn *c = t_connect(NULL), *o = t_connect(NULL);
	pgc_error err;
	pgc_key keys[3] = { KEY(32), KEY(30), KEY(31) };
	T_ASSERT_INT_EQ(pgc_xact_lock_many(c, keys, 3, 0, 1000, &err), PGC_EUSAGE);
	T_ASSERT_INT_EQ(pgc_exec(o, "BEGIN", &err), PGC_OK);
	T_ASSERT_INT_EQ(pgc_xact_lock(o, &keys[0], 0, 1000, &err), PGC_OK);
	T_ASSERT_INT_EQ(pgc_exec(c, "BEGIN", &err), PGC_OK);
	T_ASSERT_INT_EQ(pgc_xact_lock(c, &keys[1], 0, 1000, &err), PGC_OK); /* the caller's own */
	T_ASSERT_INT_EQ(pgc_xact_lock_many(c, keys, 3, PGC_LOCK_TRY, 0, &err), PGC_EBUSY);
	int pid = pgc_conn_backend_pid(c);
	T_ASSERT_INT_EQ(lock_rows(o, &keys[2], pid, 0), 0);  /* taken by the call, given back */
	T_ASSERT_INT_EQ(lock_rows(o, &keys[1], pid, 1), 1);  /* the caller's, kept */
	T_ASSERT_INT_EQ(pgc_xact_lock_many(c, keys, 3, 0, 200, &err), PGC_ETIMEDOUT);
	T_ASSERT_INT_EQ(PQtransactionStatus(pgc_conn_pg(c)), PQTRANS_INTRANS);
	T_ASSERT_INT_EQ(lock_rows(o, &keys[2], pid, 0), 0);
	T_ASSERT_INT_EQ(pgc_exec(o, "COMMIT", &err), PGC_OK);
	T_ASSERT_INT_EQ(pgc_xact_lock_many(c, keys, 3, 0, 1000, &err), PGC_OK);
	T_ASSERT_INT_EQ(lock_rows(o, &keys[0], pid, 1) + lock_rows(o, &keys[2], pid, 1), 2);
	T_ASSERT_INT_EQ(pgc_exec(c, "COMMIT", &err), PGC_OK);
	T_ASSERT_INT_EQ(lock_rows(o, &keys[0], 0, 0), 0);
	pgc_conn_close(c);
	pgc_conn_close(o);
}

/* ---- lock loss ---------------------------------------------------------------------------- */

static int victim_pid;

static void *terminate_later(void *arg)
{
	(void)arg;
	pgc_conn *k = t_connect(NULL);
	sleep_ms(300);
	terminate(k, victim_pid);
	pgc_conn_close(k);
	return NULL;
}

/* pg_terminate_backend on the holder: the watch reports PGC_ELOCKLOST at once (the socket
 * becomes readable), says why, and the lock is free for others. */
static void lock__watch_terminated(void)
{
	pgc_conn *c = t_connect(NULL), *other = t_connect(NULL);
	pgc_key k = KEY(12);
	pgc_lock *l, *l2;
	pgc_error err;
	T_ASSERT_INT_EQ(pgc_lock_acquire(c, &k, 0, 1000, &l, &err), PGC_OK);
	T_ASSERT_INT_EQ(pgc_lock_watch(l, 200, NULL, &err), PGC_OK);
	victim_pid = pgc_conn_backend_pid(c);
	pthread_t th;
	pthread_create(&th, NULL, terminate_later, NULL);
	pgc_watch_options wo = PGC_WATCH_OPTIONS_INIT;
	wo.interval_ms = 60000; /* the socket alone must tell */
	int64_t t0 = pgc__now_ms();
	T_ASSERT_INT_EQ(pgc_lock_watch(l, 30000, &wo, &err), PGC_ELOCKLOST);
	T_ASSERT(pgc__now_ms() - t0 < 15000);
	pthread_join(th, NULL);
	T_ASSERT_CONTAINS(err.message, "lost");
	T_ASSERT_CONTAINS(err.message, "terminating connection");
	T_ASSERT_INT_EQ(pgc_conn_lock_count(c), 0);
	T_ASSERT_INT_EQ(pgc_conn_check(c, 1000, &err), PGC_ECONNLOST);
	T_ASSERT_INT_EQ(pgc_lock_release(l, &err), PGC_ELOCKLOST);
	T_ASSERT_INT_EQ(pgc_lock_acquire(other, &k, 0, 5000, &l2, &err), PGC_OK);
	T_ASSERT_INT_EQ(pgc_lock_release(l2, &err), PGC_OK);
	pgc_conn_close(c);
	pgc_conn_close(other);
}

/* pgc_conn_check: alive; then a terminated session holding locks is PGC_ELOCKLOST. */
static void lock__conn_check(void)
{
	pgc_conn *c = t_connect(NULL), *k = t_connect(NULL);
	pgc_key key = KEY(13);
	pgc_lock *l;
	pgc_error err;
	T_ASSERT_INT_EQ(pgc_conn_check(c, 0, &err), PGC_OK);
	T_ASSERT_INT_EQ(pgc_conn_check(c, 2000, &err), PGC_OK);
	T_ASSERT_INT_EQ(pgc_lock_acquire(c, &key, 0, 1000, &l, &err), PGC_OK);
	T_ASSERT(pgc_conn_socket(c) >= 0);
	terminate(k, pgc_conn_backend_pid(c));
	/* The FATAL message is on its way; a heartbeat finds it for sure. */
	int rc = pgc_conn_check(c, 2000, &err);
	T_ASSERT_INT_EQ(rc, PGC_ELOCKLOST);
	T_ASSERT_CONTAINS(err.message, "lock");
	T_ASSERT_INT_EQ(pgc_conn_socket(c), -1);
	T_ASSERT_INT_EQ(pgc_lock_release(l, &err), PGC_ELOCKLOST);
	pgc_conn_close(c);
	pgc_conn_close(k);
}

/* A backend that stops answering (SIGSTOP: the network-partition case, seen from the client):
 * the heartbeat's deadline declares the lock lost, and the session is dropped so that the server
 * frees the lock as soon as the backend runs again. */
static void lock__heartbeat_timeout(void)
{
	pgc_conn *c = t_connect(NULL), *obs = t_connect(NULL);
	pgc_key key = KEY(17);
	pgc_lock *l;
	pgc_error err;
	T_ASSERT_INT_EQ(pgc_lock_acquire(c, &key, 0, 1000, &l, &err), PGC_OK);
	int pid = pgc_conn_backend_pid(c);
	if (kill(pid, SIGSTOP) != 0) {
		fprintf(stderr, "skipped: cannot signal the server's backend %d (a remote server?)\n", pid);
		exit(T_SKIP);
	}
	int64_t t0 = pgc__now_ms();
	int rc = pgc_conn_check(c, 500, &err);
	int64_t el = pgc__now_ms() - t0;
	kill(pid, SIGCONT);
	T_ASSERT_INT_EQ(rc, PGC_ELOCKLOST);
	T_ASSERT_CONTAINS(err.message, "did not answer a heartbeat within 500 ms");
	T_ASSERT(el >= 450 && el < 10000);
	T_ASSERT_INT_EQ(pgc_lock_release(l, &err), PGC_ELOCKLOST);
	/* The backend, running again, finds its client gone and ends: the lock is free. */
	pgc_lock *l2;
	T_ASSERT_INT_EQ(pgc_lock_acquire(obs, &key, 0, 10000, &l2, &err), PGC_OK);
	T_ASSERT_INT_EQ(pgc_lock_release(l2, &err), PGC_OK);
	pgc_conn_close(c);
	pgc_conn_close(obs);
}

/* ---- registry ---------------------------------------------------------------------------- */

static void lock__registry_and_collision(void)
{
	pgc_conn *c = t_connect(NULL);
	pgc_error err;
	char schema[64], sql[512];
	snprintf(schema, sizeof schema, "pgc_locks_%d", (int)getpid());
	T_ASSERT_INT_EQ(pgc_schema_init(c, schema, NULL, NULL, &err), PGC_OK);
	char name[64], other[64];
	snprintf(name, sizeof name, "report-%d", (int)getpid());
	snprintf(other, sizeof other, "other-%d", (int)getpid());
	pgc_key k;
	T_ASSERT_INT_EQ(pgc_key_from_name(name, &k, &err), PGC_OK);
	pgc_lock_options o = PGC_LOCK_OPTIONS_INIT;
	o.schema = schema;
	pgc_lock *l;
	T_ASSERT_INT_EQ(pgc_lock_acquire_ex(c, &k, &o, &l, &err), PGC_OK);
	T_ASSERT_INT_EQ(pgc_lock_release(l, &err), PGC_OK);
	snprintf(sql, sizeof sql, "SELECT name FROM %s.lock_names WHERE key = %lld", schema, (long long)k.id);
	char buf[128];
	T_ASSERT_STR_EQ(raw1(c, sql, buf, sizeof buf), name);
	pgc_key lookup = pgc_key_int64(k.id);
	T_ASSERT_INT_EQ(pgc_key_lookup_name(c, schema, &lookup, &err), PGC_OK);
	T_ASSERT_STR_EQ(lookup.name, name);
	lookup = pgc_key_int64(k.id + 1);
	T_ASSERT_INT_EQ(pgc_key_lookup_name(c, schema, &lookup, &err), PGC_OK);
	T_ASSERT_STR_EQ(lookup.name, "");
	T_ASSERT_INT_EQ(pgc_key_lookup_name(c, "pgc_no_such_schema", &lookup, &err), PGC_OK);
	T_ASSERT_INT_EQ(pgc_key_lookup_name(NULL, schema, &lookup, &err), PGC_EUSAGE);
	/* Again: recorded once. */
	T_ASSERT_INT_EQ(pgc_lock_acquire_ex(c, &k, &o, &l, &err), PGC_OK);
	T_ASSERT_INT_EQ(pgc_lock_release(l, &err), PGC_OK);

	/* Another name forced onto the same key, by a crafted registry row. */
	pgc_key victim;
	T_ASSERT_INT_EQ(pgc_key_from_name(other, &victim, &err), PGC_OK);
	snprintf(sql, sizeof sql, "INSERT INTO %s.lock_names (key, name) VALUES (%lld, 'impostor-%d')", schema,
	         (long long)victim.id, (int)getpid());
	T_ASSERT_INT_EQ(pgc_exec(c, sql, &err), PGC_OK);
	pgc_conn *fresh = t_connect(NULL);
	T_ASSERT_INT_EQ(pgc_lock_acquire_ex(fresh, &victim, &o, &l, &err), PGC_ECOLLISION);
	T_ASSERT(l == NULL);
	T_ASSERT_CONTAINS(err.message, other);
	T_ASSERT_CONTAINS(err.message, "impostor-");
	T_ASSERT_INT_EQ(pgc_conn_lock_count(fresh), 0);
	T_ASSERT_INT_EQ(lock_rows(c, &victim, 0, 0), 0);
	/* In a transaction block too, and the transaction survives. */
	T_ASSERT_INT_EQ(pgc_exec(fresh, "BEGIN", &err), PGC_OK);
	T_ASSERT_INT_EQ(pgc_xact_lock(fresh, &victim, 0, 1000, &err), PGC_OK); /* default schema: none here */
	T_ASSERT_INT_EQ(pgc_lock_acquire_ex(fresh, &victim, &o, &l, &err), PGC_ECOLLISION);
	T_ASSERT_INT_EQ(PQtransactionStatus(pgc_conn_pg(fresh)), PQTRANS_INTRANS);
	T_ASSERT_INT_EQ(pgc_exec(fresh, "COMMIT", &err), PGC_OK);
	/* Opting out of the registry, and a schema that does not exist: named locks still work. */
	o.flags = PGC_LOCK_NO_REGISTRY;
	T_ASSERT_INT_EQ(pgc_lock_acquire_ex(fresh, &victim, &o, &l, &err), PGC_OK);
	T_ASSERT_INT_EQ(pgc_lock_release(l, &err), PGC_OK);
	o.flags = 0;
	o.schema = "pgc_no_such_schema";
	T_ASSERT_INT_EQ(pgc_lock_acquire_ex(fresh, &victim, &o, &l, &err), PGC_OK);
	T_ASSERT_INT_EQ(pgc_lock_release(l, &err), PGC_OK);
	pgc_conn_close(fresh);
	snprintf(sql, sizeof sql, "DROP SCHEMA %s CASCADE", schema);
	T_ASSERT_INT_EQ(pgc_exec(c, sql, &err), PGC_OK);
	pgc_conn_close(c);
}

/* ---- holders ------------------------------------------------------------------------------ */

static void *wait_for_key(void *arg)
{
	pgc_conn *w = arg;
	pgc_key k = KEY(14);
	pgc_lock *l;
	pgc_error err;
	T_ASSERT_INT_EQ(pgc_lock_acquire(w, &k, PGC_LOCK_SHARED, 30000, &l, &err), PGC_OK);
	T_ASSERT_INT_EQ(pgc_lock_release(l, &err), PGC_OK);
	return NULL;
}

static void lock__holders(void)
{
	pgc_conn *h = t_connect("pgc-test-holder"), *w = t_connect("pgc-test-waiter"), *obs = t_connect(NULL);
	pgc_key k = KEY(14);
	pgc_lock *l;
	pgc_error err;
	pgc_lock_holder *hs;
	size_t n;
	T_ASSERT_INT_EQ(pgc_lock_holders(obs, &k, &hs, &n, &err), PGC_OK);
	T_ASSERT_INT_EQ(n, 0);
	T_ASSERT_INT_EQ(pgc_lock_acquire(h, &k, 0, 1000, &l, &err), PGC_OK);
	pthread_t th;
	pthread_create(&th, NULL, wait_for_key, w);
	for (int i = 0; i < 200 && lock_rows(obs, &k, 0, 0) < 2; i++)
		sleep_ms(25);
	T_ASSERT_INT_EQ(pgc_lock_holders(obs, &k, &hs, &n, &err), PGC_OK);
	T_ASSERT_INT_EQ(n, 2);
	T_ASSERT_INT_EQ(hs[0].pid, pgc_conn_backend_pid(h));
	T_ASSERT(hs[0].granted);
	T_ASSERT(!hs[0].shared);
	T_ASSERT_STR_EQ(hs[0].application_name, "pgc-test-holder");
	T_ASSERT_STR_EQ(hs[0].state, "idle");
	T_ASSERT(hs[0].backend_start[0] != '\0');
	T_ASSERT(!hs[0].is_self);
	T_ASSERT_INT_EQ(hs[1].pid, pgc_conn_backend_pid(w));
	T_ASSERT(!hs[1].granted);
	T_ASSERT(hs[1].shared);
	T_ASSERT_STR_EQ(hs[1].application_name, "pgc-test-waiter");
	T_ASSERT(hs[1].wait_start[0] != '\0');
	pgc_free(hs);
	T_ASSERT_INT_EQ(pgc_lock_holders(h, &k, &hs, &n, &err), PGC_OK);
	T_ASSERT(hs[0].is_self);
	pgc_free(hs);
	T_ASSERT_INT_EQ(pgc_lock_release(l, &err), PGC_OK);
	pthread_join(th, NULL);
	pgc_conn_close(h);
	pgc_conn_close(w);
	pgc_conn_close(obs);
}

/* PGC_LOCK_RECORD: when the lock was taken is kept apart from the session's activity, for the
 * first acquisition of a stack, and goes with the last release; a row of a session that is
 * gone (an earlier session with the same pid, or a pid no longer seen) is never shown, and
 * the next recording deletes it. */
static void lock__record_acquired_at(void)
{
	pgc_conn *c = t_connect("pgc-test-recorder"), *obs = t_connect(NULL);
	pgc_error err;
	char schema[64], sql[512], buf[128], first[40];
	snprintf(schema, sizeof schema, "pgc_holds_%d", (int)getpid());
	T_ASSERT_INT_EQ(pgc_schema_init(obs, schema, NULL, NULL, &err), PGC_OK);
	pgc_key k = KEY(20);
	pgc_lock_options o = PGC_LOCK_OPTIONS_INIT;
	o.flags = PGC_LOCK_RECORD | PGC_LOCK_NO_REGISTRY;
	o.schema = schema;
	pgc_lock *l1, *l2;
	pgc_lock_holder *hs;
	size_t n;
	T_ASSERT_INT_EQ(pgc_lock_acquire_ex(c, &k, &o, &l1, &err), PGC_OK);
	T_ASSERT_INT_EQ(pgc_lock_holders_recorded(obs, &k, schema, &hs, &n, &err), PGC_OK);
	T_ASSERT_INT_EQ(n, 1);
	T_ASSERT(hs[0].acquired_at[0] != '\0');
	snprintf(first, sizeof first, "%s", hs[0].acquired_at);
	pgc_free(hs);
	/* Without the schema it is not known. */
	T_ASSERT_INT_EQ(pgc_lock_holders(obs, &k, &hs, &n, &err), PGC_OK);
	T_ASSERT_STR_EQ(hs[0].acquired_at, "");
	pgc_free(hs);
	/* Activity on the session (a heartbeat) and a stacked acquisition leave it as it was. */
	sleep_ms(20);
	T_ASSERT_INT_EQ(pgc_exec(c, "SELECT 1", &err), PGC_OK);
	T_ASSERT_INT_EQ(pgc_lock_acquire_ex(c, &k, &o, &l2, &err), PGC_OK);
	T_ASSERT_INT_EQ(pgc_lock_holders_recorded(obs, &k, schema, &hs, &n, &err), PGC_OK);
	T_ASSERT_INT_EQ(n, 1);
	T_ASSERT_STR_EQ(hs[0].acquired_at, first);
	T_ASSERT(strcmp(hs[0].state_change, first) > 0);
	pgc_free(hs);
	snprintf(sql, sizeof sql, "SELECT count(*) FROM %s.lock_holds", schema);
	T_ASSERT_INT_EQ(pgc_lock_release(l2, &err), PGC_OK);
	T_ASSERT_STR_EQ(raw1(obs, sql, buf, sizeof buf), "1");
	T_ASSERT_INT_EQ(pgc_lock_release(l1, &err), PGC_OK);
	T_ASSERT_STR_EQ(raw1(obs, sql, buf, sizeof buf), "0");
	/* Rows of sessions that are gone: this pid with an older backend_start, and a pid that
	 * does not exist. */
	uint32_t classid, objid;
	int sub;
	T_ASSERT_INT_EQ(pgc_key_to_pg_locks(&k, &classid, &objid, &sub), PGC_OK);
	snprintf(sql, sizeof sql,
	         "INSERT INTO %s.lock_holds SELECT pid, b, %u, %u, %d, '2000-01-01' FROM"
	         " (SELECT %d AS pid, backend_start - interval '1 hour' AS b FROM pg_stat_activity"
	         " WHERE pid = %d UNION ALL SELECT 2147483000, now()) x",
	         schema, classid, objid, sub, pgc_conn_backend_pid(c), pgc_conn_backend_pid(c));
	T_ASSERT_INT_EQ(pgc_exec(obs, sql, &err), PGC_OK);
	T_ASSERT_INT_EQ(pgc_lock_acquire_ex(c, &k, &o, &l1, &err), PGC_OK);
	T_ASSERT_INT_EQ(pgc_lock_holders_recorded(obs, &k, schema, &hs, &n, &err), PGC_OK);
	T_ASSERT_INT_EQ(n, 1);
	T_ASSERT(strncmp(hs[0].acquired_at, "2000", 4) != 0 && hs[0].acquired_at[0] != '\0');
	pgc_free(hs);
	snprintf(sql, sizeof sql, "SELECT count(*) FROM %s.lock_holds", schema);
	T_ASSERT_STR_EQ(raw1(obs, sql, buf, sizeof buf), "1");
	T_ASSERT_INT_EQ(pgc_lock_release(l1, &err), PGC_OK);
	/* A schema without the table (an older one, or none) records nothing and fails nothing. */
	o.schema = "pgc_no_such_schema";
	T_ASSERT_INT_EQ(pgc_lock_acquire_ex(c, &k, &o, &l1, &err), PGC_OK);
	T_ASSERT_INT_EQ(pgc_lock_holders_recorded(obs, &k, o.schema, &hs, &n, &err), PGC_OK);
	T_ASSERT_STR_EQ(hs[0].acquired_at, "");
	pgc_free(hs);
	T_ASSERT_INT_EQ(pgc_lock_release(l1, &err), PGC_OK);
	T_ASSERT_INT_EQ(pgc_lock_holders_recorded(NULL, &k, schema, &hs, &n, &err), PGC_EUSAGE);
	T_ASSERT_INT_EQ(pgc_lock_holders_recorded(obs, &k, "", &hs, &n, &err), PGC_EUSAGE);
	snprintf(sql, sizeof sql, "DROP SCHEMA %s CASCADE", schema);
	T_ASSERT_INT_EQ(pgc_exec(obs, sql, &err), PGC_OK);
	pgc_conn_close(c);
	pgc_conn_close(obs);
}

/* ---- bad arguments ------------------------------------------------------------------------ */

static void lock__bad_arguments(void)
{
	pgc_conn *c = t_connect(NULL);
	pgc_key k = KEY(15), bad = k;
	bad.kind = 9;
	pgc_lock *l = (pgc_lock *)0x1;
	pgc_error err;
	T_ASSERT_INT_EQ(pgc_lock_acquire(NULL, &k, 0, 0, &l, &err), PGC_EUSAGE);
	T_ASSERT(l == NULL);
	T_ASSERT_INT_EQ(pgc_lock_acquire(c, NULL, 0, 0, &l, &err), PGC_EUSAGE);
	T_ASSERT_INT_EQ(pgc_lock_acquire(c, &k, 0, 0, NULL, &err), PGC_EUSAGE);
	T_ASSERT_INT_EQ(pgc_lock_acquire(c, &k, 0, -2, &l, &err), PGC_EUSAGE);
	T_ASSERT_CONTAINS(err.message, "PGC_WAIT_FOREVER");
	T_ASSERT_INT_EQ(pgc_lock_acquire(c, &k, 0x100, 0, &l, &err), PGC_EUSAGE);
	T_ASSERT_INT_EQ(pgc_lock_acquire(c, &bad, 0, 0, &l, &err), PGC_EUSAGE);
	T_ASSERT_INT_EQ(pgc_lock_acquire(c, &k, 0, INT64_C(1) << 40, &l, &err), PGC_EUSAGE);
	T_ASSERT_INT_EQ(pgc_lock_release(NULL, &err), PGC_EUSAGE);
	T_ASSERT_INT_EQ(pgc_xact_lock(NULL, &k, 0, 0, &err), PGC_EUSAGE);
	T_ASSERT_INT_EQ(pgc_xact_lock_many(c, &k, 0, 0, 0, &err), PGC_EUSAGE);
	T_ASSERT_INT_EQ(pgc_xact_lock_many(c, NULL, 1, 0, 0, &err), PGC_EUSAGE);
	T_ASSERT_INT_EQ(pgc_conn_check(NULL, 0, &err), PGC_EUSAGE);
	T_ASSERT_INT_EQ(pgc_conn_check(c, -1, &err), PGC_EUSAGE);
	T_ASSERT_INT_EQ(pgc_lock_watch(NULL, 0, NULL, &err), PGC_EUSAGE);
	pgc_lock_holder *hs;
	size_t n;
	T_ASSERT_INT_EQ(pgc_lock_holders(c, NULL, &hs, &n, &err), PGC_EUSAGE);
	T_ASSERT_INT_EQ(pgc_lock_holders(c, &bad, &hs, &n, &err), PGC_EUSAGE);
	pgc_held_lock *hl;
	T_ASSERT_INT_EQ(pgc_conn_locks(NULL, &hl, &n, &err), PGC_EUSAGE);
	T_ASSERT_INT_EQ(pgc_conn_lock_count(NULL), 0);
	T_ASSERT(pgc_lock_key(NULL) == NULL);
	T_ASSERT(pgc_lock_conn(NULL) == NULL);
	T_ASSERT_INT_EQ(pgc_conn_socket(NULL), -1);
	T_ASSERT_INT_EQ(pgc_conn_close_locks(NULL, NULL, NULL, &err), PGC_OK);
	/* Nothing was taken by any of it. */
	T_ASSERT_INT_EQ(lock_rows(c, &k, 0, 0), 0);
	T_ASSERT_INT_EQ(pgc_conn_lock_count(c), 0);
	/* The server's prepared statements vanish (DISCARD ALL): the library prepares again. */
	T_ASSERT_INT_EQ(pgc_lock_acquire(c, &k, PGC_LOCK_TRY, 0, &l, &err), PGC_OK);
	T_ASSERT_INT_EQ(pgc_lock_release(l, &err), PGC_OK);
	T_ASSERT_INT_EQ(pgc_exec(c, "DEALLOCATE ALL", &err), PGC_OK);
	T_ASSERT_INT_EQ(pgc_lock_acquire(c, &k, PGC_LOCK_TRY, 0, &l, &err), PGC_OK);
	T_ASSERT_INT_EQ(pgc_lock_release(l, &err), PGC_OK);
	pgc_conn_close(c);
}

/* A real server restart (pg_ctl restart): the holder learns it lost the lock. Runs alone. */
static void lock__server_restart(void)
{
	const char *dir = getenv("PGCOORD_TEST_PGDIR");
	if (dir == NULL || *dir == '\0') {
		fprintf(stderr, "skipped: PGCOORD_TEST_PGDIR is not set (needs the pg-tmp server)\n");
		exit(T_SKIP);
	}
	pgc_conn *c = t_connect(NULL);
	pgc_key k = KEY(16);
	pgc_lock *l;
	pgc_error err;
	T_ASSERT_INT_EQ(pgc_lock_acquire(c, &k, 0, 1000, &l, &err), PGC_OK);
	char cmd[1024];
	snprintf(cmd, sizeof cmd,
	         "u=$(stat -c %%U '%s/data'); d='%s/data'; "
	         "if [ \"$(id -u)\" -eq 0 ]; then runuser -u \"$u\" -- pg_ctl -D \"$d\" -m fast -w -t 60 restart -l '%s/server.log'; "
	         "else pg_ctl -D \"$d\" -m fast -w -t 60 restart -l '%s/server.log'; fi >/dev/null 2>&1",
	         dir, dir, dir, dir);
	if (system(cmd) != 0)
		T_FAIL("pg_ctl restart failed: %s", cmd);
	int rc = pgc_lock_watch(l, 10000, NULL, &err);
	T_ASSERT_INT_EQ(rc, PGC_ELOCKLOST);
	fprintf(stderr, "%s\n", err.message);
	T_ASSERT_INT_EQ(pgc_lock_release(l, &err), PGC_ELOCKLOST);
	pgc_conn_close(c);
}

int main(int argc, char **argv)
{
	static const t_case cases[] = {
		{ "lock__seed_singleton", lock__seed_singleton },
		{ "lock__seed_pool_trap", lock__seed_pool_trap },
		{ "lock__seed_xact", lock__seed_xact },
		{ "lock__seed_reentrant", lock__seed_reentrant },
		{ "lock__seed_session_end", lock__seed_session_end },
		{ "lock__modes_and_key_spaces", lock__modes_and_key_spaces },
		{ "lock__timeout_edge", lock__timeout_edge },
		{ "lock__timeout_keeps_transaction_and_settings", lock__timeout_keeps_transaction_and_settings },
		{ "lock__waiter_gets_lock", lock__waiter_gets_lock },
		{ "lock__cancel_fd", lock__cancel_fd },
		{ "lock__deadlock_detected", lock__deadlock_detected },
		{ "lock__release_in_failed_transaction", lock__release_in_failed_transaction },
		{ "lock__xact_many", lock__xact_many },
		{ "lock__watch_terminated", lock__watch_terminated },
		{ "lock__conn_check", lock__conn_check },
		{ "lock__heartbeat_timeout", lock__heartbeat_timeout },
		{ "lock__registry_and_collision", lock__registry_and_collision },
		{ "lock__holders", lock__holders },
		{ "lock__record_acquired_at", lock__record_acquired_at },
		{ "lock__bad_arguments", lock__bad_arguments },
		/* Restarts the server: runs alone, so that no other test loses its sessions. */
		{ "lock__server_restart", lock__server_restart }, /* meson: alone, timeout 120 */
		{ NULL, NULL },
	};
	signal(SIGPIPE, SIG_IGN);
	return t_main(argc, argv, cases);
}

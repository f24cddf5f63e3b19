/* tx.c - the account-transfer workload through pgc_tx_run + pgc_lock_rows beside pgbench
 * running the same transfer, same server, one run
 *
 * 8 clients move random amounts between random pairs of accounts. "ordered": both rows locked
 * in ascending id order first (pgc_lock_rows; pgbench: one SELECT ... ORDER BY id FOR UPDATE),
 * then two updates. "arrival": debit then credit, rows locked as the updates reach them, so
 * cycles can form; both sides retry the deadlocks (pgbench with --max-tries). Reported: tps
 * and their ratio, retries per 1,000 committed transactions as each client counts them, and
 * deadlocks per 1,000 as the server counts them (pg_stat_database.deadlocks), for both.
 *
 * Each side runs twice per variant (ours, pgbench, pgbench, ours) so that background load
 * that drifts during the run weighs on both alike.
 *
 *   bench_tx [SECONDS [ACCOUNTS]]     (defaults 5 and 100; the DSN is $PGCOORD_TEST_DSN) */
#include <libpq-fe.h>
#include <pthread.h>
#include <unistd.h>

#include <pgcoord.h>

#include "bench.h"

#ifndef PGC_BENCH_DIR
#define PGC_BENCH_DIR "bench"
#endif

enum { CLIENTS = 8 };

static int g_seconds = 5;
static int g_accounts = 100;

typedef struct client {
	bool ordered;
	unsigned seed;
	long commits, retries, deadlocks, failures;
	char fail[PGC_ERROR_MESSAGE_MAX];
	double start, end;
	pthread_barrier_t *ready;
} client;

typedef struct transfer {
	int64_t a, b;
	char amount[16], neg[16], sa[24], sb[24];
	bool ordered;
} transfer;

static int transfer_fn(pgc_conn *c, void *arg, pgc_error *err)
{
	transfer *t = arg;
	if (t->ordered) {
		int64_t ids[2] = { t->a, t->b };
		int rc = pgc_lock_rows(c, "pgc_bench_tx.accounts", "id", ids, 2, PGC_FOR_UPDATE,
		                       PGC_ROWS_WAIT, NULL, err);
		if (rc != PGC_OK)
			return rc;
	}
	PGconn *pg = pgc_conn_pg(c);
	const char *debit[2] = { t->sa, t->neg };
	PGresult *r = PQexecPrepared(pg, "move", 2, debit, NULL, NULL, 0);
	int rc = pgc_tx_check_result(c, r, err);
	PQclear(r);
	if (rc != PGC_OK)
		return rc;
	const char *credit[2] = { t->sb, t->amount };
	r = PQexecPrepared(pg, "move", 2, credit, NULL, NULL, 0);
	rc = pgc_tx_check_result(c, r, err);
	PQclear(r);
	return rc;
}

static void *client_main(void *arg)
{
	client *cl = arg;
	pgc_conn_options copts = PGC_CONN_OPTIONS_INIT;
	copts.application_name = "pgcoord/bench-tx";
	pgc_conn *c = NULL;
	pgc_error err;
	if (pgc_connect(bench_dsn(), &copts, &c, &err) != PGC_OK) {
		snprintf(cl->fail, sizeof cl->fail, "connect: %s", err.message);
		cl->failures++;
		pthread_barrier_wait(cl->ready);
		return NULL;
	}
	PGresult *r = PQprepare(pgc_conn_pg(c), "move",
	        "UPDATE pgc_bench_tx.accounts SET balance = balance + $2 WHERE id = $1", 2, NULL);
	PQclear(r);
	pthread_barrier_wait(cl->ready);
	cl->start = bench_now();
	double stop = cl->start + g_seconds;
	pgc_tx_stats st;
	pgc_tx_options o = PGC_TX_OPTIONS_INIT;
	o.max_attempts = 10; /* as pgbench --max-tries=10 */
	o.stats = &st;
	do {
		for (int i = 0; i < 20; i++) {
			transfer t;
			t.ordered = cl->ordered;
			t.a = 1 + rand_r(&cl->seed) % g_accounts;
			t.b = 1 + (t.a - 1 + 1 + rand_r(&cl->seed) % (g_accounts - 1)) % g_accounts;
			int amount = 1 + rand_r(&cl->seed) % 50;
			snprintf(t.amount, sizeof t.amount, "%d", amount);
			snprintf(t.neg, sizeof t.neg, "%d", -amount);
			snprintf(t.sa, sizeof t.sa, "%lld", (long long)t.a);
			snprintf(t.sb, sizeof t.sb, "%lld", (long long)t.b);
			int rc = pgc_tx_run(c, &o, transfer_fn, &t, &err);
			cl->retries += st.attempts - 1;
			cl->deadlocks += st.deadlocks;
			if (rc == PGC_OK) {
				cl->commits++;
			} else if (cl->failures++ == 0) {
				snprintf(cl->fail, sizeof cl->fail, "%s", err.message);
			}
		}
		cl->end = bench_now();
	} while (cl->end < stop);
	pgc_conn_close(c);
	return NULL;
}

static long long server_deadlocks(pgc_conn *c)
{
	/* Let exiting backends flush their counters, then read a fresh snapshot. */
	usleep(300000);
	PGresult *r = PQexec(pgc_conn_pg(c), "SELECT pg_stat_clear_snapshot(), deadlocks FROM pg_stat_database WHERE datname = current_database()");
	long long n = PQresultStatus(r) == PGRES_TUPLES_OK && PQntuples(r) == 1 ? atoll(PQgetvalue(r, 0, 1)) : -1;
	PQclear(r);
	return n;
}

static long long total_balance(pgc_conn *c)
{
	PGresult *r = PQexec(pgc_conn_pg(c), "SELECT sum(balance) FROM pgc_bench_tx.accounts");
	long long n = PQresultStatus(r) == PGRES_TUPLES_OK ? atoll(PQgetvalue(r, 0, 0)) : -1;
	PQclear(r);
	return n;
}

typedef struct result {
	double tps;
	long commits, retries, deadlocks, failures;
} result;

static bool run_ours(bool ordered, result *out)
{
	pthread_barrier_t ready;
	pthread_barrier_init(&ready, NULL, CLIENTS);
	client cl[CLIENTS];
	pthread_t th[CLIENTS];
	memset(cl, 0, sizeof cl);
	for (int i = 0; i < CLIENTS; i++) {
		cl[i].ordered = ordered;
		cl[i].seed = (unsigned)(getpid() * 7919 + i);
		cl[i].ready = &ready;
		pthread_create(&th[i], NULL, client_main, &cl[i]);
	}
	memset(out, 0, sizeof *out);
	double start = 0, end = 0;
	for (int i = 0; i < CLIENTS; i++) {
		pthread_join(th[i], NULL);
		if (cl[i].failures)
			fprintf(stderr, "bench: client %d: %ld failed, first: %s\n", i, cl[i].failures, cl[i].fail);
		out->commits += cl[i].commits;
		out->retries += cl[i].retries;
		out->deadlocks += cl[i].deadlocks;
		out->failures += cl[i].failures;
		if (start == 0 || cl[i].start < start)
			start = cl[i].start;
		if (cl[i].end > end)
			end = cl[i].end;
	}
	pthread_barrier_destroy(&ready);
	out->tps = end > start ? out->commits / (end - start) : 0;
	return out->failures == 0;
}

/* pgbench with the script file; tps, committed and retried from its report. One pgbench
 * thread per client, as ours has: on a shared machine the scheduler shares CPU per thread,
 * and fewer threads would handicap the reference. */
static bool run_pgbench(const char *script, result *out)
{
	memset(out, 0, sizeof *out);
	char cmd[4096];
	snprintf(cmd, sizeof cmd,
	         "pgbench -n -M prepared -f '%s/%s' -D accounts=%d -c %d -j %d -T %d "
	         "--max-tries=10 --failures-detailed '%s' 2>&1",
	         PGC_BENCH_DIR, script, g_accounts, CLIENTS, CLIENTS, g_seconds, bench_dsn());
	FILE *p = popen(cmd, "r");
	if (p == NULL)
		return false;
	char line[512];
	bool got_tps = false;
	while (fgets(line, sizeof line, p) != NULL) {
		long v;
		double d;
		if (sscanf(line, "tps = %lf", &d) == 1) {
			out->tps = d;
			got_tps = true;
		} else if (sscanf(line, "number of transactions actually processed: %ld", &v) == 1) {
			out->commits = v;
		} else if (sscanf(line, "total number of retries: %ld", &v) == 1) {
			out->retries = v;
		} else if (sscanf(line, "number of failed transactions: %ld", &v) == 1) {
			out->failures = v;
		} else if (strstr(line, "error") || strstr(line, "FATAL")) {
			fprintf(stderr, "pgbench: %s", line);
		}
	}
	int st = pclose(p);
	return got_tps && st == 0;
}

static double per_k(long n, long commits)
{
	return commits > 0 ? 1000.0 * n / commits : 0;
}

int main(int argc, char **argv)
{
	if (argc > 1)
		g_seconds = atoi(argv[1]);
	if (argc > 2)
		g_accounts = atoi(argv[2]);
	if (g_seconds < 1 || g_accounts < 2) {
		fprintf(stderr, "usage: bench_tx [SECONDS >= 1 [ACCOUNTS >= 2]]\n");
		return 2;
	}
	/* SECONDS per side and variant, split over two runs */
	g_seconds = g_seconds >= 2 ? g_seconds / 2 : 1;
	pgc_conn *c;
	pgc_error err;
	if (pgc_connect(bench_dsn(), NULL, &c, &err) != PGC_OK) {
		fprintf(stderr, "bench: %s\n", err.message);
		return 1;
	}
	char setup[512];
	snprintf(setup, sizeof setup,
	         "SET client_min_messages = warning; DROP SCHEMA IF EXISTS pgc_bench_tx CASCADE; CREATE SCHEMA pgc_bench_tx;"
	         "CREATE TABLE pgc_bench_tx.accounts (id bigint PRIMARY KEY, balance bigint NOT NULL);"
	         "INSERT INTO pgc_bench_tx.accounts SELECT g, 1000 FROM generate_series(1, %d) g", g_accounts);
	if (pgc_exec(c, setup, &err) != PGC_OK || pgc_exec(c, "VACUUM ANALYZE pgc_bench_tx.accounts", &err) != PGC_OK) {
		fprintf(stderr, "bench: setup: %s\n", err.message);
		return 1;
	}
	long long balance = total_balance(c);

	struct {
		const char *name, *script;
		bool ordered;
		result ours, ref;
		long long ours_dl, ref_dl;
	} rows[2] = {
		{ .name = "ordered (pgc_lock_rows)", .script = "tx_transfer.pgbench", .ordered = true },
		{ .name = "arrival order", .script = "tx_transfer_arrival.pgbench", .ordered = false },
	};
	/* The machine may be shared: each side runs twice per variant, in the order ours,
	 * pgbench, pgbench, ours, so that a drift in background load hits both alike. */
	int status = 0;
	for (int i = 0; i < 2; i++) {
		for (int k = 0; k < 4; k++) {
			bool ours = k == 0 || k == 3;
			result r;
			long long d0 = server_deadlocks(c);
			bool ok = ours ? run_ours(rows[i].ordered, &r) : run_pgbench(rows[i].script, &r);
			long long d1 = server_deadlocks(c);
			if (!ok) {
				fprintf(stderr, "bench: %s run failed\n", ours ? "pgcoord" : "pgbench");
				status = 1;
			}
			result *sum = ours ? &rows[i].ours : &rows[i].ref;
			/* tps over both runs: total commits over total time */
			double t = (sum->tps > 0 ? sum->commits / sum->tps : 0) + (r.tps > 0 ? r.commits / r.tps : 0);
			sum->commits += r.commits;
			sum->retries += r.retries;
			sum->deadlocks += r.deadlocks;
			sum->failures += r.failures;
			sum->tps = t > 0 ? sum->commits / t : 0;
			*(ours ? &rows[i].ours_dl : &rows[i].ref_dl) += d1 - d0;
		}
	}
	long long after = total_balance(c);
	if (pgc_exec(c, "DROP SCHEMA pgc_bench_tx CASCADE", &err) != PGC_OK)
		fprintf(stderr, "bench: cleanup: %s\n", err.message);
	pgc_conn_close(c);

	printf("tx transfer: %d clients, %d accounts, 2 x %d s per side; per 1k = per 1,000 committed\n",
	       CLIENTS, g_accounts, g_seconds);
	printf("%-24s %10s %10s %6s | %9s %9s | %9s %9s\n", "locking", "pgcoord/s", "pgbench/s",
	       "ratio", "pgc dl/1k", "pgb dl/1k", "pgc rt/1k", "pgb rt/1k");
	FILE *j = fopen(getenv("BENCH_JSON") ? getenv("BENCH_JSON") : "/dev/null", "a");
	for (int i = 0; i < 2; i++) {
		double ratio = rows[i].ref.tps > 0 ? rows[i].ours.tps / rows[i].ref.tps : 0;
		double odl = per_k((long)rows[i].ours_dl, rows[i].ours.commits);
		double rdl = per_k((long)rows[i].ref_dl, rows[i].ref.commits);
		double ort = per_k(rows[i].ours.retries, rows[i].ours.commits);
		double rrt = per_k(rows[i].ref.retries, rows[i].ref.commits);
		printf("%-24s %10.0f %10.0f %6.2f | %9.2f %9.2f | %9.2f %9.2f\n", rows[i].name,
		       rows[i].ours.tps, rows[i].ref.tps, ratio, odl, rdl, ort, rrt);
		if (j != NULL)
			fprintf(j,
			        "{\"bench\":\"tx_transfer\",\"locking\":\"%s\",\"clients\":%d,\"accounts\":%d,\"seconds_per_side\":%d,"
			        "\"pgcoord_tps\":%.1f,\"pgbench_tps\":%.1f,\"ratio\":%.3f,"
			        "\"pgcoord_commits\":%ld,\"pgbench_commits\":%ld,"
			        "\"pgcoord_deadlocks_server\":%lld,\"pgbench_deadlocks_server\":%lld,"
			        "\"pgcoord_deadlocks_client\":%ld,\"pgcoord_retries\":%ld,\"pgbench_retries\":%ld,"
			        "\"pgcoord_failed\":%ld,\"pgbench_failed\":%ld,"
			        "\"pgcoord_deadlocks_per_1k\":%.3f,\"pgbench_deadlocks_per_1k\":%.3f,"
			        "\"pgcoord_retries_per_1k\":%.3f,\"pgbench_retries_per_1k\":%.3f}\n",
			        rows[i].ordered ? "ordered" : "arrival", CLIENTS, g_accounts, 2 * g_seconds,
			        rows[i].ours.tps, rows[i].ref.tps, ratio, rows[i].ours.commits,
			        rows[i].ref.commits, rows[i].ours_dl, rows[i].ref_dl, rows[i].ours.deadlocks,
			        rows[i].ours.retries, rows[i].ref.retries, rows[i].ours.failures,
			        rows[i].ref.failures, odl, rdl, ort, rrt);
	}
	if (j != NULL)
		fclose(j);
	printf("failed: pgcoord %ld + %ld, pgbench %ld + %ld; total balance %lld before, %lld after%s\n",
	       rows[0].ours.failures, rows[1].ours.failures, rows[0].ref.failures, rows[1].ref.failures,
	       balance, after, balance == after ? " (conserved)" : " (NOT CONSERVED)");
	if (balance != after)
		status = 1;
	return status;
}

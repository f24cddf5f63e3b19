/* diag.c - how long one `pgcoord blockers --json` takes, whole process, on a busy server
 *
 * 150 idle sessions and 20 sessions waiting in 5 advisory-lock chains (each chain: one idle
 * holder and 4 waiters, each waiter holding the key the next one wants). Beside it, the
 * reference: the usual blocking-pairs query (pg_stat_activity joined through pg_blocking_pids)
 * run by psql, also whole process. Both are timed the same way (spawn, wait, wall clock) and
 * their medians compared. */
#include <fcntl.h>
#include <libgen.h>
#include <libpq-fe.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <pgcoord.h>

#include "bench.h"

extern char **environ;

#define IDLE 150
#define CHAINS 5
#define CHAIN_WAITERS 4

static const char pairs_query[] =
	"SELECT blocked.pid AS blocked_pid, blocked.usename AS blocked_user,"
	" blocked.application_name AS blocked_application, blocked.wait_event_type, blocked.wait_event,"
	" clock_timestamp() - blocked.query_start AS blocked_for, blocked.query AS blocked_query,"
	" blocker.pid AS blocker_pid, blocker.state AS blocker_state,"
	" clock_timestamp() - blocker.xact_start AS blocker_xact_age, blocker.query AS blocker_query"
	" FROM pg_stat_activity AS blocked"
	" CROSS JOIN LATERAL unnest(pg_blocking_pids(blocked.pid)) AS b(pid)"
	" JOIN pg_stat_activity AS blocker ON blocker.pid = b.pid ORDER BY blocked_for DESC";

static pgc_conn *open_session(const char *app)
{
	pgc_conn_options o = PGC_CONN_OPTIONS_INIT;
	o.application_name = app;
	pgc_conn *c = NULL;
	pgc_error err;
	if (pgc_connect(bench_dsn(), &o, &c, &err) != PGC_OK) {
		fprintf(stderr, "bench: %s\n", err.message);
		exit(1);
	}
	return c;
}

static void run_sql(pgc_conn *c, const char *sql)
{
	pgc_error err;
	if (pgc_exec(c, sql, &err) != PGC_OK) {
		fprintf(stderr, "bench: %s: %s\n", sql, err.message);
		exit(1);
	}
}

/* Runs argv with stdout to /dev/null; returns the wall time in seconds, the status in *status. */
static double timed_run(char *const argv[], int *status)
{
	posix_spawn_file_actions_t fa;
	posix_spawn_file_actions_init(&fa);
	posix_spawn_file_actions_addopen(&fa, 1, "/dev/null", O_WRONLY, 0);
	double t0 = bench_now();
	pid_t pid;
	if (posix_spawnp(&pid, argv[0], &fa, NULL, argv, environ) != 0) {
		fprintf(stderr, "bench: cannot run %s\n", argv[0]);
		exit(1);
	}
	int st = 0;
	waitpid(pid, &st, 0);
	double t = bench_now() - t0;
	posix_spawn_file_actions_destroy(&fa);
	*status = WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
	return t;
}

/* Times argv for about seconds (at least 11 runs, at most 301). */
static double median_of(char *const argv[], int seconds, int want_status, int *runs)
{
	static double t[301];
	int n = 0;
	double start = bench_now();
	while (n < 301 && (n < 11 || bench_now() - start < seconds)) {
		int st;
		t[n++] = timed_run(argv, &st);
		if (st != want_status) {
			fprintf(stderr, "bench: %s exited %d, expected %d\n", argv[0], st, want_status);
			exit(1);
		}
	}
	*runs = n;
	return bench_median(t, n);
}

int main(int argc, char **argv)
{
	int seconds = argc > 1 ? atoi(argv[1]) : 5;
	if (seconds < 1)
		seconds = 1;
	char bin[4096];
	const char *env_bin = getenv("PGCOORD_BIN");
	if (env_bin != NULL && *env_bin)
		snprintf(bin, sizeof bin, "%s", env_bin);
	else {
		char self[4096];
		snprintf(self, sizeof self, "%s", argv[0]);
		snprintf(bin, sizeof bin, "%s/../pgcoord", dirname(self));
	}
	if (access(bin, X_OK) != 0) {
		fprintf(stderr, "bench: %s is not executable (set PGCOORD_BIN)\n", bin);
		return 1;
	}

	pgc_conn *admin = open_session("pgcoord/bench-diag");
	static pgc_conn *idle[IDLE];
	static pgc_conn *chain[CHAINS][CHAIN_WAITERS + 1];
	for (int i = 0; i < IDLE; i++)
		idle[i] = open_session("pgcoord/bench-idle");
	/* Keys 0x6265_6e63_0000_xxyy: "benc" in the high half, chain and link in the low. */
	for (int c = 0; c < CHAINS; c++) {
		for (int k = 0; k <= CHAIN_WAITERS; k++) {
			pgc_conn *s = open_session(k == 0 ? "pgcoord/bench-holder" : "pgcoord/bench-waiter");
			char sql[128];
			run_sql(s, "SET lock_timeout = '300s'");
			snprintf(sql, sizeof sql, "SELECT pg_advisory_lock(%lld)",
			         (long long)(INT64_C(0x62656e6300000000) | (c << 8) | k));
			run_sql(s, sql);
			if (k > 0) {
				snprintf(sql, sizeof sql, "SELECT pg_advisory_lock(%lld)",
				         (long long)(INT64_C(0x62656e6300000000) | (c << 8) | (k - 1)));
				if (!PQsendQuery(pgc_conn_pg(s), sql)) {
					fprintf(stderr, "bench: %s", PQerrorMessage(pgc_conn_pg(s)));
					return 1;
				}
			}
			chain[c][k] = s;
		}
	}
	/* Until all 20 wait. */
	for (int i = 0;; i++) {
		PGresult *r = PQexec(pgc_conn_pg(admin),
		        "SELECT count(*) FROM pg_locks WHERE NOT granted AND locktype = 'advisory'");
		int n = PQresultStatus(r) == PGRES_TUPLES_OK ? atoi(PQgetvalue(r, 0, 0)) : -1;
		PQclear(r);
		if (n >= CHAINS * CHAIN_WAITERS)
			break;
		if (i > 400) {
			fprintf(stderr, "bench: only %d sessions wait after 20 s\n", n);
			return 1;
		}
		usleep(50000);
	}

	char *ours_argv[] = { bin, "-d", (char *)bench_dsn(), "blockers", "--json", NULL };
	char psql[] = "psql";
	char *ref_argv[] = { psql, "-X", "-q", "-A", "-d", (char *)bench_dsn(), "-c",
	                     (char *)pairs_query, NULL };
	int n_ours, n_ref;
	double ours = median_of(ours_argv, seconds, 1, &n_ours);
	double ref = median_of(ref_argv, seconds, 0, &n_ref);

	/* The library call alone, in process. */
	static double lib[301];
	int n_lib = 0;
	double start = bench_now();
	while (n_lib < 301 && (n_lib < 11 || bench_now() - start < seconds)) {
		pgc_diag_snapshot *s = NULL;
		pgc_error err;
		double t0 = bench_now();
		if (pgc_diag_snapshot_take(admin, NULL, &s, &err) != PGC_OK) {
			fprintf(stderr, "bench: snapshot: %s\n", err.message);
			return 1;
		}
		lib[n_lib++] = bench_now() - t0;
		if (s->nwaiting < CHAINS * CHAIN_WAITERS) {
			fprintf(stderr, "bench: the snapshot sees %zu waiting sessions\n", s->nwaiting);
			return 1;
		}
		pgc_diag_snapshot_free(s);
	}
	double lib_med = bench_median(lib, n_lib);

	printf("%-46s %10s %6s\n", "blockers, 150 idle + 20 waiting (median)", "ms", "runs");
	printf("%-46s %10.1f %6d\n", "pgcoord blockers --json (whole process)", ours * 1000, n_ours);
	if (ref > 0)
		printf("%-46s %10.1f %6d\n", "psql -c <blocking-pairs query> (whole process)", ref * 1000, n_ref);
	printf("%-46s %10.1f %6d\n", "pgc_diag_snapshot_take (in process)", lib_med * 1000, n_lib);
	if (ref > 0)
		printf("%-46s %10.2f\n", "ratio pgcoord / psql", ours / ref);
	FILE *j = fopen(getenv("BENCH_JSON") ? getenv("BENCH_JSON") : "/dev/null", "a");
	if (j != NULL) {
		fprintf(j, "{\"bench\":\"diag_blockers\",\"idle\":%d,\"waiting\":%d,\"pgcoord_ms\":%.2f,"
		           "\"psql_pairs_query_ms\":%.2f,\"snapshot_ms\":%.2f,\"ratio\":%.3f,\"runs\":%d}\n",
		        IDLE, CHAINS * CHAIN_WAITERS, ours * 1000, ref > 0 ? ref * 1000 : -1, lib_med * 1000,
		        ref > 0 ? ours / ref : 0, n_ours);
		fclose(j);
	}

	/* End the waits from the server side before closing, so nothing lingers. */
	run_sql(admin, "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity "
	               "WHERE application_name IN ('pgcoord/bench-holder', 'pgcoord/bench-waiter')");
	for (int c = 0; c < CHAINS; c++)
		for (int k = 0; k <= CHAIN_WAITERS; k++)
			pgc_conn_close(chain[c][k]);
	for (int i = 0; i < IDLE; i++)
		pgc_conn_close(idle[i]);
	pgc_conn_close(admin);
	return 0;
}

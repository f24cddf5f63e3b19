/* lease.c - leader failover and handover times of pgcoord elect, beside their floors
 *
 * Three `pgcoord elect --ttl 3s` candidates run a command that reports, through an inherited
 * pipe, its token, its pgcoord's pid and its own pid. Failover: SIGKILL the leader's pgcoord
 * and time until the next command starts; its floor is what was left of the killed leader's
 * lease at that moment (read from the table just before the kill), since nobody may lead
 * before it expires. Handover: the leader's command exits (SIGTERM) and we time until the next
 * command starts; its floor is one grant plus one release, run by pgbench on the same server.
 *
 *   bench_lease [SECONDS]   (SECONDS is ignored; BENCH_LEASE_FAILOVERS, default 10, and
 *                            BENCH_LEASE_HANDOVERS, default 20, set the counts) */
#include <errno.h>
#include <fcntl.h>
#include <libgen.h>
#include <limits.h>
#include <poll.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <libpq-fe.h>
#include <pgcoord.h>

#include "bench.h"

#define SCHEMA "pgc_bench_lease"
#define CANDIDATES 3

static char pgcoord_bin[PATH_MAX];
static int report_w = -1, report_r = -1;
static pid_t cands[64];
static int ncands;

static void spawn_candidate(const char *name)
{
	pid_t pid = fork();
	if (pid < 0) {
		perror("fork");
		exit(1);
	}
	if (pid == 0) {
		dup2(report_w, 3);
		int devnull = open("/dev/null", O_WRONLY);
		dup2(devnull, 2);
		execl(pgcoord_bin, "pgcoord", "-q", "-d", bench_dsn(), "elect", "--schema", SCHEMA,
		      "--ttl", "3s", name, "--", "sh", "-c",
		      "echo \"$PGCOORD_FENCE_TOKEN $PPID $$\" >&3; exec sleep 600", (char *)NULL);
		_exit(127);
	}
	cands[ncands++] = pid;
}

/* Reads one report line "token pgcoord_pid child_pid" within timeout_s. */
static bool read_report(long long *token, int *pg_pid, int *child_pid, double timeout_s)
{
	static char buf[4096];
	static size_t len;
	double until = bench_now() + timeout_s;
	for (;;) {
		char *nl = memchr(buf, '\n', len);
		if (nl != NULL) {
			*nl = '\0';
			int ok = sscanf(buf, "%lld %d %d", token, pg_pid, child_pid) == 3;
			size_t used = (size_t)(nl - buf) + 1;
			memmove(buf, buf + used, len - used);
			len -= used;
			return ok;
		}
		double left = until - bench_now();
		if (left <= 0)
			return false;
		struct pollfd p = { report_r, POLLIN, 0 };
		if (poll(&p, 1, (int)(left * 1000) + 1) <= 0)
			continue;
		ssize_t n = read(report_r, buf + len, sizeof buf - 1 - len);
		if (n <= 0)
			return false;
		len += (size_t)n;
	}
}

static void reap(void)
{
	int st;
	for (int i = 0; i < ncands; i++)
		if (cands[i] > 0 && waitpid(cands[i], &st, WNOHANG) == cands[i])
			cands[i] = 0;
}

static int cmp_d(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;
	return (x > y) - (x < y);
}

static double median(double *v, int n)
{
	qsort(v, (size_t)n, sizeof *v, cmp_d);
	return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

/* Milliseconds left on the lease name by the database clock. */
static double remaining_ms(PGconn *pg, const char *name)
{
	const char *vals[1] = { name };
	PGresult *r = PQexecParams(pg,
	        "SELECT extract(epoch FROM expires_at - clock_timestamp()) * 1000 FROM " SCHEMA
	        ".leases WHERE name = $1", 1, NULL, vals, NULL, NULL, 0);
	double v = -1;
	if (PQresultStatus(r) == PGRES_TUPLES_OK && PQntuples(r) == 1)
		v = atof(PQgetvalue(r, 0, 0));
	PQclear(r);
	return v;
}

static void stop_all(void)
{
	for (int i = 0; i < ncands; i++)
		if (cands[i] > 0)
			kill(cands[i], SIGTERM);
	for (int i = 0; i < ncands; i++)
		if (cands[i] > 0)
			waitpid(cands[i], NULL, 0);
	ncands = 0;
}

int main(int argc, char **argv)
{
	(void)argc;
	(void)argv;
	int failovers = getenv("BENCH_LEASE_FAILOVERS") ? atoi(getenv("BENCH_LEASE_FAILOVERS")) : 10;
	int handovers = getenv("BENCH_LEASE_HANDOVERS") ? atoi(getenv("BENCH_LEASE_HANDOVERS")) : 20;
	if (failovers < 1 || failovers > 1000 || handovers < 1 || handovers > 1000) {
		fprintf(stderr, "bench: BENCH_LEASE_FAILOVERS and BENCH_LEASE_HANDOVERS must be 1..1000\n");
		return 2;
	}
	if (getenv("PGCOORD_BIN") != NULL) {
		snprintf(pgcoord_bin, sizeof pgcoord_bin, "%s", getenv("PGCOORD_BIN"));
	} else {
		char self[PATH_MAX];
		ssize_t n = readlink("/proc/self/exe", self, sizeof self - 1);
		if (n <= 0) {
			perror("readlink");
			return 1;
		}
		self[n] = '\0';
		snprintf(pgcoord_bin, sizeof pgcoord_bin, "%s/../pgcoord", dirname(self));
	}
	signal(SIGPIPE, SIG_IGN);

	pgc_conn *c;
	pgc_error err;
	if (pgc_connect(bench_dsn(), NULL, &c, &err) != PGC_OK ||
	    pgc_exec(c, "SET client_min_messages = warning", &err) != PGC_OK ||
	    pgc_exec(c, "DROP SCHEMA IF EXISTS " SCHEMA " CASCADE", &err) != PGC_OK ||
	    pgc_schema_init(c, SCHEMA, NULL, NULL, &err) != PGC_OK) {
		fprintf(stderr, "bench: %s\n", err.message);
		return 1;
	}
	PGconn *pg = pgc_conn_pg(c);
	int p[2];
	if (pipe(p) != 0) {
		perror("pipe");
		return 1;
	}
	report_r = p[0];
	report_w = p[1];
	fcntl(report_r, F_SETFD, FD_CLOEXEC);

	/* Failover after SIGKILL of the leader's pgcoord. */
	double *fo = calloc((size_t)failovers, sizeof *fo), *floor_ms = calloc((size_t)failovers, sizeof *fo);
	for (int i = 0; i < CANDIDATES; i++)
		spawn_candidate("failover");
	long long token, last_token = 0;
	int pgpid, childpid;
	if (!read_report(&token, &pgpid, &childpid, 30)) {
		fprintf(stderr, "bench: no leader elected within 30 s\n");
		stop_all();
		return 1;
	}
	int done = 0;
	for (int i = 0; i < failovers; i++) {
		/* Kill at a random point of the renewal cycle, as a crash would. */
		usleep((useconds_t)(200000 + rand() % 1000000));
		floor_ms[i] = remaining_ms(pg, "failover");
		double t_kill = bench_now();
		kill(pgpid, SIGKILL);
		last_token = token;
		if (!read_report(&token, &pgpid, &childpid, 30)) {
			fprintf(stderr, "bench: no new leader within 30 s after a kill\n");
			break;
		}
		fo[i] = (bench_now() - t_kill) * 1000;
		if (token <= last_token)
			fprintf(stderr, "bench: token went from %lld to %lld\n", last_token, token);
		done++;
		reap();
		spawn_candidate("failover"); /* keep three candidates */
	}
	stop_all();

	/* Handover after the leader's command exits. */
	double *ho = calloc((size_t)handovers, sizeof *ho);
	int hdone = 0;
	for (int i = 0; i < CANDIDATES; i++)
		spawn_candidate("handover");
	if (read_report(&token, &pgpid, &childpid, 30)) {
		for (int i = 0; i < handovers; i++) {
			usleep(100000);
			double t_exit = bench_now();
			kill(childpid, SIGTERM);
			if (!read_report(&token, &pgpid, &childpid, 30)) {
				fprintf(stderr, "bench: no new leader within 30 s after a clean exit\n");
				break;
			}
			ho[i] = (bench_now() - t_exit) * 1000;
			hdone++;
			reap();
			spawn_candidate("handover");
		}
	}
	stop_all();

	/* The floor of a handover: one grant and one release, through pgbench. */
	double ref_tps = bench_pgbench(
	        "SELECT token FROM " SCHEMA ".lease_acquire('pgbench-' || :client_id, 'pgbench', 3000) \\gset\n"
	        "SELECT " SCHEMA ".lease_release('pgbench-' || :client_id, :token);\n", 1, 3);
	double ref_ms = ref_tps > 0 ? 1000.0 / ref_tps : 0;

	if (done == 0 || hdone == 0) {
		fprintf(stderr, "bench: no measurement\n");
		return 1;
	}
	double fo_max = 0, over_max = 0;
	double *over = calloc((size_t)done, sizeof *over);
	for (int i = 0; i < done; i++) {
		if (fo[i] > fo_max)
			fo_max = fo[i];
		over[i] = fo[i] - floor_ms[i];
		if (over[i] > over_max)
			over_max = over[i];
	}
	double ho_max = 0;
	for (int i = 0; i < hdone; i++)
		if (ho[i] > ho_max)
			ho_max = ho[i];
	double fl_med = median(floor_ms, done);
	double fo_med = median(fo, done), over_med = median(over, done), ho_med = median(ho, hdone);
	printf("%-40s %10s %10s %10s %8s\n", "lease (ttl 3s, 3 candidates)", "median ms", "max ms", "floor ms", "ratio");
	printf("%-40s %10.0f %10.0f %10.0f %8.2f\n", "failover after SIGKILL of the leader", fo_med, fo_max,
	       fl_med, fl_med > 0 ? fo_med / fl_med : 0);
	printf("%-40s %10.0f %10.0f %10s %8s\n", "  of which after the lease expired", over_med, over_max, "0", "-");
	printf("%-40s %10.1f %10.1f %10.2f %8.1f\n", "handover after a clean exit", ho_med, ho_max, ref_ms,
	       ref_ms > 0 ? ho_med / ref_ms : 0);
	printf("(%d failovers, %d handovers; failover floor: what was left of the lease at the kill;\n"
	       " handover floor: one grant + one release by pgbench; targets: failover <= ttl + 1 s,\n"
	       " handover median < 100 ms)\n", done, hdone);
	FILE *j = fopen(getenv("BENCH_JSON") ? getenv("BENCH_JSON") : "/dev/null", "a");
	if (j != NULL) {
		fprintf(j, "{\"bench\":\"lease_failover\",\"ttl_ms\":3000,\"n\":%d,\"median_ms\":%.1f,\"max_ms\":%.1f,"
		        "\"floor_median_ms\":%.1f,\"after_expiry_median_ms\":%.1f,\"after_expiry_max_ms\":%.1f}\n",
		        done, fo_med, fo_max, fl_med, over_med, over_max);
		fprintf(j, "{\"bench\":\"lease_handover\",\"n\":%d,\"median_ms\":%.2f,\"max_ms\":%.2f,"
		        "\"pgbench_grant_release_ms\":%.3f,\"ratio\":%.2f}\n",
		        hdone, ho_med, ho_max, ref_ms, ref_ms > 0 ? ho_med / ref_ms : 0);
		fclose(j);
	}
	if (pgc_exec(c, "DROP SCHEMA IF EXISTS " SCHEMA " CASCADE", &err) != PGC_OK)
		fprintf(stderr, "bench: %s\n", err.message);
	pgc_conn_close(c);
	free(fo);
	free(floor_ms);
	free(ho);
	free(over);
	return 0;
}

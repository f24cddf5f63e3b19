/* roundtrip.c - statements per second through a pgc_conn beside pgbench on the same server
 *
 * The floor every other benchmark stands on: if one library round trip costs more than
 * pgbench's, everything built on it does too. */
#include <libpq-fe.h>
#include <unistd.h>

#include <pgcoord.h>

#include "bench.h"

int main(int argc, char **argv)
{
	int seconds = argc > 1 ? atoi(argv[1]) : 5;
	pgc_conn *c;
	pgc_error err;
	if (pgc_connect(bench_dsn(), NULL, &c, &err) != PGC_OK) {
		fprintf(stderr, "bench: %s\n", err.message);
		return 1;
	}
	PGconn *pg = pgc_conn_pg(c);
	PGresult *r = PQprepare(pg, "one", "SELECT 1", 0, NULL);
	PQclear(r);
	long n = 0;
	double t0 = bench_now(), t1;
	do {
		for (int i = 0; i < 100; i++) {
			r = PQexecPrepared(pg, "one", 0, NULL, NULL, NULL, 0);
			if (PQresultStatus(r) != PGRES_TUPLES_OK) {
				fprintf(stderr, "bench: %s", PQerrorMessage(pg));
				return 1;
			}
			PQclear(r);
		}
		n += 100;
		t1 = bench_now();
	} while (t1 - t0 < seconds);
	pgc_conn_close(c);
	double ours = n / (t1 - t0);
	double ref = bench_pgbench("SELECT 1;\n", 1, seconds);
	printf("%-34s %12s %12s %8s\n", "roundtrip (1 client)", "pgcoord/s", "pgbench/s", "ratio");
	printf("%-34s %12.0f %12.0f %8.2f\n", "SELECT 1, prepared", ours, ref, ref > 0 ? ours / ref : 0);
	FILE *j = fopen(getenv("BENCH_JSON") ? getenv("BENCH_JSON") : "/dev/null", "a");
	if (j != NULL) {
		fprintf(j, "{\"bench\":\"roundtrip\",\"clients\":1,\"pgcoord_per_s\":%.0f,\"pgbench_per_s\":%.0f,\"ratio\":%.3f}\n",
		        ours, ref, ref > 0 ? ours / ref : 0);
		fclose(j);
	}
	return 0;
}

/* bench.h - helpers for the benchmarks: timing, pgbench side by side, JSON results */
#ifndef PGCOORD_BENCH_H
#define PGCOORD_BENCH_H

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static inline double bench_now(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec + ts.tv_nsec / 1e9;
}

/* qsort()'s comparison of doubles, ascending. */
static inline int bench_cmp_double(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;
	return (x > y) - (x < y);
}

/* The median of v[0..n-1], n > 0; sorts v. */
static inline double bench_median(double *v, int n)
{
	qsort(v, (size_t)n, sizeof *v, bench_cmp_double);
	return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

static inline const char *bench_dsn(void)
{
	const char *dsn = getenv("PGCOORD_TEST_DSN");
	if (dsn == NULL || *dsn == '\0') {
		fprintf(stderr, "bench: PGCOORD_TEST_DSN is not set (run through make bench)\n");
		exit(2);
	}
	return dsn;
}

/* Runs pgbench with a custom script for seconds with clients, and returns its tps (excluding
 * connection time), or -1. script is SQL text written to a temporary file. */
static inline double bench_pgbench(const char *script, int clients, int seconds)
{
	char path[] = "/tmp/pgc-bench-XXXXXX";
	int fd = mkstemp(path);
	if (fd < 0)
		return -1;
	FILE *f = fdopen(fd, "w");
	fputs(script, f);
	fclose(f);
	char cmd[2048];
	snprintf(cmd, sizeof cmd,
	         "pgbench -n -M prepared -f %s -c %d -j %d -T %d '%s' 2>/dev/null | "
	         "awk '/^tps = / {print $3; exit}'",
	         path, clients, clients < 2 ? 1 : 2, seconds, bench_dsn());
	FILE *p = popen(cmd, "r");
	double tps = -1;
	if (p != NULL) {
		if (fscanf(p, "%lf", &tps) != 1)
			tps = -1;
		pclose(p);
	}
	unlink(path);
	return tps;
}

#endif

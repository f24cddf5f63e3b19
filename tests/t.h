/* t.h - a tiny test harness: one process per case (meson runs each with a timeout), cases
 * named area__case, assertions that print both operands. Exit 77 means "skipped". */
#ifndef PGCOORD_T_H
#define PGCOORD_T_H

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define T_SKIP 77

#define T_FAIL(...)                                                                     \
	do {                                                                                \
		fprintf(stderr, "%s:%d: ", __FILE__, __LINE__);                                 \
		fprintf(stderr, __VA_ARGS__);                                                   \
		fputc('\n', stderr);                                                            \
		exit(1);                                                                        \
	} while (0)

#define T_ASSERT(cond)                                                                  \
	do {                                                                                \
		if (!(cond))                                                                    \
			T_FAIL("assertion failed: %s", #cond);                                      \
	} while (0)

#define T_ASSERT_INT_EQ(a, b)                                                           \
	do {                                                                                \
		long long t_a_ = (long long)(a), t_b_ = (long long)(b);                         \
		if (t_a_ != t_b_)                                                               \
			T_FAIL("%s == %s: %lld != %lld", #a, #b, t_a_, t_b_);                        \
	} while (0)

#define T_ASSERT_STR_EQ(a, b)                                                           \
	do {                                                                                \
		const char *t_a_ = (a), *t_b_ = (b);                                            \
		if (t_a_ == NULL || t_b_ == NULL || strcmp(t_a_, t_b_) != 0)                    \
			T_FAIL("%s == %s: \"%s\" != \"%s\"", #a, #b, t_a_ ? t_a_ : "(null)",          \
			       t_b_ ? t_b_ : "(null)");                                             \
	} while (0)

#define T_ASSERT_NOT_CONTAINS(hay, needle)                                              \
	do {                                                                                \
		const char *t_h_ = (hay), *t_n_ = (needle);                                     \
		if (t_h_ != NULL && strstr(t_h_, t_n_) != NULL)                                 \
			T_FAIL("%s contains \"%s\": \"%s\"", #hay, t_n_, t_h_);                      \
	} while (0)

#define T_ASSERT_CONTAINS(hay, needle)                                                  \
	do {                                                                                \
		const char *t_h_ = (hay), *t_n_ = (needle);                                     \
		if (t_h_ == NULL || strstr(t_h_, t_n_) == NULL)                                 \
			T_FAIL("%s does not contain \"%s\": \"%s\"", #hay, t_n_, t_h_ ? t_h_ : "(null)"); \
	} while (0)

typedef struct t_case {
	const char *name;
	void (*fn)(void);
} t_case;

/* Runs the case named argv[1] (or all of them, in order, without an argument); "--list"
 * prints the names, one a line, for the check that meson registers every case. */
static inline int t_main(int argc, char **argv, const t_case *cases)
{
	if (argc > 1 && strcmp(argv[1], "--list") == 0) {
		for (const t_case *c = cases; c->name; c++)
			printf("%s\n", c->name);
		return 0;
	}
	for (const t_case *c = cases; c->name; c++) {
		if (argc > 1 && strcmp(argv[1], c->name) != 0)
			continue;
		c->fn();
		if (argc > 1)
			return 0;
	}
	if (argc > 1) {
		fprintf(stderr, "no test case named %s\n", argv[1]);
		return 1;
	}
	return 0;
}

/* Sleeps ms milliseconds (less when a signal arrives). */
static inline void sleep_ms(int ms)
{
	struct timespec ts = { ms / 1000, (long)(ms % 1000) * 1000000L };
	nanosleep(&ts, NULL);
}

/* The server for integration tests, or a skip when there is none. */
static inline const char *t_dsn(void)
{
	const char *dsn = getenv("PGCOORD_TEST_DSN");
	if (dsn == NULL || *dsn == '\0') {
		fprintf(stderr, "skipped: PGCOORD_TEST_DSN is not set (run through make test)\n");
		exit(T_SKIP);
	}
	return dsn;
}

/* Only for tests that include pgcoord.h: connects to the test server or fails the test. */
#ifdef PGCOORD_H
static inline pgc_conn *t_connect(const char *application_name)
{
	pgc_conn_options opts = PGC_CONN_OPTIONS_INIT;
	opts.application_name = application_name;
	pgc_conn *c = NULL;
	pgc_error err = PGC_ERROR_INIT;
	if (pgc_connect(t_dsn(), &opts, &c, &err) != PGC_OK)
		T_FAIL("connect: %s", err.message);
	return c;
}
#endif

#endif

/* fuzz_cron.c - the cron parser on any bytes: never crashes, refuses with one clear line, and
 * what it accepts normalizes to a form that parses to itself and fires at the same times;
 * the next fire time is strictly later and found within the bound. A second line, when there
 * is one, goes to pgc_cron_parse_time. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <pgcoord.h>

/* libFuzzer's entry point (and replay.c's). */
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void check_error(int rc, const pgc_error *err)
{
	if (rc != PGC_EUSAGE || err->message[0] == '\0' || strchr(err->message, '\n') != NULL)
		abort();
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	static const char *const zones[] = { NULL, "Europe/Berlin", "America/New_York", "Australia/Lord_Howe" };
	char *s = malloc(size + 1);
	if (s == NULL)
		return 0;
	memcpy(s, data, size);
	s[size] = '\0';
	char *when = strchr(s, '\n');
	if (when != NULL)
		*when++ = '\0';
	const char *tz = zones[size % 4];
	pgc_cron *c = NULL, *n = NULL;
	pgc_error err;
	int rc = pgc_cron_parse(s, tz, &c, &err);
	if (rc != PGC_OK) {
		check_error(rc, &err);
		if (c != NULL)
			abort();
		free(s);
		return 0;
	}
	const char *norm = pgc_cron_normalized(c);
	if (norm == NULL || strlen(norm) > PGC_CRON_EXPR_MAX || pgc_cron_parse(norm, tz, &n, &err) != PGC_OK ||
	    strcmp(pgc_cron_normalized(n), norm) != 0 || pgc_cron_has_seconds(n) != pgc_cron_has_seconds(c))
		abort();
	/* The same times from both, from a few instants, each strictly later. */
	static const int64_t starts[] = { 0, 1774745999, 1792888199, 4102444800, INT64_C(253402300000) };
	for (size_t i = 0; i < sizeof starts / sizeof starts[0]; i++) {
		int64_t t = starts[i];
		for (int k = 0; k < 3; k++) {
			int64_t a, b;
			pgc_error e2;
			int r1 = pgc_cron_next(c, t, &a, &err), r2 = pgc_cron_next(n, t, &b, &e2);
			if (r1 != r2)
				abort();
			if (r1 != PGC_OK) {
				if (r1 != PGC_ENOTFOUND || err.message[0] == '\0')
					abort();
				break;
			}
			if (a != b || a <= t || a > PGC_CRON_TIME_LAST)
				abort();
			char buf[PGC_CRON_TIME_MAX];
			if (pgc_cron_format_local(c, a, buf, sizeof buf, &err) != PGC_OK || buf[0] == '\0')
				abort();
			t = a;
		}
	}
	if (when != NULL) {
		int64_t t;
		rc = pgc_cron_parse_time(c, when, &t, &err);
		if (rc != PGC_OK)
			check_error(rc, &err);
		else if (t < PGC_CRON_TIME_MIN || t > PGC_CRON_TIME_LAST)
			abort();
	}
	pgc_cron_free(n);
	pgc_cron_free(c);
	free(s);
	return 0;
}

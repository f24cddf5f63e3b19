/* fuzz_dsn_mask.c - pgc_dsn_mask never crashes, and never shows a password it was given (under
 * password or sslpassword; pgc__dsn_mask_all, for strings libpq refuses, under any keyword)
 *
 * The input is used twice: as a DSN on its own (no crash, one-line-safe output), and as a
 * password placed in URI and key=value DSNs written the ways libpq accepts (raw in a URI,
 * percent-encoded, single-quoted with escapes, bare with escapes), whose masked form must be
 * exactly the template with "****" in its place. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <pgcoord.h>

#include "conn/conn_int.h"

static void expect(const char *dsn, const char *want)
{
	char *got = pgc_dsn_mask(dsn);
	if (got == NULL || strcmp(got, want) != 0) {
		fprintf(stderr, "mask(%s) = %s, expected %s\n", dsn, got ? got : "(null)", want);
		abort();
	}
	pgc_free(got);
}

/* libFuzzer's entry point (and replay.c's). */
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	if (size > 4096)
		return 0;
	char *s = malloc(size + 1);
	if (s == NULL)
		return 0;
	memcpy(s, data, size);
	s[size] = '\0';
	char *m = pgc_dsn_mask(s);
	if (m == NULL)
		abort();
	pgc_free(m);

	/* The password: the printable, non-space bytes of the input. */
	size_t n = 0;
	for (size_t i = 0; i < size; i++)
		if (data[i] > ' ' && data[i] < 0x7f)
			s[n++] = (char)data[i];
	s[n] = '\0';
	if (n == 0) {
		free(s);
		return 0;
	}
	size_t cap = 6 * n + 64;
	char *dsn = malloc(cap), *enc = malloc(3 * n + 1), *esc = malloc(2 * n + 1);
	if (dsn == NULL || enc == NULL || esc == NULL)
		abort();

	snprintf(dsn, cap, "postgresql://u:%s@h/db", s);
	if (strcasestr(s, "password=") == NULL) {
		expect(dsn, "postgresql://u:****@h/db");
	} else {
		/* A raw password that itself looks like a password parameter is masked with more
		 * around it; it must still never show. */
		char *got = pgc_dsn_mask(dsn);
		if (got == NULL || strstr(got, s) != NULL || strncmp(got, "postgresql://u:****", 19) != 0)
			abort();
		pgc_free(got);
	}

	size_t e = 0;
	for (size_t i = 0; i < n; i++) {
		if ((s[i] >= 'a' && s[i] <= 'z') || (s[i] >= 'A' && s[i] <= 'Z') || (s[i] >= '0' && s[i] <= '9'))
			enc[e++] = s[i];
		else
			e += (size_t)sprintf(enc + e, "%%%02X", (unsigned char)s[i]);
	}
	enc[e] = '\0';
	snprintf(dsn, cap, "postgresql://u:%s@h:5432/db?sslmode=disable", enc);
	expect(dsn, "postgresql://u:****@h:5432/db?sslmode=disable");
	snprintf(dsn, cap, "postgresql://h/db?sslmode=disable&password=%s", enc);
	expect(dsn, "postgresql://h/db?sslmode=disable&password=****");

	e = 0;
	for (size_t i = 0; i < n; i++) {
		if (s[i] == '\'' || s[i] == '\\')
			esc[e++] = '\\';
		esc[e++] = s[i];
	}
	esc[e] = '\0';
	snprintf(dsn, cap, "host=h password='%s' dbname=d", esc);
	expect(dsn, "host=h password='****' dbname=d");
	snprintf(dsn, cap, "host=h sslpassword='%s' dbname=d", esc);
	expect(dsn, "host=h sslpassword='****' dbname=d");
	/* A misspelt keyword makes libpq refuse the string; then every value is masked. */
	snprintf(dsn, cap, "host=h pasword='%s' dbname=d", esc);
	char *all = pgc__dsn_mask_all(dsn);
	if (all == NULL || strcmp(all, "host=**** pasword='****' dbname=****") != 0) {
		fprintf(stderr, "mask_all(%s) = %s\n", dsn, all ? all : "(null)");
		abort();
	}
	pgc_free(all);
	if (s[0] != '\'') {
		snprintf(dsn, cap, "host=h password=%s dbname=d", esc);
		expect(dsn, "host=h password=**** dbname=d");
	}
	free(dsn);
	free(enc);
	free(esc);
	free(s);
	return 0;
}

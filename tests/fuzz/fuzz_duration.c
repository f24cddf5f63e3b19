/* fuzz_duration.c - pgc_duration_parse on any bytes: never crashes, what it accepts is sane,
 * and pgc_duration_format writes it back in a form that parses to the same value */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <pgcoord.h>

/* libFuzzer's entry point (and replay.c's). */
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	char *s = malloc(size + 1);
	if (s == NULL)
		return 0;
	memcpy(s, data, size);
	s[size] = '\0';
	int64_t ms = -1;
	pgc_error err;
	int rc = pgc_duration_parse(s, &ms, &err);
	if (rc == PGC_OK) {
		/* Accepted: a non-negative value below the documented ceiling, from a string that
		 * starts with a digit. */
		if (ms < 0 || ms > (INT64_C(1) << 53) * 2 || s[0] < '0' || s[0] > '9')
			abort();
		char buf[PGC_DURATION_FORMAT_MAX];
		int64_t back = -1;
		if (pgc_duration_format(ms, buf, sizeof buf, &err) != PGC_OK ||
		    pgc_duration_parse(buf, &back, &err) != PGC_OK || back != ms)
			abort();
	} else if (rc != PGC_EUSAGE || err.message[0] == '\0' || strchr(err.message, '\n') != NULL) {
		abort();
	}
	free(s);
	return 0;
}

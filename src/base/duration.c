/* duration.c - durations as people write them: the one parser and the one formatter
 *
 * Units: ms, s, m (or min), h and d. The formatter writes the largest unit that divides the
 * value exactly (90000 ms is "90s", 86400000 ms "1d"), so that what it writes parses back
 * to the same number of milliseconds. */
#include <stdio.h>
#include <string.h>

#include "base.h"

#define DURATION_MAX_MS (INT64_C(1) << 53)

int pgc_duration_parse(const char *text, int64_t *out_ms, pgc_error *err)
{
	pgc_error_clear(err);
	if (text == NULL || out_ms == NULL)
		return pgc__err(err, PGC_EUSAGE, "pgc_duration_parse: text and out_ms must not be NULL");
	const char *p = text;
	if (*p == '\0')
		return pgc__err(err, PGC_EUSAGE, "empty duration");
	if (*p < '0' || *p > '9')
		return pgc__err(err, PGC_EUSAGE, "invalid duration \"%.40s\": expected a number such as 500ms, 2s or 5m", text);
	int64_t whole = 0;
	while (*p >= '0' && *p <= '9') {
		whole = whole * 10 + (*p - '0');
		if (whole > DURATION_MAX_MS)
			return pgc__err(err, PGC_EUSAGE, "duration \"%.40s\" is too large", text);
		p++;
	}
	/* Up to three fractional digits: enough for milliseconds of a second. */
	int64_t frac = 0, frac_scale = 1;
	if (*p == '.') {
		p++;
		if (*p < '0' || *p > '9')
			return pgc__err(err, PGC_EUSAGE, "invalid duration \"%.40s\": digits expected after the point", text);
		while (*p >= '0' && *p <= '9') {
			if (frac_scale < 1000000) {
				frac = frac * 10 + (*p - '0');
				frac_scale *= 10;
			}
			p++;
		}
	}
	int64_t unit;
	if (*p == '\0' || strcmp(p, "s") == 0)
		unit = 1000;
	else if (strcmp(p, "ms") == 0)
		unit = 1;
	else if (strcmp(p, "m") == 0 || strcmp(p, "min") == 0)
		unit = 60000;
	else if (strcmp(p, "h") == 0)
		unit = 3600000;
	else if (strcmp(p, "d") == 0)
		unit = 86400000;
	else
		return pgc__err(err, PGC_EUSAGE, "invalid duration \"%.40s\": unknown unit (use ms, s, m, h or d)", text);
	if (whole > DURATION_MAX_MS / unit)
		return pgc__err(err, PGC_EUSAGE, "duration \"%.40s\" is too large", text);
	int64_t ms = whole * unit + frac * unit / frac_scale;
	if (ms > DURATION_MAX_MS) /* the fraction can carry past the ceiling */
		return pgc__err(err, PGC_EUSAGE, "duration \"%.40s\" is too large", text);
	*out_ms = ms;
	return PGC_OK;
}

int pgc_duration_format(int64_t ms, char *buf, size_t size, pgc_error *err)
{
	pgc_error_clear(err);
	if (buf != NULL && size > 0)
		buf[0] = '\0';
	if (buf == NULL || size < PGC_DURATION_FORMAT_MAX)
		return pgc__err(err, PGC_EUSAGE, "pgc_duration_format: buf must not be NULL and hold %d bytes",
		                PGC_DURATION_FORMAT_MAX);
	if (ms < 0)
		return pgc__err(err, PGC_EUSAGE, "pgc_duration_format: the duration must not be negative");
	static const struct { int64_t ms; const char *name; } units[] = {
		{ 86400000, "d" }, { 3600000, "h" }, { 60000, "m" }, { 1000, "s" }, { 1, "ms" },
	};
	if (ms == 0) {
		snprintf(buf, size, "0s");
		return PGC_OK;
	}
	for (size_t i = 0; i < sizeof units / sizeof units[0]; i++) {
		if (ms % units[i].ms == 0) {
			snprintf(buf, size, "%lld%s", (long long)(ms / units[i].ms), units[i].name);
			break;
		}
	}
	return PGC_OK;
}

int pgc_rate_parse(const char *text, pgc_rate *out, pgc_error *err)
{
	pgc_error_clear(err);
	if (text == NULL || out == NULL)
		return pgc__err(err, PGC_EUSAGE, "pgc_rate_parse: text and out must not be NULL");
	const char *slash = strchr(text, '/');
	if (slash == NULL)
		return pgc__err(err, PGC_EUSAGE, "invalid rate \"%.40s\": expected N/DURATION such as 50/1s or 1000/1m", text);
	long long n = 0;
	const char *p = text;
	if (p == slash)
		return pgc__err(err, PGC_EUSAGE, "invalid rate \"%.40s\": the number of starts before the / is missing", text);
	for (; p < slash; p++) {
		if (*p < '0' || *p > '9')
			return pgc__err(err, PGC_EUSAGE, "invalid rate \"%.40s\": the number of starts must be a positive integer", text);
		n = n * 10 + (*p - '0');
		if (n > PGC_RATE_MAX_N)
			return pgc__err(err, PGC_EUSAGE, "rate \"%.40s\": at most %d starts per interval", text, PGC_RATE_MAX_N);
	}
	if (n < 1)
		return pgc__err(err, PGC_EUSAGE, "rate \"%.40s\": the number of starts must be at least 1", text);
	if (slash[1] == '\0')
		return pgc__err(err, PGC_EUSAGE, "invalid rate \"%.40s\": the interval after the / is missing", text);
	int64_t ms;
	pgc_error e;
	if (pgc_duration_parse(slash + 1, &ms, &e) != PGC_OK)
		return pgc__err(err, PGC_EUSAGE, "invalid rate \"%.40s\": %s", text, e.message);
	if (ms < 1)
		return pgc__err(err, PGC_EUSAGE, "rate \"%.40s\": the interval must be at least 1ms", text);
	out->n = (int)n;
	out->per_ms = ms;
	return PGC_OK;
}

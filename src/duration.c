/* util.c - small parsers shared by the library and the tool (durations) */
#include <stdio.h>
#include <string.h>

#include "internal.h"

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
	else
		return pgc__err(err, PGC_EUSAGE, "invalid duration \"%.40s\": unknown unit (use ms, s, m or h)", text);
	if (whole > DURATION_MAX_MS / unit)
		return pgc__err(err, PGC_EUSAGE, "duration \"%.40s\" is too large", text);
	*out_ms = whole * unit + frac * unit / frac_scale;
	return PGC_OK;
}

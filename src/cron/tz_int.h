/* tz_int.h - time zones from the host's tzdata, for the cron schedules (tz.c); never installed
 *
 * A zone is read from its TZif file (RFC 8536: versions 1 to 4, the 64-bit data when there is
 * one, and the POSIX TZ string of the footer for instants past the table) and is immutable
 * once loaded, so any thread may use it. Zones are cached by name and reference-counted;
 * a zone whose file changed is read again by the next pgc__tz_get(). */
#ifndef PGCOORD_TZ_INT_H
#define PGCOORD_TZ_INT_H

#include <stdbool.h>
#include <stdint.h>

#include "pgcoord.h"

typedef struct pgc__tz pgc__tz;

/* What holds at one instant: the offset and the segment of constant offset around it. */
typedef struct pgc__tz_info {
	int32_t utoff;      /* seconds east of UTC */
	bool isdst;
	const char *abbr;   /* owned by the zone */
	int64_t start;      /* the transition that began this state (<= t), or INT64_MIN */
	int64_t next;       /* the next transition (> t), or INT64_MAX */
} pgc__tz_info;

/* The zone named name (NULL or "" and "UTC": the built-in UTC, no file needed), with a
 * reference the caller drops with pgc__tz_release(). Returns a pgc_code: PGC_EUSAGE for an
 * unsafe or unknown name or a file that is not usable TZif data, PGC_ENOMEM. */
int pgc__tz_get(const char *name, pgc__tz **out, pgc_error *err);
void pgc__tz_release(pgc__tz *z);

/* The zone's name ("UTC" for the built-in one). */
const char *pgc__tz_name(const pgc__tz *z);

/* The state at instant t. */
void pgc__tz_lookup(const pgc__tz *z, int64_t t, pgc__tz_info *out);

/* The UTC instants whose local time is local (seconds since 1970-01-01 00:00 on the wall
 * clock): 0, 1 or 2 of them into out[0..1] in increasing order, the count returned. When
 * none (a gap), *gap_end is the first instant after the gap. */
int pgc__tz_from_local(const pgc__tz *z, int64_t local, int64_t out[2], int64_t *gap_end);

/* Civil calendar helpers, proleptic Gregorian (Howard Hinnant's algorithms). */
int64_t pgc__days_from_civil(int64_t y, int m, int d);
void pgc__civil_from_days(int64_t days, int64_t *y, int *m, int *d);
/* 0 (Sunday)..6. */
int pgc__weekday(int64_t days);
bool pgc__leap_year(int64_t y);
int pgc__month_days(int64_t y, int m);

/* Floor division and its remainder, for negative times. */
static inline int64_t pgc__floordiv(int64_t a, int64_t b)
{
	int64_t q = a / b;
	return (a % b != 0 && ((a < 0) != (b < 0))) ? q - 1 : q;
}

/* For tests: parses a POSIX TZ string ("CET-1CEST,M3.5.0,M10.5.0/3") into a zone without a
 * table. PGC_EUSAGE when it is malformed. */
int pgc__tz_from_posix(const char *tzstr, pgc__tz **out, pgc_error *err);

#endif

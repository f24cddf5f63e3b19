/* pgcoord/duration.h - durations as people write them ("500ms", "2s", "5m", "1h", "1d") */
#ifndef PGCOORD_DURATION_H
#define PGCOORD_DURATION_H

#include "common.h"
#include "error.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Parses a duration: a non-negative integer followed by a unit "ms", "s", "m" (or "min"), "h"
 * or "d" ("500ms", "2s", "5m", "1h", "1d"); a bare number means seconds; "1.5s" is accepted with up to
 * millisecond precision. The result is in milliseconds. Errors: PGC_EUSAGE naming what was
 * wrong (empty, bad number, unknown unit, overflow past 2^53 ms). Thread-safe. */
PGC_EXTERN PGC_MUSTCHECK int pgc_duration_parse(const char *text, int64_t *out_ms,
                                                pgc_error *err);

/* The size of a buffer that holds any duration pgc_duration_format() writes, terminator
 * included ("9223372036854775807ms" is 22 bytes). */
#define PGC_DURATION_FORMAT_MAX 24

/* Writes ms as a duration in the largest unit that divides it exactly: 86400000 is "1d",
 * 90000 "90s" (not "1m30s"), 1500 "1500ms", 0 "0s". What it writes, pgc_duration_parse()
 * reads back to the same value. buf must hold PGC_DURATION_FORMAT_MAX bytes.
 * Errors: PGC_EUSAGE (buf NULL or smaller than PGC_DURATION_FORMAT_MAX, ms negative; buf is
 * then "" when it can hold that). Thread-safe. */
PGC_EXTERN PGC_MUSTCHECK int pgc_duration_format(int64_t ms, char *buf, size_t size,
                                                 pgc_error *err);

/* A rate: at most n starts per per_ms milliseconds (flow control of the queue, see
 * <pgcoord/queue.h>). n = 0 means no rate. */
typedef struct pgc_rate {
	int n;
	int64_t per_ms;
} pgc_rate;

#define PGC_RATE_MAX_N 1000000

/* Parses a rate written N/DURATION ("50/1s", "1000/1m", "5/500ms"): N an integer from 1 to
 * PGC_RATE_MAX_N, DURATION as pgc_duration_parse() and at least 1 ms.
 * Errors: PGC_EUSAGE naming what was wrong ("0/1s", "5/0s", "x/1s", "5/", "5").
 * Thread-safe. */
PGC_EXTERN PGC_MUSTCHECK int pgc_rate_parse(const char *text, pgc_rate *out, pgc_error *err);

#ifdef __cplusplus
}
#endif
#endif

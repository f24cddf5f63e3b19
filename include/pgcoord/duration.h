/* pgcoord/duration.h - durations as people write them ("500ms", "2s", "5m", "1h") */
#ifndef PGCOORD_DURATION_H
#define PGCOORD_DURATION_H

#include "common.h"
#include "error.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Parses a duration: a non-negative integer followed by a unit "ms", "s", "m" or "h"
 * ("500ms", "2s", "5m", "1h"); a bare number means seconds; "1.5s" is accepted with up to
 * millisecond precision. The result is in milliseconds. Errors: PGC_EUSAGE naming what was
 * wrong (empty, bad number, unknown unit, overflow past 2^53 ms). Thread-safe. */
PGC_EXTERN PGC_MUSTCHECK int pgc_duration_parse(const char *text, int64_t *out_ms,
                                                pgc_error *err);

#ifdef __cplusplus
}
#endif
#endif

/* pgcoord/common.h - export macros, version and memory helpers shared by every area */
#ifndef PGCOORD_COMMON_H
#define PGCOORD_COMMON_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define PGC_VERSION_MAJOR 0
#define PGC_VERSION_MINOR 1
#define PGC_VERSION_PATCH 0
#define PGC_VERSION_STRING "0.1.0"
/* MAJOR * 10000 + MINOR * 100 + PATCH, for compile-time comparisons. */
#define PGC_VERSION_NUM (PGC_VERSION_MAJOR * 10000 + PGC_VERSION_MINOR * 100 + PGC_VERSION_PATCH)

#if defined(__GNUC__) || defined(__clang__)
#define PGC_EXTERN __attribute__((visibility("default")))
#define PGC_MUSTCHECK __attribute__((warn_unused_result))
#define PGC_PRINTF(f, a) __attribute__((format(printf, f, a)))
#else
#define PGC_EXTERN
#define PGC_MUSTCHECK
#define PGC_PRINTF(f, a)
#endif

/* The library's version at run time, "MAJOR.MINOR.PATCH". Static string. Thread-safe. */
PGC_EXTERN const char *pgc_version(void);

/* Frees memory the library returned to the caller (strings and arrays whose documentation says
 * "free with pgc_free"). NULL is accepted and ignored. Thread-safe. */
PGC_EXTERN void pgc_free(void *ptr);

#ifdef __cplusplus
}
#endif
#endif

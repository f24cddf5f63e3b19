/* util.h - small helpers that the library and the tool both use: a monotonic clock, a sleep,
 * growable arrays, a growable string with PostgreSQL array literals. Compiled into
 * libpgcoord; the tool, which otherwise sees only the public headers, may include this one (as
 * curl's tool uses curlx).
 * Nothing here talks to a server. */
#ifndef PGCOORD_UTIL_H
#define PGCOORD_UTIL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "pgcoord/common.h"

/* ---- clock (clock.c) ---------------------------------------------------------------------- */

/* CLOCK_MONOTONIC in milliseconds: every client-side deadline is taken from it. */
int64_t pgc__now_ms(void);

/* Sleeps ms milliseconds (nothing for ms <= 0), resuming after signals. */
void pgc__sleep_ms(int64_t ms);

/* ---- UTF-8 (buf.c) ------------------------------------------------------------------------ */

/* The length of the well-formed UTF-8 sequence at p (RFC 3629: no overlong forms, no
 * surrogates, nothing above U+10FFFF), or 0 when the bytes there are not one. A NUL byte ends
 * any sequence early, so reading never passes the terminator. */
size_t pgc__utf8_len(const unsigned char *p);

/* ---- string buffer (buf.c) ---------------------------------------------------------------- */

/* Makes room for need elements of elem bytes in the array *p, which has room for *cap: the
 * capacity doubles (from 8). false after an allocation failure; the array is then kept. */
bool pgc__grow(void **p, size_t *cap, size_t need, size_t elem);

/* A growable string. Start from PGC__SB_INIT; call the put functions in a series, then look
 * at oom once at the end: after an allocation failure every later write is dropped and oom
 * stays set (libgit2's git_str pattern). buf is always NUL-terminated once non-NULL. */
typedef struct pgc__sb {
	char *buf;
	size_t len, cap;
	bool oom;
} pgc__sb;

#define PGC__SB_INIT { NULL, 0, 0, false }

/* Makes room for extra more bytes (and the terminator); false after an allocation failure. */
bool pgc__sb_grow(pgc__sb *b, size_t extra);
void pgc__sb_put(pgc__sb *b, const char *s, size_t n);
void pgc__sb_puts(pgc__sb *b, const char *s);
void pgc__sb_putc(pgc__sb *b, char c);
void pgc__sb_free(pgc__sb *b);

/* Appends s as one element of a text[] literal: always double-quoted with " and \ escaped,
 * NULL as the unquoted NULL. Payloads, unique keys and queue names reach the server this way,
 * so the server's array_in must read back exactly s (tests/fuzz/fuzz_payload_lines.c checks
 * it). */
void pgc__sb_array_text(pgc__sb *b, const char *s);

/* A whole text[] literal of the n strings v (NULL elements as NULL): {"a","b",NULL}. */
void pgc__sb_text_array(pgc__sb *b, size_t n, const char *const *v);

/* A whole bigint[] literal of the n numbers v: {1,2,3}. */
void pgc__sb_int_array(pgc__sb *b, size_t n, const int64_t *v);

#endif

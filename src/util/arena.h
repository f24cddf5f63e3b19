/* arena.h - one owner for many small allocations: a snapshot's or a probe result's strings and
 * arrays, all freed at once
 *
 * Blocks of at least 16 KiB, handed out in max_align_t steps and never freed one by one. After
 * an allocation failure failed stays set, so a series of allocations is checked once at the end
 * (as pgc__sb's oom). */
#ifndef PGCOORD_ARENA_H
#define PGCOORD_ARENA_H

#include <stdbool.h>
#include <stddef.h>

#include "pgcoord/common.h"

typedef struct pgc__arena_block pgc__arena_block;

typedef struct pgc__arena {
	pgc__arena_block *head;
	bool failed;
} pgc__arena;

#define PGC__ARENA_INIT { NULL, false }

/* n bytes aligned for any type; NULL (and failed set) when out of memory. */
void *pgc__arena_alloc(pgc__arena *a, size_t n);

/* A copy of s in the arena; NULL for NULL, or when out of memory. */
char *pgc__arena_strdup(pgc__arena *a, const char *s);

/* A formatted string in the arena; NULL when out of memory. */
char *pgc__arena_printf(pgc__arena *a, const char *fmt, ...) PGC_PRINTF(2, 3);

/* Frees every block; the arena is empty (and usable) again. */
void pgc__arena_free(pgc__arena *a);

#endif

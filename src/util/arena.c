/* arena.c - the allocator behind diagnostics snapshots and probe results (see arena.h) */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "arena.h"

#define BLOCK_MIN 16384

struct pgc__arena_block {
	pgc__arena_block *next;
	size_t used, cap;
	max_align_t data[];
};

void *pgc__arena_alloc(pgc__arena *a, size_t n)
{
	n = (n + sizeof(max_align_t) - 1) / sizeof(max_align_t) * sizeof(max_align_t);
	if (n == 0)
		n = sizeof(max_align_t);
	pgc__arena_block *b = a->head;
	if (b == NULL || b->cap - b->used < n) {
		size_t cap = n > BLOCK_MIN ? n : BLOCK_MIN;
		b = malloc(sizeof *b + cap);
		if (b == NULL) {
			a->failed = true;
			return NULL;
		}
		b->next = a->head;
		b->used = 0;
		b->cap = cap;
		a->head = b;
	}
	void *p = (char *)b->data + b->used;
	b->used += n;
	return p;
}

char *pgc__arena_strdup(pgc__arena *a, const char *s)
{
	if (s == NULL)
		return NULL;
	size_t n = strlen(s) + 1;
	char *p = pgc__arena_alloc(a, n);
	if (p != NULL)
		memcpy(p, s, n);
	return p;
}

char *pgc__arena_printf(pgc__arena *a, const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	int n = vsnprintf(NULL, 0, fmt, ap);
	va_end(ap);
	if (n < 0)
		return NULL;
	char *p = pgc__arena_alloc(a, (size_t)n + 1);
	if (p == NULL)
		return NULL;
	va_start(ap, fmt);
	vsnprintf(p, (size_t)n + 1, fmt, ap);
	va_end(ap);
	return p;
}

void pgc__arena_free(pgc__arena *a)
{
	pgc__arena_block *b = a->head;
	while (b != NULL) {
		pgc__arena_block *next = b->next;
		free(b);
		b = next;
	}
	a->head = NULL;
	a->failed = false;
}

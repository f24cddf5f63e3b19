/* buf.c - growable arrays and strings, the PostgreSQL array literals built with them, UTF-8
 *
 * Values that go to the server as arrays (ids, tokens, payloads, queue names) are written as
 * one array literal and sent as one text parameter: never pasted into SQL. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "util.h"

bool pgc__grow(void **p, size_t *cap, size_t need, size_t elem)
{
	if (need <= *cap)
		return true;
	size_t c = *cap ? *cap : 8;
	while (c < need)
		c *= 2;
	if (c > SIZE_MAX / elem)
		return false;
	void *q = realloc(*p, c * elem);
	if (q == NULL)
		return false;
	*p = q;
	*cap = c;
	return true;
}

bool pgc__sb_grow(pgc__sb *b, size_t extra)
{
	if (b->oom)
		return false;
	if (b->len + extra + 1 <= b->cap)
		return true;
	size_t cap = b->cap ? b->cap : 256;
	while (cap < b->len + extra + 1)
		cap *= 2;
	char *p = realloc(b->buf, cap);
	if (p == NULL) {
		b->oom = true;
		return false;
	}
	b->buf = p;
	b->cap = cap;
	return true;
}

void pgc__sb_put(pgc__sb *b, const char *s, size_t n)
{
	if (!pgc__sb_grow(b, n))
		return;
	memcpy(b->buf + b->len, s, n);
	b->len += n;
	b->buf[b->len] = '\0';
}

void pgc__sb_puts(pgc__sb *b, const char *s)
{
	pgc__sb_put(b, s, strlen(s));
}

void pgc__sb_putc(pgc__sb *b, char c)
{
	pgc__sb_put(b, &c, 1);
}

void pgc__sb_free(pgc__sb *b)
{
	free(b->buf);
	memset(b, 0, sizeof *b);
}

void pgc__sb_array_text(pgc__sb *b, const char *s)
{
	if (s == NULL) {
		pgc__sb_puts(b, "NULL");
		return;
	}
	size_t n = strlen(s);
	if (!pgc__sb_grow(b, 2 * n + 2))
		return;
	char *o = b->buf + b->len;
	*o++ = '"';
	for (const char *p = s; *p; p++) {
		if (*p == '"' || *p == '\\')
			*o++ = '\\';
		*o++ = *p;
	}
	*o++ = '"';
	*o = '\0';
	b->len = (size_t)(o - b->buf);
}

void pgc__sb_text_array(pgc__sb *b, size_t n, const char *const *v)
{
	pgc__sb_putc(b, '{');
	for (size_t i = 0; i < n; i++) {
		if (i)
			pgc__sb_putc(b, ',');
		pgc__sb_array_text(b, v[i]);
	}
	pgc__sb_putc(b, '}');
}

void pgc__sb_int_array(pgc__sb *b, size_t n, const int64_t *v)
{
	pgc__sb_putc(b, '{');
	for (size_t i = 0; i < n; i++) {
		char num[24];
		snprintf(num, sizeof num, i ? ",%lld" : "%lld", (long long)v[i]);
		pgc__sb_puts(b, num);
	}
	pgc__sb_putc(b, '}');
}

/* ---- UTF-8 ----------------------------------------------------------------------------- */

size_t pgc__utf8_len(const unsigned char *p)
{
	unsigned char c = p[0];
	if (c < 0x80)
		return 1;
	size_t n;
	unsigned char lo = 0x80, hi = 0xBF; /* the range allowed for the second byte */
	if (c >= 0xC2 && c <= 0xDF) {
		n = 2;
	} else if (c >= 0xE0 && c <= 0xEF) {
		n = 3;
		if (c == 0xE0)
			lo = 0xA0; /* overlong */
		else if (c == 0xED)
			hi = 0x9F; /* surrogates */
	} else if (c >= 0xF0 && c <= 0xF4) {
		n = 4;
		if (c == 0xF0)
			lo = 0x90; /* overlong */
		else if (c == 0xF4)
			hi = 0x8F; /* above U+10FFFF */
	} else {
		return 0;
	}
	if (p[1] < lo || p[1] > hi)
		return 0;
	for (size_t i = 2; i < n; i++)
		if (p[i] < 0x80 || p[i] > 0xBF)
			return 0;
	return n;
}

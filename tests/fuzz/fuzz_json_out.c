/* fuzz_json_out.c - every string the tool prints with --json goes through json_str: names
 * given on the command line, and text from the server (application names, queries, lock
 * names) that a SQL_ASCII database lets hold any bytes. Whatever the bytes, the output is one
 * valid JSON string (RFC 8259: UTF-8, no raw control characters, only the defined escapes),
 * and it reads back as the input, each byte that does not begin a well-formed UTF-8 sequence
 * (RFC 3629) replaced by U+FFFD. */
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"

#define CHECK(cond, ...)                                                                         \
	do {                                                                                     \
		if (!(cond)) {                                                                   \
			fprintf(stderr, __VA_ARGS__);                                            \
			fputc('\n', stderr);                                                     \
			abort();                                                                 \
		}                                                                                \
	} while (0)

/* The code point of the well-formed sequence at s[0..n), by its definition: decode, then
 * refuse overlong forms, surrogates and values above U+10FFFF. Returns its length, 0 if
 * none. */
static size_t decode_utf8(const unsigned char *s, size_t n, uint32_t *cp)
{
	static const uint32_t min_for_len[5] = { 0, 0, 0x80, 0x800, 0x10000 };
	size_t len;
	uint32_t v;
	if (s[0] < 0x80) {
		*cp = s[0];
		return 1;
	} else if ((s[0] & 0xE0) == 0xC0) {
		len = 2;
		v = s[0] & 0x1F;
	} else if ((s[0] & 0xF0) == 0xE0) {
		len = 3;
		v = s[0] & 0x0F;
	} else if ((s[0] & 0xF8) == 0xF0) {
		len = 4;
		v = s[0] & 0x07;
	} else {
		return 0;
	}
	if (len > n)
		return 0;
	for (size_t i = 1; i < len; i++) {
		if ((s[i] & 0xC0) != 0x80)
			return 0;
		v = (v << 6) | (s[i] & 0x3F);
	}
	if (v < min_for_len[len] || v > 0x10FFFF || (v >= 0xD800 && v <= 0xDFFF))
		return 0;
	*cp = v;
	return len;
}

static int hexval(int c)
{
	if (c >= '0' && c <= '9')
		return c - '0';
	if (c >= 'a' && c <= 'f')
		return c - 'a' + 10;
	if (c >= 'A' && c <= 'F')
		return c - 'A' + 10;
	return -1;
}

static void put_utf8(unsigned char **o, uint32_t cp)
{
	unsigned char *p = *o;
	if (cp < 0x80) {
		*p++ = (unsigned char)cp;
	} else if (cp < 0x800) {
		*p++ = (unsigned char)(0xC0 | (cp >> 6));
		*p++ = (unsigned char)(0x80 | (cp & 0x3F));
	} else if (cp < 0x10000) {
		*p++ = (unsigned char)(0xE0 | (cp >> 12));
		*p++ = (unsigned char)(0x80 | ((cp >> 6) & 0x3F));
		*p++ = (unsigned char)(0x80 | (cp & 0x3F));
	} else {
		*p++ = (unsigned char)(0xF0 | (cp >> 18));
		*p++ = (unsigned char)(0x80 | ((cp >> 12) & 0x3F));
		*p++ = (unsigned char)(0x80 | ((cp >> 6) & 0x3F));
		*p++ = (unsigned char)(0x80 | (cp & 0x3F));
	}
	*o = p;
}

/* libFuzzer's entry point (and replay.c's). */
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	/* json_str takes a C string: the input up to its first NUL. */
	size_t n = strnlen((const char *)data, size);
	char *in = malloc(n + 1);
	/* Each input byte becomes at most 6 output bytes ("\u001f", or U+FFFD's 3 bytes decoded). */
	unsigned char *want = malloc(3 * n + 1), *got = malloc(4 * n + 1);
	if (in == NULL || want == NULL || got == NULL)
		abort();
	memcpy(in, data, n);
	in[n] = '\0';

	char *out = NULL;
	size_t outlen = 0;
	FILE *f = open_memstream(&out, &outlen);
	if (f == NULL)
		abort();
	json_str(f, in);
	fclose(f);

	/* What the output must read back as. */
	unsigned char *w = want;
	for (size_t i = 0; i < n;) {
		uint32_t cp;
		size_t len = decode_utf8((const unsigned char *)in + i, n - i, &cp);
		if (len == 0) {
			put_utf8(&w, 0xFFFD);
			i++;
		} else {
			memcpy(w, in + i, len);
			w += len;
			i += len;
		}
	}

	/* A strict reading of a JSON string. */
	const unsigned char *p = (const unsigned char *)out, *e = p + outlen;
	unsigned char *g = got;
	CHECK(outlen >= 2 && p[0] == '"' && e[-1] == '"', "not a quoted string: %s", out);
	p++;
	e--;
	while (p < e) {
		if (*p == '\\') {
			CHECK(p + 1 < e, "a lone backslash at the end");
			switch (p[1]) {
			case '"': *g++ = '"'; p += 2; break;
			case '\\': *g++ = '\\'; p += 2; break;
			case '/': *g++ = '/'; p += 2; break;
			case 'b': *g++ = '\b'; p += 2; break;
			case 'f': *g++ = '\f'; p += 2; break;
			case 'n': *g++ = '\n'; p += 2; break;
			case 'r': *g++ = '\r'; p += 2; break;
			case 't': *g++ = '\t'; p += 2; break;
			case 'u': {
				CHECK(e - p >= 6, "a short \\u escape");
				uint32_t cp = 0;
				for (int k = 2; k < 6; k++) {
					int h = hexval(p[k]);
					CHECK(h >= 0, "a bad hex digit in a \\u escape");
					cp = cp * 16 + (uint32_t)h;
				}
				CHECK(cp < 0xD800 || cp > 0xDFFF, "a surrogate escape (json_str never needs one)");
				put_utf8(&g, cp);
				p += 6;
				break;
			}
			default:
				CHECK(0, "an undefined escape \\%c", p[1]);
			}
		} else {
			CHECK(*p >= 0x20, "a raw control character 0x%02x", *p);
			CHECK(*p != '"', "an unescaped quote inside the string");
			uint32_t cp;
			size_t len = decode_utf8(p, (size_t)(e - p), &cp);
			CHECK(len > 0, "the output is not UTF-8 at byte %zu", (size_t)(p - (const unsigned char *)out));
			memcpy(g, p, len);
			g += len;
			p += len;
		}
	}
	CHECK((size_t)(g - got) == (size_t)(w - want) && memcmp(got, want, (size_t)(g - got)) == 0,
	      "the output does not read back as the input");

	free(out);
	free(in);
	free(want);
	free(got);
	return 0;
}

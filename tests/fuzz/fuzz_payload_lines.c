/* fuzz_payload_lines.c - the client's half of a JSON payload's way to the server: a batch
 * file (`pgcoord queue enqueue --file`) is split into its non-blank lines, and the lines are
 * sent as one text[] literal. The input is the file. Checked against references written
 * here from the rules, not from our code:
 * - the lines and their 1-based numbers are exactly the file's non-blank lines (blank: only
 *   spaces and tabs), each without its newline and one final CR; a NUL byte is refused;
 * - the array literal, read back by PostgreSQL's array_in rules (a double-quoted element
 *   takes every byte literally but for backslash, which escapes the next byte; an unquoted
 *   NULL is null), gives back every line byte for byte, and the NULL.
 * Whether a line is valid JSON is for the server to say (the payload column is jsonb); the
 * queue tests check that a bad line is reported with its number and nothing is enqueued. */
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "queue/queue_int.h"

#define CHECK(cond, ...)                                                                         \
	do {                                                                                     \
		if (!(cond)) {                                                                   \
			fprintf(stderr, __VA_ARGS__);                                            \
			fputc('\n', stderr);                                                     \
			abort();                                                                 \
		}                                                                                \
	} while (0)

/* Reads one element of an array literal at *p; NULL-terminated copy in *out (NULL for the
 * unquoted NULL). Returns false on a malformed literal. */
static bool read_element(const char **p, char **out, size_t *outlen)
{
	const char *s = *p;
	if (strncmp(s, "NULL", 4) == 0 && (s[4] == ',' || s[4] == '}')) {
		*out = NULL;
		*p = s + 4;
		return true;
	}
	if (*s != '"')
		return false;
	s++;
	size_t cap = strlen(s) + 1, n = 0;
	char *o = malloc(cap);
	if (o == NULL)
		abort();
	for (;;) {
		if (*s == '\0') {
			free(o);
			return false;
		}
		if (*s == '"')
			break;
		if (*s == '\\') {
			s++;
			if (*s == '\0') {
				free(o);
				return false;
			}
		}
		o[n++] = *s++;
	}
	o[n] = '\0';
	*out = o;
	*outlen = n;
	*p = s + 1;
	return true;
}

/* libFuzzer's entry point (and replay.c's). */
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	char *buf = malloc(size + 1);
	if (buf == NULL)
		return 0;
	memcpy(buf, data, size);
	cli_lines l;
	int rc = cli_split_lines(buf, size, &l); /* l owns buf from here */
	if (memchr(data, '\0', size) != NULL) {
		CHECK(rc == CLI_LINES_NUL, "a file with a NUL byte was not refused (rc %d)", rc);
		cli_lines_free(&l);
		return 0;
	}
	CHECK(rc == 0, "splitting failed: %d", rc);

	/* The reference split, over the original bytes. */
	size_t k = 0;
	long no = 0;
	const char *d = (const char *)data, *end = d + size;
	while (d < end) {
		const char *nl = memchr(d, '\n', (size_t)(end - d));
		const char *stop = nl ? nl : end;
		size_t len = (size_t)(stop - d);
		no++;
		if (len > 0 && d[len - 1] == '\r')
			len--;
		size_t i = 0;
		while (i < len && (d[i] == ' ' || d[i] == '\t'))
			i++;
		if (i < len) {
			CHECK(k < l.n, "line %ld is missing", no);
			CHECK(l.lineno[k] == no, "line %ld reported as line %ld", no, l.lineno[k]);
			CHECK(strlen(l.line[k]) == len && memcmp(l.line[k], d, len) == 0,
			      "line %ld differs", no);
			k++;
		}
		d = stop + 1;
	}
	CHECK(k == l.n, "%zu lines found, %zu expected", l.n, k);

	/* The array literal the queue sends, and the server's reading of it. */
	pgc__sb sb = { 0 };
	pgc__sb_putc(&sb, '{');
	for (size_t i = 0; i < l.n; i++) {
		pgc__sb_array_text(&sb, l.line[i]);
		pgc__sb_putc(&sb, ',');
	}
	pgc__sb_array_text(&sb, NULL);
	pgc__sb_putc(&sb, '}');
	CHECK(!sb.oom, "out of memory");
	const char *p = sb.buf;
	CHECK(*p == '{', "the literal does not start with {");
	p++;
	for (size_t i = 0; i <= l.n; i++) {
		char *e;
		size_t elen = 0;
		CHECK(read_element(&p, &e, &elen), "element %zu is malformed in %s", i + 1, sb.buf);
		if (i == l.n) {
			CHECK(e == NULL, "the NULL element came back as a string");
		} else {
			CHECK(e != NULL && elen == strlen(l.line[i]) && memcmp(e, l.line[i], elen) == 0,
			      "element %zu does not read back as line %ld", i + 1, l.lineno[i]);
			CHECK(*p == ',', "no comma after element %zu", i + 1);
			p++;
		}
		free(e);
	}
	CHECK(p[0] == '}' && p[1] == '\0', "trailing bytes after the last element");
	pgc__sb_free(&sb);
	cli_lines_free(&l);
	return 0;
}

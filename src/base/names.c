/* names.c - the name rules: a name a caller gives the library (lock, lease, queue, schedule),
 * a schema name the library puts into SQL, the @S@ expansion of the SQL templates, and the
 * "pgcoord init" hint that names a schema. Pure: nothing here talks to a server. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base.h"

#define SCHEMA_NAME_MAX 63 /* NAMEDATALEN - 1 */

int pgc_name_check(const char *what, const char *name, size_t max, pgc_error *err)
{
	if (what == NULL)
		what = "name";
	if (name == NULL)
		return pgc__err(err, PGC_EUSAGE, "%s must not be NULL", what);
	size_t len = strlen(name);
	if (len == 0)
		return pgc__err(err, PGC_EUSAGE, "%s is empty", what);
	if (max > 0 && len > max)
		return pgc__err(err, PGC_EUSAGE, "%s is longer than %zu bytes", what, max);
	const unsigned char *p = (const unsigned char *)name;
	for (size_t off = 0; off < len;) {
		size_t n = pgc__utf8_len(p + off);
		if (n == 0)
			return pgc__err(err, PGC_EUSAGE, "%s is not valid UTF-8: byte 0x%02x at offset %zu",
			                what, p[off], off);
		off += n;
	}
	return PGC_OK;
}

int pgc__check_schema(const char *schema, pgc_error *err)
{
	if (schema == NULL)
		return PGC_OK;
	if (*schema == '\0')
		return pgc__err(err, PGC_EUSAGE, "schema name is empty");
	if (strlen(schema) > SCHEMA_NAME_MAX)
		return pgc__err(err, PGC_EUSAGE, "schema name is longer than %d bytes", SCHEMA_NAME_MAX);
	if (strchr(schema, '$') != NULL)
		return pgc__err(err, PGC_EUSAGE, "schema name must not contain '$'");
	for (const unsigned char *p = (const unsigned char *)schema; *p; p++)
		if (*p < 0x20 || *p == 0x7f)
			return pgc__err(err, PGC_EUSAGE, "schema name must not contain control characters");
	return PGC_OK;
}

char *pgc__sql_schema(const char *tmpl, const char *quoted)
{
	static const char tag[] = "@S@";
	size_t n = 0, tl = sizeof tag - 1, ql = strlen(quoted);
	for (const char *p = strstr(tmpl, tag); p; p = strstr(p + tl, tag))
		n++;
	char *out = malloc(strlen(tmpl) + n * ql + 1);
	if (out == NULL)
		return NULL;
	char *o = out;
	const char *p = tmpl, *hit;
	while ((hit = strstr(p, tag)) != NULL) {
		memcpy(o, p, (size_t)(hit - p));
		o += hit - p;
		memcpy(o, quoted, ql);
		o += ql;
		p = hit + tl;
	}
	strcpy(o, p);
	return out;
}

const char *pgc__init_cmd(const char *schema, char *buf, size_t size)
{
	if (schema == NULL || strcmp(schema, PGC_SCHEMA_DEFAULT) == 0) {
		snprintf(buf, size, "pgcoord init");
		return buf;
	}
	bool plain = true;
	for (const char *p = schema; *p && plain; p++)
		plain = (*p >= 'a' && *p <= 'z') || (*p >= 'A' && *p <= 'Z') || (*p >= '0' && *p <= '9') ||
		        *p == '_' || *p == '-' || *p == '.';
	if (plain) {
		snprintf(buf, size, "pgcoord init --schema %s", schema);
		return buf;
	}
	/* 'it'\''s': a quote ends the quoted text, is given escaped, and the quote opens again. */
	size_t o = (size_t)snprintf(buf, size, "pgcoord init --schema '");
	for (const char *p = schema; *p && o + 5 < size; p++) {
		if (*p == '\'') {
			memcpy(buf + o, "'\\''", 4);
			o += 4;
		} else {
			buf[o++] = *p;
		}
	}
	if (o + 2 <= size) {
		buf[o++] = '\'';
		buf[o] = '\0';
	} else {
		buf[size - 1] = '\0';
	}
	return buf;
}

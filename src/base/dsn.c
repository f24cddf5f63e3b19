/* dsn.c - choosing the DSN and masking passwords in it
 *
 * Masking must never leak: when the input cannot be parsed with certainty, everything that
 * could be part of a password is masked. Over-masking a host name is harmless; printing half a
 * password is not. */
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "base.h"

#define MASK "****"

const char *pgc_dsn_resolve(const char *dsn, pgc_dsn_source *source)
{
	pgc_dsn_source src = PGC_DSN_ARGUMENT;
	const char *v = dsn;
	if (v == NULL || *v == '\0') {
		src = PGC_DSN_PGCOORD_DSN;
		v = getenv("PGCOORD_DSN");
	}
	if (v == NULL || *v == '\0') {
		src = PGC_DSN_DATABASE_URL;
		v = getenv("DATABASE_URL");
	}
	if (v == NULL || *v == '\0') {
		src = PGC_DSN_LIBPQ_ENV;
		v = "";
	}
	if (source != NULL)
		*source = src;
	return v;
}

/* The keywords whose values are secrets: the server password and the client key's passphrase.
 * libpq's keywords are lower case; any case is masked. */
static bool is_secret_key(const char *key, size_t len)
{
	return (len == 8 && strncasecmp(key, "password", 8) == 0) ||
	       (len == 11 && strncasecmp(key, "sslpassword", 11) == 0);
}

static int hex_digit(char c)
{
	if (c >= '0' && c <= '9')
		return c - '0';
	if (c >= 'a' && c <= 'f')
		return c - 'a' + 10;
	if (c >= 'A' && c <= 'F')
		return c - 'A' + 10;
	return -1;
}

/* A URI query parameter's name, percent-decoded as libpq decodes it ("%70assword" is
 * password), is a secret keyword. */
static bool uri_name_is_secret(const char *name, size_t len)
{
	char dec[16];
	size_t n = 0;
	for (size_t i = 0; i < len; i++) {
		if (n == sizeof dec)
			return false;
		int hi, lo;
		if (name[i] == '%' && i + 2 < len &&
		    (hi = hex_digit(name[i + 1])) >= 0 && (lo = hex_digit(name[i + 2])) >= 0) {
			dec[n++] = (char)(hi * 16 + lo);
			i += 2;
		} else {
			dec[n++] = name[i];
		}
	}
	return is_secret_key(dec, n);
}

static bool is_uri(const char *s)
{
	return strncmp(s, "postgresql://", 13) == 0 || strncmp(s, "postgres://", 11) == 0;
}

/* Marks what must not be shown, then copies the URI with each marked run replaced by the mask.
 * Two rules, and their union is hidden:
 * - the userinfo password: from the first ':' after the scheme to the last '@'. libpq ends the
 *   userinfo at the first '@', but a password may contain an unescaped '@', '/', ':' or '?';
 *   going to the last '@' hides all of it (and, when that '@' is really in the query string,
 *   more than needed, which is safe);
 * - the value of every "password" or "sslpassword" query parameter, up to the next '&' or the
 *   end, whatever characters it contains. */
static void mask_uri(pgc__sb *b, const char *dsn)
{
	const char *rest = strstr(dsn, "://") + 3;
	size_t n = strlen(dsn), off = (size_t)(rest - dsn);
	char *hide = calloc(n + 1, 1);
	if (hide == NULL) {
		b->oom = true;
		return;
	}
	const char *at = strrchr(rest, '@');
	const char *colon = at ? memchr(rest, ':', (size_t)(at - rest)) : NULL;
	if (colon != NULL)
		memset(hide + (colon + 1 - dsn), 1, (size_t)(at - colon - 1));
	for (size_t i = off; i < n; i++) {
		if (dsn[i] != '?' && dsn[i] != '&')
			continue;
		const char *name = dsn + i + 1;
		size_t namelen = strcspn(name, "=&");
		if (name[namelen] == '=' && uri_name_is_secret(name, namelen)) {
			size_t j = i + 1 + namelen + 1;
			while (j < n && dsn[j] != '&')
				hide[j++] = 1;
		}
	}
	for (size_t i = 0; i < n;) {
		if (hide[i]) {
			pgc__sb_puts(b, MASK);
			while (i < n && hide[i])
				i++;
		} else {
			pgc__sb_put(b, dsn + i, 1);
			i++;
		}
	}
	free(hide);
}

static bool is_space(char c)
{
	return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f' || c == '\v';
}

/* key = value pairs as libpq parses them: values are bare words or single-quoted strings in
 * which backslash escapes the next character. With all, every value is masked: for a string
 * libpq refused, where a misspelt keyword ("pasword=") may hold a password. */
static void mask_kv(pgc__sb *b, const char *s, bool all)
{
	const char *p = s;
	while (*p != '\0') {
		const char *ws = p;
		while (is_space(*p))
			p++;
		pgc__sb_put(b, ws, (size_t)(p - ws));
		if (*p == '\0')
			break;
		const char *key = p;
		while (*p != '\0' && *p != '=' && !is_space(*p))
			p++;
		size_t keylen = (size_t)(p - key);
		bool secret = all || is_secret_key(key, keylen);
		const char *sp = p;
		while (is_space(*p))
			p++;
		if (*p != '=') {
			/* Not key=value: libpq would reject it. Show the rest only if no password can
			 * hide in it; with all, the word itself may be a piece of one. */
			if (all) {
				pgc__sb_puts(b, MASK);
			} else {
				pgc__sb_put(b, key, keylen);
				if (secret || strcasestr(p, "password") != NULL)
					pgc__sb_puts(b, " " MASK);
				else
					pgc__sb_puts(b, sp);
			}
			return;
		}
		pgc__sb_put(b, key, keylen);
		pgc__sb_put(b, sp, (size_t)(p - sp));
		pgc__sb_puts(b, "=");
		p++;
		const char *sp2 = p;
		while (is_space(*p))
			p++;
		pgc__sb_put(b, sp2, (size_t)(p - sp2));
		const char *val = p;
		if (*p == '\'') {
			p++;
			while (*p != '\0' && *p != '\'') {
				if (*p == '\\' && p[1] != '\0')
					p++;
				p++;
			}
			if (*p == '\0') {
				/* Unterminated quote: everything to the end may be the password. */
				pgc__sb_puts(b, secret ? "'" MASK "'" : val);
				return;
			}
			p++;
		} else {
			while (*p != '\0' && !is_space(*p)) {
				if (*p == '\\' && p[1] != '\0')
					p++;
				p++;
			}
		}
		if (secret)
			pgc__sb_puts(b, *val == '\'' ? "'" MASK "'" : MASK);
		else
			pgc__sb_put(b, val, (size_t)(p - val));
	}
}

static char *mask(const char *dsn, bool all)
{
	if (dsn == NULL)
		return NULL;
	pgc__sb b = PGC__SB_INIT;
	pgc__sb_puts(&b, "");
	if (is_uri(dsn) && all) {
		pgc__sb_put(&b, dsn, (size_t)(strstr(dsn, "://") + 3 - dsn));
		pgc__sb_puts(&b, MASK);
	} else if (is_uri(dsn)) {
		mask_uri(&b, dsn);
	} else {
		mask_kv(&b, dsn, all);
	}
	if (b.oom) {
		free(b.buf);
		return NULL;
	}
	return b.buf;
}

char *pgc_dsn_mask(const char *dsn)
{
	return mask(dsn, false);
}

char *pgc__dsn_mask_all(const char *dsn)
{
	return mask(dsn, true);
}

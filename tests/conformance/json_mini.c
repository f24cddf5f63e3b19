/* json_mini.c - a small JSON reader for the conformance adapter (see json_mini.h)
 *
 * Recursive descent over RFC 8259, depth-limited; numbers are checked against the grammar and
 * kept as text as well as a double (and an int64 when they are integers). */
#include "json_mini.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define JM_DEPTH_MAX 64

typedef struct jm_parser {
	const char *s, *end, *start;
	char *errbuf;
	size_t errsize;
	bool failed;
} jm_parser;

static void fail(jm_parser *p, const char *what)
{
	if (!p->failed && p->errbuf != NULL && p->errsize > 0)
		snprintf(p->errbuf, p->errsize, "%s at offset %ld", what, (long)(p->s - p->start));
	p->failed = true;
}

static void skip_ws(jm_parser *p)
{
	while (p->s < p->end && (*p->s == ' ' || *p->s == '\t' || *p->s == '\n' || *p->s == '\r'))
		p->s++;
}

static int hex4(const char *s)
{
	int v = 0;
	for (int i = 0; i < 4; i++) {
		char c = s[i];
		v <<= 4;
		if (c >= '0' && c <= '9')
			v |= c - '0';
		else if (c >= 'a' && c <= 'f')
			v |= c - 'a' + 10;
		else if (c >= 'A' && c <= 'F')
			v |= c - 'A' + 10;
		else
			return -1;
	}
	return v;
}

static size_t put_utf8(char *o, unsigned cp)
{
	if (cp < 0x80) {
		o[0] = (char)cp;
		return 1;
	}
	if (cp < 0x800) {
		o[0] = (char)(0xc0 | (cp >> 6));
		o[1] = (char)(0x80 | (cp & 0x3f));
		return 2;
	}
	if (cp < 0x10000) {
		o[0] = (char)(0xe0 | (cp >> 12));
		o[1] = (char)(0x80 | ((cp >> 6) & 0x3f));
		o[2] = (char)(0x80 | (cp & 0x3f));
		return 3;
	}
	o[0] = (char)(0xf0 | (cp >> 18));
	o[1] = (char)(0x80 | ((cp >> 12) & 0x3f));
	o[2] = (char)(0x80 | ((cp >> 6) & 0x3f));
	o[3] = (char)(0x80 | (cp & 0x3f));
	return 4;
}

/* Reads a string at p->s (on the opening quote) into a new decoded buffer. */
static char *parse_string(jm_parser *p)
{
	const char *s = p->s + 1;
	/* The decoded text is never longer than the source. */
	const char *q = s;
	while (q < p->end && *q != '"') {
		if (*q == '\\')
			q++;
		q++;
	}
	if (q >= p->end) {
		fail(p, "unterminated string");
		return NULL;
	}
	char *out = malloc((size_t)(q - s) + 1), *o = out;
	if (out == NULL) {
		fail(p, "out of memory");
		return NULL;
	}
	while (s < q) {
		unsigned char c = (unsigned char)*s;
		if (c < 0x20) {
			fail(p, "control character in string");
			free(out);
			return NULL;
		}
		if (c != '\\') {
			*o++ = (char)c;
			s++;
			continue;
		}
		s++;
		switch (*s) {
		case '"': *o++ = '"'; s++; break;
		case '\\': *o++ = '\\'; s++; break;
		case '/': *o++ = '/'; s++; break;
		case 'b': *o++ = '\b'; s++; break;
		case 'f': *o++ = '\f'; s++; break;
		case 'n': *o++ = '\n'; s++; break;
		case 'r': *o++ = '\r'; s++; break;
		case 't': *o++ = '\t'; s++; break;
		case 'u': {
			int cp = q - s >= 5 ? hex4(s + 1) : -1;
			if (cp < 0) {
				fail(p, "bad \\u escape");
				free(out);
				return NULL;
			}
			s += 5;
			unsigned u = (unsigned)cp;
			if (u >= 0xd800 && u < 0xdc00 && q - s >= 6 && s[0] == '\\' && s[1] == 'u') {
				int lo = hex4(s + 2);
				if (lo >= 0xdc00 && lo < 0xe000) {
					u = 0x10000 + ((u - 0xd800) << 10) + ((unsigned)lo - 0xdc00);
					s += 6;
				}
			}
			o += put_utf8(o, u);
			break;
		}
		default:
			fail(p, "bad escape");
			free(out);
			return NULL;
		}
	}
	*o = '\0';
	p->s = q + 1;
	return out;
}

static jm_node *parse_value(jm_parser *p, int depth);

static jm_node *new_node(jm_parser *p, jm_type t)
{
	jm_node *n = calloc(1, sizeof *n);
	if (n == NULL)
		fail(p, "out of memory");
	else {
		n->type = t;
		n->raw = p->s;
	}
	return n;
}

static bool literal(jm_parser *p, const char *word)
{
	size_t l = strlen(word);
	if ((size_t)(p->end - p->s) < l || memcmp(p->s, word, l) != 0)
		return false;
	p->s += l;
	return true;
}

static jm_node *parse_number(jm_parser *p)
{
	jm_node *n = new_node(p, JM_NUMBER);
	if (n == NULL)
		return NULL;
	const char *s = p->s;
	bool frac = false;
	if (s < p->end && *s == '-')
		s++;
	if (s >= p->end || *s < '0' || *s > '9')
		goto bad;
	if (*s == '0')
		s++;
	else
		while (s < p->end && *s >= '0' && *s <= '9')
			s++;
	if (s < p->end && *s == '.') {
		frac = true;
		s++;
		if (s >= p->end || *s < '0' || *s > '9')
			goto bad;
		while (s < p->end && *s >= '0' && *s <= '9')
			s++;
	}
	if (s < p->end && (*s == 'e' || *s == 'E')) {
		frac = true;
		s++;
		if (s < p->end && (*s == '+' || *s == '-'))
			s++;
		if (s >= p->end || *s < '0' || *s > '9')
			goto bad;
		while (s < p->end && *s >= '0' && *s <= '9')
			s++;
	}
	char buf[64];
	size_t l = (size_t)(s - p->s);
	if (l >= sizeof buf)
		l = sizeof buf - 1;
	memcpy(buf, p->s, l);
	buf[l] = '\0';
	n->num = strtod(buf, NULL);
	if (!frac) {
		errno = 0;
		long long v = strtoll(buf, NULL, 10);
		if (errno == 0) {
			n->is_int = true;
			n->i = v;
		}
	}
	p->s = s;
	n->raw_len = (size_t)(s - n->raw);
	return n;
bad:
	fail(p, "bad number");
	free(n);
	return NULL;
}

static jm_node *parse_container(jm_parser *p, int depth, bool object)
{
	jm_node *n = new_node(p, object ? JM_OBJECT : JM_ARRAY);
	if (n == NULL)
		return NULL;
	jm_node **tail = &n->child;
	char close = object ? '}' : ']';
	p->s++;
	skip_ws(p);
	if (p->s < p->end && *p->s == close) {
		p->s++;
		n->raw_len = (size_t)(p->s - n->raw);
		return n;
	}
	for (;;) {
		char *key = NULL;
		skip_ws(p);
		if (object) {
			if (p->s >= p->end || *p->s != '"') {
				fail(p, "expected a member name");
				break;
			}
			if ((key = parse_string(p)) == NULL)
				break;
			skip_ws(p);
			if (p->s >= p->end || *p->s != ':') {
				free(key);
				fail(p, "expected ':'");
				break;
			}
			p->s++;
		}
		jm_node *v = parse_value(p, depth + 1);
		if (v == NULL) {
			free(key);
			break;
		}
		v->key = key;
		*tail = v;
		tail = &v->next;
		n->n++;
		skip_ws(p);
		if (p->s < p->end && *p->s == ',') {
			p->s++;
			continue;
		}
		if (p->s < p->end && *p->s == close) {
			p->s++;
			n->raw_len = (size_t)(p->s - n->raw);
			return n;
		}
		fail(p, object ? "expected ',' or '}'" : "expected ',' or ']'");
		break;
	}
	jm_free(n);
	return NULL;
}

static jm_node *parse_value(jm_parser *p, int depth)
{
	if (depth > JM_DEPTH_MAX) {
		fail(p, "nested too deeply");
		return NULL;
	}
	skip_ws(p);
	if (p->s >= p->end) {
		fail(p, "unexpected end");
		return NULL;
	}
	jm_node *n;
	switch (*p->s) {
	case '{': return parse_container(p, depth, true);
	case '[': return parse_container(p, depth, false);
	case '"':
		if ((n = new_node(p, JM_STRING)) == NULL)
			return NULL;
		if ((n->str = parse_string(p)) == NULL) {
			free(n);
			return NULL;
		}
		n->raw_len = (size_t)(p->s - n->raw);
		return n;
	case 't':
	case 'f':
	case 'n':
		if ((n = new_node(p, JM_NULL)) == NULL)
			return NULL;
		if (literal(p, "true")) {
			n->type = JM_BOOL;
			n->b = true;
		} else if (literal(p, "false")) {
			n->type = JM_BOOL;
		} else if (!literal(p, "null")) {
			fail(p, "unknown literal");
			free(n);
			return NULL;
		}
		n->raw_len = (size_t)(p->s - n->raw);
		return n;
	default:
		return parse_number(p);
	}
}

jm_node *jm_parse(const char *text, size_t len, char *errbuf, size_t errsize)
{
	jm_parser p = { text, text + len, text, errbuf, errsize, false };
	jm_node *root = parse_value(&p, 0);
	if (root == NULL)
		return NULL;
	skip_ws(&p);
	if (p.s != p.end) {
		fail(&p, "text after the value");
		jm_free(root);
		return NULL;
	}
	return root;
}

void jm_free(jm_node *node)
{
	while (node != NULL) {
		jm_node *next = node->next;
		jm_free(node->child);
		free(node->str);
		free(node->key);
		free(node);
		node = next;
	}
}

const jm_node *jm_get(const jm_node *obj, const char *key)
{
	if (obj == NULL || obj->type != JM_OBJECT)
		return NULL;
	for (const jm_node *c = obj->child; c != NULL; c = c->next)
		if (strcmp(c->key, key) == 0)
			return c;
	return NULL;
}

const jm_node *jm_at(const jm_node *arr, size_t index)
{
	if (arr == NULL || arr->type != JM_ARRAY)
		return NULL;
	const jm_node *c = arr->child;
	while (c != NULL && index-- > 0)
		c = c->next;
	return c;
}

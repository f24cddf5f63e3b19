/* json_mini.h - a small JSON reader for the conformance adapter
 *
 * Parses one document into a tree of nodes that point into the source text: every value keeps
 * its raw text (raw, raw_len), so that payloads and results pass through as the JSON they were.
 * Strings are also decoded (str, NUL-terminated, \u escapes to UTF-8). No writer: the adapter
 * writes its answers with a string buffer. */
#ifndef PGC_JSON_MINI_H
#define PGC_JSON_MINI_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

typedef enum jm_type { JM_NULL, JM_BOOL, JM_NUMBER, JM_STRING, JM_ARRAY, JM_OBJECT } jm_type;

typedef struct jm_node {
	jm_type type;
	const char *raw;      /* the value's text in the source */
	size_t raw_len;
	char *str;            /* JM_STRING: decoded; an object member's key in key */
	char *key;            /* the member name when this node is an object member, else NULL */
	bool b;
	double num;
	bool is_int;          /* JM_NUMBER with no fraction or exponent that fits int64 */
	int64_t i;
	struct jm_node *child, *next; /* arrays and objects: first element/member, then siblings */
	size_t n;             /* arrays and objects: how many */
} jm_node;

/* Parses text (len bytes; it must stay alive while the tree is used). Returns the root, or
 * NULL with a message in errbuf. Free with jm_free. */
jm_node *jm_parse(const char *text, size_t len, char *errbuf, size_t errsize);
void jm_free(jm_node *node);

/* An object's member by name (NULL when absent or not an object). */
const jm_node *jm_get(const jm_node *obj, const char *key);
/* An array's element by index (NULL when out of range). */
const jm_node *jm_at(const jm_node *arr, size_t index);

#endif

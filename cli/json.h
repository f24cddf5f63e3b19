/* json.h - a small streaming JSON writer: objects and arrays nested to a fixed depth, the
 * commas written for the caller, strings escaped by json_str (UTF-8 kept, bad bytes as
 * U+FFFD), so a renderer says what it writes and never where a separator goes */
#ifndef PGCOORD_JSON_H
#define PGCOORD_JSON_H

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

#define JSON_DEPTH_MAX 16

typedef struct json_w {
	FILE *f;
	int depth;
	bool first[JSON_DEPTH_MAX]; /* nothing written yet at this level */
} json_w;

/* A writer onto f, at the top level (one value, or a stream of values one per line). */
json_w json_w_on(FILE *f);

/* Each call writes one member (key not NULL, inside an object) or one element (key NULL,
 * inside an array or at the top level). A NULL string is written as null. */
void json_obj(json_w *w, const char *key);
void json_obj_end(json_w *w);
void json_arr(json_w *w, const char *key);
void json_arr_end(json_w *w);
void json_s(json_w *w, const char *key, const char *v);
void json_i(json_w *w, const char *key, long long v);
void json_u(json_w *w, const char *key, unsigned long long v);
/* A number with decimals digits after the point (3 for seconds). */
void json_f(json_w *w, const char *key, double v, int decimals);
void json_b(json_w *w, const char *key, bool v);
void json_null(json_w *w, const char *key);
/* An integer, or null when has is false (an unset limit, an unknown pid). */
void json_i_or_null(json_w *w, const char *key, bool has, long long v);
/* Text the caller has already made valid JSON (a payload from the server's jsonb). */
void json_raw(json_w *w, const char *key, const char *json);

#endif

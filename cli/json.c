/* json.c - the streaming JSON writer (json.h) */
#include "json.h"
#include "cli.h"

json_w json_w_on(FILE *f)
{
	json_w w = { .f = f, .depth = 0 };
	w.first[0] = true;
	return w;
}

/* The separator and the key before a value. */
static void member(json_w *w, const char *key)
{
	if (!w->first[w->depth])
		fputc(w->depth == 0 ? '\n' : ',', w->f);
	w->first[w->depth] = false;
	if (key != NULL) {
		json_str(w->f, key);
		fputc(':', w->f);
	}
}

static void nest_open(json_w *w, const char *key, char c)
{
	member(w, key);
	fputc(c, w->f);
	if (w->depth + 1 < JSON_DEPTH_MAX)
		w->depth++;
	w->first[w->depth] = true;
}

static void nest_close(json_w *w, char c)
{
	fputc(c, w->f);
	if (w->depth > 0)
		w->depth--;
}

void json_obj(json_w *w, const char *key)
{
	nest_open(w, key, '{');
}

void json_obj_end(json_w *w)
{
	nest_close(w, '}');
}

void json_arr(json_w *w, const char *key)
{
	nest_open(w, key, '[');
}

void json_arr_end(json_w *w)
{
	nest_close(w, ']');
}

void json_s(json_w *w, const char *key, const char *v)
{
	member(w, key);
	json_str(w->f, v);
}

void json_i(json_w *w, const char *key, long long v)
{
	member(w, key);
	fprintf(w->f, "%lld", v);
}

void json_u(json_w *w, const char *key, unsigned long long v)
{
	member(w, key);
	fprintf(w->f, "%llu", v);
}

void json_f(json_w *w, const char *key, double v, int decimals)
{
	member(w, key);
	/* JSON has no NaN or infinity. */
	if (v != v || v > 1e300 || v < -1e300)
		fputs("null", w->f);
	else
		fprintf(w->f, "%.*f", decimals, v);
}

void json_b(json_w *w, const char *key, bool v)
{
	member(w, key);
	fputs(v ? "true" : "false", w->f);
}

void json_null(json_w *w, const char *key)
{
	member(w, key);
	fputs("null", w->f);
}

void json_i_or_null(json_w *w, const char *key, bool has, long long v)
{
	if (has)
		json_i(w, key, v);
	else
		json_null(w, key);
}

void json_raw(json_w *w, const char *key, const char *json)
{
	member(w, key);
	fputs(json != NULL ? json : "null", w->f);
}

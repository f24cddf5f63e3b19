/* test_json.c - the tool's JSON writer: separators, nesting, null for NULL and for numbers
 * JSON cannot hold, escapes, a stream of top-level values one per line */
#include <stdlib.h>
#include <string.h>

#include "json.h"
#include "../t.h"

/* What fn wrote through a writer on a memory stream. */
static char *written(void (*fn)(json_w *w))
{
	char *buf = NULL;
	size_t len = 0;
	FILE *f = open_memstream(&buf, &len);
	T_ASSERT(f != NULL);
	json_w w = json_w_on(f);
	fn(&w);
	fclose(f);
	return buf;
}

static void nested(json_w *w)
{
	json_obj(w, NULL);
	json_s(w, "name", "a\"b\\c\n");
	json_s(w, "none", NULL);
	json_i(w, "n", -3);
	json_u(w, "u", 18446744073709551615ULL);
	json_f(w, "s", 1.23456, 3);
	json_b(w, "ok", true);
	json_i_or_null(w, "limit", false, 7);
	json_arr(w, "xs");
	json_i(w, NULL, 1);
	json_obj(w, NULL);
	json_obj_end(w);
	json_arr(w, NULL);
	json_arr_end(w);
	json_raw(w, NULL, "{\"k\":[1]}");
	json_arr_end(w);
	json_obj_end(w);
}

static void json__separators_and_nesting(void)
{
	char *got = written(nested);
	T_ASSERT_STR_EQ(got, "{\"name\":\"a\\\"b\\\\c\\n\",\"none\":null,\"n\":-3,"
	                     "\"u\":18446744073709551615,\"s\":1.235,\"ok\":true,\"limit\":null,"
	                     "\"xs\":[1,{},[],{\"k\":[1]}]}");
	free(got);
}

static void not_numbers(json_w *w)
{
	json_arr(w, NULL);
	json_f(w, NULL, 0.0 / 0.0, 3);
	json_f(w, NULL, 1e308 * 10, 3);
	json_f(w, NULL, -0.5, 1);
	json_arr_end(w);
}

static void json__nan_and_infinity_are_null(void)
{
	char *got = written(not_numbers);
	T_ASSERT_STR_EQ(got, "[null,null,-0.5]");
	free(got);
}

static void stream(json_w *w)
{
	for (int i = 0; i < 3; i++) {
		json_obj(w, NULL);
		json_i(w, "i", i);
		json_obj_end(w);
	}
}

static void json__top_level_stream_one_per_line(void)
{
	char *got = written(stream);
	T_ASSERT_STR_EQ(got, "{\"i\":0}\n{\"i\":1}\n{\"i\":2}");
	free(got);
}

int main(int argc, char **argv)
{
	static const t_case cases[] = {
		{ "json__separators_and_nesting", json__separators_and_nesting },
		{ "json__nan_and_infinity_are_null", json__nan_and_infinity_are_null },
		{ "json__top_level_stream_one_per_line", json__top_level_stream_one_per_line },
		{ NULL, NULL },
	};
	return t_main(argc, argv, cases);
}

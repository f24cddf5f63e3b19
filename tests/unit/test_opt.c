/* test_opt.c - declared options: every GNU spelling of an option parsed, values checked by
 * type, repeated ONCE options and bad values refused with 64, the help laid out from the table */
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "opt.h"
#include "../t.h"

typedef struct vals {
	const char *file;
	bool dry;
	long long n;
	int64_t ms;
} vals;

static int parse(vals *v, int argc, char **argv, int *first)
{
	const cli_opt opts[] = {
		CLI_OPT('f', "file", CLI_OPT_STR, &v->file, "FILE", "read FILE", .flags = CLI_OPT_ONCE),
		CLI_OPT(0, "dry-run", CLI_OPT_BOOL, &v->dry, NULL, "do nothing"),
		CLI_OPT('n', "count", CLI_OPT_INT, &v->n, "N", "at most N", .min = 1, .max = 10),
		CLI_OPT(0, "wait", CLI_OPT_DURATION, &v->ms, "D", "wait D", .min = 0, .max = 60000),
		CLI_OPT_TABLE_END,
	};
	memset(v, 0, sizeof *v);
	optind = 0;
	/* Errors go to stderr; keep the test's output for its own lines. */
	int saved = dup(2);
	FILE *null = freopen("/dev/null", "w", stderr);
	(void)null;
	int rc = cli_opt_parse("t", opts, argc, argv, first);
	fflush(stderr);
	dup2(saved, 2);
	close(saved);
	return rc;
}

static void opt__spellings(void)
{
	vals v;
	int first;
	char *a1[] = { "t", "-fx", "--dry-run", "-n", "3", "--wait=2s", "op", NULL };
	T_ASSERT_INT_EQ(parse(&v, 7, a1, &first), 0);
	T_ASSERT_STR_EQ(v.file, "x");
	T_ASSERT(v.dry);
	T_ASSERT_INT_EQ(v.n, 3);
	T_ASSERT_INT_EQ(v.ms, 2000);
	T_ASSERT_STR_EQ(a1[first], "op");
	char *a2[] = { "t", "--file", "y", "--count=10", "--", "-n", NULL };
	T_ASSERT_INT_EQ(parse(&v, 6, a2, &first), 0);
	T_ASSERT_STR_EQ(v.file, "y");
	T_ASSERT_INT_EQ(v.n, 10);
	T_ASSERT_STR_EQ(a2[first], "-n");
}

static void opt__refusals(void)
{
	vals v;
	int first;
	char *twice[] = { "t", "-f", "a", "--file=b", NULL };
	T_ASSERT_INT_EQ(parse(&v, 4, twice, &first), 64);
	char *range[] = { "t", "-n", "11", NULL };
	T_ASSERT_INT_EQ(parse(&v, 3, range, &first), 64);
	char *notnum[] = { "t", "--count=3x", NULL };
	T_ASSERT_INT_EQ(parse(&v, 2, notnum, &first), 64);
	char *dur[] = { "t", "--wait", "2 parsecs", NULL };
	T_ASSERT_INT_EQ(parse(&v, 3, dur, &first), 64);
	char *unknown[] = { "t", "--nope", NULL };
	T_ASSERT_INT_EQ(parse(&v, 2, unknown, &first), 64);
	char *missing[] = { "t", "--file", NULL };
	T_ASSERT_INT_EQ(parse(&v, 2, missing, &first), 64);
	char *value_on_flag[] = { "t", "--dry-run=yes", NULL };
	T_ASSERT_INT_EQ(parse(&v, 2, value_on_flag, &first), 64);
}

static int call_opt(const char *cmd, const char *opt, const char *value, void *dest)
{
	(void)cmd;
	(void)opt;
	*(const char **)dest = value != NULL ? value : "(none)";
	return 0;
}

/* A COMMAND's own options stay its own; an optional value is NULL when left out. */
static void opt__stop_at_operand_and_optional(void)
{
	const char *q = NULL, *wait = NULL;
	long long c = 0;
	const cli_opt opts[] = {
		CLI_OPT('q', "queue", CLI_OPT_STR, &q, "Q", "queue"),
		CLI_OPT('c', "concurrency", CLI_OPT_INT, &c, "K", "at once", .min = 1, .max = 9),
		CLI_OPT(0, "wait", CLI_OPT_CALL, &wait, "D", "wait", .call = call_opt, .flags = CLI_OPT_OPTIONAL),
		CLI_OPT_TABLE_END,
	};
	char *argv[] = { "t", "-q", "a", "-c", "4", "--wait", "cmd", "-c", "x", NULL };
	int first;
	optind = 0;
	T_ASSERT_INT_EQ(cli_opt_parse_ex("t", opts, CLI_PARSE_STOP_AT_OPERAND, 9, argv, &first), 0);
	T_ASSERT_STR_EQ(q, "a");
	T_ASSERT_INT_EQ(c, 4);
	T_ASSERT_STR_EQ(wait, "(none)");
	T_ASSERT_STR_EQ(argv[first], "cmd");
	char *argv2[] = { "t", "--wait=5s", NULL };
	optind = 0;
	T_ASSERT_INT_EQ(cli_opt_parse_ex("t", opts, CLI_PARSE_STOP_AT_OPERAND, 2, argv2, &first), 0);
	T_ASSERT_STR_EQ(wait, "5s");
}

static void opt__help_layout(void)
{
	static bool b;
	static const char *s;
	const cli_opt opts[] = {
		CLI_OPT('f', "file", CLI_OPT_STR, &s, "FILE", "read FILE"),
		CLI_OPT(0, "dry-run", CLI_OPT_BOOL, &b, NULL, "first line\nsecond line"),
		CLI_OPT(0, "a-very-long-option-name", CLI_OPT_BOOL, &b, NULL, "right after"),
		CLI_OPT(0, "secret", CLI_OPT_BOOL, &b, NULL, "not shown", .flags = CLI_OPT_HIDDEN),
		CLI_OPT_TABLE_END,
	};
	char *buf = NULL;
	size_t len = 0;
	FILE *f = open_memstream(&buf, &len);
	cli_opt_help(f, opts, 20);
	fclose(f);
	T_ASSERT_STR_EQ(buf, "  -f, --file=FILE   read FILE\n"
	                     "      --dry-run     first line\n"
	                     "                    second line\n"
	                     "      --a-very-long-option-name  right after\n");
	free(buf);
}

int main(int argc, char **argv)
{
	static const t_case cases[] = {
		{ "opt__spellings", opt__spellings },
		{ "opt__refusals", opt__refusals },
		{ "opt__stop_at_operand_and_optional", opt__stop_at_operand_and_optional },
		{ "opt__help_layout", opt__help_layout },
		{ NULL, NULL },
	};
	return t_main(argc, argv, cases);
}

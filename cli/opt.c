/* opt.c - declared options (opt.h): the getopt_long tables built from the declaration, each
 * value checked and stored by its type, and the --help lines printed from the same table */
#include <getopt.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "opt.h"

#define OPTS_MAX 96

static cli_usage_fn usage_fn;

void cli_opt_usage_set(cli_usage_fn fn)
{
	usage_fn = fn;
}

/* "--name" or "-x" for messages. */
static const char *opt_name(const cli_opt *o, char *buf, size_t size)
{
	if (o->long_name != NULL)
		snprintf(buf, size, "--%s", o->long_name);
	else
		snprintf(buf, size, "-%c", o->short_name);
	return buf;
}

static int store(const char *cmd, const cli_opt *o, const char *value, bool *seen)
{
	char name[64];
	opt_name(o, name, sizeof name);
	if ((o->flags & CLI_OPT_ONCE) && *seen)
		return cli_usage_error(cmd, "%s given twice", name);
	*seen = true;
	int rc = 0;
	switch (o->type) {
	case CLI_OPT_BOOL:
		*(bool *)o->dest = !(o->flags & CLI_OPT_CLEARS);
		return 0;
	case CLI_OPT_STR:
		*(const char **)o->dest = value;
		return 0;
	case CLI_OPT_INT:
		if (!cli_parse_int(value, o->min, o->max, (long long *)o->dest))
			return cli_usage_error(cmd, "%s must be an integer from %lld to %lld, not \"%s\"", name,
			                       o->min, o->max, cli_esc(value));
		return 0;
	case CLI_OPT_DURATION:
		if (!cli_duration_opt(cmd, name, value, o->min, o->max, (int64_t *)o->dest, &rc))
			return rc;
		return 0;
	case CLI_OPT_CALL:
		return o->call(cmd, name, value, o->dest);
	case CLI_OPT_HELP:
	case CLI_OPT_END:
		break;
	}
	return 0;
}

int cli_opt_parse(const char *cmd, const cli_opt *opts, int argc, char **argv, int *first)
{
	return cli_opt_parse_ex(cmd, opts, 0, argc, argv, first);
}

int cli_opt_parse_ex(const char *cmd, const cli_opt *opts, unsigned how, int argc, char **argv,
                     int *first)
{
	struct option longopts[OPTS_MAX + 1];
	char shortopts[2 * OPTS_MAX + 2];
	bool seen[OPTS_MAX];
	size_t n = 0, nl = 0, ns = 0;
	/* "+": stop at the first operand (a COMMAND whose options are its own). */
	if (how & CLI_PARSE_STOP_AT_OPERAND)
		shortopts[ns++] = '+';
	shortopts[ns++] = ':';
	for (; opts[n].type != CLI_OPT_END; n++) {
		const cli_opt *o = &opts[n];
		if (n == OPTS_MAX)
			abort(); /* a table this long is a programming error */
		bool has_arg = o->type != CLI_OPT_BOOL && o->type != CLI_OPT_HELP;
		int arg = !has_arg ? no_argument
		          : (o->flags & CLI_OPT_OPTIONAL) ? optional_argument : required_argument;
		if (o->long_name != NULL)
			longopts[nl++] = (struct option){ o->long_name, arg, NULL, 256 + (int)n };
		if (o->short_name != 0) {
			shortopts[ns++] = o->short_name;
			if (has_arg)
				shortopts[ns++] = ':';
		}
		seen[n] = false;
	}
	longopts[nl] = (struct option){ NULL, 0, NULL, 0 };
	shortopts[ns] = '\0';
	opterr = 0;
	int ch;
	while ((ch = getopt_long(argc, argv, shortopts, longopts, NULL)) != -1) {
		size_t i = n;
		if (ch >= 256 && ch < 256 + (int)n)
			i = (size_t)(ch - 256);
		else if (ch != '?' && ch != ':')
			for (i = 0; i < n && opts[i].short_name != ch; i++)
				;
		if (i == n)
			return cli_getopt_error(cmd, ch, argv);
		if (opts[i].type == CLI_OPT_HELP) {
			if (usage_fn != NULL)
				usage_fn(stdout);
			return -1;
		}
		int rc = store(cmd, &opts[i], optarg, &seen[i]);
		if (rc != 0)
			return rc;
	}
	*first = optind;
	return 0;
}

void cli_opt_help(FILE *f, const cli_opt *opts, int col)
{
	for (const cli_opt *o = opts; o->type != CLI_OPT_END; o++) {
		if (o->flags & CLI_OPT_HIDDEN)
			continue;
		char left[128];
		int len;
		if (o->short_name != 0 && o->long_name != NULL)
			len = snprintf(left, sizeof left, "  -%c, --%s", o->short_name, o->long_name);
		else if (o->short_name != 0)
			len = snprintf(left, sizeof left, "  -%c", o->short_name);
		else
			len = snprintf(left, sizeof left, "      --%s", o->long_name);
		if (o->value != NULL && len < (int)sizeof left)
			len += snprintf(left + len, sizeof left - (size_t)len,
			                (o->flags & CLI_OPT_OPTIONAL) ? "[=%s]" : o->long_name != NULL ? "=%s" : " %s",
			                o->value);
		fputs(left, f);
		const char *h = o->help != NULL ? o->help : "";
		/* The help starts at col, or two spaces after a longer left part. */
		fprintf(f, "%*s", len + 2 <= col ? col - len : 2, "");
		for (const char *nl; (nl = strchr(h, '\n')) != NULL; h = nl + 1)
			fprintf(f, "%.*s\n%*s", (int)(nl - h), h, col, "");
		fprintf(f, "%s\n", h);
	}
}

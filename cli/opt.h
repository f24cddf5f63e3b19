/* opt.h - a command's options declared as a table, from which both parsing (GNU getopt_long:
 * -x VALUE, -xVALUE, --name=VALUE, --name VALUE, a leading "--" ending the options) and the
 * "Options:" part of --help are made, so the two cannot disagree (nor the completion scripts,
 * which read --help) */
#ifndef PGCOORD_OPT_H
#define PGCOORD_OPT_H

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

typedef enum cli_opt_type {
	CLI_OPT_END = 0,   /* ends the table */
	CLI_OPT_BOOL,      /* no value: *(bool *)dest = true, or false with CLI_OPT_CLEARS */
	CLI_OPT_STR,       /* *(const char **)dest = the value */
	CLI_OPT_INT,       /* *(long long *)dest = the value, a whole number in [min, max] */
	CLI_OPT_DURATION,  /* *(int64_t *)dest = milliseconds, in [min, max] */
	CLI_OPT_CALL,      /* call(cmd, option, value, dest) checks and stores; returns 0 or an
	                      exit status (it has reported the error) */
	CLI_OPT_HELP,      /* -h, --help: print the help, exit 0 */
} cli_opt_type;

#define CLI_OPT_CLEARS 0x1u /* BOOL: sets false (--no-reconnect) */
#define CLI_OPT_ONCE 0x2u   /* given twice is a usage error */
#define CLI_OPT_HIDDEN 0x4u /* parsed, not shown in --help */
#define CLI_OPT_OPTIONAL 0x8u /* the value is optional (--wait-for-db[=D]): NULL when left out;
                                 only CALL options take this */

typedef struct cli_opt {
	char short_name;       /* 0: none */
	const char *long_name; /* without "--" */
	cli_opt_type type;
	void *dest;
	const char *value;     /* the value's name in --help ("FILE", "D"); NULL for BOOL */
	const char *help;      /* one or more lines, '\n' between them */
	long long min, max;    /* INT and DURATION bounds */
	int (*call)(const char *cmd, const char *opt, const char *value, void *dest);
	unsigned flags;
} cli_opt;

/* One table entry; what follows the help are designated fields: .min, .max, .call, .flags. */
#define CLI_OPT(s, l, t, d, v, h, ...)                                                          \
	{ .short_name = (s), .long_name = (l), .type = (t), .dest = (d), .value = (v), .help = (h), \
	  __VA_ARGS__ }
#define CLI_OPT_TABLE_END { .type = CLI_OPT_END }

/* Parses argv[1..] against the table opts for command cmd ("tx", "queue enqueue"). On success
 * returns 0 and sets *first to the index of the first operand; after -h/--help returns -1
 * (the help is printed, the caller exits 0); on a bad option or value returns the exit status
 * (64), the error and the hint printed. */
int cli_opt_parse(const char *cmd, const cli_opt *opts, int argc, char **argv, int *first);

/* As cli_opt_parse, with CLI_PARSE_* flags. */
#define CLI_PARSE_STOP_AT_OPERAND 0x1u /* options end at the first operand (COMMAND [ARGS]) */
int cli_opt_parse_ex(const char *cmd, const cli_opt *opts, unsigned how, int argc, char **argv,
                     int *first);

/* Prints the "Options:" lines of opts: "  -f, --file=FILE" and the help from column col. */
void cli_opt_help(FILE *f, const cli_opt *opts, int col);

/* The help the table's command set with cli_opt_usage_set(), for CLI_OPT_HELP. */
typedef void (*cli_usage_fn)(FILE *f);
void cli_opt_usage_set(cli_usage_fn fn);

#endif

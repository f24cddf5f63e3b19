/* cmd_queue_int.h - what the parts of pgcoord queue share: the parsed arguments, their parser
 * and helpers (cmd_queue.c), and the subcommands of the cmd_queue_*.c files */
#ifndef PGCOORD_CMD_QUEUE_INT_H
#define PGCOORD_CMD_QUEUE_INT_H

#include "cli.h"
#include "opt.h"

/* The options queue_opt_value checks. */
enum {
	O_PRIORITY = 1, O_DELAY, O_MAX_ATTEMPTS, O_WATCH, O_LIMIT, O_OLDER_THAN, O_AGING, O_SRET, O_FRET,
	O_MAX_PAYLOAD, O_MAX_DEFERRALS, O_KEY_PREFIX, O_BATCH, O_KEY, O_KEY_LIMIT, O_RATE, O_KEY_RATE,
	O_FAIR, O_WEIGHT, O_AFTER, O_ON_DEP_FAILURE, O_GROUP, O_ON_COMPLETE_QUEUE
};

typedef struct qargs {
	const char *schema;
	const char *payload, *file, *run_at, *unique_key, *status, *key_prefix, *key;
	const char *group, *on_complete_queue;
	int64_t after[PGC_QUEUE_AFTER_MAX]; /* --after */
	size_t n_after;
	bool has_after;
	int on_dep_failure; /* -1 unset, else a pgc_dep_policy */
	long long priority, max_attempts, limit, max_payload, max_deferrals, batch;
	int64_t delay_ms, watch_ms, older_than_ms, aging_ms, sret_ms, fret_ms;
	bool has_delay, has_priority, prometheus, all, yes, has_older, has_limit, remove;
	/* Flow control: -1 unchanged, 0 none (rates: n). */
	int key_limit, weight, fair, key_lim;
	pgc_rate rate, key_rate;
	char *pos[2];
	int npos;
} qargs;

/* *a with every option unset (the defaults), before its table is parsed. */
void queue_args_init(qargs *a);

/* Parses the options of queue sub against its table opts into *a, with at most max_pos
 * operands: 0, -1 after --help, or the exit status of a usage error. An option of another
 * queue subcommand is refused as "--X does not apply to queue SUB". */
int queue_parse(const char *sub, const cli_opt *opts, int argc, char **argv, qargs *a, int max_pos);

/* The check and the store of an option with a rule of its own (QUEUE_OPT), by its name;
 * dest is the qargs. */
int queue_opt_value(const char *cmd, const char *name, const char *value, void *dest);

/* Entries of the subcommands' tables (a is the qargs): a text or a flag stored as is, a
 * value checked by queue_opt_value; the options every subcommand takes end a table. Their
 * help is the usage's synopsis, shared by the subcommands: only QUEUE_OPTS_COMMON's is shown
 * as option lines. */
#define QUEUE_OPT_STR(a, name, field, value) CLI_OPT(0, name, CLI_OPT_STR, &(a)->field, value, NULL)
#define QUEUE_OPT_BOOL(a, name, field) CLI_OPT(0, name, CLI_OPT_BOOL, &(a)->field, NULL, NULL)
#define QUEUE_OPT(a, name, value) CLI_OPT(0, name, CLI_OPT_CALL, (a), value, NULL, .call = queue_opt_value)
#define QUEUE_OPTS_COMMON(a)                                                                     \
	CLI_OPT(0, "schema", CLI_OPT_STR, &(a)->schema, "NAME", "pgcoord schema (default: pgcoord)"), \
	CLI_OPT(0, "json", CLI_OPT_BOOL, &g_cli.json, NULL, "one JSON object per result"),           \
	CLI_OPT('h', "help", CLI_OPT_HELP, NULL, NULL, "show this help and exit"), CLI_OPT_TABLE_END
/* Connects and opens the queue handle for queue sub: 0 or the exit status (reported). */
int queue_open(const char *sub, const char *schema, pgc_conn **conn, pgc_queue **q);
/* A job id operand; false with *rc set after a usage error. */
bool queue_parse_id(const char *sub, const char *text, int64_t *id, int *rc);
/* "N/D" of a rate, or "none". */
const char *queue_rate_str(const pgc_rate *r, char *buf, size_t size);

/* The subcommands: argv[0] is the subcommand's name. */
int queue_do_enqueue(int argc, char **argv);
int queue_do_stats(int argc, char **argv);
int queue_do_list(int argc, char **argv);
int queue_do_show(int argc, char **argv);
int queue_do_limit(int argc, char **argv);
int queue_do_id_action(int argc, char **argv);
int queue_do_purge(int argc, char **argv);
int queue_do_pause(int argc, char **argv);
int queue_do_config(int argc, char **argv);
int queue_do_group(int argc, char **argv);

#endif

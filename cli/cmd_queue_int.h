/* cmd_queue_int.h - what the parts of pgcoord queue share: the parsed arguments, their parser
 * and helpers (cmd_queue.c), and the subcommands of the cmd_queue_*.c files */
#ifndef PGCOORD_CMD_QUEUE_INT_H
#define PGCOORD_CMD_QUEUE_INT_H

#include "cli.h"

enum {
	O_SCHEMA = 256, O_JSON, O_PAYLOAD, O_FILE, O_PRIORITY, O_DELAY, O_RUN_AT, O_MAX_ATTEMPTS,
	O_UNIQUE_KEY, O_PROMETHEUS, O_WATCH, O_STATUS, O_LIMIT, O_OLDER_THAN, O_AGING, O_SRET,
	O_FRET, O_MAX_PAYLOAD, O_MAX_DEFERRALS, O_ALL, O_KEY_PREFIX, O_BATCH, O_YES, O_KEY,
	O_KEY_LIMIT, O_RATE, O_KEY_RATE, O_FAIR, O_WEIGHT, O_REMOVE, O_AFTER, O_ON_DEP_FAILURE,
	O_GROUP, O_ON_COMPLETE_QUEUE
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

/* Parses the options of queue sub into *a, with at most max_pos operands: 0, -1 after
 * --help, or the exit status of a usage error. */
int queue_parse(const char *sub, int argc, char **argv, qargs *a, int max_pos);
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

/* cmd_cron_int.h - what the parts of pgcoord cron share: the parsed arguments and their
 * parser (cmd_cron.c), the subcommands of cmd_cron_sync.c and cmd_cron_run.c */
#ifndef PGCOORD_CMD_CRON_INT_H
#define PGCOORD_CMD_CRON_INT_H

#include "cli.h"

#define HISTORY_DEFAULT 20
#define BATCH_DEFAULT 100
#define CONCURRENCY_DEFAULT 4
#define GRACE_DEFAULT_MS 30000

/* What each subcommand accepts, besides --schema, --json and --help. */
enum {
	A_DEF = 0x01,     /* --tz --queue --payload --catch-up* --overlap --jitter --replace */
	A_LIMIT = 0x02,   /* --limit */
	A_DRYRUN = 0x04,  /* --dry-run */
	A_RUN = 0x08,     /* --batch --lookahead --once --wait-for-db -c --timeout --grace --no-commands */
	A_PROM = 0x10,    /* --prometheus */
	A_NEXT = 0x20,    /* --tz --from -n (cron next) */
	A_DB = 0x40,      /* --schema -q: every subcommand but next */
	A_ALL = 0x80      /* --json --help */
};

typedef struct cron_args {
	const char *sub;     /* "cron add", for messages */
	const char *schema;
	pgc_cron_schedule def;
	bool replace, dry_run, once, no_commands, prometheus, allow_empty;
	long long limit, batch, concurrency;
	int64_t dbwait_ms, timeout_ms, grace_ms, lookahead_ms;
	const char *next_tz, *from; /* cron next */
	long long count;
	int argc;            /* the operands */
	char **argv;
} cron_args;

/* Parses the options of sub ("cron add") that allowed (A_*) lets through into *a: 0, -1
 * after --help, or the exit status of a usage error. */
int cron_parse_args(int argc, char **argv, const char *sub, unsigned allowed, cron_args *a);
/* A usage error unless there are n operands; what names them. */
int cron_want_args(const cron_args *a, int n, const char *what);
/* Reports err for sub; the exit status. */
int cron_report(const char *sub, const pgc_error *err);
int cron_open_conn(const char *sub, pgc_conn **conn);

int cron_cmd_sync(int argc, char **argv);
int cron_cmd_run(int argc, char **argv);

#endif

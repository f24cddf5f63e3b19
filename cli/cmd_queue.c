/* cmd_queue.c - pgcoord queue: enqueue, stats, list, show, retry, cancel, purge, pause, resume,
 * config, limit, group
 *
 * This file holds the help, the options every subcommand parses (queue_parse), the helpers
 * they share and the subcommand table; each group of subcommands has its file:
 * cmd_queue_enqueue.c, cmd_queue_inspect.c (stats, list, show, limit), cmd_queue_bulk.c (retry,
 * cancel, purge), cmd_queue_config.c (pause, resume, config), cmd_queue_group.c. */
#include <errno.h>
#include <getopt.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>
#include <unistd.h>

#include "cmd_queue_int.h"
#include "diag_out.h"
#include "render.h"

static void usage(FILE *f)
{
	fputs("Usage: pgcoord [-d DSN] queue SUBCOMMAND [OPTIONS] [ARGS]\n"
	      "\n"
	      "Subcommands:\n"
	      "  enqueue QUEUE [--payload JSON | --file FILE | -] [--priority N]\n"
	      "          [--delay D | --run-at TIME] [--max-attempts N] [--unique-key K]\n"
	      "          [--max-deferrals N] [--key K] [--after ID,ID,...]\n"
	      "          [--on-dep-failure cancel|run] [--group G]\n"
	      "                       add jobs (a file: one JSON value per line, all or\n"
	      "                       nothing)\n"
	      "  stats [QUEUE] [--prometheus] [--watch D]\n"
	      "                       counts by status, oldest pending job, last-minute\n"
	      "                       throughput, dead tuples and the xmin horizon\n"
	      "  list [QUEUE] [--status S] [--limit N]\n"
	      "                       jobs, newest first (default limit 50), with the last\n"
	      "                       line of each one's error\n"
	      "  show ID              one job with its payload and error history, its\n"
	      "                       command's exit status and output, why it waits\n"
	      "  retry ID             run a failed or cancelled job again\n"
	      "  retry --all QUEUE [--status S] [--older-than D] [--key-prefix P]\n"
	      "          [--batch-size N] [--yes]\n"
	      "                       run its failed (or --status cancelled) jobs again\n"
	      "  cancel ID            cancel a job; a running one is stopped by its worker\n"
	      "  cancel --all QUEUE [--status S] [--older-than D] [--key-prefix P]\n"
	      "          [--batch-size N] [--yes]\n"
	      "                       cancel its pending, scheduled and waiting jobs\n"
	      "                       (never running ones)\n"
	      "  purge [QUEUE] [--status S] [--older-than D] [--key-prefix P]\n"
	      "          [--batch-size N] [--yes]\n"
	      "                       delete finished jobs from the history\n"
	      "  pause QUEUE          stop claims from QUEUE\n"
	      "  resume QUEUE         allow claims again\n"
	      "  config [--aging D] [--succeeded-retention D] [--failed-retention D]\n"
	      "         [--max-payload BYTES]\n"
	      "                       show or change the queue settings\n"
	      "  config QUEUE [--key-limit N|none] [--rate N/D|none] [--key-rate N/D|none]\n"
	      "         [--fair on|off]\n"
	      "                       show or change QUEUE's flow control: jobs running at\n"
	      "                       once per key, starts per interval of the queue and of\n"
	      "                       each key, keys taking turns\n"
	      "  group add G --on-complete-queue Q [--payload JSON]\n"
	      "                       create job group G: once it is closed and every\n"
	      "                       member has ended, one job goes to Q with the counts\n"
	      "  group close G        take no more members (fires at once if all ended)\n"
	      "  group show G | group list | group remove G\n"
	      "                       a group's counts, state and on-complete job\n"
	      "  limit QUEUE [KEY] [--limit N|none] [--weight W|none] [--rate N/D|none]\n"
	      "        [--remove]\n"
	      "                       show or change one key's own settings (without KEY:\n"
	      "                       list the keys); --remove drops them\n"
	      "\n"
	      "The bulk forms show how many jobs they will touch and ask for yes (or y) on a\n"
	      "terminal; --yes skips the question, and without a terminal it is required.\n"
	      "They work in batches of --batch-size jobs (default 1000), each in its own\n"
	      "short transaction. --key-prefix matches unique keys that start with P\n"
	      "(compared as is, no wildcards); --older-than counts from creation (cancel) or\n"
	      "from the end (retry, purge).\n"
	      "\n"
	      "--key K gives jobs a concurrency key: at most --key-limit (or the key's\n"
	      "--limit) of them run at once across all workers, and --rate/--key-rate space\n"
	      "their starts (N/D: at most N per D, e.g. 50/1s, 1000/1m).\n"
	      "\n"
	      "TIME (--run-at): ISO 8601 with an offset (2026-12-04T09:30:00Z,\n"
	      "2026-12-04 10:30+01:00), @SECONDS since 1970, or a duration from now (2h).\n"
	      "\n"
	      "S (--status) is waiting, scheduled, pending, running, succeeded, failed or\n"
	      "cancelled; cancel --all takes the first three, retry failed or cancelled,\n"
	      "purge the last three.\n"
	      "\n"
	      "--after makes jobs wait (status waiting) until those jobs succeed; when one\n"
	      "fails for good or is cancelled, --on-dep-failure cancel (the default)\n"
	      "cancels them, run runs them all the same. --group adds them to an open group.\n"
	      "\n"
	      "Options for every subcommand:\n", f);
	qargs dummy;
	const cli_opt common[] = { QUEUE_OPTS_COMMON(&dummy) };
	cli_opt_help(f, common, 23);
	fputs("\n"
	      "Durations: 500ms, 2s, 5m, 1h, 1d. Exit status: 0 ok; 1 duplicate unique key,\n"
	      "job running, or not confirmed; 64 usage (also a bulk form without --yes and\n"
	      "without a terminal); 65 bad data (invalid JSON, payload over the limit,\n"
	      "unknown queue, job, dependency or group); 69 database unavailable or schema\n"
	      "missing; 70 internal error. A closed group (enqueue) or a group still waiting\n"
	      "for members (remove) is refused with 1.\n"
	      "See pgcoord-queue(1).\n", f);
}


static bool parse_duration(const char *sub, const char *opt, const char *text, int64_t *out, int *rc)
{
	char cmd[40];
	snprintf(cmd, sizeof cmd, "queue %s", sub);
	return cli_duration_opt(cmd, opt, text, 0, INT64_MAX, out, rc);
}

/* A count of flow control (--key-limit, --limit of a key, --weight): 1..max, or "none" (0). */
static bool flow_count(const char *cmd, const char *opt, const char *text, long long max, int *out,
                       int *rc)
{
	long long v;
	if (strcmp(text, "none") == 0) {
		*out = 0;
		return true;
	}
	if (!cli_parse_int(text, 1, max, &v)) {
		*rc = cli_usage_error(cmd, "%s must be an integer from 1 to %lld, or none, not \"%s\"", opt,
		                      max, text);
		return false;
	}
	*out = (int)v;
	return true;
}

/* A rate N/DURATION, or "none" (n 0). */
static bool flow_rate(const char *cmd, const char *opt, const char *text, pgc_rate *out, int *rc)
{
	if (strcmp(text, "none") == 0) {
		out->n = 0;
		out->per_ms = 0;
		return true;
	}
	pgc_error e;
	if (pgc_rate_parse(text, out, &e) != PGC_OK) {
		*rc = cli_usage_error(cmd, "%s: %s", opt, e.message);
		return false;
	}
	return true;
}

/* --after ID,ID,...: positive job ids, at most PGC_QUEUE_AFTER_MAX. */
static bool parse_after(const char *cmd, const char *text, qargs *a, int *rc)
{
	if (a->has_after) {
		*rc = cli_usage_error(cmd, "give --after once, with the ids separated by commas");
		return false;
	}
	size_t cap = 1;
	for (const char *p = text; *p; p++)
		cap += *p == ',';
	if (cap > PGC_QUEUE_AFTER_MAX) {
		*rc = cli_usage_error(cmd, "--after lists %zu jobs, more than %d", cap, PGC_QUEUE_AFTER_MAX);
		return false;
	}
	a->has_after = true;
	const char *p = text;
	for (size_t i = 0; i < cap; i++) {
		const char *end = strchr(p, ',');
		size_t len = end ? (size_t)(end - p) : strlen(p);
		char one[32];
		long long v;
		if (len == 0 || len >= sizeof one) {
			*rc = cli_usage_error(cmd, "--after must be job ids separated by commas, not \"%s\"", text);
			return false;
		}
		memcpy(one, p, len);
		one[len] = '\0';
		if (!cli_parse_int(one, 1, INT64_MAX, &v)) {
			*rc = cli_usage_error(cmd, "--after: job ID must be a positive integer, not \"%s\"", one);
			return false;
		}
		a->after[a->n_after++] = v;
		p = end ? end + 1 : p + len;
	}
	return true;
}

/* Parses the options every subcommand shares and its own; positional arguments go to a->pos. */
void queue_args_init(qargs *a)
{
	memset(a, 0, sizeof *a);
	a->schema = PGC_SCHEMA_DEFAULT;
	a->max_attempts = 0;
	a->limit = 50;
	a->max_payload = -1;
	a->aging_ms = a->sret_ms = a->fret_ms = -1;
	a->key_limit = a->weight = a->fair = a->key_lim = -1;
	a->rate.n = a->key_rate.n = -1;
	a->on_dep_failure = -1;
}

/* The options whose value has a check of its own (QUEUE_OPT): dest is the qargs. */
static const struct {
	const char *name;
	int id;
} checked[] = {
	{ "key-prefix", O_KEY_PREFIX }, { "batch-size", O_BATCH }, { "max-deferrals", O_MAX_DEFERRALS },
	{ "priority", O_PRIORITY }, { "max-attempts", O_MAX_ATTEMPTS }, { "limit", O_LIMIT }, { "key", O_KEY },
	{ "key-limit", O_KEY_LIMIT }, { "weight", O_WEIGHT }, { "rate", O_RATE }, { "key-rate", O_KEY_RATE },
	{ "fair", O_FAIR }, { "after", O_AFTER }, { "on-dep-failure", O_ON_DEP_FAILURE }, { "group", O_GROUP },
	{ "on-complete-queue", O_ON_COMPLETE_QUEUE }, { "max-payload", O_MAX_PAYLOAD }, { "delay", O_DELAY },
	{ "watch", O_WATCH }, { "older-than", O_OLDER_THAN }, { "aging", O_AGING },
	{ "succeeded-retention", O_SRET }, { "failed-retention", O_FRET },
};

int queue_opt_value(const char *cmd, const char *name, const char *optarg, void *dest)
{
	qargs *a = dest;
	const char *sub = cmd + strlen("queue ");
	int ch = 0, rc = 0;
	for (size_t i = 0; i < sizeof checked / sizeof checked[0] && ch == 0; i++)
		if (strcmp(name + 2, checked[i].name) == 0)
			ch = checked[i].id;
	switch (ch) {
	case O_KEY_PREFIX:
		if (*optarg == '\0')
			return cli_usage_error(cmd, "--key-prefix must not be empty");
		a->key_prefix = optarg;
		break;
	case O_BATCH:
		if (!cli_parse_int(optarg, 1, 10000, &a->batch))
			return cli_usage_error(cmd, "--batch-size must be an integer from 1 to 10000, not \"%s\"", optarg);
		break;
	case O_MAX_DEFERRALS:
		if (!cli_parse_int(optarg, 1, 1000000, &a->max_deferrals))
			return cli_usage_error(cmd, "--max-deferrals must be an integer from 1 to 1000000, not \"%s\"", optarg);
		break;
	case O_PRIORITY:
		if (!cli_parse_int(optarg, PGC_QUEUE_PRIORITY_MIN, PGC_QUEUE_PRIORITY_MAX, &a->priority))
			return cli_usage_error(cmd, "--priority must be an integer from %d to %d, not \"%s\"",
			                       PGC_QUEUE_PRIORITY_MIN, PGC_QUEUE_PRIORITY_MAX, optarg);
		a->has_priority = true;
		break;
	case O_MAX_ATTEMPTS:
		if (!cli_parse_int(optarg, 1, 1000000, &a->max_attempts))
			return cli_usage_error(cmd, "--max-attempts must be an integer from 1 to 1000000, not \"%s\"", optarg);
		break;
	case O_LIMIT:
		if (strcmp(sub, "limit") == 0) {
			if (!flow_count(cmd, "--limit", optarg, 1000000, &a->key_lim, &rc))
				return rc;
		} else if (!cli_parse_int(optarg, 1, 1000000, &a->limit)) {
			return cli_usage_error(cmd, "--limit must be an integer from 1 to 1000000, not \"%s\"", optarg);
		}
		a->has_limit = true;
		break;
	case O_KEY:
		if (*optarg == '\0')
			return cli_usage_error(cmd, "--key must not be empty");
		if (strlen(optarg) > PGC_QUEUE_KEY_MAX)
			return cli_usage_error(cmd, "--key is %zu bytes, longer than %d", strlen(optarg),
			                       PGC_QUEUE_KEY_MAX);
		a->key = optarg;
		break;
	case O_KEY_LIMIT:
		if (!flow_count(cmd, "--key-limit", optarg, 1000000, &a->key_limit, &rc))
			return rc;
		break;
	case O_WEIGHT:
		if (!flow_count(cmd, "--weight", optarg, PGC_QUEUE_WEIGHT_MAX, &a->weight, &rc))
			return rc;
		break;
	case O_RATE:
		if (!flow_rate(cmd, "--rate", optarg, &a->rate, &rc))
			return rc;
		break;
	case O_KEY_RATE:
		if (!flow_rate(cmd, "--key-rate", optarg, &a->key_rate, &rc))
			return rc;
		break;
	case O_FAIR:
		if (strcmp(optarg, "on") == 0)
			a->fair = 1;
		else if (strcmp(optarg, "off") == 0)
			a->fair = 0;
		else
			return cli_usage_error(cmd, "--fair must be on or off, not \"%s\"", optarg);
		break;
	case O_AFTER:
		if (!parse_after(cmd, optarg, a, &rc))
			return rc;
		break;
	case O_ON_DEP_FAILURE:
		if (strcmp(optarg, "cancel") == 0)
			a->on_dep_failure = PGC_DEP_CANCEL;
		else if (strcmp(optarg, "run") == 0)
			a->on_dep_failure = PGC_DEP_RUN;
		else
			return cli_usage_error(cmd, "--on-dep-failure must be cancel or run, not \"%s\"", optarg);
		break;
	case O_GROUP:
	case O_ON_COMPLETE_QUEUE: {
		const char *opt = ch == O_GROUP ? "--group" : "--on-complete-queue";
		size_t max = ch == O_GROUP ? PGC_QUEUE_GROUP_MAX : PGC_QUEUE_NAME_MAX;
		if (*optarg == '\0')
			return cli_usage_error(cmd, "%s must not be empty", opt);
		if (strlen(optarg) > max)
			return cli_usage_error(cmd, "%s is %zu bytes, longer than %zu", opt, strlen(optarg), max);
		*(ch == O_GROUP ? &a->group : &a->on_complete_queue) = optarg;
		break;
	}
	case O_MAX_PAYLOAD:
		if (!cli_parse_int(optarg, 1, 1073741823, &a->max_payload))
			return cli_usage_error(cmd, "--max-payload must be a positive number of bytes, not \"%s\"", optarg);
		break;
	case O_DELAY:
		if (!parse_duration(sub, "--delay", optarg, &a->delay_ms, &rc))
			return rc;
		a->has_delay = true;
		break;
	case O_WATCH:
		if (!parse_duration(sub, "--watch", optarg, &a->watch_ms, &rc))
			return rc;
		if (a->watch_ms < 100)
			return cli_usage_error(cmd, "--watch must be at least 100ms");
		break;
	case O_OLDER_THAN:
		if (!parse_duration(sub, "--older-than", optarg, &a->older_than_ms, &rc))
			return rc;
		a->has_older = true;
		break;
	case O_AGING:
		if (!parse_duration(sub, "--aging", optarg, &a->aging_ms, &rc))
			return rc;
		if (a->aging_ms == 0)
			return cli_usage_error(cmd, "--aging must be positive");
		break;
	case O_SRET:
		if (!parse_duration(sub, "--succeeded-retention", optarg, &a->sret_ms, &rc))
			return rc;
		break;
	case O_FRET:
		if (!parse_duration(sub, "--failed-retention", optarg, &a->fret_ms, &rc))
			return rc;
		break;
	default:
		abort(); /* a QUEUE_OPT this switch does not know: a programming error */
	}
	return 0;
}

/* Every option a queue subcommand takes, with whether it has a value: another subcommand's
 * option is refused as not applying (rather than as unknown). */
static const struct {
	const char *name;
	bool value;
} every[] = {
	{ "payload", true }, { "file", true }, { "run-at", true }, { "unique-key", true }, { "priority", true },
	{ "delay", true }, { "max-attempts", true }, { "max-deferrals", true }, { "key", true }, { "after", true },
	{ "on-dep-failure", true }, { "group", true }, { "on-complete-queue", true }, { "all", false },
	{ "key-prefix", true }, { "batch-size", true }, { "yes", false }, { "prometheus", false },
	{ "watch", true }, { "status", true }, { "limit", true }, { "key-limit", true }, { "rate", true },
	{ "key-rate", true }, { "fair", true }, { "weight", true }, { "remove", false }, { "older-than", true },
	{ "aging", true }, { "succeeded-retention", true }, { "failed-retention", true },
	{ "max-payload", true },
};

static int not_here(const char *cmd, const char *opt, const char *value, void *dest)
{
	(void)value;
	(void)dest;
	return cli_usage_error(cmd, "%s does not apply to %s", opt, cmd);
}

int queue_parse(const char *sub, const cli_opt *opts, int argc, char **argv, qargs *a, int max_pos)
{
	char cmd[40];
	snprintf(cmd, sizeof cmd, "queue %s", sub);
	/* The subcommand's table, then the other subcommands' options, refused by not_here. */
	cli_opt all[sizeof every / sizeof every[0] + 8];
	size_t n = 0;
	for (; opts[n].type != CLI_OPT_END; n++)
		all[n] = opts[n];
	size_t own = n;
	for (size_t i = 0; i < sizeof every / sizeof every[0]; i++) {
		bool mine = false;
		for (size_t j = 0; j < own && !mine; j++)
			mine = opts[j].long_name != NULL && strcmp(opts[j].long_name, every[i].name) == 0;
		if (!mine)
			all[n++] = (cli_opt)CLI_OPT(0, every[i].name, CLI_OPT_CALL, NULL, "X", NULL, .call = not_here,
			                            .flags = every[i].value ? 0 : CLI_OPT_OPTIONAL);
	}
	all[n] = (cli_opt)CLI_OPT_TABLE_END;
	cli_opt_usage_set(usage);
	optind = 0; /* glibc: start over */
	int first, rc = cli_opt_parse(cmd, all, argc, argv, &first);
	if (rc != 0)
		return rc;
	if (*a->schema == '\0')
		return cli_usage_error(cmd, "--schema must not be empty");
	for (; first < argc; first++) {
		if (a->npos >= max_pos)
			return cli_usage_error(cmd, "unexpected argument \"%s\"", argv[first]);
		a->pos[a->npos++] = argv[first];
	}
	return 0;
}

int queue_open(const char *sub, const char *schema, pgc_conn **conn, pgc_queue **q)
{
	char app[40];
	snprintf(app, sizeof app, "queue-%s", sub);
	int rc = cli_connect(app, conn);
	if (rc != 0)
		return rc;
	pgc_queue_options qo = PGC_QUEUE_OPTIONS_INIT;
	qo.schema = schema;
	qo.prepare = false; /* one-shot commands */
	pgc_error err;
	if (pgc_queue_open(*conn, &qo, q, &err) != PGC_OK) {
		rc = cli_report(&err);
		pgc_conn_close(*conn);
		return rc;
	}
	return 0;
}

bool queue_parse_id(const char *sub, const char *text, int64_t *id, int *rc)
{
	long long v;
	char cmd[40];
	snprintf(cmd, sizeof cmd, "queue %s", sub);
	if (text == NULL) {
		*rc = cli_usage_error(cmd, "a job ID is required");
		return false;
	}
	if (!cli_parse_int(text, 1, INT64_MAX, &v)) {
		*rc = cli_usage_error(cmd, "job ID must be a positive integer, not \"%s\"", text);
		return false;
	}
	*id = v;
	return true;
}

/* The subcommands, each in the cmd_queue_*.c file of its group; argv[0] is the name. */
static const struct queue_sub {
	const char *name;
	int (*fn)(int argc, char **argv);
} subs[] = {
	{ "enqueue", queue_do_enqueue },    /* cmd_queue_enqueue.c */
	{ "stats", queue_do_stats },        /* cmd_queue_inspect.c */
	{ "list", queue_do_list },
	{ "show", queue_do_show },
	{ "limit", queue_do_limit },
	{ "retry", queue_do_id_action },    /* cmd_queue_bulk.c */
	{ "cancel", queue_do_id_action },
	{ "purge", queue_do_purge },
	{ "pause", queue_do_pause },        /* cmd_queue_config.c */
	{ "resume", queue_do_pause },
	{ "config", queue_do_config },
	{ "group", queue_do_group },        /* cmd_queue_group.c */
	{ NULL, NULL },
};

int cmd_queue(int argc, char **argv)
{
	if (argc < 2) {
		cli_errorf("no queue subcommand given");
		usage(stderr);
		return EXIT_USAGE;
	}
	const char *sub = argv[1];
	if (strcmp(sub, "--help") == 0 || strcmp(sub, "-h") == 0) {
		usage(stdout);
		return 0;
	}
	argc--;
	argv++;
	for (const struct queue_sub *s = subs; s->name != NULL; s++)
		if (strcmp(sub, s->name) == 0)
			return s->fn(argc, argv);
	return cli_usage_error("queue", "unknown queue subcommand \"%s\"", sub);
}

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
	      "Options for every subcommand:\n"
	      "      --schema=NAME    pgcoord schema (default: pgcoord)\n"
	      "      --json           one JSON object per result\n"
	      "  -h, --help           show this help and exit\n"
	      "\n"
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
int queue_parse(const char *sub, int argc, char **argv, qargs *a, int max_pos)
{
	static const struct option longopts[] = {
		{ "schema", required_argument, NULL, O_SCHEMA },
		{ "json", no_argument, NULL, O_JSON },
		{ "payload", required_argument, NULL, O_PAYLOAD },
		{ "file", required_argument, NULL, O_FILE },
		{ "priority", required_argument, NULL, O_PRIORITY },
		{ "delay", required_argument, NULL, O_DELAY },
		{ "run-at", required_argument, NULL, O_RUN_AT },
		{ "max-attempts", required_argument, NULL, O_MAX_ATTEMPTS },
		{ "unique-key", required_argument, NULL, O_UNIQUE_KEY },
		{ "prometheus", no_argument, NULL, O_PROMETHEUS },
		{ "watch", required_argument, NULL, O_WATCH },
		{ "status", required_argument, NULL, O_STATUS },
		{ "limit", required_argument, NULL, O_LIMIT },
		{ "older-than", required_argument, NULL, O_OLDER_THAN },
		{ "aging", required_argument, NULL, O_AGING },
		{ "succeeded-retention", required_argument, NULL, O_SRET },
		{ "failed-retention", required_argument, NULL, O_FRET },
		{ "max-payload", required_argument, NULL, O_MAX_PAYLOAD },
		{ "max-deferrals", required_argument, NULL, O_MAX_DEFERRALS },
		{ "all", no_argument, NULL, O_ALL },
		{ "key-prefix", required_argument, NULL, O_KEY_PREFIX },
		{ "batch-size", required_argument, NULL, O_BATCH },
		{ "yes", no_argument, NULL, O_YES },
		{ "key", required_argument, NULL, O_KEY },
		{ "key-limit", required_argument, NULL, O_KEY_LIMIT },
		{ "rate", required_argument, NULL, O_RATE },
		{ "key-rate", required_argument, NULL, O_KEY_RATE },
		{ "fair", required_argument, NULL, O_FAIR },
		{ "weight", required_argument, NULL, O_WEIGHT },
		{ "remove", no_argument, NULL, O_REMOVE },
		{ "after", required_argument, NULL, O_AFTER },
		{ "on-dep-failure", required_argument, NULL, O_ON_DEP_FAILURE },
		{ "group", required_argument, NULL, O_GROUP },
		{ "on-complete-queue", required_argument, NULL, O_ON_COMPLETE_QUEUE },
		{ "help", no_argument, NULL, 'h' },
		{ NULL, 0, NULL, 0 },
	};
	char cmd[40];
	snprintf(cmd, sizeof cmd, "queue %s", sub);
	memset(a, 0, sizeof *a);
	a->schema = PGC_SCHEMA_DEFAULT;
	a->max_attempts = 0;
	a->limit = 50;
	a->max_payload = -1;
	a->aging_ms = a->sret_ms = a->fret_ms = -1;
	a->key_limit = a->weight = a->fair = a->key_lim = -1;
	a->rate.n = a->key_rate.n = -1;
	a->on_dep_failure = -1;
	int ch, rc = 0;
	optind = 0; /* glibc: start over */
	opterr = 0;
	while ((ch = getopt_long(argc, argv, ":h", longopts, NULL)) != -1) {
		switch (ch) {
		case O_SCHEMA: a->schema = optarg; break;
		case O_JSON: g_cli.json = true; break;
		case O_PAYLOAD: a->payload = optarg; break;
		case O_FILE: a->file = optarg; break;
		case O_RUN_AT: a->run_at = optarg; break;
		case O_UNIQUE_KEY: a->unique_key = optarg; break;
		case O_STATUS: a->status = optarg; break;
		case O_PROMETHEUS: a->prometheus = true; break;
		case O_ALL: a->all = true; break;
		case O_YES: a->yes = true; break;
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
		case O_REMOVE: a->remove = true; break;
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
		case 'h':
			usage(stdout);
			return -1;
		default:
			return cli_getopt_error(cmd, ch, argv);
		}
	}
	/* Which options belong to which subcommand. */
	struct { bool set; const char *name; const char *subs; } owned[] = {
		{ a->payload != NULL, "--payload", "enqueue group" },
		{ a->file != NULL, "--file", "enqueue" },
		{ a->run_at != NULL, "--run-at", "enqueue" },
		{ a->unique_key != NULL, "--unique-key", "enqueue" },
		{ a->has_priority, "--priority", "enqueue" },
		{ a->has_delay, "--delay", "enqueue" },
		{ a->max_attempts != 0, "--max-attempts", "enqueue" },
		{ a->max_deferrals != 0, "--max-deferrals", "enqueue" },
		{ a->all, "--all", "cancel retry" },
		{ a->key_prefix != NULL, "--key-prefix", "cancel retry purge" },
		{ a->batch != 0, "--batch-size", "cancel retry purge" },
		{ a->yes, "--yes", "cancel retry purge" },
		{ a->prometheus, "--prometheus", "stats" },
		{ a->watch_ms != 0, "--watch", "stats" },
		{ a->status != NULL, "--status", "list purge cancel retry" },
		{ a->has_limit, "--limit", "list limit" },
		{ a->key != NULL, "--key", "enqueue" },
		{ a->has_after, "--after", "enqueue" },
		{ a->on_dep_failure >= 0, "--on-dep-failure", "enqueue" },
		{ a->group != NULL, "--group", "enqueue" },
		{ a->on_complete_queue != NULL, "--on-complete-queue", "group" },
		{ a->key_limit >= 0, "--key-limit", "config" },
		{ a->rate.n >= 0, "--rate", "config limit" },
		{ a->key_rate.n >= 0, "--key-rate", "config" },
		{ a->fair >= 0, "--fair", "config" },
		{ a->weight >= 0, "--weight", "limit" },
		{ a->remove, "--remove", "limit" },
		{ a->has_older, "--older-than", "purge cancel retry" },
		{ a->aging_ms >= 0, "--aging", "config" },
		{ a->sret_ms >= 0, "--succeeded-retention", "config" },
		{ a->fret_ms >= 0, "--failed-retention", "config" },
		{ a->max_payload >= 0, "--max-payload", "config" },
	};
	for (size_t i = 0; i < sizeof owned / sizeof owned[0]; i++) {
		if (!owned[i].set)
			continue;
		const char *p = strstr(owned[i].subs, sub);
		size_t l = strlen(sub);
		if (p == NULL || (p[l] != '\0' && p[l] != ' '))
			return cli_usage_error(cmd, "%s does not apply to queue %s", owned[i].name, sub);
	}
	if (*a->schema == '\0')
		return cli_usage_error(cmd, "--schema must not be empty");
	for (; optind < argc; optind++) {
		if (a->npos >= max_pos)
			return cli_usage_error(cmd, "unexpected argument \"%s\"", argv[optind]);
		a->pos[a->npos++] = argv[optind];
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

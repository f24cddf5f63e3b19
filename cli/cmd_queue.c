/* cmd_queue.c - pgcoord queue: enqueue, stats, list, show, retry, cancel, purge, pause, resume,
 * config, limit
 *
 * The bulk forms (cancel --all, retry --all, purge) count first, ask on a terminal (or take
 * --yes), then work in short batches through pgc_queue_bulk_run. */
#include <errno.h>
#include <getopt.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>
#include <unistd.h>

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
static int parse(const char *sub, int argc, char **argv, qargs *a, int max_pos)
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

static int open_queue(const char *sub, const char *schema, pgc_conn **conn, pgc_queue **q)
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

static bool parse_id(const char *sub, const char *text, int64_t *id, int *rc)
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

/* ---- enqueue -------------------------------------------------------------------------------- */

static const char *strip_payload_prefix(const char *msg)
{
	/* "payload 3 is not valid JSON: ..." -> "not valid JSON: ..." */
	if (strncmp(msg, "payload ", 8) != 0)
		return msg;
	const char *p = msg + 8;
	while (*p >= '0' && *p <= '9')
		p++;
	if (strncmp(p, " is ", 4) == 0)
		return p + 4;
	return msg;
}

static int enqueue_file(pgc_conn *conn, pgc_queue *q, const char *queue, const char *path,
                        const pgc_job_options *jo)
{
	cli_lines l;
	int rc = cli_read_lines(path, &l);
	if (rc != 0)
		return rc;
	const char *name = strcmp(path, "-") == 0 ? "standard input" : path;
	if (l.n == 0) {
		cli_lines_free(&l);
		cli_errorf("%s has no jobs (no non-blank line)", name);
		return EXIT_DATAERR;
	}
	pgc_error err;
	/* Check the size limit here first: a line far over it (say 100 MB) would otherwise be
	 * escaped into a second copy, sent, and parsed by the server only to be refused. The
	 * server's check stays the authority. */
	pgc_queue_config cfg;
	if (pgc_queue_config_get(q, &cfg, &err) == PGC_OK && cfg.max_payload_bytes > 0) {
		for (size_t i = 0; i < l.n; i++) {
			size_t len = strlen(l.line[i]);
			if (len > (size_t)cfg.max_payload_bytes) {
				cli_errorf("%s line %ld: %zu bytes, over the limit of %d bytes", name, l.lineno[i],
				           len, cfg.max_payload_bytes);
				cli_errorf("nothing was enqueued");
				cli_lines_free(&l);
				return EXIT_DATAERR;
			}
		}
	}
	bool tty = isatty(STDERR_FILENO) && !g_cli.quiet && l.n >= 10000;
	/* One transaction: all or nothing. */
	if (pgc_exec(conn, "BEGIN", &err) != PGC_OK) {
		cli_lines_free(&l);
		rc = cli_report(&err);
		cli_errorf("nothing was enqueued");
		return rc;
	}
	size_t chunk = 5000, total = 0;
	for (size_t at = 0; at < l.n; at += chunk) {
		size_t k = l.n - at < chunk ? l.n - at : chunk;
		size_t ins = 0;
		long bad = -1;
		rc = pgc_queue_enqueue_many(q, queue, k, (const char *const *)l.line + at, NULL, jo, NULL,
		                            &ins, &bad, &err);
		if (rc != PGC_OK) {
			pgc_error e2;
			(void)!pgc_exec(conn, "ROLLBACK", &e2);
			if (tty)
				fputc('\n', stderr);
			if (bad >= 0 && (size_t)bad < k) {
				cli_errorf("%s line %ld: %s%s%s", name, l.lineno[at + (size_t)bad],
				           strip_payload_prefix(err.message), err.detail[0] ? ": " : "", err.detail);
				cli_errorf("nothing was enqueued");
				cli_lines_free(&l);
				return EXIT_DATAERR;
			}
			rc = cli_report(&err);
			cli_errorf("nothing was enqueued");
			cli_lines_free(&l);
			return rc;
		}
		total += ins;
		if (tty)
			fprintf(stderr, "\renqueued %zu/%zu", at + k, l.n);
	}
	if (tty)
		fputc('\n', stderr);
	if (pgc_exec(conn, "COMMIT", &err) != PGC_OK) {
		size_t n = l.n;
		cli_lines_free(&l);
		rc = cli_report(&err);
		/* A session lost while COMMIT was on its way leaves the outcome unknown: say so,
		 * rather than let a script retry a batch that may have landed. */
		if (err.code == PGC_ECONNLOST)
			cli_errorf("the session was lost during COMMIT: the %zu job%s may or may not have been enqueued",
			           n, n == 1 ? "" : "s");
		return rc;
	}
	if (g_cli.json) {
		fputs("{\"queue\":", stdout);
		json_str(stdout, queue);
		printf(",\"enqueued\":%zu,\"skipped\":%zu}\n", total, l.n - total);
	} else if (!g_cli.quiet) {
		printf("enqueued %zu job%s in queue %s", total, total == 1 ? "" : "s", cli_esc(queue));
		if (l.n > total)
			printf(" (%zu skipped: unique key taken)", l.n - total);
		putchar('\n');
	}
	cli_lines_free(&l);
	return 0;
}

static int do_enqueue(int argc, char **argv)
{
	qargs a;
	int rc = parse("enqueue", argc, argv, &a, 2);
	if (rc != 0)
		return rc < 0 ? 0 : rc;
	if (a.npos == 0)
		return cli_usage_error("queue enqueue", "a queue name is required");
	const char *queue = a.pos[0];
	if (*queue == '\0')
		return cli_usage_error("queue enqueue", "the queue name must not be empty");
	if (strlen(queue) > PGC_QUEUE_NAME_MAX)
		return cli_usage_error("queue enqueue", "the queue name is longer than %d bytes", PGC_QUEUE_NAME_MAX);
	pgc_error nerr;
	if (pgc_name_check("queue name", queue, PGC_QUEUE_NAME_MAX, &nerr) != PGC_OK)
		return cli_usage_error("queue enqueue", "%s", nerr.message);
	if (a.npos == 2) {
		if (strcmp(a.pos[1], "-") != 0)
			return cli_usage_error("queue enqueue", "unexpected argument \"%s\"", a.pos[1]);
		if (a.file != NULL)
			return cli_usage_error("queue enqueue", "give --file or -, not both");
		a.file = "-";
	}
	if (a.payload != NULL && a.file != NULL)
		return cli_usage_error("queue enqueue", "give --payload or --file, not both");
	if (a.has_delay && a.run_at != NULL)
		return cli_usage_error("queue enqueue", "give --delay or --run-at, not both");
	if (a.unique_key != NULL && a.file != NULL)
		return cli_usage_error("queue enqueue", "--unique-key applies to one job, not to a file");
	if (a.unique_key != NULL && *a.unique_key == '\0')
		return cli_usage_error("queue enqueue", "--unique-key must not be empty");
	/* --run-at's TIME, in the one grammar of TIME options, sent as ISO 8601 in UTC (or, for
	 * a duration, as the delay it is, on the server's clock). */
	char run_at[CLI_TIME_ISO_MAX];
	if (a.run_at != NULL) {
		cli_time t;
		int trc;
		if (!cli_time_opt("queue enqueue", "--run-at", a.run_at, NULL, &t, &trc))
			return trc;
		if (t.relative) {
			a.delay_ms = t.rel_ms;
			a.run_at = NULL;
		} else {
			a.run_at = cli_time_iso(&t, run_at);
		}
	}
	if (a.on_dep_failure >= 0 && !a.has_after)
		return cli_usage_error("queue enqueue", "--on-dep-failure needs --after");

	pgc_job_options jo = PGC_JOB_OPTIONS_INIT;
	jo.priority = (int)a.priority;
	jo.delay_ms = a.delay_ms;
	jo.run_at = a.run_at;
	jo.max_attempts = (int)a.max_attempts;
	jo.max_deferrals = (int)a.max_deferrals;
	jo.key = a.key;
	jo.after = a.has_after ? a.after : NULL;
	jo.n_after = a.n_after;
	if (a.on_dep_failure >= 0)
		jo.on_dep_failure = (pgc_dep_policy)a.on_dep_failure;
	jo.group = a.group;

	pgc_conn *conn;
	pgc_queue *q;
	if ((rc = open_queue("enqueue", a.schema, &conn, &q)) != 0) {
		/* Nothing was sent yet, whatever ended the session: a script may try again. */
		cli_errorf("nothing was enqueued");
		return rc;
	}
	pgc_error err;
	if (a.file != NULL) {
		rc = enqueue_file(conn, q, queue, a.file, &jo);
	} else {
		jo.unique_key = a.unique_key;
		int64_t id = 0;
		if (pgc_queue_enqueue(q, queue, a.payload ? a.payload : "{}", &jo, &id, &err) != PGC_OK) {
			if (strncmp(err.message, "payload 1 is ", 13) == 0) {
				/* Name the option rather than an array position. */
				char msg[PGC_ERROR_MESSAGE_MAX + 16];
				snprintf(msg, sizeof msg, "--payload is %s", err.message + 13);
				snprintf(err.message, sizeof err.message, "%s", msg);
			}
			bool standby = strcmp(err.sqlstate, "25006") == 0 || strcmp(err.sqlstate, "55000") == 0;
			rc = cli_report(&err);
			/* The statement commits by itself: a session lost while it was on its way leaves
			 * the outcome unknown (a standby's refusal is known: nothing was written). */
			if (err.code == PGC_ECONNLOST && !standby)
				cli_errorf("the session was lost while the job was sent: it may or may not have been enqueued");
		} else if (g_cli.json) {
			fputs("{\"queue\":", stdout);
			json_str(stdout, queue);
			printf(",\"id\":%lld}\n", (long long)id);
		} else if (!g_cli.quiet) {
			printf("enqueued job %lld in queue %s\n", (long long)id, cli_esc(queue));
		}
	}
	pgc_queue_close(q);
	pgc_conn_close(conn);
	return rc;
}

/* ---- stats ---------------------------------------------------------------------------------- */

static const char *rate_str(const pgc_rate *r, char *buf, size_t size);
static void print_keys_table(const pgc_queue_key_info *k, size_t n, size_t max);

static void print_flow_stats(const pgc_queue_key_info *k, size_t nk, bool prometheus)
{
	if (prometheus) {
		cli_prom_queue_keys(stdout, k, nk);
		return;
	}
	if (nk == 0)
		return;
	putchar('\n');
	print_keys_table(k, nk, 50);
}

static void print_stats(const pgc_queue_stat *st, size_t n, const pgc_queue_health *h,
                        const pgc_queue_key_info *k, size_t nk, bool prometheus)
{
	if (prometheus) {
		cli_prom_queue_stats(stdout, st, n, h);
		print_flow_stats(k, nk, true);
		return;
	}
	if (g_cli.json) {
		json_w w = json_w_on(stdout);
		json_obj(&w, NULL);
		json_arr(&w, "queues");
		for (size_t i = 0; i < n; i++)
			render_queue_stat(&w, NULL, &st[i]);
		json_arr_end(&w);
		json_obj(&w, "tables");
		json_obj(&w, "jobs");
		json_i(&w, "live_tuples", h->jobs_live_tuples);
		json_i(&w, "dead_tuples", h->jobs_dead_tuples);
		json_s(&w, "last_autovacuum", h->jobs_last_autovacuum[0] ? h->jobs_last_autovacuum : NULL);
		json_obj_end(&w);
		json_obj(&w, "job_history");
		json_i(&w, "live_tuples", h->history_live_tuples);
		json_i(&w, "dead_tuples", h->history_dead_tuples);
		json_s(&w, "last_autovacuum", h->history_last_autovacuum[0] ? h->history_last_autovacuum : NULL);
		json_obj_end(&w);
		json_obj_end(&w);
		if (h->horizon_pid == 0) {
			json_null(&w, "xmin_horizon");
		} else {
			json_obj(&w, "xmin_horizon");
			json_i(&w, "pid", h->horizon_pid);
			json_i(&w, "xmin_age", h->horizon_xmin_age);
			json_f(&w, "xact_age_s", h->horizon_xact_age_s, 3);
			json_s(&w, "application_name", h->horizon_application);
			json_s(&w, "state", h->horizon_state);
			json_obj_end(&w);
		}
		if (h->horizon_slot[0] == '\0') {
			json_null(&w, "replication_slot");
		} else {
			json_obj(&w, "replication_slot");
			json_s(&w, "name", h->horizon_slot);
			json_i(&w, "xmin_age", h->horizon_slot_xmin_age);
			json_obj_end(&w);
		}
		json_arr(&w, "keys");
		for (size_t i = 0; i < nk; i++)
			render_key(&w, NULL, &k[i]);
		json_arr_end(&w);
		json_obj_end(&w);
		fputc('\n', stdout);
		return;
	}
	printf("%-20s %6s %8s %9s %7s %9s %7s %9s %9s %7s %9s %7s\n", "QUEUE", "PAUSED", "PENDING",
	       "SCHEDULED", "RUNNING", "SUCCEEDED", "FAILED", "CANCELLED", "OLDEST_S", "DONE/1M",
	       "FAILED/1M", "WAITING");
	for (size_t i = 0; i < n; i++)
		printf("%-20s %6s %8ld %9ld %7ld %9ld %7ld %9ld %9.1f %7ld %9ld %7ld\n", cli_esc(st[i].queue),
		       st[i].paused ? "yes" : "no", st[i].pending, st[i].scheduled, st[i].running,
		       st[i].succeeded, st[i].failed, st[i].cancelled, st[i].oldest_pending_s,
		       st[i].completed_1m, st[i].failed_1m, st[i].waiting);
	if (n == 0)
		puts("(no queues yet)");
	print_flow_stats(k, nk, false);
	char t[CLI_TIME_MAX];
	printf("\ntable jobs: %ld live, %ld dead tuples, last vacuum %s\n", h->jobs_live_tuples,
	       h->jobs_dead_tuples,
	       h->jobs_last_autovacuum[0] ? cli_fmt_time(h->jobs_last_autovacuum, t, sizeof t) : "never");
	printf("table job_history: %ld live, %ld dead tuples, last vacuum %s\n", h->history_live_tuples,
	       h->history_dead_tuples,
	       h->history_last_autovacuum[0] ? cli_fmt_time(h->history_last_autovacuum, t, sizeof t) : "never");
	if (h->horizon_pid != 0)
		printf("xmin horizon: pid %d (%s, %s) holds xmin %ld transaction%s old, transaction open %.1f s\n",
		       h->horizon_pid, h->horizon_application[0] ? cli_esc(h->horizon_application) : "?",
		       h->horizon_state[0] ? h->horizon_state : "?", h->horizon_xmin_age,
		       h->horizon_xmin_age == 1 ? "" : "s", h->horizon_xact_age_s);
	else
		puts("xmin horizon: no other session holds back vacuum");
	if (h->horizon_slot[0] != '\0')
		printf("replication slot %s holds xmin %ld transaction%s old\n", cli_esc(h->horizon_slot),
		       h->horizon_slot_xmin_age, h->horizon_slot_xmin_age == 1 ? "" : "s");
}

static int do_stats(int argc, char **argv)
{
	qargs a;
	int rc = parse("stats", argc, argv, &a, 1);
	if (rc != 0)
		return rc < 0 ? 0 : rc;
	if (a.prometheus && g_cli.json)
		return cli_usage_error("queue stats", "give --json or --prometheus, not both");
	const char *queue = a.npos ? a.pos[0] : NULL;
	if (queue != NULL && *queue == '\0')
		return cli_usage_error("queue stats", "the queue name must not be empty");
	pgc_error nerr;
	if (queue != NULL && pgc_name_check("queue name", queue, PGC_QUEUE_NAME_MAX, &nerr) != PGC_OK)
		return cli_usage_error("queue stats", "%s", nerr.message);
	pgc_conn *conn;
	pgc_queue *q;
	if ((rc = open_queue("stats", a.schema, &conn, &q)) != 0)
		return rc;
	for (;;) {
		pgc_queue_stat *st;
		size_t n;
		pgc_queue_health h;
		pgc_error err;
		if (pgc_queue_stats(q, queue, &st, &n, &h, &err) != PGC_OK) {
			rc = cli_report(&err);
			break;
		}
		pgc_queue_key_info *k;
		size_t nk;
		if (cli_flow_keys(q, st, n, &k, &nk, &err) != PGC_OK) {
			pgc_free(st);
			free(k);
			rc = cli_report(&err);
			break;
		}
		bool screen = a.watch_ms > 0 && !g_cli.json && !a.prometheus;
		if (screen)
			diag_watch_header(stdout, "queue stats", a.watch_ms, NULL);
		print_stats(st, n, &h, k, nk, a.prometheus);
		if (screen)
			diag_watch_footer(stdout);
		pgc_free(st);
		free(k);
		fflush(stdout);
		if (a.watch_ms == 0)
			break;
		struct timespec ts = { (time_t)(a.watch_ms / 1000), (long)(a.watch_ms % 1000) * 1000000L };
		nanosleep(&ts, NULL);
	}
	pgc_queue_close(q);
	pgc_conn_close(conn);
	return rc;
}

/* ---- list and show -------------------------------------------------------------------------- */

static int do_list(int argc, char **argv)
{
	qargs a;
	int rc = parse("list", argc, argv, &a, 1);
	if (rc != 0)
		return rc < 0 ? 0 : rc;
	const char *queue = a.npos ? a.pos[0] : NULL;
	if (queue != NULL && *queue == '\0')
		return cli_usage_error("queue list", "the queue name must not be empty");
	pgc_error nerr;
	if (queue != NULL && pgc_name_check("queue name", queue, PGC_QUEUE_NAME_MAX, &nerr) != PGC_OK)
		return cli_usage_error("queue list", "%s", nerr.message);
	pgc_conn *conn;
	pgc_queue *q;
	if ((rc = open_queue("list", a.schema, &conn, &q)) != 0)
		return rc;
	pgc_job_info **list;
	size_t n;
	pgc_error err;
	if (pgc_queue_list(q, queue, a.status, (long)a.limit, &list, &n, &err) != PGC_OK) {
		rc = cli_report(&err);
	} else {
		if (!g_cli.json)
			printf("%-10s %-16s %-10s %5s %8s %-20s %s\n", "ID", "QUEUE", "STATUS", "PRIO",
			       "ATTEMPTS", "RUN_AT", "LAST_ERROR");
		json_w w = json_w_on(stdout);
		for (size_t i = 0; i < n; i++) {
			const pgc_job_info *j = list[i];
			if (g_cli.json) {
				/* The CLI's list keeps the detailed view: a script reads the payload. */
				render_job(&w, NULL, j, NULL, RENDER_FULL);
				if (i + 1 == n)
					fputc('\n', stdout);
				continue;
			}
			char att[24];
			snprintf(att, sizeof att, "%d/%d", j->attempts, j->max_attempts);
			/* The error's last line: a traceback's exception, not its first line. */
			char last[PGC_JOB_ERROR_MAX], errl[61], when[CLI_TIME_MAX];
			cli_escape(cli_last_line(j->last_error, last, sizeof last), errl, sizeof errl);
			cli_fmt_time(j->run_at, when, sizeof when);
			printf("%-10lld %-16s %-10s %5d %8s %-20s %s\n", (long long)j->id, cli_esc(j->queue),
			       j->status, j->priority, att, when, errl);
		}
		pgc_queue_infos_free(list, n);
	}
	pgc_queue_close(q);
	pgc_conn_close(conn);
	return rc;
}

static int do_show(int argc, char **argv)
{
	qargs a;
	int rc = parse("show", argc, argv, &a, 1);
	if (rc != 0)
		return rc < 0 ? 0 : rc;
	int64_t id;
	if (!parse_id("show", a.npos ? a.pos[0] : NULL, &id, &rc))
		return rc;
	pgc_conn *conn;
	pgc_queue *q;
	if ((rc = open_queue("show", a.schema, &conn, &q)) != 0)
		return rc;
	pgc_job_info *j;
	pgc_job_wait w;
	pgc_error err;
	/* Why it waits: the library's one answer, which the dashboard gives too. */
	if (pgc_queue_show(q, id, &j, &err) != PGC_OK) {
		rc = cli_report(&err);
	} else if (pgc_queue_job_wait(q, id, &w, &err) != PGC_OK && err.code != PGC_ENOTFOUND) {
		rc = cli_report(&err);
		pgc_free(j);
	} else {
		if (err.code == PGC_ENOTFOUND) /* gone between the two reads */
			memset(&w, 0, sizeof w);
		if (g_cli.json) {
			json_w jw = json_w_on(stdout);
			render_job(&jw, NULL, j, &w, RENDER_FULL);
			fputc('\n', stdout);
		} else {
			/* One label form, "name:" padded to one column; timestamps as everywhere. */
			printf("%-14s%lld\n%-14s%s\n%-14s%s%s\n%-14s%d\n%-14s%d of %d\n", "id:",
			       (long long)j->id, "queue:", cli_esc(j->queue), "status:", j->status,
			       j->aged ? " (aged: runs ahead of newer work)" : "", "priority:", j->priority,
			       "attempts:", j->attempts, j->max_attempts);
			printf("%-14s%d of %d\n", "deferrals:", j->deferrals, j->max_deferrals);
			if (w.reason[0] != '\0')
				printf("%-14s%s\n", "why waiting:", cli_esc(w.reason));
			if (j->exit_status >= 0)
				printf("%-14s%d\n", "exit status:", j->exit_status);
			if (j->duration_ms >= 0) {
				char d[PGC_DURATION_FORMAT_MAX];
				printf("%-14s%s%s\n", "duration:", cli_duration_str(j->duration_ms, d),
				       strcmp(j->status, "running") == 0 ? " so far" : "");
			}
			const char *keys[] = { "run_at:", "created_at:", "started_at:", "finished_at:",
			                       "lease_until:", "worker:", "unique_key:", "key:", "waiting:",
			                       "last_error:", "output:", "errors:", "payload:" };
			const char *vals[] = { j->run_at, j->created_at, j->started_at, j->finished_at,
			                       j->lease_until, j->worker, j->unique_key, j->key, j->held,
			                       j->last_error, j->output, j->errors, j->payload };
			for (size_t i = 0; i < sizeof keys / sizeof keys[0]; i++) {
				char t[8192];
				if (vals[i] == NULL)
					continue;
				/* errors and payload are JSON text, escaped already and as long as they are. */
				printf("%-14s%s\n", keys[i], i < 5    ? cli_fmt_time(vals[i], t, sizeof t)
				                              : i < 11 ? cli_escape(vals[i], t, sizeof t)
				                                       : vals[i]);
			}
		}
		pgc_free(j);
	}
	pgc_queue_close(q);
	pgc_conn_close(conn);
	return rc;
}

/* ---- retry, cancel, purge, pause, resume, config ------------------------------------------ */

/* ---- bulk: cancel --all, retry --all, purge ------------------------------------------------ */

typedef struct bulk_tty {
	long total;
	const char *verb;
} bulk_tty;

static void bulk_progress(long done, void *arg)
{
	const bulk_tty *t = arg;
	fprintf(stderr, "\r%s %ld/%ld", t->verb, done, t->total);
}

/* Reads the answer to the question on standard input (a terminal): yes or y. */
static bool confirmed(void)
{
	char line[64];
	fputs("Type yes to go on: ", stderr);
	fflush(stderr);
	if (fgets(line, sizeof line, stdin) == NULL)
		return false;
	line[strcspn(line, "\r\n")] = '\0';
	return strcasecmp(line, "yes") == 0 || strcasecmp(line, "y") == 0;
}

static int do_bulk(const char *sub, const qargs *a)
{
	char cmd[40];
	snprintf(cmd, sizeof cmd, "queue %s", sub);
	pgc_queue_bulk b = PGC_QUEUE_BULK_INIT;
	b.op = strcmp(sub, "cancel") == 0 ? PGC_BULK_CANCEL : strcmp(sub, "retry") == 0 ? PGC_BULK_RETRY
	                                                                                  : PGC_BULK_PURGE;
	b.queue = a->npos ? a->pos[0] : NULL;
	b.status = a->status;
	b.older_than_ms = a->older_than_ms;
	b.key_prefix = a->key_prefix;
	b.batch_size = (int)a->batch;
	static const char *const statuses[][3] = {
		[PGC_BULK_CANCEL] = { "pending", "scheduled", "waiting" },
		[PGC_BULK_RETRY] = { "failed", "cancelled", NULL },
		[PGC_BULK_PURGE] = { "succeeded", "failed", "cancelled" },
	};
	static const char *const said[] = {
		[PGC_BULK_CANCEL] = "pending or scheduled, or waiting",
		[PGC_BULK_RETRY] = "failed or cancelled",
		[PGC_BULK_PURGE] = "succeeded, failed or cancelled",
	};
	/* Everything is checked before anything is done. */
	if (b.op != PGC_BULK_PURGE && b.queue == NULL)
		return cli_usage_error(cmd, "--all needs a QUEUE (pgcoord queue %s --all QUEUE)", sub);
	if (b.queue != NULL && *b.queue == '\0')
		return cli_usage_error(cmd, "the queue name must not be empty");
	pgc_error nerr;
	if (b.queue != NULL && pgc_name_check("queue name", b.queue, PGC_QUEUE_NAME_MAX, &nerr) != PGC_OK)
		return cli_usage_error(cmd, "%s", nerr.message);
	if (b.status != NULL) {
		bool ok = false;
		for (int i = 0; i < 3; i++)
			ok |= statuses[b.op][i] != NULL && strcmp(b.status, statuses[b.op][i]) == 0;
		if (!ok)
			return cli_usage_error(cmd, "--status must be %s, not \"%s\"", said[b.op], b.status);
	}
	if (!a->yes && !isatty(STDIN_FILENO))
		return cli_usage_error(cmd, "this asks for confirmation, and standard input is not a terminal:"
		                       " pass --yes to go on without it");
	pgc_conn *conn;
	pgc_queue *q;
	int rc = open_queue(sub, a->schema, &conn, &q);
	if (rc != 0)
		return rc;
	pgc_error err;
	long count = 0;
	pgc_queue_bulk_result r = { 0, 0, 0 };
	static const char *const verb[] = { [PGC_BULK_CANCEL] = "cancelled", [PGC_BULK_RETRY] = "retried",
	                                    [PGC_BULK_PURGE] = "purged" };
	static const char *const what[] = {
		[PGC_BULK_CANCEL] = "pending or scheduled job%s (running jobs are never cancelled)",
		[PGC_BULK_RETRY] = "%s job%s from the history",
		[PGC_BULK_PURGE] = "finished job%s from the history",
	};
	if (pgc_queue_bulk_count(q, &b, &count, &err) != PGC_OK) {
		rc = cli_report(&err);
		goto out;
	}
	char where[PGC_QUEUE_NAME_MAX + 32] = " of every queue";
	if (b.queue != NULL)
		snprintf(where, sizeof where, " of queue %s", cli_esc(b.queue));
	if (count == 0) {
		if (!g_cli.quiet && !g_cli.json)
			fprintf(stderr, "pgcoord: no job matches: nothing %s\n", verb[b.op]);
	} else {
		if (!g_cli.quiet || !a->yes) {
			char desc[200];
			if (b.op == PGC_BULK_RETRY)
				snprintf(desc, sizeof desc, what[b.op], b.status ? b.status : "failed", count == 1 ? "" : "s");
			else
				snprintf(desc, sizeof desc, what[b.op], count == 1 ? "" : "s");
			static const char *const act[] = { "cancel", "retry", "delete" };
			fprintf(stderr, "pgcoord: %s %s %ld %s%s\n", a->yes ? "going to" : "this will",
			        act[b.op], count, desc, where);
		}
		if (!a->yes && !confirmed()) {
			cli_errorf("not confirmed: nothing was %s", verb[b.op]);
			rc = EXIT_CONFLICT;
			goto out;
		}
		bulk_tty t = { count, verb[b.op] };
		bool tty = isatty(STDERR_FILENO) && !g_cli.quiet && count >= 10000;
		if (tty) {
			b.progress = bulk_progress;
			b.progress_arg = &t;
		}
		rc = pgc_queue_bulk_run(q, &b, &r, &err);
		if (tty)
			fputc('\n', stderr);
		if (rc != PGC_OK) {
			rc = cli_report(&err);
			cli_errorf("%ld job%s %s before the error (each batch commits on its own)", r.done,
			           r.done == 1 ? "" : "s", verb[b.op]);
			goto out;
		}
	}
	rc = 0;
	if (g_cli.json) {
		fputs("{\"queue\":", stdout);
		json_str(stdout, b.queue);
		printf(",\"matched\":%ld,\"%s\":%ld", count, verb[b.op], r.done);
		if (b.op == PGC_BULK_RETRY)
			printf(",\"skipped\":%ld", r.skipped);
		puts("}");
	} else if (!g_cli.quiet) {
		printf("%s %ld job%s%s", verb[b.op], r.done, r.done == 1 ? "" : "s", where);
		if (r.skipped > 0)
			printf(" (%ld skipped: unique key taken by a live job)", r.skipped);
		if (r.done < count && b.op != PGC_BULK_RETRY)
			printf(" (%ld changed meanwhile)", count - r.done);
		putchar('\n');
	}
out:
	pgc_queue_close(q);
	pgc_conn_close(conn);
	return rc;
}

static int do_id_action(const char *sub, int argc, char **argv)
{
	qargs a;
	int rc = parse(sub, argc, argv, &a, 1);
	if (rc != 0)
		return rc < 0 ? 0 : rc;
	if (a.all)
		return do_bulk(sub, &a);
	char cmd[40];
	snprintf(cmd, sizeof cmd, "queue %s", sub);
	if (a.status != NULL || a.has_older || a.key_prefix != NULL || a.batch != 0 || a.yes)
		return cli_usage_error(cmd, "--status, --older-than, --key-prefix, --batch-size and --yes"
		                       " go with --all QUEUE, not with an ID");
	int64_t id;
	if (!parse_id(sub, a.npos ? a.pos[0] : NULL, &id, &rc))
		return rc;
	pgc_conn *conn;
	pgc_queue *q;
	if ((rc = open_queue(sub, a.schema, &conn, &q)) != 0)
		return rc;
	pgc_error err;
	bool retry = strcmp(sub, "retry") == 0, was_running = false;
	int r = retry ? pgc_queue_retry(q, id, &err) : pgc_queue_cancel_job(q, id, &was_running, &err);
	if (r != PGC_OK) {
		rc = cli_report(&err);
	} else if (g_cli.json && retry) {
		printf("{\"id\":%lld,\"status\":\"pending\"}\n", (long long)id);
	} else if (g_cli.json) {
		printf("{\"id\":%lld,\"status\":\"cancelled\",\"was_running\":%s}\n", (long long)id,
		       was_running ? "true" : "false");
	} else if (!g_cli.quiet && retry) {
		printf("job %lld is pending again\n", (long long)id);
	} else if (!g_cli.quiet) {
		printf(was_running ? "job %lld cancelled while running: its worker has been told to stop it\n"
		                   : "job %lld cancelled\n", (long long)id);
	}
	pgc_queue_close(q);
	pgc_conn_close(conn);
	return rc;
}

static int do_purge(int argc, char **argv)
{
	qargs a;
	int rc = parse("purge", argc, argv, &a, 1);
	if (rc != 0)
		return rc < 0 ? 0 : rc;
	return do_bulk("purge", &a);
}

static int do_pause(const char *sub, int argc, char **argv)
{
	qargs a;
	int rc = parse(sub, argc, argv, &a, 1);
	if (rc != 0)
		return rc < 0 ? 0 : rc;
	char cmd[40];
	snprintf(cmd, sizeof cmd, "queue %s", sub);
	if (a.npos == 0)
		return cli_usage_error(cmd, "a queue name is required");
	if (*a.pos[0] == '\0')
		return cli_usage_error(cmd, "the queue name must not be empty");
	if (strlen(a.pos[0]) > PGC_QUEUE_NAME_MAX)
		return cli_usage_error(cmd, "the queue name is longer than %d bytes", PGC_QUEUE_NAME_MAX);
	pgc_error nerr;
	if (pgc_name_check("queue name", a.pos[0], PGC_QUEUE_NAME_MAX, &nerr) != PGC_OK)
		return cli_usage_error(cmd, "%s", nerr.message);
	pgc_conn *conn;
	pgc_queue *q;
	if ((rc = open_queue(sub, a.schema, &conn, &q)) != 0)
		return rc;
	pgc_error err;
	bool pause = strcmp(sub, "pause") == 0;
	if (pgc_queue_pause(q, a.pos[0], pause, &err) != PGC_OK) {
		rc = cli_report(&err);
	} else if (g_cli.json) {
		fputs("{\"queue\":", stdout);
		json_str(stdout, a.pos[0]);
		printf(",\"paused\":%s}\n", pause ? "true" : "false");
	} else if (!g_cli.quiet) {
		printf("queue %s %s\n", cli_esc(a.pos[0]), pause ? "paused" : "resumed");
	}
	pgc_queue_close(q);
	pgc_conn_close(conn);
	return rc;
}

/* "50/1s", or "none". */
static const char *rate_str(const pgc_rate *r, char *buf, size_t size)
{
	char d[PGC_DURATION_FORMAT_MAX];
	if (r->n <= 0)
		snprintf(buf, size, "none");
	else
		snprintf(buf, size, "%d/%s", r->n, cli_duration_str(r->per_ms, d));
	return buf;
}

static int config_flow(pgc_queue *q, const char *queue, const qargs *a)
{
	pgc_error err;
	pgc_queue_flow f = PGC_QUEUE_FLOW_UNCHANGED;
	f.key_limit = a->key_limit;
	f.rate = a->rate;
	f.key_rate = a->key_rate;
	f.fair = a->fair;
	bool change = f.key_limit >= 0 || f.rate.n >= 0 || f.key_rate.n >= 0 || f.fair >= 0;
	if (change && pgc_queue_flow_set(q, queue, &f, &err) != PGC_OK)
		return cli_report(&err);
	if (pgc_queue_flow_get(q, queue, &f, &err) != PGC_OK)
		return cli_report(&err);
	char r1[48], r2[48];
	if (g_cli.json) {
		json_w w = json_w_on(stdout);
		json_obj(&w, NULL);
		json_s(&w, "queue", queue);
		json_b(&w, "flow", f.flow);
		json_i_or_null(&w, "key_limit", f.key_limit > 0, f.key_limit);
		render_rate(&w, "rate", &f.rate);
		render_rate(&w, "key_rate", &f.key_rate);
		json_b(&w, "fair", f.fair);
		json_obj_end(&w);
		fputc('\n', stdout);
	} else if (!g_cli.quiet) {
		char lim[16];
		snprintf(lim, sizeof lim, "%d", f.key_limit);
		printf("queue:       %s\nflow:        %s\nkey_limit:   %s\nrate:        %s\n"
		       "key_rate:    %s\nfair:        %s\n", cli_esc(queue), f.flow ? "on" : "off",
		       f.key_limit > 0 ? lim : "none", rate_str(&f.rate, r1, sizeof r1),
		       rate_str(&f.key_rate, r2, sizeof r2), f.fair ? "on" : "off");
	}
	return 0;
}

static int do_config(int argc, char **argv)
{
	qargs a;
	int rc = parse("config", argc, argv, &a, 1);
	if (rc != 0)
		return rc < 0 ? 0 : rc;
	bool global = a.aging_ms >= 0 || a.sret_ms >= 0 || a.fret_ms >= 0 || a.max_payload >= 0;
	bool flow = a.key_limit >= 0 || a.rate.n >= 0 || a.key_rate.n >= 0 || a.fair >= 0;
	const char *queue = a.npos ? a.pos[0] : NULL;
	if (flow && queue == NULL)
		return cli_usage_error("queue config", "--key-limit, --rate, --key-rate and --fair need a QUEUE");
	if (global && queue != NULL)
		return cli_usage_error("queue config", "--aging, --succeeded-retention, --failed-retention and"
		                       " --max-payload apply to every queue: give them without QUEUE");
	pgc_error nerr;
	if (queue != NULL && pgc_name_check("queue name", queue, PGC_QUEUE_NAME_MAX, &nerr) != PGC_OK)
		return cli_usage_error("queue config", "%s", nerr.message);
	pgc_conn *conn;
	pgc_queue *q;
	if ((rc = open_queue("config", a.schema, &conn, &q)) != 0)
		return rc;
	pgc_error err;
	pgc_queue_config cfg = { a.aging_ms, a.sret_ms, a.fret_ms, (int)a.max_payload };
	if (queue != NULL) {
		rc = config_flow(q, queue, &a);
	} else if (global && pgc_queue_config_set(q, &cfg, &err) != PGC_OK) {
		rc = cli_report(&err);
	} else if (pgc_queue_config_get(q, &cfg, &err) != PGC_OK) {
		rc = cli_report(&err);
	} else if (g_cli.json) {
		printf("{\"aging_ms\":%lld,\"succeeded_retention_ms\":%lld,\"failed_retention_ms\":%lld,"
		       "\"max_payload_bytes\":%d}\n", (long long)cfg.aging_ms,
		       (long long)cfg.succeeded_retention_ms, (long long)cfg.failed_retention_ms,
		       cfg.max_payload_bytes);
	} else if (!g_cli.quiet) {
		char d1[PGC_DURATION_FORMAT_MAX], d2[PGC_DURATION_FORMAT_MAX], d3[PGC_DURATION_FORMAT_MAX];
		printf("aging:               %s\nsucceeded_retention: %s\n"
		       "failed_retention:    %s\nmax_payload:         %d bytes\n",
		       cli_duration_str(cfg.aging_ms, d1), cli_duration_str(cfg.succeeded_retention_ms, d2),
		       cli_duration_str(cfg.failed_retention_ms, d3), cfg.max_payload_bytes);
	}
	pgc_queue_close(q);
	pgc_conn_close(conn);
	return rc;
}

/* ---- limit: one key's settings, the keys of a queue ------------------------------------------ */

/* Why a key's pending jobs wait, for people: "at its limit", "rate-limited until T", "". */
static const char *key_held(const pgc_queue_key_info *k, char *buf, size_t size)
{
	char t[CLI_TIME_MAX];
	if (k->pending == 0)
		snprintf(buf, size, "-");
	else if (k->at_limit)
		snprintf(buf, size, "at its limit %d", k->limit);
	else if (k->rate_wait_ms > 0)
		snprintf(buf, size, "rate-limited until %s", cli_fmt_time(k->next_start_at, t, sizeof t));
	else
		snprintf(buf, size, "-");
	return buf;
}

static void print_keys_table(const pgc_queue_key_info *k, size_t n, size_t max)
{
	printf("%-20s %-20s %7s %5s %10s %6s %8s %9s %9s  %s\n", "QUEUE", "KEY", "RUNNING", "LIMIT",
	       "RATE", "WEIGHT", "PENDING", "SCHEDULED", "OLDEST_S", "HELD");
	for (size_t i = 0; i < n && i < max; i++) {
		char lim[16], r[48], held[96];
		snprintf(lim, sizeof lim, "%d", k[i].limit);
		char qn[21], kn[21];
		snprintf(qn, sizeof qn, "%s", cli_esc(k[i].queue));
		snprintf(kn, sizeof kn, "%s", cli_esc(k[i].key));
		printf("%-20s %-20s %7ld %5s %10s %6d %8ld %9ld %9.1f  %s\n", qn, kn, k[i].running,
		       k[i].limit > 0 ? lim : "none", rate_str(&k[i].rate, r, sizeof r),
		       k[i].own.weight > 0 ? k[i].own.weight : 1, k[i].pending, k[i].scheduled,
		       k[i].oldest_pending_s, key_held(&k[i], held, sizeof held));
	}
	if (n > max)
		printf("(%zu more keys: pgcoord queue limit %s)\n", n - max, cli_esc(k[0].queue));
}

static int do_limit(int argc, char **argv)
{
	qargs a;
	int rc = parse("limit", argc, argv, &a, 2);
	if (rc != 0)
		return rc < 0 ? 0 : rc;
	if (a.npos == 0)
		return cli_usage_error("queue limit", "a queue name is required");
	const char *queue = a.pos[0], *key = a.npos > 1 ? a.pos[1] : NULL;
	pgc_error nerr;
	if (pgc_name_check("queue name", queue, PGC_QUEUE_NAME_MAX, &nerr) != PGC_OK)
		return cli_usage_error("queue limit", "%s", nerr.message);
	if (key != NULL && *key == '\0')
		return cli_usage_error("queue limit", "the key must not be empty");
	if (key != NULL && strlen(key) > PGC_QUEUE_KEY_MAX)
		return cli_usage_error("queue limit", "the key is %zu bytes, longer than %d", strlen(key),
		                       PGC_QUEUE_KEY_MAX);
	bool change = a.key_lim >= 0 || a.weight >= 0 || a.rate.n >= 0;
	if ((change || a.remove) && key == NULL)
		return cli_usage_error("queue limit", "--limit, --weight, --rate and --remove need a KEY");
	if (change && a.remove)
		return cli_usage_error("queue limit", "give --remove alone");
	pgc_conn *conn;
	pgc_queue *q;
	if ((rc = open_queue("limit", a.schema, &conn, &q)) != 0)
		return rc;
	pgc_error err;
	pgc_queue_key_settings ks = PGC_QUEUE_KEY_UNCHANGED;
	ks.limit = a.key_lim;
	ks.weight = a.weight;
	ks.rate = a.rate;
	pgc_queue_key_info *k = NULL;
	size_t n = 0;
	if (a.remove) {
		if (pgc_queue_key_reset(q, queue, key, &err) != PGC_OK)
			rc = cli_report(&err);
		else if (g_cli.json) {
			fputs("{\"queue\":", stdout);
			json_str(stdout, queue);
			fputs(",\"key\":", stdout);
			json_str(stdout, key);
			fputs(",\"removed\":true}\n", stdout);
		} else if (!g_cli.quiet)
			printf("removed the settings of key %s in queue %s\n", cli_esc(key), cli_esc(queue));
	} else if (change && pgc_queue_key_set(q, queue, key, &ks, &err) != PGC_OK) {
		rc = cli_report(&err);
	} else if (pgc_queue_keys(q, queue, key, &k, &n, &err) != PGC_OK) {
		rc = cli_report(&err);
	} else if (g_cli.json) {
		json_w w = json_w_on(stdout);
		for (size_t i = 0; i < n; i++)
			render_key(&w, NULL, &k[i]);
		if (n > 0)
			fputc('\n', stdout);
	} else if (!g_cli.quiet && key == NULL) {
		if (n == 0)
			printf("(queue %s has no keys)\n", cli_esc(queue));
		else
			print_keys_table(k, n, n);
	} else if (!g_cli.quiet) {
		char lim[48], r[48], held[96];
		if (k[0].limit > 0)
			snprintf(lim, sizeof lim, "%d (%s)", k[0].limit, k[0].own.limit > 0 ? "its own" : "the queue's");
		else
			snprintf(lim, sizeof lim, "none");
		char rr[64];
		rate_str(&k[0].rate, r, sizeof r);
		snprintf(rr, sizeof rr, "%s%s", r, k[0].rate.n <= 0 ? "" : k[0].own.rate.n > 0 ? " (its own)" : " (the queue's)");
		printf("%-16s%s\n%-16s%s\n%-16s%s\n%-16s%s\n%-16s%d%s\n%-16s%ld\n%-16s%ld\n%-16s%ld\n"
		       "%-16s%.1f s\n%-16s%s\n", "queue:", cli_esc(k[0].queue), "key:", cli_esc(k[0].key),
		       "limit:", lim, "rate:", rr, "weight:", k[0].own.weight > 0 ? k[0].own.weight : 1,
		       k[0].own.weight > 0 ? " (its own)" : "", "running:", k[0].running, "pending:",
		       k[0].pending, "scheduled:", k[0].scheduled, "oldest_pending:", k[0].oldest_pending_s,
		       "held:", key_held(&k[0], held, sizeof held));
	}
	pgc_free(k);
	pgc_queue_close(q);
	pgc_conn_close(conn);
	return rc;
}

/* ---- group ---------------------------------------------------------------------------------- */

static void print_group(const pgc_job_group *g)
{
	if (g_cli.json) {
		fputs("{\"name\":", stdout);
		json_str(stdout, g->name);
		fputs(",\"on_complete_queue\":", stdout);
		json_str(stdout, g->on_complete_queue);
		printf(",\"payload\":%s,\"members\":%ld,\"succeeded\":%ld,\"failed\":%ld,\"cancelled\":%ld,"
		       "\"sealed\":%s,\"done\":%s,\"on_complete_job\":", g->payload, g->members, g->succeeded,
		       g->failed, g->cancelled, g->sealed ? "true" : "false", g->done ? "true" : "false");
		if (g->on_complete_job > 0)
			printf("%lld", (long long)g->on_complete_job);
		else
			fputs("null", stdout);
		const char *tk[] = { "created_at", "closed_at", "done_at" };
		const char *tv[] = { g->created_at, g->closed_at, g->done_at };
		for (int i = 0; i < 3; i++) {
			printf(",\"%s\":", tk[i]);
			json_str(stdout, tv[i][0] ? tv[i] : NULL);
		}
		fputs("}\n", stdout);
		return;
	}
	char t[CLI_TIME_MAX], oc[32] = "-";
	if (g->on_complete_job > 0)
		snprintf(oc, sizeof oc, "%lld", (long long)g->on_complete_job);
	printf("%-20s%s\n%-20s%s\n%-20s%s\n%-20s%ld\n%-20s%ld succeeded, %ld failed, %ld cancelled\n"
	       "%-20s%s\n%-20s%s\n", "group:", cli_esc(g->name), "on-complete queue:",
	       cli_esc(g->on_complete_queue), "payload:", g->payload, "members:", g->members,
	       "ended:", g->succeeded, g->failed, g->cancelled, "state:",
	       g->done ? "done" : g->sealed ? "closed, waiting for its members" : "open",
	       "on-complete job:", oc);
	printf("%-20s%s\n", "created_at:", cli_fmt_time(g->created_at, t, sizeof t));
	if (g->closed_at[0])
		printf("%-20s%s\n", "closed_at:", cli_fmt_time(g->closed_at, t, sizeof t));
	if (g->done_at[0])
		printf("%-20s%s\n", "done_at:", cli_fmt_time(g->done_at, t, sizeof t));
}

static int do_group(int argc, char **argv)
{
	qargs a;
	int rc = parse("group", argc, argv, &a, 2);
	if (rc != 0)
		return rc < 0 ? 0 : rc;
	if (a.npos == 0)
		return cli_usage_error("queue group", "give add, close, show, list or remove");
	const char *what = a.pos[0];
	static const char *const subs[] = { "add", "close", "show", "list", "remove" };
	bool known = false;
	for (size_t i = 0; i < sizeof subs / sizeof subs[0]; i++)
		known |= strcmp(what, subs[i]) == 0;
	if (!known)
		return cli_usage_error("queue group", "unknown group subcommand \"%s\": give add, close, show,"
		                       " list or remove", what);
	a.pos[0] = a.pos[1];
	a.npos--;
	bool list = strcmp(what, "list") == 0, add = strcmp(what, "add") == 0;
	const char *name = a.npos ? a.pos[0] : NULL;
	if (list && name != NULL)
		return cli_usage_error("queue group", "unexpected argument \"%s\"", name);
	if (!list && name == NULL)
		return cli_usage_error("queue group", "a group name is required");
	if (name != NULL && *name == '\0')
		return cli_usage_error("queue group", "the group name must not be empty");
	if (name != NULL && strlen(name) > PGC_QUEUE_GROUP_MAX)
		return cli_usage_error("queue group", "the group name is longer than %d bytes", PGC_QUEUE_GROUP_MAX);
	if (add && a.on_complete_queue == NULL)
		return cli_usage_error("queue group", "group add needs --on-complete-queue");
	if (!add && (a.on_complete_queue != NULL || a.payload != NULL))
		return cli_usage_error("queue group", "--on-complete-queue and --payload apply to group add only");
	pgc_error nerr;
	if (a.on_complete_queue != NULL &&
	    pgc_name_check("queue name", a.on_complete_queue, PGC_QUEUE_NAME_MAX, &nerr) != PGC_OK)
		return cli_usage_error("queue group", "--on-complete-queue: %s", nerr.message);
	pgc_conn *conn;
	pgc_queue *q;
	if ((rc = open_queue("group", a.schema, &conn, &q)) != 0)
		return rc;
	pgc_error err;
	int64_t fired = 0;
	if (add) {
		if (pgc_queue_group_add(q, name, a.on_complete_queue, a.payload, &err) != PGC_OK)
			rc = cli_report(&err);
		else if (g_cli.json) {
			fputs("{\"group\":", stdout);
			json_str(stdout, name);
			fputs(",\"added\":true}\n", stdout);
		} else if (!g_cli.quiet)
			printf("added group %s (on complete: queue %s)\n", cli_esc(name), cli_esc(a.on_complete_queue));
	} else if (strcmp(what, "close") == 0) {
		if (pgc_queue_group_close(q, name, &fired, &err) != PGC_OK)
			rc = cli_report(&err);
		else if (g_cli.json) {
			fputs("{\"group\":", stdout);
			json_str(stdout, name);
			fputs(",\"closed\":true,\"on_complete_job\":", stdout);
			if (fired > 0)
				printf("%lld}\n", (long long)fired);
			else
				fputs("null}\n", stdout);
		} else if (!g_cli.quiet) {
			if (fired > 0)
				printf("closed group %s: every member has ended, on-complete job %lld\n", cli_esc(name),
				       (long long)fired);
			else
				printf("closed group %s: its on-complete job follows its last member\n", cli_esc(name));
		}
	} else if (strcmp(what, "remove") == 0) {
		if (pgc_queue_group_remove(q, name, &err) != PGC_OK)
			rc = cli_report(&err);
		else if (g_cli.json) {
			fputs("{\"group\":", stdout);
			json_str(stdout, name);
			fputs(",\"removed\":true}\n", stdout);
		} else if (!g_cli.quiet)
			printf("removed group %s\n", cli_esc(name));
	} else if (!list) {
		pgc_job_group *g;
		if (pgc_queue_group_show(q, name, &g, &err) != PGC_OK) {
			rc = cli_report(&err);
		} else {
			print_group(g);
			pgc_free(g);
		}
	} else {
		pgc_job_group *g;
		size_t n;
		if (pgc_queue_group_list(q, &g, &n, &err) != PGC_OK) {
			rc = cli_report(&err);
		} else {
			if (!g_cli.json)
				printf("%-24s %-20s %7s %9s %6s %9s %-7s %s\n", "GROUP", "ON_COMPLETE", "MEMBERS",
				       "SUCCEEDED", "FAILED", "CANCELLED", "STATE", "JOB");
			for (size_t i = 0; i < n; i++) {
				if (g_cli.json) {
					print_group(&g[i]);
					continue;
				}
				char oc[32] = "-";
				if (g[i].on_complete_job > 0)
					snprintf(oc, sizeof oc, "%lld", (long long)g[i].on_complete_job);
				printf("%-24s %-20s %7ld %9ld %6ld %9ld %-7s %s\n", cli_esc(g[i].name),
				       cli_esc(g[i].on_complete_queue), g[i].members, g[i].succeeded, g[i].failed,
				       g[i].cancelled, g[i].done ? "done" : g[i].sealed ? "closed" : "open", oc);
			}
			if (!g_cli.json && n == 0)
				puts("(no groups)");
			pgc_free(g);
		}
	}
	pgc_queue_close(q);
	pgc_conn_close(conn);
	return rc;
}

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
	if (strcmp(sub, "enqueue") == 0)
		return do_enqueue(argc, argv);
	if (strcmp(sub, "stats") == 0)
		return do_stats(argc, argv);
	if (strcmp(sub, "list") == 0)
		return do_list(argc, argv);
	if (strcmp(sub, "show") == 0)
		return do_show(argc, argv);
	if (strcmp(sub, "retry") == 0 || strcmp(sub, "cancel") == 0)
		return do_id_action(sub, argc, argv);
	if (strcmp(sub, "purge") == 0)
		return do_purge(argc, argv);
	if (strcmp(sub, "pause") == 0 || strcmp(sub, "resume") == 0)
		return do_pause(sub, argc, argv);
	if (strcmp(sub, "config") == 0)
		return do_config(argc, argv);
	if (strcmp(sub, "limit") == 0)
		return do_limit(argc, argv);
	if (strcmp(sub, "group") == 0)
		return do_group(argc, argv);
	return cli_usage_error("queue", "unknown queue subcommand \"%s\"", sub);
}

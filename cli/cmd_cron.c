/* cmd_cron.c - pgcoord cron: cron schedules (next: the next fire times of an expression; add,
 * list, show, pause, resume, trigger, remove, history, sync: schedules in the database; run:
 * the scheduler). This file holds the subcommand table, the options the subcommands share and
 * the management of schedules; sync and its file parser are in cmd_cron_sync.c, the scheduler
 * in cmd_cron_run.c (cmd_cron_int.h between them).
 *
 * One function per subcommand in subs[]; each parses its own options from argv[0] = its
 * name. cron next needs no database: the schedule and the host's tzdata decide. The others
 * are thin clients of <pgcoord/cron.h>; cron run loops on pgc_cron_fire_due(). */
#include <errno.h>
#include <getopt.h>
#include <inttypes.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "child.h"
#include "cli.h"
#include "cmd_cron_int.h"
#include "dbwait.h"
#include "jobcmd.h"
#include "opt.h"
#include "render.h"
#include "util/util.h"

#define NEXT_DEFAULT 5
#define NEXT_MAX 1000

/* One option of the table, with the subcommands (A_*) that take it. */
typedef struct cron_opt {
	unsigned groups;
	cli_opt o;
} cron_opt;

#define CRON_OPTS_MAX 40
static size_t cron_options(cron_args *a, cron_opt *out);

static void usage(FILE *f)
{
	fputs("Usage: pgcoord [-d DSN] [--json] cron SUBCOMMAND [OPTIONS] [ARGS]\n"
	      "\n"
	      "Subcommands:\n"
	      "  next SCHEDULE [--tz ZONE] [--from TIME] [-n N] [--json]\n"
	      "                       print the next N fire times of SCHEDULE, in ZONE's\n"
	      "                       local time with its offset (needs no database)\n"
	      "  add NAME SCHEDULE --queue Q [--tz ZONE] [--payload JSON] [--replace]\n"
	      "      [--catch-up skip|once|all] [--catch-up-window D] [--catch-up-max N]\n"
	      "      [--overlap allow|skip] [--jitter D] [--max-attempts N]\n"
	      "                       add a schedule whose ticks enqueue jobs into Q\n"
	      "  add NAME SCHEDULE [OPTIONS] -- COMMAND [ARGS...]\n"
	      "                       a command schedule: cron run runs COMMAND per tick\n"
	      "  list [--json | --prometheus]\n"
	      "                       the schedules: next and last run, missed, skipped\n"
	      "  show NAME [--json]   one schedule in full\n"
	      "  pause NAME           stop firing the schedule's ticks\n"
	      "  resume NAME          fire again, from the next tick after now\n"
	      "  trigger NAME         enqueue one job now (next tick unchanged)\n"
	      "  remove NAME          remove the schedule and its history\n"
	      "  history NAME [--limit N] [--json]\n"
	      "                       the run log: the latest ticks and what became of\n"
	      "                       their jobs (status, exit status, duration, output)\n"
	      "  sync FILE [--dry-run] [--allow-empty]\n"
	      "                       make the schedules those of FILE, in one transaction\n"
	      "  run [--batch N] [--lookahead D] [--once] [--wait-for-db[=D]] [-c N]\n"
	      "      [--timeout D] [--grace D] [--no-commands]\n"
	      "                       the scheduler: fire due ticks by the database's clock,\n"
	      "                       and run the command schedules' commands\n"
	      "\n"
	      "SCHEDULE is one argument, quoted: a cron expression \"[SECOND] MINUTE HOUR\n"
	      "DAY-OF-MONTH MONTH DAY-OF-WEEK\" with lists, ranges, steps and names\n"
	      "(\"30 2 * * *\", \"*/15 9-17 * * MON-FRI\", \"0 0 29 2 *\"), or @yearly,\n"
	      "@annually, @monthly, @weekly, @daily, @midnight, @hourly. Times that a DST\n"
	      "change skips fire just after it, repeated ones once, when MINUTE and HOUR\n"
	      "do not start with \"*\"; otherwise every real occurrence fires.\n"
	      "TIME: 2026-03-29T01:30:00Z, 2026-03-29T03:30+02:00, @SECONDS, or a local\n"
	      "time in ZONE, \"2026-03-29 02:30\" (one that DST skips means the first\n"
	      "instant after the gap; a repeated one its first occurrence).\n"
	      "A tick is due when the DATABASE's clock reaches it; any number of cron run\n"
	      "schedulers on any hosts fire each tick exactly once. Jobs get the payload\n"
	      "object with \"cron\": {\"schedule\": NAME, \"tick\": ISO-8601} added.\n"
	      "A command schedule's ticks go to the queue cron:commands; each cron run\n"
	      "runs them as pgcoord worker would, on exactly one host per tick, with\n"
	      "PGCOORD_CRON_SCHEDULE and PGCOORD_CRON_TICK in the environment: exit 0 done,\n"
	      "75 retry later, anything else a failure, retried until --max-attempts.\n"
	      "\n"
	      "Options:\n", f);
	cron_args dummy;
	cron_opt all[CRON_OPTS_MAX];
	size_t n = cron_options(&dummy, all);
	cli_opt o[CRON_OPTS_MAX + 1];
	for (size_t i = 0; i < n; i++)
		o[i] = all[i].o;
	o[n] = (cli_opt)CLI_OPT_TABLE_END;
	cli_opt_help(f, o, 23);
	fputs(
	      "\n"
	      "Durations: 500ms, 2s, 5m, 1h, 1d. Exit status: 0 ok (next: fewer than N\n"
	      "times when the year 10000 comes first); 1 the schedule does not exist, or\n"
	      "exists (add without --replace), or trigger found its previous job still\n"
	      "there (overlap skip); 64 usage (a bad expression, zone, time or option, an\n"
	      "unknown subcommand); 65 bad data (a payload that is not a JSON object, a bad\n"
	      "sync FILE line; next: the schedule never fires in ZONE); 69 database\n"
	      "unavailable or schema missing. See pgcoord-cron(1).\n", f);
}

static void print_time_json(const pgc_cron *c, int64_t t)
{
	pgc_cron_local l;
	pgc_error err;
	char local[PGC_CRON_TIME_MAX], utc[PGC_CRON_TIME_MAX];
	if (pgc_cron_local_time(c, t, &l, &err) != PGC_OK || pgc_cron_format_local(c, t, local, sizeof local, &err) != PGC_OK)
		return;
	struct tm tm;
	time_t tt = (time_t)t;
	gmtime_r(&tt, &tm);
	strftime(utc, sizeof utc, "%Y-%m-%dT%H:%M:%SZ", &tm);
	fputs("{\"time\":", stdout);
	json_str(stdout, local);
	printf(",\"unix\":%" PRId64 ",\"utc\":", t);
	json_str(stdout, utc);
	printf(",\"utc_offset_s\":%" PRId32 ",\"abbrev\":", l.utoff_s);
	json_str(stdout, l.abbrev);
	printf(",\"dst\":%s}", l.dst ? "true" : "false");
}

static int cron_next(int argc, char **argv)
{
	cron_args a;
	int prc = cron_parse_args(argc, argv, "cron next", A_NEXT, &a);
	if (prc != 0)
		return prc < 0 ? 0 : prc;
	const char *tz = a.next_tz, *from = a.from;
	long long count = a.count;
	int i = argc - a.argc;
	if (i >= argc)
		return cli_usage_error("cron next", "missing SCHEDULE (a cron expression such as \"30 2 * * *\")");
	const char *expr = argv[i++];
	if (i < argc)
		return cli_usage_error("cron next", "unexpected argument \"%s\": give the schedule as one quoted argument "
		                       "(\"30 2 * * *\")", cli_esc(argv[i]));
	if (tz != NULL && *tz == '\0')
		return cli_usage_error("cron next", "--tz must not be empty (leave it out for UTC)");
	pgc_cron *c;
	pgc_error err = PGC_ERROR_INIT;
	if (pgc_cron_parse(expr, tz, &c, &err) != PGC_OK)
		return err.code == PGC_EUSAGE ? cli_usage_error("cron next", "%s", err.message) : cli_report(&err);
	int64_t after;
	if (from != NULL) {
		/* The grammar of every TIME option; a time without an offset is read in --tz. */
		cli_time t;
		int trc;
		if (!cli_time_opt("cron next", "--from", from, c, &t, &trc)) {
			pgc_cron_free(c);
			return trc;
		}
		after = t.relative ? (int64_t)time(NULL) + t.rel_ms / 1000 : t.unix_s;
	} else {
		after = (int64_t)time(NULL);
	}
	int64_t *times = malloc((size_t)count * sizeof *times);
	if (times == NULL) {
		pgc_cron_free(c);
		cli_errorf("out of memory");
		return EXIT_SOFTWARE;
	}
	int n = 0, rc = 0;
	pgc_error nerr = PGC_ERROR_INIT;
	for (int64_t t = after; n < count; n++) {
		if (pgc_cron_next(c, t, &t, &nerr) != PGC_OK)
			break;
		times[n] = t;
	}
	if (n < count && nerr.code != PGC_ENOTFOUND) {
		rc = cli_report(&nerr);
	} else if (n == 0) {
		cli_errorf("%s", nerr.message);
		rc = EXIT_DATAERR;
	} else {
		if (g_cli.json) {
			char f[PGC_CRON_TIME_MAX];
			if (pgc_cron_format_local(c, after, f, sizeof f, &err) != PGC_OK)
				f[0] = '\0';
			fputs("{\"expression\":", stdout);
			json_str(stdout, expr);
			fputs(",\"normalized\":", stdout);
			json_str(stdout, pgc_cron_normalized(c));
			fputs(",\"tz\":", stdout);
			json_str(stdout, pgc_cron_tz(c));
			printf(",\"seconds\":%s,\"from\":", pgc_cron_has_seconds(c) ? "true" : "false");
			json_str(stdout, f[0] ? f : NULL);
			fputs(",\"next\":[", stdout);
			for (int i = 0; i < n; i++) {
				if (i > 0)
					fputc(',', stdout);
				print_time_json(c, times[i]);
			}
			printf("],\"complete\":%s}\n", n == count ? "true" : "false");
		} else {
			for (int i = 0; i < n; i++) {
				char b[PGC_CRON_TIME_MAX];
				if (pgc_cron_format_local(c, times[i], b, sizeof b, &err) == PGC_OK)
					puts(b);
			}
		}
		if (n < count && !g_cli.quiet)
			fprintf(stderr, "pgcoord: only %d fire time%s: %s\n", n, n == 1 ? "" : "s", nerr.message);
	}
	free(times);
	pgc_cron_free(c);
	return rc;
}


/* ---- schedules in the database ------------------------------------------------------------- */



/* The check and the store of an option's value with a rule of its own; dest is the cron_args. */
static int cron_value(const char *cmd, const char *opt, const char *v, void *dest)
{
	cron_args *a = dest;
	pgc_cron_schedule *d = &a->def;
	static const char *const names[] = { "--tz", "--catch-up", "--catch-up-window", "--catch-up-max", "--overlap",
	                                     "--jitter", "--max-attempts", "--limit", "--batch", "--lookahead",
	                                     "--wait-for-db", "--concurrency", "--timeout", "--grace", "--schema",
	                                     "--count", NULL };
	enum { O_TZ, O_CATCHUP, O_WINDOW, O_CMAX, O_OVERLAP, O_JITTER, O_MAXATT, O_LIMIT, O_BATCH, O_LOOKAHEAD,
	       O_DBWAIT, O_CONC, O_TIMEOUT, O_GRACE, O_SCHEMA, O_COUNT };
	int ch = 0, rc = 0;
	while (names[ch] != NULL && strcmp(names[ch], opt) != 0)
		ch++;
	long long n;
	switch (ch) {
	case O_TZ:
		if (*v == '\0')
			return cli_usage_error(cmd, "--tz must not be empty (leave it out for UTC)");
		d->tz = v;
		return 0;
	case O_CATCHUP:
		if (!pgc_cron_catch_up_parse(v, &d->catch_up))
			return cli_usage_error(cmd, "--catch-up must be skip, once or all, not \"%s\"", cli_esc(v));
		return 0;
	case O_WINDOW:
		return cli_duration_opt(cmd, "--catch-up-window", v, 1000, INT64_C(366) * 86400000, &d->catch_up_window_ms, &rc)
		       ? 0 : rc;
	case O_CMAX:
		if (!cli_parse_int(v, 1, PGC_CRON_CATCHUP_MAX_LIMIT, &n))
			return cli_usage_error(cmd, "--catch-up-max must be an integer from 1 to %d, not \"%s\"",
			                       PGC_CRON_CATCHUP_MAX_LIMIT, cli_esc(v));
		d->catch_up_max = (int)n;
		return 0;
	case O_OVERLAP:
		if (!pgc_cron_overlap_parse(v, &d->overlap))
			return cli_usage_error(cmd, "--overlap must be allow or skip, not \"%s\"", cli_esc(v));
		return 0;
	case O_JITTER:
		return cli_duration_opt(cmd, "--jitter", v, 0, INT64_C(86400000), &d->jitter_ms, &rc) ? 0 : rc;
	case O_MAXATT:
		if (!cli_parse_int(v, 1, 1000000, &n))
			return cli_usage_error(cmd, "--max-attempts must be an integer from 1 to 1000000, not \"%s\"", cli_esc(v));
		d->max_attempts = (int)n;
		return 0;
	case O_LIMIT:
		if (!cli_parse_int(v, 1, PGC_CRON_TICKS_KEPT, &a->limit))
			return cli_usage_error(cmd, "--limit must be an integer from 1 to %d, not \"%s\"", PGC_CRON_TICKS_KEPT,
			                       cli_esc(v));
		return 0;
	case O_BATCH:
		if (!cli_parse_int(v, 1, 1000, &a->batch))
			return cli_usage_error(cmd, "--batch must be an integer from 1 to 1000, not \"%s\"", cli_esc(v));
		return 0;
	case O_LOOKAHEAD:
		return cli_duration_opt(cmd, "--lookahead", v, 0, PGC_CRON_LOOKAHEAD_MAX_MS, &a->lookahead_ms, &rc) ? 0 : rc;
	case O_CONC:
		if (!cli_parse_int(v, 1, 1024, &a->concurrency))
			return cli_usage_error(cmd, "--concurrency must be an integer from 1 to 1024, not \"%s\"", cli_esc(v));
		return 0;
	case O_TIMEOUT:
		return cli_duration_opt(cmd, "--timeout", v, 1, INT64_C(366) * 86400000, &a->timeout_ms, &rc) ? 0 : rc;
	case O_GRACE:
		return cli_duration_opt(cmd, "--grace", v, 0, INT64_C(86400000), &a->grace_ms, &rc) ? 0 : rc;
	case O_DBWAIT:
		return cli_dbwait_opt(cmd, v, &a->dbwait_ms, &rc) ? 0 : rc;
	case O_SCHEMA:
		if (*v == '\0')
			return cli_usage_error(cmd, "--schema must not be empty");
		a->schema = v;
		return 0;
	case O_COUNT:
		if (!cli_parse_int(v, 1, NEXT_MAX, &a->count))
			return cli_usage_error(cmd, "-n must be an integer from 1 to %d, not \"%s\"", NEXT_MAX, cli_esc(v));
		return 0;
	default:
		abort(); /* an option cron_options sends here that this switch does not know */
	}
}

/* The options of every subcommand, in the order --help shows them. A value with a rule of
 * its own goes through cron_value (dest: the cron_args). */
static size_t cron_options(cron_args *a, cron_opt *out)
{
	const cron_opt t[] = {
		{ A_DEF, CLI_OPT(0, "tz", CLI_OPT_CALL, a, "ZONE", "IANA time zone of the schedule (default UTC), from the\n"
		                 "host's tzdata ($TZDIR or /usr/share/zoneinfo)", .call = cron_value) },
		{ A_NEXT, CLI_OPT(0, "tz", CLI_OPT_STR, &a->next_tz, "ZONE", NULL, .flags = CLI_OPT_HIDDEN) },
		{ A_NEXT, CLI_OPT(0, "from", CLI_OPT_STR, &a->from, "TIME", "fire times strictly after TIME (default: now)") },
		{ A_NEXT, CLI_OPT('n', "count", CLI_OPT_CALL, a, "N", "how many fire times, 1 to 1000 (default 5)",
		                  .call = cron_value) },
		{ A_DEF, CLI_OPT(0, "queue", CLI_OPT_STR, &a->def.queue, "Q", "the queue the schedule's jobs go to") },
		{ A_DEF, CLI_OPT(0, "payload", CLI_OPT_STR, &a->def.payload, "JSON", "a JSON object, the jobs' payload (default {})") },
		{ A_DEF, CLI_OPT(0, "catch-up", CLI_OPT_CALL, a, "POLICY", "ticks missed while no scheduler ran: skip (default),\n"
		                 "once (one job for them all), all (each, bounded)", .call = cron_value) },
		{ A_DEF, CLI_OPT(0, "catch-up-window", CLI_OPT_CALL, a, "D", "all: catch up ticks at most D old (default 1h)",
		                 .call = cron_value) },
		{ A_DEF, CLI_OPT(0, "catch-up-max", CLI_OPT_CALL, a, "N", "all: at most N late ticks, 1 to 1000 (default 100)",
		                 .call = cron_value) },
		{ A_DEF, CLI_OPT(0, "overlap", CLI_OPT_CALL, a, "WHAT", "allow (default), or skip a tick while the previous\n"
		                 "tick's job is pending or running", .call = cron_value) },
		{ A_DEF, CLI_OPT(0, "jitter", CLI_OPT_CALL, a, "D", "start each job up to D after its tick, at random",
		                 .call = cron_value) },
		{ A_DEF, CLI_OPT(0, "max-attempts", CLI_OPT_CALL, a, "N", "runs of a failing job, 1 to 1000000 (default 25)",
		                 .call = cron_value) },
		{ A_DEF, CLI_OPT(0, "replace", CLI_OPT_BOOL, &a->replace, NULL, "add: change the schedule NAME if it exists") },
		{ A_LIMIT, CLI_OPT(0, "limit", CLI_OPT_CALL, a, "N", "history: how many ticks, 1 to 1000 (default 20)",
		                   .call = cron_value) },
		{ A_DRYRUN, CLI_OPT(0, "dry-run", CLI_OPT_BOOL, &a->dry_run, NULL, "sync: print the changes, change nothing") },
		{ A_DRYRUN, CLI_OPT(0, "allow-empty", CLI_OPT_BOOL, &a->allow_empty, NULL,
		                    "sync: a FILE without schedules removes every one") },
		{ A_DB, CLI_OPT('q', "quiet", CLI_OPT_BOOL, &g_cli.quiet, NULL, "as pgcoord -q (sync: print only what changed)") },
		{ A_RUN, CLI_OPT(0, "batch", CLI_OPT_CALL, a, "N", "run: schedules per transaction, 1 to 1000 (default 100)",
		                 .call = cron_value) },
		{ A_RUN, CLI_OPT(0, "lookahead", CLI_OPT_CALL, a, "D", "run: fire ticks up to D ahead, their jobs runnable at\n"
		                 "the tick (overlap allow only; 0 to 60s, default 5s)", .call = cron_value) },
		{ A_RUN, CLI_OPT(0, "once", CLI_OPT_BOOL, &a->once, NULL, "run: fire what is due now, then exit") },
		{ A_RUN, CLI_OPT(0, "wait-for-db", CLI_OPT_CALL, a, "D", "run: retry until the database answers at start (or\n"
		                 "for at most D, then exit 69); default: 69 at once", .call = cron_value,
		                 .flags = CLI_OPT_OPTIONAL) },
		{ A_RUN, CLI_OPT('c', "concurrency", CLI_OPT_CALL, a, "N", "run: commands at once (default 4)", .call = cron_value) },
		{ A_RUN, CLI_OPT(0, "timeout", CLI_OPT_CALL, a, "D", "run: kill a command's process group after D",
		                 .call = cron_value) },
		{ A_RUN, CLI_OPT(0, "grace", CLI_OPT_CALL, a, "D", "run: on stop, wait D for running commands (default\n"
		                 "30s), then kill them and return their jobs to pending", .call = cron_value) },
		{ A_RUN, CLI_OPT(0, "no-commands", CLI_OPT_BOOL, &a->no_commands, NULL,
		                 "run: only schedule; leave the commands to others") },
		{ A_DB, CLI_OPT(0, "schema", CLI_OPT_CALL, a, "NAME", "pgcoord schema (default: pgcoord)", .call = cron_value) },
		{ A_ALL, CLI_OPT(0, "json", CLI_OPT_BOOL, &g_cli.json, NULL, "JSON output (next, list, show, history, trigger)") },
		{ A_PROM, CLI_OPT(0, "prometheus", CLI_OPT_BOOL, &a->prometheus, NULL,
		                  "list: Prometheus text format (next run, last success,\n"
		                  "fired/missed/skipped counters per schedule)") },
		{ A_ALL, CLI_OPT('h', "help", CLI_OPT_HELP, NULL, NULL, "show this help and exit") },
	};
	size_t n = sizeof t / sizeof t[0];
	if (n > CRON_OPTS_MAX)
		abort(); /* a programming error */
	memcpy(out, t, sizeof t);
	return n;
}

/* An option the subcommand does not take (another's). */
static int not_taken(const char *cmd, const char *opt, const char *value, void *dest)
{
	(void)value;
	(void)dest;
	return cli_usage_error(cmd, "%s does not take %s", cmd, opt);
}

int cron_parse_args(int argc, char **argv, const char *sub, unsigned allowed, cron_args *a)
{
	memset(a, 0, sizeof *a);
	a->sub = sub;
	a->schema = PGC_SCHEMA_DEFAULT;
	a->def = (pgc_cron_schedule)PGC_CRON_SCHEDULE_INIT;
	a->limit = HISTORY_DEFAULT;
	a->batch = BATCH_DEFAULT;
	a->concurrency = CONCURRENCY_DEFAULT;
	a->grace_ms = GRACE_DEFAULT_MS;
	a->lookahead_ms = PGC_CRON_LOOKAHEAD_MS;
	a->count = NEXT_DEFAULT;
	/* Every subcommand but next works on the database. */
	allowed |= A_ALL | (allowed & A_NEXT ? 0 : A_DB);
	cron_opt all[CRON_OPTS_MAX];
	size_t n = cron_options(a, all);
	/* The subcommand's options, then the others', refused by not_taken. */
	cli_opt o[CRON_OPTS_MAX + 1];
	size_t k = 0;
	for (size_t i = 0; i < n; i++)
		if (all[i].groups & allowed)
			o[k++] = all[i].o;
	for (size_t i = 0; i < n; i++) {
		bool mine = false;
		for (size_t j = 0; j < k && !mine; j++)
			mine = strcmp(o[j].long_name, all[i].o.long_name) == 0;
		if (mine)
			continue;
		cli_opt r = all[i].o;
		bool value = r.type != CLI_OPT_BOOL && r.type != CLI_OPT_HELP;
		r.type = CLI_OPT_CALL;
		r.call = not_taken;
		r.flags = value ? (r.flags & CLI_OPT_OPTIONAL) : CLI_OPT_OPTIONAL;
		o[k++] = r;
	}
	o[k] = (cli_opt)CLI_OPT_TABLE_END;
	cli_opt_usage_set(usage);
	optind = 0; /* glibc: start over */
	int first, rc = cli_opt_parse(sub, o, argc, argv, &first);
	if (rc != 0)
		return rc;
	a->argc = argc - first;
	a->argv = argv + first;
	return 0;
}

/* The operands a subcommand takes: exactly n, named in what ("NAME"). */
int cron_want_args(const cron_args *a, int n, const char *what)
{
	if (a->argc < n)
		return cli_usage_error(a->sub, "missing %s", what);
	if (a->argc > n)
		return cli_usage_error(a->sub, "unexpected argument \"%s\"%s", cli_esc(a->argv[n]),
		                       n == 2 ? ": give the schedule as one quoted argument (\"30 2 * * *\")" : "");
	return 0;
}

/* The exit code of a failed library call, as cli_report's table says; a bad name, expression,
 * zone or value also gets the usage hint. */
int cron_report(const char *sub, const pgc_error *err)
{
	if (err->code == PGC_EUSAGE)
		return cli_usage_error(sub, "%s", err->message);
	return cli_report(err);
}

int cron_open_conn(const char *sub, pgc_conn **conn)
{
	return cli_connect(sub, conn);
}

/* An instant (microseconds) in the schedule's zone, or "-" for none. */
static const char *local_us(const pgc_cron *c, int64_t us, char *buf, size_t size)
{
	pgc_error err;
	if (us == 0 || c == NULL || pgc_cron_format_local(c, us / 1000000 - (us % 1000000 < 0), buf, size, &err) != PGC_OK)
		snprintf(buf, size, "-");
	return buf;
}

/* ---- the run log ---------------------------------------------------------------------------- */

/* What a run's job ended with, in one line: the last line of its error when it has one and did
 * not succeed (a traceback's exception), else of its output; escaped, at most size - 1 bytes. */
static const char *run_line(const pgc_cron_run *r, char *buf, size_t size)
{
	char last[PGC_JOB_ERROR_MAX];
	bool err = r->error != NULL && strcmp(r->job_status, "succeeded") != 0;
	cli_last_line(err ? r->error : r->output, last, sizeof last);
	return cli_escape(last, buf, size);
}

/* A run's job in words: "failed, exit 127, 12ms" (what is known of it). */
static const char *run_words(const pgc_cron_run *r, char *buf, size_t size)
{
	if (r->job_status[0] == '\0')
		return snprintf(buf, size, "-"), buf;
	char d[PGC_DURATION_FORMAT_MAX], ex[24] = "", took[PGC_DURATION_FORMAT_MAX + 16] = "", retry[48] = "";
	if (r->exit_status >= 0)
		snprintf(ex, sizeof ex, ", exit %d", r->exit_status);
	if (r->duration_ms >= 0)
		snprintf(took, sizeof took, ", %s%s", cli_duration_str(r->duration_ms, d),
		         strcmp(r->job_status, "running") == 0 ? " so far" : "");
	if ((strcmp(r->job_status, "pending") == 0 || strcmp(r->job_status, "scheduled") == 0) && r->attempts > 0)
		snprintf(retry, sizeof retry, " (retry after attempt %d of %d)", r->attempts, r->max_attempts);
	snprintf(buf, size, "%s%s%s%s", r->job_status, retry, ex, took);
	return buf;
}

static int cron_add(int argc, char **argv)
{
	/* "-- COMMAND [ARGS...]": everything after the first "--" is the command, its options
	 * included; the options before it are ours. */
	char **cmd = NULL;
	int ncmd = 0;
	for (int i = 1; i < argc; i++)
		if (strcmp(argv[i], "--") == 0) {
			cmd = argv + i + 1;
			ncmd = argc - i - 1;
			argc = i;
			break;
		}
	cron_args a;
	int rc = cron_parse_args(argc, argv, "cron add", A_DEF, &a);
	if (rc != 0)
		return rc < 0 ? 0 : rc;
	if ((rc = cron_want_args(&a, 2, "NAME and SCHEDULE (pgcoord cron add NAME 'SCHEDULE' --queue Q, or -- COMMAND)")) != 0)
		return rc;
	if (cmd != NULL && ncmd == 0)
		return cli_usage_error(a.sub, "no COMMAND after \"--\" (pgcoord cron add NAME 'SCHEDULE' -- COMMAND [ARGS...])");
	if (cmd != NULL && a.def.queue != NULL)
		return cli_usage_error(a.sub, "--queue and a COMMAND exclude each other: a command schedule's jobs go to "
		                       "the queue %s, which cron run works on", PGC_CRON_COMMAND_QUEUE);
	if (cmd == NULL && a.def.queue == NULL)
		return cli_usage_error(a.sub, "missing --queue (the queue the schedule's jobs go to) or -- COMMAND");
	if (cmd != NULL && ncmd > PGC_CRON_COMMAND_MAX)
		return cli_usage_error(a.sub, "a COMMAND has at most %d words", PGC_CRON_COMMAND_MAX);
	if (cmd != NULL && cmd[0][0] == '\0')
		return cli_usage_error(a.sub, "COMMAND must not be empty");
	a.def.command = (const char *const *)cmd;
	a.def.n_command = (size_t)ncmd;
	a.def.expr = a.argv[1];
	/* The expression and zone first: a bad one is a usage error before any connection. */
	pgc_cron *c;
	pgc_error err = PGC_ERROR_INIT;
	if (pgc_cron_parse(a.def.expr, a.def.tz, &c, &err) != PGC_OK)
		return cli_usage_error(a.sub, "%s", err.message);
	pgc_cron_free(c);
	pgc_conn *conn;
	if ((rc = cron_open_conn(a.sub, &conn)) != 0)
		return rc;
	bool changed = false;
	if (pgc_cron_add(conn, a.schema, a.argv[0], &a.def, a.replace ? PGC_CRON_REPLACE : 0, &changed, &err) != PGC_OK)
		rc = cron_report(a.sub, &err);
	else if (!g_cli.quiet)
		fprintf(stderr, "pgcoord: schedule %s %s\n", a.argv[0], changed ? "saved" : "unchanged");
	pgc_conn_close(conn);
	return rc;
}

static int cron_list(int argc, char **argv)
{
	cron_args a;
	bool show = strcmp(argv[0], "show") == 0;
	int rc = cron_parse_args(argc, argv, show ? "cron show" : "cron list", show ? 0 : A_PROM, &a);
	if (rc != 0)
		return rc < 0 ? 0 : rc;
	if (a.prometheus && g_cli.json)
		return cli_usage_error(a.sub, "give --json or --prometheus, not both");
	if ((rc = cron_want_args(&a, show ? 1 : 0, "NAME")) != 0)
		return rc;
	pgc_conn *conn;
	if ((rc = cron_open_conn(a.sub, &conn)) != 0)
		return rc;
	pgc_cron_info *xs;
	size_t n, nr = 0;
	pgc_error err;
	pgc_cron_run *runs = NULL;
	if (pgc_cron_list(conn, a.schema, show ? a.argv[0] : NULL, &xs, &n, &err) != PGC_OK) {
		rc = cron_report(a.sub, &err);
		pgc_conn_close(conn);
		return rc;
	}
	/* Each schedule's last run with its job (both lists are by name). */
	if (!a.prometheus &&
	    pgc_cron_runs(conn, a.schema, show ? a.argv[0] : NULL, 1, PGC_CRON_RUNS_COME, &runs, &nr, &err) != PGC_OK) {
		rc = cron_report(a.sub, &err);
		pgc_cron_infos_free(xs, n);
		pgc_conn_close(conn);
		return rc;
	}
	pgc_conn_close(conn);
	const pgc_cron_run **last = calloc(n ? n : 1, sizeof *last);
	if (last == NULL) {
		pgc_cron_runs_free(runs, nr);
		pgc_cron_infos_free(xs, n);
		return cli_errorf("out of memory"), EXIT_SOFTWARE;
	}
	for (size_t i = 0, k = 0; i < n && k < nr; i++) {
		while (k < nr && strcmp(runs[k].schedule, xs[i].name) < 0)
			k++;
		if (k < nr && strcmp(runs[k].schedule, xs[i].name) == 0)
			last[i] = &runs[k];
	}
	if (a.prometheus) {
		cli_prom_cron(stdout, xs, n);
	} else if (g_cli.json) {
		json_w w = json_w_on(stdout);
		if (!show) {
			json_obj(&w, NULL);
			json_arr(&w, "schedules");
		}
		for (size_t i = 0; i < n; i++)
			render_schedule(&w, NULL, &xs[i], last[i], 0);
		if (!show) {
			json_arr_end(&w);
			json_obj_end(&w);
		}
		putchar('\n');
	} else if (show) {
		const pgc_cron_info *x = &xs[0];
		pgc_cron *c = NULL;
		if (pgc_cron_parse(x->expr, x->tz, &c, &err) != PGC_OK)
			c = NULL;
		char b[PGC_CRON_TIME_MAX], d[PGC_DURATION_FORMAT_MAX];
		printf("name:           %s\nschedule:       %s\nzone:           %s\nqueue:          %s\npayload:        %s\n",
		       x->name, x->expr, x->tz, x->queue, x->payload);
		if (x->command != NULL)
			printf("command:        %s\n", x->command);
		if (x->max_attempts > 0)
			printf("max attempts:   %d\n", x->max_attempts);
		else
			printf("max attempts:   the queue's default\n");
		printf("catch-up:       %s", pgc_cron_catch_up_name(x->catch_up));
		if (x->catch_up == PGC_CRON_CATCHUP_ALL)
			printf(" (window %s, at most %d)", cli_duration_str(x->catch_up_window_ms, d), x->catch_up_max);
		printf("\noverlap:        %s\njitter:         %s\n", pgc_cron_overlap_name(x->overlap),
		       cli_duration_str(x->jitter_ms, d));
		printf("state:          %s\n", x->paused ? "paused" : "active");
		printf("next run:       %s\n", x->paused ? "- (paused)" : local_us(c, x->next_tick_us, b, sizeof b));
		printf("last run:       %s", local_us(c, x->last_tick_us, b, sizeof b));
		printf("%s%s%s\n", x->last_outcome ? " (" : "", x->last_outcome ? x->last_outcome : "", x->last_outcome ? ")" : "");
		if (last[0] != NULL && last[0]->tick.job_id > 0) {
			char w[160], l[200];
			printf("last job:       %" PRId64 " %s\n", last[0]->tick.job_id, run_words(last[0], w, sizeof w));
			if (run_line(last[0], l, sizeof l)[0] != '\0')
				printf("last output:    %s\n", l);
		}
		printf("last success:   %s\n", local_us(c, x->last_success_us, b, sizeof b));
		printf("fired:          %" PRId64 "\nmissed:         %" PRId64 "\nskipped:        %" PRId64 "\n", x->fired,
		       x->missed, x->skipped);
		printf("last scheduler: %s", x->last_scheduler ? x->last_scheduler : "-");
		printf(" (seen %s)\n", local_us(c, x->seen_us, b, sizeof b));
		printf("created:        %s\n", local_us(c, x->created_us, b, sizeof b));
		printf("updated:        %s\n", local_us(c, x->updated_us, b, sizeof b));
		pgc_cron_free(c);
	} else if (n == 0) {
		if (!g_cli.quiet)
			fprintf(stderr, "pgcoord: no schedules (add one with pgcoord cron add)\n");
	} else {
		printf("%-20s %-16s %-16s %-25s %-25s %-15s %-14s %6s %7s\n", "NAME", "SCHEDULE", "ZONE", "NEXT RUN",
		       "LAST RUN", "OUTCOME", "JOB", "MISSED", "SKIPPED");
		for (size_t i = 0; i < n; i++) {
			const pgc_cron_info *x = &xs[i];
			pgc_cron *c = NULL;
			if (pgc_cron_parse(x->expr, x->tz, &c, &err) != PGC_OK)
				c = NULL;
			char nb[PGC_CRON_TIME_MAX], lb[PGC_CRON_TIME_MAX], job[32] = "-";
			/* The last run's job: its status, and its exit status when it has one. */
			if (last[i] != NULL && last[i]->job_status[0] != '\0') {
				if (last[i]->exit_status >= 0)
					snprintf(job, sizeof job, "%s/%d", last[i]->job_status, last[i]->exit_status);
				else
					snprintf(job, sizeof job, "%s", last[i]->job_status);
			}
			printf("%-20s %-16s %-16s %-25s %-25s %-15s %-14s %6" PRId64 " %7" PRId64 "\n", x->name, x->expr,
			       x->tz, x->paused ? "paused" : local_us(c, x->next_tick_us, nb, sizeof nb),
			       local_us(c, x->last_tick_us, lb, sizeof lb), x->last_outcome ? x->last_outcome : "-", job,
			       x->missed, x->skipped);
			pgc_cron_free(c);
		}
	}
	free(last);
	pgc_cron_runs_free(runs, nr);
	pgc_cron_infos_free(xs, n);
	return 0;
}

/* pause, resume, remove, trigger: NAME and nothing else. */
static int cron_simple(int argc, char **argv)
{
	char sub[32];
	snprintf(sub, sizeof sub, "cron %s", argv[0]);
	cron_args a;
	int rc = cron_parse_args(argc, argv, sub, 0, &a);
	if (rc != 0)
		return rc < 0 ? 0 : rc;
	if ((rc = cron_want_args(&a, 1, "NAME")) != 0)
		return rc;
	pgc_conn *conn;
	if ((rc = cron_open_conn(sub, &conn)) != 0)
		return rc;
	pgc_error err;
	int64_t id = 0;
	const char *name = a.argv[0];
	if (strcmp(argv[0], "pause") == 0)
		rc = pgc_cron_pause(conn, a.schema, name, true, &err);
	else if (strcmp(argv[0], "resume") == 0)
		rc = pgc_cron_pause(conn, a.schema, name, false, &err);
	else if (strcmp(argv[0], "remove") == 0)
		rc = pgc_cron_remove(conn, a.schema, name, &err);
	else
		rc = pgc_cron_trigger(conn, a.schema, name, &id, &err);
	pgc_conn_close(conn);
	if (rc != PGC_OK)
		return cron_report(sub, &err);
	if (strcmp(argv[0], "trigger") == 0) {
		if (g_cli.json) {
			json_w w = json_w_on(stdout);
			json_obj(&w, NULL);
			json_s(&w, "schedule", name);
			json_i(&w, "job_id", id);
			json_obj_end(&w);
			putchar('\n');
		} else {
			printf("%" PRId64 "\n", id);
		}
	} else if (!g_cli.quiet) {
		fprintf(stderr, "pgcoord: schedule %s %s\n", name,
		        strcmp(argv[0], "pause") == 0 ? "paused" : strcmp(argv[0], "resume") == 0 ? "resumed" : "removed");
	}
	return 0;
}

static int cron_history(int argc, char **argv)
{
	cron_args a;
	int rc = cron_parse_args(argc, argv, "cron history", A_LIMIT, &a);
	if (rc != 0)
		return rc < 0 ? 0 : rc;
	if ((rc = cron_want_args(&a, 1, "NAME")) != 0)
		return rc;
	pgc_conn *conn;
	if ((rc = cron_open_conn(a.sub, &conn)) != 0)
		return rc;
	pgc_error err;
	pgc_cron_info *xs = NULL;
	size_t nx = 0, n = 0;
	pgc_cron_run *t = NULL;
	/* The ticks with their jobs: the run log. */
	if (pgc_cron_list(conn, a.schema, a.argv[0], &xs, &nx, &err) != PGC_OK ||
	    pgc_cron_runs(conn, a.schema, a.argv[0], (int)a.limit, 0, &t, &n, &err) != PGC_OK) {
		rc = cron_report(a.sub, &err);
		pgc_cron_infos_free(xs, nx);
		pgc_conn_close(conn);
		return rc;
	}
	pgc_conn_close(conn);
	pgc_cron *c = NULL;
	if (pgc_cron_parse(xs[0].expr, xs[0].tz, &c, &err) != PGC_OK)
		c = NULL;
	char b1[PGC_CRON_TIME_MAX], b2[PGC_CRON_TIME_MAX];
	json_w w = json_w_on(stdout);
	if (g_cli.json) {
		json_obj(&w, NULL);
		json_s(&w, "schedule", xs[0].name);
		json_arr(&w, "ticks");
	} else if (n > 0)
		printf("%-25s %-25s %-15s %5s %-10s %-10s %4s %8s %s\n", "TICK", "FIRED AT", "OUTCOME", "TICKS", "JOB",
		       "STATUS", "EXIT", "TOOK", "OUTPUT");
	for (size_t i = 0; i < n; i++) {
		const pgc_cron_tick *k = &t[i].tick;
		if (g_cli.json) {
			json_obj(&w, NULL);
			render_cron_time(&w, "tick", c, k->tick_us);
			render_cron_time(&w, "fired_at", c, k->fired_us);
			json_s(&w, "outcome", k->outcome);
			json_i(&w, "ticks", k->ticks);
			json_i_or_null(&w, "job_id", k->job_id > 0, k->job_id);
			render_cron_run_members(&w, &t[i]);
			json_obj_end(&w);
		} else {
			char job[24] = "-", ex[16] = "-", took[PGC_DURATION_FORMAT_MAX] = "-", line[120];
			if (k->job_id > 0)
				snprintf(job, sizeof job, "%" PRId64, k->job_id);
			if (t[i].exit_status >= 0)
				snprintf(ex, sizeof ex, "%d", t[i].exit_status);
			if (t[i].duration_ms >= 0)
				cli_duration_str(t[i].duration_ms, took);
			printf("%-25s %-25s %-15s %5d %-10s %-10s %4s %8s %s\n", local_us(c, k->tick_us, b1, sizeof b1),
			       local_us(c, k->fired_us, b2, sizeof b2), k->outcome, k->ticks, job,
			       t[i].job_status[0] ? t[i].job_status : "-", ex, took, run_line(&t[i], line, sizeof line));
		}
	}
	if (g_cli.json) {
		json_arr_end(&w);
		json_obj_end(&w);
		putchar('\n');
	}
	pgc_cron_free(c);
	pgc_cron_runs_free(t, n);
	pgc_cron_infos_free(xs, nx);
	return 0;
}

static const struct cron_sub {
	const char *name;
	int (*fn)(int argc, char **argv);
} subs[] = {
	{ "next", cron_next },
	{ "add", cron_add },
	{ "list", cron_list },
	{ "show", cron_list },
	{ "pause", cron_simple },
	{ "resume", cron_simple },
	{ "trigger", cron_simple },
	{ "remove", cron_simple },
	{ "history", cron_history },
	{ "sync", cron_cmd_sync },
	{ "run", cron_cmd_run },
	{ NULL, NULL },
};

int cmd_cron(int argc, char **argv)
{
	if (argc < 2) {
		cli_errorf("no cron subcommand given");
		usage(stderr);
		return EXIT_USAGE;
	}
	const char *sub = argv[1];
	if (strcmp(sub, "--help") == 0 || strcmp(sub, "-h") == 0) {
		usage(stdout);
		return 0;
	}
	for (const struct cron_sub *s = subs; s->name != NULL; s++)
		if (strcmp(sub, s->name) == 0)
			return s->fn(argc - 1, argv + 1);
	return cli_usage_error("cron", "unknown cron subcommand \"%s\" (next, add, list, show, pause, resume, trigger, remove, history, sync, run)", cli_esc(sub));
}

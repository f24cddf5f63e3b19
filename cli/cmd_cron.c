/* cmd_cron.c - pgcoord cron: cron schedules (next: the next fire times of an expression)
 *
 * One function per subcommand in subs[]; each parses its own options from argv[0] = its
 * name. cron next needs no database: the schedule and the host's tzdata decide. */
#include <getopt.h>
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "cli.h"

#define NEXT_DEFAULT 5
#define NEXT_MAX 1000

static void usage(FILE *f)
{
	fputs("Usage: pgcoord [--json] cron SUBCOMMAND [OPTIONS] [ARGS]\n"
	      "\n"
	      "Subcommands:\n"
	      "  next SCHEDULE [--tz ZONE] [--from TIME] [-n N] [--json]\n"
	      "                       print the next N fire times of SCHEDULE, in ZONE's\n"
	      "                       local time with its offset (needs no database)\n"
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
	      "\n"
	      "Options:\n"
	      "      --tz=ZONE        IANA time zone of the schedule (default UTC), from the\n"
	      "                       host's tzdata ($TZDIR or /usr/share/zoneinfo)\n"
	      "      --from=TIME      fire times strictly after TIME (default: now)\n"
	      "  -n, --count=N        how many fire times, 1 to 1000 (default 5)\n"
	      "      --json           one JSON object: the schedule and its fire times\n"
	      "  -h, --help           show this help and exit\n"
	      "\n"
	      "Exit status: 0 ok (fewer than N times when the year 10000 comes first);\n"
	      "64 usage (a bad expression, zone or time, an unknown subcommand); 65 the\n"
	      "schedule never fires in ZONE (DST skips all its times).\n"
	      "See pgcoord-cron(1).\n", f);
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
	enum { O_TZ = 256, O_FROM, O_JSON };
	static const struct option longopts[] = {
		{ "tz", required_argument, NULL, O_TZ },
		{ "from", required_argument, NULL, O_FROM },
		{ "count", required_argument, NULL, 'n' },
		{ "json", no_argument, NULL, O_JSON },
		{ "help", no_argument, NULL, 'h' },
		{ NULL, 0, NULL, 0 },
	};
	const char *tz = NULL, *from = NULL;
	long long count = NEXT_DEFAULT;
	int ch;
	optind = 0; /* glibc: start over */
	opterr = 0;
	while ((ch = getopt_long(argc, argv, ":n:h", longopts, NULL)) != -1) {
		switch (ch) {
		case O_TZ:
			tz = optarg;
			break;
		case O_FROM:
			from = optarg;
			break;
		case 'n':
			if (!cli_parse_int(optarg, 1, NEXT_MAX, &count))
				return cli_usage_error("cron next", "-n must be an integer from 1 to %d, not \"%s\"", NEXT_MAX,
				                       cli_esc(optarg));
			break;
		case O_JSON:
			g_cli.json = true;
			break;
		case 'h':
			usage(stdout);
			return 0;
		default:
			return cli_getopt_error("cron next", ch, argv);
		}
	}
	if (optind >= argc)
		return cli_usage_error("cron next", "missing SCHEDULE (a cron expression such as \"30 2 * * *\")");
	const char *expr = argv[optind++];
	if (optind < argc)
		return cli_usage_error("cron next", "unexpected argument \"%s\": give the schedule as one quoted argument "
		                       "(\"30 2 * * *\")", cli_esc(argv[optind]));
	if (tz != NULL && *tz == '\0')
		return cli_usage_error("cron next", "--tz must not be empty (leave it out for UTC)");
	pgc_cron *c;
	pgc_error err = PGC_ERROR_INIT;
	if (pgc_cron_parse(expr, tz, &c, &err) != PGC_OK)
		return err.code == PGC_EUSAGE ? cli_usage_error("cron next", "%s", err.message) : cli_report(&err);
	int64_t after;
	if (from != NULL) {
		if (pgc_cron_parse_time(c, from, &after, &err) != PGC_OK) {
			pgc_cron_free(c);
			return cli_usage_error("cron next", "--from: %s", err.message);
		}
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

/* The subcommands; one line each, so that adding one is one line and one function. */
static const struct cron_sub {
	const char *name;
	int (*fn)(int argc, char **argv);
} subs[] = {
	{ "next", cron_next },
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
	return cli_usage_error("cron", "unknown cron subcommand \"%s\" (next)", cli_esc(sub));
}

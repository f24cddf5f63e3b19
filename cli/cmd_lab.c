/* cmd_lab.c - pgcoord lab: run the experiments that check, on a real server, how PostgreSQL's
 * locks behave */
#include <getopt.h>
#include <signal.h>
#include <string.h>

#include "cli.h"

static void usage(FILE *f)
{
	fputs("Usage: pgcoord [-d DSN] lab [OPTIONS] [EXPERIMENT...]\n"
	      "\n"
	      "Runs experiments that reproduce how PostgreSQL locks behave: advisory locks, row\n"
	      "and table locks, SKIP LOCKED, deadlocks, timeouts. Each one works in its own\n"
	      "scratch schema with its own sessions, never waits without a timeout, and prints\n"
	      "PASS or FAIL with one line of what it saw. Without EXPERIMENT, runs them all.\n"
	      "\n"
	      "Options:\n"
	      "      --list            list the experiments (name, description, and the\n"
	      "                        manual section that documents the claim)\n"
	      "      --json            one JSON object per experiment, then a summary object\n"
	      "      --keep            keep each experiment's scratch schema\n"
	      "      --timeout=DUR     how long a session waits for a lock it expects\n"
	      "                        (default 5s; e.g. 500ms, 2s)\n"
	      "      --key-base=N      use advisory keys N .. N+199 (default: derived from\n"
	      "                        the backend pid, unique among running labs)\n"
	      "      --allow-exhaust   let advisory-exhaust fill the shared lock table until\n"
	      "                        it fails (only with no other client connected; for\n"
	      "                        a scratch server)\n"
	      "  -h, --help            show this help and exit\n"
	      "\n"
	      "Exit status: the number of failed experiments (0: all passed, at most 63);\n"
	      "64 usage error, 69 database unavailable, 130 interrupted.\n", f);
}

static volatile sig_atomic_t interrupted;

static void on_sigint(int sig)
{
	(void)sig;
	interrupted = 1;
}

static void print_list(bool json)
{
	size_t n;
	const pgc_lab_info *list = pgc_lab_list(&n);
	for (size_t i = 0; i < n; i++) {
		if (json) {
			fputs("{\"name\":", stdout);
			json_str(stdout, list[i].name);
			fputs(",\"description\":", stdout);
			json_str(stdout, list[i].description);
			fputs(",\"reference\":", stdout);
			json_str(stdout, list[i].reference);
			fputs("}\n", stdout);
		} else {
			printf("%-24s  %s [%s]\n", list[i].name, list[i].description, list[i].reference);
		}
	}
}

static void print_json(const pgc_lab_result *r)
{
	fputs("{\"type\":\"experiment\",\"name\":", stdout);
	json_str(stdout, r->info->name);
	fputs(",\"description\":", stdout);
	json_str(stdout, r->info->description);
	fputs(",\"reference\":", stdout);
	json_str(stdout, r->info->reference);
	printf(",\"status\":\"%s\",\"passed\":%s,\"observation\":", r->passed ? "PASS" : "FAIL",
	       r->passed ? "true" : "false");
	json_str(stdout, r->observation);
	fputs(",\"values\":{", stdout);
	for (int i = 0; i < r->nvalues; i++) {
		const pgc_lab_value *v = &r->values[i];
		if (i > 0)
			fputc(',', stdout);
		json_str(stdout, v->name);
		fputc(':', stdout);
		if (v->kind == PGC_LAB_TEXT)
			json_str(stdout, v->text);
		else
			fputs(v->text, stdout);
	}
	printf("},\"elapsed_ms\":%lld,\"schema\":", (long long)r->elapsed_ms);
	json_str(stdout, r->schema);
	printf(",\"schema_kept\":%s}\n", r->schema_kept ? "true" : "false");
}

int cmd_lab(int argc, char **argv)
{
	enum { OPT_LIST = 256, OPT_JSON, OPT_KEEP, OPT_TIMEOUT, OPT_KEY_BASE, OPT_ALLOW_EXHAUST };
	static const struct option longopts[] = {
		{ "list", no_argument, NULL, OPT_LIST },
		{ "json", no_argument, NULL, OPT_JSON },
		{ "keep", no_argument, NULL, OPT_KEEP },
		{ "timeout", required_argument, NULL, OPT_TIMEOUT },
		{ "key-base", required_argument, NULL, OPT_KEY_BASE },
		{ "allow-exhaust", no_argument, NULL, OPT_ALLOW_EXHAUST },
		{ "help", no_argument, NULL, 'h' },
		{ NULL, 0, NULL, 0 },
	};
	bool list = false, json = g_cli.json;
	pgc_lab_options opts = PGC_LAB_OPTIONS_INIT;
	int ch;
	opterr = 0;
	while ((ch = getopt_long(argc, argv, ":h", longopts, NULL)) != -1) {
		switch (ch) {
		case OPT_LIST:
			list = true;
			break;
		case OPT_JSON:
			json = true;
			break;
		case OPT_KEEP:
			opts.keep = true;
			break;
		case OPT_TIMEOUT: {
			int64_t ms;
			pgc_error err = PGC_ERROR_INIT;
			if (pgc_duration_parse(optarg, &ms, &err) != PGC_OK)
				return cli_usage_error("lab", "--timeout: %s", err.message);
			if (ms < 100 || ms > 600000)
				return cli_usage_error("lab", "--timeout must be between 100ms and 10m");
			opts.lock_timeout_ms = (int)ms;
			break;
		}
		case OPT_KEY_BASE: {
			long long v;
			if (!cli_parse_int(optarg, 1, INT64_MAX - 1000, &v))
				return cli_usage_error("lab", "--key-base must be a positive integer below 2^63 - 1000,"
				                       " not \"%s\"", optarg);
			opts.key_base = v;
			break;
		}
		case OPT_ALLOW_EXHAUST:
			opts.allow_exhaust = true;
			break;
		case 'h':
			usage(stdout);
			return 0;
		default:
			return cli_getopt_error("lab", ch, argv);
		}
	}
	for (int i = optind; i < argc; i++)
		if (pgc_lab_find(argv[i]) == NULL)
			return cli_usage_error("lab", "unknown experiment \"%s\" (pgcoord lab --list names them)",
			                       argv[i]);
	if (list) {
		if (optind < argc)
			return cli_usage_error("lab", "--list takes no experiment names");
		print_list(json);
		return 0;
	}

	size_t total;
	const pgc_lab_info *all = pgc_lab_list(&total);
	size_t n = optind < argc ? (size_t)(argc - optind) : total;
	interrupted = 0;
	struct sigaction sa, old_int, old_term;
	memset(&sa, 0, sizeof sa);
	sa.sa_handler = on_sigint;
	sigemptyset(&sa.sa_mask);
	sigaction(SIGINT, &sa, &old_int);
	sigaction(SIGTERM, &sa, &old_term);

	int passed = 0, failed = 0, rc = 0;
	long long elapsed = 0;
	for (size_t i = 0; i < n && !interrupted; i++) {
		const char *name = optind < argc ? argv[optind + (int)i] : all[i].name;
		pgc_lab_result r;
		pgc_error err = PGC_ERROR_INIT;
		if (pgc_lab_run(g_cli.dsn, name, &opts, &r, &err) != PGC_OK) {
			rc = cli_report(&err);
			break;
		}
		elapsed += r.elapsed_ms;
		if (r.passed)
			passed++;
		else
			failed++;
		if (json) {
			print_json(&r);
		} else if (!r.passed || !g_cli.quiet) {
			printf("%s  %-24s  %s\n", r.passed ? "PASS" : "FAIL", name, r.observation);
			if (r.schema_kept)
				printf("      %-24s  (schema %s kept)\n", "", r.schema);
		}
		fflush(stdout);
	}
	sigaction(SIGINT, &old_int, NULL);
	sigaction(SIGTERM, &old_term, NULL);
	if (rc != 0)
		return rc;
	if (json)
		printf("{\"type\":\"summary\",\"experiments\":%d,\"passed\":%d,\"failed\":%d,"
		       "\"elapsed_ms\":%lld}\n", passed + failed, passed, failed, elapsed);
	else if (!g_cli.quiet || failed > 0)
		printf("lab: %d experiment%s, %d passed, %d failed (%.1f s)\n", passed + failed,
		       passed + failed == 1 ? "" : "s", passed, failed, (double)elapsed / 1000.0);
	if (interrupted) {
		fflush(stdout);
		cli_errorf("interrupted after %d experiment%s", passed + failed,
		           passed + failed == 1 ? "" : "s");
		return 130;
	}
	return failed > 63 ? 63 : failed;
}

/* cli.c - pgcoord: global options, then dispatch to one cmd_<name>() per subcommand */
#include <getopt.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"

static const cli_command commands[] = {
	{ "activity", cmd_activity, "list sessions by transaction age" },
	{ "blockers", cmd_blockers, "show who waits for whom, root blockers first" },
	{ "cancel", cmd_cancel, "cancel a session's query, after showing who it is" },
	{ "cron", cmd_cron, "cron schedules fired once per tick on the database's clock" },
	{ "doctor", cmd_doctor, "check the path to the server and its settings for hazards" },
	{ "elect", cmd_elect, "campaign for a lease and run a command while leading" },
	{ "info", cmd_info, "connect and show the server, the session and the pgcoord schema" },
	{ "init", cmd_init, "create or upgrade the pgcoord schema" },
	{ "lab", cmd_lab, "run experiments that check how the server's locks behave" },
	{ "lease", cmd_lease, "show leases and fencing tokens; release a lease" },
	{ "lock", cmd_lock, "show who holds an advisory lock, or a lock name's key" },
	{ "locks", cmd_locks, "list locks, decoded (relations, rows, advisory keys)" },
	{ "probe", cmd_probe, "show which locks a statement takes, in a rolled-back transaction" },
	{ "queue", cmd_queue, "enqueue and inspect jobs of the job queue" },
	{ "run", cmd_run, "run a command while holding a cluster-wide lock" },
	{ "terminate", cmd_terminate, "end a session, after showing who it is" },
	{ "tx", cmd_tx, "run a SQL script as one transaction, retried on deadlock" },
	{ "web", cmd_web, "serve a dashboard and a JSON API over queues, locks and blockers" },
	{ "worker", cmd_worker, "run a command once per job of a queue" },
	{ NULL, NULL, NULL },
};

static void print_help(FILE *f)
{
	fputs("pgcoord - coordinate processes through PostgreSQL\n"
	      "\n"
	      "Usage:\n"
	      "  pgcoord [OPTIONS] COMMAND [ARGS...]\n"
	      "  pgcoord help COMMAND\n"
	      "\n"
	      "Options:\n"
	      "  -d, --dsn=DSN      connection string or URI (default: $PGCOORD_DSN, then\n"
	      "                     $DATABASE_URL, then libpq's PG* variables)\n"
	      "      --json         machine-readable output (one JSON object per result)\n"
	      "  -q, --quiet        print only errors\n"
	      "  -h, --help         show this help and exit\n"
	      "  -V, --version      show the version and exit\n"
	      "\n"
	      "Commands:\n", f);
	for (const cli_command *c = commands; c->name; c++)
		fprintf(f, "  %-12s %s\n", c->name, c->summary);
	fputs("\n"
	      "Exit status:\n"
	      "  0    success (run and elect: the command's own status)\n"
	      "  1    lock held elsewhere, wait timed out, or something was found\n"
	      "  64   usage error            65   bad input data\n"
	      "  69   database unavailable   70   internal error\n"
	      "  75   lock or lease lost     77   credentials refused or permission denied\n"
	      "  78   connection setting that cannot work, or a pooler that cannot keep it\n"
	      "  126  command not executable 127  command not found\n"
	      "\n"
	      "See pgcoord(1) for details.\n", f);
}

static const cli_command *find_command(const char *name)
{
	for (const cli_command *c = commands; c->name; c++)
		if (strcmp(c->name, name) == 0)
			return c;
	return NULL;
}

static int run_command(const cli_command *c, int argc, char **argv)
{
	optind = 0; /* the subcommand parses its own options from argv[0] = its name */
	int rc = c->fn(argc, argv);
	fflush(stdout);
	if (ferror(stdout)) {
		cli_errorf("cannot write to standard output");
		return rc ? rc : EXIT_SOFTWARE;
	}
	return rc;
}

static int main_inner(int argc, char **argv)
{
	enum { OPT_JSON = 256 };
	static const struct option longopts[] = {
		{ "dsn", required_argument, NULL, 'd' },
		{ "json", no_argument, NULL, OPT_JSON },
		{ "quiet", no_argument, NULL, 'q' },
		{ "help", no_argument, NULL, 'h' },
		{ "version", no_argument, NULL, 'V' },
		{ NULL, 0, NULL, 0 },
	};
	opterr = 0;
	int ch;
	/* "+": stop at the first non-option, the subcommand. */
	while ((ch = getopt_long(argc, argv, "+:d:qhV", longopts, NULL)) != -1) {
		switch (ch) {
		case 'd':
			g_cli.dsn = optarg;
			break;
		case OPT_JSON:
			g_cli.json = true;
			break;
		case 'q':
			g_cli.quiet = true;
			break;
		case 'h':
			print_help(stdout);
			return 0;
		case 'V':
			printf("pgcoord %s\n", pgc_version());
			return 0;
		default:
			return cli_getopt_error(NULL, ch, argv);
		}
	}
	if (optind >= argc) {
		cli_errorf("no command given");
		print_help(stderr);
		return EXIT_USAGE;
	}
	const char *name = argv[optind];
	if (strcmp(name, "help") == 0) {
		if (optind + 1 >= argc) {
			print_help(stdout);
			return 0;
		}
		const cli_command *c = find_command(argv[optind + 1]);
		if (c == NULL)
			return cli_usage_error(NULL, "unknown command \"%s\"", argv[optind + 1]);
		char *hargv[] = { (char *)c->name, "--help", NULL };
		return run_command(c, 2, hargv);
	}
	const cli_command *c = find_command(name);
	if (c == NULL)
		return cli_usage_error(NULL, "unknown command \"%s\"", name);
	return run_command(c, argc - optind, argv + optind);
}

int cli_main(int argc, char **argv)
{
	int rc = main_inner(argc, argv);
	/* Under --json a failure is also one JSON object on stdout, whichever command failed. */
	cli_json_error(rc);
	return rc;
}

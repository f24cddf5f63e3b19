/* cmd_lease.c - pgcoord lease: show leases and fencing tokens, release a lease by its token */
#include <getopt.h>
#include <inttypes.h>
#include <string.h>
#include <time.h>

#include "diag_out.h"
#include "render.h"

static void usage(FILE *f)
{
	fputs("Usage: pgcoord [-d DSN] [--json] lease show [--schema NAME] [LEASE]\n"
	      "       pgcoord [-d DSN] lease release [--schema NAME] LEASE --token T\n"
	      "\n"
	      "show     lists every lease and fencing-token name (or only LEASE): the last\n"
	      "         token, who got it, whether the lease is held and when it expires, by\n"
	      "         the database clock. Exit 1 when LEASE does not exist.\n"
	      "release  ends the lease LEASE held with token T (an operator's override) and\n"
	      "         wakes the waiting candidates. Exit 1 when T is not the current token.\n"
	      "\n"
	      "Options:\n"
	      "      --schema=NAME  pgcoord schema (default: pgcoord)\n"
	      "      --token=T      the fencing token of the lease to release\n"
	      "  -h, --help         show this help and exit\n", f);
}

/* One lease per line. */
static void print_json(const pgc_lease_info *l)
{
	json_w w = json_w_on(stdout);
	render_lease(&w, NULL, l);
	fputc('\n', stdout);
}

static void state_of(const pgc_lease_info *l, char *buf, size_t n)
{
	if (strcmp(l->kind, "lock") == 0)
		snprintf(buf, n, "lock token");
	else if (l->expires_at_us == 0)
		snprintf(buf, n, "released");
	else {
		char d[32];
		bool left = l->held;
		diag_fmt_dur((double)(left ? l->expires_at_us - l->db_now_us : l->db_now_us - l->expires_at_us) / 1e6,
		             d, sizeof d);
		snprintf(buf, n, left ? "held, %s left" : "expired %s ago", d);
	}
}

static void print_table(const pgc_lease_info *ls, size_t n)
{
	int w = 4;
	for (size_t i = 0; i < n; i++) {
		int len = (int)strlen(cli_esc(ls[i].name));
		if (len > w)
			w = len;
	}
	if (w > 40)
		w = 40;
	printf("%-*s  %8s  %-20s  %-20s  %s\n", w, "NAME", "TOKEN", "STATE", "GRANTED", "HOLDER");
	for (size_t i = 0; i < n; i++) {
		char st[64], g[CLI_TIME_MAX];
		state_of(&ls[i], st, sizeof st);
		cli_fmt_time_us(ls[i].granted_at_us, g, sizeof g);
		printf("%-*s  %8" PRId64 "  %-20s  %-20s  %s\n", w, cli_esc(ls[i].name), ls[i].token, st,
		       g, cli_esc(ls[i].holder));
	}
}

static int do_show(pgc_conn *conn, const pgc_lease_options *o, const char *name)
{
	pgc_error err = PGC_ERROR_INIT;
	if (name != NULL) {
		pgc_lease_info l;
		int rc = pgc_lease_get(conn, name, o, &l, &err);
		if (rc != PGC_OK)
			return cli_report(&err);
		if (g_cli.json)
			print_json(&l);
		else
			print_table(&l, 1);
		return 0;
	}
	pgc_lease_info *ls = NULL;
	size_t n = 0;
	if (pgc_lease_list(conn, o, &ls, &n, &err) != PGC_OK)
		return cli_report(&err);
	if (g_cli.json) {
		for (size_t i = 0; i < n; i++)
			print_json(&ls[i]);
	} else if (n == 0) {
		if (!g_cli.quiet)
			printf("no leases\n");
	} else {
		print_table(ls, n);
	}
	pgc_free(ls);
	return 0;
}

static int do_release(pgc_conn *conn, const pgc_lease_options *o, const char *name, int64_t token)
{
	pgc_error err = PGC_ERROR_INIT;
	int rc = pgc_lease_release(conn, name, token, o, &err);
	if (rc != PGC_OK)
		return cli_report(&err);
	if (g_cli.json) {
		fputs("{\"name\":", stdout);
		json_str(stdout, name);
		printf(",\"token\":%" PRId64 ",\"released\":true}\n", token);
	} else if (!g_cli.quiet) {
		printf("released \"%s\" (token %" PRId64 ")\n", cli_esc(name), token);
	}
	return 0;
}

int cmd_lease(int argc, char **argv)
{
	enum { O_SCHEMA = 256, O_TOKEN };
	static const struct option longopts[] = {
		{ "schema", required_argument, NULL, O_SCHEMA },
		{ "token", required_argument, NULL, O_TOKEN },
		{ "help", no_argument, NULL, 'h' },
		{ NULL, 0, NULL, 0 },
	};
	const char *schema = PGC_SCHEMA_DEFAULT;
	const char *token_text = NULL;
	int ch;
	opterr = 0;
	while ((ch = getopt_long(argc, argv, ":h", longopts, NULL)) != -1) {
		switch (ch) {
		case O_SCHEMA:
			schema = optarg;
			break;
		case O_TOKEN:
			token_text = optarg;
			break;
		case 'h':
			usage(stdout);
			return 0;
		default:
			return cli_getopt_error("lease", ch, argv);
		}
	}
	if (optind >= argc)
		return cli_usage_error("lease", "missing subcommand (show or release)");
	const char *sub = argv[optind++];
	if (*schema == '\0')
		return cli_usage_error("lease", "--schema must not be empty");
	const char *name = NULL;
	int64_t token = 0;
	if (strcmp(sub, "show") == 0) {
		if (token_text != NULL)
			return cli_usage_error("lease", "--token is only for release");
		if (optind < argc)
			name = argv[optind++];
		if (optind < argc)
			return cli_usage_error("lease", "unexpected argument \"%s\"", argv[optind]);
		if (name != NULL && *name == '\0')
			return cli_usage_error("lease", "lease name must not be empty");
	} else if (strcmp(sub, "release") == 0) {
		if (optind >= argc)
			return cli_usage_error("lease", "missing lease name to release");
		name = argv[optind++];
		if (optind < argc)
			return cli_usage_error("lease", "unexpected argument \"%s\"", argv[optind]);
		if (*name == '\0')
			return cli_usage_error("lease", "lease name must not be empty");
		long long t;
		if (token_text == NULL)
			return cli_usage_error("lease", "release needs --token T (see pgcoord lease show)");
		if (!cli_parse_int(token_text, 1, INT64_MAX, &t))
			return cli_usage_error("lease", "--token must be a positive integer, got \"%s\"", token_text);
		token = t;
	} else {
		return cli_usage_error("lease", "unknown subcommand \"%s\" (show or release)", sub);
	}
	if (strlen(name ? name : "") > PGC_LEASE_NAME_MAX)
		return cli_usage_error("lease", "lease name is longer than %d bytes", PGC_LEASE_NAME_MAX);
	pgc_error nerr;
	if (name != NULL && pgc_name_check("lease name", name, PGC_LEASE_NAME_MAX, &nerr) != PGC_OK)
		return cli_usage_error("lease", "%s", nerr.message);

	pgc_conn *conn;
	int rc = cli_connect("lease", &conn);
	if (rc != 0)
		return rc;
	pgc_lease_options o = PGC_LEASE_OPTIONS_INIT;
	o.schema = schema;
	if (strcmp(sub, "show") == 0)
		rc = do_show(conn, &o, name);
	else
		rc = do_release(conn, &o, name, token);
	pgc_conn_close(conn);
	return rc;
}

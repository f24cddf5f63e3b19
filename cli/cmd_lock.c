/* cmd_lock.c - pgcoord lock: who holds an advisory lock (status), and a name's key (key) */
#include <getopt.h>
#include <string.h>

#include "cli.h"

static void usage(FILE *f)
{
	fputs("Usage: pgcoord [-d DSN] [--json] lock status [--schema S] NAME | --key N|A,B\n"
	      "       pgcoord [--json] lock key NAME | --key N|A,B\n"
	      "\n"
	      "status  shows the sessions that hold or wait for the lock: pid, mode,\n"
	      "        holding or waiting and since when (taken, as pgcoord run records it,\n"
	      "        or asked for), the session's state, application_name and client\n"
	      "        address. Exits 0 when nobody holds or waits for it, 1 when somebody\n"
	      "        does.\n"
	      "key     prints the lock's key as every pgcoord command shows it (a bigint, or\n"
	      "        A,B for a pair) without connecting; with --json also its name and\n"
	      "        its pg_locks columns (classid, objid, objsubid).\n"
	      "\n"
	      "Options:\n"
	      "  -k, --key=N|A,B    a numeric key instead of NAME (status shows the name\n"
	      "                     recorded for it in the registry, if any)\n"
	      "      --schema=NAME  schema of the name registry (default pgcoord)\n"
	      "  -h, --help         show this help and exit\n"
	      "\n"
	      "A NAME is hashed to a bigint key with XXH64 (seed 0), as pgcoord run does.\n", f);
}

static void json_key(FILE *f, const pgc_key *k)
{
	char num[PGC_KEY_FORMAT_MAX];
	uint32_t classid = 0, objid = 0;
	int sub = 0;
	pgc_key_format(k, num, sizeof num);
	if (pgc_key_to_pg_locks(k, &classid, &objid, &sub) != PGC_OK)
		sub = 0;
	fputs("\"name\":", f);
	json_str(f, k->name[0] ? k->name : NULL);
	fputs(",\"key\":", f);
	json_str(f, num);
	fprintf(f, ",\"key_space\":\"%s\",\"classid\":%u,\"objid\":%u,\"objsubid\":%d",
	        pgc_key_space_name(k->kind), classid, objid, sub);
}

static int cmd_key(const pgc_key *k)
{
	if (g_cli.json) {
		fputc('{', stdout);
		json_key(stdout, k);
		fputs("}\n", stdout);
	} else {
		char num[PGC_KEY_FORMAT_MAX];
		pgc_key_format(k, num, sizeof num);
		printf("%s\n", num);
	}
	return 0;
}

static const char *nz(const char *s)
{
	return s && *s ? s : NULL;
}

static int cmd_status(pgc_key *k, const char *schema)
{
	pgc_conn *conn;
	int rc = cli_connect("lock", &conn);
	if (rc != 0)
		return rc;
	pgc_lock_holder *h = NULL;
	size_t n = 0;
	pgc_error err;
	/* A numeric key may have a name in the registry: show it. */
	if (k->name[0] == '\0' && pgc_key_lookup_name(conn, schema, k, &err) != PGC_OK) {
		rc = cli_report(&err);
		pgc_conn_close(conn);
		return rc;
	}
	if (pgc_lock_holders_recorded(conn, k, schema, &h, &n, &err) != PGC_OK) {
		rc = cli_report(&err);
		pgc_conn_close(conn);
		return rc;
	}
	size_t held = 0;
	for (size_t i = 0; i < n; i++)
		held += h[i].granted;
	const char *state = held ? "held" : n ? "waited for" : "free";
	if (g_cli.json) {
		fputc('{', stdout);
		json_key(stdout, k);
		fputs(",\"state\":", stdout);
		json_str(stdout, held ? "held" : n ? "waiting" : "free");
		fputs(",\"sessions\":[", stdout);
		for (size_t i = 0; i < n; i++) {
			printf("%s{\"pid\":%d,\"mode\":\"%s\",\"granted\":%s,\"application_name\":", i ? "," : "",
			       h[i].pid, h[i].shared ? "shared" : "exclusive", h[i].granted ? "true" : "false");
			json_str(stdout, h[i].application_name);
			fputs(",\"client_addr\":", stdout);
			json_str(stdout, nz(h[i].client_addr));
			fputs(",\"state\":", stdout);
			json_str(stdout, nz(h[i].state));
			fputs(",\"state_change\":", stdout);
			json_str(stdout, nz(h[i].state_change));
			fputs(",\"acquired_at\":", stdout);
			json_str(stdout, nz(h[i].acquired_at));
			fputs(",\"wait_start\":", stdout);
			json_str(stdout, nz(h[i].wait_start));
			fputs(",\"backend_start\":", stdout);
			json_str(stdout, nz(h[i].backend_start));
			fputc('}', stdout);
		}
		fputs("]}\n", stdout);
	} else {
		char d[PGC_KEY_NAME_MAX + 64];
		pgc_key_describe(k, d, sizeof d);
		printf("lock %s: %s\n", cli_esc(d), state);
		if (n > 0)
			printf("  %-8s %-9s %-5s %-20s %-36s %-20s %s\n", "PID", "MODE", "", "SINCE",
			       "SESSION STATE", "APPLICATION", "CLIENT");
		for (size_t i = 0; i < n; i++) {
			/* SINCE: when the lock was taken (holders) or asked for (waiters); the session's
			 * state changes with every heartbeat, so it has a column of its own. */
			char since[CLI_TIME_MAX], t[CLI_TIME_MAX], st[80];
			cli_fmt_time(h[i].granted ? h[i].acquired_at : h[i].wait_start, since, sizeof since);
			if (h[i].state[0])
				snprintf(st, sizeof st, "%s since %s", h[i].state,
				         cli_fmt_time(h[i].state_change, t, sizeof t));
			else
				snprintf(st, sizeof st, "-");
			printf("  %-8d %-9s %-5s %-20s %-36s %-20s %s\n", h[i].pid,
			       h[i].shared ? "shared" : "exclusive", h[i].granted ? "holds" : "waits", since, st,
			       h[i].application_name[0] ? cli_esc(h[i].application_name) : "-",
			       h[i].client_addr[0] ? h[i].client_addr : "local");
		}
	}
	pgc_free(h);
	pgc_conn_close(conn);
	return n > 0 ? EXIT_CONFLICT : 0;
}

int cmd_lock(int argc, char **argv)
{
	static const struct option longopts[] = {
		{ "key", required_argument, NULL, 'k' },
		{ "schema", required_argument, NULL, 's' },
		{ "help", no_argument, NULL, 'h' },
		{ NULL, 0, NULL, 0 },
	};
	const char *key_text = NULL, *schema = PGC_SCHEMA_DEFAULT;
	int ch;
	opterr = 0;
	while ((ch = getopt_long(argc, argv, ":k:h", longopts, NULL)) != -1) {
		switch (ch) {
		case 'k':
			key_text = optarg;
			break;
		case 's':
			schema = optarg;
			if (*schema == '\0')
				return cli_usage_error("lock", "--schema must not be empty");
			break;
		case 'h':
			usage(stdout);
			return 0;
		default:
			return cli_getopt_error("lock", ch, argv);
		}
	}
	if (optind >= argc)
		return cli_usage_error("lock", "missing subcommand (status or key)");
	const char *sub = argv[optind++];
	bool status = strcmp(sub, "status") == 0;
	if (!status && strcmp(sub, "key") != 0)
		return cli_usage_error("lock", "unknown subcommand \"%s\" (status or key)", sub);
	const char *name = optind < argc ? argv[optind++] : NULL;
	if (optind < argc)
		return cli_usage_error("lock", "unexpected argument \"%s\"", argv[optind]);
	if (name != NULL && key_text != NULL)
		return cli_usage_error("lock", "give a lock NAME or --key, not both");
	if (name == NULL && key_text == NULL)
		return cli_usage_error("lock", "missing lock NAME (or --key N|A,B)");
	pgc_key k;
	pgc_error err;
	int rc = name ? pgc_key_from_name(name, &k, &err) : pgc_key_parse(key_text, &k, &err);
	if (rc != PGC_OK)
		return cli_usage_error("lock", "%s", err.message);
	return status ? cmd_status(&k, schema) : cmd_key(&k);
}

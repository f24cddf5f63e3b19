/* cmd_locks.c - pgcoord locks: the lock list, decoded */
#include <getopt.h>
#include <stdlib.h>
#include <string.h>

#include "diag_out.h"

static void usage(FILE *f)
{
	fputs("Usage: pgcoord [-d DSN] locks [OPTIONS]\n"
	      "\n"
	      "Lists the locks sessions hold or wait for, decoded: relation names, rows,\n"
	      "transaction ids, and advisory keys as the bigint and the (int4,int4) pair,\n"
	      "with the name registered for the key in <schema>.lock_names when there is one.\n"
	      "Each transaction's lock on its own id is left out unless someone waits for it\n"
	      "(see --all).\n"
	      "\n"
	      "Options:\n"
	      "  -p, --pid=PID        only the locks of this backend\n"
	      "      --advisory       only advisory locks\n"
	      "      --waiting        only locks that are waited for, not yet granted\n"
	      "      --all            also each transaction's lock on its own id\n"
	      "  -a, --all-databases  every database, not only the current one\n"
	      "      --schema=NAME    schema of the lock_names registry (default: pgcoord)\n"
	      "      --no-names       do not look advisory keys up in the registry\n"
	      "      --json           print one JSON object\n"
	      "  -h, --help           show this help and exit\n", f);
}

/* A granted lock a transaction holds on its own id, which nobody waits for: pure noise. waits
 * holds the ungranted transaction-id and virtual-id locks (few: one per waiting session). */
static bool own_id_lock(const pgc_diag_lock *const *waits, size_t nwaits, const pgc_diag_lock *l)
{
	if (!l->granted || l->locktype == NULL)
		return false;
	bool vxid = strcmp(l->locktype, "virtualxid") == 0;
	bool xid = strcmp(l->locktype, "transactionid") == 0;
	if (!vxid && !xid)
		return false;
	for (size_t i = 0; i < nwaits; i++) {
		const pgc_diag_lock *w = waits[i];
		if (strcmp(w->locktype, l->locktype) != 0)
			continue;
		const char *a = xid ? w->transactionid : w->virtualxid;
		const char *b = xid ? l->transactionid : l->virtualxid;
		if (a && b && strcmp(a, b) == 0)
			return false;
	}
	return true;
}

int cmd_locks(int argc, char **argv)
{
	enum { OPT_SCHEMA = 256, OPT_NO_NAMES, OPT_JSON, OPT_ADVISORY, OPT_WAITING, OPT_ALL };
	static const struct option longopts[] = {
		{ "pid", required_argument, NULL, 'p' },
		{ "advisory", no_argument, NULL, OPT_ADVISORY },
		{ "waiting", no_argument, NULL, OPT_WAITING },
		{ "all", no_argument, NULL, OPT_ALL },
		{ "all-databases", no_argument, NULL, 'a' },
		{ "schema", required_argument, NULL, OPT_SCHEMA },
		{ "no-names", no_argument, NULL, OPT_NO_NAMES },
		{ "json", no_argument, NULL, OPT_JSON },
		{ "help", no_argument, NULL, 'h' },
		{ NULL, 0, NULL, 0 },
	};
	pgc_diag_options o = PGC_DIAG_OPTIONS_INIT;
	bool json = g_cli.json, advisory = false, waiting = false, all = false;
	long long pid = 0;
	int ch;
	opterr = 0;
	while ((ch = getopt_long(argc, argv, ":p:ah", longopts, NULL)) != -1) {
		switch (ch) {
		case 'p':
			if (!cli_parse_int(optarg, 1, 2147483647, &pid))
				return cli_usage_error("locks", "invalid pid \"%s\": expected a positive number", optarg);
			break;
		case OPT_ADVISORY: advisory = true; break;
		case OPT_WAITING: waiting = true; break;
		case OPT_ALL: all = true; break;
		case 'a': o.all_databases = true; break;
		case OPT_SCHEMA:
			if (*optarg == '\0')
				return cli_usage_error("locks", "--schema must not be empty");
			o.schema = optarg;
			break;
		case OPT_NO_NAMES: o.names = false; break;
		case OPT_JSON: json = true; break;
		case 'h':
			usage(stdout);
			return 0;
		default:
			return cli_getopt_error("locks", ch, argv);
		}
	}
	if (optind < argc)
		return cli_usage_error("locks", "unexpected argument \"%s\"", argv[optind]);

	pgc_conn *conn = NULL;
	int rc = cli_connect("locks", &conn);
	if (rc != 0)
		return rc;
	if (pid > 0 && pid == pgc_conn_backend_pid(conn))
		o.include_self = true;
	pgc_diag_snapshot *snap = NULL;
	rc = diag_take(conn, &o, &snap);
	pgc_conn_close(conn);
	if (rc != 0)
		return rc;
	if (pid > 0 && pgc_diag_session_find(snap, (int)pid) == NULL) {
		/* A pid outside this database's sessions may still be a backend elsewhere. */
		cli_errorf("no session with pid %lld%s", pid, o.all_databases ? "" : " in this database (try --all-databases)");
		pgc_diag_snapshot_free(snap);
		return EXIT_CONFLICT;
	}

	const pgc_diag_lock **waits = malloc((snap->nlocks ? snap->nlocks : 1) * sizeof *waits);
	if (waits == NULL) {
		cli_errorf("out of memory");
		pgc_diag_snapshot_free(snap);
		return EXIT_SOFTWARE;
	}
	size_t nwaits = 0;
	for (size_t i = 0; i < snap->nlocks; i++) {
		const pgc_diag_lock *l = &snap->locks[i];
		if (!l->granted && l->locktype && (strcmp(l->locktype, "transactionid") == 0 ||
		                                   strcmp(l->locktype, "virtualxid") == 0))
			waits[nwaits++] = l;
	}
	size_t shown = 0, nwait = 0;
	if (json) {
		fputs("{\"taken_at\":", stdout);
		json_str(stdout, snap->taken_at);
		fputs(",\"database\":", stdout);
		json_str(stdout, snap->database);
		printf(",\"all_databases\":%s,\"names_available\":%s,\"locks\":[",
		       snap->all_databases ? "true" : "false", snap->names_available ? "true" : "false");
	} else if (!g_cli.quiet) {
		printf("%-8s %-8s %-13s %-24s %-8s %-8s %s\n", "PID", "STATE", "TYPE", "MODE", "GRANTED",
		       "WAITED", "TARGET");
	}
	for (size_t i = 0; i < snap->nlocks; i++) {
		const pgc_diag_lock *l = &snap->locks[i];
		if (pid > 0 && l->pid != pid)
			continue;
		if (advisory && (l->locktype == NULL || strcmp(l->locktype, "advisory") != 0))
			continue;
		if (waiting && l->granted)
			continue;
		if (!all && own_id_lock(waits, nwaits, l))
			continue;
		if (json) {
			if (shown)
				fputc(',', stdout);
			diag_json_lock(stdout, l);
		} else if (!g_cli.quiet) {
			const pgc_diag_session *s = pgc_diag_session_find(snap, l->pid);
			const char *st = s && s->state ? s->state : l->pid == 0 ? "prepared" : "-";
			if (strncmp(st, "idle in transaction", 19) == 0)
				st = strcmp(st, "idle in transaction") == 0 ? "idle-tx" : "aborted";
			char w[32];
			diag_fmt_dur(l->waited_s, w, sizeof w);
			printf("%-8d %-8s %-13s %-24s %-8s %-8s %s", l->pid, st, diag_or_dash(l->locktype),
			       diag_or_dash(l->mode), l->granted ? "yes" : "WAITING", w, diag_or_dash(l->target));
			if (snap->all_databases && l->database)
				printf("  [db %s]", l->database);
			fputc('\n', stdout);
		}
		shown++;
		nwait += !l->granted;
	}
	if (json)
		fputs("]}\n", stdout);
	else if (!g_cli.quiet)
		printf("%zu lock%s, %zu waiting\n", shown, shown == 1 ? "" : "s", nwait);
	free(waits);
	pgc_diag_snapshot_free(snap);
	return 0;
}

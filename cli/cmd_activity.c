/* cmd_activity.c - pgcoord activity: sessions by transaction age */
#include <getopt.h>
#include <string.h>

#include "diag_out.h"

static void usage(FILE *f)
{
	fputs("Usage: pgcoord [-d DSN] activity [OPTIONS]\n"
	      "\n"
	      "Lists sessions by transaction age, oldest first (sessions without an open\n"
	      "transaction last), with their state, how long they have been in it, what they\n"
	      "wait for, how many sessions they block and their query. The transaction in\n"
	      "which pgcoord run holds its lock through a transaction-mode pooler shows as\n"
	      "\"holding\" with the lock it holds.\n"
	      "\n"
	      "Options:\n"
	      "  -i, --idle-in-tx       only sessions idle in a transaction (also aborted ones;\n"
	      "                         not pgcoord's own lock holders, idle by design)\n"
	      "  -o, --older-than=D     only transactions open for at least D (\"30s\", \"5m\")\n"
	      "  -a, --all-databases    every database, not only the current one\n"
	      "      --json             print one JSON object\n"
	      "  -h, --help             show this help and exit\n", f);
}

int cmd_activity(int argc, char **argv)
{
	enum { OPT_JSON = 256 };
	static const struct option longopts[] = {
		{ "idle-in-tx", no_argument, NULL, 'i' },
		{ "older-than", required_argument, NULL, 'o' },
		{ "all-databases", no_argument, NULL, 'a' },
		{ "json", no_argument, NULL, OPT_JSON },
		{ "help", no_argument, NULL, 'h' },
		{ NULL, 0, NULL, 0 },
	};
	pgc_diag_options o = PGC_DIAG_OPTIONS_INIT;
	bool json = g_cli.json, idle_tx = false;
	int64_t older_ms = -1;
	int ch;
	opterr = 0;
	while ((ch = getopt_long(argc, argv, ":io:ah", longopts, NULL)) != -1) {
		switch (ch) {
		case 'i': idle_tx = true; break;
		case 'o': {
			pgc_error err;
			if (pgc_duration_parse(optarg, &older_ms, &err) != PGC_OK)
				return cli_usage_error("activity", "--older-than: %s", err.message);
			break;
		}
		case 'a': o.all_databases = true; break;
		case OPT_JSON: json = g_cli.json = true; break;
		case 'h':
			usage(stdout);
			return 0;
		default:
			return cli_getopt_error("activity", ch, argv);
		}
	}
	if (optind < argc)
		return cli_usage_error("activity", "unexpected argument \"%s\"", argv[optind]);

	pgc_conn *conn = NULL;
	int rc = cli_connect("activity", &conn);
	if (rc != 0)
		return rc;
	pgc_diag_snapshot *snap = NULL;
	rc = diag_take(conn, &o, &snap);
	pgc_conn_close(conn);
	if (rc != 0)
		return rc;

	bool tty = diag_stdout_tty();
	int width = diag_term_width();
	size_t shown = 0;
	if (json) {
		fputs("{\"taken_at\":", stdout);
		json_str(stdout, snap->taken_at);
		fputs(",\"database\":", stdout);
		json_str(stdout, snap->database);
		printf(",\"all_databases\":%s,\"sessions\":[", snap->all_databases ? "true" : "false");
	} else if (!g_cli.quiet) {
		printf("%-8s %-10s %-18s %-21s %-8s %-8s %-8s %-22s %-6s %s\n", "PID", "USER",
		       "APPLICATION", "CLIENT", "STATE", "XACT", "FOR", "WAIT", "BLOCKS", "QUERY");
	}
	for (size_t i = 0; i < snap->nsessions; i++) {
		const pgc_diag_session *s = &snap->sessions[i];
		if (!s->known)
			continue;
		/* pgcoord's own lock holders are idle in a transaction by design: not stuck. */
		if (idle_tx && (s->state == NULL || strncmp(s->state, "idle in transaction", 19) != 0 ||
		                s->pgcoord_holder))
			continue;
		if (older_ms >= 0 && (s->xact_age_s < 0 || s->xact_age_s * 1000.0 < (double)older_ms))
			continue;
		if (json) {
			if (shown)
				fputc(',', stdout);
			diag_json_session(stdout, snap, s, false);
		} else if (!g_cli.quiet) {
			char xact[32], st[32], wait[64], q[8192];
			diag_fmt_dur(s->xact_age_s, xact, sizeof xact);
			diag_fmt_dur(s->state_age_s, st, sizeof st);
			if (s->wait_event_type)
				snprintf(wait, sizeof wait, "%s:%s", s->wait_event_type, diag_or_dash(s->wait_event));
			else
				snprintf(wait, sizeof wait, "-");
			const char *state = diag_or_dash(s->state);
			if (s->pgcoord_holder)
				state = "holding";
			else if (strcmp(state, "idle in transaction") == 0)
				state = "idle-tx";
			else if (strcmp(state, "idle in transaction (aborted)") == 0)
				state = "aborted";
			if (s->pgcoord_holder) {
				char lock[PGC_KEY_NAME_MAX + 64];
				diag_holder_lock(s, lock, sizeof lock);
				snprintf(q, sizeof q, "pgcoord lock holder: pgcoord run holding lock %s, by design",
				         cli_esc(lock));
			} else {
				diag_session_query(s, tty ? (size_t)(width > 136 ? width - 116 : 20) : 0, q, sizeof q);
			}
			printf("%-8d %-10.10s %-18.18s %-21.21s %-8s %-8s %-8s %-22.22s %-6zu ", s->pid,
			       diag_or_dash(s->user), diag_or_dash(s->application), diag_or_dash(s->client),
			       state, xact, st, wait, s->blocks_total);
			if (snap->all_databases)
				printf("[db %s] ", diag_or_dash(s->database));
			printf("%s\n", *q ? q : "-");
		}
		shown++;
	}
	if (json)
		fputs("]}\n", stdout);
	else if (!g_cli.quiet)
		printf("%zu session%s\n", shown, shown == 1 ? "" : "s");
	pgc_diag_snapshot_free(snap);
	return 0;
}

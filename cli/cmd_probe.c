/* cmd_probe.c - pgcoord probe: which locks a statement takes, found by running it inside
 * BEGIN ... ROLLBACK */
#include <getopt.h>
#include <string.h>

#include "diag_out.h"

static const char sequence_note[] =
	"sequence values the statement drew (nextval, serial and identity columns) stay used "
	"although it was rolled back";

static void usage(FILE *f)
{
	fputs("Usage: pgcoord [-d DSN] probe [OPTIONS] -c SQL\n"
	      "\n"
	      "Runs one statement inside BEGIN ... ROLLBACK with a short lock_timeout, reads\n"
	      "the locks its backend holds before rolling back, and prints each relation-level\n"
	      "lock with its mode and what that mode blocks, in words. Tells you before a\n"
	      "deploy what a migration will block. Nothing it does survives, except what\n"
	      "ignores transactions: sequence values it draws stay used. A SELECT that locks\n"
	      "rows it only returns gets advice on a weaker locking clause, or none.\n"
	      "\n"
	      "Options:\n"
	      "  -c, --command=SQL          the statement to probe (exactly one)\n"
	      "  -l, --lock-timeout=D       give up waiting for a lock after D (default: 1s)\n"
	      "  -t, --statement-timeout=D  stop the statement after D (default: 10s)\n"
	      "      --json                 print one JSON object\n"
	      "  -h, --help                 show this help and exit\n"
	      "\n"
	      "Exit status: 0 it ran, 1 it waited for a lock past the lock timeout or ran\n"
	      "past the statement timeout, 64 usage (also: a statement that cannot run in a\n"
	      "transaction block, such as VACUUM), 65 the statement failed, 69 database\n"
	      "unavailable.\n", f);
}

static const char *outcome_name(pgc_probe_outcome o)
{
	switch (o) {
	case PGC_PROBE_RAN: return "ran";
	case PGC_PROBE_LOCK_TIMEOUT: return "lock_timeout";
	case PGC_PROBE_STATEMENT_TIMEOUT: return "statement_timeout";
	default: return "failed";
	}
}

/* "public.orders" for a table, "index public.orders_pkey" for anything else. */
static void rel_words(const pgc_diag_lock *l, char *buf, size_t size)
{
	if (l->relkind == NULL || strcmp(l->relkind, "table") == 0 ||
	    strcmp(l->relkind, "partitioned table") == 0)
		snprintf(buf, size, "%s", diag_or_dash(l->relation));
	else
		snprintf(buf, size, "%s %s", l->relkind, diag_or_dash(l->relation));
}

static void print_locks(const pgc_probe_result *res)
{
	for (size_t i = 0; i < res->nlocks; i++) {
		const pgc_diag_lock *l = &res->locks[i];
		char what[512], words[1024];
		rel_words(l, what, sizeof what);
		if (pgc_table_lock_blocks_on(l->table_mode, what, words, sizeof words) < 0)
			snprintf(words, sizeof words, "(unknown mode)");
		printf("  %s on %s: %s\n", diag_or_dash(l->mode), what, words);
		/* The modes it conflicts with, straight from the conflict matrix. */
		if (l->table_mode != 0) {
			printf("    conflicts with:");
			const char *sep = " ";
			for (int m = 1; m <= PGC_TABLE_LOCK_COUNT; m++)
				if (pgc_table_lock_conflicts(l->table_mode, (pgc_table_lock)m)) {
					printf("%s%s", sep, pgc_table_lock_sql((pgc_table_lock)m));
					sep = ", ";
				}
			putchar('\n');
		}
	}
	if (res->nlocks == 0)
		printf("  no lock on a user relation\n");
	if (res->ncatalog_locks > 0)
		printf("  (and %zu lock%s on system catalogs)\n", res->ncatalog_locks,
		       res->ncatalog_locks == 1 ? "" : "s");
}

static void json_locks(const pgc_probe_result *res)
{
	fputs("[", stdout);
	for (size_t i = 0; i < res->nlocks; i++) {
		const pgc_diag_lock *l = &res->locks[i];
		char what[512], words[1024] = "";
		rel_words(l, what, sizeof what);
		if (pgc_table_lock_blocks_on(l->table_mode, what, words, sizeof words) < 0)
			words[0] = '\0';
		printf("%s{\"relation\":", i ? "," : "");
		json_str(stdout, l->relation);
		fputs(",\"relkind\":", stdout);
		json_str(stdout, l->relkind);
		fputs(",\"mode\":", stdout);
		json_str(stdout, l->mode);
		fputs(",\"blocks\":", stdout);
		json_str(stdout, words[0] ? words : NULL);
		fputs(",\"conflicts_with\":[", stdout);
		const char *sep = "";
		for (int m = 1; l->table_mode != 0 && m <= PGC_TABLE_LOCK_COUNT; m++)
			if (pgc_table_lock_conflicts(l->table_mode, (pgc_table_lock)m)) {
				printf("%s\"%s\"", sep, pgc_table_lock_name((pgc_table_lock)m));
				sep = ",";
			}
		fputs("]}", stdout);
	}
	fputs("]", stdout);
}

int cmd_probe(int argc, char **argv)
{
	enum { OPT_JSON = 256 };
	static const struct option longopts[] = {
		{ "command", required_argument, NULL, 'c' },
		{ "lock-timeout", required_argument, NULL, 'l' },
		{ "statement-timeout", required_argument, NULL, 't' },
		{ "json", no_argument, NULL, OPT_JSON },
		{ "help", no_argument, NULL, 'h' },
		{ NULL, 0, NULL, 0 },
	};
	pgc_probe_options po = PGC_PROBE_OPTIONS_INIT;
	const char *sql = NULL;
	bool json = g_cli.json;
	int ch;
	opterr = 0;
	while ((ch = getopt_long(argc, argv, ":c:l:t:h", longopts, NULL)) != -1) {
		switch (ch) {
		case 'c':
			sql = optarg;
			break;
		case 'l':
		case 't': {
			pgc_error err;
			int64_t ms;
			const char *name = ch == 'l' ? "--lock-timeout" : "--statement-timeout";
			if (pgc_duration_parse(optarg, &ms, &err) != PGC_OK)
				return cli_usage_error("probe", "%s: %s", name, err.message);
			if (ms < 1 || ms > 86400000)
				return cli_usage_error("probe", "%s must be between 1ms and 24h", name);
			if (ch == 'l')
				po.lock_timeout_ms = ms;
			else
				po.statement_timeout_ms = ms;
			break;
		}
		case OPT_JSON:
			json = true;
			break;
		case 'h':
			usage(stdout);
			return 0;
		default:
			return cli_getopt_error("probe", ch, argv);
		}
	}
	if (optind < argc)
		return cli_usage_error("probe", "unexpected argument \"%s\" (give the statement with -c)",
		                       argv[optind]);
	if (sql == NULL)
		return cli_usage_error("probe", "no statement given: use -c SQL");
	const char *why = pgc_probe_refusal(sql);
	if (why != NULL)
		return cli_usage_error("probe", "cannot probe: %s", why);

	pgc_conn *conn = NULL;
	int rc = cli_connect("probe", &conn);
	if (rc != 0)
		return rc;
	pgc_probe_result *res = NULL;
	pgc_error err = PGC_ERROR_INIT;
	rc = pgc_probe(conn, sql, &po, &res, &err);
	if (rc != PGC_OK) {
		pgc_conn_close(conn);
		if (rc == PGC_EUSAGE)
			return cli_usage_error("probe", "%s", err.message);
		return cli_report(&err);
	}

	char el[32], lt[32], stt[32];
	diag_fmt_dur(res->elapsed_s, el, sizeof el);
	diag_fmt_dur(po.lock_timeout_ms / 1000.0, lt, sizeof lt);
	diag_fmt_dur(po.statement_timeout_ms / 1000.0, stt, sizeof stt);
	const pgc_diag_session *waiter = res->wait_snapshot
	        ? pgc_diag_session_find(res->wait_snapshot, res->probe_pid) : NULL;
	if (json) {
		fputs("{\"statement\":", stdout);
		json_str(stdout, sql);
		printf(",\"outcome\":\"%s\",\"command_tag\":", outcome_name(res->outcome));
		json_str(stdout, res->outcome == PGC_PROBE_RAN ? res->command_tag : NULL);
		printf(",\"elapsed_s\":%.3f,\"rolled_back\":true,\"observed\":%s,\"locks\":", res->elapsed_s,
		       res->observed ? "true" : "false");
		json_locks(res);
		printf(",\"catalog_locks\":%zu,\"rows_locked\":%ld,\"waited_for\":", res->ncatalog_locks,
		       res->rows_locked);
		if (res->waited_for)
			diag_json_lock(stdout, res->waited_for);
		else
			fputs("null", stdout);
		fputs(",\"blocked_by\":[", stdout);
		for (size_t i = 0; waiter && i < waiter->nblocked_by; i++) {
			const pgc_diag_session *b = pgc_diag_session_find(res->wait_snapshot, waiter->blocked_by[i]);
			if (i)
				fputc(',', stdout);
			if (b)
				diag_json_session(stdout, res->wait_snapshot, b, false);
			else
				printf("{\"pid\":%d}", waiter->blocked_by[i]);
		}
		fputs("],\"error\":", stdout);
		if (res->outcome != PGC_PROBE_RAN) {
			fputs("{\"sqlstate\":", stdout);
			json_str(stdout, res->error.sqlstate);
			fputs(",\"message\":", stdout);
			json_str(stdout, res->error.message);
			fputc('}', stdout);
		} else {
			fputs("null", stdout);
		}
		fputs(",\"advice\":", stdout);
		json_str(stdout, res->row_lock_advice[0] ? res->row_lock_advice : NULL);
		fputs(",\"notes\":[", stdout);
		json_str(stdout, sequence_note);
		fputs("]}\n", stdout);
	} else if (!g_cli.quiet) {
		char q[4096];
		diag_fmt_query(sql, diag_stdout_tty() ? (size_t)diag_term_width() - 8 : 0, q, sizeof q);
		printf("probe: %s\n", q);
		switch (res->outcome) {
		case PGC_PROBE_RAN:
			printf("ran in %s (%s), then rolled back; the locks it held at the end:\n", el,
			       res->command_tag);
			break;
		case PGC_PROBE_LOCK_TIMEOUT:
			printf("could not get a lock within %s (lock_timeout), so it would wait there: %s\n",
			       lt, res->error.message);
			break;
		case PGC_PROBE_STATEMENT_TIMEOUT:
			printf("still running after %s (statement_timeout); stopped and rolled back\n", stt);
			break;
		default:
			break;
		}
		if (res->waited_for != NULL) {
			printf("it waited for %s on %s, held up by:\n", diag_or_dash(res->waited_for->mode),
			       diag_or_dash(res->waited_for->target));
			for (size_t i = 0; waiter && i < waiter->nblocked_by; i++) {
				const pgc_diag_session *b = pgc_diag_session_find(res->wait_snapshot,
				                                                  waiter->blocked_by[i]);
				if (b == NULL || !b->known) {
					printf("  pid %d\n", waiter->blocked_by[i]);
					continue;
				}
				char x[32];
				diag_fmt_dur(b->xact_age_s, x, sizeof x);
				printf("  pid %d  %s  %s  %s  xact %s\n", b->pid, diag_or_dash(b->user),
				       diag_or_dash(b->application), diag_or_dash(b->state), x);
			}
		} else if (res->outcome == PGC_PROBE_LOCK_TIMEOUT) {
			printf("(the wait was too short to see which lock; raise --lock-timeout to find out)\n");
		}
		if (res->outcome == PGC_PROBE_RAN) {
			print_locks(res);
			if (res->rows_locked > 0)
				printf("  and row locks on the %ld row%s it %s: other writers of %s wait until "
				       "the transaction ends (row locks are kept in the rows, not in pg_locks)\n",
				       res->rows_locked, res->rows_locked == 1 ? "" : "s",
				       strncmp(res->command_tag, "SELECT", 6) == 0 ? "returned" : "changed",
				       res->rows_locked == 1 ? "it" : "them");
			if (res->row_lock_advice[0] != '\0')
				printf("advice: %s\n", res->row_lock_advice);
		} else if (res->observed) {
			printf("locks it had taken by then:\n");
			print_locks(res);
		}
		if (res->outcome == PGC_PROBE_RAN || res->outcome == PGC_PROBE_LOCK_TIMEOUT ||
		    res->outcome == PGC_PROBE_STATEMENT_TIMEOUT)
			printf("note: %s\n", sequence_note);
	}
	if (res->outcome == PGC_PROBE_FAILED) {
		/* Say that nothing was changed in the same line as the server's reason. */
		pgc_error e = res->error;
		snprintf(e.message, sizeof e.message, "the statement failed (rolled back, nothing changed): %s",
		         res->error.message);
		rc = cli_report(&e);
	} else {
		rc = res->outcome == PGC_PROBE_RAN ? 0 : EXIT_CONFLICT;
	}
	pgc_probe_result_free(res);
	pgc_conn_close(conn);
	return rc;
}

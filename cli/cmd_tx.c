/* cmd_tx.c - pgcoord tx: run a SQL script as one transaction, retried as a whole on deadlocks
 * and serialization failures
 *
 * The script goes to the server as one simple-protocol query inside the runner's BEGIN
 * (pgc_exec_ex: the command tags are collected, COPY TO STDOUT data is dropped, the CLI's
 * signal descriptor cancels it), so its statements share the transaction and a server error
 * position counts from the start of the file. Before anything is sent, the library's SQL
 * lexer (src/util/sqllex.h: comments, quotes, dollar quotes, BEGIN ATOMIC bodies) finds what
 * cannot work inside someone else's transaction: the script's own BEGIN / COMMIT / ROLLBACK,
 * psql meta-commands, and COPY FROM STDIN, which has no data to read; and a LOCK TABLE that
 * names no mode, which takes ACCESS EXCLUSIVE (stopping even plain reads) where the writer
 * most likely meant something weaker, unless --allow-lock-without-mode says it is meant. */
#include <errno.h>
#include <getopt.h>
#include <libpq-fe.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "child.h"
#include "cli.h"
#include "opt.h"
#include "util/sqllex.h"
#include "util/util.h"

static const cli_opt *tx_opts;

static void usage(FILE *f)
{
	fputs("Usage: pgcoord [-d DSN] [--json] tx [OPTIONS] (-f FILE | -c SQL)\n"
	      "\n"
	      "Runs a SQL script as one transaction. When a statement or the COMMIT fails\n"
	      "with a deadlock (40P01) or a serialization failure (40001), the whole script\n"
	      "is rolled back and run again after a pause (capped exponential backoff with\n"
	      "jitter). Other errors are reported as the server gave them. Prints how many\n"
	      "attempts it took.\n"
	      "\n"
	      "Options:\n", f);
	cli_opt_help(f, tx_opts, 29);
	fputs("\n"
	      "The script must not contain BEGIN, COMMIT, ROLLBACK (ROLLBACK TO SAVEPOINT is\n"
	      "fine), psql meta-commands or COPY FROM STDIN. LOCK TABLE must name its mode\n"
	      "(LOCK t IN SHARE MODE): without one it takes ACCESS EXCLUSIVE, which blocks\n"
	      "even plain SELECTs; it is refused (exit 64) unless --allow-lock-without-mode.\n"
	      "Query results are not shown.\n"
	      "\n"
	      "Exit status: 0 committed (or rolled back by --dry-run); 1 retries exhausted\n"
	      "on conflicts, lock or statement timeout; 64 usage; 65 the script is invalid\n"
	      "or the server rejected it (syntax, constraint, data); 69 database unavailable\n"
	      "(also a standby, or retries exhausted on lost sessions), or the session died\n"
	      "after COMMIT was sent (outcome unknown); 70 internal error.\n", f);
}

/* ---- the scanner ---- */

typedef struct scan {
	int statements;     /* non-empty statements */
	size_t bad_at;      /* offset of the refused statement or meta-command */
	char bad[64];       /* what was refused, "" when nothing */
	const char *reason; /* why */
	bool usage;         /* refused for what the options allow (exit 64), not for the script */
} scan;

static const char own_transaction[] =
	"is not allowed: pgcoord tx runs the script in its own transaction";

/* Whether the LOCK statement st of script s names a mode: its words (all of them, not only
 * the ones kept) have IN, a reserved word no table name can be unquoted. */
static bool lock_names_mode(const char *s, const pgc__sqlstmt *st)
{
	pgc__sqllex lx;
	pgc__sqllex_init(&lx, s + st->start, st->end - st->start, true);
	while (pgc__sqllex_next(&lx) != PGC__SQL_END)
		if (lx.tok == PGC__SQL_WORD && pgc__sqllex_word_is(&lx, "IN"))
			return true;
	return false;
}

static bool allow_bare_lock; /* --allow-lock-without-mode */

/* What pgcoord tx cannot run in statement st of script s, into out; false when it can. */
static bool refused(const char *s, const pgc__sqlstmt *st, scan *out)
{
	out->reason = own_transaction;
	if (st->backslash_at != (size_t)-1) {
		size_t i = st->backslash_at, k = i + 1;
		while (s[k] != '\0' && pgc__sql_ident_char((unsigned char)s[k]) && k - i < 20)
			k++;
		snprintf(out->bad, sizeof out->bad, "psql meta-command \\%.*s", (int)(k - i - 1), s + i + 1);
		out->bad_at = i;
		return true;
	}
	out->bad_at = st->start;
	if (st->copy_from_stdin) {
		snprintf(out->bad, sizeof out->bad, "COPY FROM STDIN");
		out->reason = "is not supported by pgcoord tx: it has no data to send";
		return true;
	}
	const char *w0 = st->nwords > 0 ? st->words[0] : "", *w1 = st->nwords > 1 ? st->words[1] : "";
	if (strcmp(w0, "LOCK") == 0 && !allow_bare_lock && !lock_names_mode(s, st)) {
		snprintf(out->bad, sizeof out->bad, "LOCK without IN ... MODE");
		out->reason = "takes ACCESS EXCLUSIVE, which blocks even plain SELECTs of the table until the"
		              " transaction ends: name the mode you need (LOCK t IN SHARE MODE, ...), or pass"
		              " --allow-lock-without-mode if ACCESS EXCLUSIVE is meant";
		out->usage = true;
		return true;
	}
	bool two = strcmp(w0, "START") == 0 || (strcmp(w0, "PREPARE") == 0 && strcmp(w1, "TRANSACTION") == 0);
	if (!two && strcmp(w0, "BEGIN") != 0 && strcmp(w0, "COMMIT") != 0 && strcmp(w0, "END") != 0 &&
	    strcmp(w0, "ABORT") != 0 && !(strcmp(w0, "ROLLBACK") == 0 && strcmp(w1, "TO") != 0))
		return false;
	snprintf(out->bad, sizeof out->bad, "transaction control statement %s%s%s", w0, two ? " " : "",
	         two ? w1 : "");
	return true;
}

/* Counts the statements of s and finds the first one pgcoord tx refuses: the script's own
 * BEGIN / COMMIT / ROLLBACK (ROLLBACK TO SAVEPOINT is fine), psql meta-commands, COPY FROM
 * STDIN. */
static void scan_script(const char *s, size_t len, bool standard_strings, scan *out)
{
	memset(out, 0, sizeof *out);
	pgc__sqllex lx;
	pgc__sqllex_init(&lx, s, len, standard_strings);
	pgc__sqlstmt st;
	while (pgc__sql_next_statement(&lx, &st)) {
		out->statements++;
		if (refused(s, &st, out))
			return;
	}
}

/* ---- positions ---- */

/* Line and column (1-based) of byte offset off; columns count characters when the text is
 * UTF-8. */
static void line_col(const char *s, size_t off, bool utf8, int *line, int *col, size_t *line_start)
{
	*line = 1;
	*col = 1;
	*line_start = 0;
	for (size_t i = 0; i < off && s[i]; i++) {
		if (s[i] == '\n') {
			(*line)++;
			*col = 1;
			*line_start = i + 1;
		} else if (!utf8 || ((unsigned char)s[i] & 0xC0) != 0x80) {
			(*col)++;
		}
	}
}

/* The byte offset of the pos-th character (1-based), as the server counts them. */
static size_t char_offset(const char *s, int pos, bool utf8)
{
	size_t i = 0;
	int chars = 1;
	while (s[i] && chars < pos) {
		i++;
		if (!utf8 || ((unsigned char)s[i] & 0xC0) != 0x80)
			chars++;
	}
	return i;
}

/* "LINE n: text" and a caret under the column, psql style, long lines cut around it. */
static void show_line(const char *s, size_t line_start, size_t off, int line)
{
	size_t end = line_start;
	while (s[end] && s[end] != '\n')
		end++;
	size_t from = line_start, to = end;
	if (off > from + 60)
		from = off - 60;
	if (to > off + 60)
		to = off + 60;
	/* Do not start or stop inside a UTF-8 sequence. */
	while (from > line_start && ((unsigned char)s[from] & 0xC0) == 0x80)
		from--;
	while (to < end && ((unsigned char)s[to] & 0xC0) == 0x80)
		to++;
	char head[32];
	int hl = snprintf(head, sizeof head, "LINE %d: %s", line, from > line_start ? "..." : "");
	fprintf(stderr, "%s%.*s%s\n", head, (int)(to - from), s + from, to < end ? "..." : "");
	for (int k = 0; k < hl; k++)
		fputc(' ', stderr);
	for (size_t k = from; k < off && k < to; k++) {
		if (((unsigned char)s[k] & 0xC0) == 0x80)
			continue;
		fputc(s[k] == '\t' ? '\t' : ' ', stderr);
	}
	fputs("^\n", stderr);
}

/* Refuses a script pgcoord tx cannot run, read with the given standard_conforming_strings:
 * prints where and why, returns EXIT_DATAERR (EXIT_USAGE for what an option allows); 0 when
 * it can run. */
static int check_script(const char *text, size_t len, const char *label, bool standard_strings)
{
	scan sc;
	scan_script(text, len, standard_strings, &sc);
	if (sc.bad[0] != '\0') {
		int line, col;
		size_t ls;
		line_col(text, sc.bad_at, true, &line, &col, &ls);
		cli_errorf("%s:%d:%d: %s %s", label, line, col, sc.bad, sc.reason);
		show_line(text, ls, sc.bad_at, line);
		return sc.usage ? EXIT_USAGE : EXIT_DATAERR;
	}
	if (sc.statements == 0) {
		cli_errorf("%s: the script is empty", label);
		return EXIT_DATAERR;
	}
	return 0;
}

/* ---- running ---- */

typedef struct script_run {
	const char *sql;
	char **tags;
	size_t ntags, cap;
	bool dry_run;
	int cancel_fd;
} script_run;

static void clear_tags(script_run *r)
{
	for (size_t i = 0; i < r->ntags; i++)
		free(r->tags[i]);
	r->ntags = 0;
}

static void add_tag(script_run *r, const char *tag)
{
	if (!pgc__grow((void **)&r->tags, &r->cap, r->ntags + 1, sizeof *r->tags))
		return; /* the list is informational: keep going without it */
	char *copy = strdup(tag);
	if (copy != NULL)
		r->tags[r->ntags++] = copy;
}

/* SIGINT, SIGTERM and SIGHUP (Ctrl-C, timeout(1), a closed terminal) cancel the running
 * statement on the server before pgcoord exits: a backend whose client just vanished would
 * otherwise run the statement to its end, holding its locks. The signals arrive on the CLI's
 * signal descriptor, which is the script's cancel_fd. The first signal is remembered, the
 * retries stop, and the process then ends by that signal. */
static int g_signal;

static int signal_seen(void)
{
	int sig = cli_signal_take();
	if (g_signal == 0 && sig != 0)
		g_signal = sig;
	return g_signal;
}

static int interrupted(pgc_error *err)
{
	pgc_error_clear(err);
	err->code = PGC_EINTR;
	err->klass = PGC_CLASS_FATAL;
	snprintf(err->message, sizeof err->message, "interrupted by signal %d", g_signal);
	return PGC_EINTR;
}

static void on_tag(const char *tag, void *arg)
{
	add_tag(arg, tag);
}

static int script_fn(pgc_conn *conn, void *arg, pgc_error *err)
{
	script_run *r = arg;
	clear_tags(r);
	if (signal_seen() != 0)
		return interrupted(err);
	/* No client-side bound: the script runs as long as the server lets it (its own
	 * statement_timeout, --statement-timeout). */
	pgc_exec_options o = PGC_EXEC_OPTIONS_INIT;
	o.timeout_ms = PGC_WAIT_FOREVER;
	o.cancel_fd = r->cancel_fd;
	o.on_tag = on_tag;
	o.tag_arg = r;
	int rc = pgc_exec_ex(conn, r->sql, &o, err);
	(void)signal_seen();
	if (rc == PGC_OK && r->dry_run)
		return PGC_TX_ROLLBACK;
	return rc;
}

static int on_retry(const pgc_tx_retry_info *info, void *arg)
{
	(void)arg;
	if (signal_seen() != 0)
		return 1; /* stop: pgc_tx_run returns PGC_EINTR */
	if (g_cli.quiet)
		return 0;
	const pgc_error *e = info->error;
	char d[PGC_DURATION_FORMAT_MAX];
	if (e->sqlstate[0])
		cli_errorf("attempt %d of %d failed: %s (SQLSTATE %s); %s in %s", info->attempt,
		           info->max_attempts, e->message, e->sqlstate,
		           info->reconnect ? "reconnecting and retrying" : "retrying",
		           cli_duration_str(info->sleep_ms, d));
	else
		cli_errorf("attempt %d of %d failed: %s; %s in %s", info->attempt, info->max_attempts,
		           e->message, info->reconnect ? "reconnecting and retrying" : "retrying",
		           cli_duration_str(info->sleep_ms, d));
	return 0;
}

static char *read_all(FILE *f, size_t *len)
{
	size_t cap = 8192, n = 0;
	char *buf = malloc(cap);
	if (buf == NULL)
		return NULL;
	for (;;) {
		if (n + 4096 + 1 > cap) {
			cap *= 2;
			char *b = realloc(buf, cap);
			if (b == NULL) {
				free(buf);
				return NULL;
			}
			buf = b;
		}
		size_t got = fread(buf + n, 1, 4096, f);
		n += got;
		if (got < 4096) {
			if (ferror(f)) {
				free(buf);
				return NULL;
			}
			break;
		}
	}
	buf[n] = '\0';
	*len = n;
	return buf;
}

static void print_json(const char *status, const pgc_tx_stats *st, const script_run *r,
                       const pgc_error *err, bool dry_run)
{
	fputs("{\"status\":", stdout);
	json_str(stdout, status);
	printf(",\"dry_run\":%s,\"attempts\":%d,\"backoff_ms\":%lld,\"deadlocks\":%d,"
	       "\"serialization_failures\":%d,\"lock_not_available\":%d,\"reconnects\":%d,\"sqlstates\":[",
	       dry_run ? "true" : "false", st->attempts, (long long)st->backoff_ms, st->deadlocks,
	       st->serialization_failures, st->lock_not_available, st->reconnects);
	int shown = st->nsqlstates < PGC_TX_SQLSTATES_MAX ? st->nsqlstates : PGC_TX_SQLSTATES_MAX;
	for (int i = 0; i < shown; i++) {
		if (i)
			fputc(',', stdout);
		json_str(stdout, st->sqlstates[i][0] ? st->sqlstates[i] : NULL);
	}
	fputs("],\"commands\":[", stdout);
	for (size_t i = 0; err == NULL && i < r->ntags; i++) {
		if (i)
			fputc(',', stdout);
		json_str(stdout, r->tags[i]);
	}
	fputs("],\"error\":", stdout);
	if (err == NULL) {
		fputs("null", stdout);
	} else {
		fputs("{\"code\":", stdout);
		json_str(stdout, pgc_strerror(err->code));
		fputs(",\"sqlstate\":", stdout);
		json_str(stdout, err->sqlstate[0] ? err->sqlstate : NULL);
		fputs(",\"message\":", stdout);
		json_str(stdout, err->message);
		fputs(",\"detail\":", stdout);
		json_str(stdout, err->detail[0] ? err->detail : NULL);
		fputs(",\"hint\":", stdout);
		json_str(stdout, err->hint[0] ? err->hint : NULL);
		printf(",\"position\":%d}", err->position);
	}
	fputs("}\n", stdout);
}

/* The exit status of a failed run. */
static int tx_exit_code(int rc, const pgc_error *err)
{
	switch (rc) {
	case PGC_ERETRY_EXHAUSTED:
		/* Deadlocks and serialization failures to the last: a conflict. A server that stayed
		 * unreachable, or a standby, to the last: the database is unavailable. */
		return err->klass == PGC_CLASS_RETRY_TX || strcmp(err->sqlstate, "55P03") == 0 ? EXIT_CONFLICT
		                                                                               : EXIT_UNAVAILABLE;
	case PGC_ECOMMIT_UNKNOWN: return EXIT_UNAVAILABLE;
	case PGC_EINTR: return EXIT_CONFLICT;
	default: break;
	}
	if (strcmp(err->sqlstate, "55P03") == 0 || strcmp(err->sqlstate, "57014") == 0)
		return EXIT_CONFLICT;
	/* A server error is the script's doing (syntax, data, constraints, VACUUM inside a
	 * transaction block, a RAISE, ...) unless it says the server or the session is in
	 * trouble: resources (53), limits (54), operator intervention (57), system (58),
	 * configuration (F0), internal (XX), connection (08). */
	if (err->code == PGC_ESQL && err->sqlstate[0] != '\0') {
		static const char *const server_side[] = { "53", "54", "57", "58", "F0", "XX", "08" };
		bool server = false;
		for (size_t i = 0; i < sizeof server_side / sizeof server_side[0]; i++)
			if (strncmp(err->sqlstate, server_side[i], 2) == 0)
				server = true;
		if (!server)
			return EXIT_DATAERR;
	}
	if (err->code == PGC_EUSAGE)
		return EXIT_DATAERR; /* the script misbehaved inside the transaction */
	return cli_exit_code(err);
}

int cmd_tx(int argc, char **argv)
{
	pgc_tx_options o = PGC_TX_OPTIONS_INIT;
	const char *file = NULL, *command = NULL, *isolation = NULL;
	bool dry_run = false, read_only = false, deferrable = false, retry_lock = false;
	bool no_reconnect = false;
	int64_t lock_timeout = -1, statement_timeout = -1, idle_timeout = -1, max_backoff = -1;
	long long retries = 9;
	int rc;
	const cli_opt opts[] = {
		CLI_OPT('f', "file", CLI_OPT_STR, &file, "FILE",
		        "read the script from FILE (\"-\": standard input)", .flags = CLI_OPT_ONCE),
		CLI_OPT('c', "command", CLI_OPT_STR, &command, "SQL",
		        "run SQL (one or more statements)", .flags = CLI_OPT_ONCE),
		CLI_OPT(0, "isolation", CLI_OPT_STR, &isolation, "LEVEL",
		        "read-committed, repeatable-read or serializable\n(default: the server's default)"),
		CLI_OPT(0, "read-only", CLI_OPT_BOOL, &read_only, NULL,
		        "start the transaction READ ONLY"),
		CLI_OPT(0, "deferrable", CLI_OPT_BOOL, &deferrable, NULL,
		        "with serializable and --read-only: wait for a\nsnapshot that cannot fail"),
		CLI_OPT(0, "retries", CLI_OPT_INT, &retries, "N",
		        "retry at most N times (default 9)", .min = 0, .max = 1000),
		CLI_OPT(0, "retry-lock-timeout", CLI_OPT_BOOL, &retry_lock, NULL,
		        "also retry when a lock is not available (55P03)"),
		CLI_OPT(0, "lock-timeout", CLI_OPT_DURATION, &lock_timeout, "D",
		        "SET LOCAL lock_timeout (D: 500ms, 2s, 5m, 1h, 1d)",
		        .min = 1, .max = INT32_MAX),
		CLI_OPT(0, "statement-timeout", CLI_OPT_DURATION, &statement_timeout, "D",
		        "SET LOCAL statement_timeout", .min = 1, .max = INT32_MAX),
		CLI_OPT(0, "idle-timeout", CLI_OPT_DURATION, &idle_timeout, "D",
		        "SET LOCAL idle_in_transaction_session_timeout",
		        .min = 1, .max = INT32_MAX),
		CLI_OPT(0, "max-backoff", CLI_OPT_DURATION, &max_backoff, "D",
		        "longest pause between attempts (default 1s)", .min = 1, .max = INT32_MAX),
		CLI_OPT(0, "no-reconnect", CLI_OPT_BOOL, &no_reconnect, NULL,
		        "fail instead of reconnecting when the session\ndies before COMMIT"),
		CLI_OPT(0, "dry-run", CLI_OPT_BOOL, &dry_run, NULL,
		        "run the script, then roll it back"),
		CLI_OPT(0, "allow-lock-without-mode", CLI_OPT_BOOL, &allow_bare_lock, NULL,
		        "run LOCK TABLE statements that name no mode\n(they take ACCESS EXCLUSIVE)"),
		CLI_OPT('h', "help", CLI_OPT_HELP, NULL, NULL, "show this help and exit"),
		CLI_OPT_TABLE_END,
	};
	tx_opts = opts;
	cli_opt_usage_set(usage);
	int first;
	if ((rc = cli_opt_parse("tx", opts, argc, argv, &first)) != 0)
		return rc < 0 ? 0 : rc;
	if (file != NULL && command != NULL)
		return cli_usage_error("tx", "give one script: -f FILE or -c SQL, once");
	if (isolation != NULL && !pgc_isolation_parse(isolation, &o.isolation))
		return cli_usage_error("tx", "unknown isolation level \"%s\" (use read-committed, repeatable-read or serializable)", isolation);
	o.read_only = read_only;
	o.deferrable = deferrable;
	o.retry_lock_not_available = retry_lock;
	if (lock_timeout >= 0)
		o.lock_timeout_ms = lock_timeout;
	if (statement_timeout >= 0)
		o.statement_timeout_ms = statement_timeout;
	if (idle_timeout >= 0)
		o.idle_in_transaction_timeout_ms = idle_timeout;
	if (max_backoff >= 0) {
		o.backoff_max_ms = (int)max_backoff;
		if (o.backoff_base_ms > o.backoff_max_ms)
			o.backoff_base_ms = o.backoff_max_ms;
	}
	if (no_reconnect)
		o.reconnect = false;
	optind = first;
	if (optind < argc)
		return cli_usage_error("tx", "unexpected argument \"%s\"", argv[optind]);
	if (file == NULL && command == NULL)
		return cli_usage_error("tx", "no script: give -f FILE or -c SQL");
	if (o.deferrable && !(o.isolation == PGC_ISOLATION_SERIALIZABLE && o.read_only))
		return cli_usage_error("tx", "--deferrable needs --isolation=serializable and --read-only");
	o.max_attempts = (int)retries + 1;

	/* The script, whole, before connecting: bad input never costs a session. */
	char *text;
	const char *label;
	size_t len;
	if (command != NULL) {
		text = strdup(command);
		len = strlen(command);
		label = "(command)";
		if (text == NULL) {
			cli_errorf("out of memory");
			return EXIT_SOFTWARE;
		}
	} else {
		FILE *f = strcmp(file, "-") == 0 ? stdin : fopen(file, "rb");
		if (f == NULL) {
			cli_errorf("cannot open %s: %s", file, strerror(errno));
			return EXIT_USAGE;
		}
		text = read_all(f, &len);
		int e = errno;
		if (f != stdin)
			fclose(f);
		if (text == NULL) {
			cli_errorf("cannot read %s: %s", file, strerror(e));
			return EXIT_USAGE;
		}
		label = strcmp(file, "-") == 0 ? "(stdin)" : file;
	}
	if (strlen(text) != len) {
		cli_errorf("%s: the script contains a NUL byte", label);
		free(text);
		return EXIT_DATAERR;
	}
	if ((rc = check_script(text, len, label, true)) != 0) {
		free(text);
		return rc;
	}

	pgc_conn *conn;
	rc = cli_connect("tx", &conn);
	if (rc != 0) {
		free(text);
		return rc;
	}
	/* A server without standard_conforming_strings reads backslashes in strings as escapes:
	 * read the script as it will. */
	const char *scs = PQparameterStatus(pgc_conn_pg(conn), "standard_conforming_strings");
	if (scs != NULL && strcmp(scs, "off") == 0 && (rc = check_script(text, len, label, false)) != 0) {
		pgc_conn_close(conn);
		free(text);
		return rc;
	}
	int sigfd = cli_signal_fd();
	if (sigfd < 0) {
		cli_errorf("cannot set up signal handling: %s", strerror(errno));
		pgc_conn_close(conn);
		free(text);
		return EXIT_SOFTWARE;
	}
	pgc_tx_stats st;
	script_run run = { text, NULL, 0, 0, dry_run, sigfd };
	o.stats = &st;
	o.before_retry = on_retry;
	pgc_error err = PGC_ERROR_INIT;
	rc = pgc_tx_run(conn, &o, script_fn, &run, &err);
	int status = 0;
	if (rc == PGC_OK || rc == PGC_TX_ROLLBACK) {
		const char *what = rc == PGC_OK ? "committed" : "rolled back";
		if (g_cli.json) {
			print_json(rc == PGC_OK ? "committed" : "rolled_back", &st, &run, NULL, dry_run);
		} else if (!g_cli.quiet) {
			printf("%s after %d attempt%s (%zu statement%s", what, st.attempts,
			       st.attempts == 1 ? "" : "s", run.ntags, run.ntags == 1 ? "" : "s");
			if (st.nsqlstates > 0) {
				printf("; retried after");
				int shown = st.nsqlstates < PGC_TX_SQLSTATES_MAX ? st.nsqlstates : PGC_TX_SQLSTATES_MAX;
				for (int i = 0; i < shown; i++)
					printf("%s %s", i ? "," : "", st.sqlstates[i][0] ? st.sqlstates[i] : "connection loss");
				char d[PGC_DURATION_FORMAT_MAX];
				printf("; slept %s", cli_duration_str(st.backoff_ms, d));
			}
			printf(")%s\n", dry_run ? ", dry run" : "");
		}
	} else {
		if (g_cli.json) {
			print_json(rc == PGC_ECOMMIT_UNKNOWN ? "unknown" : "failed", &st, &run, &err, dry_run);
			cli_json_error_shown();
		}
		if (err.position > 0 && err.code == PGC_ESQL) {
			PGconn *pg = pgc_conn_pg(conn);
			const char *enc = PQparameterStatus(pg, "client_encoding");
			bool utf8 = enc == NULL || strcasecmp(enc, "UTF8") == 0;
			size_t off = char_offset(text, err.position, utf8);
			int line, col;
			size_t ls;
			line_col(text, off, utf8, &line, &col, &ls);
			cli_errorf("%s:%d:%d: %s (SQLSTATE %s)", label, line, col, err.message, err.sqlstate);
			show_line(text, ls, off, line);
			if (err.detail[0] != '\0')
				fprintf(stderr, "DETAIL: %s\n", err.detail);
			if (err.hint[0] != '\0')
				fprintf(stderr, "HINT: %s\n", err.hint);
		} else {
			cli_report(&err);
		}
		if (rc == PGC_ECOMMIT_UNKNOWN)
			cli_errorf("the script may or may not have been committed: check before running it again");
		status = tx_exit_code(rc, &err);
	}
	clear_tags(&run);
	free(run.tags);
	free(text);
	pgc_conn_close(conn);
	if (signal_seen() != 0) {
		int sig = g_signal;
		if (rc != PGC_OK && rc != PGC_ECOMMIT_UNKNOWN)
			cli_errorf("interrupted by signal %d: the statement was canceled and the transaction rolled back", sig);
		fflush(stdout);
		signal(sig, SIG_DFL);
		raise(sig);
	}
	return status;
}

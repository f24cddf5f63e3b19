/* cmd_tx.c - pgcoord tx: run a SQL script as one transaction, retried as a whole on deadlocks
 * and serialization failures
 *
 * The script goes to the server as one simple-protocol query inside the runner's BEGIN, so its
 * statements share the transaction and a server error position counts from the start of the
 * file. Before anything is sent, a small scanner (comments, quotes, dollar quotes, BEGIN ATOMIC
 * bodies) refuses what cannot work inside someone else's transaction: the script's own
 * BEGIN / COMMIT / ROLLBACK and psql meta-commands. */
#include <ctype.h>
#include <errno.h>
#include <getopt.h>
#include <libpq-fe.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "cli.h"

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
	      "Options:\n"
	      "  -f, --file=FILE            read the script from FILE (\"-\": standard input)\n"
	      "  -c, --command=SQL          run SQL (one or more statements)\n"
	      "      --isolation=LEVEL      read-committed, repeatable-read or serializable\n"
	      "                             (default: the server's default)\n"
	      "      --read-only            start the transaction READ ONLY\n"
	      "      --deferrable           with serializable and --read-only: wait for a\n"
	      "                             snapshot that cannot fail\n"
	      "      --retries=N            retry at most N times (default 9)\n"
	      "      --retry-lock-timeout   also retry when a lock is not available (55P03)\n"
	      "      --lock-timeout=D       SET LOCAL lock_timeout (D: 500ms, 2s, 5m, 1h)\n"
	      "      --statement-timeout=D  SET LOCAL statement_timeout\n"
	      "      --idle-timeout=D       SET LOCAL idle_in_transaction_session_timeout\n"
	      "      --max-backoff=D        longest pause between attempts (default 1s)\n"
	      "      --no-reconnect         fail instead of reconnecting when the session\n"
	      "                             dies before COMMIT\n"
	      "      --dry-run              run the script, then roll it back\n"
	      "  -h, --help                 show this help and exit\n"
	      "\n"
	      "The script must not contain BEGIN, COMMIT, ROLLBACK (ROLLBACK TO SAVEPOINT is\n"
	      "fine) or psql meta-commands. Query results are not shown.\n"
	      "\n"
	      "Exit status: 0 committed (or rolled back by --dry-run); 1 retries exhausted,\n"
	      "lock or statement timeout; 64 usage; 65 the script is invalid or the server\n"
	      "rejected it (syntax, constraint, data); 69 database unavailable, or the\n"
	      "session died after COMMIT was sent (outcome unknown); 70 internal error.\n", f);
}

/* ---- the scanner ---- */

typedef struct scan {
	int statements;   /* non-empty statements */
	size_t bad_at;    /* offset of the refused statement or meta-command */
	char bad[64];     /* what was refused, "" when nothing */
} scan;

static bool ident_start(unsigned char c)
{
	return isalpha(c) || c == '_' || c >= 0x80;
}

static bool ident_char(unsigned char c)
{
	return isalnum(c) || c == '_' || c == '$' || c >= 0x80;
}

/* Skips a quoted or commented stretch starting at s[i] (s has n bytes); returns the index
 * after it, or i when s[i] starts none. */
static size_t skip_opaque(const char *s, size_t n, size_t i)
{
	if (s[i] == '-' && s[i + 1] == '-') {
		while (i < n && s[i] != '\n')
			i++;
		return i;
	}
	if (s[i] == '/' && s[i + 1] == '*') {
		int depth = 0;
		while (i < n) {
			if (s[i] == '/' && s[i + 1] == '*') {
				depth++;
				i += 2;
			} else if (s[i] == '*' && s[i + 1] == '/') {
				i += 2;
				if (--depth == 0)
					return i;
			} else {
				i++;
			}
		}
		return n;
	}
	if (s[i] == '\'' || s[i] == '"') {
		char q = s[i];
		/* E'...' strings take backslash escapes. */
		bool esc = q == '\'' && i > 0 && (s[i - 1] == 'E' || s[i - 1] == 'e') &&
		           (i == 1 || !ident_char((unsigned char)s[i - 2]));
		i++;
		while (i < n) {
			if (esc && s[i] == '\\' && i + 1 < n) {
				i += 2;
			} else if (s[i] == q) {
				if (s[i + 1] == q) {
					i += 2;
				} else {
					return i + 1;
				}
			} else {
				i++;
			}
		}
		return n;
	}
	if (s[i] == '$' && (i == 0 || !ident_char((unsigned char)s[i - 1]))) {
		/* $tag$ ... $tag$; $1 is a parameter, not a quote. */
		size_t j = i + 1;
		if (ident_start((unsigned char)s[j]) && s[j] != '$')
			while (ident_char((unsigned char)s[j]) && s[j] != '$')
				j++;
		if (s[j] != '$')
			return i;
		size_t taglen = j - i + 1;
		const char *end;
		for (end = s + j + 1; (end = strchr(end, '$')) != NULL; end++)
			if (strncmp(end, s + i, taglen) == 0)
				return (size_t)(end - s) + taglen;
		return n;
	}
	return i;
}

static bool word_is(const char *w, const char *kw)
{
	return strcasecmp(w, kw) == 0;
}

static void scan_script(const char *s, scan *out)
{
	memset(out, 0, sizeof *out);
	size_t n = strlen(s);
	size_t i = 0;
	while (i < n) {
		/* One statement: up to a semicolon outside quotes, parentheses and BEGIN ATOMIC. */
		char words[4][24];
		size_t first_at = 0;
		int nwords = 0, paren = 0, begin_depth = 0;
		bool routine = false, any = false;
		while (i < n) {
			size_t j = skip_opaque(s, n, i);
			if (j != i) {
				if (s[i] == '\'' || s[i] == '"' || s[i] == '$')
					any = true;
				i = j;
				continue;
			}
			unsigned char c = (unsigned char)s[i];
			if (c == ';' && paren == 0 && begin_depth == 0) {
				i++;
				break;
			}
			if (c == '\\') {
				size_t k = i + 1;
				while (k < n && ident_char((unsigned char)s[k]) && k - i < 20)
					k++;
				snprintf(out->bad, sizeof out->bad, "psql meta-command \\%.*s", (int)(k - i - 1), s + i + 1);
				out->bad_at = i;
				return;
			}
			if (isspace(c)) {
				i++;
				continue;
			}
			any = true;
			if (c == '(')
				paren++;
			else if (c == ')' && paren > 0)
				paren--;
			if (ident_start(c)) {
				size_t k = i;
				while (k < n && ident_char((unsigned char)s[k]))
					k++;
				char w[24];
				snprintf(w, sizeof w, "%.*s", (int)(k - i < 23 ? k - i : 23), s + i);
				if (nwords < 4) {
					if (nwords == 0)
						first_at = i;
					memcpy(words[nwords++], w, sizeof w);
					/* CREATE [OR REPLACE] FUNCTION|PROCEDURE may hold BEGIN ATOMIC ... END */
					if (nwords >= 2 && word_is(words[0], "create")) {
						const char *kind = word_is(words[1], "or") && nwords >= 4 ? words[3] : words[1];
						if (word_is(kind, "function") || word_is(kind, "procedure"))
							routine = true;
					}
				}
				if (routine && paren == 0 && nwords > 2) {
					if (word_is(w, "begin"))
						begin_depth++;
					else if (word_is(w, "case") && begin_depth > 0)
						begin_depth++;
					else if (word_is(w, "end") && begin_depth > 0)
						begin_depth--;
				}
				i = k;
				continue;
			}
			i++;
		}
		if (!any)
			continue;
		out->statements++;
		if (nwords == 0)
			continue;
		const char *w0 = words[0], *w1 = nwords > 1 ? words[1] : "";
		bool refused = word_is(w0, "begin") || word_is(w0, "start") || word_is(w0, "commit") ||
		               word_is(w0, "end") || word_is(w0, "abort") ||
		               (word_is(w0, "rollback") && !word_is(w1, "to")) ||
		               (word_is(w0, "prepare") && word_is(w1, "transaction"));
		if (refused) {
			bool two = word_is(w0, "start") || word_is(w0, "prepare");
			char what[48];
			snprintf(what, sizeof what, "%s%s%s", w0, two ? " " : "", two ? w1 : "");
			for (char *p = what; *p; p++)
				*p = (char)toupper((unsigned char)*p);
			snprintf(out->bad, sizeof out->bad, "transaction control statement %s", what);
			out->bad_at = first_at;
			return;
		}
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

/* ---- running ---- */

typedef struct script_run {
	const char *sql;
	char **tags;
	size_t ntags, cap;
	bool dry_run;
} script_run;

static void clear_tags(script_run *r)
{
	for (size_t i = 0; i < r->ntags; i++)
		free(r->tags[i]);
	r->ntags = 0;
}

static void add_tag(script_run *r, const char *tag)
{
	if (r->ntags == r->cap) {
		size_t cap = r->cap ? r->cap * 2 : 16;
		char **t = realloc(r->tags, cap * sizeof *t);
		if (t == NULL)
			return; /* the list is informational: keep going without it */
		r->tags = t;
		r->cap = cap;
	}
	char *copy = strdup(tag);
	if (copy != NULL)
		r->tags[r->ntags++] = copy;
}

/* SIGINT, SIGTERM and SIGHUP (Ctrl-C, timeout(1), a closed terminal) cancel the running
 * statement on the server before pgcoord exits: a backend whose client just vanished would
 * otherwise run the statement to its end, holding its locks. The first signal is remembered,
 * the retries stop, and the process then ends by that signal. */
static PGcancel *volatile g_cancel;
static volatile sig_atomic_t g_signal;

static void on_signal(int sig)
{
	if (g_signal != 0)
		return;
	g_signal = sig;
	PGcancel *c = g_cancel;
	if (c != NULL) {
		char buf[256];
		(void)PQcancel(c, buf, sizeof buf); /* documented as safe in a signal handler */
	}
}

static const int caught[] = { SIGINT, SIGTERM, SIGHUP };

static void catch_signals(void)
{
	struct sigaction sa;
	memset(&sa, 0, sizeof sa);
	sa.sa_handler = on_signal;
	sigemptyset(&sa.sa_mask);
	for (size_t i = 0; i < sizeof caught / sizeof caught[0]; i++)
		sigaction(caught[i], &sa, NULL);
}

/* Points the handler at the current session (a reconnect changes the backend). */
static void set_cancel(PGconn *pg)
{
	sigset_t block, old;
	sigemptyset(&block);
	for (size_t i = 0; i < sizeof caught / sizeof caught[0]; i++)
		sigaddset(&block, caught[i]);
	sigprocmask(SIG_BLOCK, &block, &old);
	PGcancel *prev = g_cancel;
	g_cancel = pg ? PQgetCancel(pg) : NULL;
	sigprocmask(SIG_SETMASK, &old, NULL);
	if (prev != NULL)
		PQfreeCancel(prev);
}

static int interrupted(pgc_error *err)
{
	pgc_error_clear(err);
	err->code = PGC_EINTR;
	err->klass = PGC_CLASS_FATAL;
	snprintf(err->message, sizeof err->message, "interrupted by signal %d", (int)g_signal);
	return PGC_EINTR;
}

static int script_fn(pgc_conn *conn, void *arg, pgc_error *err)
{
	script_run *r = arg;
	clear_tags(r);
	PGconn *pg = pgc_conn_pg(conn);
	set_cancel(pg);
	if (g_signal != 0)
		return interrupted(err);
	if (!PQsendQuery(pg, r->sql))
		return pgc_tx_check_result(conn, NULL, err);
	int rc = PGC_OK;
	bool copy_in = false;
	PGresult *res;
	while ((res = PQgetResult(pg)) != NULL) {
		ExecStatusType st = PQresultStatus(res);
		if (st == PGRES_COPY_IN) {
			/* There is no data to give; the server turns this into an error. */
			(void)PQputCopyEnd(pg, "COPY FROM STDIN is not supported by pgcoord tx");
			copy_in = true;
		} else if (st == PGRES_COPY_OUT) {
			char *buf;
			while (PQgetCopyData(pg, &buf, 0) > 0)
				PQfreemem(buf);
		} else if (rc == PGC_OK) {
			if (pgc_tx_check_result(conn, res, err) != PGC_OK)
				rc = err->code;
			else
				add_tag(r, PQcmdStatus(res));
		}
		PQclear(res);
		if (PQstatus(pg) == CONNECTION_BAD)
			break;
	}
	if (copy_in && PQstatus(pg) != CONNECTION_BAD) {
		/* The script's doing, not a cancel: say so. */
		pgc_error_clear(err);
		err->code = rc = PGC_EUSAGE;
		err->klass = PGC_CLASS_USAGE;
		snprintf(err->message, sizeof err->message, "COPY FROM STDIN is not supported by pgcoord tx");
	}
	if (rc == PGC_OK && r->dry_run)
		return PGC_TX_ROLLBACK;
	return rc;
}

static int on_retry(const pgc_tx_retry_info *info, void *arg)
{
	(void)arg;
	if (g_signal != 0)
		return 1; /* stop: pgc_tx_run returns PGC_EINTR */
	if (g_cli.quiet)
		return 0;
	const pgc_error *e = info->error;
	if (e->sqlstate[0])
		cli_errorf("attempt %d of %d failed: %s (SQLSTATE %s); %s in %lld ms", info->attempt,
		           info->max_attempts, e->message, e->sqlstate,
		           info->reconnect ? "reconnecting and retrying" : "retrying",
		           (long long)info->sleep_ms);
	else
		cli_errorf("attempt %d of %d failed: %s; %s in %lld ms", info->attempt, info->max_attempts,
		           e->message, info->reconnect ? "reconnecting and retrying" : "retrying",
		           (long long)info->sleep_ms);
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

static bool parse_duration(const char *opt, const char *text, int64_t *out)
{
	int rc;
	return cli_duration_opt("tx", opt, text, 1, INT32_MAX, out, &rc);
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
	case PGC_ERETRY_EXHAUSTED: return EXIT_CONFLICT;
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
	enum {
		OPT_ISOLATION = 256, OPT_READ_ONLY, OPT_DEFERRABLE, OPT_RETRIES, OPT_RETRY_LOCK,
		OPT_LOCK_TIMEOUT, OPT_STATEMENT_TIMEOUT, OPT_IDLE_TIMEOUT, OPT_MAX_BACKOFF,
		OPT_NO_RECONNECT, OPT_DRY_RUN
	};
	static const struct option longopts[] = {
		{ "file", required_argument, NULL, 'f' },
		{ "command", required_argument, NULL, 'c' },
		{ "isolation", required_argument, NULL, OPT_ISOLATION },
		{ "read-only", no_argument, NULL, OPT_READ_ONLY },
		{ "deferrable", no_argument, NULL, OPT_DEFERRABLE },
		{ "retries", required_argument, NULL, OPT_RETRIES },
		{ "retry-lock-timeout", no_argument, NULL, OPT_RETRY_LOCK },
		{ "lock-timeout", required_argument, NULL, OPT_LOCK_TIMEOUT },
		{ "statement-timeout", required_argument, NULL, OPT_STATEMENT_TIMEOUT },
		{ "idle-timeout", required_argument, NULL, OPT_IDLE_TIMEOUT },
		{ "max-backoff", required_argument, NULL, OPT_MAX_BACKOFF },
		{ "no-reconnect", no_argument, NULL, OPT_NO_RECONNECT },
		{ "dry-run", no_argument, NULL, OPT_DRY_RUN },
		{ "help", no_argument, NULL, 'h' },
		{ NULL, 0, NULL, 0 },
	};
	pgc_tx_options o = PGC_TX_OPTIONS_INIT;
	const char *file = NULL, *command = NULL;
	bool dry_run = false;
	int64_t ms;
	long long retries = 9;
	int ch;
	opterr = 0;
	while ((ch = getopt_long(argc, argv, ":f:c:h", longopts, NULL)) != -1) {
		switch (ch) {
		case 'f':
			if (file != NULL || command != NULL)
				return cli_usage_error("tx", "give one script: -f FILE or -c SQL, once");
			file = optarg;
			break;
		case 'c':
			if (file != NULL || command != NULL)
				return cli_usage_error("tx", "give one script: -f FILE or -c SQL, once");
			command = optarg;
			break;
		case OPT_ISOLATION:
			if (!pgc_isolation_parse(optarg, &o.isolation))
				return cli_usage_error("tx", "unknown isolation level \"%s\" (use read-committed, repeatable-read or serializable)", optarg);
			break;
		case OPT_READ_ONLY:
			o.read_only = true;
			break;
		case OPT_DEFERRABLE:
			o.deferrable = true;
			break;
		case OPT_RETRIES:
			if (!cli_parse_int(optarg, 0, 1000, &retries))
				return cli_usage_error("tx", "--retries: \"%s\" is not a number from 0 to 1000", optarg);
			break;
		case OPT_RETRY_LOCK:
			o.retry_lock_not_available = true;
			break;
		case OPT_LOCK_TIMEOUT:
			if (!parse_duration("--lock-timeout", optarg, &ms))
				return EXIT_USAGE;
			o.lock_timeout_ms = ms;
			break;
		case OPT_STATEMENT_TIMEOUT:
			if (!parse_duration("--statement-timeout", optarg, &ms))
				return EXIT_USAGE;
			o.statement_timeout_ms = ms;
			break;
		case OPT_IDLE_TIMEOUT:
			if (!parse_duration("--idle-timeout", optarg, &ms))
				return EXIT_USAGE;
			o.idle_in_transaction_timeout_ms = ms;
			break;
		case OPT_MAX_BACKOFF:
			if (!parse_duration("--max-backoff", optarg, &ms))
				return EXIT_USAGE;
			o.backoff_max_ms = (int)ms;
			if (o.backoff_base_ms > o.backoff_max_ms)
				o.backoff_base_ms = o.backoff_max_ms;
			break;
		case OPT_NO_RECONNECT:
			o.reconnect = false;
			break;
		case OPT_DRY_RUN:
			dry_run = true;
			break;
		case 'h':
			usage(stdout);
			return 0;
		default:
			return cli_getopt_error("tx", ch, argv);
		}
	}
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
	scan sc;
	scan_script(text, &sc);
	if (sc.bad[0] != '\0') {
		int line, col;
		size_t ls;
		line_col(text, sc.bad_at, true, &line, &col, &ls);
		cli_errorf("%s:%d:%d: %s is not allowed: pgcoord tx runs the script in its own transaction", label,
		           line, col, sc.bad);
		show_line(text, ls, sc.bad_at, line);
		free(text);
		return EXIT_DATAERR;
	}
	if (sc.statements == 0) {
		cli_errorf("%s: the script is empty", label);
		free(text);
		return EXIT_DATAERR;
	}

	pgc_conn *conn;
	int rc = cli_connect("tx", &conn);
	if (rc != 0) {
		free(text);
		return rc;
	}
	pgc_tx_stats st;
	script_run run = { text, NULL, 0, 0, dry_run };
	o.stats = &st;
	o.before_retry = on_retry;
	pgc_error err = PGC_ERROR_INIT;
	catch_signals();
	rc = pgc_tx_run(conn, &o, script_fn, &run, &err);
	set_cancel(NULL);
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
				printf("; slept %lld ms", (long long)st.backoff_ms);
			}
			printf(")%s\n", dry_run ? ", dry run" : "");
		}
	} else {
		if (g_cli.json)
			print_json(rc == PGC_ECOMMIT_UNKNOWN ? "unknown" : "failed", &st, &run, &err, dry_run);
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
	if (g_signal != 0) {
		int sig = g_signal;
		if (rc != PGC_OK && rc != PGC_ECOMMIT_UNKNOWN)
			cli_errorf("interrupted by signal %d: the statement was canceled and the transaction rolled back", sig);
		fflush(stdout);
		signal(sig, SIG_DFL);
		raise(sig);
	}
	return status;
}

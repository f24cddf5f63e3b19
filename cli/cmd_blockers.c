/* cmd_blockers.c - pgcoord blockers: the blocking forest, root blockers first */
#include <getopt.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "diag_out.h"

static void usage(FILE *f)
{
	fputs("Usage: pgcoord [-d DSN] blockers [OPTIONS]\n"
	      "\n"
	      "Shows who waits for whom: the blocking forest with the root blockers first,\n"
	      "each waiter indented under the session it waits for, the lock it wants and\n"
	      "its query, after one summary line that names the worst root blocker.\n"
	      "pgcoord run's own lock holders block by design: they are labelled, and named\n"
	      "worst only when no other root blocks.\n"
	      "Exit status 0 when no session waits for a lock, 1 when one does.\n"
	      "\n"
	      "Options:\n"
	      "  -a, --all-databases  every database, not only the current one\n"
	      "      --schema=NAME    schema of the lock_names registry (default: pgcoord)\n"
	      "      --no-names       do not look advisory keys up in the registry\n"
	      "  -w, --watch=SECONDS  redraw every SECONDS (\"2\", \"500ms\") until interrupted\n"
	      "      --count=N        with --watch: stop after N snapshots\n"
	      "      --json           print the snapshot as one JSON object\n"
	      "      --dot            print the wait-for graph for Graphviz dot(1)\n"
	      "  -h, --help           show this help and exit\n", f);
}

static volatile sig_atomic_t stop_flag;

static void on_signal(int sig)
{
	(void)sig;
	stop_flag = 1;
}

typedef struct render {
	const pgc_diag_snapshot *snap;
	bool *expanded;
	diag_glyphs g;
	int width;
	bool tty;
	FILE *f;
} render;

static void print_node(render *r, const pgc_diag_session *s, const pgc_diag_session *parent,
                       const char *prefix, bool last, int depth)
{
	FILE *f = r->f;
	long i = s - r->snap->sessions;
	const char *branch = depth == 0 ? "" : last ? r->g.last : r->g.tee;
	char cont[1024];
	snprintf(cont, sizeof cont, "%s%s", prefix, depth == 0 ? "" : last ? r->g.blank : r->g.pipe);
	if (r->expanded[i]) {
		fprintf(f, "%s%spid %d (shown above%s)\n", prefix, branch, s->pid,
		        s->cycle ? ": wait cycle" : "");
		return;
	}
	r->expanded[i] = true;

	char xact[32], w[32];
	diag_fmt_dur(s->xact_age_s, xact, sizeof xact);
	fprintf(f, "%s%spid %d", prefix, branch, s->pid);
	if (s->known) {
		fprintf(f, "  %s  %s  %s  %s", diag_or_dash(s->user), diag_or_dash(s->application),
		        diag_or_dash(s->client), diag_or_dash(s->state));
		if (r->snap->all_databases)
			fprintf(f, "  db %s", diag_or_dash(s->database));
		if (s->state_age_s >= 0) {
			char st[32];
			diag_fmt_dur(s->state_age_s, st, sizeof st);
			fprintf(f, " %s", st);
		}
		if (s->xact_age_s >= 0)
			fprintf(f, "  xact %s", xact);
	} else {
		fprintf(f, "  %s", diag_or_dash(s->state));
	}
	if (s->root)
		fprintf(f, "  [ROOT, blocks %zu]", s->blocks_total);
	else if (s->queued_ddl)
		fprintf(f, "  [QUEUED DDL, blocks %zu]", s->blocks_total);
	else if (s->blocks_total > 0)
		fprintf(f, "  [blocks %zu]", s->blocks_total);
	if (s->cycle)
		fprintf(f, "  [WAIT CYCLE %d]", s->cycle);
	fputc('\n', f);
	const char *kid = s->nblocks > 0 ? r->g.pipe : r->g.blank;
	if (s->pgcoord_holder) {
		char label[PGC_KEY_NAME_MAX + 128];
		diag_holder_label(label, sizeof label, s);
		fprintf(f, "%s%s%s\n", cont, kid, label);
	}
	if (s->wants != NULL) {
		diag_fmt_dur(s->waited_s, w, sizeof w);
		fprintf(f, "%s%swaits %s for %s on %s", cont, kid, w, diag_or_dash(s->wants->mode),
		        diag_or_dash(s->wants->target));
		if (s->wait_event_type)
			fprintf(f, "  (%s:%s)", s->wait_event_type, diag_or_dash(s->wait_event));
		fputc('\n', f);
		/* Why it waits: for the session above it, or (at the top of a cycle or of the
		 * unexplained waits) for each session the server names. */
		for (size_t k = 0; k < (parent ? 1 : s->nblocked_by); k++) {
			const pgc_diag_session *b = parent ? parent
			                                   : pgc_diag_session_find(r->snap, s->blocked_by[k]);
			bool queued;
			const pgc_diag_lock *why = pgc_diag_blocking_lock(s, b, &queued);
			if (why != NULL && queued)
				fprintf(f, "%s%squeued behind pid %d's own %s request\n", cont, kid, b->pid,
				        diag_or_dash(why->mode));
			else if (why != NULL)
				fprintf(f, "%s%spid %d holds %s on it\n", cont, kid, b->pid,
				        diag_or_dash(why->mode));
		}
		if (s->queued_ddl)
			fprintf(f, "%s%squeued DDL: %zu session%s queue%s behind this %s request\n", cont,
			        kid, s->blocks_total, diag_plural(s->blocks_total), s->blocks_total == 1 ? "s" : "",
			        diag_or_dash(s->wants->mode));
	}
	if (s->known) {
		char q[8192];
		int room = r->width - diag_columns(cont) - 10;
		diag_session_query(s, r->tty ? (size_t)(room > 20 ? room : 20) : 0, q, sizeof q);
		fprintf(f, "%s%squery: %s\n", cont, kid, *q ? q : "-");
	}
	/* Children: the sessions waiting for this one, the ones holding up most first. */
	size_t n = s->nblocks;
	const pgc_diag_session **kids = malloc((n ? n : 1) * sizeof *kids);
	if (kids == NULL)
		return;
	size_t m = 0;
	for (size_t k = 0; k < n; k++) {
		const pgc_diag_session *c = pgc_diag_session_find(r->snap, s->blocks[k]);
		if (c != NULL)
			kids[m++] = c;
	}
	for (size_t a = 1; a < m; a++)
		for (size_t b = a; b > 0 && (kids[b]->blocks_total > kids[b - 1]->blocks_total ||
		                             (kids[b]->blocks_total == kids[b - 1]->blocks_total &&
		                              kids[b]->waited_s > kids[b - 1]->waited_s)); b--) {
			const pgc_diag_session *t = kids[b];
			kids[b] = kids[b - 1];
			kids[b - 1] = t;
		}
	for (size_t k = 0; k < m; k++)
		print_node(r, kids[k], s, cont, k + 1 == m, depth + 1);
	free(kids);
}

static void print_text(FILE *f, const pgc_diag_snapshot *snap)
{
	char line[1024];
	diag_summary(snap, line, sizeof line);
	fprintf(f, "%s\n", line);
	for (size_t i = 0; i < snap->nsessions; i++) {
		const pgc_diag_session *s = &snap->sessions[i];
		if (s->queued_ddl)
			fprintf(f, "queued DDL: pid %d waits for %s on %s and blocks %zu session%s queued "
			           "behind it\n", s->pid, diag_or_dash(s->wants->mode),
			        diag_or_dash(s->wants->target), s->blocks_total, diag_plural(s->blocks_total));
	}
	for (size_t c = 0; c < snap->ncycles; c++) {
		fprintf(f, "wait cycle %zu: pids", c + 1);
		for (size_t k = 0; k < snap->cycles[c].npids; k++)
			fprintf(f, " %d", snap->cycles[c].pids[k]);
		fputs(" wait for each other (a deadlock; the server breaks it after deadlock_timeout)\n", f);
	}
	if (snap->nwaiting == 0)
		return;
	render r = { .snap = snap, .g = diag_glyphs_get(), .tty = diag_stdout_tty(), .f = f };
	r.width = diag_term_width();
	r.expanded = calloc(snap->nsessions ? snap->nsessions : 1, sizeof *r.expanded);
	if (r.expanded == NULL)
		return;
	for (size_t i = 0; i < snap->nroots; i++) {
		fputc('\n', f);
		print_node(&r, pgc_diag_session_find(snap, snap->roots[i]), NULL, "", true, 0);
	}
	/* Cycles nobody outside holds up: start at the member holding up most. */
	for (size_t c = 0; c < snap->ncycles; c++) {
		const pgc_diag_session *best = NULL;
		bool seen = false;
		for (size_t k = 0; k < snap->cycles[c].npids; k++) {
			const pgc_diag_session *s = pgc_diag_session_find(snap, snap->cycles[c].pids[k]);
			if (s == NULL)
				continue;
			seen |= r.expanded[s - snap->sessions];
			if (best == NULL || s->blocks_total > best->blocks_total)
				best = s;
		}
		if (!seen && best != NULL) {
			fputc('\n', f);
			print_node(&r, best, NULL, "", true, 0);
		}
	}
	/* Waiters whose blocker the server no longer names (granted meanwhile, or not a lock). */
	bool header = false;
	for (size_t i = 0; i < snap->nsessions; i++) {
		const pgc_diag_session *s = &snap->sessions[i];
		if (s->wants == NULL || r.expanded[i])
			continue;
		if (!header) {
			fputs("\nwaiting, blocker not identified:\n", f);
			header = true;
		}
		print_node(&r, s, NULL, "", true, 0);
	}
	free(r.expanded);
}

/* A DOT string: quotes and backslashes escaped, newlines as \n, at most max bytes. */
static void dot_str(FILE *f, const char *s, size_t max)
{
	fputc('"', f);
	size_t n = 0;
	for (const char *p = s ? s : ""; *p && n < max; p++, n++) {
		if (*p == '"' || *p == '\\')
			fputc('\\', f);
		if (*p == '\n') {
			fputs("\\n", f);
			continue;
		}
		if ((unsigned char)*p < 0x20)
			continue;
		fputc(*p, f);
	}
	fputc('"', f);
}

static const char *dot_color(const pgc_diag_session *s)
{
	if (!s->known)
		return "#d9d9d9";
	if (s->pgcoord_holder)
		return "#9fc5e8";
	if (s->queued_ddl)
		return "#b4a7d6";
	if (s->wants != NULL)
		return "#ffe599";
	if (s->state && strcmp(s->state, "idle in transaction (aborted)") == 0)
		return "#e06666";
	if (s->state && strncmp(s->state, "idle in transaction", 19) == 0)
		return "#f6b26b";
	if (s->state && strcmp(s->state, "active") == 0)
		return "#b6d7a8";
	return "#ffffff";
}

static void print_dot(FILE *f, const pgc_diag_snapshot *snap)
{
	char line[1024];
	diag_summary(snap, line, sizeof line);
	fputs("digraph pgcoord_blockers {\n"
	      "  graph [rankdir=BT, fontname=\"Helvetica\", labelloc=t, label=", f);
	dot_str(f, line, 1000);
	fputs("];\n"
	      "  node [shape=box, style=\"rounded,filled\", fontname=\"Helvetica\", fontsize=10];\n"
	      "  edge [fontname=\"Helvetica\", fontsize=9];\n", f);
	for (size_t i = 0; i < snap->nsessions; i++) {
		const pgc_diag_session *s = &snap->sessions[i];
		if (s->nblocks == 0 && s->wants == NULL && s->nblocked_by == 0)
			continue;
		char label[2048], xact[32], q[120];
		diag_fmt_dur(s->xact_age_s, xact, sizeof xact);
		diag_fmt_query(s->query, 60, q, sizeof q);
		if (s->known)
			snprintf(label, sizeof label, "pid %d%s\n%s / %s\n%s%s%s\n%s", s->pid,
			         s->pgcoord_holder ? " (pgcoord lock holder)" : s->root ? " (root)"
			         : s->queued_ddl ? " (queued DDL)" : "",
			         diag_or_dash(s->user), diag_or_dash(s->application), diag_or_dash(s->state),
			         s->xact_age_s >= 0 ? ", xact " : "", s->xact_age_s >= 0 ? xact : "", q);
		else
			snprintf(label, sizeof label, "pid %d\n%s", s->pid, diag_or_dash(s->state));
		fprintf(f, "  p%d [label=", s->pid);
		dot_str(f, label, sizeof label);
		fprintf(f, ", fillcolor=\"%s\"%s];\n", dot_color(s), s->root ? ", penwidth=3" : "");
	}
	for (size_t e = 0; e < snap->nedges; e++) {
		const pgc_diag_session *w = pgc_diag_session_find(snap, snap->edges[e].waiter);
		const pgc_diag_session *b = pgc_diag_session_find(snap, snap->edges[e].blocker);
		char label[512] = "";
		if (w && w->wants)
			snprintf(label, sizeof label, "wants %s\non %s", diag_or_dash(w->wants->mode),
			         diag_or_dash(w->wants->target));
		bool cyc = w && b && w->cycle && w->cycle == b->cycle;
		fprintf(f, "  p%d -> p%d [label=", snap->edges[e].waiter, snap->edges[e].blocker);
		dot_str(f, label, sizeof label);
		fprintf(f, "%s];\n", cyc ? ", color=red, penwidth=2" : "");
	}
	fputs("}\n", f);
}

int cmd_blockers(int argc, char **argv)
{
	enum { OPT_SCHEMA = 256, OPT_NO_NAMES, OPT_COUNT, OPT_JSON, OPT_DOT };
	static const struct option longopts[] = {
		{ "all-databases", no_argument, NULL, 'a' },
		{ "schema", required_argument, NULL, OPT_SCHEMA },
		{ "no-names", no_argument, NULL, OPT_NO_NAMES },
		{ "watch", required_argument, NULL, 'w' },
		{ "count", required_argument, NULL, OPT_COUNT },
		{ "json", no_argument, NULL, OPT_JSON },
		{ "dot", no_argument, NULL, OPT_DOT },
		{ "help", no_argument, NULL, 'h' },
		{ NULL, 0, NULL, 0 },
	};
	pgc_diag_options o = PGC_DIAG_OPTIONS_INIT;
	bool json = g_cli.json, dot = false;
	int64_t watch_ms = 0;
	long long count = 0;
	int ch;
	opterr = 0;
	while ((ch = getopt_long(argc, argv, ":aw:h", longopts, NULL)) != -1) {
		switch (ch) {
		case 'a':
			o.all_databases = true;
			break;
		case OPT_SCHEMA:
			if (*optarg == '\0')
				return cli_usage_error("blockers", "--schema must not be empty");
			o.schema = optarg;
			break;
		case OPT_NO_NAMES:
			o.names = false;
			break;
		case 'w': {
			pgc_error err;
			if (pgc_duration_parse(optarg, &watch_ms, &err) != PGC_OK)
				return cli_usage_error("blockers", "--watch: %s", err.message);
			if (watch_ms < 100)
				return cli_usage_error("blockers", "--watch must be at least 100ms");
			break;
		}
		case OPT_COUNT:
			if (!cli_parse_int(optarg, 1, 1000000000, &count))
				return cli_usage_error("blockers", "--count must be a positive number, not \"%s\"", optarg);
			break;
		case OPT_JSON:
			json = g_cli.json = true;
			break;
		case OPT_DOT:
			dot = true;
			break;
		case 'h':
			usage(stdout);
			return 0;
		default:
			return cli_getopt_error("blockers", ch, argv);
		}
	}
	if (optind < argc)
		return cli_usage_error("blockers", "unexpected argument \"%s\"", argv[optind]);
	if (json && dot)
		return cli_usage_error("blockers", "--json and --dot cannot be combined");
	if (dot && watch_ms > 0)
		return cli_usage_error("blockers", "--dot cannot be combined with --watch");
	if (count > 0 && watch_ms == 0)
		return cli_usage_error("blockers", "--count needs --watch");

	pgc_conn *conn = NULL;
	int rc = cli_connect("blockers", &conn);
	if (rc != 0)
		return rc;
	if (watch_ms > 0) {
		struct sigaction sa;
		memset(&sa, 0, sizeof sa);
		sa.sa_handler = on_signal;
		sigaction(SIGINT, &sa, NULL);
		sigaction(SIGTERM, &sa, NULL);
	}
	long long shown = 0;
	for (;;) {
		pgc_diag_snapshot *snap = NULL;
		if (conn == NULL) {
			/* Watching through a restart or a failover: try again every interval. */
			rc = cli_connect("blockers", &conn);
			if (rc != 0)
				conn = NULL;
		}
		if (conn != NULL)
			rc = diag_take(conn, &o, &snap);
		if (rc != 0) {
			if (watch_ms == 0 || rc != EXIT_UNAVAILABLE)
				break;
			pgc_conn_close(conn);
			conn = NULL;
			goto next;
		}
		rc = snap->nwaiting > 0 ? EXIT_CONFLICT : 0;
		if (!g_cli.quiet) {
			if (json)
				diag_json_forest(stdout, snap);
			else if (dot)
				print_dot(stdout, snap);
			else {
				if (watch_ms > 0)
					diag_watch_header(stdout, "blockers", watch_ms, snap->taken_at);
				print_text(stdout, snap);
				if (watch_ms > 0)
					diag_watch_footer(stdout);
			}
		}
		pgc_diag_snapshot_free(snap);
next:
		fflush(stdout);
		shown++;
		if (watch_ms == 0 || (count > 0 && shown >= count) || stop_flag)
			break;
		int64_t slept = 0;
		while (slept < watch_ms && !stop_flag) {
			int64_t step = watch_ms - slept < 50 ? watch_ms - slept : 50;
			struct timespec ts = { 0, (long)step * 1000000L };
			nanosleep(&ts, NULL);
			slept += step;
		}
		if (stop_flag)
			break;
	}
	pgc_conn_close(conn);
	return rc;
}

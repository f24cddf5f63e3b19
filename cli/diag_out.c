/* diag_out.c - rendering shared by blockers, locks, activity, cancel, terminate and probe */
#include <langinfo.h>
#include <libpq-fe.h>
#include <stdlib.h>
#include <locale.h>
#include <string.h>
#include <sys/ioctl.h>
#include <time.h>
#include <unistd.h>

#include "diag_out.h"

void diag_fmt_dur(double s, char *buf, size_t size)
{
	if (s < 0) {
		snprintf(buf, size, "-");
		return;
	}
	long long ms = (long long)(s * 1000.0 + 0.5);
	if (ms < 1000)
		snprintf(buf, size, "%lldms", ms);
	else if (ms < 60000)
		snprintf(buf, size, "%.1fs", ms / 1000.0);
	else if (ms < 3600000)
		snprintf(buf, size, "%lldm%02llds", ms / 60000, ms / 1000 % 60);
	else if (ms < 86400000)
		snprintf(buf, size, "%lldh%02lldm", ms / 3600000, ms / 60000 % 60);
	else
		snprintf(buf, size, "%lldd%02lldh", ms / 86400000, ms / 3600000 % 24);
}

void diag_fmt_query(const char *q, size_t width, char *buf, size_t size)
{
	size_t o = 0;
	bool space = false;
	if (size == 0)
		return;
	/* White space collapsed here, then the other control characters escaped. */
	char *one = malloc(size);
	if (one == NULL) {
		buf[0] = '\0';
		return;
	}
	for (const char *p = q ? q : ""; *p && o + 1 < size; p++) {
		if (*p == ' ' || *p == '\t' || *p == '\n' || *p == '\r') {
			space = o > 0;
			continue;
		}
		if (space && o + 1 < size)
			one[o++] = ' ';
		space = false;
		if (o + 1 < size)
			one[o++] = *p;
	}
	one[o] = '\0';
	cli_escape(one, buf, size);
	free(one);
	o = strlen(buf);
	if (width > 3 && o > width) {
		/* Cut on a character boundary (UTF-8 continuation bytes start with 10). */
		size_t cut = width - 3;
		while (cut > 0 && ((unsigned char)buf[cut] & 0xC0) == 0x80)
			cut--;
		snprintf(buf + cut, size - cut, "...");
	}
}

bool diag_stdout_tty(void)
{
	return isatty(STDOUT_FILENO) == 1;
}

int diag_term_width(void)
{
	struct winsize ws;
	if (ioctl(STDOUT_FILENO, TIOCGWINSZ, &ws) == 0 && ws.ws_col >= 40)
		return ws.ws_col;
	return 80;
}

diag_glyphs diag_glyphs_get(void)
{
	static const diag_glyphs utf8 = { "\u251c\u2500 ", "\u2514\u2500 ", "\u2502  ", "   " };
	static const diag_glyphs ascii = { "|- ", "`- ", "|  ", "   " };
	if (!diag_stdout_tty())
		return ascii;
	setlocale(LC_CTYPE, "");
	const char *cs = nl_langinfo(CODESET);
	return cs && strcmp(cs, "UTF-8") == 0 ? utf8 : ascii;
}

void diag_holder_lock(const pgc_diag_session *s, char *buf, size_t size)
{
	for (size_t i = 0; i < s->nlocks; i++)
		if (s->locks[i].key != NULL && pgc_key_describe(s->locks[i].key, buf, size) >= 0)
			return;
	snprintf(buf, size, "?");
}

void diag_watch_header(FILE *f, const char *what, int64_t every_ms, const char *at)
{
	bool tty = diag_stdout_tty();
	char every[32], when[CLI_TIME_MAX];
	if (tty)
		fputs("\033[H\033[2J", f);
	diag_fmt_dur((double)every_ms / 1000.0, every, sizeof every);
	if (at != NULL) {
		cli_fmt_time(at, when, sizeof when);
	} else {
		struct timespec ts;
		clock_gettime(CLOCK_REALTIME, &ts);
		cli_fmt_time_us((int64_t)ts.tv_sec * 1000000, when, sizeof when);
	}
	fprintf(f, "pgcoord %s, every %s, at %s%s\n", what, every, when, tty ? " (Ctrl-C to stop)" : "");
}

void diag_watch_footer(FILE *f)
{
	if (!diag_stdout_tty())
		fputc('\n', f);
}

const char *diag_or_dash(const char *s)
{
	return s && *s ? cli_esc(s) : "-";
}

void diag_session_query(const pgc_diag_session *s, size_t width, char *buf, size_t size)
{
	const char *app = s->application ? s->application : "";
	char lock[PGC_KEY_NAME_MAX + 64] = "";
	/* pgcoord's own sessions run internal statements (set_config, pg_advisory_lock with a
	 * parameter); what they do is wait for or hold one lock, named from the registry. */
	if (strncmp(app, "pgcoord/", 8) == 0 && !s->pgcoord_holder) {
		char who[64];
		snprintf(who, sizeof who, "pgcoord %s", cli_esc(app + 8));
		if (s->wants != NULL && s->wants->key != NULL &&
		    pgc_key_describe(s->wants->key, lock, sizeof lock) >= 0) {
			snprintf(buf, size, "%s: waiting for lock %s", who, cli_esc(lock));
			return;
		}
		for (size_t i = 0; i < s->nlocks; i++)
			if (s->locks[i].granted && s->locks[i].key != NULL &&
			    pgc_key_describe(s->locks[i].key, lock, sizeof lock) >= 0 &&
			    s->state != NULL && strncmp(s->state, "idle", 4) == 0) {
				snprintf(buf, size, "%s: holding lock %s", who, cli_esc(lock));
				return;
			}
	}
	diag_fmt_query(s->query, width, buf, size);
}

void diag_json_dur(FILE *f, double s)
{
	if (s < 0)
		fputs("null", f);
	else
		fprintf(f, "%.3f", s);
}

/* An advisory key as pgcoord lock key prints it: "key" as pgc_key_format() writes it (a
 * string, so that 64-bit values survive JSON parsers), "key_space", and the registered name. */
static void json_key(FILE *f, const pgc_key *k)
{
	char num[PGC_KEY_FORMAT_MAX];
	if (k == NULL || pgc_key_format(k, num, sizeof num) < 0) {
		fputs(",\"key\":null,\"key_space\":null,\"key_name\":null", f);
		return;
	}
	fputs(",\"key\":", f);
	json_str(f, num);
	fprintf(f, ",\"key_space\":\"%s\",\"key_name\":", pgc_key_space_name(k->kind));
	json_str(f, k->name[0] ? k->name : NULL);
}

void diag_json_lock(FILE *f, const pgc_diag_lock *l)
{
	fprintf(f, "{\"pid\":%d,\"locktype\":", l->pid);
	json_str(f, l->locktype);
	fputs(",\"mode\":", f);
	json_str(f, l->mode);
	fprintf(f, ",\"granted\":%s,\"fastpath\":%s,\"waited_s\":", l->granted ? "true" : "false",
	        l->fastpath ? "true" : "false");
	diag_json_dur(f, l->waited_s);
	fputs(",\"database\":", f);
	json_str(f, l->database);
	fputs(",\"relation\":", f);
	json_str(f, l->relation);
	fputs(",\"relkind\":", f);
	json_str(f, l->relkind);
	if (l->page >= 0)
		fprintf(f, ",\"page\":%ld", l->page);
	else
		fputs(",\"page\":null", f);
	if (l->tuple >= 0)
		fprintf(f, ",\"tuple\":%ld", l->tuple);
	else
		fputs(",\"tuple\":null", f);
	fputs(",\"transactionid\":", f);
	json_str(f, l->transactionid);
	fputs(",\"virtualxid\":", f);
	json_str(f, l->virtualxid);
	json_key(f, l->key);
	fputs(",\"target\":", f);
	json_str(f, l->target);
	if (l->table_mode != 0) {
		fputs(",\"blocks\":", f);
		json_str(f, pgc_table_lock_blocks(l->table_mode));
	} else {
		fputs(",\"blocks\":null", f);
	}
	fputc('}', f);
}

static void json_pids(FILE *f, const int *p, size_t n)
{
	fputc('[', f);
	for (size_t i = 0; i < n; i++)
		fprintf(f, "%s%d", i ? "," : "", p[i]);
	fputc(']', f);
}

void diag_json_session(FILE *f, const pgc_diag_snapshot *snap, const pgc_diag_session *s,
                       bool with_locks)
{
	fprintf(f, "{\"pid\":%d,\"known\":%s,\"database\":", s->pid, s->known ? "true" : "false");
	json_str(f, s->database);
	fputs(",\"user\":", f);
	json_str(f, s->user);
	fputs(",\"application\":", f);
	json_str(f, s->application);
	fputs(",\"client\":", f);
	json_str(f, s->client);
	fputs(",\"backend_type\":", f);
	json_str(f, s->backend_type);
	fputs(",\"state\":", f);
	json_str(f, s->state);
	fputs(",\"wait_event_type\":", f);
	json_str(f, s->wait_event_type);
	fputs(",\"wait_event\":", f);
	json_str(f, s->wait_event);
	fputs(",\"backend_age_s\":", f);
	diag_json_dur(f, s->backend_age_s);
	fputs(",\"backend_start\":", f);
	json_str(f, s->backend_start);
	fputs(",\"xact_age_s\":", f);
	diag_json_dur(f, s->xact_age_s);
	fputs(",\"query_age_s\":", f);
	diag_json_dur(f, s->query_age_s);
	fputs(",\"state_age_s\":", f);
	diag_json_dur(f, s->state_age_s);
	fputs(",\"waited_s\":", f);
	diag_json_dur(f, s->waited_s);
	fputs(",\"query\":", f);
	json_str(f, s->query);
	fputs(",\"wants\":", f);
	if (s->wants != NULL)
		diag_json_lock(f, s->wants);
	else
		fputs("null", f);
	fputs(",\"blocked_by\":", f);
	json_pids(f, s->blocked_by, s->nblocked_by);
	fputs(",\"blocked_by_locks\":[", f);
	for (size_t i = 0; snap != NULL && i < s->nblocked_by; i++) {
		bool queued;
		const pgc_diag_lock *why = pgc_diag_blocking_lock(s, pgc_diag_session_find(snap, s->blocked_by[i]),
		                                                  &queued);
		fprintf(f, "%s{\"pid\":%d,\"mode\":", i ? "," : "", s->blocked_by[i]);
		json_str(f, why ? why->mode : NULL);
		fprintf(f, ",\"queued\":%s}", why && queued ? "true" : "false");
	}
	fputc(']', f);
	fputs(",\"blocks\":", f);
	json_pids(f, s->blocks, s->nblocks);
	fprintf(f, ",\"blocks_total\":%zu,\"root\":%s,\"queued_ddl\":%s,\"pgcoord_holder\":%s,\"cycle\":",
	        s->blocks_total, s->root ? "true" : "false", s->queued_ddl ? "true" : "false",
	        s->pgcoord_holder ? "true" : "false");
	if (s->cycle > 0)
		fprintf(f, "%d", s->cycle);
	else
		fputs("null", f);
	if (with_locks) {
		fputs(",\"locks\":[", f);
		for (size_t i = 0; i < s->nlocks; i++) {
			if (i)
				fputc(',', f);
			diag_json_lock(f, &s->locks[i]);
		}
		fputc(']', f);
	}
	fputc('}', f);
}

/* A standby has sessions and locks of its own (advisory locks work there), but not the
 * primary's: say so on stderr, once per change (blockers --watch may follow a failover). The
 * server reports in_hot_standby to the session (PostgreSQL 14+). */
const char *diag_plural(size_t n)
{
	return n == 1 ? "" : "s";
}

/* "pgcoord run holding lock nightly-report (key 4242), by design" */
void diag_holder_label(char *buf, size_t size, const pgc_diag_session *s)
{
	char lock[PGC_KEY_NAME_MAX + 64];
	diag_holder_lock(s, lock, sizeof lock);
	snprintf(buf, size, "pgcoord run holding lock %s, by design", cli_esc(lock));
}

/* "pid 420 idle in transaction for 13.5s (transaction open 18m02s) blocks 7 sessions": how
 * long the session has been in its state, and how long its transaction has been open when it
 * has one (a session lock outlives transactions: then its state's age alone). */
static void describe_root(char *buf, size_t size, const pgc_diag_session *s)
{
	char d[32], x[32], what[PGC_KEY_NAME_MAX + 128], tx[64] = "";
	if (!s->known) {
		snprintf(buf, size, "pid %d (%s) blocks %zu session%s", s->pid, diag_or_dash(s->state),
		         s->blocks_total, diag_plural(s->blocks_total));
		return;
	}
	if (s->pgcoord_holder) {
		/* The holder's transaction is the lock: its age is the hold's. */
		diag_fmt_dur(s->xact_age_s >= 0 ? s->xact_age_s : s->state_age_s, d, sizeof d);
		diag_holder_label(what, sizeof what, s);
		size_t n = strlen(what);
		snprintf(what + n, sizeof what - n, ",");
	} else {
		diag_fmt_dur(s->state_age_s >= 0 ? s->state_age_s : s->xact_age_s, d, sizeof d);
		snprintf(what, sizeof what, "%s", diag_or_dash(s->state));
		if (s->xact_age_s >= 0 && s->state_age_s >= 0) {
			diag_fmt_dur(s->xact_age_s, x, sizeof x);
			snprintf(tx, sizeof tx, " (transaction open %s)", x);
		}
	}
	snprintf(buf, size, "pid %d (%s%s%s) %s for %s%s blocks %zu session%s", s->pid,
	         diag_or_dash(s->user), s->application && *s->application ? ", " : "",
	         s->application && *s->application ? cli_esc(s->application) : "", what, d, tx,
	         s->blocks_total, diag_plural(s->blocks_total));
}

/* Terminal columns of s: UTF-8 continuation bytes take none. */
int diag_columns(const char *s)
{
	int n = 0;
	for (; *s; s++)
		n += ((unsigned char)*s & 0xC0) != 0x80;
	return n;
}

void diag_summary(const pgc_diag_snapshot *snap, char *line, size_t size)
{
	if (snap->nwaiting == 0) {
		size_t off = (size_t)snprintf(line, size, "no session waits for a lock (%zu session%s in %s)",
		                              snap->nsessions, diag_plural(snap->nsessions),
		                              snap->all_databases ? "all databases" : cli_esc(snap->database));
		if (snap->nwaiting_elsewhere > 0 && off < size)
			snprintf(line + off, size - off, "; %zu session%s wait%s in other databases (see -a)",
			         snap->nwaiting_elsewhere, diag_plural(snap->nwaiting_elsewhere),
			         snap->nwaiting_elsewhere == 1 ? "s" : "");
		return;
	}
	size_t off = (size_t)snprintf(line, size, "%zu session%s wait%s for locks; %zu root blocker%s",
	                              snap->nwaiting, diag_plural(snap->nwaiting),
	                              snap->nwaiting == 1 ? "s" : "", snap->nroots, diag_plural(snap->nroots));
	if (snap->ncycles > 0 && off < size)
		off += (size_t)snprintf(line + off, size - off, "; %zu wait cycle%s", snap->ncycles,
		                        diag_plural(snap->ncycles));
	if (snap->nroots > 0 && off < size) {
		char who[512];
		describe_root(who, sizeof who, pgc_diag_session_find(snap, snap->roots[0]));
		snprintf(line + off, size - off, "; worst: %s", who);
	}
}

void diag_json_forest(FILE *f, const pgc_diag_snapshot *snap)
{
	char line[1024];
	diag_summary(snap, line, sizeof line);
	fputs("{\"taken_at\":", f);
	json_str(f, snap->taken_at);
	fputs(",\"database\":", f);
	json_str(f, snap->database);
	fprintf(f, ",\"all_databases\":%s,\"waiting\":%zu,\"waiting_elsewhere\":%zu,\"roots\":[",
	        snap->all_databases ? "true" : "false", snap->nwaiting, snap->nwaiting_elsewhere);
	for (size_t i = 0; i < snap->nroots; i++)
		fprintf(f, "%s%d", i ? "," : "", snap->roots[i]);
	fputs("],\"worst_root\":", f);
	if (snap->nroots > 0)
		fprintf(f, "%d", snap->roots[0]);
	else
		fputs("null", f);
	fputs(",\"queued_ddl\":[", f);
	bool first = true;
	for (size_t i = 0; i < snap->nsessions; i++)
		if (snap->sessions[i].queued_ddl) {
			fprintf(f, "%s%d", first ? "" : ",", snap->sessions[i].pid);
			first = false;
		}
	fputs("],\"cycles\":[", f);
	for (size_t c = 0; c < snap->ncycles; c++) {
		fputs(c ? ",[" : "[", f);
		for (size_t k = 0; k < snap->cycles[c].npids; k++)
			fprintf(f, "%s%d", k ? "," : "", snap->cycles[c].pids[k]);
		fputc(']', f);
	}
	fputs("],\"names_available\":", f);
	fputs(snap->names_available ? "true" : "false", f);
	fputs(",\"summary\":", f);
	json_str(f, line);
	fputs(",\"sessions\":[", f);
	first = true;
	for (size_t i = 0; i < snap->nsessions; i++) {
		const pgc_diag_session *s = &snap->sessions[i];
		if (s->nblocks == 0 && s->nblocked_by == 0 && s->wants == NULL)
			continue;
		if (!first)
			fputc(',', f);
		first = false;
		diag_json_session(f, snap, s, true);
	}
	fputs("],\"edges\":[", f);
	for (size_t e = 0; e < snap->nedges; e++)
		fprintf(f, "%s{\"waiter\":%d,\"blocker\":%d}", e ? "," : "", snap->edges[e].waiter,
		        snap->edges[e].blocker);
	fputs("]}\n", f);
}

static void standby_note(pgc_conn *conn)
{
	static int told = -1;
	PGconn *pg = pgc_conn_pg(conn);
	const char *hs = pg ? PQparameterStatus(pg, "in_hot_standby") : NULL;
	int standby = hs != NULL && strcmp(hs, "on") == 0;
	if (standby == told || (told == -1 && !standby))
		return;
	told = standby;
	if (g_cli.quiet)
		return;
	if (standby)
		fprintf(stderr, "pgcoord: %s:%s is a standby (in recovery): these are its own sessions and locks, "
		        "not the primary's; pgcoord's locks, leases and jobs live on the primary\n",
		        PQhost(pg) ? PQhost(pg) : "?", PQport(pg) ? PQport(pg) : "?");
	else
		fprintf(stderr, "pgcoord: %s:%s is a primary\n", PQhost(pg) ? PQhost(pg) : "?", PQport(pg) ? PQport(pg) : "?");
}

int diag_take(pgc_conn *conn, const pgc_diag_options *opts, pgc_diag_snapshot **out)
{
	pgc_error err = PGC_ERROR_INIT;
	standby_note(conn);
	if (pgc_diag_snapshot_take(conn, opts, out, &err) != PGC_OK)
		return cli_report(&err);
	return 0;
}

void diag_describe(FILE *f, const pgc_diag_snapshot *snap, const pgc_diag_session *s)
{
	char xact[32], st[32], q[4096];
	diag_fmt_dur(s->xact_age_s, xact, sizeof xact);
	diag_fmt_dur(s->state_age_s, st, sizeof st);
	fprintf(f, "pid %d  %s  database %s  user %s  application %s  client %s\n", s->pid,
	        diag_or_dash(s->backend_type), diag_or_dash(s->database), diag_or_dash(s->user),
	        diag_or_dash(s->application), diag_or_dash(s->client));
	fprintf(f, "  state: %s for %s", diag_or_dash(s->state), st);
	if (s->xact_age_s >= 0)
		fprintf(f, ", transaction open for %s", xact);
	else
		fputs(", no open transaction", f);
	fputc('\n', f);
	if (s->pgcoord_holder) {
		char lock[PGC_KEY_NAME_MAX + 64];
		diag_holder_lock(s, lock, sizeof lock);
		fprintf(f, "  pgcoord run holding lock %s, by design: ending it takes the lock from that "
		           "pgcoord run, which then stops its command (exit 75)\n", cli_esc(lock));
	}
	if (s->wants != NULL) {
		char w[32];
		diag_fmt_dur(s->waited_s, w, sizeof w);
		fprintf(f, "  waits %s for %s on %s\n", w, diag_or_dash(s->wants->mode),
		        diag_or_dash(s->wants->target));
	}
	diag_session_query(s, diag_stdout_tty() ? (size_t)diag_term_width() - 9 : 0, q, sizeof q);
	fprintf(f, "  query: %s\n", *q ? q : "-");
	if (s->nblocks == 0) {
		fputs("  blocks no one\n", f);
		return;
	}
	fprintf(f, "  blocks %zu session%s (%zu directly):", s->blocks_total,
	        s->blocks_total == 1 ? "" : "s", s->nblocks);
	for (size_t i = 0; i < s->nblocks && i < 20; i++) {
		const pgc_diag_session *w = pgc_diag_session_find(snap, s->blocks[i]);
		fprintf(f, " %d%s%s%s", s->blocks[i], w && w->application && *w->application ? " (" : "",
		        w && w->application && *w->application ? cli_esc(w->application) : "",
		        w && w->application && *w->application ? ")" : "");
	}
	if (s->nblocks > 20)
		fputs(" ...", f);
	fputc('\n', f);
}

/* cmd_cron_sync.c - pgcoord cron sync: a file of schedules made the database's, and the
 * parser of its lines */
#include <errno.h>
#include <getopt.h>
#include <inttypes.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "child.h"
#include "cli.h"
#include "cmd_cron_int.h"
#include "dbwait.h"
#include "jobcmd.h"
#include "render.h"
#include "util/util.h"

/* ---- sync ------------------------------------------------------------------------------------ */

/* One schedule of a sync file. */
typedef struct sync_entry {
	const char *name;
	pgc_cron_schedule def;
	long lineno;
	bool seen;  /* exists in the database */
	char **cmd; /* the command's words (pointers into the line), or NULL; free() */
} sync_entry;

/* Splits a sync line's command, in place, into words as a shell would without expanding
 * anything: blanks separate words, '...' is literal, "..." takes \" and \\ (and keeps other
 * backslashes), a backslash outside quotes takes the next character. *out (free()) is NULL-
 * terminated. Returns NULL, or what is wrong. */
static const char *split_command(char *p, char ***out, size_t *n_out)
{
	size_t n = 0, cap = 8;
	char **w = malloc(cap * sizeof *w);
	if (w == NULL)
		return "out of memory";
	for (;;) {
		while (*p == ' ' || *p == '\t')
			p++;
		if (*p == '\0')
			break;
		char *o = p, *start = p;
		while (*p && *p != ' ' && *p != '\t') {
			if (*p == '\'') {
				for (p++; *p && *p != '\''; p++)
					*o++ = *p;
				if (*p++ != '\'') {
					free(w);
					return "unterminated ' in the command";
				}
			} else if (*p == '"') {
				for (p++; *p && *p != '"'; p++) {
					if (*p == '\\' && (p[1] == '"' || p[1] == '\\'))
						p++;
					*o++ = *p;
				}
				if (*p++ != '"') {
					free(w);
					return "unterminated \" in the command";
				}
			} else if (*p == '\\' && p[1] != '\0') {
				*o++ = p[1];
				p += 2;
			} else {
				*o++ = *p++;
			}
		}
		bool end = *p == '\0';
		*o = '\0';
		if (n + 2 > cap) {
			char **g = realloc(w, (cap *= 2) * sizeof *w);
			if (g == NULL) {
				free(w);
				return "out of memory";
			}
			w = g;
		}
		w[n++] = start;
		if (end)
			break;
		p++;
	}
	w[n] = NULL;
	if (n == 0 || w[0][0] == '\0') {
		free(w);
		return "no COMMAND after \"--\"";
	}
	*out = w;
	*n_out = n;
	return NULL;
}

/* The standalone word "--" that starts a line's command, outside the payload's JSON strings,
 * or NULL. */
static char *command_sep(char *line)
{
	bool in_str = false;
	for (char *p = line; *p; p++) {
		if (in_str) {
			if (*p == '\\' && p[1] != '\0')
				p++;
			else if (*p == '"')
				in_str = false;
		} else if (*p == '"') {
			in_str = true;
		} else if (p[0] == '-' && p[1] == '-' && (p == line || p[-1] == ' ' || p[-1] == '\t') &&
		           (p[2] == '\0' || p[2] == ' ' || p[2] == '\t')) {
			return p;
		}
	}
	return NULL;
}

/* Parses one line, "NAME FIELD... [key=value...] [payload=JSON]", in place. Returns NULL, or
 * a message (in msg) saying what is wrong. */
static const char *sync_parse_line(char *line, sync_entry *e, char *msg, size_t size)
{
	e->def = (pgc_cron_schedule)PGC_CRON_SCHEDULE_INIT;
	e->cmd = NULL;
	char *sep = command_sep(line);
	if (sep != NULL) {
		*sep = '\0';
		const char *bad = split_command(sep + 2, &e->cmd, &e->def.n_command);
		if (bad != NULL) {
			snprintf(msg, size, "%s", bad);
			return msg;
		}
		e->def.command = (const char *const *)e->cmd;
	}
	char *p = line;
	while (*p == ' ' || *p == '\t')
		p++;
	e->name = p;
	while (*p && *p != ' ' && *p != '\t')
		p++;
	if (*p == '\0') {
		snprintf(msg, size, "expected NAME SCHEDULE queue=Q [options] or NAME SCHEDULE [options] -- COMMAND, got only "
		         "\"%.60s\"", e->name);
		return msg;
	}
	*p++ = '\0';
	/* The schedule's fields: the words up to the first with an '='. */
	char *expr = NULL, *expr_end = NULL;
	for (;;) {
		while (*p == ' ' || *p == '\t')
			p++;
		if (*p == '\0' || (strchr(p, '=') != NULL && (size_t)(strchr(p, '=') - p) < strcspn(p, " \t")))
			break;
		if (expr == NULL)
			expr = p;
		while (*p && *p != ' ' && *p != '\t')
			p++;
		expr_end = p;
	}
	if (expr == NULL) {
		snprintf(msg, size, "schedule %.100s: no cron expression before the options", e->name);
		return msg;
	}
	char *opts = p;
	*expr_end = '\0';
	e->def.expr = expr;
	p = opts;
	while (*p) {
		while (*p == ' ' || *p == '\t')
			p++;
		if (*p == '\0')
			break;
		char *key = p, *eq = strchr(p, '=');
		char *val = eq + 1;
		*eq = '\0';
		if (strcmp(key, "payload") == 0) {
			/* The rest of the line: JSON may hold blanks. */
			size_t n = strlen(val);
			while (n > 0 && (val[n - 1] == ' ' || val[n - 1] == '\t'))
				val[--n] = '\0';
			e->def.payload = val;
			break;
		}
		p = val + strcspn(val, " \t");
		if (*p)
			*p++ = '\0';
		int64_t ms;
		long long n;
		pgc_error err;
		if (strcmp(key, "queue") == 0) {
			e->def.queue = val;
		} else if (strcmp(key, "tz") == 0) {
			e->def.tz = val;
		} else if (strcmp(key, "catch-up") == 0) {
			if (!pgc_cron_catch_up_parse(val, &e->def.catch_up))
				snprintf(msg, size, "catch-up must be skip, once or all, not \"%.40s\"", val);
			else
				continue;
			return msg;
		} else if (strcmp(key, "overlap") == 0) {
			if (!pgc_cron_overlap_parse(val, &e->def.overlap))
				snprintf(msg, size, "overlap must be allow or skip, not \"%.40s\"", val);
			else
				continue;
			return msg;
		} else if (strcmp(key, "max-attempts") == 0) {
			if (!cli_parse_int(val, 1, 1000000, &n)) {
				snprintf(msg, size, "max-attempts must be an integer from 1 to 1000000, not \"%.40s\"", val);
				return msg;
			}
			e->def.max_attempts = (int)n;
		} else if (strcmp(key, "catch-up-max") == 0) {
			if (!cli_parse_int(val, 1, PGC_CRON_CATCHUP_MAX_LIMIT, &n)) {
				snprintf(msg, size, "catch-up-max must be an integer from 1 to %d, not \"%.40s\"",
				         PGC_CRON_CATCHUP_MAX_LIMIT, val);
				return msg;
			}
			e->def.catch_up_max = (int)n;
		} else if (strcmp(key, "catch-up-window") == 0 || strcmp(key, "jitter") == 0) {
			if (pgc_duration_parse(val, &ms, &err) != PGC_OK) {
				snprintf(msg, size, "%s: %s", key, err.message);
				return msg;
			}
			if (key[0] == 'j')
				e->def.jitter_ms = ms;
			else if (ms < 1000) {
				snprintf(msg, size, "catch-up-window must be at least 1s");
				return msg;
			} else
				e->def.catch_up_window_ms = ms;
		} else {
			snprintf(msg, size, "unknown option \"%.40s\" (queue, tz, catch-up, catch-up-window, catch-up-max, "
			         "overlap, jitter, max-attempts, payload)", key);
			return msg;
		}
	}
	if (e->def.queue == NULL && e->cmd == NULL) {
		snprintf(msg, size, "schedule %.100s: no queue=Q and no -- COMMAND", e->name);
		return msg;
	}
	if (e->def.queue != NULL && e->cmd != NULL) {
		snprintf(msg, size, "schedule %.100s: queue= and a COMMAND exclude each other (its jobs go to %s)", e->name,
		         PGC_CRON_COMMAND_QUEUE);
		return msg;
	}
	pgc_cron *c;
	pgc_error err;
	if (pgc_cron_parse(e->def.expr, e->def.tz, &c, &err) != PGC_OK) {
		snprintf(msg, size, "schedule %.100s: %s", e->name, err.message);
		return msg;
	}
	pgc_cron_free(c);
	return NULL;
}

int cron_cmd_sync(int argc, char **argv)
{
	cron_args a;
	int rc = cron_parse_args(argc, argv, "cron sync", A_DRYRUN, &a);
	if (rc != 0)
		return rc < 0 ? 0 : rc;
	if ((rc = cron_want_args(&a, 1, "FILE (a schedule a line: NAME SCHEDULE queue=Q [options])")) != 0)
		return rc;
	const char *file = a.argv[0];
	cli_lines l;
	if ((rc = cli_read_lines(file, &l)) != 0)
		return rc;
	sync_entry *es = calloc(l.n + 1, sizeof *es);
	size_t ne = 0;
	if (es == NULL) {
		cli_lines_free(&l);
		cli_errorf("out of memory");
		return EXIT_SOFTWARE;
	}
	char msg[512];
	rc = 0;
	for (size_t i = 0; rc == 0 && i < l.n; i++) {
		const char *p = l.line[i] + strspn(l.line[i], " \t");
		if (*p == '#' || *p == '\0')
			continue;
		sync_entry *e = &es[ne];
		e->lineno = l.lineno[i];
		const char *bad = sync_parse_line(l.line[i], e, msg, sizeof msg);
		for (size_t k = 0; bad == NULL && k < ne; k++)
			if (strcmp(es[k].name, e->name) == 0) {
				snprintf(msg, sizeof msg, "schedule %.100s is already on line %ld", e->name, es[k].lineno);
				bad = msg;
			}
		if (bad != NULL) {
			cli_errorf("%s:%ld: %s", file, e->lineno, bad);
			rc = EXIT_DATAERR;
		}
		ne++;
	}
	/* No schedule at all would remove every one: an empty file (or a truncated one, or the
	 * wrong one) must not do that unless asked. */
	if (rc == 0 && ne == 0 && !a.allow_empty) {
		cli_errorf("%s has no schedule: syncing it would remove every schedule; pass --allow-empty "
		           "to do that", file);
		rc = EXIT_DATAERR;
	}
	pgc_conn *conn = NULL;
	if (rc == 0)
		rc = cron_open_conn(a.sub, &conn);
	pgc_error err = PGC_ERROR_INIT;
	pgc_cron_info *xs = NULL;
	size_t nx = 0;
	if (rc == 0 && pgc_exec(conn, "BEGIN", &err) != PGC_OK)
		rc = cli_report(&err);
	if (rc == 0 && pgc_cron_list(conn, a.schema, NULL, &xs, &nx, &err) != PGC_OK)
		rc = cron_report(a.sub, &err);
	long added = 0, changed = 0, removed = 0, same = 0;
	const char *pre = a.dry_run ? "would be " : "";
	for (size_t i = 0; rc == 0 && i < ne; i++) {
		bool exists = false, ch = false;
		for (size_t k = 0; k < nx; k++)
			exists = exists || strcmp(xs[k].name, es[i].name) == 0;
		if (pgc_cron_add(conn, a.schema, es[i].name, &es[i].def, PGC_CRON_REPLACE, &ch, &err) != PGC_OK) {
			if (err.code == PGC_EUSAGE || err.code == PGC_ENOTFOUND || (err.code == PGC_ESQL && cli_exit_code(&err) == EXIT_DATAERR)) {
				cli_errorf("%s:%ld: schedule %s: %s", file, es[i].lineno, es[i].name, err.message);
				rc = EXIT_DATAERR;
			} else {
				rc = cli_report(&err);
			}
			break;
		}
		const char *what = !exists ? "added" : ch ? "changed" : "unchanged";
		added += !exists;
		changed += exists && ch;
		same += exists && !ch;
		/* Quiet: the changes only. */
		if (!g_cli.json && (!g_cli.quiet || !exists || ch))
			printf("%s%s %s\n", exists && !ch ? "" : pre, what, es[i].name);
	}
	for (size_t k = 0; rc == 0 && k < nx; k++) {
		bool kept = false;
		for (size_t i = 0; i < ne; i++)
			kept = kept || strcmp(xs[k].name, es[i].name) == 0;
		if (kept)
			continue;
		if (pgc_cron_remove(conn, a.schema, xs[k].name, &err) != PGC_OK) {
			rc = cron_report(a.sub, &err);
			break;
		}
		removed++;
		if (!g_cli.json)
			printf("%sremoved %s\n", pre, xs[k].name);
	}
	if (rc == 0 && pgc_exec(conn, a.dry_run ? "ROLLBACK" : "COMMIT", &err) != PGC_OK)
		rc = cli_report(&err);
	if (rc == 0 && g_cli.json)
		printf("{\"dry_run\":%s,\"added\":%ld,\"changed\":%ld,\"removed\":%ld,\"unchanged\":%ld}\n",
		       a.dry_run ? "true" : "false", added, changed, removed, same);
	pgc_cron_infos_free(xs, nx);
	pgc_conn_close(conn); /* an open transaction rolls back with the session */
	for (size_t i = 0; i < ne; i++)
		free(es[i].cmd);
	free(es);
	cli_lines_free(&l);
	return rc;
}

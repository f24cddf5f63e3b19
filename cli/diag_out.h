/* diag_out.h - what the diagnostics commands share: durations, query text, JSON of sessions
 * and locks, the snapshot options every one of them takes */
#ifndef PGCOORD_DIAG_OUT_H
#define PGCOORD_DIAG_OUT_H

#include <stdbool.h>
#include <stdio.h>

#include "cli.h"

/* "450ms", "3.2s", "18m02s", "2h05m", "3d04h"; "-" for a negative (unknown) duration. */
void diag_fmt_dur(double s, char *buf, size_t size);

/* The query on one line: runs of white space become one space; when width > 0 it is cut to
 * width characters ending in "...". */
void diag_fmt_query(const char *q, size_t width, char *buf, size_t size);

/* True when standard output is a terminal; its width (80 when unknown). */
bool diag_stdout_tty(void);
int diag_term_width(void);

/* Box-drawing pieces: UTF-8 on a terminal with a UTF-8 locale, ASCII otherwise. */
typedef struct diag_glyphs {
	const char *tee, *last, *pipe, *blank;
} diag_glyphs;
diag_glyphs diag_glyphs_get(void);

/* JSON: a duration in seconds (3 decimals) or null; a lock object; a session object with its
 * wanted lock, blocked_by, the lock each blocker holds or requested (from snap, may be NULL),
 * blocks and (when with_locks) all its locks. */
void diag_json_dur(FILE *f, double s);
void diag_json_lock(FILE *f, const pgc_diag_lock *l);
void diag_json_session(FILE *f, const pgc_diag_snapshot *snap, const pgc_diag_session *s,
                       bool with_locks);

/* The blocking forest as pgcoord blockers --json and /api/blockers print it: the roots, worst
 * first, cycles, queued DDL, and every session that waits or blocks. */
void diag_json_forest(FILE *f, const pgc_diag_snapshot *snap);

/* The forest's one-line summary: how many wait, the roots, cycles, and the worst root. */
void diag_summary(const pgc_diag_snapshot *snap, char *line, size_t size);

/* "" for 1, "s" otherwise. */
const char *diag_plural(size_t n);

/* "pgcoord run holding lock nightly-report (key 4242), by design" */
void diag_holder_label(char *buf, size_t size, const pgc_diag_session *s);

/* Terminal columns of s: UTF-8 continuation bytes take none. */
int diag_columns(const char *s);

/* What a pgcoord lock holder (pgc_diag_session.pgcoord_holder) holds, as pgc_key_describe()
 * shows keys: "nightly-report (key 4242)", "20,7", or "?" when no advisory lock is seen. */
void diag_holder_lock(const pgc_diag_session *s, char *buf, size_t size);

/* The top of each screen of a --watch in human output: on a terminal clears it first; then
 * "pgcoord WHAT, every 2.0s, at 2026-12-01T11:47:53Z (Ctrl-C to stop)". at is the time of the
 * data (PostgreSQL's text of a timestamptz), NULL for this host's clock now. */
void diag_watch_header(FILE *f, const char *what, int64_t every_ms, const char *at);
/* Between two screens of a --watch: a blank line when standard output is not a terminal. */
void diag_watch_footer(FILE *f);

/* What a session runs, for human output: the query as diag_fmt_query() shows it, except for
 * pgcoord's own sessions (application_name pgcoord/...), whose internal statements say
 * nothing: "pgcoord run: waiting for lock nightly (key 42)", "pgcoord run: holding lock ...". */
void diag_session_query(const pgc_diag_session *s, size_t width, char *buf, size_t size);

/* "alice" (escaped as cli_esc() does), "-" for NULL or empty. */
const char *diag_or_dash(const char *s);

/* Takes a snapshot, printing any error; returns 0 or the exit code. */
int diag_take(pgc_conn *conn, const pgc_diag_options *opts, pgc_diag_snapshot **out);

/* Prints who a session is, for cancel and terminate: user, application, client, state,
 * transaction age, the query and what it blocks. */
void diag_describe(FILE *f, const pgc_diag_snapshot *snap, const pgc_diag_session *s);

#endif

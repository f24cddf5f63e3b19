/* cli.h - what the pgcoord subcommands share: globals, exit codes, output helpers */
#ifndef PGCOORD_CLI_H
#define PGCOORD_CLI_H

#include <stdbool.h>
#include <stdio.h>

#include "pgcoord.h"

/* Exit codes: flock(1) and sysexits(3) where they apply. Listed in `pgcoord --help` and in
 * docs/pgcoord.1; they are API. */
enum {
	EXIT_CONFLICT = 1,     /* lock held elsewhere, timeout, or "something found" */
	EXIT_USAGE = 64,       /* EX_USAGE: bad command line */
	EXIT_DATAERR = 65,     /* EX_DATAERR: bad input data (SQL, JSON, ...) */
	EXIT_UNAVAILABLE = 69, /* EX_UNAVAILABLE: database unreachable */
	EXIT_SOFTWARE = 70,    /* EX_SOFTWARE: internal error */
	EXIT_LOCKLOST = 75,    /* EX_TEMPFAIL: the lock or lease was lost */
	EXIT_NOPERM = 77,      /* EX_NOPERM: credentials refused, or a privilege missing (42501) */
	EXIT_CONFIG = 78,      /* EX_CONFIG: a connection setting cannot work (sslmode, port,
	                          host name, database), or the pooler in between cannot keep
	                          what was asked */
	EXIT_NOEXEC = 126,     /* command found but not executable */
	EXIT_NOTFOUND = 127    /* command not found */
};

/* Options given before the subcommand. */
typedef struct cli_globals {
	const char *dsn; /* -d/--dsn, or NULL */
	bool json;       /* --json */
	bool quiet;      /* -q/--quiet */
} cli_globals;

extern cli_globals g_cli;

typedef struct cli_command {
	const char *name;
	int (*fn)(int argc, char **argv);
	const char *summary;
} cli_command;

/* "pgcoord: <msg>" on stderr, then the "Try ... --help" line; returns EXIT_USAGE. */
int cli_usage_error(const char *cmd, const char *fmt, ...) PGC_PRINTF(2, 3);

/* The usage error for what getopt_long returned in ch when it is not an option of cmd
 * (NULL: a global option): ':' "option X needs a value", anything else "unknown option X",
 * X being argv[optind - 1]. Returns EXIT_USAGE. */
int cli_getopt_error(const char *cmd, int ch, char **argv);

/* "pgcoord: <msg>" on stderr. */
void cli_errorf(const char *fmt, ...) PGC_PRINTF(1, 2);

/* Prints err as "pgcoord: <message>" plus detail and hint lines on stderr, and returns the
 * exit code for its code: 69 for connection failures, 64 for usage, 65 for SQL errors caused
 * by the input (syntax, data, constraints), 70 otherwise. */
int cli_report(const pgc_error *err);
int cli_exit_code(const pgc_error *err);

/* Under --json, when rc is not 0 and an error was reported (cli_report, cli_usage_error,
 * cli_errorf; warnings aside), prints the first one as one line on stdout:
 * {"error":{"message":...,"detail":...,"hint":...,"sqlstate":...,"class":...,"reason":...,
 * "exit":rc}}, the fields that are not known null. Called once, by cli_main. */
void cli_json_error(int rc);
/* Says that the command's JSON result reports its failure itself (pgcoord tx's "status":
 * "failed" with its "error"): cli_json_error then prints nothing. */
void cli_json_error_shown(void);

/* Connects with the global DSN and application_name "pgcoord/<cmd>". On failure prints one
 * line and returns EXIT_UNAVAILABLE (or another exit code); 0 on success. */
int cli_connect(const char *cmd, pgc_conn **out);

/* Writes s as a JSON string literal (with quotes); NULL becomes null. Bytes that are not
 * well-formed UTF-8 become U+FFFD, so the output is always valid JSON. */
void json_str(FILE *f, const char *s);
/* s as a Prometheus label value, quoted, with \\, " and newlines escaped. */
void cli_prom_label(FILE *f, const char *s);

/* Prometheus text (prom.c): the queue figures as queue stats --prometheus prints them (h
 * NULL: without the tables' health), and the schedules as cron list --prometheus does. */
void cli_prom_queue_stats(FILE *f, const pgc_queue_stat *st, size_t n, const pgc_queue_health *h);
void cli_prom_cron(FILE *f, const pgc_cron_info *xs, size_t n);
void cli_prom_queue_keys(FILE *f, const pgc_queue_key_info *k, size_t nk);

/* Parses the duration value of option opt of command cmd ("500ms", "2s", "5m") into *out, in
 * [min_ms, max_ms]; on failure prints the usage error and sets *rc to EXIT_USAGE. */
bool cli_duration_opt(const char *cmd, const char *opt, const char *text, int64_t min_ms,
                      int64_t max_ms, int64_t *out, int *rc);

/* A value of a TIME option: a time, or a duration from now (to add on the server's clock). */
typedef struct cli_time {
	bool relative;   /* a DURATION from now: rel_ms */
	int64_t rel_ms;
	int64_t unix_s;  /* else the time: seconds since 1970 (UTC) and microseconds */
	int32_t usec;
} cli_time;

/* The one grammar of every option that takes a TIME (queue enqueue --run-at, cron next
 * --from): ISO 8601 with an offset or Z ("2026-12-04T09:30:00Z", "2026-12-04 10:30:00.25+01:00";
 * a fraction of a second is kept to the microsecond), @SECONDS since 1970, or a DURATION from
 * now ("90s", "2h", "1d"). Years 0001 to 9999: never "infinity", "epoch", "yesterday" or a
 * form that depends on the server's DateStyle. A time without an offset is read in zone when
 * zone is given (cron next's --tz), and refused without one. On failure prints the usage error
 * and sets *rc to EXIT_USAGE. */
bool cli_time_opt(const char *cmd, const char *opt, const char *text, const pgc_cron *zone, cli_time *out,
                  int *rc);

/* An absolute t as ISO 8601 in UTC with microseconds ("2026-12-04T09:30:00.250000+00:00"),
 * which PostgreSQL reads the same under every DateStyle, in buf (CLI_TIME_ISO_MAX bytes). */
#define CLI_TIME_ISO_MAX 40
char *cli_time_iso(const cli_time *t, char *buf);

/* ms as the tool prints every duration (pgc_duration_format: "1d", "90s", "1500ms"), in buf
 * (PGC_DURATION_FORMAT_MAX bytes); returns buf. A negative ms prints as "0s". */
char *cli_duration_str(int64_t ms, char *buf);

/* A file of JSON lines, split: the non-blank lines (a final CR removed) with their 1-based
 * line numbers, pointing into buf. */
typedef struct cli_lines {
	char *buf;
	char **line;
	long *lineno;
	size_t n;
} cli_lines;

enum { CLI_LINES_NUL = -1, CLI_LINES_NOMEM = -2 };

/* Reads FILE ("-" for standard input) and splits it; on failure prints one line and returns
 * the exit code (65 unreadable or a NUL byte, 70 out of memory). */
int cli_read_lines(const char *path, cli_lines *l);
/* Splits buf[0..len) (buf[len] must be writable, it becomes a terminator) into l, which takes
 * buf over: cli_lines_free frees it, whatever this returns. 0, CLI_LINES_NUL when buf holds a
 * NUL byte, or CLI_LINES_NOMEM. Prints nothing. */
int cli_split_lines(char *buf, size_t len, cli_lines *l);
void cli_lines_free(cli_lines *l);


/* Human output of text from the server or the user (names, application names, queries):
 * control characters become \n, \t, \r or \xHH, C1 controls \u0080-\u009f and bytes that are
 * not UTF-8 \xHH, so that a name cannot split a line or drive the terminal. Writes at most
 * size - 1 bytes (cut on a character boundary) and returns buf; NULL becomes "". */
const char *cli_escape(const char *s, char *buf, size_t size);
/* The same into one of 16 buffers of this thread, reused in turn: for printf arguments. Text
 * longer than 1023 bytes escaped is cut. */
const char *cli_esc(const char *s);

/* The last line of a job's error or output that is not blank (a traceback's exception, the
 * "ValueError: bad" after "Traceback (most recent call last):"), trailing blanks left out,
 * into buf (at most size - 1 bytes, not escaped: as the text has it). NULL and text with no
 * such line give "". What queue list, cron history and the dashboard show of a failure; the
 * whole text is in queue show. */
const char *cli_last_line(const char *s, char *buf, size_t size);

/* A timestamp as every human output shows it: ISO 8601 in UTC to the second,
 * "2026-12-01T11:47:53Z". pg is PostgreSQL's text of a timestamptz in any of its ISO forms
 * ("2026-12-01 12:47:53.1+01", "2026-12-01T11:47:53.123Z", ...); text it cannot read is
 * copied unchanged ("infinity"), NULL or "" gives "-". us is microseconds since the epoch
 * (0: "-"). Both return buf. */
#define CLI_TIME_MAX 32
const char *cli_fmt_time(const char *pg, char *buf, size_t size);
const char *cli_fmt_time_us(int64_t us, char *buf, size_t size);

/* Parses a whole decimal integer in [min, max]; false when text is not one. */
bool cli_parse_int(const char *text, long long min, long long max, long long *out);

/* The whole tool: global options, then the subcommand; returns the exit status. */
int cli_main(int argc, char **argv);

/* Subcommands. */
int cmd_init(int argc, char **argv);
int cmd_info(int argc, char **argv);
int cmd_lab(int argc, char **argv);
int cmd_doctor(int argc, char **argv);
int cmd_elect(int argc, char **argv);
int cmd_lease(int argc, char **argv);
int cmd_tx(int argc, char **argv);
int cmd_lock(int argc, char **argv);
int cmd_run(int argc, char **argv);
/* diagnostics: cmd_blockers.c, cmd_locks.c, cmd_activity.c, cmd_cancel.c, cmd_probe.c */
int cmd_blockers(int argc, char **argv);
int cmd_locks(int argc, char **argv);
int cmd_activity(int argc, char **argv);
int cmd_cancel(int argc, char **argv);
int cmd_terminate(int argc, char **argv);
int cmd_probe(int argc, char **argv);
int cmd_queue(int argc, char **argv);
int cmd_worker(int argc, char **argv);
int cmd_cron(int argc, char **argv);
int cmd_web(int argc, char **argv);

#endif

/* dbwait.h - --wait-for-db: long-running commands that start before the database does
 *
 * worker, elect and run connect once at start-up. Without --wait-for-db a database that does
 * not answer ends them at once with 69, as before. With it, failures of the transient kinds
 * (connection refused or timed out, a name server that cannot answer yet, a server starting
 * up or shutting down, 57P03, too many connections, 53300) are retried with capped
 * exponential backoff, and logged once at the first failure and then at most once a minute;
 * credentials refused (77) and settings that cannot work (78) still end the command at once.
 * A signal ends the wait at once. */
#ifndef PGCOORD_CLI_DBWAIT_H
#define PGCOORD_CLI_DBWAIT_H

#include <stdbool.h>
#include <stdint.h>

#include "pgcoord.h"

#define CLI_DBWAIT_OFF 0      /* limit: fail at once (the default) */
#define CLI_DBWAIT_FOREVER -1 /* limit: no limit (--wait-for-db without a value) */

#define CLI_DBWAIT_FIRST_MS 250   /* the first retry's delay; doubles per attempt */
#define CLI_DBWAIT_MAX_MS 5000    /* cap of the delay */
#define CLI_DBWAIT_LOG_MS 60000   /* at most one "still waiting" line this often */

typedef struct cli_dbwait {
	const char *cmd;     /* for messages */
	int64_t limit_ms;    /* CLI_DBWAIT_OFF, CLI_DBWAIT_FOREVER, or a limit */
	int64_t started_ms;  /* CLOCK_MONOTONIC of the first failure; 0 before */
	int64_t next_log_ms;
	int64_t delay_ms;
	long attempts;       /* failed attempts so far */
} cli_dbwait;

/* A cli_dbwait for cmd with the given limit. */
cli_dbwait cli_dbwait_init(const char *cmd, int64_t limit_ms);

/* Parses --wait-for-db's optional value (NULL: no limit) into *limit_ms; on a bad value prints
 * the usage error and sets *rc to EXIT_USAGE. A limit of 0 means "do not wait". */
bool cli_dbwait_opt(const char *cmd, const char *value, int64_t *limit_ms, int *rc);

/* Whether err, from a connection attempt, is worth waiting out. */
bool cli_dbwait_transient(const pgc_error *err);

/* After a failed connection attempt with err: sleeps before the next attempt and returns 0;
 * or returns the exit code when it is time to stop: cli_report(err)'s when err is not
 * transient or waiting is off, EXIT_UNAVAILABLE when the limit has passed. A signal
 * (SIGINT, SIGTERM, SIGHUP, SIGQUIT) ends the sleep: returns -N for signal N. The sleep takes
 * signals from cli_signal_fd() or, when the calling thread blocks SIGTERM (the worker takes
 * them with sigwait), with sigtimedwait. */
int cli_dbwait_failed(cli_dbwait *w, const pgc_error *err);

/* After a successful attempt: says how long the wait took, if there was one. */
void cli_dbwait_done(cli_dbwait *w);

/* cli_connect(cmd, out) that waits as cli_dbwait_failed says. Returns 0, an exit code, or
 * 128 + N when signal N ended the wait. */
int cli_connect_wait(const char *cmd, int64_t limit_ms, pgc_conn **out);

#endif

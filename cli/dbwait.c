/* dbwait.c - --wait-for-db: retrying the start-up connection with backoff and a bounded log
 *
 * The wait is a sequence of attempts made by the caller; after each failure cli_dbwait_failed
 * decides whether to go on, logs (the first failure, then at most one line a minute, each
 * saying how long it has been), and sleeps: a delay that doubles from 250 ms up to 5 s, with
 * jitter so that many services started together by one boot do not knock in step. */
#include <errno.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "child.h"
#include "cli.h"
#include "dbwait.h"
#include "util/util.h"

cli_dbwait cli_dbwait_init(const char *cmd, int64_t limit_ms)
{
	cli_dbwait w;
	memset(&w, 0, sizeof w);
	w.cmd = cmd;
	w.limit_ms = limit_ms;
	w.delay_ms = CLI_DBWAIT_FIRST_MS;
	return w;
}

bool cli_dbwait_opt(const char *cmd, const char *value, int64_t *limit_ms, int *rc)
{
	if (value == NULL) {
		*limit_ms = CLI_DBWAIT_FOREVER;
		return true;
	}
	return cli_duration_opt(cmd, "--wait-for-db", value, 0, INT64_MAX / 2, limit_ms, rc);
}

bool cli_dbwait_transient(const pgc_error *err)
{
	/* PGC_EAUTH (77) and PGC_ECONFIG (78: a bad setting, a database that does not exist, a
	 * host name the name server says does not exist) will not get better by waiting. An
	 * answer from the server counts only when it says "later" (57P01-57P03, 53300, 08xxx). */
	if (err->code != PGC_ECONNECT && err->code != PGC_ECONNLOST)
		return false;
	return err->sqlstate[0] == '\0' || err->klass == PGC_CLASS_RETRY_LATER;
}

/* "45s", "3m05s", "2h00m". */
static void fmt_elapsed(int64_t ms, char *buf, size_t size)
{
	int64_t s = ms / 1000;
	if (s < 60)
		snprintf(buf, size, "%llds", (long long)s);
	else if (s < 3600)
		snprintf(buf, size, "%lldm%02llds", (long long)(s / 60), (long long)(s % 60));
	else
		snprintf(buf, size, "%lldh%02lldm", (long long)(s / 3600), (long long)(s / 60 % 60));
}

/* Sleeps ms; returns the stop signal that ended the sleep, or 0. */
static int sleep_for_signal(int64_t ms)
{
	sigset_t cur;
	pthread_sigmask(SIG_BLOCK, NULL, &cur);
	if (sigismember(&cur, SIGTERM)) {
		/* The caller takes its signals with sigwait: they stay pending until taken here. */
		sigset_t stop;
		cli_stop_signals(&stop);
		int64_t until = pgc__now_ms() + ms;
		for (;;) {
			int64_t left = until - pgc__now_ms();
			if (left <= 0)
				return 0;
			struct timespec ts = { (time_t)(left / 1000), (long)(left % 1000) * 1000000L };
			int sig = sigtimedwait(&stop, NULL, &ts);
			if (sig > 0)
				return sig;
			if (errno == EAGAIN)
				return 0;
		}
	}
	int fd = cli_signal_fd();
	int64_t until = pgc__now_ms() + ms;
	for (;;) {
		int64_t left = until - pgc__now_ms();
		if (left <= 0)
			return 0;
		struct pollfd p = { fd, POLLIN, 0 };
		if (poll(&p, fd >= 0 ? 1 : 0, (int)(left > 60000 ? 60000 : left)) > 0) {
			char buf[64];
			while (read(fd, buf, sizeof buf) > 0)
				; /* a SIGCHLD wakes us too: only the stop signals count */
			int sig = cli_signal_take();
			if (sig != 0)
				return sig;
		}
	}
}

int cli_dbwait_failed(cli_dbwait *w, const pgc_error *err)
{
	if (w->limit_ms == CLI_DBWAIT_OFF || !cli_dbwait_transient(err))
		return cli_report(err);
	int64_t now = pgc__now_ms();
	char took[32];
	w->attempts++;
	if (w->started_ms == 0) {
		w->started_ms = now;
		w->next_log_ms = now + CLI_DBWAIT_LOG_MS;
		if (!g_cli.quiet) {
			char limit[48] = "", d[PGC_DURATION_FORMAT_MAX];
			if (w->limit_ms > 0)
				snprintf(limit, sizeof limit, ", for at most %s", cli_duration_str(w->limit_ms, d));
			cli_errorf("%s; waiting for the database (--wait-for-db%s)", err->message, limit);
		}
	} else if (now >= w->next_log_ms) {
		w->next_log_ms = now + CLI_DBWAIT_LOG_MS;
		fmt_elapsed(now - w->started_ms, took, sizeof took);
		if (!g_cli.quiet)
			cli_errorf("still waiting for the database after %s (%ld attempts): %s", took,
			           w->attempts, err->message);
	}
	int64_t delay = w->delay_ms;
	/* Up to a quarter less, so that services started together spread out. */
	delay -= (int64_t)(((unsigned)getpid() * 2654435761u + (unsigned)now) % (unsigned)(delay / 4 + 1));
	if (w->limit_ms > 0) {
		int64_t left = w->started_ms + w->limit_ms - now;
		if (left <= 0) {
			fmt_elapsed(now - w->started_ms, took, sizeof took);
			cli_errorf("database still unavailable after %s (%ld attempt%s), giving up: %s", took,
			           w->attempts, w->attempts == 1 ? "" : "s", err->message);
			return EXIT_UNAVAILABLE;
		}
		if (delay > left)
			delay = left; /* one last attempt at the limit */
	}
	w->delay_ms = w->delay_ms * 2 > CLI_DBWAIT_MAX_MS ? CLI_DBWAIT_MAX_MS : w->delay_ms * 2;
	int sig = sleep_for_signal(delay);
	return sig ? -sig : 0;
}

void cli_dbwait_done(cli_dbwait *w)
{
	if (w->started_ms == 0 || g_cli.quiet)
		return;
	char took[32];
	fmt_elapsed(pgc__now_ms() - w->started_ms, took, sizeof took);
	cli_errorf("database available after %s (%ld failed attempt%s)", took, w->attempts,
	           w->attempts == 1 ? "" : "s");
}

int cli_connect_wait(const char *cmd, int64_t limit_ms, pgc_conn **out)
{
	char app[64];
	snprintf(app, sizeof app, "pgcoord/%s", cmd);
	pgc_conn_options opts = PGC_CONN_OPTIONS_INIT;
	opts.application_name = app;
	cli_dbwait w = cli_dbwait_init(cmd, limit_ms);
	for (;;) {
		pgc_error err = PGC_ERROR_INIT;
		if (pgc_connect(g_cli.dsn, &opts, out, &err) == PGC_OK) {
			cli_dbwait_done(&w);
			return 0;
		}
		int rc = cli_dbwait_failed(&w, &err);
		if (rc > 0)
			return rc;
		if (rc < 0) {
			cli_errorf("%s: stopped while waiting for the database", strsignal(-rc));
			return 128 - rc;
		}
	}
}

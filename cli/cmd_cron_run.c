/* cmd_cron_run.c - pgcoord cron run: the scheduler, a worker that fires the due ticks and
 * runs command schedules' jobs */
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

/* ---- run: the scheduler --------------------------------------------------------------------- */

/* Sleeps up to ms, woken by a stop signal: returns it, or 0. */
static int nap(int64_t ms)
{
	int fd = cli_signal_fd();
	struct pollfd p = { fd, POLLIN, 0 };
	if (poll(&p, 1, (int)ms) > 0) {
		char buf[64];
		ssize_t r = read(fd, buf, sizeof buf);
		(void)r;
	}
	return cli_signal_take();
}

/* Errors after which the scheduler reconnects rather than stops. */
static bool transient(const pgc_error *e)
{
	return e->code == PGC_ECONNLOST || e->code == PGC_ECONNECT || e->code == PGC_ETIMEDOUT ||
	       e->klass == PGC_CLASS_RETRY_LATER || e->klass == PGC_CLASS_RETRY_TX;
}

/* The scheduler's session, shared with the worker's handler threads, which read a command
 * schedule's command on it (what runs is what the schedule's row says, never what a job
 * carries). The mutex makes one user at a time; conn is NULL while the scheduler reconnects. */
typedef struct cron_shared {
	pthread_mutex_t mu;
	pgc_conn *conn;
	const char *schema;
} cron_shared;

static pgc_job_outcome resolve_command(const pgc_job *job, char ***argv, char *error, size_t size, void *arg)
{
	cron_shared *sh = arg;
	char name[PGC_CRON_NAME_MAX + 1], tick[PGC_CRON_NAME_MAX + 1];
	if (!pgc_cron_payload_tick(job->payload, name, tick, sizeof name)) {
		snprintf(error, size, "job %lld in %s is not a tick of a command schedule (no \"cron\" member)",
		         (long long)job->id, job->queue);
		return PGC_JOB_FAIL;
	}
	pgc_error err = PGC_ERROR_INIT;
	int rc = PGC_ECONNLOST;
	pthread_mutex_lock(&sh->mu);
	bool connected = sh->conn != NULL;
	if (connected)
		rc = pgc_cron_command(sh->conn, sh->schema, name, argv, &err);
	pthread_mutex_unlock(&sh->mu);
	if (rc == PGC_OK)
		return PGC_JOB_COMPLETE;
	snprintf(error, size, "schedule %s: %s", name, connected ? err.message : "the scheduler is reconnecting");
	return rc == PGC_ENOTFOUND || rc == PGC_EUSAGE ? PGC_JOB_FAIL : PGC_JOB_RETRY_LATER;
}

static void log_line(pgc_log_level level, const char *msg, void *arg)
{
	(void)arg;
	if (level == PGC_LOG_DEBUG || (g_cli.quiet && level < PGC_LOG_WARN))
		return;
	fprintf(stderr, "pgcoord cron: %s\n", msg);
}

/* After the first stop signal, a second one stops the worker at once. */
static void *second_signal(void *arg)
{
	pgc_worker *w = arg;
	sigset_t s;
	cli_stop_signals(&s);
	int sig;
	if (sigwait(&s, &sig) == 0) {
		if (!g_cli.quiet)
			fprintf(stderr, "pgcoord cron: %s: stopping now\n", strsignal(sig));
		pgc_worker_stop(w, 0);
	}
	return NULL;
}

/* The worker of the command schedules: the queue PGC_CRON_COMMAND_QUEUE, cli/jobcmd.c's
 * handler, its threads with the stop signals blocked so that they reach the main thread. */
static int start_worker(const cron_args *a, cli_jobcmd *jc, bool once, pgc_worker **out, pgc_error *err)
{
	static const char *const queues[] = { PGC_CRON_COMMAND_QUEUE };
	pgc_worker_options o = PGC_WORKER_OPTIONS_INIT;
	o.dsn = pgc_dsn_resolve(g_cli.dsn, NULL);
	o.schema = a->schema;
	o.queues = queues;
	o.n_queues = 1;
	o.concurrency = (int)a->concurrency;
	o.log = log_line;
	o.application_name = "pgcoord/cron";
	o.once = once;
	sigset_t stop, old;
	cli_stop_signals(&stop);
	pthread_sigmask(SIG_BLOCK, &stop, &old);
	*out = NULL;
	int rc = pgc_worker_new(&o, cli_jobcmd_run, jc, out, err);
	if (rc == PGC_OK)
		rc = pgc_worker_start(*out, err);
	pthread_sigmask(SIG_SETMASK, &old, NULL);
	if (rc != PGC_OK) {
		pgc_worker_free(*out);
		*out = NULL;
	}
	return rc;
}

/* Stops the worker (grace_ms for its running commands, a second signal: at once) and waits. */
static int stop_worker(pgc_worker *w, int64_t grace_ms, bool asked)
{
	if (w == NULL)
		return 0;
	sigset_t stop;
	cli_stop_signals(&stop);
	pthread_sigmask(SIG_BLOCK, &stop, NULL);
	pthread_t second;
	bool have_second = pthread_create(&second, NULL, second_signal, w) == 0;
	if (asked)
		pgc_worker_stop(w, grace_ms);
	pgc_error err;
	int rc = pgc_worker_wait(w, &err) != PGC_OK ? cli_report(&err) : 0;
	if (have_second) {
		pthread_cancel(second);
		pthread_join(second, NULL);
	}
	pgc_worker_stats st;
	pgc_worker_get_stats(w, &st);
	if (!g_cli.quiet)
		fprintf(stderr, "pgcoord cron: commands: %ld completed, %ld failed, %ld retried later, %ld released\n",
		        st.completed, st.failed, st.retried, st.released);
	pgc_worker_free(w);
	return rc;
}

int cron_cmd_run(int argc, char **argv)
{
	cron_args a;
	int rc = cron_parse_args(argc, argv, "cron run", A_RUN, &a);
	if (rc != 0)
		return rc < 0 ? 0 : rc;
	if ((rc = cron_want_args(&a, 0, "")) != 0)
		return rc;
	if (a.no_commands && (a.concurrency != CONCURRENCY_DEFAULT || a.timeout_ms > 0 || a.grace_ms != GRACE_DEFAULT_MS))
		return cli_usage_error(a.sub, "--no-commands runs no command: -c, --timeout and --grace do not apply");
	if (cli_signal_fd() < 0) {
		cli_errorf("cannot set up signal handling");
		return EXIT_SOFTWARE;
	}
	/* Before any thread or connection: if this process dies, even by SIGKILL, the guard kills
	 * what the schedules' commands still run (cli/child.c). */
	if (!a.no_commands && (rc = cli_child_guard_start(2000)) != 0)
		return rc;
	signal(SIGPIPE, SIG_IGN);
	char host[256] = "?", id[300];
	if (gethostname(host, sizeof host) != 0)
		snprintf(host, sizeof host, "?");
	host[sizeof host - 1] = '\0';
	snprintf(id, sizeof id, "%.200s:%d", host, (int)getpid());
	pgc_conn *conn = NULL;
	if ((rc = cli_connect_wait("cron run", a.dbwait_ms, &conn)) != 0)
		return rc >= 128 ? 0 : rc;
	cron_shared sh = { PTHREAD_MUTEX_INITIALIZER, conn, a.schema };
	cli_jobcmd jc = CLI_JOBCMD_INIT;
	jc.timeout_ms = a.timeout_ms;
	jc.grace_ms = a.grace_ms;
	jc.resolve = resolve_command;
	jc.resolve_arg = &sh;
	pgc_worker *w = NULL;
	pgc_error werr = PGC_ERROR_INIT;
	if (!a.no_commands && !a.once && start_worker(&a, &jc, false, &w, &werr) != PGC_OK) {
		pgc_conn_close(conn);
		return werr.code == PGC_ENOSCHEMA ? (cli_report(&werr), EXIT_UNAVAILABLE) : cli_report(&werr);
	}
	if (!g_cli.quiet && !a.once) {
		char td[PGC_DURATION_FORMAT_MAX];
		fprintf(stderr, "pgcoord cron: scheduler %s, schema %s, on the database's clock", id, a.schema);
		if (w != NULL)
			fprintf(stderr, "; commands: %lld at once, timeout %s", a.concurrency,
			        a.timeout_ms > 0 ? cli_duration_str(a.timeout_ms, td) : "none");
		fputc('\n', stderr);
	}
	int sig = 0;
	int64_t last_warn = 0;
	long total = 0;
	for (;;) {
		pgc_cron_fire_result res;
		pgc_error err = PGC_ERROR_INIT;
		pthread_mutex_lock(&sh.mu);
		int frc = pgc_cron_fire_due(conn, a.schema, id, (int)a.batch, a.lookahead_ms, &res, &err);
		pthread_mutex_unlock(&sh.mu);
		if (frc != PGC_OK) {
			if (!transient(&err) || a.once) {
				rc = err.code == PGC_ENOSCHEMA ? (cli_report(&err), EXIT_UNAVAILABLE) : cli_report(&err);
				break;
			}
			if (!g_cli.quiet)
				fprintf(stderr, "pgcoord cron: %s; reconnecting\n", err.message);
			pthread_mutex_lock(&sh.mu);
			pgc_conn_close(conn);
			conn = sh.conn = NULL;
			pthread_mutex_unlock(&sh.mu);
			if ((sig = nap(250)) != 0)
				break;
			if ((rc = cli_connect_wait("cron run", CLI_DBWAIT_FOREVER, &conn)) != 0) {
				if (rc >= 128) {
					rc = 0;
					sig = -1;
				}
				break;
			}
			pthread_mutex_lock(&sh.mu);
			sh.conn = conn;
			pthread_mutex_unlock(&sh.mu);
			if (!g_cli.quiet)
				fprintf(stderr, "pgcoord cron: reconnected\n");
			continue;
		}
		total += res.enqueued;
		if (!g_cli.quiet && (res.missed > 0 || res.skipped > 0))
			fprintf(stderr, "pgcoord cron: %ld enqueued, %ld missed, %ld skipped (overlap)\n", res.enqueued,
			        res.missed, res.skipped);
		int64_t now = pgc__now_ms();
		if (res.failed > 0 && !g_cli.quiet && now - last_warn >= 60000) {
			fprintf(stderr, "pgcoord cron: warning: schedule %s cannot be fired on this host: %s\n", res.failed_name,
			        res.failed_err.message);
			last_warn = now;
		}
		if (res.schedules >= a.batch)
			continue; /* more are due */
		if (a.once)
			break;
		/* Until the next tick by the server's clock, and at most a second, so that edits,
		 * pauses and new schedules are seen. A tick that is due but locked by another
		 * scheduler (or that this host cannot compute) is looked at again shortly. */
		int64_t ms = res.next_due_ms < 0 || res.next_due_ms > 1000 ? 1000 : res.next_due_ms;
		if (res.failed > 0 && ms < 1000)
			ms = 1000;
		if (ms < 20)
			ms = 20;
		if ((sig = nap(ms)) != 0)
			break;
	}
	if (sig > 0 && !g_cli.quiet) {
		char gd[PGC_DURATION_FORMAT_MAX];
		fprintf(stderr, "pgcoord cron: %s: stopping (%ld jobs enqueued%s%s%s)\n", strsignal(sig), total,
		        w != NULL ? "; running commands get " : "", w != NULL ? cli_duration_str(a.grace_ms, gd) : "",
		        w != NULL ? " to finish" : "");
	}
	/* --once: the commands of the command schedules' runnable jobs, then exit. */
	if (rc == 0 && a.once && !a.no_commands && sig == 0) {
		if (start_worker(&a, &jc, true, &w, &werr) != PGC_OK)
			rc = werr.code == PGC_ENOSCHEMA ? (cli_report(&werr), EXIT_UNAVAILABLE) : cli_report(&werr);
		else
			rc = stop_worker(w, a.grace_ms, false);
		w = NULL;
	}
	int wrc = stop_worker(w, a.grace_ms, true);
	if (rc == 0)
		rc = wrc;
	pthread_mutex_lock(&sh.mu);
	sh.conn = NULL;
	pthread_mutex_unlock(&sh.mu);
	pgc_conn_close(conn);
	return rc;
}

/* The subcommands; one line each, so that adding one is one line and one function. */

/* cmd_worker.c - pgcoord worker: run COMMAND once per job, from any language
 *
 * The payload goes to the command's stdin (a memfd, so a payload of any size never blocks),
 * the job's id, queue and attempt go to its environment. Exit 0 completes the job, 75 asks for
 * a retry later, anything else fails it (retried with backoff until max_attempts); the tail of
 * its stderr becomes the error text. Each command runs in its own process group (cli/child.c)
 * and the whole group is killed when the job times out or its lease is lost. That handler is
 * cli/jobcmd.c's, shared with the worker of pgcoord cron run.
 *
 * Signals: SIGINT, SIGTERM, SIGHUP and SIGQUIT are blocked in every thread and taken by the
 * main thread with sigtimedwait, so they never reach a handler thread and are not forwarded to
 * the commands: the first one starts a graceful stop (no new jobs, running ones get --grace),
 * a second one stops at once. With --once the workers stop by themselves when their queues
 * run dry; the main thread waits for them and a thread of its own takes the signals. */
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "child.h"
#include "cli.h"
#include "opt.h"
#include "dbwait.h"
#include "jobcmd.h"
#include "util/util.h"
#include "web/web.h"
#include "cmd_worker_metrics.h"

static const cli_opt *worker_opts;

static void usage(FILE *f)
{
	fputs("Usage: pgcoord [-d DSN] worker --queue Q [--queue Q2 ...] [OPTIONS] -- COMMAND\n"
	      "                [ARGS...]\n"
	      "\n"
	      "Runs COMMAND once per job: the payload on its stdin, PGCOORD_JOB_ID,\n"
	      "PGCOORD_JOB_QUEUE, PGCOORD_JOB_ATTEMPT, PGCOORD_JOB_MAX_ATTEMPTS and\n"
	      "PGCOORD_JOB_KEY (its concurrency key, or empty) in its environment, and\n"
	      "PGCOORD_CRON_SCHEDULE and PGCOORD_CRON_TICK for a job of\n"
	      "a pgcoord cron schedule. Exit 0 completes the job, 75 retries it later (the\n"
	      "attempt is not counted, up to the job's max_deferrals, default 100; then it\n"
	      "fails for good), anything else fails it; the last lines of its stderr\n"
	      "become the job's error. SIGINT or SIGTERM stops gracefully; a second one\n"
	      "at once.\n"
	      "\n"
	      "Options:\n", f);
	cli_opt_help(f, worker_opts, 25);
	fputs("\n"
	      "Durations: 500ms, 2s, 5m, 1h, 1d. Exit status: 0 after a stop on a signal\n"
	      "or, with --once, when the queues are drained;\n"
	      "64 usage; 69 database unavailable or schema missing; 70 internal error;\n"
	      "126 COMMAND not executable; 127 COMMAND not found. See pgcoord-worker(1).\n", f);
}

static void log_line(pgc_log_level level, const char *msg, void *arg)
{
	(void)arg;
	if (level == PGC_LOG_DEBUG || (g_cli.quiet && level < PGC_LOG_WARN))
		return;
	fprintf(stderr, "pgcoord worker: %s\n", msg);
}

typedef struct second_arg {
	pgc_worker **ws;
	int n;
	int64_t grace;  /* --once: the first signal's grace */
	atomic_bool signalled; /* --once: stopped by a signal, not drained */
} second_arg;

/* With --once the main thread waits for the workers to finish by themselves, and this thread
 * takes the signals: the first stops gracefully, the second at once. */
static void *once_signals(void *arg)
{
	second_arg *sa = arg;
	sigset_t s;
	cli_stop_signals(&s);
	for (int round = 0; round < 2; round++) {
		int sig;
		if (sigwait(&s, &sig) != 0)
			break;
		atomic_store(&sa->signalled, true);
		char gd[PGC_DURATION_FORMAT_MAX];
		if (!g_cli.quiet && round == 0)
			fprintf(stderr, "pgcoord worker: %s: stopping (grace %s)\n", strsignal(sig),
			        cli_duration_str(sa->grace, gd));
		else if (!g_cli.quiet)
			fprintf(stderr, "pgcoord worker: %s: stopping now\n", strsignal(sig));
		for (int i = 0; i < sa->n; i++)
			pgc_worker_stop(sa->ws[i], round == 0 ? sa->grace : 0);
	}
	return NULL;
}

static void *second_signal(void *arg)
{
	second_arg *sa = arg;
	sigset_t s;
	cli_stop_signals(&s);
	int sig;
	if (sigwait(&s, &sig) == 0) {
		if (!g_cli.quiet)
			fprintf(stderr, "pgcoord worker: %s: stopping now\n", strsignal(sig));
		for (int i = 0; i < sa->n; i++)
			pgc_worker_stop(sa->ws[i], 0);
	}
	return NULL;
}

/* --once, drained: the jobs left in its queues, by why none of them could start. Failed jobs
 * are finished, not left. A count that cannot be read is said, and the exit stays 0: the
 * drain itself went well. */
static void once_report(const pgc_worker_options *o)
{
	pgc_conn *conn = NULL;
	pgc_queue *q = NULL;
	pgc_queue_options qo = PGC_QUEUE_OPTIONS_INIT;
	pgc_conn_options co = PGC_CONN_OPTIONS_INIT;
	pgc_error err = PGC_ERROR_INIT;
	co.application_name = "pgcoord/worker";
	qo.schema = o->schema;
	qo.prepare = false;
	long sched = 0, deps = 0, paused = 0, at_limit = 0, running = 0, pending = 0;
	int rc = pgc_connect(o->dsn, &co, &conn, &err);
	if (rc == PGC_OK)
		rc = pgc_queue_open(conn, &qo, &q, &err);
	for (size_t i = 0; rc == PGC_OK && i < o->n_queues; i++) {
		pgc_queue_stat *st = NULL;
		size_t n = 0;
		rc = pgc_queue_stats(q, o->queues[i], &st, &n, NULL, &err);
		if (rc == PGC_ENOTFOUND) { /* never had a job */
			rc = PGC_OK;
			continue;
		}
		for (size_t k = 0; rc == PGC_OK && k < n; k++) {
			deps += st[k].waiting;
			running += st[k].running;
			if (st[k].paused) {
				paused += st[k].pending + st[k].scheduled;
				continue;
			}
			sched += st[k].scheduled;
			pending += st[k].pending;
			pgc_queue_flow f;
			if (st[k].pending == 0 || (rc = pgc_queue_flow_get(q, st[k].queue, &f, &err)) != PGC_OK ||
			    !f.flow)
				continue;
			pgc_queue_key_info *ki = NULL;
			size_t nk = 0;
			if ((rc = pgc_queue_keys(q, st[k].queue, NULL, &ki, &nk, &err)) != PGC_OK)
				continue;
			for (size_t j = 0; j < nk; j++)
				if (ki[j].at_limit)
					at_limit += ki[j].pending;
			pgc_free(ki);
		}
		pgc_free(st);
	}
	pgc_queue_close(q);
	pgc_conn_close(conn);
	if (rc != PGC_OK) {
		fprintf(stderr, "pgcoord worker: cannot count the jobs left: %s\n", err.message);
		return;
	}
	if (at_limit > pending)
		at_limit = pending; /* a key's figures and the queue's come from two statements */
	pending -= at_limit;
	long total = sched + deps + paused + at_limit + running + pending;
	if (total == 0) {
		fputs("pgcoord worker: left no job in its queues\n", stderr);
		return;
	}
	char wd[PGC_DURATION_FORMAT_MAX];
	char line[512];
	int len = snprintf(line, sizeof line, "left %ld job%s:", total, total == 1 ? "" : "s");
	const char *sep = " ";
	struct { long n; const char *why; } reasons[] = {
		{ sched, "scheduled later than --once-wait" },
		{ deps, "waiting for dependencies" },
		{ at_limit, "of keys at their limit, held by other workers" },
		{ paused, "in a paused queue" },
		{ running, "running in other workers" },
		{ pending, "pending, taken by no claim (enqueued since, or held back by flow control)" },
	};
	for (size_t i = 0; i < sizeof reasons / sizeof reasons[0]; i++) {
		if (reasons[i].n == 0 || len >= (int)sizeof line)
			continue;
		len += snprintf(line + len, sizeof line - (size_t)len, "%s%ld %s", sep, reasons[i].n, reasons[i].why);
		sep = ", ";
	}
	fprintf(stderr, "pgcoord worker: %s (--once-wait %s; failed jobs are not counted)\n", line,
	        cli_duration_str(o->once_wait_ms, wd));
}

/* -q, --queue: checked and added to the worker's queues. */
typedef struct queue_list {
	const char *names[PGC_WORKER_QUEUES_MAX];
	size_t n;
} queue_list;

static int opt_queue(const char *cmd, const char *opt, const char *value, void *dest)
{
	queue_list *l = dest;
	pgc_error nerr;
	if (*value == '\0')
		return cli_usage_error(cmd, "%s must not be empty", opt);
	if (strlen(value) > PGC_QUEUE_NAME_MAX)
		return cli_usage_error(cmd, "queue name is longer than %d bytes", PGC_QUEUE_NAME_MAX);
	if (pgc_name_check("queue name", value, PGC_QUEUE_NAME_MAX, &nerr) != PGC_OK)
		return cli_usage_error(cmd, "%s: %s", opt, nerr.message);
	if (l->n == PGC_WORKER_QUEUES_MAX)
		return cli_usage_error(cmd, "at most %d queues", PGC_WORKER_QUEUES_MAX);
	l->names[l->n++] = value;
	return 0;
}

static int opt_schema(const char *cmd, const char *opt, const char *value, void *dest)
{
	if (*value == '\0')
		return cli_usage_error(cmd, "%s must not be empty", opt);
	*(const char **)dest = value;
	return 0;
}

static int opt_dbwait(const char *cmd, const char *opt, const char *value, void *dest)
{
	(void)opt;
	int rc;
	return cli_dbwait_opt(cmd, value, dest, &rc) ? 0 : rc;
}

typedef struct metrics_at {
	const char *text;
	struct sockaddr_storage addr;
	socklen_t len;
	bool loopback;
} metrics_at;

static int opt_metrics(const char *cmd, const char *opt, const char *value, void *dest)
{
	metrics_at *m = dest;
	if (!web_parse_listen(value, &m->addr, &m->len, &m->loopback))
		return cli_usage_error(cmd, "%s: \"%s\" is not ADDR:PORT (an IPv4 address, "
		                       "localhost, or [IPv6], and a port 0-65535)", opt, cli_esc(value));
	m->text = value;
	return 0;
}

int cmd_worker(int argc, char **argv)
{
	queue_list ql = { .n = 0 };
	const char **queues = ql.names;
	metrics_at ma = { .text = NULL };
	pgc_worker_options o = PGC_WORKER_OPTIONS_INIT;
	int64_t grace = 30000, dbwait_ms = CLI_DBWAIT_OFF, once_wait = -1;
	long long concurrency = o.concurrency, prefetch = o.prefetch, nconn_ll = 1;
	long long vacuum = o.vacuum_dead_tuples;
	bool no_listen = false;
	cli_jobcmd ctx = CLI_JOBCMD_INIT;
	const cli_opt opts[] = {
		CLI_OPT('q', "queue", CLI_OPT_CALL, &ql, "Q", "queue to take jobs from (repeat for more)",
		        .call = opt_queue),
		CLI_OPT('c', "concurrency", CLI_OPT_INT, &concurrency, "K", "commands at once (default 4)",
		        .min = 1, .max = 1024),
		CLI_OPT(0, "connections", CLI_OPT_INT, &nconn_ll, "N",
		        "database connections sharing the K slots (default 1;\n"
		        "more use more server cores for short jobs)", .min = 1, .max = 16),
		CLI_OPT(0, "prefetch", CLI_OPT_INT, &prefetch, "N",
		        "jobs claimed ahead beyond K (default 0; more for\nshort jobs: bigger batches)",
		        .min = 0, .max = 100000),
		CLI_OPT(0, "timeout", CLI_OPT_DURATION, &ctx.timeout_ms, "D",
		        "kill a command's process group after D (default none)", .min = 0, .max = INT64_MAX),
		CLI_OPT(0, "grace", CLI_OPT_DURATION, &grace, "D",
		        "on stop, wait D for running commands (default 30s),\n"
		        "then kill them and return their jobs to pending;\n"
		        "a cancelled job's command: SIGKILL D after SIGTERM", .min = 0, .max = INT64_MAX),
		CLI_OPT(0, "lease", CLI_OPT_DURATION, &o.lease_ms, "D", "job lease, renewed every D/3 (default 30s)",
		        .min = 100, .max = INT64_MAX),
		CLI_OPT(0, "poll", CLI_OPT_DURATION, &o.poll_ms, "D", "fallback poll interval (default 2s)",
		        .min = 1, .max = INT64_MAX),
		CLI_OPT(0, "retry-delay", CLI_OPT_DURATION, &ctx.retry_delay_ms, "D",
		        "delay after exit 75 (default 10s)", .min = 0, .max = INT64_MAX),
		CLI_OPT(0, "backoff", CLI_OPT_DURATION, &o.backoff.base_ms, "D",
		        "first retry delay after a failure, doubling (1s)", .min = 0, .max = INT64_MAX),
		CLI_OPT(0, "backoff-max", CLI_OPT_DURATION, &o.backoff.max_ms, "D",
		        "longest retry delay (default 1h)", .min = 0, .max = INT64_MAX),
		CLI_OPT(0, "no-listen", CLI_OPT_BOOL, &no_listen, NULL, "poll instead of LISTEN/NOTIFY"),
		CLI_OPT(0, "once", CLI_OPT_BOOL, &o.once, NULL,
		        "drain the queues, then exit 0: wait for the running\n"
		        "jobs, the starts a rate allows, and jobs due within\n"
		        "--once-wait; then say what is left and why"),
		CLI_OPT(0, "once-wait", CLI_OPT_DURATION, &once_wait, "D",
		        "with --once, wait for jobs scheduled (run_at, a\n"
		        "retry's backoff) up to D ahead (default 0: none)", .min = 0, .max = INT64_MAX),
		CLI_OPT(0, "vacuum-threshold", CLI_OPT_INT, &vacuum, "N",
		        "vacuum the jobs table when it has N dead tuples\n"
		        "(default 20000; 0: leave it to autovacuum)", .min = 0, .max = 1000000000),
		CLI_OPT(0, "wait-for-db", CLI_OPT_CALL, &dbwait_ms, "D",
		        "if the database is not reachable at start, retry until\n"
		        "it is (or for at most D, then exit 69); default: 69",
		        .call = opt_dbwait, .flags = CLI_OPT_OPTIONAL),
		CLI_OPT(0, "metrics", CLI_OPT_CALL, &ma, "ADDR:PORT",
		        "serve Prometheus metrics of its jobs on\n"
		        "http://ADDR:PORT/metrics (port 0: a free one)", .call = opt_metrics),
		CLI_OPT(0, "schema", CLI_OPT_CALL, &o.schema, "NAME", "pgcoord schema (default: pgcoord)",
		        .call = opt_schema),
		CLI_OPT('h', "help", CLI_OPT_HELP, NULL, NULL, "show this help and exit"),
		CLI_OPT_TABLE_END,
	};
	worker_opts = opts;
	cli_opt_usage_set(usage);
	int first, prc;
	if ((prc = cli_opt_parse_ex("worker", opts, CLI_PARSE_STOP_AT_OPERAND, argc, argv, &first)) != 0)
		return prc < 0 ? 0 : prc;
	optind = first;
	size_t nq = ql.n;
	o.concurrency = (int)concurrency;
	o.prefetch = (int)prefetch;
	o.vacuum_dead_tuples = (long)vacuum;
	if (no_listen)
		o.listen = false;
	int nconn = (int)nconn_ll;
	const char *metrics_at = ma.text;
	if (nq == 0)
		return cli_usage_error("worker", "at least one --queue is required");
	if (optind < argc && strcmp(argv[optind], "--") == 0)
		optind++;
	if (optind >= argc)
		return cli_usage_error("worker", "no COMMAND given (pgcoord worker --queue Q -- COMMAND)");
	if (once_wait >= 0 && !o.once)
		return cli_usage_error("worker", "--once-wait is for --once");
	if (once_wait >= 0)
		o.once_wait_ms = once_wait;
	ctx.argv = argv + optind;
	/* Found once, not at every job's start. */
	char path[4096];
	int rc = cli_command_resolve(ctx.argv[0], path, sizeof path);
	if (rc != 0)
		return rc;
	ctx.path = path;
	ctx.grace_ms = grace;

	/* Before any thread: if this process dies, even by SIGKILL, the guard kills what its
	 * commands still run, so that no job runs on after its claim is gone. Their grace ends
	 * before a third of the lease: a lease renewed every third expires no sooner than two
	 * thirds after the worker's death, and only then can another worker claim the job. */
	if ((rc = cli_child_guard_start(o.lease_ms / 3 < 2000 ? o.lease_ms / 3 : 2000)) != 0)
		return rc;

	/* Every thread inherits this mask: only the main thread takes these signals. */
	sigset_t stop_sigs;
	cli_stop_signals(&stop_sigs);
	pthread_sigmask(SIG_BLOCK, &stop_sigs, NULL);
	signal(SIGPIPE, SIG_IGN);
	if (cli_signal_fd() < 0) {
		cli_errorf("cannot set up signal handling");
		return EXIT_SOFTWARE;
	}

	o.dsn = pgc_dsn_resolve(g_cli.dsn, NULL);
	o.queues = queues;
	o.n_queues = nq;
	o.log = log_line;
	o.application_name = "pgcoord/worker";
	/* --connections N: N workers of the library, each with its own connection and a share of
	 * the K slots (a server runs each connection's statements on one core). */
	if (nconn > o.concurrency)
		nconn = o.concurrency;
	pgc_worker *ws[16] = { NULL };
	pgc_error err;
	/* --metrics: every job goes through the counting handler. */
	worker_metrics_metrics *metrics = NULL;
	pgc_job_handler handler = cli_jobcmd_run;
	void *handler_arg = &ctx;
	if (metrics_at != NULL) {
		metrics = worker_metrics_metrics_new(queues, nq, cli_jobcmd_run, &ctx);
		if (metrics == NULL) {
			cli_errorf("out of memory");
			return EXIT_SOFTWARE;
		}
		handler = worker_metrics_run;
		handler_arg = metrics;
	}
	int total_k = o.concurrency, total_prefetch = o.prefetch;
	cli_dbwait dw = cli_dbwait_init("worker", dbwait_ms);
	for (int i = 0; i < nconn; i++) {
		pgc_worker_options oi = o;
		oi.concurrency = total_k / nconn + (i < total_k % nconn);
		oi.prefetch = total_prefetch / nconn + (i < total_prefetch % nconn);
		if (pgc_worker_new(&oi, handler, handler_arg, &ws[i], &err) != PGC_OK ||
		    pgc_worker_start(ws[i], &err) != PGC_OK) {
			for (int k = 0; k <= i; k++) {
				pgc_worker_free(ws[k]); /* stops and joins the started ones; NULL is fine */
				ws[k] = NULL;
			}
			/* --wait-for-db: the database is not there yet; start them all again. */
			rc = cli_dbwait_failed(&dw, &err);
			if (rc == 0) {
				i = -1;
				continue;
			}
			if (rc < 0) {
				if (!g_cli.quiet)
					fprintf(stderr, "pgcoord worker: %s: stopped while waiting for the database\n",
					        strsignal(-rc));
				worker_metrics_metrics_free(metrics);
				return 0;
			}
			worker_metrics_metrics_free(metrics);
			return err.code == PGC_ENOSCHEMA ? EXIT_UNAVAILABLE : rc;
		}
	}
	cli_dbwait_done(&dw);
	struct MHD_Daemon *mserver = NULL;
	if (metrics != NULL) {
		worker_metrics_metrics_set_workers(metrics, ws, nconn);
		unsigned mport = 0;
		char why[WEB_START_REASON_MAX];
		mserver = web_metrics_start(&ma.addr, &mport, worker_metrics_metrics_write, metrics, why);
		if (mserver == NULL) {
			cli_errorf("worker: cannot listen on %s for --metrics: %s", metrics_at, why);
			for (int i = 0; i < nconn; i++)
				pgc_worker_free(ws[i]);
			worker_metrics_metrics_free(metrics);
			return EXIT_CONFIG;
		}
		if (!ma.loopback)
			cli_errorf("warning: --metrics listens on %s: whoever reaches it reads the worker's counters",
			           metrics_at);
		if (!g_cli.quiet)
			fprintf(stderr, "pgcoord worker: metrics on http://%.*s:%u/metrics\n",
			        (int)(strrchr(metrics_at, ':') - metrics_at), metrics_at, mport);
	}
	if (!g_cli.quiet) {
		pgc_worker_stats st;
		pgc_worker_get_stats(ws[0], &st);
		fprintf(stderr, "pgcoord worker: pid %d, %d at once over %d connection%s, %s, running %s\n",
		        (int)getpid(), total_k, nconn, nconn == 1 ? "" : "s",
		        st.listening ? "woken by LISTEN/NOTIFY" : "polling", ctx.argv[0]);
	}
	second_arg sa = { ws, nconn, grace, false };
	pthread_t second;
	bool have_second;
	if (o.once) {
		have_second = pthread_create(&second, NULL, once_signals, &sa) == 0;
	} else {
		int sig;
		char gd[PGC_DURATION_FORMAT_MAX];
		while ((sig = sigwaitinfo(&stop_sigs, NULL)) < 0 && errno == EINTR)
			;
		if (!g_cli.quiet)
			fprintf(stderr, "pgcoord worker: %s: stopping (grace %s)\n", strsignal(sig),
			        cli_duration_str(grace, gd));
		for (int i = 0; i < nconn; i++)
			pgc_worker_stop(ws[i], grace);
		/* A second signal during the grace period stops at once. */
		have_second = pthread_create(&second, NULL, second_signal, &sa) == 0;
	}
	rc = 0;
	pgc_worker_stats sum = { 0 };
	for (int i = 0; i < nconn; i++) {
		if (pgc_worker_wait(ws[i], &err) != PGC_OK)
			rc = cli_report(&err);
		pgc_worker_stats st;
		pgc_worker_get_stats(ws[i], &st);
		sum.completed += st.completed;
		sum.failed += st.failed;
		sum.retried += st.retried;
		sum.released += st.released;
		sum.stale += st.stale;
		sum.cancelled += st.cancelled;
	}
	if (have_second) {
		pthread_cancel(second);
		pthread_join(second, NULL);
	}
	if (!g_cli.quiet)
		fprintf(stderr, "pgcoord worker: stopped: %ld completed, %ld failed, %ld retried later, "
		        "%ld released, %ld stale, %ld cancelled\n", sum.completed, sum.failed, sum.retried,
		        sum.released, sum.stale, sum.cancelled);
	if (o.once && rc == 0 && !atomic_load(&sa.signalled) && !g_cli.quiet)
		once_report(&o);
	web_http_stop(mserver);
	for (int i = 0; i < nconn; i++)
		pgc_worker_free(ws[i]);
	worker_metrics_metrics_free(metrics);
	return rc;
}

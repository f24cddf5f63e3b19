/* cmd_elect.c - pgcoord elect: leader election on a lease, running a command while leading
 *
 * One process per candidate. It campaigns until it holds the lease, then runs the command in
 * its own process group with the fencing token in its environment, and renews the lease every
 * --renew-every. The command is stopped so that it is dead by the local deadline (the moment,
 * measured on CLOCK_MONOTONIC from before the last successful acquire or renewal was sent,
 * when the lease may have expired on the server): SIGTERM at deadline - kill-after, SIGKILL at
 * the deadline. A renewal the server refuses (the lease was taken over, released or expired)
 * stops the command at once. When the command exits by itself the lease is released, so a
 * follower takes over immediately rather than after the TTL.
 *
 * A watchdog process, forked before anything else, holds the read end of a pipe whose write
 * end only this process has: if pgcoord dies (even by SIGKILL) the pipe reports end-of-file
 * and the watchdog kills the command's process group, so a leader never leaves an orphan
 * running. Blocking reconnects during the lead are covered by an interval timer that signals
 * the command's group on the same schedule as the main loop would. */
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <inttypes.h>
#include <limits.h>
#include <poll.h>
#include <signal.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <sys/time.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "child.h"
#include "cli.h"
#include "dbwait.h"
#include "util/util.h"

#define DEFAULT_TTL_MS 15000
#define RETRY_MS 200
#define DEADLINE_PASSED 1 /* renew_once: the timer stopped the command */

static void usage(FILE *f)
{
	fputs("Usage: pgcoord [-d DSN] elect [OPTIONS] NAME -- COMMAND [ARGS...]\n"
	      "\n"
	      "Campaigns for the lease NAME until this candidate holds it, then runs COMMAND\n"
	      "in its own process group with PGCOORD_FENCE_TOKEN, PGCOORD_LEASE_NAME and\n"
	      "PGCOORD_LEASE_EXPIRES in its environment, and renews the lease while COMMAND\n"
	      "runs. If the lease is lost, COMMAND's group gets SIGTERM and then SIGKILL, so\n"
	      "that it is dead by the time the lease may expire, and pgcoord exits 75 (with\n"
	      "--follow it campaigns again). When COMMAND exits, the lease is released at once\n"
	      "and pgcoord exits with COMMAND's status.\n"
	      "\n"
	      "Options:\n"
	      "      --ttl=D          lease time to live, by the database clock (default 15s)\n"
	      "      --renew-every=D  renew this often (default: ttl/3); must be < ttl\n"
	      "      --kill-after=D   SIGTERM COMMAND this long before the lease may expire\n"
	      "                       without a renewal, SIGKILL when it may (default: the\n"
	      "                       smaller of ttl/3 and (ttl - renew-every)/2)\n"
	      "      --follow         after losing the lease, campaign again and restart\n"
	      "                       COMMAND when elected again, instead of exiting 75\n"
	      "      --holder=ID      this candidate's name in the lease (default: HOST:PID)\n"
	      "      --wait=D         give up campaigning after D and exit 1 (default: never)\n"
	      "      --wait-for-db[=D]  if the database is not reachable at start, retry until\n"
	      "                       it is (or for at most D, then exit 69); default: 69\n"
	      "      --schema=NAME    pgcoord schema (default: pgcoord)\n"
	      "  -h, --help           show this help and exit\n"
	      "\n"
	      "Durations: 500ms, 3s, 1.5s, 2m, 1h, 1d (a bare number means seconds).\n"
	      "Environment of COMMAND: PGCOORD_FENCE_TOKEN, PGCOORD_LEASE_NAME,\n"
	      "PGCOORD_LEASE_EXPIRES (Unix time of the first expiry), PGCOORD_LEASE_HOLDER,\n"
	      "PGCOORD_LEASE_SCHEMA. Guard writes with SELECT <schema>.fence_check(NAME,\n"
	      "token) in the writing transaction: it fails with SQLSTATE PCF01 once a newer\n"
	      "token exists.\n"
	      "\n"
	      "Exit status: COMMAND's status (128+N if killed by signal N); 1 --wait passed;\n"
	      "64 usage; 69 database unavailable at start; 75 lease lost; 126/127 COMMAND not\n"
	      "executable/found; 128+N when signal N ends pgcoord while it campaigns.\n", f);
}

typedef struct elect {
	const char *name;
	const char *holder;
	const char *schema;
	int64_t ttl_ms, renew_ms, kill_after_ms, wait_ms;
	int64_t dbwait_ms; /* --wait-for-db: CLI_DBWAIT_OFF without */
	bool follow;
	char **argv;
	pgc_conn *conn;
	pgc_lease_options lopts;
	int wd_fd;      /* write end of the watchdog's pipe */
	pid_t wd_pid;
	bool warned;    /* a "database unreachable" warning is out */
} elect;

/* ---- watchdog ---------------------------------------------------------------------- */

static void watchdog_main(int rfd, int64_t kill_after_ms)
{
	/* Terminal signals are for pgcoord and the command; the watchdog outlives them. */
	signal(SIGINT, SIG_IGN);
	signal(SIGQUIT, SIG_IGN);
	signal(SIGHUP, SIG_IGN);
	signal(SIGPIPE, SIG_IGN);
	/* Hold no terminal or pipe of the caller's open: a pipeline reading pgcoord's output
	 * ends when pgcoord does. */
	int devnull = open("/dev/null", O_RDWR);
	if (devnull >= 0) {
		dup2(devnull, STDIN_FILENO);
		dup2(devnull, STDOUT_FILENO);
		dup2(devnull, STDERR_FILENO);
		if (devnull > STDERR_FILENO)
			close(devnull);
	}
	int32_t pgid = 0, v;
	for (;;) {
		ssize_t n = read(rfd, &v, sizeof v);
		if (n == (ssize_t)sizeof v) {
			pgid = v;
			continue;
		}
		if (n < 0 && errno == EINTR)
			continue;
		break; /* end of file: pgcoord is gone or done */
	}
	if (pgid > 0 && kill(-pgid, SIGTERM) == 0) {
		kill(-pgid, SIGCONT);
		struct timespec step = { 0, 20 * 1000000L };
		for (int64_t waited = 0; waited < kill_after_ms && kill(-pgid, 0) == 0; waited += 20)
			nanosleep(&step, NULL);
		kill(-pgid, SIGKILL);
	}
	_exit(0);
}

static int watchdog_start(elect *e)
{
	int p[2];
	if (pipe2(p, O_CLOEXEC) != 0) {
		cli_errorf("cannot create a pipe: %s", strerror(errno));
		return EXIT_SOFTWARE;
	}
	pid_t pid = fork();
	if (pid < 0) {
		cli_errorf("cannot fork: %s", strerror(errno));
		close(p[0]);
		close(p[1]);
		return EXIT_SOFTWARE;
	}
	if (pid == 0) {
		close(p[1]);
		watchdog_main(p[0], e->kill_after_ms);
	}
	close(p[0]);
	e->wd_fd = p[1];
	e->wd_pid = pid;
	return 0;
}

/* Tells the watchdog the process group to kill should pgcoord vanish (0: none). The watchdog
 * may be gone already (a SIGTERM to the whole process group, as timeout(1) sends, reaches it
 * too): the write then fails with EPIPE instead of killing pgcoord with SIGPIPE. Returns
 * false when the watchdog could not be told. */
static bool watchdog_send(elect *e, pid_t pgid)
{
	int32_t v = (int32_t)pgid;
	sigset_t pipe_only, old;
	sigemptyset(&pipe_only);
	sigaddset(&pipe_only, SIGPIPE);
	pthread_sigmask(SIG_BLOCK, &pipe_only, &old);
	ssize_t n = write(e->wd_fd, &v, sizeof v);
	int saved = errno;
	if (n < 0 && saved == EPIPE) {
		struct timespec none = { 0, 0 };
		while (sigtimedwait(&pipe_only, NULL, &none) < 0 && errno == EINTR)
			; /* take the SIGPIPE the failed write raised */
	}
	pthread_sigmask(SIG_SETMASK, &old, NULL);
	errno = saved;
	return n == (ssize_t)sizeof v;
}

static void watchdog_set(elect *e, pid_t pgid)
{
	if (e->wd_fd >= 0 && !watchdog_send(e, pgid))
		cli_errorf("warning: cannot reach the watchdog: %s", strerror(errno));
}

static void watchdog_stop(elect *e)
{
	if (e->wd_fd < 0)
		return;
	(void)watchdog_send(e, 0); /* a watchdog already gone needs no word */
	close(e->wd_fd);
	e->wd_fd = -1;
	while (waitpid(e->wd_pid, NULL, 0) < 0 && errno == EINTR)
		;
}

/* ---- the timer that covers blocking reconnects while leading ------------------------- */

static volatile pid_t alarm_pgid;
static volatile sig_atomic_t alarm_fired;

static void on_alarm(int sig)
{
	(void)sig;
	int saved = errno;
	pid_t g = alarm_pgid;
	if (g > 0) {
		if (alarm_fired == 0) {
			kill(-g, SIGTERM);
			kill(-g, SIGCONT);
		} else {
			kill(-g, SIGKILL);
		}
	}
	alarm_fired++;
	errno = saved;
}

static void alarm_arm(pid_t pgid, int64_t first_ms, int64_t then_ms)
{
	struct sigaction sa;
	memset(&sa, 0, sizeof sa);
	sa.sa_handler = on_alarm;
	sigemptyset(&sa.sa_mask);
	sa.sa_flags = SA_RESTART;
	sigaction(SIGALRM, &sa, NULL);
	alarm_fired = 0;
	alarm_pgid = pgid;
	if (first_ms < 1)
		first_ms = 1;
	if (then_ms < 1)
		then_ms = 1;
	struct itimerval it = {
		{ (time_t)(then_ms / 1000), (suseconds_t)(then_ms % 1000) * 1000 },
		{ (time_t)(first_ms / 1000), (suseconds_t)(first_ms % 1000) * 1000 },
	};
	setitimer(ITIMER_REAL, &it, NULL);
}

static void alarm_disarm(void)
{
	struct itimerval off;
	memset(&off, 0, sizeof off);
	setitimer(ITIMER_REAL, &off, NULL);
	alarm_pgid = 0;
}

/* ---- helpers --------------------------------------------------------------------------- */

static void say(const char *fmt, ...) PGC_PRINTF(1, 2);
static void say(const char *fmt, ...)
{
	if (g_cli.quiet)
		return;
	va_list ap;
	va_start(ap, fmt);
	fputs("pgcoord: ", stderr);
	vfprintf(stderr, fmt, ap);
	fputc('\n', stderr);
	va_end(ap);
}

static bool transient(const pgc_error *err)
{
	return err->code == PGC_ECONNLOST || err->code == PGC_ECONNECT ||
	       err->code == PGC_ETIMEDOUT || err->klass == PGC_CLASS_RETRY_LATER;
}

static void drop_conn(elect *e)
{
	pgc_conn_close(e->conn);
	e->conn = NULL;
}

/* One connection attempt. Prints a warning once per outage. */
static int try_connect(elect *e)
{
	char app[64];
	snprintf(app, sizeof app, "pgcoord/elect");
	pgc_conn_options o = PGC_CONN_OPTIONS_INIT;
	o.application_name = app;
	o.connect_timeout_s = 2; /* libpq's minimum */
	pgc_error err = PGC_ERROR_INIT;
	int rc = pgc_connect(g_cli.dsn, &o, &e->conn, &err);
	if (rc != PGC_OK) {
		if (!e->warned)
			say("warning: %s; retrying", err.message);
		e->warned = true;
		return rc;
	}
	if (e->warned)
		say("connected again");
	e->warned = false;
	return PGC_OK;
}

/* Waits up to ms, or until a signal arrives. Returns the signal taken, or 0. */
static int pause_ms(int64_t ms)
{
	int fd = cli_signal_fd();
	struct pollfd p = { fd, POLLIN, 0 };
	if (ms > INT_MAX)
		ms = INT_MAX;
	if (poll(&p, fd >= 0 ? 1 : 0, (int)(ms < 0 ? 0 : ms)) > 0) {
		cli_child dummy;
		memset(&dummy, 0, sizeof dummy);
		dummy.exited = true; /* drain the pipe without taking the signal */
		cli_child_poll(&dummy);
		return cli_signal_take();
	}
	return 0;
}

/* ---- campaigning ----------------------------------------------------------------------- */

/* Returns 0 once elected (*lease filled), else the exit code. */
static int campaign(elect *e, pgc_lease *lease, int64_t started)
{
	for (;;) {
		int64_t left = -1;
		if (e->wait_ms >= 0) {
			left = started + e->wait_ms - pgc__now_ms();
			if (left <= 0) {
				cli_errorf("not elected for \"%s\" within the --wait time", cli_esc(e->name));
				return EXIT_CONFLICT;
			}
		}
		if (e->conn == NULL && try_connect(e) != PGC_OK) {
			int sig = pause_ms(left >= 0 && left < 1000 ? left : 1000);
			if (sig != 0)
				return 128 + sig;
			continue;
		}
		pgc_error err = PGC_ERROR_INIT;
		pgc_lease_options o = e->lopts;
		o.interrupt_fd = cli_signal_fd();
		o.poll_ms = e->renew_ms;
		int rc = pgc_lease_campaign(e->conn, e->name, e->holder, e->ttl_ms, left, &o, lease, &err);
		if (rc == PGC_OK)
			return 0;
		if (rc == PGC_EINTR) {
			int sig = pause_ms(0);
			if (sig != 0)
				return 128 + sig;
			continue; /* SIGCHLD or a stray wake-up */
		}
		if (rc == PGC_ETIMEDOUT && e->wait_ms >= 0 && pgc__now_ms() >= started + e->wait_ms) {
			cli_errorf("not elected for \"%s\" within the --wait time", cli_esc(e->name));
			return EXIT_CONFLICT;
		}
		if (transient(&err)) {
			if (!e->warned)
				say("warning: %s; retrying", err.message);
			e->warned = true;
			drop_conn(e);
			int sig = pause_ms(RETRY_MS);
			if (sig != 0)
				return 128 + sig;
			continue;
		}
		return cli_report(&err);
	}
}

/* ---- leading --------------------------------------------------------------------------- */

enum lead_end { LEAD_EXITED, LEAD_LOST };

static bool conn_ok(const elect *e)
{
	return e->conn != NULL && pgc_conn_socket(e->conn) >= 0;
}

/* Releases the lease so that a follower takes over at once. Best effort and bounded: if it
 * fails the lease simply expires after its TTL. */
static void release(elect *e, const pgc_lease *lease)
{
	if (!conn_ok(e)) {
		drop_conn(e);
		if (try_connect(e) != PGC_OK)
			return;
	}
	pgc_error err = PGC_ERROR_INIT;
	pgc_lease_options o = e->lopts;
	o.timeout_ms = 2000;
	int rc = pgc_lease_release(e->conn, lease->name, lease->token, &o, &err);
	if (rc != PGC_OK && rc != PGC_ESTALE)
		say("warning: lease \"%s\" not released (it expires by itself): %s", cli_esc(e->name), err.message);
	if (rc == PGC_ECONNLOST || rc == PGC_ETIMEDOUT)
		drop_conn(e);
}

/* Renews once; reconnects first when the session is gone. Returns 0, PGC_ESTALE (lost), or
 * another code (transient: try again until the deadline). The reconnect can block (DNS, a
 * silent network), so an interval timer stops the command on schedule meanwhile. */
static int renew_once(elect *e, pgc_lease *lease, pid_t pgid, int64_t term_at, pgc_error *err)
{
	if (!conn_ok(e)) {
		drop_conn(e);
		alarm_arm(pgid, term_at - pgc__now_ms(), lease->deadline_ms - term_at);
		int rc = try_connect(e);
		alarm_disarm();
		if (alarm_fired)
			return DEADLINE_PASSED;
		if (rc != PGC_OK) {
			pgc_error_clear(err);
			err->code = rc;
			return rc;
		}
	}
	pgc_lease_options o = e->lopts;
	int64_t left = term_at - pgc__now_ms();
	o.timeout_ms = left > 1 ? left : 1;
	int rc = pgc_lease_renew(e->conn, lease, &o, err);
	if (rc == PGC_ECONNLOST || rc == PGC_ETIMEDOUT)
		drop_conn(e);
	return rc;
}

/* Runs the command while holding *lease. Returns LEAD_EXITED with *code set to the exit
 * code (the command's, or 126/127/70 when it could not start), or LEAD_LOST once the command
 * has been stopped because the lease is lost. */
static enum lead_end lead(elect *e, pgc_lease *lease, int *code)
{
	char tok[48], nm[PGC_LEASE_NAME_MAX + 32], exp[64], hol[PGC_LEASE_HOLDER_MAX + 32], sch[96];
	snprintf(tok, sizeof tok, "PGCOORD_FENCE_TOKEN=%" PRId64, lease->token);
	snprintf(nm, sizeof nm, "PGCOORD_LEASE_NAME=%s", lease->name);
	snprintf(exp, sizeof exp, "PGCOORD_LEASE_EXPIRES=%" PRId64 ".%06" PRId64,
	         lease->expires_at_us / 1000000, lease->expires_at_us % 1000000);
	snprintf(hol, sizeof hol, "PGCOORD_LEASE_HOLDER=%s", lease->holder);
	snprintf(sch, sizeof sch, "PGCOORD_LEASE_SCHEMA=%s", e->schema);
	char *env[] = { tok, nm, exp, hol, sch, NULL };

	say("elected for \"%s\" with token %" PRId64 " (holder %s)", cli_esc(e->name), lease->token, cli_esc(e->holder));
	cli_child child;
	int rc = cli_child_spawn(&child, e->argv, env, NULL);
	if (rc != 0) {
		release(e, lease);
		*code = rc;
		return LEAD_EXITED;
	}
	watchdog_set(e, child.pid);

	int64_t next_renew = lease->deadline_ms - e->ttl_ms + e->renew_ms;
	const char *why = NULL;
	char reason[PGC_ERROR_MESSAGE_MAX];
	bool refused = false; /* the server said no: stop at once */
	for (;;) {
		int64_t term_at = lease->deadline_ms - e->kill_after_ms;
		int64_t now = pgc__now_ms();
		if (now >= term_at) {
			char left[PGC_DURATION_FORMAT_MAX];
			snprintf(reason, sizeof reason, "no renewal succeeded in time (%s left)",
			         cli_duration_str(lease->deadline_ms - now, left));
			why = reason;
			break;
		}
		int64_t wake = next_renew < term_at ? next_renew : term_at;
		if (cli_child_wait(&child, (int)(wake - now), -1)) {
			*code = cli_child_exit_code(&child);
			/* Whatever the command left in its group goes before a follower starts. */
			cli_child_terminate(&child, 0);
			watchdog_set(e, 0);
			release(e, lease);
			return LEAD_EXITED;
		}
		now = pgc__now_ms();
		if (now < next_renew || now >= term_at)
			continue;
		pgc_error err = PGC_ERROR_INIT;
		rc = renew_once(e, lease, child.pid, term_at, &err);
		if (rc == PGC_OK) {
			next_renew = lease->deadline_ms - e->ttl_ms + e->renew_ms;
			continue;
		}
		if (rc == DEADLINE_PASSED) {
			snprintf(reason, sizeof reason, "no renewal succeeded in time (reconnecting)");
			why = reason;
			break;
		}
		if (rc == PGC_ESTALE || !transient(&err)) {
			snprintf(reason, sizeof reason, "%s", err.message);
			why = reason;
			refused = true;
			break;
		}
		if (!e->warned)
			say("warning: renewing \"%s\": %s; retrying", cli_esc(e->name), err.message[0] ? err.message : pgc_strerror(rc));
		e->warned = true;
		next_renew = pgc__now_ms() + RETRY_MS;
	}

	say("lease \"%s\" lost (token %" PRId64 "): %s; stopping the command", cli_esc(e->name), lease->token, why);
	int64_t grace = refused ? e->kill_after_ms : lease->deadline_ms - pgc__now_ms();
	cli_child_terminate(&child, grace > 0 ? (int)grace : 0);
	watchdog_set(e, 0);
	return LEAD_LOST;
}

static bool parse_duration(const char *opt, const char *text, int64_t *out, int *rc)
{
	return cli_duration_opt("elect", opt, text, 0, INT64_MAX, out, rc);
}

int cmd_elect(int argc, char **argv)
{
	enum { O_TTL = 256, O_RENEW, O_KILL, O_FOLLOW, O_HOLDER, O_WAIT, O_SCHEMA, O_DBWAIT };
	static const struct option longopts[] = {
		{ "ttl", required_argument, NULL, O_TTL },
		{ "renew-every", required_argument, NULL, O_RENEW },
		{ "kill-after", required_argument, NULL, O_KILL },
		{ "follow", no_argument, NULL, O_FOLLOW },
		{ "holder", required_argument, NULL, O_HOLDER },
		{ "wait", required_argument, NULL, O_WAIT },
		{ "wait-for-db", optional_argument, NULL, O_DBWAIT },
		{ "schema", required_argument, NULL, O_SCHEMA },
		{ "help", no_argument, NULL, 'h' },
		{ NULL, 0, NULL, 0 },
	};
	elect e;
	memset(&e, 0, sizeof e);
	e.schema = PGC_SCHEMA_DEFAULT;
	e.ttl_ms = DEFAULT_TTL_MS;
	e.renew_ms = -1;
	e.kill_after_ms = -1;
	e.wait_ms = -1;
	e.wd_fd = -1;
	pgc_lease_options defaults = PGC_LEASE_OPTIONS_INIT;
	e.lopts = defaults;

	/* Our options end at "--"; without one, at the first word after NAME. */
	int split = argc;
	for (int i = 1; i < argc; i++)
		if (strcmp(argv[i], "--") == 0) {
			split = i;
			break;
		}
	int rc = 0, ch;
	opterr = 0;
	const char *shortopts = split < argc ? ":h" : "+:h";
	while ((ch = getopt_long(split, argv, shortopts, longopts, NULL)) != -1) {
		switch (ch) {
		case O_TTL:
			if (!parse_duration("--ttl", optarg, &e.ttl_ms, &rc))
				return rc;
			break;
		case O_RENEW:
			if (!parse_duration("--renew-every", optarg, &e.renew_ms, &rc))
				return rc;
			break;
		case O_KILL:
			if (!parse_duration("--kill-after", optarg, &e.kill_after_ms, &rc))
				return rc;
			break;
		case O_WAIT:
			if (!parse_duration("--wait", optarg, &e.wait_ms, &rc))
				return rc;
			break;
		case O_DBWAIT:
			if (!cli_dbwait_opt("elect", optarg, &e.dbwait_ms, &rc))
				return rc;
			break;
		case O_FOLLOW:
			e.follow = true;
			break;
		case O_HOLDER:
			e.holder = optarg;
			break;
		case O_SCHEMA:
			e.schema = optarg;
			break;
		case 'h':
			usage(stdout);
			return 0;
		default:
			return cli_getopt_error("elect", ch, argv);
		}
	}
	if (optind >= split)
		return cli_usage_error("elect", "missing lease NAME");
	e.name = argv[optind];
	char **cmd;
	if (split < argc) {
		if (optind + 1 < split)
			return cli_usage_error("elect", "unexpected argument \"%s\" before --", argv[optind + 1]);
		cmd = argv + split + 1;
	} else {
		cmd = argv + optind + 1;
	}
	if (*cmd == NULL)
		return cli_usage_error("elect", "missing COMMAND (after --)");
	e.argv = cmd;

	if (*e.name == '\0')
		return cli_usage_error("elect", "lease NAME must not be empty");
	if (strlen(e.name) > PGC_LEASE_NAME_MAX)
		return cli_usage_error("elect", "lease NAME is longer than %d bytes", PGC_LEASE_NAME_MAX);
	pgc_error nerr;
	if (pgc_name_check("lease NAME", e.name, PGC_LEASE_NAME_MAX, &nerr) != PGC_OK)
		return cli_usage_error("elect", "%s", nerr.message);
	if (*e.schema == '\0')
		return cli_usage_error("elect", "--schema must not be empty");
	if (e.ttl_ms <= 0)
		return cli_usage_error("elect", "--ttl must be greater than zero");
	if (e.ttl_ms > INT_MAX)
		return cli_usage_error("elect", "--ttl is too large");
	if (e.renew_ms < 0)
		e.renew_ms = e.ttl_ms / 3;
	if (e.renew_ms <= 0)
		return cli_usage_error("elect", "--renew-every must be greater than zero (and --ttl at least 3ms)");
	char d1[PGC_DURATION_FORMAT_MAX], d2[PGC_DURATION_FORMAT_MAX];
	if (e.renew_ms >= e.ttl_ms)
		return cli_usage_error("elect", "--renew-every (%s) must be shorter than --ttl (%s)",
		                       cli_duration_str(e.renew_ms, d1), cli_duration_str(e.ttl_ms, d2));
	if (e.kill_after_ms < 0) {
		int64_t a = e.ttl_ms / 3, b = (e.ttl_ms - e.renew_ms) / 2;
		e.kill_after_ms = a < b ? a : b;
	}
	if (e.kill_after_ms >= e.ttl_ms - e.renew_ms)
		return cli_usage_error("elect", "--kill-after (%s) must be shorter than --ttl minus "
		                       "--renew-every (%s), so that a renewal can come first",
		                       cli_duration_str(e.kill_after_ms, d1),
		                       cli_duration_str(e.ttl_ms - e.renew_ms, d2));
	char holder_buf[PGC_LEASE_HOLDER_MAX + 1];
	if (e.holder == NULL) {
		char host[128] = "";
		if (gethostname(host, sizeof host - 1) != 0)
			snprintf(host, sizeof host, "unknown");
		snprintf(holder_buf, sizeof holder_buf, "%s:%ld", host, (long)getpid());
		e.holder = holder_buf;
	}
	if (*e.holder == '\0')
		return cli_usage_error("elect", "--holder must not be empty");
	if (strlen(e.holder) > PGC_LEASE_HOLDER_MAX)
		return cli_usage_error("elect", "--holder is longer than %d bytes", PGC_LEASE_HOLDER_MAX);
	if (pgc_name_check("--holder", e.holder, PGC_LEASE_HOLDER_MAX, &nerr) != PGC_OK)
		return cli_usage_error("elect", "%s", nerr.message);
	e.lopts.schema = e.schema;
	/* A command that cannot start must not win the lease (and a token) first. */
	if ((rc = cli_command_check(e.argv[0])) != 0)
		return rc;

	/* Before any connection, so that the watchdog holds no database socket. */
	if ((rc = watchdog_start(&e)) != 0)
		return rc;
	if (cli_signal_fd() < 0) {
		cli_errorf("cannot set up signal handling: %s", strerror(errno));
		watchdog_stop(&e);
		return EXIT_SOFTWARE;
	}
	if ((rc = cli_connect_wait("elect", e.dbwait_ms, &e.conn)) != 0) {
		watchdog_stop(&e);
		return rc;
	}
	int64_t started = pgc__now_ms();
	for (;;) {
		pgc_lease lease;
		rc = campaign(&e, &lease, started);
		if (rc != 0)
			break;
		int code = 0;
		if (lead(&e, &lease, &code) == LEAD_EXITED) {
			rc = code;
			break;
		}
		if (!e.follow) {
			/* The lease may still be ours on the server (renewals unanswered): give it
			 * back if the server answers, so that a follower need not wait. */
			if (conn_ok(&e))
				release(&e, &lease);
			rc = EXIT_LOCKLOST;
			break;
		}
		if (conn_ok(&e))
			release(&e, &lease);
		started = pgc__now_ms();
		say("campaigning again for \"%s\"", cli_esc(e.name));
	}
	pgc_conn_close(e.conn);
	watchdog_stop(&e);
	return rc;
}

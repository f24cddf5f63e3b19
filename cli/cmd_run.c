/* cmd_run.c - pgcoord run: run a command only while holding a cluster-wide advisory lock
 *
 * flock(1) across hosts. The lock lives on one dedicated session for the command's whole life:
 * a session lock on a direct connection (or through a pool in session mode), and through a
 * transaction-mode pooler a transaction lock held by one open transaction, which the pooler
 * keeps on one server session until it ends (the library picks: PGC_LOCK_AUTO_SCOPE). One
 * poll() loop watches the signal pipe (signals to forward, the child's exit) and the session's
 * socket (a terminated session announces itself), and sends a heartbeat every check interval.
 * When the lock is lost the command's process group gets SIGTERM at once and SIGKILL after
 * --kill-after, and pgcoord exits 75.
 *
 * The lock outlives everything the command started, as flock(1)'s does: the command inherits
 * the lock session's socket (PGCOORD_LOCK_FD), so that when pgcoord dies, even by SIGKILL, the
 * session and its lock live on until the last process holding that descriptor exits. A pipe
 * whose write end the command inherits with it tells, when the command exits, whether anything
 * it started still holds them: then pgcoord leaves the session to those processes (no unlock,
 * no Terminate) instead of releasing the lock under them.
 *
 * The run is a sequence of steps over one run_ctx: parse, connect, acquire, build the child's
 * environment, supervise, finish. A step that hands the command more context (another
 * environment variable, a token) adds to run_env in one place. */
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <poll.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "child.h"
#include "cli.h"
#include "dbwait.h"
#include "util/util.h"

static void usage(FILE *f)
{
	fputs("Usage: pgcoord [-d DSN] run [OPTIONS] NAME -- COMMAND [ARGS...]\n"
	      "       pgcoord [-d DSN] run [OPTIONS] --key N|A,B -- COMMAND [ARGS...]\n"
	      "\n"
	      "Runs COMMAND while holding the advisory lock NAME (or the numeric key), like\n"
	      "flock(1) across hosts. The lock is held on one dedicated session (through a\n"
	      "transaction-mode pooler: in one open transaction); if it is lost, COMMAND's\n"
	      "process group gets SIGTERM at once, SIGKILL after --kill-after, and pgcoord\n"
	      "exits 75. Otherwise pgcoord exits with COMMAND's status.\n"
	      "\n"
	      "Options:\n"
	      "  -n, --nonblock, --nb         fail at once if the lock is held elsewhere\n"
	      "  -w, --wait=DURATION, --timeout=DURATION\n"
	      "                               give up after DURATION (500ms, 10s, 5m; 0 = -n);\n"
	      "                               default: wait as long as it takes\n"
	      "  -s, --shared                 take a shared lock (default: exclusive)\n"
	      "  -E, --conflict-exit-code=N   exit status when the lock is held or the wait\n"
	      "                               times out (0-255, default 1)\n"
	      "  -k, --key=N|A,B              lock a bigint key, or a pair of int4 keys,\n"
	      "                               instead of NAME\n"
	      "      --check-interval=DURATION  heartbeat period on the lock's session\n"
	      "                               (default 1s)\n"
	      "      --heartbeat-timeout=DURATION  an unanswered heartbeat means the lock is\n"
	      "                               lost after this long (default 5s)\n"
	      "      --kill-after=DURATION    SIGKILL this long after SIGTERM when the lock is\n"
	      "                               lost (default 5s)\n"
	      "      --schema=NAME            schema of the name registry (default pgcoord)\n"
	      "      --no-register            do not record NAME in the name registry (nor when\n"
	      "                               the lock was taken)\n"
	      "      --wait-for-db[=DURATION]  if the database is not reachable yet, retry\n"
	      "                               until it is (or for at most DURATION, then\n"
	      "                               exit 69); default: exit 69 at once\n"
	      "      --fence                  once the lock is held, take a fencing token for\n"
	      "                               NAME (from the same counter as leases) and pass\n"
	      "                               it in PGCOORD_FENCE_TOKEN; needs pgcoord init\n"
	      "  -v, --verbose                say when the lock is taken, busy or timed out\n"
	      "                               (the global -q wins)\n"
	      "  -h, --help                   show this help and exit\n"
	      "\n"
	      "COMMAND runs in its own process group with PGCOORD_LOCK_NAME, PGCOORD_LOCK_KEY\n"
	      "and PGCOORD_LOCK_MODE (and PGCOORD_FENCE_TOKEN with --fence) in its\n"
	      "environment; SIGINT, SIGTERM, SIGHUP and SIGQUIT\n"
	      "are forwarded to the whole group. As with flock(1), the lock lives as long as\n"
	      "anything COMMAND started still holds descriptor PGCOORD_LOCK_FD (the lock's\n"
	      "session), even when pgcoord itself is killed.\n"
	      "\n"
	      "Exit status: COMMAND's status (128+N if killed by signal N); the -E code (1)\n"
	      "if the lock is held or the wait timed out; 64 usage; 65 lock name collision;\n"
	      "69 database unavailable; 75 lock lost; 77 credentials refused; 78 a setting\n"
	      "that cannot work (or a statement-mode pooler); 126 COMMAND not executable;\n"
	      "127 COMMAND not found.\n", f);
}

typedef struct run_env {
	char *entries[8]; /* "NAME=value", malloc'd; NULL-terminated */
	int n;
} run_env;

typedef struct run_ctx {
	/* options */
	const char *name;
	const char *key_text;
	bool nonblock, shared, verbose, no_register, fence;
	int64_t wait_ms;          /* PGC_WAIT_FOREVER when -w is not given */
	int conflict_code;
	int64_t check_ms, heartbeat_ms, kill_after_ms;
	int64_t dbwait_ms;        /* --wait-for-db: CLI_DBWAIT_OFF without */
	const char *schema;
	char **argv;              /* the command */
	/* state */
	pgc_key key;
	char desc[PGC_KEY_NAME_MAX + 64];
	pgc_conn *conn;
	pgc_lock *lock;
	cli_child child;
	run_env env;
	int64_t token;            /* --fence: the fencing token, 0 without */
	int sock;                 /* the lock session's socket, which the command inherits */
	int held[2];              /* a pipe: the command inherits the write end; -1 when closed */
	bool handed_over;         /* the command's processes keep the session: abandon it */
} run_ctx;

static int env_add(run_env *e, const char *name, const char *value)
{
	if (e->n + 1 >= (int)(sizeof e->entries / sizeof e->entries[0]))
		return -1;
	size_t len = strlen(name) + strlen(value) + 2;
	char *s = malloc(len);
	if (s == NULL)
		return -1;
	snprintf(s, len, "%s=%s", name, value);
	e->entries[e->n++] = s;
	e->entries[e->n] = NULL;
	return 0;
}

static void env_free(run_env *e)
{
	for (int i = 0; i < e->n; i++)
		free(e->entries[i]);
	e->n = 0;
}

static bool parse_duration_opt(const char *opt, const char *text, int64_t min_ms, int64_t *out)
{
	int rc;
	return cli_duration_opt("run", opt, text, min_ms, INT64_MAX, out, &rc);
}

/* Returns 0 to go on, or the exit code (also 0 for --help, with *done set). */
static int parse(run_ctx *r, int argc, char **argv, bool *done)
{
	enum { OPT_CHECK = 256, OPT_HEARTBEAT, OPT_KILL, OPT_SCHEMA, OPT_NOREG, OPT_FENCE, OPT_DBWAIT };
	static const struct option longopts[] = {
		{ "nonblock", no_argument, NULL, 'n' },
		{ "nb", no_argument, NULL, 'n' },
		{ "wait", required_argument, NULL, 'w' },
		{ "timeout", required_argument, NULL, 'w' },
		{ "shared", no_argument, NULL, 's' },
		{ "conflict-exit-code", required_argument, NULL, 'E' },
		{ "key", required_argument, NULL, 'k' },
		{ "check-interval", required_argument, NULL, OPT_CHECK },
		{ "heartbeat-timeout", required_argument, NULL, OPT_HEARTBEAT },
		{ "kill-after", required_argument, NULL, OPT_KILL },
		{ "schema", required_argument, NULL, OPT_SCHEMA },
		{ "no-register", no_argument, NULL, OPT_NOREG },
		{ "fence", no_argument, NULL, OPT_FENCE },
		{ "wait-for-db", optional_argument, NULL, OPT_DBWAIT },
		{ "verbose", no_argument, NULL, 'v' },
		{ "help", no_argument, NULL, 'h' },
		{ NULL, 0, NULL, 0 },
	};
	/* Everything after the first "--" is the command, untouched by option parsing. */
	int dd = -1;
	for (int i = 1; i < argc; i++)
		if (strcmp(argv[i], "--") == 0) {
			dd = i;
			break;
		}
	int nopt = dd < 0 ? argc : dd;
	opterr = 0;
	int ch;
	long long v;
	while ((ch = getopt_long(nopt, argv, ":nw:sE:k:vh", longopts, NULL)) != -1) {
		switch (ch) {
		case 'n':
			r->nonblock = true;
			break;
		case 'w':
			if (!parse_duration_opt("--wait", optarg, 0, &r->wait_ms))
				return EXIT_USAGE;
			break;
		case 's':
			r->shared = true;
			break;
		case 'E':
			if (!cli_parse_int(optarg, 0, 255, &v))
				return cli_usage_error("run", "--conflict-exit-code must be a number from 0 to 255, not \"%s\"", optarg);
			r->conflict_code = (int)v;
			break;
		case 'k':
			r->key_text = optarg;
			break;
		case OPT_CHECK:
			if (!parse_duration_opt("--check-interval", optarg, 10, &r->check_ms))
				return EXIT_USAGE;
			break;
		case OPT_HEARTBEAT:
			if (!parse_duration_opt("--heartbeat-timeout", optarg, 10, &r->heartbeat_ms))
				return EXIT_USAGE;
			break;
		case OPT_KILL:
			if (!parse_duration_opt("--kill-after", optarg, 0, &r->kill_after_ms))
				return EXIT_USAGE;
			break;
		case OPT_SCHEMA:
			r->schema = optarg;
			break;
		case OPT_NOREG:
			r->no_register = true;
			break;
		case OPT_FENCE:
			r->fence = true;
			break;
		case OPT_DBWAIT: {
			int rc;
			if (!cli_dbwait_opt("run", optarg, &r->dbwait_ms, &rc))
				return rc;
			break;
		}
		case 'v':
			r->verbose = !g_cli.quiet; /* -q wins: only errors */
			break;
		case 'h':
			usage(stdout);
			*done = true;
			return 0;
		default:
			return cli_getopt_error("run", ch, argv);
		}
	}
	if (optind < nopt) {
		r->name = argv[optind++];
		if (optind < nopt) {
			if (dd < 0)
				return cli_usage_error("run", "missing \"--\" before the command");
			return cli_usage_error("run", "unexpected argument \"%s\" before \"--\"", argv[optind]);
		}
	}
	if (r->name != NULL && r->key_text != NULL)
		return cli_usage_error("run", "give a lock NAME or --key, not both");
	if (r->name == NULL && r->key_text == NULL)
		return cli_usage_error("run", "missing lock NAME (or --key N|A,B)");
	if (dd < 0)
		return cli_usage_error("run", "missing \"--\" before the command");
	if (dd + 1 >= argc)
		return cli_usage_error("run", "missing command after \"--\"");
	r->argv = argv + dd + 1;
	if (r->kill_after_ms > INT32_MAX || r->heartbeat_ms > INT32_MAX || r->check_ms > INT32_MAX)
		return cli_usage_error("run", "durations must be shorter than 24 days");
	if (r->schema != NULL && *r->schema == '\0')
		return cli_usage_error("run", "--schema must not be empty");
	if (r->fence && r->shared)
		return cli_usage_error("run", "--fence needs an exclusive lock: shared holders would fence each other out");

	pgc_error err;
	int rc = r->name ? pgc_key_from_name(r->name, &r->key, &err) : pgc_key_parse(r->key_text, &r->key, &err);
	if (rc != PGC_OK)
		return cli_usage_error("run", "%s", err.message);
	pgc_key_describe(&r->key, r->desc, sizeof r->desc);
	return 0;
}

static void say_waiting(run_ctx *r)
{
	pgc_lock_holder *h = NULL;
	size_t n = 0;
	pgc_error err;
	char who[160] = "";
	if (pgc_lock_holders(r->conn, &r->key, &h, &n, &err) == PGC_OK) {
		for (size_t i = 0; i < n; i++)
			if (h[i].granted) {
				snprintf(who, sizeof who, " (held by pid %d, %s%s%s)", h[i].pid,
				         h[i].application_name[0] ? cli_esc(h[i].application_name) : "no application_name",
				         h[i].client_addr[0] ? " from " : "", h[i].client_addr);
				break;
			}
		pgc_free(h);
	}
	fprintf(stderr, "pgcoord: waiting for lock %s%s...\n", cli_esc(r->desc), who);
}

static int acquire(run_ctx *r)
{
	pgc_lock_options o = PGC_LOCK_OPTIONS_INIT;
	o.flags = PGC_LOCK_AUTO_SCOPE | (r->shared ? PGC_LOCK_SHARED : 0) |
	          (r->no_register ? PGC_LOCK_NO_REGISTRY : PGC_LOCK_RECORD);
	o.timeout_ms = r->nonblock ? 0 : r->wait_ms;
	if (r->nonblock)
		o.flags |= PGC_LOCK_TRY;
	o.cancel_fd = cli_signal_fd();
	o.schema = r->schema;
	pgc_error err;
	int64_t t0 = pgc__now_ms();
	char took[PGC_DURATION_FORMAT_MAX];
	int rc;
	if (!r->nonblock && !g_cli.quiet && isatty(STDERR_FILENO)) {
		/* On a terminal, say who we are waiting for rather than hang silently. */
		pgc_lock_options once = o;
		once.flags |= PGC_LOCK_TRY;
		once.timeout_ms = 0;
		rc = pgc_lock_acquire_ex(r->conn, &r->key, &once, &r->lock, &err);
		if (rc != PGC_EBUSY)
			goto done;
		say_waiting(r);
	}
	rc = pgc_lock_acquire_ex(r->conn, &r->key, &o, &r->lock, &err);
done:
	switch (rc) {
	case PGC_OK:
		if (r->verbose)
			fprintf(stderr, "pgcoord: acquired %s lock %s in %s%s\n", r->shared ? "shared" : "exclusive",
			        cli_esc(r->desc), cli_duration_str(pgc__now_ms() - t0, took),
			        pgc_lock_held_in_transaction(r->lock)
			                ? ", held in an open transaction (a transaction-mode pooler is in between)"
			                : "");
		return 0;
	case PGC_EBUSY:
	case PGC_ETIMEDOUT:
		if (r->verbose)
			cli_errorf("%s", err.message);
		return r->conflict_code;
	case PGC_EINTR: {
		int sig = cli_signal_take();
		return 128 + (sig ? sig : SIGTERM);
	}
	case PGC_ECOLLISION:
		cli_errorf("%s", err.message);
		return EXIT_DATAERR;
	default:
		return cli_report(&err);
	}
}

/* --fence: a token greater than every one granted before for this name, taken while the lock
 * is held and before the command starts, so that a holder that lost the lock and a newer one
 * can be told apart by whatever checks the token. The name is the lock's NAME, or its key as
 * pgcoord prints it ("42", "20,7"). */
static int take_token(run_ctx *r)
{
	char holder[300], host[256] = "";
	gethostname(host, sizeof host - 1);
	snprintf(holder, sizeof holder, "%s:%d", host, (int)getpid());
	char key[PGC_KEY_FORMAT_MAX];
	pgc_key_format(&r->key, key, sizeof key);
	pgc_lease_options o = PGC_LEASE_OPTIONS_INIT;
	o.schema = r->schema;
	pgc_error err;
	/* The token must commit before the command uses it: a lock held in an open transaction
	 * leaves the lock's session inside that transaction, so the token comes from a second
	 * one. */
	pgc_conn *tc = r->conn;
	if (pgc_lock_held_in_transaction(r->lock)) {
		int crc = cli_connect("run", &tc);
		if (crc != 0)
			return crc;
	}
	int rc = pgc_fence_next(tc, r->key.name[0] ? r->key.name : key, holder, &o, &r->token, &err);
	if (tc != r->conn)
		pgc_conn_close(tc);
	if (rc == PGC_OK)
		return 0;
	if (rc == PGC_EBUSY) {
		cli_errorf("%s: a lease of the same name is held, so no fencing token can be given to this lock", err.message);
		return EXIT_DATAERR;
	}
	return cli_report(&err);
}

static int build_env(run_ctx *r)
{
	char key[PGC_KEY_FORMAT_MAX];
	pgc_key_format(&r->key, key, sizeof key);
	char fd[16];
	snprintf(fd, sizeof fd, "%d", r->sock);
	if (env_add(&r->env, "PGCOORD_LOCK_NAME", r->key.name) != 0 ||
	    env_add(&r->env, "PGCOORD_LOCK_KEY", key) != 0 ||
	    env_add(&r->env, "PGCOORD_LOCK_MODE", r->shared ? "shared" : "exclusive") != 0 ||
	    env_add(&r->env, "PGCOORD_LOCK_FD", fd) != 0) {
		cli_errorf("out of memory");
		return EXIT_SOFTWARE;
	}
	if (r->fence) {
		char tok[32];
		snprintf(tok, sizeof tok, "%lld", (long long)r->token);
		if (env_add(&r->env, "PGCOORD_FENCE_TOKEN", tok) != 0) {
			cli_errorf("out of memory");
			return EXIT_SOFTWARE;
		}
	}
	return 0;
}

/* Whether any process that the command started still holds the write end of r->held (and so,
 * most likely, the session's socket, which it inherited at the same time). Called once what
 * was left of the command's group has been sent SIGKILL: those processes close their ends as
 * they die, which a loaded machine may take a moment to get to, so the pipe is given up to
 * 2 s to close before whatever still holds it is taken for a process outside the group. */
static bool still_held(run_ctx *r)
{
	if (r->held[0] < 0)
		return false;
	struct pollfd p = { r->held[0], POLLIN, 0 };
	int n;
	do
		n = poll(&p, 1, 2000);
	while (n < 0 && errno == EINTR);
	return n == 0;
}

/* The lock is gone while the command runs: stop the command, say why, exit 75. */
static int lost(run_ctx *r, const pgc_error *err)
{
	char after[PGC_DURATION_FORMAT_MAX];
	cli_errorf("%s; stopping the command: SIGTERM to process group %d, SIGKILL after %s",
	           err->message, (int)r->child.pid, cli_duration_str(r->kill_after_ms, after));
	cli_child_terminate(&r->child, (int)r->kill_after_ms);
	return EXIT_LOCKLOST;
}

static int supervise(run_ctx *r)
{
	int sigfd = cli_signal_fd();
	int64_t next_beat = pgc__now_ms() + r->check_ms;
	pgc_error err;
	for (;;) {
		if (cli_child_poll(&r->child))
			break;
		int64_t now = pgc__now_ms();
		if (now >= next_beat) {
			if (pgc_lock_check(r->lock, (int)r->heartbeat_ms, &err) != PGC_OK)
				return lost(r, &err);
			next_beat = pgc__now_ms() + r->check_ms;
			continue;
		}
		struct pollfd fds[2] = { { sigfd, POLLIN, 0 }, { pgc_conn_socket(r->conn), POLLIN, 0 } };
		int n = poll(fds, 2, (int)(next_beat - now));
		if (n > 0 && fds[1].revents != 0) {
			/* The server spoke unasked: usually the FATAL of a terminated session. */
			if (pgc_lock_check(r->lock, 0, &err) != PGC_OK)
				return lost(r, &err);
		}
	}
	/* The command is done. Had the lock been lost since the last check, the command ran
	 * part of the time unprotected: that must not look like success. The release proves the
	 * opposite: the server answers true only to the session that still holds the lock (and
	 * commits only the transaction that still holds it), and a session that lost it cannot
	 * have it back. */
	int code = cli_child_exit_code(&r->child);
	cli_child_terminate(&r->child, 0); /* whatever it left behind in its group */
	if (pgc_lock_check(r->lock, 0, &err) != PGC_OK) {
		cli_errorf("%s before the command finished (its exit status was %d)", err.message, code);
		return EXIT_LOCKLOST;
	}
	if (still_held(r)) {
		/* Something the command started (outside its process group) still runs with the
		 * session's socket: the lock is theirs now, and ends with the last of them. */
		if (!g_cli.quiet)
			cli_errorf("processes that the command started still hold lock %s's session "
			           "(descriptor %d): the lock stays held until the last of them exits",
			           cli_esc(r->desc), r->sock);
		r->handed_over = true;
		r->lock = NULL;
		return code;
	}
	int rc = pgc_lock_release(r->lock, &err);
	r->lock = NULL;
	if (rc == PGC_ENOTHELD || rc == PGC_ELOCKLOST) {
		cli_errorf("%s (the command's exit status was %d)", err.message, code);
		return EXIT_LOCKLOST;
	}
	if (rc != PGC_OK) {
		/* Closing the session releases it anyway. */
		cli_errorf("releasing lock %s: %s", cli_esc(r->desc), err.message);
	}
	return code;
}

int cmd_run(int argc, char **argv)
{
	run_ctx r;
	memset(&r, 0, sizeof r);
	r.held[0] = r.held[1] = -1;
	r.wait_ms = PGC_WAIT_FOREVER;
	r.conflict_code = EXIT_CONFLICT;
	r.check_ms = 1000;
	r.heartbeat_ms = 5000;
	r.kill_after_ms = 5000;
	bool done = false;
	int rc = parse(&r, argc, argv, &done);
	if (rc != 0 || done)
		return rc;
	if (r.wait_ms == 0)
		r.nonblock = true; /* as flock(1): -w 0 is -n */
	/* A command that cannot start must not take the lock (and a token) first. */
	if ((rc = cli_command_check(r.argv[0])) != 0)
		return rc;
	/* Signals are caught from here on: one that arrives while we wait for the lock abandons
	 * the wait cleanly instead of leaving a request queued on the server. */
	if (cli_signal_fd() < 0) {
		cli_errorf("cannot set up signal handling");
		return EXIT_SOFTWARE;
	}
	if ((rc = cli_connect_wait("run", r.dbwait_ms, &r.conn)) != 0)
		return rc;
	if ((rc = acquire(&r)) != 0)
		goto out;
	if (r.fence && (rc = take_token(&r)) != 0)
		goto out;
	r.sock = pgc_conn_socket(r.conn);
	if ((rc = build_env(&r)) != 0)
		goto out;
	if (pipe2(r.held, O_CLOEXEC) != 0) {
		cli_errorf("cannot create a pipe: %s", strerror(errno));
		r.held[0] = r.held[1] = -1;
		rc = EXIT_SOFTWARE;
		goto out;
	}
	int keep[2] = { r.sock, r.held[1] };
	cli_child_io io = { -1, -1, -1, NULL, keep, 2 };
	rc = cli_child_spawn(&r.child, r.argv, r.env.entries, &io);
	close(r.held[1]);
	r.held[1] = -1;
	if (rc != 0)
		goto out; /* 127 / 126: reported by the spawner; the lock is released below */
	rc = supervise(&r);
out:
	if (r.lock != NULL) {
		pgc_error err;
		if (pgc_lock_release(r.lock, &err) != PGC_OK && rc == 0)
			rc = cli_report(&err);
	}
	if (r.handed_over)
		pgc_conn_abandon(r.conn);
	else
		pgc_conn_close(r.conn);
	if (r.held[0] >= 0)
		close(r.held[0]);
	env_free(&r.env);
	return rc;
}

/* jobcmd.c - the job handler that runs a command per job (pgcoord worker, pgcoord cron run)
 *
 * The payload goes to the command's stdin (a memfd, so a payload of any size never blocks),
 * the job's id, queue and attempt go to its environment. Exit 0 completes the job, 75 asks for
 * a retry later, anything else fails it (retried with backoff until max_attempts); the tail of
 * its stderr becomes the error text, and with its exit status goes to the run log (whatever
 * the outcome). Each command runs in its own process group (cli/child.c)
 * and the whole group is killed when the job times out or its lease is lost, and when the job
 * is cancelled (then with the worker's --grace between SIGTERM and SIGKILL), and what is left
 * of it is killed when the command exits. The caller starts the guard (cli_child_guard_start)
 * before its threads: if the worker dies, even by SIGKILL, the guard kills the group of every
 * command still running, so nothing left in a job's group outlives the worker that claimed it. */
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include "child.h"
#include "cli.h"
#include "jobcmd.h"
#include "util/util.h"

/* Keeps the last bytes written to stderr. */
typedef struct tail {
	char buf[4096];
	size_t len;
} tail;

static void tail_add(tail *t, const char *p, size_t n)
{
	if (n >= sizeof t->buf) {
		p += n - sizeof t->buf;
		n = sizeof t->buf;
	}
	if (t->len + n > sizeof t->buf) {
		size_t drop = t->len + n - sizeof t->buf;
		memmove(t->buf, t->buf + drop, t->len - drop);
		t->len -= drop;
	}
	memcpy(t->buf + t->len, p, n);
	t->len += n;
}

/* Copies what the command wrote to stderr (nonblocking fd) to ours and to the tail; the result
 * of the last read: 0 at end of file, -1 when nothing more is there now. */
static ssize_t drain_stderr(int fd, tail *t)
{
	char buf[4096];
	ssize_t r;
	while ((r = read(fd, buf, sizeof buf)) > 0) {
		tail_add(t, buf, (size_t)r);
		ssize_t wr = write(STDERR_FILENO, buf, (size_t)r);
		(void)wr;
	}
	return r;
}

/* Replaces bytes that are not valid UTF-8 with '?', in place: the error text goes to the
 * server, which refuses invalid text. */
static void utf8_sanitize(char *s)
{
	unsigned char *p = (unsigned char *)s;
	while (*p) {
		int n = *p < 0x80 ? 1 : (*p & 0xe0) == 0xc0 ? 2 : (*p & 0xf0) == 0xe0 ? 3 : (*p & 0xf8) == 0xf0 ? 4 : 0;
		bool ok = n > 0 && !(n == 2 && *p < 0xc2) && !(n == 4 && *p > 0xf4);
		for (int i = 1; ok && i < n; i++)
			ok = (p[i] & 0xc0) == 0x80;
		if (!ok) {
			*p++ = '?';
			continue;
		}
		p += n;
	}
}

/* The last 10 lines of the tail, into out. */
static void tail_lines(const tail *t, char *out, size_t size)
{
	size_t end = t->len;
	while (end > 0 && (t->buf[end - 1] == '\n' || t->buf[end - 1] == '\r'))
		end--;
	size_t start = end;
	int lines = 0;
	while (start > 0) {
		if (t->buf[start - 1] == '\n' && ++lines == 10)
			break;
		start--;
	}
	size_t n = end - start;
	if (n >= size)
		start = end - (n = size - 1);
	memcpy(out, t->buf + start, n);
	out[n] = '\0';
}

/* The job's result, from the file PGCOORD_RESULT_FILE names (fd: that file, open): what the
 * command wrote there, without its trailing white space, into res->result_json; nothing when
 * it wrote nothing. One over PGC_JOB_RESULT_MAX fails the run instead (and one that is not JSON
 * is refused by the server, which fails it too, with the reason). */
static void read_result(int fd, pgc_job_result *res)
{
	struct stat st;
	if (fd < 0 || fstat(fd, &st) != 0 || st.st_size == 0)
		return;
	if (st.st_size > PGC_JOB_RESULT_MAX + 64) {
		res->outcome = PGC_JOB_FAIL;
		snprintf(res->error, sizeof res->error,
		         "the result the command wrote to PGCOORD_RESULT_FILE is %lld bytes, over the limit of %d",
		         (long long)st.st_size, PGC_JOB_RESULT_MAX);
		return;
	}
	char *buf = malloc((size_t)st.st_size + 1);
	size_t n = 0;
	while (buf != NULL && n < (size_t)st.st_size) {
		ssize_t r = pread(fd, buf + n, (size_t)st.st_size - n, (off_t)n);
		if (r < 0 && errno == EINTR)
			continue;
		if (r <= 0)
			break;
		n += (size_t)r;
	}
	if (buf == NULL || n < (size_t)st.st_size) {
		free(buf);
		res->outcome = PGC_JOB_FAIL;
		snprintf(res->error, sizeof res->error, "worker: cannot read the command's result: %s",
		         buf == NULL ? "out of memory" : "short read");
		return;
	}
	while (n > 0 && (buf[n - 1] == '\n' || buf[n - 1] == '\r' || buf[n - 1] == ' ' || buf[n - 1] == '\t'))
		n--;
	buf[n] = '\0';
	if (n == 0) {
		free(buf);
		return;
	}
	res->result_json = buf;
}

/* Set once the guard is found gone: the stop is asked for once. */
static atomic_bool guard_lost;

void cli_jobcmd_run(const pgc_job *job, pgc_job_result *res, void *arg)
{
	cli_jobcmd *ctx = arg;
	char **argv = ctx->argv, **own = NULL;
	atomic_fetch_add(&ctx->running, 1);
	int in = memfd_create("pgcoord-payload", MFD_CLOEXEC);
	int errp[2] = { -1, -1 };
	/* The file the command may write its result to (PGCOORD_RESULT_FILE): its own, empty. */
	const char *tmpdir = getenv("TMPDIR");
	char rpath[512];
	snprintf(rpath, sizeof rpath, "%s/pgcoord-result-XXXXXX", tmpdir != NULL && *tmpdir ? tmpdir : "/tmp");
	int rfd = mkostemp(rpath, O_CLOEXEC);
	if (rfd < 0)
		rpath[0] = '\0';
	if (in < 0 || rfd < 0 || pipe2(errp, O_CLOEXEC) != 0) {
		res->outcome = PGC_JOB_FAIL;
		snprintf(res->error, sizeof res->error, "worker: cannot create the command's input: %s", strerror(errno));
		goto out;
	}
	size_t len = strlen(job->payload), off = 0;
	while (off < len) {
		ssize_t w = write(in, job->payload + off, len - off);
		if (w < 0 && errno == EINTR)
			continue;
		if (w <= 0)
			break;
		off += (size_t)w;
	}
	if (off < len || write(in, "\n", 1) != 1 || lseek(in, 0, SEEK_SET) != 0) {
		res->outcome = PGC_JOB_FAIL;
		snprintf(res->error, sizeof res->error, "worker: cannot write the payload for the command");
		goto out;
	}
	if (argv == NULL) {
		pgc_job_outcome o = ctx->resolve(job, &own, res->error, sizeof res->error, ctx->resolve_arg);
		if (o != PGC_JOB_COMPLETE) {
			res->outcome = o;
			res->delay_ms = ctx->retry_delay_ms;
			goto out;
		}
		argv = own;
	}
	char e_id[48], e_queue[160], e_att[48], e_max[48];
	snprintf(e_id, sizeof e_id, "PGCOORD_JOB_ID=%lld", (long long)job->id);
	snprintf(e_queue, sizeof e_queue, "PGCOORD_JOB_QUEUE=%s", job->queue);
	snprintf(e_att, sizeof e_att, "PGCOORD_JOB_ATTEMPT=%d", job->attempt);
	snprintf(e_max, sizeof e_max, "PGCOORD_JOB_MAX_ATTEMPTS=%d", job->max_attempts);
	/* A keyed job: its concurrency key (at most PGC_QUEUE_KEY_MAX bytes). */
	char e_key[PGC_QUEUE_KEY_MAX + 32];
	snprintf(e_key, sizeof e_key, "PGCOORD_JOB_KEY=%s", job->key != NULL ? job->key : "");
	/* A job of a cron schedule: its name and tick too. */
	char cs[PGC_CRON_NAME_MAX + 1], ct[PGC_CRON_NAME_MAX + 1];
	char e_cs[sizeof cs + 32], e_ct[sizeof ct + 32];
	bool cron = pgc_cron_payload_tick(job->payload, cs, ct, sizeof cs);
	snprintf(e_cs, sizeof e_cs, "PGCOORD_CRON_SCHEDULE=%s", cs);
	snprintf(e_ct, sizeof e_ct, "PGCOORD_CRON_TICK=%s", ct);
	char e_res[sizeof rpath + 32];
	snprintf(e_res, sizeof e_res, "PGCOORD_RESULT_FILE=%s", rpath);
	char *env[] = { e_id, e_queue, e_att, e_max, e_key, e_res, cron ? e_cs : NULL, e_ct, NULL };
	cli_child_io io = { in, -1, errp[1], argv == ctx->argv ? ctx->path : NULL, NULL, 0 };
	cli_child c;
	int64_t t0 = pgc__now_ms();
	int src = cli_child_spawn(&c, argv, env, &io);
	close(errp[1]);
	errp[1] = -1;
	if (src == EXIT_SOFTWARE && !cli_child_guard_alive()) {
		/* Someone killed it: no command runs unguarded, so this worker stops (gracefully, as
		 * on SIGTERM) and whoever supervises it starts a new one. */
		res->outcome = PGC_JOB_RETRY_LATER;
		res->delay_ms = ctx->retry_delay_ms;
		snprintf(res->error, sizeof res->error, "worker: the process guard is gone");
		if (!atomic_exchange(&guard_lost, true)) {
			cli_errorf("the process guard is gone: stopping");
			kill(getpid(), SIGTERM);
		}
		goto out;
	}
	if (src != 0) {
		res->outcome = PGC_JOB_FAIL;
		snprintf(res->error, sizeof res->error, "%s: %s", argv[0],
		         src == EXIT_NOTFOUND ? "command not found (exit 127)" : "cannot execute (exit 126)");
		res->exit_status = src == EXIT_NOTFOUND ? EXIT_NOTFOUND : 126;
		goto out;
	}
	int pidfd = (int)syscall(SYS_pidfd_open, c.pid, 0);
	tail t = { .len = 0 };
	int status = 0;
	bool exited = false, timed_out = false, lost = false, cancelled = false, eof = false;
	fcntl(errp[0], F_SETFL, fcntl(errp[0], F_GETFL) | O_NONBLOCK);
	while (!exited) {
		struct pollfd p[2] = { { eof ? -1 : errp[0], POLLIN, 0 }, { pidfd, POLLIN, 0 } };
		int timeout = pidfd >= 0 ? 100 : 10;
		if (ctx->timeout_ms > 0) {
			int64_t left = t0 + ctx->timeout_ms - pgc__now_ms();
			if (left < timeout)
				timeout = left < 0 ? 0 : (int)left;
		}
		poll(p, 2, timeout);
		if (!eof && drain_stderr(errp[0], &t) == 0)
			eof = true;
		if (cli_child_reap(&c)) { /* the leftovers of its group are killed */
			status = c.status;
			exited = true;
			break;
		}
		if (ctx->timeout_ms > 0 && pgc__now_ms() - t0 >= ctx->timeout_ms)
			timed_out = true;
		else if (pgc_job_cancelled(job))
			cancelled = true;
		else if (pgc_job_lost(job))
			lost = true;
		if (timed_out || lost || cancelled) {
			/* The group gets SIGTERM, then SIGKILL after 2 s (a cancel: after --grace); the
			 * child is reaped. */
			int64_t grace = cancelled ? ctx->grace_ms : 2000;
			cli_child_terminate_fd(&c, grace > INT32_MAX ? INT32_MAX : (int)grace, pidfd);
			status = c.status;
			exited = true;
		}
	}
	/* What is left in the pipe (a grandchild may hold it open: do not wait for it). */
	drain_stderr(errp[0], &t);
	if (pidfd >= 0)
		close(pidfd);
	char last[1600];
	tail_lines(&t, last, sizeof last);
	utf8_sanitize(last);
	int code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
	/* For the run log: the status as a shell gives it, and the end of the output. */
	res->exit_status = WIFEXITED(status) ? code : WIFSIGNALED(status) ? 128 + WTERMSIG(status) : -1;
	tail_lines(&t, res->output, sizeof res->output);
	utf8_sanitize(res->output);
	if (timed_out) {
		res->outcome = PGC_JOB_FAIL;
		char d[PGC_DURATION_FORMAT_MAX];
		snprintf(res->error, sizeof res->error, "timed out after %s (process group killed)%s%s",
		         cli_duration_str(ctx->timeout_ms, d), last[0] ? ": " : "", last);
	} else if (lost) {
		res->outcome = PGC_JOB_FAIL; /* stale anyway: the job is no longer ours */
		snprintf(res->error, sizeof res->error, "lease lost: command killed");
	} else if (cancelled) {
		res->outcome = PGC_JOB_FAIL; /* not recorded: the job stays cancelled */
		snprintf(res->error, sizeof res->error, "cancelled: command stopped");
	} else if (code == 0) {
		res->outcome = PGC_JOB_COMPLETE;
		read_result(rfd, res);
	} else if (code == EXIT_LOCKLOST) {
		res->outcome = PGC_JOB_RETRY_LATER;
		res->delay_ms = ctx->retry_delay_ms;
	} else {
		res->outcome = PGC_JOB_FAIL;
		if (WIFSIGNALED(status))
			snprintf(res->error, sizeof res->error, "killed by signal %d%s%s", WTERMSIG(status),
			         last[0] ? ": " : "", last);
		else
			snprintf(res->error, sizeof res->error, "exit status %d%s%s", code, last[0] ? ": " : "", last);
	}
out:
	if (rfd >= 0) {
		close(rfd);
		unlink(rpath);
	}
	if (in >= 0)
		close(in);
	if (errp[0] >= 0)
		close(errp[0]);
	if (errp[1] >= 0)
		close(errp[1]);
	free(own);
	atomic_fetch_sub(&ctx->running, 1);
}

/* child.c - the user's command in its own process group, with signals forwarded to the group
 *
 * The child is started vfork-style (clone with CLONE_VM | CLONE_VFORK: no copy of the page
 * tables of a big threaded parent, which is what a worker starting thousands of short commands
 * a second pays for with fork()), and keeps everything fork() gave it: its own process group,
 * the parent-death signal, default dispositions and an empty signal mask. Exec failures travel
 * back through a close-on-exec pipe, so the parent knows synchronously whether the command
 * started (127 not found, 126 not executable, as env(1) reports). Signals
 * are turned into bytes on a self-pipe, so callers keep one poll() loop over the child, their
 * database socket and their timers.
 *
 * The guard (pgcoord worker, pgcoord cron run): a small process forked once, before any thread,
 * that outlives its parent for as long as it takes to kill what the parent's commands left.
 * It holds one end of a socket pair whose only other end is the parent's (close-on-exec, so no
 * command inherits it). Each child sends its own process group id on it before it execs (so
 * nothing the command does can come before), and the parent sends the id back, negated, once
 * the child has exited and its group has been killed and before the child is reaped (so the id
 * cannot have been reused). When the parent is gone, however it died, the guard reads end of
 * file and stops every group still registered (SIGTERM, SIGKILL after a grace shorter than what
 * is left of the jobs' leases): every process of a running job that stayed in its group,
 * grandchildren included. */
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "child.h"
#include "cli.h"

extern char **environ;

static int sig_pipe[2] = { -1, -1 };
/* The parent's end of the guard's socket, -1 without a guard; the guard's pid. */
static int guard_fd = -1;
static pid_t guard_pid;
/* Atomic, not only volatile: the worker's threads take it (finding nothing) while they
 * terminate their own children. */
static atomic_int pending_signal;

static void on_signal(int sig)
{
	int saved = errno;
	if (sig != SIGCHLD)
		pending_signal = sig;
	if (sig_pipe[1] >= 0) {
		char b = (char)sig;
		ssize_t n = write(sig_pipe[1], &b, 1);
		(void)n; /* a full pipe already wakes the loop */
	}
	errno = saved;
}

int cli_signal_fd(void)
{
	if (sig_pipe[0] >= 0)
		return sig_pipe[0];
	if (pipe2(sig_pipe, O_CLOEXEC | O_NONBLOCK) != 0)
		return -1;
	struct sigaction sa;
	memset(&sa, 0, sizeof sa);
	sa.sa_handler = on_signal;
	sigemptyset(&sa.sa_mask);
	sa.sa_flags = SA_RESTART;
	int sigs[] = { SIGINT, SIGTERM, SIGHUP, SIGQUIT, SIGCHLD };
	for (size_t i = 0; i < sizeof sigs / sizeof sigs[0]; i++)
		sigaction(sigs[i], &sa, NULL);
	return sig_pipe[0];
}

void cli_stop_signals(sigset_t *set)
{
	sigemptyset(set);
	sigaddset(set, SIGINT);
	sigaddset(set, SIGTERM);
	sigaddset(set, SIGHUP);
	sigaddset(set, SIGQUIT);
}

int cli_signal_take(void)
{
	return atomic_exchange(&pending_signal, 0);
}

static void drain_signal_pipe(void)
{
	char buf[64];
	while (sig_pipe[0] >= 0 && read(sig_pipe[0], buf, sizeof buf) > 0)
		;
}

/* The length of the name of an environment entry "NAME=value" (the whole entry without '='). */
static size_t env_name_len(const char *e)
{
	const char *eq = strchr(e, '=');
	return eq ? (size_t)(eq - e) : strlen(e);
}

/* The child's environment: ours without the names env sets, then env's entries ("NAME"
 * alone removes NAME, as putenv(3) does). Built in the parent, since the child shares its
 * memory until it execs. Returns a malloc()ed array whose strings are borrowed. */
static char **child_environ(char *const env[])
{
	size_t n_own = 0, n_env = 0;
	while (environ != NULL && environ[n_own] != NULL)
		n_own++;
	while (env != NULL && env[n_env] != NULL)
		n_env++;
	char **out = malloc((n_own + n_env + 1) * sizeof *out);
	if (out == NULL)
		return NULL;
	size_t k = 0;
	for (size_t i = 0; i < n_own; i++) {
		size_t len = env_name_len(environ[i]);
		bool replaced = false;
		for (size_t j = 0; j < n_env && !replaced; j++)
			replaced = env_name_len(env[j]) == len && strncmp(env[j], environ[i], len) == 0;
		if (!replaced)
			out[k++] = environ[i];
	}
	for (size_t j = 0; j < n_env; j++)
		if (strchr(env[j], '=') != NULL)
			out[k++] = env[j];
	out[k] = NULL;
	return out;
}

/* What the child needs, prepared by the parent. */
typedef struct spawn_args {
	char *const *argv;
	char **envp;
	const char *path;   /* argv[0] resolved, or NULL: search PATH */
	const cli_child_io *io;
	pid_t parent;
	int errfd;          /* close-on-exec: the errno of a failed exec, or end of file */
} spawn_args;

static _Noreturn void exec_failed(const spawn_args *a, int e)
{
	ssize_t n = write(a->errfd, &e, sizeof e);
	(void)n;
	_exit(e == ENOENT ? EXIT_NOTFOUND : EXIT_NOEXEC);
}

/* The child, between clone() and exec: system calls only (no allocation, no lock, no stdio),
 * since it shares the parent's memory and the parent's other threads go on running. Every
 * signal is blocked on entry (the parent blocked them before clone()), and every one the
 * parent handles goes back to its default before the mask is cleared, so that no handler of
 * the parent's can run here; and those a command expects to find at their default (SIGINT, SIGTERM, SIGHUP, SIGQUIT,
 * SIGCHLD, SIGPIPE, SIGTTOU, SIGTTIN) go back to it even when ignored. */
static int spawn_child(void *arg)
{
	spawn_args *a = arg;
	setpgid(0, 0);
	/* Registered with the guard before anything of the command runs; a child that cannot be
	 * registered does not run (the errno goes back negated). */
	if (guard_fd >= 0) {
		int32_t id = (int32_t)getpid();
		if (send(guard_fd, &id, sizeof id, MSG_NOSIGNAL) != (ssize_t)sizeof id) {
			int e = -errno;
			ssize_t n = write(a->errfd, &e, sizeof e);
			(void)n;
			_exit(EXIT_SOFTWARE);
		}
	}
	/* If pgcoord dies (even by SIGKILL) the command is told to stop. (pgcoord run also
	 * hands the command its lock's session, so that the lock outlives pgcoord for as long as
	 * anything the command started still runs.) */
	prctl(PR_SET_PDEATHSIG, SIGTERM);
	if (getppid() != a->parent)
		_exit(EXIT_SOFTWARE);
	struct sigaction dfl, cur;
	memset(&dfl, 0, sizeof dfl);
	dfl.sa_handler = SIG_DFL;
	int always[] = { SIGINT, SIGTERM, SIGHUP, SIGQUIT, SIGCHLD, SIGPIPE, SIGTTOU, SIGTTIN };
	for (int sig = 1; sig < NSIG; sig++) {
		bool reset = false;
		for (size_t i = 0; i < sizeof always / sizeof always[0]; i++)
			reset |= sig == always[i];
		if (!reset && sigaction(sig, NULL, &cur) == 0 && cur.sa_handler != SIG_DFL && cur.sa_handler != SIG_IGN)
			reset = true;
		if (reset)
			sigaction(sig, &dfl, NULL);
	}
	sigset_t none;
	sigemptyset(&none);
	sigprocmask(SIG_SETMASK, &none, NULL);
	const cli_child_io *io = a->io;
	if (io != NULL) {
		if (io->stdin_fd >= 0)
			dup2(io->stdin_fd, STDIN_FILENO);
		if (io->stdout_fd >= 0)
			dup2(io->stdout_fd, STDOUT_FILENO);
		if (io->stderr_fd >= 0)
			dup2(io->stderr_fd, STDERR_FILENO);
		/* The child's own descriptor table (no CLONE_FILES): ours stay close-on-exec. */
		for (int i = 0; i < io->n_keep_fds; i++)
			fcntl(io->keep_fds[i], F_SETFD, 0);
	}
	if (a->path != NULL) {
		execve(a->path, a->argv, a->envp);
		/* Gone since it was resolved: look again, as the shell would. */
		if (errno != ENOENT || strchr(a->argv[0], '/') != NULL)
			exec_failed(a, errno);
	}
	execvpe(a->argv[0], a->argv, a->envp);
	exec_failed(a, errno);
}

/* The child's stack while it shares our memory: its frames and execvpe()'s path buffer. */
#define SPAWN_STACK (64 * 1024)

/* Under a sanitizer the child forks instead: the sanitizers' interceptors of sigaction() and
 * friends keep state of their own, which a child sharing our memory would change for us. */
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
#define SPAWN_WITH_CLONE 0
#elif defined(__has_feature)
#if __has_feature(address_sanitizer) || __has_feature(thread_sanitizer) || __has_feature(memory_sanitizer)
#define SPAWN_WITH_CLONE 0
#endif
#endif
#ifndef SPAWN_WITH_CLONE
#define SPAWN_WITH_CLONE 1
#endif

/* Tells the guard that c's group is no more its business. */
static void guard_release(const cli_child *c)
{
	if (guard_fd < 0 || c->pid <= 0)
		return;
	int32_t id = -(int32_t)c->pid;
	ssize_t n;
	do
		n = send(guard_fd, &id, sizeof id, MSG_NOSIGNAL);
	while (n < 0 && errno == EINTR);
}

/* Reaps c if it exited (waiting for it when block). With a guard, or when kill_group, what is
 * left of its group is killed first and the guard is told, both while the exited child still
 * holds its id (a zombie's pid is never reused). Returns whether c has exited; false with errno
 * set when waiting failed. */
static bool reap(cli_child *c, bool block, bool kill_group)
{
	if (c->exited)
		return true;
	if (guard_fd >= 0 || kill_group) {
		siginfo_t si;
		si.si_pid = 0;
		if (waitid(P_PID, (id_t)c->pid, &si, WEXITED | WNOWAIT | (block ? 0 : WNOHANG)) != 0 ||
		    si.si_pid != c->pid)
			return false;
		kill(-c->pid, SIGKILL);
		guard_release(c);
	}
	int st;
	pid_t r;
	while ((r = waitpid(c->pid, &st, block ? 0 : WNOHANG)) < 0 && errno == EINTR)
		;
	if (r != c->pid)
		return false;
	c->exited = true;
	c->status = st;
	return true;
}

bool cli_child_reap(cli_child *c)
{
	return reap(c, false, true);
}

int cli_child_spawn(cli_child *c, char *const argv[], char *const env[], const cli_child_io *io)
{
	memset(c, 0, sizeof *c);
	if (cli_signal_fd() < 0) {
		cli_errorf("cannot set up signal handling: %s", strerror(errno));
		return EXIT_SOFTWARE;
	}
	int errpipe[2];
	if (pipe2(errpipe, O_CLOEXEC) != 0) {
		cli_errorf("cannot create a pipe: %s", strerror(errno));
		return EXIT_SOFTWARE;
	}
	spawn_args a = { argv, child_environ(env), io != NULL ? io->path : NULL, io, getpid(), errpipe[1] };
	void *stack = SPAWN_WITH_CLONE ? mmap(NULL, SPAWN_STACK, PROT_READ | PROT_WRITE,
	                                      MAP_PRIVATE | MAP_ANONYMOUS | MAP_STACK, -1, 0) : NULL;
	if (a.envp == NULL || stack == MAP_FAILED) {
		cli_errorf("cannot start %s: out of memory", argv[0]);
		free(a.envp);
		close(errpipe[0]);
		close(errpipe[1]);
		return EXIT_SOFTWARE;
	}
	/* Hand the terminal to the child's group when we own it, so that it can read from the
	 * terminal and ^C reaches it directly. */
	bool tty = isatty(STDIN_FILENO) && tcgetpgrp(STDIN_FILENO) == getpgrp() &&
	           (io == NULL || io->stdin_fd < 0); /* only a child that reads our terminal */
	sigset_t all, old;
	sigfillset(&all);
	pthread_sigmask(SIG_SETMASK, &all, &old);
#if SPAWN_WITH_CLONE
	/* vfork-style: the child borrows our memory and this thread waits until it has exec'd
	 * (or exited), so that starting a command costs no copy of the page tables of a big,
	 * threaded process; the other threads go on. */
	pid_t pid = clone(spawn_child, (char *)stack + SPAWN_STACK, CLONE_VM | CLONE_VFORK | SIGCHLD, &a);
#else
	pid_t pid = fork();
	if (pid == 0)
		spawn_child(&a);
#endif
	int spawn_errno = errno;
	pthread_sigmask(SIG_SETMASK, &old, NULL);
	if (stack != NULL)
		munmap(stack, SPAWN_STACK);
	free(a.envp);
	close(errpipe[1]);
	if (pid < 0) {
		cli_errorf("cannot start %s: %s", argv[0], strerror(spawn_errno));
		close(errpipe[0]);
		return EXIT_SOFTWARE;
	}
	setpgid(pid, pid); /* also in the parent: no race with signals sent right away */
	c->pid = pid;
	if (tty) {
		struct sigaction ign, oldsa;
		memset(&ign, 0, sizeof ign);
		ign.sa_handler = SIG_IGN;
		sigaction(SIGTTOU, &ign, &oldsa);
		c->own_tty = tcsetpgrp(STDIN_FILENO, pid) == 0;
		sigaction(SIGTTOU, &oldsa, NULL);
	}
	int e = 0;
	ssize_t n;
	do
		n = read(errpipe[0], &e, sizeof e);
	while (n < 0 && errno == EINTR);
	close(errpipe[0]);
	if (n == (ssize_t)sizeof e) {
		/* exec failed: reap the child and report like env(1). */
		while (!reap(c, true, false) && errno == EINTR)
			;
		c->exited = true;
		cli_child_poll(c);
		if (e < 0) {
			cli_errorf("cannot start %s: the process guard is gone: %s", argv[0], strerror(-e));
			return EXIT_SOFTWARE;
		}
		cli_errorf("%s: %s", argv[0], strerror(e));
		return e == ENOENT ? EXIT_NOTFOUND : EXIT_NOEXEC;
	}
	return 0;
}

static void give_back_tty(cli_child *c)
{
	if (!c->own_tty)
		return;
	struct sigaction ign, old;
	memset(&ign, 0, sizeof ign);
	ign.sa_handler = SIG_IGN;
	sigaction(SIGTTOU, &ign, &old);
	tcsetpgrp(STDIN_FILENO, getpgrp());
	sigaction(SIGTTOU, &old, NULL);
	c->own_tty = false;
}

bool cli_child_poll(cli_child *c)
{
	drain_signal_pipe();
	if (c->pid > 0 && !c->exited)
		reap(c, false, false);
	if (c->exited) {
		give_back_tty(c);
		return true;
	}
	int sig = cli_signal_take();
	if (sig != 0)
		cli_child_signal(c, sig);
	return false;
}

bool cli_child_wait(cli_child *c, int timeout_ms, int extra_fd)
{
	struct timespec start;
	clock_gettime(CLOCK_MONOTONIC, &start);
	for (;;) {
		if (cli_child_poll(c))
			return true;
		int left = -1;
		if (timeout_ms >= 0) {
			struct timespec now;
			clock_gettime(CLOCK_MONOTONIC, &now);
			long el = (now.tv_sec - start.tv_sec) * 1000 + (now.tv_nsec - start.tv_nsec) / 1000000;
			if (el >= timeout_ms)
				return false;
			left = (int)(timeout_ms - el);
		}
		struct pollfd fds[2] = { { sig_pipe[0], POLLIN, 0 }, { extra_fd, POLLIN, 0 } };
		int r = poll(fds, extra_fd >= 0 ? 2 : 1, left);
		if (r > 0 && extra_fd >= 0 && fds[1].revents != 0)
			return cli_child_poll(c);
	}
}

void cli_child_signal(cli_child *c, int sig)
{
	if (c->pid > 0 && !c->exited)
		kill(-c->pid, sig);
}

void cli_child_terminate(cli_child *c, int grace_ms)
{
	cli_child_terminate_fd(c, grace_ms, -1);
}

void cli_child_terminate_fd(cli_child *c, int grace_ms, int wake_fd)
{
	if (c->pid <= 0)
		return;
	if (!c->exited) {
		kill(-c->pid, SIGTERM);
		kill(-c->pid, SIGCONT); /* a stopped group cannot act on SIGTERM */
		if (!cli_child_wait(c, grace_ms < 0 ? 0 : grace_ms, wake_fd)) {
			kill(-c->pid, SIGKILL);
			while (!reap(c, true, false) && errno == EINTR)
				;
			give_back_tty(c);
		}
	}
	/* Whatever the child left behind in its group goes too. */
	kill(-c->pid, SIGKILL);
}

/* The guard's life: registered process groups in an array (at most one per running command),
 * killed at end of file. */
static _Noreturn void guard_main(int fd, int64_t grace_ms)
{
	struct sigaction sa;
	memset(&sa, 0, sizeof sa);
	for (int sig = 1; sig < NSIG; sig++) {
		sa.sa_handler = SIG_DFL;
		if (sig == SIGINT || sig == SIGTERM || sig == SIGHUP || sig == SIGQUIT || sig == SIGPIPE ||
		    sig == SIGTSTP || sig == SIGTTIN || sig == SIGTTOU || sig == SIGUSR1 || sig == SIGUSR2)
			sa.sa_handler = SIG_IGN;
		sigaction(sig, &sa, NULL);
	}
	sigset_t none;
	sigemptyset(&none);
	sigprocmask(SIG_SETMASK, &none, NULL);
	/* Its own group, so that a signal to the worker's group (a terminal's ^C, kill -- -PGID)
	 * leaves it to do its job; nothing open but the socket and stderr, so that it holds no
	 * database session, no terminal input and no pipe a reader waits on. */
	setpgid(0, 0);
	prctl(PR_SET_NAME, "pgcoord-guard");
	int null = open("/dev/null", O_RDWR);
	if (null >= 0) {
		dup2(null, STDIN_FILENO);
		dup2(null, STDOUT_FILENO);
	}
	if (fd != 3) {
		dup2(fd, 3);
		fd = 3;
	}
	fcntl(fd, F_SETFD, FD_CLOEXEC);
	close_range(4, ~0U, 0);
	pid_t *ids = NULL;
	size_t n = 0, cap = 0;
	for (;;) {
		int32_t id;
		ssize_t r = recv(fd, &id, sizeof id, MSG_DONTWAIT);
		if (r < 0 && errno == EINTR)
			continue;
		if (r < 0 && errno == EAGAIN) {
			/* Woken at most every 2 ms, with what came meanwhile: a worker that starts
			 * thousands of commands a second does not pay a context switch for each. */
			struct pollfd p = { fd, POLLIN, 0 };
			poll(&p, 1, -1);
			nanosleep(&(struct timespec){ 0, 2 * 1000000 }, NULL);
			continue;
		}
		if (r != (ssize_t)sizeof id)
			break; /* end of file: the parent is gone */
		if (id > 0) {
			if (n == cap) {
				size_t nc = cap ? cap * 2 : 64;
				pid_t *p = realloc(ids, nc * sizeof *p);
				if (p == NULL) {
					/* Cannot keep it: stop it rather than leave it unguarded. */
					kill(-id, SIGKILL);
					continue;
				}
				ids = p;
				cap = nc;
			}
			ids[n++] = id;
		} else {
			for (size_t i = 0; i < n; i++)
				if (ids[i] == -id) {
					ids[i] = ids[--n];
					break;
				}
		}
	}
	/* SIGTERM first, as the commands got from a worker that stopped (and their direct child
	 * from the parent-death signal), then SIGKILL to whatever is left after grace_ms. */
	for (size_t i = 0; i < n; i++) {
		kill(-ids[i], SIGTERM);
		kill(-ids[i], SIGCONT); /* a stopped group cannot act on SIGTERM */
	}
	struct timespec start, now;
	clock_gettime(CLOCK_MONOTONIC, &start);
	for (;;) {
		size_t left = 0;
		for (size_t i = 0; i < n; i++)
			left += kill(-ids[i], 0) == 0;
		clock_gettime(CLOCK_MONOTONIC, &now);
		int64_t el = (int64_t)(now.tv_sec - start.tv_sec) * 1000 + (now.tv_nsec - start.tv_nsec) / 1000000;
		if (left == 0 || el >= grace_ms)
			break;
		nanosleep(&(struct timespec){ 0, 20 * 1000000 }, NULL);
	}
	for (size_t i = 0; i < n; i++)
		kill(-ids[i], SIGKILL);
	_exit(0);
}

int cli_child_guard_start(int64_t grace_ms)
{
	if (guard_fd >= 0)
		return 0;
	int sv[2];
	if (socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, sv) != 0) {
		cli_errorf("cannot start the process guard: %s", strerror(errno));
		return EXIT_SOFTWARE;
	}
	fflush(NULL);
	pid_t pid = fork();
	if (pid < 0) {
		cli_errorf("cannot start the process guard: %s", strerror(errno));
		close(sv[0]);
		close(sv[1]);
		return EXIT_SOFTWARE;
	}
	if (pid == 0) {
		close(sv[0]);
		guard_main(sv[1], grace_ms);
	}
	close(sv[1]);
	guard_fd = sv[0];
	guard_pid = pid;
	return 0;
}

bool cli_child_guard_alive(void)
{
	if (guard_fd < 0)
		return true;
	siginfo_t si;
	si.si_pid = 0;
	return waitid(P_PID, (id_t)guard_pid, &si, WEXITED | WNOHANG | WNOWAIT) == 0 && si.si_pid == 0;
}

int cli_child_exit_code(const cli_child *c)
{
	if (!c->exited)
		return EXIT_SOFTWARE;
	if (WIFEXITED(c->status))
		return WEXITSTATUS(c->status);
	if (WIFSIGNALED(c->status))
		return 128 + WTERMSIG(c->status);
	return EXIT_SOFTWARE;
}

int cli_command_check(const char *cmd)
{
	char path[4096];
	return cli_command_resolve(cmd, path, sizeof path);
}

int cli_command_resolve(const char *cmd, char *out, size_t size)
{
	if (size > 0)
		out[0] = '\0';
	if (strchr(cmd, '/') != NULL) {
		struct stat st;
		if (stat(cmd, &st) != 0) {
			cli_errorf("%s: %s", cmd, strerror(errno));
			return errno == ENOENT ? EXIT_NOTFOUND : EXIT_NOEXEC;
		}
		if (S_ISDIR(st.st_mode) || access(cmd, X_OK) != 0) {
			cli_errorf("%s: not executable", cmd);
			return EXIT_NOEXEC;
		}
		snprintf(out, size, "%s", cmd);
		return 0;
	}
	const char *path = getenv("PATH");
	if (path == NULL)
		path = "/usr/local/bin:/usr/bin:/bin";
	bool seen = false;
	while (*path) {
		const char *colon = strchr(path, ':');
		size_t n = colon ? (size_t)(colon - path) : strlen(path);
		char full[4096];
		snprintf(full, sizeof full, "%.*s/%s", (int)n, n ? path : ".", cmd);
		struct stat st;
		if (stat(full, &st) == 0 && !S_ISDIR(st.st_mode)) {
			if (access(full, X_OK) == 0) {
				snprintf(out, size, "%s", full);
				return 0;
			}
			seen = true;
		}
		if (colon == NULL)
			break;
		path = colon + 1;
	}
	cli_errorf("%s: %s", cmd, seen ? "not executable" : "command not found");
	return seen ? EXIT_NOEXEC : EXIT_NOTFOUND;
}

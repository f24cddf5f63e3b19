/* child.h - running a command in its own process group, forwarding signals, killing the group
 *
 * Shared by every subcommand that runs a user's command (run, worker, elect). The child runs in
 * a new process group so that a signal reaches everything it started, not only a `sh -c`
 * wrapper. One event loop per pgcoord process: poll cli_signal_fd() together with your own
 * file descriptors, then call cli_child_poll() to reap the child and forward pending signals. */
#ifndef PGCOORD_CLI_CHILD_H
#define PGCOORD_CLI_CHILD_H

#include <signal.h>
#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>

typedef struct cli_child {
	pid_t pid;     /* also its process group id; 0 when not started */
	bool exited;   /* reaped */
	int status;    /* wait status once exited */
	bool own_tty;  /* we handed the terminal's foreground group to the child */
} cli_child;

typedef struct cli_child_io {
	int stdin_fd;  /* -1: inherit */
	int stdout_fd; /* -1: inherit */
	int stderr_fd; /* -1: inherit */
	const char *path; /* argv[0] as cli_command_resolve() found it, or NULL: search PATH at
	                     every start (a resolved path that is gone is searched for again) */
	const int *keep_fds; /* n_keep_fds descriptors the command inherits though they are
	                        close-on-exec here (pgcoord run's lock session), or NULL */
	int n_keep_fds;
} cli_child_io;

/* Installs handlers for SIGINT, SIGTERM, SIGHUP, SIGQUIT (recorded, to forward) and SIGCHLD
 * (wakes the loop), and returns the read end of a self-pipe that becomes readable whenever one
 * arrives. Idempotent. Returns -1 on failure. */
int cli_signal_fd(void);

/* The signals that stop pgcoord (SIGINT, SIGTERM, SIGHUP, SIGQUIT), as a set for sigwait and
 * pthread_sigmask. */
void cli_stop_signals(sigset_t *set);

/* The last forwarded-kind signal received and not yet taken (0 when none), and clears it. */
int cli_signal_take(void);

/* Starts argv (argv[0] searched in PATH) in a new process group with the extra environment
 * entries env ("NAME=value", NULL-terminated, may be NULL) and the given descriptors (io may
 * be NULL). A failed exec is reported here, synchronously: returns EXIT_NOTFOUND (127) when
 * the command does not exist, EXIT_NOEXEC (126) when it cannot be executed, with one line on
 * stderr; 0 when the child runs. */
int cli_child_spawn(cli_child *c, char *const argv[], char *const env[], const cli_child_io *io);

/* Whether cmd (argv[0] of a command, searched in PATH as the spawner does) can be started:
 * 0, or EXIT_NOTFOUND (127) / EXIT_NOEXEC (126) with one line on stderr ("CMD: command not
 * found", "CMD: not executable"). For commands that must not take a lock, a lease or a job
 * only to find that their command cannot run. */
int cli_command_check(const char *cmd);

/* cli_command_check(), also giving the file that runs into path (size bytes): cmd itself when
 * it names a file, else the first executable match in PATH. */
int cli_command_resolve(const char *cmd, char *path, size_t size);

/* Reaps the child if it exited and forwards a pending signal to its group. Returns true once
 * the child has exited. Never blocks. */
bool cli_child_poll(cli_child *c);

/* Waits until the child exits, a signal arrives, or timeout_ms passes (-1: no limit); also
 * wakes when extra_fd (>= 0) becomes readable. Returns true when the child has exited. */
bool cli_child_wait(cli_child *c, int timeout_ms, int extra_fd);

/* Sends sig to the child's whole process group (no-op once it exited). */
void cli_child_signal(cli_child *c, int sig);

/* SIGTERM to the group, then SIGKILL after grace_ms if the child is still alive; returns once
 * it has been reaped. Also kills whatever is left of the group after the child exits. */
void cli_child_terminate(cli_child *c, int grace_ms);

/* The same, also waking as soon as wake_fd (>= 0) becomes readable: a pidfd of the child, for
 * a thread whose SIGCHLD wake-up another thread may take from the shared self-pipe. Several
 * threads may call it at once, each for a child of its own. */
void cli_child_terminate_fd(cli_child *c, int grace_ms, int wake_fd);

/* Starts the guard of this process's commands: a process of its own that, when this process
 * dies (by any signal, SIGKILL included), sends SIGTERM to the process group of every command
 * started after this call and still running, then SIGKILL after grace_ms to what is left of
 * them, and exits. Call it once, before any thread starts. Returns 0, or
 * EXIT_SOFTWARE with one line on stderr. Once it runs, a command that cannot be registered
 * with it (the guard was killed) is not started: cli_child_spawn() returns EXIT_SOFTWARE. */
int cli_child_guard_start(int64_t grace_ms);

/* Reaps the child if it exited, never blocking, after killing what is left of its process
 * group (and telling the guard) while the exited child still holds the group's id. Returns
 * true once the child has exited (its wait status in c->status). Thread-safe for distinct
 * children. */
bool cli_child_reap(cli_child *c);

/* Whether the guard still runs (true without one). */
bool cli_child_guard_alive(void);

/* The exit code pgcoord should report for the child: its status, or 128 + signal. */
int cli_child_exit_code(const cli_child *c);

#endif

/* fuzz_cli_args.c - the whole command line of pgcoord: the input, split at NUL bytes, is argv
 * after "pgcoord". Whatever the arguments, the tool returns one of its documented exit codes,
 * every failure says why on stderr in a line that starts with "pgcoord", and nothing
 * crashes or leaks (the sanitizers watch).
 *
 * No server is reachable: PGHOST and PGCOORD_DSN name a socket directory that does not
 * exist, so a command that gets past its argument checks fails at once to connect (exit 69).
 * Inputs that could reach elsewhere are skipped: an argument with a '/' (a file or a socket
 * path), "host" (host=, hostaddr=), "service" or "://" (a URI). Relative file names resolve
 * in an empty directory, and standard input is /dev/null. */
#include <fcntl.h>
#include <getopt.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cli.h"

#define MAX_ARGS 24

static int devnull = -1, errfile = -1, saved_out = -1, saved_err = -1;
static const int handled[] = { SIGINT, SIGTERM, SIGHUP, SIGQUIT, SIGCHLD, SIGPIPE };
static struct sigaction saved_sa[sizeof handled / sizeof handled[0]];

static char dir[] = "/tmp/pgcoord-fuzz-cli.XXXXXX";

static void remove_dir(void)
{
	rmdir(dir); /* empty unless a command made a file, which it must not */
}

static void setup(void)
{
	if (mkdtemp(dir) == NULL || chdir(dir) != 0)
		abort();
	atexit(remove_dir);
	setenv("PGHOST", "/nonexistent/pgcoord-fuzz", 1);
	setenv("PGCOORD_DSN", "host=/nonexistent/pgcoord-fuzz", 1);
	unsetenv("DATABASE_URL");
	unsetenv("PGSERVICE");
	unsetenv("PGHOSTADDR");
	devnull = open("/dev/null", O_RDWR);
	char path[] = "/tmp/pgcoord-fuzz-err.XXXXXX";
	errfile = mkstemp(path);
	if (devnull < 0 || errfile < 0)
		abort();
	unlink(path);
	if (dup2(devnull, STDIN_FILENO) < 0)
		abort();
	saved_out = dup(STDOUT_FILENO);
	saved_err = dup(STDERR_FILENO);
	for (size_t i = 0; i < sizeof handled / sizeof handled[0]; i++)
		sigaction(handled[i], NULL, &saved_sa[i]);
}

static bool skipped(const char *a)
{
	return strchr(a, '/') != NULL || strstr(a, "host") != NULL || strstr(a, "service") != NULL ||
	       strstr(a, "://") != NULL;
}

static bool documented(int rc)
{
	switch (rc) {
	case 0: case EXIT_CONFLICT: case EXIT_USAGE: case EXIT_DATAERR: case EXIT_UNAVAILABLE:
	case EXIT_SOFTWARE: case EXIT_LOCKLOST: case EXIT_NOPERM: case EXIT_CONFIG: case EXIT_NOEXEC:
	case EXIT_NOTFOUND:
		return true;
	default:
		return false;
	}
}

/* libFuzzer's entry point (and replay.c's). */
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	if (devnull < 0)
		setup();
	char *buf = malloc(size + 1);
	if (buf == NULL)
		return 0;
	memcpy(buf, data, size);
	buf[size] = '\0';
	char *argv[MAX_ARGS + 2];
	int argc = 0;
	argv[argc++] = "pgcoord";
	for (char *p = buf; p <= buf + size && argc <= MAX_ARGS; p += strlen(p) + 1) {
		if (skipped(p)) {
			free(buf);
			return 0;
		}
		argv[argc++] = p;
	}
	argv[argc] = NULL;

	sigset_t mask;
	sigprocmask(SIG_SETMASK, NULL, &mask);
	if (ftruncate(errfile, 0) != 0 || lseek(errfile, 0, SEEK_SET) != 0)
		abort();
	fflush(stdout);
	dup2(devnull, STDOUT_FILENO);
	dup2(errfile, STDERR_FILENO);

	memset(&g_cli, 0, sizeof g_cli);
	optind = 0; /* glibc: start getopt afresh */
	int rc = cli_main(argc, argv);

	fflush(stdout);
	fflush(stderr);
	dup2(saved_out, STDOUT_FILENO);
	dup2(saved_err, STDERR_FILENO);
	/* A command may take over signals (run, elect, worker): give them back to the fuzzer. */
	sigprocmask(SIG_SETMASK, &mask, NULL);
	for (size_t i = 0; i < sizeof handled / sizeof handled[0]; i++)
		sigaction(handled[i], &saved_sa[i], NULL);

	/* Messages echo arguments, which are shorter than libFuzzer's -max_len: 64 kB holds all. */
	static char msg[65536];
	ssize_t n = pread(errfile, msg, sizeof msg - 1, 0);
	msg[n > 0 ? n : 0] = '\0';
	if (!documented(rc)) {
		fprintf(stderr, "exit status %d is not documented\n", rc);
		abort();
	}
	if (rc != 0 && strncmp(msg, "pgcoord", 7) != 0) {
		fprintf(stderr, "exit status %d without a \"pgcoord...\" message; stderr: \"%.300s\"\n", rc, msg);
		abort();
	}
	free(buf);
	return 0;
}

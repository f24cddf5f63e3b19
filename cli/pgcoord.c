/* pgcoord.c - the program's entry point; the tool itself is cli_main(), in a library of its
 * own so that the argument fuzzer (tests/fuzz/fuzz_cli_args.c) can call it */
#include <signal.h>

#include "cli.h"

int main(int argc, char **argv)
{
	int rc = cli_main(argc, argv);
	/* The work is done: a signal that arrives now (the SIGCHLD of what is left of a command's
	 * process group, a second SIGTERM) has nothing to act on, and must not interrupt what
	 * runs at exit, LeakSanitizer's check under make asan among it. */
	sigset_t all;
	sigfillset(&all);
	sigprocmask(SIG_BLOCK, &all, NULL);
	return rc;
}

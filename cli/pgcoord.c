/* pgcoord.c - the program's entry point; the tool itself is cli_main(), in a library of its
 * own so that the argument fuzzer (tests/fuzz/fuzz_cli_args.c) can call it */
#include "cli.h"

int main(int argc, char **argv)
{
	return cli_main(argc, argv);
}

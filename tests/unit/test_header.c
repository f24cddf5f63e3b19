/* test_header.c - pgcoord.h compiles alone under -std=c11 -pedantic with every warning */
#include <pgcoord.h>

int main(void)
{
	pgc_error err = PGC_ERROR_INIT;
	pgc_conn_options opts = PGC_CONN_OPTIONS_INIT;
	(void)opts;
	return err.code == PGC_OK && pgc_version() != NULL ? 0 : 1;
}

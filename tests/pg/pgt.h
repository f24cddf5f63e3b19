/* pgt.h - what the tests against a real server share: formatted SQL that fails the test on an
 * error, and one integer read back from a query */
#ifndef PGCOORD_PGT_H
#define PGCOORD_PGT_H

#include <libpq-fe.h>
#include <stdarg.h>

#include "pgcoord.h"
#include "../t.h"

/* Formats and runs SQL that belongs to the test (schema names only); fails the test on error. */
static inline void sql(pgc_conn *c, const char *fmt, ...) PGC_PRINTF(2, 3);
static inline void sql(pgc_conn *c, const char *fmt, ...)
{
	char buf[4096];
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(buf, sizeof buf, fmt, ap);
	va_end(ap);
	pgc_error err;
	if (pgc_exec(c, buf, &err) != PGC_OK)
		T_FAIL("%s: %s", buf, err.message);
}

/* The integer in the one row of a query (formatted like sql()): a count(*), say; fails the
 * test on an error or another number of rows. */
static inline long long sql_int(pgc_conn *c, const char *fmt, ...) PGC_PRINTF(2, 3);
static inline long long sql_int(pgc_conn *c, const char *fmt, ...)
{
	char buf[4096];
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(buf, sizeof buf, fmt, ap);
	va_end(ap);
	PGresult *r = PQexec(pgc_conn_pg(c), buf);
	if (PQresultStatus(r) != PGRES_TUPLES_OK || PQntuples(r) != 1)
		T_FAIL("%s: %s", buf, PQresultErrorMessage(r));
	long long v = atoll(PQgetvalue(r, 0, 0));
	PQclear(r);
	return v;
}

#endif

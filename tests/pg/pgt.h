/* pgt.h - what the tests against a real server share: formatted SQL that fails the test on an
 * error, one integer read back from a query, and the queue fixture */
#ifndef PGCOORD_PGT_H
#define PGCOORD_PGT_H

#include <libpq-fe.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

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

/* The queue fixture: a schema of the test's own (prefix_PID, written into schema[size]),
 * dropped if a crashed run left it, initialised, and a queue handle on it. */
static inline pgc_conn *pgt_queue_setup(char *schema, size_t size, const char *prefix,
                                        const char *application_name, pgc_queue **q)
{
	snprintf(schema, size, "%s_%d", prefix, (int)getpid());
	pgc_conn *c = t_connect(application_name);
	pgc_error err;
	T_ASSERT_INT_EQ(pgc_exec(c, "SET client_min_messages = warning", &err), PGC_OK);
	sql(c, "DROP SCHEMA IF EXISTS %s CASCADE", schema);
	if (pgc_schema_init(c, schema, NULL, NULL, &err) != PGC_OK)
		T_FAIL("init: %s", err.message);
	pgc_queue_options qo = PGC_QUEUE_OPTIONS_INIT;
	qo.schema = schema;
	if (pgc_queue_open(c, &qo, q, &err) != PGC_OK)
		T_FAIL("open: %s", err.message);
	return c;
}

/* Closes the handle, drops the fixture's schema (an error is ignored: the test is over) and
 * closes the session. */
static inline void pgt_queue_teardown(pgc_conn *c, pgc_queue *q, const char *schema)
{
	pgc_queue_close(q);
	char s[128];
	snprintf(s, sizeof s, "DROP SCHEMA IF EXISTS %s CASCADE", schema);
	pgc_error err;
	(void)!pgc_exec(c, s, &err);
	pgc_conn_close(c);
}

#endif

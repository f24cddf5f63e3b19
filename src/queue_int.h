/* queue_int.h - private declarations shared by queue.c, queue_admin.c and worker.c */
#ifndef PGCOORD_QUEUE_INT_H
#define PGCOORD_QUEUE_INT_H

#include "internal.h"

/* The statements a handle prepares. */
enum {
	QS_ENQUEUE,
	QS_CLAIM,
	QS_COMPLETE,
	QS_FAIL,
	QS_SNOOZE,
	QS_HEARTBEAT,
	QS_RELEASE,
	QS_NEXT_RUN,
	QS_PROMOTE,
	QS_COUNT
};

struct pgc_queue {
	pgc_conn *conn;
	char *schema;
	char *quoted;           /* PQescapeIdentifier(schema) */
	char channel[64];       /* NOTIFY channel of this schema */
	bool prepare;
	char *sql[QS_COUNT];    /* expanded statement text */
	char stmt_name[QS_COUNT][32];
	bool prepared[QS_COUNT];
};

/* Expands @S@ in tmpl to q's quoted schema (malloc'd, NULL when out of memory). */
char *pgc__queue_sql(pgc_queue *q, const char *tmpl);

/* Runs ad-hoc text (a template: "@S@" is q's schema) with parameters. */
PGresult *pgc__queue_run_text(pgc_queue *q, const char *tmpl, int nparams, const char *const *values,
                              int *rc, pgc_error *err);

/* The one check of a queue name given by a caller (PGC_EUSAGE, naming fn). */
int pgc__queue_check_name(const char *fn, const char *queue, pgc_error *err);

/* Runs statement stmt (prepared on first use when q->prepare). */
PGresult *pgc__queue_run(pgc_queue *q, int stmt, int nparams, const char *const *values, int *rc,
                         pgc_error *err);

/* Turns a claim's result into a job array; PGC_EEMPTY, PGC_ENOMEM or PGC_OK. */
int pgc__queue_claim_result(PGresult *res, const char *queue, pgc_job **jobs, size_t *n);

#endif

/* error.c - error codes, SQLSTATE classification and filling pgc_error records
 *
 * Classification is table-driven: exact SQLSTATEs first, then two-character classes. The
 * table is the single place that decides whether a caller retries the transaction, retries
 * later or gives up, so every piece of the library (and every user) agrees. */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base.h"

const char *pgc_version(void)
{
	return PGC_VERSION_STRING;
}

void pgc_free(void *ptr)
{
	free(ptr);
}

static const struct {
	int code;
	const char *text;
} code_texts[] = {
	{ PGC_OK, "success" },
	{ PGC_EUSAGE, "invalid argument" },
	{ PGC_ENOMEM, "out of memory" },
	{ PGC_ECONNECT, "could not connect to the server" },
	{ PGC_ESQL, "the server reported an error" },
	{ PGC_ECONNLOST, "connection to the server lost" },
	{ PGC_ETIMEDOUT, "timed out" },
	{ PGC_EBUSY, "lock held by another session" },
	{ PGC_ENOTHELD, "lock not held by this session" },
	{ PGC_ELOCKLOST, "lock lost" },
	{ PGC_ECOLLISION, "two names map to the same key" },
	{ PGC_ERETRY_EXHAUSTED, "transaction retries exhausted" },
	{ PGC_ECOMMIT_UNKNOWN, "commit outcome unknown" },
	{ PGC_ESTALE, "claim or token is stale" },
	{ PGC_EEMPTY, "nothing available" },
	{ PGC_ENOSCHEMA, "pgcoord schema not installed" },
	{ PGC_ESCHEMA_VERSION, "pgcoord schema is newer than this library" },
	{ PGC_ENOTFOUND, "not found" },
	{ PGC_EINTERNAL, "internal error" },
	{ PGC_EINTR, "interrupted" },
	{ PGC_EDUPLICATE, "a job with this unique key is already pending or running" },
	{ PGC_EFINISHED, "the job has finished already" },
	{ PGC_EAUTH, "the server refused the credentials" },
	{ PGC_ECONFIG, "a connection setting cannot work" },
	{ PGC_EPOOLER, "the pooler in between cannot keep this" },
};

const char *pgc_strerror(int code)
{
	for (size_t i = 0; i < sizeof code_texts / sizeof code_texts[0]; i++)
		if (code_texts[i].code == code)
			return code_texts[i].text;
	return "unknown error";
}

const char *pgc_error_class_name(pgc_error_class klass)
{
	switch (klass) {
	case PGC_CLASS_NONE: return "none";
	case PGC_CLASS_RETRY_TX: return "retry-tx";
	case PGC_CLASS_RETRY_LATER: return "retry-later";
	case PGC_CLASS_USAGE: return "usage";
	case PGC_CLASS_FATAL: return "fatal";
	case PGC_CLASS_CONFIG: return "config";
	}
	return "unknown";
}

/* Exact SQLSTATEs (five characters) or classes (two characters followed by "***"). The first
 * match wins, so exact entries come first. */
static const struct {
	const char *pattern;
	pgc_error_class klass;
} sqlstate_table[] = {
	{ "40P01", PGC_CLASS_RETRY_TX },    /* deadlock_detected */
	{ "40001", PGC_CLASS_RETRY_TX },    /* serialization_failure */
	{ "55P03", PGC_CLASS_RETRY_LATER }, /* lock_not_available (NOWAIT, lock_timeout) */
	{ "57014", PGC_CLASS_RETRY_LATER }, /* query_canceled (statement_timeout, cancel) */
	{ "57P01", PGC_CLASS_RETRY_LATER }, /* admin_shutdown (also pg_terminate_backend) */
	{ "57P02", PGC_CLASS_RETRY_LATER }, /* crash_shutdown */
	{ "57P03", PGC_CLASS_RETRY_LATER }, /* cannot_connect_now (starting up) */
	{ "53300", PGC_CLASS_RETRY_LATER }, /* too_many_connections */
	{ "3D000", PGC_CLASS_CONFIG },      /* invalid_catalog_name: no such database */
	{ "08***", PGC_CLASS_RETRY_LATER }, /* connection exceptions */
	{ "28***", PGC_CLASS_CONFIG },      /* invalid_authorization_specification, invalid_password */
};

static bool sqlstate_valid(const char *s)
{
	for (int i = 0; i < 5; i++) {
		char c = s[i];
		if (!((c >= '0' && c <= '9') || (c >= 'A' && c <= 'Z')))
			return false;
	}
	return s[5] == '\0';
}

pgc_error_class pgc_sqlstate_class(const char *sqlstate)
{
	if (sqlstate == NULL || strnlen(sqlstate, 6) != 5 || !sqlstate_valid(sqlstate))
		return PGC_CLASS_FATAL;
	for (size_t i = 0; i < sizeof sqlstate_table / sizeof sqlstate_table[0]; i++) {
		const char *p = sqlstate_table[i].pattern;
		size_t n = strcmp(p + 2, "***") == 0 ? 2 : 5;
		if (strncmp(p, sqlstate, n) == 0)
			return sqlstate_table[i].klass;
	}
	return PGC_CLASS_FATAL;
}

static pgc_error_class class_of_code(int code)
{
	switch (code) {
	case PGC_OK: return PGC_CLASS_NONE;
	case PGC_EUSAGE:
	case PGC_ECOLLISION:
	case PGC_ENOSCHEMA:
	case PGC_ENOTFOUND:
	case PGC_EFINISHED: return PGC_CLASS_USAGE;
	case PGC_ECONNECT:
	case PGC_ECONNLOST:
	case PGC_ETIMEDOUT:
	case PGC_EBUSY:
	case PGC_EEMPTY: return PGC_CLASS_RETRY_LATER;
	case PGC_EAUTH:
	case PGC_ECONFIG:
	case PGC_EPOOLER: return PGC_CLASS_CONFIG;
	default: return PGC_CLASS_FATAL;
	}
}

void pgc_error_clear(pgc_error *err)
{
	if (err == NULL)
		return;
	memset(err, 0, sizeof *err);
}

void pgc__copy_line(char *dst, size_t n, const char *src)
{
	size_t i = 0;
	if (n == 0)
		return;
	if (src != NULL) {
		/* A line break and the indentation after it (libpq's "...unexpectedly\n\tThis
		 * probably means...") become one space. */
		for (const char *p = src; *p != '\0' && i + 1 < n; p++) {
			if (*p == '\n' || *p == '\r' || *p == '\t') {
				while (i > 0 && dst[i - 1] == ' ')
					i--;
				while (p[1] == '\n' || p[1] == '\r' || p[1] == '\t' || p[1] == ' ')
					p++;
				if (i > 0)
					dst[i++] = ' ';
				continue;
			}
			dst[i++] = *p;
		}
	}
	while (i > 0 && dst[i - 1] == ' ')
		i--;
	dst[i] = '\0';
}

int pgc__err(pgc_error *err, int code, const char *fmt, ...)
{
	if (err == NULL)
		return code;
	char buf[PGC_ERROR_MESSAGE_MAX];
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(buf, sizeof buf, fmt, ap);
	va_end(ap);
	pgc_error_clear(err);
	err->code = code;
	err->klass = class_of_code(code);
	pgc__copy_line(err->message, sizeof err->message, buf);
	return code;
}

void pgc__err_prefix(pgc_error *err, const char *fmt, ...)
{
	if (err == NULL)
		return;
	char pre[PGC_ERROR_MESSAGE_MAX], buf[PGC_ERROR_MESSAGE_MAX];
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(pre, sizeof pre, fmt, ap);
	va_end(ap);
	snprintf(buf, sizeof buf, "%s: %s", pre, err->message);
	pgc__copy_line(err->message, sizeof err->message, buf);
}

int pgc__err_result(pgc_error *err, PGconn *pg, const PGresult *res, const char *prefix)
{
	bool lost = pg == NULL || PQstatus(pg) == CONNECTION_BAD;
	int code = lost ? PGC_ECONNLOST : PGC_ESQL;
	if (err == NULL)
		return code;
	pgc_error_clear(err);
	err->code = code;

	const char *state = res ? PQresultErrorField(res, PG_DIAG_SQLSTATE) : NULL;
	const char *msg = res ? PQresultErrorField(res, PG_DIAG_MESSAGE_PRIMARY) : NULL;
	if (msg == NULL || *msg == '\0')
		msg = res ? PQresultErrorMessage(res) : NULL;
	if ((msg == NULL || *msg == '\0') && pg != NULL)
		msg = PQerrorMessage(pg);
	if (msg == NULL || *msg == '\0')
		msg = lost ? "connection to the server lost" : "unknown server error";

	char buf[PGC_ERROR_MESSAGE_MAX];
	if (prefix != NULL)
		snprintf(buf, sizeof buf, "%s: %s", prefix, msg);
	else
		snprintf(buf, sizeof buf, "%s", msg);
	pgc__copy_line(err->message, sizeof err->message, buf);

	if (state != NULL && strlen(state) == 5) {
		memcpy(err->sqlstate, state, 6);
		err->klass = pgc_sqlstate_class(state);
	} else {
		/* A client-side failure (no SQLSTATE): never invent one. */
		err->klass = lost ? PGC_CLASS_RETRY_LATER : PGC_CLASS_FATAL;
	}
	if (res != NULL) {
		pgc__copy_line(err->detail, sizeof err->detail,
		               PQresultErrorField(res, PG_DIAG_MESSAGE_DETAIL));
		pgc__copy_line(err->hint, sizeof err->hint, PQresultErrorField(res, PG_DIAG_MESSAGE_HINT));
		const char *pos = PQresultErrorField(res, PG_DIAG_STATEMENT_POSITION);
		if (pos != NULL)
			err->position = atoi(pos);
	}
	return code;
}

/* util.c - error reporting, connecting and JSON output for the subcommands */
#include <errno.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "cli.h"

cli_globals g_cli;

void cli_errorf(const char *fmt, ...)
{
	va_list ap;
	fputs("pgcoord: ", stderr);
	va_start(ap, fmt);
	vfprintf(stderr, fmt, ap);
	va_end(ap);
	fputc('\n', stderr);
}

int cli_usage_error(const char *cmd, const char *fmt, ...)
{
	va_list ap;
	fputs("pgcoord: ", stderr);
	va_start(ap, fmt);
	vfprintf(stderr, fmt, ap);
	va_end(ap);
	fputc('\n', stderr);
	if (cmd != NULL)
		fprintf(stderr, "Try \"pgcoord %s --help\" for more information.\n", cmd);
	else
		fputs("Try \"pgcoord --help\" for more information.\n", stderr);
	return EXIT_USAGE;
}

int cli_exit_code(const pgc_error *err)
{
	switch (err->code) {
	case PGC_OK: return 0;
	case PGC_ECONNECT:
	case PGC_ECONNLOST:
	case PGC_ENOSCHEMA: return EXIT_UNAVAILABLE;
	case PGC_EUSAGE: return EXIT_USAGE;
	case PGC_ETIMEDOUT:
	case PGC_EBUSY: return EXIT_CONFLICT;
	case PGC_ELOCKLOST: return EXIT_LOCKLOST;
	case PGC_ESQL: {
		/* Errors caused by what the user gave us: data exceptions (22), integrity
		 * violations (23), syntax errors and access rules (42). */
		const char *s = err->sqlstate;
		if (strncmp(s, "22", 2) == 0 || strncmp(s, "23", 2) == 0 || strncmp(s, "42", 2) == 0)
			return EXIT_DATAERR;
		if (err->klass == PGC_CLASS_RETRY_LATER && strncmp(s, "08", 2) == 0)
			return EXIT_UNAVAILABLE;
		return EXIT_SOFTWARE;
	}
	default: return EXIT_SOFTWARE;
	}
}

int cli_report(const pgc_error *err)
{
	if (err->sqlstate[0] != '\0')
		cli_errorf("%s (SQLSTATE %s)", err->message, err->sqlstate);
	else
		cli_errorf("%s", err->message);
	if (err->detail[0] != '\0')
		fprintf(stderr, "DETAIL: %s\n", err->detail);
	if (err->hint[0] != '\0')
		fprintf(stderr, "HINT: %s\n", err->hint);
	return cli_exit_code(err);
}

int cli_connect(const char *cmd, pgc_conn **out)
{
	char app[64];
	snprintf(app, sizeof app, "pgcoord/%s", cmd);
	pgc_conn_options opts = PGC_CONN_OPTIONS_INIT;
	opts.application_name = app;
	pgc_error err = PGC_ERROR_INIT;
	if (pgc_connect(g_cli.dsn, &opts, out, &err) != PGC_OK)
		return cli_report(&err);
	return 0;
}

void json_str(FILE *f, const char *s)
{
	if (s == NULL) {
		fputs("null", f);
		return;
	}
	fputc('"', f);
	for (const unsigned char *p = (const unsigned char *)s; *p; p++) {
		switch (*p) {
		case '"': fputs("\\\"", f); break;
		case '\\': fputs("\\\\", f); break;
		case '\n': fputs("\\n", f); break;
		case '\r': fputs("\\r", f); break;
		case '\t': fputs("\\t", f); break;
		default:
			if (*p < 0x20)
				fprintf(f, "\\u%04x", *p);
			else
				fputc(*p, f);
		}
	}
	fputc('"', f);
}

bool cli_parse_int(const char *text, long long min, long long max, long long *out)
{
	if (text == NULL || *text == '\0')
		return false;
	char *end;
	errno = 0;
	long long v = strtoll(text, &end, 10);
	if (errno != 0 || *end != '\0' || v < min || v > max)
		return false;
	*out = v;
	return true;
}

bool cli_duration_opt(const char *cmd, const char *opt, const char *text, int64_t min_ms,
                      int64_t max_ms, int64_t *out, int *rc)
{
	pgc_error err;
	if (pgc_duration_parse(text, out, &err) != PGC_OK) {
		*rc = cli_usage_error(cmd, "%s: %s", opt, err.message);
		return false;
	}
	if (*out < min_ms) {
		*rc = cli_usage_error(cmd, "%s must be at least %lldms", opt, (long long)min_ms);
		return false;
	}
	if (*out > max_ms) {
		*rc = cli_usage_error(cmd, "%s must be at most %lldms", opt, (long long)max_ms);
		return false;
	}
	return true;
}

int64_t cli_now_ms(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

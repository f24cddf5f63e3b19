/* util.c - error reporting, connecting and JSON output for the subcommands */
#include <errno.h>
#include <getopt.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "cli.h"
#include "util/util.h"

cli_globals g_cli;

/* The first error reported by this process, for the JSON error object (cli_json_error). */
static struct {
	bool set;
	bool shown; /* the command's own JSON result carries the error (cli_json_error_shown) */
	pgc_error err; /* klass PGC_CLASS_NONE: no class known (a message of the tool's own) */
} first_error;

/* Errors may be reported from the worker's and elect's threads too. */
static pthread_mutex_t first_error_mu = PTHREAD_MUTEX_INITIALIZER;

static void record(const pgc_error *err)
{
	pthread_mutex_lock(&first_error_mu);
	if (!first_error.set) {
		first_error.set = true;
		first_error.err = *err;
	}
	pthread_mutex_unlock(&first_error_mu);
}

static void verror(pgc_error_class klass, const char *fmt, va_list ap)
{
	char msg[PGC_ERROR_MESSAGE_MAX];
	vsnprintf(msg, sizeof msg, fmt, ap);
	fprintf(stderr, "pgcoord: %s\n", msg);
	/* A warning is not the error the command fails with. */
	if (strncmp(msg, "warning: ", 9) != 0) {
		pgc_error e = PGC_ERROR_INIT;
		e.klass = klass;
		snprintf(e.message, sizeof e.message, "%s", msg);
		record(&e);
	}
}

void cli_errorf(const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	verror(PGC_CLASS_NONE, fmt, ap);
	va_end(ap);
}

int cli_usage_error(const char *cmd, const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	verror(PGC_CLASS_USAGE, fmt, ap);
	va_end(ap);
	if (cmd != NULL)
		fprintf(stderr, "Try \"pgcoord %s --help\" for more information.\n", cmd);
	else
		fputs("Try \"pgcoord --help\" for more information.\n", stderr);
	return EXIT_USAGE;
}

int cli_getopt_error(const char *cmd, int ch, char **argv)
{
	/* getopt_long (with opterr = 0 and a leading ':' in optstring) has just stepped past the
	 * offending word. */
	if (ch == ':')
		return cli_usage_error(cmd, "option %s needs a value", argv[optind - 1]);
	/* A short option inside a word ("-1 * * * *", "-xz"): getopt stays on that word until it
	 * is done with it, so the word at optind, not the one before, is the culprit. */
	if (optopt != 0) {
		const char *word = argv[optind - 1];
		if (argv[optind] != NULL && argv[optind][0] == '-' && argv[optind][1] != '-' &&
		    strchr(argv[optind] + 1, optopt) != NULL)
			word = argv[optind];
		if (word[0] == '-' && word[1] == optopt && word[2] == '\0')
			return cli_usage_error(cmd, "unknown option -%c", optopt);
		return cli_usage_error(cmd, "unknown option -%c in \"%s\" (an argument that starts with - goes "
		                       "after --)", optopt, cli_esc(word));
	}
	return cli_usage_error(cmd, "unknown option %s", argv[optind - 1]);
}

int cli_exit_code(const pgc_error *err)
{
	switch (err->code) {
	case PGC_OK: return 0;
	case PGC_ECONNECT:
	case PGC_ECONNLOST:
	case PGC_ENOSCHEMA: return EXIT_UNAVAILABLE;
	case PGC_EUSAGE: return EXIT_USAGE;
	/* Something is in the way: held, taken, finished, no longer current. */
	case PGC_ETIMEDOUT:
	case PGC_EBUSY:
	case PGC_EDUPLICATE:
	case PGC_EFINISHED:
	case PGC_ESTALE: return EXIT_CONFLICT;
	/* The named job, schedule, lease or group does not exist: bad input, as a bad id is. */
	case PGC_ENOTFOUND: return EXIT_DATAERR;
	case PGC_ELOCKLOST: return EXIT_LOCKLOST;
	case PGC_EAUTH: return EXIT_NOPERM;
	case PGC_ECONFIG:
	case PGC_EPOOLER: return EXIT_CONFIG;
	case PGC_ESQL: {
		/* Errors caused by what the user gave us: data exceptions (22), integrity
		 * violations (23), syntax errors and access rules (42), but a missing privilege. */
		const char *s = err->sqlstate;
		/* The role may not do this: as for refused credentials, retrying as is cannot help. */
		if (strcmp(s, "42501") == 0)
			return EXIT_NOPERM;
		if (strncmp(s, "22", 2) == 0 || strncmp(s, "23", 2) == 0 || strncmp(s, "42", 2) == 0)
			return EXIT_DATAERR;
		if (err->klass == PGC_CLASS_RETRY_LATER && (strncmp(s, "08", 2) == 0 || strncmp(s, "57P0", 4) == 0))
			return EXIT_UNAVAILABLE;
		return EXIT_SOFTWARE;
	}
	default: return EXIT_SOFTWARE;
	}
}

int cli_report(const pgc_error *err)
{
	if (err->sqlstate[0] != '\0')
		fprintf(stderr, "pgcoord: %s (SQLSTATE %s)\n", err->message, err->sqlstate);
	else
		fprintf(stderr, "pgcoord: %s\n", err->message);
	if (err->detail[0] != '\0')
		fprintf(stderr, "DETAIL: %s\n", err->detail);
	if (err->hint[0] != '\0')
		fprintf(stderr, "HINT: %s\n", err->hint);
	record(err);
	return cli_exit_code(err);
}

static void json_field(FILE *f, const char *key, const char *s)
{
	fprintf(f, ",\"%s\":", key);
	json_str(f, s && *s ? s : NULL);
}

void cli_json_error_shown(void)
{
	pthread_mutex_lock(&first_error_mu);
	first_error.shown = true;
	pthread_mutex_unlock(&first_error_mu);
}

void cli_json_error(int rc)
{
	pthread_mutex_lock(&first_error_mu);
	bool print = g_cli.json && rc != 0 && first_error.set && !first_error.shown;
	pgc_error copy = first_error.err;
	pthread_mutex_unlock(&first_error_mu);
	if (!print)
		return;
	const pgc_error *e = &copy;
	fputs("{\"error\":{\"message\":", stdout);
	json_str(stdout, e->message);
	json_field(stdout, "detail", e->detail);
	json_field(stdout, "hint", e->hint);
	json_field(stdout, "sqlstate", e->sqlstate);
	json_field(stdout, "class", e->klass != PGC_CLASS_NONE ? pgc_error_class_name(e->klass) : NULL);
	json_field(stdout, "reason", e->code != PGC_OK ? pgc_strerror(e->code) : NULL);
	printf(",\"exit\":%d}}\n", rc);
	fflush(stdout);
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

void cli_prom_label(FILE *f, const char *s)
{
	fputc('"', f);
	for (; *s; s++) {
		if (*s == '\\' || *s == '"')
			fputc('\\', f);
		if (*s == '\n') {
			fputs("\\n", f);
			continue;
		}
		fputc(*s, f);
	}
	fputc('"', f);
}

void json_str(FILE *f, const char *s)
{
	if (s == NULL) {
		fputs("null", f);
		return;
	}
	fputc('"', f);
	for (const unsigned char *p = (const unsigned char *)s; *p;) {
		switch (*p) {
		case '"': fputs("\\\"", f); break;
		case '\\': fputs("\\\\", f); break;
		case '\n': fputs("\\n", f); break;
		case '\r': fputs("\\r", f); break;
		case '\t': fputs("\\t", f); break;
		default:
			if (*p < 0x20) {
				fprintf(f, "\\u%04x", *p);
			} else {
				/* JSON text is UTF-8: a byte that does not start a well-formed sequence
				 * (from a SQL_ASCII database or a name given on the command line) is shown
				 * as U+FFFD, so that every line stays parseable. */
				size_t n = pgc__utf8_len(p);
				if (n == 0) {
					fputs("\\ufffd", f);
					p++;
				} else {
					fwrite(p, 1, n, f);
					p += n;
				}
				continue;
			}
		}
		p++;
	}
	fputc('"', f);
}

const char *cli_escape(const char *s, char *buf, size_t size)
{
	size_t o = 0;
	if (size == 0)
		return buf;
	for (const unsigned char *p = (const unsigned char *)(s ? s : ""); *p;) {
		char e[8];
		size_t n = pgc__utf8_len(p), elen;
		const char *piece = e;
		if (n == 0 || *p < 0x20 || *p == 0x7f) {
			switch (*p) {
			case '\n': memcpy(e, "\\n", 3); elen = 2; break;
			case '\t': memcpy(e, "\\t", 3); elen = 2; break;
			case '\r': memcpy(e, "\\r", 3); elen = 2; break;
			default: elen = (size_t)snprintf(e, sizeof e, "\\x%02x", *p); break;
			}
			n = 1;
		} else if (n == 2 && p[0] == 0xC2 && p[1] < 0xA0) {
			/* C1 controls: U+009B is a CSI to many terminals. */
			elen = (size_t)snprintf(e, sizeof e, "\\u%04x", p[1]);
		} else {
			piece = (const char *)p;
			elen = n;
		}
		if (o + elen + 1 > size)
			break;
		memcpy(buf + o, piece, elen);
		o += elen;
		p += n;
	}
	buf[o] = '\0';
	return buf;
}

const char *cli_esc(const char *s)
{
	static _Thread_local char ring[16][1024];
	static _Thread_local unsigned next;
	return cli_escape(s, ring[next++ % 16], sizeof ring[0]);
}

const char *cli_last_line(const char *s, char *buf, size_t size)
{
	if (size == 0)
		return buf;
	buf[0] = '\0';
	if (s == NULL)
		return buf;
	size_t end = strlen(s);
	for (;;) {
		while (end > 0 && (s[end - 1] == '\n' || s[end - 1] == '\r' || s[end - 1] == ' ' || s[end - 1] == '\t'))
			end--;
		if (end == 0)
			return buf;
		size_t start = end;
		while (start > 0 && s[start - 1] != '\n')
			start--;
		size_t n = end - start;
		if (n > 0) {
			if (n >= size) {
				/* Cut on a character boundary. */
				n = size - 1;
				while (n > 0 && ((unsigned char)s[start + n] & 0xc0) == 0x80)
					n--;
			}
			memcpy(buf, s + start, n);
			buf[n] = '\0';
			return buf;
		}
		end = start;
	}
}

const char *cli_fmt_time_us(int64_t us, char *buf, size_t size)
{
	if (us == 0) {
		snprintf(buf, size, "-");
		return buf;
	}
	time_t t = (time_t)(us / 1000000 - (us % 1000000 < 0));
	struct tm tm;
	if (gmtime_r(&t, &tm) == NULL || strftime(buf, size, "%Y-%m-%dT%H:%M:%SZ", &tm) == 0)
		snprintf(buf, size, "?");
	return buf;
}

const char *cli_fmt_time(const char *pg, char *buf, size_t size)
{
	if (pg == NULL || *pg == '\0') {
		snprintf(buf, size, "-");
		return buf;
	}
	/* YYYY-MM-DD{ |T}HH:MM:SS[.fraction]{Z|+HH|-HH}[:MM[:SS]] */
	struct tm tm;
	memset(&tm, 0, sizeof tm);
	int len = 0;
	char sep;
	if (sscanf(pg, "%4d-%2d-%2d%c%2d:%2d:%2d%n", &tm.tm_year, &tm.tm_mon, &tm.tm_mday, &sep,
	           &tm.tm_hour, &tm.tm_min, &tm.tm_sec, &len) != 7 || (sep != ' ' && sep != 'T'))
		goto verbatim;
	const char *p = pg + len;
	if (*p == '.')
		for (p++; *p >= '0' && *p <= '9'; p++)
			;
	long off = 0;
	if (*p == 'Z') {
		p++;
	} else if (*p == '+' || *p == '-') {
		int sign = *p == '-' ? -1 : 1, part[3] = { 0, 0, 0 }, k = 0;
		p++;
		while (k < 3 && p[0] >= '0' && p[0] <= '9' && p[1] >= '0' && p[1] <= '9') {
			part[k++] = (p[0] - '0') * 10 + (p[1] - '0');
			p += 2;
			if (*p != ':')
				break;
			p++;
		}
		if (k == 0)
			goto verbatim;
		off = sign * (part[0] * 3600L + part[1] * 60L + part[2]);
	} else {
		goto verbatim;
	}
	if (*p != '\0')
		goto verbatim; /* " BC", or a form this does not know */
	tm.tm_year -= 1900;
	tm.tm_mon -= 1;
	time_t t = timegm(&tm) - off;
	struct tm u;
	if (gmtime_r(&t, &u) == NULL || strftime(buf, size, "%Y-%m-%dT%H:%M:%SZ", &u) == 0)
		goto verbatim;
	return buf;
verbatim:
	cli_escape(pg, buf, size);
	return buf;
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
	char d[PGC_DURATION_FORMAT_MAX];
	if (*out < min_ms) {
		*rc = cli_usage_error(cmd, "%s must be at least %s", opt, cli_duration_str(min_ms, d));
		return false;
	}
	if (*out > max_ms) {
		*rc = cli_usage_error(cmd, "%s must be at most %s", opt, cli_duration_str(max_ms, d));
		return false;
	}
	return true;
}

bool cli_time_opt(const char *cmd, const char *opt, const char *text, const pgc_cron *zone, cli_time *out,
                  int *rc)
{
	memset(out, 0, sizeof *out);
	static const char forms[] = "use ISO 8601 with an offset (2026-12-04T09:30:00Z, 2026-12-04 10:30+01:00), "
	                            "@SECONDS since 1970, or a duration from now (90s, 2h, 1d)";
	if (*text == '\0') {
		*rc = cli_usage_error(cmd, "%s must not be empty: %s", opt, forms);
		return false;
	}
	pgc_error err;
	/* A duration has no "-" after its first character and no ":"; a date has both. */
	if (*text != '@' && strchr(text, ':') == NULL && strchr(text + 1, '-') == NULL) {
		if (pgc_duration_parse(text, &out->rel_ms, &err) != PGC_OK) {
			*rc = cli_usage_error(cmd, "%s: \"%s\" is not a time: %s", opt, cli_esc(text), forms);
			return false;
		}
		out->relative = true;
		return true;
	}
	/* YYYY-MM-DD, then [T or space]HH:MM[:SS[.fraction]], then the offset: the library's
	 * parser takes all but the fraction (it keeps whole seconds), which is read here. */
	const char *p = text, *frac = NULL;
	bool has_off = *text == '@';
	if (!has_off) {
		p = text + strnlen(text, 10);
		if (*p == 'T' || *p == 't' || (*p == ' ' && p[1] >= '0' && p[1] <= '9'))
			p++;
		p += strspn(p, "0123456789:");
		if ((*p == '.' || *p == ',') && p[1] >= '0' && p[1] <= '9') {
			frac = p + 1;
			p = frac + strspn(frac, "0123456789");
		}
		has_off = *(p + strspn(p, " ")) != '\0';
	}
	if (!has_off && zone == NULL) {
		*rc = cli_usage_error(cmd, "%s: \"%s\" has no offset: add Z (UTC) or +HH:MM; or %s", opt, cli_esc(text),
		                      forms);
		return false;
	}
	pgc_cron *utc = NULL;
	if (zone == NULL && pgc_cron_parse("* * * * *", NULL, &utc, &err) != PGC_OK) {
		*rc = cli_report(&err);
		return false;
	}
	int prc = pgc_cron_parse_time(zone ? zone : utc, text, &out->unix_s, &err);
	pgc_cron_free(utc);
	if (prc != PGC_OK) {
		*rc = cli_usage_error(cmd, "%s: %s; %s", opt, err.message, forms);
		return false;
	}
	if (frac != NULL) {
		/* Microseconds: the first six digits, padded; the rest are dropped. */
		bool in = true;
		for (int d = 0; d < 6; d++) {
			in = in && frac[d] >= '0' && frac[d] <= '9';
			out->usec = out->usec * 10 + (in ? frac[d] - '0' : 0);
		}
	}
	return true;
}

char *cli_time_iso(const cli_time *t, char *buf)
{
	time_t s = (time_t)t->unix_s;
	struct tm tm;
	gmtime_r(&s, &tm);
	snprintf(buf, CLI_TIME_ISO_MAX, "%04d-%02d-%02dT%02d:%02d:%02d.%06d+00:00", tm.tm_year + 1900, tm.tm_mon + 1,
	         tm.tm_mday, tm.tm_hour, tm.tm_min, tm.tm_sec, (int)t->usec);
	return buf;
}

char *cli_duration_str(int64_t ms, char *buf)
{
	pgc_error err;
	if (pgc_duration_format(ms < 0 ? 0 : ms, buf, PGC_DURATION_FORMAT_MAX, &err) != PGC_OK)
		snprintf(buf, PGC_DURATION_FORMAT_MAX, "?");
	return buf;
}


/* ---- JSON-lines input ----------------------------------------------------------------------- */

void cli_lines_free(cli_lines *l)
{
	free(l->buf);
	free(l->line);
	free(l->lineno);
	memset(l, 0, sizeof *l);
}

int cli_split_lines(char *buf, size_t len, cli_lines *l)
{
	memset(l, 0, sizeof *l);
	l->buf = buf;
	if (memchr(buf, '\0', len) != NULL)
		return CLI_LINES_NUL;
	size_t count = 1;
	for (size_t i = 0; i < len; i++)
		count += buf[i] == '\n';
	l->line = malloc(count * sizeof *l->line);
	l->lineno = malloc(count * sizeof *l->lineno);
	if (l->line == NULL || l->lineno == NULL)
		return CLI_LINES_NOMEM;
	long no = 0;
	char *p = buf, *end = buf + len;
	while (p < end) {
		char *nl = memchr(p, '\n', (size_t)(end - p));
		char *stop = nl != NULL ? nl : end;
		*stop = '\0'; /* buf[len] is the terminator when there is no final newline */
		no++;
		size_t ll = (size_t)(stop - p);
		if (ll > 0 && p[ll - 1] == '\r')
			p[--ll] = '\0';
		bool blank = true;
		for (size_t i = 0; i < ll && blank; i++)
			blank = p[i] == ' ' || p[i] == '\t';
		if (!blank) {
			l->line[l->n] = p;
			l->lineno[l->n] = no;
			l->n++;
		}
		p = stop + 1;
	}
	return 0;
}

int cli_read_lines(const char *path, cli_lines *l)
{
	memset(l, 0, sizeof *l);
	bool is_stdin = strcmp(path, "-") == 0;
	const char *name = is_stdin ? "standard input" : path;
	FILE *f = is_stdin ? stdin : fopen(path, "rb");
	if (f == NULL) {
		cli_errorf("cannot open %s: %s", path, strerror(errno));
		return EXIT_DATAERR;
	}
	size_t cap = 65536, len = 0;
	char *buf = malloc(cap);
	while (buf != NULL) {
		if (len + 1 >= cap) {
			char *nb = realloc(buf, cap * 2);
			if (nb == NULL) {
				free(buf);
				buf = NULL;
				break;
			}
			buf = nb;
			cap *= 2;
		}
		size_t r = fread(buf + len, 1, cap - len - 1, f);
		len += r;
		if (r == 0)
			break;
	}
	bool bad = ferror(f);
	if (!is_stdin)
		fclose(f);
	if (buf == NULL) {
		cli_errorf("out of memory reading %s", name);
		return EXIT_SOFTWARE;
	}
	if (bad) {
		free(buf);
		cli_errorf("cannot read %s", name);
		return EXIT_DATAERR;
	}
	buf[len] = '\0';
	switch (cli_split_lines(buf, len, l)) {
	case 0:
		return 0;
	case CLI_LINES_NUL:
		cli_lines_free(l);
		cli_errorf("%s contains a NUL byte: not a file of JSON lines", name);
		return EXIT_DATAERR;
	default:
		cli_lines_free(l);
		cli_errorf("out of memory reading %s", name);
		return EXIT_SOFTWARE;
	}
}

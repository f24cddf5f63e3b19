/* cron.c - cron expressions: the parser, the normalized form, and the next fire time
 *
 * A schedule is six bit sets (second, minute, hour, day of month, month, day of week; bit i
 * is value i) plus the flags of cronie that change its meaning: whether day-of-month and
 * day-of-week start with "*" (both restricted: either matches; otherwise both must), and
 * whether minute or hour does (no: a fixed-time schedule, which fires once per local day
 * across DST changes; yes: it fires at every real occurrence of its times).
 *
 * The next fire time is found segment by segment along UTC, a segment being a stretch of
 * constant UTC offset (tz.c gives each one). Inside a segment the wall clock runs with UTC,
 * so the search there is the plain calendar search of cron: the first matching local time
 * at or after a bound, skipping whole months, days, hours and minutes that cannot match. The
 * DST rules are two adjustments at a segment's start: after a fall-back, a fixed-time
 * schedule skips the local times the previous segment already had; after a spring-forward,
 * a fixed-time schedule with a time in the skipped stretch fires at the segment's first
 * instant. Wildcard schedules need nothing: a repeated hour is in two segments, a skipped
 * one in none. The search ends after 400 years (the Gregorian cycle, PGC_CRON_HORIZON_DAYS)
 * or at the end of 9999, so it is bounded whatever the expression. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "base/base.h"
#include "tz_int.h"

struct pgc_cron {
	uint64_t sec, min, hour, dom, mon, dow; /* dow: bits 0 (Sunday)..6 */
	bool has_seconds;
	bool dom_star, dow_star; /* the field starts with "*" */
	bool fixed_time;         /* neither minute nor hour starts with "*" */
	char *normalized;
	char *tzname;
	pgc__tz *tz;
};

enum { F_SEC, F_MIN, F_HOUR, F_DOM, F_MON, F_DOW, F_COUNT };

static const char *const month_names[] = { "JAN", "FEB", "MAR", "APR", "MAY", "JUN",
                                           "JUL", "AUG", "SEP", "OCT", "NOV", "DEC" };
static const char *const month_full[] = { "January", "February", "March", "April", "May", "June",
                                          "July", "August", "September", "October", "November",
                                          "December" };
static const char *const dow_names[] = { "SUN", "MON", "TUE", "WED", "THU", "FRI", "SAT" };

static const struct field_def {
	const char *name;
	int lo, hi;       /* values as written (day-of-week: 0..7) */
	const char *allowed;
	const char *const *names; /* for month (from 1) and day-of-week (from 0) */
	int nnames;
} fields[F_COUNT] = {
	{ "second", 0, 59, "0-59", NULL, 0 },
	{ "minute", 0, 59, "0-59", NULL, 0 },
	{ "hour", 0, 23, "0-23", NULL, 0 },
	{ "day-of-month", 1, 31, "1-31", NULL, 0 },
	{ "month", 1, 12, "1-12 or JAN-DEC", month_names, 12 },
	{ "day-of-week", 0, 7, "0-7 (0 and 7 are Sunday) or SUN-SAT", dow_names, 7 },
};

static const struct {
	const char *name;
	const char *expr;
} macros[] = {
	{ "@yearly", "0 0 1 1 *" }, { "@annually", "0 0 1 1 *" }, { "@monthly", "0 0 1 * *" },
	{ "@weekly", "0 0 * * 0" }, { "@daily", "0 0 * * *" },    { "@midnight", "0 0 * * *" },
	{ "@hourly", "0 * * * *" },
};

/* ---- parsing -------------------------------------------------------------------------------- */

/* Text from the user, for a one-line message: at most max bytes, anything but printable ASCII
 * as '?'. Returns buf. */
static const char *shown(const char *s, size_t len, char *buf, size_t max)
{
	size_t i = 0;
	for (; i < len && i < max; i++)
		buf[i] = s[i] >= 0x20 && s[i] < 0x7f ? s[i] : '?';
	if (len > max && max >= 3)
		memcpy(buf + max - 3, "...", 3);
	buf[i] = '\0';
	return buf;
}

typedef struct fparse {
	const struct field_def *def;
	const char *text; /* the whole field */
	size_t len;
	pgc_error *err;
} fparse;

/* "<name> field "<text>": <problem>", naming the element when the field has more. */
static int field_err(const fparse *f, const char *elem, size_t elen, const char *problem)
{
	char t[72], e[72];
	shown(f->text, f->len, t, 64);
	if (elem == NULL || (elen == f->len && memcmp(elem, f->text, elen) == 0))
		return pgc__err(f->err, PGC_EUSAGE, "%s field \"%s\": %s", f->def->name, t, problem);
	shown(elem, elen, e, 64);
	return pgc__err(f->err, PGC_EUSAGE, "%s field \"%s\": %s %s", f->def->name, t, e, problem);
}

/* One value: digits, or a name where the field has names. *pp moves past it. */
static int parse_value(const fparse *f, const char **pp, const char *end, int *out)
{
	const char *p = *pp, *s = p;
	char problem[160];
	if (p < end && *p >= '0' && *p <= '9') {
		long v = 0;
		while (p < end && *p >= '0' && *p <= '9') {
			if (v < 100000)
				v = v * 10 + (*p - '0');
			p++;
		}
		if (v < f->def->lo || v > f->def->hi) {
			snprintf(problem, sizeof problem, "out of range %d-%d", f->def->lo, f->def->hi);
			if ((size_t)(p - s) == f->len)
				return field_err(f, NULL, 0, problem);
			snprintf(problem, sizeof problem, "is out of range %d-%d", f->def->lo, f->def->hi);
			return field_err(f, s, (size_t)(p - s), problem);
		}
		*pp = p;
		*out = (int)v;
		return PGC_OK;
	}
	while (p < end && ((*p >= 'A' && *p <= 'Z') || (*p >= 'a' && *p <= 'z')))
		p++;
	if (p > s && f->def->names != NULL) {
		for (int i = 0; i < f->def->nnames; i++) {
			if ((size_t)(p - s) == 3 && strncasecmp(s, f->def->names[i], 3) == 0) {
				*pp = p;
				*out = f->def->names == month_names ? i + 1 : i;
				return PGC_OK;
			}
		}
		snprintf(problem, sizeof problem, "is not a %s name (%s)",
		         f->def->names == month_names ? "month" : "day",
		         f->def->names == month_names ? "JAN..DEC or 1-12" : "SUN..SAT or 0-7");
		return field_err(f, s, (size_t)(p - s), problem);
	}
	if (s < end && strchr("LW#?", *s) != NULL) {
		snprintf(problem, sizeof problem, "L, W, # and ? are not supported (allowed: %s, with lists, ranges and steps)",
		         f->def->allowed);
		return field_err(f, NULL, 0, problem);
	}
	if (p > s) {
		snprintf(problem, sizeof problem, "is not a number (allowed: %s)", f->def->allowed);
		return field_err(f, s, (size_t)(p - s), problem);
	}
	if (s == end) {
		snprintf(problem, sizeof problem, "a value is missing (allowed: %s)", f->def->allowed);
		return field_err(f, NULL, 0, problem);
	}
	snprintf(problem, sizeof problem, "unexpected \"%c\" (allowed: %s, with lists, ranges and steps)",
	         *s >= 0x20 && *s < 0x7f ? *s : '?', f->def->allowed);
	return field_err(f, NULL, 0, problem);
}

/* A step after '/': 1 up to the field's maximum. */
static int parse_step(const fparse *f, const char **pp, const char *end, int *out)
{
	const char *p = *pp, *s = p;
	char problem[128];
	if (p == end || *p < '0' || *p > '9') {
		snprintf(problem, sizeof problem, "a step (a number from 1 to %d) must follow \"/\"", f->def->hi);
		return field_err(f, NULL, 0, problem);
	}
	long v = 0;
	while (p < end && *p >= '0' && *p <= '9') {
		if (v < 100000)
			v = v * 10 + (*p - '0');
		p++;
	}
	if (v < 1 || v > f->def->hi) {
		char num[16];
		snprintf(problem, sizeof problem, "step %s is out of range 1-%d", shown(s, (size_t)(p - s), num, 10),
		         f->def->hi);
		return field_err(f, NULL, 0, problem);
	}
	*pp = p;
	*out = (int)v;
	return PGC_OK;
}

/* One field into *mask; *star when it starts with "*", *star_step its step (1 for "*"). */
static int parse_field(const struct field_def *def, const char *text, size_t len, uint64_t *mask,
                       bool *star, int *star_step, pgc_error *err)
{
	fparse f = { def, text, len, err };
	const char *end = text + len;
	*mask = 0;
	*star = len > 0 && text[0] == '*';
	*star_step = 1;
	const char *p = text;
	for (;;) {
		const char *elem = p, *eend = memchr(p, ',', (size_t)(end - p));
		if (eend == NULL)
			eend = end;
		if (eend == elem)
			return field_err(&f, NULL, 0, "an element of the list is empty");
		int a, b, step = 1;
		if (*p == '*') {
			p++;
			if (elem != text || eend != end)
				return field_err(&f, NULL, 0, "\"*\" cannot be combined with other values in a list");
			a = def->lo;
			b = def->hi;
			if (p < eend && *p == '/') {
				p++;
				int rc = parse_step(&f, &p, eend, &step);
				if (rc != PGC_OK)
					return rc;
			}
			*star_step = step;
		} else {
			int rc = parse_value(&f, &p, eend, &a);
			if (rc != PGC_OK)
				return rc;
			b = a;
			if (p < eend && *p == '-') {
				p++;
				if ((rc = parse_value(&f, &p, eend, &b)) != PGC_OK)
					return rc;
				if (b < a) {
					char problem[96];
					snprintf(problem, sizeof problem, "is a range whose start %d is after its end %d", a, b);
					return field_err(&f, elem, (size_t)(eend - elem), problem);
				}
				if (p < eend && *p == '/') {
					p++;
					if ((rc = parse_step(&f, &p, eend, &step)) != PGC_OK)
						return rc;
				}
			} else if (p < eend && *p == '/') {
				/* "5/10": from 5 to the field's maximum by 10, as cronie reads it. */
				p++;
				b = def->hi;
				if ((rc = parse_step(&f, &p, eend, &step)) != PGC_OK)
					return rc;
			}
		}
		if (p != eend) {
			char problem[128];
			snprintf(problem, sizeof problem, "unexpected \"%c\" (allowed: %s, with lists, ranges and steps)",
			         *p >= 0x20 && *p < 0x7f ? *p : '?', def->allowed);
			return field_err(&f, NULL, 0, problem);
		}
		for (int v = a; v <= b; v += step)
			*mask |= UINT64_C(1) << v;
		if (eend == end)
			break;
		p = eend + 1;
	}
	return PGC_OK;
}

/* Appends the canonical text of a non-"*" field: lists sorted, runs as ranges, and a set that
 * is one arithmetic progression of three or more as "a-b/k". */
static void field_text(uint64_t mask, int lo, int hi, char *buf, size_t size)
{
	int vals[64], n = 0;
	for (int v = lo; v <= hi; v++)
		if (mask >> v & 1)
			vals[n++] = v;
	size_t len = 0;
	buf[0] = '\0';
	if (n >= 3) {
		int k = vals[1] - vals[0];
		bool ap = k > 1;
		for (int i = 2; ap && i < n; i++)
			ap = vals[i] - vals[i - 1] == k;
		if (ap) {
			snprintf(buf, size, "%d-%d/%d", vals[0], vals[n - 1], k);
			return;
		}
	}
	for (int i = 0; i < n;) {
		int j = i;
		while (j + 1 < n && vals[j + 1] == vals[j] + 1)
			j++;
		if (j - i >= 2) {
			len += (size_t)snprintf(buf + len, size - len, "%s%d-%d", len ? "," : "", vals[i], vals[j]);
			i = j + 1;
		} else {
			len += (size_t)snprintf(buf + len, size - len, "%s%d", len ? "," : "", vals[i]);
			i++;
		}
	}
}

static int popcount64(uint64_t m)
{
	int n = 0;
	for (; m; m &= m - 1)
		n++;
	return n;
}

static int lowest_bit(uint64_t m)
{
	for (int i = 0; i < 64; i++)
		if (m >> i & 1)
			return i;
	return -1;
}

/* Splits expr into fields; macros become their five fields. */
static int parse_expr(pgc_cron *c, const char *expr, pgc_error *err)
{
	size_t elen = strlen(expr);
	if (elen > PGC_CRON_EXPR_MAX)
		return pgc__err(err, PGC_EUSAGE, "cron expression is longer than %d bytes", PGC_CRON_EXPR_MAX);
	for (size_t i = 0; i < elen; i++) {
		unsigned char ch = (unsigned char)expr[i];
		if ((ch < 0x20 && ch != '\t') || ch == 0x7f)
			return pgc__err(err, PGC_EUSAGE,
			                "cron expression has a control character (byte 0x%02x at offset %zu)", ch, i);
	}
	const char *p = expr;
	while (*p == ' ' || *p == '\t')
		p++;
	const char *end = expr + elen;
	while (end > p && (end[-1] == ' ' || end[-1] == '\t'))
		end--;
	if (p == end)
		return pgc__err(err, PGC_EUSAGE, "cron expression is empty");
	if (*p == '@') {
		char shown_buf[72];
		size_t n = (size_t)(end - p);
		const char *sp = p;
		while (sp < end && *sp != ' ' && *sp != '\t')
			sp++;
		size_t wl = (size_t)(sp - p);
		if (wl == 7 && strncasecmp(p, "@reboot", 7) == 0)
			return pgc__err(err, PGC_EUSAGE,
			                "@reboot is not supported: a schedule shared by a fleet has no single boot to "
			                "run after (use a service manager, or @hourly and the like)");
		for (size_t i = 0; i < sizeof macros / sizeof macros[0]; i++) {
			if (wl == strlen(macros[i].name) && strncasecmp(p, macros[i].name, wl) == 0) {
				if (sp != end)
					return pgc__err(err, PGC_EUSAGE, "\"%s\": a macro stands alone, without fields after it",
					                shown(p, n, shown_buf, 64));
				return parse_expr(c, macros[i].expr, err);
			}
		}
		return pgc__err(err, PGC_EUSAGE,
		                "unknown macro \"%s\" (use @yearly, @annually, @monthly, @weekly, @daily, @midnight "
		                "or @hourly)", shown(p, wl, shown_buf, 64));
	}
	const char *ftext[7];
	size_t flen[7];
	int nf = 0;
	while (p < end) {
		const char *s = p;
		while (p < end && *p != ' ' && *p != '\t')
			p++;
		if (nf < 7) {
			ftext[nf] = s;
			flen[nf] = (size_t)(p - s);
		}
		nf++;
		while (p < end && (*p == ' ' || *p == '\t'))
			p++;
	}
	if (nf != 5 && nf != 6)
		return pgc__err(err, PGC_EUSAGE,
		                "expected 5 fields (minute hour day-of-month month day-of-week) or 6 (a seconds "
		                "field first), got %d", nf);
	c->has_seconds = nf == 6;
	uint64_t masks[F_COUNT];
	bool stars[F_COUNT];
	int steps[F_COUNT];
	for (int i = 0; i < F_COUNT; i++) {
		masks[i] = 1; /* a five-field expression fires at second 0 */
		stars[i] = false;
		steps[i] = 1;
	}
	for (int i = c->has_seconds ? 0 : 1, k = 0; i < F_COUNT; i++, k++) {
		int rc = parse_field(&fields[i], ftext[k], flen[k], &masks[i], &stars[i], &steps[i], err);
		if (rc != PGC_OK)
			return rc;
	}
	/* Day-of-week 7 is Sunday. */
	if (masks[F_DOW] >> 7 & 1)
		masks[F_DOW] = (masks[F_DOW] & ~(UINT64_C(1) << 7)) | 1;
	c->sec = masks[F_SEC];
	c->min = masks[F_MIN];
	c->hour = masks[F_HOUR];
	c->dom = masks[F_DOM];
	c->mon = masks[F_MON];
	c->dow = masks[F_DOW];
	c->dom_star = stars[F_DOM];
	c->dow_star = stars[F_DOW];
	c->fixed_time = !stars[F_MIN] && !stars[F_HOUR];

	/* Never firing: both days must match, and no month of the month field has a day of the
	 * day-of-month field. (Any date falls on every day of the week within 400 years, and with
	 * both restricted, every month has every day of the week.) */
	if (c->dom_star || c->dow_star) {
		bool any = false;
		for (int m = 1; m <= 12 && !any; m++) {
			if (!(c->mon >> m & 1))
				continue;
			int maxd = m == 2 ? 29 : pgc__month_days(2001, m);
			for (int d = 1; d <= maxd && !any; d++)
				any = c->dom >> d & 1;
		}
		if (!any) {
			char t[72], ft[72], fm[72];
			shown(expr, elen, t, 64);
			int k = c->has_seconds ? 0 : 1;
			if (popcount64(c->dom) == 1 && popcount64(c->mon) == 1)
				return pgc__err(err, PGC_EUSAGE, "\"%s\" can never fire: %s has no day %d", t,
				                month_full[lowest_bit(c->mon) - 1], lowest_bit(c->dom));
			return pgc__err(err, PGC_EUSAGE,
			                "\"%s\" can never fire: no month of the month field \"%s\" has a day of the "
			                "day-of-month field \"%s\"", t, shown(ftext[F_MON - k], flen[F_MON - k], fm, 64),
			                shown(ftext[F_DOM - k], flen[F_DOM - k], ft, 64));
		}
	}

	/* The normalized form. */
	char out[1024];
	size_t len = 0;
	for (int i = c->has_seconds ? 0 : 1; i < F_COUNT; i++) {
		char ftxt[256];
		int lo = fields[i].lo, hi = i == F_DOW ? 6 : fields[i].hi;
		if (stars[i] && steps[i] > 1)
			snprintf(ftxt, sizeof ftxt, "*/%d", steps[i]);
		else if (stars[i])
			snprintf(ftxt, sizeof ftxt, "*");
		else
			field_text(masks[i], lo, hi, ftxt, sizeof ftxt);
		len += (size_t)snprintf(out + len, sizeof out - len, "%s%s", len ? " " : "", ftxt);
	}
	c->normalized = strdup(out);
	if (c->normalized == NULL)
		return pgc__err(err, PGC_ENOMEM, "out of memory");
	return PGC_OK;
}

int pgc_cron_parse(const char *expr, const char *tz, pgc_cron **out, pgc_error *err)
{
	pgc_error_clear(err);
	if (out != NULL)
		*out = NULL;
	if (expr == NULL || out == NULL)
		return pgc__err(err, PGC_EUSAGE, "pgc_cron_parse: expr and out must not be NULL");
	pgc_cron *c = calloc(1, sizeof *c);
	if (c == NULL)
		return pgc__err(err, PGC_ENOMEM, "out of memory");
	int rc = parse_expr(c, expr, err);
	if (rc == PGC_OK)
		rc = pgc__tz_get(tz, &c->tz, err);
	if (rc == PGC_OK && (c->tzname = strdup(pgc__tz_name(c->tz))) == NULL)
		rc = pgc__err(err, PGC_ENOMEM, "out of memory");
	if (rc != PGC_OK) {
		pgc_cron_free(c);
		return rc;
	}
	*out = c;
	return PGC_OK;
}

void pgc_cron_free(pgc_cron *c)
{
	if (c == NULL)
		return;
	pgc__tz_release(c->tz);
	free(c->normalized);
	free(c->tzname);
	free(c);
}

const char *pgc_cron_normalized(const pgc_cron *c)
{
	return c ? c->normalized : NULL;
}

bool pgc_cron_has_seconds(const pgc_cron *c)
{
	return c ? c->has_seconds : false;
}

const char *pgc_cron_tz(const pgc_cron *c)
{
	return c ? c->tzname : NULL;
}

/* ---- the next fire time --------------------------------------------------------------------- */

/* The lowest set bit of m at or above from (up to hi), or -1. */
static int next_bit(uint64_t m, int from, int hi)
{
	for (int v = from; v <= hi; v++)
		if (m >> v & 1)
			return v;
	return -1;
}

static bool day_matches(const pgc_cron *c, int64_t days, int d)
{
	bool dom = c->dom >> d & 1;
	bool dow = c->dow >> pgc__weekday(days) & 1;
	return c->dom_star || c->dow_star ? dom && dow : dom || dow;
}

/* The first local time in [lo, hi) that the fields match, on a wall clock without
 * transitions (local times are seconds since 1970-01-01 00:00 of that clock). Each step moves
 * to the start of the next month, day, hour, minute or second that may match, so it takes at
 * most a few steps per day in the range. */
static bool match_from(const pgc_cron *c, int64_t lo, int64_t hi, int64_t *out)
{
	if (lo >= hi)
		return false;
	int64_t days = pgc__floordiv(lo, 86400);
	int64_t sod = lo - days * 86400;
	int h = (int)(sod / 3600), mi = (int)(sod / 60 % 60), s = (int)(sod % 60);
	int64_t y;
	int m, d;
	pgc__civil_from_days(days, &y, &m, &d);
	for (;;) {
		if (days * 86400 >= hi)
			return false;
		bool next_day = false;
		if (!(c->mon >> m & 1)) {
			/* To the first of the next month. */
			days += pgc__month_days(y, m) - d + 1;
			d = 1;
			if (++m > 12) {
				m = 1;
				y++;
			}
			h = mi = s = 0;
			continue;
		}
		if (!day_matches(c, days, d)) {
			next_day = true;
		} else {
			int h2 = next_bit(c->hour, h, 23);
			if (h2 < 0) {
				next_day = true;
			} else {
				if (h2 != h) {
					h = h2;
					mi = s = 0;
				}
				int m2 = next_bit(c->min, mi, 59);
				if (m2 < 0) {
					h++;
					mi = s = 0;
					if (h > 23)
						next_day = true;
					else
						continue;
				} else {
					if (m2 != mi) {
						mi = m2;
						s = 0;
					}
					int s2 = next_bit(c->sec, s, 59);
					if (s2 < 0) {
						s = 0;
						if (++mi > 59) {
							mi = 0;
							if (++h > 23)
								next_day = true;
						}
						if (!next_day)
							continue;
					} else {
						int64_t t = days * 86400 + h * 3600 + mi * 60 + s2;
						if (t >= hi)
							return false;
						*out = t;
						return true;
					}
				}
			}
		}
		if (next_day) {
			days++;
			if (++d > pgc__month_days(y, m)) {
				d = 1;
				if (++m > 12) {
					m = 1;
					y++;
				}
			}
			h = mi = s = 0;
		}
	}
}

static void fmt_utc(int64_t t, char *buf, size_t size)
{
	int64_t days = pgc__floordiv(t, 86400), sod = t - days * 86400, y;
	int m, d;
	pgc__civil_from_days(days, &y, &m, &d);
	snprintf(buf, size, "%04lld-%02d-%02dT%02d:%02d:%02dZ", (long long)y, m, d, (int)(sod / 3600),
	         (int)(sod / 60 % 60), (int)(sod % 60));
}

int pgc_cron_next(const pgc_cron *c, int64_t after, int64_t *next, pgc_error *err)
{
	pgc_error_clear(err);
	if (c == NULL || next == NULL)
		return pgc__err(err, PGC_EUSAGE, "pgc_cron_next: c and next_unix_s must not be NULL");
	if (after < PGC_CRON_TIME_MIN || after > PGC_CRON_TIME_LAST)
		return pgc__err(err, PGC_EUSAGE,
		                "pgc_cron_next: after_unix_s must be from 0001-01-01 to 9999-12-31 (UTC)");
	int64_t limit = PGC_CRON_TIME_LAST;
	if (after < PGC_CRON_TIME_LAST - (int64_t)(PGC_CRON_HORIZON_DAYS + 2) * 86400)
		limit = after + (int64_t)(PGC_CRON_HORIZON_DAYS + 2) * 86400;
	for (int64_t u = after + 1; u <= limit;) {
		pgc__tz_info in;
		pgc__tz_lookup(c->tz, u, &in);
		int64_t end = in.next > limit ? limit + 1 : in.next; /* this segment is [u, end) */
		int64_t lo = u + in.utoff;
		if (c->fixed_time && in.start != INT64_MIN) {
			pgc__tz_info prev;
			pgc__tz_lookup(c->tz, in.start - 1, &prev);
			int64_t seam = in.start + prev.utoff; /* where the previous segment's clock stopped */
			int64_t t;
			if (in.utoff > prev.utoff) {
				/* Spring forward: a time in [seam, start + utoff) fires as the clock resumes. */
				if (u == in.start && match_from(c, seam, in.start + in.utoff, &t)) {
					*next = in.start;
					return PGC_OK;
				}
			} else if (lo < seam) {
				/* Fall back: the repeated times fired in the previous segment. */
				lo = seam;
			}
		}
		int64_t t;
		if (match_from(c, lo, end + in.utoff, &t)) {
			*next = t - in.utoff;
			return PGC_OK;
		}
		u = end;
	}
	char from[32];
	fmt_utc(after, from, sizeof from);
	if (limit == PGC_CRON_TIME_LAST)
		return pgc__err(err, PGC_ENOTFOUND, "\"%s\" has no fire time after %s before the year 10000",
		                c->normalized, from);
	return pgc__err(err, PGC_ENOTFOUND,
	                "\"%s\" does not fire in the 400 years after %s in %s: its daylight saving time skips "
	                "every time the schedule has", c->normalized, from, c->tzname);
}

/* ---- local time ----------------------------------------------------------------------------- */

int pgc_cron_local_time(const pgc_cron *c, int64_t t, pgc_cron_local *out, pgc_error *err)
{
	pgc_error_clear(err);
	if (c == NULL || out == NULL)
		return pgc__err(err, PGC_EUSAGE, "pgc_cron_local_time: c and out must not be NULL");
	if (t < PGC_CRON_TIME_MIN || t > PGC_CRON_TIME_LAST)
		return pgc__err(err, PGC_EUSAGE, "pgc_cron_local_time: the time must be from 0001-01-01 to 9999-12-31 (UTC)");
	pgc__tz_info in;
	pgc__tz_lookup(c->tz, t, &in);
	int64_t local = t + in.utoff, days = pgc__floordiv(local, 86400), sod = local - days * 86400, y;
	memset(out, 0, sizeof *out);
	pgc__civil_from_days(days, &y, &out->month, &out->day);
	out->year = (int)y;
	out->hour = (int)(sod / 3600);
	out->minute = (int)(sod / 60 % 60);
	out->second = (int)(sod % 60);
	out->weekday = pgc__weekday(days);
	out->utoff_s = in.utoff;
	out->dst = in.isdst;
	snprintf(out->abbrev, sizeof out->abbrev, "%s", in.abbr ? in.abbr : "");
	return PGC_OK;
}

int pgc_cron_format_local(const pgc_cron *c, int64_t t, char *buf, size_t size, pgc_error *err)
{
	pgc_error_clear(err);
	if (buf != NULL && size > 0)
		buf[0] = '\0';
	if (c == NULL || buf == NULL || size < PGC_CRON_TIME_MAX)
		return pgc__err(err, PGC_EUSAGE, "pgc_cron_format_local: c and buf must not be NULL, buf must hold %d bytes",
		                PGC_CRON_TIME_MAX);
	pgc_cron_local l;
	int rc = pgc_cron_local_time(c, t, &l, err);
	if (rc != PGC_OK) {
		pgc__err_prefix(err, "pgc_cron_format_local");
		return rc;
	}
	int32_t off = l.utoff_s < 0 ? -l.utoff_s : l.utoff_s;
	int n = snprintf(buf, size, "%04d-%02d-%02dT%02d:%02d:%02d%c%02d:%02d", l.year, l.month, l.day, l.hour,
	                 l.minute, l.second, l.utoff_s < 0 ? '-' : '+', (int)(off / 3600), (int)(off / 60 % 60));
	if (off % 60 != 0)
		snprintf(buf + n, size - (size_t)n, ":%02d", (int)(off % 60));
	return PGC_OK;
}

/* Exactly n digits at *pp into *out. */
static bool take_digits(const char **pp, int n, int *out)
{
	int v = 0;
	for (int i = 0; i < n; i++) {
		char ch = (*pp)[i];
		if (ch < '0' || ch > '9')
			return false;
		v = v * 10 + (ch - '0');
	}
	*pp += n;
	*out = v;
	return true;
}

int pgc_cron_parse_time(const pgc_cron *c, const char *text, int64_t *out, pgc_error *err)
{
	pgc_error_clear(err);
	if (c == NULL || text == NULL || out == NULL)
		return pgc__err(err, PGC_EUSAGE, "pgc_cron_parse_time: c, text and out_unix_s must not be NULL");
	char t[72];
	shown(text, strlen(text), t, 64);
	const char *p = text;
	if (*p == '@') {
		p++;
		bool neg = *p == '-';
		if (neg)
			p++;
		if (*p < '0' || *p > '9')
			return pgc__err(err, PGC_EUSAGE, "time \"%s\": digits must follow \"@\" (seconds since 1970)", t);
		int64_t v = 0;
		while (*p >= '0' && *p <= '9') {
			if (v > PGC_CRON_TIME_LAST)
				break;
			v = v * 10 + (*p++ - '0');
		}
		if (*p != '\0' && (*p < '0' || *p > '9'))
			return pgc__err(err, PGC_EUSAGE, "time \"%s\": only digits may follow \"@\"", t);
		if (neg)
			v = -v;
		if (*p != '\0' || v < PGC_CRON_TIME_MIN || v > PGC_CRON_TIME_LAST)
			return pgc__err(err, PGC_EUSAGE, "time \"%s\" is out of range (years 0001 to 9999)", t);
		*out = v;
		return PGC_OK;
	}
	static const char *const forms =
		"expected YYYY-MM-DD[THH:MM[:SS]] with an optional Z or +HH:MM, or @SECONDS";
	int y, mo, d, h = 0, mi = 0, s = 0;
	if (!take_digits(&p, 4, &y) || *p++ != '-' || !take_digits(&p, 2, &mo) || *p++ != '-' || !take_digits(&p, 2, &d))
		return pgc__err(err, PGC_EUSAGE, "time \"%s\": %s", t, forms);
	if (*p == 'T' || *p == 't' || *p == ' ') {
		p++;
		if (!take_digits(&p, 2, &h) || *p++ != ':' || !take_digits(&p, 2, &mi))
			return pgc__err(err, PGC_EUSAGE, "time \"%s\": %s", t, forms);
		if (*p == ':') {
			p++;
			if (!take_digits(&p, 2, &s))
				return pgc__err(err, PGC_EUSAGE, "time \"%s\": %s", t, forms);
			if (*p == '.' || *p == ',') {
				p++;
				if (*p < '0' || *p > '9')
					return pgc__err(err, PGC_EUSAGE, "time \"%s\": %s", t, forms);
				while (*p >= '0' && *p <= '9')
					p++;
			}
		}
	}
	bool has_off = false;
	int32_t off = 0;
	if (*p == ' ' && (p[1] == '+' || p[1] == '-' || p[1] == 'Z'))
		p++;
	if (*p == 'Z' || *p == 'z') {
		has_off = true;
		p++;
	} else if (*p == '+' || *p == '-') {
		int sign = *p++ == '-' ? -1 : 1, oh, om = 0;
		if (!take_digits(&p, 2, &oh))
			return pgc__err(err, PGC_EUSAGE, "time \"%s\": the offset must be +HH:MM, +HHMM or +HH", t);
		if (*p == ':')
			p++;
		if (*p != '\0' && !take_digits(&p, 2, &om))
			return pgc__err(err, PGC_EUSAGE, "time \"%s\": the offset must be +HH:MM, +HHMM or +HH", t);
		if (oh > 25 || om > 59)
			return pgc__err(err, PGC_EUSAGE, "time \"%s\": offset out of range", t);
		has_off = true;
		off = sign * (oh * 3600 + om * 60);
	}
	if (*p != '\0')
		return pgc__err(err, PGC_EUSAGE, "time \"%s\": %s", t, forms);
	if (y < 1 || mo < 1 || mo > 12 || d < 1 || d > pgc__month_days(y, mo))
		return pgc__err(err, PGC_EUSAGE, "time \"%s\": no such date", t);
	if (h > 23 || mi > 59 || s > 59)
		return pgc__err(err, PGC_EUSAGE, "time \"%s\": no such time of day (00:00:00 to 23:59:59)", t);
	int64_t local = pgc__days_from_civil(y, mo, d) * 86400 + h * 3600 + mi * 60 + s;
	int64_t u;
	if (has_off) {
		u = local - off;
	} else {
		int64_t cand[2], gap_end;
		u = pgc__tz_from_local(c->tz, local, cand, &gap_end) > 0 ? cand[0] : gap_end;
	}
	if (u < PGC_CRON_TIME_MIN || u > PGC_CRON_TIME_LAST)
		return pgc__err(err, PGC_EUSAGE, "time \"%s\" is out of range (years 0001 to 9999)", t);
	*out = u;
	return PGC_OK;
}

/* tz.c - time zones from the host's tzdata: a TZif reader, the POSIX TZ rule of its footer,
 * and local time <-> UTC with the gaps and repeats of daylight saving time
 *
 * The one source of zone rules is the system's tzdata: the TZif file of a zone name under
 * $TZDIR or /usr/share/zoneinfo (RFC 8536). Versions 1 to 4 are read; from version 2 on only
 * the 64-bit data block is used, and the footer's POSIX TZ string ("CET-1CEST,M3.5.0,
 * M10.5.0/3") gives every instant after the table's last transition, which is how future
 * DST transitions are known. Nothing here touches the process's TZ, tzset() or localtime():
 * a loaded zone is immutable memory, so any thread may use it.
 *
 * Zones are cached by name, each with the identity of its file (device, inode, size, mtime),
 * and reference-counted under one mutex: a schedule holds its zone, and a zone whose file
 * changed (a tzdata upgrade) is read again by the next pgc__tz_get(), while the schedules
 * made before keep the rules they were made with. */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "base/base.h"
#include "tz_int.h"

#define TZ_DIR_DEFAULT "/usr/share/zoneinfo"
/* Larger than any zone file (the biggest are a few KiB). */
#define TZIF_MAX_BYTES (1 << 20)
/* RFC 8536: utoff in [-89999, 93599]; local time is at most that far from UTC. */
#define UTOFF_MIN (-89999)
#define UTOFF_MAX 93599
/* Instants are clamped to about +-1.1e9 years before any calendar arithmetic. */
#define T_CLAMP (INT64_C(1) << 55)

typedef struct tz_type {
	int32_t utoff;
	bool isdst;
	const char *abbr; /* into chars */
} tz_type;

/* One end of daylight saving time in a POSIX TZ rule. */
typedef struct tz_date {
	char kind;    /* 'J': Julian day 1..365 without Feb 29; 'D': day 0..365; 'M': m.w.d */
	int n, m, w, d;
	int32_t time; /* seconds after local midnight, -167h..167h */
} tz_date;

typedef struct tz_rule {
	int32_t std_off, dst_off; /* east of UTC */
	bool has_dst;
	char std_abbr[PGC_CRON_ABBREV_MAX], dst_abbr[PGC_CRON_ABBREV_MAX];
	tz_date start, end;
} tz_rule;

struct pgc__tz {
	char *name;
	int refs;       /* under cache_mu; the built-in UTC is not counted */
	bool builtin;
	size_t ntrans;
	int64_t *trans; /* strictly increasing */
	uint8_t *idx;   /* type of each transition */
	size_t ntypes;
	tz_type *types;
	char *chars;
	bool has_rule;  /* a footer: it holds after the last transition */
	tz_rule rule;
	/* The file it was read from. */
	dev_t dev;
	ino_t ino;
	off_t size;
	struct timespec mtime;
	pgc__tz *next_cached;
};

static char utc_chars[] = "UTC";
static tz_type utc_type = { 0, false, utc_chars };
static char utc_name[] = "UTC";
static pgc__tz utc_zone = { .name = utc_name, .builtin = true, .ntypes = 1, .types = &utc_type,
                            .chars = utc_chars };

static pthread_mutex_t cache_mu = PTHREAD_MUTEX_INITIALIZER;
static pgc__tz *cache;

/* ---- the calendar --------------------------------------------------------------------------- */

int64_t pgc__days_from_civil(int64_t y, int m, int d)
{
	y -= m <= 2;
	int64_t era = pgc__floordiv(y, 400);
	int64_t yoe = y - era * 400;
	int64_t doy = (153 * (m + (m > 2 ? -3 : 9)) + 2) / 5 + d - 1;
	int64_t doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
	return era * 146097 + doe - 719468;
}

void pgc__civil_from_days(int64_t z, int64_t *y, int *m, int *d)
{
	z += 719468;
	int64_t era = pgc__floordiv(z, 146097);
	int64_t doe = z - era * 146097;
	int64_t yoe = (doe - doe / 1460 + doe / 36524 - doe / 146096) / 365;
	int64_t doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
	int64_t mp = (5 * doy + 2) / 153;
	*d = (int)(doy - (153 * mp + 2) / 5 + 1);
	*m = (int)(mp < 10 ? mp + 3 : mp - 9);
	*y = yoe + era * 400 + (*m <= 2);
}

int pgc__weekday(int64_t days)
{
	/* 1970-01-01 was a Thursday. */
	int64_t w = (days + 4) % 7;
	return (int)(w < 0 ? w + 7 : w);
}

bool pgc__leap_year(int64_t y)
{
	return (y % 4 == 0 && y % 100 != 0) || y % 400 == 0;
}

int pgc__month_days(int64_t y, int m)
{
	static const int days[] = { 31, 28, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31 };
	return m == 2 && pgc__leap_year(y) ? 29 : days[m - 1];
}

/* ---- POSIX TZ strings ----------------------------------------------------------------------- */

/* A zone abbreviation: three or more letters, or <...> of letters, digits, '+' and '-'. */
static const char *posix_name(const char *p, char *out)
{
	size_t n = 0;
	if (*p == '<') {
		p++;
		while ((*p >= 'A' && *p <= 'Z') || (*p >= 'a' && *p <= 'z') || (*p >= '0' && *p <= '9') ||
		       *p == '+' || *p == '-') {
			if (n + 1 < PGC_CRON_ABBREV_MAX)
				out[n] = *p;
			n++;
			p++;
		}
		if (*p != '>')
			return NULL;
		p++;
	} else {
		while ((*p >= 'A' && *p <= 'Z') || (*p >= 'a' && *p <= 'z')) {
			if (n + 1 < PGC_CRON_ABBREV_MAX)
				out[n] = *p;
			n++;
			p++;
		}
	}
	if (n < 3)
		return NULL;
	out[n < PGC_CRON_ABBREV_MAX ? n : PGC_CRON_ABBREV_MAX - 1] = '\0';
	return p;
}

/* [+-]hh[:mm[:ss]] with hours up to max_h, into seconds. */
static const char *posix_hms(const char *p, int max_h, int32_t *out)
{
	int sign = 1;
	if (*p == '+' || *p == '-')
		sign = *p++ == '-' ? -1 : 1;
	int32_t parts[3] = { 0, 0, 0 };
	for (int k = 0; k < 3; k++) {
		if (k > 0) {
			if (*p != ':')
				break;
			p++;
		}
		if (*p < '0' || *p > '9')
			return NULL;
		int32_t v = 0, digits = 0;
		while (*p >= '0' && *p <= '9') {
			v = v * 10 + (*p++ - '0');
			if (++digits > 3)
				return NULL;
		}
		parts[k] = v;
	}
	if (parts[0] > max_h || parts[1] > 59 || parts[2] > 59)
		return NULL;
	*out = sign * (parts[0] * 3600 + parts[1] * 60 + parts[2]);
	return p;
}

static const char *posix_num(const char *p, int lo, int hi, int *out)
{
	if (*p < '0' || *p > '9')
		return NULL;
	int v = 0;
	while (*p >= '0' && *p <= '9') {
		v = v * 10 + (*p++ - '0');
		if (v > hi)
			return NULL;
	}
	if (v < lo)
		return NULL;
	*out = v;
	return p;
}

/* Jn, n or Mm.w.d, then an optional /time (default 02:00:00). */
static const char *posix_date(const char *p, tz_date *d)
{
	memset(d, 0, sizeof *d);
	if (*p == 'J') {
		d->kind = 'J';
		p = posix_num(p + 1, 1, 365, &d->n);
	} else if (*p == 'M') {
		d->kind = 'M';
		p = posix_num(p + 1, 1, 12, &d->m);
		if (p == NULL || *p++ != '.')
			return NULL;
		p = posix_num(p, 1, 5, &d->w);
		if (p == NULL || *p++ != '.')
			return NULL;
		p = posix_num(p, 0, 6, &d->d);
	} else {
		d->kind = 'D';
		p = posix_num(p, 0, 365, &d->n);
	}
	if (p == NULL)
		return NULL;
	d->time = 7200;
	if (*p == '/')
		p = posix_hms(p + 1, 167, &d->time);
	return p;
}

/* The footer's TZ string (RFC 8536 section 3.3, with its extensions: hours of a rule's time
 * from -167 to 167). POSIX offsets count west of UTC; ours count east. */
static bool posix_parse(const char *s, tz_rule *r)
{
	memset(r, 0, sizeof *r);
	const char *p = posix_name(s, r->std_abbr);
	if (p == NULL)
		return false;
	int32_t off;
	if ((p = posix_hms(p, 24, &off)) == NULL)
		return false;
	r->std_off = -off;
	if (*p == '\0')
		return true;
	if ((p = posix_name(p, r->dst_abbr)) == NULL)
		return false;
	r->has_dst = true;
	r->dst_off = r->std_off + 3600;
	if (*p != ',' && *p != '\0') {
		if ((p = posix_hms(p, 24, &off)) == NULL)
			return false;
		r->dst_off = -off;
	}
	if (*p == '\0') {
		/* POSIX leaves the default rule to the implementation; tzcode uses the US rule. */
		p = ",M3.2.0,M11.1.0";
	}
	if (*p++ != ',' || (p = posix_date(p, &r->start)) == NULL || *p++ != ',' ||
	    (p = posix_date(p, &r->end)) == NULL || *p != '\0')
		return false;
	return true;
}

/* The day of year Y (days since the epoch) a rule's date falls on. */
static int64_t rule_day(int64_t y, const tz_date *d)
{
	int64_t jan1 = pgc__days_from_civil(y, 1, 1);
	switch (d->kind) {
	case 'J':
		return jan1 + d->n - 1 + (pgc__leap_year(y) && d->n >= 60 ? 1 : 0);
	case 'D':
		return jan1 + d->n;
	default: {
		int64_t first = pgc__days_from_civil(y, d->m, 1);
		int day = (d->d - pgc__weekday(first) + 7) % 7 + 7 * (d->w - 1);
		while (day >= pgc__month_days(y, d->m))
			day -= 7;
		return first + day;
	}
	}
}

/* The state of rule r at t. The start of DST is given in standard time, its end in DST. */
static void rule_lookup(const tz_rule *r, int64_t t, pgc__tz_info *out)
{
	out->start = INT64_MIN;
	out->next = INT64_MAX;
	out->utoff = r->std_off;
	out->isdst = false;
	out->abbr = r->std_abbr;
	if (!r->has_dst)
		return;
	int64_t y, days = pgc__floordiv(t + r->std_off, 86400);
	int m, d;
	pgc__civil_from_days(days, &y, &m, &d);
	int64_t tr[6];
	bool to_dst[6];
	int n = 0;
	for (int64_t yy = y - 1; yy <= y + 1; yy++) {
		/* An end before a start at the same instant: a zone in DST all year ("0/0,J365/25")
		 * then stays in DST across the new year. */
		tr[n] = rule_day(yy, &r->end) * 86400 + r->end.time - r->dst_off;
		to_dst[n++] = false;
		tr[n] = rule_day(yy, &r->start) * 86400 + r->start.time - r->std_off;
		to_dst[n++] = true;
	}
	/* Insertion sort, stable: ends stay before starts at equal instants. */
	for (int i = 1; i < n; i++) {
		for (int j = i; j > 0 && tr[j] < tr[j - 1]; j--) {
			int64_t tt = tr[j];
			tr[j] = tr[j - 1];
			tr[j - 1] = tt;
			bool bb = to_dst[j];
			to_dst[j] = to_dst[j - 1];
			to_dst[j - 1] = bb;
		}
	}
	bool dst = !to_dst[0];
	for (int i = 0; i < n; i++) {
		if (tr[i] <= t) {
			dst = to_dst[i];
			out->start = tr[i];
		} else {
			out->next = tr[i];
			break;
		}
	}
	if (dst) {
		out->utoff = r->dst_off;
		out->isdst = true;
		out->abbr = r->dst_abbr;
	}
}

/* ---- lookups -------------------------------------------------------------------------------- */

static void type_info(const tz_type *ty, pgc__tz_info *out)
{
	out->utoff = ty->utoff;
	out->isdst = ty->isdst;
	out->abbr = ty->abbr;
}

void pgc__tz_lookup(const pgc__tz *z, int64_t t, pgc__tz_info *out)
{
	if (t > T_CLAMP)
		t = T_CLAMP;
	if (t < -T_CLAMP)
		t = -T_CLAMP;
	size_t n = z->ntrans;
	if (n == 0 || t >= z->trans[n - 1]) {
		if (z->has_rule) {
			rule_lookup(&z->rule, t, out);
			if (n > 0 && out->start < z->trans[n - 1])
				out->start = z->trans[n - 1];
			return;
		}
		type_info(&z->types[n ? z->idx[n - 1] : 0], out);
		out->start = n ? z->trans[n - 1] : INT64_MIN;
		out->next = INT64_MAX;
		return;
	}
	if (t < z->trans[0]) {
		/* RFC 8536: before the first transition, time type 0. */
		type_info(&z->types[0], out);
		out->start = INT64_MIN;
		out->next = z->trans[0];
		return;
	}
	size_t lo = 0, hi = n - 1; /* trans[lo] <= t < trans[hi] */
	while (hi - lo > 1) {
		size_t mid = lo + (hi - lo) / 2;
		if (z->trans[mid] <= t)
			lo = mid;
		else
			hi = mid;
	}
	type_info(&z->types[z->idx[lo]], out);
	out->start = z->trans[lo];
	out->next = z->trans[hi];
}

int pgc__tz_from_local(const pgc__tz *z, int64_t local, int64_t out[2], int64_t *gap_end)
{
	/* Every instant whose local time can be local lies in [local - UTOFF_MAX, local -
	 * UTOFF_MIN]: walk the segments of constant offset across that window. */
	int64_t lo = local - UTOFF_MAX - 1, hi = local - UTOFF_MIN + 1;
	int count = 0;
	bool have_gap = false;
	int64_t u = lo;
	int32_t prev_off = 0;
	bool have_prev = false;
	while (u <= hi) {
		pgc__tz_info in;
		pgc__tz_lookup(z, u, &in);
		if (have_prev && !have_gap && u + prev_off <= local && local < u + in.utoff) {
			/* Skipped: the wall clock jumped over local at the transition u. */
			*gap_end = u;
			have_gap = true;
		}
		int64_t cand = local - in.utoff;
		if (cand >= u && cand < in.next && count < 2)
			out[count++] = cand;
		if (in.next == INT64_MAX)
			break;
		prev_off = in.utoff;
		have_prev = true;
		u = in.next;
	}
	if (count == 0 && !have_gap) {
		/* Not reached with valid data; keep the caller's arithmetic defined. */
		pgc__tz_info in;
		pgc__tz_lookup(z, local, &in);
		*gap_end = local - in.utoff;
	}
	return count;
}

/* ---- TZif files ----------------------------------------------------------------------------- */

static uint32_t be32(const unsigned char *p)
{
	return (uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 | (uint32_t)p[2] << 8 | p[3];
}

static int64_t be64(const unsigned char *p)
{
	return (int64_t)((uint64_t)be32(p) << 32 | be32(p + 4));
}

typedef struct tzif_counts {
	uint32_t isut, isstd, leap, time, type, chars;
} tzif_counts;

static bool tzif_header(const unsigned char *p, size_t n, tzif_counts *c)
{
	if (n < 44 || memcmp(p, "TZif", 4) != 0)
		return false;
	c->isut = be32(p + 20);
	c->isstd = be32(p + 24);
	c->leap = be32(p + 28);
	c->time = be32(p + 32);
	c->type = be32(p + 36);
	c->chars = be32(p + 40);
	return true;
}

static size_t tzif_block_len(const tzif_counts *c, size_t tsize)
{
	return (size_t)c->time * tsize + c->time + (size_t)c->type * 6 + c->chars +
	       (size_t)c->leap * (tsize + 4) + c->isstd + c->isut;
}

/* Parses a TZif file into z. On failure returns false with why set. */
static bool tzif_parse(const unsigned char *p, size_t n, pgc__tz *z, const char **why)
{
	tzif_counts c;
	if (!tzif_header(p, n, &c)) {
		*why = "not TZif data";
		return false;
	}
	char version = (char)p[4];
	if (version != '\0' && (version < '2' || version > '9')) {
		*why = "unknown TZif version";
		return false;
	}
	/* Counts that no zone comes near; they also keep the lengths below from overflowing. */
	if (c.time > 100000 || c.type > 256 || c.chars > 65536 || c.leap > 10000 || c.isstd > 256 ||
	    c.isut > 256) {
		*why = "TZif counts out of range";
		return false;
	}
	size_t off = 44, tsize = 4;
	if (version != '\0') {
		off += tzif_block_len(&c, 4);
		if (off > n || !tzif_header(p + off, n - off, &c)) {
			*why = "truncated TZif data (no version 2 header)";
			return false;
		}
		if (c.time > 100000 || c.type > 256 || c.chars > 65536 || c.leap > 10000 ||
		    c.isstd > 256 || c.isut > 256) {
			*why = "TZif counts out of range";
			return false;
		}
		off += 44;
		tsize = 8;
	}
	if (n - off < tzif_block_len(&c, tsize)) {
		*why = "truncated TZif data";
		return false;
	}
	if (c.leap > 0) {
		*why = "the zone counts leap seconds (a right/ zone); instants here are POSIX seconds";
		return false;
	}
	if (c.type == 0 || c.chars == 0 || (c.isstd != 0 && c.isstd != c.type) ||
	    (c.isut != 0 && c.isut != c.type)) {
		*why = "inconsistent TZif counts";
		return false;
	}
	const unsigned char *times = p + off, *idx = times + (size_t)c.time * tsize,
	                    *types = idx + c.time, *chars = types + (size_t)c.type * 6;
	z->ntrans = c.time;
	z->ntypes = c.type;
	z->trans = malloc((c.time ? c.time : 1) * sizeof *z->trans);
	z->idx = malloc(c.time ? c.time : 1);
	z->types = malloc(c.type * sizeof *z->types);
	z->chars = malloc(c.chars + 1);
	if (z->trans == NULL || z->idx == NULL || z->types == NULL || z->chars == NULL) {
		*why = NULL; /* out of memory */
		return false;
	}
	memcpy(z->chars, chars, c.chars);
	z->chars[c.chars] = '\0';
	for (uint32_t i = 0; i < c.time; i++) {
		z->trans[i] = tsize == 8 ? be64(times + 8 * i) : (int64_t)(int32_t)be32(times + 4 * i);
		if (i > 0 && z->trans[i] <= z->trans[i - 1]) {
			*why = "TZif transition times out of order";
			return false;
		}
		z->idx[i] = idx[i];
		if (idx[i] >= c.type) {
			*why = "TZif transition with an unknown type";
			return false;
		}
	}
	for (uint32_t i = 0; i < c.type; i++) {
		const unsigned char *t = types + 6 * i;
		int32_t utoff = (int32_t)be32(t);
		if (utoff < UTOFF_MIN || utoff > UTOFF_MAX || t[4] > 1 || t[5] >= c.chars ||
		    memchr(chars + t[5], '\0', c.chars - t[5]) == NULL) {
			*why = "TZif local time type out of range";
			return false;
		}
		z->types[i].utoff = utoff;
		z->types[i].isdst = t[4] == 1;
		z->types[i].abbr = z->chars + t[5];
	}
	off += tzif_block_len(&c, tsize);
	if (tsize == 8) {
		/* The footer: "\n" TZ string "\n". */
		if (off >= n || p[off] != '\n') {
			*why = "TZif footer missing";
			return false;
		}
		const unsigned char *end = memchr(p + off + 1, '\n', n - off - 1);
		if (end == NULL || end - (p + off + 1) > 200) {
			*why = "TZif footer unterminated";
			return false;
		}
		char s[256];
		size_t len = (size_t)(end - (p + off + 1));
		memcpy(s, p + off + 1, len);
		s[len] = '\0';
		if (len > 0) {
			if (!posix_parse(s, &z->rule)) {
				*why = "TZif footer is not a TZ string this reader knows";
				return false;
			}
			z->has_rule = true;
		}
	}
	return true;
}

static void tz_destroy(pgc__tz *z)
{
	if (z == NULL || z->builtin)
		return;
	free(z->name);
	free(z->trans);
	free(z->idx);
	free(z->types);
	free(z->chars);
	free(z);
}

/* The one rule for a zone name: tzdata's own names only, so that it cannot leave the
 * directory: no absolute path, no "." or ".." or empty component, only A-Z a-z 0-9 / _ + - .
 * Returns a pgc_code. */
static int check_name(const char *name, pgc_error *err)
{
	size_t len = strlen(name);
	if (len > PGC_CRON_TZ_MAX)
		return pgc__err(err, PGC_EUSAGE, "time zone name is longer than %d bytes", PGC_CRON_TZ_MAX);
	/* The name as messages show it: printable ASCII, the rest as '?'. */
	char shown[104];
	size_t n = 0;
	for (; n < len && n < 100; n++)
		shown[n] = name[n] >= 0x20 && name[n] < 0x7f ? name[n] : '?';
	shown[n] = '\0';
	if (name[0] == '/')
		return pgc__err(err, PGC_EUSAGE,
		                "time zone \"%s\": give a zone name such as Europe/Berlin, not a path", shown);
	for (const char *p = name; *p; p++) {
		char ch = *p;
		if (!((ch >= 'A' && ch <= 'Z') || (ch >= 'a' && ch <= 'z') || (ch >= '0' && ch <= '9') ||
		      ch == '/' || ch == '_' || ch == '+' || ch == '-' || ch == '.'))
			return pgc__err(err, PGC_EUSAGE,
			                "time zone \"%s\": a zone name has only letters, digits and / _ + - . "
			                "(such as Europe/Berlin)", shown);
	}
	for (const char *p = name;;) {
		const char *e = strchr(p, '/');
		size_t k = e ? (size_t)(e - p) : strlen(p);
		if (k == 0 || (k == 1 && p[0] == '.') || (k == 2 && p[0] == '.' && p[1] == '.'))
			return pgc__err(err, PGC_EUSAGE,
			                "time zone \"%s\": empty, \".\" and \"..\" parts are not allowed in a zone name",
			                shown);
		if (e == NULL)
			break;
		p = e + 1;
	}
	return PGC_OK;
}

static const char *tz_dir(void)
{
	const char *d = getenv("TZDIR");
	return d != NULL && *d != '\0' ? d : TZ_DIR_DEFAULT;
}

static bool same_file(const pgc__tz *z, const struct stat *st)
{
	return z->dev == st->st_dev && z->ino == st->st_ino && z->size == st->st_size &&
	       z->mtime.tv_sec == st->st_mtim.tv_sec && z->mtime.tv_nsec == st->st_mtim.tv_nsec;
}

/* Reads the file behind fd (already checked to be a regular file of st->st_size bytes). */
static int load(const char *name, const char *path, int fd, const struct stat *st, pgc__tz **out,
                pgc_error *err)
{
	if (st->st_size > TZIF_MAX_BYTES)
		return pgc__err(err, PGC_EUSAGE, "time zone \"%s\": %s is too large for a zone file", name, path);
	size_t size = (size_t)st->st_size;
	unsigned char *buf = malloc(size ? size : 1);
	if (buf == NULL)
		return pgc__err(err, PGC_ENOMEM, "out of memory reading time zone \"%s\"", name);
	size_t got = 0;
	while (got < size) {
		ssize_t r = read(fd, buf + got, size - got);
		if (r < 0 && errno == EINTR)
			continue;
		if (r <= 0) {
			int e = r < 0 ? errno : EIO;
			free(buf);
			return pgc__err(err, PGC_EUSAGE, "time zone \"%s\": cannot read %s: %s", name, path, strerror(e));
		}
		got += (size_t)r;
	}
	pgc__tz *z = calloc(1, sizeof *z);
	if (z == NULL || (z->name = strdup(name)) == NULL) {
		free(z);
		free(buf);
		return pgc__err(err, PGC_ENOMEM, "out of memory reading time zone \"%s\"", name);
	}
	const char *why = NULL;
	bool ok = tzif_parse(buf, size, z, &why);
	free(buf);
	if (!ok) {
		tz_destroy(z);
		if (why == NULL)
			return pgc__err(err, PGC_ENOMEM, "out of memory reading time zone \"%s\"", name);
		return pgc__err(err, PGC_EUSAGE, "time zone \"%s\": %s is not a usable zone file: %s", name, path, why);
	}
	z->dev = st->st_dev;
	z->ino = st->st_ino;
	z->size = st->st_size;
	z->mtime = st->st_mtim;
	z->refs = 1;
	*out = z;
	return PGC_OK;
}

int pgc__tz_get(const char *name, pgc__tz **out, pgc_error *err)
{
	*out = NULL;
	if (name == NULL || *name == '\0' || strcmp(name, "UTC") == 0) {
		*out = &utc_zone;
		return PGC_OK;
	}
	int rc = check_name(name, err);
	if (rc != PGC_OK)
		return rc;
	const char *dir = tz_dir();
	char path[PATH_MAX];
	if ((size_t)snprintf(path, sizeof path, "%s/%s", dir, name) >= sizeof path)
		return pgc__err(err, PGC_EUSAGE, "time zone \"%s\": the path under %s is too long", name, dir);
	int fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0) {
		int e = errno;
		if (e == ENOENT || e == ENOTDIR)
			return pgc__err(err, PGC_EUSAGE,
			                "unknown time zone \"%s\" (no such zone in %s, the host's tzdata)", name, dir);
		return pgc__err(err, PGC_EUSAGE, "time zone \"%s\": cannot open %s: %s", name, path, strerror(e));
	}
	struct stat st;
	if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
		bool isdir = S_ISDIR(st.st_mode);
		close(fd);
		if (isdir)
			return pgc__err(err, PGC_EUSAGE,
			                "time zone \"%s\" is a directory of zones in %s, not a zone (such as Europe/Berlin)",
			                name, dir);
		return pgc__err(err, PGC_EUSAGE, "time zone \"%s\": %s is not a regular file", name, path);
	}
	pthread_mutex_lock(&cache_mu);
	for (pgc__tz *z = cache; z != NULL; z = z->next_cached) {
		if (strcmp(z->name, name) == 0 && same_file(z, &st)) {
			z->refs++;
			pthread_mutex_unlock(&cache_mu);
			close(fd);
			*out = z;
			return PGC_OK;
		}
	}
	pthread_mutex_unlock(&cache_mu);
	pgc__tz *z = NULL;
	rc = load(name, path, fd, &st, &z, err);
	close(fd);
	if (rc != PGC_OK)
		return rc;
	pthread_mutex_lock(&cache_mu);
	/* The cache's reference replaces the one of an older file of the same name. */
	for (pgc__tz **pp = &cache; *pp != NULL; pp = &(*pp)->next_cached) {
		if (strcmp((*pp)->name, name) == 0) {
			pgc__tz *old = *pp;
			*pp = old->next_cached;
			if (--old->refs == 0)
				tz_destroy(old);
			break;
		}
	}
	z->refs++;
	z->next_cached = cache;
	cache = z;
	pthread_mutex_unlock(&cache_mu);
	*out = z;
	return PGC_OK;
}

void pgc__tz_release(pgc__tz *z)
{
	if (z == NULL || z->builtin)
		return;
	pthread_mutex_lock(&cache_mu);
	bool last = --z->refs == 0;
	pthread_mutex_unlock(&cache_mu);
	if (last)
		tz_destroy(z);
}

const char *pgc__tz_name(const pgc__tz *z)
{
	return z->name;
}

int pgc__tz_from_posix(const char *tzstr, pgc__tz **out, pgc_error *err)
{
	*out = NULL;
	pgc__tz *z = calloc(1, sizeof *z);
	if (z == NULL || (z->name = strdup(tzstr)) == NULL || (z->types = calloc(1, sizeof *z->types)) == NULL) {
		tz_destroy(z);
		return pgc__err(err, PGC_ENOMEM, "out of memory");
	}
	if (!posix_parse(tzstr, &z->rule)) {
		tz_destroy(z);
		return pgc__err(err, PGC_EUSAGE, "not a POSIX TZ string: \"%s\"", tzstr);
	}
	z->has_rule = true;
	z->ntypes = 1;
	z->types[0].utoff = z->rule.std_off;
	z->types[0].abbr = z->rule.std_abbr;
	z->refs = 1;
	*out = z;
	return PGC_OK;
}

/* test_cron.c - cron expressions: the parser and its messages, the normalized form, next fire
 * times in UTC and across DST changes, the TZif reader and the POSIX TZ rules
 *
 * Expected instants are derived by hand from the calendar and the zones' published rules
 * (each case says how); times are written in UTC and converted with timegm(), which is not
 * the code under test. tests/cli/cron_next.sh checks the zone reader against date(1). */
#include <pthread.h>

#include "conn/conn_int.h"
#include "cron/tz_int.h"
#include "../t.h"

/* "2026-03-29T01:00:00Z" as seconds since the epoch, by libc. */
static int64_t utc(const char *iso)
{
	struct tm tm;
	memset(&tm, 0, sizeof tm);
	if (sscanf(iso, "%d-%d-%dT%d:%d:%dZ", &tm.tm_year, &tm.tm_mon, &tm.tm_mday, &tm.tm_hour, &tm.tm_min,
	           &tm.tm_sec) != 6)
		T_FAIL("bad test time %s", iso);
	tm.tm_year -= 1900;
	tm.tm_mon -= 1;
	return (int64_t)timegm(&tm);
}

static pgc_cron *parse_ok(const char *expr, const char *tz)
{
	pgc_cron *c = NULL;
	pgc_error err;
	if (pgc_cron_parse(expr, tz, &c, &err) != PGC_OK)
		T_FAIL("parse \"%s\" in %s: %s", expr, tz ? tz : "UTC", err.message);
	return c;
}

/* The normalized form of expr. */
static void norm_is(const char *expr, const char *want)
{
	pgc_cron *c = parse_ok(expr, NULL);
	if (strcmp(pgc_cron_normalized(c), want) != 0)
		T_FAIL("normalized \"%s\" = \"%s\", expected \"%s\"", expr, pgc_cron_normalized(c), want);
	/* It parses back to itself. */
	pgc_cron *again = parse_ok(want, NULL);
	T_ASSERT_STR_EQ(pgc_cron_normalized(again), want);
	pgc_cron_free(again);
	pgc_cron_free(c);
}

/* expr is refused with a message containing want. */
static void bad(const char *expr, const char *want)
{
	pgc_cron *c = (pgc_cron *)&c;
	pgc_error err;
	int rc = pgc_cron_parse(expr, NULL, &c, &err);
	if (rc != PGC_EUSAGE)
		T_FAIL("parse \"%s\" returned %d, expected PGC_EUSAGE", expr, rc);
	T_ASSERT(c == NULL);
	T_ASSERT_INT_EQ(err.klass, PGC_CLASS_USAGE);
	if (strstr(err.message, want) == NULL)
		T_FAIL("parse \"%s\": message \"%s\" lacks \"%s\"", expr, err.message, want);
	T_ASSERT(strchr(err.message, '\n') == NULL);
}

/* The fire times after after_iso are want[0], want[1], ... (UTC). */
static void fires(const char *expr, const char *tz, const char *after_iso, const char *const *want, int n)
{
	pgc_cron *c = parse_ok(expr, tz);
	int64_t t = utc(after_iso);
	for (int i = 0; i < n; i++) {
		int64_t next;
		pgc_error err;
		if (pgc_cron_next(c, t, &next, &err) != PGC_OK)
			T_FAIL("\"%s\" in %s: next after %" PRId64 ": %s", expr, tz ? tz : "UTC", t, err.message);
		if (next != utc(want[i])) {
			char got[PGC_CRON_TIME_MAX];
			pgc_cron_format_local(c, next, got, sizeof got, &err) == PGC_OK || (got[0] = '\0');
			T_FAIL("\"%s\" in %s: fire %d after %s is %s (%" PRId64 "), expected %s", expr, tz ? tz : "UTC", i + 1,
			       after_iso, got, next, want[i]);
		}
		t = next;
	}
	pgc_cron_free(c);
}
#define FIRES(expr, tz, after, ...)                                                         \
	do {                                                                                    \
		static const char *const w_[] = { __VA_ARGS__ };                                    \
		fires(expr, tz, after, w_, (int)(sizeof w_ / sizeof w_[0]));                        \
	} while (0)

/* How unix_s shows in tz. */
static void local_is(const char *tz, const char *at_iso, const char *want)
{
	pgc_cron *c = parse_ok("* * * * *", tz);
	char buf[PGC_CRON_TIME_MAX];
	pgc_error err;
	T_ASSERT_INT_EQ(pgc_cron_format_local(c, utc(at_iso), buf, sizeof buf, &err), PGC_OK);
	if (strcmp(buf, want) != 0)
		T_FAIL("%s in %s shows as %s, expected %s", at_iso, tz, buf, want);
	pgc_cron_free(c);
}

/* ---- the parser ----------------------------------------------------------------------------- */

static void cron__parse_fields(void)
{
	/* Every field's range, both ends. */
	norm_is("0 0 1 1 0", "0 0 1 1 0");
	norm_is("59 23 31 12 6", "59 23 31 12 6");
	norm_is("59 59 23 31 12 7", "59 59 23 31 12 0");
	bad("60 * * * *", "minute field \"60\": out of range 0-59");
	bad("* 24 * * *", "hour field \"24\": out of range 0-23");
	bad("* 25 * * *", "hour field \"25\": out of range 0-23");
	bad("* * 0 * *", "day-of-month field \"0\": out of range 1-31");
	bad("* * 32 * *", "day-of-month field \"32\": out of range 1-31");
	bad("* * * 0 *", "month field \"0\": out of range 1-12");
	bad("* * * 13 *", "month field \"13\": out of range 1-12");
	bad("* * * * 8", "day-of-week field \"8\": out of range 0-7");
	bad("60 * * * * *", "second field \"60\": out of range 0-59");
	bad("99999999999999999999 * * * *", "minute field \"99999999999999999999\": out of range 0-59");
	/* Lists and ranges. */
	norm_is("0,15,30,45 * * * *", "0-45/15 * * * *");
	norm_is("5,1,3 * * * *", "1-5/2 * * * *");
	norm_is("1,2 * * * *", "1,2 * * * *");
	norm_is("1-5 * * * *", "1-5 * * * *");
	norm_is("1-3,7,9-12 * * * *", "1-3,7,9-12 * * * *");
	norm_is("0-59 0-23 1-31 1-12 0-6", "0-59 0-23 1-31 1-12 0-6");
	norm_is("3-3 * * * *", "3 * * * *");
	bad("5-1 * * * *", "minute field \"5-1\": is a range whose start 5 is after its end 1");
	bad("1,60 * * * *", "minute field \"1,60\": 60 is out of range 0-59");
	bad("1-60 * * * *", "minute field \"1-60\": 60 is out of range 0-59");
	bad("1,,2 * * * *", "minute field \"1,,2\": an element of the list is empty");
	bad("1, * * * *", "an element of the list is empty");
	bad(",1 * * * *", "an element of the list is empty");
	bad("1- * * * *", "minute field \"1-\": a value is missing");
	bad("-1 * * * *", "minute field \"-1\": unexpected \"-\"");
	bad("1-2-3 * * * *", "minute field \"1-2-3\": unexpected \"-\"");
	bad("a * * * *", "minute field \"a\": is not a number (allowed: 0-59)");
	bad("*,5 * * * *", "\"*\" cannot be combined with other values");
	bad("5,* * * * *", "\"*\" cannot be combined with other values");
	bad("** * * * *", "minute field \"**\": unexpected \"*\"");
	bad("* * L * *", "day-of-month field \"L\": L, W, # and ? are not supported");
	bad("* * ? * *", "L, W, # and ? are not supported");
	bad("* * * * 5#3", "day-of-week field \"5#3\": unexpected \"#\"");
}

static void cron__parse_steps(void)
{
	norm_is("*/15 * * * *", "*/15 * * * *");
	norm_is("*/1 * * * *", "* * * * *");
	norm_is("*/05 * * * *", "*/5 * * * *");
	/* 1-30/3: 1, 4, ..., 28. */
	norm_is("1-30/3 * * * *", "1-28/3 * * * *");
	/* 5/10 is 5-59/10, as cronie reads it: 5, 15, ..., 55. */
	norm_is("5/10 * * * *", "5-55/10 * * * *");
	norm_is("0 5/6 * * *", "0 5-23/6 * * *");
	norm_is("0 0 2/10 * *", "0 0 2-22/10 * *");
	norm_is("0 0 1 2/5 *", "0 0 1 2-12/5 *");
	/* Day-of-week steps run over 0-7: 1/2 is 1, 3, 5, 7 = Sunday. */
	norm_is("0 0 * * 1/2", "0 0 * * 0,1,3,5");
	norm_is("0 0 * * */2", "0 0 * * */2");
	norm_is("*/20 * * * * *", "*/20 * * * * *");
	bad("*/0 * * * *", "minute field \"*/0\": step 0 is out of range 1-59");
	bad("*/60 * * * *", "minute field \"*/60\": step 60 is out of range 1-59");
	bad("* */24 * * *", "hour field \"*/24\": step 24 is out of range 1-23");
	bad("* * * */13 *", "month field \"*/13\": step 13 is out of range 1-12");
	bad("* * * * */8", "day-of-week field \"*/8\": step 8 is out of range 1-7");
	bad("*/ * * * *", "minute field \"*/\": a step (a number from 1 to 59) must follow \"/\"");
	bad("*/x * * * *", "a step (a number from 1 to 59) must follow \"/\"");
	bad("1-5/2/3 * * * *", "unexpected \"/\"");
	bad("*/99999999999 * * * *", "step 9999999... is out of range 1-59");
}

static void cron__parse_names(void)
{
	norm_is("0 0 * JAN-MAR *", "0 0 * 1-3 *");
	norm_is("0 0 * jan,Jun,DEC *", "0 0 * 1,6,12 *");
	norm_is("0 0 * * MON-FRI", "0 0 * * 1-5");
	norm_is("0 0 * * sun,Sat", "0 0 * * 0,6");
	norm_is("0 0 * * FRI-7", "0 0 * * 0,5,6");
	norm_is("0 0 * FEB/3 *", "0 0 * 2-11/3 *");
	norm_is("0 0 * * 0,7", "0 0 * * 0");
	bad("0 0 * FOO *", "month field \"FOO\": is not a month name (JAN..DEC or 1-12)");
	bad("0 0 * JANUARY *", "month field \"JANUARY\": is not a month name");
	bad("0 0 * * MONDAY", "day-of-week field \"MONDAY\": is not a day name (SUN..SAT or 0-7)");
	bad("0 0 * MON *", "month field \"MON\": is not a month name");
	bad("0 0 * * JAN", "day-of-week field \"JAN\": is not a day name");
	/* Names belong to month and day-of-week only. */
	bad("0 MON * * *", "hour field \"MON\": is not a number (allowed: 0-23)");
	bad("0 0 * FRI-MON *", "is not a month name");
	bad("0 0 * * FRI-MON", "day-of-week field \"FRI-MON\": is a range whose start 5 is after its end 1");
}

static void cron__parse_macros_and_shape(void)
{
	norm_is("@yearly", "0 0 1 1 *");
	norm_is("@annually", "0 0 1 1 *");
	norm_is("@monthly", "0 0 1 * *");
	norm_is("@weekly", "0 0 * * 0");
	norm_is("@daily", "0 0 * * *");
	norm_is("@midnight", "0 0 * * *");
	norm_is("@hourly", "0 * * * *");
	norm_is("@DAILY", "0 0 * * *");
	norm_is("  \t30  2 *\t* *  ", "30 2 * * *");
	bad("@reboot", "@reboot is not supported: a schedule shared by a fleet has no single boot");
	bad("@REBOOT", "@reboot is not supported");
	bad("@every 5m", "unknown macro \"@every\" (use @yearly, @annually, @monthly, @weekly, @daily, @midnight or @hourly)");
	bad("@daily 5", "\"@daily 5\": a macro stands alone");
	bad("", "cron expression is empty");
	bad("   ", "cron expression is empty");
	bad("* * * *", "expected 5 fields (minute hour day-of-month month day-of-week) or 6 (a seconds field first), got 4");
	bad("* * * * * * *", "got 7");
	bad("*", "got 1");
	bad("* * * * *\n", "control character (byte 0x0a at offset 9)");
	bad("* * \x01 * *", "control character");

	pgc_cron *c = parse_ok("*/10 * * * * *", "");
	T_ASSERT(pgc_cron_has_seconds(c));
	T_ASSERT_STR_EQ(pgc_cron_tz(c), "UTC");
	pgc_cron_free(c);
	c = parse_ok("* * * * *", NULL);
	T_ASSERT(!pgc_cron_has_seconds(c));
	pgc_cron_free(c);

	/* Arguments. */
	pgc_error err;
	T_ASSERT_INT_EQ(pgc_cron_parse(NULL, NULL, &c, &err), PGC_EUSAGE);
	T_ASSERT_CONTAINS(err.message, "pgc_cron_parse");
	T_ASSERT_INT_EQ(pgc_cron_parse("* * * * *", NULL, NULL, &err), PGC_EUSAGE);
	char big[PGC_CRON_EXPR_MAX + 2];
	memset(big, ' ', sizeof big - 1);
	big[sizeof big - 1] = '\0';
	T_ASSERT_INT_EQ(pgc_cron_parse(big, NULL, &c, &err), PGC_EUSAGE);
	T_ASSERT_CONTAINS(err.message, "longer than 1024 bytes");
	T_ASSERT(pgc_cron_normalized(NULL) == NULL);
	T_ASSERT(!pgc_cron_has_seconds(NULL));
	T_ASSERT(pgc_cron_tz(NULL) == NULL);
	pgc_cron_free(NULL);
	int64_t t;
	T_ASSERT_INT_EQ(pgc_cron_next(NULL, 0, &t, &err), PGC_EUSAGE);
	T_ASSERT_CONTAINS(err.message, "pgc_cron_next");
	c = parse_ok("* * * * *", NULL);
	T_ASSERT_INT_EQ(pgc_cron_next(c, 0, NULL, &err), PGC_EUSAGE);
	T_ASSERT_INT_EQ(pgc_cron_next(c, PGC_CRON_TIME_LAST + 1, &t, &err), PGC_EUSAGE);
	T_ASSERT_INT_EQ(pgc_cron_next(c, PGC_CRON_TIME_MIN - 1, &t, &err), PGC_EUSAGE);
	char buf[PGC_CRON_TIME_MAX];
	T_ASSERT_INT_EQ(pgc_cron_format_local(c, 0, buf, 10, &err), PGC_EUSAGE);
	T_ASSERT_CONTAINS(err.message, "pgc_cron_format_local");
	T_ASSERT_INT_EQ(pgc_cron_format_local(NULL, 0, buf, sizeof buf, &err), PGC_EUSAGE);
	T_ASSERT_STR_EQ(buf, "");
	T_ASSERT_INT_EQ(pgc_cron_format_local(c, PGC_CRON_TIME_LAST + 1, buf, sizeof buf, &err), PGC_EUSAGE);
	pgc_cron_local l;
	T_ASSERT_INT_EQ(pgc_cron_local_time(c, 0, NULL, &err), PGC_EUSAGE);
	T_ASSERT_INT_EQ(pgc_cron_local_time(NULL, 0, &l, &err), PGC_EUSAGE);
	T_ASSERT_INT_EQ(pgc_cron_parse_time(c, NULL, &t, &err), PGC_EUSAGE);
	T_ASSERT_INT_EQ(pgc_cron_parse_time(NULL, "@0", &t, &err), PGC_EUSAGE);
	T_ASSERT_INT_EQ(pgc_cron_parse_time(c, "@0", NULL, &err), PGC_EUSAGE);
	/* NULL err is fine. */
	T_ASSERT_INT_EQ(pgc_cron_next(c, 0, &t, NULL), PGC_OK);
	T_ASSERT_INT_EQ(t, 60);
	pgc_cron_free(c);
}

static void cron__dom_dow_rule(void)
{
	/* Both restricted: either. 2026-02-01 is a Sunday; Friday the 6th comes before the
	 * 13th, and the 13th (a Friday too) fires once. */
	FIRES("0 0 13 * 5", NULL, "2026-02-01T00:00:00Z", "2026-02-06T00:00:00Z", "2026-02-13T00:00:00Z",
	      "2026-02-20T00:00:00Z", "2026-02-27T00:00:00Z", "2026-03-06T00:00:00Z", "2026-03-13T00:00:00Z");
	/* "1 * MON": the 1st or a Monday. 2026-03-01 is a Sunday. */
	FIRES("0 0 1 * MON", NULL, "2026-02-27T00:00:00Z", "2026-03-01T00:00:00Z", "2026-03-02T00:00:00Z",
	      "2026-03-09T00:00:00Z");
	/* Day-of-month "*": day-of-week alone (Fridays). */
	FIRES("0 0 * * 5", NULL, "2026-02-01T00:00:00Z", "2026-02-06T00:00:00Z", "2026-02-13T00:00:00Z");
	/* Day-of-week "*": day-of-month alone. */
	FIRES("0 0 13 * *", NULL, "2026-02-01T00:00:00Z", "2026-02-13T00:00:00Z", "2026-03-13T00:00:00Z");
	/* A field that starts with "*" but restricts still means both: the 1st, 11th, 21st or
	 * 31st AND a Monday. Mondays among those in 2026: Jun 1 (2026-06-01 is a Monday), then
	 * 2026-05-11 comes first: 2026-05-11 is a Monday (Jun 1 minus 21 days). */
	FIRES("0 0 */10 * 1", NULL, "2026-01-01T00:00:00Z", "2026-05-11T00:00:00Z", "2026-06-01T00:00:00Z");
	/* And "*" on day-of-week with a step: Sundays (0 and 7) on the 1st. 2026-03-01 is a
	 * Sunday, so is 2026-02-01 (February has 28 days), then 2026-11-01 (245 days = 35 weeks
	 * after March 1). */
	FIRES("0 0 1 * */7", NULL, "2026-01-01T00:00:00Z", "2026-02-01T00:00:00Z", "2026-03-01T00:00:00Z",
	      "2026-11-01T00:00:00Z");
}

static void cron__never_fires(void)
{
	bad("0 0 30 2 *", "\"0 0 30 2 *\" can never fire: February has no day 30");
	bad("0 0 31 2 *", "February has no day 31");
	bad("0 0 31 4,6 *", "can never fire: no month of the month field \"4,6\" has a day of the day-of-month field \"31\"");
	bad("0 0 31 APR,JUN,SEP,NOV *", "can never fire");
	bad("0 0 30,31 2 */2", "can never fire");
	bad("0 0 0 30 2 *", "can never fire");
	/* Either day matches when both are restricted: Mondays in February fire. */
	pgc_cron *c = parse_ok("0 0 30 2 1", NULL);
	pgc_cron_free(c);
	c = parse_ok("0 0 29 2 *", NULL);
	pgc_cron_free(c);
	c = parse_ok("0 0 31 1-12/2 *", NULL);
	pgc_cron_free(c);
}

/* ---- next in UTC ---------------------------------------------------------------------------- */

static void cron__next_utc(void)
{
	/* Strictly after: from a fire time, the next one. */
	FIRES("*/15 * * * *", NULL, "2026-01-01T00:00:00Z", "2026-01-01T00:15:00Z", "2026-01-01T00:30:00Z",
	      "2026-01-01T00:45:00Z", "2026-01-01T01:00:00Z");
	FIRES("*/15 * * * *", NULL, "2026-01-01T00:14:59Z", "2026-01-01T00:15:00Z");
	FIRES("* * * * *", NULL, "2026-12-31T23:59:30Z", "2027-01-01T00:00:00Z", "2027-01-01T00:01:00Z");
	FIRES("30 2 * * *", NULL, "2026-01-01T02:30:00Z", "2026-01-02T02:30:00Z");
	FIRES("0 9-17/4 * * MON-FRI", NULL, "2026-01-02T16:00:00Z", "2026-01-02T17:00:00Z",
	      "2026-01-05T09:00:00Z", "2026-01-05T13:00:00Z");
	/* @weekly: Sunday midnight; 2026-01-04 is a Sunday. */
	FIRES("@weekly", NULL, "2026-01-01T00:00:00Z", "2026-01-04T00:00:00Z", "2026-01-11T00:00:00Z");
	FIRES("@yearly", NULL, "2026-06-01T00:00:00Z", "2027-01-01T00:00:00Z", "2028-01-01T00:00:00Z");
	FIRES("@monthly", NULL, "2026-12-15T00:00:00Z", "2027-01-01T00:00:00Z", "2027-02-01T00:00:00Z");
	/* Before 1970 too. */
	FIRES("0 12 * * *", NULL, "1969-12-31T00:00:00Z", "1969-12-31T12:00:00Z", "1970-01-01T12:00:00Z");
}

static void cron__next_month_ends(void)
{
	/* The 31st skips February, April, June, September, November. */
	FIRES("0 0 31 * *", NULL, "2026-01-31T00:00:00Z", "2026-03-31T00:00:00Z", "2026-05-31T00:00:00Z",
	      "2026-07-31T00:00:00Z", "2026-08-31T00:00:00Z", "2026-10-31T00:00:00Z", "2026-12-31T00:00:00Z");
	/* The 30th skips February only. */
	FIRES("0 0 30 * *", NULL, "2026-01-30T00:00:00Z", "2026-03-30T00:00:00Z", "2026-04-30T00:00:00Z");
	/* Last second of a month, and of a year. */
	FIRES("59 59 23 31 12 *", NULL, "2026-06-01T00:00:00Z", "2026-12-31T23:59:59Z", "2027-12-31T23:59:59Z");
	FIRES("0 0 28-31 2 *", NULL, "2027-02-27T00:00:00Z", "2027-02-28T00:00:00Z", "2028-02-28T00:00:00Z",
	      "2028-02-29T00:00:00Z", "2029-02-28T00:00:00Z");
}

static void cron__next_leap_days(void)
{
	/* Feb 29: 2028, 2032, ... 2096, then 2104: 2100 is not a leap year (divisible by 100, not
	 * by 400), and 2000 was (divisible by 400). */
	FIRES("0 0 29 2 *", NULL, "2026-01-01T00:00:00Z", "2028-02-29T00:00:00Z", "2032-02-29T00:00:00Z");
	FIRES("0 0 29 2 *", NULL, "2096-02-29T00:00:00Z", "2104-02-29T00:00:00Z");
	FIRES("0 0 29 2 *", NULL, "1999-01-01T00:00:00Z", "2000-02-29T00:00:00Z", "2004-02-29T00:00:00Z");
	/* Feb 29 that is also a Sunday: day-of-week "*\/7" (0 and 7) starts with "*", so both
	 * days must match. The weekday of Feb 29 moves 5 days on per 4 leap years (1461 days =
	 * 208 weeks + 5) within a century: 2032 Sun, 2036 Fri, 2040 Wed, 2044 Mon, 2048 Sat,
	 * 2052 Thu, 2056 Tue, 2060 Sun, and so 2088 Sun, 2092 Fri, 2096 Wed. Across 2100, which
	 * is no leap year, 2104 is 2921 days (417 weeks + 2) after 2096: Fri; then 2108 Wed,
	 * 2112 Mon, 2116 Sat, 2120 Thu, 2124 Tue, 2128 Sun: a 40-year gap. */
	FIRES("0 0 29 2 */7", NULL, "2026-01-01T00:00:00Z", "2032-02-29T00:00:00Z", "2060-02-29T00:00:00Z",
	      "2088-02-29T00:00:00Z", "2128-02-29T00:00:00Z", "2156-02-29T00:00:00Z");
	/* With both restricted it is either: Feb 29, or any Sunday of February. 2026-02-01 is a
	 * Sunday; in 2028 the 27th is a Sunday and the 29th a Tuesday. */
	FIRES("0 0 29 2 0", NULL, "2026-01-01T00:00:00Z", "2026-02-01T00:00:00Z", "2026-02-08T00:00:00Z");
	FIRES("0 0 29 2 0", NULL, "2028-02-26T00:00:00Z", "2028-02-27T00:00:00Z", "2028-02-29T00:00:00Z",
	      "2029-02-04T00:00:00Z");
}

static void cron__next_bounded(void)
{
	/* The year 10000 ends the search; the last Feb 29 before it is 9996's. */
	pgc_cron *c = parse_ok("0 0 29 2 *", NULL);
	int64_t t;
	pgc_error err;
	T_ASSERT_INT_EQ(pgc_cron_next(c, utc("9990-01-01T00:00:00Z"), &t, &err), PGC_OK);
	T_ASSERT_INT_EQ(t, utc("9992-02-29T00:00:00Z"));
	T_ASSERT_INT_EQ(pgc_cron_next(c, utc("9996-02-29T00:00:00Z"), &t, &err), PGC_ENOTFOUND);
	T_ASSERT_CONTAINS(err.message, "before the year 10000");
	T_ASSERT_INT_EQ(pgc_cron_next(c, PGC_CRON_TIME_LAST, &t, &err), PGC_ENOTFOUND);
	pgc_cron_free(c);
	c = parse_ok("59 59 23 31 12 *", NULL);
	T_ASSERT_INT_EQ(pgc_cron_next(c, PGC_CRON_TIME_LAST - 1, &t, &err), PGC_OK);
	T_ASSERT_INT_EQ(t, PGC_CRON_TIME_LAST);
	pgc_cron_free(c);
	c = parse_ok("0 0 1 1 *", NULL);
	T_ASSERT_INT_EQ(pgc_cron_next(c, PGC_CRON_TIME_MIN, &t, &err), PGC_OK);
	T_ASSERT_INT_EQ(t, utc("0002-01-01T00:00:00Z"));
	pgc_cron_free(c);
	/* A schedule whose every time DST skips (02:xx on the last Sunday of March in Berlin,
	 * both days required) finds nothing within 400 years, and says so. */
	c = parse_ok("*/30 2 25-31 3 */7", "Europe/Berlin");
	T_ASSERT_INT_EQ(pgc_cron_next(c, utc("2026-01-01T00:00:00Z"), &t, &err), PGC_ENOTFOUND);
	T_ASSERT_CONTAINS(err.message, "does not fire in the 400 years after 2026-01-01T00:00:00Z in Europe/Berlin");
	pgc_cron_free(c);
}

/* ---- DST ------------------------------------------------------------------------------------ */

/* Europe/Berlin, EU rule: CET (+01) to CEST (+02) on the last Sunday of March at 01:00 UTC
 * (02:00 local jumps to 03:00), back on the last Sunday of October at 01:00 UTC (03:00 local
 * goes back to 02:00). 2026: March 29 and October 25. */
static void cron__dst_berlin_spring(void)
{
	const char *z = "Europe/Berlin";
	/* 02:30 does not exist on March 29: fires at 03:00 CEST = 01:00Z; the day after at 02:30
	 * CEST = 00:30Z. Before: 02:30 CET = 01:30Z. */
	FIRES("30 2 * * *", z, "2026-03-27T12:00:00Z", "2026-03-28T01:30:00Z", "2026-03-29T01:00:00Z",
	      "2026-03-30T00:30:00Z");
	FIRES("0 2 * * *", z, "2026-03-28T12:00:00Z", "2026-03-29T01:00:00Z", "2026-03-30T00:00:00Z");
	/* 03:00 exists: the same instant, once. */
	FIRES("0 3 * * *", z, "2026-03-28T12:00:00Z", "2026-03-29T01:00:00Z", "2026-03-30T01:00:00Z");
	/* Two times in the gap (02:15, 02:45) fire once, at 03:00 CEST; then 03:15 and 03:45
	 * CEST; then March 30 02:15 CEST = 00:15Z. */
	FIRES("15,45 2,3 * * *", z, "2026-03-29T00:00:00Z", "2026-03-29T01:00:00Z", "2026-03-29T01:15:00Z",
	      "2026-03-29T01:45:00Z", "2026-03-30T00:15:00Z");
	/* Wildcards: the skipped wall times do not fire. 01:30 CET = 00:30Z, then 03:00 CEST. */
	FIRES("*/30 * * * *", z, "2026-03-29T00:00:00Z", "2026-03-29T00:30:00Z", "2026-03-29T01:00:00Z",
	      "2026-03-29T01:30:00Z");
	FIRES("0 * * * *", z, "2026-03-28T23:30:00Z", "2026-03-29T00:00:00Z", "2026-03-29T01:00:00Z",
	      "2026-03-29T02:00:00Z");
	/* Minute wildcard, hour fixed: 02:xx is skipped on March 29, so the next is March 30
	 * 02:00 CEST = 00:00Z. */
	FIRES("* 2 * * *", z, "2026-03-28T12:00:00Z", "2026-03-30T00:00:00Z", "2026-03-30T00:01:00Z");
	FIRES("*/20 2 * * *", z, "2026-03-28T01:30:00Z", "2026-03-28T01:40:00Z", "2026-03-30T00:00:00Z");
	/* The local times print with the offset in force. */
	local_is(z, "2026-03-29T00:59:59Z", "2026-03-29T01:59:59+01:00");
	local_is(z, "2026-03-29T01:00:00Z", "2026-03-29T03:00:00+02:00");
}

static void cron__dst_berlin_autumn(void)
{
	const char *z = "Europe/Berlin";
	/* 02:30 happens twice on October 25: 02:30 CEST = 00:30Z and 02:30 CET = 01:30Z; a
	 * fixed-time schedule fires at the first only. Then October 26 02:30 CET = 01:30Z. */
	FIRES("30 2 * * *", z, "2026-10-24T12:00:00Z", "2026-10-25T00:30:00Z", "2026-10-26T01:30:00Z");
	/* From inside the second pass (02:10 CET = 01:10Z), the repeated 02:30 does not fire. */
	FIRES("30 2 * * *", z, "2026-10-25T01:10:00Z", "2026-10-26T01:30:00Z");
	/* From between the two passes (02:40 CEST = 00:40Z) neither. */
	FIRES("30 2 * * *", z, "2026-10-25T00:40:00Z", "2026-10-26T01:30:00Z");
	/* Wildcards fire in both passes: 02:00, 02:30 CEST, 02:00, 02:30 CET. */
	FIRES("*/30 2 * * *", z, "2026-10-24T12:00:00Z", "2026-10-25T00:00:00Z", "2026-10-25T00:30:00Z",
	      "2026-10-25T01:00:00Z", "2026-10-25T01:30:00Z", "2026-10-26T01:00:00Z");
	FIRES("0 * * * *", z, "2026-10-24T23:30:00Z", "2026-10-25T00:00:00Z", "2026-10-25T01:00:00Z",
	      "2026-10-25T02:00:00Z");
	/* @daily is fixed-time; @hourly is not. */
	/* Midnight of October 25 is still CEST (22:00Z), of October 26 CET (23:00Z). */
	FIRES("@daily", z, "2026-10-24T12:00:00Z", "2026-10-24T22:00:00Z", "2026-10-25T23:00:00Z");
	FIRES("@hourly", z, "2026-10-25T00:30:00Z", "2026-10-25T01:00:00Z", "2026-10-25T02:00:00Z");
	local_is(z, "2026-10-25T00:30:00Z", "2026-10-25T02:30:00+02:00");
	local_is(z, "2026-10-25T01:30:00Z", "2026-10-25T02:30:00+01:00");
}

/* America/New_York: EST (-05) to EDT (-04) on the second Sunday of March at 02:00 local
 * (07:00Z), back on the first Sunday of November at 02:00 EDT (06:00Z). 2026: March 8 and
 * November 1. */
static void cron__dst_new_york(void)
{
	const char *z = "America/New_York";
	FIRES("30 2 * * *", z, "2026-03-07T12:00:00Z", "2026-03-08T07:00:00Z", "2026-03-09T06:30:00Z");
	FIRES("*/30 * * * *", z, "2026-03-08T06:15:00Z", "2026-03-08T06:30:00Z", "2026-03-08T07:00:00Z",
	      "2026-03-08T07:30:00Z");
	/* 01:30 twice on November 1: EDT 05:30Z, EST 06:30Z. */
	FIRES("30 1 * * *", z, "2026-10-31T12:00:00Z", "2026-11-01T05:30:00Z", "2026-11-02T06:30:00Z");
	FIRES("0,30 * * * *", z, "2026-11-01T04:45:00Z", "2026-11-01T05:00:00Z", "2026-11-01T05:30:00Z",
	      "2026-11-01T06:00:00Z", "2026-11-01T06:30:00Z", "2026-11-01T07:00:00Z");
	local_is(z, "2026-11-01T05:30:00Z", "2026-11-01T01:30:00-04:00");
	local_is(z, "2026-11-01T06:30:00Z", "2026-11-01T01:30:00-05:00");
	/* Far beyond the table (2037): the footer's rule. 2090: March 12 and November 5 are the
	 * second and first Sundays (2090-01-01 is a Sunday: 2090-03-12 and 2090-11-05 are too). */
	FIRES("30 2 * * *", z, "2090-03-11T12:00:00Z", "2090-03-12T07:00:00Z", "2090-03-13T06:30:00Z");
	FIRES("30 1 * * *", z, "2090-11-04T12:00:00Z", "2090-11-05T05:30:00Z", "2090-11-06T06:30:00Z");
}

/* Australia/Lord_Howe: +10:30 standard, +11 in summer, a 30-minute shift. From its tzdata
 * (2026): summer ends on the first Sunday of April at 02:00 +11 (April 4 15:00Z; the clock
 * goes back to 01:30), and starts on the first Sunday of October at 02:00 +10:30 (October 3
 * 15:30Z; the clock jumps to 02:30). */
static void cron__dst_lord_howe(void)
{
	const char *z = "Australia/Lord_Howe";
	/* 02:15 is skipped on October 4: fires at 02:30 +11 = 15:30Z. The day before: 02:15 +10:30
	 * = 15:45Z on October 2; the day after 02:15 +11 = 15:15Z on October 4. */
	FIRES("15 2 * * *", z, "2026-10-02T00:00:00Z", "2026-10-02T15:45:00Z", "2026-10-03T15:30:00Z",
	      "2026-10-04T15:15:00Z");
	/* Wildcard: 01:30 (15:00Z), 01:45 (15:15Z), then 02:30 +11 (15:30Z): 02:00 and 02:15 skipped. */
	FIRES("*/15 * * * *", z, "2026-10-03T14:50:00Z", "2026-10-03T15:00:00Z", "2026-10-03T15:15:00Z",
	      "2026-10-03T15:30:00Z", "2026-10-03T15:45:00Z");
	/* 01:45 twice on April 5: +11 14:45Z, +10:30 15:15Z. */
	FIRES("45 1 * * *", z, "2026-04-04T00:00:00Z", "2026-04-04T14:45:00Z", "2026-04-05T15:15:00Z");
	FIRES("45 * * * *", z, "2026-04-04T14:00:00Z", "2026-04-04T14:45:00Z", "2026-04-04T15:15:00Z",
	      "2026-04-04T16:15:00Z");
	local_is(z, "2026-04-04T14:59:59Z", "2026-04-05T01:59:59+11:00");
	local_is(z, "2026-04-04T15:00:00Z", "2026-04-05T01:30:00+10:30");
}

static void cron__dst_seconds(void)
{
	const char *z = "Europe/Berlin";
	/* Fixed-time with seconds: 02:30:00, :20, :40 are all skipped on March 29 and fire once,
	 * at 03:00:00 CEST (01:00Z); then March 30 02:30:00 CEST = 00:30:00Z. */
	FIRES("*/20 30 2 * * *", z, "2026-03-28T12:00:00Z", "2026-03-29T01:00:00Z", "2026-03-30T00:30:00Z",
	      "2026-03-30T00:30:20Z");
	/* In the repeated hour, the first pass only. */
	FIRES("10 30 2 * * *", z, "2026-10-24T12:00:00Z", "2026-10-25T00:30:10Z", "2026-10-26T01:30:10Z");
	/* Wildcard hour with seconds: across the gap, 01:59:30 CET (00:59:30Z), then 03:00:00 CEST. */
	FIRES("0,30 * * * * *", z, "2026-03-29T00:59:15Z", "2026-03-29T00:59:30Z", "2026-03-29T01:00:00Z",
	      "2026-03-29T01:00:30Z");
	/* And both passes of the repeated hour. */
	FIRES("0 0 2 * * *", z, "2026-10-24T12:00:00Z", "2026-10-25T00:00:00Z", "2026-10-26T01:00:00Z");
	FIRES("0 0 * * * *", z, "2026-10-24T23:30:00Z", "2026-10-25T00:00:00Z", "2026-10-25T01:00:00Z",
	      "2026-10-25T02:00:00Z");
}

/* ---- zones and times ------------------------------------------------------------------------ */

static void cron__zones(void)
{
	pgc_cron *c;
	pgc_error err;
	const struct {
		const char *tz, *want;
	} refused[] = {
		{ "Europe/Berln", "unknown time zone \"Europe/Berln\" (no such zone in " },
		{ "/etc/passwd", "give a zone name such as Europe/Berlin, not a path" },
		{ "../../etc/passwd", "\"..\" parts are not allowed" },
		{ "Europe/../../../etc/passwd", "\"..\" parts are not allowed" },
		{ "Europe//Berlin", "empty, \".\" and \"..\" parts" },
		{ "Europe/", "empty" },
		{ "./UTC", "\".\"" },
		{ "Europe/Berlin;rm", "a zone name has only letters, digits and / _ + - ." },
		{ "Europe Berlin", "only letters" },
		{ "Europe/\xc3\xa9\n", "time zone \"Europe/???\": a zone name has only letters" },
		{ "Europe", "is a directory of zones" },
		{ "zone.tab", "is not a usable zone file: not TZif data" },
		{ "CET-1CEST,M3.5.0,M10.5.0/3", "only letters" },
	};
	for (size_t i = 0; i < sizeof refused / sizeof refused[0]; i++) {
		c = (pgc_cron *)&c;
		int rc = pgc_cron_parse("* * * * *", refused[i].tz, &c, &err);
		if (rc != PGC_EUSAGE || c != NULL || strstr(err.message, refused[i].want) == NULL)
			T_FAIL("zone \"%s\": rc %d, message \"%s\", expected \"%s\"", refused[i].tz, rc, err.message,
			       refused[i].want);
	}
	char longname[PGC_CRON_TZ_MAX + 2];
	memset(longname, 'a', sizeof longname - 1);
	longname[sizeof longname - 1] = '\0';
	T_ASSERT_INT_EQ(pgc_cron_parse("* * * * *", longname, &c, &err), PGC_EUSAGE);
	T_ASSERT_CONTAINS(err.message, "longer than 255 bytes");
	/* The right/ zones count leap seconds, when installed. */
	if (pgc_cron_parse("* * * * *", "right/UTC", &c, &err) == PGC_OK)
		T_FAIL("right/UTC accepted");
	/* UTC is built in; Etc/UTC is read. */
	c = parse_ok("* * * * *", "UTC");
	T_ASSERT_STR_EQ(pgc_cron_tz(c), "UTC");
	pgc_cron_free(c);
	c = parse_ok("* * * * *", "Etc/UTC");
	T_ASSERT_STR_EQ(pgc_cron_tz(c), "Etc/UTC");
	pgc_cron_free(c);
	/* Whole and partial offsets, and a zone without DST. */
	local_is("Asia/Kolkata", "2026-06-01T00:00:00Z", "2026-06-01T05:30:00+05:30");
	local_is("Asia/Kathmandu", "2026-06-01T00:00:00Z", "2026-06-01T05:45:00+05:45");
	local_is("America/St_Johns", "2026-01-01T12:00:00Z", "2026-01-01T08:30:00-03:30");
	local_is("UTC", "2026-01-01T12:00:00Z", "2026-01-01T12:00:00+00:00");
	/* A local mean time before standard time: Berlin's was +0:53:28 until 1893. */
	local_is("Europe/Berlin", "1890-01-01T00:00:00Z", "1890-01-01T00:53:28+00:53:28");
	/* The abbreviation and DST flag. */
	c = parse_ok("* * * * *", "Europe/Berlin");
	pgc_cron_local l;
	T_ASSERT_INT_EQ(pgc_cron_local_time(c, utc("2026-07-01T12:00:00Z"), &l, &err), PGC_OK);
	T_ASSERT_STR_EQ(l.abbrev, "CEST");
	T_ASSERT(l.dst);
	T_ASSERT_INT_EQ(l.utoff_s, 7200);
	T_ASSERT_INT_EQ(l.hour, 14);
	T_ASSERT_INT_EQ(l.weekday, 3); /* 2026-07-01 is a Wednesday */
	T_ASSERT_INT_EQ(pgc_cron_local_time(c, utc("2026-01-01T12:00:00Z"), &l, &err), PGC_OK);
	T_ASSERT_STR_EQ(l.abbrev, "CET");
	T_ASSERT(!l.dst);
	pgc_cron_free(c);
}

static void cron__tz_cache(void)
{
	/* The same zone twice shares its rules; a missing TZDIR entry is unknown. */
	pgc__tz *a, *b;
	pgc_error err;
	T_ASSERT_INT_EQ(pgc__tz_get("Europe/Berlin", &a, &err), PGC_OK);
	T_ASSERT_INT_EQ(pgc__tz_get("Europe/Berlin", &b, &err), PGC_OK);
	T_ASSERT(a == b);
	pgc__tz_release(a);
	pgc__tz_release(b);
	/* A zone file that changes is read again; schedules made before keep theirs. */
	char dir[] = "/tmp/pgcoord-tz-XXXXXX";
	T_ASSERT(mkdtemp(dir) != NULL);
	char path[256], cmd[600];
	snprintf(path, sizeof path, "%s/Test", dir);
	snprintf(cmd, sizeof cmd, "cp /usr/share/zoneinfo/Asia/Tokyo %s", path);
	T_ASSERT_INT_EQ(system(cmd), 0);
	setenv("TZDIR", dir, 1);
	pgc_cron *c1 = parse_ok("0 12 * * *", "Test");
	snprintf(cmd, sizeof cmd, "sleep 0.01; cp /usr/share/zoneinfo/Asia/Kolkata %s.new && mv %s.new %s", path,
	         path, path);
	T_ASSERT_INT_EQ(system(cmd), 0);
	pgc_cron *c2 = parse_ok("0 12 * * *", "Test");
	int64_t t1, t2;
	T_ASSERT_INT_EQ(pgc_cron_next(c1, utc("2026-01-01T00:00:00Z"), &t1, &err), PGC_OK);
	T_ASSERT_INT_EQ(pgc_cron_next(c2, utc("2026-01-01T00:00:00Z"), &t2, &err), PGC_OK);
	T_ASSERT_INT_EQ(t1, utc("2026-01-01T03:00:00Z")); /* Tokyo +09 */
	T_ASSERT_INT_EQ(t2, utc("2026-01-01T06:30:00Z")); /* Kolkata +05:30 */
	pgc_cron_free(c1);
	pgc_cron_free(c2);
	/* Not TZif, and truncated TZif. */
	FILE *f = fopen(path, "w");
	T_ASSERT(f != NULL);
	fputs("TZif2 but nothing else", f);
	fclose(f);
	pgc_cron *c;
	T_ASSERT_INT_EQ(pgc_cron_parse("* * * * *", "Test", &c, &err), PGC_EUSAGE);
	T_ASSERT_CONTAINS(err.message, "is not a usable zone file");
	unsetenv("TZDIR");
	snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
	T_ASSERT_INT_EQ(system(cmd), 0);
}

static void cron__posix_rules(void)
{
	/* The footer's rules alone: the EU's (last Sunday of March at 01:00 UTC both ways). */
	pgc__tz *z;
	pgc_error err;
	T_ASSERT_INT_EQ(pgc__tz_from_posix("CET-1CEST,M3.5.0,M10.5.0/3", &z, &err), PGC_OK);
	pgc__tz_info in;
	pgc__tz_lookup(z, utc("2026-03-29T00:59:59Z"), &in);
	T_ASSERT_INT_EQ(in.utoff, 3600);
	T_ASSERT_INT_EQ(in.next, utc("2026-03-29T01:00:00Z"));
	pgc__tz_lookup(z, utc("2026-03-29T01:00:00Z"), &in);
	T_ASSERT_INT_EQ(in.utoff, 7200);
	T_ASSERT(in.isdst);
	T_ASSERT_STR_EQ(in.abbr, "CEST");
	T_ASSERT_INT_EQ(in.start, utc("2026-03-29T01:00:00Z"));
	T_ASSERT_INT_EQ(in.next, utc("2026-10-25T01:00:00Z"));
	/* 2400: March 26 and October 29 are the last Sundays (2400-01-01 is a Saturday). */
	pgc__tz_lookup(z, utc("2400-06-01T00:00:00Z"), &in);
	T_ASSERT_INT_EQ(in.start, utc("2400-03-26T01:00:00Z"));
	T_ASSERT_INT_EQ(in.next, utc("2400-10-29T01:00:00Z"));
	pgc__tz_release(z);
	/* The southern hemisphere: DST spans the new year. Lord Howe: <+1030>-10:30<+11>-11,
	 * M10.1.0,M4.1.0 (half an hour of DST, ending at 02:00 DST). */
	T_ASSERT_INT_EQ(pgc__tz_from_posix("<+1030>-10:30<+11>-11,M10.1.0,M4.1.0", &z, &err), PGC_OK);
	pgc__tz_lookup(z, utc("2027-01-01T00:00:00Z"), &in);
	T_ASSERT_INT_EQ(in.utoff, 39600);
	T_ASSERT_INT_EQ(in.start, utc("2026-10-03T15:30:00Z"));
	T_ASSERT_INT_EQ(in.next, utc("2027-04-03T15:00:00Z"));
	T_ASSERT_STR_EQ(in.abbr, "+11");
	pgc__tz_release(z);
	/* Julian days, day numbers, times past 24h and negative ones (RFC 8536 extensions). */
	T_ASSERT_INT_EQ(pgc__tz_from_posix("XXX3YYY,J60/-1,300/26:30", &z, &err), PGC_OK);
	/* J60 is March 1 even in a leap year; -1:00 local standard time: Feb 29 23:00 -03 =
	 * Mar 1 02:00Z (2028). Day 300 (0-based, counting Feb 29) of 2028 is October 27; 26:30
	 * DST (-02) is Oct 28 02:30 -02 = 04:30Z. */
	pgc__tz_lookup(z, utc("2028-06-01T00:00:00Z"), &in);
	T_ASSERT_INT_EQ(in.start, utc("2028-03-01T02:00:00Z"));
	T_ASSERT_INT_EQ(in.next, utc("2028-10-28T04:30:00Z"));
	T_ASSERT_INT_EQ(in.utoff, -7200);
	pgc__tz_release(z);
	/* DST all year: "EST5EDT,0/0,J365/25" stays in EDT across the new year. */
	T_ASSERT_INT_EQ(pgc__tz_from_posix("EST5EDT,0/0,J365/25", &z, &err), PGC_OK);
	pgc__tz_lookup(z, utc("2027-01-01T04:59:59Z"), &in);
	T_ASSERT_INT_EQ(in.utoff, -14400);
	pgc__tz_lookup(z, utc("2027-01-01T05:00:00Z"), &in);
	T_ASSERT_INT_EQ(in.utoff, -14400);
	pgc__tz_release(z);
	/* Malformed. */
	const char *badrules[] = { "", "CE", "CET", "CET-1CEST,M3.5.0", "CET-1CEST,M13.5.0,M10.5.0",
	                           "CET-1CEST,M3.6.0,M10.5.0", "CET-25", "<+10", "CET-1CEST,J0,J1",
	                           "CET-1CEST,M3.5.0/168,M10.5.0", "CET-1CEST,M3.5.0,M10.5.0x" };
	for (size_t i = 0; i < sizeof badrules / sizeof badrules[0]; i++) {
		if (pgc__tz_from_posix(badrules[i], &z, &err) != PGC_EUSAGE)
			T_FAIL("POSIX TZ \"%s\" accepted", badrules[i]);
	}
}

static void cron__local_to_utc(void)
{
	pgc__tz *z;
	pgc_error err;
	T_ASSERT_INT_EQ(pgc__tz_get("Europe/Berlin", &z, &err), PGC_OK);
	int64_t out[2], gap_end;
	/* local seconds of 2026-03-29 02:30 on the wall clock */
	int64_t l = utc("2026-03-29T02:30:00Z");
	T_ASSERT_INT_EQ(pgc__tz_from_local(z, l, out, &gap_end), 0);
	T_ASSERT_INT_EQ(gap_end, utc("2026-03-29T01:00:00Z"));
	l = utc("2026-10-25T02:30:00Z");
	T_ASSERT_INT_EQ(pgc__tz_from_local(z, l, out, &gap_end), 2);
	T_ASSERT_INT_EQ(out[0], utc("2026-10-25T00:30:00Z"));
	T_ASSERT_INT_EQ(out[1], utc("2026-10-25T01:30:00Z"));
	l = utc("2026-07-01T12:00:00Z");
	T_ASSERT_INT_EQ(pgc__tz_from_local(z, l, out, &gap_end), 1);
	T_ASSERT_INT_EQ(out[0], utc("2026-07-01T10:00:00Z"));
	pgc__tz_release(z);
}

static void cron__parse_time(void)
{
	pgc_cron *c = parse_ok("* * * * *", "Europe/Berlin");
	const struct {
		const char *in, *want;
	} ok[] = {
		{ "2026-03-29T01:30:00Z", "2026-03-29T01:30:00Z" },
		{ "2026-03-29t01:30:00z", "2026-03-29T01:30:00Z" },
		{ "2026-03-29T03:30:00+02:00", "2026-03-29T01:30:00Z" },
		{ "2026-03-29 03:30+0200", "2026-03-29T01:30:00Z" },
		{ "2026-03-29T03:30:00.999+02", "2026-03-29T01:30:00Z" },
		{ "2026-03-29T03:30:00 +02:00", "2026-03-29T01:30:00Z" },
		{ "2026-03-28T20:30:00-05:00", "2026-03-29T01:30:00Z" },
		/* Local times in Berlin: winter, summer, the gap (its end), the repeat (its first). */
		{ "2026-01-15 12:00", "2026-01-15T11:00:00Z" },
		{ "2026-07-15T12:00:30", "2026-07-15T10:00:30Z" },
		{ "2026-07-15", "2026-07-14T22:00:00Z" },
		{ "2026-03-29 02:30", "2026-03-29T01:00:00Z" },
		{ "2026-10-25 02:30", "2026-10-25T00:30:00Z" },
		{ "@0", "1970-01-01T00:00:00Z" },
		{ "@1774746000", "2026-03-29T01:00:00Z" },
		{ "@-86400", "1969-12-31T00:00:00Z" },
		{ "2028-02-29 00:00", "2028-02-28T23:00:00Z" },
	};
	for (size_t i = 0; i < sizeof ok / sizeof ok[0]; i++) {
		int64_t t;
		pgc_error err;
		if (pgc_cron_parse_time(c, ok[i].in, &t, &err) != PGC_OK)
			T_FAIL("parse_time \"%s\": %s", ok[i].in, err.message);
		if (t != utc(ok[i].want))
			T_FAIL("parse_time \"%s\" = %" PRId64 ", expected %s", ok[i].in, t, ok[i].want);
	}
	const struct {
		const char *in, *want;
	} bad_times[] = {
		{ "", "expected YYYY-MM-DD[THH:MM[:SS]] with an optional Z or +HH:MM, or @SECONDS" },
		{ "now", "expected YYYY-MM-DD" },
		{ "2026-3-29", "expected YYYY-MM-DD" },
		{ "2026-03-29T25:00", "no such time of day" },
		{ "2026-03-29T12:60", "no such time of day" },
		{ "2026-03-29T23:59:60Z", "no such time of day" },
		{ "2027-02-29", "no such date" },
		{ "2026-13-01", "no such date" },
		{ "0000-01-01", "no such date" },
		{ "2026-03-29T12", "expected YYYY-MM-DD" },
		{ "2026-03-29T12:00+2", "the offset must be" },
		{ "2026-03-29T12:00+26:00", "offset out of range" },
		{ "2026-03-29T12:00Zjunk", "expected YYYY-MM-DD" },
		{ "@", "digits must follow \"@\"" },
		{ "@12x", "only digits may follow \"@\"" },
		{ "@99999999999999999999999", "out of range" },
		{ "@253402300800", "out of range" },
		{ "9999-12-31T23:59:59-01:00", "out of range" },
	};
	for (size_t i = 0; i < sizeof bad_times / sizeof bad_times[0]; i++) {
		int64_t t;
		pgc_error err;
		if (pgc_cron_parse_time(c, bad_times[i].in, &t, &err) != PGC_EUSAGE)
			T_FAIL("parse_time \"%s\" accepted", bad_times[i].in);
		if (strstr(err.message, bad_times[i].want) == NULL)
			T_FAIL("parse_time \"%s\": \"%s\" lacks \"%s\"", bad_times[i].in, err.message, bad_times[i].want);
	}
	pgc_cron_free(c);
}

/* Many threads on one schedule and on zones loaded at once: the same answers (run under
 * make tsan for the races). */
static void *thread_main(void *arg)
{
	int64_t *out = arg;
	const char *zones[] = { "Europe/Berlin", "America/New_York", "Australia/Lord_Howe", "Asia/Tokyo" };
	for (int i = 0; i < 200; i++) {
		pgc_cron *c;
		pgc_error err;
		if (pgc_cron_parse("*/7 1-5 * * *", zones[i % 4], &c, &err) != PGC_OK)
			return NULL;
		int64_t t = 1774000000;
		for (int k = 0; k < 20; k++)
			if (pgc_cron_next(c, t, &t, &err) != PGC_OK)
				return NULL;
		out[i % 4] = t;
		pgc_cron_free(c);
	}
	return NULL;
}

static void cron__threads(void)
{
	pthread_t th[8];
	int64_t res[8][4];
	memset(res, 0, sizeof res);
	for (int i = 0; i < 8; i++)
		T_ASSERT_INT_EQ(pthread_create(&th[i], NULL, thread_main, res[i]), 0);
	for (int i = 0; i < 8; i++)
		pthread_join(th[i], NULL);
	for (int i = 0; i < 8; i++)
		for (int k = 0; k < 4; k++) {
			T_ASSERT(res[i][k] != 0);
			T_ASSERT_INT_EQ(res[i][k], res[0][k]);
		}
}

int main(int argc, char **argv)
{
	static const t_case cases[] = {
		{ "cron__parse_fields", cron__parse_fields },
		{ "cron__parse_steps", cron__parse_steps },
		{ "cron__parse_names", cron__parse_names },
		{ "cron__parse_macros_and_shape", cron__parse_macros_and_shape },
		{ "cron__dom_dow_rule", cron__dom_dow_rule },
		{ "cron__never_fires", cron__never_fires },
		{ "cron__next_utc", cron__next_utc },
		{ "cron__next_month_ends", cron__next_month_ends },
		{ "cron__next_leap_days", cron__next_leap_days },
		{ "cron__next_bounded", cron__next_bounded },
		{ "cron__dst_berlin_spring", cron__dst_berlin_spring },
		{ "cron__dst_berlin_autumn", cron__dst_berlin_autumn },
		{ "cron__dst_new_york", cron__dst_new_york },
		{ "cron__dst_lord_howe", cron__dst_lord_howe },
		{ "cron__dst_seconds", cron__dst_seconds },
		{ "cron__zones", cron__zones },
		{ "cron__tz_cache", cron__tz_cache },
		{ "cron__posix_rules", cron__posix_rules },
		{ "cron__local_to_utc", cron__local_to_utc },
		{ "cron__parse_time", cron__parse_time },
		{ "cron__threads", cron__threads },
		{ NULL, NULL },
	};
	return t_main(argc, argv, cases);
}

/* test_dsn.c - DSN resolution order, password masking and duration parsing */
#include "conn/conn_int.h"
#include "../t.h"

static void dsn__resolve_order(void)
{
	pgc_dsn_source src;
	setenv("PGCOORD_DSN", "host=from-pgcoord", 1);
	setenv("DATABASE_URL", "postgres://from-database-url/db", 1);
	T_ASSERT_STR_EQ(pgc_dsn_resolve("host=explicit", &src), "host=explicit");
	T_ASSERT_INT_EQ(src, PGC_DSN_ARGUMENT);
	T_ASSERT_STR_EQ(pgc_dsn_resolve(NULL, &src), "host=from-pgcoord");
	T_ASSERT_INT_EQ(src, PGC_DSN_PGCOORD_DSN);
	T_ASSERT_STR_EQ(pgc_dsn_resolve("", &src), "host=from-pgcoord");
	setenv("PGCOORD_DSN", "", 1);
	T_ASSERT_STR_EQ(pgc_dsn_resolve(NULL, &src), "postgres://from-database-url/db");
	T_ASSERT_INT_EQ(src, PGC_DSN_DATABASE_URL);
	unsetenv("PGCOORD_DSN");
	unsetenv("DATABASE_URL");
	T_ASSERT_STR_EQ(pgc_dsn_resolve(NULL, &src), "");
	T_ASSERT_INT_EQ(src, PGC_DSN_LIBPQ_ENV);
	T_ASSERT_STR_EQ(pgc_dsn_resolve(NULL, NULL), "");
}

static void check_mask(const char *in, const char *want, const char *secret)
{
	char *got = pgc_dsn_mask(in);
	T_ASSERT(got != NULL);
	if (strcmp(got, want) != 0)
		T_FAIL("mask(%s) = \"%s\", expected \"%s\"", in, got, want);
	if (secret != NULL)
		T_ASSERT_NOT_CONTAINS(got, secret);
	pgc_free(got);
}

static void dsn__mask_uri(void)
{
	check_mask("postgresql://alice:s3cret@db.example.com:5432/app",
	           "postgresql://alice:****@db.example.com:5432/app", "s3cret");
	check_mask("postgres://alice@db/app", "postgres://alice@db/app", NULL);
	check_mask("postgres://db/app", "postgres://db/app", NULL);
	check_mask("postgresql://", "postgresql://", NULL);
	/* %-escapes, '@', '/' and ':' inside the password. */
	check_mask("postgresql://u:p%40ss%2Fw@h/db", "postgresql://u:****@h/db", "p%40ss");
	check_mask("postgresql://u:p@ss@h/db", "postgresql://u:****@h/db", "ss@");
	check_mask("postgresql://u:a/b:c@h:1/db", "postgresql://u:****@h:1/db", "a/b");
	check_mask("postgresql://u:x@h/db?sslmode=require&password=qq&application_name=a",
	           "postgresql://u:****@h/db?sslmode=require&password=****&application_name=a", "qq");
	check_mask("postgresql://h/db?password=abc", "postgresql://h/db?password=****", "abc");
	check_mask("postgresql://u:pw@h1:5432,h2:5433/db", "postgresql://u:****@h1:5432,h2:5433/db", "pw");
	/* A '?' inside the password (libpq takes it as part of the userinfo). */
	check_mask("postgresql://u:pa?ss@h/db", "postgresql://u:****@h/db", "ss");
	check_mask("postgresql://u:a/b?c@h/db", "postgresql://u:****@h/db", "a/b");
	/* An '@' in a query value before a password parameter. */
	check_mask("postgresql://h/db?password=a@b", "postgresql://h/db?password=****", "a@b");
	check_mask("postgresql://h:5/db?password=a@b", "postgresql://h:****", "@b");
	check_mask("postgresql://u:x?password=y@h/db", "postgresql://u:****", "y@");
}

static void dsn__mask_keyword(void)
{
	check_mask("host=h user=u password=s3cret dbname=d", "host=h user=u password=**** dbname=d", "s3cret");
	check_mask("password='with space' host=h", "password='****' host=h", "space");
	check_mask("password='it\\'s quoted' host=h", "password='****' host=h", "quoted");
	check_mask("password = spaced host=h", "password = **** host=h", "spaced");
	check_mask("PASSWORD=upper", "PASSWORD=****", "upper");
	check_mask("host=h password=back\\ slash", "host=h password=****", "slash");
	check_mask("host=h password=a@b%20c;d", "host=h password=****", "a@b");
	check_mask("host=h dbname=d", "host=h dbname=d", NULL);
	check_mask("", "", NULL);
	/* An unterminated quote hides everything after it. */
	check_mask("host=h password='never ends", "host=h password='****'", "never");
	/* Not key=value at all: no password may show through. */
	check_mask("host=h password", "host=h password ****", NULL);
	T_ASSERT(pgc_dsn_mask(NULL) == NULL);
}

/* sslpassword (the client key's passphrase) is as secret as password. */
static void dsn__mask_sslpassword(void)
{
	check_mask("host=h sslkey=k sslpassword=s3cret", "host=h sslkey=k sslpassword=****", "s3cret");
	check_mask("host=h SSLPassword='a b'", "host=h SSLPassword='****'", "a b");
	check_mask("postgresql://h/db?sslkey=k&sslpassword=s3cret&sslmode=require",
	           "postgresql://h/db?sslkey=k&sslpassword=****&sslmode=require", "s3cret");
	check_mask("host=h sslpassword", "host=h sslpassword ****", NULL);
	/* libpq percent-decodes parameter names too. */
	check_mask("postgresql://h/db?%70assword=s3cret&x=1", "postgresql://h/db?%70assword=****&x=1", "s3cret");
	check_mask("postgresql://h/db?ssl%50ASSWORD=s3cret", "postgresql://h/db?ssl%50ASSWORD=****", "s3cret");
	check_mask("postgresql://h/db?%7=a&pass=b%", "postgresql://h/db?%7=a&pass=b%", NULL);
}

/* A string libpq refuses may hide a password under a misspelt keyword: every value goes. */
static void dsn__mask_all_values(void)
{
	char *got = pgc__dsn_mask_all("host=h pasword=hunter2 port='5 4'");
	T_ASSERT_STR_EQ(got, "host=**** pasword=**** port='****'");
	pgc_free(got);
	got = pgc__dsn_mask_all("postgresql://u:pw@h/db?passwd=hunter2");
	T_ASSERT_STR_EQ(got, "postgresql://****");
	pgc_free(got);
	got = pgc__dsn_mask_all("hunter2");
	T_ASSERT_NOT_CONTAINS(got, "hunter2");
	pgc_free(got);
	T_ASSERT(pgc__dsn_mask_all(NULL) == NULL);
}

static void check_duration(const char *in, long long want)
{
	int64_t ms = -1;
	pgc_error err;
	int rc = pgc_duration_parse(in, &ms, &err);
	if (rc != PGC_OK)
		T_FAIL("duration \"%s\": %s", in, err.message);
	if (ms != want)
		T_FAIL("duration \"%s\" = %lld ms, expected %lld", in, (long long)ms, want);
}

static void check_bad_duration(const char *in, const char *msg)
{
	int64_t ms = 0;
	pgc_error err;
	T_ASSERT_INT_EQ(pgc_duration_parse(in, &ms, &err), PGC_EUSAGE);
	T_ASSERT_CONTAINS(err.message, msg);
	T_ASSERT_INT_EQ(err.klass, PGC_CLASS_USAGE);
}

static void duration__parse(void)
{
	check_duration("500ms", 500);
	check_duration("2s", 2000);
	check_duration("2", 2000);
	check_duration("5m", 300000);
	check_duration("1h", 3600000);
	check_duration("1.5s", 1500);
	check_duration("0.25", 250);
	check_duration("0ms", 0);
	check_duration("1d", 86400000);
	check_duration("7d", 604800000);
	check_duration("1.5d", 129600000);
	check_duration("2min", 120000);
	check_bad_duration("", "empty");
	check_bad_duration("-1s", "invalid duration");
	check_bad_duration("abc", "invalid duration");
	check_bad_duration("5x", "unknown unit");
	check_bad_duration("1.s", "digits expected");
	check_bad_duration("99999999999999999999999s", "too large");
	check_bad_duration("9007199254740993h", "too large");
	check_bad_duration("104249991375d", "too large");
	check_bad_duration("104249991.9999d", "too large");
	check_bad_duration("1w", "use ms, s, m, h or d");
	pgc_error err;
	T_ASSERT_INT_EQ(pgc_duration_parse(NULL, NULL, &err), PGC_EUSAGE);
}

static void check_format(int64_t ms, const char *want)
{
	char buf[PGC_DURATION_FORMAT_MAX];
	pgc_error err;
	T_ASSERT_INT_EQ(pgc_duration_format(ms, buf, sizeof buf, &err), PGC_OK);
	T_ASSERT_STR_EQ(buf, want);
	int64_t back = -1;
	T_ASSERT_INT_EQ(pgc_duration_parse(buf, &back, &err), PGC_OK);
	T_ASSERT_INT_EQ(back, ms);
}

static void duration__format(void)
{
	check_format(0, "0s");
	check_format(1, "1ms");
	check_format(500, "500ms");
	check_format(1500, "1500ms");
	check_format(2000, "2s");
	check_format(90000, "90s");
	check_format(300000, "5m");
	check_format(5400000, "90m");
	check_format(3600000, "1h");
	check_format(86400000, "1d");
	check_format(604800000, "7d");
	check_format(90000000, "25h");
	check_format(INT64_C(1) << 53, "9007199254740992ms");
	/* Round trips over a spread of values, exact or not in each unit. */
	for (int64_t ms = 1; ms < (INT64_C(1) << 53); ms = ms * 3 + 7) {
		char buf[PGC_DURATION_FORMAT_MAX];
		int64_t back = -1;
		pgc_error err;
		T_ASSERT_INT_EQ(pgc_duration_format(ms, buf, sizeof buf, &err), PGC_OK);
		T_ASSERT_INT_EQ(pgc_duration_parse(buf, &back, &err), PGC_OK);
		T_ASSERT_INT_EQ(back, ms);
		if (ms > (INT64_C(1) << 43))
			continue;
		T_ASSERT_INT_EQ(pgc_duration_format(ms * 1000, buf, sizeof buf, &err), PGC_OK);
		T_ASSERT_INT_EQ(pgc_duration_parse(buf, &back, &err), PGC_OK);
		T_ASSERT_INT_EQ(back, ms * 1000);
	}
	char small[4] = "xyz", buf[PGC_DURATION_FORMAT_MAX];
	pgc_error err;
	T_ASSERT_INT_EQ(pgc_duration_format(1000, small, sizeof small, &err), PGC_EUSAGE);
	T_ASSERT_STR_EQ(small, "");
	T_ASSERT_INT_EQ(pgc_duration_format(1000, NULL, 100, &err), PGC_EUSAGE);
	T_ASSERT_INT_EQ(pgc_duration_format(-1, buf, sizeof buf, &err), PGC_EUSAGE);
	T_ASSERT_CONTAINS(err.message, "negative");
}

int main(int argc, char **argv)
{
	static const t_case cases[] = {
		{ "dsn__resolve_order", dsn__resolve_order },
		{ "dsn__mask_uri", dsn__mask_uri },
		{ "dsn__mask_keyword", dsn__mask_keyword },
		{ "dsn__mask_sslpassword", dsn__mask_sslpassword },
		{ "dsn__mask_all_values", dsn__mask_all_values },
		{ "duration__parse", duration__parse },
		{ "duration__format", duration__format },
		{ NULL, NULL },
	};
	return t_main(argc, argv, cases);
}

/* test_error.c - SQLSTATE classification, code texts and error records */
#include "conn/conn_int.h"
#include "../t.h"

static void error__classify_seed_sqlstates(void)
{
	/* Every SQLSTATE the seed documents name or imply, with what a caller must do. */
	static const struct {
		const char *state;
		pgc_error_class klass;
	} cases[] = {
		{ "40P01", PGC_CLASS_RETRY_TX },    /* deadlock detected (seed 002 §08) */
		{ "40001", PGC_CLASS_RETRY_TX },    /* serialization failure (§02, §13) */
		{ "55P03", PGC_CLASS_RETRY_LATER }, /* NOWAIT / lock_timeout (§05, §08) */
		{ "57014", PGC_CLASS_RETRY_LATER }, /* statement_timeout, pg_cancel_backend (§11) */
		{ "57P01", PGC_CLASS_RETRY_LATER }, /* pg_terminate_backend, admin shutdown */
		{ "57P02", PGC_CLASS_RETRY_LATER }, /* crash shutdown */
		{ "57P03", PGC_CLASS_RETRY_LATER }, /* cannot connect now */
		{ "08000", PGC_CLASS_RETRY_LATER }, /* connection exception */
		{ "08003", PGC_CLASS_RETRY_LATER }, /* connection does not exist */
		{ "08006", PGC_CLASS_RETRY_LATER }, /* connection failure */
		{ "08001", PGC_CLASS_RETRY_LATER }, /* unable to establish connection */
		{ "08P01", PGC_CLASS_RETRY_LATER }, /* protocol violation */
		{ "23505", PGC_CLASS_FATAL },       /* unique violation: not retried (§07) */
		{ "23503", PGC_CLASS_FATAL },       /* foreign key violation */
		{ "23514", PGC_CLASS_FATAL },       /* check violation */
		{ "42601", PGC_CLASS_FATAL },       /* syntax error: "invalid SQL" is not retried */
		{ "0A000", PGC_CLASS_FATAL },       /* FOR UPDATE with GROUP BY (§06) */
		{ "25P02", PGC_CLASS_FATAL },       /* in failed SQL transaction (NOWAIT abort) */
		{ "25001", PGC_CLASS_FATAL },       /* active SQL transaction */
		{ "28P01", PGC_CLASS_CONFIG },      /* invalid password: fix the credentials, not retried */
		{ "28000", PGC_CLASS_CONFIG },      /* no pg_hba.conf entry, role cannot log in */
		{ "3D000", PGC_CLASS_CONFIG },      /* the database does not exist */
		{ "53300", PGC_CLASS_RETRY_LATER }, /* too many connections */
		{ "53200", PGC_CLASS_FATAL },       /* out of shared memory (lock table full, §09) */
		{ "40002", PGC_CLASS_FATAL },       /* integrity constraint at commit: not a retry */
		{ "XX000", PGC_CLASS_FATAL },       /* internal error */
	};
	for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
		pgc_error_class got = pgc_sqlstate_class(cases[i].state);
		if (got != cases[i].klass)
			T_FAIL("%s: class %s, expected %s", cases[i].state, pgc_error_class_name(got),
			       pgc_error_class_name(cases[i].klass));
	}
}

static void error__classify_malformed(void)
{
	T_ASSERT_INT_EQ(pgc_sqlstate_class(NULL), PGC_CLASS_FATAL);
	T_ASSERT_INT_EQ(pgc_sqlstate_class(""), PGC_CLASS_FATAL);
	T_ASSERT_INT_EQ(pgc_sqlstate_class("40P0"), PGC_CLASS_FATAL);
	T_ASSERT_INT_EQ(pgc_sqlstate_class("40P011"), PGC_CLASS_FATAL);
	T_ASSERT_INT_EQ(pgc_sqlstate_class("08"), PGC_CLASS_FATAL);
	T_ASSERT_INT_EQ(pgc_sqlstate_class("40p01"), PGC_CLASS_FATAL);
	T_ASSERT_INT_EQ(pgc_sqlstate_class("08\n01"), PGC_CLASS_FATAL);
}

static void error__strerror(void)
{
	T_ASSERT_STR_EQ(pgc_strerror(PGC_OK), "success");
	T_ASSERT_STR_EQ(pgc_strerror(PGC_ENOTHELD), "lock not held by this session");
	T_ASSERT_STR_EQ(pgc_strerror(PGC_ETIMEDOUT), "timed out");
	T_ASSERT_STR_EQ(pgc_strerror(12345), "unknown error");
	/* Every code from PGC_EUSAGE down to the last one has its own text. */
	for (int c = PGC_EUSAGE; c >= PGC_EINTR; c--)
		T_ASSERT(strcmp(pgc_strerror(c), "unknown error") != 0);
	T_ASSERT_STR_EQ(pgc_error_class_name(PGC_CLASS_RETRY_TX), "retry-tx");
	T_ASSERT_STR_EQ(pgc_error_class_name(PGC_CLASS_RETRY_LATER), "retry-later");
}

static void error__record_is_one_line(void)
{
	pgc_error err = PGC_ERROR_INIT;
	int rc = pgc__err(&err, PGC_EUSAGE, "bad %s\nsecond line\n", "thing");
	T_ASSERT_INT_EQ(rc, PGC_EUSAGE);
	T_ASSERT_INT_EQ(err.code, PGC_EUSAGE);
	T_ASSERT_INT_EQ(err.klass, PGC_CLASS_USAGE);
	T_ASSERT_STR_EQ(err.message, "bad thing second line");
	T_ASSERT_STR_EQ(err.sqlstate, "");
	/* NULL records are accepted everywhere. */
	T_ASSERT_INT_EQ(pgc__err(NULL, PGC_ETIMEDOUT, "x"), PGC_ETIMEDOUT);
	pgc_error_clear(NULL);
	pgc_error_clear(&err);
	T_ASSERT_INT_EQ(err.code, PGC_OK);
	T_ASSERT_STR_EQ(err.message, "");
}

/* libpq breaks its messages into lines and indents the next one with a tab: one space each. */
static void error__line_breaks_one_space(void)
{
	pgc_error err = PGC_ERROR_INIT;
	pgc__err(&err, PGC_ECONNLOST, "server closed the connection unexpectedly\n\tThis probably means"
	                              " the server terminated abnormally\n\tbefore or while processing"
	                              " the request.\n");
	T_ASSERT_STR_EQ(err.message, "server closed the connection unexpectedly This probably means the"
	                             " server terminated abnormally before or while processing the"
	                             " request.");
	pgc__err(&err, PGC_ECONNECT, "a \r\n  b\t\tc  d");
	T_ASSERT_STR_EQ(err.message, "a b c  d");
}

static void error__long_message_truncated(void)
{
	char big[4096];
	memset(big, 'x', sizeof big - 1);
	big[sizeof big - 1] = '\0';
	pgc_error err;
	pgc__err(&err, PGC_EINTERNAL, "%s", big);
	T_ASSERT_INT_EQ(strlen(err.message), PGC_ERROR_MESSAGE_MAX - 1);
	T_ASSERT_INT_EQ(err.klass, PGC_CLASS_FATAL);
}

static void version__matches_macros(void)
{
	T_ASSERT_STR_EQ(pgc_version(), PGC_VERSION_STRING);
	char buf[32];
	snprintf(buf, sizeof buf, "%d.%d.%d", PGC_VERSION_MAJOR, PGC_VERSION_MINOR, PGC_VERSION_PATCH);
	T_ASSERT_STR_EQ(pgc_version(), buf);
	T_ASSERT_INT_EQ(PGC_VERSION_NUM, PGC_VERSION_MAJOR * 10000 + PGC_VERSION_MINOR * 100 + PGC_VERSION_PATCH);
}

int main(int argc, char **argv)
{
	static const t_case cases[] = {
		{ "error__classify_seed_sqlstates", error__classify_seed_sqlstates },
		{ "error__classify_malformed", error__classify_malformed },
		{ "error__strerror", error__strerror },
		{ "error__record_is_one_line", error__record_is_one_line },
		{ "error__line_breaks_one_space", error__line_breaks_one_space },
		{ "error__long_message_truncated", error__long_message_truncated },
		{ "version__matches_macros", version__matches_macros },
		{ NULL, NULL },
	};
	return t_main(argc, argv, cases);
}

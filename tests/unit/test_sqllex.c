/* test_sqllex.c - the SQL lexer shared by the probe and pgcoord tx: strings of every kind,
 * dollar quotes, nested comments, quoted names, standard_conforming_strings, statement ends
 * and what each statement says about itself */
#include <stdio.h>
#include <string.h>

#include "util/sqllex.h"

#include "../t.h"

/* The statements of sql as their text, joined by " | ". */
static const char *split(const char *sql, bool standard_strings)
{
	static char out[1024];
	pgc__sqllex lx;
	pgc__sqlstmt st;
	size_t o = 0;
	out[0] = '\0';
	pgc__sqllex_init(&lx, sql, strlen(sql), standard_strings);
	while (pgc__sql_next_statement(&lx, &st))
		o += (size_t)snprintf(out + o, sizeof out - o, "%s%.*s", o ? " | " : "",
		                      (int)(st.end - st.start), sql + st.start);
	return out;
}

/* The kinds of sql's tokens, one letter each: w word, i quoted name, s string, n number,
 * p parameter, ; semicolon, o other. */
static const char *kinds(const char *sql, bool standard_strings)
{
	static char out[256];
	static const char letter[] = { '.', 'w', 'i', 's', 'n', 'p', ';', 'o' };
	pgc__sqllex lx;
	size_t o = 0;
	pgc__sqllex_init(&lx, sql, strlen(sql), standard_strings);
	for (pgc__sqltok t; (t = pgc__sqllex_next(&lx)) != PGC__SQL_END && o + 1 < sizeof out;)
		out[o++] = letter[t];
	out[o] = '\0';
	return out;
}

static pgc__sqlstmt first(const char *sql)
{
	pgc__sqllex lx;
	pgc__sqlstmt st;
	pgc__sqllex_init(&lx, sql, strlen(sql), true);
	if (!pgc__sql_next_statement(&lx, &st))
		T_FAIL("no statement in \"%s\"", sql);
	return st;
}

static void sqllex__escape_strings(void)
{
	/* E or e before a quote starts an escape string when it is a word of its own. */
	T_ASSERT_STR_EQ(split("SELECT E'it\\'s; x'; SELECT 2", true), "SELECT E'it\\'s; x' | SELECT 2");
	T_ASSERT_STR_EQ(split("SELECT e'a\\\\'; SELECT 2", true), "SELECT e'a\\\\' | SELECT 2");
	T_ASSERT_STR_EQ(kinds("E'x'", true), "s");
	T_ASSERT_STR_EQ(kinds("(E'\\'')", true), "oso");
	/* ... and not when it ends a longer name: WHERE'\' is WHERE and a plain string. */
	T_ASSERT_STR_EQ(kinds("WHERE'\\'", true), "ws");
	T_ASSERT_STR_EQ(split("SELECT 1 FROM t WHERE'\\' = x; SELECT 2", true),
	                "SELECT 1 FROM t WHERE'\\' = x | SELECT 2");
	T_ASSERT_STR_EQ(kinds("a$E'x'", true), "ws");
	T_ASSERT_STR_EQ(kinds("_e'x'", true), "ws");
	/* The other prefixed strings and quoted names. */
	T_ASSERT_STR_EQ(kinds("B'101' X'1F' N'x' U&'d\\0061t' U&\"d;\"", true), "ssssi");
	T_ASSERT_STR_EQ(kinds("U&\"d;\" u&'x'", true), "is");
	T_ASSERT_STR_EQ(kinds("U & 'x'", true), "wos");
	T_ASSERT_STR_EQ(kinds("'it''s'", true), "s");
}

static void sqllex__standard_conforming_strings(void)
{
	const char *sql = "SELECT 'a\\'; b'; SELECT 2";
	/* On (the default since 9.1): a backslash is a plain character. */
	T_ASSERT_STR_EQ(split(sql, true), "SELECT 'a\\' | b'; SELECT 2");
	/* Off: it escapes the quote, as in E''. */
	T_ASSERT_STR_EQ(split(sql, false), "SELECT 'a\\'; b' | SELECT 2");
	/* N'' follows the setting; E'' escapes and B''/X''/U&'' never do, whatever it is. */
	T_ASSERT_STR_EQ(split("SELECT N'\\'; SELECT 2", true), "SELECT N'\\' | SELECT 2");
	T_ASSERT_STR_EQ(split("SELECT N'\\'; x'; SELECT 2", false), "SELECT N'\\'; x' | SELECT 2");
	T_ASSERT_STR_EQ(split("SELECT E'\\'; x'; SELECT 2", true), "SELECT E'\\'; x' | SELECT 2");
	T_ASSERT_STR_EQ(split("SELECT X'\\'; SELECT 2", false), "SELECT X'\\' | SELECT 2");
	T_ASSERT_STR_EQ(split("SELECT U&'\\'; SELECT 2", false), "SELECT U&'\\' | SELECT 2");
}

static void sqllex__dollar_quotes(void)
{
	T_ASSERT_STR_EQ(split("SELECT $$;$$; SELECT $a$ $$ ; $a$; SELECT $1; SELECT a$b$c;", true),
	                "SELECT $$;$$ | SELECT $a$ $$ ; $a$ | SELECT $1 | SELECT a$b$c");
	T_ASSERT_STR_EQ(kinds("$1 $12 a$b$ $ab $a$x$a$ $_x1$ y $_x1$", true), "ppwowss");
	/* $1 is a parameter; a tag cannot start with a digit; a name may hold a dollar. */
	T_ASSERT_STR_EQ(kinds("$1a", true), "pw");
	T_ASSERT_STR_EQ(kinds("$9x$ $", true), "pwo");
	/* Tags are case-sensitive, and a body may hold other tags. */
	T_ASSERT_STR_EQ(split("DO $F$ $f$ ; $f$ $F$; SELECT 2", true), "DO $F$ $f$ ; $f$ $F$ | SELECT 2");
	/* Never closed: one statement to the end, marked. */
	pgc__sqlstmt st = first("SELECT $q$ ; SELECT 2");
	T_ASSERT(st.unterminated);
	T_ASSERT_STR_EQ(split("SELECT $q$ ; SELECT 2", true), "SELECT $q$ ; SELECT 2");
}

static void sqllex__comments(void)
{
	const char *sql = "/* a /* nested; */ still; */ SELECT 1; -- x; y\nSELECT 2 -- end;";
	T_ASSERT_STR_EQ(split(sql, true), "SELECT 1 | SELECT 2");
	T_ASSERT_STR_EQ(split(" -- only a comment\n;  ; /* and another */", true), "");
	T_ASSERT_STR_EQ(kinds("a--b\nc/*d*/e", true), "www");
	T_ASSERT_STR_EQ(kinds("a-b/c", true), "wowow");
	/* A comment never closed swallows the rest. */
	T_ASSERT_STR_EQ(split("SELECT 1 /* /* */ ; SELECT 2", true), "SELECT 1");
}

static void sqllex__quoted_identifiers(void)
{
	T_ASSERT_STR_EQ(split("SELECT \"a;\"\"b\" FROM \"x\"; SELECT 2", true),
	                "SELECT \"a;\"\"b\" FROM \"x\" | SELECT 2");
	pgc__sqlstmt st = first("SELECT \"begin\" FROM \"VACUUM\"");
	T_ASSERT_INT_EQ(st.nwords, 4);
	T_ASSERT(pgc__sql_word_at(&st, 0, "SELECT") && pgc__sql_word_at(&st, 1, "\""));
	T_ASSERT(pgc__sql_word_at(&st, 2, "FROM") && pgc__sql_word_at(&st, 3, "\""));
	T_ASSERT(!pgc__sql_has_word(&st, "VACUUM"));
}

static void sqllex__statement_ends(void)
{
	/* Inside parentheses and BEGIN ATOMIC bodies a semicolon does not end the statement. */
	T_ASSERT_STR_EQ(split("SELECT (1; 2); SELECT 3", true), "SELECT (1; 2) | SELECT 3");
	T_ASSERT_STR_EQ(split("CREATE FUNCTION f() RETURNS int LANGUAGE sql BEGIN ATOMIC SELECT 1; "
	                      "SELECT CASE WHEN true THEN 2 END; END; SELECT 1", true),
	                "CREATE FUNCTION f() RETURNS int LANGUAGE sql BEGIN ATOMIC SELECT 1; SELECT CASE "
	                "WHEN true THEN 2 END; END | SELECT 1");
	T_ASSERT_STR_EQ(split("create or replace procedure p() begin atomic select 1; end; select 2", true),
	                "create or replace procedure p() begin atomic select 1; end | select 2");
	/* BEGIN as a statement of its own is no body. */
	T_ASSERT_STR_EQ(split("BEGIN; SELECT 1; END;", true), "BEGIN | SELECT 1 | END");
	T_ASSERT_STR_EQ(split("SELECT 1;;", true), "SELECT 1");
	T_ASSERT_STR_EQ(split("", true), "");
	/* Offsets: the first token and just after the last. */
	pgc__sqlstmt st = first("  \n  begin ;");
	T_ASSERT_INT_EQ(st.start, 5);
	T_ASSERT_INT_EQ(st.end, 10);
	T_ASSERT_INT_EQ(st.ntokens, 1);
}

static void sqllex__what_a_statement_says(void)
{
	pgc__sqlstmt st = first("select * from t for update");
	T_ASSERT(st.locking_clause);
	T_ASSERT(pgc__sql_word_at(&st, 0, "SELECT") && pgc__sql_word_at(&st, 4, "UPDATE"));
	T_ASSERT(first("SELECT 1 FOR NO KEY UPDATE").locking_clause);
	T_ASSERT(first("SELECT 1 FOR KEY SHARE").locking_clause);
	T_ASSERT(!first("SELECT 'for update'").locking_clause);
	T_ASSERT(first("COPY t (a, b) FROM STDIN WITH (FORMAT csv)").copy_from_stdin);
	T_ASSERT(first("copy t from /* x */ stdin").copy_from_stdin);
	T_ASSERT(!first("COPY (SELECT * FROM stdin) TO STDOUT").copy_from_stdin);
	T_ASSERT(!first("SELECT * FROM stdin").copy_from_stdin);
	T_ASSERT(!first("COPY t FROM 'stdin'").copy_from_stdin);
	T_ASSERT(first("create index concurrently on t (x)").concurrently);
	T_ASSERT(!first("SELECT 'concurrently'").concurrently);
	st = first("SELECT 1 \\gset");
	T_ASSERT_INT_EQ(st.backslash_at, 9);
	T_ASSERT(first("SELECT E'\\\\'").backslash_at == (size_t)-1);
	/* Words: at most PGC__SQL_WORDS, each cut short. */
	char many[1024] = "SELECT";
	for (int i = 0; i < 60; i++)
		strcat(many, " a");
	st = first(many);
	T_ASSERT_INT_EQ(st.nwords, PGC__SQL_WORDS);
	st = first("abcdefghijklmnopqrstuvwxyz0123");
	T_ASSERT_STR_EQ(st.words[0], "ABCDEFGHIJKLMNOPQRSTUVW");
	T_ASSERT_INT_EQ(strlen(st.words[0]), PGC__SQL_WORD_MAX - 1);
}

int main(int argc, char **argv)
{
	static const t_case cases[] = {
		{ "sqllex__escape_strings", sqllex__escape_strings },
		{ "sqllex__standard_conforming_strings", sqllex__standard_conforming_strings },
		{ "sqllex__dollar_quotes", sqllex__dollar_quotes },
		{ "sqllex__comments", sqllex__comments },
		{ "sqllex__quoted_identifiers", sqllex__quoted_identifiers },
		{ "sqllex__statement_ends", sqllex__statement_ends },
		{ "sqllex__what_a_statement_says", sqllex__what_a_statement_says },
		{ NULL, NULL },
	};
	return t_main(argc, argv, cases);
}

/* sqllex.h - PostgreSQL's SQL as tokens and statements, enough to split a script and read
 * what each statement is, never to parse it
 *
 * Comments (-- and nested slash-star), strings ('...', E'...', N'...', B'...', X'...',
 * U&'...', $tag$...$tag$), quoted names ("..." and U&"...") and parameters ($1) are read the way
 * the server's own lexer reads them (src/backend/parser/scan.l), so that a semicolon or a key
 * word inside them is never taken for one outside. One rule for escape strings: E or e directly
 * before a quote starts one only when it is a word of its own, not the end of a longer name
 * (WHERE'x' is WHERE followed by a plain string). Plain strings take backslash escapes only
 * when standard_conforming_strings is off.
 *
 * A statement ends at a semicolon outside parentheses and outside the BEGIN ATOMIC ... END
 * body of CREATE [OR REPLACE] FUNCTION or PROCEDURE, as psql splits a script. Used by the
 * probe's refusal scanner (probe.c) and by pgcoord tx; nothing here talks to a server. */
#ifndef PGCOORD_SQLLEX_H
#define PGCOORD_SQLLEX_H

#include <stdbool.h>
#include <stddef.h>

typedef enum pgc__sqltok {
	PGC__SQL_END = 0,   /* the end of the text */
	PGC__SQL_WORD,      /* a key word or an unquoted name */
	PGC__SQL_IDENT,     /* a quoted name */
	PGC__SQL_STRING,    /* a string constant of any kind, dollar-quoted ones included */
	PGC__SQL_NUMBER,
	PGC__SQL_PARAM,     /* $1 */
	PGC__SQL_SEMICOLON, /* any semicolon, inside a statement or ending one */
	PGC__SQL_OTHER      /* one character of anything else: ( ) , + \ ... */
} pgc__sqltok;

typedef struct pgc__sqllex {
	const char *s;
	size_t n, pos;
	bool standard_strings; /* standard_conforming_strings is on */
	/* the token just read */
	pgc__sqltok tok;
	size_t start, len;     /* where it is in s */
	bool unterminated;     /* a string, quoted name or comment ran to the end of the text */
} pgc__sqllex;

/* Starts reading s[0..n) (no NUL needed). standard_conforming_strings: the server's setting
 * (on unless a server says otherwise). */
void pgc__sqllex_init(pgc__sqllex *lx, const char *s, size_t n, bool standard_conforming_strings);

/* Reads the next token, skipping white space and comments; PGC__SQL_END at the end (and on
 * every later call). */
pgc__sqltok pgc__sqllex_next(pgc__sqllex *lx);

/* The token just read is the word w (compared without regard to ASCII case). */
bool pgc__sqllex_word_is(const pgc__sqllex *lx, const char *w);

/* A byte that continues an unquoted name: letters, digits, '_', '$', and every byte of a
 * multi-byte character. */
bool pgc__sql_ident_char(unsigned char c);

/* ---- statements ---- */

#define PGC__SQL_WORDS 48    /* leading words kept per statement */
#define PGC__SQL_WORD_MAX 24 /* bytes kept per word, with its NUL */

typedef struct pgc__sqlstmt {
	size_t start;       /* offset of its first token */
	size_t end;         /* offset just after its last token (the semicolon left out) */
	size_t ntokens;     /* tokens, semicolons inside it included; never 0 */
	/* The leading words, upper-cased (ASCII), cut to PGC__SQL_WORD_MAX - 1 bytes, with
	 * "(" and ")" for parentheses and "\"" for a quoted name; strings, numbers and other
	 * characters are left out. */
	char words[PGC__SQL_WORDS][PGC__SQL_WORD_MAX];
	size_t nwords;
	size_t backslash_at;  /* offset of its first backslash outside strings, names and
	                         comments (a psql meta-command), or (size_t)-1 */
	bool concurrently;    /* the word CONCURRENTLY, anywhere */
	bool locking_clause;  /* FOR UPDATE, FOR NO KEY UPDATE, FOR SHARE or FOR KEY SHARE */
	bool copy_from_stdin; /* COPY ... FROM STDIN */
	bool unterminated;    /* a string, quoted name or comment in it never ends */
} pgc__sqlstmt;

/* Reads the next statement that has any token (empty ones, ";;", are skipped). False at the
 * end of the text. */
bool pgc__sql_next_statement(pgc__sqllex *lx, pgc__sqlstmt *st);

/* Word i of st is w (already upper-case); false past the words kept. */
bool pgc__sql_word_at(const pgc__sqlstmt *st, size_t i, const char *w);

/* One of the words kept is w. */
bool pgc__sql_has_word(const pgc__sqlstmt *st, const char *w);

#endif

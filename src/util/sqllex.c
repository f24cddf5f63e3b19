/* sqllex.c - tokens and statements of SQL text (see sqllex.h) */
#include <string.h>

#include "sqllex.h"

static bool ident_start(unsigned char c)
{
	return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_' || c >= 0x80;
}

bool pgc__sql_ident_char(unsigned char c)
{
	return ident_start(c) || (c >= '0' && c <= '9') || c == '$';
}

static bool is_digit(unsigned char c)
{
	return c >= '0' && c <= '9';
}

static bool is_space(unsigned char c)
{
	return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f' || c == '\v';
}

void pgc__sqllex_init(pgc__sqllex *lx, const char *s, size_t n, bool standard_conforming_strings)
{
	memset(lx, 0, sizeof *lx);
	lx->s = s;
	lx->n = n;
	lx->standard_strings = standard_conforming_strings;
}

static unsigned char at(const pgc__sqllex *lx, size_t i)
{
	return i < lx->n ? (unsigned char)lx->s[i] : '\0';
}

/* Skips white space and comments; false when a comment never ends. */
static bool skip_blank(pgc__sqllex *lx)
{
	for (;;) {
		size_t i = lx->pos;
		if (i < lx->n && is_space(at(lx, i))) {
			lx->pos++;
		} else if (at(lx, i) == '-' && at(lx, i + 1) == '-') {
			while (lx->pos < lx->n && lx->s[lx->pos] != '\n')
				lx->pos++;
		} else if (at(lx, i) == '/' && at(lx, i + 1) == '*') {
			/* Comments nest, as in the server (not as in the SQL standard's C). */
			int depth = 0;
			do {
				if (at(lx, lx->pos) == '/' && at(lx, lx->pos + 1) == '*') {
					depth++;
					lx->pos += 2;
				} else if (at(lx, lx->pos) == '*' && at(lx, lx->pos + 1) == '/') {
					depth--;
					lx->pos += 2;
				} else {
					lx->pos++;
				}
			} while (depth > 0 && lx->pos < lx->n);
			if (depth > 0)
				return false;
		} else {
			return true;
		}
	}
}

/* A quoted stretch from lx->pos (its opening quote q): a doubled q stands for itself, and
 * with backslash escapes a backslash takes the next byte. */
static void quoted(pgc__sqllex *lx, char q, bool backslash)
{
	size_t i = lx->pos + 1;
	while (i < lx->n) {
		char c = lx->s[i];
		if (backslash && c == '\\' && i + 1 < lx->n) {
			i += 2;
		} else if (c == q && at(lx, i + 1) == (unsigned char)q) {
			i += 2;
		} else if (c == q) {
			lx->pos = i + 1;
			return;
		} else {
			i++;
		}
	}
	lx->pos = lx->n;
	lx->unterminated = true;
}

/* $tag$ ... $tag$ from lx->pos, or false when no dollar quote starts there. */
static bool dollar_quoted(pgc__sqllex *lx)
{
	size_t i = lx->pos + 1;
	if (at(lx, i) != '$') {
		if (!ident_start(at(lx, i)))
			return false;
		while (i < lx->n && pgc__sql_ident_char(at(lx, i)) && at(lx, i) != '$')
			i++;
		if (at(lx, i) != '$')
			return false;
	}
	size_t taglen = i + 1 - lx->pos;
	const char *tag = lx->s + lx->pos;
	for (size_t j = i + 1; j + taglen <= lx->n; j++)
		if (lx->s[j] == '$' && memcmp(lx->s + j, tag, taglen) == 0) {
			lx->pos = j + taglen;
			return true;
		}
	lx->pos = lx->n;
	lx->unterminated = true;
	return true;
}

static void number(pgc__sqllex *lx)
{
	size_t i = lx->pos;
	while (is_digit(at(lx, i)) || at(lx, i) == '.')
		i++;
	/* An exponent's sign (1e-3); its digits go with the rest below. */
	bool sign = at(lx, i + 1) == '+' || at(lx, i + 1) == '-';
	if ((at(lx, i) == 'e' || at(lx, i) == 'E') && sign && is_digit(at(lx, i + 2)))
		i += 2;
	/* 0x1F, 1_000 and the "trailing junk" the server refuses stay one token. */
	while (i < lx->n && pgc__sql_ident_char(at(lx, i)))
		i++;
	lx->pos = i;
}

/* A word, or the prefix of a string or quoted name when it is a word of one letter (E'..',
 * N'..', B'..', X'..', U&'..', U&".."). */
static pgc__sqltok word(pgc__sqllex *lx)
{
	size_t i = lx->pos;
	while (i < lx->n && pgc__sql_ident_char(at(lx, i)))
		i++;
	unsigned char c = at(lx, lx->pos) | 0x20, next = at(lx, i);
	if (i - lx->pos == 1 && next == '\'' && (c == 'e' || c == 'n' || c == 'b' || c == 'x')) {
		lx->pos = i;
		quoted(lx, '\'', c == 'e' || (c == 'n' && !lx->standard_strings));
		return PGC__SQL_STRING;
	}
	if (i - lx->pos == 1 && c == 'u' && next == '&' && (at(lx, i + 1) == '\'' || at(lx, i + 1) == '"')) {
		lx->pos = i + 1;
		char q = lx->s[lx->pos];
		quoted(lx, q, false);
		return q == '"' ? PGC__SQL_IDENT : PGC__SQL_STRING;
	}
	lx->pos = i;
	return PGC__SQL_WORD;
}

pgc__sqltok pgc__sqllex_next(pgc__sqllex *lx)
{
	bool closed = skip_blank(lx);
	lx->start = lx->pos;
	lx->unterminated = !closed;
	if (lx->pos >= lx->n) {
		lx->len = 0;
		return lx->tok = PGC__SQL_END;
	}
	unsigned char c = at(lx, lx->pos);
	pgc__sqltok t = PGC__SQL_OTHER;
	if (ident_start(c)) {
		t = word(lx);
	} else if (c == '\'') {
		quoted(lx, '\'', !lx->standard_strings);
		t = PGC__SQL_STRING;
	} else if (c == '"') {
		quoted(lx, '"', false);
		t = PGC__SQL_IDENT;
	} else if (c == '$' && is_digit(at(lx, lx->pos + 1))) {
		lx->pos++;
		while (is_digit(at(lx, lx->pos)))
			lx->pos++;
		t = PGC__SQL_PARAM;
	} else if (c == '$' && dollar_quoted(lx)) {
		t = PGC__SQL_STRING;
	} else if (is_digit(c) || (c == '.' && is_digit(at(lx, lx->pos + 1)))) {
		number(lx);
		t = PGC__SQL_NUMBER;
	} else {
		lx->pos++;
		t = c == ';' ? PGC__SQL_SEMICOLON : PGC__SQL_OTHER;
	}
	lx->len = lx->pos - lx->start;
	return lx->tok = t;
}

bool pgc__sqllex_word_is(const pgc__sqllex *lx, const char *w)
{
	if (lx->tok != PGC__SQL_WORD || strlen(w) != lx->len)
		return false;
	for (size_t i = 0; i < lx->len; i++) {
		unsigned char a = (unsigned char)lx->s[lx->start + i], b = (unsigned char)w[i];
		if (a >= 'a' && a <= 'z')
			a = (unsigned char)(a - 32);
		if (b >= 'a' && b <= 'z')
			b = (unsigned char)(b - 32);
		if (a != b)
			return false;
	}
	return true;
}

/* ---- statements ---- */

/* What a statement scan keeps between tokens. */
typedef struct stmt_scan {
	int paren;
	int atomic;        /* BEGIN ATOMIC ... END nesting (CASE ... END counts inside it) */
	bool routine;      /* CREATE [OR REPLACE] FUNCTION|PROCEDURE */
	size_t word_count; /* WORD tokens so far */
	bool after_for;    /* the last word was FOR */
	bool after_from;   /* the last token was FROM, outside parentheses */
} stmt_scan;

static void keep_word(pgc__sqlstmt *st, const char *s, size_t len)
{
	if (st->nwords == PGC__SQL_WORDS)
		return;
	char *w = st->words[st->nwords++];
	size_t k = 0;
	for (; k < len && k + 1 < PGC__SQL_WORD_MAX; k++)
		w[k] = (char)(s[k] >= 'a' && s[k] <= 'z' ? s[k] - 32 : s[k]);
	w[k] = '\0';
}

static void on_word(pgc__sqllex *lx, pgc__sqlstmt *st, stmt_scan *sc)
{
	keep_word(st, lx->s + lx->start, lx->len);
	sc->word_count++;
	/* CREATE FUNCTION (word 2) or CREATE OR REPLACE FUNCTION (word 4), or PROCEDURE. */
	if ((sc->word_count == 2 || sc->word_count == 4) && pgc__sql_word_at(st, 0, "CREATE") &&
	    (sc->word_count == 4) == pgc__sql_word_at(st, 1, "OR") &&
	    (pgc__sqllex_word_is(lx, "FUNCTION") || pgc__sqllex_word_is(lx, "PROCEDURE")))
		sc->routine = true;
	if (sc->routine && sc->paren == 0 && sc->word_count > 2) {
		if (pgc__sqllex_word_is(lx, "BEGIN"))
			sc->atomic++;
		else if (pgc__sqllex_word_is(lx, "CASE") && sc->atomic > 0)
			sc->atomic++;
		else if (pgc__sqllex_word_is(lx, "END") && sc->atomic > 0)
			sc->atomic--;
	}
	if (pgc__sqllex_word_is(lx, "CONCURRENTLY"))
		st->concurrently = true;
	if (sc->after_for && (pgc__sqllex_word_is(lx, "UPDATE") || pgc__sqllex_word_is(lx, "SHARE") ||
	                      pgc__sqllex_word_is(lx, "NO") || pgc__sqllex_word_is(lx, "KEY")))
		st->locking_clause = true;
	if (sc->after_from && pgc__sqllex_word_is(lx, "STDIN") && pgc__sql_word_at(st, 0, "COPY"))
		st->copy_from_stdin = true;
	sc->after_for = pgc__sqllex_word_is(lx, "FOR");
	sc->after_from = sc->paren == 0 && pgc__sqllex_word_is(lx, "FROM");
}

static void on_token(pgc__sqllex *lx, pgc__sqlstmt *st, stmt_scan *sc)
{
	if (st->ntokens++ == 0)
		st->start = lx->start;
	st->end = lx->pos;
	st->unterminated |= lx->unterminated;
	if (lx->tok == PGC__SQL_WORD) {
		on_word(lx, st, sc);
		return;
	}
	sc->after_from = false;
	char c = lx->s[lx->start];
	if (lx->tok == PGC__SQL_IDENT)
		keep_word(st, "\"", 1);
	if (lx->tok != PGC__SQL_OTHER)
		return;
	if (c == '(') {
		sc->paren++;
		keep_word(st, "(", 1);
	} else if (c == ')') {
		if (sc->paren > 0)
			sc->paren--;
		keep_word(st, ")", 1);
	} else if (c == '\\' && st->backslash_at == (size_t)-1) {
		st->backslash_at = lx->start;
	}
}

bool pgc__sql_next_statement(pgc__sqllex *lx, pgc__sqlstmt *st)
{
	memset(st, 0, sizeof *st);
	st->backslash_at = (size_t)-1;
	stmt_scan sc = { 0 };
	for (;;) {
		pgc__sqltok t = pgc__sqllex_next(lx);
		if (t == PGC__SQL_END) {
			st->unterminated |= lx->unterminated && st->ntokens > 0;
			return st->ntokens > 0;
		}
		if (t == PGC__SQL_SEMICOLON && sc.paren == 0 && sc.atomic == 0) {
			if (st->ntokens > 0)
				return true;
			continue; /* an empty statement */
		}
		on_token(lx, st, &sc);
	}
}

bool pgc__sql_word_at(const pgc__sqlstmt *st, size_t i, const char *w)
{
	return i < st->nwords && strcmp(st->words[i], w) == 0;
}

bool pgc__sql_has_word(const pgc__sqlstmt *st, const char *w)
{
	for (size_t i = 0; i < st->nwords; i++)
		if (strcmp(st->words[i], w) == 0)
			return true;
	return false;
}

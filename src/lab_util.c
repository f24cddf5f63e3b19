/* lab_util.c - what several experiments share: the items table, lock waits, and the conflict
 * matrices measured with NOWAIT pairs */
#include <assert.h>
#include <stdio.h>
#include <string.h>

#include "lab_internal.h"

const char *lab_tf(bool b)
{
	return b ? "true" : "false";
}

bool lab_locked_ids(lab *L, lab_sess *s, char *out, size_t n)
{
	return lab_text(L, s,
	                "SELECT coalesce(string_agg(id::text, ',' ORDER BY id), '') FROM items"
	                " WHERE id NOT IN (SELECT id FROM items FOR UPDATE SKIP LOCKED)",
	                0, NULL, out, n);
}

bool lab_make_items(lab *L, lab_sess *s, int rows)
{
	char n[24];
	const char *p[1] = { lab_fmt(n, rows) };
	return lab_exec(L, s, "CREATE TABLE items (id int PRIMARY KEY, v int NOT NULL)") &&
	       lab_execp(L, s, "INSERT INTO items SELECT g, g FROM generate_series(1, $1::int) g", 1, p);
}

int lab_waits(lab *L, lab_sess *s, const char *sql)
{
	if (!lab_send(L, s, sql, 0, NULL))
		return -1;
	return lab_await_lock_wait(L, s);
}

bool lab_done_ok(lab *L, lab_sess *s, PGresult **out)
{
	char state[6];
	if (!lab_finish(L, s, 0, state, out))
		return false;
	if (state[0] != '\0') {
		lab_fail(L, "session %s: %s (SQLSTATE %s)", s->label, s->lasterr, state);
		return false;
	}
	return true;
}

void lab_conflict_matrix(lab *L, lab_sess *a, lab_sess *b, const lab_matrix *m)
{
	assert(m->modes >= 1 && m->modes <= LAB_MATRIX_MODES_MAX);
	char measured[LAB_MATRIX_MODES_MAX * (LAB_MATRIX_MODES_MAX + 1) + 1] = "";
	int conflicts = 0, mismatches = 0;
	char first_mismatch[128] = "";
	for (int m1 = 1; m1 <= m->modes; m1++) {
		for (int m2 = 1; m2 <= m->modes; m2++) {
			char sql1[128], sql2[128], state[6];
			snprintf(sql1, sizeof sql1, "%s%s%s", m->prefix, m->sql(m1), m->suffix);
			snprintf(sql2, sizeof sql2, "%s%s%s NOWAIT", m->prefix, m->sql(m2), m->suffix);
			if (!lab_exec(L, a, sql1) || !lab_try(L, b, sql2, state) ||
			    !lab_exec(L, b, "ROLLBACK") || !lab_exec(L, a, "ROLLBACK"))
				return;
			if (state[0] != '\0' && strcmp(state, "55P03") != 0) {
				lab_fail(L, "session %s: %s (SQLSTATE %s) in: %s", b->label, b->lasterr, state, sql2);
				return;
			}
			bool c = state[0] != '\0';
			conflicts += c;
			strncat(measured, c ? "X" : ".", 2);
			if (c != m->conflicts(m1, m2) && mismatches++ == 0)
				snprintf(first_mismatch, sizeof first_mismatch, "%s held, %s %s", m->sql(m1), m->sql(m2),
				         c ? "conflicted" : "was granted");
		}
		if (m1 < m->modes)
			strncat(measured, "/", 2);
	}
	int pairs = m->modes * m->modes;
	lab_vint(L, "pairs", pairs);
	lab_vint(L, "conflicts", conflicts);
	lab_vint(L, "mismatches", mismatches);
	lab_vtext(L, "matrix", measured);
	if (mismatches == 0)
		lab_verdict(L, true, "%d %s pairs: %d conflict, %d coexist, equal to the documented table",
		            pairs, m->what, conflicts, pairs - conflicts);
	else
		lab_verdict(L, false, "%d %s pairs: %d differ from the documented table, first: %s", pairs,
		            m->what, mismatches, first_mismatch);
}

/* lab_util.c - what several experiments share: the items table, lock waits, and the conflict
 * matrices measured with NOWAIT pairs */
#include <stdio.h>
#include <string.h>

#include "lab_int.h"

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

bool lab_row_waiter(lab *L, const char *hold, lab_sess **a, lab_sess **b)
{
	*a = lab_open(L);
	*b = *a ? lab_open(L) : NULL;
	if (*b == NULL || !lab_make_items(L, *a, 1) || !lab_exec(L, *a, hold))
		return false;
	int w = lab_waits(L, *b, "UPDATE items SET v = v + 1 WHERE id = 1");
	if (w == 0)
		lab_fail(L, "session %s did not wait for %s", (*b)->label, (*a)->label);
	return w == 1;
}

/* One matrix: its modes are 1 .. modes. */
static const struct {
	int modes;
	const char *setup;          /* run on A first */
	const char *prefix, *suffix; /* around the mode's words in A's and B's statements */
	const char *what;           /* the pairs, in the verdict */
} matrices[] = {
	[LAB_TABLE_LOCKS] = { PGC_TABLE_LOCK_COUNT, "CREATE TABLE t (id int)",
	                      "BEGIN; LOCK TABLE t IN ", " MODE", "LOCK TABLE ... NOWAIT" },
	[LAB_ROW_LOCKS] = { PGC_ROW_LOCK_COUNT,
	                    "CREATE TABLE items (id int PRIMARY KEY, v int NOT NULL);"
	                    " INSERT INTO items VALUES (1, 1)",
	                    "BEGIN; SELECT id FROM items WHERE id = 1 ", "",
	                    "SELECT ... FOR <mode> NOWAIT" },
};

static const char *mode_sql(lab_lock_kind kind, int mode)
{
	return kind == LAB_TABLE_LOCKS ? pgc_table_lock_sql((pgc_table_lock)mode)
	                               : pgc_row_lock_sql((pgc_row_lock)mode);
}

static bool documented(lab_lock_kind kind, int held, int asked)
{
	return kind == LAB_TABLE_LOCKS
	           ? pgc_table_lock_conflicts((pgc_table_lock)held, (pgc_table_lock)asked)
	           : pgc_row_lock_conflicts((pgc_row_lock)held, (pgc_row_lock)asked);
}

void lab_conflict_matrix(lab *L, lab_lock_kind kind)
{
	int modes = matrices[kind].modes;
	const char *prefix = matrices[kind].prefix, *suffix = matrices[kind].suffix;
	lab_sess *a = lab_open(L), *b = a ? lab_open(L) : NULL;
	if (b == NULL || !lab_exec(L, a, matrices[kind].setup))
		return;
	char measured[PGC_TABLE_LOCK_COUNT * (PGC_TABLE_LOCK_COUNT + 1) + 1] = "";
	int conflicts = 0, mismatches = 0;
	char first_mismatch[128] = "";
	for (int m1 = 1; m1 <= modes; m1++) {
		for (int m2 = 1; m2 <= modes; m2++) {
			char sql1[128], sql2[128], state[6];
			snprintf(sql1, sizeof sql1, "%s%s%s", prefix, mode_sql(kind, m1), suffix);
			snprintf(sql2, sizeof sql2, "%s%s%s NOWAIT", prefix, mode_sql(kind, m2), suffix);
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
			if (c != documented(kind, m1, m2) && mismatches++ == 0)
				snprintf(first_mismatch, sizeof first_mismatch, "%s held, %s %s", mode_sql(kind, m1),
				         mode_sql(kind, m2), c ? "conflicted" : "was granted");
		}
		if (m1 < modes)
			strncat(measured, "/", 2);
	}
	int pairs = modes * modes;
	lab_vint(L, "pairs", pairs);
	lab_vint(L, "conflicts", conflicts);
	lab_vint(L, "mismatches", mismatches);
	lab_vtext(L, "matrix", measured);
	if (mismatches == 0)
		lab_verdict(L, true, "%d %s pairs: %d conflict, %d coexist, equal to the documented table",
		            pairs, matrices[kind].what, conflicts, pairs - conflicts);
	else
		lab_verdict(L, false, "%d %s pairs: %d differ from the documented table, first: %s", pairs,
		            matrices[kind].what, mismatches, first_mismatch);
}

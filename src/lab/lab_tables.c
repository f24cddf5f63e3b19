/* lab_tables.c - table locks: the 8x8 conflict matrix, LOCK TABLE's rules, and a strong lock
 * that queues the readers behind it */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "lab_int.h"

/* ---- the conflict matrix ---- */

void lab_exp_table_lock_matrix(lab *L)
{
	lab_conflict_matrix(L, LAB_TABLE_LOCKS);
}

/* ---- LOCK TABLE ---- */

void lab_exp_lock_table_needs_tx(lab *L)
{
	lab_sess *a = lab_open(L);
	char state[6];
	if (a == NULL || !lab_exec(L, a, "CREATE TABLE t (id int)") ||
	    !lab_try(L, a, "LOCK TABLE t IN ACCESS SHARE MODE", state))
		return;
	lab_vtext(L, "sqlstate", state);
	lab_vtext(L, "message", state[0] ? a->lasterr : "");
	lab_verdict(L, strcmp(state, "25P01") == 0, "LOCK TABLE in autocommit: %s (%s)",
	            state[0] ? a->lasterr : "accepted", state[0] ? state : "no error");
}

void lab_exp_lock_table_default(lab *L)
{
	lab_sess *a = lab_open(L);
	if (a == NULL || !lab_exec(L, a, "CREATE TABLE t (id int)") ||
	    !lab_exec(L, a, "BEGIN; LOCK TABLE t"))
		return;
	char pid[24], mode[64];
	const char *p[2] = { lab_fmt(pid, a->pid), L->schema };
	if (!lab_text(L, L->obs,
	              "SELECT coalesce(string_agg(l.mode, ','), '') FROM pg_locks l"
	              " JOIN pg_class c ON c.oid = l.relation"
	              " JOIN pg_namespace n ON n.oid = c.relnamespace"
	              " WHERE l.pid = $1::int AND n.nspname = $2 AND c.relname = 't'",
	              2, p, mode, sizeof mode) ||
	    !lab_exec(L, a, "ROLLBACK"))
		return;
	lab_vtext(L, "mode", mode);
	lab_verdict(L, strcmp(mode, pgc_table_lock_name(PGC_ACCESS_EXCLUSIVE)) == 0,
	            "LOCK TABLE t (no mode) holds %s on t", mode[0] ? mode : "nothing");
}

/* ---- a strong lock queues the readers behind it ---- */

void lab_exp_strong_lock_queue(lab *L)
{
	lab_sess *a = lab_open(L), *b = a ? lab_open(L) : NULL, *c = b ? lab_open(L) : NULL;
	if (c == NULL || !lab_make_items(L, a, 3))
		return;
	if (!lab_exec(L, a, "BEGIN; SELECT count(*) FROM items"))
		return;
	int alter = lab_waits(L, b, "ALTER TABLE items ADD COLUMN note text");
	if (alter < 0)
		return;
	int reader = lab_waits(L, c, "SELECT count(*) FROM items");
	if (reader < 0)
		return;
	char pc[24], blockers[64];
	const char *p[1] = { lab_fmt(pc, c->pid) };
	if (!lab_text(L, L->obs, "SELECT pg_blocking_pids($1::int)::text", 1, p, blockers,
	              sizeof blockers) ||
	    !lab_exec(L, a, "COMMIT") || !lab_done_ok(L, b, NULL) || !lab_done_ok(L, c, NULL))
		return;
	char want[32];
	snprintf(want, sizeof want, "{%d}", b->pid);
	lab_vbool(L, "alter_waited_for_reader", alter == 1);
	lab_vbool(L, "new_select_waited", reader == 1);
	lab_vtext(L, "new_select_blocked_by", blockers);
	lab_vint(L, "alter_pid", b->pid);
	lab_verdict(L, alter == 1 && reader == 1 && strcmp(blockers, want) == 0,
	            "A reads in an open transaction; ALTER TABLE (B) %s; a new plain SELECT (C) %s, blocked"
	            " by %s = the ALTER's pid", alter == 1 ? "waits" : "did not wait",
	            reader == 1 ? "queues" : "did not wait", blockers);
}

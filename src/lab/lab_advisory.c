/* lab_advisory.c - advisory locks: one holder at a time, the pool trap, transaction scope,
 * stacking, the end of a session, shared locks, the two key spaces, and locks taken under LIMIT
 *
 * The first five are the classic advisory-lock lab, which ran through a connection pool; here
 * every "connection" is a session of its own, which is what the pool handed out. Each prints a
 * fixed numbered result line and PASSes only with the expected numbers. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "lab_int.h"

#define KEYP(buf, L, n) const char *kp[1] = { lab_fmt(buf, lab_key(L, n)) }

/* ---- one holder at a time: a singleton job ---- */

struct singleton {
	int64_t key;
	int ran;
	int unlocked_ok;
};

static void singleton_worker(lab *L, lab_sess *s, int i, void *arg)
{
	(void)i;
	struct singleton *st = arg;
	char k[24];
	const char *kp[1] = { lab_fmt(k, st->key) };
	/* All five instances are connected; they start together. */
	if (!lab_barrier(L))
		return;
	bool got;
	if (!lab_bool(L, s, "SELECT pg_try_advisory_lock($1::bigint)", 1, kp, &got))
		return;
	/* Every instance has tried before the one that got the lock runs its job, so the count
	 * below is about contention, not about who happened to start late. */
	if (!lab_barrier(L) || !got)
		return;
	__atomic_add_fetch(&st->ran, 1, __ATOMIC_SEQ_CST);
	pgc__sleep_ms(150); /* the job */
	bool unlocked;
	if (lab_bool(L, s, "SELECT pg_advisory_unlock($1::bigint)", 1, kp, &unlocked) && unlocked)
		__atomic_add_fetch(&st->unlocked_ok, 1, __ATOMIC_SEQ_CST);
}

void lab_exp_singleton(lab *L)
{
	struct singleton st = { lab_key(L, 0), 0, 0 };
	lab_sess *s[5];
	for (int i = 0; i < 5; i++)
		if ((s[i] = lab_open(L)) == NULL)
			return;
	if (!lab_threads(L, 5, s, singleton_worker, &st))
		return;
	long long held;
	if (!lab_adv_count(L, st.key, &held))
		return;
	lab_vint(L, "instances", 5);
	lab_vint(L, "ran", st.ran);
	lab_vint(L, "held_after", held);
	lab_verdict(L, st.ran == 1 && st.unlocked_ok == 1 && held == 0,
	            "1. five instances tried a singleton job, instances that ran it: %d", st.ran);
}

/* ---- the pool trap: an unlock from another session ---- */

void lab_exp_pool_trap(lab *L)
{
	char k[24];
	KEYP(k, L, 1);
	lab_sess *a = lab_open(L), *b = a ? lab_open(L) : NULL;
	if (b == NULL)
		return;
	bool locked, unlocked;
	long long held;
	if (!lab_bool(L, a, "SELECT pg_try_advisory_lock($1::bigint)", 1, kp, &locked) ||
	    !lab_bool(L, b, "SELECT pg_advisory_unlock($1::bigint)", 1, kp, &unlocked) ||
	    !lab_adv_count(L, lab_key(L, 1), &held))
		return;
	/* Both sessions stay open, as a pool keeps its idle connections. */
	lab_vbool(L, "locked", locked);
	lab_vbool(L, "unlocked_from_other", unlocked);
	lab_vtext(L, "server_warning", lab_notice(b));
	lab_vint(L, "held_after", held);
	lab_verdict(L, locked && !unlocked && held == 1,
	            "2. lock taken=%s, unlock from another connection=%s, locks held after both went"
	            " back to the pool: %lld", lab_tf(locked), lab_tf(unlocked), held);
}

/* ---- a transaction-level lock ends with its transaction ---- */

void lab_exp_xact_rollback(lab *L)
{
	char k[24];
	KEYP(k, L, 2);
	lab_sess *tx = lab_open(L), *db = tx ? lab_open(L) : NULL;
	if (db == NULL)
		return;
	bool got, other, after;
	if (!lab_exec(L, tx, "BEGIN") ||
	    !lab_bool(L, tx, "SELECT pg_try_advisory_xact_lock($1::bigint)", 1, kp, &got) ||
	    !lab_bool(L, db, "SELECT pg_try_advisory_xact_lock($1::bigint)", 1, kp, &other) ||
	    !lab_exec(L, tx, "ROLLBACK") ||
	    !lab_bool(L, db, "SELECT pg_try_advisory_xact_lock($1::bigint)", 1, kp, &after))
		return;
	lab_vbool(L, "holder", got);
	lab_vbool(L, "second_caller_while_held", other);
	lab_vbool(L, "after_rollback", after);
	lab_verdict(L, got && !other && after,
	            "3. xact lock: holder=%s, second caller while held=%s, after rollback=%s", lab_tf(got),
	            lab_tf(other), lab_tf(after));
}

/* ---- session locks stack ---- */

void lab_exp_stacked_unlock(lab *L)
{
	char k[24];
	KEYP(k, L, 3);
	lab_sess *a = lab_open(L);
	if (a == NULL)
		return;
	bool first, second;
	long long still, after;
	/* The blocking form, as an application would call it: lock_timeout bounds the wait. */
	for (int i = 0; i < 2; i++) {
		char state[6];
		if (!lab_tryp(L, a, "SELECT pg_advisory_lock($1::bigint)", 1, kp, state, NULL))
			return;
		if (state[0] != '\0') {
			lab_fail(L, "session A: pg_advisory_lock(%s) #%d: %s (SQLSTATE %s): another session"
			         " holds the key", k, i + 1, a->lasterr, state);
			return;
		}
	}
	if (!lab_bool(L, a, "SELECT pg_advisory_unlock($1::bigint)", 1, kp, &first) ||
	    !lab_adv_count(L, lab_key(L, 3), &still) ||
	    !lab_bool(L, a, "SELECT pg_advisory_unlock($1::bigint)", 1, kp, &second) ||
	    !lab_adv_count(L, lab_key(L, 3), &after))
		return;
	lab_vbool(L, "first_unlock", first);
	lab_vint(L, "still_held", still);
	lab_vbool(L, "second_unlock", second);
	lab_vint(L, "held_after", after);
	lab_verdict(L, first && still == 1 && second && after == 0,
	            "4. locked twice on one session: first unlock=%s (locks still held: %lld), second"
	            " unlock=%s", lab_tf(first), still, lab_tf(second));
}

/* ---- the session's end releases a leaked lock ---- */

void lab_exp_session_end(lab *L)
{
	char k[24];
	KEYP(k, L, 1);
	lab_sess *a = lab_open(L), *b = a ? lab_open(L) : NULL;
	if (b == NULL)
		return;
	bool locked, unlocked;
	long long before, after = -1;
	/* Leak the lock as result 2 did: the unlock goes to the wrong session. */
	if (!lab_bool(L, a, "SELECT pg_try_advisory_lock($1::bigint)", 1, kp, &locked) ||
	    !lab_bool(L, b, "SELECT pg_advisory_unlock($1::bigint)", 1, kp, &unlocked) ||
	    !lab_adv_count(L, lab_key(L, 1), &before))
		return;
	if (!locked || unlocked) {
		lab_fail(L, "could not leak the lock: taken=%s, unlock from another session=%s", lab_tf(locked),
		         lab_tf(unlocked));
		return;
	}
	lab_close(L, a); /* the session ends */
	/* The backend releases its locks as it exits, a moment after the client hangs up. */
	int64_t deadline = pgc__now_ms() + L->opts.lock_timeout_ms;
	while (lab_adv_count(L, lab_key(L, 1), &after) && after != 0 && pgc__now_ms() < deadline)
		pgc__sleep_ms(10);
	if (lab_failed(L))
		return;
	lab_vint(L, "held_before", before);
	lab_vint(L, "held_after", after);
	lab_verdict(L, before == 1 && after == 0,
	            "5. leaked lock rows before the pool closed its idle connections: %lld, after: %lld",
	            before, after);
}

/* ---- shared locks, key spaces, scope ---- */

void lab_exp_adv_shared(lab *L)
{
	char k[24];
	KEYP(k, L, 10);
	lab_sess *a = lab_open(L), *b = a ? lab_open(L) : NULL, *c = b ? lab_open(L) : NULL;
	if (c == NULL)
		return;
	bool sa, sb, ctry;
	long long shared_rows;
	if (!lab_bool(L, a, "SELECT pg_try_advisory_lock_shared($1::bigint)", 1, kp, &sa) ||
	    !lab_bool(L, b, "SELECT pg_try_advisory_lock_shared($1::bigint)", 1, kp, &sb) ||
	    !lab_int(L, L->obs,
	             "SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND mode = 'ShareLock'"
	             " AND granted AND classid = ($1::bigint >> 32)::oid"
	             " AND objid = ($1::bigint & 4294967295)::oid AND objsubid = 1",
	             1, kp, &shared_rows) ||
	    !lab_bool(L, c, "SELECT pg_try_advisory_lock($1::bigint)", 1, kp, &ctry))
		return;
	if (!lab_send(L, c, "SELECT pg_advisory_lock($1::bigint)", 1, kp))
		return;
	int waited = lab_await_lock_wait(L, c);
	if (waited < 0)
		return;
	bool ua, ub;
	char state[6];
	if (!lab_bool(L, a, "SELECT pg_advisory_unlock_shared($1::bigint)", 1, kp, &ua) ||
	    !lab_bool(L, b, "SELECT pg_advisory_unlock_shared($1::bigint)", 1, kp, &ub) ||
	    !lab_finish(L, c, 0, state, NULL))
		return;
	bool granted = state[0] == '\0';
	lab_vbool(L, "shared_a", sa);
	lab_vbool(L, "shared_b", sb);
	lab_vint(L, "shared_holders", shared_rows);
	lab_vbool(L, "exclusive_try", ctry);
	lab_vbool(L, "exclusive_waited", waited == 1);
	lab_vbool(L, "exclusive_granted_after_release", granted);
	lab_verdict(L, sa && sb && shared_rows == 2 && !ctry && waited == 1 && granted,
	            "two shared holders at once (%lld rows ShareLock); exclusive try=%s, blocking"
	            " exclusive %s, granted once both released: %s", shared_rows, lab_tf(ctry),
	            waited == 1 ? "waited" : "did not wait", granted ? "yes" : state);
}

void lab_exp_adv_keyspaces(lab *L)
{
	int64_t key = lab_key(L, 11);
	/* The same two 32-bit halves, once as one bigint and once as an int4 pair. */
	int32_t hi = (int32_t)(uint32_t)((uint64_t)key >> 32);
	int32_t lo = (int32_t)(uint32_t)((uint64_t)key & 0xffffffffu);
	char kb[24], khi[24], klo[24], uhi[24], ulo[24];
	const char *pbig[1] = { lab_fmt(kb, key) };
	const char *ppair[2] = { lab_fmt(khi, hi), lab_fmt(klo, lo) };
	const char *pobs[2] = { lab_fmt(uhi, (uint32_t)hi), lab_fmt(ulo, (uint32_t)lo) };
	lab_sess *a = lab_open(L), *b = a ? lab_open(L) : NULL;
	if (b == NULL)
		return;
	bool big, pair, pair_vs_pair;
	if (!lab_bool(L, a, "SELECT pg_try_advisory_lock($1::bigint)", 1, pbig, &big) ||
	    !lab_bool(L, b, "SELECT pg_try_advisory_lock($1::int, $2::int)", 2, ppair, &pair) ||
	    !lab_bool(L, a, "SELECT pg_try_advisory_lock($1::int, $2::int)", 2, ppair, &pair_vs_pair))
		return;
	char a_pid[24], b_pid[24];
	lab_fmt(a_pid, a->pid);
	lab_fmt(b_pid, b->pid);
	/* pg_locks splits both the same way; objsubid tells the key spaces apart. */
	char rows[160];
	if (!lab_text(L, L->obs,
	              "SELECT coalesce(string_agg(format('classid=%s objid=%s objsubid=%s', classid,"
	              " objid, objsubid), '; ' ORDER BY objsubid), '')"
	              " FROM pg_locks WHERE locktype = 'advisory' AND granted"
	              " AND classid = $1::bigint::oid AND objid = $2::bigint::oid",
	              2, pobs, rows, sizeof rows))
		return;
	long long sub1, sub2;
	const char *p1[3] = { pobs[0], pobs[1], a_pid };
	const char *p2[3] = { pobs[0], pobs[1], b_pid };
	if (!lab_int(L, L->obs,
	             "SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND granted"
	             " AND classid = $1::bigint::oid AND objid = $2::bigint::oid AND objsubid = 1"
	             " AND pid = $3::int", 3, p1, &sub1) ||
	    !lab_int(L, L->obs,
	             "SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND granted"
	             " AND classid = $1::bigint::oid AND objid = $2::bigint::oid AND objsubid = 2"
	             " AND pid = $3::int", 3, p2, &sub2))
		return;
	lab_vtext(L, "bigint_key", kb);
	lab_vint(L, "int4_classid", hi);
	lab_vint(L, "int4_objid", lo);
	lab_vbool(L, "bigint_lock", big);
	lab_vbool(L, "int4_pair_lock_other_session", pair);
	lab_vbool(L, "int4_pair_lock_same_halves_again", pair_vs_pair);
	lab_vtext(L, "pg_locks", rows);
	lab_verdict(L, big && pair && !pair_vs_pair && sub1 == 1 && sub2 == 1,
	            "bigint %s held by A and int4 pair (%d, %d) held by B at once: pg_locks %s",
	            kb, hi, lo, rows);
}

void lab_exp_adv_rollback(lab *L)
{
	char k[24];
	KEYP(k, L, 12);
	lab_sess *a = lab_open(L), *b = a ? lab_open(L) : NULL;
	if (b == NULL)
		return;
	bool other, unlocked;
	long long held;
	if (!lab_exec(L, a, "BEGIN") ||
	    !lab_execp(L, a, "SELECT pg_advisory_lock($1::bigint)", 1, kp) ||
	    !lab_exec(L, a, "ROLLBACK") ||
	    !lab_adv_count(L, lab_key(L, 12), &held) ||
	    !lab_bool(L, b, "SELECT pg_try_advisory_lock($1::bigint)", 1, kp, &other) ||
	    !lab_bool(L, a, "SELECT pg_advisory_unlock($1::bigint)", 1, kp, &unlocked))
		return;
	lab_vint(L, "held_after_rollback", held);
	lab_vbool(L, "other_session_try", other);
	lab_vbool(L, "unlock_after", unlocked);
	lab_verdict(L, held == 1 && !other && unlocked,
	            "session lock taken inside a transaction that rolled back: still held (%lld row),"
	            " other session's try=%s, explicit unlock=%s", held, lab_tf(other), lab_tf(unlocked));
}

void lab_exp_adv_xact_autocommit(lab *L)
{
	char k[24];
	KEYP(k, L, 13);
	lab_sess *a = lab_open(L), *b = a ? lab_open(L) : NULL;
	if (b == NULL)
		return;
	bool other;
	long long held;
	if (!lab_execp(L, a, "SELECT pg_advisory_xact_lock($1::bigint)", 1, kp) ||
	    !lab_adv_count(L, lab_key(L, 13), &held) ||
	    !lab_bool(L, b, "SELECT pg_try_advisory_xact_lock($1::bigint)", 1, kp, &other))
		return;
	lab_vint(L, "held_after_statement", held);
	lab_vbool(L, "other_session_try", other);
	lab_verdict(L, held == 0 && other,
	            "pg_advisory_xact_lock outside a transaction block: locks held right after it: %lld,"
	            " another session's try=%s (it protected nothing)", held, lab_tf(other));
}

/* ---- a lock function and LIMIT ---- */

/* Advisory locks A's transaction holds now. */
static bool xact_locks(lab *L, lab_sess *a, long long *n)
{
	char pid[24];
	const char *pp[1] = { lab_fmt(pid, a->pid) };
	return lab_int(L, L->obs,
	               "SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND pid = $1::int",
	               1, pp, n);
}

static bool count_locks_of(lab *L, lab_sess *a, const char *sql, long long *n)
{
	return lab_exec(L, a, "BEGIN") && lab_exec(L, a, sql) && xact_locks(L, a, n) &&
	       lab_exec(L, a, "ROLLBACK");
}

void lab_exp_adv_limit(lab *L)
{
	char k[24];
	KEYP(k, L, 100);
	lab_sess *a = lab_open(L);
	if (a == NULL)
		return;
	if (!lab_exec(L, a, "CREATE TABLE tenants (id int PRIMARY KEY, lock_key bigint NOT NULL)") ||
	    !lab_execp(L, a, "INSERT INTO tenants SELECT g, $1::bigint + g FROM generate_series(1, 10) g",
	               1, kp) ||
	    !lab_exec(L, a, "ANALYZE tenants"))
		return;
	long long in_subquery, distinct, fixed, plain;
	/* The lock function in the select list of a subquery (or a view) read with ORDER BY ...
	 * LIMIT: the subquery is not flattened (it has a volatile function), so every row is
	 * locked before the sort and the limit. */
	if (!count_locks_of(L, a,
	                    "SELECT id, locked FROM (SELECT id, pg_try_advisory_xact_lock(lock_key) AS locked"
	                    " FROM tenants) s ORDER BY id LIMIT 3", &in_subquery) ||
	    !count_locks_of(L, a,
	                    "SELECT DISTINCT id, pg_try_advisory_xact_lock(lock_key) FROM tenants"
	                    " ORDER BY id LIMIT 3", &distinct) ||
	    /* The fix the manual gives: choose the rows in a subquery, lock its output. */
	    !count_locks_of(L, a,
	                    "SELECT pg_advisory_xact_lock(q.lock_key) FROM"
	                    " (SELECT lock_key FROM tenants ORDER BY id LIMIT 3) AS q", &fixed) ||
	    /* For the record: the planner evaluates a volatile select list after a plain sort. */
	    !count_locks_of(L, a,
	                    "SELECT pg_try_advisory_xact_lock(lock_key) FROM tenants ORDER BY id LIMIT 3",
	                    &plain))
		return;
	lab_vint(L, "limit", 3);
	lab_vint(L, "rows", 10);
	lab_vint(L, "locks_select_list_in_subquery", in_subquery);
	lab_vint(L, "locks_select_list_distinct", distinct);
	lab_vint(L, "locks_subquery_limit_first", fixed);
	lab_vint(L, "locks_plain_order_by_limit", plain);
	lab_verdict(L, in_subquery > 3 && distinct > 3 && fixed == 3,
	            "LIMIT 3 of 10 rows: lock function in a subquery's select list took %lld locks, with"
	            " DISTINCT %lld; LIMIT in a subquery then lock took %lld (plain ORDER BY id LIMIT 3:"
	            " %lld, evaluated after the sort)", in_subquery, distinct, fixed, plain);
}

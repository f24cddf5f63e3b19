/* lab_limits.c - where the lock machinery's limits and timers show: NOWAIT and SKIP LOCKED
 * behind a table lock, the deadlock check's delay, the idle-in-transaction timeout, and the
 * shared lock table that session advisory locks can fill */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "lab_int.h"

/* ---- NOWAIT and SKIP LOCKED are about rows, not tables ---- */

#define TABLE_LOCK_WAIT_MS 500

/* Sends sql on s behind A's ACCESS EXCLUSIVE lock; *waited whether s was seen waiting, *ms how
 * long until its answer, state its SQLSTATE. */
static bool behind_table_lock(lab *L, lab_sess *s, const char *sql, bool *waited, long long *ms,
                              char state[6])
{
	int64_t t0 = pgc__now_ms();
	int w = lab_waits(L, s, sql);
	if (w < 0 || !lab_finish(L, s, 0, state, NULL))
		return false;
	*ms = pgc__now_ms() - t0;
	*waited = w == 1;
	return true;
}

void lab_exp_nowait_table_lock(lab *L)
{
	lab_sess *a = lab_open(L), *b = a ? lab_open(L) : NULL;
	if (b == NULL || !lab_make_items(L, a, 3))
		return;
	char lt[24];
	snprintf(lt, sizeof lt, "%dms", TABLE_LOCK_WAIT_MS);
	const char *p[1] = { lt };
	if (!lab_execp(L, b, "SELECT set_config('lock_timeout', $1, false)", 1, p) ||
	    !lab_exec(L, a, "BEGIN; LOCK TABLE items IN ACCESS EXCLUSIVE MODE"))
		return;
	bool w_nowait, w_skip, w_lock;
	long long ms_nowait, ms_skip, ms_lock;
	char s_nowait[6], s_skip[6], s_lock[6];
	char m_nowait[256], m_skip[256], m_lock[256];
	if (!behind_table_lock(L, b, "SELECT id FROM items WHERE id = 1 FOR UPDATE NOWAIT", &w_nowait,
	                       &ms_nowait, s_nowait))
		return;
	snprintf(m_nowait, sizeof m_nowait, "%s", s_nowait[0] ? b->lasterr : "");
	if (!behind_table_lock(L, b, "SELECT id FROM items FOR UPDATE SKIP LOCKED", &w_skip, &ms_skip,
	                       s_skip))
		return;
	snprintf(m_skip, sizeof m_skip, "%s", s_skip[0] ? b->lasterr : "");
	if (!behind_table_lock(L, b, "BEGIN; LOCK TABLE items IN ROW SHARE MODE NOWAIT", &w_lock,
	                       &ms_lock, s_lock))
		return;
	snprintf(m_lock, sizeof m_lock, "%s", s_lock[0] ? b->lasterr : "");
	if (!lab_exec(L, b, "ROLLBACK") || !lab_exec(L, a, "ROLLBACK"))
		return;
	/* The two row-lock clauses end by lock_timeout (its message, after the timeout); LOCK
	 * TABLE ... NOWAIT by NOWAIT itself, without waiting. */
	bool nowait_timed_out = strcmp(s_nowait, "55P03") == 0 && strstr(m_nowait, "lock timeout") &&
	                        w_nowait && ms_nowait >= TABLE_LOCK_WAIT_MS;
	bool skip_timed_out = strcmp(s_skip, "55P03") == 0 && strstr(m_skip, "lock timeout") &&
	                      w_skip && ms_skip >= TABLE_LOCK_WAIT_MS;
	bool lock_at_once = strcmp(s_lock, "55P03") == 0 && strstr(m_lock, "lock timeout") == NULL &&
	                    !w_lock;
	lab_vint(L, "lock_timeout_ms", TABLE_LOCK_WAIT_MS);
	lab_vtext(L, "for_update_nowait_sqlstate", s_nowait[0] ? s_nowait : "ok");
	lab_vtext(L, "for_update_nowait_message", m_nowait);
	lab_vbool(L, "for_update_nowait_waited", w_nowait);
	lab_vint(L, "for_update_nowait_ms", ms_nowait);
	lab_vtext(L, "skip_locked_sqlstate", s_skip[0] ? s_skip : "ok");
	lab_vtext(L, "skip_locked_message", m_skip);
	lab_vbool(L, "skip_locked_waited", w_skip);
	lab_vint(L, "skip_locked_ms", ms_skip);
	lab_vtext(L, "lock_table_nowait_sqlstate", s_lock[0] ? s_lock : "ok");
	lab_vtext(L, "lock_table_nowait_message", m_lock);
	lab_vbool(L, "lock_table_nowait_waited", w_lock);
	lab_vint(L, "lock_table_nowait_ms", ms_lock);
	lab_verdict(L, nowait_timed_out && skip_timed_out && lock_at_once,
	            "behind ACCESS EXCLUSIVE, lock_timeout %d ms: FOR UPDATE NOWAIT %s, %s after %lld ms"
	            " (\"%s\"); SKIP LOCKED %s, %s after %lld ms; LOCK TABLE ... ROW SHARE NOWAIT: %s"
	            " (\"%s\") %s", TABLE_LOCK_WAIT_MS, w_nowait ? "waited" : "did not wait",
	            s_nowait[0] ? s_nowait : "rows", ms_nowait, m_nowait,
	            w_skip ? "waited" : "did not wait", s_skip[0] ? s_skip : "rows", ms_skip,
	            s_lock[0] ? s_lock : "granted", m_lock, w_lock ? "after waiting" : "at once");
}

/* ---- the deadlock check waits for deadlock_timeout ---- */

/* One cycle with deadlock_timeout = dt_ms: A waits for B's row long enough that A's own
 * (single) check has found nothing, then B closes the cycle and is the victim after its own
 * deadlock_timeout. *delay_ms: from B's statement to its 40P01. */
static bool timed_cycle(lab *L, lab_sess *a, lab_sess *b, int dt_ms, long long *delay_ms,
                        char victim[8])
{
	char dt[24], lt[24];
	snprintf(dt, sizeof dt, "%dms", dt_ms);
	snprintf(lt, sizeof lt, "%dms", dt_ms + L->opts.lock_timeout_ms);
	const char *p[2] = { dt, lt };
	static const char set[] = "SELECT set_config('deadlock_timeout', $1, false),"
	                          " set_config('lock_timeout', $2, false)";
	if (!lab_execp(L, a, set, 2, p) || !lab_execp(L, b, set, 2, p) ||
	    !lab_exec(L, a, "BEGIN; UPDATE accounts SET balance = balance - 1 WHERE id = 1") ||
	    !lab_exec(L, b, "BEGIN; UPDATE accounts SET balance = balance - 1 WHERE id = 2"))
		return false;
	if (lab_waits(L, a, "UPDATE accounts SET balance = balance + 1 WHERE id = 2") != 1) {
		if (!lab_failed(L))
			lab_fail(L, "session A did not wait for B's row");
		return false;
	}
	/* Well past A's deadlock_timeout (a busy machine may run A's timer late): A's check has
	 * run, found no cycle, and does not run again for this wait. */
	pgc__sleep_ms(dt_ms + 300);
	int limit = dt_ms + L->opts.lock_timeout_ms + 5000;
	char sa[6], sb[6];
	int64_t t0 = pgc__now_ms();
	if (!lab_send(L, b, "UPDATE accounts SET balance = balance + 1 WHERE id = 1", 0, NULL) ||
	    !lab_finish(L, b, limit, sb, NULL))
		return false;
	*delay_ms = pgc__now_ms() - t0;
	if (strcmp(sb, "40P01") == 0) {
		snprintf(victim, 8, "B");
		if (!lab_exec(L, b, "ROLLBACK") || !lab_finish(L, a, limit, sa, NULL) ||
		    !lab_exec(L, a, "ROLLBACK"))
			return false;
	} else {
		/* A was chosen after all: B's UPDATE went through once A rolled back. */
		if (!lab_finish(L, a, limit, sa, NULL))
			return false;
		snprintf(victim, 8, "%s", strcmp(sa, "40P01") == 0 ? "A" : "none");
		if (!lab_exec(L, a, "ROLLBACK") || !lab_exec(L, b, "ROLLBACK"))
			return false;
	}
	return true;
}

void lab_exp_deadlock_timeout(lab *L)
{
	lab_sess *a = lab_open(L), *b = a ? lab_open(L) : NULL;
	if (b == NULL || !lab_exec(L, a, "CREATE TABLE accounts (id int PRIMARY KEY, balance int NOT NULL);"
	                                 " INSERT INTO accounts VALUES (1, 100), (2, 100)"))
		return;
	/* deadlock_timeout is superuser-only (or granted with SET ON PARAMETER): without the right
	 * the claim cannot be checked, and the result says so. */
	char state[6];
	if (!lab_try(L, a, "SET deadlock_timeout = '200ms'", state))
		return;
	lab_vbool(L, "may_set_deadlock_timeout", state[0] == '\0');
	if (state[0] != '\0') {
		lab_vtext(L, "sqlstate", state);
		lab_verdict(L, false, "not checked: this role may not SET deadlock_timeout (%s, SQLSTATE %s);"
		            " run it as a superuser or after GRANT SET ON PARAMETER deadlock_timeout",
		            a->lasterr, state);
		return;
	}
	static const int timeouts[2] = { 200, 1000 };
	long long delay[2];
	char victim[2][8];
	for (int i = 0; i < 2; i++)
		if (!timed_cycle(L, a, b, timeouts[i], &delay[i], victim[i]))
			return;
	bool ok = true;
	for (int i = 0; i < 2; i++)
		ok = ok && strcmp(victim[i], "B") == 0 && delay[i] >= timeouts[i] &&
		     delay[i] < timeouts[i] + 2000;
	lab_vint(L, "deadlock_timeout_1_ms", timeouts[0]);
	lab_vint(L, "victim_1_after_ms", delay[0]);
	lab_vtext(L, "victim_1", victim[0]);
	lab_vint(L, "deadlock_timeout_2_ms", timeouts[1]);
	lab_vint(L, "victim_2_after_ms", delay[1]);
	lab_vtext(L, "victim_2", victim[1]);
	lab_verdict(L, ok,
	            "the session closing the cycle got 40P01 after %lld ms with deadlock_timeout = %d ms"
	            " and after %lld ms with %d ms (victims %s, %s)", delay[0], timeouts[0], delay[1],
	            timeouts[1], victim[0], victim[1]);
}

/* ---- idle_in_transaction_session_timeout ends an idle holder ---- */

#define IDLE_TIMEOUT_MS 500

void lab_exp_idle_in_tx_timeout(lab *L)
{
	lab_sess *a = lab_open(L), *b = a ? lab_open(L) : NULL;
	if (b == NULL || !lab_make_items(L, a, 1))
		return;
	char it[24], lt[24], pa[24];
	snprintf(it, sizeof it, "%dms", IDLE_TIMEOUT_MS);
	/* B must outwait the holder's timeout, whatever --timeout says. */
	snprintf(lt, sizeof lt, "%dms", IDLE_TIMEOUT_MS + L->opts.lock_timeout_ms);
	const char *pi[1] = { it }, *pl[1] = { lt }, *qa[1] = { lab_fmt(pa, a->pid) };
	if (!lab_execp(L, a, "SELECT set_config('idle_in_transaction_session_timeout', $1, false)", 1,
	               pi) ||
	    !lab_execp(L, b, "SELECT set_config('lock_timeout', $1, false)", 1, pl) ||
	    !lab_exec(L, a, "BEGIN; SELECT id FROM items WHERE id = 1 FOR UPDATE"))
		return;
	/* A now sits idle in its transaction, holding the row. */
	int64_t t0 = pgc__now_ms();
	int w = lab_waits(L, b, "UPDATE items SET v = v + 1 WHERE id = 1");
	char bstate[6];
	if (w < 0 || !lab_finish(L, b, IDLE_TIMEOUT_MS + L->opts.lock_timeout_ms + 5000, bstate, NULL))
		return;
	long long waited = pgc__now_ms() - t0;
	/* The server ended A's session: it is gone from pg_stat_activity (a moment after). */
	long long a_alive = 1;
	int64_t deadline = pgc__now_ms() + L->opts.lock_timeout_ms;
	while (lab_int(L, L->obs, "SELECT count(*) FROM pg_stat_activity WHERE pid = $1::int", 1, qa,
	               &a_alive) && a_alive != 0 && pgc__now_ms() < deadline)
		pgc__sleep_ms(10);
	if (lab_failed(L))
		return;
	char astate[6];
	if (!lab_try_or_lost(L, a, "SELECT 1", astate))
		return;
	char amsg[256];
	snprintf(amsg, sizeof amsg, "%s", strcmp(astate, "conn") == 0 || astate[0] == '\0' ? "" : a->lasterr);
	/* 25P03 is the error the server sends as it closes the session; when the client reads the
	 * closed socket first, the connection is simply gone. */
	bool a_ended = strcmp(astate, "conn") == 0 || strcmp(astate, "25P03") == 0 ||
	               strcmp(astate, "57P05") == 0;
	lab_vint(L, "idle_in_transaction_session_timeout_ms", IDLE_TIMEOUT_MS);
	lab_vbool(L, "waiter_waited", w == 1);
	lab_vtext(L, "waiter_sqlstate", bstate[0] ? bstate : "ok");
	lab_vint(L, "waiter_got_row_after_ms", waited);
	lab_vint(L, "holder_backend_rows", a_alive);
	lab_vtext(L, "holder_next_statement", astate[0] ? astate : "ok");
	lab_vtext(L, "holder_next_message", amsg);
	lab_verdict(L, w == 1 && bstate[0] == '\0' && waited >= IDLE_TIMEOUT_MS && a_alive == 0 && a_ended,
	            "A held a row idle in its transaction with idle_in_transaction_session_timeout = %d"
	            " ms; B's UPDATE %s and got the row after %lld ms; A's next statement: %s%s%s",
	            IDLE_TIMEOUT_MS, w == 1 ? "waited" : "did not wait", waited,
	            strcmp(astate, "conn") == 0 ? "connection closed" : astate[0] ? astate : "answered",
	            amsg[0] ? " " : "", amsg);
}

/* ---- session advisory locks share one lock table with everyone ---- */

#define EXHAUST_BOUNDED 150
#define EXHAUST_BATCH 256

/* Runs sql on the observer expecting one integer, but an error is an outcome (the lock table
 * may be full): *out = -1 and state gets its SQLSTATE. */
static bool obs_int_or_error(lab *L, const char *sql, int nparams, const char *const *params,
                             long long *out, char state[6])
{
	PGresult *res = NULL;
	*out = -1;
	if (!lab_tryp(L, L->obs, sql, nparams, params, state, &res))
		return false;
	if (res != NULL && PQntuples(res) == 1)
		*out = strtoll(PQgetvalue(res, 0, 0), NULL, 10);
	PQclear(res);
	return true;
}

/* Takes session advisory locks on b, EXHAUST_BATCH keys a statement from key_base upwards,
 * until the server refuses (state = its SQLSTATE) or cap keys are taken. *ok_keys: the keys
 * of the batches that succeeded. */
static bool take_until_refused(lab *L, lab_sess *b, long long cap, long long *ok_keys,
                               char state[6], char msg[256])
{
	char kb[24], from[24], to[24];
	const char *p[3] = { lab_fmt(kb, lab_key(L, 0)), from, to };
	*ok_keys = 0;
	state[0] = msg[0] = '\0';
	while (*ok_keys < cap) {
		lab_fmt(from, *ok_keys);
		lab_fmt(to, *ok_keys + EXHAUST_BATCH - 1);
		if (!lab_tryp(L, b, "SELECT count(pg_advisory_lock($1::bigint + g))"
		                    " FROM generate_series($2::bigint, $3::bigint) g", 3, p, state, NULL))
			return false;
		if (state[0] != '\0') {
			snprintf(msg, 256, "%s", b->lasterr);
			return true;
		}
		*ok_keys += EXHAUST_BATCH;
	}
	return true;
}

void lab_exp_advisory_exhaust(lab *L)
{
	lab_sess *b = lab_open(L), *c = b ? lab_open(L) : NULL;
	if (c == NULL || !lab_exec(L, c, "CREATE TABLE big (id int NOT NULL)"))
		return;
	long long mlpt, mc, mpt, others;
	char pids[80], pb[24];
	snprintf(pids, sizeof pids, "{%d,%d,%d}", L->obs->pid, b->pid, c->pid);
	const char *pp[1] = { pids }, *qb[1] = { lab_fmt(pb, b->pid) };
	if (!lab_int(L, L->obs, "SELECT current_setting('max_locks_per_transaction')::bigint", 0, NULL,
	             &mlpt) ||
	    !lab_int(L, L->obs, "SELECT current_setting('max_connections')::bigint", 0, NULL, &mc) ||
	    !lab_int(L, L->obs, "SELECT current_setting('max_prepared_transactions')::bigint", 0, NULL,
	             &mpt) ||
	    !lab_int(L, L->obs,
	             "SELECT count(*) FROM pg_stat_activity WHERE backend_type = 'client backend'"
	             " AND pid <> ALL ($1::int[])", 1, pp, &others))
		return;
	long long slots = mlpt * (mc + mpt);
	/* Filling the table makes every session of the server that needs a new lock fail until
	 * the locks go: only when asked, and only with nobody else connected. */
	bool exhaust = L->opts.allow_exhaust && others == 0;
	const char *why = !L->opts.allow_exhaust ? "allow_exhaust (--allow-exhaust) is off"
	                                         : "other client sessions are connected";
	static const char held_sql[] =
	        "SELECT count(*) FROM pg_locks WHERE pid = $1::int AND locktype = 'advisory'";
	long long ok_keys = 0, held = -1, held_after, cap = 20 * slots + 10000;
	char state[6] = "", msg[256] = "", hstate[6] = "", other_state[6] = "";
	if (exhaust) {
		if (!take_until_refused(L, b, cap, &ok_keys, state, msg) ||
		    !obs_int_or_error(L, held_sql, 1, qb, &held, hstate))
			return;
		/* While the table is full, another session's new lock fails too: the pool is shared. */
		char k[24];
		const char *pk[1] = { lab_fmt(k, lab_key(L, 0) - 1) };
		if (!lab_tryp(L, c, "SELECT pg_advisory_xact_lock($1::bigint)", 1, pk, other_state, NULL))
			return;
		/* The locks end with the session that holds them. Until its backend has gone the
		 * table is still full, and the observer's look at pg_stat_activity (which locks shared
		 * catalogs, outside the fast path) may be refused too: that is a "not yet". */
		lab_close(L, b);
		int64_t deadline = pgc__now_ms() + L->opts.lock_timeout_ms;
		char ostate[6];
		for (;;) {
			if (!obs_int_or_error(L, "SELECT count(*) FROM pg_stat_activity WHERE pid = $1::int", 1, qb,
			                      &held_after, ostate))
				return;
			if ((ostate[0] == '\0' && held_after == 0) || pgc__now_ms() >= deadline)
				break;
			pgc__sleep_ms(10);
		}
		if (lab_failed(L) || !lab_int(L, L->obs, held_sql, 1, qb, &held_after))
			return;
	} else {
		char from[24], to[24];
		const char *p[2] = { lab_fmt(from, lab_key(L, 0)), lab_fmt(to, lab_key(L, EXHAUST_BOUNDED - 1)) };
		if (!lab_execp(L, b, "SELECT count(pg_advisory_lock(k)) FROM generate_series($1::bigint, $2::bigint) k",
		               2, p) ||
		    !lab_int(L, L->obs, held_sql, 1, qb, &held) ||
		    !lab_exec(L, b, "SELECT pg_advisory_unlock_all()") ||
		    !lab_int(L, L->obs, held_sql, 1, qb, &held_after))
			return;
		ok_keys = EXHAUST_BOUNDED;
	}
	/* The server is usable: a lock that needs the shared table (ACCESS EXCLUSIVE cannot take
	 * the per-session fast path) is granted, and so is an advisory lock. */
	char k[24], ustate[6];
	const char *pk[1] = { lab_fmt(k, lab_key(L, 0)) };
	if (!lab_exec(L, c, "BEGIN; LOCK TABLE big IN ACCESS EXCLUSIVE MODE") ||
	    !lab_tryp(L, c, "SELECT pg_advisory_xact_lock($1::bigint)", 1, pk, ustate, NULL) ||
	    !lab_exec(L, c, ustate[0] ? "ROLLBACK" : "COMMIT"))
		return;
	bool usable = ustate[0] == '\0';
	/* Far more rows than advisory locks, locked FOR UPDATE: row locks live in the rows. */
	long long base = held > ok_keys ? held : ok_keys;
	long long rows = 10 * (base > slots ? base : slots);
	long long max_rows = exhaust ? 1000000 : 200000;
	rows = rows < 10000 ? 10000 : rows > max_rows ? max_rows : rows;
	char nrows[24], pc[24];
	const char *pr[1] = { lab_fmt(nrows, rows) }, *qc[1] = { lab_fmt(pc, c->pid) };
	long long locked, row_entries, tuple_entries;
	if (!lab_execp(L, c, "INSERT INTO big SELECT g FROM generate_series(1, $1::int) g", 1, pr) ||
	    !lab_exec(L, c, "BEGIN") ||
	    !lab_int(L, c, "SELECT count(*) FROM (SELECT id FROM big FOR UPDATE) AS s", 0, NULL, &locked) ||
	    !lab_int(L, L->obs, "SELECT count(*) FROM pg_locks WHERE pid = $1::int", 1, qc, &row_entries) ||
	    !lab_int(L, L->obs, "SELECT count(*) FROM pg_locks WHERE pid = $1::int AND locktype = 'tuple'",
	             1, qc, &tuple_entries) ||
	    !lab_exec(L, c, "COMMIT"))
		return;
	bool rows_ok = locked == rows && row_entries < 20 && tuple_entries == 0;

	lab_vbool(L, "exhausted", exhaust);
	lab_vint(L, "max_locks_per_transaction", mlpt);
	lab_vint(L, "max_connections", mc);
	lab_vint(L, "max_prepared_transactions", mpt);
	lab_vint(L, "lock_table_slots", slots);
	lab_vint(L, "other_client_sessions", others);
	lab_vint(L, "advisory_locks_held", held);
	if (exhaust) {
		lab_vtext(L, "sqlstate", state[0] ? state : "ok");
		lab_vtext(L, "message", msg);
		lab_vtext(L, "other_session_sqlstate", other_state[0] ? other_state : "ok");
	} else {
		lab_vtext(L, "not_exhausted_because", why);
	}
	lab_vint(L, "advisory_locks_after_release", held_after);
	lab_vbool(L, "server_usable_after", usable);
	lab_vint(L, "rows_locked", locked);
	lab_vint(L, "row_lock_pg_locks_rows", row_entries);
	lab_vint(L, "row_lock_tuple_rows", tuple_entries);
	if (exhaust)
		lab_verdict(L, strcmp(state, "53200") == 0 && held >= slots && held_after == 0 && usable &&
		                   rows_ok,
		            "session B took %lld session advisory locks, then %s \"%s\" (max_locks_per_transaction"
		            " %lld x (max_connections %lld + max_prepared_transactions %lld) = %lld); another"
		            " session's lock meanwhile: %s; after B ended %lld were left and new locks were"
		            " granted; %lld rows FOR UPDATE took %lld pg_locks rows, %lld of them tuples",
		            held, state[0] ? state : "no error", msg, mlpt, mc, mpt, slots,
		            other_state[0] ? other_state : "granted", held_after, locked, row_entries,
		            tuple_entries);
	else
		lab_verdict(L, held == EXHAUST_BOUNDED && held_after == 0 && usable && rows_ok,
		            "bounded, not exhausted because %s: %lld session advisory locks took %lld of the %lld"
		            " lock-table slots (max_locks_per_transaction %lld x (max_connections %lld +"
		            " max_prepared_transactions %lld)); %lld rows FOR UPDATE took %lld pg_locks rows,"
		            " %lld of them tuples", why, ok_keys, held, slots, mlpt, mc, mpt, locked,
		            row_entries, tuple_entries);
}

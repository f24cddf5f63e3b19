/* lab_patterns.c - concurrency patterns and how they fail: read-then-write oversells,
 * check-then-insert admits duplicates, savepoints release what came after them, lock cycles
 * deadlock, timeouts end waits, and blockers are found and ended */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "lab_int.h"

/* A statement every thread runs once, all at the same moment; rows counts the rows they got
 * back between them. */
struct at_once {
	const char *sql;
	const char *param; /* its one parameter, or NULL */
	int rows;
};

static void run_at_once(lab *L, lab_sess *s, int i, void *arg)
{
	(void)i;
	struct at_once *o = arg;
	const char *p[1] = { o->param };
	if (!lab_barrier(L))
		return;
	PGresult *res = lab_query(L, s, o->sql, o->param ? 1 : 0, o->param ? p : NULL);
	if (res == NULL)
		return;
	__atomic_add_fetch(&o->rows, PQntuples(res), __ATOMIC_SEQ_CST);
	PQclear(res);
}

/* ---- read-then-write against the conditional UPDATE ---- */

#define OVERSELL_SESSIONS 8
#define OVERSELL_STOCK 3

/* arg counts the units sold. */
static void read_then_write(lab *L, lab_sess *s, int i, void *arg)
{
	(void)i;
	int *sold = arg;
	long long stock;
	if (!lab_barrier(L) ||
	    !lab_int(L, s, "SELECT stock FROM products WHERE id = 10", 0, NULL, &stock))
		return;
	/* Everyone has read before anyone writes: the race of read-then-write, made certain. */
	if (!lab_barrier(L) || stock <= 0)
		return;
	if (lab_exec(L, s, "UPDATE products SET stock = stock - 1 WHERE id = 10"))
		__atomic_add_fetch(sold, 1, __ATOMIC_SEQ_CST);
}

void lab_exp_oversell(lab *L)
{
	lab_sess *s[OVERSELL_SESSIONS];
	for (int i = 0; i < OVERSELL_SESSIONS; i++)
		if ((s[i] = lab_open(L)) == NULL)
			return;
	char st[24];
	const char *p[1] = { lab_fmt(st, OVERSELL_STOCK) };
	int naive_sold = 0;
	struct at_once safe = { "UPDATE products SET stock = stock - 1 WHERE id = 10 AND stock > 0"
	                        " RETURNING id, stock", NULL, 0 };
	long long naive_stock, safe_stock;
	if (!lab_exec(L, s[0], "CREATE TABLE products (id int PRIMARY KEY, stock int NOT NULL)") ||
	    !lab_execp(L, s[0], "INSERT INTO products VALUES (10, $1::int)", 1, p) ||
	    !lab_threads(L, OVERSELL_SESSIONS, s, read_then_write, &naive_sold) ||
	    !lab_int(L, s[0], "SELECT stock FROM products WHERE id = 10", 0, NULL, &naive_stock) ||
	    !lab_execp(L, s[0], "UPDATE products SET stock = $1::int WHERE id = 10", 1, p) ||
	    !lab_threads(L, OVERSELL_SESSIONS, s, run_at_once, &safe) ||
	    !lab_int(L, s[0], "SELECT stock FROM products WHERE id = 10", 0, NULL, &safe_stock))
		return;
	lab_vint(L, "sessions", OVERSELL_SESSIONS);
	lab_vint(L, "stock", OVERSELL_STOCK);
	lab_vint(L, "read_then_write_sold", naive_sold);
	lab_vint(L, "read_then_write_final_stock", naive_stock);
	lab_vint(L, "conditional_sold", safe.rows);
	lab_vint(L, "conditional_final_stock", safe_stock);
	lab_verdict(L, naive_sold > OVERSELL_STOCK && naive_stock < 0 && safe.rows == OVERSELL_STOCK &&
	                   safe_stock == 0,
	            "%d sessions, stock %d: read-then-write sold %d (stock now %lld); UPDATE ... WHERE"
	            " stock > 0 RETURNING sold %d (stock now %lld)", OVERSELL_SESSIONS, OVERSELL_STOCK,
	            naive_sold, naive_stock, safe.rows, safe_stock);
}

/* ---- check-then-insert against a unique constraint ---- */

#define EMAIL_SESSIONS 4

/* arg counts the rows inserted. */
static void check_then_insert(lab *L, lab_sess *s, int i, void *arg)
{
	(void)i;
	int *inserted = arg;
	static const char *const p[1] = { "a@example.com" };
	if (!lab_barrier(L) || !lab_exec(L, s, "BEGIN"))
		return;
	PGresult *res = lab_query(L, s, "SELECT email FROM users WHERE email = $1 FOR UPDATE", 1, p);
	if (res == NULL)
		return;
	int found = PQntuples(res);
	PQclear(res);
	/* Every session has checked (and locked nothing: there is no row) before any inserts. */
	if (!lab_barrier(L))
		return;
	if (found == 0) {
		if (!lab_execp(L, s, "INSERT INTO users (email) VALUES ($1)", 1, p))
			return;
		__atomic_add_fetch(inserted, 1, __ATOMIC_SEQ_CST);
	}
	lab_exec(L, s, "COMMIT");
}

void lab_exp_unique_email(lab *L)
{
	lab_sess *s[EMAIL_SESSIONS];
	for (int i = 0; i < EMAIL_SESSIONS; i++)
		if ((s[i] = lab_open(L)) == NULL)
			return;
	int inserted = 0;
	struct at_once claim = { "INSERT INTO claims (email) VALUES ($1) ON CONFLICT (email) DO NOTHING"
	                         " RETURNING email", "a@example.com", 0 };
	long long dup_rows, claim_rows;
	if (!lab_exec(L, s[0], "CREATE TABLE users (id serial PRIMARY KEY, email text NOT NULL)") ||
	    !lab_exec(L, s[0], "CREATE TABLE claims (email text PRIMARY KEY)") ||
	    !lab_threads(L, EMAIL_SESSIONS, s, check_then_insert, &inserted) ||
	    !lab_int(L, s[0], "SELECT count(*) FROM users WHERE email = 'a@example.com'", 0, NULL,
	             &dup_rows) ||
	    !lab_threads(L, EMAIL_SESSIONS, s, run_at_once, &claim) ||
	    !lab_int(L, s[0], "SELECT count(*) FROM claims", 0, NULL, &claim_rows))
		return;
	lab_vint(L, "sessions", EMAIL_SESSIONS);
	lab_vint(L, "check_then_insert_rows", dup_rows);
	lab_vint(L, "on_conflict_winners", claim.rows);
	lab_vint(L, "on_conflict_rows", claim_rows);
	lab_verdict(L, dup_rows > 1 && claim.rows == 1 && claim_rows == 1,
	            "%d sessions, one email: SELECT ... FOR UPDATE then INSERT stored it %lld time%s;"
	            " INSERT ... ON CONFLICT DO NOTHING: %d winner%s, %lld row%s", EMAIL_SESSIONS,
	            dup_rows, dup_rows == 1 ? "" : "s", claim.rows, claim.rows == 1 ? "" : "s",
	            claim_rows, claim_rows == 1 ? "" : "s");
}

/* ---- savepoints ---- */

void lab_exp_savepoint_locks(lab *L)
{
	char k[24];
	const char *kp[1] = { lab_fmt(k, lab_key(L, 20)) };
	lab_sess *a = lab_open(L), *b = a ? lab_open(L) : NULL;
	if (b == NULL || !lab_make_items(L, a, 3))
		return;
	char before[32], after[32];
	long long adv_before, adv_after;
	if (!lab_exec(L, a, "BEGIN; SELECT id FROM items WHERE id = 1 FOR UPDATE; SAVEPOINT s;"
	                    " SELECT id FROM items WHERE id = 2 FOR UPDATE") ||
	    !lab_execp(L, a, "SELECT pg_advisory_xact_lock($1::bigint)", 1, kp) ||
	    !lab_locked_ids(L, b, before, sizeof before) ||
	    !lab_adv_count(L, lab_key(L, 20), &adv_before) ||
	    !lab_exec(L, a, "ROLLBACK TO SAVEPOINT s") ||
	    !lab_locked_ids(L, b, after, sizeof after) ||
	    !lab_adv_count(L, lab_key(L, 20), &adv_after) ||
	    !lab_exec(L, a, "ROLLBACK"))
		return;
	lab_vtext(L, "rows_locked_before", before);
	lab_vtext(L, "rows_locked_after_rollback_to", after);
	lab_vint(L, "advisory_before", adv_before);
	lab_vint(L, "advisory_after_rollback_to", adv_after);
	lab_verdict(L, strcmp(before, "1,2") == 0 && strcmp(after, "1") == 0 && adv_before == 1 &&
	                   adv_after == 0,
	            "row 1 locked before SAVEPOINT, row 2 and an xact advisory lock after it: locked rows"
	            " {%s} -> {%s} and advisory %lld -> %lld at ROLLBACK TO", before, after, adv_before,
	            adv_after);
}

/* ---- deadlocks ---- */

/* Makes the deadlock check come quickly when we may (deadlock_timeout is superuser-only) and
 * keeps lock_timeout well above it, so the detector, not the timeout, ends the cycle. Returns
 * deadlock_timeout in ms, or -1. */
static long long deadlock_setup(lab *L, lab_sess *s)
{
	char state[6], lt[24];
	if (!lab_try(L, s, "SET deadlock_timeout = '200ms'", state))
		return -1;
	long long dt;
	if (!lab_int(L, s,
	             "SELECT (extract(epoch FROM current_setting('deadlock_timeout')::interval) * 1000)::bigint",
	             0, NULL, &dt))
		return -1;
	snprintf(lt, sizeof lt, "%lldms", dt + L->opts.lock_timeout_ms);
	const char *p[1] = { lt };
	if (!lab_execp(L, s, "SELECT set_config('lock_timeout', $1, false)", 1, p))
		return -1;
	return dt;
}

void lab_exp_deadlock(lab *L)
{
	lab_sess *a = lab_open(L), *b = a ? lab_open(L) : NULL;
	if (b == NULL || !lab_exec(L, a, "CREATE TABLE accounts (id int PRIMARY KEY, balance int NOT NULL);"
	                                 " INSERT INTO accounts VALUES (1, 100), (2, 100)"))
		return;
	long long dt = deadlock_setup(L, a);
	if (dt < 0 || deadlock_setup(L, b) < 0)
		return;
	int limit = (int)dt + L->opts.lock_timeout_ms + 5000;
	/* The classic cycle: A 1 then 2, B 2 then 1. */
	if (!lab_exec(L, a, "BEGIN; UPDATE accounts SET balance = balance - 10 WHERE id = 1") ||
	    !lab_exec(L, b, "BEGIN; UPDATE accounts SET balance = balance - 20 WHERE id = 2"))
		return;
	if (lab_waits(L, a, "UPDATE accounts SET balance = balance + 10 WHERE id = 2") != 1) {
		lab_fail(L, "session A did not wait for B's row");
		return;
	}
	if (!lab_send(L, b, "UPDATE accounts SET balance = balance + 20 WHERE id = 1", 0, NULL))
		return;
	char sa[6], sb[6];
	/* One of them is the victim; the other's UPDATE completes once the victim rolls back,
	 * which only happens after we collect the victim's error and end its transaction. */
	if (!lab_finish(L, b, limit, sb, NULL))
		return;
	if (strcmp(sb, "40P01") == 0) {
		if (!lab_exec(L, b, "ROLLBACK") || !lab_finish(L, a, limit, sa, NULL))
			return;
	} else {
		if (!lab_finish(L, a, limit, sa, NULL))
			return;
	}
	char victim_msg[256] = "";
	int victims = (strcmp(sa, "40P01") == 0) + (strcmp(sb, "40P01") == 0);
	int completed = (sa[0] == '\0') + (sb[0] == '\0');
	snprintf(victim_msg, sizeof victim_msg, "%s", strcmp(sa, "40P01") == 0 ? a->lasterr : b->lasterr);
	if (!lab_exec(L, a, strcmp(sa, "40P01") == 0 ? "ROLLBACK" : "COMMIT") ||
	    (strcmp(sb, "40P01") != 0 && !lab_exec(L, b, "COMMIT")))
		return;
	/* The same transfers in one global order (ascending id): B queues behind A, no cycle. */
	if (!lab_exec(L, a, "BEGIN; UPDATE accounts SET balance = balance - 10 WHERE id = 1"))
		return;
	int queued = lab_waits(L, b, "BEGIN; UPDATE accounts SET balance = balance + 20 WHERE id = 1");
	char oa[6], ob[6];
	if (queued < 0 || !lab_tryp(L, a, "UPDATE accounts SET balance = balance + 10 WHERE id = 2", 0,
	                            NULL, oa, NULL) ||
	    !lab_exec(L, a, oa[0] ? "ROLLBACK" : "COMMIT") || !lab_finish(L, b, limit, ob, NULL))
		return;
	char ob2[6] = "";
	if (ob[0] == '\0' && !lab_tryp(L, b, "UPDATE accounts SET balance = balance - 20 WHERE id = 2",
	                               0, NULL, ob2, NULL))
		return;
	if (!lab_exec(L, b, (ob[0] || ob2[0]) ? "ROLLBACK" : "COMMIT"))
		return;
	int ordered_ok = (oa[0] == '\0') + (ob[0] == '\0' && ob2[0] == '\0');
	lab_vint(L, "deadlock_timeout_ms", dt);
	lab_vtext(L, "cycle_a", sa[0] ? sa : "completed");
	lab_vtext(L, "cycle_b", sb[0] ? sb : "completed");
	lab_vint(L, "cycle_victims", victims);
	lab_vint(L, "cycle_completed", completed);
	lab_vbool(L, "ordered_b_waited", queued == 1);
	lab_vint(L, "ordered_completed", ordered_ok);
	lab_verdict(L, victims == 1 && completed == 1 && ordered_ok == 2,
	            "lock cycle: %d aborted with 40P01 (\"%s\"), %d completed; same transfers in id order:"
	            " %d of 2 completed, no deadlock", victims, victim_msg, completed, ordered_ok);
}

/* ---- diagnosing and ending blockers ---- */

void lab_exp_blocking_pids(lab *L)
{
	lab_sess *a, *b;
	if (!lab_row_waiter(L, "BEGIN; UPDATE items SET v = v + 1 WHERE id = 1", &a, &b))
		return;
	char pb[24], blockers[64], state[64], want[32];
	const char *p[1] = { lab_fmt(pb, b->pid) };
	if (!lab_text(L, L->obs, "SELECT pg_blocking_pids($1::int)::text", 1, p, blockers,
	              sizeof blockers) ||
	    !lab_text(L, L->obs,
	              "SELECT coalesce(max(state), '') FROM pg_stat_activity"
	              " WHERE pid = (pg_blocking_pids($1::int))[1]", 1, p, state, sizeof state) ||
	    !lab_exec(L, a, "ROLLBACK") || !lab_done_ok(L, b, NULL))
		return;
	snprintf(want, sizeof want, "{%d}", a->pid);
	lab_vint(L, "blocked_pid", b->pid);
	lab_vtext(L, "pg_blocking_pids", blockers);
	lab_vint(L, "blocker_pid", a->pid);
	lab_vtext(L, "blocker_state", state);
	lab_verdict(L, strcmp(blockers, want) == 0 && strcmp(state, "idle in transaction") == 0,
	            "B (pid %d) waits; pg_blocking_pids = %s, A is pid %d, state '%s'", b->pid, blockers,
	            a->pid, state);
}

void lab_exp_cancel_terminate(lab *L)
{
	lab_sess *a, *b;
	if (!lab_row_waiter(L, "BEGIN; UPDATE items SET v = v + 1 WHERE id = 1", &a, &b))
		return;
	char pa[24], pb[24];
	const char *qa[1] = { lab_fmt(pa, a->pid) }, *qb[1] = { lab_fmt(pb, b->pid) };
	bool cancelled, terminated;
	char cancel_state[6];
	long long b_pid_after;
	if (!lab_bool(L, L->obs, "SELECT pg_cancel_backend($1::int)", 1, qb, &cancelled) ||
	    !lab_finish(L, b, 0, cancel_state, NULL) ||
	    !lab_int(L, b, "SELECT pg_backend_pid()", 0, NULL, &b_pid_after))
		return;
	if (lab_waits(L, b, "UPDATE items SET v = v + 1 WHERE id = 1") != 1) {
		lab_fail(L, "session B did not wait for A again");
		return;
	}
	if (!lab_bool(L, L->obs, "SELECT pg_terminate_backend($1::int)", 1, qa, &terminated) ||
	    !lab_done_ok(L, b, NULL))
		return;
	/* A's session is gone: its next statement finds the connection closed. */
	char a_state[6];
	if (!lab_try_or_lost(L, a, "SELECT 1", a_state))
		return;
	long long a_alive;
	int64_t deadline = pgc__now_ms() + L->opts.lock_timeout_ms;
	while (lab_int(L, L->obs, "SELECT count(*) FROM pg_stat_activity WHERE pid = $1::int", 1, qa,
	               &a_alive) && a_alive != 0 && pgc__now_ms() < deadline)
		pgc__sleep_ms(10);
	if (lab_failed(L))
		return;
	lab_vbool(L, "cancel_sent", cancelled);
	lab_vtext(L, "cancelled_statement_sqlstate", cancel_state);
	lab_vbool(L, "session_kept_after_cancel", b_pid_after == b->pid);
	lab_vbool(L, "terminate_sent", terminated);
	lab_vbool(L, "waiter_got_lock_after_terminate", true);
	lab_vtext(L, "terminated_session_next_statement", a_state);
	lab_vint(L, "terminated_backend_rows", a_alive);
	lab_verdict(L, cancelled && strcmp(cancel_state, "57014") == 0 && b_pid_after == b->pid &&
	                   terminated && strcmp(a_state, "conn") == 0 && a_alive == 0,
	            "pg_cancel_backend(B): B's UPDATE ended with %s, same session (pid %lld) went on;"
	            " pg_terminate_backend(A): A's session %s, B's UPDATE then got the row",
	            cancel_state[0] ? cancel_state : "no error", b_pid_after,
	            strcmp(a_state, "conn") == 0 ? "closed" : "still answered");
}

/* ---- timeouts ---- */

void lab_exp_lock_timeout(lab *L)
{
	lab_sess *a = lab_open(L), *b = a ? lab_open(L) : NULL;
	if (b == NULL || !lab_make_items(L, a, 1))
		return;
	char state[6];
	if (!lab_exec(L, a, "BEGIN; SELECT id FROM items WHERE id = 1 FOR UPDATE") ||
	    !lab_exec(L, b, "SET lock_timeout = '200ms'"))
		return;
	int64_t t0 = pgc__now_ms();
	if (!lab_try(L, b, "UPDATE items SET v = v + 1 WHERE id = 1", state))
		return;
	int64_t waited = pgc__now_ms() - t0;
	if (!lab_exec(L, a, "ROLLBACK"))
		return;
	lab_vtext(L, "sqlstate", state[0] ? state : "ok");
	lab_vtext(L, "message", state[0] ? b->lasterr : "");
	lab_vint(L, "waited_ms", waited);
	lab_verdict(L, strcmp(state, "55P03") == 0,
	            "UPDATE of a locked row with lock_timeout = 200ms: %s \"%s\" after %lld ms",
	            state[0] ? state : "completed", state[0] ? b->lasterr : "", (long long)waited);
}

void lab_exp_statement_timeout(lab *L)
{
	lab_sess *a = lab_open(L);
	char state[6];
	if (a == NULL || !lab_exec(L, a, "SET statement_timeout = '200ms'"))
		return;
	int64_t t0 = pgc__now_ms();
	if (!lab_try(L, a, "SELECT pg_sleep(5)", state))
		return;
	int64_t took = pgc__now_ms() - t0;
	lab_vtext(L, "sqlstate", state[0] ? state : "ok");
	lab_vtext(L, "message", state[0] ? a->lasterr : "");
	lab_vint(L, "ran_ms", took);
	lab_verdict(L, strcmp(state, "57014") == 0,
	            "pg_sleep(5) with statement_timeout = 200ms: %s \"%s\" after %lld ms",
	            state[0] ? state : "completed", state[0] ? a->lasterr : "", (long long)took);
}

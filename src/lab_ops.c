/* lab_ops.c - deadlocks, the SKIP LOCKED queue, blocking diagnostics, plans and timeouts:
 * seed 002 §02, §08, §10, §11, §12 and the answers of §17 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "lab_internal.h"

static bool make_items(lab *L, lab_sess *s, int rows)
{
	char n[24];
	const char *p[1] = { lab_fmt(n, rows) };
	return lab_exec(L, s, "CREATE TABLE items (id int PRIMARY KEY, v int NOT NULL)") &&
	       lab_execp(L, s, "INSERT INTO items SELECT g, g FROM generate_series(1, $1::int) g", 1, p);
}

static int waits(lab *L, lab_sess *s, const char *sql)
{
	if (!lab_send(L, s, sql, 0, NULL))
		return -1;
	return lab_await_lock_wait(L, s);
}

static bool done_ok(lab *L, lab_sess *s)
{
	char state[6];
	if (!lab_finish(L, s, 0, state, NULL))
		return false;
	if (state[0] != '\0') {
		lab_fail(L, "session %s: %s (SQLSTATE %s)", s->label, s->lasterr, state);
		return false;
	}
	return true;
}

/* ---- §08 deadlocks ---- */

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
	/* The cycle of the seed: A 1 then 2, B 2 then 1. */
	if (!lab_exec(L, a, "BEGIN; UPDATE accounts SET balance = balance - 10 WHERE id = 1") ||
	    !lab_exec(L, b, "BEGIN; UPDATE accounts SET balance = balance - 20 WHERE id = 2"))
		return;
	if (waits(L, a, "UPDATE accounts SET balance = balance + 10 WHERE id = 2") != 1) {
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
	int queued = waits(L, b, "BEGIN; UPDATE accounts SET balance = balance + 20 WHERE id = 1");
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

/* ---- §10 the SKIP LOCKED queue, with the seed's statements ---- */

static const char *const jobs_ddl =
        "CREATE TABLE jobs ("
        " id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,"
        " queue_name text NOT NULL,"
        " payload jsonb NOT NULL,"
        " status text NOT NULL DEFAULT 'pending'"
        "  CHECK (status IN ('pending', 'running', 'succeeded', 'failed')),"
        " priority integer NOT NULL DEFAULT 0,"
        " run_at timestamptz NOT NULL DEFAULT clock_timestamp(),"
        " attempts integer NOT NULL DEFAULT 0,"
        " max_attempts integer NOT NULL DEFAULT 10,"
        " locked_at timestamptz,"
        " locked_by text,"
        " last_error text,"
        " created_at timestamptz NOT NULL DEFAULT clock_timestamp(),"
        " finished_at timestamptz,"
        " CHECK (attempts >= 0),"
        " CHECK (max_attempts > 0));"
        " CREATE INDEX jobs_claim_idx ON jobs (queue_name, priority DESC, run_at, id)"
        "  WHERE status = 'pending'";

static const char *const claim_sql =
        "WITH picked AS ("
        " SELECT id FROM jobs"
        " WHERE queue_name = $1 AND status = 'pending' AND run_at <= clock_timestamp()"
        "  AND attempts < max_attempts"
        " ORDER BY priority DESC, run_at, id"
        " FOR UPDATE SKIP LOCKED"
        " LIMIT $2::int)"
        " UPDATE jobs AS j SET status = 'running', attempts = j.attempts + 1,"
        "  locked_at = clock_timestamp(), locked_by = $3"
        " FROM picked WHERE j.id = picked.id"
        " RETURNING j.id, j.payload, j.attempts, j.locked_at";

static const char *const complete_sql =
        "UPDATE jobs SET status = 'succeeded', finished_at = clock_timestamp(),"
        " locked_at = NULL, locked_by = NULL, last_error = NULL"
        " WHERE id = $1::bigint AND status = 'running' AND locked_by = $2"
        " RETURNING id";

/* The seed's recovery, with its retry delay as a parameter. */
static const char *const recover_sql =
        "WITH expired AS ("
        " SELECT id FROM jobs"
        " WHERE status = 'running' AND locked_at < clock_timestamp() - INTERVAL '15 minutes'"
        "  AND attempts < max_attempts"
        " ORDER BY locked_at, id"
        " FOR UPDATE SKIP LOCKED"
        " LIMIT 100)"
        " UPDATE jobs AS j SET status = 'pending', run_at = clock_timestamp() + $1::interval,"
        "  locked_at = NULL, locked_by = NULL, last_error = 'worker lease expired'"
        " FROM expired WHERE j.id = expired.id"
        " RETURNING j.id";

static bool make_jobs(lab *L, lab_sess *s, int n)
{
	char c[24];
	const char *p[1] = { lab_fmt(c, n) };
	return lab_exec(L, s, jobs_ddl) &&
	       lab_execp(L, s,
	                 "INSERT INTO jobs (queue_name, payload) SELECT 'email',"
	                 " jsonb_build_object('n', g) FROM generate_series(1, $1::int) g", 1, p);
}

/* Claims up to limit jobs as worker; returns the number claimed (and the first id), or -1. */
static int claim(lab *L, lab_sess *s, int limit, const char *worker, long long *ids, int max)
{
	char lim[24];
	const char *p[3] = { "email", lab_fmt(lim, limit), worker };
	PGresult *res = lab_query(L, s, claim_sql, 3, p);
	if (res == NULL)
		return -1;
	int n = PQntuples(res);
	for (int i = 0; i < n && i < max; i++)
		ids[i] = atoll(PQgetvalue(res, i, 0));
	PQclear(res);
	return n;
}

static int rows_of(lab *L, lab_sess *s, const char *sql, int nparams, const char *const *p)
{
	PGresult *res = lab_query(L, s, sql, nparams, p);
	if (res == NULL)
		return -1;
	int n = PQntuples(res);
	PQclear(res);
	return n;
}

#define QUEUE_WORKERS 4
#define QUEUE_BATCH 2

struct workers {
	long long ids[QUEUE_WORKERS][QUEUE_BATCH];
	int got[QUEUE_WORKERS];
};

static void worker(lab *L, lab_sess *s, int i, void *arg)
{
	struct workers *w = arg;
	char name[32];
	snprintf(name, sizeof name, "worker-%d", i + 1);
	if (!lab_barrier(L) || !lab_exec(L, s, "BEGIN"))
		return;
	w->got[i] = claim(L, s, QUEUE_BATCH, name, w->ids[i], QUEUE_BATCH);
	/* Every worker holds its claim (and its row locks) while the others claim. */
	if (w->got[i] < 0 || !lab_barrier(L))
		return;
	lab_exec(L, s, "COMMIT");
}

void lab_exp_skip_locked(lab *L)
{
	lab_sess *s[QUEUE_WORKERS];
	for (int i = 0; i < QUEUE_WORKERS; i++)
		if ((s[i] = lab_open(L)) == NULL)
			return;
	struct workers w;
	memset(&w, 0, sizeof w);
	if (!make_jobs(L, s[0], 10) || !lab_threads(L, QUEUE_WORKERS, s, worker, &w))
		return;
	int total = 0, dups = 0;
	char list[160] = "";
	for (int i = 0; i < QUEUE_WORKERS; i++) {
		char part[48];
		snprintf(part, sizeof part, "%sworker-%d:", i ? " " : "", i + 1);
		strncat(list, part, sizeof list - strlen(list) - 1);
		for (int j = 0; j < w.got[i]; j++) {
			snprintf(part, sizeof part, "%s%lld", j ? "," : "", w.ids[i][j]);
			strncat(list, part, sizeof list - strlen(list) - 1);
			total++;
			for (int i2 = 0; i2 < i; i2++)
				for (int j2 = 0; j2 < w.got[i2]; j2++)
					dups += w.ids[i2][j2] == w.ids[i][j];
		}
	}
	long long running, owners;
	if (!lab_int(L, s[0], "SELECT count(*) FROM jobs WHERE status = 'running'", 0, NULL, &running) ||
	    !lab_int(L, s[0], "SELECT count(DISTINCT locked_by) FROM jobs WHERE status = 'running'", 0,
	             NULL, &owners))
		return;
	lab_vint(L, "workers", QUEUE_WORKERS);
	lab_vint(L, "claimed", total);
	lab_vint(L, "claimed_twice", dups);
	lab_vint(L, "running_rows", running);
	lab_vtext(L, "claims", list);
	lab_verdict(L, total == QUEUE_WORKERS * QUEUE_BATCH && dups == 0 && running == total &&
	                   owners == QUEUE_WORKERS,
	            "%d workers claimed LIMIT %d each in open transactions at once: %d jobs, %d claimed"
	            " twice (%s)", QUEUE_WORKERS, QUEUE_BATCH, total, dups, list);
}

void lab_exp_stale_completion(lab *L)
{
	lab_sess *a = lab_open(L), *b = a ? lab_open(L) : NULL;
	if (b == NULL || !make_jobs(L, a, 1))
		return;
	long long ida = 0, idb = 0;
	static const char *const now[1] = { "0 seconds" };
	if (claim(L, a, 1, "worker-a", &ida, 1) != 1) {
		lab_fail(L, "worker-a claimed nothing");
		return;
	}
	/* worker-a goes silent; its claim is 20 minutes old when the reaper looks. */
	int recovered;
	if (!lab_exec(L, a, "UPDATE jobs SET locked_at = locked_at - INTERVAL '20 minutes'") ||
	    (recovered = rows_of(L, b, recover_sql, 1, now)) < 0)
		return;
	if (claim(L, b, 1, "worker-b", &idb, 1) != 1) {
		lab_fail(L, "worker-b could not claim the recovered job");
		return;
	}
	char id[24];
	const char *pa[2] = { lab_fmt(id, ida), "worker-a" };
	const char *pb[2] = { id, "worker-b" };
	int done_a = rows_of(L, a, complete_sql, 2, pa);
	int done_b = done_a < 0 ? -1 : rows_of(L, b, complete_sql, 2, pb);
	char status[32];
	if (done_b < 0 || !lab_text(L, a, "SELECT status FROM jobs", 0, NULL, status, sizeof status))
		return;
	lab_vint(L, "recovered", recovered);
	lab_vint(L, "stale_owner_completed_rows", done_a);
	lab_vint(L, "current_owner_completed_rows", done_b);
	lab_vtext(L, "final_status", status);
	lab_verdict(L, recovered == 1 && ida == idb && done_a == 0 && done_b == 1 &&
	                   strcmp(status, "succeeded") == 0,
	            "job %lld reclaimed by worker-b after worker-a's lease expired: worker-a's completion"
	            " updated %d rows, worker-b's %d; status %s", ida, done_a, done_b, status);
}

void lab_exp_lease_recovery(lab *L)
{
	lab_sess *a = lab_open(L), *b = a ? lab_open(L) : NULL;
	if (b == NULL || !make_jobs(L, a, 1))
		return;
	long long id = 0, none;
	static const char *const delay[1] = { "30 seconds" };
	if (claim(L, a, 1, "worker-a", &id, 1) != 1) {
		lab_fail(L, "worker-a claimed nothing");
		return;
	}
	int fresh = rows_of(L, b, recover_sql, 1, delay);
	/* The claim as a worker that died 20 minutes ago left it. */
	if (fresh < 0 || !lab_exec(L, a, "UPDATE jobs SET locked_at = locked_at - INTERVAL '20 minutes'"))
		return;
	int expired = rows_of(L, b, recover_sql, 1, delay);
	char row[160];
	if (expired < 0 ||
	    !lab_text(L, b, "SELECT format('status=%s attempts=%s locked_by=%s last_error=%s', status,"
	                    " attempts, coalesce(locked_by, 'null'), last_error) FROM jobs",
	              0, NULL, row, sizeof row))
		return;
	int again = claim(L, b, 1, "worker-b", &none, 1);
	if (again < 0)
		return;
	lab_vint(L, "recovered_while_fresh", fresh);
	lab_vint(L, "recovered_after_expiry", expired);
	lab_vtext(L, "job_after_recovery", row);
	lab_vint(L, "claimable_before_run_at", again);
	lab_verdict(L, fresh == 0 && expired == 1 && again == 0 &&
	                   strstr(row, "status=pending attempts=1 locked_by=null") != NULL,
	            "reaper on a fresh claim: %d rows; on a claim 20 minutes old: %d (%s); claimable before"
	            " its 30 s back-off: %d", fresh, expired, row, again);
}

/* ---- §11 diagnosing and ending blockers ---- */

void lab_exp_blocking_pids(lab *L)
{
	lab_sess *a = lab_open(L), *b = a ? lab_open(L) : NULL;
	if (b == NULL || !make_items(L, a, 1))
		return;
	if (!lab_exec(L, a, "BEGIN; UPDATE items SET v = v + 1 WHERE id = 1"))
		return;
	if (waits(L, b, "UPDATE items SET v = v + 1 WHERE id = 1") != 1) {
		lab_fail(L, "session B did not wait for A");
		return;
	}
	char pb[24], blockers[64], state[64], want[32];
	const char *p[1] = { lab_fmt(pb, b->pid) };
	if (!lab_text(L, L->obs, "SELECT pg_blocking_pids($1::int)::text", 1, p, blockers,
	              sizeof blockers) ||
	    !lab_text(L, L->obs,
	              "SELECT coalesce(max(state), '') FROM pg_stat_activity"
	              " WHERE pid = (pg_blocking_pids($1::int))[1]", 1, p, state, sizeof state) ||
	    !lab_exec(L, a, "ROLLBACK") || !done_ok(L, b))
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
	lab_sess *a = lab_open(L), *b = a ? lab_open(L) : NULL;
	if (b == NULL || !make_items(L, a, 1))
		return;
	char pa[24], pb[24];
	const char *qa[1] = { lab_fmt(pa, a->pid) }, *qb[1] = { lab_fmt(pb, b->pid) };
	if (!lab_exec(L, a, "BEGIN; UPDATE items SET v = v + 1 WHERE id = 1"))
		return;
	if (waits(L, b, "UPDATE items SET v = v + 1 WHERE id = 1") != 1) {
		lab_fail(L, "session B did not wait for A");
		return;
	}
	bool cancelled, terminated;
	char cancel_state[6];
	long long b_pid_after;
	if (!lab_bool(L, L->obs, "SELECT pg_cancel_backend($1::int)", 1, qb, &cancelled) ||
	    !lab_finish(L, b, 0, cancel_state, NULL) ||
	    !lab_int(L, b, "SELECT pg_backend_pid()", 0, NULL, &b_pid_after))
		return;
	if (waits(L, b, "UPDATE items SET v = v + 1 WHERE id = 1") != 1) {
		lab_fail(L, "session B did not wait for A again");
		return;
	}
	if (!lab_bool(L, L->obs, "SELECT pg_terminate_backend($1::int)", 1, qa, &terminated) ||
	    !done_ok(L, b))
		return;
	/* A's session is gone: its next statement finds the connection closed. */
	char a_state[6];
	if (!lab_try_or_lost(L, a, "SELECT 1", a_state))
		return;
	long long a_alive;
	int64_t deadline = pgc__now_ms() + L->opts.lock_timeout_ms;
	while (lab_int(L, L->obs, "SELECT count(*) FROM pg_stat_activity WHERE pid = $1::int", 1, qa,
	               &a_alive) && a_alive != 0 && pgc__now_ms() < deadline)
		lab_sleep_ms(10);
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

/* ---- §12 strong-lock queueing and plans ---- */

void lab_exp_strong_lock_queue(lab *L)
{
	lab_sess *a = lab_open(L), *b = a ? lab_open(L) : NULL, *c = b ? lab_open(L) : NULL;
	if (c == NULL || !make_items(L, a, 3))
		return;
	if (!lab_exec(L, a, "BEGIN; SELECT count(*) FROM items"))
		return;
	int alter = waits(L, b, "ALTER TABLE items ADD COLUMN note text");
	if (alter < 0)
		return;
	int reader = waits(L, c, "SELECT count(*) FROM items");
	if (reader < 0)
		return;
	char pc[24], blockers[64];
	const char *p[1] = { lab_fmt(pc, c->pid) };
	if (!lab_text(L, L->obs, "SELECT pg_blocking_pids($1::int)::text", 1, p, blockers,
	              sizeof blockers) ||
	    !lab_exec(L, a, "COMMIT") || !done_ok(L, b) || !done_ok(L, c))
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

static bool plan_has(lab *L, lab_sess *s, const char *sql, const char *node, bool *out,
                     char *top, size_t n)
{
	PGresult *res = lab_query(L, s, sql, 0, NULL);
	if (res == NULL)
		return false;
	*out = false;
	for (int i = 0; i < PQntuples(res); i++)
		if (strstr(PQgetvalue(res, i, 0), node) != NULL)
			*out = true;
	snprintf(top, n, "%s", PQntuples(res) > 0 ? PQgetvalue(res, 0, 0) : "");
	PQclear(res);
	return true;
}

void lab_exp_lockrows_plan(lab *L)
{
	lab_sess *a = lab_open(L);
	if (a == NULL || !make_items(L, a, 3))
		return;
	bool with, without;
	char top_with[128], top_without[128];
	if (!plan_has(L, a, "EXPLAIN (COSTS OFF) SELECT * FROM items WHERE id = 1 FOR UPDATE",
	              "LockRows", &with, top_with, sizeof top_with) ||
	    !plan_has(L, a, "EXPLAIN (COSTS OFF) SELECT * FROM items WHERE id = 1", "LockRows",
	              &without, top_without, sizeof top_without))
		return;
	lab_vbool(L, "for_update_has_lockrows", with);
	lab_vbool(L, "plain_has_lockrows", without);
	lab_vtext(L, "for_update_top_node", top_with);
	lab_vtext(L, "plain_top_node", top_without);
	lab_verdict(L, with && !without,
	            "EXPLAIN ... FOR UPDATE: top node \"%s\" (LockRows %s); plain SELECT: \"%s\" (LockRows"
	            " %s)", top_with, with ? "present" : "absent", top_without,
	            without ? "present" : "absent");
}

/* ---- §17 where row locks live ---- */

void lab_exp_row_locks_memory(lab *L)
{
	lab_sess *a = lab_open(L);
	if (a == NULL || !lab_exec(L, a, "CREATE TABLE big (id int NOT NULL)") ||
	    !lab_exec(L, a, "INSERT INTO big SELECT g FROM generate_series(1, 100000) g"))
		return;
	long long locked, rows, tuples, mlpt;
	char pa[24], kinds[160];
	const char *p[1] = { lab_fmt(pa, a->pid) };
	if (!lab_exec(L, a, "BEGIN") ||
	    !lab_int(L, a, "SELECT count(*) FROM (SELECT id FROM big FOR UPDATE) AS s", 0, NULL, &locked) ||
	    !lab_int(L, L->obs, "SELECT count(*) FROM pg_locks WHERE pid = $1::int", 1, p, &rows) ||
	    !lab_int(L, L->obs, "SELECT count(*) FROM pg_locks WHERE pid = $1::int AND locktype = 'tuple'",
	             1, p, &tuples) ||
	    !lab_text(L, L->obs,
	              "SELECT string_agg(DISTINCT locktype, ',') FROM pg_locks WHERE pid = $1::int", 1, p,
	              kinds, sizeof kinds) ||
	    !lab_int(L, L->obs, "SELECT current_setting('max_locks_per_transaction')::bigint", 0, NULL,
	             &mlpt) ||
	    !lab_exec(L, a, "ROLLBACK"))
		return;
	lab_vint(L, "rows_locked", locked);
	lab_vint(L, "pg_locks_rows", rows);
	lab_vint(L, "tuple_rows", tuples);
	lab_vtext(L, "locktypes", kinds);
	lab_vint(L, "max_locks_per_transaction", mlpt);
	lab_verdict(L, locked == 100000 && rows < 20 && tuples == 0,
	            "one transaction locked %lld rows FOR UPDATE; pg_locks shows %lld rows for it (%s),"
	            " %lld of them tuple locks", locked, rows, kinds, tuples);
}

void lab_exp_row_wait_xid(lab *L)
{
	lab_sess *a = lab_open(L), *b = a ? lab_open(L) : NULL;
	if (b == NULL || !make_items(L, a, 1))
		return;
	if (!lab_exec(L, a, "BEGIN; SELECT id FROM items WHERE id = 1 FOR UPDATE"))
		return;
	if (waits(L, b, "UPDATE items SET v = v + 1 WHERE id = 1") != 1) {
		lab_fail(L, "session B did not wait for A");
		return;
	}
	char pa[24], pb[24], wait[160], axid[32];
	const char *p[1] = { lab_fmt(pa, a->pid) }, *q[1] = { lab_fmt(pb, b->pid) };
	if (!lab_text(L, L->obs,
	              "SELECT coalesce(max(transactionid::text), '') FROM pg_locks"
	              " WHERE pid = $1::int AND locktype = 'transactionid' AND mode = 'ExclusiveLock'",
	              1, p, axid, sizeof axid) ||
	    !lab_text(L, L->obs,
	              "SELECT coalesce(string_agg(format('%s %s %s granted=%s', locktype, mode,"
	              " transactionid, granted), '; '), '') FROM pg_locks"
	              " WHERE pid = $1::int AND NOT granted", 1, q, wait, sizeof wait) ||
	    !lab_exec(L, a, "ROLLBACK") || !done_ok(L, b))
		return;
	char want[96];
	snprintf(want, sizeof want, "transactionid ShareLock %s granted=f", axid);
	lab_vtext(L, "holder_xid", axid);
	lab_vtext(L, "waiter_request", wait);
	lab_verdict(L, axid[0] != '\0' && strcmp(wait, want) == 0,
	            "B waits for A's row lock; B's ungranted pg_locks row: %s (A's transaction id %s)",
	            wait[0] ? wait : "none", axid[0] ? axid : "none");
}

/* ---- §02, §11 timeouts ---- */

void lab_exp_lock_timeout(lab *L)
{
	lab_sess *a = lab_open(L), *b = a ? lab_open(L) : NULL;
	if (b == NULL || !make_items(L, a, 1))
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


/* lab_isolation.c - what isolation and conditional writes do under concurrency: write skew
 * under READ COMMITTED and SERIALIZABLE, an optimistic version check, and one hot key upserted
 * by many sessions */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "lab_int.h"

/* ---- write skew: two doctors, each going off duty if the other is on ---- */

/* One doctor's transaction up to its write: begins at the isolation level, reads how many
 * are on call and, when the other is still on, goes off duty (the UPDATE is watched: it must
 * not wait). *on_call gets the count read, *wrote whether it went off, *waited whether the
 * UPDATE waited for a lock. state gets the SQLSTATE of a failed statement ("" when none). */
static bool doctor_reads_then_writes(lab *L, lab_sess *s, const char *begin, const char *name,
                                     long long *on_call, bool *wrote, bool *waited, char state[6])
{
	const char *p[1] = { name };
	*wrote = *waited = false;
	state[0] = '\0';
	if (!lab_exec(L, s, begin) ||
	    !lab_int(L, s, "SELECT count(*) FROM doctors WHERE on_call", 0, NULL, on_call))
		return false;
	if (*on_call < 2)
		return true;
	if (!lab_send(L, s, "UPDATE doctors SET on_call = false WHERE name = $1", 1, p))
		return false;
	int w = lab_await_lock_wait(L, s);
	if (w < 0 || !lab_finish(L, s, 0, state, NULL))
		return false;
	*waited = w == 1;
	*wrote = state[0] == '\0';
	return true;
}

/* COMMIT (or ROLLBACK when the transaction already failed); state gets COMMIT's SQLSTATE. */
static bool doctor_ends(lab *L, lab_sess *s, const char *failed, char state[6])
{
	if (failed[0] != '\0') {
		snprintf(state, 6, "%s", failed);
		return lab_exec(L, s, "ROLLBACK");
	}
	return lab_try(L, s, "COMMIT", state);
}

/* How many SIReadLock entries session s holds, and whether anyone waits or is blocked. */
static bool siread_and_blocking(lab *L, lab_sess *a, lab_sess *b, long long *siread_a,
                                long long *siread_b, long long *blocked)
{
	char pa[24], pb[24];
	const char *qa[1] = { lab_fmt(pa, a->pid) }, *qb[1] = { lab_fmt(pb, b->pid) };
	const char *both[2] = { pa, pb };
	static const char siread[] =
	        "SELECT count(*) FROM pg_locks WHERE pid = $1::int AND mode = 'SIReadLock'";
	return lab_int(L, L->obs, siread, 1, qa, siread_a) &&
	       lab_int(L, L->obs, siread, 1, qb, siread_b) &&
	       lab_int(L, L->obs,
	               "SELECT count(*) FROM pg_stat_activity WHERE pid IN ($1::int, $2::int)"
	               " AND (wait_event_type = 'Lock' OR cardinality(pg_blocking_pids(pid)) > 0)",
	               2, both, blocked);
}

void lab_exp_write_skew(lab *L)
{
	lab_sess *a = lab_open(L), *b = a ? lab_open(L) : NULL;
	if (b == NULL ||
	    !lab_exec(L, a, "CREATE TABLE doctors (name text PRIMARY KEY, on_call bool NOT NULL);"
	                    " INSERT INTO doctors VALUES ('alice', true), ('bob', true)"))
		return;

	/* READ COMMITTED: both read "two on call", both go off, both commit. */
	static const char rc_begin[] = "BEGIN ISOLATION LEVEL READ COMMITTED";
	long long na, nb, rc_left;
	bool wa, wb, wait_a, wait_b;
	char sa[6], sb[6], ca[6], cb[6];
	if (!doctor_reads_then_writes(L, a, rc_begin, "alice", &na, &wa, &wait_a, sa) ||
	    !doctor_reads_then_writes(L, b, rc_begin, "bob", &nb, &wb, &wait_b, sb) ||
	    !doctor_ends(L, a, sa, ca) || !doctor_ends(L, b, sb, cb) ||
	    !lab_int(L, a, "SELECT count(*) FROM doctors WHERE on_call", 0, NULL, &rc_left))
		return;
	bool rc_both = wa && wb && ca[0] == '\0' && cb[0] == '\0';
	bool rc_waited = wait_a || wait_b;

	/* SERIALIZABLE: the same interleaving; the second to commit is stopped with 40001. */
	static const char ser_begin[] = "BEGIN ISOLATION LEVEL SERIALIZABLE";
	long long siread_a, siread_b, blocked;
	if (!lab_exec(L, a, "UPDATE doctors SET on_call = true") ||
	    !doctor_reads_then_writes(L, a, ser_begin, "alice", &na, &wa, &wait_a, sa) ||
	    !doctor_reads_then_writes(L, b, ser_begin, "bob", &nb, &wb, &wait_b, sb) ||
	    !siread_and_blocking(L, a, b, &siread_a, &siread_b, &blocked) ||
	    !doctor_ends(L, a, sa, ca) || !doctor_ends(L, b, sb, cb))
		return;
	bool ser_waited = wait_a || wait_b;
	int failures = (strcmp(ca, "40001") == 0) + (strcmp(cb, "40001") == 0);
	int others = (ca[0] != '\0' && strcmp(ca, "40001") != 0) + (cb[0] != '\0' && strcmp(cb, "40001") != 0);
	char fail_msg[256] = "";
	if (failures == 1)
		snprintf(fail_msg, sizeof fail_msg, "%s", strcmp(ca, "40001") == 0 ? a->lasterr : b->lasterr);

	/* The failed transaction, run again as a whole: it now sees the other off duty. */
	long long retry_saw = -1, ser_left;
	bool retry_wrote = false, retry_waited = false;
	char retry_state[6] = "", retry_commit[6] = "";
	if (failures == 1) {
		lab_sess *victim = strcmp(ca, "40001") == 0 ? a : b;
		if (!doctor_reads_then_writes(L, victim, ser_begin, victim == a ? "alice" : "bob",
		                              &retry_saw, &retry_wrote, &retry_waited, retry_state) ||
		    !doctor_ends(L, victim, retry_state, retry_commit))
			return;
	}
	if (!lab_int(L, a, "SELECT count(*) FROM doctors WHERE on_call", 0, NULL, &ser_left))
		return;

	lab_vbool(L, "read_committed_both_committed", rc_both);
	lab_vint(L, "read_committed_on_call_after", rc_left);
	lab_vtext(L, "serializable_a_commit", ca[0] ? ca : "ok");
	lab_vtext(L, "serializable_b_commit", cb[0] ? cb : "ok");
	lab_vint(L, "serialization_failures", failures);
	lab_vtext(L, "serialization_failure_message", fail_msg);
	lab_vint(L, "siread_locks_a", siread_a);
	lab_vint(L, "siread_locks_b", siread_b);
	lab_vint(L, "sessions_waiting_or_blocked", blocked);
	lab_vbool(L, "any_update_waited", rc_waited || ser_waited || retry_waited);
	lab_vint(L, "retry_saw_on_call", retry_saw);
	lab_vbool(L, "retry_went_off", retry_wrote);
	lab_vtext(L, "retry_commit", retry_commit[0] ? retry_commit : (failures == 1 ? "ok" : ""));
	lab_vint(L, "serializable_on_call_after", ser_left);
	bool retry_ok = failures == 1 && retry_commit[0] == '\0' && ser_left >= 1;
	lab_verdict(L, rc_both && rc_left == 0 && failures == 1 && others == 0 && retry_ok &&
	                   siread_a > 0 && siread_b > 0 && blocked == 0 && !rc_waited && !ser_waited &&
	                   !retry_waited,
	            "READ COMMITTED: both doctors went off duty, %lld on call; SERIALIZABLE: %d commit"
	            " failed with 40001 (\"%s\"), the retry saw %lld on call and %s, %lld on call;"
	            " SIReadLocks %lld + %lld, %s", rc_left, failures, fail_msg, retry_saw,
	            retry_wrote ? "went off" : "stayed", ser_left, siread_a, siread_b,
	            blocked == 0 && !rc_waited && !ser_waited ? "nobody waited" : "a session waited");
}

/* ---- an optimistic version check ---- */

void lab_exp_optimistic_version(lab *L)
{
	lab_sess *a = lab_open(L), *b = a ? lab_open(L) : NULL;
	if (b == NULL ||
	    !lab_exec(L, a, "CREATE TABLE docs (id int PRIMARY KEY, body text NOT NULL, v int NOT NULL);"
	                    " INSERT INTO docs VALUES (1, 'draft', 1)"))
		return;
	/* Both writers read version 1, then each writes "if it is still version 1". */
	long long va, vb;
	static const char read_v[] = "SELECT v FROM docs WHERE id = 1";
	static const char write_v[] = "UPDATE docs SET body = $1, v = v + 1 WHERE id = $2::int"
	                              " AND v = $3::int RETURNING v";
	if (!lab_int(L, a, read_v, 0, NULL, &va) || !lab_int(L, b, read_v, 0, NULL, &vb))
		return;
	char sva[24], svb[24];
	const char *pa[3] = { "written by A", "1", lab_fmt(sva, va) };
	const char *pb[3] = { "written by B", "1", lab_fmt(svb, vb) };
	PGresult *res = NULL;
	if (!lab_exec(L, a, "BEGIN") || (res = lab_query(L, a, write_v, 3, pa)) == NULL)
		return;
	int a_rows = PQntuples(res);
	PQclear(res);
	/* B's check runs while A's write is uncommitted: it waits for A, then re-checks its WHERE
	 * against the row A committed. */
	if (!lab_send(L, b, write_v, 3, pb))
		return;
	int waited = lab_await_lock_wait(L, b);
	if (waited < 0 || !lab_exec(L, a, "COMMIT") || !lab_done_ok(L, b, &res))
		return;
	int b_rows = PQntuples(res);
	PQclear(res);
	char body[64];
	long long v;
	if (!lab_text(L, a, "SELECT body FROM docs WHERE id = 1", 0, NULL, body, sizeof body) ||
	    !lab_int(L, a, read_v, 0, NULL, &v))
		return;
	lab_vint(L, "version_read_by_a", va);
	lab_vint(L, "version_read_by_b", vb);
	lab_vint(L, "first_writer_rows", a_rows);
	lab_vbool(L, "second_writer_waited", waited == 1);
	lab_vint(L, "second_writer_rows", b_rows);
	lab_vtext(L, "final_body", body);
	lab_vint(L, "final_version", v);
	lab_verdict(L, va == 1 && vb == 1 && a_rows == 1 && b_rows == 0 &&
	                   strcmp(body, "written by A") == 0 && v == 2,
	            "both read version %lld; A's UPDATE ... WHERE v = %lld changed %d row, B's (%s)"
	            " %d rows; the row says \"%s\", version %lld", va, va, a_rows,
	            waited == 1 ? "waited for A, then re-checked" : "did not wait", b_rows, body, v);
}

/* ---- one hot key upserted by many sessions ---- */

#define UPSERT_SESSIONS 8
#define UPSERT_MS 2000

struct upsert_run {
	bool hot;          /* every session on key 0, or each on a key of its own */
	int64_t until_ms;  /* set by the first thread past the barrier */
	long long done[UPSERT_SESSIONS];
	long long waits;   /* samples of a session waiting for a row (transactionid, tuple) */
	long long samples;
	char pids[UPSERT_SESSIONS * 12 + 3];
};

/* Threads 0 .. UPSERT_SESSIONS - 1 upsert until the time is up; the last one is the observer,
 * sampling pg_stat_activity for the upserters' row-lock waits meanwhile. */
static void upserter(lab *L, lab_sess *s, int i, void *arg)
{
	struct upsert_run *r = arg;
	if (!lab_barrier(L))
		return;
	int64_t until = r->until_ms;
	if (i == UPSERT_SESSIONS) {
		const char *p[1] = { r->pids };
		while (pgc__now_ms() < until) {
			long long n;
			if (!lab_int(L, s,
			             "SELECT count(*) FROM pg_stat_activity WHERE pid = ANY ($1::int[])"
			             " AND wait_event_type = 'Lock' AND wait_event IN ('transactionid', 'tuple')",
			             1, p, &n))
				return;
			r->waits += n;
			r->samples++;
			pgc__sleep_ms(2);
		}
		return;
	}
	char k[24];
	const char *p[1] = { lab_fmt(k, r->hot ? 0 : i + 1) };
	while (pgc__now_ms() < until) {
		if (!lab_execp(L, s, "INSERT INTO counters VALUES ($1::int, 1)"
		                     " ON CONFLICT (k) DO UPDATE SET n = counters.n + 1", 1, p))
			return;
		r->done[i]++;
	}
}

static bool upsert_phase(lab *L, lab_sess **s, struct upsert_run *r, long long *total,
                         long long *counted)
{
	/* The deadline is fixed before the threads start; the barrier makes them start together. */
	r->until_ms = pgc__now_ms() + UPSERT_MS;
	if (!lab_threads(L, UPSERT_SESSIONS + 1, s, upserter, r))
		return false;
	*total = 0;
	for (int i = 0; i < UPSERT_SESSIONS; i++)
		*total += r->done[i];
	return lab_int(L, s[0], r->hot ? "SELECT coalesce(sum(n), 0) FROM counters WHERE k = 0"
	                                 : "SELECT coalesce(sum(n), 0) FROM counters WHERE k > 0",
	               0, NULL, counted);
}

void lab_exp_hot_upsert(lab *L)
{
	lab_sess *s[UPSERT_SESSIONS + 1];
	for (int i = 0; i < UPSERT_SESSIONS; i++)
		if ((s[i] = lab_open(L)) == NULL)
			return;
	s[UPSERT_SESSIONS] = L->obs;
	if (!lab_exec(L, s[0], "CREATE TABLE counters (k int PRIMARY KEY, n bigint NOT NULL)"))
		return;
	struct upsert_run hot = { .hot = true }, spread = { .hot = false };
	size_t len = 0;
	len += (size_t)snprintf(hot.pids + len, sizeof hot.pids - len, "{");
	for (int i = 0; i < UPSERT_SESSIONS; i++)
		len += (size_t)snprintf(hot.pids + len, sizeof hot.pids - len, "%s%d", i ? "," : "", s[i]->pid);
	snprintf(hot.pids + len, sizeof hot.pids - len, "}");
	memcpy(spread.pids, hot.pids, sizeof spread.pids);
	long long hot_total, hot_n, spread_total, spread_n;
	if (!upsert_phase(L, s, &hot, &hot_total, &hot_n) ||
	    !upsert_phase(L, s, &spread, &spread_total, &spread_n))
		return;
	double secs = UPSERT_MS / 1000.0;
	char ratio[32];
	snprintf(ratio, sizeof ratio, "%.2f",
	         hot_total > 0 ? (double)spread_total / (double)hot_total : 0.0);
	lab_vint(L, "sessions", UPSERT_SESSIONS);
	lab_vint(L, "ms_each", UPSERT_MS);
	lab_vint(L, "hot_upserts", hot_total);
	lab_vint(L, "hot_n", hot_n);
	lab_vint(L, "hot_per_second", (long long)(hot_total / secs));
	lab_vint(L, "hot_lock_waits_seen", hot.waits);
	lab_vint(L, "hot_samples", hot.samples);
	lab_vint(L, "distinct_upserts", spread_total);
	lab_vint(L, "distinct_n", spread_n);
	lab_vint(L, "distinct_per_second", (long long)(spread_total / secs));
	lab_vint(L, "distinct_lock_waits_seen", spread.waits);
	lab_vint(L, "distinct_samples", spread.samples);
	lab_vtext(L, "distinct_to_hot_ratio", ratio);
	lab_verdict(L, hot_total > 0 && hot_n == hot_total && spread_n == spread_total &&
	                   hot.waits > 0 && spread.waits == 0,
	            "%d sessions for %.1f s: one hot key took %lld upserts (n = %lld), %lld row-lock"
	            " waits seen; distinct keys took %lld (sum n = %lld), %lld waits; throughput"
	            " ratio %s", UPSERT_SESSIONS, secs, hot_total, hot_n, hot.waits, spread_total,
	            spread_n, spread.waits, ratio);
}

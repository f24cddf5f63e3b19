/* lab_queue.c - the SKIP LOCKED job queue: disjoint claims by concurrent workers, completion
 * by the current owner only, and recovery of claims whose lease expired
 *
 * The statements are those of a plain PostgreSQL job queue (a jobs table, a claim with FOR
 * UPDATE SKIP LOCKED, a completion that checks the owner, a reaper), not pgcoord's own. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "lab_int.h"

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

/* The reaper: claims older than the 15-minute lease go back to pending, after a retry delay
 * given as a parameter. */
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

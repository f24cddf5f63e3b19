/* queue_browse.c - bounded reads of the queue for dashboards: capped counts, keyset pages of
 * jobs with filters, why a job waits, the registered workers
 *
 * A dashboard polls: whatever it reads must cost the same with a million finished jobs as with
 * ten. So every count stops at a cap, a page of jobs examines at most max_scan rows below its
 * cursor (keyset on the id, never OFFSET), and a text search looks only inside that window.
 * Like queue_admin.c: constant text with the schema put in, values as parameters, outside the
 * statement cache. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "queue_int.h"

/* Counts of one status, stopped at $2 rows. The ORDER BY is that of the index that holds the
 * rows (the claim indexes for pending jobs, unkeyed and keyed, jobs_scheduled,
 * job_history_queue): it makes the
 * planner walk that index, so a count reads at most $2 entries of it. Without it a status
 * that is most of a table gets a sequential scan, which reads the whole table when the queue
 * has none of those rows (a new queue beside a long history). */
#define CAPPED(tbl, cond, order) \
	" (SELECT count(*) FROM (SELECT 1 FROM @S@." tbl " WHERE queue = q.name AND " cond \
	" ORDER BY " order " LIMIT $2::bigint) c)"
#define CLAIM_ORDER "queue, eff_priority DESC, run_at, id"
#define CLAIM_KEY_ORDER "queue, key, eff_priority DESC, run_at, id"

/* Jobs of one status finished in the last minute: counted up to $2; past that, the newest $2
 * give the rate (so many in the time they took, per minute). */
#define RATE(status) \
	" (SELECT CASE WHEN count(*) < $2::bigint THEN count(*) ELSE round(count(*) * 60 /" \
	"   greatest(extract(epoch FROM statement_timestamp() - min(finished_at)), 0.001))::bigint END" \
	"  FROM (SELECT finished_at FROM @S@.job_history WHERE queue = q.name AND status = '" status "'" \
	"   AND finished_at > statement_timestamp() - interval '1 minute'" \
	"   ORDER BY finished_at DESC LIMIT $2::bigint) c)"

int pgc_queue_stats_capped(pgc_queue *q, const char *queue, long cap, pgc_queue_stat **stats,
                           size_t *n, pgc_error *err)
{
	pgc_error_clear(err);
	if (stats != NULL)
		*stats = NULL;
	if (n != NULL)
		*n = 0;
	if (q == NULL || stats == NULL || n == NULL)
		return pgc__err(err, PGC_EUSAGE, "pgc_queue_stats_capped: q, stats and n must not be NULL");
	if (cap < 1 || cap > 100000000)
		return pgc__err(err, PGC_EUSAGE, "pgc_queue_stats_capped: cap must be 1..100000000");
	if (pgc__queue_usable(q, "pgc_queue_stats_capped", err) != PGC_OK)
		return PGC_EUSAGE;
	if (queue != NULL && pgc__queue_check_name("pgc_queue_stats_capped", queue, err) != PGC_OK)
		return PGC_EUSAGE;
	char caps[24];
	snprintf(caps, sizeof caps, "%ld", cap);
	const char *v[2] = { queue, caps };
	int rc;
	PGresult *res = pgc__queue_run_text(q,
	        "SELECT q.name, q.paused,"
	        " least($2::bigint," CAPPED("jobs", "status = 'pending' AND key IS NULL", CLAIM_ORDER) " +"
	        CAPPED("jobs", "status = 'pending' AND key IS NOT NULL", CLAIM_KEY_ORDER) " +"
	        CAPPED("jobs", "status = 'scheduled' AND run_at <= statement_timestamp()", "queue, run_at") "),"
	        CAPPED("jobs", "status = 'scheduled' AND run_at > statement_timestamp()", "queue, run_at") ","
	        CAPPED("jobs", "status = 'running'", "queue") ","
	        CAPPED("job_history", "status = 'succeeded'", "queue, status, finished_at") ","
	        CAPPED("job_history", "status = 'failed'", "queue, status, finished_at") ","
	        CAPPED("job_history", "status = 'cancelled'", "queue, status, finished_at") ","
	        PGC__QUEUE_OLDEST_PENDING_SQL ","
	        RATE("succeeded") "," RATE("failed") ","
	        CAPPED("jobs", "status = 'waiting'", "queue, id")
	        " FROM @S@.queues q WHERE $1::text IS NULL OR q.name = $1 ORDER BY q.name",
	        2, v, &rc, err);
	if (res == NULL)
		return rc;
	int rows = 0;
	pgc_queue_stat *a = NULL;
	if ((rc = pgc__queue_stat_rows(res, queue, &a, &rows, err)) != PGC_OK)
		return rc;
	*stats = a;
	*n = (size_t)rows;
	return PGC_OK;
}

static bool live_status(const char *s)
{
	return strcmp(s, "scheduled") == 0 || strcmp(s, "pending") == 0 || strcmp(s, "running") == 0 ||
	       strcmp(s, "waiting") == 0;
}

static bool finished_status(const char *s)
{
	return strcmp(s, "succeeded") == 0 || strcmp(s, "failed") == 0 || strcmp(s, "cancelled") == 0;
}

/* The window: the max_scan ($2) highest ids below the cursor ($1) of the tables the status
 * allows ($7 live, $8 history), with what the filters need; then the ids of the first limit
 * ($6) that match, and how much of the window there was. The text test reads the payload only
 * when there is a text to look for, and never with $10 (errors only). */
#define WINDOW_COLS(tbl) \
	"SELECT id, queue, status, unique_key, key," \
	" CASE WHEN $5::text IS NULL THEN true" \
	"  ELSE (NOT $10::boolean AND strpos(payload::text, $5) > 0)" \
	"   OR strpos(coalesce(last_error, ''), $5) > 0 END AS hit" \
	" FROM @S@." tbl " WHERE id < $1::bigint"
static const char browse_sql[] =
	"WITH w AS ("
	" SELECT * FROM (" WINDOW_COLS("jobs") " AND $7::boolean ORDER BY id DESC LIMIT $2::bigint) a"
	" UNION ALL"
	" SELECT * FROM (" WINDOW_COLS("job_history") " AND $8::boolean ORDER BY id DESC LIMIT $2::bigint) b"
	" ORDER BY id DESC LIMIT $2::bigint),"
	" m AS (SELECT id FROM w WHERE hit AND ($3::text IS NULL OR queue = $3)"
	"  AND ($4::text IS NULL OR status = $4)"
	"  AND ($9::text IS NULL OR starts_with(unique_key, $9))"
	"  AND ($11::text IS NULL OR key = $11)"
	"  ORDER BY id DESC LIMIT $6::bigint)"
	" SELECT (SELECT count(*) FROM w), (SELECT coalesce(min(id), 0) FROM w),"
	" (SELECT count(*) FROM m), (SELECT coalesce(min(id), 0) FROM m),"
	" (SELECT coalesce(array_agg(id ORDER BY id DESC), '{}') FROM m)::text";

int pgc_queue_browse(pgc_queue *q, const pgc_queue_browse_filter *f, pgc_job_info ***out,
                     size_t *n, int64_t *next_before, pgc_error *err)
{
	pgc_error_clear(err);
	if (out != NULL)
		*out = NULL;
	if (n != NULL)
		*n = 0;
	if (next_before != NULL)
		*next_before = 0;
	if (q == NULL || f == NULL || out == NULL || n == NULL)
		return pgc__err(err, PGC_EUSAGE, "pgc_queue_browse: q, f, out and n must not be NULL");
	if (pgc__queue_usable(q, "pgc_queue_browse", err) != PGC_OK)
		return PGC_EUSAGE;
	if (f->queue != NULL && pgc__queue_check_name("pgc_queue_browse", f->queue, err) != PGC_OK)
		return PGC_EUSAGE;
	if (f->status != NULL && !live_status(f->status) && !finished_status(f->status))
		return pgc__err(err, PGC_EUSAGE,
		                "unknown status \"%.40s\": use scheduled, pending, running, succeeded, failed or cancelled",
		                f->status);
	if (f->key_prefix != NULL && f->key_prefix[0] == '\0')
		return pgc__err(err, PGC_EUSAGE, "pgc_queue_browse: key_prefix must not be empty (NULL: any job)");
	if (f->text != NULL && f->text[0] == '\0')
		return pgc__err(err, PGC_EUSAGE, "pgc_queue_browse: text must not be empty (NULL: any job)");
	if (f->job_key != NULL && (f->job_key[0] == '\0' || strlen(f->job_key) > PGC_QUEUE_KEY_MAX))
		return pgc__err(err, PGC_EUSAGE, "pgc_queue_browse: job_key must be 1 to %d bytes (NULL: any job)",
		                PGC_QUEUE_KEY_MAX);
	if (f->before_id < 0)
		return pgc__err(err, PGC_EUSAGE, "pgc_queue_browse: before_id must not be negative");
	if (f->limit < 0 || f->limit > 1000)
		return pgc__err(err, PGC_EUSAGE, "pgc_queue_browse: limit must be 1..1000 (0: 50)");
	if (f->max_scan < 0 || f->max_scan > 1000000)
		return pgc__err(err, PGC_EUSAGE, "pgc_queue_browse: max_scan must be 1..1000000 (0: 10000)");
	long limit = f->limit ? f->limit : 50, scan = f->max_scan ? f->max_scan : 10000;
	char before[24], scans[24], lims[24];
	snprintf(before, sizeof before, "%lld",
	         f->before_id > 0 ? (long long)f->before_id : (long long)INT64_MAX);
	snprintf(scans, sizeof scans, "%ld", scan);
	snprintf(lims, sizeof lims, "%ld", limit);
	bool live = f->status == NULL || live_status(f->status);
	bool hist = f->status == NULL || finished_status(f->status);
	const char *v[11] = { before, scans, f->queue, f->status, f->text, lims, live ? "t" : "f",
	                      hist ? "t" : "f", f->key_prefix, f->text_in_errors_only ? "t" : "f",
	                      f->job_key };
	int rc;
	PGresult *res = pgc__queue_run_text(q, browse_sql, 11, v, &rc, err);
	if (res == NULL)
		return rc;
	long seen = atol(PQgetvalue(res, 0, 0)), matched = atol(PQgetvalue(res, 0, 2));
	long long seen_min = atoll(PQgetvalue(res, 0, 1)), match_min = atoll(PQgetvalue(res, 0, 3));
	char *ids = strdup(PQgetvalue(res, 0, 4));
	PQclear(res);
	if (ids == NULL)
		return pgc__err(err, PGC_ENOMEM, "out of memory");
	/* The page is full: the next one starts below its last job. The window is full: everything
	 * down to its lowest id was examined. Otherwise nothing is left below the cursor. */
	int64_t next = matched == limit ? match_min : seen == scan ? seen_min : 0;
	pgc_job_info **a = calloc(matched ? (size_t)matched : 1, sizeof *a);
	if (a == NULL) {
		free(ids);
		return pgc__err(err, PGC_ENOMEM, "out of memory");
	}
	size_t got = 0;
	if (matched > 0) {
		char sql[4096];
		snprintf(sql, sizeof sql, pgc__queue_info_select, "id = ANY($1::bigint[])",
		         "id = ANY($1::bigint[])", "$2::bigint");
		const char *iv[2] = { ids, lims };
		res = pgc__queue_run_text(q, sql, 2, iv, &rc, err);
		if (res == NULL) {
			free(ids);
			free(a);
			return rc;
		}
		/* A job that moved from the live table to the history between the two statements is
		 * read once: the statement sees one snapshot. */
		for (int r = 0; r < PQntuples(res) && got < (size_t)matched; r++) {
			a[got] = pgc__queue_info_from_row(res, r);
			if (a[got] == NULL) {
				pgc_queue_infos_free(a, got);
				PQclear(res);
				free(ids);
				return pgc__err(err, PGC_ENOMEM, "out of memory");
			}
			got++;
		}
		PQclear(res);
	}
	free(ids);
	*out = a;
	*n = got;
	if (next_before != NULL)
		*next_before = next;
	return PGC_OK;
}

int pgc_queue_job_wait(pgc_queue *q, int64_t id, pgc_job_wait *out, pgc_error *err)
{
	pgc_error_clear(err);
	if (out != NULL)
		memset(out, 0, sizeof *out);
	if (q == NULL || out == NULL || id <= 0)
		return pgc__err(err, PGC_EUSAGE, "pgc_queue_job_wait: q and out must not be NULL, id positive");
	if (pgc__queue_usable(q, "pgc_queue_job_wait", err) != PGC_OK)
		return PGC_EUSAGE;
	char ids[24];
	snprintf(ids, sizeof ids, "%lld", (long long)id);
	const char *v[1] = { ids };
	int rc;
	/* The claim takes pending jobs by eff_priority DESC, run_at, id: the ones ahead are those
	 * before this one in that order, among the unkeyed jobs of its queue (jobs_claim) or the
	 * jobs of its key (jobs_claim_key), whose limit, rate and fair share decide the rest. */
	char sql[4096];
	snprintf(sql, sizeof sql,
	        "SELECT j.status, j.run_at > statement_timestamp(),"
	        " CASE WHEN isfinite(j.run_at) THEN greatest(extract(epoch FROM j.run_at - statement_timestamp()), 0)"
	        "  ELSE 0 END,"
	        " coalesce(qq.paused, false),"
	        " CASE WHEN j.status = 'pending' AND j.key IS NULL THEN (SELECT count(*) FROM (SELECT 1"
	        "   FROM @S@.jobs a WHERE a.queue = j.queue AND a.status = 'pending' AND a.key IS NULL"
	        "   AND (a.eff_priority > j.eff_priority OR (a.eff_priority = j.eff_priority"
	        "   AND (a.run_at, a.id) < (j.run_at, j.id))) LIMIT 10000) c)"
	        "  WHEN j.status = 'pending' THEN (SELECT count(*) FROM (SELECT 1"
	        "   FROM @S@.jobs a WHERE a.queue = j.queue AND a.status = 'pending' AND a.key = j.key"
	        "   AND (a.eff_priority > j.eff_priority OR (a.eff_priority = j.eff_priority"
	        "   AND (a.run_at, a.id) < (j.run_at, j.id))) LIMIT 10000) c) ELSE 0 END,"
	        " (SELECT count(*) FROM @S@.workers w WHERE j.queue = ANY (w.queues)"
	        "   AND w.seen_at > clock_timestamp() - interval '10 seconds'),"
	        " (SELECT coalesce(sum(w.free), 0) FROM @S@.workers w WHERE j.queue = ANY (w.queues)"
	        "   AND w.seen_at > clock_timestamp() - interval '10 seconds'),"
	        " j.attempts,"
	        /* A waiting job: its lowest live dependency, and how many more. */
	        " (SELECT min(d.dep) || ' ' || count(*) FROM @S@.job_deps d WHERE d.job = j.id),"
	        " " PGC__QUEUE_HELD_SQL("j") ", j.key IS NOT NULL"
	        " FROM @S@.jobs j LEFT JOIN @S@.queues qq ON qq.name = j.queue WHERE j.id = $1::bigint"
	        " UNION ALL SELECT h.status, false, 0, false, 0, 0, 0, h.attempts, NULL, NULL, false"
	        " FROM @S@.job_history h WHERE h.id = $1::bigint");
	PGresult *res = pgc__queue_run_text(q, sql, 1, v, &rc, err);
	if (res == NULL)
		return rc;
	if (PQntuples(res) == 0) {
		PQclear(res);
		return pgc__err(err, PGC_ENOTFOUND, "no job with id %lld", (long long)id);
	}
	const char *status = PQgetvalue(res, 0, 0);
	out->live = live_status(status);
	out->running = strcmp(status, "running") == 0;
	out->scheduled = PQgetvalue(res, 0, 1)[0] == 't';
	out->run_in_s = atof(PQgetvalue(res, 0, 2));
	out->paused = PQgetvalue(res, 0, 3)[0] == 't';
	out->ahead = atol(PQgetvalue(res, 0, 4));
	out->workers = atol(PQgetvalue(res, 0, 5));
	out->free_slots = atol(PQgetvalue(res, 0, 6));
	int attempts = atoi(PQgetvalue(res, 0, 7));
	long long dep = 0, deps = 0;
	if (strcmp(status, "waiting") == 0 && !PQgetisnull(res, 0, 8))
		(void)sscanf(PQgetvalue(res, 0, 8), "%lld %lld", &dep, &deps);
	char held[200] = "";
	if (!PQgetisnull(res, 0, 9))
		snprintf(held, sizeof held, "%s", PQgetvalue(res, 0, 9));
	bool keyed = PQgetvalue(res, 0, 10)[0] == 't';
	PQclear(res);
	if (!out->live || out->running)
		return PGC_OK;
	/* The first reason that would keep it waiting on its own. */
	if (deps > 1)
		snprintf(out->reason, sizeof out->reason, "waiting for job %lld, and %lld more", dep, deps - 1);
	else if (deps == 1)
		snprintf(out->reason, sizeof out->reason, "waiting for job %lld", dep);
	else if (out->paused)
		snprintf(out->reason, sizeof out->reason, "its queue is paused: no worker claims from it");
	else if (out->scheduled)
		snprintf(out->reason, sizeof out->reason, "%s: runs in %.0f s",
		         attempts > 0 ? "waiting out the backoff after a failed attempt" : "scheduled for later",
		         out->run_in_s);
	else if (out->workers == 0)
		snprintf(out->reason, sizeof out->reason,
		         "no listening worker serves its queue (seen in the last 10 s; polling workers do not register)");
	else if (held[0] != '\0')
		snprintf(out->reason, sizeof out->reason, "%s", held);
	else if (out->ahead > 0)
		snprintf(out->reason, sizeof out->reason, "%s%ld job%s ahead of it in its %s, %ld free worker slot%s",
		         out->ahead >= 10000 ? "at least " : "", out->ahead, out->ahead == 1 ? "" : "s",
		         keyed ? "key" : "queue", out->free_slots, out->free_slots == 1 ? "" : "s");
	else if (out->free_slots == 0)
		snprintf(out->reason, sizeof out->reason, "next in line: every worker slot of its queue is busy");
	else
		snprintf(out->reason, sizeof out->reason, "next in line: a worker should claim it at once");
	return PGC_OK;
}

int pgc_queue_workers(pgc_queue *q, pgc_queue_worker **out, size_t *n, pgc_error *err)
{
	pgc_error_clear(err);
	if (out != NULL)
		*out = NULL;
	if (n != NULL)
		*n = 0;
	if (q == NULL || out == NULL || n == NULL)
		return pgc__err(err, PGC_EUSAGE, "pgc_queue_workers: q, out and n must not be NULL");
	if (pgc__queue_usable(q, "pgc_queue_workers", err) != PGC_OK)
		return PGC_EUSAGE;
	int rc;
	PGresult *res = pgc__queue_run_text(q,
	        "SELECT channel, queues::text, free, extract(epoch FROM clock_timestamp() - seen_at)"
	        " FROM @S@.workers ORDER BY seen_at DESC LIMIT 1000", 0, NULL, &rc, err);
	if (res == NULL)
		return rc;
	int rows = PQntuples(res);
	pgc_queue_worker *a = calloc(rows ? (size_t)rows : 1, sizeof *a);
	if (a == NULL) {
		PQclear(res);
		return pgc__err(err, PGC_ENOMEM, "out of memory");
	}
	for (int r = 0; r < rows; r++) {
		snprintf(a[r].channel, sizeof a[r].channel, "%s", PQgetvalue(res, r, 0));
		snprintf(a[r].queues, sizeof a[r].queues, "%s", PQgetvalue(res, r, 1));
		a[r].free = atoi(PQgetvalue(res, r, 2));
		a[r].seen_s = atof(PQgetvalue(res, r, 3));
	}
	PQclear(res);
	*out = a;
	*n = (size_t)rows;
	return PGC_OK;
}

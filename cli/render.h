/* render.h - one JSON rendering per library object (render.c), for --json and the web API */
#ifndef PGCOORD_RENDER_H
#define PGCOORD_RENDER_H

#include <stdio.h>

#include "cli.h"
#include "json.h"

/* Every renderer writes one value with json_w: a member named key inside an object, an
 * element (key NULL) inside an array or at the top level. */

/* Flags of render_job and render_schedule. */
#define RENDER_FULL 0x1u         /* a job's detailed view: output, errors, the whole payload */
#define RENDER_HIDE_PAYLOAD 0x2u /* pgcoord web --hide-payloads: sizes only */

/* {"n":N,"per_ms":MS}, or null when r has no rate. */
void render_rate(json_w *w, const char *key, const pgc_rate *r);

/* One key's figures, as queue stats --json, queue limit --json and /api/keys print them. */
void render_key(json_w *w, const char *key, const pgc_queue_key_info *k);

/* One queue's counts, as queue stats --json and /api/queues print them. */
void render_queue_stat(json_w *w, const char *key, const pgc_queue_stat *st);

/* Why a job waits (pgc_queue_job_wait): live, running, scheduled, run_in_s, paused, ahead,
 * workers, free_slots, reason. */
void render_job_wait(json_w *w, const char *key, const pgc_job_wait *jw);

/* A job, as queue list/show --json and /api/jobs, /api/jobs/ID print it: with RENDER_FULL its
 * output, errors and payload, else a payload_preview; with wait not NULL a "wait" member. */
void render_job(json_w *w, const char *key, const pgc_job_info *j, const pgc_job_wait *wait, unsigned flags);

/* A schedule, as cron list/show --json and /api/schedules print it; last is its last run
 * (pgc_cron_runs), or NULL. Times are ISO 8601 in the schedule's zone. */
void render_schedule(json_w *w, const char *key, const pgc_cron_info *x, const pgc_cron_run *last,
                     unsigned flags);

/* An instant (microseconds) in c's zone, ISO 8601 with its offset; null for 0 or no c. */
void render_cron_time(json_w *w, const char *key, const pgc_cron *c, int64_t us);

/* A run's job as members of the object being written: job_status, attempts, max_attempts,
 * exit_status, duration_ms, error, output (cron history, a schedule's last_job). */
void render_cron_run_members(json_w *w, const pgc_cron_run *r);

/* The keys with a limit or a rate in force of the flow queues among st[] (*out freed with
 * free()), which the stats show. */
int cli_flow_keys(pgc_queue *q, const pgc_queue_stat *st, size_t n, pgc_queue_key_info **out,
                  size_t *nk, pgc_error *err);

/* An instant as ISO 8601 UTC with microseconds ("2026-11-30T08:40:08.645997Z"); null for 0. */
void render_time_us(json_w *w, const char *key, int64_t us);

/* A lease or fencing name, as lease show --json and /api/leases print it. */
void render_lease(json_w *w, const char *key, const pgc_lease_info *l);

#endif

/* pgcoord/cron.h - cron expressions, their next fire times, and time zones
 *
 * A schedule is a cron expression and an IANA time zone. The expression language is Vixie
 * cron's (cronie's), with an optional leading seconds field:
 *
 *   [second] minute hour day-of-month month day-of-week
 *
 * Each field is a list ("1,15") of values, ranges ("1-5"), steps ("*\/15", "1-30/3", and
 * "5/10", which means 5 to the field's maximum by 10), or "*". Months take JAN..DEC and days
 * of the week SUN..SAT, in any case; day-of-week 0 and 7 are both Sunday. The macros
 * @yearly (@annually), @monthly, @weekly, @daily (@midnight) and @hourly stand for
 * "0 0 1 1 *", "0 0 1 * *", "0 0 * * 0", "0 0 * * *" and "0 * * * *". @reboot is refused: a
 * fleet has no single boot to follow. When both day-of-month and day-of-week are restricted
 * (neither starts with "*"), a day matches when EITHER does; otherwise both must match.
 * An expression that can never fire ("0 0 30 2 *") is refused.
 *
 * Times are UTC instants in whole seconds since the Unix epoch (int64_t). Fire times are
 * computed in the schedule's zone, whose rules come from the host's tzdata (the TZif files
 * under /usr/share/zoneinfo, or $TZDIR): hosts that share schedules should have the same
 * tzdata version. A zone is read once per process and cached, and read again when its file
 * changes. Nothing here uses the process's TZ or localtime(): every function is thread-safe.
 *
 * Daylight saving time, as cronie does it:
 * - A fixed-time schedule (its minute and hour fields both do not start with "*", e.g.
 *   "30 2 * * *") fires once per matching local day. A time that a spring-forward skips fires
 *   at the first instant after the gap (02:30 in a 02:00-03:00 gap fires at 03:00); a time
 *   that a fall-back repeats fires at its first occurrence only.
 * - Any other schedule ("*\/15 * * * *", "0 * * * *", "*\/10 2 * * *") fires at every real
 *   occurrence of its times: twice in a repeated hour, not at all for skipped wall times.
 * The seconds field does not change which kind a schedule is. */
#ifndef PGCOORD_CRON_H
#define PGCOORD_CRON_H

#include <stdbool.h>

#include "common.h"
#include "conn.h"
#include "error.h"

#ifdef __cplusplus
extern "C" {
#endif

/* A parsed schedule: an expression and its zone. Immutable once parsed, so one schedule may
 * be used by any number of threads at once. */
typedef struct pgc_cron pgc_cron;

/* Longest expression and zone name accepted, in bytes. */
#define PGC_CRON_EXPR_MAX 1024
#define PGC_CRON_TZ_MAX 255

/* The size of a buffer that holds any time pgc_cron_format_local() writes, terminator
 * included (the longest, "10000-01-01T14:59:59+15:00:00", is 29 bytes). */
#define PGC_CRON_TIME_MAX 40

/* How far pgc_cron_next() looks: the Gregorian calendar repeats every 400 years (146097
 * days), so a day pattern that ever matches matches within that span. Fire times are
 * computed up to the end of the year 9999 (UTC). */
#define PGC_CRON_HORIZON_DAYS 146097
#define PGC_CRON_TIME_MIN INT64_C(-62135596800) /* 0001-01-01T00:00:00Z */
#define PGC_CRON_TIME_LAST INT64_C(253402300799) /* 9999-12-31T23:59:59Z */

/* Parses expr in the time zone tz (an IANA name such as "Europe/Berlin"; NULL or "" is UTC)
 * into *out, which the caller frees with pgc_cron_free(). Leading and trailing blanks are
 * ignored; fields are separated by spaces or tabs.
 *
 * Errors, all PGC_EUSAGE with a message that names the field, quotes its text and says what is
 * allowed ("hour field \"25\": out of range 0-23", "month field \"FOO\": unknown month name
 * (JAN..DEC or 1-12)", "expected 5 fields (minute hour day-of-month month day-of-week) or 6
 * (seconds first), got 4"), an expression that can never fire ("\"0 0 30 2 *\" can never
 * fire: ..."), @reboot, an unknown macro; a zone name that is unsafe (absolute, with a ".."
 * or empty component, characters outside A-Z a-z 0-9 / _ + - .), unknown ("unknown time zone
 * \"Europe/Berln\" (no such file in /usr/share/zoneinfo)"), or not a TZif file, or with leap
 * seconds (the right/ zones: instants here are POSIX seconds); PGC_ENOMEM. Thread-safe. */
PGC_EXTERN PGC_MUSTCHECK int pgc_cron_parse(const char *expr, const char *tz, pgc_cron **out,
                                            pgc_error *err);

/* Frees a schedule. NULL is accepted and ignored. */
PGC_EXTERN void pgc_cron_free(pgc_cron *c);

/* The first fire time strictly after after_unix_s, into *next_unix_s. Pure: the result
 * depends only on the schedule and the argument (and the zone's rules). Bounded: it looks at
 * most PGC_CRON_HORIZON_DAYS (400 years) ahead, and not past PGC_CRON_TIME_LAST, skipping
 * whole months, days, hours and minutes that cannot match: a few steps per day searched,
 * so that even a schedule as rare as "Feb 29 that is a Sunday" (40 years apart across 2100)
 * is found, and one that never fires is reported, without an unbounded loop.
 * Errors: PGC_EUSAGE (NULL arguments, after_unix_s before PGC_CRON_TIME_MIN or after
 * PGC_CRON_TIME_LAST), PGC_ENOTFOUND (no fire time within that span: the year 10000 is
 * reached, or the zone's DST rules skip every time the schedule has, as "*\/10 2 25-31 3 *\/7"
 * (every 10 minutes of 02:00 on the last Sunday of March) in Europe/Berlin does; a fixed time
 * in the gap fires at the gap's end instead, as "30 2 25-31 3 *\/7" does at 03:00).
 * Thread-safe. */
PGC_EXTERN PGC_MUSTCHECK int pgc_cron_next(const pgc_cron *c, int64_t after_unix_s,
                                           int64_t *next_unix_s, pgc_error *err);

/* The normalized expression: the same schedule in a canonical form that pgc_cron_parse()
 * reads back to the same schedule: numbers instead of names, Sunday as 0, macros expanded,
 * lists sorted with runs as ranges ("1-5", "5-55/10"), and fields that start with "*" kept
 * as "*" or "*\/N" (which decides the day and DST rules). Six fields when the expression has
 * a seconds field. Owned by c; valid until pgc_cron_free(c). NULL for a NULL c. */
PGC_EXTERN const char *pgc_cron_normalized(const pgc_cron *c);

/* Whether the expression has a seconds field (six fields). false for a NULL c. */
PGC_EXTERN bool pgc_cron_has_seconds(const pgc_cron *c);

/* The zone's name as given, "UTC" for NULL or "". Owned by c. NULL for a NULL c. */
PGC_EXTERN const char *pgc_cron_tz(const pgc_cron *c);

/* Longest zone abbreviation kept ("CEST", "+1030", "LMT"), terminator included. */
#define PGC_CRON_ABBREV_MAX 16

/* An instant as a wall clock in the schedule's zone shows it. */
typedef struct pgc_cron_local {
	int year;        /* 1..9999 */
	int month;       /* 1..12 */
	int day;         /* 1..31 */
	int hour;        /* 0..23 */
	int minute;      /* 0..59 */
	int second;      /* 0..59 */
	int weekday;     /* 0 (Sunday)..6 */
	int32_t utoff_s; /* offset from UTC in seconds, east positive (Berlin summer: 7200) */
	bool dst;        /* daylight saving time is in effect */
	char abbrev[PGC_CRON_ABBREV_MAX]; /* the zone's abbreviation, "CEST" */
} pgc_cron_local;

/* Fills *out with unix_s as local time in c's zone.
 * Errors: PGC_EUSAGE (NULL arguments, unix_s outside PGC_CRON_TIME_MIN..PGC_CRON_TIME_LAST).
 * Thread-safe. */
PGC_EXTERN PGC_MUSTCHECK int pgc_cron_local_time(const pgc_cron *c, int64_t unix_s,
                                                 pgc_cron_local *out, pgc_error *err);

/* Writes unix_s as ISO 8601 local time in c's zone with its offset,
 * "2026-03-29T03:00:00+02:00" ("+00:00" for UTC; an offset with seconds, as local mean times
 * before 1900 have, as "+00:53:28"). buf must hold PGC_CRON_TIME_MAX bytes.
 * Errors: PGC_EUSAGE (NULL c or buf, size below PGC_CRON_TIME_MAX, unix_s out of range; buf
 * is then "" when it can hold that). Thread-safe. */
PGC_EXTERN PGC_MUSTCHECK int pgc_cron_format_local(const pgc_cron *c, int64_t unix_s, char *buf,
                                                   size_t size, pgc_error *err);

/* Parses a time as people give one to a schedule, into *out_unix_s:
 * - ISO 8601 with an offset or Z: "2026-03-29T01:30:00Z", "2026-03-29 03:30+02:00",
 *   "2026-03-29T03:30:00.250+0200" (fractions of a second are dropped);
 * - a local time in c's zone, without an offset: "2026-03-29 02:30", "2026-03-29T02:30:15",
 *   "2026-03-29" (midnight). A local time that a spring-forward skips means the first instant
 *   after the gap (02:30 in Berlin's 02:00-03:00 gap is 03:00+02:00); one that a fall-back
 *   repeats means its first occurrence (02:30 on 2026-10-25 in Berlin is 02:30+02:00), as
 *   the fixed-time schedules' rule;
 * - "@N": N seconds since the Unix epoch.
 * Years 0001 to 9999. Errors: PGC_EUSAGE naming what is wrong. Thread-safe. */
PGC_EXTERN PGC_MUSTCHECK int pgc_cron_parse_time(const pgc_cron *c, const char *text,
                                                 int64_t *out_unix_s, pgc_error *err);

/* ---- schedules in the database: any number of schedulers, every tick once ---------------- *
 *
 * Schedules live in the cron_schedules table of a pgcoord schema (migration 008, applied by
 * pgc_schema_init). A tick is due when its time is reached by the SERVER's clock: next_tick <=
 * now(). pgc_cron_fire_due() fires due ticks in one transaction: it locks the due schedules
 * (FOR UPDATE SKIP LOCKED), computes each one's next tick with this host's tzdata, records
 * every tick in cron_ticks (primary key (schedule, tick_at): a tick fires once), enqueues its
 * job into the schedule's queue and moves next_tick. A crash anywhere rolls it all back and
 * another scheduler fires the tick. So any number of schedulers on any number of hosts, with
 * any clock skew, fire each tick exactly once, with no leader.
 *
 * The job's payload is the schedule's payload object with a "cron" member added:
 * {"cron": {"schedule": NAME, "tick": "2026-03-29T03:00:00+02:00"}} (the tick in the
 * schedule's zone, ISO 8601 with its offset; a triggered job's tick is the server's time).
 *
 * Catch-up after downtime (no scheduler ran, or the server was down): a tick is late when it
 * is more than its grace behind the server's clock; the grace is the schedule's period (the
 * time to the tick after it), at least 5 seconds and at most 1 minute. Ticks that are not
 * late fire whatever the policy:
 * - PGC_CRON_CATCHUP_SKIP: late ticks are missed (counted; one 'missed' row per gap);
 * - PGC_CRON_CATCHUP_ONCE: one job for all the late ticks, its tick the latest of them; the
 *   older ones are recorded as missed;
 * - PGC_CRON_CATCHUP_ALL: every due tick no older than catch_up_window fires, the newest
 *   catch_up_max of them; older ones are missed.
 *
 * Overlap PGC_CRON_OVERLAP_SKIP enqueues with the queue's unique key "cron:NAME": while the
 * previous tick's job is pending or running, a tick is recorded as 'skipped-overlap' and
 * counted. A jitter D puts the job's run_at at the tick plus a random delay in [0, D].
 *
 * A command schedule (def->command) keeps its command's words in its row (a text[]); its jobs go
 * to PGC_CRON_COMMAND_QUEUE and carry only the "cron" member's name and tick, from which the
 * runner reads the command with pgc_cron_command(): what runs is what the row says when the
 * job runs, never what a job carries. pgcoord cron run runs them with pgcoord worker's handler.
 *
 * A program that both schedules and works sets pgc_worker_options.cron (<pgcoord/queue.h>): its
 * worker then also runs a scheduler thread with a session of its own that calls
 * pgc_cron_fire_due() as pgcoord cron run does (PGC_CRON_WORKER_BATCH schedules per
 * transaction, again at once while batches come back full, otherwise when the next tick is
 * due, at least every second), named by the worker's worker_id, until the worker stops; its
 * stats count the jobs it enqueued (cron_enqueued). Any number of such workers and cron run
 * processes may run side by side: each tick is still fired once.
 *
 *     const char *queues[] = { "reports" };
 *     pgc_worker_options o = PGC_WORKER_OPTIONS_INIT;
 *     o.queues = queues;
 *     o.n_queues = 1;
 *     o.cron = true;    // the schedules whose ticks go to "reports" fire here too
 *
 * cron_ticks keeps the last 1000 rows per schedule; older rows are trimmed as ticks fire.
 * Every function here takes a connection that is not shared with another thread meanwhile. */

#define PGC_CRON_NAME_MAX 100           /* bytes; no white space or control characters */
#define PGC_CRON_CATCHUP_MAX_LIMIT 1000 /* catch_up_max: 1..1000 */
#define PGC_CRON_TICKS_KEPT 1000        /* cron_ticks rows kept per schedule */

typedef enum pgc_cron_catch_up {
	PGC_CRON_CATCHUP_SKIP = 0,
	PGC_CRON_CATCHUP_ONCE = 1,
	PGC_CRON_CATCHUP_ALL = 2
} pgc_cron_catch_up;

typedef enum pgc_cron_overlap {
	PGC_CRON_OVERLAP_ALLOW = 0,
	PGC_CRON_OVERLAP_SKIP = 1
} pgc_cron_overlap;

/* "skip", "once", "all"; "allow", "skip". NULL for a value out of range. */
PGC_EXTERN const char *pgc_cron_catch_up_name(pgc_cron_catch_up c);
PGC_EXTERN const char *pgc_cron_overlap_name(pgc_cron_overlap o);
/* The reverse; false for an unknown name (*out unchanged). */
PGC_EXTERN bool pgc_cron_catch_up_parse(const char *name, pgc_cron_catch_up *out);
PGC_EXTERN bool pgc_cron_overlap_parse(const char *name, pgc_cron_overlap *out);

/* A schedule's definition, for pgc_cron_add(). */
typedef struct pgc_cron_schedule {
	const char *expr;                /* the cron expression (pgc_cron_parse) */
	const char *tz;                  /* IANA zone; NULL or "": UTC */
	const char *queue;               /* the queue its jobs go to (required) */
	const char *payload;             /* a JSON object; NULL: {} */
	pgc_cron_catch_up catch_up;      /* default skip */
	int64_t catch_up_window_ms;      /* ALL: how far back; 0: 1 hour */
	int catch_up_max;                /* ALL: at most this many late ticks fire; 0: 100 */
	pgc_cron_overlap overlap;        /* default allow */
	int64_t jitter_ms;               /* >= 0 */
	/* A command schedule: argv[0] and its arguments (n_command words, 1 to
	 * PGC_CRON_COMMAND_MAX, none NULL, the first not empty), stored as a text[]; its jobs go to
	 * PGC_CRON_COMMAND_QUEUE (queue must then be NULL or that) and pgcoord cron run runs it.
	 * NULL: the jobs go to queue for a worker of the caller's. */
	const char *const *command;
	size_t n_command;
	/* The max_attempts of each job (a failed job is retried with backoff until then; a
	 * "retry later" answer does not count): 1 to 1000000; 0: the queue's default (25). */
	int max_attempts;
} pgc_cron_schedule;

#define PGC_CRON_SCHEDULE_INIT                                                              \
	{ NULL, NULL, NULL, NULL, PGC_CRON_CATCHUP_SKIP, 0, 0, PGC_CRON_OVERLAP_ALLOW, 0, NULL, 0, 0 }

/* The queue of every command schedule's jobs (a name no other schedule may use), and the
 * most words a command may have. */
#define PGC_CRON_COMMAND_QUEUE "cron:commands"
#define PGC_CRON_COMMAND_MAX 1024

/* Flags of pgc_cron_add(). */
#define PGC_CRON_REPLACE 0x01u /* an existing schedule of that name is changed (its next tick
                                  recomputed from now, its counters and history kept) */

/* Adds the schedule name to schema (NULL: "pgcoord"), its first tick the first fire time
 * after the server's now(), through the SQL function cron_add() (docs/PROTOCOL.md), which
 * checks the definition again. Runs inside the caller's transaction when one is open.
 * *changed (may be NULL) says whether anything was written: false when REPLACE found the same
 * definition (the next tick is then kept).
 * Errors: PGC_EUSAGE (NULL conn, name or def; a bad name, expression, zone, queue, payload
 * that is not a JSON object, window or maximum out of range, negative jitter: the message
 * names it; a command with no words, a NULL word or an empty first word, more than
 * PGC_CRON_COMMAND_MAX words; a command with a queue other than PGC_CRON_COMMAND_QUEUE, or that
 * queue without a command; max_attempts out of range), PGC_EDUPLICATE (name exists and REPLACE
 * is not given), PGC_ENOTFOUND (the
 * expression never fires again), PGC_ESQL (the payload is not JSON, SQLSTATE 22P02, or not
 * an object, 22023), PGC_ENOSCHEMA, PGC_ECONNLOST. */
PGC_EXTERN PGC_MUSTCHECK int pgc_cron_add(pgc_conn *conn, const char *schema, const char *name,
                                          const pgc_cron_schedule *def, unsigned int flags,
                                          bool *changed, pgc_error *err);

/* Removes a schedule and its ticks (jobs already enqueued stay). PGC_ENOTFOUND when there is
 * none. Runs inside the caller's transaction when one is open. */
PGC_EXTERN PGC_MUSTCHECK int pgc_cron_remove(pgc_conn *conn, const char *schema, const char *name,
                                             pgc_error *err);

/* Pauses (paused true) or resumes a schedule. A resumed schedule's next tick is recomputed
 * from the server's now(): the ticks of a pause are not caught up. Pausing a paused schedule
 * or resuming a running one changes nothing. PGC_ENOTFOUND when there is none. */
PGC_EXTERN PGC_MUSTCHECK int pgc_cron_pause(pgc_conn *conn, const char *schema, const char *name,
                                            bool paused, pgc_error *err);

/* Enqueues one job of the schedule now (outcome 'triggered'; next_tick does not move), also
 * when it is paused. *job_id (may be NULL) gets the job's id. Runs its own transaction
 * (inside the caller's when one is open).
 * Errors: PGC_ENOTFOUND, PGC_EDUPLICATE (overlap skip and the previous job is still pending
 * or running: nothing is enqueued), and as pgc_cron_add. */
PGC_EXTERN PGC_MUSTCHECK int pgc_cron_trigger(pgc_conn *conn, const char *schema, const char *name,
                                              int64_t *job_id, pgc_error *err);

/* A schedule as stored. Times are microseconds since the Unix epoch, 0 for none. */
typedef struct pgc_cron_info {
	char *name, *expr, *tz, *queue, *payload; /* payload: JSON text */
	pgc_cron_catch_up catch_up;
	int catch_up_max;
	int64_t catch_up_window_ms;
	pgc_cron_overlap overlap;
	int64_t jitter_ms;
	bool paused;
	/* next_tick_us: the next tick to come (one that fired ahead, or the next to fire; for a
	 * schedule added or resumed through SQL without a computed tick, which the scheduler
	 * computes at its next pass, the time of that add or resume);
	 * last_tick_us: the latest tick that has come (fired, skipped or missed), or trigger. */
	int64_t next_tick_us, last_tick_us, last_fired_us, created_us, updated_us, seen_us;
	char *last_outcome;   /* that same tick's outcome (enqueued, skipped-overlap, missed,
	                         triggered); NULL before the first */
	char *last_scheduler; /* the one that last fired a tick (seen_us: when), or NULL */
	int64_t fired, missed, skipped;
	int64_t last_success_us; /* the latest tick whose job succeeded (job_history), or 0 */
	int64_t db_now_us;       /* the server's now() when this was read */
	char *command;           /* a command schedule's argv as a JSON array of strings, or NULL */
	int max_attempts;        /* 0: the queue's default */
} pgc_cron_info;

/* The schedules of schema by name, or only the one called name (NULL: all). *out (free with
 * pgc_cron_infos_free) and *n. PGC_ENOTFOUND when name is given and does not exist. */
PGC_EXTERN PGC_MUSTCHECK int pgc_cron_list(pgc_conn *conn, const char *schema, const char *name,
                                           pgc_cron_info **out, size_t *n, pgc_error *err);
PGC_EXTERN void pgc_cron_infos_free(pgc_cron_info *infos, size_t n);

/* One row of cron_ticks. */
typedef struct pgc_cron_tick {
	int64_t tick_us, fired_us;
	char outcome[24]; /* "enqueued", "skipped-overlap", "missed", "triggered" */
	int ticks;        /* > 1: a gap of missed ticks starting at tick_us */
	int64_t job_id;   /* 0 for none */
} pgc_cron_tick;

/* The latest limit (1..PGC_CRON_TICKS_KEPT) ticks of a schedule, newest first, into *out
 * (free()) and *n. PGC_ENOTFOUND when the schedule does not exist. */
PGC_EXTERN PGC_MUSTCHECK int pgc_cron_history(pgc_conn *conn, const char *schema, const char *name,
                                              int limit, pgc_cron_tick **out, size_t *n,
                                              pgc_error *err);

/* One tick of the run log: the tick and what became of its job, read from the queue (the tick
 * is joined to its job by id; nothing is copied). */
typedef struct pgc_cron_run {
	char *schedule;      /* the schedule's name */
	pgc_cron_tick tick;
	/* The job as the queue knows it now: "waiting", "scheduled", "pending", "running",
	 * "succeeded", "failed" (for good: the dead letter), "cancelled"; "gone" when its row is
	 * no longer kept (the history's retention, pgc_queue_config, or a purge); "" when the
	 * tick has no job (skipped, missed). A pending or scheduled job with attempts > 0 is
	 * waiting to be retried after a failed attempt, whose error and exit status these are. */
	char job_status[16];
	int attempts, max_attempts;
	int exit_status;     /* of the last attempt's command; -1 for none */
	int64_t duration_ms; /* the last attempt's, or the running one's so far; -1 unknown */
	char *error;         /* the job's last error text (as long as it is), or NULL */
	char *output;        /* the end of its command's standard error, or NULL */
} pgc_cron_run;

/* Flags of pgc_cron_runs(). */
#define PGC_CRON_RUNS_COME 0x01u /* only ticks that have come (not those fired ahead) */

/* The run log: the latest limit (1..PGC_CRON_TICKS_KEPT) ticks of the schedule called name,
 * or of every schedule (name NULL; by name), newest first, with their jobs, into *out (free
 * with pgc_cron_runs_free) and *n. With limit 1 and PGC_CRON_RUNS_COME: each schedule's last
 * run. The log is bounded twice: a schedule keeps its PGC_CRON_TICKS_KEPT newest ticks, and
 * the scheduler (pgc_cron_fire_due) deletes ticks older than the longer of the queue's two
 * history retentions (pgc_queue_config: 7 days by default) whose jobs are not live; the jobs'
 * history rows go after those retentions (the reaper).
 * Errors: PGC_EUSAGE, PGC_ENOTFOUND (name given and no such schedule), PGC_ENOSCHEMA,
 * PGC_ENOMEM, PGC_ECONNLOST. */
PGC_EXTERN PGC_MUSTCHECK int pgc_cron_runs(pgc_conn *conn, const char *schema, const char *name, int limit,
                                           unsigned int flags, pgc_cron_run **out, size_t *n,
                                           pgc_error *err);
PGC_EXTERN void pgc_cron_runs_free(pgc_cron_run *runs, size_t n);

/* What one pgc_cron_fire_due() did. */
typedef struct pgc_cron_fire_result {
	int schedules;       /* due schedules this call locked */
	long enqueued;       /* jobs enqueued */
	long missed;         /* ticks recorded as missed */
	long skipped;        /* ticks skipped for an overlap */
	/* Milliseconds until the earliest next tick of an unpaused schedule by the server's
	 * clock (0 when one is due now, e.g. locked by another scheduler), -1 when there is none. */
	int64_t next_due_ms;
	/* Schedules that this host could not compute (a zone missing from its tzdata, say): they
	 * are left due for another scheduler. The last one's name and error. */
	int failed;
	char failed_name[PGC_CRON_NAME_MAX + 1];
	pgc_error failed_err;
} pgc_cron_fire_result;

/* The scheduler's step: fires the ticks due now of at most max (1..1000) schedules of schema
 * in one transaction (see above; one statement for all their ticks), and says when the next
 * one is due. scheduler (may be NULL) names the caller in last_scheduler ("host:pid"). Call it
 * again at once when out->schedules == max; otherwise sleep for at most out->next_due_ms, and
 * at most a second so that edits are seen. Must be called outside a transaction.
 *
 * lookahead_ms (0..PGC_CRON_LOOKAHEAD_MAX_MS; pgcoord cron run and the worker's scheduler use
 * PGC_CRON_LOOKAHEAD_MS) also fires the ticks of overlap-allow schedules that are due within
 * that time, by the server's clock: their jobs are enqueued with run_at = the tick (plus any
 * jitter), so they are 'scheduled' until the tick and runnable from the tick on, not from
 * whenever the scheduler got to them (10,000 schedules of one minute fire in well under the
 * lookahead). Such a tick is in cron_ticks before its time. Pausing, changing or removing the
 * schedule takes back its ticks that fired ahead and are not due yet (their jobs are deleted
 * while still 'scheduled'), so a paused schedule runs nothing after the pause, and a changed
 * one runs its new definition from its next tick on. Overlap-skip schedules fire when due
 * only: whether the previous job is still there is decided at the tick.
 * Errors: PGC_EUSAGE, PGC_ENOSCHEMA, PGC_ESQL, PGC_ECONNLOST, PGC_ETIMEDOUT (nothing was
 * fired then: the transaction rolled back). */
#define PGC_CRON_LOOKAHEAD_MS 5000
#define PGC_CRON_LOOKAHEAD_MAX_MS 60000
PGC_EXTERN PGC_MUSTCHECK int pgc_cron_fire_due(pgc_conn *conn, const char *schema,
                                               const char *scheduler, int max, int64_t lookahead_ms,
                                               pgc_cron_fire_result *out, pgc_error *err);

/* The command of the command schedule name, as stored: a NULL-terminated argv in *argv_out,
 * one allocation (free() it). Takes the name from a job's payload (pgc_cron_payload_tick),
 * so that what runs is what the schedule's row says now, never what a job carries.
 * Errors: PGC_EUSAGE (NULL arguments, a bad name), PGC_ENOTFOUND (no such schedule, or it
 * has no command: removed or changed since the job was enqueued), PGC_ENOSCHEMA,
 * PGC_ECONNLOST, PGC_ENOMEM. */
PGC_EXTERN PGC_MUSTCHECK int pgc_cron_command(pgc_conn *conn, const char *schema, const char *name,
                                              char ***argv_out, pgc_error *err);

/* Reads the "cron" member that a scheduled job's payload carries (a JSON object with
 * "cron": {"schedule": NAME, "tick": TIME}, as top-level member): NAME into schedule and TIME
 * into tick (each of size bytes, at least PGC_CRON_NAME_MAX + 1; JSON escapes other than
 * \" \\ \/ are refused). Returns true when both were found; false (both "") for any other
 * payload, or when either does not fit. Pure; thread-safe. pgcoord worker uses it for
 * PGCOORD_CRON_SCHEDULE and PGCOORD_CRON_TICK. */
PGC_EXTERN bool pgc_cron_payload_tick(const char *payload, char *schedule, char *tick, size_t size);

#ifdef __cplusplus
}
#endif
#endif

/* test_cron_sched.c - cron schedules in the database and the scheduler's step, against a real
 * server: argument checks, a locked schedule left to its scheduler, a tick fired once
 *
 * Each case runs in its own process with its own schema (pgc_cron_<pid>). */
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "util/util.h"
#include "pgt.h"

static char schema[64];

static void drop_schema(void)
{
	pgc_conn *c = t_connect(NULL);
	char q[160];
	snprintf(q, sizeof q, "DROP SCHEMA IF EXISTS \"%s\" CASCADE", schema);
	pgc_error err;
	if (pgc_exec(c, q, &err) != PGC_OK)
		fprintf(stderr, "drop schema: %s\n", err.message);
	pgc_conn_close(c);
}

static pgc_conn *setup(void)
{
	snprintf(schema, sizeof schema, "pgc_cron_%d", (int)getpid());
	pgc_conn *c = t_connect("pgcoord/test-cron");
	pgc_error err;
	if (pgc_schema_init(c, schema, NULL, NULL, &err) != PGC_OK)
		T_FAIL("init: %s", err.message);
	atexit(drop_schema);
	return c;
}

static void cron_sched__bad_arguments(void)
{
	pgc_conn *c = setup();
	pgc_error err;
	pgc_cron_schedule d = PGC_CRON_SCHEDULE_INIT;
	d.expr = "* * * * *";
	d.queue = "q";
	T_ASSERT_INT_EQ(pgc_cron_add(NULL, schema, "a", &d, 0, NULL, &err), PGC_EUSAGE);
	T_ASSERT_INT_EQ(pgc_cron_add(c, schema, NULL, &d, 0, NULL, &err), PGC_EUSAGE);
	T_ASSERT_INT_EQ(pgc_cron_add(c, schema, "a", NULL, 0, NULL, &err), PGC_EUSAGE);
	T_ASSERT_INT_EQ(pgc_cron_add(c, schema, "a b", &d, 0, NULL, &err), PGC_EUSAGE);
	T_ASSERT_CONTAINS(err.message, "white space");
	T_ASSERT_INT_EQ(pgc_cron_add(c, schema, "a", &d, 0x10, NULL, &err), PGC_EUSAGE);
	T_ASSERT_INT_EQ(pgc_cron_add(c, "bad$schema", "a", &d, 0, NULL, &err), PGC_EUSAGE);
	d.jitter_ms = -1;
	T_ASSERT_INT_EQ(pgc_cron_add(c, schema, "a", &d, 0, NULL, &err), PGC_EUSAGE);
	d.jitter_ms = 0;
	d.catch_up_max = 1001;
	T_ASSERT_INT_EQ(pgc_cron_add(c, schema, "a", &d, 0, NULL, &err), PGC_EUSAGE);
	d.catch_up_max = 0;
	d.catch_up = (pgc_cron_catch_up)7;
	T_ASSERT_INT_EQ(pgc_cron_add(c, schema, "a", &d, 0, NULL, &err), PGC_EUSAGE);
	d.catch_up = PGC_CRON_CATCHUP_SKIP;
	d.queue = NULL;
	T_ASSERT_INT_EQ(pgc_cron_add(c, schema, "a", &d, 0, NULL, &err), PGC_EUSAGE);
	d.queue = "q";
	d.expr = "0 0 30 2 *";
	T_ASSERT_INT_EQ(pgc_cron_add(c, schema, "a", &d, 0, NULL, &err), PGC_EUSAGE);
	d.expr = "* * * * *";
	d.payload = "[1]";
	T_ASSERT_INT_EQ(pgc_cron_add(c, schema, "a", &d, 0, NULL, &err), PGC_ESQL);
	T_ASSERT_STR_EQ(err.sqlstate, "22023");
	d.payload = NULL;
	T_ASSERT_INT_EQ(pgc_cron_remove(NULL, schema, "a", &err), PGC_EUSAGE);
	T_ASSERT_INT_EQ(pgc_cron_remove(c, schema, NULL, &err), PGC_EUSAGE);
	T_ASSERT_INT_EQ(pgc_cron_remove(c, schema, "a", &err), PGC_ENOTFOUND);
	T_ASSERT_INT_EQ(pgc_cron_pause(c, schema, "", true, &err), PGC_EUSAGE);
	T_ASSERT_INT_EQ(pgc_cron_trigger(c, schema, "a", NULL, &err), PGC_ENOTFOUND);
	pgc_cron_info *xs;
	size_t n;
	T_ASSERT_INT_EQ(pgc_cron_list(c, schema, NULL, NULL, &n, &err), PGC_EUSAGE);
	T_ASSERT_INT_EQ(pgc_cron_list(c, schema, "a", &xs, &n, &err), PGC_ENOTFOUND);
	pgc_cron_tick *t;
	T_ASSERT_INT_EQ(pgc_cron_history(c, schema, "a", 0, &t, &n, &err), PGC_EUSAGE);
	T_ASSERT_INT_EQ(pgc_cron_history(c, schema, "a", 10, &t, &n, &err), PGC_ENOTFOUND);
	pgc_cron_fire_result res;
	T_ASSERT_INT_EQ(pgc_cron_fire_due(NULL, schema, NULL, 10, 0, &res, &err), PGC_EUSAGE);
	T_ASSERT_INT_EQ(pgc_cron_fire_due(c, schema, NULL, 0, 0, &res, &err), PGC_EUSAGE);
	T_ASSERT_INT_EQ(pgc_cron_fire_due(c, schema, NULL, 10, 0, NULL, &err), PGC_EUSAGE);
	T_ASSERT_INT_EQ(pgc_cron_fire_due(c, "nosuch_schema_here", NULL, 10, 0, &res, &err), PGC_ENOSCHEMA);
	/* Inside a transaction the step refuses: it must commit its own. */
	sql(c, "BEGIN");
	T_ASSERT_INT_EQ(pgc_cron_fire_due(c, schema, NULL, 10, 0, &res, &err), PGC_EUSAGE);
	sql(c, "ROLLBACK");
	T_ASSERT_INT_EQ(pgc_cron_add(c, schema, "a", &d, 0, NULL, &err), PGC_OK);
	T_ASSERT_INT_EQ(pgc_cron_add(c, schema, "a", &d, 0, NULL, &err), PGC_EDUPLICATE);
	bool changed = true;
	T_ASSERT_INT_EQ(pgc_cron_add(c, schema, "a", &d, PGC_CRON_REPLACE, &changed, &err), PGC_OK);
	T_ASSERT(!changed);
	pgc_conn_close(c);
}

static void cron_sched__payload_tick(void)
{
	char s[128], t[128];
	T_ASSERT(pgc_cron_payload_tick("{\"a\": [1, {\"cron\": 2}], \"cron\": {\"tick\": \"2026-01-01T00:00:00+00:00\", "
	                               "\"schedule\": \"n\\\"q\"}}", s, t, sizeof s));
	T_ASSERT_STR_EQ(s, "n\"q");
	T_ASSERT_STR_EQ(t, "2026-01-01T00:00:00+00:00");
	T_ASSERT(!pgc_cron_payload_tick("{\"x\": {\"cron\": {\"schedule\": \"a\", \"tick\": \"b\"}}}", s, t, sizeof s));
	T_ASSERT_STR_EQ(s, "");
	T_ASSERT(!pgc_cron_payload_tick("{\"cron\": {\"schedule\": \"a\"}}", s, t, sizeof s));
	T_ASSERT(!pgc_cron_payload_tick("[1,2]", s, t, sizeof s));
	T_ASSERT(!pgc_cron_payload_tick("{\"cron\": ", s, t, sizeof s));
	T_ASSERT(!pgc_cron_payload_tick(NULL, s, t, sizeof s));
	T_ASSERT(!pgc_cron_payload_tick("{}", NULL, t, sizeof s));
}

/* A schedule locked by one scheduler's transaction is skipped by the other (due, so it comes
 * back soon), fired once when the lock goes, and not again. */
static void cron_sched__locked_schedule_fires_once(void)
{
	pgc_conn *a = setup(), *b = t_connect(NULL);
	pgc_error err;
	pgc_cron_schedule d = PGC_CRON_SCHEDULE_INIT;
	d.expr = "0 0 1 1 *"; /* once a year: only the tick made due below fires */
	d.queue = "q";
	T_ASSERT_INT_EQ(pgc_cron_add(a, schema, "y", &d, 0, NULL, &err), PGC_OK);
	sql(a, "UPDATE \"%s\".cron_schedules SET next_tick = date_trunc('second', now()) - interval '1 second'", schema);
	sql(a, "BEGIN");
	sql(a, "SELECT 1 FROM \"%s\".cron_schedules FOR UPDATE", schema);
	pgc_cron_fire_result res;
	T_ASSERT_INT_EQ(pgc_cron_fire_due(b, schema, "b", 10, 0, &res, &err), PGC_OK);
	T_ASSERT_INT_EQ(res.schedules, 0);
	T_ASSERT_INT_EQ(res.next_due_ms, 0);
	sql(a, "ROLLBACK");
	T_ASSERT_INT_EQ(pgc_cron_fire_due(b, schema, "b", 10, 0, &res, &err), PGC_OK);
	T_ASSERT_INT_EQ(res.schedules, 1);
	T_ASSERT_INT_EQ(res.enqueued, 1);
	T_ASSERT(res.next_due_ms > 0);
	T_ASSERT_INT_EQ(pgc_cron_fire_due(a, schema, "a", 10, 0, &res, &err), PGC_OK);
	T_ASSERT_INT_EQ(res.schedules, 0);
	T_ASSERT_INT_EQ(sql_int(a, "SELECT count(*) FROM \"%s\".jobs", schema), 1);
	T_ASSERT_INT_EQ(sql_int(a, "SELECT count(*) FROM \"%s\".cron_ticks", schema), 1);
	pgc_cron_info *xs;
	size_t n;
	T_ASSERT_INT_EQ(pgc_cron_list(a, schema, "y", &xs, &n, &err), PGC_OK);
	T_ASSERT_INT_EQ(n, 1);
	T_ASSERT_INT_EQ(xs[0].fired, 1);
	T_ASSERT_STR_EQ(xs[0].last_scheduler, "b");
	T_ASSERT_STR_EQ(xs[0].last_outcome, "enqueued");
	pgc_cron_infos_free(xs, n);
	/* Trigger: one more job, next_tick unchanged; paused schedules do not fire. */
	long long nt = sql_int(a, "SELECT extract(epoch FROM next_tick)::int8 FROM \"%s\".cron_schedules", schema);
	int64_t id = 0;
	T_ASSERT_INT_EQ(pgc_cron_trigger(a, schema, "y", &id, &err), PGC_OK);
	T_ASSERT(id > 0);
	T_ASSERT_INT_EQ(sql_int(a, "SELECT extract(epoch FROM next_tick)::int8 FROM \"%s\".cron_schedules", schema), nt);
	T_ASSERT_INT_EQ(pgc_cron_pause(a, schema, "y", true, &err), PGC_OK);
	sql(a, "UPDATE \"%s\".cron_schedules SET next_tick = now() - interval '1 second'", schema);
	T_ASSERT_INT_EQ(pgc_cron_fire_due(b, schema, "b", 10, 0, &res, &err), PGC_OK);
	T_ASSERT_INT_EQ(res.schedules, 0);
	T_ASSERT_INT_EQ(res.next_due_ms, -1);
	pgc_cron_tick *t;
	T_ASSERT_INT_EQ(pgc_cron_history(a, schema, "y", 10, &t, &n, &err), PGC_OK);
	T_ASSERT_INT_EQ(n, 2);
	T_ASSERT_STR_EQ(t[0].outcome, "triggered");
	T_ASSERT_INT_EQ(t[0].job_id, id);
	free(t);
	pgc_conn_close(a);
	pgc_conn_close(b);
}

/* Ticks fired ahead: with a lookahead, an 'allow' schedule's tick due within it fires now, its
 * job 'scheduled' with run_at = the tick; a 'skip' one waits for its tick. Pausing, editing
 * and removing take back what fired ahead (its job and its row, the counter); a job that
 * became due meanwhile stays. One batch covers schedules of several queues. */
static void cron_sched__lookahead(void)
{
	pgc_conn *c = setup();
	pgc_error err;
	pgc_cron_fire_result res;
	T_ASSERT_INT_EQ(pgc_cron_fire_due(c, schema, NULL, 10, -1, &res, &err), PGC_EUSAGE);
	T_ASSERT_INT_EQ(pgc_cron_fire_due(c, schema, NULL, 10, PGC_CRON_LOOKAHEAD_MAX_MS + 1, &res, &err), PGC_EUSAGE);
	T_ASSERT_CONTAINS(err.message, "lookahead");
	pgc_cron_schedule d = PGC_CRON_SCHEDULE_INIT;
	d.expr = "0 0 1 1 *"; /* once a year: only the ticks made due below fire */
	const char *names[] = { "a1", "a2", "b1", "sk" };
	for (int i = 0; i < 4; i++) {
		d.queue = names[i][0] == 'b' ? "qb" : "qa";
		d.overlap = i == 3 ? PGC_CRON_OVERLAP_SKIP : PGC_CRON_OVERLAP_ALLOW;
		T_ASSERT_INT_EQ(pgc_cron_add(c, schema, names[i], &d, 0, NULL, &err), PGC_OK);
	}
	/* Every tick 30 s ahead: nothing with a lookahead of 10 s, the three 'allow' ones with 40 s. */
	sql(c, "UPDATE \"%s\".cron_schedules SET next_tick = date_trunc('second', now()) + interval '30 seconds'", schema);
	T_ASSERT_INT_EQ(pgc_cron_fire_due(c, schema, "s", 10, 10000, &res, &err), PGC_OK);
	T_ASSERT_INT_EQ(res.schedules, 0);
	T_ASSERT(res.next_due_ms > 15000 && res.next_due_ms <= 20000);
	T_ASSERT_INT_EQ(pgc_cron_fire_due(c, schema, "s", 10, 40000, &res, &err), PGC_OK);
	T_ASSERT_INT_EQ(res.schedules, 3);
	T_ASSERT_INT_EQ(res.enqueued, 3);
	/* The overlap-skip one is due at its tick: about 30 s from now. */
	T_ASSERT(res.next_due_ms > 25000 && res.next_due_ms <= 30000);
	T_ASSERT_INT_EQ(sql_int(c, "SELECT count(*) FROM \"%s\".jobs j JOIN \"%s\".cron_ticks t ON t.job_id = j.id"
	                        " WHERE j.status = 'scheduled' AND j.run_at = t.tick_at AND t.tick_at > now()"
	                        " AND (j.payload->'cron'->>'tick')::timestamptz = t.tick_at", schema, schema), 3);
	T_ASSERT_INT_EQ(sql_int(c, "SELECT count(*) FROM \"%s\".jobs WHERE queue = 'qb'", schema), 1);
	T_ASSERT_INT_EQ(sql_int(c, "SELECT count(*) FROM \"%s\".cron_schedules WHERE fired = 1"
	                        " AND next_tick > now() + interval '1 day'", schema), 3);
	/* Pause a1: its job and tick are gone, its next tick is the one taken back. */
	T_ASSERT_INT_EQ(pgc_cron_pause(c, schema, "a1", true, &err), PGC_OK);
	T_ASSERT_INT_EQ(sql_int(c, "SELECT count(*) FROM \"%s\".cron_ticks WHERE schedule = 'a1'", schema), 0);
	T_ASSERT_INT_EQ(sql_int(c, "SELECT count(*) FROM \"%s\".jobs WHERE payload->'cron'->>'schedule' = 'a1'",
	                        schema), 0);
	T_ASSERT_INT_EQ(sql_int(c, "SELECT count(*) FROM \"%s\".cron_schedules WHERE name = 'a1' AND fired = 0"
	                        " AND next_tick < now() + interval '1 minute' AND last_tick IS NULL", schema), 1);
	/* Edit a2 (a new payload): the tick fired ahead with the old payload is taken back. */
	d.queue = "qa";
	d.overlap = PGC_CRON_OVERLAP_ALLOW;
	d.payload = "{\"v\": 2}";
	bool changed = false;
	T_ASSERT_INT_EQ(pgc_cron_add(c, schema, "a2", &d, PGC_CRON_REPLACE, &changed, &err), PGC_OK);
	T_ASSERT(changed);
	T_ASSERT_INT_EQ(sql_int(c, "SELECT count(*) FROM \"%s\".jobs WHERE payload->'cron'->>'schedule' = 'a2'",
	                        schema), 0);
	T_ASSERT_INT_EQ(sql_int(c, "SELECT count(*) FROM \"%s\".cron_schedules WHERE name = 'a2' AND fired = 0"
	                        " AND next_tick > now() + interval '1 day'", schema), 1);
	/* b1's job became due (a worker promoted it): removing b1 leaves that job alone. */
	sql(c, "UPDATE \"%s\".jobs SET status = 'pending' WHERE queue = 'qb'", schema);
	T_ASSERT_INT_EQ(pgc_cron_remove(c, schema, "b1", &err), PGC_OK);
	T_ASSERT_INT_EQ(sql_int(c, "SELECT count(*) FROM \"%s\".jobs WHERE queue = 'qb'", schema), 1);
	/* The same in a caller's transaction, rolled back: nothing changes. */
	T_ASSERT_INT_EQ(pgc_cron_pause(c, schema, "a1", false, &err), PGC_OK);
	sql(c, "UPDATE \"%s\".cron_schedules SET next_tick = date_trunc('second', now()) + interval '30 seconds'"
	    " WHERE name = 'a1'", schema);
	T_ASSERT_INT_EQ(pgc_cron_fire_due(c, schema, "s", 10, 40000, &res, &err), PGC_OK);
	T_ASSERT_INT_EQ(res.enqueued, 1);
	sql(c, "BEGIN");
	T_ASSERT_INT_EQ(pgc_cron_pause(c, schema, "a1", true, &err), PGC_OK);
	sql(c, "ROLLBACK");
	T_ASSERT_INT_EQ(sql_int(c, "SELECT count(*) FROM \"%s\".jobs WHERE payload->'cron'->>'schedule' = 'a1'"
	                        " AND status = 'scheduled'", schema), 1);
	pgc_conn_close(c);
}

/* A command schedule: its words kept as given (quotes, blanks, backslashes, UTF-8), its jobs
 * in the command queue with its max_attempts, and the command read back by name only. */
static void cron_sched__command_schedule(void)
{
	pgc_conn *c = setup();
	pgc_error err;
	static const char *const argv[] = { "sh", "-c", "echo \"$1\" 'x'\\", "a b", "{\"q\"}", "\xc3\xa9" };
	pgc_cron_schedule d = PGC_CRON_SCHEDULE_INIT;
	d.expr = "0 0 1 1 *";
	d.command = argv;
	d.n_command = 0;
	T_ASSERT_INT_EQ(pgc_cron_add(c, schema, "cmd", &d, 0, NULL, &err), PGC_EUSAGE);
	d.n_command = 6;
	d.queue = "other";
	T_ASSERT_INT_EQ(pgc_cron_add(c, schema, "cmd", &d, 0, NULL, &err), PGC_EUSAGE);
	T_ASSERT_CONTAINS(err.message, PGC_CRON_COMMAND_QUEUE);
	d.queue = NULL;
	d.max_attempts = -1;
	T_ASSERT_INT_EQ(pgc_cron_add(c, schema, "cmd", &d, 0, NULL, &err), PGC_EUSAGE);
	d.max_attempts = 2;
	T_ASSERT_INT_EQ(pgc_cron_add(c, schema, "cmd", &d, 0, NULL, &err), PGC_OK);
	/* The command queue is not for schedules without a command. */
	pgc_cron_schedule p = PGC_CRON_SCHEDULE_INIT;
	p.expr = "0 0 1 1 *";
	p.queue = PGC_CRON_COMMAND_QUEUE;
	T_ASSERT_INT_EQ(pgc_cron_add(c, schema, "plain", &p, 0, NULL, &err), PGC_EUSAGE);
	char **got = NULL;
	T_ASSERT_INT_EQ(pgc_cron_command(c, schema, "cmd", &got, &err), PGC_OK);
	for (int i = 0; i < 6; i++)
		T_ASSERT_STR_EQ(got[i], argv[i]);
	T_ASSERT(got[6] == NULL);
	free(got);
	T_ASSERT_INT_EQ(pgc_cron_command(c, schema, "nosuch", &got, &err), PGC_ENOTFOUND);
	T_ASSERT(got == NULL);
	T_ASSERT_INT_EQ(pgc_cron_command(c, schema, "cmd", NULL, &err), PGC_EUSAGE);
	T_ASSERT_INT_EQ(pgc_cron_command(c, schema, NULL, &got, &err), PGC_EUSAGE);
	int64_t id = 0;
	T_ASSERT_INT_EQ(pgc_cron_trigger(c, schema, "cmd", &id, &err), PGC_OK);
	T_ASSERT_INT_EQ(sql_int(c, "SELECT count(*) FROM \"%s\".jobs WHERE id = %lld AND queue = 'cron:commands'"
	                        " AND max_attempts = 2 AND NOT payload ? 'command'", schema, (long long)id), 1);
	pgc_cron_info *xs;
	size_t n;
	T_ASSERT_INT_EQ(pgc_cron_list(c, schema, "cmd", &xs, &n, &err), PGC_OK);
	T_ASSERT_STR_EQ(xs[0].queue, PGC_CRON_COMMAND_QUEUE);
	T_ASSERT_STR_EQ(xs[0].command, "[\"sh\",\"-c\",\"echo \\\"$1\\\" 'x'\\\\\",\"a b\",\"{\\\"q\\\"}\",\"\xc3\xa9\"]");
	T_ASSERT_INT_EQ(xs[0].max_attempts, 2);
	pgc_cron_infos_free(xs, n);
	/* Replacing it with the same definition changes nothing; another word does. */
	bool changed = true;
	T_ASSERT_INT_EQ(pgc_cron_add(c, schema, "cmd", &d, PGC_CRON_REPLACE, &changed, &err), PGC_OK);
	T_ASSERT(!changed);
	d.n_command = 5;
	T_ASSERT_INT_EQ(pgc_cron_add(c, schema, "cmd", &d, PGC_CRON_REPLACE, &changed, &err), PGC_OK);
	T_ASSERT(changed);
	/* A schema from before these columns: told to upgrade, not a bare SQL error. */
	sql(c, "ALTER TABLE \"%s\".cron_schedules DROP COLUMN max_attempts", schema);
	T_ASSERT_INT_EQ(pgc_cron_list(c, schema, NULL, &xs, &n, &err), PGC_ENOSCHEMA);
	T_ASSERT_CONTAINS(err.message, "older than this pgcoord");
	pgc_conn_close(c);
}

/* Embedding: workers with opts.cron schedule and work in one program. Two of them fire one
 * every-second schedule into the queue they work on: every tick is enqueued once, each job is
 * handled once and carries its tick. */
static atomic_int handled;
static atomic_int handled_bad;

static void tick_handler(const pgc_job *job, pgc_job_result *res, void *arg)
{
	(void)arg;
	(void)res;
	char s[PGC_CRON_NAME_MAX + 1], t[PGC_CRON_NAME_MAX + 1];
	if (pgc_cron_payload_tick(job->payload, s, t, sizeof s) && strcmp(s, "sec") == 0)
		atomic_fetch_add(&handled, 1);
	else
		atomic_fetch_add(&handled_bad, 1);
}

static void cron_sched__worker_schedules(void)
{
	pgc_conn *c = setup();
	pgc_error err;
	pgc_cron_schedule d = PGC_CRON_SCHEDULE_INIT;
	d.expr = "* * * * * *";
	d.queue = "ticks";
	T_ASSERT_INT_EQ(pgc_cron_add(c, schema, "sec", &d, 0, NULL, &err), PGC_OK);
	const char *queues[] = { "ticks" };
	pgc_worker_options o = PGC_WORKER_OPTIONS_INIT;
	o.dsn = t_dsn();
	o.schema = schema;
	o.queues = queues;
	o.n_queues = 1;
	o.poll_ms = 100;
	o.cron = true;
	pgc_worker *w[2];
	for (int i = 0; i < 2; i++) {
		T_ASSERT_INT_EQ(pgc_worker_new(&o, tick_handler, NULL, &w[i], &err), PGC_OK);
		T_ASSERT_INT_EQ(pgc_worker_start(w[i], &err), PGC_OK);
	}
	int64_t deadline = pgc__now_ms() + 20000;
	while (pgc__now_ms() < deadline && atomic_load(&handled) < 4)
		sleep_ms(50);
	for (int i = 0; i < 2; i++)
		pgc_worker_stop(w[i], 2000);
	long fired = 0;
	for (int i = 0; i < 2; i++) {
		T_ASSERT_INT_EQ(pgc_worker_wait(w[i], &err), PGC_OK);
		pgc_worker_stats st;
		pgc_worker_get_stats(w[i], &st);
		fired += st.cron_enqueued;
		pgc_worker_free(w[i]);
	}
	T_ASSERT(atomic_load(&handled) >= 4);
	T_ASSERT_INT_EQ(atomic_load(&handled_bad), 0);
	long long ticks = sql_int(c, "SELECT count(*) FROM \"%s\".cron_ticks WHERE outcome = 'enqueued'", schema);
	T_ASSERT_INT_EQ(fired, ticks);
	T_ASSERT_INT_EQ(sql_int(c, "SELECT count(*) FROM (SELECT id FROM \"%s\".jobs UNION ALL"
	                        " SELECT id FROM \"%s\".job_history) j", schema, schema), ticks);
	T_ASSERT_INT_EQ(sql_int(c, "SELECT count(DISTINCT tick_at) FROM \"%s\".cron_ticks", schema), ticks);
	/* Stopped workers fire nothing more. */
	sleep_ms(1500);
	T_ASSERT_INT_EQ(sql_int(c, "SELECT count(*) FROM \"%s\".cron_ticks", schema), ticks);
	/* A worker asked to schedule where the cron tables are missing says so at once. */
	o.schema = "pgc_cron_none_here";
	pgc_worker *x = NULL;
	sql(c, "DROP SCHEMA IF EXISTS pgc_cron_none_here CASCADE");
	T_ASSERT(pgc_worker_new(&o, tick_handler, NULL, &x, &err) != PGC_OK);
	T_ASSERT(x == NULL);
	pgc_conn_close(c);
}

/* Runs the validator on (expr, tz): true when it accepts; otherwise *msg gets its message and
 * the SQLSTATE must be 22023. */
static bool sql_accepts(pgc_conn *c, const char *expr, const char *tz, char *msg, size_t size)
{
	char q[160];
	snprintf(q, sizeof q, "SELECT \"%s\".cron_validate($1, $2)", schema);
	const char *v[2] = { expr, tz };
	PGresult *r = PQexecParams(pgc_conn_pg(c), q, 2, NULL, v, NULL, NULL, 0);
	bool ok = PQresultStatus(r) == PGRES_TUPLES_OK;
	const char *state = PQresultErrorField(r, PG_DIAG_SQLSTATE);
	if (!ok && (state == NULL || strcmp(state, "22023") != 0))
		T_FAIL("cron_validate(\"%s\", %s): %s", expr, tz ? tz : "NULL", PQresultErrorMessage(r));
	snprintf(msg, size, "%s", ok ? "" : PQresultErrorField(r, PG_DIAG_MESSAGE_PRIMARY));
	PQclear(r);
	return ok;
}

/* The C parser is the authority on the grammar; the SQL validator that cron_add() runs for
 * every other client must agree with it on every case, and name the same field. */
static void cron_sched__sql_validator_agrees_with_parser(void)
{
	pgc_conn *c = setup();
	static const char *const exprs[] = {
		"* * * * *", "*/15 * * * *", "0 9-17 * * MON-FRI", "30 2 * * *", "0 0 1,15 * *",
		"5/10 * * * *", "1-30/3 * * * *", "0 0 * * 7", "0 0 * * 0-7", "0 0 29 2 *",
		"0 0 31 1,3 *", "0 0 30 2 1", "*/5 * * * * *", "0 0 0 1 1 *", " \t* * * * *\t ",
		"0\t0\t*\t*\t*", "0 0 1 jan *", "0 0 * * sun", "0 0 * Jan-Mar Mon,Wed,Fri",
		"007 * * * *", "0 0 * * 1/2", "59 23 31 12 *", "0-59/59 * * * *",
		"@yearly", "@annually", "@monthly", "@weekly", "@daily", "@midnight", "@hourly",
		"@HOURLY", "@Daily",
		/* refused */
		"", "   ", "* * * *", "* * * * * * *", "60 * * * *", "* 24 * * *", "* * 0 * *",
		"* * 32 * *", "* * * 0 *", "* * * 13 *", "* * * * 8", "*/0 * * * *", "*/60 * * * *",
		"5-1 * * * *", "1- * * * *", "-1 * * * *", "1,,2 * * * *", "1, * * * *", ",1 * * * *",
		"*,1 * * * *", "1,* * * * *", "*1 * * * *", "*/ * * * *", "1/ * * * *", "1/2/3 * * * *",
		"1-2-3 * * * *", "5/2-3 * * * *", "L * * * *", "* * L * *", "* * 15W * *", "* * * * 5#3",
		"? * * * *", "* * * * ?", "a * * * *", "* * * FOO *", "* * * JANUARY *", "* * * * MONDAY",
		"* * * * SU", "0 0 30 2 *", "0 0 31 4,6,9,11 *", "0 0 31 2-2 *", "@reboot", "@REBOOT",
		"@every 5m", "@daily *", "@", "1.5 * * * *", "+1 * * * *", "99999999999 * * * *",
		"*/99999999999 * * * *", "* * * * * *x", "\xc3\xa9 * * * *", "0 0 1 1 * 2026",
		"* *\n* * *", "* * * * *\r",
	};
	char msg[1024], q[64];
	int accepted = 0;
	for (size_t i = 0; i < sizeof exprs / sizeof exprs[0]; i++) {
		pgc_cron *cr = NULL;
		pgc_error err;
		int rc = pgc_cron_parse(exprs[i], NULL, &cr, &err);
		pgc_cron_free(cr);
		T_ASSERT(rc == PGC_OK || rc == PGC_EUSAGE);
		bool sql_ok = sql_accepts(c, exprs[i], NULL, msg, sizeof msg);
		if ((rc == PGC_OK) != sql_ok)
			T_FAIL("\"%s\": the C parser %s it (%s), cron_validate %s it (%s)", exprs[i],
			       rc == PGC_OK ? "accepts" : "refuses", rc == PGC_OK ? "" : err.message,
			       sql_ok ? "accepts" : "refuses", msg);
		accepted += sql_ok;
		/* A refusal that names a field names the same one in both. */
		static const char *const fields[] = { "second field", "minute field", "hour field",
		                                      "day-of-month field", "month field", "day-of-week field",
		                                      "can never fire", "expected 5 fields", "macro", "@reboot" };
		for (size_t k = 0; rc != PGC_OK && k < sizeof fields / sizeof fields[0]; k++)
			if (strstr(err.message, fields[k]) != NULL && strstr(msg, fields[k]) == NULL)
				T_FAIL("\"%s\": the C parser says \"%s\", cron_validate \"%s\"", exprs[i], err.message, msg);
	}
	T_ASSERT(accepted >= 30);
	/* Zones: the C library reads the host's tzdata, the server its own; on one host both
	 * know the same zones, and both refuse names that are not zone names. */
	static const char *const zones[] = {
		"UTC", "", "Europe/Berlin", "America/New_York", "Australia/Lord_Howe", "Asia/Kolkata",
		"Etc/GMT+5", "Europe/Berln", "/etc/passwd", "../etc/passwd", "Europe//Berlin", "Europe/./Berlin",
		"Europe/Berlin ", "Europe", "right/Europe/Berlin", "Mars/Olympus_Mons",
	};
	for (size_t i = 0; i < sizeof zones / sizeof zones[0]; i++) {
		pgc_cron *cr = NULL;
		pgc_error err;
		int rc = pgc_cron_parse("* * * * *", zones[i], &cr, &err);
		pgc_cron_free(cr);
		bool sql_ok = sql_accepts(c, "* * * * *", zones[i], msg, sizeof msg);
		if ((rc == PGC_OK) != sql_ok)
			T_FAIL("zone \"%s\": the C parser %s it (%s), cron_validate %s it (%s)", zones[i],
			       rc == PGC_OK ? "accepts" : "refuses", rc == PGC_OK ? "" : err.message,
			       sql_ok ? "accepts" : "refuses", msg);
	}
	/* cron_add() refuses through it, naming the field, with 22023. */
	snprintf(q, sizeof q, "SELECT \"%s\".cron_add('x', '61 * * * *', 'q')", schema);
	PGresult *r = PQexec(pgc_conn_pg(c), q);
	T_ASSERT_STR_EQ(PQresultErrorField(r, PG_DIAG_SQLSTATE), "22023");
	T_ASSERT_CONTAINS(PQresultErrorField(r, PG_DIAG_MESSAGE_PRIMARY), "minute field");
	PQclear(r);
	pgc_conn_close(c);
}

/* A schedule added by SQL, as a client in another language adds it: its first tick is left to
 * the scheduler, which computes it at its next pass; pause, resume, trigger, list and remove
 * are functions too, with the documented SQLSTATEs. */
static void cron_sched__sql_added_schedule(void)
{
	pgc_conn *c = setup();
	pgc_error err;
	sql(c, "SELECT \"%s\".cron_add('every-second', '* * * * * *', 'q', 'Europe/Berlin',"
	       " '{\"k\": 1}', p_overlap => 'allow')", schema);
	T_ASSERT_INT_EQ(sql_int(c, "SELECT count(*) FROM \"%s\".cron_schedules WHERE next_tick = '-infinity'", schema), 1);
	T_ASSERT_INT_EQ(sql_int(c, "SELECT count(*) FROM \"%s\".cron_list('every-second') WHERE next_tick IS NULL", schema), 1);
	pgc_cron_info *xs = NULL;
	size_t n = 0;
	T_ASSERT_INT_EQ(pgc_cron_list(c, schema, "every-second", &xs, &n, &err), PGC_OK);
	T_ASSERT_INT_EQ(n, 1);
	T_ASSERT_INT_EQ(xs[0].next_tick_us, xs[0].updated_us); /* due to be computed since the add */
	T_ASSERT_STR_EQ(xs[0].tz, "Europe/Berlin");
	pgc_cron_infos_free(xs, n);

	/* The scheduler's pass computes the tick and fires what is due. */
	long enqueued = 0;
	for (int i = 0; i < 100 && enqueued == 0; i++) {
		pgc_cron_fire_result fr;
		T_ASSERT_INT_EQ(pgc_cron_fire_due(c, schema, "test", 10, 0, &fr, &err), PGC_OK);
		T_ASSERT_INT_EQ(fr.failed, 0);
		enqueued += fr.enqueued;
		if (enqueued == 0)
			sleep_ms(100);
	}
	T_ASSERT(enqueued > 0);
	T_ASSERT_INT_EQ(sql_int(c, "SELECT count(*) FROM \"%s\".cron_schedules WHERE isfinite(next_tick)"
	                           " AND next_tick > updated_at AND last_scheduler = 'test'", schema), 1);
	T_ASSERT_INT_EQ(sql_int(c, "SELECT count(*) FROM \"%s\".jobs WHERE queue = 'q'"
	                           " AND payload->>'k' = '1' AND payload->'cron'->>'schedule' = 'every-second'", schema),
	                enqueued);

	/* A rarely firing one: computed, nothing due, no last tick invented. */
	sql(c, "SELECT \"%s\".cron_add('yearly', '@yearly', 'q')", schema);
	pgc_cron_fire_result fr;
	T_ASSERT_INT_EQ(pgc_cron_fire_due(c, schema, "test", 10, 0, &fr, &err), PGC_OK);
	T_ASSERT_INT_EQ(sql_int(c, "SELECT count(*) FROM \"%s\".cron_schedules WHERE name = 'yearly'"
	                           " AND next_tick = date_trunc('year', now()) + interval '1 year'"
	                           " AND last_tick IS NULL AND fired = 0", schema), 1);

	/* Pause and resume by SQL: the resumed tick is computed again by the scheduler. */
	sql(c, "SELECT \"%s\".cron_pause('yearly', true)", schema);
	T_ASSERT_INT_EQ(sql_int(c, "SELECT count(*) FROM \"%s\".cron_list() WHERE paused", schema), 1);
	sql(c, "SELECT \"%s\".cron_pause('yearly', false)", schema);
	T_ASSERT_INT_EQ(sql_int(c, "SELECT count(*) FROM \"%s\".cron_schedules WHERE name = 'yearly'"
	                           " AND NOT paused AND next_tick = '-infinity'", schema), 1);
	T_ASSERT_INT_EQ(pgc_cron_fire_due(c, schema, "test", 10, 0, &fr, &err), PGC_OK);
	T_ASSERT_INT_EQ(sql_int(c, "SELECT count(*) FROM \"%s\".cron_schedules WHERE name = 'yearly'"
	                           " AND next_tick = date_trunc('year', now()) + interval '1 year'", schema), 1);
	/* Resuming a running schedule keeps its tick. */
	sql(c, "SELECT \"%s\".cron_pause('yearly', false)", schema);
	T_ASSERT_INT_EQ(sql_int(c, "SELECT count(*) FROM \"%s\".cron_schedules WHERE isfinite(next_tick)", schema), 2);

	/* Replace: the same definition changes nothing, another one is written. */
	T_ASSERT_INT_EQ(sql_int(c, "SELECT \"%s\".cron_add('yearly', '@yearly', 'q', p_replace => true)::int", schema), 0);
	T_ASSERT_INT_EQ(sql_int(c, "SELECT \"%s\".cron_add('yearly', '@monthly', 'q', p_replace => true)::int", schema), 1);
	T_ASSERT_INT_EQ(sql_int(c, "SELECT count(*) FROM \"%s\".cron_schedules WHERE name = 'yearly'"
	                           " AND expr = '@monthly' AND next_tick = '-infinity'", schema), 1);

	/* Trigger: a job now, recorded; overlap skip refuses a second one while the first lives. */
	sql(c, "SELECT \"%s\".cron_add('skip', '@yearly', 'q2', p_overlap => 'skip')", schema);
	long long id = sql_int(c, "SELECT \"%s\".cron_trigger('skip')", schema);
	T_ASSERT(id > 0);
	T_ASSERT_INT_EQ(sql_int(c, "SELECT count(*) FROM \"%s\".jobs WHERE id = %lld"
	                           " AND payload->'cron'->>'tick' ~ '^\\d{4}-\\d\\d-\\d\\dT\\d\\d:\\d\\d:\\d\\d\\+00:00$'",
	                        schema, id), 1);
	T_ASSERT_INT_EQ(pgc_cron_trigger(c, schema, "skip", NULL, &err), PGC_EDUPLICATE);
	T_ASSERT_CONTAINS(err.message, "still pending or running");
	T_ASSERT_INT_EQ(sql_int(c, "SELECT fired FROM \"%s\".cron_list('skip')", schema), 1);

	/* The documented SQLSTATEs. */
	static const struct { const char *call, *state; } bad[] = {
		{ "cron_add('skip', '@yearly', 'q2')", "23505" },
		{ "cron_add('a b', '@yearly', 'q')", "22023" },
		{ "cron_add('a', '@yearly', NULL)", "22023" },
		{ "cron_add('a', '@yearly', 'q', 'Europe/Berln')", "22023" },
		{ "cron_add('a', '@yearly', 'q', p_payload => '[1]')", "22023" },
		{ "cron_add('a', '@yearly', 'q', p_catch_up => 'some')", "22023" },
		{ "cron_add('a', '@yearly', 'q', p_catch_up_max => 0)", "22023" },
		{ "cron_add('a', '@yearly', 'q', p_jitter_ms => -1)", "22023" },
		{ "cron_add('a', '@yearly', 'q', p_command => '{}')", "22023" },
		{ "cron_add('a', '@yearly', 'cron:commands')", "22023" },
		{ "cron_add('a', NULL, 'q')", "22004" },
		{ "cron_remove('none')", "P0002" },
		{ "cron_pause('none', true)", "P0002" },
		{ "cron_trigger('none')", "P0002" },
		{ "cron_list('none')", "P0002" },
	};
	for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
		char q[256];
		snprintf(q, sizeof q, "SELECT * FROM \"%s\".%s", schema, bad[i].call);
		PGresult *r = PQexec(pgc_conn_pg(c), q);
		const char *st = PQresultErrorField(r, PG_DIAG_SQLSTATE);
		if (st == NULL || strcmp(st, bad[i].state) != 0)
			T_FAIL("%s: expected SQLSTATE %s, got %s (%s)", bad[i].call, bad[i].state, st ? st : "none",
			       PQresultErrorMessage(r));
		PQclear(r);
	}
	/* A command schedule goes to its queue. */
	sql(c, "SELECT \"%s\".cron_add('cmd', '@daily', p_command => '{echo,hi}')", schema);
	char **argv = NULL;
	T_ASSERT_INT_EQ(pgc_cron_command(c, schema, "cmd", &argv, &err), PGC_OK);
	T_ASSERT_STR_EQ(argv[1], "hi");
	free(argv);

	sql(c, "SELECT \"%s\".cron_remove('every-second')", schema);
	T_ASSERT_INT_EQ(sql_int(c, "SELECT count(*) FROM \"%s\".cron_list()", schema), 3);
	pgc_conn_close(c);
}

int main(int argc, char **argv)
{
	static const t_case cases[] = {
		{ "cron_sched__bad_arguments", cron_sched__bad_arguments },
		{ "cron_sched__payload_tick", cron_sched__payload_tick },
		{ "cron_sched__locked_schedule_fires_once", cron_sched__locked_schedule_fires_once },
		{ "cron_sched__command_schedule", cron_sched__command_schedule },
		{ "cron_sched__worker_schedules", cron_sched__worker_schedules },
		{ "cron_sched__lookahead", cron_sched__lookahead },
		{ "cron_sched__sql_validator_agrees_with_parser", cron_sched__sql_validator_agrees_with_parser },
		{ "cron_sched__sql_added_schedule", cron_sched__sql_added_schedule },
		{ NULL, NULL },
	};
	return t_main(argc, argv, cases);
}

/* cron_sched.c - cron schedules in the database, and the scheduler's step that fires them
 *
 * The clock that decides is the server's: a tick is due when next_tick <= now(), and every
 * "now" this file uses comes from the server in the same transaction. The host's clock is
 * never read here. The next tick is computed on the client (pgc_cron_next, the host's
 * tzdata) by the scheduler that fired the previous one, and stored: hosts never have to agree
 * on a computation, only on the row.
 *
 * Exactly once: pgc_cron_fire_due() locks due rows FOR UPDATE SKIP LOCKED (in READ
 * COMMITTED, a row another scheduler moved meanwhile is re-checked against next_tick <= now()
 * and left out), inserts the tick into cron_ticks (primary key (schedule, tick_at), ON
 * CONFLICT DO NOTHING: a second guard), enqueues the job on the same session and moves the
 * row, in one transaction. A failure anywhere rolls all of it back.
 *
 * Nothing here writes to the cron tables: adding, changing, pausing, triggering and removing
 * are the SQL functions cron_add(), cron_pause(), cron_trigger() and cron_remove() that any
 * client calls, and the scheduler's batch is cron_fire(). A client without this file's tzdata
 * leaves a schedule's next tick to the scheduler (next_tick '-infinity'): the scheduler's step
 * computes the first tick after the row's updated_at and stores it with the batch. */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "conn/conn_int.h"

#define DEFAULT_WINDOW_MS INT64_C(3600000)
#define DEFAULT_CATCHUP_MAX 100
#define GRACE_MIN_S 5
#define GRACE_MAX_S 60
/* Due ticks remembered per schedule while counting a gap: only the newest can fire (at most
 * PGC_CRON_CATCHUP_MAX_LIMIT under "all", at most GRACE_MAX_S + 1 on time). */
#define RING 1024
/* A gap longer than this many ticks is counted up to here and then skipped in one step. */
#define COUNT_MAX 10000000L

/* Database timestamps travel as microseconds since the Unix epoch, 0 for NULL. */
#define US(x) "coalesce((extract(epoch FROM " x ") * 1000000)::int8, 0)"
#define MS(x) "(extract(epoch FROM " x ") * 1000)::int8"

static const char *const catch_up_names[] = { "skip", "once", "all" };
static const char *const overlap_names[] = { "allow", "skip" };

const char *pgc_cron_catch_up_name(pgc_cron_catch_up c)
{
	return (unsigned)c < 3 ? catch_up_names[c] : NULL;
}

const char *pgc_cron_overlap_name(pgc_cron_overlap o)
{
	return (unsigned)o < 2 ? overlap_names[o] : NULL;
}

bool pgc_cron_catch_up_parse(const char *name, pgc_cron_catch_up *out)
{
	for (int i = 0; name != NULL && out != NULL && i < 3; i++)
		if (strcmp(name, catch_up_names[i]) == 0) {
			*out = (pgc_cron_catch_up)i;
			return true;
		}
	return false;
}

bool pgc_cron_overlap_parse(const char *name, pgc_cron_overlap *out)
{
	for (int i = 0; name != NULL && out != NULL && i < 2; i++)
		if (strcmp(name, overlap_names[i]) == 0) {
			*out = (pgc_cron_overlap)i;
			return true;
		}
	return false;
}

/* ---- common ---------------------------------------------------------------------------------- */

typedef struct ctx {
	pgc_conn *conn;
	char *quoted; /* PQescapeIdentifier(schema), PQfreemem */
	const char *schema;
} ctx;

static int ctx_begin(ctx *c, pgc_conn *conn, const char *schema, const char *fn, pgc_error *err)
{
	memset(c, 0, sizeof *c);
	if (conn == NULL)
		return pgc__err(err, PGC_EUSAGE, "%s: conn must not be NULL", fn);
	int rc = pgc__check_schema(schema, err);
	if (rc != PGC_OK)
		return rc;
	c->conn = conn;
	c->schema = schema != NULL ? schema : PGC_SCHEMA_DEFAULT;
	c->quoted = pgc__quote_ident(conn, c->schema, err);
	return c->quoted != NULL ? PGC_OK : err != NULL && err->code != PGC_OK ? err->code : PGC_ENOMEM;
}

static void ctx_end(ctx *c)
{
	PQfreemem(c->quoted);
	c->quoted = NULL;
}

/* Runs tmpl with @S@ expanded; a missing table is PGC_ENOSCHEMA with the command to run. */
static PGresult *run(ctx *c, const char *tmpl, int n, const char *const *v, int *rc, pgc_error *err)
{
	char *sql = pgc__sql_schema(tmpl, c->quoted);
	if (sql == NULL) {
		*rc = pgc__err(err, PGC_ENOMEM, "out of memory");
		return NULL;
	}
	PGresult *res = pgc__exec(c->conn, sql, n, v, rc, err);
	free(sql);
	if (*rc == PGC_ESQL && err != NULL &&
	    (strcmp(err->sqlstate, "42P01") == 0 || strcmp(err->sqlstate, "3F000") == 0 ||
	     strcmp(err->sqlstate, "42883") == 0)) {
		char init[160];
		*rc = pgc__err(err, PGC_ENOSCHEMA, "the cron tables are not installed in schema %s: run %s",
		               c->schema, pgc__init_cmd(c->schema, init, sizeof init));
	} else if (*rc == PGC_ESQL && err != NULL && strcmp(err->sqlstate, "42703") == 0) {
		/* A column of a later migration (009's command, max_attempts): the schema is older. */
		char init[160];
		*rc = pgc__err(err, PGC_ENOSCHEMA, "the cron tables of schema %s are older than this pgcoord: run %s",
		               c->schema, pgc__init_cmd(c->schema, init, sizeof init));
	} else if (*rc == PGC_ESQL && err != NULL &&
	           (strcmp(err->sqlstate, "P0002") == 0 || strcmp(err->sqlstate, "23505") == 0)) {
		/* The functions say "no such schedule" and "exists" (or "its job is still live") with
		 * these: the codes the API documents, with the function's message as it was. */
		char msg[sizeof err->message];
		snprintf(msg, sizeof msg, "%s", err->message);
		*rc = pgc__err(err, err->sqlstate[0] == 'P' ? PGC_ENOTFOUND : PGC_EDUPLICATE, "%s", msg);
	}
	return res;
}

static int check_name(const char *name, pgc_error *err)
{
	int rc = pgc_name_check("schedule name", name, PGC_CRON_NAME_MAX, err);
	if (rc != PGC_OK)
		return rc;
	for (const unsigned char *p = (const unsigned char *)name; *p; p++)
		if (*p <= ' ' || *p == 0x7f)
			return pgc__err(err, PGC_EUSAGE, "schedule name \"%.100s\" must not contain white space or "
			                "control characters", name);
	return PGC_OK;
}

static int check_command(const char *const *argv, size_t n, pgc_error *err)
{
	if (argv == NULL || n == 0)
		return pgc__err(err, PGC_EUSAGE, "a command schedule needs a command (command and n_command)");
	if (n > PGC_CRON_COMMAND_MAX)
		return pgc__err(err, PGC_EUSAGE, "a command has at most %d words, not %zu", PGC_CRON_COMMAND_MAX, n);
	for (size_t i = 0; i < n; i++)
		if (argv[i] == NULL)
			return pgc__err(err, PGC_EUSAGE, "command word %zu is NULL", i);
	if (argv[0][0] == '\0')
		return pgc__err(err, PGC_EUSAGE, "the command's name must not be empty");
	return PGC_OK;
}

static bool in_transaction(pgc_conn *conn)
{
	PGconn *pg = pgc_conn_pg(conn);
	return pg != NULL && PQtransactionStatus(pg) == PQTRANS_INTRANS;
}

static int64_t get_i64(const PGresult *r, int row, int col)
{
	return PQgetisnull(r, row, col) ? 0 : strtoll(PQgetvalue(r, row, col), NULL, 10);
}

/* The server's now() in whole seconds (the floor). */
static int db_now_s(ctx *c, int64_t *out, pgc_error *err)
{
	int rc;
	PGresult *r = run(c, "SELECT floor(extract(epoch FROM now()))::int8", 0, NULL, &rc, err);
	if (rc == PGC_OK)
		*out = get_i64(r, 0, 0);
	PQclear(r);
	return rc;
}

/* ---- add, remove, pause ------------------------------------------------------------------- */

int pgc_cron_add(pgc_conn *conn, const char *schema, const char *name, const pgc_cron_schedule *def,
                 unsigned int flags, bool *changed, pgc_error *err)
{
	pgc_error_clear(err);
	if (changed != NULL)
		*changed = false;
	if (name == NULL || def == NULL || def->expr == NULL)
		return pgc__err(err, PGC_EUSAGE, "pgc_cron_add: name, def and def->expr must not be NULL");
	int rc = check_name(name, err);
	if (rc != PGC_OK)
		return rc;
	const char *queue = def->queue;
	if (def->command != NULL || def->n_command > 0) {
		if ((rc = check_command(def->command, def->n_command, err)) != PGC_OK)
			return rc;
		if (queue != NULL && strcmp(queue, PGC_CRON_COMMAND_QUEUE) != 0)
			return pgc__err(err, PGC_EUSAGE, "a command schedule's jobs go to the queue %s, not %.128s",
			                PGC_CRON_COMMAND_QUEUE, queue);
		queue = PGC_CRON_COMMAND_QUEUE;
	} else if (queue != NULL && strcmp(queue, PGC_CRON_COMMAND_QUEUE) == 0) {
		return pgc__err(err, PGC_EUSAGE, "the queue %s is for command schedules only", PGC_CRON_COMMAND_QUEUE);
	}
	if (queue == NULL || *queue == '\0')
		return pgc__err(err, PGC_EUSAGE, "a schedule needs a queue for its jobs");
	if ((rc = pgc_name_check("queue name", queue, PGC_QUEUE_NAME_MAX, err)) != PGC_OK)
		return rc;
	if (def->max_attempts < 0 || def->max_attempts > 1000000)
		return pgc__err(err, PGC_EUSAGE, "max attempts must be 1 to 1000000, not %d", def->max_attempts);
	if (pgc_cron_catch_up_name(def->catch_up) == NULL || pgc_cron_overlap_name(def->overlap) == NULL)
		return pgc__err(err, PGC_EUSAGE, "pgc_cron_add: unknown catch-up or overlap policy");
	if (def->catch_up_window_ms < 0)
		return pgc__err(err, PGC_EUSAGE, "catch-up window must not be negative");
	if (def->catch_up_max < 0 || def->catch_up_max > PGC_CRON_CATCHUP_MAX_LIMIT)
		return pgc__err(err, PGC_EUSAGE, "catch-up maximum must be 1 to %d, not %d",
		                PGC_CRON_CATCHUP_MAX_LIMIT, def->catch_up_max);
	if (def->jitter_ms < 0)
		return pgc__err(err, PGC_EUSAGE, "jitter must not be negative");
	if ((flags & ~PGC_CRON_REPLACE) != 0)
		return pgc__err(err, PGC_EUSAGE, "pgc_cron_add: unknown flags 0x%x", flags);
	pgc_cron *cr;
	if ((rc = pgc_cron_parse(def->expr, def->tz, &cr, err)) != PGC_OK)
		return rc;
	ctx c;
	if ((rc = ctx_begin(&c, conn, schema, "pgc_cron_add", err)) != PGC_OK) {
		pgc_cron_free(cr);
		return rc;
	}
	int64_t now = 0, next = 0;
	if ((rc = db_now_s(&c, &now, err)) == PGC_OK && (rc = pgc_cron_next(cr, now, &next, err)) != PGC_OK &&
	    rc == PGC_ENOTFOUND)
		pgc__err_prefix(err, "schedule %s", name);
	pgc__sb cmd = PGC__SB_INIT;
	if (rc == PGC_OK && def->command != NULL) {
		pgc__sb_text_array(&cmd, def->n_command, def->command);
		if (cmd.oom)
			rc = pgc__err(err, PGC_ENOMEM, "out of memory");
	}
	if (rc == PGC_OK) {
		char nt[24], win[24], mx[16], jit[24], att[16];
		snprintf(att, sizeof att, "%d", def->max_attempts);
		snprintf(nt, sizeof nt, "%" PRId64, next);
		snprintf(win, sizeof win, "%" PRId64, def->catch_up_window_ms ? def->catch_up_window_ms : DEFAULT_WINDOW_MS);
		snprintf(mx, sizeof mx, "%d", def->catch_up_max ? def->catch_up_max : DEFAULT_CATCHUP_MAX);
		snprintf(jit, sizeof jit, "%" PRId64, def->jitter_ms);
		const char *v[14] = { name, def->expr, queue, pgc_cron_tz(cr), def->payload,
		                      pgc_cron_catch_up_name(def->catch_up), win, mx,
		                      pgc_cron_overlap_name(def->overlap), jit, def->command != NULL ? cmd.buf : NULL,
		                      att, (flags & PGC_CRON_REPLACE) ? "t" : "f", nt };
		/* cron_add() checks it all again, for every client; the first tick is the one
		 * computed here, with this host's tzdata. An unchanged definition keeps its tick. */
		PGresult *r = run(&c, "SELECT @S@.cron_add($1, $2, $3, $4, $5::jsonb, $6, $7::int8, $8::int, $9,"
		                  " $10::int8, $11::text[], $12::int, $13::boolean, to_timestamp($14::int8))",
		                  14, v, &rc, err);
		if (rc == PGC_OK && changed != NULL)
			*changed = strcmp(PQgetvalue(r, 0, 0), "t") == 0;
		PQclear(r);
	}
	pgc__sb_free(&cmd);
	ctx_end(&c);
	pgc_cron_free(cr);
	return rc;
}

int pgc_cron_remove(pgc_conn *conn, const char *schema, const char *name, pgc_error *err)
{
	pgc_error_clear(err);
	int rc = name == NULL ? pgc__err(err, PGC_EUSAGE, "pgc_cron_remove: name must not be NULL") : check_name(name, err);
	if (rc != PGC_OK)
		return rc;
	ctx c;
	if ((rc = ctx_begin(&c, conn, schema, "pgc_cron_remove", err)) != PGC_OK)
		return rc;
	/* Its ticks that fired ahead go with it (cron_unfire): their jobs never became due. */
	const char *v[1] = { name };
	PQclear(run(&c, "SELECT @S@.cron_remove($1)", 1, v, &rc, err));
	ctx_end(&c);
	return rc;
}

int pgc_cron_pause(pgc_conn *conn, const char *schema, const char *name, bool paused, pgc_error *err)
{
	pgc_error_clear(err);
	int rc = name == NULL ? pgc__err(err, PGC_EUSAGE, "pgc_cron_pause: name must not be NULL") : check_name(name, err);
	if (rc != PGC_OK)
		return rc;
	ctx c;
	if ((rc = ctx_begin(&c, conn, schema, "pgc_cron_pause", err)) != PGC_OK)
		return rc;
	const char *v[2] = { name, NULL };
	char nt[24];
	if (!paused) {
		/* Resume: the next tick counts from the server's now(), computed here with the row's
		 * expression. cron_pause() keeps the tick of a schedule that is not paused. */
		PGresult *r = run(&c, "SELECT expr, tz, floor(extract(epoch FROM now()))::int8 FROM @S@.cron_schedules"
		                  " WHERE name = $1 AND paused", 1, v, &rc, err);
		if (rc == PGC_OK && PQntuples(r) == 1) {
			pgc_cron *cr;
			int64_t next = 0;
			if ((rc = pgc_cron_parse(PQgetvalue(r, 0, 0), PQgetvalue(r, 0, 1), &cr, err)) == PGC_OK) {
				rc = pgc_cron_next(cr, get_i64(r, 0, 2), &next, err);
				pgc_cron_free(cr);
			}
			snprintf(nt, sizeof nt, "%" PRId64, next);
			v[1] = nt;
		}
		PQclear(r);
	}
	/* Paused runs nothing more: cron_pause() takes back a tick that fired ahead. */
	if (rc == PGC_OK)
		PQclear(run(&c, "SELECT @S@.cron_pause($1, $2::boolean, to_timestamp($3::int8))", 3,
		            (const char *const[]){ name, paused ? "t" : "f", v[1] }, &rc, err));
	ctx_end(&c);
	return rc;
}

/* ---- jobs -------------------------------------------------------------------------------------- */

/* The job's payload: the schedule's object with "cron": {"schedule": name, "tick": tick}. */
static char *job_payload(const char *payload, const char *name, const char *tick)
{
	pgc__sb b = PGC__SB_INIT;
	const char *end = strrchr(payload, '}');
	if (end == NULL)
		end = payload + strlen(payload);
	const char *p = payload;
	while (*p == ' ' || *p == '{')
		p++;
	bool empty = p >= end;
	pgc__sb_put(&b, payload, (size_t)(end - payload));
	pgc__sb_puts(&b, empty ? "\"cron\": {\"schedule\": \"" : ", \"cron\": {\"schedule\": \"");
	for (const char *s = name; *s; s++) {
		if (*s == '"' || *s == '\\')
			pgc__sb_putc(&b, '\\');
		pgc__sb_putc(&b, *s);
	}
	pgc__sb_puts(&b, "\", \"tick\": \"");
	pgc__sb_puts(&b, tick);
	pgc__sb_puts(&b, "\"}}");
	if (b.oom) {
		pgc__sb_free(&b);
		return NULL;
	}
	return b.buf;
}

static int64_t jitter_ms(int64_t max_ms)
{
	if (max_ms <= 0)
		return 0;
	/* Not for secrets: a spread of start times, different per process (splitmix64 over the
	 * clock, the process and a counter). */
	static _Atomic uint64_t counter;
	uint64_t z = (uint64_t)pgc__now_ms() * 0x9e3779b97f4a7c15u ^ (uint64_t)getpid() << 32 ^ ++counter;
	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9u;
	z = (z ^ (z >> 27)) * 0x94d049bb133111ebu;
	z ^= z >> 31;
	return (int64_t)(z % (uint64_t)(max_ms + 1));
}

int pgc_cron_trigger(pgc_conn *conn, const char *schema, const char *name, int64_t *job_id, pgc_error *err)
{
	pgc_error_clear(err);
	if (job_id != NULL)
		*job_id = 0;
	int rc = name == NULL ? pgc__err(err, PGC_EUSAGE, "pgc_cron_trigger: name must not be NULL") : check_name(name, err);
	if (rc != PGC_OK)
		return rc;
	ctx c;
	if ((rc = ctx_begin(&c, conn, schema, "pgc_cron_trigger", err)) != PGC_OK)
		return rc;
	const char *v[1] = { name };
	PGresult *r = run(&c, "SELECT @S@.cron_trigger($1)", 1, v, &rc, err);
	if (rc == PGC_OK && job_id != NULL)
		*job_id = get_i64(r, 0, 0);
	PQclear(r);
	ctx_end(&c);
	return rc;
}

/* ---- reading ------------------------------------------------------------------------------- */

static char *dup_or_null(const PGresult *r, int row, int col)
{
	return PQgetisnull(r, row, col) ? NULL : strdup(PQgetvalue(r, row, col));
}

void pgc_cron_infos_free(pgc_cron_info *infos, size_t n)
{
	for (size_t i = 0; infos != NULL && i < n; i++) {
		free(infos[i].name);
		free(infos[i].expr);
		free(infos[i].tz);
		free(infos[i].queue);
		free(infos[i].payload);
		free(infos[i].last_outcome);
		free(infos[i].last_scheduler);
		free(infos[i].command);
	}
	free(infos);
}

int pgc_cron_list(pgc_conn *conn, const char *schema, const char *name, pgc_cron_info **out, size_t *n,
                  pgc_error *err)
{
	pgc_error_clear(err);
	if (out == NULL || n == NULL)
		return pgc__err(err, PGC_EUSAGE, "pgc_cron_list: out and n must not be NULL");
	*out = NULL;
	*n = 0;
	int rc = name != NULL ? check_name(name, err) : PGC_OK;
	if (rc != PGC_OK)
		return rc;
	ctx c;
	if ((rc = ctx_begin(&c, conn, schema, "pgc_cron_list", err)) != PGC_OK)
		return rc;
	const char *v[1] = { name };
	PGresult *r = run(&c,
		"SELECT name, expr, tz, queue, payload::text, catch_up, catch_up_max, catch_up_window_ms, overlap,"
		" jitter_ms, paused, " US("next_tick") ", " US("last_tick") ", " US("last_fired_at") ","
		" " US("created_at") ", " US("updated_at") ", " US("seen_at") ", last_outcome, last_scheduler,"
		" fired, missed, skipped, " US("last_success_at") ", " US("db_now") ","
		" array_to_json(command)::text, max_attempts, next_tick IS NULL"
		" FROM @S@.cron_list($1)",
		1, v, &rc, err);
	size_t rows = rc == PGC_OK ? (size_t)PQntuples(r) : 0;
	pgc_cron_info *a = rc == PGC_OK ? calloc(rows + 1, sizeof *a) : NULL;
	if (rc == PGC_OK && a == NULL)
		rc = pgc__err(err, PGC_ENOMEM, "out of memory");
	for (size_t i = 0; rc == PGC_OK && i < rows; i++) {
		int row = (int)i;
		pgc_cron_info *x = &a[i];
		x->name = dup_or_null(r, row, 0);
		x->expr = dup_or_null(r, row, 1);
		x->tz = dup_or_null(r, row, 2);
		x->queue = dup_or_null(r, row, 3);
		x->payload = dup_or_null(r, row, 4);
		(void)pgc_cron_catch_up_parse(PQgetvalue(r, row, 5), &x->catch_up);
		x->catch_up_max = (int)get_i64(r, row, 6);
		x->catch_up_window_ms = get_i64(r, row, 7);
		(void)pgc_cron_overlap_parse(PQgetvalue(r, row, 8), &x->overlap);
		x->jitter_ms = get_i64(r, row, 9);
		x->paused = strcmp(PQgetvalue(r, row, 10), "t") == 0;
		x->next_tick_us = get_i64(r, row, 11);
		x->last_tick_us = get_i64(r, row, 12);
		x->last_fired_us = get_i64(r, row, 13);
		x->created_us = get_i64(r, row, 14);
		x->updated_us = get_i64(r, row, 15);
		x->seen_us = get_i64(r, row, 16);
		x->last_outcome = dup_or_null(r, row, 17);
		x->last_scheduler = dup_or_null(r, row, 18);
		x->fired = get_i64(r, row, 19);
		x->missed = get_i64(r, row, 20);
		x->skipped = get_i64(r, row, 21);
		x->last_success_us = get_i64(r, row, 22);
		x->db_now_us = get_i64(r, row, 23);
		x->command = dup_or_null(r, row, 24);
		x->max_attempts = (int)get_i64(r, row, 25);
		/* Added through SQL and not computed by a scheduler yet: due to be, since the add. */
		if (strcmp(PQgetvalue(r, row, 26), "t") == 0)
			x->next_tick_us = x->updated_us;
		if ((x->command == NULL && !PQgetisnull(r, row, 24)) || x->name == NULL || x->expr == NULL || x->tz == NULL || x->queue == NULL || x->payload == NULL)
			rc = pgc__err(err, PGC_ENOMEM, "out of memory");
	}
	PQclear(r);
	ctx_end(&c);
	if (rc != PGC_OK) {
		pgc_cron_infos_free(a, rows);
		return rc;
	}
	*out = a;
	*n = rows;
	return PGC_OK;
}

int pgc_cron_history(pgc_conn *conn, const char *schema, const char *name, int limit, pgc_cron_tick **out,
                     size_t *n, pgc_error *err)
{
	pgc_error_clear(err);
	if (out == NULL || n == NULL || name == NULL)
		return pgc__err(err, PGC_EUSAGE, "pgc_cron_history: name, out and n must not be NULL");
	*out = NULL;
	*n = 0;
	if (limit < 1 || limit > PGC_CRON_TICKS_KEPT)
		return pgc__err(err, PGC_EUSAGE, "limit must be 1 to %d, not %d", PGC_CRON_TICKS_KEPT, limit);
	int rc = check_name(name, err);
	if (rc != PGC_OK)
		return rc;
	ctx c;
	if ((rc = ctx_begin(&c, conn, schema, "pgc_cron_history", err)) != PGC_OK)
		return rc;
	char lim[16];
	snprintf(lim, sizeof lim, "%d", limit);
	const char *v[2] = { name, lim };
	PGresult *r = run(&c, "SELECT " US("t.tick_at") ", " US("t.fired_at") ", t.outcome, t.ticks, t.job_id"
	                  " FROM @S@.cron_schedules s LEFT JOIN @S@.cron_ticks t ON t.schedule = s.name"
	                  " WHERE s.name = $1 ORDER BY t.tick_at DESC LIMIT $2::int", 2, v, &rc, err);
	if (rc == PGC_OK && PQntuples(r) == 0)
		rc = pgc__err(err, PGC_ENOTFOUND, "no schedule %.100s", name);
	size_t rows = 0;
	pgc_cron_tick *a = NULL;
	if (rc == PGC_OK) {
		a = calloc((size_t)PQntuples(r) + 1, sizeof *a);
		if (a == NULL)
			rc = pgc__err(err, PGC_ENOMEM, "out of memory");
	}
	for (int i = 0; rc == PGC_OK && i < PQntuples(r); i++) {
		if (PQgetisnull(r, i, 2))
			continue; /* the schedule has no ticks yet */
		pgc_cron_tick *t = &a[rows++];
		t->tick_us = get_i64(r, i, 0);
		t->fired_us = get_i64(r, i, 1);
		snprintf(t->outcome, sizeof t->outcome, "%s", PQgetvalue(r, i, 2));
		t->ticks = (int)get_i64(r, i, 3);
		t->job_id = get_i64(r, i, 4);
	}
	PQclear(r);
	ctx_end(&c);
	if (rc != PGC_OK) {
		free(a);
		return rc;
	}
	*out = a;
	*n = rows;
	return PGC_OK;
}

/* The job of a tick (aliased t) as the queue knows it: live, else its history row. */
#define RUN_JOB \
	" LEFT JOIN LATERAL (SELECT x.status, x.attempts, x.max_attempts, x.exit_status," \
	"  CASE WHEN x.status = 'running' THEN round(extract(epoch FROM clock_timestamp() - x.started_at) * 1000)::int8 END AS ms," \
	"  x.last_error, x.output FROM @S@.jobs x WHERE x.id = t.job_id" \
	" UNION ALL SELECT h.status, h.attempts, h.max_attempts, h.exit_status," \
	"  round(extract(epoch FROM h.finished_at - h.started_at) * 1000)::int8, h.last_error, h.output" \
	"  FROM @S@.job_history h WHERE h.id = t.job_id LIMIT 1) j ON true"

int pgc_cron_runs(pgc_conn *conn, const char *schema, const char *name, int limit, unsigned int flags,
                  pgc_cron_run **out, size_t *n, pgc_error *err)
{
	pgc_error_clear(err);
	if (out == NULL || n == NULL)
		return pgc__err(err, PGC_EUSAGE, "pgc_cron_runs: out and n must not be NULL");
	*out = NULL;
	*n = 0;
	if (limit < 1 || limit > PGC_CRON_TICKS_KEPT)
		return pgc__err(err, PGC_EUSAGE, "limit must be 1 to %d, not %d", PGC_CRON_TICKS_KEPT, limit);
	if ((flags & ~PGC_CRON_RUNS_COME) != 0)
		return pgc__err(err, PGC_EUSAGE, "pgc_cron_runs: unknown flags 0x%x", flags);
	int rc = name != NULL ? check_name(name, err) : PGC_OK;
	if (rc != PGC_OK)
		return rc;
	ctx c;
	if ((rc = ctx_begin(&c, conn, schema, "pgc_cron_runs", err)) != PGC_OK)
		return rc;
	char lim[16];
	snprintf(lim, sizeof lim, "%d", limit);
	const char *v[3] = { name, lim, (flags & PGC_CRON_RUNS_COME) ? "t" : "f" };
	PGresult *r = run(&c, "SELECT s.name, " US("t.tick_at") ", " US("t.fired_at") ", t.outcome, t.ticks, t.job_id,"
	                  " CASE WHEN t.job_id IS NOT NULL THEN coalesce(j.status, 'gone') END, j.attempts, j.max_attempts,"
	                  " j.exit_status, j.ms, j.last_error, j.output"
	                  " FROM @S@.cron_schedules s"
	                  " LEFT JOIN LATERAL (SELECT * FROM @S@.cron_ticks k WHERE k.schedule = s.name"
	                  "  AND (NOT $3::boolean OR k.tick_at <= now()) ORDER BY k.tick_at DESC LIMIT $2::int) t ON true"
	                  RUN_JOB
	                  " WHERE $1::text IS NULL OR s.name = $1 ORDER BY s.name, t.tick_at DESC", 3, v, &rc, err);
	if (rc == PGC_OK && name != NULL && PQntuples(r) == 0)
		rc = pgc__err(err, PGC_ENOTFOUND, "no schedule %.100s", name);
	size_t rows = 0;
	pgc_cron_run *a = NULL;
	if (rc == PGC_OK) {
		a = calloc((size_t)PQntuples(r) + 1, sizeof *a);
		if (a == NULL)
			rc = pgc__err(err, PGC_ENOMEM, "out of memory");
	}
	for (int i = 0; rc == PGC_OK && i < PQntuples(r); i++) {
		if (PQgetisnull(r, i, 3))
			continue; /* a schedule with no ticks yet */
		pgc_cron_run *x = &a[rows++];
		x->schedule = dup_or_null(r, i, 0);
		x->tick.tick_us = get_i64(r, i, 1);
		x->tick.fired_us = get_i64(r, i, 2);
		snprintf(x->tick.outcome, sizeof x->tick.outcome, "%s", PQgetvalue(r, i, 3));
		x->tick.ticks = (int)get_i64(r, i, 4);
		x->tick.job_id = get_i64(r, i, 5);
		snprintf(x->job_status, sizeof x->job_status, "%s", PQgetvalue(r, i, 6));
		x->attempts = (int)get_i64(r, i, 7);
		x->max_attempts = (int)get_i64(r, i, 8);
		x->exit_status = PQgetisnull(r, i, 9) ? -1 : (int)get_i64(r, i, 9);
		x->duration_ms = PQgetisnull(r, i, 10) ? -1 : get_i64(r, i, 10);
		x->error = dup_or_null(r, i, 11);
		x->output = dup_or_null(r, i, 12);
		if (x->schedule == NULL || (x->error == NULL && !PQgetisnull(r, i, 11)) ||
		    (x->output == NULL && !PQgetisnull(r, i, 12)))
			rc = pgc__err(err, PGC_ENOMEM, "out of memory");
	}
	PQclear(r);
	ctx_end(&c);
	if (rc != PGC_OK) {
		pgc_cron_runs_free(a, rows);
		return rc;
	}
	*out = a;
	*n = rows;
	return PGC_OK;
}

void pgc_cron_runs_free(pgc_cron_run *runs, size_t n)
{
	if (runs == NULL)
		return;
	for (size_t i = 0; i < n; i++) {
		free(runs[i].schedule);
		free(runs[i].error);
		free(runs[i].output);
	}
	free(runs);
}

int pgc_cron_command(pgc_conn *conn, const char *schema, const char *name, char ***argv_out, pgc_error *err)
{
	pgc_error_clear(err);
	if (argv_out == NULL || name == NULL)
		return pgc__err(err, PGC_EUSAGE, "pgc_cron_command: name and argv_out must not be NULL");
	*argv_out = NULL;
	int rc = check_name(name, err);
	if (rc != PGC_OK)
		return rc;
	ctx c;
	if ((rc = ctx_begin(&c, conn, schema, "pgc_cron_command", err)) != PGC_OK)
		return rc;
	const char *v[1] = { name };
	PGresult *r = run(&c, "SELECT w FROM @S@.cron_schedules s, unnest(s.command) WITH ORDINALITY AS u(w, i)"
	                  " WHERE s.name = $1 ORDER BY u.i", 1, v, &rc, err);
	int n = rc == PGC_OK ? PQntuples(r) : 0;
	if (rc == PGC_OK && n == 0)
		rc = pgc__err(err, PGC_ENOTFOUND, "no command schedule %.100s", name);
	size_t bytes = ((size_t)n + 1) * sizeof(char *);
	for (int i = 0; rc == PGC_OK && i < n; i++)
		bytes += (size_t)PQgetlength(r, i, 0) + 1;
	char **argv = rc == PGC_OK ? malloc(bytes) : NULL;
	if (rc == PGC_OK && argv == NULL)
		rc = pgc__err(err, PGC_ENOMEM, "out of memory");
	if (rc == PGC_OK) {
		char *p = (char *)(argv + n + 1);
		for (int i = 0; i < n; i++) {
			size_t len = (size_t)PQgetlength(r, i, 0);
			memcpy(p, PQgetvalue(r, i, 0), len + 1);
			argv[i] = p;
			p += len + 1;
		}
		argv[n] = NULL;
		*argv_out = argv;
	}
	PQclear(r);
	ctx_end(&c);
	return rc;
}

/* ---- the scheduler's step -------------------------------------------------------------------- */

/* One due schedule, as locked. */
typedef struct due {
	const char *name, *expr, *tz, *queue, *payload;
	pgc_cron_catch_up catch_up;
	int catch_up_max;
	int64_t window_ms, jitter_ms;
	bool overlap_skip;
	int max_attempts;   /* 0: the queue's default */
	int64_t next_tick;  /* seconds; when pending, the time to compute the first tick after */
	bool pending;       /* next_tick '-infinity': added through SQL, its first tick not computed */
	int64_t now_us;     /* the server's now() */
	int64_t total;      /* fired + missed + skipped so far, for trimming */
} due;

/* The arrays of one cron_fire() call: the ticks to fire, the gaps of missed ticks, the
 * schedules' new state. */
typedef struct plan {
	pgc__sb names, ticks, payloads, run_at;  /* per tick */
	pgc__sb m_names, m_ticks, m_counts;      /* per gap */
	pgc__sb s_names, s_next, s_last, s_trim; /* per schedule */
	size_t n_ticks, n_missed, n_sched;
} plan;

static void plan_free(plan *p)
{
	pgc__sb *all[] = { &p->names, &p->ticks, &p->payloads, &p->run_at, &p->m_names, &p->m_ticks,
	                   &p->m_counts, &p->s_names, &p->s_next, &p->s_last, &p->s_trim };
	for (size_t i = 0; i < sizeof all / sizeof all[0]; i++)
		pgc__sb_free(all[i]);
}

static void put_sep(pgc__sb *b, size_t n)
{
	pgc__sb_putc(b, n == 0 ? '{' : ',');
}

static void put_i64(pgc__sb *b, size_t n, int64_t v)
{
	char num[24];
	put_sep(b, n);
	snprintf(num, sizeof num, "%" PRId64, v);
	pgc__sb_puts(b, num);
}

static void put_text(pgc__sb *b, size_t n, const char *v)
{
	put_sep(b, n);
	pgc__sb_array_text(b, v);
}

/* Closes an array (an empty one is "{}"). */
static const char *done_array(pgc__sb *b, size_t n)
{
	if (n == 0)
		pgc__sb_putc(b, '{');
	pgc__sb_putc(b, '}');
	return b->buf;
}

/* Plans one locked schedule: which of its due ticks fire (as its policy says; an 'allow' one's
 * ticks up to lookahead_ms ahead too), which are missed, and its next tick. A schedule that
 * this host cannot compute (its zone is not in this host's tzdata, say) fails: nothing was
 * planned for it. *fires counts the ticks planned. */
static int plan_one(plan *p, const due *d, int64_t lookahead_ms, long *fires, long *missed_out, pgc_error *err)
{
	*fires = 0;
	*missed_out = 0;
	pgc_cron *cr;
	int rc = pgc_cron_parse(d->expr, d->tz, &cr, err);
	if (rc != PGC_OK)
		return rc;
	int64_t now_s = d->now_us / 1000000;
	/* A schedule added, changed or resumed through SQL: its first tick is the first fire time
	 * after that (cron_add() and cron_pause() left it to the scheduler). */
	int64_t first = d->next_tick;
	if (d->pending && (rc = pgc_cron_next(cr, d->next_tick, &first, err)) != PGC_OK) {
		pgc_cron_free(cr);
		return rc;
	}
	/* The newest tick that may fire: now's, or one up to the lookahead ahead (whole seconds). */
	int64_t limit_s = d->overlap_skip ? now_s : (d->now_us + lookahead_ms * 1000) / 1000000;
	/* The due ticks: all of them counted, the newest RING kept. */
	static __thread int64_t ring[RING];
	long n = 0;
	int64_t t = first, after = first;
	while (rc == PGC_OK && t <= limit_s) {
		ring[n % RING] = t;
		n++;
		if (n >= COUNT_MAX) {
			rc = pgc_cron_next(cr, limit_s, &after, err);
			break;
		}
		rc = pgc_cron_next(cr, t, &t, err);
		after = t;
	}
	if (rc != PGC_OK) {
		pgc_cron_free(cr);
		return rc;
	}
	/* Which fire, newest first: on time (or ahead) whatever the policy; late ones as the
	 * policy says. */
	int64_t fire[RING];
	int nf = 0;
	long kept = n < RING ? n : RING;
	int64_t window_s = d->window_ms / 1000;
	int64_t later = after;
	bool once_done = false;
	for (long i = 0; i < kept; i++) {
		int64_t x = ring[(n - 1 - i) % RING];
		int64_t period = later - x, grace = period < GRACE_MIN_S ? GRACE_MIN_S : period > GRACE_MAX_S ? GRACE_MAX_S : period;
		later = x;
		bool late = now_s - x > grace;
		if (!late) {
			fire[nf++] = x;
			continue;
		}
		if (d->catch_up == PGC_CRON_CATCHUP_ONCE && !once_done) {
			fire[nf++] = x;
			once_done = true;
		} else if (d->catch_up == PGC_CRON_CATCHUP_ALL && now_s - x <= window_s && nf < d->catch_up_max) {
			fire[nf++] = x;
		} else {
			break;
		}
	}
	long missed = n - nf;
	if (missed > 0) {
		put_text(&p->m_names, p->n_missed, d->name);
		put_i64(&p->m_ticks, p->n_missed, first);
		put_i64(&p->m_counts, p->n_missed, missed > INT32_MAX ? INT32_MAX : missed);
		p->n_missed++;
	}
	for (int i = nf - 1; rc == PGC_OK && i >= 0; i--) {
		char tick[PGC_CRON_TIME_MAX];
		if ((rc = pgc_cron_format_local(cr, fire[i], tick, sizeof tick, err)) != PGC_OK)
			break;
		char *body = job_payload(d->payload, d->name, tick);
		if (body == NULL) {
			rc = pgc__err(err, PGC_ENOMEM, "out of memory");
			break;
		}
		put_text(&p->names, p->n_ticks, d->name);
		put_i64(&p->ticks, p->n_ticks, fire[i]);
		put_text(&p->payloads, p->n_ticks, body);
		free(body);
		/* The job waits for its tick when it fired ahead, and for its jitter. */
		int64_t run_at = d->jitter_ms > 0 ? fire[i] * 1000 + jitter_ms(d->jitter_ms)
		                 : fire[i] > now_s ? fire[i] * 1000 : -1;
		if (run_at >= 0) {
			put_i64(&p->run_at, p->n_ticks, run_at);
		} else {
			put_sep(&p->run_at, p->n_ticks);
			pgc__sb_puts(&p->run_at, "NULL");
		}
		p->n_ticks++;
	}
	pgc_cron_free(cr);
	if (rc != PGC_OK)
		return rc;
	put_text(&p->s_names, p->n_sched, d->name);
	put_i64(&p->s_next, p->n_sched, after);
	if (n > 0) {
		put_i64(&p->s_last, p->n_sched, ring[(n - 1) % RING]);
	} else {
		/* Only a pending schedule whose first tick is not due yet: its last tick stays. */
		put_sep(&p->s_last, p->n_sched);
		pgc__sb_puts(&p->s_last, "NULL");
	}
	/* Trim the history now and then: every 100 ticks of the schedule. */
	put_sep(&p->s_trim, p->n_sched);
	pgc__sb_puts(&p->s_trim, (d->total + nf + (missed > 0)) / 100 != d->total / 100 ? "t" : "f");
	p->n_sched++;
	*fires = nf;
	*missed_out = missed;
	return PGC_OK;
}

int pgc_cron_fire_due(pgc_conn *conn, const char *schema, const char *scheduler, int max, int64_t lookahead_ms,
                      pgc_cron_fire_result *out, pgc_error *err)
{
	pgc_error_clear(err);
	if (out == NULL)
		return pgc__err(err, PGC_EUSAGE, "pgc_cron_fire_due: out must not be NULL");
	memset(out, 0, sizeof *out);
	out->next_due_ms = -1;
	if (max < 1 || max > 1000)
		return pgc__err(err, PGC_EUSAGE, "pgc_cron_fire_due: max must be 1 to 1000, not %d", max);
	if (lookahead_ms < 0 || lookahead_ms > PGC_CRON_LOOKAHEAD_MAX_MS)
		return pgc__err(err, PGC_EUSAGE, "pgc_cron_fire_due: the lookahead must be 0 to %d ms, not %" PRId64,
		                PGC_CRON_LOOKAHEAD_MAX_MS, lookahead_ms);
	if (scheduler != NULL && strlen(scheduler) > 200)
		return pgc__err(err, PGC_EUSAGE, "pgc_cron_fire_due: scheduler is longer than 200 bytes");
	ctx c;
	int rc = ctx_begin(&c, conn, schema, "pgc_cron_fire_due", err);
	if (rc != PGC_OK)
		return rc;
	if (in_transaction(conn)) {
		ctx_end(&c);
		return pgc__err(err, PGC_EUSAGE, "pgc_cron_fire_due must run outside a transaction");
	}
	char mx[16], la[24];
	snprintf(mx, sizeof mx, "%d", max);
	snprintf(la, sizeof la, "%" PRId64, lookahead_ms);
	const char *v[2] = { mx, la };
	PGresult *r = NULL;
	rc = pgc__command(conn, "BEGIN ISOLATION LEVEL READ COMMITTED", err);
	/* Due: an 'allow' schedule whose next tick is at most the lookahead ahead, a 'skip' one
	 * whose tick has come (its previous job must be looked at when the tick is due). */
	if (rc == PGC_OK)
		r = run(&c, "SELECT name, expr, tz, queue, payload::text, catch_up, catch_up_max, " MS("catch_up_window") ","
		        " overlap, " MS("jitter") ", floor(extract(epoch FROM CASE WHEN isfinite(next_tick) THEN next_tick"
		        "  ELSE updated_at END))::int8, " US("now()") ","
		        " fired + missed + skipped, max_attempts, NOT isfinite(next_tick)"
		        " FROM @S@.cron_schedules WHERE NOT paused"
		        "  AND next_tick <= now() + $2::int8 * interval '1 millisecond'"
		        "  AND (overlap = 'allow' OR next_tick <= now())"
		        " ORDER BY next_tick LIMIT $1::int FOR UPDATE SKIP LOCKED", 2, v, &rc, err);
	plan p = { 0 };
	for (int i = 0; rc == PGC_OK && i < PQntuples(r); i++) {
		due d;
		d.name = PQgetvalue(r, i, 0);
		d.expr = PQgetvalue(r, i, 1);
		d.tz = PQgetvalue(r, i, 2);
		d.queue = PQgetvalue(r, i, 3);
		d.payload = PQgetvalue(r, i, 4);
		d.catch_up = PGC_CRON_CATCHUP_SKIP;
		(void)pgc_cron_catch_up_parse(PQgetvalue(r, i, 5), &d.catch_up);
		d.catch_up_max = (int)get_i64(r, i, 6);
		d.window_ms = get_i64(r, i, 7);
		d.overlap_skip = strcmp(PQgetvalue(r, i, 8), "skip") == 0;
		d.jitter_ms = get_i64(r, i, 9);
		d.next_tick = get_i64(r, i, 10);
		d.now_us = get_i64(r, i, 11);
		d.total = get_i64(r, i, 12);
		d.max_attempts = (int)get_i64(r, i, 13);
		d.pending = strcmp(PQgetvalue(r, i, 14), "t") == 0;
		out->schedules++;
		pgc_error e = PGC_ERROR_INIT;
		long fires = 0, missed = 0;
		int prc = plan_one(&p, &d, lookahead_ms, &fires, &missed, &e);
		if (prc == PGC_ENOMEM) {
			rc = prc;
			if (err != NULL)
				*err = e;
		} else if (prc != PGC_OK) {
			/* Nothing was planned for it (the zone or the expression is the problem): leave it
			 * to a host that can. */
			out->failed++;
			snprintf(out->failed_name, sizeof out->failed_name, "%s", d.name);
			out->failed_err = e;
		} else {
			out->missed += missed;
		}
	}
	PQclear(r);
	r = NULL;
	if (rc == PGC_OK && p.n_sched > 0) {
		const char *fv[12] = {
			done_array(&p.names, p.n_ticks), done_array(&p.ticks, p.n_ticks),
			done_array(&p.payloads, p.n_ticks), done_array(&p.run_at, p.n_ticks),
			done_array(&p.m_names, p.n_missed), done_array(&p.m_ticks, p.n_missed),
			done_array(&p.m_counts, p.n_missed), done_array(&p.s_names, p.n_sched),
			done_array(&p.s_next, p.n_sched), done_array(&p.s_last, p.n_sched),
			done_array(&p.s_trim, p.n_sched), scheduler
		};
		bool oom = false;
		for (int i = 0; i < 11; i++)
			oom |= fv[i] == NULL;
		if (oom || p.names.oom || p.payloads.oom || p.m_names.oom || p.s_names.oom || p.run_at.oom ||
		    p.ticks.oom || p.m_ticks.oom || p.m_counts.oom || p.s_next.oom || p.s_last.oom || p.s_trim.oom)
			rc = pgc__err(err, PGC_ENOMEM, "out of memory");
		if (rc == PGC_OK)
			r = run(&c, "SELECT job_id, fresh FROM @S@.cron_fire($1::text[], $2::int8[], $3::text[], $4::int8[],"
			        " $5::text[], $6::int8[], $7::int[], $8::text[], $9::int8[], $10::int8[], $11::bool[], $12)",
			        12, fv, &rc, err);
		for (int i = 0; rc == PGC_OK && i < PQntuples(r); i++) {
			bool fresh = strcmp(PQgetvalue(r, i, 1), "t") == 0;
			if (fresh && !PQgetisnull(r, i, 0))
				out->enqueued++;
			else if (fresh)
				out->skipped++;
		}
		PQclear(r);
		r = NULL;
	}
	plan_free(&p);
	/* When to look again: the earliest 'allow' tick less the lookahead, or the earliest 'skip'
	 * tick (a tick still to compute is due now); NULL when every schedule is paused (or there
	 * is none). */
	if (rc == PGC_OK)
		r = run(&c, "SELECT " MS("least((SELECT min(greatest(next_tick, now())) FROM @S@.cron_schedules"
		        "  WHERE NOT paused AND overlap = 'allow') - $1::int8 * interval '1 millisecond',"
		        " (SELECT min(greatest(next_tick, now())) FROM @S@.cron_schedules WHERE NOT paused AND overlap = 'skip'))"
		        " - now()"),
		        1, v + 1, &rc, err);
	if (rc == PGC_OK && !PQgetisnull(r, 0, 0)) {
		int64_t ms = get_i64(r, 0, 0);
		out->next_due_ms = ms > 0 ? ms : 0;
	}
	PQclear(r);
	if (rc == PGC_OK)
		rc = pgc__command(conn, "COMMIT", err);
	else
		pgc__rollback(conn);
	if (rc != PGC_OK) {
		out->enqueued = out->missed = out->skipped = 0;
		out->schedules = 0;
	}
	ctx_end(&c);
	return rc;
}

/* ---- the "cron" member of a job's payload -------------------------------------------------- */

static const char *ws(const char *p)
{
	while (*p == ' ' || *p == '\t' || *p == '\n' || *p == '\r')
		p++;
	return p;
}

/* A JSON string at p (at its opening quote): its text into out (size bytes; NULL: skipped),
 * the position after it, or NULL when it is not one or does not fit. */
static const char *json_string(const char *p, char *out, size_t size)
{
	if (*p != '"')
		return NULL;
	size_t n = 0;
	for (p++; *p != '"'; p++) {
		char ch = *p;
		if (ch == '\0')
			return NULL;
		if (ch == '\\') {
			ch = *++p;
			if (out != NULL && ch != '"' && ch != '\\' && ch != '/')
				return NULL;
			if (ch == '\0')
				return NULL;
		}
		if (out != NULL) {
			if (n + 1 >= size)
				return NULL;
			out[n++] = ch;
		}
	}
	if (out != NULL)
		out[n] = '\0';
	return p + 1;
}

/* Skips one JSON value at p; NULL when it is malformed. Nesting is bounded by depth. */
static const char *json_skip(const char *p, int depth)
{
	p = ws(p);
	if (*p == '"')
		return json_string(p, NULL, 0);
	if (*p == '{' || *p == '[') {
		if (depth > 64)
			return NULL;
		char close = *p == '{' ? '}' : ']';
		p = ws(p + 1);
		if (*p == close)
			return p + 1;
		for (;;) {
			if (close == '}') {
				if ((p = json_string(ws(p), NULL, 0)) == NULL || *(p = ws(p)) != ':')
					return NULL;
				p++;
			}
			if ((p = json_skip(p, depth + 1)) == NULL)
				return NULL;
			p = ws(p);
			if (*p == close)
				return p + 1;
			if (*p != ',')
				return NULL;
			p++;
		}
	}
	while (*p && strchr(",}] \t\r\n", *p) == NULL)
		p++;
	return p;
}

bool pgc_cron_payload_tick(const char *payload, char *schedule, char *tick, size_t size)
{
	if (schedule == NULL || tick == NULL || size == 0)
		return false;
	schedule[0] = tick[0] = '\0';
	if (payload == NULL)
		return false;
	const char *p = ws(payload);
	if (*p++ != '{')
		return false;
	char key[16];
	for (p = ws(p); *p == '"';) {
		const char *k = json_string(p, key, sizeof key);
		bool cron = k != NULL && strcmp(key, "cron") == 0;
		if (k == NULL && (k = json_string(p, NULL, 0)) == NULL)
			return false;
		if (*(p = ws(k)) != ':')
			return false;
		p = ws(p + 1);
		if (cron && *p == '{') {
			/* The last "cron" wins, as for jsonb: keep looking after this one. */
			const char *q = ws(p + 1);
			char s[PGC_CRON_NAME_MAX + 1] = "", t[PGC_CRON_TIME_MAX] = "";
			while (*q == '"') {
				const char *v = json_string(q, key, sizeof key);
				bool is_s = v != NULL && strcmp(key, "schedule") == 0, is_t = v != NULL && strcmp(key, "tick") == 0;
				if (v == NULL && (v = json_string(q, NULL, 0)) == NULL)
					return false;
				if (*(q = ws(v)) != ':')
					return false;
				q = ws(q + 1);
				if ((is_s || is_t) && *q == '"')
					v = json_string(q, is_s ? s : t, is_s ? sizeof s : sizeof t);
				else
					v = json_skip(q, 1);
				if (v == NULL)
					return false;
				q = ws(v);
				if (*q == ',')
					q = ws(q + 1);
			}
			if (s[0] != '\0' && t[0] != '\0' && strlen(s) < size && strlen(t) < size) {
				strcpy(schedule, s);
				strcpy(tick, t);
			} else {
				schedule[0] = tick[0] = '\0';
			}
		}
		if ((p = json_skip(p, 1)) == NULL)
			return false;
		p = ws(p);
		if (*p == ',')
			p = ws(p + 1);
	}
	return schedule[0] != '\0';
}

/* conn_call.c - sending statements and collecting their answers, bounded: the one wait loop,
 * the one cancel, pipelined batches, the statement cache, per-statement timeouts
 *
 * Every call is a batch: one statement, or several sent at once in libpq's pipeline mode and
 * answered in one round trip. The collector reads the answers under the call's deadline: when
 * it passes, the server is asked to cancel (and the session is closed if the cancel is not
 * answered within PGC__CANCEL_GRACE_MS), or the session is closed at once where an unseen
 * outcome must not be trusted. The first error the server sends is the one reported.
 *
 * The statement cache keeps, per session, the statements callers mark PGC__CACHED. A statement
 * is prepared in the same round trip as its first execution (Parse, then Bind/Execute, in one
 * pipeline), under a name derived from its text. The one rule for a prepared statement that
 * vanished behind our back (SQLSTATE 26000: DISCARD ALL, DEALLOCATE, a pooler that moved us to
 * another server session): forget every statement of the session; outside a transaction block
 * the batch, which the server rolled back as a whole, is sent again once with the statements
 * prepared anew. A session that keeps losing them stops preparing.
 *
 * A statement's own statement_timeout and lock_timeout are set with set_config(..., true) in
 * the same pipeline, just before it: the server arms statement_timeout afresh for each
 * statement of a pipeline, so the statement runs under the value it was given whatever the
 * role's or the database's settings. Outside a transaction block the settings end with the
 * pipeline's implicit transaction; inside one they are put back after the statement. */
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "conn_priv.h"

#define MISSING_MAX 3 /* prepared statements lost this often: stop preparing on the session */

pgc__call pgc__bound(int64_t timeout_ms, int cancel_fd)
{
	pgc__call c = PGC__CALL_INIT;
	c.timeout_ms = timeout_ms;
	c.cancel_fd = cancel_fd;
	return c;
}

/* ---- the statement cache --------------------------------------------------------------------- */

static uint64_t fnv1a(const char *s)
{
	uint64_t h = UINT64_C(0xcbf29ce484222325);
	for (; *s; s++) {
		h ^= (unsigned char)*s;
		h *= UINT64_C(0x100000001b3);
	}
	return h;
}

/* The cache entry for sql, made on first use; -1 when the session does not prepare or the
 * cache is full (the statement then runs unnamed). */
static int stmt_find(pgc_conn *c, const char *sql)
{
	if (c->no_prepare)
		return -1;
	uint64_t h = fnv1a(sql);
	for (int i = 0; i < c->nstmts; i++)
		if (c->stmts[i].hash == h && strcmp(c->stmts[i].sql, sql) == 0)
			return i;
	if (c->nstmts == PGC__STMT_MAX)
		return -1;
	pgc__stmt *s = &c->stmts[c->nstmts];
	s->sql = strdup(sql);
	if (s->sql == NULL)
		return -1;
	s->hash = h;
	s->prepared = false;
	snprintf(s->name, sizeof s->name, "pgcoord_%016llx", (unsigned long long)h);
	return c->nstmts++;
}

int pgc__stmt_count(const pgc_conn *c)
{
	return c->nstmts;
}

void pgc__stmts_forget(pgc_conn *c)
{
	for (int i = 0; i < c->nstmts; i++)
		c->stmts[i].prepared = false;
}

void pgc__stmts_free(pgc_conn *c)
{
	for (int i = 0; i < c->nstmts; i++)
		free(c->stmts[i].sql);
	c->nstmts = 0;
}

/* ---- the one cancel ------------------------------------------------------------------------- */

/* PQcancel opens a connection of its own and blocks in connect(2), which against a host that
 * vanished can take minutes. It runs in a thread of its own; the caller waits for it at most
 * wait_ms. A thread that finished in time is joined, so that none is left exiting when the
 * process ends (LeakSanitizer's check at exit can hang on one); one still stuck is detached
 * and finishes on its own, freeing what it used. */
typedef struct cancel_job {
	PGcancel *cancel;
	atomic_int refs;
	int done[2];
} cancel_job;

static void cancel_job_unref(cancel_job *j)
{
	if (atomic_fetch_sub(&j->refs, 1) != 1)
		return;
	PQfreeCancel(j->cancel);
	close(j->done[0]);
	close(j->done[1]);
	free(j);
}

static void *cancel_main(void *arg)
{
	cancel_job *j = arg;
	char buf[256];
	(void)PQcancel(j->cancel, buf, sizeof buf);
	char one = 1;
	ssize_t n = write(j->done[1], &one, 1);
	(void)n;
	cancel_job_unref(j);
	return NULL;
}

/* Asks the server to cancel what the session runs. True when the request was handed over
 * within wait_ms (not whether the server acted on it). */
static bool send_cancel(pgc_conn *c, int wait_ms)
{
	cancel_job *j = calloc(1, sizeof *j);
	if (j == NULL)
		return false;
	j->cancel = PQgetCancel(c->pg);
	if (j->cancel == NULL || pipe2(j->done, O_CLOEXEC) != 0) {
		PQfreeCancel(j->cancel);
		free(j);
		return false;
	}
	atomic_init(&j->refs, 2);
	pthread_attr_t attr;
	pthread_attr_init(&attr);
	pthread_attr_setstacksize(&attr, 128 * 1024);
	pthread_t t;
	if (pthread_create(&t, &attr, cancel_main, j) != 0) {
		pthread_attr_destroy(&attr);
		atomic_store(&j->refs, 1);
		cancel_job_unref(j);
		return false;
	}
	pthread_attr_destroy(&attr);
	struct pollfd p = { j->done[0], POLLIN, 0 };
	int64_t end = pgc__now_ms() + wait_ms;
	int pr;
	do {
		int64_t left = end - pgc__now_ms();
		pr = poll(&p, 1, left < 0 ? 0 : (int)left);
	} while (pr < 0 && errno == EINTR);
	if (pr > 0)
		pthread_join(t, NULL); /* it has written its byte: it is on its way out */
	else
		pthread_detach(t);
	cancel_job_unref(j);
	return pr > 0;
}

/* ---- batches -------------------------------------------------------------------------------- */

typedef struct item {
	const char *sql;
	int n;
	const char *const *vals;
	unsigned flags;
	int stmt;      /* cache entry, or -1 */
	bool internal; /* added by the layer (a savepoint, set_config) */
	PGresult *res; /* the final result (success or error) */
} item;

typedef struct slot {
	int item;
	bool parse; /* the Parse of item's prepared statement, not its execution */
} slot;

struct pgc__batch {
	pgc_conn *c;
	item *items;
	int n;
	size_t cap;
	slot *slots;
	int nslots;
	size_t slotcap;
	int main;          /* pgc__query: the caller's statement */
	unsigned flags;    /* PGC__SIMPLE, PGC__ROWS_DROP, PGC__COPY */
	bool pipeline;     /* sent in pipeline mode */
	bool savepoint;    /* wrapped in SAVEPOINT pgcoord_call */
	bool was_idle;     /* no transaction block was open when it was sent */
	int overrides;     /* item of the set_config statement, or -1 */
	char ovr[2][32];   /* its parameters */
	const char *ovr_vals[2];
	/* collection */
	int cur;           /* the slot being read */
	bool synced, done, copy_out, flush_pending;
	int first_error;   /* item of the first error, or -1 */
	bool missing;      /* a cached statement was gone (26000) */
	bool exists;       /* a Parse found its statement there already (42P05) */
	bool aborted;      /* a statement did not run because an earlier one failed */
};

pgc__batch *pgc__batch_new(pgc_conn *c)
{
	/* A session keeps one finished batch for the next call: a call then allocates nothing. */
	pgc__batch *b = c->spare;
	if (b != NULL) {
		c->spare = NULL;
		item *items = b->items;
		slot *slots = b->slots;
		size_t cap = b->cap, slotcap = b->slotcap;
		memset(b, 0, sizeof *b);
		b->items = items;
		b->slots = slots;
		b->cap = cap;
		b->slotcap = slotcap;
	} else if ((b = calloc(1, sizeof *b)) == NULL) {
		return NULL;
	}
	b->c = c;
	b->main = -1;
	b->overrides = -1;
	b->first_error = -1;
	return b;
}

static int batch_push(pgc__batch *b, const char *sql, int n, const char *const *vals, unsigned flags,
                      bool internal)
{
	if (!pgc__grow((void **)&b->items, &b->cap, (size_t)b->n + 1, sizeof *b->items))
		return PGC_ENOMEM;
	item *it = &b->items[b->n];
	memset(it, 0, sizeof *it);
	it->sql = sql;
	it->n = n;
	it->vals = vals;
	it->flags = flags;
	it->stmt = -1;
	it->internal = internal;
	return b->n++;
}

int pgc__batch_add(pgc__batch *b, const char *sql, int n, const char *const *vals, unsigned flags)
{
	if (b == NULL || sql == NULL || (flags & ~PGC__CACHED) != 0)
		return PGC_EUSAGE;
	return batch_push(b, sql, n, vals, flags, false);
}

static void batch_clear_results(pgc__batch *b)
{
	for (int i = 0; i < b->n; i++) {
		PQclear(b->items[i].res);
		b->items[i].res = NULL;
	}
	b->nslots = 0;
	b->cur = 0;
	b->synced = b->done = b->copy_out = b->flush_pending = false;
	b->first_error = -1;
	b->missing = b->exists = b->aborted = false;
}

void pgc__batch_free(pgc__batch *b)
{
	if (b == NULL)
		return;
	batch_clear_results(b);
	if (b->c != NULL && b->c->spare == NULL && b->c->pending != b && b->cap <= 16) {
		b->c->spare = b;
		return;
	}
	free(b->items);
	free(b->slots);
	free(b);
}

void pgc__batches_free(pgc_conn *c)
{
	pgc__batch *b[2] = { c->pending, c->spare };
	c->pending = c->spare = NULL;
	for (int i = 0; i < 2; i++)
		if (b[i] != NULL) {
			b[i]->c = NULL;
			pgc__batch_free(b[i]);
		}
}

PGresult *pgc__batch_result(const pgc__batch *b, int i)
{
	if (b == NULL || i < 0 || i >= b->n)
		return NULL;
	PGresult *r = b->items[i].res;
	if (r == NULL)
		return NULL;
	ExecStatusType st = PQresultStatus(r);
	return st == PGRES_TUPLES_OK || st == PGRES_COMMAND_OK ? r : NULL;
}

static int slot_push(pgc__batch *b, int item, bool parse)
{
	if (!pgc__grow((void **)&b->slots, &b->slotcap, (size_t)b->nslots + 1, sizeof *b->slots))
		return PGC_ENOMEM;
	b->slots[b->nslots].item = item;
	b->slots[b->nslots].parse = parse;
	b->nslots++;
	return PGC_OK;
}

/* Hands the batch to libpq: pipeline mode when it takes more than one message group. */
static int batch_send(pgc__batch *b, pgc_error *err)
{
	pgc_conn *c = b->c;
	PGconn *pg = c->pg;
	batch_clear_results(b);
	if (!pgc__conn_ok(c))
		return pgc__err(err, PGC_ECONNLOST, "connection to the server lost");
	if (c->pending != NULL && c->pending != b)
		return pgc__err(err, PGC_EUSAGE, "the connection is busy with another command");
	if (PQisBusy(pg))
		return pgc__err(err, PGC_EUSAGE, "the connection is busy with another command");
	b->was_idle = PQtransactionStatus(pg) == PQTRANS_IDLE;
	/* Plan the slots first: the cache decides whether a Parse goes before an execution. A
	 * statement that occurs twice in the batch is parsed once, before its first execution:
	 * the server refuses a second Parse of the same name, and the refusal would end the
	 * pipeline there. */
	for (int i = 0; i < b->n; i++) {
		item *it = &b->items[i];
		it->stmt = (it->flags & PGC__CACHED) ? stmt_find(c, it->sql) : -1;
		bool parse = it->stmt >= 0 && !c->stmts[it->stmt].prepared;
		for (int k = 0; parse && k < i; k++)
			parse = b->items[k].stmt != it->stmt;
		if (parse && slot_push(b, i, true) != PGC_OK)
			return pgc__err(err, PGC_ENOMEM, "out of memory");
		if (slot_push(b, i, false) != PGC_OK)
			return pgc__err(err, PGC_ENOMEM, "out of memory");
	}
	b->pipeline = !(b->flags & PGC__SIMPLE) && b->nslots > 1;
	if (c->single_row_left && b->pipeline) {
		/* An empty statement outside a pipeline ends the single-row mode libpq kept. */
		c->single_row_left = false;
		pgc__batch *reset = pgc__batch_new(c);
		pgc_error ignore;
		if (reset == NULL)
			return pgc__err(err, PGC_ENOMEM, "out of memory");
		reset->flags = PGC__SIMPLE;
		(void)batch_push(reset, ";", 0, NULL, 0, true);
		int rrc = pgc__batch_run(reset, NULL, &ignore);
		pgc__batch_free(reset);
		if (rrc != PGC_OK && !pgc__conn_ok(c))
			return pgc__err(err, PGC_ECONNLOST, "connection to the server lost");
	}
	if (b->pipeline && PQenterPipelineMode(pg) != 1)
		return pgc__err_result(err, pg, NULL, "pipeline");
	bool ok = true;
	for (int s = 0; s < b->nslots && ok; s++) {
		item *it = &b->items[b->slots[s].item];
		const char *name = it->stmt >= 0 ? c->stmts[it->stmt].name : NULL;
		if (b->slots[s].parse)
			ok = PQsendPrepare(pg, name, it->sql, 0, NULL) == 1;
		else if (b->flags & PGC__SIMPLE)
			ok = PQsendQuery(pg, it->sql) == 1;
		else if (name != NULL)
			ok = PQsendQueryPrepared(pg, name, it->n, it->vals, NULL, NULL, 0) == 1;
		else
			ok = PQsendQueryParams(pg, it->sql, it->n, NULL, it->vals, NULL, NULL, 0) == 1;
	}
	if (ok && b->pipeline)
		ok = PQpipelineSync(pg) == 1;
	if (!ok) {
		int rc = pgc__err_result(err, pg, NULL, NULL);
		if (b->pipeline) {
			/* Nothing of a partial pipeline reaches the server without its Sync; drop it
			 * with the session rather than leave libpq half way. */
			pgc__drop(c);
			pgc__session_lost(c, "a statement could not be sent");
			rc = PGC_ECONNLOST;
		}
		return rc;
	}
	if ((b->flags & PGC__ROWS_DROP) && !b->pipeline && PQsetSingleRowMode(pg) == 1)
		c->single_row_left = true;
	b->flush_pending = true;
	c->pending = b;
	return PGC_OK;
}

/* One result, in the order the server sends them. */
static void take_result(pgc__batch *b, PGresult *r, pgc__call *call)
{
	pgc_conn *c = b->c;
	ExecStatusType st = PQresultStatus(r);
	if (st == PGRES_PIPELINE_SYNC) {
		b->synced = true;
		PQclear(r);
		return;
	}
	if (b->cur >= b->nslots) {
		PQclear(r); /* nothing expected: a late result of a cancelled statement */
		return;
	}
	slot *s = &b->slots[b->cur];
	item *it = &b->items[s->item];
	switch (st) {
	case PGRES_COPY_OUT:
		/* Its data is read and dropped (drain), whoever sent it. */
		b->copy_out = true;
		PQclear(r);
		return;
	case PGRES_COPY_IN:
	case PGRES_COPY_BOTH:
		(void)PQputCopyEnd(c->pg, (b->flags & PGC__COPY) ? "COPY FROM STDIN is not supported here"
		                                                 : "pgcoord does not send COPY data");
		b->flush_pending = true;
		PQclear(r);
		return;
	case PGRES_SINGLE_TUPLE:
		PQclear(r); /* a row nobody keeps (PGC__ROWS_DROP) */
		return;
	default:
		break;
	}
	if (s->parse) {
		const char *state = PQresultErrorField(r, PG_DIAG_SQLSTATE);
		if (st == PGRES_COMMAND_OK) {
			c->stmts[it->stmt].prepared = true;
		} else if (state && strcmp(state, "42P05") == 0) {
			/* A statement of that name exists already. The name comes from the text, so it
			 * is this one (prepared by an earlier session of ours that a pooler handed on);
			 * but the refusal ended the batch, which is sent again. */
			c->stmts[it->stmt].prepared = true;
			b->exists = true;
			if (b->first_error < 0) {
				b->first_error = s->item;
				PQclear(it->res);
				it->res = r;
				return;
			}
		} else if (it->res == NULL && st != PGRES_PIPELINE_ABORTED) {
			it->res = r;
			if (b->first_error < 0)
				b->first_error = s->item;
			return;
		}
		PQclear(r);
		return;
	}
	bool ok = st == PGRES_TUPLES_OK || st == PGRES_COMMAND_OK || st == PGRES_EMPTY_QUERY;
	if (ok && call != NULL && call->on_tag != NULL && st != PGRES_EMPTY_QUERY)
		call->on_tag(PQcmdStatus(r), call->tag_arg);
	if (!ok && st != PGRES_PIPELINE_ABORTED) {
		const char *state = PQresultErrorField(r, PG_DIAG_SQLSTATE);
		if (it->stmt >= 0 && state && strcmp(state, "26000") == 0)
			b->missing = true;
		if (b->first_error < 0) {
			b->first_error = s->item;
			PQclear(it->res);
			it->res = r;
			return;
		}
		PQclear(r);
		return;
	}
	if (st == PGRES_PIPELINE_ABORTED) {
		/* Not run: an earlier statement failed. Without a known error that is an error in
		 * itself (the batch must not look complete). */
		b->aborted = true;
		PQclear(r);
		return;
	}
	if (it->res != NULL && b->first_error == s->item) {
		PQclear(r); /* keep the error, not what came after it */
		return;
	}
	PQclear(it->res);
	it->res = r;
}

/* Reads what has arrived, never waiting. */
static void drain(pgc__batch *b, pgc__call *call)
{
	PGconn *pg = b->c->pg;
	while (!b->done) {
		if (b->copy_out) {
			char *buf;
			int got;
			while ((got = PQgetCopyData(pg, &buf, 1)) > 0)
				PQfreemem(buf);
			if (got == 0)
				return; /* more copy data to wait for */
			b->copy_out = false;
		}
		if (PQisBusy(pg) || PQstatus(pg) != CONNECTION_OK)
			return;
		PGresult *r = PQgetResult(pg);
		if (r == NULL) {
			if (!b->pipeline) {
				b->done = true;
				return;
			}
			b->cur++; /* the end of one statement's results */
			continue;
		}
		take_result(b, r, call);
		if (b->pipeline && b->synced) {
			b->done = true;
			return;
		}
	}
}

/* Leaves pipeline mode once everything is read; a session that cannot is no longer usable. */
static void leave_pipeline(pgc__batch *b)
{
	PGconn *pg = b->c->pg;
	if (!b->pipeline || PQpipelineStatus(pg) == PQ_PIPELINE_OFF)
		return;
	for (int guard = 0; guard < 64 && PQstatus(pg) == CONNECTION_OK; guard++) {
		if (PQexitPipelineMode(pg) == 1)
			return;
		if (PQisBusy(pg))
			break;
		PGresult *r = PQgetResult(pg);
		PQclear(r);
	}
	if (PQpipelineStatus(pg) != PQ_PIPELINE_OFF) {
		pgc__drop(b->c);
		pgc__session_lost(b->c, "the session was left in the middle of a pipeline");
	}
}

/* The wait loop: reads the batch's answers under call's bound. Returns PGC_OK when every
 * answer arrived (successes or server errors), PGC_ECONNLOST when the session is gone; call
 * says whether a deadline passed or a cancel was asked for. */
static int collect(pgc__batch *b, pgc__call *call)
{
	pgc_conn *c = b->c;
	PGconn *pg = c->pg;
	int64_t start = pgc__now_ms();
	int64_t timeout = call->timeout_ms == 0 ? pgc__call_timeout_ms(c) : call->timeout_ms;
	int64_t deadline = timeout < 0 ? -1 : start + timeout;
	int64_t hard = -1; /* after a cancel: when the session is dropped */
	int64_t next_tick = call->on_tick ? start + (call->tick_first_ms > 0 ? call->tick_first_ms : call->tick_ms) : -1;
	bool cancelled = false;
	for (;;) {
		if (b->flush_pending) {
			int f = PQflush(pg);
			if (f < 0)
				break;
			b->flush_pending = f == 1;
		}
		if (!PQconsumeInput(pg))
			break;
		drain(b, call);
		if (b->done || PQstatus(pg) != CONNECTION_OK)
			break;
		int64_t now = pgc__now_ms();
		int64_t until = cancelled ? hard : deadline;
		if (until >= 0 && now >= until) {
			if (!cancelled) {
				call->hit_deadline = true;
				if (call->on_deadline == PGC__CANCEL) {
					(void)send_cancel(c, PGC__CANCEL_GRACE_MS);
					cancelled = true;
					hard = pgc__now_ms() + PGC__CANCEL_GRACE_MS;
					continue;
				}
			}
			call->dropped = true;
			pgc__drop(c);
			break;
		}
		if (next_tick >= 0 && now >= next_tick) {
			call->on_tick(call->tick_arg);
			next_tick = pgc__now_ms() + (call->tick_ms > 0 ? call->tick_ms : 100);
			continue;
		}
		int64_t wake = until;
		if (next_tick >= 0 && (wake < 0 || next_tick < wake))
			wake = next_tick;
		int wait = wake < 0 ? 60000 : (int)(wake - now > 60000 ? 60000 : wake - now);
		struct pollfd fds[2] = {
			{ PQsocket(pg), (short)(POLLIN | (b->flush_pending ? POLLOUT : 0)), 0 },
			{ call->cancel_fd, POLLIN, 0 },
		};
		nfds_t nfds = (!cancelled && call->cancel_fd >= 0) ? 2 : 1;
		int pr = poll(fds, nfds, wait);
		if (pr < 0 && errno != EINTR)
			break;
		if (pr > 0 && nfds == 2 && fds[1].revents != 0 && !cancelled) {
			call->hit_cancel = true;
			(void)send_cancel(c, PGC__CANCEL_GRACE_MS);
			cancelled = true;
			hard = pgc__now_ms() + PGC__CANCEL_GRACE_MS;
		}
	}
	c->pending = NULL;
	if (PQstatus(pg) != CONNECTION_OK || !b->done) {
		/* Read what libpq still holds, so that the first error (the server's FATAL) is
		 * known, then give the session up. */
		for (int guard = 0; guard < 1000 && !b->done; guard++) {
			PGresult *r = PQgetResult(pg);
			if (r == NULL)
				break;
			take_result(b, r, call);
		}
		c->broken = true;
		return PGC_ECONNLOST;
	}
	leave_pipeline(b);
	return pgc__conn_ok(c) ? PGC_OK : PGC_ECONNLOST;
}

/* A refusal that comes from the server being a standby: a write (25006) or a WAL function
 * (55000) on a hot standby. The server reports in_hot_standby (PostgreSQL 14+) and tells the
 * session when a promotion ends recovery. A 25006 on a primary is a read-only transaction the
 * caller asked for, and stays the caller's error. */
static bool standby_refusal(pgc_conn *c, const char *state)
{
	if (state == NULL || (strcmp(state, "25006") != 0 && strcmp(state, "55000") != 0))
		return false;
	const char *hs = c->pg ? PQparameterStatus(c->pg, "in_hot_standby") : NULL;
	return hs != NULL && strcmp(hs, "on") == 0;
}

/* What the session had on a standby (a primary that was demoted, or a host picked without
 * target_session_attrs) is not what a writer needs: the session is given up, its state counts
 * as lost, and the next session goes to whichever host is the primary now. Retry later. */
static int standby_error(pgc_conn *c, pgc_error *err)
{
	char where[160];
	snprintf(where, sizeof where, "%s:%s", PQhost(c->pg) ? PQhost(c->pg) : "?", PQport(c->pg) ? PQport(c->pg) : "?");
	pgc__drop(c);
	pgc__session_lost(c, "the server is a standby (in recovery)");
	if (err != NULL) {
		char msg[PGC_ERROR_MESSAGE_MAX];
		snprintf(msg, sizeof msg, "%s: the server at %s is a standby (in recovery); the session was closed",
		         err->message, where);
		pgc__copy_line(err->message, sizeof err->message, msg);
		snprintf(err->hint, sizeof err->hint, "%s",
		         "writes need the primary: name every host in the DSN with target_session_attrs=read-write, and retry");
		err->code = PGC_ECONNLOST;
		err->klass = PGC_CLASS_RETRY_LATER;
	}
	return PGC_ECONNLOST;
}

/* The error of a batch that did not succeed, into err; returns its code. */
static int batch_error(pgc__batch *b, const pgc__call *call, int collected, pgc_error *err)
{
	pgc_conn *c = b->c;
	PGresult *first = b->first_error >= 0 ? b->items[b->first_error].res : NULL;
	int64_t timeout = call->timeout_ms == 0 ? pgc__call_timeout_ms(c) : call->timeout_ms;
	if (collected != PGC_OK) {
		char why[PGC_ERROR_MESSAGE_MAX];
		pgc__copy_line(why, sizeof why, first ? PQresultErrorField(first, PG_DIAG_MESSAGE_PRIMARY) : NULL);
		if (why[0] == '\0')
			pgc__copy_line(why, sizeof why, PQerrorMessage(c->pg));
		pgc__session_lost(c, why[0] ? why : "connection to the server lost");
		if (call->dropped && call->hit_cancel)
			return pgc__err(err, PGC_EINTR, "interrupted; the server did not answer the cancel request, so the session was closed");
		if (call->dropped)
			return pgc__err(err, PGC_ETIMEDOUT,
			                "no answer from the server within %lld ms; the session was closed because the outcome is unknown",
			                (long long)timeout);
		int rc = pgc__err_result(err, c->pg, first, NULL);
		if (err != NULL)
			err->code = PGC_ECONNLOST;
		return rc == PGC_ESQL ? PGC_ECONNLOST : rc;
	}
	if (first == NULL)
		return pgc__err(err, PGC_EINTERNAL, "a statement of the batch did not run, and the server named no error");
	int rc = pgc__err_result(err, c->pg, first, NULL);
	const char *state = PQresultErrorField(first, PG_DIAG_SQLSTATE);
	if (standby_refusal(c, state))
		return standby_error(c, err);
	bool canceled = state && strcmp(state, "57014") == 0;
	if (canceled && call->hit_cancel) {
		rc = pgc__err(err, PGC_EINTR, "interrupted: the statement was cancelled");
		if (err != NULL)
			memcpy(err->sqlstate, "57014", 6);
	} else if (canceled && call->hit_deadline) {
		rc = pgc__err(err, PGC_ETIMEDOUT, "no answer from the server within %lld ms: the statement was cancelled",
		              (long long)timeout);
		if (err != NULL)
			memcpy(err->sqlstate, "57014", 6);
	}
	return rc;
}

/* After a batch that found its prepared statements gone (26000) or there already (42P05):
 * the one rule of the cache. True when the batch, rolled back as a whole because it ran
 * outside a transaction block, may be sent again. */
static bool retry_prepared(pgc__batch *b)
{
	pgc_conn *c = b->c;
	if (!b->missing && !b->exists)
		return false;
	if (b->missing) {
		pgc__stmts_forget(c);
		if (++c->missing >= MISSING_MAX)
			c->no_prepare = true;
	}
	return b->was_idle && PQtransactionStatus(c->pg) == PQTRANS_IDLE;
}

int pgc__batch_run(pgc__batch *b, pgc__call *call, pgc_error *err)
{
	pgc_error_clear(err);
	pgc__call dflt = PGC__CALL_INIT;
	if (call == NULL)
		call = &dflt;
	if (b == NULL || b->n == 0)
		return PGC_OK;
	for (int attempt = 0;; attempt++) {
		int rc = batch_send(b, err);
		if (rc != PGC_OK)
			return rc;
		int got = collect(b, call);
		if (got == PGC_OK && b->first_error < 0 && !b->aborted)
			return PGC_OK;
		if (got == PGC_OK && attempt < 2 && retry_prepared(b))
			continue; /* rolled back as a whole: send it again, prepared anew */
		return batch_error(b, call, got, err);
	}
}

/* ---- one statement ---------------------------------------------------------------------------- */

static const char sql_save[] =
	"SELECT pg_catalog.set_config('pgcoord.saved_statement_timeout', pg_catalog.current_setting('statement_timeout'), true),"
	" pg_catalog.set_config('pgcoord.saved_lock_timeout', pg_catalog.current_setting('lock_timeout'), true)";
static const char sql_set[] =
	"SELECT pg_catalog.set_config('statement_timeout', coalesce($1, pg_catalog.current_setting('statement_timeout')), true),"
	" pg_catalog.set_config('lock_timeout', coalesce($2, pg_catalog.current_setting('lock_timeout')), true)";
static const char sql_restore[] =
	"SELECT pg_catalog.set_config('statement_timeout', pg_catalog.current_setting('pgcoord.saved_statement_timeout'), true),"
	" pg_catalog.set_config('lock_timeout', pg_catalog.current_setting('pgcoord.saved_lock_timeout'), true)";

int pgc__send(pgc_conn *c, const char *sql, int n, const char *const *vals, const pgc__call *call,
              pgc_error *err)
{
	pgc_error_clear(err);
	if (c == NULL || sql == NULL)
		return pgc__err(err, PGC_EUSAGE, "no connection or no statement");
	if (c->pending != NULL)
		return pgc__err(err, PGC_EUSAGE, "the connection is busy with another command");
	unsigned flags = call ? call->flags : 0;
	bool ovr = call != NULL && (call->statement_timeout_ms >= 0 || call->lock_timeout_ms >= 0);
	if ((flags & PGC__SIMPLE) && (n > 0 || ovr || (flags & (PGC__CACHED | PGC__SAVEPOINT))))
		return pgc__err(err, PGC_EUSAGE, "a simple-protocol statement takes no parameters, timeouts or savepoint");
	pgc__batch *b = pgc__batch_new(c);
	if (b == NULL)
		return pgc__err(err, PGC_ENOMEM, "out of memory");
	b->flags = flags & (PGC__SIMPLE | PGC__ROWS_DROP | PGC__COPY);
	bool in_tx = pgc__in_transaction(c);
	b->savepoint = in_tx && (flags & PGC__SAVEPOINT);
	bool oom = false;
	if (b->savepoint)
		oom |= batch_push(b, "SAVEPOINT pgcoord_call", 0, NULL, 0, true) < 0;
	if (ovr) {
		if (in_tx)
			oom |= batch_push(b, sql_save, 0, NULL, PGC__CACHED, true) < 0;
		snprintf(b->ovr[0], sizeof b->ovr[0], "%lldms", (long long)call->statement_timeout_ms);
		snprintf(b->ovr[1], sizeof b->ovr[1], "%lldms", (long long)call->lock_timeout_ms);
		b->ovr_vals[0] = call->statement_timeout_ms >= 0 ? b->ovr[0] : NULL;
		b->ovr_vals[1] = call->lock_timeout_ms >= 0 ? b->ovr[1] : NULL;
		b->overrides = batch_push(b, sql_set, 2, b->ovr_vals, PGC__CACHED, true);
		oom |= b->overrides < 0;
	}
	b->main = batch_push(b, sql, n, vals, flags & PGC__CACHED, false);
	oom |= b->main < 0;
	if (ovr && in_tx)
		oom |= batch_push(b, sql_restore, 0, NULL, PGC__CACHED, true) < 0;
	if (b->savepoint)
		oom |= batch_push(b, "RELEASE SAVEPOINT pgcoord_call", 0, NULL, 0, true) < 0;
	if (oom) {
		pgc__batch_free(b);
		return pgc__err(err, PGC_ENOMEM, "out of memory");
	}
	int rc = batch_send(b, err);
	if (rc != PGC_OK)
		pgc__batch_free(b);
	return rc;
}

bool pgc__busy(const pgc_conn *c)
{
	return c->pending != NULL;
}

int pgc__ready(pgc_conn *c)
{
	pgc__batch *b = c->pending;
	if (b == NULL)
		return 1;
	if (b->flush_pending) {
		int f = PQflush(c->pg);
		if (f < 0)
			return -1;
		b->flush_pending = f == 1;
	}
	if (!PQconsumeInput(c->pg) || PQstatus(c->pg) != CONNECTION_OK)
		return -1;
	/* What has arrived is taken into the batch now; pgc__await() goes on from there. */
	drain(b, NULL);
	return b->done ? 1 : 0;
}

PGresult *pgc__await(pgc_conn *c, pgc__call *call, int *rc, pgc_error *err)
{
	int local_rc;
	if (rc == NULL)
		rc = &local_rc;
	pgc_error_clear(err);
	pgc__call dflt = PGC__CALL_INIT;
	if (call == NULL)
		call = &dflt;
	pgc__batch *b = c->pending;
	if (b == NULL) {
		*rc = pgc__err(err, PGC_EUSAGE, "nothing was sent on this connection");
		return NULL;
	}
	call->hit_deadline = call->hit_cancel = call->dropped = false;
	int got = collect(b, call);
	/* Up to two more times: the first may find the statements gone (26000), the second the
	 * ones still there when only some were deallocated (42P05). */
	for (int again = 0; again < 2 && got == PGC_OK && b->first_error >= 0 && retry_prepared(b); again++) {
		if (batch_send(b, NULL) != PGC_OK)
			break;
		got = collect(b, call);
	}
	PGresult *res = NULL;
	if (got == PGC_OK && b->first_error < 0 && !b->aborted) {
		res = b->items[b->main].res;
		b->items[b->main].res = NULL;
		if (res == NULL) /* an empty query string: nothing ran */
			res = PQmakeEmptyPGresult(c->pg, PGRES_EMPTY_QUERY);
		*rc = res ? PGC_OK : pgc__err(err, PGC_ENOMEM, "out of memory");
	} else {
		*rc = batch_error(b, call, got, err);
		if (got == PGC_OK && b->savepoint && PQtransactionStatus(c->pg) == PQTRANS_INERROR) {
			/* The failure cost the savepoint only: the caller's transaction goes on. */
			pgc__batch *u = pgc__batch_new(c);
			pgc__call ucall = PGC__CALL_INIT;
			if (u != NULL && batch_push(u, "ROLLBACK TO SAVEPOINT pgcoord_call", 0, NULL, 0, true) >= 0 &&
			    batch_push(u, "RELEASE SAVEPOINT pgcoord_call", 0, NULL, 0, true) >= 0) {
				pgc_error ignore;
				(void)pgc__batch_run(u, &ucall, &ignore);
			}
			pgc__batch_free(u);
		}
		if ((call->flags & PGC__KEEP_ERROR) && b->first_error == b->main) {
			res = b->items[b->main].res;
			b->items[b->main].res = NULL;
		}
	}
	pgc__batch_free(b);
	return res;
}

PGresult *pgc__query(pgc_conn *c, const char *sql, int n, const char *const *vals, pgc__call *call,
                     int *rc, pgc_error *err)
{
	int src = pgc__send(c, sql, n, vals, call, err);
	if (src != PGC_OK) {
		if (rc != NULL)
			*rc = src;
		return NULL;
	}
	return pgc__await(c, call, rc, err);
}

PGresult *pgc__exec(pgc_conn *c, const char *sql, int n, const char *const *vals, int *rc,
                    pgc_error *err)
{
	pgc__call call = PGC__CALL_INIT;
	return pgc__query(c, sql, n, vals, &call, rc, err);
}

PGresult *pgc__exec_cached(pgc_conn *c, const char *sql, int n, const char *const *vals, int *rc,
                           pgc_error *err)
{
	pgc__call call = PGC__CALL_INIT;
	call.flags = PGC__CACHED;
	return pgc__query(c, sql, n, vals, &call, rc, err);
}

int pgc__command(pgc_conn *c, const char *sql, pgc_error *err)
{
	pgc__call call = PGC__CALL_INIT;
	call.flags = PGC__SIMPLE;
	int rc;
	PGresult *r = pgc__query(c, sql, 0, NULL, &call, &rc, err);
	PQclear(r);
	return rc;
}

bool pgc__rollback(pgc_conn *c)
{
	if (!pgc__conn_ok(c))
		return false;
	if (PQtransactionStatus(c->pg) == PQTRANS_IDLE)
		return true;
	pgc_error ignore;
	(void)pgc__command(c, "ROLLBACK", &ignore);
	return pgc__conn_ok(c);
}

/* ---- waiting for input ------------------------------------------------------------------------ */

int pgc__wait_input(pgc_conn *c, int fd, int64_t timeout_ms)
{
	if (!pgc__conn_ok(c))
		return PGC__WAIT_LOST;
	int64_t end = timeout_ms < 0 ? -1 : pgc__now_ms() + timeout_ms;
	for (;;) {
		int64_t left = end < 0 ? 60000 : end - pgc__now_ms();
		if (left < 0)
			left = 0;
		struct pollfd fds[2] = { { PQsocket(c->pg), POLLIN, 0 }, { fd, POLLIN, 0 } };
		int pr = poll(fds, fd >= 0 ? 2 : 1, (int)(left > 60000 ? 60000 : left));
		if (pr < 0 && errno != EINTR)
			return PGC__WAIT_LOST;
		if (pr > 0 && fds[0].revents != 0 && (!PQconsumeInput(c->pg) || PQstatus(c->pg) != CONNECTION_OK))
			return PGC__WAIT_LOST;
		if (pr > 0 && fd >= 0 && fds[1].revents != 0)
			return PGC__WAIT_FD; /* what the server sent, if anything, is read too */
		if (pr > 0 && fds[0].revents != 0)
			return PGC__WAIT_INPUT;
		if (end >= 0 && pgc__now_ms() >= end)
			return PGC__WAIT_TIMEOUT;
	}
}

PGnotify *pgc__notify(pgc_conn *c, bool consume)
{
	if (c->pg == NULL)
		return NULL;
	if (consume && c->pending == NULL)
		(void)PQconsumeInput(c->pg);
	return PQnotifies(c->pg);
}

/* ---- the public calls ----------------------------------------------------------------------- */

int pgc_exec_ex(pgc_conn *conn, const char *sql, const pgc_exec_options *opts, pgc_error *err)
{
	pgc_error_clear(err);
	if (conn == NULL || sql == NULL)
		return pgc__err(err, PGC_EUSAGE, "pgc_exec: conn and sql must not be NULL");
	pgc_exec_options defaults = PGC_EXEC_OPTIONS_INIT;
	if (opts == NULL)
		opts = &defaults;
	if (opts->timeout_ms < PGC_WAIT_FOREVER)
		return pgc__err(err, PGC_EUSAGE, "pgc_exec_ex: timeout_ms must be >= 0, or PGC_WAIT_FOREVER");
	pgc__call call = pgc__bound(opts->timeout_ms, opts->cancel_fd);
	/* Not in single-row mode: libpq would keep that mode for the first statement of a
	 * pipeline the caller sends next through pgc_conn_pg(). */
	call.flags = PGC__SIMPLE | PGC__COPY;
	call.on_tag = opts->on_tag;
	call.tag_arg = opts->tag_arg;
	int rc;
	PGresult *r = pgc__query(conn, sql, 0, NULL, &call, &rc, err);
	PQclear(r);
	return rc;
}

int pgc_exec(pgc_conn *conn, const char *sql, pgc_error *err)
{
	return pgc_exec_ex(conn, sql, NULL, err);
}

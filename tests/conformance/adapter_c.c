/* adapter_c.c - the C client's conformance adapter (tests/conformance/README.md)
 *
 * Reads one JSON request a line on stdin, answers one JSON line on stdout, in order. Every op
 * runs on the main thread over one session, except `work`, which runs a pgc_worker on its own
 * threads: its handlers write events, so every line goes out under one mutex and is flushed at
 * once. End of input stops the worker and exits, so that a runner that dies leaves nothing. */
#include <inttypes.h>
#include <libpq-fe.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "pgcoord.h"
#include "json_mini.h"

#define PROTOCOL_VERSION 1
/* What this adapter offers. */
static const char *const FEATURES[] = { "queue", "results", "keys", "locks", "leases", "tx", "diag" };

/* ---- output ------------------------------------------------------------------------------ */

typedef struct sb {
	char *s;
	size_t len, cap;
} sb;

static void sb_grow(sb *b, size_t more)
{
	if (b->len + more + 1 <= b->cap)
		return;
	size_t cap = b->cap ? b->cap : 256;
	while (cap < b->len + more + 1)
		cap *= 2;
	char *s = realloc(b->s, cap);
	if (s == NULL) {
		fputs("adapter_c: out of memory\n", stderr);
		_exit(70);
	}
	b->s = s;
	b->cap = cap;
}

static void sb_raw(sb *b, const char *s, size_t n)
{
	sb_grow(b, n);
	memcpy(b->s + b->len, s, n);
	b->len += n;
	b->s[b->len] = '\0';
}

static void sb_puts(sb *b, const char *s)
{
	sb_raw(b, s, strlen(s));
}

static void sb_printf(sb *b, const char *fmt, ...) PGC_PRINTF(2, 3);
static void sb_printf(sb *b, const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	int n = vsnprintf(NULL, 0, fmt, ap);
	va_end(ap);
	sb_grow(b, (size_t)n);
	va_start(ap, fmt);
	vsnprintf(b->s + b->len, (size_t)n + 1, fmt, ap);
	va_end(ap);
	b->len += (size_t)n;
}

/* A JSON string, or null for NULL. */
static void sb_str(sb *b, const char *s)
{
	if (s == NULL) {
		sb_puts(b, "null");
		return;
	}
	sb_puts(b, "\"");
	for (const unsigned char *p = (const unsigned char *)s; *p; p++) {
		if (*p == '"' || *p == '\\')
			sb_printf(b, "\\%c", *p);
		else if (*p == '\n')
			sb_puts(b, "\\n");
		else if (*p < 0x20 || *p == 0x7f)
			sb_printf(b, "\\u%04x", *p);
		else
			sb_raw(b, (const char *)p, 1);
	}
	sb_puts(b, "\"");
}

static pthread_mutex_t out_mu = PTHREAD_MUTEX_INITIALIZER;

/* Writes one line (b's text) and flushes it, whole, whatever thread calls. */
static void emit(sb *b)
{
	pthread_mutex_lock(&out_mu);
	fwrite(b->s, 1, b->len, stdout);
	fputc('\n', stdout);
	fflush(stdout);
	pthread_mutex_unlock(&out_mu);
	free(b->s);
	b->s = NULL;
	b->len = b->cap = 0;
}

static int64_t mono_ms(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static void sleep_ms(int64_t ms)
{
	struct timespec ts = { (time_t)(ms / 1000), (long)(ms % 1000) * 1000000L };
	while (nanosleep(&ts, &ts) != 0)
		;
}

/* ---- answers ------------------------------------------------------------------------------ */

/* The request being answered: its id's raw text. */
typedef struct req {
	const jm_node *root;
	char id[32];
} req;

static void ok_begin(sb *b, const req *r)
{
	sb_printf(b, "{\"id\":%s,\"ok\":true", r->id);
}

static void answer_ok(const req *r)
{
	sb b = { 0 };
	ok_begin(&b, r);
	sb_puts(&b, "}");
	emit(&b);
}

static void answer_error(const req *r, const char *kind, const char *sqlstate, const char *msg)
{
	sb b = { 0 };
	sb_printf(&b, "{\"id\":%s,\"ok\":false,\"error\":{\"kind\":", r->id);
	sb_str(&b, kind);
	sb_puts(&b, ",\"sqlstate\":");
	sb_str(&b, sqlstate != NULL && *sqlstate ? sqlstate : NULL);
	sb_puts(&b, ",\"message\":");
	sb_str(&b, msg);
	sb_puts(&b, "}}");
	emit(&b);
}

/* The protocol's error kind of a library error. */
static const char *kind_of(int rc, const pgc_error *e)
{
	switch (rc) {
	case PGC_EUSAGE: return "usage";
	case PGC_EBUSY:
	case PGC_ETIMEDOUT:
	case PGC_EDUPLICATE:
	case PGC_EFINISHED:
	case PGC_ECOLLISION: return "conflict";
	case PGC_ENOTFOUND: return "not_found";
	case PGC_ESTALE: return strcmp(e->sqlstate, PGC_SQLSTATE_FENCE_STALE) == 0 ? "fenced" : "stale";
	case PGC_ELOCKLOST:
	case PGC_ECONNLOST:
	case PGC_ENOTHELD:
	case PGC_ECOMMIT_UNKNOWN: return "lost";
	case PGC_ERETRY_EXHAUSTED:
	case PGC_ECONNECT: return "retry_later";
	case PGC_ENOSCHEMA:
	case PGC_ESCHEMA_VERSION: return "schema";
	case PGC_ESQL:
		return e->klass == PGC_CLASS_RETRY_TX || e->klass == PGC_CLASS_RETRY_LATER ? "retry_later"
		                                                                          : "sql";
	default: return "internal";
	}
}

static void answer_pgc(const req *r, int rc, const pgc_error *e)
{
	answer_error(r, kind_of(rc, e), e->sqlstate, e->message[0] ? e->message : pgc_strerror(rc));
}

/* ---- arguments ---------------------------------------------------------------------------- */

static const jm_node *arg(const req *r, const char *name)
{
	const jm_node *n = jm_get(r->root, name);
	return n != NULL && n->type == JM_NULL ? NULL : n;
}

/* A string argument, or NULL when absent; *bad set when present with another type. */
static const char *arg_str(const req *r, const char *name, bool *bad)
{
	const jm_node *n = arg(r, name);
	if (n == NULL)
		return NULL;
	if (n->type != JM_STRING) {
		*bad = true;
		return NULL;
	}
	return n->str;
}

static int64_t arg_int(const req *r, const char *name, int64_t dflt, bool *bad)
{
	const jm_node *n = arg(r, name);
	if (n == NULL)
		return dflt;
	if (n->type != JM_NUMBER || !n->is_int) {
		*bad = true;
		return dflt;
	}
	return n->i;
}

static char *raw_copy(const jm_node *n)
{
	return strndup(n->raw, n->raw_len);
}

/* ---- state -------------------------------------------------------------------------------- */

typedef struct held_lock {
	char *name;
	pgc_lock *lock;
} held_lock;

typedef struct work {
	pgc_worker *w;
	pthread_t waiter;
	char *queues[32];
	size_t nq;
	char handler[16];
	int64_t ms;
	char *error_text;
	char *result_json; /* "result": the JSON text every job it handles gets as its result */
	long stop_after;
	atomic_long handled;
	atomic_bool finished;
} work;

static struct {
	char *dsn, *schema;
	pgc_conn *conn;
	pgc_queue *q;
	held_lock *locks;
	size_t nlocks;
	work *work;
} st;

static bool need_conn(const req *r)
{
	if (st.conn == NULL) {
		answer_error(r, "usage", NULL, "not connected: send connect first");
		return false;
	}
	return true;
}

/* The queue handle, opened on first use (after init). */
static pgc_queue *need_queue(const req *r)
{
	if (!need_conn(r))
		return NULL;
	if (st.q == NULL) {
		pgc_error err = PGC_ERROR_INIT;
		pgc_queue_options o = PGC_QUEUE_OPTIONS_INIT;
		o.schema = st.schema;
		int rc = pgc_queue_open(st.conn, &o, &st.q, &err);
		if (rc != PGC_OK) {
			answer_pgc(r, rc, &err);
			return NULL;
		}
	}
	return st.q;
}

/* ---- the worker --------------------------------------------------------------------------- */

static void job_event(const char *event, const pgc_job *job, const char *outcome)
{
	sb b = { 0 };
	sb_printf(&b, "{\"event\":\"%s\",\"job_id\":%" PRId64, event, job->id);
	if (outcome == NULL) {
		sb_printf(&b, ",\"attempt\":%d,\"key\":", job->attempt);
		sb_str(&b, job->key);
	} else {
		sb_puts(&b, ",\"outcome\":");
		sb_str(&b, outcome);
	}
	sb_printf(&b, ",\"t_ms\":%" PRId64 "}", mono_ms());
	emit(&b);
}

static void handle(const pgc_job *job, pgc_job_result *res, void *arg)
{
	work *wk = arg;
	const char *outcome = "succeeded";
	job_event("job_started", job, NULL);
	if (strcmp(wk->handler, "fail") == 0) {
		res->outcome = PGC_JOB_FAIL;
		snprintf(res->error, sizeof res->error, "%s", wk->error_text ? wk->error_text : "failed");
		outcome = "failed";
	} else if (strcmp(wk->handler, "sleep") == 0) {
		int64_t end = mono_ms() + wk->ms;
		while (mono_ms() < end && !pgc_job_lost(job))
			sleep_ms(5);
		if (pgc_job_lost(job))
			outcome = "lost";
	} else if (strcmp(wk->handler, "hang") == 0) {
		while (!pgc_job_lost(job))
			sleep_ms(10);
		outcome = "lost";
	} else if (strcmp(wk->handler, "check_cancel") == 0) {
		int64_t end = mono_ms() + (wk->ms > 0 ? wk->ms : 30000);
		while (mono_ms() < end && !pgc_job_cancelled(job) && !pgc_job_lost(job))
			sleep_ms(5);
		if (pgc_job_cancelled(job))
			outcome = "cancelled";
		else if (pgc_job_lost(job))
			outcome = "lost";
	}
	/* "ok" and "result" complete the job; the worker frees the result, whatever the outcome. */
	if (strcmp(outcome, "lost") == 0 || strcmp(outcome, "cancelled") == 0) {
		res->outcome = PGC_JOB_FAIL;
		snprintf(res->error, sizeof res->error, "%s", outcome);
	} else if (wk->result_json != NULL && (res->result_json = strdup(wk->result_json)) == NULL) {
		res->outcome = PGC_JOB_FAIL;
		snprintf(res->error, sizeof res->error, "out of memory");
		outcome = "failed";
	}
	job_event("job_ended", job, outcome);
	long n = atomic_fetch_add(&wk->handled, 1) + 1;
	if (wk->stop_after > 0 && n == wk->stop_after)
		pgc_worker_stop(wk->w, 30000);
}

static void *waiter_main(void *arg)
{
	work *wk = arg;
	pgc_error err = PGC_ERROR_INIT;
	int rc = pgc_worker_wait(wk->w, &err);
	sb b = { 0 };
	sb_printf(&b, "{\"event\":\"done\",\"handled\":%ld", atomic_load(&wk->handled));
	if (rc != PGC_OK) {
		sb_puts(&b, ",\"error\":{\"kind\":");
		sb_str(&b, kind_of(rc, &err));
		sb_puts(&b, ",\"message\":");
		sb_str(&b, err.message);
		sb_puts(&b, "}");
	}
	sb_puts(&b, "}");
	emit(&b);
	atomic_store(&wk->finished, true);
	return NULL;
}

static void worker_log(pgc_log_level level, const char *message, void *arg)
{
	(void)arg;
	/* PGCOORD_ADAPTER_LOG=debug shows every line, with the monotonic clock of the events. */
	static int all = -1;
	if (all < 0) {
		const char *v = getenv("PGCOORD_ADAPTER_LOG");
		all = v != NULL && strcmp(v, "debug") == 0;
	}
	if (level >= PGC_LOG_WARN || all)
		fprintf(stderr, "adapter_c worker %d [%" PRId64 "]: %s\n", (int)getpid(), mono_ms(), message);
}

static void work_free(work *wk)
{
	if (wk == NULL)
		return;
	pgc_worker_free(wk->w);
	for (size_t i = 0; i < wk->nq; i++)
		free(wk->queues[i]);
	free(wk->error_text);
	free(wk->result_json);
	free(wk);
}

/* Stops the running work (grace_ms for its handlers) and frees it; *handled gets its count. */
static void work_stop(int64_t grace_ms, long *handled)
{
	work *wk = st.work;
	if (wk == NULL)
		return;
	pgc_worker_stop(wk->w, grace_ms);
	pthread_join(wk->waiter, NULL);
	if (handled != NULL)
		*handled = atomic_load(&wk->handled);
	work_free(wk);
	st.work = NULL;
}

static void op_work(const req *r)
{
	bool bad = false;
	if (st.work != NULL && atomic_load(&st.work->finished))
		work_stop(0, NULL);
	if (st.work != NULL) {
		answer_error(r, "usage", NULL, "work is already running: stop it first");
		return;
	}
	if (st.conn == NULL) {
		answer_error(r, "usage", NULL, "not connected: send connect first");
		return;
	}
	work *wk = calloc(1, sizeof *wk);
	if (wk == NULL) {
		answer_error(r, "internal", NULL, "out of memory");
		return;
	}
	const char *one = arg_str(r, "queue", &bad);
	const jm_node *many = arg(r, "queues");
	if (one != NULL)
		wk->queues[wk->nq++] = strdup(one);
	if (many != NULL && many->type == JM_ARRAY) {
		for (const jm_node *c = many->child; c != NULL && wk->nq < 32; c = c->next) {
			if (c->type != JM_STRING)
				bad = true;
			else
				wk->queues[wk->nq++] = strdup(c->str);
		}
	} else if (many != NULL) {
		bad = true;
	}
	const jm_node *h = arg(r, "handler");
	const jm_node *hdo = jm_get(h, "do");
	snprintf(wk->handler, sizeof wk->handler, "%s", hdo != NULL && hdo->type == JM_STRING ? hdo->str : "ok");
	const jm_node *hms = jm_get(h, "ms"), *herr = jm_get(h, "error"), *hres = jm_get(h, "result");
	wk->ms = hms != NULL && hms->is_int ? hms->i : 0;
	wk->error_text = herr != NULL && herr->type == JM_STRING ? strdup(herr->str) : NULL;
	if (strcmp(wk->handler, "result") == 0 && hres != NULL && (wk->result_json = raw_copy(hres)) == NULL)
		bad = true;
	static const char *const handlers[] = { "ok", "fail", "sleep", "hang", "result", "check_cancel" };
	bool known = false;
	for (size_t i = 0; i < sizeof handlers / sizeof handlers[0]; i++)
		known = known || strcmp(wk->handler, handlers[i]) == 0;
	wk->stop_after = (long)arg_int(r, "stop_after", 0, &bad);
	pgc_worker_options o = PGC_WORKER_OPTIONS_INIT;
	o.dsn = st.dsn;
	o.schema = st.schema;
	o.queues = (const char *const *)wk->queues;
	o.n_queues = wk->nq;
	o.concurrency = (int)arg_int(r, "concurrency", 1, &bad);
	o.lease_ms = arg_int(r, "lease_ms", 30000, &bad);
	o.vacuum_dead_tuples = 0;
	o.application_name = "pgcoord/conformance";
	o.log = worker_log;
	if (bad || !known || wk->nq == 0) {
		work_free(wk);
		answer_error(r, "usage", NULL, !known ? "unknown handler" : "bad work arguments");
		return;
	}
	pgc_error err = PGC_ERROR_INIT;
	int rc = pgc_worker_new(&o, handle, wk, &wk->w, &err);
	if (rc == PGC_OK)
		rc = pgc_worker_start(wk->w, &err);
	if (rc != PGC_OK) {
		work_free(wk);
		answer_pgc(r, rc, &err);
		return;
	}
	if (pthread_create(&wk->waiter, NULL, waiter_main, wk) != 0) {
		pgc_worker_stop(wk->w, 0);
		work_free(wk);
		answer_error(r, "internal", NULL, "cannot start a thread");
		return;
	}
	st.work = wk;
	sb b = { 0 };
	ok_begin(&b, r);
	sb_puts(&b, ",\"started\":true}");
	emit(&b);
}

static void op_stop(const req *r)
{
	bool bad = false;
	int64_t grace = arg_int(r, "grace_ms", 5000, &bad);
	long handled = 0;
	bool was = st.work != NULL;
	work_stop(grace, &handled);
	sb b = { 0 };
	ok_begin(&b, r);
	sb_printf(&b, ",\"stopped\":%s,\"handled\":%ld}", was ? "true" : "false", handled);
	emit(&b);
}

/* ---- queue ops ---------------------------------------------------------------------------- */

typedef struct enq_args {
	pgc_queue *q;
	const char *queue, *payload;
	pgc_job_options *o;
	int64_t id;
	bool rollback;
} enq_args;

static int enqueue_body(pgc_conn *conn, void *arg, pgc_error *err)
{
	(void)conn;
	enq_args *a = arg;
	int rc = pgc_queue_enqueue(a->q, a->queue, a->payload, a->o, &a->id, err);
	if (rc != PGC_OK)
		return rc;
	return a->rollback ? PGC_TX_ROLLBACK : 0;
}

static void op_enqueue(const req *r)
{
	pgc_queue *q = need_queue(r);
	if (q == NULL)
		return;
	bool bad = false;
	pgc_job_options o = PGC_JOB_OPTIONS_INIT;
	o.priority = (int)arg_int(r, "priority", 0, &bad);
	o.delay_ms = arg_int(r, "delay_ms", 0, &bad);
	o.run_at = arg_str(r, "run_at", &bad);
	o.unique_key = arg_str(r, "unique_key", &bad);
	o.key = arg_str(r, "key", &bad);
	o.max_attempts = (int)arg_int(r, "max_attempts", 0, &bad);
	o.group = arg_str(r, "group", &bad);
	const char *pol = arg_str(r, "on_dep_failure", &bad);
	if (pol != NULL && strcmp(pol, "run") == 0)
		o.on_dep_failure = PGC_DEP_RUN;
	else if (pol != NULL && strcmp(pol, "cancel") != 0)
		bad = true;
	const jm_node *after = arg(r, "after");
	int64_t *ids = NULL;
	if (after != NULL) {
		if (after->type != JM_ARRAY) {
			bad = true;
		} else if (after->n > 0) {
			ids = calloc(after->n, sizeof *ids);
			size_t i = 0;
			for (const jm_node *c = after->child; c != NULL && ids != NULL; c = c->next) {
				if (!c->is_int)
					bad = true;
				ids[i++] = c->i;
			}
			o.after = ids;
			o.n_after = after->n;
		}
	}
	const char *tx = arg_str(r, "tx", &bad);
	if (tx != NULL && strcmp(tx, "commit") != 0 && strcmp(tx, "rollback") != 0)
		bad = true;
	const jm_node *payload = arg(r, "payload");
	const char *queue = arg_str(r, "queue", &bad);
	if (bad || queue == NULL) {
		free(ids);
		answer_error(r, "usage", NULL, "bad enqueue arguments");
		return;
	}
	char *ptext = payload != NULL ? raw_copy(payload) : strdup("{}");
	enq_args a = { q, queue, ptext, &o, 0, tx != NULL && strcmp(tx, "rollback") == 0 };
	pgc_error err = PGC_ERROR_INIT;
	int rc;
	if (tx != NULL)
		rc = pgc_tx_run(st.conn, NULL, enqueue_body, &a, &err);
	else
		rc = pgc_queue_enqueue(q, queue, ptext, &o, &a.id, &err);
	free(ptext);
	free(ids);
	if (rc < 0) {
		answer_pgc(r, rc, &err);
		return;
	}
	sb b = { 0 };
	ok_begin(&b, r);
	sb_printf(&b, ",\"job_id\":%" PRId64 "}", rc == PGC_TX_ROLLBACK ? 0 : a.id);
	emit(&b);
}

static void op_enqueue_many(const req *r)
{
	pgc_queue *q = need_queue(r);
	if (q == NULL)
		return;
	bool bad = false;
	const char *queue = arg_str(r, "queue", &bad);
	const jm_node *pl = arg(r, "payloads"), *uk = arg(r, "unique_keys");
	if (bad || queue == NULL || pl == NULL || pl->type != JM_ARRAY ||
	    (uk != NULL && (uk->type != JM_ARRAY || uk->n != pl->n))) {
		answer_error(r, "usage", NULL, "bad enqueue_many arguments");
		return;
	}
	size_t n = pl->n;
	char **payloads = calloc(n + 1, sizeof *payloads);
	const char **keys = uk != NULL ? calloc(n + 1, sizeof *keys) : NULL;
	int64_t *ids = calloc(n + 1, sizeof *ids);
	size_t i = 0;
	for (const jm_node *c = pl->child; c != NULL; c = c->next, i++)
		payloads[i] = raw_copy(c);
	i = 0;
	for (const jm_node *c = uk != NULL ? uk->child : NULL; c != NULL; c = c->next, i++)
		keys[i] = c->type == JM_STRING ? c->str : NULL;
	pgc_error err = PGC_ERROR_INIT;
	int rc = pgc_queue_enqueue_many(q, queue, n, (const char *const *)payloads, keys, NULL, ids,
	                                NULL, NULL, &err);
	if (rc != PGC_OK) {
		answer_pgc(r, rc, &err);
	} else {
		sb b = { 0 };
		ok_begin(&b, r);
		sb_puts(&b, ",\"job_ids\":[");
		for (i = 0; i < n; i++)
			sb_printf(&b, "%s%" PRId64, i ? "," : "", ids[i]);
		sb_puts(&b, "]}");
		emit(&b);
	}
	for (i = 0; i < n; i++)
		free(payloads[i]);
	free(payloads);
	free(keys);
	free(ids);
}

static void op_claim(const req *r)
{
	pgc_queue *q = need_queue(r);
	if (q == NULL)
		return;
	bool bad = false;
	const char *queue = arg_str(r, "queue", &bad);
	int max = (int)arg_int(r, "max", 1, &bad);
	int64_t lease = arg_int(r, "lease_ms", 30000, &bad);
	if (bad || queue == NULL) {
		answer_error(r, "usage", NULL, "bad claim arguments");
		return;
	}
	pgc_job *jobs = NULL;
	size_t n = 0;
	pgc_error err = PGC_ERROR_INIT;
	int rc = pgc_queue_claim(q, queue, max, lease, NULL, &jobs, &n, &err);
	if (rc != PGC_OK && rc != PGC_EEMPTY) {
		answer_pgc(r, rc, &err);
		return;
	}
	sb b = { 0 };
	ok_begin(&b, r);
	sb_puts(&b, ",\"jobs\":[");
	for (size_t i = 0; i < n; i++) {
		sb_printf(&b, "%s{\"job_id\":%" PRId64 ",\"token\":%" PRId64 ",\"attempt\":%d,\"payload\":%s,"
		          "\"key\":", i ? "," : "", jobs[i].id, jobs[i].token, jobs[i].attempt,
		          jobs[i].payload);
		sb_str(&b, jobs[i].key);
		sb_puts(&b, "}");
	}
	sb_puts(&b, "]}");
	emit(&b);
	pgc_queue_jobs_free(jobs, n);
}

static bool id_token(const req *r, int64_t *id, int64_t *token)
{
	bool bad = false;
	*id = arg_int(r, "job_id", 0, &bad);
	*token = arg_int(r, "token", 0, &bad);
	if (bad || *id <= 0) {
		answer_error(r, "usage", NULL, "job_id and token must be integers");
		return false;
	}
	return true;
}

static void op_complete(const req *r)
{
	pgc_queue *q = need_queue(r);
	int64_t id, token;
	if (q == NULL || !id_token(r, &id, &token))
		return;
	const jm_node *result = arg(r, "result");
	char *rtext = result != NULL ? raw_copy(result) : NULL;
	if (result != NULL && rtext == NULL) {
		answer_error(r, "internal", NULL, "out of memory");
		return;
	}
	pgc_error err = PGC_ERROR_INIT;
	int rc = pgc_queue_complete_result(q, id, token, rtext, &err);
	free(rtext);
	if (rc != PGC_OK)
		answer_pgc(r, rc, &err);
	else
		answer_ok(r);
}

/* Waits up to wait_ms for the job to finish: its status and result (JSON, null: none). Not
 * finished by then is `conflict` (PGC_ETIMEDOUT). */
static void op_job_result(const req *r)
{
	pgc_queue *q = need_queue(r);
	if (q == NULL)
		return;
	bool bad = false;
	int64_t id = arg_int(r, "job_id", 0, &bad);
	int64_t wait = arg_int(r, "wait_ms", 0, &bad);
	if (bad || id <= 0 || wait < 0) {
		answer_error(r, "usage", NULL, "job_id must be a positive integer, wait_ms one not negative");
		return;
	}
	const char *status = NULL;
	char *result = NULL;
	pgc_error err = PGC_ERROR_INIT;
	int rc = pgc_queue_result_wait(q, id, wait, &status, &result, &err);
	if (rc != PGC_OK) {
		answer_pgc(r, rc, &err);
		free(result);
		return;
	}
	sb b = { 0 };
	ok_begin(&b, r);
	sb_puts(&b, ",\"status\":");
	sb_str(&b, status);
	/* The server's jsonb text is JSON: it goes out as the value it is. */
	sb_puts(&b, ",\"result\":");
	sb_puts(&b, result != NULL ? result : "null");
	sb_puts(&b, "}");
	emit(&b);
	free(result);
}

static void op_fail(const req *r)
{
	pgc_queue *q = need_queue(r);
	int64_t id, token;
	if (q == NULL || !id_token(r, &id, &token))
		return;
	bool bad = false, dead = false;
	const char *text = arg_str(r, "error", &bad);
	int64_t retry_in = arg_int(r, "retry_in_ms", -1, &bad);
	pgc_backoff bo = PGC_BACKOFF_INIT;
	if (retry_in >= 0)
		bo.base_ms = bo.max_ms = retry_in;
	if (bad) {
		answer_error(r, "usage", NULL, "bad fail arguments");
		return;
	}
	pgc_error err = PGC_ERROR_INIT;
	int rc = pgc_queue_fail(q, id, token, text, &bo, &dead, &err);
	if (rc != PGC_OK) {
		answer_pgc(r, rc, &err);
		return;
	}
	sb b = { 0 };
	ok_begin(&b, r);
	sb_printf(&b, ",\"dead\":%s}", dead ? "true" : "false");
	emit(&b);
}

static void op_release(const req *r)
{
	pgc_queue *q = need_queue(r);
	int64_t id, token;
	if (q == NULL || !id_token(r, &id, &token))
		return;
	pgc_error err = PGC_ERROR_INIT;
	int rc = pgc_queue_release(q, 1, &id, &token, true, &err);
	if (rc != PGC_OK)
		answer_pgc(r, rc, &err);
	else
		answer_ok(r);
}

static void op_renew(const req *r)
{
	pgc_queue *q = need_queue(r);
	if (q == NULL)
		return;
	bool bad = false;
	const jm_node *ji = arg(r, "job_ids"), *jt = arg(r, "tokens");
	int64_t lease = arg_int(r, "lease_ms", 30000, &bad);
	if (bad || ji == NULL || jt == NULL || ji->type != JM_ARRAY || jt->type != JM_ARRAY ||
	    ji->n != jt->n || ji->n == 0) {
		answer_error(r, "usage", NULL, "job_ids and tokens must be lists of the same length");
		return;
	}
	size_t n = ji->n;
	int64_t *ids = calloc(n, sizeof *ids), *tokens = calloc(n, sizeof *tokens);
	bool *lost = calloc(n, sizeof *lost);
	const jm_node *a = ji->child, *t = jt->child;
	for (size_t i = 0; i < n; i++, a = a->next, t = t->next) {
		ids[i] = a->i;
		tokens[i] = t->i;
	}
	pgc_error err = PGC_ERROR_INIT;
	int rc = pgc_queue_heartbeat(q, n, ids, tokens, lease, lost, &err);
	if (rc != PGC_OK) {
		answer_pgc(r, rc, &err);
	} else {
		/* A lost job is either cancelled or claimed by someone else: the job tells which. */
		sb b = { 0 }, c = { 0 };
		ok_begin(&b, r);
		sb_puts(&b, ",\"lost\":[");
		sb_puts(&c, "");
		int nl = 0, nc = 0;
		for (size_t i = 0; i < n; i++) {
			if (!lost[i])
				continue;
			sb_printf(&b, "%s%" PRId64, nl++ ? "," : "", ids[i]);
			pgc_job_info *info = NULL;
			pgc_error e2 = PGC_ERROR_INIT;
			if (pgc_queue_show(q, ids[i], &info, &e2) == PGC_OK && strcmp(info->status, "cancelled") == 0)
				sb_printf(&c, "%s%" PRId64, nc++ ? "," : "", ids[i]);
			pgc_free(info);
		}
		sb_printf(&b, "],\"cancelled\":[%s]}", c.s);
		free(c.s);
		emit(&b);
	}
	free(ids);
	free(tokens);
	free(lost);
}

static void op_cancel(const req *r)
{
	pgc_queue *q = need_queue(r);
	if (q == NULL)
		return;
	bool bad = false, was = false;
	int64_t id = arg_int(r, "job_id", 0, &bad);
	pgc_error err = PGC_ERROR_INIT;
	int rc = bad ? PGC_EUSAGE : pgc_queue_cancel_job(q, id, &was, &err);
	if (rc != PGC_OK) {
		answer_pgc(r, rc, &err);
		return;
	}
	sb b = { 0 };
	ok_begin(&b, r);
	sb_printf(&b, ",\"was_running\":%s}", was ? "true" : "false");
	emit(&b);
}

static void op_reap(const req *r)
{
	pgc_queue *q = need_queue(r);
	if (q == NULL)
		return;
	pgc_reap_result out = { 0 };
	pgc_error err = PGC_ERROR_INIT;
	int rc = pgc_queue_reap(q, &out, &err);
	if (rc != PGC_OK) {
		answer_pgc(r, rc, &err);
		return;
	}
	sb b = { 0 };
	ok_begin(&b, r);
	sb_printf(&b, ",\"returned\":%ld,\"failed\":%ld}", out.returned, out.dead);
	emit(&b);
}

static void op_job(const req *r)
{
	pgc_queue *q = need_queue(r);
	if (q == NULL)
		return;
	bool bad = false;
	int64_t id = arg_int(r, "job_id", 0, &bad);
	pgc_job_info *info = NULL;
	pgc_error err = PGC_ERROR_INIT;
	int rc = bad ? PGC_EUSAGE : pgc_queue_show(q, id, &info, &err);
	if (rc != PGC_OK) {
		answer_pgc(r, rc, &err);
		return;
	}
	sb b = { 0 };
	ok_begin(&b, r);
	sb_puts(&b, ",\"status\":");
	sb_str(&b, info->status);
	sb_printf(&b, ",\"attempts\":%d}", info->attempts);
	emit(&b);
	pgc_free(info);
}

static bool arg_rate(const req *r, const char *name, pgc_rate *out, bool *bad)
{
	const jm_node *n = arg(r, name);
	if (n == NULL)
		return false;
	const jm_node *rn = jm_get(n, "n"), *rp = jm_get(n, "per_ms");
	if (rn == NULL || rp == NULL || !rn->is_int || !rp->is_int) {
		*bad = true;
		return false;
	}
	out->n = (int)rn->i;
	out->per_ms = rp->i;
	return true;
}

static void op_flow_set(const req *r)
{
	pgc_queue *q = need_queue(r);
	if (q == NULL)
		return;
	bool bad = false;
	const char *queue = arg_str(r, "queue", &bad);
	const char *key = arg_str(r, "key", &bad);
	pgc_error err = PGC_ERROR_INIT;
	int rc;
	if (key != NULL) {
		pgc_queue_key_settings ks = PGC_QUEUE_KEY_UNCHANGED;
		ks.limit = (int)arg_int(r, "key_limit", -1, &bad);
		arg_rate(r, "key_rate", &ks.rate, &bad);
		rc = bad || queue == NULL ? PGC_EUSAGE : pgc_queue_key_set(q, queue, key, &ks, &err);
	} else {
		pgc_queue_flow f = PGC_QUEUE_FLOW_UNCHANGED;
		f.key_limit = (int)arg_int(r, "key_limit", -1, &bad);
		arg_rate(r, "rate", &f.rate, &bad);
		arg_rate(r, "key_rate", &f.key_rate, &bad);
		rc = bad || queue == NULL ? PGC_EUSAGE : pgc_queue_flow_set(q, queue, &f, &err);
	}
	if (rc != PGC_OK) {
		if (rc == PGC_EUSAGE && err.message[0] == '\0')
			snprintf(err.message, sizeof err.message, "bad flow_set arguments");
		answer_pgc(r, rc, &err);
	} else {
		answer_ok(r);
	}
}

/* ---- locks, leases, fencing ---------------------------------------------------------------- */

static void op_lock_key(const req *r)
{
	bool bad = false;
	const char *name = arg_str(r, "name", &bad);
	pgc_key k;
	pgc_error err = PGC_ERROR_INIT;
	int rc = bad ? PGC_EUSAGE : pgc_key_from_name(name, &k, &err);
	if (rc != PGC_OK) {
		answer_pgc(r, rc, &err);
		return;
	}
	sb b = { 0 };
	ok_begin(&b, r);
	sb_printf(&b, ",\"key\":%" PRId64 "}", k.id);
	emit(&b);
}

/* lock_holders: who holds or waits for the name's key, through pgc_lock_holders(). */
static void op_lock_holders(const req *r)
{
	if (!need_conn(r))
		return;
	bool bad = false;
	const char *name = arg_str(r, "name", &bad);
	if (bad || name == NULL) {
		answer_error(r, "usage", NULL, "name must be a string");
		return;
	}
	pgc_key k;
	pgc_error err = PGC_ERROR_INIT;
	pgc_lock_holder *h = NULL;
	size_t n = 0;
	int rc = pgc_key_from_name(name, &k, &err);
	if (rc == PGC_OK)
		rc = pgc_lock_holders(st.conn, &k, &h, &n, &err);
	if (rc != PGC_OK) {
		answer_pgc(r, rc, &err);
		return;
	}
	sb b = { 0 };
	ok_begin(&b, r);
	sb_printf(&b, ",\"holders\":[");
	for (size_t i = 0; i < n; i++)
		sb_printf(&b, "%s{\"pid\":%d,\"mode\":\"%s\",\"granted\":%s,\"is_self\":%s}", i ? "," : "",
		          h[i].pid, h[i].shared ? "ShareLock" : "ExclusiveLock", h[i].granted ? "true" : "false",
		          h[i].is_self ? "true" : "false");
	sb_printf(&b, "]}");
	pgc_free(h);
	emit(&b);
}

/* The distance from the nearest root along blocked_by, as the protocol's blocking_forest()
 * defines depth; -1 when no root leads to s (a wait cycle) within the snapshot's size. */
static long forest_depth(const pgc_diag_snapshot *snap, const pgc_diag_session *s, size_t left)
{
	if (s->root)
		return 0;
	if (left == 0 || s->nblocked_by == 0)
		return -1;
	long best = -1;
	for (size_t i = 0; i < s->nblocked_by; i++) {
		const pgc_diag_session *up = pgc_diag_session_find(snap, s->blocked_by[i]);
		long d = up != NULL ? forest_depth(snap, up, left - 1) : -1;
		if (d >= 0 && (best < 0 || d + 1 < best))
			best = d + 1;
	}
	return best;
}

static void pid_list(sb *b, const char *field, const int *pids, size_t n)
{
	sb_printf(b, ",\"%s\":[", field);
	for (size_t i = 0; i < n; i++)
		sb_printf(b, "%s%d", i ? "," : "", pids[i]);
	sb_printf(b, "]");
}

/* blocking_forest: the session pid as a diagnostics snapshot sees it; a session is in the
 * forest when it waits for a lock or blocks one. */
static void op_blocking_forest(const req *r)
{
	if (!need_conn(r))
		return;
	bool bad = false;
	int64_t pid = arg_int(r, "pid", -1, &bad);
	if (bad || pid < 0 || pid > INT32_MAX) {
		answer_error(r, "usage", NULL, "pid must be a process id");
		return;
	}
	pgc_diag_options o = PGC_DIAG_OPTIONS_INIT;
	o.schema = st.schema;
	pgc_diag_snapshot *snap = NULL;
	pgc_error err = PGC_ERROR_INIT;
	int rc = pgc_diag_snapshot_take(st.conn, &o, &snap, &err);
	if (rc != PGC_OK) {
		answer_pgc(r, rc, &err);
		return;
	}
	const pgc_diag_session *s = pgc_diag_session_find(snap, (int)pid);
	bool found = s != NULL && (s->nblocked_by > 0 || s->nblocks > 0);
	sb b = { 0 };
	ok_begin(&b, r);
	sb_printf(&b, ",\"found\":%s", found ? "true" : "false");
	if (found) {
		pid_list(&b, "blocked_by", s->blocked_by, s->nblocked_by);
		pid_list(&b, "blocks", s->blocks, s->nblocks);
		long depth = forest_depth(snap, s, snap->nsessions);
		if (depth < 0)
			sb_printf(&b, ",\"depth\":null");
		else
			sb_printf(&b, ",\"depth\":%ld", depth);
		sb_printf(&b, ",\"root\":%s,\"in_cycle\":%s,\"blocks_total\":%zu", s->root ? "true" : "false",
		          s->cycle != 0 ? "true" : "false", s->blocks_total);
	}
	sb_printf(&b, "}");
	pgc_diag_snapshot_free(snap);
	emit(&b);
}

static void op_lock(const req *r)
{
	if (!need_conn(r))
		return;
	bool bad = false;
	const char *name = arg_str(r, "name", &bad);
	const char *mode = arg_str(r, "mode", &bad);
	int64_t wait = arg_int(r, "wait_ms", 0, &bad);
	if (bad || name == NULL || wait < 0 ||
	    (mode != NULL && strcmp(mode, "session") != 0 && strcmp(mode, "xact") != 0)) {
		answer_error(r, "usage", NULL, "bad lock arguments");
		return;
	}
	pgc_key k;
	pgc_error err = PGC_ERROR_INIT;
	int rc = pgc_key_from_name(name, &k, &err);
	if (rc != PGC_OK) {
		answer_pgc(r, rc, &err);
		return;
	}
	pgc_lock_options o = PGC_LOCK_OPTIONS_INIT;
	o.schema = st.schema;
	o.timeout_ms = wait;
	o.flags = wait == 0 ? PGC_LOCK_TRY : 0;
	if (mode != NULL && strcmp(mode, "xact") == 0)
		o.flags |= PGC_LOCK_HOLD_XACT;
	pgc_lock *lock = NULL;
	rc = pgc_lock_acquire_ex(st.conn, &k, &o, &lock, &err);
	if (rc != PGC_OK && rc != PGC_EBUSY && rc != PGC_ETIMEDOUT) {
		answer_pgc(r, rc, &err);
		return;
	}
	if (rc == PGC_OK) {
		held_lock *more = realloc(st.locks, (st.nlocks + 1) * sizeof *more);
		if (more == NULL) {
			answer_error(r, "internal", NULL, "out of memory");
			return;
		}
		st.locks = more;
		st.locks[st.nlocks].name = strdup(name);
		st.locks[st.nlocks++].lock = lock;
	}
	sb b = { 0 };
	ok_begin(&b, r);
	sb_printf(&b, ",\"acquired\":%s}", rc == PGC_OK ? "true" : "false");
	emit(&b);
}

static void op_unlock(const req *r)
{
	bool bad = false;
	const char *name = arg_str(r, "name", &bad);
	if (bad || name == NULL) {
		answer_error(r, "usage", NULL, "name must be a string");
		return;
	}
	int rc = PGC_ENOTHELD;
	pgc_error err = PGC_ERROR_INIT;
	for (size_t i = st.nlocks; i-- > 0;) {
		if (strcmp(st.locks[i].name, name) != 0)
			continue;
		rc = pgc_lock_release(st.locks[i].lock, &err);
		free(st.locks[i].name);
		st.locks[i] = st.locks[--st.nlocks];
		break;
	}
	if (rc != PGC_OK && rc != PGC_ENOTHELD) {
		answer_pgc(r, rc, &err);
		return;
	}
	sb b = { 0 };
	ok_begin(&b, r);
	sb_printf(&b, ",\"released\":%s}", rc == PGC_OK ? "true" : "false");
	emit(&b);
}

static void op_lease(const req *r, const char *op)
{
	if (!need_conn(r))
		return;
	bool bad = false;
	const char *name = arg_str(r, "name", &bad);
	const char *holder = arg_str(r, "holder", &bad);
	int64_t ttl = arg_int(r, "ttl_ms", 0, &bad), token = arg_int(r, "token", 0, &bad);
	if (bad || name == NULL) {
		answer_error(r, "usage", NULL, "bad lease arguments");
		return;
	}
	pgc_lease_options o = PGC_LEASE_OPTIONS_INIT;
	o.schema = st.schema;
	pgc_error err = PGC_ERROR_INIT;
	pgc_lease l;
	memset(&l, 0, sizeof l);
	int rc;
	if (strcmp(op, "lease_acquire") == 0) {
		rc = pgc_lease_acquire(st.conn, name, holder ? holder : "", ttl, &o, &l, &err);
		if (rc != PGC_OK && rc != PGC_EBUSY) {
			answer_pgc(r, rc, &err);
			return;
		}
		sb b = { 0 };
		ok_begin(&b, r);
		if (rc == PGC_OK)
			sb_printf(&b, ",\"acquired\":true,\"token\":%" PRId64 "}", l.token);
		else
			sb_puts(&b, ",\"acquired\":false,\"token\":null}");
		emit(&b);
		return;
	}
	if (strcmp(op, "lease_renew") == 0) {
		snprintf(l.name, sizeof l.name, "%s", name);
		l.token = token;
		l.ttl_ms = ttl;
		rc = pgc_lease_renew(st.conn, &l, &o, &err);
	} else if (strcmp(op, "lease_release") == 0) {
		rc = pgc_lease_release(st.conn, name, token, &o, &err);
	} else {
		rc = pgc_fence_check(st.conn, name, token, &o, &err);
	}
	if (rc != PGC_OK)
		answer_pgc(r, rc, &err);
	else
		answer_ok(r);
}

/* ---- transactions and SQL ------------------------------------------------------------------ */

static int tx_body(pgc_conn *conn, void *arg, pgc_error *err)
{
	const jm_node *stmts = arg;
	for (const jm_node *s = stmts->child; s != NULL; s = s->next) {
		int rc = pgc_exec(conn, s->str, err);
		if (rc != PGC_OK)
			return rc;
	}
	return 0;
}

static void op_tx(const req *r)
{
	if (!need_conn(r))
		return;
	bool bad = false;
	const jm_node *stmts = arg(r, "statements");
	const char *iso = arg_str(r, "isolation", &bad);
	pgc_tx_options o = PGC_TX_OPTIONS_INIT;
	pgc_tx_stats stats;
	memset(&stats, 0, sizeof stats);
	o.stats = &stats;
	o.max_attempts = (int)arg_int(r, "max_attempts", 10, &bad);
	if (iso != NULL && !pgc_isolation_parse(iso, &o.isolation))
		bad = true;
	if (stmts != NULL && stmts->type == JM_ARRAY)
		for (const jm_node *s = stmts->child; s != NULL; s = s->next)
			bad = bad || s->type != JM_STRING;
	if (bad || stmts == NULL || stmts->type != JM_ARRAY) {
		answer_error(r, "usage", NULL, "bad tx arguments");
		return;
	}
	pgc_error err = PGC_ERROR_INIT;
	int rc = pgc_tx_run(st.conn, &o, tx_body, (void *)stmts, &err);
	if (rc < 0) {
		answer_pgc(r, rc, &err);
		return;
	}
	sb b = { 0 };
	ok_begin(&b, r);
	sb_printf(&b, ",\"attempts\":%d}", stats.attempts);
	emit(&b);
}

static void op_sql(const req *r)
{
	if (!need_conn(r))
		return;
	bool bad = false;
	const char *stmt = arg_str(r, "statement", &bad);
	if (bad || stmt == NULL) {
		answer_error(r, "usage", NULL, "statement must be a string");
		return;
	}
	/* The library runs its session in nonblocking mode; one blocking statement here is enough
	 * for a check, and the mode is put back. */
	PGconn *pg = pgc_conn_pg(st.conn);
	if (pg == NULL) {
		answer_error(r, "lost", NULL, "no session");
		return;
	}
	(void)PQsetnonblocking(pg, 0);
	PGresult *res = PQexec(pg, stmt);
	(void)PQsetnonblocking(pg, 1);
	ExecStatusType s = PQresultStatus(res);
	if (s != PGRES_TUPLES_OK && s != PGRES_COMMAND_OK) {
		const char *state = PQresultErrorField(res, PG_DIAG_SQLSTATE);
		const char *msg = PQresultErrorField(res, PG_DIAG_MESSAGE_PRIMARY);
		answer_error(r, state == NULL ? "lost" : "sql", state, msg ? msg : PQerrorMessage(pg));
		PQclear(res);
		return;
	}
	sb b = { 0 };
	ok_begin(&b, r);
	sb_puts(&b, ",\"rows\":[");
	for (int i = 0; i < PQntuples(res); i++) {
		sb_puts(&b, i ? ",[" : "[");
		for (int j = 0; j < PQnfields(res); j++) {
			if (j)
				sb_puts(&b, ",");
			sb_str(&b, PQgetisnull(res, i, j) ? NULL : PQgetvalue(res, i, j));
		}
		sb_puts(&b, "]");
	}
	sb_puts(&b, "]}");
	emit(&b);
	PQclear(res);
}

/* ---- session ------------------------------------------------------------------------------- */

static void op_hello(const req *r)
{
	sb b = { 0 };
	ok_begin(&b, r);
	sb_printf(&b, ",\"language\":\"c\",\"client_version\":\"%s\",\"protocol\":%d,\"features\":[",
	          pgc_version(), PROTOCOL_VERSION);
	for (size_t i = 0; i < sizeof FEATURES / sizeof FEATURES[0]; i++)
		sb_printf(&b, "%s\"%s\"", i ? "," : "", FEATURES[i]);
	sb_puts(&b, "]}");
	emit(&b);
}

static void close_session(void)
{
	for (size_t i = 0; i < st.nlocks; i++)
		free(st.locks[i].name);
	free(st.locks);
	st.locks = NULL;
	st.nlocks = 0;
	pgc_queue_close(st.q);
	st.q = NULL;
	pgc_conn_close(st.conn);
	st.conn = NULL;
}

static void op_connect(const req *r)
{
	bool bad = false;
	const char *dsn = arg_str(r, "dsn", &bad), *schema = arg_str(r, "schema", &bad);
	if (bad || dsn == NULL || schema == NULL) {
		answer_error(r, "usage", NULL, "dsn and schema must be strings");
		return;
	}
	close_session();
	free(st.dsn);
	free(st.schema);
	st.dsn = strdup(dsn);
	st.schema = strdup(schema);
	pgc_conn_options o = PGC_CONN_OPTIONS_INIT;
	o.application_name = "pgcoord/conformance";
	pgc_error err = PGC_ERROR_INIT;
	int version = 0;
	int rc = pgc_connect(dsn, &o, &st.conn, &err);
	if (rc == PGC_OK)
		rc = pgc_schema_version(st.conn, schema, &version, &err);
	if (rc != PGC_OK) {
		answer_pgc(r, rc, &err);
		return;
	}
	if (version > pgc_schema_latest()) {
		char msg[128];
		snprintf(msg, sizeof msg, "schema version %d is newer than this client's %d", version,
		         pgc_schema_latest());
		answer_error(r, "schema", NULL, msg);
		return;
	}
	sb b = { 0 };
	ok_begin(&b, r);
	sb_printf(&b, ",\"schema_version\":%d}", version);
	emit(&b);
}

static void op_init(const req *r)
{
	if (!need_conn(r))
		return;
	int applied = 0, version = 0;
	pgc_error err = PGC_ERROR_INIT;
	int rc = pgc_schema_init(st.conn, st.schema, &applied, &version, &err);
	if (rc != PGC_OK) {
		answer_pgc(r, rc, &err);
		return;
	}
	sb b = { 0 };
	ok_begin(&b, r);
	sb_printf(&b, ",\"applied\":%d,\"version\":%d}", applied, version);
	emit(&b);
}

static void dispatch(const req *r, const char *op)
{
	if (strcmp(op, "hello") == 0) op_hello(r);
	else if (strcmp(op, "connect") == 0) op_connect(r);
	else if (strcmp(op, "init") == 0) op_init(r);
	else if (strcmp(op, "enqueue") == 0) op_enqueue(r);
	else if (strcmp(op, "enqueue_many") == 0) op_enqueue_many(r);
	else if (strcmp(op, "claim") == 0) op_claim(r);
	else if (strcmp(op, "complete") == 0) op_complete(r);
	else if (strcmp(op, "fail") == 0) op_fail(r);
	else if (strcmp(op, "release") == 0) op_release(r);
	else if (strcmp(op, "renew") == 0) op_renew(r);
	else if (strcmp(op, "cancel") == 0) op_cancel(r);
	else if (strcmp(op, "reap") == 0) op_reap(r);
	else if (strcmp(op, "job") == 0) op_job(r);
	else if (strcmp(op, "job_result") == 0) op_job_result(r);
	else if (strcmp(op, "flow_set") == 0) op_flow_set(r);
	else if (strcmp(op, "work") == 0) op_work(r);
	else if (strcmp(op, "stop") == 0) op_stop(r);
	else if (strcmp(op, "lock") == 0) op_lock(r);
	else if (strcmp(op, "unlock") == 0) op_unlock(r);
	else if (strcmp(op, "lock_key") == 0) op_lock_key(r);
	else if (strcmp(op, "lock_holders") == 0) op_lock_holders(r);
	else if (strcmp(op, "blocking_forest") == 0) op_blocking_forest(r);
	else if (strncmp(op, "lease_", 6) == 0 || strcmp(op, "fence_check") == 0) {
		if (strcmp(op, "lease_acquire") == 0 || strcmp(op, "lease_renew") == 0 ||
		    strcmp(op, "lease_release") == 0 || strcmp(op, "fence_check") == 0)
			op_lease(r, op);
		else
			answer_error(r, "usage", NULL, "unknown op");
	} else if (strcmp(op, "tx") == 0) op_tx(r);
	else if (strcmp(op, "sql") == 0) op_sql(r);
	else if (strcmp(op, "kill") == 0) {
		pthread_mutex_lock(&out_mu);
		fflush(stdout);
		kill(getpid(), SIGKILL);
	} else if (strcmp(op, "quit") == 0) {
		work_stop(0, NULL);
		answer_ok(r);
		close_session();
		exit(0);
	} else {
		answer_error(r, "usage", NULL, "unknown op");
	}
}

int main(void)
{
	char *line = NULL;
	size_t cap = 0;
	ssize_t n;
	signal(SIGPIPE, SIG_IGN);
	while ((n = getline(&line, &cap, stdin)) >= 0) {
		while (n > 0 && (line[n - 1] == '\n' || line[n - 1] == '\r'))
			line[--n] = '\0';
		if (n == 0)
			continue;
		char msg[128] = "";
		jm_node *root = jm_parse(line, (size_t)n, msg, sizeof msg);
		req r = { root, "null" };
		const jm_node *id = jm_get(root, "id"), *op = jm_get(root, "op");
		if (id != NULL && id->type == JM_NUMBER && id->raw_len < sizeof r.id)
			snprintf(r.id, sizeof r.id, "%.*s", (int)id->raw_len, id->raw);
		if (root == NULL)
			answer_error(&r, "usage", NULL, msg);
		else if (op == NULL || op->type != JM_STRING)
			answer_error(&r, "usage", NULL, "a request needs an op");
		else
			dispatch(&r, op->str);
		jm_free(root);
	}
	/* The runner is gone: stop at once and leave nothing behind. */
	work_stop(0, NULL);
	close_session();
	free(line);
	free(st.dsn);
	free(st.schema);
	return 0;
}

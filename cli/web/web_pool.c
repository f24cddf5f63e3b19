/* web_pool.c - pgcoord web's sessions: a few, each used by one request at a time
 *
 * Every session is bounded: statement_timeout for each statement on the server, the
 * connection layer's call timeout on the client; without --allow-actions it is read-only as
 * well. A session that was lost (a server restart, a terminated backend) is closed and opened
 * again by the next request that needs one, so the dashboard follows the server back. */
#include <errno.h>
#include <string.h>
#include <time.h>

#include "web.h"

static void slot_close(web_slot *s)
{
	pgc_queue_close(s->q);
	pgc_conn_close(s->conn);
	s->q = NULL;
	s->conn = NULL;
}

static int slot_open(web_server *srv, web_slot *s, pgc_error *err)
{
	pgc_conn_options co = PGC_CONN_OPTIONS_INIT;
	co.application_name = "pgcoord/web";
	co.connect_timeout_s = 5;
	co.call_timeout_ms = WEB_STATEMENT_MS + 3000;
	int rc = pgc_connect(srv->dsn, &co, &s->conn, err);
	if (rc != PGC_OK)
		return rc;
	/* Set for the session: every statement the dashboard sends is bounded by the server,
	 * whatever the role or the database say. JIT is off: the capped counts are many small
	 * index scans whose summed estimate passes jit_above_cost, and compiling them took far
	 * longer (100 to 600 ms) than running them (a few ms). */
	rc = pgc_exec(s->conn, srv->allow_actions
	              ? "SET statement_timeout = '2s'; SET lock_timeout = '1s';"
	                " SET idle_in_transaction_session_timeout = '10s'; SET jit = off"
	              : "SET statement_timeout = '2s'; SET lock_timeout = '1s';"
	                " SET idle_in_transaction_session_timeout = '10s'; SET jit = off;"
	                " SET default_transaction_read_only = on", err);
	if (rc != PGC_OK) {
		slot_close(s);
		return rc;
	}
	/* A role that may not read the queue tables still gets the panels that need no queue
	 * handle: its requests for the others say what to grant (web_slot_queue). */
	pgc_error qerr;
	if (web_slot_queue(srv, s, &qerr) != PGC_OK && qerr.code != PGC_ESQL && qerr.code != PGC_ENOSCHEMA) {
		*err = qerr;
		slot_close(s);
		return qerr.code;
	}
	return PGC_OK;
}

int web_slot_queue(web_server *srv, web_slot *s, pgc_error *err)
{
	pgc_error_clear(err);
	if (s->q != NULL)
		return PGC_OK;
	pgc_queue_options qo = PGC_QUEUE_OPTIONS_INIT;
	qo.schema = srv->schema;
	qo.prepare = false;
	return pgc_queue_open(s->conn, &qo, &s->q, err);
}

web_slot *web_pool_get(web_server *srv, pgc_error *err)
{
	struct timespec until;
	clock_gettime(CLOCK_REALTIME, &until);
	until.tv_sec += 5;
	pthread_mutex_lock(&srv->mu);
	web_slot *s = NULL;
	for (;;) {
		for (int i = 0; i < WEB_POOL_SIZE && s == NULL; i++)
			if (!srv->slots[i].busy)
				s = &srv->slots[i];
		if (s != NULL || pthread_cond_timedwait(&srv->cv, &srv->mu, &until) == ETIMEDOUT)
			break;
	}
	if (s != NULL)
		s->busy = true;
	pthread_mutex_unlock(&srv->mu);
	if (s == NULL) {
		pgc_error_clear(err);
		err->code = PGC_ETIMEDOUT;
		err->klass = PGC_CLASS_RETRY_LATER;
		snprintf(err->message, sizeof err->message, "every database session stayed busy for 5 s");
		return NULL;
	}
	/* A session the server ended announces it on its socket: notice that without a round
	 * trip and open a new one. */
	if (s->conn != NULL && pgc_conn_check(s->conn, 0, err) != PGC_OK)
		slot_close(s);
	if (s->conn == NULL && slot_open(srv, s, err) != PGC_OK) {
		web_pool_put(srv, s, NULL);
		return NULL;
	}
	return s;
}

void web_pool_put(web_server *srv, web_slot *s, const pgc_error *err)
{
	if (err != NULL && (err->code == PGC_ECONNLOST || err->code == PGC_ETIMEDOUT ||
	                    err->code == PGC_ECONNECT))
		slot_close(s);
	pthread_mutex_lock(&srv->mu);
	s->busy = false;
	pthread_cond_signal(&srv->cv);
	pthread_mutex_unlock(&srv->mu);
}

void web_pool_close(web_server *srv)
{
	for (int i = 0; i < WEB_POOL_SIZE; i++)
		slot_close(&srv->slots[i]);
}

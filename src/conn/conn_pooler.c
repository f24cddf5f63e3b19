/* conn_pooler.c - is a pooler between us and the server, and which kind
 *
 * PgBouncer and the other poolers give each client a backend pid of their own in the
 * connection's BackendKeyData, so a session whose pid as libpq learnt it equals
 * pg_backend_pid() is direct; that costs one round trip. Otherwise (or when asked to be
 * thorough) a second session like this one opens a transaction, and this session asks for its
 * pid again while that transaction is open. Through a transaction-mode pooler the statement
 * either waits for the other client's transaction to end (the pool is exhausted), or runs on
 * another backend than before, or on the very backend the other client was given; a
 * session-mode pool keeps it where it was. A pooler that refuses BEGIN is in statement mode.
 * Those signs are fast but may all be missed when other clients share the pool at the same
 * moment; when none shows, the last test decides: this session LISTENs and the other one
 * notifies it. A session that keeps its backend hears the notification at once; through a
 * transaction-mode pooler the LISTEN ran on a server session this client no longer has, and
 * the notification never comes. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "conn_priv.h"

const char *pgc_pooler_mode_name(pgc_pooler_mode mode)
{
	switch (mode) {
	case PGC_POOLER_UNKNOWN: return "unknown";
	case PGC_POOLER_NONE: return "none";
	case PGC_POOLER_SESSION: return "session";
	case PGC_POOLER_TRANSACTION: return "transaction";
	case PGC_POOLER_STATEMENT: return "statement";
	}
	return "unknown";
}

/* pg_backend_pid() on c, or -1 with err filled. */
static long long backend_pid(pgc_conn *c, int *rc, pgc_error *err)
{
	PGresult *r = pgc__exec(c, "SELECT pg_catalog.pg_backend_pid()", 0, NULL, rc, err);
	if (r == NULL)
		return -1;
	long long pid = PQntuples(r) == 1 ? atoll(PQgetvalue(r, 0, 0)) : -1;
	PQclear(r);
	if (pid < 0)
		*rc = pgc__err(err, PGC_EINTERNAL, "pg_backend_pid() returned no row");
	return pid;
}

/* LISTEN or UNLISTEN on the probe's channel (a name of digits and underscores). */
static int listen_cmd(pgc_conn *c, const char *verb, const char *channel, pgc_error *err)
{
	char sql[128];
	snprintf(sql, sizeof sql, "%s %s", verb, channel);
	return pgc__command(c, sql, err);
}

/* Whether a notification sent from other reaches c's LISTEN within wait_ms. */
static int notify_reaches(pgc_conn *c, pgc_conn *other, int wait_ms, bool *heard, pgc_error *err)
{
	char channel[64];
	snprintf(channel, sizeof channel, "pgcoord_pooler_probe_%u_%u", (unsigned)c->backend_pid, (unsigned)getpid());
	*heard = false;
	int rc = listen_cmd(c, "LISTEN", channel, err);
	if (rc != PGC_OK)
		return rc;
	const char *v[1] = { channel };
	PGresult *r = pgc__exec(other, "SELECT pg_catalog.pg_notify($1, '')", 1, v, &rc, err);
	if (r == NULL) {
		pgc_error ignore;
		(void)listen_cmd(c, "UNLISTEN", channel, &ignore);
		return rc;
	}
	PQclear(r);
	int64_t end = pgc__now_ms() + wait_ms;
	for (bool consume = true;; consume = false) {
		PGnotify *n;
		while ((n = pgc__notify(c, consume)) != NULL) {
			*heard |= strcmp(n->relname, channel) == 0;
			PQfreemem(n);
			consume = false;
		}
		int64_t left = end - pgc__now_ms();
		if (*heard || left <= 0 || pgc__wait_input(c, -1, left) == PGC__WAIT_LOST)
			break;
	}
	/* Whatever came, stop listening; a notification that arrives later is dropped. */
	rc = listen_cmd(c, "UNLISTEN", channel, err);
	PGnotify *n;
	while ((n = pgc__notify(c, false)) != NULL)
		PQfreemem(n);
	return rc;
}

/* The second half of the probe: c's pid while another client's transaction is open. */
static int probe_with_second_session(pgc_conn *c, pgc_conn *other, long long pid1, int wait_ms,
                                     pgc_pooler_info *p, pgc_error *err)
{
	int rc;
	pgc_error perr = PGC_ERROR_INIT;
	if (pgc__command(other, "BEGIN", &perr) != PGC_OK) {
		p->mode = PGC_POOLER_STATEMENT;
		snprintf(p->why, sizeof p->why, "BEGIN was refused: %s", perr.message);
		return PGC_OK;
	}
	long long other_pid = backend_pid(other, &rc, &perr);
	if (other_pid < 0) {
		(void)pgc__rollback(other);
		p->mode = PGC_POOLER_UNKNOWN;
		snprintf(p->why, sizeof p->why, "the second session failed: %s", perr.message);
		return PGC_OK;
	}
	rc = pgc__send(c, "SELECT pg_catalog.pg_backend_pid()", 0, NULL, NULL, err);
	if (rc != PGC_OK) {
		(void)pgc__rollback(other);
		return rc;
	}
	/* A direct session answers at once; one that waits is queued behind the other client's
	 * server connection. */
	bool queued = false;
	int64_t end = pgc__now_ms() + wait_ms;
	for (;;) {
		int ready = pgc__ready(c);
		if (ready != 0)
			break;
		int64_t left = end - pgc__now_ms();
		if (left <= 0) {
			queued = true;
			break;
		}
		if (pgc__wait_input(c, -1, left) == PGC__WAIT_LOST)
			break;
	}
	pgc_error cerr;
	(void)pgc__command(other, "COMMIT", &cerr);
	pgc__call call = pgc__bound(10000 + wait_ms, -1);
	PGresult *r = pgc__await(c, &call, &rc, err);
	if (r == NULL) {
		if (rc == PGC_ETIMEDOUT)
			pgc__err(err, PGC_ETIMEDOUT, "the server (or a pooler) did not answer SELECT pg_backend_pid() within %d ms",
			         wait_ms + 10000);
		return rc;
	}
	long long pid2 = PQntuples(r) == 1 ? atoll(PQgetvalue(r, 0, 0)) : -1;
	PQclear(r);
	if (queued)
		snprintf(p->why, sizeof p->why,
		         "a statement outside any transaction waited until another client's transaction ended (pid %lld, then %lld)",
		         pid1, pid2);
	else if (pid2 != pid1)
		snprintf(p->why, sizeof p->why,
		         "the backend pid changed between two statements outside a transaction (%lld, then %lld)", pid1,
		         pid2);
	else if (other_pid == pid1)
		snprintf(p->why, sizeof p->why, "another client connection was given this connection's backend (pid %lld)",
		         pid1);
	if (queued || pid2 != pid1 || other_pid == pid1) {
		p->mode = PGC_POOLER_TRANSACTION;
		return PGC_OK;
	}
	bool heard;
	rc = notify_reaches(c, other, wait_ms, &heard, err);
	if (rc != PGC_OK)
		return rc;
	if (!heard) {
		p->mode = PGC_POOLER_TRANSACTION;
		snprintf(p->why, sizeof p->why,
		         "a notification sent to this session's LISTEN never arrived within %d ms: the LISTEN ran on a server"
		         " session this client does not keep", wait_ms);
	} else if (pid1 != p->libpq_pid) {
		p->mode = PGC_POOLER_SESSION;
		snprintf(p->why, sizeof p->why,
		         "libpq was told pid %d, the server says %lld, and the session keeps its backend between transactions",
		         p->libpq_pid, pid1);
	} else {
		p->mode = PGC_POOLER_NONE;
		snprintf(p->why, sizeof p->why, "direct session: the backend pid (%lld) stays the same between statements",
		         pid1);
	}
	return PGC_OK;
}

int pgc_conn_pooler(pgc_conn *c, unsigned int flags, int wait_ms, pgc_pooler_info *out, pgc_error *err)
{
	pgc_error_clear(err);
	if (c == NULL || out == NULL)
		return pgc__err(err, PGC_EUSAGE, "pgc_conn_pooler: conn and out must not be NULL");
	if (flags & ~PGC_POOLER_THOROUGH)
		return pgc__err(err, PGC_EUSAGE, "pgc_conn_pooler: unknown flags 0x%x", flags & ~PGC_POOLER_THOROUGH);
	if (wait_ms == 0)
		wait_ms = 2000;
	if (wait_ms < 100 || wait_ms > 60000)
		return pgc__err(err, PGC_EUSAGE, "pgc_conn_pooler: wait_ms must be between 100 and 60000, not %d", wait_ms);
	if (c->pooler_known && !(flags & PGC_POOLER_THOROUGH)) {
		*out = c->pooler;
		return PGC_OK;
	}
	if (c->pending != NULL || pgc__tx_status(c) == PQTRANS_INERROR)
		return pgc__err(err, PGC_EUSAGE, "pgc_conn_pooler: the session is busy, or its transaction failed");
	bool in_tx = pgc__in_transaction(c);
	pgc_pooler_info p;
	memset(&p, 0, sizeof p);
	p.libpq_pid = c->backend_pid;
	int rc;
	long long pid1 = backend_pid(c, &rc, err);
	if (pid1 < 0)
		return rc;
	p.server_pid = (int)pid1;
	if (pid1 == c->backend_pid && !(flags & PGC_POOLER_THOROUGH)) {
		p.mode = PGC_POOLER_NONE;
		snprintf(p.why, sizeof p.why, "direct session: libpq's backend pid (%lld) is the server's", pid1);
	} else if (in_tx) {
		/* Inside a transaction every statement stays on one server session, whatever the
		 * pooler: the second half of the test would see nothing. */
		p.mode = PGC_POOLER_UNKNOWN;
		snprintf(p.why, sizeof p.why,
		         "something is in between (libpq was told pid %d, the server says %lld), and inside a"
		         " transaction its kind cannot be tested", c->backend_pid, pid1);
		*out = p;
		return PGC_OK;
	} else {
		pgc_conn *other = NULL;
		pgc_error oerr = PGC_ERROR_INIT;
		if (pgc__open_like(c, "pgcoord/pooler-probe", NULL, NULL, &other, &oerr) != PGC_OK) {
			p.mode = PGC_POOLER_UNKNOWN;
			snprintf(p.why, sizeof p.why, "no second session to test with: %s", oerr.message);
			c->pooler = p;
			c->pooler_known = true;
			*out = p;
			return PGC_OK;
		}
		rc = probe_with_second_session(c, other, pid1, wait_ms, &p, err);
		pgc_conn_close(other);
		if (rc != PGC_OK)
			return rc;
	}
	if (p.mode == PGC_POOLER_TRANSACTION || p.mode == PGC_POOLER_STATEMENT)
		c->no_prepare = true; /* the next transaction may run on a session that lacks them */
	/* Kept until a reconnect, an unknown answer too: whoever asks again (the worker every
	 * second) must not open a second session each time. */
	c->pooler = p;
	c->pooler_known = true;
	*out = p;
	return PGC_OK;
}

/* probe.c - which locks does a statement take: it runs inside BEGIN ... ROLLBACK while a second
 * session watches it, and what its backend held is read before the rollback */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "diag_int.h"
#include "util/sqllex.h"

/* Why sql cannot be probed, read as a server with this standard_conforming_strings reads it;
 * NULL when it can. */
static const char *refusal(const char *sql, bool standard_strings)
{
	if (sql == NULL)
		return "no statement given";
	pgc__sqllex lx;
	pgc__sqllex_init(&lx, sql, strlen(sql), standard_strings);
	pgc__sqlstmt s, next;
	if (!pgc__sql_next_statement(&lx, &s))
		return "the statement is empty";
	if (pgc__sql_next_statement(&lx, &next))
		return "give one statement at a time: probe runs exactly one statement";
	size_t i = 0;
	while (pgc__sql_word_at(&s, i, "("))
		i++;
	const char *w0 = i < s.nwords ? s.words[i] : "";
	static const char *const txctl[] = { "BEGIN", "START", "COMMIT", "END", "ROLLBACK", "ABORT",
	                                      "SAVEPOINT", "RELEASE" };
	for (size_t k = 0; k < sizeof txctl / sizeof txctl[0]; k++)
		if (strcmp(w0, txctl[k]) == 0)
			return "transaction control cannot be probed: probe runs the statement in its own "
			       "transaction and rolls it back";
	if (strcmp(w0, "PREPARE") == 0 && pgc__sql_word_at(&s, i + 1, "TRANSACTION"))
		return "PREPARE TRANSACTION cannot be probed: probe rolls its transaction back";
	if (strcmp(w0, "VACUUM") == 0)
		return "VACUUM cannot run inside a transaction block, so it cannot be probed (it takes "
		       "SHARE UPDATE EXCLUSIVE on each table it processes: writes go on; VACUUM FULL "
		       "takes ACCESS EXCLUSIVE: nothing else goes on)";
	if (strcmp(w0, "CREATE") == 0 && s.concurrently &&
	    (pgc__sql_word_at(&s, i + 1, "INDEX") ||
	     (pgc__sql_word_at(&s, i + 1, "UNIQUE") && pgc__sql_word_at(&s, i + 2, "INDEX"))))
		return "CREATE INDEX CONCURRENTLY cannot run inside a transaction block, so it cannot be "
		       "probed (it takes SHARE UPDATE EXCLUSIVE on the table, so writes go on, and waits for "
		       "older transactions; probe plain CREATE INDEX to see the SHARE lock it avoids)";
	if (strcmp(w0, "DROP") == 0 && pgc__sql_word_at(&s, i + 1, "INDEX") && s.concurrently)
		return "DROP INDEX CONCURRENTLY cannot run inside a transaction block, so it cannot be probed";
	if (strcmp(w0, "REINDEX") == 0 && (s.concurrently || pgc__sql_has_word(&s, "DATABASE") ||
	                                   pgc__sql_has_word(&s, "SYSTEM")))
		return "REINDEX CONCURRENTLY, REINDEX DATABASE and REINDEX SYSTEM cannot run inside a "
		       "transaction block, so they cannot be probed";
	if ((strcmp(w0, "CREATE") == 0 || strcmp(w0, "DROP") == 0) &&
	    (pgc__sql_word_at(&s, i + 1, "DATABASE") || pgc__sql_word_at(&s, i + 1, "TABLESPACE") ||
	     pgc__sql_word_at(&s, i + 1, "SUBSCRIPTION")))
		return "CREATE/DROP DATABASE, TABLESPACE and SUBSCRIPTION cannot run inside a transaction "
		       "block, so they cannot be probed";
	if (strcmp(w0, "ALTER") == 0 && pgc__sql_word_at(&s, i + 1, "SYSTEM"))
		return "ALTER SYSTEM cannot run inside a transaction block, so it cannot be probed";
	if (strcmp(w0, "ALTER") == 0 && pgc__sql_word_at(&s, i + 1, "DATABASE") &&
	    pgc__sql_has_word(&s, "TABLESPACE"))
		return "ALTER DATABASE ... SET TABLESPACE cannot run inside a transaction block, so it "
		       "cannot be probed";
	if (strcmp(w0, "ALTER") == 0 && pgc__sql_has_word(&s, "DETACH") && s.concurrently)
		return "DETACH PARTITION ... CONCURRENTLY cannot run inside a transaction block, so it "
		       "cannot be probed";
	if (strcmp(w0, "CLUSTER") == 0 &&
	    (s.nwords == i + 1 || (s.nwords == i + 2 && pgc__sql_word_at(&s, i + 1, "VERBOSE"))))
		return "CLUSTER without a table cannot run inside a transaction block, so it cannot be "
		       "probed; name the table";
	if (s.copy_from_stdin)
		return "COPY ... FROM STDIN needs data from the client, so it cannot be probed; probe "
		       "COPY from a server file or the INSERT it stands for";
	return NULL;
}

const char *pgc_probe_refusal(const char *sql)
{
	return refusal(sql, true);
}

/* Rows the statement locked, from its command tag: every row UPDATE, DELETE and MERGE change,
 * every row a SELECT with a locking clause returns; 0 for anything else. */
static long rows_locked(const char *sql, const char *tag, bool standard_strings)
{
	const char *sp = strrchr(tag, ' ');
	long n = sp ? strtol(sp + 1, NULL, 10) : 0;
	if (strncmp(tag, "UPDATE ", 7) == 0 || strncmp(tag, "DELETE ", 7) == 0 ||
	    strncmp(tag, "MERGE ", 6) == 0)
		return n;
	if (strncmp(tag, "SELECT ", 7) == 0) {
		pgc__sqllex lx;
		pgc__sqllex_init(&lx, sql, strlen(sql), standard_strings);
		pgc__sqlstmt st;
		return pgc__sql_next_statement(&lx, &st) && st.locking_clause ? n : 0;
	}
	return 0;
}

/* The strongest row-lock clause of a statement that changes nothing itself (no UPDATE,
 * DELETE, INSERT or MERGE anywhere in it, a data-modifying WITH included), or NULL: then the
 * rows it locks are only returned, and the lock is for what comes later in the transaction,
 * if anything does. */
static const char *read_only_lock(const char *sql, bool standard_strings)
{
	static const char *const names[] = { NULL, "FOR KEY SHARE", "FOR SHARE", "FOR NO KEY UPDATE",
	                                      "FOR UPDATE" };
	pgc__sqllex lx;
	pgc__sqllex_init(&lx, sql, strlen(sql), standard_strings);
	int strongest = 0;
	bool after_for = false, after_for_no = false, after_for_key = false, after_for_no_key = false;
	while (pgc__sqllex_next(&lx) != PGC__SQL_END) {
		bool word = lx.tok == PGC__SQL_WORD;
		int strength = 0;
		if (word && pgc__sqllex_word_is(&lx, "UPDATE")) {
			if (after_for)
				strength = 4;
			else if (after_for_no_key)
				strength = 3;
			else
				return NULL; /* UPDATE ..., ON CONFLICT DO UPDATE */
		} else if (word && pgc__sqllex_word_is(&lx, "SHARE") && (after_for || after_for_key)) {
			strength = after_for ? 2 : 1;
		} else if (word && (pgc__sqllex_word_is(&lx, "DELETE") || pgc__sqllex_word_is(&lx, "INSERT") ||
		                    pgc__sqllex_word_is(&lx, "MERGE"))) {
			return NULL;
		}
		if (strength > strongest)
			strongest = strength;
		after_for_no_key = after_for_no && word && pgc__sqllex_word_is(&lx, "KEY");
		after_for_key = after_for && word && pgc__sqllex_word_is(&lx, "KEY");
		after_for_no = after_for && word && pgc__sqllex_word_is(&lx, "NO");
		after_for = word && pgc__sqllex_word_is(&lx, "FOR");
	}
	return names[strongest];
}

/* The advice for a read-only statement's row-lock clause (read_only_lock), into buf. */
static void row_lock_advice(const char *clause, char *buf, size_t size)
{
	static const char none[] = "if nothing later in the transaction updates or deletes them, drop the"
	                           " locking clause: a plain SELECT reads its snapshot and blocks no writer";
	if (strcmp(clause, "FOR UPDATE") == 0)
		snprintf(buf, size, "%s takes the strongest row lock, but this statement only reads the rows: %s;"
		         " if the transaction only needs them to stay (not deleted, key unchanged), FOR KEY SHARE"
		         " is enough; if it changes only non-key columns later, FOR NO KEY UPDATE does not block"
		         " the foreign-key checks of inserts into tables that refer to them", clause, none);
	else if (strcmp(clause, "FOR NO KEY UPDATE") == 0)
		snprintf(buf, size, "%s keeps other writers off the rows, but this statement only reads them: %s;"
		         " if the transaction only needs them to stay (not deleted, key unchanged), FOR KEY SHARE"
		         " is enough", clause, none);
	else if (strcmp(clause, "FOR SHARE") == 0)
		snprintf(buf, size, "%s blocks every update of the rows, but this statement only reads them: %s;"
		         " if the transaction only needs them to stay (not deleted, key unchanged), FOR KEY SHARE"
		         " lets updates of other columns go on", clause, none);
	else
		snprintf(buf, size, "%s keeps the rows from being deleted or their keys changed, but this statement"
		         " only reads them: %s", clause, none);
}

typedef struct probe_internal {
	pgc__arena ar;
	pgc_diag_snapshot *watch; /* the last snapshot taken while the statement ran */
} probe_internal;

void pgc_probe_result_free(pgc_probe_result *res)
{
	if (res == NULL)
		return;
	probe_internal *in = res->internal_;
	if (in != NULL) {
		pgc_diag_snapshot_free(in->watch);
		pgc__arena_free(&in->ar);
		free(in);
	}
	free(res);
}

static int cmp_lock_strength(const void *a, const void *b)
{
	const pgc_diag_lock *x = a, *y = b;
	if (x->table_mode != y->table_mode)
		return (int)y->table_mode - (int)x->table_mode;
	return strcmp(x->relation ? x->relation : "", y->relation ? y->relation : "");
}

/* The relation locks pid holds in a watch snapshot, copied into the result. */
static int locks_from_watch(pgc_probe_result *res, pgc__arena *a, const pgc_diag_snapshot *w)
{
	const pgc_diag_session *s = pgc_diag_session_find(w, res->probe_pid);
	if (s == NULL)
		return PGC_OK;
	res->locks = pgc__arena_alloc(a, (s->nlocks ? s->nlocks : 1) * sizeof *res->locks);
	if (res->locks == NULL)
		return PGC_ENOMEM;
	for (size_t i = 0; i < s->nlocks; i++) {
		const pgc_diag_lock *l = &s->locks[i];
		if (!l->granted || l->locktype == NULL || strcmp(l->locktype, "relation") != 0)
			continue;
		if (l->relation_oid < 16384) {
			res->ncatalog_locks++;
			continue;
		}
		res->locks[res->nlocks++] = *l;
	}
	res->observed = true;
	return PGC_OK;
}

/* Names the relation locks read by read_own_locks. */
static int name_own_locks(pgc_conn *conn, pgc_probe_result *res, pgc__arena *a, pgc_error *err)
{
	int64_t *oids = malloc(res->nlocks * sizeof *oids);
	if (oids == NULL)
		return pgc__err(err, PGC_ENOMEM, "out of memory");
	for (size_t k = 0; k < res->nlocks; k++)
		oids[k] = res->locks[k].relation_oid;
	pgc__sb list = PGC__SB_INIT;
	pgc__sb_int_array(&list, res->nlocks, oids);
	free(oids);
	if (list.oom)
		return pgc__err(err, PGC_ENOMEM, "out of memory");
	const char *params[1] = { list.buf };
	int rc;
	PGresult *r = pgc__exec(conn,
	        "SELECT c.oid::int8, pg_catalog.format('%I.%I', n.nspname, c.relname), c.relkind::text "
	        "FROM pg_catalog.pg_class c JOIN pg_catalog.pg_namespace n ON n.oid = c.relnamespace "
	        "WHERE c.oid = ANY($1::oid[])", 1, params, &rc, err);
	pgc__sb_free(&list);
	if (r == NULL)
		return rc;
	for (int i = 0; i < PQntuples(r); i++) {
		unsigned int oid = (unsigned int)strtoul(PQgetvalue(r, i, 0), NULL, 10);
		for (size_t k = 0; k < res->nlocks; k++)
			if (res->locks[k].relation_oid == oid) {
				res->locks[k].relation = pgc__arena_strdup(a, PQgetvalue(r, i, 1));
				res->locks[k].relkind = pgc__diag_relkind_name(PQgetvalue(r, i, 2));
			}
	}
	PQclear(r);
	for (size_t k = 0; k < res->nlocks; k++) {
		if (res->locks[k].relation == NULL)
			res->locks[k].relation = pgc__arena_printf(a, "%u", res->locks[k].relation_oid);
		res->locks[k].target = pgc__diag_lock_target(a, &res->locks[k]);
	}
	return a->failed ? pgc__err(err, PGC_ENOMEM, "out of memory") : PGC_OK;
}

/* Reads the relation locks this backend holds, then names them, in two statements: the naming
 * query locks catalogs itself, and those locks must not be counted. */
static int read_own_locks(pgc_conn *conn, pgc_probe_result *res, pgc__arena *a, pgc_error *err)
{
	int rc;
	PGresult *r = pgc__exec(conn,
	        "SELECT l.relation::int8, l.mode FROM pg_catalog.pg_lock_status() l "
	        "WHERE l.pid = pg_catalog.pg_backend_pid() AND l.locktype = 'relation' AND l.granted",
	        0, NULL, &rc, err);
	if (r == NULL)
		return rc;
	int n = PQntuples(r);
	res->locks = pgc__arena_alloc(a, (size_t)(n ? n : 1) * sizeof *res->locks);
	if (res->locks == NULL) {
		PQclear(r);
		return pgc__err(err, PGC_ENOMEM, "out of memory");
	}
	for (int i = 0; i < n; i++) {
		unsigned int oid = (unsigned int)strtoul(PQgetvalue(r, i, 0), NULL, 10);
		if (oid < 16384) {
			res->ncatalog_locks++;
			continue;
		}
		pgc_diag_lock *l = &res->locks[res->nlocks++];
		memset(l, 0, sizeof *l);
		l->pid = res->probe_pid;
		l->locktype = "relation";
		l->mode = pgc__arena_strdup(a, PQgetvalue(r, i, 1));
		l->table_mode = pgc_table_lock_parse(l->mode);
		l->granted = true;
		l->waited_s = -1;
		l->relation_oid = oid;
		l->page = l->tuple = -1;
	}
	PQclear(r);
	return res->nlocks == 0 ? PGC_OK : name_own_locks(conn, res, a, err);
}

/* A snapshot that shows the probe's backend waiting, with the sessions it waits for. */
static bool shows_wait(const pgc_diag_snapshot *s, int probe_pid)
{
	const pgc_diag_session *me = pgc_diag_session_find(s, probe_pid);
	return me != NULL && me->wants != NULL && me->nblocked_by > 0;
}

/* Takes one snapshot of everything from the watching session and keeps the most telling one:
 * the latest that shows the probe waiting with its blockers named, else the latest that shows
 * it at all. (pg_blocking_pids runs a moment after pg_locks is read, so the snapshot taken as
 * the lock timeout fires can show the wait without its blockers.) */
static void watch_once(pgc_conn *watcher, probe_internal *in, int probe_pid)
{
	pgc_diag_options o = PGC_DIAG_OPTIONS_INIT;
	o.all_databases = true;
	pgc_diag_snapshot *s = NULL;
	pgc_error ignored;
	if (pgc_diag_snapshot_take(watcher, &o, &s, &ignored) != PGC_OK)
		return;
	if (pgc_diag_session_find(s, probe_pid) == NULL ||
	    (in->watch != NULL && shows_wait(in->watch, probe_pid) && !shows_wait(s, probe_pid))) {
		pgc_diag_snapshot_free(s);
		return;
	}
	pgc_diag_snapshot_free(in->watch);
	in->watch = s;
}

/* One probe while it runs. */
typedef struct probe_run {
	pgc_conn *conn;
	const char *sql;
	const pgc_probe_options *opts;
	pgc_probe_result *res;
	probe_internal *in;
	pgc_conn *watcher; /* opened on the first tick */
} probe_run;

/* While the statement runs: watch it from a second session, so that a lock wait or a timeout
 * can be explained. */
static void on_tick(void *arg)
{
	probe_run *p = arg;
	if (p->watcher == NULL) {
		pgc_error ignored;
		if (pgc__open_like(p->conn, "pgcoord/probe-watch", NULL, NULL, &p->watcher, &ignored) != PGC_OK)
			p->watcher = NULL;
	}
	if (p->watcher != NULL)
		watch_once(p->watcher, p->in, p->res->probe_pid);
}

/* The session's standard_conforming_strings (on unless the server says off). */
static bool standard_strings(pgc_conn *conn)
{
	const char *v = PQparameterStatus(pgc_conn_pg(conn), "standard_conforming_strings");
	return v == NULL || strcmp(v, "off") != 0;
}

static int check_args(pgc_conn *conn, const char *sql, const pgc_probe_options *opts,
                      pgc_probe_result **out, pgc_error *err)
{
	if (out == NULL)
		return pgc__err(err, PGC_EUSAGE, "pgc_probe: out must not be NULL");
	*out = NULL;
	if (conn == NULL || sql == NULL)
		return pgc__err(err, PGC_EUSAGE, "pgc_probe: conn and sql must not be NULL");
	if (opts->lock_timeout_ms <= 0 || opts->statement_timeout_ms <= 0 ||
	    opts->lock_timeout_ms > INT32_MAX || opts->statement_timeout_ms > INT32_MAX)
		return pgc__err(err, PGC_EUSAGE, "pgc_probe: lock and statement timeouts must be between 1 ms and 24 days");
	const char *why = refusal(sql, standard_strings(conn));
	if (why != NULL)
		return pgc__err(err, PGC_EUSAGE, "cannot probe: %s", why);
	if (pgc__tx_status(conn) != PQTRANS_IDLE)
		return pgc__err(err, PGC_EUSAGE, "pgc_probe: the session must be idle, outside a transaction");
	return PGC_OK;
}

/* BEGIN, then the probe's own lock_timeout and statement_timeout for the rest of the
 * transaction: set_config(..., true) replaces whatever the role, the database or the session
 * set, so the statement waits exactly as long as the caller asked. */
static int begin(probe_run *p, pgc_error *err)
{
	int rc = pgc__command(p->conn, "BEGIN", err);
	if (rc != PGC_OK)
		return rc;
	char lt[24], st[24];
	snprintf(lt, sizeof lt, "%" PRId64, p->opts->lock_timeout_ms);
	snprintf(st, sizeof st, "%" PRId64, p->opts->statement_timeout_ms);
	const char *params[2] = { lt, st };
	PGresult *r = pgc__exec(p->conn, "SELECT pg_catalog.set_config('lock_timeout', $1, true), "
	                                 "pg_catalog.set_config('statement_timeout', $2, true)",
	                        2, params, &rc, err);
	PQclear(r);
	return rc;
}

/* The outcome of a statement the server ended with the error in r. */
static int failed(probe_run *p, const PGresult *r, pgc_error *err)
{
	pgc_probe_result *res = p->res;
	pgc__err_result(&res->error, pgc_conn_pg(p->conn), r, NULL);
	const char *ss = res->error.sqlstate;
	if (strcmp(ss, "25001") == 0) /* the server refused what our scanner let through */
		return pgc__err(err, PGC_EUSAGE, "cannot probe: %s, so it cannot be probed", res->error.message);
	if (strcmp(ss, "55P03") == 0)
		res->outcome = PGC_PROBE_LOCK_TIMEOUT;
	else if (strcmp(ss, "57014") == 0)
		res->outcome = PGC_PROBE_STATEMENT_TIMEOUT;
	else
		res->outcome = PGC_PROBE_FAILED;
	if (p->in->watch == NULL)
		return PGC_OK;
	if (locks_from_watch(res, &p->in->ar, p->in->watch) != PGC_OK)
		return pgc__err(err, PGC_ENOMEM, "out of memory");
	const pgc_diag_session *s = pgc_diag_session_find(p->in->watch, res->probe_pid);
	if (s != NULL && s->wants != NULL) {
		res->waited_for = s->wants;
		res->wait_snapshot = p->in->watch;
	}
	return PGC_OK;
}

/* Runs the statement: one statement through the extended protocol (the server itself
 * refuses a second one), its rows and any COPY data dropped as they arrive, so that probing a
 * SELECT ... FOR UPDATE of a big table does not hold its result in memory. The server's own
 * timeouts end it; a client deadline past them cancels it if the server does not. */
static int run_statement(probe_run *p, pgc_error *err)
{
	const pgc_probe_options *o = p->opts;
	pgc__call call = pgc__bound(o->statement_timeout_ms + 5000, -1);
	call.flags = PGC__ROWS_DROP | PGC__COPY | PGC__KEEP_ERROR;
	call.on_tick = on_tick;
	call.tick_arg = p;
	/* The first look after a quarter of the lock timeout (5 to 100 ms), then every 100 ms. */
	int64_t first = o->lock_timeout_ms / 4;
	call.tick_first_ms = first < 5 ? 5 : first > 100 ? 100 : first;
	call.tick_ms = 100;
	int64_t t0 = pgc__now_ms();
	int rc = pgc__send(p->conn, p->sql, 0, NULL, &call, err);
	if (rc != PGC_OK)
		return rc;
	PGresult *r = pgc__await(p->conn, &call, &rc, err);
	p->res->elapsed_s = (double)(pgc__now_ms() - t0) / 1000.0;
	if (rc == PGC_OK) {
		pgc_probe_result *res = p->res;
		res->outcome = PGC_PROBE_RAN;
		pgc__copy_line(res->command_tag, sizeof res->command_tag, PQcmdStatus(r));
		res->rows_locked = rows_locked(p->sql, res->command_tag, standard_strings(p->conn));
		const char *clause = strncmp(res->command_tag, "SELECT ", 7) == 0
		                     ? read_only_lock(p->sql, standard_strings(p->conn)) : NULL;
		if (clause != NULL)
			row_lock_advice(clause, res->row_lock_advice, sizeof res->row_lock_advice);
		PQclear(r);
		return read_own_locks(p->conn, res, &p->in->ar, err);
	}
	if (r == NULL || rc == PGC_ECONNLOST) {
		PQclear(r);
		return rc;
	}
	rc = failed(p, r, err);
	PQclear(r);
	return rc;
}

int pgc_probe(pgc_conn *conn, const char *sql, const pgc_probe_options *opts,
              pgc_probe_result **out, pgc_error *err)
{
	pgc_error_clear(err);
	pgc_probe_options defaults = PGC_PROBE_OPTIONS_INIT;
	if (opts == NULL)
		opts = &defaults;
	int rc = check_args(conn, sql, opts, out, err);
	if (rc != PGC_OK)
		return rc;
	probe_run p = { .conn = conn, .sql = sql, .opts = opts };
	p.res = calloc(1, sizeof *p.res);
	p.in = calloc(1, sizeof *p.in);
	if (p.res == NULL || p.in == NULL) {
		free(p.res);
		free(p.in);
		return pgc__err(err, PGC_ENOMEM, "out of memory");
	}
	p.res->internal_ = p.in;
	p.res->probe_pid = pgc_conn_backend_pid(conn);
	if ((rc = begin(&p, err)) == PGC_OK && (rc = run_statement(&p, err)) == PGC_OK) {
		if (p.res->nlocks > 1)
			qsort(p.res->locks, p.res->nlocks, sizeof *p.res->locks, cmp_lock_strength);
		rc = pgc__command(conn, "ROLLBACK", err);
	}
	pgc_conn_close(p.watcher);
	if (rc != PGC_OK) {
		(void)pgc__rollback(conn); /* the first error is the one to report */
		pgc_probe_result_free(p.res);
		return rc;
	}
	*out = p.res;
	return PGC_OK;
}

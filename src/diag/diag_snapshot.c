/* diag_snapshot.c - a snapshot of sessions, locks and wait-for edges, decoded
 *
 * A snapshot is one SQL statement: pg_locks and pg_stat_activity are each read once (the CTEs
 * are materialized) and pg_blocking_pids() is called only for backends that wait, because each
 * call briefly takes the whole lock manager. Everything the caller sees is copied into an arena
 * owned by the snapshot, so the PGresult is freed at once and the snapshot is plain memory.
 * Taking one is a series of steps over a builder: read the rows, give blockers without a row a
 * placeholder, keep what is in scope, look names up, lay out the final arrays, build the graph
 * (diag_graph.c). */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "diag_int.h"

/* ---- PGresult values ---- */

/* A PGresult value as an arena string, NULL for SQL NULL. */
static char *col_str(pgc__arena *a, const PGresult *r, int row, int col)
{
	if (PQgetisnull(r, row, col))
		return NULL;
	return pgc__arena_strdup(a, PQgetvalue(r, row, col));
}

static double col_f(const PGresult *r, int row, int col)
{
	if (PQgetisnull(r, row, col))
		return -1;
	double v = strtod(PQgetvalue(r, row, col), NULL);
	return v < 0 ? 0 : v;
}

static long long col_ll(const PGresult *r, int row, int col, long long dflt)
{
	if (PQgetisnull(r, row, col))
		return dflt;
	return strtoll(PQgetvalue(r, row, col), NULL, 10);
}

static bool col_bool(const PGresult *r, int row, int col)
{
	return !PQgetisnull(r, row, col) && PQgetvalue(r, row, col)[0] == 't';
}

/* ---- the snapshot query ---- */

/* Columns of the snapshot query: a UNION of session rows (kind 's') and lock rows (kind 'l'). */
enum {
	C_KIND, C_PID, C_DATNAME, C_TAKEN_AT, C_CURDB,
	C_USER, C_APP, C_CLIENT, C_BTYPE, C_STATE, C_WET, C_WE, C_QUERY,
	C_BACKEND_AGE, C_XACT_AGE, C_QUERY_AGE, C_STATE_AGE, C_BLOCKERS, C_NO_XID,
	C_LOCKTYPE, C_MODE, C_GRANTED, C_FASTPATH, C_WAITED, C_RELOID, C_RELNAME, C_RELKIND,
	C_PAGE, C_TUPLE, C_XID, C_VXID, C_CLASSID, C_OBJID, C_OBJSUBID,
	C_COUNT
};

/* The first two %s are "MATERIALIZED " from PostgreSQL 12 (before, every CTE was), the third
 * is the wait-start expression: l.waitstart from PostgreSQL 14, NULL before. Sessions of other
 * users show a NULL backend_type to an unprivileged reader; their user is still shown, which
 * tells them from the server's own processes. */
static const char snapshot_sql[] =
	"WITH l AS %s(SELECT * FROM pg_catalog.pg_locks),\n"
	"a AS %s(\n"
	"  SELECT * FROM pg_catalog.pg_stat_activity s\n"
	"  WHERE s.pid IS NOT NULL AND (s.backend_type IN ('client backend', 'autovacuum worker', 'walsender')\n"
	"     OR (s.backend_type IS NULL AND s.usesysid IS NOT NULL)\n"
	"     OR s.pid IN (SELECT l.pid FROM l WHERE l.pid IS NOT NULL))),\n"
	"b AS (SELECT w.pid, pg_catalog.pg_blocking_pids(w.pid) AS pids\n"
	"  FROM (SELECT DISTINCT l.pid FROM l WHERE NOT l.granted AND l.pid IS NOT NULL) w),\n"
	"t AS (SELECT pg_catalog.clock_timestamp() AS now,\n"
	"  pg_catalog.to_char(pg_catalog.clock_timestamp() AT TIME ZONE 'UTC',\n"
	"                     'YYYY-MM-DD\"T\"HH24:MI:SS.MS\"Z\"') AS at,\n"
	"  pg_catalog.current_database()::text AS curdb,\n"
	"  (SELECT d.oid FROM pg_catalog.pg_database d\n"
	"   WHERE d.datname = pg_catalog.current_database()) AS dboid)\n"
	"SELECT 's', a.pid, a.datname::text, t.at, t.curdb,\n"
	"  a.usename::text, a.application_name,\n"
	"  CASE WHEN a.client_addr IS NOT NULL\n"
	"       THEN pg_catalog.host(a.client_addr) || ':' || a.client_port\n"
	"       WHEN a.client_port = -1 THEN 'local' END,\n"
	"  a.backend_type, a.state, a.wait_event_type, a.wait_event, a.query,\n"
	"  extract(epoch FROM t.now - a.backend_start)::float8,\n"
	"  extract(epoch FROM t.now - a.xact_start)::float8,\n"
	"  extract(epoch FROM t.now - a.query_start)::float8,\n"
	"  extract(epoch FROM t.now - a.state_change)::float8,\n"
	"  b.pids, a.backend_xid IS NULL AND a.backend_xmin IS NULL,\n"
	/* A session row's C_VXID is its backend_start, which tells a session from a later one
	 * that got the same pid. */
	"  NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL,\n"
	"  pg_catalog.to_char(a.backend_start AT TIME ZONE 'UTC', 'YYYY-MM-DD\"T\"HH24:MI:SS.US\"Z\"'),\n"
	"  NULL, NULL, NULL\n"
	"FROM a CROSS JOIN t LEFT JOIN b ON b.pid = a.pid\n"
	"UNION ALL\n"
	"SELECT 'l', coalesce(l.pid, 0), d.datname::text, t.at, t.curdb,\n"
	"  NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL,\n"
	"  l.locktype, l.mode, l.granted, l.fastpath,\n"
	"  extract(epoch FROM t.now - %s)::float8,\n"
	"  l.relation::int8,\n"
	"  CASE WHEN c.oid IS NOT NULL THEN pg_catalog.format('%%I.%%I', n.nspname, c.relname) END,\n"
	"  c.relkind::text, l.page, l.tuple, l.transactionid::text, l.virtualxid,\n"
	"  l.classid::int8, l.objid::int8, l.objsubid\n"
	"FROM l CROSS JOIN t\n"
	"LEFT JOIN pg_catalog.pg_database d ON d.oid = l.database\n"
	"LEFT JOIN pg_catalog.pg_class c ON c.oid = l.relation AND l.database IN (0, t.dboid)\n"
	"LEFT JOIN pg_catalog.pg_namespace n ON n.oid = c.relnamespace";

/* ---- the builder ---- */

/* Raw rows while the snapshot is built. */
typedef struct raw_session {
	pgc_diag_session s;
	int *blockers;
	size_t nblockers;
	bool no_xid; /* neither backend_xid nor backend_xmin */
	bool kept;
} raw_session;

typedef struct raw_lock {
	pgc_diag_lock l;
	pgc_key *key; /* l.key, writable: the registry's name goes into it */
	bool kept;
} raw_lock;

typedef struct snap_internal {
	pgc__arena ar;
} snap_internal;

typedef struct builder {
	pgc_conn *conn;
	const pgc_diag_options *opts;
	const char *schema;
	pgc_diag_snapshot *snap;
	pgc__arena *a;
	raw_session *rs;
	size_t nrs, caprs;
	raw_lock *rl;
	size_t nrl, caprl;
	pgc__pid_index *map; /* the sessions kept, by pid */
	size_t nkept_locks;
} builder;

static void builder_free(builder *b)
{
	free(b->rs);
	free(b->rl);
	free(b->map);
}

static int oom(pgc_error *err)
{
	return pgc__err(err, PGC_ENOMEM, "out of memory");
}

static raw_session *new_session(builder *b)
{
	if (!pgc__grow((void **)&b->rs, &b->caprs, b->nrs + 1, sizeof *b->rs))
		return NULL;
	raw_session *x = &b->rs[b->nrs++];
	memset(x, 0, sizeof *x);
	x->s.waited_s = -1;
	return x;
}

const char *pgc__diag_relkind_name(const char *k)
{
	if (k == NULL)
		return NULL;
	switch (k[0]) {
	case 'r': return "table";
	case 'i': return "index";
	case 'S': return "sequence";
	case 't': return "TOAST table";
	case 'v': return "view";
	case 'm': return "materialized view";
	case 'c': return "composite type";
	case 'f': return "foreign table";
	case 'p': return "partitioned table";
	case 'I': return "partitioned index";
	default: return "relation";
	}
}

/* Parses the text form of an int[] ("{1,2}") into a deduplicated array without self. */
static int *parse_pids(pgc__arena *a, const char *text, int self, size_t *n)
{
	*n = 0;
	if (text == NULL)
		return NULL;
	size_t cap = 1;
	for (const char *p = text; *p; p++)
		if (*p == ',')
			cap++;
	int *out = pgc__arena_alloc(a, cap * sizeof *out);
	if (out == NULL)
		return NULL;
	const char *p = text;
	while (*p) {
		if ((*p >= '0' && *p <= '9') || *p == '-') {
			char *end;
			long v = strtol(p, &end, 10);
			p = end;
			bool dup = v == self;
			for (size_t i = 0; i < *n && !dup; i++)
				dup = out[i] == (int)v;
			if (!dup && *n < cap)
				out[(*n)++] = (int)v;
		} else {
			p++;
		}
	}
	return out;
}

char *pgc__diag_lock_target(pgc__arena *a, const pgc_diag_lock *l)
{
	const char *t = l->locktype ? l->locktype : "?";
	const char *rel = l->relation ? l->relation : "?";
	if (strcmp(t, "relation") == 0) {
		const char *kind = l->relkind && strcmp(l->relkind, "table") != 0 ? l->relkind : "relation";
		return pgc__arena_printf(a, "%s %s", kind, rel);
	}
	if (strcmp(t, "extend") == 0)
		return pgc__arena_printf(a, "extension of %s", rel);
	if (strcmp(t, "page") == 0)
		return pgc__arena_printf(a, "page %ld of %s", l->page, rel);
	if (strcmp(t, "tuple") == 0)
		return pgc__arena_printf(a, "row (%ld,%ld) of %s", l->page, l->tuple, rel);
	if (strcmp(t, "transactionid") == 0)
		return pgc__arena_printf(a, "transaction %s", l->transactionid ? l->transactionid : "?");
	if (strcmp(t, "virtualxid") == 0)
		return pgc__arena_printf(a, "virtual transaction %s", l->virtualxid ? l->virtualxid : "?");
	if (strcmp(t, "advisory") == 0 && l->key != NULL) {
		char key[PGC_KEY_FORMAT_MAX];
		pgc_key_format(l->key, key, sizeof key);
		if (l->key->name[0] != '\0')
			return pgc__arena_printf(a, "advisory %s \"%s\"", key, l->key->name);
		return pgc__arena_printf(a, "advisory %s", key);
	}
	return pgc__arena_strdup(a, t);
}

/* ---- step 1: the rows ---- */

static void decode_session(builder *b, raw_session *x, const PGresult *r, int row, int pid)
{
	pgc__arena *a = b->a;
	pgc_diag_session *s = &x->s;
	s->pid = pid;
	s->known = true;
	s->database = col_str(a, r, row, C_DATNAME);
	s->user = col_str(a, r, row, C_USER);
	s->application = col_str(a, r, row, C_APP);
	s->client = col_str(a, r, row, C_CLIENT);
	s->backend_type = col_str(a, r, row, C_BTYPE);
	s->state = col_str(a, r, row, C_STATE);
	s->wait_event_type = col_str(a, r, row, C_WET);
	s->wait_event = col_str(a, r, row, C_WE);
	s->query = col_str(a, r, row, C_QUERY);
	s->backend_age_s = col_f(r, row, C_BACKEND_AGE);
	s->backend_start = col_str(a, r, row, C_VXID);
	s->xact_age_s = col_f(r, row, C_XACT_AGE);
	s->query_age_s = col_f(r, row, C_QUERY_AGE);
	s->state_age_s = col_f(r, row, C_STATE_AGE);
	x->blockers = parse_pids(a, PQgetisnull(r, row, C_BLOCKERS) ? NULL : PQgetvalue(r, row, C_BLOCKERS),
	                         pid, &x->nblockers);
	x->no_xid = col_bool(r, row, C_NO_XID);
}

static void decode_lock(builder *b, raw_lock *x, const PGresult *r, int row, int pid)
{
	pgc__arena *a = b->a;
	pgc_diag_lock *l = &x->l;
	l->pid = pid;
	l->database = col_str(a, r, row, C_DATNAME);
	l->locktype = col_str(a, r, row, C_LOCKTYPE);
	l->mode = col_str(a, r, row, C_MODE);
	l->granted = col_bool(r, row, C_GRANTED);
	l->fastpath = col_bool(r, row, C_FASTPATH);
	l->waited_s = l->granted ? -1 : col_f(r, row, C_WAITED);
	l->relation_oid = (unsigned int)col_ll(r, row, C_RELOID, 0);
	l->relation = col_str(a, r, row, C_RELNAME);
	if (l->relation == NULL && l->relation_oid != 0)
		l->relation = pgc__arena_printf(a, "%u", l->relation_oid);
	l->relkind = pgc__diag_relkind_name(PQgetisnull(r, row, C_RELKIND) ? NULL
	                                                                  : PQgetvalue(r, row, C_RELKIND));
	l->page = (long)col_ll(r, row, C_PAGE, -1);
	l->tuple = (long)col_ll(r, row, C_TUPLE, -1);
	l->transactionid = col_str(a, r, row, C_XID);
	l->virtualxid = col_str(a, r, row, C_VXID);
	if (l->locktype && strcmp(l->locktype, "relation") == 0)
		l->table_mode = pgc_table_lock_parse(l->mode);
	pgc_key k;
	if (l->locktype && strcmp(l->locktype, "advisory") == 0 &&
	    pgc_key_from_pg_locks((uint32_t)col_ll(r, row, C_CLASSID, 0), (uint32_t)col_ll(r, row, C_OBJID, 0),
	                          (int)col_ll(r, row, C_OBJSUBID, 0), &k) == PGC_OK &&
	    (x->key = pgc__arena_alloc(a, sizeof *x->key)) != NULL) {
		*x->key = k;
		l->key = x->key;
	}
}

/* Copies the rows of the snapshot query into raw sessions and locks. */
static int decode_rows(builder *b, const PGresult *r, pgc_error *err)
{
	pgc_diag_snapshot *snap = b->snap;
	for (int row = 0; row < PQntuples(r); row++) {
		if (snap->taken_at == NULL) {
			snap->taken_at = col_str(b->a, r, row, C_TAKEN_AT);
			snap->database = col_str(b->a, r, row, C_CURDB);
		}
		int pid = (int)col_ll(r, row, C_PID, 0);
		if (pid == snap->self_pid && !b->opts->include_self)
			continue;
		if (PQgetvalue(r, row, C_KIND)[0] == 's') {
			raw_session *x = new_session(b);
			if (x == NULL)
				return oom(err);
			decode_session(b, x, r, row, pid);
		} else {
			if (!pgc__grow((void **)&b->rl, &b->caprl, b->nrl + 1, sizeof *b->rl))
				return oom(err);
			raw_lock *x = &b->rl[b->nrl++];
			memset(x, 0, sizeof *x);
			decode_lock(b, x, r, row, pid);
		}
		if (b->a->failed)
			return oom(err);
	}
	if (snap->database == NULL)
		snap->database = pgc__arena_strdup(b->a, "");
	return PGC_OK;
}

/* Runs the snapshot query and decodes it. Inside a transaction block the server keeps the
 * activity it first read for the rest of the transaction; it is dropped first, so that this
 * snapshot is current. */
static int read_rows(builder *b, pgc_error *err)
{
	int rc;
	PGresult *r;
	if (pgc__in_transaction(b->conn)) {
		r = pgc__exec(b->conn, "SELECT pg_catalog.pg_stat_clear_snapshot()", 0, NULL, &rc, err);
		if (r == NULL)
			return rc;
		PQclear(r);
	}
	char sql[sizeof snapshot_sql + 64];
	int version = pgc_conn_server_version(b->conn);
	const char *mat = version >= 120000 ? "MATERIALIZED " : "";
	const char *waitstart = version >= 140000 ? "l.waitstart" : "NULL::timestamptz";
	snprintf(sql, sizeof sql, snapshot_sql, mat, mat, waitstart);
	r = pgc__exec(b->conn, sql, 0, NULL, &rc, err);
	if (r == NULL)
		return rc;
	if (PQnfields(r) != C_COUNT)
		rc = pgc__err(err, PGC_EINTERNAL, "snapshot query returned %d columns, expected %d",
		              PQnfields(r), C_COUNT);
	else
		rc = decode_rows(b, r, err);
	PQclear(r);
	return rc;
}

/* ---- step 2: placeholders ---- */

/* Blockers with no row of their own (a prepared transaction is pid 0) become placeholders, so
 * every edge has two ends. */
static int add_placeholders(builder *b, pgc_error *err)
{
	size_t nreal = b->nrs;
	for (size_t i = 0; i < nreal; i++) {
		for (size_t k = 0; k < b->rs[i].nblockers; k++) {
			int pid = b->rs[i].blockers[k];
			bool found = false;
			for (size_t j = 0; j < b->nrs && !found; j++)
				found = b->rs[j].s.pid == pid;
			if (found)
				continue;
			raw_session *x = new_session(b);
			if (x == NULL)
				return oom(err);
			x->s.pid = pid;
			x->s.state = pid == 0 ? "prepared transaction" : "unknown (not in pg_stat_activity)";
			x->s.backend_age_s = x->s.xact_age_s = x->s.query_age_s = x->s.state_age_s = -1;
		}
	}
	return PGC_OK;
}

/* ---- step 3: scope ---- */

static int cmp_session_age(const void *a, const void *b)
{
	const raw_session *x = a, *y = b;
	/* Oldest transaction first; sessions without one after, then by pid. */
	if (x->s.xact_age_s != y->s.xact_age_s) {
		if (x->s.xact_age_s < 0)
			return 1;
		if (y->s.xact_age_s < 0)
			return -1;
		return x->s.xact_age_s < y->s.xact_age_s ? 1 : -1;
	}
	return (x->s.pid > y->s.pid) - (x->s.pid < y->s.pid);
}

static bool in_current_db(const builder *b, const char *database)
{
	return b->opts->all_databases || (database && strcmp(database, b->snap->database) == 0);
}

static void map_sessions(builder *b)
{
	for (size_t i = 0; i < b->nrs; i++) {
		b->map[i].pid = b->rs[i].s.pid;
		b->map[i].idx = i;
	}
	pgc__pid_index_sort(b->map, b->nrs);
}

/* The current database, plus whoever waits for or blocks a session in it; the sessions kept
 * are sorted by age, and the locks of kept sessions (and of prepared transactions in scope)
 * are marked. */
static int keep_in_scope(builder *b, pgc_error *err)
{
	b->map = malloc((b->nrs ? b->nrs : 1) * sizeof *b->map);
	if (b->map == NULL)
		return oom(err);
	for (size_t i = 0; i < b->nrs; i++)
		b->rs[i].kept = in_current_db(b, b->rs[i].s.database);
	map_sessions(b);
	for (bool changed = true; changed;) {
		changed = false;
		for (size_t i = 0; i < b->nrs; i++)
			for (size_t k = 0; k < b->rs[i].nblockers; k++) {
				long j = pgc__pid_index_find(b->map, b->nrs, b->rs[i].blockers[k]);
				if (j < 0 || b->rs[i].kept == b->rs[j].kept)
					continue;
				b->rs[i].kept = b->rs[j].kept = true;
				changed = true;
			}
	}
	size_t nkeep = 0;
	for (size_t i = 0; i < b->nrs; i++)
		if (b->rs[i].kept)
			b->rs[nkeep++] = b->rs[i];
	b->nrs = nkeep;
	if (b->nrs > 1)
		qsort(b->rs, b->nrs, sizeof *b->rs, cmp_session_age);
	map_sessions(b);
	b->nkept_locks = 0;
	for (size_t i = 0; i < b->nrl; i++) {
		raw_lock *l = &b->rl[i];
		l->kept = pgc__pid_index_find(b->map, b->nrs, l->l.pid) >= 0 ||
		          (l->l.pid == 0 && in_current_db(b, l->l.database));
		b->nkept_locks += l->kept;
		/* A backend waits for one lock at a time: one row per waiter left out. */
		b->snap->nwaiting_elsewhere += !l->kept && !l->l.granted && l->l.pid != 0;
	}
	return PGC_OK;
}

/* ---- step 4: names ---- */

/* A kept lock on a bigint key in the current database: what the registry can name. */
static bool nameable(const builder *b, const raw_lock *l)
{
	return l->kept && l->key != NULL && l->key->kind == PGC_KEY_INT64 && l->l.database &&
	       strcmp(l->l.database, b->snap->database) == 0;
}

/* Whether <schema>.lock_names exists (and its quoted name for SQL). */
static int registry_exists(builder *b, const char *quoted, bool *exists, pgc_error *err)
{
	char *regname = pgc__arena_printf(b->a, "%s.lock_names", quoted);
	if (regname == NULL)
		return oom(err);
	const char *p[1] = { regname };
	int rc;
	PGresult *r = pgc__exec(b->conn, "SELECT pg_catalog.to_regclass($1) IS NOT NULL", 1, p, &rc, err);
	if (r == NULL)
		return rc;
	*exists = PQgetvalue(r, 0, 0)[0] == 't';
	PQclear(r);
	return PGC_OK;
}

static void apply_names(builder *b, const PGresult *r)
{
	for (int row = 0; row < PQntuples(r); row++) {
		int64_t key = strtoll(PQgetvalue(r, row, 0), NULL, 10);
		for (size_t i = 0; i < b->nrl; i++)
			if (nameable(b, &b->rl[i]) && b->rl[i].key->id == key)
				snprintf(b->rl[i].key->name, sizeof b->rl[i].key->name, "%s", PQgetvalue(r, row, 1));
	}
}

/* Reads the names of the keys in list (a bigint[] literal) with sql. Without privilege on
 * the registry (or with a table of another shape) the snapshot goes on without names, but not
 * without the session. */
static int read_names(builder *b, const char *sql, const char *list, pgc_error *err)
{
	const char *p[1] = { list };
	pgc_error ignored;
	int rc;
	PGresult *r = pgc__exec(b->conn, sql, 1, p, &rc, &ignored);
	if (r == NULL) {
		if (rc != PGC_ECONNLOST)
			return PGC_OK;
		if (err != NULL)
			*err = ignored;
		return rc;
	}
	b->snap->names_available = true;
	apply_names(b, r);
	PQclear(r);
	return PGC_OK;
}

/* Looks the bigint keys of advisory locks in the current database up in <schema>.lock_names.
 * A missing or unreadable table is not an error: the names are simply absent. */
static int lookup_names(builder *b, pgc_error *err)
{
	if (!b->opts->names)
		return PGC_OK;
	int64_t *keys = malloc((b->nrl ? b->nrl : 1) * sizeof *keys);
	if (keys == NULL)
		return oom(err);
	size_t nkeys = 0;
	for (size_t i = 0; i < b->nrl; i++)
		if (nameable(b, &b->rl[i]))
			keys[nkeys++] = b->rl[i].key->id;
	pgc__sb list = PGC__SB_INIT;
	pgc__sb_int_array(&list, nkeys, keys);
	free(keys);
	if (nkeys == 0 || list.oom) {
		pgc__sb_free(&list);
		return nkeys == 0 ? PGC_OK : oom(err);
	}
	char *qs = pgc__quote_ident(b->conn, b->schema, err);
	bool exists = false;
	int rc = qs == NULL ? PGC_EUSAGE : registry_exists(b, qs, &exists, err);
	if (rc == PGC_OK && exists) {
		char *sql = pgc__sql_schema("SELECT n.key::text, n.name FROM @S@.lock_names n "
		                            "WHERE n.key = ANY($1::bigint[])", qs);
		rc = sql != NULL ? read_names(b, sql, list.buf, err) : oom(err);
		free(sql);
	}
	PQfreemem(qs);
	pgc__sb_free(&list);
	return rc;
}

/* ---- step 5: the final arrays ---- */

static int cmp_lock_order(const void *a, const void *b)
{
	/* Granted first; then stronger modes and relation locks before the rest. */
	const raw_lock *x = *(const raw_lock *const *)a, *y = *(const raw_lock *const *)b;
	if (x->l.granted != y->l.granted)
		return x->l.granted ? -1 : 1;
	if (x->l.table_mode != y->l.table_mode)
		return (int)y->l.table_mode - (int)x->l.table_mode;
	return strcmp(x->l.locktype ? x->l.locktype : "", y->l.locktype ? y->l.locktype : "");
}

static int cmp_lock_pid_order(const void *a, const void *b)
{
	const raw_lock *x = *(const raw_lock *const *)a, *y = *(const raw_lock *const *)b;
	if (x->l.pid != y->l.pid)
		return (x->l.pid > y->l.pid) - (x->l.pid < y->l.pid);
	return cmp_lock_order(a, b);
}

/* A row-lock wait shows as a wait for the holder's transaction; the row itself is the tuple
 * lock the waiter already holds. Names it in the wait's target. */
static void name_row_wait(pgc__arena *a, pgc_diag_session *s)
{
	if (s->wants == NULL || s->wants->locktype == NULL || strcmp(s->wants->locktype, "transactionid") != 0)
		return;
	for (size_t k = 0; k < s->nlocks; k++) {
		const pgc_diag_lock *t = &s->locks[k];
		if (t->granted && t->locktype && strcmp(t->locktype, "tuple") == 0) {
			pgc_diag_lock *w = (pgc_diag_lock *)s->wants;
			w->target = pgc__arena_printf(a, "%s (%s)", w->target, t->target);
			return;
		}
	}
}

/* Session i's locks from order (sorted by pid), copied to the snapshot from *out on. */
static void place_locks(builder *b, size_t i, raw_lock *const *order, size_t *out)
{
	pgc_diag_snapshot *snap = b->snap;
	pgc_diag_session *s = &snap->sessions[i];
	size_t n = b->nkept_locks, lo = 0, hi = n;
	while (lo < hi) {
		size_t mid = lo + (hi - lo) / 2;
		if (order[mid]->l.pid < s->pid)
			lo = mid + 1;
		else
			hi = mid;
	}
	size_t m = 0;
	while (lo + m < n && order[lo + m]->l.pid == s->pid)
		m++;
	s->locks = &snap->locks[*out];
	s->nlocks = m;
	for (size_t k = 0; k < m; k++) {
		pgc_diag_lock *l = &snap->locks[(*out)++];
		*l = order[lo + k]->l;
		l->target = pgc__diag_lock_target(b->a, l);
		if (!l->granted && s->wants == NULL) {
			s->wants = l;
			s->waited_s = l->waited_s;
		}
	}
	name_row_wait(b->a, s);
}

/* The transaction in which PGC_LOCK_HOLD_XACT (pgcoord run through a transaction-mode pooler)
 * holds its lock: named so by lock.c inside the transaction, idle in it, with neither a
 * transaction id nor a snapshot (it holds back neither vacuum nor anyone's row), and holding
 * nothing but advisory locks and its own virtual transaction id. */
static bool pgcoord_holder(const raw_session *x, const pgc_diag_session *s)
{
	if (!x->no_xid || s->application == NULL || strcmp(s->application, PGC_LOCK_HOLDER_APPLICATION) != 0 ||
	    s->state == NULL || strcmp(s->state, "idle in transaction") != 0)
		return false;
	for (size_t k = 0; k < s->nlocks; k++) {
		const pgc_diag_lock *l = &s->locks[k];
		bool own_vxid = l->locktype && strcmp(l->locktype, "virtualxid") == 0 && l->mode &&
		                strcmp(l->mode, "ExclusiveLock") == 0;
		if (!l->granted || (l->key == NULL && !own_vxid))
			return false;
	}
	return true;
}

/* Sessions in age order, each session's locks together (granted first), then the locks of
 * prepared transactions that have no placeholder session. */
static int assemble(builder *b, pgc_error *err)
{
	pgc_diag_snapshot *snap = b->snap;
	size_t nlk = b->nkept_locks;
	raw_lock **order = malloc((nlk ? nlk : 1) * sizeof *order);
	snap->sessions = pgc__arena_alloc(b->a, (b->nrs ? b->nrs : 1) * sizeof *snap->sessions);
	snap->locks = pgc__arena_alloc(b->a, (nlk ? nlk : 1) * sizeof *snap->locks);
	if (order == NULL || snap->sessions == NULL || snap->locks == NULL) {
		free(order);
		return oom(err);
	}
	size_t nord = 0;
	for (size_t k = 0; k < b->nrl; k++)
		if (b->rl[k].kept)
			order[nord++] = &b->rl[k];
	if (nord > 1)
		qsort(order, nord, sizeof *order, cmp_lock_pid_order);
	snap->nsessions = b->nrs;
	size_t out = 0;
	for (size_t i = 0; i < b->nrs; i++) {
		snap->sessions[i] = b->rs[i].s;
		snap->sessions[i].blocked_by = b->rs[i].blockers;
		snap->sessions[i].nblocked_by = b->rs[i].nblockers;
		place_locks(b, i, order, &out);
		snap->sessions[i].pgcoord_holder = pgcoord_holder(&b->rs[i], &snap->sessions[i]);
	}
	free(order);
	for (size_t k = 0; k < b->nrl; k++)
		if (b->rl[k].kept && pgc__pid_index_find(b->map, b->nrs, b->rl[k].l.pid) < 0) {
			pgc_diag_lock *l = &snap->locks[out++];
			*l = b->rl[k].l;
			l->target = pgc__diag_lock_target(b->a, l);
		}
	snap->nlocks = out;
	return b->a->failed ? oom(err) : PGC_OK;
}

/* ---- the public calls ---- */

static int check_args(pgc_conn *conn, const pgc_diag_options *opts, pgc_diag_snapshot **out,
                      pgc_error *err)
{
	if (out == NULL)
		return pgc__err(err, PGC_EUSAGE, "pgc_diag_snapshot_take: out must not be NULL");
	*out = NULL;
	if (conn == NULL)
		return pgc__err(err, PGC_EUSAGE, "pgc_diag_snapshot_take: conn must not be NULL");
	int rc = pgc__check_schema(opts->schema, err);
	if (rc != PGC_OK)
		pgc__err_prefix(err, "pgc_diag_snapshot_take");
	return rc;
}

int pgc_diag_snapshot_take(pgc_conn *conn, const pgc_diag_options *opts, pgc_diag_snapshot **out,
                           pgc_error *err)
{
	pgc_error_clear(err);
	pgc_diag_options defaults = PGC_DIAG_OPTIONS_INIT;
	if (opts == NULL)
		opts = &defaults;
	int rc = check_args(conn, opts, out, err);
	if (rc != PGC_OK)
		return rc;
	snap_internal *in = calloc(1, sizeof *in);
	pgc_diag_snapshot *snap = calloc(1, sizeof *snap);
	if (in == NULL || snap == NULL) {
		free(in);
		free(snap);
		return oom(err);
	}
	snap->internal_ = in;
	snap->all_databases = opts->all_databases;
	snap->self_pid = pgc_conn_backend_pid(conn);
	builder b = { .conn = conn, .opts = opts, .snap = snap, .a = &in->ar,
	              .schema = opts->schema ? opts->schema : PGC_SCHEMA_DEFAULT };
	if ((rc = read_rows(&b, err)) == PGC_OK && (rc = add_placeholders(&b, err)) == PGC_OK &&
	    (rc = keep_in_scope(&b, err)) == PGC_OK && (rc = lookup_names(&b, err)) == PGC_OK &&
	    (rc = assemble(&b, err)) == PGC_OK)
		rc = pgc__diag_graph_build(snap, b.a, err);
	builder_free(&b);
	if (rc != PGC_OK) {
		pgc_diag_snapshot_free(snap);
		return rc;
	}
	*out = snap;
	return PGC_OK;
}

void pgc_diag_snapshot_free(pgc_diag_snapshot *snap)
{
	if (snap == NULL)
		return;
	snap_internal *in = snap->internal_;
	if (in != NULL) {
		pgc__arena_free(&in->ar);
		free(in);
	}
	free(snap);
}

const pgc_diag_session *pgc_diag_session_find(const pgc_diag_snapshot *snap, int pid)
{
	if (snap == NULL)
		return NULL;
	for (size_t i = 0; i < snap->nsessions; i++)
		if (snap->sessions[i].pid == pid)
			return &snap->sessions[i];
	return NULL;
}

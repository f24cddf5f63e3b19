/* diag.c - lock forensics: snapshots of sessions, locks and wait-for edges; cancel/terminate;
 * the lock probe
 *
 * A snapshot is one SQL statement: pg_locks and pg_stat_activity are each read once (the CTEs
 * are materialized) and pg_blocking_pids() is called only for backends that wait, because each
 * call briefly takes the whole lock manager. Everything the caller sees is copied into an arena
 * owned by the snapshot, so the PGresult is freed at once and the snapshot is plain memory.
 * The wait-for graph is walked with explicit visited marks: a cycle is found once (Tarjan's
 * strongly connected components) and never followed round. */
#include <errno.h>
#include <inttypes.h>
#include <poll.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>

#include "internal.h"

/* ---- arena: every string and array a snapshot hands out ---- */

typedef struct arena_block {
	struct arena_block *next;
	size_t used, cap;
	max_align_t data[];
} arena_block;

typedef struct arena {
	arena_block *head;
	bool failed;
} arena;

static void *arena_alloc(arena *a, size_t n)
{
	n = (n + sizeof(max_align_t) - 1) / sizeof(max_align_t) * sizeof(max_align_t);
	if (n == 0)
		n = sizeof(max_align_t);
	arena_block *b = a->head;
	if (b == NULL || b->cap - b->used < n) {
		size_t cap = n > 16384 ? n : 16384;
		b = malloc(sizeof *b + cap);
		if (b == NULL) {
			a->failed = true;
			return NULL;
		}
		b->next = a->head;
		b->used = 0;
		b->cap = cap;
		a->head = b;
	}
	void *p = (char *)b->data + b->used;
	b->used += n;
	return p;
}

static void arena_free(arena *a)
{
	arena_block *b = a->head;
	while (b != NULL) {
		arena_block *next = b->next;
		free(b);
		b = next;
	}
	a->head = NULL;
}

static char *arena_strdup(arena *a, const char *s)
{
	if (s == NULL)
		return NULL;
	size_t n = strlen(s) + 1;
	char *p = arena_alloc(a, n);
	if (p != NULL)
		memcpy(p, s, n);
	return p;
}

static char *arena_printf(arena *a, const char *fmt, ...) PGC_PRINTF(2, 3);
static char *arena_printf(arena *a, const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	int n = vsnprintf(NULL, 0, fmt, ap);
	va_end(ap);
	if (n < 0)
		return NULL;
	char *p = arena_alloc(a, (size_t)n + 1);
	if (p == NULL)
		return NULL;
	va_start(ap, fmt);
	vsnprintf(p, (size_t)n + 1, fmt, ap);
	va_end(ap);
	return p;
}

/* A PGresult value as an arena string, NULL for SQL NULL. */
static char *col_str(arena *a, const PGresult *r, int row, int col)
{
	if (PQgetisnull(r, row, col))
		return NULL;
	return arena_strdup(a, PQgetvalue(r, row, col));
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
	C_BACKEND_AGE, C_XACT_AGE, C_QUERY_AGE, C_STATE_AGE, C_BLOCKERS,
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
	"  b.pids,\n"
	"  NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL\n"
	"FROM a CROSS JOIN t LEFT JOIN b ON b.pid = a.pid\n"
	"UNION ALL\n"
	"SELECT 'l', coalesce(l.pid, 0), d.datname::text, t.at, t.curdb,\n"
	"  NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL,\n"
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

/* Raw rows while the snapshot is built. */
typedef struct raw_session {
	pgc_diag_session s;
	int *blockers;
	size_t nblockers;
	bool kept;
} raw_session;

typedef struct raw_lock {
	pgc_diag_lock l;
	uint32_t classid, objid;
	int objsubid;
	bool kept;
} raw_lock;

typedef struct snap_internal {
	arena ar;
} snap_internal;

typedef struct pid_index {
	int pid;
	size_t idx;
} pid_index;

static int cmp_pid_index(const void *a, const void *b)
{
	const pid_index *x = a, *y = b;
	return (x->pid > y->pid) - (x->pid < y->pid);
}

static long find_idx(const pid_index *map, size_t n, int pid)
{
	size_t lo = 0, hi = n;
	while (lo < hi) {
		size_t mid = lo + (hi - lo) / 2;
		if (map[mid].pid == pid)
			return (long)map[mid].idx;
		if (map[mid].pid < pid)
			lo = mid + 1;
		else
			hi = mid;
	}
	return -1;
}

static const char *relkind_name(const char *k)
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
static int *parse_pids(arena *a, const char *text, int self, size_t *n)
{
	*n = 0;
	if (text == NULL)
		return NULL;
	size_t cap = 1;
	for (const char *p = text; *p; p++)
		if (*p == ',')
			cap++;
	int *out = arena_alloc(a, cap * sizeof *out);
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

/* An advisory key as diagnostics print it: "4242 (0,4242)" for a bigint key, "(20,7)" for an
 * int4 pair. The one place that formats keys, so that it can follow the library's key format. */
static int format_key(const pgc_diag_lock *lock, char *buf, size_t size)
{
	/* Advisory keys print as the bigint and as the (int4,int4) pair it is made of, so a key
	 * can be matched whichever way the application took it. */
	switch (lock->key_form) {
	case PGC_DIAG_KEY_BIGINT:
		return snprintf(buf, size, "%" PRId64 " (%" PRId32 ",%" PRId32 ")", lock->key, lock->key1,
		                lock->key2);
	case PGC_DIAG_KEY_INT4_PAIR:
		return snprintf(buf, size, "(%" PRId32 ",%" PRId32 ")", lock->key1, lock->key2);
	default:
		return -1;
	}
}

/* One line naming what a lock is on. Called after names were looked up. */
static char *lock_target(arena *a, const pgc_diag_lock *l)
{
	const char *t = l->locktype ? l->locktype : "?";
	const char *rel = l->relation ? l->relation : "?";
	if (strcmp(t, "relation") == 0) {
		const char *kind = l->relkind && strcmp(l->relkind, "table") != 0 ? l->relkind : "relation";
		return arena_printf(a, "%s %s", kind, rel);
	}
	if (strcmp(t, "extend") == 0)
		return arena_printf(a, "extension of %s", rel);
	if (strcmp(t, "page") == 0)
		return arena_printf(a, "page %ld of %s", l->page, rel);
	if (strcmp(t, "tuple") == 0)
		return arena_printf(a, "row (%ld,%ld) of %s", l->page, l->tuple, rel);
	if (strcmp(t, "transactionid") == 0)
		return arena_printf(a, "transaction %s", l->transactionid ? l->transactionid : "?");
	if (strcmp(t, "virtualxid") == 0)
		return arena_printf(a, "virtual transaction %s", l->virtualxid ? l->virtualxid : "?");
	if (strcmp(t, "advisory") == 0 && l->key_form != PGC_DIAG_KEY_NONE) {
		char key[64];
		format_key(l, key, sizeof key);
		if (l->key_name != NULL)
			return arena_printf(a, "advisory %s \"%s\"", key, l->key_name);
		return arena_printf(a, "advisory %s", key);
	}
	return arena_strdup(a, t);
}

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

/* Looks the bigint keys of advisory locks in the current database up in <schema>.lock_names.
 * A missing or unreadable table is not an error: the names are simply absent. */
static int lookup_names(pgc_conn *conn, const char *schema, raw_lock *locks, size_t nlocks,
                        const char *curdb, bool *available, pgc_error *err, arena *a)
{
	*available = false;
	size_t nkeys = 0;
	for (size_t i = 0; i < nlocks; i++)
		if (locks[i].kept && locks[i].l.key_form == PGC_DIAG_KEY_BIGINT && locks[i].l.database &&
		    strcmp(locks[i].l.database, curdb) == 0)
			nkeys++;
	if (nkeys == 0)
		return PGC_OK;
	char *qs = pgc__quote_ident(conn, schema, err);
	if (qs == NULL)
		return PGC_EUSAGE;
	char *regname = arena_printf(a, "%s.lock_names", qs);
	char *sql = arena_printf(a, "SELECT n.key::text, n.name FROM %s.lock_names n "
	                            "WHERE n.key = ANY($1::bigint[])", qs);
	PQfreemem(qs);
	/* 22 characters per key is enough for any bigint and a comma. */
	char *list = arena_alloc(a, nkeys * 22 + 3);
	if (regname == NULL || sql == NULL || list == NULL)
		return pgc__err(err, PGC_ENOMEM, "out of memory");
	const char *p1[1] = { regname };
	int rc;
	PGresult *r = pgc__exec(conn, "SELECT pg_catalog.to_regclass($1) IS NOT NULL", 1, p1, &rc, err);
	if (r == NULL)
		return rc;
	bool exists = PQgetvalue(r, 0, 0)[0] == 't';
	PQclear(r);
	if (!exists)
		return PGC_OK;
	size_t off = 0;
	list[off++] = '{';
	for (size_t i = 0; i < nlocks; i++)
		if (locks[i].kept && locks[i].l.key_form == PGC_DIAG_KEY_BIGINT && locks[i].l.database &&
		    strcmp(locks[i].l.database, curdb) == 0)
			off += (size_t)sprintf(list + off, "%s%" PRId64, off > 1 ? "," : "", locks[i].l.key);
	list[off++] = '}';
	list[off] = '\0';
	const char *p2[1] = { list };
	pgc_error ignored;
	r = pgc__exec(conn, sql, 1, p2, &rc, &ignored);
	if (r == NULL) {
		/* No privilege on the registry (or it has another shape): go on without names, but
		 * not without the session. */
		if (rc == PGC_ECONNLOST) {
			*err = ignored;
			return rc;
		}
		return PGC_OK;
	}
	*available = true;
	for (int row = 0; row < PQntuples(r); row++) {
		int64_t key = strtoll(PQgetvalue(r, row, 0), NULL, 10);
		char *name = NULL;
		for (size_t i = 0; i < nlocks; i++)
			if (locks[i].kept && locks[i].l.key_form == PGC_DIAG_KEY_BIGINT &&
			    locks[i].l.key == key && locks[i].l.database &&
			    strcmp(locks[i].l.database, curdb) == 0) {
				if (name == NULL)
					name = arena_strdup(a, PQgetvalue(r, row, 1));
				locks[i].l.key_name = name;
			}
	}
	PQclear(r);
	return PGC_OK;
}

/* Tarjan's strongly connected components over waiter -> blocker edges, recursive: the depth is
 * bounded by the number of sessions, and every node is entered once. */
typedef struct tarjan {
	pgc_diag_session *s;
	const pid_index *map;
	size_t n, nmap;
	long *index, *low;
	bool *on_stack;
	size_t *stack, sp;
	long counter;
	int ncycles;
	arena *a;
	pgc_diag_cycle *cycles;
	size_t cycles_cap;
	bool oom;
} tarjan;

static void strong(tarjan *t, size_t v)
{
	t->index[v] = t->low[v] = t->counter++;
	t->stack[t->sp++] = v;
	t->on_stack[v] = true;
	for (size_t k = 0; k < t->s[v].nblocked_by; k++) {
		long w = find_idx(t->map, t->nmap, t->s[v].blocked_by[k]);
		if (w < 0)
			continue;
		if (t->index[w] < 0) {
			strong(t, (size_t)w);
			if (t->low[w] < t->low[v])
				t->low[v] = t->low[w];
		} else if (t->on_stack[w] && t->index[w] < t->low[v]) {
			t->low[v] = t->index[w];
		}
	}
	if (t->low[v] != t->index[v])
		return;
	size_t start = t->sp;
	do
		start--;
	while (t->stack[start] != v);
	size_t size = t->sp - start;
	if (size > 1) {
		int id = ++t->ncycles;
		int *pids = arena_alloc(t->a, size * sizeof *pids);
		if (pids == NULL || (size_t)id > t->cycles_cap) {
			t->oom = true;
		} else {
			for (size_t i = 0; i < size; i++) {
				pids[i] = t->s[t->stack[start + i]].pid;
				t->s[t->stack[start + i]].cycle = id;
			}
			t->cycles[id - 1].pids = pids;
			t->cycles[id - 1].npids = size;
		}
	}
	for (size_t i = start; i < t->sp; i++)
		t->on_stack[t->stack[i]] = false;
	t->sp = start;
}

typedef struct root_key {
	int pid;
	size_t total;
	double age;
} root_key;

static int cmp_root(const void *a, const void *b)
{
	const root_key *x = a, *y = b;
	if (x->total != y->total)
		return x->total < y->total ? 1 : -1;
	if (x->age != y->age)
		return x->age < y->age ? 1 : -1;
	return (x->pid > y->pid) - (x->pid < y->pid);
}

/* Edges, direct waiters, transitive counts, cycles, roots and queued DDL, on the final arrays. */
static int build_graph(pgc_diag_snapshot *snap, arena *a, pgc_error *err)
{
	size_t n = snap->nsessions;
	pid_index *map = malloc((n ? n : 1) * sizeof *map);
	size_t *nwaiters = calloc(n ? n : 1, sizeof *nwaiters);
	size_t *stamp = calloc(n ? n : 1, sizeof *stamp);
	size_t *queue = malloc((n ? n : 1) * sizeof *queue);
	long *index = malloc((n ? n : 1) * sizeof *index);
	long *low = malloc((n ? n : 1) * sizeof *low);
	bool *on_stack = calloc(n ? n : 1, sizeof *on_stack);
	size_t *stack = malloc((n ? n : 1) * sizeof *stack);
	root_key *roots = malloc((n ? n : 1) * sizeof *roots);
	int rc = PGC_OK;
	if (!map || !nwaiters || !stamp || !queue || !index || !low || !on_stack || !stack || !roots) {
		rc = pgc__err(err, PGC_ENOMEM, "out of memory");
		goto out;
	}
	for (size_t i = 0; i < n; i++) {
		map[i].pid = snap->sessions[i].pid;
		map[i].idx = i;
	}
	qsort(map, n, sizeof *map, cmp_pid_index);

	size_t nedges = 0;
	for (size_t i = 0; i < n; i++)
		nedges += snap->sessions[i].nblocked_by;
	snap->edges = arena_alloc(a, (nedges ? nedges : 1) * sizeof *snap->edges);
	if (snap->edges == NULL) {
		rc = pgc__err(err, PGC_ENOMEM, "out of memory");
		goto out;
	}
	snap->nedges = 0;
	for (size_t i = 0; i < n; i++) {
		pgc_diag_session *s = &snap->sessions[i];
		for (size_t k = 0; k < s->nblocked_by; k++) {
			long j = find_idx(map, n, s->blocked_by[k]);
			if (j < 0)
				continue;
			snap->edges[snap->nedges].waiter = s->pid;
			snap->edges[snap->nedges].blocker = s->blocked_by[k];
			snap->nedges++;
			nwaiters[j]++;
		}
		if (s->wants != NULL)
			snap->nwaiting++;
	}
	for (size_t i = 0; i < n; i++) {
		int *w = arena_alloc(a, (nwaiters[i] ? nwaiters[i] : 1) * sizeof *w);
		if (w == NULL) {
			rc = pgc__err(err, PGC_ENOMEM, "out of memory");
			goto out;
		}
		snap->sessions[i].blocks = w;
		snap->sessions[i].nblocks = 0;
	}
	for (size_t e = 0; e < snap->nedges; e++) {
		pgc_diag_session *b = &snap->sessions[find_idx(map, n, snap->edges[e].blocker)];
		((int *)b->blocks)[b->nblocks++] = snap->edges[e].waiter;
	}

	/* Everyone waiting on i, directly or not: a breadth-first walk over waiters that marks each
	 * session once per start, so cycles end the walk instead of feeding it. */
	for (size_t i = 0; i < n; i++) {
		if (snap->sessions[i].nblocks == 0)
			continue;
		size_t head = 0, tail = 0, count = 0;
		stamp[i] = i + 1;
		queue[tail++] = i;
		while (head < tail) {
			pgc_diag_session *s = &snap->sessions[queue[head++]];
			for (size_t k = 0; k < s->nblocks; k++) {
				long j = find_idx(map, n, s->blocks[k]);
				if (j < 0 || stamp[j] == i + 1)
					continue;
				stamp[j] = i + 1;
				queue[tail++] = (size_t)j;
				count++;
			}
		}
		snap->sessions[i].blocks_total = count;
	}

	tarjan t = { .s = snap->sessions, .map = map, .n = n, .nmap = n, .index = index, .low = low,
	             .on_stack = on_stack, .stack = stack, .a = a };
	t.cycles_cap = n / 2 + 1;
	t.cycles = arena_alloc(a, t.cycles_cap * sizeof *t.cycles);
	if (t.cycles == NULL) {
		rc = pgc__err(err, PGC_ENOMEM, "out of memory");
		goto out;
	}
	for (size_t i = 0; i < n; i++)
		index[i] = -1;
	for (size_t i = 0; i < n; i++)
		if (index[i] < 0 && snap->sessions[i].nblocked_by > 0)
			strong(&t, i);
	if (t.oom) {
		rc = pgc__err(err, PGC_ENOMEM, "out of memory");
		goto out;
	}
	snap->cycles = t.cycles;
	snap->ncycles = (size_t)t.ncycles;

	size_t nroots = 0;
	for (size_t i = 0; i < n; i++) {
		pgc_diag_session *s = &snap->sessions[i];
		s->root = s->nblocks > 0 && s->nblocked_by == 0;
		if (s->root) {
			roots[nroots].pid = s->pid;
			roots[nroots].total = s->blocks_total;
			roots[nroots].age = s->xact_age_s;
			nroots++;
		}
		s->queued_ddl = s->wants != NULL && s->nblocks > 0 && s->wants->locktype != NULL &&
		                strcmp(s->wants->locktype, "relation") == 0 &&
		                s->wants->table_mode >= PGC_SHARE_UPDATE_EXCLUSIVE;
	}
	qsort(roots, nroots, sizeof *roots, cmp_root);
	int *rp = arena_alloc(a, (nroots ? nroots : 1) * sizeof *rp);
	if (rp == NULL) {
		rc = pgc__err(err, PGC_ENOMEM, "out of memory");
		goto out;
	}
	for (size_t i = 0; i < nroots; i++)
		rp[i] = roots[i].pid;
	snap->roots = rp;
	snap->nroots = nroots;
out:
	free(map);
	free(nwaiters);
	free(stamp);
	free(queue);
	free(index);
	free(low);
	free(on_stack);
	free(stack);
	free(roots);
	return rc;
}

static int grow(void **p, size_t *cap, size_t need, size_t elem)
{
	if (need <= *cap)
		return 0;
	size_t c = *cap ? *cap * 2 : 64;
	while (c < need)
		c *= 2;
	void *q = realloc(*p, c * elem);
	if (q == NULL)
		return -1;
	*p = q;
	*cap = c;
	return 0;
}

int pgc_diag_snapshot_take(pgc_conn *conn, const pgc_diag_options *opts, pgc_diag_snapshot **out,
                           pgc_error *err)
{
	pgc_error_clear(err);
	if (out == NULL)
		return pgc__err(err, PGC_EUSAGE, "pgc_diag_snapshot_take: out must not be NULL");
	*out = NULL;
	if (conn == NULL)
		return pgc__err(err, PGC_EUSAGE, "pgc_diag_snapshot_take: conn must not be NULL");
	pgc_diag_options defaults = PGC_DIAG_OPTIONS_INIT;
	if (opts == NULL)
		opts = &defaults;
	const char *schema = opts->schema ? opts->schema : PGC_SCHEMA_DEFAULT;
	if (*schema == '\0')
		return pgc__err(err, PGC_EUSAGE, "pgc_diag_snapshot_take: schema must not be empty");

	snap_internal *in = calloc(1, sizeof *in);
	pgc_diag_snapshot *snap = calloc(1, sizeof *snap);
	raw_session *rs = NULL;
	raw_lock *rl = NULL;
	raw_lock **order = NULL;
	pid_index *map = NULL;
	size_t nrs = 0, caprs = 0, nrl = 0, caprl = 0;
	PGresult *r = NULL;
	int rc = PGC_OK;
	if (in == NULL || snap == NULL) {
		free(in);
		free(snap);
		return pgc__err(err, PGC_ENOMEM, "out of memory");
	}
	snap->internal_ = in;
	arena *a = &in->ar;
	snap->all_databases = opts->all_databases;
	snap->self_pid = pgc_conn_backend_pid(conn);

	/* Inside a transaction block the server keeps the activity it first read for the rest of
	 * the transaction; drop it so that this snapshot is current. */
	if (pgc__in_transaction(conn)) {
		r = pgc__exec(conn, "SELECT pg_catalog.pg_stat_clear_snapshot()", 0, NULL, &rc, err);
		if (r == NULL)
			goto fail;
		PQclear(r);
		r = NULL;
	}
	char sql[sizeof snapshot_sql + 64];
	int version = pgc_conn_server_version(conn);
	const char *mat = version >= 120000 ? "MATERIALIZED " : "";
	snprintf(sql, sizeof sql, snapshot_sql, mat, mat,
	         version >= 140000 ? "l.waitstart" : "NULL::timestamptz");
	r = pgc__exec(conn, sql, 0, NULL, &rc, err);
	if (r == NULL)
		goto fail;
	if (PQnfields(r) != C_COUNT) {
		rc = pgc__err(err, PGC_EINTERNAL, "snapshot query returned %d columns, expected %d",
		              PQnfields(r), C_COUNT);
		goto fail;
	}

	int self = snap->self_pid;
	for (int row = 0; row < PQntuples(r); row++) {
		if (snap->taken_at == NULL) {
			snap->taken_at = col_str(a, r, row, C_TAKEN_AT);
			snap->database = col_str(a, r, row, C_CURDB);
		}
		int pid = (int)col_ll(r, row, C_PID, 0);
		if (pid == self && !opts->include_self)
			continue;
		if (PQgetvalue(r, row, C_KIND)[0] == 's') {
			if (grow((void **)&rs, &caprs, nrs + 1, sizeof *rs) != 0)
				goto oom;
			raw_session *x = &rs[nrs++];
			memset(x, 0, sizeof *x);
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
			s->xact_age_s = col_f(r, row, C_XACT_AGE);
			s->query_age_s = col_f(r, row, C_QUERY_AGE);
			s->state_age_s = col_f(r, row, C_STATE_AGE);
			s->waited_s = -1;
			x->blockers = parse_pids(a, PQgetisnull(r, row, C_BLOCKERS) ? NULL
			                                  : PQgetvalue(r, row, C_BLOCKERS), pid, &x->nblockers);
		} else {
			if (grow((void **)&rl, &caprl, nrl + 1, sizeof *rl) != 0)
				goto oom;
			raw_lock *x = &rl[nrl++];
			memset(x, 0, sizeof *x);
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
				l->relation = arena_printf(a, "%u", l->relation_oid);
			l->relkind = relkind_name(PQgetisnull(r, row, C_RELKIND) ? NULL
			                                  : PQgetvalue(r, row, C_RELKIND));
			l->page = (long)col_ll(r, row, C_PAGE, -1);
			l->tuple = (long)col_ll(r, row, C_TUPLE, -1);
			l->transactionid = col_str(a, r, row, C_XID);
			l->virtualxid = col_str(a, r, row, C_VXID);
			if (l->locktype && strcmp(l->locktype, "relation") == 0)
				l->table_mode = pgc_table_lock_parse(l->mode);
			x->classid = (uint32_t)col_ll(r, row, C_CLASSID, 0);
			x->objid = (uint32_t)col_ll(r, row, C_OBJID, 0);
			x->objsubid = (int)col_ll(r, row, C_OBJSUBID, 0);
			if (l->locktype && strcmp(l->locktype, "advisory") == 0) {
				/* pg_locks shows a bigint key as its high half in classid and its low half
				 * in objid with objsubid 1; two int4 keys as classid, objid, objsubid 2. */
				l->key1 = (int32_t)x->classid;
				l->key2 = (int32_t)x->objid;
				if (x->objsubid == 1) {
					l->key_form = PGC_DIAG_KEY_BIGINT;
					l->key = (int64_t)(((uint64_t)x->classid << 32) | (uint64_t)x->objid);
				} else if (x->objsubid == 2) {
					l->key_form = PGC_DIAG_KEY_INT4_PAIR;
				}
			}
		}
		if (a->failed)
			goto oom;
	}
	PQclear(r);
	r = NULL;
	if (snap->database == NULL)
		snap->database = arena_strdup(a, "");

	/* Blockers with no row of their own (a prepared transaction is pid 0) become placeholders,
	 * so every edge has two ends. */
	size_t nreal = nrs;
	for (size_t i = 0; i < nreal; i++) {
		for (size_t k = 0; k < rs[i].nblockers; k++) {
			int b = rs[i].blockers[k];
			bool found = false;
			for (size_t j = 0; j < nrs && !found; j++)
				found = rs[j].s.pid == b;
			if (found)
				continue;
			if (grow((void **)&rs, &caprs, nrs + 1, sizeof *rs) != 0)
				goto oom;
			raw_session *x = &rs[nrs++];
			memset(x, 0, sizeof *x);
			x->s.pid = b;
			x->s.state = b == 0 ? "prepared transaction" : "unknown (not in pg_stat_activity)";
			x->s.backend_age_s = x->s.xact_age_s = x->s.query_age_s = x->s.state_age_s = -1;
			x->s.waited_s = -1;
		}
	}

	/* Scope: the current database, plus whoever waits for or blocks a session in it. */
	map = malloc((nrs ? nrs : 1) * sizeof *map);
	if (map == NULL)
		goto oom;
	for (size_t i = 0; i < nrs; i++) {
		map[i].pid = rs[i].s.pid;
		map[i].idx = i;
		rs[i].kept = opts->all_databases ||
		             (rs[i].s.database && strcmp(rs[i].s.database, snap->database) == 0);
	}
	qsort(map, nrs, sizeof *map, cmp_pid_index);
	for (bool changed = true; changed;) {
		changed = false;
		for (size_t i = 0; i < nrs; i++)
			for (size_t k = 0; k < rs[i].nblockers; k++) {
				long j = find_idx(map, nrs, rs[i].blockers[k]);
				if (j < 0 || rs[i].kept == rs[j].kept)
					continue;
				rs[i].kept = rs[j].kept = true;
				changed = true;
			}
	}
	size_t nkeep = 0;
	for (size_t i = 0; i < nrs; i++)
		if (rs[i].kept)
			rs[nkeep++] = rs[i];
	nrs = nkeep;
	if (nrs > 1)
		qsort(rs, nrs, sizeof *rs, cmp_session_age);
	for (size_t i = 0; i < nrs; i++) {
		map[i].pid = rs[i].s.pid;
		map[i].idx = i;
	}
	qsort(map, nrs, sizeof *map, cmp_pid_index);

	size_t nlk = 0;
	for (size_t i = 0; i < nrl; i++) {
		long j = find_idx(map, nrs, rl[i].l.pid);
		rl[i].kept = j >= 0 || (rl[i].l.pid == 0 &&
		             (opts->all_databases || (rl[i].l.database &&
		                                      strcmp(rl[i].l.database, snap->database) == 0)));
		if (rl[i].kept)
			nlk++;
	}
	if (opts->names) {
		rc = lookup_names(conn, schema, rl, nrl, snap->database, &snap->names_available, err, a);
		if (rc != PGC_OK)
			goto fail;
	}

	/* Final arrays: sessions in age order, each session's locks together, granted first. */
	order = malloc((nlk ? nlk : 1) * sizeof *order);
	snap->sessions = arena_alloc(a, (nrs ? nrs : 1) * sizeof *snap->sessions);
	snap->locks = arena_alloc(a, (nlk ? nlk : 1) * sizeof *snap->locks);
	if (order == NULL || snap->sessions == NULL || snap->locks == NULL)
		goto oom;
	size_t nord = 0;
	for (size_t k = 0; k < nrl; k++)
		if (rl[k].kept)
			order[nord++] = &rl[k];
	if (nord > 1)
		qsort(order, nord, sizeof *order, cmp_lock_pid_order);
	snap->nsessions = nrs;
	size_t out_l = 0;
	for (size_t i = 0; i < nrs; i++) {
		pgc_diag_session *s = &snap->sessions[i];
		*s = rs[i].s;
		s->blocked_by = rs[i].blockers;
		s->nblocked_by = rs[i].nblockers;
		/* order is sorted by pid: find this session's run. */
		size_t lo = 0, hi = nlk;
		while (lo < hi) {
			size_t mid = lo + (hi - lo) / 2;
			if (order[mid]->l.pid < s->pid)
				lo = mid + 1;
			else
				hi = mid;
		}
		size_t m = 0;
		while (lo + m < nlk && order[lo + m]->l.pid == s->pid)
			m++;
		s->locks = &snap->locks[out_l];
		s->nlocks = m;
		for (size_t k = 0; k < m; k++) {
			pgc_diag_lock *l = &snap->locks[out_l++];
			*l = order[lo + k]->l;
			l->target = lock_target(a, l);
			if (!l->granted && s->wants == NULL) {
				s->wants = l;
				s->waited_s = l->waited_s;
			}
		}
		/* A row-lock wait shows as a wait for the holder's transaction; the row itself is the
		 * tuple lock the waiter already holds. Name it. */
		if (s->wants && s->wants->locktype && strcmp(s->wants->locktype, "transactionid") == 0)
			for (size_t k = 0; k < m; k++) {
				const pgc_diag_lock *t = &s->locks[k];
				if (t->granted && t->locktype && strcmp(t->locktype, "tuple") == 0) {
					pgc_diag_lock *w = (pgc_diag_lock *)s->wants;
					w->target = arena_printf(a, "%s (%s)", w->target, t->target);
					break;
				}
			}
	}
	/* Locks of prepared transactions that have no placeholder session. */
	for (size_t k = 0; k < nrl; k++)
		if (rl[k].kept && find_idx(map, nrs, rl[k].l.pid) < 0) {
			pgc_diag_lock *l = &snap->locks[out_l++];
			*l = rl[k].l;
			l->target = lock_target(a, l);
		}
	snap->nlocks = out_l;
	if (a->failed)
		goto oom;
	rc = build_graph(snap, a, err);
	if (rc != PGC_OK)
		goto fail;
	free(rs);
	free(rl);
	free(order);
	free(map);
	*out = snap;
	return PGC_OK;
oom:
	rc = pgc__err(err, PGC_ENOMEM, "out of memory");
fail:
	PQclear(r);
	free(rs);
	free(rl);
	free(order);
	free(map);
	pgc_diag_snapshot_free(snap);
	return rc;
}

void pgc_diag_snapshot_free(pgc_diag_snapshot *snap)
{
	if (snap == NULL)
		return;
	snap_internal *in = snap->internal_;
	if (in != NULL) {
		arena_free(&in->ar);
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

/* Two pg_locks rows name the same lockable object. */
static bool same_object(const pgc_diag_lock *a, const pgc_diag_lock *b)
{
	if (a->locktype == NULL || b->locktype == NULL || strcmp(a->locktype, b->locktype) != 0)
		return false;
	const char *t = a->locktype;
	if (strcmp(t, "relation") == 0 || strcmp(t, "extend") == 0)
		return a->relation_oid == b->relation_oid;
	if (strcmp(t, "page") == 0 || strcmp(t, "tuple") == 0)
		return a->relation_oid == b->relation_oid && a->page == b->page && a->tuple == b->tuple;
	if (strcmp(t, "transactionid") == 0)
		return a->transactionid && b->transactionid && strcmp(a->transactionid, b->transactionid) == 0;
	if (strcmp(t, "virtualxid") == 0)
		return a->virtualxid && b->virtualxid && strcmp(a->virtualxid, b->virtualxid) == 0;
	if (strcmp(t, "advisory") == 0)
		return a->key_form == b->key_form && a->key1 == b->key1 && a->key2 == b->key2 &&
		       ((a->database == NULL && b->database == NULL) ||
		        (a->database && b->database && strcmp(a->database, b->database) == 0));
	return false;
}

const pgc_diag_lock *pgc_diag_blocking_lock(const pgc_diag_session *waiter,
                                           const pgc_diag_session *blocker, bool *queued)
{
	if (queued != NULL)
		*queued = false;
	if (waiter == NULL || blocker == NULL || waiter->wants == NULL)
		return NULL;
	const pgc_diag_lock *w = waiter->wants;
	/* Every lock type of the default lock method uses the same eight modes, so the table-lock
	 * conflict matrix decides for advisory, transaction and tuple locks too. */
	pgc_table_lock wm = pgc_table_lock_parse(w->mode);
	for (size_t i = 0; i < blocker->nlocks; i++) {
		const pgc_diag_lock *l = &blocker->locks[i];
		if (l->granted && same_object(l, w) &&
		    pgc_table_lock_conflicts(pgc_table_lock_parse(l->mode), wm))
			return l;
	}
	if (blocker->wants != NULL && same_object(blocker->wants, w)) {
		if (queued != NULL)
			*queued = true;
		return blocker->wants;
	}
	return NULL;
}

/* ---- cancel and terminate ---- */

typedef struct notice_capture {
	char *buf;
	size_t size;
} notice_capture;

static void capture_warning(void *arg, const PGresult *res)
{
	notice_capture *c = arg;
	const char *sev = PQresultErrorField(res, PG_DIAG_SEVERITY_NONLOCALIZED);
	const char *msg = PQresultErrorField(res, PG_DIAG_MESSAGE_PRIMARY);
	if (msg == NULL || c->buf[0] != '\0')
		return;
	if (sev == NULL || strcmp(sev, "WARNING") == 0)
		pgc__copy_line(c->buf, c->size, msg);
}

static void sleep_ms(int ms)
{
	struct timespec ts = { ms / 1000, (long)(ms % 1000) * 1000000L };
	while (nanosleep(&ts, &ts) != 0 && errno == EINTR)
		;
}

/* The state and query_start of pid, or found = false. */
static int peek_session(pgc_conn *conn, int pid, bool *found, char *state, size_t ssize,
                        char *qstart, size_t qsize, pgc_error *err)
{
	char p[16];
	snprintf(p, sizeof p, "%d", pid);
	const char *params[1] = { p };
	int rc;
	PGresult *r = pgc__exec(conn, "SELECT coalesce(state, ''), coalesce(query_start::text, '') "
	                              "FROM pg_catalog.pg_stat_activity WHERE pid = $1::int",
	                        1, params, &rc, err);
	if (r == NULL)
		return rc;
	*found = PQntuples(r) > 0;
	if (*found) {
		pgc__copy_line(state, ssize, PQgetvalue(r, 0, 0));
		pgc__copy_line(qstart, qsize, PQgetvalue(r, 0, 1));
	}
	PQclear(r);
	return PGC_OK;
}

int pgc_diag_signal(pgc_conn *conn, int pid, pgc_diag_signal_kind kind, int wait_ms,
                    pgc_diag_signal_result *out, pgc_error *err)
{
	pgc_error_clear(err);
	if (conn == NULL || out == NULL)
		return pgc__err(err, PGC_EUSAGE, "pgc_diag_signal: conn and out must not be NULL");
	memset(out, 0, sizeof *out);
	if (kind != PGC_DIAG_CANCEL && kind != PGC_DIAG_TERMINATE)
		return pgc__err(err, PGC_EUSAGE, "pgc_diag_signal: kind must be PGC_DIAG_CANCEL or PGC_DIAG_TERMINATE");
	if (pid <= 0)
		return pgc__err(err, PGC_EUSAGE, "invalid pid %d: must be a positive backend pid", pid);
	if (wait_ms < 0)
		return pgc__err(err, PGC_EUSAGE, "pgc_diag_signal: wait_ms must not be negative");
	if (pid == pgc_conn_backend_pid(conn))
		return pgc__err(err, PGC_EUSAGE, "pid %d is this session's own backend; refusing to %s it",
		                pid, kind == PGC_DIAG_CANCEL ? "cancel" : "terminate");

	bool found = false;
	char state0[64] = "", qstart0[64] = "";
	int rc = peek_session(conn, pid, &found, state0, sizeof state0, qstart0, sizeof qstart0, err);
	if (rc != PGC_OK)
		return rc;
	if (!found)
		return pgc__err(err, PGC_ENOTFOUND, "no session with pid %d", pid);

	char p[16], w[24];
	snprintf(p, sizeof p, "%d", pid);
	snprintf(w, sizeof w, "%d", wait_ms);
	const char *params[2] = { p, w };
	const char *sql;
	int nparams = 1;
	if (kind == PGC_DIAG_CANCEL) {
		sql = "SELECT pg_catalog.pg_cancel_backend($1::int)";
	} else if (pgc_conn_server_version(conn) >= 140000 && wait_ms > 0) {
		/* The server waits for the backend to exit and warns when it did not in time. */
		sql = "SELECT pg_catalog.pg_terminate_backend($1::int, $2::int8)";
		nparams = 2;
	} else {
		sql = "SELECT pg_catalog.pg_terminate_backend($1::int)";
	}
	/* The server explains a false result only in a WARNING. A session of our own receives it,
	 * so the caller's notice receiver on conn (which libpq cannot hand back) is never touched. */
	pgc_conn *sig = NULL;
	rc = pgc__open_like(conn, NULL, &sig, err);
	if (rc != PGC_OK)
		return rc;
	notice_capture cap = { out->warning, sizeof out->warning };
	PQsetNoticeReceiver(pgc_conn_pg(sig), capture_warning, &cap);
	PGresult *r = pgc__exec(sig, sql, nparams, params, &rc, err);
	pgc_conn_close(sig);
	if (r == NULL)
		return rc;
	out->done = PQgetvalue(r, 0, 0)[0] == 't';
	PQclear(r);

	/* Watch what became of it, within wait_ms. */
	int64_t deadline = pgc__now_ms() + wait_ms;
	for (;;) {
		char state[64] = "", qstart[64] = "";
		rc = peek_session(conn, pid, &found, state, sizeof state, qstart, sizeof qstart, err);
		if (rc != PGC_OK)
			return rc;
		if (!found) {
			out->gone = true;
			out->state[0] = '\0';
			break;
		}
		snprintf(out->state, sizeof out->state, "%s", state);
		if (!out->done)
			break;
		if (kind == PGC_DIAG_CANCEL &&
		    (strcmp(state, "active") != 0 || strcmp(qstart, qstart0) != 0))
			break;
		if (pgc__now_ms() >= deadline)
			break;
		sleep_ms(20);
	}
	return PGC_OK;
}

/* ---- probe ---- */

/* The leading words of a statement, upper-cased, outside comments, strings and quoted names,
 * enough to recognise what cannot run inside BEGIN ... ROLLBACK. */
#define PROBE_WORDS 48

typedef struct stmt_words {
	char w[PROBE_WORDS][24];
	size_t n;
	bool empty;
	bool several;   /* a second statement follows a semicolon */
	bool stdin_seen;
	bool concurrently;
	bool locking_clause; /* FOR UPDATE, FOR NO KEY UPDATE, FOR SHARE, FOR KEY SHARE */
} stmt_words;

static bool is_word_char(char c)
{
	return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_' ||
	       (unsigned char)c >= 0x80;
}

static void scan_words(const char *sql, stmt_words *out)
{
	memset(out, 0, sizeof *out);
	const char *p = sql;
	bool after_semicolon = false, any = false, after_for = false;
	while (*p) {
		char c = *p;
		if (c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f') {
			p++;
		} else if (c == '-' && p[1] == '-') {
			while (*p && *p != '\n')
				p++;
		} else if (c == '/' && p[1] == '*') {
			int depth = 0;
			while (*p) {
				if (p[0] == '/' && p[1] == '*') {
					depth++;
					p += 2;
				} else if (p[0] == '*' && p[1] == '/') {
					p += 2;
					if (--depth == 0)
						break;
				} else {
					p++;
				}
			}
		} else if (c == ';') {
			after_semicolon = any;
			p++;
		} else {
			if (after_semicolon) {
				out->several = true;
				after_semicolon = false;
			}
			any = true;
			if (c == '\'' ) {
				bool backslash = p > sql && (p[-1] == 'E' || p[-1] == 'e');
				p++;
				while (*p) {
					if (backslash && *p == '\\' && p[1]) {
						p += 2;
					} else if (*p == '\'' && p[1] == '\'') {
						p += 2;
					} else if (*p == '\'') {
						p++;
						break;
					} else {
						p++;
					}
				}
			} else if (c == '"') {
				p++;
				while (*p) {
					if (*p == '"' && p[1] == '"')
						p += 2;
					else if (*p++ == '"')
						break;
				}
				if (out->n < PROBE_WORDS)
					snprintf(out->w[out->n++], sizeof out->w[0], "\"");
			} else if (c == '$' && (p[1] == '$' || (is_word_char(p[1]) && (p[1] < '0' || p[1] > '9')))) {
				/* A dollar-quoted string $tag$ ... $tag$; "$1" and "a$b" are not. */
				const char *t = p + 1;
				while (*t && *t != '$' && is_word_char(*t))
					t++;
				if (*t != '$') {
					p++;
					continue;
				}
				size_t taglen = (size_t)(t - p) + 1;
				const char *q = t + 1;
				while (*q && !(*q == '$' && strncmp(q, p, taglen) == 0))
					q++;
				p = *q ? q + taglen : q;
			} else if (is_word_char(c)) {
				char word[24];
				size_t k = 0;
				while (*p && is_word_char(*p)) {
					if (k + 1 < sizeof word)
						word[k++] = (char)((*p >= 'a' && *p <= 'z') ? *p - 32 : *p);
					p++;
				}
				word[k] = '\0';
				if (strcmp(word, "STDIN") == 0)
					out->stdin_seen = true;
				if (strcmp(word, "CONCURRENTLY") == 0)
					out->concurrently = true;
				if (after_for && (strcmp(word, "UPDATE") == 0 || strcmp(word, "SHARE") == 0 ||
				                  strcmp(word, "NO") == 0 || strcmp(word, "KEY") == 0))
					out->locking_clause = true;
				after_for = strcmp(word, "FOR") == 0;
				if (out->n < PROBE_WORDS)
					snprintf(out->w[out->n++], sizeof out->w[0], "%s", word);
			} else {
				if (out->n < PROBE_WORDS && (c == '(' || c == ')'))
					snprintf(out->w[out->n++], sizeof out->w[0], "%c", c);
				p++;
			}
		}
	}
	out->empty = !any;
}

static bool word_is(const stmt_words *s, size_t i, const char *w)
{
	return i < s->n && strcmp(s->w[i], w) == 0;
}

static bool has_word(const stmt_words *s, const char *w)
{
	for (size_t i = 0; i < s->n; i++)
		if (strcmp(s->w[i], w) == 0)
			return true;
	return false;
}

const char *pgc_probe_refusal(const char *sql)
{
	if (sql == NULL)
		return "no statement given";
	stmt_words s;
	scan_words(sql, &s);
	if (s.empty)
		return "the statement is empty";
	if (s.several)
		return "give one statement at a time: probe runs exactly one statement";
	size_t i = 0;
	while (word_is(&s, i, "("))
		i++;
	const char *w0 = i < s.n ? s.w[i] : "";
	static const char *const txctl[] = { "BEGIN", "START", "COMMIT", "END", "ROLLBACK", "ABORT",
	                                      "SAVEPOINT", "RELEASE" };
	for (size_t k = 0; k < sizeof txctl / sizeof txctl[0]; k++)
		if (strcmp(w0, txctl[k]) == 0)
			return "transaction control cannot be probed: probe runs the statement in its own "
			       "transaction and rolls it back";
	if (strcmp(w0, "PREPARE") == 0 && word_is(&s, i + 1, "TRANSACTION"))
		return "PREPARE TRANSACTION cannot be probed: probe rolls its transaction back";
	if (strcmp(w0, "VACUUM") == 0)
		return "VACUUM cannot run inside a transaction block, so it cannot be probed (it takes "
		       "SHARE UPDATE EXCLUSIVE on each table it processes: writes go on; VACUUM FULL "
		       "takes ACCESS EXCLUSIVE: nothing else goes on)";
	if (strcmp(w0, "CREATE") == 0 && s.concurrently &&
	    (word_is(&s, i + 1, "INDEX") || (word_is(&s, i + 1, "UNIQUE") && word_is(&s, i + 2, "INDEX"))))
		return "CREATE INDEX CONCURRENTLY cannot run inside a transaction block, so it cannot be "
		       "probed (it takes SHARE UPDATE EXCLUSIVE on the table, so writes go on, and waits for "
		       "older transactions; probe plain CREATE INDEX to see the SHARE lock it avoids)";
	if (strcmp(w0, "DROP") == 0 && word_is(&s, i + 1, "INDEX") && s.concurrently)
		return "DROP INDEX CONCURRENTLY cannot run inside a transaction block, so it cannot be probed";
	if (strcmp(w0, "REINDEX") == 0 && (s.concurrently || has_word(&s, "DATABASE") ||
	                                   has_word(&s, "SYSTEM")))
		return "REINDEX CONCURRENTLY, REINDEX DATABASE and REINDEX SYSTEM cannot run inside a "
		       "transaction block, so they cannot be probed";
	if ((strcmp(w0, "CREATE") == 0 || strcmp(w0, "DROP") == 0) &&
	    (word_is(&s, i + 1, "DATABASE") || word_is(&s, i + 1, "TABLESPACE") ||
	     word_is(&s, i + 1, "SUBSCRIPTION")))
		return "CREATE/DROP DATABASE, TABLESPACE and SUBSCRIPTION cannot run inside a transaction "
		       "block, so they cannot be probed";
	if (strcmp(w0, "ALTER") == 0 && word_is(&s, i + 1, "SYSTEM"))
		return "ALTER SYSTEM cannot run inside a transaction block, so it cannot be probed";
	if (strcmp(w0, "ALTER") == 0 && word_is(&s, i + 1, "DATABASE") && has_word(&s, "TABLESPACE"))
		return "ALTER DATABASE ... SET TABLESPACE cannot run inside a transaction block, so it "
		       "cannot be probed";
	if (strcmp(w0, "ALTER") == 0 && has_word(&s, "DETACH") && s.concurrently)
		return "DETACH PARTITION ... CONCURRENTLY cannot run inside a transaction block, so it "
		       "cannot be probed";
	if (strcmp(w0, "CLUSTER") == 0 && (s.n == i + 1 || (s.n == i + 2 && word_is(&s, i + 1, "VERBOSE"))))
		return "CLUSTER without a table cannot run inside a transaction block, so it cannot be "
		       "probed; name the table";
	if (strcmp(w0, "COPY") == 0 && s.stdin_seen)
		return "COPY ... FROM STDIN needs data from the client, so it cannot be probed; probe "
		       "COPY from a server file or the INSERT it stands for";
	return NULL;
}

/* Rows the statement locked, from its command tag: every row UPDATE, DELETE and MERGE change,
 * every row a SELECT with a locking clause returns; 0 for anything else. */
static long rows_locked(const char *sql, const char *tag)
{
	const char *sp = strrchr(tag, ' ');
	long n = sp ? strtol(sp + 1, NULL, 10) : 0;
	if (strncmp(tag, "UPDATE ", 7) == 0 || strncmp(tag, "DELETE ", 7) == 0 ||
	    strncmp(tag, "MERGE ", 6) == 0)
		return n;
	if (strncmp(tag, "SELECT ", 7) == 0) {
		stmt_words w;
		scan_words(sql, &w);
		return w.locking_clause ? n : 0;
	}
	return 0;
}

typedef struct probe_internal {
	arena ar;
	pgc_diag_snapshot *watch; /* the last snapshot taken while the statement ran */
} probe_internal;

void pgc_probe_result_free(pgc_probe_result *res)
{
	if (res == NULL)
		return;
	probe_internal *in = res->internal_;
	if (in != NULL) {
		pgc_diag_snapshot_free(in->watch);
		arena_free(&in->ar);
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
static int locks_from_watch(pgc_probe_result *res, arena *a, const pgc_diag_snapshot *w)
{
	const pgc_diag_session *s = pgc_diag_session_find(w, res->probe_pid);
	if (s == NULL)
		return PGC_OK;
	res->locks = arena_alloc(a, (s->nlocks ? s->nlocks : 1) * sizeof *res->locks);
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

/* Reads the relation locks this backend holds, then names them, in two statements: the naming
 * query locks catalogs itself, and those locks must not be counted. */
static int read_own_locks(pgc_conn *conn, pgc_probe_result *res, arena *a, pgc_error *err)
{
	int rc;
	PGresult *r = pgc__exec(conn,
	        "SELECT l.relation::int8, l.mode FROM pg_catalog.pg_lock_status() l "
	        "WHERE l.pid = pg_catalog.pg_backend_pid() AND l.locktype = 'relation' AND l.granted",
	        0, NULL, &rc, err);
	if (r == NULL)
		return rc;
	int n = PQntuples(r);
	res->locks = arena_alloc(a, (size_t)(n ? n : 1) * sizeof *res->locks);
	char *list = arena_alloc(a, (size_t)n * 12 + 3);
	if (res->locks == NULL || list == NULL) {
		PQclear(r);
		return pgc__err(err, PGC_ENOMEM, "out of memory");
	}
	size_t off = 0;
	list[off++] = '{';
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
		l->mode = arena_strdup(a, PQgetvalue(r, i, 1));
		l->table_mode = pgc_table_lock_parse(l->mode);
		l->granted = true;
		l->waited_s = -1;
		l->relation_oid = oid;
		l->page = l->tuple = -1;
		off += (size_t)sprintf(list + off, "%s%u", off > 1 ? "," : "", oid);
	}
	list[off++] = '}';
	list[off] = '\0';
	PQclear(r);
	if (res->nlocks == 0)
		return PGC_OK;
	const char *params[1] = { list };
	r = pgc__exec(conn,
	        "SELECT c.oid::int8, pg_catalog.format('%I.%I', n.nspname, c.relname), c.relkind::text "
	        "FROM pg_catalog.pg_class c JOIN pg_catalog.pg_namespace n ON n.oid = c.relnamespace "
	        "WHERE c.oid = ANY($1::oid[])", 1, params, &rc, err);
	if (r == NULL)
		return rc;
	for (int i = 0; i < PQntuples(r); i++) {
		unsigned int oid = (unsigned int)strtoul(PQgetvalue(r, i, 0), NULL, 10);
		for (size_t k = 0; k < res->nlocks; k++)
			if (res->locks[k].relation_oid == oid) {
				res->locks[k].relation = arena_strdup(a, PQgetvalue(r, i, 1));
				res->locks[k].relkind = relkind_name(PQgetvalue(r, i, 2));
			}
	}
	PQclear(r);
	for (size_t k = 0; k < res->nlocks; k++) {
		if (res->locks[k].relation == NULL)
			res->locks[k].relation = arena_printf(a, "%u", res->locks[k].relation_oid);
		res->locks[k].target = lock_target(a, &res->locks[k]);
	}
	return a->failed ? pgc__err(err, PGC_ENOMEM, "out of memory") : PGC_OK;
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

int pgc_probe(pgc_conn *conn, const char *sql, const pgc_probe_options *opts,
              pgc_probe_result **out, pgc_error *err)
{
	pgc_error_clear(err);
	if (out == NULL)
		return pgc__err(err, PGC_EUSAGE, "pgc_probe: out must not be NULL");
	*out = NULL;
	if (conn == NULL || sql == NULL)
		return pgc__err(err, PGC_EUSAGE, "pgc_probe: conn and sql must not be NULL");
	pgc_probe_options defaults = PGC_PROBE_OPTIONS_INIT;
	if (opts == NULL)
		opts = &defaults;
	if (opts->lock_timeout_ms <= 0 || opts->statement_timeout_ms <= 0 ||
	    opts->lock_timeout_ms > INT32_MAX || opts->statement_timeout_ms > INT32_MAX)
		return pgc__err(err, PGC_EUSAGE, "pgc_probe: lock and statement timeouts must be between 1 ms and 24 days");
	const char *why = pgc_probe_refusal(sql);
	if (why != NULL)
		return pgc__err(err, PGC_EUSAGE, "cannot probe: %s", why);
	PGconn *pg = pgc_conn_pg(conn);
	if (PQtransactionStatus(pg) != PQTRANS_IDLE)
		return pgc__err(err, PGC_EUSAGE, "pgc_probe: the session must be idle, outside a transaction");

	pgc_probe_result *res = calloc(1, sizeof *res);
	probe_internal *in = calloc(1, sizeof *in);
	if (res == NULL || in == NULL) {
		free(res);
		free(in);
		return pgc__err(err, PGC_ENOMEM, "out of memory");
	}
	res->internal_ = in;
	res->probe_pid = pgc_conn_backend_pid(conn);
	arena *a = &in->ar;
	pgc_conn *watcher = NULL;
	PGresult *first_error = NULL;
	int rc = pgc_exec(conn, "BEGIN", err);
	if (rc != PGC_OK)
		goto fail;
	char lt[24], st[24];
	snprintf(lt, sizeof lt, "%" PRId64, opts->lock_timeout_ms);
	snprintf(st, sizeof st, "%" PRId64, opts->statement_timeout_ms);
	const char *params[2] = { lt, st };
	PGresult *r = pgc__exec(conn, "SELECT pg_catalog.set_config('lock_timeout', $1, true), "
	                              "pg_catalog.set_config('statement_timeout', $2, true)",
	                        2, params, &rc, err);
	if (r == NULL)
		goto rollback;
	PQclear(r);

	/* One statement through the extended protocol: the server itself refuses a second one. */
	int64_t t0 = pgc__now_ms();
	if (!PQsendQueryParams(pg, sql, 0, NULL, NULL, NULL, NULL, 0)) {
		rc = pgc__err_result(err, pg, NULL, NULL);
		goto rollback;
	}
	/* Rows arrive one at a time and are dropped at once: probing a SELECT ... FOR UPDATE of a
	 * big table must not hold its whole result in memory. */
	PQsetSingleRowMode(pg);
	/* Watch from a second session once the statement has run for a while, so that a lock wait
	 * or a timeout can be explained; the server's own timeouts end the statement, and a client
	 * deadline past them cancels it if the server does not answer. */
	int64_t watch_after = opts->lock_timeout_ms / 4 < 100 ? opts->lock_timeout_ms / 4 : 100;
	if (watch_after < 5)
		watch_after = 5;
	int64_t deadline = t0 + opts->statement_timeout_ms + 5000, next_watch = t0 + watch_after;
	bool canceled = false, have_error = false;
	for (;;) {
		if (!PQconsumeInput(pg)) {
			rc = pgc__err_result(err, pg, NULL, NULL);
			goto fail;
		}
		while (!PQisBusy(pg)) {
			PGresult *x = PQgetResult(pg);
			if (x == NULL)
				goto finished;
			ExecStatusType xs = PQresultStatus(x);
			if (xs == PGRES_COPY_OUT) {
				char *buf;
				int got;
				while ((got = PQgetCopyData(pg, &buf, 1)) > 0)
					PQfreemem(buf);
				if (got == 0) {
					PQclear(x);
					break; /* more copy data to wait for */
				}
			} else if (xs == PGRES_COPY_IN) {
				PQputCopyEnd(pg, "pgcoord probe sends no COPY data");
			} else if (xs == PGRES_FATAL_ERROR && !have_error) {
				have_error = true;
				first_error = x;
				continue;
			} else if (xs == PGRES_SINGLE_TUPLE) {
				; /* a row of the statement's result: not ours to keep */
			} else if (xs == PGRES_COMMAND_OK || xs == PGRES_TUPLES_OK) {
				pgc__copy_line(res->command_tag, sizeof res->command_tag, PQcmdStatus(x));
			}
			PQclear(x);
		}
		int64_t now = pgc__now_ms();
		if (now >= next_watch) {
			if (watcher == NULL) {
				pgc_error ignored;
				if (pgc__open_like(conn, "pgcoord/probe-watch", &watcher, &ignored) != PGC_OK)
					watcher = NULL;
			}
			if (watcher != NULL)
				watch_once(watcher, in, res->probe_pid);
			next_watch = pgc__now_ms() + 100;
			continue;
		}
		if (now >= deadline) {
			if (canceled) {
				rc = pgc__err(err, PGC_ETIMEDOUT, "the server did not end the probed statement after it was canceled");
				goto fail;
			}
			char ebuf[256];
			PGcancel *c = PQgetCancel(pg);
			if (c != NULL) {
				PQcancel(c, ebuf, sizeof ebuf);
				PQfreeCancel(c);
			}
			canceled = true;
			deadline = now + 5000;
		}
		int64_t wait = next_watch - now;
		if (deadline - now < wait)
			wait = deadline - now;
		struct pollfd pfd = { PQsocket(pg), POLLIN, 0 };
		poll(&pfd, 1, (int)(wait < 1 ? 1 : wait));
	}
finished:
	res->elapsed_s = (double)(pgc__now_ms() - t0) / 1000.0;
	if (!have_error) {
		res->outcome = PGC_PROBE_RAN;
		res->rows_locked = rows_locked(sql, res->command_tag);
		rc = read_own_locks(conn, res, a, err);
		if (rc != PGC_OK)
			goto rollback;
	} else {
		pgc__err_result(&res->error, pg, first_error, NULL);
		PQclear(first_error);
		first_error = NULL;
		const char *ss = res->error.sqlstate;
		if (strcmp(ss, "25001") == 0) {
			/* The server refused what our scanner let through. */
			pgc_error ignored;
			if (pgc_exec(conn, "ROLLBACK", &ignored) != PGC_OK)
				pgc_error_clear(&ignored); /* reported below: the statement was refused */
			rc = pgc__err(err, PGC_EUSAGE, "cannot probe: %s, so it cannot be probed",
			              res->error.message);
			goto fail;
		}
		if (strcmp(ss, "55P03") == 0)
			res->outcome = PGC_PROBE_LOCK_TIMEOUT;
		else if (strcmp(ss, "57014") == 0)
			res->outcome = PGC_PROBE_STATEMENT_TIMEOUT;
		else
			res->outcome = PGC_PROBE_FAILED;
		if (in->watch != NULL) {
			if (locks_from_watch(res, a, in->watch) != PGC_OK) {
				rc = pgc__err(err, PGC_ENOMEM, "out of memory");
				goto rollback;
			}
			const pgc_diag_session *s = pgc_diag_session_find(in->watch, res->probe_pid);
			if (s != NULL && s->wants != NULL) {
				res->waited_for = s->wants;
				res->wait_snapshot = in->watch;
			}
		}
	}
	if (res->nlocks > 1)
		qsort(res->locks, res->nlocks, sizeof *res->locks, cmp_lock_strength);
	rc = pgc_exec(conn, "ROLLBACK", err);
	if (rc != PGC_OK)
		goto fail;
	pgc_conn_close(watcher);
	*out = res;
	return PGC_OK;
rollback:
	if (PQtransactionStatus(pg) != PQTRANS_UNKNOWN) {
		pgc_error ignored;
		if (pgc_exec(conn, "ROLLBACK", &ignored) != PGC_OK)
			pgc_error_clear(&ignored); /* the first error is the one to report */
	}
fail:
	PQclear(first_error);
	pgc_conn_close(watcher);
	pgc_probe_result_free(res);
	return rc;
}

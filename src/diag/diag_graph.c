/* diag_graph.c - the wait-for graph of a snapshot: edges, who blocks whom directly and in all,
 * wait cycles, root blockers, queued DDL, and why one session waits for another
 *
 * The graph is walked with explicit marks: the transitive counts by a breadth-first walk that
 * marks each session once per start, the cycles by Tarjan's strongly connected components, so
 * a cycle is found once and never followed round. */
#include <stdlib.h>
#include <string.h>

#include "diag_int.h"

static int cmp_pid_index(const void *a, const void *b)
{
	const pgc__pid_index *x = a, *y = b;
	return (x->pid > y->pid) - (x->pid < y->pid);
}

void pgc__pid_index_sort(pgc__pid_index *map, size_t n)
{
	if (n > 1)
		qsort(map, n, sizeof *map, cmp_pid_index);
}

long pgc__pid_index_find(const pgc__pid_index *map, size_t n, int pid)
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

/* The scratch space of one build, all of it n entries long. */
typedef struct graph {
	pgc_diag_snapshot *snap;
	pgc__arena *a;
	size_t n;
	pgc__pid_index *map;
	size_t *nwaiters, *stamp, *queue, *stack, sp;
	long *index, *low, counter;
	bool *on_stack;
	size_t cycles_cap;
	bool oom;
} graph;

static bool graph_init(graph *g, pgc_diag_snapshot *snap, pgc__arena *a)
{
	size_t n = snap->nsessions, m = n ? n : 1;
	*g = (graph){ .snap = snap, .a = a, .n = n };
	g->map = malloc(m * sizeof *g->map);
	g->nwaiters = calloc(m, sizeof *g->nwaiters);
	g->stamp = calloc(m, sizeof *g->stamp);
	g->queue = malloc(m * sizeof *g->queue);
	g->stack = malloc(m * sizeof *g->stack);
	g->index = malloc(m * sizeof *g->index);
	g->low = malloc(m * sizeof *g->low);
	g->on_stack = calloc(m, sizeof *g->on_stack);
	if (!g->map || !g->nwaiters || !g->stamp || !g->queue || !g->stack || !g->index || !g->low ||
	    !g->on_stack)
		return false;
	for (size_t i = 0; i < n; i++) {
		g->map[i].pid = snap->sessions[i].pid;
		g->map[i].idx = i;
		g->index[i] = -1;
	}
	pgc__pid_index_sort(g->map, n);
	return true;
}

static void graph_free(graph *g)
{
	free(g->map);
	free(g->nwaiters);
	free(g->stamp);
	free(g->queue);
	free(g->stack);
	free(g->index);
	free(g->low);
	free(g->on_stack);
}

static long graph_find(const graph *g, int pid)
{
	return pgc__pid_index_find(g->map, g->n, pid);
}

/* Edges between sessions the snapshot holds, and each session's direct waiters. */
static bool add_edges(graph *g)
{
	pgc_diag_snapshot *snap = g->snap;
	size_t nedges = 0;
	for (size_t i = 0; i < g->n; i++)
		nedges += snap->sessions[i].nblocked_by;
	snap->edges = pgc__arena_alloc(g->a, (nedges ? nedges : 1) * sizeof *snap->edges);
	if (snap->edges == NULL)
		return false;
	snap->nedges = 0;
	for (size_t i = 0; i < g->n; i++) {
		pgc_diag_session *s = &snap->sessions[i];
		for (size_t k = 0; k < s->nblocked_by; k++) {
			long j = graph_find(g, s->blocked_by[k]);
			if (j < 0)
				continue;
			snap->edges[snap->nedges].waiter = s->pid;
			snap->edges[snap->nedges].blocker = s->blocked_by[k];
			snap->nedges++;
			g->nwaiters[j]++;
		}
		if (s->wants != NULL)
			snap->nwaiting++;
	}
	for (size_t i = 0; i < g->n; i++) {
		int *w = pgc__arena_alloc(g->a, (g->nwaiters[i] ? g->nwaiters[i] : 1) * sizeof *w);
		if (w == NULL)
			return false;
		snap->sessions[i].blocks = w;
		snap->sessions[i].nblocks = 0;
	}
	for (size_t e = 0; e < snap->nedges; e++) {
		pgc_diag_session *b = &snap->sessions[graph_find(g, snap->edges[e].blocker)];
		((int *)b->blocks)[b->nblocks++] = snap->edges[e].waiter;
	}
	return true;
}

/* Everyone waiting on each session, directly or not: a breadth-first walk over waiters that
 * marks each session once per start, so cycles end the walk instead of feeding it. */
static void count_blocked(graph *g)
{
	pgc_diag_session *ss = g->snap->sessions;
	for (size_t i = 0; i < g->n; i++) {
		if (ss[i].nblocks == 0)
			continue;
		size_t head = 0, tail = 0, count = 0;
		g->stamp[i] = i + 1;
		g->queue[tail++] = i;
		while (head < tail) {
			const pgc_diag_session *s = &ss[g->queue[head++]];
			for (size_t k = 0; k < s->nblocks; k++) {
				long j = graph_find(g, s->blocks[k]);
				if (j < 0 || g->stamp[j] == i + 1)
					continue;
				g->stamp[j] = i + 1;
				g->queue[tail++] = (size_t)j;
				count++;
			}
		}
		ss[i].blocks_total = count;
	}
}

/* Tarjan's strongly connected components over waiter -> blocker edges, recursive: the depth is
 * bounded by the number of sessions, and every node is entered once. A component of more than
 * one session is a wait cycle. */
static void strong(graph *g, size_t v)
{
	pgc_diag_snapshot *snap = g->snap;
	pgc_diag_session *ss = snap->sessions;
	g->index[v] = g->low[v] = g->counter++;
	g->stack[g->sp++] = v;
	g->on_stack[v] = true;
	for (size_t k = 0; k < ss[v].nblocked_by; k++) {
		long w = graph_find(g, ss[v].blocked_by[k]);
		if (w < 0)
			continue;
		if (g->index[w] < 0) {
			strong(g, (size_t)w);
			if (g->low[w] < g->low[v])
				g->low[v] = g->low[w];
		} else if (g->on_stack[w] && g->index[w] < g->low[v]) {
			g->low[v] = g->index[w];
		}
	}
	if (g->low[v] != g->index[v])
		return;
	size_t start = g->sp;
	do
		start--;
	while (g->stack[start] != v);
	size_t size = g->sp - start;
	if (size > 1) {
		size_t id = ++snap->ncycles;
		int *pids = pgc__arena_alloc(g->a, size * sizeof *pids);
		if (pids == NULL || id > g->cycles_cap) {
			g->oom = true;
		} else {
			for (size_t i = 0; i < size; i++) {
				pids[i] = ss[g->stack[start + i]].pid;
				ss[g->stack[start + i]].cycle = (int)id;
			}
			snap->cycles[id - 1].pids = pids;
			snap->cycles[id - 1].npids = size;
		}
	}
	for (size_t i = start; i < g->sp; i++)
		g->on_stack[g->stack[i]] = false;
	g->sp = start;
}

static bool find_cycles(graph *g)
{
	pgc_diag_snapshot *snap = g->snap;
	g->cycles_cap = g->n / 2 + 1;
	snap->cycles = pgc__arena_alloc(g->a, g->cycles_cap * sizeof *snap->cycles);
	snap->ncycles = 0;
	if (snap->cycles == NULL)
		return false;
	for (size_t i = 0; i < g->n; i++)
		if (g->index[i] < 0 && snap->sessions[i].nblocked_by > 0)
			strong(g, i);
	return !g->oom;
}

/* pgcoord's own lock holders block by design: after every other root. Then the root
 * blocking most, the oldest transaction, the lowest pid. */
static int cmp_root(const void *a, const void *b)
{
	const pgc_diag_session *x = *(const pgc_diag_session *const *)a;
	const pgc_diag_session *y = *(const pgc_diag_session *const *)b;
	if (x->pgcoord_holder != y->pgcoord_holder)
		return x->pgcoord_holder ? 1 : -1;
	if (x->blocks_total != y->blocks_total)
		return x->blocks_total < y->blocks_total ? 1 : -1;
	if (x->xact_age_s != y->xact_age_s)
		return x->xact_age_s < y->xact_age_s ? 1 : -1;
	return (x->pid > y->pid) - (x->pid < y->pid);
}

/* Roots (blocking someone, waiting for no one) in cmp_root's order; queued DDL. */
static bool find_roots(graph *g)
{
	pgc_diag_snapshot *snap = g->snap;
	const pgc_diag_session **roots = malloc((g->n ? g->n : 1) * sizeof *roots);
	if (roots == NULL)
		return false;
	size_t nroots = 0;
	for (size_t i = 0; i < g->n; i++) {
		pgc_diag_session *s = &snap->sessions[i];
		s->root = s->nblocks > 0 && s->nblocked_by == 0;
		if (s->root)
			roots[nroots++] = s;
		s->queued_ddl = s->wants != NULL && s->nblocks > 0 && s->wants->locktype != NULL &&
		                strcmp(s->wants->locktype, "relation") == 0 &&
		                s->wants->table_mode >= PGC_SHARE_UPDATE_EXCLUSIVE;
	}
	if (nroots > 1)
		qsort(roots, nroots, sizeof *roots, cmp_root);
	int *rp = pgc__arena_alloc(g->a, (nroots ? nroots : 1) * sizeof *rp);
	if (rp != NULL)
		for (size_t i = 0; i < nroots; i++)
			rp[i] = roots[i]->pid;
	free(roots);
	snap->roots = rp;
	snap->nroots = rp ? nroots : 0;
	return rp != NULL;
}

int pgc__diag_graph_build(pgc_diag_snapshot *snap, pgc__arena *a, pgc_error *err)
{
	graph g;
	bool ok = graph_init(&g, snap, a) && add_edges(&g);
	if (ok) {
		count_blocked(&g);
		ok = find_cycles(&g) && find_roots(&g);
	}
	graph_free(&g);
	return ok ? PGC_OK : pgc__err(err, PGC_ENOMEM, "out of memory");
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
		return pgc_key_equal(a->key, b->key) &&
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

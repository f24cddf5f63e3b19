/* diag_int.h - what the diagnostics files share: the snapshot (diag_snapshot.c), the wait-for
 * graph (diag_graph.c), cancel/terminate (diag_signal.c) and the probe (probe.c) */
#ifndef PGCOORD_DIAG_INT_H
#define PGCOORD_DIAG_INT_H

#include "util/arena.h"
#include "conn/conn_int.h"

/* ---- sessions by pid (diag_graph.c) --------------------------------------------------------- */

/* A pid and where its session is, in a map sorted by pid. */
typedef struct pgc__pid_index {
	int pid;
	size_t idx;
} pgc__pid_index;

void pgc__pid_index_sort(pgc__pid_index *map, size_t n);

/* The idx of pid in a sorted map, or -1. */
long pgc__pid_index_find(const pgc__pid_index *map, size_t n, int pid);

/* ---- the graph (diag_graph.c) --------------------------------------------------------------- */

/* Fills the snapshot's edges, each session's blocks, blocks_total, cycle, root and queued_ddl,
 * and the roots, from the sessions' blocked_by and wants. Everything is allocated in a.
 * Returns a pgc_code (PGC_ENOMEM). */
int pgc__diag_graph_build(pgc_diag_snapshot *snap, pgc__arena *a, pgc_error *err);

/* ---- locks (diag_snapshot.c) ---------------------------------------------------------------- */

/* "table", "index", "sequence", ... for a pg_class.relkind letter; NULL for NULL. Static. */
const char *pgc__diag_relkind_name(const char *relkind);

/* The one line naming what a lock is on ("relation public.t", "row (0,1) of public.t",
 * "advisory 42 \"nightly\""), in a. Call it once names are known. */
char *pgc__diag_lock_target(pgc__arena *a, const pgc_diag_lock *l);

#endif

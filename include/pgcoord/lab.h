/* pgcoord/lab.h - experiments that reproduce, on a real server, how PostgreSQL's locks behave
 *
 * Each experiment opens its own sessions, works in its own scratch schema, bounds every wait
 * with lock_timeout / statement_timeout and a client-side deadline, and ends with a verdict
 * (PASS or FAIL), one line of what it saw and the values it observed. The experiments are
 * the ground the rest of the library stands on: advisory locks, row and table locks, SKIP
 * LOCKED, timeouts, deadlocks. */
#ifndef PGCOORD_LAB_H
#define PGCOORD_LAB_H

#include <stdbool.h>
#include <stdint.h>

#include "common.h"
#include "error.h"

#ifdef __cplusplus
extern "C" {
#endif

/* One experiment in the catalogue. All strings are static. */
typedef struct pgc_lab_info {
	const char *name;        /* "singleton", "table-lock-matrix", ...: what pgc_lab_run takes */
	const char *description; /* one line, what the experiment shows */
	/* Where the claim is documented: a section of the PostgreSQL manual, "explicit locking,
	 * 13.3.2 row-level locks", "SQL commands, SELECT: the locking clause (SKIP LOCKED)"; or,
	 * where the manual does not say it, the pattern it belongs to, "a job queue pattern: ...". */
	const char *reference;
} pgc_lab_info;

/* The catalogue, in the order `pgcoord lab` runs it. *count (may be NULL) receives the number
 * of entries. The array is static and never changes. Thread-safe. */
PGC_EXTERN const pgc_lab_info *pgc_lab_list(size_t *count);

/* The catalogue entry named name, or NULL when there is none (or name is NULL). Thread-safe. */
PGC_EXTERN const pgc_lab_info *pgc_lab_find(const char *name);

/* How an observed value is rendered (JSON: a number, true/false, or a string). */
typedef enum pgc_lab_value_kind {
	PGC_LAB_INT = 0,
	PGC_LAB_BOOL = 1,
	PGC_LAB_TEXT = 2
} pgc_lab_value_kind;

#define PGC_LAB_VALUES_MAX 24
#define PGC_LAB_NAME_MAX 40
#define PGC_LAB_TEXT_MAX 160
#define PGC_LAB_OBSERVATION_MAX 512

/* One observed value: "ran" = 1, "sqlstate" = "55P03", "matrix" = "....X...". text holds the
 * canonical rendering for every kind ("1", "true", "55P03"). */
typedef struct pgc_lab_value {
	char name[PGC_LAB_NAME_MAX];
	pgc_lab_value_kind kind;
	char text[PGC_LAB_TEXT_MAX];
} pgc_lab_value;

/* The outcome of one experiment. Plain memory owned by the caller; nothing to free. */
typedef struct pgc_lab_result {
	const pgc_lab_info *info;                  /* the experiment that ran */
	bool passed;                               /* PASS (true) or FAIL (false) */
	/* One line: what the experiment saw (a fixed, numbered result line for the first five,
	 * "1. five instances tried a singleton job, instances that ran it: 1"), or on a FAIL what
	 * went wrong (a timeout, an unexpected error, a value that differs). */
	char observation[PGC_LAB_OBSERVATION_MAX];
	int nvalues;
	pgc_lab_value values[PGC_LAB_VALUES_MAX];  /* the observed values, in a stable order */
	char schema[64];                           /* the scratch schema it used */
	bool schema_kept;                          /* true when the schema was left in place */
	int64_t elapsed_ms;                        /* wall time of the experiment */
} pgc_lab_result;

typedef struct pgc_lab_options {
	/* Keep the scratch schema (and its tables) instead of dropping it at the end. */
	bool keep;
	/* How long a session waits for a lock the experiment expects to get, in milliseconds.
	 * Every waiting statement runs with lock_timeout set to this and statement_timeout set
	 * to it plus 5 s, so an experiment that cannot get its lock FAILs with a message instead
	 * of hanging. Default 5000; at least 100. */
	int lock_timeout_ms;
	/* application_name prefix of the experiment's sessions; NULL means "pgcoord/lab". Each
	 * session appends "/<experiment>/<session letter>". */
	const char *application_name;
	/* The advisory keys the experiments use are key_base + 0 .. key_base + 199. 0 (the
	 * default) means (backend pid of the experiment's first session << 32) + 612001, which
	 * no other live session can be using for the lab at the same time. Give a range of your
	 * own when the server's applications use advisory keys of that shape. */
	int64_t key_base;
	/* advisory-exhaust: really fill the server's shared lock table, past key_base + 199,
	 * until it refuses with 53200. While it is full every session of the server that needs a
	 * new lock fails, so even when true the experiment does it only when no other client
	 * session is connected; otherwise (and by default) it takes 150 locks and reports the
	 * table's size. Meant for a scratch server. */
	bool allow_exhaust;
} pgc_lab_options;

#define PGC_LAB_OPTIONS_INIT { false, 5000, NULL, 0, false }

/* Runs the experiment named name against the server at dsn (resolved like pgc_connect: NULL
 * or "" falls back to $PGCOORD_DSN, $DATABASE_URL and libpq's PG* variables). opts may be NULL
 * for defaults. Opens its own sessions (up to nine) and closes them before returning; the
 * scratch schema "pgc_lab_<name>_<pid>" is dropped unless opts->keep. Advisory keys come from
 * opts->key_base, so that concurrent runs of the lab never share a key.
 *
 * Returns 0 when the experiment ran to a verdict, PASS or FAIL, and fills *out. A failure of
 * the experiment (a timeout, an unexpected server error, a different result) is a FAIL with
 * the reason in out->observation, not an error return.
 * Errors (nothing is left behind): PGC_EUSAGE (name or out is NULL, bad options),
 * PGC_ENOTFOUND (no experiment has that name), PGC_ECONNECT (the first session could not
 * connect), PGC_ENOMEM.
 * Thread-safe: different threads may run experiments at once (each uses its own sessions);
 * an experiment may itself use threads. */
PGC_EXTERN PGC_MUSTCHECK int pgc_lab_run(const char *dsn, const char *name,
                                         const pgc_lab_options *opts, pgc_lab_result *out,
                                         pgc_error *err);

/* The value named name in result, or NULL. */
PGC_EXTERN const pgc_lab_value *pgc_lab_value_get(const pgc_lab_result *result, const char *name);

#ifdef __cplusplus
}
#endif
#endif

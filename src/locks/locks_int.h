/* locks_int.h - what the lock files share with each other and with the tests
 *
 * lock.c owns the connection's table and the handles; lock_hold.c, lock_xact.c and
 * lock_registry.c reach them only through what is declared here, and rely on lock.c's
 * invariants (the comment at its top). */
#ifndef PGCOORD_LOCKS_INT_H
#define PGCOORD_LOCKS_INT_H

#include "conn/conn_int.h"

#define PGC__LOCK_STATEMENT_DEADLINE_MS 30000 /* bound on a lock statement that does not wait */
#define PGC__LOCK_VERIFIED_MAX 64             /* named keys verified against the registry, per
                                                 connection */

/* ---- locks (lock.c) ------------------------------------------------------------------------- */

/* How many waits ended in an error although the server had granted the lock (found by the
 * pg_locks check and reported as success). For tests; updated atomically. */
extern unsigned long pgc__lock_race_granted;

struct pgc_lock {
	pgc_conn *conn;
	pgc_key key;
	bool shared;
	bool hold;     /* PGC_LOCK_HOLD_XACT: a transaction lock held by an open transaction */
	bool lost;     /* the session ended while this acquisition was held */
	char *recorded; /* PGC_LOCK_RECORD: the quoted schema whose lock_holds has its row */
	pgc_lock *prev, *next;
};

/* What a connection holds, attached to it (pgc__attach). Changed only on a definite answer
 * from the server, or when the session is known gone. */
typedef struct pgc__lock_table {
	pgc_held_lock *held;
	size_t nheld, capheld;
	pgc_lock *handles;
	pgc_lock *hold;         /* the held transaction's lock, or NULL */
	int registry;           /* 0 unknown, 1 present, -1 absent, for registry_schema */
	char registry_schema[64];
	int holds;              /* the same for lock_holds in holds_schema (PGC_LOCK_RECORD) */
	char holds_schema[64];
	int64_t verified[PGC__LOCK_VERIFIED_MAX];
	size_t nverified;
	bool pooler_checked;    /* session locks were found safe on this session */
	/* What the last loss took, until pgc_conn_check() reports it once. */
	size_t lost_count;
	char lost_first[PGC_KEY_NAME_MAX + 64];
} pgc__lock_table;

/* A key as the parameters of a lock statement: one bigint, or two ints for a pair. */
typedef struct pgc__key_params {
	char a[24], b[24];
	const char *v[2];
	int n;
} pgc__key_params;

/* pg_try_advisory_xact_lock[_shared], indexed [pair][shared]. */
extern const char *const pgc__lock_sql_xact_try[2][2];

/* key as text for a message, in buf (n bytes); "?" when it cannot be described. Returns buf. */
const char *pgc__lock_describe(const pgc_key *key, char *buf, size_t n);

/* The connection's table, attached on first use; NULL (err set, PGC_ENOMEM) when that fails. */
pgc__lock_table *pgc__lock_table_of(pgc_conn *conn, pgc_error *err);

/* The table's entry for (key, mode), or NULL. */
pgc_held_lock *pgc__lock_held_find(pgc__lock_table *t, const pgc_key *key, bool shared);

/* Records one more acquisition of (key, mode), granted by the server, and makes its handle. */
int pgc__lock_held_add(pgc_conn *conn, pgc__lock_table *t, const pgc_key *key, bool shared, pgc_lock **out,
                       pgc_error *err);

/* One acquisition of (key, mode) fewer, once the server has let go of it. */
void pgc__lock_held_dec(pgc__lock_table *t, const pgc_key *key, bool shared);

/* Unlinks the handle from its connection's table and frees it. */
void pgc__lock_handle_free(pgc_lock *l);

void pgc__key_params_set(pgc__key_params *p, const pgc_key *key);

/* The one check of a key given by a caller (PGC_EUSAGE). */
int pgc__lock_check_key(const pgc_key *key, pgc_error *err);

/* The one boolean a lock statement answers, or PGC_EINTERNAL; clears r. */
int pgc__lock_answer_bool(PGresult *r, bool *out, pgc_error *err);

/* A lock statement that never waits, bounded by PGC__LOCK_STATEMENT_DEADLINE_MS (the session
 * is dropped past it); NULL with *rc and err set. */
PGresult *pgc__lock_exec_quick(pgc_conn *conn, const char *sql, const pgc__key_params *p, int *rc, pgc_error *err);

/* The pg_locks identity of key (classid, objid, objsubid) as three parameters p, in the
 * caller's buffers. */
void pgc__lock_identity_params(const pgc_key *key, char c[16], char o[16], char s[8], const char *p[3]);

/* The checks every acquire makes of its arguments and its connection (PGC_EUSAGE, naming fn;
 * PGC_ECONNLOST). */
int pgc__lock_check_args(pgc_conn *conn, const pgc_key *key, unsigned flags, int64_t timeout_ms,
                         const char *fn, pgc_error *err);

/* The waiting form of a session (xact false) or transaction lock, under its own lock_timeout.
 * For a session lock, *granted says whether the lock is held on return. */
int pgc__lock_wait(pgc_conn *conn, pgc__lock_table *t, const pgc_key *key, bool shared, bool xact,
                   int64_t timeout_ms, int cancel_fd, bool *granted, pgc_error *err);

/* ---- the held transaction and the record (lock_hold.c) -------------------------------------- */

/* PGC_LOCK_HOLD_XACT: opens a transaction of its own and takes key in it as a transaction lock
 * (*out, held until pgc__lock_hold_release). */
int pgc__lock_hold_acquire(pgc_conn *conn, pgc__lock_table *t, const pgc_key *key, const pgc_lock_options *opts,
                           pgc_lock **out, pgc_error *err);

/* Ends the held transaction of lock (COMMIT) and frees the handle; d describes the key. */
int pgc__lock_hold_release(pgc_lock *lock, pgc__lock_table *t, const char *d, pgc_error *err);

/* Whether schema has a lock_holds table, cached in cache (or NULL); *quoted (PQfreemem) is the
 * quoted schema name when it has. */
int pgc__lock_holds_present(pgc_conn *conn, pgc__lock_table *cache, const char *schema, char **quoted,
                            bool *present, pgc_error *err);

/* PGC_LOCK_RECORD: records when *out was taken; when that fails, releases it and sets *out to
 * NULL. */
int pgc__lock_recorded_or_released(pgc_conn *conn, pgc__lock_table *t, pgc_lock **out, const char *schema,
                                   pgc_error *err);

/* Deletes lock's recorded row (lock->recorded is the quoted schema) after its last release. */
void pgc__lock_hold_forget(pgc_conn *conn, const pgc_lock *lock);

/* ---- the name registry (lock_registry.c) ---------------------------------------------------- */

/* Whether schema $1 has table $2: read from the catalog. */
extern const char pgc__lock_sql_table_exists[];

/* Records key's name in the schema's lock_names on its first use by this session (unless
 * PGC_LOCK_NO_REGISTRY, or the schema has no registry); PGC_ECOLLISION when another name has
 * the key. */
int pgc__lock_registry_check(pgc_conn *conn, pgc__lock_table *t, const pgc_key *key, unsigned flags,
                             const char *schema, pgc_error *err);

#endif

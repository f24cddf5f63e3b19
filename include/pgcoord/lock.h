/* pgcoord/lock.h - advisory lock keys, session and transaction advisory locks, lock loss
 *
 * A key is one signed 64-bit number or a pair of signed 32-bit numbers (two separate key
 * spaces, as in the server), optionally derived from a name. Session locks are handles owned by
 * the pgc_conn that took them, so a release always goes to the session that holds the lock;
 * the server's answer to every unlock is checked. Waits have deadlines, and a wait that gives
 * up leaves nothing held and nothing queued. Lock statements that do not wait (try-lock,
 * unlock) get 30 s for their answer; a server silent that long is treated as gone and the session
 * is closed, which is also what makes the server release its locks.
 *
 * Thread-safety: the key functions are thread-safe. Everything that takes a pgc_conn or a
 * pgc_lock follows pgc_conn's rule: one thread at a time per connection (its handles included);
 * different connections may be used from different threads at once. */
#ifndef PGCOORD_LOCK_H
#define PGCOORD_LOCK_H

#include <stdbool.h>

#include "common.h"
#include "conn.h"
#include "error.h"
#include "lockmode.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ---- Keys ------------------------------------------------------------------------------- */

typedef enum pgc_key_kind {
	PGC_KEY_INT64 = 1, /* one bigint: pg_advisory_lock(bigint) */
	PGC_KEY_PAIR = 2   /* two int4: pg_advisory_lock(int, int), a separate key space */
} pgc_key_kind;

/* Longest name pgc_key_from_name() accepts, in bytes. */
#define PGC_KEY_NAME_MAX 255

/* A key, by value. Build it with pgc_key_int64(), pgc_key_pair(), pgc_key_from_name() or
 * pgc_key_parse(); read the fields freely. */
typedef struct pgc_key {
	pgc_key_kind kind;
	int64_t id;                        /* PGC_KEY_INT64 */
	int32_t key1, key2;                /* PGC_KEY_PAIR */
	char name[PGC_KEY_NAME_MAX + 1];   /* the name id was hashed from, or "" */
} pgc_key;

/* Room for any pgc_key_format() output ("-9223372036854775808", "-2147483648,-2147483648"). */
#define PGC_KEY_FORMAT_MAX 32

/* Keys from numbers. Never fail. Thread-safe. */
PGC_EXTERN pgc_key pgc_key_int64(int64_t id);
PGC_EXTERN pgc_key pgc_key_pair(int32_t key1, int32_t key2);

/* The name hash: XXH64 (xxHash, 64-bit variant, seed 0) of the name's bytes, as specified in
 * xxHash's doc/xxhash_spec.md. The 64-bit result, read as two's complement, is the bigint key.
 * The function and its seed never change: a name maps to the same key in every version, on
 * every platform, and in any language with an XXH64 implementation. Thread-safe. */
PGC_EXTERN uint64_t pgc_key_hash(const void *data, size_t len);

/* A PGC_KEY_INT64 key from a name: id = (int64_t)pgc_key_hash(name, strlen(name)), and the name
 * is kept in out->name (the registry and the messages use it). Names are compared byte for
 * byte: "Report" and "report" are different locks.
 * Errors: PGC_EUSAGE (NULL, empty name, longer than PGC_KEY_NAME_MAX bytes, or not valid
 * UTF-8: pgc_name_check). Thread-safe. */
PGC_EXTERN PGC_MUSTCHECK int pgc_key_from_name(const char *name, pgc_key *out, pgc_error *err);

/* Parses what pgc_key_format() prints: a decimal bigint ("42", "-7") or two decimal int4
 * separated by a comma ("20,7"; spaces around the numbers are allowed).
 * Errors: PGC_EUSAGE naming the problem (empty, not a number, out of range, more than two
 * parts). Thread-safe. */
PGC_EXTERN PGC_MUSTCHECK int pgc_key_parse(const char *text, pgc_key *out, pgc_error *err);

/* Writes the key's numeric form into buf (size bytes, PGC_KEY_FORMAT_MAX is always enough):
 * "42" for a bigint key, "20,7" for a pair. This is how every command shows a key, and what
 * --key accepts. Returns the length pgc_key_format() needed (snprintf-style), or -1 when key or
 * buf is NULL or the kind is unknown. Thread-safe. */
PGC_EXTERN int pgc_key_format(const pgc_key *key, char *buf, size_t size);

/* Like pgc_key_format, with the name when there is one: "nightly-report (key 42)", or just
 * "42" / "20,7". Same return convention. Thread-safe. */
PGC_EXTERN int pgc_key_describe(const pgc_key *key, char *buf, size_t size);

/* The name of a key's space as the tool's JSON gives it: "bigint" or "int4pair" (NULL for an
 * unknown kind). Static string. Thread-safe. */
PGC_EXTERN const char *pgc_key_space_name(pgc_key_kind kind);

/* True when a and b name the same server lock (kind and numbers; the name is ignored). */
PGC_EXTERN bool pgc_key_equal(const pgc_key *a, const pgc_key *b);

/* How pg_locks shows the key: classid, objid (oids, unsigned) and objsubid (1 for a bigint, 2
 * for a pair). A bigint k is classid = high 32 bits, objid = low 32 bits; a pair (a, b) is
 * classid = (uint32)a, objid = (uint32)b. Errors: PGC_EUSAGE (NULL or unknown kind). */
PGC_EXTERN PGC_MUSTCHECK int pgc_key_to_pg_locks(const pgc_key *key, uint32_t *classid,
                                                 uint32_t *objid, int *objsubid);

/* The inverse: the key of a pg_locks row with locktype 'advisory'. The name is left empty.
 * Errors: PGC_EUSAGE (out is NULL, or objsubid is neither 1 nor 2). Thread-safe. */
PGC_EXTERN PGC_MUSTCHECK int pgc_key_from_pg_locks(uint32_t classid, uint32_t objid, int objsubid,
                                                   pgc_key *out);

/* Looks key up in the name registry (<schema>.lock_names; schema NULL means "pgcoord") and, when
 * it is recorded there, copies its name into key->name; otherwise key->name becomes "". Without
 * the registry table (schema not installed) this is not an error: the name stays "". Only bigint
 * keys have names. Errors: PGC_EUSAGE, PGC_ESQL, PGC_ECONNLOST. */
PGC_EXTERN PGC_MUSTCHECK int pgc_key_lookup_name(pgc_conn *conn, const char *schema, pgc_key *key,
                                                 pgc_error *err);

/* ---- Session locks ---------------------------------------------------------------------- */

/* One successful acquisition of a session lock. Owned by the connection that took it: freed by
 * pgc_lock_release(), or by pgc_conn_close() with the connection. */
typedef struct pgc_lock pgc_lock;

/* Flags for pgc_lock_acquire() and pgc_xact_lock(). */
#define PGC_LOCK_EXCLUSIVE 0u  /* the default */
#define PGC_LOCK_SHARED 1u     /* shared mode: compatible with other shared holders */
#define PGC_LOCK_TRY 2u        /* do not wait: PGC_EBUSY at once when someone else holds it */
#define PGC_LOCK_NO_REGISTRY 4u /* do not record a named key in the name registry */
/* pgc_lock_acquire() only. Hold the lock as a transaction lock (pg_advisory_xact_lock) in a
 * transaction of its own that stays open until pgc_lock_release() commits it: what works
 * through a transaction-mode pooler, which keeps one server session for a transaction's whole
 * life. The transaction is READ COMMITTED, so it holds no snapshot between statements (it holds
 * back neither vacuum nor CREATE INDEX CONCURRENTLY), with idle_in_transaction_session_timeout
 * (and transaction_timeout from PostgreSQL 17) off, and application_name "pgcoord/lock-holder"
 * so that diagnostics know it. While it is held the connection is inside that transaction:
 * statements sent on it run there, pgc_lock_check() heartbeats there, and one such lock per
 * connection at a time. The connection must be outside a transaction. */
#define PGC_LOCK_HOLD_XACT 8u
/* The application_name of such a transaction, by which diagnostics know it. */
#define PGC_LOCK_HOLDER_APPLICATION "pgcoord/lock-holder"
/* pgc_lock_acquire() only. Let the library pick the scope: a session lock on a direct
 * connection or through a pool in session mode, PGC_LOCK_HOLD_XACT through a transaction-mode
 * pooler or one it cannot test (pgc_conn_pooler()); PGC_EPOOLER through a statement-mode
 * pooler. pgcoord run uses it. */
#define PGC_LOCK_AUTO_SCOPE 16u
/* pgc_lock_acquire() only. Record when this session took the lock, in the lock_holds table of
 * the options' schema, so that pgc_lock_holders_recorded() (and pgcoord lock status) can say
 * it: the server keeps no such time. Costs a statement after the first acquisition of a key
 * by the session and one when its last acquisition is released; a schema without the table
 * (not installed, or older) records nothing. A lock held in a transaction of its own
 * (PGC_LOCK_HOLD_XACT) needs no record: its transaction's start says it. pgcoord run uses it. */
#define PGC_LOCK_RECORD 32u

/* Wait without a deadline. Only this exact value means "forever"; other negatives are errors. */
#define PGC_WAIT_FOREVER (-1)

typedef struct pgc_lock_options {
	unsigned int flags;  /* PGC_LOCK_* */
	int64_t timeout_ms;  /* how long to wait: 0 = try once, PGC_WAIT_FOREVER = no deadline */
	/* A descriptor to watch while waiting, or -1. When it becomes readable the wait is
	 * abandoned (the server request is cancelled and checked as for a timeout) and the call
	 * returns PGC_EINTR. It is only polled, never read. */
	int cancel_fd;
	/* Schema of the name registry (NULL: "pgcoord"). */
	const char *schema;
} pgc_lock_options;

#define PGC_LOCK_OPTIONS_INIT { PGC_LOCK_EXCLUSIVE, 0, -1, NULL }

/* Takes the session advisory lock on key through conn.
 *
 * With PGC_LOCK_TRY, or timeout_ms 0, it asks once and returns PGC_EBUSY when another session
 * holds a conflicting lock. Otherwise it waits up to timeout_ms (PGC_WAIT_FOREVER: no limit) and
 * returns PGC_ETIMEDOUT at the deadline. The deadline is enforced by the server (lock_timeout,
 * set for this one statement and restored), then checked: when the server grants the lock in the
 * same instant as the timeout fires, pg_locks is consulted, so a call that returns
 * PGC_ETIMEDOUT holds nothing and has no request left queued, and one that returns 0 holds the
 * lock. Inside a transaction block the wait runs under a savepoint, so a timeout leaves the
 * transaction usable and its settings untouched.
 *
 * Session locks stack: taking a key this connection already holds succeeds at once and needs
 * its own release. Each success gives a new handle in *out.
 *
 * Named keys (pgc_key_from_name) are recorded in <schema>.lock_names when that table exists
 * (checked once per connection) unless PGC_LOCK_NO_REGISTRY is set; if the key is already
 * recorded under another name, nothing is locked and PGC_ECOLLISION names both.
 *
 * A session lock is only taken where the session is kept: the first one on a connection asks
 * pgc_conn_pooler() (one round trip on a direct connection). Through a transaction-mode
 * pooler, or one whose kind cannot be tested, it is refused with PGC_EPOOLER unless
 * PGC_LOCK_HOLD_XACT or PGC_LOCK_AUTO_SCOPE says how to hold it instead. The wait is bounded
 * by timeout_ms alone: the server's statement_timeout (the role's, the database's) is off for
 * the waiting statement, and its lock_timeout is the caller's.
 *
 * Errors: PGC_EUSAGE (NULL argument, unknown flags, timeout below -1, unknown key kind, the
 * transaction is aborted), PGC_EBUSY, PGC_ETIMEDOUT, PGC_EINTR, PGC_ECOLLISION, PGC_EPOOLER,
 * PGC_ESQL (for example a deadlock, 40P01), PGC_ECONNLOST, PGC_ENOMEM. On any error *out is
 * NULL and nothing is held. Not thread-safe for one conn. */
PGC_EXTERN PGC_MUSTCHECK int pgc_lock_acquire_ex(pgc_conn *conn, const pgc_key *key,
                                                 const pgc_lock_options *opts, pgc_lock **out,
                                                 pgc_error *err);

/* pgc_lock_acquire_ex() with flags and timeout_ms and the other options at their defaults. */
PGC_EXTERN PGC_MUSTCHECK int pgc_lock_acquire(pgc_conn *conn, const pgc_key *key,
                                              unsigned int flags, int64_t timeout_ms,
                                              pgc_lock **out, pgc_error *err);

/* Releases one acquisition through the session that took it and frees the handle, whatever the
 * result (except PGC_EUSAGE: a NULL lock, or a connection busy with another command, which
 * leaves the handle as it was). The server's answer is checked: when it says this session did not hold the lock (it
 * was released behind the library's back, e.g. by pg_advisory_unlock_all() on the raw
 * connection), the result is PGC_ENOTHELD. When the session is in a failed transaction, that
 * transaction is rolled back first (it can only end in a rollback), so the unlock cannot be lost
 * to "current transaction is aborted".
 * Errors: PGC_EUSAGE, PGC_ENOTHELD, PGC_ELOCKLOST (the session is gone: the server released
 * the lock when it ended), PGC_ESQL. Not thread-safe for one conn. */
PGC_EXTERN PGC_MUSTCHECK int pgc_lock_release(pgc_lock *lock, pgc_error *err);

/* The key, the mode (true = shared) and the connection of a handle. The key pointer is owned by
 * the handle. NULL lock gives NULL / false / NULL. */
PGC_EXTERN const pgc_key *pgc_lock_key(const pgc_lock *lock);
PGC_EXTERN bool pgc_lock_shared(const pgc_lock *lock);
PGC_EXTERN pgc_conn *pgc_lock_conn(const pgc_lock *lock);

/* True when the lock is held in a transaction of its own (PGC_LOCK_HOLD_XACT, or chosen by
 * PGC_LOCK_AUTO_SCOPE), false for a session lock or NULL. */
PGC_EXTERN bool pgc_lock_held_in_transaction(const pgc_lock *lock);

/* One entry of what a connection holds: a key in one mode, taken count times. */
typedef struct pgc_held_lock {
	pgc_key key;
	bool shared;
	int count; /* how many acquisitions are not yet released (session locks stack) */
} pgc_held_lock;

/* The session locks conn holds, as the library tracked them, one entry per key and mode, in
 * acquisition order. *out (free with pgc_free) is NULL when *n is 0.
 * Errors: PGC_EUSAGE, PGC_ENOMEM. */
PGC_EXTERN PGC_MUSTCHECK int pgc_conn_locks(const pgc_conn *conn, pgc_held_lock **out, size_t *n,
                                            pgc_error *err);

/* The number of acquisitions conn holds (the sum of the counts); 0 for NULL. */
PGC_EXTERN size_t pgc_conn_lock_count(const pgc_conn *conn);

/* Closes conn like pgc_conn_close(), first releasing the session locks it still holds
 * (pg_advisory_unlock_all, bounded by a 2 s deadline; the server would release them when the
 * session ends anyway) and reporting them: *released (may be NULL; free with pgc_free) gets the
 * list, *n (may be NULL) its length. Handles still open are freed. Returns 0, or the error of the
 * unlock (the connection is closed in every case, and the locks are gone with the session).
 * pgc_conn_close() does the same without the report. */
PGC_EXTERN int pgc_conn_close_locks(pgc_conn *conn, pgc_held_lock **released, size_t *n,
                                    pgc_error *err);

/* ---- Transaction locks ------------------------------------------------------------------ */

/* Takes a transaction-scoped advisory lock (pg_advisory_xact_lock), released by the server at
 * COMMIT or ROLLBACK; there is no handle and no release. Refuses to run outside a transaction
 * block (in autocommit the server would release it at once) with PGC_EUSAGE. flags:
 * PGC_LOCK_SHARED, PGC_LOCK_TRY, PGC_LOCK_NO_REGISTRY; timeout_ms as for pgc_lock_acquire().
 * A timeout or busy result leaves the transaction usable and holding nothing new.
 * Errors: PGC_EUSAGE, PGC_EBUSY, PGC_ETIMEDOUT, PGC_ECOLLISION, PGC_ESQL, PGC_ECONNLOST. */
PGC_EXTERN PGC_MUSTCHECK int pgc_xact_lock(pgc_conn *conn, const pgc_key *key, unsigned int flags,
                                           int64_t timeout_ms, pgc_error *err);

/* Takes transaction locks on n keys, all or nothing, in one canonical order (bigint keys
 * ascending, then pairs ascending), whatever the order of keys[]: two callers locking
 * overlapping sets can never deadlock on each other. Duplicates are taken once. timeout_ms
 * bounds the whole call. On any error none of the keys is held by this call.
 * Errors: as pgc_xact_lock(), and PGC_EUSAGE for n == 0 or more than 10000 keys. */
PGC_EXTERN PGC_MUSTCHECK int pgc_xact_lock_many(pgc_conn *conn, const pgc_key *keys, size_t n,
                                                unsigned int flags, int64_t timeout_ms,
                                                pgc_error *err);

/* ---- Lock loss -------------------------------------------------------------------------- */

/* Checks that lock is still held: its session is alive (pgc_conn_check() with
 * heartbeat_timeout_ms, see conn.h) and, for a lock held in a transaction of its own, that
 * transaction is still open and sound. Returns 0 when it is held, PGC_ELOCKLOST (saying why)
 * when it is not; a lock held in a transaction that failed is let go of at once (its
 * transaction rolled back). Errors also: PGC_EUSAGE. Not thread-safe for one conn. */
PGC_EXTERN PGC_MUSTCHECK int pgc_lock_check(pgc_lock *lock, int heartbeat_timeout_ms,
                                            pgc_error *err);

typedef struct pgc_watch_options {
	int interval_ms;          /* heartbeat every interval_ms; default 1000 */
	int heartbeat_timeout_ms; /* an unanswered heartbeat means lost after this; default 5000 */
	int wake_fd;              /* -1, or a descriptor whose readability ends the watch (0) */
} pgc_watch_options;

#define PGC_WATCH_OPTIONS_INIT { 1000, 5000, -1 }

/* Watches lock's session for duration_ms (PGC_WAIT_FOREVER: until lost or woken): polls its
 * socket (a session ended by the server is seen at once) and sends a heartbeat every
 * interval_ms. Returns 0 when duration_ms passed or wake_fd became readable with the lock still
 * held, PGC_ELOCKLOST as soon as the lock is known lost (detected within interval_ms +
 * heartbeat_timeout_ms of a silent network failure). opts may be NULL.
 * Errors: PGC_EUSAGE (NULL lock, intervals <= 0), PGC_ELOCKLOST, PGC_ENOTHELD (the handle's
 * acquisition was already released). */
PGC_EXTERN PGC_MUSTCHECK int pgc_lock_watch(pgc_lock *lock, int64_t duration_ms,
                                            const pgc_watch_options *opts, pgc_error *err);

/* ---- Row and table locks ---------------------------------------------------------------- */

/* What a locking read does about rows locked by others. */
typedef enum pgc_wait_policy {
	PGC_ROWS_WAIT = 0,         /* wait (bounded by lock_timeout, see below) */
	PGC_ROWS_NOWAIT = 1,       /* fail at once with 55P03 */
	PGC_ROWS_SKIP_LOCKED = 2   /* leave those rows out */
} pgc_wait_policy;

/* Locks the rows of table whose key_column is one of ids, in ascending key order, with
 *   SELECT key FROM table WHERE key = ANY($1) ORDER BY key FOR <mode> [NOWAIT | SKIP LOCKED]
 * so that every path that locks several rows through it takes them in one global order and
 * no deadlock cycle can form among them. table is "name" or "schema.name" (one dot separates
 * the schema; each part is quoted as an identifier, so any other character is allowed);
 * key_column is quoted as is. Keys are 64-bit integers (the column may be smallint, integer
 * or bigint). ids need not be sorted and may repeat; n may be 0.
 * locked (may be NULL) has n entries: locked[i] is set to true when the row with key ids[i]
 * is now locked by this transaction, false when it does not exist (or is invisible to this
 * transaction) or was skipped by SKIP LOCKED.
 * Must run inside a transaction (pgc_tx_run, or your own BEGIN): a row lock outside one
 * would be released at once. The statement is prepared on the session the first time, as
 * pgbench -M prepared does (the statement cache of the connection: after a DEALLOCATE ALL the
 * next call fails once with 26000 and the statement is prepared again).
 * A wait (PGC_ROWS_WAIT) inside pgc_tx_run() with a lock_timeout_ms is bounded by that
 * lock_timeout alone: the server's statement_timeout is off for the locking statement. Without
 * one it is bounded by the session's lock_timeout and statement_timeout, and by the
 * connection's call timeout (pgc_conn_options.call_timeout_ms).
 * Errors: PGC_EUSAGE (NULL or empty names, ids NULL with n > 0, mode or wait_policy out of
 * range, not inside a transaction or the transaction is aborted), PGC_ENOMEM, PGC_ESQL (55P03
 * under NOWAIT or lock_timeout, 40P01, 42P01 no such table, ...; the transaction is then
 * aborted unless this ran in pgc_savepoint()), PGC_ECONNLOST. */
PGC_EXTERN PGC_MUSTCHECK int pgc_lock_rows(pgc_conn *conn, const char *table,
                                           const char *key_column, const int64_t *ids,
                                           size_t n, pgc_row_lock mode,
                                           pgc_wait_policy wait_policy, bool *locked,
                                           pgc_error *err);

/* LOCK TABLE table IN <mode> MODE [NOWAIT]. The mode is always explicit (a bare LOCK TABLE
 * would take ACCESS EXCLUSIVE, the strongest). table is named as for pgc_lock_rows(). The lock
 * is held until the transaction ends.
 * Its wait is bounded as pgc_lock_rows()'s.
 * Errors: PGC_EUSAGE (NULL or empty table, mode out of range, not inside a transaction or the
 * transaction is aborted), PGC_ENOMEM, PGC_ESQL (55P03 under nowait or lock_timeout, 42P01,
 * 42501, ...), PGC_ETIMEDOUT, PGC_ECONNLOST. */
PGC_EXTERN PGC_MUSTCHECK int pgc_lock_table(pgc_conn *conn, const char *table,
                                            pgc_table_lock mode, bool nowait, pgc_error *err);

/* ---- Who holds a key -------------------------------------------------------------------- */

/* One session holding or waiting for a key, from pg_locks joined to pg_stat_activity. Strings
 * are "" when unknown (timestamps are ISO 8601 with time zone, as to_json() prints them). */
typedef struct pgc_lock_holder {
	int pid;
	char application_name[64];
	char client_addr[64];     /* "" for a Unix-socket session */
	bool shared;              /* ShareLock (true) or ExclusiveLock */
	bool granted;             /* holds it (true) or waits for it */
	char wait_start[40];      /* waiters: since when they wait (PostgreSQL 14+) */
	char state[32];           /* pg_stat_activity.state: "idle", "active", ... */
	char state_change[40];    /* since when the session is in that state */
	char backend_start[40];   /* when the session started */
	bool is_self;             /* the session of the conn that asked */
	char acquired_at[40];     /* holders: when they took the lock where that is known
	                             (pgcoord's held transactions behind a pooler, and with
	                             pgc_lock_holders_recorded() the PGC_LOCK_RECORD locks), else "" */
} pgc_lock_holder;

/* Who holds or waits for key in conn's database right now: holders first, then waiters in the
 * order they started waiting. *out (free with pgc_free) is NULL when *n is 0.
 * Errors: PGC_EUSAGE, PGC_ESQL, PGC_ECONNLOST, PGC_ENOMEM. */
PGC_EXTERN PGC_MUSTCHECK int pgc_lock_holders(pgc_conn *conn, const pgc_key *key,
                                              pgc_lock_holder **out, size_t *n, pgc_error *err);

/* As pgc_lock_holders(), and acquired_at is also known for the session locks taken with
 * PGC_LOCK_RECORD, from schema's lock_holds (NULL: "pgcoord"; a schema without that table adds
 * nothing). Errors: as pgc_lock_holders(), and PGC_EUSAGE for a bad schema name. */
PGC_EXTERN PGC_MUSTCHECK int pgc_lock_holders_recorded(pgc_conn *conn, const pgc_key *key,
                                                       const char *schema, pgc_lock_holder **out,
                                                       size_t *n, pgc_error *err);

#ifdef __cplusplus
}
#endif
#endif

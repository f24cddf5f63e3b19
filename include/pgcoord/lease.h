/* pgcoord/lease.h - leases on the database clock, leader election and fencing tokens
 *
 * A lease is a row in <schema>.leases: a name, a holder, an expiry by the database clock
 * (clock_timestamp()) and a fencing token. Every grant of a name hands out a token strictly
 * greater than every token handed out before for that name (a per-name counter bumped in the
 * statement that grants, committed durably, never lowered: tokens survive restarts and never
 * go backwards). Advisory-lock holders get tokens from the same counter (pgc_fence_next).
 *
 * Failover. Tokens fold in the server's timeline T, which every promotion raises: a grant
 * takes max(last + 1, (T - 1) << 40), so every token of timeline T is below T << 40 and below
 * every token of a later timeline. A grant committed on an asynchronous primary and lost with
 * it is therefore never handed out again by the promoted standby. Timeline 1 hands out 1, 2,
 * 3, ...; a band holds 2^40 grants per name. On a new timeline, a name last granted on an
 * earlier one (or unknown there) is granted only one TTL after the timeline's first grant
 * attempt (PGC_EBUSY meanwhile): its holder may have renewed on the old primary and acts until
 * its own deadline. Not covered: two servers promoted onto the same timeline (split brain).
 *
 * A lease alone cannot stop a holder that was paused (GC, SIGSTOP, swap) or cut off from
 * acting after its lease expired. The fencing token can: every write the holder makes carries
 * the token, and the protected resource refuses a token older than the newest. When the
 * protected data is in the same database, call <schema>.fence_check(name, token) in the
 * writing transaction (pgc_fence_check from C): it raises SQLSTATE PCF01 once a newer token
 * exists, and holds a row lock that makes a new grant wait for the transaction to end.
 *
 * The holder also keeps its own deadline: pgc_lease.deadline_ms, taken from CLOCK_MONOTONIC
 * before the acquire or renew was sent, plus the TTL. The server computes the expiry after
 * it received the request, so the holder always believes it lost the lease no later than the
 * server does (provided both clocks run at the same rate; a step of the server's clock is not
 * covered, which is what the token is for).
 *
 * Error codes: PGC_EBUSY (held by someone else), PGC_ESTALE (the lease or token is no longer
 * current: expired, released or superseded), PGC_ENOSCHEMA (run pgcoord init), PGC_ETIMEDOUT,
 * PGC_ECONNLOST, PGC_ESQL, PGC_EUSAGE.
 *
 * Functions taking a pgc_conn are not thread-safe with respect to that connection. */
#ifndef PGCOORD_LEASE_H
#define PGCOORD_LEASE_H

#include <stdbool.h>

#include "conn.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Longest name and holder, in bytes. */
#define PGC_LEASE_NAME_MAX 200
#define PGC_LEASE_HOLDER_MAX 200

/* SQLSTATEs raised by the SQL functions in the schema. */
#define PGC_SQLSTATE_FENCE_STALE "PCF01"   /* fence_check: a newer token exists */
#define PGC_SQLSTATE_FENCE_UNKNOWN "PCF02" /* fence_check: no such token was ever granted */
#define PGC_SQLSTATE_FENCE_LEASED "PCF03"  /* fence_next: the name is held as a lease */

/* The channel lease_release() notifies (payload: the lease name). */
#define PGC_LEASE_CHANNEL "pgcoord_lease"

typedef struct pgc_lease_options {
	/* Schema holding the lease table; NULL means "pgcoord". */
	const char *schema;
	/* Longest wait for the server's answer to one call, in ms; 0 means the default: the TTL
	 * for acquire and renew, 30 s otherwise. When it passes, the call returns PGC_ETIMEDOUT
	 * and the session is shut down, because the outcome of the statement is unknown: close the
	 * pgc_conn and connect again. */
	int64_t timeout_ms;
	/* Longest wait, in ms, for open transactions that checked the previous token before a new
	 * token is granted (see fence_check); 0 means 1000. When it passes, acquire reports
	 * PGC_EBUSY and fence_next PGC_ETIMEDOUT. */
	int64_t lock_timeout_ms;
	/* pgc_lease_campaign only: a descriptor that ends the wait with PGC_EINTR when it becomes
	 * readable (a self-pipe written by a signal handler, say); -1 for none. Nothing is read
	 * from it. */
	int interrupt_fd;
	/* pgc_lease_campaign only: how often to try again, in ms, when no release notification
	 * arrives; 0 means ttl/3. A candidate also tries at the moment the holder's lease expires
	 * and as soon as the holder releases it. */
	int64_t poll_ms;
} pgc_lease_options;

#define PGC_LEASE_OPTIONS_INIT { NULL, 0, 0, -1, 0 }

/* A lease held by this process. Plain memory owned by the caller; nothing to free. */
typedef struct pgc_lease {
	char name[PGC_LEASE_NAME_MAX + 1];
	char holder[PGC_LEASE_HOLDER_MAX + 1];
	int64_t token;         /* the fencing token of this grant */
	int64_t ttl_ms;        /* the TTL used by acquire and every renewal */
	int64_t granted_at_us; /* database clock, microseconds since the Unix epoch */
	int64_t expires_at_us; /* database clock, microseconds since the Unix epoch */
	int64_t deadline_ms;   /* CLOCK_MONOTONIC in ms: consider the lease lost from this instant
	                          on; 0 when this process does not hold it */
} pgc_lease;

/* What the table says about a name (pgc_lease_get, pgc_lease_list). */
typedef struct pgc_lease_info {
	char name[PGC_LEASE_NAME_MAX + 1];
	char holder[PGC_LEASE_HOLDER_MAX + 1]; /* the holder of the last token */
	char kind[8];           /* "lease", or "lock" when the last token went to pgc_fence_next */
	int64_t token;          /* the last token granted for the name */
	bool held;              /* a lease that is neither released nor expired */
	int64_t ttl_ms;         /* 0 for kind "lock" */
	int64_t granted_at_us;  /* database clock, microseconds since the Unix epoch */
	int64_t renewed_at_us;
	int64_t expires_at_us;  /* 0 when released or kind "lock" */
	int64_t released_at_us; /* 0 when not released */
	int64_t db_now_us;      /* the database clock when the row was read */
} pgc_lease_info;

/* Tries once to take the lease name for holder for ttl_ms, by the database clock. It is
 * granted when the name is new, released or expired; the new token is greater than the last
 * one for the name (one greater on the same timeline; see Failover above). Right after a
 * promotion the grant may be held back for one TTL: PGC_EBUSY. Must be called outside a transaction (the grant commits at once).
 * opts may be NULL. name: 1 to PGC_LEASE_NAME_MAX bytes; holder: up to PGC_LEASE_HOLDER_MAX
 * bytes (an empty holder is allowed but shows nothing useful); ttl_ms > 0.
 * On success *out is the lease, with deadline_ms set. On PGC_EBUSY *out describes the current
 * holder (token, holder, granted_at_us, expires_at_us; deadline_ms is 0), or is zeroed when
 * the lease is free but the previous holder's fenced transactions are still open. After
 * other errors its contents are unspecified.
 * Errors: PGC_EUSAGE, PGC_EBUSY (held by another holder, or the previous holder's fenced
 * transactions are still open after lock_timeout_ms), PGC_ENOSCHEMA, PGC_ETIMEDOUT,
 * PGC_ECONNLOST, PGC_ESQL. */
PGC_EXTERN PGC_MUSTCHECK int pgc_lease_acquire(pgc_conn *conn, const char *name,
                                               const char *holder, int64_t ttl_ms,
                                               const pgc_lease_options *opts, pgc_lease *out,
                                               pgc_error *err);

/* Campaigns for the lease: tries pgc_lease_acquire, and while someone else holds it waits for
 * a release notification (LISTEN on PGC_LEASE_CHANNEL), for the moment the holder's lease
 * expires by the database clock, or for poll_ms, then tries again; up to wait_ms in all (-1:
 * no limit). Must be called outside a transaction. The session listens on the channel while
 * it waits and stops listening before it returns; notifications for other channels that
 * arrive meanwhile on this session are consumed and lost, so do not campaign on a session
 * that LISTENs for something else.
 * Errors: as pgc_lease_acquire except PGC_EBUSY; PGC_ETIMEDOUT when wait_ms passed;
 * PGC_EINTR when opts->interrupt_fd became readable. */
PGC_EXTERN PGC_MUSTCHECK int pgc_lease_campaign(pgc_conn *conn, const char *name,
                                                const char *holder, int64_t ttl_ms,
                                                int64_t wait_ms, const pgc_lease_options *opts,
                                                pgc_lease *out, pgc_error *err);

/* Extends the lease by lease->ttl_ms from now (database clock), only while it is still held
 * with lease->token and not expired. On success updates lease->expires_at_us and
 * lease->deadline_ms. Must be called outside a transaction.
 * Errors: PGC_EUSAGE, PGC_ESTALE (expired, released or superseded: the lease is lost; the
 * message says which, and lease->deadline_ms becomes 0), PGC_ENOSCHEMA, PGC_ETIMEDOUT (the
 * default timeout is the time left before deadline_ms), PGC_ECONNLOST, PGC_ESQL. After a
 * PGC_ETIMEDOUT or PGC_ECONNLOST the lease may still be held: reconnect and renew again
 * before deadline_ms. */
PGC_EXTERN PGC_MUSTCHECK int pgc_lease_renew(pgc_conn *conn, pgc_lease *lease,
                                             const pgc_lease_options *opts, pgc_error *err);

/* Ends the lease name held with token (also when it already expired, as long as no newer
 * token exists), and notifies PGC_LEASE_CHANNEL so that waiting candidates try at once. Also
 * the operator's override (pgcoord lease release). A lease already released with this token
 * is not an error, so a retry after a lost connection is safe. Must be called outside a
 * transaction.
 * Errors: PGC_EUSAGE, PGC_ESTALE (a newer token exists),
 * PGC_ENOTFOUND (no such name or token), PGC_ENOSCHEMA, PGC_ETIMEDOUT, PGC_ECONNLOST,
 * PGC_ESQL. */
PGC_EXTERN PGC_MUSTCHECK int pgc_lease_release(pgc_conn *conn, const char *name, int64_t token,
                                               const pgc_lease_options *opts, pgc_error *err);

/* Reads what the table says about name into *out.
 * Errors: PGC_EUSAGE, PGC_ENOTFOUND (no token was ever granted for name), PGC_ENOSCHEMA,
 * PGC_ETIMEDOUT, PGC_ECONNLOST, PGC_ESQL. */
PGC_EXTERN PGC_MUSTCHECK int pgc_lease_get(pgc_conn *conn, const char *name,
                                           const pgc_lease_options *opts, pgc_lease_info *out,
                                           pgc_error *err);

/* Every name in the table, ordered by name. *out is an array of *count entries that the
 * caller frees with pgc_free() (NULL when count is 0).
 * Errors: PGC_EUSAGE, PGC_ENOMEM, PGC_ENOSCHEMA, PGC_ETIMEDOUT, PGC_ECONNLOST, PGC_ESQL. */
PGC_EXTERN PGC_MUSTCHECK int pgc_lease_list(pgc_conn *conn, const pgc_lease_options *opts,
                                            pgc_lease_info **out, size_t *count,
                                            pgc_error *err);

/* Milliseconds left before lease->deadline_ms by CLOCK_MONOTONIC (negative once passed; 0
 * when lease is NULL or not held). Thread-safe. */
PGC_EXTERN int64_t pgc_lease_remaining_ms(const pgc_lease *lease);

/* Checks that token is the newest fencing token for name by running
 * SELECT <schema>.fence_check(name, token) on conn. Call it inside the transaction that
 * writes what the token protects: the check then holds until that transaction ends.
 * Errors: PGC_EUSAGE, PGC_ESTALE (SQLSTATE PCF01: a newer token exists; roll back),
 * PGC_ENOTFOUND (SQLSTATE PCF02: no such token was granted), PGC_ENOSCHEMA, PGC_ETIMEDOUT,
 * PGC_ECONNLOST, PGC_ESQL. */
PGC_EXTERN PGC_MUSTCHECK int pgc_fence_check(pgc_conn *conn, const char *name, int64_t token,
                                             const pgc_lease_options *opts, pgc_error *err);

/* Hands a new fencing token for name to holder, who holds the name by other means (a session
 * advisory lock, for instance): one greater than every token granted before for name, from
 * the same counter as the leases. Must be called outside a transaction, while holding
 * whatever grants the right to act (the advisory lock), and before acting.
 * Errors: PGC_EUSAGE, PGC_EBUSY (SQLSTATE PCF03: a lease on name is held and not expired),
 * PGC_ETIMEDOUT (transactions that checked the previous token are still open after
 * lock_timeout_ms, or no answer within timeout_ms), PGC_ENOSCHEMA, PGC_ECONNLOST, PGC_ESQL. */
PGC_EXTERN PGC_MUSTCHECK int pgc_fence_next(pgc_conn *conn, const char *name, const char *holder,
                                            const pgc_lease_options *opts, int64_t *out_token,
                                            pgc_error *err);

#ifdef __cplusplus
}
#endif
#endif

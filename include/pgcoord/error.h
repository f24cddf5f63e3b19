/* pgcoord/error.h - error codes, error classes and the pgc_error record */
#ifndef PGCOORD_ERROR_H
#define PGCOORD_ERROR_H

#include "common.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Return codes. 0 is success; failures are negative. The values are part of the ABI and are
 * append-only: a code never changes its number or meaning. */
typedef enum pgc_code {
	PGC_OK = 0,
	PGC_EUSAGE = -1,             /* bad argument from the caller; nothing was done */
	PGC_ENOMEM = -2,             /* out of memory */
	PGC_ECONNECT = -3,           /* could not connect to the server */
	PGC_ESQL = -4,               /* the server reported an error (see sqlstate) */
	PGC_ECONNLOST = -5,          /* the session ended while we used it */
	PGC_ETIMEDOUT = -6,          /* a deadline passed; nothing is left held or queued */
	PGC_EBUSY = -7,              /* a try-lock found the lock held by someone else */
	PGC_ENOTHELD = -8,           /* the server says this session does not hold the lock */
	PGC_ELOCKLOST = -9,          /* a held lock was lost (its session ended) */
	PGC_ECOLLISION = -10,        /* two names map to the same key */
	PGC_ERETRY_EXHAUSTED = -11,  /* a retried transaction failed max_attempts times */
	PGC_ECOMMIT_UNKNOWN = -12,   /* the session died after COMMIT was sent: outcome unknown */
	PGC_ESTALE = -13,            /* a claim, lease or token is no longer current */
	PGC_EEMPTY = -14,            /* nothing to return (an empty queue) */
	PGC_ENOSCHEMA = -15,         /* the pgcoord schema is not installed (run pgcoord init) */
	PGC_ESCHEMA_VERSION = -16,   /* the schema is newer than this library knows */
	PGC_ENOTFOUND = -17,         /* the named object does not exist */
	PGC_EINTERNAL = -18,         /* a bug or an unexpected answer from the server */
	PGC_EINTR = -19,             /* interrupted at the caller's request */
	PGC_EAUTH = -20,             /* the server refused the credentials */
	PGC_ECONFIG = -21,           /* a connection setting that cannot work (sslmode, port, host
	                                name, database name) */
	PGC_EPOOLER = -22            /* the pooler in between cannot keep what was asked (a session
	                                lock through a transaction-mode pooler) */
} pgc_code;

/* Job queue codes (-30..-39). */
enum {
	PGC_EDUPLICATE = -30, /* a job with this unique key is already pending or running */
	PGC_EFINISHED = -31   /* the job has finished already (succeeded, failed or cancelled) */
};

/* What a caller should do about an error. */
typedef enum pgc_error_class {
	PGC_CLASS_NONE = 0,        /* no error */
	PGC_CLASS_RETRY_TX = 1,    /* roll back and run the whole transaction again (40P01, 40001) */
	PGC_CLASS_RETRY_LATER = 2, /* transient: lock not available, canceled, connection lost,
	                              server shutting down; try again after a pause */
	PGC_CLASS_USAGE = 3,       /* fix the input; retrying the same call cannot succeed */
	PGC_CLASS_FATAL = 4,       /* anything else: give up and report */
	PGC_CLASS_CONFIG = 5       /* fix the configuration (credentials, host, TLS settings, the
	                              way through a pooler); retrying as is cannot succeed */
} pgc_error_class;

#define PGC_ERROR_MESSAGE_MAX 512
#define PGC_ERROR_DETAIL_MAX 512
#define PGC_ERROR_HINT_MAX 256

/* The details of a failure, filled by every function that takes a pgc_error *. The record is
 * plain memory owned by the caller (stack or heap); nothing in it needs freeing. Messages are
 * one line without a trailing newline. sqlstate is empty for client-side errors. */
typedef struct pgc_error {
	int code;                              /* a pgc_code, PGC_OK when there was no error */
	pgc_error_class klass;                 /* what to do about it */
	char sqlstate[6];                      /* five characters from the server, or "" */
	int position;                          /* 1-based cursor position in the statement, or 0 */
	char message[PGC_ERROR_MESSAGE_MAX];   /* primary message */
	char detail[PGC_ERROR_DETAIL_MAX];     /* server detail, or "" */
	char hint[PGC_ERROR_HINT_MAX];         /* server hint, or "" */
} pgc_error;

#define PGC_ERROR_INIT { PGC_OK, PGC_CLASS_NONE, "", 0, "", "", "" }

/* Resets err to PGC_ERROR_INIT. NULL is accepted. */
PGC_EXTERN void pgc_error_clear(pgc_error *err);

/* A static, one-line description of a pgc_code ("lock not held", ...). Unknown codes give
 * "unknown error". Thread-safe. */
PGC_EXTERN const char *pgc_strerror(int code);

/* A static name for a class: "none", "retry-tx", "retry-later", "usage", "fatal",
 * "config". */
PGC_EXTERN const char *pgc_error_class_name(pgc_error_class klass);

/* Classifies a five-character SQLSTATE: 40P01 and 40001 are RETRY_TX; 55P03, 57014, class 08,
 * 53300 and 57P01/57P02/57P03 are RETRY_LATER; class 28 (invalid authorization) and 3D000
 * (no such database) are CONFIG; everything else, and NULL or malformed input, is FATAL.
 * (USAGE is reserved for client-side argument errors, which carry no SQLSTATE.) */
PGC_EXTERN pgc_error_class pgc_sqlstate_class(const char *sqlstate);

#ifdef __cplusplus
}
#endif
/* Checks a name that a caller gives the library or the server: a lock, lease, fence or
 * queue name, a lease holder. It must be 1 to max bytes (max 0: no limit) of well-formed
 * UTF-8 (RFC 3629), because it is stored and compared as text by the server, shown in
 * pg_locks forensics and JSON, and hashed to the same key by every client whatever its
 * locale. what names the name in the message ("lock name"; NULL: "name"). Every library
 * function that takes such a name calls it before anything reaches the server.
 * Errors: PGC_EUSAGE: "<what> must not be NULL", "<what> is empty", "<what> is longer than N
 * bytes", or "<what> is not valid UTF-8: byte 0xNN at offset K" (K counts bytes from 0).
 * Thread-safe. */
PGC_EXTERN PGC_MUSTCHECK int pgc_name_check(const char *what, const char *name, size_t max,
                                            pgc_error *err);

#endif

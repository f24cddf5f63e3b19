/* web.h - what the files of pgcoord web share: the server's settings and state, the session
 * pool, requests and responses, the API */
#ifndef PGCOORD_WEB_H
#define PGCOORD_WEB_H

#include <pthread.h>
#include <stdbool.h>
#include <stdio.h>
#include <sys/socket.h>

#include "cli.h"

/* One embedded file (web_assets.c, generated from page/ by tools/embed-web.py). */
typedef struct web_asset {
	const char *path; /* "/", "/app.js", "/app.css" */
	const char *type; /* Content-Type */
	const unsigned char *data;
	size_t len;
} web_asset;

extern const web_asset web_assets[];
extern const size_t web_asset_count;

/* One line of --auth-file: who (the name logged with each action) and the secret. */
typedef struct web_cred {
	char *name;
	char *secret;
} web_cred;

/* A session of the pool: its connection and the queue handle on it, opened when first used
 * and again after the session was lost. */
typedef struct web_slot {
	pgc_conn *conn;
	pgc_queue *q;
	bool busy;
} web_slot;

#define WEB_POOL_SIZE 4       /* sessions, and request threads */
#define WEB_STATEMENT_MS 2000 /* statement_timeout of every statement */
#define WEB_COUNT_CAP 10000   /* counts on the overview stop here */
#define WEB_BODY_MAX 65536    /* request bodies larger than this are refused */

typedef struct web_server {
	/* settings */
	const char *dsn;
	const char *schema;     /* NULL: pgcoord */
	struct sockaddr_storage addr;
	socklen_t addrlen;
	bool loopback;          /* the address is a loopback one: Host headers must say so too */
	bool allow_actions, allow_terminate, hide_payloads;
	int64_t refresh_ms;
	web_cred *creds;        /* from --auth-file; NULL when none */
	size_t ncreds;
	/* the session pool */
	pthread_mutex_t mu;
	pthread_cond_t cv;
	web_slot slots[WEB_POOL_SIZE];
	/* the doctor's last report, kept for WEB_DOCTOR_MS */
	pthread_mutex_t doctor_mu;
	pgc_doctor_report doctor;
	int64_t doctor_at_ms;   /* CLOCK_MONOTONIC ms; 0: never */
	char doctor_taken[CLI_TIME_MAX];
} web_server;

/* A request as the handlers see it. */
typedef struct web_req {
	web_server *srv;
	struct MHD_Connection *mc;
	const char *method;
	const char *path;
	char client[64];        /* "addr:port" */
	const char *who;        /* the credential's name once authenticated, else NULL */
} web_req;

/* A response being built: status, content type, and the body written to f. */
typedef struct web_resp {
	int status;
	const char *type;
	bool cacheable;         /* static assets; the API is never cached */
	const char *allow;      /* for 405: the Allow header */
	bool auth_challenge;    /* for 401: WWW-Authenticate */
	FILE *f;
	char *body;
	size_t len;
} web_resp;

/* ---- web_http.c ---- */

/* The most a start's reason for failing takes, with its terminating NUL. */
#define WEB_START_REASON_MAX 256

/* Starts the HTTP daemon on srv->addr; returns NULL when it cannot, with why in reason
 * (WEB_START_REASON_MAX bytes: "Address already in use"), for the caller to say with the
 * address. *port gets the port it listens on. */
struct MHD_Daemon *web_http_start(web_server *srv, unsigned *port, char *reason);
void web_http_stop(struct MHD_Daemon *d);

/* Parses --listen's ADDR:PORT (IPv4, localhost, [IPv6]; port 0 to 65535) into *addr;
 * *loopback says whether it is a loopback address. */
bool web_parse_listen(const char *text, struct sockaddr_storage *addr, socklen_t *addrlen, bool *loopback);

/* A server of GET /metrics alone, with the headers of every response: write prints the text.
 * Called from the server's thread. NULL when it cannot listen, with why in reason (as for
 * web_http_start); *port is the port. One per process. */
struct MHD_Daemon *web_metrics_start(const struct sockaddr_storage *addr, unsigned *port,
                                     void (*write)(FILE *f, void *arg), void *arg, char *reason);

/* ---- web_api.c ---- */

/* Answers r: status, type and body in *out. */
void web_api(web_req *r, web_resp *out);


/* ---- web_req.c ---- */

/* The value of query parameter name, or NULL. */
const char *web_arg(const web_req *r, const char *name);
/* The value of request header name, or NULL. */
const char *web_header(const web_req *r, const char *name);
/* The first query parameter that is not in names (NULL-terminated), or NULL. */
const char *web_unknown_arg(const web_req *r, const char *const *names);

/* A JSON error: {"error":{"message":...,"parameter":...}} with status. */
void web_error(web_resp *out, int status, const char *parameter, const char *fmt, ...) PGC_PRINTF(4, 5);

/* ---- web_pool.c ---- */

/* A free session of the pool, connected (again, when it was lost), or NULL with err filled
 * (PGC_ETIMEDOUT when every session stayed busy for 5 s). */
web_slot *web_pool_get(web_server *srv, pgc_error *err);
/* Gives a session back; one whose call failed with err (may be NULL) in a way that leaves it
 * unusable is closed, to be opened anew by the next request. */
void web_pool_put(web_server *srv, web_slot *s, const pgc_error *err);
void web_pool_close(web_server *srv);
/* Opens s's queue handle when it has none yet (PGC_OK when it has one). */
int web_slot_queue(web_server *srv, web_slot *s, pgc_error *err);

#endif

/* conn.c - opening, replacing and closing sessions; what is attached to them
 *
 * A pgc_conn is one handle on one session at a time. Connecting is nonblocking and bounded:
 * each host of a multi-host DSN gets its own connect_timeout, as libpq gives it in blocking
 * mode, and a failure is classified by what can be fixed: a setting that can never work
 * (checked before any packet is sent, or a host name that does not resolve), credentials the
 * server refused (its SQLSTATE, which libpq reports only in verbose mode), or a server that is
 * not there now. A reconnect puts a new PGconn under the same handle and tells every
 * attachment that the old session is gone; closing tells them the handle goes. */
#include <errno.h>
#include <fcntl.h>
#include <netdb.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "conn_priv.h"

#define CONNECT_MESSAGE_MAX 1024

static char *dup_str(const char *s)
{
	return s ? strdup(s) : NULL;
}

/* ---- the DSN before connecting --------------------------------------------------------------- */

/* Whether frag (len bytes) stands in dsn where a keyword does: at the start, or after white
 * space, '?' or '&', made of letters, digits and '_', and followed by '=' (after spaces). */
static bool dsn_keyword(const char *dsn, const char *frag, size_t len)
{
	if (len == 0 || len > 63)
		return false;
	for (size_t i = 0; i < len; i++)
		if (!((frag[i] >= 'a' && frag[i] <= 'z') || (frag[i] >= 'A' && frag[i] <= 'Z') ||
		      (frag[i] >= '0' && frag[i] <= '9') || frag[i] == '_'))
			return false;
	for (const char *p = dsn; *p; p++) {
		if (strncmp(p, frag, len) != 0)
			continue;
		if (p != dsn && !(p[-1] == ' ' || p[-1] == '\t' || p[-1] == '\n' || p[-1] == '?' || p[-1] == '&'))
			continue;
		const char *q = p + len;
		while (*q == ' ' || *q == '\t')
			q++;
		if (*q == '=')
			return true;
	}
	return false;
}

/* Copies libpq's message into dst with every double-quoted part replaced by "...": libpq's
 * parse errors quote fragments of the connection string, and those may hold a password. A
 * fragment that is a keyword of dsn (a misspelt "pasword") is kept: it names the mistake. */
static void scrub_quoted(char *dst, size_t n, const char *msg, const char *dsn)
{
	size_t o = 0;
	for (const char *p = msg; *p && o + 6 < n; p++) {
		if (*p != '"') {
			dst[o++] = *p;
			continue;
		}
		const char *end = strchr(p + 1, '"');
		size_t len = end ? (size_t)(end - p - 1) : strlen(p + 1);
		if (end != NULL && dsn_keyword(dsn, p + 1, len) && o + len + 3 < n) {
			memcpy(dst + o, p, len + 2);
			o += len + 2;
		} else {
			memcpy(dst + o, "\"...\"", 5);
			o += 5;
		}
		if (end == NULL)
			break;
		p = end;
	}
	dst[o] = '\0';
}

/* A connection setting: the DSN's value, else libpq's default (which reads the PG*
 * environment variables), else NULL. */
typedef struct settings {
	PQconninfoOption *dsn, *defaults;
} settings;

static const char *setting(const settings *s, const char *key, bool *from_env)
{
	if (from_env)
		*from_env = false;
	for (PQconninfoOption *o = s->dsn; o && o->keyword; o++)
		if (strcmp(o->keyword, key) == 0 && o->val != NULL && *o->val != '\0')
			return o->val;
	for (PQconninfoOption *o = s->defaults; o && o->keyword; o++)
		if (strcmp(o->keyword, key) == 0 && o->val != NULL && *o->val != '\0') {
			if (from_env)
				*from_env = true;
			return o->val;
		}
	return NULL;
}

/* The number of comma-separated entries of a list (1 for NULL or ""). */
static int list_count(const char *v)
{
	int n = 1;
	for (const char *p = v; p && *p; p++)
		n += *p == ',';
	return n;
}

/* Entry i of a comma-separated list, into buf. */
static const char *list_item(const char *v, int i, char *buf, size_t n)
{
	const char *p = v ? v : "";
	for (int k = 0; k < i && p; k++) {
		p = strchr(p, ',');
		if (p)
			p++;
	}
	if (p == NULL)
		p = "";
	size_t len = strcspn(p, ",");
	if (len >= n)
		len = n - 1;
	memcpy(buf, p, len);
	buf[len] = '\0';
	return buf;
}

static bool one_of(const char *v, const char *const *allowed)
{
	for (; *allowed; allowed++)
		if (strcmp(v, *allowed) == 0)
			return true;
	return false;
}

/* A setting that can never work is the caller's configuration, not a server that is down:
 * say which one, and what it may be. */
static int check_settings(const settings *s, pgc_error *err)
{
	static const struct {
		const char *key, *env;
		const char *allowed[8];
	} enums[] = {
		{ "sslmode", "PGSSLMODE", { "disable", "allow", "prefer", "require", "verify-ca", "verify-full", NULL } },
		{ "gssencmode", "PGGSSENCMODE", { "disable", "prefer", "require", NULL } },
		{ "channel_binding", "PGCHANNELBINDING", { "disable", "prefer", "require", NULL } },
		{ "target_session_attrs", "PGTARGETSESSIONATTRS",
		  { "any", "read-write", "read-only", "primary", "standby", "prefer-standby", NULL } },
	};
	for (size_t i = 0; i < sizeof enums / sizeof enums[0]; i++) {
		bool env;
		const char *v = setting(s, enums[i].key, &env);
		if (v == NULL || one_of(v, enums[i].allowed))
			continue;
		char list[160] = "";
		for (const char *const *a = enums[i].allowed; *a; a++)
			snprintf(list + strlen(list), sizeof list - strlen(list), "%s%s", list[0] ? ", " : "", *a);
		return pgc__err(err, PGC_ECONFIG, "invalid %s \"%.40s\"%s%s: use one of %s", enums[i].key, v,
		                env ? " from " : "", env ? enums[i].env : "", list);
	}
	const char *host = setting(s, "host", NULL), *hostaddr = setting(s, "hostaddr", NULL);
	bool port_env;
	const char *port = setting(s, "port", &port_env);
	int nhost = host ? list_count(host) : hostaddr ? list_count(hostaddr) : 1;
	if (host && hostaddr && list_count(hostaddr) != nhost)
		return pgc__err(err, PGC_ECONFIG, "%d host names but %d hostaddr values", nhost,
		                list_count(hostaddr));
	if (port) {
		int nport = list_count(port);
		if (nport != 1 && nport != nhost)
			return pgc__err(err, PGC_ECONFIG, "%d port numbers for %d hosts: give one port, or one per host",
			                nport, nhost);
		for (int i = 0; i < nport; i++) {
			char item[64];
			list_item(port, i, item, sizeof item);
			if (item[0] == '\0')
				continue;
			char *end;
			errno = 0;
			long v = strtol(item, &end, 10);
			if (errno != 0 || *end != '\0' || v < 1 || v > 65535)
				return pgc__err(err, PGC_ECONFIG, "invalid port \"%.20s\"%s: use a number from 1 to 65535", item,
				                port_env ? " from PGPORT" : "");
		}
	}
	const char *ct = setting(s, "connect_timeout", NULL);
	if (ct != NULL) {
		char *end;
		long v = strtol(ct, &end, 10);
		if (*end != '\0' || v < 0)
			return pgc__err(err, PGC_ECONFIG, "invalid connect_timeout \"%.20s\": use whole seconds", ct);
	}
	return PGC_OK;
}

/* A malformed DSN is the caller's mistake: say so showing only its keys; a value may be a
 * password under a misspelt keyword. */
static int parse_dsn(const char *dsn, settings *s, pgc_error *err)
{
	char *msg = NULL;
	s->dsn = PQconninfoParse(dsn, &msg);
	if (s->dsn == NULL) {
		char reason[PGC_ERROR_MESSAGE_MAX], line[PGC_ERROR_MESSAGE_MAX];
		scrub_quoted(reason, sizeof reason, msg ? msg : "out of memory", dsn);
		pgc__copy_line(line, sizeof line, reason);
		char *masked = pgc__dsn_mask_all(dsn);
		int rc = pgc__err(err, msg ? PGC_EUSAGE : PGC_ENOMEM, "invalid connection string %s: %s",
		                  masked ? masked : "", line);
		PQfreemem(msg);
		pgc_free(masked);
		return rc;
	}
	s->defaults = PQconndefaults();
	if (s->defaults == NULL)
		return pgc__err(err, PGC_ENOMEM, "out of memory");
	return PGC_OK;
}

static void settings_free(settings *s)
{
	PQconninfoFree(s->dsn);
	PQconninfoFree(s->defaults);
	s->dsn = s->defaults = NULL;
}

/* ---- connecting ----------------------------------------------------------------------------- */

/* libpq's default prints notices on stderr; a library must not. The last one is kept for
 * messages (a terminated session's FATAL arrives this way while it is idle). */
static void notice_receiver(void *arg, const PGresult *res)
{
	pgc_conn *c = arg;
	const char *msg = PQresultErrorField(res, PG_DIAG_MESSAGE_PRIMARY);
	const char *state = PQresultErrorField(res, PG_DIAG_SQLSTATE);
	pgc__copy_line(c->notice, sizeof c->notice, msg ? msg : PQresultErrorMessage(res));
	snprintf(c->notice_state, sizeof c->notice_state, "%s", state && strlen(state) == 5 ? state : "");
	if (c->opts.notice_fn == NULL)
		return;
	char line[PGC_ERROR_MESSAGE_MAX];
	/* The severity in English, whatever the server's lc_messages (PostgreSQL 9.6+). */
	const char *sev = PQresultErrorField(res, PG_DIAG_SEVERITY_NONLOCALIZED);
	if (sev == NULL)
		sev = PQresultErrorField(res, PG_DIAG_SEVERITY);
	pgc__copy_line(line, sizeof line, msg);
	c->opts.notice_fn(sev ? sev : "NOTICE", line, c->opts.notice_arg);
}

/* One connection attempt: the base parameters plus overrides (NULL-terminated pairs), bounded
 * by timeout_ms (0: none). Libpq reports errors verbosely during the attempt, so that a
 * server's refusal carries its SQLSTATE. */
typedef struct attempt {
	char msg[CONNECT_MESSAGE_MAX];
	bool needs_password;
	bool timed_out;
} attempt;

static PGconn *attempt_connect(const char *const *keys, const char *const *vals, int64_t timeout_ms,
                               attempt *a)
{
	memset(a, 0, sizeof *a);
	PGconn *pg = PQconnectStartParams(keys, vals, 1);
	if (pg == NULL) {
		snprintf(a->msg, sizeof a->msg, "out of memory");
		return NULL;
	}
	PQsetErrorVerbosity(pg, PQERRORS_VERBOSE);
	int64_t deadline = timeout_ms > 0 ? pgc__now_ms() + timeout_ms : -1;
	PostgresPollingStatusType st = PQstatus(pg) == CONNECTION_BAD ? PGRES_POLLING_FAILED
	                                                               : PGRES_POLLING_WRITING;
	for (;;) {
		if (st == PGRES_POLLING_OK) {
			PQsetErrorVerbosity(pg, PQERRORS_DEFAULT);
			return pg;
		}
		if (st == PGRES_POLLING_FAILED)
			break;
		int64_t left = deadline < 0 ? -1 : deadline - pgc__now_ms();
		if (deadline >= 0 && left <= 0) {
			a->timed_out = true;
			break;
		}
		struct pollfd p = { PQsocket(pg), st == PGRES_POLLING_READING ? POLLIN : POLLOUT, 0 };
		int pr = p.fd < 0 ? 1 : poll(&p, 1, left < 0 || left > 1000 ? 1000 : (int)left);
		if (pr < 0 && errno != EINTR)
			break;
		if (pr > 0 || p.fd < 0)
			st = PQconnectPoll(pg);
	}
	a->needs_password = PQconnectionNeedsPassword(pg);
	if (a->timed_out) {
		char host[256];
		snprintf(host, sizeof host, "%s", PQhost(pg) ? PQhost(pg) : "");
		snprintf(a->msg, sizeof a->msg, "connection to server at \"%s\", port %s failed: timeout expired after %lld ms",
		         host, PQport(pg) ? PQport(pg) : "?", (long long)timeout_ms);
	} else {
		snprintf(a->msg, sizeof a->msg, "%s", PQerrorMessage(pg));
	}
	PQfinish(pg);
	return NULL;
}

/* Takes the SQLSTATEs out of a verbose message ("FATAL:  28P01:  password ...") and its
 * LOCATION lines, keeping the first SQLSTATE; the rest reads as libpq's default. */
static void scrub_verbose(const char *msg, char *out, size_t n, char state[6])
{
	size_t o = 0;
	const char *p = msg;
	while (*p && o + 1 < n) {
		const char *eol = strchr(p, '\n');
		size_t len = eol ? (size_t)(eol - p) : strlen(p);
		if (strncmp(p, "LOCATION:", 9) == 0) {
			p += len + (eol ? 1 : 0);
			continue;
		}
		for (size_t i = 0; i < len && o + 1 < n; i++) {
			/* ":  XXXXX: " after the severity: five characters of [0-9A-Z], then ": ". */
			if (i + 10 <= len && p[i] == ':' && p[i + 1] == ' ' && p[i + 2] == ' ' && p[i + 8] == ':' &&
			    p[i + 9] == ' ') {
				bool code = true;
				for (int k = 3; k < 8; k++)
					code = code && ((p[i + k] >= '0' && p[i + k] <= '9') || (p[i + k] >= 'A' && p[i + k] <= 'Z'));
				if (code) {
					if (state[0] == '\0') {
						memcpy(state, p + i + 3, 5);
						state[5] = '\0';
					}
					out[o++] = ':';
					if (o + 2 < n) {
						out[o++] = ' ';
						out[o++] = ' ';
					}
					i += 9;
					continue;
				}
			}
			out[o++] = p[i];
		}
		if (eol && o + 1 < n)
			out[o++] = '\n';
		p += len + (eol ? 1 : 0);
	}
	out[o] = '\0';
}

/* Whether host is a name that does not resolve (a typo, not a network that is down). */
static bool unknown_host(const char *host)
{
	if (host == NULL || *host == '\0' || *host == '/' || *host == '@')
		return false;
	struct addrinfo hints, *res = NULL;
	memset(&hints, 0, sizeof hints);
	hints.ai_family = AF_UNSPEC;
	hints.ai_socktype = SOCK_STREAM;
	int rc = getaddrinfo(host, NULL, &hints, &res);
	if (res != NULL)
		freeaddrinfo(res);
	return rc == EAI_NONAME || rc == EAI_FAIL
#ifdef EAI_NODATA
	       || rc == EAI_NODATA
#endif
	        ;
}

/* Opens one session for c: host by host when the DSN names several. */
static int open_session(pgc_conn *c, PGconn **out, pgc_error *err)
{
	*out = NULL;
	settings s = { NULL, NULL };
	int rc = parse_dsn(c->dsn, &s, err);
	if (rc == PGC_OK)
		rc = check_settings(&s, err);
	if (rc != PGC_OK) {
		settings_free(&s);
		return rc;
	}
	const pgc_conn_options *o = &c->opts;
	char timeout[16], idle[16], interval[16], count[16];
	snprintf(timeout, sizeof timeout, "%d", o->connect_timeout_s);
	snprintf(idle, sizeof idle, "%d", o->keepalives_idle_s);
	snprintf(interval, sizeof interval, "%d", o->keepalives_interval_s);
	snprintf(count, sizeof count, "%d", o->keepalives_count);
	/* Settings before "dbname" can be overridden by the DSN; after it, they override it:
	 * that is where one host of the list is picked. fallback_application_name only applies
	 * when neither the DSN nor PGAPPNAME names the application. */
	const char *keys[16], *vals[16];
	int n = 0;
	if (o->connect_timeout_s > 0) {
		keys[n] = "connect_timeout";
		vals[n++] = timeout;
	}
	keys[n] = "keepalives";
	vals[n++] = "1";
	if (o->keepalives_idle_s > 0) {
		keys[n] = "keepalives_idle";
		vals[n++] = idle;
	}
	if (o->keepalives_interval_s > 0) {
		keys[n] = "keepalives_interval";
		vals[n++] = interval;
	}
	if (o->keepalives_count > 0) {
		keys[n] = "keepalives_count";
		vals[n++] = count;
	}
	keys[n] = "dbname";
	vals[n++] = c->dsn;
	keys[n] = "fallback_application_name";
	vals[n++] = c->application_name;
	int base = n;

	const char *ct = setting(&s, "connect_timeout", NULL);
	int64_t per_host_ms = (ct ? strtol(ct, NULL, 10) : o->connect_timeout_s) * INT64_C(1000);
	const char *host = setting(&s, "host", NULL), *hostaddr = setting(&s, "hostaddr", NULL);
	const char *port = setting(&s, "port", NULL), *tsa = setting(&s, "target_session_attrs", NULL);
	int nhost = host ? list_count(host) : hostaddr ? list_count(hostaddr) : 1;
	bool split = nhost > 1 && setting(&s, "service", NULL) == NULL;
	for (int i = 0; split && i < nhost; i++) {
		char h[256];
		if ((host && list_item(host, i, h, sizeof h)[0] == '\0') ||
		    (hostaddr && list_item(hostaddr, i, h, sizeof h)[0] == '\0'))
			split = false; /* an empty entry means "the default", which cannot be named here */
	}
	/* prefer-standby: standbys first, then any host (libpq's two passes). */
	bool prefer_standby = tsa && strcmp(tsa, "prefer-standby") == 0 && split;
	int passes = prefer_standby ? 2 : 1;
	int tries = split ? nhost : 1;

	char msgs[CONNECT_MESSAGE_MAX * 2] = "", state[6] = "";
	bool needs_password = false, all_unknown = true;
	PGconn *pg = NULL;
	for (int pass = 0; pass < passes && pg == NULL; pass++) {
		for (int i = 0; i < tries && pg == NULL; i++) {
			char h[256], a[256], p[32];
			int k = base;
			if (split) {
				if (host) {
					keys[k] = "host";
					vals[k++] = list_item(host, i, h, sizeof h);
				}
				if (hostaddr) {
					keys[k] = "hostaddr";
					vals[k++] = list_item(hostaddr, i, a, sizeof a);
				}
				if (port && list_count(port) == nhost) {
					keys[k] = "port";
					vals[k++] = list_item(port, i, p, sizeof p);
				}
				if (prefer_standby) {
					keys[k] = "target_session_attrs";
					vals[k++] = pass == 0 ? "standby" : "any";
				}
			}
			keys[k] = NULL;
			vals[k] = NULL;
			attempt at;
			pg = attempt_connect(keys, vals, split ? per_host_ms : per_host_ms * nhost, &at);
			if (pg != NULL)
				break;
			needs_password |= at.needs_password;
			char clean[CONNECT_MESSAGE_MAX];
			scrub_verbose(at.msg, clean, sizeof clean, state);
			size_t used = strlen(msgs);
			if (strstr(msgs, clean) == NULL && used + 4 < sizeof msgs)
				snprintf(msgs + used, sizeof msgs - used, "%s%s", used ? "; " : "", clean);
			if (!at.timed_out) {
				const char *name = split ? (host ? h : NULL) : host && list_count(host) == 1 ? host : NULL;
				if (hostaddr || !unknown_host(name))
					all_unknown = false;
			} else {
				all_unknown = false;
			}
		}
	}
	settings_free(&s);
	if (pg != NULL) {
		*out = pg;
		return PGC_OK;
	}

	char reason[PGC_ERROR_MESSAGE_MAX];
	pgc__copy_line(reason, sizeof reason, msgs);
	const char *where = *c->dsn_masked ? c->dsn_masked : "(libpq defaults and PG* variables)";
	int code = PGC_ECONNECT;
	if (needs_password || strncmp(state, "28", 2) == 0 || strcmp(state, "42501") == 0)
		code = PGC_EAUTH;
	else if (strcmp(state, "3D000") == 0 || (state[0] == '\0' && all_unknown && host != NULL))
		code = PGC_ECONFIG;
	/* Encryption the DSN requires and the server does not offer: retrying cannot help. */
	else if (strstr(reason, "SSL was required") != NULL || strstr(reason, "GSSAPI encryption required") != NULL)
		code = PGC_ECONFIG;
	if (needs_password && !strstr(reason, "password"))
		rc = pgc__err(err, code, "cannot connect to %s: %s (the server asks for a password and none was given)",
		              where, reason);
	else if (code == PGC_ECONFIG && state[0] == '\0' && all_unknown && host != NULL)
		rc = pgc__err(err, code, "cannot connect to %s: unknown host name: %s", where, reason);
	else
		rc = pgc__err(err, code, "cannot connect to %s: %s", where, reason);
	if (err != NULL && state[0] != '\0') {
		memcpy(err->sqlstate, state, sizeof state);
		if (code == PGC_ECONNECT)
			err->klass = PGC_CLASS_RETRY_LATER;
	}
	return rc;
}

/* Puts a freshly opened PGconn under c. */
static void adopt(pgc_conn *c, PGconn *pg)
{
	c->pg = pg;
	PQsetNoticeReceiver(pg, notice_receiver, c);
	/* The layer polls the socket itself: nothing libpq does may block on it. */
	(void)PQsetnonblocking(pg, 1);
	c->server_version = PQserverVersion(pg);
	c->backend_pid = PQbackendPID(pg);
	c->broken = false;
	c->lost_told = false;
	c->pooler_known = false;
	c->notice[0] = '\0';
	c->notice_state[0] = '\0';
}

int pgc_connect(const char *dsn, const pgc_conn_options *opts, pgc_conn **out, pgc_error *err)
{
	pgc_error_clear(err);
	if (out == NULL)
		return pgc__err(err, PGC_EUSAGE, "pgc_connect: out must not be NULL");
	*out = NULL;
	pgc_conn_options defaults = PGC_CONN_OPTIONS_INIT;
	if (opts == NULL)
		opts = &defaults;
	if (opts->connect_timeout_s < 0 || opts->keepalives_idle_s < 0 ||
	    opts->keepalives_interval_s < 0 || opts->keepalives_count < 0)
		return pgc__err(err, PGC_EUSAGE, "pgc_connect: timeouts and keepalive settings must not be negative");
	if (opts->call_timeout_ms < PGC_WAIT_FOREVER)
		return pgc__err(err, PGC_EUSAGE, "pgc_connect: call_timeout_ms must be >= 0, or PGC_WAIT_FOREVER");

	const char *resolved = pgc_dsn_resolve(dsn, NULL);
	pgc_conn *c = calloc(1, sizeof *c);
	if (c == NULL)
		return pgc__err(err, PGC_ENOMEM, "out of memory");
	c->opts = *opts;
	c->dsn = dup_str(resolved);
	c->dsn_masked = pgc_dsn_mask(resolved);
	c->application_name = dup_str(opts->application_name ? opts->application_name : "pgcoord");
	if (c->dsn == NULL || c->dsn_masked == NULL || c->application_name == NULL) {
		pgc_conn_close(c);
		return pgc__err(err, PGC_ENOMEM, "out of memory");
	}
	c->opts.application_name = c->application_name;
	PGconn *pg;
	int rc = open_session(c, &pg, err);
	if (rc != PGC_OK) {
		pgc_conn_close(c);
		return rc;
	}
	adopt(c, pg);
	*out = c;
	return PGC_OK;
}

int pgc__open_like(const pgc_conn *c, const char *application_name,
                   void (*notice_fn)(const char *, const char *, void *), void *notice_arg,
                   pgc_conn **out, pgc_error *err)
{
	pgc_conn_options o = c->opts;
	if (application_name != NULL)
		o.application_name = application_name;
	o.notice_fn = notice_fn;
	o.notice_arg = notice_arg;
	return pgc_connect(c->dsn, &o, out, err);
}

int pgc__reconnect(pgc_conn *c, pgc_error *err)
{
	pgc__session_lost(c, "the session was replaced");
	PGconn *pg;
	int rc = open_session(c, &pg, err);
	if (rc != PGC_OK) {
		if (err != NULL && strncmp(err->message, "cannot connect", 14) == 0) {
			char msg[PGC_ERROR_MESSAGE_MAX];
			snprintf(msg, sizeof msg, "cannot reconnect%s", err->message + 14);
			pgc__copy_line(err->message, sizeof err->message, msg);
		}
		return rc;
	}
	pgc__batches_free(c);
	PQfinish(c->pg);
	pgc__stmts_forget(c);
	c->missing = 0;
	c->no_prepare = false;
	adopt(c, pg);
	return PGC_OK;
}

void pgc_conn_close(pgc_conn *c)
{
	if (c == NULL)
		return;
	/* Last attached, first told: a later attachment may use an earlier one's state. */
	while (c->natt > 0) {
		c->natt--;
		const pgc__attach_ops *ops = c->att[c->natt].ops;
		void *state = c->att[c->natt].state;
		if (ops->close != NULL)
			ops->close(c, state);
	}
	pgc__batches_free(c);
	if (c->pg != NULL)
		PQfinish(c->pg);
	pgc__stmts_free(c);
	free(c->dsn);
	free(c->dsn_masked);
	free(c->application_name);
	free(c);
}

void pgc_conn_abandon(pgc_conn *c)
{
	if (c == NULL)
		return;
	if (c->pg != NULL) {
		/* This process's descriptor now names /dev/null: libpq's Terminate message (and a TLS
		 * close) go nowhere, and closing it leaves the socket open wherever else it is. The
		 * attachments forget what the session held, so nothing is released either. */
		int fd = PQsocket(c->pg);
		int null = open("/dev/null", O_RDWR | O_CLOEXEC);
		if (fd >= 0 && null >= 0)
			(void)dup2(null, fd);
		if (null >= 0)
			close(null);
		pgc__session_lost(c, "the session was handed over");
	}
	pgc_conn_close(c);
}

/* ---- accessors ------------------------------------------------------------------------------ */

int pgc_conn_server_version(const pgc_conn *c)
{
	return c ? c->server_version : 0;
}

int pgc_conn_backend_pid(const pgc_conn *c)
{
	return c ? c->backend_pid : 0;
}

const char *pgc_conn_dsn_masked(const pgc_conn *c)
{
	return c ? c->dsn_masked : NULL;
}

struct pg_conn *pgc_conn_pg(pgc_conn *c)
{
	return c ? c->pg : NULL;
}

int pgc_conn_socket(const pgc_conn *c)
{
	if (c == NULL || c->pg == NULL || PQstatus(c->pg) != CONNECTION_OK)
		return -1;
	return PQsocket(c->pg);
}

const char *pgc__conn_dsn(const pgc_conn *c)
{
	return c->dsn;
}

const pgc_conn_options *pgc__conn_options(const pgc_conn *c)
{
	return &c->opts;
}

int64_t pgc__call_timeout_ms(const pgc_conn *c)
{
	return c->opts.call_timeout_ms == 0 ? PGC__CALL_TIMEOUT_DEFAULT_MS : c->opts.call_timeout_ms;
}

bool pgc__conn_ok(const pgc_conn *c)
{
	return c->pg != NULL && !c->broken && PQstatus(c->pg) == CONNECTION_OK;
}

void pgc__conn_set_broken(pgc_conn *c)
{
	c->broken = true;
}

PGTransactionStatusType pgc__tx_status(const pgc_conn *c)
{
	if (c->pg == NULL || c->broken)
		return PQTRANS_UNKNOWN;
	return PQtransactionStatus(c->pg);
}

bool pgc__in_transaction(const pgc_conn *c)
{
	PGTransactionStatusType st = pgc__tx_status(c);
	return st == PQTRANS_INTRANS || st == PQTRANS_INERROR || st == PQTRANS_ACTIVE;
}

const char *pgc__last_notice(const pgc_conn *c, char state[6])
{
	if (state != NULL)
		memcpy(state, c->notice_state, 6);
	return c->notice;
}

void pgc__clear_notice(pgc_conn *c)
{
	c->notice[0] = '\0';
	c->notice_state[0] = '\0';
}

char *pgc__quote_ident(pgc_conn *c, const char *name, pgc_error *err)
{
	char *q = c->pg ? PQescapeIdentifier(c->pg, name, strlen(name)) : NULL;
	if (q == NULL) {
		char why[PGC_ERROR_MESSAGE_MAX];
		pgc__copy_line(why, sizeof why, c->pg ? PQerrorMessage(c->pg) : "no session");
		pgc__err(err, PGC_EUSAGE, "invalid identifier: %s", why);
	}
	return q;
}

void pgc__drop(pgc_conn *c)
{
	/* Shutting the socket down ends the session on the server too (which releases its locks)
	 * and leaves the PGconn valid: libpq sees the failure and reports CONNECTION_BAD. */
	if (c->pg == NULL)
		return;
	int fd = PQsocket(c->pg);
	if (fd >= 0)
		shutdown(fd, SHUT_RDWR);
	PQconsumeInput(c->pg);
	c->broken = true;
}

bool pgc__died_while_idle(pgc_conn *c, pgc_error *err)
{
	if (!pgc__conn_ok(c))
		return pgc__err(err, PGC_ECONNLOST, "connection to the server lost"), true;
	int fd = PQsocket(c->pg);
	if (fd < 0)
		return pgc__err(err, PGC_ECONNLOST, "connection to the server lost"), true;
	if (PQsslInUse(c->pg))
		return false;
	unsigned char buf[4096];
	ssize_t n = recv(fd, buf, sizeof buf, MSG_PEEK | MSG_DONTWAIT);
	if (n == 0)
		return pgc__err(err, PGC_ECONNLOST, "server closed the connection"), true;
	if (n < 0)
		return (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR)
		           ? false
		           : (pgc__err(err, PGC_ECONNLOST, "connection to the server lost: %s", strerror(errno)), true);
	size_t off = 0;
	while (off + 5 <= (size_t)n) {
		unsigned char type = buf[off];
		uint32_t len = (uint32_t)buf[off + 1] << 24 | (uint32_t)buf[off + 2] << 16 |
		               (uint32_t)buf[off + 3] << 8 | buf[off + 4];
		if (len < 4 || off + 1 + len > (size_t)n)
			break;
		if (type == 'E') {
			const char *sev = NULL, *state = "", *msg = "terminating connection";
			size_t p = off + 5, end = off + 1 + len;
			while (p < end && buf[p] != 0) {
				char code = (char)buf[p++];
				const char *val = (const char *)buf + p;
				size_t vlen = strnlen(val, end - p);
				if (p + vlen >= end)
					break;
				if (code == 'V' || (code == 'S' && sev == NULL))
					sev = val;
				else if (code == 'C')
					state = val;
				else if (code == 'M')
					msg = val;
				p += vlen + 1;
			}
			if (sev != NULL && (strcmp(sev, "FATAL") == 0 || strcmp(sev, "PANIC") == 0)) {
				pgc__err(err, PGC_ECONNLOST, "%s", msg);
				if (err != NULL && strlen(state) == 5) {
					memcpy(err->sqlstate, state, 6);
					err->klass = pgc_sqlstate_class(state);
				}
				return true;
			}
		}
		off += 1 + len;
	}
	return false;
}

/* ---- attachments ---------------------------------------------------------------------------- */

int pgc__attach(pgc_conn *c, const pgc__attach_ops *ops, void *state, pgc_error *err)
{
	for (int i = 0; i < c->natt; i++)
		if (c->att[i].ops == ops) {
			c->att[i].state = state;
			return PGC_OK;
		}
	if (c->natt == PGC__ATTACH_MAX)
		return pgc__err(err, PGC_EINTERNAL, "too many attachments to one session (%s)", ops->name);
	c->att[c->natt].ops = ops;
	c->att[c->natt].state = state;
	c->natt++;
	return PGC_OK;
}

void *pgc__attached(const pgc_conn *c, const pgc__attach_ops *ops)
{
	for (int i = 0; i < c->natt; i++)
		if (c->att[i].ops == ops)
			return c->att[i].state;
	return NULL;
}

void pgc__detach(pgc_conn *c, const pgc__attach_ops *ops)
{
	for (int i = 0; i < c->natt; i++)
		if (c->att[i].ops == ops) {
			memmove(&c->att[i], &c->att[i + 1], (size_t)(c->natt - i - 1) * sizeof c->att[0]);
			c->natt--;
			return;
		}
}

bool pgc__holds_session_state(const pgc_conn *c)
{
	for (int i = 0; i < c->natt; i++)
		if (c->att[i].ops->holds != NULL && c->att[i].ops->holds(c->att[i].state))
			return true;
	return false;
}

void pgc__session_lost(pgc_conn *c, const char *reason)
{
	c->broken = true;
	if (c->lost_told)
		return;
	c->lost_told = true;
	pgc__stmts_forget(c);
	for (int i = 0; i < c->natt; i++)
		if (c->att[i].ops->lost != NULL)
			c->att[i].ops->lost(c, c->att[i].state, reason);
}

/* ---- is the session alive ------------------------------------------------------------------- */

/* Why the session ended, in one line: the server's FATAL when it sent one, else libpq's. */
static void loss_reason(pgc_conn *c, char *buf, size_t n)
{
	if (c->notice[0] != '\0' && c->notice_state[0] != '\0') {
		snprintf(buf, n, "the server ended the session: %s (SQLSTATE %s)", c->notice, c->notice_state);
	} else if (c->notice[0] != '\0') {
		snprintf(buf, n, "the server ended the session: %s", c->notice);
	} else {
		char libpq[256];
		pgc__copy_line(libpq, sizeof libpq, c->pg ? PQerrorMessage(c->pg) : "");
		snprintf(buf, n, "the connection was lost: %s", libpq[0] ? libpq : "no reason given");
	}
}

/* The session is gone: tell the attachments and say so. */
static int report_loss(pgc_conn *c, const char *why, pgc_error *err)
{
	char reason[PGC_ERROR_MESSAGE_MAX];
	if (why != NULL)
		snprintf(reason, sizeof reason, "%s", why);
	else
		loss_reason(c, reason, sizeof reason);
	pgc__session_lost(c, reason);
	int rc = 0;
	for (int i = 0; i < c->natt && rc == 0; i++)
		if (c->att[i].ops->loss != NULL)
			rc = c->att[i].ops->loss(c->att[i].state, reason, err);
	if (rc == 0)
		rc = pgc__err(err, PGC_ECONNLOST, "session lost: %s", reason);
	if (err != NULL && c->notice_state[0] != '\0' && why == NULL)
		memcpy(err->sqlstate, c->notice_state, 6);
	return rc;
}

int pgc_conn_check(pgc_conn *c, int heartbeat_timeout_ms, pgc_error *err)
{
	pgc_error_clear(err);
	if (c == NULL || heartbeat_timeout_ms < 0)
		return pgc__err(err, PGC_EUSAGE, "pgc_conn_check: conn must not be NULL and the timeout not negative");
	if (!pgc__conn_ok(c))
		return report_loss(c, NULL, err);
	if (c->pending != NULL || PQisBusy(c->pg))
		return pgc__err(err, PGC_EUSAGE, "pgc_conn_check: the connection is busy with another command");
	/* Whatever arrived unasked: a terminated backend sends its FATAL error and closes. Look
	 * at the socket before libpq reads it: PQconsumeInput() takes the bytes without parsing
	 * them and need not see the end of the stream, so the loss would be found only by the
	 * next statement (pgcoord web's first request after a server restart failed so). Not
	 * through TLS, whose bytes cannot be read without libpq. */
	pgc_error idle;
	bool dead = pgc__died_while_idle(c, &idle);
	if (!PQconsumeInput(c->pg) || PQstatus(c->pg) != CONNECTION_OK)
		return report_loss(c, NULL, err);
	if (dead) {
		/* libpq parses the server's last words as a notice, which names the reason; then the
		 * socket is shut, so that libpq too sees the session gone. */
		(void)PQisBusy(c->pg);
		bool told = c->notice[0] != '\0';
		pgc__drop(c);
		return report_loss(c, told ? NULL : idle.message, err);
	}
	if (heartbeat_timeout_ms == 0)
		return PGC_OK;
	pgc__call call = pgc__bound(heartbeat_timeout_ms, -1);
	call.on_deadline = PGC__DROP;
	/* Simple protocol: it also drops the unnamed portal an earlier statement may have left,
	 * which inside a transaction block would keep that statement's snapshot (and hold back
	 * vacuum) while the session sits idle. */
	call.flags = PGC__SIMPLE;
	int rc;
	pgc_error e;
	PGresult *r = pgc__query(c, "SELECT 1", 0, NULL, &call, &rc, &e);
	if (r != NULL) {
		PQclear(r);
		return PGC_OK;
	}
	if (call.dropped) {
		char why[128];
		snprintf(why, sizeof why, "the server did not answer a heartbeat within %d ms", heartbeat_timeout_ms);
		return report_loss(c, why, err);
	}
	if (!pgc__conn_ok(c))
		return report_loss(c, NULL, err);
	if (err != NULL) {
		*err = e;
		pgc__err_prefix(err, "heartbeat");
	}
	return rc;
}

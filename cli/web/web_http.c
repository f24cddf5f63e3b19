/* web_http.c - pgcoord web's HTTP side (libmicrohttpd): requests in, the security headers on
 * every response, the embedded page, authentication and the cross-site checks of actions
 *
 * The rules, in the order they are applied:
 *  - A server listening on a loopback address answers only requests whose Host header names
 *    a loopback host, so a page of another site that rebinds its name to 127.0.0.1 cannot
 *    read the dashboard (DNS rebinding).
 *  - With --auth-file, every /api and /metrics request needs the token (Authorization:
 *    Bearer TOKEN, or Basic NAME:TOKEN); /api/config and the page itself do not.
 *  - POST is an action: 403 without --allow-actions; else the token (401 without a valid
 *    one: a cross-site form cannot set the header), and an Origin, when the browser sends
 *    one, that is this server's (403 otherwise). */
#include <arpa/inet.h>
#include <ctype.h>
#include <microhttpd.h>
#include <netinet/in.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

#include "web.h"

static const char csp[] = "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:;"
                          " connect-src 'self'; base-uri 'none'; frame-ancestors 'none'; form-action 'self'";

/* What a request keeps between the calls libmicrohttpd makes for it. */
typedef struct req_ctx {
	size_t body_len;
	bool too_large;
} req_ctx;

/* ---- authentication ---- */

/* Compares in time that depends on the lengths only. */
static bool ct_equal(const char *a, const char *b)
{
	size_t la = strlen(a), lb = strlen(b), n = la > lb ? la : lb;
	unsigned char d = la != lb;
	for (size_t i = 0; i < n; i++)
		d |= (unsigned char)((i < la ? a[i] : 0) ^ (i < lb ? b[i] : 0));
	return d == 0;
}

static int b64val(int c)
{
	if (c >= 'A' && c <= 'Z')
		return c - 'A';
	if (c >= 'a' && c <= 'z')
		return c - 'a' + 26;
	if (c >= '0' && c <= '9')
		return c - '0' + 52;
	return c == '+' ? 62 : c == '/' ? 63 : -1;
}

/* Decodes base64 into out (size bytes, NUL-terminated); false when it is not base64. */
static bool b64decode(const char *in, char *out, size_t size)
{
	size_t o = 0;
	unsigned acc = 0;
	int bits = 0;
	for (const char *p = in; *p && *p != '='; p++) {
		int v = b64val((unsigned char)*p);
		if (v < 0)
			return false;
		acc = (acc << 6) | (unsigned)v;
		bits += 6;
		if (bits >= 8) {
			bits -= 8;
			if (o + 1 >= size)
				return false;
			out[o++] = (char)((acc >> bits) & 0xff);
		}
	}
	out[o] = '\0';
	return memchr(out, '\0', o) == NULL;
}

/* The credential the Authorization header presents, or NULL. Every entry is compared, so
 * the time taken does not tell which one nearly matched. */
static const web_cred *authenticate(const web_req *r)
{
	const char *h = web_header(r, MHD_HTTP_HEADER_AUTHORIZATION);
	if (h == NULL)
		return NULL;
	const web_server *srv = r->srv;
	const web_cred *hit = NULL;
	if (strncasecmp(h, "Bearer ", 7) == 0) {
		const char *tok = h + 7;
		while (*tok == ' ')
			tok++;
		for (size_t i = 0; i < srv->ncreds; i++)
			if (ct_equal(tok, srv->creds[i].secret) && hit == NULL)
				hit = &srv->creds[i];
	} else if (strncasecmp(h, "Basic ", 6) == 0) {
		char dec[1024];
		if (!b64decode(h + 6, dec, sizeof dec))
			return NULL;
		char *colon = strchr(dec, ':');
		if (colon == NULL)
			return NULL;
		*colon = '\0';
		for (size_t i = 0; i < srv->ncreds; i++) {
			bool ok = ct_equal(colon + 1, srv->creds[i].secret);
			if (ok && strcmp(dec, srv->creds[i].name) == 0 && hit == NULL)
				hit = &srv->creds[i];
		}
	}
	return hit;
}

/* Whether a Host header (host[:port]) names a loopback host. */
static bool loopback_host(const char *host)
{
	char h[256];
	snprintf(h, sizeof h, "%s", host);
	char *end;
	if (h[0] == '[') {
		end = strchr(h, ']');
		if (end == NULL)
			return false;
		*end = '\0';
		return strcmp(h + 1, "::1") == 0;
	}
	if ((end = strchr(h, ':')) != NULL)
		*end = '\0';
	for (char *p = h; *p; p++)
		*p = (char)tolower((unsigned char)*p);
	if (strcmp(h, "localhost") == 0)
		return true;
	struct in_addr a;
	return inet_pton(AF_INET, h, &a) == 1 && (ntohl(a.s_addr) >> 24) == 127;
}

/* An Origin header that is this server's: "http://HOST" or "https://HOST" for the request's
 * own Host. */
static bool same_origin(const char *origin, const char *host)
{
	if (host == NULL)
		return false;
	const char *rest = strncasecmp(origin, "http://", 7) == 0 ? origin + 7
	                 : strncasecmp(origin, "https://", 8) == 0 ? origin + 8 : NULL;
	return rest != NULL && strcasecmp(rest, host) == 0;
}

/* ---- responses ---- */

static enum MHD_Result send_resp(struct MHD_Connection *mc, web_resp *out)
{
	if (out->f != NULL) {
		fclose(out->f);
		out->f = NULL;
	}
	struct MHD_Response *resp;
	if (out->body != NULL) {
		resp = MHD_create_response_from_buffer(out->len, out->body, MHD_RESPMEM_MUST_FREE);
		out->body = NULL;
	} else {
		resp = MHD_create_response_from_buffer(0, (void *)"", MHD_RESPMEM_PERSISTENT);
	}
	if (resp == NULL)
		return MHD_NO;
	MHD_add_response_header(resp, MHD_HTTP_HEADER_CONTENT_TYPE, out->type ? out->type : "application/json");
	MHD_add_response_header(resp, "Content-Security-Policy", csp);
	MHD_add_response_header(resp, "X-Content-Type-Options", "nosniff");
	MHD_add_response_header(resp, "Referrer-Policy", "no-referrer");
	MHD_add_response_header(resp, "X-Frame-Options", "DENY");
	MHD_add_response_header(resp, "Cross-Origin-Resource-Policy", "same-origin");
	MHD_add_response_header(resp, MHD_HTTP_HEADER_CACHE_CONTROL, out->cacheable ? "no-cache" : "no-store");
	if (out->allow != NULL)
		MHD_add_response_header(resp, MHD_HTTP_HEADER_ALLOW, out->allow);
	if (out->auth_challenge)
		MHD_add_response_header(resp, MHD_HTTP_HEADER_WWW_AUTHENTICATE, "Bearer realm=\"pgcoord\"");
	enum MHD_Result ret = MHD_queue_response(mc, (unsigned)out->status, resp);
	MHD_destroy_response(resp);
	return ret;
}

static void client_of(struct MHD_Connection *mc, char *buf, size_t size)
{
	snprintf(buf, size, "?");
	const union MHD_ConnectionInfo *ci = MHD_get_connection_info(mc, MHD_CONNECTION_INFO_CLIENT_ADDRESS);
	if (ci == NULL || ci->client_addr == NULL)
		return;
	char a[INET6_ADDRSTRLEN] = "?";
	const struct sockaddr *sa = ci->client_addr;
	if (sa->sa_family == AF_INET) {
		const struct sockaddr_in *in = (const struct sockaddr_in *)(const void *)sa;
		inet_ntop(AF_INET, &in->sin_addr, a, sizeof a);
		snprintf(buf, size, "%s:%u", a, ntohs(in->sin_port));
	} else if (sa->sa_family == AF_INET6) {
		const struct sockaddr_in6 *in6 = (const struct sockaddr_in6 *)(const void *)sa;
		inet_ntop(AF_INET6, &in6->sin6_addr, a, sizeof a);
		snprintf(buf, size, "[%s]:%u", a, ntohs(in6->sin6_port));
	}
}

/* Decides a request that has been read whole. */
static void dispatch(web_req *r, req_ctx *ctx, web_resp *out)
{
	web_server *srv = r->srv;
	const char *host = web_header(r, MHD_HTTP_HEADER_HOST);
	if (srv->loopback && host != NULL && !loopback_host(host)) {
		web_error(out, 403, NULL, "this server listens on a loopback address and answers only requests "
		          "for a loopback host, not for \"%.100s\"", host);
		return;
	}
	bool get = strcmp(r->method, "GET") == 0 || strcmp(r->method, "HEAD") == 0;
	bool post = strcmp(r->method, "POST") == 0;
	bool api = strncmp(r->path, "/api/", 5) == 0 || strcmp(r->path, "/metrics") == 0;
	if (!api) {
		for (size_t i = 0; i < web_asset_count; i++)
			if (strcmp(r->path, web_assets[i].path) == 0 ||
			    (strcmp(r->path, "/index.html") == 0 && strcmp(web_assets[i].path, "/") == 0)) {
				if (!get) {
					out->allow = "GET, HEAD";
					web_error(out, 405, NULL, "%s is not allowed here", r->method);
					return;
				}
				out->status = 200;
				out->type = web_assets[i].type;
				out->cacheable = true;
				fwrite(web_assets[i].data, 1, web_assets[i].len, out->f);
				return;
			}
		web_error(out, 404, NULL, "no such page: %.200s", r->path);
		return;
	}
	if (!get && !post) {
		out->allow = "GET, HEAD, POST";
		web_error(out, 405, NULL, "%s is not allowed here", r->method);
		return;
	}
	if (ctx->too_large) {
		web_error(out, 413, NULL, "the request body is larger than %d bytes", WEB_BODY_MAX);
		return;
	}
	if (post && !srv->allow_actions) {
		web_error(out, 403, NULL, "actions are off: start pgcoord web with --allow-actions (and --auth-file)");
		return;
	}
	bool open_path = strcmp(r->path, "/api/config") == 0;
	if (srv->creds != NULL && (post || !open_path)) {
		const web_cred *c = authenticate(r);
		if (c == NULL) {
			out->auth_challenge = true;
			web_error(out, 401, NULL, web_header(r, MHD_HTTP_HEADER_AUTHORIZATION)
			          ? "the token is not one of --auth-file's" : "this needs the token: Authorization: Bearer TOKEN");
			return;
		}
		r->who = c->name;
	}
	if (post) {
		const char *origin = web_header(r, "Origin");
		const char *site = web_header(r, "Sec-Fetch-Site");
		if (origin != NULL ? !same_origin(origin, host)
		                   : site != NULL && strcmp(site, "same-origin") != 0 && strcmp(site, "none") != 0) {
			web_error(out, 403, NULL, "cross-origin request refused (Origin %.100s, Host %.100s)",
			          origin ? origin : "-", host ? host : "-");
			return;
		}
	}
	web_api(r, out);
}

static enum MHD_Result on_request(void *cls, struct MHD_Connection *mc, const char *url, const char *method,
                                  const char *version, const char *upload_data, size_t *upload_data_size,
                                  void **con_cls)
{
	(void)version;
	req_ctx *ctx = *con_cls;
	if (ctx == NULL) {
		ctx = calloc(1, sizeof *ctx);
		if (ctx == NULL)
			return MHD_NO;
		*con_cls = ctx;
		return MHD_YES;
	}
	if (*upload_data_size > 0) {
		/* Actions take their arguments in the URL; a body is read and dropped, up to a bound. */
		(void)upload_data;
		ctx->body_len += *upload_data_size;
		if (ctx->body_len > WEB_BODY_MAX)
			ctx->too_large = true;
		*upload_data_size = 0;
		return MHD_YES;
	}
	web_req r = { cls, mc, method, url, "", NULL };
	client_of(mc, r.client, sizeof r.client);
	web_resp out = { 500, "application/json", false, NULL, false, NULL, NULL, 0 };
	out.f = open_memstream(&out.body, &out.len);
	if (out.f == NULL)
		return MHD_NO;
	dispatch(&r, ctx, &out);
	return send_resp(mc, &out);
}

static void on_done(void *cls, struct MHD_Connection *mc, void **con_cls, enum MHD_RequestTerminationCode toe)
{
	(void)cls;
	(void)mc;
	(void)toe;
	free(*con_cls);
	*con_cls = NULL;
}

/* While a server starts, libmicrohttpd's complaints are kept here (in the starting thread),
 * not printed: its "Failed to bind to port 0" names the port it was asked for, not the one
 * given, and the caller says what failed with the address it knows. */
static _Thread_local char *start_reason;

static void on_log(void *cls, const char *fmt, va_list ap)
{
	(void)cls;
	char msg[512];
	vsnprintf(msg, sizeof msg, fmt, ap);
	msg[strcspn(msg, "\n")] = '\0';
	if (start_reason != NULL) {
		/* The reason is what follows the last ": " (the system's words), else the whole. */
		const char *r = msg, *p;
		while ((p = strstr(r, ": ")) != NULL)
			r = p + 2;
		snprintf(start_reason, WEB_START_REASON_MAX, "%s", *r ? r : msg);
		return;
	}
	cli_errorf("web: %s", msg);
}

struct MHD_Daemon *web_http_start(web_server *srv, unsigned *port, char *reason)
{
	unsigned flags = MHD_USE_INTERNAL_POLLING_THREAD | MHD_USE_ERROR_LOG;
	if (srv->addr.ss_family == AF_INET6)
		flags |= MHD_USE_IPv6;
	snprintf(reason, WEB_START_REASON_MAX, "the server did not start");
	start_reason = reason;
	struct MHD_Daemon *d = MHD_start_daemon(flags, 0, NULL, NULL, on_request, srv,
	        MHD_OPTION_EXTERNAL_LOGGER, on_log, NULL,
	        MHD_OPTION_SOCK_ADDR, (struct sockaddr *)&srv->addr,
	        MHD_OPTION_THREAD_POOL_SIZE, (unsigned)WEB_POOL_SIZE,
	        MHD_OPTION_CONNECTION_LIMIT, 64u,
	        MHD_OPTION_PER_IP_CONNECTION_LIMIT, 32u,
	        MHD_OPTION_CONNECTION_TIMEOUT, 30u,
	        MHD_OPTION_CONNECTION_MEMORY_LIMIT, (size_t)131072,
	        MHD_OPTION_NOTIFY_COMPLETED, on_done, NULL,
	        MHD_OPTION_END);
	start_reason = NULL;
	if (d == NULL)
		return NULL;
	const union MHD_DaemonInfo *di = MHD_get_daemon_info(d, MHD_DAEMON_INFO_BIND_PORT);
	*port = di ? di->port : 0;
	return d;
}

void web_http_stop(struct MHD_Daemon *d)
{
	if (d != NULL)
		MHD_stop_daemon(d);
}

/* ---- the listen address, and a server of /metrics alone (pgcoord worker --metrics) ---- */

bool web_parse_listen(const char *text, struct sockaddr_storage *addr, socklen_t *addrlen, bool *loopback)
{
	char host[128];
	const char *colon = strrchr(text, ':');
	if (colon == NULL || colon == text || (size_t)(colon - text) >= sizeof host)
		return false;
	memcpy(host, text, (size_t)(colon - text));
	host[colon - text] = '\0';
	long long port;
	if (!cli_parse_int(colon + 1, 0, 65535, &port))
		return false;
	memset(addr, 0, sizeof *addr);
	if (host[0] == '[') {
		size_t n = strlen(host);
		if (n < 3 || host[n - 1] != ']')
			return false;
		host[n - 1] = '\0';
		struct sockaddr_in6 *a = (struct sockaddr_in6 *)addr;
		if (inet_pton(AF_INET6, host + 1, &a->sin6_addr) != 1)
			return false;
		a->sin6_family = AF_INET6;
		a->sin6_port = htons((uint16_t)port);
		*addrlen = sizeof *a;
		*loopback = IN6_IS_ADDR_LOOPBACK(&a->sin6_addr);
		return true;
	}
	struct sockaddr_in *a = (struct sockaddr_in *)addr;
	if (strcmp(host, "localhost") == 0)
		snprintf(host, sizeof host, "127.0.0.1");
	if (inet_pton(AF_INET, host, &a->sin_addr) != 1)
		return false;
	a->sin_family = AF_INET;
	a->sin_port = htons((uint16_t)port);
	*addrlen = sizeof *a;
	*loopback = (ntohl(a->sin_addr.s_addr) >> 24) == 127;
	return true;
}

typedef struct metrics_srv {
	void (*write)(FILE *f, void *arg);
	void *arg;
} metrics_srv;

static enum MHD_Result on_metrics(void *cls, struct MHD_Connection *mc, const char *url, const char *method,
                                  const char *version, const char *upload_data, size_t *upload_data_size,
                                  void **con_cls)
{
	(void)version;
	(void)upload_data;
	if (*con_cls == NULL) {
		*con_cls = (void *)1;
		return MHD_YES;
	}
	if (*upload_data_size > 0) {
		*upload_data_size = 0;
		return MHD_YES;
	}
	*con_cls = NULL;
	metrics_srv *m = cls;
	web_resp out = { 500, "application/json", false, NULL, false, NULL, NULL, 0 };
	out.f = open_memstream(&out.body, &out.len);
	if (out.f == NULL)
		return MHD_NO;
	if (strcmp(url, "/metrics") != 0) {
		web_error(&out, 404, NULL, "no such path: %.200s (only /metrics here)", url);
	} else if (strcmp(method, "GET") != 0 && strcmp(method, "HEAD") != 0) {
		out.allow = "GET, HEAD";
		web_error(&out, 405, NULL, "%s is not allowed here", method);
	} else {
		out.status = 200;
		out.type = "text/plain; version=0.0.4; charset=utf-8";
		m->write(out.f, m->arg);
	}
	return send_resp(mc, &out);
}

struct MHD_Daemon *web_metrics_start(const struct sockaddr_storage *addr, unsigned *port,
                                     void (*write)(FILE *f, void *arg), void *arg, char *reason)
{
	static metrics_srv m;
	m.write = write;
	m.arg = arg;
	unsigned flags = MHD_USE_INTERNAL_POLLING_THREAD | MHD_USE_ERROR_LOG;
	if (addr->ss_family == AF_INET6)
		flags |= MHD_USE_IPv6;
	snprintf(reason, WEB_START_REASON_MAX, "the server did not start");
	start_reason = reason;
	struct MHD_Daemon *d = MHD_start_daemon(flags, 0, NULL, NULL, on_metrics, &m,
	        MHD_OPTION_EXTERNAL_LOGGER, on_log, NULL,
	        MHD_OPTION_SOCK_ADDR, (const struct sockaddr *)addr,
	        MHD_OPTION_CONNECTION_LIMIT, 16u,
	        MHD_OPTION_CONNECTION_TIMEOUT, 30u,
	        MHD_OPTION_END);
	start_reason = NULL;
	if (d == NULL)
		return NULL;
	const union MHD_DaemonInfo *di = MHD_get_daemon_info(d, MHD_DAEMON_INFO_BIND_PORT);
	*port = di ? di->port : 0;
	return d;
}

/* web_req.c - what every handler reads of a request and writes of an error: query parameters,
 * headers, the unknown-parameter check and the JSON error object. Below both the HTTP side
 * (web_http.c) and the API (web_api.c), so that neither calls the other back. */
#include <microhttpd.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

#include "web.h"

const char *web_arg(const web_req *r, const char *name)
{
	return MHD_lookup_connection_value(r->mc, MHD_GET_ARGUMENT_KIND, name);
}

const char *web_header(const web_req *r, const char *name)
{
	return MHD_lookup_connection_value(r->mc, MHD_HEADER_KIND, name);
}

typedef struct unknown_arg {
	const char *const *names;
	const char *found;
} unknown_arg;

static enum MHD_Result find_unknown(void *cls, enum MHD_ValueKind kind, const char *key, const char *value)
{
	(void)kind;
	(void)value;
	unknown_arg *u = cls;
	for (const char *const *n = u->names; *n != NULL; n++)
		if (strcmp(*n, key) == 0)
			return MHD_YES;
	u->found = key;
	return MHD_NO;
}

const char *web_unknown_arg(const web_req *r, const char *const *names)
{
	unknown_arg u = { names, NULL };
	MHD_get_connection_values(r->mc, MHD_GET_ARGUMENT_KIND, find_unknown, &u);
	return u.found;
}

/* ---- errors ---- */

void web_error(web_resp *out, int status, const char *parameter, const char *fmt, ...)
{
	char msg[600];
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(msg, sizeof msg, fmt, ap);
	va_end(ap);
	out->status = status;
	out->type = "application/json";
	/* What a handler wrote before the error is dropped. */
	if (out->f != NULL) {
		fclose(out->f);
		free(out->body);
		out->body = NULL;
		out->len = 0;
		out->f = open_memstream(&out->body, &out->len);
	}
	if (out->f == NULL)
		return;
	fputs("{\"error\":{\"message\":", out->f);
	json_str(out->f, msg);
	fputs(",\"parameter\":", out->f);
	json_str(out->f, parameter);
	fputs("}}\n", out->f);
}

/* listen.c - LISTEN channels, attached to the session that listens
 *
 * A LISTEN belongs to one server session: a reconnect silently ends it. The channels a
 * session listens on are kept on the pgc_conn, so that the transaction runner refuses to
 * reconnect under them, and so that whoever listens can tell, after a reconnect, that it has
 * to listen again. */
#include <stdlib.h>
#include <string.h>

#include "conn_int.h"

#define CHANNELS_MAX 8

typedef struct listen_state {
	char *channel[CHANNELS_MAX];
	int n;
} listen_state;

static void forget(listen_state *s)
{
	for (int i = 0; i < s->n; i++)
		free(s->channel[i]);
	s->n = 0;
}

static void listen_lost(pgc_conn *c, void *state, const char *reason)
{
	(void)c;
	(void)reason;
	forget(state);
}

static void listen_close(pgc_conn *c, void *state)
{
	(void)c;
	forget(state);
	free(state);
}

static bool listen_holds(const void *state)
{
	return ((const listen_state *)state)->n > 0;
}

static const pgc__attach_ops listen_ops = { "listen", listen_lost, listen_close, listen_holds, NULL };

/* LISTEN or UNLISTEN channel (quoted here) under the default bound. */
static int command(pgc_conn *c, const char *verb, const char *channel, pgc_error *err)
{
	char *q = pgc__quote_ident(c, channel, err);
	if (q == NULL)
		return PGC_EUSAGE;
	size_t len = strlen(verb) + strlen(q) + 2;
	char *sql = malloc(len);
	int rc;
	if (sql == NULL) {
		rc = pgc__err(err, PGC_ENOMEM, "out of memory");
	} else {
		memcpy(sql, verb, strlen(verb));
		sql[strlen(verb)] = ' ';
		memcpy(sql + strlen(verb) + 1, q, strlen(q) + 1);
		rc = pgc__command(c, sql, err);
		free(sql);
	}
	PQfreemem(q);
	return rc;
}

int pgc__listen(pgc_conn *c, const char *channel, pgc_error *err)
{
	listen_state *s = pgc__attached(c, &listen_ops);
	if (s == NULL) {
		s = calloc(1, sizeof *s);
		if (s == NULL)
			return pgc__err(err, PGC_ENOMEM, "out of memory");
		int rc = pgc__attach(c, &listen_ops, s, err);
		if (rc != PGC_OK) {
			free(s);
			return rc;
		}
	}
	for (int i = 0; i < s->n; i++)
		if (strcmp(s->channel[i], channel) == 0)
			return PGC_OK;
	if (s->n == CHANNELS_MAX)
		return pgc__err(err, PGC_EUSAGE, "more than %d LISTEN channels on one session", CHANNELS_MAX);
	char *copy = strdup(channel);
	if (copy == NULL)
		return pgc__err(err, PGC_ENOMEM, "out of memory");
	int rc = command(c, "LISTEN", channel, err);
	if (rc != PGC_OK) {
		free(copy);
		return rc;
	}
	s->channel[s->n++] = copy;
	return PGC_OK;
}

int pgc__unlisten(pgc_conn *c, const char *channel, pgc_error *err)
{
	listen_state *s = pgc__attached(c, &listen_ops);
	int at = -1;
	for (int i = 0; s != NULL && i < s->n; i++)
		if (strcmp(s->channel[i], channel) == 0)
			at = i;
	if (at < 0)
		return PGC_OK;
	free(s->channel[at]);
	s->channel[at] = s->channel[--s->n];
	if (!pgc__conn_ok(c))
		return PGC_OK; /* gone with the session */
	return command(c, "UNLISTEN", channel, err);
}

int pgc__listening(const pgc_conn *c)
{
	const listen_state *s = pgc__attached(c, &listen_ops);
	return s ? s->n : 0;
}

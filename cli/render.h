/* render.h - one JSON rendering per library object (render.c), for --json and the web API */
#ifndef PGCOORD_RENDER_H
#define PGCOORD_RENDER_H

#include <stdio.h>

#include "cli.h"
#include "json.h"

/* ,"name":{"n":N,"per_ms":MS} or ,"name":null when r has no rate. */
void render_rate(FILE *f, const char *name, const pgc_rate *r);

/* One key's figures, as queue stats --json and /api/queues/NAME/keys print them. */
void render_key(FILE *f, const pgc_queue_key_info *k);

/* The keys with a limit or a rate in force of the flow queues among st[] (*out freed with
 * free()), which the stats show. */
int cli_flow_keys(pgc_queue *q, const pgc_queue_stat *st, size_t n, pgc_queue_key_info **out,
                  size_t *nk, pgc_error *err);

/* An instant as ISO 8601 UTC with microseconds ("2026-11-30T08:40:08.645997Z"); null for 0. */
void render_time_us(json_w *w, const char *key, int64_t us);

/* A lease or fencing name, as lease show --json and /api/leases print it. */
void render_lease(json_w *w, const char *key, const pgc_lease_info *l);

#endif

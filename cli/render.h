/* render.h - one JSON rendering per library object (render.c), for --json and the web API */
#ifndef PGCOORD_RENDER_H
#define PGCOORD_RENDER_H

#include <stdio.h>

#include "cli.h"

/* ,"name":{"n":N,"per_ms":MS} or ,"name":null when r has no rate. */
void render_rate(FILE *f, const char *name, const pgc_rate *r);

/* One key's figures, as queue stats --json and /api/queues/NAME/keys print them. */
void render_key(FILE *f, const pgc_queue_key_info *k);

/* The keys with a limit or a rate in force of the flow queues among st[] (*out freed with
 * free()), which the stats show. */
int cli_flow_keys(pgc_queue *q, const pgc_queue_stat *st, size_t n, pgc_queue_key_info **out,
                  size_t *nk, pgc_error *err);

#endif

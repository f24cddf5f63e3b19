/* web_worker.h - pgcoord worker --metrics (web_worker.c): counters and histograms of the
 * worker's jobs, and the text of its /metrics */
#ifndef PGCOORD_WEB_WORKER_H
#define PGCOORD_WEB_WORKER_H

#include <pthread.h>
#include <stdio.h>

#include "cli.h"

typedef struct web_worker_metrics web_worker_metrics;

/* Metrics for the jobs of these queues, whose handler is handler(handler_arg). NULL when out
 * of memory. */
web_worker_metrics *web_worker_metrics_new(const char *const *queues, size_t nq, pgc_job_handler handler,
                                           void *handler_arg);
/* The library's workers whose counters each scrape adds up (kept by the caller). */
void web_worker_metrics_set_workers(web_worker_metrics *m, pgc_worker **ws, int n);
void web_worker_metrics_free(web_worker_metrics *m);

/* The handler to give the workers (arg: the metrics): runs the real one and counts. */
void web_worker_run(const pgc_job *job, pgc_job_result *result, void *arg);

/* Writes the Prometheus text (arg: the metrics). Thread-safe. */
void web_worker_metrics_write(FILE *f, void *arg);

#endif

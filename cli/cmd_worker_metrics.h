/* cmd_worker_metrics.h - pgcoord worker --metrics (cmd_worker_metrics.c): counters and histograms of the
 * worker's jobs, and the text of its /metrics */
#ifndef PGCOORD_CMD_WORKER_METRICS_H
#define PGCOORD_CMD_WORKER_METRICS_H

#include <pthread.h>
#include <stdio.h>

#include "cli.h"

typedef struct worker_metrics_metrics worker_metrics_metrics;

/* Metrics for the jobs of these queues, whose handler is handler(handler_arg). NULL when out
 * of memory. */
worker_metrics_metrics *worker_metrics_metrics_new(const char *const *queues, size_t nq, pgc_job_handler handler,
                                           void *handler_arg);
/* The library's workers whose counters each scrape adds up (kept by the caller). */
void worker_metrics_metrics_set_workers(worker_metrics_metrics *m, pgc_worker **ws, int n);
void worker_metrics_metrics_free(worker_metrics_metrics *m);

/* The handler to give the workers (arg: the metrics): runs the real one and counts. */
void worker_metrics_run(const pgc_job *job, pgc_job_result *result, void *arg);

/* Writes the Prometheus text (arg: the metrics). Thread-safe. */
void worker_metrics_metrics_write(FILE *f, void *arg);

#endif

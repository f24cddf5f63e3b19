/* cmd_worker_metrics.c - pgcoord worker --metrics: the worker's own Prometheus metrics, served by
 * web_http.c's /metrics server
 *
 * The handler of every job goes through worker_metrics_run, which counts what the command's
 * outcome was per queue, how long it ran (a histogram), how long the job waited between its
 * claim and its start (another), and how many run now. The library's counters (released,
 * lease losses, cancelled, reconnects, claimed) come from pgc_worker_get_stats at each scrape. */
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "cmd_worker_metrics.h"

static const double bounds[] = { 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 300 };
#define NB (sizeof bounds / sizeof bounds[0])

typedef struct hist {
	unsigned long long bucket[NB]; /* not cumulative; summed when printed */
	unsigned long long count;
	double sum;
} hist;

typedef struct qcount {
	char queue[PGC_QUEUE_NAME_MAX + 1];
	unsigned long long completed, failed, retried;
} qcount;

struct worker_metrics_metrics {
	pthread_mutex_t mu;
	qcount *q;
	size_t nq;
	hist duration, delay;
	long in_flight;
	pgc_worker **ws;
	int nws;
	pgc_job_handler handler;
	void *handler_arg;
};

worker_metrics_metrics *worker_metrics_metrics_new(const char *const *queues, size_t nq, pgc_job_handler handler,
                                           void *handler_arg)
{
	worker_metrics_metrics *m = calloc(1, sizeof *m);
	if (m == NULL)
		return NULL;
	m->q = calloc(nq ? nq : 1, sizeof *m->q);
	if (m->q == NULL) {
		free(m);
		return NULL;
	}
	for (size_t i = 0; i < nq; i++)
		snprintf(m->q[i].queue, sizeof m->q[i].queue, "%s", queues[i]);
	m->nq = nq;
	pthread_mutex_init(&m->mu, NULL);
	m->handler = handler;
	m->handler_arg = handler_arg;
	return m;
}

void worker_metrics_metrics_set_workers(worker_metrics_metrics *m, pgc_worker **ws, int n)
{
	pthread_mutex_lock(&m->mu);
	m->ws = ws;
	m->nws = n;
	pthread_mutex_unlock(&m->mu);
}

void worker_metrics_metrics_free(worker_metrics_metrics *m)
{
	if (m == NULL)
		return;
	pthread_mutex_destroy(&m->mu);
	free(m->q);
	free(m);
}

static void observe(hist *h, double s)
{
	size_t i = 0;
	while (i < NB && s > bounds[i])
		i++;
	if (i < NB)
		h->bucket[i]++;
	h->count++;
	h->sum += s;
}

static double mono_s(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

void worker_metrics_run(const pgc_job *job, pgc_job_result *result, void *arg)
{
	worker_metrics_metrics *m = arg;
	int64_t waited = pgc_job_claimed_ms(job);
	pthread_mutex_lock(&m->mu);
	m->in_flight++;
	if (waited >= 0)
		observe(&m->delay, (double)waited / 1000.0);
	pthread_mutex_unlock(&m->mu);
	double t0 = mono_s();
	m->handler(job, result, m->handler_arg);
	double took = mono_s() - t0;
	pthread_mutex_lock(&m->mu);
	m->in_flight--;
	observe(&m->duration, took);
	for (size_t i = 0; i < m->nq; i++)
		if (strcmp(m->q[i].queue, job->queue) == 0) {
			if (result->outcome == PGC_JOB_COMPLETE)
				m->q[i].completed++;
			else if (result->outcome == PGC_JOB_FAIL)
				m->q[i].failed++;
			else
				m->q[i].retried++;
			break;
		}
	pthread_mutex_unlock(&m->mu);
}

static void print_hist(FILE *f, const char *name, const char *help, const hist *h)
{
	fprintf(f, "# HELP %s %s\n# TYPE %s histogram\n", name, help, name);
	unsigned long long cum = 0;
	for (size_t i = 0; i < NB; i++) {
		cum += h->bucket[i];
		fprintf(f, "%s_bucket{le=\"%g\"} %llu\n", name, bounds[i], cum);
	}
	fprintf(f, "%s_bucket{le=\"+Inf\"} %llu\n%s_sum %.6f\n%s_count %llu\n", name, h->count, name, h->sum, name,
	        h->count);
}

void worker_metrics_metrics_write(FILE *f, void *arg)
{
	worker_metrics_metrics *m = arg;
	pthread_mutex_lock(&m->mu);
	static const struct { const char *name, *help; int which; } c[] = {
		{ "pgcoord_worker_jobs_completed_total", "Jobs whose command exited 0.", 0 },
		{ "pgcoord_worker_jobs_failed_total", "Jobs whose command failed (retried with backoff, or dead).", 1 },
		{ "pgcoord_worker_jobs_retried_total", "Jobs whose command asked to run later (exit 75).", 2 },
	};
	for (size_t k = 0; k < sizeof c / sizeof c[0]; k++) {
		fprintf(f, "# HELP %s %s\n# TYPE %s counter\n", c[k].name, c[k].help, c[k].name);
		for (size_t i = 0; i < m->nq; i++) {
			fprintf(f, "%s{queue=", c[k].name);
			cli_prom_label(f, m->q[i].queue);
			fprintf(f, "} %llu\n", c[k].which == 0 ? m->q[i].completed : c[k].which == 1 ? m->q[i].failed
			                                                                            : m->q[i].retried);
		}
	}
	fprintf(f, "# HELP pgcoord_worker_jobs_in_flight Commands running now.\n"
	           "# TYPE pgcoord_worker_jobs_in_flight gauge\npgcoord_worker_jobs_in_flight %ld\n", m->in_flight);
	print_hist(f, "pgcoord_worker_job_duration_seconds", "How long each job's command ran.", &m->duration);
	print_hist(f, "pgcoord_worker_claim_to_start_seconds",
	           "How long each job waited between its claim and its command's start.", &m->delay);
	pgc_worker_stats sum;
	memset(&sum, 0, sizeof sum);
	for (int i = 0; i < m->nws; i++) {
		pgc_worker_stats st;
		pgc_worker_get_stats(m->ws[i], &st);
		sum.claimed += st.claimed;
		sum.released += st.released;
		sum.stale += st.stale;
		sum.cancelled += st.cancelled;
		sum.reconnects += st.reconnects;
		sum.reaped += st.reaped;
	}
	pthread_mutex_unlock(&m->mu);
	static const struct { const char *name, *help; } l[] = {
		{ "pgcoord_worker_jobs_claimed_total", "Jobs claimed." },
		{ "pgcoord_worker_jobs_released_total", "Jobs returned to pending unfinished at a stop." },
		{ "pgcoord_worker_lease_losses_total", "Jobs whose lease was lost before they finished (their outcome ignored)." },
		{ "pgcoord_worker_jobs_cancelled_total", "Jobs cancelled while this worker held them." },
		{ "pgcoord_worker_reconnects_total", "Times a dispatcher session was lost and opened again." },
		{ "pgcoord_worker_reaped_total", "Expired leases its reaper returned or failed." },
	};
	long v[] = { sum.claimed, sum.released, sum.stale, sum.cancelled, sum.reconnects, sum.reaped };
	for (size_t k = 0; k < sizeof l / sizeof l[0]; k++)
		fprintf(f, "# HELP %s %s\n# TYPE %s counter\n%s %ld\n", l[k].name, l[k].help, l[k].name, l[k].name, v[k]);
}

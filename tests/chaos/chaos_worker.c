/* chaos_worker.c - an in-process pgc_worker for the chaos suite: each job appends
 * (job id, claim token, attempt) to chaos_results in a transaction of its own
 *
 * Usage: chaos_worker QUEUE CONCURRENCY LEASE_MS   (DSN from $PGCOORD_DSN)
 * Stops gracefully on SIGTERM or SIGINT. Each handler thread keeps its own connection for the
 * results and reconnects when it loses it. */
#include <libpq-fe.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <pgcoord.h>

static pthread_key_t conn_key;
static pgc_worker *worker;

static void close_conn(void *p)
{
	PQfinish(p);
}

static PGconn *thread_conn(void)
{
	PGconn *c = pthread_getspecific(conn_key);
	if (c != NULL && PQstatus(c) == CONNECTION_OK)
		return c;
	if (c != NULL)
		PQfinish(c);
	c = PQconnectdb(getenv("PGCOORD_DSN"));
	pthread_setspecific(conn_key, c);
	return c;
}

static void handle(const pgc_job *job, pgc_job_result *result, void *arg)
{
	(void)arg;
	char id[32], token[32], attempt[16];
	snprintf(id, sizeof id, "%lld", (long long)job->id);
	snprintf(token, sizeof token, "%lld", (long long)job->token);
	snprintf(attempt, sizeof attempt, "%d", job->attempt);
	const char *v[3] = { id, token, attempt };
	PGconn *c = thread_conn();
	PGresult *r = PQexecParams(c, "INSERT INTO chaos_results (job_id, token, attempt, via)"
	                              " VALUES ($1, $2, $3, 'c')", 3, NULL, v, NULL, NULL, 0);
	if (PQresultStatus(r) != PGRES_COMMAND_OK) {
		result->outcome = PGC_JOB_FAIL;
		snprintf(result->error, sizeof result->error, "results insert: %s",
		         PQerrorMessage(c));
	}
	PQclear(r);
}

static void on_signal(int sig)
{
	(void)sig;
	if (worker != NULL)
		pgc_worker_stop(worker, 5000);
}

static void log_line(pgc_log_level level, const char *message, void *arg)
{
	(void)arg;
	if (level >= PGC_LOG_WARN)
		fprintf(stderr, "chaos_worker[%d]: %s\n", (int)getpid(), message);
}

int main(int argc, char **argv)
{
	if (argc != 4) {
		fprintf(stderr, "usage: chaos_worker QUEUE CONCURRENCY LEASE_MS\n");
		return 64;
	}
	pthread_key_create(&conn_key, close_conn);
	const char *queues[1] = { argv[1] };
	pgc_worker_options o = PGC_WORKER_OPTIONS_INIT;
	o.dsn = getenv("PGCOORD_DSN");
	o.queues = queues;
	o.n_queues = 1;
	o.concurrency = atoi(argv[2]);
	o.lease_ms = atoll(argv[3]);
	o.backoff.base_ms = 200;
	o.backoff.max_ms = 1000;
	o.log = log_line;
	o.application_name = "pgcoord/chaos-worker";
	pgc_error err;
	/* The server may be restarting right now: try again with a capped backoff. */
	int delay = 100;
	for (int i = 0;; i++) {
		if (pgc_worker_new(&o, handle, NULL, &worker, &err) == PGC_OK)
			break;
		if (i == 60) {
			fprintf(stderr, "chaos_worker: %s\n", err.message);
			return 69;
		}
		usleep(delay * 1000);
		delay = delay * 2 > 2000 ? 2000 : delay * 2;
	}
	struct sigaction sa;
	memset(&sa, 0, sizeof sa);
	sa.sa_handler = on_signal;
	sigaction(SIGTERM, &sa, NULL);
	sigaction(SIGINT, &sa, NULL);
	if (pgc_worker_start(worker, &err) != PGC_OK) {
		fprintf(stderr, "chaos_worker: %s\n", err.message);
		return 70;
	}
	int rc = pgc_worker_wait(worker, &err);
	if (rc != PGC_OK)
		fprintf(stderr, "chaos_worker: %s\n", err.message);
	pgc_worker_free(worker);
	return rc == PGC_OK ? 0 : 1;
}

/* jobcmd.h - running a job's command: the handler of pgcoord worker and of cron run's worker
 *
 * One pgc_job_handler for every command that runs a user's command once per job: the payload
 * on its stdin (a memfd), the job's id, queue and attempts in its environment (and a cron
 * job's schedule and tick), its own process group (cli/child.c), killed as a whole on
 * --timeout, when the job's lease is lost, or when the job is cancelled (SIGTERM, then SIGKILL
 * after grace_ms). Exit 0 completes the job, 75 asks for a retry
 * later, anything else fails it; the last lines of its stderr become the job's error. */
#ifndef PGCOORD_CLI_JOBCMD_H
#define PGCOORD_CLI_JOBCMD_H

#include <stdatomic.h>
#include <stddef.h>

#include <pgcoord.h>

/* Which command runs job: a NULL-terminated argv in *argv (one allocation, which the handler
 * free()s), returning PGC_JOB_COMPLETE; or the job's outcome without running anything,
 * PGC_JOB_FAIL with its error in error (size bytes), PGC_JOB_RETRY_LATER (after the
 * handler's retry delay). Called on the worker's handler threads. */
typedef pgc_job_outcome (*cli_jobcmd_resolve)(const pgc_job *job, char ***argv, char *error, size_t size,
                                              void *arg);

typedef struct cli_jobcmd {
	char **argv;                /* COMMAND [ARGS...] of every job; NULL: resolve says */
	const char *path;           /* argv[0] as cli_command_resolve() found it (NULL: search
	                               PATH for every job) */
	int64_t timeout_ms;         /* 0: none */
	int64_t grace_ms;           /* a cancelled job's command: SIGTERM, SIGKILL after this */
	int64_t retry_delay_ms;     /* after exit 75 */
	cli_jobcmd_resolve resolve; /* used when argv is NULL */
	void *resolve_arg;
	atomic_long running;        /* commands running now */
} cli_jobcmd;

#define CLI_JOBCMD_INIT { NULL, NULL, 0, 30000, 10000, NULL, NULL, 0 }

/* The pgc_job_handler; arg is a cli_jobcmd. */
void cli_jobcmd_run(const pgc_job *job, pgc_job_result *res, void *arg);

#endif

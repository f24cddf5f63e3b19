-- The job_history row of job j, ended with p_status (what its command ended with, when the
-- handler said, in p_exit_status and p_output: see 015_run_log.sql; the handler's result in
-- p_result: see 016_job_results.sql): every statement that moves a job to the history inserts
-- what this gives, so that the copy (has_dependents included: the dependency fold relies on
-- it, docs/design/dependencies.md) is written once:
--     WITH gone AS (DELETE FROM jobs j WHERE ... RETURNING j)
--     INSERT INTO job_history SELECT h.* FROM gone g, job_history_row(g.j, 'failed', why, errs) h
-- A hot path returns the columns (RETURNING j.*) and passes ROW(g.*)::jobs instead: then no
-- whole-row value is built per job, each field inlines to its column (complete()).
-- A single SELECT in SQL, neither volatile nor strict nor with SET clauses, so the planner
-- inlines it into the caller's statement: a batch stays one statement, at no cost per call.
CREATE OR REPLACE FUNCTION @S@.job_history_row(j @S@.jobs, p_status text, p_last_error text,
                                               p_errors jsonb, p_exit_status integer, p_output text,
                                               p_result jsonb DEFAULT NULL)
RETURNS SETOF @S@.job_history LANGUAGE sql STABLE AS $pgc$
    SELECT j.id, j.queue, p_status, j.priority, j.run_at, j.attempts, j.max_attempts, j.worker,
           p_last_error, p_errors, j.unique_key, j.created_at, j.started_at, clock_timestamp(),
           j.payload, j.deferrals, j.max_deferrals, j.key, j.has_dependents, p_exit_status,
           p_output, p_result
$pgc$;

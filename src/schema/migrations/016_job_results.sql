-- 016_job_results: a job's result, kept with it in the history.
-- The schema placeholder is replaced by the quoted schema name.
--
-- A handler may end a job's run with a result (JSON, at most 65536 bytes as jsonb prints it:
-- complete() refuses a bigger one). It is kept in the job's history row only: a live job has
-- none, and a result is what a finished job leaves. job_result() reads it; complete() notifies
-- the channel queue_settings.channel || '.result' (payload: the job's id) for each job it
-- completes with one, so that a caller can wait for it (docs/PROTOCOL.md).
ALTER TABLE @S@.job_history ADD COLUMN result jsonb;

-- job_history_row() takes the result as a seventh argument, DEFAULT NULL, so that its other
-- callers keep calling it with six: its six-argument form must go, or such a call would be
-- ambiguous. The function file creates the new one after the migrations.
DROP FUNCTION IF EXISTS @S@.job_history_row(@S@.jobs, text, text, jsonb, integer, text);

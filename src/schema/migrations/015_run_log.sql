-- 015_run_log: what a job's last attempt ended with, for the run log of cron ticks and jobs.
-- The schema placeholder is replaced by the quoted schema name.
--
-- A job's outcome (status), its error text (last_error) and when its last attempt started
-- and ended (started_at, finished_at) are the queue's already; what a worker that runs a
-- command knows beside them is kept with the attempt's end here, by the statement that
-- records it (complete or fail), in the job's row and then its history row:
--  * exit_status: the command's exit status (128 + N when signal N ended it), NULL when the
--    handler was not a command;
--  * output: the last lines of its standard error, at most 1024 bytes (the constraint bounds
--    it whoever writes).
-- A cron tick is joined to its job by cron_ticks.job_id; nothing of the job is copied into
-- the tick. The run log is as long as the history: job_history rows go after the queue's
-- retention settings (the reaper), and a tick's row goes when it is older than the longer
-- of the two retentions and its job is no longer live (the scheduler, as it fires; the
-- index below makes that one probe when nothing is due), besides the 1000 newest per
-- schedule that cron_fire() keeps.

ALTER TABLE @S@.jobs
    ADD COLUMN exit_status integer,
    ADD COLUMN output      text CONSTRAINT jobs_output_bounded CHECK (octet_length(output) <= 1024);
ALTER TABLE @S@.job_history
    ADD COLUMN exit_status integer,
    ADD COLUMN output      text CONSTRAINT job_history_output_bounded CHECK (octet_length(output) <= 1024);

CREATE INDEX cron_ticks_age ON @S@.cron_ticks (tick_at);

-- A worker role granted its rights before this migration (pgcoord init --worker-role) may
-- update a job's last_error: it gets the two new columns too, or its failures would be
-- refused until init --worker-role ran again. Names come from the catalog, quoted by regclass
-- and regrole; the table is found from the settings row's, so that no name is pasted.
DO $pgc$
DECLARE
    jobs regclass;
    r regrole;
BEGIN
    SELECT c.oid INTO jobs FROM pg_catalog.pg_class c
     WHERE c.relname = 'jobs' AND c.relnamespace = (SELECT q.relnamespace FROM pg_catalog.pg_class q
                                                     WHERE q.oid = (SELECT s.tableoid FROM @S@.queue_settings s LIMIT 1));
    FOR r IN SELECT DISTINCT x.grantee::regrole FROM pg_catalog.pg_attribute a, aclexplode(a.attacl) x
              WHERE a.attrelid = jobs AND a.attname = 'last_error' AND x.privilege_type = 'UPDATE'
                AND x.grantee <> 0
    LOOP
        EXECUTE format('GRANT UPDATE (exit_status, output) ON TABLE %s TO %s', jobs, r);
    END LOOP;
END
$pgc$;

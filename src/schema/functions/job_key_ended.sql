-- The key ledger's row for a run of a keyed job that ended (none for an unkeyed job): every
-- statement that ends a keyed job's run (complete, fail, defer, release, the reaper) inserts
-- what this gives, in the same statement, and the next claim of the key folds it
-- (docs/design/flow-control.md):
--     INSERT INTO job_key_done SELECT e.* FROM ended x, job_key_ended(x.queue, x.key) e
-- Inlined by the planner like job_history_row().
CREATE OR REPLACE FUNCTION @S@.job_key_ended(p_queue text, p_key text)
RETURNS SETOF @S@.job_key_done LANGUAGE sql STABLE AS $pgc$
    SELECT p_queue, p_key WHERE p_key IS NOT NULL
$pgc$;

-- A job's status and result: a live job's status ('waiting', 'scheduled', 'pending',
-- 'running') with no result, or a finished one's ('succeeded', 'failed', 'cancelled') with the
-- result its handler gave when it completed (NULL: none). P0002 when no job has the id: never
-- enqueued, or finished and no longer in the history (a succeeded job without a result is not
-- kept when succeeded_retention is zero).
CREATE OR REPLACE FUNCTION @S@.job_result(p_id bigint, OUT status text, OUT result jsonb)
LANGUAGE plpgsql STABLE AS $pgc$
#variable_conflict use_column
BEGIN
    -- The live table first: a job that moves to the history meanwhile is found there next.
    SELECT j.status, NULL::jsonb INTO status, result FROM @S@.jobs j WHERE j.id = p_id;
    IF FOUND THEN
        RETURN;
    END IF;
    SELECT h.status, h.result INTO status, result FROM @S@.job_history h WHERE h.id = p_id;
    IF NOT FOUND THEN
        RAISE EXCEPTION 'no job with id % (never enqueued, or finished and no longer in the history)',
            p_id USING ERRCODE = 'P0002';
    END IF;
END
$pgc$;

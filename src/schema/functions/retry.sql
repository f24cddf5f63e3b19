-- Runs a failed or cancelled job again: it goes back from the history to pending, under its
-- id, with its attempts and deferrals reset and its error history kept; its queue's workers
-- are woken. P0002: no failed or cancelled job with this id. 23505: the job has a unique key
-- that a pending or running job of its queue holds now (the history row stays where it was).
CREATE OR REPLACE FUNCTION @S@.retry(p_id bigint) RETURNS void LANGUAGE plpgsql AS $pgc$
DECLARE
    found_ bigint;
    back bigint;
    sent bigint;
BEGIN
    WITH h AS MATERIALIZED (
        SELECT * FROM @S@.job_history x WHERE x.id = p_id AND x.status IN ('failed', 'cancelled')
           FOR UPDATE
    ), ins AS (
        INSERT INTO @S@.jobs (id, queue, status, priority, eff_priority, run_at,
                              attempts, max_attempts, last_error, errors, unique_key, created_at, payload,
                              deferrals, max_deferrals, key, has_dependents)
        SELECT h.id, h.queue, 'pending', h.priority, h.priority, clock_timestamp(), 0, h.max_attempts,
               h.last_error, h.errors, h.unique_key, h.created_at, h.payload, 0, h.max_deferrals, h.key,
               h.has_dependents FROM h
        ON CONFLICT (queue, unique_key) WHERE unique_key IS NOT NULL DO NOTHING
        RETURNING id, queue
    ), del AS (
        DELETE FROM @S@.job_history x WHERE x.id = ANY (ARRAY(SELECT ins.id FROM ins))
    )
    SELECT (SELECT count(*) FROM h), (SELECT count(*) FROM ins),
           (SELECT count(pg_notify(s.channel, ins.queue)) FROM ins, @S@.queue_settings s)
      INTO found_, back, sent;
    IF found_ = 0 THEN
        RAISE EXCEPTION 'no failed or cancelled job with id %', p_id USING ERRCODE = 'P0002';
    END IF;
    IF back = 0 THEN
        RAISE EXCEPTION 'job % has a unique key that a pending or running job holds now', p_id
            USING ERRCODE = '23505';
    END IF;
END
$pgc$;

-- One batch of a bulk retry: the next p_limit failed or cancelled jobs of the history by id
-- after p_after_id that match the filter go back to pending under their ids, attempts and
-- deferrals reset (retry()); a job whose unique key a live job holds stays in the history.
-- The filter is bulk_cancel()'s, the age counted from the end (finished_at); p_status NULL
-- means failed or cancelled. Returns the jobs picked, the highest id picked (the next batch's
-- p_after_id; NULL: the run is over) and the jobs retried; their queues' workers are woken.
CREATE OR REPLACE FUNCTION @S@.bulk_retry(p_queue text, p_status text, p_older_than_ms bigint,
                                     p_key_prefix text, p_upto_id bigint, p_after_id bigint,
                                     p_limit integer)
RETURNS TABLE (picked bigint, last_id bigint, done bigint)
LANGUAGE plpgsql SET plan_cache_mode = force_custom_plan AS $pgc$
DECLARE
    woke bigint;
BEGIN
    PERFORM @S@.bulk_check_args(p_status, array['failed', 'cancelled'], p_older_than_ms,
                                p_key_prefix, p_upto_id, p_after_id, p_limit);
    WITH pick AS MATERIALIZED (
        SELECT * FROM @S@.job_history j
         WHERE j.status IN ('failed', 'cancelled')
           AND (p_queue IS NULL OR j.queue = p_queue) AND (p_status IS NULL OR j.status = p_status)
           AND (p_key_prefix IS NULL OR left(j.unique_key, length(p_key_prefix)) = p_key_prefix)
           AND (p_upto_id = 0 OR j.id <= p_upto_id)
           AND (p_older_than_ms = 0
                OR j.finished_at < statement_timestamp() - p_older_than_ms * interval '1 millisecond')
           AND j.id > p_after_id
         ORDER BY j.id LIMIT p_limit FOR UPDATE
    ), ins AS (
        INSERT INTO @S@.jobs (id, queue, status, priority, eff_priority, run_at,
                              attempts, max_attempts, last_error, errors, unique_key, created_at, payload,
                              deferrals, max_deferrals, key, has_dependents)
        SELECT pick.id, pick.queue, 'pending', pick.priority, pick.priority, clock_timestamp(), 0,
               pick.max_attempts, pick.last_error, pick.errors, pick.unique_key, pick.created_at,
               pick.payload, 0, pick.max_deferrals, pick.key, pick.has_dependents FROM pick
         ORDER BY pick.id
        ON CONFLICT (queue, unique_key) WHERE unique_key IS NOT NULL DO NOTHING
        RETURNING id, queue
    ), del AS (
        DELETE FROM @S@.job_history x WHERE x.id = ANY (ARRAY(SELECT ins.id FROM ins))
    )
    SELECT (SELECT count(*) FROM pick), (SELECT max(pick.id) FROM pick), (SELECT count(*) FROM ins),
           (SELECT count(pg_notify(s.channel, n.queue))
              FROM (SELECT DISTINCT ins.queue FROM ins) n, @S@.queue_settings s)
      INTO picked, last_id, done, woke;
    RETURN NEXT;
END
$pgc$;

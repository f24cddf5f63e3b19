-- One batch of a purge: the next p_limit jobs of the history by id after p_after_id that match
-- the filter are deleted. The filter is bulk_cancel()'s, the age counted from the end
-- (finished_at); p_status NULL means succeeded, failed or cancelled. Returns the jobs picked,
-- the highest id picked (the next batch's p_after_id; NULL: the run is over) and the jobs
-- deleted.
CREATE OR REPLACE FUNCTION @S@.bulk_purge(p_queue text, p_status text, p_older_than_ms bigint,
                                     p_key_prefix text, p_upto_id bigint, p_after_id bigint,
                                     p_limit integer)
RETURNS TABLE (picked bigint, last_id bigint, done bigint)
LANGUAGE plpgsql SET plan_cache_mode = force_custom_plan AS $pgc$
BEGIN
    PERFORM @S@.bulk_check_args(p_status, array['succeeded', 'failed', 'cancelled'], p_older_than_ms,
                                p_key_prefix, p_upto_id, p_after_id, p_limit);
    WITH pick AS MATERIALIZED (
        SELECT j.id FROM @S@.job_history j
         WHERE (p_queue IS NULL OR j.queue = p_queue) AND (p_status IS NULL OR j.status = p_status)
           AND (p_key_prefix IS NULL OR left(j.unique_key, length(p_key_prefix)) = p_key_prefix)
           AND (p_upto_id = 0 OR j.id <= p_upto_id)
           AND (p_older_than_ms = 0
                OR j.finished_at < statement_timestamp() - p_older_than_ms * interval '1 millisecond')
           AND j.id > p_after_id
         ORDER BY j.id LIMIT p_limit FOR UPDATE
    ), d AS (
        DELETE FROM @S@.job_history x WHERE x.id = ANY (ARRAY(SELECT pick.id FROM pick))
        RETURNING x.id
    )
    SELECT (SELECT count(*) FROM pick), (SELECT max(pick.id) FROM pick), (SELECT count(*) FROM d)
      INTO picked, last_id, done;
    RETURN NEXT;
END
$pgc$;

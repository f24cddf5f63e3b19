-- One batch of a bulk cancel: the next p_limit live jobs (pending, scheduled or waiting, never
-- running) by id after p_after_id that match the filter are locked, moved to the history as
-- cancelled, and a waiting job's edges go with it. The filter: p_queue (NULL: every queue),
-- p_status (NULL: any of the three), created more than p_older_than_ms ago (0: any age),
-- unique key starting with p_key_prefix (NULL: any), id at most p_upto_id (0: any). Returns
-- the jobs picked, the highest id picked (the next batch's p_after_id; NULL when none was:
-- the run is over) and the jobs cancelled. A client runs one batch per transaction, so that
-- each holds its row locks briefly. Planned for its arguments at every call (the filters are
-- optional), like the statement it was.
CREATE OR REPLACE FUNCTION @S@.bulk_cancel(p_queue text, p_status text, p_older_than_ms bigint,
                                      p_key_prefix text, p_upto_id bigint, p_after_id bigint,
                                      p_limit integer)
RETURNS TABLE (picked bigint, last_id bigint, done bigint)
LANGUAGE plpgsql SET plan_cache_mode = force_custom_plan AS $pgc$
BEGIN
    PERFORM @S@.bulk_check_args(p_status, array['pending', 'scheduled', 'waiting'], p_older_than_ms,
                                p_key_prefix, p_upto_id, p_after_id, p_limit);
    WITH pick AS MATERIALIZED (
        SELECT j.id FROM @S@.jobs j
         WHERE j.status IN ('pending', 'scheduled', 'waiting')
           AND (p_queue IS NULL OR j.queue = p_queue) AND (p_status IS NULL OR j.status = p_status)
           AND (p_key_prefix IS NULL OR left(j.unique_key, length(p_key_prefix)) = p_key_prefix)
           AND (p_upto_id = 0 OR j.id <= p_upto_id)
           AND (p_older_than_ms = 0
                OR j.created_at < statement_timestamp() - p_older_than_ms * interval '1 millisecond')
           AND j.id > p_after_id
         ORDER BY j.id LIMIT p_limit FOR UPDATE
    ), d AS (
        DELETE FROM @S@.jobs x WHERE x.id = ANY (ARRAY(SELECT pick.id FROM pick))
           AND x.status <> 'running' RETURNING x.*, x AS r
    ), h AS (
        INSERT INTO @S@.job_history SELECT h.* FROM d,
            @S@.job_history_row(d.r, 'cancelled', d.last_error, d.errors, (d.r).exit_status, (d.r).output) h
         ORDER BY d.id
    ), unedge AS (
        DELETE FROM @S@.job_deps e WHERE e.job = ANY (ARRAY(SELECT d.id FROM d WHERE d.status = 'waiting'))
    )
    SELECT (SELECT count(*) FROM pick), (SELECT max(pick.id) FROM pick), (SELECT count(*) FROM d)
      INTO picked, last_id, done;
    RETURN NEXT;
END
$pgc$;

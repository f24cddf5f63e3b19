-- Defers the running job (p_id, p_token): it returns to the queue to run again after
-- p_delay_ms ('scheduled' while that is ahead), its attempt given back and its deferral count
-- one higher. A job already deferred max_deferrals times is not deferred again: the request
-- counts as a failed attempt that ends it (job_history, failed, the reason in last_error), so
-- that a handler that always says "not now" cannot keep a job for ever. A keyed job's run ends
-- in the key ledger (job_key_ended()). outcome: 'retried', 'dead', or 'stale' (the token is
-- not the job's: nothing changed).
CREATE OR REPLACE FUNCTION @S@.retry_later(p_id bigint, p_token bigint, p_delay_ms bigint,
                                           OUT outcome text)
LANGUAGE plpgsql AS $pgc$
BEGIN
    IF p_delay_ms IS NULL OR p_delay_ms < 0 THEN
        RAISE EXCEPTION 'retry_later: the delay must not be negative nor NULL' USING ERRCODE = '22023';
    END IF;
    WITH j AS MATERIALIZED (
        SELECT x.id, x.queue, x.key, x.deferrals >= x.max_deferrals AS over FROM @S@.jobs x
         WHERE x.id = p_id AND x.token = p_token AND x.status = 'running' FOR UPDATE
    ), dead AS (
        DELETE FROM @S@.jobs d WHERE d.id = p_id AND (SELECT j.over FROM j)
        RETURNING d, 'deferred ' || d.deferrals || ' times, the most its max_deferrals allows,'
                     ' and asked again: failed' AS why
    ), hist AS (
        INSERT INTO @S@.job_history
        SELECT h.* FROM dead x,
               @S@.job_history_row(x.d, 'failed', x.why, @S@.push_error((x.d).errors, (x.d).attempts, x.why),
                                   (x.d).exit_status, (x.d).output) h
    ), again AS (
        UPDATE @S@.jobs u SET token = NULL, lease_until = NULL,
               status = CASE WHEN p_delay_ms > 0 THEN 'scheduled' ELSE 'pending' END,
               attempts = greatest(u.attempts - 1, 0), deferrals = u.deferrals + 1,
               eff_priority = u.priority,
               run_at = clock_timestamp() + p_delay_ms * interval '1 millisecond'
         WHERE u.id = p_id AND NOT (SELECT j.over FROM j)
        RETURNING u.id
    ), ended AS (
        INSERT INTO @S@.job_key_done SELECT e.* FROM j, @S@.job_key_ended(j.queue, j.key) e
    )
    SELECT CASE WHEN EXISTS (SELECT 1 FROM dead) THEN 'dead'
                WHEN EXISTS (SELECT 1 FROM again) THEN 'retried' ELSE 'stale' END
      INTO outcome;
END
$pgc$;

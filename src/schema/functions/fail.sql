-- Records a failed attempt of the running job (p_id, p_token), with its error text and what
-- its command ended with (p_exit_status, p_output: NULL or '' for none). With attempts left,
-- the job returns to the queue after a backoff of min(p_backoff_base_ms * 2^(attempt - 1),
-- p_backoff_max_ms) with jitter in [delay/2, delay], or after exactly p_retry_in_ms when that
-- is given ('scheduled' while that is ahead, else 'pending'); without, it moves to
-- job_history as failed (the dead letter) with its error history. A keyed job's run ends in
-- the key ledger (job_key_ended()). outcome: 'retried', 'dead', or 'stale' (the token is not
-- the job's: nothing changed).
CREATE OR REPLACE FUNCTION @S@.fail(p_id bigint, p_token bigint, p_error text,
                                    p_backoff_base_ms bigint, p_backoff_max_ms bigint,
                                    p_exit_status integer, p_output text,
                                    p_retry_in_ms bigint DEFAULT NULL, OUT outcome text)
LANGUAGE plpgsql AS $pgc$
BEGIN
    IF p_backoff_base_ms < 0 OR p_backoff_max_ms < 0 OR p_retry_in_ms < 0 THEN
        RAISE EXCEPTION 'fail: the backoff and the retry delay must not be negative' USING ERRCODE = '22023';
    END IF;
    WITH j AS MATERIALIZED (
        SELECT x.id, x.queue, x.key, x.attempts, x.max_attempts,
               clock_timestamp()
               + coalesce(p_retry_in_ms::float8,
                          least(p_backoff_base_ms::float8 * power(2, x.attempts - 1), p_backoff_max_ms::float8)
                          * (0.5 + random() * 0.5)) * interval '1 millisecond' AS next_at
          FROM @S@.jobs x
         WHERE x.id = p_id AND x.token = p_token AND x.status = 'running' FOR UPDATE
    ), dead AS (
        DELETE FROM @S@.jobs d WHERE d.id = p_id AND (SELECT j.attempts >= j.max_attempts FROM j)
        RETURNING d
    ), hist AS (
        INSERT INTO @S@.job_history
        SELECT h.* FROM dead x,
               @S@.job_history_row(x.d, 'failed', p_error,
                                   @S@.push_error((x.d).errors, (x.d).attempts, p_error),
                                   p_exit_status, nullif(p_output, '')) h
    ), again AS (
        UPDATE @S@.jobs u SET token = NULL, lease_until = NULL,
               status = CASE WHEN (SELECT j.next_at FROM j) > clock_timestamp() THEN 'scheduled'
                             ELSE 'pending' END,
               last_error = p_error, errors = @S@.push_error(u.errors, u.attempts, p_error),
               exit_status = p_exit_status, output = nullif(p_output, ''),
               eff_priority = u.priority, run_at = (SELECT j.next_at FROM j)
         WHERE u.id = p_id AND (SELECT j.attempts < j.max_attempts FROM j)
        RETURNING u.id
    ), ended AS (
        INSERT INTO @S@.job_key_done SELECT e.* FROM j, @S@.job_key_ended(j.queue, j.key) e
    )
    SELECT CASE WHEN EXISTS (SELECT 1 FROM dead) THEN 'dead'
                WHEN EXISTS (SELECT 1 FROM again) THEN 'retried' ELSE 'stale' END
      INTO outcome;
END
$pgc$;

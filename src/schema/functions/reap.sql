-- The reaper's pass, in the caller's transaction (autocommit: it holds row locks): returns the
-- running jobs whose lease ran out to pending (or fails them for good when they have no
-- attempt left), ages pending jobs that waited longer than the queue's aging time, prunes the
-- history past its retention, drops the registrations of workers gone for a minute, and tidies
-- the key ledger (job_keys_tidy()). At most 1000 leases, 1000 aged jobs per queue and 5000
-- history rows per queue and status a pass. One reaper at a time per database: the pass takes
-- a transaction advisory lock (its key is PGC_QUEUE_REAPER_LOCK_KEY) and raises 55P03 when
-- another pass holds it. Each statement takes its own snapshot (a volatile function, read
-- committed), as the statements of one transaction did. JIT is off: compiling these
-- millisecond statements on small tables would take longer than running them.
CREATE OR REPLACE FUNCTION @S@.reap()
RETURNS TABLE (failed bigint, returned bigint, aged bigint, purged bigint)
LANGUAGE plpgsql SET jit = off AS $pgc$
BEGIN
    IF NOT pg_try_advisory_xact_lock(8099551716441416048) THEN
        RAISE EXCEPTION 'another reaper is running' USING ERRCODE = '55P03';
    END IF;
    -- Leases: a job is returned only while it is still the running claim that expired (its
    -- token), so that a completion that won the row lock first stands.
    WITH expired AS MATERIALIZED (
        SELECT j.id, j.token FROM @S@.jobs j
         WHERE j.status = 'running' AND j.lease_until < clock_timestamp()
         ORDER BY j.id LIMIT 1000 FOR UPDATE SKIP LOCKED
    ), dead AS (
        DELETE FROM @S@.jobs j
         WHERE j.id = ANY (ARRAY(SELECT x.id FROM expired x))
           AND j.token = ANY (ARRAY(SELECT x.token FROM expired x)) AND j.status = 'running'
           AND j.attempts >= j.max_attempts
        RETURNING j, 'lease expired (worker ' || coalesce(j.worker, '?') || ')' AS why
    ), hist AS (
        INSERT INTO @S@.job_history SELECT h.* FROM dead x,
            @S@.job_history_row(x.j, 'failed', x.why, @S@.push_error((x.j).errors, (x.j).attempts, x.why),
                                (x.j).exit_status, (x.j).output) h
    ), back AS (
        UPDATE @S@.jobs j SET status = 'pending', token = NULL, lease_until = NULL,
               last_error = 'lease expired (worker ' || coalesce(j.worker, '?') || ')',
               errors = @S@.push_error(j.errors, j.attempts,
                                       'lease expired (worker ' || coalesce(j.worker, '?') || ')'),
               eff_priority = j.priority, run_at = clock_timestamp()
         WHERE j.id = ANY (ARRAY(SELECT x.id FROM expired x))
           AND j.token = ANY (ARRAY(SELECT x.token FROM expired x)) AND j.status = 'running'
           AND j.attempts < j.max_attempts
        RETURNING j.queue, j.key
    ), ended AS (
        INSERT INTO @S@.job_key_done SELECT e.* FROM
            (SELECT (d.j).queue, (d.j).key FROM dead d UNION ALL SELECT b.queue, b.key FROM back b) x,
            @S@.job_key_ended(x.queue, x.key) e
    )
    SELECT (SELECT count(*) FROM dead), (SELECT count(*) FROM back),
           (SELECT count(pg_notify(s.channel, b.queue))
              FROM (SELECT DISTINCT back.queue FROM back) b, @S@.queue_settings s)
      INTO failed, returned;
    -- Aging: a pending job that waited longer than the aging time goes ahead of priorities.
    WITH old AS MATERIALIZED (
        SELECT x.id FROM @S@.queues q, @S@.queue_settings s,
            LATERAL (SELECT j.id FROM @S@.jobs j
                      WHERE j.queue = q.name AND j.status = 'pending' AND j.eff_priority < 32768
                        AND j.run_at < statement_timestamp() - s.aging ORDER BY j.run_at LIMIT 1000
                        FOR UPDATE SKIP LOCKED) x
    )
    UPDATE @S@.jobs j SET eff_priority = 32768
     WHERE j.id = ANY (ARRAY(SELECT old.id FROM old)) AND j.status = 'pending';
    GET DIAGNOSTICS aged = ROW_COUNT;
    -- Retention: the oldest finished jobs past their status's retention, per queue and status.
    DELETE FROM @S@.job_history h WHERE h.id IN (
        SELECT x.id FROM @S@.queues q, @S@.queue_settings s,
            unnest(array['succeeded', 'failed', 'cancelled']) AS st(status),
            LATERAL (SELECT y.id FROM @S@.job_history y
                      WHERE y.queue = q.name AND y.status = st.status
                        AND y.finished_at < statement_timestamp() - CASE WHEN st.status = 'succeeded'
                            THEN s.succeeded_retention ELSE s.failed_retention END
                      ORDER BY y.finished_at LIMIT 5000) x);
    GET DIAGNOSTICS purged = ROW_COUNT;
    -- Workers that stopped refreshing their registration are gone.
    DELETE FROM @S@.workers w WHERE w.seen_at < clock_timestamp() - interval '1 minute';
    -- Ended jobs of keys no claim looked at are folded; keys with nothing left go.
    PERFORM @S@.job_keys_tidy();
    RETURN NEXT;
END
$pgc$;

-- Takes back the ticks of schedule p_name that fired ahead and are not due yet. Returns how
-- many. The caller holds the schedule's row lock.
CREATE OR REPLACE FUNCTION @S@.cron_unfire(p_name text) RETURNS integer
LANGUAGE plpgsql SET search_path = pg_catalog, pg_temp AS $pgc$
DECLARE
    n integer;
    first timestamptz;
BEGIN
    -- A job that a worker promoted meanwhile (its tick came) is not 'scheduled' any more: it
    -- stays, and so does its tick's row.
    WITH j AS (
        DELETE FROM @S@.jobs
         WHERE id IN (SELECT k.job_id FROM @S@.cron_ticks k
                       WHERE k.schedule = p_name AND k.tick_at > now() AND k.outcome = 'enqueued')
           AND status = 'scheduled'
        RETURNING id
    ), t AS (
        DELETE FROM @S@.cron_ticks k USING j WHERE k.schedule = p_name AND k.job_id = j.id
        RETURNING k.tick_at
    )
    SELECT count(*), min(t.tick_at) INTO n, first FROM t;
    IF n > 0 THEN
        UPDATE @S@.cron_schedules s
           SET next_tick = least(s.next_tick, first), fired = greatest(s.fired - n, 0),
               last_tick = (SELECT max(k.tick_at) FROM @S@.cron_ticks k WHERE k.schedule = p_name),
               last_outcome = (SELECT k.outcome FROM @S@.cron_ticks k WHERE k.schedule = p_name
                                ORDER BY k.tick_at DESC LIMIT 1)
         WHERE s.name = p_name;
    END IF;
    RETURN n;
END
$pgc$;

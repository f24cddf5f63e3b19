-- Pauses (p_paused true) or resumes the schedule p_name. A paused schedule runs nothing more:
-- its ticks that fired ahead are taken back (cron_unfire). A resumed one does not catch up the
-- ticks of the pause: its next tick is p_next_tick, which the C library computes from the
-- server's now() with the host's tzdata, or with NULL the first tick after the resume, which
-- the scheduler computes at its next pass (next_tick '-infinity': see cron_add). Pausing a
-- paused schedule or resuming a running one changes nothing (a running schedule keeps its next
-- tick). P0002 when there is none.
CREATE OR REPLACE FUNCTION @S@.cron_pause(p_name text, p_paused boolean,
                                          p_next_tick timestamptz DEFAULT NULL) RETURNS void
LANGUAGE plpgsql SET search_path = pg_catalog, pg_temp AS $pgc$
DECLARE
    was boolean;
BEGIN
    IF p_paused IS NULL THEN
        RAISE EXCEPTION 'cron_pause: paused must not be NULL' USING ERRCODE = '22004';
    END IF;
    SELECT s.paused INTO was FROM @S@.cron_schedules s WHERE s.name = p_name FOR UPDATE;
    IF NOT FOUND THEN
        RAISE EXCEPTION 'no schedule %', left(coalesce(p_name, 'NULL'), 100) USING ERRCODE = 'P0002';
    END IF;
    IF p_paused THEN
        UPDATE @S@.cron_schedules s SET paused = true, updated_at = clock_timestamp() WHERE s.name = p_name;
        PERFORM @S@.cron_unfire(p_name);
    ELSIF was THEN
        UPDATE @S@.cron_schedules s
           SET paused = false, next_tick = coalesce(p_next_tick, '-infinity'), updated_at = clock_timestamp()
         WHERE s.name = p_name;
    END IF;
END
$pgc$;

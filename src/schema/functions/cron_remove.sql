-- Removes the schedule p_name and its ticks; its ticks that fired ahead go with it (their jobs
-- never became due: cron_unfire), the jobs already due or run stay. P0002 when there is none.
CREATE OR REPLACE FUNCTION @S@.cron_remove(p_name text) RETURNS void
LANGUAGE plpgsql SET search_path = pg_catalog, pg_temp AS $pgc$
BEGIN
    PERFORM 1 FROM @S@.cron_schedules s WHERE s.name = p_name FOR UPDATE;
    IF NOT FOUND THEN
        RAISE EXCEPTION 'no schedule %', left(coalesce(p_name, 'NULL'), 100) USING ERRCODE = 'P0002';
    END IF;
    PERFORM @S@.cron_unfire(p_name);
    DELETE FROM @S@.cron_schedules s WHERE s.name = p_name;
END
$pgc$;

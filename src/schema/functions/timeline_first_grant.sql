-- When the current timeline saw its first grant attempt, recorded by the first caller.
-- SECURITY DEFINER so that a role allowed to take leases need not be granted the table: it
-- can only record the current timeline, with the current time.
CREATE OR REPLACE FUNCTION @S@.timeline_first_grant() RETURNS timestamptz
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
DECLARE
    v_tli bigint := @S@.server_timeline();
    v_at timestamptz;
BEGIN
    SELECT t.first_grant_at INTO v_at FROM @S@.timelines t WHERE t.timeline = v_tli;
    IF FOUND THEN
        RETURN v_at;
    END IF;
    INSERT INTO @S@.timelines AS t (timeline, first_grant_at) VALUES (v_tli, clock_timestamp())
        ON CONFLICT (timeline) DO NOTHING
        RETURNING t.first_grant_at INTO v_at;
    IF NOT FOUND THEN
        SELECT t.first_grant_at INTO v_at FROM @S@.timelines t WHERE t.timeline = v_tli;
    END IF;
    RETURN v_at;
END
$$;

-- A schedule's payload from text: JSON, and an object (the scheduler adds its "cron" member).
CREATE OR REPLACE FUNCTION @S@.cron_payload(p text) RETURNS jsonb
LANGUAGE plpgsql IMMUTABLE SET search_path = pg_catalog, pg_temp AS $$
DECLARE
    v jsonb := coalesce(p, '{}')::jsonb;
BEGIN
    IF jsonb_typeof(v) <> 'object' THEN
        RAISE EXCEPTION 'payload must be a JSON object, not %', jsonb_typeof(v)
            USING ERRCODE = '22023', HINT = 'the job gets the object with a "cron" member added';
    END IF;
    RETURN v;
END
$$;

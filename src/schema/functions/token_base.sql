-- The lowest token of the current timeline's band: (timeline - 1) << 40.
CREATE OR REPLACE FUNCTION @S@.token_base() RETURNS bigint
LANGUAGE plpgsql VOLATILE SET search_path = pg_catalog, pg_temp AS $$
DECLARE
    v_tli bigint := @S@.server_timeline();
BEGIN
    IF v_tli >= 8388608 THEN
        RAISE EXCEPTION 'server timeline % is too large for fencing tokens (at most 8388607)', v_tli
            USING ERRCODE = '55000';
    END IF;
    RETURN (v_tli - 1) << 40;
END
$$;

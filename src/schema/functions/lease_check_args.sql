-- Refuses a lease name, holder or ttl out of bounds (22023).
CREATE OR REPLACE FUNCTION @S@.lease_check_args(p_name text, p_holder text, p_ttl_ms bigint) RETURNS void
LANGUAGE plpgsql IMMUTABLE SET search_path = pg_catalog, pg_temp AS $$
BEGIN
    IF p_name IS NULL OR p_name = '' OR octet_length(p_name) > 200 THEN
        RAISE EXCEPTION 'lease name must be 1 to 200 bytes' USING ERRCODE = '22023';
    END IF;
    IF p_holder IS NOT NULL AND octet_length(p_holder) > 200 THEN
        RAISE EXCEPTION 'lease holder must be at most 200 bytes' USING ERRCODE = '22023';
    END IF;
    IF p_ttl_ms IS NOT NULL AND p_ttl_ms <= 0 THEN
        RAISE EXCEPTION 'lease ttl must be positive, got % ms', p_ttl_ms USING ERRCODE = '22023';
    END IF;
END
$$;

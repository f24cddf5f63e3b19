-- Ends the lease held with p_token (expired or not, as long as no newer token exists) and
-- wakes the candidates that wait on the channel pgcoord_lease (payload: the name).
-- Returns 'ok', 'released' (already), 'superseded' or 'unknown'.
CREATE OR REPLACE FUNCTION @S@.lease_release(p_name text, p_token bigint) RETURNS text
LANGUAGE plpgsql SET search_path = pg_catalog, pg_temp SET lock_timeout = '1s' AS $$
DECLARE
    cur @S@.leases;
BEGIN
    PERFORM @S@.lease_check_args(p_name, NULL, NULL);
    UPDATE @S@.leases l SET expires_at = NULL, released_at = clock_timestamp()
     WHERE l.name = p_name AND l.token = p_token AND l.kind = 'lease'
       AND l.expires_at IS NOT NULL;
    IF FOUND THEN
        PERFORM pg_notify('pgcoord_lease', p_name);
        RETURN 'ok';
    END IF;
    SELECT * INTO cur FROM @S@.leases l WHERE l.name = p_name;
    RETURN CASE WHEN NOT FOUND OR p_token IS NULL OR cur.token < p_token THEN 'unknown'
                WHEN cur.token > p_token THEN 'superseded'
                WHEN cur.kind <> 'lease' THEN 'unknown'
                ELSE 'released' END;
END
$$;

-- Extends the lease by p_ttl_ms from now when it is still held with p_token and not expired.
-- status: 'ok', 'expired' (nobody took it yet, but it lapsed), 'released', 'superseded' (a
-- newer token exists), 'unknown' (no such name or token). The other columns describe the row.
CREATE OR REPLACE FUNCTION @S@.lease_renew(p_name text, p_token bigint, p_ttl_ms bigint,
        OUT status text, OUT token bigint, OUT holder text, OUT granted_at timestamptz,
        OUT expires_at timestamptz, OUT db_now timestamptz)
LANGUAGE plpgsql SET search_path = pg_catalog, pg_temp SET lock_timeout = '1s' AS $$
#variable_conflict use_column
DECLARE
    cur @S@.leases;
    v_now timestamptz;
BEGIN
    PERFORM @S@.lease_check_args(p_name, NULL, p_ttl_ms);
    IF p_ttl_ms IS NULL THEN
        RAISE EXCEPTION 'lease ttl must not be NULL' USING ERRCODE = '22023';
    END IF;
    PERFORM @S@.lease_durable();
    v_now := clock_timestamp();
    UPDATE @S@.leases l
       SET renewed_at = v_now, expires_at = v_now + p_ttl_ms * interval '1 millisecond',
           ttl_ms = p_ttl_ms
     WHERE l.name = p_name AND l.token = p_token AND l.kind = 'lease'
       AND l.expires_at > clock_timestamp()
    RETURNING 'ok', l.token, l.holder, l.granted_at, l.expires_at
        INTO status, token, holder, granted_at, expires_at;
    IF FOUND THEN
        db_now := clock_timestamp();
        RETURN;
    END IF;
    SELECT * INTO cur FROM @S@.leases l WHERE l.name = p_name;
    status := CASE WHEN NOT FOUND OR p_token IS NULL OR cur.token < p_token THEN 'unknown'
                   WHEN cur.token > p_token THEN 'superseded'
                   WHEN cur.kind <> 'lease' THEN 'unknown'
                   WHEN cur.expires_at IS NULL THEN 'released'
                   ELSE 'expired' END;
    token := cur.token;
    holder := cur.holder;
    granted_at := cur.granted_at;
    expires_at := cur.expires_at;
    db_now := clock_timestamp();
END
$$;

-- Hands a fencing token for p_name to p_holder, who holds the name by other means (an
-- advisory lock): the same counter as the leases, folded with the timeline the same way, so
-- both fence alike (no hold-back after a promotion: an advisory lock does not outlive its
-- primary). Refuses with SQLSTATE PCF03 while a lease on the name is held and not expired.
CREATE OR REPLACE FUNCTION @S@.fence_next(p_name text, p_holder text, p_lock_timeout_ms integer DEFAULT 1000)
RETURNS bigint
LANGUAGE plpgsql SET search_path = pg_catalog, pg_temp SET lock_timeout = '1s' AS $$
DECLARE
    cur @S@.leases;
    v_now timestamptz;
    v_base bigint;
    v_token bigint;
BEGIN
    PERFORM @S@.lease_check_args(p_name, p_holder, NULL);
    IF p_holder IS NULL THEN
        RAISE EXCEPTION 'holder must not be NULL' USING ERRCODE = '22023';
    END IF;
    PERFORM set_config('lock_timeout', greatest(coalesce(p_lock_timeout_ms, 1000), 1)::text || 'ms', true);
    PERFORM @S@.lease_durable();
    v_base := @S@.token_base();
    v_now := clock_timestamp();
    INSERT INTO @S@.leases AS l
        (name, token, kind, holder, granted_at, renewed_at, expires_at, ttl_ms, released_at)
    VALUES (p_name, greatest(1, v_base), 'lock', p_holder, v_now, v_now, NULL, NULL, NULL)
    ON CONFLICT (name) DO UPDATE
        SET name = excluded.name, token = greatest(l.token + 1, v_base), kind = 'lock',
            holder = excluded.holder, granted_at = excluded.granted_at,
            renewed_at = excluded.renewed_at, expires_at = NULL, ttl_ms = NULL, released_at = NULL
        WHERE l.expires_at IS NULL OR l.expires_at <= clock_timestamp()
    RETURNING l.token INTO v_token;
    IF FOUND THEN
        RETURN v_token;
    END IF;
    SELECT * INTO cur FROM @S@.leases l WHERE l.name = p_name;
    RAISE EXCEPTION 'name "%" is held as a lease by % (token %) until %',
            p_name, cur.holder, cur.token, cur.expires_at
        USING ERRCODE = 'PCF03',
              HINT = 'a name is fenced either by a lease or by a lock holder, not both at once';
END
$$;

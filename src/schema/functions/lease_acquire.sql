-- Grants the lease to p_holder when it is free, released or expired by clock_timestamp(),
-- with the next fencing token of the name: one greater than the last one, and at least the
-- current timeline's band (token_base(); docs/design/timeline-tokens.md). granted is false when
-- someone else holds it; the other columns then describe the current holder. After a promotion,
-- a name last granted on an earlier timeline is held back for one TTL (granted false, expires_at
-- the end of the wait). Waits at most p_lock_timeout_ms for transactions that checked the
-- previous token (SQLSTATE 55P03).
CREATE OR REPLACE FUNCTION @S@.lease_acquire(p_name text, p_holder text, p_ttl_ms bigint,
        p_lock_timeout_ms integer DEFAULT 1000,
        OUT granted boolean, OUT token bigint, OUT holder text, OUT granted_at timestamptz,
        OUT expires_at timestamptz, OUT db_now timestamptz)
LANGUAGE plpgsql SET search_path = pg_catalog, pg_temp SET lock_timeout = '1s' AS $$
#variable_conflict use_column
DECLARE
    cur @S@.leases;
    v_now timestamptz;
    v_base bigint;
    v_until timestamptz;
BEGIN
    PERFORM @S@.lease_check_args(p_name, p_holder, p_ttl_ms);
    IF p_holder IS NULL OR p_ttl_ms IS NULL THEN
        RAISE EXCEPTION 'lease holder and ttl must not be NULL' USING ERRCODE = '22023';
    END IF;
    PERFORM set_config('lock_timeout', greatest(coalesce(p_lock_timeout_ms, 1000), 1)::text || 'ms', true);
    PERFORM @S@.lease_durable();
    v_base := @S@.token_base();
    -- The expiry counts from before any wait, so it is never later than the caller expects.
    v_now := clock_timestamp();
    SELECT * INTO cur FROM @S@.leases l WHERE l.name = p_name;
    IF NOT FOUND OR cur.expires_at IS NULL OR cur.expires_at <= clock_timestamp() THEN
        -- A name last granted on an earlier timeline, or never seen here: a grant the old
        -- primary made may be in use for up to one TTL after this timeline began.
        IF NOT FOUND OR cur.token < v_base THEN
            v_until := @S@.timeline_first_grant()
                       + greatest(p_ttl_ms, coalesce(cur.ttl_ms, 0)) * interval '1 millisecond';
            IF v_until > clock_timestamp() THEN
                granted := false;
                token := coalesce(cur.token, 0);
                holder := coalesce(cur.holder, '');
                granted_at := cur.granted_at;
                expires_at := v_until;
                db_now := clock_timestamp();
                RETURN;
            END IF;
        END IF;
        -- "SET name = excluded.name" assigns the key, so the conflicting row is locked
        -- FOR UPDATE: the grant waits for writers that hold it FOR KEY SHARE (fence_check).
        INSERT INTO @S@.leases AS l
            (name, token, kind, holder, granted_at, renewed_at, expires_at, ttl_ms, released_at)
        VALUES (p_name, greatest(1, v_base), 'lease', p_holder, v_now, v_now,
                v_now + p_ttl_ms * interval '1 millisecond', p_ttl_ms, NULL)
        ON CONFLICT (name) DO UPDATE
            SET name = excluded.name, token = greatest(l.token + 1, v_base), kind = 'lease',
                holder = excluded.holder, granted_at = excluded.granted_at,
                renewed_at = excluded.renewed_at, expires_at = excluded.expires_at,
                ttl_ms = excluded.ttl_ms, released_at = NULL
            WHERE l.expires_at IS NULL OR l.expires_at <= clock_timestamp()
        RETURNING true, l.token, l.holder, l.granted_at, l.expires_at
            INTO granted, token, holder, granted_at, expires_at;
        IF FOUND THEN
            db_now := clock_timestamp();
            RETURN;
        END IF;
        SELECT * INTO cur FROM @S@.leases l WHERE l.name = p_name;
    END IF;
    granted := false;
    token := cur.token;
    holder := cur.holder;
    granted_at := cur.granted_at;
    expires_at := cur.expires_at;
    db_now := clock_timestamp();
END
$$;

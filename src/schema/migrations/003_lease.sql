-- 003_lease: leases on the database clock, fencing tokens, and fence_check() for writers.
-- The schema placeholder is replaced by the quoted schema name.
--
-- One row per name, kept for ever: token is the last fencing token handed out for the name,
-- by a lease grant (kind 'lease') or by fence_next() for an advisory-lock holder (kind 'lock').
-- A grant bumps the token in the same statement that checks the lease is free, and commits
-- with synchronous_commit at least 'local', so a token that reached a client is on disk: after
-- a crash or a restart the next token is still greater. Rows cannot be deleted and a token
-- cannot be lowered (the guard trigger below), so nothing can hand out a smaller token.
--
-- Locking protocol. fence_check() reads the row FOR KEY SHARE inside the writer's transaction.
-- A grant locks the row FOR UPDATE (it assigns the key column, see lease_acquire), which waits
-- for every open transaction that checked the previous token: once a new token is granted, no
-- write guarded by an older token can still commit. Renewals update only non-key columns
-- (FOR NO KEY UPDATE), which does not conflict with FOR KEY SHARE, so writers never delay the
-- holder's renewals.
CREATE TABLE @S@.leases (
    name        text        PRIMARY KEY CHECK (name <> '' AND octet_length(name) <= 200),
    token       bigint      NOT NULL CHECK (token > 0),
    kind        text        NOT NULL CHECK (kind IN ('lease', 'lock')),
    holder      text        NOT NULL CHECK (octet_length(holder) <= 200),
    granted_at  timestamptz NOT NULL,
    renewed_at  timestamptz NOT NULL,
    expires_at  timestamptz,            -- NULL once released, and for kind 'lock'
    ttl_ms      bigint      CHECK (ttl_ms > 0),
    released_at timestamptz,
    CHECK (kind = 'lease' OR expires_at IS NULL)
);
COMMENT ON TABLE @S@.leases IS
    'pgcoord: leases and fencing tokens, one row per name; tokens only grow';

CREATE FUNCTION @S@.leases_guard() RETURNS trigger
LANGUAGE plpgsql SET search_path = pg_catalog, pg_temp AS $$
BEGIN
    IF TG_OP = 'UPDATE' THEN
        IF NEW.name <> OLD.name OR NEW.token < OLD.token THEN
            RAISE EXCEPTION 'fencing tokens never go backwards: cannot change "%" from token % to "%" token %',
                OLD.name, OLD.token, NEW.name, NEW.token
                USING ERRCODE = '55000';
        END IF;
        RETURN NEW;
    END IF;
    RAISE EXCEPTION 'lease rows are kept for ever so that fencing tokens never go backwards'
        USING ERRCODE = '55000',
              HINT = 'release a lease with lease_release(name, token) instead';
END
$$;
CREATE TRIGGER leases_guard BEFORE UPDATE OR DELETE ON @S@.leases
    FOR EACH ROW EXECUTE FUNCTION @S@.leases_guard();
CREATE TRIGGER leases_guard_truncate BEFORE TRUNCATE ON @S@.leases
    FOR EACH STATEMENT EXECUTE FUNCTION @S@.leases_guard();

CREATE FUNCTION @S@.lease_check_args(p_name text, p_holder text, p_ttl_ms bigint) RETURNS void
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

-- A token that reached a client must survive a crash: commit at least to the local WAL.
CREATE FUNCTION @S@.lease_durable() RETURNS void
LANGUAGE plpgsql SET search_path = pg_catalog, pg_temp AS $$
BEGIN
    IF current_setting('synchronous_commit') = 'off' THEN
        PERFORM set_config('synchronous_commit', 'local', true);
    END IF;
END
$$;

-- Grants the lease to p_holder when it is free, released or expired by clock_timestamp(),
-- with a token one greater than the last one for the name. granted is false when someone
-- else holds it; the other columns then describe the current holder. Waits at most
-- p_lock_timeout_ms for transactions that checked the previous token (SQLSTATE 55P03).
CREATE FUNCTION @S@.lease_acquire(p_name text, p_holder text, p_ttl_ms bigint,
        p_lock_timeout_ms integer DEFAULT 1000,
        OUT granted boolean, OUT token bigint, OUT holder text, OUT granted_at timestamptz,
        OUT expires_at timestamptz, OUT db_now timestamptz)
LANGUAGE plpgsql SET search_path = pg_catalog, pg_temp SET lock_timeout = '1s' AS $$
#variable_conflict use_column
DECLARE
    cur @S@.leases;
    v_now timestamptz;
BEGIN
    PERFORM @S@.lease_check_args(p_name, p_holder, p_ttl_ms);
    IF p_holder IS NULL OR p_ttl_ms IS NULL THEN
        RAISE EXCEPTION 'lease holder and ttl must not be NULL' USING ERRCODE = '22023';
    END IF;
    PERFORM set_config('lock_timeout', greatest(coalesce(p_lock_timeout_ms, 1000), 1)::text || 'ms', true);
    PERFORM @S@.lease_durable();
    -- The expiry counts from before any wait, so it is never later than the caller expects.
    v_now := clock_timestamp();
    SELECT * INTO cur FROM @S@.leases l WHERE l.name = p_name;
    IF NOT FOUND OR cur.expires_at IS NULL OR cur.expires_at <= clock_timestamp() THEN
        -- "SET name = excluded.name" assigns the key, so the conflicting row is locked
        -- FOR UPDATE: the grant waits for writers that hold it FOR KEY SHARE (fence_check).
        INSERT INTO @S@.leases AS l
            (name, token, kind, holder, granted_at, renewed_at, expires_at, ttl_ms, released_at)
        VALUES (p_name, 1, 'lease', p_holder, v_now, v_now,
                v_now + p_ttl_ms * interval '1 millisecond', p_ttl_ms, NULL)
        ON CONFLICT (name) DO UPDATE
            SET name = excluded.name, token = l.token + 1, kind = 'lease',
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

-- Extends the lease by p_ttl_ms from now when it is still held with p_token and not expired.
-- status: 'ok', 'expired' (nobody took it yet, but it lapsed), 'released', 'superseded' (a
-- newer token exists), 'unknown' (no such name or token). The other columns describe the row.
CREATE FUNCTION @S@.lease_renew(p_name text, p_token bigint, p_ttl_ms bigint,
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

-- Ends the lease held with p_token (expired or not, as long as no newer token exists) and
-- wakes the candidates that wait on the channel pgcoord_lease (payload: the name).
-- Returns 'ok', 'released' (already), 'superseded' or 'unknown'.
CREATE FUNCTION @S@.lease_release(p_name text, p_token bigint) RETURNS text
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

-- Hands a fencing token for p_name to p_holder, who holds the name by other means (an
-- advisory lock): the same counter as the leases, so both fence the same way. Refuses with
-- SQLSTATE PCF03 while a lease on the name is held and not expired.
CREATE FUNCTION @S@.fence_next(p_name text, p_holder text, p_lock_timeout_ms integer DEFAULT 1000)
RETURNS bigint
LANGUAGE plpgsql SET search_path = pg_catalog, pg_temp SET lock_timeout = '1s' AS $$
DECLARE
    cur @S@.leases;
    v_now timestamptz;
    v_token bigint;
BEGIN
    PERFORM @S@.lease_check_args(p_name, p_holder, NULL);
    IF p_holder IS NULL THEN
        RAISE EXCEPTION 'holder must not be NULL' USING ERRCODE = '22023';
    END IF;
    PERFORM set_config('lock_timeout', greatest(coalesce(p_lock_timeout_ms, 1000), 1)::text || 'ms', true);
    PERFORM @S@.lease_durable();
    v_now := clock_timestamp();
    INSERT INTO @S@.leases AS l
        (name, token, kind, holder, granted_at, renewed_at, expires_at, ttl_ms, released_at)
    VALUES (p_name, 1, 'lock', p_holder, v_now, v_now, NULL, NULL, NULL)
    ON CONFLICT (name) DO UPDATE
        SET name = excluded.name, token = l.token + 1, kind = 'lock', holder = excluded.holder,
            granted_at = excluded.granted_at, renewed_at = excluded.renewed_at,
            expires_at = NULL, ttl_ms = NULL, released_at = NULL
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

-- For writers in any language: call inside the transaction that writes what the token
-- protects. Returns the token when it is the newest one for p_name. Raises SQLSTATE PCF01
-- (stale fencing token) when a newer token was granted, and PCF02 when no such token was ever
-- granted. Holds the row FOR KEY SHARE until the transaction ends, so no newer token can be
-- granted before this transaction commits or rolls back.
CREATE FUNCTION @S@.fence_check(p_name text, p_token bigint) RETURNS bigint
LANGUAGE plpgsql SET search_path = pg_catalog, pg_temp AS $$
DECLARE
    cur @S@.leases;
BEGIN
    SELECT * INTO cur FROM @S@.leases l WHERE l.name = p_name FOR KEY SHARE;
    IF NOT FOUND OR p_token IS NULL OR p_token > cur.token OR p_token <= 0 THEN
        RAISE EXCEPTION 'no fencing token % was granted for "%"', coalesce(p_token::text, 'NULL'), p_name
            USING ERRCODE = 'PCF02';
    END IF;
    IF p_token < cur.token THEN
        RAISE EXCEPTION 'stale fencing token % for "%": token % was granted since', p_token, p_name, cur.token
            USING ERRCODE = 'PCF01',
                  DETAIL = format('token %s went to %s (%s) at %s', cur.token, cur.holder, cur.kind, cur.granted_at),
                  HINT = 'this writer no longer holds the lease or lock: roll back and stop';
    END IF;
    RETURN cur.token;
END
$$;

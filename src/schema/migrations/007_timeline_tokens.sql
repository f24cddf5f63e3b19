-- 007_timeline_tokens: fencing tokens that never repeat across a failover.
-- The schema placeholder is replaced by the quoted schema name.
--
-- The problem. A grant bumps the per-name token and commits on the primary. With asynchronous
-- replication a grant that committed but was never streamed is lost with the primary, and
-- after a promotion the next grant would hand out the same token again: two holders, one
-- token, and fence_check() could not tell them apart.
--
-- The fold. Every promotion starts a new timeline, a number that only grows along a server's
-- history (it is in the WAL file names). Each timeline T owns the band of tokens
-- [(T - 1) << 40, T << 40): a grant takes greatest(last token + 1, (T - 1) << 40). Every token
-- issued on timeline T, replicated or lost, is below T << 40, so the first grant on timeline
-- T + 1 (or any later one) is above all of them. On timeline 1, the band starts at 0 and
-- tokens are 1, 2, 3, ... as before this migration; existing small tokens jump up once, at
-- the first grant of each name after the first promotion (allowed: tokens never go down; the
-- guard trigger of 003 refuses any lowering).
--
-- Limits. A band holds 2^40 (about 1.1e12) grants per name per timeline; a name that used
-- them all would carry on into the next band and lose the guarantee for the next failover (at
-- a grant per millisecond that takes 35 years). Timelines go up to 2^23 (8388608) before a
-- token would not fit in a bigint; grants refuse beyond. Two servers promoted from the same
-- history onto the same timeline number (a split brain: two standbys promoted at once, each
-- taking timeline T + 1) share a band and can issue the same token: the fold protects against
-- lost commits, not against two primaries. A database restored into a new cluster whose
-- timeline is lower than the one its tokens came from keeps tokens above its band: they still
-- grow, but a failover there can repeat tokens until the timeline catches up.
--
-- The timeline is read from the WAL insert position, pg_walfile_name(pg_current_wal_lsn()):
-- executable by every role on PostgreSQL 13 to 17, and it names the new timeline as soon as
-- the promotion ends (the checkpoint's timeline in pg_control_checkpoint() lags until the
-- first checkpoint after a fast promotion). Both refuse during recovery, where no grant can
-- be written anyway.
--
-- The hold-back. A holder whose lease, or whose latest renewal, was lost with the old primary
-- may still be acting: it stops at its own deadline, at most one TTL after its last renewal,
-- hence at most one TTL after the old primary's last commit. So on a new timeline, a name
-- whose last token belongs to an earlier timeline (or that has no row: its first grant may
-- have been lost) is not granted before one TTL (the larger of the request's and the last
-- grant's) has passed since this timeline's first grant attempt, recorded in the timelines
-- table; that instant is no earlier than the promotion, so the wait is on the safe side. The
-- answer meanwhile is granted = false with expires_at = the instant the hold-back ends, so
-- campaigns sleep until then. Renewals of leases the new primary knows go on as usual, and
-- fence_next() is not held back: an advisory lock is no longer held once its primary is gone,
-- and pgcoord run stops its command when it sees the lock lost. The timeline current when
-- this migration runs counts as settled, so upgrading never holds a grant back.
CREATE TABLE @S@.timelines (
    timeline       bigint      PRIMARY KEY CHECK (timeline > 0),
    first_grant_at timestamptz NOT NULL
);
COMMENT ON TABLE @S@.timelines IS
    'pgcoord: when each server timeline saw its first lease grant; grants of older names wait one TTL from it';

-- The server's current timeline (primary only: raises 55000 during recovery).
CREATE FUNCTION @S@.server_timeline() RETURNS bigint
LANGUAGE sql VOLATILE SET search_path = pg_catalog, pg_temp AS $$
    SELECT ('x' || substr(pg_walfile_name(pg_current_wal_lsn()), 1, 8))::bit(32)::bigint
$$;

-- The lowest token of the current timeline's band: (timeline - 1) << 40.
CREATE FUNCTION @S@.token_base() RETURNS bigint
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

-- When the current timeline saw its first grant attempt, recorded by the first caller.
-- SECURITY DEFINER so that a role allowed to take leases need not be granted the table: it
-- can only record the current timeline, with the current time.
CREATE FUNCTION @S@.timeline_first_grant() RETURNS timestamptz
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

INSERT INTO @S@.timelines (timeline, first_grant_at) VALUES (@S@.server_timeline(), '-infinity');

-- As in 003, with the token folded with the timeline and the hold-back after a promotion.
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

-- As in 003, with the token folded with the timeline (no hold-back: see above).
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

-- Makes p_queue a flow queue (claims go through claim_flow()) and changes its flow settings;
-- for each, -1 keeps it and 0 removes it: p_key_limit, the jobs running at once per key (a
-- key's own limit overrides it); p_rate_n starts per p_rate_ms of the queue; p_key_rate_n
-- starts per p_key_rate_ms of each key; p_fair (-1, 0 or 1), whether keys take turns. The keys
-- without a limit of their own take the new one; a rate that changes starts afresh. The
-- queue's workers are woken. Returns the keys whose limit changed.
CREATE OR REPLACE FUNCTION @S@.queue_flow_set(p_queue text, p_key_limit integer, p_rate_n integer,
                                         p_rate_ms bigint, p_key_rate_n integer,
                                         p_key_rate_ms bigint, p_fair integer)
RETURNS bigint LANGUAGE plpgsql AS $pgc$
DECLARE
    n bigint;
BEGIN
    IF p_queue IS NULL OR p_queue = '' OR octet_length(p_queue) > 128 THEN
        RAISE EXCEPTION 'the queue name must be 1 to 128 bytes' USING ERRCODE = '22023';
    END IF;
    IF p_key_limit IS NULL OR p_rate_n IS NULL OR p_key_rate_n IS NULL OR p_fair IS NULL THEN
        RAISE EXCEPTION 'a flow setting is NULL (-1 keeps it)' USING ERRCODE = '22004';
    END IF;
    IF p_key_limit < -1 THEN
        RAISE EXCEPTION 'key_limit must be -1 (unchanged), 0 (none) or positive, not %', p_key_limit
            USING ERRCODE = '22023';
    END IF;
    IF p_fair NOT IN (-1, 0, 1) THEN
        RAISE EXCEPTION 'fair must be -1, 0 or 1, not %', p_fair USING ERRCODE = '22023';
    END IF;
    PERFORM @S@.rate_check_args('rate', p_rate_n, p_rate_ms);
    PERFORM @S@.rate_check_args('key_rate', p_key_rate_n, p_key_rate_ms);
    WITH u AS (
        INSERT INTO @S@.queues AS s (name, flow, key_limit, rate_n, rate_ms, key_rate_n, key_rate_ms, fair)
        VALUES (p_queue, true, CASE WHEN p_key_limit > 0 THEN p_key_limit END,
                CASE WHEN p_rate_n > 0 THEN p_rate_n END, CASE WHEN p_rate_n > 0 THEN p_rate_ms END,
                CASE WHEN p_key_rate_n > 0 THEN p_key_rate_n END,
                CASE WHEN p_key_rate_n > 0 THEN p_key_rate_ms END, p_fair = 1)
        ON CONFLICT (name) DO UPDATE SET flow = true,
            key_limit = CASE WHEN p_key_limit < 0 THEN s.key_limit ELSE nullif(p_key_limit, 0) END,
            rate_n = CASE WHEN p_rate_n < 0 THEN s.rate_n ELSE nullif(p_rate_n, 0) END,
            rate_ms = CASE WHEN p_rate_n < 0 THEN s.rate_ms WHEN p_rate_n = 0 THEN NULL ELSE p_rate_ms END,
            rate_next = CASE WHEN p_rate_n < 0 THEN s.rate_next END,
            key_rate_n = CASE WHEN p_key_rate_n < 0 THEN s.key_rate_n ELSE nullif(p_key_rate_n, 0) END,
            key_rate_ms = CASE WHEN p_key_rate_n < 0 THEN s.key_rate_ms WHEN p_key_rate_n = 0 THEN NULL
                ELSE p_key_rate_ms END,
            fair = CASE WHEN p_fair < 0 THEN s.fair ELSE p_fair = 1 END
        RETURNING s.name, s.key_limit
    ), k AS (
        UPDATE @S@.job_keys k SET lim = coalesce(k.max_running, u.key_limit) FROM u
         WHERE k.queue = u.name AND k.lim IS DISTINCT FROM coalesce(k.max_running, u.key_limit)
        RETURNING 1
    )
    SELECT count(*) INTO n FROM k;
    PERFORM pg_notify(st.channel, p_queue) FROM @S@.queue_settings st;
    RETURN n;
END
$pgc$;

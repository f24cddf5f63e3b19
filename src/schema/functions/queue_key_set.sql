-- Sets a key's own flow settings in a flow queue (making p_queue one when it is not); for
-- each, -1 keeps it and 0 removes it (the queue's then applies): p_limit, its jobs running at
-- once; p_weight (1..10000), its share of the claims when the queue is fair; p_rate_n starts
-- per p_rate_ms. A new key starts at the lowest virtual time of the open keys, so that it
-- neither jumps ahead nor waits for the others. The queue's workers are woken.
CREATE OR REPLACE FUNCTION @S@.queue_key_set(p_queue text, p_key text, p_limit integer, p_weight integer,
                                        p_rate_n integer, p_rate_ms bigint)
RETURNS void LANGUAGE plpgsql AS $pgc$
BEGIN
    IF p_queue IS NULL OR p_queue = '' OR octet_length(p_queue) > 128 THEN
        RAISE EXCEPTION 'the queue name must be 1 to 128 bytes' USING ERRCODE = '22023';
    END IF;
    IF p_key IS NULL OR p_key = '' OR octet_length(p_key) > 128 THEN
        RAISE EXCEPTION 'the concurrency key must be 1 to 128 bytes' USING ERRCODE = '22023';
    END IF;
    IF p_limit IS NULL OR p_weight IS NULL OR p_rate_n IS NULL THEN
        RAISE EXCEPTION 'a key setting is NULL (-1 keeps it)' USING ERRCODE = '22004';
    END IF;
    IF p_limit < -1 THEN
        RAISE EXCEPTION 'limit must be -1 (unchanged), 0 (the queue''s) or positive, not %', p_limit
            USING ERRCODE = '22023';
    END IF;
    IF p_weight < -1 OR p_weight > 10000 THEN
        RAISE EXCEPTION 'weight must be -1 (unchanged), 0 (1) or 1..10000, not %', p_weight
            USING ERRCODE = '22023';
    END IF;
    PERFORM @S@.rate_check_args('rate', p_rate_n, p_rate_ms);
    -- The queue first, in a statement of its own, so that the key's statement sees it.
    INSERT INTO @S@.queues (name, flow) VALUES (p_queue, true)
    ON CONFLICT (name) DO UPDATE SET flow = true WHERE NOT @S@.queues.flow;
    INSERT INTO @S@.job_keys AS k (queue, key, max_running, weight, rate_n, rate_ms, lim, vtime)
    SELECT p_queue, p_key, CASE WHEN p_limit > 0 THEN p_limit END, CASE WHEN p_weight > 0 THEN p_weight END,
           CASE WHEN p_rate_n > 0 THEN p_rate_n END, CASE WHEN p_rate_n > 0 THEN p_rate_ms END,
           coalesce(CASE WHEN p_limit > 0 THEN p_limit END, q.key_limit),
           coalesce((SELECT o.vtime FROM @S@.job_keys o WHERE o.queue = p_queue
                      AND (o.lim IS NULL OR o.running < o.lim) ORDER BY o.vtime LIMIT 1), 0)
      FROM @S@.queues q WHERE q.name = p_queue
    ON CONFLICT (queue, key) DO UPDATE SET
        max_running = CASE WHEN p_limit < 0 THEN k.max_running ELSE nullif(p_limit, 0) END,
        weight = CASE WHEN p_weight < 0 THEN k.weight ELSE nullif(p_weight, 0) END,
        rate_n = CASE WHEN p_rate_n < 0 THEN k.rate_n ELSE nullif(p_rate_n, 0) END,
        rate_ms = CASE WHEN p_rate_n < 0 THEN k.rate_ms WHEN p_rate_n = 0 THEN NULL ELSE p_rate_ms END,
        rate_next = CASE WHEN p_rate_n < 0 THEN k.rate_next END,
        lim = coalesce(CASE WHEN p_limit < 0 THEN k.max_running ELSE nullif(p_limit, 0) END,
                       (SELECT x.key_limit FROM @S@.queues x WHERE x.name = p_queue));
    PERFORM pg_notify(st.channel, p_queue) FROM @S@.queue_settings st;
END
$pgc$;

-- Claims up to p_max jobs of p_queue for p_worker, each with a fresh claim token and a lease of
-- p_lease_ms: first the queue's scheduled jobs that are due become pending (at most 1000 a
-- call, the others at the next), then a flow queue (keys, rates, fair shares) is claimed by
-- claim_flow() and any other by the plain claim: the highest effective priority first, then
-- run_at, then id, FOR UPDATE SKIP LOCKED, in one statement. A paused queue gives nothing.
-- A queue that turns into a flow queue between the two reads is claimed by claim_flow(), never
-- by both. One call per claim, so that a client needs no more than this to claim.
CREATE OR REPLACE FUNCTION @S@.claim(p_queue text, p_max integer, p_lease_ms bigint, p_worker text)
RETURNS TABLE (id bigint, token bigint, attempts integer, max_attempts integer,
               priority integer, payload jsonb, key text)
LANGUAGE plpgsql AS $pgc$
#variable_conflict use_column
DECLARE
    qflow boolean;
    n bigint;
BEGIN
    IF p_queue IS NULL OR p_queue = '' OR octet_length(p_queue) > 128 THEN
        RAISE EXCEPTION 'queue name must be 1 to 128 bytes' USING ERRCODE = '22023';
    END IF;
    IF p_max IS NULL OR p_max < 1 THEN
        RAISE EXCEPTION 'max must be at least 1, not %', coalesce(p_max::text, 'NULL') USING ERRCODE = '22023';
    END IF;
    IF p_lease_ms IS NULL OR p_lease_ms < 1 THEN
        RAISE EXCEPTION 'the lease must be at least 1 ms, not %', coalesce(p_lease_ms::text, 'NULL')
            USING ERRCODE = '22023';
    END IF;
    -- One statement: the promotion, and whether the queue is a flow queue.
    WITH p AS (
        UPDATE @S@.jobs j SET status = 'pending'
         WHERE j.id = ANY (ARRAY(SELECT s.id FROM @S@.jobs s
                                  WHERE s.queue = p_queue AND s.status = 'scheduled'
                                    AND s.run_at <= statement_timestamp()
                                  ORDER BY s.run_at LIMIT 1000 FOR UPDATE SKIP LOCKED))
           AND j.status = 'scheduled'
        RETURNING 1
    )
    SELECT (SELECT s.flow FROM @S@.queues s WHERE s.name = p_queue) INTO qflow;
    IF NOT coalesce(qflow, false) THEN
        -- The plain claim looks at the queue's row again: a flow queue gives it nothing.
        RETURN QUERY
        WITH picked AS MATERIALIZED (
            SELECT s.id FROM @S@.jobs s
             WHERE s.queue = p_queue AND s.status = 'pending' AND s.key IS NULL
               AND s.run_at <= clock_timestamp()
               AND NOT EXISTS (SELECT 1 FROM @S@.queues x WHERE x.name = p_queue AND (x.paused OR x.flow))
             ORDER BY s.eff_priority DESC, s.run_at, s.id
             LIMIT p_max FOR UPDATE SKIP LOCKED)
        UPDATE @S@.jobs j SET status = 'running', attempts = j.attempts + 1,
               token = nextval((SELECT t.token_seq FROM @S@.queue_settings t)),
               lease_until = clock_timestamp() + p_lease_ms * interval '1 millisecond',
               worker = p_worker, started_at = clock_timestamp()
         WHERE j.id = ANY (ARRAY(SELECT picked.id FROM picked))
        RETURNING j.id, j.token, j.attempts, j.max_attempts, j.priority, j.payload, j.key;
        GET DIAGNOSTICS n = ROW_COUNT;
        IF n > 0 OR NOT EXISTS (SELECT 1 FROM @S@.queues x WHERE x.name = p_queue AND x.flow) THEN
            RETURN;
        END IF;
    END IF;
    RETURN QUERY SELECT f.id, f.token, f.attempts, f.max_attempts, f.priority, f.payload, f.key
                   FROM @S@.claim_flow(p_queue, p_max, p_lease_ms, p_worker) f;
END
$pgc$;

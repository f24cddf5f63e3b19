-- Claims up to p_max jobs of a flow queue: keyed jobs within their keys' limits and rates,
-- unkeyed ones, all within the queue's rate. Fair queues take keys in order of virtual time
-- (ties by the head job's priority); others take the highest priority heads first, as the
-- plain claim does. Within a key, jobs go by effective priority, then run_at, then id.
-- Returns nothing for a queue that is not a flow queue or is paused.
CREATE OR REPLACE FUNCTION @S@.claim_flow(p_queue text, p_max integer, p_lease_ms bigint, p_worker text)
RETURNS TABLE (id bigint, token bigint, attempts integer, max_attempts integer,
               priority integer, payload jsonb, key text)
LANGUAGE plpgsql AS $pgc$
DECLARE
    q @S@.queues;
    t0 timestamptz;
    allow integer := p_max;
    qt float8;
    qbase timestamptz;
    tseq regclass;
    vmin float8;
    ckeys text[];
BEGIN
    SELECT * INTO q FROM @S@.queues s WHERE s.name = p_queue AND s.flow AND NOT s.paused;
    IF NOT FOUND OR p_max IS NULL OR p_max < 1 THEN
        RETURN;
    END IF;
    IF q.rate_n IS NOT NULL THEN
        -- The queue's rate is kept in its row: its claims take turns on the row lock.
        SELECT * INTO q FROM @S@.queues s WHERE s.name = p_queue AND s.flow AND NOT s.paused
           FOR NO KEY UPDATE;
        IF NOT FOUND THEN
            RETURN;
        END IF;
        t0 := clock_timestamp();
        qt := q.rate_ms::float8 / q.rate_n;
        qbase := greatest(coalesce(q.rate_next, t0), t0);
        allow := least(p_max::float8,
                       floor((q.rate_ms * 0.05 - extract(epoch FROM qbase - t0) * 1000) / qt) + 1)::int;
        IF allow < 1 THEN
            RETURN;
        END IF;
    END IF;
    t0 := clock_timestamp();
    SELECT s.token_seq INTO tseq FROM @S@.queue_settings s;
    -- Ended runs first: the ledger rows of up to twice as many keys as jobs wanted (at least
    -- 16), the first in the ledger's index, are folded under their keys' row locks (a key
    -- another claim holds is left to it), which puts those keys back among the keys with room,
    -- where they take their turns like any other; a claim reads no more of the ledger than
    -- that. The next statement's snapshot sees the new bounds.
    IF EXISTS (SELECT 1 FROM @S@.job_key_done x WHERE x.queue = p_queue) THEN
        WITH lk AS MATERIALIZED (
            SELECT k.key FROM @S@.job_keys k
             WHERE k.queue = p_queue
               AND k.key = ANY (ARRAY(SELECT DISTINCT x.key FROM @S@.job_key_done x
                                       WHERE x.queue = p_queue ORDER BY x.key
                                       LIMIT greatest(allow * 2, 16)))
             FOR NO KEY UPDATE OF k SKIP LOCKED
        ), fold AS (
            DELETE FROM @S@.job_key_done d USING lk WHERE d.queue = p_queue AND d.key = lk.key
            RETURNING d.key
        )
        UPDATE @S@.job_keys k SET running = greatest(k.running - f.n, 0)
          FROM (SELECT fold.key, count(*)::int AS n FROM fold GROUP BY fold.key) f
         WHERE k.queue = p_queue AND k.key = f.key;
    END IF;
    IF q.fair THEN
        -- Unkeyed jobs take their turn from the keys' virtual time, not from when they last ran.
        SELECT k.vtime INTO vmin FROM @S@.job_keys k
         WHERE k.queue = p_queue AND (k.lim IS NULL OR k.running < k.lim) ORDER BY k.vtime LIMIT 1;
    END IF;
    -- The keys to try, in the order they are to be served: the keys with room in order of
    -- virtual time (the least served first; the index holds no saturated key, so this walk
    -- never meets one), each with its head job, twice as many as the jobs wanted (at least
    -- 16), so that a claim that competes with another for the same keys still finds enough;
    -- then by virtual time (fair) or by the head's priority.
    SELECT array_agg(c.key ORDER BY CASE WHEN q.fair THEN c.vtime END, c.eff_priority DESC, c.run_at, c.id)
      INTO ckeys
      FROM (SELECT k.key, k.vtime, h.eff_priority, h.run_at, h.id FROM @S@.job_keys k
             CROSS JOIN LATERAL (
                   SELECT j.eff_priority, j.run_at, j.id FROM @S@.jobs j
                    WHERE j.queue = p_queue AND j.key = k.key AND j.status = 'pending'
                      AND j.run_at <= t0
                    ORDER BY j.eff_priority DESC, j.run_at, j.id LIMIT 1) h
             WHERE k.queue = p_queue AND (k.lim IS NULL OR k.running < k.lim)
               AND (coalesce(k.rate_n, q.key_rate_n) IS NULL OR k.rate_next IS NULL
                    OR k.rate_next <= t0 + coalesce(k.rate_ms, q.key_rate_ms) * 0.05
                                           * interval '1 millisecond')
             ORDER BY k.vtime, k.key
             LIMIT greatest(allow * 2, 16)) c;
    RETURN QUERY
    WITH pick AS MATERIALIZED (
        SELECT k.key, k.running, k.lim, k.vtime, coalesce(k.weight, 1) AS w,
               coalesce(k.rate_n, q.key_rate_n) AS rn, coalesce(k.rate_ms, q.key_rate_ms) AS rms,
               k.rate_next
          FROM unnest(ckeys) WITH ORDINALITY AS c(key, ord)
          JOIN @S@.job_keys k ON k.queue = p_queue AND k.key = c.key
         WHERE (coalesce(k.rate_n, q.key_rate_n) IS NULL OR k.rate_next IS NULL
                OR k.rate_next <= t0 + coalesce(k.rate_ms, q.key_rate_ms) * 0.05 * interval '1 millisecond')
           AND (k.lim IS NULL OR k.running < k.lim)
         ORDER BY c.ord
         LIMIT allow
         FOR NO KEY UPDATE OF k SKIP LOCKED
    ), kcap AS MATERIALIZED (
        SELECT p.*,
               least(allow,
                     CASE WHEN p.lim IS NULL THEN allow ELSE p.lim - p.running END,
                     CASE WHEN p.rn IS NULL THEN allow
                          ELSE floor((p.rms * 0.05 - extract(epoch FROM
                                      greatest(coalesce(p.rate_next, t0), t0) - t0) * 1000)
                                     / (p.rms::float8 / p.rn))::int + 1 END) AS cap
          FROM pick p
    ), kjobs AS MATERIALIZED (
        SELECT x.id, kc.key, x.eff_priority, x.run_at, kc.vtime + (x.i - 1)::float8 / kc.w AS vt
          FROM kcap kc
         CROSS JOIN LATERAL (
               SELECT s.*, row_number() OVER (ORDER BY s.eff_priority DESC, s.run_at, s.id) AS i
                 FROM (SELECT j.id, j.eff_priority, j.run_at FROM @S@.jobs j
                        WHERE j.queue = p_queue AND j.key = kc.key AND j.status = 'pending'
                          AND j.run_at <= t0
                        ORDER BY j.eff_priority DESC, j.run_at, j.id
                        LIMIT greatest(kc.cap, 0) FOR UPDATE OF j SKIP LOCKED) s) x
    ), ujobs AS MATERIALIZED (
        SELECT s.id, NULL::text AS key, s.eff_priority, s.run_at,
               greatest(q.nokey_vtime, coalesce(vmin, 0))
               + (row_number() OVER (ORDER BY s.eff_priority DESC, s.run_at, s.id) - 1)::float8 AS vt
          FROM (SELECT j.id, j.eff_priority, j.run_at FROM @S@.jobs j
                 WHERE j.queue = p_queue AND j.status = 'pending' AND j.key IS NULL AND j.run_at <= t0
                 ORDER BY j.eff_priority DESC, j.run_at, j.id
                 LIMIT allow FOR UPDATE OF j SKIP LOCKED) s
    ), chosen AS MATERIALIZED (
        SELECT a.id, a.key FROM (SELECT * FROM kjobs UNION ALL SELECT * FROM ujobs) a
         ORDER BY CASE WHEN q.fair THEN a.vt END, a.eff_priority DESC, a.run_at, a.id
         LIMIT allow
    ), per_key AS MATERIALIZED (
        SELECT array_agg(s.key) AS ks, array_agg(s.n) AS ns
          FROM (SELECT c.key, count(*)::int AS n FROM chosen c WHERE c.key IS NOT NULL GROUP BY c.key) s
    ), kupd AS (
        UPDATE @S@.job_keys k
           SET running = k.running + kc.n,
               vtime = k.vtime + kc.n::float8 / kc.w,
               rate_next = CASE WHEN kc.rn IS NULL THEN k.rate_next
                                ELSE greatest(coalesce(k.rate_next, t0), t0)
                                     + kc.n * (kc.rms::float8 / kc.rn) * interval '1 millisecond' END,
               claimed_at = t0
          FROM (SELECT c.*, pk.ns[array_position(pk.ks, c.key)] AS n FROM kcap c CROSS JOIN per_key pk) kc
         WHERE k.queue = p_queue AND k.key = kc.key AND kc.n IS NOT NULL
    ), qupd AS (
        UPDATE @S@.queues s
           SET rate_next = CASE WHEN q.rate_n IS NULL THEN s.rate_next
                                ELSE qbase + (SELECT count(*) FROM chosen) * qt * interval '1 millisecond' END,
               nokey_vtime = greatest(s.nokey_vtime, coalesce(vmin, 0))
                             + (SELECT count(*) FROM chosen c WHERE c.key IS NULL)
         WHERE s.name = p_queue
           AND (q.rate_n IS NOT NULL OR (q.fair AND EXISTS (SELECT 1 FROM chosen c WHERE c.key IS NULL)))
           AND EXISTS (SELECT 1 FROM chosen)
    )
    UPDATE @S@.jobs j SET status = 'running', attempts = j.attempts + 1, token = nextval(tseq),
           lease_until = clock_timestamp() + p_lease_ms * interval '1 millisecond',
           worker = p_worker, started_at = clock_timestamp()
     WHERE j.id = ANY (ARRAY(SELECT c.id FROM chosen c))
    RETURNING j.id, j.token, j.attempts, j.max_attempts, j.priority, j.payload, j.key;
END
$pgc$;

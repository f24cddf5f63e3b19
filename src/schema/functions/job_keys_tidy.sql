-- Folds the stopped jobs of keys that no claim folded, and deletes the rows of keys with no
-- live job and no settings of their own. A volatile function: its second statement sees
-- what committed before it, after the first one locked the rows, so that a job enqueued
-- under a key (which holds the key's row with FOR KEY SHARE) is never left without its row.
CREATE OR REPLACE FUNCTION @S@.job_keys_tidy() RETURNS integer LANGUAGE plpgsql AS $pgc$
DECLARE
    qs text[];
    ks text[];
    n integer;
BEGIN
    WITH lk AS MATERIALIZED (
        SELECT k.queue, k.key FROM @S@.job_keys k
         WHERE (k.queue, k.key) IN (SELECT DISTINCT d.queue, d.key FROM @S@.job_key_done d)
         ORDER BY k.queue, k.key LIMIT 1000
         FOR NO KEY UPDATE SKIP LOCKED
    ), fold AS (
        DELETE FROM @S@.job_key_done d USING lk WHERE d.queue = lk.queue AND d.key = lk.key
        RETURNING d.queue, d.key
    )
    UPDATE @S@.job_keys k SET running = greatest(k.running - f.n, 0)
      FROM (SELECT fold.queue, fold.key, count(*)::int AS n FROM fold GROUP BY 1, 2) f
     WHERE k.queue = f.queue AND k.key = f.key;
    -- Recount keys whose bound may be off, under their locks; the next statement's snapshot is
    -- taken after them, so that the bound is set to the running jobs it sees plus the ended
    -- runs it sees not folded yet: those are folded later, once each.
    SELECT array_agg(x.queue), array_agg(x.key) INTO qs, ks FROM (
        SELECT k.queue, k.key FROM @S@.job_keys k
         WHERE k.running > 0 AND (k.claimed_at IS NULL OR k.claimed_at < clock_timestamp() - interval '1 second')
         ORDER BY k.claimed_at NULLS FIRST LIMIT 1000 FOR NO KEY UPDATE SKIP LOCKED) x;
    IF qs IS NOT NULL THEN
        UPDATE @S@.job_keys k SET running = c.n
          FROM (SELECT u.queue, u.key,
                       (SELECT count(*) FROM @S@.jobs j WHERE j.queue = u.queue AND j.key = u.key
                           AND j.status = 'running')
                       + (SELECT count(*) FROM @S@.job_key_done d WHERE d.queue = u.queue
                           AND d.key = u.key) AS n
                  FROM unnest(qs, ks) AS u(queue, key)) c
         WHERE k.queue = c.queue AND k.key = c.key AND k.running > c.n;
    END IF;
    SELECT array_agg(x.queue), array_agg(x.key) INTO qs, ks FROM (
        SELECT k.queue, k.key FROM @S@.job_keys k
         WHERE k.running = 0 AND k.max_running IS NULL AND k.weight IS NULL AND k.rate_n IS NULL
           AND NOT EXISTS (SELECT 1 FROM @S@.jobs j WHERE j.queue = k.queue AND j.key = k.key
                              AND j.status = 'pending')
           AND NOT EXISTS (SELECT 1 FROM @S@.jobs j WHERE j.queue = k.queue AND j.key = k.key
                              AND j.status = 'running')
           AND NOT EXISTS (SELECT 1 FROM @S@.jobs j WHERE j.queue = k.queue AND j.key = k.key
                              AND j.status = 'scheduled')
           AND NOT EXISTS (SELECT 1 FROM @S@.jobs j WHERE j.queue = k.queue AND j.key = k.key
                              AND j.status = 'waiting')
         LIMIT 1000 FOR UPDATE SKIP LOCKED) x;
    IF qs IS NULL THEN
        RETURN 0;
    END IF;
    DELETE FROM @S@.job_keys k USING unnest(qs, ks) AS x(queue, key)
     WHERE k.queue = x.queue AND k.key = x.key AND k.running = 0
       AND NOT EXISTS (SELECT 1 FROM @S@.jobs j WHERE j.queue = k.queue AND j.key = k.key
                          AND j.status = 'pending')
       AND NOT EXISTS (SELECT 1 FROM @S@.jobs j WHERE j.queue = k.queue AND j.key = k.key
                          AND j.status = 'running')
       AND NOT EXISTS (SELECT 1 FROM @S@.jobs j WHERE j.queue = k.queue AND j.key = k.key
                          AND j.status = 'scheduled')
       AND NOT EXISTS (SELECT 1 FROM @S@.job_key_done d WHERE d.queue = k.queue AND d.key = k.key);
    GET DIAGNOSTICS n = ROW_COUNT;
    RETURN n;
END
$pgc$;

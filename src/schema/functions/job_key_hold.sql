-- A keyed job needs its key's row, held with FOR KEY SHARE until the job's transaction ends
-- so that the reaper's clean-up (FOR UPDATE) cannot delete it under the job; the lock does not
-- conflict with the FOR NO KEY UPDATE of claims. New keys start at the smallest virtual time
-- of the keys with room, so they neither wait for old ones nor take their turns.
CREATE OR REPLACE FUNCTION @S@.job_key_hold() RETURNS trigger LANGUAGE plpgsql AS $pgc$
BEGIN
    LOOP
        PERFORM 1 FROM @S@.job_keys k WHERE k.queue = NEW.queue AND k.key = NEW.key FOR KEY SHARE;
        EXIT WHEN FOUND;
        INSERT INTO @S@.job_keys AS k (queue, key, lim, vtime)
        SELECT NEW.queue, NEW.key, q.key_limit,
               coalesce((SELECT o.vtime FROM @S@.job_keys o
                          WHERE o.queue = NEW.queue AND (o.lim IS NULL OR o.running < o.lim)
                          ORDER BY o.vtime LIMIT 1), 0)
          FROM @S@.queues q WHERE q.name = NEW.queue
        ON CONFLICT DO NOTHING;
    END LOOP;
    UPDATE @S@.queues SET flow = true WHERE name = NEW.queue AND NOT flow;
    RETURN NEW;
END
$pgc$;
DROP TRIGGER IF EXISTS jobs_key_hold ON @S@.jobs;
CREATE TRIGGER jobs_key_hold BEFORE INSERT ON @S@.jobs
    FOR EACH ROW WHEN (NEW.key IS NOT NULL) EXECUTE FUNCTION @S@.job_key_hold();

-- At commit, folds the ends job_ends_note() noted in this transaction: locks the dependents in
-- id order, then the groups in name order, counts the groups' members, fires the done groups,
-- releases the dependents with no edge left and cancels those whose dependency did not
-- succeed, looping over the ends those cancellations make (docs/design/dependencies.md).
CREATE OR REPLACE FUNCTION @S@.job_ends_fold() RETURNS trigger LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp AS $pgc$
DECLARE
    ids bigint[];
    sts text[];
    gs text[];
    g text;
    doomed bigint[];
    rj bigint[];
    rd bigint[];
    rs text[];
    rr boolean[];
    n bigint;
    chan text;
BEGIN
    SELECT channel INTO chan FROM @S@.queue_settings;
    LOOP
        WITH e AS (DELETE FROM @S@.job_ends RETURNING id, status)
        SELECT array_agg(e.id ORDER BY e.id), array_agg(e.status ORDER BY e.id) INTO ids, sts FROM e;
        EXIT WHEN ids IS NULL;
        -- Dependents first, in id order, as an enqueue takes job rows before its group's
        -- (an enqueue after a waiting job into a group, beside the completion that releases
        -- that job and ends a member of that group, must not wait for each other in a cycle).
        PERFORM 1 FROM @S@.jobs j
         WHERE j.id IN (SELECT d.job FROM @S@.job_deps d WHERE d.dep = ANY (ids))
         ORDER BY j.id FOR UPDATE;
        -- Groups: members counted once (their rows go), group rows locked in name order.
        SELECT array_agg(DISTINCT m.grp ORDER BY m.grp) INTO gs
          FROM @S@.job_group_jobs m WHERE m.job = ANY (ids);
        IF gs IS NOT NULL THEN
            PERFORM 1 FROM @S@.job_groups WHERE name = ANY (gs) ORDER BY name FOR NO KEY UPDATE;
            WITH m AS (DELETE FROM @S@.job_group_jobs m USING unnest(ids, sts) AS u(id, st)
                        WHERE m.job = u.id RETURNING m.grp, u.st)
            UPDATE @S@.job_groups gr
               SET succeeded = gr.succeeded + c.s, failed = gr.failed + c.f, cancelled = gr.cancelled + c.c
              FROM (SELECT m.grp, count(*) FILTER (WHERE m.st = 'succeeded') AS s,
                           count(*) FILTER (WHERE m.st = 'failed') AS f,
                           count(*) FILTER (WHERE m.st = 'cancelled') AS c
                      FROM m GROUP BY m.grp) c
             WHERE gr.name = c.grp;
            FOREACH g IN ARRAY gs LOOP
                PERFORM @S@.group_fire(g);
            END LOOP;
        END IF;
        -- Dependents: their edges to the ended jobs resolved.
        WITH d AS (DELETE FROM @S@.job_deps d USING unnest(ids, sts) AS u(id, st)
                    WHERE d.dep = u.id RETURNING d.job, d.dep, u.st, d.run_anyway)
        SELECT array_agg(d.job), array_agg(d.dep), array_agg(d.st), array_agg(d.run_anyway)
          INTO rj, rd, rs, rr FROM d;
        CONTINUE WHEN rj IS NULL;
        -- Cancelled: a dependency that did not succeed, under the cancel policy; the reason
        -- names the lowest such dependency. Their history rows end more jobs: the next turn.
        WITH bad AS (SELECT DISTINCT ON (r.job) r.job, r.dep, r.st
                       FROM unnest(rj, rd, rs, rr) AS r(job, dep, st, run_anyway)
                      WHERE r.st <> 'succeeded' AND NOT r.run_anyway ORDER BY r.job, r.dep),
             gone AS (DELETE FROM @S@.jobs j USING bad
                       WHERE j.id = bad.job AND j.status = 'waiting'
                       RETURNING j, 'dependency ' || bad.dep
                                      || CASE WHEN bad.st = 'failed' THEN ' failed' ELSE ' was cancelled' END AS why),
             hist AS (INSERT INTO @S@.job_history
                      SELECT h.* FROM gone x,
                             @S@.job_history_row(x.j, 'cancelled', x.why, (x.j).errors,
                                                              (x.j).exit_status, (x.j).output) h
                       ORDER BY h.id
                      RETURNING id)
        SELECT array_agg(id) INTO doomed FROM hist;
        IF doomed IS NOT NULL THEN
            DELETE FROM @S@.job_deps d WHERE d.job = ANY (doomed);
        END IF;
        -- Released: no edge left; pending, or scheduled when run_at is still ahead.
        WITH rel AS (
            UPDATE @S@.jobs j
               SET status = CASE WHEN j.run_at > clock_timestamp() THEN 'scheduled' ELSE 'pending' END,
                   run_at = greatest(j.run_at, clock_timestamp())
             WHERE j.id = ANY (rj) AND j.status = 'waiting'
               AND NOT EXISTS (SELECT 1 FROM @S@.job_deps d WHERE d.job = j.id)
            RETURNING j.queue)
        SELECT count(pg_notify(chan, x.queue)) INTO n FROM (SELECT DISTINCT rel.queue FROM rel) x;
    END LOOP;
    RETURN NULL;
END
$pgc$;
DROP TRIGGER IF EXISTS job_ends_fold ON @S@.job_history;
CREATE CONSTRAINT TRIGGER job_ends_fold AFTER INSERT ON @S@.job_history
    DEFERRABLE INITIALLY DEFERRED
    FOR EACH ROW WHEN (NEW.has_dependents) EXECUTE FUNCTION @S@.job_ends_fold();

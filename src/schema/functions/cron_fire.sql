-- Fires a batch of ticks of schedules the caller has locked (FOR UPDATE) and whose next ticks
-- it computed: one 'missed' row per gap, one row per tick in cron_ticks (a tick recorded before
-- is left alone and enqueues nothing), one enqueue() per queue and run_at for the new ticks'
-- jobs (overlap skip: the unique key 'cron:NAME', so a tick whose previous job is live becomes
-- 'skipped-overlap'), and the schedules' next ticks and counters, in the caller's transaction.
-- A schedule's p_last NULL keeps its last tick (a schedule whose first tick the scheduler has
-- just computed, none of it due). Then the run log's time bound: ticks older than the longer
-- history retention whose jobs are not live go, a thousand per call.
-- Returns per tick (ord) its job's id and whether its row was new.
CREATE OR REPLACE FUNCTION @S@.cron_fire(
    p_names text[], p_ticks bigint[], p_payloads text[], p_run_at_ms bigint[],
    p_missed_names text[], p_missed_ticks bigint[], p_missed_counts integer[],
    p_sched_names text[], p_next bigint[], p_last bigint[], p_trim boolean[],
    p_scheduler text)
RETURNS TABLE (ord bigint, job_id bigint, fresh boolean)
LANGUAGE plpgsql SET search_path = pg_catalog, pg_temp AS $pgc$
DECLARE
    fresh_i bigint[];
    res_i bigint[] := '{}';
    res_id bigint[] := '{}';
    g record;
    ids bigint[];
BEGIN
    IF cardinality(p_names) IS DISTINCT FROM cardinality(p_ticks)
       OR cardinality(p_names) IS DISTINCT FROM cardinality(p_payloads)
       OR cardinality(p_names) IS DISTINCT FROM cardinality(p_run_at_ms)
       OR cardinality(p_missed_names) IS DISTINCT FROM cardinality(p_missed_ticks)
       OR cardinality(p_missed_names) IS DISTINCT FROM cardinality(p_missed_counts)
       OR cardinality(p_sched_names) IS DISTINCT FROM cardinality(p_next)
       OR cardinality(p_sched_names) IS DISTINCT FROM cardinality(p_last)
       OR cardinality(p_sched_names) IS DISTINCT FROM cardinality(p_trim) THEN
        RAISE EXCEPTION 'cron_fire: the arrays of one kind differ in length' USING ERRCODE = '22023';
    END IF;

    INSERT INTO @S@.cron_ticks (schedule, tick_at, outcome, ticks)
    SELECT m.n, to_timestamp(m.t), 'missed', m.c
      FROM unnest(p_missed_names, p_missed_ticks, p_missed_counts) AS m(n, t, c)
    ON CONFLICT DO NOTHING;

    -- A row per tick first: only a tick whose row is new gets a job.
    WITH ins AS (
        INSERT INTO @S@.cron_ticks (schedule, tick_at, outcome)
        SELECT u.n, to_timestamp(u.t), 'enqueued' FROM unnest(p_names, p_ticks) AS u(n, t)
        ON CONFLICT DO NOTHING
        RETURNING schedule, tick_at)
    SELECT array_agg(u.i) INTO fresh_i
      FROM unnest(p_names, p_ticks) WITH ORDINALITY AS u(n, t, i)
      JOIN ins ON ins.schedule = u.n AND ins.tick_at = to_timestamp(u.t);

    FOR g IN
        SELECT s.queue, to_timestamp(u.r / 1000.0) AS run_at, s.max_attempts,
               array_agg(u.p ORDER BY u.i) AS payloads,
               array_agg(CASE WHEN s.overlap = 'skip' THEN 'cron:' || s.name END ORDER BY u.i) AS ukeys,
               array_agg(u.i ORDER BY u.i) AS idx
          FROM unnest(p_names, p_payloads, p_run_at_ms) WITH ORDINALITY AS u(n, p, r, i)
          JOIN @S@.cron_schedules s ON s.name = u.n
         WHERE u.i = ANY (fresh_i)
         GROUP BY s.queue, u.r, s.max_attempts
         ORDER BY min(u.i)
    LOOP
        SELECT array_agg(e.id ORDER BY e.ord) INTO ids
          FROM @S@.enqueue(g.queue, g.payloads, g.ukeys, NULL, g.run_at, nullif(g.max_attempts, 0)) AS e;
        res_i := res_i || g.idx;
        res_id := res_id || ids;
    END LOOP;

    UPDATE @S@.cron_ticks t
       SET outcome = CASE WHEN r.id IS NULL THEN 'skipped-overlap' ELSE 'enqueued' END, job_id = r.id
      FROM unnest(res_i, res_id) AS r(i, id)
      JOIN unnest(p_names, p_ticks) WITH ORDINALITY AS u(n, t, i) ON u.i = r.i
     WHERE t.schedule = u.n AND t.tick_at = to_timestamp(u.t);

    WITH r AS (
        SELECT u.n, u.t, r.id
          FROM unnest(res_i, res_id) AS r(i, id)
          JOIN unnest(p_names, p_ticks) WITH ORDINALITY AS u(n, t, i) ON u.i = r.i
    ), agg AS (
        SELECT r.n, count(r.id) AS fired, count(*) - count(r.id) AS skipped,
               (array_agg(CASE WHEN r.id IS NULL THEN 'skipped-overlap' ELSE 'enqueued' END
                          ORDER BY r.t DESC))[1] AS outcome
          FROM r GROUP BY r.n
    ), mis AS (
        SELECT m.n, sum(m.c) AS missed FROM unnest(p_missed_names, p_missed_counts) AS m(n, c) GROUP BY m.n
    )
    UPDATE @S@.cron_schedules s
       SET next_tick = to_timestamp(x.nt), last_tick = coalesce(to_timestamp(x.lt), s.last_tick),
           last_outcome = coalesce(agg.outcome, CASE WHEN mis.missed > 0 THEN 'missed' END, s.last_outcome),
           fired = s.fired + coalesce(agg.fired, 0), missed = s.missed + coalesce(mis.missed, 0),
           skipped = s.skipped + coalesce(agg.skipped, 0),
           last_fired_at = CASE WHEN agg.fired > 0 THEN now() ELSE s.last_fired_at END,
           last_scheduler = coalesce(p_scheduler, s.last_scheduler), seen_at = now()
      FROM unnest(p_sched_names, p_next, p_last) AS x(n, nt, lt)
      LEFT JOIN agg ON agg.n = x.n
      LEFT JOIN mis ON mis.n = x.n
     WHERE s.name = x.n;

    -- Keep the newest rows of a schedule, trimmed now and then (the caller says when).
    DELETE FROM @S@.cron_ticks t
     USING unnest(p_sched_names, p_trim) AS x(n, tr)
     WHERE x.tr AND t.schedule = x.n
       AND t.tick_at < (SELECT k.tick_at FROM @S@.cron_ticks k WHERE k.schedule = x.n
                         ORDER BY k.tick_at DESC OFFSET 999 LIMIT 1);

    DELETE FROM @S@.cron_ticks WHERE ctid = ANY (ARRAY(
        SELECT k.ctid FROM @S@.cron_ticks k
         WHERE k.tick_at < now() - (SELECT greatest(q.succeeded_retention, q.failed_retention)
                                      FROM @S@.queue_settings q)
           AND NOT EXISTS (SELECT 1 FROM @S@.jobs j WHERE j.id = k.job_id)
         ORDER BY k.tick_at LIMIT 1000 FOR UPDATE SKIP LOCKED));

    RETURN QUERY
    SELECT u.i, r.id, u.i = ANY (coalesce(fresh_i, '{}'))
      FROM unnest(p_names) WITH ORDINALITY AS u(n, i)
      LEFT JOIN unnest(res_i, res_id) AS r(i, id) ON r.i = u.i
     ORDER BY u.i;
END
$pgc$;

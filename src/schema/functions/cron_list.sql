-- The schedules by name, or only p_name (P0002 when it does not exist), as stored, with what
-- a reader wants to know of their ticks: next_tick, the next tick to come (one that fired
-- ahead, or the next to fire; NULL while the scheduler has yet to compute it), last_tick and
-- last_outcome, the latest tick that has come and what became of it (from one row of the
-- ticks, so that one tick's time is never shown with another's outcome), last_success_at, the
-- latest tick whose job succeeded; db_now, the server's now() of the read.
CREATE OR REPLACE FUNCTION @S@.cron_list(p_name text DEFAULT NULL)
RETURNS TABLE (name text, expr text, tz text, queue text, payload jsonb, catch_up text,
               catch_up_max integer, catch_up_window_ms bigint, overlap text, jitter_ms bigint,
               paused boolean, next_tick timestamptz, last_tick timestamptz, last_outcome text,
               last_fired_at timestamptz, last_scheduler text, fired bigint, missed bigint,
               skipped bigint, last_success_at timestamptz, command text[], max_attempts integer,
               created_at timestamptz, updated_at timestamptz, seen_at timestamptz,
               db_now timestamptz)
LANGUAGE plpgsql STABLE SET search_path = pg_catalog, pg_temp AS $pgc$
BEGIN
    RETURN QUERY
    SELECT s.name, s.expr, s.tz, s.queue, s.payload, s.catch_up, s.catch_up_max,
           (extract(epoch FROM s.catch_up_window) * 1000)::bigint, s.overlap,
           (extract(epoch FROM s.jitter) * 1000)::bigint, s.paused,
           coalesce((SELECT min(t.tick_at) FROM @S@.cron_ticks t WHERE t.schedule = s.name
                      AND t.tick_at > now() AND t.outcome = 'enqueued'),
                    nullif(s.next_tick, '-infinity')),
           coalesce(lt.tick_at, CASE WHEN s.last_tick > now() THEN NULL ELSE s.last_tick END),
           CASE WHEN lt.tick_at IS NOT NULL THEN lt.outcome ELSE s.last_outcome END,
           s.last_fired_at, s.last_scheduler, s.fired, s.missed, s.skipped,
           (SELECT max(t.tick_at) FROM @S@.cron_ticks t JOIN @S@.job_history h ON h.id = t.job_id
             WHERE t.schedule = s.name AND h.status = 'succeeded'),
           s.command, s.max_attempts, s.created_at, s.updated_at, s.seen_at, now()
      FROM @S@.cron_schedules s
      LEFT JOIN LATERAL (SELECT t.tick_at, t.outcome FROM @S@.cron_ticks t
                          WHERE t.schedule = s.name AND t.tick_at <= now()
                          ORDER BY t.tick_at DESC LIMIT 1) lt ON true
     WHERE p_name IS NULL OR s.name = p_name
     ORDER BY s.name;
    IF p_name IS NOT NULL AND NOT FOUND THEN
        RAISE EXCEPTION 'no schedule %', left(p_name, 100) USING ERRCODE = 'P0002';
    END IF;
END
$pgc$;

-- Enqueues one job of the schedule p_name now, also when it is paused, and returns its id:
-- its payload is the schedule's with the "cron" member whose tick is the server's now() in the
-- schedule's zone (ISO 8601 with its offset, by the server's tzdata), recorded in cron_ticks as
-- 'triggered'; next_tick does not move. P0002 when there is no such schedule; 23505 when its
-- overlap is 'skip' and its previous job is still pending or running (nothing is enqueued).
CREATE OR REPLACE FUNCTION @S@.cron_trigger(p_name text) RETURNS bigint
LANGUAGE plpgsql SET search_path = pg_catalog, pg_temp AS $pgc$
DECLARE
    s @S@.cron_schedules;
    v_at timestamptz := date_trunc('second', now());
    v_local timestamp;
    off integer;
    tick text;
    v_id bigint;
BEGIN
    SELECT * INTO s FROM @S@.cron_schedules c WHERE c.name = p_name FOR UPDATE;
    IF NOT FOUND THEN
        RAISE EXCEPTION 'no schedule %', left(coalesce(p_name, 'NULL'), 100) USING ERRCODE = 'P0002';
    END IF;
    v_local := v_at AT TIME ZONE s.tz;
    off := extract(epoch FROM v_local - (v_at AT TIME ZONE 'UTC'))::integer;
    tick := to_char(v_local, 'YYYY-MM-DD"T"HH24:MI:SS') || CASE WHEN off < 0 THEN '-' ELSE '+' END
         || lpad((abs(off) / 3600)::text, 2, '0') || ':' || lpad((abs(off) / 60 % 60)::text, 2, '0')
         || CASE WHEN abs(off) % 60 <> 0 THEN ':' || lpad((abs(off) % 60)::text, 2, '0') ELSE '' END;
    SELECT e.id INTO v_id
      FROM @S@.enqueue(s.queue,
                       ARRAY[(s.payload || jsonb_build_object('cron',
                              jsonb_build_object('schedule', s.name, 'tick', tick)))::text],
                       ARRAY[CASE WHEN s.overlap = 'skip' THEN 'cron:' || s.name END],
                       NULL, NULL, nullif(s.max_attempts, 0)) AS e;
    IF v_id IS NULL THEN
        RAISE EXCEPTION 'schedule %: the previous job is still pending or running (overlap skip)', left(p_name, 100)
            USING ERRCODE = '23505';
    END IF;
    INSERT INTO @S@.cron_ticks (schedule, tick_at, outcome, job_id)
    VALUES (p_name, now(), 'triggered', v_id) ON CONFLICT DO NOTHING;
    UPDATE @S@.cron_schedules c SET fired = c.fired + 1, last_fired_at = now(), last_outcome = 'triggered'
     WHERE c.name = p_name;
    RETURN v_id;
END
$pgc$;

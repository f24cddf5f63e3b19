-- Adds the schedule p_name, or with p_replace changes the one of that name (there is no
-- separate "change": a changed definition is an add with p_replace). Everything is checked
-- here, as pgc_cron_add() checks it: the name, the expression and the zone (cron_validate),
-- the queue, the policies and their bounds, the payload (a JSON object), the command. Returns
-- whether anything was written: false when p_replace found the same definition, whose next
-- tick is then kept. A changed definition takes back its ticks that fired ahead (cron_unfire)
-- and gets the next tick p_next_tick: the C library computes it with the host's tzdata; NULL
-- (any other client) leaves it to the scheduler: next_tick is then stored as '-infinity',
-- which means "compute it", and pgc_cron_fire_due() computes the first tick after the row's
-- updated_at (the add or the change) at its next pass and stores it through cron_fire().
CREATE OR REPLACE FUNCTION @S@.cron_add(
    p_name text, p_expr text, p_queue text DEFAULT NULL, p_tz text DEFAULT NULL,
    p_payload jsonb DEFAULT NULL, p_catch_up text DEFAULT 'skip',
    p_catch_up_window_ms bigint DEFAULT 3600000, p_catch_up_max integer DEFAULT 100,
    p_overlap text DEFAULT 'allow', p_jitter_ms bigint DEFAULT 0, p_command text[] DEFAULT NULL,
    p_max_attempts integer DEFAULT 0, p_replace boolean DEFAULT false,
    p_next_tick timestamptz DEFAULT NULL)
RETURNS boolean
LANGUAGE plpgsql SET search_path = pg_catalog, pg_temp AS $pgc$
DECLARE
    v_tz text := coalesce(nullif(p_tz, ''), 'UTC');
    v_queue text := p_queue;
    v_payload jsonb := @S@.cron_payload(p_payload::text);
    v_window interval;
    v_jitter interval;
    done boolean;
BEGIN
    IF p_name IS NULL OR p_expr IS NULL THEN
        RAISE EXCEPTION 'cron_add: the name and the expression must not be NULL' USING ERRCODE = '22004';
    END IF;
    IF p_name = '' OR octet_length(p_name) > 100 THEN
        RAISE EXCEPTION 'schedule name must be 1 to 100 bytes' USING ERRCODE = '22023';
    END IF;
    IF p_name ~ '[[:space:][:cntrl:]]' THEN
        RAISE EXCEPTION 'schedule name "%" must not contain white space or control characters', left(p_name, 100)
            USING ERRCODE = '22023';
    END IF;
    IF p_command IS NOT NULL THEN
        IF cardinality(p_command) = 0 THEN
            RAISE EXCEPTION 'a command schedule needs a command' USING ERRCODE = '22023';
        END IF;
        IF cardinality(p_command) > 1024 THEN
            RAISE EXCEPTION 'a command has at most 1024 words, not %', cardinality(p_command) USING ERRCODE = '22023';
        END IF;
        IF array_position(p_command, NULL) IS NOT NULL THEN
            RAISE EXCEPTION 'command word % is NULL', array_position(p_command, NULL) - 1 USING ERRCODE = '22023';
        END IF;
        IF p_command[1] = '' THEN
            RAISE EXCEPTION 'the command''s name must not be empty' USING ERRCODE = '22023';
        END IF;
        IF v_queue IS NOT NULL AND v_queue <> 'cron:commands' THEN
            RAISE EXCEPTION 'a command schedule''s jobs go to the queue cron:commands, not %', left(v_queue, 128)
                USING ERRCODE = '22023';
        END IF;
        v_queue := 'cron:commands';
    ELSIF v_queue = 'cron:commands' THEN
        RAISE EXCEPTION 'the queue cron:commands is for command schedules only' USING ERRCODE = '22023';
    END IF;
    IF v_queue IS NULL OR v_queue = '' THEN
        RAISE EXCEPTION 'a schedule needs a queue for its jobs' USING ERRCODE = '22023';
    END IF;
    IF octet_length(v_queue) > 128 THEN
        RAISE EXCEPTION 'queue name is longer than 128 bytes' USING ERRCODE = '22023';
    END IF;
    IF p_max_attempts IS NULL OR p_max_attempts < 0 OR p_max_attempts > 1000000 THEN
        RAISE EXCEPTION 'max attempts must be 1 to 1000000 (0: the queue''s default), not %', p_max_attempts
            USING ERRCODE = '22023';
    END IF;
    IF p_catch_up IS NULL OR p_catch_up NOT IN ('skip', 'once', 'all') THEN
        RAISE EXCEPTION 'unknown catch-up policy "%" (skip, once or all)', p_catch_up USING ERRCODE = '22023';
    END IF;
    IF p_overlap IS NULL OR p_overlap NOT IN ('allow', 'skip') THEN
        RAISE EXCEPTION 'unknown overlap policy "%" (allow or skip)', p_overlap USING ERRCODE = '22023';
    END IF;
    IF p_catch_up_window_ms IS NULL OR p_catch_up_window_ms <= 0 THEN
        RAISE EXCEPTION 'catch-up window must be positive, not % ms', p_catch_up_window_ms USING ERRCODE = '22023';
    END IF;
    IF p_catch_up_max IS NULL OR p_catch_up_max < 1 OR p_catch_up_max > 1000 THEN
        RAISE EXCEPTION 'catch-up maximum must be 1 to 1000, not %', p_catch_up_max USING ERRCODE = '22023';
    END IF;
    IF p_jitter_ms IS NULL OR p_jitter_ms < 0 THEN
        RAISE EXCEPTION 'jitter must not be negative' USING ERRCODE = '22023';
    END IF;
    PERFORM @S@.cron_validate(p_expr, v_tz);
    v_window := p_catch_up_window_ms * interval '1 millisecond';
    v_jitter := p_jitter_ms * interval '1 millisecond';

    INSERT INTO @S@.cron_schedules AS s (name, expr, tz, queue, payload, catch_up, catch_up_max,
                                         catch_up_window, overlap, jitter, next_tick, command,
                                         max_attempts)
    VALUES (p_name, p_expr, v_tz, v_queue, v_payload, p_catch_up, p_catch_up_max, v_window,
            p_overlap, v_jitter, coalesce(p_next_tick, '-infinity'), p_command, p_max_attempts)
    ON CONFLICT (name) DO NOTHING
    RETURNING true INTO done;
    IF done THEN
        RETURN true;
    END IF;
    IF NOT p_replace THEN
        RAISE EXCEPTION 'schedule % exists (replace it to change it)', left(p_name, 100) USING ERRCODE = '23505';
    END IF;
    -- An unchanged definition keeps its next tick (sync runs again and again).
    UPDATE @S@.cron_schedules s
       SET expr = p_expr, tz = v_tz, queue = v_queue, payload = v_payload, catch_up = p_catch_up,
           catch_up_max = p_catch_up_max, catch_up_window = v_window, overlap = p_overlap,
           jitter = v_jitter, command = p_command, max_attempts = p_max_attempts,
           updated_at = clock_timestamp()
     WHERE s.name = p_name
       AND (s.expr, s.tz, s.queue, s.payload, s.catch_up, s.catch_up_max, s.catch_up_window,
            s.overlap, s.jitter, s.command, s.max_attempts)
           IS DISTINCT FROM (p_expr, v_tz, v_queue, v_payload, p_catch_up, p_catch_up_max, v_window,
                             p_overlap, v_jitter, p_command, p_max_attempts)
    RETURNING true INTO done;
    IF NOT coalesce(done, false) THEN
        RETURN false;
    END IF;
    -- A tick that fired ahead under the old definition is taken back; the next tick is the
    -- new definition's.
    PERFORM @S@.cron_unfire(p_name);
    UPDATE @S@.cron_schedules s SET next_tick = coalesce(p_next_tick, '-infinity') WHERE s.name = p_name;
    RETURN true;
END
$pgc$;

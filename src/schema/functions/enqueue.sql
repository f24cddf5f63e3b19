-- Enqueues one job per element of payloads (JSON text), all or nothing, in the caller's
-- transaction. unique_keys may be NULL, or hold NULL or a key per job: a job whose key is taken
-- by a pending or running job of the queue is skipped, and its id comes back NULL. p_key, when
-- given, is the concurrency key of every job of the call. p_after lists jobs that every job of
-- the call waits for (each must exist, live or in the history): the jobs are 'waiting' until
-- the last live one succeeds. When one fails for good or is cancelled, p_run_anyway says
-- whether they run all the same (true) or are cancelled (NULL, false), at once for a
-- dependency already finished. p_group adds them to an open group. Returns one row per input
-- element, in order. Sends one notification per transaction (duplicates of a notification in
-- one transaction are folded by the server).
CREATE OR REPLACE FUNCTION @S@.enqueue(p_queue text, p_payloads text[], p_unique_keys text[],
                                 p_priority integer, p_run_at timestamptz,
                                 p_max_attempts integer, p_max_deferrals integer DEFAULT NULL,
                                 p_key text DEFAULT NULL, p_after bigint[] DEFAULT NULL,
                                 p_run_anyway boolean DEFAULT NULL, p_group text DEFAULT NULL)
RETURNS TABLE (ord bigint, id bigint) LANGUAGE plpgsql AS $pgc$
DECLARE
    st @S@.queue_settings;
    bad bigint;
    why text;
    big bigint;
    n integer;
    target text;
    deps bigint[];
    live bigint[];
    miss bigint;
    ended_id bigint;
    ended_st text;
    doom text;
    gr @S@.job_groups;
    ords bigint[];
    ids bigint[];
BEGIN
    IF p_queue IS NULL OR p_queue = '' THEN
        RAISE EXCEPTION 'queue name is empty' USING ERRCODE = '22023';
    END IF;
    IF octet_length(p_queue) > 128 THEN
        RAISE EXCEPTION 'queue name is longer than 128 bytes' USING ERRCODE = '22023';
    END IF;
    IF p_key = '' THEN
        RAISE EXCEPTION 'the concurrency key is empty' USING ERRCODE = '22023';
    END IF;
    IF octet_length(p_key) > 128 THEN
        RAISE EXCEPTION 'the concurrency key is % bytes, longer than 128', octet_length(p_key)
            USING ERRCODE = '22023';
    END IF;
    IF p_max_attempts IS NOT NULL AND p_max_attempts < 1 THEN
        RAISE EXCEPTION 'max_attempts must be at least 1, not %', p_max_attempts USING ERRCODE = '22023';
    END IF;
    IF p_max_deferrals IS NOT NULL AND p_max_deferrals < 0 THEN
        RAISE EXCEPTION 'max_deferrals must not be negative, not %', p_max_deferrals USING ERRCODE = '22023';
    END IF;
    IF p_priority IS NOT NULL AND p_priority NOT BETWEEN -32768 AND 32767 THEN
        RAISE EXCEPTION 'priority % is out of range -32768..32767', p_priority USING ERRCODE = '22023';
    END IF;
    IF p_unique_keys IS NOT NULL AND cardinality(p_unique_keys) <> cardinality(p_payloads) THEN
        RAISE EXCEPTION 'unique_keys has % elements, payloads %', cardinality(p_unique_keys),
            cardinality(p_payloads) USING ERRCODE = '22023';
    END IF;
    IF p_after IS NOT NULL THEN
        IF array_position(p_after, NULL) IS NOT NULL THEN
            RAISE EXCEPTION 'a dependency id is NULL' USING ERRCODE = '22004';
        END IF;
        SELECT x INTO bad FROM unnest(p_after) x WHERE x < 1 LIMIT 1;
        IF bad IS NOT NULL THEN
            RAISE EXCEPTION 'dependency id % is not a job id', bad USING ERRCODE = '22023';
        END IF;
        IF cardinality(p_after) > 1000 THEN
            RAISE EXCEPTION 'a job may wait for at most 1000 jobs, not %', cardinality(p_after)
                USING ERRCODE = '22023';
        END IF;
    END IF;
    IF p_group = '' OR octet_length(p_group) > 128 THEN
        RAISE EXCEPTION 'the group name must be 1 to 128 bytes' USING ERRCODE = '22023';
    END IF;
    SELECT * INTO st FROM @S@.queue_settings;
    SELECT u.i, octet_length(u.p) INTO big, n
      FROM unnest(p_payloads) WITH ORDINALITY AS u(p, i)
     WHERE octet_length(u.p) > st.max_payload_bytes OR u.p IS NULL
     ORDER BY u.i LIMIT 1;
    IF big IS NOT NULL THEN
        IF n IS NULL THEN
            RAISE EXCEPTION 'payload % is NULL', big USING ERRCODE = '22004', COLUMN = big::text;
        END IF;
        RAISE EXCEPTION 'payload % is % bytes, over the limit of % bytes', big, n, st.max_payload_bytes
            USING ERRCODE = '22023', COLUMN = big::text,
                  HINT = 'the limit is queue_settings.max_payload_bytes (pgcoord queue config)';
    END IF;
    IF p_after IS NOT NULL AND cardinality(p_after) > 0 THEN
        deps := ARRAY(SELECT DISTINCT x FROM unnest(p_after) x ORDER BY x);
        -- The live ones, locked in id order until commit: a completion waits for this
        -- transaction and then sees its edges. The ones it did not find ended before the lock
        -- (this statement's wait) or never were: the next statements see their history rows.
        live := ARRAY(SELECT j.id FROM @S@.jobs j WHERE j.id = ANY (deps) ORDER BY j.id FOR KEY SHARE);
        UPDATE @S@.jobs j SET has_dependents = true WHERE j.id = ANY (live) AND NOT j.has_dependents;
        SELECT x INTO miss FROM unnest(deps) x
         WHERE x <> ALL (live) AND NOT EXISTS (SELECT 1 FROM @S@.job_history h WHERE h.id = x)
         ORDER BY x LIMIT 1;
        IF miss IS NOT NULL THEN
            RAISE EXCEPTION 'no job with id % to wait for (never enqueued, or finished and no longer in the history)',
                miss USING ERRCODE = 'P0002';
        END IF;
        SELECT h.id, h.status INTO ended_id, ended_st FROM @S@.job_history h
         WHERE h.id = ANY (deps) AND h.id <> ALL (live) AND h.status <> 'succeeded'
         ORDER BY h.id LIMIT 1;
        IF ended_id IS NOT NULL AND NOT coalesce(p_run_anyway, false) THEN
            doom := 'dependency ' || ended_id
                    || CASE WHEN ended_st = 'failed' THEN ' failed' ELSE ' was cancelled' END;
        END IF;
    END IF;
    IF p_group IS NOT NULL THEN
        SELECT * INTO gr FROM @S@.job_groups g WHERE g.name = p_group FOR NO KEY UPDATE;
        IF NOT FOUND THEN
            RAISE EXCEPTION 'no job group named "%"', p_group USING ERRCODE = 'P0002';
        END IF;
        IF gr.sealed THEN
            RAISE EXCEPTION 'job group "%" is closed: it takes no more jobs', p_group
                USING ERRCODE = '55000';
        END IF;
    END IF;
    INSERT INTO @S@.queues (name) VALUES (p_queue) ON CONFLICT DO NOTHING;
    BEGIN
        WITH input AS MATERIALIZED (
            SELECT u.i, nextval(st.job_seq) AS id, u.p::jsonb AS payload,
                   CASE WHEN p_unique_keys IS NULL THEN NULL ELSE p_unique_keys[u.i] END AS ukey
              FROM unnest(p_payloads) WITH ORDINALITY AS u(p, i)
        ), ins AS (
            INSERT INTO @S@.jobs AS j (id, queue, status, priority, eff_priority, run_at,
                                            max_attempts, max_deferrals, unique_key, payload, key,
                                            has_dependents)
            SELECT input.id, p_queue,
                   CASE WHEN cardinality(live) > 0 AND doom IS NULL THEN 'waiting'
                        WHEN p_run_at > clock_timestamp() THEN 'scheduled' ELSE 'pending' END,
                   coalesce(p_priority, 0), coalesce(p_priority, 0),
                   coalesce(p_run_at, clock_timestamp()), coalesce(p_max_attempts, 25),
                   coalesce(p_max_deferrals, 100), input.ukey, input.payload, p_key,
                   p_group IS NOT NULL
              FROM input ORDER BY input.i
            ON CONFLICT (queue, unique_key) WHERE unique_key IS NOT NULL DO NOTHING
            RETURNING j.id
        )
        SELECT array_agg(input.i ORDER BY input.i), array_agg(ins.id ORDER BY input.i) INTO ords, ids
          FROM input LEFT JOIN ins ON ins.id = input.id;
    EXCEPTION WHEN invalid_text_representation OR untranslatable_character THEN
        -- Find the first bad payload to name it; this runs only on failure.
        FOR bad IN SELECT generate_subscripts(p_payloads, 1) LOOP
            BEGIN
                PERFORM p_payloads[bad]::jsonb;
            EXCEPTION WHEN invalid_text_representation OR untranslatable_character THEN
                GET STACKED DIAGNOSTICS why = PG_EXCEPTION_DETAIL;
                RAISE EXCEPTION 'payload % is not valid JSON: %', bad, SQLERRM
                    USING ERRCODE = '22P02', COLUMN = bad::text, DETAIL = why;
            END;
        END LOOP;
        RAISE;
    END;
    IF p_group IS NOT NULL THEN
        INSERT INTO @S@.job_group_jobs (job, grp)
        SELECT x, p_group FROM unnest(ids) x WHERE x IS NOT NULL;
        GET DIAGNOSTICS n = ROW_COUNT;
        UPDATE @S@.job_groups g SET members = g.members + n WHERE g.name = p_group;
    END IF;
    IF doom IS NOT NULL THEN
        -- A dependency has already failed or been cancelled: the jobs end at once.
        WITH gone AS (DELETE FROM @S@.jobs j WHERE j.id = ANY (ids) RETURNING j)
        INSERT INTO @S@.job_history
        SELECT h.* FROM gone g, @S@.job_history_row(g.j, 'cancelled', doom, (g.j).errors,
                                             (g.j).exit_status, (g.j).output) h
         ORDER BY h.id;
    ELSIF cardinality(live) > 0 THEN
        INSERT INTO @S@.job_deps (dep, job, run_anyway)
        SELECT d, x, coalesce(p_run_anyway, false) FROM unnest(ids) x, unnest(live) d
         WHERE x IS NOT NULL ORDER BY d, x;
    END IF;
    -- Wake one worker with free slots for this queue (workers register their own channel),
    -- the same one for every call of a transaction; everyone only when none is known.
    SELECT w.channel INTO target FROM @S@.workers w
     WHERE p_queue = ANY (w.queues) AND w.free > 0
       AND w.seen_at > clock_timestamp() - interval '10 seconds'
     ORDER BY hashtext(w.channel || txid_current()::text) LIMIT 1;
    PERFORM pg_notify(coalesce(target, st.channel), p_queue);
    RETURN QUERY SELECT u.o, u.i FROM unnest(ords, ids) AS u(o, i);
END
$pgc$;

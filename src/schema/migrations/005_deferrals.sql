-- 005_deferrals: a bound on "try later".
-- The schema placeholder is replaced by the quoted schema name.
--
-- A handler that answers "not now" (the worker's exit 75, pgc_queue_retry_later) gives its
-- attempt back, so a job that always answers so would come back for ever. Each job now counts
-- its deferrals against its own max_deferrals (default 100, like max_attempts set at enqueue);
-- the deferral past the limit moves it to job_history as failed, with the reason in
-- last_error. The history keeps both figures, so that a dead letter shows why. A retry from the
-- history starts the count again.

ALTER TABLE @S@.jobs
    ADD COLUMN deferrals     integer NOT NULL DEFAULT 0   CHECK (deferrals >= 0),
    ADD COLUMN max_deferrals integer NOT NULL DEFAULT 100 CHECK (max_deferrals >= 0);
ALTER TABLE @S@.job_history
    ADD COLUMN deferrals     integer NOT NULL DEFAULT 0,
    ADD COLUMN max_deferrals integer NOT NULL DEFAULT 100;

-- Worker roles granted before this migration (pgcoord init --worker-role) may update the
-- attempts of a job: they may now count its deferrals too. The names come from the catalog.
DO $pgc$
DECLARE
    r record;
BEGIN
    FOR r IN SELECT DISTINCT a.grantee::regrole AS role, c.oid::regclass AS rel
               FROM @S@.queue_settings s
               JOIN pg_catalog.pg_class qs ON qs.oid = s.tableoid
               JOIN pg_catalog.pg_class c ON c.relnamespace = qs.relnamespace AND c.relname = 'jobs'
               JOIN pg_catalog.pg_attribute att ON att.attrelid = c.oid AND att.attname = 'attempts'
               CROSS JOIN LATERAL pg_catalog.aclexplode(att.attacl) a
              WHERE a.privilege_type = 'UPDATE' AND a.grantee <> 0
    LOOP
        EXECUTE format('GRANT UPDATE (deferrals) ON %s TO %s', r.rel, r.role);
    END LOOP;
END
$pgc$;

-- enqueue takes max_deferrals last (NULL: 100); callers of the six-argument form are
-- unchanged.
DROP FUNCTION @S@.enqueue(text, text[], text[], integer, timestamptz, integer);

-- Enqueues one job per element of payloads (JSON text), all or nothing, in the caller's
-- transaction. unique_keys may be NULL, or hold NULL or a key per job: a job whose key is taken
-- by a pending or running job of the queue is skipped, and its id comes back NULL. Returns one
-- row per input element, in order. Sends one notification per transaction (duplicates of a
-- notification in one transaction are folded by the server).
CREATE FUNCTION @S@.enqueue(p_queue text, p_payloads text[], p_unique_keys text[],
                                 p_priority integer, p_run_at timestamptz,
                                 p_max_attempts integer, p_max_deferrals integer DEFAULT NULL)
RETURNS TABLE (ord bigint, id bigint) LANGUAGE plpgsql AS $pgc$
DECLARE
    st @S@.queue_settings;
    bad bigint;
    why text;
    big bigint;
    n integer;
    target text;
BEGIN
    IF p_queue IS NULL OR p_queue = '' THEN
        RAISE EXCEPTION 'queue name is empty' USING ERRCODE = '22023';
    END IF;
    IF octet_length(p_queue) > 128 THEN
        RAISE EXCEPTION 'queue name is longer than 128 bytes' USING ERRCODE = '22023';
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
    INSERT INTO @S@.queues (name) VALUES (p_queue) ON CONFLICT DO NOTHING;
    BEGIN
        RETURN QUERY
        WITH input AS MATERIALIZED (
            SELECT u.i, nextval(st.job_seq) AS id, u.p::jsonb AS payload,
                   CASE WHEN p_unique_keys IS NULL THEN NULL ELSE p_unique_keys[u.i] END AS ukey
              FROM unnest(p_payloads) WITH ORDINALITY AS u(p, i)
        ), ins AS (
            INSERT INTO @S@.jobs AS j (id, queue, status, priority, eff_priority, run_at,
                                            max_attempts, max_deferrals, unique_key, payload)
            SELECT input.id, p_queue,
                   CASE WHEN p_run_at > clock_timestamp() THEN 'scheduled' ELSE 'pending' END,
                   coalesce(p_priority, 0), coalesce(p_priority, 0),
                   coalesce(p_run_at, clock_timestamp()), coalesce(p_max_attempts, 25),
                   coalesce(p_max_deferrals, 100), input.ukey, input.payload
              FROM input ORDER BY input.i
            ON CONFLICT (queue, unique_key) WHERE unique_key IS NOT NULL DO NOTHING
            RETURNING j.id
        )
        SELECT input.i, ins.id FROM input LEFT JOIN ins ON ins.id = input.id ORDER BY input.i;
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
    -- Wake one worker with free slots for this queue (workers register their own channel),
    -- the same one for every call of a transaction; everyone only when none is known.
    SELECT w.channel INTO target FROM @S@.workers w
     WHERE p_queue = ANY (w.queues) AND w.free > 0
       AND w.seen_at > clock_timestamp() - interval '10 seconds'
     ORDER BY hashtext(w.channel || txid_current()::text) LIMIT 1;
    PERFORM pg_notify(coalesce(target, st.channel), p_queue);
END
$pgc$;

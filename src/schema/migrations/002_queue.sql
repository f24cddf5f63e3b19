-- 002_queue: the job queue.
-- The schema placeholder is replaced by the quoted schema name.
--
-- Layout for speed and for vacuum:
--  * jobs holds only live work (scheduled, pending and running). Finished jobs leave it at once: a
--    completion is a DELETE whose row goes to job_history, so the claim index only ever covers
--    the pending set, however many jobs have run.
--  * A job whose run_at is in the future is 'scheduled', outside the claim index, so that
--    thousands of jobs for tomorrow never lengthen a claim's index scan; a claim first promotes
--    the due ones of its queue to 'pending' (index jobs_scheduled).
--  * The claim index (queue, eff_priority DESC, run_at, id) WHERE status = 'pending' is the
--    only path a claim takes. eff_priority is the user's priority, raised to 32768 by the
--    reaper once a job has waited longer than queue_settings.aging: aged jobs go first, oldest
--    first, and the claim keeps its single index probe.
--  * lease_until and token are in no index, so a heartbeat is a HOT update (fillfactor 80).
--  * job_history is insert-only and trimmed by the reaper after the retention settings.

CREATE TABLE @S@.queue_settings (
    one                 boolean     PRIMARY KEY DEFAULT true CHECK (one),
    channel             text        NOT NULL DEFAULT '',
    job_seq             regclass,
    token_seq           regclass,
    aging               interval    NOT NULL DEFAULT '5 minutes' CHECK (aging > '0'),
    succeeded_retention interval    NOT NULL DEFAULT '1 day' CHECK (succeeded_retention >= '0'),
    failed_retention    interval    NOT NULL DEFAULT '7 days' CHECK (failed_retention >= '0'),
    max_payload_bytes   integer     NOT NULL DEFAULT 1048576 CHECK (max_payload_bytes > 0)
);
COMMENT ON TABLE @S@.queue_settings IS
    'pgcoord: queue settings (one row): aging of low priorities, history retention, payload limit';

CREATE SEQUENCE @S@.job_id_seq;
CREATE SEQUENCE @S@.claim_token_seq CACHE 64;

INSERT INTO @S@.queue_settings DEFAULT VALUES;
-- The notification channel and the sequences are found through the catalog from the row's own
-- table, so that no name is pasted into a string here.
UPDATE @S@.queue_settings s
   SET channel = left(n.nspname, 50) || '.queue',
       job_seq = (SELECT q.oid FROM pg_catalog.pg_class q
                   WHERE q.relnamespace = c.relnamespace AND q.relname = 'job_id_seq'),
       token_seq = (SELECT q.oid FROM pg_catalog.pg_class q
                     WHERE q.relnamespace = c.relnamespace AND q.relname = 'claim_token_seq')
  FROM pg_catalog.pg_class c JOIN pg_catalog.pg_namespace n ON n.oid = c.relnamespace
 WHERE c.oid = s.tableoid;

CREATE TABLE @S@.queues (
    name       text        PRIMARY KEY CHECK (name <> '' AND octet_length(name) <= 128),
    paused     boolean     NOT NULL DEFAULT false,
    created_at timestamptz NOT NULL DEFAULT clock_timestamp()
);
COMMENT ON TABLE @S@.queues IS 'pgcoord: the queues that have seen a job, and their pause flag';

-- Running workers that LISTEN, each on its own channel, with their free slots (refreshed about
-- once a second), so that an enqueue wakes one worker rather than all of them. Unlogged: it
-- only describes the present.
CREATE UNLOGGED TABLE @S@.workers (
    channel    text        PRIMARY KEY,
    queues     text[]      NOT NULL,
    free       integer     NOT NULL DEFAULT 0,
    seen_at    timestamptz NOT NULL DEFAULT clock_timestamp()
);
COMMENT ON TABLE @S@.workers IS 'pgcoord: listening workers, for targeted wake-ups';

CREATE TABLE @S@.jobs (
    id           bigint      PRIMARY KEY,
    queue        text        NOT NULL,
    status       text        NOT NULL DEFAULT 'pending'
                             CHECK (status IN ('scheduled', 'pending', 'running')),
    priority     integer     NOT NULL DEFAULT 0 CHECK (priority BETWEEN -32768 AND 32767),
    eff_priority integer     NOT NULL DEFAULT 0,
    run_at       timestamptz NOT NULL DEFAULT clock_timestamp(),
    attempts     integer     NOT NULL DEFAULT 0 CHECK (attempts >= 0),
    max_attempts integer     NOT NULL DEFAULT 25 CHECK (max_attempts > 0),
    lease_until  timestamptz,
    token        bigint,
    worker       text,
    last_error   text,
    errors       jsonb,
    unique_key   text,
    created_at   timestamptz NOT NULL DEFAULT clock_timestamp(),
    started_at   timestamptz,
    payload      jsonb       NOT NULL
) WITH (fillfactor = 80, autovacuum_vacuum_scale_factor = 0.01,
        autovacuum_vacuum_threshold = 1000, autovacuum_vacuum_cost_delay = 0,
        autovacuum_vacuum_insert_scale_factor = 0.05);
COMMENT ON TABLE @S@.jobs IS 'pgcoord: live jobs (pending and running); finished ones move to job_history';

CREATE INDEX jobs_claim ON @S@.jobs (queue, eff_priority DESC, run_at, id)
    WHERE status = 'pending';
CREATE INDEX jobs_waiting ON @S@.jobs (queue, run_at) WHERE status = 'pending';
CREATE INDEX jobs_scheduled ON @S@.jobs (queue, run_at) WHERE status = 'scheduled';
CREATE INDEX jobs_running ON @S@.jobs (queue) WHERE status = 'running';
CREATE UNIQUE INDEX jobs_unique ON @S@.jobs (queue, unique_key) WHERE unique_key IS NOT NULL;

CREATE TABLE @S@.job_history (
    id           bigint      PRIMARY KEY,
    queue        text        NOT NULL,
    status       text        NOT NULL CHECK (status IN ('succeeded', 'failed', 'cancelled')),
    priority     integer     NOT NULL,
    run_at       timestamptz NOT NULL,
    attempts     integer     NOT NULL,
    max_attempts integer     NOT NULL,
    worker       text,
    last_error   text,
    errors       jsonb,
    unique_key   text,
    created_at   timestamptz NOT NULL,
    started_at   timestamptz,
    finished_at  timestamptz NOT NULL DEFAULT clock_timestamp(),
    payload      jsonb       NOT NULL
) WITH (autovacuum_vacuum_cost_delay = 0);
COMMENT ON TABLE @S@.job_history IS
    'pgcoord: finished jobs (succeeded, failed = dead letter, cancelled), kept for the retention settings';
CREATE INDEX job_history_queue ON @S@.job_history (queue, status, finished_at);

-- Appends one error to a job's short error history (the last 5).
CREATE FUNCTION @S@.push_error(errors jsonb, attempt integer, message text)
RETURNS jsonb LANGUAGE sql IMMUTABLE AS $pgc$
    SELECT coalesce(jsonb_agg(e ORDER BY n), '[]'::jsonb)
      FROM jsonb_array_elements(coalesce(errors, '[]'::jsonb)
                                || jsonb_build_array(jsonb_build_object('attempt', attempt,
                                                                        'error', message)))
           WITH ORDINALITY AS t(e, n)
     WHERE n > jsonb_array_length(coalesce(errors, '[]'::jsonb)) + 1 - 5
$pgc$;

-- Enqueues one job per element of payloads (JSON text), all or nothing, in the caller's
-- transaction. unique_keys may be NULL, or hold NULL or a key per job: a job whose key is taken
-- by a pending or running job of the queue is skipped, and its id comes back NULL. Returns one
-- row per input element, in order. Sends one notification per transaction (duplicates of a
-- notification in one transaction are folded by the server).
CREATE FUNCTION @S@.enqueue(p_queue text, p_payloads text[], p_unique_keys text[],
                                 p_priority integer, p_run_at timestamptz,
                                 p_max_attempts integer)
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
                                            max_attempts, unique_key, payload)
            SELECT input.id, p_queue,
                   CASE WHEN p_run_at > clock_timestamp() THEN 'scheduled' ELSE 'pending' END,
                   coalesce(p_priority, 0), coalesce(p_priority, 0),
                   coalesce(p_run_at, clock_timestamp()), coalesce(p_max_attempts, 25),
                   input.ukey, input.payload
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

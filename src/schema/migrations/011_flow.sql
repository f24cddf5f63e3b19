-- 011_flow: flow control in the claim path: concurrency keys, rate limits, fair shares.
-- The schema placeholder is replaced by the quoted schema name.
--
-- A job may carry a key (a tenant, a customer, an API account). A queue with keyed jobs or
-- with flow settings is a flow queue (queues.flow): its claims go through claim_flow()
-- below, and the plain claim statement leaves it alone. Queues without flow keep the plain
-- claim and its single probe of the claim index, which now covers unkeyed jobs only.
--
-- job_keys has one row per key of a queue with live jobs (or with settings of its own):
--  * running is an upper bound of the key's running jobs, exact whenever no ended run is
--    waiting to be folded. Only a claim raises it, holding the row lock, by what it claims;
--    each statement that ends a keyed job's run (complete, fail, defer, release, the reaper)
--    adds a row to job_key_done in the same statement, which takes no lock, so that
--    completions never wait for each other nor for claims and cannot deadlock. The next
--    claim of the key (under its row lock) or the reaper folds those rows into running; a
--    row is deleted, and counted, once. So running never falls below the truth, and a claim
--    that takes at most lim - running jobs can never exceed the limit, whatever interleaving
--    of claims, expiries, reaps and completions. A run ended by some other statement (a DELETE
--    by hand) leaves the bound high: the reaper recounts the keys, the least recently claimed
--    first, and puts such a bound right. (No trigger does this: an AFTER trigger on jobs makes
--    every claim and completion of every queue fetch each row once more.)
--  * job_keys_open indexes the keys with room by that bound: a saturated key is not in it,
--    and costs a claim nothing, however long its backlog.
--  * rate_next is the key's theoretical arrival time (GCRA): starts are spaced rate_ms /
--    rate_n apart, with a tolerance of 5% of rate_ms for bursts.
--  * vtime is the key's virtual time for fair shares: each claimed job adds 1 / weight.
-- A guard trigger refuses any claim that would raise running above the limit.

ALTER TABLE @S@.jobs ADD COLUMN key text
    CONSTRAINT jobs_key_check CHECK (key <> '' AND octet_length(key) <= 128);
ALTER TABLE @S@.job_history ADD COLUMN key text;

ALTER TABLE @S@.queues
    ADD COLUMN flow        boolean NOT NULL DEFAULT false,
    ADD COLUMN key_limit   integer CHECK (key_limit > 0),
    ADD COLUMN rate_n      integer CHECK (rate_n > 0),
    ADD COLUMN rate_ms     bigint  CHECK (rate_ms > 0),
    ADD COLUMN key_rate_n  integer CHECK (key_rate_n > 0),
    ADD COLUMN key_rate_ms bigint  CHECK (key_rate_ms > 0),
    ADD COLUMN fair        boolean NOT NULL DEFAULT false,
    ADD COLUMN rate_next   timestamptz,
    ADD COLUMN nokey_vtime float8  NOT NULL DEFAULT 0,
    ADD CONSTRAINT queues_rate_check CHECK ((rate_n IS NULL) = (rate_ms IS NULL)),
    ADD CONSTRAINT queues_key_rate_check CHECK ((key_rate_n IS NULL) = (key_rate_ms IS NULL));

CREATE TABLE @S@.job_keys (
    queue       text        NOT NULL,
    key         text        NOT NULL CHECK (key <> '' AND octet_length(key) <= 128),
    running     integer     NOT NULL DEFAULT 0 CHECK (running >= 0),
    lim         integer     CHECK (lim > 0),
    max_running integer     CHECK (max_running > 0),
    weight      integer     CHECK (weight BETWEEN 1 AND 10000),
    rate_n      integer     CHECK (rate_n > 0),
    rate_ms     bigint      CHECK (rate_ms > 0),
    rate_next   timestamptz,
    vtime       float8      NOT NULL DEFAULT 0,
    claimed_at  timestamptz,
    created_at  timestamptz NOT NULL DEFAULT clock_timestamp(),
    PRIMARY KEY (queue, key),
    CHECK ((rate_n IS NULL) = (rate_ms IS NULL))
) WITH (fillfactor = 70, autovacuum_vacuum_scale_factor = 0.01, autovacuum_vacuum_cost_delay = 0);
COMMENT ON TABLE @S@.job_keys IS
    'pgcoord: concurrency keys per queue: running bound, limit in force, overrides, rate and fair-share state';
COMMENT ON COLUMN @S@.job_keys.lim IS 'the limit in force: max_running, else the queue''s key_limit; NULL: none';
CREATE INDEX job_keys_open ON @S@.job_keys (queue, vtime, key) WHERE lim IS NULL OR running < lim;

-- Jobs of a key that stopped running, not yet folded into job_keys.running.
CREATE TABLE @S@.job_key_done (
    queue text NOT NULL,
    key   text NOT NULL
) WITH (autovacuum_vacuum_scale_factor = 0.01, autovacuum_vacuum_cost_delay = 0);
CREATE INDEX job_key_done_key ON @S@.job_key_done (queue, key);

-- The claim index covers unkeyed jobs only; keyed ones are found key by key.
DROP INDEX @S@.jobs_claim;
CREATE INDEX jobs_claim ON @S@.jobs (queue, eff_priority DESC, run_at, id)
    WHERE status = 'pending' AND key IS NULL;
CREATE INDEX jobs_claim_key ON @S@.jobs (queue, key, eff_priority DESC, run_at, id)
    WHERE status = 'pending' AND key IS NOT NULL;
CREATE INDEX jobs_running_key ON @S@.jobs (queue, key) WHERE status = 'running' AND key IS NOT NULL;
-- With the two above, whether a key has live jobs is four index probes (job_keys_tidy()),
-- never a scan of the jobs. A job waiting for its dependencies (migration 012) keeps its key's
-- row too: it becomes pending by an UPDATE, which creates no key row.
CREATE INDEX jobs_scheduled_key ON @S@.jobs (queue, key) WHERE status = 'scheduled' AND key IS NOT NULL;
CREATE INDEX jobs_waiting_key ON @S@.jobs (queue, key) WHERE status = 'waiting' AND key IS NOT NULL;
-- The oldest runnable job's age (queue stats, the dashboard) takes one probe per index: aged
-- unkeyed jobs are in run_at order inside jobs_claim, aged keyed ones are here (only jobs that
-- have waited long enough to age pay for it).
CREATE INDEX jobs_aged_key ON @S@.jobs (queue, run_at)
    WHERE status = 'pending' AND eff_priority = 32768 AND key IS NOT NULL;

-- A keyed job needs its key's row, held with FOR KEY SHARE until the job's transaction ends
-- so that the reaper's clean-up (FOR UPDATE) cannot delete it under the job; the lock does not
-- conflict with the FOR NO KEY UPDATE of claims. New keys start at the smallest virtual time
-- of the keys with room, so they neither wait for old ones nor take their turns.
CREATE FUNCTION @S@.job_key_hold() RETURNS trigger LANGUAGE plpgsql AS $pgc$
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
CREATE TRIGGER jobs_key_hold BEFORE INSERT ON @S@.jobs
    FOR EACH ROW WHEN (NEW.key IS NOT NULL) EXECUTE FUNCTION @S@.job_key_hold();

-- The guard: no claim raises a key's running jobs above its limit.
CREATE FUNCTION @S@.job_key_guard() RETURNS trigger LANGUAGE plpgsql AS $pgc$
BEGIN
    RAISE EXCEPTION 'key "%" of queue "%" would run % jobs, over its limit of %', NEW.key,
        NEW.queue, NEW.running, NEW.lim USING ERRCODE = '23514';
END
$pgc$;
CREATE TRIGGER job_keys_guard BEFORE UPDATE OF running ON @S@.job_keys
    FOR EACH ROW WHEN (NEW.running > OLD.running AND NEW.running > NEW.lim)
    EXECUTE FUNCTION @S@.job_key_guard();

-- Claims up to p_max jobs of a flow queue: keyed jobs within their keys' limits and rates,
-- unkeyed ones, all within the queue's rate. Fair queues take keys in order of virtual time
-- (ties by the head job's priority); others take the highest priority heads first, as the
-- plain claim does. Within a key, jobs go by effective priority, then run_at, then id.
-- Returns nothing for a queue that is not a flow queue or is paused.
CREATE FUNCTION @S@.claim_flow(p_queue text, p_max integer, p_lease_ms bigint, p_worker text)
RETURNS TABLE (id bigint, token bigint, attempts integer, max_attempts integer,
               priority integer, payload jsonb, key text)
LANGUAGE plpgsql AS $pgc$
DECLARE
    q @S@.queues;
    t0 timestamptz;
    allow integer := p_max;
    qt float8;
    qbase timestamptz;
    tseq regclass;
    vmin float8;
    ckeys text[];
BEGIN
    SELECT * INTO q FROM @S@.queues s WHERE s.name = p_queue AND s.flow AND NOT s.paused;
    IF NOT FOUND OR p_max IS NULL OR p_max < 1 THEN
        RETURN;
    END IF;
    IF q.rate_n IS NOT NULL THEN
        -- The queue's rate is kept in its row: its claims take turns on the row lock.
        SELECT * INTO q FROM @S@.queues s WHERE s.name = p_queue AND s.flow AND NOT s.paused
           FOR NO KEY UPDATE;
        IF NOT FOUND THEN
            RETURN;
        END IF;
        t0 := clock_timestamp();
        qt := q.rate_ms::float8 / q.rate_n;
        qbase := greatest(coalesce(q.rate_next, t0), t0);
        allow := least(p_max::float8,
                       floor((q.rate_ms * 0.05 - extract(epoch FROM qbase - t0) * 1000) / qt) + 1)::int;
        IF allow < 1 THEN
            RETURN;
        END IF;
    END IF;
    t0 := clock_timestamp();
    SELECT s.token_seq INTO tseq FROM @S@.queue_settings s;
    IF q.fair THEN
        -- Unkeyed jobs take their turn from the keys' virtual time, not from when they last ran.
        SELECT k.vtime INTO vmin FROM @S@.job_keys k
         WHERE k.queue = p_queue AND (k.lim IS NULL OR k.running < k.lim) ORDER BY k.vtime LIMIT 1;
    END IF;
    -- The keys to try, in the order they are to be served: saturated keys whose ended jobs
    -- are not folded yet, and those with room in order of virtual time (the least served
    -- first; the index holds no saturated key, so this walk never meets one), each with its
    -- head job; then by virtual time (fair) or by the head's priority. The walk stops at
    -- twice the jobs wanted, the keys to fold included, and never below the jobs wanted: a
    -- claim that competes with another for the same keys still finds enough of them.
    WITH led AS MATERIALIZED (
        SELECT k.key, k.vtime, h.eff_priority, h.run_at, h.id
          FROM (SELECT DISTINCT x.key FROM @S@.job_key_done x WHERE x.queue = p_queue LIMIT 1000) d
          JOIN @S@.job_keys k ON k.queue = p_queue AND k.key = d.key
         CROSS JOIN LATERAL (
               SELECT j.eff_priority, j.run_at, j.id FROM @S@.jobs j
                WHERE j.queue = p_queue AND j.key = d.key AND j.status = 'pending' AND j.run_at <= t0
                ORDER BY j.eff_priority DESC, j.run_at, j.id LIMIT 1) h
    )
    SELECT array_agg(c.key ORDER BY CASE WHEN q.fair THEN c.vtime END, c.eff_priority DESC, c.run_at, c.id)
      INTO ckeys
      FROM (SELECT w.* FROM (
                SELECT k.key, k.vtime, h.eff_priority, h.run_at, h.id FROM @S@.job_keys k
                 CROSS JOIN LATERAL (
                       SELECT j.eff_priority, j.run_at, j.id FROM @S@.jobs j
                        WHERE j.queue = p_queue AND j.key = k.key AND j.status = 'pending'
                          AND j.run_at <= t0
                        ORDER BY j.eff_priority DESC, j.run_at, j.id LIMIT 1) h
                 WHERE k.queue = p_queue AND (k.lim IS NULL OR k.running < k.lim)
                   AND (coalesce(k.rate_n, q.key_rate_n) IS NULL OR k.rate_next IS NULL
                        OR k.rate_next <= t0 + coalesce(k.rate_ms, q.key_rate_ms) * 0.05
                                               * interval '1 millisecond')
                 ORDER BY k.vtime, k.key
                 LIMIT greatest(allow * 2 - (SELECT count(*) FROM led), allow, 16)) w
            UNION
            SELECT * FROM led) c;
    RETURN QUERY
    WITH pick AS MATERIALIZED (
        SELECT k.key, k.running, k.lim, k.vtime, coalesce(k.weight, 1) AS w,
               coalesce(k.rate_n, q.key_rate_n) AS rn, coalesce(k.rate_ms, q.key_rate_ms) AS rms,
               k.rate_next
          FROM unnest(ckeys) WITH ORDINALITY AS c(key, ord)
          JOIN @S@.job_keys k ON k.queue = p_queue AND k.key = c.key
         WHERE (coalesce(k.rate_n, q.key_rate_n) IS NULL OR k.rate_next IS NULL
                OR k.rate_next <= t0 + coalesce(k.rate_ms, q.key_rate_ms) * 0.05 * interval '1 millisecond')
           AND (k.lim IS NULL OR k.running < k.lim
                OR EXISTS (SELECT 1 FROM @S@.job_key_done d WHERE d.queue = p_queue AND d.key = k.key))
         ORDER BY c.ord
         LIMIT allow
         FOR NO KEY UPDATE OF k SKIP LOCKED
    ), fold AS (
        DELETE FROM @S@.job_key_done d
         WHERE d.queue = p_queue AND d.key = ANY (ARRAY(SELECT p.key FROM pick p)) RETURNING d.key
    ), fsum AS MATERIALIZED (
        -- Per-key counts go through arrays: the planner, with no estimate for a CTE, joins
        -- two of them as a nested loop, which is quadratic in the keys of the claim.
        SELECT array_agg(f.key) AS ks, array_agg(f.n) AS ns
          FROM (SELECT x.key, count(*)::int AS n FROM fold x GROUP BY x.key) f
    ), kcap AS MATERIALIZED (
        SELECT p.*,
               least(allow,
                     CASE WHEN p.lim IS NULL THEN allow ELSE p.lim - (p.running - p.folded) END,
                     CASE WHEN p.rn IS NULL THEN allow
                          ELSE floor((p.rms * 0.05 - extract(epoch FROM
                                      greatest(coalesce(p.rate_next, t0), t0) - t0) * 1000)
                                     / (p.rms::float8 / p.rn))::int + 1 END) AS cap
          FROM (SELECT pk.*, coalesce(fs.ns[array_position(fs.ks, pk.key)], 0) AS folded
                  FROM pick pk CROSS JOIN fsum fs) p
    ), kjobs AS MATERIALIZED (
        SELECT x.id, kc.key, x.eff_priority, x.run_at, kc.vtime + (x.i - 1)::float8 / kc.w AS vt
          FROM kcap kc
         CROSS JOIN LATERAL (
               SELECT s.*, row_number() OVER (ORDER BY s.eff_priority DESC, s.run_at, s.id) AS i
                 FROM (SELECT j.id, j.eff_priority, j.run_at FROM @S@.jobs j
                        WHERE j.queue = p_queue AND j.key = kc.key AND j.status = 'pending'
                          AND j.run_at <= t0
                        ORDER BY j.eff_priority DESC, j.run_at, j.id
                        LIMIT greatest(kc.cap, 0) FOR UPDATE OF j SKIP LOCKED) s) x
    ), ujobs AS MATERIALIZED (
        SELECT s.id, NULL::text AS key, s.eff_priority, s.run_at,
               greatest(q.nokey_vtime, coalesce(vmin, 0))
               + (row_number() OVER (ORDER BY s.eff_priority DESC, s.run_at, s.id) - 1)::float8 AS vt
          FROM (SELECT j.id, j.eff_priority, j.run_at FROM @S@.jobs j
                 WHERE j.queue = p_queue AND j.status = 'pending' AND j.key IS NULL AND j.run_at <= t0
                 ORDER BY j.eff_priority DESC, j.run_at, j.id
                 LIMIT allow FOR UPDATE OF j SKIP LOCKED) s
    ), chosen AS MATERIALIZED (
        SELECT a.id, a.key FROM (SELECT * FROM kjobs UNION ALL SELECT * FROM ujobs) a
         ORDER BY CASE WHEN q.fair THEN a.vt END, a.eff_priority DESC, a.run_at, a.id
         LIMIT allow
    ), per_key AS MATERIALIZED (
        SELECT array_agg(s.key) AS ks, array_agg(s.n) AS ns
          FROM (SELECT c.key, count(*)::int AS n FROM chosen c WHERE c.key IS NOT NULL GROUP BY c.key) s
    ), kupd AS (
        UPDATE @S@.job_keys k
           SET running = k.running - kc.folded + coalesce(kc.n, 0),
               vtime = k.vtime + coalesce(kc.n, 0)::float8 / kc.w,
               rate_next = CASE WHEN kc.rn IS NULL OR kc.n IS NULL THEN k.rate_next
                                ELSE greatest(coalesce(k.rate_next, t0), t0)
                                     + kc.n * (kc.rms::float8 / kc.rn) * interval '1 millisecond' END,
               claimed_at = CASE WHEN kc.n IS NULL THEN k.claimed_at ELSE t0 END
          FROM (SELECT c.*, pk.ns[array_position(pk.ks, c.key)] AS n FROM kcap c CROSS JOIN per_key pk) kc
         WHERE k.queue = p_queue AND k.key = kc.key AND (kc.n IS NOT NULL OR kc.folded > 0)
    ), qupd AS (
        UPDATE @S@.queues s
           SET rate_next = CASE WHEN q.rate_n IS NULL THEN s.rate_next
                                ELSE qbase + (SELECT count(*) FROM chosen) * qt * interval '1 millisecond' END,
               nokey_vtime = greatest(s.nokey_vtime, coalesce(vmin, 0))
                             + (SELECT count(*) FROM chosen c WHERE c.key IS NULL)
         WHERE s.name = p_queue
           AND (q.rate_n IS NOT NULL OR (q.fair AND EXISTS (SELECT 1 FROM chosen c WHERE c.key IS NULL)))
           AND EXISTS (SELECT 1 FROM chosen)
    )
    UPDATE @S@.jobs j SET status = 'running', attempts = j.attempts + 1, token = nextval(tseq),
           lease_until = clock_timestamp() + p_lease_ms * interval '1 millisecond',
           worker = p_worker, started_at = clock_timestamp()
     WHERE j.id = ANY (ARRAY(SELECT c.id FROM chosen c))
    RETURNING j.id, j.token, j.attempts, j.max_attempts, j.priority, j.payload, j.key;
END
$pgc$;

-- Folds the stopped jobs of keys that no claim folded, and deletes the rows of keys with no
-- live job and no settings of their own. A volatile function: its second statement sees
-- what committed before it, after the first one locked the rows, so that a job enqueued
-- under a key (which holds the key's row with FOR KEY SHARE) is never left without its row.
CREATE FUNCTION @S@.job_keys_tidy() RETURNS integer LANGUAGE plpgsql AS $pgc$
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

-- enqueue takes a key last (NULL: none); callers of the seven-argument form are unchanged.
DROP FUNCTION @S@.enqueue(text, text[], text[], integer, timestamptz, integer, integer);

-- Enqueues one job per element of payloads (JSON text), all or nothing, in the caller's
-- transaction. unique_keys may be NULL, or hold NULL or a key per job: a job whose key is taken
-- by a pending or running job of the queue is skipped, and its id comes back NULL. p_key, when
-- given, is the concurrency key of every job of the call. Returns one row per input element,
-- in order. Sends one notification per transaction (duplicates of a notification in one
-- transaction are folded by the server).
CREATE FUNCTION @S@.enqueue(p_queue text, p_payloads text[], p_unique_keys text[],
                                 p_priority integer, p_run_at timestamptz,
                                 p_max_attempts integer, p_max_deferrals integer DEFAULT NULL,
                                 p_key text DEFAULT NULL)
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
                                            max_attempts, max_deferrals, unique_key, payload, key)
            SELECT input.id, p_queue,
                   CASE WHEN p_run_at > clock_timestamp() THEN 'scheduled' ELSE 'pending' END,
                   coalesce(p_priority, 0), coalesce(p_priority, 0),
                   coalesce(p_run_at, clock_timestamp()), coalesce(p_max_attempts, 25),
                   coalesce(p_max_deferrals, 100), input.ukey, input.payload, p_key
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

-- Worker roles granted before this migration (pgcoord init --worker-role) can claim from flow
-- queues, fold and tidy keys. The names come from the catalog.
DO $pgc$
DECLARE
    r record;
BEGIN
    FOR r IN SELECT DISTINCT a.grantee::regrole AS role, n.nspname AS nsp
               FROM @S@.queue_settings s
               JOIN pg_catalog.pg_class qs ON qs.oid = s.tableoid
               JOIN pg_catalog.pg_namespace n ON n.oid = qs.relnamespace
               JOIN pg_catalog.pg_class c ON c.relnamespace = qs.relnamespace AND c.relname = 'jobs'
               JOIN pg_catalog.pg_attribute att ON att.attrelid = c.oid AND att.attname = 'attempts'
               CROSS JOIN LATERAL pg_catalog.aclexplode(att.attacl) a
              WHERE a.privilege_type = 'UPDATE' AND a.grantee <> 0
    LOOP
        EXECUTE format('GRANT SELECT, UPDATE, DELETE ON %I.job_keys TO %s', r.nsp, r.role);
        EXECUTE format('GRANT SELECT, INSERT, DELETE ON %I.job_key_done TO %s', r.nsp, r.role);
        EXECUTE format('GRANT UPDATE (rate_next, nokey_vtime) ON %I.queues TO %s', r.nsp, r.role);
    END LOOP;
END
$pgc$;

-- 012_deps: job dependencies and groups.
-- The schema placeholder is replaced by the quoted schema name.
--
-- A job may wait for other jobs to succeed (enqueue's p_after). While one of them is live it
-- is 'waiting': outside every claim index, so it is never claimed. job_deps holds one row per
-- unresolved edge (dependency, dependent). A job may also belong to a group (job_groups): when
-- the group is closed and each member has finished, one job is enqueued into the group's
-- on-complete queue with the counts.
--
-- Resolution happens in the transaction of the dependency's (or member's) final transition,
-- whatever statement made it: every way a job ends writes its job_history row, and a job that
-- someone waits for (a dependent, a group) carries has_dependents, copied into that row. So
-- the hot path of other jobs pays a false WHEN and nothing else:
--  * job_ends_note, an AFTER INSERT row trigger on job_history WHEN (has_dependents), adds
--    (id, status) to job_ends, which takes no lock;
--  * job_ends_fold, a deferred constraint trigger with the same WHEN, folds job_ends at
--    commit: the first one of a transaction takes every row its transaction added (rows of
--    other transactions are folded before they commit, so none is visible), locks the
--    dependents in id order and then the groups in name order (job rows before group rows,
--    as an enqueue takes them), counts, releases or cancels; the
--    cancellations end more jobs, whose rows it folds in the same loop; the later calls find
--    nothing. Locks in a fixed order after the statements' own: two batches that end members
--    of the same groups, or dependencies of the same jobs, in any order, cannot deadlock.
-- An enqueue with p_after locks the live dependencies' rows (FOR KEY SHARE, in id order) and
-- marks them before writing its edges, so that a concurrent completion either waits for it
-- and then sees the edges, or committed first and the enqueue reads its history row.

ALTER TABLE @S@.jobs DROP CONSTRAINT jobs_status_check,
    ADD CONSTRAINT jobs_status_check CHECK (status IN ('scheduled', 'pending', 'running', 'waiting')),
    ADD COLUMN has_dependents boolean NOT NULL DEFAULT false;
ALTER TABLE @S@.job_history ADD COLUMN has_dependents boolean NOT NULL DEFAULT false;
CREATE INDEX jobs_waiting_deps ON @S@.jobs (queue, id) WHERE status = 'waiting';

-- Unresolved edges: job waits for dep. run_anyway: the dependent's policy when dep fails for
-- good or is cancelled (false: the dependent is cancelled).
CREATE TABLE @S@.job_deps (
    dep        bigint  NOT NULL,
    job        bigint  NOT NULL,
    run_anyway boolean NOT NULL DEFAULT false,
    PRIMARY KEY (dep, job)
) WITH (autovacuum_vacuum_scale_factor = 0.01, autovacuum_vacuum_cost_delay = 0);
CREATE INDEX job_deps_job ON @S@.job_deps (job, dep);
COMMENT ON TABLE @S@.job_deps IS 'pgcoord: unresolved job dependencies (job waits for dep)';

-- Jobs someone waits for that ended in this transaction, not folded yet (see above).
CREATE TABLE @S@.job_ends (
    id     bigint NOT NULL,
    status text   NOT NULL
) WITH (autovacuum_vacuum_scale_factor = 0.01, autovacuum_vacuum_cost_delay = 0);

CREATE TABLE @S@.job_groups (
    name              text        PRIMARY KEY CHECK (name <> '' AND octet_length(name) <= 128),
    on_complete_queue text        NOT NULL CHECK (on_complete_queue <> '' AND octet_length(on_complete_queue) <= 128),
    payload           jsonb       NOT NULL DEFAULT '{}' CHECK (jsonb_typeof(payload) = 'object'),
    members           integer     NOT NULL DEFAULT 0,
    succeeded         integer     NOT NULL DEFAULT 0,
    failed            integer     NOT NULL DEFAULT 0,
    cancelled         integer     NOT NULL DEFAULT 0,
    sealed            boolean     NOT NULL DEFAULT false,
    on_complete_job   bigint,
    created_at        timestamptz NOT NULL DEFAULT clock_timestamp(),
    closed_at         timestamptz,
    done_at           timestamptz
);
COMMENT ON TABLE @S@.job_groups IS
    'pgcoord: job groups: members and how they ended, the on-complete job enqueued once when sealed and done';

-- Members not counted yet; the row goes when its job's end is counted, once.
CREATE TABLE @S@.job_group_jobs (
    job bigint PRIMARY KEY,
    grp text   NOT NULL REFERENCES @S@.job_groups (name)
);
CREATE INDEX job_group_jobs_grp ON @S@.job_group_jobs (grp);

CREATE FUNCTION @S@.job_ends_note() RETURNS trigger LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp AS $pgc$
BEGIN
    INSERT INTO @S@.job_ends (id, status) VALUES (NEW.id, NEW.status);
    RETURN NULL;
END
$pgc$;

-- Enqueues the on-complete job of group g (locked by the caller) when it is sealed, every
-- member has ended and none was enqueued yet. Returns its id, or NULL. It runs as the schema's
-- owner, so that a worker role ending the last member needs no right to enqueue.
CREATE FUNCTION @S@.group_fire(g text) RETURNS bigint LANGUAGE plpgsql SECURITY DEFINER
SET search_path = pg_catalog, pg_temp AS $pgc$
DECLARE
    r @S@.job_groups;
    jid bigint;
BEGIN
    SELECT * INTO r FROM @S@.job_groups WHERE name = g;
    IF NOT FOUND OR NOT r.sealed OR r.on_complete_job IS NOT NULL
       OR r.succeeded + r.failed + r.cancelled < r.members THEN
        RETURN NULL;
    END IF;
    SELECT e.id INTO jid FROM @S@.enqueue(r.on_complete_queue,
        ARRAY[(r.payload || jsonb_build_object('group', jsonb_build_object('name', r.name,
              'succeeded', r.succeeded, 'failed', r.failed, 'cancelled', r.cancelled)))::text],
        NULL, NULL, NULL, NULL) e;
    UPDATE @S@.job_groups SET on_complete_job = jid, done_at = clock_timestamp() WHERE name = g;
    RETURN jid;
END
$pgc$;

CREATE FUNCTION @S@.job_ends_fold() RETURNS trigger LANGUAGE plpgsql
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
                       RETURNING j.*, 'dependency ' || bad.dep
                                      || CASE WHEN bad.st = 'failed' THEN ' failed' ELSE ' was cancelled' END AS why),
             hist AS (INSERT INTO @S@.job_history (id, queue, status, priority, run_at, attempts,
                          max_attempts, worker, last_error, errors, unique_key, created_at, started_at,
                          payload, deferrals, max_deferrals, key, has_dependents)
                      SELECT id, queue, 'cancelled', priority, run_at, attempts, max_attempts, worker,
                             why, errors, unique_key, created_at, started_at, payload, deferrals,
                             max_deferrals, key, has_dependents FROM gone ORDER BY id
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

CREATE TRIGGER job_ends_note AFTER INSERT ON @S@.job_history
    FOR EACH ROW WHEN (NEW.has_dependents) EXECUTE FUNCTION @S@.job_ends_note();
CREATE CONSTRAINT TRIGGER job_ends_fold AFTER INSERT ON @S@.job_history
    DEFERRABLE INITIALLY DEFERRED
    FOR EACH ROW WHEN (NEW.has_dependents) EXECUTE FUNCTION @S@.job_ends_fold();

-- enqueue takes the jobs' dependencies, their policy and their group last (NULL: none);
-- callers of the eight-argument form are unchanged.
DROP FUNCTION @S@.enqueue(text, text[], text[], integer, timestamptz, integer, integer, text);

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
CREATE FUNCTION @S@.enqueue(p_queue text, p_payloads text[], p_unique_keys text[],
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
        WITH gone AS (DELETE FROM @S@.jobs j WHERE j.id = ANY (ids) RETURNING j.*)
        INSERT INTO @S@.job_history (id, queue, status, priority, run_at, attempts, max_attempts,
            worker, last_error, errors, unique_key, created_at, started_at, payload, deferrals,
            max_deferrals, key, has_dependents)
        SELECT g.id, g.queue, 'cancelled', g.priority, g.run_at, g.attempts, g.max_attempts,
               g.worker, doom, g.errors, g.unique_key, g.created_at, g.started_at, g.payload,
               g.deferrals, g.max_deferrals, g.key, g.has_dependents FROM gone g ORDER BY g.id;
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

-- Creates an open job group: when it is closed and each of its members has ended, one job
-- is enqueued into p_queue, its payload p_payload (a JSON object, NULL: {}) with a member
-- "group": {"name", "succeeded", "failed", "cancelled"}. Refuses a name in use (23505).
CREATE FUNCTION @S@.group_add(p_name text, p_queue text, p_payload jsonb DEFAULT NULL)
RETURNS void LANGUAGE plpgsql AS $pgc$
BEGIN
    IF p_name IS NULL OR p_name = '' OR octet_length(p_name) > 128 THEN
        RAISE EXCEPTION 'the group name must be 1 to 128 bytes' USING ERRCODE = '22023';
    END IF;
    IF p_queue IS NULL OR p_queue = '' OR octet_length(p_queue) > 128 THEN
        RAISE EXCEPTION 'the on-complete queue name must be 1 to 128 bytes' USING ERRCODE = '22023';
    END IF;
    IF p_payload IS NOT NULL AND jsonb_typeof(p_payload) <> 'object' THEN
        RAISE EXCEPTION 'the on-complete payload must be a JSON object, not %', jsonb_typeof(p_payload)
            USING ERRCODE = '22023';
    END IF;
    INSERT INTO @S@.job_groups (name, on_complete_queue, payload)
    VALUES (p_name, p_queue, coalesce(p_payload, '{}'));
EXCEPTION WHEN unique_violation THEN
    RAISE EXCEPTION 'a job group named "%" exists already', p_name USING ERRCODE = '23505';
END
$pgc$;

-- Seals a group: it takes no more members. When each member has ended already, the
-- on-complete job is enqueued at once. Returns that job's id, or NULL until the members end.
-- Closing a closed group changes nothing (and returns the job's id when there is one).
CREATE FUNCTION @S@.group_close(p_name text) RETURNS bigint LANGUAGE plpgsql AS $pgc$
DECLARE
    r @S@.job_groups;
BEGIN
    SELECT * INTO r FROM @S@.job_groups WHERE name = p_name FOR NO KEY UPDATE;
    IF NOT FOUND THEN
        RAISE EXCEPTION 'no job group named "%"', p_name USING ERRCODE = 'P0002';
    END IF;
    IF r.sealed THEN
        RETURN r.on_complete_job;
    END IF;
    UPDATE @S@.job_groups SET sealed = true, closed_at = clock_timestamp() WHERE name = p_name;
    RETURN @S@.group_fire(p_name);
END
$pgc$;

-- Removes a group that is done (its on-complete job enqueued) or open with no member left
-- to end; a closed group still waiting for members is refused (55000).
CREATE FUNCTION @S@.group_remove(p_name text) RETURNS void LANGUAGE plpgsql AS $pgc$
DECLARE
    r @S@.job_groups;
    left_ integer;
BEGIN
    SELECT * INTO r FROM @S@.job_groups WHERE name = p_name FOR UPDATE;
    IF NOT FOUND THEN
        RAISE EXCEPTION 'no job group named "%"', p_name USING ERRCODE = 'P0002';
    END IF;
    left_ := r.members - r.succeeded - r.failed - r.cancelled;
    IF r.on_complete_job IS NULL AND (r.sealed OR left_ > 0) THEN
        RAISE EXCEPTION 'job group "%" is % and % of its members have not ended: it cannot be removed',
            p_name, CASE WHEN r.sealed THEN 'closed' ELSE 'open' END, left_ USING ERRCODE = '55000';
    END IF;
    DELETE FROM @S@.job_groups WHERE name = p_name;
END
$pgc$;

-- Worker roles granted before this migration (pgcoord init --worker-role) end jobs that
-- others wait for: they fold the ends, count groups, release and cancel dependents.
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
        EXECUTE format('GRANT SELECT, INSERT, DELETE ON %I.job_ends TO %s', r.nsp, r.role);
        EXECUTE format('GRANT SELECT, DELETE ON %I.job_deps TO %s', r.nsp, r.role);
        EXECUTE format('GRANT SELECT, UPDATE ON %I.job_groups TO %s', r.nsp, r.role);
        EXECUTE format('GRANT SELECT, DELETE ON %I.job_group_jobs TO %s', r.nsp, r.role);
    END LOOP;
END
$pgc$;

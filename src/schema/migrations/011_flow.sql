-- 011_flow: flow control in the claim path: concurrency keys, rate limits, fair shares.
-- The schema placeholder is replaced by the quoted schema name.
--
-- A job may carry a key (a tenant, a customer, an API account). A queue with keyed jobs or
-- with flow settings is a flow queue (queues.flow): its claims go through claim_flow()
-- (src/schema/functions/claim_flow.sql), and the plain claim statement leaves it alone.
-- Queues without flow keep the plain claim and its single probe of the claim index, which now
-- covers unkeyed jobs only.
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

-- enqueue takes a key last (NULL: none); callers of the seven-argument form are unchanged.
DROP FUNCTION IF EXISTS @S@.enqueue(text, text[], text[], integer, timestamptz, integer, integer);

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

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

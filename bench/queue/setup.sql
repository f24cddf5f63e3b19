-- setup.sql - the reference tables for the pgbench scripts (schema pgc_bench_ref):
-- the seed's jobs table with its partial claim index, and the lightest possible queue.
DROP SCHEMA IF EXISTS pgc_bench_ref CASCADE;
CREATE SCHEMA pgc_bench_ref;
CREATE TABLE pgc_bench_ref.jobs (
    id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    queue_name text NOT NULL,
    payload jsonb NOT NULL,
    status text NOT NULL DEFAULT 'pending'
        CHECK (status IN ('pending', 'running', 'succeeded', 'failed')),
    priority integer NOT NULL DEFAULT 0,
    run_at timestamptz NOT NULL DEFAULT clock_timestamp(),
    attempts integer NOT NULL DEFAULT 0,
    max_attempts integer NOT NULL DEFAULT 10,
    locked_at timestamptz,
    locked_by text,
    last_error text,
    created_at timestamptz NOT NULL DEFAULT clock_timestamp(),
    finished_at timestamptz,
    CHECK (attempts >= 0),
    CHECK (max_attempts > 0)
);
CREATE INDEX jobs_claim_idx ON pgc_bench_ref.jobs (queue_name, priority DESC, run_at, id)
    WHERE status = 'pending';
CREATE TABLE pgc_bench_ref.light (id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY, payload jsonb NOT NULL);

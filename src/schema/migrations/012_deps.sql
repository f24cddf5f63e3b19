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

-- enqueue takes the jobs' dependencies, their policy and their group last (NULL: none);
-- callers of the eight-argument form are unchanged.
DROP FUNCTION IF EXISTS @S@.enqueue(text, text[], text[], integer, timestamptz, integer, integer, text);

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

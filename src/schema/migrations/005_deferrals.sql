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
DROP FUNCTION IF EXISTS @S@.enqueue(text, text[], text[], integer, timestamptz, integer);

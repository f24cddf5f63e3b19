-- A job someone waits for (has_dependents) ended: its end is noted in job_ends, which takes
-- no lock, for job_ends_fold() to fold at commit (docs/design/dependencies.md).
CREATE OR REPLACE FUNCTION @S@.job_ends_note() RETURNS trigger LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp AS $pgc$
BEGIN
    INSERT INTO @S@.job_ends (id, status) VALUES (NEW.id, NEW.status);
    RETURN NULL;
END
$pgc$;
DROP TRIGGER IF EXISTS job_ends_note ON @S@.job_history;
CREATE TRIGGER job_ends_note AFTER INSERT ON @S@.job_history
    FOR EACH ROW WHEN (NEW.has_dependents) EXECUTE FUNCTION @S@.job_ends_note();

-- The guard: no claim raises a key's running jobs above its limit.
CREATE OR REPLACE FUNCTION @S@.job_key_guard() RETURNS trigger LANGUAGE plpgsql AS $pgc$
BEGIN
    RAISE EXCEPTION 'key "%" of queue "%" would run % jobs, over its limit of %', NEW.key,
        NEW.queue, NEW.running, NEW.lim USING ERRCODE = '23514';
END
$pgc$;
DROP TRIGGER IF EXISTS job_keys_guard ON @S@.job_keys;
CREATE TRIGGER job_keys_guard BEFORE UPDATE OF running ON @S@.job_keys
    FOR EACH ROW WHEN (NEW.running > OLD.running AND NEW.running > NEW.lim)
    EXECUTE FUNCTION @S@.job_key_guard();

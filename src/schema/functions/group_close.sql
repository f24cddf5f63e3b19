-- Seals a group: it takes no more members. When each member has ended already, the
-- on-complete job is enqueued at once. Returns that job's id, or NULL until the members end.
-- Closing a closed group changes nothing (and returns the job's id when there is one).
CREATE OR REPLACE FUNCTION @S@.group_close(p_name text) RETURNS bigint LANGUAGE plpgsql AS $pgc$
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

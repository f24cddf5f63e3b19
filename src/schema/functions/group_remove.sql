-- Removes a group that is done (its on-complete job enqueued) or open with no member left
-- to end; a closed group still waiting for members is refused (55000).
CREATE OR REPLACE FUNCTION @S@.group_remove(p_name text) RETURNS void LANGUAGE plpgsql AS $pgc$
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

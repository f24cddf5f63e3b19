-- Enqueues the on-complete job of group g (locked by the caller) when it is sealed, every
-- member has ended and none was enqueued yet. Returns its id, or NULL. It runs as the schema's
-- owner, so that a worker role ending the last member needs no right to enqueue.
CREATE OR REPLACE FUNCTION @S@.group_fire(g text) RETURNS bigint LANGUAGE plpgsql SECURITY DEFINER
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

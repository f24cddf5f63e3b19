-- Records that this session has just taken the advisory lock whose pg_locks identity is
-- (p_classid, p_objid, p_objsubid), at clock_timestamp(): the holders' view
-- (lock_holds.acquired_at) says since when. Deletes first the rows of sessions that are gone
-- (a pid not seen, or seen with another backend_start; a session hidden from this role keeps
-- its rows). A bigint key k is (k >> 32, k & 0xffffffff, 1); a pair (a, b) is (a, b, 2).
CREATE OR REPLACE FUNCTION @S@.lock_hold_record(p_classid oid, p_objid oid, p_objsubid smallint)
RETURNS void LANGUAGE sql AS $pgc$
    WITH gone AS (
        DELETE FROM @S@.lock_holds h WHERE NOT EXISTS (
            SELECT 1 FROM pg_catalog.pg_stat_activity a WHERE a.pid = h.pid
               AND (a.backend_start IS NULL OR a.backend_start = h.backend_start))
    )
    INSERT INTO @S@.lock_holds (pid, backend_start, classid, objid, objsubid)
    SELECT a.pid, a.backend_start, p_classid, p_objid, p_objsubid FROM pg_catalog.pg_stat_activity a
     WHERE a.pid = pg_backend_pid()
    ON CONFLICT (pid, backend_start, classid, objid, objsubid) DO UPDATE SET acquired_at = clock_timestamp()
$pgc$;

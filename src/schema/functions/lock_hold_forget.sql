-- Forgets this session's record of the advisory lock (p_classid, p_objid, p_objsubid)
-- (lock_hold_record()), after its last release.
CREATE OR REPLACE FUNCTION @S@.lock_hold_forget(p_classid oid, p_objid oid, p_objsubid smallint)
RETURNS void LANGUAGE sql AS $pgc$
    DELETE FROM @S@.lock_holds WHERE pid = pg_backend_pid()
       AND classid = p_classid AND objid = p_objid AND objsubid = p_objsubid
$pgc$;

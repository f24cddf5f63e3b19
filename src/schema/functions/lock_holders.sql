-- Who holds or waits for the advisory lock on the bigint key p_key (pg_advisory_lock(p_key),
-- the key of a name: XXH64 as PROTOCOL.md says) in the current database right now, as
-- pgc_lock_holders_recorded() reads it: holders first, then waiters in the order they started
-- waiting. mode is ExclusiveLock or ShareLock; wait_start, since when a waiter waits (NULL
-- before PostgreSQL 14); acquired_at, when a holder took it where that is known: pgcoord's
-- held transactions behind a pooler (their transaction starts just before the lock) and the
-- session locks recorded in lock_holds (pgcoord run's), when the caller may read that table.
-- is_self: the calling session.
CREATE OR REPLACE FUNCTION @S@.lock_holders(p_key bigint)
RETURNS TABLE (pid integer, mode text, granted boolean, application_name text, client_addr text,
               state text, wait_start timestamptz, state_change timestamptz,
               backend_start timestamptz, acquired_at timestamptz, is_self boolean)
LANGUAGE plpgsql STABLE SET search_path = pg_catalog, pg_temp AS $pgc$
#variable_conflict use_column
DECLARE
    v_classid oid := ((p_key >> 32) & 4294967295)::oid;
    v_objid oid := (p_key & 4294967295)::oid;
    recorded boolean := true;
BEGIN
    IF p_key IS NULL THEN
        RAISE EXCEPTION 'lock_holders: the key must not be NULL' USING ERRCODE = '22004';
    END IF;
    BEGIN
        PERFORM 1 FROM @S@.lock_holds LIMIT 0;
    EXCEPTION WHEN insufficient_privilege THEN
        recorded := false;
    END;
    RETURN QUERY
    WITH k AS (
        SELECT l.*, (pg_catalog.to_jsonb(l) ->> 'waitstart')::timestamptz AS wait_since
          FROM pg_catalog.pg_locks l
         WHERE l.locktype = 'advisory' AND l.classid = v_classid AND l.objid = v_objid AND l.objsubid = 1
           AND l.database = (SELECT d.oid FROM pg_catalog.pg_database d
                              WHERE d.datname = pg_catalog.current_database()))
    SELECT k.pid, k.mode, k.granted, a.application_name, pg_catalog.host(a.client_addr), a.state,
           k.wait_since, a.state_change, a.backend_start,
           CASE WHEN k.granted THEN
                coalesce(CASE WHEN recorded THEN
                              (SELECT h.acquired_at FROM @S@.lock_holds h
                                WHERE h.pid = k.pid AND h.backend_start = a.backend_start
                                  AND h.classid = k.classid AND h.objid = k.objid AND h.objsubid = k.objsubid)
                         END,
                         CASE WHEN a.application_name = 'pgcoord/lock-holder' THEN a.xact_start END) END,
           k.pid = pg_catalog.pg_backend_pid()
      FROM k LEFT JOIN pg_catalog.pg_stat_activity a ON a.pid = k.pid
     ORDER BY k.granted DESC, k.wait_since NULLS FIRST, k.pid, k.mode;
END
$pgc$;

-- Who waits for whom right now: one row per session that waits for a lock or blocks one, in
-- the current database plus any session of another database that waits for or blocks one of
-- them (as pgcoord blockers shows it, from the same reading as pgc_diag_snapshot_take():
-- pg_locks and pg_stat_activity read once each, pg_blocking_pids() called only for the
-- backends that wait). blocked_by is pg_blocking_pids(pid) without duplicates; blocks, the
-- sessions waiting directly for this one; root, it blocks someone and waits for no one; depth,
-- its distance from the nearest root (0 for a root; NULL in a wait cycle no root leads to);
-- blocks_total, the sessions waiting for it directly or through others; in_cycle, it is part
-- of a wait cycle. The lock it waits for is wait_locktype, wait_mode and wait_target, one line
-- ("relation public.orders", "transaction 735 (row (0,1) of public.orders)", "advisory 4242
-- \"nightly\"", the name from lock_names when the caller may read it). A blocker that has no
-- row of its own (a prepared transaction is pid 0) has only its pid and state. The calling
-- session is left out. Ages are milliseconds on the server's clock, NULL when not applicable.
CREATE OR REPLACE FUNCTION @S@.blocking_forest()
RETURNS TABLE (pid integer, blocked_by integer[], blocks integer[], root boolean, depth integer,
               blocks_total integer, in_cycle boolean, wait_locktype text, wait_mode text,
               wait_target text, waited_ms bigint, state text, wait_event_type text,
               wait_event text, database text, usename text, application_name text,
               client text, backend_type text, backend_start timestamptz, xact_age_ms bigint,
               query_age_ms bigint, state_age_ms bigint, query text)
LANGUAGE plpgsql VOLATILE SET search_path = pg_catalog, pg_temp AS $pgc$
#variable_conflict use_column
DECLARE
    names jsonb := '{}';
BEGIN
    -- Inside a transaction the server keeps the activity it first read: read it afresh.
    PERFORM pg_catalog.pg_stat_clear_snapshot();
    -- The names of the bigint keys locked, when the caller may read the registry (without
    -- it the keys are shown without names, not refused).
    BEGIN
        SELECT coalesce(jsonb_object_agg(n.key::text, n.name), '{}') INTO names
          FROM @S@.lock_names n
         WHERE n.key IN (SELECT (k.classid::bigint << 32) | k.objid::bigint FROM pg_catalog.pg_locks k
                          WHERE k.locktype = 'advisory' AND k.objsubid = 1);
    EXCEPTION WHEN insufficient_privilege THEN
        names := '{}';
    END;
    RETURN QUERY
    WITH RECURSIVE
    l AS MATERIALIZED (SELECT * FROM pg_catalog.pg_locks),
    a AS MATERIALIZED (
        SELECT * FROM pg_catalog.pg_stat_activity s
         WHERE s.pid IS NOT NULL AND s.pid <> pg_catalog.pg_backend_pid()
           AND (s.backend_type IN ('client backend', 'autovacuum worker', 'walsender')
                OR (s.backend_type IS NULL AND s.usesysid IS NOT NULL)
                OR s.pid IN (SELECT l.pid FROM l WHERE l.pid IS NOT NULL))),
    t AS (SELECT pg_catalog.clock_timestamp() AS now,
                 (SELECT d.oid FROM pg_catalog.pg_database d
                   WHERE d.datname = pg_catalog.current_database()) AS dboid),
    b AS MATERIALIZED (
        SELECT w.pid, ARRAY(SELECT DISTINCT x FROM unnest(pg_catalog.pg_blocking_pids(w.pid)) x
                             WHERE x <> w.pid ORDER BY x) AS pids
          FROM (SELECT DISTINCT l.pid FROM l
                 WHERE NOT l.granted AND l.pid IS NOT NULL AND l.pid <> pg_catalog.pg_backend_pid()) w),
    e AS (SELECT b.pid AS waiter, x AS blocker FROM b, unnest(b.pids) x),
    -- Every session, and a placeholder for a blocker without a row of its own.
    n AS (SELECT a.pid, a.datname::text AS database FROM a
          UNION
          SELECT e.blocker, NULL FROM e WHERE e.blocker NOT IN (SELECT a.pid FROM a)),
    -- The scope: the current database, and whoever waits for or blocks a session in it.
    sc AS (SELECT n.pid FROM n WHERE n.database = pg_catalog.current_database()
           UNION
           SELECT CASE WHEN e.waiter = sc.pid THEN e.blocker ELSE e.waiter END
             FROM sc JOIN e ON sc.pid IN (e.waiter, e.blocker)),
    es AS (SELECT e.* FROM e WHERE e.waiter IN (SELECT sc.pid FROM sc) AND e.blocker IN (SELECT sc.pid FROM sc)),
    -- Who waits for each session, directly or not (a walk that never enters a pid twice).
    reach AS (SELECT es.blocker AS start, es.waiter AS pid, ARRAY[es.blocker, es.waiter] AS path FROM es
              UNION ALL
              SELECT r.start, es.waiter, r.path || es.waiter FROM reach r JOIN es ON es.blocker = r.pid
               WHERE es.waiter <> ALL (r.path[2:]) AND cardinality(r.path) < 1000),
    tot AS (SELECT r.start AS pid, count(DISTINCT r.pid) FILTER (WHERE r.pid <> r.start) AS total,
                   bool_or(r.pid = r.start) AS cyc
              FROM reach r GROUP BY r.start),
    g AS (SELECT sc.pid,
                 coalesce((SELECT b.pids FROM b WHERE b.pid = sc.pid), '{}') AS blocked_by,
                 coalesce((SELECT array_agg(es.waiter ORDER BY es.waiter) FROM es WHERE es.blocker = sc.pid), '{}') AS blocks
            FROM sc),
    dep AS (SELECT g.pid, 0 AS depth, ARRAY[g.pid] AS path FROM g
             WHERE cardinality(g.blocks) > 0 AND cardinality(g.blocked_by) = 0
            UNION ALL
            SELECT es.waiter, dep.depth + 1, dep.path || es.waiter FROM dep JOIN es ON es.blocker = dep.pid
             WHERE es.waiter <> ALL (dep.path) AND dep.depth < 1000),
    -- The lock each one waits for (a backend waits for one at a time), and the row whose
    -- holder's transaction a row-lock wait waits for (the tuple lock the waiter holds).
    lk AS (SELECT l.*, pg_catalog.to_jsonb(l) ->> 'waitstart' AS wait_since,
                  CASE WHEN l.locktype IN ('relation', 'extend', 'page', 'tuple') THEN
                       coalesce(CASE WHEN c.oid IS NOT NULL THEN pg_catalog.format('%I.%I', ns.nspname, c.relname) END,
                                l.relation::text, '?') END AS rel,
                  CASE c.relkind WHEN 'r' THEN 'table' WHEN 'i' THEN 'index' WHEN 'S' THEN 'sequence'
                       WHEN 't' THEN 'TOAST table' WHEN 'v' THEN 'view' WHEN 'm' THEN 'materialized view'
                       WHEN 'c' THEN 'composite type' WHEN 'f' THEN 'foreign table'
                       WHEN 'p' THEN 'partitioned table' WHEN 'I' THEN 'partitioned index'
                       ELSE CASE WHEN c.oid IS NOT NULL THEN 'relation' END END AS kind,
                  CASE WHEN l.locktype = 'advisory' AND l.objsubid = 1
                       THEN ((l.classid::bigint << 32) | l.objid::bigint)::text
                       WHEN l.locktype = 'advisory' AND l.objsubid = 2
                       THEN (l.classid::bigint - CASE WHEN l.classid::bigint > 2147483647 THEN 4294967296 ELSE 0 END)::text
                            || ',' ||
                            (l.objid::bigint - CASE WHEN l.objid::bigint > 2147483647 THEN 4294967296 ELSE 0 END)::text
                  END AS keytext
             FROM l CROSS JOIN t
             LEFT JOIN pg_catalog.pg_class c ON c.oid = l.relation AND l.database IN (0, t.dboid)
             LEFT JOIN pg_catalog.pg_namespace ns ON ns.oid = c.relnamespace
            WHERE l.pid IN (SELECT g.pid FROM g) AND (NOT l.granted OR l.locktype = 'tuple')),
    tg AS (SELECT lk.*,
                  CASE lk.locktype
                       WHEN 'relation' THEN CASE WHEN lk.kind IS NULL OR lk.kind = 'table' THEN 'relation'
                                                 ELSE lk.kind END || ' ' || lk.rel
                       WHEN 'extend' THEN 'extension of ' || lk.rel
                       WHEN 'page' THEN pg_catalog.format('page %s of %s', lk.page, lk.rel)
                       WHEN 'tuple' THEN pg_catalog.format('row (%s,%s) of %s', lk.page, lk.tuple, lk.rel)
                       WHEN 'transactionid' THEN 'transaction ' || coalesce(lk.transactionid::text, '?')
                       WHEN 'virtualxid' THEN 'virtual transaction ' || coalesce(lk.virtualxid, '?')
                       WHEN 'advisory' THEN 'advisory ' || lk.keytext
                            || coalesce(' "' || CASE WHEN lk.objsubid = 1 AND lk.database = (SELECT t.dboid FROM t)
                                                     THEN names ->> lk.keytext END || '"', '')
                       ELSE lk.locktype END AS target
             FROM lk),
    w AS (SELECT DISTINCT ON (tg.pid) tg.pid, tg.locktype, tg.mode, tg.wait_since,
                 tg.target || coalesce(' (' || (SELECT r.target FROM tg r WHERE r.pid = tg.pid AND r.granted
                                                 AND r.locktype = 'tuple' AND tg.locktype = 'transactionid'
                                                 LIMIT 1) || ')', '') AS target
            FROM tg WHERE NOT tg.granted ORDER BY tg.pid)
    SELECT g.pid, g.blocked_by, g.blocks,
           cardinality(g.blocks) > 0 AND cardinality(g.blocked_by) = 0,
           (SELECT min(dep.depth) FROM dep WHERE dep.pid = g.pid)::integer,
           coalesce(tot.total, 0)::integer, coalesce(tot.cyc, false),
           w.locktype, w.mode, w.target,
           (extract(epoch FROM t.now - w.wait_since::timestamptz) * 1000)::bigint,
           CASE WHEN a.pid IS NOT NULL THEN a.state
                WHEN g.pid = 0 THEN 'prepared transaction' ELSE 'unknown (not in pg_stat_activity)' END,
           a.wait_event_type, a.wait_event, a.datname::text, a.usename::text, a.application_name,
           CASE WHEN a.client_addr IS NOT NULL THEN pg_catalog.host(a.client_addr) || ':' || a.client_port
                WHEN a.client_port = -1 THEN 'local' END,
           a.backend_type, a.backend_start,
           (extract(epoch FROM t.now - a.xact_start) * 1000)::bigint,
           (extract(epoch FROM t.now - a.query_start) * 1000)::bigint,
           (extract(epoch FROM t.now - a.state_change) * 1000)::bigint,
           a.query
      FROM g CROSS JOIN t
      LEFT JOIN a ON a.pid = g.pid
      LEFT JOIN w ON w.pid = g.pid
      LEFT JOIN tot ON tot.pid = g.pid
     WHERE w.pid IS NOT NULL OR cardinality(g.blocked_by) > 0 OR cardinality(g.blocks) > 0
     ORDER BY cardinality(g.blocks) > 0 AND cardinality(g.blocked_by) = 0 DESC,
              (SELECT min(dep.depth) FROM dep WHERE dep.pid = g.pid) NULLS LAST,
              coalesce(tot.total, 0) DESC, a.xact_start NULLS LAST, g.pid;
END
$pgc$;

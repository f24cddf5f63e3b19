-- The server's current timeline (primary only: raises 55000 during recovery).
CREATE OR REPLACE FUNCTION @S@.server_timeline() RETURNS bigint
LANGUAGE sql VOLATILE SET search_path = pg_catalog, pg_temp AS $$
    SELECT ('x' || substr(pg_walfile_name(pg_current_wal_lsn()), 1, 8))::bit(32)::bigint
$$;

-- A token that reached a client must survive a crash: commit at least to the local WAL.
CREATE OR REPLACE FUNCTION @S@.lease_durable() RETURNS void
LANGUAGE plpgsql SET search_path = pg_catalog, pg_temp AS $$
BEGIN
    IF current_setting('synchronous_commit') = 'off' THEN
        PERFORM set_config('synchronous_commit', 'local', true);
    END IF;
END
$$;

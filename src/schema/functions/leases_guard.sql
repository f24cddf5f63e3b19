-- Fencing tokens never go backwards: lease rows are never deleted nor truncated, and neither
-- their name nor their token is lowered by an update.
CREATE OR REPLACE FUNCTION @S@.leases_guard() RETURNS trigger
LANGUAGE plpgsql SET search_path = pg_catalog, pg_temp AS $$
BEGIN
    IF TG_OP = 'UPDATE' THEN
        IF NEW.name <> OLD.name OR NEW.token < OLD.token THEN
            RAISE EXCEPTION 'fencing tokens never go backwards: cannot change "%" from token % to "%" token %',
                OLD.name, OLD.token, NEW.name, NEW.token
                USING ERRCODE = '55000';
        END IF;
        RETURN NEW;
    END IF;
    RAISE EXCEPTION 'lease rows are kept for ever so that fencing tokens never go backwards'
        USING ERRCODE = '55000',
              HINT = 'release a lease with lease_release(name, token) instead';
END
$$;
DROP TRIGGER IF EXISTS leases_guard ON @S@.leases;
CREATE TRIGGER leases_guard BEFORE UPDATE OR DELETE ON @S@.leases
    FOR EACH ROW EXECUTE FUNCTION @S@.leases_guard();
DROP TRIGGER IF EXISTS leases_guard_truncate ON @S@.leases;
CREATE TRIGGER leases_guard_truncate BEFORE TRUNCATE ON @S@.leases
    FOR EACH STATEMENT EXECUTE FUNCTION @S@.leases_guard();

-- For writers in any language: call inside the transaction that writes what the token
-- protects. Returns the token when it is the newest one for p_name. Raises SQLSTATE PCF01
-- (stale fencing token) when a newer token was granted, and PCF02 when no such token was ever
-- granted. Holds the row FOR KEY SHARE until the transaction ends, so no newer token can be
-- granted before this transaction commits or rolls back.
CREATE OR REPLACE FUNCTION @S@.fence_check(p_name text, p_token bigint) RETURNS bigint
LANGUAGE plpgsql SET search_path = pg_catalog, pg_temp AS $$
DECLARE
    cur @S@.leases;
BEGIN
    SELECT * INTO cur FROM @S@.leases l WHERE l.name = p_name FOR KEY SHARE;
    IF NOT FOUND OR p_token IS NULL OR p_token > cur.token OR p_token <= 0 THEN
        RAISE EXCEPTION 'no fencing token % was granted for "%"', coalesce(p_token::text, 'NULL'), p_name
            USING ERRCODE = 'PCF02';
    END IF;
    IF p_token < cur.token THEN
        RAISE EXCEPTION 'stale fencing token % for "%": token % was granted since', p_token, p_name, cur.token
            USING ERRCODE = 'PCF01',
                  DETAIL = format('token %s went to %s (%s) at %s', cur.token, cur.holder, cur.kind, cur.granted_at),
                  HINT = 'this writer no longer holds the lease or lock: roll back and stop';
    END IF;
    RETURN cur.token;
END
$$;

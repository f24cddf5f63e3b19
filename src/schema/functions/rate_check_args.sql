-- The check of a rate argument of queue_flow_set() and queue_key_set() (22023): p_n is -1
-- (unchanged), 0 (none) or 1..1000000 starts per p_per_ms milliseconds, at least 1.
CREATE OR REPLACE FUNCTION @S@.rate_check_args(p_what text, p_n integer, p_per_ms bigint)
RETURNS void LANGUAGE plpgsql IMMUTABLE AS $pgc$
BEGIN
    IF p_n < -1 OR p_n > 1000000 THEN
        RAISE EXCEPTION '%: n must be -1 (unchanged), 0 (none) or 1..1000000, not %', p_what, p_n
            USING ERRCODE = '22023';
    END IF;
    IF p_n > 0 AND (p_per_ms IS NULL OR p_per_ms < 1) THEN
        RAISE EXCEPTION '%: the interval must be at least 1 ms', p_what USING ERRCODE = '22023';
    END IF;
END
$pgc$;

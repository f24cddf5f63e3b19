-- The argument checks of bulk_cancel(), bulk_retry() and bulk_purge() (22023, 22004): the
-- status one of p_statuses, ages, ids and the batch size in range, the key prefix not empty.
CREATE OR REPLACE FUNCTION @S@.bulk_check_args(p_status text, p_statuses text[], p_older_than_ms bigint,
                                          p_key_prefix text, p_upto_id bigint, p_after_id bigint,
                                          p_limit integer)
RETURNS void LANGUAGE plpgsql IMMUTABLE AS $pgc$
BEGIN
    IF p_status IS NOT NULL AND NOT p_status = ANY (p_statuses) THEN
        RAISE EXCEPTION 'status "%" does not fit: use %', p_status, array_to_string(p_statuses, ', ')
            USING ERRCODE = '22023';
    END IF;
    IF p_older_than_ms IS NULL OR p_upto_id IS NULL OR p_after_id IS NULL OR p_limit IS NULL THEN
        RAISE EXCEPTION 'older_than_ms, upto_id, after_id and limit must not be NULL' USING ERRCODE = '22004';
    END IF;
    IF p_older_than_ms < 0 OR p_upto_id < 0 THEN
        RAISE EXCEPTION 'older_than_ms and upto_id must not be negative' USING ERRCODE = '22023';
    END IF;
    IF p_key_prefix = '' THEN
        RAISE EXCEPTION 'the key prefix is empty (NULL matches any job)' USING ERRCODE = '22023';
    END IF;
    IF p_limit < 1 OR p_limit > 10000 THEN
        RAISE EXCEPTION 'the batch size must be 1..10000, not %', p_limit USING ERRCODE = '22023';
    END IF;
END
$pgc$;

-- Changes the queue settings (queue_config()): a negative argument keeps the setting as it
-- is. The aging time and the payload limit must not be 0 (22023); the retentions may (the
-- reaper then prunes every finished job).
CREATE OR REPLACE FUNCTION @S@.queue_config_set(p_aging_ms bigint, p_succeeded_retention_ms bigint,
                                           p_failed_retention_ms bigint, p_max_payload_bytes integer)
RETURNS void LANGUAGE plpgsql AS $pgc$
BEGIN
    IF p_aging_ms IS NULL OR p_succeeded_retention_ms IS NULL OR p_failed_retention_ms IS NULL
       OR p_max_payload_bytes IS NULL THEN
        RAISE EXCEPTION 'a setting is NULL (a negative value keeps it)' USING ERRCODE = '22004';
    END IF;
    IF p_aging_ms = 0 THEN
        RAISE EXCEPTION 'the aging time must be positive' USING ERRCODE = '22023';
    END IF;
    IF p_max_payload_bytes = 0 THEN
        RAISE EXCEPTION 'the payload limit must be positive' USING ERRCODE = '22023';
    END IF;
    UPDATE @S@.queue_settings SET
        aging = CASE WHEN p_aging_ms < 0 THEN aging ELSE p_aging_ms * interval '1 millisecond' END,
        succeeded_retention = CASE WHEN p_succeeded_retention_ms < 0 THEN succeeded_retention
            ELSE p_succeeded_retention_ms * interval '1 millisecond' END,
        failed_retention = CASE WHEN p_failed_retention_ms < 0 THEN failed_retention
            ELSE p_failed_retention_ms * interval '1 millisecond' END,
        max_payload_bytes = CASE WHEN p_max_payload_bytes < 0 THEN max_payload_bytes
            ELSE p_max_payload_bytes END;
END
$pgc$;

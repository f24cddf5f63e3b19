-- The queue settings, one row: the aging time (a pending job that waited longer goes ahead of
-- priorities), the retention of succeeded and of failed or cancelled jobs in the history, and
-- the largest payload enqueue() accepts, in bytes. Durations in milliseconds.
CREATE OR REPLACE FUNCTION @S@.queue_config()
RETURNS TABLE (aging_ms bigint, succeeded_retention_ms bigint, failed_retention_ms bigint,
               max_payload_bytes integer)
LANGUAGE sql STABLE AS $pgc$
    SELECT (extract(epoch FROM s.aging) * 1000)::bigint,
           (extract(epoch FROM s.succeeded_retention) * 1000)::bigint,
           (extract(epoch FROM s.failed_retention) * 1000)::bigint, s.max_payload_bytes
      FROM @S@.queue_settings s
$pgc$;

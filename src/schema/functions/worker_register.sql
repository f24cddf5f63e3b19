-- Registers (or refreshes) a listening worker: the channel it LISTENs on, the queues it serves
-- and its free slots, so that enqueue() wakes one worker with room instead of every listener.
-- A worker refreshes it about every second; a registration older than 10 seconds is ignored.
CREATE OR REPLACE FUNCTION @S@.worker_register(p_channel text, p_queues text[], p_free integer)
RETURNS void LANGUAGE plpgsql AS $pgc$
BEGIN
    IF p_channel IS NULL OR p_channel = '' OR octet_length(p_channel) > 63 THEN
        RAISE EXCEPTION 'a worker channel must be 1 to 63 bytes' USING ERRCODE = '22023';
    END IF;
    INSERT INTO @S@.workers AS w (channel, queues, free)
    VALUES (p_channel, coalesce(p_queues, '{}'), greatest(coalesce(p_free, 0), 0))
    ON CONFLICT (channel) DO UPDATE SET queues = excluded.queues, free = excluded.free,
                                        seen_at = clock_timestamp();
END
$pgc$;

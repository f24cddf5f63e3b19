-- Pauses a queue (p_paused true: claims take nothing from it) or resumes it (false), creating
-- its row when the queue was never named; a resume wakes the queue's workers. In the caller's
-- transaction: its effect, and the wake-up, come at commit.
CREATE OR REPLACE FUNCTION @S@.queue_pause(p_queue text, p_paused boolean) RETURNS void
LANGUAGE plpgsql AS $pgc$
DECLARE
    woke bigint;
BEGIN
    IF p_queue IS NULL OR p_queue = '' OR octet_length(p_queue) > 128 THEN
        RAISE EXCEPTION 'the queue name must be 1 to 128 bytes' USING ERRCODE = '22023';
    END IF;
    IF p_paused IS NULL THEN
        RAISE EXCEPTION 'paused is NULL' USING ERRCODE = '22004';
    END IF;
    WITH u AS (
        INSERT INTO @S@.queues (name, paused) VALUES (p_queue, p_paused)
        ON CONFLICT (name) DO UPDATE SET paused = excluded.paused RETURNING paused
    )
    SELECT count(CASE WHEN NOT u.paused THEN pg_notify(s.channel, p_queue) END) INTO woke
      FROM u, @S@.queue_settings s;
END
$pgc$;

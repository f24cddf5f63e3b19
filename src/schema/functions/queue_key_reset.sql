-- Removes a key's own flow settings (queue_key_set()): the queue's apply to it again. The
-- queue's workers are woken. P0002: the queue has no such key.
CREATE OR REPLACE FUNCTION @S@.queue_key_reset(p_queue text, p_key text) RETURNS void
LANGUAGE plpgsql AS $pgc$
BEGIN
    UPDATE @S@.job_keys k SET max_running = NULL, weight = NULL, rate_n = NULL, rate_ms = NULL,
           rate_next = NULL, lim = q.key_limit
      FROM @S@.queues q WHERE q.name = k.queue AND k.queue = p_queue AND k.key = p_key;
    IF NOT FOUND THEN
        RAISE EXCEPTION 'queue "%" has no key "%"', p_queue, p_key USING ERRCODE = 'P0002';
    END IF;
    PERFORM pg_notify(st.channel, p_queue) FROM @S@.queue_settings st;
END
$pgc$;

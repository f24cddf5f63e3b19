-- How long until the earliest scheduled job of the queues p_queues, or the next start a rate
-- allows to pending jobs (of a queue with a rate, of a key with room and a rate), in ms; NULL:
-- none. A worker asks each time its claims come back short, which with keys at their limits is
-- after nearly every claim: as a statement of the worker's own it was planned anew each time
-- (its custom plans looked cheaper than the generic one), which cost more than running it.
-- Here its plan is made once per session, and again only when a table's statistics change.
CREATE OR REPLACE FUNCTION @S@.next_run_ms(p_queues text[]) RETURNS float8
LANGUAGE plpgsql SET plan_cache_mode = force_generic_plan AS $pgc$
BEGIN
    RETURN (SELECT extract(epoch FROM (min(z.t) - clock_timestamp())) * 1000 FROM (
        SELECT x.run_at AS t FROM unnest(p_queues) AS u(q)
         CROSS JOIN LATERAL (SELECT j.run_at FROM @S@.jobs j
                              WHERE j.queue = u.q AND j.status = 'scheduled' ORDER BY j.run_at LIMIT 1) x
         WHERE NOT EXISTS (SELECT 1 FROM @S@.queues s WHERE s.name = u.q AND s.paused)
        UNION ALL
        SELECT s.rate_next - s.rate_ms * 0.05 * interval '1 millisecond' FROM @S@.queues s
         WHERE s.name = ANY (p_queues) AND s.flow AND NOT s.paused AND s.rate_next > clock_timestamp()
           AND EXISTS (SELECT 1 FROM @S@.jobs j WHERE j.queue = s.name AND j.status = 'pending')
        UNION ALL
        SELECT k.rate_next - coalesce(k.rate_ms, s.key_rate_ms) * 0.05 * interval '1 millisecond'
          FROM @S@.queues s JOIN @S@.job_keys k ON k.queue = s.name
         WHERE s.name = ANY (p_queues) AND s.flow AND NOT s.paused AND k.rate_next > clock_timestamp()
           AND (k.lim IS NULL OR k.running < k.lim)
           AND EXISTS (SELECT 1 FROM @S@.jobs j WHERE j.queue = k.queue AND j.key = k.key
                          AND j.status = 'pending')) z);
END
$pgc$;

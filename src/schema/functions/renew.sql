-- Extends the leases of the running jobs (p_ids[i], p_tokens[i]) whose token is current to
-- now + p_lease_ms. Returns one row per id: status 'held' (renewed), 'cancelled' (the job was
-- cancelled, pgc_queue_cancel: stop its handler, and record no outcome), or 'lost' (its lease
-- ran out and the reaper returned it, or it was claimed again: its outcome will be refused).
CREATE OR REPLACE FUNCTION @S@.renew(p_ids bigint[], p_tokens bigint[], p_lease_ms bigint)
RETURNS TABLE (id bigint, status text) LANGUAGE plpgsql AS $pgc$
#variable_conflict use_column
DECLARE
    held bigint[];
BEGIN
    IF cardinality(p_ids) IS DISTINCT FROM cardinality(p_tokens) THEN
        RAISE EXCEPTION 'renew: % ids and % tokens', cardinality(p_ids), cardinality(p_tokens)
            USING ERRCODE = '22023';
    END IF;
    IF p_lease_ms IS NULL OR p_lease_ms < 1 THEN
        RAISE EXCEPTION 'the lease must be at least 1 ms, not %', coalesce(p_lease_ms::text, 'NULL')
            USING ERRCODE = '22023';
    END IF;
    WITH u AS (
        UPDATE @S@.jobs j SET lease_until = clock_timestamp() + p_lease_ms * interval '1 millisecond'
         WHERE j.id = ANY (p_ids) AND j.token = ANY (p_tokens) AND j.status = 'running'
        RETURNING j.id
    )
    SELECT array_agg(u.id) INTO held FROM u;
    IF cardinality(held) = cardinality(p_ids) THEN
        RETURN QUERY SELECT x.i, 'held'::text FROM unnest(p_ids) AS x(i);
        RETURN;
    END IF;
    RETURN QUERY
    SELECT x.i, CASE WHEN x.i = ANY (held) THEN 'held'
                     WHEN EXISTS (SELECT 1 FROM @S@.job_history h WHERE h.id = x.i AND h.status = 'cancelled')
                          THEN 'cancelled'
                     ELSE 'lost' END
      FROM unnest(p_ids) AS x(i);
END
$pgc$;

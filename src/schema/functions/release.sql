-- Returns the running jobs (p_ids[i], p_tokens[i]) whose token is current to pending at once
-- (a worker stopping). A release is not an attempt: the attempt the claim counted is given
-- back, whether the handler had started or not (p_started: it had, which last_error notes). A
-- keyed job's run ends in the key ledger (job_key_ended()); each queue that got jobs back is
-- notified on the schema's queue channel. Returns how many jobs were released; stale pairs are
-- ignored.
CREATE OR REPLACE FUNCTION @S@.release(p_ids bigint[], p_tokens bigint[], p_started boolean)
RETURNS integer LANGUAGE plpgsql AS $pgc$
DECLARE
    n integer;
    woke bigint;
BEGIN
    IF cardinality(p_ids) IS DISTINCT FROM cardinality(p_tokens) THEN
        RAISE EXCEPTION 'release: % ids and % tokens', cardinality(p_ids), cardinality(p_tokens)
            USING ERRCODE = '22023';
    END IF;
    WITH r AS (
        UPDATE @S@.jobs j SET status = 'pending', token = NULL, lease_until = NULL,
               attempts = greatest(j.attempts - 1, 0), eff_priority = j.priority,
               last_error = CASE WHEN p_started THEN 'released unfinished when worker '
                                      || coalesce(j.worker, '?') || ' stopped (not counted as an attempt)'
                                 ELSE j.last_error END,
               run_at = clock_timestamp()
         WHERE j.id = ANY (p_ids) AND j.token = ANY (p_tokens) AND j.status = 'running'
        RETURNING j.queue, j.key
    ), ended AS (
        INSERT INTO @S@.job_key_done SELECT e.* FROM r, @S@.job_key_ended(r.queue, r.key) e
    ), woken AS (
        SELECT count(pg_notify(s.channel, q.queue)) AS k
          FROM (SELECT DISTINCT r.queue FROM r) q, @S@.queue_settings s
    )
    SELECT (SELECT count(*) FROM r), (SELECT woken.k FROM woken) INTO n, woke;
    RETURN n;
END
$pgc$;

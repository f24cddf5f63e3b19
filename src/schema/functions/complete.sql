-- Completes the running jobs (p_ids[i], p_tokens[i]) whose token is current: each leaves the
-- live table for job_history as succeeded (kept when succeeded_retention is not zero, when
-- others wait for it, or when it has a result), with what its command ended with
-- (p_exit_statuses, p_outputs) and its result (p_results), each NULL or one element per job in
-- the order of p_ids; a keyed job's end goes to the key ledger (job_key_ended()). Returns the
-- ids completed: a pair whose token is stale is left out. A result bigger than 65536 bytes
-- (as jsonb prints it) is refused (22023, the element's 1-based position in the error's
-- column field) and nothing is completed. Each job completed with a result is notified on the
-- channel queue_settings.channel || '.result' with its id as payload (at commit).
CREATE OR REPLACE FUNCTION @S@.complete(p_ids bigint[], p_tokens bigint[],
                                        p_exit_statuses integer[] DEFAULT NULL,
                                        p_outputs text[] DEFAULT NULL,
                                        p_results jsonb[] DEFAULT NULL)
RETURNS TABLE (id bigint) LANGUAGE plpgsql AS $pgc$
#variable_conflict use_column
DECLARE
    bad bigint;
    n bigint;
BEGIN
    IF cardinality(p_ids) IS DISTINCT FROM cardinality(p_tokens) THEN
        RAISE EXCEPTION 'complete: % ids and % tokens', cardinality(p_ids), cardinality(p_tokens)
            USING ERRCODE = '22023';
    END IF;
    IF p_results IS NOT NULL THEN
        IF cardinality(p_results) <> cardinality(p_ids) THEN
            RAISE EXCEPTION 'complete: % ids and % results', cardinality(p_ids), cardinality(p_results)
                USING ERRCODE = '22023';
        END IF;
        SELECT u.i, octet_length(u.r::text) INTO bad, n
          FROM unnest(p_results) WITH ORDINALITY AS u(r, i)
         WHERE octet_length(u.r::text) > 65536 ORDER BY u.i LIMIT 1;
        IF bad IS NOT NULL THEN
            RAISE EXCEPTION 'the result of job % is % bytes, over the limit of 65536 bytes', p_ids[bad], n
                USING ERRCODE = '22023', COLUMN = bad::text;
        END IF;
    END IF;
    -- RETURNING j.* and ROW(d.*)::jobs, not RETURNING j and d.j: once job_history_row() is
    -- inlined, each field of the row is then the column itself, where a whole-row value would
    -- be built per job and taken apart field by field (a tenth of this statement's time).
    RETURN QUERY
    WITH done AS (
        DELETE FROM @S@.jobs j
         WHERE j.id = ANY (p_ids) AND j.token = ANY (p_tokens) AND j.status = 'running'
        RETURNING j.*
    ), kept AS (
        INSERT INTO @S@.job_history
        SELECT h.* FROM done d,
               @S@.job_history_row(ROW(d.*)::@S@.jobs, 'succeeded', NULL, d.errors,
                                   p_exit_statuses[array_position(p_ids, d.id)],
                                   nullif(p_outputs[array_position(p_ids, d.id)], ''),
                                   p_results[array_position(p_ids, d.id)]) h
        -- A job others wait for keeps its row whatever the retention: the row resolves them
        -- (job_ends_fold()), and the reaper prunes it later; so does a job with a result.
         WHERE h.has_dependents OR h.result IS NOT NULL
            OR (SELECT s.succeeded_retention > interval '0' FROM @S@.queue_settings s)
    ), ended AS (
        -- A keyed job's run ended: a row for the next claim of its key to fold (claim_flow()).
        INSERT INTO @S@.job_key_done SELECT e.* FROM done d, @S@.job_key_ended(d.queue, d.key) e
    ), noted AS (
        -- A waiter is woken by a notification per job completed with a result (at commit).
        SELECT count(pg_notify(s.channel || '.result', d.id::text)) AS n
          FROM done d, @S@.queue_settings s
         WHERE p_results[array_position(p_ids, d.id)] IS NOT NULL
    )
    -- One statement: noted runs once, for the condition that is always true.
    SELECT d.id FROM done d WHERE (SELECT noted.n FROM noted) IS NOT NULL;
END
$pgc$;

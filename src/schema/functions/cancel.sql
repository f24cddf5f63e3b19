-- Cancels a live job: its row is locked, deleted and written to the history as cancelled, and
-- when it was running the workers serving its queue get a notification "cancel ID" on their
-- own channels (sent at commit, so only for a cancel that happened). Returns whether the job
-- was running. The row lock decides a race with the job's completion: whichever comes second
-- finds the row gone (a completion is then stale; the cancel looks in the history with a new
-- statement, whose snapshot is taken after the wait, and says how the job ended: 55000).
-- P0002: no such job, live or in the history. A worker takes the notification as a hint only:
-- it renews its leases at once, and a job whose row is gone and whose history says cancelled
-- is cancelled for it.
CREATE OR REPLACE FUNCTION @S@.cancel(p_id bigint) RETURNS boolean LANGUAGE plpgsql AS $pgc$
DECLARE
    was text;
    n bigint;
    sent bigint;
    fin text;
BEGIN
    IF p_id IS NULL THEN
        RAISE EXCEPTION 'the job id is NULL' USING ERRCODE = '22004';
    END IF;
    WITH j AS MATERIALIZED (
        SELECT x.id, x.status FROM @S@.jobs x WHERE x.id = p_id FOR UPDATE
    ), d AS (
        DELETE FROM @S@.jobs x WHERE x.id = p_id AND EXISTS (SELECT 1 FROM j)
        RETURNING x.*, x AS r
    ), h AS (
        INSERT INTO @S@.job_history SELECT h.* FROM d,
            @S@.job_history_row(d.r, 'cancelled', CASE WHEN d.status = 'running'
                THEN 'cancelled while running on ' || coalesce(d.worker, '?') ELSE d.last_error END,
                d.errors, (d.r).exit_status, (d.r).output) h
    ), unedge AS (
        -- A waiting job's edges go with it (job_ends_fold() would find none).
        DELETE FROM @S@.job_deps e WHERE e.job = p_id
           AND EXISTS (SELECT 1 FROM d WHERE d.status = 'waiting')
    ), ended AS (
        -- A keyed job's run ended: a row for the next claim of its key to fold.
        INSERT INTO @S@.job_key_done SELECT e.* FROM d,
            @S@.job_key_ended(d.queue, d.key) e WHERE d.status = 'running'
    ), nt AS (
        SELECT count(pg_notify(w.channel, 'cancel ' || d.id)) AS sent
          FROM d JOIN @S@.workers w ON d.queue = ANY (w.queues) WHERE d.status = 'running'
    )
    SELECT (SELECT j.status FROM j), (SELECT count(*) FROM d), (SELECT nt.sent FROM nt) INTO was, n, sent;
    IF was IS NOT NULL THEN
        IF n <> 1 THEN
            RAISE EXCEPTION 'job % was locked but not cancelled', p_id USING ERRCODE = 'XX000';
        END IF;
        RETURN was = 'running';
    END IF;
    -- Not live: finished (perhaps while we waited for its row), or unknown.
    SELECT x.status INTO fin FROM @S@.job_history x WHERE x.id = p_id;
    IF fin IS NOT NULL THEN
        RAISE EXCEPTION 'job % has already finished (%): nothing to cancel', p_id, fin USING ERRCODE = '55000';
    END IF;
    RAISE EXCEPTION 'no job with id % (never enqueued, or finished and no longer in the history)', p_id
        USING ERRCODE = 'P0002';
END
$pgc$;

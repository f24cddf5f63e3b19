-- seed_batch1.sql - the seed's raw SQL one job at a time: insert, claim (SKIP LOCKED), complete.
INSERT INTO pgc_bench_ref.jobs (queue_name, payload) VALUES ('bench', '{}');
WITH picked AS (
    SELECT id FROM pgc_bench_ref.jobs
    WHERE queue_name = 'bench' AND status = 'pending' AND run_at <= clock_timestamp()
      AND attempts < max_attempts
    ORDER BY priority DESC, run_at, id
    FOR UPDATE SKIP LOCKED
    LIMIT 1
), claimed AS (
    UPDATE pgc_bench_ref.jobs AS j
    SET status = 'running', attempts = j.attempts + 1, locked_at = clock_timestamp(), locked_by = 'bench'
    FROM picked WHERE j.id = picked.id
    RETURNING j.id, j.payload, j.attempts, j.locked_at
)
SELECT coalesce(max(id), 0) AS id FROM claimed \gset
UPDATE pgc_bench_ref.jobs
SET status = 'succeeded', finished_at = clock_timestamp(), locked_at = NULL, locked_by = NULL, last_error = NULL
WHERE id = :id AND status = 'running' AND locked_by = 'bench';

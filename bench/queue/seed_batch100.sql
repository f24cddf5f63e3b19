-- seed_batch100.sql - the seed's raw SQL in batches of 100: insert 100, claim 100, complete 100.
INSERT INTO pgc_bench_ref.jobs (queue_name, payload) SELECT 'bench', '{}' FROM generate_series(1, 100);
WITH picked AS (
    SELECT id FROM pgc_bench_ref.jobs
    WHERE queue_name = 'bench' AND status = 'pending' AND run_at <= clock_timestamp()
      AND attempts < max_attempts
    ORDER BY priority DESC, run_at, id
    FOR UPDATE SKIP LOCKED
    LIMIT 100
), claimed AS (
    UPDATE pgc_bench_ref.jobs AS j
    SET status = 'running', attempts = j.attempts + 1, locked_at = clock_timestamp(), locked_by = 'bench'
    FROM picked WHERE j.id = picked.id
    RETURNING j.id, j.payload, j.attempts, j.locked_at
)
SELECT coalesce(array_agg(id), '{}') AS ids FROM claimed \gset
UPDATE pgc_bench_ref.jobs
SET status = 'succeeded', finished_at = clock_timestamp(), locked_at = NULL, locked_by = NULL, last_error = NULL
WHERE id = ANY (:ids::bigint[]) AND status = 'running' AND locked_by = 'bench';

-- lightest.sql - the lightest possible queue, the ceiling: insert 1,000, then take 1,000 with
-- DELETE ... SKIP LOCKED ... RETURNING. No claim token, no lease, no acknowledgement.
INSERT INTO pgc_bench_ref.light (payload) SELECT '{}' FROM generate_series(1, 1000);
DELETE FROM pgc_bench_ref.light WHERE id IN (
    SELECT id FROM pgc_bench_ref.light ORDER BY id LIMIT 1000 FOR UPDATE SKIP LOCKED)
RETURNING id, payload;

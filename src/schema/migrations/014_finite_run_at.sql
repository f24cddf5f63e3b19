-- 014_finite_run_at: a job's run_at is a finite time. The schema placeholder is replaced by
-- the quoted schema name.
--
-- "-infinity" and "infinity" are timestamps PostgreSQL accepts, and enqueue took them as
-- given: one such job made every view that subtracts run_at from now (queue stats, the
-- dashboard, /metrics) fail with "cannot subtract infinite timestamps" for every queue. The
-- constraint refuses them from now on, whichever client writes (SQLSTATE 23514); NOT VALID
-- keeps a table that already holds one usable, and the views leave such a row out of the
-- ages they compute.
ALTER TABLE @S@.jobs ADD CONSTRAINT jobs_run_at_finite CHECK (isfinite(run_at)) NOT VALID;

-- 004_claim_index: the claim takes the claim index, whatever the statistics say.
-- The schema placeholder is replaced by the quoted schema name.
--
-- jobs_waiting (queue, run_at) WHERE status = 'pending' could serve a claim too: with
-- statistics that have not seen a queue's backlog yet (a new queue, a sudden spike), the
-- planner estimated one row and chose it, then sorted the whole pending set of the queue on
-- every claim. A claim then cost O(backlog), just when the backlog was large. Its two users
-- (the reaper's aging pass and the oldest-pending figure of the stats) only need jobs that have
-- not aged yet; aged ones (eff_priority = 32768) are in run_at order inside the claim index.
-- With the extra predicate the claim's WHERE no longer implies the index's, so the claim index
-- is the claim's only index path again.
DROP INDEX @S@.jobs_waiting;
CREATE INDEX jobs_waiting ON @S@.jobs (queue, run_at)
    WHERE status = 'pending' AND eff_priority < 32768;

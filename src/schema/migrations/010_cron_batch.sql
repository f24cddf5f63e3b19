-- 010_cron_batch: a scheduler fires a whole batch of ticks in one statement, and may fire a
-- tick shortly before it is due, its job's run_at being the tick.
-- The schema placeholder is replaced by the quoted schema name.
--
-- cron_fire() does, for ticks of schedules that the caller has locked (FOR UPDATE) and whose
-- next ticks it computed: one 'missed' row per gap, one row per tick in cron_ticks (the
-- primary key: a tick recorded before is left alone, and enqueues nothing), one enqueue() per
-- queue and run_at for the new ticks' jobs (a schedule with overlap skip has the unique key
-- 'cron:NAME', so a tick whose previous job is pending or running becomes 'skipped-overlap'),
-- and the schedules' next ticks and counters. All in the caller's transaction.
--
-- A tick fired ahead has a job whose run_at is the tick ('scheduled' until then) and a
-- cron_ticks row with tick_at > now(). cron_unfire() takes such ticks back when a schedule is
-- paused, changed or removed: it deletes their jobs while they are still 'scheduled' and their
-- rows, and gives the schedule its next tick back, so that what never became due never runs.

-- The next time a scheduler must look, per overlap policy (ticks of 'allow' schedules may fire
-- ahead, those of 'skip' ones only when due).
CREATE INDEX cron_schedules_due_overlap ON @S@.cron_schedules (overlap, next_tick) WHERE NOT paused;

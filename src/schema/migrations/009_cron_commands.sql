-- 009_cron_commands: schedules that run a command, and the attempts of a schedule's jobs.
-- The schema placeholder is replaced by the quoted schema name.
--
-- A command schedule keeps its command as data, an array of words (argv, never a shell
-- string), in the schedule's row: its jobs go to the internal queue 'cron:commands' and carry
-- only the schedule's name and tick, and the worker of pgcoord cron run reads the command
-- from here when it runs one. So only who may change cron_schedules (the schema owner)
-- decides what runs; a producer that can enqueue jobs cannot smuggle a command in.

ALTER TABLE @S@.cron_schedules
    ADD COLUMN command      text[]  CHECK (command IS NULL OR (cardinality(command) BETWEEN 1 AND 1024
                                           AND array_position(command, NULL) IS NULL
                                           AND command[1] <> '')),
    ADD COLUMN max_attempts integer NOT NULL DEFAULT 0 CHECK (max_attempts BETWEEN 0 AND 1000000),
    ADD CONSTRAINT cron_schedules_command_queue CHECK (command IS NULL OR queue = 'cron:commands');

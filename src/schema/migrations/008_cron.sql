-- 008_cron: cron schedules fired by any number of schedulers, once per tick, on the database clock.
-- The schema placeholder is replaced by the quoted schema name.
--
-- A tick is due when next_tick <= now() on the server; the hosts' clocks decide nothing. A
-- scheduler fires due schedules in one transaction: it locks them FOR UPDATE SKIP LOCKED,
-- computes the following tick with the host's tzdata, records each tick in cron_ticks,
-- enqueues its job into the schedule's queue and moves next_tick, all or nothing. The row
-- lock makes two schedulers never work on one schedule at once; the primary key of
-- cron_ticks (schedule, tick_at) makes a tick fire once even if that were ever to fail.
-- The scheduler that fired a tick decided the next one, so hosts never disagree about it.
--
-- The tables are the schema owner's only (the worker role of pgcoord init --worker-role gets
-- no grant on them): schedules decide what runs, so only the administrator changes them.

CREATE TABLE @S@.cron_schedules (
    name            text        PRIMARY KEY
                                CHECK (name <> '' AND octet_length(name) <= 100
                                       AND name !~ '[[:space:][:cntrl:]]'),
    expr            text        NOT NULL CHECK (expr <> '' AND octet_length(expr) <= 1024),
    tz              text        NOT NULL DEFAULT 'UTC' CHECK (tz <> '' AND octet_length(tz) <= 255),
    queue           text        NOT NULL CHECK (queue <> '' AND octet_length(queue) <= 128),
    payload         jsonb       NOT NULL DEFAULT '{}' CHECK (jsonb_typeof(payload) = 'object'),
    catch_up        text        NOT NULL DEFAULT 'skip' CHECK (catch_up IN ('skip', 'once', 'all')),
    catch_up_max    integer     NOT NULL DEFAULT 100 CHECK (catch_up_max BETWEEN 1 AND 1000),
    catch_up_window interval    NOT NULL DEFAULT '1 hour' CHECK (catch_up_window > '0'),
    overlap         text        NOT NULL DEFAULT 'allow' CHECK (overlap IN ('allow', 'skip')),
    jitter          interval    NOT NULL DEFAULT '0' CHECK (jitter >= '0'),
    paused          boolean     NOT NULL DEFAULT false,
    next_tick       timestamptz NOT NULL,
    last_tick       timestamptz,
    last_outcome    text,
    fired           bigint      NOT NULL DEFAULT 0,
    missed          bigint      NOT NULL DEFAULT 0,
    skipped         bigint      NOT NULL DEFAULT 0,
    last_fired_at   timestamptz,
    created_at      timestamptz NOT NULL DEFAULT clock_timestamp(),
    updated_at      timestamptz NOT NULL DEFAULT clock_timestamp(),
    last_scheduler  text,
    seen_at         timestamptz
);
COMMENT ON TABLE @S@.cron_schedules IS
    'pgcoord: cron schedules; a tick is due when next_tick <= now() on the server';

-- The due scan: unpaused schedules by next tick.
CREATE INDEX cron_schedules_due ON @S@.cron_schedules (next_tick) WHERE NOT paused;

-- One row per tick (a row with ticks > 1 stands for a gap of missed ticks, from tick_at on).
-- Kept: the last 1000 rows per schedule (the scheduler trims older ones as it fires).
CREATE TABLE @S@.cron_ticks (
    schedule text        NOT NULL REFERENCES @S@.cron_schedules (name) ON DELETE CASCADE,
    tick_at  timestamptz NOT NULL,
    fired_at timestamptz NOT NULL DEFAULT now(),
    outcome  text        NOT NULL
                         CHECK (outcome IN ('enqueued', 'skipped-overlap', 'missed', 'triggered')),
    ticks    integer     NOT NULL DEFAULT 1 CHECK (ticks >= 1),
    job_id   bigint,
    PRIMARY KEY (schedule, tick_at)
);
COMMENT ON TABLE @S@.cron_ticks IS
    'pgcoord: what became of each cron tick; the primary key makes a tick fire once';

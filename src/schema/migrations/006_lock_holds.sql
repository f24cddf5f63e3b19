-- 006_lock_holds: when a session took an advisory lock, for the locks taken with
-- PGC_LOCK_RECORD (pgcoord run takes its locks so). The server keeps when a wait began
-- (pg_locks.waitstart) but not when a lock was granted, and the holder's own activity
-- (pg_stat_activity.state_change, its heartbeats) says nothing about it.
-- The schema placeholder is replaced by the quoted schema name.
--
-- A row names its session by pid and backend_start, so that a pid reused by a later session
-- never inherits a row: a row whose session is gone matches no holder, and the next recording
-- deletes it. The key is the lock's pg_locks identity (classid, objid, objsubid), which covers
-- both key spaces.
CREATE TABLE @S@.lock_holds (
    pid           integer     NOT NULL,
    backend_start timestamptz NOT NULL,
    classid       oid         NOT NULL,
    objid         oid         NOT NULL,
    objsubid      smallint    NOT NULL,
    acquired_at   timestamptz NOT NULL DEFAULT clock_timestamp(),
    PRIMARY KEY (pid, backend_start, classid, objid, objsubid)
);
COMMENT ON TABLE @S@.lock_holds IS
    'pgcoord: when each session that recorded it took an advisory lock (pgcoord run)';

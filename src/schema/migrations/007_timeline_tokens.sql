-- 007_timeline_tokens: fencing tokens that never repeat across a failover.
-- The schema placeholder is replaced by the quoted schema name.
--
-- The problem. A grant bumps the per-name token and commits on the primary. With asynchronous
-- replication a grant that committed but was never streamed is lost with the primary, and
-- after a promotion the next grant would hand out the same token again: two holders, one
-- token, and fence_check() could not tell them apart.
--
-- The fold. Every promotion starts a new timeline, a number that only grows along a server's
-- history (it is in the WAL file names). Each timeline T owns the band of tokens
-- [(T - 1) << 40, T << 40): a grant takes greatest(last token + 1, (T - 1) << 40). Every token
-- issued on timeline T, replicated or lost, is below T << 40, so the first grant on timeline
-- T + 1 (or any later one) is above all of them. On timeline 1, the band starts at 0 and
-- tokens are 1, 2, 3, ... as before this migration; existing small tokens jump up once, at
-- the first grant of each name after the first promotion (allowed: tokens never go down; the
-- guard trigger of 003 refuses any lowering).
--
-- Limits. A band holds 2^40 (about 1.1e12) grants per name per timeline; a name that used
-- them all would carry on into the next band and lose the guarantee for the next failover (at
-- a grant per millisecond that takes 35 years). Timelines go up to 2^23 (8388608) before a
-- token would not fit in a bigint; grants refuse beyond. Two servers promoted from the same
-- history onto the same timeline number (a split brain: two standbys promoted at once, each
-- taking timeline T + 1) share a band and can issue the same token: the fold protects against
-- lost commits, not against two primaries. A database restored into a new cluster whose
-- timeline is lower than the one its tokens came from keeps tokens above its band: they still
-- grow, but a failover there can repeat tokens until the timeline catches up.
--
-- The timeline is read from the WAL insert position, pg_walfile_name(pg_current_wal_lsn()):
-- executable by every role on PostgreSQL 13 to 17, and it names the new timeline as soon as
-- the promotion ends (the checkpoint's timeline in pg_control_checkpoint() lags until the
-- first checkpoint after a fast promotion). Both refuse during recovery, where no grant can
-- be written anyway.
--
-- The hold-back. A holder whose lease, or whose latest renewal, was lost with the old primary
-- may still be acting: it stops at its own deadline, at most one TTL after its last renewal,
-- hence at most one TTL after the old primary's last commit. So on a new timeline, a name
-- whose last token belongs to an earlier timeline (or that has no row: its first grant may
-- have been lost) is not granted before one TTL (the larger of the request's and the last
-- grant's) has passed since this timeline's first grant attempt, recorded in the timelines
-- table; that instant is no earlier than the promotion, so the wait is on the safe side. The
-- answer meanwhile is granted = false with expires_at = the instant the hold-back ends, so
-- campaigns sleep until then. Renewals of leases the new primary knows go on as usual, and
-- fence_next() is not held back: an advisory lock is no longer held once its primary is gone,
-- and pgcoord run stops its command when it sees the lock lost. The timeline current when
-- this migration runs counts as settled, so upgrading never holds a grant back.
CREATE TABLE @S@.timelines (
    timeline       bigint      PRIMARY KEY CHECK (timeline > 0),
    first_grant_at timestamptz NOT NULL
);
COMMENT ON TABLE @S@.timelines IS
    'pgcoord: when each server timeline saw its first lease grant; grants of older names wait one TTL from it';

-- The timeline as server_timeline() reads it, written out: a migration runs before the
-- functions (src/schema/functions/) are created.
INSERT INTO @S@.timelines (timeline, first_grant_at)
VALUES (('x' || substr(pg_walfile_name(pg_current_wal_lsn()), 1, 8))::bit(32)::bigint, '-infinity');

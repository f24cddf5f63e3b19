-- 003_lease: leases on the database clock, fencing tokens, and fence_check() for writers.
-- The schema placeholder is replaced by the quoted schema name.
--
-- One row per name, kept for ever: token is the last fencing token handed out for the name,
-- by a lease grant (kind 'lease') or by fence_next() for an advisory-lock holder (kind 'lock').
-- A grant bumps the token in the same statement that checks the lease is free, and commits
-- with synchronous_commit at least 'local', so a token that reached a client is on disk: after
-- a crash or a restart the next token is still greater. Rows cannot be deleted and a token
-- cannot be lowered (the trigger of src/schema/functions/leases_guard.sql), so nothing can hand out a smaller token.
--
-- Locking protocol. fence_check() reads the row FOR KEY SHARE inside the writer's transaction.
-- A grant locks the row FOR UPDATE (it assigns the key column, see lease_acquire), which waits
-- for every open transaction that checked the previous token: once a new token is granted, no
-- write guarded by an older token can still commit. Renewals update only non-key columns
-- (FOR NO KEY UPDATE), which does not conflict with FOR KEY SHARE, so writers never delay the
-- holder's renewals.
CREATE TABLE @S@.leases (
    name        text        PRIMARY KEY CHECK (name <> '' AND octet_length(name) <= 200),
    token       bigint      NOT NULL CHECK (token > 0),
    kind        text        NOT NULL CHECK (kind IN ('lease', 'lock')),
    holder      text        NOT NULL CHECK (octet_length(holder) <= 200),
    granted_at  timestamptz NOT NULL,
    renewed_at  timestamptz NOT NULL,
    expires_at  timestamptz,            -- NULL once released, and for kind 'lock'
    ttl_ms      bigint      CHECK (ttl_ms > 0),
    released_at timestamptz,
    CHECK (kind = 'lease' OR expires_at IS NULL)
);
COMMENT ON TABLE @S@.leases IS
    'pgcoord: leases and fencing tokens, one row per name; tokens only grow';

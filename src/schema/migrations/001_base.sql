-- 001_base: the name registry for advisory lock keys.
-- The schema placeholder is replaced by the quoted schema name.
CREATE TABLE @S@.lock_names (
    key        bigint      PRIMARY KEY,
    name       text        NOT NULL UNIQUE CHECK (name <> ''),
    created_at timestamptz NOT NULL DEFAULT clock_timestamp()
);
COMMENT ON TABLE @S@.lock_names IS
    'pgcoord: advisory lock keys and the names they were hashed from';

-- Records that lock name p_name hashes to key p_key (the client computes the key: XXH64 of the
-- name, docs/PROTOCOL.md), so that two names on one key are an error rather than a silently
-- shared lock. One row always: whether this call recorded the pair, and what the registry held
-- before it for p_key (recorded_name) and for p_name (recorded_key); each is unique, so each is
-- one value or NULL. Not inserted, with recorded_name <> p_name or recorded_key <> p_key: a
-- collision. Not inserted and both NULL: another session recorded one of them after this
-- statement's snapshot was taken; a new call sees it.
CREATE OR REPLACE FUNCTION @S@.lock_name_register(p_key bigint, p_name text)
RETURNS TABLE (inserted boolean, recorded_name text, recorded_key bigint) LANGUAGE sql AS $pgc$
    WITH ins AS (
        INSERT INTO @S@.lock_names (key, name) VALUES (p_key, p_name)
        ON CONFLICT DO NOTHING RETURNING key
    )
    SELECT EXISTS (SELECT 1 FROM ins),
           (SELECT n.name FROM @S@.lock_names n WHERE n.key = p_key),
           (SELECT n.key FROM @S@.lock_names n WHERE n.name = p_name)
$pgc$;

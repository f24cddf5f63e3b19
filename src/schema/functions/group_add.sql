-- Creates an open job group: when it is closed and each of its members has ended, one job
-- is enqueued into p_queue, its payload p_payload (a JSON object, NULL: {}) with a member
-- "group": {"name", "succeeded", "failed", "cancelled"}. Refuses a name in use (23505).
CREATE OR REPLACE FUNCTION @S@.group_add(p_name text, p_queue text, p_payload jsonb DEFAULT NULL)
RETURNS void LANGUAGE plpgsql AS $pgc$
BEGIN
    IF p_name IS NULL OR p_name = '' OR octet_length(p_name) > 128 THEN
        RAISE EXCEPTION 'the group name must be 1 to 128 bytes' USING ERRCODE = '22023';
    END IF;
    IF p_queue IS NULL OR p_queue = '' OR octet_length(p_queue) > 128 THEN
        RAISE EXCEPTION 'the on-complete queue name must be 1 to 128 bytes' USING ERRCODE = '22023';
    END IF;
    IF p_payload IS NOT NULL AND jsonb_typeof(p_payload) <> 'object' THEN
        RAISE EXCEPTION 'the on-complete payload must be a JSON object, not %', jsonb_typeof(p_payload)
            USING ERRCODE = '22023';
    END IF;
    INSERT INTO @S@.job_groups (name, on_complete_queue, payload)
    VALUES (p_name, p_queue, coalesce(p_payload, '{}'));
EXCEPTION WHEN unique_violation THEN
    RAISE EXCEPTION 'a job group named "%" exists already', p_name USING ERRCODE = '23505';
END
$pgc$;

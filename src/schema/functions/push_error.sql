-- Appends one error to a job's short error history (the last 5).
CREATE OR REPLACE FUNCTION @S@.push_error(errors jsonb, attempt integer, message text)
RETURNS jsonb LANGUAGE sql IMMUTABLE AS $pgc$
    SELECT coalesce(jsonb_agg(e ORDER BY n), '[]'::jsonb)
      FROM jsonb_array_elements(coalesce(errors, '[]'::jsonb)
                                || jsonb_build_array(jsonb_build_object('attempt', attempt,
                                                                        'error', message)))
           WITH ORDINALITY AS t(e, n)
     WHERE n > jsonb_array_length(coalesce(errors, '[]'::jsonb)) + 1 - 5
$pgc$;

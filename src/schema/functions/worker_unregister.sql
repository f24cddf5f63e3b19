-- Removes a worker's registration (worker_register()) when it stops listening.
CREATE OR REPLACE FUNCTION @S@.worker_unregister(p_channel text)
RETURNS void LANGUAGE plpgsql AS $pgc$
BEGIN
    DELETE FROM @S@.workers w WHERE w.channel = p_channel;
END
$pgc$;

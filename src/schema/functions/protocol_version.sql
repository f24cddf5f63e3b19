-- The version of the protocol this schema speaks (docs/PROTOCOL.md): every client checks it
-- once per connection and refuses a schema whose version it does not speak. It changes when a
-- documented function's signature or behaviour changes.
CREATE OR REPLACE FUNCTION @S@.protocol_version() RETURNS integer
LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $pgc$
    SELECT 1
$pgc$;

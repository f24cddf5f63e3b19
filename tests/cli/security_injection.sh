# security_injection.sh - SQL fragments, quotes, backslashes, Unicode and binary junk given to
# the tool as queue names, unique keys, payloads, lock names, lease names and schema names are
# stored byte for byte or refused with one clear message; a canary table and the pgcoord tables
# are intact afterwards
. "$(dirname "$0")/lib.sh"
skip_without_pg
export PGCOORD_DSN=$PGCOORD_TEST_DSN
S=pgc_secinj_$$
C=pgc_secinj_canary_$$
cleanup() {
	psql_q "DO \$c\$ DECLARE n text; BEGIN
		FOR n IN SELECT nspname FROM pg_namespace WHERE nspname LIKE '%\_$$' LOOP
			EXECUTE format('DROP SCHEMA %I CASCADE', n);
		END LOOP; END \$c\$" >/dev/null 2>&1
	psql_q "DROP TABLE IF EXISTS public.$C" >/dev/null 2>&1
	rm -rf "$TMP"
}
trap cleanup EXIT
psql_q "CREATE TABLE public.$C (secret text); INSERT INTO public.$C VALUES ('canary')" >/dev/null
run 0 "$PG" init --schema "$S"
tables_before=$(psql_q "SELECT string_agg(relname, ',' ORDER BY relname) FROM pg_class WHERE relnamespace = '$S'::regnamespace")

hex() { printf '%s' "$1" | od -An -tx1 | tr -d ' \n'; }
# db_hex SQL: the hex bytes of the one text value SQL returns (empty when no row).
db_hex() { psql_q "SELECT encode(convert_to(($1), 'UTF8'), 'hex')"; }
# json_str TEXT: TEXT as a JSON string (the hostile values below have no control characters).
json_str() { local s=${1//\\/\\\\}; s=${s//\"/\\\"}; printf '"%s"' "$s"; }

hostile=(
	"'); DROP TABLE public.$C; --"
	"\"; DROP TABLE public.$C; --"
	"x' || (SELECT secret FROM public.$C) || '"
	'back\slash \'"'"' \" \\ end'
	'$1 $$ $pgc$ %s %n %% @S@ @schema@ :var :"var"'
	"ünïcödé 名前 🚀 ‮evil"
	"E'\\x41'; COMMIT; DROP SCHEMA public CASCADE; --"
	"$(printf 'tab\there \001\002\037\177 end')"
)
badutf=$(printf 'bad \xff\xfe \xc3\x28 utf8')

stored=0
i=0
for h in "${hostile[@]}"; do
	i=$((i + 1))
	want=$(hex "$h")
	# Queue name, unique key and payload.
	case $h in
	*$'\001'*) payload='{"v":"junk"}' ;;
	*) payload="{\"v\":$(json_str "$h")}" ;;
	esac
	run 0 "$PG" --json queue enqueue "$h" --schema "$S" --unique-key "$h" --payload "$payload"
	id=$(grep -oE '"id":[0-9]+' "$TMP/out" | head -1 | cut -d: -f2)
	[ -n "$id" ] || { cat "$TMP/out"; fail "no id for hostile $i"; }
	[ "$(db_hex "SELECT queue FROM $S.jobs WHERE id = $id")" = "$want" ] || fail "queue name $i not stored exactly"
	[ "$(db_hex "SELECT unique_key FROM $S.jobs WHERE id = $id")" = "$want" ] || fail "unique key $i not stored exactly"
	case $h in
	*$'\001'*) ;;
	*) [ "$(db_hex "SELECT payload->>'v' FROM $S.jobs WHERE id = $id")" = "$want" ] || fail "payload $i not stored exactly" ;;
	esac
	# The same key again is a duplicate (exit 1), not a second job.
	run 1 "$PG" queue enqueue "$h" --schema "$S" --unique-key "$h" --payload '{}'
	err_has "already pending or running"
	[ "$(psql_q "SELECT count(*) FROM $S.jobs WHERE id >= $id")" = 1 ] || fail "unique key $i did not hold"
	# Shown back by the tool as JSON, the name intact.
	run 0 "$PG" --json queue show "$id" --schema "$S"
	run 0 "$PG" queue pause "$h" --schema "$S"
	[ "$(db_hex "SELECT name FROM $S.queues WHERE paused")" = "$want" ] || fail "paused queue $i is not the one named"
	run 0 "$PG" queue resume "$h" --schema "$S"

	# Lock name: recorded in the registry exactly.
	run 0 "$PG" run --schema "$S" -w 10s "$h" -- true
	[ "$(psql_q "SELECT count(*) FROM $S.lock_names WHERE encode(convert_to(name, 'UTF8'), 'hex') = '$want'")" = 1 ] ||
		fail "lock name $i not recorded exactly"
	run 0 "$PG" lock status --schema "$S" "$h"

	# Lease name: granted and released under exactly that name.
	if [ ${#h} -le 200 ]; then
		run 0 "$PG" elect --schema "$S" --ttl 10s "$h" -- true
		[ "$(psql_q "SELECT count(*) FROM $S.leases WHERE encode(convert_to(name, 'UTF8'), 'hex') = '$want'")" = 1 ] ||
			fail "lease name $i not stored exactly"
	fi

	# Schema name: created exactly, or refused as a usage error before anything is created.
	sname="${h:0:40}_$$"
	"$PG" --json init --schema "$sname" >"$TMP/out" 2>"$TMP/err"
	rc=$?
	case $rc in
	0)
		[ "$(psql_q "SELECT count(*) FROM pg_namespace WHERE encode(convert_to(nspname, 'UTF8'), 'hex') = '$(hex "$sname")'")" = 1 ] ||
			fail "schema $i not created under its exact name"
		run 0 "$PG" queue enqueue q --schema "$sname" --payload '{}'
		stored=$((stored + 1))
		;;
	64)
		err_lines 1
		err_has "^pgcoord: schema name must not contain"
		[ "$(psql_q "SELECT count(*) FROM pg_namespace WHERE encode(convert_to(nspname, 'UTF8'), 'hex') = '$(hex "$sname")'")" = 0 ] ||
			fail "refused schema $i was created"
		;;
	*) cat "$TMP/err"; fail "init --schema hostile $i exited $rc" ;;
	esac
done
[ "$stored" -ge 4 ] || fail "only $stored hostile schema names were accepted"

# Invalid UTF-8: a name is bad input, refused before the server (64); data in a payload is
# refused by the server's encoding check (65); one line, nothing stored.
jobs_before=$(psql_q "SELECT count(*) FROM $S.jobs")
run 64 "$PG" queue enqueue "$badutf" --schema "$S" --payload '{}'
err_has "not valid UTF-8: byte 0xff at offset 4"
run 65 "$PG" queue enqueue q --schema "$S" --payload "{\"v\":\"$badutf\"}"
err_has "22021"
err_lines 1
run 64 "$PG" run --schema "$S" -w 1s "$badutf" -- true
run 64 "$PG" elect --schema "$S" --ttl 10s "$badutf" -- true
[ "$(psql_q "SELECT count(*) FROM $S.jobs")" = "$jobs_before" ] || fail "a bad name enqueued something"

# Intact: the canary and every pgcoord table.
[ "$(psql_q "SELECT secret FROM public.$C")" = canary ] || fail "the canary changed"
[ "$(psql_q "SELECT string_agg(relname, ',' ORDER BY relname) FROM pg_class WHERE relnamespace = '$S'::regnamespace")" = "$tables_before" ] ||
	fail "the pgcoord tables changed"
[ "$(psql_q "SELECT count(*) FROM pg_namespace WHERE nspname = 'public'")" = 1 ] || fail "public is gone"
exit 0

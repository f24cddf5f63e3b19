# schema_upgrade.sh - a schema made by the pgcoord from before function files and checksums
# (commit 1617607) is upgraded by init: its functions and triggers end up those of a fresh
# schema, its migrations get their checksums, and the queue works. A migration whose recorded
# checksum changed is reported by init (which still exits 0) and by doctor; a function whose
# definition changed is re-created.
. "$(dirname "$0")/lib.sh"
skip_without_pg
export PGCOORD_DSN=$PGCOORD_TEST_DSN
OLD_COMMIT=1617607

# The schema as that commit's init made it, without building its tool: each of its migration
# files, run as its runner ran them (one transaction each, the schema name for @S@, a row in
# the migrations table), from the repository's history.
missing() {
	[ "${PGCOORD_CI:-}" = 1 ] && fail "$1"
	echo "skipped: $1" >&2
	exit 77
}
git -C "$SRC" rev-parse -q --verify "$OLD_COMMIT^{commit}" >/dev/null 2>&1 ||
	missing "commit $OLD_COMMIT is not in $SRC (a git checkout with its history is needed)"
old_init() {
	local schema=$1 f name n
	psql_q "CREATE SCHEMA IF NOT EXISTS $schema; CREATE TABLE $schema.migrations (
	          version integer PRIMARY KEY, name text NOT NULL,
	          applied_at timestamptz NOT NULL DEFAULT clock_timestamp(),
	          applied_by text NOT NULL DEFAULT current_user)" >/dev/null || fail "old init: migrations table"
	for f in $(git -C "$SRC" ls-tree -r --name-only "$OLD_COMMIT" | grep -E '^src/(sql|schema/migrations)/[0-9]{3}_[a-z_0-9]+\.sql$' | sort); do
		name=$(basename "$f" .sql)
		n=$((10#${name%%_*}))
		{
			echo "BEGIN;"
			git -C "$SRC" show "$OLD_COMMIT:$f" | sed "s/@S@/$schema/g"
			echo ";"
			echo "INSERT INTO $schema.migrations (version, name) VALUES ($n, '${name#*_}');"
			echo "COMMIT;"
		} | psql -X -q -v ON_ERROR_STOP=1 -d "$PGCOORD_TEST_DSN" >/dev/null 2>"$TMP/old.err" ||
			{ cat "$TMP/old.err"; fail "old init: $f"; }
	done
}

up=pgc_up_$$
fresh=pgc_fresh_$$
cleanup() {
	psql_q "DROP SCHEMA IF EXISTS $up CASCADE; DROP SCHEMA IF EXISTS $fresh CASCADE" >/dev/null 2>&1
	rm -rf "$TMP"
}
trap cleanup EXIT

old_init "$up"
[ "$(psql_q "SELECT max(version) FROM $up.migrations")" = 14 ] || fail "the old tool did not make version 14"
psql_q "SELECT 1 FROM pg_attribute a JOIN pg_class c ON c.oid = a.attrelid
         WHERE c.relnamespace = '$up'::regnamespace AND c.relname = 'migrations' AND a.attname = 'checksum'" |
	grep -q 1 && fail "the old schema already records checksums"
# A job enqueued before the upgrade is worked after it.
psql_q "SELECT * FROM $up.enqueue('old', ARRAY['{\"n\":1}'], NULL, 0, clock_timestamp(), 25)" >/dev/null ||
	fail "enqueue on the old schema"

# The migrations since 14 apply, then the functions.
latest=$(ls "$SRC"/src/schema/migrations/*.sql | wc -l)
run 0 "$PG" init --schema "$up"
out_has "version $latest"
[ -s "$TMP/err" ] && { cat "$TMP/err"; fail "init of an untouched old schema reported something"; }
run 0 "$PG" init --schema "$fresh"

# Every function and trigger as in a fresh schema, the schema's name aside.
defs() {
	psql_q "SELECT replace(p.proname || '(' || pg_get_function_identity_arguments(p.oid) || ') ', '$1', 'S')
	               || md5(replace(pg_get_functiondef(p.oid), '$1', 'S'))
	          FROM pg_proc p WHERE p.pronamespace = '$1'::regnamespace
	        UNION ALL
	        SELECT 'trigger ' || t.tgname || ' ' || md5(replace(pg_get_triggerdef(t.oid), '$1', 'S'))
	          FROM pg_trigger t JOIN pg_class c ON c.oid = t.tgrelid
	         WHERE c.relnamespace = '$1'::regnamespace AND NOT t.tgisinternal
	        ORDER BY 1"
}
defs "$up" >"$TMP/up.defs"
defs "$fresh" >"$TMP/fresh.defs"
[ "$(wc -l <"$TMP/fresh.defs")" -ge 30 ] || { cat "$TMP/fresh.defs"; fail "a fresh schema has too few functions"; }
diff "$TMP/fresh.defs" "$TMP/up.defs" || fail "the upgraded schema's functions differ from a fresh one's"
[ "$(psql_q "SELECT count(*) FROM pg_proc WHERE pronamespace = '$up'::regnamespace AND proname = 'enqueue'")" = 1 ] ||
	fail "enqueue has more than one signature"

# The checksums: recorded for every migration, the same as a fresh schema's.
[ "$(psql_q "SELECT count(*) FROM $up.migrations WHERE checksum IS NULL")" = 0 ] || fail "a migration has no checksum"
same=$(psql_q "SELECT count(*) FROM $up.migrations u JOIN $fresh.migrations f USING (version)
                WHERE u.checksum = f.checksum")
[ "$same" = "$latest" ] || fail "$same of $latest migration checksums match a fresh schema's"
nf=$(psql_q "SELECT count(*) FROM $up.function_versions")
[ "$nf" = "$(ls "$SRC"/src/schema/functions/*.sql | wc -l)" ] || fail "function_versions has $nf rows"

# The queue works on the upgraded schema: the old job and a new one, a keyed one, and a
# dependent one (its triggers).
run 0 "$PG" queue enqueue new --schema "$up" --payload '{"n":2}' --key k1
run 0 timeout 60 "$PG" worker --once --schema "$up" --queue old -- true
run 0 timeout 60 "$PG" worker --once --schema "$up" --queue new -- true
[ "$(psql_q "SELECT string_agg(queue || ':' || status, ',' ORDER BY queue) FROM $up.job_history")" = \
	"new:succeeded,old:succeeded" ] || fail "the jobs did not succeed: $(psql_q "SELECT * FROM $up.job_history")"
[ "$(psql_q "SELECT count(*) FROM $up.jobs")" = 0 ] || fail "jobs left"

# A function whose recorded checksum differs is re-created, and nothing else is.
psql_q "CREATE OR REPLACE FUNCTION $up.push_error(errors jsonb, attempt integer, message text)
        RETURNS jsonb LANGUAGE sql IMMUTABLE AS 'SELECT NULL::jsonb';
        UPDATE $up.function_versions SET checksum = 'edited' WHERE name = 'push_error'" >/dev/null
before=$(psql_q "SELECT string_agg(name || applied_at, ',' ORDER BY name) FROM $up.function_versions WHERE name <> 'push_error'")
run 0 "$PG" init --schema "$up"
defs "$up" >"$TMP/up.defs"
diff "$TMP/fresh.defs" "$TMP/up.defs" || fail "push_error was not re-created"
after=$(psql_q "SELECT string_agg(name || applied_at, ',' ORDER BY name) FROM $up.function_versions WHERE name <> 'push_error'")
[ "$before" = "$after" ] || fail "init re-created functions whose checksum matched"

# A migration changed after it was applied: init says so and exits 0; doctor has a finding.
psql_q "UPDATE $up.migrations SET checksum = repeat('0', 64) WHERE version = 11" >/dev/null
run 0 "$PG" init --schema "$up"
err_has "migration 011_flow.sql was changed after schema $up applied it"
err_lines 1
run 0 "$PG" --json init --schema "$up"
python3 -c '
import json, sys
d = json.load(open(sys.argv[1]))
c = d["changed_migrations"]
assert [x["version"] for x in c] == [11] and c[0]["name"] == "flow" and c[0]["recorded"] == "0" * 64, c
assert len(c[0]["shipped"]) == 64, c
' "$TMP/out" || { cat "$TMP/out"; fail "init --json does not name the changed migration"; }
run 0 "$PG" --json init --schema "$fresh"
grep -q '"changed_migrations":\[\]' "$TMP/out" || { cat "$TMP/out"; fail "a fresh schema reports changes"; }
"$PG" --json doctor --schema "$up" --no-pooler-check >"$TMP/out" 2>"$TMP/err"
python3 -c '
import json, sys
d = json.load(open(sys.argv[1]))
fs = [f for f in d["findings"] if "011_flow" in f["message"]]
assert len(fs) == 1 and fs[0]["severity"] == "warning", d
assert "UPDATE" in fs[0]["fix"] and "version = 11" in fs[0]["fix"], fs
' "$TMP/out" || { cat "$TMP/out" "$TMP/err"; fail "doctor does not report the changed migration"; }
echo ok

# cron_sync.sh - cron add's refusals (usage 64, bad data 65, exists 1) and cron sync: a file
# made the database's schedules, idempotent, all or nothing, errors naming the line
. "$(dirname "$0")/lib.sh"
skip_without_pg
export PGCOORD_DSN=$PGCOORD_TEST_DSN
own_schema pgc_cron_sync
q() { psql_q "$1"; }

# add: what is wrong is named, nothing is written.
run 64 "$PG" cron add a '* * * * *' --schema "$S"
err_has "missing --queue"
run 64 "$PG" cron add a '0 25 * * *' --queue q --schema "$S"
err_has 'hour field "25"'
run 64 "$PG" cron add a '* * * * *' --queue q --tz Europe/Berln --schema "$S"
err_has "unknown time zone"
run 64 "$PG" cron add a '* * * * *' --queue q --catch-up sometimes --schema "$S"
err_has "skip, once or all"
run 64 "$PG" cron add a '* * * * *' --queue q --catch-up-max 0 --schema "$S"
run 64 "$PG" cron add 'a b' '* * * * *' --queue q --schema "$S"
err_has "white space"
run 64 "$PG" cron add a '* * * * *' --queue q --schema "$S" --limit 3
err_has "does not take --limit"
run 65 "$PG" cron add a '* * * * *' --queue q --payload '{"x":' --schema "$S"
run 65 "$PG" cron add a '* * * * *' --queue q --payload '[1,2]' --schema "$S"
err_has "JSON object"
[ "$(q "SELECT count(*) FROM $S.cron_schedules")" = 0 ] || fail "a refused add wrote a schedule"
run 65 "$PG" cron pause nosuch --schema "$S"
err_has "no schedule nosuch"
run 65 "$PG" cron history nosuch --schema "$S"

# sync: added, then nothing to do.
cat >"$TMP/crontab" <<'TAB'
# nightly backup, Berlin time
backup   30 2 * * *   queue=ops tz=Europe/Berlin catch-up=once payload={"kind": "backup", "keep": 7}

report   @hourly      queue=reports overlap=skip jitter=30s
fast     */10 * * * * *  queue=ops catch-up=all catch-up-window=5m catch-up-max=10
TAB
run 0 "$PG" cron sync "$TMP/crontab" --schema "$S"
out_has "^added backup"
out_has "^added report"
out_has "^added fast"
[ "$(q "SELECT tz || ' ' || catch_up || ' ' || (payload->>'keep') FROM $S.cron_schedules WHERE name = 'backup'")" = \
	"Europe/Berlin once 7" ] || fail "backup stored as $(q "SELECT * FROM $S.cron_schedules WHERE name = 'backup'")"
[ "$(q "SELECT overlap || ' ' || jitter FROM $S.cron_schedules WHERE name = 'report'")" = "skip 00:00:30" ] ||
	fail "report's options"
nt=$(q "SELECT next_tick FROM $S.cron_schedules WHERE name = 'backup'")
run 0 "$PG" cron sync "$TMP/crontab" --schema "$S"
[ "$(grep -c '^unchanged' "$TMP/out")" = 3 ] || { cat "$TMP/out"; fail "a second sync changed something"; }
[ "$(q "SELECT next_tick FROM $S.cron_schedules WHERE name = 'backup'")" = "$nt" ] || fail "an unchanged schedule moved"
# A change, a removal: --dry-run says so and changes nothing; then for real.
grep -v '^fast' "$TMP/crontab" | sed 's/@hourly/@daily/' >"$TMP/crontab2"
run 0 "$PG" cron sync "$TMP/crontab2" --dry-run --schema "$S"
out_has "would be changed report"
out_has "would be removed fast"
[ "$(q "SELECT expr FROM $S.cron_schedules WHERE name = 'report'")" = "@hourly" ] || fail "--dry-run changed report"
[ "$(q "SELECT count(*) FROM $S.cron_schedules")" = 3 ] || fail "--dry-run removed a schedule"
run 0 "$PG" --json cron sync "$TMP/crontab2" --schema "$S"
out_has '"added":0,"changed":1,"removed":1,"unchanged":1'
[ "$(q "SELECT string_agg(name || '=' || expr, ',' ORDER BY name) FROM $S.cron_schedules")" = "backup=30 2 * * *,report=@daily" ] ||
	fail "after sync: $(q "SELECT name, expr FROM $S.cron_schedules")"
# A bad line anywhere: nothing changes, the line is named.
printf 'report @hourly queue=reports\nnew 0 0 * * * queue=x\nbroken 0 25 * * * queue=x\n' >"$TMP/bad"
run 65 "$PG" cron sync "$TMP/bad" --schema "$S"
err_has "bad:3: schedule broken: hour field"
printf 'report @hourly queue=reports\nnew 0 0 * * * queue=x payload=[1]\n' >"$TMP/bad"
run 65 "$PG" cron sync "$TMP/bad" --schema "$S"
err_has "bad:2: schedule new: payload must be a JSON object"
printf 'a @daily queue=x\na @hourly queue=y\n' >"$TMP/bad"
run 65 "$PG" cron sync "$TMP/bad" --schema "$S"
err_has "bad:2: schedule a is already on line 1"
printf 'a @daily\n' >"$TMP/bad"
run 65 "$PG" cron sync "$TMP/bad" --schema "$S"
err_has "bad:1: schedule a: no queue=Q"
printf 'a @daily queue=x colour=blue\n' >"$TMP/bad"
run 65 "$PG" cron sync "$TMP/bad" --schema "$S"
err_has 'unknown option "colour"'
# A file without a schedule would remove every one: refused unless --allow-empty.
: >"$TMP/empty"
run 65 "$PG" cron sync "$TMP/empty" --schema "$S"
err_has "has no schedule: syncing it would remove every schedule; pass --allow-empty"
printf '# only a comment\n\n' >"$TMP/empty"
run 65 "$PG" cron sync - --schema "$S" <"$TMP/empty"
[ "$(q "SELECT string_agg(name || '=' || expr, ',' ORDER BY name) FROM $S.cron_schedules")" = "backup=30 2 * * *,report=@daily" ] ||
	fail "a refused sync changed the schedules"
# Quiet, before or after the subcommand: only the changes.
cp "$TMP/crontab2" "$TMP/crontab3"
echo 'extra @daily queue=x' >>"$TMP/crontab3"
run 0 "$PG" -q cron sync "$TMP/crontab3" --schema "$S"
[ "$(cat "$TMP/out")" = "added extra" ] || { cat "$TMP/out"; fail "-q printed more than the change"; }
run 0 "$PG" cron sync "$TMP/crontab2" -q --schema "$S"
[ "$(cat "$TMP/out")" = "removed extra" ] || { cat "$TMP/out"; fail "sync -q printed more than the change"; }
run 0 "$PG" cron sync "$TMP/crontab2" --quiet --schema "$S"
[ ! -s "$TMP/out" ] || { cat "$TMP/out"; fail "an unchanged sync printed under --quiet"; }
# --allow-empty removes them all, as asked.
run 0 "$PG" cron sync "$TMP/empty" --allow-empty --dry-run --schema "$S"
out_has "would be removed backup"
[ "$(q "SELECT count(*) FROM $S.cron_schedules")" = 2 ] || fail "--dry-run removed schedules"
# A trigger is the last run, shown with its own outcome (not a tick's time with the trigger's
# outcome): every form pairs the two from one row.
run 0 "$PG" cron trigger backup --schema "$S"
run 0 "$PG" cron show backup --schema "$S"
out_has "^last run: *[0-9][0-9-]*T[0-9:]*+0[12]:00 (triggered)$"
run 0 "$PG" --json cron list --schema "$S"
python3 - "$TMP/out" <<'PY' || fail "cron list --json pairs the last run and its outcome wrongly: $(cat "$TMP/out")"
import json, sys
s = next(x for x in json.load(open(sys.argv[1]))["schedules"] if x["name"] == "backup")
assert s["last_outcome"] == "triggered" and s["last_tick"] is not None, s
PY
# list and show name them.
run 0 "$PG" cron list --schema "$S"
out_has "^backup .*Europe/Berlin"
run 0 "$PG" --json cron show backup --schema "$S"
out_has '"catch_up":"once"'
out_has '"payload":{"keep": 7, "kind": "backup"}'
exit 0

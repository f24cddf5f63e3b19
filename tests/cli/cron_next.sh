# cron_next.sh - pgcoord cron next: output, --json, -n, the --from forms, bad expressions and
# zones; then the TZif reader against date(1): the local time and offset pgcoord gives for
# instants from 1970 to 2100 in zones of every kind, and at both sides of every transition
# zdump(8) lists (past the tables' end, that is the footer's POSIX rule). No database.
. "$(dirname "$0")/lib.sh"
unset PGCOORD_DSN DATABASE_URL TZDIR
export PGHOST=127.0.0.1 PGPORT=1 # a database is never needed; if one were asked for, it fails

# Human output: one local time a line, with the offset.
run 0 "$PG" cron next '30 2 * * *' --tz Europe/Berlin --from 2026-03-27 -n 4
printf '%s\n' 2026-03-27T02:30:00+01:00 2026-03-28T02:30:00+01:00 2026-03-29T03:00:00+02:00 \
	2026-03-30T02:30:00+02:00 >"$TMP/want"
diff "$TMP/want" "$TMP/out" || fail "30 2 * * * across Berlin's spring-forward"
[ ! -s "$TMP/err" ] || { cat "$TMP/err"; fail "stderr is not empty"; }
run 0 "$PG" cron next '*/30 2 * * *' --tz Europe/Berlin --from 2026-10-25 -n 5
printf '%s\n' 2026-10-25T02:00:00+02:00 2026-10-25T02:30:00+02:00 2026-10-25T02:00:00+01:00 \
	2026-10-25T02:30:00+01:00 2026-10-26T02:00:00+01:00 >"$TMP/want"
diff "$TMP/want" "$TMP/out" || fail "*/30 2 * * * across Berlin's fall-back"
run 0 "$PG" cron next '30 1 * * *' --tz America/New_York --from 2026-10-31T12:00:00Z -n 2
printf '%s\n' 2026-11-01T01:30:00-04:00 2026-11-02T01:30:00-05:00 >"$TMP/want"
diff "$TMP/want" "$TMP/out" || fail "30 1 * * * across New York's fall-back"
run 0 "$PG" cron next '15 2 * * *' --tz Australia/Lord_Howe --from 2026-10-03T00:00:00Z -n 2
printf '%s\n' 2026-10-04T02:30:00+11:00 2026-10-05T02:15:00+11:00 >"$TMP/want"
diff "$TMP/want" "$TMP/out" || fail "15 2 * * * across Lord Howe's half-hour spring-forward"
run 0 "$PG" cron next '0 0 29 2 *' --from 2096-03-01 -n 2
printf '%s\n' 2104-02-29T00:00:00+00:00 2108-02-29T00:00:00+00:00 >"$TMP/want"
diff "$TMP/want" "$TMP/out" || fail "leap days skip 2100"
run 0 "$PG" cron next '*/20 59 1 29 3 *' --tz Europe/Berlin --from 2026-03-29 -n 4
printf '%s\n' 2026-03-29T01:59:00+01:00 2026-03-29T01:59:20+01:00 2026-03-29T01:59:40+01:00 \
	2027-03-29T01:59:00+02:00 >"$TMP/want"
diff "$TMP/want" "$TMP/out" || fail "seconds field"

# -n: default 5, 1 to 1000; the default --from is now.
now=$(date +%s)
run 0 "$PG" cron next '* * * * *'
[ "$(wc -l <"$TMP/out")" -eq 5 ] || { cat "$TMP/out"; fail "default count is not 5"; }
first=$(date -d "$(head -n 1 "$TMP/out")" +%s)
[ "$first" -gt "$now" ] && [ "$first" -le $((now + 120)) ] || fail "the first time $first is not just after now ($now)"
run 0 "$PG" cron next '* * * * * *' -n 1000 --from @0
[ "$(wc -l <"$TMP/out")" -eq 1000 ] || fail "-n 1000 did not print 1000 lines"
[ "$(tail -n 1 "$TMP/out")" = 1970-01-01T00:16:40+00:00 ] || fail "1000th second after @0: $(tail -n 1 "$TMP/out")"
run 0 "$PG" cron next '@hourly' --count=2 --from @0
[ "$(wc -l <"$TMP/out")" -eq 2 ] || fail "--count=2"
for n in 0 1001 -1 x ''; do
	run 64 "$PG" cron next '* * * * *' -n "$n"
	err_has "pgcoord: -n must be an integer from 1 to 1000"
done
# Fewer than N before the year 10000: what there is, and a note.
run 0 "$PG" cron next '0 0 29 2 *' --from 9990-01-01 -n 5
[ "$(wc -l <"$TMP/out")" -eq 2 ] || fail "expected 2 leap days before 10000"
err_has "only 2 fire times: .* before the year 10000"

# --json: one object, the schedule and its times.
run 0 "$PG" cron next '30 2 * * *' --tz Europe/Berlin --from 2026-03-28T12:00:00Z -n 2 --json
python3 - "$TMP/out" <<'EOF' || fail "--json output"
import json, sys
d = json.load(open(sys.argv[1]))
assert d["expression"] == "30 2 * * *" and d["normalized"] == "30 2 * * *", d
assert d["tz"] == "Europe/Berlin" and d["seconds"] is False and d["complete"] is True, d
assert d["from"] == "2026-03-28T13:00:00+01:00", d
assert d["next"] == [
    {"time": "2026-03-29T03:00:00+02:00", "unix": 1774746000, "utc": "2026-03-29T01:00:00Z",
     "utc_offset_s": 7200, "abbrev": "CEST", "dst": True},
    {"time": "2026-03-30T02:30:00+02:00", "unix": 1774830600, "utc": "2026-03-30T00:30:00Z",
     "utc_offset_s": 7200, "abbrev": "CEST", "dst": True}], d["next"]
EOF
[ "$(wc -l <"$TMP/out")" -eq 1 ] || fail "--json is not one line"
run 0 "$PG" --json cron next '@weekly' --from 2026-01-01T00:00:00Z -n 1
out_has '"normalized":"0 0 \* \* 0"'
out_has '"time":"2026-01-04T00:00:00+00:00"'
run 64 "$PG" --json cron next '0 25 * * *'
out_has '"error":{"message":"hour field \\"25\\": out of range 0-23"'
out_has '"exit":64'

# --from: every form; a skipped local time means the gap's end, a repeated one its first pass.
from_is() { # from_is TZ TEXT WANT: the first fire of "* * * * * *" after TEXT is one second after WANT
	run 0 "$PG" cron next '* * * * * *' --tz "$1" --from "$2" -n 1
	local got
	got=$(date -d "$(cat "$TMP/out")" +%s)
	[ "$got" -eq $(($3 + 1)) ] || fail "--from \"$2\" in $1: $(cat "$TMP/out") is not @$(($3 + 1))"
}
from_is UTC 2026-03-29T01:00:00Z 1774746000
from_is UTC 2026-03-29T03:00:00+02:00 1774746000
from_is UTC '2026-03-29 03:00+0200' 1774746000
from_is UTC 2026-03-28T20:00:00-05 1774746000
from_is UTC @1774746000 1774746000
from_is Europe/Berlin '2026-03-29 03:00' 1774746000
from_is Europe/Berlin '2026-03-29 02:30' 1774746000 # in the gap: its end
from_is Europe/Berlin '2026-10-25 02:30:00' 1792888200 # repeated: the first, 00:30Z
from_is Europe/Berlin 2026-03-29 1774738800 # midnight, 23:00Z the day before
for bad in now yesterday epoch infinity -infinity 2026-02-30 '2026-03-29 24:00' 2026-03-29T12:00+2 @x ''; do
	run 64 "$PG" cron next '* * * * *' --from "$bad"
	err_has '^pgcoord: --from'
done
# A duration is from now, as for every TIME option.
now=$(date +%s)
run 0 "$PG" --json cron next '* * * * * *' --from 1h -n 1
got=$(python3 -c 'import json, sys; print(json.load(open(sys.argv[1]))["next"][0]["unix"])' "$TMP/out")
[ "$got" -ge $((now + 3600)) ] && [ "$got" -le $((now + 3700)) ] || fail "--from 1h: $(cat "$TMP/out")"

# Bad expressions: exit 64, the field, its text and what is allowed.
bad_expr() { run 64 "$PG" cron next "$1"; err_has "^pgcoord: $2"; err_has "Try \"pgcoord cron next --help\""; }
bad_expr '0 25 * * *' 'hour field "25": out of range 0-23'
bad_expr '60 * * * *' 'minute field "60": out of range 0-59'
bad_expr '* * 0 * *' 'day-of-month field "0": out of range 1-31'
bad_expr '* * * 13 *' 'month field "13": out of range 1-12'
bad_expr '* * * * 8' 'day-of-week field "8": out of range 0-7'
bad_expr '61 * * * * *' 'second field "61": out of range 0-59'
bad_expr '* * * FOO *' 'month field "FOO": is not a month name (JAN..DEC or 1-12)'
bad_expr '*/0 * * * *' 'minute field "\*/0": step 0 is out of range 1-59'
bad_expr '5-1 * * * *' 'minute field "5-1": is a range whose start 5 is after its end 1'
bad_expr '* * * *' 'expected 5 fields (minute hour day-of-month month day-of-week) or 6'
bad_expr '0 0 30 2 *' '"0 0 30 2 \*" can never fire: February has no day 30'
bad_expr '0 0 31 4,6 *' '"0 0 31 4,6 \*" can never fire: no month of the month field "4,6"'
bad_expr '@reboot' '@reboot is not supported'
bad_expr '@often' 'unknown macro "@often"'
bad_expr '' 'cron expression is empty'
bad_expr 'MON-FRI/2 * * * * *' 'second field "MON-FRI/2": MON is not a number'
run 64 "$PG" cron next 30 2 '*' '*' '*'
err_has 'give the schedule as one quoted argument'
run 64 "$PG" cron next
err_has 'missing SCHEDULE'

# Zones: unknown, unsafe, not a zone.
run 64 "$PG" cron next '* * * * *' --tz Europe/Berln
err_has 'unknown time zone "Europe/Berln" (no such zone in /usr/share/zoneinfo'
for z in /etc/passwd ../../etc/passwd Europe/../../etc/passwd 'Europe/Berlin;id' Europe; do
	run 64 "$PG" cron next '* * * * *' --tz "$z"
	err_has '^pgcoord: time zone'
done
run 64 "$PG" cron next '* * * * *' --tz ''
err_has 'tz must not be empty'
TZDIR="$TMP" run 64 "$PG" cron next '* * * * *' --tz Europe/Berlin
err_has "no such zone in $TMP"
TZ=Asia/Tokyo run 0 "$PG" cron next '0 12 * * *' --from 2026-01-01T00:00:00Z -n 1
out_has '^2026-01-01T12:00:00+00:00$' # TZ is never read: the default is UTC

# A schedule that DST leaves without a real time: exit 65, said why.
run 65 "$PG" cron next '*/30 2 25-31 3 */7' --tz Europe/Berlin
err_has 'does not fire in the 400 years after .* in Europe/Berlin'

# Subcommands.
run 64 "$PG" cron frobnicate '* * * * *'
err_has 'unknown cron subcommand "frobnicate"'
run 64 "$PG" cron
err_has 'no cron subcommand given'
run 0 "$PG" cron --help
out_has '^  next SCHEDULE'
run 0 "$PG" cron next --help
out_has 'tz=ZONE'

# ---- the TZif reader against date(1) and zdump(8) --------------------------------------------
command -v zdump >/dev/null || fail "zdump is not installed (Debian: libc-bin)"
zones="Europe/Berlin America/New_York Australia/Lord_Howe Pacific/Chatham Europe/Dublin
	Africa/Casablanca America/Santiago America/Sao_Paulo Asia/Tehran Asia/Kolkata Pacific/Apia
	Antarctica/Troll America/St_Johns"
# Every third transition (one process each; a stride of 3 alternates between the two
# directions of DST), every 75th under memcheck, where each run costs a second; and always the
# first, for the zones with few.
stride=3
[ -n "${PGCOORD_VALGRIND:-}" ] && stride=75
checked=0
# as_date ZONE: the instants (@N lines) on stdin as ISO local times as date prints them, with the offset's seconds only when not 0.
# date prints "-00:00" (RFC 3339's unknown offset) where tzdata says "-00", such as Troll
# before 2005; pgcoord prints the offset, +00:00.
as_date() {
	TZ="$1" date -f - +%Y-%m-%dT%H:%M:%S%::z | sed -E -e 's/([+-][0-9]{2}:[0-9]{2}):00$/\1/' -e 's/-00:00$/+00:00/'
}
for z in $zones; do
	[ -f "/usr/share/zoneinfo/$z" ] || fail "$z is not in the host's tzdata"
	# 1. Twice a month from 1970 to 2100, 1000 at a time.
	: >"$TMP/pairs"
	from=@0
	while :; do
		run 0 "$PG" --json cron next '7 5 1,15 * *' --tz "$z" --from "$from" -n 1000
		grep -oE '"time":"[^"]*","unix":-?[0-9]+' "$TMP/out" |
			sed -E 's/"time":"([^"]*)","unix":(-?[0-9]+)/\2 \1/' >>"$TMP/pairs"
		last=$(tail -n 1 "$TMP/pairs" | cut -d' ' -f1)
		[ "$last" -lt 4133980800 ] || break # 2101-01-01
		from=@$last
	done
	# 2. Both sides of every transition from 1970 to 2100.
	zdump -v -c 1970,2101 "$z" | grep ' UT = ' | sed -E 's/^[^ ]+ +(.*) UT = .*/\1/' |
		TZ=UTC date -f - +%s | awk -v s="$stride" 'NR % 2 == 0 && (NR == 2 || (NR / 2) % s == 0)' >"$TMP/trans"
	[ -s "$TMP/trans" ] || [ "$z" = Asia/Kolkata ] || fail "$z: zdump lists no transitions"
	while read -r t; do
		run 0 "$PG" --json cron next '* * * * * *' --tz "$z" --from "@$((t - 2))" -n 2
		grep -oE '"time":"[^"]*","unix":-?[0-9]+' "$TMP/out" |
			sed -E 's/"time":"([^"]*)","unix":(-?[0-9]+)/\2 \1/' >>"$TMP/pairs"
	done <"$TMP/trans"
	cut -d' ' -f2 "$TMP/pairs" >"$TMP/ours"
	cut -d' ' -f1 "$TMP/pairs" | sed 's/^/@/' | as_date "$z" >"$TMP/theirs"
	n=$(wc -l <"$TMP/ours")
	[ "$n" -gt 3000 ] || fail "$z: only $n instants"
	if ! cmp -s "$TMP/ours" "$TMP/theirs"; then
		paste -d' ' "$TMP/pairs" "$TMP/theirs" | awk '$2 != $3' | head -n 10
		fail "$z: pgcoord and date(1) disagree (unix, pgcoord, date above)"
	fi
	checked=$((checked + n))
done
echo "ok: $checked instants in $(echo $zones | wc -w) zones agree with date(1)"

# cluster.sh - pgcoord on a Patroni cluster through a multi-host DSN with
# target_session_attrs=read-write: info and a write reach the primary; after a switchover and
# after a crash of the primary, they reach the new one within a bounded time, and meanwhile
# fail only as "try again later" (69); no committed write is lost (synchronous mode); the
# crashed node rejoins as a standby. A leader elected before both moves, whose lease outlasts
# either (--ttl 30s renewed every 2 s: 18 s from its last renewal to --kill-after), keeps
# leading through them: one term, one fencing token, its fenced writes
# going on on each new primary (its lease is in the WAL the standby had). Two cron schedulers
# fire an every-second schedule through both moves: each second's tick once, none missing.
. "$(dirname "$0")/lib.sh"
ha_start --nodes 2 --sync
run 0 "$PG" -d "$HA_DSN" init
hq "CREATE TABLE ha_where (n serial PRIMARY KEY, port int NOT NULL)" >/dev/null || fail "create ha_where"
writes=0
# lands_on HOST:PORT: pgcoord info works and a write through pgcoord lands on that node.
lands_on() {
	"$PG" -d "$HA_DSN" info >"$TMP/out" 2>"$TMP/err" || return 1
	grep -q "^server: *PostgreSQL" "$TMP/out" || return 1
	"$PG" -d "$HA_DSN" tx -c "INSERT INTO ha_where (port) SELECT inet_server_port()" >/dev/null 2>"$TMP/err" || return 1
	writes=$((writes + 1))
	[ "$(nq "$1" "SELECT port FROM ha_where ORDER BY n DESC LIMIT 1")" = "${1#*:}" ]
}
# reach_within SECONDS HOST:PORT WHAT
reach_within() {
	local t0 end
	t0=$(now_s)
	end=$((SECONDS + $1))
	until lands_on "$2"; do
		[ $SECONDS -lt "$end" ] || { cat "$TMP/out" "$TMP/err"; fail "pgcoord did not reach the primary $2 within $1 s $3"; }
		sleep 0.2
	done
	note "pgcoord reached the primary $2 $(secs_since "$t0") s $3"
}
# probe_codes FILE: pgcoord info every 0.2 s until FILE.stop exists, each exit status a line.
probe_codes() {
	while [ ! -e "$1.stop" ]; do
		timeout 30 "$PG" -d "$HA_DSN" info >/dev/null 2>>"$1.err"
		echo $? >>"$1"
		sleep 0.2
	done
}
check_codes() {
	local bad
	bad=$(grep -v -x -e 0 -e 69 "$1" | sort | uniq -c)
	[ -z "$bad" ] || { cat "$1.err"; fail "pgcoord info exited with other than 0 or 69 $2: $bad"; }
	note "pgcoord info $2: $(sort "$1" | uniq -c | awk '{printf "%s%s x exit %s", s, $1, $2; s=", "}')"
	sed 's/[0-9][0-9]*/N/g' "$1.err" | sort | uniq -c | sort -rn | head -n 3 | sed 's/^/  /'
}

first=$(ha_leader) || fail "no leader"
reach_within 10 "$first" "at start"

hq "CREATE TABLE led (n bigserial PRIMARY KEY, token bigint NOT NULL, port int NOT NULL DEFAULT inet_server_port())" >/dev/null ||
	fail "create led"
cat >"$TMP/leader.sh" <<'SH'
#!/bin/sh
echo "lead $PGCOORD_FENCE_TOKEN" >>"$TMP/terms"
while :; do
	timeout 10 psql -X -q "$HA_DSN" -c "BEGIN; SELECT pgcoord.fence_check('ha-leader', $PGCOORD_FENCE_TOKEN);
		INSERT INTO led (token) VALUES ($PGCOORD_FENCE_TOKEN); COMMIT" >/dev/null 2>&1
	sleep 0.2
done
SH
chmod +x "$TMP/leader.sh"
TMP=$TMP "$PG" -d "$HA_DSN" elect --ttl 30s --renew-every 2s ha-leader -- "$TMP/leader.sh" 2>"$TMP/elect.err" &
epid=$!
# Two cron schedulers fire an every-second schedule through both moves, catching up what the
# outages held back: every second from the first tick to the last fires once.
run 0 "$PG" -d "$HA_DSN" cron add ha-tick '* * * * * *' --queue ticks --catch-up all
"$PG" -d "$HA_DSN" cron run 2>"$TMP/cron1.err" &
cpid1=$!
"$PG" -d "$HA_DSN" cron run 2>"$TMP/cron2.err" &
cpid2=$!
ha_on_exit() { kill -TERM "$epid" "$cpid1" "$cpid2" 2>/dev/null; }
# led_on HOST:PORT [N]: the primary has writes the leader made on that node (after row N).
led_on() { [ "$(hq "SELECT count(*) FROM led WHERE port = ${1#*:} AND n > ${2:-0}" 2>/dev/null)" -gt 0 ] 2>/dev/null; }
end=$((SECONDS + 30))
until led_on "$first"; do [ $SECONDS -lt $end ] || { cat "$TMP/elect.err"; fail "no fenced write by the leader within 30 s"; }; sleep 0.2; done

# move KIND FROM: pg-ha KIND (switchover or failover) while the probe writes; the new primary,
# which must not be FROM and must take writes within 30 s, goes into $moved_to.
move() {
	local kind=$1 from=$2 probe
	probe_codes "$TMP/$kind" &
	probe=$!
	note "pg-ha $kind"
	"$HA" "$kind" "$HA_DIR" || fail "pg-ha $kind"
	moved_to=$(ha_leader) || fail "no leader after the $kind"
	[ "$moved_to" != "$from" ] || fail "the $kind left $from the primary"
	reach_within 30 "$moved_to" "after the $kind"
	touch "$TMP/$kind.stop"
	wait "$probe"
	check_codes "$TMP/$kind" "during the $kind"
}
move switchover "$first"
second=$moved_to
led_before_second=$(hq "SELECT coalesce(max(n), 0) FROM led")
move failover "$second"
third=$moved_to
led_before_third=$(hq "SELECT coalesce(max(n), 0) FROM led")
# Synchronous mode: every write pgcoord saw committed is on the new primary.
got=$(hq "SELECT count(*) FROM ha_where")
[ "$got" -ge "$writes" ] || fail "the new primary has $got of the $writes committed writes"
# The leader, still the one: its writes reach each new primary, with its one token.
for node_since in "$second $led_before_second" "$third $led_before_third"; do
	read -r node since <<<"$node_since"
	end=$((SECONDS + 30))
	until led_on "$node" "$since"; do
		kill -0 "$epid" 2>/dev/null || { cat "$TMP/elect.err"; fail "elect exited"; }
		[ $SECONDS -lt $end ] || { cat "$TMP/elect.err"; fail "the leader wrote nothing on $node within 30 s"; }
		sleep 0.2
	done
done
kill -0 "$epid" 2>/dev/null || { cat "$TMP/elect.err"; fail "elect exited"; }
[ "$(wc -l <"$TMP/terms")" = 1 ] || { cat "$TMP/terms" "$TMP/elect.err"; fail "the leader's command was started again: leadership was lost"; }
[ "$(hq "SELECT count(DISTINCT token) FROM led")" = 1 ] || fail "the leader's writes carry more than one token"
note "the leader kept leading through both moves with token $(cut -d' ' -f2 "$TMP/terms"): $(hq "SELECT string_agg(port || ' x ' || c, ', ') FROM (SELECT port, count(*) c FROM led GROUP BY port) x") writes"
kill -TERM "$epid"
for _ in $(seq 1 100); do kill -0 "$epid" 2>/dev/null || break; sleep 0.1; done
wait "$epid"
est=$?
[ "$est" = 143 ] || { cat "$TMP/elect.err"; fail "elect exited $est after SIGTERM, expected 143 (its command's)"; }
# The ticks: fired again on the new primary (one after the failover's first write), each
# second once, none missing, each with its job.
read -r fo_ts _ <"$HA_DIR/last-failover"
end=$((SECONDS + 30))
until [ "$(hq "SELECT count(*) FROM pgcoord.cron_ticks WHERE schedule = 'ha-tick' AND tick_at > to_timestamp($fo_ts) + interval '2 s'")" -gt 0 ]; do
	kill -0 "$cpid1" 2>/dev/null && kill -0 "$cpid2" 2>/dev/null || { cat "$TMP"/cron*.err; fail "a cron scheduler exited"; }
	[ $SECONDS -lt $end ] || { cat "$TMP"/cron*.err; fail "no tick fired within 30 s of the failover"; }
	sleep 0.2
done
kill -TERM "$cpid1" "$cpid2"
for p in "$cpid1" "$cpid2"; do
	wait "$p"
	st=$?
	[ "$st" = 0 ] || { cat "$TMP"/cron*.err; fail "cron run exited $st after SIGTERM"; }
done
read -r rows distinct span others jobs < <(hq "SELECT count(*) FILTER (WHERE outcome = 'enqueued'),
        count(DISTINCT tick_at) FILTER (WHERE outcome = 'enqueued'),
        extract(epoch FROM max(tick_at) - min(tick_at))::int + 1,
        count(*) FILTER (WHERE outcome <> 'enqueued'),
        (SELECT count(*) FROM pgcoord.jobs WHERE queue = 'ticks')
   FROM pgcoord.cron_ticks WHERE schedule = 'ha-tick'" | tr '|' ' ')
[ "$rows" = "$distinct" ] && [ "$rows" = "$span" ] && [ "$others" = 0 ] && [ "$jobs" = "$rows" ] ||
	{ hq "SELECT tick_at, outcome, ticks FROM pgcoord.cron_ticks WHERE schedule = 'ha-tick' ORDER BY tick_at" | tail -n 40
	  cat "$TMP"/cron*.err; fail "cron ticks: $rows fired, $distinct distinct, $span seconds spanned, $others not fired, $jobs jobs"; }
note "cron: $rows ticks over $span seconds through both moves, each fired once with its job"
tl=$(nq "$third" "SELECT ('x' || substr(pg_walfile_name(pg_current_wal_lsn()), 1, 8))::bit(32)::int")
[ "$tl" -ge 3 ] || fail "timeline $tl after a switchover and a failover, expected 3 or more"

note "pg-ha rejoin"

"$HA" rejoin "$HA_DIR" || fail "pg-ha rejoin"
[ "$(nq "$second" "SELECT pg_is_in_recovery()")" = t ] || fail "$second did not rejoin as a standby"
# The rejoined standby replays what the primary writes now.
hq "INSERT INTO ha_where (port) VALUES (0)" >/dev/null || fail "write after the rejoin"
want=$(hq "SELECT max(n) FROM ha_where")
end=$((SECONDS + 30))
until [ "$(nq "$second" "SELECT coalesce(max(n), 0) FROM ha_where")" = "$want" ]; do
	[ $SECONDS -lt $end ] || fail "the rejoined standby $second did not replay row $want within 30 s"
	sleep 0.2
done
reach_within 10 "$third" "after the rejoin"
"$HA" status "$HA_DIR"
echo ok

# elect_kill.sh - SIGKILL of the leader's pgcoord: its command dies with it (the process
# group), and another candidate leads within TTL + one renew interval, with a greater token.
. "$(dirname "$0")/elect_lib.sh"

ttl=2
for i in 1 2 3; do
	timeout 60 "$PG" elect --schema "$SCHEMA" --ttl ${ttl}s kill -- "$CHILD" "$LOG" 0 2>"$TMP/err$i" &
done
wait_until 10 has_starts 1 || { cat "$TMP"/err*; fail "nobody was elected"; }
sleep 0.5
first_child=$(last_child_pid)
first_token=$(last_token)
leader=$(holder_pid kill)
[ -n "$leader" ] && alive "$leader" || fail "cannot find the leader's pgcoord ($leader)"
t_kill=$(now)
kill -KILL "$leader"
wait_until 5 dead "$first_child" || fail "the leader's command (pid $first_child) survived its pgcoord"
wait_until 15 has_starts 2 || { cat "$LOG"; fail "no new leader after the leader was killed"; }
second_token=$(last_token)
[ "$second_token" -gt "$first_token" ] || fail "new token $second_token is not greater than $first_token"
# Within TTL + one renew interval (2 s + 0.67 s), plus a generous margin for a busy machine.
t_start=$(awk '$1 == "start" { t = $4 } END { print t }' "$LOG")
awk -v a="$t_kill" -v b="$t_start" 'BEGIN { d = b - a; printf "failover %.3f s\n", d; exit !(d <= 2.67 + 3) }' ||
	fail "failover took longer than TTL + renew interval + 3 s"
# The others are still candidates; stop them (SIGTERM goes to the command, which exits 0).
for p in $(jobs -p); do kill -TERM "$p" 2>/dev/null; done
wait
check_log 0.2

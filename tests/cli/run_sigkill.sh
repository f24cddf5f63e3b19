# run_sigkill.sh - pgcoord run killed by SIGKILL at random points of a run whose command forks
# grandchildren: no two holders of the lock are ever inside it at once. The lock lives as long
# as anything the command started (the grandchild keeps the session's descriptor), as flock(1)'s
# does; a contender that waits for the lock must find the critical section empty. The same for
# a command that exits normally and leaves a process behind outside its process group.
. "$(dirname "$0")/lib.sh"
. "$(dirname "$0")/run_lib.sh"
name="sigkill-$$"
D=$TMP/cs
mkdir -p "$D"
# crit SECONDS: the critical section. mkdir is atomic: a second process inside finds the
# directory there and says so.
cat >"$TMP/crit" <<'SH'
#!/bin/sh
mkdir "$CS/in" 2>/dev/null || { echo "overlap: $$ found $(cat "$CS/who" 2>/dev/null) inside" >>"$CS/bad"; exit 0; }
echo "$$" >"$CS/who"
sleep "$1"
rm -f "$CS/who"
rmdir "$CS/in"
SH
chmod +x "$TMP/crit"
export CS=$D

rounds=20
orphaned=0
for i in $(seq 1 "$rounds"); do
	# The holder: a shell that starts the critical section in the background and waits for it.
	"$PG" -q -d "$DSN" run "$name" -- sh -c "'$TMP/crit' 0.6 & wait" >/dev/null 2>&1 &
	p=$!
	# A random point: connecting, waiting, acquiring, starting the command, inside it.
	sleep "0.$(printf '%02d' $((RANDOM % 80)))"
	kill -KILL "$p" 2>/dev/null
	wait "$p" 2>/dev/null
	[ -d "$D/in" ] && orphaned=$((orphaned + 1))
	# The contender waits for the lock, and must find the section empty.
	timeout 120 "$PG" -d "$DSN" run -w 60s "$name" -- "$TMP/crit" 0.02 >"$TMP/o" 2>&1 ||
		{ cat "$TMP/o"; fail "round $i: the contender exited $?"; }
done
[ ! -s "$D/bad" ] || { cat "$D/bad"; fail "two holders were inside the lock at once"; }
# The kill must have hit inside the section often enough to mean something.
[ "$orphaned" -ge 3 ] || fail "only $orphaned of $rounds kills left the critical section running"

# What is left of the command's process group when it exits is stopped; a process that left
# the group (setsid) and still runs when the command exits keeps the lock until it ends.
# (It outlasts the 2 s that pgcoord gives the killed group's processes to be gone.)
run 0 timeout 60 "$PG" -d "$DSN" run "$name" -- sh -c "setsid -f '$TMP/crit' 5 >/dev/null 2>&1; sleep 0.3"
err_has "still hold lock"
[ -d "$D/in" ] || fail "the process left behind is not inside"
timeout 120 "$PG" -d "$DSN" run -w 60s "$name" -- "$TMP/crit" 0.02 || fail "the contender failed"
[ ! -s "$D/bad" ] || { cat "$D/bad"; fail "the lock was released under a process the command left behind"; }
# And when nothing is left behind, the lock is released at once: -n finds it free.
run 0 timeout 60 "$PG" -d "$DSN" run "$name" -- true
run 0 timeout 60 "$PG" -d "$DSN" run -n "$name" -- true
wait_sessions "$name" all 0
echo "ok: $rounds rounds, $orphaned kills inside the critical section, no overlap"

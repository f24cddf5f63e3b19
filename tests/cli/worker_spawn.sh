# worker_spawn.sh - how pgcoord worker starts a job's command: its own process group, default
# signal dispositions and an empty mask whatever the worker blocks or ignores, the job's
# variables over inherited ones of the same name, COMMAND found in PATH once and looked up
# again when that file is gone, and a clear failure once it is gone everywhere
. "$(dirname "$0")/lib.sh"
skip_without_pg
export PGCOORD_DSN=$PGCOORD_TEST_DSN
own_schema pgc_wspawn
# enq QUEUE ARGS...: enqueues one job and prints its id.
enq() { "$PG" queue enqueue "$@" --schema "$S" | sed -n 's/^enqueued job \([0-9]*\) .*/\1/p'; }

mkdir -p "$TMP/bin1" "$TMP/bin2"
cat >"$TMP/bin1/pgc-spawn-cmd" <<'SH'
#!/bin/sh
set -e
# The mask and dispositions the shell started with, read by builtins before anything forks: the
# shell blocks every signal of its own while it forks and waits for a child.
sigs=
while read -r k v; do
	case $k in SigBlk: | SigIgn:) sigs="$sigs$k	$v
" ;; esac
done </proc/$$/status
out=$OUT.$PGCOORD_JOB_ID
{
	echo "from bin1"
	echo "pid $$ pgrp $(awk '{print $5}' /proc/$$/stat)"
	printf '%s' "$sigs"
	echo "job ids $(env | grep -c '^PGCOORD_JOB_ID=') $PGCOORD_JOB_ID"
	echo "inherited $PGC_SPAWN_MARK"
	echo "stdin $(cat)"
} >"$out.tmp"
mv "$out.tmp" "$out"
SH
chmod +x "$TMP/bin1/pgc-spawn-cmd"
export OUT=$TMP/ran PGC_SPAWN_MARK=kept.$$
id1=$(enq sp --payload '{"n":1}')
[ -n "$id1" ] || fail "enqueue 1"
# An inherited PGCOORD_JOB_ID is replaced, not doubled.
PATH=$TMP/bin1:$TMP/bin2:$PATH PGCOORD_JOB_ID=bogus \
	"$PG" worker --schema "$S" --queue sp --poll 100ms --backoff 1h -- pgc-spawn-cmd 2>"$TMP/werr" &
wpid=$!
wait_query 20 "SELECT status FROM $S.job_history WHERE id = $id1" succeeded
f=$OUT.$id1
[ -s "$f" ] || fail "job $id1 left no output"
grep -q '^from bin1$' "$f" || { cat "$f"; fail "not the command of bin1"; }
read -r _ pid _ pgrp < <(grep '^pid ' "$f")
[ "$pid" = "$pgrp" ] || { cat "$f"; fail "the command is not the leader of a process group of its own"; }
# The worker blocks SIGINT, SIGTERM, SIGHUP and SIGQUIT in its threads and ignores SIGPIPE:
# the command has none of that.
grep -q '^SigBlk:[[:space:]]*0*$' "$f" || { cat "$f"; fail "the command starts with signals blocked"; }
# Signals 32 and 33 are the C library's own: no program can change them through it, so a
# worker started with them ignored (the test's runners sometimes start it so) passes that on.
# Every other one is at its default.
ign=$(sed -n 's/^SigIgn:[[:space:]]*//p' "$f")
[ -n "$ign" ] && [ $((0x$ign & ~0x180000000)) = 0 ] || { cat "$f"; fail "the command starts with signals ignored"; }
grep -q "^job ids 1 $id1\$" "$f" || { cat "$f"; fail "PGCOORD_JOB_ID: $(grep '^job ids' "$f")"; }
grep -q "^inherited kept.$$\$" "$f" || { cat "$f"; fail "the worker's environment did not reach the command"; }
grep -q '^stdin {"n": 1}$' "$f" || { cat "$f"; fail "payload: $(grep '^stdin' "$f")"; }

# The file found at start is gone: the next job looks in PATH again and finds bin2's.
sed 's/from bin1/from bin2/' "$TMP/bin1/pgc-spawn-cmd" >"$TMP/bin2/pgc-spawn-cmd"
chmod +x "$TMP/bin2/pgc-spawn-cmd"
rm "$TMP/bin1/pgc-spawn-cmd"
id2=$(enq sp --payload '{"n":2}')
[ -n "$id2" ] || fail "enqueue 2"
wait_query 20 "SELECT status FROM $S.job_history WHERE id = $id2" succeeded
grep -q '^from bin2$' "$OUT.$id2" || { cat "$OUT.$id2"; fail "the command was not looked up again"; }

# Gone everywhere: the job fails with the reason, and the worker goes on.
rm "$TMP/bin2/pgc-spawn-cmd"
id3=$(enq sp --payload '{"n":3}' --max-attempts 1)
[ -n "$id3" ] || fail "enqueue 3"
wait_query 20 "SELECT status FROM $S.job_history WHERE id = $id3" failed
[ "$(psql_q "SELECT last_error FROM $S.job_history WHERE id = $id3")" = \
  "pgc-spawn-cmd: command not found (exit 127)" ] ||
	fail "error of a vanished command: $(psql_q "SELECT last_error FROM $S.job_history WHERE id = $id3")"
kill -0 "$wpid" 2>/dev/null || { cat "$TMP/werr"; fail "the worker stopped"; }
kill -TERM "$wpid"
wait "$wpid" || { cat "$TMP/werr"; fail "worker exit status"; }
wpid=
exit 0

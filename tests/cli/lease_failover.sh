# lease_failover.sh - a lease grant and a fencing token committed on an asynchronous primary
# and never streamed are lost with it; after the standby's promotion, the next grant must
# still hand out tokens greater than the lost ones (the timeline fold of migration 007), the
# lost token must be refused by fence_check once a newer one exists, and a name last granted
# before the promotion is held back for one TTL. Runs its own primary and standby.
. "$(dirname "$0")/lib.sh"
. "$(dirname "$0")/replica_lib.sh"

pair_start
run 0 "$PG" -d "$PRI_DSN" init
# acquire DSN NAME HOLDER TTL_MS: "granted|token|holder|expires_at in ms from now"
acquire() {
	psql_at "$1" "SELECT granted, token, holder,
	    round(extract(epoch FROM expires_at - db_now) * 1000)
	    FROM pgcoord.lease_acquire('$2', '$3', $4)"
}
expect_granted() { case "$1" in t\|*) ;; *) fail "lease not granted: $1" ;; esac; }
field() { echo "$1" | cut -d'|' -f"$2"; }

# Granted, and replayed by the standby.
g=$(acquire "$PRI_DSN" job a 1000)
expect_granted "$g"
t1=$(field "$g" 2)
[ "$t1" = 1 ] || fail "first token on timeline 1 is $t1, expected 1"
f1=$(psql_at "$PRI_DSN" "SELECT pgcoord.fence_next('fence', 'runner-a')")
[ "$f1" = 1 ] || fail "first fence token is $f1"
wait_replayed
[ "$(psql_at "$SBY_DSN" "SELECT token FROM pgcoord.leases WHERE name = 'job'")" = "$t1" ] ||
	fail "the standby does not have token $t1"

# Later commits never reach the standby: the next grant (token t) is lost with the primary.
cut_stream
sleep 1.1 # a's lease (1 s) expires
g=$(acquire "$PRI_DSN" job b 60000)
expect_granted "$g"
t=$(field "$g" 2)
[ "$t" -gt "$t1" ] || fail "token $t after $t1 on the primary"
f=$(psql_at "$PRI_DSN" "SELECT pgcoord.fence_next('fence', 'runner-b')")
[ "$f" -gt "$f1" ] || fail "fence token $f after $f1 on the primary"
lost_lease=$(psql_at "$PRI_DSN" "SELECT max(token) FROM pgcoord.leases")
crash_primary
promote_standby
[ "$(psql_at "$SBY_DSN" "SELECT token FROM pgcoord.leases WHERE name = 'job'")" = "$t1" ] ||
	fail "the grant of token $t was not lost: the test did not cut replication"
tli=$(psql_at "$SBY_DSN" "SELECT substr(pg_walfile_name(pg_current_wal_lsn()), 1, 8)")
[ "$tli" = 00000002 ] || fail "timeline after the promotion is $tli, expected 2"

# The lost token is unknown on the new primary until a newer grant.
psql_at "$SBY_DSN" "SELECT pgcoord.fence_check('job', $t)" >"$TMP/out" 2>"$TMP/err" && fail "fence_check($t) passed before any new grant"
err_has "no fencing token $t was granted"

# The first grant on the new timeline is held back for one TTL (b may still be acting on its
# lost lease, by its own clock), and says until when.
g=$(acquire "$SBY_DSN" job c 1500)
case "$g" in
f\|*) ;;
*)  [ "$(field "$g" 2)" -gt "$t" ] || fail "token $(field "$g" 2) handed out again after the failover (lost: $t): $g"
	fail "grant right after the promotion was not held back: $g" ;;
esac
left=$(field "$g" 4)
[ "$left" -gt 0 ] && [ "$left" -le 1500 ] || fail "held back for $left ms, expected 1 to 1500"
# The tool says so too; with a TTL of a minute, since the hold-back is the larger of the
# request's TTL and the last grant's, so that the answer does not depend on how long the tool
# takes to start (a second or more under valgrind).
run 1 "$PG" -d "$SBY_DSN" elect --ttl 60s --wait 200ms --holder d job -- true
err_has 'not elected for "job"'
wait_granted() { g=$(acquire "$SBY_DSN" job c 1500) && case "$g" in t\|*) ;; *) false ;; esac; }
wait_for 10 wait_granted || fail "never granted after the promotion: $g"
t2=$(field "$g" 2)
[ "$t2" -gt "$t" ] || fail "token $t2 granted after the failover is not greater than the lost token $t"
[ "$t2" -gt "$lost_lease" ] || fail "token $t2 is not greater than every token seen ($lost_lease)"
[ "$t2" = $(( 1 << 40 )) ] || fail "first token on timeline 2 is $t2, expected 2^40"

# The lost holder's token is stale now; the new one passes.
psql_at "$SBY_DSN" "SELECT pgcoord.fence_check('job', $t)" >"$TMP/out" 2>"$TMP/err" && fail "fence_check($t) passed after token $t2"
err_has "stale fencing token $t"
[ "$(psql_at "$SBY_DSN" "SELECT pgcoord.fence_check('job', $t2)")" = "$t2" ] || fail "fence_check($t2) failed"

# fence_next (pgcoord run --fence) shares the fold, without a hold-back.
f2=$(psql_at "$SBY_DSN" "SELECT pgcoord.fence_next('fence', 'runner-c')")
[ "$f2" -gt "$f" ] || fail "fence token $f2 after the failover is not greater than the lost $f"
run 0 "$PG" -d "$SBY_DSN" run --fence fence2 -- sh -c 'echo "token=$PGCOORD_FENCE_TOKEN"'
out_has "token=$(( 1 << 40 ))"

# Names in the new timeline's band are granted without waiting, one by one.
g=$(acquire "$SBY_DSN" fresh e 1000)
case "$g" in t\|*) ;; *) fail "a new name waits after the hold-back ended: $g" ;; esac
psql_at "$SBY_DSN" "SELECT pgcoord.lease_release('job', $t2)" >/dev/null
g=$(acquire "$SBY_DSN" job f 1000)
expect_granted "$g"
[ "$(field "$g" 2)" = $(( t2 + 1 )) ] || fail "token after $t2 is $(field "$g" 2)"
echo "lost token $t (fence $f), after the failover $t2 (fence $f2)"

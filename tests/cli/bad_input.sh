# bad_input.sh - every command, fed hostile arguments: never a crash, one clear message, a
# documented exit status. Runs under ASan/UBSan with make asan and under memcheck with make
# valgrind. The database is unreachable on purpose: arguments that parse exit 69 before
# touching anything.
#
# bad_input.sh [PART PARTS]: the cases are dealt round-robin into PARTS parts (default 1) and
# this run takes part PART (1..PARTS), so that meson runs the parts side by side and each stays
# well inside its timeout on a loaded machine. Part 1 also runs the table of usage errors.
. "$(dirname "$0")/lib.sh"
part=${1:-1}
parts=${2:-1}
export PGCOORD_DSN="host=127.0.0.1 port=1 connect_timeout=2"
unset DATABASE_URL

big=$(head -c 120000 /dev/zero | tr '\0' 'x')          # near the kernel's 128 KiB per argument
badutf=$(printf '\xff\xfe\xc3\x28\xe2\x82')
junk=$(head -c 400 /dev/urandom | tr -d '\0' | tr -d '\n')
values=("" " " "$big" "$badutf" "$junk" "'; DROP TABLE x; --" '"quoted"' "a;b" "--" "-1" "-9223372036854775809"
	"99999999999999999999999" "0" "1e9" "0x10" "1,2,3" "NaN" "%s%n%s" "\\" "名前")
# Option values: the shapes that break parsers.
optvalues=("" "$big" "$badutf" "-1" "99999999999999999999999" "'; DROP TABLE x; --")
allowed=" 0 1 2 64 65 69 75 126 127 "
# Under memcheck each run costs a second or more: take every 6th case. Under the sanitizers
# every 3rd (each run costs some 70 ms; the fuzz target cli_args feeds the same parser far
# more cases under ASan+UBSan); make test takes them all.
stride=1
case "${PGCOORD_SANITIZE:-none}" in none | "") ;; *) stride=3 ;; esac
[ -n "${PGCOORD_VALGRIND:-}" ] && stride=6
seen=0

check() {
	# check LABEL ARGS...: runs pgcoord with ARGS and judges the outcome.
	local label=$1
	shift
	seen=$((seen + 1))
	[ $((seen % stride)) -eq 0 ] || return 0
	[ $((seen / stride % parts + 1)) -eq "$part" ] || return 0
	local t0=$SECONDS
	timeout -k 10 60 "$PG" "$@" </dev/null >"$TMP/out" 2>"$TMP/err"
	local rc=$?
	if [ "$rc" -eq 124 ] || [ "$rc" -eq 137 ]; then fail "$label: hung (stopped after 60 s)"; fi
	# A slow run is named, so that a part that nears its timeout says where its time went.
	[ $((SECONDS - t0)) -lt 10 ] || echo "slow: $label: $((SECONDS - t0)) s" >&2
	case "$allowed" in
	*" $rc "*) ;;
	*) head -c 2000 "$TMP/err"; fail "$label: exit status $rc" ;;
	esac
	if grep -q -E 'AddressSanitizer|runtime error:|LeakSanitizer|Segmentation' "$TMP/err"; then
		head -c 3000 "$TMP/err"; fail "$label: sanitizer report"
	fi
	if [ "$rc" -eq 64 ] || [ "$rc" -eq 65 ]; then
		# One clear message first, on stderr, from pgcoord.
		head -n 1 "$TMP/err" | grep -q '^pgcoord' || { head -c 2000 "$TMP/err"; fail "$label: usage error without a \"pgcoord:\" message"; }
	fi
	count=$((count + 1))
}

count=0
commands=$("$PGCOORD_BIN" --help | awk '/^Commands:/ {on=1; next} /^$/ {on=0} on {print $1}')
for cmd in $commands; do
	opts=$("$PGCOORD_BIN" "$cmd" --help | grep -oE -- '--[a-z][a-z-]*=[A-Z]+' | sed 's/=.*//' | sort -u)
	flags=$("$PGCOORD_BIN" "$cmd" --help | grep -oE -- '--[a-z][a-z-]*' | sort -u | grep -v -x -e --help -e --yes -e --watch -e --follow)
	for v in "${values[@]}"; do
		check "$cmd <value>" "$cmd" "$v"
		check "$cmd <value> -- true" "$cmd" "$v" -- true
	done
	for o in $opts; do
		for v in "${optvalues[@]}"; do
			check "$cmd $o=<value>" "$cmd" "$o=$v" name -- true
		done
	done
	# Every flag alone and with a stray argument, and unknown options.
	for f in $flags; do
		check "$cmd $f" "$cmd" "$f"
	done
	check "$cmd --no-such-option" "$cmd" --no-such-option
	check "$cmd -Z" "$cmd" -Z
done
# --wait-for-db takes an optional value, which the --help scan above does not see.
for v in "${optvalues[@]}"; do
	check "run --wait-for-db=<value>" run "--wait-for-db=$v" name -- true
	check "elect --wait-for-db=<value>" elect "--wait-for-db=$v" name -- true
	check "worker --wait-for-db=<value>" worker --queue q "--wait-for-db=$v" -- true
done
# The queue's bulk forms and their filters (without a terminal they also need --yes).
for sub in "cancel --all q" "retry --all q" "purge"; do
	for o in --status --older-than --key-prefix --batch-size; do
		for v in "${optvalues[@]}"; do
			# shellcheck disable=SC2086
			check "queue $sub $o=<value>" queue $sub "$o=$v" --yes
		done
	done
	# shellcheck disable=SC2086
	check "queue $sub without --yes" queue $sub
done
for v in "${values[@]}"; do
	check "queue cancel --all <value>" queue cancel --all "$v" --yes
	check "queue enqueue q --max-deferrals <value>" queue enqueue q --max-deferrals "$v"
done
check "worker --once <stray>" worker --once --queue q stray
# cron next: the schedule and each option, with every shape of value (no database either way).
for v in "${values[@]}"; do
	check "cron next <value>" cron next "$v"
	check "cron next <value> --tz UTC" cron next "$v" --tz UTC
	check "cron next --tz=<value>" cron next '*/5 * * * *' "--tz=$v"
	check "cron next --from=<value>" cron next '*/5 * * * *' "--from=$v"
	check "cron next -n <value>" cron next '*/5 * * * *' -n "$v"
	check "cron <value> as subcommand" cron "$v" '* * * * *'
done
# cron schedules: names, expressions, payloads and every option of add; the other subcommands'
# operands; sync files made of hostile lines (refused, naming the line, before any connection).
for v in "${values[@]}"; do
	check "cron add <value> SCHEDULE" cron add "$v" '* * * * *' --queue q
	check "cron add NAME <value>" cron add n "$v" --queue q
	check "cron add --payload=<value>" cron add n '* * * * *' --queue q "--payload=$v"
	for o in --tz --queue --catch-up --catch-up-window --catch-up-max --overlap --jitter --max-attempts; do
		check "cron add $o=<value>" cron add n '* * * * *' --queue q "$o=$v"
	done
	for sub in show pause resume trigger remove history sync; do
		check "cron $sub <value>" cron "$sub" "$v"
	done
	check "cron history --limit=<value>" cron history n "--limit=$v"
	check "cron run --batch=<value>" cron run "--batch=$v"
	check "cron run --wait-for-db=<value>" cron run "--wait-for-db=$v"
	for o in --concurrency --timeout --grace --lookahead; do
		check "cron run $o=<value>" cron run "$o=$v"
	done
	check "cron add NAME SCHEDULE -- <value>" cron add n '* * * * *' -- "$v"
	printf 'n * * * * * -- %s\n' "$v" >"$TMP/crontab"
	check "cron sync FILE with command <value>" cron sync "$TMP/crontab"
	printf 'ok * * * * * queue=q\n%s\n' "$v" >"$TMP/crontab"
	check "cron sync FILE with <value>" cron sync "$TMP/crontab"
	printf 'n %s queue=q\n' "$v" >"$TMP/crontab"
	check "cron sync FILE with schedule <value>" cron sync "$TMP/crontab"
	printf 'n * * * * * queue=q payload=%s\n' "$v" >"$TMP/crontab"
	check "cron sync FILE with payload <value>" cron sync "$TMP/crontab"
done
# web: the address, the refresh, auth files that are missing, open to others, empty or odd.
for v in "${values[@]}"; do
	check "web --listen=<value>" web "--listen=$v"
	check "web --listen=127.0.0.1:<value>" web "--listen=127.0.0.1:$v"
	check "web --refresh=<value>" web "--refresh=$v"
	check "web --auth-file=<value>" web "--auth-file=$v" --allow-actions
	printf '%s\n' "$v" >"$TMP/auth"
	chmod 600 "$TMP/auth"
	check "web --auth-file with <value>" web --auth-file "$TMP/auth" --allow-actions
	printf 'name:%s\n' "$v" >"$TMP/auth"
	check "web --auth-file with name:<value>" web --auth-file "$TMP/auth"
	chmod 644 "$TMP/auth"
	check "web --auth-file open to others" web --auth-file "$TMP/auth"
done
check "web --auth-file a directory" web --auth-file "$TMP"
# Flow control: every shape of value for each option, then the refusals that must be usage
# errors naming what was wrong, before any connection (nothing enqueued or changed).
for v in "${values[@]}"; do
	check "queue enqueue q --key <value>" queue enqueue q --key "$v"
	for o in --key-limit --rate --key-rate --fair; do
		check "queue config q $o <value>" queue config q "$o" "$v"
	done
	for o in --limit --weight --rate; do
		check "queue limit q k $o <value>" queue limit q k "$o" "$v"
	done
	check "queue limit <value> <value>" queue limit "$v" "$v"
	# Dependencies and groups.
	check "queue enqueue q --after <value>" queue enqueue q --after "$v"
	check "queue enqueue q --after 1 --on-dep-failure <value>" queue enqueue q --after 1 --on-dep-failure "$v"
	check "queue enqueue q --group <value>" queue enqueue q --group "$v"
	check "queue group add <value> --on-complete-queue <value>" queue group add "$v" --on-complete-queue "$v"
	check "queue group <value> <value>" queue group "$v" "$v"
done
key129=$(head -c 129 /dev/zero | tr '\0' 'k')
[ "$part" -eq 1 ] && while IFS='|' read -r what args; do
	# shellcheck disable=SC2086
	run 64 "$PG" queue $args
	err_has "$what"
done <<EOF
--key-limit must be an integer from 1|config q --key-limit 0
--key-limit must be an integer from 1|config q --key-limit -3
--limit must be an integer from 1|limit q k --limit 0
--weight must be an integer from 1|limit q k --weight 0
--weight must be an integer from 1|limit q k --weight 10001
the number of starts must be at least 1|config q --rate 0/1s
the interval must be at least 1ms|config q --key-rate 5/0s
the number of starts must be a positive integer|config q --rate x/1s
the interval after the / is missing|config q --rate 5/
expected N/DURATION|limit q k --rate 5
--fair must be on or off|config q --fair maybe
--key must not be empty|enqueue q --key=
--key is 129 bytes, longer than 128|enqueue q --key $key129
the key is 129 bytes, longer than 128|limit q $key129
need a QUEUE|config --key-limit 2
need a KEY|limit q --limit 2
--key-limit does not apply to queue enqueue|enqueue q --key-limit 2
--after must be job ids separated by commas|enqueue q --after 1,,2
--after must be job ids separated by commas|enqueue q --after=
--after: job ID must be a positive integer, not "0"|enqueue q --after 0
--after: job ID must be a positive integer, not "x"|enqueue q --after 3,x
--on-dep-failure must be cancel or run|enqueue q --after 1 --on-dep-failure maybe
--on-dep-failure needs --after|enqueue q --on-dep-failure run
--group must not be empty|enqueue q --group=
--after does not apply to queue stats|stats --after 1
--group does not apply to queue list|list --group g
group add needs --on-complete-queue|group add g
--on-complete-queue does not apply to queue enqueue|enqueue q --on-complete-queue x
unknown group subcommand "frob"|group frob g
a group name is required|group close
EOF

# Global options.
for v in "${values[@]}"; do
	check "-d <value> info" -d "$v" info
	check "<value> as command" "$v"
done
echo "ok: $count runs (part $part of $parts), none crashed"

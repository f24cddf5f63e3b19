# systemd_units.sh - the units in contrib/systemd, as meson builds them: systemd-analyze verify
# when it is installed (any complaint fails), and always their content: ExecStart runs the
# installed pgcoord with options that exist in its --help, no DSN or password on the command
# line, KillMode=mixed, the exit codes that must not restart, a stop timeout above --grace;
# the dedicated user and the sandbox, rated below 5.0 by systemd-analyze security when it is
# installed
. "$(dirname "$0")/lib.sh"
BUILD=${PGCOORD_BUILD:?}
checks="content"
# key UNIT KEY: the values of KEY= in UNIT, one a line.
key() { sed -n "s/^$2=//p" "$1"; }

for kind in worker elect; do
	unit="$BUILD/pgcoord-$kind@.service"
	[ -f "$unit" ] || fail "$unit was not built"
	exec_start=$(key "$unit" ExecStart)
	[ "$(printf '%s\n' "$exec_start" | wc -l)" -eq 1 ] || fail "$kind: not one ExecStart"
	bin=${exec_start%% *}
	case "$bin" in
	/*/bin/pgcoord) ;;
	*) fail "$kind: ExecStart does not run an installed pgcoord: $bin" ;;
	esac
	[ "$(printf '%s\n' "$exec_start" | awk '{ print $2 }')" = "$kind" ] || fail "$kind: ExecStart runs another command: $exec_start"
	# Every option before "--" is one the command's --help names.
	run 0 "$PG" "$kind" --help
	opts=${exec_start%% -- *}
	for o in $(printf '%s\n' "$opts" | grep -oE -- '--[a-z][a-z0-9-]*'); do
		grep -q -- "$o\\b" "$TMP/out" || fail "$kind: ExecStart uses $o, which pgcoord $kind --help does not name"
	done
	printf '%s\n' "$exec_start" | grep -q -- '--wait-for-db' || fail "$kind: does not wait for the database"
	printf '%s\n' "$exec_start" | grep -qiE -- ' -d |--dsn|password|postgres(ql)?://' && fail "$kind: a DSN on the command line"
	key "$unit" EnvironmentFile | grep -q '^/etc/pgcoord/pgcoord.env$' || fail "$kind: DSN not read from /etc/pgcoord/pgcoord.env"
	[ "$(key "$unit" KillMode)" = mixed ] || fail "$kind: KillMode is not mixed"
	[ "$(key "$unit" Restart)" = on-failure ] || fail "$kind: Restart is not on-failure"
	prevent=" $(key "$unit" RestartPreventExitStatus) "
	for code in 64 77 78; do
		case "$prevent" in *" $code "*) ;; *) fail "$kind: exit $code would be restarted" ;; esac
	done
	# The codes are ones pgcoord --help documents.
	run 0 "$PG" --help
	for code in $prevent; do grep -qE "(^| )$code  " "$TMP/out" || fail "$kind: exit $code is not one pgcoord documents"; done
	stop=$(key "$unit" TimeoutStopSec)
	case "$stop" in *s) ;; *) fail "$kind: TimeoutStopSec \"$stop\" not in seconds" ;; esac
	stop=${stop%s}
	if [ "$kind" = worker ]; then
		grace=$(printf '%s\n' "$exec_start" | sed -n 's/.*--grace=\([0-9]*\)s.*/\1/p')
		[ -n "$grace" ] || fail "worker: no --grace=Ns in ExecStart"
		[ "$stop" -ge $((grace + 5)) ] || fail "worker: TimeoutStopSec=${stop}s leaves no margin over --grace=${grace}s"
	fi
	# Run as the dedicated user, in a sandbox that still lets commands fork and exec and reach
	# the database over TCP or /run/postgresql's unix socket.
	[ "$(key "$unit" User)" = pgcoord ] || fail "$kind: User is not pgcoord"
	for kv in ProtectSystem=strict ProtectHome=yes PrivateTmp=yes PrivateDevices=yes NoNewPrivileges=yes \
		SystemCallFilter=@system-service CapabilityBoundingSet= RestrictSUIDSGID=yes UMask=0077; do
		grep -qx -- "$kv" "$unit" || fail "$kind: no $kv"
	done
	[ "$(key "$unit" RestrictAddressFamilies)" = "AF_UNIX AF_INET AF_INET6" ] ||
		fail "$kind: RestrictAddressFamilies is \"$(key "$unit" RestrictAddressFamilies)\""
	grep -qE '^(TasksMax|LimitNPROC)=|^SystemCallFilter=~.*(@process|fork|exec)|^InaccessiblePaths=.*/run' "$unit" &&
		fail "$kind: the sandbox stops commands from starting or the socket from being reached"
	# The source's placeholder was replaced.
	grep -q '@[A-Z]*@' "$unit" && fail "$kind: a placeholder was left in the unit"
done

if command -v systemd-analyze >/dev/null 2>&1; then
	# An instance of each template, running the pgcoord under test (verify checks that the
	# binary exists). verify exits 0 after some complaints ("ignoring"): any output fails.
	for kind in worker elect; do
		sed "s|^ExecStart=[^ ]*/pgcoord |ExecStart=$(readlink -f "$PGCOORD_BIN") |" "$BUILD/pgcoord-$kind@.service" \
			>"$TMP/pgcoord-$kind@check.service"
	done
	(cd "$TMP" && systemd-analyze verify --man=no ./pgcoord-worker@check.service ./pgcoord-elect@check.service) \
		>"$TMP/verify" 2>&1
	rc=$?
	[ "$rc" -eq 0 ] && [ ! -s "$TMP/verify" ] || { cat "$TMP/verify"; fail "systemd-analyze verify: exit $rc"; }
	# The sandbox: systemd-analyze security rates each unit below 5.0 ("MEDIUM" or better).
	for kind in worker elect; do
		(cd "$TMP" && systemd-analyze security --offline=yes --no-pager "./pgcoord-$kind@check.service") \
			>"$TMP/security" 2>&1
		level=$(sed -n 's/^→ Overall exposure level for .*: \([0-9][0-9]*\.[0-9]\).*/\1/p' "$TMP/security")
		[ -n "$level" ] || { cat "$TMP/security"; fail "$kind: systemd-analyze security gave no exposure level"; }
		awk -v l="$level" 'BEGIN { exit !(l < 5.0) }' ||
			{ grep '^✗' "$TMP/security"; fail "$kind: exposure $level, not below 5.0"; }
		echo "$kind: exposure $level"
	done
	checks="systemd-analyze verify, security and content"
elif [ "${PGCOORD_CI:-}" = 1 ]; then
	fail "systemd-analyze is not installed (Debian package systemd): the units are not verified"
fi
echo "ok: checked the units ($checks)"

# web_lib.sh - helpers for the tests of pgcoord web (sourced after lib.sh): start a server of
# the test's own on a free port, requests with curl, stop it. Every wait is bounded.
command -v curl >/dev/null 2>&1 || {
	[ "${PGCOORD_CI:-}" = 1 ] && fail "curl is not installed (Debian package curl)"
	echo "skipped: curl is not installed (Debian package curl)" >&2
	exit 77
}
WEB_PIDS=()

# need_chromium: sets CHROME to Debian's chromium; without it the test skips, saying why,
# except in CI (PGCOORD_CI=1), where a missing part is a failure.
need_chromium() {
	CHROME=$(command -v chromium || command -v chromium-browser || true)
	if [ -z "$CHROME" ]; then
		[ "${PGCOORD_CI:-}" = 1 ] && fail "chromium is not installed (Debian package chromium)"
		echo "skipped: chromium is not installed (Debian package chromium)" >&2
		exit 77
	fi
}
# chrome_dom URL: the page's DOM after its scripts ran (virtual time: its polls included), in
# $TMP/dom.
chrome_dom() {
	timeout 90 "$CHROME" --headless --no-sandbox --disable-gpu --no-first-run --disable-extensions \
		--user-data-dir="$TMP/chrome" --virtual-time-budget=6000 --dump-dom "$1" \
		>"$TMP/dom" 2>"$TMP/chrome.err" || { tail -5 "$TMP/chrome.err"; fail "chromium could not load $1"; }
}

# web_start NAME ARGS...: starts pgcoord [-d $WEB_DSN] web --listen 127.0.0.1:0 ARGS in the
# background, its stderr in $TMP/NAME.err; waits (30 s at most: memcheck is slow to start) for
# the line naming its port,
# and sets WPORT, WPID and WURL.
web_start() {
	local name=$1
	shift
	"$PG" ${WEB_DSN:+-d "$WEB_DSN"} web --listen 127.0.0.1:0 "$@" 2>"$TMP/$name.err" &
	WPID=$!
	WEB_PIDS+=("$WPID")
	WPORT=
	for _ in $(seq 300); do
		WPORT=$(sed -n 's|.*listening on http://127\.0\.0\.1:\([0-9]*\)/.*|\1|p' "$TMP/$name.err")
		[ -n "$WPORT" ] && break
		kill -0 "$WPID" 2>/dev/null || { cat "$TMP/$name.err"; fail "pgcoord web $* exited before listening"; }
		sleep 0.1
	done
	[ -n "$WPORT" ] || { cat "$TMP/$name.err"; fail "pgcoord web $* did not listen within 30 s"; }
	WURL="http://127.0.0.1:$WPORT"
}

# web_stop PID: SIGTERM, then it must exit 0 within 30 s.
web_stop() {
	kill -TERM "$1" 2>/dev/null
	for _ in $(seq 300); do
		kill -0 "$1" 2>/dev/null || break
		sleep 0.1
	done
	kill -0 "$1" 2>/dev/null && { kill -KILL "$1"; fail "pgcoord web (pid $1) did not stop within 30 s of SIGTERM"; }
	wait "$1"
	local rc=$?
	[ "$rc" -eq 0 ] || fail "pgcoord web (pid $1) exited $rc on SIGTERM, expected 0"
}

web_cleanup() {
	for p in "${WEB_PIDS[@]}"; do kill -KILL "$p" 2>/dev/null; done
}

# req EXPECTED-STATUS [CURL-ARGS...] URL: the body in $TMP/body, headers in $TMP/headers.
req() {
	local want=$1
	shift
	local got
	got=$(curl -s --max-time 20 -o "$TMP/body" -D "$TMP/headers" -w '%{http_code}' "$@")
	if [ "$got" != "$want" ]; then
		echo "--- body"; cat "$TMP/body"; echo
		fail "curl $* answered $got, expected $want"
	fi
}
body_has() { grep -qF -- "$1" "$TMP/body" || { cat "$TMP/body"; echo; fail "body lacks $1"; }; }
body_lacks() { ! grep -qF -- "$1" "$TMP/body" || { cat "$TMP/body"; echo; fail "body has $1"; }; }
# jq-less JSON reading: python3 evaluates EXPR on the body (as j).
json() { python3 -c "import json,sys; j=json.load(open(sys.argv[1])); print($1)" "$TMP/body"; }
# dsn_param DSN KEY VALUE: DSN (URI or keyword form) with KEY=VALUE added.
dsn_param() {
	case "$1" in
	postgres://* | postgresql://*)
		case "$1" in
		*\?*) echo "$1&$2=$3" ;;
		*) echo "$1?$2=$3" ;;
		esac ;;
	*) echo "$1 $2=$3" ;;
	esac
}

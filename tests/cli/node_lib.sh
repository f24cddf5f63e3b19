# node_lib.sh - what the Node.js client's tests share (sourced after lib.sh): Node.js 20 or
# newer and npm, checked (a skip, saying why, except in CI, where it fails), $node_dir (the
# client's directory) and node_packages.
node_skip_or_fail() {
	# A part that is missing skips here, and fails in CI, which installs every toolchain.
	[ -n "${PGCOORD_CI:-}" ] && fail "$1 (CI must install it)"
	echo "skipped: $1" >&2
	exit 77
}
command -v node >/dev/null 2>&1 || node_skip_or_fail "node is not installed (Node.js 20 or newer and npm)"
command -v npm >/dev/null 2>&1 || node_skip_or_fail "npm is not installed"
node_major=$(node -p 'process.versions.node.split(".")[0]')
[ "$node_major" -ge 20 ] || node_skip_or_fail "node $(node --version) is too old: the client needs Node.js 20 or newer"
node_dir=$SRC/clients/node
# node_packages: the packages exactly as locked, into $node_dir/node_modules (ignored by git)
# when it is missing or older than package-lock.json, under a lock on $node_dir that
# tests/cli/node_esm.sh takes too: two installs never overlap.
node_packages() {
	exec 9<"$node_dir"
	flock -w 600 9 || fail "waited 600 s for the lock on $node_dir"
	if [ ! -f "$node_dir/node_modules/.package-lock.json" ] ||
		[ "$node_dir/package-lock.json" -nt "$node_dir/node_modules/.package-lock.json" ]; then
		(cd "$node_dir" && npm ci --no-audit --no-fund --loglevel=error) >"$TMP/npm" 2>&1 ||
			{ cat "$TMP/npm"; fail "npm ci failed in $node_dir"; }
	fi
	exec 9<&-
}

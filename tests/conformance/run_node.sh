#!/usr/bin/env bash
# The conformance runner with the Node client's adapter (clients/node/src/conformance-adapter.ts):
#   run_node.sh RUNNER_PYTHON RUN_PY [run.py options: --adapter c=..., --mixed, ...]
# Runs the adapter from the package's ESM build that tests/cli/node_esm.sh makes once for the
# tests of a run (npm ci first if need be, under the lock client__node takes too; nothing
# written into the source tree). Skips (77) without Node.js 20+ and npm; in CI (PGCOORD_CI=1)
# that is a failure, as for client__node.
set -u
runner=$1 run_py=$2
shift 2
: "${PGCOORD_SRC:?}" "${PGCOORD_BUILD:?}"
missing() {
	if [ "${PGCOORD_CI:-}" = 1 ]; then
		echo "FAIL: the Node client's adapter needs $1" >&2
		exit 1
	fi
	echo "skipped: the Node client's adapter needs $1" >&2
	exit 77
}
command -v node >/dev/null 2>&1 || missing "node (Node.js 20 or newer)"
command -v npm >/dev/null 2>&1 || missing "npm"
major=$(node -p 'process.versions.node.split(".")[0]')
[ "$major" -ge 20 ] || missing "Node.js 20 or newer, not $(node --version)"
command -v flock >/dev/null 2>&1 || missing "flock (util-linux)"

out=$("$PGCOORD_SRC/tests/cli/node_esm.sh") || { echo "FAIL: cannot build the Node client" >&2; exit 1; }
trap 'exit 143' TERM INT
"$runner" "$run_py" --adapter "node=$(printf '%q %q' "$(command -v node)" "$out/esm/conformance-adapter.js")" "$@"

#!/usr/bin/env bash
# The conformance runner with the Node client's adapter (clients/node/src/conformance-adapter.ts):
#   run_node.sh RUNNER_PYTHON RUN_PY [run.py options: --adapter c=..., --mixed, ...]
# Installs the package's locked packages when clients/node/node_modules is missing or older than
# package-lock.json (npm ci), then compiles the package into a directory of this run's own and
# runs the adapter from there. Skips (77) without Node.js 20+ and npm; in CI (PGCOORD_CI=1) that
# is a failure, as for client__node.
#
# Safe beside client__node and the other conformance test: npm ci runs under an exclusive flock
# on the clients/node directory, which tests/cli/client_node.sh takes too, so two installs never
# overlap and a second test finds the packages installed; the compile never writes into the
# tree (client__node rebuilds dist/ and build/ there while this run's adapters start).
set -u
runner=$1 run_py=$2
shift 2
dir=${PGCOORD_SRC:?}/clients/node
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

out=$(mktemp -d "${TMPDIR:-/tmp}/pgcoord-node-adapter.XXXXXX") || exit 1
trap 'rm -rf "$out"' EXIT
trap 'exit 143' TERM INT
# In a subshell: its cd and its lock (fd 9) end with it.
(
	cd "$dir" || exit 1
	exec 9<"$dir"
	flock -w 600 9 || { echo "FAIL: waited 600 s for the lock on $dir (another npm ci?)" >&2; exit 1; }
	if [ ! -f node_modules/.package-lock.json ] || [ package-lock.json -nt node_modules/.package-lock.json ]; then
		npm ci --no-audit --no-fund --loglevel=error >"$out/npm.log" 2>&1 || {
			cat "$out/npm.log" >&2
			echo "FAIL: npm ci failed in $dir" >&2
			exit 1
		}
	fi
	# The ESM build, as the package's own, without its declarations, into $out; the adapter
	# finds pg through $out/node_modules and is ESM by $out/package.json.
	npx --no-install tsc -p tsconfig.esm.json --outDir "$out/esm" --declaration false \
		--declarationMap false --sourceMap false || { echo "FAIL: tsc failed in $dir" >&2; exit 1; }
) || exit 1
ln -s "$dir/node_modules" "$out/node_modules"
printf '{"type": "module"}\n' >"$out/package.json"
"$runner" "$run_py" --adapter "node=$(printf '%q %q' "$(command -v node)" "$out/esm/conformance-adapter.js")" "$@"

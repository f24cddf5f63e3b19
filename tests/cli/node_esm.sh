#!/usr/bin/env bash
# node_esm.sh - the Node.js client (clients/node) compiled once for every test that runs it from
# outside its directory (the conformance adapters, the workers' restart test): prints a
# directory with esm/ (the package's ESM build, without declarations), node_modules (a link
# to the package's) and a package.json that makes it ESM. Needs PGCOORD_SRC and PGCOORD_BUILD.
#
# The build is kept in $PGCOORD_BUILD/node-esm/HASH, HASH naming the sources, the tsconfig
# files and the lock file, so that the tests of one make test share one compile and a change
# of a source makes a new one. Under the exclusive lock on clients/node that
# tests/cli/client_node.sh takes too, it first installs the locked packages (npm ci) when
# node_modules is missing or older than package-lock.json; the compile never writes into
# the source tree (client__node rebuilds dist/ and build/ there meanwhile).
set -u
dir=${PGCOORD_SRC:?}/clients/node
cache=${PGCOORD_BUILD:?}/node-esm
mkdir -p "$cache" || exit 1
cd "$dir" || exit 1
exec 9<"$dir"
flock -w 600 9 || { echo "node_esm.sh: waited 600 s for the lock on $dir" >&2; exit 1; }
if [ ! -f node_modules/.package-lock.json ] || [ package-lock.json -nt node_modules/.package-lock.json ]; then
	npm ci --no-audit --no-fund --loglevel=error >"$cache/npm.log" 2>&1 ||
		{ cat "$cache/npm.log" >&2; echo "node_esm.sh: npm ci failed in $dir" >&2; exit 1; }
fi
hash=$({
	find src -name '*.ts' | LC_ALL=C sort
	cat package-lock.json tsconfig*.json
	find src -name '*.ts' | LC_ALL=C sort | xargs cat
} | sha1sum | cut -c1-16)
out=$cache/$hash
if [ ! -f "$out/.done" ]; then
	# Builds of earlier sources go: the tests of one run share these sources.
	find "$cache" -mindepth 1 -maxdepth 1 -type d -exec rm -rf {} +
	mkdir -p "$out"
	npx --no-install tsc -p tsconfig.esm.json --outDir "$out/esm" --declaration false \
		--declarationMap false --sourceMap false >&2 || { echo "node_esm.sh: tsc failed in $dir" >&2; exit 1; }
	ln -s "$dir/node_modules" "$out/node_modules"
	printf '{"type": "module"}\n' >"$out/package.json"
	touch "$out/.done"
fi
echo "$out"

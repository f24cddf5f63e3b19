# completion.sh - the generated bash and zsh completion, loaded in a real shell: commands,
# subcommands and options as the tool's --help names them (and as the man pages do); zsh is
# checked when it is installed (in CI, where .ci/run installs it, it must be)
. "$(dirname "$0")/lib.sh"
BUILD=${PGCOORD_BUILD:?}
bashc="$BUILD/contrib/completion/pgcoord"
zshc="$BUILD/contrib/completion/_pgcoord"
[ -s "$bashc" ] || fail "$bashc was not generated"
[ -s "$zshc" ] || fail "$zshc was not generated"

# comp WORDS...: what bash completes for the last word (the cursor at its end), one a line.
comp() {
	bash --norc --noprofile -c 'source "$1" || exit 9; shift; COMP_WORDS=("$@"); COMP_CWORD=$(($# - 1))
		_pgcoord; printf "%s\n" "${COMPREPLY[@]}"' bash "$bashc" "$@" >"$TMP/out" 2>"$TMP/err" ||
		{ cat "$TMP/err"; fail "bash: completing \"$*\" failed"; }
	[ ! -s "$TMP/err" ] || { cat "$TMP/err"; fail "bash: completing \"$*\" wrote to stderr"; }
}
has() { grep -qx -- "$1" "$TMP/out" || { cat "$TMP/out"; fail "completing \"$what\" does not offer $1"; }; }
lacks() { ! grep -qx -- "$1" "$TMP/out" || { cat "$TMP/out"; fail "completing \"$what\" offers $1"; }; }

what="pgcoord qu"; comp pgcoord qu
has queue; lacks run; lacks worker
what="pgcoord "; comp pgcoord ""
for c in run worker elect queue lease help; do has "$c"; done
what="pgcoord queue "; comp pgcoord queue ""
for s in enqueue stats list show retry cancel purge pause resume config; do has "$s"; done
lacks --schema
what="pgcoord run --"; comp pgcoord run --
for o in --nonblock --wait --timeout --shared --key --fence --wait-for-db --help; do has "$o"; done
lacks --queue
what="pgcoord -d DSN --json ru"; comp pgcoord -d "host=x" --json ru
has run
what="pgcoord --"; comp pgcoord --
has --dsn; has --quiet; lacks --fence
what="pgcoord queue enqueue --p"; comp pgcoord queue enqueue --p
has --payload; has --priority; lacks --prometheus
what="pgcoord lease "; comp pgcoord lease ""
has show; has release
what="pgcoord run NAME -- ech"; comp pgcoord run NAME -- ech
has echo
what="pgcoord help wo"; comp pgcoord help wo
has worker

# Against the man pages, written by hand: every long option offered for a command (or one of
# its subcommands) is on its page, and every option the page's OPTIONS section names is offered.
roff() { sed -e 's/\\-/-/g' -e 's/\\f[BIRP]//g' -e 's/\\f(..//g' -e 's/"//g'; }
commands=$("$PG" --help | awk '/^Commands:/ { on = 1; next } /^$/ { on = 0 } on { print $1 }')
for c in $commands; do
	page="$SRC/docs/pgcoord-$c.1"
	so=$(sed -n 's|^\.so man1/||p' "$page")
	[ -n "$so" ] && page="$SRC/docs/$so"
	comp pgcoord "$c" --
	cp "$TMP/out" "$TMP/offered"
	comp pgcoord "$c" ""
	for s in $(grep -v -- '^-' "$TMP/out" | grep -vx -e '' || true); do
		[ -d "$s" ] || [ -f "$s" ] && continue # file names offered where no subcommand is
		comp pgcoord "$c" "$s" --
		cat "$TMP/out" >>"$TMP/offered"
	done
	sort -u "$TMP/offered" | grep -- '^--' >"$TMP/o"
	roff <"$page" >"$TMP/page"
	while read -r o; do
		grep -q -- "$o\\b" "$TMP/page" || fail "$c: completion offers $o, pgcoord-$c(1) does not name it"
	done <"$TMP/o"
	awk '/^\.SH / { on = ($0 == ".SH OPTIONS"); next } on && prev == ".TP" { print } { prev = $0 }' "$page" |
		roff | grep -oE -- '--[A-Za-z0-9][A-Za-z0-9-]*' | sort -u >"$TMP/m"
	while read -r o; do
		grep -qx -- "$o" "$TMP/o" || fail "$c: pgcoord-$c(1) names $o, completion does not offer it"
	done <"$TMP/m"
done
checked="bash"

if command -v zsh >/dev/null 2>&1; then
	# zcomp WORDS...: what the zsh function adds for the last word, with compsys's builtins
	# replaced by ones that print what they are given.
	zcomp() {
		zsh -f -c '
			compadd() { while [[ $1 == -* && $1 != -- ]]; do shift; done; [[ $1 == -- ]] && shift; print -l -- "$@"; }
			_describe() { local a=${@[-1]}; print -l -- ${${(P)a}%%:*}; }
			_files() { print -- "(files)"; }
			_normal() { print -- "(command) ${words[1]}"; }
			file=$1; shift
			words=("$@"); CURRENT=$#
			PREFIX=${words[CURRENT]}
			source "$file"' zsh "$zshc" "$@" >"$TMP/out" 2>"$TMP/err" ||
			{ cat "$TMP/err"; fail "zsh: completing \"$*\" failed"; }
		[ ! -s "$TMP/err" ] || { cat "$TMP/err"; fail "zsh: completing \"$*\" wrote to stderr"; }
	}
	# The shell prints all candidates; it matches them against the prefix itself.
	what="zsh: pgcoord qu"; zcomp pgcoord qu
	has queue; has run
	what="zsh: pgcoord queue "; zcomp pgcoord queue ""
	for s in enqueue stats list pause resume config; do has "$s"; done
	lacks --schema
	what="zsh: pgcoord run --"; zcomp pgcoord run --
	for o in --nonblock --wait --fence --wait-for-db; do has "$o"; done
	lacks --queue
	what="zsh: pgcoord queue enqueue --"; zcomp pgcoord queue enqueue --
	has --payload; lacks --prometheus
	what="zsh: pgcoord -d DSN wor"; zcomp pgcoord -d "host=x" wor
	has worker
	what="zsh: pgcoord run NAME -- ech"; zcomp pgcoord run NAME -- ech
	has "(command) ech"
	checked="bash and zsh"
elif [ "${PGCOORD_CI:-}" = 1 ]; then
	fail "zsh is not installed (.ci/run installs it)"
else
	echo "zsh not installed: only the bash completion was checked" >&2
fi
echo "ok: $checked completion"

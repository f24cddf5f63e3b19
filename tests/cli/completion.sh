# completion.sh - the generated bash and zsh completion, loaded in a real shell: commands,
# subcommands (nested ones too) and options as the tool's --help names them (and as the man
# pages do), option values of fixed sets, queue and schedule names from the database; zsh is
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

# Nested subcommands.
what="pgcoord queue group "; comp pgcoord queue group ""
for s in add close show list remove; do has "$s"; done
lacks enqueue; lacks group
what="pgcoord cron "; comp pgcoord cron ""
for s in next add list show pause resume trigger remove history sync run; do has "$s"; done
what="pgcoord queue group add --"; comp pgcoord queue group add --
has --on-complete-queue

# The values of an option whose set is fixed, as the command's --help gives them: "S (--status)
# is a, b or c", "--catch-up skip|once|all". Both "--opt V" and "--opt=V" (which bash splits
# into three words: --opt, =, V).
run 0 "$PG" queue --help
statuses=$(tr '\n' ' ' <"$TMP/out" | sed -n 's/.*S (--status) is \([a-z, ]*\) or \([a-z]*\);.*/\1, \2/p' | tr -d ,)
[ "$(echo $statuses | wc -w)" -eq 7 ] || fail "pgcoord queue --help does not list the statuses: \"$statuses\""
what="pgcoord queue list --status "; comp pgcoord queue list --status ""
for v in $statuses; do has "$v"; done
[ "$(wc -l <"$TMP/out")" -eq 7 ] || { cat "$TMP/out"; fail "--status offers more than the statuses"; }
what="pgcoord queue purge --status=fa"; comp pgcoord queue purge --status=fa
has failed; lacks pending
what="pgcoord queue cancel --all q --status = sch"; comp pgcoord queue cancel --all q --status = sch
has scheduled; lacks failed
what="pgcoord cron add N S --catch-up "; comp pgcoord cron add N "* * * * *" --catch-up ""
has skip; has once; has all
what="pgcoord cron add N S --overlap "; comp pgcoord cron add N "* * * * *" --overlap ""
has allow; has skip; lacks all
what="pgcoord queue config q --fair "; comp pgcoord queue config q --fair ""
has on; has off
what="pgcoord queue enqueue q --on-dep-failure "; comp pgcoord queue enqueue q --on-dep-failure ""
has cancel; has run
# A value that is not a fixed set is not guessed: after --status failed, options again.
what="pgcoord queue list --status failed --l"; comp pgcoord queue list --status failed --l
has --limit

# Names from the database, through pgcoord itself, on the command line's DSN and schema.
if [ -n "${PGCOORD_TEST_DSN:-}" ]; then
	export PGCOORD_DSN=$PGCOORD_TEST_DSN
	own_schema pgc_compl
	run 0 "$PG" queue enqueue mail --schema "$S"
	run 0 "$PG" queue enqueue thumbs --schema "$S"
	# A payload with a "name" key must not pass for a schedule.
	run 0 "$PG" cron add nightly "0 2 * * *" --queue mail --payload '{"name":"payload-name"}' --schema "$S"
	what="pgcoord queue list --schema S "; comp "$PG" queue list --schema "$S" ""
	has mail; has thumbs
	what="pgcoord queue pause --schema=S m"; comp "$PG" queue pause --schema = "$S" m
	has mail; lacks thumbs
	what="pgcoord queue cancel --all "; comp "$PG" queue cancel --all --schema "$S" ""
	has mail
	what="pgcoord worker -q "; comp "$PG" worker --schema "$S" -q ""
	has mail; has thumbs
	what="pgcoord worker --queue=t"; comp "$PG" worker --schema "$S" --queue=t
	has thumbs; lacks mail
	what="pgcoord cron add N S --queue "; comp "$PG" cron add N "* * * * *" --schema "$S" --queue ""
	has mail
	for sub in show pause resume trigger remove history; do
		what="pgcoord cron $sub "; comp "$PG" cron "$sub" --schema "$S" ""
		has nightly; lacks payload-name
	done
	# The first argument only: a queue's second argument is not a queue.
	what="pgcoord queue list mail "; comp "$PG" queue list --schema "$S" mail ""
	lacks thumbs
	# cron add names a new schedule: no existing names.
	what="pgcoord cron add "; comp "$PG" cron add --schema "$S" ""
	lacks nightly
	# No database: nothing offered, nothing printed, and soon.
	start=$SECONDS
	what="pgcoord -d unreachable cron show "
	comp "$PG" -d "host=127.0.0.1 port=1 connect_timeout=1" cron show --schema "$S" ""
	! grep -q . "$TMP/out" || { cat "$TMP/out"; fail "names offered without a database"; }
	[ $((SECONDS - start)) -le 10 ] || fail "completing without a database took $((SECONDS - start)) s"
	what="pgcoord queue list (no schema) "; comp "$PG" queue list --schema nosuch_schema ""
	! grep -q . "$TMP/out" || { cat "$TMP/out"; fail "names offered from a missing schema"; }
elif [ "${PGCOORD_CI:-}" = 1 ]; then
	fail "PGCOORD_TEST_DSN is not set: names from the database are not checked"
else
	echo "no database: names from the database not checked" >&2
fi

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

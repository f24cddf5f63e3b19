# help_man.sh - every command's --help and its man page name the same options (and the global
# ones, pgcoord --help and pgcoord(1)); queue per subcommand, as its help lists them; the
# lab's experiments; every command has a page and a place in pgcoord(1), which man -l renders
# from the source tree; help fits 80 columns
. "$(dirname "$0")/lib.sh"

DOCS="$SRC/docs"
export LC_ALL=C # comm(1) needs the order sort(1) gave
bad=0
drift() { echo "FAIL: $*" >&2; bad=1; }

# help_opts: the options an --help text (stdin) defines: its option lines ("  -x, --xx=V  ..."
# or "      --xx  ..."), the option column only, one option a line.
help_opts() {
	awk 'match($0, /^ +-/) && RLENGTH <= 7 {
		sub(/^ +/, ""); i = index($0, "  "); col = i ? substr($0, 1, i - 1) : $0
		n = split(col, t, /, /)
		for (k = 1; k <= n; k++) { sub(/[=[ ].*/, "", t[k]); print t[k] }
	}' | sort -u
}

# help_sub_opts: for a help text with a "Subcommands:" list (stdin), "SUB --option" for each
# option on a subcommand's lines, and "SUB" alone for each subcommand.
help_sub_opts() {
	awk '/^Subcommands:/ { on = 1; next }
	on && /^$/ { exit }
	on && /^  [a-z]/ { sub_ = $1; print sub_ }
	on && (/^  [a-z]/ || /^ +\[/) {
		line = $0; i = index(substr(line, 3), "  "); if (i && line !~ /^ +\[/) line = substr(line, 1, i + 1)
		while (match(line, /--[a-z][a-z0-9-]*/)) {
			print sub_ " " substr(line, RSTART, RLENGTH); line = substr(line, RSTART + RLENGTH)
		}
	}' | sort -u
}

# roff: the man page on stdin as plain words (\- is -, fonts and quotes dropped).
roff() { sed -e 's/\\-/-/g' -e 's/\\f[BIRP]//g' -e 's/\\f(..//g' -e 's/"//g'; }

# man_opts FILE SECTION: the options named by the .TP headlines of section SECTION.
man_opts() {
	awk -v sec="$2" '/^\.SH / { on = ($0 == ".SH " sec); next }
		on && prev == ".TP" { print } { prev = $0 }' "$1" | roff |
		grep -oE '(^|[ ,|])--?[A-Za-z0-9][A-Za-z0-9-]*' | sed 's/^[ ,|]//' | sort -u
}

# man_sub_opts FILE CMD: from a SYNOPSIS of ".B pgcoord CMD SUB" lines (".B CMD SUB" after
# the global options, ".BR "pgcoord CMD SUB" | SUB2" for two), as help_sub_opts.
man_sub_opts() {
	awk '/^\.SH / { on = ($0 == ".SH SYNOPSIS"); next } on' "$1" | roff | awk -v cmd="$2" '
	$0 ~ "^\\.BR? (pgcoord )?" cmd " [a-z]" {
		line = $0; sub("^.*" cmd " ", "", line); n = split(line, s, / *\| */)
		for (k = 1; k <= n; k++) { split(s[k], w, / /); print w[1] }
		sub_ = s[1]; sub(/ .*/, "", sub_); next
	}
	/^\.br/ { sub_ = ""; next }
	sub_ != "" {
		line = $0
		while (match(line, /--[a-z][a-z0-9-]*/)) {
			print sub_ " " substr(line, RSTART, RLENGTH); line = substr(line, RSTART + RLENGTH)
		}
	}' | sort -u
}

# compare WHAT LIST1 LIST2 [NAME1 NAME2]: one failure per word (an option) that only one of
# the two sorted lists has.
compare() {
	local what=$1 n1=${4:---help} n2=${5:-the man page}
	while read -r o; do drift "$what: $n1 names $o, $n2 does not"; done < <(comm -23 "$2" "$3")
	while read -r o; do drift "$what: $n2 names $o, $n1 does not"; done < <(comm -13 "$2" "$3")
}

wide() {
	awk -v what="$1" 'length($0) > 80 { print "FAIL: " what " --help is wider than 80 columns: " $0; bad = 1 }
		END { exit bad }' >&2 || bad=1
}

# The global options, and the commands pgcoord --help lists.
run 0 "$PG" --help
cp "$TMP/out" "$TMP/global"
wide pgcoord <"$TMP/global"
awk '/^Options:/ { on = 1; next } /^$/ { on = 0 } on' "$TMP/global" | help_opts >"$TMP/h"
man_opts "$DOCS/pgcoord.1" "GLOBAL OPTIONS" >"$TMP/m"
compare "pgcoord (global options)" "$TMP/h" "$TMP/m"
commands=$(awk '/^Commands:/ { on = 1; next } /^$/ { on = 0 } on { print $1 }' "$TMP/global")
[ -n "$commands" ] || fail "pgcoord --help lists no commands"

# pgcoord(1) has a COMMANDS heading for each command ("doctor, lab" names two).
awk '/^\.SH / { on = ($0 == ".SH COMMANDS"); next }
	on && /^\.SS / { for (k = 2; k <= NF; k++) { w = $k; more = sub(/,$/, "", w); print w; if (!more) break } }' \
	"$DOCS/pgcoord.1" | roff | sort -u >"$TMP/m"
printf '%s\n' $commands | sort -u >"$TMP/h"
compare "commands" "$TMP/h" "$TMP/m" "pgcoord --help" "pgcoord(1) COMMANDS"

for c in $commands; do
	page="$DOCS/pgcoord-$c.1"
	[ -f "$page" ] || { drift "$c: no man page docs/pgcoord-$c.1"; continue; }
	grep -qx "\.BR pgcoord\\\\-$c (1),\?" "$DOCS/pgcoord.1" || drift "$c: pgcoord(1) SEE ALSO lacks pgcoord-$c(1)"
	grep -qx "install_man('docs/pgcoord-$c.1')" "$SRC/meson.build" || drift "$c: meson.build does not install pgcoord-$c.1"
	# The page renders by itself: man -l from the source tree as after installing, so no .so
	# (its path resolves against the current directory under man -l, the manual's top when
	# installed). Any warning of man or groff fails too.
	grep -q '^\.so ' "$page" && drift "$c: docs/pgcoord-$c.1 is a .so include: man -l cannot render it"
	if command -v man >/dev/null 2>&1; then
		(cd "$SRC" && MANWIDTH=80 MAN_KEEP_FORMATTING= man -l "docs/pgcoord-$c.1") >"$TMP/rendered" 2>"$TMP/manerr"
		grep -q "^NAME" "$TMP/rendered" && grep -qi "pgcoord-$c" "$TMP/rendered" ||
			drift "$c: man -l docs/pgcoord-$c.1 renders no page: $(head -c 300 "$TMP/manerr")"
		[ ! -s "$TMP/manerr" ] || drift "$c: man -l docs/pgcoord-$c.1: $(head -c 300 "$TMP/manerr")"
	elif [ "${PGCOORD_CI:-}" = 1 ]; then
		fail "man is not installed: the pages are not rendered"
	fi
	run 0 "$PG" "$c" --help
	cp "$TMP/out" "$TMP/help"
	wide "$c" <"$TMP/help"
	run 0 "$PG" help "$c"
	cmp -s "$TMP/out" "$TMP/help" || drift "$c: pgcoord help $c differs from pgcoord $c --help"
	help_opts <"$TMP/help" >"$TMP/h"
	man_opts "$page" OPTIONS >"$TMP/m"
	[ -s "$TMP/h" ] && [ -s "$TMP/m" ] || drift "$c: no options read from --help or from the man page"
	compare "$c" "$TMP/h" "$TMP/m"
	if grep -q '^Subcommands:' "$TMP/help"; then
		help_sub_opts <"$TMP/help" >"$TMP/h"
		man_sub_opts "$page" "$c" >"$TMP/m"
		[ -s "$TMP/h" ] || fail "$c: no subcommands read from --help"
		compare "$c (subcommands)" "$TMP/h" "$TMP/m"
	fi
done

# The lab's experiments: pgcoord lab --list and the EXPERIMENTS of pgcoord-lab(1).
run 0 "$PG" lab --list
cut -d' ' -f1 "$TMP/out" | sort -u >"$TMP/h"
[ -s "$TMP/h" ] || fail "lab --list lists nothing"
awk '/^\.SH / { on = ($0 == ".SH EXPERIMENTS"); next } on && prev == ".TP" { print } { prev = $0 }' \
	"$DOCS/pgcoord-lab.1" | roff | sed -n 's/^\.B //p' | sort -u >"$TMP/m"
compare "lab experiments" "$TMP/h" "$TMP/m" "pgcoord lab --list" "pgcoord-lab(1) EXPERIMENTS"

[ "$bad" -eq 0 ] || exit 1

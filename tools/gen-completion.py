#!/usr/bin/env python3
"""gen-completion.py - shell completion for pgcoord, generated from the tool's own --help.

Usage: gen-completion.py bash|zsh PGCOORD OUTPUT

Run by meson at build time with the pgcoord just built. The commands come from the command
table that `pgcoord --help` prints, each command's options from its --help option lines (the
ones tests/cli/help_man.sh holds equal to the man pages), subcommands from a "Subcommands:"
list or from the Usage lines ("pgcoord lease show ..."), nested subcommands from a
subcommand's lines ("group add G", "group show G | group list"), the values of an option from
"--opt a|b|c" anywhere in a command's help or from a sentence "S (--status) is a, b or c".
Nothing is written by hand, so the completion cannot drift from the tool.

Names that live in the database (queues for --queue and a queue subcommand's QUEUE, schedules
for a cron subcommand's NAME) are asked of pgcoord itself when completing: its --json listing,
with a 2 s bound, nothing printed when the database cannot be reached. Which placeholder means
which names is the table NAMES below.
"""
import re
import subprocess
import sys


def help_text(pgcoord, *args):
    r = subprocess.run([pgcoord, *args, "--help"], capture_output=True, text=True,
                       env={"LC_ALL": "C", "PATH": "/usr/bin:/bin"})
    if r.returncode != 0:
        sys.exit("gen-completion: %s %s --help exited %d: %s" %
                 (pgcoord, " ".join(args), r.returncode, r.stderr.strip()))
    return r.stdout


def section(text, title):
    """The lines of the section that starts with the line `title` and ends at a blank line."""
    out, on = [], False
    for line in text.splitlines():
        if line == title:
            on = True
            continue
        if on and line.strip() == "":
            break
        if on:
            out.append(line)
    return out


def option_names(lines):
    """Options of "  -x, --xx=V  text" lines, as help_man.sh's help_opts reads them."""
    names = []
    for line in lines:
        m = re.match(r"^( +)-", line)
        if not m or len(m.group(1)) + 1 > 7:
            continue
        col = line.strip()
        i = col.find("  ")
        if i >= 0:
            col = col[:i]
        for tok in col.split(", "):
            name = re.split(r"[=\[ ]", tok, maxsplit=1)[0]
            if re.fullmatch(r"--?[A-Za-z0-9][A-Za-z0-9-]*", name) and name not in names:
                names.append(name)
    return names


def value_options(lines):
    """The options of option lines that take a value ("--xx=V", "-x, --xx=V"), as option_names."""
    takes = []
    for line in lines:
        m = re.match(r"^( +)-", line)
        if not m or len(m.group(1)) + 1 > 7:
            continue
        col = line.strip()
        i = col.find("  ")
        if i >= 0:
            col = col[:i]
        if "=" not in col or "[=" in col:
            continue
        for tok in col.split(", "):
            name = re.split(r"[=\[ ]", tok, maxsplit=1)[0]
            if re.fullmatch(r"--?[A-Za-z0-9][A-Za-z0-9-]*", name) and name not in takes:
                takes.append(name)
    # And those the Subcommands lines show with a value: "[--status S]", "--fair on|off";
    # not a flag right after the subcommand, before its argument ("cancel --all QUEUE").
    for line in lines:
        line = re.sub(r"^  ([a-z][a-z-]*) --[a-z-]+", r"  \1", line)
        for m in re.finditer(r"(--[a-z][a-z0-9-]*) (?:[A-Z][A-Z0-9/,.]*\b|[a-z][a-z0-9-]*\|)", line):
            if m.group(1) not in takes:
                takes.append(m.group(1))
    return takes


def short_aliases(lines):
    """{long: short} of the option lines "  -x, --xx...", as option_names reads them."""
    out = {}
    for line in lines:
        m = re.match(r"^ {1,6}(-[A-Za-z0-9]), (--[A-Za-z0-9][A-Za-z0-9-]*)", line)
        if m:
            out[m.group(2)] = m.group(1)
    return out


def subcommands(cmd, text):
    """{sub: [options only that subcommand names]} from "Subcommands:" or the Usage lines."""
    subs = {}
    lines = section(text, "Subcommands:")
    if lines:
        cur = None
        for line in lines:
            if re.match(r"^  [a-z]", line):
                cur = line.split()[0]
                subs.setdefault(cur, [])
                body = line[2:]
                i = body.find("  ")
                if i >= 0:
                    body = body[:i]
            elif cur is not None and re.match(r"^ +\[", line):
                body = line
            else:
                continue
            for o in re.findall(r"--[a-z][a-z0-9-]*", body):
                if o not in subs[cur]:
                    subs[cur].append(o)
        return subs
    for line in text.splitlines():
        m = re.match(r"^(?:Usage:)? +pgcoord .*?\b%s ([a-z][a-z-]*)\b" % re.escape(cmd), line)
        if m:
            subs.setdefault(m.group(1), [])
    return subs


# Placeholders and options whose values are names in the database: (command, word) -> kind;
# command None for every command. The kinds are the listings the completion runs.
NAMES = {
    (None, "--queue"): "queues",
    ("queue", "QUEUE"): "queues",
    ("cron", "NAME"): "schedules",
}
# Subcommands that create what their first argument names: no existing names offered.
CREATES = {"add"}


def nested(text):
    """{sub: [subsub, ...]} from the Subcommands lines "  group add G" and "| group list"."""
    out = {}
    for line in section(text, "Subcommands:"):
        for m in re.finditer(r"(?:^  |\| )([a-z][a-z-]*) ([a-z][a-z-]*)\b", line):
            out.setdefault(m.group(1), [])
            if m.group(2) not in out[m.group(1)]:
                out[m.group(1)].append(m.group(2))
    return out


def option_values(text):
    """{option: [values]}: "--opt a|b|c" (every alternative a lowercase word) and the sentence
    "X (--opt) is a, b, ... or z"."""
    vals = {}
    for m in re.finditer(r"(--[a-z][a-z0-9-]*)[= ]([a-z][a-z0-9-]*(?:\|[a-z][a-z0-9-]*)+)\b(?![|/])", text):
        vals.setdefault(m.group(1), [])
        for v in m.group(2).split("|"):
            if v not in vals[m.group(1)]:
                vals[m.group(1)].append(v)
    flat = " ".join(text.split())
    for m in re.finditer(r"\b[A-Z]+ \((--[a-z][a-z0-9-]*)\) is ((?:[a-z]+, )*[a-z]+,? or [a-z]+)", flat):
        words = re.split(r",? or |, ", m.group(2))
        vals[m.group(1)] = words
    return vals


def positional_kinds(cmd, text):
    """{sub: kind} for subcommands whose first argument names something in the database."""
    kinds = {}
    for line in section(text, "Subcommands:"):
        m = re.match(r"^  ([a-z][a-z-]*) (?:--all )?\[?([A-Z]+)\]?\b", line)
        if m and (cmd, m.group(2)) in NAMES and m.group(1) not in CREATES:
            kinds.setdefault(m.group(1), NAMES[(cmd, m.group(2))])
    return kinds


def name_options(cmd, opts, aliases):
    """{option: kind} of the command's options that take names in the database, with the
    short form an option line pairs them with (worker's "-q, --queue", not cron's "-q")."""
    out = {}
    for (c, o), kind in NAMES.items():
        if c in (None, cmd) and o.startswith("-") and o in opts:
            out[o] = kind
            if o in aliases:
                out[aliases[o]] = kind
    return out


def read_tool(pgcoord):
    top = help_text(pgcoord)
    globals_ = option_names(section(top, "Options:"))
    commands = []
    for line in section(top, "Commands:"):
        parts = line.split(None, 1)
        commands.append((parts[0], parts[1].strip() if len(parts) > 1 else ""))
    if not commands:
        sys.exit("gen-completion: pgcoord --help lists no commands")
    tool = []
    for name, summary in commands:
        text = help_text(pgcoord, name)
        opts = option_names(text.splitlines())
        subs = subcommands(name, text)
        takes_command = " -- COMMAND" in text.split("\n\n", 1)[0]
        tool.append({"name": name, "summary": summary, "opts": opts, "subs": subs,
                     "takes_command": takes_command, "nested": nested(text),
                     "takes": value_options(text.splitlines()),
                     "values": option_values(text), "positional": positional_kinds(name, text),
                     "name_opts": name_options(name, opts, short_aliases(text.splitlines()))})
    return globals_, tool


def sh_words(words):
    return " ".join(words)


def merged(own, common):
    """A subcommand's own options, then the command's, each once."""
    return own + [o for o in common if o not in own]


def gen_bash(globals_, tool):
    opts_cases, subs_cases, cmd_cases, takes_cases, values_cases, kinds_cases = [], [], [], [], [], []
    for c in tool:
        opts_cases.append("\t%s) echo '%s' ;;" % (c["name"], sh_words(c["opts"])))
        for sub, own in c["subs"].items():
            opts_cases.append("\t%s/%s) echo '%s' ;;" % (c["name"], sub, sh_words(merged(own, c["opts"]))))
        if c["subs"]:
            subs_cases.append("\t%s) echo '%s' ;;" % (c["name"], sh_words(c["subs"])))
        for sub, inner in c["nested"].items():
            subs_cases.append("\t%s/%s) echo '%s' ;;" % (c["name"], sub, sh_words(inner)))
        if c["takes"]:
            takes_cases.append("\t%s) echo '%s' ;;" % (c["name"], sh_words(c["takes"])))
        for o, vals in c["values"].items():
            values_cases.append("\t%s/%s) echo '%s' ;;" % (c["name"], o, sh_words(vals)))
        for o, kind in c["name_opts"].items():
            kinds_cases.append("\t%s/%s) echo %s ;;" % (c["name"], o, kind))
        for sub, kind in c["positional"].items():
            kinds_cases.append("\t%s/%s) echo %s ;;" % (c["name"], sub, kind))
        if c["takes_command"]:
            cmd_cases.append(c["name"])
    commands = sh_words(c["name"] for c in tool)
    return """# bash completion for pgcoord. Generated by tools/gen-completion.py from pgcoord's own
# --help when pgcoord was built: do not edit. Needs nothing but bash (bash-completion loads it
# from share/bash-completion/completions/pgcoord; or source it from ~/.bashrc).

_pgcoord_opts() {
	case $1 in
%(opts)s
	esac
}

# Subcommands of a command, or of a command's subcommand (CMD/SUB).
_pgcoord_subs() {
	case $1 in
%(subs)s
	esac
}

# The options of a command that take a value.
_pgcoord_takes() {
	case $1 in
%(takes)s
	esac
}

# The values of CMD/--OPTION, when they are a fixed set.
_pgcoord_values() {
	case $1 in
%(values)s
	esac
}

# What names in the database CMD/--OPTION or CMD/SUB's first argument takes.
_pgcoord_kind() {
	case $1 in
%(kinds)s
	esac
}

# _pgcoord_names KIND: the names in the database, from pgcoord itself (its --json listing) on
# the DSN and schema of the command line, within 3 s; nothing at all when that fails.
_pgcoord_names() {
	local bin=${COMP_WORDS[0]} out
	local -a args=()
	command -v timeout >/dev/null 2>&1 || return 0
	[[ -n $_pgc_dsn ]] && args+=(-d "$_pgc_dsn")
	args+=(--json)
	case $1 in
	queues) args+=(queue stats) ;;
	schedules) args+=(cron list) ;;
	*) return 0 ;;
	esac
	[[ -n $_pgc_schema ]] && args+=(--schema "$_pgc_schema")
	out=$(PGCONNECT_TIMEOUT=2 timeout 3 "$bin" "${args[@]}" </dev/null 2>/dev/null) || return 0
	case $1 in
	queues) printf '%%s\n' "$out" | grep -o '{"queue":"[^"\\]*"' | sed 's/^{"queue":"//; s/"$//' ;;
	schedules) printf '%%s\n' "$out" | grep -o '[[,]{"name":"[^"\\]*"' | sed 's/^.{"name":"//; s/"$//' ;;
	esac | sort -u
}

_pgcoord() {
	local cur=${COMP_WORDS[COMP_CWORD]} prev=${COMP_WORDS[COMP_CWORD - 1]} w cmd= sub= sub2= i npos=0
	local _pgc_dsn= _pgc_schema= takes=
	COMPREPLY=()
	for ((i = 1; i < COMP_CWORD; i++)); do
		w=${COMP_WORDS[i]}
		if [[ -z $cmd ]]; then
			case $w in
			-d | --dsn)
				[[ ${COMP_WORDS[i + 1]} == = ]] && ((i++))
				((i++)); _pgc_dsn=${COMP_WORDS[i]} ;;
			--dsn=*) _pgc_dsn=${w#--dsn=} ;;
			-*) ;;
			*) cmd=$w; takes=" $(_pgcoord_takes "$cmd") " ;;
			esac
		elif [[ $w == -- ]]; then
			# Everything after "--" is the command that pgcoord runs.
			case $cmd in
			%(cmds)s) COMPREPLY=($(compgen -c -- "$cur")) ;;
			*) COMPREPLY=($(compgen -f -- "$cur")) ;;
			esac
			return 0
		elif [[ $w == --schema ]]; then
			[[ ${COMP_WORDS[i + 1]} == = ]] && ((i++))
			((i++)); _pgc_schema=${COMP_WORDS[i]}
		elif [[ $w == --schema=* ]]; then
			_pgc_schema=${w#--schema=}
		elif [[ $w == -* ]]; then
			# An option's value is not an argument; bash splits "--opt=V" into three words.
			if [[ ${COMP_WORDS[i + 1]} == = ]]; then
				((i += 2))
			elif [[ $w != *=* && $takes == *" $w "* ]]; then
				((i++))
			fi
		elif [[ -z $sub && " $(_pgcoord_subs "$cmd") " == *" $w "* ]]; then
			sub=$w
		elif [[ -n $sub && -z $sub2 && $npos -eq 0 && " $(_pgcoord_subs "$cmd/$sub") " == *" $w "* ]]; then
			sub2=$w
		else
			((npos++))
		fi
	done
	if [[ -z $cmd ]]; then
		case $prev in
		-d | --dsn) return 0 ;;
		esac
		if [[ $cur == -* ]]; then
			COMPREPLY=($(compgen -W '%(globals)s' -- "$cur"))
		else
			COMPREPLY=($(compgen -W '%(commands)s help' -- "$cur"))
		fi
		return 0
	fi
	if [[ $cmd == help ]]; then
		COMPREPLY=($(compgen -W '%(commands)s' -- "$cur"))
		return 0
	fi
	# An option's value: --opt VALUE or --opt=VALUE.
	local opt= val=$cur
	if [[ $cur == --*=* ]]; then
		opt=${cur%%%%=*}
		val=${cur#*=}
	elif [[ $cur == = && $prev == --* ]]; then
		opt=$prev
		val=
	elif [[ $prev == = && ${COMP_WORDS[COMP_CWORD - 2]} == --* ]]; then
		opt=${COMP_WORDS[COMP_CWORD - 2]}
	elif [[ $prev == -* && $takes == *" $prev "* ]]; then
		opt=$prev
	fi
	if [[ -n $opt ]]; then
		local vals kind
		vals=$(_pgcoord_values "$cmd/$opt")
		kind=$(_pgcoord_kind "$cmd/$opt")
		if [[ -n $vals ]]; then
			COMPREPLY=($(compgen -W "$vals" -- "$val"))
		elif [[ -n $kind ]]; then
			COMPREPLY=($(compgen -W "$(_pgcoord_names "$kind")" -- "$val"))
		elif [[ $cur != *=* && $cur != = ]]; then
			COMPREPLY=($(compgen -f -- "$val"))
		fi
		return 0
	fi
	local subs
	subs=$(_pgcoord_subs "$cmd")
	if [[ -n $subs && -z $sub && $cur != -* ]]; then
		COMPREPLY=($(compgen -W "$subs" -- "$cur"))
		return 0
	fi
	subs=$(_pgcoord_subs "$cmd/$sub")
	if [[ -n $sub && -n $subs && -z $sub2 && $npos -eq 0 && $cur != -* ]]; then
		COMPREPLY=($(compgen -W "$subs" -- "$cur"))
		return 0
	fi
	if [[ $cur == -* ]]; then
		COMPREPLY=($(compgen -W "$(_pgcoord_opts "$cmd${sub:+/$sub}")" -- "$cur"))
		return 0
	fi
	local kind
	[[ -n $sub && -z $sub2 && $npos -eq 0 ]] && kind=$(_pgcoord_kind "$cmd/$sub")
	if [[ -n $kind ]]; then
		COMPREPLY=($(compgen -W "$(_pgcoord_names "$kind")" -- "$cur"))
		return 0
	fi
	COMPREPLY=($(compgen -f -- "$cur"))
}

complete -F _pgcoord pgcoord
""" % {"opts": "\n".join(opts_cases), "subs": "\n".join(subs_cases),
       "takes": "\n".join(takes_cases), "values": "\n".join(values_cases),
       "kinds": "\n".join(kinds_cases),
       "cmds": " | ".join(cmd_cases) or "''", "globals": sh_words(globals_),
       "commands": commands}


def zsh_quote(s):
    return "'" + s.replace("'", "'\\''") + "'"


def gen_zsh(globals_, tool):
    opts_cases, subs_cases, cmd_cases = [], [], []
    for c in tool:
        opts_cases.append("\t(%s) reply=(%s) ;;" % (c["name"], sh_words(c["opts"])))
        for sub, own in c["subs"].items():
            opts_cases.append("\t(%s/%s) reply=(%s) ;;" % (c["name"], sub, sh_words(merged(own, c["opts"]))))
        if c["subs"]:
            subs_cases.append("\t(%s) reply=(%s) ;;" % (c["name"], sh_words(c["subs"])))
        if c["takes_command"]:
            cmd_cases.append(c["name"])
    described = "\n".join("\t\t%s" % zsh_quote("%s:%s" % (c["name"], c["summary"].replace(":", "\\:")))
                          for c in tool)
    return """#compdef pgcoord
# zsh completion for pgcoord. Generated by tools/gen-completion.py from pgcoord's own --help
# when pgcoord was built: do not edit. Installed as share/zsh/site-functions/_pgcoord.

_pgcoord_opts() {
	reply=()
	case $1 in
%(opts)s
	esac
}

_pgcoord_subs() {
	reply=()
	case $1 in
%(subs)s
	esac
}

_pgcoord() {
	local cmd= sub= w i
	local -a reply commands
	commands=(
%(described)s
	)
	for (( i = 2; i < CURRENT; i++ )); do
		w=${words[i]}
		if [[ -z $cmd ]]; then
			case $w in
			(-d|--dsn) (( i++ )) ;;
			(-*) ;;
			(*) cmd=$w ;;
			esac
		elif [[ $w == -- ]]; then
			# Everything after "--" is the command that pgcoord runs.
			case $cmd in
			(%(cmds)s) words=(${words[i+1,-1]}); (( CURRENT -= i )); _normal ;;
			(*) _files ;;
			esac
			return
		elif [[ -z $sub && $w != -* ]]; then
			_pgcoord_subs $cmd
			(( ${reply[(Ie)$w]} )) && sub=$w
		fi
	done
	if [[ -z $cmd ]]; then
		[[ ${words[CURRENT-1]} == (-d|--dsn) ]] && return
		if [[ $PREFIX == -* ]]; then
			compadd -- %(globals)s
		else
			_describe -t commands 'pgcoord command' commands
			compadd -- help
		fi
		return
	fi
	if [[ $cmd == help ]]; then
		_describe -t commands 'pgcoord command' commands
		return
	fi
	_pgcoord_subs $cmd
	if (( ${#reply} )) && [[ -z $sub && $PREFIX != -* ]]; then
		compadd -- $reply
		return
	fi
	if [[ $PREFIX == -* ]]; then
		_pgcoord_opts $cmd${sub:+/$sub}
		compadd -- $reply
		return
	fi
	_files
}

_pgcoord "$@"
""" % {"opts": "\n".join(opts_cases), "subs": "\n".join(subs_cases),
       "cmds": "|".join(cmd_cases) or "''", "globals": sh_words(globals_),
       "described": described}


def main():
    if len(sys.argv) != 4 or sys.argv[1] not in ("bash", "zsh"):
        sys.exit(__doc__.split("\n\n")[1])
    globals_, tool = read_tool(sys.argv[2])
    text = gen_bash(globals_, tool) if sys.argv[1] == "bash" else gen_zsh(globals_, tool)
    with open(sys.argv[3], "w") as f:
        f.write(text)


if __name__ == "__main__":
    main()

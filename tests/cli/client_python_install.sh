#!/usr/bin/env bash
# The Python client installs as a package: `pip install` of clients/python into a fresh virtual
# environment of Debian's interpreter (which sees python3-psycopg through
# --system-site-packages), offline (--no-build-isolation --no-index: the build backend is
# Debian's setuptools; nothing is downloaded). Then, from outside the source tree, the
# installed package is the one imported, its py.typed marker is there, `python -m pgcoord
# --help` answers, and a Client speaks to the test server with the installed code.
. "$(dirname "$0")/lib.sh"
skip_without_pg
PY=${PGCOORD_PYTHON:-/usr/bin/python3}
missing=()
[ -x "$PY" ] || missing+=("$PY (Debian package python3)")
if [ -x "$PY" ]; then
	for m in psycopg:python3-psycopg psycopg_pool:python3-psycopg-pool setuptools:python3-setuptools \
		ensurepip:python3-venv pip:python3-pip; do
		"$PY" -c "import ${m%%:*}" 2>/dev/null || missing+=("${m#*:}")
	done
fi
if [ ${#missing[@]} -gt 0 ]; then
	[ "${PGCOORD_CI:-}" = 1 ] && fail "installing the Python client needs ${missing[*]}"
	echo "skipped: installing the Python client needs ${missing[*]}" >&2
	exit 77
fi
venv=$TMP/venv
"$PY" -m venv --system-site-packages "$venv" >"$TMP/venv.log" 2>&1 ||
	{ cat "$TMP/venv.log"; fail "python -m venv failed"; }
# The source tree is copied, so that the build's egg-info and build/ stay out of it.
cp -r "$SRC/clients/python" "$TMP/src"
rm -rf "$TMP/src/tests"
"$venv/bin/python" -m pip install --no-build-isolation --no-index --no-deps --quiet "$TMP/src" \
	>"$TMP/pip.log" 2>&1 || { cat "$TMP/pip.log"; fail "pip install ./clients/python failed"; }
cd "$TMP" || fail "cd $TMP"
where=$("$venv/bin/python" -c 'import pgcoord, os; print(os.path.dirname(pgcoord.__file__))') ||
	fail "the installed package does not import"
case "$where" in
"$venv"/*) ;;
*) fail "pgcoord was imported from $where, not from the virtual environment" ;;
esac
[ -f "$where/py.typed" ] || fail "the installed package has no py.typed"
"$venv/bin/python" -m pgcoord --help >"$TMP/help" 2>&1 || { cat "$TMP/help"; fail "python -m pgcoord --help failed"; }
grep -q "worker" "$TMP/help" || { cat "$TMP/help"; fail "python -m pgcoord --help does not name the worker"; }
export PGCOORD_DSN=$PGCOORD_TEST_DSN
own_schema pyinst
out=$("$venv/bin/python" - "$PGCOORD_TEST_DSN" "$S" <<'PY'
import sys
import pgcoord
with pgcoord.Client(sys.argv[1], schema=sys.argv[2]) as c:
    job = c.enqueue("q", {"hello": "installed"})
    print("enqueued", job is not None and job > 0)
PY
) || fail "the installed client could not enqueue"
[ "$out" = "enqueued True" ] || fail "the installed client said: $out"
exit 0

# install.sh - meson install into a temporary root; a program built with pkg-config links and runs
. "$(dirname "$0")/lib.sh"
BUILD=${PGCOORD_BUILD:?}
dest="$TMP/root"
meson install -C "$BUILD" --no-rebuild --quiet --destdir "$dest" >"$TMP/install.log" 2>&1 || { cat "$TMP/install.log"; fail "meson install"; }
pc=$(find "$dest" -name pgcoord.pc | head -n 1)
[ -n "$pc" ] || fail "pgcoord.pc not installed"
[ -n "$(find "$dest" -name pgcoord.h)" ] || fail "pgcoord.h not installed"
[ -n "$(find "$dest" -path '*/pgcoord/conn.h')" ] || fail "pgcoord/conn.h not installed"
[ -n "$(find "$dest" -name 'libpgcoord.a')" ] || fail "static library not installed"
so=$(find "$dest" -name 'libpgcoord.so.0*' -type f | head -n 1)
[ -n "$so" ] || fail "shared library with soversion 0 not installed"
[ -n "$(find "$dest" -name 'pgcoord' -type f -perm -u+x)" ] || fail "pgcoord binary not installed"
[ -n "$(find "$dest" -name 'pgcoord.1*')" ] || fail "man page not installed"
# The systemd units, and the shell completion where bash-completion and zsh look for it.
for f in lib/systemd/system/pgcoord-worker@.service lib/systemd/system/pgcoord-elect@.service \
	share/bash-completion/completions/pgcoord share/zsh/site-functions/_pgcoord; do
	[ -n "$(find "$dest" -path "*/$f" -type f)" ] || fail "$f not installed"
done
unit=$(find "$dest" -name 'pgcoord-worker@.service' | head -n 1)
bindir=$(dirname "$(find "$dest" -name pgcoord -type f -perm -u+x -path '*/bin/*' | head -n 1)")
grep -q "^ExecStart=${bindir#"$dest"}/pgcoord " "$unit" || fail "the worker unit does not run the installed pgcoord"
# Only pgc_ symbols are exported.
bad=$(nm -D --defined-only "$so" | awk '$2 ~ /^[TDBR]$/ {print $3}' | grep -v '^pgc_' || true)
[ -z "$bad" ] || fail "exported symbols without the pgc_ prefix: $bad"

cat >"$TMP/hello.c" <<'C'
#include <pgcoord.h>
#include <stdio.h>
#include <string.h>
int main(void)
{
	pgc_error err = PGC_ERROR_INIT;
	char *m = pgc_dsn_mask("postgresql://u:pw@h/db");
	int ok = m && strcmp(m, "postgresql://u:****@h/db") == 0;
	pgc_free(m);
	printf("pgcoord %s %s\n", pgc_version(), ok ? "ok" : "bad");
	return ok && err.code == 0 ? 0 : 1;
}
C
export PKG_CONFIG_PATH=$(dirname "$pc")
export PKG_CONFIG_SYSROOT_DIR="$dest"
flags=$(pkg-config --cflags --libs pgcoord) || fail "pkg-config --cflags --libs pgcoord"
extra=""
if [ -n "${PGCOORD_SANITIZE:-}" ] && [ "$PGCOORD_SANITIZE" != none ]; then extra="-fsanitize=$PGCOORD_SANITIZE"; fi
cc $extra -o "$TMP/hello" "$TMP/hello.c" $flags || fail "compile against the installed library"
LD_LIBRARY_PATH=$(dirname "$so") run 0 "$TMP/hello"
out_has "pgcoord [0-9.]* ok"
# It really linked the shared library. (ldd's output goes to a file first: under pipefail,
# grep -q leaving early could fail the pipeline with ldd's SIGPIPE.)
LD_LIBRARY_PATH=$(dirname "$so") ldd "$TMP/hello" >"$TMP/ldd" || fail "ldd $TMP/hello"
grep -q libpgcoord.so.0 "$TMP/ldd" || { cat "$TMP/ldd"; fail "not linked against libpgcoord.so.0"; }
echo ok

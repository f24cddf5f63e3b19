#!/usr/bin/env python3
"""tools/check-layers fails on an arrow that runs up the folder table, on a cycle between
folders, on a folder the table does not know, and on a tool file that reaches past the public
API; it passes on the tree as it is. Each case edits a copy of the sources."""
import os
import shutil
import subprocess
import sys
import tempfile

top, libs = sys.argv[1], sys.argv[2:]
script = os.path.join(top, "tools", "check-layers")


def run(tree):
    r = subprocess.run([sys.executable, script, tree] + libs, capture_output=True, text=True)
    return r.returncode, r.stdout


def case(name, path, line, want):
    with tempfile.TemporaryDirectory() as tmp:
        for d in ("src", "cli", "include"):
            shutil.copytree(os.path.join(top, d), os.path.join(tmp, d))
        full = os.path.join(tmp, path)
        os.makedirs(os.path.dirname(full), exist_ok=True)
        with open(full, "a", encoding="utf-8") as f:
            f.write(line + "\n")
        rc, out = run(tmp)
        assert rc == 1 and want in out, f"{name}: want {want!r} and exit 1, got {rc}:\n{out}"
        print(f"ok {name}: {want}")


rc, out = run(top)
assert rc == 0, out
print("ok the tree:", out.strip().splitlines()[-1])
# The bottom reaching up to the connection layer.
case("up-arrow", "src/base/names.c", '#include "conn/conn_int.h"',
     "src/base may not use src/conn")
# queue -> cron while cron -> queue: a cycle, refused as the arrow that closes it.
case("cycle", "src/queue/queue_flow.c", '#include "cron/tz_int.h"', "src/queue may not use src/cron")
case("unknown folder", "src/newthing/x.c", "int x;", "folder src/newthing has no row in LAYERS")
# The tool reaching into the library's insides.
case("tool past the API", "cli/cmd_lock.c", '#include "locks/locks_int.h"',
     "cli/cmd may not use src/locks")
case("web up to a command", "cli/web/web_api.c", '#include "cmd_worker_metrics.h"',
     "cli/web may not use cli/cmd")
# A libpq call that sends, outside the connection layer.
case("libpq outside conn", "src/queue/queue_flow.c", "static void f(PGconn *c) { PQexec(c, \"\"); }",
     "PQexec() outside the connection layer")

#!/usr/bin/env python3
"""The last line of make test names each skipped test and its reason (tools/test-summary),
read from a testlog.json in meson's format; in CI a skip is a failure."""
import json
import os
import subprocess
import sys
import tempfile

script = os.path.join(sys.argv[1], "tools", "test-summary")
with tempfile.TemporaryDirectory() as tmp:
    log = os.path.join(tmp, "testlog.json")
    with open(log, "w") as f:
        for name, result, err in [
            ("cli__basics", "OK", ""),
            ("run__behind_pgbouncer", "SKIP", "skipped: pgbouncer is not installed (Debian package pgbouncer)\n"),
            ("worker__behind_pgbouncer", "SKIP", "some output\nskipped: pgbouncer is not installed (Debian package pgbouncer)\n"),
            ("lock__seed_singleton", "SKIP", ""),
        ]:
            f.write(json.dumps({"name": name, "result": result, "stdout": "", "stderr": err}) + "\n")

    def run(*args):
        r = subprocess.run([script, log] + list(args), capture_output=True, text=True)
        return r.returncode, r.stdout.splitlines()

    rc, out = run("5", "0", "3")
    want = ("5 passed, 0 failed, 3 skipped: run__behind_pgbouncer, worker__behind_pgbouncer "
            "(pgbouncer is not installed (Debian package pgbouncer)); lock__seed_singleton (no reason given)")
    assert rc == 0 and out[-1] == want, (rc, out)
    assert "SKIP lock__seed_singleton: no reason given" in out, out
    rc, out = run("5", "0", "3", "1")
    assert rc == 1 and out[-1].startswith("5 passed, 3 failed, 3 skipped: "), (rc, out)
    rc, out = run("7", "0", "0")
    assert rc == 0 and out == ["7 passed, 0 failed"], (rc, out)
    rc, out = run("6", "1", "0")
    assert rc == 1 and out == ["6 passed, 1 failed"], (rc, out)
print("ok")

#!/usr/bin/env python3
"""tools/check-writes fails on a write to a pgcoord table planted in C code (whole or split
over literals, with the schema placeholder or a pasted schema name, in src/ or cli/), on one
outside the tables an allow-list entry names, and on an entry that allows nothing; it lets
reads, row locks and comments pass, and passes on the tree as it is. Each case edits a copy of
the sources."""
import os
import shutil
import subprocess
import sys
import tempfile

top = sys.argv[1]
script = os.path.join(top, "tools", "check-writes")


def run(tree):
    r = subprocess.run([sys.executable, script, tree], capture_output=True, text=True)
    return r.returncode, r.stdout + r.stderr


def copy(tmp):
    for d in ("src", "cli"):
        shutil.copytree(os.path.join(top, d), os.path.join(tmp, d))
    os.makedirs(os.path.join(tmp, "tools"))
    allow = os.path.join(top, "tools", "check-writes.allow")
    if os.path.exists(allow):
        shutil.copy(allow, os.path.join(tmp, "tools"))


def planted(path, text):
    with tempfile.TemporaryDirectory() as tmp:
        copy(tmp)
        full = os.path.join(tmp, path)
        with open(full, encoding="utf-8") as f:
            lines = f.read().count("\n")
        with open(full, "a", encoding="utf-8") as f:
            f.write(text + "\n")
        rc, out = run(tmp)
        return rc, out, lines + 1


def fails(name, path, text, want):
    rc, out, line = planted(path, text)
    where = f"{path}:{line}:"
    assert rc == 1 and where in out and want in out, \
        f"{name}: want exit 1 naming {where} and {want!r}, got {rc}:\n{out}"
    print(f"ok {name}: {where} {want}")


def passes(name, path, text):
    rc, out, _ = planted(path, text)
    assert rc == 0, f"{name}: want exit 0, got {rc}:\n{out}"
    print(f"ok {name}: passes")


rc, out = run(top)
assert rc == 0, out
print("ok the tree:", out.strip().splitlines()[-1])

fails("update", "src/queue/queue_flow.c",
      "static const char x[] = \"UPDATE @S@.jobs SET status = 'pending' WHERE id = $1\";",
      "UPDATE jobs")
# A statement template split over literals, a comment between two of them, inside a CTE.
fails("split delete in a CTE", "src/queue/queue_admin.c",
      "static const char x[] = \"WITH d AS (DELETE \"\n\t/* why */\n\t\"FROM @S@.job_history h\"\n"
      "\t\" WHERE h.id = $1 RETURNING 1) SELECT count(*) FROM d\";",
      "DELETE FROM job_history")
# A schema name pasted in with printf, in a macro continued over lines.
fails("pasted schema", "src/locks/lock.c",
      "#define X \"INSERT INTO \" \\\n\t\"%s.lock_names (key, name) VALUES ($1, $2)\"",
      "INSERT INTO lock_names")
fails("the tool too", "cli/cmd_queue.c", "static const char *t = \"TRUNCATE @S@.jobs, @S@.job_history\";",
      "TRUNCATE jobs")
fails("merge", "cli/web/web_api.c",
      "static const char *m = \"merge into @S@.queues q USING x ON true WHEN MATCHED THEN DO NOTHING\";",
      "MERGE INTO queues")
# An allow-list entry scoped to tables covers only those.
fails("outside an entry's tables", "src/doctor/doctor.c",
      "static const char *d = \"DELETE FROM @S@.jobs\";", "DELETE FROM jobs")

passes("reads, row locks, calls and comments", "src/queue/queue_browse.c",
       "static const char *r = \"SELECT id FROM @S@.jobs WHERE status = 'pending' FOR UPDATE SKIP LOCKED\";\n"
       "static const char *c = \"SELECT @S@.cancel($1::bigint)\";\n"
       "/* UPDATE @S@.jobs SET status = 'pending' */\n"
       "// DELETE FROM @S@.jobs\n"
       "static const char *g = \"GRANT SELECT, UPDATE ON @S@.job_groups TO @R@\";\n"
       "static const char *u = \"INSERT INTO t VALUES (1) ON CONFLICT (k) DO UPDATE SET n = 2\";")

# An entry that allows nothing any more fails, so the list only shrinks.
with tempfile.TemporaryDirectory() as tmp:
    copy(tmp)
    with open(os.path.join(tmp, "tools", "check-writes.allow"), "a", encoding="utf-8") as f:
        f.write("src/queue/queue_group.c: nothing to allow\n")
    rc, out = run(tmp)
    want = "src/queue/queue_group.c writes to no table it allows any more"
    assert rc == 1 and want in out, f"stale entry: want {want!r}, got {rc}:\n{out}"
    print(f"ok stale entry: {want}")

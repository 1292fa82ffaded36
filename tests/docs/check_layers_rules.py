#!/usr/bin/env python3
"""tests/docs/check_layers_rules.py — scripts/check_layers.py against small
trees made for the purpose: a clean tree passes, and each rule fails on a
violation planted for it (an include up the layer order, the core including
a client, a layer above backend/ reaching into backend/uring/ or naming
io_uring in code, a sched/ file of no client module, clients including each
other in a cycle, a source without its design comment, a stale allow line,
tools/ reaching into the library). A rule that stopped firing would let the
real tree's check pass for the wrong reason.

Usage: check_layers_rules.py SOURCE_ROOT   (exit 0 when every case holds)
"""
import os
import shutil
import subprocess
import sys
import tempfile

CHECKER = None


def src(rel, body="", includes=()):
    head = "/*\n * %s — a test file.\n */\n" % rel
    return head + "".join('#include "%s"\n' % i for i in includes) + body


CLEAN = {
    "base/error.h": src("base/error.h"),
    "backend/backend.h": src("backend/backend.h", includes=["backend/uring/uring.h"]),
    "backend/uring/uring.h": src("backend/uring/uring.h", "#include <liburing.h>\nint f(void){return IORING_OP_NOP;}\n"),
    "sched/core/sched.h": src("sched/core/sched.h", includes=["backend/backend.h", "base/error.h"]),
    "sched/job.c": src("sched/job.c", includes=["sched/core/sched.h", "sched/lane.h"]),
    "sched/job.h": src("sched/job.h"),
    "sched/lane.c": src("sched/lane.c", includes=["sched/lane.h"]),
    "sched/lane.h": src("sched/lane.h"),
    "io/uio.c": src("io/uio.c", "/* IORING_OP_READ in a comment is fine */\n", includes=["sched/job.h"]),
    "tx/wal.c": src("tx/wal.c", includes=["io/uio.h"]),
    "io/uio.h": src("io/uio.h"),
    "runtime/runtime.c": src("runtime/runtime.c", includes=["tx/wal.h", "sched/core/sched.h"]),
    "tx/wal.h": src("tx/wal.h"),
    "tools/t/main.c": '#include <urt/urt.h>\n#include "local.h"\n',
    "tools/t/local.h": "",
}

# name -> (files to change or add, a piece of the expected message)
CASES = {
    "include up the order": ({"sched/core/sched.h": src("sched/core/sched.h", includes=["sched/job.h"])},
                             "may not include layer sched/"),
    "core includes runtime": ({"sched/core/sched.h": src("sched/core/sched.h", includes=["runtime/runtime.h"])},
                              "may not include layer runtime/"),
    "into backend/uring": ({"io/uio.c": src("io/uio.c", includes=["backend/uring/uring.h"])},
                           "reaches into a backend's implementation"),
    "liburing above backend": ({"tx/wal.c": src("tx/wal.c", "#include <liburing.h>\n")}, "liburing"),
    "io_uring name in code": ({"tx/wal.c": src("tx/wal.c", "int g(void){return IOSQE_IO_LINK;}\n")}, "IOSQE_IO_LINK"),
    "sched file of no module": ({"sched/stray.c": src("sched/stray.c")}, "belongs to no client module"),
    "clients in a cycle": ({"sched/lane.c": src("sched/lane.c", includes=["sched/job.h"]),
                            "sched/lane.h": src("sched/lane.h", includes=["sched/job.h"]),
                            "sched/job.h": src("sched/job.h", includes=["sched/lane.h"])}, "cycle"),
    "no design comment": ({"tx/wal.c": "int x;\n"}, "does not open with its design comment"),
    "header names another file": ({"tx/wal.c": src("tx/other.c")}, "does not open with its design comment"),
    "tools into the library": ({"tools/t/main.c": '#include "sched/job.h"\n'}, "may include only"),
    "stale allow line": ({"scripts/layers-allow.txt": "tx/wal.c -> sched/job.h | nothing includes it\n"},
                         "no longer occurs"),
}


def make_tree(files):
    root = tempfile.mkdtemp(prefix="urt-layers-")
    for rel, text in files.items():
        path = os.path.join(root, rel)
        os.makedirs(os.path.dirname(path), exist_ok=True)
        with open(path, "w") as fh:
            fh.write(text)
    return root


def run(files):
    root = make_tree(files)
    try:
        r = subprocess.run([sys.executable, CHECKER, root], capture_output=True, text=True)
        return r.returncode, r.stdout + r.stderr
    finally:
        shutil.rmtree(root)


def main():
    global CHECKER
    CHECKER = os.path.join(sys.argv[1], "scripts", "check_layers.py")
    failed = 0
    rc, out = run(CLEAN)
    if rc != 0:
        print("clean tree: the checker failed it:\n" + out)
        failed += 1
    for name, (change, expect) in CASES.items():
        files = dict(CLEAN)
        files.update(change)
        rc, out = run(files)
        if rc == 0 or expect not in out:
            print("%s: want a failure naming %r, got exit %d:\n%s" % (name, expect, rc, out))
            failed += 1
    print("check_layers rules: %d of %d cases hold" % (len(CASES) + 1 - failed, len(CASES) + 1))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())

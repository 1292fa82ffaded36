#!/usr/bin/env python3
"""tools/check_usage.py SRCDIR TOOL... — test 'tools usage' (suite 'tools').

For each tool (a path to urt-load, urt-wal, urt-kv or urt-trace):
  * --help and --version exit 0 and print on stdout;
  * each bad usage below exits 2 with exactly one line on stderr and nothing
    on stdout;
  * every long option its --help names (--xyz) is documented in its man page
    man/<tool>.1, and so are --help and --version.
"""
import os
import re
import subprocess
import sys

BAD = {
    "urt-load": [["--no-such-option"], ["a", "b"], ["--workers"], ["--workers", "0"], ["no_such_workload"]],
    "urt-wal": [[], ["--no-such-option"], ["frobnicate", "/tmp"], ["list"], ["dump", "/tmp", "--hex", "x"],
                ["list", "/tmp", "extra"]],
    "urt-kv": [["--no-such-option"], ["extra"], ["--port"], ["--port", "x"], ["--durability", "fast"],
               ["--durability", "stored"], ["--workers", "0"], ["--dir", "/tmp", "--durability", "none"]],
    "urt-trace": [[], ["--no-such-option"], ["-p"], ["-p", "abc"], ["-p", "1", "0"], ["-p", "1", "1", "1", "x"]],
    "urt-dispatch": [[], ["--no-such-option"], ["frobnicate"], ["enqueue"], ["enqueue", "noop", "0"],
                     ["run", "--pool", "0"], ["run", "--pool", "x"], ["run", "--payload", "p"], ["migrate", "extra"],
                     ["run", "--lease-ms", "100", "--budget-ms", "200"], ["--conninfo"], ["cancel"],
                     ["cancel", "not-a-uuid"], ["requeue"], ["requeue", "--kind", "k"],
                     ["enqueue", "noop", "--key-mode", "sometimes"], ["enqueue", "noop", "--priority", "x"],
                     ["failed", "--limit", "0"], ["status", "--kind", "k"]],
}

srcdir, tools = sys.argv[1], sys.argv[2:]
errors = []
env = dict(os.environ, WORKERS="2")
env.pop("URT_WORKERS", None)
for path in tools:
    name = os.path.basename(path)
    for flag in ("--help", "--version"):
        r = subprocess.run([path, flag], capture_output=True, text=True, env=env, timeout=30)
        if r.returncode != 0 or not r.stdout.strip():
            errors.append("%s %s: exit %d, stdout %d bytes" % (name, flag, r.returncode, len(r.stdout)))
    for args in BAD.get(name, []):
        r = subprocess.run([path] + args, capture_output=True, text=True, env=env, timeout=30)
        lines = r.stderr.strip().splitlines()
        shown = "%s %s" % (name, " ".join(args))
        if r.returncode != 2:
            errors.append("%s: exit %d (expected 2)" % (shown, r.returncode))
        elif len(lines) != 1:
            errors.append("%s: %d lines on stderr (expected one saying why): %r" % (shown, len(lines), r.stderr))
        elif r.stdout:
            errors.append("%s: wrote to stdout on bad usage" % shown)
        else:
            print("ok  %s -> 2: %s" % (shown, lines[0]))
    page = os.path.join(srcdir, "man", name + ".1")
    if not os.path.exists(page):
        errors.append("%s: no man page man/%s.1" % (name, name))
        continue
    text = open(page).read().replace("\\-", "-")
    helptext = subprocess.run([path, "--help"], capture_output=True, text=True, env=env, timeout=30).stdout
    opts = set(re.findall(r"(?<![\w-])(--[a-z][a-z-]*)", helptext)) | {"--help", "--version"}
    for o in sorted(opts):
        if o not in text:
            errors.append("%s: option %s (in --help) is not in man/%s.1" % (name, o, name))
for e in errors:
    print("FAIL " + e)
sys.exit(1 if errors else 0)

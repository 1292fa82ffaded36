#!/usr/bin/env python3
"""tools/expect_usage_error.py NEEDLE PROGRAM [ARG...] — one bad-usage test.

Runs PROGRAM with the arguments (and the environment meson gives the test)
and passes only if the tool refused the usage as its man page promises
(EXIT STATUS): exit status 2, nothing on stdout, and a line
on stderr that names the offending value (NEEDLE, a substring; empty: any
line). A meson `should_fail : true` test passed on any non-zero exit, a crash
or a sanitizer's report included; this one fails on those.
"""
import subprocess
import sys

if len(sys.argv) < 3:
    sys.exit("usage: expect_usage_error.py NEEDLE PROGRAM [ARG...]")
needle, argv = sys.argv[1], sys.argv[2:]
r = subprocess.run(argv, capture_output=True, text=True, timeout=30)
shown = " ".join(argv)
problems = []
if r.returncode != 2:
    problems.append("exit status %d (expected 2: a usage error)" % r.returncode)
if r.stdout:
    problems.append("wrote %d bytes to stdout on a usage error" % len(r.stdout))
lines = [ln for ln in r.stderr.splitlines() if ln.strip()]
if not lines:
    problems.append("said nothing on stderr")
elif needle and not any(needle in ln for ln in lines):
    problems.append("no line on stderr names %r" % needle)
if problems:
    print("%s:\n  %s\nstderr:\n%s" % (shown, "\n  ".join(problems), r.stderr), file=sys.stderr)
    sys.exit(1)
print("%s: exit 2, %r" % (shown, lines[0]))

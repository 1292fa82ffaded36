#!/usr/bin/env python3
"""tests/docs/check_batch_example.py SRCDIR — docs/batch.md shows the complete
example: its ```c block is examples/batch.c and the block after "Output:" is
examples/batch.expected, byte for byte (the example itself is built and run by
the 'examples' suite)."""
import re
import sys

src = sys.argv[1]
doc = open(f"{src}/docs/batch.md").read()
code = open(f"{src}/examples/batch.c").read().rstrip("\n")
out = open(f"{src}/examples/batch.expected").read().rstrip("\n")
blocks = re.findall(r"```c\n(.*?)\n```", doc, re.S)
ok = True
if code not in blocks:
    print("FAIL docs/batch.md: no ```c block equal to examples/batch.c (copy it over)")
    ok = False
m = re.search(r"Output:\n\n```\n(.*?)\n```", doc, re.S)
if not m or m.group(1) != out:
    print("FAIL docs/batch.md: the block after 'Output:' is not examples/batch.expected")
    ok = False
print("docs/batch.md example: %s" % ("ok" if ok else "out of date"))
sys.exit(0 if ok else 1)

#!/usr/bin/env python3
"""Every field of the configuration table (runtime/config.c FIELDS) has a row
in README.md's configuration table, so the README stays true as fields are
added. Usage: check_readme_config.py SOURCE_ROOT"""
import re
import sys

root = sys.argv[1]
src = open(f"{root}/runtime/config.c").read()
table = src[src.index("static const struct field FIELDS[]"):]
table = table[:table.index("};")]
fields = re.findall(r'(?:U32|U64|BOOL)\((\w+)', table) + re.findall(r'\{"(\w+)", F_', table)
readme = open(f"{root}/README.md").read()
missing = [f for f in fields if f"| `{f}` |" not in readme]
if not fields:
    print("no fields found in runtime/config.c: the parser is out of date")
    sys.exit(1)
if missing:
    print("README.md configuration table lacks: " + ", ".join(missing))
    sys.exit(1)
print(f"README.md documents all {len(fields)} configuration fields")

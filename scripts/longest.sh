#!/usr/bin/env bash
# scripts/longest.sh — the longest production files and functions, for the
# size limits of docs/design.md ("Size"): no production .c file over about
# 800 lines, no production function over about 80 lines.
#
#   scripts/longest.sh          top 15 of each, limits marked with '!'
#   N=40 scripts/longest.sh     top 40
#
# Production = base/ backend/ sched/ io/ tx/ runtime/ bpf/ dispatch/ graph/ batch/ tools/ bench/ (.c files;
# tests/ are not counted). A function is what the project's style makes it: a
# signature starting in column 0, a body from a '{' alone in column 0 to the
# next '}' in column 0; its length counts the lines from the signature's first
# line to the closing brace. Prints "lines  file[:line name]".
set -euo pipefail
cd "$(dirname "$0")/.."
N=${N:-15}
FILE_LIMIT=800
FUNC_LIMIT=80
mapfile -t files < <(find base backend sched io tx runtime bpf dispatch graph batch tools bench -name '*.c' ! -name '*.bpf.c' 2>/dev/null | sort)
mapfile -t bpf < <(find bpf -name '*.bpf.c' 2>/dev/null | sort)
files+=("${bpf[@]}")

echo "# longest production files (limit ~$FILE_LIMIT lines)"
wc -l "${files[@]}" | grep -v ' total$' | sort -rn | head -n "$N" |
  awk -v lim="$FILE_LIMIT" '{ printf "%s %5d  %s\n", ($1 > lim ? "!" : " "), $1, $2 }'

echo
echo "# longest production functions (limit ~$FUNC_LIMIT lines)"
awk '
  FNR == 1 { sig = 0; name = ""; inbody = 0 }
  # a signature: column 0, an identifier followed by "(", not a preprocessor
  # line, a comment, a declaration ending in ";" or an initializer.
  !inbody && /^[A-Za-z_]/ && /\(/ && !/;[ \t]*$/ && !/=/ && !/^(typedef|struct [A-Za-z_0-9]+ *\{|#)/ {
    line = $0
    sub(/\(.*/, "", line)
    n = split(line, w, /[ \t\*]+/)
    name = w[n]; sig = FNR
    next
  }
  !inbody && sig && /^\{/ { inbody = 1; next }
  !inbody && sig && /;[ \t]*$/ { sig = 0 }       # a prototype spread over lines
  inbody && /^\}/ {
    printf "%d %s:%d %s\n", FNR - sig + 1, FILENAME, sig, name
    inbody = 0; sig = 0
  }
' "${files[@]}" | sort -rn | head -n "$N" |
  awk -v lim="$FUNC_LIMIT" '{ printf "%s %5d  %s %s\n", ($1 > lim ? "!" : " "), $1, $2, $3 }'

#!/usr/bin/env bash
# examples/check-installed.sh BUILDDIR [EXAMPLE...] — test 'examples' (suite
# 'examples'): installs BUILDDIR into a temporary directory (meson install
# --destdir), builds each example with nothing but
#     cc ex.c $(pkg-config --cflags --libs urt)
# against that installation (PKG_CONFIG_PATH, PKG_CONFIG_SYSROOT_DIR and
# LD_LIBRARY_PATH point there), runs it, and compares its output with
# examples/<name>.expected. With PKG_CONFIG_PATH already naming an installed
# urt (the Debian package: URT_INSTALLED=1), it skips the install step.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
build=${1:?usage: check-installed.sh BUILDDIR [EXAMPLE...]}
shift
names=("$@")
((${#names[@]})) || names=(hello lanes_tx job_deadline conditional durable echo batch graph graph_io blocking)
CC=${CC:-cc}
tmp=$(mktemp -d "${TMPDIR:-/tmp}/urt-examples.XXXXXX")
trap 'rm -rf "$tmp"' EXIT
if [[ ${URT_INSTALLED:-0} != 1 ]]; then
  meson install -C "$build" --destdir "$tmp/root" --no-rebuild --quiet >"$tmp/install.log" 2>&1 ||
    { cat "$tmp/install.log" >&2; echo "check-installed: meson install failed" >&2; exit 1; }
  pc=$(find "$tmp/root" -name urt.pc -print -quit)
  [[ -n $pc ]] || { echo "check-installed: no urt.pc under the install" >&2; exit 1; }
  so=$(find "$tmp/root" -name 'liburt.so*' -print -quit)
  export PKG_CONFIG_PATH=$(dirname "$pc") PKG_CONFIG_SYSROOT_DIR=$tmp/root
  export LD_LIBRARY_PATH=$(dirname "$so")${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
fi
flags=$(pkg-config --cflags --libs urt)
echo "pkg-config --cflags --libs urt: $flags"
fail=0
for n in "${names[@]}"; do
  # shellcheck disable=SC2086
  if ! $CC -std=c17 -Wall -Wextra -Werror -o "$tmp/$n" "$here/$n.c" $flags 2>"$tmp/$n.cc"; then
    echo "FAIL $n: does not compile against the installed urt:"; cat "$tmp/$n.cc"; fail=1; continue
  fi
  if ! TMPDIR=$tmp URT_WORKERS= timeout 60 "$tmp/$n" >"$tmp/$n.out" 2>"$tmp/$n.err"; then
    echo "FAIL $n: exit status $?"; cat "$tmp/$n.err"; fail=1; continue
  fi
  if ! diff -u "$here/$n.expected" "$tmp/$n.out"; then
    echo "FAIL $n: output differs from examples/$n.expected"; fail=1; continue
  fi
  echo "ok   $n"
done
exit $fail

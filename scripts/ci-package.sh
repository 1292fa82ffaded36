#!/usr/bin/env bash
# scripts/ci-package.sh — CI step of issue 19: builds the Debian packages
# (dpkg-buildpackage -us -uc -b) from a clean copy of HEAD under a temporary
# directory, runs lintian (fails on errors, not on warnings), installs them on
# this machine (apt-get install ./liburt*.deb ./urt-tools*.deb), and builds,
# runs and checks every example against the installed package with
# `cc ex.c $(pkg-config --cflags --libs urt)` (examples/check-installed.sh).
# Also checks that liburt1 depends on libpq5 (dispatch is compiled in), and
# that `man urt_spawn`, `urt-wal --version` and `urt-dispatch --version` work
# once installed.
# Needs root (apt-get) and a Debian 12 machine. Leaves the .deb files in
# $OUT (default: a temporary directory, printed at the end).
set -euo pipefail
cd "$(dirname "$0")/.."
export DEBIAN_FRONTEND=noninteractive
SUDO=""
[[ $(id -u) -ne 0 ]] && SUDO=sudo
need=(build-essential debhelper dpkg-dev lintian man-db groff-base meson ninja-build pkg-config
      python3 liburing-dev libnuma-dev libisal-dev libjansson-dev libpq-dev systemtap-sdt-dev clang bpftool libbpf-dev)
missing=()
for p in "${need[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if ((${#missing[@]})); then
  $SUDO apt-get update -qq
  $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}"
fi
OUT=${OUT:-$(mktemp -d "${TMPDIR:-/tmp}/urt-deb.XXXXXX")}
version=$(sed -n '1s/^urt (\([^)]*\)).*/\1/p' debian/changelog)
src=$OUT/urt-$version
rm -rf "$src" && mkdir -p "$src"
git archive HEAD | tar -x -C "$src"
echo "== dpkg-buildpackage -us -uc -b in $src"
(cd "$src" && dpkg-buildpackage -us -uc -b) >"$OUT/build.log" 2>&1 ||
  { tail -50 "$OUT/build.log"; echo "ci-package: dpkg-buildpackage failed (log: $OUT/build.log)" >&2; exit 1; }
echo "== lintian"
changes=$(ls "$OUT"/urt_*.changes)
lintian --fail-on error --tag-display-limit 0 "$changes" | tee "$OUT/lintian.txt"
echo "== liburt1 depends on libpq5 (dispatch on PostgreSQL is compiled in)"
# (printed, then matched: `tee /dev/stderr` reopened the caller's log file
# with O_TRUNC when stdout and stderr went to one file, erasing what came before)
depends=$(dpkg-deb -f "$OUT"/liburt1_*.deb Depends)
echo "$depends"
grep -q 'libpq5' <<<"$depends" ||
  { echo "ci-package: liburt1 does not depend on libpq5" >&2; exit 1; }
echo "== apt-get install the packages"
(cd "$OUT" && $SUDO apt-get install -y -qq --reinstall ./liburt1_*.deb ./liburt-dev_*.deb ./urt-tools_*.deb)
echo "== examples against the installed package"
pkg-config --modversion urt
URT_INSTALLED=1 examples/check-installed.sh none
echo "== installed man pages and tools"
man -w urt_spawn urt urt-wal urt-kv >/dev/null
urt-wal --version
urt-load --version >/dev/null
urt-kv --version >/dev/null
urt-dispatch --version
man -w urt_dispatch_create urt-dispatch >/dev/null
echo "== remove them again (later CI steps test the tree, not the packages)"
$SUDO apt-get remove -y -qq liburt1 liburt-dev urt-tools >/dev/null
echo "ci-package: ok (packages in $OUT)"

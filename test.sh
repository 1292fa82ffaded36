#!/usr/bin/env bash
# test.sh — installs what is missing, builds urt, and runs every test suite.
#   ./test.sh                    plain build (-Werror), all suites
#   ./test.sh --sanitize=address,undefined    ASan+UBSan build
#   ./test.sh --sanitize=thread               TSan build
set -euo pipefail
cd "$(dirname "$0")"
scripts/deps.sh
SAN=none
for a in "$@"; do
  case "$a" in
    --sanitize=*) SAN=${a#--sanitize=} ;;
    *) echo "usage: $0 [--sanitize=address,undefined|thread]" >&2; exit 2 ;;
  esac
done
case "$SAN" in
  none) DIR=build-test; OPTS=() ;;
  address,undefined|undefined,address) DIR=build-asan; OPTS=(-Db_sanitize=address,undefined -Db_lundef=false) ;;
  thread) DIR=build-tsan; OPTS=(-Db_sanitize=thread -Db_lundef=false) ;;
  *) echo "test.sh: unknown sanitizer '$SAN' (address,undefined or thread)" >&2; exit 2 ;;
esac
# bpffs for the BPF suite (skipped with a reason where it cannot be mounted)
if [[ $(id -u) -eq 0 ]] && ! mountpoint -q /sys/fs/bpf 2>/dev/null; then
  mount -t bpf bpf /sys/fs/bpf 2>/dev/null || true
fi
[[ -d $DIR ]] || meson setup "$DIR" -Dwerror=true -Dfault_injection=true "${OPTS[@]}" >/dev/null
ninja -C "$DIR"
# The suites run with TMPDIR set to a scratch directory that must be empty
# when they end (scripts/meson-test-scratch.sh).
exec scripts/meson-test-scratch.sh test.sh "$DIR"

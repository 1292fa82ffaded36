#!/usr/bin/env bash
# scripts/deps.sh — installs the Debian 12 packages urt needs to build, test
# and trace, when any is missing. Idempotent; needs root (or sudo) only when
# something must be installed.
set -euo pipefail
PKGS=(
  build-essential meson ninja-build pkg-config   # build
  liburing-dev libnuma-dev numactl               # runtime
  libcriterion-dev                               # tests
  libjansson-dev                                 # urt-load --json
  libisal-dev                                    # CRC32C of the log
  libpq-dev postgresql                           # dispatch on PostgreSQL (urt/dispatch.h), its suite and bench
  libbpf-dev bpftool clang llvm systemtap-sdt-dev bpftrace   # probes and BPF
  libclang-rt-14-dev                             # sanitizer runtimes for clang builds / fuzzing
  fuse3 libfuse3-dev btrfs-progs xfsprogs e2fsprogs   # power-loss tests (plfs, loop-mounted images)
  man-db groff-base                              # man pages and their test (man/check_man.py)
  debhelper dpkg-dev lintian                     # Debian packages (scripts/ci-package.sh)
  gnuplot-nox                                    # charts (bench/plot)
  redis-tools                                    # redis-cli for urt-kv's protocol tests (tests/kv)
)
missing=()
for p in "${PKGS[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
((${#missing[@]} == 0)) && exit 0
echo "[deps] installing: ${missing[*]}" >&2
SUDO=""
[[ $(id -u) -ne 0 ]] && SUDO=sudo
$SUDO apt-get update -qq >&2
DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}" >&2

#!/usr/bin/env bash
# scripts/deps.sh [run|test] — installs the Debian 12 packages urt needs when
# any is missing. Idempotent; needs root (or sudo) only when something must
# be installed.
#   run   what building the library and the tools needs (./run.sh)
#   test  that plus what the test suites, the probes, the packaging checks
#         and the benchmarks' plots need (./test.sh, CI) — the default
# Quiet: one line per step on stderr; apt's own output goes to a log
# ($URT_DEPS_LOG, default /tmp/urt-deps.log), whose tail is shown if a
# step fails.
set -euo pipefail
PROFILE=${1:-test}
RUN_PKGS=(
  build-essential meson ninja-build pkg-config python3   # build
  liburing-dev libnuma-dev numactl               # runtime
  libjansson-dev                                 # urt-load --json
  libisal-dev                                    # CRC32C of the log
  systemtap-sdt-dev                              # USDT probes
)
TEST_PKGS=(
  libcriterion-dev                               # tests
  libseccomp-dev                                 # tests that refuse io_uring to a process
  libpq-dev postgresql                           # dispatch on PostgreSQL (urt/dispatch.h), its suite and bench
  libbpf-dev bpftool clang llvm bpftrace         # BPF programs, urt-trace, the BPF suite
  libclang-rt-14-dev                             # sanitizer runtimes for clang builds / fuzzing
  fuse3 libfuse3-dev btrfs-progs xfsprogs e2fsprogs   # power-loss tests (plfs, loop-mounted images)
  man-db groff-base                              # man pages and their test (man/check_man.py)
  debhelper dpkg-dev lintian                     # Debian packages (scripts/ci-package.sh)
  gnuplot-nox                                    # charts (bench/plot)
  redis-tools                                    # redis-cli for urt-kv's protocol tests (tests/kv)
)
case "$PROFILE" in
  run) PKGS=("${RUN_PKGS[@]}") ;;
  test) PKGS=("${RUN_PKGS[@]}" "${TEST_PKGS[@]}") ;;
  *) echo "usage: $0 [run|test]" >&2; exit 2 ;;
esac
missing=()
for p in "${PKGS[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
((${#missing[@]} == 0)) && exit 0
LOG=${URT_DEPS_LOG:-/tmp/urt-deps.log}
SUDO=""
[[ $(id -u) -ne 0 ]] && SUDO=sudo
step() { # step "what" command...: one line, the command's output to the log
  local what=$1 t0=$SECONDS; shift
  printf '[deps] %s ... ' "$what" >&2
  if "$@" >>"$LOG" 2>&1; then
    echo "ok ($((SECONDS - t0)) s)" >&2
  else
    echo "failed; the end of $LOG:" >&2
    tail -n 20 "$LOG" >&2
    exit 1
  fi
}
: >"$LOG"
step "apt-get update" $SUDO apt-get update -q
step "installing ${#missing[@]} packages (${missing[*]})" \
  $SUDO env DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends "${missing[@]}"

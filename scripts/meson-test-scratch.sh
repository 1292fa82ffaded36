#!/usr/bin/env bash
# scripts/meson-test-scratch.sh WHO BUILD_DIR [MESON TEST ARGS...] — runs
# `meson test -C BUILD_DIR --print-errorlogs --num-processes 2 ARGS...` with
# TMPDIR set to a scratch directory of its own, which must be empty when the
# suites end: a test that leaves a file or directory behind (a log
# directory, a forged sysfs tree, a tmpfs mount point) fails the run. After
# a failure the directory stays, with what the failed tests wrote. WHO names
# the caller in the messages. Used by test.sh and .ci/run.
set -uo pipefail
who=$1 dir=$2
shift 2
scratch=$(mktemp -d "${TMPDIR:-/tmp}/urtt.XXXXXX")
rc=0
TMPDIR=$scratch meson test -C "$dir" --print-errorlogs --num-processes 2 "$@" || rc=$?
# TSan's runtime creates TMPDIR/tsan.rodata.<pid> as a process starts and
# unlinks it at once (MapRodata); a crash test's child killed -9 in that
# window leaves it behind. It is the sanitizer's, not a test's: not counted.
find "$scratch" -maxdepth 1 -name 'tsan.rodata.*' -type f -size 0 -delete
if ((rc == 0)) && [[ -n $(ls -A "$scratch") ]]; then
  echo "$who: the suites left these in TMPDIR ($scratch):" >&2
  ls -lA "$scratch" >&2
  rc=1
fi
if ((rc == 0)); then
  rm -rf "$scratch"
else
  echo "$who: the tests' scratch files stay in $scratch" >&2
fi
exit $rc

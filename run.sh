#!/usr/bin/env bash
# run.sh — installs what is missing, builds urt (release), and runs the main
# job: urt-load's default run (every workload, each in a fresh process, with a
# summary). Extra arguments go to urt-load (e.g. --json, spawn_many_local).
set -euo pipefail
cd "$(dirname "$0")"
scripts/deps.sh run
if [[ ! -d build-release ]]; then
  echo "[run] configuring build-release (meson, release, no tests)" >&2
  meson setup build-release --buildtype=release -Dtests=false >/tmp/urt-build.log 2>&1 \
    || { tail -n 20 /tmp/urt-build.log >&2; exit 1; }
fi
echo "[run] building (ninja -C build-release)" >&2
ninja -C build-release >>/tmp/urt-build.log 2>&1 || { tail -n 30 /tmp/urt-build.log >&2; exit 1; }
exec build-release/tools/urt-load "$@"

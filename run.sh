#!/usr/bin/env bash
# run.sh — installs what is missing, builds urt (release), and runs the main
# job: urt-load's default run (every workload, each in a fresh process, with a
# summary). Extra arguments go to urt-load (e.g. --json, spawn_many_local).
set -euo pipefail
cd "$(dirname "$0")"
scripts/deps.sh
[[ -d build-release ]] || meson setup build-release --buildtype=release -Dtests=false >/dev/null
ninja -C build-release >/dev/null
exec build-release/tools/urt-load "$@"

#!/usr/bin/env bash
# bench/peers.sh — runs the peer harness (Tokio, oneTBB, the jogasaki-style
# scheduler, RocksDB; not part of this repository) with urt beside the peers,
# in the same rounds, and keeps the output in bench/results/<date>-<label>.txt.
# Method and file format: docs/benchmarks.md sections 5 and 6.
#
#   PEERS_DIR=/path/to/peers bench/peers.sh [label]      every workload urt implements
#   PEERS_DIR=... ONLY="tokio tbb jogasaki_style urt" ROUNDS=5 bench/peers.sh core
#
# PEERS_DIR (required): the harness directory, holding run-peers.sh (and
# common/aggregate.py for the median table).
# Only same-run ratios count (a noisy 2-vCPU VM): compare urt with the peers
# of the same file, and read the "# rounds" lines for bimodal workloads.
set -euo pipefail
LABEL=${1:-run}
if [[ -z ${PEERS_DIR:-} ]]; then
  echo "bench/peers.sh: set PEERS_DIR to the peer harness directory (the one holding run-peers.sh);" >&2
  echo "  the harness is not part of urt: see docs/benchmarks.md section 5" >&2
  exit 2
fi
[[ -x $PEERS_DIR/run-peers.sh ]] || { echo "bench/peers.sh: PEERS_DIR=$PEERS_DIR has no executable run-peers.sh" >&2; exit 2; }
PEERS_DIR=$(cd "$PEERS_DIR" && pwd)   # relative to the caller's directory
cd "$(dirname "$0")/.."
scripts/deps.sh
[[ -d build-release ]] || meson setup build-release --buildtype=release -Dtests=false >/dev/null
ninja -C build-release >/dev/null
mkdir -p bench/results
OUT=bench/results/$(date +%F-%H%M)-$LABEL.txt
{
  echo "# urt $(git rev-parse --short HEAD) $(date -u '+%F %T UTC')  label=$LABEL"
  echo "# command: EXTRA_PEERS=urt=build-release/tools/urt-load ONLY=\"${ONLY:-all}\" ROUNDS=${ROUNDS:-5} $PEERS_DIR/run-peers.sh"
  echo "# urt features: $(build-release/tools/urt-load --version 2>/dev/null | tr '\n' ' ')"
  echo "# load average before: $(cut -d' ' -f1-3 /proc/loadavg)"
} >"$OUT"
EXTRA_PEERS="urt=$PWD/build-release/tools/urt-load" "$PEERS_DIR/run-peers.sh" >"$OUT.lines" 2>"$OUT.stderr" || true
cat "$OUT.lines" >>"$OUT"
echo >>"$OUT"
python3 "$PEERS_DIR/common/aggregate.py" "$OUT.lines" --table >>"$OUT" 2>/dev/null || true
rm -f "$OUT.lines"
echo "# load average after: $(cut -d' ' -f1-3 /proc/loadavg)" >>"$OUT"
grep -h '^# rounds' "$OUT.stderr" >>"$OUT" || true
rm -f "$OUT.stderr"
echo "wrote $OUT" >&2
cat "$OUT"

#!/usr/bin/env bash
# bench/kv-tail.sh — one durable -P 16 SET run against urt-kv, for the tail:
# redis-benchmark's latency summary (avg, min, p50, p95, p99, max in ms)
# beside urt-kv's own commit latency (INFO commit_stored_latency, with
# URT_STATS_TIMING=true) and its log counters.
#
#   bench/kv-tail.sh [KV_BIN]
#
# Environment: N (requests, default 2000000; 4000000 makes 200 MB of log:
# three segment rolls and three checkpoints), PORT (7390), CLIENTS (50),
# KV_ARGS (more urt-kv options, e.g. "--checkpoint-mb 0"), KV_ENV (more
# environment for urt-kv, e.g. "URT_LOG_PREALLOC_KB=512"). Alternate two
# binaries run by run for a before/after (docs/kv.md, "The durable -P 16
# tail"). Needs redis-benchmark and redis-cli (Debian's redis-tools).
set -euo pipefail
BIN=${1:-build-release/tools/urt-kv}
PORT=${PORT:-7390}
N=${N:-2000000}
CLIENTS=${CLIENTS:-50}
D=$(mktemp -d "${TMPDIR:-/tmp}/kv-tail-XXXXXX")
PID=""
cleanup() {
  if [[ -n $PID ]]; then
    kill "$PID" 2>/dev/null || true
    wait "$PID" 2>/dev/null || true
  fi
  rm -rf "$D"
}
trap cleanup EXIT
# shellcheck disable=SC2086 # KV_ENV and KV_ARGS are word lists
env URT_STATS_TIMING=true ${KV_ENV:-} "$BIN" --port "$PORT" --durability stored --dir "$D/data" --quiet \
  ${KV_ARGS:-} 2>"$D/kv.log" &
PID=$!
for _ in $(seq 1 100); do
  redis-cli -p "$PORT" PING 2>/dev/null | grep -q PONG && break
  sleep 0.1
done
redis-benchmark -p "$PORT" -c "$CLIENTS" --threads 2 -P 16 -n "$N" -t set >"$D/bench" 2>&1
grep -E "throughput summary" "$D/bench" || true
echo "# client (ms): avg min p50 p95 p99 max"
grep -A1 -E "avg +min" "$D/bench" | tail -1
redis-cli -p "$PORT" INFO all | tr -d '\r' |
  grep -E "^(commit_stored_latency|log_fsyncs|log_flushes|log_commits|checkpoints|suspends):"

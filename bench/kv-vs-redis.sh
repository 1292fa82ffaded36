#!/usr/bin/env bash
# bench/kv-vs-redis.sh — urt-kv against redis-server with a client neither
# wrote: redis-benchmark, in one go, same machine, same run.
#
#   bench/kv-vs-redis.sh [label]
#
# Installs Debian's redis-server and redis-tools when missing, builds urt-kv
# (build-release), then for each server configuration runs
#   redis-benchmark -p PORT -c 50 -n N -t TEST --threads 2 --csv -P {1,16}
# for TEST in set, get, incr, each alone (N = 200000 at -P 1, 2000000 at
# -P 16), requests per second timed by the server's counter (bench/kv-rate.py)
# Durability pairs (docs/kv.md):
#   redis --appendonly yes --appendfsync always   <->  urt-kv --durability stored
#   redis --appendonly yes --appendfsync everysec <->  urt-kv --durability available
#   redis --appendonly no                          <->  urt-kv --durability none
# Redis single-threaded and with --io-threads 2 (--io-threads-do-reads yes);
# both with --save "" and their data in a fresh directory under TMPDIR.
# Output: bench/results/<date>-kv-<label>.txt: every CSV row (server, config,
# pipeline, test, rps, p50 ms, p99 ms) and a table of ratios against the
# targets (durable SET >= 2x Redis's rps with a lower p99; GET and INCR >=
# 1.3x the better Redis configuration of the same durability pair).
# Environment: N (200000), N16 (2000000: -n at -P 16), CLIENTS (50), PIPELINES ("1 16"), KV_WORKERS (2),
# PORT (6390), ROUNDS (1: each configuration runs ROUNDS times, interleaved),
# KV_BIN (an urt-kv binary to use instead of building build-release), ONLY
# (a space-separated subset of the configurations, e.g. "redis-always-1
# kv-stored"). URT_* variables reach urt-kv (URT_LOG_CHANNELS=0: the log with
# a channel per worker also under stored, urt-kv's default before it used one).
set -euo pipefail
LABEL=${1:-run}
N=${N:-200000}
N16=${N16:-2000000}
CLIENTS=${CLIENTS:-50}
PIPELINES=${PIPELINES:-"1 16"}
KV_WORKERS=${KV_WORKERS:-2}
PORT=${PORT:-6390}
ROUNDS=${ROUNDS:-1}
cd "$(dirname "$0")/.."
ROOT=$PWD

install_redis() {
  command -v redis-server >/dev/null && command -v redis-benchmark >/dev/null && return 0
  echo "[kv-vs-redis] installing redis-server and redis-tools" >&2
  local sudo=""
  [[ $(id -u) -ne 0 ]] && sudo=sudo
  $sudo apt-get update -qq >&2
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends redis-server redis-tools >&2
  # Debian starts a redis-server service on 6379 where systemd runs: ours use $PORT
}

KV_BIN=${KV_BIN:-build-release/tools/urt-kv}
KV_LOG_TAG="[kv-vs-redis]"
source bench/kv-lib.sh

# start_server NAME: redis-always-1, redis-everysec-2, ..., kv-stored, kv-available, kv-none
start_server() {
  local name=$1
  case $name in
    redis-*) local mode=${name#redis-}; start_redis "${mode%-*}" "${name##*-}" ;;
    kv-*) start_kv "$KV_BIN" "${name#kv-}" ;;
  esac
}

# One test at a time, its rate timed by the server's own counter
# (bench/kv-rate.py): redis-benchmark --threads notices a run's end only at
# its 250 ms timer, so its own figure is quantized (kept in a comment).
run_one() {
  local name=$1 p=$2 n=$N test
  [[ $p -gt 1 ]] && n=$N16
  for test in set get incr; do
    timed_benchmark "$p" "$n" "$test" # bench/kv-lib.sh: BENCH_CSV, BENCH_RATE
    echo "# $name -P $p $test: redis-benchmark's own rps $(cut -d, -f2 <<<"$BENCH_CSV"), the server's counter $BENCH_RATE" >>"$OUT"
    awk -F, -v s="$name" -v p="$p" -v rate="$BENCH_RATE" '{ printf "%s,%s,%s,%s,%s,%s\n", s, p, $1, rate, $5, $7 }' <<<"$BENCH_CSV"
  done
}

install_redis
build_kv
mkdir -p bench/results
OUT=bench/results/$(date +%F-%H%M)-kv-$LABEL.txt
CONFIGS=(redis-always-1 redis-always-2 kv-stored redis-everysec-1 redis-everysec-2 kv-available
         redis-no-1 redis-no-2 kv-none)
[[ -n ${ONLY:-} ]] && read -r -a CONFIGS <<<"$ONLY" # e.g. ONLY="redis-always-1 kv-stored"
{
  echo "# urt-kv vs redis-server $(redis-server --version | grep -o 'v=[0-9.]*'), urt $(git rev-parse --short HEAD), $(date -u '+%F %T UTC'), label=$LABEL"
  echo "# redis-benchmark -c $CLIENTS -n $N (-P 16: $N16) -t TEST --threads 2 --csv -P {$PIPELINES}, each test alone, rps by the server's counter; urt-kv --workers $KV_WORKERS; rounds $ROUNDS"
  echo "# data under ${TMPDIR:-/tmp} ($(df -T "${TMPDIR:-/tmp}" | awk 'NR==2 {print $2}')); load average before: $(cut -d' ' -f1-3 /proc/loadavg)"
  echo "server,pipeline,test,rps,p50_ms,p99_ms"
} >"$OUT"
for r in $(seq 1 "$ROUNDS"); do
  for cfg in "${CONFIGS[@]}"; do
    start_server "$cfg"
    for p in $PIPELINES; do
      run_one "$cfg" "$p" | tee -a "$OUT" >&2
    done
    stop_server
  done
done
echo "# load average after: $(cut -d' ' -f1-3 /proc/loadavg)" >>"$OUT"
python3 bench/kv-table.py "$OUT" >>"$OUT"
cat "$OUT"

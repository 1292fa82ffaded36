#!/usr/bin/env bash
# bench/kv-cpu.sh — the server's CPU per request, urt-kv against redis-server,
# same run, one server at a time (docs/kv.md "CPU per request").
#
#   bench/kv-cpu.sh [label]
#
# At -P 1 both servers share this machine with redis-benchmark's two client
# threads, which cap both: requests per second cannot tell them apart there.
# What does is the server's CPU per request: utime + stime of the server
# process (all its threads, /proc/PID/stat fields 14 and 15) read before and
# after each test, divided by the requests answered. Each test runs alone
# (-t set, then -t get, then -t incr) so its CPU is its own:
#   redis-benchmark -p PORT -c 50 -n N -t TEST -P P --threads 2 --csv
# with N = 400000 at -P 1 and 2000000 at -P 16 (P1_N, P16_N).
# Pairs: redis --appendonly yes --appendfsync always <-> urt-kv --durability
# stored; redis --appendonly no <-> urt-kv --durability none. Redis is
# single-threaded, both with --save "". Configurations alternate within a
# round; ROUNDS (3) rounds; kv-cpu-table.py reduces them to medians.
# Requests per second are timed by the server's own counter (bench/kv-rate.py,
# sampled every 10 ms): redis-benchmark --threads reports a run's time only at
# its 250 ms timer (up to 10 % slow for a 2.5 s run); its own figure is kept
# in a comment line beside each row.
# Output: bench/results/<date>-kv-cpu-<label>.txt (CSV rows server,pipeline,
# test,rps,p50_ms,p99_ms,cpu_us_per_req,client_cpu_us_per_req, then the
# table). The client's CPU per request is redis-benchmark's own (user +
# system, its `times` in a shell of its own): with the server's, it bounds
# the rate on a machine both share (online CPUs / the sum).
# urt-kv runs with its default workers (one with stored's one log channel,
# the online CPUs otherwise) unless KV_WORKERS says how many.
# Environment: ROUNDS, P1_N, P16_N, CLIENTS (50), KV_WORKERS (""), PORT (6390),
# KV_BIN (default build-release/tools/urt-kv, built when missing), ONLY (a
# subset of the configurations), TESTS_1 / TESTS_16 (tests per depth),
# KV_BIN_B (a second urt-kv binary, run as kv-b-* beside kv-*: before/after).
set -euo pipefail
LABEL=${1:-run}
ROUNDS=${ROUNDS:-3}
P1_N=${P1_N:-400000}
P16_N=${P16_N:-2000000}
CLIENTS=${CLIENTS:-50}
KV_WORKERS=${KV_WORKERS:-}
PORT=${PORT:-6390}
TESTS_1=${TESTS_1:-"set get incr"}
TESTS_16=${TESTS_16:-"set incr"}
cd "$(dirname "$0")/.."

KV_BIN=${KV_BIN:-build-release/tools/urt-kv}
KV_BIN_B=${KV_BIN_B:-}
KV_LOG_TAG="kv-cpu:"
source bench/kv-lib.sh
build_kv
command -v redis-server >/dev/null || { echo "kv-cpu: redis-server is missing (apt-get install redis-server)" >&2; exit 1; }

# start_server NAME: redis-always, redis-no, kv-stored, kv-none, kv-b-stored, kv-b-none
start_server() {
  local name=$1
  case $name in
    redis-*) start_redis "${name#redis-}" ;;
    kv-b-*) start_kv "$KV_BIN_B" "${name#kv-b-}" ;;
    kv-*) start_kv "$KV_BIN" "${name#kv-}" ;;
  esac
}

HZ=$(getconf CLK_TCK)

run_one() {
  local name=$1 p=$2 test=$3 n=$4
  timed_benchmark "$p" "$n" "$test" # bench/kv-lib.sh: BENCH_CSV, BENCH_RATE, BENCH_TICKS
  echo "# $name -P $p $test: redis-benchmark's own rps $(cut -d, -f2 <<<"$BENCH_CSV"), the server's counter $BENCH_RATE" >>"$OUT"
  awk -F, -v s="$name" -v p="$p" -v n="$n" -v d="$BENCH_TICKS" -v hz="$HZ" -v rate="$BENCH_RATE" -v c="${BENCH_CLIENT_US:-0}" \
    '{ printf "%s,%s,%s,%s,%s,%s,%.3f,%.3f\n", s, p, $1, rate, $5, $7, d * 1e6 / hz / n, c / n }' <<<"$BENCH_CSV"
}

mkdir -p bench/results
OUT=bench/results/$(date +%F-%H%M)-kv-cpu-$LABEL.txt
CONFIGS=(redis-always kv-stored redis-no kv-none)
[[ -n $KV_BIN_B ]] && CONFIGS=(redis-always kv-b-stored kv-stored redis-no kv-b-none kv-none)
[[ -n ${ONLY:-} ]] && read -r -a CONFIGS <<<"$ONLY"
{
  echo "# server CPU per request: urt-kv vs redis-server $(redis-server --version | grep -o 'v=[0-9.]*'), urt $(git rev-parse --short HEAD), $(date -u '+%F %T UTC'), label=$LABEL"
  echo "# redis-benchmark -c $CLIENTS --threads 2 --csv -t TEST: -P 1 -n $P1_N ($TESTS_1), -P 16 -n $P16_N ($TESTS_16); urt-kv --workers ${KV_WORKERS:-default} ($KV_BIN${KV_BIN_B:+, b: $KV_BIN_B}); rounds $ROUNDS"
  echo "# online CPUs: $(nproc)"
  echo "# data under ${TMPDIR:-/tmp} ($(df -T "${TMPDIR:-/tmp}" | awk 'NR==2 {print $2}')); load average before: $(cut -d' ' -f1-3 /proc/loadavg)"
  echo "server,pipeline,test,rps,p50_ms,p99_ms,cpu_us_per_req,client_cpu_us_per_req"
} >"$OUT"
for r in $(seq 1 "$ROUNDS"); do
  for cfg in "${CONFIGS[@]}"; do
    start_server "$cfg"
    for test in $TESTS_1; do run_one "$cfg" 1 "$test" "$P1_N" | tee -a "$OUT" >&2; done
    for test in $TESTS_16; do run_one "$cfg" 16 "$test" "$P16_N" | tee -a "$OUT" >&2; done
    stop_server
  done
  echo "# load average after round $r: $(cut -d' ' -f1-3 /proc/loadavg)" >>"$OUT"
done
python3 bench/kv-cpu-table.py "$OUT" >>"$OUT"
cat "$OUT"

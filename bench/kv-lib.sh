# bench/kv-lib.sh — what the urt-kv benchmarks share (sourced by
# bench/kv-vs-redis.sh and bench/kv-cpu.sh): building urt-kv, starting one
# server at a time on $PORT in a fresh data directory, waiting for its PONG,
# and stopping it (also on exit); one redis-benchmark run timed by the
# server's counter (timed_benchmark). The caller sets PORT, CLIENTS, KV_WORKERS (empty:
# urt-kv's own default, no --workers) and
# KV_LOG_TAG (the prefix of its messages) and runs from the source root.

# Builds build-release's urt-kv unless KV_BIN names another binary.
build_kv() {
  [[ $KV_BIN != build-release/tools/urt-kv ]] && return 0
  scripts/deps.sh
  [[ -d build-release ]] || meson setup build-release --buildtype=release -Dtests=false >/dev/null
  ninja -C build-release tools/urt-kv >/dev/null
}

wait_ready() {
  for _ in $(seq 1 300); do
    redis-cli -p "$PORT" PING 2>/dev/null | grep -q PONG && return 0
    sleep 0.1
  done
  echo "$KV_LOG_TAG server on $PORT did not answer" >&2
  return 1
}

SERVER_PID=""
DATA=""
stop_server() {
  [[ -n $SERVER_PID ]] || return 0
  kill "$SERVER_PID" 2>/dev/null || true
  wait "$SERVER_PID" 2>/dev/null || true
  SERVER_PID=""
  [[ -n $DATA ]] && rm -rf "$DATA"
  DATA=""
}
trap stop_server EXIT

# start_redis FSYNC [IO_THREADS]: FSYNC always | everysec | no (no: no AOF).
start_redis() {
  local mode=$1 threads=${2:-1}
  DATA=$(mktemp -d "${TMPDIR:-/tmp}/kv-bench-XXXXXX")
  local aof=(--appendonly yes --appendfsync "$mode")
  [[ $mode == no ]] && aof=(--appendonly no)
  local io=()
  [[ $threads -gt 1 ]] && io=(--io-threads "$threads" --io-threads-do-reads yes)
  redis-server --port "$PORT" --bind 127.0.0.1 --save "" --dir "$DATA" "${aof[@]}" "${io[@]}" \
    --daemonize no --logfile "$DATA/redis.log" &
  SERVER_PID=$!
  wait_ready
}

# start_kv BINARY DURABILITY: DURABILITY stored | available | none (none: no log).
start_kv() {
  local bin=$1 mode=$2
  DATA=$(mktemp -d "${TMPDIR:-/tmp}/kv-bench-XXXXXX")
  local dir=(--dir "$DATA")
  [[ $mode == none ]] && dir=()
  "$bin" --port "$PORT" ${KV_WORKERS:+--workers "$KV_WORKERS"} --durability "$mode" "${dir[@]}" --quiet 2>"$DATA.kv.log" &
  SERVER_PID=$!
  wait_ready
}

# CPU ticks (utime + stime) of the running server so far.
server_ticks() { awk '{ print $14 + $15 }' "/proc/$SERVER_PID/stat"; }

# timed_benchmark P N TEST: one redis-benchmark run (-c $CLIENTS --threads 2
# --csv) against the server on $PORT, its rate timed by the server's own
# counter (bench/kv-rate.py: redis-benchmark --threads notices a run's end
# only at its 250 ms timer, so its own figure is quantized). Sets BENCH_CSV
# (its CSV row, quotes dropped), BENCH_RATE (requests per second; 0 when the
# sampler failed), BENCH_TICKS (the server's CPU ticks during the run) and
# BENCH_CLIENT_US (redis-benchmark's own CPU, user + system, all its threads,
# in µs: on a machine the client shares with the server, server and client
# CPU per request together bound the rate, CPUs / (server + client)).
timed_benchmark() {
  local p=$1 n=$2 test=$3 rfd t0 ctf
  exec {rfd}< <(python3 bench/kv-rate.py "$PORT" "$n")
  read -r _ <&"$rfd" || true # "ready": the sampler has its base count (or it failed)
  ctf=$(mktemp)
  t0=$(server_ticks)
  # A shell of its own runs the client alone, so its `times` (children's
  # line) is the client's CPU and nothing else's.
  BENCH_CSV=$(bash -c 'redis-benchmark "$@" 2>/dev/null; s=$?; times >&3; exit $s' _ \
    -p "$PORT" -c "$CLIENTS" -n "$n" -t "$test" --threads 2 --csv -P "$p" 3>"$ctf" | tail -n +2 | tr -d '"')
  BENCH_TICKS=$(($(server_ticks) - t0))
  BENCH_CLIENT_US=$(awk 'NR == 2 { t = 0; for (i = 1; i <= 2; i++) { split($i, a, "m"); sub("s", "", a[2]); t += a[1] * 60 + a[2] } printf "%.0f", t * 1e6 }' "$ctf")
  rm -f "$ctf"
  read -r BENCH_RATE <&"$rfd" || BENCH_RATE=0
  exec {rfd}<&-
}

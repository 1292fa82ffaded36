#!/usr/bin/env bash
# bench/dispatch-vs-graphile.sh — urt's dispatcher (urt/dispatch.h) beside
# graphile-worker on the same machine and the same PostgreSQL cluster, one
# system at a time, the same number of database connections and the same
# concurrency (docs/dispatch.md, "Against graphile-worker").
#
#   throughput  N (100,000) no-op jobs enqueued in one batch while the
#               system's workers are running and idle — graphile-worker's
#               add_jobs (one statement), urt's urt_dispatch_enqueue with a
#               count (one statement) — and the time from the enqueue call
#               until every job has run once to completion; jobs/s = N /
#               that time. Checked in the database: urt — every strand
#               finished, every strand taken exactly once (try = 1);
#               graphile-worker — every job locked once and deleted once
#               (pg_stat_user_tables) and none left; both — the handler ran
#               N times (graphile-worker: each payload index once).
#   latency     jobs enqueued one at a time (one call each, not waiting for
#               the previous one) at a fixed rate, half of the slower
#               system's throughput in the same round (RATE to fix it), for
#               LAT_S seconds; enqueue call -> handler start, p50 / p99 / max.
#               Then the same at LOW_RATE (100/s), a rate both systems keep
#               up with: the latency of one job through an idle system.
# ROUNDS (3) rounds, each: both throughputs, then both latencies; the order
# of the two systems alternates from round to round. Each measurement gets a
# fresh database. The CPU seconds the server's processes (every backend and
# the postmaster's helpers) and the client process used are recorded beside
# each throughput: on a shared machine they say more than the wall clock.
#
# The cluster: initdb in a temporary directory, its Unix socket there, no
# TCP, fsync/synchronous_commit/full_page_writes off, max_connections 200 —
# the cluster tests/dispatch/pg_harness.c starts for the dispatch tests —
# as the postgres user when run as root; removed at exit.
# graphile-worker: installed from the npm registry into a temporary directory
# (GRAPHILE_VERSION, default 0.17.3: 0.18 needs Node 22, the machine has
# Node 20), run with its docs' high-throughput settings (local queue 500,
# completeJobBatchDelay 0, failJobBatchDelay 0): bench/dispatch-vs-graphile.js.
# urt: bench/dispatch-bench.c, built --buildtype=release in $BUILD, one
# runtime worker (WORKERS: Node runs JavaScript on one thread).
#
#   bench/dispatch-vs-graphile.sh                      # CONNS=5 POOL=256 N=100000 ROUNDS=3
#   ROUNDS=1 N=20000 bench/dispatch-vs-graphile.sh     # a quick look
# Writes bench/results/<date>-dispatch-vs-graphile.md (OUT to override).
set -euo pipefail
cd "$(dirname "$0")/.."
N=${N:-100000}
ROUNDS=${ROUNDS:-3}
CONNS=${CONNS:-5}        # database connections per system (urt: 1 control + CONNS-1 run connections)
POOL=${POOL:-256}        # concurrent jobs per system (urt pool, graphile concurrentJobs)
WORKERS=${WORKERS:-1}
LAT_S=${LAT_S:-3}
RATE=${RATE:-}
LOW_RATE=${LOW_RATE:-100}
GRAPHILE_VERSION=${GRAPHILE_VERSION:-0.17.3}
BUILD=${BUILD:-build-bench-dispatch}
OUT=${OUT:-bench/results/$(date +%Y-%m-%d-%H%M)-dispatch-vs-graphile.md}
((CONNS >= 2)) || { echo "dispatch-vs-graphile: CONNS must be at least 2" >&2; exit 2; }

command -v node >/dev/null && command -v npm >/dev/null || { echo "dispatch-vs-graphile: needs node and npm" >&2; exit 1; }
[[ -d $BUILD ]] || meson setup "$BUILD" --buildtype=release -Dtests=false -Ddispatch=enabled >/dev/null
ninja -C "$BUILD" bench/dispatch-bench >/dev/null
URT=$PWD/$BUILD/bench/dispatch-bench
BIN=${URT_PG_BINDIR:-$(pg_config --bindir 2>/dev/null || ls -d /usr/lib/postgresql/*/bin | sort -V | tail -1)}
[[ -x $BIN/initdb ]] || { echo "dispatch-vs-graphile: no initdb in $BIN" >&2; exit 1; }

DIR=$(mktemp -d /tmp/urt-vs-graphile.XXXXXX)
AS=()
if [[ $(id -u) -eq 0 ]]; then chown postgres "$DIR"; AS=(runuser -u postgres --); fi
cleanup() {
  "${AS[@]}" "$BIN/pg_ctl" -D "$DIR/data" -m immediate -w stop >/dev/null 2>&1 || true
  rm -rf "$DIR"
}
trap cleanup EXIT

echo "dispatch-vs-graphile: installing graphile-worker@$GRAPHILE_VERSION into $DIR/gw" >&2
mkdir -p "$DIR/gw"
(cd "$DIR/gw" && npm init -y >/dev/null && npm install --no-audit --no-fund --loglevel=error \
  "graphile-worker@$GRAPHILE_VERSION" >/dev/null)
cp bench/dispatch-vs-graphile.js "$DIR/gw/"
GW_VERSION=$(node -p "require('$DIR/gw/node_modules/graphile-worker/package.json').version")

"${AS[@]}" "$BIN/initdb" -D "$DIR/data" -A trust -U postgres -E UTF8 --no-locale -N >/dev/null
"${AS[@]}" "$BIN/pg_ctl" -D "$DIR/data" -l "$DIR/server.log" -w -o \
  "-k $DIR -c listen_addresses= -p 5432 -c fsync=off -c synchronous_commit=off -c full_page_writes=off -c max_connections=200" \
  start >/dev/null
PSQL=(psql -qtAX -h "$DIR" -U postgres)
export PGOPTIONS="-c client_min_messages=warning" NO_LOG_SUCCESS=1

newdb() { "${PSQL[@]}" -d postgres -c "DROP DATABASE IF EXISTS $1" -c "CREATE DATABASE $1" >/dev/null; }

# CPU seconds of every server process so far: the postmaster with its
# exited children (cutime, cstime) and its live children.
server_cpu() {
  local pm t
  pm=$(head -1 "$DIR/data/postmaster.pid")
  t=$(awk '{print $14 + $15 + $16 + $17}' "/proc/$pm/stat")
  for p in $(pgrep -P "$pm"); do t=$((t + $(awk '{print $14 + $15}' "/proc/$p/stat" 2>/dev/null || echo 0))); done
  echo "$t"
}

# The most connections db $1 had open at once while $2 runs (sampled every 0.5 s).
max_conns() {
  local db=$1 pid=$2 m=0 c
  while kill -0 "$pid" 2>/dev/null; do
    c=$("${PSQL[@]}" -d postgres -c "SELECT count(*) FROM pg_stat_activity WHERE datname = '$db'" 2>/dev/null || echo 0)
    ((c > m)) && m=$c
    sleep 0.5
  done
  echo "$m"
}

# system mode args... -> the driver's line, plus " conns C server_cpu_s S client_cpu_s C"
run() {
  local sys=$1 db=bench_$1_$RANDOM; shift
  newdb "$db"
  local before after line conns rc=0
  before=$(server_cpu)
  if [[ $sys == urt ]]; then
    /usr/bin/time -f "%U %S" -o "$DIR/time" "$URT" --connections $((CONNS - 1)) --pool "$POOL" --workers "$WORKERS" \
      "host=$DIR port=5432 user=postgres dbname=$db" "$@" >"$DIR/out" 2>"$DIR/err" &
  else
    DATABASE_URL="postgres://postgres@/$db?host=$DIR" CONNS=$CONNS POOL=$POOL \
      /usr/bin/time -f "%U %S" -o "$DIR/time" node "$DIR/gw/dispatch-vs-graphile.js" "$@" >"$DIR/out" 2>"$DIR/err" &
  fi
  local pid=$!
  conns=$(max_conns "$db" "$pid")
  wait "$pid" || rc=$?
  after=$(server_cpu)
  line=$(tail -1 "$DIR/out")
  if ((rc != 0)) || [[ $line != *"result ok"* ]]; then
    echo "dispatch-vs-graphile: $sys $* failed (exit $rc): $line" >&2
    tail -5 "$DIR/err" >&2
  fi
  echo "$line conns $conns server_cpu_s $(awk -v a="$before" -v b="$after" 'BEGIN {printf "%.2f", (b - a) / 100}') client_cpu_s $(awk '{printf "%.2f", $1 + $2}' "$DIR/time")"
}

field() { sed -n "s/.* $1 \([^ ]*\).*/\1/p" <<<" $2"; }

{
  echo "# urt dispatch vs graphile-worker ($(date -u +%Y-%m-%dT%H:%MZ))"
  echo
  echo "bench/dispatch-vs-graphile.sh: N=$N ROUNDS=$ROUNDS CONNS=$CONNS POOL=$POOL WORKERS=$WORKERS LAT_S=$LAT_S"
  echo "RATE=${RATE:-half of the slower throughput}; $(nproc) CPUs, load average at start $(cut -d' ' -f1-3 /proc/loadavg);"
  echo "$("$BIN/postgres" --version); Node $(node --version); graphile-worker $GW_VERSION (local queue 500,"
  echo "completeJobBatchDelay 0, failJobBatchDelay 0); urt $(git describe --always --dirty 2>/dev/null || echo '?')."
  echo "Both systems: $CONNS database connections (conns: the most seen at once), $POOL concurrent jobs."
  echo "Throughput: $N no-op jobs enqueued in one batch, enqueue call -> the last one completed. Latency: one job"
  echo "per call at the rate, enqueue call -> handler start. cpu: seconds used by the server's processes and by"
  echo "the client process during the throughput run."
  echo
  echo "| round | system | jobs/s | enqueue ms | server cpu s | client cpu s | conns | checked | rate /s | p50 ms | p99 ms | max ms | p50 ms at $LOW_RATE/s | p99 ms at $LOW_RATE/s |"
  echo "|---:|---|---:|---:|---:|---:|---:|---|---:|---:|---:|---:|---:|---:|"
} >"$OUT"

declare -A TP P50 P99 Q50 Q99
for ((round = 1; round <= ROUNDS; round++)); do
  if ((round % 2)); then order=(urt graphile); else order=(graphile urt); fi
  declare -A T L Q
  for s in "${order[@]}"; do T[$s]=$(run "$s" throughput "$N"); done
  rate=$RATE
  if [[ -z $rate ]]; then
    rate=$(awk -v a="$(field jobs_per_s "${T[urt]}")" -v b="$(field jobs_per_s "${T[graphile]}")" \
      'BEGIN {m = (a < b ? a : b); printf "%d", (m > 0 ? m / 2 : 100)}')
  fi
  n_lat=$((rate * LAT_S))
  for s in "${order[@]}"; do L[$s]=$(run "$s" latency "$rate" "$n_lat"); done
  for s in "${order[@]}"; do Q[$s]=$(run "$s" latency "$LOW_RATE" $((LOW_RATE * LAT_S))); done
  for s in urt graphile; do
    t=${T[$s]} l=${L[$s]} q=${Q[$s]}
    if [[ $t == *"result ok"* ]]; then
      if [[ $s == urt ]]; then chk="try=1: $(field db_finished "$t")/$N finished, $(field db_try_not_1 "$t") retried"
      else chk="$(field db_locked "$t") locked, $(field db_deleted "$t") deleted, dup $(field dup "$t")"; fi
    else chk="FAILED"; fi
    echo "| $round | $s | $(field jobs_per_s "$t") | $(field enqueue_ms "$t") | $(field server_cpu_s "$t") |" \
         "$(field client_cpu_s "$t") | $(field conns "$t") | $chk | $rate | $(field p50_ms "$l") | $(field p99_ms "$l") |" \
         "$(field max_ms "$l") | $(field p50_ms "$q") | $(field p99_ms "$q") |" | tee -a "$OUT"
    TP[$s]+="$(field jobs_per_s "$t") " P50[$s]+="$(field p50_ms "$l") " P99[$s]+="$(field p99_ms "$l") "
    Q50[$s]+="$(field p50_ms "$q") " Q99[$s]+="$(field p99_ms "$q") "
  done
done

med() { tr ' ' '\n' <<<"$1" | grep -v '^$' | sort -g | awk '{a[NR] = $1} END {print (NR ? a[int((NR + 1) / 2)] : "-")}'; }
{
  echo
  echo "Medians over the rounds:"
  echo
  echo "| system | jobs/s | latency p50 ms | latency p99 ms | p50 ms at $LOW_RATE/s | p99 ms at $LOW_RATE/s |"
  echo "|---|---:|---:|---:|---:|---:|"
  for s in urt graphile; do
    echo "| $s | $(med "${TP[$s]}") | $(med "${P50[$s]}") | $(med "${P99[$s]}") | $(med "${Q50[$s]}") | $(med "${Q99[$s]}") |"
  done
} | tee -a "$OUT"
echo "dispatch-vs-graphile: wrote $OUT"

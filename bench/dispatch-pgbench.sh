#!/usr/bin/env bash
# bench/dispatch-pgbench.sh — dispatch on PostgreSQL (SPEC C21) beside the
# database's own ceiling, same cluster, same run (docs/dispatch.md,
# "Benchmark").
#
# For P in $PROCS (default "1 2 4") processes, each with CONNS run
# connections (+1 control connection) and a pool of POOL runs:
#   throughput  STRANDS x P noop strands, all due, worked off by P
#               partitioned urt-dispatch processes; strands/s = the strands
#               finished between 10 % and 90 % of the backlog / that time
#               (start-up and the tail left out);
#   delay       then, with the same processes running, 80 % of the ceiling
#               (pgbench's tps with the fleet's run connections, measured
#               first; 80 % of the fleet's own rate when that is lower) for
#               DELAY_S seconds: strands scheduled evenly over the period, so
#               their delay is how late the fleet picks up work at that rate;
#               the processes' metrics windows (200 runs each) give total
#               delay p50 / p95 / p99 (median over the windows) and the
#               lease delay;
#   ceiling     pgbench -M prepared, each transaction the dispatcher's own
#               take and release statements (bench/dispatch-pgbench.sql) on
#               a strand of the client's own range, for PGBENCH_S seconds:
#               its tps is the strands/s the database can take and release.
#               Twice: with P x CONNS connections (the fleet's run
#               connections, the ones that send takes and releases: the
#               ratio column) and with P x (CONNS + 1) (every connection the
#               fleet opened, the control connections' scans included).
# The cluster is private (initdb in a temporary directory, a Unix socket
# there; as the postgres user when run as root), started with
# synchronous_commit=$SYNC (default off: the statements' CPU, not the disk's
# flush, is what both sides pay; SYNC=on to include it), and removed at exit.
# Writes bench/results/<date>-dispatch-pgbench.md (OUT to override).
#
# The dispatcher's backlog is VACUUM ANALYZEd before the fleet starts, as the
# ceiling's table is (ANALYZE=0: left never analyzed, the case of the control
# session's scan_plan, docs/dispatch.md). LOGS=dir keeps the processes' logs
# (r<round>-n<procs>-p<i>.log).
# ROUNDS (default 1) repeats the whole set, one row per process count and
# round, interleaved (a shared machine: compare within a round).
#
#   bench/dispatch-pgbench.sh                    # PROCS="1 2 4" CONNS=4 POOL=32 STRANDS=20000
#   ROUNDS=5 bench/dispatch-pgbench.sh           # the final same-run comparison
#   PROCS="1 2" STRANDS=5000 bench/dispatch-pgbench.sh
set -euo pipefail
cd "$(dirname "$0")/.."
PROCS=${PROCS:-"1 2 4"}
CONNS=${CONNS:-4}
POOL=${POOL:-32}
STRANDS=${STRANDS:-20000}
DELAY_S=${DELAY_S:-5}
ROUNDS=${ROUNDS:-1}
PIPELINE=${PIPELINE:-16}
PGBENCH_S=${PGBENCH_S:-10}
SYNC=${SYNC:-off}
WORKERS=${WORKERS:-1}
ANALYZE=${ANALYZE:-1}
BUILD=${BUILD:-build-bench-dispatch}
OUT=${OUT:-bench/results/$(date +%Y-%m-%d-%H%M)-dispatch-pgbench.md}

[[ -d $BUILD ]] || meson setup "$BUILD" --buildtype=release -Dtests=false -Ddispatch=enabled >/dev/null
ninja -C "$BUILD" tools/urt-dispatch >/dev/null
TOOL=$PWD/$BUILD/tools/urt-dispatch
BIN=${URT_PG_BINDIR:-$(pg_config --bindir 2>/dev/null || ls -d /usr/lib/postgresql/*/bin | sort -V | tail -1)}
[[ -x $BIN/initdb && -x $BIN/pgbench ]] || { echo "dispatch-pgbench: no initdb/pgbench in $BIN" >&2; exit 1; }

DIR=$(mktemp -d /tmp/urt-pgbench.XXXXXX)
AS=()
if [[ $(id -u) -eq 0 ]]; then chown postgres "$DIR"; AS=(runuser -u postgres --); fi
PIDS=()
cleanup() {
  for p in "${PIDS[@]}"; do kill -9 "$p" 2>/dev/null || true; done
  "${AS[@]}" "$BIN/pg_ctl" -D "$DIR/data" -m immediate -w stop >/dev/null 2>&1 || true
  rm -rf "$DIR"
}
trap cleanup EXIT
"${AS[@]}" "$BIN/initdb" -D "$DIR/data" -A trust -U postgres -E UTF8 --no-locale -N >/dev/null
"${AS[@]}" "$BIN/pg_ctl" -D "$DIR/data" -l "$DIR/server.log" -w -o \
  "-k $DIR -c listen_addresses= -c max_connections=400 -c synchronous_commit=$SYNC -c shared_buffers=256MB" \
  start >/dev/null
PSQL=(psql -qtAX -h "$DIR" -U postgres)
export PGOPTIONS="-c client_min_messages=warning"

newdb() { "${PSQL[@]}" -d postgres -c "DROP DATABASE IF EXISTS $1" -c "CREATE DATABASE $1" >/dev/null; }
unfinished() { "${PSQL[@]}" -d "$1" -c "SELECT count(*) FROM urt_strand WHERE exitval IS NULL"; }
now_s() { date +%s.%N; }

# Waits until at most $2 strands are unfinished in db $1; prints the time.
wait_left() {
  while (($(unfinished "$1") > $2)); do sleep 0.05; done
  now_s
}

run_fleet() { # procs db -> starts the processes (logs in $DIR/p<i>.log)
  local n=$1 db=$2
  PIDS=()
  for ((i = 1; i <= n; i++)); do
    "$TOOL" --conninfo "host=$DIR user=postgres dbname=$db" run --kinds noop --partition "$i" \
      --workers "$WORKERS" --pool "$POOL" --connections "$CONNS" --pipeline "$PIPELINE" --sleep-min-ms 10 --sleep-max-ms 100 --heartbeat-ms 200 \
      --metrics-every 200 >"$DIR/p$i.log" 2>&1 &
    PIDS+=($!)
  done
}

stop_fleet() {
  for p in "${PIDS[@]}"; do kill -TERM "$p"; done
  for p in "${PIDS[@]}"; do wait "$p" || true; done
  PIDS=()
}

# Median over the fleet's window lines after line $1 of each log: p50 p95 p99 (ms).
window_delays() {
  local from=$1 n=$2
  for ((i = 1; i <= n; i++)); do tail -n +"$from" "$DIR/p$i.log"; done |
    sed -n 's/.*total delay ms p50 \([0-9.]*\) p95 \([0-9.]*\) p99 \([0-9.]*\) .*/\1 \2 \3/p' |
    sort -n | awk '{a[NR]=$1; b[NR]=$2; c[NR]=$3} END {if (NR == 0) {print "- - -"; exit}
      m = int((NR + 1) / 2); print a[m], b[m], c[m]}'
}

dispatcher() { # procs ceiling_tps -> "strands/s delay_rate p50 p95 p99"
  local n=$1 db=disp_$1 total=$((STRANDS * $1)) ceil=$2
  newdb "$db"
  "$TOOL" --conninfo "host=$DIR user=postgres dbname=$db" migrate >/dev/null
  "${PSQL[@]}" -d "$db" -c "INSERT INTO urt_strand (kind) SELECT 'noop' FROM generate_series(1, $total)"
  # the same as the ceiling's table: statistics that know the backlog
  # (ANALYZE=0 leaves it never analyzed: the scan_plan case, docs/dispatch.md)
  if [[ $ANALYZE != 0 ]]; then "${PSQL[@]}" -d "$db" -c "VACUUM ANALYZE urt_strand"; fi
  run_fleet "$n" "$db"
  local t10 t90
  t10=$(wait_left "$db" $((total * 9 / 10)))
  t90=$(wait_left "$db" $((total / 10)))
  wait_left "$db" 0 >/dev/null
  local rate
  rate=$(awk -v s="$total" -v a="$t10" -v b="$t90" 'BEGIN {printf "%.0f", 0.8 * s / (b - a)}')
  # delay at 80 % of the ceiling (or of the fleet's rate when lower): strands
  # due evenly over DELAY_S seconds, from 1 s on
  local lines per n_delay drate
  drate=$(awk -v r="$rate" -v c="$ceil" 'BEGIN {m = (c > 0 && c < r) ? c : r; printf "%.0f", 0.8 * m}')
  lines=$(wc -l <"$DIR/p1.log")
  n_delay=$(awk -v r="$drate" -v d="$DELAY_S" 'BEGIN {printf "%d", r * d}')
  "${PSQL[@]}" -d "$db" -c "INSERT INTO urt_strand (kind, schedule) SELECT 'noop', now() + interval '1 s'
    + (g::float8 / ($n_delay::float8 / $DELAY_S)) * interval '1 s' FROM generate_series(1, $n_delay) g"
  wait_left "$db" 0 >/dev/null
  sleep 0.5
  per=$(window_delays $((lines + 1)) "$n")
  stop_fleet
  if [[ -n ${LOGS:-} ]]; then mkdir -p "$LOGS"; for ((i = 1; i <= n; i++)); do cp "$DIR/p$i.log" "$LOGS/r$round-n$n-p$i.log"; done; fi
  echo "$rate $drate $per"
}

ceiling() { # procs clients -> tps
  local n=$1 db=pgb_$1 clients=$2
  newdb "$db"
  "$TOOL" --conninfo "host=$DIR user=postgres dbname=$db" migrate >/dev/null
  "${PSQL[@]}" -d "$db" -c "INSERT INTO urt_strand (id, kind, max_attempts) SELECT md5(g::text)::uuid, 'pgb', 0
    FROM generate_series(0, ($clients + 1) * 1000) g"
  "${PSQL[@]}" -d "$db" -c "VACUUM ANALYZE urt_strand"
  "$BIN/pgbench" -n -M prepared -h "$DIR" -U postgres -c "$clients" -j "$clients" -T "$PGBENCH_S" \
    -f bench/dispatch-pgbench.sql "$db" 2>/dev/null | sed -n 's/^tps = \([0-9.]*\) .*/\1/p' | head -1
}

{
  echo "# Dispatch on PostgreSQL beside pgbench ($(date -u +%Y-%m-%dT%H:%MZ))"
  echo
  echo "bench/dispatch-pgbench.sh: PROCS=\"$PROCS\" CONNS=$CONNS POOL=$POOL STRANDS=$STRANDS DELAY_S=$DELAY_S"
  echo "PGBENCH_S=$PGBENCH_S SYNC=$SYNC ANALYZE=$ANALYZE; $(nproc) CPUs; $("$BIN/postgres" --version)."
  echo "WORKERS=$WORKERS worker(s) per process, PIPELINE=$PIPELINE statements in flight per connection. Strands/s: noop strands (take, run as a urt job,"
  echo "done-release) between 10 % and 90 % of a backlog. Ceiling: pgbench -M prepared running the same"
  echo "take and release statements, with the fleet's run connections (P x CONNS: the ratio) and with"
  echo "every connection it opened (P x (CONNS + 1): ratio all). Delays: total delay (schedule -> lease"
  echo "answered) with strands due at the delay rate (80 % of the ceiling, or of the fleet's rate when"
  echo "lower), median over the processes' metrics windows."
  echo
  echo "| round | processes | run conns | dispatcher strands/s | pgbench tps | ratio | pgbench tps, +control conns | ratio all | delay rate /s | delay p50 ms | p95 ms | p99 ms |"
  echo "|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|"
} >"$OUT"
pct() { awk -v a="$1" -v b="$2" 'BEGIN {printf "%.0f %%", (b > 0 ? 100 * a / b : 0)}'; }
for ((round = 1; round <= ROUNDS; round++)); do
  for p in $PROCS; do
    tps=$(ceiling "$p" $((p * CONNS)))
    tps_all=$(ceiling "$p" $((p * (CONNS + 1))))
    read -r rate drate p50 p95 p99 < <(dispatcher "$p" "${tps%.*}")
    echo "| $round | $p | $((p * CONNS)) | $rate | ${tps%.*} | $(pct "$rate" "$tps") | ${tps_all%.*} |" \
         "$(pct "$rate" "$tps_all") | $drate | $p50 | $p95 | $p99 |" | tee -a "$OUT"
  done
done
echo "dispatch-pgbench: wrote $OUT"

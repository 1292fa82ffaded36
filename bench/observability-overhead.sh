#!/usr/bin/env bash
# bench/observability-overhead.sh — overhead of the observability layer on
# spawn_many_local and yield_many (bench/obs-bench.c), four ways:
#   out       liburt built with -Dprobes=false (probe sites compiled out)
#   idle      probes compiled in, nothing attached (the semaphore/gate loads only)
#   attached  probes compiled in, urt-trace attached (done/steal/suspend/wake BPF programs)
#   stats     probes compiled in, URT_STATS_TIMING=true (in-process histograms)
# Modes are interleaved ROUNDS times (the machine is shared: ratios, not absolutes);
# the table gives the median and the best (lowest) over rounds of each run's
# median ns per unit: on a loaded machine the best is the steadier estimate.
# Two drivers: urt-load (tools/, docs/benchmarks.md protocol; out/idle/stats) and
# bench/obs-bench (same two workloads; it can wait for urt-trace to attach, so
# it also gives the attached row).
#   bench/observability-overhead.sh [ROUNDS]      (attached needs root and bpffs)
set -euo pipefail
cd "$(dirname "$0")/.."
ROUNDS=${1:-5}
export URT_WORKERS=${URT_WORKERS:-2}
SPAWN_IT=${SPAWN_IT:-40}
YIELD_IT=${YIELD_IT:-300}
[[ -d build-bench-out ]] || meson setup build-bench-out --buildtype=release -Dtests=false -Dprobes=false >/dev/null
[[ -d build-bench-in ]] || meson setup build-bench-in --buildtype=release -Dtests=false >/dev/null
ninja -C build-bench-out bench/obs-bench tools/urt-load >/dev/null
ninja -C build-bench-in >/dev/null
HAVE_TRACE=0
if [[ $(id -u) -eq 0 && -x build-bench-in/bpf/urt-trace ]] && mountpoint -q /sys/fs/bpf; then HAVE_TRACE=1; fi

load() { # mode workload -> ns per unit, from urt-load's rate line
  local mode=$1 wl=$2 bin=build-bench-in/tools/urt-load out
  [[ $mode == out ]] && bin=build-bench-out/tools/urt-load
  if [[ $mode == stats ]]; then out=$(URT_STATS_TIMING=true WORKERS=$URT_WORKERS $bin "$wl" 2>/dev/null)
  else out=$(WORKERS=$URT_WORKERS $bin "$wl" 2>/dev/null); fi
  awk '{printf "%.2f", 1e9 / $4}' <<<"$out"
}

run() { # mode workload iterations -> ns per unit
  local mode=$1 wl=$2 it=$3 out
  case $mode in
    out) out=$(build-bench-out/bench/obs-bench "$wl" "$it") ;;
    idle) out=$(build-bench-in/bench/obs-bench "$wl" "$it") ;;
    stats) out=$(URT_STATS_TIMING=true build-bench-in/bench/obs-bench "$wl" "$it") ;;
    attached)
      build-bench-in/bench/obs-bench "$wl" "$it" --wait-trace >/tmp/obs-bench.$$ 2>/dev/null &
      local bp=$!
      sleep 0.2
      build-bench-in/bpf/urt-trace -p "$bp" 1 >/dev/null 2>&1 &
      local tp=$!
      wait "$bp"
      kill -INT "$tp" 2>/dev/null || true
      wait "$tp" 2>/dev/null || true
      out=$(cat /tmp/obs-bench.$$); rm -f /tmp/obs-bench.$$ ;;
  esac
  awk '{print $3}' <<<"$out"
}

MODES=(out idle stats)
((HAVE_TRACE)) && MODES=(out idle attached stats)
declare -A R L
for ((r = 0; r < ROUNDS; r++)); do
  for m in "${MODES[@]}"; do
    R[$m,spawn_many_local]+="$(run "$m" spawn_many_local "$SPAWN_IT") "
    R[$m,yield_many]+="$(run "$m" yield_many "$YIELD_IT") "
    if [[ $m != attached ]]; then
      L[$m,spawn_many_local]+="$(load "$m" spawn_many_local) "
      L[$m,yield_many]+="$(load "$m" yield_many) "
    fi
  done
  echo "# round $((r + 1))/$ROUNDS done" >&2
done

median() { tr ' ' '\n' | grep -v '^$' | sort -g | awk '{a[NR]=$1} END {print a[int((NR+1)/2)]}'; }
best() { tr ' ' '\n' | grep -v '^$' | sort -g | head -1; }
table() { # title, name of the assoc array, modes...
  local title=$1 arr=$2; shift 2
  local -n A=$arr
  echo "$title"
  echo
  echo "| mode | spawn_many_local ns/task (median / best) | vs out | yield_many ns/yield (median / best) | vs out |"
  echo "|---|---:|---:|---:|---:|"
  local bs by s y m s1 y1 bs1 by1
  bs=$(median <<<"${A[out,spawn_many_local]}"); bs1=$(best <<<"${A[out,spawn_many_local]}")
  by=$(median <<<"${A[out,yield_many]}"); by1=$(best <<<"${A[out,yield_many]}")
  for m in "$@"; do
    s=$(median <<<"${A[$m,spawn_many_local]}"); s1=$(best <<<"${A[$m,spawn_many_local]}")
    y=$(median <<<"${A[$m,yield_many]}"); y1=$(best <<<"${A[$m,yield_many]}")
    awk -v m="$m" -v s="$s" -v y="$y" -v bs="$bs" -v by="$by" -v s1="$s1" -v y1="$y1" -v bs1="$bs1" -v by1="$by1" \
      'BEGIN {printf "| %s | %.2f / %.2f | %+.1f%% / %+.1f%% | %.2f / %.2f | %+.1f%% / %+.1f%% |\n", m, s, s1, 100*(s-bs)/bs, 100*(s1-bs1)/bs1, y, y1, 100*(y-by)/by, 100*(y1-by1)/by1}'
  done
  echo
  for m in "$@"; do echo "# $title $m spawn: ${A[$m,spawn_many_local]} yield: ${A[$m,yield_many]}" >&2; done
}
table "urt-load (WORKERS=$URT_WORKERS, $ROUNDS rounds)" L out idle stats
table "obs-bench (URT_WORKERS=$URT_WORKERS, $ROUNDS rounds, spawn $SPAWN_IT x 10,000 tasks, yield $YIELD_IT x 4,000 yields)" R "${MODES[@]}"

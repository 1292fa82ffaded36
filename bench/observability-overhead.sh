#!/usr/bin/env bash
# bench/observability-overhead.sh — overhead of the observability layer on
# spawn_many_local and yield_many (bench/obs-bench.c), four ways:
#   out       liburt built with -Dprobes=false (probe sites compiled out)
#   idle      probes compiled in, nothing attached (the semaphore/gate loads only)
#   attached  probes compiled in, urt-trace attached (done/steal/suspend/wake BPF programs)
#   stats     probes compiled in, URT_STATS_TIMING=true (in-process histograms)
# Modes are interleaved ROUNDS times (the machine is shared: ratios, not absolutes);
# the table gives the median over rounds of each run's median ns per unit.
#   bench/observability-overhead.sh [ROUNDS]      (attached needs root and bpffs)
set -euo pipefail
cd "$(dirname "$0")/.."
ROUNDS=${1:-5}
export URT_WORKERS=${URT_WORKERS:-2}
SPAWN_IT=${SPAWN_IT:-40}
YIELD_IT=${YIELD_IT:-300}
[[ -d build-bench-out ]] || meson setup build-bench-out --buildtype=release -Dtests=false -Dprobes=false >/dev/null
[[ -d build-bench-in ]] || meson setup build-bench-in --buildtype=release -Dtests=false >/dev/null
ninja -C build-bench-out obs-bench >/dev/null
ninja -C build-bench-in >/dev/null
HAVE_TRACE=0
if [[ $(id -u) -eq 0 && -x build-bench-in/tools/urt-trace ]] && mountpoint -q /sys/fs/bpf; then HAVE_TRACE=1; fi

run() { # mode workload iterations -> ns per unit
  local mode=$1 wl=$2 it=$3 out
  case $mode in
    out) out=$(build-bench-out/obs-bench "$wl" "$it") ;;
    idle) out=$(build-bench-in/obs-bench "$wl" "$it") ;;
    stats) out=$(URT_STATS_TIMING=true build-bench-in/obs-bench "$wl" "$it") ;;
    attached)
      build-bench-in/obs-bench "$wl" "$it" --wait-trace >/tmp/obs-bench.$$ 2>/dev/null &
      local bp=$!
      sleep 0.2
      build-bench-in/tools/urt-trace -p "$bp" 1 >/dev/null 2>&1 &
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
declare -A R
for ((r = 0; r < ROUNDS; r++)); do
  for m in "${MODES[@]}"; do
    R[$m,spawn_many_local]+="$(run "$m" spawn_many_local "$SPAWN_IT") "
    R[$m,yield_many]+="$(run "$m" yield_many "$YIELD_IT") "
  done
  echo "# round $((r + 1))/$ROUNDS done" >&2
done

median() { tr ' ' '\n' | grep -v '^$' | sort -g | awk '{a[NR]=$1} END {print a[int((NR+1)/2)]}'; }
echo "| mode | spawn_many_local ns/task | vs out | yield_many ns/yield | vs out |"
echo "|---|---:|---:|---:|---:|"
base_s=$(median <<<"${R[out,spawn_many_local]}")
base_y=$(median <<<"${R[out,yield_many]}")
for m in "${MODES[@]}"; do
  s=$(median <<<"${R[$m,spawn_many_local]}")
  y=$(median <<<"${R[$m,yield_many]}")
  awk -v m="$m" -v s="$s" -v y="$y" -v bs="$base_s" -v by="$base_y" \
    'BEGIN {printf "| %s | %.2f | %+.1f%% | %.2f | %+.1f%% |\n", m, s, 100*(s-bs)/bs, y, 100*(y-by)/by}'
done
echo
echo "raw (per round): " >&2
for m in "${MODES[@]}"; do echo "# $m spawn: ${R[$m,spawn_many_local]} yield: ${R[$m,yield_many]}" >&2; done

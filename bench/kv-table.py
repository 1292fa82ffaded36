#!/usr/bin/env python3
"""bench/kv-table.py RESULTS — the summary of bench/kv-vs-redis.sh.

Reads the CSV rows (server,pipeline,test,rps,p50_ms,p99_ms; several rounds
are reduced to their median rps and p99), and prints, per durability pair
and pipeline depth, urt-kv's rps and p99 beside Redis's single-threaded and
--io-threads 2 configurations, with the ratios the targets name:
  SET (durable pair stored <-> always): urt rps / Redis rps >= 2 and a lower p99
  GET and INCR (every pair): urt rps / the better Redis configuration >= 1.3
"""
import statistics
import sys
from collections import defaultdict

PAIRS = [("stored", "always"), ("available", "everysec"), ("none", "no")]

rows = defaultdict(list)
for line in open(sys.argv[1]):
    parts = line.strip().split(",")
    if len(parts) != 6 or line.startswith(("#", "server")):
        continue
    server, p, test, rps, p50, p99 = parts
    try:
        rows[(server, p, test.split()[0].upper())].append((float(rps), float(p50), float(p99)))
    except ValueError:
        continue


def med(key):
    v = rows.get(key)
    if not v:
        return None
    return (statistics.median(r[0] for r in v), statistics.median(r[1] for r in v),
            statistics.median(r[2] for r in v))


print()
print("## summary (median over rounds): rps and p99 ms; ratio = urt-kv rps / Redis rps")
print("%-22s %-5s %-5s %12s %8s %12s %8s %12s %8s %7s %s" % (
    "pair", "P", "test", "urt-kv rps", "p99", "redis-1 rps", "p99", "redis-2 rps", "p99", "ratio", "target"))
for kv, rd in PAIRS:
    pipes = sorted({k[1] for k in rows if k[0] == "kv-" + kv}, key=int)
    for p in pipes:
        for test in ("SET", "GET", "INCR"):
            u = med(("kv-" + kv, p, test))
            r1 = med(("redis-%s-1" % rd, p, test))
            r2 = med(("redis-%s-2" % rd, p, test))
            if not u or not (r1 or r2):
                continue  # ONLY may leave one Redis configuration out
            best = max((r for r in (r1, r2) if r), key=lambda r: r[0])
            ratio = u[0] / best[0]
            if test == "SET" and kv == "stored":
                ok = ratio >= 2 and u[2] < best[2]
                target = "%s (>= 2x, lower p99)" % ("met" if ok else "NOT met")
            elif test in ("GET", "INCR"):
                target = "%s (>= 1.3x)" % ("met" if ratio >= 1.3 else "NOT met")
            else:
                target = "-"

            def col(r):
                return ("%12.0f %8.3f" % (r[0], r[2])) if r else "%12s %8s" % ("-", "-")
            print("%-22s %-5s %-5s %12.0f %8.3f %s %s %7.2f %s" % (
                "%s<->%s" % (kv, rd), p, test, u[0], u[2], col(r1), col(r2), ratio, target))

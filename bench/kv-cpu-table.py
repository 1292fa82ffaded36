#!/usr/bin/env python3
"""bench/kv-cpu-table.py RESULTS — the summary of bench/kv-cpu.sh.

Reads the CSV rows (server,pipeline,test,rps,p50_ms,p99_ms,cpu_us_per_req
[,client_cpu_us_per_req]), reduces the rounds to medians, and prints per
durability pair, depth and test: Redis's and urt-kv's rps, p99 and server
CPU per request (us), the ratios, and the targets. Where the client's CPU
per request was recorded, it also prints it (urt-kv's runs) and the rate the
machine allows urt-kv's server with that client: the online CPUs (the
"# online CPUs" line, else this machine's) divided by server + client CPU
per request, every CPU busy. The targets:
  -P 1, no log (GET, SET, INCR): urt CPU/req <= 0.7x Redis's
  -P 1, stored <-> always (SET, INCR): urt CPU/req <= Redis's; SET rps >= Redis's
  -P 16, stored SET: rps >= 2x Redis's, lower p99
  -P 16, no log INCR: rps >= Redis's, CPU/req <= Redis's
A second urt-kv binary (kv-b-*, KV_BIN_B) gets its own columns (before).
"""
import math
import os
import statistics
import sys
from collections import defaultdict

PAIRS = [("stored", "always"), ("none", "no")]

rows = defaultdict(list)
ncpu = os.cpu_count() or 1
for line in open(sys.argv[1]):
    if line.startswith("# online CPUs:"):
        ncpu = int(line.split(":")[1])
        continue
    parts = line.strip().split(",")
    if len(parts) not in (7, 8) or line.startswith(("#", "server")):
        continue
    server, p, test, rps, p50, p99, cpu = parts[:7]
    client = parts[7] if len(parts) == 8 else "nan"
    try:
        rows[(server, p, test.split()[0].upper())].append(
            (float(rps), float(p50), float(p99), float(cpu), float(client)))
    except ValueError:
        continue


def med(key):
    v = rows.get(key)
    if not v:
        return None
    return tuple(statistics.median(r[i] for r in v) for i in range(5))


def target(kv, p, test, u, r):
    cpu = u[3] / r[3]
    rps = u[0] / r[0]
    if p == "1" and kv == "none":
        return "%s (CPU <= 0.7x)" % ("met" if cpu <= 0.7 else "NOT met")
    if p == "1" and kv == "stored" and test == "SET":
        ok = cpu <= 1 and rps >= 1
        return "%s (CPU <= 1x, rps >= 1x)" % ("met" if ok else "NOT met")
    if p == "1" and kv == "stored" and test == "INCR":
        return "%s (CPU <= 1x)" % ("met" if cpu <= 1 else "NOT met")
    if p == "16" and kv == "stored" and test == "SET":
        ok = rps >= 2 and u[2] < r[2]
        return "%s (rps >= 2x, lower p99)" % ("met" if ok else "NOT met")
    if p == "16" and kv == "none" and test == "INCR":
        ok = rps >= 1 and cpu <= 1
        return "%s (rps >= 1x, CPU <= 1x)" % ("met" if ok else "NOT met")
    return "-"


have_b = any(k[0].startswith("kv-b-") for k in rows)
have_c = any(not math.isnan(r[4]) for v in rows.values() for r in v)
print()
print("## summary (median over rounds): rps, p99 ms, server CPU us per request")
print()
head = "| pair | P | test | Redis rps | urt rps | Redis p99 | urt p99 | Redis us/req | urt us/req | CPU urt/Redis |"
if have_b:
    head += " before rps | before us/req |"
if have_c:
    head += " client us/req | urt bound rps |"
print(head + " target |")
print("|" + "---|" * (head.count("|") - 1 + 1))
for kv, rd in PAIRS:
    for p in ("1", "16"):
        for test in ("SET", "GET", "INCR"):
            u = med(("kv-" + kv, p, test))
            r = med(("redis-" + rd, p, test))
            if not u or not r:
                continue
            line = "| %s <-> %s | %s | %s | %.0f | %.0f | %.3f | %.3f | %.2f | %.2f | %.2f |" % (
                rd, kv, p, test, r[0], u[0], r[2], u[2], r[3], u[3], u[3] / r[3])
            if have_b:
                b = med(("kv-b-" + kv, p, test))
                line += (" %.0f | %.2f |" % (b[0], b[3])) if b else " - | - |"
            if have_c:
                line += (" %.2f | %.0f |" % (u[4], ncpu * 1e6 / (u[3] + u[4]))) if not math.isnan(u[4]) else " - | - |"
            print(line + " %s |" % target(kv, p, test, u, r))
if have_c:
    print()
    print("client us/req: redis-benchmark's own CPU per request in urt-kv's runs; urt bound rps:")
    print("%d online CPUs / (urt-kv's server + client CPU per request), every CPU busy." % ncpu)

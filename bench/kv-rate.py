#!/usr/bin/env python3
"""bench/kv-rate.py PORT N [INTERVAL_MS] — requests per second of one
redis-benchmark run, timed by the server's own counter.

redis-benchmark --threads N reports a run's time only at its 250 ms timer
(a thread that finished its share waits for the next tick; the run's total
is quantized to 250 ms): at -P 16 a 2.5 s run reads up to 10 % slow, at
-P 1 a 7 s run up to 4 %. This sampler is started before redis-benchmark;
it reads `total_commands_processed` (INFO stats, on one connection) every
INTERVAL_MS (default 10) and prints N divided by the time from the first
sample that shows the run's first request to the first that shows its
last, each end taken at the midpoint of the two samples around it (the
error is at most one interval over the whole run). Its own INFO commands
are subtracted (each is counted by Redis; urt-kv counts them too). It
prints "ready" once it has its base count (start redis-benchmark after
that line), then the rate: when N requests were counted, or, when the
count stops short of N for 1 s, the rate of what was counted (0 when no
request came within 30 s).
"""
import socket
import sys
import time


def info_count(sock, buf):
    sock.sendall(b"*2\r\n$4\r\nINFO\r\n$5\r\nstats\r\n")
    while True:
        if b"\r\n" in buf[0]:
            head, rest = buf[0].split(b"\r\n", 1)
            size = int(head[1:])
            while len(rest) < size + 2:
                rest += sock.recv(65536)
            body, buf[0] = rest[:size], rest[size + 2:]
            for line in body.split(b"\r\n"):
                if line.startswith(b"total_commands_processed:"):
                    return int(line.split(b":")[1])
            raise SystemExit("kv-rate: INFO stats has no total_commands_processed")
        buf[0] += sock.recv(65536)


def main():
    port, n = int(sys.argv[1]), int(sys.argv[2])
    interval = (int(sys.argv[3]) if len(sys.argv) > 3 else 10) / 1000.0
    sock = socket.create_connection(("127.0.0.1", port))
    buf = [b""]
    c0 = info_count(sock, buf)
    per_info = info_count(sock, buf) - c0  # what one of our INFOs adds (0 or 1)
    base, own = c0 + per_info, 0
    print("ready", flush=True)  # the caller starts redis-benchmark only now
    prev_t, t_start, last, t_last = time.monotonic(), None, 0, None
    deadline, idle_until = prev_t + 900, prev_t + 30
    while True:
        time.sleep(interval)
        c = info_count(sock, buf)
        own += per_info
        t = time.monotonic()
        done = c - base - own
        if t_start is None and done > 0:
            t_start = (prev_t + t) / 2
        if done > last:
            last, t_last = done, (prev_t + t) / 2
        if t_start is None and t > idle_until:
            print("0")  # no request came within 30 s: redis-benchmark did not run
            return
        if done >= n or (t_last is not None and t - t_last > 1.0) or t > deadline:
            # all N counted; or the run stopped short (a client failed):
            # the rate of what was counted
            end = min(done, n) if done >= n else last
            print("%.0f" % (end / (t_last - t_start)) if t_start is not None and t_last > t_start else "0")
            return
        prev_t = t


main()

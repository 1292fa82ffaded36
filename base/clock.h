/*
 * base/clock.h — the one clock of the runtime: CLOCK_MONOTONIC in
 * nanoseconds (vDSO, no system call). Every layer stamps with it: the
 * watcher's due times and the watchdog, probes and histograms, the log's
 * latency stamps, urt_now_ns() (urt/common.h).
 */
#ifndef URT_BASE_CLOCK_H
#define URT_BASE_CLOCK_H

#include <stdint.h>
#include <time.h>

static inline uint64_t urt_clock_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

#endif

/* tests/stress/test_wal_crash_long.c — the kill -9 test of
 * tests/unit/test_wal_crash.c with more cycles (stress suite). */
#define CRASH_CYCLES 1000
#include "../unit/test_wal_crash.c"

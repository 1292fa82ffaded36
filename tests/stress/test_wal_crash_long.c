/* tests/stress/test_wal_crash_long.c — the kill -9 test of
 * tests/unit/test_wal_crash.c (recover, restart, recover again, every
 * acknowledged commit and transaction checked) with more cycles (stress
 * suite): 100 in the plain build, 15 in the sanitizer builds (each cycle
 * is slower there), on top of the unit test's 200 / 25; URT_CRASH_CYCLES
 * runs more (a long soak: 1000 and up). */
#define CRASH_CYCLES SCALE(100, 15)
#define CRASH_PREALLOC_KB 1024 /* bounds the space the longer run holds */
#include "../unit/test_wal_crash.c"

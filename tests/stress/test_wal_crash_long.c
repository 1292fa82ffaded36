/* tests/stress/test_wal_crash_long.c — the kill -9 test of
 * tests/unit/test_wal_crash.c (recover, restart, recover again, every
 * acknowledged commit and transaction checked) with more cycles (stress
 * suite): 1000 in the plain build, 200 in the sanitizer builds (each cycle
 * is slower there). */
#ifdef URT_TEST_SANITIZED
#define CRASH_CYCLES 200
#else
#define CRASH_CYCLES 1000
#endif
#define CRASH_PREALLOC_KB 1024 /* bounds the space the longer run holds */
#include "../unit/test_wal_crash.c"

/* tests/stress/test_wal_crash_long.c — the kill -9 test of
 * tests/unit/test_wal_crash.c with more cycles (stress suite): 1000 in the
 * plain build, 400 in the sanitizer builds (each cycle is slower there). */
#ifdef URT_TEST_SANITIZED
#define CRASH_CYCLES 400
#else
#define CRASH_CYCLES 1000
#endif
#include "../unit/test_wal_crash.c"

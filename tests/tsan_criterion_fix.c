/*
 * tests/tsan_criterion_fix.c — lets criterion start under ThreadSanitizer.
 * Linked into the test executables of the TSan build only (tests/meson.build).
 *
 * Criterion's sandbox (BoxFort) maps its shared "inheritable arena" with
 * MAP_FIXED at a random address in [0x200000000000, 0x7f0000000000). Under
 * TSan almost all of that range is shadow or unused-by-design, so TSan's
 * mmap interceptor refuses the mapping and criterion aborts at start-up
 * ("Could not initialize inheritable arena", Snaipe/Criterion issue #274).
 *
 * This file defines mmap64 (the symbol libcriterion calls) in the executable,
 * which the dynamic linker puts before libtsan and libc for every library.
 * It forwards every call unchanged to the next definition (TSan's
 * interceptor, so TSan still sees every mapping), except a MAP_FIXED shared
 * mapping that TSan would refuse: that one is placed, without MAP_FIXED, at a
 * hint in the top TSan application range [0x7e8000000000, 0x7f0000000000),
 * which BoxFort also accepts (it checks only that the arena lies inside its
 * range). The child processes map the arena again at that same address,
 * which TSan accepts. Nothing else (rings, heap, the runtime) is affected:
 * those mappings are not MAP_FIXED shared mappings outside application memory.
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <dlfcn.h>
#include <errno.h>
#include <stdbool.h>
#include <stdint.h>
#include <sys/mman.h>
#include <sys/types.h>

#define BOXFORT_LO 0x200000000000ull
#define BOXFORT_HI 0x7f0000000000ull
#define TSAN_HIGH_APP_LO 0x7e8000000000ull

typedef void *mmap64_fn(void *, size_t, int, int, int, off64_t);

static bool tsan_high_app(uintptr_t a, size_t len)
{
    return a >= TSAN_HIGH_APP_LO && a + len <= BOXFORT_HI;
}

void *mmap64(void *addr, size_t len, int prot, int flags, int fd, off64_t off)
{
    static mmap64_fn *next;
    if (!next) {
        next = (mmap64_fn *)dlsym(RTLD_NEXT, "mmap64");
        if (!next) {
            errno = ENOSYS;
            return MAP_FAILED;
        }
    }
    uintptr_t a = (uintptr_t)addr;
    if ((flags & MAP_FIXED) && (flags & MAP_SHARED) && fd >= 0 && a >= BOXFORT_LO && a < BOXFORT_HI &&
        !tsan_high_app(a, len) && !(a >= 0x550000000000ull && a + len <= 0x568000000000ull)) {
        /* Spread the hints so arenas of several processes do not collide. */
        static uintptr_t hint = TSAN_HIGH_APP_LO + 0x10000000000ull;
        void *p = next((void *)hint, len, prot, flags & ~MAP_FIXED, fd, off);
        if (p != MAP_FAILED && !tsan_high_app((uintptr_t)p, len)) {
            munmap(p, len);
            errno = ENOMEM;
            return MAP_FAILED;
        }
        hint += (len + 0xffffffull) & ~0xffffffull;
        return p;
    }
    return next(addr, len, prot, flags, fd, off);
}

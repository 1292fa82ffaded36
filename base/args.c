/*
 * base/args.c — the failure messages of the shared argument checks
 * (base/args.h): formatted here, once, so every entry point words them alike.
 */
#include <errno.h>
#include <inttypes.h>

#include "base/args.h"
#include "base/error.h"

int urt__check_reserved(const char *fn, const char *arg, const void *words, size_t size, size_t n)
{
    const unsigned char *p = words;
    for (size_t i = 0; i < n; i++)
        for (size_t b = 0; b < size; b++)
            if (p[i * size + b])
                return urt__error(-EINVAL, "%s: %s->reserved[%zu] must be zero", fn, arg, i);
    return 0;
}

int urt__unknown_flags(const char *fn, unsigned bits)
{
    return urt__error(-EINVAL, "%s: unknown flags 0x%x", fn, bits);
}

int urt__out_of_range(const char *fn, const char *field, uint64_t v, uint64_t lo, uint64_t hi)
{
    return urt__error(-EINVAL, "%s: %s %" PRIu64 " is out of range (%" PRIu64 "..%" PRIu64 ")", fn, field, v, lo, hi);
}

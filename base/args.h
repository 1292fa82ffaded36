/*
 * base/args.h — the argument checks every public entry point shares, with
 * one wording each (docs/design.md, "Layers"; every layer may include it,
 * graph/, batch/ and dispatch/ too).
 *
 * A failed check records its message with urt__error (base/error.h) and
 * returns -EINVAL; the message begins with the public function's name and
 * names the field:
 *   URT_CHECK_RESERVED(fn, "opt", o)   "urt_x: opt->reserved[2] must be zero"
 *                                      (every element of o->reserved is zero:
 *                                      room for later fields, read as "unset")
 *   urt__check_flags(fn, f, ALL)       "urt_x: unknown flags 0x8"
 *                                      (no bit of f outside ALL)
 *   urt__check_range(fn, "worker", v, lo, hi)
 *                                      "urt_x: worker 9 is out of range (0..3)"
 * Both are cheap where they pass: the flag check is one inline test, the
 * message is formatted out of line only on failure, so the submission paths
 * that use it pay nothing more than the test they wrote by hand before.
 */
#ifndef URT_BASE_ARGS_H
#define URT_BASE_ARGS_H

#include <stddef.h>
#include <stdint.h>

/* 0, or -EINVAL with "<fn>: <arg>->reserved[i] must be zero" for the first
 * element i of words (n elements of size bytes) that is not zero. */
int urt__check_reserved(const char *fn, const char *arg, const void *words, size_t size, size_t n);

#define URT_CHECK_RESERVED(fn, arg, p)                                                                       \
    urt__check_reserved((fn), (arg), (p)->reserved, sizeof((p)->reserved[0]),                                 \
                        sizeof((p)->reserved) / sizeof((p)->reserved[0]))

/* Out of line: "<fn>: unknown flags 0x<bits>". */
int urt__unknown_flags(const char *fn, unsigned bits);

/* 0, or -EINVAL naming the bits of flags outside all. */
static inline int urt__check_flags(const char *fn, unsigned flags, unsigned all)
{
    if (__builtin_expect((flags & ~all) != 0, 0))
        return urt__unknown_flags(fn, flags & ~all);
    return 0;
}

/* Out of line: "<fn>: <field> <v> is out of range (<lo>..<hi>)". */
int urt__out_of_range(const char *fn, const char *field, uint64_t v, uint64_t lo, uint64_t hi);

/* 0, or -EINVAL when v is outside lo..hi (both included). */
static inline int urt__check_range(const char *fn, const char *field, uint64_t v, uint64_t lo, uint64_t hi)
{
    if (__builtin_expect(v < lo || v > hi, 0))
        return urt__out_of_range(fn, field, v, lo, hi);
    return 0;
}

#endif

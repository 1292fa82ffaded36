/*
 * base/error.c — the per-thread message behind urt_last_error() (base/error.h),
 * and the clock (urt_now_ns).
 */
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <time.h>

#include <urt/common.h>

#include "base/clock.h"
#include "base/error.h"

static _Thread_local char last_error[256];
static _Thread_local unsigned recorded;

int urt__error(int err, const char *fmt, ...)
{
    recorded++;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(last_error, sizeof(last_error), fmt, ap);
    va_end(ap);
    return err;
}

unsigned urt__error_seq(void)
{
    return recorded;
}

void urt__error_clear(void)
{
    last_error[0] = '\0';
}

URT_API const char *urt_last_error(void)
{
    return last_error;
}

URT_API uint64_t urt_now_ns(void)
{
    return urt_clock_ns();
}

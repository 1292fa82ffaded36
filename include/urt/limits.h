/*
 * urt/limits.h — kept for one release so that code including it still
 * builds: the admission limit is urt/admission.h, the watchdog and the state
 * dump are urt/watchdog.h. Include those (or urt/urt.h); this header goes
 * away in the next major release.
 */
#ifndef URT_LIMITS_H
#define URT_LIMITS_H

#include <urt/admission.h>
#include <urt/watchdog.h>

#endif

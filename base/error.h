/*
 * base/error.h — error recording for urt_last_error() (urt/common.h), usable
 * from every layer (docs/design.md, "Layers").
 *
 * A public entry point that fails records a one-line reason for the calling
 * thread and returns the -errno: `return urt__error(-EINVAL, "urt_x: ...");`.
 * The message is per thread (_Thread_local), overwritten by the next failure.
 */
#ifndef URT_BASE_ERROR_H
#define URT_BASE_ERROR_H

/* Records a message for urt_last_error() and returns err (a -errno). */
int urt__error(int err, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* Empties the calling thread's message (tests: to see that a call set one). */
void urt__error_clear(void);

#endif

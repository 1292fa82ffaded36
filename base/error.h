/*
 * base/error.h — error recording for urt_last_error() (urt/common.h), usable
 * from every layer (docs/design.md, "Layers").
 *
 * A public entry point that fails records a one-line reason for the calling
 * thread and returns the -errno: `return urt__error(-EINVAL, "urt_x: ...");`.
 * The message is per thread (_Thread_local), overwritten by the next failure.
 * This is the library's one way to say why: no layer writes a message into a
 * caller's buffer (urt_config_validate's err/err_len, kept for older callers,
 * is filled from it).
 */
#ifndef URT_BASE_ERROR_H
#define URT_BASE_ERROR_H

/* Records a message for urt_last_error() and returns err (a -errno). */
int urt__error(int err, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* Empties the calling thread's message (tests: to see that a call set one). */
void urt__error_clear(void);
/* How many messages the calling thread has recorded: a caller that passes a
 * lower layer's failure on compares it before and after the call to know
 * whether the layer said why (and says it itself if not). */
unsigned urt__error_seq(void);

#endif

/*
 * base/tls.h — the thread-local storage model of urt's hot per-thread
 * pointers.
 *
 * liburt is a shared library, so a plain _Thread_local is general-dynamic:
 * every access calls __tls_get_addr. URT_TLS_IE makes it initial-exec, a
 * %fs-relative load. Use it only for small variables on hot paths (a
 * pointer): initial-exec variables live in the static TLS block, of which a
 * library loaded by dlopen may take only a little (glibc's surplus).
 */
#ifndef URT_BASE_TLS_H
#define URT_BASE_TLS_H

#define URT_TLS_IE __attribute__((tls_model("initial-exec")))

#endif

/*
 * dispatch/deprecated.c — the run functions' names before urt 1.0 (they
 * lacked the run_ of the struct urt_dispatch_run they take), kept for one
 * release (include/urt/deprecated.h): each calls the function that replaced
 * it, so it behaves exactly as that one (its message names the new
 * function). No state of its own. Delete with the next soname, with
 * runtime/deprecated.c.
 */
#include <urt/urt.h>

URT_API int urt_dispatch_done(struct urt_dispatch_run *run, const char *exitval)
{
    return urt_dispatch_run_done(run, exitval);
}

URT_API int urt_dispatch_nap(struct urt_dispatch_run *run, uint64_t ns)
{
    return urt_dispatch_run_nap(run, ns);
}

URT_API int urt_dispatch_fail(struct urt_dispatch_run *run, const char *reason)
{
    return urt_dispatch_run_fail(run, reason);
}

URT_API int urt_dispatch_sql(struct urt_dispatch_run *run, const char *sql, const char *const *params,
                             uint32_t n_params, urt_dispatch_sql_fn *fn, void *arg)
{
    return urt_dispatch_run_sql(run, sql, params, n_params, fn, arg);
}

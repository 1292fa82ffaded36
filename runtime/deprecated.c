/*
 * runtime/deprecated.c — the names renamed on the way to urt 1.0, kept for
 * one release (include/urt/deprecated.h): each is a call of the function that
 * replaced it, with the arguments in the new order, so it behaves exactly as
 * that one (its errors, its message in urt_last_error(), which names the new
 * function). No state, no ordering of its own. The dispatch names live in
 * dispatch/deprecated.c (built with libpq). Delete both files, the header and
 * their symbols (debian/liburt1.symbols) with the next soname.
 */
#include <urt/urt.h>

URT_API int urt_io_init2(struct urt_io *io, urt_io_fn *fn, void *arg, unsigned flags)
{
    return urt_io_init_ex(io, fn, arg, flags);
}

URT_API int urt_graph_output(urt_graph *g, int step, int exchange)
{
    return urt_graph_add_output(g, step, exchange);
}

URT_API int urt_graph_input(urt_graph *g, int exchange, int step)
{
    return urt_graph_add_input(g, step, exchange);
}

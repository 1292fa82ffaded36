/*
 * backend/backend.c — the cold half of backend/backend.h's dispatch: each
 * call goes to the implementation the context (or caps) is of — io_uring's
 * ur_* (backend/uring/backend.c) or the portable backend's pb_*
 * (backend/portable/) — and the shutdown drain, written once on the
 * dispatched calls. The hot calls dispatch inline in backend/backend.h.
 *
 * A portable context is allocated here (be_init) and pointed to by
 * struct be_ctx's pb; a portable buffer ring is handed out as its pointer
 * with bit 0 set (backend/backend.h, be_bufring_portable).
 *
 * Memory ordering: none of its own (each implementation's contract holds).
 */
#include "backend/backend.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include <urt/runtime.h>

/* ---- probe and report ---------------------------------------------------------------------------- */

int be_probe(uint32_t disable, bool sqpoll, uint32_t sqpoll_idle_ms, struct be_caps *out)
{
    memset(out, 0, sizeof(*out));
    out->impl = BE_IMPL_URING;
    int err = ur_probe(disable, sqpoll, sqpoll_idle_ms, &out->ur);
    out->io_features = out->ur.io_features;
    return err;
}

int be_probe_portable(uint32_t disable, unsigned pool_threads, struct be_caps *out)
{
    memset(out, 0, sizeof(*out));
    out->impl = BE_IMPL_PORTABLE;
    out->io_features = BE_IO_ALL & ~(disable >> BE_IO_DISABLE_SHIFT);
    out->pool_threads = pool_threads ? pool_threads : 1;
    return 0;
}

const char *be_impl_name(enum be_impl impl)
{
    return impl == BE_IMPL_PORTABLE ? "portable" : "io_uring";
}

void be_features(const struct be_caps *caps, struct urt_features *f)
{
    if (caps->impl == BE_IMPL_URING) {
        ur_features(&caps->ur, f);
        f->backend = URT_BACKEND_IO_URING;
        return;
    }
    f->backend = URT_BACKEND_PORTABLE;
    f->setup_flags = 0;
    f->kernel_features = 0;
    f->defer_taskrun = f->coop_taskrun = f->single_issuer = false;
    f->registered_ring_fd = f->ringless_msg = f->ext_arg = f->sqpoll = false;
    f->io_features = caps->io_features;
}

int be_describe_setup(uint32_t setup_flags, char *buf, size_t len)
{
    return ur_describe_setup(setup_flags, buf, len);
}

/* ---- a thread's context ---------------------------------------------------------------------- */

int be_init(struct be_ctx *c, const struct be_caps *caps, struct be_shared *sh, uint32_t entries,
            uint32_t cq_entries)
{
    c->pb = NULL;
    if (caps->impl == BE_IMPL_URING)
        return ur_init(&c->ur, &caps->ur, entries, cq_entries);
    memset(&c->ur, 0, sizeof(c->ur));
    c->ur.ring.fd = -1;
    struct pb_ctx *pb = malloc(sizeof(*pb));
    if (!pb)
        return -ENOMEM;
    int err = pb_init(pb, &sh->pb);
    if (err) {
        free(pb);
        return err;
    }
    c->pb = pb;
    return 0;
}

void be_exit(struct be_ctx *c)
{
    if (c->pb) {
        pb_exit(c->pb);
        free(c->pb);
        c->pb = NULL;
        return;
    }
    ur_exit(&c->ur);
}

int be_flush(struct be_ctx *c)
{
    return c->pb ? pb_flush(c->pb) : ur_flush(&c->ur);
}

int be_wait(struct be_ctx *c, uint64_t timeout_ns)
{
    return c->pb ? pb_wait(c->pb, timeout_ns) : ur_wait(&c->ur, timeout_ns);
}

void be_poll(struct be_ctx *c)
{
    if (c->pb)
        pb_poll(c->pb);
    else
        ur_poll(&c->ur);
}

unsigned be_reap(struct be_ctx *c, be_event_fn *on_event, void *ctx)
{
    return c->pb ? pb_reap(c->pb, on_event, ctx) : ur_reap(&c->ur, on_event, ctx);
}

void be_drain(struct be_ctx *c, uint64_t step_ns, void (*step)(void *arg), bool (*more)(void *arg), void *arg,
              be_event_fn *on_event, void *ctx)
{
    for (;;) {
        if (step)
            step(arg);
        if (!more(arg))
            return;
        be_wait(c, step_ns); /* flushes first */
        be_poll(c);
        be_reap(c, on_event, ctx);
    }
}

#if URT_FAULT_INJECTION
void be_fault_sq_room(struct be_ctx *c, uint32_t entries)
{
    if (!c->pb)
        ur_fault_sq_room(&c->ur, entries);
}
#endif

/* ---- wake ---------------------------------------------------------------------------------- */

int be_shared_init(struct be_shared *sh, const struct be_caps *caps)
{
    memset(sh, 0, sizeof(*sh));
    sh->impl = caps->impl;
    if (caps->impl == BE_IMPL_URING) {
        ur_shared_init(&sh->ur); /* best effort (backend/backend.h) */
        return 0;
    }
    return pb_shared_init(&sh->pb, caps->pool_threads);
}

void be_shared_exit(struct be_shared *sh)
{
    if (sh->impl == BE_IMPL_URING)
        ur_shared_exit(&sh->ur);
    else if (sh->pb.pool)
        pb_shared_exit(&sh->pb);
    sh->pb.pool = NULL;
}

int be_wake(const struct be_caps *caps, struct be_shared *fallback, struct be_ctx *self, struct be_peer target,
            uint32_t cookie)
{
    if (__builtin_expect(caps->impl == BE_IMPL_URING, 1))
        return ur_wake(&caps->ur, fallback ? &fallback->ur : NULL, self ? &self->ur : NULL, target.fd, cookie);
    return pb_wake(target.fd); /* an eventfd write: any thread, no context needed */
}

/* ---- registered resources ------------------------------------------------------------------- */

int be_bufring_create(struct be_ctx *c, uint16_t bgid, uint32_t count, struct be_bufring **out)
{
    if (!c->pb)
        return ur_bufring_create(&c->ur, bgid, count, out);
    struct pb_bufring *r;
    int err = pb_bufring_create(c->pb, bgid, count, &r);
    if (err)
        return err;
    *out = (struct be_bufring *)((uintptr_t)r | 1u);
    return 0;
}

void be_bufring_unregister(struct be_ctx *c, struct be_bufring *r, uint16_t bgid)
{
    if (be_bufring_portable(r))
        pb_bufring_unregister(c->pb, be_bufring_pb(r), bgid);
    else
        ur_bufring_unregister(&c->ur, r, bgid);
}

void be_bufring_free(struct be_bufring *r, uint32_t count)
{
    if (be_bufring_portable(r))
        pb_bufring_free(be_bufring_pb(r));
    else
        ur_bufring_free(r, count);
}

int be_files_register(struct be_ctx *c, uint32_t n)
{
    return c->pb ? pb_files_register(c->pb, n) : ur_files_register(&c->ur, n);
}

int be_files_alloc_range(struct be_ctx *c, uint32_t off, uint32_t len)
{
    return c->pb ? pb_files_alloc_range(c->pb, off, len) : ur_files_alloc_range(&c->ur, off, len);
}

int be_files_update(struct be_ctx *c, uint32_t slot, int fd)
{
    return c->pb ? pb_files_update(c->pb, slot, fd) : ur_files_update(&c->ur, slot, fd);
}

int be_buffers_register(struct be_ctx *c, const struct iovec *iov, unsigned n)
{
    return c->pb ? pb_buffers_register(c->pb, iov, n) : ur_buffers_register(&c->ur, iov, n);
}

/*
 * examples/graph_io.c — an async processor in a task graph (urt/graph.h):
 * a reader processor reads a file in 4 KiB chunks with urt_io_read
 * (urt/io.h) and pushes each chunk through its port to a counter processor.
 *
 *   read (processor, async) --port--> count (processor)
 *
 * The reader's event() says URT_PROC_ASYNC; its async() submits the read;
 * the read's continuation calls urt_graph_async_done(); event() then runs
 * again on the worker that submitted the read, and pushes the chunk.
 *
 * Build: cc examples/graph_io.c $(pkg-config --cflags --libs urt)
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE /* mkstemp */
#endif
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>
#include <urt/urt.h>

#define CHUNK 4096
#define CHUNKS 32

struct reader {
    struct urt_io io;
    struct urt_graph_ctx *ctx;
    int fd;
    uint32_t next;   /* chunks read */
    int32_t got;     /* bytes of the last read, or -errno */
    bool in_flight, have;
    unsigned char buf[CHUNKS][CHUNK]; /* one per chunk: a pushed unit is the counter's */
};

static void read_done(struct urt_io *io, int32_t res, void *arg)
{
    struct reader *r = arg;
    (void)io;
    r->got = res;
    urt_graph_async_done(r->ctx, res < 0 ? res : 0); /* a -errno would abort the graph */
}

static int read_event(struct urt_graph_ctx *ctx, void *arg)
{
    struct reader *r = arg;
    if (r->in_flight) { /* back from the read, on the same worker */
        r->in_flight = false;
        r->have = r->got > 0;
    }
    if (r->have) {
        if (urt_graph_push(ctx, 0, r->buf[r->next - 1], (uint32_t)r->got) == -EAGAIN)
            return URT_PROC_NEED_CONSUME; /* the counter has not taken the previous chunk */
        r->have = false;
    }
    if (r->next == CHUNKS || (r->next && r->got < CHUNK)) {
        urt_graph_finish(ctx, 0);
        return URT_PROC_FINISHED;
    }
    return URT_PROC_ASYNC;
}

static int read_async(struct urt_graph_ctx *ctx, void *arg)
{
    struct reader *r = arg;
    r->ctx = ctx;
    r->in_flight = true;
    urt_io_init(&r->io, read_done, r);
    uint32_t k = r->next++;
    int err = urt_io_read(&r->io, r->fd, r->buf[k], CHUNK, (int64_t)k * CHUNK);
    if (err)
        r->in_flight = false;
    return err;
}

static uint64_t bytes, sum;

static int count_event(struct urt_graph_ctx *ctx, void *arg)
{
    (void)arg;
    struct urt_graph_unit u;
    int r;
    while ((r = urt_graph_pull(ctx, 0, &u)) == 1) {
        for (uint32_t i = 0; i < u.rows; i++)
            sum += ((const unsigned char *)u.data)[i];
        bytes += u.rows;
    }
    return r == -EPIPE ? URT_PROC_FINISHED : URT_PROC_NEED_DATA; /* -EPIPE: the reader finished */
}

int main(void)
{
    static struct reader r;
    char path[] = "/tmp/urt-graph-io.XXXXXX";
    r.fd = mkstemp(path);
    if (r.fd < 0)
        return 1;
    unlink(path);
    static unsigned char data[CHUNK * CHUNKS];
    for (size_t i = 0; i < sizeof(data); i++)
        data[i] = (unsigned char)(i % 251);
    if (write(r.fd, data, sizeof(data)) != (ssize_t)sizeof(data))
        return 1;

    urt_runtime *rt = NULL;
    urt_graph *g = NULL;
    if (urt_runtime_create(NULL, &rt) || urt_graph_create(rt, NULL, &g)) {
        fprintf(stderr, "%s\n", urt_last_error());
        return 1;
    }
    static const struct urt_processor reader = {.event = read_event, .async = read_async};
    static const struct urt_processor counter = {.event = count_event};
    int rd = urt_graph_add_step(g, &(struct urt_step_desc){.name = "read", .processor = &reader, .arg = &r,
                                                           .partitions = 1});
    int ct = urt_graph_add_step(g, &(struct urt_step_desc){.name = "count", .processor = &counter});
    int x = urt_graph_add_exchange(g, &(struct urt_exchange_desc){.kind = URT_EXCHANGE_FORWARD});
    if (rd < 0 || ct < 0 || x < 0 || urt_graph_add_output(g, rd, x) < 0 || urt_graph_add_input(g, ct, x) < 0 ||
        urt_graph_start(g) || urt_graph_wait(g, URT_WAIT_FOREVER)) {
        fprintf(stderr, "graph: %s\n", urt_last_error());
        return 1;
    }
    printf("read %llu bytes in %u chunks, byte sum %llu\n", (unsigned long long)bytes, r.next,
           (unsigned long long)sum);
    urt_graph_release(g);
    close(r.fd);
    return urt_runtime_destroy(rt, URT_SHUTDOWN_DRAIN) ? 1 : 0;
}

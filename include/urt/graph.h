/*
 * urt/graph.h — task graphs: steps joined by exchanges, run as one job.
 *
 * A graph is a query-shaped plan: steps (a task function run once per
 * partition, or once per arriving unit of data) joined by exchanges that move
 * units of data between them. It runs as a job (urt/job.h): urt_graph_job()
 * is that job, so cancel, deadline, wait and the exactly-once completion
 * carry over. docs/graph.md has the picture, a complete example and the
 * rules; this comment is the reference.
 *
 * Units. An exchange carries units: {data, rows}, memory the producer owns.
 * urt_graph_emit() hands a unit over; the exchange's release callback gets it
 * back exactly once per accepted unit, when every consumer is done with it
 * (or when the graph ends without consuming it). The graph never reads,
 * copies or frees unit memory.
 *
 * Exchanges (kind, and when the downstream step runs):
 *  - FORWARD (incremental): every unit is delivered to the consumer's
 *    partition as soon as it is emitted ("upstream providing"): upstream and
 *    downstream run concurrently. A consumer's tasks run once per arriving
 *    unit; the units of one partition are processed one at a time, in
 *    arrival order (a partition is a sequential stream). limit_rows turns it
 *    into a LIMIT: rows beyond the limit are cut (the unit that crosses it is
 *    delivered with its rows clipped; its release callback still gets the
 *    rows that were emitted) and the upstream step is told to complete
 *    early.
 *  - SHUFFLE (blocking): units are emitted to a partition of the consumer
 *    (hash partitioning is the producer's: it passes the partition); no
 *    consumer task starts before every producer step completed; then one task
 *    per partition reads all of its partition's units (urt_graph_next).
 *  - BROADCAST (side input): every consumer partition sees every unit, once
 *    every producer completed; one sub-task per side input port (the step's
 *    prepare function, if any) runs before the step's main tasks.
 *
 * Partition counts (rules P1-P6, decided upstream to downstream as the graph
 * runs; urt_graph_step_partitions reads the decision):
 *  P1 a step runs with its own count, else the graph's default
 *     (urt_graph_options.partitions, default: the runtime's worker count);
 *  P2 all consumer steps of one exchange have the same count;
 *  P3 a forward exchange with limit_rows has exactly one producer step, and
 *     that step has one partition;
 *  P4 a shuffle consumer runs only the partitions that received data, unless
 *     it has URT_STEP_TAKE_COGROUP; its tasks keep their partition index (so
 *     per-partition state stays where it is) and urt_graph_partitions() tells
 *     how many ran;
 *  P5 a broadcast does not change its consumers' counts; each side input is
 *     one partition, prepared by one sub-task;
 *  P6 a forward consumer has the sum of its producers' counts (producer k's
 *     partition i feeds partition offset_k + i), unless a producer is a scan
 *     (URT_STEP_SCAN): then the consumer has its own or the default count
 *     and producer partition i feeds partition i mod count.
 * A step reads at most one forward exchange, or any number of shuffles (a
 * cogroup), not both; plus any number of broadcasts. A cycle is refused, and
 * so is a step whose forward producers and side inputs' producers depend on
 * each other (its forward units wait, bounded, for its side inputs, which
 * would wait for them: use a shuffle).
 *
 * Step states (jogasaki's DAG controller; urt_graph_step_state), driven by
 * events — upstream providing, task completed, completion instructed, abort
 * — that the graph's controller processes one at a time (a strand: the
 * controller never waits for a lock and never blocks a worker):
 *   CREATED -> ACTIVATED (the graph started) -> PREPARING (side inputs'
 *   sub-tasks) -> PREPARED -> RUNNING (main tasks created; for a forward
 *   consumer: at the first providing) -> COMPLETING (no more tasks will be
 *   created) -> COMPLETED (every task finished) -> DEACTIVATED (its outputs
 *   were consumed and released). The tasks of sources, shuffle consumers
 *   and processors start at RUNNING; a forward consumer's stream starts with
 *   its first unit (once its side inputs are prepared), from the emitter,
 *   without waiting for the controller to record RUNNING.
 *
 * Early completion. urt_graph_complete() (a step instructs its own
 * completion, e.g. a LIMIT that has its rows) or a forward's limit_rows
 * stops a step: its tasks not yet started do not start (units queued for it
 * are released unprocessed), running ones may finish (they see
 * urt_graph_stopping()), ones that yielded (parked producers) are not called
 * again: their task state goes to the step's cleanup. The instruction propagates upstream through
 * incremental exchanges (forward, broadcast) whose consumers are all stopped
 * or completed, and stops at a blocking one (shuffle). A step with
 * URT_STEP_DELIVER (side effects: emit, insert, update, delete) is never cut
 * short by a downstream completion, and nothing upstream of it is either.
 *
 * Errors and limits. A task that returns -errno (or any result that is not
 * one, URT_STEP_DONE / URT_STEP_YIELD below), a failed submission, a
 * blocking exchange over its capacity (-ENOBUFS: even when the step ignores
 * the emit's answer), a unit descriptor that cannot be allocated (-ENOMEM),
 * urt_graph_cancel() and the deadline abort the whole graph: the first
 * reason becomes the job's status (urt_job_abort; a reason outside
 * -4095..-1, or -EINPROGRESS, is -EINVAL), tasks not started do not start,
 * running ones see urt_graph_stopping(), parked producers are released and
 * not called again, every unit gets its release callback, task state left
 * set goes to the step's cleanup (urt_graph_cleanup_fn), and the completion
 * callback runs exactly once with that first reason (0 when the graph ran
 * to its end, early completion included). A failed graph never reports 0.
 *
 * Back-pressure. A forward exchange holds at most `capacity` units in flight
 * (emitted and not yet given back: a consumer gives the units it processed
 * back at the end of each batch of at most 64). urt_graph_emit() into a full
 * one returns -EAGAIN: the step returns URT_STEP_YIELD and its task is parked
 * (it does not hold the worker) and submitted again when units are given back. Blocking
 * exchanges cannot wait for their consumers (which start after the
 * producers): over `capacity` units urt_graph_emit() returns -ENOBUFS.
 *
 * Lanes (jogasaki's any/some attribute). A step with `lane` set runs all its
 * tasks one at a time on that lane (urt/lane.h), e.g. a transaction's lane;
 * other steps' tasks run anywhere (stealing).
 *
 * Processors (after Databend's). A step may instead be a processor: each partition is
 * a state machine with ports. A forward exchange between two processor steps
 * is a port per partition: one atomic word (URT_PORT_*) holding at most one
 * unit, so it bounds its memory by itself. The graph calls event() whenever
 * a port of the processor changed; event() returns what it needs next:
 * NEED_DATA / NEED_CONSUME (wait for a port), SYNC (call process()), ASYNC
 * (call async(): it starts asynchronous work — urt_io (urt/io.h), a timer, a
 * request served by another thread — whose completion calls
 * urt_graph_async_done() exactly once, from any thread; the processor then
 * continues on the worker that started the work), FINISHED. Processors read
 * forward exchanges of other processors only; they write into those, into
 * shuffles and broadcasts (urt_graph_emit), and into forward exchanges read
 * by function steps (urt_graph_emit, with back-pressure).
 *
 * Lifecycle of a urt_graph (numbered rules):
 *  1. urt_graph_create() returns a graph with one handle (the caller's).
 *  2. Building (urt_graph_add_step, urt_graph_add_exchange,
 *     urt_graph_add_output, urt_graph_add_input) and urt_graph_prepare() are owner
 *     only, before urt_graph_start(); a build error leaves the graph as it
 *     was.
 *  3. urt_graph_prepare() (optional: urt_graph_start() calls it) checks the
 *     graph and allocates what a run needs, so the start is cheap.
 *  4. urt_graph_start() runs it once (a graph is not run twice).
 *  5. urt_graph_cancel(), urt_graph_wait(), urt_graph_job(),
 *     urt_graph_step_state(), urt_graph_step_partitions() and
 *     urt_graph_step_stats() may be called from any thread while the handle
 *     is held.
 *  6. The completion callback runs exactly once per started graph, before
 *     urt_graph_wait() returns; it may release the handle.
 *  7. urt_graph_release() gives the handle back; the memory goes when the
 *     graph ended (or was never started) and the handle was released.
 *     Releasing NULL is a no-op. Unit memory is the caller's: free it after
 *     its release callback, or after the graph ended.
 *  8. Runtime destroy in drain mode runs a started graph to its end; in
 *     cancel mode it aborts it: the callback runs once, with -ECANCELED, or
 *     -ESHUTDOWN when one of the graph's submissions was refused first.
 *
 * The step context (struct urt_graph_ctx) is valid inside the step function,
 * prepare function or processor callback it was passed to, and for
 * urt_graph_async_done() until that call.
 */
#ifndef URT_GRAPH_H
#define URT_GRAPH_H

#include <urt/common.h>
#include <urt/job.h>
#include <urt/lane.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef struct urt_graph urt_graph;
struct urt_graph_ctx;

/* What a step function (and a prepare function) returns: URT_STEP_DONE,
 * URT_STEP_YIELD (call it again later with the same context: after a -EAGAIN
 * from urt_graph_emit, when the exchange has room; else behind the worker's
 * other work), or a -errno that aborts the graph. The graph fails with that
 * -errno when it is in -4095..-1 and not -EINPROGRESS (what a job's status
 * holds, urt/job.h); with -EINVAL for any other result (-EINPROGRESS, below
 * -4095, or a positive value other than URT_STEP_YIELD). The same holds for
 * a processor's callbacks and urt_graph_async_done's result. */
#define URT_STEP_DONE 0
#define URT_STEP_YIELD 1
typedef int urt_graph_step_fn(struct urt_graph_ctx *ctx, void *arg);

/* A step's cleanup (urt_step_desc.cleanup): gives back a task's state
 * (urt_graph_task_state) that is not NULL once the task will not be called
 * again, whatever ended it — its last call returned, the graph was aborted,
 * the step was completed early (a producer parked on a full exchange, a
 * partition that yielded, units never processed). Called exactly once per
 * such state, never at the same time as the step's functions for that
 * task, before the graph's completion callback:
 *  - a source partition: by its task right after its last call, before the
 *    task takes the step's next partition (else as below);
 *  - every other task (shuffle partitions, side-input sub-tasks, the
 *    partition streams of a forward consumer, processor instances), and a
 *    source partition stopped before its end: when the step completes
 *    (COMPLETING -> COMPLETED, every task of it ended), by the graph's
 *    controller — on a worker, not on the step's lane; on the destroying
 *    thread at runtime destroy.
 * In it, urt_graph_task_state, urt_graph_partition, urt_graph_step_of,
 * urt_graph_of and urt_graph_stopping work (stopping: true when the task was
 * cut short); urt_graph_emit and urt_graph_push refuse (-EINVAL). The slot is
 * NULL after it. */
typedef void urt_graph_cleanup_fn(struct urt_graph_ctx *ctx, void *arg);

/* The completion callback: status 0, or the first reason the graph was
 * aborted (a step's -errno, -ECANCELED, -ETIME, -ENOBUFS ...). Runs once, on
 * a worker (or on the destroying thread at runtime destroy). */
typedef void urt_graph_done_fn(urt_graph *g, int status, void *arg);

/* An exchange gives a unit back (once per accepted unit). On a worker. */
typedef void urt_graph_release_fn(void *data, uint32_t rows, void *arg);

struct urt_graph_options {
    urt_graph_done_fn *done;  /* optional */
    void *arg;
    uint64_t deadline_ns;     /* from urt_graph_start(); 0 = none (a query time limit, as Databend's) */
    uint32_t partitions;      /* default partition count (P1); 0: the runtime's worker count */
    uint32_t flags;           /* none defined: must be zero */
    uint32_t reserved[4];     /* must be zero */
};

/* ---- steps ------------------------------------------------------------------ */

#define URT_STEP_SCAN 0x1u         /* a source reading a table: P6's exception */
#define URT_STEP_TAKE_COGROUP 0x2u /* keep shuffle partitions that received nothing (P4) */
#define URT_STEP_DELIVER 0x4u      /* side effects: never cut short from downstream */
#define URT_STEP_FLAGS_ALL 0x7u

/* Processors (after Databend's). event() returns one of these or a -errno. */
enum urt_proc_next {
    URT_PROC_NEED_DATA = 0,    /* wait until an input port has data or finished */
    URT_PROC_NEED_CONSUME = 1, /* wait until an output port was consumed */
    URT_PROC_SYNC = 2,         /* call process() now */
    URT_PROC_ASYNC = 3,        /* call async() now */
    URT_PROC_FINISHED = 4,     /* done: outputs are finished, inputs closed */
};

struct urt_processor {
    urt_graph_step_fn *event;   /* required: inspects ports, returns enum urt_proc_next or -errno */
    urt_graph_step_fn *process; /* for URT_PROC_SYNC: 0 or -errno */
    urt_graph_step_fn *async;   /* for URT_PROC_ASYNC: >= 0 = started (urt_graph_async_done follows),
                                   or -errno (not started) */
};

struct urt_step_desc {
    const char *name;              /* for messages; must outlive the graph (may be NULL) */
    urt_graph_step_fn *fn;         /* the task function, or NULL with processor */
    void *arg;                     /* passed to fn, prepare and the processor's callbacks */
    urt_graph_step_fn *prepare;    /* optional: one sub-task per broadcast side input (P5) */
    const struct urt_processor *processor; /* instead of fn (must outlive the graph) */
    urt_graph_cleanup_fn *cleanup; /* optional: frees task state left set (urt_graph_cleanup_fn) */
    urt_lane *lane;                /* optional: the step's tasks run one at a time on this lane */
    uint32_t partitions;           /* 0: by the rules (P1, P2, P6) */
    uint32_t max_in_flight;        /* sources: at most this many tasks queued or running; a finished
                                      task admits the next partition (0: all at once) */
    uint32_t flags;                /* URT_STEP_* */
    uint32_t reserved[3];          /* must be zero */
};

/* ---- exchanges ---------------------------------------------------------------- */

enum urt_exchange_kind {
    URT_EXCHANGE_FORWARD = 1,
    URT_EXCHANGE_SHUFFLE = 2,
    URT_EXCHANGE_BROADCAST = 3,
};

struct urt_exchange_desc {
    enum urt_exchange_kind kind;
    uint32_t capacity;             /* units held at most (0: 256 forward, 1,048,576 blocking); 1..2^24 */
    uint64_t limit_rows;           /* forward only: LIMIT (0: none) */
    urt_graph_release_fn *release; /* optional */
    void *release_arg;
    uint32_t reserved[4];          /* must be zero */
};

/* A unit as a consumer sees it. port: the input port it came from. */
struct urt_graph_unit {
    void *data;
    uint32_t rows;
    uint32_t port;
};

/* ---- building (owner only, before the start: rule 2) ------------------------------ */

/* Sets the defaults. Any thread. */
URT_API void urt_graph_options_init(struct urt_graph_options *opt);

/* Creates an empty graph of rt (rule 1); opt may be NULL. Returns 0 and
 * *out, -EINVAL (NULL rt or out, flags or reserved fields not zero,
 * partitions above 65,536), -ENOMEM. Any thread. */
URT_API int urt_graph_create(urt_runtime *rt, const struct urt_graph_options *opt, urt_graph **out);

/* Adds a step; returns its id (>= 0), or -EINVAL (NULL g or d; neither or
 * both of fn and processor; a processor without event; unknown flags;
 * reserved not zero; partitions above 1,048,576; max_in_flight or prepare
 * with a processor; the graph was started), -ENOMEM. Owner only. */
URT_API int urt_graph_add_step(urt_graph *g, const struct urt_step_desc *d);

/* Adds an exchange; returns its id (>= 0), or -EINVAL (NULL g or d, unknown
 * kind, capacity above 2^24, limit_rows on a shuffle or broadcast, reserved
 * not zero, the graph was started), -ENOMEM. Owner only. */
URT_API int urt_graph_add_exchange(urt_graph *g, const struct urt_exchange_desc *d);

/* Step `step` writes into exchange `exchange`: returns the step's output
 * port index (0, 1, ... in the order of these calls), or -EINVAL (NULL g,
 * unknown ids, already connected, the graph was started; a function step,
 * or a second step, writing a forward exchange a processor reads), -ENOMEM.
 * Both connecting calls take the step, then the exchange. Owner only. */
URT_API int urt_graph_add_output(urt_graph *g, int step, int exchange);

/* Step `step` reads exchange `exchange`: returns the step's input port
 * index, or -EINVAL (as urt_graph_add_output, plus a second forward input, a
 * forward and a shuffle together, a processor reading something but a
 * processor's forward exchange: a shuffle or broadcast, a forward written by
 * a function step or by two steps, one with limit_rows, or one another step
 * reads too; a function step reading a processor's forward exchange),
 * -ENOMEM. Owner only. */
URT_API int urt_graph_add_input(urt_graph *g, int step, int exchange);

/* Checks the whole graph and allocates the run (rule 3). Returns 0, or
 * -EINVAL (no step; an exchange without producer or consumer; a cycle; a
 * forward and a side input that wait for each other; a partition rule broken: P2, P3, P6 or a processor port edge whose two
 * steps differ in count; the message names the step or exchange),
 * -EALREADY (prepared or started before), -ENOMEM. Owner only. */
URT_API int urt_graph_prepare(urt_graph *g);

/* ---- running ---------------------------------------------------------------------- */

/* Starts the graph (rule 4): creates its job (deadline, completion) and
 * submits its bootstrap task. Returns 0, or the errors of
 * urt_graph_prepare (with its message, as urt_graph_start's), -EALREADY
 * (started before), -EINVAL (an earlier start failed), -ESHUTDOWN, -EAGAIN
 * (the pending-task limit) and the errors of urt_job_create. On failure nothing runs, the callback is never called and
 * the graph cannot be started again (release it). The graph may end — and
 * its callback release it — before this call returns. Owner only. */
URT_API int urt_graph_start(urt_graph *g);

/* The graph's job (NULL before the start): urt_job_wait, urt_job_poll,
 * urt_job_cancel work on it. Valid while the graph's handle is held. Any
 * thread. */
URT_API urt_job *urt_graph_job(const urt_graph *g);

/* Aborts the graph with -ECANCELED. Returns 0, -EINVAL (NULL g, not
 * started), -EALREADY (already aborted, or it ended). Any thread. */
URT_API int urt_graph_cancel(urt_graph *g);

/* urt_job_wait on the graph's job: the status (0 or the first reason),
 * -ETIMEDOUT, -EINVAL (NULL g, not started), -EDEADLK (on a worker). Threads
 * that are not workers only. */
URT_API int urt_graph_wait(urt_graph *g, uint64_t timeout_ns);

/* Rule 7. Any thread. */
URT_API void urt_graph_release(urt_graph *g);

enum urt_step_state {
    URT_STEP_CREATED = 0,
    URT_STEP_ACTIVATED,
    URT_STEP_PREPARING,
    URT_STEP_PREPARED,
    URT_STEP_RUNNING,
    URT_STEP_COMPLETING,
    URT_STEP_COMPLETED,
    URT_STEP_DEACTIVATED,
};

/* A step's state (enum urt_step_state), or -EINVAL (NULL g, unknown step).
 * Any thread (a snapshot). */
URT_API int urt_graph_step_state(const urt_graph *g, int step);

/* A step's partition count as decided so far (P1-P6; after the step ran:
 * the partitions that ran for P4), or -EINVAL (NULL g, unknown step, not
 * prepared). Any thread. */
URT_API int urt_graph_step_partitions(const urt_graph *g, int step);

struct urt_graph_step_stats {
    uint64_t tasks_run;     /* step function calls that returned DONE or an error (processors: event calls) */
    uint64_t tasks_skipped; /* partitions or units never started: stopped, aborted, cancelled */
    uint64_t tasks_cut;     /* partitions or units that started (the step was called, returned
                               URT_STEP_YIELD) and were stopped before their last call: never called
                               again. Function steps: run + skipped + cut = partitions (or units) */
    uint64_t yields;        /* URT_STEP_YIELD returns */
    uint64_t units_in;      /* units delivered to the step's tasks */
    uint64_t units_out;     /* units the step emitted or pushed */
    uint64_t rows_out;      /* rows of those units (after a limit's clipping) */
};

/* Reads a step's counters (relaxed: exact once the graph ended). Returns 0,
 * -EINVAL (NULL g or out, unknown step). Any thread. */
URT_API int urt_graph_step_stats(const urt_graph *g, int step, struct urt_graph_step_stats *out);

/* ---- inside a step's task (ctx: the argument of the running function) --------------- */

/* The task's partition (0..count-1; P4: its shuffle partition), and the
 * step's count as decided now. */
URT_API uint32_t urt_graph_partition(const struct urt_graph_ctx *ctx);
URT_API uint32_t urt_graph_partitions(const struct urt_graph_ctx *ctx);
/* The graph and the step id of the running task. */
URT_API urt_graph *urt_graph_of(const struct urt_graph_ctx *ctx);
URT_API int urt_graph_step_of(const struct urt_graph_ctx *ctx);

/* A pointer-sized slot of the task (partition, unit stream, processor
 * instance or side input) that survives URT_STEP_YIELD; NULL at first. What
 * is left in it when the task is over goes to the step's cleanup
 * (urt_graph_cleanup_fn); without one the graph forgets it. */
URT_API void **urt_graph_task_state(struct urt_graph_ctx *ctx);

/* The next unit of input port `port` (URT_GRAPH_ANY_PORT: any main input)
 * for this task: shuffle — the partition's units one after another;
 * broadcast — every unit; forward — the one unit this call of the task was
 * made for. Returns 1 and *u, 0 when there is none (left), -EINVAL (NULL
 * ctx or u, a port out of range, a processor's port edge: use
 * urt_graph_pull). */
#define URT_GRAPH_ANY_PORT UINT32_MAX
URT_API int urt_graph_next(struct urt_graph_ctx *ctx, uint32_t port, struct urt_graph_unit *u);

/* Hands a unit to output port `port`. partition: the consumer partition for
 * a shuffle (< its count), ignored otherwise (P6 decides). Returns 0
 * (accepted: the exchange's release callback will get it back, with the
 * rows given here), or
 *   -EAGAIN   a forward exchange is full: nothing was taken; return
 *             URT_STEP_YIELD and emit it again when called again;
 *   -ENOBUFS  a blocking exchange is full (its capacity): the graph is
 *             aborted with -ENOBUFS (whatever the step returns);
 *   -EPIPE    no consumer wants it (the limit was reached, the consumers
 *             completed or were stopped, the graph is being aborted):
 *             nothing was taken;
 *   -ENOMEM   no memory for the exchange's unit descriptors: the graph is
 *             aborted with -ENOMEM;
 *   -EINVAL   NULL ctx, port out of range, partition out of range for a
 *             shuffle, a processor's port edge (use urt_graph_push), called
 *             from a cleanup.
 * The data stays the caller's on any error. */
URT_API int urt_graph_emit(struct urt_graph_ctx *ctx, uint32_t port, uint32_t partition, void *data, uint32_t rows);

/* Completion instructed: this step stops early (tasks not started do not
 * start) and the instruction goes upstream (module comment). Returns 0,
 * -EALREADY (the step was stopped already), -EINVAL (NULL ctx). */
URT_API int urt_graph_complete(struct urt_graph_ctx *ctx);

/* True when the task should stop early: its step was told to complete, or
 * the graph was aborted (error, cancel, deadline). */
URT_API bool urt_graph_stopping(const struct urt_graph_ctx *ctx);

/* ---- processors (after Databend's) ------------------------------------------------------------- */

#define URT_PORT_HAS_DATA 0x1u  /* a unit waits in the port */
#define URT_PORT_NEED_DATA 0x2u /* the consumer asked for data */
#define URT_PORT_FINISHED 0x4u  /* no more data will come (producer side), or none is wanted (consumer closed) */

/* The state word of input or output port `port` (URT_PORT_* bits), 0 for a
 * port that is not a processor's port edge. */
URT_API unsigned urt_graph_in_port(const struct urt_graph_ctx *ctx, uint32_t port);
URT_API unsigned urt_graph_out_port(const struct urt_graph_ctx *ctx, uint32_t port);

/* Takes the unit waiting in input port `port`: 1 and *u; 0 none yet (the
 * port now says NEED_DATA: the producer is told); -EPIPE the port is
 * finished and empty; -EINVAL (not a processor's input port edge). */
URT_API int urt_graph_pull(struct urt_graph_ctx *ctx, uint32_t port, struct urt_graph_unit *u);

/* Puts a unit into output port `port`: 0; -EAGAIN the previous unit was not
 * taken yet (return URT_PROC_NEED_CONSUME); -EPIPE the consumer finished
 * (the unit stays the caller's); -EINVAL (not a processor's output port
 * edge, called from a cleanup). A unit pulled from a port is the puller's: it passes it on with
 * urt_graph_push, or gives it back with urt_graph_unit_release. */
URT_API int urt_graph_push(struct urt_graph_ctx *ctx, uint32_t port, void *data, uint32_t rows);

/* No more data on output port `port` (idempotent). Returns 0 or -EINVAL. */
URT_API int urt_graph_finish(struct urt_graph_ctx *ctx, uint32_t port);

/* Gives a pulled unit to the release callback of the exchange of input port
 * `port`. Returns 0 or -EINVAL. */
URT_API int urt_graph_unit_release(struct urt_graph_ctx *ctx, uint32_t port, void *data, uint32_t rows);

/* Ends the asynchronous work a processor's async() started: res 0, or a
 * -errno that aborts the graph (any other res aborts it with -EINVAL). The processor continues (event()) on the
 * worker that called async(). Exactly once per successful async(). Returns
 * 0, -EINVAL (NULL ctx, no async work in flight), -ESHUTDOWN or -EAGAIN (the
 * continuation could not be submitted — the runtime is being destroyed, the
 * pending-task limit: the graph is aborted with that reason and the
 * processor is finished in place). Any thread. */
URT_API int urt_graph_async_done(struct urt_graph_ctx *ctx, int res);

#ifdef __cplusplus
}
#endif

/* The old names of this header's functions, kept for one release. */
#include <urt/deprecated.h>

#endif

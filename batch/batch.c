/*
 * batch/batch.c — the batch executor's public entry points (urt/batch.h):
 * options, the root object and its job, the first error, the callback.
 *
 * The root. urt_batch_start validates and copies the options, creates the
 * batch's job (open) and submits its bootstrap task, which starts the tree
 * (batch/tree.c) or the transactional load (batch/load.c). The job stays open
 * while the tree lives (so that statement completions on any worker can submit
 * the tree's next steps to it) and is closed by batch_tree_done once the last
 * node is released; its completion callback (batch_job_done) calls the user's
 * callback once, sets `ended` and drops the job's reference. jogasaki's batch executor's
 * bootstrap and teardown tasks are the bootstrap task and the job's teardown.
 *
 * References: the caller's handle and the job's; the last one frees the root
 * (and releases the job handle, which urt_batch_wait uses until then).
 *
 * The first error. batch_fail formats the message, then under mu writes it
 * and stores the error word (release): the first caller wins, later ones
 * change nothing. Readers of urt_batch_aborting load it with acquire, so a
 * reader that sees the error also sees its message. A failure then ends the
 * blocks that wait for a start nobody will publish (tree_take_waiting).
 * The first error in file order: when the first error is about a record of
 * an executor file (FAIL_INPUT, FAIL_MALFORMED: batch.h), that file's blocks
 * in flight check their records before it without running statements
 * (block.c's validation), since a malformed record earlier in the file may
 * have given the failing block a wrong start; a malformed record they find
 * is kept as the earlier error (mu), and at the end (batch_job_done, every
 * node gone) it is the batch's status and message (final_msg, published by
 * final_set's release store before the callback).
 *
 * Memory ordering: error (release store under mu / acquire loads), ended
 * (release store after final_status / acquire load), refs (relaxed
 * increments never happen after start; acq_rel decrement, the last frees).
 */
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <urt/log.h>
#include <urt/runtime.h>

#include "base/args.h"
#include "base/error.h"
#include "batch/batch.h"

#define BATCH_MIN_BLOCK 16ull
#define BATCH_MAX_BLOCK (1ull << 30)
#define BATCH_MAX_CONCURRENCY 1024u
#define BATCH_MAX_STATEMENTS 1000000u

/* ---- the root ---------------------------------------------------------------------- */

static void batch_free(struct urt_batch *b)
{
    if (b->load)
        load_free(b->load);
    if (b->paths)
        for (uint32_t i = 0; i < b->opt.n_files; i++)
            free(b->paths[i]);
    free(b->paths);
    pthread_mutex_destroy(&b->mu);
    if (b->job)
        urt_job_release(b->job);
    free(b);
}

static void batch_unref(struct urt_batch *b)
{
    if (atomic_fetch_sub_explicit(&b->refs, 1, memory_order_acq_rel) == 1)
        batch_free(b);
}

bool batch_aborting(const struct urt_batch *b)
{
    return atomic_load_explicit(&b->error, memory_order_acquire) != 0;
}

/* The first error wins; a malformed record found after it, earlier in the
 * file of a first input error, is kept as the earlier one (the batch's at
 * its end). True for the first. */
static bool fail_record_at(struct urt_batch *b, int err, const char *msg, enum fail_kind kind, uint32_t file,
                           uint64_t key)
{
    bool first = false;
    err = err ? err : -EIO;
    pthread_mutex_lock(&b->mu);
    if (atomic_load_explicit(&b->error, memory_order_relaxed) == 0) {
        snprintf(b->message, sizeof(b->message), "%s", msg);
        b->err_input = kind != FAIL_OTHER;
        b->err_file = file;
        b->err_key = key;
        atomic_store_explicit(&b->error, err, memory_order_release);
        first = true;
    } else if (kind == FAIL_MALFORMED && b->err_input && b->err_file == file && key < b->err_key) {
        snprintf(b->earlier, sizeof(b->earlier), "%s", msg);
        b->earlier_err = err;
        b->err_key = key; /* blocks check records before this one only */
    }
    pthread_mutex_unlock(&b->mu);
    return first;
}

bool batch_fail_record(struct urt_batch *b, int err, const char *msg)
{
    return fail_record_at(b, err, msg, FAIL_OTHER, 0, 0);
}

bool batch_validating(struct urt_batch *b, uint32_t file, uint64_t cursor)
{
    pthread_mutex_lock(&b->mu);
    bool v = b->err_input && b->err_file == file && cursor < b->err_key;
    pthread_mutex_unlock(&b->mu);
    return v;
}

/* After the first error: the blocks waiting for a start that will not come end. */
static void end_waiting(struct urt_batch *b)
{
    for (struct bblock *w = tree_take_waiting(b), *n; w; w = n) {
        n = w->act_next;
        block_end(w, -ECANCELED);
    }
}

static bool fail_va(struct urt_batch *b, int err, const char *fmt, va_list ap)
{
    char msg[sizeof(b->message)];
    vsnprintf(msg, sizeof(msg), fmt, ap);
    if (!batch_fail_record(b, err, msg))
        return false;
    end_waiting(b);
    return true;
}

bool batch_fail(struct urt_batch *b, int err, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    bool first = fail_va(b, err, fmt, ap);
    va_end(ap);
    return first;
}

static bool fail_at_va(const struct urt_batch_block *p, enum fail_kind kind, int err, int64_t record_index,
                       uint64_t offset, uint64_t line, const char *fmt, va_list ap)
{
    char what[320], where[160], msg[sizeof(p->batch->message)];
    vsnprintf(what, sizeof(what), fmt, ap);
    int n = line ? snprintf(where, sizeof(where), "line %llu, ", (unsigned long long)line) : 0;
    if (record_index >= 0)
        snprintf(where + n, sizeof(where) - (size_t)n, "block %llu, record %lld at byte %llu",
                 (unsigned long long)p->index, (long long)record_index, (unsigned long long)offset);
    else
        snprintf(where + n, sizeof(where) - (size_t)n, "block %llu, at byte %llu", (unsigned long long)p->index,
                 (unsigned long long)offset);
    snprintf(msg, sizeof(msg), "file '%s' (#%u), %s: %s", p->path, p->file, where, what);
    if (!fail_record_at(p->batch, err, msg, kind, p->file, offset))
        return false;
    end_waiting(p->batch);
    return true;
}

bool batch_fail_at(const struct urt_batch_block *p, enum fail_kind kind, int err, int64_t record_index,
                   uint64_t offset, uint64_t line, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    bool first = fail_at_va(p, kind, err, record_index, offset, line, fmt, ap);
    va_end(ap);
    return first;
}

bool block_fail(struct bblock *blk, enum fail_kind kind, int err, int64_t record_index, uint64_t offset,
                uint64_t line, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    bool first = fail_at_va(&blk->pub, kind, err, record_index, offset, line, fmt, ap);
    va_end(ap);
    return first;
}

int batch_submit_step(struct urt_batch *b, struct urt_task *t, urt_task_fn *fn, urt_task_cancel_fn *cancel, void *arg)
{
    urt_task_init(t, fn, arg);
    t->cancel = cancel;
    return urt_job_submit(b->job, t, 0);
}

void batch_tree_done(struct urt_batch *b)
{
    urt_job_close(b->job); /* the job ends when its last task is done: batch_job_done */
}

static void batch_job_done(urt_job *job, int status, void *arg)
{
    struct urt_batch *b = arg;
    (void)job;
    int err = atomic_load_explicit(&b->error, memory_order_acquire);
    if (!err && status) {
        batch_fail(b, status, "the batch's job %s", status == -ETIME ? "passed its deadline" : "was cancelled");
        err = atomic_load_explicit(&b->error, memory_order_acquire);
    }
    pthread_mutex_lock(&b->mu); /* every node is gone: the earlier error, if any, is final */
    if (b->earlier_err)
        err = b->earlier_err;
    b->final_msg = !err ? "" : b->earlier_err ? b->earlier : b->message;
    pthread_mutex_unlock(&b->mu);
    b->final_status = err;
    atomic_store_explicit(&b->final_set, 1, memory_order_release);
    if (b->opt.done)
        b->opt.done(b, err, b->final_msg, b->opt.arg);
    atomic_store_explicit(&b->ended, 1, memory_order_release);
    batch_unref(b);
}

static enum urt_task_result batch_boot(struct urt_task *t, void *arg)
{
    struct urt_batch *b = arg;
    (void)t;
    if (b->load)
        load_boot(b);
    else
        tree_bootstrap(b);
    return URT_TASK_DONE;
}

static void batch_boot_cancel(struct urt_task *t, void *arg)
{
    struct urt_batch *b = arg;
    batch_fail(b, -ECANCELED, "the batch's bootstrap task was cancelled (the batch's job was cancelled)");
    batch_boot(t, arg); /* sees the error: starts nothing, ends the tree */
}

/* ---- options ------------------------------------------------------------------------ */

URT_API void urt_batch_options_init(struct urt_batch_options *opt)
{
    if (!opt)
        return;
    memset(opt, 0, sizeof(*opt));
    opt->format = URT_BATCH_CSV;
    opt->block_bytes = 1u << 20;
    opt->max_concurrent_files = 2;
    opt->max_concurrent_blocks_per_file = 2;
    opt->max_statements = 10000;
    opt->response = URT_COMMIT_STORED;
}

static int check_files(const struct urt_batch_options *o)
{
    if (!o->files || o->n_files == 0)
        return urt__error(-EINVAL, "urt_batch_start: no files (%s)", o->files ? "n_files is 0" : "files is NULL");
    for (uint32_t i = 0; i < o->n_files; i++)
        if (!o->files[i] || !o->files[i][0])
            return urt__error(-EINVAL, "urt_batch_start: files[%u] is %s", i, o->files[i] ? "empty" : "NULL");
    return 0;
}

static int check_limits(const struct urt_batch_options *o)
{
    static const char fn[] = "urt_batch_start";
    if (urt__check_range(fn, "block_bytes", o->block_bytes, BATCH_MIN_BLOCK, BATCH_MAX_BLOCK))
        return -EINVAL;
    if (o->max_record_bytes > o->block_bytes)
        return urt__error(-EINVAL, "urt_batch_start: max_record_bytes %llu is above block_bytes %llu",
                          (unsigned long long)o->max_record_bytes, (unsigned long long)o->block_bytes);
    if (urt__check_range(fn, "max_concurrent_files", o->max_concurrent_files, 1, BATCH_MAX_CONCURRENCY) ||
        urt__check_range(fn, "max_concurrent_blocks_per_file", o->max_concurrent_blocks_per_file, 1,
                         BATCH_MAX_CONCURRENCY) ||
        urt__check_range(fn, "max_statements", o->max_statements, 1, BATCH_MAX_STATEMENTS))
        return -EINVAL;
    return 0;
}

static int check_options(urt_runtime *rt, const struct urt_batch_options *o)
{
    if (!o->statement)
        return urt__error(-EINVAL, "urt_batch_start: statement is NULL");
    int err = check_files(o);
    if (err)
        return err;
    if (o->format != URT_BATCH_CSV && o->format != URT_BATCH_BINARY)
        return urt__error(-EINVAL, "urt_batch_start: format %d is not URT_BATCH_CSV or URT_BATCH_BINARY",
                          (int)o->format);
    if (urt__check_flags("urt_batch_start", o->flags, URT_BATCH_FLAGS_ALL))
        return -EINVAL;
    if ((o->flags & URT_BATCH_CSV_HEADER) && o->format != URT_BATCH_CSV)
        return urt__error(-EINVAL, "urt_batch_start: URT_BATCH_CSV_HEADER needs the CSV format");
    if ((o->flags & URT_BATCH_BLOCK_TX) && (o->flags & URT_BATCH_TRANSACTIONAL))
        return urt__error(-EINVAL, "urt_batch_start: URT_BATCH_BLOCK_TX and URT_BATCH_TRANSACTIONAL exclude "
                                   "each other");
    if ((err = check_limits(o)))
        return err;
    if ((unsigned)o->response > URT_COMMIT_STORED)
        return urt__error(-EINVAL, "urt_batch_start: response %d is not a URT_COMMIT_* value", (int)o->response);
    if (URT_CHECK_RESERVED("urt_batch_start", "opt", o))
        return -EINVAL;
    struct urt_log_stats ls;
    if ((o->flags & (URT_BATCH_BLOCK_TX | URT_BATCH_TRANSACTIONAL)) && o->response == URT_COMMIT_STORED &&
        urt_log_stats(rt, &ls) != 0)
        return urt__error(-EOPNOTSUPP, "urt_batch_start: response URT_COMMIT_STORED (the default) transactions need "
                                       "a write-ahead log (log_dir) or a durability source, and the runtime has "
                                       "neither: give it one, or set response to URT_COMMIT_AVAILABLE");
    return 0;
}

static struct urt_batch *batch_new(urt_runtime *rt, const struct urt_batch_options *opt)
{
    struct urt_batch *b = calloc(1, sizeof(*b));
    if (!b)
        return NULL;
    b->rt = rt;
    b->opt = *opt;
    b->max_rec = opt->max_record_bytes ? opt->max_record_bytes : opt->block_bytes;
    pthread_mutex_init(&b->mu, NULL);
    atomic_init(&b->refs, 2); /* the handle, the job */
    b->paths = calloc(opt->n_files, sizeof(*b->paths));
    for (uint32_t i = 0; b->paths && i < opt->n_files; i++)
        if (!(b->paths[i] = strdup(opt->files[i]))) {
            batch_free(b);
            return NULL;
        }
    if (!b->paths) {
        batch_free(b);
        return NULL;
    }
    b->opt.files = (const char *const *)b->paths;
    return b;
}

URT_API int urt_batch_start(urt_runtime *rt, const struct urt_batch_options *opt, urt_batch **out)
{
    if (!rt || !opt || !out)
        return urt__error(-EINVAL, "urt_batch_start: %s is NULL", !rt ? "rt" : !opt ? "opt" : "out");
    int err = check_options(rt, opt);
    if (err)
        return err;
    struct urt_batch *b = batch_new(rt, opt);
    if (!b)
        return urt__error(-ENOMEM, "urt_batch_start: out of memory for the batch");
    if ((opt->flags & URT_BATCH_TRANSACTIONAL) && (err = load_start(b)) != 0) {
        batch_free(b);
        return err; /* load_start recorded the message */
    }
    struct urt_job_options jo;
    urt_job_options_init(&jo);
    jo.done = batch_job_done;
    jo.arg = b;
    if ((err = urt_job_create(rt, &jo, &b->job)) != 0) {
        char why[256];
        snprintf(why, sizeof(why), "%s", urt_last_error());
        batch_free(b);
        return urt__error(err, "urt_batch_start: cannot create the batch's job: %s", why);
    }
    if ((err = batch_submit_step(b, &b->boot, batch_boot, batch_boot_cancel, b)) != 0) {
        char why[256];
        snprintf(why, sizeof(why), "%s", urt_last_error());
        b->opt.done = NULL; /* a failed start runs no callback */
        urt_batch_release(b);
        urt_job_close(b->job); /* the job ends empty: batch_job_done drops its reference */
        return urt__error(err, "urt_batch_start: cannot submit the bootstrap task: %s", why);
    }
    *out = b;
    return 0;
}

/* ---- the rest of the API --------------------------------------------------------------- */

URT_API bool urt_batch_aborting(const urt_batch *batch)
{
    return batch && batch_aborting(batch);
}

URT_API int urt_batch_cancel(urt_batch *batch)
{
    if (!batch)
        return urt__error(-EINVAL, "urt_batch_cancel: batch is NULL");
    if (atomic_load_explicit(&batch->ended, memory_order_acquire))
        return urt__error(-EALREADY, "urt_batch_cancel: batch %p has ended", (void *)batch);
    if (!batch_fail(batch, -ECANCELED, "cancelled by urt_batch_cancel"))
        return urt__error(-EALREADY, "urt_batch_cancel: batch %p failed before: %s", (void *)batch, batch->message);
    return 0;
}

URT_API int urt_batch_poll(const urt_batch *batch)
{
    if (!batch)
        return urt__error(-EINVAL, "urt_batch_poll: batch is NULL");
    if (!atomic_load_explicit(&batch->ended, memory_order_acquire))
        return -EINPROGRESS;
    return batch->final_status;
}

URT_API int urt_batch_wait(urt_batch *batch, uint64_t timeout_ns)
{
    if (!batch)
        return urt__error(-EINVAL, "urt_batch_wait: batch is NULL");
    if (urt_current_worker(batch->rt) >= 0)
        return urt__error(-EDEADLK, "urt_batch_wait: called on a worker (workers never block)");
    int rc = urt_job_wait(batch->job, timeout_ns);
    if (rc == -ETIMEDOUT)
        return urt__error(-ETIMEDOUT, "urt_batch_wait: batch %p did not end within %llu ns", (void *)batch,
                          (unsigned long long)timeout_ns);
    if (rc == -EDEADLK || rc == -EINVAL)
        return urt__error(rc, "urt_batch_wait: %s", urt_last_error());
    return urt_batch_poll(batch);
}

URT_API const char *urt_batch_error(const urt_batch *batch)
{
    if (!batch)
        return "";
    if (atomic_load_explicit(&batch->final_set, memory_order_acquire))
        return batch->final_msg;
    return batch_aborting(batch) ? batch->message : "";
}

URT_API urt_job *urt_batch_job(const urt_batch *batch)
{
    return batch ? batch->job : NULL;
}

URT_API int urt_batch_stats(const urt_batch *batch, struct urt_batch_stats *out)
{
    if (!batch || !out)
        return urt__error(-EINVAL, "urt_batch_stats: %s is NULL", batch ? "out" : "batch");
    struct urt_batch *b = (struct urt_batch *)batch;
    pthread_mutex_lock(&b->mu);
    *out = b->st;
    pthread_mutex_unlock(&b->mu);
    if (b->load)
        load_stats(b->load, out);
    return 0;
}

URT_API void urt_batch_release(urt_batch *batch)
{
    if (batch)
        batch_unref(batch);
}

/*
 * dispatch/calls.c — the calls of urt/dispatch.h that send one statement on
 * the control connection for the caller (SPEC C21): urt_dispatch_enqueue
 * (count copies of one strand), urt_dispatch_enqueue_items (a batch of
 * distinct strands with keys, priorities, attempts), urt_dispatch_wake,
 * urt_dispatch_cancel, urt_dispatch_requeue.
 *
 * Each call validates its input on the calling thread, copies its
 * parameters' text into one block (struct ctl_call: the request, its
 * parameters and the caller's callback) and hands the request to the control
 * connection's lane (dconn_submit: a lane submission, the hand-over that
 * orders the block's fields for the lane). The request's callback runs on
 * that lane with the result, calls the caller's callback and frees the
 * block. The enqueues' statements also send the enqueue wake-up
 * (NOTIFY channel, '+kind') at their commit: the idle dispatchers of that
 * kind scan at once (dispatch/control.c).
 *
 * Memory-ordering contract: nothing shared; the block belongs to the caller
 * until dconn_submit, to the lane after it.
 */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/args.h"
#include "base/error.h"
#include "dispatch/dispatch_int.h"

#define MAX_ITEMS 1000000u
#define KEY_MAX 512
#define ATTEMPTS_MAX 1000000u

enum call_kind { CALL_IDS, CALL_ITEMS, CALL_STATUS };

/* The caller's callback (one of three shapes). */
struct call_cb {
    enum call_kind kind;
    urt_dispatch_enqueued_fn *ids_fn;
    urt_dispatch_items_fn *items_fn;
    urt_dispatch_status_fn *status_fn;
    void *arg;
};

struct ctl_call {
    struct dreq req;
    const char *params[8];
    struct call_cb cb;
    char text[]; /* the parameters' strings */
};

/* ---- answers (the control lane) ----------------------------------------------- */

static void answer_ids(struct ctl_call *c, PGresult *res, int err)
{
    if (c->req.stmt == DSQL_ENQUEUE_ONE) { /* a member of a batch: its row (dispatch/conn.h) */
        const char *id = err == 0 && c->req.row >= 0 ? PQgetvalue(res, c->req.row, 1) : NULL;
        c->cb.ids_fn(c->cb.arg, err == 0 && !id ? -EIO : err, id ? 1 : 0, id ? &id : NULL);
        return;
    }
    uint32_t n = err == 0 ? (uint32_t)PQntuples(res) : 0;
    if (err == 0 && c->req.stmt == DSQL_WAKE)
        n = (uint32_t)dconn_affected(res);
    const char **ids = n && c->req.stmt == DSQL_ENQUEUE ? malloc(n * sizeof(*ids)) : NULL;
    for (uint32_t i = 0; ids && i < n; i++)
        ids[i] = PQgetvalue(res, (int)i, 0);
    if (n && c->req.stmt == DSQL_ENQUEUE && !ids)
        err = -ENOMEM;
    c->cb.ids_fn(c->cb.arg, err, err ? 0 : n, err ? NULL : ids);
    free(ids);
}

static void answer_items(struct ctl_call *c, PGresult *res, int err)
{
    uint32_t n = err == 0 ? (uint32_t)PQntuples(res) : 0;
    const char **ids = n ? malloc(n * sizeof(*ids)) : NULL;
    uint8_t *outcomes = n ? malloc(n) : NULL;
    if (n && (!ids || !outcomes))
        err = -ENOMEM;
    for (uint32_t i = 0; err == 0 && i < n; i++) {
        const char *o = PQgetvalue(res, (int)i, 2);
        ids[i] = PQgetisnull(res, (int)i, 1) ? NULL : PQgetvalue(res, (int)i, 1);
        outcomes[i] = o[0] == 'i' ? URT_DISPATCH_INSERTED : o[0] == 'r' ? URT_DISPATCH_REPLACED : URT_DISPATCH_KEPT;
    }
    c->cb.items_fn(c->cb.arg, err, err ? 0 : n, err ? NULL : ids, err ? NULL : outcomes);
    free(ids);
    free(outcomes);
}

/* cancel: 'cancelled', 'running', 'finished', 'halted', or no row;
 * requeue: one row, or none. */
static void answer_status(struct ctl_call *c, PGresult *res, int err)
{
    if (err == 0 && c->req.stmt == DSQL_CANCEL) {
        const char *s = PQntuples(res) == 1 ? PQgetvalue(res, 0, 0) : "";
        err = !s[0] ? -ENOENT : !strcmp(s, "cancelled") ? 0 : !strcmp(s, "running") ? -EBUSY : -EALREADY;
    } else if (err == 0) {
        err = PQntuples(res) == 1 ? 0 : -ENOENT;
    }
    c->cb.status_fn(c->cb.arg, err);
}

static void call_done(struct dreq *r, PGresult *res, int err, const char *msg)
{
    (void)msg;
    struct ctl_call *c = r->arg;
    if (c->cb.kind == CALL_IDS && c->cb.ids_fn)
        answer_ids(c, res, err);
    else if (c->cb.kind == CALL_ITEMS && c->cb.items_fn)
        answer_items(c, res, err);
    else if (c->cb.kind == CALL_STATUS && c->cb.status_fn)
        answer_status(c, res, err);
    free(c);
}

/* ---- the hand-over -------------------------------------------------------------- */

static int check_state(struct urt_dispatch *d, const char *who)
{
    if (!atomic_load_explicit(&d->started, memory_order_acquire) || atomic_load_explicit(&d->stopping, memory_order_acquire))
        return urt__error(-ENOTCONN, "%s: the dispatcher is %s", who,
                          atomic_load_explicit(&d->started, memory_order_relaxed) ? "stopping" : "not started");
    return 0;
}

/* Copies vals into a block with the caller's callback and submits stmt. */
static int ctl_call(struct urt_dispatch *d, int stmt, const char *const *vals, int n, struct call_cb cb,
                    const char *who)
{
    int err = check_state(d, who);
    if (err < 0)
        return err;
    size_t len = 0;
    for (int i = 0; i < n; i++)
        len += strlen(vals[i]) + 1;
    struct ctl_call *c = malloc(sizeof(*c) + len);
    if (!c)
        return urt__error(-ENOMEM, "%s: no memory", who);
    c->cb = cb;
    char *p = c->text;
    for (int i = 0; i < n; i++) {
        size_t k = strlen(vals[i]) + 1;
        memcpy(p, vals[i], k);
        c->params[i] = p;
        p += k;
    }
    memset(&c->req, 0, sizeof(c->req));
    c->req.kind = DREQ_PREPARED;
    c->req.stmt = stmt;
    c->req.nparams = n;
    c->req.params = c->params;
    c->req.fn = call_done;
    c->req.arg = c;
    /* an enqueue sent twice would insert twice; a cancel or requeue answered
     * twice could say the wrong thing: only the wake is sent again */
    c->req.resend = stmt == DSQL_WAKE;
    err = dconn_submit(&d->ctl.conn, &c->req);
    if (err < 0) {
        free(c);
        return urt__error(err, "%s: the control connection's lane refused it (%s)", who, strerror(-err));
    }
    return 0;
}

/* ---- enqueue, wake, cancel, requeue ---------------------------------------------------- */

URT_API int urt_dispatch_enqueue(urt_dispatch *d, const char *kind, const char *payload, uint64_t delay_ns,
                                 uint32_t count, urt_dispatch_enqueued_fn *fn, void *arg)
{
    if (!d || !kind)
        return urt__error(-EINVAL, "urt_dispatch_enqueue: %s is NULL", !d ? "d" : "kind");
    if (!dispatch_kind_ok(kind))
        return urt__error(-EINVAL, "urt_dispatch_enqueue: kind \"%.64s\" is not 1..63 of [A-Za-z0-9_.:-]", kind);
    if (urt__check_range("urt_dispatch_enqueue", "count", count, 1, MAX_ITEMS))
        return -EINVAL;
    char delay[24], cnt[16];
    snprintf(delay, sizeof(delay), "%" PRIu64, delay_ns / 1000);
    snprintf(cnt, sizeof(cnt), "%u", count);
    struct call_cb cb = {.kind = CALL_IDS, .ids_fn = fn, .arg = arg};
    if (count == 1) { /* batched with the others waiting (dispatch.sql: enqueue_one) */
        const char *one[4] = {kind, payload ? payload : "", delay, d->channel};
        return ctl_call(d, DSQL_ENQUEUE_ONE, one, 4, cb, "urt_dispatch_enqueue");
    }
    const char *vals[5] = {kind, payload ? payload : "", delay, cnt, d->channel};
    return ctl_call(d, DSQL_ENQUEUE, vals, 5, cb, "urt_dispatch_enqueue");
}

URT_API int urt_dispatch_wake(urt_dispatch *d, const char *id, urt_dispatch_enqueued_fn *fn, void *arg)
{
    if (!d || !id)
        return urt__error(-EINVAL, "urt_dispatch_wake: %s is NULL", !d ? "d" : "id");
    if (!uuid_text_valid(id))
        return urt__error(-EINVAL, "urt_dispatch_wake: id \"%.40s\" is not a uuid", id);
    const char *vals[1] = {id};
    return ctl_call(d, DSQL_WAKE, vals, 1, (struct call_cb){.kind = CALL_IDS, .ids_fn = fn, .arg = arg},
                    "urt_dispatch_wake");
}

static int status_call(urt_dispatch *d, const char *id, int stmt, urt_dispatch_status_fn *fn, void *arg,
                       const char *who)
{
    if (!d || !id)
        return urt__error(-EINVAL, "%s: %s is NULL", who, !d ? "d" : "id");
    if (!uuid_text_valid(id))
        return urt__error(-EINVAL, "%s: id \"%.40s\" is not a uuid", who, id);
    const char *vals[1] = {id};
    return ctl_call(d, stmt, vals, 1, (struct call_cb){.kind = CALL_STATUS, .status_fn = fn, .arg = arg}, who);
}

URT_API int urt_dispatch_cancel(urt_dispatch *d, const char *id, urt_dispatch_status_fn *fn, void *arg)
{
    return status_call(d, id, DSQL_CANCEL, fn, arg, "urt_dispatch_cancel");
}

URT_API int urt_dispatch_requeue(urt_dispatch *d, const char *id, urt_dispatch_status_fn *fn, void *arg)
{
    return status_call(d, id, DSQL_REQUEUE, fn, arg, "urt_dispatch_requeue");
}

/* ---- enqueue_items -------------------------------------------------------------------- */

/* A growing "{...}" text array (element by element, quoted or not). */
struct arr {
    char *s;
    size_t len, cap;
    bool oom;
};

static void arr_put(struct arr *a, const char *s, size_t n)
{
    if (a->oom)
        return;
    if (a->len + n + 1 > a->cap) {
        size_t cap = a->cap ? a->cap : 1024;
        while (cap < a->len + n + 1)
            cap *= 2;
        char *t = realloc(a->s, cap);
        if (!t) {
            a->oom = true;
            return;
        }
        a->s = t;
        a->cap = cap;
    }
    memcpy(a->s + a->len, s, n);
    a->len += n;
    a->s[a->len] = '\0';
}

/* Appends one element: NULL (SQL NULL), a number, or a quoted text. */
static void arr_elem(struct arr *a, const char *s, bool quote)
{
    arr_put(a, a->len > 1 ? "," : "", a->len > 1 ? 1 : 0);
    if (!s) {
        arr_put(a, "NULL", 4);
        return;
    }
    if (!quote) {
        arr_put(a, s, strlen(s));
        return;
    }
    arr_put(a, "\"", 1);
    for (const char *p = s, *run = s;; p++) {
        if (*p == '"' || *p == '\\' || !*p) {
            arr_put(a, run, (size_t)(p - run));
            if (!*p)
                break;
            arr_put(a, "\\", 1);
            run = p;
        }
    }
    arr_put(a, "\"", 1);
}

static int check_item(const struct urt_dispatch_item *it, uint32_t i)
{
    static const char *const who = "urt_dispatch_enqueue_items";
    if (!it->kind)
        return urt__error(-EINVAL, "%s: items[%u].kind is NULL", who, i);
    if (!dispatch_kind_ok(it->kind))
        return urt__error(-EINVAL, "%s: items[%u].kind \"%.64s\" is not 1..63 of [A-Za-z0-9_.:-]", who, i, it->kind);
    if (it->key && (!it->key[0] || strlen(it->key) > KEY_MAX))
        return urt__error(-EINVAL, "%s: items[%u].key is %s (1..%d bytes)", who, i, it->key[0] ? "too long" : "empty",
                          KEY_MAX);
    if (it->max_attempts > ATTEMPTS_MAX && it->max_attempts != URT_DISPATCH_ATTEMPTS_UNLIMITED)
        return urt__error(-EINVAL, "%s: items[%u].max_attempts %u is out of range (0..%u, or "
                                   "URT_DISPATCH_ATTEMPTS_UNLIMITED)", who, i, it->max_attempts, ATTEMPTS_MAX);
    if (it->delay_ns > 100ull * 365 * 86400 * 1000000000ull)
        return urt__error(-EINVAL, "%s: items[%u].delay_ns %" PRIu64 " is over 100 years", who, i, it->delay_ns);
    return 0;
}

static int build_items(const struct urt_dispatch_item *items, uint32_t n, struct arr a[6])
{
    char num[24];
    for (int k = 0; k < 6; k++)
        arr_put(&a[k], "{", 1);
    for (uint32_t i = 0; i < n; i++) {
        const struct urt_dispatch_item *it = &items[i];
        arr_elem(&a[0], it->kind, true);
        arr_elem(&a[1], it->payload ? it->payload : "", true);
        arr_elem(&a[2], it->key, true);
        snprintf(num, sizeof(num), "%" PRIu64, it->delay_ns / 1000);
        arr_elem(&a[3], num, false);
        snprintf(num, sizeof(num), "%" PRId32, it->priority);
        arr_elem(&a[4], num, false);
        uint32_t att = it->max_attempts == 0 ? URT_DISPATCH_DEFAULT_ATTEMPTS
                       : it->max_attempts == URT_DISPATCH_ATTEMPTS_UNLIMITED ? 0 : it->max_attempts;
        snprintf(num, sizeof(num), "%u", att);
        arr_elem(&a[5], num, false);
    }
    for (int k = 0; k < 6; k++)
        arr_put(&a[k], "}", 1);
    for (int k = 0; k < 6; k++)
        if (a[k].oom)
            return urt__error(-ENOMEM, "urt_dispatch_enqueue_items: no memory for the batch");
    return 0;
}

URT_API int urt_dispatch_enqueue_items(urt_dispatch *d, const struct urt_dispatch_item *items, uint32_t n,
                                       enum urt_dispatch_key_mode mode, urt_dispatch_items_fn *fn, void *arg)
{
    static const char *const who = "urt_dispatch_enqueue_items";
    if (!d || !items)
        return urt__error(-EINVAL, "%s: %s is NULL", who, !d ? "d" : "items");
    if (urt__check_range(who, "n", n, 1, MAX_ITEMS))
        return -EINVAL;
    static const char *const modes[] = {"replace", "preserve_schedule", "keep"};
    if ((unsigned)mode > URT_DISPATCH_KEY_KEEP)
        return urt__error(-EINVAL, "%s: mode %d is not a urt_dispatch_key_mode", who, (int)mode);
    int err = 0;
    for (uint32_t i = 0; i < n && err == 0; i++)
        err = check_item(&items[i], i);
    if (err < 0 || (err = check_state(d, who)) < 0)
        return err;
    struct arr a[6] = {{0}};
    err = build_items(items, n, a);
    if (err == 0) {
        const char *vals[8] = {a[0].s, a[1].s, a[2].s, a[3].s, a[4].s, a[5].s, modes[mode], d->channel};
        err = ctl_call(d, DSQL_ENQUEUE_ITEMS, vals, 8,
                       (struct call_cb){.kind = CALL_ITEMS, .items_fn = fn, .arg = arg}, who);
    }
    for (int k = 0; k < 6; k++)
        free(a[k].s);
    return err;
}

/*
 * conn_park.c - requests answered later, on the connection's own worker:
 * parked responses (a value that must come from SSD, conn_read_item), the
 * rerun of a request that needs an SSD-resident old value (conn_retry,
 * conn_retry_nread), and stores waiting for room (-o store_wait_ms,
 * conn_park_for_room).  Each queues a placeholder response in request
 * order; when the read completes or the wait's timer fires, the request's
 * fill runs into that placeholder, and conn_run_ready sends what is ready.
 * doc/design.md: "Workers never wait for the SSD" and "Back-pressure: a
 * store waits for room, parked".
 *
 * Threads: everything runs on the worker that owns the connection; an SSD
 * read's completion reaches it through the worker's reader (park_done).
 */
#include "config.h"

#include <event2/event.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>

#include "net/conn.h"
#include "net/conn_park.h"
#include "engine/items.h"
#include "base/settings.h"
#include "base/stats.h"
#include "base/util.h"
#include "net/worker.h"


static void park_done(void *arg, const struct item_got *got)
{
    struct parked *p = arg;
    conn *c = p->c;
    struct item *value = got->value;
    if (c == NULL) {
        if (value != NULL)
            item_release(value);
        if (p->cleanup != NULL)
            p->cleanup(p->ctx);
        free(p);
        return;
    }
    for (struct parked **pp = &c->parked; *pp != NULL; pp = &(*pp)->next)
        if (*pp == p) {
            *pp = p->next;
            break;
        }
    if (p->r->skip) {
        /* The request's responses were cancelled meanwhile: an SSD read
         * it gave up is memcached's get_aborted_extstore. */
        if (p->ssd_read)
            STATS_INCR(&c->thread->stats, get_aborted_extstore);
        if (value != NULL)
            item_release(value);
        if (p->cleanup != NULL)
            p->cleanup(p->ctx);
    } else {
        bool noreply = c->noreply;
        c->noreply = false;
        const struct item_got *had = c->prior;
        c->resp_insert = p->r;
        c->prior = got;
        p->fill(c, value, p->ctx);
        c->prior = had;
        c->resp_insert = NULL;
        c->noreply = noreply;
    }
    p->r->pending = false;
    c->npending--;
    free(p);
    if (!c->ready) {
        struct worker *w = c->thread;
        c->ready = true;
        c->ready_next = w->ready;
        w->ready = c;
    }
}

/* A parked response not yet waiting on anything: its placeholder is
 * queued; park_link() makes it pending, or park_drop() gives it up. */
static struct parked *park_new(conn *c, conn_fill_fn fill,
                               void (*cleanup)(void *), const void *ctx,
                               size_t ctxlen)
{
    struct parked *p = malloc(sizeof(*p) + ctxlen);
    if (p == NULL)
        return NULL;
    struct resp *r = resp_new(c);
    if (r == NULL) {
        free(p);
        return NULL;
    }
    p->c = c;
    p->r = r;
    p->fill = fill;
    p->cleanup = cleanup;
    p->ssd_read = false;
    memcpy(p->ctx, ctx, ctxlen);
    return p;
}

static void park_link(conn *c, struct parked *p)
{
    p->r->pending = true;
    p->next = c->parked;
    c->parked = p;
    c->npending++;
}

static void park_drop(struct parked *p)
{
    p->r->skip = true;              /* an empty resp, dropped when sent */
    free(p);
}

/* A parked response being set up for item_read (its item_waiter). */
struct park_req {
    conn *c;
    conn_fill_fn fill;
    void (*cleanup)(void *);
    const void *ctx;
    size_t ctxlen;
    struct parked *p;
};

static void *park_prepare(void *arg)
{
    struct park_req *pr = arg;
    pr->p = park_new(pr->c, pr->fill, pr->cleanup, pr->ctx, pr->ctxlen);
    if (pr->p != NULL)
        pr->p->ssd_read = true;
    return pr->p;
}

static void park_cancel(void *arg)
{
    park_drop(arg);
}

/* item_read() with a parked response for a value that must come from SSD:
 * on ITEM_PENDING the placeholder is queued and fill runs later. */
static enum item_answer read_parked(conn *c, struct item_read *rq,
                                    conn_fill_fn fill, void (*cleanup)(void *),
                                    const void *ctx, size_t ctxlen, item **out,
                                    enum item_miss *why, unsigned int *clsid)
{
    if (c->thread->reader == NULL) {    /* no SSD tier: never pending */
        rq->wait = NULL;
        return item_read(rq, out, why, clsid);
    }
    struct park_req pr = { c, fill, cleanup, ctx, ctxlen, NULL };
    struct item_waiter w = { c->thread->reader, park_prepare, park_cancel,
                             park_done, &pr };
    rq->wait = &w;
    enum item_answer a = item_read(rq, out, why, clsid);
    rq->wait = NULL;
    if (a == ITEM_PENDING)
        park_link(c, pr.p);
    return a;
}

enum item_answer conn_read_item(conn *c, struct item_read *rq,
                                conn_fill_fn fill, const void *ctx,
                                size_t ctxlen, item **out,
                                enum item_miss *why, unsigned int *clsid)
{
    return read_parked(c, rq, fill, NULL, ctx, ctxlen, out, why, clsid);
}

void *conn_read_item_ctx(conn *c)
{
    return c->parked != NULL ? c->parked->ctx : NULL;
}

struct retry_ctx {
    conn_retry_fn fn;
    void (*cleanup)(void *args);
    int tries;
    bool parked;                /* holds a barrier until it ran */
    _Alignas(max_align_t) char args[];
};

/* c->prior is what the read got (park_done, or conn_retry at once). */
static void retry_fill(conn *c, struct item *value, void *ctx)
{
    struct retry_ctx *r = ctx;
    if (r->parked)
        c->barriers--;
    int tries = c->redo_tries;
    c->redo_tries = r->tries;
    r->fn(c, r->args);
    c->redo_tries = tries;
    if (value != NULL)
        item_release(value);
}

static void retry_cleanup(void *ctx)
{
    struct retry_ctx *r = ctx;
    /* Only for a closing conn or cancelled responses: the barrier goes
     * with them. */
    if (r->cleanup != NULL)
        r->cleanup(r->args);
}

void conn_retry(conn *c, const char *key, size_t nkey, conn_retry_fn fn,
                void (*cleanup)(void *args), const void *args, size_t argslen)
{
    size_t len = sizeof(struct retry_ctx) + argslen;
    struct retry_ctx *r = malloc(len);
    if (r == NULL) {
        if (cleanup != NULL)
            cleanup((void *)args);
        out_errstring(c, "SERVER_ERROR out of memory");
        return;
    }
    r->fn = fn;
    r->cleanup = cleanup;
    r->tries = c->redo_tries + 1;
    r->parked = true;
    memcpy(r->args, args, argslen);

    struct item_read rq = { .key = key, .nkey = nkey, .value = true };
    item *value = NULL;
    enum item_miss why;
    unsigned int clsid;
    switch (read_parked(c, &rq, retry_fill, retry_cleanup, r, len, &value,
                        &why, &clsid)) {
    case ITEM_PENDING:
        c->barriers++;          /* a write: what follows must see its result */
        break;
    case ITEM_NOMEM:
        if (cleanup != NULL)
            cleanup(r->args);
        out_errstring(c, "SERVER_ERROR out of memory");
        break;
    case ITEM_HIT:
    case ITEM_MISS: {
        /* In memory now: the retry finds it there itself (no src). */
        struct item_got got = { value, NULL };
        const struct item_got *had = c->prior;
        r->parked = false;
        c->prior = &got;
        retry_fill(c, value, r);
        c->prior = had;
        break;
    }
    }
    free(r);
}

/* The request of a storage command, for conn_retry_nread. */
struct nread_retry {
    struct item *it;            /* the new data; a reference */
    struct conn_nread_ctx nr;
    __typeof__(((conn *)0)->bin) bin;
    enum conn_protocol protocol;
};

static void nread_retry_run(conn *c, void *args)
{
    struct nread_retry *a = args;
    struct item *item = c->item;
    struct conn_nread_ctx nr = c->nr;
    __typeof__(c->bin) bin = c->bin;
    enum conn_state state = c->state;

    c->item = a->it;                /* complete_nread releases it */
    c->nr = a->nr;
    c->bin = a->bin;
    conn_complete_nread(c, a->protocol);
    if (c->state == conn_closing)
        c->close_after_write = true;
    c->item = item;
    c->nr = nr;
    c->bin = bin;
    c->state = state;
    conn_mem_sync(c);           /* the value being read, if any, again */
}

static void nread_retry_cleanup(void *args)
{
    struct nread_retry *a = args;
    item_release(a->it);
}

void conn_retry_nread(conn *c)
{
    struct nread_retry a = {
        .it = c->item, .nr = c->nr, .bin = c->bin, .protocol = c->protocol,
    };
    item_ref(a.it);
    conn_retry(c, ITEM_key(a.it), a.it->nkey, nread_retry_run,
               nread_retry_cleanup, &a, sizeof(a));
}

/* ---- Stores waiting for room (-o store_wait_ms) ------------------------ */

/* Retry delays: short at first (an evictor frees DRAM within
 * microseconds of being woken), longer while the wait goes on. */
#define ROOM_RETRY_MIN_US 250
#define ROOM_RETRY_MAX_US 8000

struct room_wait {
    struct worker *w;
    struct event *ev;
    int64_t start_us;           /* the store's first wait */
    size_t bytes;               /* in c->room_held */
    struct nread_retry a;       /* the request; holds a reference to a.it */
};

static void room_fill(conn *c, struct item *value, void *ctx)
{
    struct room_wait *rw = ctx;
    (void)value;
    c->barriers--;
    c->room_held -= rw->bytes;
    GSTATS_DECR(stores_waiting);
    int tries = c->redo_tries;
    c->redo_tries = 1;              /* set_cmds counted it once already */
    c->room_wait_start = rw->start_us;
    c->room_parked = c->room_timed_out = false;
    nread_retry_run(c, &rw->a);     /* complete_nread releases a.it */
    if (!c->room_parked && !c->room_timed_out)
        GSTATS_INCR(store_waits_done);
    c->room_wait_start = 0;
    c->redo_tries = tries;
    conn_mem_sync(c);
}

static void room_cleanup(void *ctx)
{
    struct room_wait *rw = ctx;
    GSTATS_DECR(stores_waiting);
    item_release(rw->a.it);
}

static void room_timer(evutil_socket_t fd, short which, void *arg)
{
    struct parked *p = arg;
    struct room_wait *rw = (struct room_wait *)p->ctx;
    struct worker *w = rw->w;
    (void)fd;
    (void)which;
    event_free(rw->ev);
    struct item_got none = { NULL, NULL };
    park_done(p, &none);            /* room_fill, or room_cleanup if closed */
    conn_run_ready(w);
}

bool conn_park_for_room(conn *c, enum store_result *res)
{
    int64_t now = (int64_t)(util_now_ns() / 1000);
    int64_t start = c->room_wait_start != 0 ? c->room_wait_start : now;
    if (now - start >= (int64_t)settings.store_wait_ms * 1000 &&
        settings.store_wait_ms > 0) {
        GSTATS_INCR(store_wait_timeouts);
        c->room_timed_out = true;
        *res = STORE_WAIT_TIMEOUT;
        return false;
    }
    *res = STORE_NO_MEMORY;
    if (settings.store_wait_ms == 0 || c->transport == TRANSPORT_UDP)
        return false;
    int64_t delay = (now - start) / 4;
    delay = delay < ROOM_RETRY_MIN_US ? ROOM_RETRY_MIN_US
          : delay > ROOM_RETRY_MAX_US ? ROOM_RETRY_MAX_US : delay;
    struct room_wait rw = {
        .w = c->thread, .start_us = start, .bytes = ITEM_ntotal(c->item),
        .a = { .it = c->item, .nr = c->nr, .bin = c->bin,
               .protocol = c->protocol },
    };
    struct parked *p = park_new(c, room_fill, room_cleanup, &rw, sizeof(rw));
    if (p == NULL)
        return false;
    struct room_wait *prw = (struct room_wait *)p->ctx;
    prw->ev = evtimer_new(c->thread->base, room_timer, p);
    struct timeval tv = { 0, (suseconds_t)delay };
    if (prw->ev == NULL || evtimer_add(prw->ev, &tv) != 0) {
        if (prw->ev != NULL)
            event_free(prw->ev);
        park_drop(p);
        return false;
    }
    park_link(c, p);
    item_ref(c->item);
    c->barriers++;                  /* later requests wait for its answer */
    c->room_held += rw.bytes;
    c->room_parked = true;
    conn_mem_sync(c);
    if (c->room_wait_start == 0)
        GSTATS_INCR(store_waits);
    GSTATS_INCR(stores_waiting);
    *res = STORE_NEED_ROOM;
    return true;
}

void conn_run_ready(struct worker *w)
{
    while (w->ready != NULL) {
        conn *c = w->ready;
        w->ready = c->ready_next;
        c->ready = false;
        c->ready_next = NULL;
        /* A conn resting between requests (or parked) sends now; in any
         * other state its own events bring it to conn_write. */
        if (c->state == conn_read || c->state == conn_parked) {
            conn_set_state(c, conn_write);
            conn_drive(c);
        }
    }
}


/*
 * tac/fetch_queue.c - the fetchers' queue: requests to move an item up a
 * tier, queued by a read that found it hot or warm (nvm and SSD hits,
 * tier.c and ssd_read.c) and taken by the fetch threads (fetch.c).
 *
 * Design: see fetch.c, "Queues" and "Buf temperature".  Two bounded
 * rings: one for cheap requests (NVM copies, single SSD tuples), served
 * first, and a short one for whole bufs, so that slow buf reads never
 * crowd out the cheap moves.  Workers only ever try the lock: when it is
 * busy or a ring is full the request is dropped and counted, so a worker
 * never waits.
 *
 * Threads: workers push; fetchers take.
 */
#include "config.h"

#include <stdbool.h>
#include <string.h>

#include "base/bg.h"
#include "ssd/ssd.h"
#include "tac/fetch.h"
#include "tac/internal.h"
#include "tac/tuple.h"

#define FETCH_QUEUE 1024
#define BUF_QUEUE 64
#define RECENT_BUFS 4096         /* bufs remembered for their temperature */
#define BUF_WARM_SECS 2
/* Readers' copies (fetch.h) the queue may hold: outside -m, like every
 * transient item.  With 1 KB values the 1,024 requests hold 1 MB. */
#define FETCH_COPY_BYTES (8u << 20)

struct fetch_ring {
    struct fetch_req *req;
    unsigned size, head, count;
};

static struct {
    struct bg bg;                        /* the fetchers; its lock guards: */
    struct fetch_req cheap_req[FETCH_QUEUE];
    struct fetch_req buf_req[BUF_QUEUE];
    struct fetch_ring cheap, bufs;       /* lock */
    /* lock: warm reads seen per buf; a buf fetched whole is forgotten
     * (buf 0) so it is not fetched again at once. */
    struct { uint64_t buf; rel_time_t when; } recent[RECENT_BUFS];
    size_t copy_bytes;                   /* lock: copies queued */
    int n;                               /* atomic: 0 = no pushes */
} fq = { .cheap = { fq.cheap_req, FETCH_QUEUE, 0, 0 },
         .bufs = { fq.buf_req, BUF_QUEUE, 0, 0 } };

static size_t copy_size(const item *copy)
{
    return item_make_size(copy->nkey, copy->nbytes);
}

static bool ring_put(struct fetch_ring *q, const struct fetch_req *r)
{
    if (q->count >= q->size)
        return false;
    q->req[(q->head + q->count) % q->size] = *r;
    q->count++;
    return true;
}

static void ring_take(struct fetch_ring *q, struct fetch_req *out)
{
    *out = q->req[q->head];
    q->head = (q->head + 1) % q->size;
    q->count--;
}

/* True if this warm read makes the buf of r->ref warm: another warm read
 * of the buf came within BUF_WARM_SECS.  the fetchers' lock (fq.bg) held. */
static bool buf_turns_warm(const struct fetch_req *r)
{
    size_t bs = tac.ssd_buf_size;
    uint64_t buf = (r->ref - ssd_ref_offset(r->ref) % bs) | 1;   /* never 0 */
    unsigned slot = (unsigned)((buf ^ (buf >> 29)) % RECENT_BUFS);
    rel_time_t now = mc_now();
    if (fq.recent[slot].buf == buf && fq.recent[slot].when + BUF_WARM_SECS >= now) {
        fq.recent[slot].buf = 0;
        return true;
    }
    fq.recent[slot].buf = buf;
    fq.recent[slot].when = now;
    return false;
}

/* Queues r unless the queue is busy or full.  Never blocks. */
static bool fetch_push(struct fetch_req *r)
{
    if (__atomic_load_n(&fq.n, __ATOMIC_ACQUIRE) == 0 ||
        !bg_trylock(&fq.bg)) {
        TAC_INCR(fetch_dropped);
        return false;
    }
    bool ok = false;
    if (bg_running(&fq.bg)) {
        if (r->kind == FETCH_SSD_BUF && !buf_turns_warm(r))
            r->kind = FETCH_SSD_TUPLE;
        if (r->copy != NULL && (r->kind == FETCH_SSD_BUF || item_refs_crowded(r->meta) ||
                                fq.copy_bytes + copy_size(r->copy) > FETCH_COPY_BYTES))
            r->copy = r->meta = NULL;
        ok = ring_put(r->kind == FETCH_SSD_BUF ? &fq.bufs : &fq.cheap, r);
        if (ok && r->copy != NULL) {
            /* Pinned before the lock is let go: no fetcher has it yet. */
            item_ref(r->copy);
            item_ref(r->meta);
            fq.copy_bytes += copy_size(r->copy);
        }
        if (ok)
            bg_wake_locked(&fq.bg);
    }
    bg_unlock(&fq.bg);
    if (ok)
        TAC_INCR(fetch_queued);
    else
        TAC_INCR(fetch_dropped);
    return ok;
}

void tac_fetch_nvm(item *meta, item *copy)
{
    struct fetch_req r = { .kind = FETCH_NVM, .cas = meta->cas,
                           .nkey = meta->nkey, .copy = copy,
                           .meta = copy != NULL ? meta : NULL };
    memcpy(r.key, ITEM_key(copy), meta->nkey);     /* the meta tuple has none */
    r.hv = item_hash(r.key, r.nkey);
    fetch_push(&r);
}

/* A request for SSD meta tuple meta's own tuple (pinned by the caller);
 * false, and nothing queued, when its item lock is busy.  Defrag rewrites
 * the reference under that lock. */
static bool ssd_req(struct fetch_req *r, enum fetch_kind kind, item *meta,
                    item *copy)
{
    r->kind = kind;
    r->recache = false;
    r->meta = copy != NULL ? meta : NULL;
    r->copy = copy;
    r->len = tac_tuple_size(meta->nkey, meta->nbytes);
    r->nkey = meta->nkey;
    memcpy(r->key, ITEM_key(copy), meta->nkey);    /* the meta tuple has none */
    r->hv = item_hash(r->key, r->nkey);
    if (!item_trylock(r->hv))
        return false;
    r->ref = item_meta_ref(meta);
    item_unlock(r->hv);
    return true;
}

void tac_fetch_ssd_tuple(item *meta, item *copy)
{
    struct fetch_req r;
    if (ssd_req(&r, FETCH_SSD_TUPLE, meta, copy))
        fetch_push(&r);
}

void tac_fetch_ssd_recache(item *meta, item *copy)
{
    struct fetch_req r;
    if (ssd_req(&r, FETCH_SSD_TUPLE, meta, copy)) {
        r.recache = true;
        fetch_push(&r);
    }
}

void tac_fetch_ssd_buf(item *meta, item *copy)
{
    struct fetch_req r;
    if (ssd_req(&r, FETCH_SSD_BUF, meta, copy))
        fetch_push(&r);
}

void tac_fetch_req_done(struct fetch_req *r)
{
    if (r->copy != NULL) {
        item_release(r->copy);
        item_release(r->meta);
        r->copy = r->meta = NULL;
    }
}

bool tac_fetchq_take(struct bg *g, struct fetch_req *out)
{
    bg_lock(g);
    while (fq.cheap.count == 0 && fq.bufs.count == 0 && bg_running(g))
        bg_wait_locked(g, BG_FOREVER);
    if (!bg_running(g)) {
        bg_unlock(g);
        return false;
    }
    ring_take(fq.cheap.count > 0 ? &fq.cheap : &fq.bufs, out);
    if (out->copy != NULL)
        fq.copy_bytes -= copy_size(out->copy);
    bg_unlock(g);
    return true;
}

bool tac_fetchq_start(unsigned n, void (*fn)(struct bg *g, unsigned idx, void *arg))
{
    bg_init(&fq.bg, "tac-fetch", NULL);
    if (!bg_start(&fq.bg, n, fn, NULL))
        return false;
    __atomic_store_n(&fq.n, (int)n, __ATOMIC_RELEASE);
    return true;
}

void tac_fetchq_stop(void)
{
    int n = __atomic_load_n(&fq.n, __ATOMIC_ACQUIRE);
    if (n == 0)
        return;
    __atomic_store_n(&fq.n, 0, __ATOMIC_RELEASE);   /* no more pushes */
    bg_stop(&fq.bg);
    for (unsigned i = 0; i < fq.cheap.count; i++)
        tac_fetch_req_done(&fq.cheap.req[(fq.cheap.head + i) % fq.cheap.size]);
    fq.cheap.count = fq.bufs.count = 0;
    fq.copy_bytes = 0;
}

/*
 * tac/fetch.c - fetch threads: move hot and warm items up a tier (TaC 4.2,
 * 5.4, hybrid swapping).
 *
 * Design.  Workers never move an item up themselves: when a read finds a
 * hot NVM item (tier.c) or a warm or hot SSD item (ssd_tier.c), they queue a
 * request and go on.  A fetcher then
 *   - copies a hot NVM item's value into a DRAM item and publishes it in
 *     the meta tuple's place (same version: same CAS), which frees the NVM
 *     slot once its last reader is gone;
 *   - reads the whole SSD buf that held a warm or hot item and checks every
 *     tuple in it with the shared validity check: valid hot tuples go to
 *     DRAM, valid warm ones to NVM (or DRAM without NVM), cold ones stay
 *     (tac_ssd_fetch_buf in ssd_tier.c).
 * Each move happens under the key's item lock and only if the item is
 * still the version that was queued and its tuple passes the read-back
 * checks (tuple.h); a damaged tuple is not moved, its item is unlinked.  A
 * fetch that finds no free DRAM chunk gives up (fetch_no_room) and wakes
 * the evictors.
 *
 * Buf temperature.  A buf is written from one cold tail, so most of its
 * tuples are cold: a whole-buf read for every warm read costs a buf of
 * I/O for about one tuple moved.  A buf therefore comes up whole only when
 * it shows warmth itself: a second warm read of one of its tuples within
 * BUF_WARM_SECS.  A first warm read moves just its own tuple (as
 * antituple does), which costs one tuple's read.
 *
 * Queues.  Two bounded rings: one for cheap requests (NVM copies, single
 * SSD tuples), served first, and a short one for whole bufs, so that slow
 * buf reads never crowd out the cheap moves.  Workers only ever try the
 * lock: when it is busy or a ring is full the request is dropped and
 * counted, so a worker never waits.
 *
 * Threads: -o fetch_threads fetchers; workers queue.
 */
#include "config.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bg.h"
#include "settings.h"
#include "ssd/ssd.h"
#include "tac/internal.h"
#include "tac/tuple.h"

#define FETCH_QUEUE 1024
#define BUF_QUEUE 64
#define RECENT_BUFS 4096         /* bufs remembered for their temperature */
#define BUF_WARM_SECS 2

enum fetch_kind { FETCH_NVM = 1, FETCH_SSD_BUF, FETCH_SSD_TUPLE };

struct fetch_req {
    enum fetch_kind kind;
    uint32_t hv;
    uint64_t cas;                /* NVM: the version queued */
    uint64_t ref;                /* SSD: a tuple (of the buf) */
    size_t len;                  /* SSD tuple: its length */
    bool recache;                /* SSD tuple: to DRAM even when cold */
    uint8_t nkey;
    char key[KEY_MAX_LENGTH];
};

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
    int n;                               /* atomic: 0 = no pushes */
} fq = { .cheap = { fq.cheap_req, FETCH_QUEUE, 0, 0 },
         .bufs = { fq.buf_req, BUF_QUEUE, 0, 0 } };

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
    size_t bs = tac_ssd_buf_size();
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
        ok = ring_put(r->kind == FETCH_SSD_BUF ? &fq.bufs : &fq.cheap, r);
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

void tac_fetch_nvm(const item *meta)
{
    struct fetch_req r = { .kind = FETCH_NVM, .cas = meta->cas,
                           .nkey = meta->nkey };
    memcpy(r.key, ITEM_key(meta), meta->nkey);
    r.hv = item_hash(r.key, r.nkey);
    fetch_push(&r);
}

/* A request for SSD meta tuple meta's own tuple (pinned by the caller);
 * false, and nothing queued, when its item lock is busy.  Defrag rewrites
 * the reference under that lock. */
static bool ssd_req(struct fetch_req *r, enum fetch_kind kind, const item *meta)
{
    r->kind = kind;
    r->recache = false;
    r->len = tac_tuple_size(meta->nkey, meta->nbytes);
    r->nkey = meta->nkey;
    memcpy(r->key, ITEM_key(meta), meta->nkey);
    r->hv = item_hash(r->key, r->nkey);
    if (!item_trylock(r->hv))
        return false;
    r->ref = item_meta_ref(meta);
    item_unlock(r->hv);
    return true;
}

void tac_fetch_ssd_tuple(const item *meta)
{
    struct fetch_req r;
    if (ssd_req(&r, FETCH_SSD_TUPLE, meta))
        fetch_push(&r);
}

void tac_fetch_ssd_recache(const item *meta)
{
    struct fetch_req r;
    if (ssd_req(&r, FETCH_SSD_TUPLE, meta)) {
        r.recache = true;
        fetch_push(&r);
    }
}

void tac_fetch_ssd_buf(const item *meta)
{
    struct fetch_req r;
    if (ssd_req(&r, FETCH_SSD_BUF, meta))
        fetch_push(&r);
}

/* Copies a hot NVM item to DRAM if it is still the version queued. */
static void fetch_nvm(const struct fetch_req *r)
{
    item_lock(r->hv);
    item *it = do_item_get(r->key, r->nkey, r->hv, NULL, false);
    if (it != NULL && it->tier == TIER_NVM && (it->it_flags & ITEM_META) &&
        it->cas == r->cas) {
        item *n = item_alloc_promote(it, it->partition);
        if (n == NULL) {
            TAC_INCR(fetch_no_room);
        } else {
            if (tac_nvm_read_value(it, ITEM_data(n))) {
                do_item_move(it, n, r->hv);
                TAC_INCR(fetch_nvm_to_dram);
            } else {
                do_item_unlink(it, r->hv);      /* damaged: never served */
            }
            item_release(n);
        }
    }
    if (it != NULL)
        item_release(it);
    item_unlock(r->hv);
}

static void fetcher_main(struct bg *g, unsigned idx, void *arg)
{
    (void)idx;
    (void)arg;
    struct tac_iobuf io = { NULL, tac_ssd_buf_size() > 0 ? tac_ssd_buf_size() : 1 };
    io.mem = malloc(io.cap);
    if (io.mem == NULL) {
        fprintf(stderr, "out of memory starting a fetcher\n");
        return;
    }
    for (;;) {
        bg_lock(g);
        while (fq.cheap.count == 0 && fq.bufs.count == 0 && bg_running(g))
            bg_wait_locked(g, BG_FOREVER);
        if (!bg_running(g)) {
            bg_unlock(g);
            break;
        }
        struct fetch_req r;
        ring_take(fq.cheap.count > 0 ? &fq.cheap : &fq.bufs, &r);
        bg_unlock(g);
        if (r.kind == FETCH_NVM) {
            fetch_nvm(&r);
        } else if (r.kind == FETCH_SSD_TUPLE) {
            tac_ssd_fetch_one(r.key, r.nkey, r.hv, r.ref, r.len, r.recache, &io);
        } else {
            TAC_INCR(fetch_ssd_bufs);
            tac_ssd_fetch_buf(r.ref, &io);
        }
    }
    free(io.mem);
}

void tac_fetchers_start(void)
{
    int n = settings.fetch_threads;
    if (n <= 0)
        return;
    bg_init(&fq.bg, "tac-fetch", NULL);
    if (!bg_start(&fq.bg, (unsigned)n, fetcher_main, NULL)) {
        fprintf(stderr, "cannot start %d fetch threads\n", n);
        exit(EXIT_FAILURE);
    }
    __atomic_store_n(&fq.n, n, __ATOMIC_RELEASE);
}

void tac_fetchers_stop(void)
{
    int n = __atomic_load_n(&fq.n, __ATOMIC_ACQUIRE);
    if (n == 0)
        return;
    __atomic_store_n(&fq.n, 0, __ATOMIC_RELEASE);   /* no more pushes */
    bg_stop(&fq.bg);
    fq.cheap.count = fq.bufs.count = 0;
}

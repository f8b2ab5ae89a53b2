/*
 * items.c - the item engine's entry and its walks: items_init, and items
 * reached other than by their key: the slab page mover's chunk evictor
 * (item_evict_chunk: a chunk by address), the expiry crawler's walk of
 * every LRU, key dumps by hash stripe, and the `stats items` counters.
 * The engine's other files: items_core.c (the lifecycle: its top comment
 * holds the design and the lock order) and items_ops.c (reads, stores,
 * incr/decr, deletes).
 *
 * Threads: the maintainer (crawler, page mover), workers (dumps, stats).
 */
#include "config.h"

#include <assert.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <ctype.h>
#include <string.h>
#include <unistd.h>

#include "engine/assoc.h"
#include "engine/items.h"
#include "engine/items_int.h"
#include "engine/lazy_lru.h"
#include "base/settings.h"
#include "engine/slabs.h"
#include "base/stats.h"
#include "base/watch.h"
#include "base/util.h"

/* ---- Slab page mover support. -------------------------------------- */

/* Pins a chunk unless it is free (refcount 0).  Returns false for a free
 * chunk. */
static bool chunk_pin(item *it)
{
    uint16_t r = __atomic_load_n(&it->refcount, __ATOMIC_ACQUIRE);
    do {
        if (r == 0)
            return false;
    } while (!__atomic_compare_exchange_n(&it->refcount, &r, (uint16_t)(r + 1),
                                          false, __ATOMIC_ACQ_REL,
                                          __ATOMIC_ACQUIRE));
    return true;
}

/* Without a lower tier, the page mover keeps a live DRAM item by copying
 * it into a free chunk of its class outside the page being drained (no
 * new page: slabs_alloc_spare), as memcached's slab rebalancer rescues.
 * The copy keeps everything the client sees (CAS, times, flags, fetched
 * state).  Caller holds the item lock; `it` is linked.  False: no free
 * chunk, the caller evicts. */
static bool item_rescue(item *it, uint32_t hv)
{
    if (it->tier != TIER_DRAM || (it->it_flags & (ITEM_META | ITEM_TRANSIENT)))
        return false;
    item *n = slabs_alloc_spare(it->slabs_clsid, it->partition);
    if (n == NULL)
        return false;
    n->h_next = n->next = n->prev = NULL;
    n->cas = it->cas;
    n->exptime = it->exptime;
    n->access = __atomic_load_n(&it->access, __ATOMIC_RELAXED);
    n->nbytes = it->nbytes;
    n->flags = it->flags;
    n->it_flags = it->it_flags & (uint16_t)~(ITEM_LINKED | ITEM_SLABBED);
    n->tier = TIER_DRAM;
    n->nkey = it->nkey;
    n->time = it->time;
    n->lru_seg = it->lru_seg;
    memcpy(n->data, it->data, (size_t)it->nkey + 1 + it->nbytes);
    __atomic_store_n(&n->refcount, 1, __ATOMIC_RELEASE);
    do_item_unlink(it, hv);
    do_item_link(n, hv, true);
    GSTATS_DECR(total_items);           /* the same item, moved */
    item_release(n);
    return true;
}

enum chunk_evict_result item_evict_chunk(void *chunk)
{
    item *it = chunk;
    if (!chunk_pin(it))
        return CHUNK_FREE;
    /* Pinned: key and nkey stay fixed until the chunk is freed. */
    uint32_t hv = item_hv(it);
    enum chunk_evict_result res = CHUNK_BUSY;
    if (item_trylock(hv)) {
        if ((it->it_flags & ITEM_LINKED) && refcount_load(it) == 2) {
            /* A dead item is reclaimed, never moved: written down after a
             * flush_all it would get a write sequence above the flush's,
             * and a crash would bring it back. */
            bool dead = item_is_dead(it, NULL);
            if (!dead && items_tier_ops != NULL && items_tier_ops->demote != NULL &&
                items_tier_ops->demote(it, hv)) {
                /* Moved to a lower tier; `it` is unlinked already. */
                res = CHUNK_RESCUED;
            } else if (items_tier_ops != NULL && !dead) {
                /* A lower tier exists but had no room this time: keep
                 * the item and let the mover retry, or give up the move,
                 * rather than lose it. */
                res = CHUNK_BUSY;
            } else if (items_tier_ops == NULL && !dead && item_rescue(it, hv)) {
                res = CHUNK_RESCUED;
            } else {
                res = CHUNK_RECLAIMED;
                if (!dead) {
                    items_stats_evicted(it, it->slabs_clsid);
                    res = CHUNK_EVICTED;
                }
                do_item_unlink(it, hv);
            }
        }
        item_unlock(hv);
    }
    item_release(it);
    return res;
}

/* ---- Expiry crawler. ------------------------------------------------- */

/* Reclaims `it` if dead.  A dead item at the LRU's tail counts in
 * `reclaimed`, as in memcached, whose LRU maintainer reclaims dead tail
 * items; any other counts in `crawler_reclaimed`.  Caller holds l->lock
 * and crawl_lock. */
static void crawl_check_locked(struct lru *l, item *it)
{
    unsigned int clsid = it->slabs_clsid;
    GSTATS_INCR(crawler_items_checked);
    CLS_INCR(clsid, crawler_items_checked);
    uint32_t hv = item_hv(it);
    if (!item_trylock(hv))
        return;
    if (item_is_dead(it, NULL)) {
        items_count_dead(clsid, it, l->tail != it);
        items_unlink_locked(l, it, hv);
        item_release(it);
    }
    item_unlock(hv);
}

/* Walks the crawler one LRU toward the head, checking at most budget
 * items.  Returns the number checked; *done when it left the LRU. */
static int crawl_lru(struct lru *l, int budget, bool *done)
{
    int checked = 0;
    pthread_mutex_lock(&l->lock);
    if (!items_crawler_in_lru) {
        if (l->tail == NULL) {
            pthread_mutex_unlock(&l->lock);
            *done = true;
            return 0;
        }
        items_crawler.next = NULL;
        items_crawler.prev = l->tail;
        l->tail->next = &items_crawler;
        l->tail = &items_crawler;
        items_crawler_in_lru = true;
    }
    while (checked < budget && items_crawler.prev != NULL) {
        item *it = items_crawler.prev;
        items_lru_unlink_locked(l, &items_crawler);
        items_lru_insert_before_locked(l, it, &items_crawler);
        crawl_check_locked(l, it);
        checked++;
    }
    *done = items_crawler.prev == NULL;
    if (*done) {
        items_lru_unlink_locked(l, &items_crawler);
        items_crawler_in_lru = false;
    }
    pthread_mutex_unlock(&l->lock);
    return checked;
}

/* Meta tuples are on no LRU: the crawler finds the dead ones by walking
 * the index one item lock stripe at a time (sweep_stripe, under
 * crawl_lock), so that an expired or flushed item's NVM slot or SSD bytes
 * are freed as memcached's crawler frees an expired extstore item's.  The items of
 * a stripe are gathered (assoc_visit_stripe may not change the index),
 * then unlinked under the same stripe lock. */
#define SWEEP_BATCH 128
static unsigned int sweep_stripe;

struct sweep_walk {
    item *dead[SWEEP_BATCH];
    int ndead;
    int seen;
    bool full;
};

static void sweep_one(item *it, void *arg)
{
    struct sweep_walk *w = arg;
    if (!item_compact(it) || !(it->it_flags & ITEM_LINKED))
        return;
    w->seen++;
    if (!item_is_dead(it, NULL))
        return;
    if (w->ndead == SWEEP_BATCH) {
        w->full = true;
        return;
    }
    w->dead[w->ndead++] = it;
}

/* Sweeps stripes until about budget items were looked at; returns how
 * many.  *wrapped when the sweep passed the last stripe. */
static int sweep_meta_step(int budget, bool *wrapped)
{
    int seen = 0;
    struct sweep_walk w;
    *wrapped = false;
    for (unsigned int n = 0; n < ITEM_LOCK_COUNT && seen < budget; n++) {
        unsigned int stripe = sweep_stripe;
        w.ndead = 0;
        w.seen = 0;
        w.full = false;
        item_lock(stripe);
        assoc_visit_stripe(stripe, sweep_one, &w);
        for (int i = 0; i < w.ndead; i++) {
            item *it = w.dead[i];
            items_count_dead(it->slabs_clsid, it, true);
            do_item_unlink(it, item_hv(it));
        }
        item_unlock(stripe);
        GSTATS_ADD(crawler_items_checked, (uint64_t)w.seen);
        seen += w.seen > 0 ? w.seen : 1;
        if (w.full)
            continue;           /* the rest of this stripe next time */
        if (++sweep_stripe == ITEM_LOCK_COUNT) {
            sweep_stripe = 0;
            *wrapped = true;
            break;
        }
    }
    return seen;
}

/* The LRU sets the crawler walks, in order: set 0 is each class's one LRU
 * (or its COLD queue), items_lrus; set s > 0 is queue s of the segmented
 * LRU (lru_seg.c), once those are in use.  The list only grows (the queues
 * come into use at run time, `lru mode`), and at its end: the cursor's
 * index keeps its set. */
static unsigned int crawl_sets(unsigned int sets[LRU_SEGS])
{
    unsigned int n = 0;
    sets[n++] = 0;
    if (items_seg_lists())
        for (unsigned int s = LRU_SEG_HOT; s < LRU_SEGS; s++)
            sets[n++] = s;
    return n;
}

static struct lru *crawl_list(unsigned int set, unsigned int cls, int p)
{
    if (set == 0)
        return &items_lrus[cls][p];
    return items_seg_lru(set, cls, p);
}


int items_crawl_step(int budget)
{
    int checked = 0;
    pthread_mutex_lock(&items_crawl_lock);
    /* At most one full cycle: every LRU once, plus the rest of the one
     * the cursor sits in.  items_crawl_tier indexes sets[]. */
    unsigned int sets[LRU_SEGS];
    unsigned int nsets = crawl_sets(sets);
    unsigned int limit = (items_crawler_in_lru ? 1 : 0);
    for (unsigned int t = 0; t < nsets; t++)
        limit += slabs_nclasses() * (unsigned int)items_npart;
    for (unsigned int visited = 0; checked < budget && visited < limit;) {
        if (items_crawl_tier >= nsets)
            items_crawl_tier = 0;
        unsigned int set = sets[items_crawl_tier];
        if (items_crawl_cls < 1 || items_crawl_cls > slabs_nclasses())
            items_crawl_cls = 1;
        bool at_start = items_crawl_tier == 0 && items_crawl_cls == 1 && items_crawl_part == 0;
        if (at_start && !items_crawler_in_lru) {
            GSTATS_INCR(lru_crawler_starts);
            __atomic_store_n(&items_crawl_running, 1, __ATOMIC_RELAXED);
        }
        bool done = false;
        checked += crawl_lru(crawl_list(set, items_crawl_cls, items_crawl_part),
                             budget - checked, &done);
        if (done) {
            visited++;
            if (++items_crawl_part >= items_npart) {
                items_crawl_part = 0;
                if (++items_crawl_cls > slabs_nclasses()) {
                    items_crawl_cls = 1;
                    items_crawl_tier = (items_crawl_tier + 1) % nsets;
                    if (items_crawl_tier == 0)
                        __atomic_store_n(&items_crawl_running, 0, __ATOMIC_RELAXED);
                }
            }
        }
    }
    /* Fewer than asked: the LRUs' cycle is done; with a lower tier the
     * sweep of the meta tuples follows, and ends the cycle. */
    bool cycle_done = checked < budget;
    if (cycle_done && items_tier_ops != NULL) {
        bool wrapped = false;
        checked += sweep_meta_step(budget - checked, &wrapped);
        cycle_done = wrapped;
    }
    pthread_mutex_unlock(&items_crawl_lock);
    /* A whole cycle is done, so is a rush. */
    if (cycle_done)
        __atomic_store_n(&items_crawl_rush, false, __ATOMIC_RELAXED);
    return checked;
}

void items_crawl_soon(void)
{
    __atomic_store_n(&items_crawl_rush, true, __ATOMIC_SEQ_CST);
    slabs_kick();       /* the maintainer may doze */
}

bool items_crawl_rushed(void)
{
    return __atomic_load_n(&items_crawl_rush, __ATOMIC_SEQ_CST);
}

/* ---- Key dumps (lru_crawler metadump, stats cachedump). ------------- */

/* A meta tuple has no key: the walk pins it and reads its key from its
 * tuple once the stripe is let go. */
struct view_pinned {
    item *it;
    uint64_t ref;
    struct item_view v;
};

struct view_walk {
    bool (*want)(const struct item_view *v, void *arg);
    void (*fn)(const struct item_view *v, void *arg);
    void *arg;
    struct view_pinned *pinned;
    size_t npinned, cap;
};

static void view_one(item *it, void *arg)
{
    struct view_walk *w = arg;
    if (!(it->it_flags & ITEM_LINKED) || item_is_dead(it, NULL))
        return;
    size_t size = item_make_size(it->nkey, it->nbytes);
    struct item_view v = {
        .key = item_compact(it) ? NULL : ITEM_key(it),
        .nkey = it->nkey,
        .exptime = it->exptime != 0 ? (int64_t)process_started + it->exptime : 0,
        .last_access = (int64_t)process_started + item_time(it),
        .cas = it->cas,
        .fetched = (it->it_flags & ITEM_FETCHED) != 0,
        .clsid = it->tier == TIER_DRAM ? it->slabs_clsid : slabs_clsid(size),
        .size = size,
        .value_len = it->nbytes >= 2 ? it->nbytes - 2 : 0,
        .tier = (enum item_tier)it->tier,
    };
    if (!item_compact(it)) {
        w->fn(&v, w->arg);
        return;
    }
    if (items_tier_ops == NULL || items_tier_ops->keys_of == NULL ||
        (w->want != NULL && !w->want(&v, w->arg)))
        return;
    if (w->npinned == w->cap) {
        size_t cap = w->cap ? 2 * w->cap : 64;
        struct view_pinned *p = realloc(w->pinned, cap * sizeof(*p));
        if (p == NULL)
            return;                 /* left out of the listing */
        w->pinned = p;
        w->cap = cap;
    }
    refcount_incr(it);
    w->pinned[w->npinned++] = (struct view_pinned){ it, item_meta_ref(it), v };
}

void items_view_stripe(unsigned int stripe,
                       bool (*want)(const struct item_view *v, void *arg),
                       void (*fn)(const struct item_view *v, void *arg), void *arg)
{
    struct view_walk w = { want, fn, arg, NULL, 0, 0 };
    item_lock(stripe);
    assoc_visit_stripe(stripe, view_one, &w);
    item_unlock(stripe);
    /* Pinned, a meta tuple keeps its tuple; one replaced meanwhile is
     * still listed as it was, like any item the walk passed.  Their keys
     * are read VIEW_KEYS at a time, so the device works on many. */
    enum { VIEW_KEYS = 64 };
    item *metas[VIEW_KEYS];
    uint64_t refs[VIEW_KEYS];
    bool ok[VIEW_KEYS];
    char (*keys)[KEY_MAX_LENGTH] = w.npinned > 0 ? malloc(VIEW_KEYS * KEY_MAX_LENGTH) : NULL;
    for (size_t base = 0; base < w.npinned; base += VIEW_KEYS) {
        size_t n = w.npinned - base < VIEW_KEYS ? w.npinned - base : VIEW_KEYS;
        for (size_t i = 0; i < n; i++) {
            metas[i] = w.pinned[base + i].it;
            refs[i] = w.pinned[base + i].ref;
            ok[i] = false;
        }
        if (keys != NULL)
            items_tier_ops->keys_of(n, metas, refs, keys, ok);
        for (size_t i = 0; i < n; i++) {
            struct view_pinned *p = &w.pinned[base + i];
            if (ok[i] && (want == NULL || want(&p->v, arg))) {
                p->v.key = keys[i];
                fn(&p->v, arg);
            }
            item_release(p->it);
        }
    }
    free(keys);
    free(w.pinned);
}

/* ---- Stats. ---------------------------------------------------------- */

/* One "items:<class>:<name> <value>" line. */
static void class_line(struct stat_sink *sink, unsigned int c,
                       const char *name, unsigned long long v)
{
    char key[80];
    snprintf(key, sizeof(key), "items:%u:%s", c, name);
    stat_printf(sink, key, "%llu", v);
}

/*
 * memcached's names, in its order.  With the segmented LRU (lru_seg.c) each
 * name has memcached's meaning; with the Lazy LRU each class has one LRU,
 * which reads as memcached's cold segment: number_cold is number,
 * hits_to_cold the class's hits, and the hot, warm and temp names are 0
 * (doc/stats.md).  age is the age of the oldest COLD item.
 */
void items_stats(struct stat_sink *sink)
{
    struct thread_stats *ts = malloc(sizeof(*ts));     /* large */
    if (ts != NULL)
        stats_aggregate(ts, NULL);
    bool seg = items_seg_lists();
    for (unsigned int c = 1; c <= slabs_nclasses(); c++) {
        struct item_seg_stats q;
        items_seg_class_stats(c, &q);
        uint64_t n = q.number[LRU_SEG_HOT] + q.number[LRU_SEG_WARM] +
                     q.number[LRU_SEG_COLD] + q.number[LRU_SEG_TEMP];
        struct lru_stats *s = &items_cls_stats[c];
        if (n == 0 && STATS_GET(s, evicted) == 0 &&
            STATS_GET(s, outofmemory) == 0)
            continue;
        class_line(sink, c, "number", n);
        class_line(sink, c, "number_hot", q.number[LRU_SEG_HOT]);
        class_line(sink, c, "number_warm", q.number[LRU_SEG_WARM]);
        class_line(sink, c, "number_cold", q.number[LRU_SEG_COLD]);
        if (items_temp_mode())
            class_line(sink, c, "number_temp", q.number[LRU_SEG_TEMP]);
        class_line(sink, c, "age_hot", q.age[LRU_SEG_HOT]);
        class_line(sink, c, "age_warm", q.age[LRU_SEG_WARM]);
        class_line(sink, c, "age", q.age[LRU_SEG_COLD]);
        class_line(sink, c, "mem_requested", q.bytes);
#define EMIT_LRU_STAT(name) class_line(sink, c, #name, STATS_GET(s, name));
        LRU_STATS_FIELDS(EMIT_LRU_STAT)
#undef EMIT_LRU_STAT
        class_line(sink, c, "moves_to_cold", q.moves_to_cold);
        class_line(sink, c, "moves_to_warm", q.moves_to_warm);
        class_line(sink, c, "hits_to_hot", q.hits[LRU_SEG_HOT]);
        class_line(sink, c, "hits_to_warm", q.hits[LRU_SEG_WARM]);
        class_line(sink, c, "hits_to_cold", seg ? q.hits[LRU_SEG_COLD]
                                                : ts ? ts->slab[c].get_hits : 0);
        class_line(sink, c, "hits_to_temp", q.hits[LRU_SEG_TEMP]);
    }
    free(ts);
}

void items_stats_sizes(struct stat_sink *sink)
{
    stat_printf(sink, "sizes_status", "disabled");
}

void items_stats_reset(void)
{
    for (int c = 0; c < MAX_SLAB_CLASSES; c++) {
#define RESET_LRU_STAT(name) \
        __atomic_store_n(&items_cls_stats[c].name, 0, __ATOMIC_RELAXED);
        LRU_STATS_FIELDS(RESET_LRU_STAT)
#undef RESET_LRU_STAT
    }
    items_seg_stats_reset();
}

/* lru_crawler_running: 1 inside a pass, and from `lru_crawler crawl` on
 * until the pass it asked for is done, as memcached shows it. */
static uint64_t crawl_running_stat(void)
{
    return __atomic_load_n(&items_crawl_running, __ATOMIC_RELAXED) ||
           __atomic_load_n(&items_crawl_rush, __ATOMIC_RELAXED);
}

void items_init(void)
{
    items_core_init();
    slabs_set_chunk_evictor(item_evict_chunk);
    stats_register_section("items", items_stats);
    stats_provide("lru_crawler_running", crawl_running_stat);
    stats_register_section("sizes", items_stats_sizes);
    stats_register_reset(items_stats_reset);
}

/*
 * items.c - item lifecycle: alloc, link/unlink/replace, refcounts, expiry,
 * CAS, the per-(class, partition) LRUs, eviction and the expiry crawler.
 *
 * Owns: the item lock stripes, the LRU lists, the CAS counter, the flush
 * marks (oldest_live / oldest_cas) and the `stats items` counters.
 *
 * Design.
 *  - Every item is in at most one LRU: lrus[slabs_clsid][partition], a
 *    doubly linked list (head = most recent) with its own lock.
 *  - References: item_alloc() hands out 1; linking adds the index's; each
 *    lookup adds one.  refcount is an atomic; memory returns to slabs.c
 *    when it reaches 0, which can only happen once the item is unlinked.
 *  - Expiry is lazy (a dead item found by a lookup is unlinked) plus a
 *    bounded crawler (items_crawl_step) that walks each LRU from the tail
 *    with a placeholder item flagged ITEM_CRAWLER as its cursor; the
 *    placeholder is static and never in the index, so it cannot dangle.
 *    LRU walkers recognise it by address, not by it_flags (which belong
 *    to the item lock they do not hold).
 *  - Allocation failure falls back to the LRU tails of the class (own
 *    partition first, then neighbours): dead items are reclaimed, live
 *    unpinned ones evicted when evict_to_free is set (not with -M).  The
 *    victim's chunk is reused directly, so no other thread can take it.
 *  - Lazy LRU (lazy_lru.h): a read moves an item to its LRU head only
 *    when its temperature class rises, and a worker never takes an LRU
 *    lock for it: it queues the item on its bump ring and the lane's LRU
 *    thread relinks it (lru_apply).  At the cold end, an item read since
 *    it was linked gets a second chance (tail_spare_locked) instead of
 *    being evicted or demoted.
 *
 * Locks.  Order: item lock (stripe hv & mask) -> LRU lock -> slab
 * partition lock.  Code holding an LRU lock takes item locks only with
 * trylock.  do_* functions run with item_lock(hv) held; *_locked ones with
 * the named LRU lock held.  Item fields: key, nkey, nbytes, flags,
 * slabs_clsid are fixed from alloc to free; exptime, cas, it_flags under
 * the item lock; next/prev under the LRU lock; time under the item lock
 * and, once linked, also the LRU lock (stats read it with only the LRU
 * lock); refcount and access are atomic.
 *
 * Threads: all workers, the maintainer (crawler), stats.
 */
#include "config.h"

#include <assert.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <ctype.h>
#include <string.h>
#include <unistd.h>

#include "assoc.h"
#include "items.h"
#include "lazy_lru.h"
#include "settings.h"
#include "slabs.h"
#include "stats.h"
#include "watch.h"
#include "util.h"

/* Items examined from each LRU tail per eviction attempt. */
#define LRU_SEARCH_DEPTH 5
/* Items a tail walk may spare (second chance) before it takes one. */
#define LRU_SPARE_MAX 64
/* Rounds of (slabs_alloc, tail pull) before item_alloc gives up. */
#define ALLOC_TRIES 4

/* Per-class counters of `stats items`; relaxed atomics. */
#define LRU_STATS_FIELDS(X) \
    X(evicted)               \
    X(evicted_nonzero)       \
    X(evicted_time)          \
    X(outofmemory)           \
    X(tailrepairs)           \
    X(reclaimed)             \
    X(expired_unfetched)     \
    X(evicted_unfetched)     \
    X(evicted_active)        \
    X(crawler_reclaimed)     \
    X(crawler_items_checked) \
    X(lrutail_reflocked)     \
    X(moves_within_lru)      \
    X(direct_reclaims)

struct lru_stats {
    LRU_STATS_FIELDS(STATS_DECLARE_FIELD)
};

struct lru {
    pthread_mutex_t lock;
    item *head;             /* lock */
    item *tail;             /* lock */
    uint64_t count;         /* lock; real items only */
    uint64_t bytes;         /* lock; their ITEM_ntotal */
} __attribute__((aligned(64)));

/* lrus[TIER_DRAM][slab class][partition] hold DRAM items; the lower tiers'
 * sets hold their meta tuples by the class of their lower-tier slot. */
static struct lru lrus[TIER_COUNT][MAX_SLAB_CLASSES][MAX_PARTITIONS];
static const struct item_tier_ops *tier_ops;   /* set before threads start */
static bool log_all;                /* tier_ops->logged: -o dram_log */
static struct lru_stats cls_stats[MAX_SLAB_CLASSES];
static bool locks_ready;
static int npart = 1;               /* set at init */

static bool lazy_lru = true;        /* set before threads start */
static uint64_t cas_id;             /* atomic */
static rel_time_t oldest_live;      /* atomic; 0 = no flush */
static uint64_t oldest_cas;         /* atomic; 0 = none */

/* Crawler cursor: crawl_lock protects the three scalars; `crawler`'s
 * links are protected by the lock of the LRU it sits in. */
static pthread_mutex_t crawl_lock = PTHREAD_MUTEX_INITIALIZER;
static item crawler;
static unsigned int crawl_tier;        /* TIER_DRAM, then the lower tiers */
static unsigned int crawl_cls = 1;
static int crawl_part;
static bool crawler_in_lru;
static uint64_t crawl_running;          /* 1 inside a pass; crawl_lock */

#define CLS_INCR(cls, field) STATS_INCR(&cls_stats[(cls)], field)

/* ---- CAS. ---------------------------------------------------------- */

static uint64_t cas_limit = UINT64_MAX;    /* atomic */
static void (*cas_reserve)(uint64_t cas);   /* set before threads start */

uint64_t item_next_cas(void)
{
    if (!settings.use_cas)
        return 0;
    uint64_t v = __atomic_add_fetch(&cas_id, 1, __ATOMIC_RELAXED);
    if (__builtin_expect(v >= __atomic_load_n(&cas_limit, __ATOMIC_RELAXED), 0) &&
        cas_reserve != NULL)
        cas_reserve(v);
    return v;
}

void items_set_cas_reserve(void (*fn)(uint64_t cas))
{
    cas_reserve = fn;
}

void item_cas_set_limit(uint64_t limit)
{
    __atomic_store_n(&cas_limit, limit, __ATOMIC_RELAXED);
}

/* The version of `it` is going away (replaced, deleted, touched shorter):
 * if it has or had a copy in a lower tier, the tier policy records that
 * durably before the client hears.  Item lock held. */
static inline void lower_invalidate(const item *it)
{
    /* With a log of DRAM versions, every version has a copy there. */
    if (((it->it_flags & (ITEM_META | ITEM_WAS_LOWER)) || log_all) &&
        tier_ops != NULL && tier_ops->invalidate != NULL)
        tier_ops->invalidate(ITEM_key(it), it->nkey);
}

/* A linked DRAM item's version (value, or exptime) is about to be
 * acknowledged: with -o dram_log the tier policy logs it first.  A
 * stale-marked version is never logged (its record would come back fresh
 * after a crash; see the meta delete with I): a graceful restart links
 * such items with the mark, and `mg ... E` gives one a new CAS.  Item
 * lock held. */
static inline void log_version(item *it)
{
    if (it->it_flags & ITEM_STALE) {
        it->it_flags &= (uint16_t)~ITEM_LOG_ORDERED;
        return;
    }
    if (log_all && it->tier == TIER_DRAM && !(it->it_flags & ITEM_META) &&
        (it->it_flags & ITEM_LINKED)) {
        if (tier_ops->logged(it))
            it->it_flags |= ITEM_LOG_ORDERED;
        else
            it->it_flags &= (uint16_t)~ITEM_LOG_ORDERED;
    }
}

/* Whether old, a version that only DRAM and the log ever held, needs no
 * invalidation when new_it replaces it: every record of old lies below
 * the first record of new_it, which is logged at its link, so the log
 * holds a record of a later version for as long as it holds one of old
 * (the tail passes old's records first), and the replay, in position
 * order, lets the later one win (or, expired, take old away).  Item lock
 * held. */
static inline bool superseded_in_log(const item *old, const item *new_it)
{
    return log_all && (old->it_flags & ITEM_LOG_ORDERED) &&
           !(old->it_flags & (ITEM_META | ITEM_WAS_LOWER)) &&
           new_it->tier == TIER_DRAM && !(new_it->it_flags & ITEM_META) &&
           tier_ops->log_ordered != NULL && tier_ops->log_ordered(new_it);
}

/* A touch: a shorter life than the lower-tier copy says is recorded too,
 * as a shorter life for that copy where the tier policy can, or else as
 * its invalidation. */
static inline void set_exptime(item *it, rel_time_t exptime)
{
    if (exptime != 0 && (it->exptime == 0 || exptime < it->exptime)) {
        if ((it->it_flags & (ITEM_META | ITEM_WAS_LOWER)) && tier_ops != NULL &&
            tier_ops->shorten != NULL) {
            tier_ops->shorten(ITEM_key(it), it->nkey, exptime);
            it->it_flags |= ITEM_CAPPED;
        } else {
            lower_invalidate(it);
        }
    }
    bool changed = it->exptime != exptime;
    it->exptime = exptime;
    if (changed)
        log_version(it);
}

uint64_t item_last_cas(void)
{
    return __atomic_load_n(&cas_id, __ATOMIC_RELAXED);
}

void item_cas_floor(uint64_t cas)
{
    (void)util_atomic_max(&cas_id, cas);
}

/* ---- Writes while a restart recovers (items.h). -------------------- */

/* The keys written while a restart recovers, as 64-bit fingerprints (the
 * item hash and a CRC32C of the key): one small open-addressing set per
 * item lock stripe, under that stripe's lock.  Exact but for a 64-bit
 * collision, so a recovered copy is never skipped for another key's write. */
static struct util_u64map rec_sets[ITEM_LOCK_COUNT];
static bool rec_active;             /* atomic */
static __thread bool rec_self;      /* this thread is the recovery: its own
                                       links (staged stores) mark nothing */
static bool rec_flushed;            /* atomic */
static bool rec_lost;               /* atomic: a set could not grow */

static uint64_t rec_fp(const char *key, size_t nkey, uint32_t hv)
{
    uint64_t fp = ((uint64_t)hv << 32) | util_crc32c(0x5bd1e995u, key, nkey);
    return fp != 0 ? fp : 1;
}

/* Frees every set, each under its stripe's lock (a writer that saw the
 * recovery active and holds the lock finishes its insert first). */
static void rec_sets_free(void)
{
    for (uint32_t s = 0; s < ITEM_LOCK_COUNT; s++) {
        item_lock(s);
        util_u64map_free(&rec_sets[s]);
        item_unlock(s);
    }
}

void items_recovery_begin(void)
{
    rec_sets_free();
    __atomic_store_n(&rec_flushed, false, __ATOMIC_RELAXED);
    __atomic_store_n(&rec_lost, false, __ATOMIC_RELAXED);
    __atomic_store_n(&rec_active, true, __ATOMIC_RELEASE);
}

void items_recovery_self(void)
{
    rec_self = true;
}

void items_recovery_end(void)
{
    __atomic_store_n(&rec_active, false, __ATOMIC_RELEASE);
    rec_sets_free();
}

/* A write of the key: a new version linked, or a delete.  Item lock held. */
static inline void rec_mark(const char *key, size_t nkey, uint32_t hv)
{
    if (__builtin_expect(__atomic_load_n(&rec_active, __ATOMIC_RELAXED), 0) &&
        !rec_self &&
        util_u64map_slot(&rec_sets[hv & ITEM_LOCK_MASK], rec_fp(key, nkey, hv),
                         ITEM_LOCK_POWER) == NULL)
        __atomic_store_n(&rec_lost, true, __ATOMIC_RELAXED);  /* skip every key */
}

/* A write or delete of a key the recovery has not brought back yet (none
 * in the index, not marked yet).  The recovery will skip its saved or
 * scanned copies (rec_mark), but they stay on the media: an invalidation
 * recorded now, before any new version of the key is written, keeps the
 * next crash's scan from bringing one back.  Item lock held. */
static inline void rec_forget_unrecovered(const char *key, size_t nkey, uint32_t hv)
{
    if (__builtin_expect(__atomic_load_n(&rec_active, __ATOMIC_RELAXED), 0) &&
        !rec_self && tier_ops != NULL && tier_ops->invalidate != NULL &&
        util_u64map_find(&rec_sets[hv & ITEM_LOCK_MASK], rec_fp(key, nkey, hv),
                         ITEM_LOCK_POWER) == NULL &&
        assoc_find(key, nkey, hv) == NULL)
        tier_ops->invalidate(key, nkey);
}

bool do_item_recovery_written(const char *key, size_t nkey, uint32_t hv)
{
    if (__atomic_load_n(&rec_flushed, __ATOMIC_RELAXED) ||
        __atomic_load_n(&rec_lost, __ATOMIC_RELAXED))
        return true;
    return util_u64map_find(&rec_sets[hv & ITEM_LOCK_MASK], rec_fp(key, nkey, hv),
                            ITEM_LOCK_POWER) != NULL;
}

static inline void refcount_incr(item *it)
{
    __atomic_add_fetch(&it->refcount, 1, __ATOMIC_RELAXED);
}

static inline unsigned int refcount_load(const item *it)
{
    return __atomic_load_n(&it->refcount, __ATOMIC_ACQUIRE);
}

static inline int part_index(int partition)
{
    return partition >= 0 ? partition % npart : 0;
}

static bool crawl_rush;             /* atomic: lru_crawler crawl asked */

/* lru_crawler_running: 1 inside a pass, and from `lru_crawler crawl` on
 * until the pass it asked for is done, as memcached shows it. */
static uint64_t crawl_running_stat(void)
{
    return __atomic_load_n(&crawl_running, __ATOMIC_RELAXED) ||
           __atomic_load_n(&crawl_rush, __ATOMIC_RELAXED);
}

/* -o no_modern (memcached's one-queue LRU), as memcached runs it: a store
 * first reuses a dead item at its class's LRU tail, and an item read since
 * it was linked gets no second chance at the tail (memcached moves it only
 * on a read at least a minute after its last move). */
static bool one_queue_lru;

void items_init(void)
{
    one_queue_lru = settings_ignored_arg("no_modern") != NULL;
    if (!locks_ready) {
        item_locks_init();
        for (int t = 0; t < TIER_COUNT; t++)
            for (int c = 0; c < MAX_SLAB_CLASSES; c++)
                for (int p = 0; p < MAX_PARTITIONS; p++)
                    pthread_mutex_init(&lrus[t][c][p].lock, NULL);
        locks_ready = true;
    }
    for (int t = 0; t < TIER_COUNT; t++) {
        for (int c = 0; c < MAX_SLAB_CLASSES; c++) {
            for (int p = 0; p < MAX_PARTITIONS; p++) {
                lrus[t][c][p].head = lrus[t][c][p].tail = NULL;
                lrus[t][c][p].count = 0;
            }
        }
    }
    tier_ops = NULL;
    memset(cls_stats, 0, sizeof(cls_stats));
    cas_id = 0;
    oldest_live = 0;
    oldest_cas = 0;
    memset(&crawler, 0, sizeof(crawler));
    crawler.it_flags = ITEM_CRAWLER;
    crawl_cls = 1;
    crawl_part = 0;
    crawler_in_lru = false;
    lazy_lru = true;

    llru_init();
    slabs_init();
    slabs_set_chunk_evictor(item_evict_chunk);
    assoc_init(settings.hashpower_init);
    npart = slabs_npartitions();
    stats_register_section("items", items_stats);
    stats_provide("lru_crawler_running", crawl_running_stat);
    stats_register_section("sizes", items_stats_sizes);
    stats_register_reset(items_stats_reset);
}

/* ---- LRU lists (caller holds l->lock). ----------------------------- */

/* The LRU holding `it`; NULL for an SSD meta tuple, which is on none: the
 * SSD tier ages by page (oldest page first), not by item. */
static inline struct lru *lru_of(const item *it)
{
    if (it->tier == TIER_SSD)
        return NULL;
    if (it->tier != TIER_DRAM)
        return &lrus[it->tier][it->lru_cls][it->partition];
    return &lrus[TIER_DRAM][it->slabs_clsid][it->partition];
}

void items_set_tier_ops(const struct item_tier_ops *ops)
{
    tier_ops = ops;
    log_all = ops != NULL && ops->logged != NULL;
}

void items_set_lazy_lru(bool on)
{
    lazy_lru = on;
}

bool items_tiered(void)
{
    return tier_ops != NULL;
}

static void lru_link_locked(struct lru *l, item *it)
{
    it->prev = NULL;
    it->next = l->head;
    if (l->head != NULL)
        l->head->prev = it;
    l->head = it;
    if (l->tail == NULL)
        l->tail = it;
    if (it != &crawler) {
        l->count++;
        l->bytes += ITEM_ntotal(it);
    }
}

static void lru_unlink_locked(struct lru *l, item *it)
{
    if (it->prev != NULL)
        it->prev->next = it->next;
    else
        l->head = it->next;
    if (it->next != NULL)
        it->next->prev = it->prev;
    else
        l->tail = it->prev;
    it->next = it->prev = NULL;
    if (it != &crawler) {
        l->count--;
        l->bytes -= ITEM_ntotal(it);
    }
}

/* Puts `it` right before `pos` (toward the head). */
static void lru_insert_before_locked(struct lru *l, item *pos, item *it)
{
    it->next = pos;
    it->prev = pos->prev;
    if (pos->prev != NULL)
        pos->prev->next = it;
    else
        l->head = it;
    pos->prev = it;
    if (it != &crawler) {
        l->count++;
        l->bytes += ITEM_ntotal(it);
    }
}

/* ---- Freeing and references. --------------------------------------- */

static void item_free(item *it)
{
    assert((it->it_flags & ITEM_LINKED) == 0);
    assert(refcount_load(it) == 0);
    if (it->it_flags & ITEM_TRANSIENT) {
        free(it);
        return;
    }
    if ((it->it_flags & ITEM_META) && tier_ops != NULL)
        tier_ops->release(it);
    slabs_free(it, it->slabs_clsid, it->partition);
}

void item_release(item *it)
{
    if (__atomic_sub_fetch(&it->refcount, 1, __ATOMIC_ACQ_REL) == 0)
        item_free(it);
}

/* ---- Expiry and flush. --------------------------------------------- */

static bool is_flushed(const item *it, rel_time_t now)
{
    rel_time_t ol = __atomic_load_n(&oldest_live, __ATOMIC_ACQUIRE);
    if (ol == 0 || ol > now)
        return false;
    if (item_time(it) <= ol)
        return true;
    uint64_t oc = __atomic_load_n(&oldest_cas, __ATOMIC_RELAXED);
    return oc != 0 && it->cas != 0 && it->cas < oc;
}

bool item_is_dead(const item *it, enum item_miss *why)
{
    rel_time_t now = mc_now();
    enum item_miss w = MISS_NONE;
    if (it->exptime != 0 && it->exptime <= now)
        w = MISS_EXPIRED;
    else if (is_flushed(it, now))
        w = MISS_FLUSHED;
    if (why != NULL)
        *why = w;
    return w != MISS_NONE;
}

void item_flush(rel_time_t when)
{
    rel_time_t now = mc_now();
    rel_time_t mark = when != 0 ? when : now;

    if (settings.use_cas) {
        /* Items of the flush's own second die by CAS, not by time, so
         * that a set right after an immediate flush survives. */
        mark = mark > 1 ? mark - 1 : 1;
        if (mark <= now)
            __atomic_store_n(&oldest_cas, item_next_cas(), __ATOMIC_RELAXED);
    }
    __atomic_store_n(&oldest_live, mark, __ATOMIC_RELEASE);
    if (tier_ops != NULL && tier_ops->flush != NULL)
        tier_ops->flush();
    if (__atomic_load_n(&rec_active, __ATOMIC_RELAXED))
        __atomic_store_n(&rec_flushed, true, __ATOMIC_RELAXED);
}

/* ---- Link / unlink. ------------------------------------------------- */

static void stats_unlinked(const item *it)
{
    GSTATS_DECR(curr_items);
    STATS_SUB(&gstats, bytes, ITEM_ntotal(it));
}

void do_item_link(item *it, uint32_t hv, bool keep_cas)
{
    assert((it->it_flags & (ITEM_LINKED | ITEM_SLABBED)) == 0);
    it->it_flags |= ITEM_LINKED;
    if (!keep_cas) {
        rec_mark(ITEM_key(it), it->nkey, hv);
        if (tier_ops != NULL && tier_ops->key_stored != NULL)
            tier_ops->key_stored(hv);
        /* A new version; a tier move (keep_cas) keeps time and CAS.  A
         * staged store's meta tuple got its CAS before its tuple was
         * written (store_ready). */
        if (!item_compact(it))
            it->time = mc_now();
        if (!(it->it_flags & ITEM_META) || it->cas == 0)
            it->cas = item_next_cas();
    }
    assoc_insert(it, hv);

    struct lru *l = lru_of(it);
    if (l != NULL) {
        pthread_mutex_lock(&l->lock);
        lru_link_locked(l, it);
        pthread_mutex_unlock(&l->lock);
    }
    refcount_incr(it);

    GSTATS_INCR(curr_items);
    GSTATS_INCR(total_items);
    GSTATS_ADD(bytes, ITEM_ntotal(it));
    log_version(it);
}

/* Removes a linked item from index and LRU; the index's reference is
 * left for the caller to drop or reuse.  Caller holds the item lock and
 * l->lock. */
static void unlink_locked(struct lru *l, item *it, uint32_t hv)
{
    it->it_flags &= ~ITEM_LINKED;
    assoc_delete(ITEM_key(it), it->nkey, hv);
    if (l != NULL)
        lru_unlink_locked(l, it);
    stats_unlinked(it);
}

void do_item_unlink(item *it, uint32_t hv)
{
    if ((it->it_flags & ITEM_LINKED) == 0)
        return;
    /* Its version ends here (a move hands the mark on first): the shorter
     * life recorded for its copies gives way to their invalidation. */
    if (it->it_flags & ITEM_CAPPED) {
        it->it_flags &= (uint16_t)~ITEM_CAPPED;
        if (tier_ops != NULL && tier_ops->invalidate != NULL)
            tier_ops->invalidate(ITEM_key(it), it->nkey);
    }
    struct lru *l = lru_of(it);
    if (l != NULL)
        pthread_mutex_lock(&l->lock);
    unlink_locked(l, it, hv);
    if (l != NULL)
        pthread_mutex_unlock(&l->lock);
    item_release(it);
}

/* Replaces old by new_it; invalidated: old's invalidation was recorded
 * already (store_ready_for). */
static void replace_version(item *old, item *new_it, uint32_t hv, bool invalidated)
{
    if (!invalidated && !superseded_in_log(old, new_it))
        lower_invalidate(old);
    do_item_unlink(old, hv);
    do_item_link(new_it, hv, false);
}

void do_item_replace(item *old, item *new_it, uint32_t hv)
{
    replace_version(old, new_it, hv, false);
}

static const char *tier_word(unsigned int tier)
{
    return tier == TIER_NVM ? "nvm" : tier == TIER_SSD ? "ssd" : "dram";
}

void do_item_move(item *old, item *new_it, uint32_t hv)
{
    if (watch_on(WATCH_TIERS))
        watch_tier_move(ITEM_key(old), old->nkey, tier_word(old->tier),
                        tier_word(new_it->tier),
                        slabs_clsid(item_make_size(old->nkey, old->nbytes)),
                        old->nbytes >= 2 ? old->nbytes - 2 : 0);
    /* The same version: its shorter life goes with it. */
    new_it->it_flags |= old->it_flags & ITEM_CAPPED;
    old->it_flags &= (uint16_t)~ITEM_CAPPED;
    do_item_unlink(old, hv);
    do_item_link(new_it, hv, true);
}

/* ---- Eviction and allocation. --------------------------------------- */

/* Counts an eviction of a live item. */
static void stats_evicted(const item *it, unsigned int clsid)
{
    if (watch_on(WATCH_EVICTIONS))
        watch_eviction(ITEM_key(it), it->nkey, (it->it_flags & ITEM_FETCHED) != 0,
                       it->exptime != 0 ? (int64_t)it->exptime - mc_now() : -1,
                       (int64_t)mc_now() - item_time(it), clsid,
                       it->nbytes >= 2 ? it->nbytes - 2 : 0);
    GSTATS_INCR(evictions);
    CLS_INCR(clsid, evicted);
    __atomic_store_n(&cls_stats[clsid].evicted_time,
                     (uint64_t)(mc_now() - item_time(it)), __ATOMIC_RELAXED);
    if (it->exptime != 0)
        CLS_INCR(clsid, evicted_nonzero);
    if ((it->it_flags & ITEM_FETCHED) == 0) {
        GSTATS_INCR(evicted_unfetched);
        CLS_INCR(clsid, evicted_unfetched);
    }
    if (it->it_flags & ITEM_ACTIVE) {
        GSTATS_INCR(evicted_active);
        CLS_INCR(clsid, evicted_active);
    }
}

void do_item_evict(item *it, uint32_t hv)
{
    if ((it->it_flags & ITEM_LINKED) == 0)
        return;
    if (!item_is_dead(it, NULL))
        stats_evicted(it, it->slabs_clsid);
    do_item_unlink(it, hv);
}

/* Lazy LRU's second chance (llru_second_chance) for the cold-end item
 * `it`: true if it was moved to the head instead of being taken.  Caller
 * holds l->lock. */
static bool tail_spare_locked(struct lru *l, item *it)
{
    if (!lazy_lru || one_queue_lru || !llru_second_chance(it))
        return false;
    lru_unlink_locked(l, it);
    lru_link_locked(l, it);
    GSTATS_INCR(lru_second_chances);
    return true;
}

/*
 * Tries to take the tail item `it` of l for reuse: reclaims it if dead,
 * else with may_spare gives it Lazy LRU's second chance (*spared; it moves
 * to the head), else evicts it if may_evict.  A dead item is never spared:
 * sparing it would put live items between the tail and memory that is
 * free for the taking.  Skips it if its stripe is busy or someone else
 * holds a reference.  Returns it (refcount 0, unlinked, now owned by the
 * caller) or NULL.  Caller holds l->lock.
 */
static item *tail_take_locked(struct lru *l, item *it, bool may_evict,
                              bool may_spare, bool *spared)
{
    unsigned int clsid = it->slabs_clsid;
    uint32_t hv = item_hash(ITEM_key(it), it->nkey);
    if (!item_trylock(hv))
        return NULL;

    item *got = NULL;
    uint16_t one = 1;
    /* What stays is decided before the claim below: while the refcount is
     * 0 the page mover takes the chunk for free, so an item that stays
     * linked must never pass through 0. */
    bool dead = item_is_dead(it, NULL);
    if (!dead && may_spare && tail_spare_locked(l, it)) {
        *spared = true;
        item_unlock(hv);
        return NULL;
    }
    if (!dead && !may_evict) {
        item_unlock(hv);
        return NULL;
    }
    /* Claim the index's reference by taking refcount 1 -> 0: the page
     * mover's pin (item_evict_chunk) refuses a zero refcount, so nobody
     * reads the chunk while the caller reinitializes it. */
    if (refcount_load(it) > 1 ||
        !__atomic_compare_exchange_n(&it->refcount, &one, 0, false,
                                     __ATOMIC_ACQ_REL, __ATOMIC_RELAXED)) {
        /* Pinned by a reader: move it to the head so that a long-held
         * reference does not block this tail. */
        GSTATS_INCR(lrutail_reflocked);
        CLS_INCR(clsid, lrutail_reflocked);
        lru_unlink_locked(l, it);
        lru_link_locked(l, it);
    } else if (dead) {
        GSTATS_INCR(reclaimed);
        CLS_INCR(clsid, reclaimed);
        if ((it->it_flags & ITEM_FETCHED) == 0) {
            GSTATS_INCR(expired_unfetched);
            CLS_INCR(clsid, expired_unfetched);
        }
        got = it;
    } else {
        stats_evicted(it, clsid);
        got = it;
    }
    if (got != NULL)
        unlink_locked(l, it, hv);
    item_unlock(hv);
    return got;
}

static item *lru_pull_tail(unsigned int tier, unsigned int clsid, int p,
                           bool may_evict)
{
    struct lru *l = &lrus[tier][clsid][p];
    item *got = NULL;
    pthread_mutex_lock(&l->lock);
    item *search = l->tail;
    int spared = 0;
    for (int n = 0; search != NULL && got == NULL && n < LRU_SEARCH_DEPTH;) {
        item *prev = search->prev;
        if (search != &crawler) {       /* the crawler's cursor is skipped */
            bool was_spared = false;
            got = tail_take_locked(l, search, may_evict,
                                   may_evict && spared < LRU_SPARE_MAX, &was_spared);
            if (was_spared)
                spared++;
            else
                n++;
        }
        search = prev;
    }
    pthread_mutex_unlock(&l->lock);
    return got;
}

/* The tail item of clsid's DRAM LRU p, taken for reuse if it is dead
 * (expired or flushed; counted in `reclaimed`), else NULL.  With -o
 * no_modern a store tries this before it takes a free chunk, as memcached
 * does in that mode. */
static item *lru_reclaim_tail(unsigned int clsid, int p)
{
    struct lru *l = &lrus[TIER_DRAM][clsid][p];
    item *got = NULL;
    bool spared = false;
    pthread_mutex_lock(&l->lock);
    item *tail = l->tail;
    if (tail == &crawler)
        tail = tail->prev;
    if (tail != NULL && item_is_dead(tail, NULL))
        got = tail_take_locked(l, tail, false, false, &spared);
    pthread_mutex_unlock(&l->lock);
    return got;
}

/* A chunk of class clsid: (with -o no_modern) a dead tail item's, a free
 * one, else the LRU
 * tail's (a dead item's, or with may_evict a live one's).  With a lower tier, live DRAM items are
 * demoted by the evictors instead of dropped here. */
static item *alloc_chunk(unsigned int clsid, int p, bool may_evict,
                         bool reserved)
{
    item *dead = one_queue_lru ? lru_reclaim_tail(clsid, p) : NULL;
    if (dead != NULL)
        return dead;
    for (int tries = 0; tries < ALLOC_TRIES; tries++) {
        item *it = slabs_alloc_ex(clsid, p, reserved);
        if (it != NULL)
            return it;
        for (int i = 0; i < npart; i++) {
            it = lru_pull_tail(TIER_DRAM, clsid, (p + i) % npart, may_evict);
            if (it != NULL) {
                GSTATS_INCR(direct_reclaims);
                CLS_INCR(clsid, direct_reclaims);
                return it;
            }
        }
    }
    return NULL;
}

/* Fills every field of a new item except refcount. */
static void item_init_fields(item *it, const char *key, size_t nkey,
                             uint32_t flags, rel_time_t exptime, size_t nbytes,
                             unsigned int clsid, int p)
{
    it->next = it->prev = it->h_next = NULL;
    it->time = mc_now();
    it->exptime = exptime;
    it->nbytes = (uint32_t)nbytes;
    it->flags = flags;
    it->it_flags = 0;
    it->slabs_clsid = (uint8_t)clsid;
    it->partition = (uint8_t)p;
    it->tier = TIER_DRAM;
    it->nkey = (uint8_t)nkey;
    it->lru_cls = 0;
    it->cas = 0;
    llru_init_access(it, it->time);
    memcpy(ITEM_key(it), key, nkey);
    ITEM_key(it)[nkey] = '\0';
}

rel_time_t item_time(const item *it)
{
    if (!item_compact(it))
        return it->time;
    /* The access field keeps the low 24 bits of the last access. */
    rel_time_t now = mc_now();
    rel_time_t t = (now & ~(rel_time_t)LLRU_TIME_MASK) | llru_access_time(it);
    return t > now ? t - (LLRU_TIME_MASK + 1) : t;
}

size_t item_meta_seq_bytes;

item *item_alloc_meta(const item *src, enum item_tier tier, unsigned int lru_cls,
                      uint64_t ref, int partition, bool reserved)
{
    bool compact = tier == TIER_SSD;
    size_t size = compact ? item_compact_size(src->nkey)
                          : item_meta_size(src->nkey);
    unsigned int clsid = slabs_clsid(size);
    int p = part_index(partition);
    if (clsid == 0)
        return NULL;
    /* Never drops a live DRAM item to make room for a meta tuple.  A move
     * down a tier may use the slab reserve, so that it can always proceed;
     * a move up (a bigger meta tuple) may not. */
    item *it = alloc_chunk(clsid, p, false, reserved);
    if (it == NULL)
        return NULL;
    uint16_t keep = src->it_flags & (ITEM_FETCHED | ITEM_ACTIVE |
                                     ITEM_TOKEN_SENT | ITEM_STALE);
    if (compact) {
        /* Only the core, the reference and the key exist. */
        it->h_next = NULL;
        it->exptime = src->exptime;
        it->nbytes = src->nbytes;
        it->flags = src->flags;
        it->slabs_clsid = (uint8_t)clsid;
        it->partition = (uint8_t)p;
        it->nkey = src->nkey;
        it->it_flags = ITEM_META | keep;
        it->tier = TIER_SSD;        /* before the key: it picks the layout */
        memcpy(ITEM_key(it), ITEM_key(src), src->nkey);
    } else {
        item_init_fields(it, ITEM_key(src), src->nkey, src->flags,
                         src->exptime, src->nbytes, clsid, p);
        it->time = item_time(src);
        it->it_flags = ITEM_META | keep;
        it->lru_cls = (uint8_t)lru_cls;
    }
    it->cas = src->cas;
    it->access = __atomic_load_n(&src->access, __ATOMIC_RELAXED);
    it->tier = (uint8_t)tier;
    item_set_meta_ref(it, ref);
    /* A copy of a meta tuple keeps its tuple, so its sequence too; a new
     * tuple's writer sets it. */
    item_set_meta_seq(it, (src->it_flags & ITEM_META) ? item_meta_seq(src) : 0);
    __atomic_store_n(&it->refcount, 1, __ATOMIC_RELEASE);
    return it;
}

bool item_size_ok(size_t nkey, size_t nbytes)
{
    /* Bounded first, so that the sum below cannot wrap. */
    if (nkey > KEY_MAX_LENGTH || nbytes > (size_t)settings.item_size_max)
        return false;
    size_t ntotal = item_make_size(nkey, nbytes);
    return ntotal <= (size_t)settings.item_size_max &&
           slabs_clsid(ntotal) != 0;
}

item *item_alloc(const char *key, size_t nkey, uint32_t flags,
                 rel_time_t exptime, size_t nbytes, int partition)
{
    if (!item_size_ok(nkey, nbytes) || nbytes > UINT32_MAX)
        return NULL;
    unsigned int clsid = slabs_clsid(item_make_size(nkey, nbytes));
    int p = part_index(partition);

    bool skip = tier_ops != NULL && tier_ops->skip_dram != NULL &&
                tier_ops->skip_dram();
    item *it = skip ? NULL
                    : alloc_chunk(clsid, p,
                                  settings.evict_to_free && tier_ops == NULL,
                                  false);
    if (it == NULL && tier_ops != NULL) {
        /* DRAM is full (or skipped): wake the evictors, and take the value
         * in a staging item that item_store() puts into a lower tier
         * (TaC 4.1). */
        if (!skip)
            tier_ops->dram_pressure(clsid, p);
        it = malloc(item_make_size(nkey, nbytes));
        if (it != NULL) {
            item_init_fields(it, key, nkey, flags, exptime, nbytes, 0, p);
            it->it_flags = ITEM_TRANSIENT | ITEM_STAGING;
            __atomic_store_n(&it->refcount, 1, __ATOMIC_RELEASE);
            return it;
        }
    }
    if (it == NULL) {
        GSTATS_INCR(outofmemory);
        CLS_INCR(clsid, outofmemory);
        return NULL;
    }
    /* Every field but refcount is written first, and refcount last with
     * release order: the slab page mover pins chunks by refcount and then
     * reads the key (item_evict_chunk). */
    item_init_fields(it, key, nkey, flags, exptime, nbytes, clsid, p);
    __atomic_store_n(&it->refcount, 1, __ATOMIC_RELEASE);
    return it;
}

/* ---- Tier moves (driven by tac/). ------------------------------------ */

item *item_alloc_promote(const item *meta, int partition)
{
    size_t nkey = meta->nkey, nbytes = meta->nbytes;
    if (!item_size_ok(nkey, nbytes))
        return NULL;
    unsigned int clsid = slabs_clsid(item_make_size(nkey, nbytes));
    int p = part_index(partition);
    item *it = alloc_chunk(clsid, p, false, false);
    if (it == NULL) {
        if (tier_ops != NULL)
            tier_ops->dram_pressure(clsid, p);
        return NULL;
    }
    item_init_fields(it, ITEM_key(meta), nkey, meta->flags, meta->exptime,
                     nbytes, clsid, p);
    it->cas = meta->cas;
    it->time = item_time(meta);
    it->access = __atomic_load_n(&meta->access, __ATOMIC_RELAXED);
    it->it_flags = ITEM_WAS_LOWER |
                   (meta->it_flags & (ITEM_FETCHED | ITEM_ACTIVE |
                                      ITEM_TOKEN_SENT | ITEM_STALE));
    __atomic_store_n(&it->refcount, 1, __ATOMIC_RELEASE);
    return it;
}

/* Pins the coldest movable item of l (alive or dead, unreferenced) and
 * returns it with its item lock held; NULL if none among the last
 * LRU_SEARCH_DEPTH.  A live item read since its last lap gets its second
 * chance instead; a dead one never does (tail_take_locked). */
static item *lru_pin_tail(struct lru *l, uint32_t *hvp)
{
    item *got = NULL;
    int seen = 0;
    pthread_mutex_lock(&l->lock);
    int spared = 0;
    for (item *t = l->tail, *prev; t != NULL && seen < LRU_SEARCH_DEPTH; t = prev) {
        prev = t->prev;
        if (t == &crawler)
            continue;
        uint32_t hv = item_hash(ITEM_key(t), t->nkey);
        if (!item_trylock(hv)) {
            seen++;
            continue;
        }
        if (refcount_load(t) != 1 || !(t->it_flags & ITEM_LINKED)) {
            item_unlock(hv);
            seen++;
            continue;
        }
        if (spared < LRU_SPARE_MAX && !item_is_dead(t, NULL) &&
            tail_spare_locked(l, t)) {
            item_unlock(hv);
            spared++;
            continue;
        }
        refcount_incr(t);
        *hvp = hv;
        got = t;
        break;
    }
    pthread_mutex_unlock(&l->lock);
    return got;
}

int items_demote_tail(enum item_tier tier, unsigned int clsid, int p, int max,
                      item_evict_hook_fn demote)
{
    if (tier == TIER_SSD || clsid >= MAX_SLAB_CLASSES || p < 0 || p >= npart)
        return 0;
    struct lru *l = &lrus[tier][clsid][p];
    int moved = 0;
    while (moved < max) {
        /* The LRU lock is let go before the move: relinking takes it. */
        uint32_t hv;
        item *it = lru_pin_tail(l, &hv);
        if (it == NULL)
            break;
        bool ok = true;
        if (item_is_dead(it, NULL))
            do_item_unlink(it, hv);
        else
            ok = demote(it, hv);
        item_unlock(hv);
        item_release(it);
        if (!ok)
            break;
        moved++;
    }
    return moved;
}

bool items_lower_drop_tail(enum item_tier tier, unsigned int cls, int p)
{
    if (tier == TIER_DRAM || cls >= MAX_SLAB_CLASSES)
        return false;
    for (int i = 0; i < npart; i++) {
        item *it = lru_pull_tail(tier, cls, (p + i) % npart, true);
        if (it != NULL) {
            /* Unlinked and ours: the last reference frees the meta tuple
             * and its lower-tier slot. */
            item_free(it);
            return true;
        }
    }
    return false;
}

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
    n->lru_cls = it->lru_cls;
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
    uint32_t hv = item_hash(ITEM_key(it), it->nkey);
    enum chunk_evict_result res = CHUNK_BUSY;
    if (item_trylock(hv)) {
        if ((it->it_flags & ITEM_LINKED) && refcount_load(it) == 2) {
            if (tier_ops != NULL && tier_ops->demote != NULL &&
                tier_ops->demote(it, hv)) {
                /* Moved to a lower tier; `it` is unlinked already. */
                res = CHUNK_RESCUED;
            } else if (tier_ops != NULL && !item_is_dead(it, NULL)) {
                /* A lower tier exists but had no room this time: keep
                 * the item and let the mover retry, or give up the move,
                 * rather than lose it. */
                res = CHUNK_BUSY;
            } else if (tier_ops == NULL && !item_is_dead(it, NULL) &&
                       item_rescue(it, hv)) {
                res = CHUNK_RESCUED;
            } else {
                res = CHUNK_RECLAIMED;
                if (!item_is_dead(it, NULL)) {
                    stats_evicted(it, it->slabs_clsid);
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

/* ---- Lookups. -------------------------------------------------------- */

/* The lane whose LRU thread relinks `it`. */
static inline enum llru_lane lane_of(const item *it)
{
    return it->tier == TIER_DRAM ? LLRU_LANE_DRAM : LLRU_LANE_NVM;
}

/* Moves a linked item to the head of its LRU.  Caller holds the item lock
 * and the LRU lock. */
static void lru_bump_locked(struct lru *l, item *it, rel_time_t now)
{
    if (l->head != it) {
        lru_unlink_locked(l, it);
        lru_link_locked(l, it);
    }
    it->time = now;
}

void do_item_touch_access(item *it)
{
    rel_time_t now = mc_now();
    bool move = llru_access(it, now);
    if (it->it_flags & ITEM_FETCHED)
        it->it_flags |= ITEM_ACTIVE;
    else
        it->it_flags |= ITEM_FETCHED;

    /* Only a rise in temperature class moves an item (lazy_lru.h); an SSD
     * meta tuple is on no LRU. */
    if (!move || !lazy_lru || (it->it_flags & ITEM_LINKED) == 0 ||
        item_compact(it))
        return;
    /* A worker hands the move to its lane's LRU thread; the reference
     * keeps the item from being freed while it is queued.  An item with
     * too many held references is not queued (items.h, held references). */
    if (item_refs_crowded(it))
        return;
    refcount_incr(it);
    if (llru_push(it, lane_of(it)))
        return;
    __atomic_sub_fetch(&it->refcount, 1, __ATOMIC_ACQ_REL);   /* not the last */
    if (!llru_has_ring()) {
        /* A thread without rings (fetchers, tests) moves the item itself
         * when the LRU is free. */
        struct lru *l = lru_of(it);
        if (pthread_mutex_trylock(&l->lock) == 0) {
            lru_bump_locked(l, it, now);
            pthread_mutex_unlock(&l->lock);
        }
    }
}

/* The LRU threads' batch (llru_apply_fn): each item still linked moves to
 * its LRU head; then the queue's references are dropped. */
static void lru_apply(item **v, unsigned int n)
{
    rel_time_t now = mc_now();
    for (unsigned int i = 0; i < n; i++) {
        item *it = v[i];
        uint32_t hv = item_hash(ITEM_key(it), it->nkey);
        item_lock(hv);
        if (it->it_flags & ITEM_LINKED) {
            struct lru *l = lru_of(it);
            pthread_mutex_lock(&l->lock);
            lru_bump_locked(l, it, now);
            pthread_mutex_unlock(&l->lock);
            GSTATS_INCR(lru_bumps);
            if (it->tier == TIER_DRAM)
                CLS_INCR(it->slabs_clsid, moves_within_lru);
        }
        item_unlock(hv);
        item_release(it);
    }
}

void items_lru_threads_start(bool nvm)
{
    llru_threads_start(lru_apply, nvm);
}

void items_lru_threads_stop(void)
{
    llru_threads_stop();
}

item *do_item_get(const char *key, size_t nkey, uint32_t hv,
                  enum item_miss *why, bool do_update)
{
    enum item_miss w = MISS_NONE;
    item *it = assoc_find(key, nkey, hv);
    if (it == NULL) {
        w = MISS_NOT_FOUND;
    } else if (item_is_dead(it, &w)) {
        do_item_unlink(it, hv);
        it = NULL;
    } else {
        refcount_incr(it);
        if (do_update)
            do_item_touch_access(it);
    }
    if (why != NULL)
        *why = w;
    return it;
}

item *item_value_take(item *it)
{
    if (it == NULL || !(it->it_flags & ITEM_META))
        return it;
    /* The reference pins the meta tuple, and with it its lower-tier
     * tuple (freed only when the meta tuple is). */
    item *copy = tier_ops != NULL ? tier_ops->materialize(it) : NULL;
    item_release(it);
    return copy;
}

item *item_get(const char *key, size_t nkey, enum item_miss *why,
               bool do_update)
{
    uint32_t hv = item_hash(key, nkey);
    item_lock(hv);
    item *it = item_value_take(do_item_get(key, nkey, hv, why, do_update));
    item_unlock(hv);
    return it;
}

/* The value of `it` (whose reference this takes over) into *out: HIT, or
 * MISS when the copy found the tuple damaged (it is unlinked then), or
 * NOMEM.  Item lock held. */
static enum item_answer value_of_meta(item *it, item **out);

static inline enum item_answer value_of(item *it, item **out)
{
    if (!(it->it_flags & ITEM_META)) {     /* a DRAM item is its own value */
        *out = it;
        return ITEM_HIT;
    }
    return value_of_meta(it, out);
}

static enum item_answer value_of_meta(item *it, item **out)
{
    refcount_incr(it);
    *out = item_value_take(it);
    bool gone = !(it->it_flags & ITEM_LINKED);
    item_release(it);
    return *out != NULL ? ITEM_HIT : gone ? ITEM_MISS : ITEM_NOMEM;
}

/* mg N on a miss: creates an empty item; called and returns locked.  It
 * allocates with the lock dropped (as memcached does), then relocks and
 * looks again: another client may have created it meanwhile. */
static item *mg_vivify(const struct item_read *rq, uint32_t hv, bool *created)
{
    enum item_miss why;
    item_unlock(hv);
    item *nit = item_alloc(rq->key, rq->nkey, 0, 0, 2, rq->mg->partition);
    item_lock(hv);
    if (nit == NULL)
        return NULL;
    memcpy(ITEM_data(nit), "\r\n", 2);
    item *it = do_item_get(rq->key, rq->nkey, hv, &why, false);
    if (it != NULL) {
        item_release(nit);
        return it;
    }
    /* Stored rather than linked: with DRAM full, nit is a staging item
     * that the store puts into a lower tier. */
    enum store_result res = do_item_store(nit, STORE_ADD, 0, NULL, hv,
                                          rq->mg->partition);
    item_release(nit);
    if (res != STORE_STORED)
        return NULL;
    it = do_item_get(rq->key, rq->nkey, hv, &why, false);
    *created = it != NULL;
    return it;
}

/* Runs a meta get's flags on `it` in request order (item lock held). */
static void mg_apply(struct item_mg *mg, item *it)
{
    rel_time_t now = mc_now();
    bool won = false;
    if (mg->set_cas) {
        it->cas = mg->cas;
        log_version(it);                /* the log's copy holds the CAS too */
    }
    for (unsigned int i = 0; i < mg->nops; i++) {
        int64_t v = 0;
        switch (mg->op[i]) {
        case MG_TOUCH:
            mg->ttl_set = true;
            set_exptime(it, mg->touch_exptime);
            break;
        case MG_VIVIFY:
            if (mg->created) {
                it->exptime = mg->vivify_exptime;
                won = true;
            }
            break;
        case MG_RECACHE:
            if (!(it->it_flags & ITEM_TOKEN_SENT) && !mg->created &&
                it->exptime != 0 && it->exptime < mg->recache_time)
                won = true;
            break;
        case MG_SIZE: v = it->nbytes - 2; break;
        case MG_TTL:
            v = it->exptime == 0 ? -1 : (int64_t)(uint32_t)(it->exptime - now);
            break;
        case MG_CAS: v = (int64_t)it->cas; break;
        case MG_FLAGS: v = it->flags; break;
        case MG_LAST_ACCESS: v = (uint32_t)(now - item_time(it)); break;
        case MG_FETCHED: v = (it->it_flags & ITEM_FETCHED) ? 1 : 0; break;
        }
        mg->val[i] = v;
    }
    mg->nbytes = it->nbytes;
    mg->exptime = it->exptime;
    mg->tier = it->tier;
    if (!mg->tokens)
        return;
    mg->token_sent = (it->it_flags & ITEM_TOKEN_SENT) != 0;
    mg->stale = (it->it_flags & ITEM_STALE) != 0;
    if (mg->stale && !mg->token_sent)
        won = true;
    if (won)
        it->it_flags |= ITEM_TOKEN_SENT;
    mg->won = won;
}

enum item_answer item_read(const struct item_read *rq, item **out,
                           enum item_miss *why, unsigned int *clsid)
{
    uint32_t hv = item_hash(rq->key, rq->nkey);
    enum item_answer a = ITEM_HIT;
    *out = NULL;
    item_lock(hv);
    /* A meta get bumps last, so that its l and h flags see the item as it
     * was before this request. */
    item *it = do_item_get(rq->key, rq->nkey, hv, why, rq->bump && rq->mg == NULL);
    if (it == NULL && rq->mg != NULL && rq->mg->vivify)
        it = mg_vivify(rq, hv, &rq->mg->created);
    *clsid = it != NULL ? it->slabs_clsid : 0;
    if (it == NULL) {
        a = ITEM_MISS;
        if (rq->value && (why == NULL || (*why != MISS_EXPIRED && *why != MISS_FLUSHED)) &&
            tier_ops != NULL && tier_ops->read_missed != NULL)
            tier_ops->read_missed(hv);
    } else {
        if (rq->touch)
            set_exptime(it, rq->exptime);
        if (rq->mg != NULL) {
            mg_apply(rq->mg, it);
            if (rq->bump)
                do_item_touch_access(it);
        }
        if (!rq->value) {
            *out = it;
        } else if (item_value_async(it) && rq->wait != NULL &&
                   tier_ops != NULL && tier_ops->read_async != NULL) {
            const struct item_waiter *w = rq->wait;
            void *arg = w->prepare(w->ctx);
            if (arg != NULL && tier_ops->read_async(w->reader, it, hv,
                                                    w->done, arg)) {
                a = ITEM_PENDING;
                item_release(it);
            } else {
                if (arg != NULL)
                    w->cancel(arg);
                /* A value still in memory can be served all the same. */
                a = value_of(it, out);
            }
        } else {
            a = value_of(it, out);
        }
    }
    item_unlock(hv);
    return a;
}

item *item_get_and_touch(const char *key, size_t nkey, rel_time_t exptime,
                         enum item_miss *why)
{
    uint32_t hv = item_hash(key, nkey);
    item_lock(hv);
    item *it = do_item_get(key, nkey, hv, why, true);
    if (it != NULL)
        set_exptime(it, exptime);
    item_unlock(hv);
    return it;
}

bool item_exists(const char *key, size_t nkey)
{
    uint32_t hv = item_hash(key, nkey);
    item_lock(hv);
    item *it = do_item_get(key, nkey, hv, NULL, false);
    if (it != NULL)
        item_release(it);
    item_unlock(hv);
    return it != NULL;
}

/* ---- Stores. --------------------------------------------------------- */

/*
 * The item to link for `it`: `it` itself with a new reference, or for a
 * staging item (DRAM was full) a meta tuple whose value the tier policy
 * wrote to a lower tier.  NULL when no tier has room.  Caller holds the
 * item lock.
 */
static item *store_ready(item *it, int partition)
{
    if (!(it->it_flags & ITEM_STAGING)) {
        refcount_incr(it);
        return it;
    }
    /* The CAS comes before the tuple is written, so that the copy on the
     * media holds it and a crash brings it back with it; do_item_link keeps
     * a meta tuple's CAS.  A recovery that links a saved item sets it. */
    if (it->cas == 0)
        it->cas = item_next_cas();
    return tier_ops != NULL ? tier_ops->stage(it, partition) : NULL;
}

/* store_ready for a new version of old (NULL: none).  Staging writes the
 * new tuple, with a new seq, here; old's invalidation must be recorded
 * before that, or its seq would cover the new tuple too and a crash would
 * lose it.  *invalidated: recorded (for replace_version). */
static item *store_ready_for(item *it, item *old, int partition, bool *invalidated)
{
    *invalidated = old != NULL && (it->it_flags & ITEM_STAGING);
    if (*invalidated)
        lower_invalidate(old);
    else if (old == NULL && __atomic_load_n(&rec_active, __ATOMIC_RELAXED))
        rec_forget_unrecovered(ITEM_key(it), it->nkey, item_hash(ITEM_key(it), it->nkey));
    return store_ready(it, partition);
}

void item_ref(item *it)
{
    refcount_incr(it);
}

bool item_refs_crowded(const item *it)
{
    return refcount_load(it) >= ITEM_REFS_HELD_MAX;
}

size_t item_copy_size(const item *it)
{
    return item_make_size(it->nkey, it->nbytes);
}

item *item_copy(const item *it)
{
    size_t n = item_copy_size(it);
    item *copy = malloc(n);
    if (copy == NULL)
        return NULL;
    /* The caller's reference keeps key and value in place; a value is
     * never changed in place while readers hold it. */
    memcpy(copy, it, n);
    copy->h_next = NULL;
    copy->next = copy->prev = NULL;
    copy->it_flags = ITEM_TRANSIENT |
                     (it->it_flags & (ITEM_FETCHED | ITEM_ACTIVE));
    copy->slabs_clsid = 0;
    copy->refcount = 1;
    return copy;
}

/* Holds a value-bearing version of `it` (itself, a copy of an NVM value,
 * or prior's value when `it` is the version prior read).  NULL on failure;
 * NULL with *need set when the value must first be read from SSD.  Caller
 * holds a reference to `it`. */
static item *value_peek(item *it, const struct item_got *prior, bool *need)
{
    *need = false;
    if (!(it->it_flags & ITEM_META)) {
        refcount_incr(it);
        return it;
    }
    if (item_value_async(it)) {
        /* prior->src is pinned, so no other item can have its address:
         * the same item is the same version. */
        if (prior != NULL && prior->src == it && prior->value != NULL &&
            prior->value->nbytes == it->nbytes) {
            refcount_incr(prior->value);
            return prior->value;
        }
        /* A worker never reads the SSD itself: the caller parks a read
         * and retries with what it got as prior. */
        *need = true;
        return NULL;
    }
    return tier_ops != NULL ? tier_ops->materialize(it) : NULL;
}

/* Builds old+add (append) or add+old (prepend) as a new item and swaps it
 * in.  *cas_out gets its CAS.  Caller holds the item lock. */
static enum store_result do_item_concat(item *old, item *add, bool append,
                                        uint32_t hv, int partition,
                                        const struct item_got *prior,
                                        uint64_t *cas_out)
{
    if (old->nbytes < 2 || add->nbytes < 2)
        return STORE_NOT_STORED;
    size_t nbytes = (size_t)old->nbytes + add->nbytes - 2;
    if (!item_size_ok(old->nkey, nbytes))
        return STORE_TOO_LARGE;
    bool need;
    item *oldv = value_peek(old, prior, &need);
    if (oldv == NULL)
        return need ? STORE_NEED_VALUE : STORE_NO_MEMORY;
    item *n = item_alloc(ITEM_key(old), old->nkey, old->flags, old->exptime,
                         nbytes, partition);
    if (n == NULL) {
        item_release(oldv);
        return STORE_NO_MEMORY;
    }

    const item *first = append ? oldv : add;
    const item *second = append ? add : oldv;
    memcpy(ITEM_data(n), ITEM_data(first), first->nbytes - 2);
    memcpy(ITEM_data(n) + first->nbytes - 2, ITEM_data(second),
           second->nbytes);
    item_release(oldv);
    bool invalidated;
    item *linked = store_ready_for(n, old, partition, &invalidated);
    item_release(n);
    if (linked == NULL)
        return STORE_NO_MEMORY;
    linked->it_flags |= old->it_flags & (ITEM_FETCHED | ITEM_ACTIVE);
    replace_version(old, linked, hv, invalidated);
    *cas_out = linked->cas;
    item_release(linked);
    return STORE_STORED;
}

static enum store_result do_item_store_prior(item *it, enum store_op op,
                                             uint64_t req_cas,
                                             uint64_t *cas_out, uint32_t hv,
                                             int partition,
                                             const struct item_got *prior)
{
    item *old = do_item_get(ITEM_key(it), it->nkey, hv, NULL, false);
    enum store_result res;
    uint64_t new_cas = 0;
    bool cas_bad = old != NULL && req_cas != 0 && old->cas != req_cas;

    if (op == STORE_SET && req_cas != 0)
        op = STORE_CAS;
    switch (op) {
    case STORE_ADD:
        res = old != NULL ? STORE_NOT_STORED : STORE_STORED;
        break;
    case STORE_CAS:
        res = old == NULL ? STORE_NOT_FOUND
            : old->cas != req_cas ? STORE_EXISTS : STORE_STORED;
        break;
    case STORE_REPLACE:
    case STORE_APPEND:
    case STORE_PREPEND:
        res = old == NULL ? STORE_NOT_STORED
            : cas_bad ? STORE_EXISTS : STORE_STORED;
        break;
    case STORE_SET:
    default:
        res = STORE_STORED;
        break;
    }

    if (res == STORE_STORED) {
        if (op == STORE_APPEND || op == STORE_PREPEND) {
            res = do_item_concat(old, it, op == STORE_APPEND, hv, partition,
                                 prior, &new_cas);
        } else {
            bool invalidated;
            item *linked = store_ready_for(it, old, partition, &invalidated);
            if (linked == NULL) {
                res = STORE_NO_MEMORY;
            } else {
                if (old != NULL)
                    replace_version(old, linked, hv, invalidated);
                else
                    do_item_link(linked, hv, false);
                new_cas = linked->cas;
                item_release(linked);
            }
        }
    }
    if (res == STORE_STORED && cas_out != NULL)
        *cas_out = new_cas;
    if (old != NULL)
        item_release(old);
    return res;
}

enum store_result do_item_store(item *it, enum store_op op, uint64_t req_cas,
                                uint64_t *cas_out, uint32_t hv,
                                int partition)
{
    return do_item_store_prior(it, op, req_cas, cas_out, hv, partition, NULL);
}

static enum store_result store(item *it, enum store_op op, uint64_t req_cas,
                               uint64_t *cas_out, int partition, bool may_wait,
                               const struct item_got *prior)
{
    uint32_t hv = item_hash(ITEM_key(it), it->nkey);
    item_lock(hv);
    enum store_result res = do_item_store_prior(it, op, req_cas, cas_out, hv,
                                                partition, prior);
    item_unlock(hv);
    /* A value DRAM had no room for, that no lower tier could take either:
     * its tail is moving down, defrag is compacting, or the page mover has
     * yet to refill the meta tuples' reserve.  The evictors are woken; a
     * caller that can wait tries again, unless every tier is full for good:
     * back-pressure, not errors (doc/design.md, "Back-pressure: a store
     * waits for room, parked"). */
    if (res == STORE_NO_MEMORY && (it->it_flags & ITEM_STAGING) &&
        tier_ops != NULL && op != STORE_APPEND && op != STORE_PREPEND) {
        tier_ops->dram_pressure(it->slabs_clsid, part_index(partition));
        if (may_wait && tier_ops->room_later != NULL && tier_ops->room_later())
            res = STORE_NEED_ROOM;
    }
    return res;
}

enum store_result item_store(item *it, enum store_op op, uint64_t req_cas,
                             uint64_t *cas_out, int partition)
{
    return store(it, op, req_cas, cas_out, partition, false, NULL);
}

enum store_result item_store_wait(item *it, enum store_op op, uint64_t req_cas,
                                  uint64_t *cas_out, int partition,
                                  const struct item_got *prior)
{
    return store(it, op, req_cas, cas_out, partition, true, prior);
}

enum store_result item_store_meta(item *it, enum store_op op, uint64_t req_cas,
                                  uint64_t *cas_out, int partition,
                                  bool stale_if_older, bool set_cas,
                                  uint64_t cas, const struct item_got *prior)
{
    uint32_t hv = item_hash(ITEM_key(it), it->nkey);
    enum store_result ret;
    item_lock(hv);
    item *old = NULL;
    if (stale_if_older) {
        enum item_miss why;
        old = do_item_get(ITEM_key(it), it->nkey, hv, &why, false);
    }
    if (old != NULL && req_cas < old->cas) {
        it->exptime = old->exptime;
        it->it_flags |= ITEM_STALE | (old->it_flags & ITEM_TOKEN_SENT);
        ret = do_item_store(it, STORE_SET, 0, cas_out, hv, partition);
    } else {
        ret = do_item_store_prior(it, op, req_cas, cas_out, hv, partition,
                                  prior);
    }
    if (ret == STORE_STORED && set_cas) {
        it->cas = cas;
        log_version(it);                /* the log's copy holds the CAS too */
        if (cas_out != NULL)
            *cas_out = cas;
    }
    item_unlock(hv);
    if (old != NULL)
        item_release(old);
    return ret;
}

/* ---- incr / decr, delete. ------------------------------------------ */

/* Parses a stored value as a decimal uint64 the way memcached reads it:
 * leading whitespace and an optional '+', at least one digit, no overflow,
 * and the digits end at the end of the value or at a whitespace character
 * (what follows it is ignored). */
static bool parse_u64(const char *s, size_t len, uint64_t *out)
{
    size_t i = 0;
    uint64_t v = 0;
    while (i < len && isspace((unsigned char)s[i]))
        i++;
    if (i < len && s[i] == '+')
        i++;
    size_t start = i;
    for (; i < len && s[i] >= '0' && s[i] <= '9'; i++) {
        unsigned int d = (unsigned int)(s[i] - '0');
        if (v > (UINT64_MAX - d) / 10)
            return false;
        v = v * 10 + d;
    }
    if (i == start)
        return false;
    if (i != len && !isspace((unsigned char)s[i]))
        return false;
    *out = v;
    return true;
}

/* Computes the new value of `it` into out and swaps in a new item. */
static enum delta_result do_apply_delta(item *it, bool incr, uint64_t delta,
                                        const struct item_got *prior,
                                        char *out, uint64_t *cas_out,
                                        uint32_t hv, int partition)
{
    uint64_t v;
    bool need;
    item *val = value_peek(it, prior, &need);
    if (val == NULL)
        return need ? DELTA_NEED_VALUE : DELTA_NO_MEMORY;
    bool numeric = val->nbytes >= 2 &&
                   parse_u64(ITEM_data(val), val->nbytes - 2, &v);
    item_release(val);
    if (!numeric)
        return DELTA_NON_NUMERIC;
    if (incr)
        v += delta;                 /* wraps mod 2^64 */
    else
        v = delta > v ? 0 : v - delta;
    int len = snprintf(out, 21, "%llu", (unsigned long long)v);

    /* Like memcached: a result that fits the old value is written in
     * place, padded with spaces, when nobody else holds the item (the
     * index and this caller are the only references). */
    if ((size_t)len + 2 <= it->nbytes && refcount_load(it) == 2 &&
        it->tier == TIER_DRAM) {
        /* A new version, though in place: its record goes above the
         * old one's, as for a replacement (superseded_in_log). */
        if (!superseded_in_log(it, it))
            lower_invalidate(it);
        rec_mark(ITEM_key(it), it->nkey, hv);
        memcpy(ITEM_data(it), out, (size_t)len);
        memset(ITEM_data(it) + len, ' ', it->nbytes - 2 - (size_t)len);
        it->cas = item_next_cas();
        if (cas_out != NULL)
            *cas_out = it->cas;
        log_version(it);
        return DELTA_OK;
    }

    item *n = item_alloc(ITEM_key(it), it->nkey, it->flags, it->exptime,
                         (size_t)len + 2, partition);
    if (n == NULL)
        return DELTA_NO_MEMORY;
    memcpy(ITEM_data(n), out, (size_t)len);
    memcpy(ITEM_data(n) + len, "\r\n", 2);
    bool invalidated;
    item *linked = store_ready_for(n, it, partition, &invalidated);
    item_release(n);
    if (linked == NULL)
        return DELTA_NO_MEMORY;
    linked->it_flags |= it->it_flags & (ITEM_FETCHED | ITEM_ACTIVE);
    replace_version(it, linked, hv, invalidated);
    if (cas_out != NULL)
        *cas_out = linked->cas;
    item_release(linked);
    return DELTA_OK;
}

enum delta_result item_add_delta(const char *key, size_t nkey, bool incr,
                                 uint64_t delta, uint64_t req_cas,
                                 char *out, uint64_t *cas_out, int partition,
                                 const struct item_got *prior)
{
    uint32_t hv = item_hash(key, nkey);
    enum delta_result res;
    item_lock(hv);
    item *it = do_item_get(key, nkey, hv, NULL, true);
    if (it == NULL)
        res = DELTA_NOT_FOUND;
    else if (req_cas != 0 && it->cas != req_cas)
        res = DELTA_EXISTS;
    else
        res = do_apply_delta(it, incr, delta, prior, out, cas_out, hv,
                             partition);
    if (it != NULL)
        item_release(it);
    item_unlock(hv);
    return res;
}

enum delete_result item_delete(const char *key, size_t nkey, uint64_t req_cas,
                               unsigned int *clsid)
{
    uint32_t hv = item_hash(key, nkey);
    enum delete_result res = DELETE_OK;
    item_lock(hv);
    rec_forget_unrecovered(key, nkey, hv);
    rec_mark(key, nkey, hv);
    item *it = do_item_get(key, nkey, hv, NULL, false);
    if (clsid != NULL)
        *clsid = it != NULL ? it->slabs_clsid : 0;
    if (it == NULL) {
        res = DELETE_NOT_FOUND;
    } else {
        if (req_cas != 0 && it->cas != req_cas) {
            res = DELETE_EXISTS;
        } else {
            lower_invalidate(it);
            do_item_unlink(it, hv);
        }
        item_release(it);
    }
    item_unlock(hv);
    return res;
}

enum delete_result item_delete_meta(const char *key, size_t nkey,
                                    const struct item_md *md,
                                    unsigned int *clsid)
{
    uint32_t hv = item_hash(key, nkey);
    enum delete_result res = DELETE_OK;
    enum item_miss why;
    item_lock(hv);
    rec_forget_unrecovered(key, nkey, hv);
    rec_mark(key, nkey, hv);
    item *it = do_item_get(key, nkey, hv, &why, false);
    *clsid = it != NULL ? it->slabs_clsid : 0;
    if (it == NULL) {
        res = DELETE_NOT_FOUND;
    } else if (md->has_cas && it->cas != md->req_cas) {
        res = DELETE_EXISTS;
    } else if (md->stale) {
        /* The stale mark lives in DRAM only: a copy on the media (a lower
         * tier's tuple, the DRAM log's records) would come back fresh
         * after a crash.  They are invalidated, and the stale version is
         * not logged: a crash loses the key instead of serving it as
         * fresh.  A graceful restart keeps the mark (RS_KEEP_FLAGS). */
        lower_invalidate(it);
        if (md->new_ttl)
            it->exptime = md->exptime;
        it->it_flags |= ITEM_STALE;
        it->it_flags &= (uint16_t)~(ITEM_TOKEN_SENT | ITEM_LOG_ORDERED);
        it->cas = md->set_cas ? md->cas : item_next_cas();
        res = DELETE_STALE;
    } else {
        lower_invalidate(it);
        do_item_unlink(it, hv);
    }
    item_unlock(hv);
    if (it != NULL)
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
    uint32_t hv = item_hash(ITEM_key(it), it->nkey);
    if (!item_trylock(hv))
        return;
    if (item_is_dead(it, NULL)) {
        if (l->tail == it) {
            GSTATS_INCR(reclaimed);
            CLS_INCR(clsid, reclaimed);
        } else {
            GSTATS_INCR(crawler_reclaimed);
            CLS_INCR(clsid, crawler_reclaimed);
        }
        if ((it->it_flags & ITEM_FETCHED) == 0) {
            GSTATS_INCR(expired_unfetched);
            CLS_INCR(clsid, expired_unfetched);
        }
        unlink_locked(l, it, hv);
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
    if (!crawler_in_lru) {
        if (l->tail == NULL) {
            pthread_mutex_unlock(&l->lock);
            *done = true;
            return 0;
        }
        crawler.next = NULL;
        crawler.prev = l->tail;
        l->tail->next = &crawler;
        l->tail = &crawler;
        crawler_in_lru = true;
    }
    while (checked < budget && crawler.prev != NULL) {
        item *it = crawler.prev;
        lru_unlink_locked(l, &crawler);
        lru_insert_before_locked(l, it, &crawler);
        crawl_check_locked(l, it);
        checked++;
    }
    *done = crawler.prev == NULL;
    if (*done) {
        lru_unlink_locked(l, &crawler);
        crawler_in_lru = false;
    }
    pthread_mutex_unlock(&l->lock);
    return checked;
}

/* SSD meta tuples are on no LRU: the crawler finds the dead ones by
 * walking the index one item lock stripe at a time (sweep_stripe, under
 * crawl_lock), so that an expired or flushed item's SSD bytes are freed
 * as memcached's crawler frees an expired extstore item's.  The items of
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
    if (!item_value_async(it) || !(it->it_flags & ITEM_LINKED))
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
static int sweep_ssd_step(int budget, bool *wrapped)
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
            unsigned int clsid = it->slabs_clsid;
            GSTATS_INCR(crawler_reclaimed);
            CLS_INCR(clsid, crawler_reclaimed);
            if ((it->it_flags & ITEM_FETCHED) == 0) {
                GSTATS_INCR(expired_unfetched);
                CLS_INCR(clsid, expired_unfetched);
            }
            do_item_unlink(it, item_hash(ITEM_key(it), it->nkey));
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

int items_crawl_step(int budget)
{
    int checked = 0;
    pthread_mutex_lock(&crawl_lock);
    /* At most one full cycle: every LRU once, plus the rest of the one
     * the cursor sits in.  Lower-tier sets are crawled only when tiers
     * exist; their classes are those of the lower tier's slots. */
    unsigned int ntiers = tier_ops != NULL ? TIER_COUNT : 1;
    unsigned int ncls[TIER_COUNT] = { slabs_nclasses(), MAX_SLAB_CLASSES - 1,
                                      MAX_SLAB_CLASSES - 1 };
    unsigned int limit = (crawler_in_lru ? 1 : 0);
    for (unsigned int t = 0; t < ntiers; t++)
        limit += ncls[t] * (unsigned int)npart;
    for (unsigned int visited = 0; checked < budget && visited < limit;) {
        if (crawl_tier >= ntiers)
            crawl_tier = 0;
        if (crawl_cls < 1 || crawl_cls > ncls[crawl_tier])
            crawl_cls = 1;
        bool at_start = crawl_tier == 0 && crawl_cls == 1 && crawl_part == 0;
        if (at_start && !crawler_in_lru) {
            GSTATS_INCR(lru_crawler_starts);
            __atomic_store_n(&crawl_running, 1, __ATOMIC_RELAXED);
        }
        bool done = false;
        checked += crawl_lru(&lrus[crawl_tier][crawl_cls][crawl_part],
                             budget - checked, &done);
        if (done) {
            visited++;
            if (++crawl_part >= npart) {
                crawl_part = 0;
                if (++crawl_cls > ncls[crawl_tier]) {
                    crawl_cls = 1;
                    crawl_tier = (crawl_tier + 1) % ntiers;
                    if (crawl_tier == 0)
                        __atomic_store_n(&crawl_running, 0, __ATOMIC_RELAXED);
                }
            }
        }
    }
    /* Fewer than asked: the LRUs' cycle is done; with an SSD tier the
     * sweep of its meta tuples follows, and ends the cycle. */
    bool cycle_done = checked < budget;
    if (cycle_done && settings.ssd_path != NULL) {
        bool wrapped = false;
        checked += sweep_ssd_step(budget - checked, &wrapped);
        cycle_done = wrapped;
    }
    pthread_mutex_unlock(&crawl_lock);
    /* A whole cycle is done, so is a rush. */
    if (cycle_done)
        __atomic_store_n(&crawl_rush, false, __ATOMIC_RELAXED);
    return checked;
}

void items_crawl_soon(void)
{
    __atomic_store_n(&crawl_rush, true, __ATOMIC_RELAXED);
}

bool items_crawl_rushed(void)
{
    return __atomic_load_n(&crawl_rush, __ATOMIC_RELAXED);
}

/* ---- Key dumps (lru_crawler metadump, stats cachedump). ------------- */

struct view_walk {
    void (*fn)(const struct item_view *v, void *arg);
    void *arg;
};

static void view_one(item *it, void *arg)
{
    const struct view_walk *w = arg;
    if (!(it->it_flags & ITEM_LINKED) || item_is_dead(it, NULL))
        return;
    size_t size = item_make_size(it->nkey, it->nbytes);
    struct item_view v = {
        .key = ITEM_key(it),
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
    w->fn(&v, w->arg);
}

void items_view_stripe(unsigned int stripe,
                       void (*fn)(const struct item_view *v, void *arg), void *arg)
{
    struct view_walk w = { fn, arg };
    item_lock(stripe);
    assoc_visit_stripe(stripe, view_one, &w);
    item_unlock(stripe);
}

/* ---- Stats. ---------------------------------------------------------- */

/* Items in class clsid, their bytes and the last access time of its
 * oldest one. */
static uint64_t class_count(unsigned int clsid, rel_time_t *oldest,
                            uint64_t *bytes)
{
    uint64_t n = 0;
    *bytes = 0;
    *oldest = mc_now();
    for (int p = 0; p < npart; p++) {
        struct lru *l = &lrus[TIER_DRAM][clsid][p];
        pthread_mutex_lock(&l->lock);
        n += l->count;
        *bytes += l->bytes;
        item *t = l->tail;
        while (t == &crawler)
            t = t->prev;
        if (t != NULL && t->time < *oldest)
            *oldest = t->time;
        pthread_mutex_unlock(&l->lock);
    }
    return n;
}

/* One "items:<class>:<name> <value>" line. */
static void class_line(struct stat_sink *sink, unsigned int c,
                       const char *name, unsigned long long v)
{
    char key[80];
    snprintf(key, sizeof(key), "items:%u:%s", c, name);
    stat_printf(sink, key, "%llu", v);
}

/*
 * memcached's names, in its order.  Each class has one LRU, which reads as
 * memcached's cold segment: number_cold is number, hits_to_cold the class's
 * hits, and the hot, warm and temp names are 0 (doc/stats.md).
 */
void items_stats(struct stat_sink *sink)
{
    struct thread_stats *ts = malloc(sizeof(*ts));     /* large */
    if (ts != NULL)
        stats_aggregate(ts, NULL);
    rel_time_t now = mc_now();
    for (unsigned int c = 1; c <= slabs_nclasses(); c++) {
        rel_time_t oldest;
        uint64_t bytes;
        uint64_t n = class_count(c, &oldest, &bytes);
        struct lru_stats *s = &cls_stats[c];
        if (n == 0 && STATS_GET(s, evicted) == 0 &&
            STATS_GET(s, outofmemory) == 0)
            continue;
        class_line(sink, c, "number", n);
        class_line(sink, c, "number_hot", 0);
        class_line(sink, c, "number_warm", 0);
        class_line(sink, c, "number_cold", n);
        class_line(sink, c, "age_hot", 0);
        class_line(sink, c, "age_warm", 0);
        class_line(sink, c, "age", n ? now - oldest : 0);
        class_line(sink, c, "mem_requested", bytes);
#define EMIT_LRU_STAT(name) class_line(sink, c, #name, STATS_GET(s, name));
        LRU_STATS_FIELDS(EMIT_LRU_STAT)
#undef EMIT_LRU_STAT
        class_line(sink, c, "moves_to_cold", 0);
        class_line(sink, c, "moves_to_warm", 0);
        class_line(sink, c, "hits_to_hot", 0);
        class_line(sink, c, "hits_to_warm", 0);
        class_line(sink, c, "hits_to_cold", ts ? ts->slab[c].get_hits : 0);
        class_line(sink, c, "hits_to_temp", 0);
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
        __atomic_store_n(&cls_stats[c].name, 0, __ATOMIC_RELAXED);
        LRU_STATS_FIELDS(RESET_LRU_STAT)
#undef RESET_LRU_STAT
    }
}

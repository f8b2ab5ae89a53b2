/*
 * items_core.c - item lifecycle: alloc, link/unlink/replace, refcounts,
 * expiry, CAS, the per-(class, partition) LRUs, eviction and allocation,
 * and the tier moves.  items.c is the engine's entry (items_init) and its
 * walks; items_ops.c what the protocols ask.
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

#include "engine/assoc.h"
#include "engine/items.h"
#include "engine/items_int.h"
#include "engine/lazy_lru.h"
#include "base/settings.h"
#include "engine/slabs.h"
#include "base/stats.h"
#include "base/watch.h"
#include "base/util.h"

/* Items examined from each LRU tail per eviction attempt. */
#define LRU_SEARCH_DEPTH 5
/* Items a tail walk may spare (second chance) before it takes one. */
#define LRU_SPARE_MAX 64
/* Rounds of (slabs_alloc, tail pull) before item_alloc gives up. */
#define ALLOC_TRIES 4

/* lrus[TIER_DRAM][slab class][partition] hold DRAM items; the lower tiers'
 * sets hold their meta tuples by the class of their lower-tier slot. */
struct lru items_lrus[MAX_SLAB_CLASSES][MAX_PARTITIONS];
const struct item_tier_ops *items_tier_ops;   /* set before threads start */
bool items_log_all;                /* tier_ops->logged: -o dram_log */
struct lru_stats items_cls_stats[MAX_SLAB_CLASSES];
static bool locks_ready;
int items_npart = 1;               /* set at init */

bool items_lazy_lru = true;        /* set before threads start */
uint64_t items_cas_id;             /* atomic */
rel_time_t items_oldest_live;      /* atomic; 0 = no flush */
uint64_t items_oldest_cas;         /* atomic; 0 = none */

/* Crawler cursor: crawl_lock protects the three scalars; `crawler`'s
 * links are protected by the lock of the LRU it sits in. */
pthread_mutex_t items_crawl_lock = PTHREAD_MUTEX_INITIALIZER;
item items_crawler;
unsigned int items_crawl_tier;        /* index of items.c's crawl_sets() */
unsigned int items_crawl_cls = 1;
int items_crawl_part;
bool items_crawler_in_lru;
uint64_t items_crawl_running;          /* 1 inside a pass; crawl_lock */


/* ---- CAS. ---------------------------------------------------------- */

static uint64_t cas_limit = UINT64_MAX;    /* atomic */
static void (*cas_reserve)(uint64_t cas);   /* set before threads start */

uint64_t item_next_cas(void)
{
    if (!settings.use_cas)
        return 0;
    uint64_t v = __atomic_add_fetch(&items_cas_id, 1, __ATOMIC_RELAXED);
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
void items_lower_invalidate(const item *it)
{
    /* With a log of DRAM versions, every version has a copy there. */
    if (((it->it_flags & (ITEM_META | ITEM_WAS_LOWER)) || items_log_all) &&
        items_tier_ops != NULL && items_tier_ops->invalidate != NULL)
        items_tier_ops->invalidate(item_fp(it));
}

/* A linked DRAM item's version (value, or exptime) is about to be
 * acknowledged: with -o dram_log the tier policy logs it first.  A
 * stale-marked version is never logged (its record would come back fresh
 * after a crash; see the meta delete with I): a graceful restart links
 * such items with the mark, and `mg ... E` gives one a new CAS.  Item
 * lock held. */
void items_log_version(item *it)
{
    if (it->it_flags & ITEM_STALE) {
        it->it_flags &= (uint16_t)~ITEM_LOG_ORDERED;
        return;
    }
    if (items_log_all && it->tier == TIER_DRAM && !(it->it_flags & ITEM_META) &&
        (it->it_flags & ITEM_LINKED)) {
        if (items_tier_ops->logged(it))
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
bool items_superseded_in_log(const item *old, const item *new_it)
{
    return items_log_all && (old->it_flags & ITEM_LOG_ORDERED) &&
           !(old->it_flags & (ITEM_META | ITEM_WAS_LOWER)) &&
           new_it->tier == TIER_DRAM && !(new_it->it_flags & ITEM_META) &&
           items_tier_ops->log_ordered != NULL && items_tier_ops->log_ordered(new_it);
}

/* A touch: a shorter life than the lower-tier copy says is recorded too,
 * as a shorter life for that copy where the tier policy can, or else as
 * its invalidation. */
void items_set_exptime(item *it, rel_time_t exptime)
{
    if (exptime != 0 && (it->exptime == 0 || exptime < it->exptime)) {
        if ((it->it_flags & (ITEM_META | ITEM_WAS_LOWER)) && items_tier_ops != NULL &&
            items_tier_ops->shorten != NULL) {
            items_tier_ops->shorten(item_fp(it), exptime);
            it->it_flags |= ITEM_CAPPED;
        } else {
            items_lower_invalidate(it);
        }
    }
    bool changed = it->exptime != exptime;
    it->exptime = exptime;
    if (changed)
        items_log_version(it);
}

uint64_t item_last_cas(void)
{
    return __atomic_load_n(&items_cas_id, __ATOMIC_RELAXED);
}

void item_cas_floor(uint64_t cas)
{
    (void)util_atomic_max(&items_cas_id, cas);
}

/* ---- Writes while a restart recovers (items.h). -------------------- */

/* The keys written while a restart recovers, as 64-bit fingerprints (the
 * item hash and a CRC32C of the key): one small open-addressing set per
 * item lock stripe, under that stripe's lock.  Exact but for a 64-bit
 * collision, so a recovered copy is never skipped for another key's write. */
static struct util_u64map rec_sets[ITEM_LOCK_COUNT];
bool items_rec_active;             /* atomic */
static __thread bool rec_self;      /* this thread is the recovery: its own
                                       links (staged stores) mark nothing */
static bool rec_flushed;            /* atomic */
static bool rec_lost;               /* atomic: a set could not grow */

/* The set's entry for a key of fingerprint fp (item_key_fp()): the hash
 * in the high half, as the sets' slots expect. */
static uint64_t rec_fp(uint64_t fp)
{
    uint64_t e = (fp << 32) | (fp >> 32);
    return e != 0 ? e : 1;
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
    __atomic_store_n(&items_rec_active, true, __ATOMIC_RELEASE);
}

void items_recovery_self(void)
{
    rec_self = true;
}

void items_recovery_end(void)
{
    __atomic_store_n(&items_rec_active, false, __ATOMIC_RELEASE);
    rec_sets_free();
}

/* A write of the key: a new version linked, or a delete.  Item lock held. */
void items_rec_mark(uint64_t fp)
{
    if (__builtin_expect(__atomic_load_n(&items_rec_active, __ATOMIC_RELAXED), 0) &&
        !rec_self &&
        util_u64map_slot(&rec_sets[fp & ITEM_LOCK_MASK], rec_fp(fp),
                         ITEM_LOCK_POWER) == NULL)
        __atomic_store_n(&rec_lost, true, __ATOMIC_RELAXED);  /* skip every key */
}

/* A write or delete of a key the recovery has not brought back yet (none
 * in the index, not marked yet).  The recovery will skip its saved or
 * scanned copies (rec_mark), but they stay on the media: an invalidation
 * recorded now, before any new version of the key is written, keeps the
 * next crash's scan from bringing one back.  Item lock held. */
void items_rec_forget_unrecovered(const char *key, size_t nkey, uint32_t hv)
{
    if (__builtin_expect(__atomic_load_n(&items_rec_active, __ATOMIC_RELAXED), 0) &&
        !rec_self && items_tier_ops != NULL && items_tier_ops->invalidate != NULL &&
        util_u64map_find(&rec_sets[hv & ITEM_LOCK_MASK],
                         rec_fp(item_key_fp(key, nkey, hv)), ITEM_LOCK_POWER) == NULL &&
        assoc_find(key, nkey, hv) == NULL)
        items_tier_ops->invalidate(item_key_fp(key, nkey, hv));
}

bool do_item_recovery_written(const char *key, size_t nkey, uint32_t hv)
{
    return do_item_recovery_written_fp(item_key_fp(key, nkey, hv));
}

bool do_item_recovery_written_fp(uint64_t fp)
{
    if (__atomic_load_n(&rec_flushed, __ATOMIC_RELAXED) ||
        __atomic_load_n(&rec_lost, __ATOMIC_RELAXED))
        return true;
    return util_u64map_find(&rec_sets[fp & ITEM_LOCK_MASK], rec_fp(fp),
                            ITEM_LOCK_POWER) != NULL;
}




bool items_crawl_rush;             /* atomic: lru_crawler crawl asked */


/* -o no_modern (memcached's one-queue LRU), as memcached runs it: a store
 * first reuses a dead item at its class's LRU tail, and an item read since
 * it was linked gets no second chance at the tail (memcached moves it only
 * on a read at least a minute after its last move). */
static bool one_queue_lru;

void items_core_init(void)
{
    one_queue_lru = settings_ignored_arg("no_modern") != NULL;
    if (!locks_ready) {
        item_locks_init();
        for (int c = 0; c < MAX_SLAB_CLASSES; c++)
            for (int p = 0; p < MAX_PARTITIONS; p++)
                pthread_mutex_init(&items_lrus[c][p].lock, NULL);
        locks_ready = true;
    }
    for (int c = 0; c < MAX_SLAB_CLASSES; c++) {
        for (int p = 0; p < MAX_PARTITIONS; p++) {
            items_lrus[c][p].head = items_lrus[c][p].tail = NULL;
            items_lrus[c][p].count = 0;
        }
    }
    items_tier_ops = NULL;
    memset(items_cls_stats, 0, sizeof(items_cls_stats));
    items_cas_id = 0;
    items_oldest_live = 0;
    items_oldest_cas = 0;
    memset(&items_crawler, 0, sizeof(items_crawler));
    items_crawler.it_flags = ITEM_CRAWLER;
    items_crawl_cls = 1;
    items_crawl_part = 0;
    items_crawler_in_lru = false;
    items_lazy_lru = true;

    llru_init();
    items_seg_init();
    slabs_init();
    assoc_init(settings.hashpower_init);
    items_npart = slabs_npartitions();
}

/* ---- LRU lists (caller holds l->lock). ----------------------------- */

/* The LRU holding `it`; NULL for a meta tuple, which is on none: the SSD
 * tier ages by page (oldest page first), NVM by a CLOCK over its slots
 * (tac/nvm_clock.c). */
struct lru *items_lru_of(const item *it)
{
    if (it->tier != TIER_DRAM)
        return NULL;
    /* COLD (every item without the segmented LRU) is the class's LRU. */
    if (it->lru_seg == LRU_SEG_COLD)
        return &items_lrus[it->slabs_clsid][it->partition];
    return items_seg_lru(it->lru_seg, it->slabs_clsid, it->partition);
}

void items_set_tier_ops(const struct item_tier_ops *ops)
{
    items_tier_ops = ops;
    items_log_all = ops != NULL && ops->logged != NULL;
}

void items_set_lazy_lru(bool on)
{
    items_lazy_lru = on;
}

bool items_tiered(void)
{
    return items_tier_ops != NULL;
}

void items_lru_link_locked(struct lru *l, item *it)
{
    it->prev = NULL;
    it->next = l->head;
    if (l->head != NULL)
        l->head->prev = it;
    l->head = it;
    if (l->tail == NULL)
        l->tail = it;
    if (it != &items_crawler) {
        l->count++;
        l->bytes += ITEM_ntotal(it);
    }
}

void items_lru_unlink_locked(struct lru *l, item *it)
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
    if (it != &items_crawler) {
        l->count--;
        l->bytes -= ITEM_ntotal(it);
    }
}

/* Puts `it` right before `pos` (toward the head). */
void items_lru_insert_before_locked(struct lru *l, item *pos, item *it)
{
    it->next = pos;
    it->prev = pos->prev;
    if (pos->prev != NULL)
        pos->prev->next = it;
    else
        l->head = it;
    pos->prev = it;
    if (it != &items_crawler) {
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
    if ((it->it_flags & ITEM_META) && items_tier_ops != NULL)
        items_tier_ops->release(it);
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
    rel_time_t ol = __atomic_load_n(&items_oldest_live, __ATOMIC_ACQUIRE);
    if (ol == 0 || ol > now)
        return false;
    if (item_time(it) <= ol)
        return true;
    uint64_t oc = __atomic_load_n(&items_oldest_cas, __ATOMIC_RELAXED);
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
            __atomic_store_n(&items_oldest_cas, item_next_cas(), __ATOMIC_RELAXED);
    }
    __atomic_store_n(&items_oldest_live, mark, __ATOMIC_RELEASE);
    if (items_tier_ops != NULL && items_tier_ops->flush != NULL)
        items_tier_ops->flush();
    if (__atomic_load_n(&items_rec_active, __ATOMIC_RELAXED))
        __atomic_store_n(&rec_flushed, true, __ATOMIC_RELAXED);
}

/* ---- Link / unlink. ------------------------------------------------- */

/* DRAM held by the linked meta tuples of each lower tier: their count,
 * their chunks' bytes (rounding included) and their keys' bytes. */
static uint64_t tier_metas[TIER_COUNT], tier_chunk_bytes[TIER_COUNT],
                tier_key_bytes[TIER_COUNT];                 /* atomic */

static void tier_dram_add(const item *it, int64_t sign)
{
    if (it->tier == TIER_DRAM)
        return;
    uint64_t chunk = it->slabs_clsid != 0 ? slabs_chunk_size(it->slabs_clsid)
                                          : ITEM_ntotal(it);
    __atomic_add_fetch(&tier_metas[it->tier], (uint64_t)sign, __ATOMIC_RELAXED);
    __atomic_add_fetch(&tier_chunk_bytes[it->tier], (uint64_t)sign * chunk, __ATOMIC_RELAXED);
    __atomic_add_fetch(&tier_key_bytes[it->tier], (uint64_t)sign * it->nkey, __ATOMIC_RELAXED);
}

void items_tier_dram(enum item_tier tier, struct items_tier_dram *out)
{
    out->metas = __atomic_load_n(&tier_metas[tier], __ATOMIC_RELAXED);
    out->chunk_bytes = __atomic_load_n(&tier_chunk_bytes[tier], __ATOMIC_RELAXED);
    out->key_bytes = __atomic_load_n(&tier_key_bytes[tier], __ATOMIC_RELAXED);
}

void items_count_dead(unsigned int clsid, const item *it, bool by_crawler)
{
    if (by_crawler) {
        GSTATS_INCR(crawler_reclaimed);
        CLS_INCR(clsid, crawler_reclaimed);
    } else {
        GSTATS_INCR(reclaimed);
        CLS_INCR(clsid, reclaimed);
    }
    if ((it->it_flags & ITEM_FETCHED) == 0) {
        GSTATS_INCR(expired_unfetched);
        CLS_INCR(clsid, expired_unfetched);
    }
}

static void stats_unlinked(const item *it)
{
    GSTATS_DECR(curr_items);
    STATS_SUB(&gstats, bytes, ITEM_ntotal(it));
    tier_dram_add(it, -1);
}

void do_item_link(item *it, uint32_t hv, bool keep_cas)
{
    assert((it->it_flags & (ITEM_LINKED | ITEM_SLABBED)) == 0);
    it->it_flags |= ITEM_LINKED;
    if (!keep_cas) {
        if (__builtin_expect(__atomic_load_n(&items_rec_active, __ATOMIC_RELAXED), 0))
            items_rec_mark(item_fp(it));
        if (items_tier_ops != NULL && items_tier_ops->key_stored != NULL)
            items_tier_ops->key_stored(hv);
        /* A new version; a tier move (keep_cas) keeps time and CAS.  A
         * staged store's meta tuple got its CAS before its tuple was
         * written (store_ready). */
        if (!item_compact(it))
            it->time = mc_now();
        if (!(it->it_flags & ITEM_META) || it->cas == 0)
            it->cas = item_next_cas();
        if (it->tier == TIER_DRAM)
            it->lru_seg = items_seg_lists() ? (uint8_t)items_seg_of_new(it)
                                            : LRU_SEG_COLD;
    }
    assoc_insert(it, hv);

    struct lru *l = items_lru_of(it);
    if (l != NULL) {
        pthread_mutex_lock(&l->lock);
        items_lru_link_locked(l, it);
        pthread_mutex_unlock(&l->lock);
    }
    refcount_incr(it);

    GSTATS_INCR(curr_items);
    GSTATS_INCR(total_items);
    GSTATS_ADD(bytes, ITEM_ntotal(it));
    tier_dram_add(it, 1);
    items_log_version(it);
}

/* Removes a linked item from index and LRU; the index's reference is
 * left for the caller to drop or reuse.  Caller holds the item lock and
 * l->lock. */
void items_unlink_locked(struct lru *l, item *it, uint32_t hv)
{
    it->it_flags &= ~ITEM_LINKED;
    assoc_delete(it, hv);
    if (l != NULL)
        items_lru_unlink_locked(l, it);
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
        if (items_tier_ops != NULL && items_tier_ops->invalidate != NULL)
            items_tier_ops->invalidate(item_fp(it));
    }
    struct lru *l = items_lru_of(it);
    if (l != NULL)
        pthread_mutex_lock(&l->lock);
    items_unlink_locked(l, it, hv);
    if (l != NULL)
        pthread_mutex_unlock(&l->lock);
    item_release(it);
}

/* Replaces old by new_it; invalidated: old's invalidation was recorded
 * already (store_ready_for). */
void items_replace_version(item *old, item *new_it, uint32_t hv, bool invalidated)
{
    if (!invalidated && !items_superseded_in_log(old, new_it))
        items_lower_invalidate(old);
    do_item_unlink(old, hv);
    do_item_link(new_it, hv, false);
}

void do_item_replace(item *old, item *new_it, uint32_t hv)
{
    items_replace_version(old, new_it, hv, false);
}

static const char *tier_word(unsigned int tier)
{
    return tier == TIER_NVM ? "nvm" : tier == TIER_SSD ? "ssd" : "dram";
}

/* The key of a or else b for a watcher's line; a move between two meta
 * tuples knows only the fingerprint, shown as "fp:" and 16 hex digits. */
static const char *watch_key(const item *a, const item *b, char buf[24])
{
    if (!item_compact(a))
        return ITEM_key(a);
    if (b != NULL && !item_compact(b))
        return ITEM_key(b);
    snprintf(buf, 24, "fp:%016llx", (unsigned long long)item_meta_fp(a));
    return buf;
}

static size_t watch_nkey(const item *a, const item *b, const char *key)
{
    return !item_compact(a) || (b != NULL && !item_compact(b)) ? a->nkey : strlen(key);
}

void do_item_move(item *old, item *new_it, uint32_t hv)
{
    char fpbuf[24];
    const char *wkey = watch_on(WATCH_TIERS) ? watch_key(old, new_it, fpbuf) : NULL;
    if (wkey != NULL)
        watch_tier_move(wkey, watch_nkey(old, new_it, wkey), tier_word(old->tier),
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
void items_stats_evicted(const item *it, unsigned int clsid)
{
    char fpbuf[24];
    const char *wkey = watch_on(WATCH_EVICTIONS) ? watch_key(it, NULL, fpbuf) : NULL;
    if (wkey != NULL)
        watch_eviction(wkey, watch_nkey(it, NULL, wkey), (it->it_flags & ITEM_FETCHED) != 0,
                       it->exptime != 0 ? (int64_t)it->exptime - mc_now() : -1,
                       (int64_t)mc_now() - item_time(it), clsid,
                       it->nbytes >= 2 ? it->nbytes - 2 : 0);
    GSTATS_INCR(evictions);
    CLS_INCR(clsid, evicted);
    __atomic_store_n(&items_cls_stats[clsid].evicted_time,
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
        items_stats_evicted(it, it->slabs_clsid);
    do_item_unlink(it, hv);
}

/* Lazy LRU's second chance (llru_second_chance) for the cold-end item
 * `it`: true if it was moved to the head instead of being taken.  Caller
 * holds l->lock. */
static bool tail_spare_locked(struct lru *l, item *it)
{
    /* The segmented LRU rescues read items into WARM instead. */
    if (!items_lazy_lru || one_queue_lru || items_seg_mode() ||
        !llru_second_chance(it))
        return false;
    items_lru_unlink_locked(l, it);
    items_lru_link_locked(l, it);
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
    uint32_t hv = item_hv(it);
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
        items_lru_unlink_locked(l, it);
        items_lru_link_locked(l, it);
    } else if (dead) {
        items_count_dead(clsid, it, false);
        got = it;
    } else {
        items_stats_evicted(it, clsid);
        got = it;
    }
    if (got != NULL)
        items_unlink_locked(l, it, hv);
    item_unlock(hv);
    return got;
}

static item *lru_pull_tail(unsigned int clsid, int p, bool may_evict)
{
    struct lru *l = &items_lrus[clsid][p];
    item *got = NULL;
    pthread_mutex_lock(&l->lock);
    item *search = l->tail;
    int spared = 0;
    for (int n = 0; search != NULL && got == NULL && n < LRU_SEARCH_DEPTH;) {
        item *prev = search->prev;
        if (search != &items_crawler) {       /* the crawler's cursor is skipped */
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
    struct lru *l = &items_lrus[clsid][p];
    item *got = NULL;
    bool spared = false;
    pthread_mutex_lock(&l->lock);
    item *tail = l->tail;
    if (tail == &items_crawler)
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
        for (int i = 0; i < items_npart; i++) {
            it = lru_pull_tail(clsid, (p + i) % items_npart, may_evict);
            if (it != NULL) {
                GSTATS_INCR(direct_reclaims);
                CLS_INCR(clsid, direct_reclaims);
                return it;
            }
        }
        /* Segmented: COLD had nothing to give; HOT's tail moves down. */
        items_seg_refill_cold(clsid, p);
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
    it->lru_seg = LRU_SEG_COLD;
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

item *item_alloc_meta(const item *src, enum item_tier tier, uint64_t ref,
                      int partition, bool reserved)
{
    size_t size = item_compact_size(src->nkey);
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
    /* Only the core, the reference and the fingerprint exist. */
    it->h_next = NULL;
    it->exptime = src->exptime;
    it->nbytes = src->nbytes;
    it->flags = src->flags;
    it->slabs_clsid = (uint8_t)clsid;
    it->partition = (uint8_t)p;
    it->nkey = src->nkey;
    it->it_flags = ITEM_META | keep;
    it->tier = (uint8_t)tier;
    item_set_meta_fp(it, item_fp(src));
    it->cas = src->cas;
    it->access = __atomic_load_n(&src->access, __ATOMIC_RELAXED);
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

    bool skip = items_tier_ops != NULL && items_tier_ops->skip_dram != NULL &&
                items_tier_ops->skip_dram();
    item *it = skip ? NULL
                    : alloc_chunk(clsid, p,
                                  settings.evict_to_free && items_tier_ops == NULL,
                                  false);
    if (it == NULL && items_tier_ops != NULL) {
        /* DRAM is full (or skipped): wake the evictors, and take the value
         * in a staging item that item_store() puts into a lower tier
         * (TaC 4.1). */
        if (!skip)
            items_tier_ops->dram_pressure(clsid, p);
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

item *item_unstage(const item *st)
{
    size_t nkey = st->nkey, nbytes = st->nbytes;
    unsigned int clsid = slabs_clsid(item_make_size(nkey, nbytes));
    int p = part_index(st->partition);
    /* No eviction: with a lower tier the evictors move DRAM's tail down. */
    item *it = alloc_chunk(clsid, p, false, false);
    if (it == NULL)
        return NULL;
    item_init_fields(it, ITEM_key(st), nkey, st->flags, st->exptime, nbytes, clsid, p);
    it->it_flags = st->it_flags & (uint16_t)~(ITEM_TRANSIENT | ITEM_STAGING);
    memcpy(ITEM_data(it), ITEM_data(st), nbytes);
    __atomic_store_n(&it->refcount, 1, __ATOMIC_RELEASE);
    return it;
}

item *item_alloc_promote(const item *meta, const char *key, int partition)
{
    size_t nkey = meta->nkey, nbytes = meta->nbytes;
    if (!item_size_ok(nkey, nbytes))
        return NULL;
    unsigned int clsid = slabs_clsid(item_make_size(nkey, nbytes));
    int p = part_index(partition);
    item *it = alloc_chunk(clsid, p, false, false);
    if (it == NULL) {
        if (items_tier_ops != NULL)
            items_tier_ops->dram_pressure(clsid, p);
        return NULL;
    }
    item_init_fields(it, key, nkey, meta->flags, meta->exptime,
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
        if (t == &items_crawler)
            continue;
        uint32_t hv = item_hv(t);
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

int items_demote_tail(unsigned int clsid, int p, int max,
                      item_evict_hook_fn demote)
{
    if (clsid >= MAX_SLAB_CLASSES || p < 0 || p >= items_npart)
        return 0;
    struct lru *l = &items_lrus[clsid][p];
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

enum lower_visit items_lower_visit(enum item_tier tier, uint64_t ref,
                                   const char *key, size_t nkey,
                                   item_evict_hook_fn move)
{
    if (tier == TIER_DRAM || nkey == 0 || nkey > KEY_MAX_LENGTH)
        return LOWER_NOT_OWNED;
    uint32_t hv = item_hash(key, nkey);
    if (!item_trylock(hv))
        return LOWER_BUSY;
    enum lower_visit what = LOWER_NOT_OWNED;
    item *it = assoc_find(key, nkey, hv);
    if (it == NULL || !(it->it_flags & ITEM_META) || it->tier != tier ||
        item_meta_ref(it) != ref) {
        item_unlock(hv);
        return LOWER_NOT_OWNED;
    }
    refcount_incr(it);
    if (item_is_dead(it, NULL)) {
        items_count_dead(it->slabs_clsid, it, false);
        do_item_unlink(it, hv);
        what = LOWER_FREED;
    } else if (items_lazy_lru && llru_second_chance(it)) {
        what = LOWER_SPARED;
    } else if (move != NULL) {
        what = move(it, hv) ? LOWER_MOVED : LOWER_KEPT;
    } else {
        do_item_evict(it, hv);
        what = LOWER_EVICTED;
    }
    item_unlock(hv);
    item_release(it);
    return what;
}

/* ---- Lookups. -------------------------------------------------------- */

/* Moves a linked item to the head of its LRU.  Caller holds the item lock
 * and the LRU lock. */
static void lru_bump_locked(struct lru *l, item *it, rel_time_t now)
{
    if (l->head != it) {
        items_lru_unlink_locked(l, it);
        items_lru_link_locked(l, it);
    }
    it->time = now;
}

void do_item_touch_access(item *it)
{
    rel_time_t now = mc_now();
    bool move = llru_access(it, now);
    bool was_active = (it->it_flags & ITEM_ACTIVE) != 0;
    if (it->it_flags & ITEM_FETCHED)
        it->it_flags |= ITEM_ACTIVE;
    else
        it->it_flags |= ITEM_FETCHED;
    /* Segmented (lru_seg.c): the read that makes an item ACTIVE is the one
     * the LRU thread acts on, whatever the temperature says. */
    if (items_seg_lists() && it->tier == TIER_DRAM &&
        (it->it_flags & ITEM_LINKED)) {
        bool seg_move = items_seg_hit(it, !was_active &&
                                          (it->it_flags & ITEM_ACTIVE));
        if (items_seg_mode())
            move = seg_move;
    }

    /* Only a rise in temperature class moves an item (lazy_lru.h); a meta
     * tuple is on no LRU (its readCount is what NVM's CLOCK reads). */
    if (!move || !items_lazy_lru || (it->it_flags & ITEM_LINKED) == 0 ||
        item_compact(it))
        return;
    /* A worker hands the move to the LRU thread; the reference
     * keeps the item from being freed while it is queued.  An item with
     * too many held references is not queued (items.h, held references). */
    if (item_refs_crowded(it))
        return;
    refcount_incr(it);
    if (llru_push(it))
        return;
    __atomic_sub_fetch(&it->refcount, 1, __ATOMIC_ACQ_REL);   /* not the last */
    if (!llru_has_ring()) {
        /* A thread without rings (fetchers, tests) moves the item itself
         * when the LRU is free. */
        struct lru *l = items_lru_of(it);
        if (items_seg_mode() && it->tier == TIER_DRAM) {
            items_seg_bump(it, now);
        } else if (pthread_mutex_trylock(&l->lock) == 0) {
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
        uint32_t hv = item_hv(it);
        item_lock(hv);
        if ((it->it_flags & ITEM_LINKED) && items_seg_mode() &&
            it->tier == TIER_DRAM) {
            items_seg_bump(it, now);
        } else if (it->it_flags & ITEM_LINKED) {
            struct lru *l = items_lru_of(it);
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

void items_lru_threads_start(void)
{
    llru_threads_start(lru_apply);
}

void items_lru_threads_stop(void)
{
    llru_threads_stop();
}

void item_ref(item *it)
{
    refcount_incr(it);
}

bool item_refs_crowded(const item *it)
{
    return refcount_load(it) >= ITEM_REFS_HELD_MAX;
}

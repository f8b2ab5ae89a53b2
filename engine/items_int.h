/*
 * items_int.h - what the files of the item engine share: the LRU lists and
 * their counters, the tier operations, the crawler's cursor, and the
 * helpers a store, a read or a walk calls around a version change.  The
 * files: items_core.c (lifecycle: CAS, link/unlink, LRUs, eviction,
 * allocation, tier moves), items_ops.c (what the protocols ask: reads,
 * stores, incr/decr, deletes) and items.c (the entry, items_init, and
 * items reached other than by key: the slab page mover's chunk evictor,
 * the expiry crawler, key dumps, `stats items`).  The design and the lock
 * order: the top of items_core.c.  Not for use outside them.
 */
#ifndef ITEMS_INT_H
#define ITEMS_INT_H

#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>

#include "engine/items.h"
#include "base/stats.h"

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

#define CLS_INCR(cls, field) STATS_INCR(&items_cls_stats[(cls)], field)

/* memcached's segmented LRU (lru_seg.c; -o lru_maintainer, -o
 * temporary_ttl): a DRAM item's queue.  COLD is the class's LRU of
 * items_lrus, so every walk of that LRU (eviction, the page
 * mover's callers, the crawler) sees the cold queue; the others are in
 * items_seg_lrus[seg - 1]. */
enum lru_seg { LRU_SEG_COLD = 0, LRU_SEG_HOT, LRU_SEG_WARM, LRU_SEG_TEMP, LRU_SEGS };

extern bool items_segmented;       /* HOT/WARM/COLD (`lru mode`); atomic */
extern bool items_temp_lru;        /* TEMP (`lru temp_ttl`); atomic */
extern bool items_seg_used;        /* either was on: queues other than COLD
                                      may hold items; atomic, never cleared */
static inline bool items_seg_mode(void)
{
    return __atomic_load_n(&items_segmented, __ATOMIC_RELAXED);
}
static inline bool items_temp_mode(void)
{
    return __atomic_load_n(&items_temp_lru, __ATOMIC_RELAXED);
}
static inline bool items_seg_lists(void)
{
    return __atomic_load_n(&items_seg_used, __ATOMIC_RELAXED);
}
extern struct lru items_seg_lrus[LRU_SEGS - 1][MAX_SLAB_CLASSES][MAX_PARTITIONS];

/* The queue seg of class clsid, partition p. */
struct lru *items_seg_lru(unsigned int seg, unsigned int clsid, int p);
/* Reads the settings and readies the queues (items_core_init). */
void items_seg_init(void);
/* The queue a new version of DRAM item it goes to (do_item_link). */
enum lru_seg items_seg_of_new(const item *it);
/* A read hit of linked DRAM item it, whose ACTIVE flag the read just set
 * (newly_active): counts hits_to_<queue>; true when the LRU thread should
 * act on it (items_seg_bump).  Caller holds the item lock. */
bool items_seg_hit(item *it, bool newly_active);
/* The LRU thread's move of a read item: an active COLD item goes to WARM,
 * any other gets its access time.  Caller holds the item lock. */
void items_seg_bump(item *it, rel_time_t now);
/* Allocation found COLD empty: moves HOT's (else WARM's) tail toward COLD;
 * true when an item reached COLD or was reclaimed.  Nothing unless the
 * queues are in use. */
bool items_seg_refill_cold(unsigned int clsid, int p);

/* `stats items` of one class by queue (lru_seg.c). */
struct item_seg_stats {
    uint64_t number[LRU_SEGS];
    rel_time_t age[LRU_SEGS];      /* of the queue's oldest item; 0 if empty */
    uint64_t hits[LRU_SEGS];
    uint64_t bytes;
    uint64_t moves_to_cold;
    uint64_t moves_to_warm;
};
void items_seg_class_stats(unsigned int clsid, struct item_seg_stats *out);
void items_seg_stats_reset(void);

/* Counts dead item it of class clsid about to be unlinked: `reclaimed`
 * (found at an LRU's tail) or `crawler_reclaimed` (by_crawler), and
 * `expired_unfetched` when it was never read (items_core.c). */
void items_count_dead(unsigned int clsid, const item *it, bool by_crawler);

/* Defined in items_core.c; their comments are there. */
extern struct lru items_lrus[MAX_SLAB_CLASSES][MAX_PARTITIONS];
extern const struct item_tier_ops *items_tier_ops;
extern bool items_log_all;
extern struct lru_stats items_cls_stats[MAX_SLAB_CLASSES];
extern int items_npart;
extern bool items_lazy_lru;
extern uint64_t items_cas_id;
extern rel_time_t items_oldest_live;
extern uint64_t items_oldest_cas;
extern pthread_mutex_t items_crawl_lock;
extern item items_crawler;
extern unsigned int items_crawl_tier;
extern unsigned int items_crawl_cls;
extern int items_crawl_part;
extern bool items_crawler_in_lru;
extern uint64_t items_crawl_running;
extern bool items_rec_active;
extern bool items_crawl_rush;

void items_log_version(item *it);
void items_lower_invalidate(const item *it);
void items_lru_insert_before_locked(struct lru *l, item *pos, item *it);
void items_lru_unlink_locked(struct lru *l, item *it);
void items_replace_version(item *old, item *new_it, uint32_t hv, bool invalidated);
void items_stats_evicted(const item *it, unsigned int clsid);
void items_unlink_locked(struct lru *l, item *it, uint32_t hv);
void items_rec_forget_unrecovered(const char *key, size_t nkey, uint32_t hv);
void items_rec_mark(uint64_t fp);
/* items_rec_mark for key, its fingerprint computed only while a restart
 * recovers. */
static inline void items_rec_mark_key(const char *key, size_t nkey, uint32_t hv)
{
    if (__builtin_expect(__atomic_load_n(&items_rec_active, __ATOMIC_RELAXED), 0))
        items_rec_mark(item_key_fp(key, nkey, hv));
}
void items_set_exptime(item *it, rel_time_t exptime);
bool items_superseded_in_log(const item *old, const item *new_it);
void items_lru_link_locked(struct lru *l, item *it);
struct lru *items_lru_of(const item *it);

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
    return partition >= 0 ? partition % items_npart : 0;
}

/* items_init without the walks' registrations (items.c). */
void items_core_init(void);

#endif

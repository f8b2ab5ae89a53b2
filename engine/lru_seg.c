/*
 * lru_seg.c - memcached's segmented LRU, for a server without a lower tier
 * that asks for it: -o lru_maintainer (HOT, WARM and COLD queues per slab
 * class and partition) and -o temporary_ttl (the TEMP queue).  Without them
 * each class keeps the one Lazy LRU of items_core.c.  Design: doc/design.md,
 * "memcached's segmented LRU".
 *
 * The rules are memcached's (its doc/new_lru.txt):
 *  - A new version goes to TEMP when temp_lru is on and it expires within
 *    temporary_ttl seconds, else to HOT (COLD without lru_maintainer).
 *  - A read marks an item FETCHED, a second one ACTIVE.  An item in COLD
 *    that turns ACTIVE is moved to WARM by the LRU thread (moves_to_warm);
 *    in HOT or WARM the read refreshes its access time only.
 *  - The maintainer (items_seg_juggle) walks each queue's tail: a dead item
 *    is reclaimed; HOT's tail goes to WARM if ACTIVE, else to COLD once HOT
 *    holds more than hot_lru_pct of the class's bytes or the item is older
 *    than hot_max_factor times COLD's oldest (moves_to_cold); WARM's tail is
 *    bumped within WARM if ACTIVE, else leaves for COLD by the same rule
 *    with warm_lru_pct and warm_max_factor; COLD's tail goes to WARM if
 *    ACTIVE.  TEMP only loses its dead items: nothing evicts from it.
 *  - Only COLD is evicted from (items_core.c's alloc_chunk, which also
 *    moves HOT's tail down when COLD is empty: items_seg_refill_cold).
 *
 * Locks.  An item's queue (lru_seg) changes only with its item lock held,
 * so whoever holds the item lock finds its queue with items_lru_of().  A
 * move unlinks under the source queue's lock and links under the
 * destination's, never holding both (two LRU locks have no order).
 *
 * Threads: workers (reads, links), the LRU thread (bumps), the maintainer
 * (juggle), stats.
 */
#include "config.h"

#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "engine/items.h"
#include "engine/items_int.h"
#include "base/settings.h"
#include "engine/slabs.h"
#include "base/stats.h"
#include "base/util.h"

struct lru items_seg_lrus[LRU_SEGS - 1][MAX_SLAB_CLASSES][MAX_PARTITIONS];
bool items_segmented;
bool items_temp_lru;
bool items_seg_used;
static bool seg_locks_ready;

/* Per class: moves and hits by queue (relaxed atomics). */
struct seg_class_stats {
    uint64_t moves_to_cold;
    uint64_t moves_to_warm;
    uint64_t hits[LRU_SEGS];
};
static struct seg_class_stats seg_stats[MAX_SLAB_CLASSES];

/* Tail items a juggle looks at per queue and turn (memcached: 5). */
#define SEG_SEARCH_DEPTH 5
/* Moves per queue and class in one juggle (memcached: 500). */
#define SEG_JUGGLE_MAX 500

struct lru *items_seg_lru(unsigned int seg, unsigned int clsid, int p)
{
    if (seg == LRU_SEG_COLD || seg >= LRU_SEGS)
        return &items_lrus[clsid][p];
    return &items_seg_lrus[seg - 1][clsid][p];
}

void items_seg_init(void)
{
    if (!seg_locks_ready) {
        for (int s = 0; s < LRU_SEGS - 1; s++)
            for (int c = 0; c < MAX_SLAB_CLASSES; c++)
                for (int p = 0; p < MAX_PARTITIONS; p++)
                    pthread_mutex_init(&items_seg_lrus[s][c][p].lock, NULL);
        seg_locks_ready = true;
    }
    for (int s = 0; s < LRU_SEGS - 1; s++) {
        for (int c = 0; c < MAX_SLAB_CLASSES; c++) {
            for (int p = 0; p < MAX_PARTITIONS; p++) {
                struct lru *l = &items_seg_lrus[s][c][p];
                l->head = l->tail = NULL;
                l->count = l->bytes = 0;
            }
        }
    }
    memset(seg_stats, 0, sizeof(seg_stats));
    items_segmented = settings.lru_segmented;
    items_temp_lru = settings.temp_lru;
    items_seg_used = items_segmented || items_temp_lru;
}

/* Turns one of the two on or off at run time (the flags are the engine's,
 * the settings what `stats settings` shows).  The queues stay in use once
 * used: a switch off leaves items in them, which the juggle drains. */
static bool seg_switch(bool *flag, bool *setting, bool on)
{
    if (on && items_tiered())
        return false;
    if (on)
        __atomic_store_n(&items_seg_used, true, __ATOMIC_RELAXED);
    __atomic_store_n(flag, on, __ATOMIC_RELAXED);
    __atomic_store_n(setting, on, __ATOMIC_RELAXED);
    return true;
}

bool items_seg_set_mode(bool segmented)
{
    return seg_switch(&items_segmented, &settings.lru_segmented, segmented);
}

bool items_seg_set_temp(bool on, int ttl)
{
    if (on)
        __atomic_store_n(&settings.temporary_ttl, ttl, __ATOMIC_RELAXED);
    return seg_switch(&items_temp_lru, &settings.temp_lru, on);
}

enum lru_seg items_seg_of_new(const item *it)
{
    rel_time_t now = mc_now();
    /* As memcached: an item that never expires, or is already dead, is
     * not temporary. */
    int ttl = __atomic_load_n(&settings.temporary_ttl, __ATOMIC_RELAXED);
    if (items_temp_mode() && it->exptime != 0 && it->exptime >= now &&
        it->exptime - now <= (rel_time_t)ttl)
        return LRU_SEG_TEMP;
    return items_seg_mode() ? LRU_SEG_HOT : LRU_SEG_COLD;
}

#define SEG_INCR(c, field) \
    __atomic_fetch_add(&seg_stats[(c)].field, 1, __ATOMIC_RELAXED)

bool items_seg_hit(item *it, bool newly_active)
{
    unsigned int seg = it->lru_seg < LRU_SEGS ? it->lru_seg : LRU_SEG_COLD;
    SEG_INCR(it->slabs_clsid, hits[seg]);
    return items_seg_mode() && newly_active;
}

/* Moves it from its queue to the head of queue dst of its class; with
 * now != 0 sets its access time.  Caller holds the item lock, no LRU lock;
 * it is linked. */
static void seg_move(item *it, unsigned int dst, rel_time_t now)
{
    struct lru *from = items_lru_of(it);
    pthread_mutex_lock(&from->lock);
    items_lru_unlink_locked(from, it);
    pthread_mutex_unlock(&from->lock);
    it->lru_seg = (uint8_t)dst;
    struct lru *to = items_lru_of(it);
    pthread_mutex_lock(&to->lock);
    if (now != 0)
        it->time = now;
    items_lru_link_locked(to, it);
    pthread_mutex_unlock(&to->lock);
}

static void count_move(unsigned int clsid, unsigned int dst)
{
    if (dst == LRU_SEG_COLD) {
        GSTATS_INCR(moves_to_cold);
        SEG_INCR(clsid, moves_to_cold);
    } else {
        GSTATS_INCR(moves_to_warm);
        SEG_INCR(clsid, moves_to_warm);
    }
}

void items_seg_bump(item *it, rel_time_t now)
{
    if (it->lru_seg == LRU_SEG_COLD && (it->it_flags & ITEM_ACTIVE)) {
        it->it_flags &= (uint16_t)~ITEM_ACTIVE;
        seg_move(it, LRU_SEG_WARM, now);
        count_move(it->slabs_clsid, LRU_SEG_WARM);
        return;
    }
    struct lru *l = items_lru_of(it);
    pthread_mutex_lock(&l->lock);
    it->time = now;
    pthread_mutex_unlock(&l->lock);
}

/* What a pull from a queue's tail did. */
enum seg_pull {
    PULL_NOTHING,
    PULL_RECLAIMED,     /* a dead item freed */
    PULL_TO_COLD,
    PULL_OTHER,         /* moved to WARM, or within WARM */
};

/* The juggle's bounds for one class and partition. */
struct seg_limits {
    bool flat;              /* `lru mode flat`: HOT and WARM drain to COLD */
    uint64_t total;         /* HOT + WARM + COLD bytes; 0: move whatever */
    rel_time_t hot_age;     /* 0 with total 0 */
    rel_time_t warm_age;
    int hot_pct, warm_pct;
};

/* Where the live tail item it of queue seg (l, locked; its item lock held)
 * goes: a queue, or LRU_SEGS to stay. */
static unsigned int seg_dest(struct lru *l, unsigned int seg, item *it,
                             const struct seg_limits *lim, rel_time_t now)
{
    bool active = (it->it_flags & ITEM_ACTIVE) != 0;
    if (seg == LRU_SEG_TEMP || (seg == LRU_SEG_COLD && lim->flat))
        return LRU_SEGS;
    if (lim->flat)
        return LRU_SEG_COLD;
    if (seg == LRU_SEG_COLD)
        return active ? LRU_SEG_WARM : LRU_SEGS;
    if (active)
        return LRU_SEG_WARM;
    int pct = seg == LRU_SEG_HOT ? lim->hot_pct : lim->warm_pct;
    rel_time_t age = seg == LRU_SEG_HOT ? lim->hot_age : lim->warm_age;
    if (lim->total == 0 || l->bytes > lim->total * (uint64_t)pct / 100 ||
        (now > it->time && now - it->time > age))
        return LRU_SEG_COLD;
    return LRU_SEGS;
}

/* One step at the tail of queue seg of (clsid, p): reclaims a dead item,
 * or moves the tail item where seg_dest says. */
static enum seg_pull seg_pull(unsigned int seg, unsigned int clsid, int p,
                              const struct seg_limits *lim)
{
    struct lru *l = items_seg_lru(seg, clsid, p);
    rel_time_t now = mc_now();
    pthread_mutex_lock(&l->lock);
    item *it = l->tail;
    for (int n = 0; it != NULL && n < SEG_SEARCH_DEPTH; n++, it = it->prev) {
        if (it == &items_crawler)
            continue;
        uint32_t hv = item_hash(ITEM_key(it), it->nkey);
        if (!item_trylock(hv))
            continue;
        if (item_is_dead(it, NULL)) {
            items_count_dead(clsid, it, false);
            items_unlink_locked(l, it, hv);
            pthread_mutex_unlock(&l->lock);
            item_release(it);
            item_unlock(hv);
            return PULL_RECLAIMED;
        }
        unsigned int dst = seg_dest(l, seg, it, lim, now);
        if (dst == LRU_SEGS) {
            item_unlock(hv);
            break;
        }
        if (dst == LRU_SEG_WARM && (it->it_flags & ITEM_ACTIVE))
            it->it_flags &= (uint16_t)~ITEM_ACTIVE;
        if (dst == seg) {
            /* An active WARM item: another lap in WARM. */
            items_lru_unlink_locked(l, it);
            items_lru_link_locked(l, it);
            CLS_INCR(clsid, moves_within_lru);
            pthread_mutex_unlock(&l->lock);
            item_unlock(hv);
            return PULL_OTHER;
        }
        pthread_mutex_unlock(&l->lock);
        seg_move(it, dst, 0);
        count_move(clsid, dst);
        item_unlock(hv);
        return dst == LRU_SEG_COLD ? PULL_TO_COLD : PULL_OTHER;
    }
    pthread_mutex_unlock(&l->lock);
    return PULL_NOTHING;
}

bool items_seg_refill_cold(unsigned int clsid, int p)
{
    if (!items_seg_lists())
        return false;
    const struct seg_limits forced = { .flat = !items_seg_mode() };
    for (int i = 0; i < SEG_SEARCH_DEPTH * 2; i++) {
        enum seg_pull r = seg_pull(LRU_SEG_HOT, clsid, p, &forced);
        if (r == PULL_NOTHING)
            r = seg_pull(LRU_SEG_WARM, clsid, p, &forced);
        if (r == PULL_NOTHING)
            return false;
        if (r != PULL_OTHER)
            return true;
    }
    return false;
}

/* Bytes of queue seg of (clsid, p), and the access time of its tail. */
static uint64_t seg_bytes(unsigned int seg, unsigned int clsid, int p,
                          rel_time_t *tail_time)
{
    struct lru *l = items_seg_lru(seg, clsid, p);
    pthread_mutex_lock(&l->lock);
    uint64_t b = l->bytes;
    item *t = l->tail;
    while (t == &items_crawler)
        t = t->prev;
    if (tail_time != NULL)
        *tail_time = t != NULL ? t->time : 0;
    pthread_mutex_unlock(&l->lock);
    return b;
}

/* factor times cold_age, capped at the longest age (a large factor from
 * `lru tune` means "never by age"). */
static rel_time_t seg_age(rel_time_t cold_age, double factor)
{
    double age = (double)cold_age * factor;
    return age < (double)UINT32_MAX ? (rel_time_t)age : UINT32_MAX;
}

/* The bounds of (clsid, p) now: `lru tune` may change the settings at any
 * time. */
static void seg_limits_now(unsigned int clsid, int p, struct seg_limits *lim)
{
    rel_time_t now = mc_now(), cold_tail;
    lim->flat = !items_seg_mode();
    lim->total = seg_bytes(LRU_SEG_COLD, clsid, p, &cold_tail) +
                 seg_bytes(LRU_SEG_HOT, clsid, p, NULL) +
                 seg_bytes(LRU_SEG_WARM, clsid, p, NULL);
    rel_time_t cold_age = cold_tail != 0 && now > cold_tail ? now - cold_tail : 0;
    double hot_factor, warm_factor;
    __atomic_load(&settings.hot_max_factor, &hot_factor, __ATOMIC_RELAXED);
    __atomic_load(&settings.warm_max_factor, &warm_factor, __ATOMIC_RELAXED);
    lim->hot_age = seg_age(cold_age, hot_factor);
    lim->warm_age = seg_age(cold_age, warm_factor);
    lim->hot_pct = __atomic_load_n(&settings.hot_lru_pct, __ATOMIC_RELAXED);
    lim->warm_pct = __atomic_load_n(&settings.warm_lru_pct, __ATOMIC_RELAXED);
}

/* Returns the items it moved or dropped. */
static unsigned int juggle_one(unsigned int clsid, int p)
{
    struct seg_limits lim;
    unsigned int done = 0;
    seg_limits_now(clsid, p, &lim);
    /* TEMP only loses its dead items, also after `lru temp_ttl -1`. */
    for (int i = 0; i < SEG_JUGGLE_MAX; i++, done++)
        if (seg_pull(LRU_SEG_TEMP, clsid, p, &lim) == PULL_NOTHING)
            break;
    if (lim.total == 0)
        return done;
    for (int i = 0; i < SEG_JUGGLE_MAX; i++) {
        int moved = (seg_pull(LRU_SEG_HOT, clsid, p, &lim) != PULL_NOTHING) +
                    (seg_pull(LRU_SEG_WARM, clsid, p, &lim) != PULL_NOTHING) +
                    (seg_pull(LRU_SEG_COLD, clsid, p, &lim) != PULL_NOTHING);
        if (moved == 0)
            break;
        done += (unsigned int)moved;
    }
    return done;
}

unsigned int items_seg_juggle(void)
{
    unsigned int done = 0;
    if (!items_seg_lists())
        return 0;
    for (unsigned int c = 1; c <= slabs_nclasses(); c++)
        for (int p = 0; p < items_npart; p++)
            done += juggle_one(c, p);
    return done;
}

/* ---- Stats. ---------------------------------------------------------- */

void items_seg_class_stats(unsigned int clsid, struct item_seg_stats *out)
{
    rel_time_t now = mc_now();
    memset(out, 0, sizeof(*out));
    for (unsigned int s = 0; s < LRU_SEGS; s++) {
        rel_time_t oldest = now;
        for (int p = 0; p < items_npart; p++) {
            struct lru *l = items_seg_lru(s, clsid, p);
            pthread_mutex_lock(&l->lock);
            out->number[s] += l->count;
            out->bytes += l->bytes;
            item *t = l->tail;
            while (t == &items_crawler)
                t = t->prev;
            if (t != NULL && t->time < oldest)
                oldest = t->time;
            pthread_mutex_unlock(&l->lock);
        }
        out->age[s] = now - oldest;
        out->hits[s] = __atomic_load_n(&seg_stats[clsid].hits[s], __ATOMIC_RELAXED);
    }
    out->moves_to_cold = __atomic_load_n(&seg_stats[clsid].moves_to_cold, __ATOMIC_RELAXED);
    out->moves_to_warm = __atomic_load_n(&seg_stats[clsid].moves_to_warm, __ATOMIC_RELAXED);
}

void items_seg_stats_reset(void)
{
    for (int c = 0; c < MAX_SLAB_CLASSES; c++) {
        __atomic_store_n(&seg_stats[c].moves_to_cold, 0, __ATOMIC_RELAXED);
        __atomic_store_n(&seg_stats[c].moves_to_warm, 0, __ATOMIC_RELAXED);
        for (int s = 0; s < LRU_SEGS; s++)
            __atomic_store_n(&seg_stats[c].hits[s], 0, __ATOMIC_RELAXED);
    }
}

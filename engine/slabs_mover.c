/*
 * slabs_mover.c - the DRAM slab page mover and its automove policy: moving
 * a page from one slab class to another (or to the global pool), and the
 * rules that decide when (memcached's automove, the meta tuples' reserve,
 * a class that failed to allocate while a lower tier is configured, the
 * tiers' watchdog).  The design and the lock order: the top of slabs.c.
 *
 * Threads: the maintainer (or a test) runs the mover; `slabs reassign`
 * queues a request from any thread.
 */
#include "config.h"

#include <pthread.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#include "engine/item_layout.h"
#include "base/settings.h"
#include "engine/slabs.h"
#include "engine/slabs_int.h"
#include "base/stats.h"

/* ---- Page mover. ------------------------------------------------------ */

/* min_pages: the pages src must hold to give one (2 but for the last
 * resort of automove_refill_reserve_locked). */
static enum slabs_reassign_result move_check(unsigned int src,
                                             unsigned int dst,
                                             unsigned int min_pages)
{
    if (src < 1 || src > slab_nclasses || dst > slab_nclasses ||
        !slab_classes[src].movable || (dst != 0 && !slab_classes[dst].movable))
        return SLABS_REASSIGN_BADCLASS;
    if (src == dst)
        return SLABS_REASSIGN_SAME;
    if (__atomic_load_n(&slab_classes[src].total_pages, __ATOMIC_RELAXED) < min_pages)
        return SLABS_REASSIGN_NOSPARE;
    return SLABS_REASSIGN_OK;
}

/* src's mapped active page with the fewest used chunks, the oldest on a
 * tie; the last aborted page only if there is no other.  run_lock. */
static struct slab_page *move_pick_page(struct slab_class *c,
                                        unsigned int min_pages)
{
    struct slab_page *best = NULL;
    uint32_t best_used = UINT32_MAX;
    bool best_aborted = true;
    pthread_mutex_lock(&c->pages_lock);
    for (size_t i = 0; c->npages >= min_pages && i < c->npages; i++) {
        struct slab_page *pg = c->pages[i];
        if (!pg->mapped ||
            __atomic_load_n(&pg->state, __ATOMIC_RELAXED) != PAGE_ACTIVE)
            continue;
        uint32_t u = __atomic_load_n(&pg->used, __ATOMIC_RELAXED);
        bool aborted = pg == slab_run.last_aborted;
        if (best == NULL || (best_aborted && !aborted) ||
            (aborted == best_aborted && u < best_used)) {
            best = pg;
            best_used = u;
            best_aborted = aborted;
        }
    }
    pthread_mutex_unlock(&c->pages_lock);
    return best;
}

/* Moves the draining page's free chunks out of sp's free list and end
 * region.  One walk of sp's free list under its lock. */
static void move_purge_part(struct slab_class *c, struct slab_part *sp,
                            char *base)
{
    pthread_mutex_lock(&sp->lock);
    pthread_mutex_lock(&slab_drain.lock);
    item **pp = &sp->free_list;
    while (*pp != NULL) {
        item *it = *pp;
        if (slab_page_base_of(it) == base) {
            *pp = it->h_next;
            sp->nfree--;
            slab_drain_mark_locked((char *)it);
        } else {
            pp = &it->h_next;
        }
    }
    if (sp->end_free > 0 && slab_page_base_of(sp->end_ptr) == base) {
        for (; sp->end_free > 0; sp->end_free--, sp->end_ptr += c->size)
            slab_drain_mark_locked(sp->end_ptr);
    }
    pthread_mutex_unlock(&slab_drain.lock);
    pthread_mutex_unlock(&sp->lock);
}

static bool move_start_ex(unsigned int src, unsigned int dst,
                          unsigned int min_pages)
{
    if (min_pages < 1 || slab_run.active ||
        move_check(src, dst, min_pages) != SLABS_REASSIGN_OK)
        return false;
    struct slab_class *c = &slab_classes[src];
    struct slab_page *pg = move_pick_page(c, min_pages);
    if (pg == NULL)
        return false;
    uint64_t *fm = calloc((c->perslab + 63) / 64, sizeof(*fm));
    if (fm == NULL)
        return false;

    pthread_mutex_lock(&slab_drain.lock);
    slab_drain.page = pg;
    slab_drain.freemap = fm;
    slab_drain.nfree = 0;
    slab_drain.clsid = src;
    slab_drain.dst = dst;
    slab_drain.size = c->size;
    __atomic_store_n(&pg->state, PAGE_DRAINING, __ATOMIC_RELAXED);
    __atomic_store_n(&slab_drain_base, pg->base, __ATOMIC_RELAXED);
    pthread_mutex_unlock(&slab_drain.lock);
    for (int p = 0; p < slab_npart; p++)
        move_purge_part(c, &c->part[p], pg->base);

    slab_run.active = true;
    slab_run.src = src;
    slab_run.dst = dst;
    slab_run.page = pg;
    slab_run.cursor = 0;
    slab_run.passes = 0;
    __atomic_store_n(&slab_mstats.running, 1, __ATOMIC_RELAXED);
    return true;
}

static bool move_start_locked(unsigned int src, unsigned int dst)
{
    return move_start_ex(src, dst, 2);
}

bool slabs_reassign_start(unsigned int src, unsigned int dst)
{
    pthread_mutex_lock(&slab_run_lock);
    bool ok = move_start_locked(src, dst);
    pthread_mutex_unlock(&slab_run_lock);
    return ok;
}

/* Ends the drain; returns its freemap (the caller frees it).  run_lock. */
static uint64_t *move_end_drain(enum page_state state)
{
    pthread_mutex_lock(&slab_drain.lock);
    uint64_t *fm = slab_drain.freemap;
    __atomic_store_n(&slab_drain_base, NULL, __ATOMIC_RELAXED);
    __atomic_store_n(&slab_drain.page->state, state, __ATOMIC_RELAXED);
    slab_drain.page = NULL;
    slab_drain.freemap = NULL;
    slab_drain.nfree = 0;
    pthread_mutex_unlock(&slab_drain.lock);
    return fm;
}

static void move_done(void)
{
    slab_run.active = false;
    slab_run.page = NULL;
    __atomic_store_n(&slab_mstats.running, 0, __ATOMIC_RELAXED);
}

/* Every chunk is free: the page goes to dst or to the pool.  run_lock. */
static void move_finish_locked(void)
{
    struct slab_page *pg = slab_run.page;
    struct slab_class *src = &slab_classes[slab_run.src];
    free(move_end_drain(slab_run.dst != 0 ? PAGE_ACTIVE : PAGE_POOLED));
    slab_class_remove_page(src, pg);
    memset(pg->base, 0, slab_std_page);
    __atomic_store_n(&pg->used, 0, __ATOMIC_RELAXED);

    /* A meta tuple class that borrowed a page past -m for this drain
     * (charge_page) is paid back with it, whatever dst wanted. */
    bool repay = __atomic_exchange_n(&slab_borrowed, false, __ATOMIC_RELAXED);
    struct slab_class *dst = slab_run.dst != 0 && !repay ? &slab_classes[slab_run.dst] : NULL;
    if (repay)
        STATS_INCR(&slab_mstats, repaid);
    if (dst != NULL && slab_class_add_page(dst, pg)) {
        int p = __atomic_load_n(&dst->want_part, __ATOMIC_RELAXED) % slab_npart;
        pthread_mutex_lock(&dst->part[p].lock);
        slab_part_install_locked(dst, &dst->part[p], pg->base, slab_run.dst);
        pthread_mutex_unlock(&dst->part[p].lock);
    } else {
        /* Below a lowered limit the page's memory goes back to the
         * system; the page stays pooled, zero when touched again. */
        bool release = repay || __atomic_load_n(&slab_shrinking, __ATOMIC_RELAXED);
        if (release)
            (void)madvise(pg->base, slab_std_page, MADV_DONTNEED);
        slab_pool_put(pg, release);
        __atomic_fetch_sub(&slab_mem_malloced, slab_std_page, __ATOMIC_RELAXED);
        STATS_INCR(&slab_mstats, moved_to_pool);
    }
    STATS_INCR(&slab_mstats, moved);
    slab_run.last_aborted = NULL;
    move_done();
}

/* Gives up: the page's free chunks go back on src's free lists (spread
 * over the partitions) and it is active again.  run_lock. */
static void move_abort_locked(void)
{
    struct slab_page *pg = slab_run.page;
    struct slab_class *c = &slab_classes[slab_run.src];
    uint64_t *fm = move_end_drain(PAGE_ACTIVE);
    for (int p = 0; p < slab_npart; p++) {
        struct slab_part *sp = &c->part[p];
        pthread_mutex_lock(&sp->lock);
        for (unsigned int i = (unsigned int)p; i < c->perslab;
             i += (unsigned int)slab_npart) {
            if ((fm[i / 64] & ((uint64_t)1 << (i % 64))) == 0)
                continue;
            item *it = (item *)(pg->base + (size_t)i * c->size);
            it->slabs_clsid = (uint8_t)slab_run.src;
            it->partition = (uint8_t)p;
            slab_chunk_push_locked(sp, it);
        }
        pthread_mutex_unlock(&sp->lock);
    }
    free(fm);
    STATS_INCR(&slab_mstats, aborted);
    slab_run.last_aborted = pg;
    move_done();
}

/* Bits of freemap word w that stand for chunks of the page. */
static uint64_t word_mask(unsigned int first, unsigned int perslab)
{
    unsigned int n = perslab - first;
    return n >= 64 ? ~(uint64_t)0 : ((uint64_t)1 << n) - 1;
}

/*
 * One stretch of the current pass: at most `budget` units, one per chunk
 * visited or per 64 free chunks skipped at once.  Ends at the end of a
 * pass.  No lock held but run_lock.  Returns the units used.
 */
static int move_sweep(int budget)
{
    struct slab_class *c = &slab_classes[slab_run.src];
    char *base = slab_run.page->base;
    int used = 0;
    while (used < budget && slab_run.cursor < c->perslab) {
        unsigned int i = slab_run.cursor;
        uint64_t w = __atomic_load_n(&slab_drain.freemap[i / 64], __ATOMIC_RELAXED);
        used++;
        if (i % 64 == 0 && w == word_mask(i, c->perslab)) {
            slab_run.cursor += 64;
            continue;
        }
        slab_run.cursor++;
        if (w & ((uint64_t)1 << (i % 64)))
            continue;
        void *chunk = base + (size_t)i * c->size;
        switch (slab_chunk_evictor != NULL ? slab_chunk_evictor(chunk) : CHUNK_BUSY) {
        case CHUNK_EVICTED:
            STATS_INCR(&slab_mstats, evictions);
            STATS_INCR(&slab_mstats, evictions_nomem);
            break;
        case CHUNK_RESCUED:
            STATS_INCR(&slab_mstats, evictions);
            STATS_INCR(&slab_mstats, rescues);
            break;
        case CHUNK_RECLAIMED:
            STATS_INCR(&slab_mstats, evictions);
            STATS_INCR(&slab_mstats, inline_reclaim);
            break;
        case CHUNK_BUSY:
            STATS_INCR(&slab_mstats, busy_items);
            break;
        case CHUNK_FREE:
            /* Being allocated or being freed: its slabs_free (or a later
             * eviction) will settle it. */
            break;
        }
    }
    if (slab_run.cursor >= c->perslab) {
        slab_run.cursor = 0;
        slab_run.passes++;
    }
    return used;
}

static bool move_drained(void)
{
    pthread_mutex_lock(&slab_drain.lock);
    bool done = slab_drain.nfree == slab_classes[slab_drain.clsid].perslab;
    pthread_mutex_unlock(&slab_drain.lock);
    return done;
}

int slabs_reassign_step(int budget)
{
    if (budget < 1)
        budget = 1;
    pthread_mutex_lock(&slab_run_lock);
    if (!slab_run.active) {
        uint32_t w = __atomic_exchange_n(&slab_req_word, 0, __ATOMIC_RELAXED);
        if (w != 0 && move_start_locked((w >> 8) & 0xff, w & 0xff))
            STATS_INCR(&slab_mstats, by_request);
    }
    int used = 0;
    if (slab_run.active) {
        if (!move_drained())
            used = move_sweep(budget);
        if (move_drained())
            move_finish_locked();
        else if (slab_run.passes >= SLABS_MOVE_MAX_PASSES)
            move_abort_locked();
        if (used == 0)
            used = 1;
    }
    pthread_mutex_unlock(&slab_run_lock);
    return used;
}

/* `slabs reassign 0 dst`: source 0 is memcached's global page pool, the
 * memory no class holds, which here is the pooled pages and the -m budget
 * not yet spent.  dst gets one page of it at once (there is nothing to
 * drain).  As memcached's pool keeps its last page, NOSPARE while less
 * than two pages are left. */
static enum slabs_reassign_result pool_give(unsigned int dst)
{
    if (dst == 0)
        return SLABS_REASSIGN_SAME;
    if (dst > slab_nclasses || !slab_classes[dst].movable)
        return SLABS_REASSIGN_BADCLASS;
    if (__atomic_load_n(&slab_mstats.running, __ATOMIC_RELAXED) != 0)
        return SLABS_REASSIGN_RUNNING;
    size_t limit = __atomic_load_n(&slab_mem_limit, __ATOMIC_RELAXED);
    size_t resv = __atomic_load_n(&slab_reserve_bytes, __ATOMIC_RELAXED);
    size_t used = __atomic_load_n(&slab_mem_malloced, __ATOMIC_RELAXED);
    if (limit != 0 ? used + resv + 2 * slab_std_page > limit
                   : __atomic_load_n(&slab_pool_pages, __ATOMIC_RELAXED) < 2)
        return SLABS_REASSIGN_NOSPARE;
    struct slab_class *c = &slab_classes[dst];
    bool grace = false;
    struct slab_page *pg = slab_new_page(c, false, &grace);
    if (pg != NULL) {
        int p = __atomic_load_n(&c->want_part, __ATOMIC_RELAXED) % slab_npart;
        pthread_mutex_lock(&c->part[p].lock);
        slab_part_install_locked(c, &c->part[p], pg->base, dst);
        pthread_mutex_unlock(&c->part[p].lock);
    }
    if (grace)
        __atomic_store_n(&c->grace_pending, false, __ATOMIC_RELEASE);
    if (pg == NULL)
        return SLABS_REASSIGN_NOSPARE;
    STATS_INCR(&slab_mstats, moved);
    STATS_INCR(&slab_mstats, by_request);
    return SLABS_REASSIGN_OK;
}

enum slabs_reassign_result slabs_reassign_request(unsigned int src,
                                                  unsigned int dst)
{
    if (src == 0)
        return pool_give(dst);
    enum slabs_reassign_result r = move_check(src, dst, 2);
    if (r != SLABS_REASSIGN_OK)
        return r;
    if (__atomic_load_n(&slab_mstats.running, __ATOMIC_RELAXED) != 0)
        return SLABS_REASSIGN_RUNNING;
    uint32_t expect = 0;
    uint32_t w = (uint32_t)1 << 16 | src << 8 | dst;
    if (!__atomic_compare_exchange_n(&slab_req_word, &expect, w, false,
                                     __ATOMIC_SEQ_CST, __ATOMIC_RELAXED))
        return SLABS_REASSIGN_RUNNING;
    slabs_kick();
    return SLABS_REASSIGN_OK;
}

/* ---- Automove. ------------------------------------------------------------
 *
 * Each tick (a call, ~50 ms) first records per class whether slabs_alloc
 * failed since the last tick (am_hot / am_quiet count consecutive ticks
 * with / without failures).  Then, only when no move is running or queued,
 * -m is set and spent and the pool is empty, it starts at most one move:
 *   needy class: movable, failed in the last AUTOMOVE_HOT_TICKS ticks; the
 *     one with the most failures in the last tick.
 *   donor, free rule (memcached automove=1): another movable class with at
 *     least 2 pages and AUTOMOVE_FREE_HALF_PAGES / 2 pages' worth of free
 *     chunks; the one with the most.
 *   donor, demand rule (fallback): another movable class with at least 2
 *     pages that has not failed for AUTOMOVE_QUIET_TICKS ticks; the one
 *     with the most pages.
 * Cost per tick: one pass over the classes, plus one lock of each
 * partition of each candidate donor for the free rule.
 */

static void automove_observe_locked(void)
{
    for (unsigned int i = 1; i <= slab_nclasses; i++) {
        struct slab_class *c = &slab_classes[i];
        uint64_t f = __atomic_load_n(&c->alloc_fails, __ATOMIC_RELAXED);
        c->am_last = f - c->am_seen;
        c->am_seen = f;
        if (c->am_last != 0) {
            c->am_hot++;
            c->am_quiet = 0;
        } else {
            c->am_hot = 0;
            if (c->am_quiet < UINT32_MAX)
                c->am_quiet++;
        }
    }
}

static uint64_t class_free_chunks(struct slab_class *c)
{
    uint64_t n = 0;
    for (int p = 0; p < slab_npart; p++) {
        pthread_mutex_lock(&c->part[p].lock);
        n += c->part[p].nfree + c->part[p].end_free;
        pthread_mutex_unlock(&c->part[p].lock);
    }
    return n;
}

static unsigned int automove_pick_donor(unsigned int dst)
{
    unsigned int by_free = 0, by_demand = 0;
    uint64_t most_free = 0, most_pages = 0;
    for (unsigned int i = 1; i <= slab_nclasses; i++) {
        struct slab_class *c = &slab_classes[i];
        uint64_t pages = __atomic_load_n(&c->total_pages, __ATOMIC_RELAXED);
        if (i == dst || !c->movable || pages < 2)
            continue;
        uint64_t fr = class_free_chunks(c);
        if (fr * 2 >= (uint64_t)c->perslab * AUTOMOVE_FREE_HALF_PAGES &&
            fr / c->perslab >= most_free) {
            by_free = i;
            most_free = fr / c->perslab;
        }
        /* With a lower tier, a data class short of pages is the normal
         * state (its items move down); taking pages from the meta tuples'
         * classes for it would only starve the moves down. */
        if (c->am_quiet >= AUTOMOVE_QUIET_TICKS && pages > most_pages &&
            !slab_index_class(c)) {
            by_demand = i;
            most_pages = pages;
        }
    }
    return by_free != 0 ? by_free : by_demand;
}

/*
 * The last resort of the reserve refill: every class holds one page (a
 * small -m over many value sizes: each class took its one page, memcached's
 * grace, and nothing is left), and the meta tuples' busiest class has less
 * than a quarter of a page free.  Then the data class whose one page has
 * the fewest chunks in use gives it to that class: its items move down a
 * tier (item_evict_chunk), and its next stores go to a lower tier until a
 * page mover gives it a page again.  Without this, meta tuples could not
 * grow while every data class kept its page, and every store past that
 * point waited for room that never came.  run_lock held.
 */
static bool refill_from_last_pages_locked(void)
{
    unsigned int src = 0, dst = 0;
    uint64_t fewest = UINT64_MAX, most_used = 0;
    for (unsigned int i = 1; i <= slab_nclasses; i++) {
        struct slab_class *c = &slab_classes[i];
        uint64_t pages = __atomic_load_n(&c->total_pages, __ATOMIC_RELAXED);
        uint64_t used = __atomic_load_n(&c->used_chunks, __ATOMIC_RELAXED);
        if (!c->movable || pages == 0)
            continue;
        if (slab_index_class(c)) {
            if (used > most_used && class_free_chunks(c) * 4 < c->perslab) {
                dst = i;
                most_used = used;
            }
        } else if (pages == 1 && used < fewest) {
            src = i;
            fewest = used;
        }
    }
    return src != 0 && dst != 0 && move_start_ex(src, dst, 1);
}

/*
 * With a reserve set (a lower tier is configured), keeps it available: when
 * the unassigned -m budget falls below the reserve, moves the page with the
 * fewest used chunks of the class with the most free chunk bytes back to
 * the global pool: a data class with at least a quarter of a page of free
 * chunks, or a meta tuple class with AUTOMOVE_FREE_HALF_PAGES / 2 pages'
 * worth (items leaving NVM for SSD free NVM meta tuples that the SSD ones,
 * a smaller class, cannot use; the drained page's meta tuples move to
 * other chunks of their class, which has room for them).  Without such a
 * class, the biggest data class gives a page.  Meta tuples take the
 * reserve; the items left in the drained page go to item_evict_chunk,
 * which lets a lower tier keep them (item_tier_ops.demote).
 * run_lock held.
 */
static bool automove_refill_reserve_locked(void)
{
    size_t resv = __atomic_load_n(&slab_reserve_bytes, __ATOMIC_RELAXED);
    size_t limit = __atomic_load_n(&slab_mem_limit, __ATOMIC_RELAXED);
    if (limit == 0 || slab_run.active)
        return false;
    size_t used = __atomic_load_n(&slab_mem_malloced, __ATOMIC_RELAXED);
    if (slab_shrinking && used <= limit)
        __atomic_store_n(&slab_shrinking, false, __ATOMIC_RELAXED);
    /* A lowered limit (cache_memlimit) drains pages the same way, down to
     * the new limit. */
    if (!slab_shrinking && (resv == 0 || used + resv <= limit))
        return false;
    unsigned int donor = 0, biggest = 0;
    uint64_t most = 0, most_pages = 0;
    for (unsigned int i = 1; i <= slab_nclasses; i++) {
        struct slab_class *c = &slab_classes[i];
        uint64_t pages = __atomic_load_n(&c->total_pages, __ATOMIC_RELAXED);
        if (!c->movable || pages < 2)
            continue;
        uint64_t fr = class_free_chunks(c);
        bool index = slab_index_class(c);
        bool spare = index
            ? fr * 2 >= (uint64_t)c->perslab * AUTOMOVE_FREE_HALF_PAGES
            : fr * 4 >= c->perslab;
        if (spare && fr * c->size > most) {
            donor = i;
            most = fr * c->size;
        }
        if (!index && pages > most_pages) {
            biggest = i;
            most_pages = pages;
        }
    }
    /* Without a class that has free chunks to spare (new items take each
     * chunk the evictors free), drain a page of the biggest data class:
     * its items move down on the reserve that is left. */
    if (donor == 0)
        donor = biggest;
    if (donor != 0)
        return move_start_locked(donor, 0);
    return refill_from_last_pages_locked();
}

bool slabs_adjust_mem_limit(size_t bytes)
{
    if (slab_prealloc_base != NULL || bytes == 0)
        return false;
    pthread_mutex_lock(&slab_run_lock);
    __atomic_store_n(&slab_mem_limit, bytes, __ATOMIC_RELAXED);
    /* limit_maxbytes in `stats` shows it, as memcached's does. */
    __atomic_store_n(&settings.maxbytes, bytes, __ATOMIC_RELAXED);
    __atomic_store_n(&slab_shrinking, __atomic_load_n(&slab_mem_malloced, __ATOMIC_RELAXED) > bytes,
                     __ATOMIC_RELAXED);
    pthread_mutex_unlock(&slab_run_lock);
    return true;
}

/*
 * With a reserve set (a lower tier is configured), a class whose
 * allocation failed in each of the last AUTOMOVE_HOT_TICKS ticks while the
 * budget left to unreserved allocations is spent gets a page from the
 * class with the most free chunk bytes among those with
 * AUTOMOVE_FREE_HALF_PAGES / 2 pages' worth of free chunks that did not
 * fail in the last tick (the free rule of automove, without its wait for
 * -m to be spent to the last page: the reserve keeps unreserved
 * allocations two pages short of it).  This runs whatever -o slab_automove says: with a
 * lower tier a class that gets no page has no path down for what it
 * holds (doc/design.md, "Every class gets room").  run_lock held.
 */
static bool automove_serve_demand_locked(void)
{
    size_t resv = __atomic_load_n(&slab_reserve_bytes, __ATOMIC_RELAXED);
    size_t limit = __atomic_load_n(&slab_mem_limit, __ATOMIC_RELAXED);
    if (resv == 0 || limit == 0 || slab_run.active ||
        __atomic_load_n(&slab_req_word, __ATOMIC_RELAXED) != 0 ||
        __atomic_load_n(&slab_mem_malloced, __ATOMIC_RELAXED) + slab_std_page + resv <= limit)
        return false;
    unsigned int dst = 0;
    uint64_t most = 0;
    for (unsigned int i = 1; i <= slab_nclasses; i++) {
        struct slab_class *c = &slab_classes[i];
        if (c->movable && c->am_hot >= AUTOMOVE_HOT_TICKS && c->am_last > most) {
            dst = i;
            most = c->am_last;
        }
    }
    if (dst == 0)
        return false;
    unsigned int donor = 0;
    uint64_t most_bytes = 0;
    for (unsigned int i = 1; i <= slab_nclasses; i++) {
        struct slab_class *c = &slab_classes[i];
        if (i == dst || !c->movable || c->am_last != 0 ||
            __atomic_load_n(&c->total_pages, __ATOMIC_RELAXED) < 2)
            continue;
        uint64_t fr = class_free_chunks(c);
        if (fr * 2 >= (uint64_t)c->perslab * AUTOMOVE_FREE_HALF_PAGES &&
            fr * c->size > most_bytes) {
            donor = i;
            most_bytes = fr * c->size;
        }
    }
    return donor != 0 && move_start_locked(donor, dst);
}

bool slabs_has_spare(void)
{
    for (unsigned int i = 1; i <= slab_nclasses; i++) {
        struct slab_class *c = &slab_classes[i];
        if (c->movable && __atomic_load_n(&c->total_pages, __ATOMIC_RELAXED) >= 2 &&
            class_free_chunks(c) * 2 >= (uint64_t)c->perslab * AUTOMOVE_FREE_HALF_PAGES)
            return true;
    }
    return false;
}

bool slabs_watchdog_move(void)
{
    pthread_mutex_lock(&slab_run_lock);
    bool started = false;
    size_t limit = __atomic_load_n(&slab_mem_limit, __ATOMIC_RELAXED);
    if (!slab_run.active && limit != 0) {
        /* The class that failed most recently, by its count of failures
         * since the last automove tick. */
        unsigned int dst = 0, donor = 0;
        uint64_t most = 0, most_bytes = 0, most_pages = 0;
        for (unsigned int i = 1; i <= slab_nclasses; i++) {
            struct slab_class *c = &slab_classes[i];
            uint64_t f = __atomic_load_n(&c->alloc_fails, __ATOMIC_RELAXED) - c->am_seen;
            if (c->movable && f > most) {
                dst = i;
                most = f;
            }
        }
        /* The cheapest page to free: the class with the most free chunk
         * bytes, else the data class with the most pages (its items move
         * down a tier). */
        unsigned int biggest = 0;
        for (unsigned int i = 1; dst != 0 && i <= slab_nclasses; i++) {
            struct slab_class *c = &slab_classes[i];
            uint64_t pages = __atomic_load_n(&c->total_pages, __ATOMIC_RELAXED);
            if (i == dst || !c->movable || pages < 2)
                continue;
            uint64_t fr = class_free_chunks(c);
            if (fr >= c->perslab / 4 && fr * c->size > most_bytes) {
                donor = i;
                most_bytes = fr * c->size;
            }
            if (!slab_index_class(c) && pages > most_pages) {
                biggest = i;
                most_pages = pages;
            }
        }
        if (donor == 0)
            donor = biggest;
        started = donor != 0 && move_start_locked(donor, dst);
        if (started)
            STATS_INCR(&slab_mstats, by_watchdog);
    }
    pthread_mutex_unlock(&slab_run_lock);
    return started;
}

void slabs_reserve_step(void)
{
    pthread_mutex_lock(&slab_run_lock);
    automove_observe_locked();
    if (automove_refill_reserve_locked()) {
        STATS_INCR(&slab_mstats, automoves);
        STATS_INCR(&slab_mstats, by_reserve);
    } else if (automove_serve_demand_locked()) {
        STATS_INCR(&slab_mstats, automoves);
        STATS_INCR(&slab_mstats, by_demand);
    }
    pthread_mutex_unlock(&slab_run_lock);
}

/*
 * memcached's free rule, without a lower tier (the reserve rules above
 * return pages then): a movable class that has held at least
 * AUTOMOVE_FREE_HALF_PAGES / 2 pages' worth of free chunks for
 * AUTOMOVE_FREE_TICKS ticks in a row gives its emptiest page back to the
 * global pool, where any class's next page comes from.  The page's live
 * items are rescued into free chunks of their class (item_evict_chunk),
 * which that much free room holds.  One such move per tick at most, and
 * none while another move runs or waits.  run_lock held.
 */
static bool automove_free_to_pool_locked(void)
{
    if (__atomic_load_n(&slab_reserve_bytes, __ATOMIC_RELAXED) != 0 || slab_run.active ||
        __atomic_load_n(&slab_req_word, __ATOMIC_RELAXED) != 0)
        return false;
    unsigned int donor = 0;
    uint64_t most = 0;
    for (unsigned int i = 1; i <= slab_nclasses; i++) {
        struct slab_class *c = &slab_classes[i];
        uint64_t pages = __atomic_load_n(&c->total_pages, __ATOMIC_RELAXED);
        bool spare = c->movable && pages >= 2 &&
            class_free_chunks(c) * 2 >= (uint64_t)c->perslab * AUTOMOVE_FREE_HALF_PAGES;
        c->am_free_ticks = spare ? c->am_free_ticks + 1 : 0;
        if (spare && c->am_free_ticks >= AUTOMOVE_FREE_TICKS && pages > most) {
            donor = i;
            most = pages;
        }
    }
    return donor != 0 && move_start_locked(donor, 0);
}

void slabs_automove_step(void)
{
    pthread_mutex_lock(&slab_run_lock);
    automove_observe_locked();
    if (automove_refill_reserve_locked()) {
        STATS_INCR(&slab_mstats, automoves);
        STATS_INCR(&slab_mstats, by_reserve);
        pthread_mutex_unlock(&slab_run_lock);
        return;
    }
    if (automove_serve_demand_locked()) {
        STATS_INCR(&slab_mstats, automoves);
        STATS_INCR(&slab_mstats, by_demand);
        pthread_mutex_unlock(&slab_run_lock);
        return;
    }
    size_t limit = __atomic_load_n(&slab_mem_limit, __ATOMIC_RELAXED);
    bool spent = limit != 0 &&
        __atomic_load_n(&slab_mem_malloced, __ATOMIC_RELAXED) + slab_std_page > limit;
    if (!slab_run.active && __atomic_load_n(&slab_req_word, __ATOMIC_RELAXED) == 0 &&
        spent && __atomic_load_n(&slab_pool_pages, __ATOMIC_RELAXED) == 0) {
        unsigned int dst = 0;
        uint64_t most = 0;
        for (unsigned int i = 1; i <= slab_nclasses; i++) {
            struct slab_class *c = &slab_classes[i];
            if (c->movable && c->am_hot >= AUTOMOVE_HOT_TICKS &&
                c->am_last > most) {
                dst = i;
                most = c->am_last;
            }
        }
        unsigned int src = dst != 0 ? automove_pick_donor(dst) : 0;
        if (src != 0 && move_start_locked(src, dst)) {
            STATS_INCR(&slab_mstats, automoves);
            STATS_INCR(&slab_mstats, by_automove);
        }
    }
    if (automove_free_to_pool_locked()) {
        STATS_INCR(&slab_mstats, automoves);
        STATS_INCR(&slab_mstats, by_automove);
    }
    pthread_mutex_unlock(&slab_run_lock);
}

/* ---- Mover stats. --------------------------------------------------------- */

void slabs_mover_info(struct slabs_mover_info *out)
{
    memset(out, 0, sizeof(*out));
    pthread_mutex_lock(&slab_drain.lock);
    if (slab_drain.page != NULL) {
        out->running = true;
        out->src = slab_drain.clsid;
        out->dst = slab_drain.dst;
        out->page = slab_drain.page->base;
    }
    pthread_mutex_unlock(&slab_drain.lock);
    out->moved = STATS_GET(&slab_mstats, moved);
    out->moved_to_pool = STATS_GET(&slab_mstats, moved_to_pool);
    out->aborted = STATS_GET(&slab_mstats, aborted);
    out->evictions = STATS_GET(&slab_mstats, evictions);
    out->busy_items = STATS_GET(&slab_mstats, busy_items);
    out->automoves = STATS_GET(&slab_mstats, automoves);
    out->by_request = STATS_GET(&slab_mstats, by_request);
    out->by_automove = STATS_GET(&slab_mstats, by_automove);
    out->by_reserve = STATS_GET(&slab_mstats, by_reserve);
    out->by_demand = STATS_GET(&slab_mstats, by_demand);
    out->by_watchdog = STATS_GET(&slab_mstats, by_watchdog);
    out->repaid = STATS_GET(&slab_mstats, repaid);
    out->pool_pages = __atomic_load_n(&slab_pool_pages, __ATOMIC_RELAXED);
}


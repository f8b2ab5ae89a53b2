/*
 * tac/evict.c - evictor threads: keep free DRAM above its watermark by
 * demoting the coldest DRAM items one tier down (to NVM, or to SSD when
 * there is no NVM), and free NVM above its own by moving NVM's coldest
 * tuples to SSD (TaC 5.3).
 *
 * Design.  DRAM is "tight" once the -m page budget left unassigned falls
 * below the watermark (-o dram_free_watermark).  From then on each slab
 * class should keep a reserve of free chunks, its share of the watermark in
 * proportion to its pages.  Evictor e owns the DRAM partitions p with
 * p mod E == e; for every class short of its reserve it demotes items from
 * the cold end of its partitions' LRUs until the class has twice its
 * reserve.  A class whose items would need a meta tuple of the same class
 * gains nothing from demotion and is skipped.
 *
 * NVM is "tight" while its free bytes are below -o nvm_free_watermark (only
 * with an SSD tier); then each round also turns the CLOCK hand of each
 * NVM slot class the evictor owns (nvm_clock.c), moving up to EVICT_BATCH
 * / 4 cold tuples per partition to SSD, packed into the evictor's own SSD
 * buf (tac_ssd_set_writer).
 *
 * Evictor 0 also runs the NVM page mover (mover.c) and the watchdog
 * (watchdog_check below) each round.
 *
 * Bounded work: one round handles at most EVICT_BATCH items per (class,
 * partition).  An evictor sleeps EVICT_IDLE_MS after a round that did
 * nothing, and each further idle round doubles the wait up to
 * EVICT_DOZE_MAX_MS; a worker whose DRAM allocation failed wakes it at
 * once, and so does any failed allocation or page taken by a DRAM class
 * (slabs_kick) while it dozes.  It keeps to EVICT_IDLE_MS while stores wait
 * and while DRAM is tight and its free chunks change from round to round
 * (a fill under way).  An idle server so wakes each evictor about once a
 * second, not a hundred times.
 *
 * Threads: E evictor threads; tac_evictors_wake from any worker.
 */
#include "config.h"

#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#include "base/bg.h"
#include "base/settings.h"
#include "engine/slabs.h"
#include "nvm/nvm.h"
#include "tac/evict.h"
#include "tac/internal.h"
#include "tac/mover.h"
#include "tac/nvm_clock.h"
#include "tac/nvm_tier.h"
#include "tac/place.h"
#include "tac/ssd_tier.h"
#include "base/util.h"

#define EVICT_BATCH 64
#define EVICT_IDLE_MS 10
/* Rounds that do nothing double the wait up to this (bg_idle_wait). */
#define EVICT_DOZE_MAX_MS 1000

struct evictor {
    struct bg bg;
    int id;
    uint64_t free_sig;      /* free chunks over all classes, last round */
    bool free_moved;        /* ... which changed in the last round */
};

static struct evictor *evictors;
static int nevictors;
static int backlog;             /* atomic: classes short of free chunks */
static uint64_t backlog_bytes;  /* atomic: their chunks missing, in bytes */

/* True while the unassigned page budget is below the watermark. */
static bool dram_tight(void)
{
    size_t limit = slabs_mem_limit();
    size_t used = slabs_mem_malloced();
    size_t reserve = TAC_META_RESERVE_PAGES * (size_t)tac.cfg.slab_page_size;
    return used + tac.dram_free_wm + reserve >= limit;
}

/* The free chunks class cls should keep, its share of the watermark. */
static uint64_t class_reserve(const struct slabs_class_info *ci,
                              uint64_t total_pages)
{
    if (ci->total_pages == 0 || total_pages == 0 || ci->chunk_size == 0)
        return 0;
    uint64_t share = (uint64_t)tac.dram_free_wm * ci->total_pages / total_pages;
    uint64_t chunks = share / ci->chunk_size;
    return chunks > 0 ? chunks : 1;
}

/* With NVM low on free space, moves cold tuples of this evictor's NVM
 * slot classes (class c belongs to evictor c mod E) to SSD, by turning
 * their CLOCK hands (nvm_clock.c).  Returns the number moved or freed. */
static int evict_nvm_round(struct evictor *e)
{
    int moved = 0;
    if (tac.nvm == NULL)
        return 0;
    unsigned int n = nvm_nclasses(tac.nvm);
    for (unsigned int c = 1; c <= n && tac_nvm_tight(); c++) {
        if ((int)(c % (unsigned int)nevictors) != e->id)
            continue;
        struct clock_turn t = tac_nvm_clock_evict(
            c, EVICT_BATCH / 4 * tac.cfg.partitions, tac_ssd_from_nvm);
        moved += t.moved + t.freed;
    }
    return moved;
}

/* One round over every class for this evictor's partitions.  Returns the
 * number of items moved. */
static int evict_round(struct evictor *e)
{
    int nvm_moved = evict_nvm_round(e);
    if (e->id == 0)
        nvm_moved += tac_nvm_mover_step();
    nvm_moved += tac_age_round(e->id, nevictors);
    e->free_moved = false;
    if (!dram_tight()) {
        __atomic_store_n(&backlog, 0, __ATOMIC_RELAXED);
        __atomic_store_n(&backlog_bytes, 0, __ATOMIC_RELAXED);
        return nvm_moved;
    }
    unsigned int ncls = slabs_nclasses();
    uint64_t total_pages = 0;
    for (unsigned int c = 1; c <= ncls; c++) {
        struct slabs_class_info ci;
        slabs_class_info(c, &ci);
        total_pages += ci.total_pages;
    }
    int moved = 0, short_classes = 0;
    uint64_t short_bytes = 0, free_sig = 0;
    for (unsigned int c = 1; c <= ncls; c++) {
        struct slabs_class_info ci;
        slabs_class_info(c, &ci);
        uint64_t reserve = class_reserve(&ci, total_pages);
        uint64_t free_now = ci.free_chunks + ci.free_chunks_end;
        free_sig += free_now;
        if (reserve == 0 || free_now >= reserve)
            continue;
        /* Demoting into a meta tuple of the same class frees nothing. */
        if (slabs_clsid(item_compact_size(1)) >= c)
            continue;
        short_classes++;
        short_bytes += (reserve - free_now) * ci.chunk_size;
        for (int p = e->id; p < tac.cfg.partitions; p += nevictors)
            moved += items_demote_tail(c, p, EVICT_BATCH, tac_demote);
    }
    if (e->id == 0) {
        __atomic_store_n(&backlog, short_classes, __ATOMIC_RELAXED);
        __atomic_store_n(&backlog_bytes, short_bytes, __ATOMIC_RELAXED);
    }
    /* Tight DRAM whose free chunks are being taken: the reserves may run
     * short before any allocation fails, so keep looking every
     * EVICT_IDLE_MS (evictor_main). */
    e->free_moved = free_sig != e->free_sig;
    e->free_sig = free_sig;
    return moved + nvm_moved;
}

/*
 * The watchdog (evictor 0, once a round): while a store waits for room
 * (stores_waiting) and nothing has moved for WATCHDOG_NS (no DRAM page
 * move, no item or tuple moved down or between slots, no waiting store
 * done), the tiers are in a state where every path down waits on another.
 * None is known to remain; if one does, the cheapest move breaks it: a
 * DRAM page for the class that failed most, from free chunks or else the
 * biggest data class (slabs_watchdog_move), and with an SSD a batch of
 * NVM's coldest tuples of its biggest class to SSD.  Each such round is
 * counted in tier_watchdog_moves.
 */
#define WATCHDOG_NS 1000000000ull

static uint64_t progress_count(void)
{
    struct slabs_mover_info mi;
    slabs_mover_info(&mi);
    return mi.moved + mi.evictions + STATS_GET(&gstats, store_waits_done) +
           STATS_GET(&tac.stats, evict_dram_to_nvm) +
           STATS_GET(&tac.stats, evict_dram_to_ssd) +
           STATS_GET(&tac.stats, evict_nvm_to_ssd) +
           STATS_GET(&tac.stats, nvm_tuples_moved) +
           STATS_GET(&tac.stats, set_fallback_nvm) +
           STATS_GET(&tac.stats, set_fallback_ssd);
}

static void watchdog_check(void)
{
    static uint64_t last_count, last_change;
    uint64_t now = util_now_ns(), n = progress_count();
    if (n != last_count || STATS_GET(&gstats, stores_waiting) == 0) {
        last_count = n;
        last_change = now;
        return;
    }
    if (now - last_change < WATCHDOG_NS)
        return;
    bool moved = slabs_watchdog_move();
    if (tac.nvm != NULL && tac.ssd != NULL && tac_nvm_spill(0) > 0)
        moved = true;
    if (moved)
        TAC_INCR(tier_watchdog_moves);
    last_change = now;
}

/* bg_doze's check: an allocation failed or a page was taken since the
 * round began. */
static bool activity_since(void *arg)
{
    return slabs_activity() != *(const uint64_t *)arg;
}

static void evictor_main(struct bg *g, unsigned idx, void *arg)
{
    (void)idx;
    struct evictor *e = arg;
    tac_ssd_set_writer(e->id);
    uint64_t wait = 0;
    while (bg_running(g)) {
        TAC_INCR(evictor_runs);
        uint64_t seen = slabs_activity();
        if (e->id == 0)
            watchdog_check();
        if (evict_round(e) > 0) {
            wait = 0;
            continue;
        }
        /* While stores wait, the watchdog looks every EVICT_IDLE_MS; so
         * does a round while DRAM is tight and being filled. */
        bool busy = STATS_GET(&gstats, stores_waiting) > 0 || e->free_moved;
        bg_idle_wait(g, &wait, busy, EVICT_IDLE_MS * 1000000ull,
                     EVICT_DOZE_MAX_MS * 1000000ull, activity_since, &seen);
    }
}

/* tac.wake_evictors while they run (core.c: tac_evictors_wake). */
static void evictors_wake(int partition)
{
    if (nevictors == 0)
        return;
    struct evictor *e = &evictors[(partition < 0 ? 0 : partition) % nevictors];
    if (bg_wake(&e->bg))
        TAC_INCR(evictor_wakeups);
}

int tac_evict_backlog(void)
{
    return __atomic_load_n(&backlog, __ATOMIC_RELAXED);
}

uint64_t tac_evict_backlog_bytes(void)
{
    return __atomic_load_n(&backlog_bytes, __ATOMIC_RELAXED);
}

void tac_evictors_start(void)
{
    int n = tac.evict_threads;
    if (n <= 0)
        n = 1;
    if (n > tac.cfg.partitions)
        n = tac.cfg.partitions;
    evictors = calloc((size_t)n, sizeof(*evictors));
    if (evictors == NULL) {
        fprintf(stderr, "out of memory starting evictors\n");
        exit(EXIT_FAILURE);
    }
    nevictors = n;
    tac.evict_threads = n;
    for (int i = 0; i < n; i++) {
        struct evictor *e = &evictors[i];
        e->id = i;
        bg_init(&e->bg, "tac-evict", NULL);
        slabs_kick_add(&e->bg);
        if (!bg_start(&e->bg, 1, evictor_main, e)) {
            fprintf(stderr, "cannot start evictor thread %d\n", i);
            exit(EXIT_FAILURE);
        }
    }
    __atomic_store_n(&tac.wake_evictors, evictors_wake, __ATOMIC_RELEASE);
}

void tac_evictors_stop(void)
{
    __atomic_store_n(&tac.wake_evictors, NULL, __ATOMIC_RELEASE);
    for (int i = 0; i < nevictors; i++) {
        slabs_kick_remove(&evictors[i].bg);
        bg_stop(&evictors[i].bg);
    }
    nevictors = 0;
}

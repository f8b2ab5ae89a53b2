/*
 * tac/internal.h - state shared by the tier policy's files (tier.c, the
 * tier operations and stats; evict.c, the evictor threads).  Not for use
 * outside tac/.
 */
#ifndef TAC_INTERNAL_H
#define TAC_INTERNAL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "items.h"
#include "stats.h"

struct nvm_region;

/* Policy counters: one line each; relaxed atomics, any thread. */
#define TAC_STATS_FIELDS(X)  \
    X(get_hits_nvm)          \
    X(evict_dram_to_nvm)     \
    X(set_fallback_nvm)      \
    X(nvm_evictions)         \
    X(nvm_alloc_failures)    \
    X(meta_alloc_failures)   \
    X(nvm_read_errors)       \
    X(meta_rehomed)          \
    X(evictor_runs)          \
    X(evictor_wakeups)

struct tac_stats {
    TAC_STATS_FIELDS(STATS_DECLARE_FIELD)
};

struct tac_state {
    struct nvm_region *nvm;     /* NULL without an NVM tier; set at init */
    size_t dram_free_wm;        /* bytes of DRAM the evictors keep free */
    size_t nvm_free_wm;         /* bytes of NVM kept free (for SSD later) */
    int evict_threads;
    struct tac_stats stats;
};

extern struct tac_state tac;

#define TAC_INCR(field) STATS_INCR(&tac.stats, field)

/* Pages of -m kept for meta tuples: data items may not take them (see
 * tac_init); the evictors count them as used. */
#define TAC_META_RESERVE_PAGES 2

/* Moves a DRAM item to NVM (the evict hook): item lock held, item pinned.
 * Returns false when NVM or the meta tuple could not be had. */
bool tac_demote_to_nvm(item *it, uint32_t hv);

/* Evictor threads (evict.c). */
void tac_evictors_start(void);
void tac_evictors_stop(void);
void tac_evictors_wake(int partition);
/* Partitions (DRAM) whose classes are short of free chunks right now. */
int tac_evict_backlog(void);

#endif

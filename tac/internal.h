/*
 * tac/internal.h - what every file of the tier engine shares (core.c): its
 * state, its counters, and the few helpers all tiers use.  Each file's own
 * functions are in its own header (policy.h, nvm_tier.h, ssd_tier.h,
 * place.h, fetch.h, mover.h, evict.h, durable.h).  Not for use outside
 * tac/.
 */
#ifndef TAC_INTERNAL_H
#define TAC_INTERNAL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/uio.h>

#include "engine/items.h"
#include "base/settings.h"
#include "base/stats.h"

struct nvm_region;
struct ssd_store;
struct tac_tuple_hdr;

/* Policy counters: one line each; relaxed atomics, any thread. */
#define TAC_STATS_FIELDS(X)  \
    X(get_hits_nvm)          \
    X(evict_dram_to_nvm)     \
    X(set_fallback_nvm)      \
    X(nvm_evictions)         \
    X(nvm_alloc_failures)    \
    X(meta_alloc_failures)   \
    X(nvm_read_errors)       \
    X(tuple_checksum_failures) \
    X(tuple_auth_failures)   \
    X(meta_rehomed)          \
    X(evictor_runs)          \
    X(evictor_wakeups)       \
    X(get_hits_ssd)          \
    X(evict_dram_to_ssd)     \
    X(evict_nvm_to_ssd)      \
    X(set_fallback_ssd)      \
    X(ssd_full)              \
    X(ssd_large_bufs)        \
    X(ssd_read_retries)      \
    X(ssd_read_misses)       \
    X(ssd_dropped_misses)    \
    X(ssd_reads_nomem)       \
    X(ssd_reads_unparked)    \
    X(ssd_write_retries)     \
    X(ssd_write_errors)      \
    X(ssd_failed_bufs_dropped) \
    X(ssd_defrag_runs)       \
    X(ssd_defrag_moved)      \
    X(ssd_defrag_skipped)    \
    X(ssd_items_dropped)     \
    X(ssd_bytes_dropped)     \
    X(ssd_pages_dropped)     \
    X(ssd_tuples_written)    \
    X(fetch_queued)          \
    X(fetch_dropped)         \
    X(fetch_nvm_to_dram)     \
    X(fetch_ssd_bufs)        \
    X(fetch_ssd_to_dram)     \
    X(fetch_ssd_to_nvm)      \
    X(fetch_no_room)         \
    X(nvm_inserts)           \
    X(nvm_removals)          \
    X(nvm_admission_refused) \
    X(evict_cold_to_ssd)     \
    X(nvm_tuples_moved)      \
    X(nvm_drains_abandoned)  \
    X(nvm_fallback_ssd)      \
    X(nvm_tuples_to_ssd)     \
    X(nvm_mover_wants)       \
    X(tier_watchdog_moves)

struct tac_stats {
    TAC_STATS_FIELDS(STATS_DECLARE_FIELD)
};

struct tac_state {
    enum settings_tier_policy policy;   /* -o tier_policy: policy.c */
    struct nvm_region *nvm;     /* NULL without an NVM tier; set at init */
    struct ssd_store *ssd;      /* NULL without an SSD tier; set at init */
    size_t dram_free_wm;        /* bytes of DRAM the evictors keep free */
    size_t nvm_free_wm;         /* bytes of NVM kept free (for SSD later) */
    int obp_pct;                /* -o nvm_admission=obp:PCT; -1 = always */
    int evict_threads;
    double anti2_nvm_share;     /* NVM / (DRAM + NVM) by size (anti2) */
    size_t ssd_buf_size;        /* bytes of an SSD buf; 0 without SSD */
    /* Wakes the evictor of a partition while they run (evict.c). */
    void (*wake_evictors)(int partition);
    struct tac_stats stats;
};

extern struct tac_state tac;

#define TAC_INCR(field) STATS_INCR(&tac.stats, field)
#define TAC_ADD(field, n) STATS_ADD(&tac.stats, field, n)

/* Pages of -m kept for meta tuples: data items may not take them (see
 * tac_init); the evictors count them as used. */
#define TAC_META_RESERVE_PAGES 2

/* A fetcher's or a scan's read buffer: grown to the largest tuple or buf
 * it reads. */
struct tac_iobuf {
    char *mem;
    size_t cap;
};

/* A transient item (refcount 1, outside -m) with the fields and key of
 * meta tuple `meta`, its value left to fill in; NULL when out of memory.
 * Caller holds the key's item lock. */
item *tac_transient_new(const item *meta);

/* Prints why a tier file was refused at start (its option, path, and what
 * nvm_refusal/ssd_refusal said) and the way out, -o tier_reformat=yes. */
void tac_refuse_tier_file(const char *option, const char *path, const char *why);

/* Wakes the evictor of partition (any thread; nothing while they do not
 * run). */
void tac_evictors_wake(int partition);

#endif

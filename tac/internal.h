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
    X(ssd_index_drops)       \
    X(ssd_tuples_written)    \
    X(fetch_queued)          \
    X(fetch_dropped)         \
    X(fetch_nvm_to_dram)     \
    X(fetch_ssd_bufs)        \
    X(fetch_ssd_to_dram)     \
    X(fetch_ssd_to_nvm)      \
    X(fetch_no_room)         \
    X(fetch_copies_used)     \
    X(nvm_inserts)           \
    X(nvm_removals)          \
    X(nvm_admission_refused) \
    X(evict_cold_to_ssd)     \
    X(nvm_tuples_moved)      \
    X(nvm_drains_abandoned)  \
    X(nvm_fallback_ssd)      \
    X(nvm_tuples_to_ssd)     \
    X(nvm_mover_wants)       \
    X(nvm_clock_passed)      \
    X(nvm_clock_spared)      \
    X(nvm_clock_laps)        \
    X(tier_watchdog_moves)

struct tac_stats {
    TAC_STATS_FIELDS(STATS_DECLARE_FIELD)
};

/* The options the tier engine uses, copied from the settings once, at
 * set-up (tac_config_load, from tac_init): no file of tac/ reads
 * `settings` itself.  The run-time tunables that memcached's `extstore`
 * command changes are read, with relaxed atomics, through pointers to the
 * values it writes. */
struct tac_config {
    size_t maxbytes;            /* -m */
    int item_size_max;          /* -I */
    int slab_page_size;
    int partitions;
    bool evict_to_free;         /* false with -M */
    bool use_cas;               /* false with -C */
    int verbose;                /* -v at start */
    int tier_policy;            /* enum settings_tier_policy */
    char *tier_key;
    int tier_reformat;
    int recovery;
    char *memory_file;          /* -e */
    char *nvm_path, *nvm_file;
    size_t nvm_size;
    unsigned nvm_read_ns, nvm_write_ns;
    int nvm_free_watermark, nvm_obp_pct;
    char *ssd_path, *ssd_file;
    size_t ssd_size;                    /* of all files */
    unsigned ssd_nfiles;                /* the files, in order: */
    char *const *ssd_files;
    const size_t *ssd_sizes;
    int ssd_page_size, ssd_buf_size, ssd_io_engine, ssd_free_pages;
    int ext_threads, ext_compact_under;
    int evict_threads, fetch_threads;
    int dram_free_watermark;
    int dram_log;
    size_t dram_log_size;
    /* Run-time tunables (`extstore <name> <value>`). */
    const int *ext_item_size, *ext_item_age, *ext_recache_rate;
    const double *ext_max_frag;
    const bool *ext_drop_unread;
    const int *ext_low_ttl, *ext_drop_under;
};

struct tac_state {
    struct tac_config cfg;      /* tac_config_load */
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

/* A transient item (refcount 1, outside -m) with the fields of meta tuple
 * `meta` and key `key` (meta->nkey bytes), its value left to fill in; NULL
 * when out of memory.  With key NULL the key is left to fill in too, from
 * the tuple, once its fingerprint is found to be meta's.  Caller holds the
 * key's item lock. */
item *tac_transient_new(const item *meta, const char *key);

/* Prints why a tier file was refused at start (its option, path, and what
 * nvm_refusal/ssd_refusal said) and the way out, -o tier_reformat=yes. */
void tac_refuse_tier_file(const char *option, const char *path, const char *why);

/* Copies the settings into tac.cfg (tac_init; a unit test that drives
 * the engine's files without it calls it after setting its options). */
void tac_config_load(void);

/* Wakes the evictor of partition (any thread; nothing while they do not
 * run). */
void tac_evictors_wake(int partition);

/* DRAM is an index: meta tuples fill all but an eighth of -m and no DRAM
 * class has free chunks to hand over (slabs_has_spare).  A move down then
 * finds no meta tuple, so a cache drops lower-tier items to make room:
 * NVM's coldest (nvm_tier.c), the SSD's oldest page (ssd_defrag.c). */
bool tac_dram_only_index(void);

#endif

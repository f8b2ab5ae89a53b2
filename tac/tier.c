/*
 * tac/tier.c - the top of the tier engine: opening, starting, stopping and
 * closing the tiers, the operations items.c calls (item_tier_ops), and the
 * tier statistics.
 *
 * Design: doc/design.md, "Module structure" and "The data model".  The
 * operations dispatch by tier: a read of an NVM item copies its value out
 * (nvm_tier.c) and may queue a hot one for DRAM (policy.c, fetch_queue.c);
 * an SSD read parks (ssd_read.c); an item leaving DRAM goes where place.c
 * puts it.  This file also connects the parts that must not call each
 * other: the SSD tier's writes reach the DRAM log and the journal through
 * the observer registered here, and the NVM tier's full classes spill to
 * SSD through tac_nvm_set_spill.
 *
 * Threads: the main thread (set-up, stats registration), workers and
 * evictors through the operations.
 */
#include "config.h"
#include "base/crashpoint.h"

#include <errno.h>
#include <pthread.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/assoc.h"
#include "engine/lazy_lru.h"
#include "base/settings.h"
#include "nvm/nvm.h"
#include "engine/slabs.h"
#include "tac/crypt.h"
#include "tac/durable.h"
#include "tac/evict.h"
#include "tac/fetch.h"
#include "tac/internal.h"
#include "tac/mover.h"
#include "tac/nvm_tier.h"
#include "tac/place.h"
#include "tac/policy.h"
#include "tac/ssd_tier.h"
#include "tac/tac.h"
#include "tac/tuple.h"
#include "base/util.h"


/* ---- The operations items.c calls ------------------------------------- */

static item *tier_materialize(item *meta)
{
    if (meta->tier == TIER_NVM && tac.nvm != NULL) {
        item *copy = tac_nvm_materialize(meta);
        if (copy != NULL && tac_policy_nvm_hit_up(meta))
            tac_fetch_nvm(meta, copy);
        return copy;
    }
    if (meta->tier == TIER_SSD)
        return tac_ssd_materialize(meta);
    return NULL;
}

static void tier_release(item *meta)
{
    if (meta->tier == TIER_NVM)
        tac_nvm_release(meta);
    else if (meta->tier == TIER_SSD)
        tac_ssd_release(meta);
}

static void tier_dram_pressure(unsigned int clsid, int partition)
{
    (void)clsid;
    tac_evictors_wake(partition);
}

/* A store found no tier with room.  A cache makes room by dropping its
 * coldest data, so room comes unless -M; with -M it comes while the SSD is
 * not full (evictors move NVM's tail there, defrag compacts) and DRAM can
 * index more of it, or without an SSD while NVM has pages no class took
 * yet or the page mover is emptying one. */
static bool tier_room_later(void)
{
    if (tac.cfg.evict_to_free)
        return true;
    if (tac.ssd != NULL)
        return !tac_ssd_full() && !tac_dram_only_index();
    return tac.nvm != NULL && (nvm_free_pages(tac.nvm) > 0 || nvm_draining(tac.nvm) ||
                               nvm_page_reusable(tac.nvm, 0));
}

static void tier_keys_of(size_t n, item *const *metas, const uint64_t *refs,
                         char (*keys)[KEY_MAX_LENGTH], bool *ok)
{
    struct tac_key_req req[n > 0 ? n : 1];
    size_t at[n > 0 ? n : 1], nssd = 0;
    for (size_t i = 0; i < n; i++) {
        const item *m = metas[i];
        size_t len = tac_tuple_size(m->nkey, m->nbytes);
        ok[i] = false;
        if (m->tier == TIER_NVM)
            ok[i] = tac_nvm_key_at(refs[i], len, item_meta_fp(m), m->nkey, keys[i]);
        else if (m->tier == TIER_SSD) {
            req[nssd] = (struct tac_key_req){ refs[i], len, item_meta_fp(m), m->nkey,
                                              keys[i], false };
            at[nssd++] = i;
        }
    }
    tac_ssd_keys_at(nssd, req);
    for (size_t j = 0; j < nssd; j++)
        ok[at[j]] = req[j].ok;
}

static bool tier_read_async(void *reader, item *meta, const char *key, uint32_t hv,
                            void (*done)(void *arg, const struct item_got *got),
                            void *arg)
{
    return tac_read_value(reader, meta, key, hv, done, arg);
}

/* A shorter life for the key's lower-tier copies, in the journal as unix
 * time (the tuples' clock). */
static void tier_shorten(uint64_t fp, rel_time_t exptime)
{
    tac_journal_shorten(fp, (uint64_t)((int64_t)process_started + exptime));
}

static struct item_tier_ops tier_ops = {   /* .logged set by tac_plug_in */
    .materialize = tier_materialize,
    .read_async = tier_read_async,
    .keys_of = tier_keys_of,
    .demote = tac_demote,
    .stage = tac_stage,
    .release = tier_release,
    .dram_pressure = tier_dram_pressure,
    .skip_dram = tac_anti2_to_nvm,
    .room_later = tier_room_later,
    .invalidate = tac_journal_invalidate,
    .shorten = tier_shorten,
    .flush = tac_journal_flush,
    .read_missed = tac_ssd_read_missed,
    .key_stored = tac_ssd_key_stored,
};

/* ---- Set-up ------------------------------------------------------------- */

static bool tac_plug_in(void);

static void tac_stats_register(void);

/* Opens the tiers the settings name (settings.c checked and parsed the
 * options); tac_init() without the stats. */
static bool tac_open(void)
{
    memset(&tac, 0, sizeof(tac));
    tac_config_load();
    tac.policy = (enum settings_tier_policy)tac.cfg.tier_policy;
    tac.obp_pct = tac.cfg.nvm_obp_pct;
    if (tac.cfg.tier_key != NULL) {
        if (tac.cfg.nvm_path == NULL && tac.cfg.ssd_path == NULL) {
            fprintf(stderr, "-o tier_key encrypts the NVM and SSD tiers: give "
                    "-o nvm_path or -o ssd_path too\n");
            return false;
        }
        if (!tac_crypt_load(tac.cfg.tier_key))
            return false;
        /* Before any size is computed: tuples carry a nonce and a tag,
         * meta tuples their tuple's write sequence. */
        tac_tuple_set_sealed(true);
        item_meta_seq_bytes = sizeof(uint64_t);
    }
    if (tac.cfg.nvm_path == NULL)
        return tac_ssd_open() && tac_plug_in();

    struct nvm_config cfg = { 0 };
    cfg.path = tac.cfg.nvm_file;
    cfg.size = tac.cfg.nvm_size;
    cfg.read_ns = tac.cfg.nvm_read_ns;
    cfg.write_ns = tac.cfg.nvm_write_ns;
    cfg.partitions = tac.cfg.partitions;
    cfg.slot_max = tac_tuple_size(KEY_MAX_LENGTH, (size_t)tac.cfg.item_size_max);
    cfg.reformat = tac.cfg.tier_reformat != 0;
    memcpy(cfg.key_check, tac_crypt_key_check(), sizeof(cfg.key_check));
    enum nvm_status st = nvm_open(&cfg, &tac.nvm);
    if (st == NVM_ERR_NOT_OURS) {
        tac_refuse_tier_file("nvm_path", cfg.path, nvm_refusal());
        return false;
    }
    if (st != NVM_OK) {
        fprintf(stderr, "cannot open the NVM tier at %s: %s (%s)\n", cfg.path,
                nvm_strerror(st), strerror(errno));
        return false;
    }
    if (nvm_nclasses(tac.nvm) >= MAX_SLAB_CLASSES) {
        fprintf(stderr, "NVM tier: too many slot classes (%u)\n",
                nvm_nclasses(tac.nvm));
        nvm_abandon(tac.nvm);
        tac.nvm = NULL;
        return false;
    }

    /* Keep 1% of NVM free by default. */
    struct nvm_info info;
    nvm_get_info(tac.nvm, &info);
    tac.nvm_free_wm = tac.cfg.nvm_free_watermark > 0
        ? (size_t)tac.cfg.nvm_free_watermark : info.capacity / 100;
    tac.anti2_nvm_share = (double)info.capacity /
                          ((double)info.capacity + (double)tac.cfg.maxbytes);
    if (tac.cfg.verbose)
        fprintf(stderr, "NVM tier: %s (%s%s), %zu MB\n", info.path, info.backing,
                info.is_pmem ? ", pmem" : "", info.capacity >> 20);
    if (tac_nvm_mover_init() && tac_ssd_open() && tac_dramlog_open() && tac_plug_in())
        return true;
    tac_dramlog_close();
    tac_nvm_mover_free();
    nvm_abandon(tac.nvm);           /* a failed start leaves no file */
    tac.nvm = NULL;
    return false;
}

/* With a lower tier open, sets up the DRAM side and plugs the policy into
 * items.c. */
static bool tac_plug_in(void)
{
    if (!tac_active())
        return true;
    /* The SSD tier's writes reach the DRAM log and the journal, and a
     * full NVM class spills to SSD, through these. */
    static const struct tac_ssd_observer observer = {
        .tuple_put = tac_dramlog_tuple,
        .tick = tac_journal_tick,
    };
    tac_ssd_set_observer(&observer);
    if (tac.ssd != NULL)
        tac_nvm_set_spill(tac_ssd_from_nvm);
    /* Defaults scale with the tier: keep 2% of DRAM (at least two pages)
     * free. */
    tac.dram_free_wm = tac.cfg.dram_free_watermark > 0
        ? (size_t)tac.cfg.dram_free_watermark
        : tac.cfg.maxbytes / 50 > 2 * SLAB_PAGE_SIZE ? tac.cfg.maxbytes / 50
                                                      : 2 * SLAB_PAGE_SIZE;
    tac.evict_threads = tac.cfg.evict_threads;
    /* Meta tuples may use the last pages of -m that data items may not,
     * so that demotion always finds room for its meta tuple; the page
     * mover then moves freed data pages over to the meta tuples' class. */
    slabs_set_reserve(TAC_META_RESERVE_PAGES * (size_t)tac.cfg.slab_page_size,
                      slabs_chunk_size(slabs_clsid(item_compact_size(0))));
    if (tac_dramlog_on()) {
        tier_ops.logged = tac_dramlog_item;
        tier_ops.log_ordered = tac_dramlog_ordered;
    }
    items_set_tier_ops(&tier_ops);
    /* anti2: NVM is more DRAM; nothing is told apart by temperature, so
     * items leave DRAM and NVM in the order they came in, and come in
     * where tac_anti2_to_nvm() says. */
    items_set_lazy_lru(tac_policy_temperatures());
    return true;
}

bool tac_init(void)
{
    if (!tac_open())
        return false;
    tac_stats_register();
    tac_restart_prepare();
    return true;
}

void tac_recover(void)
{
    tac_restart_run();
}

void tac_start(void)
{
    if (tac_active()) {
        tac_evictors_start();
        tac_fetchers_start();
    }
    tac_ssd_start();
}

void tac_stop(void)
{
    tac_restart_wait();
    tac_ssd_stop();
    if (tac_active()) {
        tac_fetchers_stop();
        tac_evictors_stop();
    }
}

void tac_close(void)
{
    bool saved = tac_restart_save();
    tac_journal_close();
    tac_dramlog_close();
    uint64_t ssd_generation = tac_ssd_close();
    bool nvm_clean = false;
    if (tac.nvm != NULL) {
        tac_nvm_mover_free();
        nvm_clean = nvm_close(tac.nvm);
        tac.nvm = NULL;
    }
    if (saved)
        tac_restart_commit(nvm_clean, ssd_generation);
}

/* ---- Stats -------------------------------------------------------------- */

static unsigned long long nvm_items(void)
{
    if (tac.nvm == NULL)
        return 0;
    struct nvm_info info;
    nvm_get_info(tac.nvm, &info);
    return info.slots_used;
}

/* DRAM an item of a lower tier costs, on average over that tier's items:
 * its meta tuple's slab chunk (rounding included) and its share of the
 * hash index's buckets (the table's bytes over every indexed item; its
 * chain link is inside the chunk).  Printed whole and less the key, the
 * part a smaller layout can save. */
static void stats_dram_per_item(struct stat_sink *s, const char *tier,
                                enum item_tier t)
{
    struct items_tier_dram d;
    items_tier_dram(t, &d);
    uint64_t indexed = assoc_count();
    double per = 0, past_key = 0;
    if (d.metas > 0) {
        double index = indexed > 0
                       ? (double)STATS_GET(&gstats, hash_bytes) / (double)indexed : 0;
        per = (double)d.chunk_bytes / (double)d.metas + index;
        past_key = per - (double)d.key_bytes / (double)d.metas;
    }
    char key[64];
    snprintf(key, sizeof(key), "%s_dram_bytes_per_item", tier);
    stat_printf(s, key, "%.1f", per);
    snprintf(key, sizeof(key), "%s_dram_bytes_per_item_past_key", tier);
    stat_printf(s, key, "%.1f", past_key);
}

static unsigned long long meta_tuples(void)
{
    return nvm_items() + tac_ssd_items();
}

static unsigned long long lower_hits(void)
{
    return STATS_GET(&tac.stats, get_hits_nvm) +
           STATS_GET(&tac.stats, get_hits_ssd);
}

static void tac_stats_reset(void)
{
#define TAC_ZERO(name) __atomic_store_n(&tac.stats.name, 0, __ATOMIC_RELAXED);
    TAC_STATS_FIELDS(TAC_ZERO)
}

static void tac_stats_nvm(struct stat_sink *s)
{
    if (tac.nvm == NULL)
        return;
    unsigned n = nvm_nclasses(tac.nvm), active = 0;
    for (unsigned cls = 1; cls <= n; cls++) {
        struct nvm_class_info ci;
        nvm_class_info(tac.nvm, cls, &ci);
        if (ci.pages == 0 && ci.alloc_fails == 0)
            continue;
        active++;
        char name[48];
#define NVM_CLASS_LINE(field, fmt, val) \
        snprintf(name, sizeof(name), "%u:" field, cls); \
        stat_printf(s, name, fmt, val);
        NVM_CLASS_LINE("slot_size", "%zu", ci.slot_size)
        NVM_CLASS_LINE("slots_per_page", "%u", ci.slots_per_page)
        NVM_CLASS_LINE("pages", "%llu", (unsigned long long)ci.pages)
        NVM_CLASS_LINE("slots_used", "%llu", (unsigned long long)ci.slots_used)
        NVM_CLASS_LINE("slots_free", "%llu", (unsigned long long)ci.slots_free)
        NVM_CLASS_LINE("steals", "%llu", (unsigned long long)ci.steals)
        NVM_CLASS_LINE("alloc_fails", "%llu", (unsigned long long)ci.alloc_fails)
#undef NVM_CLASS_LINE
    }
    stat_printf(s, "active_classes", "%u", active);
    stat_printf(s, "free_pages", "%llu", (unsigned long long)nvm_free_pages(tac.nvm));
}

/* `stats dram`: DRAM's slab classes as the tiers see them, with the
 * allocation failures that are the page mover's demand. */
static void tac_stats_dram(struct stat_sink *s)
{
    unsigned n = slabs_nclasses(), active = 0;
    for (unsigned cls = 1; cls <= n; cls++) {
        struct slabs_class_info ci;
        slabs_class_info(cls, &ci);
        if (ci.total_pages == 0 && ci.alloc_fails == 0)
            continue;
        active++;
        char name[48];
#define DRAM_CLASS_LINE(field, val) \
        snprintf(name, sizeof(name), "%u:" field, cls); \
        stat_printf(s, name, "%llu", (unsigned long long)(val));
        DRAM_CLASS_LINE("chunk_size", ci.chunk_size)
        DRAM_CLASS_LINE("pages", ci.total_pages)
        DRAM_CLASS_LINE("used_chunks", ci.used_chunks)
        DRAM_CLASS_LINE("free_chunks", ci.free_chunks + ci.free_chunks_end)
        DRAM_CLASS_LINE("alloc_fails", ci.alloc_fails)
#undef DRAM_CLASS_LINE
    }
    stat_printf(s, "active_classes", "%u", active);
}

/* `stats tiers`: DRAM's lines, then one group per lower tier, then the
 * policy's counters.  Only DRAM exists until NVM or SSD is configured. */
static void tac_stats_tiers(struct stat_sink *s)
{
    struct thread_stats ts;
    struct slab_stats tot;
    stats_aggregate(&ts, &tot);
    unsigned long long lower = lower_hits();
    stat_printf(s, "tiers", "%s", tac_tiers_name());
    stat_printf(s, "dram_capacity", "%zu", slabs_mem_limit());
    stat_printf(s, "dram_malloced", "%zu", slabs_mem_malloced());
    stat_printf(s, "dram_bytes", "%llu",
                (unsigned long long)STATS_GET(&gstats, bytes));
    unsigned long long items = STATS_GET(&gstats, curr_items);
    unsigned long long metas = meta_tuples();
    stat_printf(s, "dram_items", "%llu", items > metas ? items - metas : 0);
    stat_printf(s, "get_hits_dram", "%llu",
                tot.get_hits > lower ? (unsigned long long)tot.get_hits - lower : 0);
    stat_printf(s, "evictions", "%llu",
                (unsigned long long)STATS_GET(&gstats, evictions));
    stat_printf(s, "thr_hot", "%u", llru_thr_hot());
    stat_printf(s, "thr_warm", "%u", llru_thr_warm());
    if (!tac_active())
        return;
    struct slabs_mover_info mi;
    slabs_mover_info(&mi);
    stat_printf(s, "dram_page_moves_request", "%llu", (unsigned long long)mi.by_request);
    stat_printf(s, "dram_page_moves_automove", "%llu", (unsigned long long)mi.by_automove);
    stat_printf(s, "dram_page_moves_reserve", "%llu", (unsigned long long)mi.by_reserve);
    stat_printf(s, "dram_page_moves_demand", "%llu", (unsigned long long)mi.by_demand);
    stat_printf(s, "dram_page_moves_watchdog", "%llu", (unsigned long long)mi.by_watchdog);
    stat_printf(s, "dram_pages_borrowed", "%llu", (unsigned long long)mi.repaid);
    if (tac.nvm != NULL) {
        struct nvm_info info;
        nvm_get_info(tac.nvm, &info);
        stat_printf(s, "nvm_capacity", "%zu", info.capacity);
        stat_printf(s, "nvm_bytes", "%llu", (unsigned long long)info.bytes_used);
        stat_printf(s, "nvm_items", "%llu", (unsigned long long)info.slots_used);
        stat_printf(s, "nvm_pages_used", "%llu", (unsigned long long)info.pages_used);
        stat_printf(s, "nvm_pages_reused", "%llu", (unsigned long long)info.pages_reused);
        stat_printf(s, "nvm_pages_drained", "%llu", (unsigned long long)info.pages_drained);
        stat_printf(s, "nvm_pages_total", "%llu", (unsigned long long)info.pages_total);
        stat_printf(s, "nvm_metadata_dram_bytes", "%zu", info.dram_bytes);
        stat_printf(s, "nvm_meta_tuple_bytes", "%zu", item_compact_size(0));
    }
    stat_printf(s, "meta_tuples", "%llu", meta_tuples());
    if (tac.nvm != NULL)
        stats_dram_per_item(s, "nvm", TIER_NVM);
    if (tac.ssd != NULL)
        stats_dram_per_item(s, "ssd", TIER_SSD);
    if (tac_tuple_sealed()) {
        stat_printf(s, "tuple_seal_bytes", "%zu", tac_tuple_overhead);
        stat_printf(s, "records_sealed", "%llu", (unsigned long long)tac_crypt_sealed());
        stat_printf(s, "records_opened", "%llu", (unsigned long long)tac_crypt_opened());
    }
    stat_printf(s, "journal_invalidations", "%llu",
                (unsigned long long)tac_journal_entries());
    stat_printf(s, "journal_overflows", "%llu",
                (unsigned long long)tac_journal_overflows());
    tac_dramlog_stats(s);
    tac_ssd_stats_tiers(s);
#define TAC_PRINT(name) \
    stat_printf(s, #name, "%llu", (unsigned long long)STATS_GET(&tac.stats, name));
    TAC_STATS_FIELDS(TAC_PRINT)
    stat_printf(s, "evictor_threads", "%d", tac.evict_threads);
    stat_printf(s, "evictor_backlog", "%d", tac_evict_backlog());
    stat_printf(s, "evictor_backlog_bytes", "%llu",
                (unsigned long long)tac_evict_backlog_bytes());
}

static void tac_stats_settings(struct stat_sink *s)
{
    stat_printf(s, "tier_policy", "%s", tac_policy_name());
    tac_ssd_stats_settings(s);
    if (tac_active())
        stat_printf(s, "dram_free_watermark_bytes", "%zu", tac.dram_free_wm);
    if (tac.nvm == NULL) {
        stat_printf(s, "nvm_backing", "none");
        return;
    }
    struct nvm_info info;
    nvm_get_info(tac.nvm, &info);
    stat_printf(s, "nvm_backing", "%s", info.backing);
    stat_printf(s, "nvm_is_pmem", "%s", info.is_pmem ? "yes" : "no");
    stat_printf(s, "nvm_capacity", "%zu", info.capacity);
    stat_printf(s, "nvm_read_ns", "%u", info.read_ns);
    stat_printf(s, "nvm_write_ns", "%u", info.write_ns);
    stat_printf(s, "nvm_free_watermark_bytes", "%zu", tac.nvm_free_wm);
    if (tac.obp_pct < 0)
        stat_printf(s, "nvm_admission", "always");
    else
        stat_printf(s, "nvm_admission", "obp:%d", tac.obp_pct);
}

static uint64_t stat_ssd_meta_tuple_bytes(void)
{
    return item_compact_size(0);
}

/* The tiers' sub-commands, their counters' reset, and their lines of plain
 * `stats`, which exist only with the tier they count. */
static void tac_stats_register(void)
{
    stats_register_section("settings", tac_stats_settings);
    stats_register_section("tiers", tac_stats_tiers);
    stats_register_section("nvm", tac_stats_nvm);
    stats_register_section("dram", tac_stats_dram);
    stats_register_reset(tac_stats_reset);
    bool ssd = tac.ssd != NULL;
    stats_provide_counter("get_hits_ssd", ssd ? &tac.stats.get_hits_ssd : NULL);
    stats_provide("ssd_meta_tuple_bytes", ssd ? stat_ssd_meta_tuple_bytes : NULL);
    stats_provide_counter("tuple_checksum_failures",
                          tac_active() ? &tac.stats.tuple_checksum_failures : NULL);
    tac_ssd_stats_register();
}

/*
 * tac/core.c - what every file of the tier engine shares: the engine's
 * state (which tiers are open, the policy, the counters), the transient
 * item a lower-tier read fills, the wake-up of the evictors, and whether
 * DRAM is all index.
 *
 * Design: doc/design.md, "Module structure".  This file calls no other
 * file of tac/: every other one may call it.
 */
#include "config.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/settings.h"
#include "engine/slabs.h"
#include "tac/internal.h"

struct tac_state tac;

bool tac_dram_only_index(void)
{
    size_t limit = slabs_mem_limit();
    return limit != 0 && slabs_index_bytes() >= limit - limit / 8 && !slabs_has_spare();
}

bool tac_active(void)
{
    return tac.nvm != NULL || tac.ssd != NULL;
}

const char *tac_tiers_name(void)
{
    if (tac.nvm != NULL)
        return tac.ssd != NULL ? "dram,nvm,ssd" : "dram,nvm";
    return tac.ssd != NULL ? "dram,ssd" : "dram";
}

item *tac_transient_new(const item *meta, const char *key)
{
    item *copy = malloc(item_make_size(meta->nkey, meta->nbytes));
    if (copy == NULL)
        return NULL;
    /* The caller holds the meta tuple's item lock: its fields are stable. */
    memset(copy, 0, sizeof(item));
    copy->time = item_time(meta);
    copy->exptime = meta->exptime;
    copy->access = __atomic_load_n(&meta->access, __ATOMIC_RELAXED);
    copy->nbytes = meta->nbytes;
    copy->flags = meta->flags;
    copy->it_flags = ITEM_TRANSIENT |
                     (meta->it_flags & (ITEM_FETCHED | ITEM_ACTIVE));
    copy->partition = meta->partition;
    copy->tier = TIER_DRAM;
    copy->nkey = meta->nkey;
    copy->cas = meta->cas;
    copy->refcount = 1;
    /* A meta tuple has no key: the caller's, or the tuple's once read. */
    if (key != NULL)
        memcpy(ITEM_key(copy), key, meta->nkey);
    else
        memset(ITEM_key(copy), 0, meta->nkey);
    ITEM_key(copy)[meta->nkey] = '\0';
    return copy;
}

void tac_refuse_tier_file(const char *option, const char *path, const char *why)
{
    fprintf(stderr, "cannot open the tier file %s (-o %s): it %s. Nothing was "
            "written to it. To discard what it holds and format it afresh, "
            "start once with -o tier_reformat=yes.\n", path, option, why);
}

void tac_evictors_wake(int partition)
{
    void (*fn)(int) = __atomic_load_n(&tac.wake_evictors, __ATOMIC_ACQUIRE);
    if (fn != NULL)
        fn(partition);
}

void tac_config_load(void)
{
    struct tac_config *c = &tac.cfg;
    c->maxbytes = settings.maxbytes;
    c->item_size_max = settings.item_size_max;
    c->slab_page_size = settings.slab_page_size;
    c->partitions = settings.partitions;
    c->evict_to_free = settings.evict_to_free;
    c->use_cas = settings.use_cas;
    c->verbose = settings.verbose;
    c->tier_policy = settings.tier_policy;
    c->tier_key = settings.tier_key;
    c->tier_reformat = settings.tier_reformat;
    c->recovery = settings.recovery;
    c->memory_file = settings.memory_file;
    c->nvm_path = settings.nvm_path;
    c->nvm_file = settings.nvm_file;
    c->nvm_size = settings.nvm_size;
    c->nvm_read_ns = settings.nvm_read_ns;
    c->nvm_write_ns = settings.nvm_write_ns;
    c->nvm_free_watermark = settings.nvm_free_watermark;
    c->nvm_obp_pct = settings.nvm_obp_pct;
    c->ssd_path = settings.ssd_path;
    c->ssd_file = settings.ssd_file;
    c->ssd_size = settings.ssd_size;
    c->ssd_nfiles = settings.ssd_nfiles;
    c->ssd_files = settings.ssd_files;
    c->ssd_sizes = settings.ssd_sizes;
    c->ssd_page_size = settings.ssd_page_size;
    c->ssd_buf_size = settings.ssd_buf_size;
    c->ssd_io_engine = settings.ssd_io_engine;
    c->ssd_free_pages = settings.ssd_free_pages;
    c->ext_threads = settings.ext_threads;
    c->ext_compact_under = settings.ext_compact_under;
    c->evict_threads = settings.evict_threads;
    c->fetch_threads = settings.fetch_threads;
    c->dram_free_watermark = settings.dram_free_watermark;
    c->dram_log = settings.dram_log;
    c->dram_log_size = settings.dram_log_size;
    c->ext_item_size = &settings.ext_item_size;
    c->ext_item_age = &settings.ext_item_age;
    c->ext_recache_rate = &settings.ext_recache_rate;
    c->ext_max_frag = &settings.ext_max_frag;
    c->ext_drop_unread = &settings.ext_drop_unread;
    c->ext_low_ttl = &settings.ext_low_ttl;
    c->ext_drop_under = &settings.ext_drop_under;
}

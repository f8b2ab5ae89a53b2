/*
 * tac/core.c - what every file of the tier engine shares: the engine's
 * state (which tiers are open, the policy, the counters), the transient
 * item a lower-tier read fills, and the wake-up of the evictors.
 *
 * Design: doc/design.md, "Module structure".  This file calls no other
 * file of tac/: every other one may call it.
 */
#include "config.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tac/internal.h"

struct tac_state tac;

bool tac_active(void)
{
    return tac.nvm != NULL || tac.ssd != NULL;
}

bool tac_has_nvm(void)
{
    return tac.nvm != NULL;
}

const char *tac_tiers_name(void)
{
    if (tac.nvm != NULL)
        return tac.ssd != NULL ? "dram,nvm,ssd" : "dram,nvm";
    return tac.ssd != NULL ? "dram,ssd" : "dram";
}

item *tac_transient_new(const item *meta)
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
    memcpy(ITEM_key(copy), ITEM_key(meta), meta->nkey);
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

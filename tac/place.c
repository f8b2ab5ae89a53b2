/*
 * tac/place.c - moving an item out of DRAM: an evictor demotes a cold
 * DRAM item (tac_demote), or a set that finds DRAM full writes its
 * staging item straight to a lower tier (tac_stage, TaC 4.1).  Where each
 * goes is tac/policy.c's decision; the copy is nvm_tier.c's or
 * ssd_write.c's.  Without NVM, or with NVM full, both go to SSD.
 *
 * Design: doc/design.md, "Every class gets room": a move down never waits
 * for NVM to make room, since making room there may itself wait for DRAM.
 *
 * Threads: workers (stage), evictors and the slab page mover (demote).
 * Callers hold the item lock of the key being moved.
 */
#include "config.h"
#include "base/crashpoint.h"

#include "tac/durable.h"
#include "tac/internal.h"
#include "tac/nvm_tier.h"
#include "tac/place.h"
#include "tac/policy.h"
#include "tac/ssd_tier.h"

bool tac_demote(item *it, uint32_t hv)
{
    if (it->it_flags & ITEM_TRANSIENT)
        return false;
    /* A version the DRAM log's replay linked stays while the replay runs:
     * moved down, its tuple would outrank the key's later records
     * (crash_scan.c, rs_replay_record). */
    if ((it->it_flags & ITEM_REPLAYED) && tac_dramlog_replaying())
        return false;
    if (it->it_flags & ITEM_META) {
        if (it->tier == TIER_SSD)
            return tac_ssd_meta_rehome(it, hv);
        return tac_nvm_meta_rehome(it, hv);
    }
    /* A stale-marked DRAM item (`md ... I`) is not written down: its tuple
     * would have a new seq, above the invalidation the mark recorded, and
     * no mark, so a crash would bring it back fresh.  It goes as a miss
     * does after a crash. */
    if (it->it_flags & ITEM_STALE) {
        do_item_evict(it, hv);
        return true;
    }
    bool to_nvm = tac_policy_demote_to_nvm(it);
    item *meta = NULL;
    if (to_nvm) {
        meta = tac_nvm_store_copy(it, it->partition, true);
        if (meta != NULL)
            TAC_INCR(evict_dram_to_nvm);
    }
    /* NVM refused it (admission), or its slot class had no room: SSD takes
     * it.  A move down never waits for NVM to make room, since making room
     * there may itself wait for DRAM (doc/design.md, "Every class gets
     * room"). */
    if (meta == NULL && tac.ssd != NULL && !tac_ssd_takes(it->nbytes)) {
        /* -o ext_item_size: too small for SSD.  One NVM would not take
         * waits for NVM's room; a cold one is dropped, as memcached evicts
         * what extstore will not take. */
        if (to_nvm)
            return false;
        do_item_evict(it, hv);
        return true;
    }
    if (meta == NULL && tac.ssd != NULL) {
        meta = tac_ssd_store_copy(it, it->partition, true);
        if (meta != NULL) {
            TAC_INCR(evict_dram_to_ssd);
            if (to_nvm)
                TAC_INCR(nvm_fallback_ssd);
            else if (tac.nvm != NULL)
                TAC_INCR(evict_cold_to_ssd);
        }
    }
    if (meta == NULL)
        return false;
    do_item_move(it, meta, hv);
    if (meta->tier == TIER_NVM)
        CRASH_POINT(move_dram_to_nvm);
    else
        CRASH_POINT(move_dram_to_ssd);
    item_release(meta);
    return true;
}

item *tac_stage(item *staging, int partition)
{
    item *meta = NULL;
    /* Its meta tuple may not take the slab reserve: that is for
     * demotions, which free DRAM; sets that used it could spend it all and
     * leave the page mover no room to drain a page (the evictors catch up,
     * and item_store tries again). */
    if (tac_policy_stage_to_nvm()) {
        meta = tac_nvm_store_copy(staging, partition, false);
        if (meta != NULL)
            TAC_INCR(set_fallback_nvm);
    }
    if (meta == NULL && tac.ssd != NULL && tac_ssd_takes(staging->nbytes)) {
        meta = tac_ssd_store_copy(staging, partition, false);
        if (meta != NULL)
            TAC_INCR(set_fallback_ssd);
    }
    if (meta != NULL)
        CRASH_POINT(move_stage);
    return meta;
}

/*
 * tac/age.c - -o ext_item_age: the age-based move to SSD.
 *
 * What.  memcached's extstore writes an item to flash once it has gone
 * ext_item_age seconds without being read, even while memory has room.
 * With that option and an SSD tier, this server does the same: a DRAM item
 * whose last access is at least ext_item_age seconds old moves to the SSD
 * tier (its value to an SSD buf, a meta tuple staying in DRAM), the way the
 * evictors move items when DRAM runs short.  Off by default (0), as in
 * memcached, where items move down only for room.
 *
 * How.  Each evictor calls tac_age_round once per round, for its own
 * partitions (the SSD writer of the calling evictor packs the values).  A
 * round walks every DRAM class's LRU from its cold end and moves items
 * until it meets one younger than the age; the LRU is in access order, so
 * the rest are younger too.  Values smaller than -o ext_item_size stay in
 * DRAM (they never go to SSD), and so do classes small enough to hold the
 * SSD meta tuples.  A round that moved nothing waits for the clock's next
 * second before the next walk.  Moves count in `evict_dram_to_ssd`.
 *
 * `extstore item_age N` changes the age at run time (0 stops the moves).
 *
 * Threads: the evictor threads (tac/evict.c); each touches only its own
 * partitions and its own slot of last_walk.
 */
#include "config.h"

#include "base/settings.h"
#include "engine/slabs.h"
#include "tac/evict.h"
#include "tac/internal.h"
#include "tac/ssd_tier.h"

#define AGE_BATCH 64
#define AGE_MAX_EVICTORS 64

static rel_time_t last_walk[AGE_MAX_EVICTORS];

/* items_demote_tail's hook: moves `it` (locked, pinned) to SSD if it is old
 * enough; false stops the walk of this LRU. */
static bool age_demote(item *it, uint32_t hv)
{
    rel_time_t now = mc_now();
    rel_time_t t = item_time(it);
    int age = __atomic_load_n(tac.cfg.ext_item_age, __ATOMIC_RELAXED);
    if ((it->it_flags & (ITEM_META | ITEM_TRANSIENT)) != 0 || t > now ||
        age <= 0 || now - t < (rel_time_t)age ||
        !tac_ssd_takes(it->nbytes))
        return false;
    item *meta = tac_ssd_store_copy(it, it->partition, true);
    if (meta == NULL)
        return false;
    TAC_INCR(evict_dram_to_ssd);
    do_item_move(it, meta, hv);
    item_release(meta);
    return true;
}

int tac_age_round(int evictor, int nevictors)
{
    if (__atomic_load_n(tac.cfg.ext_item_age, __ATOMIC_RELAXED) <= 0 ||
        tac.ssd == NULL || evictor < 0 ||
        evictor >= AGE_MAX_EVICTORS || nevictors <= 0)
        return 0;
    rel_time_t now = mc_now();
    if (last_walk[evictor] == now)
        return 0;
    /* Classes of chunks up to twice a meta tuple stay put: moving their
     * items would free less than half of what they take. */
    unsigned int first = slabs_clsid(2 * item_compact_size(0)) + 1;
    unsigned int ncls = slabs_nclasses();
    int moved = 0;
    for (unsigned int c = first; c <= ncls; c++)
        for (int p = evictor; p < tac.cfg.partitions; p += nevictors)
            moved += items_demote_tail(c, p, AGE_BATCH, age_demote);
    if (moved == 0)
        last_walk[evictor] = now;
    return moved;
}

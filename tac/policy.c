/*
 * tac/policy.c - every placement decision of the tier engine: where an
 * item leaving DRAM goes (demote), where a set that finds DRAM full goes
 * (stage), what a read of a lower tier brings up (promote), NVM
 * admission, and the policy variants of -o tier_policy.  The files that
 * move data (nvm_tier.c, the ssd_*.c files, place.c, fetch.c) ask here and act;
 * changing a policy means reading this file.
 *
 * Design: doc/design.md, "The data model" and "Every class gets room";
 * TaC 4.1, 4.2 and 5.3.  The variants:
 *   tac        temperatures decide: hot items live in DRAM, warm ones in
 *              NVM, cold ones on SSD; an SSD read of a warm or hot item
 *              brings its buf up.
 *   anti2      DRAM and NVM are one memory, with no temperatures: an item
 *              entering memory lands in NVM with probability
 *              NVM / (DRAM + NVM) by size, and the LRUs are FIFOs.
 *   antituple  as tac, but a read brings up only its own tuple.
 *   twotier    as tac without NVM.
 *
 * Any thread.  Reads the engine's state and temperatures; takes no item
 * lock and moves nothing.
 */
#include "config.h"

#include <pthread.h>

#include "engine/lazy_lru.h"
#include "base/settings.h"
#include "tac/internal.h"
#include "tac/nvm_tier.h"
#include "tac/policy.h"
#include "base/util.h"

/* ---- NVM admission (NVCache's OBP, SoCC'22) --------------------------------
 * Writing NVM slows its reads, and a full NVM pays for each admitted tuple
 * with another one moved to SSD.  With obp:PCT, a cold tuple is refused
 * while NVM is full (free < 2 x its watermark) and, over the last
 * OBP_WINDOW seconds, NVM's churn (slots written + slots freed) exceeds
 * PCT % of its lookups (NVM get hits).  Warm tuples are always admitted.
 * The decision is remade at most once a second, by whichever thread asks
 * first (trylock); the others read the last one. */
#define OBP_WINDOW 8

static struct {
    pthread_mutex_t lock;
    rel_time_t last;                        /* lock */
    uint64_t churn[OBP_WINDOW];             /* lock: cumulative, per second */
    uint64_t lookups[OBP_WINDOW];           /* lock */
    bool refuse;                            /* atomic */
} obp = { .lock = PTHREAD_MUTEX_INITIALIZER };

bool tac_nvm_admit(void)
{
    if (tac.obp_pct < 0 || tac.ssd == NULL)
        return true;
    rel_time_t now = mc_now();
    if (__atomic_load_n(&obp.last, __ATOMIC_RELAXED) != now &&
        pthread_mutex_trylock(&obp.lock) == 0) {
        if (obp.last != now) {
            uint64_t churn = STATS_GET(&tac.stats, nvm_inserts) +
                             STATS_GET(&tac.stats, nvm_removals);
            uint64_t look = STATS_GET(&tac.stats, get_hits_nvm);
            unsigned slot = now % OBP_WINDOW;
            /* The slot being overwritten is the window's oldest second. */
            uint64_t dc = churn - obp.churn[slot], dl = look - obp.lookups[slot];
            obp.churn[slot] = churn;
            obp.lookups[slot] = look;
            bool refuse = dc * 100 > (uint64_t)tac.obp_pct * dl && tac_nvm_full();
            __atomic_store_n(&obp.refuse, refuse, __ATOMIC_RELAXED);
            __atomic_store_n(&obp.last, now, __ATOMIC_RELAXED);
        }
        pthread_mutex_unlock(&obp.lock);
    }
    if (!__atomic_load_n(&obp.refuse, __ATOMIC_RELAXED))
        return true;
    TAC_INCR(nvm_admission_refused);
    return false;
}

bool tac_anti2_to_nvm(void)
{
    if (tac.policy != TIER_POLICY_ANTI2 || tac.nvm == NULL)
        return false;
    return (double)(util_rand64() >> 11) * 0x1.0p-53 < tac.anti2_nvm_share;
}

const char *tac_policy_name(void)
{
    return settings_choice("tier_policy");
}

/* -o ext_recache_rate N (memcached's, default 2000 as there): every Nth
 * SSD read that found its tuple asks the fetcher to move the item up to
 * DRAM, whatever its temperature (0: never); the fetcher does it only if
 * the item was read again after its first read (ITEM_ACTIVE, checked
 * there under the item lock: the flags are not read without it). */
static bool recache_turn(void)
{
    static unsigned long long reads;    /* atomic */
    int rate = __atomic_load_n(tac.cfg.ext_recache_rate, __ATOMIC_RELAXED);
    return rate > 0 &&
           __atomic_add_fetch(&reads, 1, __ATOMIC_RELAXED) % (unsigned)rate == 0;
}

bool tac_policy_temperatures(void)
{
    return tac.policy != TIER_POLICY_ANTI2;
}

bool tac_policy_demote_to_nvm(const item *it)
{
    /* Warm (and hot) items go to NVM; cold ones too unless the admission
     * policy refuses, and then to SSD (TaC 5.3).  anti2 has no
     * temperatures: its LRUs are FIFOs (items_set_lazy_lru). */
    if (tac.nvm == NULL)
        return false;
    return tac.ssd == NULL || tac.policy == TIER_POLICY_ANTI2 ||
           llru_temperature_at(it, mc_now()) != LLRU_COLD || tac_nvm_admit();
}

bool tac_policy_stage_to_nvm(void)
{
    /* A new item is cold: NVM unless the admission policy refuses. */
    return tac.nvm != NULL && (tac.policy == TIER_POLICY_ANTI2 || tac_nvm_admit());
}

bool tac_policy_nvm_hit_up(const item *meta)
{
    /* A hot NVM item goes up to DRAM (TaC 4.2); anti2 has no such move:
     * NVM is memory like DRAM. */
    return tac.policy != TIER_POLICY_ANTI2 && llru_temperature(meta) == LLRU_HOT;
}

enum tac_ssd_up tac_policy_ssd_hit(const item *meta)
{
    /* A warm or hot SSD item brings its whole buf up (TaC 4.2); the
     * comparison policies move only the item itself. */
    enum llru_temp temp = llru_temperature(meta);
    bool up = tac.policy == TIER_POLICY_ANTI2 || temp == LLRU_HOT ||
              (temp == LLRU_WARM && tac.nvm != NULL);
    if (up && (tac.policy == TIER_POLICY_TAC || tac.policy == TIER_POLICY_TWOTIER))
        return SSD_UP_BUF;
    if (up)
        return SSD_UP_TUPLE;
    return recache_turn() ? SSD_UP_RECACHE : SSD_UP_NONE;
}

void tac_policy_fetch_place(const item *meta, bool recache,
                            enum llru_temp *temp, enum item_tier place[2])
{
    *temp = llru_temperature(meta);
    /* anti2: no distinction; a recache (memcached's) goes to DRAM. */
    if (tac.policy == TIER_POLICY_ANTI2 || recache)
        *temp = LLRU_HOT;
    place[0] = place[1] = TIER_SSD;
    if (*temp == LLRU_WARM) {
        /* Warm items go to NVM; when it is full, its coldest tuple moves
         * down to SSD to make room (nvm_place). */
        if (tac.nvm != NULL)
            place[0] = TIER_NVM;
    } else if (*temp == LLRU_HOT) {
        /* anti2: the tuple comes into memory, DRAM or NVM by chance, and
         * NVM takes it when DRAM has no room: NVM is memory too. */
        if (tac_anti2_to_nvm()) {
            place[0] = TIER_NVM;
        } else {
            place[0] = TIER_DRAM;
            if (tac.policy == TIER_POLICY_ANTI2 && tac.nvm != NULL)
                place[1] = TIER_NVM;
        }
    }
}

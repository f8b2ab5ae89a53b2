/*
 * tac/policy.h - placement decisions (policy.c).
 */
#ifndef TAC_POLICY_H
#define TAC_POLICY_H

#include <stdbool.h>

#include "engine/items.h"
#include "engine/lazy_lru.h"

/* anti2 (doc/design.md, "The data model") treats DRAM and NVM as one memory: an item entering
 * it, a set or a tuple read up from SSD, lands in NVM with probability
 * NVM / (DRAM + NVM) by configured size, in DRAM otherwise, whatever its
 * temperature.  True when this one goes to NVM; always false under the
 * other policies or without NVM.  Any thread. */
bool tac_anti2_to_nvm(void);

/* The NVM admission policy (-o nvm_admission): may a cold item evicted
 * from DRAM, or a new one that finds DRAM full, be written to NVM?  False
 * sends it to SSD instead.  Any thread. */
bool tac_nvm_admit(void);

/* -o tier_policy's name, for `stats settings`. */
const char *tac_policy_name(void);
/* Whether the LRUs tell temperatures apart (all but anti2, whose LRUs are
 * FIFOs). */
bool tac_policy_temperatures(void);
/* Demote: whether DRAM item `it` should try NVM first (else SSD). */
bool tac_policy_demote_to_nvm(const item *it);
/* Stage: whether a set that finds DRAM full should try NVM first. */
bool tac_policy_stage_to_nvm(void);
/* Promote: whether an NVM hit on meta brings it up to DRAM. */
bool tac_policy_nvm_hit_up(const item *meta);

/* Promote: what an SSD hit on meta brings up. */
enum tac_ssd_up {
    SSD_UP_NONE,
    SSD_UP_BUF,         /* its whole buf (when the buf is warm too) */
    SSD_UP_TUPLE,       /* its own tuple */
    SSD_UP_RECACHE,     /* its own tuple, to DRAM whatever its temperature:
                           -o ext_recache_rate's every Nth read */
};
enum tac_ssd_up tac_policy_ssd_hit(const item *meta);
/* Promote: where a tuple read up from SSD for meta goes: place[0] first,
 * place[1] when the first has no room; TIER_SSD means it stays.  *temp
 * gets the temperature the policy gives it (a cold one stays). */
void tac_policy_fetch_place(const item *meta, bool recache,
                            enum llru_temp *temp, enum item_tier place[2]);

#endif

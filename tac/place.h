/*
 * tac/place.h - moving an item out of DRAM (place.c).
 */
#ifndef TAC_PLACE_H
#define TAC_PLACE_H

#include <stdbool.h>
#include <stdint.h>

#include "engine/items.h"

/* Moves a DRAM item one tier down, to NVM or else SSD (item_tier_ops.demote and
 * the evictors' demote function): item lock held, item pinned.  A meta
 * tuple is moved to another DRAM chunk instead (the page mover).  Returns
 * false when the lower tier or the meta tuple could not be had. */
bool tac_demote(item *it, uint32_t hv);

/* A set that finds DRAM full (item_tier_ops.stage): writes staging item
 * `staging` to a lower tier and returns its new unlinked meta tuple
 * (refcount 1); NULL when no tier has room now. */
item *tac_stage(item *staging, int partition);

#endif

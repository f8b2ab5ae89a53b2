/*
 * tac/nvm_clock.h - the CLOCK over NVM's slots (nvm_clock.c).
 */
#ifndef TAC_NVM_CLOCK_H
#define TAC_NVM_CLOCK_H

#include "engine/items.h"

struct clock_turn {
    int freed;      /* slots freed: dead items reclaimed, live ones evicted */
    int evicted;    /* of those, live items dropped (move NULL) */
    int moved;      /* items move() took down */
};

/* Turns the hand of NVM slot class cls until `max` items were freed or
 * moved, or it visited max * 8 slots: a dead item is reclaimed, an item
 * read since the hand last passed stays, any other goes to move(it, hv)
 * (items_lower_visit; NULL: it is evicted). */
struct clock_turn tac_nvm_clock_evict(unsigned cls, int max,
                                      item_evict_hook_fn move);

#endif

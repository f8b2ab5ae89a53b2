/*
 * item_lock.c - the item lock stripes (item_lock.h; the calls on them are
 * inline there).
 */
#include "config.h"

#include "engine/item_lock.h"

pthread_mutex_t item_locks_[ITEM_LOCK_COUNT];
static bool locks_ready;

void item_locks_init(void)
{
    if (locks_ready)
        return;
    for (unsigned int i = 0; i < ITEM_LOCK_COUNT; i++)
        pthread_mutex_init(&item_locks_[i], NULL);
    locks_ready = true;
}

/*
 * item_lock.c - the key hash and the item lock stripes (item_lock.h).
 */
#include "config.h"

#include <pthread.h>

#include "hash.h"
#include "item_lock.h"

#define ITEM_LOCK_COUNT (1u << ITEM_LOCK_POWER)
#define ITEM_LOCK_MASK (ITEM_LOCK_COUNT - 1)

static pthread_mutex_t item_locks[ITEM_LOCK_COUNT];
static bool locks_ready;

void item_locks_init(void)
{
    if (locks_ready)
        return;
    for (unsigned int i = 0; i < ITEM_LOCK_COUNT; i++)
        pthread_mutex_init(&item_locks[i], NULL);
    locks_ready = true;
}

uint32_t item_hash(const char *key, size_t nkey)
{
    return hash_key(key, nkey);
}

void item_lock(uint32_t hv)
{
    pthread_mutex_lock(&item_locks[hv & ITEM_LOCK_MASK]);
}

void item_unlock(uint32_t hv)
{
    pthread_mutex_unlock(&item_locks[hv & ITEM_LOCK_MASK]);
}

bool item_trylock(uint32_t hv)
{
    return pthread_mutex_trylock(&item_locks[hv & ITEM_LOCK_MASK]) == 0;
}

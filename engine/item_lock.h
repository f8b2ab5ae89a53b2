/*
 * item_lock.h - the key hash and the item lock stripes.  An item lock
 * (stripe hv & mask) protects every item of the keys hashing to it, and
 * the hash index buckets of those keys (assoc.c); the lock order is in
 * items.h.
 */
#ifndef ITEM_LOCK_H
#define ITEM_LOCK_H

#include <pthread.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "base/hash.h"

/* log2 of the number of item lock stripes (stripe = hv & mask). */
#define ITEM_LOCK_POWER 12
#define ITEM_LOCK_COUNT (1u << ITEM_LOCK_POWER)
#define ITEM_LOCK_MASK (ITEM_LOCK_COUNT - 1)

/* The stripes; only the calls below touch them (inline: they sit on
 * every request's path). */
extern pthread_mutex_t item_locks_[ITEM_LOCK_COUNT];

/* Initializes the stripes; once per process (items_init calls it). */
void item_locks_init(void);

/* Key hash; also selects the item lock stripe and the hash bucket. */
static inline uint32_t item_hash(const char *key, size_t nkey)
{
    return hash_key(key, nkey);
}

static inline void item_lock(uint32_t hv)
{
    pthread_mutex_lock(&item_locks_[hv & ITEM_LOCK_MASK]);
}

static inline void item_unlock(uint32_t hv)
{
    pthread_mutex_unlock(&item_locks_[hv & ITEM_LOCK_MASK]);
}

static inline bool item_trylock(uint32_t hv)
{
    return pthread_mutex_trylock(&item_locks_[hv & ITEM_LOCK_MASK]) == 0;
}

#endif

/*
 * item_lock.h - the key hash and the item lock stripes.  An item lock
 * (stripe hv & mask) protects every item of the keys hashing to it, and
 * the hash index buckets of those keys (assoc.c); the lock order is in
 * items.h.
 */
#ifndef ITEM_LOCK_H
#define ITEM_LOCK_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* log2 of the number of item lock stripes (stripe = hv & mask). */
#define ITEM_LOCK_POWER 12

/* Initializes the stripes; once per process (items_init calls it). */
void item_locks_init(void);
/* Key hash; also selects the item lock stripe and the hash bucket. */
uint32_t item_hash(const char *key, size_t nkey);
void item_lock(uint32_t hv);
void item_unlock(uint32_t hv);
bool item_trylock(uint32_t hv);

#endif

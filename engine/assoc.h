/*
 * assoc.h - the hash index: one entry per key, for every tier.
 *
 * Buckets are protected by the item lock stripes (items.h): the table has
 * at least as many buckets as stripes, so each bucket falls under exactly
 * one stripe, before and during an incremental resize.  All functions
 * except assoc_init/assoc_expand_step/assoc_reserve are called with item_lock(hv) held.
 */
#ifndef ASSOC_H
#define ASSOC_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

struct item;

/* hashpower: log2 of the initial bucket count (>= the stripe bits). */
void assoc_init(int hashpower);

/* The item of key (hash hv): a DRAM item by its key, a meta tuple by the
 * key's fingerprint (item_key_fp()).  Caller holds item_lock(hv). */
struct item *assoc_find(const char *key, size_t nkey, uint32_t hv);
/* The same for a key known only by its fingerprint fp and length (a
 * restart's saved meta tuples).  Caller holds item_lock((uint32_t)fp). */
struct item *assoc_find_fp(uint64_t fp, size_t nkey);
/* A hint that hv's bucket is looked up soon (no lock needed). */
void assoc_prefetch(uint32_t hv);
/* Calls fn on every item of the bucket that hash value hv falls in (the
 * sampler picks random hv).  Caller holds item_lock(hv); fn must not
 * change the bucket. */
void assoc_visit_bucket(uint32_t hv, void (*fn)(struct item *it, void *arg),
                        void *arg);
/* Inserts; the key must not be present. */
void assoc_insert(struct item *it, uint32_t hv);
/* Removes `it`, whose key hashes to hv, from the index. */
void assoc_delete(struct item *it, uint32_t hv);

/*
 * Moves at most `budget` buckets from the old table to the new one when a
 * resize is in progress, starting one when the load factor exceeds 1.5.
 * Takes the stripe locks it needs.  Returns true while a resize is in
 * progress.  Called by the maintainer thread.
 */
bool assoc_expand_step(int budget);
/* Grows the table at once, within the calling thread, until it has at
 * least n buckets (or cannot grow), finishing a resize in progress first.
 * For a start that knows how many items are coming: the crash scan. */
void assoc_reserve(uint64_t n);

/* Calls fn once on every item of the index whose hash falls in item lock
 * stripe `stripe` (hv & ITEM_LOCK_MASK), while a resize may be under way.
 * Caller holds that stripe (item_lock(stripe)); fn must not change the
 * index.  Walking every stripe in turn visits each item that stays in the
 * index meanwhile exactly once, without stopping the server. */
void assoc_visit_stripe(unsigned int stripe, void (*fn)(struct item *it, void *arg),
                        void *arg);

/* Calls fn on every item of the index, bucket by bucket (both tables
 * while a resize is half done).  Only for a quiescent server: no other
 * thread may touch the index meanwhile (a graceful stop saving it); fn
 * must not change the index. */
void assoc_each(void (*fn)(struct item *it, void *arg), void *arg);

/* Items in the index. */
uint64_t assoc_count(void);
/* Current log2 of the bucket count (the new table's while expanding). */
unsigned int assoc_hashpower(void);

#endif

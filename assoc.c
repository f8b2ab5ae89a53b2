/*
 * assoc.c - the hash index: one chained bucket table with incremental
 * resize.
 *
 * Owns: the bucket tables (`primary`, and `old` while expanding) and the
 * hash chains through item->h_next.
 *
 * Design.  The table has 2^hashpower buckets, hashpower >= ITEM_LOCK_POWER
 * + 1 (so that the old table, 2^(hashpower-1) buckets during a resize,
 * still has at least one bucket per stripe).  A bucket b is protected by
 * item lock stripe (b & stripe mask); old bucket i and its two new
 * buckets i and i + 2^(hashpower-1) share that stripe.
 *
 * When the number of items exceeds 1.5 x buckets, assoc_expand_step()
 * (maintainer thread) takes every stripe, allocates a table twice as big,
 * makes it primary and keeps the previous one as `old`.  Then, one bucket
 * at a time and holding only that bucket's stripe, it moves old bucket
 * `expand_bucket` into the new table and advances expand_bucket (atomic).
 * A lookup for hash hv uses old[hv & oldmask] if that bucket has not moved
 * yet (hv & oldmask >= expand_bucket), else primary[hv & mask].  The
 * comparison is stable for a reader holding its stripe: expand_bucket only
 * passes bucket b while b's stripe is held.  Finishing takes every stripe
 * again and frees the old table.  If no one calls assoc_expand_step() the
 * chains just grow longer; inserts always work.
 *
 * Threads: assoc_find/insert/delete run with item_lock(hv) held.
 * Table pointers and hashpower change only with every stripe held.
 * assoc_expand_step() and assoc_stats() serialize on expand_lock.
 */
#include "config.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "assoc.h"
#include "hash.h"
#include "items.h"
#include "stats.h"

#define ASSOC_MIN_POWER (ITEM_LOCK_POWER + 1)
#define ASSOC_MAX_POWER 32

static item **primary;              /* all stripes to replace */
static item **old_table;            /* all stripes to replace */
static unsigned int hashpower;      /* all stripes to change */
static bool expanding;              /* all stripes to change */
static uint64_t expand_bucket;      /* atomic; next old bucket to move */
static uint64_t hash_items;         /* atomic */
static pthread_mutex_t expand_lock = PTHREAD_MUTEX_INITIALIZER;

#define HASHSIZE(n) ((uint64_t)1 << (n))
#define HASHMASK(n) (HASHSIZE(n) - 1)

static void set_hash_bytes(void)
{
    uint64_t b = HASHSIZE(hashpower) * sizeof(item *);
    if (expanding)
        b += HASHSIZE(hashpower - 1) * sizeof(item *);
    __atomic_store_n(&gstats.hash_bytes, b, __ATOMIC_RELAXED);
}

void assoc_init(int power)
{
    if (power < ASSOC_MIN_POWER)
        power = ASSOC_MIN_POWER;
    if (power > ASSOC_MAX_POWER - 1)
        power = ASSOC_MAX_POWER - 1;
    free(primary);
    free(old_table);
    old_table = NULL;
    expanding = false;
    expand_bucket = 0;
    hash_items = 0;
    hashpower = (unsigned int)power;
    primary = calloc(HASHSIZE(hashpower), sizeof(item *));
    if (primary == NULL) {
        fprintf(stderr, "assoc: cannot allocate hash table of 2^%u\n",
                hashpower);
        exit(EXIT_FAILURE);
    }
    set_hash_bytes();
}

/* The chain head for hv.  Caller holds hv's stripe. */
static item **bucket_for(uint32_t hv)
{
    if (expanding) {
        uint64_t ob = hv & HASHMASK(hashpower - 1);
        if (ob >= __atomic_load_n(&expand_bucket, __ATOMIC_ACQUIRE))
            return &old_table[ob];
    }
    return &primary[hv & HASHMASK(hashpower)];
}

item *assoc_find(const char *key, size_t nkey, uint32_t hv)
{
    for (item *it = *bucket_for(hv); it != NULL; it = it->h_next) {
        if (it->nkey == nkey && memcmp(ITEM_key(it), key, nkey) == 0)
            return it;
    }
    return NULL;
}

void assoc_insert(item *it, uint32_t hv)
{
    item **b = bucket_for(hv);
    it->h_next = *b;
    *b = it;
    __atomic_fetch_add(&hash_items, 1, __ATOMIC_RELAXED);
}

void assoc_delete(const char *key, size_t nkey, uint32_t hv)
{
    item **pp = bucket_for(hv);
    for (; *pp != NULL; pp = &(*pp)->h_next) {
        item *it = *pp;
        if (it->nkey == nkey && memcmp(ITEM_key(it), key, nkey) == 0) {
            *pp = it->h_next;
            it->h_next = NULL;
            __atomic_fetch_sub(&hash_items, 1, __ATOMIC_RELAXED);
            return;
        }
    }
}

uint64_t assoc_count(void)
{
    return __atomic_load_n(&hash_items, __ATOMIC_RELAXED);
}

/* Starts a resize.  Caller holds expand_lock, not any stripe. */
static void expand_start(void)
{
    if (hashpower + 1 >= ASSOC_MAX_POWER)
        return;
    item **t = calloc(HASHSIZE(hashpower + 1), sizeof(item *));
    if (t == NULL)
        return;     /* retried on the next step; lookups keep working */
    item_lock_all();
    old_table = primary;
    primary = t;
    hashpower++;
    __atomic_store_n(&expand_bucket, 0, __ATOMIC_RELEASE);
    expanding = true;
    set_hash_bytes();
    item_unlock_all();
    if (settings.verbose > 1)
        fprintf(stderr, "assoc: expanding to 2^%u buckets\n", hashpower);
}

static void expand_finish(void)
{
    item_lock_all();
    free(old_table);
    old_table = NULL;
    expanding = false;
    set_hash_bytes();
    item_unlock_all();
}

/* Moves old bucket b into the new table.  Caller holds expand_lock. */
static void expand_bucket_move(uint64_t b)
{
    item_lock((uint32_t)b);
    item *it = old_table[b];
    while (it != NULL) {
        item *next = it->h_next;
        uint32_t hv = item_hash(ITEM_key(it), it->nkey);
        item **nb = &primary[hv & HASHMASK(hashpower)];
        it->h_next = *nb;
        *nb = it;
        it = next;
    }
    old_table[b] = NULL;
    __atomic_store_n(&expand_bucket, b + 1, __ATOMIC_RELEASE);
    item_unlock((uint32_t)b);
}

bool assoc_expand_step(int budget)
{
    pthread_mutex_lock(&expand_lock);
    if (!expanding && assoc_count() > HASHSIZE(hashpower) * 3 / 2)
        expand_start();
    if (expanding) {
        uint64_t oldsize = HASHSIZE(hashpower - 1);
        uint64_t b = __atomic_load_n(&expand_bucket, __ATOMIC_RELAXED);
        for (int n = 0; n < budget && b < oldsize; n++, b++)
            expand_bucket_move(b);
        if (b >= oldsize)
            expand_finish();
    }
    bool busy = expanding;
    pthread_mutex_unlock(&expand_lock);
    return busy;
}

void assoc_stats(struct stat_sink *sink)
{
    pthread_mutex_lock(&expand_lock);
    unsigned int hp = hashpower;
    bool exp = expanding;
    pthread_mutex_unlock(&expand_lock);
    stat_printf(sink, "hash_power_level", "%u", hp);
    stat_printf(sink, "hash_bytes", "%llu",
                (unsigned long long)STATS_GET(&gstats, hash_bytes));
    stat_printf(sink, "hash_is_expanding", "%d", exp ? 1 : 0);
}

unsigned int assoc_hashpower(void)
{
    pthread_mutex_lock(&expand_lock);
    unsigned int hp = hashpower;
    pthread_mutex_unlock(&expand_lock);
    return hp;
}

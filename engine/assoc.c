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
 * (maintainer thread) allocates a table twice as big and publishes a new
 * table state {primary = new, old = previous, hashpower + 1, expanding}
 * with one atomic pointer store.  Then, one bucket at a time and holding
 * only that bucket's stripe, it moves the next old bucket b into the new
 * table and advances a count of buckets moved (expand_moved, atomic).  A
 * lookup for hash hv uses old[hv & oldmask] if that bucket has not moved
 * yet (hv & oldmask >= the count less the state's base), else
 * primary[hv & mask].
 *
 * Why no global lock is needed to start or finish: with no bucket moved
 * the expanding state sends every lookup to exactly the bucket the
 * previous state did, and once every old bucket has moved the
 * non-expanding state that finishes the resize sends every lookup where
 * the expanding one did.  The comparison with the count is stable for a
 * reader holding its stripe, because the count only passes bucket b
 * while b's stripe is held; so the old table can be freed once every
 * bucket has moved.  The count never goes back: each expanding state
 * notes the count it started from (its base).  A reader that loaded a
 * state just before a resize finished and the next one started then still
 * finds its bucket: every bucket of its state counts as moved, and its
 * state's primary, the next state's old table, cannot lose the reader's
 * bucket (or be freed) while the reader holds the stripe.  (A count reset
 * to 0 at each start sent such a reader into the freed table.)  Table
 * states live in a static array and are never
 * freed, so a state pointer loaded by a reader stays valid.  (Taking all
 * 2^ITEM_LOCK_POWER stripes would do the same but stalls every worker and
 * defeats ThreadSanitizer's deadlock detector.)
 *
 * If no one calls assoc_expand_step() the chains just grow longer;
 * inserts always work.
 *
 * Threads: assoc_find/insert/delete run with item_lock(hv) held.
 * assoc_expand_step() serializes on expand_lock (maintainer thread).
 */
#include "config.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/assoc.h"
#include "base/hash.h"
#include "engine/item_layout.h"
#include "engine/item_lock.h"
#include "base/stats.h"

#define ASSOC_MIN_POWER (ITEM_LOCK_POWER + 1)
#define ASSOC_MAX_POWER 32

struct assoc_table {
    item **primary;         /* 2^hashpower buckets */
    item **old;             /* 2^(hashpower-1) buckets while expanding */
    unsigned int hashpower;
    bool expanding;
    uint64_t base;          /* expand_moved when this state began expanding */
};

/* Immutable once published; two per resize, never freed. */
static struct assoc_table states[2 * ASSOC_MAX_POWER + 2];
static int nstates;                 /* expand_lock */
static struct assoc_table *cur;     /* atomic (acquire/release) */
static uint64_t expand_moved;       /* atomic; old buckets moved, ever */
static uint64_t hash_items;         /* atomic */
static pthread_mutex_t expand_lock = PTHREAD_MUTEX_INITIALIZER;

#define HASHSIZE(n) ((uint64_t)1 << (n))
#define HASHMASK(n) (HASHSIZE(n) - 1)

static inline struct assoc_table *table_state(void)
{
    return __atomic_load_n(&cur, __ATOMIC_ACQUIRE);
}

/* Publishes a new table state.  Caller holds expand_lock. */
static void publish(item **primary, item **old, unsigned int hp, bool exp)
{
    struct assoc_table *t = &states[nstates++];
    t->primary = primary;
    t->old = old;
    t->hashpower = hp;
    t->expanding = exp;
    t->base = __atomic_load_n(&expand_moved, __ATOMIC_RELAXED);
    uint64_t b = HASHSIZE(hp) * sizeof(item *);
    if (exp)
        b += HASHSIZE(hp - 1) * sizeof(item *);
    __atomic_store_n(&gstats.hash_bytes, b, __ATOMIC_RELAXED);
    __atomic_store_n(&cur, t, __ATOMIC_RELEASE);
}

/* Readers of two lines of plain `stats` (stats.c's table). */
static uint64_t stat_hash_power_level(void)
{
    return table_state()->hashpower;
}

static uint64_t stat_hash_is_expanding(void)
{
    return table_state()->expanding ? 1 : 0;
}

void assoc_init(int power)
{
    if (power < ASSOC_MIN_POWER)
        power = ASSOC_MIN_POWER;
    if (power > ASSOC_MAX_POWER - 1)
        power = ASSOC_MAX_POWER - 1;
    pthread_mutex_lock(&expand_lock);
    struct assoc_table *t = cur;
    if (t != NULL) {
        free(t->primary);
        free(t->old);
    }
    nstates = 0;
    expand_moved = 0;
    hash_items = 0;
    item **primary = calloc(HASHSIZE(power), sizeof(item *));
    if (primary == NULL) {
        fprintf(stderr, "assoc: cannot allocate hash table of 2^%d\n",
                power);
        exit(EXIT_FAILURE);
    }
    publish(primary, NULL, (unsigned int)power, false);
    pthread_mutex_unlock(&expand_lock);
    /* hash_bytes is a gstats gauge that stats.c reads itself. */
    stats_provide("hash_power_level", stat_hash_power_level);
    stats_provide("hash_is_expanding", stat_hash_is_expanding);
}

/* The chain head for hv.  Caller holds hv's stripe. */
static item **bucket_for(uint32_t hv)
{
    struct assoc_table *t = table_state();
    if (t->expanding) {
        uint64_t ob = hv & HASHMASK(t->hashpower - 1);
        if (ob >= __atomic_load_n(&expand_moved, __ATOMIC_ACQUIRE) - t->base)
            return &t->old[ob];
    }
    return &t->primary[hv & HASHMASK(t->hashpower)];
}

item *assoc_find(const char *key, size_t nkey, uint32_t hv)
{
    uint64_t fp = 0;
    for (item *it = *bucket_for(hv); it != NULL; it = it->h_next) {
        if (item_has_key(it, key, nkey, hv, &fp))
            return it;
    }
    return NULL;
}

item *assoc_find_fp(uint64_t fp, size_t nkey)
{
    uint32_t hv = (uint32_t)fp;
    for (item *it = *bucket_for(hv); it != NULL; it = it->h_next) {
        if (it->nkey != nkey)
            continue;
        if (item_compact(it) ? item_meta_fp(it) == fp
                             : item_key_fp(ITEM_key(it), nkey, hv) == fp)
            return it;
    }
    return NULL;
}

void assoc_prefetch(uint32_t hv)
{
    struct assoc_table *t = table_state();
    __builtin_prefetch(&t->primary[hv & HASHMASK(t->hashpower)]);
}

void assoc_visit_bucket(uint32_t hv, void (*fn)(item *it, void *arg), void *arg)
{
    for (item *it = *bucket_for(hv); it != NULL; it = it->h_next)
        fn(it, arg);
}

/* The table state is loaded with the stripe held, so no bucket of the
 * stripe moves meanwhile (a move takes its stripe), and neither table
 * holding them can be freed (a free waits for every bucket to move).  An
 * old bucket not yet moved holds the items of two new buckets: each is
 * visited from the new bucket its hash picks. */
void assoc_visit_stripe(unsigned int stripe, void (*fn)(item *it, void *arg), void *arg)
{
    struct assoc_table *t = table_state();
    uint64_t mask = HASHMASK(t->hashpower);
    for (uint64_t b = stripe & ITEM_LOCK_MASK; b <= mask; b += ITEM_LOCK_COUNT) {
        item *head = t->primary[b];
        bool shared = false;
        if (t->expanding) {
            uint64_t ob = b & HASHMASK(t->hashpower - 1);
            if (ob >= __atomic_load_n(&expand_moved, __ATOMIC_ACQUIRE) - t->base) {
                head = t->old[ob];
                shared = true;
            }
        }
        for (item *it = head; it != NULL; it = it->h_next)
            if (!shared || (item_hv(it) & mask) == b)
                fn(it, arg);
    }
}

void assoc_insert(item *it, uint32_t hv)
{
    item **b = bucket_for(hv);
    it->h_next = *b;
    *b = it;
    __atomic_fetch_add(&hash_items, 1, __ATOMIC_RELAXED);
}

void assoc_delete(item *gone, uint32_t hv)
{
    item **pp = bucket_for(hv);
    for (; *pp != NULL; pp = &(*pp)->h_next) {
        item *it = *pp;
        if (it == gone) {
            *pp = it->h_next;
            it->h_next = NULL;
            __atomic_fetch_sub(&hash_items, 1, __ATOMIC_RELAXED);
            return;
        }
    }
}

void assoc_each(void (*fn)(item *it, void *arg), void *arg)
{
    struct assoc_table *t = table_state();
    uint64_t n = HASHSIZE(t->hashpower);
    for (uint64_t b = 0; b < n; b++)
        for (item *it = t->primary[b]; it != NULL; it = it->h_next)
            fn(it, arg);
    if (!t->expanding)
        return;
    uint64_t from = __atomic_load_n(&expand_moved, __ATOMIC_ACQUIRE) - t->base;
    for (uint64_t b = from; b < HASHSIZE(t->hashpower - 1); b++)
        for (item *it = t->old[b]; it != NULL; it = it->h_next)
            fn(it, arg);
}

uint64_t assoc_count(void)
{
    return __atomic_load_n(&hash_items, __ATOMIC_RELAXED);
}

/* Starts a resize.  Caller holds expand_lock. */
static void expand_start(struct assoc_table *t)
{
    if (t->hashpower + 1 >= ASSOC_MAX_POWER ||
        nstates + 2 > (int)(sizeof(states) / sizeof(states[0])))
        return;
    item **n = calloc(HASHSIZE(t->hashpower + 1), sizeof(item *));
    if (n == NULL)
        return;     /* retried on the next step; lookups keep working */
    publish(n, t->primary, t->hashpower + 1, true);
    if (settings.verbose > 1)
        fprintf(stderr, "assoc: expanding to 2^%u buckets\n",
                t->hashpower + 1);
}

/* Moves old bucket b into the new table.  Caller holds expand_lock. */
static void expand_bucket_move(struct assoc_table *t, uint64_t b)
{
    item_lock((uint32_t)b);
    item *it = t->old[b];
    while (it != NULL) {
        item *next = it->h_next;
        uint32_t hv = item_hv(it);
        item **nb = &t->primary[hv & HASHMASK(t->hashpower)];
        it->h_next = *nb;
        *nb = it;
        it = next;
    }
    t->old[b] = NULL;
    __atomic_store_n(&expand_moved, t->base + b + 1, __ATOMIC_RELEASE);
    item_unlock((uint32_t)b);
}

bool assoc_expand_step(int budget)
{
    pthread_mutex_lock(&expand_lock);
    struct assoc_table *t = cur;
    if (!t->expanding && assoc_count() > HASHSIZE(t->hashpower) * 3 / 2) {
        expand_start(t);
        t = cur;
    }
    if (t->expanding) {
        uint64_t oldsize = HASHSIZE(t->hashpower - 1);
        uint64_t b = __atomic_load_n(&expand_moved, __ATOMIC_RELAXED) - t->base;
        for (int n = 0; n < budget && b < oldsize; n++, b++)
            expand_bucket_move(t, b);
        if (b >= oldsize) {
            publish(t->primary, NULL, t->hashpower, false);
            free(t->old);
            t = cur;
        }
    }
    bool busy = t->expanding;
    pthread_mutex_unlock(&expand_lock);
    return busy;
}

void assoc_reserve(uint64_t n)
{
    pthread_mutex_lock(&expand_lock);
    struct assoc_table *t = cur;
    while (HASHSIZE(t->hashpower) < n || t->expanding) {
        if (!t->expanding) {
            expand_start(t);
            if (cur == t)
                break;          /* no room for a larger table: keep this one */
            t = cur;
        }
        uint64_t oldsize = HASHSIZE(t->hashpower - 1);
        for (uint64_t b = expand_moved - t->base; b < oldsize; b++)
            expand_bucket_move(t, b);
        publish(t->primary, NULL, t->hashpower, false);
        free(t->old);
        t = cur;
    }
    pthread_mutex_unlock(&expand_lock);
}

unsigned int assoc_hashpower(void)
{
    return table_state()->hashpower;
}

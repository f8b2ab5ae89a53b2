/*
 * lazy_lru.c - Lazy LRU access field, temperature thresholds and the
 * sampler that sets them.
 *
 * Owns: the `access` field of every item (layout and formula in
 * lazy_lru.h), the THR_hot / THR_warm thresholds and the replacement rule
 * (llru_access, llru_second_chance), shared with bench/lru-sim, and the
 * bump rings with the DRAM and NVM LRU threads that drain them (items.c
 * decides what to push and applies the batches).
 *
 * Threads: any worker records accesses with the item lock held; readers
 * without the lock (sampler, stats) see a consistent 32-bit word because
 * the field is only touched through relaxed atomic loads, stores and (the
 * second chance, made under the LRU lock) a compare-exchange.
 */
#include "config.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "engine/assoc.h"
#include "base/bg.h"
#include "engine/item_lock.h"
#include "engine/lazy_lru.h"
#include "base/stats.h"
#include "base/util.h"

static unsigned int thr_hot = LLRU_THR_HOT_DEFAULT;   /* atomic */
static unsigned int thr_warm = LLRU_THR_WARM_DEFAULT; /* atomic */

static inline uint32_t access_load(const item *it)
{
    return __atomic_load_n(&it->access, __ATOMIC_RELAXED);
}

static inline void access_store(item *it, uint32_t v)
{
    __atomic_store_n(&it->access, v, __ATOMIC_RELAXED);
}

static uint64_t llru_rounds;            /* lru_maintainer_juggles */

void llru_init(void)
{
    llru_set_thresholds(LLRU_THR_HOT_DEFAULT, LLRU_THR_WARM_DEFAULT);
    stats_register_section("temperature", llru_stats_temperature);
    stats_provide_counter("lru_maintainer_juggles", &llru_rounds);
}

void llru_init_access(item *it, rel_time_t now)
{
    access_store(it, (now & LLRU_TIME_MASK) << 8);
}

/* readCount of access word `a` decayed to `now`: rc / (now - time + 1),
 * the first half of the access formula.  The modular difference handles
 * the 24-bit wrap. */
static inline unsigned int decayed_count(uint32_t a, rel_time_t now)
{
    uint32_t elapsed = ((now & LLRU_TIME_MASK) - (a >> 8)) & LLRU_TIME_MASK;
    return (a & LLRU_COUNT_MASK) / (elapsed + 1);
}

static inline enum llru_temp temp_of(unsigned int rc)
{
    if (rc > llru_thr_hot())
        return LLRU_HOT;
    if (rc > llru_thr_warm())
        return LLRU_WARM;
    return LLRU_COLD;
}

void llru_record_access(item *it, rel_time_t now)
{
    (void)llru_access(it, now);
}

/* ---- Replacement policy ---------------------------------------------------
 * Pure functions of the access field, the time and the thresholds: no
 * locks, no other state.  The server's LRU threads and bench/lru-sim call
 * the same code.  The rule and the measurements behind it are in
 * lazy_lru.h. */

bool llru_access(item *it, rel_time_t now)
{
    uint32_t a = access_load(it);
    unsigned int before = decayed_count(a, now);
    unsigned int rc = before + 1;
    unsigned int cap = 2 * llru_thr_hot();

    if (rc > cap)
        rc = cap;
    access_store(it, ((now & LLRU_TIME_MASK) << 8) | rc);
    /* Compared with the temperature it had cooled to, not the stored one:
     * an item that went cold and is read hard again is news. */
    return temp_of(rc) > temp_of(before);
}

enum llru_temp llru_temperature_at(const item *it, rel_time_t now)
{
    return temp_of(decayed_count(access_load(it), now));
}

bool llru_second_chance(item *it)
{
    uint32_t a = access_load(it);

    /* Not read since it was linked or since its last second chance. */
    if ((a & LLRU_COUNT_MASK) == 0)
        return false;
    /* Read: exactly one more lap, unless it is read again.  The caller
     * holds the LRU lock, not the item lock, so a worker may record a
     * read at the same moment.  If its store lands first the exchange
     * fails and its record stands: the item was just read, so the chance
     * is deserved without the cut.  Time is never changed. */
    __atomic_compare_exchange_n(&it->access, &a, a & ~LLRU_COUNT_MASK,
                                false, __ATOMIC_RELAXED, __ATOMIC_RELAXED);
    return true;
}

unsigned int llru_read_count(const item *it)
{
    return access_load(it) & LLRU_COUNT_MASK;
}

uint32_t llru_access_time(const item *it)
{
    return access_load(it) >> 8;
}

enum llru_temp llru_temperature(const item *it)
{
    return temp_of(llru_read_count(it));
}

unsigned int llru_thr_hot(void)
{
    return __atomic_load_n(&thr_hot, __ATOMIC_RELAXED);
}

unsigned int llru_thr_warm(void)
{
    return __atomic_load_n(&thr_warm, __ATOMIC_RELAXED);
}

void llru_set_thresholds(unsigned int hot, unsigned int warm)
{
    if (hot < 1)
        hot = 1;
    if (hot > LLRU_THR_HOT_MAX)
        hot = LLRU_THR_HOT_MAX;
    if (warm >= hot)
        warm = hot - 1;
    __atomic_store_n(&thr_hot, hot, __ATOMIC_RELAXED);
    __atomic_store_n(&thr_warm, warm, __ATOMIC_RELAXED);
}

/* ---- Threshold sampler ---------------------------------------------------- */

#define HISTORY 16

struct sample_rec {
    rel_time_t time;
    unsigned int sampled, hot, warm;
    unsigned int dram_pct, nvm_pct;     /* where the sampled items are */
    unsigned int hot_pct, warm_pct;     /* how many are hot, warm or hotter */
};

static pthread_mutex_t hist_lock = PTHREAD_MUTEX_INITIALIZER;
static struct sample_rec history[HISTORY];  /* hist_lock; a ring */
static unsigned int nsamples;               /* hist_lock */

void llru_thresholds_from(const uint64_t hist[LLRU_COUNT_MASK + 1], uint64_t n,
                          double hot_share, double warm_share,
                          unsigned int *hot, unsigned int *warm)
{
    /* above[v]: items with readCount > v. */
    uint64_t above[LLRU_COUNT_MASK + 1];
    uint64_t acc = 0;
    for (int v = LLRU_COUNT_MASK; v >= 0; v--) {
        above[v] = acc;
        acc += hist[v];
    }
    unsigned int h = LLRU_THR_HOT_MAX;
    for (unsigned int v = 1; v <= LLRU_THR_HOT_MAX; v++)
        if ((double)above[v] <= hot_share * (double)n) {
            h = v;
            break;
        }
    unsigned int w = LLRU_THR_HOT_MAX - 1;
    for (unsigned int v = 0; v < LLRU_THR_HOT_MAX; v++)
        if ((double)above[v] <= warm_share * (double)n) {
            w = v;
            break;
        }
    /* Both bounds hold with hot raised above warm; warm lowered below hot
     * would break its own (THR_warm 0 makes every item read once warm,
     * however little of the data DRAM and NVM hold). */
    if (h <= w)
        h = w + 1;
    *hot = h;
    *warm = w;
}

struct sample_acc {
    rel_time_t now;
    uint64_t hist[LLRU_COUNT_MASK + 1];
    uint64_t n, dram, nvm;
};

static void sample_item(item *it, void *arg)
{
    struct sample_acc *a = arg;
    uint32_t acc = __atomic_load_n(&it->access, __ATOMIC_RELAXED);
    uint32_t elapsed = ((a->now & LLRU_TIME_MASK) - (acc >> 8)) & LLRU_TIME_MASK;
    /* The value a read now would leave: temperatures are judged on it
     * (llru_access), so the thresholds must be too.  Judged on the decayed
     * value alone, every item read at all once more would pass a
     * threshold of 0, and far more items than DRAM holds would count as
     * hot. */
    unsigned int v = (acc & LLRU_COUNT_MASK) / (elapsed + 1) + 1;
    a->hist[v > LLRU_COUNT_MASK ? LLRU_COUNT_MASK : v]++;
    a->n++;
    if (it->tier == TIER_DRAM)
        a->dram++;
    else if (it->tier == TIER_NVM)
        a->nvm++;
}

unsigned int llru_sample(unsigned int want, rel_time_t now)
{
    struct sample_acc a;
    memset(&a, 0, sizeof(a));
    a.now = now;
    /* Random buckets until enough items; many buckets are empty. */
    for (unsigned int tries = 0; a.n < want && tries < 8 * want; tries++) {
        uint32_t hv = (uint32_t)(util_rand64() >> 16);
        if (!item_trylock(hv))
            continue;
        assoc_visit_bucket(hv, sample_item, &a);
        item_unlock(hv);
    }
    if (a.n == 0)
        return 0;
    double dram = (double)a.dram / (double)a.n;
    double nvm = (double)a.nvm / (double)a.n;
    unsigned int hot, warm;
    llru_thresholds_from(a.hist, a.n, dram, dram + nvm, &hot, &warm);
    llru_set_thresholds(hot, warm);
    hot = llru_thr_hot();
    warm = llru_thr_warm();

    uint64_t hotter = 0, warmer = 0;
    for (unsigned int v = 0; v <= LLRU_COUNT_MASK; v++) {
        if (v > hot)
            hotter += a.hist[v];
        if (v > warm)
            warmer += a.hist[v];
    }
    struct sample_rec r = {
        .time = now, .sampled = (unsigned int)a.n, .hot = hot, .warm = warm,
        .dram_pct = (unsigned int)(100 * a.dram / a.n),
        .nvm_pct = (unsigned int)(100 * a.nvm / a.n),
        .hot_pct = (unsigned int)(100 * hotter / a.n),
        .warm_pct = (unsigned int)(100 * warmer / a.n),
    };
    pthread_mutex_lock(&hist_lock);
    history[nsamples % HISTORY] = r;
    nsamples++;
    pthread_mutex_unlock(&hist_lock);
    return (unsigned int)a.n;
}

void llru_stats_temperature(struct stat_sink *s)
{
    stat_printf(s, "thr_hot", "%u", llru_thr_hot());
    stat_printf(s, "thr_warm", "%u", llru_thr_warm());
    pthread_mutex_lock(&hist_lock);
    unsigned int n = nsamples;
    struct sample_rec h[HISTORY];
    memcpy(h, history, sizeof(h));
    pthread_mutex_unlock(&hist_lock);
    stat_printf(s, "samples", "%u", n);
    /* Newest first. */
    unsigned int shown = n < HISTORY ? n : HISTORY;
    for (unsigned int i = 0; i < shown; i++) {
        const struct sample_rec *r = &h[(n - 1 - i) % HISTORY];
        char key[48];
#define HIST_LINE(field) \
        snprintf(key, sizeof(key), "sample:%u:" #field, i); \
        stat_printf(s, key, "%u", (unsigned int)r->field);
        HIST_LINE(time)
        HIST_LINE(sampled)
        HIST_LINE(hot)
        HIST_LINE(warm)
        HIST_LINE(dram_pct)
        HIST_LINE(nvm_pct)
        HIST_LINE(hot_pct)
        HIST_LINE(warm_pct)
#undef HIST_LINE
    }
}

/* ---- Bump rings and LRU threads ------------------------------------------ */

#define MAX_RING_SETS 256
/* The LRU thread sleeps until a worker's ring holds LRU_WAKE_AT queued
 * moves (that worker wakes it: one wake per LRU_WAKE_AT pushes at most) or
 * LRU_IDLE_MS has passed, whichever comes first; then it drains every
 * ring.  So a queued move waits at most LRU_IDLE_MS and a busy server pays
 * one wake-up per LRU_WAKE_AT moves.  A round that found every ring empty
 * dozes instead (bg_doze, up to LRU_DOZE_MS): the next push kicks it, so
 * an idle server does not wake this thread at all, and a lone move after
 * a pause is applied at once.  The ring keeps LLRU_RING_SIZE - LRU_WAKE_AT
 * slots of slack for the time the thread takes to wake. */
#define LRU_WAKE_AT (LLRU_RING_SIZE / 4)
#define LRU_IDLE_MS 10
#define LRU_DOZE_MS 1000

/* One producer (the owning thread), one consumer (the LRU thread): the
 * producer writes slots then publishes tail with release; the consumer
 * reads slots after an acquire load of tail and frees them by publishing
 * head. */
struct ring {
    unsigned int head;      /* atomic; consumer */
    char pad1[60];
    unsigned int tail;      /* atomic; producer */
    char pad2[60];
    item *slot[LLRU_RING_SIZE];
};

static pthread_mutex_t sets_lock = PTHREAD_MUTEX_INITIALIZER;
static struct ring *sets[MAX_RING_SETS];        /* published by nsets */
static unsigned int nsets;                      /* atomic */
static __thread struct ring *my_ring;

static struct bg lru_thread;
static llru_apply_fn apply_fn;
static bool lru_on;                             /* atomic: the thread runs */

void llru_rings_attach(void)
{
    if (my_ring != NULL)
        return;
    struct ring *rs = aligned_alloc(64, sizeof(*rs));
    if (rs == NULL)
        return;
    memset(rs, 0, sizeof(*rs));
    pthread_mutex_lock(&sets_lock);
    if (nsets < MAX_RING_SETS) {
        sets[nsets] = rs;
        __atomic_store_n(&nsets, nsets + 1, __ATOMIC_RELEASE);
        my_ring = rs;
    }
    pthread_mutex_unlock(&sets_lock);
    if (my_ring == NULL)
        free(rs);
}

bool llru_has_ring(void)
{
    return my_ring != NULL;
}

bool llru_push(item *it)
{
    if (my_ring == NULL || !__atomic_load_n(&lru_on, __ATOMIC_ACQUIRE))
        return false;
    struct ring *r = my_ring;
    unsigned int tail = r->tail;        /* only this thread writes it */
    if (tail - __atomic_load_n(&r->head, __ATOMIC_ACQUIRE) >= LLRU_RING_SIZE) {
        GSTATS_INCR(lru_bumps_dropped);
        return false;
    }
    r->slot[tail & (LLRU_RING_SIZE - 1)] = it;
    /* Sequentially consistent, against the thread's doze (rings_busy). */
    __atomic_store_n(&r->tail, tail + 1, __ATOMIC_SEQ_CST);
    GSTATS_INCR(lru_bumps_queued);
    if (tail + 1 - __atomic_load_n(&r->head, __ATOMIC_ACQUIRE) == LRU_WAKE_AT)
        bg_wake(&lru_thread);
    else
        bg_kick(&lru_thread);
    return true;
}

/* Pops up to `max` items of one ring. */
static unsigned int ring_pop(struct ring *r, item **out, unsigned int max)
{
    unsigned int head = r->head;        /* only the consumer writes it */
    unsigned int n = __atomic_load_n(&r->tail, __ATOMIC_ACQUIRE) - head;
    if (n > max)
        n = max;
    for (unsigned int i = 0; i < n; i++)
        out[i] = r->slot[(head + i) & (LLRU_RING_SIZE - 1)];
    __atomic_store_n(&r->head, head + n, __ATOMIC_RELEASE);
    return n;
}

/* Empties every ring, batch by batch; returns the items applied. */
static unsigned int drain_rings(void)
{
    item *batch[LLRU_BATCH];
    unsigned int done = 0;
    unsigned int n = __atomic_load_n(&nsets, __ATOMIC_ACQUIRE);
    for (unsigned int i = 0; i < n; i++) {
        unsigned int got;
        do {
            got = ring_pop(sets[i], batch, LLRU_BATCH);
            if (got > 0)
                apply_fn(batch, got);
            done += got;
        } while (got == LLRU_BATCH);
    }
    return done;
}

/* bg_doze's check: a ring holds a move pushed before the doze mark. */
static bool rings_busy(void *arg)
{
    (void)arg;
    unsigned int n = __atomic_load_n(&nsets, __ATOMIC_ACQUIRE);
    for (unsigned int i = 0; i < n; i++)
        if (__atomic_load_n(&sets[i]->tail, __ATOMIC_SEQ_CST) != sets[i]->head)
            return true;
    return false;
}

static void lru_thread_main(struct bg *g, unsigned idx, void *arg)
{
    (void)idx;
    (void)arg;
    while (bg_running(g)) {
        __atomic_fetch_add(&llru_rounds, 1, __ATOMIC_RELAXED);
        if (drain_rings() > 0)
            bg_wait(g, (uint64_t)LRU_IDLE_MS * 1000000u);
        else
            bg_doze(g, (uint64_t)LRU_DOZE_MS * 1000000u, rings_busy, NULL);
    }
    while (drain_rings() > 0)
        ;
}

void llru_threads_start(llru_apply_fn apply)
{
    apply_fn = apply;
    bg_init(&lru_thread, "tac-lru-dram", NULL);
    if (!bg_start(&lru_thread, 1, lru_thread_main, NULL)) {
        fprintf(stderr, "cannot start the LRU thread\n");
        exit(EXIT_FAILURE);
    }
    __atomic_store_n(&lru_on, true, __ATOMIC_RELEASE);
}

void llru_threads_stop(void)
{
    if (!__atomic_load_n(&lru_on, __ATOMIC_ACQUIRE))
        return;
    __atomic_store_n(&lru_on, false, __ATOMIC_RELEASE);
    bg_stop(&lru_thread);
}

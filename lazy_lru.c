/*
 * lazy_lru.c - Lazy LRU access field and temperature thresholds.
 *
 * Owns: the `access` field of every item (layout and formula in
 * lazy_lru.h) and the THR_hot / THR_warm thresholds.  Bump rings and the
 * DRAM/NVM LRU threads will live here too; today items.c calls
 * llru_record_access() from do_item_touch_access().
 *
 * Threads: any worker records accesses with the item lock held; readers
 * without the lock (sampler, stats) see a consistent 32-bit word because
 * the field is only touched through relaxed atomic loads and stores.
 */
#include "config.h"

#include "lazy_lru.h"

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

void llru_init(void)
{
    llru_set_thresholds(LLRU_THR_HOT_DEFAULT, LLRU_THR_WARM_DEFAULT);
}

void llru_init_access(item *it, rel_time_t now)
{
    access_store(it, (now & LLRU_TIME_MASK) << 8);
}

void llru_record_access(item *it, rel_time_t now)
{
    uint32_t a = access_load(it);
    uint32_t then = a >> 8;
    uint32_t rc = a & LLRU_COUNT_MASK;
    uint32_t now24 = now & LLRU_TIME_MASK;
    /* Modular difference handles the 24-bit wrap. */
    uint32_t elapsed = (now24 - then) & LLRU_TIME_MASK;
    uint32_t cap = 2 * llru_thr_hot();

    rc = rc / (elapsed + 1) + 1;
    if (rc > cap)
        rc = cap;
    access_store(it, (now24 << 8) | rc);
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
    unsigned int rc = llru_read_count(it);
    if (rc > llru_thr_hot())
        return LLRU_HOT;
    if (rc > llru_thr_warm())
        return LLRU_WARM;
    return LLRU_COLD;
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

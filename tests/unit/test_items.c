/*
 * test_items.c - item lifecycle and store semantics: link/unlink and
 * refcounts, expiry, flush, CAS, add/replace/append/prepend, incr/decr,
 * eviction vs -M, pinned items, the expiry crawler, lazy LRU access
 * records, stats, the writes noted while a restart recovers, and a
 * multi-threaded run with verified values.
 */
#include "config.h"

#include <pthread.h>

#include "engine/assoc.h"
#include "engine/items.h"
#include "engine/lazy_lru.h"
#include "base/settings.h"
#include "engine/slabs.h"
#include "base/stats.h"
#include "unit.h"

#define MB (1024 * 1024)

static void set_now(rel_time_t t)
{
    __atomic_store_n(&current_time, t, __ATOMIC_RELAXED);
}

static void setup(size_t maxbytes, int partitions)
{
    settings_init();
    settings.maxbytes = maxbytes;
    settings.partitions = partitions;
    settings.hashpower_init = 13;
    memset(&gstats, 0, sizeof(gstats));
    items_init();
    set_now(100);
}

/* Allocates key=value (value without "\r\n"), stores it with op. */
static enum store_result store_full(const char *key, const char *val,
                                    enum store_op op, uint64_t req_cas,
                                    rel_time_t exptime, uint64_t *cas_out)
{
    size_t n = strlen(val);
    item *it = item_alloc(key, strlen(key), 7, exptime, n + 2, 0);
    if (it == NULL)
        return STORE_NO_MEMORY;
    memcpy(ITEM_data(it), val, n);
    memcpy(ITEM_data(it) + n, "\r\n", 2);
    enum store_result r = item_store(it, op, req_cas, cas_out, 0);
    item_release(it);
    return r;
}

static enum store_result store(const char *key, const char *val,
                               enum store_op op)
{
    return store_full(key, val, op, 0, 0, NULL);
}

/* Checks that key holds val; returns false on a miss. */
static bool has_value(const char *key, const char *val)
{
    item *it = item_get(key, strlen(key), NULL, true);
    if (it == NULL)
        return false;
    size_t n = strlen(val);
    CHECK_UEQ(it->nbytes, n + 2);
    CHECK_MEM_EQ(ITEM_data(it), val, n);
    CHECK_MEM_EQ(ITEM_data(it) + n, "\r\n", 2);
    item_release(it);
    return true;
}

static bool exists(const char *key)
{
    item *it = item_get(key, strlen(key), NULL, false);
    if (it != NULL)
        item_release(it);
    return it != NULL;
}

static uint64_t used_chunks(unsigned int clsid)
{
    struct slabs_class_info ci;
    slabs_class_info(clsid, &ci);
    return ci.used_chunks;
}

static void test_link_unlink_refcount(void)
{
    setup(64 * MB, 1);
    item *it = item_alloc("k", 1, 5, 0, 5, 0);
    CHECK(it != NULL);
    CHECK_EQ(it->refcount, 1);
    CHECK_STR_EQ(ITEM_key(it), "k");
    unsigned int cls = it->slabs_clsid;
    CHECK_UEQ(used_chunks(cls), 1);
    memcpy(ITEM_data(it), "abc\r\n", 5);
    uint64_t cas = 0;
    CHECK_EQ(item_store(it, STORE_SET, 0, &cas, 0), STORE_STORED);
    CHECK(cas != 0);
    CHECK_EQ(it->refcount, 2);
    CHECK(it->it_flags & ITEM_LINKED);
    CHECK_UEQ(gstats.curr_items, 1);
    CHECK_UEQ(gstats.total_items, 1);
    CHECK_UEQ(gstats.bytes, ITEM_ntotal(it));
    item_release(it);

    item *g = item_get("k", 1, NULL, true);
    CHECK(g == it);
    CHECK_EQ(g->refcount, 2);
    CHECK(g->it_flags & ITEM_FETCHED);
    CHECK_UEQ(g->flags, 5);
    /* Deleted while held: still readable, memory kept until release. */
    CHECK_EQ(item_delete("k", 1, 0, NULL), DELETE_OK);
    CHECK(!exists("k"));
    CHECK_EQ(g->refcount, 1);
    CHECK_MEM_EQ(ITEM_data(g), "abc\r\n", 5);
    CHECK_UEQ(used_chunks(cls), 1);
    CHECK_UEQ(gstats.curr_items, 0);
    CHECK_UEQ(gstats.bytes, 0);
    item_release(g);
    CHECK_UEQ(used_chunks(cls), 0);
    CHECK_EQ(item_delete("k", 1, 0, NULL), DELETE_NOT_FOUND);

    /* Replacing frees the old version once unreferenced. */
    CHECK_EQ(store("r", "1", STORE_SET), STORE_STORED);
    item *old = item_get("r", 1, NULL, false);
    CHECK_EQ(store("r", "2", STORE_SET), STORE_STORED);
    CHECK(has_value("r", "2"));
    CHECK_MEM_EQ(ITEM_data(old), "1\r\n", 3);
    CHECK((old->it_flags & ITEM_LINKED) == 0);
    CHECK_UEQ(used_chunks(old->slabs_clsid), 2);
    item_release(old);
    CHECK_UEQ(used_chunks(old->slabs_clsid), 1);
    CHECK_UEQ(gstats.curr_items, 1);

    /* Oversized items are refused up front. */
    CHECK(!item_size_ok(10, (size_t)settings.item_size_max));
    CHECK(item_alloc("big", 3, 0, 0, (size_t)settings.item_size_max, 0) == NULL);
    CHECK(item_size_ok(10, 1000));
}

static void test_expiry(void)
{
    setup(64 * MB, 1);
    enum item_miss why;
    /* Negative exptime: dead at once. */
    CHECK_EQ(store_full("neg", "v", STORE_SET, 0, realtime(-1), NULL),
             STORE_STORED);
    CHECK(item_get("neg", 3, &why, true) == NULL);
    CHECK_EQ(why, MISS_EXPIRED);
    CHECK_UEQ(gstats.curr_items, 0);   /* lazily unlinked */
    CHECK(item_get("neg", 3, &why, true) == NULL);
    CHECK_EQ(why, MISS_NOT_FOUND);

    /* Relative. */
    CHECK_EQ(store_full("rel", "v", STORE_SET, 0, realtime(10), NULL),
             STORE_STORED);
    set_now(109);
    CHECK(has_value("rel", "v"));
    set_now(110);
    CHECK(item_get("rel", 3, &why, true) == NULL);
    CHECK_EQ(why, MISS_EXPIRED);

    /* Absolute (> 30 days): a unix time 500 s after process start. */
    int64_t abs_t = (int64_t)process_started + 500;
    CHECK(abs_t > REALTIME_MAXDELTA);
    CHECK_EQ(store_full("abs", "v", STORE_SET, 0, realtime(abs_t), NULL),
             STORE_STORED);
    set_now(499);
    CHECK(has_value("abs", "v"));
    set_now(500);
    CHECK(!has_value("abs", "v"));
    /* Absolute in the past. */
    CHECK_EQ(store_full("past", "v", STORE_SET, 0,
                        realtime(REALTIME_MAXDELTA + 1), NULL), STORE_STORED);
    CHECK(!exists("past"));

    /* Touch extends, gat returns the item. */
    CHECK_EQ(store_full("t", "v", STORE_SET, 0, realtime(5), NULL),
             STORE_STORED);
    item *it = item_get_and_touch("t", 1, realtime(100), &why);
    CHECK(it != NULL);
    CHECK_EQ(why, MISS_NONE);
    item_release(it);
    set_now(mc_now() + 50);
    CHECK(exists("t"));
    set_now(mc_now() + 50);
    CHECK(!exists("t"));
}

static void test_flush(void)
{
    enum item_miss why;
    /* With CAS: earlier in the flush's second dies, right after lives. */
    setup(64 * MB, 1);
    CHECK_EQ(store("old", "v", STORE_SET), STORE_STORED);
    set_now(200);
    CHECK_EQ(store("same", "v", STORE_SET), STORE_STORED);
    item_flush(0);
    CHECK_EQ(store("after", "v", STORE_SET), STORE_STORED);
    CHECK(item_get("old", 3, &why, true) == NULL);
    CHECK_EQ(why, MISS_FLUSHED);
    CHECK(item_get("same", 4, &why, true) == NULL);
    CHECK_EQ(why, MISS_FLUSHED);
    CHECK(has_value("after", "v"));
    set_now(260);
    CHECK(has_value("after", "v"));

    /* Delayed flush: takes effect at `when` for what exists then. */
    setup(64 * MB, 1);
    CHECK_EQ(store("a", "v", STORE_SET), STORE_STORED);
    item_flush(realtime(10));               /* at 110 */
    set_now(105);
    CHECK(exists("a"));
    CHECK_EQ(store("b", "v", STORE_SET), STORE_STORED);
    CHECK(exists("b"));
    set_now(110);
    CHECK(!exists("a"));
    CHECK(!exists("b"));
    CHECK_EQ(store("c", "v", STORE_SET), STORE_STORED);
    CHECK(exists("c"));
    set_now(111);
    CHECK(exists("c"));

    /* Without CAS (-C): flush takes the whole current second. */
    settings_init();
    settings.use_cas = false;
    settings.hashpower_init = 13;
    items_init();
    set_now(300);
    uint64_t cas = 99;
    CHECK_EQ(store_full("x", "v", STORE_SET, 0, 0, &cas), STORE_STORED);
    CHECK_UEQ(cas, 0);
    item_flush(0);
    CHECK(!exists("x"));
    set_now(301);
    CHECK_EQ(store("y", "v", STORE_SET), STORE_STORED);
    CHECK(exists("y"));
}

static void test_cas(void)
{
    setup(64 * MB, 1);
    uint64_t c1 = 0, c2 = 0, c3 = 0;
    CHECK_EQ(store_full("k", "1", STORE_CAS, 123, 0, &c1), STORE_NOT_FOUND);
    CHECK_EQ(store_full("k", "1", STORE_SET, 0, 0, &c1), STORE_STORED);
    CHECK_EQ(store_full("k", "2", STORE_CAS, c1 + 1, 0, &c2), STORE_EXISTS);
    CHECK(has_value("k", "1"));
    CHECK_EQ(store_full("k", "2", STORE_CAS, c1, 0, &c2), STORE_STORED);
    CHECK(c2 > c1);
    CHECK(has_value("k", "2"));
    /* The old CAS no longer matches. */
    CHECK_EQ(store_full("k", "3", STORE_CAS, c1, 0, &c3), STORE_EXISTS);
    /* SET with a req_cas acts as CAS (meta ms C). */
    CHECK_EQ(store_full("k", "3", STORE_SET, c1, 0, &c3), STORE_EXISTS);
    CHECK_EQ(store_full("k", "3", STORE_SET, c2, 0, &c3), STORE_STORED);
    CHECK_EQ(store_full("nope", "3", STORE_SET, 5, 0, NULL), STORE_NOT_FOUND);
    /* Delete with CAS. */
    CHECK_EQ(item_delete("k", 1, c2, NULL), DELETE_EXISTS);
    CHECK(exists("k"));
    CHECK_EQ(item_delete("k", 1, c3, NULL), DELETE_OK);
    CHECK(!exists("k"));
    CHECK(item_next_cas() > c3);
}

static void test_add_replace_append_prepend(void)
{
    setup(64 * MB, 1);
    CHECK_EQ(store("k", "a", STORE_REPLACE), STORE_NOT_STORED);
    CHECK(!exists("k"));
    CHECK_EQ(store("k", "a", STORE_APPEND), STORE_NOT_STORED);
    CHECK_EQ(store("k", "a", STORE_PREPEND), STORE_NOT_STORED);
    CHECK(!exists("k"));
    CHECK_EQ(store("k", "a", STORE_ADD), STORE_STORED);
    CHECK_EQ(store("k", "b", STORE_ADD), STORE_NOT_STORED);
    CHECK(has_value("k", "a"));
    CHECK_EQ(store("k", "c", STORE_REPLACE), STORE_STORED);
    CHECK(has_value("k", "c"));

    /* append/prepend keep the old flags and exptime. */
    item *it = item_alloc("ap", 2, 42, realtime(1000), 5, 0);
    memcpy(ITEM_data(it), "mid\r\n", 5);
    CHECK_EQ(item_store(it, STORE_SET, 0, NULL, 0), STORE_STORED);
    item_release(it);
    uint64_t cas = 0;
    CHECK_EQ(store_full("ap", "END", STORE_APPEND, 0, 0, &cas), STORE_STORED);
    CHECK(cas != 0);
    CHECK_EQ(store("ap", "beg", STORE_PREPEND), STORE_STORED);
    CHECK(has_value("ap", "begmidEND"));
    it = item_get("ap", 2, NULL, false);
    CHECK_UEQ(it->flags, 42);
    CHECK_UEQ(it->exptime, 100 + 1000);
    CHECK_UEQ(it->nbytes, 11);
    uint64_t cur = it->cas;
    item_release(it);
    /* append with a CAS. */
    CHECK_EQ(store_full("ap", "x", STORE_APPEND, cur + 1, 0, NULL),
             STORE_EXISTS);
    CHECK_EQ(store_full("ap", "x", STORE_APPEND, cur, 0, NULL), STORE_STORED);
    CHECK(has_value("ap", "begmidENDx"));
    /* Empty append. */
    CHECK_EQ(store("ap", "", STORE_APPEND), STORE_STORED);
    CHECK(has_value("ap", "begmidENDx"));

    /* Growing past -I is refused and leaves the old value. */
    static char big[600 * 1024];
    memset(big, 'z', sizeof(big) - 1);
    CHECK_EQ(store("big", big, STORE_SET), STORE_STORED);
    CHECK_EQ(store("big", big, STORE_APPEND), STORE_TOO_LARGE);
    CHECK(has_value("big", big));
}

static enum delta_result delta(const char *key, bool incr, uint64_t d,
                               char *out)
{
    return item_add_delta(key, strlen(key), incr, d, 0, out, NULL, 0, NULL);
}

static void test_incr_decr(void)
{
    setup(64 * MB, 1);
    char out[32];
    CHECK_EQ(delta("n", true, 1, out), DELTA_NOT_FOUND);
    CHECK_EQ(store("n", "10", STORE_SET), STORE_STORED);
    CHECK_EQ(delta("n", true, 5, out), DELTA_OK);
    CHECK_STR_EQ(out, "15");
    CHECK(has_value("n", "15"));
    CHECK_EQ(delta("n", false, 6, out), DELTA_OK);
    CHECK_STR_EQ(out, "9");
    CHECK(has_value("n", "9 "));        /* in place, space padded */
    CHECK_EQ(delta("n", false, 100, out), DELTA_OK);
    CHECK_STR_EQ(out, "0");             /* floor at 0 */
    CHECK(has_value("n", "0 "));

    CHECK_EQ(store("w", "18446744073709551615", STORE_SET), STORE_STORED);
    CHECK_EQ(delta("w", true, 1, out), DELTA_OK);
    CHECK_STR_EQ(out, "0");             /* wraps at 2^64 */
    CHECK_EQ(store("w", "18446744073709551610", STORE_SET), STORE_STORED);
    CHECK_EQ(delta("w", true, 10, out), DELTA_OK);
    CHECK_STR_EQ(out, "4");
    CHECK_EQ(delta("w", true, UINT64_MAX, out), DELTA_OK);
    CHECK_STR_EQ(out, "3");

    /* Flags, exptime survive; CAS changes and can be required. */
    item *it = item_alloc("f", 1, 9, realtime(77), 3, 0);
    memcpy(ITEM_data(it), "1\r\n", 3);
    CHECK_EQ(item_store(it, STORE_SET, 0, NULL, 0), STORE_STORED);
    uint64_t c0 = it->cas, c1 = 0;
    item_release(it);
    CHECK_EQ(item_add_delta("f", 1, true, 1, c0 + 1, out, &c1, 0, NULL),
             DELTA_EXISTS);
    CHECK_EQ(item_add_delta("f", 1, true, 1, c0, out, &c1, 0, NULL), DELTA_OK);
    CHECK(c1 > c0);
    it = item_get("f", 1, NULL, false);
    CHECK_UEQ(it->flags, 9);
    CHECK_UEQ(it->exptime, 177);
    CHECK_UEQ(it->cas, c1);
    item_release(it);

    const char *bad[] = { "abc", "12a", "", "-1", "18446744073709551616",
                          "0x10", "+-1" };
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        CHECK_EQ(store("bad", bad[i], STORE_SET), STORE_STORED);
        CHECK_EQ(delta("bad", true, 1, out), DELTA_NON_NUMERIC);
        CHECK(has_value("bad", bad[i]));
    }
    CHECK_EQ(store("sp", "  41 ", STORE_SET), STORE_STORED);
    CHECK_EQ(delta("sp", true, 1, out), DELTA_OK);
    CHECK_STR_EQ(out, "42");
    CHECK(has_value("sp", "42   "));
    /* Digits end at whitespace; the rest is ignored, as in memcached. */
    CHECK_EQ(store("ws", "7 junk", STORE_SET), STORE_STORED);
    CHECK_EQ(delta("ws", true, 1, out), DELTA_OK);
    CHECK_STR_EQ(out, "8");
    /* A longer result needs a new item. */
    CHECK_EQ(store("grow", "9", STORE_SET), STORE_STORED);
    CHECK_EQ(delta("grow", true, 1, out), DELTA_OK);
    CHECK(has_value("grow", "10"));
}

/* Fills a 2-page cache with ~1 KB items. */
static int fill(const char *prefix, int n, rel_time_t exptime)
{
    char key[64], val[1000];
    int stored = 0;
    memset(val, 'v', sizeof(val) - 1);
    val[sizeof(val) - 1] = '\0';
    for (int i = 0; i < n; i++) {
        snprintf(key, sizeof(key), "%s%d", prefix, i);
        snprintf(val, 20, "%d", i);
        val[strlen(val)] = 'v';
        if (store_full(key, val, STORE_SET, 0, exptime, NULL) == STORE_STORED)
            stored++;
    }
    return stored;
}

static void test_eviction(void)
{
    setup(2 * MB, 1);
    int per_page = (int)(MB / slabs_chunk_size(slabs_clsid(
                       item_make_size(6, 1001))));
    int n = per_page * 5;
    CHECK_EQ(fill("k", n, 0), n);               /* never fails */
    CHECK(gstats.evictions >= (uint64_t)(n - 2 * per_page));
    CHECK_UEQ(gstats.evictions, gstats.evicted_unfetched);
    CHECK_UEQ(gstats.curr_items, (uint64_t)n - gstats.evictions);
    CHECK(slabs_mem_malloced() <= 2 * MB);
    CHECK(!exists("k0"));                       /* oldest went first */
    char key[32];
    snprintf(key, sizeof(key), "k%d", n - 1);
    CHECK(exists(key));

    /* Expired items are reclaimed before live ones are evicted. */
    setup(2 * MB, 1);
    int cap = fill("e", 10 * per_page, realtime(5));
    CHECK_EQ(cap, 10 * per_page);
    uint64_t ev = gstats.evictions;
    set_now(200);
    CHECK_EQ(fill("f", per_page, 0), per_page);
    CHECK_UEQ(gstats.evictions, ev);
    CHECK(gstats.reclaimed >= (uint64_t)per_page);
    CHECK(gstats.expired_unfetched >= (uint64_t)per_page);
}

static void test_no_evict_M(void)
{
    setup(2 * MB, 1);
    settings.evict_to_free = false;
    int per_page = (int)(MB / slabs_chunk_size(slabs_clsid(
                       item_make_size(6, 1001))));
    int stored = fill("m", 4 * per_page, realtime(50));
    CHECK_EQ(stored, 2 * per_page);
    CHECK_UEQ(gstats.evictions, 0);
    CHECK_UEQ(gstats.outofmemory, (uint64_t)(2 * per_page));
    CHECK(exists("m0"));
    CHECK(item_alloc("zz", 2, 0, 0, 1000, 0) == NULL);
    /* -M still reuses memory of expired items. */
    set_now(200);
    CHECK_EQ(fill("n", per_page, 0), per_page);
    CHECK_UEQ(gstats.evictions, 0);
    CHECK(gstats.reclaimed >= (uint64_t)per_page);
}

static void test_pinned_not_evicted(void)
{
    setup(2 * MB, 2);
    int per_page = (int)(MB / slabs_chunk_size(slabs_clsid(
                       item_make_size(6, 1001))));
    fill("p", per_page, 0);
    enum { PIN = 20 };
    item *pinned[PIN];
    char key[32];
    for (int i = 0; i < PIN; i++) {
        snprintf(key, sizeof(key), "p%d", i);
        pinned[i] = item_get(key, strlen(key), NULL, false);
        CHECK(pinned[i] != NULL);
    }
    fill("q", 6 * per_page, 0);
    CHECK(gstats.evictions > 0);
    CHECK(gstats.lrutail_reflocked > 0);
    for (int i = 0; i < PIN; i++) {
        snprintf(key, sizeof(key), "p%d", i);
        CHECK(pinned[i]->it_flags & ITEM_LINKED);
        CHECK_STR_EQ(ITEM_key(pinned[i]), key);
        CHECK(exists(key));
        CHECK_EQ(pinned[i]->refcount, 2);
        item_release(pinned[i]);
    }
    /* Unpinned again: now they can go. */
    fill("r", 6 * per_page, 0);
    CHECK(!exists("p0"));
}

static void test_crawler(void)
{
    setup(64 * MB, 2);
    char key[32];
    for (int i = 0; i < 300; i++) {
        snprintf(key, sizeof(key), "c%d", i);
        rel_time_t exp = i % 3 == 0 ? realtime(10) : 0;
        item *it = item_alloc(key, strlen(key), 0, exp, 3, i % 2);
        memcpy(ITEM_data(it), "v\r\n", 3);
        CHECK_EQ(item_store(it, STORE_SET, 0, NULL, i % 2), STORE_STORED);
        item_release(it);
    }
    CHECK_EQ(items_crawl_step(1000), 300);
    CHECK_UEQ(gstats.crawler_reclaimed, 0);
    set_now(200);
    /* Bounded steps, with deletes behind and ahead of the cursor. */
    int total = 0, steps = 0;
    while (total < 300) {
        int n = items_crawl_step(7);
        CHECK(n <= 7);
        CHECK(n > 0);
        total += n;
        if (++steps == 5) {
            for (int i = 1; i < 300; i += 30) {
                snprintf(key, sizeof(key), "c%d", i);
                CHECK_EQ(item_delete(key, strlen(key), 0, NULL), DELETE_OK);
            }
        }
    }
    CHECK(steps >= 300 / 7 - 10);
    /* Make sure one full pass ran after the deletes. */
    int last = items_crawl_step(10000);
    CHECK(last > 0);
    CHECK_UEQ(gstats.crawler_items_checked, 300 + total + last);
    /* the LRUs' dead tail items count in reclaimed, the rest here */
    CHECK_UEQ(gstats.crawler_reclaimed + gstats.reclaimed, 100);
    CHECK(gstats.crawler_reclaimed > 50);
    CHECK_UEQ(gstats.expired_unfetched, 100);
    CHECK_UEQ(gstats.curr_items, 200 - 10);
    for (int i = 0; i < 300; i++) {
        snprintf(key, sizeof(key), "c%d", i);
        CHECK(exists(key) == (i % 3 != 0 && i % 30 != 1));
    }
    /* Flush, then the crawler frees everything. */
    item_flush(0);
    while (gstats.curr_items > 0)
        CHECK(items_crawl_step(50) > 0);
    CHECK_EQ(items_crawl_step(50), 0);
    for (unsigned int c = 1; c <= slabs_nclasses(); c++)
        CHECK_UEQ(used_chunks(c), 0);
}

/* The sampler's rule: THR_hot is the smallest value at most the DRAM share
 * of the sample exceeds, THR_warm the same for DRAM + NVM. */
static void test_thresholds_rule(void)
{
    uint64_t hist[LLRU_COUNT_MASK + 1] = { 0 };
    /* 1000 items: 600 at readCount 1, 250 at 3, 100 at 6, 50 at 9. */
    hist[1] = 600;
    hist[3] = 250;
    hist[6] = 100;
    hist[9] = 50;
    unsigned int hot, warm;
    /* DRAM holds 10%: > 5 is 150 items (15%), > 6 is 50 (5%): hot = 6.
     * DRAM+NVM hold 40%: > 1 is 400 items: warm = 1. */
    llru_thresholds_from(hist, 1000, 0.10, 0.40, &hot, &warm);
    CHECK_EQ(hot, 6);
    CHECK_EQ(warm, 1);
    /* DRAM holds 20%: > 3 is 150 (15%) but > 2 is 400: hot = 3; warm must
     * stay below hot even when DRAM+NVM hold everything. */
    llru_thresholds_from(hist, 1000, 0.20, 1.0, &hot, &warm);
    CHECK_EQ(hot, 3);
    CHECK_EQ(warm, 0);
    /* Everything fits DRAM: the lowest threshold, 1. */
    llru_thresholds_from(hist, 1000, 1.0, 1.0, &hot, &warm);
    CHECK_EQ(hot, 1);
    CHECK_EQ(warm, 0);
    /* DRAM and NVM hold nothing of it: nothing may be warm, and hot
     * stays above warm. */
    llru_thresholds_from(hist, 1000, 0.0, 0.0, &hot, &warm);
    CHECK_EQ(hot, 10);
    CHECK_EQ(warm, 9);
    /* Few reads (an update-heavy load): 996 items at 1, 4 at 2.  DRAM
     * holds 0.8%, so the hot rule alone says 1, but then warm would have to
     * be 0, making every item read once warm while DRAM+NVM hold only
     * half: warm = 1 and hot is raised to 2. */
    memset(hist, 0, sizeof(hist));
    hist[1] = 996;
    hist[2] = 4;
    llru_thresholds_from(hist, 1000, 0.008, 0.5, &hot, &warm);
    CHECK_EQ(hot, 2);
    CHECK_EQ(warm, 1);
}

static void test_lazy_lru(void)
{
    setup(64 * MB, 1);
    CHECK_EQ(llru_thr_hot(), LLRU_THR_HOT_DEFAULT);
    CHECK(store("h", "v", STORE_SET) == STORE_STORED);
    item *it = item_get("h", 1, NULL, false);
    CHECK_EQ(llru_read_count(it), 0);
    CHECK_EQ(llru_temperature(it), LLRU_COLD);
    item_release(it);
    for (int i = 0; i < 3; i++)
        CHECK(has_value("h", "v"));
    it = item_get("h", 1, NULL, false);
    CHECK_EQ(llru_read_count(it), 3);     /* 0->1->2->3 in one second */
    CHECK_EQ(llru_temperature(it), LLRU_WARM);
    for (int i = 0; i < 20; i++)
        llru_record_access(it, 100);
    CHECK_EQ(llru_read_count(it), 2 * LLRU_THR_HOT_DEFAULT);  /* capped */
    CHECK_EQ(llru_temperature(it), LLRU_HOT);
    llru_record_access(it, 103);          /* 8 / 4 + 1 */
    CHECK_EQ(llru_read_count(it), 3);
    llru_record_access(it, 1000);         /* long idle: decays to 1 */
    CHECK_EQ(llru_read_count(it), 1);
    CHECK_EQ(llru_temperature(it), LLRU_COLD);
    /* 24-bit wrap: 2^24 - 1 then 2^24 + 1 is two seconds later. */
    llru_record_access(it, (1u << 24) - 1);
    llru_record_access(it, (1u << 24) - 1);
    CHECK_EQ(llru_read_count(it), 2);
    llru_record_access(it, (1u << 24) + 1);   /* 2 / 3 + 1 */
    CHECK_EQ(llru_read_count(it), 1);
    CHECK_UEQ(llru_access_time(it), 1);
    llru_set_thresholds(500, 600);
    CHECK_EQ(llru_thr_hot(), LLRU_THR_HOT_MAX);
    CHECK(llru_thr_warm() < llru_thr_hot());
    item_release(it);
}

/* The replacement rule shared by the LRU threads and bench/lru-sim
 * (lazy_lru.h): moves on a rise in temperature class, temperature decayed
 * without a read, and the second chance at the cold end. */
static void test_lazy_lru_policy(void)
{
    item it;
    memset(&it, 0, sizeof(it));
    llru_set_thresholds(LLRU_THR_HOT_DEFAULT, LLRU_THR_WARM_DEFAULT); /* 4, 1 */

    /* Linked, never read: no second chance. */
    llru_init_access(&it, 100);
    CHECK(!llru_second_chance(&it));
    /* Reads in one second: 1 cold (stays), 2 warm (moves), 3-4 warm,
     * 5 hot (moves), then hot and capped at 8 (stays). */
    CHECK(!llru_access(&it, 100));
    CHECK(llru_access(&it, 100));
    CHECK(!llru_access(&it, 100));
    CHECK(!llru_access(&it, 100));
    CHECK(llru_access(&it, 100));
    CHECK_EQ(llru_read_count(&it), 5);
    for (int i = 0; i < 10; i++)
        CHECK(!llru_access(&it, 100));
    CHECK_EQ(llru_read_count(&it), 8);

    /* Decayed as a read would decay it (8 / (elapsed + 1)), nothing
     * recorded. */
    CHECK_EQ(llru_temperature_at(&it, 100), LLRU_HOT);
    CHECK_EQ(llru_temperature_at(&it, 101), LLRU_WARM);    /* 4 */
    CHECK_EQ(llru_temperature_at(&it, 103), LLRU_WARM);    /* 2 */
    CHECK_EQ(llru_temperature_at(&it, 104), LLRU_COLD);    /* 1 */
    CHECK_EQ(llru_temperature(&it), LLRU_HOT);
    CHECK_EQ(llru_read_count(&it), 8);
    CHECK_UEQ(llru_access_time(&it), 100);

    /* A read compares with the temperature the item cooled to: hot 10 s
     * ago is cold now, so the first read stays and the second moves. */
    CHECK(!llru_access(&it, 110));      /* 8 / 11 + 1 = 1 */
    CHECK(llru_access(&it, 110));       /* 2: cold -> warm */

    /* Second chances without reads: any read item gets exactly one more
     * lap, hot or not (readCount to 0); the time of the last read is
     * kept. */
    for (int i = 0; i < 10; i++)
        (void)llru_access(&it, 120);
    CHECK_EQ(llru_read_count(&it), 8);
    CHECK(llru_second_chance(&it));
    CHECK_EQ(llru_read_count(&it), 0);
    CHECK(!llru_second_chance(&it));
    CHECK_UEQ(llru_access_time(&it), 120);

    /* Idle hot item: one lap, as any read item. */
    for (int i = 0; i < 10; i++)
        (void)llru_access(&it, 200);
    CHECK(llru_second_chance(&it));
    CHECK_EQ(llru_read_count(&it), 0);
    CHECK(!llru_second_chance(&it));
    /* Read once a few seconds ago (cold): one more lap, as strict LRU
     * would have kept it; a new read earns the next one. */
    CHECK(!llru_access(&it, 240));
    CHECK(llru_second_chance(&it));
    CHECK(!llru_second_chance(&it));
    CHECK(!llru_access(&it, 251));
    CHECK(llru_second_chance(&it));

    /* 24-bit wrap: read at 2^24 - 1, one second later is 2^24. */
    for (int i = 0; i < 10; i++)
        (void)llru_access(&it, (1u << 24) - 1);
    CHECK_EQ(llru_temperature_at(&it, 1u << 24), LLRU_WARM);  /* 8 / 2 */
    CHECK(llru_second_chance(&it));
    CHECK_EQ(llru_read_count(&it), 0);
    CHECK_UEQ(llru_access_time(&it), (1u << 24) - 1);

    /* llru_record_access is llru_access without the answer. */
    item b;
    memset(&b, 0, sizeof(b));
    llru_init_access(&it, 300);
    llru_init_access(&b, 300);
    rel_time_t ts[] = { 300, 300, 300, 302, 302, 310, 310, 310, 310, 311 };
    for (unsigned int i = 0; i < sizeof(ts) / sizeof(ts[0]); i++) {
        (void)llru_access(&it, ts[i]);
        llru_record_access(&b, ts[i]);
        CHECK_UEQ(it.access, b.access);
    }

    /* Thresholds move the classes: with THR_hot 1, THR_warm 0 the first
     * read makes an item warm and moves it. */
    llru_set_thresholds(1, 0);
    llru_init_access(&it, 400);
    CHECK(llru_access(&it, 400));
    CHECK(llru_access(&it, 400));             /* 2 > 1: hot */
    CHECK(!llru_access(&it, 400));
    llru_set_thresholds(LLRU_THR_HOT_DEFAULT, LLRU_THR_WARM_DEFAULT);
}

/* Collects stats as "key value\n" lines. */
struct capture {
    char buf[64 * 1024];
    size_t len;
};

static void capture_emit(void *ctx, const char *key, const char *val)
{
    struct capture *c = ctx;
    int n = snprintf(c->buf + c->len, sizeof(c->buf) - c->len, "%s %s\n",
                     key, val);
    if (n > 0 && c->len + (size_t)n < sizeof(c->buf))
        c->len += (size_t)n;
}

static void test_stats(void)
{
    setup(2 * MB, 1);
    int per_page = (int)(MB / slabs_chunk_size(slabs_clsid(
                       item_make_size(6, 1001))));
    fill("s", 3 * per_page, 0);
    unsigned int cls = slabs_clsid(item_make_size(5, 1001));
    static struct capture cap;
    struct stat_sink sink = { capture_emit, &cap };
    cap.len = 0;
    items_stats(&sink);
    char want[128];
    snprintf(want, sizeof(want), "items:%u:number %llu\n", cls,
             (unsigned long long)gstats.curr_items);
    CHECK(strstr(cap.buf, want) != NULL);
    snprintf(want, sizeof(want), "items:%u:evicted %llu\n", cls,
             (unsigned long long)gstats.evictions);
    CHECK(strstr(cap.buf, want) != NULL);
    const char *names[] = { "age", "evicted_nonzero", "evicted_time",
        "outofmemory", "tailrepairs", "reclaimed", "expired_unfetched",
        "evicted_unfetched", "evicted_active", "crawler_reclaimed",
        "crawler_items_checked", "lrutail_reflocked" };
    for (size_t i = 0; i < sizeof(names) / sizeof(names[0]); i++) {
        snprintf(want, sizeof(want), "items:%u:%s ", cls, names[i]);
        CHECK(strstr(cap.buf, want) != NULL);
    }
    items_stats_reset();
    cap.len = 0;
    items_stats(&sink);
    snprintf(want, sizeof(want), "items:%u:evicted 0\n", cls);
    CHECK(strstr(cap.buf, want) != NULL);

    cap.len = 0;
    items_stats_sizes(&sink);
    CHECK_STR_EQ(cap.buf, "sizes_status disabled\n");
    cap.len = 0;
    CHECK(stats_run(NULL, &sink));     /* assoc_init provided these */
    CHECK(strstr(cap.buf, "hash_power_level 13\n") != NULL);
    CHECK(strstr(cap.buf, "hash_is_expanding 0\n") != NULL);
}

/* ---- Threads: alloc/store/get/delete/incr with verified values. ---- */

enum { MT_THREADS = 4, MT_KEYS = 1000, MT_OPS = 60000 };
/* Value padding: 600-799 bytes, so a few classes overflow -m. */
#define MT_PAD(ver) (600 + (ver) % 200)

struct mt_arg {
    int id;
    uint64_t rng;
    uint32_t last[MT_KEYS];     /* last version stored; 0 = deleted */
};

static void mt_key(char *buf, int id, int k)
{
    snprintf(buf, 32, "t%d:%d", id, k);
}

static void mt_check_get(struct mt_arg *a, int k)
{
    char key[32], want[64];
    mt_key(key, a->id, k);
    item *it = item_get(key, strlen(key), NULL, true);
    if (it == NULL)
        return;     /* evicted or deleted */
    CHECK(a->last[k] != 0);
    int n = snprintf(want, sizeof(want), "%s=%u", key, a->last[k]);
    CHECK_UEQ(it->nbytes, (size_t)n + 2 + MT_PAD(a->last[k]));
    CHECK_MEM_EQ(ITEM_data(it), want, (size_t)n);
    item_release(it);
}

static void mt_set(struct mt_arg *a, int k, uint32_t ver)
{
    char key[32], val[64];
    mt_key(key, a->id, k);
    int n = snprintf(val, sizeof(val), "%s=%u", key, ver);
    size_t pad = MT_PAD(ver);
    item *it = item_alloc(key, strlen(key), 0, 0, (size_t)n + pad + 2,
                          a->id);
    if (it == NULL)
        return;
    memcpy(ITEM_data(it), val, (size_t)n);
    memset(ITEM_data(it) + n, '.', pad);
    memcpy(ITEM_data(it) + n + pad, "\r\n", 2);
    CHECK_EQ(item_store(it, STORE_SET, 0, NULL, a->id), STORE_STORED);
    a->last[k] = ver;
    item_release(it);
}

static void mt_counter(struct mt_arg *a, uint64_t *expect)
{
    char key[32], out[32];
    snprintf(key, sizeof(key), "ctr%d", a->id);
    enum delta_result r = item_add_delta(key, strlen(key), true, 1, 0, out,
                                         NULL, a->id, NULL);
    if (r == DELTA_OK) {
        CHECK_UEQ(strtoull(out, NULL, 10), *expect + 1);
        (*expect)++;
    } else {
        CHECK(r == DELTA_NOT_FOUND || r == DELTA_NO_MEMORY);
        if (store(key, "0", STORE_SET) == STORE_STORED)
            *expect = 0;
    }
}

static void *mt_worker(void *p)
{
    struct mt_arg *a = p;
    uint64_t ctr = 0;
    char key[32];
    mt_counter(a, &ctr);
    for (uint32_t op = 1; op <= MT_OPS; op++) {
        int k = (int)(unit_rand_r(&a->rng) % MT_KEYS);
        switch (unit_rand_r(&a->rng) % 8) {
        case 0: case 1:
            mt_set(a, k, op);
            break;
        case 2:
            mt_key(key, a->id, k);
            item_delete(key, strlen(key), 0, NULL);
            a->last[k] = 0;
            break;
        case 3:
            mt_counter(a, &ctr);
            break;
        case 4:     /* a shared key: any thread's value, never torn */
            mt_key(key, 99, k % 10);
            if (store(key, key, STORE_SET) == STORE_STORED)
                has_value(key, key);
            break;
        default:
            mt_check_get(a, k);
            break;
        }
    }
    return NULL;
}

static volatile int mt_stop;

static void mt_discard(void *ctx, const char *key, const char *val)
{
    (*(size_t *)ctx)++;
}

static void *mt_maintainer(void *p)
{
    rel_time_t t = mc_now();
    size_t nstats = 0;
    struct stat_sink sink = { mt_discard, &nstats };
    while (!__atomic_load_n(&mt_stop, __ATOMIC_RELAXED)) {
        assoc_expand_step(64);
        items_crawl_step(100);
        items_stats(&sink);
        slabs_stats(&sink);
        set_now(++t);           /* exercises LRU bumps */
        usleep(200);
    }
    return NULL;
}

static void test_threads(void)
{
    setup(MB, MT_THREADS);      /* small: forces evictions */
    static struct mt_arg args[MT_THREADS];
    pthread_t t[MT_THREADS], m;
    mt_stop = 0;
    pthread_create(&m, NULL, mt_maintainer, NULL);
    for (int i = 0; i < MT_THREADS; i++) {
        memset(&args[i], 0, sizeof(args[i]));
        args[i].id = i;
        args[i].rng = unit_rand() | 1;
        pthread_create(&t[i], NULL, mt_worker, &args[i]);
    }
    for (int i = 0; i < MT_THREADS; i++)
        pthread_join(t[i], NULL);
    __atomic_store_n(&mt_stop, 1, __ATOMIC_RELAXED);
    pthread_join(m, NULL);
    /* Quiescent: every linked item is accounted for. */
    uint64_t used = 0;
    for (unsigned int c = 1; c <= slabs_nclasses(); c++)
        used += used_chunks(c);
    CHECK_UEQ(used, gstats.curr_items);
    CHECK_UEQ(assoc_count(), gstats.curr_items);
    CHECK(gstats.evictions > 0);
    for (int i = 0; i < MT_THREADS; i++)
        for (int k = 0; k < MT_KEYS; k++)
            mt_check_get(&args[i], k);
}

/* ---- Writes noted while a restart recovers (items_recovery_*). ---- */

static bool rec_written(const char *key)
{
    uint32_t hv = item_hash(key, strlen(key));
    item_lock(hv);
    bool w = do_item_recovery_written(key, strlen(key), hv);
    item_unlock(hv);
    return w;
}

static int cmp_u64(const void *a, const void *b)
{
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return x < y ? -1 : x > y;
}

/* Two different keys with the same 32-bit item hash (a birthday search):
 * same stripe, same bucket, and the same bits a bitmap of hash bits
 * would use. */
static void same_hash_keys(char *a, char *c, size_t len)
{
    enum { N = 1 << 18 };
    static uint64_t h[N];
    char k[32];
    for (uint32_t i = 0; i < N; i++) {
        snprintf(k, sizeof(k), "rc:%u", i);
        h[i] = (uint64_t)item_hash(k, strlen(k)) << 32 | i;
    }
    qsort(h, N, sizeof(h[0]), cmp_u64);
    for (uint32_t i = 1; i < N; i++) {
        if (h[i] >> 32 == h[i - 1] >> 32) {
            snprintf(a, len, "rc:%u", (uint32_t)h[i - 1]);
            snprintf(c, len, "rc:%u", (uint32_t)h[i]);
            CHECK(strcmp(a, c) != 0);
            CHECK_UEQ(item_hash(a, strlen(a)), item_hash(c, strlen(c)));
            return;
        }
    }
    CHECK(!"no two keys share a hash");
}

static void *rec_self_store(void *arg)
{
    items_recovery_self();
    CHECK_EQ(store(arg, "self", STORE_SET), STORE_STORED);
    CHECK_EQ(item_delete("self-deleted", 12, 0, NULL), DELETE_NOT_FOUND);
    return NULL;
}

static void test_recovery_written(void)
{
    setup(64 * MB, 1);
    char a[32], c[32];
    same_hash_keys(a, c, sizeof(a));
    const char *b = "rec-deleted-never-stored";
    CHECK_EQ(store("rec-before", "1", STORE_SET), STORE_STORED);
    CHECK_EQ(store("rec-incr", "10", STORE_SET), STORE_STORED);
    CHECK_EQ(store("rec-append", "a", STORE_SET), STORE_STORED);

    items_recovery_begin();
    /* Writes before begin are not notes. */
    CHECK(!rec_written("rec-before"));
    CHECK(!rec_written(a));
    CHECK(!rec_written(b));
    CHECK_EQ(store(a, "va", STORE_SET), STORE_STORED);
    CHECK_EQ(item_delete(b, strlen(b), 0, NULL), DELETE_NOT_FOUND);
    CHECK(rec_written(a));
    CHECK(rec_written(b));
    /* c shares a's whole 32-bit hash, never written: not noted. */
    CHECK(!rec_written(c));
    CHECK(!rec_written("rec-before"));
    CHECK(!rec_written("rec-never"));
    CHECK(has_value(a, "va"));

    /* An in-place incr is a write too. */
    char out[32];
    CHECK_EQ(delta("rec-incr", true, 1, out), DELTA_OK);
    CHECK_STR_EQ(out, "11");
    CHECK(rec_written("rec-incr"));
    /* So are a replaced value and an append. */
    CHECK_EQ(store("rec-before", "2", STORE_SET), STORE_STORED);
    CHECK(rec_written("rec-before"));
    CHECK(!rec_written("rec-append"));
    CHECK_EQ(store("rec-append", "+", STORE_APPEND), STORE_STORED);
    CHECK(has_value("rec-append", "a+"));
    CHECK(rec_written("rec-append"));

    /* A tier move (a link keeping the CAS) is not a write. */
    item *kc = item_alloc("rec-keepcas", 11, 0, 0, 3, 0);
    CHECK(kc != NULL);
    memcpy(ITEM_data(kc), "k\r\n", 3);
    uint32_t hv = item_hash("rec-keepcas", 11);
    item_lock(hv);
    do_item_link(kc, hv, true);
    item_unlock(hv);
    item_release(kc);
    CHECK(has_value("rec-keepcas", "k"));
    CHECK(!rec_written("rec-keepcas"));

    /* Many notes in one stripe (the set grows): each kept, exact. */
    uint32_t stripe = item_hash(a, strlen(a)) & ITEM_LOCK_MASK;
    enum { MANY = 100 };
    char same[2 * MANY][32];
    int got = 0;
    for (uint32_t i = 0; got < 2 * MANY; i++) {
        CHECK(i < 8u * MANY * ITEM_LOCK_COUNT);
        snprintf(same[got], sizeof(same[got]), "rs:%u", i);
        if ((item_hash(same[got], strlen(same[got])) & ITEM_LOCK_MASK) == stripe)
            got++;
    }
    for (int i = 0; i < MANY; i++)
        CHECK_EQ(item_delete(same[i], strlen(same[i]), 0, NULL),
                 DELETE_NOT_FOUND);
    for (int i = 0; i < 2 * MANY; i++)
        CHECK(rec_written(same[i]) == (i < MANY));
    CHECK(rec_written(a));
    CHECK(!rec_written(c));

    /* The recovery thread's own links and deletes are not writes; another
     * thread's still are. */
    pthread_t th;
    CHECK_EQ(pthread_create(&th, NULL, rec_self_store, "rec-self"), 0);
    CHECK_EQ(pthread_join(th, NULL), 0);
    CHECK(has_value("rec-self", "self"));
    CHECK(!rec_written("rec-self"));
    CHECK(!rec_written("self-deleted"));
    CHECK_EQ(store("rec-self", "other", STORE_SET), STORE_STORED);
    CHECK(rec_written("rec-self"));

    /* A new recovery starts with no notes. */
    items_recovery_end();
    items_recovery_begin();
    CHECK(!rec_written(a));
    CHECK(!rec_written(b));
    CHECK(!rec_written(same[0]));
    CHECK(!rec_written("rec-incr"));
    CHECK(!rec_written("rec-self"));
    CHECK_EQ(store(c, "vc", STORE_SET), STORE_STORED);
    CHECK(rec_written(c));
    CHECK(!rec_written(a));

    /* flush_all notes every key, even one never written; until the next
     * recovery begins. */
    item_flush(0);
    CHECK(rec_written(a));
    CHECK(rec_written("rec-never"));
    items_recovery_end();
    items_recovery_begin();
    CHECK(!rec_written(a));
    CHECK(!rec_written(c));
    CHECK(!rec_written("rec-never"));
    items_recovery_end();
}

/* The DRAM a lower-tier item costs, before its chunk rounds it up: its
 * meta tuple, the same compact layout for NVM and SSD (the 40-byte core,
 * the 8-byte reference and the key's 8-byte fingerprint; no key, no LRU
 * links), whatever the key's length.  `stats tiers` reports the averages
 * these give with chunk rounding and the hash index
 * (<tier>_dram_bytes_per_item); a change of layout changes these figures
 * on purpose only. */
static void test_layout_sizes(void)
{
    CHECK_UEQ(ITEM_CORE_SIZE, 40);
    CHECK_UEQ(ITEM_COMPACT_HDR, 48);
    CHECK_UEQ(ITEM_FP_BYTES, 8);
    CHECK_UEQ(sizeof(item), 64);
    CHECK_UEQ(item_meta_seq_bytes, 0);
    CHECK_UEQ(item_compact_size(8), 56);
    CHECK_UEQ(item_compact_size(33), 56);
    CHECK_UEQ(item_compact_size(KEY_MAX_LENGTH), 56);
    /* Both lower tiers' meta tuples are compact. */
    item nvm_meta = { .tier = TIER_NVM, .nkey = 33, .it_flags = ITEM_META };
    item ssd_meta = { .tier = TIER_SSD, .nkey = 33, .it_flags = ITEM_META };
    CHECK(item_compact(&nvm_meta));
    CHECK(item_compact(&ssd_meta));
    CHECK_UEQ(ITEM_ntotal(&nvm_meta), 56);
    CHECK_UEQ(ITEM_ntotal(&ssd_meta), 56);
    /* A DRAM item is no lower tier's. */
    struct items_tier_dram d;
    items_tier_dram(TIER_DRAM, &d);
    CHECK_UEQ(d.metas, 0);
    CHECK_UEQ(d.chunk_bytes, 0);
}

/* A meta tuple is found by its key's fingerprint: the key hash in the low
 * half (so item_hv needs no key), a CRC-32C above; keys that differ only
 * in that CRC's half, or only in length, are told apart. */
static void test_fingerprint_lookup(void)
{
    const char *k1 = "fingerprint-key-000000000000000001";
    const char *k2 = "fingerprint-key-000000000000000002";
    uint32_t h1 = item_hash(k1, strlen(k1)), h2 = item_hash(k2, strlen(k2));
    uint64_t f1 = item_key_fp(k1, strlen(k1), h1);
    CHECK_UEQ((uint32_t)f1, h1);
    CHECK(f1 != item_key_fp(k2, strlen(k2), h2));
    CHECK(f1 != item_key_fp(k1, strlen(k1) - 1, item_hash(k1, strlen(k1) - 1)));
    union { item it; char raw[128]; } m;
    memset(&m, 0, sizeof(m));
    m.it.tier = TIER_SSD;
    m.it.nkey = (uint8_t)strlen(k1);
    item_set_meta_fp(&m.it, f1);
    CHECK_UEQ(item_hv(&m.it), h1);
    CHECK_UEQ(item_fp(&m.it), f1);
    uint64_t cache = 0;
    CHECK(item_has_key(&m.it, k1, strlen(k1), h1, &cache));
    CHECK_UEQ(cache, f1);
    cache = 0;
    CHECK(!item_has_key(&m.it, k2, strlen(k2), h2, &cache));
    cache = 0;
    CHECK(!item_has_key(&m.it, k1, strlen(k1) - 1, h1, &cache));
}

int main(int argc, char **argv)
{
    unit_seed_init(argc, argv);
    RUN_TEST(test_layout_sizes);
    RUN_TEST(test_fingerprint_lookup);
    RUN_TEST(test_link_unlink_refcount);
    RUN_TEST(test_expiry);
    RUN_TEST(test_flush);
    RUN_TEST(test_cas);
    RUN_TEST(test_add_replace_append_prepend);
    RUN_TEST(test_incr_decr);
    RUN_TEST(test_eviction);
    RUN_TEST(test_no_evict_M);
    RUN_TEST(test_pinned_not_evicted);
    RUN_TEST(test_crawler);
    RUN_TEST(test_lazy_lru);
    RUN_TEST(test_lazy_lru_policy);
    RUN_TEST(test_thresholds_rule);
    RUN_TEST(test_stats);
    RUN_TEST(test_recovery_written);
    RUN_TEST(test_threads);
    fprintf(stderr, "test_items: ok\n");
    return 0;
}

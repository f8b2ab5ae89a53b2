/*
 * test_mover.c - the slab page mover and automove, with real items.
 *
 *   A  calcification: a cache filled with small values, then switched to
 *      4 KB values; the automover moves pages to the big class and the big
 *      values read back byte-exact.
 *   B  a pinned item keeps a move busy until released; a move that stays
 *      busy is given up and undone; `slabs reassign` requests.
 *   C  3 threads run verified set/get/delete while a 4th runs the mover
 *      continuously; no wrong value, consistent counters at the end.
 *
 * Every value carries its key's hash, a version and its length in a
 * 24-byte header and a pattern derived from them, so any read can be
 * checked on its own.  Seeded by unit_seed_init (argv[1] or UNIT_SEED);
 * UNIT_MOVER_SECONDS sets the length of scenario C (default 3).
 */
#include "config.h"

#include <pthread.h>
#include <sched.h>

#include "engine/items.h"
#include "base/settings.h"
#include "engine/slabs.h"
#include "base/stats.h"
#include "unit.h"

#define MB (1024 * 1024)
#define HDR 24

static void setup(size_t maxbytes, int partitions)
{
    settings_init();
    settings.maxbytes = maxbytes;
    settings.partitions = partitions;
    settings.hashpower_init = 16;
    memset(&gstats, 0, sizeof(gstats));
    items_init();
    __atomic_store_n(&current_time, 100, __ATOMIC_RELAXED);
}

static uint8_t pattern_byte(uint32_t seed, size_t i)
{
    uint32_t x = seed ^ (uint32_t)(i * 2654435761u);
    x ^= x >> 13;
    return (uint8_t)(x * 0x5bd1e995u >> 24);
}

static void fill_value(char *dst, const char *key, uint32_t version,
                       size_t len)
{
    uint32_t kh = item_hash(key, strlen(key));
    char hdr[HDR + 1];
    snprintf(hdr, sizeof(hdr), "%08x%08x%08x", kh, version, (uint32_t)len);
    memcpy(dst, hdr, HDR);
    uint32_t seed = kh ^ (version * 0x9e3779b9u);
    for (size_t i = HDR; i < len; i++)
        dst[i] = (char)pattern_byte(seed, i);
}

/* True if the item's value is one that fill_value() made for its key. */
static bool value_ok(const item *it)
{
    size_t len = it->nbytes - 2;
    const char *v = ITEM_data(it);
    if (len < HDR || memcmp(v + len, "\r\n", 2) != 0)
        return false;
    char hdr[HDR + 1];
    memcpy(hdr, v, HDR);
    hdr[HDR] = '\0';
    unsigned int kh, version, l;
    if (sscanf(hdr, "%8x%8x%8x", &kh, &version, &l) != 3 || l != len)
        return false;
    if (kh != item_hash(ITEM_key(it), it->nkey))
        return false;
    uint32_t seed = kh ^ (version * 0x9e3779b9u);
    for (size_t i = HDR; i < len; i++)
        if ((uint8_t)v[i] != pattern_byte(seed, i))
            return false;
    return true;
}

static unsigned int version_of(const item *it)
{
    char hdr[9];
    memcpy(hdr, ITEM_data(it) + 8, 8);
    hdr[8] = '\0';
    return (unsigned int)strtoul(hdr, NULL, 16);
}

static bool set_value(const char *key, uint32_t version, size_t len, int part)
{
    item *it = item_alloc(key, strlen(key), 0, 0, len + 2, part);
    if (it == NULL)
        return false;
    fill_value(ITEM_data(it), key, version, len);
    memcpy(ITEM_data(it) + len, "\r\n", 2);
    enum store_result r = item_store(it, STORE_SET, 0, NULL, part);
    item_release(it);
    return r == STORE_STORED;
}

/* 1 = present and correct, 0 = miss, -1 = wrong value. */
static int get_check(const char *key, uint32_t want_version, size_t want_len)
{
    item *it = item_get(key, strlen(key), NULL, true);
    if (it == NULL)
        return 0;
    int r = value_ok(it) ? 1 : -1;
    if (r == 1 && want_len != 0 &&
        (it->nbytes - 2 != want_len || version_of(it) != want_version))
        r = -1;
    item_release(it);
    return r;
}

static struct slabs_class_info class_info(unsigned int c)
{
    struct slabs_class_info ci;
    slabs_class_info(c, &ci);
    return ci;
}

/* With no allocation in flight: each class's chunks add up, and the used
 * chunks are exactly the linked items (nothing else holds one). */
static void check_accounting(void)
{
    uint64_t used = 0;
    for (unsigned int c = 1; c <= slabs_nclasses(); c++) {
        struct slabs_class_info ci = class_info(c);
        CHECK_UEQ(ci.used_chunks + ci.free_chunks + ci.free_chunks_end +
                  ci.moving_chunks, ci.total_chunks);
        used += ci.used_chunks;
    }
    CHECK_UEQ(used, STATS_GET(&gstats, curr_items));
}

static void drive_mover_idle(void)
{
    for (int i = 0; i < 100000 && slabs_reassign_step(1 << 20) > 0; i++)
        ;
    struct slabs_mover_info mi;
    slabs_mover_info(&mi);
    CHECK(!mi.running);
}

/* ---- A: calcification. ---------------------------------------------- */

static void test_calcification(void)
{
    setup(8 * MB, 1);
    char key[32];
    const size_t small_len = 100, big_len = 4096;
    unsigned int small = slabs_clsid(item_make_size(8, small_len + 2));
    unsigned int big = slabs_clsid(item_make_size(8, big_len + 2));
    CHECK(small != big);
    CHECK(class_info(small).movable && class_info(big).movable);

    /* Fill with small values well past the point where eviction starts. */
    int nsmall = 0;
    while (STATS_GET(&gstats, evictions) < 2000) {
        snprintf(key, sizeof(key), "s%07d", nsmall);
        CHECK(set_value(key, (uint32_t)nsmall, small_len, 0));
        nsmall++;
    }
    uint64_t small_pages0 = class_info(small).total_pages;
    CHECK(small_pages0 >= 6);

    /* Big values: only the grace page, and they evict each other. */
    int nbig = 0;
    for (; nbig < 2000; nbig++) {
        snprintf(key, sizeof(key), "b%07d", nbig);
        CHECK(set_value(key, (uint32_t)nbig, big_len, 0));
    }
    CHECK_UEQ(class_info(big).total_pages, 1);
    CHECK_UEQ(class_info(small).total_pages, small_pages0);

    /* The maintainer's loop: sets keep coming, the automover decides,
     * the mover moves. */
    for (int tick = 0; tick < 400 && class_info(big).total_pages < 5; tick++) {
        for (int i = 0; i < 20; i++, nbig++) {
            snprintf(key, sizeof(key), "b%07d", nbig);
            CHECK(set_value(key, (uint32_t)nbig, big_len, 0));
        }
        slabs_automove_step();
        slabs_reassign_step(4096);
    }
    drive_mover_idle();
    struct slabs_class_info sci = class_info(small), bci = class_info(big);
    struct slabs_mover_info mi;
    slabs_mover_info(&mi);
    fprintf(stderr, "    small %llu -> %llu pages, big 1 -> %llu pages, "
            "%llu moves, %llu evictions\n",
            (unsigned long long)small_pages0,
            (unsigned long long)sci.total_pages,
            (unsigned long long)bci.total_pages,
            (unsigned long long)mi.moved, (unsigned long long)mi.evictions);
    CHECK(bci.total_pages >= 5);
    CHECK_UEQ(sci.total_pages + bci.total_pages, small_pages0 + 1);
    CHECK(mi.moved >= 4 && mi.automoves >= 4 && mi.evictions > 0);
    CHECK_UEQ(mi.moved_to_pool, 0);
    CHECK(slabs_mem_malloced() <= 8 * MB + MB);     /* + one grace page */

    /* With 5 pages the last 800 big values all fit: present and exact. */
    for (int i = nbig - 800; i < nbig; i++) {
        snprintf(key, sizeof(key), "b%07d", i);
        CHECK_EQ(get_check(key, (uint32_t)i, big_len), 1);
    }
    /* Every small value still there is exact. */
    int left = 0;
    for (int i = 0; i < nsmall; i++) {
        snprintf(key, sizeof(key), "s%07d", i);
        int r = get_check(key, (uint32_t)i, small_len);
        CHECK(r >= 0);
        left += r;
    }
    CHECK(left > 0);
    check_accounting();
}

/* ---- B: pinned items, give-up, requests. ---------------------------- */

/* Fills class `cls` (values of `len`) to about `pages` pages. */
static int fill_pages(const char *prefix, size_t len, unsigned int cls,
                      double pages)
{
    char key[32];
    struct slabs_class_info ci = class_info(cls);
    int n = (int)(pages * ci.chunks_per_page);
    for (int i = 0; i < n; i++) {
        snprintf(key, sizeof(key), "%s%07d", prefix, i);
        CHECK(set_value(key, (uint32_t)i, len, 0));
    }
    return n;
}

/* Pins (gets and keeps) one item of prefix/n that lies in `page`. */
static item *pin_in_page(const char *prefix, int n, const void *page)
{
    char key[32];
    for (int i = 0; i < n; i++) {
        snprintf(key, sizeof(key), "%s%07d", prefix, i);
        item *it = item_get(key, strlen(key), NULL, false);
        if (it == NULL)
            continue;
        const char *p = (const char *)it;
        if (p >= (const char *)page &&
            p < (const char *)page + settings.slab_page_size)
            return it;
        item_release(it);
    }
    return NULL;
}

static void test_pinned_item(void)
{
    setup(64 * MB, 2);
    const size_t len = 300;
    unsigned int cls = slabs_clsid(item_make_size(8, len + 2));
    int n = fill_pages("p", len, cls, 2.5);
    uint64_t pages0 = class_info(cls).total_pages;
    size_t mal0 = slabs_mem_malloced();
    CHECK(pages0 >= 3);

    CHECK(slabs_reassign_start(cls, 0));
    CHECK(!slabs_reassign_start(cls, 0));           /* one at a time */
    struct slabs_mover_info mi;
    slabs_mover_info(&mi);
    CHECK(mi.running && mi.src == cls && mi.dst == 0 && mi.page != NULL);
    item *pin = pin_in_page("p", n, mi.page);
    CHECK(pin != NULL);

    for (int i = 0; i < 20; i++)
        CHECK(slabs_reassign_step(100000) > 0);
    slabs_mover_info(&mi);
    CHECK(mi.running);
    CHECK(mi.busy_items >= 20);
    CHECK(mi.evictions > 0);
    CHECK_UEQ(class_info(cls).moving_chunks, class_info(cls).chunks_per_page - 1);
    /* The pinned item is untouched and still linked. */
    CHECK(value_ok(pin));
    char key[KEY_MAX_LENGTH + 1];
    memcpy(key, ITEM_key(pin), pin->nkey);
    key[pin->nkey] = '\0';
    CHECK_EQ(get_check(key, 0, 0), 1);

    item_release(pin);
    drive_mover_idle();
    slabs_mover_info(&mi);
    CHECK_UEQ(mi.moved, 1);
    CHECK_UEQ(mi.moved_to_pool, 1);
    CHECK_UEQ(mi.pool_pages, 1);
    CHECK_UEQ(mi.aborted, 0);
    CHECK_UEQ(class_info(cls).total_pages, pages0 - 1);
    CHECK_UEQ(slabs_mem_malloced(), mal0 - MB);
    CHECK_EQ(get_check(key, 0, 0), 0);              /* evicted at last */
    check_accounting();

    /* The pooled page serves the next class that needs a page. */
    unsigned int other = cls + 3;
    void *chunk = slabs_alloc(other, 0);
    CHECK(chunk != NULL);
    slabs_mover_info(&mi);
    CHECK_UEQ(mi.pool_pages, 0);
    CHECK_UEQ(slabs_mem_malloced(), mal0);
    CHECK(((uintptr_t)chunk & (MB - 1)) == 0);      /* the pooled page */
    slabs_free(chunk, other, 0);
}

static void test_give_up(void)
{
    setup(64 * MB, 2);
    const size_t len = 300, big_len = 2000;
    unsigned int cls = slabs_clsid(item_make_size(8, len + 2));
    unsigned int big = slabs_clsid(item_make_size(8, big_len + 2));
    int n = fill_pages("g", len, cls, 2.5);
    fill_pages("B", big_len, big, 0.5);
    uint64_t pages0 = class_info(cls).total_pages;
    uint64_t big0 = class_info(big).total_pages;
    size_t mal0 = slabs_mem_malloced();

    CHECK(slabs_reassign_start(cls, big));
    struct slabs_mover_info mi;
    slabs_mover_info(&mi);
    void *aborted_page = mi.page;
    item *pin = pin_in_page("g", n, mi.page);
    CHECK(pin != NULL);
    int steps = 0;
    while (slabs_reassign_step(1 << 20) > 0 && steps < 10 * SLABS_MOVE_MAX_PASSES)
        steps++;
    CHECK(steps >= SLABS_MOVE_MAX_PASSES - 1);
    slabs_mover_info(&mi);
    CHECK(!mi.running);
    CHECK_UEQ(mi.aborted, 1);
    CHECK_UEQ(mi.moved, 0);
    CHECK_UEQ(class_info(cls).total_pages, pages0);
    CHECK_UEQ(class_info(big).total_pages, big0);
    CHECK_UEQ(class_info(cls).moving_chunks, 0);
    CHECK(value_ok(pin));
    check_accounting();

    /* The undone page's chunks are usable again. */
    char key[32];
    for (int i = 0; i < 100; i++) {
        snprintf(key, sizeof(key), "a%07d", i);
        CHECK(set_value(key, (uint32_t)i, len, i % 2));
    }
    CHECK_UEQ(class_info(cls).total_pages, pages0);
    CHECK_UEQ(slabs_mem_malloced(), mal0);

    /* The next pick avoids the page that was just given up on, and the
     * move goes through to the big class without new memory. */
    CHECK(slabs_reassign_start(cls, big));
    slabs_mover_info(&mi);
    CHECK(mi.page != aborted_page);
    drive_mover_idle();
    item_release(pin);
    slabs_mover_info(&mi);
    CHECK_UEQ(mi.moved, 1);
    CHECK_UEQ(class_info(cls).total_pages, pages0 - 1);
    CHECK_UEQ(class_info(big).total_pages, big0 + 1);
    CHECK_UEQ(slabs_mem_malloced(), mal0);
    /* The big class fills the moved page before it asks for memory. */
    struct slabs_class_info bci = class_info(big);
    CHECK(bci.free_chunks_end >= bci.chunks_per_page);
    for (unsigned int i = 0; i < bci.chunks_per_page; i++) {
        snprintf(key, sizeof(key), "c%07u", i);
        CHECK(set_value(key, i, big_len, 0));
    }
    CHECK_UEQ(slabs_mem_malloced(), mal0);
    for (unsigned int i = 0; i < bci.chunks_per_page; i++) {
        snprintf(key, sizeof(key), "c%07u", i);
        CHECK_EQ(get_check(key, i, big_len), 1);
    }
    check_accounting();
}

static void test_requests(void)
{
    setup(64 * MB, 1);
    unsigned int cls = slabs_clsid(item_make_size(8, 302));
    fill_pages("r", 300, cls, 2.5);
    unsigned int one = cls + 2;
    void *chunk = slabs_alloc(one, 0);              /* a single page */
    CHECK(chunk != NULL);
    slabs_free(chunk, one, 0);
    unsigned int n = slabs_nclasses();

    /* Source 0 is memcached's global pool: here unspent -m. */
    uint64_t pages1 = class_info(1).total_pages;
    CHECK_EQ(slabs_reassign_request(0, 1), SLABS_REASSIGN_OK);
    CHECK_UEQ(class_info(1).total_pages, pages1 + 1);
    CHECK_EQ(slabs_reassign_request(0, n + 1), SLABS_REASSIGN_BADCLASS);
    CHECK_EQ(slabs_reassign_request(n + 1, 1), SLABS_REASSIGN_BADCLASS);
    CHECK_EQ(slabs_reassign_request(cls, n + 1), SLABS_REASSIGN_BADCLASS);
    CHECK_EQ(slabs_reassign_request(cls, cls), SLABS_REASSIGN_SAME);
    CHECK_EQ(slabs_reassign_request(one, cls), SLABS_REASSIGN_NOSPARE);
    CHECK_EQ(slabs_reassign_request(cls, one), SLABS_REASSIGN_OK);
    CHECK_EQ(slabs_reassign_request(cls, 0), SLABS_REASSIGN_RUNNING);
    CHECK(slabs_reassign_step(1) > 0);              /* starts it */
    CHECK_EQ(slabs_reassign_request(cls, 0), SLABS_REASSIGN_RUNNING);
    drive_mover_idle();
    CHECK_UEQ(class_info(one).total_pages, 2);
    CHECK_EQ(slabs_reassign_step(100), 0);          /* idle */

    /* Stats lines. */
    struct stat_text st;
    struct stat_sink sink;
    stat_text_init(&st, &sink);
    CHECK(stats_run(NULL, &sink));     /* slabs_init provided these */
    size_t len;
    char *txt = stat_text_finish(&st, &len);
    CHECK(txt != NULL);
    CHECK(strstr(txt, "STAT slabs_moved 2\r\n") != NULL);     /* the pool's page, and one move */
    CHECK(strstr(txt, "STAT slab_reassign_running 0\r\n") != NULL);
    CHECK(strstr(txt, "STAT slab_reassign_busy_items ") != NULL);
    CHECK(strstr(txt, "STAT slab_global_page_pool 0\r\n") != NULL);
    free(txt);
    /* The mover's own counters (not memcached's names): `stats tac`.  The
     * text is len bytes, not NUL-terminated: searched with memmem. */
    stat_text_init(&st, &sink);
    CHECK(stats_run("tac", &sink));
    txt = stat_text_finish(&st, &len);
    CHECK(txt != NULL);
    CHECK(memmem(txt, len, "STAT slab_reassign_evicted ", 27) != NULL);
    CHECK(memmem(txt, len, "STAT slab_reassign_to_pool ", 27) != NULL);
    CHECK(memmem(txt, len, "STAT slabs_moved ", 17) == NULL);
    free(txt);
    check_accounting();
}

/* ---- C: threads and a busy mover. ------------------------------------ */

#define MT_WORKERS 3
#define MT_KEYS 40000

static int mt_stop;                 /* atomic */
static uint64_t mt_wrong;           /* atomic */
static uint64_t mt_ops;             /* atomic */

struct mt_arg {
    int id;
    uint64_t rng;
};

static size_t mt_len(uint64_t r)
{
    switch (r % 3) {
    case 0: return 100 + (size_t)(r >> 8) % 40;
    case 1: return 1000 + (size_t)(r >> 8) % 100;
    default: return 4000 + (size_t)(r >> 8) % 200;
    }
}

static void *mt_worker(void *p)
{
    struct mt_arg *a = p;
    char key[32];
    uint32_t version = (uint32_t)a->id << 28;
    while (!__atomic_load_n(&mt_stop, __ATOMIC_RELAXED)) {
        uint64_t r = unit_rand_r(&a->rng);
        snprintf(key, sizeof(key), "k%06u", (unsigned int)(r % MT_KEYS));
        unsigned int op = (unsigned int)(r >> 40) % 10;
        if (op < 4) {
            set_value(key, version++, mt_len(unit_rand_r(&a->rng)), a->id);
        } else if (op < 9) {
            if (get_check(key, 0, 0) < 0)
                __atomic_fetch_add(&mt_wrong, 1, __ATOMIC_RELAXED);
        } else {
            item_delete(key, strlen(key), 0, NULL);
        }
        __atomic_fetch_add(&mt_ops, 1, __ATOMIC_RELAXED);
    }
    return NULL;
}

/* A random class with at least 2 pages, 0 if none. */
static unsigned int mt_pick_src(uint64_t *rng)
{
    unsigned int n = slabs_nclasses();
    unsigned int start = (unsigned int)(unit_rand_r(rng) % n);
    for (unsigned int k = 0; k < n; k++) {
        unsigned int c = 1 + (start + k) % n;
        if (class_info(c).total_pages >= 2)
            return c;
    }
    return 0;
}

/* The mover's thread: automove every 8th round, a random `slabs
 * reassign` (a quarter of them to the pool) every 16th, steps always. */
static void *mt_mover(void *p)
{
    uint64_t rng = *(uint64_t *)p;
    unsigned int n = slabs_nclasses();
    for (unsigned int i = 0; !__atomic_load_n(&mt_stop, __ATOMIC_RELAXED); i++) {
        if (i % 8 == 0)
            slabs_automove_step();
        if (i % 16 == 0) {
            unsigned int src = mt_pick_src(&rng);
            unsigned int dst = unit_rand_r(&rng) % 4 == 0 ? 0 :
                1 + (unsigned int)(unit_rand_r(&rng) % n);
            if (src != 0)
                slabs_reassign_request(src, dst);
        }
        if (slabs_reassign_step(512) == 0)
            sched_yield();
    }
    return NULL;
}

static void test_threads_with_mover(void)
{
    setup(24 * MB, MT_WORKERS);
    const char *env = getenv("UNIT_MOVER_SECONDS");
    int seconds = env != NULL ? atoi(env) : 3;
    if (seconds < 1)
        seconds = 1;
    mt_stop = 0;
    mt_wrong = 0;
    mt_ops = 0;

    pthread_t t[MT_WORKERS + 1];
    struct mt_arg args[MT_WORKERS];
    uint64_t mover_rng = unit_rand() | 1;
    for (int i = 0; i < MT_WORKERS; i++) {
        args[i].id = i;
        args[i].rng = unit_rand() | 1;
        CHECK(pthread_create(&t[i], NULL, mt_worker, &args[i]) == 0);
    }
    CHECK(pthread_create(&t[MT_WORKERS], NULL, mt_mover, &mover_rng) == 0);
    sleep((unsigned int)seconds);
    __atomic_store_n(&mt_stop, 1, __ATOMIC_RELAXED);
    for (int i = 0; i <= MT_WORKERS; i++)
        pthread_join(t[i], NULL);
    drive_mover_idle();

    struct slabs_mover_info mi;
    slabs_mover_info(&mi);
    fprintf(stderr, "    %llu ops, %llu moves (%llu to pool, %llu automatic), "
            "%llu aborted, %llu evictions, %llu busy\n",
            (unsigned long long)mt_ops, (unsigned long long)mi.moved,
            (unsigned long long)mi.moved_to_pool,
            (unsigned long long)mi.automoves, (unsigned long long)mi.aborted,
            (unsigned long long)mi.evictions,
            (unsigned long long)mi.busy_items);
    CHECK_UEQ(__atomic_load_n(&mt_wrong, __ATOMIC_RELAXED), 0);
    CHECK(mi.moved > 0);
    CHECK(mi.evictions > 0);
    check_accounting();

    /* Every key still present reads back whole; the pool and -m agree. */
    char key[32];
    uint64_t present = 0;
    for (int i = 0; i < MT_KEYS; i++) {
        snprintf(key, sizeof(key), "k%06u", (unsigned int)i);
        int r = get_check(key, 0, 0);
        CHECK(r >= 0);
        present += (uint64_t)r;
    }
    CHECK_UEQ(present, STATS_GET(&gstats, curr_items));
    uint64_t pages = 0;
    for (unsigned int c = 1; c <= slabs_nclasses(); c++)
        pages += class_info(c).total_pages;
    CHECK_UEQ(pages * MB, slabs_mem_malloced());
    CHECK(slabs_mem_malloced() <= 24 * MB + slabs_nclasses() * (size_t)MB);
}

int main(int argc, char **argv)
{
    unit_seed_init(argc, argv);
    RUN_TEST(test_calcification);
    RUN_TEST(test_pinned_item);
    RUN_TEST(test_give_up);
    RUN_TEST(test_requests);
    RUN_TEST(test_threads_with_mover);
    fprintf(stderr, "test_mover: ok\n");
    return 0;
}

/*
 * test_assoc.c - the hash index: insert/find/delete, incremental resize
 * with lookups and deletes interleaved, no-resize fallback, concurrency,
 * and assoc_reserve (growing at once, finishing a resize in progress).
 */
#include "config.h"

#include <pthread.h>

#include "engine/assoc.h"
#include "base/hash.h"
#include "engine/items.h"
#include "base/settings.h"
#include "base/stats.h"
#include "unit.h"

static item *make(const char *key)
{
    size_t n = strlen(key);
    item *it = calloc(1, sizeof(item) + n + 1);
    CHECK(it != NULL);
    it->nkey = (uint8_t)n;
    memcpy(ITEM_key(it), key, n + 1);
    return it;
}

static void keyname(char *buf, size_t len, int i)
{
    snprintf(buf, len, "key:%d:%x", i, (unsigned int)(i * 2654435761u));
}

static item *find(const char *key)
{
    uint32_t hv = item_hash(key, strlen(key));
    item_lock(hv);
    item *it = assoc_find(key, strlen(key), hv);
    item_unlock(hv);
    return it;
}

static void insert(item *it)
{
    uint32_t hv = item_hash(ITEM_key(it), it->nkey);
    item_lock(hv);
    CHECK(assoc_find(ITEM_key(it), it->nkey, hv) == NULL);
    assoc_insert(it, hv);
    item_unlock(hv);
}

static void delete(const char *key)
{
    uint32_t hv = item_hash(key, strlen(key));
    item_lock(hv);
    item *it = assoc_find(key, strlen(key), hv);
    if (it != NULL)
        assoc_delete(it, hv);
    item_unlock(hv);
}

static void setup(int hashpower)
{
    settings_init();
    settings.hashpower_init = hashpower;
    settings.maxbytes = 2 * 1024 * 1024;
    items_init();
}

static void test_hash_quality(void)
{
    /* Deterministic, and spreads sequential keys over buckets. */
    CHECK_UEQ(hash_key("abc", 3), hash_key("abc", 3));
    CHECK(hash_key("abc", 3) != hash_key("abd", 3));
    CHECK(hash_key("", 0) != hash_key("a", 1));
    enum { B = 1024, N = 64 * B };
    static int buckets[B];
    char k[64];
    for (int i = 0; i < N; i++) {
        keyname(k, sizeof(k), i);
        buckets[hash_key(k, strlen(k)) % B]++;
    }
    for (int i = 0; i < B; i++)
        CHECK(buckets[i] > 64 / 2 && buckets[i] < 64 * 2);
    /* Every output bit flips for some single-bit input change. */
    uint32_t seen = 0, base = hash_key("0123456789abcdef", 16);
    char buf[17] = "0123456789abcdef";
    for (int byte = 0; byte < 16; byte++) {
        for (int bit = 0; bit < 8; bit++) {
            buf[byte] ^= (char)(1 << bit);
            seen |= base ^ hash_key(buf, 16);
            buf[byte] ^= (char)(1 << bit);
        }
    }
    CHECK_UEQ(seen, 0xffffffffu);
}

static void test_basic(void)
{
    setup(16);
    CHECK_EQ(assoc_hashpower(), 16);
    item *a = make("alpha"), *b = make("beta");
    insert(a);
    insert(b);
    CHECK(find("alpha") == a);
    CHECK(find("beta") == b);
    CHECK(find("gamma") == NULL);
    CHECK(find("alph") == NULL);
    CHECK_UEQ(assoc_count(), 2);
    delete("alpha");
    CHECK(find("alpha") == NULL);
    CHECK(find("beta") == b);
    delete("nothing");
    CHECK_UEQ(assoc_count(), 1);
    delete("beta");
    CHECK_UEQ(assoc_count(), 0);
    free(a);
    free(b);
    /* hashpower below the stripe bits is raised. */
    setup(4);
    CHECK_EQ(assoc_hashpower(), ITEM_LOCK_POWER + 1);
}

/* Inserts many keys while resizing a few buckets at a time, deleting
 * every third key, and checks every key after each phase. */
static void test_incremental_resize(void)
{
    setup(ITEM_LOCK_POWER + 1);
    enum { N = 120000 };
    static item *items[N];
    char k[64];
    unsigned int hp0 = assoc_hashpower();
    int steps_busy = 0;
    for (int i = 0; i < N; i++) {
        keyname(k, sizeof(k), i);
        items[i] = make(k);
        insert(items[i]);
        if (i % 7 == 0 && assoc_expand_step(3))
            steps_busy++;
        if (i % 3 == 2) {       /* deletes key i - 1, i.e. j % 3 == 1 */
            keyname(k, sizeof(k), i - 1);
            delete(k);
        }
        if (i % 5000 == 0) {
            for (int j = 0; j <= i; j += 97) {
                keyname(k, sizeof(k), j);
                bool deleted = j % 3 == 1 && j + 1 <= i;
                CHECK(find(k) == (deleted ? NULL : items[j]));
            }
        }
    }
    CHECK(steps_busy > 0);
    while (assoc_expand_step(1000))
        ;
    CHECK(assoc_hashpower() > hp0);
    CHECK(assoc_count() <= ((uint64_t)1 << assoc_hashpower()) * 3 / 2);
    uint64_t live = 0;
    for (int i = 0; i < N; i++) {
        keyname(k, sizeof(k), i);
        bool deleted = i % 3 == 1 && i + 1 < N;
        CHECK(find(k) == (deleted ? NULL : items[i]));
        live += !deleted;
    }
    CHECK_UEQ(assoc_count(), live);
    for (int i = 0; i < N; i++) {
        keyname(k, sizeof(k), i);
        delete(k);
        free(items[i]);
    }
    CHECK_UEQ(assoc_count(), 0);
}

static void test_no_resize_still_works(void)
{
    setup(ITEM_LOCK_POWER + 1);
    enum { N = 60000 };     /* > 7 items per bucket */
    static item *items[N];
    char k[64];
    for (int i = 0; i < N; i++) {
        keyname(k, sizeof(k), i);
        items[i] = make(k);
        insert(items[i]);
    }
    CHECK_EQ(assoc_hashpower(), ITEM_LOCK_POWER + 1);
    for (int i = 0; i < N; i++) {
        keyname(k, sizeof(k), i);
        CHECK(find(k) == items[i]);
    }
    for (int i = 0; i < N; i++) {
        keyname(k, sizeof(k), i);
        delete(k);
        free(items[i]);
    }
}

/* Writers insert/find/delete their own keys while a resizer runs. */
enum { MT_THREADS = 4, MT_KEYS = 20000 };
static volatile int mt_stop;

static void *mt_writer(void *p)
{
    int id = (int)(intptr_t)p;
    static item *mine[MT_THREADS][MT_KEYS];
    char k[64];
    for (int round = 0; round < 2; round++) {
        for (int i = 0; i < MT_KEYS; i++) {
            snprintf(k, sizeof(k), "t%d:%d", id, i);
            mine[id][i] = make(k);
            insert(mine[id][i]);
            if (i % 3 == 0)
                CHECK(find(k) == mine[id][i]);
        }
        for (int i = 0; i < MT_KEYS; i++) {
            snprintf(k, sizeof(k), "t%d:%d", id, i);
            CHECK(find(k) == mine[id][i]);
            delete(k);
            CHECK(find(k) == NULL);
            free(mine[id][i]);
        }
    }
    return NULL;
}

static void *mt_resizer(void *p)
{
    while (!__atomic_load_n(&mt_stop, __ATOMIC_RELAXED))
        assoc_expand_step(16);
    return NULL;
}

static void test_concurrent_resize(void)
{
    setup(ITEM_LOCK_POWER + 1);
    pthread_t w[MT_THREADS], r;
    mt_stop = 0;
    pthread_create(&r, NULL, mt_resizer, NULL);
    for (int i = 0; i < MT_THREADS; i++)
        pthread_create(&w[i], NULL, mt_writer, (void *)(intptr_t)i);
    for (int i = 0; i < MT_THREADS; i++)
        pthread_join(w[i], NULL);
    __atomic_store_n(&mt_stop, 1, __ATOMIC_RELAXED);
    pthread_join(r, NULL);
    CHECK_UEQ(assoc_count(), 0);
    CHECK(assoc_hashpower() > ITEM_LOCK_POWER + 1);
}

/* ---- assoc_reserve: growing at once, in the calling thread. ---- */

/* hash_is_expanding as `stats` reports it. */
static struct {
    char val[32];
    int seen;
} expanding_stat;

static void expanding_emit(void *ctx, const char *key, const char *val)
{
    (void)ctx;
    if (strcmp(key, "hash_is_expanding") == 0) {
        snprintf(expanding_stat.val, sizeof(expanding_stat.val), "%s", val);
        expanding_stat.seen++;
    }
}

static bool hash_is_expanding(void)
{
    struct stat_sink sink = { expanding_emit, NULL };
    expanding_stat.seen = 0;
    CHECK(stats_run(NULL, &sink));
    CHECK_EQ(expanding_stat.seen, 1);
    CHECK(strcmp(expanding_stat.val, "0") == 0 ||
          strcmp(expanding_stat.val, "1") == 0);
    return expanding_stat.val[0] == '1';
}

static void count_item(item *it, void *arg)
{
    (void)it;
    (*(uint64_t *)arg)++;
}

/* Every item is found, and the table holds each exactly once. */
static void check_all_found(item **items, int n)
{
    for (int i = 0; i < n; i++)
        CHECK(find(ITEM_key(items[i])) == items[i]);
    uint64_t seen = 0;
    assoc_each(count_item, &seen);
    CHECK_UEQ(seen, (uint64_t)n);
    CHECK_UEQ(assoc_count(), (uint64_t)n);
}

/* Two keys, one in the first and one in the last bucket of every table
 * up to 2^EDGE_BITS buckets: a resize that skips a boundary bucket loses
 * one of them. */
#define EDGE_BITS 18
static char edge[2][32];

static void edge_keys(void)
{
    const uint32_t mask = (1u << EDGE_BITS) - 1;
    for (int e = 0; e < 2; e++) {
        if (edge[e][0] != '\0')
            continue;
        uint32_t want = e == 0 ? 0 : mask;
        for (uint32_t i = 0;; i++) {
            CHECK(i < 64u << EDGE_BITS);
            snprintf(edge[e], sizeof(edge[e]), "edge%d:%u", e, i);
            if ((item_hash(edge[e], strlen(edge[e])) & mask) == want)
                break;
        }
    }
}

static void insert_keys(item **items, int n)
{
    char k[64];
    edge_keys();
    for (int i = 0; i < n; i++) {
        if (i < 2)
            snprintf(k, sizeof(k), "%s", edge[i]);
        else
            keyname(k, sizeof(k), i);
        items[i] = make(k);
        insert(items[i]);
    }
}

static void free_keys(item **items, int n)
{
    for (int i = 0; i < n; i++) {
        delete(ITEM_key(items[i]));
        CHECK(find(ITEM_key(items[i])) == NULL);
        free(items[i]);
    }
    CHECK_UEQ(assoc_count(), 0);
}

static void test_reserve(void)
{
    setup(ITEM_LOCK_POWER + 1);
    enum { N = 5000 };
    static item *items[N];
    insert_keys(items, N);
    CHECK_EQ(assoc_hashpower(), ITEM_LOCK_POWER + 1);
    CHECK(!hash_is_expanding());

    /* Three doublings at once, no further than needed. */
    assoc_reserve((uint64_t)1 << (ITEM_LOCK_POWER + 4));
    CHECK_EQ(assoc_hashpower(), ITEM_LOCK_POWER + 4);
    CHECK(!hash_is_expanding());
    CHECK_UEQ(gstats.hash_bytes,
              ((uint64_t)1 << (ITEM_LOCK_POWER + 4)) * sizeof(item *));
    check_all_found(items, N);

    /* Not a power of two: rounded up. */
    assoc_reserve(((uint64_t)1 << (ITEM_LOCK_POWER + 5)) + 1);
    CHECK_EQ(assoc_hashpower(), ITEM_LOCK_POWER + 6);
    CHECK(!hash_is_expanding());
    check_all_found(items, N);

    /* Already as large or larger: nothing changes. */
    uint64_t bytes = gstats.hash_bytes;
    assoc_reserve((uint64_t)1 << (ITEM_LOCK_POWER + 6));
    assoc_reserve(1 << 10);
    assoc_reserve(0);
    CHECK_EQ(assoc_hashpower(), ITEM_LOCK_POWER + 6);
    CHECK_UEQ(gstats.hash_bytes, bytes);
    CHECK(!hash_is_expanding());
    check_all_found(items, N);

    /* The table keeps working: inserts, deletes, no resize pending. */
    CHECK(!assoc_expand_step(1000));
    CHECK_EQ(assoc_hashpower(), ITEM_LOCK_POWER + 6);
    item *x = make("after-reserve");
    insert(x);
    CHECK(find("after-reserve") == x);
    delete("after-reserve");
    CHECK(find("after-reserve") == NULL);
    free(x);
    free_keys(items, N);
}

/* Past the load factor, one small step starts a resize: the new table is
 * published and a few old buckets moved. */
static void start_resize(item **items, int n)
{
    insert_keys(items, n);
    CHECK_EQ(assoc_hashpower(), ITEM_LOCK_POWER + 1);
    CHECK(assoc_expand_step(3));
    CHECK_EQ(assoc_hashpower(), ITEM_LOCK_POWER + 2);
    CHECK(hash_is_expanding());
    check_all_found(items, n);
}

static void test_reserve_during_resize(void)
{
    enum { N = (1 << (ITEM_LOCK_POWER + 1)) * 3 / 2 + 500 };
    static item *items[N];

    /* A smaller n still finishes the resize in progress. */
    setup(ITEM_LOCK_POWER + 1);
    start_resize(items, N);
    assoc_reserve(1);
    CHECK_EQ(assoc_hashpower(), ITEM_LOCK_POWER + 2);
    CHECK(!hash_is_expanding());
    CHECK_UEQ(gstats.hash_bytes,
              ((uint64_t)1 << (ITEM_LOCK_POWER + 2)) * sizeof(item *));
    check_all_found(items, N);
    CHECK(!assoc_expand_step(1000));            /* nothing left to move */
    CHECK_EQ(assoc_hashpower(), ITEM_LOCK_POWER + 2);
    check_all_found(items, N);
    free_keys(items, N);

    /* A larger n finishes it, then keeps growing. */
    setup(ITEM_LOCK_POWER + 1);
    start_resize(items, N);
    assoc_reserve((uint64_t)1 << (ITEM_LOCK_POWER + 4));
    CHECK_EQ(assoc_hashpower(), ITEM_LOCK_POWER + 4);
    CHECK(!hash_is_expanding());
    check_all_found(items, N);
    CHECK(!assoc_expand_step(1000));
    free_keys(items, N);
}

int main(int argc, char **argv)
{
    unit_seed_init(argc, argv);
    RUN_TEST(test_hash_quality);
    RUN_TEST(test_basic);
    RUN_TEST(test_incremental_resize);
    RUN_TEST(test_no_resize_still_works);
    RUN_TEST(test_concurrent_resize);
    RUN_TEST(test_reserve);
    RUN_TEST(test_reserve_during_resize);
    fprintf(stderr, "test_assoc: ok\n");
    return 0;
}

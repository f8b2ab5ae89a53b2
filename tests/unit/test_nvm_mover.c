/*
 * test_nvm_mover.c - the NVM page mover (tac/mover.c) without a server.
 *
 * The tier engine is set up from options as the server sets it up
 * (settings_parse_args, tac_init): -m 64, -I 64k, -M, and a 16 MB NVM tier
 * in a /dev/shm file, with no SSD.  No background thread runs: the test
 * drives the mover's rounds itself, as evictor 0 would.
 *
 *   1. DRAM items of ~900 B values are demoted (tac_demote) until NVM has
 *      no slot left: every NVM page belongs to that one slot class.
 *   2. Three items in four are deleted: every page is a quarter used.
 *   3. A 20 KB value, a class with no page, is demoted: it fails and asks
 *      the mover for a page.  The rounds then empty a page of the first
 *      class, moving its live tuples into free slots of the same class
 *      and repointing their meta tuples, and the page goes to the new
 *      class: the demotion succeeds.  Meanwhile a reader thread reads the
 *      first class's keys through the index and checks every value.
 *   4. Every key reads back byte-exact; nothing was dropped (-M).
 *
 * Keys are 40 to 60 bytes; value bytes and the reader's keys come from the
 * printed seed (argv[1] or UNIT_SEED).
 */
#include "config.h"

#include <pthread.h>

#include "base/settings.h"
#include "engine/item_lock.h"
#include "engine/items.h"
#include "nvm/nvm.h"
#include "tac/internal.h"
#include "tac/mover.h"
#include "tac/nvm_tier.h"
#include "tac/place.h"
#include "tac/tac.h"
#include "tac/tuple.h"
#include "unit.h"

#define SMALL 900
#define BIG (20 * 1024)
#define MAX_KEYS 40000

static char nvm_opt[160];
static uint32_t nkeys;                  /* first-class keys stored */
static bool alive[MAX_KEYS];            /* not deleted */
static volatile bool reading;
static uint64_t reads_checked;

static int key_of(char *buf, uint32_t k)
{
    int n = snprintf(buf, 80, "nvm-mover-test:%06u:", k);
    int len = 40 + (int)(k % 21);
    for (; n < len; n++)
        buf[n] = (char)('a' + (k + (uint32_t)n) % 26);
    buf[n] = '\0';
    return n;
}

static void value_of(char *v, uint32_t len, uint32_t k)
{
    uint64_t x = unit_seed_value ^ ((uint64_t)k * 0x9e3779b97f4a7c15ull);
    for (uint32_t i = 0; i + 2 < len; i++) {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        v[i] = (char)('!' + x % 90);
    }
    v[len - 2] = '\r';
    v[len - 1] = '\n';
}

/* Stores key k with a value of len bytes in DRAM, then demotes it; false
 * when NVM had no room for it (the item stays in DRAM). */
static bool store_and_demote(uint32_t k, uint32_t len)
{
    char key[80], *v = malloc(len);
    CHECK(v != NULL);
    int n = key_of(key, k);
    value_of(v, len, k);
    item *it = item_alloc(key, (size_t)n, k, 0, len, 0);
    CHECK(it != NULL);
    memcpy(ITEM_data(it), v, len);
    CHECK_EQ(item_store(it, STORE_SET, 0, NULL, 0), STORE_STORED);
    item_release(it);
    free(v);
    uint32_t hv = item_hash(key, (size_t)n);
    item_lock(hv);
    item *cur = do_item_get(key, (size_t)n, hv, NULL, false);
    CHECK(cur != NULL && cur->tier == TIER_DRAM);
    bool ok = tac_demote(cur, hv);
    item_release(cur);
    item_unlock(hv);
    return ok;
}

/* Key k reads back with its value (len bytes), from the tier it names. */
static void check_key(uint32_t k, uint32_t len, enum item_tier tier)
{
    char key[80];
    int n = key_of(key, k);
    char *want = malloc(len);
    CHECK(want != NULL);
    value_of(want, len, k);
    uint32_t hv = item_hash(key, (size_t)n);
    item_lock(hv);
    item *it = do_item_get(key, (size_t)n, hv, NULL, false);
    CHECK(it != NULL);
    CHECK_EQ(it->tier, tier);
    item *val = item_value_take(it);    /* the tier's read, checked */
    item_unlock(hv);
    CHECK(val != NULL);
    CHECK_EQ(val->nbytes, len);
    CHECK_MEM_EQ(ITEM_data(val), want, len);
    item_release(val);
    free(want);
}

static void *reader_main(void *arg)
{
    uint64_t rng = unit_seed_value ^ 0xabcdef;
    (void)arg;
    while (__atomic_load_n(&reading, __ATOMIC_ACQUIRE)) {
        uint32_t k = (uint32_t)(unit_rand_r(&rng) % nkeys);
        if (!alive[k])
            continue;
        check_key(k, SMALL, TIER_NVM);
        __atomic_add_fetch(&reads_checked, 1, __ATOMIC_RELAXED);
    }
    return NULL;
}

static void test_drain_for_a_new_class(void)
{
    /* 1: NVM full of one class. */
    while (nkeys < MAX_KEYS && store_and_demote(nkeys, SMALL))
        alive[nkeys++] = true;
    CHECK(nkeys > 1000 && nkeys < MAX_KEYS);
    struct nvm_info info;
    nvm_get_info(tac.nvm, &info);
    CHECK_EQ(info.pages_used, info.pages_total);
    fprintf(stderr, "    %u tuples fill %llu NVM pages\n", nkeys,
            (unsigned long long)info.pages_total);
    /* The key that found no room stays in DRAM; it is not counted. */

    /* 2: three in four deleted. */
    for (uint32_t k = 0; k < nkeys; k++) {
        if (k % 4 == 0)
            continue;
        char key[80];
        int n = key_of(key, k);
        CHECK_EQ(item_delete(key, (size_t)n, 0, NULL), DELETE_OK);
        alive[k] = false;
    }
    nvm_get_info(tac.nvm, &info);
    CHECK_EQ(info.pages_used, info.pages_total);    /* no page emptied */

    /* 3: a class with no page asks the mover; rounds run with a reader. */
    uint32_t big = MAX_KEYS + 1;
    CHECK(!store_and_demote(big, BIG));
    pthread_t reader;
    __atomic_store_n(&reading, true, __ATOMIC_RELEASE);
    CHECK_EQ(pthread_create(&reader, NULL, reader_main, NULL), 0);
    /* Evictor 0's rounds, 1 ms apart (it naps 10 ms when idle): the mover
     * may first sit out its idle time from the fill's last request, which
     * named the full class itself. */
    int rounds = 0, moved = 0;
    bool placed = false;
    for (; rounds < 5000 && !placed; rounds++) {
        moved += tac_nvm_mover_step();
        usleep(1000);
        if (rounds % 16 == 15) {
            char key[80];
            int n = key_of(key, big);
            uint32_t hv = item_hash(key, (size_t)n);
            item_lock(hv);
            item *cur = do_item_get(key, (size_t)n, hv, NULL, false);
            CHECK(cur != NULL);
            placed = cur->tier == TIER_NVM || tac_demote(cur, hv);
            item_release(cur);
            item_unlock(hv);
        }
    }
    __atomic_store_n(&reading, false, __ATOMIC_RELEASE);
    pthread_join(reader, NULL);
    CHECK(placed);
    nvm_get_info(tac.nvm, &info);
    fprintf(stderr, "    %d rounds, %d tuples moved, %llu pages drained, %llu reads "
            "checked meanwhile\n", rounds, moved, (unsigned long long)info.pages_drained,
            (unsigned long long)reads_checked);
    CHECK(moved > 0);
    CHECK(info.pages_drained >= 1);
    CHECK(STATS_GET(&tac.stats, nvm_tuples_moved) > 0);
    CHECK(reads_checked > 0);

    /* 4: every key back. */
    unsigned back = 0;
    for (uint32_t k = 0; k < nkeys; k++) {
        if (alive[k]) {
            check_key(k, SMALL, TIER_NVM);
            back++;
        }
    }
    check_key(big, BIG, TIER_NVM);
    CHECK_EQ(back, (nkeys + 3) / 4);
    CHECK_EQ(STATS_GET(&tac.stats, nvm_evictions), 0);
}

/* 5. An NVM hit reads header, key and value in one pass: the emulated
 * latency charges each 256 B block of the tuple once (the header's block
 * used to be charged twice). */
static void test_nvm_hit_charged_once(void)
{
    unsigned checked = 0;
    for (uint32_t k = 0; k < nkeys && checked < 50; k++) {
        if (!alive[k])
            continue;
        char key[80];
        int n = key_of(key, k);
        uint32_t hv = item_hash(key, (size_t)n);
        item_lock(hv);
        item *it = do_item_get(key, (size_t)n, hv, NULL, false);
        CHECK(it != NULL && it->tier == TIER_NVM);
        uint64_t ref = item_meta_ref(it);
        uint64_t size = tac_tuple_size(it->nkey, it->nbytes);
        uint64_t want = (ref + size - 1) / 256 - ref / 256 + 1;
        struct nvm_info a, b;
        nvm_get_info(tac.nvm, &a);
        item *val = item_value_take(it);
        nvm_get_info(tac.nvm, &b);
        item_unlock(hv);
        CHECK(val != NULL);
        CHECK_EQ(b.read_blocks - a.read_blocks, want);
        item_release(val);
        checked++;
    }
    CHECK(checked > 0);
}

int main(int argc, char **argv)
{
    unit_seed_init(argc, argv);
    char path[96];
    snprintf(path, sizeof(path), "/dev/shm/test-nvm-mover-%d.nvm", (int)getpid());
    unlink(path);
    /* A 1 ns emulated latency: NVM reads are counted in 256 B blocks. */
    snprintf(nvm_opt, sizeof(nvm_opt), "nvm_path=%s:16m,recovery=off,nvm_latency=1:1", path);
    char *args[] = { "test_nvm_mover", "-m", "64", "-I", "64k", "-M", "-t", "1",
                     "-o", nvm_opt, NULL };
    settings_init();
    settings_parse_args(10, args);
    CHECK(settings_finalize());
    items_init();
    CHECK(tac_init());
    RUN_TEST(test_drain_for_a_new_class);
    RUN_TEST(test_nvm_hit_charged_once);
    tac_close();
    char extra[128];
    const char *suffix[] = { "", ".state", ".state.journal", ".state.tmp" };
    for (size_t i = 0; i < sizeof(suffix) / sizeof(suffix[0]); i++) {
        snprintf(extra, sizeof(extra), "%s%s", path, suffix[i]);
        unlink(extra);
    }
    fprintf(stderr, "test_nvm_mover: ok\n");
    return 0;
}

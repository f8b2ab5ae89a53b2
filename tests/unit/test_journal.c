/*
 * test_journal.c - the crash journal (tac/durable/journal.c) without a server.
 *
 * An NVM region in a /dev/shm file stands for the tiers (the journal is
 * sized from them and tied to their open count); write sequences are
 * advanced with tac_tuple_seq_floor, as stores would advance them.
 *
 *   A  records: an invalidation kills a key's copies up to its seq, and no
 *      other key's; a shorter life caps the copies above it; flush_all
 *      kills every copy up to its seq.
 *   B  overflow: nine keys of one bucket (eight ways) raise that bucket's
 *      floor to the oldest record it gave up; keys of other buckets keep
 *      their copies at that seq.
 *   C  persistence: closed and opened again with the same tier file, the
 *      journal is trusted and holds its records; a tier file opened once
 *      more by a run that did not attach it is not trusted.
 *
 * Keys are drawn from the printed seed (argv[1] or UNIT_SEED).
 */
#include "config.h"

#include "engine/items.h"
#include "base/settings.h"
#include "tac/durable.h"
#include "tac/internal.h"
#include "tac/tuple.h"
#include "unit.h"
#include "unit_nvm.h"


static char nvm_path[128], state_path[128];
static char keys[11][48];               /* test_overflow's, one bucket */

static struct nvm_region *nvm_up(void)
{
    return unit_nvm_up(nvm_path);
}

/* The journal of a run on region r: opened, then attached (as a start
 * does once recovery has read it); true when it was trusted. */
static bool journal_up(struct nvm_region *r)
{
    tac.nvm = r;
    CHECK(tac_journal_open(state_path));
    bool matched = tac_journal_matched();
    tac_journal_attach();
    return matched;
}

static void journal_down(struct nvm_region *r)
{
    tac_journal_close();
    nvm_close(r);
    tac.nvm = NULL;
}

static bool dead(const char *key, uint64_t seq)
{
    return tac_journal_dead(key, strlen(key), seq);
}

static void invalidate_at(const char *key, uint64_t seq)
{
    tac_tuple_seq_floor(seq);
    CHECK_EQ(tac_tuple_last_seq(), seq);
    tac_journal_invalidate(item_key_fp(key, strlen(key), item_hash(key, strlen(key))));
}

/* A records */
static void test_records(void)
{
    invalidate_at("alpha:0123456789abcdef0123456789", 10);
    CHECK(dead("alpha:0123456789abcdef0123456789", 1));
    CHECK(dead("alpha:0123456789abcdef0123456789", 10));
    CHECK(!dead("alpha:0123456789abcdef0123456789", 11));
    CHECK(!dead("beta:0123456789abcdef0123456789", 5));

    /* A shorter life at seq 20: copies in (10, 20] come back expiring by
     * the cap; newer copies and the key's older, dead ones are untouched. */
    const char *k = "gamma:0123456789abcdef0123456789";
    invalidate_at(k, 12);
    tac_tuple_seq_floor(20);
    tac_journal_shorten(item_key_fp(k, strlen(k), item_hash(k, strlen(k))), 1700000000);
    uint64_t h = tac_key_hash64(k, strlen(k));
    uint64_t exp = 0;
    CHECK(!tac_journal_check_h(h, 20, &exp));
    CHECK_EQ(exp, 1700000000);
    exp = 1600000000;                   /* already shorter: kept */
    CHECK(!tac_journal_check_h(h, 15, &exp));
    CHECK_EQ(exp, 1600000000);
    exp = 0;
    CHECK(!tac_journal_check_h(h, 21, &exp));
    CHECK_EQ(exp, 0);
    CHECK(tac_journal_check_h(h, 12, &exp));
    /* Replaced later: every copy up to then is dead, the capped ones too. */
    invalidate_at(k, 30);
    CHECK(dead(k, 20));
    CHECK(!dead(k, 31));

    /* flush_all kills every key's copies up to its seq. */
    tac_tuple_seq_floor(40);
    tac_journal_flush();
    CHECK(dead("delta:0123456789abcdef0123456789", 40));
    CHECK(!dead("delta:0123456789abcdef0123456789", 41));
}

/* Fills keys[0..n) with keys whose journal bucket is that of keys[0]
 * (2^13 buckets at this tier size: the hash's low 13 bits). */
static void same_bucket(int n)
{
    uint64_t mask = (1u << 13) - 1, want = 0;
    int got = 0;
    for (uint64_t i = 0; got < n; i++) {
        char k[48];
        snprintf(k, sizeof(k), "bucket-%016llx-%08llx",
                 (unsigned long long)unit_rand(), (unsigned long long)i);
        uint64_t h = tac_key_hash64(k, strlen(k));
        if (got == 0)
            want = h & mask;
        if ((h & mask) == want)
            memcpy(keys[got++], k, sizeof(k));
    }
}

/* B overflow */
static void test_overflow(void)
{
    same_bucket(11);
    uint64_t before = tac_journal_overflows();
    for (int i = 0; i < 8; i++)
        invalidate_at(keys[i], 100 + (uint64_t)i);
    CHECK_EQ(tac_journal_overflows(), before);
    /* A ninth key: the oldest record (seq 100) gives way to the floor. */
    invalidate_at(keys[8], 108);
    CHECK_EQ(tac_journal_overflows(), before + 1);
    for (int i = 0; i < 9; i++)
        CHECK(dead(keys[i], 100 + (uint64_t)i));
    /* Keys of the bucket never recorded: lost up to the floor, no further. */
    CHECK(dead(keys[9], 100));
    CHECK(!dead(keys[9], 101));
    CHECK(!dead(keys[10], 101));
    /* Another bucket keeps its copies at that seq. */
    char other[48];
    uint64_t mask = (1u << 13) - 1;
    uint64_t hb = tac_key_hash64(keys[0], strlen(keys[0])) & mask;
    for (int i = 0;; i++) {
        snprintf(other, sizeof(other), "other-bucket-%d", i);
        if ((tac_key_hash64(other, strlen(other)) & mask) != hb)
            break;
    }
    CHECK(!dead(other, 100));
    CHECK(!dead(other, 50));
}

/* C persistence */
static void test_reopen(void)
{
    struct nvm_region *r = nvm_up();
    CHECK(journal_up(r));
    CHECK(dead(keys[3], 103));          /* a record */
    CHECK(!dead(keys[3], 104));
    CHECK(dead(keys[9], 100));          /* the bucket's floor */
    CHECK(!dead(keys[9], 101));
    CHECK(dead("delta:0123456789abcdef0123456789", 40));    /* flush_all */
    CHECK(!dead("delta:0123456789abcdef0123456789", 41));
    CHECK(tac_journal_seq_reserved() > tac_tuple_last_seq());
    journal_down(r);

    /* The tier file opened once more without this journal: not trusted. */
    nvm_close(nvm_up());
    r = nvm_up();
    CHECK(!journal_up(r));
    journal_down(r);
}

int main(int argc, char **argv)
{
    unit_seed_init(argc, argv);
    snprintf(nvm_path, sizeof(nvm_path), "/dev/shm/test-journal-%d.nvm", (int)getpid());
    snprintf(state_path, sizeof(state_path), "/tmp/test-journal-%d.state", (int)getpid());
    settings_init();
    items_init();
    tac_config_load();

    struct nvm_region *r = nvm_up();
    CHECK(!journal_up(r));              /* a new tier file: nothing to trust */
    CHECK(!dead("alpha:0123456789abcdef0123456789", 1));
    test_records();
    test_overflow();
    journal_down(r);
    test_reopen();

    char jpath[160];
    snprintf(jpath, sizeof(jpath), "%s.journal", state_path);
    unlink(jpath);
    unlink(nvm_path);
    printf("test_journal: ok\n");
    return 0;
}

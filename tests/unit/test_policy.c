/*
 * test_policy.c - the placement decisions (tac/policy.c) without a server.
 *
 * An NVM region in a /dev/shm file stands for the NVM tier (admission asks
 * it for its free bytes); the SSD tier is only ever asked whether it
 * exists, so its pointer is a token here.  Temperatures come from real
 * access records (lazy_lru.c): an item read once is cold, twice warm, five
 * times in a second hot.
 *
 *   A  demote and stage targets for every variant, tier set and
 *      temperature;
 *   B  what an NVM hit and an SSD hit bring up, and -o ext_recache_rate's
 *      every Nth cold SSD read;
 *   C  where a tuple read up from SSD goes, first and second choice;
 *      anti2's share of NVM over many draws;
 *   D  NVM admission (obp:PCT): refused while NVM is full and churns more
 *      than PCT % of its lookups, admitted again when lookups dominate or
 *      NVM has room; refusals counted.
 *
 * anti2's draws come from util_rand64; the share is checked within a
 * tenth of itself over 20,000 of them.
 */
#include "config.h"

#include "engine/items.h"
#include "engine/lazy_lru.h"
#include "base/settings.h"
#include "tac/internal.h"
#include "tac/policy.h"
#include "unit.h"
#include "unit_nvm.h"
#include "base/util.h"

static char nvm_path[128];
static struct nvm_region *region;
static int ssd_token;
#define SSD_PRESENT ((struct ssd_store *)&ssd_token)

/* An item on the stack whose access record says temp. */
static void make_item(item *it, enum llru_temp temp)
{
    memset(it, 0, sizeof(*it));
    rel_time_t now = mc_now();
    llru_init_access(it, now);
    int reads = temp == LLRU_HOT ? 6 : temp == LLRU_WARM ? 2 : 1;
    for (int i = 0; i < reads; i++)
        llru_record_access(it, now);
    CHECK_EQ(llru_temperature(it), temp);
}

static void tiers(enum settings_tier_policy p, bool nvm, bool ssd,
                  struct nvm_region *r)
{
    tac.policy = p;
    tac.nvm = nvm ? r : NULL;
    tac.ssd = ssd ? SSD_PRESENT : NULL;
    tac.obp_pct = -1;                   /* always admit, unless a test says */
    tac.nvm_free_wm = 0;
    tac.anti2_nvm_share = 0.5;
}

static void advance_clock(void)
{
    __atomic_add_fetch(&current_time, 1, __ATOMIC_RELAXED);
}

/* A */
static void test_demote_and_stage(void)
{
    struct nvm_region *r = region;
    item cold, warm, hot;
    make_item(&cold, LLRU_COLD);
    make_item(&warm, LLRU_WARM);
    make_item(&hot, LLRU_HOT);
    const enum settings_tier_policy all[] = { TIER_POLICY_TAC, TIER_POLICY_ANTI2,
                                              TIER_POLICY_ANTITUPLE, TIER_POLICY_TWOTIER };
    for (size_t i = 0; i < sizeof(all) / sizeof(all[0]); i++) {
        /* No NVM: nothing goes there. */
        tiers(all[i], false, true, r);
        CHECK(!tac_policy_demote_to_nvm(&hot));
        CHECK(!tac_policy_stage_to_nvm());
        /* NVM, admission open: every temperature may go there. */
        tiers(all[i], true, true, r);
        CHECK(tac_policy_demote_to_nvm(&cold));
        CHECK(tac_policy_demote_to_nvm(&warm));
        CHECK(tac_policy_stage_to_nvm());
        CHECK_EQ(tac_policy_temperatures(), all[i] != TIER_POLICY_ANTI2);
    }
    /* Admission that refuses (below) keeps cold items out of NVM, except
     * under anti2 (no temperatures) or without an SSD to take them. */
    tiers(TIER_POLICY_TAC, true, true, r);
    tac.obp_pct = 0;
    tac.nvm_free_wm = (size_t)1 << 40;  /* NVM counts as full */
    advance_clock();
    make_item(&cold, LLRU_COLD);        /* temperatures decay with time */
    make_item(&warm, LLRU_WARM);
    make_item(&hot, LLRU_HOT);
    TAC_ADD(nvm_inserts, 100);
    CHECK(!tac_policy_demote_to_nvm(&cold));
    CHECK(tac_policy_demote_to_nvm(&warm));
    CHECK(tac_policy_demote_to_nvm(&hot));
    CHECK(!tac_policy_stage_to_nvm());
    tac.ssd = NULL;
    CHECK(tac_policy_demote_to_nvm(&cold));
    tac.ssd = SSD_PRESENT;
    tac.policy = TIER_POLICY_ANTI2;
    CHECK(tac_policy_demote_to_nvm(&cold));
    CHECK(tac_policy_stage_to_nvm());
}

/* B */
static void test_hits(void)
{
    struct nvm_region *r = region;
    item cold, warm, hot;
    make_item(&cold, LLRU_COLD);
    make_item(&warm, LLRU_WARM);
    make_item(&hot, LLRU_HOT);
    settings.ext_recache_rate = 0;

    tiers(TIER_POLICY_TAC, true, true, r);
    CHECK(tac_policy_nvm_hit_up(&hot));
    CHECK(!tac_policy_nvm_hit_up(&warm));
    CHECK(!tac_policy_nvm_hit_up(&cold));
    CHECK_EQ(tac_policy_ssd_hit(&hot), SSD_UP_BUF);
    CHECK_EQ(tac_policy_ssd_hit(&warm), SSD_UP_BUF);
    CHECK_EQ(tac_policy_ssd_hit(&cold), SSD_UP_NONE);
    /* Without NVM a warm item has nowhere to go up to. */
    tiers(TIER_POLICY_TWOTIER, false, true, r);
    CHECK_EQ(tac_policy_ssd_hit(&hot), SSD_UP_BUF);
    CHECK_EQ(tac_policy_ssd_hit(&warm), SSD_UP_NONE);
    tiers(TIER_POLICY_ANTITUPLE, true, true, r);
    CHECK_EQ(tac_policy_ssd_hit(&hot), SSD_UP_TUPLE);
    CHECK_EQ(tac_policy_ssd_hit(&warm), SSD_UP_TUPLE);
    CHECK_EQ(tac_policy_ssd_hit(&cold), SSD_UP_NONE);
    /* anti2: NVM is memory, so nothing moves from it; everything read
     * from SSD comes into memory. */
    tiers(TIER_POLICY_ANTI2, true, true, r);
    CHECK(!tac_policy_nvm_hit_up(&hot));
    CHECK_EQ(tac_policy_ssd_hit(&cold), SSD_UP_TUPLE);

    /* Every 3rd cold read is a recache; warm and hot ones do not count. */
    tiers(TIER_POLICY_TAC, true, true, r);
    settings.ext_recache_rate = 3;
    int recache = 0, none = 0;
    for (int i = 0; i < 30; i++) {
        CHECK_EQ(tac_policy_ssd_hit(&hot), SSD_UP_BUF);
        enum tac_ssd_up u = tac_policy_ssd_hit(&cold);
        CHECK(u == SSD_UP_RECACHE || u == SSD_UP_NONE);
        recache += u == SSD_UP_RECACHE;
        none += u == SSD_UP_NONE;
    }
    CHECK_EQ(recache, 10);
    CHECK_EQ(none, 20);
    settings.ext_recache_rate = 0;
}

/* C */
static void test_fetch_place(void)
{
    struct nvm_region *r = region;
    item cold, warm, hot;
    make_item(&cold, LLRU_COLD);
    make_item(&warm, LLRU_WARM);
    make_item(&hot, LLRU_HOT);
    enum llru_temp t;
    enum item_tier p[2];

    tiers(TIER_POLICY_TAC, true, true, r);
    tac_policy_fetch_place(&hot, false, &t, p);
    CHECK(t == LLRU_HOT && p[0] == TIER_DRAM && p[1] == TIER_SSD);
    tac_policy_fetch_place(&warm, false, &t, p);
    CHECK(t == LLRU_WARM && p[0] == TIER_NVM && p[1] == TIER_SSD);
    tac_policy_fetch_place(&cold, false, &t, p);
    CHECK(t == LLRU_COLD && p[0] == TIER_SSD && p[1] == TIER_SSD);
    /* A recache goes to DRAM whatever its temperature. */
    tac_policy_fetch_place(&cold, true, &t, p);
    CHECK(t == LLRU_HOT && p[0] == TIER_DRAM);
    /* Without NVM a warm tuple stays. */
    tiers(TIER_POLICY_TWOTIER, false, true, r);
    tac_policy_fetch_place(&warm, false, &t, p);
    CHECK(p[0] == TIER_SSD && p[1] == TIER_SSD);

    /* anti2: memory by chance, NVM with its share by size; DRAM first
     * falls back to NVM. */
    tiers(TIER_POLICY_ANTI2, true, true, r);
    tac.anti2_nvm_share = 0.25;
    int nvm_first = 0, n = 20000;
    for (int i = 0; i < n; i++) {
        tac_policy_fetch_place(&cold, false, &t, p);
        CHECK_EQ(t, LLRU_HOT);
        if (p[0] == TIER_NVM) {
            nvm_first++;
            CHECK_EQ(p[1], TIER_SSD);
        } else {
            CHECK(p[0] == TIER_DRAM && p[1] == TIER_NVM);
        }
    }
    CHECK(nvm_first > n / 4 - n / 40 && nvm_first < n / 4 + n / 40);
    /* anti2 without NVM: all DRAM. */
    tiers(TIER_POLICY_ANTI2, false, true, r);
    tac_policy_fetch_place(&cold, false, &t, p);
    CHECK(p[0] == TIER_DRAM && p[1] == TIER_SSD);
}

/* D */
static void test_admission(void)
{
    struct nvm_region *r = region;
    tiers(TIER_POLICY_TAC, true, true, r);
    tac.obp_pct = 50;
    /* Room in NVM: admitted whatever the churn. */
    advance_clock();
    TAC_ADD(nvm_inserts, 1000);
    CHECK(tac_nvm_admit());

    /* Full, and churn (inserts + removals) above 50 % of lookups over the
     * window: refused, and counted. */
    tac.nvm_free_wm = (size_t)1 << 40;
    advance_clock();
    TAC_ADD(nvm_inserts, 1000);
    TAC_ADD(nvm_removals, 1000);
    TAC_ADD(get_hits_nvm, 100);
    uint64_t refused0 = STATS_GET(&tac.stats, nvm_admission_refused);
    CHECK(!tac_nvm_admit());
    CHECK(!tac_nvm_admit());            /* the same second: the same answer */
    CHECK_EQ(STATS_GET(&tac.stats, nvm_admission_refused), refused0 + 2);

    /* Lookups dominate the window: admitted again. */
    advance_clock();
    TAC_ADD(get_hits_nvm, 1000000);
    CHECK(tac_nvm_admit());

    /* Without an SSD nothing is refused: there is nowhere else to go. */
    advance_clock();
    TAC_ADD(nvm_inserts, 10000000);
    tac.ssd = NULL;
    CHECK(tac_nvm_admit());
    tac.ssd = SSD_PRESENT;
    CHECK(!tac_nvm_admit());
    /* obp off: always. */
    tac.obp_pct = -1;
    CHECK(tac_nvm_admit());
}

int main(int argc, char **argv)
{
    (void)argc;
    (void)argv;
    settings_init();
    tac_config_load();
    llru_init();
    __atomic_store_n(&current_time, 1000, __ATOMIC_RELAXED);
    snprintf(nvm_path, sizeof(nvm_path), "/dev/shm/test-policy-%d.nvm", (int)getpid());
    unlink(nvm_path);
    struct nvm_region *r = region = unit_nvm_up(nvm_path);
    RUN_TEST(test_demote_and_stage);
    RUN_TEST(test_hits);
    RUN_TEST(test_fetch_place);
    RUN_TEST(test_admission);
    tac.nvm = NULL;
    tac.ssd = NULL;
    nvm_close(r);
    unlink(nvm_path);
    fprintf(stderr, "test_policy: ok\n");
    return 0;
}

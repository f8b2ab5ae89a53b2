/*
 * test_tuple.c - the lower-tier tuple format: header from an item, the
 * checksum (which leaves revPtr out, so a meta tuple can move), and the
 * validity check revPtr <-> meta tuple <-> key <-> reference that fetch
 * and defrag rely on.
 */
#include "config.h"

#include "items.h"
#include "memcached.h"
#include "tac/tuple.h"
#include "unit.h"

#define REF 4096

/* Stores key=value as a DRAM item and returns it (one reference held). */
static item *dram_item(const char *key, const char *value)
{
    size_t n = strlen(value);
    item *it = item_alloc(key, strlen(key), 7, 0, n + 2, 0);
    CHECK(it != NULL);
    memcpy(ITEM_data(it), value, n);
    memcpy(ITEM_data(it) + n, "\r\n", 2);
    return it;
}

/* Links a meta tuple standing for `src` at REF in place of src's key. */
static item *linked_meta(item *src)
{
    item *meta = item_alloc_meta(src, TIER_NVM, 1, REF, 0, true);
    CHECK(meta != NULL);
    CHECK((meta->it_flags & ITEM_META) && meta->tier == TIER_NVM);
    CHECK_UEQ(item_meta_ref(meta), REF);
    CHECK_UEQ(meta->nbytes, src->nbytes);
    CHECK_EQ(item_store(meta, STORE_SET, 0, NULL, 0), STORE_STORED);
    return meta;
}

static bool valid(const struct tac_tuple_hdr *h, const char *key,
                  enum item_tier tier, uint64_t ref)
{
    uint32_t hv = item_hash(key, strlen(key));
    item_lock(hv);
    bool ok = tac_tuple_valid(h, key, tier, ref);
    item_unlock(hv);
    return ok;
}

static void test_header_and_checksum(void)
{
    item *it = dram_item("alpha", "some value");
    struct tac_tuple_hdr h;
    tac_tuple_fill(&h, it, (const item *)0x1000);
    CHECK_UEQ(h.nkey, 5);
    CHECK_UEQ(h.nbytes, it->nbytes);
    CHECK_UEQ(h.flags, 7);
    CHECK_UEQ(h.version, TAC_TUPLE_VERSION);
    CHECK_UEQ(h.checksum, tac_tuple_checksum(&h, ITEM_key(it), ITEM_data(it)));

    /* revPtr is outside the checksum; every data byte is inside it. */
    struct tac_tuple_hdr moved = h;
    moved.rev_ptr = 0x2000;
    CHECK_UEQ(tac_tuple_checksum(&moved, ITEM_key(it), ITEM_data(it)), h.checksum);
    ITEM_data(it)[3] ^= 1;
    CHECK(tac_tuple_checksum(&h, ITEM_key(it), ITEM_data(it)) != h.checksum);
    ITEM_data(it)[3] ^= 1;
    struct tac_tuple_hdr other = h;
    other.cas ^= 1;
    CHECK(tac_tuple_checksum(&other, ITEM_key(it), ITEM_data(it)) != h.checksum);
    item_release(it);
}

static void test_validity(void)
{
    item *src = dram_item("beta", "v1");
    item *meta = linked_meta(src);
    struct tac_tuple_hdr h;
    tac_tuple_fill(&h, src, meta);

    CHECK(valid(&h, "beta", TIER_NVM, REF));
    CHECK(!valid(&h, "beta", TIER_NVM, REF + 256));   /* another slot */
    CHECK(!valid(&h, "beta", TIER_SSD, REF));         /* another tier */
    CHECK(!valid(&h, "betb", TIER_NVM, REF));         /* another key */
    struct tac_tuple_hdr orphan = h;
    orphan.rev_ptr = 0;
    CHECK(!valid(&orphan, "beta", TIER_NVM, REF));

    /* A DRAM item with the same key is not a meta tuple. */
    struct tac_tuple_hdr at_dram = h;
    at_dram.rev_ptr = (uint64_t)(uintptr_t)src;
    CHECK(!valid(&at_dram, "beta", TIER_NVM, REF));

    /* Once the key is deleted the tuple is dead. */
    CHECK_EQ(item_delete("beta", 4, 0), DELETE_OK);
    CHECK(!valid(&h, "beta", TIER_NVM, REF));
    item_release(meta);
    item_release(src);
}

static void test_replaced_meta_kills_old_tuple(void)
{
    item *src = dram_item("gamma", "old");
    item *meta = linked_meta(src);
    struct tac_tuple_hdr h;
    tac_tuple_fill(&h, src, meta);
    CHECK(valid(&h, "gamma", TIER_NVM, REF));

    /* A new DRAM version replaces the meta tuple: the tuple is stale. */
    item *fresh = dram_item("gamma", "new");
    CHECK_EQ(item_store(fresh, STORE_SET, 0, NULL, 0), STORE_STORED);
    CHECK(!valid(&h, "gamma", TIER_NVM, REF));
    item_release(fresh);
    item_release(meta);
    item_release(src);
}

int main(int argc, char **argv)
{
    unit_seed_init(argc, argv);
    settings_init();
    settings.maxbytes = 8 * 1024 * 1024;
    settings.partitions = 1;
    items_init();
    RUN_TEST(test_header_and_checksum);
    RUN_TEST(test_validity);
    RUN_TEST(test_replaced_meta_kills_old_tuple);
    fprintf(stderr, "test_tuple: ok\n");
    return 0;
}

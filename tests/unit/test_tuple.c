/*
 * test_tuple.c - the lower-tier tuple format: header from an item with a
 * fresh write sequence, the CRC32C checksum (which covers the whole header
 * and catches every single-byte change), and header sanity checks.
 *
 * Contents, lengths and headers are random: the seed is printed; rerun with
 * UNIT_SEED=<n> or the seed as the first argument.
 */
#include "config.h"

#include "engine/item_lock.h"
#include "engine/items.h"
#include "base/settings.h"
#include "tac/crypt.h"
#include "tac/durable.h"
#include "tac/internal.h"
#include "tac/tuple.h"
#include "unit.h"
#include "base/util.h"

#include <fcntl.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

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

static void test_header_and_checksum(void)
{
    item *it = dram_item("alpha", "some value");
    struct tac_tuple_hdr h;
    uint64_t before = tac_tuple_last_seq();
    tac_tuple_fill(&h, it);
    CHECK_UEQ(h.seq, before + 1);
    CHECK_UEQ(tac_tuple_last_seq(), h.seq);
    CHECK_UEQ(h.nkey, 5);
    CHECK_UEQ(h.nbytes, it->nbytes);
    CHECK_UEQ(h.flags, 7);
    CHECK_UEQ(h.version, TAC_TUPLE_VERSION);
    CHECK_UEQ(h.checksum, tac_tuple_checksum(&h, ITEM_key(it), ITEM_data(it)));

    /* The same item written again is a new write: a higher seq, and
     * so another checksum.  Every data byte is inside it too. */
    struct tac_tuple_hdr again;
    tac_tuple_fill(&again, it);
    CHECK(again.seq > h.seq);
    CHECK(again.checksum != h.checksum);
    struct tac_tuple_hdr reseq = h;
    reseq.seq ^= 1;
    CHECK(tac_tuple_checksum(&reseq, ITEM_key(it), ITEM_data(it)) != h.checksum);
    ITEM_data(it)[3] ^= 1;
    CHECK(tac_tuple_checksum(&h, ITEM_key(it), ITEM_data(it)) != h.checksum);
    ITEM_data(it)[3] ^= 1;
    struct tac_tuple_hdr other = h;
    other.cas ^= 1;
    CHECK(tac_tuple_checksum(&other, ITEM_key(it), ITEM_data(it)) != h.checksum);
    item_release(it);
}

/* What a reader does with a tuple image of `room` bytes, as it lies in a
 * slot or buf: bound the header, then match the checksum.  True when the
 * tuple is refused. */
static bool refused(const unsigned char *img, size_t room)
{
    struct tac_tuple_hdr h;
    memcpy(&h, img, sizeof(h));
    if (!tac_tuple_sane(&h, room))
        return true;
    const char *key = (const char *)img + sizeof(h);
    return tac_tuple_checksum(&h, key, key + h.nkey) != h.checksum;
}

/* Builds a random tuple image of nkey and nbytes bytes, then XORs each
 * byte (the header's lengths too, which the bounds check keeps inside the
 * image) with each pattern in turn.  Returns the
 * changes a reader would accept; *tried counts them all. */
static unsigned long flips_undetected(size_t nkey, size_t nbytes,
                                      unsigned long *tried)
{
    static const unsigned char patterns[] = { 0x01, 0xFF };
    size_t room = tac_tuple_size(nkey, nbytes);
    unsigned char *img = malloc(room);
    CHECK(img != NULL);
    struct tac_tuple_hdr h;
    memset(&h, 0, sizeof(h));
    h.seq = unit_rand();
    h.cas = unit_rand();
    h.nbytes = (uint32_t)nbytes;
    h.flags = (uint32_t)unit_rand();
    h.exptime = (uint32_t)unit_rand();
    h.time = (uint32_t)unit_rand();
    h.nkey = (uint8_t)nkey;
    h.version = TAC_TUPLE_VERSION;
    for (size_t i = sizeof(h); i < room; i++)
        img[i] = (unsigned char)unit_rand();
    img[room - 2] = '\r';
    img[room - 1] = '\n';
    h.checksum = tac_tuple_checksum(&h, (char *)img + sizeof(h),
                                    (char *)img + sizeof(h) + nkey);
    memcpy(img, &h, sizeof(h));
    CHECK(!refused(img, room));

    unsigned long missed = 0;
    for (size_t i = 0; i < room; i++) {
        for (size_t p = 0; p < sizeof(patterns); p++) {
            img[i] ^= patterns[p];
            if (!refused(img, room)) {
                if (missed == 0)
                    fprintf(stderr, "    missed: nkey %zu nbytes %zu byte %zu ^ 0x%02x\n",
                            nkey, nbytes, i, patterns[p]);
                missed++;
            }
            img[i] ^= patterns[p];
            (*tried)++;
        }
    }
    free(img);
    return missed;
}

/* Value lengths 1..64 (every remainder mod 8 several times over: a
 * word-at-a-time sum got the last partial word wrong) and a sample up to
 * 4096, each with keys of 1, 33 and 250 bytes; the value counted with its
 * "\r\n", as the tuple holds it. */
static void test_checksum_catches_every_byte_flip(void)
{
    static const size_t keys[] = { 1, 33, 250 };
    static const size_t sampled[] = { 65, 100, 127, 128, 255, 256, 257, 1000,
                                      1023, 1024, 1029, 2047, 4093, 4094,
                                      4095, 4096 };
    unsigned long missed = 0, tried = 0, cases = 0;
    for (size_t k = 0; k < sizeof(keys) / sizeof(keys[0]); k++) {
        for (size_t v = 1; v <= 64; v++, cases++)
            missed += flips_undetected(keys[k], v + 2, &tried);
        for (size_t i = 0; i < sizeof(sampled) / sizeof(sampled[0]); i++, cases++)
            missed += flips_undetected(keys[k], sampled[i] + 2, &tried);
    }
    fprintf(stderr, "  byte flips: %lu tuple shapes, %lu changes, %lu undetected\n",
            cases, tried, missed);
    CHECK_UEQ(missed, 0);
}

static void test_crc32c(void)
{
    CHECK_UEQ(util_crc32c(0, "123456789", 9), 0xE3069283u);
    CHECK_UEQ(util_crc32c_sw(0, "123456789", 9), 0xE3069283u);
    CHECK_UEQ(util_crc32c(0, "", 0), 0);
    /* The instruction and the table agree at every length and alignment,
     * and chaining equals one pass. */
    unsigned char buf[3000];   /* past a block of 3 x 256 bytes, and of 3 x 64 */
    for (size_t i = 0; i < sizeof(buf); i++)
        buf[i] = (unsigned char)unit_rand();
    for (size_t off = 0; off < 8; off++)
        for (size_t len = 0; len + off <= sizeof(buf); len += 1 + len / 8) {
            uint32_t a = util_crc32c(0, buf + off, len);
            CHECK_UEQ(a, util_crc32c_sw(0, buf + off, len));
            size_t cut = len / 3;
            CHECK_UEQ(util_crc32c(util_crc32c(0, buf + off, cut), buf + off + cut,
                                  len - cut), a);
        }
}

static void test_sane_header(void)
{
    struct tac_tuple_hdr h;
    memset(&h, 0, sizeof(h));
    h.version = TAC_TUPLE_VERSION;
    h.nkey = 10;
    h.nbytes = 100;
    size_t size = tac_tuple_size(10, 100);
    CHECK(tac_tuple_sane(&h, size));
    CHECK(!tac_tuple_sane(&h, size - 1));          /* past the room */
    h.version = TAC_TUPLE_VERSION + 1;
    CHECK(!tac_tuple_sane(&h, size));
    h.version = TAC_TUPLE_VERSION;
    h.nkey = 0;
    CHECK(!tac_tuple_sane(&h, size));
    h.nkey = 251;                                   /* > KEY_MAX_LENGTH */
    CHECK(!tac_tuple_sane(&h, 1 << 20));
    h.nkey = 10;
    h.nbytes = 1;                                   /* no "\r\n" */
    CHECK(!tac_tuple_sane(&h, size));
    h.nbytes = 0xFFFFFFFFu;                         /* past -I, and huge */
    CHECK(!tac_tuple_sane(&h, SIZE_MAX));
    h.nbytes = (uint32_t)settings.item_size_max + 1;
    CHECK(!tac_tuple_sane(&h, SIZE_MAX));

    /* The whole tuple, not just its value, is bounded by -I. */
    size_t max = (size_t)settings.item_size_max;
    h.nbytes = (uint32_t)(max - sizeof(h) - h.nkey);
    CHECK(tac_tuple_sane(&h, SIZE_MAX));
    CHECK(tac_tuple_sane(&h, max));
    CHECK(!tac_tuple_sane(&h, max - 1));
    h.nbytes++;
    CHECK(!tac_tuple_sane(&h, SIZE_MAX));

    /* Every version and key length on its own. */
    h.nbytes = 100;
    for (unsigned v = 0; v < 256; v++) {
        h.version = (uint8_t)v;
        CHECK(tac_tuple_sane(&h, size) == (v == TAC_TUPLE_VERSION));
    }
    h.version = TAC_TUPLE_VERSION;
    for (unsigned k = 0; k < 256; k++) {
        h.nkey = (uint8_t)k;
        CHECK(tac_tuple_sane(&h, SIZE_MAX) == (k >= 1 && k <= KEY_MAX_LENGTH));
    }

    /* Random headers and rooms against the bounds computed in 64 bits. */
    for (int i = 0; i < 200000; i++) {
        unsigned char raw[sizeof(h)];
        for (size_t b = 0; b < sizeof(raw); b++)
            raw[b] = (unsigned char)unit_rand();
        memcpy(&h, raw, sizeof(h));
        if (i % 2)
            h.version = TAC_TUPLE_VERSION;
        if (i % 4 < 2)
            h.nbytes %= (uint32_t)max * 2;
        size_t room = (size_t)(unit_rand() % (2 * max));
        uint64_t want = (uint64_t)sizeof(h) + h.nkey + h.nbytes;
        bool ok = h.version == TAC_TUPLE_VERSION && h.nkey >= 1 &&
                  h.nkey <= KEY_MAX_LENGTH && h.nbytes >= 2 && want <= room &&
                  want <= max;
        CHECK(tac_tuple_sane(&h, room) == ok);
    }
}


/* SipHash-2-4's published vectors: key 00..0f, messages 00..(n-1). */
static void test_siphash_vectors(void)
{
    uint8_t msg[16];
    for (int i = 0; i < 16; i++)
        msg[i] = (uint8_t)i;
    uint64_t k0 = 0x0706050403020100ull, k1 = 0x0f0e0d0c0b0a0908ull;
    CHECK_UEQ(tac_siphash24(k0, k1, msg, 0), 0x726fdb47dd0e0e31ull);
    CHECK_UEQ(tac_siphash24(k0, k1, msg, 1), 0x74f839c593dc67fdull);
    CHECK_UEQ(tac_siphash24(k0, k1, msg, 8), 0x93f5f5799a932462ull);
    CHECK_UEQ(tac_siphash24(k0, k1, msg, 15), 0xa129ca6149be45e5ull);
}

/* Writes a key file of 32 bytes (or their 64 hex digits) and loads it. */
static void load_key(const uint8_t key[32], bool hex)
{
    char path[64];
    snprintf(path, sizeof(path), "/tmp/test_tuple_key.%ld", (long)getpid());
    int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0600);
    CHECK(fd >= 0);
    if (hex) {
        char buf[66];
        for (int i = 0; i < 32; i++)
            snprintf(buf + 2 * i, 3, "%02x", key[i]);
        buf[64] = '\n';
        CHECK(write(fd, buf, 65) == 65);
    } else {
        CHECK(write(fd, key, 32) == 32);
    }
    close(fd);
    CHECK(tac_crypt_load(path));
    unlink(path);
}

/* The journal's key hash picks a bucket by its low bits, and a bucket must
 * lie within the key's item lock stripe (tac/durable/journal.c, bucket_of): with a
 * tier key too, whose keyed hash must still differ from the plain one. */
static void journal_hash_keeps_stripe(bool keyed)
{
    char key[64];
    unsigned differs = 0;
    for (int i = 0; i < 2000; i++) {
        int n = snprintf(key, sizeof(key), "usertable-user%d-%u", i, (unsigned)unit_rand());
        uint64_t h = tac_key_hash64(key, (size_t)n);
        uint32_t hv = item_hash(key, (size_t)n);
        CHECK_UEQ(h & ITEM_LOCK_MASK, hv & ITEM_LOCK_MASK);
        CHECK(h != 0);
        if ((uint32_t)h != hv)
            differs++;
    }
    if (keyed)
        CHECK(differs > 1900);
    else
        CHECK_UEQ(differs, 0);
}

/* A sealed tuple: the image hides key and value, opens to them, and any
 * changed byte (header, ciphertext, nonce or tag) fails its tag. */
static void test_sealed_image_and_open(void)
{
    uint8_t key[32];
    for (int i = 0; i < 32; i++)
        key[i] = (uint8_t)unit_rand();
    load_key(key, unit_rand() & 1);
    CHECK(tac_crypt_on());
    tac_tuple_set_sealed(true);
    CHECK_UEQ(tac_tuple_size(5, 10), sizeof(struct tac_tuple_hdr) + 15 + TAC_SEAL_BYTES);

    item *it = dram_item("secret-key-0123456789", "a value nobody may read here");
    struct tac_tuple_hdr h;
    tac_tuple_fill(&h, it);
    CHECK_UEQ(h.version, TAC_TUPLE_VERSION_SEALED);
    CHECK_UEQ(h.checksum, 0);
    struct iovec iov[3];
    int n = tac_tuple_image(&h, ITEM_key(it), ITEM_data(it), iov);
    CHECK_UEQ(n, 2);
    size_t len = tac_tuple_size(h.nkey, h.nbytes);
    char *img = malloc(len);
    CHECK(img != NULL);
    memcpy(img, iov[0].iov_base, iov[0].iov_len);
    memcpy(img + iov[0].iov_len, iov[1].iov_base, iov[1].iov_len);
    CHECK_UEQ(iov[0].iov_len + iov[1].iov_len, len);
    CHECK(tac_tuple_sane((const struct tac_tuple_hdr *)img, len));
    CHECK(memmem(img, len, "secret-key", 10) == NULL);
    CHECK(memmem(img, len, "nobody", 6) == NULL);
    journal_hash_keeps_stripe(true);

    const char *clear;
    CHECK(tac_tuple_open_scratch(&h, img + sizeof(h), &clear) == TUPLE_OK);
    CHECK(memcmp(clear, ITEM_key(it), it->nkey) == 0);
    CHECK(memcmp(clear + it->nkey, ITEM_data(it), it->nbytes) == 0);

    /* Every byte after the header, and every header byte (the
     * authenticated data), is covered. */
    for (size_t i = 0; i < len; i++) {
        char *bad = malloc(len);
        CHECK(bad != NULL);
        memcpy(bad, img, len);
        bad[i] ^= (char)(1u << (unit_rand() % 8));
        struct tac_tuple_hdr bh;
        memcpy(&bh, bad, sizeof(bh));
        if (tac_tuple_sane(&bh, len))
            CHECK(tac_tuple_open_scratch(&bh, bad + sizeof(bh), &clear) == TUPLE_BAD_TAG);
        free(bad);
    }

    /* The same item sealed again: another nonce, another ciphertext. */
    struct tac_tuple_hdr h2 = h;
    n = tac_tuple_image(&h2, ITEM_key(it), ITEM_data(it), iov);
    const uint8_t *n1 = tac_crypt_nonce_of(img + sizeof(h), (size_t)h.nkey + h.nbytes);
    const uint8_t *n2 = tac_crypt_nonce_of(iov[1].iov_base, (size_t)h.nkey + h.nbytes);
    CHECK(memcmp(n1, n2, TAC_SEAL_NONCE) != 0);
    CHECK(memcmp(iov[1].iov_base, img + sizeof(h), (size_t)h.nkey + h.nbytes) != 0);

    /* The key alone, as a fetch's lookup hint: GCM's own key stream. */
    char kb[KEY_MAX_LENGTH];
    CHECK(memcmp(tac_tuple_key_hint(&h, img + sizeof(h), kb), ITEM_key(it), it->nkey) == 0);

    /* Opened in place (a private copy). */
    char *b = img + sizeof(h);
    CHECK(tac_tuple_open(&h, b, b, b + h.nkey) == TUPLE_OK);
    CHECK(memcmp(b, ITEM_key(it), it->nkey) == 0);
    free(img);
    item_release(it);
    tac_tuple_set_sealed(false);
}

static void test_journal_hash_plain(void)
{
    CHECK(!tac_crypt_on());
    journal_hash_keeps_stripe(false);
}

int main(int argc, char **argv)
{
    unit_seed_init(argc, argv);
    settings_init();
    settings.maxbytes = 8 * 1024 * 1024;
    settings.partitions = 1;
    items_init();
    tac_config_load();
    RUN_TEST(test_header_and_checksum);
    RUN_TEST(test_crc32c);
    RUN_TEST(test_sane_header);
    RUN_TEST(test_checksum_catches_every_byte_flip);
    RUN_TEST(test_siphash_vectors);
    RUN_TEST(test_journal_hash_plain);
    RUN_TEST(test_sealed_image_and_open);      /* last: it loads a key */
    fprintf(stderr, "test_tuple: ok\n");
    return 0;
}

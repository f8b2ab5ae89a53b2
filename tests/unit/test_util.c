/*
 * test_util.c - unit tests for util.c (number parsing with memcached's
 * acceptance rules, the size parser, base64) and the text protocol tokenizer.
 *
 * Randomized base64 round trips print their seed (unit_seed_init); rerun
 * with UNIT_SEED=<n> to replay.
 */
#include <errno.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "base/media_hdr.h"
#include "base/util.h"
#include "unit.h"

/* proto_text.h: tokens per tokenizer pass. */
#define PT_MAX_TOKENS 23

static void test_strtoull(void)
{
    uint64_t v = 7;
    CHECK(safe_strtoull("0", &v) && v == 0);
    CHECK(safe_strtoull("18446744073709551615", &v));
    CHECK_UEQ(v, UINT64_MAX);
    CHECK(!safe_strtoull("18446744073709551616", &v));   /* overflow */
    CHECK(!safe_strtoull("-1", &v));
    CHECK(!safe_strtoull("-18446744073709551615", &v));
    CHECK(safe_strtoull("+5", &v) && v == 5);
    CHECK(safe_strtoull("12 ", &v) && v == 12);           /* ends at space */
    CHECK(!safe_strtoull("12x", &v));
    CHECK(!safe_strtoull("", &v));
    CHECK(!safe_strtoull("x", &v));
    CHECK(!safe_strtoull(" ", &v));
    CHECK(!safe_strtoull("0x10", &v));
    CHECK(safe_strtoull("007", &v) && v == 7);
}

static void test_strtoll(void)
{
    int64_t v;
    CHECK(safe_strtoll("-9223372036854775808", &v) && v == INT64_MIN);
    CHECK(safe_strtoll("9223372036854775807", &v) && v == INT64_MAX);
    CHECK(!safe_strtoll("9223372036854775808", &v));
    CHECK(!safe_strtoll("1.5", &v));
    CHECK(!safe_strtoll("-", &v));
    CHECK(safe_strtoll("-42", &v) && v == -42);
}

static void test_strtoul_strtol(void)
{
    uint32_t u;
    int32_t l;
    CHECK(safe_strtoul("4294967295", &u) && u == UINT32_MAX);
    /* memcached 1.6.18 truncates to 32 bits on 64-bit hosts. */
    CHECK(safe_strtoul("4294967296", &u) && u == 0);
    CHECK(safe_strtoul("4294967297", &u) && u == 1);
    CHECK(!safe_strtoul("-1", &u));
    CHECK(safe_strtoul("-0", &u) && u == 0);
    CHECK(!safe_strtoul("1a", &u));
    CHECK(safe_strtol("-1", &l) && l == -1);
    CHECK(safe_strtol("2147483647", &l) && l == INT32_MAX);
    CHECK(safe_strtol("2147483648", &l) && l == INT32_MIN);
    CHECK(safe_strtol("4294967297", &l) && l == 1);
    CHECK(!safe_strtol("abc", &l) && l == 0);
    CHECK(!safe_strtol("99999999999999999999", &l));
}

/* Plain digit tokens of every length from 1 to 21, each with each end
 * the parsers accept or refuse, give exactly what strtoull/strtoll give:
 * the short ones take a path of their own (util.c, plain_digits). */
static void test_digit_lengths(void)
{
    static const char *const ends[] = { "", " ", "\t", "\r", "x", "-", "." };
    for (int len = 1; len <= 21; len++) {
        for (int round = 0; round < 50; round++) {
            char tok[40];
            for (int i = 0; i < len; i++)
                tok[i] = (char)('0' + (round == 0 ? 9 : unit_rand() % 10));
            for (size_t e = 0; e < sizeof(ends) / sizeof(ends[0]); e++) {
                strcpy(tok + len, ends[e]);
                bool end_ok = ends[e][0] == '\0' || ends[e][0] == ' ' ||
                              ends[e][0] == '\t' || ends[e][0] == '\r';
                char *end;
                errno = 0;
                unsigned long long ru = strtoull(tok, &end, 10);
                bool ok_u = errno != ERANGE && end_ok;
                uint64_t u = 0;
                CHECK(safe_strtoull(tok, &u) == ok_u);
                if (ok_u)
                    CHECK(u == ru);
                errno = 0;
                long long rl = strtoll(tok, &end, 10);
                bool ok_l = errno != ERANGE && end_ok;
                int64_t l = 0;
                CHECK(safe_strtoll(tok, &l) == ok_l);
                if (ok_l)
                    CHECK(l == rl);
            }
        }
    }
}

static void check_b64(const char *plain, const char *enc)
{
    unsigned char buf[128];
    size_t n = base64_encode((const unsigned char *)plain, strlen(plain),
                             buf, sizeof(buf));
    CHECK_EQ(n, strlen(enc));
    CHECK_MEM_EQ(buf, enc, n);
    size_t m = base64_decode(buf, n, buf, sizeof(buf));
    CHECK_EQ(m, strlen(plain));
    CHECK_MEM_EQ(buf, plain, m);
}

static void test_parse_size(void)
{
    uint64_t v = 7;
    CHECK(util_parse_size("0", &v) && v == 0);
    CHECK(util_parse_size("4096", &v) && v == 4096);
    CHECK(util_parse_size("64k", &v) && v == 64 << 10);
    CHECK(util_parse_size("64K", &v) && v == 64 << 10);
    CHECK(util_parse_size("1m", &v) && v == 1 << 20);
    CHECK(util_parse_size("2GB", &v));
    CHECK_UEQ(v, 2ULL << 30);
    CHECK(util_parse_size("3t", &v));
    CHECK_UEQ(v, 3ULL << 40);
    CHECK(util_parse_size("100b", &v) && v == 100);
    CHECK(util_parse_size("1.5m", &v) && v == 3 << 19);
    CHECK(util_parse_size("0.25k", &v) && v == 256);
    /* Past the sixth fraction digit nothing counts. */
    CHECK(util_parse_size("1.0000009k", &v) && v == 1024);
    CHECK(util_parse_size("18446744073709551615", &v));
    CHECK_UEQ(v, UINT64_MAX);
    CHECK(util_parse_size("16777215t", &v));
    CHECK_UEQ(v, 16777215ULL << 40);
    CHECK(util_parse_size("16777215.999999t", &v));       /* just below 2^64 */
    CHECK_UEQ(v, (16777215ULL << 40) + (999999ULL << 40) / 1000000);

    v = 7;
    CHECK(!util_parse_size("18446744073709551616", &v));     /* overflow */
    CHECK(!util_parse_size("16777216t", &v));                 /* 2^64 */
    CHECK(!util_parse_size("17179869184g", &v));
    CHECK(!util_parse_size("", &v));
    CHECK(!util_parse_size("k", &v));
    CHECK(!util_parse_size("-1", &v));
    CHECK(!util_parse_size("+1", &v));
    CHECK(!util_parse_size(" 1", &v));
    CHECK(!util_parse_size("1 ", &v));
    CHECK(!util_parse_size("1.5", &v));                       /* half a byte */
    CHECK(!util_parse_size("1.k", &v));
    CHECK(!util_parse_size(".5k", &v));
    CHECK(!util_parse_size("1x", &v));
    CHECK(!util_parse_size("1kk", &v));
    CHECK(!util_parse_size("1bk", &v));
    CHECK(!util_parse_size("1e3", &v));
    CHECK(!util_parse_size("0x10", &v));
    CHECK(v == 7);                                            /* untouched */
}

static void test_base64_vectors(void)
{
    /* RFC 4648 section 10. */
    check_b64("f", "Zg==");
    check_b64("fo", "Zm8=");
    check_b64("foo", "Zm9v");
    check_b64("foob", "Zm9vYg==");
    check_b64("fooba", "Zm9vYmE=");
    check_b64("foobar", "Zm9vYmFy");
}

static void test_base64_invalid(void)
{
    unsigned char out[64];
    static const char *const bad[] = {
        "", "Z", "Zm", "Zm8", "Zm9vYg", "Zm9vYg=", "Zm9v*g==", "====",
        "Zg=a", "Zm9=vYmFy", "Zm9v\nYg==", "Z===", "Zh==", "Zm9=",
    };
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        size_t n = base64_decode((const unsigned char *)bad[i], strlen(bad[i]),
                                 out, sizeof(out));
        if (n != 0)
            fprintf(stderr, "    accepted \"%s\"\n", bad[i]);
        CHECK_EQ(n, 0);
    }
    /* Destination too small on both sides. */
    CHECK_EQ(base64_decode((const unsigned char *)"Zm9v", 4, out, 2), 0);
    CHECK_EQ(base64_encode((const unsigned char *)"foo", 3, out, 3), 0);
}

static void test_base64_random(void)
{
    unsigned char src[300], enc[400], dec[300];
    for (int round = 0; round < 2000; round++) {
        size_t len = 1 + unit_rand() % 250;
        for (size_t i = 0; i < len; i++)
            src[i] = (unsigned char)unit_rand();
        size_t n = base64_encode(src, len, enc, sizeof(enc));
        CHECK_EQ(n, BASE64_ENCODED_LEN(len));
        size_t m = base64_decode(enc, n, dec, sizeof(dec));
        CHECK_EQ(m, len);
        CHECK_MEM_EQ(dec, src, len);
        /* In place, as the meta parser does it. */
        m = base64_decode(enc, n, enc, n);
        CHECK_EQ(m, len);
        CHECK_MEM_EQ(enc, src, len);
    }
}

static void test_itoa(void)
{
    char buf[32];
    char *e = util_u64toa(UINT64_MAX, buf);
    *e = '\0';
    CHECK_STR_EQ(buf, "18446744073709551615");
    e = util_u64toa(0, buf);
    *e = '\0';
    CHECK_STR_EQ(buf, "0");
    e = util_i64toa(INT64_MIN, buf);
    *e = '\0';
    CHECK_STR_EQ(buf, "-9223372036854775808");
    e = util_i64toa(-1, buf);
    *e = '\0';
    CHECK_STR_EQ(buf, "-1");
}

static void test_tokenizer(void)
{
    struct util_token tok[PT_MAX_TOKENS];
    char *rest;
    char l1[] = "  get  a   b ";
    size_t n = util_tokenize(l1, tok, PT_MAX_TOKENS, &rest);
    CHECK_EQ(n, 3);
    CHECK(rest == NULL);
    CHECK_STR_EQ(tok[0].value, "get");
    CHECK_STR_EQ(tok[1].value, "a");
    CHECK_STR_EQ(tok[2].value, "b");
    CHECK_EQ(tok[2].length, 1);

    char l2[] = "";
    CHECK_EQ(util_tokenize(l2, tok, PT_MAX_TOKENS, &rest), 0);
    char l3[] = "     ";
    CHECK_EQ(util_tokenize(l3, tok, PT_MAX_TOKENS, &rest), 0);

    /* Tabs are not separators (memcached splits on ' ' only). */
    char l4[] = "get\ta";
    CHECK_EQ(util_tokenize(l4, tok, PT_MAX_TOKENS, &rest), 1);
    CHECK_EQ(tok[0].length, 5);

    /* More tokens than fit: the rest is handed back untouched. */
    char l5[200];
    strcpy(l5, "get");
    for (int i = 0; i < 30; i++)
        strcat(l5, " k");
    n = util_tokenize(l5, tok, PT_MAX_TOKENS, &rest);
    CHECK_EQ(n, PT_MAX_TOKENS);
    CHECK(rest != NULL);
    size_t more = util_tokenize(rest, tok, PT_MAX_TOKENS, &rest);
    CHECK_EQ(more, 31 - PT_MAX_TOKENS);
    CHECK(rest == NULL);

    /* Exactly max tokens: no rest. */
    char l6[200] = "a";
    for (int i = 1; i < PT_MAX_TOKENS; i++)
        strcat(l6, " b");
    CHECK_EQ(util_tokenize(l6, tok, PT_MAX_TOKENS, &rest), PT_MAX_TOKENS);
    CHECK(rest == NULL);

    /* Binary garbage with high bytes stays inside tokens. */
    char l7[] = "\xff\xfe \x01\x02";
    CHECK_EQ(util_tokenize(l7, tok, PT_MAX_TOKENS, &rest), 2);
    CHECK_EQ(tok[1].length, 2);
}

/* base/media_hdr.c: the headers' prefix, sum and the pick of the best copy. */
struct test_hdr {
    char magic[8];
    uint32_t version, header_size;
    uint64_t generation;
    uint32_t checksum, pad;
};
MEDIA_PREFIX_CHECK(struct test_hdr);

static bool test_hdr_ok(const void *h)
{
    const struct test_hdr *t = h;
    return t->checksum == media_crc(t, offsetof(struct test_hdr, checksum));
}

static uint64_t test_hdr_gen(const void *h)
{
    return ((const struct test_hdr *)h)->generation;
}

static void test_hdr_make(struct test_hdr *h, uint32_t version, uint64_t gen)
{
    memset(h, 0, sizeof(*h));
    media_stamp(h, "TESTHDR\n", version, sizeof(*h));
    h->generation = gen;
    h->checksum = media_crc(h, offsetof(struct test_hdr, checksum));
}

static const struct media_format test_format = {
    .magic = "TESTHDR\n", .version = 3, .header_size = sizeof(struct test_hdr),
    .copies = 2, .stride = sizeof(struct test_hdr), .sum_ok = test_hdr_ok,
    .generation = test_hdr_gen, .what = "test tier",
};

static void test_media_headers(void)
{
    struct test_hdr copies[2];
    struct media_pick p;
    const unsigned char *area = (const unsigned char *)copies;
    test_hdr_make(&copies[0], 3, 7);
    test_hdr_make(&copies[1], 3, 8);
    CHECK_MEM_EQ(copies[0].magic, "TESTHDR\n", 8);
    CHECK_EQ(media_classify(&copies[0], "TESTHDR\n", 3, sizeof(struct test_hdr)), MEDIA_OURS);
    CHECK_EQ(media_classify(&copies[0], "TESTHDR\n", 4, sizeof(struct test_hdr)), MEDIA_OTHER_VERSION);
    CHECK_EQ(media_classify(&copies[0], "TESTHDR\n", 3, 8), MEDIA_OTHER_VERSION);
    CHECK_EQ(media_classify(&copies[0], "OTHERHD\n", 3, sizeof(struct test_hdr)), MEDIA_FOREIGN);
    CHECK_UEQ(media_crc("123456789", 9), 0xe3069283u);    /* CRC32C check value */
    /* The newer generation wins; a damaged newer one leaves the older. */
    media_pick_copy(&test_format, area, &p);
    CHECK(p.best == &copies[1] && p.magic_seen && p.other_version == 0);
    copies[1].generation = 9;           /* no longer matches its checksum */
    media_pick_copy(&test_format, area, &p);
    CHECK(p.best == &copies[0]);
    copies[0].checksum ^= 1;
    media_pick_copy(&test_format, area, &p);
    CHECK(p.best == NULL && p.magic_seen && p.other_version == 0);
    char why[160];
    media_refusal(why, sizeof(why), &test_format, &p);
    CHECK_STR_EQ(why, "holds a tac-memcached test tier whose header is damaged (no copy passes its checksum)");
    /* Another version is told apart from damage, and from a foreign file. */
    test_hdr_make(&copies[0], 2, 1);
    media_pick_copy(&test_format, area, &p);
    CHECK(p.best == NULL && p.magic_seen && p.other_version == 2);
    media_refusal(why, sizeof(why), &test_format, &p);
    CHECK_STR_EQ(why, "holds a tac-memcached test tier of format version 2 (this build reads version 3)");
    memset(copies, 0x5a, sizeof(copies));
    media_pick_copy(&test_format, area, &p);
    CHECK(p.best == NULL && !p.magic_seen && p.other_version == 0);
}

int main(int argc, char **argv)
{
    unit_seed_init(argc, argv);
    RUN_TEST(test_strtoull);
    RUN_TEST(test_strtoll);
    RUN_TEST(test_strtoul_strtol);
    RUN_TEST(test_digit_lengths);
    RUN_TEST(test_parse_size);
    RUN_TEST(test_base64_vectors);
    RUN_TEST(test_base64_invalid);
    RUN_TEST(test_base64_random);
    RUN_TEST(test_itoa);
    RUN_TEST(test_tokenizer);
    RUN_TEST(test_media_headers);
    fprintf(stderr, "test_util: ok\n");
    return 0;
}

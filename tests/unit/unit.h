/*
 * unit.h - tiny assertion helpers for the C unit tests.
 *
 * A failed check prints file:line, the expression and (for the _EQ forms)
 * both values, then the random seed if the test used one, and exits 1.
 * A test that uses randomness calls unit_seed_init(argc, argv) first: the
 * seed comes from argv[1], else $UNIT_SEED, else the clock, and is always
 * printed so a failure can be replayed.
 */
#ifndef UNIT_H
#define UNIT_H

#include <inttypes.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

static uint64_t unit_seed_value;
static int unit_seed_set;
static uint64_t unit_rng_state = 0x9e3779b97f4a7c15ULL;

static inline void unit_fail(void)
{
    if (unit_seed_set)
        fprintf(stderr, "  (seed %" PRIu64 "; rerun with UNIT_SEED=%" PRIu64
                ")\n", unit_seed_value, unit_seed_value);
    exit(1);
}

static inline void unit_seed_init(int argc, char **argv)
{
    const char *s = argc > 1 ? argv[1] : getenv("UNIT_SEED");
    if (s != NULL && *s != '\0')
        unit_seed_value = strtoull(s, NULL, 10);
    else
        unit_seed_value = (uint64_t)time(NULL) ^ ((uint64_t)getpid() << 16);
    unit_seed_set = 1;
    unit_rng_state = unit_seed_value * 0x9e3779b97f4a7c15ULL + 1;
    fprintf(stderr, "seed: %" PRIu64 "\n", unit_seed_value);
}

/* xorshift64*; per-thread streams can use unit_rand_r(). */
static inline uint64_t unit_rand_r(uint64_t *state)
{
    uint64_t x = *state;
    x ^= x >> 12;
    x ^= x << 25;
    x ^= x >> 27;
    *state = x;
    return x * 0x2545f4914f6cdd1dULL;
}

static inline uint64_t unit_rand(void)
{
    return unit_rand_r(&unit_rng_state);
}

#define CHECK(cond) \
    do { \
        if (!(cond)) { \
            fprintf(stderr, "%s:%d: CHECK failed: %s\n", __FILE__, __LINE__, \
                    #cond); \
            unit_fail(); \
        } \
    } while (0)

#define CHECK_EQ(a, b) \
    do { \
        long long unit_a_ = (long long)(a), unit_b_ = (long long)(b); \
        if (unit_a_ != unit_b_) { \
            fprintf(stderr, "%s:%d: CHECK_EQ failed: %s == %s (%lld vs %lld)\n", \
                    __FILE__, __LINE__, #a, #b, unit_a_, unit_b_); \
            unit_fail(); \
        } \
    } while (0)

#define CHECK_UEQ(a, b) \
    do { \
        unsigned long long unit_a_ = (unsigned long long)(a); \
        unsigned long long unit_b_ = (unsigned long long)(b); \
        if (unit_a_ != unit_b_) { \
            fprintf(stderr, "%s:%d: CHECK_UEQ failed: %s == %s (%llu vs %llu)\n", \
                    __FILE__, __LINE__, #a, #b, unit_a_, unit_b_); \
            unit_fail(); \
        } \
    } while (0)

#define CHECK_STR_EQ(a, b) \
    do { \
        const char *unit_a_ = (a), *unit_b_ = (b); \
        if (unit_a_ == NULL || unit_b_ == NULL || strcmp(unit_a_, unit_b_) != 0) { \
            fprintf(stderr, "%s:%d: CHECK_STR_EQ failed: %s == %s (\"%s\" vs \"%s\")\n", \
                    __FILE__, __LINE__, #a, #b, unit_a_ ? unit_a_ : "(null)", \
                    unit_b_ ? unit_b_ : "(null)"); \
            unit_fail(); \
        } \
    } while (0)

#define CHECK_MEM_EQ(a, b, n) \
    do { \
        if (memcmp((a), (b), (n)) != 0) { \
            fprintf(stderr, "%s:%d: CHECK_MEM_EQ failed: %s == %s (%zu bytes)\n", \
                    __FILE__, __LINE__, #a, #b, (size_t)(n)); \
            unit_fail(); \
        } \
    } while (0)

/* Runs one test function and names it on stderr. */
#define RUN_TEST(fn) \
    do { \
        fprintf(stderr, "  %s\n", #fn); \
        fn(); \
    } while (0)

#endif

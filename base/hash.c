/*
 * hash.c - the key hash (see hash.h).
 *
 * Design: the key is consumed in 8-byte little-endian words.  Each word is
 * multiplied by an odd constant, rotated and folded into a 64-bit state
 * that is itself rotated and multiplied, so bytes at different positions
 * land differently.  The 1-7 trailing bytes form one last short word mixed
 * with the length.  A final avalanche (xor-shift / multiply, three rounds)
 * spreads the state before the upper and lower halves are folded into 32
 * bits.  Threads: pure function, callable from anywhere.
 */
#include "config.h"

#include <string.h>

#include "base/hash.h"

#define HK_MUL1 0x9fb21c651e98df25ULL
#define HK_MUL2 0xc2b2ae3d27d4eb4fULL
#define HK_SEED 0x2545f4914f6cdd1dULL

static inline uint64_t rotl64(uint64_t x, unsigned r)
{
    return (x << r) | (x >> (64 - r));
}

static inline uint64_t load_le64(const unsigned char *p)
{
    uint64_t v = 0;
    for (int i = 7; i >= 0; i--)
        v = (v << 8) | p[i];
    return v;
}

static inline uint64_t avalanche64(uint64_t h)
{
    h ^= h >> 31;
    h *= HK_MUL1;
    h ^= h >> 29;
    h *= HK_MUL2;
    h ^= h >> 32;
    return h;
}

uint32_t hash_key(const void *key, size_t len)
{
    const unsigned char *p = key;
    uint64_t h = HK_SEED ^ ((uint64_t)len * HK_MUL2);
    size_t n = len;

    while (n >= 8) {
        uint64_t w = load_le64(p) * HK_MUL1;
        w = rotl64(w, 27) * HK_MUL2;
        h = rotl64(h ^ w, 31) * 5 + 0x52dce729;
        p += 8;
        n -= 8;
    }
    if (n > 0) {
        uint64_t w = 0;
        for (size_t i = 0; i < n; i++)
            w |= (uint64_t)p[i] << (8 * i);
        w = (w ^ ((uint64_t)n << 56)) * HK_MUL2;
        h ^= rotl64(w, 33) * HK_MUL1;
    }
    h = avalanche64(h);
    return (uint32_t)(h ^ (h >> 32));
}

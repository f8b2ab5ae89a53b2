/*
 * util.c - number parsing, base64 and integer formatting for the protocol
 * parsers, and the protocol line tokenizer (see util.h for the contracts).
 *
 * Number parsing follows memcached 1.6.18 byte for byte, including its
 * 32-bit truncation quirk; the parsers answer exactly what stock memcached
 * answers for the same token.  Sizes on the command line (util_parse_size)
 * are this server's own format.  Base64 is a straightforward table codec,
 * strict on input.  No state; any thread.
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE             /* SEEK_DATA */
#endif
#include "base/util.h"

#include <ctype.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <sys/stat.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#if defined(__x86_64__)
#include <nmmintrin.h>
#endif

/* A number token must end at the NUL or at whitespace. */
static bool num_end_ok(const char *str, const char *end)
{
    return end != str && (*end == '\0' || isspace((unsigned char)*end));
}

/* The token nearly every request carries: 1 to 18 plain digits, then the
 * NUL or whitespace.  18 digits cannot overflow 63 bits, so this answers
 * exactly what the strto* path answers for it, without the call. */
static inline bool plain_digits(const char *str, uint64_t *out)
{
    uint64_t v = 0;
    size_t i = 0;
    for (; (unsigned)(str[i] - '0') < 10u; i++) {
        if (i == 18)
            return false;
        v = v * 10 + (unsigned)(str[i] - '0');
    }
    if (i == 0 || !(str[i] == '\0' || isspace((unsigned char)str[i])))
        return false;
    *out = v;
    return true;
}

bool safe_strtoull(const char *str, uint64_t *out)
{
    if (plain_digits(str, out))
        return true;
    char *end;
    errno = 0;
    unsigned long long v = strtoull(str, &end, 10);
    if (errno == ERANGE || !num_end_ok(str, end))
        return false;
    /* strtoull negates "-5" modulo 2^64; any negative number is refused
     * (memcached misses "-18446744073709551615", which wraps to 1). */
    if (v != 0 && memchr(str, '-', (size_t)(end - str)) != NULL)
        return false;
    *out = (uint64_t)v;
    return true;
}

bool safe_strtoll(const char *str, int64_t *out)
{
    uint64_t u;
    if (plain_digits(str, &u)) {
        *out = (int64_t)u;
        return true;
    }
    char *end;
    errno = 0;
    *out = 0;
    long long v = strtoll(str, &end, 10);
    if (errno == ERANGE || !num_end_ok(str, end))
        return false;
    *out = (int64_t)v;
    return true;
}

bool safe_strtoul(const char *str, uint32_t *out)
{
    uint64_t v;
    if (!safe_strtoull(str, &v))
        return false;
    *out = (uint32_t)v;     /* memcached 1.6.18 truncates on LP64 */
    return true;
}

bool safe_strtol(const char *str, int32_t *out)
{
    int64_t v;
    *out = 0;
    if (!safe_strtoll(str, &v))
        return false;
    *out = (int32_t)(uint32_t)(uint64_t)v;  /* same truncation */
    return true;
}

/* Fraction digits kept: 10^6 times the largest unit, 2^40, still fits in
 * 64 bits, so the fraction needs no overflow check of its own. */
#define SIZE_FRAC_DIGITS 6

bool util_parse_size(const char *str, uint64_t *out)
{
    const char *p = str;
    uint64_t whole = 0;
    if (!isdigit((unsigned char)*p))
        return false;
    for (; isdigit((unsigned char)*p); p++) {
        unsigned d = (unsigned)(*p - '0');
        if (whole > (UINT64_MAX - d) / 10)
            return false;
        whole = whole * 10 + d;
    }
    uint64_t frac = 0, scale = 1;
    bool has_frac = *p == '.';
    if (has_frac) {
        p++;
        if (!isdigit((unsigned char)*p))
            return false;
        for (int n = 0; isdigit((unsigned char)*p); p++, n++) {
            if (n < SIZE_FRAC_DIGITS) {
                frac = frac * 10 + (uint64_t)(*p - '0');
                scale *= 10;
            }
        }
    }
    unsigned shift = 0;
    switch (tolower((unsigned char)*p)) {
    case 'k': shift = 10; break;
    case 'm': shift = 20; break;
    case 'g': shift = 30; break;
    case 't': shift = 40; break;
    default: break;
    }
    if (shift != 0)
        p++;
    if (tolower((unsigned char)*p) == 'b')
        p++;
    if (*p != '\0' || (has_frac && shift == 0))
        return false;
    if (whole > UINT64_MAX >> shift)
        return false;
    uint64_t v = whole << shift;
    uint64_t f = (frac << shift) / scale;
    if (v > UINT64_MAX - f)
        return false;
    *out = v + f;
    return true;
}

static const char b64_alphabet[] =
    "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";

size_t base64_encode(const unsigned char *src, size_t srclen,
                     unsigned char *dst, size_t dstlen)
{
    size_t need = BASE64_ENCODED_LEN(srclen);
    if (need > dstlen)
        return 0;
    size_t i = 0, o = 0;
    for (; i + 3 <= srclen; i += 3) {
        uint32_t v = (uint32_t)src[i] << 16 | (uint32_t)src[i + 1] << 8 |
                     src[i + 2];
        dst[o++] = b64_alphabet[v >> 18];
        dst[o++] = b64_alphabet[(v >> 12) & 63];
        dst[o++] = b64_alphabet[(v >> 6) & 63];
        dst[o++] = b64_alphabet[v & 63];
    }
    if (i < srclen) {
        uint32_t v = (uint32_t)src[i] << 16;
        if (i + 1 < srclen)
            v |= (uint32_t)src[i + 1] << 8;
        dst[o++] = b64_alphabet[v >> 18];
        dst[o++] = b64_alphabet[(v >> 12) & 63];
        dst[o++] = i + 1 < srclen ? b64_alphabet[(v >> 6) & 63] : '=';
        dst[o++] = '=';
    }
    return o;
}

/* 0..63 for an alphabet character, -1 otherwise. */
static int b64_value(unsigned char ch)
{
    if (ch >= 'A' && ch <= 'Z')
        return ch - 'A';
    if (ch >= 'a' && ch <= 'z')
        return ch - 'a' + 26;
    if (ch >= '0' && ch <= '9')
        return ch - '0' + 52;
    if (ch == '+')
        return 62;
    if (ch == '/')
        return 63;
    return -1;
}

size_t base64_decode(const unsigned char *src, size_t srclen,
                     unsigned char *dst, size_t dstlen)
{
    if (srclen == 0 || srclen % 4 != 0)
        return 0;
    size_t pad = 0;
    if (src[srclen - 1] == '=')
        pad = src[srclen - 2] == '=' ? 2 : 1;
    size_t outlen = srclen / 4 * 3 - pad;
    if (outlen > dstlen || outlen == 0)
        return 0;
    size_t o = 0;
    for (size_t i = 0; i < srclen; i += 4) {
        bool last = i + 4 == srclen;
        int q[4];
        for (int k = 0; k < 4; k++) {
            bool is_pad = last && k >= 4 - (int)pad;
            q[k] = is_pad ? 0 : b64_value(src[i + k]);
            if (q[k] < 0)
                return 0;
        }
        uint32_t v = (uint32_t)q[0] << 18 | (uint32_t)q[1] << 12 |
                     (uint32_t)q[2] << 6 | (uint32_t)q[3];
        /* Non-canonical input (bits set under the padding) is refused. */
        if (last && ((pad == 1 && (v & 0xff)) || (pad == 2 && (v & 0xffff))))
            return 0;
        dst[o++] = (unsigned char)(v >> 16);
        if (!(last && pad == 2))
            dst[o++] = (unsigned char)(v >> 8);
        if (!(last && pad >= 1))
            dst[o++] = (unsigned char)v;
    }
    return o;
}

char *util_u64toa(uint64_t v, char *p)
{
    char tmp[20];
    int n = 0;
    do {
        tmp[n++] = (char)('0' + v % 10);
        v /= 10;
    } while (v != 0);
    while (n > 0)
        *p++ = tmp[--n];
    return p;
}

char *util_i64toa(int64_t v, char *p)
{
    if (v < 0) {
        *p++ = '-';
        return util_u64toa((uint64_t)0 - (uint64_t)v, p);
    }
    return util_u64toa((uint64_t)v, p);
}

size_t util_tokenize(char *line, struct util_token *tokens, size_t max,
                     char **rest)
{
    size_t n = 0;
    char *p = line;
    *rest = NULL;
    while (*p != '\0') {
        if (*p == ' ') {
            p++;
            continue;
        }
        if (n == max) {
            *rest = p;
            break;
        }
        char *start = p;
        while (*p != '\0' && *p != ' ')
            p++;
        tokens[n].value = start;
        tokens[n].length = (size_t)(p - start);
        n++;
        if (*p == ' ')
            *p++ = '\0';
    }
    return n;
}

uint64_t util_now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

uint64_t util_rand64(void)
{
    static __thread uint64_t x;
    if (x == 0)
        x = 0x9E3779B97F4A7C15ULL ^ (uint64_t)(uintptr_t)&x;
    x ^= x << 13;
    x ^= x >> 7;
    x ^= x << 17;
    return x;
}

/* ---- CRC32C ------------------------------------------------------------- */

#define CRC32C_POLY 0x82F63B78u

static uint32_t crc32c_table[256];
static pthread_once_t crc32c_once = PTHREAD_ONCE_INIT;
static bool crc32c_have_hw;
static bool crc32c_ready;               /* atomic: the tables are built */

#if defined(__x86_64__)
/* The instruction's latency (3 cycles) bounds one chain to 8 bytes per 3
 * cycles; three chains over three stretches of a block run at its
 * throughput.  A chain's register is then carried over the stretches that
 * follow it: the CRC register is linear, so crc(c, A|B) = shift_B(crc(c, A))
 * ^ crc(0, B), where shift_B(c) appends len(B) zero bytes to c.  shift is
 * linear in c too: a table per byte of c for each stretch length. */
enum { CRC_LONG = 256, CRC_SHORT = 64 };
static uint32_t crc32c_shift_long[4][256], crc32c_shift_short[4][256];

__attribute__((target("sse4.2")))
static uint32_t crc32c_zeros(uint32_t c, size_t len)
{
    uint64_t r = c;
    for (size_t i = 0; i < len; i += 8)
        r = _mm_crc32_u64(r, 0);
    return (uint32_t)r;
}

static void crc32c_shift_init(uint32_t t[4][256], size_t len)
{
    uint32_t bit[32];
    for (int i = 0; i < 32; i++)
        bit[i] = crc32c_zeros(1u << i, len);
    for (int j = 0; j < 4; j++)
        for (int b = 0; b < 256; b++) {
            uint32_t v = 0;
            for (int k = 0; k < 8; k++)
                if (b & (1 << k))
                    v ^= bit[8 * j + k];
            t[j][b] = v;
        }
}

static uint32_t crc32c_shift(uint32_t t[4][256], uint32_t c)
{
    return t[0][c & 0xff] ^ t[1][(c >> 8) & 0xff] ^ t[2][(c >> 16) & 0xff] ^
           t[3][c >> 24];
}
#endif

static void crc32c_init(void)
{
    for (uint32_t i = 0; i < 256; i++) {
        uint32_t c = i;
        for (int k = 0; k < 8; k++)
            c = (c & 1) ? (c >> 1) ^ CRC32C_POLY : c >> 1;
        crc32c_table[i] = c;
    }
#if defined(__x86_64__)
    __builtin_cpu_init();
    crc32c_have_hw = __builtin_cpu_supports("sse4.2");
    if (crc32c_have_hw) {
        crc32c_shift_init(crc32c_shift_long, CRC_LONG);
        crc32c_shift_init(crc32c_shift_short, CRC_SHORT);
    }
#endif
    __atomic_store_n(&crc32c_ready, true, __ATOMIC_RELEASE);
}

uint32_t util_crc32c_sw(uint32_t crc, const void *buf, size_t len)
{
    pthread_once(&crc32c_once, crc32c_init);
    const unsigned char *p = buf;
    crc = ~crc;
    while (len--)
        crc = crc32c_table[(crc ^ *p++) & 0xff] ^ (crc >> 8);
    return ~crc;
}

#if defined(__x86_64__)
/* Blocks of three stretches of n bytes (n a multiple of 8) while they fit. */
__attribute__((target("sse4.2"), always_inline))
static inline uint64_t crc32c_blocks(uint64_t c, const unsigned char **pp, size_t *lenp,
                                     size_t n, uint32_t t[4][256])
{
    const unsigned char *p = *pp;
    size_t len = *lenp;
    while (len >= 3 * n) {
        uint64_t c1 = 0, c2 = 0;
        for (size_t i = 0; i < n; i += 8) {
            uint64_t w0, w1, w2;
            memcpy(&w0, p + i, 8);
            memcpy(&w1, p + n + i, 8);
            memcpy(&w2, p + 2 * n + i, 8);
            c = _mm_crc32_u64(c, w0);
            c1 = _mm_crc32_u64(c1, w1);
            c2 = _mm_crc32_u64(c2, w2);
        }
        c = crc32c_shift(t, (uint32_t)c) ^ (uint32_t)c1;
        c = crc32c_shift(t, (uint32_t)c) ^ (uint32_t)c2;
        p += 3 * n;
        len -= 3 * n;
    }
    *pp = p;
    *lenp = len;
    return c;
}

/* Most sums are short (a tuple's header and key, a record header): they
 * take one chain, with no call and no table.  Loads are unaligned: on
 * x86-64 that costs next to nothing. */
__attribute__((target("sse4.2")))
static uint32_t crc32c_hw(uint32_t crc, const unsigned char *p, size_t len)
{
    uint64_t c = ~crc;
    if (len >= 3 * CRC_SHORT) {
        c = crc32c_blocks(c, &p, &len, CRC_LONG, crc32c_shift_long);
        c = crc32c_blocks(c, &p, &len, CRC_SHORT, crc32c_shift_short);
    }
    while (len >= 8) {
        uint64_t w;
        memcpy(&w, p, 8);
        c = _mm_crc32_u64(c, w);
        p += 8;
        len -= 8;
    }
    if (len >= 4) {
        uint32_t w;
        memcpy(&w, p, 4);
        c = _mm_crc32_u32((uint32_t)c, w);
        p += 4;
        len -= 4;
    }
    while (len-- > 0)
        c = _mm_crc32_u8((uint32_t)c, *p++);
    return ~(uint32_t)c;
}
#endif

uint32_t util_crc32c(uint32_t crc, const void *buf, size_t len)
{
    if (!__atomic_load_n(&crc32c_ready, __ATOMIC_ACQUIRE))
        pthread_once(&crc32c_once, crc32c_init);
#if defined(__x86_64__)
    if (crc32c_have_hw)
        return crc32c_hw(crc, buf, len);
#endif
    return util_crc32c_sw(crc, buf, len);
}

bool util_file_blank(int fd, uint64_t from, uint64_t size)
{
    enum { CHUNK = 64 * 1024 };
    void *buf;
    if (posix_memalign(&buf, 4096, CHUNK) != 0)
        return false;
    bool blank = true;
    uint64_t off = from & ~(uint64_t)4095, probed = 0;
    while (blank && off < size && probed < UTIL_BLANK_PROBE) {
        off_t d = lseek(fd, (off_t)off, SEEK_DATA);
        if (d < 0 && errno == ENXIO)
            break;                          /* nothing but holes from here */
        if (d >= 0)
            off = (uint64_t)d & ~(uint64_t)4095;
        if (off >= size)
            break;
        size_t n = size - off < CHUNK ? (size_t)(size - off + 4095) & ~(size_t)4095
                                      : CHUNK;
        ssize_t got = pread(fd, buf, n, (off_t)off);
        if (got < 0) {
            blank = false;
            break;
        }
        if (got == 0)
            break;
        const unsigned char *b = buf;
        for (ssize_t i = 0; i < got; i++)
            if (b[i] != 0) {
                blank = false;
                break;
            }
        off += (uint64_t)got;
        probed += (uint64_t)got;
    }
    free(buf);
    return blank;
}

/* ---- A map of 64-bit keys (util.h) ---- */

static bool u64map_grow(struct util_u64map *m, uint32_t cap, unsigned shift)
{
    struct util_u64ent *n = calloc(cap, sizeof(*n));
    if (n == NULL)
        return false;
    for (uint32_t i = 0; i < m->cap; i++) {
        if (m->e[i].key == 0)
            continue;
        uint32_t j = (uint32_t)(m->e[i].key >> shift) & (cap - 1);
        while (n[j].key != 0)
            j = (j + 1) & (cap - 1);
        n[j] = m->e[i];
    }
    free(m->e);
    /* Readers that only prefetch load these without the caller's lock. */
    __atomic_store_n(&m->e, n, __ATOMIC_RELAXED);
    __atomic_store_n(&m->cap, cap, __ATOMIC_RELAXED);
    return true;
}

bool util_u64map_reserve(struct util_u64map *m, uint64_t n, unsigned shift)
{
    uint64_t cap = m->cap ? m->cap : 16;
    while (cap < 2 * n + 2)
        cap *= 2;
    if (cap > UINT32_MAX / 2)
        return false;
    return cap == m->cap || u64map_grow(m, (uint32_t)cap, shift);
}

uint64_t *util_u64map_slot(struct util_u64map *m, uint64_t key, unsigned shift)
{
    if ((m->n + 1) * 2 > m->cap &&
        !u64map_grow(m, m->cap ? m->cap * 2 : 16, shift))
        return NULL;
    uint32_t j = (uint32_t)(key >> shift) & (m->cap - 1);
    while (m->e[j].key != 0 && m->e[j].key != key)
        j = (j + 1) & (m->cap - 1);
    if (m->e[j].key == 0) {
        m->e[j].key = key;
        m->e[j].val = 0;
        m->n++;
    }
    return &m->e[j].val;
}

const uint64_t *util_u64map_find(const struct util_u64map *m, uint64_t key, unsigned shift)
{
    if (m->n == 0)
        return NULL;
    for (uint32_t j = (uint32_t)(key >> shift) & (m->cap - 1); m->e[j].key != 0;
         j = (j + 1) & (m->cap - 1))
        if (m->e[j].key == key)
            return &m->e[j].val;
    return NULL;
}

void util_u64map_free(struct util_u64map *m)
{
    free(m->e);
    m->e = NULL;
    m->cap = m->n = 0;
}

char *util_uri_encode(const char *src, size_t n, char *out)
{
    static const char hex[] = "0123456789ABCDEF";
    for (size_t i = 0; i < n; i++) {
        unsigned char ch = (unsigned char)src[i];
        if ((ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') ||
            (ch >= '0' && ch <= '9') || ch == '-' || ch == '.' || ch == '_' ||
            ch == '~') {
            *out++ = (char)ch;
        } else {
            *out++ = '%';
            *out++ = hex[ch >> 4];
            *out++ = hex[ch & 15];
        }
    }
    return out;
}

static bool all_zero16(const uint8_t v[16])
{
    for (int i = 0; i < 16; i++)
        if (v[i] != 0)
            return false;
    return true;
}

const char *util_key_check_refusal(const uint8_t found[16], const uint8_t want[16])
{
    if (memcmp(found, want, 16) == 0)
        return NULL;
    if (all_zero16(found))
        return "written without a tier key (its data is in clear; this start "
               "gives -o tier_key)";
    if (all_zero16(want))
        return "sealed with a tier key (start with the same -o tier_key)";
    return "sealed with another tier key (the -o tier_key file given is not "
           "the one it was written with)";
}

int util_open_private(const char *path, int flags, bool *created)
{
    bool made = false;
    int fd;
    flags |= O_NOFOLLOW | O_CLOEXEC;
    if ((flags & O_CREAT) && !(flags & O_EXCL)) {
        /* Try to create first, to know whether this call did. */
        fd = open(path, flags | O_EXCL, 0600);
        if (fd >= 0)
            made = true;
        else if (errno == EEXIST)
            fd = open(path, flags & ~O_CREAT);
    } else {
        fd = open(path, flags, 0600);
        made = fd >= 0 && (flags & O_CREAT);
    }
    if (created != NULL)
        *created = made;
    if (fd < 0) {
        if (errno == ELOOP)
            fprintf(stderr, "tac-memcached: %s is a symbolic link; cache files "
                    "are never opened through one: give the path of the file "
                    "or device itself\n", path);
        return -1;
    }
    struct stat st;
    if (made) {
        if (fchmod(fd, 0600) != 0) {
            int e = errno;
            close(fd);
            unlink(path);
            errno = e;
            return -1;
        }
    } else if (fstat(fd, &st) == 0 && S_ISREG(st.st_mode) &&
               (st.st_mode & 077) != 0) {
        fprintf(stderr, "tac-memcached: warning: %s holds cache data and other "
                "users may access it (mode %03o); chmod 600 it\n", path,
                (unsigned)(st.st_mode & 0777));
    }
    return fd;
}

void util_fd_path(int fd, char out[UTIL_FD_PATH_MAX])
{
    snprintf(out, UTIL_FD_PATH_MAX, "/proc/self/fd/%d", fd);
}

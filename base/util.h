/*
 * util.h - small helpers: number parsing with memcached's exact acceptance
 * rules, the one size parser (util_parse_size), base64, integer formatting,
 * a per-thread random number, a monotonic clock and CRC32C.
 *
 * Safe to call from any thread: util_rand64 keeps its state per thread,
 * and the CRC32C byte table is built once (pthread_once).
 */
#ifndef UTIL_H
#define UTIL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/*
 * Number parsing, memcached 1.6 semantics.  `str` is NUL-terminated; the
 * number must be followed by the NUL or by whitespace (so a token inside a
 * tokenized line works), must contain at least one digit, and may carry a
 * leading '+' (strtol rules).  Overflow of the parse width is rejected.
 *
 * The unsigned variants reject a '-' sign on any non-zero value ("-1"),
 * and accept "-0".  safe_strtoul and safe_strtol parse a 64-bit value and then
 * truncate it to 32 bits, exactly like memcached 1.6.18 on LP64 hosts (so
 * "4294967297" is accepted as 1): clients depend on those replies.
 * On failure *out is left unchanged (safe_strtol/ll set it to 0).
 */
bool safe_strtoull(const char *str, uint64_t *out);
bool safe_strtoll(const char *str, int64_t *out);
bool safe_strtoul(const char *str, uint32_t *out);
bool safe_strtol(const char *str, int32_t *out);

/*
 * A size on the command line: decimal digits, an optional fraction, then
 * an optional unit k, m, g or t (powers of 1024, either case) and an
 * optional b: "4096", "64k", "1.5m", "2GB".  Nothing else may follow, a
 * fraction needs a unit (bytes are whole), and a value past UINT64_MAX
 * fails.  Fraction digits past the sixth are ignored.  The one size parser:
 * every size option, and the SIZE of PATH:SIZE, goes through it.
 */
bool util_parse_size(const char *str, uint64_t *out);

/*
 * Tokenizer for text protocol lines.  Splits a NUL-terminated line on
 * single spaces (tabs are not separators, as in memcached), writing NULs
 * in place.  At most `max` tokens are produced; if the line holds more,
 * *rest points at the first unprocessed byte, else it is NULL.  Returns the
 * token count.  memcached's "ntokens" is this count + 1 (its terminal).
 */
struct util_token {
    char *value;
    size_t length;
};

size_t util_tokenize(char *line, struct util_token *tokens, size_t max,
                     char **rest);

/* Bytes base64_encode needs for n input bytes (no NUL). */
#define BASE64_ENCODED_LEN(n) ((((n) + 2) / 3) * 4)

/*
 * Standard base64 (RFC 4648 alphabet, '=' padding).  base64_encode writes
 * BASE64_ENCODED_LEN(srclen) bytes and returns that count, or 0 if dstlen is
 * too small.  base64_decode accepts only canonical padded input (length a
 * multiple of 4, at most two '=' and only at the end); returns the decoded
 * length, or 0 on invalid input, empty input or a too-small dst.  dst may
 * equal src (in-place decoding is safe: output never overtakes input).
 */
size_t base64_encode(const unsigned char *src, size_t srclen,
                     unsigned char *dst, size_t dstlen);
size_t base64_decode(const unsigned char *src, size_t srclen,
                     unsigned char *dst, size_t dstlen);

/* Writes v in decimal at p (no NUL); returns the end.  Needs <= 20 bytes. */
/* Writes src as memcached's logs and dumps write keys: bytes other than
 * letters, digits and "-._~" as %XX.  out must hold 3 * n bytes; returns
 * the end of what was written (not terminated). */
char *util_uri_encode(const char *src, size_t n, char *out);

char *util_u64toa(uint64_t v, char *p);
/* Same for signed values.  Needs <= 20 bytes. */
char *util_i64toa(int64_t v, char *p);

/* A fast per-thread pseudo-random 64-bit number (xorshift64, seeded from
 * the thread's own address): sampling and coin flips, not cryptography.
 * Any thread, no locks. */
uint64_t util_rand64(void);

/* Nanoseconds on CLOCK_MONOTONIC: for intervals and deadlines. */
uint64_t util_now_ns(void);

/* Raises *p to v unless it is larger already (relaxed atomics); returns
 * the value *p holds afterwards. */
static inline uint64_t util_atomic_max(uint64_t *p, uint64_t v)
{
    uint64_t cur = __atomic_load_n(p, __ATOMIC_RELAXED);
    while (cur < v &&
           !__atomic_compare_exchange_n(p, &cur, v, false, __ATOMIC_RELAXED,
                                        __ATOMIC_RELAXED))
        ;
    return cur > v ? cur : v;
}

/*
 * CRC32C (Castagnoli polynomial, reflected 0x82F63B78), the checksum of
 * iSCSI, ext4 and SSE4.2's crc32 instruction, which is used when the CPU has
 * it (a byte table otherwise).  It detects every error burst of 32 bits or
 * less, so every change confined to one byte.  Start with crc = 0; chaining
 * works: util_crc32c(util_crc32c(0, a, n), b, m) is the CRC of a then b.
 * util_crc32c(0, "123456789", 9) == 0xE3069283.
 */
uint32_t util_crc32c(uint32_t crc, const void *buf, size_t len);

/* The key-check value a tier file's header carries (16 bytes; zeros: no
 * tier key) against the one this start wants: NULL when they agree, else
 * a phrase that follows "holds a tac-memcached ... tier" and says why. */
const char *util_key_check_refusal(const uint8_t found[16], const uint8_t want[16]);

/* An open-addressing map of nonzero 64-bit keys to 64-bit values, grown by
 * doubling at half full; the caller does the locking.  Slots are indexed
 * by the key's bits above `shift` (bits the caller already partitions by).
 * Zero-initialised, it is empty. */
struct util_u64map {
    struct util_u64ent { uint64_t key, val; } *e;   /* key 0: empty */
    uint32_t cap, n;
};
/* key's value, added as 0 if absent; NULL when the map cannot grow. */
uint64_t *util_u64map_slot(struct util_u64map *m, uint64_t key, unsigned shift);
/* key's value, or NULL if absent. */
const uint64_t *util_u64map_find(const struct util_u64map *m, uint64_t key, unsigned shift);
/* Room for n keys without growing; false when out of memory (m unchanged). */
bool util_u64map_reserve(struct util_u64map *m, uint64_t n, unsigned shift);
void util_u64map_free(struct util_u64map *m);

/*
 * True when the bytes of fd from `from` to `size` look unused: no data
 * (holes or unwritten extents, found with SEEK_DATA where the file system
 * has it), or only zeros in the first UTIL_BLANK_PROBE bytes of data found.
 * Reads with a 4 KiB-aligned buffer at 4 KiB-aligned offsets, so fd may be
 * O_DIRECT.  A read error counts as not blank.  The tier libraries use it
 * to tell an empty file, which they format, from one that holds something.
 */
#define UTIL_BLANK_PROBE (1u << 20)
bool util_file_blank(int fd, uint64_t from, uint64_t size);
/* The table implementation alone, for tests. */
uint32_t util_crc32c_sw(uint32_t crc, const void *buf, size_t len);

/*
 * Opens a file that holds cache data (a tier file, the restart state, the
 * journal, the DRAM log, a temporary file).  Never through a symbolic link
 * (O_NOFOLLOW: a link planted at the path fails with ELOOP, and a line on
 * stderr says so).  With O_CREAT, a file this call creates is made 0600
 * whatever the umask, and *created (may be NULL) says so; an existing
 * regular file that other users may read or write gets a warning on
 * stderr.  flags are open(2)'s (O_CLOEXEC is added).  Returns the fd, or
 * -1 with errno set.
 */
int util_open_private(const char *path, int flags, bool *created);
/* "/proc/self/fd/N": a path naming fd's file itself, for libraries that
 * open by path (libpmem), so that they reach the file util_open_private()
 * checked and not whatever the path names by then. */
#define UTIL_FD_PATH_MAX 32
void util_fd_path(int fd, char out[UTIL_FD_PATH_MAX]);

#endif

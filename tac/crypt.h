/*
 * tac/crypt.h - encryption at rest (-o tier_key=FILE): AES-256-GCM for
 * every record the tiers write to NVM, SSD and the files beside them.
 *
 * Keys.  The file holds 32 bytes (raw, or 64 hex digits).  Nothing uses
 * it directly: HMAC-SHA256(file key, label) derives one key per use, so
 * that no two uses share a key:
 *   "tac-memcached tuple encryption"  the AES-256-GCM key;
 *   "tac-memcached key check"         the first 16 bytes are the key-check
 *                                     value kept in each file's header;
 *   "tac-memcached key hash"          the first 16 bytes key SipHash-2-4,
 *                                     the journal's key hashes.
 *
 * Nonces.  A sealed record carries its 12-byte nonce: 4 bytes drawn at
 * random at start, then a 64-bit little-endian counter that starts at a
 * random value and grows by one per record.  Within a run no two records
 * share a nonce (2^64 of them would be needed).  Two runs collide only if
 * they draw the same 4 bytes and counter ranges that overlap: for runs of
 * up to 2^40 records, odds of about 2^-55 per pair of runs.  No state is
 * kept on the media, so a crash, a lost state file or a reformat cannot
 * replay a counter.
 *
 * A sealed record: ciphertext (as long as the clear text), then the nonce,
 * then the 16-byte tag (TAC_SEAL_BYTES after the ciphertext).  The caller
 * picks the authenticated data (a tuple's clear header, a chunk's length).
 *
 * Threads: load at start only; the rest from any thread.  Each thread
 * keeps its own cipher contexts, freed when it exits.
 */
#ifndef TAC_CRYPT_H
#define TAC_CRYPT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/uio.h>

#define TAC_SEAL_NONCE 12u
#define TAC_SEAL_TAG 16u
#define TAC_SEAL_BYTES (TAC_SEAL_NONCE + TAC_SEAL_TAG)
#define TAC_KEY_CHECK_BYTES 16u

/* Reads the key file and derives the keys; false (after printing why to
 * stderr) when the file cannot be read or is not a key.  NULL: no key. */
bool tac_crypt_load(const char *path);
bool tac_crypt_on(void);

/* The key-check value the files' headers carry: 16 bytes, all zero when
 * no key is loaded (a file written without a key carries zeros too). */
const uint8_t *tac_crypt_key_check(void);

/* Seals the n pieces of in (their bytes in order) into out: ciphertext,
 * nonce, tag; out holds the pieces' length + TAC_SEAL_BYTES and may be
 * the first piece's own place only when n == 1. */
void tac_crypt_seal(const void *aad, size_t aadlen, const struct iovec *in,
                    int n, char *out);

/* Opens a sealed record (ciphertext of len bytes, nonce, tag at in) into
 * the n pieces of out, whose lengths add up to len; a piece may be its
 * own bytes' place in `in` (in place).  False when the tag does not hold
 * for this key and aad: the pieces then hold garbage. */
bool tac_crypt_open(const void *aad, size_t aadlen, const char *in, size_t len,
                    const struct iovec *out, int n);

/* The first n clear bytes of a sealed record (len clear bytes at in) into
 * out, without checking its tag: a lookup hint only (which tuple of a buf
 * a fetch may want), never something to act on before tac_crypt_open. */
void tac_crypt_peek(const char *in, size_t len, size_t n, char *out);

/* Where a sealed record of len clear bytes keeps its nonce (test hooks
 * and stats only). */
static inline const uint8_t *tac_crypt_nonce_of(const char *sealed, size_t len)
{
    return (const uint8_t *)sealed + len;
}

/* SipHash-2-4 of data under the derived hash key; any thread. */
uint64_t tac_crypt_hash64(const void *data, size_t len);
/* SipHash-2-4 under the key k0 | k1 (little-endian halves). */
uint64_t tac_siphash24(uint64_t k0, uint64_t k1, const void *data, size_t len);

/* Records sealed and opened, and tags that failed, since start. */
uint64_t tac_crypt_sealed(void);
uint64_t tac_crypt_opened(void);

#endif

/*
 * tac/crypt.c - AES-256-GCM sealing of tier records, key file and key
 * derivation, SipHash for the journal.  See crypt.h.
 */
#include "config.h"

#include <ctype.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/hmac.h>
#include <openssl/rand.h>

#include "tac/crypt.h"

static struct {
    bool on;
    uint8_t tuple_key[32];
    uint8_t check[TAC_KEY_CHECK_BYTES];
    uint64_t sip_k0, sip_k1;
    uint8_t prefix[4];
    uint64_t counter;               /* atomic: the next nonce's counter */
    uint64_t sealed, opened;        /* atomic, relaxed */
    pthread_key_t ctx_key;
} cr;

/* A thread's contexts, keyed once; each record sets only its nonce. */
struct thread_ctx {
    EVP_CIPHER_CTX *enc, *dec, *ecb;
};

static void thread_ctx_free(void *p)
{
    struct thread_ctx *t = p;
    EVP_CIPHER_CTX_free(t->enc);
    EVP_CIPHER_CTX_free(t->dec);
    EVP_CIPHER_CTX_free(t->ecb);
    free(t);
}

static struct thread_ctx *thread_ctx(void)
{
    struct thread_ctx *t = pthread_getspecific(cr.ctx_key);
    if (t != NULL)
        return t;
    t = calloc(1, sizeof(*t));
    if (t == NULL)
        abort();
    t->enc = EVP_CIPHER_CTX_new();
    t->dec = EVP_CIPHER_CTX_new();
    t->ecb = EVP_CIPHER_CTX_new();
    if (t->enc == NULL || t->dec == NULL || t->ecb == NULL ||
        EVP_EncryptInit_ex(t->enc, EVP_aes_256_gcm(), NULL, cr.tuple_key, NULL) != 1 ||
        EVP_DecryptInit_ex(t->dec, EVP_aes_256_gcm(), NULL, cr.tuple_key, NULL) != 1 ||
        EVP_EncryptInit_ex(t->ecb, EVP_aes_256_ecb(), NULL, cr.tuple_key, NULL) != 1 ||
        EVP_CIPHER_CTX_set_padding(t->ecb, 0) != 1)
        abort();                    /* out of memory in OpenSSL: nothing to do */
    if (pthread_setspecific(cr.ctx_key, t) != 0)
        abort();
    return t;
}

static int hexval(int c)
{
    if (c >= '0' && c <= '9')
        return c - '0';
    c = tolower(c);
    return c >= 'a' && c <= 'f' ? c - 'a' + 10 : -1;
}

/* The 32 key bytes of a file's contents: raw, or 64 hex digits and an
 * optional line end. */
static bool parse_key(const unsigned char *buf, size_t n, uint8_t key[32])
{
    if (n == 32) {
        memcpy(key, buf, 32);
        return true;
    }
    /* One line end at most: "\n" or "\r\n". */
    if (n == 65 && buf[64] == '\n')
        n = 64;
    else if (n == 66 && buf[64] == '\r' && buf[65] == '\n')
        n = 64;
    if (n != 64)
        return false;
    for (size_t i = 0; i < 32; i++) {
        int hi = hexval(buf[2 * i]), lo = hexval(buf[2 * i + 1]);
        if (hi < 0 || lo < 0)
            return false;
        key[i] = (uint8_t)(hi << 4 | lo);
    }
    return true;
}

static void derive(const uint8_t key[32], const char *label, uint8_t out[32])
{
    unsigned int len = 32;
    if (HMAC(EVP_sha256(), key, 32, (const unsigned char *)label, strlen(label),
             out, &len) == NULL || len != 32)
        abort();
}

static uint64_t le64(const uint8_t *p)
{
    uint64_t v = 0;
    for (int i = 7; i >= 0; i--)
        v = v << 8 | p[i];
    return v;
}

bool tac_crypt_load(const char *path)
{
    if (path == NULL)
        return true;
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) {
        fprintf(stderr, "tier_key: cannot open %s: %s\n", path, strerror(errno));
        return false;
    }
    struct stat st;
    if (fstat(fd, &st) == 0 && (st.st_mode & (S_IRWXG | S_IRWXO)))
        fprintf(stderr, "tier_key: warning: %s can be read by other users "
                "(chmod 600 it)\n", path);
    /* Read past the longest key file (66 bytes): a longer one is refused,
     * not cut. */
    unsigned char buf[80];
    ssize_t n = read(fd, buf, sizeof(buf));
    int err = errno;
    close(fd);
    uint8_t key[32];
    if (n < 0) {
        fprintf(stderr, "tier_key: cannot read %s: %s\n", path, strerror(err));
        return false;
    }
    if (!parse_key(buf, (size_t)n, key)) {
        fprintf(stderr, "tier_key: %s does not hold a key: it must hold exactly "
                "32 bytes, or 64 hex digits (make one with: head -c 32 "
                "/dev/urandom > FILE)\n", path);
        OPENSSL_cleanse(buf, sizeof(buf));
        return false;
    }
    OPENSSL_cleanse(buf, sizeof(buf));
    uint8_t d[32];
    derive(key, "tac-memcached tuple encryption", cr.tuple_key);
    derive(key, "tac-memcached key check", d);
    memcpy(cr.check, d, sizeof(cr.check));
    derive(key, "tac-memcached key hash", d);
    cr.sip_k0 = le64(d);
    cr.sip_k1 = le64(d + 8);
    OPENSSL_cleanse(d, sizeof(d));
    OPENSSL_cleanse(key, sizeof(key));
    uint8_t r[12];
    if (RAND_bytes(r, sizeof(r)) != 1) {
        fprintf(stderr, "tier_key: no random bytes for nonces\n");
        return false;
    }
    memcpy(cr.prefix, r, sizeof(cr.prefix));
    cr.counter = le64(r + 4);
    if (pthread_key_create(&cr.ctx_key, thread_ctx_free) != 0) {
        fprintf(stderr, "tier_key: out of thread keys\n");
        return false;
    }
    cr.on = true;
    return true;
}

bool tac_crypt_on(void)
{
    return cr.on;
}

const uint8_t *tac_crypt_key_check(void)
{
    return cr.check;                /* zeros without a key */
}

void tac_crypt_seal(const void *aad, size_t aadlen, const struct iovec *in,
                    int n, char *out)
{
    struct thread_ctx *t = thread_ctx();
    uint8_t nonce[TAC_SEAL_NONCE];
    uint64_t c = __atomic_fetch_add(&cr.counter, 1, __ATOMIC_RELAXED);
    memcpy(nonce, cr.prefix, 4);
    for (int i = 0; i < 8; i++)
        nonce[4 + i] = (uint8_t)(c >> (8 * i));
    int len;
    if (EVP_EncryptInit_ex(t->enc, NULL, NULL, NULL, nonce) != 1 ||
        (aadlen > 0 &&
         EVP_EncryptUpdate(t->enc, NULL, &len, aad, (int)aadlen) != 1))
        abort();
    size_t off = 0;
    for (int i = 0; i < n; i++) {
        if (in[i].iov_len == 0)
            continue;
        if (EVP_EncryptUpdate(t->enc, (unsigned char *)out + off, &len,
                              in[i].iov_base, (int)in[i].iov_len) != 1)
            abort();
        off += in[i].iov_len;
    }
    if (EVP_EncryptFinal_ex(t->enc, (unsigned char *)out + off, &len) != 1)
        abort();
    memcpy(out + off, nonce, sizeof(nonce));
    if (EVP_CIPHER_CTX_ctrl(t->enc, EVP_CTRL_GCM_GET_TAG, TAC_SEAL_TAG,
                            out + off + TAC_SEAL_NONCE) != 1)
        abort();
    __atomic_add_fetch(&cr.sealed, 1, __ATOMIC_RELAXED);
}

bool tac_crypt_open(const void *aad, size_t aadlen, const char *in, size_t len,
                    const struct iovec *out, int n)
{
    struct thread_ctx *t = thread_ctx();
    int l;
    uint8_t tag[TAC_SEAL_TAG];
    memcpy(tag, in + len + TAC_SEAL_NONCE, sizeof(tag));
    if (EVP_DecryptInit_ex(t->dec, NULL, NULL, NULL,
                           (const unsigned char *)in + len) != 1 ||
        (aadlen > 0 &&
         EVP_DecryptUpdate(t->dec, NULL, &l, aad, (int)aadlen) != 1))
        abort();
    size_t off = 0;
    for (int i = 0; i < n && off < len; i++) {
        size_t take = out[i].iov_len < len - off ? out[i].iov_len : len - off;
        if (take > 0 &&
            EVP_DecryptUpdate(t->dec, out[i].iov_base, &l,
                              (const unsigned char *)in + off, (int)take) != 1)
            abort();
        off += take;
    }
    if (off != len)
        return false;
    if (EVP_CIPHER_CTX_ctrl(t->dec, EVP_CTRL_GCM_SET_TAG, TAC_SEAL_TAG, tag) != 1)
        abort();
    bool ok = EVP_DecryptFinal_ex(t->dec, (unsigned char *)tag, &l) == 1;
    __atomic_add_fetch(&cr.opened, 1, __ATOMIC_RELAXED);
    return ok;
}

void tac_crypt_peek(const char *in, size_t len, size_t n, char *out)
{
    struct thread_ctx *t = thread_ctx();
    /* GCM encrypts clear block i with the key stream AES(nonce | i + 2)
     * (a 32-bit big-endian counter; 1 is the tag's).  Those few blocks
     * are made here with one ECB pass, keyed once per thread: an
     * EVP_CipherInit per tuple would cost more than the blocks. */
    enum { MAXB = 16 };             /* KEY_MAX_LENGTH fits in 16 blocks */
    uint8_t ctr[MAXB * 16], ks[MAXB * 16];
    size_t nb = (n + 15) / 16;
    if (nb > MAXB)
        abort();
    for (size_t b = 0; b < nb; b++) {
        uint8_t *c = ctr + 16 * b;
        memcpy(c, in + len, TAC_SEAL_NONCE);
        uint32_t i = (uint32_t)b + 2;
        c[12] = (uint8_t)(i >> 24);
        c[13] = (uint8_t)(i >> 16);
        c[14] = (uint8_t)(i >> 8);
        c[15] = (uint8_t)i;
    }
    int l;
    if (nb > 0 && EVP_EncryptUpdate(t->ecb, ks, &l, ctr, (int)(16 * nb)) != 1)
        abort();
    for (size_t i = 0; i < n; i++)
        out[i] = (char)(in[i] ^ ks[i]);
}

uint64_t tac_crypt_sealed(void)
{
    return __atomic_load_n(&cr.sealed, __ATOMIC_RELAXED);
}

uint64_t tac_crypt_opened(void)
{
    return __atomic_load_n(&cr.opened, __ATOMIC_RELAXED);
}

/* ---- SipHash-2-4 (Aumasson and Bernstein), 64-bit output ---- */

#define ROTL(x, b) (((x) << (b)) | ((x) >> (64 - (b))))

static inline void sip_round(uint64_t v[4])
{
    v[0] += v[1]; v[1] = ROTL(v[1], 13); v[1] ^= v[0]; v[0] = ROTL(v[0], 32);
    v[2] += v[3]; v[3] = ROTL(v[3], 16); v[3] ^= v[2];
    v[0] += v[3]; v[3] = ROTL(v[3], 21); v[3] ^= v[0];
    v[2] += v[1]; v[1] = ROTL(v[1], 17); v[1] ^= v[2]; v[2] = ROTL(v[2], 32);
}

uint64_t tac_siphash24(uint64_t k0, uint64_t k1, const void *data, size_t len)
{
    const uint8_t *p = data;
    uint64_t v[4] = {
        k0 ^ 0x736f6d6570736575ull, k1 ^ 0x646f72616e646f6dull,
        k0 ^ 0x6c7967656e657261ull, k1 ^ 0x7465646279746573ull,
    };
    size_t full = len & ~(size_t)7;
    for (size_t i = 0; i < full; i += 8) {
        uint64_t m = le64(p + i);
        v[3] ^= m;
        sip_round(v);
        sip_round(v);
        v[0] ^= m;
    }
    uint64_t b = (uint64_t)len << 56;
    for (size_t i = 0; i < (len & 7); i++)
        b |= (uint64_t)p[full + i] << (8 * i);
    v[3] ^= b;
    sip_round(v);
    sip_round(v);
    v[0] ^= b;
    v[2] ^= 0xff;
    for (int i = 0; i < 4; i++)
        sip_round(v);
    return v[0] ^ v[1] ^ v[2] ^ v[3];
}

uint64_t tac_crypt_hash64(const void *data, size_t len)
{
    return tac_siphash24(cr.sip_k0, cr.sip_k1, data, len);
}

/*
 * tac/tuple.c - lower-tier tuple header and checksum.  See tuple.h for the
 * format.  Any thread.
 */
#include "config.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "base/settings.h"
#include "tac/crypt.h"
#include "tac/internal.h"
#include "tac/tuple.h"
#include "base/util.h"

uint32_t tac_tuple_checksum(const struct tac_tuple_hdr *hdr, const char *key,
                            const char *value)
{
    struct tac_tuple_hdr h = *hdr;
    h.checksum = 0;
    uint32_t crc = util_crc32c(0, &h, sizeof(h));
    crc = util_crc32c(crc, key, h.nkey);
    return util_crc32c(crc, value, h.nbytes);
}

size_t tac_tuple_overhead;

void tac_tuple_set_sealed(bool sealed)
{
    tac_tuple_overhead = sealed ? TAC_SEAL_BYTES : 0;
}

bool tac_tuple_sane(const struct tac_tuple_hdr *hdr, size_t room)
{
    unsigned version = tac_tuple_sealed() ? TAC_TUPLE_VERSION_SEALED
                                          : TAC_TUPLE_VERSION;
    if (hdr->version != version || hdr->nkey == 0 ||
        hdr->nkey > KEY_MAX_LENGTH || hdr->nbytes < 2)
        return false;
    /* Summed with an overflow check: nbytes is not bounded yet, and a
     * size_t may be 32 bits. */
    size_t size;
    if (__builtin_add_overflow(sizeof(*hdr) + (size_t)hdr->nkey + tac_tuple_overhead,
                               (size_t)hdr->nbytes, &size))
        return false;
    return size <= (size_t)tac.cfg.item_size_max && size <= room;
}

static uint64_t tuple_seq;
static uint64_t seq_limit = UINT64_MAX;     /* atomic: see tac_journal */
/* Reserves sequences from seq on (the journal's tac_journal_reserve_seq);
 * called when a fill reaches seq_limit. */
static void (*seq_reserve)(uint64_t seq);

void tac_tuple_set_seq_reserve(void (*fn)(uint64_t seq))
{
    seq_reserve = fn;
}

void tac_tuple_set_seq_limit(uint64_t limit)
{
    __atomic_store_n(&seq_limit, limit, __ATOMIC_RELAXED);
}

uint64_t tac_tuple_last_seq(void)
{
    return __atomic_load_n(&tuple_seq, __ATOMIC_RELAXED);
}

void tac_tuple_seq_floor(uint64_t seq)
{
    (void)util_atomic_max(&tuple_seq, seq);
}

/* This thread's tuples are copies of a version written with this seq
 * (tac_tuple_seq_as); 0: each tuple gets a new one. */
static __thread uint64_t seq_as;

void tac_tuple_seq_as(uint64_t seq)
{
    seq_as = seq;
}

void tac_tuple_fill(struct tac_tuple_hdr *hdr, const item *it)
{
    memset(hdr, 0, sizeof(*hdr));
    if (seq_as != 0) {
        hdr->seq = seq_as;
    } else {
        hdr->seq = __atomic_add_fetch(&tuple_seq, 1, __ATOMIC_RELAXED);
        if (__builtin_expect(hdr->seq >= __atomic_load_n(&seq_limit, __ATOMIC_RELAXED), 0) &&
            seq_reserve != NULL)
            seq_reserve(hdr->seq);
    }
    hdr->cas = it->cas;
    hdr->nbytes = it->nbytes;
    hdr->flags = it->flags;
    /* Unix time: the tuple must mean the same after a restart. */
    hdr->exptime = it->exptime == 0 ? 0
                 : (uint32_t)((int64_t)process_started + it->exptime);
    hdr->time = (uint32_t)((int64_t)process_started + item_time(it));
    hdr->nkey = it->nkey;
    if (tac_tuple_sealed()) {
        hdr->version = TAC_TUPLE_VERSION_SEALED;  /* the tag checks it all */
        return;
    }
    hdr->version = TAC_TUPLE_VERSION;
    hdr->checksum = tac_tuple_checksum(hdr, ITEM_key(it), ITEM_data(it));
}

/* ---- Sealed images ---- */

/* A thread's scratch buffers: one for sealed images, one for opened
 * tuples, so that an image being appended survives an open on the way
 * (the DRAM log's cleaning opens records to read their keys). */
enum { SCRATCH_IMAGE, SCRATCH_OPEN, SCRATCH_N };
struct scratch {
    char *mem;
    size_t cap;
};
static pthread_key_t scratch_key;
static pthread_once_t scratch_once = PTHREAD_ONCE_INIT;

static void scratch_free(void *p)
{
    struct scratch *s = p;
    for (int i = 0; i < SCRATCH_N; i++)
        free(s[i].mem);
    free(s);
}

static void scratch_init(void)
{
    if (pthread_key_create(&scratch_key, scratch_free) != 0)
        abort();
}

static char *scratch(int which, size_t len)
{
    pthread_once(&scratch_once, scratch_init);
    struct scratch *s = pthread_getspecific(scratch_key);
    if (s == NULL) {
        s = calloc(SCRATCH_N, sizeof(*s));
        if (s == NULL || pthread_setspecific(scratch_key, s) != 0)
            abort();
    }
    s += which;
    if (s->cap < len) {
        /* The largest tuple is bounded by -I; grow in one step to it. */
        size_t cap = len < (size_t)tac.cfg.item_size_max + 64
                     ? (size_t)tac.cfg.item_size_max + 64 : len;
        char *m = realloc(s->mem, cap);
        if (m == NULL)
            abort();
        s->mem = m;
        s->cap = cap;
    }
    return s->mem;
}

int tac_tuple_image(const struct tac_tuple_hdr *hdr, const char *key,
                    const char *value, struct iovec iov[3])
{
    iov[0] = (struct iovec){ (void *)hdr, sizeof(*hdr) };
    if (!tac_tuple_sealed()) {
        iov[1] = (struct iovec){ (void *)key, hdr->nkey };
        iov[2] = (struct iovec){ (void *)value, hdr->nbytes };
        return 3;
    }
    size_t len = (size_t)hdr->nkey + hdr->nbytes;
    char *out = scratch(SCRATCH_IMAGE, len + TAC_SEAL_BYTES);
    struct iovec in[2] = {
        { (void *)key, hdr->nkey },
        { (void *)value, hdr->nbytes },
    };
    tac_crypt_seal(hdr, sizeof(*hdr), in, 2, out);
    iov[1] = (struct iovec){ out, len + TAC_SEAL_BYTES };
    return 2;
}

enum tac_tuple_check tac_tuple_open(const struct tac_tuple_hdr *hdr,
                                    const char *body, char *key_out,
                                    char *value_out)
{
    if (tac_tuple_sealed()) {
        struct iovec out[2] = {
            { key_out, hdr->nkey },
            { value_out, hdr->nbytes },
        };
        return tac_crypt_open(hdr, sizeof(*hdr), body,
                              (size_t)hdr->nkey + hdr->nbytes, out, 2)
               ? TUPLE_OK : TUPLE_BAD_TAG;
    }
    if (key_out != body)
        memcpy(key_out, body, hdr->nkey);
    if (value_out != body + hdr->nkey)
        memcpy(value_out, body + hdr->nkey, hdr->nbytes);
    if (tac_tuple_checksum(hdr, key_out, value_out) != hdr->checksum)
        return TUPLE_BAD_SUM;
    /* A sum that holds over a value without its "\r\n" (a tuple written
     * and summed by something else) would break a reply's framing. */
    return value_out[hdr->nbytes - 2] == '\r' && value_out[hdr->nbytes - 1] == '\n'
           ? TUPLE_OK : TUPLE_BAD_SUM;
}

const char *tac_tuple_key_hint(const struct tac_tuple_hdr *hdr, const char *body,
                               char *buf)
{
    if (!tac_tuple_sealed())
        return body;
    tac_crypt_peek(body, (size_t)hdr->nkey + hdr->nbytes, hdr->nkey, buf);
    return buf;
}

enum tac_tuple_check tac_tuple_open_scratch(const struct tac_tuple_hdr *hdr,
                                            const char *body,
                                            const char **clear)
{
    char *out = tac_tuple_sealed()
                ? scratch(SCRATCH_OPEN, (size_t)hdr->nkey + hdr->nbytes)
                : (char *)body;
    enum tac_tuple_check c = tac_tuple_open(hdr, body, out, out + hdr->nkey);
    *clear = c == TUPLE_OK ? out : NULL;
    return c;
}

void tac_tuple_refused(void)
{
    if (tac_tuple_sealed())
        TAC_INCR(tuple_auth_failures);
    else
        TAC_INCR(tuple_checksum_failures);
}

bool tac_tuple_owned(const item *meta, const struct tac_tuple_hdr *hdr,
                     const char *key)
{
    return hdr->nkey == meta->nkey &&
           item_key_fp(key, hdr->nkey, item_hash(key, hdr->nkey)) == item_meta_fp(meta) &&
           (!tac_tuple_sealed() || hdr->seq == item_meta_seq(meta));
}

size_t tac_tuple_key_prefix(size_t nkey, size_t len)
{
    /* A sealed tuple's nonce lies after its body: the key needs it all. */
    size_t head = sizeof(struct tac_tuple_hdr) + nkey;
    return tac_tuple_sealed() || head > len ? len : head;
}

bool tac_tuple_key_of(const char *data, size_t avail, size_t len, uint64_t fp,
                      size_t nkey, char *key)
{
    struct tac_tuple_hdr hdr;
    char buf[KEY_MAX_LENGTH];
    if (avail < tac_tuple_key_prefix(nkey, len) || avail < sizeof(hdr))
        return false;
    memcpy(&hdr, data, sizeof(hdr));
    /* The header must describe a tuple of the length the meta tuple gives
     * (len): then its key, and a sealed one's nonce, lie where read. */
    if (!tac_tuple_sane(&hdr, len) || hdr.nkey != nkey ||
        tac_tuple_size(hdr.nkey, hdr.nbytes) != len)
        return false;
    const char *k = tac_tuple_key_hint(&hdr, data + sizeof(hdr), buf);
    if (item_key_fp(k, nkey, item_hash(k, nkey)) != fp)
        return false;
    memcpy(key, k, nkey);
    return true;
}

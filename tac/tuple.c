/*
 * tac/tuple.c - lower-tier tuple header, checksum and validity check.
 * See tuple.h for the format.  Pure functions; any thread.
 */
#include "config.h"

#include <string.h>

#include "tac/tuple.h"

/* A word-at-a-time multiplicative checksum, fed segment by segment. */
static uint64_t sum_bytes(uint64_t h, const void *p, size_t len)
{
    const unsigned char *b = p;
    while (len >= 8) {
        uint64_t w;
        memcpy(&w, b, 8);
        h = (h ^ w) * 0x9E3779B97F4A7C15ULL;
        h ^= h >> 29;
        b += 8;
        len -= 8;
    }
    uint64_t tail = len;
    for (size_t i = 0; i < len; i++)
        tail = (tail << 8) | b[i];
    h = (h ^ tail) * 0xC2B2AE3D27D4EB4FULL;
    return h ^ (h >> 32);
}

uint32_t tac_tuple_checksum(const struct tac_tuple_hdr *hdr, const char *key,
                            const char *value)
{
    /* revPtr is left out: moving a meta tuple rewrites just that field. */
    struct tac_tuple_hdr h = *hdr;
    h.checksum = 0;
    h.rev_ptr = 0;
    uint64_t s = sum_bytes(0x243F6A8885A308D3ULL, &h, sizeof(h));
    s = sum_bytes(s, key, h.nkey);
    s = sum_bytes(s, value, h.nbytes);
    return (uint32_t)(s ^ (s >> 32));
}

void tac_tuple_fill(struct tac_tuple_hdr *hdr, const item *it, const item *meta)
{
    memset(hdr, 0, sizeof(*hdr));
    hdr->rev_ptr = (uint64_t)(uintptr_t)meta;
    hdr->cas = it->cas;
    hdr->nbytes = it->nbytes;
    hdr->flags = it->flags;
    hdr->exptime = it->exptime;
    hdr->time = item_time(it);
    hdr->nkey = it->nkey;
    hdr->version = TAC_TUPLE_VERSION;
    hdr->checksum = tac_tuple_checksum(hdr, ITEM_key(it), ITEM_data(it));
}

bool tac_tuple_valid(const struct tac_tuple_hdr *hdr, const char *key,
                     enum item_tier tier, uint64_t ref)
{
    if (hdr->rev_ptr == 0 || hdr->version != TAC_TUPLE_VERSION)
        return false;
    const item *meta = (const item *)(uintptr_t)hdr->rev_ptr;
    return (meta->it_flags & (ITEM_LINKED | ITEM_META)) ==
               (ITEM_LINKED | ITEM_META) &&
           meta->tier == tier && meta->nkey == hdr->nkey &&
           memcmp(ITEM_key(meta), key, hdr->nkey) == 0 &&
           item_meta_ref(meta) == ref;
}

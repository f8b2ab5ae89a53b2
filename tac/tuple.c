/*
 * tac/tuple.c - lower-tier tuple header and checksum.  See tuple.h for the
 * format.  Any thread.
 */
#include "config.h"

#include <string.h>

#include "settings.h"
#include "tac/internal.h"
#include "tac/tuple.h"
#include "util.h"

uint32_t tac_tuple_checksum(const struct tac_tuple_hdr *hdr, const char *key,
                            const char *value)
{
    struct tac_tuple_hdr h = *hdr;
    h.checksum = 0;
    uint32_t crc = util_crc32c(0, &h, sizeof(h));
    crc = util_crc32c(crc, key, h.nkey);
    return util_crc32c(crc, value, h.nbytes);
}

bool tac_tuple_sane(const struct tac_tuple_hdr *hdr, size_t room)
{
    if (hdr->version != TAC_TUPLE_VERSION || hdr->nkey == 0 ||
        hdr->nkey > KEY_MAX_LENGTH || hdr->nbytes < 2)
        return false;
    /* Summed with an overflow check: nbytes is not bounded yet, and a
     * size_t may be 32 bits. */
    size_t size;
    if (__builtin_add_overflow(sizeof(*hdr) + (size_t)hdr->nkey,
                               (size_t)hdr->nbytes, &size))
        return false;
    return size <= (size_t)settings.item_size_max && size <= room;
}

static uint64_t tuple_seq;
static uint64_t seq_limit = UINT64_MAX;     /* atomic: see tac_journal */

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

void tac_tuple_fill(struct tac_tuple_hdr *hdr, const item *it)
{
    memset(hdr, 0, sizeof(*hdr));
    hdr->seq = __atomic_add_fetch(&tuple_seq, 1, __ATOMIC_RELAXED);
    if (__builtin_expect(hdr->seq >= __atomic_load_n(&seq_limit, __ATOMIC_RELAXED), 0))
        tac_journal_reserve_seq(hdr->seq);
    hdr->cas = it->cas;
    hdr->nbytes = it->nbytes;
    hdr->flags = it->flags;
    /* Unix time: the tuple must mean the same after a restart. */
    hdr->exptime = it->exptime == 0 ? 0
                 : (uint32_t)((int64_t)process_started + it->exptime);
    hdr->time = (uint32_t)((int64_t)process_started + item_time(it));
    hdr->nkey = it->nkey;
    hdr->version = TAC_TUPLE_VERSION;
    hdr->checksum = tac_tuple_checksum(hdr, ITEM_key(it), ITEM_data(it));
}

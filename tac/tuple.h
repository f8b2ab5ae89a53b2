/*
 * tac/tuple.h - the lower-tier tuple format, shared by NVM and SSD (so a
 * move from NVM to SSD is a plain copy), and the validity check that fetch
 * and defrag use instead of a hash lookup (TaC 5.4).
 *
 * Layout, in the tier's slot:
 *   struct tac_tuple_hdr | key (nkey bytes) | value (nbytes, ends "\r\n")
 *
 * The header's flags, exptime, CAS and time are a snapshot taken when the
 * tuple was written; the DRAM meta tuple is authoritative for all of them
 * (touch and gat change only the meta tuple).  The checksum is a CRC32C
 * (util_crc32c) of the header (with checksum and revPtr as 0), the key and
 * the value, so a meta tuple can move to another DRAM chunk by rewriting
 * revPtr alone; it catches every change of up to 32 consecutive bits, so
 * every changed byte.  Every reader checks tac_tuple_sane() before it uses
 * a header's lengths, and the checksum before it uses the key or value.
 */
#ifndef TAC_TUPLE_H
#define TAC_TUPLE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "items.h"

struct tac_tuple_hdr {
    uint64_t rev_ptr;       /* the meta tuple (a DRAM address) */
    uint64_t cas;
    uint32_t nbytes;        /* value length, "\r\n" included */
    uint32_t flags;
    uint32_t exptime;
    uint32_t time;          /* last access when written */
    uint32_t checksum;
    uint8_t nkey;
    uint8_t version;        /* TAC_TUPLE_VERSION */
    uint8_t pad[2];         /* written as 0; covered by the checksum */
};

_Static_assert(sizeof(struct tac_tuple_hdr) == 40,
               "the tuple header is an on-media format: no implicit padding");

#define TAC_TUPLE_VERSION 2         /* 2: CRC32C */

static inline size_t tac_tuple_size(size_t nkey, size_t nbytes)
{
    return sizeof(struct tac_tuple_hdr) + nkey + nbytes;
}

/* Fills hdr from the item whose value is stored (it) and its meta tuple. */
void tac_tuple_fill(struct tac_tuple_hdr *hdr, const item *it, const item *meta);

/* CRC32C of header (checksum and revPtr as 0), key and value. */
uint32_t tac_tuple_checksum(const struct tac_tuple_hdr *hdr, const char *key,
                            const char *value);

/* True if a header read back from a tier is of this format and its
 * lengths are possible: 1..KEY_MAX_LENGTH key bytes, a value of at least 2
 * bytes ("\r\n"), and the whole tuple (summed in size_t, overflow checked)
 * no larger than -I (an item, whose own header is larger, fits in -I) nor
 * than `room`, the bytes the slot, buf image or read holds from the header
 * on.  Only then may tac_tuple_size() of its lengths be trusted. */
bool tac_tuple_sane(const struct tac_tuple_hdr *hdr, size_t room);

/*
 * The validity check (DESIGN.md 3): the tuple at `ref` in `tier`, whose
 * header and key are given, is live iff its revPtr is set, the meta tuple
 * it points to is linked, of that tier, has the same key, and points back
 * at `ref`.  The caller holds item_lock(item_hash(key)).  Reading the meta
 * tuple through revPtr is safe because DRAM slab chunks are never unmapped;
 * a chunk reused for another item fails the key or reference check.
 */
bool tac_tuple_valid(const struct tac_tuple_hdr *hdr, const char *key,
                     enum item_tier tier, uint64_t ref);

#endif

/*
 * item_layout.h - the layout of an item: the struct, its flags and tiers, and the
 * inline accessors of key, value and lower-tier reference.  Only layout:
 * what an item is.  What happens to one (alloc, link, reads, stores) is
 * items.h; slabs.c, assoc.c and lazy_lru.c, which sit below items.c, need
 * only this.
 */
#ifndef ITEM_LAYOUT_H
#define ITEM_LAYOUT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "base/settings.h"
#include "base/util.h"
#include "engine/item_lock.h"

/* it_flags.  All updated under the item lock, except ITEM_SLABBED which
 * only slabs.c touches while the item is free. */
#define ITEM_LINKED     0x0001  /* in the hash index and an LRU */
#define ITEM_SLABBED    0x0002  /* free, on a slab free list */
#define ITEM_FETCHED    0x0004  /* read at least once since set */
#define ITEM_ACTIVE     0x0008  /* read again after its first fetch */
#define ITEM_META       0x0010  /* meta tuple: value lives in a lower tier */
#define ITEM_TOKEN_SENT 0x0020  /* meta: a win token was handed out */
#define ITEM_STALE      0x0040  /* meta: invalidated, served as stale */
#define ITEM_CRAWLER    0x0080  /* expiry crawler's placeholder in an LRU */
#define ITEM_TRANSIENT  0x0100  /* malloc'd copy outside the index and -m:
                                   a lower-tier value copied out for a
                                   reader, or a staging item (below) */
#define ITEM_STAGING    0x0200  /* transient item taking a new value when
                                   DRAM is full; stored into a lower tier */
#define ITEM_WAS_LOWER  0x0400  /* DRAM item brought up from NVM or SSD: its
                                   version may still lie there (restart) */
#define ITEM_LOG_ORDERED 0x0800 /* -o dram_log: every record of this version
                                   in the log lies below its successor's
                                   first record (items_core.c, replace_version) */
#define ITEM_CAPPED     0x1000  /* its lower-tier copies carry a longer life
                                   than it has: the tier policy recorded the
                                   shorter one (items_core.c, set_exptime) */
#define ITEM_REPLAYED   0x2000  /* linked by the DRAM log's replay after a
                                   crash: not moved down while it runs
                                   (tac/place.c, tac_demote) */

/* Tier of the item's value (doc/design.md, "The data model").  A TIER_DRAM item holds its
 * value; an item of a lower tier is a meta tuple (ITEM_META): the same
 * core, an 8-byte reference to the tuple in that tier and the key's 8-byte
 * fingerprint; the key itself lies only in the tuple.  Its nbytes, flags,
 * exptime and CAS describe the value, so every check that needs only
 * metadata stays in DRAM. */
enum item_tier { TIER_DRAM = 0, TIER_NVM = 1, TIER_SSD = 2, TIER_COUNT };

/*
 * Layout.  Every item begins with the same 40-byte core (h_next .. nkey):
 * all that lookups, the protocols and expiry need.  A DRAM item continues
 * with its LRU fields and then data: key, '\0', value.  A compact item
 * (item_compact(): a meta tuple, the DRAM part of an NVM- or SSD-resident
 * item, which is on no LRU) continues right after the core with its
 * 8-byte reference and its key's fingerprint (item_key_fp(): the key hash
 * in the low 32 bits, a CRC-32C of the key above), and has no key: it
 * costs ITEM_COMPACT_HDR + 8 bytes of DRAM, whatever the key's length.
 * nkey still gives the key's length.  Its `time` is the access field's
 * (item_time()), and its next/prev/time/lru_seg/data do not exist: only
 * code that knows the item is not compact may touch them.
 */
typedef struct item item;
struct item {
    item *h_next;           /* hash chain: item lock */
    uint64_t cas;           /* 0 when CAS is disabled (-C) */
    rel_time_t exptime;     /* 0 = never; item lock */
    uint32_t access;        /* lazy_lru.h: time:24 | readCount:8 */
    uint32_t nbytes;        /* value length INCLUDING the trailing "\r\n" */
    uint32_t flags;         /* client flags (32 bit, as memcached 1.6) */
    uint16_t refcount;      /* atomic */
    uint16_t it_flags;      /* ITEM_* */
    uint8_t slabs_clsid;    /* slab class, 0 = not from a slab */
    uint8_t partition;      /* partition whose LRU/free list holds it */
    uint8_t tier;           /* enum item_tier */
    uint8_t nkey;           /* key length, <= KEY_MAX_LENGTH */
    /* ---- end of the core; a compact item has its reference here ---- */
    rel_time_t time;        /* last access, server clock (item_time()) */
    uint8_t lru_seg;        /* its queue of the segmented LRU (enum
                               lru_seg, items_int.h; 0 = the class's one
                               LRU); item lock and the LRU locks */
    uint8_t unused[3];
    item *next;             /* LRU links: partition LRU lock; free-list */
    item *prev;             /*   links while the chunk is free */
    char data[];            /* key, '\0', value (nbytes, ends "\r\n") */
};

#define ITEM_CORE_SIZE   __builtin_offsetof(item, time)
#define ITEM_COMPACT_HDR (ITEM_CORE_SIZE + sizeof(uint64_t))

/* Compact layout.  Told by the tier, which is fixed for an item's life
 * (a tier move makes a new item), so it may be read without the lock. */
#define item_compact(it) ((it)->tier != TIER_DRAM)

/* The key of an item that is not compact (a compact item has none). */
static inline char *item_key_(const item *it)
{
#ifndef NDEBUG
    if (item_compact(it))
        __builtin_trap();
#endif
    return (char *)it->data;
}
#define ITEM_key(it)    item_key_(it)
#define ITEM_data(it)   ((it)->data + (it)->nkey + 1)

/* Bytes of a meta tuple's key fingerprint. */
#define ITEM_FP_BYTES 8

/* With a tier key (-o tier_key) a meta tuple also keeps its tuple's write
 * sequence (8 bytes, after the fingerprint), which every read of the
 * tuple must find in it; 0 without.  Set once at start. */
extern size_t item_meta_seq_bytes;

/* Size of a meta tuple (compact layout): the DRAM an NVM- or
 * SSD-resident item costs, before rounding up to its slab chunk.  The
 * same for every key: the key lies in the tuple alone. */
static inline size_t item_compact_size(size_t nkey)
{
    (void)nkey;
    return ITEM_COMPACT_HDR + ITEM_FP_BYTES + item_meta_seq_bytes;
}

/* Bytes an item occupies in DRAM (its chunk's payload). */
static inline size_t ITEM_ntotal(const item *it)
{
    if (item_compact(it))
        return item_compact_size(it->nkey);
    return sizeof(item) + it->nkey + 1 + it->nbytes;
}

/* Where a meta tuple keeps its lower-tier reference (unaligned). */
static inline char *item_ref_ptr_(const item *it)
{
    return (char *)it + ITEM_CORE_SIZE;
}
static inline uint64_t item_meta_ref(const item *it)
{
    uint64_t ref;
    __builtin_memcpy(&ref, item_ref_ptr_(it), sizeof(ref));
    return ref;
}
static inline void item_set_meta_ref(item *it, uint64_t ref)
{
    __builtin_memcpy(item_ref_ptr_(it), &ref, sizeof(ref));
}

/* A key's fingerprint: its hash hv (item_hash()) in the low 32 bits, a
 * CRC-32C of it above.  A meta tuple keeps it instead of the key; a
 * lookup matches a meta tuple by fingerprint and length, and every read of
 * the tuple checks the key it holds.  Two keys of one length whose 64 bits
 * agree would share a meta tuple (doc/design.md, "Meta tuples keep a
 * fingerprint"). */
static inline uint64_t item_key_fp(const char *key, size_t nkey, uint32_t hv)
{
    return ((uint64_t)util_crc32c(0x9e3779b9u, key, nkey) << 32) | hv;
}

/* A meta tuple's key fingerprint (item_key_fp()). */
static inline uint64_t item_meta_fp(const item *it)
{
    uint64_t fp;
    __builtin_memcpy(&fp, (const char *)it + ITEM_COMPACT_HDR, sizeof(fp));
    return fp;
}
static inline void item_set_meta_fp(item *it, uint64_t fp)
{
    __builtin_memcpy((char *)it + ITEM_COMPACT_HDR, &fp, sizeof(fp));
}

/* A meta tuple's write sequence (item_meta_seq_bytes); 0 without one. */
static inline char *item_seq_ptr_(const item *it)
{
    return (char *)it + ITEM_COMPACT_HDR + ITEM_FP_BYTES;
}
static inline uint64_t item_meta_seq(const item *it)
{
    uint64_t seq = 0;
    if (item_meta_seq_bytes != 0)
        __builtin_memcpy(&seq, item_seq_ptr_(it), sizeof(seq));
    return seq;
}
static inline void item_set_meta_seq(item *it, uint64_t seq)
{
    if (item_meta_seq_bytes != 0)
        __builtin_memcpy(item_seq_ptr_(it), &seq, sizeof(seq));
}

/* The key hash of any item: a meta tuple's comes from its fingerprint. */
static inline uint32_t item_hv(const item *it)
{
    return item_compact(it) ? (uint32_t)item_meta_fp(it)
                            : item_hash(it->data, it->nkey);
}

/* The key fingerprint of any item. */
static inline uint64_t item_fp(const item *it)
{
    return item_compact(it) ? item_meta_fp(it)
                            : item_key_fp(it->data, it->nkey, item_hash(it->data, it->nkey));
}

/* Whether it is key's item; *fp caches key's fingerprint (0: not yet). */
static inline bool item_has_key(const item *it, const char *key, size_t nkey,
                                uint32_t hv, uint64_t *fp)
{
    if (it->nkey != nkey)
        return false;
    if (!item_compact(it))
        return __builtin_memcmp(it->data, key, nkey) == 0;
    if (*fp == 0)
        *fp = item_key_fp(key, nkey, hv);
    return item_meta_fp(it) == *fp;
}

/* Total size an item of this key and value length would take. */
static inline size_t item_make_size(size_t nkey, size_t nbytes)
{
    return sizeof(item) + nkey + 1 + nbytes;
}

#endif

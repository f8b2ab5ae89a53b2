/*
 * format.h - the on-media layout of an NVM region.
 *
 * Layout: [header, NVM_DATA_OFFSET bytes][page 0][page 1]...[tail < 1 page].
 * Page p starts at NVM_DATA_OFFSET + p * page_size; a page of class c holds
 * floor(page_size / slot_size[c]) slots from its first byte.
 *
 * The header lets a restart trust or reject a region:
 *   - magic and version name the format; header_size guards growth;
 *   - the geometry (sizes, page size, class table) says how to cut pages;
 *   - checksum (FNV-1a 64) covers every byte of the header except the
 *     flags word and itself, so it is written once per open;
 *   - flags carries NVM_HDR_DIRTY from open until a clean close.  It is one
 *     aligned 8-byte word, so setting or clearing it is failure-atomic;
 *   - open_count grows by one at each open: of two valid copies, the one
 *     with the higher count is the newer.
 * The header is kept twice, copy i at NVM_HDR_COPY_STRIDE * i, and every
 * change goes to copy 0, is persisted, then to copy 1: a crash tears at
 * most one copy, and the other still passes its checksum.  Version 1 had
 * one copy; its magic and version sit at the same offsets, so it is
 * recognized as another format version.
 * Which page belongs to which class is kept in DRAM only (see nvm.h): a
 * graceful restart gets it back from its saved state (nvm_adopt); a crash
 * scan will need it on the media, and the format version will change then.  All fields are little-endian (host order on
 * every platform libpmem supports).
 */
#ifndef NVM_FORMAT_H
#define NVM_FORMAT_H

#include <stdbool.h>
#include <stdint.h>

#include "nvm/nvm.h"

#define NVM_MAGIC "TACNVM\r\n"        /* 8 bytes, no NUL */
#define NVM_FORMAT_VERSION 3u         /* 2: two copies; 3: key_check */
#define NVM_HDR_COPIES 2u
#define NVM_HDR_COPY_STRIDE 4096u     /* copy i starts at i * stride */
#define NVM_DATA_OFFSET (NVM_HDR_COPIES * NVM_HDR_COPY_STRIDE)  /* page 0 */
#define NVM_HDR_DIRTY 1ull

struct nvm_header {
    char magic[8];                    /* NVM_MAGIC */
    uint32_t version;                 /* NVM_FORMAT_VERSION */
    uint32_t header_size;             /* sizeof(struct nvm_header) */
    uint64_t flags;                   /* NVM_HDR_DIRTY while open */
    uint64_t region_size;             /* mapped bytes */
    uint64_t data_offset;             /* NVM_DATA_OFFSET */
    uint64_t page_size;
    uint64_t npages;
    uint64_t open_count;              /* previous value + 1 at each open */
    uint32_t slot_align;              /* NVM_SLOT_ALIGN */
    uint32_t nclasses;
    uint64_t slot_size[NVM_MAX_CLASSES + 1];  /* [1..nclasses]; [0] = 0 */
    uint8_t key_check[16];            /* nvm_config.key_check */
    uint64_t checksum;                /* see above */
};

_Static_assert(sizeof(struct nvm_header) <= NVM_HDR_COPY_STRIDE,
               "each header copy must fit in its stride");
_Static_assert(NVM_DATA_OFFSET % NVM_SLOT_ALIGN == 0,
               "pages must start 256 B-aligned");

/* True when h carries this format's magic, version, size and a matching
 * checksum (the flags word is not checked: read NVM_HDR_DIRTY from it).
 * h must point to at least sizeof(struct nvm_header) readable bytes. */
bool nvm_header_valid(const struct nvm_header *h);

#endif

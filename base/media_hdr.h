/*
 * base/media_hdr.h - the one scheme of the server's on-media headers.
 *
 * Every file the server writes opens with a header of its own format: the
 * NVM region (nvm/format.h), the SSD file (ssd/internal.h), the restart
 * state file, the crash journal and the DRAM log (tac/durable/).  Each
 * begins with the same prefix, an 8-byte magic, the format's version and
 * the header's size, and each is checked by a checksum of its fixed part.
 * The NVM and SSD headers are kept in two copies written in turn, the one
 * with the higher generation winning.  This module stamps the prefix,
 * sums a header (CRC32C), tells what a header found on the media is,
 * picks the best of a format's copies, and words the refusal of a file
 * this build may not use.  Each format keeps its own struct, its own
 * geometry and its own meaning of "generation"; every header is read and
 * written byte for byte as before.
 *
 * Any thread; no state.
 */
#ifndef MEDIA_HDR_H
#define MEDIA_HDR_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* The prefix every header begins with. */
struct media_prefix {
    char magic[8];
    uint32_t version;
    uint32_t header_size;
};

/* A format's header struct begins with the prefix, field for field. */
#define MEDIA_PREFIX_CHECK(type)                                            \
    _Static_assert(offsetof(type, magic) == 0 &&                            \
                   sizeof(((type *)0)->magic) == 8 &&                       \
                   offsetof(type, version) == offsetof(struct media_prefix, version) && \
                   offsetof(type, header_size) ==                           \
                       offsetof(struct media_prefix, header_size),          \
                   #type " begins with struct media_prefix")

/* What a header read from the media is, against a format. */
enum media_found {
    MEDIA_FOREIGN,          /* not this format's magic */
    MEDIA_OTHER_VERSION,    /* this format, another version or size */
    MEDIA_OURS,             /* this format, version and size */
};

/* Writes the prefix into hdr (the rest is the format's). */
void media_stamp(void *hdr, const char magic[8], uint32_t version,
                 uint32_t header_size);
enum media_found media_classify(const void *hdr, const char magic[8],
                                uint32_t version, uint32_t header_size);
/* CRC32C of the header's first `upto` bytes (up to its checksum field). */
uint32_t media_crc(const void *hdr, size_t upto);

/* A format kept in copies (the NVM and SSD headers): where they lie, how
 * a copy's sum is checked, which copy is newer, and its name in refusals. */
struct media_format {
    const char *magic;                  /* 8 bytes */
    uint32_t version, header_size;
    unsigned copies;
    size_t stride;                      /* bytes from one copy to the next */
    bool (*sum_ok)(const void *h);
    uint64_t (*generation)(const void *h);
    const char *what;                   /* "NVM tier", "SSD tier" */
};

/* What media_pick_copy found in a header area. */
struct media_pick {
    const void *best;       /* the newest copy that is this format's and
                               passes its sum; NULL when none */
    bool magic_seen;        /* some copy bore the magic */
    uint32_t other_version; /* the version of a copy of another version */
};

void media_pick_copy(const struct media_format *f, const unsigned char *area,
                     struct media_pick *out);

/* The refusal phrase of a file whose header area holds this format's magic
 * but no copy it can use: of another format version, or damaged (no copy
 * passes its checksum). */
void media_refusal(char *buf, size_t len, const struct media_format *f,
                   const struct media_pick *p);

#endif

/*
 * base/media_hdr.c - the one scheme of the server's on-media headers; see
 * media_hdr.h.
 */
#include "config.h"

#include <stdio.h>
#include <string.h>

#include "base/media_hdr.h"
#include "base/util.h"

void media_stamp(void *hdr, const char magic[8], uint32_t version,
                 uint32_t header_size)
{
    struct media_prefix *p = hdr;
    memcpy(p->magic, magic, sizeof(p->magic));
    p->version = version;
    p->header_size = header_size;
}

enum media_found media_classify(const void *hdr, const char magic[8],
                                uint32_t version, uint32_t header_size)
{
    const struct media_prefix *p = hdr;
    if (memcmp(p->magic, magic, sizeof(p->magic)) != 0)
        return MEDIA_FOREIGN;
    return p->version == version && p->header_size == header_size
        ? MEDIA_OURS : MEDIA_OTHER_VERSION;
}

uint32_t media_crc(const void *hdr, size_t upto)
{
    return util_crc32c(0, hdr, upto);
}

const void *media_pick_copy(const unsigned char *area, unsigned copies,
                            size_t stride, const char magic[8],
                            uint32_t version, uint32_t header_size,
                            bool (*sum_ok)(const void *h),
                            uint64_t (*generation)(const void *h),
                            bool *magic_seen, uint32_t *other_version)
{
    const void *best = NULL;
    *magic_seen = false;
    *other_version = 0;
    for (unsigned i = 0; i < copies; i++) {
        const void *h = area + (size_t)i * stride;
        enum media_found f = media_classify(h, magic, version, header_size);
        if (f == MEDIA_FOREIGN)
            continue;
        *magic_seen = true;
        const struct media_prefix *p = h;
        if (p->version != version)
            *other_version = p->version;
        else if (f == MEDIA_OURS && sum_ok(h) &&
                 (best == NULL || generation(h) > generation(best)))
            best = h;
    }
    return best;
}

void media_refusal(char *buf, size_t len, const char *what, uint32_t found,
                   uint32_t ours)
{
    if (found != 0)
        snprintf(buf, len, "holds a tac-memcached %s of format version %u "
                 "(this build reads version %u)", what, found, ours);
    else
        snprintf(buf, len, "holds a tac-memcached %s whose header is damaged "
                 "(no copy passes its checksum)", what);
}

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

void media_pick_copy(const struct media_format *f, const unsigned char *area,
                     struct media_pick *out)
{
    out->best = NULL;
    out->magic_seen = false;
    out->other_version = 0;
    for (unsigned i = 0; i < f->copies; i++) {
        const void *h = area + (size_t)i * f->stride;
        enum media_found k = media_classify(h, f->magic, f->version, f->header_size);
        if (k == MEDIA_FOREIGN)
            continue;
        out->magic_seen = true;
        const struct media_prefix *p = h;
        if (p->version != f->version)
            out->other_version = p->version;
        else if (k == MEDIA_OURS && f->sum_ok(h) &&
                 (out->best == NULL || f->generation(h) > f->generation(out->best)))
            out->best = h;
    }
}

void media_refusal(char *buf, size_t len, const struct media_format *f,
                   const struct media_pick *p)
{
    if (p->other_version != 0)
        snprintf(buf, len, "holds a tac-memcached %s of format version %u "
                 "(this build reads version %u)", f->what, p->other_version,
                 f->version);
    else
        snprintf(buf, len, "holds a tac-memcached %s whose header is damaged "
                 "(no copy passes its checksum)", f->what);
}

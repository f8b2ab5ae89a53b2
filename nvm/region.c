/*
 * region.c - opening, formatting and closing an NVM region; info.
 *
 * Owns: the mapping of the backing store and the two header copies.
 *
 * Design.  nvm_open validates the configuration, computes the class table
 * (alloc.c), reads the old header area of an existing file before mapping
 * it (mapping with a size resizes the file) and refuses a path that holds
 * anything but zeros or a region of this format and geometry unless told
 * to reformat, maps the backing store, formats a fresh header marked dirty
 * (prev_state reports the old one), and builds the DRAM allocator
 * metadata.  Backings:
 *   - "numa:N": anonymous memory, mbind(MPOL_BIND) to node N, which must
 *     be listed in /sys/devices/system/node/has_memory;
 *   - a character device: device-dax, mapped whole with pmem_map_file;
 *   - anything else: a file, created or resized when a size is given.
 * Every libpmem, mmap and mbind result is checked; a failure is reported
 * as an nvm_status with errno kept from the failing call.  nvm_close makes
 * the data durable, then clears the dirty flag (see nvm/format.h).
 *
 * Threads: nvm_open and nvm_close run alone on their region; nvm_get_info
 * may run on any thread (it reads set-at-open fields and relaxed atomics).
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif

#include <errno.h>
#include <fcntl.h>
#include <libpmem.h>
#include <limits.h>
#include <numaif.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>
#include <sys/statfs.h>

#include "nvm/internal.h"
#include "base/media_hdr.h"
#include "base/util.h"

MEDIA_PREFIX_CHECK(struct nvm_header);

#define NVM_NUMA_MAX_NODE 1023
#define TMPFS_MAGIC_VALUE 0x01021994

const char *nvm_strerror(enum nvm_status st)
{
    switch (st) {
    case NVM_OK: return "ok";
    case NVM_ERR_ARG: return "invalid NVM configuration";
    case NVM_ERR_OPEN: return "cannot open or create the NVM backing path";
    case NVM_ERR_MAP: return "cannot map or sync the NVM region";
    case NVM_ERR_NUMA: return "NUMA node unavailable or mbind failed";
    case NVM_ERR_NOMEM: return "out of memory or space for the NVM region";
    case NVM_ERR_FORMAT: return "NVM region too small to format";
    case NVM_ERR_NOT_OURS: return "the NVM path holds other data";
    }
    return "unknown NVM status";
}

/* ---- Configuration ------------------------------------------------------ */

struct resolved {
    size_t page_size, slot_max;
    double factor;
    int partitions;
};

static enum nvm_status config_resolve(const struct nvm_config *cfg,
                                      struct resolved *rv)
{
    rv->page_size = cfg->page_size ? cfg->page_size : NVM_DEFAULT_PAGE_SIZE;
    rv->slot_max = cfg->slot_max ? cfg->slot_max : rv->page_size;
    rv->factor = cfg->factor != 0 ? cfg->factor : NVM_DEFAULT_FACTOR;
    rv->partitions = cfg->partitions ? cfg->partitions : 1;
    if (cfg->path == NULL || cfg->path[0] == '\0')
        return NVM_ERR_ARG;
    if (rv->page_size % NVM_SLOT_ALIGN != 0 || !(rv->factor > 1.0) ||
        rv->factor > 64.0 || rv->partitions < 1 ||
        rv->partitions > NVM_MAX_PARTITIONS || rv->slot_max > UINT32_MAX)
        return NVM_ERR_ARG;
    size_t need = (rv->slot_max + NVM_SLOT_ALIGN - 1) / NVM_SLOT_ALIGN *
                  NVM_SLOT_ALIGN;
    if (need > rv->page_size)
        rv->page_size = need;
    /* An explicit size must hold the header and one page. */
    if (cfg->size != 0 && cfg->size < NVM_DATA_OFFSET + rv->page_size)
        return NVM_ERR_ARG;
    return NVM_OK;
}

/* ---- Mapping ------------------------------------------------------------ */

static enum nvm_status status_of_errno(int err)
{
    switch (err) {
    case ENOENT: case ENOTDIR: case EACCES: case EPERM: case EISDIR:
    case EROFS: case ELOOP: case ENAMETOOLONG: case ENXIO: case ENODEV:
        return NVM_ERR_OPEN;
    case ENOSPC: case ENOMEM: case EFBIG: case EDQUOT:
        return NVM_ERR_NOMEM;
    default:
        return NVM_ERR_MAP;
    }
}

/* Is node listed in a sysfs node list such as "0-1,3"? */
static bool node_has_memory(int node)
{
    FILE *f = fopen("/sys/devices/system/node/has_memory", "r");
    if (f == NULL)
        return node == 0;           /* no NUMA in this kernel: node 0 only */
    char buf[4096];
    bool found = false;
    if (fgets(buf, sizeof(buf), f) != NULL) {
        char *s = buf;
        while (!found && *s != '\0' && *s != '\n') {
            char *end;
            long a = strtol(s, &end, 10), b = a;
            if (end == s)
                break;
            if (*end == '-')
                b = strtol(end + 1, &end, 10);
            found = node >= a && node <= b;
            s = *end == ',' ? end + 1 : end;
        }
    }
    fclose(f);
    return found;
}

static enum nvm_status map_numa(struct nvm_region *r, const char *spec,
                                size_t size)
{
    char *end;
    errno = 0;
    long node = strtol(spec, &end, 10);
    if (end == spec || *end != '\0' || errno != 0 || node < 0 ||
        node > NVM_NUMA_MAX_NODE || size == 0) {
        errno = EINVAL;
        return NVM_ERR_ARG;
    }
    if (!node_has_memory((int)node)) {
        errno = ENODEV;
        return NVM_ERR_NUMA;
    }
    void *p = mmap(NULL, size, PROT_READ | PROT_WRITE,
                   MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED)
        return status_of_errno(errno);
    unsigned long mask[(NVM_NUMA_MAX_NODE + 1) / (8 * sizeof(unsigned long))];
    memset(mask, 0, sizeof(mask));
    mask[node / (8 * sizeof(unsigned long))] |=
        1ul << (node % (8 * sizeof(unsigned long)));
    if (mbind(p, size, MPOL_BIND, mask, sizeof(mask) * 8 + 1, 0) != 0) {
        int err = errno;
        munmap(p, size);
        errno = err;
        return NVM_ERR_NUMA;
    }
    r->base = p;
    r->mapped_len = r->capacity = size;
    r->is_anon = true;
    r->backing = "numa";
    return NVM_OK;
}

static enum nvm_status map_file(struct nvm_region *r, const char *path,
                                size_t size)
{
    struct stat st;
    bool exists = lstat(path, &st) == 0;
    bool devdax = exists && S_ISCHR(st.st_mode);
    size_t len = 0;
    int is_pmem = 0;
    void *p;

    if (exists && S_ISLNK(st.st_mode)) {
        fprintf(stderr, "tac-memcached: %s is a symbolic link; cache files are "
                "never opened through one: give the path of the file or device "
                "itself\n", path);
        errno = ELOOP;
        return NVM_ERR_OPEN;
    }
    if (devdax) {                   /* map what is there, whole */
        p = pmem_map_file(path, 0, 0, 0, &len, &is_pmem);
        r->created = false;
    } else {
        /* A file: opened here, private and not through a link, and mapped
         * by its descriptor's own path (libpmem opens by path). */
        int fd = util_open_private(path, size == 0 ? O_RDWR : O_RDWR | O_CREAT,
                                   &r->created);
        if (fd < 0)
            return status_of_errno(errno);
        char fdpath[UTIL_FD_PATH_MAX];
        util_fd_path(fd, fdpath);
        if (size == 0)
            p = pmem_map_file(fdpath, 0, 0, 0, &len, &is_pmem);
        else
            p = pmem_map_file(fdpath, size, PMEM_FILE_CREATE, 0600, &len, &is_pmem);
        int err = errno;
        close(fd);
        errno = err;
    }
    if (p == NULL) {
        int err = errno;
        if (r->created)             /* e.g. no room: leave nothing behind */
            unlink(path);
        r->created = false;
        errno = err;
        return status_of_errno(err);
    }
    r->base = p;
    r->mapped_len = len;
    r->capacity = size != 0 && size < len ? size : len;
    if (size > len) {
        errno = EINVAL;
        return NVM_ERR_ARG;         /* device-dax smaller than asked */
    }
    r->is_pmem = pmem_is_pmem(p, len) != 0;
    struct statfs sfs;
    if (devdax)
        r->backing = "devdax";
    else if (r->is_pmem)
        r->backing = "pmem-file";
    else if (statfs(path, &sfs) == 0 && sfs.f_type == TMPFS_MAGIC_VALUE)
        r->backing = "tmpfs-file";
    else
        r->backing = "file";
    return NVM_OK;
}

static enum nvm_status region_map(struct nvm_region *r, const char *path,
                                  size_t size)
{
    if (strncmp(path, "numa:", 5) == 0)
        return map_numa(r, path + 5, size);
    return map_file(r, path, size);
}

static void region_unmap(struct nvm_region *r)
{
    if (r->base == NULL)
        return;
    if (r->is_anon)
        munmap(r->base, r->mapped_len);
    else
        pmem_unmap(r->base, r->mapped_len);
    r->base = NULL;
}

static int query_numa_node(const void *addr)
{
    int node = -1;
    if (get_mempolicy(&node, NULL, 0, (void *)addr,
                      MPOL_F_NODE | MPOL_F_ADDR) != 0)
        return -1;
    return node;
}

/* ---- Header ------------------------------------------------------------- */

/* Makes [addr, addr+len) durable: pmem_persist, msync, or nothing (anon). */
static bool region_persist(const struct nvm_region *r, void *addr, size_t len)
{
    if (r->is_anon)
        return true;
    if (r->is_pmem) {
        pmem_persist(addr, len);
        return true;
    }
    return pmem_msync(addr, len) == 0;
}

static uint64_t header_checksum(const struct nvm_header *h)
{
    struct nvm_header tmp;
    memcpy(&tmp, h, sizeof(tmp));
    tmp.flags = 0;
    tmp.checksum = 0;
    const unsigned char *b = (const unsigned char *)&tmp;
    uint64_t x = 0xcbf29ce484222325ull;         /* FNV-1a 64 */
    for (size_t i = 0; i < sizeof(tmp); i++)
        x = (x ^ b[i]) * 0x100000001b3ull;
    return x;
}

bool nvm_header_valid(const struct nvm_header *h)
{
    return media_classify(h, NVM_MAGIC, NVM_FORMAT_VERSION, sizeof(*h)) == MEDIA_OURS &&
           h->checksum == header_checksum(h);
}

static bool copy_sum_ok(const void *h)
{
    return nvm_header_valid(h);
}

static uint64_t copy_generation(const void *h)
{
    return ((const struct nvm_header *)h)->open_count;
}

static const struct media_format nvm_format = {
    .magic = NVM_MAGIC, .version = NVM_FORMAT_VERSION,
    .header_size = sizeof(struct nvm_header), .copies = NVM_HDR_COPIES,
    .stride = NVM_HDR_COPY_STRIDE, .sum_ok = copy_sum_ok,
    .generation = copy_generation, .what = "NVM tier",
};

static _Thread_local char refusal[256];

const char *nvm_refusal(void)
{
    return refusal;
}

static struct nvm_header *header_copy(const struct nvm_region *r, unsigned i)
{
    return (struct nvm_header *)(r->base + (size_t)i * NVM_HDR_COPY_STRIDE);
}

/* Whether the bytes after the header area look unused: read from fd when
 * it is open (a file, before mapping), else from the mapping at area. */
static bool rest_blank(const unsigned char *area, uint64_t capacity, int fd)
{
    if (fd >= 0)
        return util_file_blank(fd, NVM_DATA_OFFSET, capacity);
    uint64_t end = capacity < NVM_DATA_OFFSET + UTIL_BLANK_PROBE
                   ? capacity : NVM_DATA_OFFSET + UTIL_BLANK_PROBE;
    for (uint64_t i = NVM_DATA_OFFSET; i < end; i++)
        if (area[i] != 0)
            return false;
    return true;
}

/* What a header area (NVM_DATA_OFFSET bytes) says against the geometry r
 * will have at capacity bytes (r's classes and page size are set); fd is
 * the file, or -1 when area is the mapping itself.  Sets r->prev_state and
 * r->open_count and, for NVM_PREV_OTHER, the refusal. */
static void classify_header(struct nvm_region *r, const unsigned char *area,
                            uint64_t capacity, int fd)
{
    struct media_pick pick;
    media_pick_copy(&nvm_format, area, &pick);
    const struct nvm_header *best = pick.best;
    r->prev_state = NVM_PREV_OTHER;
    if (best != NULL) {
        uint64_t npages = capacity >= NVM_DATA_OFFSET
                          ? (capacity - NVM_DATA_OFFSET) / r->page_size : 0;
        bool fits = best->region_size == capacity &&
                    best->data_offset == NVM_DATA_OFFSET &&
                    best->page_size == r->page_size &&
                    best->npages == npages &&
                    best->slot_align == NVM_SLOT_ALIGN &&
                    best->nclasses == r->nclasses;
        for (unsigned c = 1; fits && c <= r->nclasses; c++)
            fits = best->slot_size[c] == r->classes[c].slot_size;
        const char *why = util_key_check_refusal(best->key_check, r->key_check);
        if (fits && why != NULL) {
            snprintf(refusal, sizeof(refusal), "holds a tac-memcached NVM tier %s", why);
            return;
        }
        if (fits) {
            r->prev_state = (best->flags & NVM_HDR_DIRTY) ? NVM_PREV_DIRTY
                                                          : NVM_PREV_CLEAN;
            r->open_count = best->open_count;
            return;
        }
        snprintf(refusal, sizeof(refusal), "holds a tac-memcached NVM tier of "
                 "another geometry (size %llu, page %llu bytes, %u slot "
                 "classes; these options ask for %llu, %zu, %u)",
                 (unsigned long long)best->region_size,
                 (unsigned long long)best->page_size, best->nclasses,
                 (unsigned long long)capacity, r->page_size, r->nclasses);
    } else if (pick.magic_seen) {
        media_refusal(refusal, sizeof(refusal), &nvm_format, &pick);
    } else {
        size_t i = 0;
        while (i < NVM_DATA_OFFSET && area[i] == 0)
            i++;
        if (i == NVM_DATA_OFFSET && rest_blank(area, capacity, fd)) {
            r->prev_state = NVM_PREV_NONE;
            return;
        }
        snprintf(refusal, sizeof(refusal),
                 "holds data that is not a tac-memcached NVM tier");
    }
}

/* Classifies an existing regular file from its first bytes, before it is
 * mapped (mapping with a size would resize it).  A file that does not
 * exist, a device and numa:N are left to inspect_mapped. */
static enum nvm_status inspect_file(struct nvm_region *r, const char *path,
                                    size_t size, bool *done)
{
    struct stat st;
    *done = false;
    if (strncmp(path, "numa:", 5) == 0 || stat(path, &st) != 0 ||
        !S_ISREG(st.st_mode))
        return NVM_OK;
    int fd = util_open_private(path, O_RDONLY, NULL);
    if (fd < 0)
        return status_of_errno(errno);
    unsigned char *area = calloc(1, NVM_DATA_OFFSET);
    ssize_t n = area != NULL ? pread(fd, area, NVM_DATA_OFFSET, 0) : -1;
    int err = errno;
    if (n >= 0)
        classify_header(r, area, size != 0 ? size : (uint64_t)st.st_size, fd);
    close(fd);
    free(area);
    if (n < 0) {
        errno = err;
        return area == NULL ? NVM_ERR_NOMEM : NVM_ERR_OPEN;
    }
    *done = true;
    return NVM_OK;
}

/* Formats the header: both copies in turn, each persisted before the next. */
static enum nvm_status header_format(struct nvm_region *r)
{
    struct nvm_header n;
    memset(&n, 0, sizeof(n));
    media_stamp(&n, NVM_MAGIC, NVM_FORMAT_VERSION, sizeof(n));
    n.flags = NVM_HDR_DIRTY;
    n.region_size = r->capacity;
    n.data_offset = NVM_DATA_OFFSET;
    n.page_size = r->page_size;
    n.npages = r->npages;
    n.open_count = r->open_count + 1;
    n.slot_align = NVM_SLOT_ALIGN;
    n.nclasses = r->nclasses;
    memcpy(n.key_check, r->key_check, sizeof(n.key_check));
    for (unsigned c = 1; c <= r->nclasses; c++)
        n.slot_size[c] = r->classes[c].slot_size;
    n.checksum = header_checksum(&n);
    for (unsigned i = 0; i < NVM_HDR_COPIES; i++) {
        struct nvm_header *h = header_copy(r, i);
        memcpy(h, &n, sizeof(n));
        if (!region_persist(r, h, sizeof(n)))
            return NVM_ERR_MAP;
    }
    return NVM_OK;
}

/* ---- Open / close ------------------------------------------------------- */

enum nvm_status nvm_open(const struct nvm_config *cfg, struct nvm_region **out)
{
    struct resolved rv;
    struct nvm_region *r;
    enum nvm_status st;

    if (out == NULL || cfg == NULL) {
        errno = EINVAL;
        return NVM_ERR_ARG;
    }
    *out = NULL;
    if ((st = config_resolve(cfg, &rv)) != NVM_OK) {
        errno = EINVAL;
        return st;
    }
    if ((r = calloc(1, sizeof(*r))) == NULL ||
        (r->path = strdup(cfg->path)) == NULL) {
        free(r);
        return NVM_ERR_NOMEM;
    }
    r->page_size = rv.page_size;
    r->nparts = rv.partitions;
    r->read_ns = cfg->read_ns;
    r->write_ns = cfg->write_ns;
    memcpy(r->key_check, cfg->key_check, sizeof(r->key_check));
    if ((st = nvm_classes_init(r, rv.factor, rv.slot_max)) != NVM_OK)
        goto fail;
    bool inspected;
    if ((st = inspect_file(r, cfg->path, cfg->size, &inspected)) != NVM_OK)
        goto fail;
    if (inspected && r->prev_state == NVM_PREV_OTHER && !cfg->reformat) {
        st = NVM_ERR_NOT_OURS;
        goto fail;
    }
    if ((st = region_map(r, cfg->path, cfg->size)) != NVM_OK)
        goto fail;
    if (r->capacity < NVM_DATA_OFFSET + r->page_size) {
        errno = EINVAL;
        st = NVM_ERR_FORMAT;
        goto fail;
    }
    r->npages = (r->capacity - NVM_DATA_OFFSET) / r->page_size;
    if (!inspected && !r->is_anon && !r->created) {     /* a device */
        classify_header(r, (const unsigned char *)r->base, r->capacity, -1);
        if (r->prev_state == NVM_PREV_OTHER && !cfg->reformat) {
            st = NVM_ERR_NOT_OURS;
            goto fail;
        }
    }
    if ((st = header_format(r)) != NVM_OK)
        goto fail;
    r->numa_node = query_numa_node(r->base);
    if ((st = nvm_alloc_init(r)) != NVM_OK)
        goto fail;
    *out = r;
    return NVM_OK;

fail:;
    int err = errno;
    nvm_abandon(r);
    errno = err;
    return st;
}

void nvm_abandon(struct nvm_region *r)
{
    if (r == NULL)
        return;
    nvm_alloc_destroy(r);
    region_unmap(r);
    if (r->created)
        unlink(r->path);
    free(r->path);
    free(r);
}

bool nvm_close(struct nvm_region *r)
{
    if (r == NULL)
        return false;
    bool durable = false;
    if (!r->is_anon) {
        durable = true;
        if (r->is_pmem)
            pmem_drain();
        else
            durable = pmem_msync(r->base, r->capacity) == 0;
        for (unsigned i = 0; durable && i < NVM_HDR_COPIES; i++) {
            struct nvm_header *h = header_copy(r, i);
            h->flags = 0;
            durable = region_persist(r, &h->flags, sizeof(h->flags));
        }
    }
    nvm_alloc_destroy(r);
    region_unmap(r);
    free(r->path);
    free(r);
    return durable;
}

void nvm_get_info(const struct nvm_region *r, struct nvm_info *out)
{
    memset(out, 0, sizeof(*out));
    out->backing = r->backing;
    out->path = r->path;
    out->is_pmem = r->is_pmem;
    out->numa_node = r->numa_node;
    out->prev_state = r->prev_state;
    out->prev_open_count = r->open_count;
    out->open_count = r->open_count + 1;
    out->capacity = r->capacity;
    out->page_size = r->page_size;
    out->data_offset = NVM_DATA_OFFSET;
    out->pages_total = r->npages;
    out->pages_used = r->npages - nvm_free_pages(r);
    out->bytes_used = NVM_LOAD(&r->bytes_used);
    out->pages_reused = NVM_LOAD(&r->pages_reused);
    out->pages_drained = NVM_LOAD(&r->pages_drained);
    out->dram_bytes = NVM_LOAD(&r->dram_bytes);
    out->read_ns = r->read_ns;
    out->write_ns = r->write_ns;
    out->read_blocks = __atomic_load_n(&r->read_blocks, __ATOMIC_RELAXED);
    out->nclasses = r->nclasses;
    out->partitions = r->nparts;
    for (unsigned c = 1; c <= r->nclasses; c++)
        out->slots_used += NVM_LOAD(&r->classes[c].used);
}

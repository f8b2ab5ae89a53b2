/*
 * store.c - opening, formatting and closing an SSD store; the page table.
 *
 * Owns: the file descriptor, the two header blocks at offset 0, and the DRAM
 * page table (version, state, live bytes, free list) plus counters.
 *
 * Design.  ssd_open validates the configuration, opens the path O_DIRECT
 * (a refusal is reported as SSD_ERR_DIRECT, never silently buffered),
 * reads the old header area and refuses a path that holds anything but
 * zeros or a store of this format and geometry (unless told to reformat),
 * preallocates a file with fallocate (ftruncate when the file system cannot
 * fallocate), writes a fresh header marked dirty (prev_state reports the
 * old one), and starts the I/O engine: the uring write
 * reaper, or the thread pool when io_uring is refused or not wanted.
 * ssd_close drains buf writes, fdatasyncs, and writes the header clean.
 *
 * Pages: FREE -> OPEN when handed out; OPEN -> SEALED when no buf slot is
 * left to hand out and every buf handed out was written or released;
 * SEALED -> FREE (version bumped, skipping 0) as soon as its live bytes
 * reach 0.  All transitions are under store->lock; the version is also an
 * atomic so that reference checks take no lock.
 *
 * Threads: ssd_open/ssd_close alone; everything else from any thread.
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif

#include <errno.h>
#include <fcntl.h>
#include <stddef.h>
#include <stdio.h>
#include <linux/fs.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <sys/ioctl.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <unistd.h>

#include "ssd/internal.h"
#include "base/media_hdr.h"
#include "base/util.h"

MEDIA_PREFIX_CHECK(struct ssd_disk_header);

const char *ssd_strerror(enum ssd_status st)
{
    switch (st) {
    case SSD_OK: return "ok";
    case SSD_ERR_ARG: return "bad configuration or argument";
    case SSD_ERR_OPEN: return "cannot open, create or size the SSD path";
    case SSD_ERR_DIRECT: return "file system refuses O_DIRECT";
    case SSD_ERR_NOMEM: return "out of memory";
    case SSD_ERR_IO: return "SSD I/O error";
    case SSD_ERR_URING: return "io_uring setup failed";
    case SSD_ERR_FULL: return "no free SSD page";
    case SSD_ERR_NOSPACE: return "tuple does not fit in the buf";
    case SSD_ERR_STALE: return "stale SSD reference";
    case SSD_ERR_NOT_OURS: return "the path holds other data";
    }
    return "unknown ssd status";
}

uint64_t ssd_page_fpos(const struct ssd_store *s, unsigned page)
{
    const struct ssd_file *f = &s->files[ssd_page_file(s, page)];
    return SSD_DATA_OFF + (uint64_t)(page - f->first_page) * s->page_size;
}

int ssd_page_fd(const struct ssd_store *s, unsigned page)
{
    return s->files[ssd_page_file(s, page)].fd;
}

unsigned ssd_page_file(const struct ssd_store *s, unsigned page)
{
    unsigned k = s->nfiles;
    while (k > 1 && page < s->files[k - 1].first_page)
        k--;
    return k - 1;
}

/* cfg's files into s (paths copied; one file when cfg->nfiles is 0). */
static enum ssd_status check_config(const struct ssd_config *c,
                                    size_t *page, size_t *buf)
{
    *page = c->page_size ? c->page_size : SSD_DEFAULT_PAGE_SIZE;
    *buf = c->buf_size ? c->buf_size : SSD_DEFAULT_BUF_SIZE;
    if (c->nfiles > SSD_MAX_FILES)
        return SSD_ERR_ARG;
    for (unsigned k = 0; k < (c->nfiles ? c->nfiles : 1); k++) {
        const char *p = c->nfiles ? c->paths[k] : c->path;
        uint64_t size = c->nfiles ? c->sizes[k] : c->size;
        if (p == NULL || p[0] == '\0')
            return SSD_ERR_ARG;
        /* Size check before touching the file system where we can. */
        if (size != 0 && size < *page)
            return SSD_ERR_ARG;
    }
    if (*buf < SSD_BLOCK || *buf % SSD_BLOCK != 0 || *buf > (1u << 30))
        return SSD_ERR_ARG;
    if (*page < *buf || *page % *buf != 0 || (uint64_t)*page > UINT32_MAX)
        return SSD_ERR_ARG;
    if (c->engine != SSD_IO_URING && c->engine != SSD_IO_THREADS)
        return SSD_ERR_ARG;
    return SSD_OK;
}

/* Opens the backing path (creating a file) and finds the size the store
 * will have; *size in/out.  A size asked for is the pages' room: the
 * header blocks come on top (a device gives at most its size), so that a
 * file of N pages' bytes holds N pages, as memcached's extstore file of
 * that size does.  Nothing is written: the header is read first.
 * *created says whether this call created the file, so that a failed
 * start removes it again. */
static enum ssd_status open_backing(const char *path, uint64_t *size, int *fdp,
                                    bool *created, bool *resize)
{
    *created = false;
    *resize = false;
    int fd = util_open_private(path, O_RDWR | O_CREAT | O_DIRECT, created);
    if (fd < 0) {
        int e = errno;
        if (e == EINVAL && *created)
            unlink(path);
        errno = e;
        return e == EINVAL ? SSD_ERR_DIRECT : SSD_ERR_OPEN;
    }
    struct stat st;
    if (fstat(fd, &st) != 0)
        goto fail;
    if (S_ISBLK(st.st_mode)) {
        uint64_t dev;
        if (ioctl(fd, BLKGETSIZE64, &dev) != 0)
            goto fail;
        if (*size == 0 || *size > dev - SSD_DATA_OFF || dev < SSD_DATA_OFF)
            *size = dev;
        else
            *size += SSD_DATA_OFF;
    } else if (*size == 0) {
        *size = (uint64_t)st.st_size;
    } else {
        *size += SSD_DATA_OFF;
        *resize = (uint64_t)st.st_size != *size;
    }
    *fdp = fd;
    return SSD_OK;
fail: {
        int e = errno;
        close(fd);
        if (*created) {
            unlink(path);
            *created = false;
        }
        errno = e;
        return SSD_ERR_OPEN;
    }
}

/* Preallocates the file to size (fallocate, else ftruncate). */
static enum ssd_status size_backing(int fd, uint64_t size)
{
    if (ftruncate(fd, (off_t)size) != 0)
        return SSD_ERR_OPEN;
    int rc = fallocate(fd, 0, 0, (off_t)size);
    if (rc != 0 && errno != EOPNOTSUPP && errno != ENOSYS)
        return SSD_ERR_OPEN;
    return SSD_OK;
}

static _Thread_local char refusal[256];
static _Thread_local const char *refused_path;

const char *ssd_refusal(void)
{
    return refusal;
}

const char *ssd_refused_path(void)
{
    return refused_path != NULL ? refused_path : "";
}

static uint32_t header_crc(const struct ssd_disk_header *h)
{
    return media_crc(h, offsetof(struct ssd_disk_header, checksum));
}

/* Writes file f's header, both copies in turn, each made durable before
 * the next; O_DIRECT needs aligned 4 KiB buffers. */
static enum ssd_status write_file_header(struct ssd_store *s, unsigned k,
                                         uint32_t dirty, void *blk)
{
    const struct ssd_file *f = &s->files[k];
    memset(blk, 0, SSD_BLOCK);
    struct ssd_disk_header *h = blk;
    media_stamp(h, SSD_MAGIC, SSD_FORMAT_VERSION, sizeof *h);
    h->generation = s->generation;
    h->dirty = dirty;
    h->size = f->size;
    h->page_size = s->page_size;
    h->buf_size = s->buf_size;
    h->data_off = SSD_DATA_OFF;
    h->npages = f->npages;
    h->file_index = k;
    h->nfiles = s->nfiles;
    h->set_id = s->set_id;
    h->first_page = f->first_page;
    memcpy(h->key_check, s->key_check, sizeof h->key_check);
    h->checksum = header_crc(h);
    for (unsigned i = 0; i < SSD_HDR_COPIES; i++) {
        ssize_t n = pwrite(f->fd, blk, SSD_BLOCK, (off_t)i * SSD_BLOCK);
        int e = errno;
        if (n != (ssize_t)SSD_BLOCK) {
            ST_ADD(s, io_errors, 1);
            errno = n < 0 ? e : EIO;
            /* Some file systems accept O_DIRECT at open and refuse the I/O. */
            return n < 0 && e == EINVAL ? SSD_ERR_DIRECT : SSD_ERR_IO;
        }
        if (fdatasync(f->fd) != 0) {
            ST_ADD(s, io_errors, 1);
            return SSD_ERR_IO;
        }
    }
    return SSD_OK;
}

/* Every file's header, all of one new generation. */
static enum ssd_status write_header(struct ssd_store *s, uint32_t dirty)
{
    void *blk;
    if (posix_memalign(&blk, SSD_BLOCK, SSD_BLOCK) != 0)
        return SSD_ERR_NOMEM;
    ++s->generation;
    enum ssd_status st = SSD_OK;
    for (unsigned k = 0; k < s->nfiles && st == SSD_OK; k++)
        st = write_file_header(s, k, dirty, blk);
    free(blk);
    return st;
}

static bool copy_sum_ok(const void *h)
{
    return ((const struct ssd_disk_header *)h)->checksum == header_crc(h);
}

static uint64_t copy_generation(const void *h)
{
    return ((const struct ssd_disk_header *)h)->generation;
}

static const struct media_format ssd_format = {
    .magic = SSD_MAGIC, .version = SSD_FORMAT_VERSION,
    .header_size = sizeof(struct ssd_disk_header), .copies = SSD_HDR_COPIES,
    .stride = SSD_BLOCK, .sum_ok = copy_sum_ok, .generation = copy_generation,
    .what = "SSD tier",
};

/* A header of this format found in file k: its geometry and place in the
 * set against what s will have.  Sets f->prev_state, and for
 * SSD_PREV_OTHER the refusal phrase. */
static void classify_ours(struct ssd_store *s, unsigned k,
                          const struct ssd_disk_header *best)
{
    struct ssd_file *f = &s->files[k];
    f->prev_state = SSD_PREV_OTHER;
    if (best->size != f->size || best->page_size != s->page_size ||
        best->buf_size != s->buf_size || best->data_off != SSD_DATA_OFF ||
        best->npages != f->npages) {
        snprintf(refusal, sizeof refusal, "holds a tac-memcached SSD tier of "
                 "another geometry (size %llu, page %llu, buf %llu bytes; "
                 "these options ask for %llu, %llu, %llu)",
                 (unsigned long long)best->size,
                 (unsigned long long)best->page_size,
                 (unsigned long long)best->buf_size,
                 (unsigned long long)f->size, (unsigned long long)s->page_size,
                 (unsigned long long)s->buf_size);
        return;
    }
    if (best->nfiles != s->nfiles || best->file_index != k ||
        best->first_page != f->first_page) {
        snprintf(refusal, sizeof refusal, "holds file %u of an SSD tier of %u "
                 "files, given here as file %u of %u (give every file of the "
                 "tier, in the order it was first given)",
                 best->file_index + 1, best->nfiles, k + 1, s->nfiles);
        return;
    }
    const char *why = util_key_check_refusal(best->key_check, s->key_check);
    if (why != NULL) {
        snprintf(refusal, sizeof refusal, "holds a tac-memcached SSD tier %s", why);
        return;
    }
    f->prev_state = best->dirty ? SSD_PREV_DIRTY : SSD_PREV_CLEAN;
    f->prev_generation = best->generation;
    f->set_id = best->set_id;
}

/* What file k's header area (SSD_DATA_OFF bytes, zeros past the end of a
 * short file) says. */
static void classify_header(struct ssd_store *s, unsigned k,
                            const unsigned char *area)
{
    struct ssd_file *f = &s->files[k];
    struct media_pick pick;
    media_pick_copy(&ssd_format, area, &pick);
    if (pick.best != NULL) {
        classify_ours(s, k, pick.best);
        return;
    }
    f->prev_state = SSD_PREV_OTHER;
    if (pick.magic_seen) {
        media_refusal(refusal, sizeof refusal, &ssd_format, &pick);
        return;
    }
    size_t i = 0;
    while (i < SSD_DATA_OFF && area[i] == 0)
        i++;
    if (i == SSD_DATA_OFF && util_file_blank(f->fd, SSD_DATA_OFF, f->size)) {
        f->prev_state = SSD_PREV_NONE;
        return;
    }
    snprintf(refusal, sizeof refusal,
             "holds data that is not a tac-memcached SSD tier");
}

static enum ssd_status read_prev_header(struct ssd_store *s, unsigned k)
{
    void *area;
    if (posix_memalign(&area, SSD_BLOCK, SSD_DATA_OFF) != 0)
        return SSD_ERR_NOMEM;
    memset(area, 0, SSD_DATA_OFF);
    ssize_t n = pread(s->files[k].fd, area, SSD_DATA_OFF, 0);
    int e = errno;
    if (n >= 0)
        classify_header(s, k, area);
    free(area);
    if (n < 0) {
        ST_ADD(s, io_errors, 1);
        errno = e;
        return e == EINVAL ? SSD_ERR_DIRECT : SSD_ERR_IO;
    }
    return SSD_OK;
}

/* The files' headers, each ours, taken together: one set, one moment.
 * A file new or blank beside files of the tier was lost or replaced;
 * a file of another set or another generation was swapped in.  Headers
 * are written file 0 first, so a crash among those writes leaves files
 * 0..j one generation ahead of the rest: such a set is taken as dirty
 * (a crash scan follows), at the newer generation.  Sets s->prev_state
 * (SSD_PREV_OTHER with the refusal of the file at fault) and the
 * generation and set id the store goes on with. */
static void classify_set(struct ssd_store *s)
{
    unsigned none = 0, dirty = 0, ref = s->nfiles;
    uint64_t top = 0;
    for (unsigned k = 0; k < s->nfiles; k++) {
        const struct ssd_file *f = &s->files[k];
        if (f->prev_state == SSD_PREV_OTHER) {
            s->prev_state = SSD_PREV_OTHER;
            refused_path = f->path;
            return;
        }
        none += f->prev_state == SSD_PREV_NONE;
        dirty += f->prev_state == SSD_PREV_DIRTY;
        if (f->prev_state != SSD_PREV_NONE && ref == s->nfiles)
            ref = k;
        if (f->prev_state != SSD_PREV_NONE && f->prev_generation > top)
            top = f->prev_generation;
    }
    s->prev_state = none == s->nfiles ? SSD_PREV_NONE
                  : dirty > 0 ? SSD_PREV_DIRTY : SSD_PREV_CLEAN;
    if (none == s->nfiles)
        return;
    const struct ssd_file *r = &s->files[ref];
    bool behind = false;            /* a file one generation back seen */
    for (unsigned k = 0; k < s->nfiles; k++) {
        const struct ssd_file *f = &s->files[k];
        bool torn = f->prev_generation + 1 == top;
        if (f->prev_state == SSD_PREV_NONE)
            snprintf(refusal, sizeof refusal, "is new or blank, while %s holds "
                     "file %u of this SSD tier's %u (a file of the tier is "
                     "missing or was replaced)", r->path, ref + 1, s->nfiles);
        else if (f->set_id != r->set_id)
            snprintf(refusal, sizeof refusal, "holds a file of another SSD "
                     "tier than %s", r->path);
        else if ((f->prev_generation != top && !torn) ||
                 (f->prev_generation == top && behind))
            snprintf(refusal, sizeof refusal, "holds this SSD tier's file %u "
                     "as of another moment than the others (generation %llu, "
                     "the newest is %llu)", k + 1,
                     (unsigned long long)f->prev_generation,
                     (unsigned long long)top);
        else {
            behind |= torn;
            continue;
        }
        s->prev_state = SSD_PREV_OTHER;
        refused_path = f->path;
        return;
    }
    if (behind)
        s->prev_state = SSD_PREV_DIRTY;
    s->generation = s->prev_generation = top;
    s->set_id = r->set_id;
}

/* The same file given twice (by two names, or a link): refused. */
static bool same_file_twice(struct ssd_store *s)
{
    for (unsigned k = 0; k < s->nfiles; k++) {
        struct stat a;
        if (fstat(s->files[k].fd, &a) != 0)
            continue;
        for (unsigned j = 0; j < k; j++) {
            struct stat b;
            if (fstat(s->files[j].fd, &b) == 0 && a.st_dev == b.st_dev &&
                a.st_ino == b.st_ino && a.st_rdev == b.st_rdev) {
                snprintf(refusal, sizeof refusal, "is the same file as %s: "
                         "each file of the SSD tier is given once",
                         s->files[j].path);
                refused_path = s->files[k].path;
                return true;
            }
        }
    }
    return false;
}

/* Lock held or no other thread: page id onto file k's free list. */
static void do_free_push(struct ssd_store *s, unsigned id)
{
    struct ssd_file *f = &s->files[ssd_page_file(s, id)];
    s->pages[id].next_free = f->free_head;
    f->free_head = (int)id;
}

static enum ssd_status init_pages(struct ssd_store *s)
{
    s->pages = calloc(s->npages, sizeof *s->pages);
    s->buf_used = calloc((size_t)s->npages * s->bufs_per_page,
                         sizeof *s->buf_used);
    s->buf_first = calloc((size_t)s->npages * s->bufs_per_page,
                          sizeof *s->buf_first);
    if (s->pages == NULL || s->buf_used == NULL || s->buf_first == NULL)
        return SSD_ERR_NOMEM;
    for (unsigned k = 0; k < s->nfiles; k++)
        s->files[k].free_head = -1;
    for (unsigned i = s->npages; i-- > 0;) {
        atomic_init(&s->pages[i].version, 1);
        s->pages[i].state = PAGE_FREE;
        do_free_push(s, i);
    }
    s->cur_page = -1;
    atomic_store(&s->st_pages_free, s->npages);
    return SSD_OK;
}

static void free_store(struct ssd_store *s)
{
    for (unsigned k = 0; k < s->nfiles; k++) {
        if (s->files[k].fd >= 0)
            close(s->files[k].fd);
        free(s->files[k].path);
    }
    pthread_mutex_destroy(&s->lock);
    pthread_mutex_destroy(&s->wlock);
    pthread_mutex_destroy(&s->pool_start_lock);
    pthread_mutex_destroy(&s->idle_lock);
    pthread_cond_destroy(&s->idle_cond);
    free(s->pages);
    free(s->buf_used);
    free(s->buf_first);
    free(s);
}

/* Opens every file of cfg and gives each its range of page ids: a file's
 * pages follow the previous file's, and the pages past SSD_MAX_PAGES in
 * all go unused. */
static enum ssd_status open_files(struct ssd_store *s, const struct ssd_config *cfg,
                                  bool *resize)
{
    s->nfiles = cfg->nfiles ? cfg->nfiles : 1;
    for (unsigned k = 0; k < s->nfiles; k++)
        s->files[k].fd = -1;
    for (unsigned k = 0; k < s->nfiles; k++) {
        struct ssd_file *f = &s->files[k];
        f->size = cfg->nfiles ? cfg->sizes[k] : cfg->size;
        f->path = strdup(cfg->nfiles ? cfg->paths[k] : cfg->path);
        if (f->path == NULL)
            return SSD_ERR_NOMEM;
        refused_path = f->path;     /* the file an error is about */
        enum ssd_status st = open_backing(f->path, &f->size, &f->fd,
                                          &f->created, &resize[k]);
        if (st != SSD_OK)
            return st;
        if (f->size < SSD_DATA_OFF + s->page_size || s->npages >= SSD_MAX_PAGES)
            return SSD_ERR_ARG;
        uint64_t np = (f->size - SSD_DATA_OFF) / s->page_size;
        if (np > SSD_MAX_PAGES - s->npages)
            np = SSD_MAX_PAGES - s->npages;
        f->first_page = s->npages;
        f->npages = (unsigned)np;
        s->npages += f->npages;
        s->size += f->size;
    }
    return SSD_OK;
}

static uint64_t new_set_id(void)
{
    uint64_t id = 0;
    if (getrandom(&id, sizeof id, 0) != (ssize_t)sizeof id || id == 0) {
        struct timespec ts;
        clock_gettime(CLOCK_REALTIME, &ts);
        id = ((uint64_t)ts.tv_sec << 32) ^ (uint64_t)ts.tv_nsec ^ ((uint64_t)getpid() << 16);
    }
    return id;
}

/* Reads every file's header and judges them; then sizes, formats. */
static enum ssd_status open_headers(struct ssd_store *s, const struct ssd_config *cfg,
                                    const bool *resize)
{
    enum ssd_status st;
    refused_path = NULL;
    if (same_file_twice(s))
        return SSD_ERR_NOT_OURS;
    /* Up to the first file refused: the refusal phrase is about it. */
    for (unsigned k = 0; k < s->nfiles; k++) {
        if ((st = read_prev_header(s, k)) != SSD_OK)
            return st;
        if (s->files[k].prev_state == SSD_PREV_OTHER)
            break;
    }
    classify_set(s);
    if (s->prev_state == SSD_PREV_OTHER && !cfg->reformat)
        return SSD_ERR_NOT_OURS;
    if (s->prev_state != SSD_PREV_CLEAN && s->prev_state != SSD_PREV_DIRTY) {
        /* A new set (or one reformatted): a generation above every file's. */
        s->set_id = new_set_id();
        for (unsigned k = 0; k < s->nfiles; k++)
            if (s->files[k].prev_generation > s->generation)
                s->generation = s->files[k].prev_generation;
    }
    for (unsigned k = 0; k < s->nfiles; k++) {
        refused_path = s->files[k].path;
        if (resize[k] && (st = size_backing(s->files[k].fd, s->files[k].size)) != SSD_OK)
            return st;
    }
    refused_path = NULL;
    if ((st = init_pages(s)) != SSD_OK)
        return st;
    return write_header(s, 1);
}

enum ssd_status ssd_open(const struct ssd_config *cfg, struct ssd_store **out)
{
    size_t page_size, buf_size;
    enum ssd_status st;

    *out = NULL;
    refused_path = NULL;
    if (cfg == NULL)
        return SSD_ERR_ARG;
    st = check_config(cfg, &page_size, &buf_size);
    if (st != SSD_OK)
        return st;

    struct ssd_store *s = calloc(1, sizeof *s);
    if (s == NULL)
        return SSD_ERR_NOMEM;
    pthread_mutex_init(&s->lock, NULL);
    pthread_mutex_init(&s->wlock, NULL);
    pthread_mutex_init(&s->pool_start_lock, NULL);
    pthread_mutex_init(&s->idle_lock, NULL);
    pthread_cond_init(&s->idle_cond, NULL);
    bg_init(&s->pool, "tac-ssd-io", NULL);
    s->page_size = page_size;
    memcpy(s->key_check, cfg->key_check, sizeof s->key_check);
    s->buf_size = buf_size;
    s->bufs_per_page = (unsigned)(page_size / buf_size);
    s->queue_depth = cfg->queue_depth ? cfg->queue_depth : SSD_DEFAULT_QUEUE_DEPTH;
    s->nthreads = cfg->threads ? cfg->threads : SSD_DEFAULT_THREADS;
    s->engine = cfg->engine;
    bool resize[SSD_MAX_FILES] = { false };
    if ((st = open_files(s, cfg, resize)) != SSD_OK ||
        (st = open_headers(s, cfg, resize)) != SSD_OK)
        goto fail;

    if (s->engine == SSD_IO_URING && ssd_wuring_start(s) != 0)
        s->engine = SSD_IO_THREADS;        /* automatic fallback */
    if (s->engine == SSD_IO_THREADS && ssd_pool_start(s) != 0) {
        st = SSD_ERR_NOMEM;
        goto fail;
    }
    ssd_delay_start(s);
    *out = s;
    return SSD_OK;
fail: {
        int e = errno;
        for (unsigned k = 0; k < s->nfiles; k++)
            if (s->files[k].created && s->files[k].fd >= 0)
                unlink(s->files[k].path);
        if (refused_path != NULL) {
            /* The refusal names a path of s, freed below. */
            static _Thread_local char path_copy[4096];
            snprintf(path_copy, sizeof path_copy, "%s", refused_path);
            refused_path = path_copy;
        }
        free_store(s);
        errno = e;
        return st;
    }
}

void ssd_inflight_done(struct ssd_store *s)
{
    uint64_t v = atomic_load_explicit(&s->st_inflight, memory_order_relaxed);
    while (v > 1)
        if (atomic_compare_exchange_weak_explicit(&s->st_inflight, &v, v - 1,
                                                  memory_order_release,
                                                  memory_order_relaxed))
            return;
    /* The last one: under the lock, so that ssd_close cannot see 0 and
     * free s before the signal is out. */
    pthread_mutex_lock(&s->idle_lock);
    ST_SUB(s, inflight, 1);
    pthread_cond_broadcast(&s->idle_cond);
    pthread_mutex_unlock(&s->idle_lock);
}

void ssd_wait_idle(struct ssd_store *s)
{
    pthread_mutex_lock(&s->idle_lock);
    while (atomic_load(&s->st_inflight) != 0)
        pthread_cond_wait(&s->idle_cond, &s->idle_lock);
    pthread_mutex_unlock(&s->idle_lock);
}

uint64_t ssd_close(struct ssd_store *s)
{
    if (s == NULL)
        return 0;
    /* Buf writes in flight finish first; their callbacks may still run. */
    ssd_wait_idle(s);
    ssd_delay_stop(s);
    if (s->wuring)
        ssd_wuring_stop(s);
    ssd_pool_stop(s);
    pthread_mutex_lock(&s->lock);
    while (s->bufs != NULL) {          /* unsubmitted or failed bufs */
        struct ssd_buf *b = s->bufs;
        s->bufs = b->next;
        free(b->mem);
        free(b);
    }
    pthread_mutex_unlock(&s->lock);
    uint64_t clean = 0;
    bool synced = true;
    for (unsigned k = 0; k < s->nfiles; k++)
        synced = fdatasync(s->files[k].fd) == 0 && synced;
    if (synced && write_header(s, 0) == SSD_OK)
        clean = s->generation;         /* a failure leaves it dirty */
    free_store(s);
    return clean;
}

void ssd_get_info(const struct ssd_store *s, struct ssd_info *out)
{
    out->engine = s->engine;
    out->size = s->size;
    out->nfiles = s->nfiles;
    out->page_size = s->page_size;
    out->buf_size = s->buf_size;
    out->npages = s->npages;
    out->bufs_per_page = s->bufs_per_page;
    out->prev_state = s->prev_state;
    out->prev_generation = s->prev_generation;
    out->generation = s->generation;
}

void ssd_get_stats(const struct ssd_store *s, struct ssd_stats *out)
{
    struct ssd_store *m = (struct ssd_store *)s;
#define SSD_STATS_COPY(name, help) \
    out->name = atomic_load_explicit(&m->st_##name, memory_order_relaxed);
    SSD_STATS_FIELDS(SSD_STATS_COPY)
#undef SSD_STATS_COPY
}

void ssd_page_usage(struct ssd_store *s, unsigned page, uint32_t *version, uint64_t *live)
{
    *version = 0;
    *live = 0;
    if (page >= s->npages)
        return;
    pthread_mutex_lock(&s->lock);
    if (s->pages[page].state != PAGE_FREE) {
        *version = atomic_load_explicit(&s->pages[page].version, memory_order_relaxed);
        *live = s->pages[page].live;
    }
    pthread_mutex_unlock(&s->lock);
}

bool ssd_ref_current(const struct ssd_store *s, uint64_t ref)
{
    unsigned page = ssd_ref_page(ref);
    if (ref == 0 || page >= s->npages || ssd_ref_offset(ref) >= s->page_size)
        return false;
    struct ssd_page *p = (struct ssd_page *)&s->pages[page];
    return atomic_load_explicit(&p->version, memory_order_acquire) ==
           ssd_ref_version(ref);
}

static uint32_t *do_table_page(struct ssd_store *s, unsigned page);

/* Lock held. */
static int do_page_alloc(struct ssd_store *s)
{
    /* Round robin over the files with a free page, spreading new pages
     * (and so writes and later reads) over every file. */
    int id = -1;
    for (unsigned n = 0; n < s->nfiles && id < 0; n++) {
        struct ssd_file *f = &s->files[s->next_file];
        s->next_file = s->next_file + 1 < s->nfiles ? s->next_file + 1 : 0;
        id = f->free_head;
        if (id >= 0)
            f->free_head = s->pages[id].next_free;
    }
    if (id < 0)
        return -1;
    struct ssd_page *p = &s->pages[id];
    p->next_free = -1;
    p->state = PAGE_OPEN;
    p->seq = s->page_seq + 1;
    __atomic_store_n(&s->page_seq, p->seq, __ATOMIC_RELAXED);
    if (s->table != NULL)
        __atomic_store_n(&do_table_page(s, (unsigned)id)[1], (uint32_t)p->seq,
                         __ATOMIC_RELAXED);
    p->next_slot = 0;
    ST_ADD(s, page_allocs, 1);
    p->bufs_out = 0;
    p->live = 0;
    memset(&s->buf_used[(size_t)id * s->bufs_per_page], 0,
           s->bufs_per_page * sizeof *s->buf_used);
    for (unsigned i = 0; i < s->bufs_per_page; i++)
        s->buf_first[(size_t)id * s->bufs_per_page + i] = i;
    ST_SUB(s, pages_free, 1);
    ST_ADD(s, pages_used, 1);
    return id;
}

/* Lock held: the durable table's entries for page: its version, then its
 * slots' used lengths. */
static uint32_t *do_table_page(struct ssd_store *s, unsigned page)
{
    return s->table + (size_t)page * (SSD_TABLE_HDR + s->bufs_per_page);
}

/* Lock held: page is SEALED with no live bytes. */
static void do_page_reclaim(struct ssd_store *s, unsigned id)
{
    struct ssd_page *p = &s->pages[id];
    uint32_t v = atomic_load_explicit(&p->version, memory_order_relaxed);
    v = v == UINT16_MAX ? 1 : v + 1;
    if (s->table != NULL) {
        /* Its bufs first, then the version: a crash between the two leaves
         * an empty page of the old version, never old bufs under a new one. */
        uint32_t *t = do_table_page(s, id);
        for (unsigned i = 0; i < s->bufs_per_page; i++)
            __atomic_store_n(&t[SSD_TABLE_HDR + i], 0, __ATOMIC_RELAXED);
        __atomic_store_n(&t[0], v, __ATOMIC_RELEASE);
    }
    atomic_store_explicit(&p->version, v, memory_order_release);
    p->state = PAGE_FREE;
    p->pinned = false;
    p->pad = 0;
    do_free_push(s, id);
    ST_ADD(s, reclaimed, 1);
    ST_SUB(s, pages_used, 1);
    ST_ADD(s, pages_free, 1);
}

/* Lock held: seal when nothing more will be written, reclaim if empty. */
static void do_page_maybe_seal(struct ssd_store *s, unsigned id)
{
    struct ssd_page *p = &s->pages[id];
    if (p->state != PAGE_OPEN || p->bufs_out != 0 ||
        p->next_slot < s->bufs_per_page)
        return;
    if (s->cur_page == (int)id)
        s->cur_page = -1;
    p->state = PAGE_SEALED;
    if (p->live == 0)
        do_page_reclaim(s, id);
}

void do_page_buf_done(struct ssd_store *s, unsigned page)
{
    s->pages[page].bufs_out--;
    do_page_maybe_seal(s, page);
}

int ssd_page_alloc(struct ssd_store *s)
{
    pthread_mutex_lock(&s->lock);
    int id = do_page_alloc(s);
    pthread_mutex_unlock(&s->lock);
    return id;
}

void ssd_page_finish(struct ssd_store *s, int page)
{
    if (page < 0 || (unsigned)page >= s->npages)
        return;
    pthread_mutex_lock(&s->lock);
    struct ssd_page *p = &s->pages[page];
    if (p->state == PAGE_OPEN) {
        p->next_slot = s->bufs_per_page;
        do_page_maybe_seal(s, (unsigned)page);
    }
    pthread_mutex_unlock(&s->lock);
}

bool ssd_mark_dead(struct ssd_store *s, uint64_t ref, size_t len)
{
    unsigned id = ssd_ref_page(ref);
    if (ref == 0 || id >= s->npages)
        return false;
    /* A tuple larger than a buf held whole slots (ssd_buf_appendv). */
    if (len > s->buf_size)
        len = (len + s->buf_size - 1) / s->buf_size * s->buf_size;
    pthread_mutex_lock(&s->lock);
    struct ssd_page *p = &s->pages[id];
    bool ok = atomic_load_explicit(&p->version, memory_order_relaxed) ==
              ssd_ref_version(ref) && p->state != PAGE_FREE;
    if (ok) {
        uint64_t d = len < p->live ? len : p->live;   /* never underflow */
        p->live -= d;
        ST_SUB(s, live_bytes, d);
        if (p->state == PAGE_SEALED && p->live == 0)
            do_page_reclaim(s, id);
    }
    pthread_mutex_unlock(&s->lock);
    return ok;
}

/* ---- buf slot hand-out (called by buf.c through ssd_buf_open*) ---------- */

int do_page_take_slot(struct ssd_store *s, int page, unsigned keep_free,
                      unsigned nslots, unsigned *slot, enum ssd_status *st)
{
    if (nslots == 0 || nslots > s->bufs_per_page) {
        *st = SSD_ERR_ARG;
        return -1;
    }
    if (page < 0) {
        /* A shared page without nslots slots left is finished: its last
         * slots stay empty, and it seals once its bufs are written. */
        if (s->cur_page >= 0 &&
            s->pages[s->cur_page].next_slot + nslots > s->bufs_per_page) {
            s->pages[s->cur_page].next_slot = s->bufs_per_page;
            int old = s->cur_page;
            s->cur_page = -1;
            do_page_maybe_seal(s, (unsigned)old);
        }
        if (s->cur_page < 0 &&
            atomic_load_explicit(&s->st_pages_free, memory_order_relaxed) <= keep_free) {
            *st = SSD_ERR_FULL;
            return -1;
        }
        if (s->cur_page < 0)
            s->cur_page = do_page_alloc(s);
        page = s->cur_page;
        if (page < 0) {
            *st = SSD_ERR_FULL;
            return -1;
        }
    } else if ((unsigned)page >= s->npages ||
               s->pages[page].state != PAGE_OPEN) {
        *st = SSD_ERR_ARG;
        return -1;
    }
    struct ssd_page *p = &s->pages[page];
    if (p->next_slot + nslots > s->bufs_per_page) {
        *st = SSD_ERR_FULL;
        return -1;
    }
    *slot = p->next_slot;
    for (unsigned i = 0; i < nslots; i++)
        s->buf_first[(size_t)page * s->bufs_per_page + *slot + i] = *slot;
    p->next_slot += nslots;
    p->bufs_out++;
    return page;
}

/* ---- page inspection (defrag) -------------------------------------------- */

/* The sealed page that `better` prefers over all others, or -1. */
static int page_pick(struct ssd_store *s, struct ssd_page_info *out,
                     bool (*better)(const struct ssd_page *, const struct ssd_page *))
{
    int best = -1;
    pthread_mutex_lock(&s->lock);
    for (unsigned i = 0; i < s->npages; i++) {
        const struct ssd_page *p = &s->pages[i];
        if (p->state == PAGE_SEALED && !p->pinned &&
            (best < 0 || better(p, &s->pages[best])))
            best = (int)i;
    }
    if (best >= 0 && out != NULL) {
        const struct ssd_page *p = &s->pages[best];
        out->version = (uint16_t)atomic_load(&p->version);
        out->live = p->live;
        out->pad = p->pad;
        out->seq = p->seq;
    }
    pthread_mutex_unlock(&s->lock);
    return best;
}

static bool older(const struct ssd_page *a, const struct ssd_page *b)
{
    return a->seq < b->seq;
}

/* By the room a re-pack wins: padding is not won back (a re-pack pads too). */
static bool emptier(const struct ssd_page *a, const struct ssd_page *b)
{
    uint64_t fa = a->live + a->pad, fb = b->live + b->pad;
    return fa < fb || (fa == fb && a->seq < b->seq);
}

int ssd_page_oldest(struct ssd_store *s, struct ssd_page_info *out)
{
    return page_pick(s, out, older);
}

int ssd_page_emptiest(struct ssd_store *s, struct ssd_page_info *out)
{
    return page_pick(s, out, emptier);
}

uint32_t ssd_page_buf(struct ssd_store *s, int page, unsigned slot,
                      uint64_t *ref)
{
    uint32_t used = 0;
    *ref = 0;
    if (page < 0 || (unsigned)page >= s->npages || slot >= s->bufs_per_page)
        return 0;
    pthread_mutex_lock(&s->lock);
    const struct ssd_page *p = &s->pages[page];
    if (p->state != PAGE_FREE) {
        used = s->buf_used[(size_t)page * s->bufs_per_page + slot];
        *ref = ssd_ref_pack((uint16_t)atomic_load(&p->version), (uint16_t)page,
                            (uint32_t)((size_t)slot * s->buf_size));
    }
    pthread_mutex_unlock(&s->lock);
    return used;
}

bool ssd_page_drop(struct ssd_store *s, int page, uint16_t version)
{
    if (page < 0 || (unsigned)page >= s->npages)
        return false;
    pthread_mutex_lock(&s->lock);
    struct ssd_page *p = &s->pages[page];
    bool ok = p->state == PAGE_SEALED &&
              atomic_load_explicit(&p->version, memory_order_relaxed) == version;
    if (ok) {
        ST_SUB(s, live_bytes, p->live);
        p->live = 0;
        do_page_reclaim(s, (unsigned)page);
    }
    pthread_mutex_unlock(&s->lock);
    return ok;
}

/* ---- Export and adoption (a restart) ------------------------------------ */

size_t ssd_live_len(const struct ssd_store *s, size_t len)
{
    if (len > s->buf_size)
        len = (len + s->buf_size - 1) / s->buf_size * s->buf_size;
    return len;
}

bool ssd_page_export(struct ssd_store *s, unsigned page,
                     struct ssd_page_state *out, uint32_t *buf_used,
                     uint32_t *buf_first)
{
    if (page >= s->npages)
        return false;
    pthread_mutex_lock(&s->lock);
    const struct ssd_page *p = &s->pages[page];
    bool used = p->state != PAGE_FREE;
    if (used) {
        out->page = page;
        out->version = (uint16_t)atomic_load(&p->version);
        out->seq = p->seq;
        out->live = p->live;
        size_t base = (size_t)page * s->bufs_per_page;
        memcpy(buf_used, &s->buf_used[base], s->bufs_per_page * sizeof(*buf_used));
        memcpy(buf_first, &s->buf_first[base], s->bufs_per_page * sizeof(*buf_first));
    }
    pthread_mutex_unlock(&s->lock);
    return used;
}

bool ssd_adopt_page(struct ssd_store *s, const struct ssd_page_state *st,
                    const uint32_t *buf_used, const uint32_t *buf_first)
{
    if (st->page >= s->npages || st->version == 0 ||
        st->live > s->page_size)
        return false;
    for (unsigned i = 0; i < s->bufs_per_page; i++) {
        unsigned first = buf_first[i];
        /* A buf starts at its first slot and holds at most the slots
         * from there to the end of the page. */
        if (first > i ||
            buf_used[i] > (uint64_t)(s->bufs_per_page - first) * s->buf_size ||
            (first != i && buf_used[i] != 0))
            return false;
    }
    pthread_mutex_lock(&s->lock);
    struct ssd_page *p = &s->pages[st->page];
    bool ok = p->state == PAGE_FREE;
    if (ok) {
        atomic_store(&p->version, st->version);
        p->state = PAGE_SEALED;
        p->next_slot = s->bufs_per_page;
        p->bufs_out = 0;
        p->live = st->live;
        /* Its padding is not recorded: the most block packing allows
         * (none in a buf of one large tuple). */
        p->pad = 0;
        for (unsigned i = 0; i < s->bufs_per_page; i++)
            if (buf_used[i] <= s->buf_size)
                p->pad += buf_used[i] / SSD_PAD_SHARE;
        p->seq = st->seq;
        p->next_free = -1;
        p->pinned = true;
        if (st->seq > s->page_seq)
            __atomic_store_n(&s->page_seq, st->seq, __ATOMIC_RELAXED);
        size_t base = (size_t)st->page * s->bufs_per_page;
        memcpy(&s->buf_used[base], buf_used, s->bufs_per_page * sizeof(*buf_used));
        memcpy(&s->buf_first[base], buf_first, s->bufs_per_page * sizeof(*buf_first));
        ST_ADD(s, live_bytes, st->live);
    }
    pthread_mutex_unlock(&s->lock);
    return ok;
}

void ssd_page_unpin(struct ssd_store *s, unsigned page, uint16_t version, uint64_t pin)
{
    if (page >= s->npages)
        return;
    pthread_mutex_lock(&s->lock);
    struct ssd_page *p = &s->pages[page];
    if (p->pinned && p->state != PAGE_FREE &&
        atomic_load_explicit(&p->version, memory_order_relaxed) == version) {
        p->pinned = false;
        uint64_t d = pin < p->live ? pin : p->live;
        p->live -= d;
        ST_SUB(s, live_bytes, d);
        if (p->state == PAGE_SEALED && p->live == 0)
            do_page_reclaim(s, page);
    }
    pthread_mutex_unlock(&s->lock);
}

void ssd_unpin_all(struct ssd_store *s)
{
    pthread_mutex_lock(&s->lock);
    for (unsigned i = 0; i < s->npages; i++)
        s->pages[i].pinned = false;
    pthread_mutex_unlock(&s->lock);
}

bool ssd_any_pinned(struct ssd_store *s)
{
    bool any = false;
    pthread_mutex_lock(&s->lock);
    for (unsigned i = 0; i < s->npages && !any; i++)
        any = s->pages[i].pinned;
    pthread_mutex_unlock(&s->lock);
    return any;
}

bool ssd_adopt_tuple(struct ssd_store *s, uint64_t ref, size_t len)
{
    unsigned id = ssd_ref_page(ref);
    if (ref == 0 || id >= s->npages)
        return false;
    len = ssd_live_len(s, len);
    pthread_mutex_lock(&s->lock);
    struct ssd_page *p = &s->pages[id];
    bool ok = atomic_load_explicit(&p->version, memory_order_relaxed) ==
              ssd_ref_version(ref) && p->state != PAGE_FREE;
    if (ok) {
        p->live += len;
        ST_ADD(s, live_bytes, len);
    }
    pthread_mutex_unlock(&s->lock);
    return ok;
}

void ssd_adopt_done(struct ssd_store *s)
{
    pthread_mutex_lock(&s->lock);
    unsigned nfree = 0;
    for (unsigned k = 0; k < s->nfiles; k++)
        s->files[k].free_head = -1;
    for (unsigned i = s->npages; i-- > 0;) {
        struct ssd_page *p = &s->pages[i];
        if (p->state == PAGE_SEALED && p->live == 0) {
            /* Nothing of it is kept: its references die with a new version. */
            uint32_t v = atomic_load(&p->version);
            atomic_store(&p->version, v == UINT16_MAX ? 1 : v + 1);
            p->state = PAGE_FREE;
            p->pinned = false;
        }
        if (p->state == PAGE_FREE) {
            do_free_push(s, i);
            nfree++;
        }
    }
    atomic_store(&s->st_pages_free, nfree);
    atomic_store(&s->st_pages_used, s->npages - nfree);
    pthread_mutex_unlock(&s->lock);
}

/* ---- The durable page table ---------------------------------------------- */

size_t ssd_table_words(const struct ssd_store *s)
{
    return (size_t)s->npages * (SSD_TABLE_HDR + s->bufs_per_page);
}

void ssd_set_table(struct ssd_store *s, uint32_t *table)
{
    pthread_mutex_lock(&s->lock);
    s->table = table;
    for (unsigned p = 0; table != NULL && p < s->npages; p++) {
        uint32_t *t = do_table_page(s, p);
        const struct ssd_page *pg = &s->pages[p];
        t[0] = atomic_load(&pg->version);
        t[1] = (uint32_t)pg->seq;
        for (unsigned i = 0; i < s->bufs_per_page; i++) {
            size_t k = (size_t)p * s->bufs_per_page + i;
            if (pg->state == PAGE_FREE)
                t[SSD_TABLE_HDR + i] = 0;
            else if (s->buf_first[k] != i)
                t[SSD_TABLE_HDR + i] = SSD_TABLE_CONT;
            else
                t[SSD_TABLE_HDR + i] = s->buf_used[k];
        }
    }
    pthread_mutex_unlock(&s->lock);
}

void do_table_buf_written(struct ssd_store *s, const struct ssd_buf *b)
{
    if (s->table == NULL)
        return;
    uint32_t *t = do_table_page(s, b->page) + SSD_TABLE_HDR;
    for (unsigned i = 1; i < b->nslots; i++)
        __atomic_store_n(&t[b->slot + i], SSD_TABLE_CONT, __ATOMIC_RELAXED);
    __atomic_store_n(&t[b->slot], (uint32_t)b->used, __ATOMIC_RELEASE);
}

uint64_t ssd_page_clock(struct ssd_store *s)
{
    /* Lock-free: every invalidation a worker records reads it. */
    return __atomic_load_n(&s->page_seq, __ATOMIC_RELAXED);
}

uint64_t ssd_oldest_page_seq(struct ssd_store *s)
{
    pthread_mutex_lock(&s->lock);
    uint64_t min = s->page_seq + 1;
    for (unsigned p = 0; p < s->npages; p++)
        if (s->pages[p].state != PAGE_FREE && s->pages[p].seq < min)
            min = s->pages[p].seq;
    pthread_mutex_unlock(&s->lock);
    return min;
}

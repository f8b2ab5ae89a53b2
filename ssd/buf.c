/*
 * buf.c - write bufs: open, append, submit, lookup, release.
 *
 * Owns: the in-memory bufs.  A buf is buf_size bytes of 4 KiB-aligned DRAM
 * bound to one buf slot of one page.  Tuples are appended at 8-byte
 * aligned positions; the page's live bytes grow at each append, which
 * takes store->lock for a few stores (used length and live bytes must be
 * seen together by lookups and ssd_mark_dead).
 *
 * Design.  Every buf that is unwritten, in flight or failed is on the
 * store's list (store->lock), so a read of a tuple that is not yet on the
 * device is served from memory (ssd_buf_lookup pins the buf; ssd_read
 * copies out of it).  The list holds one buf per writer thread plus the
 * writes in flight, so a linear search is short.  A buf is freed when it
 * is off the list and its last pin is gone: after a successful write's
 * callback returned, or at ssd_buf_release.  Each page counts its bufs on
 * the list (mem_bufs), so that a read of a page with none, the usual case,
 * goes to the device without taking store->lock.
 *
 * Threads: append/submit/release by the buf's owner; lookup/unpin and the
 * write completion (ssd_buf_write_done, on the uring reaper or a pool
 * thread) from any thread.
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "ssd/internal.h"
#include "base/crashpoint.h"

static size_t round_up(size_t v, size_t a) { return (v + a - 1) / a * a; }

static enum ssd_status buf_open(struct ssd_store *s, int page,
                                unsigned keep_free, size_t len,
                                struct ssd_buf **out)
{
    enum ssd_status st = SSD_OK;
    *out = NULL;
    if (len > s->page_size)
        return SSD_ERR_ARG;
    unsigned nslots = len <= s->buf_size ? 1u
                      : (unsigned)((len + s->buf_size - 1) / s->buf_size);
    struct ssd_buf *b = calloc(1, sizeof *b);
    void *mem = NULL;
    size_t cap = (size_t)nslots * s->buf_size;
    if (b == NULL || posix_memalign(&mem, SSD_BLOCK, cap) != 0) {
        free(b);
        return SSD_ERR_NOMEM;
    }
    b->mem = mem;
    b->cap = cap;
    b->nslots = nslots;
    b->s = s;
    atomic_init(&b->refs, 1);
    pthread_mutex_lock(&s->lock);
    int id = do_page_take_slot(s, page, keep_free, nslots, &b->slot, &st);
    if (id >= 0) {
        b->page = (unsigned)id;
        b->version = (uint16_t)atomic_load(&s->pages[id].version);
        b->fpos = ssd_page_fpos(s, b->page) + (uint64_t)b->slot * s->buf_size;
        b->fd = ssd_page_fd(s, b->page);
        b->next = s->bufs;
        if (s->bufs != NULL)
            s->bufs->prev = b;
        s->bufs = b;
        atomic_fetch_add_explicit(&s->pages[id].mem_bufs, 1, memory_order_relaxed);
    }
    pthread_mutex_unlock(&s->lock);
    if (id < 0) {
        free(b->mem);
        free(b);
        return st;
    }
    *out = b;
    return SSD_OK;
}

enum ssd_status ssd_buf_open(struct ssd_store *s, struct ssd_buf **out)
{
    return buf_open(s, -1, 0, 0, out);
}

enum ssd_status ssd_buf_open_keep(struct ssd_store *s, unsigned keep_free,
                                  struct ssd_buf **out)
{
    return buf_open(s, -1, keep_free, 0, out);
}

enum ssd_status ssd_buf_open_page(struct ssd_store *s, int page,
                                  struct ssd_buf **out)
{
    if (page < 0) {
        *out = NULL;
        return SSD_ERR_ARG;
    }
    return buf_open(s, page, 0, 0, out);
}

enum ssd_status ssd_buf_open_large(struct ssd_store *s, int page,
                                   unsigned keep_free, size_t len,
                                   struct ssd_buf **out)
{
    return buf_open(s, page, keep_free, len, out);
}

enum ssd_status ssd_buf_append(struct ssd_buf *b, const void *data, size_t len,
                               uint64_t *ref_out)
{
    struct iovec one = { (void *)data, len };
    return ssd_buf_appendv(b, &one, 1, ref_out);
}

/* Block packing: the bytes to skip before a tuple of len bytes that would
 * start at `at`, so that it does not cross a block boundary (ssd.h,
 * SSD_PAD_MAX).  A tuple that crosses one anyway costs a read of two
 * blocks; the skipped bytes are dead room until the page is reclaimed. */
static size_t pad_before(const struct ssd_buf *b, size_t at, size_t len)
{
    size_t into = at % SSD_BLOCK;
    if (into == 0 || len > SSD_BLOCK || b->nslots > 1)
        return 0;
    size_t gap = SSD_BLOCK - into;
    if (len <= gap || gap >= SSD_PAD_MAX || b->pad + gap > b->cap / SSD_PAD_SHARE)
        return 0;
    return gap;
}

enum ssd_status ssd_buf_appendv(struct ssd_buf *b, const struct iovec *iov,
                                int n, uint64_t *ref_out)
{
    struct ssd_store *s = b->s;
    size_t len = 0;
    for (int i = 0; i < n; i++)
        len += iov[i].iov_len;
    if (len == 0 || b->state != BUF_FILLING)
        return SSD_ERR_ARG;
    size_t at = round_up(b->used, SSD_TUPLE_ALIGN);
    size_t pad = at <= b->cap ? pad_before(b, at, len) : 0;
    at += pad;
    /* A buf spanning several slots holds one tuple, at its first byte,
     * so that every tuple starts in the slot its buf starts in. */
    if (at > b->cap || len > b->cap - at || (b->nslots > 1 && at > 0))
        return SSD_ERR_NOSPACE;
    /* Alignment and padding are written as zeros (ssd_buf_next). */
    memset(b->mem + b->used, 0, at - b->used);
    for (size_t i = 0, pos = at; i < (size_t)n; pos += iov[i].iov_len, i++)
        memcpy(b->mem + pos, iov[i].iov_base, iov[i].iov_len);
    /* A tuple in a buf of its own holds all of the buf's slots. */
    size_t charge = b->nslots > 1 ? b->cap : len;
    b->pad += pad;
    pthread_mutex_lock(&s->lock);
    b->used = at + len;                 /* under the lock: lookup reads it */
    s->pages[b->page].live += charge;
    s->pages[b->page].pad += pad;
    pthread_mutex_unlock(&s->lock);
    ST_ADD(s, live_bytes, charge);
    if (pad != 0)
        ST_ADD(s, pad_bytes, pad);
    *ref_out = ssd_ref_pack(b->version, (uint16_t)b->page,
                            (uint32_t)(b->slot * s->buf_size + at));
    return SSD_OK;
}

size_t ssd_buf_used(const struct ssd_buf *b)
{
    return b->used;
}

size_t ssd_buf_next(const char *mem, size_t used, size_t off)
{
    off = round_up(off, SSD_TUPLE_ALIGN);
    size_t end = round_up(off, SSD_BLOCK);
    uint64_t head;
    /* Padding: zeros from off to the next block boundary, shorter than
     * SSD_PAD_MAX, with more bytes after it.  A tuple there would begin
     * with non-zero bytes. */
    if (off % SSD_BLOCK == 0 || end - off >= SSD_PAD_MAX || end >= used)
        return off;
    memcpy(&head, mem + off, sizeof(head));
    if (head != 0)
        return off;
    for (size_t i = off + sizeof(head); i < end; i++)
        if (mem[i] != 0)
            return off;             /* not padding: the walker finds it damaged */
    return end;
}

void ssd_buf_unref(struct ssd_buf *b)
{
    if (atomic_fetch_sub(&b->refs, 1) == 1) {
        free(b->mem);
        free(b);
    }
}

/* Lock held. */
static void do_buf_unlink(struct ssd_store *s, struct ssd_buf *b)
{
    if (b->prev != NULL)
        b->prev->next = b->next;
    else
        s->bufs = b->next;
    if (b->next != NULL)
        b->next->prev = b->prev;
    b->next = b->prev = NULL;
    atomic_fetch_sub_explicit(&s->pages[b->page].mem_bufs, 1, memory_order_relaxed);
    do_page_buf_done(s, b->page);
}

enum ssd_status ssd_buf_submit(struct ssd_buf *b, ssd_write_cb cb, void *arg)
{
    struct ssd_store *s = b->s;
    if ((b->state != BUF_FILLING && b->state != BUF_FAILED) || cb == NULL)
        return SSD_ERR_ARG;
    b->wlen = b->used == 0 ? SSD_BLOCK : round_up(b->used, SSD_BLOCK);
    memset(b->mem + b->used, 0, b->wlen - b->used);
    b->wdone = 0;
    b->cb = cb;
    b->arg = arg;
    pthread_mutex_lock(&s->lock);
    s->buf_used[(size_t)b->page * s->bufs_per_page + b->slot] =
        (uint32_t)b->used;
    b->state = BUF_INFLIGHT;
    pthread_mutex_unlock(&s->lock);
    ST_ADD(s, inflight, 1);
    int rc = s->engine == SSD_IO_URING ? ssd_wuring_submit(s, b)
                                       : ssd_pool_push(s, NULL, b);
    if (rc != 0) {
        ssd_inflight_done(s);
        pthread_mutex_lock(&s->lock);
        b->state = BUF_FILLING;
        pthread_mutex_unlock(&s->lock);
        return rc == -ENOMEM ? SSD_ERR_NOMEM : SSD_ERR_IO;
    }
    return SSD_OK;
}

void ssd_buf_write_done(struct ssd_buf *b, int err)
{
    struct ssd_store *s = b->s;
    enum ssd_status st = err == 0 ? SSD_OK : SSD_ERR_IO;
    if (err != 0)
        atomic_store_explicit(&s->write_errno, err, memory_order_relaxed);
    if (st == SSD_OK) {
        ST_ADD(s, bufs_written, 1);
        ST_ADD(s, bytes_written, b->wlen);
    } else {
        ST_ADD(s, io_errors, 1);
        pthread_mutex_lock(&s->lock);
        b->state = BUF_FAILED;
        pthread_mutex_unlock(&s->lock);
    }
    b->cb(b->arg, b, st);
    if (st == SSD_OK) {
        pthread_mutex_lock(&s->lock);
        do_table_buf_written(s, b);
        do_buf_unlink(s, b);
        pthread_mutex_unlock(&s->lock);
        CRASH_POINT(ssd_buf_written);
        ssd_buf_unref(b);
    }
    ssd_inflight_done(s);             /* last: ssd_close waits for this */
}

void ssd_buf_release(struct ssd_buf *b)
{
    if (b == NULL || b->state == BUF_INFLIGHT)
        return;                        /* in flight: the completion owns it */
    struct ssd_store *s = b->s;
    pthread_mutex_lock(&s->lock);
    do_buf_unlink(s, b);
    pthread_mutex_unlock(&s->lock);
    ssd_buf_unref(b);
}

/* Lock held.  The in-memory buf holding ref, or NULL. */
static struct ssd_buf *do_buf_find(struct ssd_store *s, uint64_t ref)
{
    unsigned page = ssd_ref_page(ref);
    unsigned slot = (unsigned)(ssd_ref_offset(ref) / s->buf_size);
    for (struct ssd_buf *b = s->bufs; b != NULL; b = b->next)
        if (b->page == page && slot >= b->slot && slot < b->slot + b->nslots &&
            b->version == ssd_ref_version(ref))
            return b;
    return NULL;
}

/* Offset of ref inside buf b. */
static size_t buf_off(const struct ssd_buf *b, uint64_t ref)
{
    return ssd_ref_offset(ref) - (size_t)b->slot * b->s->buf_size;
}

size_t do_buf_extent(struct ssd_store *s, unsigned page, size_t off,
                     size_t *used)
{
    size_t i = (size_t)page * s->bufs_per_page + off / s->buf_size;
    unsigned first = s->buf_first[i];
    size_t start = (size_t)first * s->buf_size;
    *used = s->buf_used[(size_t)page * s->bufs_per_page + first];
    uint64_t ref = ssd_ref_pack((uint16_t)atomic_load(&s->pages[page].version),
                                (uint16_t)page, (uint32_t)start);
    struct ssd_buf *b = do_buf_find(s, ref);
    if (b != NULL && b->used > *used)
        *used = b->used;
    return start;
}

/* Whether ref's page may have a buf in memory; false means every tuple a
 * reader can hold a reference to on that page is on the device.  A buf
 * is counted before its first tuple is appended, and a reader got its
 * reference from an item published after that append (under the item
 * lock, which orders the count before the reference); it is uncounted
 * only once written, so a read that finds 0 reads the device, and one
 * that finds a stale count takes the lock and finds no buf. */
static bool page_has_mem_bufs(struct ssd_store *s, uint64_t ref)
{
    unsigned page = ssd_ref_page(ref);
    return page < s->npages &&
           atomic_load_explicit(&s->pages[page].mem_bufs, memory_order_acquire) != 0;
}

const void *ssd_buf_lookup(struct ssd_store *s, uint64_t ref, size_t len,
                           struct ssd_buf **pin)
{
    const void *p = NULL;
    *pin = NULL;
    if (ref == 0 || !page_has_mem_bufs(s, ref))
        return NULL;
    pthread_mutex_lock(&s->lock);
    struct ssd_buf *b = do_buf_find(s, ref);
    if (b != NULL && buf_off(b, ref) + len <= b->used) {
        size_t off = buf_off(b, ref);
        atomic_fetch_add(&b->refs, 1);
        *pin = b;
        p = b->mem + off;
    }
    pthread_mutex_unlock(&s->lock);
    return p;
}

void ssd_buf_unpin(struct ssd_buf *pin)
{
    if (pin != NULL)
        ssd_buf_unref(pin);
}

bool ssd_buf_copy_if_mem(struct ssd_store *s, uint64_t ref, size_t len,
                         bool whole, size_t cap, char *dst, size_t *used_out)
{
    bool hit = false;
    if (!page_has_mem_bufs(s, ref))
        return false;
    pthread_mutex_lock(&s->lock);
    struct ssd_buf *b = do_buf_find(s, ref);
    if (b != NULL) {
        size_t off = buf_off(b, ref);
        if (whole) {
            size_t n = b->used < cap ? b->used : cap;
            memcpy(dst, b->mem, n);
            *used_out = n;
            hit = true;
        } else if (off + len <= b->used) {
            memcpy(dst, b->mem + off, len);
            hit = true;
        }
    }
    pthread_mutex_unlock(&s->lock);
    return hit;
}

const char *ssd_buf_data(const struct ssd_buf *b)
{
    return b->mem;
}

uint64_t ssd_buf_ref(const struct ssd_buf *b)
{
    return ssd_ref_pack(b->version, (uint16_t)b->page,
                        (uint32_t)(b->slot * b->s->buf_size));
}

int ssd_write_errno(const struct ssd_store *s)
{
    struct ssd_store *m = (struct ssd_store *)s;
    return atomic_load_explicit(&m->write_errno, memory_order_relaxed);
}

/*
 * tac/ssd_read.c - reading the SSD tier: the workers' reads that never wait
 * for the device, synchronous reads for the fetchers and defrag, walking a
 * buf image, and fetching tuples up (hybrid swapping).  Design: the top of
 * ssd_write.c, "Reads".
 */
#include "config.h"
#include "base/crashpoint.h"

#include <errno.h>
#include <libgen.h>
#include <linux/magic.h>
#include <poll.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/vfs.h>
#include <time.h>

#include "base/bg.h"
#include "engine/lazy_lru.h"
#include "base/settings.h"
#include "nvm/nvm.h"
#include "ssd/ssd.h"
#include "tac/crypt.h"
#include "tac/fetch.h"
#include "tac/internal.h"
#include "tac/nvm_tier.h"
#include "tac/policy.h"
#include "tac/ssd_int.h"
#include "tac/ssd_tier.h"
#include "tac/tac.h"
#include "tac/tuple.h"
#include "base/util.h"
/* ---- Reading ------------------------------------------------------------ */

enum fill_result {
    FILL_OK,
    FILL_OTHER,     /* not t's tuple: moved or reclaimed, unless t's meta
                       tuple still points there (then damaged) */
    FILL_CORRUPT,   /* t's tuple, damaged: never served */
};

/* Checks that [data, data + len), a tuple as the media holds it, is the
 * tuple of transient item t's key and version (write sequence seq, checked
 * with a tier key), and puts its value into t.  With keyed false t has no
 * key yet: the tuple's must have meta's fingerprint, and becomes t's.
 * Counts nothing: whether a FILL_OTHER is damage depends on where the
 * key's meta tuple points. */
static enum fill_result transient_fill(item *t, const item *meta, bool keyed,
                                       uint64_t seq, const char *data, size_t len)
{
    struct tac_tuple_hdr hdr;
    if (data == NULL || len < sizeof(hdr))
        return FILL_OTHER;
    memcpy(&hdr, data, sizeof(hdr));
    if (!tac_tuple_sane(&hdr, len) || hdr.nkey != t->nkey ||
        hdr.nbytes != t->nbytes)
        return FILL_OTHER;
    const char *body = data + sizeof(hdr);
    char key[KEY_MAX_LENGTH];
    enum tac_tuple_check c = tac_tuple_open(&hdr, body, key, ITEM_data(t));
    bool same_key = keyed ? memcmp(key, ITEM_key(t), t->nkey) == 0
                          : item_key_fp(key, t->nkey, item_hash(key, t->nkey)) ==
                            item_meta_fp(meta);
    if (c == TUPLE_OK && same_key && !keyed)
        memcpy(ITEM_key(t), key, t->nkey);
    if (c == TUPLE_OK)
        return same_key && (!tac_tuple_sealed() || hdr.seq == seq)
               ? FILL_OK : FILL_OTHER;
    /* A clear tuple of another key is another tuple; a failed tag says
     * nothing about whose it was. */
    return c == TUPLE_BAD_SUM && !same_key ? FILL_OTHER : FILL_CORRUPT;
}

/* Checks the tuple at mem (a private copy: a buf image read for a scan)
 * and, sealed, opens it in place, so that its key and value follow
 * its header in clear.  False when its checksum or tag fails. */
static bool tuple_open_in_place(char *mem)
{
    struct tac_tuple_hdr hdr;
    memcpy(&hdr, mem, sizeof(hdr));
    char *body = mem + sizeof(hdr);
    return tac_tuple_open(&hdr, body, body, body + hdr.nkey) == TUPLE_OK;
}

/* What was read at ref, a reference the key's meta tuple held, failed the
 * checks.  If the meta tuple still points there, a successful read there
 * read its own tuple (see Reads above): the tuple is damaged.  Counts it
 * and unlinks the item, so that it is never served; returns true.  False
 * when the item is gone or points elsewhere now (moved or replaced).
 * Caller holds the key's item lock. */
static bool do_meta_damaged(item *it, uint32_t hv, uint64_t ref)
{
    bool here = item_value_async(it) && item_meta_ref(it) == ref;
    if (here) {
        tac_tuple_refused();
        do_item_unlink(it, hv);
    }
    return here;
}

static bool do_tuple_damaged(const char *key, size_t nkey, uint32_t hv,
                             uint64_t ref)
{
    item *it = do_item_get(key, nkey, hv, NULL, false);
    if (it == NULL)
        return false;
    bool here = do_meta_damaged(it, hv, ref);
    item_release(it);
    return here;
}

struct tac_reader {
    struct ssd_ring *ring;
};

struct tac_reader *tac_reader_new(void)
{
    if (tac.ssd == NULL)
        return NULL;
    struct tac_reader *rd = calloc(1, sizeof(*rd));
    if (rd == NULL)
        return NULL;
    rd->ring = ssd_ring_create(tac.ssd);
    if (rd->ring == NULL) {
        free(rd);
        return NULL;
    }
    return rd;
}

int tac_reader_fd(const struct tac_reader *rd)
{
    return ssd_ring_eventfd(rd->ring);
}

void tac_reader_reap(struct tac_reader *rd)
{
    ssd_ring_reap(rd->ring);
}

void tac_reader_defer_submits(struct tac_reader *rd, void (*kick)(void *arg),
                              void *arg)
{
    ssd_ring_defer_submits(rd->ring, kick, arg);
}

void tac_reader_submit(struct tac_reader *rd)
{
    ssd_ring_submit(rd->ring);
}

bool tac_reads_in_flight(void)
{
    return tac.ssd != NULL && ssd_reads_in_flight(tac.ssd) != 0;
}

void tac_reader_free(struct tac_reader *rd)
{
    if (rd == NULL)
        return;
    ssd_ring_destroy(rd->ring);
    free(rd);
}

struct pending_read {
    struct tac_reader *rd;
    uint64_t ref;               /* the tuple being read */
    item *meta;                 /* pinned: its tuple is not freed meanwhile;
                                   the value's src (struct item_got) */
    item *t;                    /* snapshot of the meta tuple, value to fill */
    uint32_t hv;
    int tries;
    tac_value_fn fn;
    void *arg;
};

static void read_done(void *arg, enum ssd_status st, const char *data,
                      size_t len);

static bool read_start(struct pending_read *pr, uint64_t ref)
{
    pr->ref = ref;
    return ssd_read(pr->rd->ring, ref, ssdt_tuple_len(pr->t), read_done, pr) == SSD_OK;
}

static void read_finish(struct pending_read *pr, item *value)
{
    if (value != pr->t)
        item_release(pr->t);
    struct item_got got = { value, value != NULL ? pr->meta : NULL };
    pr->fn(pr->arg, &got);
    item_release(pr->meta);
    free(pr);
}

/* The read of pr's reference did not produce its tuple: the tuple moved or
 * was dropped.  Follows the same version to where it lives now.  read_ok:
 * the read succeeded, so if the item has not moved, its tuple is damaged. */
static void read_relookup(struct pending_read *pr, bool read_ok)
{
    item *t = pr->t;
    item *value = NULL;
    bool again = false;
    TAC_INCR(ssd_read_retries);
    item_lock(pr->hv);
    if (read_ok && do_tuple_damaged(ITEM_key(t), t->nkey, pr->hv, pr->ref)) {
        item_unlock(pr->hv);
        TAC_INCR(ssd_read_misses);
        read_finish(pr, NULL);
        return;
    }
    item *it = do_item_get(ITEM_key(t), t->nkey, pr->hv, NULL, false);
    if (it != NULL && it->cas == t->cas && it->nbytes == t->nbytes) {
        if (item_value_async(it)) {
            again = pr->tries++ < READ_MAX_TRIES &&
                    read_start(pr, item_meta_ref(it));
            if (again) {
                /* Pin the meta tuple that now holds the tuple. */
                item_release(pr->meta);
                pr->meta = it;
            } else {
                item_release(it);
            }
        } else {
            item_release(pr->meta);     /* it is the value's src now */
            pr->meta = it;
            item_ref(it);
            value = item_value_take(it);
        }
    } else if (it != NULL) {
        item_release(it);
    }
    item_unlock(pr->hv);
    if (again)
        return;
    if (value == NULL) {
        /* Counted here (miss_from_extstore): a drop that took the tuple
         * while it was read also remembered the key, and a later get
         * must not count the same loss again. */
        TAC_INCR(ssd_read_misses);
        tac_ssd_key_stored(pr->hv);
    }
    read_finish(pr, value);
}

static void read_done(void *arg, enum ssd_status st, const char *data,
                      size_t len)
{
    struct pending_read *pr = arg;
    enum fill_result fill = st == SSD_OK
        ? transient_fill(pr->t, pr->meta, true, item_meta_seq(pr->meta), data, len)
        : FILL_OTHER;
    if (fill == FILL_CORRUPT) {
        /* Counted, and the item unlinked, if it still points there. */
        item_lock(pr->hv);
        do_tuple_damaged(ITEM_key(pr->t), pr->t->nkey, pr->hv, pr->ref);
        item_unlock(pr->hv);
        TAC_INCR(ssd_read_misses);
        read_finish(pr, NULL);
        return;
    }
    if (fill == FILL_OK) {
        TAC_INCR(get_hits_ssd);
        switch (tac_policy_ssd_hit(pr->meta)) {
        case SSD_UP_BUF:
            tac_fetch_ssd_buf(pr->meta, pr->t);
            break;
        case SSD_UP_TUPLE:
            tac_fetch_ssd_tuple(pr->meta, pr->t);
            break;
        case SSD_UP_RECACHE:
            tac_fetch_ssd_recache(pr->meta, pr->t);
            break;
        case SSD_UP_NONE:
            break;
        }
        read_finish(pr, pr->t);
        return;
    }
    read_relookup(pr, st == SSD_OK);
}

bool tac_read_value(struct tac_reader *rd, item *meta, const char *key,
                    uint32_t hv, tac_value_fn fn, void *arg)
{
    /* A read pins meta until it completes: past the held-reference bound
     * (items.h) none is started, and the caller answers without it. */
    if (rd == NULL || !item_value_async(meta) || item_refs_crowded(meta))
        return false;
    struct pending_read *pr = malloc(sizeof(*pr));
    if (pr == NULL)
        return false;
    pr->t = tac_transient_new(meta, key);
    if (pr->t == NULL) {
        TAC_INCR(ssd_reads_nomem);
        free(pr);
        return false;
    }
    pr->rd = rd;
    pr->meta = meta;
    item_ref(meta);
    pr->hv = hv;
    pr->tries = 0;
    pr->fn = fn;
    pr->arg = arg;
    if (!read_start(pr, item_meta_ref(meta))) {
        item_release(pr->meta);
        item_release(pr->t);
        free(pr);
        return false;
    }
    return true;
}

/* ---- Synchronous reads (fetchers and defrag; never a worker) ----------- */

struct sync_req {
    bool done;
    enum ssd_status st;
    struct tac_iobuf *io;       /* grown to fit what was read */
    size_t len;
};

static void sync_done(void *arg, enum ssd_status st, const char *data,
                      size_t len)
{
    struct sync_req *r = arg;
    r->st = st;
    if (st == SSD_OK && len > r->io->cap) {
        char *m = realloc(r->io->mem, len);
        if (m == NULL) {
            r->st = SSD_ERR_NOMEM;
        } else {
            r->io->mem = m;
            r->io->cap = len;
        }
    }
    if (r->st == SSD_OK) {
        r->len = len;
        memcpy(r->io->mem, data, len);
    }
    r->done = true;
}

/* This thread's ring for synchronous reads, made on first use. */
static struct ssd_ring *my_sync_ring(void)
{
    if (ssdt_sync_ring != NULL)
        return ssdt_sync_ring;
    struct ssd_ring *r = ssd_ring_create(tac.ssd);
    if (r == NULL)
        return NULL;
    pthread_mutex_lock(&ssdt.lock);
    if (ssdt.nrings == ssdt.rings_cap) {
        size_t cap = ssdt.rings_cap ? ssdt.rings_cap * 2 : 8;
        struct ssd_ring **n = realloc(ssdt.rings, cap * sizeof(*n));
        if (n == NULL) {
            pthread_mutex_unlock(&ssdt.lock);
            ssd_ring_destroy(r);
            return NULL;
        }
        ssdt.rings = n;
        ssdt.rings_cap = cap;
    }
    ssdt.rings[ssdt.nrings++] = r;
    pthread_mutex_unlock(&ssdt.lock);
    ssdt_sync_ring = r;
    return r;
}

/* Reads ref's tuple (len bytes) or, with whole, its whole buf into io
 * (grown as needed) and waits.  *got gets the bytes read. */
enum ssd_status ssdt_read_sync(uint64_t ref, size_t len, bool whole,
                                 struct tac_iobuf *io, size_t *got)
{
    struct ssd_ring *ring = my_sync_ring();
    if (ring == NULL)
        return SSD_ERR_NOMEM;
    struct sync_req r = { .io = io };
    enum ssd_status st = whole ? ssd_read_buf(ring, ref, sync_done, &r)
                               : ssd_read(ring, ref, len, sync_done, &r);
    if (st != SSD_OK)
        return st;
    while (!r.done) {
        if (ssd_ring_reap(ring) == 0 && !r.done) {
            struct pollfd pfd = { .fd = ssd_ring_eventfd(ring), .events = POLLIN };
            (void)poll(&pfd, 1, 100);
        }
    }
    *got = r.len;
    return r.st;
}

/* One key of a listing (tac_ssd_keys_at), read from the device. */
struct key_read {
    struct tac_key_req *req;
    unsigned *left;
};

static void key_done(void *arg, enum ssd_status st, const char *data, size_t len)
{
    struct key_read *k = arg;
    struct tac_key_req *q = k->req;
    q->ok = st == SSD_OK && tac_tuple_key_of(data, len, q->len, q->fp, q->nkey, q->key);
    (*k->left)--;
}

/* Waits for this thread's sync ring until at most `until` reads are left. */
static void keys_reap(struct ssd_ring *ring, const unsigned *left, unsigned until)
{
    while (*left > until) {
        if (ssd_ring_reap(ring) == 0 && *left > until) {
            struct pollfd pfd = { .fd = ssd_ring_eventfd(ring), .events = POLLIN };
            (void)poll(&pfd, 1, 100);
        }
    }
}

void tac_ssd_keys_at(size_t n, struct tac_key_req *req)
{
    struct ssd_ring *ring = tac.ssd != NULL && n > 0 ? my_sync_ring() : NULL;
    struct key_read *kr = ring != NULL ? malloc(n * sizeof(*kr)) : NULL;
    unsigned left = 0;
    for (size_t i = 0; i < n; i++) {
        struct tac_key_req *q = &req[i];
        q->ok = false;
        if (kr == NULL)
            continue;
        struct ssd_buf *pin = NULL;
        const char *data = ssd_buf_lookup(tac.ssd, q->ref, q->len, &pin);
        if (data != NULL) {
            q->ok = tac_tuple_key_of(data, q->len, q->len, q->fp, q->nkey, q->key);
            ssd_buf_unpin(pin);
            continue;
        }
        /* Only the blocks that hold header and key (all of a sealed
         * tuple), and up to KEYS_INFLIGHT of them at once. */
        kr[i] = (struct key_read){ q, &left };
        keys_reap(ring, &left, KEYS_INFLIGHT - 1);
        left++;
        if (ssd_read(ring, q->ref, tac_tuple_key_prefix(q->nkey, q->len), key_done,
                     &kr[i]) != SSD_OK)
            left--;
    }
    if (kr != NULL)
        keys_reap(ring, &left, 0);
    free(kr);
}

item *tac_ssd_materialize(item *meta)
{
    if (tac.ssd == NULL || !item_value_async(meta))
        return NULL;
    size_t len = ssdt_tuple_len(meta);
    uint64_t ref = item_meta_ref(meta);
    /* A worker never waits for the device: only a tuple whose buf is still
     * in memory is served here; every other read parks (tac_read_value). */
    struct ssd_buf *pin = NULL;
    const char *data = ssd_buf_lookup(tac.ssd, ref, len, &pin);
    if (data == NULL) {
        TAC_INCR(ssd_reads_unparked);
        return NULL;
    }
    item *t = tac_transient_new(meta, NULL);
    bool ok = t != NULL;
    if (ok && transient_fill(t, meta, false, item_meta_seq(meta), data, len) != FILL_OK) {
        /* The caller holds the item lock (tier_ops.materialize), so meta
         * still points at what was read: it is damaged. */
        do_meta_damaged(meta, item_hv(meta), ref);
        ok = false;
    }
    ssd_buf_unpin(pin);
    if (!ok) {
        if (t != NULL)
            item_release(t);
        return NULL;
    }
    TAC_INCR(get_hits_ssd);
    return t;
}

/* ---- Walking a buf image (fetch and defrag) ------------------------------ */

/* Length of the tuple at mem + off in a buf image of `used` bytes, or 0
 * where the tuples end (padding, or a cut-off tuple). */
size_t ssdt_tuple_at(const char *mem, size_t used, size_t off)
{
    struct tac_tuple_hdr hdr;
    if (off + sizeof(hdr) > used)
        return 0;
    memcpy(&hdr, mem + off, sizeof(hdr));
    if (!tac_tuple_sane(&hdr, used - off))
        return 0;
    return tac_tuple_size(hdr.nkey, hdr.nbytes);
}

/* Offset of the tuple after the one at off, len bytes long, in a buf
 * image of `used` bytes: past alignment and block packing's padding
 * (ssd_buf_next; a tuple begins with its seq, never 0). */
size_t ssdt_tuple_next(const char *mem, size_t used, size_t off, size_t len)
{
    return ssd_buf_next(mem, used, off + len);
}

bool tac_ssd_scan_buf(uint64_t ref, struct tac_iobuf *io,
                      void (*fn)(uint64_t tref, const char *tuple, void *arg),
                      void *arg, uint64_t *damaged)
{
    size_t got = 0;
    if (ssdt_read_sync(ref, 0, true, io, &got) != SSD_OK)
        return false;
    size_t off = 0;
    while (off + sizeof(struct tac_tuple_hdr) <= got) {
        size_t len = ssdt_tuple_at(io->mem, got, off);
        if (len == 0) {
            (*damaged)++;           /* the rest of the buf cannot be walked */
            break;
        }
        if (!tuple_open_in_place(io->mem + off))
            (*damaged)++;
        else
            fn(ref + off, io->mem + off, arg);
        off = ssdt_tuple_next(io->mem, got, off, len);
    }
    return true;
}

/* ---- Fetch (hybrid swapping, TaC 4.2 and 5.4) ---------------------------- */

size_t tac_ssd_buf_size(void)
{
    return tac.ssd != NULL ? ssdt.info.buf_size : 0;
}

/* Moves the tuple at tref (a copy at data, whose key reads as `key`:
 * tac_tuple_key_hint) up if it is valid and warm or hot, or with recache
 * (-o ext_recache_rate) to DRAM whatever its temperature.  Caller holds
 * the key's item lock. */
/* Whether a fetch may move SSD meta tuple meta up, and where (sets temp
 * and place).  A stale-marked item (`md ... I`) stays where it is: a copy
 * written up would be a new tuple without the mark, served fresh, and its
 * new seq lies above the invalidation the mark recorded, so a crash would
 * bring it back fresh too (tac_demote drops such an item for the same
 * reason).  Item lock held. */
static bool fetch_may_move(item *meta, bool recache, enum llru_temp *temp,
                           enum item_tier place[2])
{
    tac_policy_fetch_place(meta, recache, temp, place);
    return item_value_async(meta) && !(meta->it_flags & ITEM_STALE) &&
           !(recache && !(meta->it_flags & ITEM_ACTIVE)) &&
           *temp != LLRU_COLD;
}

static bool fetch_place(item *meta, item *t, enum llru_temp temp,
                        const enum item_tier place[2], uint32_t hv);

static void fetch_tuple(uint64_t tref, const char *data, const char *key,
                        uint32_t hv, bool recache)
{
    struct tac_tuple_hdr hdr;
    memcpy(&hdr, data, sizeof(hdr));
    /* Valid iff the key's meta tuple, found by a hash lookup as defrag
     * does, points at this tuple. */
    item *meta = do_item_get(key, hdr.nkey, hv, NULL, false);
    if (meta == NULL)
        return;
    enum llru_temp temp;
    enum item_tier place[2];
    item *t = NULL;
    if (!fetch_may_move(meta, recache, &temp, place) ||
        item_meta_ref(meta) != tref || (t = tac_transient_new(meta, key)) == NULL) {
        item_release(meta);
        return;
    }
    if (transient_fill(t, meta, true, item_meta_seq(meta), data,
                       tac_tuple_size(hdr.nkey, hdr.nbytes)) != FILL_OK) {
        /* meta points at tref, whose bytes these are: damaged. */
        item_release(t);
        item_release(meta);
        do_tuple_damaged(key, hdr.nkey, hv, tref);
        return;
    }
    fetch_place(meta, t, temp, place, hv);
    item_release(meta);
}

/* Moves meta's value, held by transient item t, up to place[0] or else
 * place[1], and releases t; true if it moved.  Item lock held. */
static bool fetch_place(item *meta, item *t, enum llru_temp temp,
                        const enum item_tier place[2], uint32_t hv)
{
    item *up = NULL;
    for (int i = 0; i < 2 && up == NULL; i++) {
        if (place[i] == TIER_NVM) {
            up = tac_nvm_store_copy(t, meta->partition, false);
            if (up != NULL)
                TAC_INCR(fetch_ssd_to_nvm);
        } else if (place[i] == TIER_DRAM) {
            up = item_alloc_promote(meta, ITEM_key(t), meta->partition);
            if (up != NULL) {
                memcpy(ITEM_data(up), ITEM_data(t), t->nbytes);
                TAC_INCR(fetch_ssd_to_dram);
            }
        }
    }
    item_release(t);
    if (up == NULL) {
        if (temp == LLRU_HOT)
            TAC_INCR(fetch_no_room);
        return false;
    }
    do_item_move(meta, up, hv);     /* frees the SSD bytes with meta */
    item_release(up);
    return true;
}

void tac_ssd_fetch_copy(item *want, const item *copy, uint32_t hv,
                        bool recache)
{
    if (tac.ssd == NULL)
        return;
    item_lock(hv);
    /* want is pinned, so it is never linked again once unlinked: found
     * linked, it is the version copy holds, wherever defrag moved its
     * tuple.  The value goes through a transient item of meta's current
     * fields (a touch may have changed its expiry since the read). */
    item *meta = do_item_get(ITEM_key(copy), want->nkey, hv, NULL, false);
    enum llru_temp temp;
    enum item_tier place[2];
    item *t = NULL;
    if (meta == want && copy->nbytes == meta->nbytes &&
        fetch_may_move(meta, recache, &temp, place) &&
        (t = tac_transient_new(meta, ITEM_key(copy))) != NULL) {
        memcpy(ITEM_data(t), ITEM_data(copy), meta->nbytes);
        if (fetch_place(meta, t, temp, place, hv))
            TAC_INCR(fetch_copies_used);
    }
    if (meta != NULL)
        item_release(meta);
    item_unlock(hv);
}

void tac_ssd_fetch_one(const char *key, size_t nkey, uint32_t hv,
                       uint64_t ref, size_t len, bool recache,
                       struct tac_iobuf *io)
{
    if (tac.ssd == NULL)
        return;
    /* Read without the lock; fetch_tuple checks under it that the key's
     * meta tuple still points at this tuple. */
    size_t got = 0;
    char buf[KEY_MAX_LENGTH];
    if (ssdt_read_sync(ref, len, false, io, &got) != SSD_OK ||
        ssdt_tuple_at(io->mem, got, 0) != len)
        return;
    const struct tac_tuple_hdr *hdr = (const struct tac_tuple_hdr *)io->mem;
    const char *hint = tac_tuple_key_hint(hdr, io->mem + sizeof(*hdr), buf);
    if (hdr->nkey != nkey || memcmp(hint, key, nkey) != 0)
        return;
    item_lock(hv);
    fetch_tuple(ref, io->mem, hint, hv, recache);
    item_unlock(hv);
}

void tac_ssd_fetch_buf(uint64_t ref, struct tac_iobuf *io)
{
    if (tac.ssd == NULL)
        return;
    /* Every tuple starts in the slot its buf starts in (ssd.h). */
    size_t bs = ssdt.info.buf_size;
    uint64_t base = ref - ssd_ref_offset(ref) % bs;
    size_t used = 0;
    if (ssdt_read_sync(base, 0, true, io, &used) != SSD_OK)
        return;
    const char *mem = io->mem;
    for (size_t off = 0, len; (len = ssdt_tuple_at(mem, used, off)) != 0;
         off = ssdt_tuple_next(mem, used, off, len)) {
        /* Each key is read alone to find its item; only a tuple that is
         * fetched is checked whole (transient_fill), before it moves. */
        const struct tac_tuple_hdr *hdr = (const struct tac_tuple_hdr *)(mem + off);
        char buf[KEY_MAX_LENGTH];
        const char *key = tac_tuple_key_hint(hdr, mem + off + sizeof(*hdr), buf);
        uint32_t hv = item_hash(key, hdr->nkey);
        item_lock(hv);
        fetch_tuple(base + off, mem + off, key, hv, false);
        item_unlock(hv);
    }
}


/*
 * tac/ssd_tier.c - the SSD tier as the cache sees it: writing tuples into bufs,
 * asynchronous reads for the workers, page reclaim and defrag.
 *
 * Design: doc/design.md, "The data model" and "Workers never wait for the
 * SSD"; TaC 5.3 and 5.6.  An SSD-resident item is a DRAM meta tuple on no
 * LRU whose reference is {page version, page id, offset} (ssd/ssd.h).  Writers pack tuples into bufs: each evictor has its
 * own buf, the workers share one (a set while DRAM and NVM are full) and
 * defrag has one; a full buf goes to disk with one write, and until then
 * reads are served from it.  A buf whose write fails stays in memory, still
 * serving reads, and is written again by the defrag thread with bounded
 * exponential back-off (WRITE_RETRY_MIN_MS doubling to WRITE_RETRY_MAX_MS,
 * back to the minimum after a write succeeds), so an acknowledged set
 * survives a passing write error.  Failed bufs are DRAM outside -m, so
 * they are bounded (sd.failed_max bufs: the larger of 16 bufs and -m/16).
 * Past the bound, without -M, the oldest failed buf's items are dropped
 * (counted) and the buf freed; with -M, an SSD that cannot be written
 * counts as full: new writes to it are refused and nothing is dropped.
 * Writes count as failing from a failed write until no failed buf is
 * left; the start and the end of that state are each logged once.
 *
 * Reads.  A worker never waits for SSD: tac_read_value() snapshots the meta
 * tuple into a transient item, starts a read of the tuple's 4 KiB extent on
 * the worker's ring and returns.  The completion runs on the same worker.
 * The page version makes a successful read exact: a page is rewritten only
 * after its version is bumped, and the ring checks the version after the
 * read, so data read at a current reference is the tuple that was written
 * there; its header bounds, key and checksum are checked as well.  A stale
 * reference (the tuple was moved by defrag, or dropped) makes the
 * completion look the key up again and follow the same version (same CAS)
 * to wherever it lives now; if that version is gone the read answers a
 * miss, never another version's value.  A tuple that fails its checks
 * while the item still points at it is damaged: counted in
 * tuple_checksum_failures, answered as a miss and unlinked, never served.
 * Fetch checks the same before it moves a tuple up, and defrag before it
 * copies one on (a damaged one is dropped).
 *
 * Validity.  A tuple in a page is live iff the key's meta tuple is an SSD
 * meta tuple whose reference is this tuple's.  Defrag checks that with a
 * hash lookup of the tuple's key (a tuple holds no DRAM address), so a meta
 * tuple can move to another DRAM chunk (the slab page mover) without
 * rewriting the tuple on SSD.
 *
 * Space.  Each page counts its live bytes; a sealed page with none left is
 * reclaimed at once (ssd/).  When free pages fall below the watermark the
 * defrag thread takes the sealed page with the fewest live bytes, reads
 * its bufs, and moves each valid tuple into its own buf, changing only
 * that meta tuple's reference; then the page is reclaimed.  (The oldest
 * page is the wrong choice: under skewed updates it holds the cold items
 * nobody rewrites, nearly all live, while younger pages are mostly dead.)
 * When moving would gain nothing (even that page is nearly all live, or no
 * page is free), the SSD is full: the oldest page's items, the coldest,
 * are dropped and counted in ssd_items_dropped (extstore_objects_evicted;
 * `evictions` counts only items lost from DRAM or NVM that went to no
 * lower tier, as memcached's), or with -M nothing is dropped and
 * writes to SSD fail until space frees up.
 *
 * Threads: workers (reads, shared writer), evictors (their writers), the
 * defrag thread, and the ssd/ library's write completion thread.
 */
#include "config.h"
#include "crashpoint.h"

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

#include "bg.h"
#include "lazy_lru.h"
#include "settings.h"
#include "nvm/nvm.h"
#include "ssd/ssd.h"
#include "tac/crypt.h"
#include "tac/internal.h"
#include "tac/tac.h"
#include "tac/tuple.h"
#include "util.h"

/* Re-reads that follow a tuple moved while it was being read. */
#define READ_MAX_TRIES 4
#define DEFRAG_IDLE_MS 20
#define IDLE_BUF_MS 1000
#define WRITE_RETRY_MIN_MS 10
#define WRITE_RETRY_MAX_MS 2000
/* Failed bufs kept for a retry: at least this many, or -m/16 of bytes. */
#define FAILED_BUFS_MIN 16

struct writer {
    pthread_mutex_t lock;
    struct ssd_buf *buf;        /* lock: the buf being filled, or NULL */
    int64_t last_put_ms;        /* lock: when a tuple last went into buf */
    bool own_pages;             /* defrag, low-TTL: fills pages of its own */
    bool keeps_reserve;         /* low-TTL: its pages leave the writers'
                                   reserve alone (DEFRAG_RESERVE_PAGES) */
    int page;                   /* lock: that page, or -1 */
};

/* Free pages the other writers leave to defrag, so that it always has
 * somewhere to move live tuples to and space can be won back.  Two:
 * moving one page's tuples needs at most one page's slots, and defrag's
 * current page may have only a few left (a large tuple that does not fit
 * there finishes it).  The reserve is kept while defrag may need it: with
 * -M, while a restart still pins pages, with ext_drop_unread (its drop
 * moves the items read again), and while some page is worth re-packing.
 * Otherwise (cache mode, every page at least ext_max_frag live: only a
 * drop can win room) the writers keep none, as memcached's extstore, whose
 * writers take the last free page and evict the oldest for the next: the
 * oldest page is dropped when the writers take the last free one, while
 * they fill it.  A full SSD then holds all its pages but the one dropped
 * ahead, and has 0 or 1 free (sd.keep_free, keep_free_update). */
#define DEFRAG_RESERVE_PAGES 2

static struct {
    struct ssd_info info;
    unsigned free_wm;           /* free pages defrag keeps (atomic:
                                   compact_under_apply) */
    unsigned keep_free;         /* atomic: free pages the writers leave
                                   (DEFRAG_RESERVE_PAGES or 0; set by the
                                   defrag thread, keep_free_update) */
    bool unpinned;              /* defrag thread: no restart pin is left */
    unsigned drop_ahead;        /* atomic: free pages from which a full SSD
                                   drops its oldest page without waiting for
                                   the writers to reach their reserve (set
                                   at open, 0 from compact_under_apply) */
    struct writer *writers;     /* evictors, then shared, then low-TTL,
                                   then defrag */
    int nwriters;
    struct bg defrag;           /* the defrag thread */
    bool defrag_running;
    pthread_mutex_t lock;       /* the fields below */
    struct ssd_buf **failed;    /* bufs whose write failed, oldest first */
    size_t nfailed, failed_cap;
    size_t failed_max;          /* the bound on nfailed (set at open) */
    bool failing;               /* the last write failed, not yet one
                                   succeeded: logged once each way */
    unsigned retry_ms;          /* defrag thread: current back-off */
    bool write_ok;              /* a retry succeeded since the last look */
    unsigned retries_inflight;  /* failed bufs submitted again, not back */
    struct ssd_ring **rings;    /* synchronous-read rings, closed at exit */
    size_t nrings, rings_cap;
} sd;

static unsigned long long ssd_items;    /* atomic: SSD meta tuples */

/* Keys the SSD dropped for room (a full SSD's oldest page, a drop_unread
 * pass, failed bufs past their bound), remembered by item hash so that a
 * later get of one counts in ssd_dropped_misses: memcached's
 * miss_from_extstore, the misses a larger SSD would have served.  A
 * direct-mapped table of hashes: a newer drop in a slot forgets the older
 * one, a new version of the key clears its slot, a miss it explains
 * clears it too.  A hash is 32 bits, so another key counts only if it
 * shares all of them.  Slot value: hv | 1 (0 is empty).  Relaxed atomics:
 * the defrag thread writes, workers read and clear. */
#define GHOST_MIN (1u << 16)
#define GHOST_MAX (1u << 22)
#define GHOST_BYTES_PER_SLOT 16384     /* one slot per 16 KiB of SSD */
static uint32_t *ghosts;
static uint32_t ghost_mask;

static void ghost_init(uint64_t ssd_bytes)
{
    uint64_t want = ssd_bytes / GHOST_BYTES_PER_SLOT;
    uint32_t n = GHOST_MIN;
    while (n < want && n < GHOST_MAX)
        n <<= 1;
    ghosts = calloc(n, sizeof(*ghosts));
    ghost_mask = ghosts != NULL ? n - 1 : 0;
}

static void ghost_add(uint32_t hv)
{
    if (ghosts != NULL)
        __atomic_store_n(&ghosts[hv & ghost_mask], hv | 1, __ATOMIC_RELAXED);
}

/* Forgets hv's drop; true if it was remembered. */
static bool ghost_take(uint32_t hv)
{
    if (ghosts == NULL)
        return false;
    uint32_t want = hv | 1;
    return __atomic_compare_exchange_n(&ghosts[hv & ghost_mask], &want, 0, false,
                                       __ATOMIC_RELAXED, __ATOMIC_RELAXED);
}

void tac_ssd_read_missed(uint32_t hv)
{
    if (ghost_take(hv))
        TAC_INCR(ssd_dropped_misses);
}

void tac_ssd_key_stored(uint32_t hv)
{
    if (ghosts != NULL &&
        __atomic_load_n(&ghosts[hv & ghost_mask], __ATOMIC_RELAXED) == (hv | 1))
        ghost_take(hv);
}
static __thread int writer_slot = -1;   /* evictor id, or -1 */
static __thread struct ssd_ring *sync_ring;

static size_t tuple_len(const item *meta)
{
    return tac_tuple_size(meta->nkey, meta->nbytes);
}

/* A page at least -o ext_max_frag live (default 0.9) gains too little
 * from a move: when space is needed, the oldest page is dropped instead.
 * (memcached's compaction likewise re-packs only pages under max_frag.) */
static bool page_nearly_full(const struct ssd_page_info *pi)
{
    double frag;
    __atomic_load(&settings.ext_max_frag, &frag, __ATOMIC_RELAXED);
    return (double)pi->live >= (double)sd.info.page_size * frag;
}

static void defrag_wake(void)
{
    bg_wake(&sd.defrag);
}

/* ---- Writing ------------------------------------------------------------ */

void tac_ssd_set_writer(int evictor_id)
{
    writer_slot = evictor_id;
}

static struct writer *my_writer(void)
{
    int evictors = sd.nwriters - 3;
    if (writer_slot >= 0 && writer_slot < evictors)
        return &sd.writers[writer_slot];
    return &sd.writers[evictors];
}

/* -o ext_low_ttl N: a tuple whose item expires within N seconds goes into
 * pages of its own (memcached's low-TTL bucket), so that such pages empty
 * as their items expire and are reclaimed whole, rather than leaving holes
 * in the pages of long-lived items that only defrag can win back. */
static struct writer *writer_for(const item *it)
{
    int low = __atomic_load_n(&settings.ext_low_ttl, __ATOMIC_RELAXED);
    if (low > 0 && it->exptime != 0 && (int64_t)it->exptime - mc_now() < low)
        return &sd.writers[sd.nwriters - 2];
    return my_writer();
}

static struct writer *defrag_writer(void)
{
    return &sd.writers[sd.nwriters - 1];
}

static int64_t now_ms(void);

static void failed_push(struct ssd_buf *b)
{
    pthread_mutex_lock(&sd.lock);
    TAC_INCR(ssd_write_errors);
    if (!sd.failing) {
        sd.failing = true;
        int err = ssd_write_errno(tac.ssd);
        fprintf(stderr, "SSD tier: writes failing (%s); keeping up to %zu "
                "bufs in memory and retrying\n", strerror(err ? err : EIO),
                sd.failed_max);
    }
    if (sd.nfailed == sd.failed_cap) {
        size_t cap = sd.failed_cap ? sd.failed_cap * 2 : 16;
        struct ssd_buf **n = realloc(sd.failed, cap * sizeof(*n));
        if (n == NULL) {
            /* Cannot even remember it: the buf stays in memory and keeps
             * serving its tuples, it is just never written. */
            pthread_mutex_unlock(&sd.lock);
            return;
        }
        sd.failed = n;
        sd.failed_cap = cap;
    }
    sd.failed[sd.nfailed++] = b;
    /* Retries wait for their back-off; only the bound needs defrag now. */
    if (sd.nfailed > sd.failed_max && settings.evict_to_free)
        defrag_wake();
    pthread_mutex_unlock(&sd.lock);
}

/* Runs on the library's completion thread.  arg is non-NULL for the
 * retry of a buf that failed before. */
static void write_done(void *arg, struct ssd_buf *b, enum ssd_status st)
{
    bool retry = arg != NULL;
    pthread_mutex_lock(&sd.lock);
    if (retry)
        sd.retries_inflight--;
    pthread_mutex_unlock(&sd.lock);
    if (st != SSD_OK) {
        failed_push(b);
        return;
    }
    /* Only a retry that succeeds shows the cause is gone: a first write
     * into space already allocated may succeed while new space still
     * fails.  Failing ends once every failed buf has been written. */
    pthread_mutex_lock(&sd.lock);
    if (retry)
        sd.write_ok = true;
    if (sd.failing && sd.nfailed == 0 && sd.retries_inflight == 0) {
        sd.failing = false;
        fprintf(stderr, "SSD tier: writes succeed again\n");
    }
    pthread_mutex_unlock(&sd.lock);
}

/* With -M, an SSD that cannot be written and holds as many failed bufs as
 * it may is full: nothing more is written to it. */
static bool writes_refused(void)
{
    if (settings.evict_to_free)
        return false;
    pthread_mutex_lock(&sd.lock);
    bool full = sd.failing && sd.nfailed + sd.retries_inflight >= sd.failed_max;
    pthread_mutex_unlock(&sd.lock);
    return full;
}

static unsigned free_pages_now(void);

static unsigned writers_keep(void)
{
    return __atomic_load_n(&sd.keep_free, __ATOMIC_RELAXED);
}

static void writer_submit_locked(struct writer *w)
{
    if (ssd_buf_submit(w->buf, write_done, NULL) != SSD_OK)
        failed_push(w->buf);
    w->buf = NULL;
}

/* A page of w's own: defrag's may be one of the last free ones, the
 * low-TTL writer's leaves the reserve alone (checked, then taken: another
 * writer may take a page between, so it can dip into the reserve by a
 * page at most). */
static int writer_page_alloc(struct writer *w)
{
    if (w->keeps_reserve && free_pages_now() <= writers_keep())
        return -1;
    return ssd_page_alloc(tac.ssd);
}

/* Opens a buf for w: in the shared open page, leaving the defrag reserve
 * alone, or in a page of its own (defrag, low-TTL). */
static enum ssd_status writer_open(struct writer *w)
{
    if (!w->own_pages)
        return ssd_buf_open_keep(tac.ssd, writers_keep(), &w->buf);
    enum ssd_status st = SSD_ERR_FULL;
    if (w->page >= 0)
        st = ssd_buf_open_page(tac.ssd, w->page, &w->buf);
    if (st != SSD_OK) {
        if (w->page >= 0)
            ssd_page_finish(tac.ssd, w->page);
        w->page = writer_page_alloc(w);
        st = w->page < 0 ? SSD_ERR_FULL
                         : ssd_buf_open_page(tac.ssd, w->page, &w->buf);
    }
    return st;
}

/* A tuple larger than a buf gets a buf of its own spanning the slots it
 * needs (ssd_buf_open_large), written at once.  w->lock held. */
static bool writer_put_large(struct writer *w, const struct iovec *iov, int n,
                             size_t len, uint64_t *ref)
{
    struct ssd_buf *b = NULL;
    enum ssd_status st;
    if (!w->own_pages) {
        st = ssd_buf_open_large(tac.ssd, -1, writers_keep(), len, &b);
    } else {
        st = w->page >= 0 ? ssd_buf_open_large(tac.ssd, w->page, 0, len, &b)
                          : SSD_ERR_FULL;
        if (st != SSD_OK) {         /* too few slots left, or sealed */
            /* The small buf still filling keeps its slots in the old page. */
            if (w->page >= 0)
                ssd_page_finish(tac.ssd, w->page);
            w->page = writer_page_alloc(w);
            st = w->page < 0 ? SSD_ERR_FULL
                             : ssd_buf_open_large(tac.ssd, w->page, 0, len, &b);
        }
    }
    if (st != SSD_OK) {
        TAC_INCR(ssd_full);
        if (w != defrag_writer())
            defrag_wake();
        return false;
    }
    if (ssd_buf_appendv(b, iov, n, ref) != SSD_OK) {
        ssd_buf_release(b);
        return false;
    }
    TAC_INCR(ssd_large_bufs);
    if (ssd_buf_submit(b, write_done, NULL) != SSD_OK)
        failed_push(b);
    return true;
}

/* Appends one tuple (the pieces of iov) to w's buf; *ref gets its
 * reference.  False when the SSD has no free page (for w). */
static bool writer_put(struct writer *w, const struct iovec *iov, int n,
                       uint64_t *ref)
{
    bool ok = false;
    if (writes_refused()) {
        TAC_INCR(ssd_full);
        return false;
    }
    size_t len = 0;
    for (int i = 0; i < n; i++)
        len += iov[i].iov_len;
    pthread_mutex_lock(&w->lock);
    if (len > sd.info.buf_size) {
        ok = writer_put_large(w, iov, n, len, ref);
        pthread_mutex_unlock(&w->lock);
        if (ok)
            TAC_INCR(ssd_tuples_written);
        return ok;
    }
    for (int tries = 0; tries < 2 && !ok; tries++) {
        if (w->buf == NULL) {
            enum ssd_status st = writer_open(w);
            if (st != SSD_OK) {
                w->buf = NULL;
                TAC_INCR(ssd_full);
                if (w != defrag_writer())
                    defrag_wake();
                break;
            }
        }
        enum ssd_status st = ssd_buf_appendv(w->buf, iov, n, ref);
        if (st == SSD_OK) {
            ok = true;
            w->last_put_ms = now_ms();
        }
        else if (st == SSD_ERR_NOSPACE)
            writer_submit_locked(w);
        else
            break;
    }
    pthread_mutex_unlock(&w->lock);
    if (ok)
        TAC_INCR(ssd_tuples_written);
    return ok;
}

/* Writes a tuple's image (its n pieces in iov: tac_tuple_image, or a
 * copy of one) for new meta tuple `meta`, whose header is hdr; sets meta's
 * reference and write sequence. */
static bool put_tuple(item *meta, const struct tac_tuple_hdr *hdr,
                      const struct iovec *iov, int n, struct writer *w)
{
    uint64_t ref = 0;
    if (!writer_put(w, iov, n, &ref))
        return false;
    /* Until its buf is written. */
    tac_dramlog_tuple(hdr, iov, n, item_hash(ITEM_key(meta), meta->nkey));
    item_set_meta_ref(meta, ref);
    item_set_meta_seq(meta, hdr->seq);
    __atomic_add_fetch(&ssd_items, 1, __ATOMIC_RELAXED);
    return true;
}

/* A new meta tuple for `src` on SSD, not yet pointing anywhere. */
static item *ssd_meta_new(const item *src, int partition, bool reserved)
{
    item *meta = item_alloc_meta(src, TIER_SSD, 0, 0, partition, reserved);
    if (meta == NULL)
        TAC_INCR(meta_alloc_failures);
    return meta;
}

item *tac_ssd_store_copy(const item *it, int partition, bool reserved)
{
    if (tac.ssd == NULL)
        return NULL;
    item *meta = ssd_meta_new(it, partition, reserved);
    if (meta == NULL)
        return NULL;
    struct tac_tuple_hdr hdr;
    struct iovec iov[3];
    tac_tuple_fill(&hdr, it);
    int n = tac_tuple_image(&hdr, ITEM_key(it), ITEM_data(it), iov);
    if (!put_tuple(meta, &hdr, iov, n, writer_for(it))) {
        item_release(meta);         /* reference 0: frees nothing on SSD */
        return NULL;
    }
    return meta;
}

bool tac_ssd_from_nvm(item *meta, uint32_t hv)
{
    if (tac.ssd == NULL || tac.nvm == NULL || meta->tier != TIER_NVM ||
        (meta->it_flags & ITEM_TRANSIENT))
        return false;
    /* The NVM slot is pinned by the meta tuple: checked, then copied, in
     * place.  A damaged tuple is not carried down (the copy would keep its
     * checksum, so SSD reads would refuse it too): no tier can keep it. */
    struct tac_tuple_hdr hdr;
    const char *body = NULL;
    if (tac_nvm_tuple_checked(meta, &hdr, &body) == NULL) {
        do_item_unlink(meta, hv);
        return true;
    }
    if (!tac_ssd_takes(meta->nbytes)) {
        do_item_evict(meta, hv);        /* -o ext_item_size, as in tac_demote */
        return true;
    }
    item *n = ssd_meta_new(meta, meta->partition, true);
    if (n == NULL)
        return false;
    /* The tuple's bytes as they lie in NVM, sealed or not. */
    struct iovec iov[2] = {
        { &hdr, sizeof(hdr) },
        { (void *)body, tac_tuple_size(hdr.nkey, hdr.nbytes) - sizeof(hdr) },
    };
    if (!put_tuple(n, &hdr, iov, 2, writer_for(meta))) {
        item_release(n);
        return false;
    }
    do_item_move(meta, n, hv);
    CRASH_POINT(move_nvm_to_ssd);
    item_release(n);
    TAC_INCR(evict_nvm_to_ssd);
    return true;
}

bool tac_ssd_meta_rehome(item *meta, uint32_t hv)
{
    uint64_t ref = item_meta_ref(meta);
    item *n = item_alloc_meta(meta, TIER_SSD, 0, ref, meta->partition, true);
    if (n == NULL) {
        TAC_INCR(meta_alloc_failures);
        return false;
    }
    do_item_move(meta, n, hv);
    item_set_meta_ref(meta, 0);     /* its release must not free the tuple */
    item_release(n);
    TAC_INCR(meta_rehomed);
    return true;
}

bool tac_ssd_unwritten(const item *meta)
{
    struct ssd_buf *pin;
    if (tac.ssd == NULL ||
        ssd_buf_lookup(tac.ssd, item_meta_ref(meta), tuple_len(meta), &pin) == NULL)
        return false;
    ssd_buf_unpin(pin);
    return true;
}

void tac_ssd_release(item *meta)
{
    uint64_t ref = item_meta_ref(meta);
    if (tac.ssd == NULL || ref == 0)
        return;
    ssd_mark_dead(tac.ssd, ref, tuple_len(meta));
    __atomic_sub_fetch(&ssd_items, 1, __ATOMIC_RELAXED);
}

bool tac_ssd_full(void)
{
    if (tac.ssd == NULL || writes_refused())
        return true;
    struct ssd_stats st;
    ssd_get_stats(tac.ssd, &st);
    if (st.pages_free > writers_keep())
        return false;
    /* Defrag can still win a page unless even the emptiest is all but
     * full; with -M that is where it stops (defrag_page). */
    struct ssd_page_info pi;
    return ssd_page_emptiest(tac.ssd, &pi) < 0 ||
           page_nearly_full(&pi);
}

/* ---- A restart (tac/restart.c) ------------------------------------------ */

item *tac_ssd_meta_adopt(const item *src, uint64_t ref, int partition)
{
    item *meta = item_alloc_meta(src, TIER_SSD, 0, ref, partition, false);
    if (meta != NULL)
        __atomic_add_fetch(&ssd_items, 1, __ATOMIC_RELAXED);
    return meta;
}

void tac_ssd_flush(void)
{
    if (tac.ssd == NULL)
        return;
    for (int i = 0; i < sd.nwriters; i++) {
        struct writer *w = &sd.writers[i];
        pthread_mutex_lock(&w->lock);
        if (w->buf != NULL)
            writer_submit_locked(w);
        pthread_mutex_unlock(&w->lock);
    }
    ssd_wait_idle(tac.ssd);
}

bool tac_ssd_written(uint64_t ref, size_t len)
{
    struct ssd_buf *pin = NULL;
    if (!ssd_ref_current(tac.ssd, ref))
        return false;
    if (ssd_buf_lookup(tac.ssd, ref, len, &pin) == NULL)
        return true;
    ssd_buf_unpin(pin);
    return false;
}

unsigned long long tac_ssd_items(void)
{
    return __atomic_load_n(&ssd_items, __ATOMIC_RELAXED);
}

/* ---- Reading ------------------------------------------------------------ */

enum fill_result {
    FILL_OK,
    FILL_OTHER,     /* not t's tuple: moved or reclaimed, unless t's meta
                       tuple still points there (then damaged) */
    FILL_CORRUPT,   /* t's tuple, damaged: never served */
};

/* Checks that [data, data + len), a tuple as the media holds it, is the
 * tuple of transient item t's key and version (write sequence seq, checked
 * with a tier key), and puts its value into t.  Counts nothing: whether a
 * FILL_OTHER is damage depends on where the key's meta tuple points. */
static enum fill_result transient_fill(item *t, uint64_t seq, const char *data,
                                       size_t len)
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
    bool same_key = memcmp(key, ITEM_key(t), t->nkey) == 0;
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
static bool do_tuple_damaged(const char *key, size_t nkey, uint32_t hv,
                             uint64_t ref)
{
    item *it = do_item_get(key, nkey, hv, NULL, false);
    if (it == NULL)
        return false;
    bool here = item_value_async(it) && item_meta_ref(it) == ref;
    if (here) {
        tac_tuple_refused();
        do_item_unlink(it, hv);
    }
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
    return ssd_read(pr->rd->ring, ref, tuple_len(pr->t), read_done, pr) == SSD_OK;
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
    if (value == NULL)
        TAC_INCR(ssd_read_misses);
    read_finish(pr, value);
}

/* -o ext_recache_rate N (memcached's, default 2000 as there): every Nth
 * SSD read that found its tuple asks the fetcher to move the item up to
 * DRAM, whatever its temperature (0: never); the fetcher does it only if
 * the item was read again after its first read (ITEM_ACTIVE, checked
 * there under the item lock: the flags are not read without it). */
static bool recache_turn(void)
{
    static unsigned long long reads;    /* atomic */
    int rate = __atomic_load_n(&settings.ext_recache_rate, __ATOMIC_RELAXED);
    return rate > 0 &&
           __atomic_add_fetch(&reads, 1, __ATOMIC_RELAXED) % (unsigned)rate == 0;
}

static void read_done(void *arg, enum ssd_status st, const char *data,
                      size_t len)
{
    struct pending_read *pr = arg;
    enum fill_result fill = st == SSD_OK
        ? transient_fill(pr->t, item_meta_seq(pr->meta), data, len)
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
        /* A warm or hot SSD item brings its whole buf up (TaC 4.2);
         * the comparison policies move only the item itself. */
        enum llru_temp temp = llru_temperature(pr->meta);
        bool up = tac.policy == POLICY_ANTI2 || temp == LLRU_HOT ||
                  (temp == LLRU_WARM && tac.nvm != NULL);
        if (up && (tac.policy == POLICY_TAC || tac.policy == POLICY_TWOTIER))
            tac_fetch_ssd_buf(pr->meta);
        else if (up)
            tac_fetch_ssd_tuple(pr->meta);
        else if (recache_turn())
            tac_fetch_ssd_recache(pr->meta);
        read_finish(pr, pr->t);
        return;
    }
    read_relookup(pr, st == SSD_OK);
}

bool tac_read_value(struct tac_reader *rd, item *meta, uint32_t hv,
                    tac_value_fn fn, void *arg)
{
    /* A read pins meta until it completes: past the held-reference bound
     * (items.h) none is started, and the caller answers without it. */
    if (rd == NULL || !item_value_async(meta) || item_refs_crowded(meta))
        return false;
    struct pending_read *pr = malloc(sizeof(*pr));
    if (pr == NULL)
        return false;
    pr->t = tac_transient_new(meta);
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
    if (sync_ring != NULL)
        return sync_ring;
    struct ssd_ring *r = ssd_ring_create(tac.ssd);
    if (r == NULL)
        return NULL;
    pthread_mutex_lock(&sd.lock);
    if (sd.nrings == sd.rings_cap) {
        size_t cap = sd.rings_cap ? sd.rings_cap * 2 : 8;
        struct ssd_ring **n = realloc(sd.rings, cap * sizeof(*n));
        if (n == NULL) {
            pthread_mutex_unlock(&sd.lock);
            ssd_ring_destroy(r);
            return NULL;
        }
        sd.rings = n;
        sd.rings_cap = cap;
    }
    sd.rings[sd.nrings++] = r;
    pthread_mutex_unlock(&sd.lock);
    sync_ring = r;
    return r;
}

/* Reads ref's tuple (len bytes) or, with whole, its whole buf into io
 * (grown as needed) and waits.  *got gets the bytes read. */
static enum ssd_status read_sync(uint64_t ref, size_t len, bool whole,
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

item *tac_ssd_materialize(item *meta)
{
    if (tac.ssd == NULL || !item_value_async(meta))
        return NULL;
    size_t len = tuple_len(meta);
    uint64_t ref = item_meta_ref(meta);
    /* A worker never waits for the device: only a tuple whose buf is still
     * in memory is served here; every other read parks (tac_read_value). */
    struct ssd_buf *pin = NULL;
    const char *data = ssd_buf_lookup(tac.ssd, ref, len, &pin);
    if (data == NULL) {
        TAC_INCR(ssd_reads_unparked);
        return NULL;
    }
    item *t = tac_transient_new(meta);
    bool ok = t != NULL;
    if (ok && transient_fill(t, item_meta_seq(meta), data, len) != FILL_OK) {
        /* The caller holds the item lock (tier_ops.materialize), so meta
         * still points at what was read: it is damaged. */
        do_tuple_damaged(ITEM_key(meta), meta->nkey,
                         item_hash(ITEM_key(meta), meta->nkey), ref);
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
static size_t tuple_at(const char *mem, size_t used, size_t off)
{
    struct tac_tuple_hdr hdr;
    if (off + sizeof(hdr) > used)
        return 0;
    memcpy(&hdr, mem + off, sizeof(hdr));
    if (!tac_tuple_sane(&hdr, used - off))
        return 0;
    return tac_tuple_size(hdr.nkey, hdr.nbytes);
}

/* Offset of the tuple after the one at off, len bytes long. */
static size_t tuple_next(size_t off, size_t len)
{
    return (off + len + SSD_TUPLE_ALIGN - 1) / SSD_TUPLE_ALIGN * SSD_TUPLE_ALIGN;
}

bool tac_ssd_scan_buf(uint64_t ref, struct tac_iobuf *io,
                      void (*fn)(uint64_t tref, const char *tuple, void *arg),
                      void *arg, uint64_t *damaged)
{
    size_t got = 0;
    if (read_sync(ref, 0, true, io, &got) != SSD_OK)
        return false;
    size_t off = 0;
    while (off + sizeof(struct tac_tuple_hdr) <= got) {
        size_t len = tuple_at(io->mem, got, off);
        if (len == 0) {
            (*damaged)++;           /* the rest of the buf cannot be walked */
            break;
        }
        if (!tuple_open_in_place(io->mem + off))
            (*damaged)++;
        else
            fn(ref + off, io->mem + off, arg);
        off = tuple_next(off, len);
    }
    return true;
}

/* ---- Fetch (hybrid swapping, TaC 4.2 and 5.4) ---------------------------- */

size_t tac_ssd_buf_size(void)
{
    return tac.ssd != NULL ? sd.info.buf_size : 0;
}

/* Moves the tuple at tref (a copy at data, whose key reads as `key`:
 * tac_tuple_key_hint) up if it is valid and warm or hot, or with recache
 * (-o ext_recache_rate) to DRAM whatever its temperature.  Caller holds
 * the key's item lock. */
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
    enum llru_temp temp = llru_temperature(meta);
    /* anti2: no distinction; a recache (memcached's) goes to DRAM. */
    if (tac.policy == POLICY_ANTI2 || recache)
        temp = LLRU_HOT;
    item *t = NULL;
    /* A stale-marked item (`md ... I`) stays where it is: a copy written up
     * would be a new tuple without the mark, served fresh, and its new seq
     * lies above the invalidation the mark recorded, so a crash would bring
     * it back fresh too (tac_demote drops such an item for the same
     * reason). */
    if (!item_value_async(meta) || item_meta_ref(meta) != tref ||
        (meta->it_flags & ITEM_STALE) ||
        (recache && !(meta->it_flags & ITEM_ACTIVE)) ||
        temp == LLRU_COLD || (t = tac_transient_new(meta)) == NULL) {
        item_release(meta);
        return;
    }
    if (transient_fill(t, item_meta_seq(meta), data,
                       tac_tuple_size(hdr.nkey, hdr.nbytes)) != FILL_OK) {
        /* meta points at tref, whose bytes these are: damaged. */
        item_release(t);
        item_release(meta);
        do_tuple_damaged(key, hdr.nkey, hv, tref);
        return;
    }
    item *up = NULL;
    if (temp == LLRU_WARM) {
        /* Warm items go to NVM; when it is full, its coldest tuple moves
         * down to SSD to make room (nvm_place). */
        if (tac.nvm != NULL)
            up = tac_nvm_store_copy(t, meta->partition, false);
        if (up != NULL)
            TAC_INCR(fetch_ssd_to_nvm);
    } else {
        /* anti2: the tuple comes into memory, DRAM or NVM by chance. */
        if (!tac_anti2_to_nvm())
            up = item_alloc_promote(meta, meta->partition);
        if (up != NULL) {
            memcpy(ITEM_data(up), ITEM_data(t), t->nbytes);
            TAC_INCR(fetch_ssd_to_dram);
        } else if (tac.policy == POLICY_ANTI2 && tac.nvm != NULL) {
            /* anti2: NVM is memory too. */
            up = tac_nvm_store_copy(t, meta->partition, false);
            if (up != NULL)
                TAC_INCR(fetch_ssd_to_nvm);
        }
    }
    item_release(t);
    if (up == NULL) {
        if (temp == LLRU_HOT)
            TAC_INCR(fetch_no_room);
    } else {
        do_item_move(meta, up, hv); /* frees the SSD bytes with meta */
        item_release(up);
    }
    item_release(meta);
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
    if (read_sync(ref, len, false, io, &got) != SSD_OK ||
        tuple_at(io->mem, got, 0) != len)
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
    size_t bs = sd.info.buf_size;
    uint64_t base = ref - ssd_ref_offset(ref) % bs;
    size_t used = 0;
    if (read_sync(base, 0, true, io, &used) != SSD_OK)
        return;
    const char *mem = io->mem;
    for (size_t off = 0, len; (len = tuple_at(mem, used, off)) != 0;
         off = tuple_next(off, len)) {
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

/* ---- Defrag, reclaim, write retries ------------------------------------- */

/* How defrag empties a page (defrag_page). */
enum defrag_mode {
    DEFRAG_MOVE,        /* re-pack: move every live tuple */
    DEFRAG_DROP,        /* the SSD is full: drop every live tuple's item */
    DEFRAG_DROP_UNREAD, /* full, -o ext_drop_unread: move the items read
                           again after their first read (ITEM_ACTIVE, which
                           the move clears), drop the others
                           (ssd_defrag_skipped) */
};

/* Handles the tuple at tref (a copy at data, len bytes) of a page being
 * emptied: if it is live, moves it into the defrag buf or drops its item,
 * as mode says.  False when it is live but could not be moved. */
static bool defrag_tuple(uint64_t tref, const char *data, size_t len,
                         enum defrag_mode mode)
{
    bool drop = mode == DEFRAG_DROP;
    struct tac_tuple_hdr hdr;
    memcpy(&hdr, data, sizeof(hdr));
    const char *body = data + sizeof(hdr);
    char buf[KEY_MAX_LENGTH];
    const char *key = tac_tuple_key_hint(&hdr, body, buf);
    uint32_t hv = item_hash(key, hdr.nkey);
    bool ok = true;
    item_lock(hv);
    item *it = do_item_get(key, hdr.nkey, hv, NULL, false);
    if (it != NULL && item_value_async(it) && item_meta_ref(it) == tref) {
        bool unread = mode == DEFRAG_DROP_UNREAD &&
                      (it->it_flags & ITEM_ACTIVE) == 0;
        if (unread) {
            /* Lost from the SSD, the last tier: counted in the SSD's
             * counters, not in `evictions` (memory's, as memcached's). */
            do_item_unlink(it, hv);
            ghost_add(hv);
            TAC_INCR(ssd_defrag_skipped);
            item_release(it);
            item_unlock(hv);
            return true;
        }
        /* Checked whole before it is copied on: a damaged tuple, or
         * another key's or an older version put in its place, is not
         * copied: its item is dropped. */
        const char *clear;
        bool for_room = drop;
        if (!drop && (tac_tuple_open_scratch(&hdr, body, &clear) != TUPLE_OK ||
                      !tac_tuple_owned(it, &hdr, clear))) {
            tac_tuple_refused();
            drop = true;
        }
        if (drop) {
            do_item_unlink(it, hv);
            if (for_room)
                ghost_add(hv);
            TAC_INCR(ssd_items_dropped);
            TAC_ADD(ssd_bytes_dropped, len);
        } else {
            /* Copied as it lies, sealed or not. */
            struct iovec iov[2] = {
                { &hdr, sizeof(hdr) },
                { (void *)body, len - sizeof(hdr) },
            };
            uint64_t nref = 0;
            ok = writer_put(defrag_writer(), iov, 2, &nref);
            if (ok) {
                /* The old page may be reused before the new buf is
                 * written. */
                tac_dramlog_tuple(&hdr, iov, 2, hv);
                item_set_meta_ref(it, nref);
                /* Kept once for its reads: the next such drop keeps it
                 * only if it is read again (so it cannot cycle for ever). */
                if (mode == DEFRAG_DROP_UNREAD)
                    it->it_flags &= ~ITEM_ACTIVE;
                ssd_mark_dead(tac.ssd, tref, len);
                CRASH_POINT(ssd_defrag_tuple);
                TAC_INCR(ssd_defrag_moved);
            }
        }
    }
    if (it != NULL)
        item_release(it);
    item_unlock(hv);
    return ok;
}

/* Walks the tuples of one buf image (mem, used bytes) whose first byte is
 * at reference base.  When a live tuple cannot be moved (no page left for
 * defrag either), the SSD is full: the rest are dropped (*drop), or with
 * -M, or while a restart still indexes pinned pages, defrag gives up. */
static bool defrag_buf(uint64_t base, const char *mem, size_t used,
                       enum defrag_mode *mode)
{
    for (size_t off = 0, len; (len = tuple_at(mem, used, off)) != 0;
         off = tuple_next(off, len)) {
        if (!defrag_tuple(base + off, mem + off, len, *mode)) {
            if (!settings.evict_to_free || ssd_any_pinned(tac.ssd))
                return false;
            *mode = DEFRAG_DROP;
            defrag_tuple(base + off, mem + off, len, DEFRAG_DROP);
        }
    }
    return true;
}

/* Wins back one page: re-packs the live tuples of the sealed page with the
 * fewest live bytes.  When even that page is nearly all live, the SSD is
 * full: the oldest page's items are dropped (cache semantics), or with
 * -o ext_drop_unread only those not read again after their first read
 * while the others move on (memcached's compaction with drop_unread), or
 * with -M nothing is done.  Returns false when there was nothing to do or
 * it could not proceed. */
static bool defrag_page(struct tac_iobuf *io)
{
    struct ssd_page_info pi;
    int page = ssd_page_emptiest(tac.ssd, &pi);
    if (page < 0)
        return false;
    bool drop = page_nearly_full(&pi);
    /* Nothing is dropped while the writers still have a free page beyond
     * what they keep (DEFRAG_RESERVE_PAGES) and sd.drop_ahead; with
     * ext_drop_unread, from ext_drop_under free pages on (memcached's
     * drop_under). */
    if (drop && settings.evict_to_free) {
        unsigned nfree = free_pages_now();
        unsigned ahead = __atomic_load_n(&sd.drop_ahead, __ATOMIC_RELAXED);
        unsigned at = writers_keep() > ahead ? writers_keep() : ahead;
        if (nfree > at &&
            !(__atomic_load_n(&settings.ext_drop_unread, __ATOMIC_RELAXED) &&
              nfree <= (unsigned)__atomic_load_n(&settings.ext_drop_under, __ATOMIC_RELAXED)))
            return false;
    }
    if (drop && !settings.evict_to_free)
        return false;               /* -M: a full SSD refuses new tuples */
    /* While a restart still indexes its pinned pages, the room their dead
     * copies hold cannot be won back yet, and the unpinned pages are the
     * ones it just indexed or filled since: nothing is dropped until it is
     * done (a writer to SSD waits), or it would evict what it just
     * recovered while the SSD has room. */
    if (drop && ssd_any_pinned(tac.ssd))
        return false;
    enum defrag_mode mode = DEFRAG_MOVE;
    if (drop) {
        page = ssd_page_oldest(tac.ssd, &pi);
        mode = __atomic_load_n(&settings.ext_drop_unread, __ATOMIC_RELAXED)
               ? DEFRAG_DROP_UNREAD : DEFRAG_DROP;
    }
    if (page < 0)
        return false;
    if (mode == DEFRAG_DROP)
        TAC_INCR(ssd_pages_dropped);
    else
        TAC_INCR(ssd_defrag_runs);
    for (unsigned slot = 0; slot < sd.info.bufs_per_page; slot++) {
        uint64_t base;
        uint32_t used = ssd_page_buf(tac.ssd, page, slot, &base);
        if (used == 0)
            continue;
        if (ssd_ref_version(base) != pi.version)
            return true;            /* reclaimed meanwhile */
        size_t got = 0;
        enum ssd_status st = read_sync(base, 0, true, io, &got);
        if (st == SSD_ERR_STALE)
            return true;
        if (st != SSD_OK)
            return false;           /* counted by ssd/ as an I/O error */
        if (!defrag_buf(base, io->mem, got, &mode))
            return false;
    }
    /* Every tuple found valid was moved or dropped: whatever live bytes
     * remain belong to nobody. */
    ssd_page_drop(tac.ssd, page, pi.version);
    return true;
}

/* Submits the oldest failed buf again, or all of them once a write has
 * succeeded: a failing device sees one write per back-off period. */
static void retry_failed_writes(void)
{
    pthread_mutex_lock(&sd.lock);
    bool all = sd.write_ok;
    sd.write_ok = false;
    size_t n = all ? sd.nfailed : (sd.nfailed > 0 ? 1 : 0);
    struct ssd_buf **list = malloc((n ? n : 1) * sizeof(*list));
    if (list == NULL)
        n = 0;
    for (size_t i = 0; i < n; i++)
        list[i] = sd.failed[i];
    memmove(sd.failed, sd.failed + n, (sd.nfailed - n) * sizeof(*sd.failed));
    sd.nfailed -= n;
    sd.retries_inflight += (unsigned)n;
    pthread_mutex_unlock(&sd.lock);
    for (size_t i = 0; i < n; i++) {
        TAC_INCR(ssd_write_retries);
        if (ssd_buf_submit(list[i], write_done, &sd) != SSD_OK) {
            pthread_mutex_lock(&sd.lock);
            sd.retries_inflight--;
            pthread_mutex_unlock(&sd.lock);
            failed_push(list[i]);
        }
    }
    free(list);
}

/* Drops the items of failed buf b (those whose meta tuple still points
 * into it) and frees it. */
static void drop_failed_buf(struct ssd_buf *b)
{
    const char *mem = ssd_buf_data(b);
    size_t used = ssd_buf_used(b);
    uint64_t base = ssd_buf_ref(b);
    for (size_t off = 0, len; (len = tuple_at(mem, used, off)) != 0;
         off = tuple_next(off, len)) {
        const struct tac_tuple_hdr *hdr = (const void *)(mem + off);
        const char *key = mem + off + sizeof(*hdr);
        uint32_t hv = item_hash(key, hdr->nkey);
        item_lock(hv);
        item *it = do_item_get(key, hdr->nkey, hv, NULL, false);
        if (it != NULL && item_value_async(it) && item_meta_ref(it) == base + off) {
            do_item_unlink(it, hv);
            ghost_add(hv);
            TAC_INCR(ssd_items_dropped);
            TAC_ADD(ssd_bytes_dropped, len);
        }
        if (it != NULL)
            item_release(it);
        item_unlock(hv);
    }
    TAC_INCR(ssd_failed_bufs_dropped);
    ssd_buf_release(b);
}

/* Without -M, keeps the failed bufs within their bound by dropping the
 * oldest. */
static void drop_failed_over_bound(void)
{
    if (!settings.evict_to_free)
        return;
    for (;;) {
        pthread_mutex_lock(&sd.lock);
        struct ssd_buf *b = NULL;
        if (sd.nfailed > sd.failed_max) {
            b = sd.failed[0];
            memmove(sd.failed, sd.failed + 1, (sd.nfailed - 1) * sizeof(*sd.failed));
            sd.nfailed--;
        }
        pthread_mutex_unlock(&sd.lock);
        if (b == NULL)
            return;
        drop_failed_buf(b);
    }
}

/* The pages the writers keep for defrag (DEFRAG_RESERVE_PAGES): none in
 * cache mode once no restart pins pages (pins come only at start),
 * without ext_drop_unread, while no page is worth re-packing.  Looked at
 * only when few pages are free; above that the writers never reach the
 * reserve. */
static void keep_free_update(void)
{
    if (!settings.evict_to_free)
        return;
    if (!sd.unpinned) {
        if (ssd_any_pinned(tac.ssd))
            return;
        sd.unpinned = true;
    }
    unsigned keep = DEFRAG_RESERVE_PAGES;
    if (!__atomic_load_n(&settings.ext_drop_unread, __ATOMIC_RELAXED) &&
        free_pages_now() <= DEFRAG_RESERVE_PAGES + 1) {
        struct ssd_page_info pi;
        int page = ssd_page_emptiest(tac.ssd, &pi);
        if (page < 0 || page_nearly_full(&pi))
            keep = 0;
    }
    __atomic_store_n(&sd.keep_free, keep, __ATOMIC_RELAXED);
}

static unsigned free_pages_now(void)
{
    struct ssd_stats st;
    ssd_get_stats(tac.ssd, &st);
    return (unsigned)st.pages_free;
}

static int64_t now_ms(void)
{
    return (int64_t)(util_now_ns() / 1000000);
}

/* The defrag thread: retries failed writes with back-off, keeps them
 * within their bound, and re-packs the emptiest page while free pages are
 * short.  One page, or one retry round, per pass. */
/* A buf that took no tuple for IDLE_BUF_MS is written out as it is, so
 * that when writes pause, what went to SSD is on the device within about
 * a second and survives a crash.  Its slot's unused rest stays empty. */
static void flush_idle_bufs(int64_t now)
{
    for (int i = 0; i < sd.nwriters; i++) {
        struct writer *w = &sd.writers[i];
        if (pthread_mutex_trylock(&w->lock) != 0)
            continue;
        if (w->buf != NULL && now - w->last_put_ms >= IDLE_BUF_MS)
            writer_submit_locked(w);
        pthread_mutex_unlock(&w->lock);
    }
}

static void defrag_main(struct bg *g, unsigned idx, void *arg)
{
    (void)idx;
    (void)arg;
    struct tac_iobuf io = { malloc(sd.info.buf_size), sd.info.buf_size };
    if (io.mem == NULL) {
        fprintf(stderr, "SSD tier: no memory for the defrag thread\n");
        return;
    }
    int64_t next_retry = 0, next_tick = 0;
    sd.retry_ms = WRITE_RETRY_MIN_MS;
    for (;;) {
        pthread_mutex_lock(&sd.lock);
        bool stop = !bg_running(g);
        bool have_failed = sd.nfailed > 0;
        bool failing = sd.failing;
        if (sd.write_ok || !failing)
            sd.retry_ms = WRITE_RETRY_MIN_MS;
        pthread_mutex_unlock(&sd.lock);
        if (stop)
            break;
        keep_free_update();
        drop_failed_over_bound();
        int64_t now = now_ms();
        if (now >= next_tick) {
            flush_idle_bufs(now);
            tac_journal_tick();
            next_tick = now + IDLE_BUF_MS / 4;
        }
        if (have_failed && now >= next_retry) {
            retry_failed_writes();
            next_retry = now + sd.retry_ms;
            if (sd.retry_ms < WRITE_RETRY_MAX_MS)
                sd.retry_ms = sd.retry_ms * 2 < WRITE_RETRY_MAX_MS
                              ? sd.retry_ms * 2 : WRITE_RETRY_MAX_MS;
        }
        /* Moving tuples means writing them: not while writes fail. */
        /* Defrag starts before the writers reach their reserve. */
        unsigned wm = __atomic_load_n(&sd.free_wm, __ATOMIC_RELAXED);
        if (wm < writers_keep() + 1)
            wm = writers_keep() + 1;
        if (!failing && free_pages_now() < wm && defrag_page(&io))
            continue;
        int wait = DEFRAG_IDLE_MS;
        if (have_failed) {
            int64_t left = next_retry - now_ms();
            wait = left < 1 ? 1 : (int)left;
        }
        bg_wait(g, (uint64_t)wait * 1000000u);
    }
    free(io.mem);
}

/* ---- Set-up ------------------------------------------------------------- */

/* True when path (or, for a file not yet created, its directory) is on
 * tmpfs: RAM, not a disk.  A block device is never refused. */
static bool on_tmpfs(const char *path)
{
    struct stat st;
    if (stat(path, &st) == 0 && S_ISBLK(st.st_mode))
        return false;
    char *copy = strdup(path);
    if (copy == NULL)
        return false;
    struct statfs fs;
    bool exists = stat(path, &st) == 0;
    int rc = statfs(exists ? path : dirname(copy), &fs);
    free(copy);
    return rc == 0 && fs.f_type == TMPFS_MAGIC;
}

/* The defrag watermark wm within its bounds: defrag works while fewer
 * pages are free.  At least 2 in cache mode, where the writers may keep
 * no page (defrag_main raises it to one above what they keep), and with
 * -M one above DEFRAG_RESERVE_PAGES: defrag must start before the writers
 * stop at its reserve.  At most half the pages unless an operator set it
 * (ssd_free_pages, compact_under), and then at most all but the defrag
 * reserve. */
static unsigned free_wm_bounded(unsigned wm, bool set)
{
    unsigned max = set ? sd.info.npages - DEFRAG_RESERVE_PAGES : sd.info.npages / 2;
    unsigned min = settings.evict_to_free ? 2 : DEFRAG_RESERVE_PAGES + 1;
    if (wm > max)
        wm = max;
    if (wm < min)
        wm = min;
    return wm;
}

/* `extstore compact_under N` (settings_set_compact_under): defrag works
 * while N or fewer SSD pages are free, within its bounds (at least 2, at
 * most all but defrag's reserve). */
static void compact_under_apply(unsigned pages)
{
    if (tac.ssd == NULL)
        return;
    unsigned wm = free_wm_bounded(pages + 1, true);
    __atomic_store_n(&sd.free_wm, wm, __ATOMIC_RELAXED);
    __atomic_store_n(&sd.drop_ahead, 0, __ATOMIC_RELAXED);    /* an operator's watermark */
    defrag_wake();
}

/* The options were checked and parsed by settings.c. */
bool tac_ssd_open(void)
{
    if (settings.ssd_path == NULL)
        return true;
    struct ssd_config cfg = { 0 };
    const char *path = settings.ssd_file;
    cfg.engine = settings.ssd_io_engine == SSD_ENGINE_THREADS ? SSD_IO_THREADS
                                                              : SSD_IO_URING;
    if (on_tmpfs(path)) {
        fprintf(stderr, "cannot open the SSD tier at %s: it is on tmpfs, which is "
                "memory; put the SSD file on a disk file system or use a block "
                "device\n", path);
        return false;
    }
    cfg.path = path;
    cfg.size = settings.ssd_size;
    cfg.page_size = (size_t)settings.ssd_page_size;
    cfg.buf_size = (size_t)settings.ssd_buf_size;
    cfg.threads = (unsigned)settings.ext_threads;      /* 0: the default */
    /* A tuple larger than a buf spans slots of one page: the page bounds
     * the largest tuple, so it grows with -I unless set. */
    size_t bs = cfg.buf_size ? cfg.buf_size : SSD_DEFAULT_BUF_SIZE;
    size_t need = tac_tuple_size(KEY_MAX_LENGTH, (size_t)settings.item_size_max + 2);
    need = (need + bs - 1) / bs * bs;
    if (cfg.page_size == 0 && need > SSD_DEFAULT_PAGE_SIZE)
        cfg.page_size = need;
    if (cfg.page_size != 0 && cfg.page_size < need && cfg.page_size % bs == 0) {
        fprintf(stderr, "-o ssd_page_size=%zu raised to %zu to hold the largest "
                "item (-I %zu with its key and header, in whole bufs)\n",
                cfg.page_size, need, (size_t)settings.item_size_max);
        cfg.page_size = need;
    }
    /* A page id has 16 bits: a file larger than SSD_MAX_PAGES pages takes
     * larger pages (whole bufs), rather than leaving the rest unused. */
    size_t ps = cfg.page_size ? cfg.page_size : SSD_DEFAULT_PAGE_SIZE;
    if (cfg.size / ps > SSD_MAX_PAGES) {
        size_t grown = (size_t)((cfg.size + SSD_MAX_PAGES - 1) / SSD_MAX_PAGES);
        grown = (grown + bs - 1) / bs * bs;
        fprintf(stderr, "SSD tier: pages of %zu bytes instead of %zu, so that %u pages "
                "cover its %zu bytes\n", grown, ps, SSD_MAX_PAGES, (size_t)cfg.size);
        cfg.page_size = grown;
    }
    cfg.reformat = settings.tier_reformat != 0;
    memcpy(cfg.key_check, tac_crypt_key_check(), sizeof(cfg.key_check));
    enum ssd_status st = ssd_open(&cfg, &tac.ssd);
    if (st == SSD_ERR_NOT_OURS) {
        tac_refuse_tier_file("ssd_path", path, ssd_refusal());
        return false;
    }
    if (st != SSD_OK) {
        fprintf(stderr, "cannot open the SSD tier at %s: %s", path, ssd_strerror(st));
        if (st == SSD_ERR_DIRECT)
            fprintf(stderr, " (tmpfs such as /dev/shm cannot do O_DIRECT; put "
                    "the SSD file on a disk file system)");
        else if (st == SSD_ERR_ARG)
            fprintf(stderr, " (page size must be a multiple of the buf size, "
                    "the buf size a multiple of 4k, and the file hold at least "
                    "4 pages)");
        else if (errno != 0)
            fprintf(stderr, " (%s)", strerror(errno));
        fputc('\n', stderr);
        return false;
    }
    ssd_get_info(tac.ssd, &sd.info);
    if (sd.info.npages == SSD_MAX_PAGES &&
        (uint64_t)sd.info.npages * sd.info.page_size + 2 * sd.info.page_size < sd.info.size)
        fprintf(stderr, "SSD tier: only %u pages of %zu bytes of its %llu bytes are "
                "used (a larger -o ssd_page_size uses it all)\n", sd.info.npages,
                sd.info.page_size, (unsigned long long)sd.info.size);
    if (sd.info.npages < 4) {
        fprintf(stderr, "SSD tier too small: %u pages of %zu bytes; it needs "
                "at least 4 (use a larger file or a smaller ssd_page_size)\n",
                sd.info.npages, sd.info.page_size);
        ssd_close(tac.ssd);
        tac.ssd = NULL;
        return false;
    }
    if (cfg.engine == SSD_IO_URING && sd.info.engine == SSD_IO_THREADS)
        fprintf(stderr, "SSD tier: io_uring is unavailable here; using a "
                "pread/pwrite thread pool\n");
    unsigned wm = settings.ssd_free_pages > 0 ? (unsigned)settings.ssd_free_pages
                : settings.ext_compact_under > 0 ? (unsigned)settings.ext_compact_under + 1
                : sd.info.npages / 50;
    sd.free_wm = free_wm_bounded(wm, settings.ssd_free_pages > 0 ||
                                      settings.ext_compact_under > 0);
    sd.keep_free = DEFRAG_RESERVE_PAGES;    /* the defrag thread lowers it */
    /* A large SSD (150 pages or more, default watermark) drops ahead from
     * the watermark down: dropping a page takes a while (its bufs are read
     * and its items unlinked), and a fast writer must not catch up with
     * it.  A small one, or one whose watermark an operator set, drops only
     * when the writers take the last page they may (memcached's extstore
     * evicts its oldest page when a write finds none free). */
    bool wm_set = settings.ssd_free_pages > 0 || settings.ext_compact_under > 0;
    sd.drop_ahead = !wm_set && sd.info.npages / 50 >= 3 ? sd.free_wm - 1 : 0;
    settings_on_compact_under(compact_under_apply);
    ghost_init((uint64_t)sd.info.npages * sd.info.page_size);
    sd.nwriters = settings.evict_threads + 3;
    sd.writers = calloc((size_t)sd.nwriters, sizeof(*sd.writers));
    if (sd.writers == NULL)
        return false;
    for (int i = 0; i < sd.nwriters; i++) {
        pthread_mutex_init(&sd.writers[i].lock, NULL);
        sd.writers[i].page = -1;
    }
    defrag_writer()->own_pages = true;
    sd.writers[sd.nwriters - 2].own_pages = true;      /* low-TTL */
    sd.writers[sd.nwriters - 2].keeps_reserve = true;
    pthread_mutex_init(&sd.lock, NULL);
    bg_init(&sd.defrag, "tac-ssd-defrag", NULL);
    sd.failed_max = settings.maxbytes / 16 / sd.info.buf_size;
    if (sd.failed_max < FAILED_BUFS_MIN)
        sd.failed_max = FAILED_BUFS_MIN;
    if (settings.verbose)
        fprintf(stderr, "SSD tier: %s, %llu MB, %u pages of %zu KB, bufs of "
                "%zu KB, %s\n", settings.ssd_path,
                (unsigned long long)(sd.info.size >> 20), sd.info.npages,
                sd.info.page_size >> 10, sd.info.buf_size >> 10,
                sd.info.engine == SSD_IO_URING ? "io_uring" : "threads");
    return true;
}

void tac_ssd_start(void)
{
    if (tac.ssd == NULL)
        return;
    if (!bg_start(&sd.defrag, 1, defrag_main, NULL)) {
        fprintf(stderr, "cannot start the SSD defrag thread\n");
        exit(EXIT_FAILURE);
    }
    sd.defrag_running = true;
}

void tac_ssd_stop(void)
{
    if (!sd.defrag_running)
        return;
    bg_stop(&sd.defrag);
    sd.defrag_running = false;
}

uint64_t tac_ssd_close(void)
{
    if (tac.ssd == NULL)
        return 0;
    for (size_t i = 0; i < sd.nrings; i++)
        ssd_ring_destroy(sd.rings[i]);
    free(sd.rings);
    for (int i = 0; i < sd.nwriters; i++) {
        if (sd.writers[i].buf != NULL)
            ssd_buf_release(sd.writers[i].buf);
    }
    free(sd.writers);
    /* Failed bufs are freed by ssd_close with the rest. */
    free(sd.failed);
    free(ghosts);
    ghosts = NULL;
    ghost_mask = 0;
    uint64_t generation = ssd_close(tac.ssd);
    tac.ssd = NULL;
    memset(&sd, 0, sizeof(sd));
    return generation;
}

/* ---- Stats -------------------------------------------------------------- */

void tac_ssd_stats_tiers(struct stat_sink *s)
{
    if (tac.ssd == NULL)
        return;
    struct ssd_stats st;
    ssd_get_stats(tac.ssd, &st);
    stat_printf(s, "ssd_capacity", "%llu",
                (unsigned long long)sd.info.npages * sd.info.page_size);
    stat_printf(s, "ssd_items", "%llu", tac_ssd_items());
    stat_printf(s, "ssd_live_bytes", "%llu", (unsigned long long)st.live_bytes);
    stat_printf(s, "ssd_pages_used", "%llu", (unsigned long long)st.pages_used);
    stat_printf(s, "ssd_pages_free", "%llu", (unsigned long long)st.pages_free);
    stat_printf(s, "ssd_pages_total", "%u", sd.info.npages);
    stat_printf(s, "ssd_bufs_written", "%llu", (unsigned long long)st.bufs_written);
    stat_printf(s, "ssd_bytes_written", "%llu", (unsigned long long)st.bytes_written);
    stat_printf(s, "ssd_bytes_read", "%llu", (unsigned long long)st.bytes_read);
    stat_printf(s, "ssd_reads", "%llu", (unsigned long long)st.reads);
    stat_printf(s, "ssd_reads_mem", "%llu", (unsigned long long)st.reads_mem);
    stat_printf(s, "ssd_reads_inflight", "%llu", (unsigned long long)st.reads_inflight);
    stat_printf(s, "ssd_writes_inflight", "%llu",
                (unsigned long long)(st.inflight - st.reads_inflight));
    stat_printf(s, "ssd_pages_reclaimed", "%llu", (unsigned long long)st.reclaimed);
    stat_printf(s, "ssd_page_allocs", "%llu", (unsigned long long)st.page_allocs);
    stat_printf(s, "ssd_io_errors", "%llu", (unsigned long long)st.io_errors);
    pthread_mutex_lock(&sd.lock);
    size_t nfailed = sd.nfailed + sd.retries_inflight;
    bool failing = sd.failing;
    pthread_mutex_unlock(&sd.lock);
    stat_printf(s, "ssd_write_failing", "%d", failing ? 1 : 0);
    stat_printf(s, "ssd_failed_bufs", "%zu", nfailed);
    stat_printf(s, "ssd_failed_bytes", "%zu", nfailed * sd.info.buf_size);
    stat_printf(s, "ssd_failed_bytes_max", "%zu", sd.failed_max * sd.info.buf_size);
    stat_printf(s, "ssd_meta_tuple_bytes", "%zu", item_compact_size(0));
}

/* memcached's extstore names, in plain `stats` (stats.c's rows). */
static struct ssd_stats ext_now(void)
{
    struct ssd_stats st;
    ssd_get_stats(tac.ssd, &st);
    return st;
}
static uint64_t ext_pages_used(void) { return ext_now().pages_used; }
static uint64_t ext_pages_free(void) { return ext_now().pages_free; }
static uint64_t ext_page_reclaims(void) { return ext_now().reclaimed; }
static uint64_t ext_objects_used(void) { return tac_ssd_items(); }
static uint64_t ext_objects_read(void) { return ext_now().reads; }
static uint64_t ext_bytes_used(void) { return ext_now().live_bytes; }
static uint64_t ext_bytes_written(void) { return ext_now().bytes_written; }
static uint64_t ext_bytes_read(void) { return ext_now().bytes_read; }
static uint64_t ext_limit(void) { return (uint64_t)sd.info.npages * sd.info.page_size; }
static uint64_t ext_io_queue(void) { return ext_now().inflight; }
static uint64_t ext_page_allocs(void) { return ext_now().page_allocs; }
static uint64_t ext_none(void) { return 0; }
static uint64_t ext_oom(void) { return STATS_GET(&tac.stats, ssd_reads_nomem); }
#define TAC_GET(field) STATS_GET(&tac.stats, field)
static uint64_t ext_gets(void) { return TAC_GET(get_hits_ssd); }
static uint64_t ext_recache(void)
{
    return TAC_GET(fetch_ssd_to_dram) + TAC_GET(fetch_ssd_to_nvm);
}
static uint64_t ext_misses(void)
{
    return TAC_GET(ssd_read_misses) + TAC_GET(ssd_dropped_misses);
}
static uint64_t ext_badcrc(void) { return TAC_GET(tuple_checksum_failures); }
static uint64_t ext_rescues(void) { return TAC_GET(ssd_defrag_moved); }
static uint64_t ext_skipped(void) { return TAC_GET(ssd_defrag_skipped); }
static uint64_t ext_page_evictions(void) { return TAC_GET(ssd_pages_dropped); }
static uint64_t ext_objects_evicted(void) { return TAC_GET(ssd_items_dropped); }
static uint64_t ext_bytes_evicted(void) { return TAC_GET(ssd_bytes_dropped); }
static uint64_t ext_objects_written(void) { return TAC_GET(ssd_tuples_written); }
#undef TAC_GET
static uint64_t ext_fragmented(void)
{
    struct ssd_stats st = ext_now();
    uint64_t used = st.pages_used * sd.info.page_size;
    return used > st.live_bytes ? used - st.live_bytes : 0;
}

/* `stats extstore`: memcached's per-page lines (version 0 = free; there
 * are no buckets here). */
static void ext_section(struct stat_sink *s)
{
    if (tac.ssd == NULL)
        return;
    for (unsigned p = 0; p < sd.info.npages; p++) {
        uint32_t version;
        uint64_t live;
        ssd_page_usage(tac.ssd, p, &version, &live);
        char name[32];
        snprintf(name, sizeof(name), "%u:version", p);
        stat_printf(s, name, "%u", version);
        snprintf(name, sizeof(name), "%u:bytes", p);
        stat_printf(s, name, "%llu", (unsigned long long)live);
        snprintf(name, sizeof(name), "%u:bucket", p);
        stat_printf(s, name, "0");
        snprintf(name, sizeof(name), "%u:free_bucket", p);
        stat_printf(s, name, "0");
    }
}

void tac_ssd_stats_register(void)
{
    bool on = tac.ssd != NULL;
    static const struct { const char *name; uint64_t (*fn)(void); } rows[] = {
        { "extstore_pages_used", ext_pages_used },
        { "extstore_pages_free", ext_pages_free },
        { "extstore_page_reclaims", ext_page_reclaims },
        { "extstore_objects_used", ext_objects_used },
        { "extstore_objects_read", ext_objects_read },
        { "extstore_bytes_used", ext_bytes_used },
        { "extstore_bytes_written", ext_bytes_written },
        { "extstore_bytes_read", ext_bytes_read },
        { "extstore_bytes_fragmented", ext_fragmented },
        { "extstore_limit_maxbytes", ext_limit },
        { "extstore_io_queue", ext_io_queue },
        { "get_extstore", ext_gets },
        { "get_oom_extstore", ext_oom },
        { "recache_from_extstore", ext_recache },
        { "miss_from_extstore", ext_misses },
        { "badcrc_from_extstore", ext_badcrc },
        { "extstore_compact_lost", ext_none },
        { "extstore_compact_rescues", ext_rescues },
        { "extstore_compact_skipped", ext_skipped },
        { "extstore_page_allocs", ext_page_allocs },
        { "extstore_page_evictions", ext_page_evictions },
        { "extstore_objects_evicted", ext_objects_evicted },
        { "extstore_bytes_evicted", ext_bytes_evicted },
        { "extstore_objects_written", ext_objects_written },
    };
    for (size_t i = 0; i < sizeof(rows) / sizeof(rows[0]); i++)
        stats_provide(rows[i].name, on ? rows[i].fn : NULL);
    if (on)
        stats_register_section("extstore", ext_section);
}

void tac_ssd_stats_settings(struct stat_sink *s)
{
    if (tac.ssd == NULL) {
        stat_printf(s, "ssd_backing", "none");
        return;
    }
    stat_printf(s, "ssd_capacity", "%llu",
                (unsigned long long)sd.info.npages * sd.info.page_size);
    stat_printf(s, "ssd_page_size", "%zu", sd.info.page_size);
    stat_printf(s, "ssd_buf_size", "%zu", sd.info.buf_size);
    stat_printf(s, "ssd_io_engine", "%s",
                sd.info.engine == SSD_IO_URING ? "uring" : "threads");
    stat_printf(s, "ssd_free_pages", "%u", __atomic_load_n(&sd.free_wm, __ATOMIC_RELAXED));
}

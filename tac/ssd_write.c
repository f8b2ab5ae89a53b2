/*
 * tac/ssd_write.c - the SSD tier as the cache sees it, and its writing: tuples
 * packed into bufs.  Reads are ssd_read.c, page reclaim and defrag
 * ssd_defrag.c, its life and stats ssd_tier.c; this comment is the design
 * of all four.
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
struct ssd_tier_state ssdt;

/* Re-reads that follow a tuple moved while it was being read. */
/* Failed bufs kept for a retry: at least this many, or -m/16 of bytes. */


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


unsigned long long ssdt_items;    /* atomic: SSD meta tuples */

/* The durability files' view of the tier (set at start, tier.c). */
struct tac_ssd_observer ssdt_observer;

void tac_ssd_set_observer(const struct tac_ssd_observer *o)
{
    ssdt_observer = *o;
}

/* Keys the SSD dropped for room (a full SSD's oldest page, a drop_unread
 * pass, failed bufs past their bound), remembered by item hash so that a
 * later get of one counts in ssd_dropped_misses: memcached's
 * miss_from_extstore, the misses a larger SSD would have served.  A
 * direct-mapped table of hashes: a newer drop in a slot forgets the older
 * one, a new version of the key clears its slot, a miss it explains
 * clears it too.  A hash is 32 bits, so another key counts only if it
 * shares all of them.  Slot value: hv | 1 (0 is empty).  Relaxed atomics:
 * the defrag thread writes, workers read and clear. */
uint32_t *ssdt_ghosts;
uint32_t ssdt_ghost_mask;

void ssdt_ghost_init(uint64_t ssd_bytes)
{
    uint64_t want = ssd_bytes / GHOST_BYTES_PER_SLOT;
    uint32_t n = GHOST_MIN;
    while (n < want && n < GHOST_MAX)
        n <<= 1;
    ssdt_ghosts = calloc(n, sizeof(*ssdt_ghosts));
    ssdt_ghost_mask = ssdt_ghosts != NULL ? n - 1 : 0;
}

void ssdt_ghost_add(uint32_t hv)
{
    if (ssdt_ghosts != NULL)
        __atomic_store_n(&ssdt_ghosts[hv & ssdt_ghost_mask], hv | 1, __ATOMIC_RELAXED);
}

/* Forgets hv's drop; true if it was remembered. */
static bool ghost_take(uint32_t hv)
{
    if (ssdt_ghosts == NULL)
        return false;
    uint32_t want = hv | 1;
    return __atomic_compare_exchange_n(&ssdt_ghosts[hv & ssdt_ghost_mask], &want, 0, false,
                                       __ATOMIC_RELAXED, __ATOMIC_RELAXED);
}

void tac_ssd_read_missed(uint32_t hv)
{
    if (ghost_take(hv))
        TAC_INCR(ssd_dropped_misses);
}

void tac_ssd_key_stored(uint32_t hv)
{
    if (ssdt_ghosts != NULL &&
        __atomic_load_n(&ssdt_ghosts[hv & ssdt_ghost_mask], __ATOMIC_RELAXED) == (hv | 1))
        ghost_take(hv);
}
__thread int ssdt_writer_slot = -1;   /* evictor id, or -1 */
__thread struct ssd_ring *ssdt_sync_ring;

size_t ssdt_tuple_len(const item *meta)
{
    return tac_tuple_size(meta->nkey, meta->nbytes);
}

/* A page at least -o ext_max_frag live (default 0.9) gains too little
 * from a move: when space is needed, the oldest page is dropped instead.
 * (memcached's compaction likewise re-packs only pages under max_frag.) */
bool ssdt_page_nearly_full(const struct ssd_page_info *pi)
{
    double frag;
    __atomic_load(tac.cfg.ext_max_frag, &frag, __ATOMIC_RELAXED);
    /* Padding counts as live: a re-pack pads as much again. */
    return (double)(pi->live + pi->pad) >= (double)ssdt.info.page_size * frag;
}

void ssdt_defrag_wake(void)
{
    bg_wake(&ssdt.defrag);
}

void ssdt_index_full_ask(void)
{
    if (!tac.cfg.evict_to_free || !tac_dram_only_index() ||
        __atomic_load_n(&ssdt.index_drop, __ATOMIC_RELAXED))
        return;
    __atomic_store_n(&ssdt.index_drop, true, __ATOMIC_RELAXED);
    bg_wake(&ssdt.defrag);
}

unsigned ssdt_defrag_wm(void)
{
    unsigned wm = __atomic_load_n(&ssdt.free_wm, __ATOMIC_RELAXED);
    return wm < ssdt_writers_keep() + 1 ? ssdt_writers_keep() + 1 : wm;
}

void ssdt_defrag_nudge(void)
{
    if (ssdt_free_pages_now() < ssdt_defrag_wm() + DEFRAG_NEAR_PAGES)
        bg_kick(&ssdt.defrag);
}

/* Milliseconds of the monotonic clock. */
int64_t ssdt_now_ms(void)
{
    return (int64_t)(util_now_ns() / 1000000);
}

/* Free SSD pages now. */
unsigned ssdt_free_pages_now(void)
{
    struct ssd_stats st;
    ssd_get_stats(tac.ssd, &st);
    return (unsigned)st.pages_free;
}


/* ---- Writing ------------------------------------------------------------ */

void tac_ssd_set_writer(int evictor_id)
{
    ssdt_writer_slot = evictor_id;
}

static struct writer *my_writer(void)
{
    int evictors = ssdt.nwriters - 3;
    if (ssdt_writer_slot >= 0 && ssdt_writer_slot < evictors)
        return &ssdt.writers[ssdt_writer_slot];
    return &ssdt.writers[evictors];
}

/* -o ext_low_ttl N: a tuple whose item expires within N seconds goes into
 * pages of its own (memcached's low-TTL bucket), so that such pages empty
 * as their items expire and are reclaimed whole, rather than leaving holes
 * in the pages of long-lived items that only defrag can win back. */
static struct writer *writer_for(const item *it)
{
    int low = __atomic_load_n(tac.cfg.ext_low_ttl, __ATOMIC_RELAXED);
    if (low > 0 && it->exptime != 0 && (int64_t)it->exptime - mc_now() < low)
        return &ssdt.writers[ssdt.nwriters - 2];
    return my_writer();
}

struct writer *ssdt_defrag_writer(void)
{
    return &ssdt.writers[ssdt.nwriters - 1];
}


void ssdt_failed_push(struct ssd_buf *b)
{
    pthread_mutex_lock(&ssdt.lock);
    TAC_INCR(ssd_write_errors);
    if (!ssdt.failing) {
        ssdt.failing = true;
        int err = ssd_write_errno(tac.ssd);
        fprintf(stderr, "SSD tier: writes failing (%s); keeping up to %zu "
                "bufs in memory and retrying\n", strerror(err ? err : EIO),
                ssdt.failed_max);
    }
    if (ssdt.nfailed == ssdt.failed_cap) {
        size_t cap = ssdt.failed_cap ? ssdt.failed_cap * 2 : 16;
        struct ssd_buf **n = realloc(ssdt.failed, cap * sizeof(*n));
        if (n == NULL) {
            /* Cannot even remember it: the buf stays in memory and keeps
             * serving its tuples, it is just never written. */
            pthread_mutex_unlock(&ssdt.lock);
            return;
        }
        ssdt.failed = n;
        ssdt.failed_cap = cap;
    }
    ssdt.failed[ssdt.nfailed++] = b;
    /* Retries wait for their back-off; only the bound needs defrag now. */
    if (ssdt.nfailed > ssdt.failed_max && tac.cfg.evict_to_free)
        ssdt_defrag_wake();
    pthread_mutex_unlock(&ssdt.lock);
}

/* Runs on the library's completion thread.  arg is non-NULL for the
 * retry of a buf that failed before. */
void ssdt_write_done(void *arg, struct ssd_buf *b, enum ssd_status st)
{
    bool retry = arg != NULL;
    pthread_mutex_lock(&ssdt.lock);
    if (retry)
        ssdt.retries_inflight--;
    pthread_mutex_unlock(&ssdt.lock);
    if (st != SSD_OK) {
        ssdt_failed_push(b);
        return;
    }
    /* Only a retry that succeeds shows the cause is gone: a first write
     * into space already allocated may succeed while new space still
     * fails.  Failing ends once every failed buf has been written. */
    pthread_mutex_lock(&ssdt.lock);
    if (retry)
        ssdt.write_ok = true;
    if (ssdt.failing && ssdt.nfailed == 0 && ssdt.retries_inflight == 0) {
        ssdt.failing = false;
        fprintf(stderr, "SSD tier: writes succeed again\n");
    }
    pthread_mutex_unlock(&ssdt.lock);
}

/* With -M, an SSD that cannot be written and holds as many failed bufs as
 * it may is full: nothing more is written to it. */
static bool writes_refused(void)
{
    if (tac.cfg.evict_to_free)
        return false;
    pthread_mutex_lock(&ssdt.lock);
    bool full = ssdt.failing && ssdt.nfailed + ssdt.retries_inflight >= ssdt.failed_max;
    pthread_mutex_unlock(&ssdt.lock);
    return full;
}


unsigned ssdt_writers_keep(void)
{
    return __atomic_load_n(&ssdt.keep_free, __ATOMIC_RELAXED);
}

void ssdt_writer_submit_locked(struct writer *w)
{
    if (ssd_buf_submit(w->buf, ssdt_write_done, NULL) != SSD_OK)
        ssdt_failed_push(w->buf);
    w->buf = NULL;
}

/* A page of w's own: defrag's may be one of the last free ones, the
 * low-TTL writer's leaves the reserve alone (checked, then taken: another
 * writer may take a page between, so it can dip into the reserve by a
 * page at most). */
static int writer_page_alloc(struct writer *w)
{
    if (w->keeps_reserve && ssdt_free_pages_now() <= ssdt_writers_keep())
        return -1;
    return ssd_page_alloc(tac.ssd);
}

/* Opens a buf for w: in the shared open page, leaving the defrag reserve
 * alone, or in a page of its own (defrag, low-TTL). */
static enum ssd_status writer_open(struct writer *w)
{
    if (!w->own_pages)
        return ssd_buf_open_keep(tac.ssd, ssdt_writers_keep(), &w->buf);
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
        st = ssd_buf_open_large(tac.ssd, -1, ssdt_writers_keep(), len, &b);
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
        if (w != ssdt_defrag_writer())
            ssdt_defrag_wake();
        return false;
    }
    if (ssd_buf_appendv(b, iov, n, ref) != SSD_OK) {
        ssd_buf_release(b);
        return false;
    }
    TAC_INCR(ssd_large_bufs);
    if (ssd_buf_submit(b, ssdt_write_done, NULL) != SSD_OK)
        ssdt_failed_push(b);
    return true;
}

/* Appends one tuple (the pieces of iov) to w's buf; *ref gets its
 * reference.  False when the SSD has no free page (for w). */
bool ssdt_writer_put(struct writer *w, const struct iovec *iov, int n,
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
    bool opened = false;
    pthread_mutex_lock(&w->lock);
    if (len > ssdt.info.buf_size) {
        ok = writer_put_large(w, iov, n, len, ref);
        pthread_mutex_unlock(&w->lock);
        if (ok) {
            TAC_INCR(ssd_tuples_written);
            if (w != ssdt_defrag_writer())
                ssdt_defrag_nudge();
        }
        return ok;
    }
    for (int tries = 0; tries < 2 && !ok; tries++) {
        if (w->buf == NULL) {
            enum ssd_status st = writer_open(w);
            if (st != SSD_OK) {
                w->buf = NULL;
                TAC_INCR(ssd_full);
                if (w != ssdt_defrag_writer())
                    ssdt_defrag_wake();
                break;
            }
            opened = true;
        }
        enum ssd_status st = ssd_buf_appendv(w->buf, iov, n, ref);
        if (st == SSD_OK) {
            ok = true;
            w->last_put_ms = ssdt_now_ms();
        }
        else if (st == SSD_ERR_NOSPACE)
            ssdt_writer_submit_locked(w);
        else
            break;
    }
    pthread_mutex_unlock(&w->lock);
    if (opened && w != ssdt_defrag_writer())
        ssdt_defrag_nudge();
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
    if (!ssdt_writer_put(w, iov, n, &ref))
        return false;
    /* Until its buf is written. */
    if (ssdt_observer.tuple_put != NULL)
        ssdt_observer.tuple_put(hdr, iov, n, item_hv(meta));
    item_set_meta_ref(meta, ref);
    item_set_meta_seq(meta, hdr->seq);
    __atomic_add_fetch(&ssdt_items, 1, __ATOMIC_RELAXED);
    return true;
}

/* A new meta tuple for `src` on SSD, not yet pointing anywhere. */
static item *ssd_meta_new(const item *src, int partition, bool reserved)
{
    item *meta = item_alloc_meta(src, TIER_SSD, 0, partition, reserved);
    if (meta == NULL) {
        TAC_INCR(meta_alloc_failures);
        ssdt_index_full_ask();
    }
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
    item *n = item_alloc_meta(meta, TIER_SSD, ref, meta->partition, true);
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
        ssd_buf_lookup(tac.ssd, item_meta_ref(meta), ssdt_tuple_len(meta), &pin) == NULL)
        return false;
    ssd_buf_unpin(pin);
    return true;
}

void tac_ssd_release(item *meta)
{
    uint64_t ref = item_meta_ref(meta);
    if (tac.ssd == NULL || ref == 0)
        return;
    ssd_mark_dead(tac.ssd, ref, ssdt_tuple_len(meta));
    __atomic_sub_fetch(&ssdt_items, 1, __ATOMIC_RELAXED);
}

bool tac_ssd_full(void)
{
    if (tac.ssd == NULL || writes_refused())
        return true;
    struct ssd_stats st;
    ssd_get_stats(tac.ssd, &st);
    if (st.pages_free > ssdt_writers_keep())
        return false;
    /* Defrag can still win a page unless even the emptiest is all but
     * full; with -M that is where it stops (defrag_page). */
    struct ssd_page_info pi;
    return ssd_page_emptiest(tac.ssd, &pi) < 0 ||
           ssdt_page_nearly_full(&pi);
}

/* ---- A restart (tac/durable/restart.c) ------------------------------------------ */

item *tac_ssd_meta_adopt(const item *src, uint64_t ref, int partition)
{
    item *meta = item_alloc_meta(src, TIER_SSD, ref, partition, false);
    if (meta != NULL)
        __atomic_add_fetch(&ssdt_items, 1, __ATOMIC_RELAXED);
    return meta;
}

void tac_ssd_flush(void)
{
    if (tac.ssd == NULL)
        return;
    for (int i = 0; i < ssdt.nwriters; i++) {
        struct writer *w = &ssdt.writers[i];
        pthread_mutex_lock(&w->lock);
        if (w->buf != NULL)
            ssdt_writer_submit_locked(w);
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
    return __atomic_load_n(&ssdt_items, __ATOMIC_RELAXED);
}


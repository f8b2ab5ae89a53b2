/*
 * tac/ssd_defrag.c - keeping room on the SSD tier: the defrag thread that
 * re-packs the page with the fewest live bytes, drops the oldest page when
 * the SSD is full, writes idle bufs, and retries failed writes with
 * back-off.  Design: the top of ssd_write.c, "Space".
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
            ssdt_ghost_add(hv);
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
                ssdt_ghost_add(hv);
            TAC_INCR(ssd_items_dropped);
            TAC_ADD(ssd_bytes_dropped, len);
        } else {
            /* Copied as it lies, sealed or not. */
            struct iovec iov[2] = {
                { &hdr, sizeof(hdr) },
                { (void *)body, len - sizeof(hdr) },
            };
            uint64_t nref = 0;
            ok = ssdt_writer_put(ssdt_defrag_writer(), iov, 2, &nref);
            if (ok) {
                /* The old page may be reused before the new buf is
                 * written. */
                if (ssdt_observer.tuple_put != NULL)
                    ssdt_observer.tuple_put(&hdr, iov, 2, hv);
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
    for (size_t off = 0, len; (len = ssdt_tuple_at(mem, used, off)) != 0;
         off = ssdt_tuple_next(mem, used, off, len)) {
        if (!defrag_tuple(base + off, mem + off, len, *mode)) {
            if (!tac.cfg.evict_to_free || ssd_any_pinned(tac.ssd))
                return false;
            *mode = DEFRAG_DROP;
            defrag_tuple(base + off, mem + off, len, DEFRAG_DROP);
        }
    }
    return true;
}

/* How a page is emptied to drop its items: -o ext_drop_unread keeps those
 * read again. */
static enum defrag_mode drop_mode(void)
{
    return __atomic_load_n(tac.cfg.ext_drop_unread, __ATOMIC_RELAXED)
           ? DEFRAG_DROP_UNREAD : DEFRAG_DROP;
}

/* Empties sealed page `page` (pi: its state when picked) in mode and
 * reclaims it.  False when it could not proceed. */
static bool empty_page(struct tac_iobuf *io, int page, const struct ssd_page_info *pi,
                       enum defrag_mode mode)
{
    if (mode == DEFRAG_DROP)
        TAC_INCR(ssd_pages_dropped);
    else
        TAC_INCR(ssd_defrag_runs);
    for (unsigned slot = 0; slot < ssdt.info.bufs_per_page; slot++) {
        uint64_t base;
        uint32_t used = ssd_page_buf(tac.ssd, page, slot, &base);
        if (used == 0)
            continue;
        if (ssd_ref_version(base) != pi->version)
            return true;            /* reclaimed meanwhile */
        size_t got = 0;
        enum ssd_status st = ssdt_read_sync(base, 0, true, io, &got);
        if (st == SSD_ERR_STALE)
            return true;
        if (st != SSD_OK)
            return false;           /* counted by ssd/ as an I/O error */
        if (!defrag_buf(base, io->mem, got, &mode))
            return false;
    }
    /* Every tuple found valid was moved or dropped: whatever live bytes
     * remain belong to nobody. */
    ssd_page_drop(tac.ssd, page, pi->version);
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
    bool drop = ssdt_page_nearly_full(&pi);
    /* Nothing is dropped while the writers still have a free page beyond
     * what they keep (DEFRAG_RESERVE_PAGES) and sd.drop_ahead; with
     * ext_drop_unread, from ext_drop_under free pages on (memcached's
     * drop_under). */
    if (drop && tac.cfg.evict_to_free) {
        unsigned nfree = ssdt_free_pages_now();
        unsigned ahead = __atomic_load_n(&ssdt.drop_ahead, __ATOMIC_RELAXED);
        unsigned at = ssdt_writers_keep() > ahead ? ssdt_writers_keep() : ahead;
        if (nfree > at &&
            !(__atomic_load_n(tac.cfg.ext_drop_unread, __ATOMIC_RELAXED) &&
              nfree <= (unsigned)__atomic_load_n(tac.cfg.ext_drop_under, __ATOMIC_RELAXED)))
            return false;
    }
    if (drop && !tac.cfg.evict_to_free)
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
        mode = drop_mode();
    }
    if (page < 0)
        return false;
    return empty_page(io, page, &pi, mode);
}

/* DRAM is all index (tac_dram_only_index) and a move down found no meta
 * tuple: no more SSD items can be indexed, so a cache drops its oldest
 * page, as when the SSD is full, and its items' meta tuples make room.
 * Not with -M, nor while a restart still indexes pinned pages. */
static bool index_full_drop(struct tac_iobuf *io)
{
    if (!tac.cfg.evict_to_free || ssd_any_pinned(tac.ssd) || !tac_dram_only_index())
        return false;
    struct ssd_page_info pi;
    int page = ssd_page_oldest(tac.ssd, &pi);
    if (page < 0)
        return false;
    if (!ssdt.index_drop_logged) {
        ssdt.index_drop_logged = true;
        fprintf(stderr, "SSD tier: meta tuples fill -m (%zu MB), so the oldest SSD pages are "
                "dropped to index new items (ssd_index_drops); a larger -m indexes more\n",
                tac.cfg.maxbytes >> 20);
    }
    TAC_INCR(ssd_index_drops);
    return empty_page(io, page, &pi, drop_mode());
}

/* Submits the oldest failed buf again, or all of them once a write has
 * succeeded: a failing device sees one write per back-off period. */
static void retry_failed_writes(void)
{
    pthread_mutex_lock(&ssdt.lock);
    bool all = ssdt.write_ok;
    ssdt.write_ok = false;
    size_t n = all ? ssdt.nfailed : (ssdt.nfailed > 0 ? 1 : 0);
    struct ssd_buf **list = malloc((n ? n : 1) * sizeof(*list));
    if (list == NULL)
        n = 0;
    for (size_t i = 0; i < n; i++)
        list[i] = ssdt.failed[i];
    memmove(ssdt.failed, ssdt.failed + n, (ssdt.nfailed - n) * sizeof(*ssdt.failed));
    ssdt.nfailed -= n;
    ssdt.retries_inflight += (unsigned)n;
    pthread_mutex_unlock(&ssdt.lock);
    for (size_t i = 0; i < n; i++) {
        TAC_INCR(ssd_write_retries);
        if (ssd_buf_submit(list[i], ssdt_write_done, &ssdt) != SSD_OK) {
            pthread_mutex_lock(&ssdt.lock);
            ssdt.retries_inflight--;
            pthread_mutex_unlock(&ssdt.lock);
            ssdt_failed_push(list[i]);
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
    for (size_t off = 0, len; (len = ssdt_tuple_at(mem, used, off)) != 0;
         off = ssdt_tuple_next(mem, used, off, len)) {
        const struct tac_tuple_hdr *hdr = (const void *)(mem + off);
        const char *key = mem + off + sizeof(*hdr);
        uint32_t hv = item_hash(key, hdr->nkey);
        item_lock(hv);
        item *it = do_item_get(key, hdr->nkey, hv, NULL, false);
        if (it != NULL && item_value_async(it) && item_meta_ref(it) == base + off) {
            do_item_unlink(it, hv);
            ssdt_ghost_add(hv);
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
    if (!tac.cfg.evict_to_free)
        return;
    for (;;) {
        pthread_mutex_lock(&ssdt.lock);
        struct ssd_buf *b = NULL;
        if (ssdt.nfailed > ssdt.failed_max) {
            b = ssdt.failed[0];
            memmove(ssdt.failed, ssdt.failed + 1, (ssdt.nfailed - 1) * sizeof(*ssdt.failed));
            ssdt.nfailed--;
        }
        pthread_mutex_unlock(&ssdt.lock);
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
    if (!tac.cfg.evict_to_free)
        return;
    if (!ssdt.unpinned) {
        if (ssd_any_pinned(tac.ssd))
            return;
        ssdt.unpinned = true;
    }
    unsigned keep = DEFRAG_RESERVE_PAGES;
    if (!__atomic_load_n(tac.cfg.ext_drop_unread, __ATOMIC_RELAXED) &&
        ssdt_free_pages_now() <= DEFRAG_RESERVE_PAGES + 1) {
        struct ssd_page_info pi;
        int page = ssd_page_emptiest(tac.ssd, &pi);
        if (page < 0 || ssdt_page_nearly_full(&pi))
            keep = 0;
    }
    __atomic_store_n(&ssdt.keep_free, keep, __ATOMIC_RELAXED);
}

/* The defrag thread: retries failed writes with back-off, keeps them
 * within their bound, and re-packs the emptiest page while free pages are
 * short.  One page, or one retry round, per pass. */
/* A buf that took no tuple for IDLE_BUF_MS is written out as it is, so
 * that when writes pause, what went to SSD is on the device within about
 * a second and survives a crash.  Its slot's unused rest stays empty. */
static void flush_idle_bufs(int64_t now)
{
    for (int i = 0; i < ssdt.nwriters; i++) {
        struct writer *w = &ssdt.writers[i];
        if (pthread_mutex_trylock(&w->lock) != 0)
            continue;
        if (w->buf != NULL && now - w->last_put_ms >= IDLE_BUF_MS)
            ssdt_writer_submit_locked(w);
        pthread_mutex_unlock(&w->lock);
    }
}

void ssdt_defrag_main(struct bg *g, unsigned idx, void *arg)
{
    (void)idx;
    (void)arg;
    struct tac_iobuf io = { malloc(ssdt.info.buf_size), ssdt.info.buf_size };
    if (io.mem == NULL) {
        fprintf(stderr, "SSD tier: no memory for the defrag thread\n");
        return;
    }
    int64_t next_retry = 0, next_tick = 0;
    ssdt.retry_ms = WRITE_RETRY_MIN_MS;
    for (;;) {
        pthread_mutex_lock(&ssdt.lock);
        bool stop = !bg_running(g);
        bool have_failed = ssdt.nfailed > 0;
        bool failing = ssdt.failing;
        if (ssdt.write_ok || !failing)
            ssdt.retry_ms = WRITE_RETRY_MIN_MS;
        pthread_mutex_unlock(&ssdt.lock);
        if (stop)
            break;
        keep_free_update();
        drop_failed_over_bound();
        int64_t now = ssdt_now_ms();
        if (now >= next_tick) {
            flush_idle_bufs(now);
            if (ssdt_observer.tick != NULL)
                ssdt_observer.tick();
            next_tick = now + IDLE_BUF_MS / 4;
        }
        if (have_failed && now >= next_retry) {
            retry_failed_writes();
            next_retry = now + ssdt.retry_ms;
            if (ssdt.retry_ms < WRITE_RETRY_MAX_MS)
                ssdt.retry_ms = ssdt.retry_ms * 2 < WRITE_RETRY_MAX_MS
                              ? ssdt.retry_ms * 2 : WRITE_RETRY_MAX_MS;
        }
        /* Moving tuples means writing them: not while writes fail. */
        if (!failing && __atomic_exchange_n(&ssdt.index_drop, false, __ATOMIC_RELAXED) &&
            index_full_drop(&io))
            continue;
        unsigned wm = ssdt_defrag_wm(), nfree = ssdt_free_pages_now();
        if (!failing && nfree < wm && defrag_page(&io))
            continue;
        int64_t wait = DEFRAG_IDLE_MS;
        if (have_failed) {
            int64_t left = next_retry - ssdt_now_ms();
            wait = left < 1 ? 1 : left;
        } else if (!failing && nfree >= wm + DEFRAG_NEAR_PAGES) {
            /* Far from the watermark: doze to the next tick; a writer
             * that opens a buf nearer to it kicks (ssdt_defrag_nudge). */
            int64_t left = next_tick - ssdt_now_ms();
            if (left > wait)
                wait = left;
            bg_doze(g, (uint64_t)wait * 1000000u, NULL, NULL);
            continue;
        }
        bg_wait(g, (uint64_t)wait * 1000000u);
    }
    free(io.mem);
}


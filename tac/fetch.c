/*
 * tac/fetch.c - fetch threads: move hot and warm items up a tier (TaC 4.2,
 * 5.4, hybrid swapping).
 *
 * Design.  Workers never move an item up themselves: when a read finds a
 * hot NVM item (tier.c) or a warm or hot SSD item (ssd_read.c), they queue a
 * request and go on.  A fetcher then
 *   - copies a hot NVM item's value into a DRAM item and publishes it in
 *     the meta tuple's place (same version: same CAS), which frees the NVM
 *     slot once its last reader is gone;
 *   - reads the whole SSD buf that held a warm or hot item and checks every
 *     tuple in it with the shared validity check: valid hot tuples go to
 *     DRAM, valid warm ones to NVM (or DRAM without NVM), cold ones stay
 *     (tac_ssd_fetch_buf in ssd_read.c).
 * The reader's copy.  The read that finds an item hot or warm has just
 * copied and checked its value: the request carries that copy, pinned
 * with the meta tuple, and the fetcher moves the copy up without reading
 * NVM or SSD again (fetch_copies_used), if the meta tuple is still linked
 * (a pinned item is never linked again, so it is the same version).
 * Requests without a copy (a whole buf, or past the queue's bound on the
 * copies it holds) read the tier.
 * Each move happens under the key's item lock and only if the item is
 * still the version that was queued and its tuple passes the read-back
 * checks (tuple.h); a damaged tuple is not moved, its item is unlinked.  A
 * fetch that finds no free DRAM chunk gives up (fetch_no_room) and wakes
 * the evictors.
 *
 * Buf temperature.  A buf is written from one cold tail, so most of its
 * tuples are cold: a whole-buf read for every warm read costs a buf of
 * I/O for about one tuple moved.  A buf therefore comes up whole only when
 * it shows warmth itself: a second warm read of one of its tuples within
 * BUF_WARM_SECS.  A first warm read moves just its own tuple (as
 * antituple does), which costs one tuple's read.
 *
 * Queues (fetch_queue.c).  Two bounded rings: one for cheap requests (NVM
 * copies, single SSD tuples), served first, and a short one for whole
 * bufs, so that slow buf reads never crowd out the cheap moves.  Workers
 * only ever try the lock: when it is busy or a ring is full the request is
 * dropped and counted, so a worker never waits.
 *
 * Threads: -o fetch_threads fetchers; workers queue.
 */
#include "config.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/bg.h"
#include "base/settings.h"
#include "tac/fetch.h"
#include "tac/internal.h"
#include "tac/nvm_tier.h"
#include "tac/ssd_tier.h"

/* Copies a hot NVM item to DRAM if it is still the version queued: the
 * meta tuple the reader pinned, with its copy; else one of the CAS
 * queued, read from NVM again. */
static void fetch_nvm(const struct fetch_req *r)
{
    item_lock(r->hv);
    item *it = do_item_get(r->key, r->nkey, r->hv, NULL, false);
    bool same = r->copy != NULL
        ? it == r->meta && r->copy->nbytes == it->nbytes
        : it != NULL && it->cas == r->cas;
    if (same && it->tier == TIER_NVM && (it->it_flags & ITEM_META)) {
        item *n = item_alloc_promote(it, r->key, it->partition);
        if (n == NULL) {
            TAC_INCR(fetch_no_room);
        } else {
            bool ok = true;
            if (r->copy != NULL) {
                memcpy(ITEM_data(n), ITEM_data(r->copy), it->nbytes);
                TAC_INCR(fetch_copies_used);
            } else {
                ok = tac_nvm_read_value(it, NULL, ITEM_data(n));
            }
            if (ok) {
                do_item_move(it, n, r->hv);
                TAC_INCR(fetch_nvm_to_dram);
            } else {
                do_item_unlink(it, r->hv);      /* damaged: never served */
            }
            item_release(n);
        }
    }
    if (it != NULL)
        item_release(it);
    item_unlock(r->hv);
}

static void fetcher_main(struct bg *g, unsigned idx, void *arg)
{
    (void)idx;
    (void)arg;
    struct tac_iobuf io = { NULL, tac_ssd_buf_size() > 0 ? tac_ssd_buf_size() : 1 };
    io.mem = malloc(io.cap);
    if (io.mem == NULL) {
        fprintf(stderr, "out of memory starting a fetcher\n");
        return;
    }
    struct fetch_req r;
    while (tac_fetchq_take(g, &r)) {
        if (r.kind == FETCH_NVM) {
            fetch_nvm(&r);
        } else if (r.kind == FETCH_SSD_TUPLE && r.copy != NULL) {
            tac_ssd_fetch_copy(r.meta, r.copy, r.hv, r.recache);
        } else if (r.kind == FETCH_SSD_TUPLE) {
            tac_ssd_fetch_one(r.key, r.nkey, r.hv, r.ref, r.len, r.recache, &io);
        } else {
            TAC_INCR(fetch_ssd_bufs);
            tac_ssd_fetch_buf(r.ref, &io);
        }
        tac_fetch_req_done(&r);
    }
    free(io.mem);
}

void tac_fetchers_start(void)
{
    int n = tac.cfg.fetch_threads;
    if (n <= 0)
        return;
    if (!tac_fetchq_start((unsigned)n, fetcher_main)) {
        fprintf(stderr, "cannot start %d fetch threads\n", n);
        exit(EXIT_FAILURE);
    }
}

void tac_fetchers_stop(void)
{
    tac_fetchq_stop();
}

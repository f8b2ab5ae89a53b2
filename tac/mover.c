/*
 * tac/mover.c - the NVM page mover: empties an NVM page of one slot class
 * so that another class can have it.
 *
 * Why.  NVM pages keep their slot class while they hold a live tuple
 * (nvm/alloc.c).  With mixed value sizes every page may end up in some
 * class, the small classes keeping theirs partly used, while a class that
 * needs a page (a 500 KB value's) has none: NVM is far from full by bytes,
 * yet that class could only push its own tuples down to SSD or, without an
 * SSD, drop them.
 *
 * How.  nvm_place (nvm_tier.c) finds no slot and no page: without an SSD it
 * calls tac_nvm_mover_want, which wakes evictor 0, and fails for now (a
 * store parks and tries again, a demotion is retried by the next round)
 * rather than drop a tuple.  With an SSD it does so when the class has no
 * tuple of its own to move down (a size new to NVM), and the caller goes
 * to SSD meanwhile.  Evictor 0 runs tac_nvm_mover_step each round:
 * nvm_drain_begin picks the page of another class with the fewest live
 * bytes that fit in the free slots of its class; each live tuple of it is
 * copied, under its item lock, into a free slot of the same class and its
 * meta tuple repointed; with an SSD, a tuple that finds no free slot of
 * its class goes to SSD instead, and when no page of another class has a
 * free slot the coldest tuples of the class with the most pages go to SSD
 * first (tac_nvm_spill).  The last free hands the page over.  A drain that
 * makes no progress for MOVER_STUCK_ROUNDS rounds is given up.  When no
 * page qualifies, the mover idles MOVER_IDLE_MS and nvm_place falls back to
 * dropping the class's coldest tuple (not with -M).
 *
 * A slot of the draining page is read only once the NVM writers that
 * began before the drain are done (nvm_tier.c, "Reading a slot before
 * knowing its key").
 *
 * Threads: tac_nvm_mover_step on evictor 0 only; the rest from any thread.
 */
#include "config.h"
#include "base/crashpoint.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/settings.h"
#include "nvm/nvm.h"
#include "tac/internal.h"
#include "tac/mover.h"
#include "tac/nvm_clock.h"
#include "tac/nvm_tier.h"
#include "tac/ssd_tier.h"
#include "tac/tuple.h"
#include "base/util.h"

#define MOVER_IDLE_MS 100
#define MOVER_STUCK_ROUNDS 200
#define MOVER_SPILL_BATCH 16

/* Evictor 0 only. */
static struct {
    unsigned old_epoch;     /* the parity to wait out */
    bool settled;           /* its writers are done */
    unsigned stuck;         /* rounds without a tuple moved */
    uint64_t *refs;
    size_t cap;
} mv;

/* Copies the live tuple at ref (of the draining page) into a free slot of
 * its class and repoints its meta tuple.  1 if moved. */
static int move_one(uint64_t ref)
{
    struct tac_tuple_hdr hdr;
    char key[KEY_MAX_LENGTH];
    if (!tac_nvm_read_slot_key(ref, &hdr, key))
        return 0;
    uint32_t hv = item_hash(key, hdr.nkey);
    int moved = 0;
    item_lock(hv);
    item *it = do_item_get(key, hdr.nkey, hv, NULL, false);
    if (it != NULL && (it->it_flags & ITEM_META) && it->tier == TIER_NVM &&
        item_meta_ref(it) == ref) {
        uint64_t nref = nvm_alloc_free_slot(tac.nvm, nvm_class_of_ref(tac.nvm, ref),
                                            it->partition);
        if (nref == 0 && tac.ssd != NULL) {
            /* No free slot in its class: down to SSD.  The free of its
             * slot (the meta tuple's last reference) counts for the
             * drain. */
            if (tac_ssd_from_nvm(it, hv)) {
                TAC_INCR(nvm_tuples_to_ssd);
                moved = 1;
            }
        } else if (nref != 0) {
            size_t len = tac_tuple_size(it->nkey, it->nbytes);
            nvm_charge_read(tac.nvm, ref, 0, len);
            nvm_write(tac.nvm, nref, 0, nvm_ptr(tac.nvm, ref), len);
            nvm_drain(tac.nvm);
            item_set_meta_ref(it, nref);
            /* Not forgotten (tac_nvm_forget): a reader that started before
             * the move may still be reading it, and a crash scan that
             * finds both copies keeps one, as they hold one version. */
            nvm_free(tac.nvm, ref);
            CRASH_POINT(move_nvm_slot);
            moved = 1;
        }
    }
    if (it != NULL)
        item_release(it);
    item_unlock(hv);
    return moved;
}

/* No drain for a while: none qualifies, or this one is stuck. */
static void mover_idle(void)
{
    tac_nvm_mover_idle_for(MOVER_IDLE_MS);
}

/* With an SSD: moves the coldest tuples of the class (other than need)
 * that holds the most pages down to SSD, so that one of its pages has a
 * free slot and can be drained.  Returns the number moved. */
int tac_nvm_spill(unsigned need)
{
    unsigned n = nvm_nclasses(tac.nvm), biggest = 0;
    uint64_t most = 0;
    for (unsigned cls = 1; cls <= n; cls++) {
        struct nvm_class_info ci;
        nvm_class_info(tac.nvm, cls, &ci);
        if (cls != need && ci.slots_per_page > 1 && ci.pages > most) {
            most = ci.pages;
            biggest = cls;
        }
    }
    if (tac.ssd == NULL || biggest == 0)
        return 0;
    struct clock_turn t = tac_nvm_clock_evict(
        biggest, MOVER_SPILL_BATCH * tac.cfg.partitions, tac_ssd_from_nvm);
    TAC_ADD(nvm_tuples_to_ssd, t.moved);
    return t.moved + t.freed;
}

int tac_nvm_mover_step(void)
{
    if (mv.refs == NULL)
        return 0;
    if (!nvm_draining(tac.nvm)) {
        unsigned need = tac_nvm_wanted();
        if (need == 0 || tac_nvm_mover_idle())
            return 0;
        if (!nvm_drain_begin(tac.nvm, need, tac.ssd != NULL)) {
            /* An emptied page still waits for its taker, or none fits.
             * With an SSD, a page with no free slot at all is made one:
             * the biggest other class's coldest tuples go down. */
            int down = tac.ssd != NULL && nvm_free_pages(tac.nvm) == 0
                ? tac_nvm_spill(need) : 0;
            if (down > 0)
                return down;
            if (nvm_free_pages(tac.nvm) == 0)
                mover_idle();
            else
                tac_nvm_want_clear();
            return 0;
        }
        mv.old_epoch = tac_nvm_epoch_flip();
        mv.settled = false;
        mv.stuck = 0;
    }
    if (!mv.settled) {
        if (!tac_nvm_writers_done(mv.old_epoch))
            return 0;
        mv.settled = true;
    }
    size_t n = nvm_drain_live(tac.nvm, mv.refs, mv.cap);
    int moved = 0;
    for (size_t i = 0; i < n; i++)
        moved += move_one(mv.refs[i]);
    STATS_ADD(&tac.stats, nvm_tuples_moved, moved);
    if (!nvm_draining(tac.nvm)) {
        tac_nvm_want_clear();
        return moved + 1;
    }
    if (moved > 0) {
        mv.stuck = 0;
    } else if (++mv.stuck >= MOVER_STUCK_ROUNDS && nvm_drain_abort(tac.nvm)) {
        TAC_INCR(nvm_drains_abandoned);
        mover_idle();
    }
    return moved;
}

bool tac_nvm_mover_init(void)
{
    if (tac.nvm == NULL)
        return true;
    struct nvm_info info;
    nvm_get_info(tac.nvm, &info);
    mv.cap = info.page_size / NVM_SLOT_ALIGN;
    mv.refs = calloc(mv.cap, sizeof(*mv.refs));
    tac_nvm_mover_enable(mv.refs != NULL);
    return mv.refs != NULL;
}

void tac_nvm_mover_free(void)
{
    tac_nvm_mover_enable(false);
    free(mv.refs);
    mv.refs = NULL;
    mv.cap = 0;
}

/*
 * tac/nvm_tier.c - the NVM tier's mechanism: placing a tuple in a slot,
 * reading it back checked, freeing it, and the writers' side of the page
 * mover's drain.  Where an item goes is tac/policy.c's; when the page
 * mover runs is tac/mover.c's.
 *
 * Design.  A value goes into a 256 B-aligned NVM slot as a tuple
 * (tuple.h) and a DRAM meta tuple takes the item's place in the index,
 * published under the item lock.  A read copies the value out while a
 * reference pins the meta tuple: the slot is freed only when the meta
 * tuple's last reference goes (tac_nvm_release), so a copy never races a
 * free.  Every read of a tuple checks it first (header bounds, key and
 * lengths against the meta tuple, checksum); a damaged one is counted,
 * answered as a miss and its item unlinked.  When a slot class is full,
 * its coldest tuple moves down through the spill function the engine
 * registers (the SSD tier's, when there is one); a class with no tuple to
 * move, or no SSD tier, asks the page mover (mover.c) to empty a page of
 * another class for it; without an SSD, failing that, the tuple is
 * dropped (cache semantics), or with -M nothing is dropped and the store
 * fails.
 *
 * Reading a slot before knowing its key.  A slot of a page being drained
 * may have been allocated just before the drain began, its tuple still
 * being written under a lock the mover cannot know.  Every NVM insertion
 * therefore registers in the current epoch (tac_nvm_write_begin/end); the
 * drain flips the epoch (tac_nvm_epoch_flip) and reads no slot until the
 * writers of the older one are done.  Afterwards a slot changes only when
 * it is rewritten, and no slot of a draining page is handed out again.
 *
 * Threads: workers (materialize, stage), evictors (demote), fetchers,
 * any thread (release).  Locks: callers hold the item lock of the key
 * being moved; dropping an NVM tuple takes other item locks only with
 * trylock.
 */
#include "config.h"

#include <pthread.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>

#include "base/settings.h"
#include "nvm/nvm.h"
#include "engine/slabs.h"
#include "tac/internal.h"
#include "tac/nvm_clock.h"
#include "tac/nvm_tier.h"
#include "tac/tuple.h"
#include "base/util.h"

/* NVM slot allocation attempts (each after dropping one cold tuple). */
#define NVM_ALLOC_TRIES 8

/* Held by the page mover while it reads a slot of the draining page
 * before it knows the slot's key, and by whoever forgets and frees a slot
 * of that page (tac_nvm_release_slot): the read never sees a half-written
 * header, and the page cannot be handed to another class under it.  A
 * leaf: only the NVM allocator's partition locks are taken under it. */
static pthread_mutex_t read_lock = PTHREAD_MUTEX_INITIALIZER;

/* The drain as NVM's writers see it.  All atomic. */
static struct {
    bool mover_on;          /* the page mover runs (tac_nvm_mover_enable) */
    unsigned want;          /* a class that found no page; 0 = none */
    uint64_t idle_until;    /* ns; no new drain before */
    unsigned epoch;
    unsigned writers[2];    /* NVM insertions in flight per parity */
} dr;

/* Moves one NVM tuple down (its meta tuple, item lock held): the SSD
 * tier's tac_ssd_from_nvm, or NULL without one. */
static bool (*spill)(item *meta, uint32_t hv);

void tac_nvm_set_spill(bool (*fn)(item *meta, uint32_t hv))
{
    spill = fn;
}

unsigned tac_nvm_write_begin(void)
{
    for (;;) {
        unsigned e = __atomic_load_n(&dr.epoch, __ATOMIC_SEQ_CST);
        __atomic_add_fetch(&dr.writers[e & 1], 1, __ATOMIC_SEQ_CST);
        /* Unchanged: a drain that flips it later sees this writer. */
        if (__atomic_load_n(&dr.epoch, __ATOMIC_SEQ_CST) == e)
            return e & 1;
        __atomic_sub_fetch(&dr.writers[e & 1], 1, __ATOMIC_SEQ_CST);
    }
}

void tac_nvm_write_end(unsigned token)
{
    __atomic_sub_fetch(&dr.writers[token], 1, __ATOMIC_RELEASE);
}

void tac_nvm_mover_enable(bool on)
{
    __atomic_store_n(&dr.mover_on, on, __ATOMIC_RELAXED);
}

unsigned tac_nvm_wanted(void)
{
    return __atomic_load_n(&dr.want, __ATOMIC_RELAXED);
}

void tac_nvm_want_clear(void)
{
    __atomic_store_n(&dr.want, 0, __ATOMIC_RELAXED);
}

bool tac_nvm_mover_idle(void)
{
    return util_now_ns() < __atomic_load_n(&dr.idle_until, __ATOMIC_RELAXED);
}

void tac_nvm_mover_idle_for(unsigned ms)
{
    __atomic_store_n(&dr.idle_until, util_now_ns() + ms * 1000000ull,
                     __ATOMIC_RELAXED);
    tac_nvm_want_clear();
}

unsigned tac_nvm_epoch_flip(void)
{
    return __atomic_fetch_add(&dr.epoch, 1, __ATOMIC_SEQ_CST) & 1;
}

bool tac_nvm_writers_done(unsigned parity)
{
    return __atomic_load_n(&dr.writers[parity], __ATOMIC_SEQ_CST) == 0;
}

bool tac_nvm_mover_want(unsigned cls)
{
    if (tac.nvm == NULL || !__atomic_load_n(&dr.mover_on, __ATOMIC_RELAXED))
        return false;
    TAC_INCR(nvm_mover_wants);
    if (!nvm_draining(tac.nvm) && tac_nvm_mover_idle())
        return false;
    if (__atomic_load_n(&dr.want, __ATOMIC_RELAXED) == 0) {
        __atomic_store_n(&dr.want, cls, __ATOMIC_RELAXED);
        tac_evictors_wake(0);
    }
    return true;
}

bool tac_nvm_read_slot_key(uint64_t ref, struct tac_tuple_hdr *hdr, char *key)
{
    bool ok = false;
    pthread_mutex_lock(&read_lock);
    if (!nvm_in_drain(tac.nvm, ref))
        goto out;
    nvm_read(tac.nvm, ref, 0, hdr, sizeof(*hdr));
    if (!tac_tuple_sane(hdr, nvm_slot_size(tac.nvm, ref)))
        goto out;                   /* a freed slot: never a tuple */
    if (tac_tuple_sealed()) {
        /* The key is read only from a tuple whose tag holds; one that
         * fails stays, for the read that finds it to drop. */
        const char *clear;
        size_t body = tac_tuple_size(hdr->nkey, hdr->nbytes) - sizeof(*hdr);
        nvm_charge_read(tac.nvm, ref, sizeof(*hdr), body);
        if (tac_tuple_open_scratch(hdr, (const char *)nvm_ptr(tac.nvm, ref) + sizeof(*hdr),
                                   &clear) != TUPLE_OK)
            goto out;
        memcpy(key, clear, hdr->nkey);
    } else {
        nvm_read(tac.nvm, ref, sizeof(*hdr), key, hdr->nkey);
    }
    ok = true;
out:
    pthread_mutex_unlock(&read_lock);
    return ok;
}

void tac_nvm_release_slot(uint64_t ref)
{
    /* Registered as a writer: a drain that begins meanwhile waits for
     * this one; one that began before is seen by nvm_in_drain. */
    unsigned epoch = tac_nvm_write_begin();
    bool locked = nvm_in_drain(tac.nvm, ref);
    if (locked)
        pthread_mutex_lock(&read_lock);
    tac_nvm_forget(ref);
    nvm_free(tac.nvm, ref);
    if (locked)
        pthread_mutex_unlock(&read_lock);
    tac_nvm_write_end(epoch);
}

/* A slot for a tuple of `size` bytes; drops cold NVM tuples of the class
 * to make room unless -M.  0 when none can be had. */
static uint64_t nvm_place(size_t size, int partition, unsigned *cls_out)
{
    unsigned cls = nvm_class_of_size(tac.nvm, size);
    if (cls == 0 || cls >= MAX_SLAB_CLASSES)
        return 0;
    *cls_out = cls;
    for (int tries = 0; tries < NVM_ALLOC_TRIES; tries++) {
        uint64_t ref = nvm_alloc_class(tac.nvm, cls, partition);
        if (ref != 0)
            return ref;
        if (spill != NULL) {
            /* Make room by moving a cold tuple of the class down. */
            uint64_t short0 = STATS_GET(&tac.stats, meta_alloc_failures);
            struct clock_turn t = tac_nvm_clock_evict(cls, 1, spill);
            if (t.moved + t.freed > 0)
                continue;
            /* The class holds nothing to move (a size new to NVM): the
             * page mover empties a page of another class for it, spilling
             * to SSD what finds no slot there (mover.c); meanwhile the
             * caller goes to SSD.  (A class whose tuples could not move
             * for want of a meta tuple is not such a class.) */
            struct nvm_class_info ci;
            nvm_class_info(tac.nvm, cls, &ci);
            if (ci.slots_used == 0 && !nvm_page_reusable(tac.nvm, cls))
                tac_nvm_mover_want(cls);
            /* The move needs a DRAM meta tuple for SSD.  When DRAM is
             * (nearly) all meta tuples, nothing can move: a cache then
             * drops the coldest NVM item, which frees its slot and its
             * meta tuple's chunk (not with -M).  Any other failure (busy
             * tails, a reserve the page mover has yet to refill, a class
             * whose free chunks the page mover will hand to the meta
             * tuples) just fails, and the caller tries again later. */
            if (STATS_GET(&tac.stats, meta_alloc_failures) == short0 ||
                !tac_dram_only_index())
                break;
        } else if (tac_nvm_mover_want(cls) || nvm_page_reusable(tac.nvm, cls)) {
            /* Another class has a wholly free page that page reuse could
             * not take just now (busy, or backing off), or holds partly
             * used pages, one of which is being emptied for this class
             * (mover.c): the caller tries again rather than drop. */
            break;
        }
        if (!tac.cfg.evict_to_free)
            break;
        struct clock_turn t = tac_nvm_clock_evict(cls, 1, NULL);
        if (t.freed == 0)
            break;
        TAC_ADD(nvm_evictions, t.evicted);
    }
    TAC_INCR(nvm_alloc_failures);
    return 0;
}

/* Free bytes of NVM: its whole pages (not the header or a tail shorter
 * than a page) less the slots in use. */
size_t tac_nvm_free_bytes(void)
{
    struct nvm_info info;
    nvm_get_info(tac.nvm, &info);
    size_t usable = (size_t)info.pages_total * info.page_size;
    return usable > info.bytes_used ? usable - info.bytes_used : 0;
}

bool tac_nvm_full(void)
{
    return tac_nvm_free_bytes() < 2 * tac.nvm_free_wm;
}

/* Writes the value of `it` as a tuple at ref; returns its write sequence. */
static uint64_t nvm_put_tuple(uint64_t ref, const item *it)
{
    struct tac_tuple_hdr hdr;
    struct iovec iov[3];
    tac_tuple_fill(&hdr, it);
    int n = tac_tuple_image(&hdr, ITEM_key(it), ITEM_data(it), iov);
    size_t off = 0;
    for (int i = 0; i < n; i++) {
        nvm_write(tac.nvm, ref, off, iov[i].iov_base, iov[i].iov_len);
        off += iov[i].iov_len;
    }
    nvm_drain(tac.nvm);
    return hdr.seq;
}

/* Copies `it` (a DRAM or staging item) into NVM and returns its new,
 * unlinked meta tuple (refcount 1); NULL if NVM or DRAM lacks room. */
item *tac_nvm_store_copy(const item *it, int partition, bool reserved)
{
    unsigned cls = 0;
    unsigned epoch = tac_nvm_write_begin();     /* see mover.c */
    uint64_t ref = nvm_place(tac_tuple_size(it->nkey, it->nbytes), partition, &cls);
    item *meta = NULL;
    if (ref != 0) {
        meta = item_alloc_meta(it, TIER_NVM, ref, partition, reserved);
        if (meta == NULL) {
            TAC_INCR(meta_alloc_failures);
            nvm_free(tac.nvm, ref);
        } else {
            item_set_meta_seq(meta, nvm_put_tuple(ref, it));
            TAC_INCR(nvm_inserts);
        }
    }
    tac_nvm_write_end(epoch);
    return meta;
}

/* Moves a meta tuple to another DRAM chunk (the slab page mover is
 * emptying its page).  The tuple stays as it is; the old meta tuple forgets
 * its reference so that freeing it does not free the tuple. */
bool tac_nvm_meta_rehome(item *meta, uint32_t hv)
{
    if (meta->tier != TIER_NVM)
        return false;
    uint64_t ref = item_meta_ref(meta);
    item *n = item_alloc_meta(meta, TIER_NVM, ref, meta->partition, true);
    if (n == NULL) {
        TAC_INCR(meta_alloc_failures);
        return false;
    }
    do_item_move(meta, n, hv);
    item_set_meta_ref(meta, 0);
    item_release(n);
    TAC_INCR(meta_rehomed);
    return true;
}

/* Reads the header of NVM meta tuple meta's tuple (at ref) into hdr and
 * checks it: in bounds, and meta's own key and value lengths (the caller
 * compares the key).  The meta tuple alone owns the slot, so anything else
 * is damage.  The header is not charged as read here: nvm_body charges
 * the whole tuple, header included, once. */
static bool nvm_hdr_read(const item *meta, uint64_t ref, struct tac_tuple_hdr *hdr)
{
    memcpy(hdr, nvm_ptr(tac.nvm, ref), sizeof(*hdr));
    /* The meta tuple's lengths bound every copy that follows. */
    return tac_tuple_sane(hdr, tac_tuple_size(meta->nkey, meta->nbytes)) &&
           hdr->nkey == meta->nkey && hdr->nbytes == meta->nbytes;
}

static void nvm_damaged(void)
{
    TAC_INCR(nvm_read_errors);
    tac_tuple_refused();
}

/* The body of the tuple at ref (what follows its header); the whole
 * tuple is charged as read, each of its blocks once. */
static const char *nvm_body(uint64_t ref, const struct tac_tuple_hdr *hdr)
{
    nvm_charge_read(tac.nvm, ref, 0, tac_tuple_size(hdr->nkey, hdr->nbytes));
    return (const char *)nvm_ptr(tac.nvm, ref) + sizeof(*hdr);
}

bool tac_nvm_key_at(uint64_t ref, size_t len, uint64_t fp, size_t nkey, char *key)
{
    return tac.nvm != NULL &&
           tac_tuple_key_of((const char *)nvm_ptr(tac.nvm, ref), len, len, fp, nkey, key);
}

bool tac_nvm_read_value(const item *meta, char *keydst, char *dst)
{
    uint64_t ref = item_meta_ref(meta);
    struct tac_tuple_hdr hdr;
    char key[KEY_MAX_LENGTH];
    if (!nvm_hdr_read(meta, ref, &hdr)) {
        nvm_damaged();
        return false;
    }
    /* The copies are what is checked, and dst is what gets served. */
    if (tac_tuple_open(&hdr, nvm_body(ref, &hdr), key, dst) != TUPLE_OK ||
        !tac_tuple_owned(meta, &hdr, key)) {
        nvm_damaged();
        return false;
    }
    if (keydst != NULL)
        memcpy(keydst, key, hdr.nkey);
    return true;
}

const char *tac_nvm_tuple_checked(const item *meta, struct tac_tuple_hdr *hdr,
                                  const char **body)
{
    uint64_t ref = item_meta_ref(meta);
    if (!nvm_hdr_read(meta, ref, hdr)) {
        nvm_damaged();
        return NULL;
    }
    const char *image = nvm_body(ref, hdr), *key;
    if (tac_tuple_open_scratch(hdr, image, &key) != TUPLE_OK ||
        !tac_tuple_owned(meta, hdr, key)) {
        nvm_damaged();
        return NULL;
    }
    if (body != NULL)
        *body = image;
    return key;
}

item *tac_nvm_materialize(item *meta)
{
    item *copy = tac_transient_new(meta, NULL);
    if (copy == NULL)
        return NULL;
    if (!tac_nvm_read_value(meta, ITEM_key(copy), ITEM_data(copy))) {
        free(copy);
        /* Damaged: never served, now or later.  The caller holds the item
         * lock and a reference; the slot is freed with the last one. */
        do_item_unlink(meta, item_hv(meta));
        return NULL;
    }
    TAC_INCR(get_hits_nvm);
    return copy;
}

void tac_nvm_forget(uint64_t ref)
{
    uint8_t zero = 0;
    nvm_write(tac.nvm, ref, offsetof(struct tac_tuple_hdr, version), &zero, 1);
}

bool tac_nvm_tight(void)
{
    if (tac.nvm == NULL || tac.ssd == NULL)
        return false;
    return tac_nvm_free_bytes() < tac.nvm_free_wm;
}

void tac_nvm_release(item *meta)
{
    uint64_t ref = item_meta_ref(meta);
    if (tac.nvm != NULL && ref != 0) {
        tac_nvm_release_slot(ref);
        TAC_INCR(nvm_removals);
    }
}

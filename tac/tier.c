/*
 * tac/tier.c - the tier operations items.c calls, NVM placement, and the
 * tier statistics.
 *
 * Design.  An item leaves DRAM in one of two ways: an evictor demotes a
 * cold DRAM item (tac_demote), or a set arrives while DRAM is full and its
 * staging item is written straight to NVM (tier_stage, TaC 4.1); without
 * NVM, or with NVM full, both go to SSD instead (ssd_tier.c).
 * Either way the value goes into a 256 B-aligned NVM slot as a tuple
 * (tuple.h) and a DRAM meta tuple takes the item's place in the index,
 * published under the item lock.  A read of an NVM item copies the value
 * out (tier_materialize) while a reference pins the meta tuple: the slot is
 * freed only when the meta tuple's last reference goes (tier_release), so a
 * copy never races a free.  Every read of a tuple checks it first (header
 * bounds, key and lengths against the meta tuple, checksum); a
 * damaged one is counted, answered as a miss and its item unlinked.  When
 * an NVM class is full, its coldest tuple moves to SSD; a class with no
 * tuple to move, or no SSD tier, asks the page mover (mover.c) to empty a
 * page of another class for it; without an SSD, failing that, the tuple is
 * dropped (cache semantics), or with -M nothing is dropped and the store
 * fails.  A DRAM item NVM cannot take goes to SSD (tac_demote).
 *
 * Threads: workers (materialize, stage), evictors (demote), any thread
 * (release).  Locks: callers hold the item lock of the key being moved;
 * dropping an NVM tuple takes other item locks only with trylock.
 */
#include "config.h"
#include "crashpoint.h"

#include <errno.h>
#include <pthread.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "lazy_lru.h"
#include "settings.h"
#include "nvm/nvm.h"
#include "slabs.h"
#include "tac/crypt.h"
#include "tac/internal.h"
#include "tac/tac.h"
#include "tac/tuple.h"
#include "util.h"

struct tac_state tac;

/* NVM slot allocation attempts (each after dropping one cold tuple). */
#define NVM_ALLOC_TRIES 8

bool tac_active(void)
{
    return tac.nvm != NULL || tac.ssd != NULL;
}

bool tac_has_nvm(void)
{
    return tac.nvm != NULL;
}

const char *tac_tiers_name(void)
{
    if (tac.nvm != NULL)
        return tac.ssd != NULL ? "dram,nvm,ssd" : "dram,nvm";
    return tac.ssd != NULL ? "dram,ssd" : "dram";
}

/* ---- NVM placement ------------------------------------------------------ */

/* DRAM is an index: meta tuples fill all but an eighth of -m. */
static bool dram_index_full(void)
{
    size_t limit = slabs_mem_limit();
    return limit != 0 && slabs_index_bytes() >= limit - limit / 8;
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
        if (tac.ssd != NULL) {
            /* Make room by moving the class's coldest tuple to SSD. */
            uint64_t short0 = STATS_GET(&tac.stats, meta_alloc_failures);
            int moved = 0;
            for (int i = 0; i < settings.partitions && moved == 0; i++)
                moved = items_demote_tail(TIER_NVM, cls,
                                          (partition + i) % settings.partitions,
                                          1, tac_ssd_from_nvm);
            if (moved > 0)
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
                !dram_index_full() || slabs_has_spare())
                break;
        } else if (tac_nvm_mover_want(cls) || nvm_page_reusable(tac.nvm, cls)) {
            /* Another class has a wholly free page that page reuse could
             * not take just now (busy, or backing off), or holds partly
             * used pages, one of which is being emptied for this class
             * (mover.c): the caller tries again rather than drop. */
            break;
        }
        if (!settings.evict_to_free ||
            !items_lower_drop_tail(TIER_NVM, cls, partition))
            break;
        TAC_INCR(nvm_evictions);
    }
    TAC_INCR(nvm_alloc_failures);
    return 0;
}

/* ---- NVM admission (NVCache's OBP, SoCC'22) --------------------------------
 * Writing NVM slows its reads, and a full NVM pays for each admitted tuple
 * with another one moved to SSD.  With obp:PCT, a cold tuple is refused
 * while NVM is full (free < 2 x its watermark) and, over the last
 * OBP_WINDOW seconds, NVM's churn (slots written + slots freed) exceeds
 * PCT % of its lookups (NVM get hits).  Warm tuples are always admitted.
 * The decision is remade at most once a second, by whichever thread asks
 * first (trylock); the others read the last one. */
#define OBP_WINDOW 8

static struct {
    pthread_mutex_t lock;
    rel_time_t last;                        /* lock */
    uint64_t churn[OBP_WINDOW];             /* lock: cumulative, per second */
    uint64_t lookups[OBP_WINDOW];           /* lock */
    bool refuse;                            /* atomic */
} obp = { .lock = PTHREAD_MUTEX_INITIALIZER };

/* Free bytes of NVM: its whole pages (not the header or a tail shorter
 * than a page) less the slots in use. */
static size_t nvm_free_bytes(void)
{
    struct nvm_info info;
    nvm_get_info(tac.nvm, &info);
    size_t usable = (size_t)info.pages_total * info.page_size;
    return usable > info.bytes_used ? usable - info.bytes_used : 0;
}

static bool nvm_full(void)
{
    return nvm_free_bytes() < 2 * tac.nvm_free_wm;
}

bool tac_nvm_admit(void)
{
    if (tac.obp_pct < 0 || tac.ssd == NULL)
        return true;
    rel_time_t now = mc_now();
    if (__atomic_load_n(&obp.last, __ATOMIC_RELAXED) != now &&
        pthread_mutex_trylock(&obp.lock) == 0) {
        if (obp.last != now) {
            uint64_t churn = STATS_GET(&tac.stats, nvm_inserts) +
                             STATS_GET(&tac.stats, nvm_removals);
            uint64_t look = STATS_GET(&tac.stats, get_hits_nvm);
            unsigned slot = now % OBP_WINDOW;
            /* The slot being overwritten is the window's oldest second. */
            uint64_t dc = churn - obp.churn[slot], dl = look - obp.lookups[slot];
            obp.churn[slot] = churn;
            obp.lookups[slot] = look;
            bool refuse = dc * 100 > (uint64_t)tac.obp_pct * dl && nvm_full();
            __atomic_store_n(&obp.refuse, refuse, __ATOMIC_RELAXED);
            __atomic_store_n(&obp.last, now, __ATOMIC_RELAXED);
        }
        pthread_mutex_unlock(&obp.lock);
    }
    if (!__atomic_load_n(&obp.refuse, __ATOMIC_RELAXED))
        return true;
    TAC_INCR(nvm_admission_refused);
    return false;
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
        meta = item_alloc_meta(it, TIER_NVM, cls, ref, partition, reserved);
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
static bool meta_rehome(item *meta, uint32_t hv)
{
    if (meta->tier != TIER_NVM)
        return false;
    uint64_t ref = item_meta_ref(meta);
    item *n = item_alloc_meta(meta, TIER_NVM, meta->lru_cls, ref, meta->partition, true);
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

bool tac_demote(item *it, uint32_t hv)
{
    if (it->it_flags & ITEM_TRANSIENT)
        return false;
    if (it->it_flags & ITEM_META) {
        if (it->tier == TIER_SSD)
            return tac_ssd_meta_rehome(it, hv);
        return meta_rehome(it, hv);
    }
    /* A stale-marked DRAM item (`md ... I`) is not written down: its tuple
     * would have a new seq, above the invalidation the mark recorded, and
     * no mark, so a crash would bring it back fresh.  It goes as a miss
     * does after a crash. */
    if (it->it_flags & ITEM_STALE) {
        do_item_evict(it, hv);
        return true;
    }
    /* Warm (and hot) items go to NVM; cold ones too unless the admission
     * policy refuses, and then to SSD (TaC 5.3).  anti2 has no
     * temperatures: its LRUs are FIFOs (items_set_lazy_lru). */
    bool to_nvm = tac.nvm != NULL;
    if (to_nvm && tac.ssd != NULL && tac.policy != POLICY_ANTI2 &&
        llru_temperature_at(it, mc_now()) == LLRU_COLD && !tac_nvm_admit())
        to_nvm = false;
    item *meta = NULL;
    if (to_nvm) {
        meta = tac_nvm_store_copy(it, it->partition, true);
        if (meta != NULL)
            TAC_INCR(evict_dram_to_nvm);
    }
    /* NVM refused it (admission), or its slot class had no room: SSD takes
     * it.  A move down never waits for NVM to make room, since making room
     * there may itself wait for DRAM (doc/design.md, "Every class gets
     * room"). */
    if (meta == NULL && tac.ssd != NULL && !tac_ssd_takes(it->nbytes)) {
        /* -o ext_item_size: too small for SSD.  One NVM would not take
         * waits for NVM's room; a cold one is dropped, as memcached evicts
         * what extstore will not take. */
        if (to_nvm)
            return false;
        do_item_evict(it, hv);
        return true;
    }
    if (meta == NULL && tac.ssd != NULL) {
        meta = tac_ssd_store_copy(it, it->partition, true);
        if (meta != NULL) {
            TAC_INCR(evict_dram_to_ssd);
            if (to_nvm)
                TAC_INCR(nvm_fallback_ssd);
            else if (tac.nvm != NULL)
                TAC_INCR(evict_cold_to_ssd);
        }
    }
    if (meta == NULL)
        return false;
    do_item_move(it, meta, hv);
    if (meta->tier == TIER_NVM)
        CRASH_POINT(move_dram_to_nvm);
    else
        CRASH_POINT(move_dram_to_ssd);
    item_release(meta);
    return true;
}

/* ---- The operations items.c calls ------------------------------------- */

item *tac_transient_new(const item *meta)
{
    item *copy = malloc(item_make_size(meta->nkey, meta->nbytes));
    if (copy == NULL)
        return NULL;
    /* The caller holds the meta tuple's item lock: its fields are stable. */
    memset(copy, 0, sizeof(item));
    copy->time = item_time(meta);
    copy->exptime = meta->exptime;
    copy->access = __atomic_load_n(&meta->access, __ATOMIC_RELAXED);
    copy->nbytes = meta->nbytes;
    copy->flags = meta->flags;
    copy->it_flags = ITEM_TRANSIENT |
                     (meta->it_flags & (ITEM_FETCHED | ITEM_ACTIVE));
    copy->partition = meta->partition;
    copy->tier = TIER_DRAM;
    copy->nkey = meta->nkey;
    copy->cas = meta->cas;
    copy->refcount = 1;
    memcpy(ITEM_key(copy), ITEM_key(meta), meta->nkey);
    ITEM_key(copy)[meta->nkey] = '\0';
    return copy;
}

/* Reads the header of NVM meta tuple meta's tuple (at ref) into hdr and
 * checks it: in bounds, and meta's own key and value lengths (the caller
 * compares the key).  The meta tuple alone owns the slot, so anything else
 * is damage. */
static bool nvm_hdr_read(const item *meta, uint64_t ref, struct tac_tuple_hdr *hdr)
{
    nvm_read(tac.nvm, ref, 0, hdr, sizeof(*hdr));
    /* The meta tuple's lengths bound every copy that follows. */
    return tac_tuple_sane(hdr, tac_tuple_size(meta->nkey, meta->nbytes)) &&
           hdr->nkey == meta->nkey && hdr->nbytes == meta->nbytes;
}

void tac_tuple_refused(void)
{
    if (tac_tuple_sealed())
        TAC_INCR(tuple_auth_failures);
    else
        TAC_INCR(tuple_checksum_failures);
}

bool tac_tuple_owned(const item *meta, const struct tac_tuple_hdr *hdr,
                     const char *key)
{
    return memcmp(key, ITEM_key(meta), hdr->nkey) == 0 &&
           (!tac_tuple_sealed() || hdr->seq == item_meta_seq(meta));
}

static void nvm_damaged(void)
{
    TAC_INCR(nvm_read_errors);
    tac_tuple_refused();
}

/* The body of the tuple at ref (what follows its header), charged as read. */
static const char *nvm_body(uint64_t ref, const struct tac_tuple_hdr *hdr)
{
    size_t len = tac_tuple_size(hdr->nkey, hdr->nbytes) - sizeof(*hdr);
    nvm_charge_read(tac.nvm, ref, sizeof(*hdr), len);
    return (const char *)nvm_ptr(tac.nvm, ref) + sizeof(*hdr);
}

bool tac_nvm_read_value(const item *meta, char *dst)
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

static item *nvm_materialize(item *meta)
{
    item *copy = tac_transient_new(meta);
    if (copy == NULL)
        return NULL;
    if (!tac_nvm_read_value(meta, ITEM_data(copy))) {
        free(copy);
        /* Damaged: never served, now or later.  The caller holds the item
         * lock and a reference; the slot is freed with the last one. */
        do_item_unlink(meta, item_hash(ITEM_key(meta), meta->nkey));
        return NULL;
    }
    TAC_INCR(get_hits_nvm);
    /* A hot NVM item goes up to DRAM (TaC 4.2); anti2 has no such move:
     * NVM is memory like DRAM. */
    if (tac.policy != POLICY_ANTI2 && llru_temperature(meta) == LLRU_HOT)
        tac_fetch_nvm(meta);
    return copy;
}

static item *tier_materialize(item *meta)
{
    if (meta->tier == TIER_NVM && tac.nvm != NULL)
        return nvm_materialize(meta);
    if (meta->tier == TIER_SSD)
        return tac_ssd_materialize(meta);
    return NULL;
}

static item *tier_stage(item *staging, int partition)
{
    item *meta = NULL;
    /* A new item is cold: NVM unless the admission policy refuses.  Its
     * meta tuple may not take the slab reserve: that is for demotions,
     * which free DRAM; sets that used it could spend it all and leave the
     * page mover no room to drain a page (the evictors catch up, and
     * item_store tries again). */
    if (tac.nvm != NULL && (tac.policy == POLICY_ANTI2 || tac_nvm_admit())) {
        meta = tac_nvm_store_copy(staging, partition, false);
        if (meta != NULL)
            TAC_INCR(set_fallback_nvm);
    }
    if (meta == NULL && tac.ssd != NULL && tac_ssd_takes(staging->nbytes)) {
        meta = tac_ssd_store_copy(staging, partition, false);
        if (meta != NULL)
            TAC_INCR(set_fallback_ssd);
    }
    if (meta != NULL)
        CRASH_POINT(move_stage);
    return meta;
}

void tac_nvm_forget(uint64_t ref)
{
    uint8_t zero = 0;
    nvm_write(tac.nvm, ref, offsetof(struct tac_tuple_hdr, version), &zero, 1);
}

static void tier_release(item *meta)
{
    uint64_t ref = item_meta_ref(meta);
    if (meta->tier == TIER_NVM && tac.nvm != NULL && ref != 0) {
        tac_nvm_release_slot(ref);
        TAC_INCR(nvm_removals);
    }
    else if (meta->tier == TIER_SSD)
        tac_ssd_release(meta);
}

static void tier_dram_pressure(unsigned int clsid, int partition)
{
    (void)clsid;
    tac_evictors_wake(partition);
}

/* A store found no tier with room.  A cache makes room by dropping its
 * coldest data, so room comes unless -M; with -M it comes while the SSD is
 * not full (evictors move NVM's tail there, defrag compacts), or without
 * an SSD while NVM has pages no class took yet or the page mover is
 * emptying one. */
static bool tier_room_later(void)
{
    if (settings.evict_to_free)
        return true;
    if (tac.ssd != NULL)
        return !tac_ssd_full();
    return tac.nvm != NULL && (nvm_free_pages(tac.nvm) > 0 || nvm_draining(tac.nvm) ||
                               nvm_page_reusable(tac.nvm, 0));
}

bool tac_anti2_to_nvm(void)
{
    if (tac.policy != POLICY_ANTI2 || tac.nvm == NULL)
        return false;
    return (double)(util_rand64() >> 11) * 0x1.0p-53 < tac.anti2_nvm_share;
}

static bool tier_read_async(void *reader, item *meta, uint32_t hv,
                            void (*done)(void *arg, const struct item_got *got),
                            void *arg)
{
    return tac_read_value(reader, meta, hv, done, arg);
}

/* A shorter life for the key's lower-tier copies, in the journal as unix
 * time (the tuples' clock). */
static void tier_shorten(const char *key, size_t nkey, rel_time_t exptime)
{
    tac_journal_shorten(key, nkey, (uint64_t)((int64_t)process_started + exptime));
}

static struct item_tier_ops tier_ops = {   /* .logged set by tac_plug_in */
    .materialize = tier_materialize,
    .read_async = tier_read_async,
    .demote = tac_demote,
    .stage = tier_stage,
    .release = tier_release,
    .dram_pressure = tier_dram_pressure,
    .skip_dram = tac_anti2_to_nvm,
    .room_later = tier_room_later,
    .invalidate = tac_journal_invalidate,
    .shorten = tier_shorten,
    .flush = tac_journal_flush,
    .read_missed = tac_ssd_read_missed,
    .key_stored = tac_ssd_key_stored,
};

/* ---- Set-up ------------------------------------------------------------- */

static bool tac_plug_in(void);

static const char *policy_name(void)
{
    return settings_choice("tier_policy");
}

static void tac_stats_register(void);

void tac_refuse_tier_file(const char *option, const char *path, const char *why)
{
    fprintf(stderr, "cannot open the tier file %s (-o %s): it %s. Nothing was "
            "written to it. To discard what it holds and format it afresh, "
            "start once with -o tier_reformat=yes.\n", path, option, why);
}

/* Opens the tiers the settings name (settings.c checked and parsed the
 * options); tac_init() without the stats. */
static bool tac_open(void)
{
    _Static_assert((int)POLICY_TAC == TIER_POLICY_TAC &&
                   (int)POLICY_ANTI2 == TIER_POLICY_ANTI2 &&
                   (int)POLICY_ANTITUPLE == TIER_POLICY_ANTITUPLE &&
                   (int)POLICY_TWOTIER == TIER_POLICY_TWOTIER,
                   "enum tac_policy follows -o tier_policy's choices");
    memset(&tac, 0, sizeof(tac));
    tac.policy = (enum tac_policy)settings.tier_policy;
    tac.obp_pct = settings.nvm_obp_pct;
    if (settings.tier_key != NULL) {
        if (settings.nvm_path == NULL && settings.ssd_path == NULL) {
            fprintf(stderr, "-o tier_key encrypts the NVM and SSD tiers: give "
                    "-o nvm_path or -o ssd_path too\n");
            return false;
        }
        if (!tac_crypt_load(settings.tier_key))
            return false;
        /* Before any size is computed: tuples carry a nonce and a tag,
         * meta tuples their tuple's write sequence. */
        tac_tuple_set_sealed(true);
        item_meta_seq_bytes = sizeof(uint64_t);
    }
    if (settings.nvm_path == NULL)
        return tac_ssd_open() && tac_plug_in();

    struct nvm_config cfg = { 0 };
    cfg.path = settings.nvm_file;
    cfg.size = settings.nvm_size;
    cfg.read_ns = settings.nvm_read_ns;
    cfg.write_ns = settings.nvm_write_ns;
    cfg.partitions = settings.partitions;
    cfg.slot_max = tac_tuple_size(KEY_MAX_LENGTH, (size_t)settings.item_size_max);
    cfg.reformat = settings.tier_reformat != 0;
    memcpy(cfg.key_check, tac_crypt_key_check(), sizeof(cfg.key_check));
    enum nvm_status st = nvm_open(&cfg, &tac.nvm);
    if (st == NVM_ERR_NOT_OURS) {
        tac_refuse_tier_file("nvm_path", cfg.path, nvm_refusal());
        return false;
    }
    if (st != NVM_OK) {
        fprintf(stderr, "cannot open the NVM tier at %s: %s (%s)\n", cfg.path,
                nvm_strerror(st), strerror(errno));
        return false;
    }
    if (nvm_nclasses(tac.nvm) >= MAX_SLAB_CLASSES) {
        fprintf(stderr, "NVM tier: too many slot classes (%u)\n",
                nvm_nclasses(tac.nvm));
        nvm_abandon(tac.nvm);
        tac.nvm = NULL;
        return false;
    }

    /* Keep 1% of NVM free by default. */
    struct nvm_info info;
    nvm_get_info(tac.nvm, &info);
    tac.nvm_free_wm = settings.nvm_free_watermark > 0
        ? (size_t)settings.nvm_free_watermark : info.capacity / 100;
    tac.anti2_nvm_share = (double)info.capacity /
                          ((double)info.capacity + (double)settings.maxbytes);
    if (settings.verbose)
        fprintf(stderr, "NVM tier: %s (%s%s), %zu MB\n", info.path, info.backing,
                info.is_pmem ? ", pmem" : "", info.capacity >> 20);
    if (tac_nvm_mover_init() && tac_ssd_open() && tac_dramlog_open() && tac_plug_in())
        return true;
    tac_dramlog_close();
    tac_nvm_mover_free();
    nvm_abandon(tac.nvm);           /* a failed start leaves no file */
    tac.nvm = NULL;
    return false;
}

/* With a lower tier open, sets up the DRAM side and plugs the policy into
 * items.c. */
static bool tac_plug_in(void)
{
    if (!tac_active())
        return true;
    /* Defaults scale with the tier: keep 2% of DRAM (at least two pages)
     * free. */
    tac.dram_free_wm = settings.dram_free_watermark > 0
        ? (size_t)settings.dram_free_watermark
        : settings.maxbytes / 50 > 2 * SLAB_PAGE_SIZE ? settings.maxbytes / 50
                                                      : 2 * SLAB_PAGE_SIZE;
    tac.evict_threads = settings.evict_threads;
    /* Meta tuples may use the last pages of -m that data items may not,
     * so that demotion always finds room for its meta tuple; the page
     * mover then moves freed data pages over to the meta tuples' class. */
    slabs_set_reserve(TAC_META_RESERVE_PAGES * (size_t)settings.slab_page_size,
                      slabs_chunk_size(slabs_clsid(item_meta_size(KEY_MAX_LENGTH))));
    if (tac_dramlog_on()) {
        tier_ops.logged = tac_dramlog_item;
        tier_ops.log_ordered = tac_dramlog_ordered;
    }
    items_set_tier_ops(&tier_ops);
    /* anti2: NVM is more DRAM; nothing is told apart by temperature, so
     * items leave DRAM and NVM in the order they came in, and come in
     * where tac_anti2_to_nvm() says. */
    items_set_lazy_lru(tac.policy != POLICY_ANTI2);
    return true;
}

bool tac_init(void)
{
    if (!tac_open())
        return false;
    tac_stats_register();
    tac_restart_prepare();
    return true;
}

void tac_recover(void)
{
    tac_restart_run();
}

void tac_start(void)
{
    if (tac_active()) {
        tac_evictors_start();
        tac_fetchers_start();
    }
    tac_ssd_start();
}

void tac_stop(void)
{
    tac_restart_wait();
    tac_ssd_stop();
    if (tac_active()) {
        tac_fetchers_stop();
        tac_evictors_stop();
    }
}

void tac_close(void)
{
    bool saved = tac_restart_save();
    tac_journal_close();
    tac_dramlog_close();
    uint64_t ssd_generation = tac_ssd_close();
    bool nvm_clean = false;
    if (tac.nvm != NULL) {
        tac_nvm_mover_free();
        nvm_clean = nvm_close(tac.nvm);
        tac.nvm = NULL;
    }
    if (saved)
        tac_restart_commit(nvm_clean, ssd_generation);
}

bool tac_nvm_tight(void)
{
    if (tac.nvm == NULL || tac.ssd == NULL)
        return false;
    return nvm_free_bytes() < tac.nvm_free_wm;
}

/* ---- Stats -------------------------------------------------------------- */

static unsigned long long nvm_items(void)
{
    if (tac.nvm == NULL)
        return 0;
    struct nvm_info info;
    nvm_get_info(tac.nvm, &info);
    return info.slots_used;
}

static unsigned long long meta_tuples(void)
{
    return nvm_items() + tac_ssd_items();
}

static unsigned long long lower_hits(void)
{
    return STATS_GET(&tac.stats, get_hits_nvm) +
           STATS_GET(&tac.stats, get_hits_ssd);
}

static void tac_stats_reset(void)
{
#define TAC_ZERO(name) __atomic_store_n(&tac.stats.name, 0, __ATOMIC_RELAXED);
    TAC_STATS_FIELDS(TAC_ZERO)
}

static void tac_stats_nvm(struct stat_sink *s)
{
    if (tac.nvm == NULL)
        return;
    unsigned n = nvm_nclasses(tac.nvm), active = 0;
    for (unsigned cls = 1; cls <= n; cls++) {
        struct nvm_class_info ci;
        nvm_class_info(tac.nvm, cls, &ci);
        if (ci.pages == 0 && ci.alloc_fails == 0)
            continue;
        active++;
        char name[48];
#define NVM_CLASS_LINE(field, fmt, val) \
        snprintf(name, sizeof(name), "%u:" field, cls); \
        stat_printf(s, name, fmt, val);
        NVM_CLASS_LINE("slot_size", "%zu", ci.slot_size)
        NVM_CLASS_LINE("slots_per_page", "%u", ci.slots_per_page)
        NVM_CLASS_LINE("pages", "%llu", (unsigned long long)ci.pages)
        NVM_CLASS_LINE("slots_used", "%llu", (unsigned long long)ci.slots_used)
        NVM_CLASS_LINE("slots_free", "%llu", (unsigned long long)ci.slots_free)
        NVM_CLASS_LINE("steals", "%llu", (unsigned long long)ci.steals)
        NVM_CLASS_LINE("alloc_fails", "%llu", (unsigned long long)ci.alloc_fails)
#undef NVM_CLASS_LINE
    }
    stat_printf(s, "active_classes", "%u", active);
    stat_printf(s, "free_pages", "%llu", (unsigned long long)nvm_free_pages(tac.nvm));
}

/* `stats dram`: DRAM's slab classes as the tiers see them, with the
 * allocation failures that are the page mover's demand. */
static void tac_stats_dram(struct stat_sink *s)
{
    unsigned n = slabs_nclasses(), active = 0;
    for (unsigned cls = 1; cls <= n; cls++) {
        struct slabs_class_info ci;
        slabs_class_info(cls, &ci);
        if (ci.total_pages == 0 && ci.alloc_fails == 0)
            continue;
        active++;
        char name[48];
#define DRAM_CLASS_LINE(field, val) \
        snprintf(name, sizeof(name), "%u:" field, cls); \
        stat_printf(s, name, "%llu", (unsigned long long)(val));
        DRAM_CLASS_LINE("chunk_size", ci.chunk_size)
        DRAM_CLASS_LINE("pages", ci.total_pages)
        DRAM_CLASS_LINE("used_chunks", ci.used_chunks)
        DRAM_CLASS_LINE("free_chunks", ci.free_chunks + ci.free_chunks_end)
        DRAM_CLASS_LINE("alloc_fails", ci.alloc_fails)
#undef DRAM_CLASS_LINE
    }
    stat_printf(s, "active_classes", "%u", active);
}

/* `stats tiers`: DRAM's lines, then one group per lower tier, then the
 * policy's counters.  Only DRAM exists until NVM or SSD is configured. */
static void tac_stats_tiers(struct stat_sink *s)
{
    struct thread_stats ts;
    struct slab_stats tot;
    stats_aggregate(&ts, &tot);
    unsigned long long lower = lower_hits();
    stat_printf(s, "tiers", "%s", tac_tiers_name());
    stat_printf(s, "dram_capacity", "%zu", slabs_mem_limit());
    stat_printf(s, "dram_malloced", "%zu", slabs_mem_malloced());
    stat_printf(s, "dram_bytes", "%llu",
                (unsigned long long)STATS_GET(&gstats, bytes));
    unsigned long long items = STATS_GET(&gstats, curr_items);
    unsigned long long metas = meta_tuples();
    stat_printf(s, "dram_items", "%llu", items > metas ? items - metas : 0);
    stat_printf(s, "get_hits_dram", "%llu",
                tot.get_hits > lower ? (unsigned long long)tot.get_hits - lower : 0);
    stat_printf(s, "evictions", "%llu",
                (unsigned long long)STATS_GET(&gstats, evictions));
    stat_printf(s, "thr_hot", "%u", llru_thr_hot());
    stat_printf(s, "thr_warm", "%u", llru_thr_warm());
    if (!tac_active())
        return;
    struct slabs_mover_info mi;
    slabs_mover_info(&mi);
    stat_printf(s, "dram_page_moves_request", "%llu", (unsigned long long)mi.by_request);
    stat_printf(s, "dram_page_moves_automove", "%llu", (unsigned long long)mi.by_automove);
    stat_printf(s, "dram_page_moves_reserve", "%llu", (unsigned long long)mi.by_reserve);
    stat_printf(s, "dram_page_moves_demand", "%llu", (unsigned long long)mi.by_demand);
    stat_printf(s, "dram_page_moves_watchdog", "%llu", (unsigned long long)mi.by_watchdog);
    if (tac.nvm != NULL) {
        struct nvm_info info;
        nvm_get_info(tac.nvm, &info);
        stat_printf(s, "nvm_capacity", "%zu", info.capacity);
        stat_printf(s, "nvm_bytes", "%llu", (unsigned long long)info.bytes_used);
        stat_printf(s, "nvm_items", "%llu", (unsigned long long)info.slots_used);
        stat_printf(s, "nvm_pages_used", "%llu", (unsigned long long)info.pages_used);
        stat_printf(s, "nvm_pages_reused", "%llu", (unsigned long long)info.pages_reused);
        stat_printf(s, "nvm_pages_drained", "%llu", (unsigned long long)info.pages_drained);
        stat_printf(s, "nvm_pages_total", "%llu", (unsigned long long)info.pages_total);
        stat_printf(s, "nvm_metadata_dram_bytes", "%zu", info.dram_bytes);
    }
    stat_printf(s, "meta_tuples", "%llu", meta_tuples());
    if (tac_tuple_sealed()) {
        stat_printf(s, "tuple_seal_bytes", "%zu", tac_tuple_overhead);
        stat_printf(s, "records_sealed", "%llu", (unsigned long long)tac_crypt_sealed());
        stat_printf(s, "records_opened", "%llu", (unsigned long long)tac_crypt_opened());
    }
    stat_printf(s, "journal_invalidations", "%llu",
                (unsigned long long)tac_journal_entries());
    stat_printf(s, "journal_overflows", "%llu",
                (unsigned long long)tac_journal_overflows());
    tac_dramlog_stats(s);
    tac_ssd_stats_tiers(s);
#define TAC_PRINT(name) \
    stat_printf(s, #name, "%llu", (unsigned long long)STATS_GET(&tac.stats, name));
    TAC_STATS_FIELDS(TAC_PRINT)
    stat_printf(s, "evictor_threads", "%d", tac.evict_threads);
    stat_printf(s, "evictor_backlog", "%d", tac_evict_backlog());
    stat_printf(s, "evictor_backlog_bytes", "%llu",
                (unsigned long long)tac_evict_backlog_bytes());
}

static void tac_stats_settings(struct stat_sink *s)
{
    stat_printf(s, "tier_policy", "%s", policy_name());
    tac_ssd_stats_settings(s);
    if (tac_active())
        stat_printf(s, "dram_free_watermark_bytes", "%zu", tac.dram_free_wm);
    if (tac.nvm == NULL) {
        stat_printf(s, "nvm_backing", "none");
        return;
    }
    struct nvm_info info;
    nvm_get_info(tac.nvm, &info);
    stat_printf(s, "nvm_backing", "%s", info.backing);
    stat_printf(s, "nvm_is_pmem", "%s", info.is_pmem ? "yes" : "no");
    stat_printf(s, "nvm_capacity", "%zu", info.capacity);
    stat_printf(s, "nvm_read_ns", "%u", info.read_ns);
    stat_printf(s, "nvm_write_ns", "%u", info.write_ns);
    stat_printf(s, "nvm_free_watermark_bytes", "%zu", tac.nvm_free_wm);
    if (tac.obp_pct < 0)
        stat_printf(s, "nvm_admission", "always");
    else
        stat_printf(s, "nvm_admission", "obp:%d", tac.obp_pct);
}

static uint64_t stat_ssd_meta_tuple_bytes(void)
{
    return item_compact_size(0);
}

/* The tiers' sub-commands, their counters' reset, and their lines of plain
 * `stats`, which exist only with the tier they count. */
static void tac_stats_register(void)
{
    stats_register_section("settings", tac_stats_settings);
    stats_register_section("tiers", tac_stats_tiers);
    stats_register_section("nvm", tac_stats_nvm);
    stats_register_section("dram", tac_stats_dram);
    stats_register_reset(tac_stats_reset);
    bool ssd = tac.ssd != NULL;
    stats_provide_counter("get_hits_ssd", ssd ? &tac.stats.get_hits_ssd : NULL);
    stats_provide("ssd_meta_tuple_bytes", ssd ? stat_ssd_meta_tuple_bytes : NULL);
    stats_provide_counter("tuple_checksum_failures",
                          tac_active() ? &tac.stats.tuple_checksum_failures : NULL);
    tac_ssd_stats_register();
}

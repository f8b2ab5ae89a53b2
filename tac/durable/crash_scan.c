/*
 * tac/crash_scan.c - recovery after a crash: the scan of every NVM and SSD
 * page for valid tuples (newest sequence wins, the journal's records
 * decide what must not come back) and the replay of the DRAM log.
 * Design: doc/design.md, "Crash recovery: a scan, and a journal of what
 * must not come back" and "The DRAM log".
 */
#include <errno.h>
#include <stddef.h>
#include <fcntl.h>
#include <libgen.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "engine/assoc.h"
#include "base/crashpoint.h"
#include "engine/items.h"
#include "engine/lazy_lru.h"
#include "nvm/nvm.h"
#include "base/settings.h"
#include "ssd/ssd.h"
#include "base/stats.h"
#include "tac/crypt.h"
#include "tac/durable.h"
#include "tac/internal.h"
#include "tac/nvm_tier.h"
#include "tac/durable/restart_int.h"
#include "tac/ssd_tier.h"
#include "tac/tuple.h"
#include "base/util.h"


/* The crash path: with a journal that describes the tier files, every NVM
 * slot of a page some class held and every SSD page with a written buf is
 * taken away from the allocators before anything is served; the scan
 * (rs_crash_scan) gives back what holds no live tuple. */
bool rs_crash_prepare(void)
{
    if (tac.nvm != NULL) {
        struct nvm_info info;
        nvm_get_info(tac.nvm, &info);
        uint64_t npages = nvm_npages(tac.nvm);
        rs.nvm_map = malloc(npages);
        if (rs.nvm_map == NULL)
            return false;
        memcpy(rs.nvm_map, tac_journal_nvm_map(), npages);
        for (uint64_t p = 0; p < npages; p++) {
            unsigned cls = rs.nvm_map[p];
            size_t size = nvm_class_slot_size(tac.nvm, cls);
            if (size == 0) {
                rs.nvm_map[p] = 0;
                continue;
            }
            uint64_t base = info.data_offset + p * info.page_size;
            for (uint64_t i = 0; i < info.page_size / size; i++)
                (void)nvm_adopt(tac.nvm, base + i * size, cls);
        }
        if (!nvm_adopt_done(tac.nvm))
            fprintf(stderr, "restart: out of DRAM for the NVM free lists\n");
        rs.nvm_ok = true;
    }
    if (tac.ssd != NULL) {
        struct ssd_info info;
        ssd_get_info(tac.ssd, &info);
        size_t per = SSD_TABLE_HDR + info.bufs_per_page;
        size_t words = ssd_table_words(tac.ssd);
        rs.ssd_table = malloc(words * sizeof(uint32_t));
        uint32_t *used = calloc(info.bufs_per_page, sizeof(uint32_t));
        uint32_t *first = calloc(info.bufs_per_page, sizeof(uint32_t));
        if (rs.ssd_table == NULL || used == NULL || first == NULL) {
            free(used);
            free(first);
            return false;
        }
        memcpy(rs.ssd_table, tac_journal_ssd_table(), words * sizeof(uint32_t));
        for (unsigned p = 0; p < info.npages; p++) {
            uint32_t *t = rs.ssd_table + (size_t)p * per;
            bool any = false;
            for (unsigned i = 0; i < info.bufs_per_page; i++) {
                uint32_t w = t[SSD_TABLE_HDR + i];
                bool cont = w == SSD_TABLE_CONT && i > 0;
                used[i] = cont || w == SSD_TABLE_CONT ? 0 : w;
                first[i] = cont ? first[i - 1] : i;
                any |= used[i] != 0;
            }
            /* Live 1 pins the page until its scan is over. */
            struct ssd_page_state st = { p, (uint16_t)t[0], t[1], 1 };
            if (!any || t[0] == 0 || t[0] > UINT16_MAX ||
                !ssd_adopt_page(tac.ssd, &st, used, first))
                t[0] = 0;           /* not scanned */
        }
        free(used);
        free(first);
        ssd_adopt_done(tac.ssd);
        rs.ssd_ok = true;
    }
    item_cas_floor(tac_journal_cas_reserved());
    tac_tuple_seq_floor(tac_journal_seq_reserved());
    rs.crash = true;
    return true;
}

/* Hints that the tables a scanned key is looked up in are read soon. */
static void scan_prefetch(uint64_t kh, uint32_t hv)
{
    tac_journal_prefetch(kh);
    assoc_prefetch(hv);
    /* Read without the lock: a table being replaced costs a useless hint. */
    if (rs.seqs == NULL)
        return;
    struct util_u64map *t = &rs.seqs[hv & ITEM_LOCK_MASK];
    struct util_u64ent *e = __atomic_load_n(&t->e, __ATOMIC_RELAXED);
    uint32_t cap = __atomic_load_n(&t->cap, __ATOMIC_RELAXED);
    if (e != NULL && cap != 0)
        __builtin_prefetch(&e[(kh >> ITEM_LOCK_POWER) & (cap - 1)]);
}

/* A tuple found by the scan, checksum verified: linked as its key's item
 * unless the journal says it is dead, it expired, a newer copy is linked
 * already, or the key was written during recovery. */
static void scan_tuple(enum item_tier tier, uint64_t ref,
                       const struct tac_tuple_hdr *hp, const char *key,
                       uint64_t kh, uint32_t hv)
{
    struct tac_tuple_hdr h = *hp;
    size_t len = tac_tuple_size(h.nkey, h.nbytes);
    item *it = NULL;
    rel_time_t exptime;
    /* The journal may hold a shorter life for it than its header. */
    uint64_t unix_exp = h.exptime;
    if ((!rs_debug_scan_no_journal() && tac_journal_check_h(kh, h.seq, &unix_exp)) ||
        !rs_exptime_ahead((int64_t)unix_exp, &exptime))
        goto skip;
    rel_time_t now = mc_now();
    int64_t t = (int64_t)h.time - (int64_t)process_started;
    rel_time_t time = t < 1 ? 1 : t > (int64_t)now ? now : (rel_time_t)t;
    union meta_src m;
    memset(&m.it, 0, sizeof(item));
    m.it.nkey = h.nkey;
    m.it.nbytes = h.nbytes;
    m.it.flags = h.flags;
    m.it.exptime = exptime;
    /* A tuple staged straight into a lower tier was written before its
     * item was linked and given its CAS: it holds 0.  It gets a new one. */
    m.it.cas = h.cas != 0 ? h.cas : item_next_cas();
    m.it.access = (time & LLRU_TIME_MASK) << 8;
    m.it.time = time;
    it = rs_meta_for(&m, tier, ref, item_key_fp(key, h.nkey, hv), h.seq);
    if (it == NULL) {
        rs_count(&rs.dropped);             /* no DRAM for its meta tuple */
        goto release;
    }
    /* The meta tuple's release marks the tuple dead; count it live first. */
    if (tier == TIER_SSD)
        (void)ssd_adopt_tuple(tac.ssd, ref, len);
    item_lock(hv);
    uint64_t seen = rs_seq_seen(kh, hv);
    item *old = assoc_find(key, h.nkey, hv);
    /* Against the newest seq linked for the key, not against what is in
     * the index now: a newer copy linked earlier in the scan and since
     * evicted, dropped or unlinked as damaged leaves old NULL, and an older
     * copy found later must not take its place. */
    bool link = !do_item_recovery_written(key, h.nkey, hv) && seen != UINT64_MAX &&
                (h.seq > seen || (seen == 0 && old == NULL));
    if (link) {
        if (old != NULL)
            do_item_unlink(old, hv);    /* an older copy found earlier */
        it->access = m.it.access;
        if (!item_compact(it))
            it->time = time;
        do_item_link(it, hv, true);
        rs_seq_set(kh, hv, h.seq);
        rs_count(&rs.items);
        __atomic_add_fetch(&rs.bytes, h.nbytes, __ATOMIC_RELAXED);
    }
    item_unlock(hv);
    if (link && old != NULL) {
        __atomic_sub_fetch(&rs.items, 1, __ATOMIC_RELAXED);
        rs_count(&rs.stale);
    } else if (!link) {
        rs_count(&rs.stale);
    }
    item_release(it);               /* unlinked: frees its slot */
    return;
skip:
    rs_count(&rs.stale);
release:
    /* An SSD tuple not linked never counted as live: its page drops it
     * when the scan unpins it.  An NVM slot goes back to the free list. */
    if (tier == TIER_NVM) {
        tac_nvm_forget(ref);
        nvm_free(tac.nvm, ref);
    }
    (void)len;
}

/* A record of the dram_log, checked: linked as a DRAM item unless it is
 * dead, expired, older than the copy linked, or its key was written during
 * recovery. */
void rs_replay_record(const char *tuple, void *arg)
{
    (void)arg;
    struct tac_tuple_hdr h;
    memcpy(&h, tuple, sizeof(h));
    const char *key = tuple + sizeof(h);
    rel_time_t exptime;
    uint64_t unix_exp = h.exptime;      /* the journal may hold a shorter life */
    if (tac_journal_check_h(tac_key_hash64(key, h.nkey), h.seq, &unix_exp)) {
        rs_count(&rs.stale);
        return;
    }
    if (!rs_exptime_ahead((int64_t)unix_exp, &exptime)) {
        /* Expired, but newer than a copy linked for its key: that copy is
         * an older version, which the log does not invalidate when this
         * one replaced it (items.c, superseded_in_log). */
        uint32_t hv;
        uint64_t kh = rs_key_hashes(key, h.nkey, &hv);
        item_lock(hv);
        uint64_t seen = rs_seq_seen(kh, hv);
        if (!do_item_recovery_written(key, h.nkey, hv) && seen != UINT64_MAX &&
            h.seq > seen) {
            item *old = assoc_find(key, h.nkey, hv);
            if (old != NULL) {
                do_item_unlink(old, hv);
                __atomic_sub_fetch(&rs.items, 1, __ATOMIC_RELAXED);
                rs_count(&rs.stale);
            }
            rs_seq_set(kh, hv, h.seq);
        }
        item_unlock(hv);
        rs_count(&rs.stale);
        return;
    }
    rel_time_t now = mc_now();
    int64_t tt = (int64_t)h.time - (int64_t)process_started;
    rel_time_t t = tt < 1 ? 1 : tt > (int64_t)now ? now : (rel_time_t)tt;
    int part = (int)(__atomic_fetch_add(&rs.next_part, 1, __ATOMIC_RELAXED) %
                     (unsigned)tac.cfg.partitions);
    item *it = item_alloc(key, h.nkey, h.flags, exptime, h.nbytes, part);
    if (it == NULL) {
        rs_count(&rs.dropped);
        return;
    }
    memcpy(ITEM_data(it), key + h.nkey, h.nbytes);
    uint64_t kh = tac_key_hash64(key, h.nkey);
    uint32_t hv = item_hash(key, h.nkey);
    item_lock(hv);
    uint64_t seen = rs_seq_seen(kh, hv);
    item *old = assoc_find(key, h.nkey, hv);
    int res = 0;
    if (!do_item_recovery_written(key, h.nkey, hv) && seen != UINT64_MAX && h.seq > seen) {
        if (old != NULL) {
            do_item_unlink(old, hv);    /* an older copy found earlier */
            __atomic_sub_fetch(&rs.items, 1, __ATOMIC_RELAXED);
            rs_count(&rs.stale);
        }
        /* The older copy goes first, even if this one then finds no
         * room: the key is lost rather than served older than a write
         * that was acknowledged (issue 37 item 5).  With DRAM full the
         * record is staged into a lower tier: its tuple keeps the
         * record's seq, so that a newer record of the key, later in the
         * log, outranks it after the next crash as it does here.  With a
         * new seq it would come back over them. */
        tac_tuple_seq_as(h.seq);
        res = rs_debug_replay_no_room(key, h.nkey)
              ? -1 : rs_link_back(it, key, h.nkey, hv, part,
                               h.cas != 0 ? h.cas : item_next_cas(),
                               (t & LLRU_TIME_MASK) << 8, t, 0);
        tac_tuple_seq_as(0);
        /* A later record of the key may replace this version before the
         * replay ends: moved down meanwhile, it would get a tuple with a
         * new seq, above that record's, and come back over it after the
         * next crash.  So no replayed item moves down until the replay
         * is over (tac_demote). */
        item *l = res > 0 ? assoc_find(key, h.nkey, hv) : NULL;
        if (l != NULL && !(l->it_flags & ITEM_META))
            l->it_flags |= ITEM_REPLAYED;
        if (res != 0)
            rs_seq_set(kh, hv, h.seq);     /* linked, or lost: nothing older after it */
    }
    item_unlock(hv);
    rs_count(res < 0 ? &rs.dropped : res == 0 ? &rs.stale : &rs.items);
    if (res > 0)
        __atomic_add_fetch(&rs.bytes, h.nbytes, __ATOMIC_RELAXED);
    item_release(it);
}

/* The valid tuples of one SSD buf, each with its hashes, gathered before
 * any is linked so that the lookups of the next few overlap. */
struct scan_batch {
    size_t n, cap;
    struct scan_ent { uint64_t ref, kh; const char *tuple; uint32_t hv; } *e;
};

#define SCAN_AHEAD 8

static void scan_ssd_tuple(uint64_t tref, const char *tuple, void *arg)
{
    struct scan_batch *b = arg;
    if (b->n == b->cap) {
        size_t cap = b->cap ? b->cap * 2 : 64;
        struct scan_ent *e = realloc(b->e, cap * sizeof(*e));
        if (e == NULL) {
            struct tac_tuple_hdr h;
            memcpy(&h, tuple, sizeof(h));
            uint32_t hv;
            uint64_t kh = rs_key_hashes(tuple + sizeof(h), h.nkey, &hv);
            scan_tuple(TIER_SSD, tref, &h, tuple + sizeof(h), kh, hv);
            return;
        }
        b->e = e;
        b->cap = cap;
    }
    struct tac_tuple_hdr h;
    memcpy(&h, tuple, sizeof(h));
    struct scan_ent *e = &b->e[b->n++];
    e->ref = tref;
    e->tuple = tuple;
    e->kh = rs_key_hashes(tuple + sizeof(h), h.nkey, &e->hv);
}

static void scan_batch_run(struct scan_batch *b)
{
    for (size_t i = 0; i < b->n && i < SCAN_AHEAD; i++)
        scan_prefetch(b->e[i].kh, b->e[i].hv);
    for (size_t i = 0; i < b->n; i++) {
        if (i + SCAN_AHEAD < b->n)
            scan_prefetch(b->e[i + SCAN_AHEAD].kh, b->e[i + SCAN_AHEAD].hv);
        struct tac_tuple_hdr h;
        memcpy(&h, b->e[i].tuple, sizeof(h));
        scan_tuple(TIER_SSD, b->e[i].ref, &h, b->e[i].tuple + sizeof(h),
                   b->e[i].kh, b->e[i].hv);
    }
    b->n = 0;
}

/* Checks every slot of NVM page p, which the journal says class cls cut. */
static void scan_nvm_page(uint64_t p, const struct nvm_info *info)
{
    unsigned cls = rs.nvm_map[p];
    size_t size = nvm_class_slot_size(tac.nvm, cls);
    if (size == 0)
        return;
    uint64_t base = info->data_offset + p * info->page_size;
    for (uint64_t i = 0; i < info->page_size / size; i++) {
        uint64_t ref = base + i * size;
        const char *slot = nvm_ptr(tac.nvm, ref);
        struct tac_tuple_hdr h;
        memcpy(&h, slot, sizeof(h));
        const char *key;
        if (tac_tuple_sane(&h, size) &&
            tac_tuple_open_scratch(&h, slot + sizeof(h), &key) == TUPLE_OK) {
            uint32_t hv;
            uint64_t kh = rs_key_hashes(key, h.nkey, &hv);
            scan_tuple(TIER_NVM, ref, &h, key, kh, hv);
            continue;
        }
        /* A freed slot reads as version 0; anything else that was a tuple
         * once is damaged. */
        if (h.version == (tac_tuple_sealed() ? TAC_TUPLE_VERSION_SEALED
                                             : TAC_TUPLE_VERSION))
            rs_count(&rs.dropped);
        nvm_free(tac.nvm, ref);
    }
    CRASH_POINT(restart_scan_nvm_page);
}

/* Reads and checks every written buf of SSD page p, then unpins it. */
static void scan_ssd_page(unsigned p, const struct ssd_info *info, struct tac_iobuf *io,
                          struct scan_batch *batch)
{
    size_t per = SSD_TABLE_HDR + info->bufs_per_page;
    const uint32_t *t = rs.ssd_table + (size_t)p * per;
    uint16_t v = (uint16_t)t[0];
    if (t[0] == 0)
        return;
    rs_debug_scan_delay();
    for (unsigned i = 0; i < info->bufs_per_page; i++) {
        uint32_t w = t[SSD_TABLE_HDR + i];
        if (w == 0 || w == SSD_TABLE_CONT)
            continue;
        uint64_t damaged = 0;
        uint64_t ref = ssd_ref_pack(v, (uint16_t)p, (uint32_t)((size_t)i * info->buf_size));
        if (!tac_ssd_scan_buf(ref, io, scan_ssd_tuple, batch, &damaged))
            damaged++;
        scan_batch_run(batch);
        CRASH_POINT(restart_scan_ssd_buf);
        __atomic_add_fetch(&rs.dropped, damaged, __ATOMIC_RELAXED);
        __atomic_add_fetch(&rs.ssd_bytes, w, __ATOMIC_RELAXED);
    }
    /* The scan is over: the page keeps what was linked from it. */
    ssd_page_unpin(tac.ssd, p, v, 1);
}

/* A scan thread: takes NVM pages, then SSD pages, one at a time, until
 * none is left. */
static void *scan_worker(void *arg)
{
    (void)arg;
    items_recovery_self();
    struct nvm_info ni = { 0 };
    struct ssd_info si = { 0 };
    uint64_t nvm_pages = 0, ssd_pages = 0;
    if (tac.nvm != NULL && rs.nvm_map != NULL) {
        nvm_get_info(tac.nvm, &ni);
        nvm_pages = nvm_npages(tac.nvm);
    }
    if (tac.ssd != NULL && rs.ssd_table != NULL) {
        ssd_get_info(tac.ssd, &si);
        ssd_pages = si.npages;
    }
    struct tac_iobuf io = { NULL, 0 };
    struct scan_batch batch = { 0, 0, NULL };
    for (;;) {
        uint64_t i = __atomic_fetch_add(&rs.scan_next, 1, __ATOMIC_RELAXED);
        if (i < nvm_pages) {
            scan_nvm_page(i, &ni);
            continue;
        }
        i -= nvm_pages;
        if (i >= ssd_pages)
            break;
        if (io.mem == NULL && (io.mem = malloc(si.buf_size)) == NULL)
            break;
        io.cap = si.buf_size;
        uint64_t t0 = util_now_ns();
        uint64_t was = __atomic_load_n(&rs.ssd_t0, __ATOMIC_RELAXED);
        while (t0 < was && !__atomic_compare_exchange_n(&rs.ssd_t0, &was, t0, false,
                                                        __ATOMIC_RELAXED, __ATOMIC_RELAXED))
            ;
        scan_ssd_page((unsigned)i, &si, &io, &batch);
        (void)util_atomic_max(&rs.ssd_t1, util_now_ns());
    }
    free(io.mem);
    free(batch.e);
    return NULL;
}

/* The scan after a crash: NVM pages first, then SSD pages, taken from a
 * shared counter by one thread per online CPU, at most SCAN_THREADS, that
 * share the table of sequences. */
#define SCAN_THREADS 4

/* Sizes the index and the table of sequences for the items the last run
 * held, so that neither grows while the scan links.  The hint is bounded
 * by what -m can index, at 64 bytes for the smallest meta tuple. */
void rs_scan_reserve(void)
{
    uint64_t n = tac_journal_items_hint();
    uint64_t most = tac.cfg.maxbytes / 64;
    if (n > most)
        n = most;
    if (!rs_seqs_init(n))
        fprintf(stderr, "restart: no memory for the scan's table of sequences; "
                "nothing will be linked\n");
    if (n == 0)
        return;
    assoc_reserve(n);
}

void rs_crash_scan(void)
{
    long cpus = sysconf(_SC_NPROCESSORS_ONLN);
    int n = cpus < 1 ? 1 : cpus > SCAN_THREADS ? SCAN_THREADS : (int)cpus;
    pthread_t th[SCAN_THREADS];
    int started = 0;
    for (int i = 1; i < n; i++)
        if (pthread_create(&th[started], NULL, scan_worker, NULL) == 0)
            started++;
    scan_worker(NULL);
    for (int i = 0; i < started; i++)
        pthread_join(th[i], NULL);
    free(rs.nvm_map);
    rs.nvm_map = NULL;
    free(rs.ssd_table);
    rs.ssd_table = NULL;
    uint64_t t0 = rs.ssd_t0, t1 = rs.ssd_t1;
    if (t1 > t0 && rs.ssd_bytes > 0)
        fprintf(stderr, "restart: SSD scan: %.1f MB of bufs in %.2f s (%.0f MB/s), "
                "%d threads\n", (double)rs.ssd_bytes / 1e6, (double)(t1 - t0) / 1e9,
                (double)rs.ssd_bytes / 1e6 / ((double)(t1 - t0) / 1e9), started + 1);
}

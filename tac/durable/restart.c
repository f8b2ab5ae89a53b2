/*
 * tac/durable/restart.c - graceful restart: what a stop saves and the next start
 * brings back.  This file is the start: which state is used, and the
 * thread that brings the items back; the stop is restart_save.c, the
 * crash scan crash_scan.c, what they share restart_common.c.
 *
 * A graceful stop (memcached.c: SIGTERM, SIGINT, SIGUSR1, `shutdown`)
 * runs with every worker and background thread stopped.  It writes every
 * open SSD buf, then walks the index once and writes the state file:
 *
 *   [header, RS_HDR_SIZE bytes]
 *   [records: chunks of {len, count, crc} + records, then a chunk of len 0]
 *   [NVM section: one uint64 per NVM item: slot reference | slot class]
 *   [SSD section: per page in use: struct rs_page, then buf_used and
 *    buf_first, bufs_per_page uint32 each]
 *
 * A record is struct rs_rec, the key, and for a DRAM item its value: DRAM
 * items are saved whole, so they come back to DRAM, hot as they left.
 * NVM and SSD items are saved as references: their tuples stay where they
 * are.  Exptime is saved as unix time, the last access as seconds before
 * the stop, so TTLs run on through the downtime and temperatures do not.
 *
 * The tiers are then closed clean, and only then is the header written
 * (tac_restart_commit) with what ties the file to them: the NVM region's
 * open count and the SSD file's header generation.  The file is written
 * as FILE.tmp, synced, and renamed over FILE.
 *
 * At the next start (tac_restart_prepare), the state is used only if its
 * header's checksum holds; an NVM or SSD part only if that tier's file was
 * closed clean by exactly that stop (same open count or generation, same
 * sizes).  Otherwise that tier starts empty and its records are dropped
 * (counted): a tier file touched since, by a crash or another run, may
 * hold anything.  The file is unlinked as soon as the server serves, so a
 * later graceful start never reads it again (with -o dram_log it is kept
 * as a leftover until the restore is over: "Leftover state" below).  The sections are
 * applied before anything can allocate (nvm_adopt, ssd_adopt_page); the
 * records are read by a background thread (tac_restart_run) while the
 * server serves.  Each is linked only if its key is absent and no write
 * or delete touched its hash since the start (items_recovery_begin), so
 * every write made during recovery beats the saved copy.
 */
#include "config.h"

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
#include "base/media_hdr.h"
#include "base/util.h"

static void leftover_prepare(const char *path);
static void leftover_remove(const char *path);


/* ---- Stats -------------------------------------------------------------- */

static const char *stat_state(void)
{
    static const char *const names[] = { "off", "none", "running", "done",
                                         "failed" };
    return names[__atomic_load_n(&rs.state, __ATOMIC_RELAXED)];
}

static uint64_t stat_items(void) { return __atomic_load_n(&rs.items, __ATOMIC_RELAXED); }
static uint64_t stat_bytes(void) { return __atomic_load_n(&rs.bytes, __ATOMIC_RELAXED); }
static uint64_t stat_dropped(void) { return __atomic_load_n(&rs.dropped, __ATOMIC_RELAXED); }
static uint64_t stat_stale(void) { return __atomic_load_n(&rs.stale, __ATOMIC_RELAXED); }
static uint64_t stat_refused(void) { return __atomic_load_n(&rs.refused, __ATOMIC_RELAXED); }

static uint64_t stat_seconds(void)
{
    uint64_t took = __atomic_load_n(&rs.took_ns, __ATOMIC_RELAXED);
    uint64_t start = __atomic_load_n(&rs.started_ns, __ATOMIC_RELAXED);
    if (took == 0 && start != 0)
        took = util_now_ns() - start;
    return took / 1000000000u;
}

static void set_state(enum rs_state st)
{
    __atomic_store_n(&rs.state, (int)st, __ATOMIC_RELAXED);
}

static void stats_register(void)
{
    stats_provide_text("recovery_state", stat_state);
    stats_provide("recovery_items", stat_items);
    stats_provide("recovery_bytes", stat_bytes);
    stats_provide("recovery_dropped", stat_dropped);
    stats_provide("recovery_stale", stat_stale);
    stats_provide("recovery_refused", stat_refused);
    stats_provide("recovery_seconds", stat_seconds);
}

/* Reads a section of n bytes at off whose CRC32C must be crc; NULL when
 * it cannot be read, does not match, or DRAM is short. */
static void *read_section(uint64_t off, size_t n, uint32_t crc)
{
    void *buf = malloc(n > 0 ? n : 1);
    if (buf != NULL && (!rs_read_at(buf, n, off) || util_crc32c(0, buf, n) != crc)) {
        free(buf);
        buf = NULL;
    }
    return buf;
}

static bool load_nvm_section(void)
{
    size_t n = rs.hdr.nvm_count;
    if (n > SIZE_MAX / sizeof(uint64_t))
        return false;
    uint64_t *refs = read_section(rs.hdr.nvm_off, n * sizeof(uint64_t), rs.hdr.nvm_crc);
    if (refs == NULL)
        return false;
    bool ok = true;
    for (size_t i = 0; i < n && ok; i++)
        ok = nvm_adopt(tac.nvm, refs[i] & ~(uint64_t)0xff, (unsigned)(refs[i] & 0xff));
    free(refs);
    /* Adopted slots stay taken even when a later one failed: nothing
     * references them, so they are lost until the next restart, but no
     * slot is ever handed out twice. */
    if (!nvm_adopt_done(tac.nvm))
        fprintf(stderr, "restart: out of DRAM for the NVM free lists\n");
    return ok;
}

static bool load_ssd_section(void)
{
    struct ssd_info info;
    ssd_get_info(tac.ssd, &info);
    size_t per = sizeof(struct rs_page) + 2 * (size_t)info.bufs_per_page * sizeof(uint32_t);
    if (rs.hdr.ssd_count > info.npages)
        return false;
    char *sec = read_section(rs.hdr.ssd_off, per * rs.hdr.ssd_count, rs.hdr.ssd_crc);
    if (sec == NULL)
        return false;
    bool ok = true;
    for (uint64_t i = 0; i < rs.hdr.ssd_count && ok; i++) {
        const char *p = sec + i * per;
        struct rs_page rp;
        memcpy(&rp, p, sizeof(rp));
        const uint32_t *used = (const uint32_t *)(p + sizeof(rp));
        struct ssd_page_state st = { rp.page, rp.version, rp.seq, rp.live };
        ok = ssd_adopt_page(tac.ssd, &st, used, used + info.bufs_per_page);
    }
    free(sec);
    ssd_adopt_done(tac.ssd);
    return ok;
}

static bool header_usable(const struct rs_header *h)
{
    return media_classify(h, RS_MAGIC, RS_VERSION, sizeof(*h)) == MEDIA_OURS &&
           h->checksum == rs_header_crc(h) &&
           memcmp(h->key_check, tac_crypt_key_check(), sizeof(h->key_check)) == 0;
}

/* Whether the NVM and SSD parts of the state fit the tier files as they
 * were found: closed clean by that very stop, same sizes. */
static void match_tiers(void)
{
    const struct rs_header *h = &rs.hdr;
    if (h->nvm_open_count != 0 && tac.nvm != NULL) {
        struct nvm_info info;
        nvm_get_info(tac.nvm, &info);
        rs.nvm_ok = info.prev_state == NVM_PREV_CLEAN &&
                    info.prev_open_count == h->nvm_open_count &&
                    info.capacity == h->nvm_capacity;
    }
    if (h->ssd_generation != 0 && tac.ssd != NULL) {
        struct ssd_info info;
        ssd_get_info(tac.ssd, &info);
        rs.ssd_ok = info.prev_state == SSD_PREV_CLEAN &&
                    info.prev_generation == h->ssd_generation &&
                    info.size == h->ssd_size && info.page_size == h->ssd_page_size &&
                    info.buf_size == h->ssd_buf_size;
    }
    if (h->items[TIER_NVM] > 0 && !rs.nvm_ok)
        fprintf(stderr, "restart: the NVM tier file is not the one the stop "
                "closed (or there is no NVM tier now); its %llu items are not "
                "brought back\n", (unsigned long long)h->items[TIER_NVM]);
    if (h->items[TIER_SSD] > 0 && !rs.ssd_ok)
        fprintf(stderr, "restart: the SSD tier file is not the one the stop "
                "closed (or there is no SSD tier now); its %llu items are not "
                "brought back\n", (unsigned long long)h->items[TIER_SSD]);
}

/* A tier file that holds data of an earlier run, with no state to trust
 * it by: what it holds is not brought back. */
static void note_unrecovered_tiers(const char *why)
{
    bool dirty = false, clean = false;
    if (tac.nvm != NULL) {
        struct nvm_info info;
        nvm_get_info(tac.nvm, &info);
        dirty |= info.prev_state == NVM_PREV_DIRTY;
        clean |= info.prev_state == NVM_PREV_CLEAN;
    }
    if (tac.ssd != NULL) {
        struct ssd_info info;
        ssd_get_info(tac.ssd, &info);
        dirty |= info.prev_state == SSD_PREV_DIRTY;
        clean |= info.prev_state == SSD_PREV_CLEAN;
    }
    if (dirty || clean)
        fprintf(stderr, "restart: the tier files hold data of an earlier run "
                "that %s, but %s: starting empty\n",
                dirty ? "did not stop gracefully" : "stopped", why);
}

/* The graceful path: true when a restart state is read (RS_RUNNING). */
static bool graceful_prepare(char *path)
{
    rs.fd = util_open_private(path, O_RDONLY, NULL);
    if (rs.fd < 0) {
        if (errno != ENOENT)
            fprintf(stderr, "restart: cannot read %s: %s\n", path, strerror(errno));
        return false;
    }
    if (!rs_read_at(&rs.hdr, sizeof(rs.hdr), 0) || !header_usable(&rs.hdr)) {
        fprintf(stderr, "restart: %s is not a complete restart state of this "
                "version; not used\n", path);
        close(rs.fd);
        rs.fd = -1;
        unlink(path);
        return false;
    }
    rs.path = path;
    /* The index starts as large as it had grown (as memcached's restart
     * does), so bringing the items back does not resize it again. */
    if (rs.hdr.hashpower > assoc_hashpower())
        assoc_init((int)rs.hdr.hashpower);
    match_tiers();
    if (rs.nvm_ok && !load_nvm_section()) {
        fprintf(stderr, "restart: the NVM section of %s is damaged; NVM items "
                "are not brought back\n", path);
        rs.nvm_ok = false;
    }
    if (rs.ssd_ok && !load_ssd_section()) {
        fprintf(stderr, "restart: the SSD section of %s is damaged; SSD items "
                "are not brought back\n", path);
        rs.ssd_ok = false;
    }
    item_cas_floor(rs.hdr.last_cas);
    /* last_seq + 1 is left unused: a leftover of this state (see
     * "Leftover state") counts its DRAM records as written at it. */
    tac_tuple_seq_floor(rs.hdr.last_seq + 1);
    return true;
}

/* Whether a tier file holds data of an earlier run. */
static bool tiers_hold_data(void)
{
    bool held = false;
    if (tac.nvm != NULL) {
        struct nvm_info info;
        nvm_get_info(tac.nvm, &info);
        held |= info.prev_state == NVM_PREV_DIRTY || info.prev_state == NVM_PREV_CLEAN;
    }
    if (tac.ssd != NULL) {
        struct ssd_info info;
        ssd_get_info(tac.ssd, &info);
        held |= info.prev_state == SSD_PREV_DIRTY || info.prev_state == SSD_PREV_CLEAN;
    }
    return held;
}

void tac_restart_prepare(void)
{
    stats_register();
    rs_debug_restore_init();
    char *path = rs_state_path();
    (void)tac_journal_open(path);
    if (!tac.cfg.recovery) {
        set_state(RS_OFF);
        leftover_remove(path);
        if (path != NULL)
            unlink(path);       /* nothing will match it after this run */
        free(path);
        tac_journal_reset();
        tac_dramlog_start(false);
        tac_journal_attach();
        return;
    }
    set_state(RS_NONE);
    const char *why = "there is nowhere to keep a restart state (give -e FILE)";
    if (path != NULL && graceful_prepare(path)) {
        leftover_remove(path);
        /* The journal keeps what a later crash needs only if it went with
         * these files; otherwise nothing written before now is trusted
         * after a crash. */
        if (!tac_journal_matched()) {
            tac_journal_reset();
            tac_journal_set_floor(rs.hdr.last_seq);
        }
    } else if (tiers_hold_data() && tac_journal_matched() && rs_crash_prepare()) {
        fprintf(stderr, "restart: the tier files were not closed by a graceful "
                "stop; scanning them\n");
        leftover_prepare(path);
    } else {
        if (path != NULL)
            why = tac_journal_matched() || !tiers_hold_data()
                  ? "no restart state" : "no journal that goes with them";
        note_unrecovered_tiers(why);
        leftover_remove(path);
        tac_journal_reset();
        tac_dramlog_start(false);
        tac_journal_attach();
        if (rs.path == NULL)
            free(path);
        return;
    }
    if (rs.path == NULL)
        rs.path = path;
    tac_dramlog_start(rs.crash);
    tac_journal_attach();
    items_recovery_begin();
    rs.pending = true;
    __atomic_store_n(&rs.started_ns, util_now_ns(), __ATOMIC_RELAXED);
    set_state(RS_RUNNING);
}

/* Frees the lower-tier space of a record that is not brought back. */
static void record_release(const struct rs_rec *r)
{
    if (r->tier == TIER_NVM && rs.nvm_ok) {
        tac_nvm_forget(r->ref & ~(uint64_t)0xff);
        nvm_free(tac.nvm, r->ref & ~(uint64_t)0xff);
    }
    else if (r->tier == TIER_SSD && rs.ssd_ok)
        ssd_mark_dead(tac.ssd, r->ref, tac_tuple_size(r->nkey, r->nbytes));
}

/* Brings one record back: linked if its key is still untouched. */
static void restore_record(const struct rs_rec *r, const char *key, const char *value)
{
    if ((r->tier == TIER_NVM && !rs.nvm_ok) || (r->tier == TIER_SSD && !rs.ssd_ok)) {
        rs_count(&rs.dropped);
        return;
    }
    if (r->tier == TIER_DRAM && !rs.lower_done) {
        /* The lower tiers' records come first (restart_save.c): none
         * that follows names an SSD page, so defrag may move tuples again
         * and win back the room dead ones hold.  DRAM records that find no
         * DRAM go down to SSD, which would otherwise stay full of dead
         * tuples until the restore ends: a restore waiting on itself. */
        rs.lower_done = true;
        if (tac.ssd != NULL)
            ssd_unpin_all(tac.ssd);
    }
    rel_time_t now = mc_now();
    rel_time_t exptime;
    if (!rs_exptime_ahead(r->exptime, &exptime)) {
        rs_count(&rs.stale);               /* expired while the server was down */
        record_release(r);
        return;
    }
    rel_time_t t = r->idle < now ? now - (rel_time_t)r->idle : 1;
    uint32_t access = ((t & LLRU_TIME_MASK) << 8) | (r->read_count & LLRU_COUNT_MASK);
    int part = (int)(rs.next_part % (unsigned)tac.cfg.partitions);
    /* A lower tier's record holds the key's fingerprint (rs_key_len). */
    uint64_t fp = 0;
    if (r->tier != TIER_DRAM)
        memcpy(&fp, key, sizeof(fp));
    uint32_t hv = r->tier == TIER_DRAM ? item_hash(key, r->nkey) : (uint32_t)fp;

    item *it;
    if (r->tier == TIER_DRAM) {
        rs.next_part++;
        it = item_alloc(key, r->nkey, r->flags, exptime, r->nbytes, part);
        if (it != NULL && (it->it_flags & ITEM_STAGING) && (r->it_flags & ITEM_STALE)) {
            /* No DRAM for a stale-marked item: staged, it would become a
             * tuple without the mark, served fresh (and fresh after a
             * crash).  It is dropped: a miss, as after a crash. */
            item_release(it);
            rs_count(&rs.stale);
            return;
        }
        if (it != NULL)
            memcpy(ITEM_data(it), value, r->nbytes);
    } else {
        union meta_src m;
        memset(&m.it, 0, sizeof(item));
        m.it.nkey = r->nkey;
        m.it.nbytes = r->nbytes;
        m.it.flags = r->flags;
        m.it.exptime = exptime;
        m.it.cas = r->cas;
        m.it.access = access;
        m.it.time = t;
        m.it.it_flags = r->it_flags & RS_KEEP_FLAGS;
        it = r->tier == TIER_NVM
             ? rs_meta_for(&m, TIER_NVM, r->ref & ~(uint64_t)0xff, fp, r->seq)
             : rs_meta_for(&m, TIER_SSD, r->ref, fp, r->seq);
    }
    if (it == NULL) {
        rs_count(&rs.dropped);             /* no DRAM for it */
        record_release(r);
        return;
    }
    item_lock(hv);
    int res = 0;
    bool untouched = r->tier == TIER_DRAM
        ? !do_item_recovery_written(key, r->nkey, hv) && assoc_find(key, r->nkey, hv) == NULL
        : !do_item_recovery_written_fp(fp) && assoc_find_fp(fp, r->nkey) == NULL;
    if (untouched)
        res = rs_link_back(it, key, r->nkey, hv, part, r->cas, access, t,
                        r->it_flags & RS_KEEP_FLAGS);
    bool linked = res > 0;
    rs_count(res < 0 ? &rs.dropped : res == 0 ? &rs.stale : &rs.items);
    item_unlock(hv);
    if (linked)
        __atomic_add_fetch(&rs.bytes, r->nbytes, __ATOMIC_RELAXED);
    /* An unlinked meta tuple's last release frees its slot (the tier
     * operations' release). */
    item_release(it);
}

/*
 * A record whose checksum (or tag) holds is still checked before it is
 * linked: a file edited and summed again, or written by a faulty build,
 * must not put a value without its "\r\n" into a reply, or a length past
 * -I, a flag bit the server never saves or a time before the epoch into
 * an item.  False: drop it (counted in recovery_refused).  Key bytes are
 * not limited: the binary protocol stores any.
 */
static bool record_sane(const struct rs_rec *r, const char *value)
{
    if (r->nbytes > (uint64_t)tac.cfg.item_size_max + 2 ||
        (r->it_flags & ~RS_KEEP_FLAGS) != 0 || r->exptime < 0 ||
        r->read_count > LLRU_COUNT_MASK)
        return false;
    if (r->tier == TIER_DRAM)
        return value[r->nbytes - 2] == '\r' && value[r->nbytes - 1] == '\n';
    /* A lower tier's record names a tuple: its slot or page and its seq
     * are checked when the tuple is adopted and read (tac_tuple_sane, the
     * tuple's own checksum or tag). */
    return r->ref != 0;
}

/* Walks one chunk's records; false when they do not parse. */
typedef void (*rs_rec_fn)(const struct rs_rec *r, const char *key, const char *value);

static bool restore_chunk(const char *p, size_t len, uint32_t n, rs_rec_fn fn)
{
    const char *end = p + len;
    for (uint32_t i = 0; i < n; i++) {
        struct rs_rec r;
        if ((size_t)(end - p) < sizeof(r))
            return false;
        memcpy(&r, p, sizeof(r));
        size_t vlen = r.tier == TIER_DRAM ? r.nbytes : 0;
        if (r.tier >= TIER_COUNT || r.nkey == 0 || r.nkey > KEY_MAX_LENGTH ||
            r.nbytes < 2 || (size_t)(end - p) - sizeof(r) < rs_key_len(&r) + vlen)
            return false;
        const char *key = p + sizeof(r);
        if (record_sane(&r, key + rs_key_len(&r)))
            fn(&r, key, key + rs_key_len(&r));
        else
            rs_count(&rs.refused);
        p = key + rs_key_len(&r) + vlen;
    }
    return p == end;
}

/* ---- Leftover state ------------------------------------------------------
 * A graceful start reads its DRAM items from the state file while the
 * server already serves, so a kill in that window would lose the ones not
 * linked yet: they are nowhere else (a restored item is logged only once
 * linked).  With -o dram_log the state file is therefore kept, renamed
 * FILE.restoring, until the restore is over.  A crash start finds it and
 * links its DRAM records first, as versions written just above the
 * state's last seq (a seq the restoring start left unused): every copy
 * and log record written since (all above that) wins
 * over them, and every delete or overwrite since left a journal record
 * (with dram_log each replaced version does) that marks them dead.  The
 * journal frees no record while a leftover is kept (tac_journal_hold), so
 * that promise lasts; a record lost to an overflow raises the floor, which
 * marks them dead too.  Only a start that replays the log may use it: the
 * newer versions of those keys may lie only there.  Any other start
 * removes it. */

static char *leftover_path(const char *path)
{
    size_t n = strlen(path) + sizeof(".restoring");
    char *p = malloc(n);
    if (p != NULL)
        snprintf(p, n, "%s.restoring", path);
    return p;
}

/* Links one DRAM record of the leftover state, unless its key was written
 * since or a newer copy is linked. */
static void leftover_record(const struct rs_rec *r, const char *key, const char *value)
{
    if (r->tier != TIER_DRAM)
        return;                         /* the scan finds the tier copies */
    rel_time_t exptime;
    uint64_t seq = rs.hdr.last_seq + 1;     /* see graceful_prepare */
    uint32_t hv;
    uint64_t kh = rs_key_hashes(key, r->nkey, &hv);
    if (!rs_exptime_ahead(r->exptime, &exptime) || tac_journal_dead_h(kh, seq)) {
        rs_count(&rs.stale);
        return;
    }
    rel_time_t now = mc_now();
    rel_time_t t = r->idle < now ? now - (rel_time_t)r->idle : 1;
    uint32_t access = ((t & LLRU_TIME_MASK) << 8) | (r->read_count & LLRU_COUNT_MASK);
    int part = (int)(__atomic_fetch_add(&rs.next_part, 1, __ATOMIC_RELAXED) %
                     (unsigned)tac.cfg.partitions);
    item *it = item_alloc(key, r->nkey, r->flags, exptime, r->nbytes, part);
    if (it == NULL) {
        rs_count(&rs.dropped);
        return;
    }
    memcpy(ITEM_data(it), value, r->nbytes);
    item_lock(hv);
    uint64_t seen = rs_seq_seen(kh, hv);
    int res = 0;
    if (!do_item_recovery_written(key, r->nkey, hv) && seen != UINT64_MAX && seq > seen &&
        assoc_find(key, r->nkey, hv) == NULL) {
        res = rs_link_back(it, key, r->nkey, hv, part, r->cas, access, t,
                        r->it_flags & RS_KEEP_FLAGS);
        if (res > 0)
            rs_seq_set(kh, hv, seq);
    }
    item_unlock(hv);
    rs_count(res < 0 ? &rs.dropped : res == 0 ? &rs.stale : &rs.items);
    if (res > 0)
        __atomic_add_fetch(&rs.bytes, r->nbytes, __ATOMIC_RELAXED);
    item_release(it);
}

/* A crash start: opens the leftover state of an interrupted restore, if
 * this start may use it (see above); otherwise removes it. */
static void leftover_prepare(const char *path)
{
    char *left = path != NULL ? leftover_path(path) : NULL;
    if (left == NULL)
        return;
    int fd = -1;
    if (tac_dramlog_on() && tac_dramlog_replayable())
        fd = util_open_private(left, O_RDONLY, NULL);
    if (fd >= 0) {
        rs.fd = fd;
        if (rs_read_at(&rs.hdr, sizeof(rs.hdr), 0) && header_usable(&rs.hdr)) {
            rs.left = left;
            tac_journal_hold(true);
            fprintf(stderr, "restart: a restore was interrupted; its DRAM items "
                    "come back from %s\n", left);
            return;
        }
        close(fd);
        rs.fd = -1;
        memset(&rs.hdr, 0, sizeof(rs.hdr));
    }
    unlink(left);
    free(left);
}

/* Any other start: a leftover state is of no use to it. */
static void leftover_remove(const char *path)
{
    char *left = path != NULL ? leftover_path(path) : NULL;
    if (left != NULL)
        unlink(left);
    free(left);
}

/* The restore that used the leftover state is over: it is not needed. */
static void leftover_done(void)
{
    if (rs.left == NULL)
        return;
    unlink(rs.left);
    free(rs.left);
    rs.left = NULL;
    tac_journal_hold(false);
}

/* Reads the records of the open state file (rs.fd, rs.hdr), chunk by
 * chunk, each checked, and hands each sane one to fn.  False when a chunk
 * is damaged (its records are counted dropped) or cannot be read. */
static bool read_records(rs_rec_fn fn)
{
    uint64_t off = rs.hdr.rec_off;
    size_t cap = RS_CHUNK;
    char *buf = malloc(cap);
    bool ok = buf != NULL;
    while (ok) {
        struct rs_chunk c;
        if (!rs_read_at(&c, sizeof(c), off)) {
            ok = false;
            break;
        }
        off += sizeof(c);
        if (c.len == 0)
            break;
        if ((size_t)c.len + TAC_SEAL_BYTES > cap) {
            char *n = realloc(buf, (size_t)c.len + TAC_SEAL_BYTES);
            if (n == NULL) {
                ok = false;
                break;
            }
            buf = n;
            cap = (size_t)c.len + TAC_SEAL_BYTES;
        }
        /* Sealed, the records are followed by their nonce and tag. */
        size_t stored = c.len + (tac_crypt_on() ? TAC_SEAL_BYTES : 0);
        struct iovec clear = { buf, c.len };
        if (!rs_read_at(buf, stored, off) || util_crc32c(0, buf, stored) != c.crc ||
            (tac_crypt_on() && !tac_crypt_open(&c, RS_CHUNK_AAD, buf, c.len, &clear, 1)) ||
            !restore_chunk(buf, c.len, c.count, fn)) {
            __atomic_add_fetch(&rs.dropped, c.count, __ATOMIC_RELAXED);
            ok = false;
            break;
        }
        CRASH_POINT(restart_restore_chunk);
        off += stored;
        rs_debug_restore_delay();
    }
    free(buf);
    return ok;
}

static void *recover_main(void *arg)
{
    (void)arg;
    items_recovery_self();
    if (rs.crash) {
        /* The DRAM items of an interrupted restore first (the oldest
         * versions of all); then the tiers, into a DRAM that their meta
         * tuples need; then the DRAM items of the log, which find room as
         * stores do. */
        rs_scan_reserve();
        if (rs.left != NULL) {
            (void)read_records(leftover_record);
            close(rs.fd);
            rs.fd = -1;
        }
        rs_crash_scan();
        if (tac.ssd != NULL)
            ssd_unpin_all(tac.ssd);     /* pages a failed scan left */
        CRASH_POINT(restart_scan_done);
        tac_dramlog_replay(rs_replay_record, NULL);
        rs_seqs_free();
        items_recovery_end();
        leftover_done();
        __atomic_store_n(&rs.took_ns, util_now_ns() - rs.started_ns + 1, __ATOMIC_RELAXED);
        set_state(RS_DONE);
        fprintf(stderr, "restart: scan done: %llu items (%llu value bytes) back "
                "in %.2f s; %llu damaged tuples dropped, %llu older or "
                "invalidated copies skipped\n",
                (unsigned long long)stat_items(), (unsigned long long)stat_bytes(),
                (double)rs.took_ns / 1e9, (unsigned long long)stat_dropped(),
                (unsigned long long)stat_stale());
        return NULL;
    }
    bool ok = read_records(restore_record);
    if (tac.ssd != NULL)
        ssd_unpin_all(tac.ssd);         /* defrag may now pick them */
    items_recovery_end();
    close(rs.fd);
    rs.fd = -1;
    leftover_done();                    /* every item read is linked and logged */
    __atomic_store_n(&rs.took_ns, util_now_ns() - rs.started_ns + 1, __ATOMIC_RELAXED);
    set_state(ok ? RS_DONE : RS_FAILED);
    fprintf(stderr, "restart: %s: %llu items (%llu value bytes) back in %.2f s; "
            "%llu dropped, %llu skipped (written meanwhile, or expired)\n",
            ok ? "done" : "the state file is damaged past this point",
            (unsigned long long)stat_items(), (unsigned long long)stat_bytes(),
            (double)rs.took_ns / 1e9, (unsigned long long)stat_dropped(),
            (unsigned long long)stat_stale());
    return NULL;
}

void tac_restart_run(void)
{
    if (!rs.pending)
        return;
    rs.pending = false;
    /* From now on the server serves and changes things: a later graceful
     * start must never read this state again.  With -o dram_log a crash
     * start may, as a leftover, until the restore is over. */
    if (rs.path != NULL && !rs.crash) {
        char *left = tac_dramlog_on() ? leftover_path(rs.path) : NULL;
        if (left != NULL && rename(rs.path, left) == 0) {
            rs.left = left;
            tac_journal_hold(true);
        } else {
            free(left);
            unlink(rs.path);
        }
    }
    CRASH_POINT(restart_state_unlink);
    if (pthread_create(&rs.thread, NULL, recover_main, NULL) != 0) {
        fprintf(stderr, "restart: cannot start the recovery thread; starting "
                "empty\n");
        if (tac.ssd != NULL)
            ssd_unpin_all(tac.ssd);
        items_recovery_end();
        set_state(RS_FAILED);
        return;
    }
    rs.thread_running = true;
}

void tac_restart_wait(void)
{
    /* A restore still running finishes what it can place at once: a
     * record that would wait for room is dropped, so that the stop is not
     * held up for seconds per record. */
    __atomic_store_n(&rs.stopping, true, __ATOMIC_RELAXED);
    if (rs.thread_running)
        pthread_join(rs.thread, NULL);
    rs.thread_running = false;
}


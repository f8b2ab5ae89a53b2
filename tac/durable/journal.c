/*
 * tac/durable/journal.c - what a restart after a crash needs besides the tiers'
 * own bytes, kept in a MAP_SHARED file beside them (<state file>.journal).
 *
 * A store into a shared file mapping is in the page cache the moment it
 * is made, so it survives a crash of the process (not a power loss: see
 * README, Restart).  The file holds:
 *
 *   [header, JR_HDR_SIZE bytes]
 *   [NVM class map: one byte per NVM page (nvm_set_class_map)]
 *   [SSD page table: version, open order and bufs of each page (ssd_set_table)]
 *   [invalidations: buckets of JR_WAYS entries, one entry per 4 KB of the
 *    tiers (JR_BUCKETS_MIN..MAX buckets)]
 *
 * (A -o dram_log record is an older copy too: see entry_free.)
 *
 * The header ties the file to the tier files it describes (the NVM open
 * count and the SSD header generation of the run that wrote it), and keeps
 * the write sequence and CAS reserved ahead (so a restart continues above
 * anything issued), the flush_all sequence, and a floor below which every
 * tuple counts as dead.
 *
 * Invalidations.  When a version of a key that has, or once had, a copy in
 * NVM or SSD is replaced, deleted or given a shorter life, that copy must
 * never come back after a crash.  The worker records {key hash, seq, clock}
 * before the client hears: every copy of that key with a write sequence up
 * to seq is dead.  clock is the SSD page clock (ssd_page_clock) at that
 * moment: stale copies can lie only in NVM slots (invalidated when freed,
 * tac/tier.c) and in SSD pages opened up to then, so an entry whose clock
 * is older than every SSD page in use protects nothing and may be reused.
 * An entry lives in the bucket of its hash; a bucket full of entries still
 * needed gives up its oldest one by raising the bucket's floor to that
 * entry's seq (counted in journal_overflows): a crash then loses the
 * bucket's keys up to it, but never brings a stale one back.  (A floor
 * for the whole cache made one bucket's overflow, which chosen keys can
 * force, cost every item at the next crash.)
 *
 * Shorter lives.  A touch, gat or meta T that shortens the life of a
 * version with a copy in NVM or SSD keeps that copy: its entry records
 * {cap_seq, cap_exptime}, and every copy above seq and up to cap_seq is
 * brought back with an exptime no later than cap_exptime.  The copies in
 * that range are the current version's (an older version with a copy was
 * invalidated when it was replaced), and a later invalidation of the key
 * raises seq past cap_seq: the unlink of a capped item records that
 * (items.c, ITEM_CAPPED), and until then the entry is never reused.  A
 * longer life is not recorded: after a crash the copy comes back with the
 * last shorter one, never a longer one than a client set.
 */
#include "config.h"
#include "base/crashpoint.h"

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "engine/assoc.h"
#include "engine/item_lock.h"
#include "engine/items.h"
#include "nvm/nvm.h"
#include "ssd/ssd.h"
#include "base/stats.h"
#include "tac/crypt.h"
#include "tac/durable.h"
#include "tac/internal.h"
#include "tac/tuple.h"
#include "base/media_hdr.h"
#include "base/util.h"

#define JR_MAGIC "TACJRNL\n"
#define JR_VERSION 5u                  /* 2: entries keep a dram_log position;
                                           3: and a shorter life (cap);
                                           4: a tier key's hash keeps the
                                              item lock stripe's bits, and
                                              each bucket has a floor;
                                           5: a tier key's hash is of the
                                              key's fingerprint */
#define JR_HDR_SIZE 4096u
#define JR_WAYS 8u
/* Buckets: one entry per 4 KB of NVM and SSD, within these bounds. */
#define JR_BUCKETS_MIN (1u << 13)
#define JR_BUCKETS_MAX (1u << 22)
#define JR_RESERVE (1ull << 20)         /* seq and CAS reserved ahead */

struct jr_header {
    char magic[8];
    uint32_t version, header_size;
    /* Geometry: fixed for the file's life. */
    uint64_t nvm_pages, ssd_words, buckets;
    uint64_t nvm_off, ssd_off, inv_off, bfloor_off, size;
    uint32_t geo_crc;                   /* CRC32C of the fields above */
    uint32_t items_hint;                /* items indexed at the last tick */
    /* Changed while running (aligned 8-byte atomic stores). */
    uint64_t nvm_open_count;            /* owner: the tier opens described */
    uint64_t ssd_generation;
    uint64_t seq_reserved, cas_reserved;
    uint64_t flush_seq;                 /* flush_all: every seq <= is dead */
    uint64_t floor_seq;                 /* overflow: every seq <= is dead */
};
MEDIA_PREFIX_CHECK(struct jr_header);

struct jr_entry {
    uint64_t hash;                      /* 0: free */
    uint64_t seq;                       /* copies up to it are dead */
    uint64_t clock;
    uint64_t logpos;                    /* dram_log head then (0: off) */
    uint64_t cap_seq;                   /* copies above seq, up to it, ... */
    uint64_t cap_exptime;               /* ... expire by then (unix time) */
};

static struct {
    char *path;
    int fd;
    char *map;
    size_t size;
    struct jr_header *hdr;
    bool matched;                       /* describes the tier files as found */
    uint64_t clock_floor;               /* atomic: entries older are free */
    bool hold;                          /* atomic: no entry is freed */
    uint64_t entries, overflows;        /* atomic, stats */
    uint64_t items_hint;                /* the header's, as opened */
} jr = { .fd = -1 };

/* A key's bucket is picked by the low bits of h, which are its item_hash:
 * the buckets are a power of two, at least as many as the item lock
 * stripes, so every key of a bucket shares one item lock stripe, and the
 * holder of that lock is the only writer of the bucket. */
_Static_assert((JR_BUCKETS_MIN & (JR_BUCKETS_MIN - 1)) == 0 &&
               JR_BUCKETS_MIN >= ITEM_LOCK_COUNT && JR_BUCKETS_MAX <= (1ull << 32),
               "a journal bucket must lie within one item lock stripe");

static struct jr_entry *bucket_of(uint64_t h)
{
    return (struct jr_entry *)(jr.map + jr.hdr->inv_off) +
           (size_t)(h & (jr.hdr->buckets - 1)) * JR_WAYS;
}

/* The floor of h's bucket: every copy of a key of that bucket with a seq
 * up to it counts as dead (an overflow, entry_take). */
static uint64_t *bucket_floor(uint64_t h)
{
    return (uint64_t *)(jr.map + jr.hdr->bfloor_off) +
           (size_t)(h & (jr.hdr->buckets - 1));
}

uint64_t tac_fp_hash64(uint64_t fp)
{
    /* The key's fingerprint (item_key_fp()), which is what a meta tuple
     * keeps of its key.  With a tier key the journal's records name keys
     * by a keyed hash of it, so that a guessed key cannot be checked
     * against them, but for the low bits that pick the item lock stripe:
     * the bucket must lie within the key's stripe (bucket_of).  Those
     * ITEM_LOCK_POWER bits of an unkeyed hash match one guessed key in
     * 2^ITEM_LOCK_POWER by chance. */
    uint64_t h = tac_crypt_on()
        ? (tac_crypt_hash64(&fp, sizeof(fp)) & ~(uint64_t)ITEM_LOCK_MASK) |
          (fp & ITEM_LOCK_MASK)
        : fp;
    return h != 0 ? h : 1;
}

uint64_t tac_key_hash64(const char *key, size_t nkey)
{
    return tac_fp_hash64(item_key_fp(key, nkey, item_hash(key, nkey)));
}

static uint32_t geo_crc(const struct jr_header *h)
{
    return media_crc(h, offsetof(struct jr_header, geo_crc));
}

static size_t round_page(size_t n)
{
    return (n + 4095) / 4096 * 4096;
}

/* The geometry these tier options need. */
static void geometry(struct jr_header *g)
{
    memset(g, 0, sizeof(*g));
    media_stamp(g, JR_MAGIC, JR_VERSION, sizeof(*g));
    g->nvm_pages = tac.nvm != NULL ? nvm_npages(tac.nvm) : 0;
    g->ssd_words = tac.ssd != NULL ? ssd_table_words(tac.ssd) : 0;
    uint64_t bytes = 0;
    if (tac.nvm != NULL) {
        struct nvm_info info;
        nvm_get_info(tac.nvm, &info);
        bytes += info.capacity;
    }
    if (tac.ssd != NULL) {
        struct ssd_info info;
        ssd_get_info(tac.ssd, &info);
        bytes += info.size;
    }
    g->buckets = JR_BUCKETS_MIN;
    while (g->buckets < JR_BUCKETS_MAX && g->buckets * JR_WAYS * 4096 < bytes)
        g->buckets *= 2;
    g->nvm_off = JR_HDR_SIZE;
    g->ssd_off = g->nvm_off + round_page(g->nvm_pages);
    g->inv_off = g->ssd_off + round_page(g->ssd_words * sizeof(uint32_t));
    g->bfloor_off = g->inv_off + (size_t)g->buckets * JR_WAYS * sizeof(struct jr_entry);
    g->size = g->bfloor_off + (size_t)g->buckets * sizeof(uint64_t);
    g->geo_crc = geo_crc(g);
}

bool tac_journal_open(const char *state_path)
{
    if (state_path == NULL || (tac.nvm == NULL && tac.ssd == NULL))
        return false;
    size_t n = strlen(state_path) + sizeof(".journal");
    free(jr.path);
    jr.path = malloc(n);
    if (jr.path == NULL)
        return false;
    snprintf(jr.path, n, "%s.journal", state_path);
    jr.fd = util_open_private(jr.path, O_RDWR | O_CREAT, NULL);
    if (jr.fd < 0) {
        fprintf(stderr, "restart: cannot open %s (%s); a crash will lose "
                "the cache\n", jr.path, strerror(errno));
        return false;
    }
    struct jr_header want, found;
    geometry(&want);
    bool fits = pread(jr.fd, &found, sizeof(found), 0) == (ssize_t)sizeof(found) &&
                memcmp(&found, &want, offsetof(struct jr_header, items_hint)) == 0;
    struct stat st;
    if (!fits || fstat(jr.fd, &st) != 0 || (uint64_t)st.st_size != want.size) {
        /* New, another geometry or damaged: start it afresh (sparse). */
        fits = false;
        if (ftruncate(jr.fd, 0) != 0 || ftruncate(jr.fd, (off_t)want.size) != 0) {
            fprintf(stderr, "restart: cannot size %s (%s); a crash will lose "
                    "the cache\n", jr.path, strerror(errno));
            close(jr.fd);
            jr.fd = -1;
            return false;
        }
    }
    /* Every block allocated now: a store into a hole of a full file system
     * would kill the process (SIGBUS) instead of failing. */
    int err = posix_fallocate(jr.fd, 0, (off_t)want.size);
    if (err != 0) {
        fprintf(stderr, "restart: cannot allocate %s (%s); a crash will lose "
                "the cache\n", jr.path, strerror(err));
        close(jr.fd);
        jr.fd = -1;
        if (!fits)
            unlink(jr.path);
        return false;
    }
    jr.size = want.size;
    jr.map = mmap(NULL, jr.size, PROT_READ | PROT_WRITE, MAP_SHARED, jr.fd, 0);
    if (jr.map == MAP_FAILED) {
        jr.map = NULL;
        close(jr.fd);
        jr.fd = -1;
        return false;
    }
    jr.hdr = (struct jr_header *)jr.map;
    if (!fits)
        memcpy(jr.hdr, &want, sizeof(want));
    /* It describes the tier files as found only if both were last opened
     * by the run that wrote it. */
    bool nvm_match = true, ssd_match = true;
    if (tac.nvm != NULL) {
        struct nvm_info info;
        nvm_get_info(tac.nvm, &info);
        nvm_match = info.prev_state != NVM_PREV_NONE &&
                    info.prev_open_count == jr.hdr->nvm_open_count;
    }
    if (tac.ssd != NULL) {
        struct ssd_info info;
        ssd_get_info(tac.ssd, &info);
        ssd_match = info.prev_state != SSD_PREV_NONE &&
                    (info.prev_generation == jr.hdr->ssd_generation ||
                     info.prev_generation == jr.hdr->ssd_generation + 1);
    }
    jr.matched = fits && nvm_match && ssd_match;
    jr.items_hint = jr.matched ? jr.hdr->items_hint : 0;
    return true;
}

bool tac_journal_matched(void)
{
    return jr.map != NULL && jr.matched;
}

const uint8_t *tac_journal_nvm_map(void)
{
    return jr.map != NULL ? (const uint8_t *)(jr.map + jr.hdr->nvm_off) : NULL;
}

const uint32_t *tac_journal_ssd_table(void)
{
    return jr.map != NULL ? (const uint32_t *)(jr.map + jr.hdr->ssd_off) : NULL;
}

uint64_t tac_journal_seq_reserved(void)
{
    return jr.map != NULL ? jr.hdr->seq_reserved : 0;
}

uint64_t tac_journal_cas_reserved(void)
{
    return jr.map != NULL ? jr.hdr->cas_reserved : 0;
}

void tac_journal_reset(void)
{
    if (jr.map == NULL)
        return;
    memset(jr.map + jr.hdr->nvm_off, 0, jr.size - jr.hdr->nvm_off);
    jr.hdr->flush_seq = 0;
    jr.hdr->floor_seq = 0;
    jr.matched = false;
}

void tac_journal_set_floor(uint64_t seq)
{
    if (jr.map != NULL && seq > jr.hdr->floor_seq)
        __atomic_store_n(&jr.hdr->floor_seq, seq, __ATOMIC_RELAXED);
}

/* Reserves ahead of v in *field, and gives the point at which to come
 * back (half a reservation before its end). */
static uint64_t reserve(uint64_t *field, uint64_t v)
{
    return util_atomic_max(field, v + JR_RESERVE) - JR_RESERVE / 2;
}

void tac_journal_reserve_seq(uint64_t seq)
{
    if (jr.map != NULL)
        tac_tuple_set_seq_limit(reserve(&jr.hdr->seq_reserved, seq));
}

static void reserve_cas(uint64_t cas)
{
    if (jr.map != NULL)
        item_cas_set_limit(reserve(&jr.hdr->cas_reserved, cas));
}

void tac_journal_attach(void)
{
    if (jr.map == NULL)
        return;
    if (tac.nvm != NULL) {
        struct nvm_info info;
        nvm_get_info(tac.nvm, &info);
        nvm_set_class_map(tac.nvm, (uint8_t *)(jr.map + jr.hdr->nvm_off));
        __atomic_store_n(&jr.hdr->nvm_open_count, info.open_count, __ATOMIC_RELAXED);
    }
    if (tac.ssd != NULL) {
        struct ssd_info info;
        ssd_get_info(tac.ssd, &info);
        ssd_set_table(tac.ssd, (uint32_t *)(jr.map + jr.hdr->ssd_off));
        __atomic_store_n(&jr.hdr->ssd_generation, info.generation, __ATOMIC_RELAXED);
        __atomic_store_n(&jr.clock_floor, ssd_oldest_page_seq(tac.ssd), __ATOMIC_RELAXED);
    }
    tac_tuple_set_seq_reserve(tac_journal_reserve_seq);
    tac_journal_reserve_seq(tac_tuple_last_seq());
    items_set_cas_reserve(reserve_cas);
    reserve_cas(item_last_cas());
}

void tac_journal_close(void)
{
    if (jr.map == NULL)
        return;
    if (tac.nvm != NULL)
        nvm_set_class_map(tac.nvm, NULL);
    if (tac.ssd != NULL)
        ssd_set_table(tac.ssd, NULL);
    tac_tuple_set_seq_limit(UINT64_MAX);
    item_cas_set_limit(UINT64_MAX);
    (void)msync(jr.map, jr.size, MS_SYNC);
    munmap(jr.map, jr.size);
    close(jr.fd);
    free(jr.path);
    jr.path = NULL;
    jr.map = NULL;
    jr.hdr = NULL;
    jr.fd = -1;
}

/* ---- Invalidations ------------------------------------------------------- */

/* The DRAM log's positions, while it is on (dramlog.c registers them). */
static uint64_t (*log_head)(void);
static uint64_t (*log_clear)(void);

void tac_journal_set_log(uint64_t (*head)(void), uint64_t (*clear)(void))
{
    log_head = head;
    log_clear = clear;
}

static uint64_t clock_now(void)
{
    return tac.ssd != NULL ? ssd_page_clock(tac.ssd) : 0;
}

/* Without an SSD tier or a dram_log nothing stale outlives an NVM slot's
 * free, so no entry is needed past that; they are reused once the bucket
 * fills.  With them, an entry protects stale copies in SSD pages opened up
 * to its clock and in log records below its position: it is free once the
 * oldest SSD page is younger and the log's tail has passed it. */
static bool entry_free(const struct jr_entry *e, uint64_t floor, uint64_t logtail)
{
    if (e->hash == 0)
        return true;
    /* A shorter life holds until its version ends (invalidated). */
    if (__atomic_load_n(&jr.hold, __ATOMIC_RELAXED) || e->cap_seq > e->seq)
        return false;
    bool log = log_head != NULL;
    if (tac.ssd == NULL && !log)
        return false;
    return (tac.ssd == NULL || e->clock < floor) && (!log || e->logpos <= logtail);
}

/* The highest seq an entry speaks for. */
static uint64_t entry_top(const struct jr_entry *e)
{
    return e->seq > e->cap_seq ? e->seq : e->cap_seq;
}

/* The entry of key hash h, taken (and its clock and log position set) for
 * a record made now.  The caller's item lock makes it the bucket's only
 * writer (see bucket_of); a recovery reading it meanwhile is covered by
 * its marks. */
static struct jr_entry *entry_take(uint64_t h)
{
    uint64_t clock = clock_now();
    uint64_t floor = __atomic_load_n(&jr.clock_floor, __ATOMIC_RELAXED);
    /* Every record of this key's versions is below the log's head: each
     * was written under the key's item lock, which the caller holds. */
    uint64_t logpos = log_head != NULL ? log_head() : 0;
    uint64_t logtail = log_clear != NULL ? log_clear() : 0;
    struct jr_entry *b = bucket_of(h);
    struct jr_entry *slot = NULL, *oldest = &b[0];
    for (unsigned i = 0; i < JR_WAYS; i++) {
        if (b[i].hash == h) {
            slot = &b[i];
            break;
        }
        if (slot == NULL && entry_free(&b[i], floor, logtail))
            slot = &b[i];
        if (entry_top(&b[i]) < entry_top(oldest))
            oldest = &b[i];
    }
    if (slot == NULL) {
        /* Every way still protects something: the oldest gives way, and
         * the bucket's floor takes over its promise for every key of the
         * bucket (a capped copy below it is lost, never brought back with
         * a longer life).  The rest of the cache keeps its copies. */
        uint64_t *bf = bucket_floor(h);
        uint64_t top = entry_top(oldest);
        if (top > __atomic_load_n(bf, __ATOMIC_RELAXED))
            __atomic_store_n(bf, top, __ATOMIC_RELAXED);
        __atomic_add_fetch(&jr.overflows, 1, __ATOMIC_RELAXED);
        slot = oldest;
        CRASH_POINT(journal_floor);
    }
    if (slot->hash != h) {
        bool reused = slot->hash != 0;
        __atomic_store_n(&slot->seq, 0, __ATOMIC_RELAXED);
        __atomic_store_n(&slot->cap_seq, 0, __ATOMIC_RELAXED);
        __atomic_store_n(&slot->hash, h, __ATOMIC_RELAXED);
        __atomic_add_fetch(&jr.entries, 1, __ATOMIC_RELAXED);
        if (reused)
            CRASH_POINT(journal_reuse);
    }
    __atomic_store_n(&slot->clock, clock, __ATOMIC_RELAXED);
    __atomic_store_n(&slot->logpos, logpos, __ATOMIC_RELAXED);
    return slot;
}

void tac_journal_invalidate(uint64_t fp)
{
    if (jr.map == NULL)
        return;
    uint64_t seq = tac_tuple_last_seq();
    struct jr_entry *e = entry_take(tac_fp_hash64(fp));
    if (seq > e->seq)
        __atomic_store_n(&e->seq, seq, __ATOMIC_RELAXED);
    CRASH_POINT(journal_record);
}

void tac_journal_shorten(uint64_t fp, uint64_t unix_exptime)
{
    if (jr.map == NULL)
        return;
    uint64_t seq = tac_tuple_last_seq();
    struct jr_entry *e = entry_take(tac_fp_hash64(fp));
    /* The bound first: a crash between the stores sees the older range
     * with the newer, shorter bound, never the wider range with the older
     * bound. */
    __atomic_store_n(&e->cap_exptime, unix_exptime, __ATOMIC_RELAXED);
    if (seq > e->cap_seq)
        __atomic_store_n(&e->cap_seq, seq, __ATOMIC_RELAXED);
    CRASH_POINT(journal_record);
}

void tac_journal_hold(bool on)
{
    __atomic_store_n(&jr.hold, on, __ATOMIC_RELAXED);
}

void tac_journal_flush(void)
{
    if (jr.map != NULL)
        __atomic_store_n(&jr.hdr->flush_seq, tac_tuple_last_seq(), __ATOMIC_RELAXED);
}

void tac_journal_tick(void)
{
    if (jr.map != NULL && tac.ssd != NULL)
        __atomic_store_n(&jr.clock_floor, ssd_oldest_page_seq(tac.ssd),
                         __ATOMIC_RELAXED);
    if (jr.map != NULL) {
        uint64_t n = assoc_count();
        __atomic_store_n(&jr.hdr->items_hint, n > UINT32_MAX ? UINT32_MAX : (uint32_t)n,
                         __ATOMIC_RELAXED);
    }
}

uint64_t tac_journal_items_hint(void)
{
    return jr.items_hint;
}

bool tac_journal_dead(const char *key, size_t nkey, uint64_t seq)
{
    return jr.map != NULL && tac_journal_dead_h(tac_key_hash64(key, nkey), seq);
}

void tac_journal_prefetch(uint64_t h)
{
    if (jr.map != NULL) {
        const char *b = (const char *)bucket_of(h);
        for (size_t i = 0; i < JR_WAYS * sizeof(struct jr_entry); i += 64)
            __builtin_prefetch(b + i);
    }
}

bool tac_journal_dead_h(uint64_t h, uint64_t seq)
{
    return tac_journal_check_h(h, seq, NULL);
}

bool tac_journal_check_h(uint64_t h, uint64_t seq, uint64_t *exptime)
{
    if (jr.map == NULL)
        return false;
    if (seq <= __atomic_load_n(&jr.hdr->flush_seq, __ATOMIC_RELAXED) ||
        seq <= __atomic_load_n(&jr.hdr->floor_seq, __ATOMIC_RELAXED) ||
        seq <= __atomic_load_n(bucket_floor(h), __ATOMIC_RELAXED))
        return true;
    /* Workers add records meanwhile; a record added after the scan began
     * is one the recovery marks (items.c) cover as well. */
    const struct jr_entry *b = bucket_of(h);
    for (unsigned i = 0; i < JR_WAYS; i++) {
        if (__atomic_load_n(&b[i].hash, __ATOMIC_RELAXED) != h)
            continue;
        if (seq <= __atomic_load_n(&b[i].seq, __ATOMIC_RELAXED))
            return true;
        uint64_t cap = __atomic_load_n(&b[i].cap_exptime, __ATOMIC_RELAXED);
        if (exptime != NULL && seq <= __atomic_load_n(&b[i].cap_seq, __ATOMIC_RELAXED) &&
            (*exptime == 0 || cap < *exptime))
            *exptime = cap;
        return false;
    }
    return false;
}

uint64_t tac_journal_entries(void)
{
    return __atomic_load_n(&jr.entries, __ATOMIC_RELAXED);
}

uint64_t tac_journal_overflows(void)
{
    return __atomic_load_n(&jr.overflows, __ATOMIC_RELAXED);
}

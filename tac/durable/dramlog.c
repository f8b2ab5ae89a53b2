/*
 * tac/durable/dramlog.c - -o dram_log: an operation log that lets items no lower
 * tier holds yet survive kill -9.
 *
 * Without it, a crash loses what lived only in DRAM, and what sat in an
 * SSD buf not yet written: NVM slots and written SSD bufs are on the
 * media, and the crash scan (tac/durable/restart.c) finds them.  With it, every
 * version that becomes visible in DRAM (a store, an in-place incr, a
 * touch, a fetch up from a lower tier, a graceful restore) and every tuple
 * appended to an SSD buf is first written, as a tuple (tac/tuple.h), into
 * a ring in a file beside the NVM file (<nvm file>.dramlog), mapped
 * MAP_SHARED through libpmem.  A store into that mapping is in the page
 * cache at once, so it survives the process; on real PMem each record is
 * also pmem_persist()ed (README, Restart, says what holds at power loss).
 *
 * Layout:
 *   [header, DL_HDR_SIZE bytes]
 *   [ring: records, each struct dl_rec and a tuple, 8-byte aligned]
 *
 * Positions are logical: a 64-bit byte count that only grows; the ring
 * byte of position p is p % size.  Each record holds its own position, so
 * a walk from the tail (kept in the header) follows records only while
 * they hold the position it expects: bytes left by an earlier lap, or a
 * record torn by the crash, end the walk.  A record that would cross the
 * ring's end is preceded by a wrap record, which skips to the next lap.
 *
 * Cleaning.  An append that finds too little room takes the record at the
 * tail: it is copied to the head if it is still needed (its key's item is
 * that version in DRAM, or an SSD meta tuple whose buf is still in
 * memory), and dropped otherwise (invalidated by the journal, moved to
 * NVM or a written SSD buf, deleted or evicted).  A record of a DRAM item
 * written by this run holds the item's address (its hint): the check reads
 * that item's flags and CAS, prefetched a few records ahead, with no
 * lookup and no item lock (hint_live says why that is safe).  Other
 * records (SSD tuples, records of an earlier run, items without CAS) are
 * checked by a lookup under the key's item lock, taken with trylock: the
 * appender already holds its own key's lock, and a thread waiting for the
 * log may hold another's.  When that lock is busy, the record is copied
 * unchecked unless the journal says it is dead, and the journal frees no
 * invalidation before the tail has passed that copy (tac_dramlog_clear;
 * tac/durable/journal.c also frees an invalidation only when the tail has passed
 * the head it noted).  When everything in the ring is needed, the oldest
 * record is dropped (dram_log_lost): the ring is sized at twice -m.
 *
 * After a crash the records from the tail to the end of the walk (the old
 * records) are replayed by the recovery thread (tac_dramlog_replay), after
 * the tiers' scan; new records go on after them.  Until the replay has
 * read a record, cleaning copies it unchecked (unless the journal says it
 * is dead), marked DL_CARRY, and the replay reads that copy too: old and
 * carried records, in position order, up to the head.  Records copied so
 * bypass the item lock, so the journal frees no invalidation by the log's
 * tail before the tail has passed every such copy (tac_dramlog_clear).
 * At every other start the log begins empty, on a lap no earlier record
 * holds.
 */
#include "config.h"
#include "base/crashpoint.h"

#include <errno.h>
#include <fcntl.h>
#include <libpmem.h>
#include <pthread.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "engine/assoc.h"
#include "engine/item_lock.h"
#include "engine/items.h"
#include "nvm/nvm.h"
#include "base/settings.h"
#include "base/stats.h"
#include "tac/durable.h"
#include "tac/internal.h"
#include "tac/ssd_tier.h"
#include "tac/tuple.h"
#include "base/media_hdr.h"
#include "base/util.h"

#define DL_MAGIC "TACDLOG\n"
#define DL_VERSION 2u                   /* 2: struct dl_rec gained hint */
#define DL_HDR_SIZE 4096u
#define DL_REC 0x4c524344u              /* a record */
#define DL_WRAP 0x50415257u             /* skip to the next lap */
#define DL_MIN_SIZE ((uint64_t)16 << 20)

struct dl_header {
    char magic[8];
    uint32_t version, header_size;
    uint64_t size;                      /* ring bytes */
    uint32_t geo_crc;                   /* CRC32C of the fields above */
    uint32_t pad;
    /* Changed while running (aligned 8-byte atomic stores). */
    uint64_t owner;                     /* NVM open count of the writing run */
    uint64_t tail;                      /* position of the oldest record */
};
MEDIA_PREFIX_CHECK(struct dl_header);

struct dl_rec {
    uint32_t magic;                     /* DL_REC or DL_WRAP */
    uint32_t len;                       /* bytes, this header included */
    uint64_t pos;
    uint32_t crc;                       /* CRC32C of this header (crc 0),
                                           seeded with the tuple's checksum */
    uint32_t flags;                     /* DL_CARRY */
    uint64_t hint;                      /* this run's DRAM item holding the
                                           version, or 0 (see clean_one) */
};

#define DL_CARRY 1u                     /* copied before the replay read it */

_Static_assert(sizeof(struct dl_rec) == 32, "an on-media format");

/* Cleaning reads the headers of this many records ahead of the tail and
 * prefetches the items their hints name. */
#define DL_AHEAD 8
/* The ring is prefetched this many bytes ahead of the head, for writing:
 * the head moves through it in order, and each line it reaches was last
 * touched a lap ago, so every store would otherwise wait for the line to
 * be read from memory first.  (The tail reads only record headers, which
 * prefetch_ahead fetches a few records ahead.) */
#define DL_PREFETCH 4096

static struct {
    bool on;
    char *path;
    char *map;
    size_t map_len;
    bool is_pmem;
    struct dl_header *hdr;
    char *ring;
    uint64_t size;
    size_t reserve;                     /* kept free for copies */
    uint64_t headroom;                  /* kept free too, but for a replay */
    pthread_mutex_t lock;
    uint64_t head, tail;                /* atomic stores under lock */
    uint64_t lap;                       /* lock: a lap's first position, at or
                                           below the head (ring_off) */
    uint64_t run_from;                  /* first position of this run */
    uint64_t head_pf;                   /* lock: ring prefetched up to here */
    uint64_t ahead_pos;                 /* lock: prefetched up to here, */
    unsigned ahead;                     /*   this many records past the tail */
    bool replayable;
    /* After a crash (under lock): the replay reads the records below h0
     * and those carried, from replay_at on, until it reaches the head;
     * then clear is the head (see tac_dramlog_clear). */
    bool replaying;
    uint64_t replay_h0, replay_at;
    uint64_t clear;                     /* atomic */
    /* Faulting the ring's pages in ahead of the first lap (populate). */
    pthread_t populater;
    bool populating, populate_stop;     /* populate_stop: atomic */
    /* stats (relaxed atomics) */
    uint64_t records, bytes, copied, cleaned, lost, busy, replayed;
} dl = { .lock = PTHREAD_MUTEX_INITIALIZER };

static __thread bool dl_quiet;          /* the replaying thread logs nothing */
static bool dl_replay_active;           /* atomic: tac_dramlog_replay runs */

static size_t align8(size_t n) { return (n + 7) & ~(size_t)7; }

static uint32_t geo_crc(const struct dl_header *h)
{
    return media_crc(h, offsetof(struct dl_header, geo_crc));
}

static uint32_t rec_crc(const struct dl_rec *r, uint32_t seed)
{
    struct dl_rec c = *r;
    c.crc = 0;
    return util_crc32c(seed, &c, sizeof(c));
}

/* pos % dl.size, with no division for a position within a lap of
 * dl.lap: the head, the tail and what is prefetched around them.  (A
 * 64-bit division per ring access, one per cache line prefetched, took a
 * tenth of the log's cost.)  Any multiple of the size serves as dl.lap. */
static inline uint64_t ring_off(uint64_t pos)
{
    uint64_t lap = dl.lap;
    if (pos >= lap) {
        uint64_t d = pos - lap;
        if (d < dl.size)
            return d;
        if (d - dl.size < dl.size)
            return d - dl.size;
    } else if (lap - pos <= dl.size) {
        return dl.size - (lap - pos);
    }
    return pos % dl.size;
}

static inline char *at(uint64_t pos) { return dl.ring + ring_off(pos); }

static void stat_add(uint64_t *c, uint64_t n)
{
    __atomic_add_fetch(c, n, __ATOMIC_RELAXED);
}

/* ---- Opening ------------------------------------------------------------ */

/* A new file's blocks are zeroed, and every page mapped, at its first
 * store: on tmpfs that was a fifth of the log's cost in the first lap of a
 * YCSB-A run.  A background thread takes it ahead, 64 MB at a time
 * (MADV_POPULATE_WRITE faults pages in as a write would, without changing
 * a byte).  Kernels before 5.14 refuse it: then nothing is done. */
static void *populate_main(void *arg)
{
    (void)arg;
    enum { CHUNK = 64 << 20 };
    for (size_t off = 0; off < dl.map_len; off += CHUNK) {
        if (__atomic_load_n(&dl.populate_stop, __ATOMIC_RELAXED))
            break;
        size_t n = dl.map_len - off < CHUNK ? dl.map_len - off : CHUNK;
        if (madvise(dl.map + off, n, MADV_POPULATE_WRITE) != 0)
            break;
    }
    return NULL;
}

bool tac_dramlog_open(void)
{
    if (!tac.cfg.dram_log || tac.nvm == NULL)
        return true;
    struct nvm_info info;
    nvm_get_info(tac.nvm, &info);
    if (strcmp(info.backing, "devdax") == 0 || strcmp(info.backing, "numa") == 0) {
        fprintf(stderr, "-o dram_log=on needs a file-backed NVM tier; %s is "
                "%s\n", info.path, info.backing);
        return false;
    }
    uint64_t size = tac.cfg.dram_log_size != 0 ? tac.cfg.dram_log_size
                                                : 2 * (uint64_t)tac.cfg.maxbytes;
    if (size < DL_MIN_SIZE)
        size = DL_MIN_SIZE;
    size = (size + 4095) / 4096 * 4096;
    size_t max_rec = align8(sizeof(struct dl_rec) +
                            tac_tuple_size(KEY_MAX_LENGTH, (size_t)tac.cfg.item_size_max));
    dl.reserve = 2 * max_rec;
    if (size < 8 * (uint64_t)max_rec) {
        fprintf(stderr, "-o dram_log_size: %llu bytes is too small for -I "
                "(at least %zu)\n", (unsigned long long)size, 8 * max_rec);
        return false;
    }
    size_t n = strlen(info.path) + sizeof(".dramlog");
    free(dl.path);
    dl.path = malloc(n);
    if (dl.path == NULL)
        return false;
    snprintf(dl.path, n, "%s.dramlog", info.path);

    struct dl_header want = { 0 };
    media_stamp(&want, DL_MAGIC, DL_VERSION, sizeof(want));
    want.size = size;
    want.geo_crc = geo_crc(&want);

    size_t len = 0;
    int is_pmem = 0;
    /* An existing file of another size is opened as it is, then refused.
     * libpmem opens by path: it is given the fd's own path, so that it
     * maps the file util_open_private() checked (no symbolic link). */
    char fdpath[UTIL_FD_PATH_MAX];
    int efd = util_open_private(dl.path, O_RDWR, NULL);
    if (efd < 0 && errno != ENOENT) {
        fprintf(stderr, "-o dram_log: cannot open %s: %s\n", dl.path, strerror(errno));
        return false;
    }
    if (efd >= 0) {
        util_fd_path(efd, fdpath);
        dl.map = pmem_map_file(fdpath, 0, 0, 0, &len, &is_pmem);
        close(efd);
    }
    bool fits = dl.map != NULL && len == DL_HDR_SIZE + size &&
                memcmp(dl.map, &want, offsetof(struct dl_header, pad)) == 0;
    if (!fits) {
        if (dl.map != NULL) {
            pmem_unmap(dl.map, len);
            fprintf(stderr, "-o dram_log: %s has another size or format version; "
                    "the log starts afresh\n", dl.path);
        }
        /* New, another size or damaged: the log starts afresh (a crash
         * then loses what only it held, as without it). */
        if (unlink(dl.path) != 0 && errno != ENOENT) {
            fprintf(stderr, "-o dram_log: cannot replace %s: %s\n", dl.path,
                    strerror(errno));
            return false;
        }
        /* Every block allocated first: a store into a hole of a full file
         * system would kill the process (SIGBUS) instead of failing. */
        int fd = util_open_private(dl.path, O_RDWR | O_CREAT | O_EXCL, NULL);
        int err = fd < 0 ? errno : posix_fallocate(fd, 0, (off_t)(DL_HDR_SIZE + size));
        if (err == 0) {
            util_fd_path(fd, fdpath);
            dl.map = pmem_map_file(fdpath, 0, 0, 0, &len, &is_pmem);
            err = dl.map == NULL ? errno : 0;
        }
        if (fd >= 0)
            close(fd);
        if (err != 0) {
            fprintf(stderr, "-o dram_log: cannot create %s (%llu bytes): %s\n",
                    dl.path, (unsigned long long)(DL_HDR_SIZE + size),
                    strerror(err));
            unlink(dl.path);
            dl.map = NULL;
            return false;
        }
        memcpy(dl.map, &want, sizeof(want));
    }
    dl.map_len = len;
    dl.is_pmem = is_pmem != 0;
    dl.populate_stop = false;
    dl.populating = pthread_create(&dl.populater, NULL, populate_main, NULL) == 0;
    dl.hdr = (struct dl_header *)dl.map;
    dl.ring = dl.map + DL_HDR_SIZE;
    dl.size = size;
    dl.headroom = size / 8;
    dl.replayable = fits && info.prev_state == NVM_PREV_DIRTY &&
                    dl.hdr->owner == info.prev_open_count;
    dl.on = true;
    tac_journal_set_log(tac_dramlog_head, tac_dramlog_clear);
    return true;
}

bool tac_dramlog_on(void)
{
    return dl.on;
}

bool tac_dramlog_replayable(void)
{
    return dl.on && dl.replayable;
}

/* The record at pos if it is whole and holds pos; its tuple in *tuple
 * (NULL for a wrap record) and its flags in *flags.  0 when the walk ends
 * here.  check: verify the checksums too (what a crash left; this run's
 * own records below the head are whole). */
static uint32_t rec_at(uint64_t pos, const char **tuple, uint32_t *flags, bool check)
{
    uint64_t room = dl.size - ring_off(pos);
    *tuple = NULL;
    *flags = 0;
    if (room < sizeof(struct dl_rec))
        return (uint32_t)room;          /* too small for a record: skipped */
    struct dl_rec r;
    memcpy(&r, at(pos), sizeof(r));
    if (r.pos != pos || r.len < sizeof(r) || r.len > room || r.len % 8 != 0)
        return 0;
    if (r.magic == DL_WRAP)
        return r.len == room && (!check || rec_crc(&r, 0) == r.crc) ? r.len : 0;
    if (r.magic != DL_REC)
        return 0;
    const char *t = at(pos) + sizeof(r);
    struct tac_tuple_hdr h;
    memcpy(&h, t, sizeof(h));
    if (!tac_tuple_sane(&h, r.len - sizeof(r)) ||
        align8(sizeof(r) + tac_tuple_size(h.nkey, h.nbytes)) != r.len)
        return 0;
    const char *clear;
    if (check && (rec_crc(&r, h.checksum) != r.crc ||
                  tac_tuple_open_scratch(&h, t + sizeof(h), &clear) != TUPLE_OK))
        return 0;
    *tuple = t;
    *flags = r.flags;
    return r.len;
}

void tac_dramlog_start(bool replay)
{
    if (!dl.on)
        return;
    uint64_t tail = dl.hdr->tail;
    uint64_t head = tail;
    if (replay && dl.replayable) {
        const char *t;
        uint32_t n, flags;
        while (head - tail < dl.size && (n = rec_at(head, &t, &flags, true)) != 0)
            head += n;
        dl.replaying = true;
        __atomic_store_n(&dl.clear, UINT64_MAX, __ATOMIC_RELAXED);
        dl.replay_h0 = head;
        dl.replay_at = tail;
    } else {
        /* A lap beyond every position an earlier record can hold. */
        tail = (tail / dl.size + 2) * dl.size;
        head = tail;
        __atomic_store_n(&dl.hdr->tail, tail, __ATOMIC_RELAXED);
    }
    dl.tail = tail;
    dl.run_from = head;
    dl.lap = head - head % dl.size;
    __atomic_store_n(&dl.head, head, __ATOMIC_RELAXED);
    struct nvm_info info;
    nvm_get_info(tac.nvm, &info);
    __atomic_store_n(&dl.hdr->owner, info.open_count, __ATOMIC_RELAXED);
    if (dl.is_pmem)
        pmem_persist(dl.hdr, sizeof(*dl.hdr));
}

void tac_dramlog_close(void)
{
    if (dl.map == NULL)
        return;
    if (dl.populating) {
        __atomic_store_n(&dl.populate_stop, true, __ATOMIC_RELAXED);
        pthread_join(dl.populater, NULL);
        dl.populating = false;
    }
    if (!dl.is_pmem)
        (void)pmem_msync(dl.map, dl.map_len);
    pmem_unmap(dl.map, dl.map_len);
    dl.map = NULL;
    dl.on = false;
    tac_journal_set_log(NULL, NULL);
    free(dl.path);
    dl.path = NULL;
}

uint64_t tac_dramlog_head(void)
{
    return dl.on ? __atomic_load_n(&dl.head, __ATOMIC_RELAXED) : 0;
}

uint64_t tac_dramlog_clear(void)
{
    if (!dl.on)
        return 0;
    uint64_t tail = __atomic_load_n(&dl.tail, __ATOMIC_RELAXED);
    return tail >= __atomic_load_n(&dl.clear, __ATOMIC_RELAXED) ? tail : 0;
}

/* ---- Writing ------------------------------------------------------------ */

/* Prefetches the ring's lines for writing, from where the last call
 * stopped up to DL_PREFETCH bytes past the head (dl.lock held). */
static void prefetch_head(void)
{
    uint64_t to = dl.head + DL_PREFETCH;
    if (dl.head_pf < dl.head)
        dl.head_pf = dl.head & ~(uint64_t)63;
    if (dl.head_pf >= to)
        return;
    uint64_t off = ring_off(dl.head_pf);
    for (; dl.head_pf < to; dl.head_pf += 64) {
        __builtin_prefetch(dl.ring + off, 1);
        off += 64;
        if (off >= dl.size)
            off -= dl.size;
    }
}

static void head_to(uint64_t pos)
{
    __atomic_store_n(&dl.head, pos, __ATOMIC_RELAXED);
    while (pos - dl.lap >= dl.size)
        dl.lap += dl.size;
}

/* Writes a record at the head (dl.lock held; room checked): the tuple
 * whose header is h and whose body (as the tiers hold it: clear or
 * sealed) is the n pieces of body. */
static void put(const struct tac_tuple_hdr *h, const struct iovec *body, int n,
                uint32_t flags, uint64_t hint)
{
    size_t len = align8(sizeof(struct dl_rec) + tac_tuple_size(h->nkey, h->nbytes));
    uint64_t room = dl.size - ring_off(dl.head);
    if (room < len) {
        if (room >= sizeof(struct dl_rec)) {
            struct dl_rec w = { DL_WRAP, (uint32_t)room, dl.head, 0, 0, 0 };
            w.crc = rec_crc(&w, 0);
            memcpy(at(dl.head), &w, sizeof(w));
            if (dl.is_pmem)
                pmem_persist(at(dl.head), sizeof(w));
            CRASH_POINT(dramlog_wrap);
        }
        head_to(dl.head + room);
    }
    char *p = at(dl.head);
    struct dl_rec r = { DL_REC, (uint32_t)len, dl.head, 0, flags, hint };
    r.crc = rec_crc(&r, h->checksum);
    memcpy(p, &r, sizeof(r));
    memcpy(p + sizeof(r), h, sizeof(*h));
    size_t off = sizeof(r) + sizeof(*h);
    for (int i = 0; i < n; i++) {
        memcpy(p + off, body[i].iov_base, body[i].iov_len);
        off += body[i].iov_len;
    }
    if (dl.is_pmem)
        pmem_persist(p, len);
    head_to(dl.head + len);
    prefetch_head();
    CRASH_POINT(dramlog_append);
}

/* Bytes an append of len needs at the head now (a wrap wastes the rest of
 * the lap). */
static uint64_t need_at_head(size_t len)
{
    uint64_t room = dl.size - ring_off(dl.head);
    return room < len ? room + len : len;
}

static void tail_to(uint64_t pos)
{
    __atomic_store_n(&dl.tail, pos, __ATOMIC_RELAXED);
    __atomic_store_n(&dl.hdr->tail, pos, __ATOMIC_RELAXED);
}

/* Whether the record's version is still needed: its key's item is that
 * version in DRAM, or an SSD meta tuple whose buf is not written yet.
 * Key's item lock held. */
static bool needed(const struct tac_tuple_hdr *h, const char *key, uint32_t hv)
{
    item *it = assoc_find(key, h->nkey, hv);
    if (it == NULL)
        return false;
    if (!(it->it_flags & ITEM_META))    /* CAS 0: a tuple staged to SSD */
        return !tac.cfg.use_cas || h->cas == 0 || it->cas == h->cas;
    return it->tier == TIER_SSD && tac_ssd_unwritten(it);
}

/* The hint a record of this run was written with (0 for a record of an
 * earlier run: its addresses mean nothing now). */
static uint64_t rec_hint(uint64_t pos)
{
    if (pos < dl.run_from)
        return 0;
    uint64_t hint;
    memcpy(&hint, at(pos) + offsetof(struct dl_rec, hint), sizeof(hint));
    return hint;
}

/* The hint for a record of DRAM item it: its address, when the address
 * and the CAS tell its version apart for as long as the chunk lives.  A
 * slab chunk stays mapped while the server runs, and every new version
 * gets a new CAS (an item is zeroed when its chunk is taken, and linked
 * with its CAS).  Without CAS, or for an item outside the slabs, 0. */
static uint64_t item_hint(const item *it)
{
    return tac.cfg.use_cas && it->cas != 0 && it->slabs_clsid != 0 ? (uintptr_t)it : 0;
}

/* Whether the DRAM item a hint names still holds the record's version:
 * read without its lock, under dl.lock.  A version is unlinked (or given
 * a new CAS) before its successor's record is appended under dl.lock, so
 * a record judged live here is copied below that record, never above it:
 * the order a key's records have in the ring is kept.  A chunk taken for
 * another item reads as not linked, or with another CAS, until its own
 * version is linked.  The item's writers store these fields plainly under
 * its lock; this reader's race with them is the point, so ThreadSanitizer
 * is told to look away (the page mover reads chunks the same way). */
__attribute__((no_sanitize("thread")))
static bool hint_live(uint64_t hint, const struct tac_tuple_hdr *h)
{
    const item *it = (const item *)(uintptr_t)hint;
    uint16_t fl = __atomic_load_n(&it->it_flags, __ATOMIC_RELAXED);
    return (fl & (ITEM_LINKED | ITEM_META)) == ITEM_LINKED &&
           __atomic_load_n(&it->tier, __ATOMIC_RELAXED) == TIER_DRAM &&
           __atomic_load_n(&it->cas, __ATOMIC_RELAXED) == h->cas;
}

/* Reads the headers of the next DL_AHEAD records past the tail and
 * prefetches the items their hints name, so that cleaning seldom waits
 * for a cache miss (dl.lock held). */
static void prefetch_ahead(void)
{
    if (dl.ahead_pos < dl.tail) {
        dl.ahead_pos = dl.tail;
        dl.ahead = 0;
    }
    while (dl.ahead < DL_AHEAD && dl.ahead_pos < dl.head) {
        uint64_t pos = dl.ahead_pos;
        uint64_t room = dl.size - ring_off(pos);
        uint32_t len = (uint32_t)room;
        if (room >= sizeof(struct dl_rec)) {
            struct dl_rec r;
            memcpy(&r, at(pos), sizeof(r));
            if (r.pos != pos || r.len < sizeof(r) || r.len > room)
                break;                  /* clean_one will see why */
            len = r.len;
            if (r.magic == DL_REC && r.hint != 0 && pos >= dl.run_from) {
                __builtin_prefetch((const void *)(uintptr_t)r.hint);
                __builtin_prefetch((const char *)(uintptr_t)r.hint + 32);
            }
        }
        /* The next header, and the tuple header behind it (72 bytes). */
        __builtin_prefetch(at(pos + len));
        __builtin_prefetch(at(pos + len + 64));
        dl.ahead_pos = pos + len;
        dl.ahead++;
    }
}

/* The clear key of a record's tuple (header h, body at body): in place, or
 * for a sealed one opened in the thread's scratch buffer; NULL when its
 * tag fails. */
static const char *rec_key(const struct tac_tuple_hdr *h, const char *body)
{
    const char *clear = body;
    if (tac_tuple_sealed() && tac_tuple_open_scratch(h, body, &clear) != TUPLE_OK)
        return NULL;
    return clear;
}

/* Cleans the record at the tail (dl.lock held): copied to the head or
 * dropped.  own_hv: the item lock the caller holds. */
static void clean_one(uint32_t own_hv, bool force)
{
    const char *t;
    uint32_t flags;
    uint32_t n = rec_at(dl.tail, &t, &flags, false);
    if (dl.ahead > 0 && dl.ahead_pos > dl.tail)
        dl.ahead--;
    if (n == 0) {
        /* Never written by this run: nothing below the head is left. */
        tail_to(dl.head);
        return;
    }
    if (t == NULL) {
        tail_to(dl.tail + n);
        return;
    }
    struct tac_tuple_hdr h;
    memcpy(&h, t, sizeof(h));
    /* The record's body, copied as it is (sealed or not). */
    struct iovec body = {
        (void *)(t + sizeof(h)), tac_tuple_size(h.nkey, h.nbytes) - sizeof(h)
    };
    bool unread = dl.replaying && dl.tail >= dl.replay_at &&
                  (dl.tail < dl.replay_h0 || (flags & DL_CARRY));
    uint64_t hint = rec_hint(dl.tail);
    bool keep = false;
    const char *key = NULL;
    if (force) {
        /* dropped */
    } else if (hint != 0 && !unread && !hint_live(hint, &h)) {
        /* its version is gone from DRAM: dropped unread */
    } else if ((key = rec_key(&h, body.iov_base)) == NULL) {
        force = true;                   /* a sealed record that fails its tag */
    } else if (unread) {
        keep = !tac_journal_dead(key, h.nkey, h.seq);
        if (keep)
            put(&h, &body, 1, DL_CARRY, 0);     /* for the replay */
    } else if (hint != 0) {
        /* The journal is asked only about what is still needed (a touch
         * shorter invalidates the version it leaves in DRAM). */
        keep = !tac_journal_dead(key, h.nkey, h.seq);
        if (keep)
            put(&h, &body, 1, 0, hint);
    } else {
        uint32_t hv = item_hash(key, h.nkey);
        bool own = (hv & ITEM_LOCK_MASK) == (own_hv & ITEM_LOCK_MASK);
        if (own || item_trylock(hv)) {
            keep = needed(&h, key, hv) && !tac_journal_dead(key, h.nkey, h.seq);
            if (keep)
                put(&h, &body, 1, 0, 0);    /* the tuple as it is, seq included */
            if (!own)
                item_unlock(hv);
        } else if (!tac_journal_dead(key, h.nkey, h.seq)) {
            /* Its key is busy (maybe waiting for this log): kept unchecked,
             * and the journal frees no invalidation until the tail has
             * passed this copy. */
            put(&h, &body, 1, 0, 0);
            keep = true;
            stat_add(&dl.busy, 1);
            if (dl.head > __atomic_load_n(&dl.clear, __ATOMIC_RELAXED))
                __atomic_store_n(&dl.clear, dl.head, __ATOMIC_RELAXED);
        }
    }
    stat_add(keep ? &dl.copied : force ? &dl.lost : &dl.cleaned, 1);
    tail_to(dl.tail + n);
    CRASH_POINT(dramlog_clean);
}

/* Makes room for a record of len bytes at the head (dl.lock held). */
static void make_room(size_t len, uint32_t own_hv)
{
    uint64_t scanned = 0;
    for (;;) {
        uint64_t used = dl.head - dl.tail;
        if (dl.size - used >= need_at_head(len) + dl.reserve +
                              (dl.replaying ? 0 : dl.headroom))
            return;
        /* A whole lap scanned and every record still needed: the ring is
         * too small for what DRAM holds; the oldest goes. */
        uint64_t before = dl.tail;
        prefetch_ahead();
        clean_one(own_hv, scanned > dl.size);
        scanned += dl.tail - before;
    }
}

/* Appends the tuple image iov (n pieces, the header first). */
static void append(const struct tac_tuple_hdr *h, const struct iovec *iov, int n,
                   uint32_t own_hv, uint64_t hint)
{
    size_t len = align8(sizeof(struct dl_rec) + tac_tuple_size(h->nkey, h->nbytes));
    pthread_mutex_lock(&dl.lock);
    make_room(len, own_hv);
    put(h, iov + 1, n - 1, 0, hint);
    pthread_mutex_unlock(&dl.lock);
    stat_add(&dl.records, 1);
    stat_add(&dl.bytes, len);
}

/* Whether records of `it` written now keep their order (item_hint): true
 * for a DRAM item about to be linked with a new CAS (items.c). */
bool tac_dramlog_ordered(const item *it)
{
    return dl.on && !dl_quiet && tac.cfg.use_cas && it->slabs_clsid != 0;
}

bool tac_dramlog_item(const item *it)
{
    if (!dl.on || dl_quiet)
        return false;
    struct tac_tuple_hdr h;
    struct iovec iov[3];
    tac_tuple_fill(&h, it);
    int n = tac_tuple_image(&h, ITEM_key(it), ITEM_data(it), iov);
    uint64_t hint = item_hint(it);
    append(&h, iov, n, item_hash(ITEM_key(it), it->nkey), hint);
    return hint != 0;
}

void tac_dramlog_tuple(const struct tac_tuple_hdr *h, const struct iovec *iov,
                       int n, uint32_t hv)
{
    /* Not quiet during the replay: a tuple the replay's own stores push
     * into an SSD buf (an NVM item moved down to make room, a staged
     * store) has no other record. */
    if (!dl.on)
        return;
    append(h, iov, n, hv, 0);
}

/* ---- Replay ------------------------------------------------------------- */

void tac_dramlog_replay(void (*fn)(const char *tuple, void *arg), void *arg)
{
    if (!dl.on)
        return;
    __atomic_store_n(&dl_replay_active, true, __ATOMIC_RELEASE);
    dl_quiet = true;
    char *buf = NULL;
    size_t cap = 0;
    pthread_mutex_lock(&dl.lock);
    uint64_t pos = dl.replay_at;
    while (dl.replaying) {
        if (pos < dl.tail)
            pos = dl.tail;              /* what lay below was carried or dead */
        const char *t;
        uint32_t flags, n = 0;
        if (pos < dl.head)
            n = rec_at(pos, &t, &flags, pos < dl.replay_h0);
        if (n == 0)
            break;                      /* at the head: done */
        if (t != NULL && (pos < dl.replay_h0 || (flags & DL_CARRY))) {
            /* A copy, handled without the lock: cleaning may carry the
             * record meanwhile, and the replay then reads it again (the
             * same seq: skipped). */
            if (n > cap) {
                char *nb = realloc(buf, n);
                if (nb == NULL)
                    break;
                buf = nb;
                cap = n;
            }
            memcpy(buf, t, n - sizeof(struct dl_rec));
            pthread_mutex_unlock(&dl.lock);
            /* fn reads the tuple in clear: a sealed one is opened in
             * place first (one whose tag fails is not replayed). */
            struct tac_tuple_hdr h;
            memcpy(&h, buf, sizeof(h));
            char *b = buf + sizeof(h);
            if (!tac_tuple_sealed() ||
                tac_tuple_open(&h, b, b, b + h.nkey) == TUPLE_OK) {
                fn(buf, arg);
                stat_add(&dl.replayed, 1);
            }
            CRASH_POINT(restart_replay_record);
            pthread_mutex_lock(&dl.lock);
        }
        pos += n;
        if (pos > dl.replay_at)
            dl.replay_at = pos;
    }
    dl.replaying = false;
    __atomic_store_n(&dl.clear, dl.head, __ATOMIC_RELAXED);
    pthread_mutex_unlock(&dl.lock);
    free(buf);
    dl_quiet = false;
    __atomic_store_n(&dl_replay_active, false, __ATOMIC_RELEASE);
}

bool tac_dramlog_replaying(void)
{
    return __atomic_load_n(&dl_replay_active, __ATOMIC_ACQUIRE);
}

/* ---- Stats -------------------------------------------------------------- */

void tac_dramlog_stats(struct stat_sink *s)
{
    if (!dl.on)
        return;
#define DL_LINE(name, v) stat_printf(s, name, "%llu", (unsigned long long)(v))
#define DL_GET(field) __atomic_load_n(&dl.field, __ATOMIC_RELAXED)
    DL_LINE("dram_log_size", dl.size);
    DL_LINE("dram_log_used", tac_dramlog_head() - __atomic_load_n(&dl.tail, __ATOMIC_RELAXED));
    DL_LINE("dram_log_records", DL_GET(records));
    DL_LINE("dram_log_bytes", DL_GET(bytes));
    DL_LINE("dram_log_copied", DL_GET(copied));
    DL_LINE("dram_log_cleaned", DL_GET(cleaned));
    DL_LINE("dram_log_lost", DL_GET(lost));
    DL_LINE("dram_log_busy", DL_GET(busy));
    DL_LINE("dram_log_replayed", DL_GET(replayed));
#undef DL_GET
#undef DL_LINE
}

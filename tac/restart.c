/*
 * tac/restart.c - graceful restart: what a stop saves and the next start
 * brings back.
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

#include "assoc.h"
#include "crashpoint.h"
#include "items.h"
#include "lazy_lru.h"
#include "nvm/nvm.h"
#include "settings.h"
#include "ssd/ssd.h"
#include "stats.h"
#include "tac/crypt.h"
#include "tac/durable.h"
#include "tac/internal.h"
#include "tac/nvm_tier.h"
#include "tac/ssd_tier.h"
#include "tac/tuple.h"
#include "util.h"

#define RS_MAGIC "TACSTATE"
#define RS_VERSION 2u                /* 2: seq in records, key check */
#define RS_HDR_SIZE 4096u
#define RS_CHUNK (1u << 20)         /* records are flushed in chunks of this */

struct rs_header {
    char magic[8];
    uint32_t version;
    uint32_t header_size;           /* sizeof(struct rs_header) */
    int64_t stop_time;              /* unix seconds at the stop */
    uint64_t last_cas, last_seq;
    uint64_t nvm_open_count;        /* 0: no NVM part */
    uint64_t nvm_capacity;
    uint64_t ssd_generation;        /* 0: no SSD part */
    uint64_t ssd_size, ssd_page_size, ssd_buf_size;
    uint64_t rec_off;               /* first record chunk */
    uint64_t nvm_off, nvm_count;    /* NVM section */
    uint64_t ssd_off, ssd_count;    /* SSD section: pages */
    uint64_t items[TIER_COUNT];     /* records, by tier */
    uint32_t nvm_crc, ssd_crc;      /* CRC32C of each section */
    uint8_t key_check[16];          /* tac_crypt_key_check(); zeros: no key */
    uint32_t hashpower;             /* the index's log2 buckets; 0: not said */
    uint32_t checksum;              /* CRC32C of every byte before it */
};

struct rs_page {
    uint32_t page;
    uint16_t version;
    uint16_t pad;
    uint64_t seq;
    uint64_t live;
};

struct rs_rec {
    uint8_t tier;                   /* enum item_tier */
    uint8_t nkey;
    uint16_t it_flags;              /* RS_KEEP_FLAGS */
    uint32_t flags;
    uint32_t nbytes;
    uint32_t read_count;            /* the access field's readCount */
    int64_t exptime;                /* unix seconds; 0: never */
    uint64_t idle;                  /* seconds since the last access */
    uint64_t cas;
    uint64_t ref;                   /* NVM: slot | class; SSD: reference */
    uint64_t seq;                   /* NVM, SSD: the tuple's write sequence */
};

/* With a tier key the records of a chunk are sealed (tac/crypt.h): len
 * clear bytes become len bytes of ciphertext and TAC_SEAL_BYTES of nonce
 * and tag, with len and count as authenticated data; crc covers them all. */
struct rs_chunk {
    uint32_t len;                   /* bytes of records after this; 0 ends */
    uint32_t count;
    uint32_t crc;                   /* CRC32C of those bytes */
    uint32_t pad;
};
#define RS_CHUNK_AAD offsetof(struct rs_chunk, crc)

/* Flags a record keeps.  ITEM_WAS_LOWER among them: a DRAM item brought up
 * from NVM or SSD may still have its version there, and an overwrite or
 * delete after the restart must record an invalidation for it, or a crash
 * would bring that copy back. */
#define RS_KEEP_FLAGS (ITEM_FETCHED | ITEM_ACTIVE | ITEM_TOKEN_SENT | ITEM_STALE | \
                       ITEM_WAS_LOWER | ITEM_CAPPED)

enum rs_state { RS_OFF, RS_NONE, RS_RUNNING, RS_DONE, RS_FAILED };

static struct {
    /* Progress, read by `stats` (relaxed atomics). */
    int state;
    uint64_t items, bytes, dropped, stale, refused;
    uint64_t started_ns, took_ns;

    /* After a crash: the scan's copies of the journal's maps, and the
     * write sequence of each key linked so far (newest wins). */
    bool crash;
    uint8_t *nvm_map;
    uint32_t *ssd_table;
    /* The seq linked so far per key hash, one table per item lock stripe,
     * under that stripe's lock (the scan threads and the replay). */
    struct util_u64map *seqs;
    bool meta_short;                    /* atomic: DRAM ran out for meta tuples */
    uint64_t scan_next;                 /* atomic: the next page to scan */
    uint64_t ssd_t0, ssd_t1, ssd_bytes; /* atomic: the SSD part's span and reads */

    /* The file being read, and what of it may be used. */
    int fd;
    struct rs_header hdr;
    bool nvm_ok, ssd_ok;
    /* With -o dram_log: the state being restored, kept as FILE.restoring
     * until the restore is over (see "Leftover state" below); NULL when
     * none is in use. */
    char *left;
    pthread_t thread;
    bool pending;                   /* prepared: the thread has work */
    bool thread_running;

    /* A stop in progress. */
    char *path, *tmp;
    FILE *out;
    bool out_failed;
    struct rs_header save;
    char *chunk;
    size_t chunk_len;
    uint32_t chunk_count;
    uint64_t *nvm_refs;
    size_t nvm_n, nvm_cap;
    uint64_t *ssd_live;             /* [npages] */
    uint64_t off;                   /* bytes written so far */
    uint64_t lost;                  /* items not saved: unwritten or damaged */
    bool nvm_anon;                  /* NVM is anonymous memory (numa:N) */
    unsigned next_part;
} rs = { .fd = -1, .ssd_t0 = UINT64_MAX };

static void leftover_prepare(const char *path);
static void leftover_remove(const char *path);

#ifdef TAC_DEBUG_HOOKS
/* Test hooks, so that a test can act while a restart is under way:
 * TAC_DEBUG_RESTORE_DELAY_MS holds each chunk of a graceful restore back,
 * TAC_DEBUG_SCAN_DELAY_MS each SSD page of a crash scan (before it is
 * read, so that the NVM pages are all scanned first).
 * TAC_DEBUG_SCAN_NO_JOURNAL=1 makes the crash scan ask the journal
 * nothing, as if every record were lost: every valid copy on the media is
 * a candidate and only sequences order them (test_crash_order).
 * TAC_DEBUG_REPLAY_NO_ROOM=KEY makes the DRAM log replay find no room for
 * KEY's records, as link_back does when no tier frees any for 2 s. */
static long debug_restore_ms, debug_scan_ms;
static bool debug_scan_no_journal;
static const char *debug_no_room_key;

static long debug_env_ms(const char *name, const char *what)
{
    const char *v = getenv(name);
    long ms = v != NULL ? strtol(v, NULL, 10) : 0;
    if (ms <= 0)
        return 0;
    fprintf(stderr, "debug hook: %s is held back %ld ms\n", what, ms);
    return ms;
}

static void debug_restore_init(void)
{
    debug_restore_ms = debug_env_ms("TAC_DEBUG_RESTORE_DELAY_MS", "each chunk of a restore");
    debug_scan_ms = debug_env_ms("TAC_DEBUG_SCAN_DELAY_MS", "each SSD page of a crash scan");
    const char *v = getenv("TAC_DEBUG_SCAN_NO_JOURNAL");
    debug_scan_no_journal = v != NULL && strcmp(v, "1") == 0;
    if (debug_scan_no_journal)
        fprintf(stderr, "debug hook: the crash scan asks the journal nothing\n");
    debug_no_room_key = getenv("TAC_DEBUG_REPLAY_NO_ROOM");
    if (debug_no_room_key != NULL)
        fprintf(stderr, "debug hook: the DRAM log replay finds no room for %s\n",
                debug_no_room_key);
}

static bool debug_replay_no_room(const char *key, size_t nkey)
{
    return debug_no_room_key != NULL && strlen(debug_no_room_key) == nkey &&
           memcmp(debug_no_room_key, key, nkey) == 0;
}

static void debug_restore_delay(void)
{
    if (debug_restore_ms > 0)
        usleep((useconds_t)debug_restore_ms * 1000);
}

static void debug_scan_delay(void)
{
    if (debug_scan_ms > 0)
        usleep((useconds_t)debug_scan_ms * 1000);
}
#else
static void debug_restore_init(void) {}
static void debug_restore_delay(void) {}
static void debug_scan_delay(void) {}
static const bool debug_scan_no_journal = false;
static bool debug_replay_no_room(const char *key, size_t nkey) { (void)key; (void)nkey; return false; }
#endif


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

/* ---- Where the state lives ---------------------------------------------- */

/* -e FILE; else FILE.state beside the SSD file, else beside the NVM file,
 * when that is a regular file (not a device or numa:N).  NULL: none. */
static char *state_path(void)
{
    if (settings.memory_file != NULL)
        return strdup(settings.memory_file);
    const char *base = NULL;
    struct stat st;
    if (settings.ssd_file != NULL && stat(settings.ssd_file, &st) == 0 &&
        S_ISREG(st.st_mode))
        base = settings.ssd_file;
    else if (settings.nvm_file != NULL && strncmp(settings.nvm_file, "numa:", 5) != 0 &&
             stat(settings.nvm_file, &st) == 0 && S_ISREG(st.st_mode))
        base = settings.nvm_file;
    if (base == NULL)
        return NULL;
    size_t n = strlen(base) + sizeof(".state");
    char *p = malloc(n);
    if (p != NULL)
        snprintf(p, n, "%s.state", base);
    return p;
}

static uint32_t header_crc(const struct rs_header *h)
{
    return util_crc32c(0, h, offsetof(struct rs_header, checksum));
}

/* ---- Saving (a graceful stop) ------------------------------------------- */

static void out_write(const void *p, size_t n)
{
    if (rs.out_failed || n == 0)
        return;
    if (fwrite(p, 1, n, rs.out) != n)
        rs.out_failed = true;
    rs.off += n;
}

/* Writes a chunk of count records: the n pieces of iov, len bytes. */
static void chunk_write(const struct iovec *iov, int n, size_t len, uint32_t count)
{
    struct rs_chunk c = { (uint32_t)len, count, 0, 0 };
    if (!tac_crypt_on()) {
        for (int i = 0; i < n; i++)
            c.crc = util_crc32c(c.crc, iov[i].iov_base, iov[i].iov_len);
        out_write(&c, sizeof(c));
        for (int i = 0; i < n; i++)
            out_write(iov[i].iov_base, iov[i].iov_len);
        return;
    }
    char *sealed = malloc(len + TAC_SEAL_BYTES);
    if (sealed == NULL) {
        rs.out_failed = true;
        return;
    }
    tac_crypt_seal(&c, RS_CHUNK_AAD, iov, n, sealed);
    c.crc = util_crc32c(0, sealed, len + TAC_SEAL_BYTES);
    out_write(&c, sizeof(c));
    out_write(sealed, len + TAC_SEAL_BYTES);
    free(sealed);
}

static void chunk_flush(void)
{
    if (rs.chunk_count == 0)
        return;
    struct iovec one = { rs.chunk, rs.chunk_len };
    chunk_write(&one, 1, rs.chunk_len, rs.chunk_count);
    rs.chunk_len = 0;
    rs.chunk_count = 0;
}

/* Appends one record; a record larger than a chunk gets a chunk of its own. */
static void chunk_add(const struct rs_rec *r, const char *key, const char *value)
{
    size_t vlen = r->tier == TIER_DRAM ? r->nbytes : 0;
    size_t len = sizeof(*r) + r->nkey + vlen;
    if (rs.chunk_len + len > RS_CHUNK)
        chunk_flush();
    if (len > RS_CHUNK || len > UINT32_MAX - sizeof(struct rs_chunk) - TAC_SEAL_BYTES) {
        struct iovec iov[3] = {
            { (void *)r, sizeof(*r) },
            { (void *)key, r->nkey },
            { (void *)value, vlen },
        };
        chunk_write(iov, 3, len, 1);
        return;
    }
    memcpy(rs.chunk + rs.chunk_len, r, sizeof(*r));
    memcpy(rs.chunk + rs.chunk_len + sizeof(*r), key, r->nkey);
    if (vlen > 0)
        memcpy(rs.chunk + rs.chunk_len + sizeof(*r) + r->nkey, value, vlen);
    rs.chunk_len += len;
    rs.chunk_count++;
}

static bool nvm_ref_push(uint64_t v)
{
    if (rs.nvm_n == rs.nvm_cap) {
        size_t cap = rs.nvm_cap ? rs.nvm_cap * 2 : 4096;
        uint64_t *n = realloc(rs.nvm_refs, cap * sizeof(*n));
        if (n == NULL)
            return false;
        rs.nvm_refs = n;
        rs.nvm_cap = cap;
    }
    rs.nvm_refs[rs.nvm_n++] = v;
    return true;
}

/* arg: the pass; lower-tier items (true) or DRAM items (false). */
static void save_item(item *it, void *arg)
{
    bool lower = *(const bool *)arg;
    /* NVM on a NUMA node (anonymous memory) dies with the process: its
     * items are saved whole, after the DRAM items, and come back through
     * DRAM into whatever tier has room. */
    bool whole_nvm = rs.nvm_anon && (it->it_flags & ITEM_META) && it->tier == TIER_NVM;
    bool in_pass = whole_nvm ? !lower : lower == ((it->it_flags & ITEM_META) != 0);
    if (!in_pass || (it->it_flags & ITEM_TRANSIENT) || item_is_dead(it, NULL))
        return;
    rel_time_t now = mc_now();
    uint32_t access = __atomic_load_n(&it->access, __ATOMIC_RELAXED);
    struct rs_rec r;
    memset(&r, 0, sizeof(r));
    r.tier = it->tier;
    r.nkey = it->nkey;
    r.it_flags = it->it_flags & RS_KEEP_FLAGS;
    r.flags = it->flags;
    r.nbytes = it->nbytes;
    r.read_count = access & LLRU_COUNT_MASK;
    r.exptime = it->exptime == 0 ? 0 : (int64_t)process_started + it->exptime;
    rel_time_t t = item_time(it);
    r.idle = now > t ? now - t : 0;
    r.cas = it->cas;
    r.seq = (it->it_flags & ITEM_META) ? item_meta_seq(it) : 0;
    const char *value = NULL;
    if (!(it->it_flags & ITEM_META)) {
        r.tier = TIER_DRAM;
        value = ITEM_data(it);
    } else if (whole_nvm) {
        struct tac_tuple_hdr hdr;
        const char *key = tac_nvm_tuple_checked(it, &hdr, NULL);
        if (key == NULL) {
            rs.lost++;          /* damaged: counted in tuple_checksum_failures */
            return;
        }
        r.tier = TIER_DRAM;
        value = key + hdr.nkey;
    } else if (it->tier == TIER_NVM) {
        if (tac.nvm == NULL)
            return;
        r.ref = item_meta_ref(it) | it->lru_cls;
        if (!nvm_ref_push(r.ref)) {
            rs.out_failed = true;
            return;
        }
    } else {
        uint64_t ref = item_meta_ref(it);
        size_t len = tac_tuple_size(it->nkey, it->nbytes);
        if (tac.ssd == NULL || ref == 0)
            return;
        if (!tac_ssd_written(ref, len)) {
            rs.lost++;          /* its buf never reached the device */
            return;
        }
        rs.ssd_live[ssd_ref_page(ref)] += ssd_live_len(tac.ssd, len);
        r.ref = ref;
    }
    rs.save.items[r.tier]++;
    chunk_add(&r, ITEM_key(it), value);
}

static void save_ssd_section(void)
{
    struct ssd_info info;
    ssd_get_info(tac.ssd, &info);
    uint32_t *used = calloc(info.bufs_per_page, sizeof(uint32_t));
    uint32_t *first = calloc(info.bufs_per_page, sizeof(uint32_t));
    if (used == NULL || first == NULL) {
        rs.out_failed = true;
    } else {
        uint32_t crc = 0;
        for (unsigned p = 0; p < info.npages; p++) {
            struct ssd_page_state st;
            if (rs.ssd_live[p] == 0 || !ssd_page_export(tac.ssd, p, &st, used, first))
                continue;
            struct rs_page rp = { st.page, st.version, 0, st.seq, rs.ssd_live[p] };
            size_t n = info.bufs_per_page * sizeof(uint32_t);
            out_write(&rp, sizeof(rp));
            out_write(used, n);
            out_write(first, n);
            crc = util_crc32c(crc, &rp, sizeof(rp));
            crc = util_crc32c(crc, used, n);
            crc = util_crc32c(crc, first, n);
            rs.save.ssd_count++;
        }
        rs.save.ssd_crc = crc;
    }
    free(used);
    free(first);
}

static void save_abandon(void)
{
    if (rs.out != NULL)
        fclose(rs.out);
    rs.out = NULL;
    if (rs.tmp != NULL)
        unlink(rs.tmp);
}

bool tac_restart_save(void)
{
    free(rs.path);                  /* the path a crash recovery read */
    rs.path = state_path();
    if (rs.path == NULL)
        return false;
    size_t n = strlen(rs.path) + sizeof(".tmp");
    rs.tmp = malloc(n);
    rs.chunk = malloc(RS_CHUNK);
    if (rs.tmp == NULL || rs.chunk == NULL)
        goto fail;
    snprintf(rs.tmp, n, "%s.tmp", rs.path);
    /* A fresh file of our own (util_open_private): whatever lies at the
     * temporary path, a link planted there included, is removed first. */
    if (unlink(rs.tmp) != 0 && errno != ENOENT)
        fprintf(stderr, "restart: cannot remove %s: %s\n", rs.tmp, strerror(errno));
    int tfd = util_open_private(rs.tmp, O_WRONLY | O_CREAT | O_EXCL, NULL);
    rs.out = tfd >= 0 ? fdopen(tfd, "w") : NULL;
    if (rs.out == NULL && tfd >= 0)
        close(tfd);
    if (rs.out == NULL) {
        fprintf(stderr, "restart: cannot write %s: %s; the next start will "
                "be empty\n", rs.tmp, strerror(errno));
        goto fail;
    }
    if (tac.ssd != NULL) {
        struct ssd_info info;
        ssd_get_info(tac.ssd, &info);
        tac_ssd_flush();
        rs.ssd_live = calloc(info.npages, sizeof(uint64_t));
        if (rs.ssd_live == NULL)
            goto fail;
    }
    memset(&rs.save, 0, sizeof(rs.save));
    if (tac.nvm != NULL) {
        struct nvm_info info;
        nvm_get_info(tac.nvm, &info);
        rs.nvm_anon = strcmp(info.backing, "numa") == 0;
    }
    char zero[RS_HDR_SIZE] = { 0 };
    out_write(zero, sizeof(zero));
    rs.save.rec_off = rs.off;
    /* Lower-tier items first: a restart links their small meta tuples
     * before DRAM fills with whole items, which can move down when it does. */
    bool lower = true;
    assoc_each(save_item, &lower);
    CRASH_POINT(restart_save_lower);
    lower = false;
    assoc_each(save_item, &lower);
    chunk_flush();
    CRASH_POINT(restart_save_dram);
    struct rs_chunk end = { 0, 0, 0, 0 };
    out_write(&end, sizeof(end));
    if (tac.nvm != NULL && !rs.nvm_anon) {
        rs.save.nvm_off = rs.off;
        rs.save.nvm_count = rs.nvm_n;
        rs.save.nvm_crc = util_crc32c(0, rs.nvm_refs, rs.nvm_n * sizeof(uint64_t));
        out_write(rs.nvm_refs, rs.nvm_n * sizeof(uint64_t));
    }
    if (tac.ssd != NULL) {
        rs.save.ssd_off = rs.off;
        save_ssd_section();
    }
    if (rs.lost > 0)
        fprintf(stderr, "restart: %llu items are not saved: SSD bufs that could "
                "not be written, or damaged NVM tuples\n", (unsigned long long)rs.lost);
    if (rs.out_failed || fflush(rs.out) != 0 || fsync(fileno(rs.out)) != 0) {
        fprintf(stderr, "restart: writing %s failed (%s); the next start will "
                "be empty\n", rs.tmp, strerror(errno ? errno : EIO));
        goto fail;
    }
    CRASH_POINT(restart_save_synced);
    rs.save.last_cas = item_last_cas();
    rs.save.last_seq = tac_tuple_last_seq();
    if (tac.nvm != NULL) {
        struct nvm_info info;
        nvm_get_info(tac.nvm, &info);
        rs.save.nvm_open_count = info.open_count;
        rs.save.nvm_capacity = info.capacity;
    }
    if (tac.ssd != NULL) {
        struct ssd_info info;
        ssd_get_info(tac.ssd, &info);
        rs.save.ssd_size = info.size;
        rs.save.ssd_page_size = info.page_size;
        rs.save.ssd_buf_size = info.buf_size;
    }
    return true;
fail:
    save_abandon();
    return false;
}

void tac_restart_commit(bool nvm_clean, uint64_t ssd_generation)
{
    if (rs.out == NULL)
        return;
    struct rs_header *h = &rs.save;
    memcpy(h->magic, RS_MAGIC, sizeof(h->magic));
    h->version = RS_VERSION;
    h->header_size = sizeof(*h);
    memcpy(h->key_check, tac_crypt_key_check(), sizeof(h->key_check));
    h->stop_time = (int64_t)time(NULL);
    h->hashpower = assoc_hashpower();
    /* A tier that did not close clean keeps nothing: its records are
     * dropped at the next start. */
    if (!nvm_clean)
        h->nvm_open_count = 0;
    h->ssd_generation = ssd_generation;
    h->checksum = header_crc(h);
    bool ok = fseek(rs.out, 0, SEEK_SET) == 0 &&
              fwrite(h, sizeof(*h), 1, rs.out) == 1 &&
              fflush(rs.out) == 0 && fsync(fileno(rs.out)) == 0;
    ok = fclose(rs.out) == 0 && ok;
    rs.out = NULL;
    if (ok && rename(rs.tmp, rs.path) == 0) {
        CRASH_POINT(restart_state_rename);
        char *dir = strdup(rs.path);
        int dfd = dir != NULL ? open(dirname(dir), O_RDONLY | O_DIRECTORY) : -1;
        if (dfd >= 0) {
            (void)fsync(dfd);
            close(dfd);
        }
        free(dir);
        fprintf(stderr, "restart: saved %llu DRAM, %llu NVM and %llu SSD items "
                "to %s\n", (unsigned long long)h->items[TIER_DRAM],
                (unsigned long long)h->items[TIER_NVM],
                (unsigned long long)h->items[TIER_SSD], rs.path);
    } else {
        fprintf(stderr, "restart: cannot write %s (%s); the next start will be "
                "empty\n", rs.path, strerror(errno));
        unlink(rs.tmp);
    }
}


/* ---- Loading (the next start) ------------------------------------------- */

static bool read_at(void *buf, size_t n, uint64_t off)
{
    char *p = buf;
    while (n > 0) {
        ssize_t got = pread(rs.fd, p, n, (off_t)off);
        if (got <= 0) {
            if (got < 0 && errno == EINTR)
                continue;
            return false;
        }
        p += got;
        n -= (size_t)got;
        off += (uint64_t)got;
    }
    return true;
}

/* Reads a section of n bytes at off whose CRC32C must be crc; NULL when
 * it cannot be read, does not match, or DRAM is short. */
static void *read_section(uint64_t off, size_t n, uint32_t crc)
{
    void *buf = malloc(n > 0 ? n : 1);
    if (buf != NULL && (!read_at(buf, n, off) || util_crc32c(0, buf, n) != crc)) {
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
    return memcmp(h->magic, RS_MAGIC, sizeof(h->magic)) == 0 &&
           h->version == RS_VERSION && h->header_size == sizeof(*h) &&
           h->checksum == header_crc(h) &&
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
    if (!read_at(&rs.hdr, sizeof(rs.hdr), 0) || !header_usable(&rs.hdr)) {
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

/* The crash path: with a journal that describes the tier files, every NVM
 * slot of a page some class held and every SSD page with a written buf is
 * taken away from the allocators before anything is served; the scan
 * (crash_scan) gives back what holds no live tuple. */
static bool crash_prepare(void)
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

void tac_restart_prepare(void)
{
    stats_register();
    debug_restore_init();
    char *path = state_path();
    (void)tac_journal_open(path);
    if (!settings.recovery) {
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
    } else if (tiers_hold_data() && tac_journal_matched() && crash_prepare()) {
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

static void count(uint64_t *c)
{
    __atomic_add_fetch(c, 1, __ATOMIC_RELAXED);
}

/* A unix exptime on the server clock (0: never); false when it has passed. */
static bool exptime_ahead(int64_t unix_exp, rel_time_t *out)
{
    *out = 0;
    if (unix_exp == 0)
        return true;
    int64_t rel = unix_exp - (int64_t)process_started;
    if (rel <= (int64_t)mc_now())
        return false;
    *out = rel > UINT32_MAX ? UINT32_MAX : (rel_time_t)rel;
    return true;
}

/* A DRAM-layout item holding only what item_alloc_meta copies: key and
 * metadata. */
union meta_src {
    item it;
    char raw[sizeof(item) + KEY_MAX_LENGTH + 1];
};

/* The unlinked meta tuple (refcount 1) for a tuple at ref in tier (NVM
 * slot class cls), described by src; NULL when DRAM has no chunk. */
/* A key's two hashes: tac_key_hash64 holds item_hash in its low half
 * unless both halves were 0, or it is keyed (tier_key). */
static uint64_t key_hashes(const char *key, size_t nkey, uint32_t *hv)
{
    uint64_t kh = tac_key_hash64(key, nkey);
    *hv = kh != 1 && !tac_crypt_on() ? (uint32_t)kh : item_hash(key, nkey);
    return kh;
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

#define META_TRIES 100

static item *meta_for(union meta_src *m, enum item_tier tier, uint64_t ref,
                      unsigned cls, const char *key, uint64_t seq)
{
    item *src = &m->it;
    src->tier = TIER_DRAM;              /* the full layout: key in data */
    memcpy(src->data, key, src->nkey);
    src->data[src->nkey] = '\0';
    /* DRAM can be short for a moment (a slab page on its way to another
     * class) or for good (more keys than -m indexes): a few retries 1 ms
     * apart, and none once they all failed. */
    for (int tries = 0;; tries++) {
        int part = (int)(__atomic_fetch_add(&rs.next_part, 1, __ATOMIC_RELAXED) %
                         (unsigned)settings.partitions);
        item *it = tier == TIER_NVM ? item_alloc_meta(src, TIER_NVM, cls, ref, part, false)
                                    : tac_ssd_meta_adopt(src, ref, part);
        if (it != NULL)
            item_set_meta_seq(it, seq);
        if (it != NULL || __atomic_load_n(&rs.meta_short, __ATOMIC_RELAXED))
            return it;
        if (tries == META_TRIES) {
            __atomic_store_n(&rs.meta_short, true, __ATOMIC_RELAXED);
            return NULL;
        }
        usleep(1000);
    }
}

/* Links `it`, brought back for key, with the CAS, access and time it had:
 * a meta tuple or DRAM item at once; a staging item (DRAM is full) through
 * a store into a lower tier, which waits for room as a client's store
 * would (up to about 2 s).  Item lock held; the caller checked that the
 * key is to be linked.  1: linked; 0: the key was written meanwhile; -1:
 * no room. */
static int link_back(item *it, const char *key, size_t nkey, uint32_t hv,
                     int part, uint64_t cas, uint32_t access, rel_time_t t,
                     uint16_t keep_flags)
{
    if (!(it->it_flags & ITEM_STAGING)) {
        it->cas = cas;
        it->access = access;
        if (!item_compact(it))          /* a compact item has no time */
            it->time = t;
        it->it_flags |= keep_flags;
        do_item_link(it, hv, true);
        return 1;
    }
    enum store_result res;
    it->cas = cas;                      /* the staged tuple holds it too */
    for (int tries = 0;
         (res = do_item_store(it, STORE_ADD, 0, NULL, hv, part)) == STORE_NO_MEMORY &&
         tries < 400; tries++) {
        item_unlock(hv);
        usleep(5000);
        item_lock(hv);
        if (do_item_recovery_written(key, nkey, hv) || assoc_find(key, nkey, hv) != NULL)
            return 0;
    }
    if (res != STORE_STORED)
        return res == STORE_NOT_STORED ? 0 : -1;
    item *l = assoc_find(key, nkey, hv);
    if (l != NULL) {
        l->cas = cas;
        l->access = access;
        if (!item_compact(l))
            l->time = t;
    }
    return 1;
}

/* Brings one record back: linked if its key is still untouched. */
static void restore_record(const struct rs_rec *r, const char *key, const char *value)
{
    if ((r->tier == TIER_NVM && !rs.nvm_ok) || (r->tier == TIER_SSD && !rs.ssd_ok)) {
        count(&rs.dropped);
        return;
    }
    rel_time_t now = mc_now();
    rel_time_t exptime;
    if (!exptime_ahead(r->exptime, &exptime)) {
        count(&rs.stale);               /* expired while the server was down */
        record_release(r);
        return;
    }
    rel_time_t t = r->idle < now ? now - (rel_time_t)r->idle : 1;
    uint32_t access = ((t & LLRU_TIME_MASK) << 8) | (r->read_count & LLRU_COUNT_MASK);
    int part = (int)(rs.next_part % (unsigned)settings.partitions);
    uint32_t hv = item_hash(key, r->nkey);

    item *it;
    if (r->tier == TIER_DRAM) {
        rs.next_part++;
        it = item_alloc(key, r->nkey, r->flags, exptime, r->nbytes, part);
        if (it != NULL && (it->it_flags & ITEM_STAGING) && (r->it_flags & ITEM_STALE)) {
            /* No DRAM for a stale-marked item: staged, it would become a
             * tuple without the mark, served fresh (and fresh after a
             * crash).  It is dropped: a miss, as after a crash. */
            item_release(it);
            count(&rs.stale);
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
             ? meta_for(&m, TIER_NVM, r->ref & ~(uint64_t)0xff,
                        (unsigned)(r->ref & 0xff), key, r->seq)
             : meta_for(&m, TIER_SSD, r->ref, 0, key, r->seq);
    }
    if (it == NULL) {
        count(&rs.dropped);             /* no DRAM for it */
        record_release(r);
        return;
    }
    item_lock(hv);
    int res = 0;
    if (!do_item_recovery_written(key, r->nkey, hv) && assoc_find(key, r->nkey, hv) == NULL)
        res = link_back(it, key, r->nkey, hv, part, r->cas, access, t,
                        r->it_flags & RS_KEEP_FLAGS);
    bool linked = res > 0;
    count(res < 0 ? &rs.dropped : res == 0 ? &rs.stale : &rs.items);
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
    if (r->nbytes > (uint64_t)settings.item_size_max + 2 ||
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
            r.nbytes < 2 || (size_t)(end - p) - sizeof(r) < (size_t)r.nkey + vlen)
            return false;
        const char *key = p + sizeof(r);
        if (record_sane(&r, key + r.nkey))
            fn(&r, key, key + r.nkey);
        else
            count(&rs.refused);
        p = key + r.nkey + vlen;
    }
    return p == end;
}

/* ---- The scan after a crash ---------------------------------------------- */

/* The seq slot of key hash kh (item hash hv) in the table of keys linked
 * so far; NULL when the table cannot grow.  hv's item lock held. */
static uint64_t *seq_slot(uint64_t kh, uint32_t hv)
{
    return rs.seqs != NULL ? util_u64map_slot(&rs.seqs[hv & ITEM_LOCK_MASK], kh, ITEM_LOCK_POWER)
                           : NULL;
}

/* The seq linked for the key so far (0: none; UINT64_MAX: the table cannot
 * grow, link nothing), and setting it.  hv's item lock held. */
static uint64_t seq_seen(uint64_t kh, uint32_t hv)
{
    uint64_t *p = seq_slot(kh, hv);
    return p != NULL ? *p : UINT64_MAX;
}

static void seq_set(uint64_t kh, uint32_t hv, uint64_t seq)
{
    uint64_t *p = seq_slot(kh, hv);
    if (p != NULL)
        *p = seq;
}

/* Allocates the tables, each with room for about n / stripes keys. */
static bool seqs_init(uint64_t n)
{
    rs.seqs = calloc(ITEM_LOCK_COUNT, sizeof(*rs.seqs));
    if (rs.seqs == NULL)
        return false;
    for (uint32_t i = 0; i < ITEM_LOCK_COUNT && n > 0; i++)
        (void)util_u64map_reserve(&rs.seqs[i], n / ITEM_LOCK_COUNT + 1, ITEM_LOCK_POWER);
    return true;
}

static void seqs_free(void)
{
    if (rs.seqs == NULL)
        return;
    for (uint32_t i = 0; i < ITEM_LOCK_COUNT; i++)
        util_u64map_free(&rs.seqs[i]);
    free(rs.seqs);
    rs.seqs = NULL;
}

/* A tuple found by the scan, checksum verified: linked as its key's item
 * unless the journal says it is dead, it expired, a newer copy is linked
 * already, or the key was written during recovery. */
static void scan_tuple(enum item_tier tier, uint64_t ref, unsigned cls,
                       const struct tac_tuple_hdr *hp, const char *key,
                       uint64_t kh, uint32_t hv)
{
    struct tac_tuple_hdr h = *hp;
    size_t len = tac_tuple_size(h.nkey, h.nbytes);
    item *it = NULL;
    rel_time_t exptime;
    /* The journal may hold a shorter life for it than its header. */
    uint64_t unix_exp = h.exptime;
    if ((!debug_scan_no_journal && tac_journal_check_h(kh, h.seq, &unix_exp)) ||
        !exptime_ahead((int64_t)unix_exp, &exptime))
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
    it = meta_for(&m, tier, ref, cls, key, h.seq);
    if (it == NULL) {
        count(&rs.dropped);             /* no DRAM for its meta tuple */
        goto release;
    }
    /* The meta tuple's release marks the tuple dead; count it live first. */
    if (tier == TIER_SSD)
        (void)ssd_adopt_tuple(tac.ssd, ref, len);
    item_lock(hv);
    uint64_t seen = seq_seen(kh, hv);
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
        seq_set(kh, hv, h.seq);
        count(&rs.items);
        __atomic_add_fetch(&rs.bytes, h.nbytes, __ATOMIC_RELAXED);
    }
    item_unlock(hv);
    if (link && old != NULL) {
        __atomic_sub_fetch(&rs.items, 1, __ATOMIC_RELAXED);
        count(&rs.stale);
    } else if (!link) {
        count(&rs.stale);
    }
    item_release(it);               /* unlinked: frees its slot */
    return;
skip:
    count(&rs.stale);
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
static void replay_record(const char *tuple, void *arg)
{
    (void)arg;
    struct tac_tuple_hdr h;
    memcpy(&h, tuple, sizeof(h));
    const char *key = tuple + sizeof(h);
    rel_time_t exptime;
    uint64_t unix_exp = h.exptime;      /* the journal may hold a shorter life */
    if (tac_journal_check_h(tac_key_hash64(key, h.nkey), h.seq, &unix_exp)) {
        count(&rs.stale);
        return;
    }
    if (!exptime_ahead((int64_t)unix_exp, &exptime)) {
        /* Expired, but newer than a copy linked for its key: that copy is
         * an older version, which the log does not invalidate when this
         * one replaced it (items.c, superseded_in_log). */
        uint32_t hv;
        uint64_t kh = key_hashes(key, h.nkey, &hv);
        item_lock(hv);
        uint64_t seen = seq_seen(kh, hv);
        if (!do_item_recovery_written(key, h.nkey, hv) && seen != UINT64_MAX &&
            h.seq > seen) {
            item *old = assoc_find(key, h.nkey, hv);
            if (old != NULL) {
                do_item_unlink(old, hv);
                __atomic_sub_fetch(&rs.items, 1, __ATOMIC_RELAXED);
                count(&rs.stale);
            }
            seq_set(kh, hv, h.seq);
        }
        item_unlock(hv);
        count(&rs.stale);
        return;
    }
    rel_time_t now = mc_now();
    int64_t tt = (int64_t)h.time - (int64_t)process_started;
    rel_time_t t = tt < 1 ? 1 : tt > (int64_t)now ? now : (rel_time_t)tt;
    int part = (int)(__atomic_fetch_add(&rs.next_part, 1, __ATOMIC_RELAXED) %
                     (unsigned)settings.partitions);
    item *it = item_alloc(key, h.nkey, h.flags, exptime, h.nbytes, part);
    if (it == NULL) {
        count(&rs.dropped);
        return;
    }
    memcpy(ITEM_data(it), key + h.nkey, h.nbytes);
    uint64_t kh = tac_key_hash64(key, h.nkey);
    uint32_t hv = item_hash(key, h.nkey);
    item_lock(hv);
    uint64_t seen = seq_seen(kh, hv);
    item *old = assoc_find(key, h.nkey, hv);
    int res = 0;
    if (!do_item_recovery_written(key, h.nkey, hv) && seen != UINT64_MAX && h.seq > seen) {
        if (old != NULL) {
            do_item_unlink(old, hv);    /* an older copy found earlier */
            __atomic_sub_fetch(&rs.items, 1, __ATOMIC_RELAXED);
            count(&rs.stale);
        }
        /* The older copy goes first, even if this one then finds no
         * room: the key is lost rather than served older than a write
         * that was acknowledged (issue 37 item 5). */
        res = debug_replay_no_room(key, h.nkey)
              ? -1 : link_back(it, key, h.nkey, hv, part,
                               h.cas != 0 ? h.cas : item_next_cas(),
                               (t & LLRU_TIME_MASK) << 8, t, 0);
        if (res != 0)
            seq_set(kh, hv, h.seq);     /* linked, or lost: nothing older after it */
    }
    item_unlock(hv);
    count(res < 0 ? &rs.dropped : res == 0 ? &rs.stale : &rs.items);
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
            uint64_t kh = key_hashes(tuple + sizeof(h), h.nkey, &hv);
            scan_tuple(TIER_SSD, tref, 0, &h, tuple + sizeof(h), kh, hv);
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
    e->kh = key_hashes(tuple + sizeof(h), h.nkey, &e->hv);
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
        scan_tuple(TIER_SSD, b->e[i].ref, 0, &h, b->e[i].tuple + sizeof(h),
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
            uint64_t kh = key_hashes(key, h.nkey, &hv);
            scan_tuple(TIER_NVM, ref, cls, &h, key, kh, hv);
            continue;
        }
        /* A freed slot reads as version 0; anything else that was a tuple
         * once is damaged. */
        if (h.version == (tac_tuple_sealed() ? TAC_TUPLE_VERSION_SEALED
                                             : TAC_TUPLE_VERSION))
            count(&rs.dropped);
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
    debug_scan_delay();
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
static void scan_reserve(void)
{
    uint64_t n = tac_journal_items_hint();
    uint64_t most = settings.maxbytes / 64;
    if (n > most)
        n = most;
    if (!seqs_init(n))
        fprintf(stderr, "restart: no memory for the scan's table of sequences; "
                "nothing will be linked\n");
    if (n == 0)
        return;
    assoc_reserve(n);
}

static void crash_scan(void)
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
    uint64_t kh = key_hashes(key, r->nkey, &hv);
    if (!exptime_ahead(r->exptime, &exptime) || tac_journal_dead_h(kh, seq)) {
        count(&rs.stale);
        return;
    }
    rel_time_t now = mc_now();
    rel_time_t t = r->idle < now ? now - (rel_time_t)r->idle : 1;
    uint32_t access = ((t & LLRU_TIME_MASK) << 8) | (r->read_count & LLRU_COUNT_MASK);
    int part = (int)(__atomic_fetch_add(&rs.next_part, 1, __ATOMIC_RELAXED) %
                     (unsigned)settings.partitions);
    item *it = item_alloc(key, r->nkey, r->flags, exptime, r->nbytes, part);
    if (it == NULL) {
        count(&rs.dropped);
        return;
    }
    memcpy(ITEM_data(it), value, r->nbytes);
    item_lock(hv);
    uint64_t seen = seq_seen(kh, hv);
    int res = 0;
    if (!do_item_recovery_written(key, r->nkey, hv) && seen != UINT64_MAX && seq > seen &&
        assoc_find(key, r->nkey, hv) == NULL) {
        res = link_back(it, key, r->nkey, hv, part, r->cas, access, t,
                        r->it_flags & RS_KEEP_FLAGS);
        if (res > 0)
            seq_set(kh, hv, seq);
    }
    item_unlock(hv);
    count(res < 0 ? &rs.dropped : res == 0 ? &rs.stale : &rs.items);
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
        if (read_at(&rs.hdr, sizeof(rs.hdr), 0) && header_usable(&rs.hdr)) {
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
        if (!read_at(&c, sizeof(c), off)) {
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
        if (!read_at(buf, stored, off) || util_crc32c(0, buf, stored) != c.crc ||
            (tac_crypt_on() && !tac_crypt_open(&c, RS_CHUNK_AAD, buf, c.len, &clear, 1)) ||
            !restore_chunk(buf, c.len, c.count, fn)) {
            __atomic_add_fetch(&rs.dropped, c.count, __ATOMIC_RELAXED);
            ok = false;
            break;
        }
        CRASH_POINT(restart_restore_chunk);
        off += stored;
        debug_restore_delay();
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
        scan_reserve();
        if (rs.left != NULL) {
            (void)read_records(leftover_record);
            close(rs.fd);
            rs.fd = -1;
        }
        crash_scan();
        if (tac.ssd != NULL)
            ssd_unpin_all(tac.ssd);     /* pages a failed scan left */
        CRASH_POINT(restart_scan_done);
        tac_dramlog_replay(replay_record, NULL);
        seqs_free();
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
    if (rs.thread_running)
        pthread_join(rs.thread, NULL);
    rs.thread_running = false;
}

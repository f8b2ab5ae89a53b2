/*
 * tac/restart_common.c - what the files of a restart share (restart_int.h): the
 * state of the restart under way, where the state file lives, reading it,
 * and linking a recovered item back under its item lock.
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
#include "base/media_hdr.h"
#include "base/util.h"

MEDIA_PREFIX_CHECK(struct rs_header);

struct restart_state rs = { .fd = -1, .ssd_t0 = UINT64_MAX };

#ifdef TAC_DEBUG_HOOKS
/* Test hooks, so that a test can act while a restart is under way:
 * TAC_DEBUG_RESTORE_DELAY_MS holds each chunk of a graceful restore back,
 * TAC_DEBUG_SCAN_DELAY_MS each SSD page of a crash scan (before it is
 * read, so that the NVM pages are all scanned first).
 * TAC_DEBUG_SCAN_NO_JOURNAL=1 makes the crash scan ask the journal
 * nothing, as if every record were lost: every valid copy on the media is
 * a candidate and only sequences order them (test_crash_order).
 * TAC_DEBUG_REPLAY_NO_ROOM=KEY makes the DRAM log replay find no room for
 * KEY's records, as rs_link_back does when no tier frees any for 2 s. */
static long debug_restore_ms, debug_scan_ms;
static bool debug_no_journal;
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

void rs_debug_restore_init(void)
{
    debug_restore_ms = debug_env_ms("TAC_DEBUG_RESTORE_DELAY_MS", "each chunk of a restore");
    debug_scan_ms = debug_env_ms("TAC_DEBUG_SCAN_DELAY_MS", "each SSD page of a crash scan");
    const char *v = getenv("TAC_DEBUG_SCAN_NO_JOURNAL");
    debug_no_journal = v != NULL && strcmp(v, "1") == 0;
    if (debug_no_journal)
        fprintf(stderr, "debug hook: the crash scan asks the journal nothing\n");
    debug_no_room_key = getenv("TAC_DEBUG_REPLAY_NO_ROOM");
    if (debug_no_room_key != NULL)
        fprintf(stderr, "debug hook: the DRAM log replay finds no room for %s\n",
                debug_no_room_key);
}

bool rs_debug_scan_no_journal(void)
{
    return debug_no_journal;
}

bool rs_debug_replay_no_room(const char *key, size_t nkey)
{
    return debug_no_room_key != NULL && strlen(debug_no_room_key) == nkey &&
           memcmp(debug_no_room_key, key, nkey) == 0;
}

void rs_debug_restore_delay(void)
{
    if (debug_restore_ms > 0)
        usleep((useconds_t)debug_restore_ms * 1000);
}

void rs_debug_scan_delay(void)
{
    if (debug_scan_ms > 0)
        usleep((useconds_t)debug_scan_ms * 1000);
}
#else
void rs_debug_restore_init(void) {}
void rs_debug_restore_delay(void) {}
void rs_debug_scan_delay(void) {}
bool rs_debug_scan_no_journal(void) { return false; }
bool rs_debug_replay_no_room(const char *key, size_t nkey) { (void)key; (void)nkey; return false; }
#endif


/* ---- Where the state lives ---------------------------------------------- */

/* -e FILE; else FILE.state beside the SSD file, else beside the NVM file,
 * when that is a regular file (not a device or numa:N).  NULL: none. */
char *rs_state_path(void)
{
    if (tac.cfg.memory_file != NULL)
        return strdup(tac.cfg.memory_file);
    const char *base = NULL;
    struct stat st;
    if (tac.cfg.ssd_file != NULL && stat(tac.cfg.ssd_file, &st) == 0 &&
        S_ISREG(st.st_mode))
        base = tac.cfg.ssd_file;
    else if (tac.cfg.nvm_file != NULL && strncmp(tac.cfg.nvm_file, "numa:", 5) != 0 &&
             stat(tac.cfg.nvm_file, &st) == 0 && S_ISREG(st.st_mode))
        base = tac.cfg.nvm_file;
    if (base == NULL)
        return NULL;
    size_t n = strlen(base) + sizeof(".state");
    char *p = malloc(n);
    if (p != NULL)
        snprintf(p, n, "%s.state", base);
    return p;
}

uint32_t rs_header_crc(const struct rs_header *h)
{
    return media_crc(h, offsetof(struct rs_header, checksum));
}


/* ---- Loading (the next start) ------------------------------------------- */

bool rs_read_at(void *buf, size_t n, uint64_t off)
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

void rs_count(uint64_t *c)
{
    __atomic_add_fetch(c, 1, __ATOMIC_RELAXED);
}

/* A unix exptime on the server clock (0: never); false when it has passed. */
bool rs_exptime_ahead(int64_t unix_exp, rel_time_t *out)
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


/* A key's two hashes: tac_key_hash64 holds item_hash in its low half
 * unless both halves were 0, or it is keyed (tier_key). */
uint64_t rs_key_hashes(const char *key, size_t nkey, uint32_t *hv)
{
    uint64_t kh = tac_key_hash64(key, nkey);
    *hv = kh != 1 && !tac_crypt_on() ? (uint32_t)kh : item_hash(key, nkey);
    return kh;
}

#define META_TRIES 100

/* The unlinked meta tuple (refcount 1) for a tuple at ref in tier,
 * described by src; NULL when DRAM has no chunk. */
item *rs_meta_for(union meta_src *m, enum item_tier tier, uint64_t ref,
                  uint64_t fp, uint64_t seq)
{
    item *src = &m->it;
    src->tier = (uint8_t)tier;          /* the compact layout: fingerprint */
    item_set_meta_fp(src, fp);
    /* DRAM can be short for a moment (a slab page on its way to another
     * class) or for good (more keys than -m indexes): a few retries 1 ms
     * apart, and none once they all failed. */
    for (int tries = 0;; tries++) {
        int part = (int)(__atomic_fetch_add(&rs.next_part, 1, __ATOMIC_RELAXED) %
                         (unsigned)tac.cfg.partitions);
        item *it = tier == TIER_NVM ? item_alloc_meta(src, TIER_NVM, ref, part, false)
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
 * would (up to about 2 s; not once the server stops).  Item lock held; the caller checked that the
 * key is to be linked.  1: linked; 0: the key was written meanwhile; -1:
 * no room. */
int rs_link_back(item *it, const char *key, size_t nkey, uint32_t hv,
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
         tries < 400 && !__atomic_load_n(&rs.stopping, __ATOMIC_RELAXED); tries++) {
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
uint64_t rs_seq_seen(uint64_t kh, uint32_t hv)
{
    uint64_t *p = seq_slot(kh, hv);
    return p != NULL ? *p : UINT64_MAX;
}

void rs_seq_set(uint64_t kh, uint32_t hv, uint64_t seq)
{
    uint64_t *p = seq_slot(kh, hv);
    if (p != NULL)
        *p = seq;
}

/* Allocates the tables, each with room for about n / stripes keys. */
bool rs_seqs_init(uint64_t n)
{
    rs.seqs = calloc(ITEM_LOCK_COUNT, sizeof(*rs.seqs));
    if (rs.seqs == NULL)
        return false;
    for (uint32_t i = 0; i < ITEM_LOCK_COUNT && n > 0; i++)
        (void)util_u64map_reserve(&rs.seqs[i], n / ITEM_LOCK_COUNT + 1, ITEM_LOCK_POWER);
    return true;
}

void rs_seqs_free(void)
{
    if (rs.seqs == NULL)
        return;
    for (uint32_t i = 0; i < ITEM_LOCK_COUNT; i++)
        util_u64map_free(&rs.seqs[i]);
    free(rs.seqs);
    rs.seqs = NULL;
}

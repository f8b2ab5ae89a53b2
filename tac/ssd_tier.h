/*
 * tac/ssd_tier.h - the SSD tier as the cache sees it (ssd_write.c, ssd_read.c,
 * ssd_defrag.c, ssd_tier.c).
 */
#ifndef TAC_SSD_TIER_H
#define TAC_SSD_TIER_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/uio.h>

#include "engine/items.h"
#include "base/settings.h"
#include "tac/internal.h"

struct stat_sink;
struct tac_tuple_hdr;

/* Moves the SSD tuple at ref (len bytes) of the key, if still there, up
 * (fetcher); with recache, to DRAM whatever its temperature. */
void tac_ssd_fetch_one(const char *key, size_t nkey, uint32_t hv,
                       uint64_t ref, size_t len, bool recache,
                       struct tac_iobuf *io);
/* The same from a reader's copy of the value (fetch.h): moves it up if
 * want, the meta tuple read (pinned), is still linked (fetcher). */
void tac_ssd_fetch_copy(item *want, const item *copy, uint32_t hv,
                        bool recache);
/* Fetches the buf holding ref (fetcher thread): valid hot tuples go to
 * DRAM, warm ones to NVM, cold ones stay. */
void tac_ssd_fetch_buf(uint64_t ref, struct tac_iobuf *io);
/* Bytes of an SSD buf (for the fetchers' buffers). */
size_t tac_ssd_buf_size(void);

/* ---- SSD tier (the ssd_*.c files) ---- */

/* Opens the SSD tier named by -o ssd_path; false (after printing why) on
 * failure.  Starts nothing. */
bool tac_ssd_open(void);
/* Prints why a tier file was refused at start (its option, path, and what
 * nvm_refusal/ssd_refusal said) and the way out, -o tier_reformat=yes. */
void tac_refuse_tier_file(const char *option, const char *path, const char *why);
void tac_ssd_start(void);
void tac_ssd_stop(void);
/* Returns the SSD file's clean header generation, 0 if left dirty. */
uint64_t tac_ssd_close(void);
/* Writer slots: evictor e uses slot e; every other thread shares one. */
void tac_ssd_set_writer(int evictor_id);
/* Writes the value of `it` (a DRAM or staging item) to SSD and returns its
 * new unlinked SSD meta tuple (refcount 1); NULL when SSD or DRAM lacks
 * room.  Caller holds the item lock. */
item *tac_ssd_store_copy(const item *it, int partition, bool reserved);
/* Whether a value of nbytes (with its "\r\n") may go to SSD: not below
 * -o ext_item_size. */
static inline bool tac_ssd_takes(uint32_t nbytes)
{
    /* atomic: `extstore item_size` sets it at run time */
    int min = __atomic_load_n(tac.cfg.ext_item_size, __ATOMIC_RELAXED);
    return min == 0 || nbytes >= (uint32_t)min + 2;
}
/* Moves the NVM tuple of NVM meta tuple `meta` to SSD (demote hook for NVM
 * LRU tails).  Item lock held, meta pinned. */
bool tac_ssd_from_nvm(item *meta, uint32_t hv);
/* Moves an SSD meta tuple to another DRAM chunk. */
bool tac_ssd_meta_rehome(item *meta, uint32_t hv);
/* Synchronous read of an SSD meta tuple's value into a transient item
 * (append/prepend/incr/decr and UDP); NULL on failure. */
item *tac_ssd_materialize(item *meta);
/* A key to read for a listing: the tuple at ref (len bytes) of the key of
 * fingerprint fp and length nkey, read into key; ok says whether it was. */
struct tac_key_req {
    uint64_t ref;
    size_t len;
    uint64_t fp;
    size_t nkey;
    char *key;
    bool ok;
};
/* Reads the keys of n tuples, ok false where that tuple is no longer the
 * key's (or cannot be read).  Tuples whose buf is not in memory are read
 * from the device, only their first blocks, up to KEYS_INFLIGHT at once;
 * waits for them all.  The caller pins the meta tuples whose references
 * these were.  Not on a worker's request path: for listings. */
#define KEYS_INFLIGHT 32
void tac_ssd_keys_at(size_t n, struct tac_key_req *req);
/* The last reference to SSD meta tuple `meta` is gone. */
void tac_ssd_release(item *meta);
unsigned long long tac_ssd_items(void);
/* No room on SSD for good: no page beyond defrag's reserve is free and
 * defrag cannot win one, or writes fail and their bound is reached (-M).
 * True without an SSD tier. */
bool tac_ssd_full(void);
/* item_tier_ops.read_missed / key_stored: the keys the SSD dropped for
 * room, remembered by hash, explain later misses (ssd_dropped_misses). */
void tac_ssd_read_missed(uint32_t hv);
void tac_ssd_key_stored(uint32_t hv);
void tac_ssd_stats_tiers(struct stat_sink *s);
void tac_ssd_stats_settings(struct stat_sink *s);
/* The SSD tier's lines under memcached's extstore names: plain `stats`
 * extstore_* and `stats extstore` (only with an SSD tier). */
void tac_ssd_stats_register(void);

/* A restart (restart.c).  tac_ssd_flush submits every writer's open buf
 * and waits for all writes (a graceful stop, threads stopped).
 * tac_ssd_written: true when ref's tuple (len bytes) is on the device, not
 * in a buf whose write failed or never ran.  tac_ssd_meta_adopt: an
 * unlinked meta tuple (refcount 1) for src whose tuple is at ref, counted
 * as an SSD item; NULL when DRAM has no chunk (no slab reserve). */
void tac_ssd_flush(void);
/* Crash recovery: reads the whole buf at ref (its first byte) and calls
 * fn for each tuple in it whose checksum holds, with its reference; each
 * damaged one counts in *damaged, and the walk ends at one whose header
 * makes no sense.  False when the read fails. */
bool tac_ssd_scan_buf(uint64_t ref, struct tac_iobuf *io,
                      void (*fn)(uint64_t tref, const char *tuple, void *arg),
                      void *arg, uint64_t *damaged);
bool tac_ssd_written(uint64_t ref, size_t len);
item *tac_ssd_meta_adopt(const item *src, uint64_t ref, int partition);

/* True while SSD meta tuple meta's buf is still in memory (not written). */
bool tac_ssd_unwritten(const item *meta);

/* What the tier tells the durability files: each tuple put into a buf
 * (the DRAM log keeps it until the buf is written: tac_dramlog_tuple),
 * and a tick of the defrag thread now and then (tac_journal_tick).  Set
 * once at start, before any write (tier.c). */
struct tac_ssd_observer {
    void (*tuple_put)(const struct tac_tuple_hdr *h, const struct iovec *iov,
                      int n, uint32_t hv);
    void (*tick)(void);
};
void tac_ssd_set_observer(const struct tac_ssd_observer *o);

#endif

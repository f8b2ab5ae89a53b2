/*
 * tac/internal.h - state shared by the tier policy's files (tier.c, the
 * tier operations and stats; evict.c, the evictor threads).  Not for use
 * outside tac/.
 */
#ifndef TAC_INTERNAL_H
#define TAC_INTERNAL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/uio.h>

#include "items.h"
#include "stats.h"

struct nvm_region;
struct ssd_store;
struct tac_tuple_hdr;

/* Policy counters: one line each; relaxed atomics, any thread. */
#define TAC_STATS_FIELDS(X)  \
    X(get_hits_nvm)          \
    X(evict_dram_to_nvm)     \
    X(set_fallback_nvm)      \
    X(nvm_evictions)         \
    X(nvm_alloc_failures)    \
    X(meta_alloc_failures)   \
    X(nvm_read_errors)       \
    X(tuple_checksum_failures) \
    X(tuple_auth_failures)   \
    X(meta_rehomed)          \
    X(evictor_runs)          \
    X(evictor_wakeups)       \
    X(get_hits_ssd)          \
    X(evict_dram_to_ssd)     \
    X(evict_nvm_to_ssd)      \
    X(set_fallback_ssd)      \
    X(ssd_full)              \
    X(ssd_large_bufs)        \
    X(ssd_read_retries)      \
    X(ssd_read_misses)       \
    X(ssd_dropped_misses)    \
    X(ssd_reads_nomem)       \
    X(ssd_reads_unparked)    \
    X(ssd_write_retries)     \
    X(ssd_write_errors)      \
    X(ssd_failed_bufs_dropped) \
    X(ssd_defrag_runs)       \
    X(ssd_defrag_moved)      \
    X(ssd_defrag_skipped)    \
    X(ssd_items_dropped)     \
    X(ssd_bytes_dropped)     \
    X(ssd_pages_dropped)     \
    X(ssd_tuples_written)    \
    X(fetch_queued)          \
    X(fetch_dropped)         \
    X(fetch_nvm_to_dram)     \
    X(fetch_ssd_bufs)        \
    X(fetch_ssd_to_dram)     \
    X(fetch_ssd_to_nvm)      \
    X(fetch_no_room)         \
    X(nvm_inserts)           \
    X(nvm_removals)          \
    X(nvm_admission_refused) \
    X(evict_cold_to_ssd)     \
    X(nvm_tuples_moved)      \
    X(nvm_drains_abandoned)  \
    X(nvm_fallback_ssd)      \
    X(nvm_tuples_to_ssd)     \
    X(nvm_mover_wants)       \
    X(tier_watchdog_moves)

struct tac_stats {
    TAC_STATS_FIELDS(STATS_DECLARE_FIELD)
};

/* -o tier_policy (doc/design.md, "The data model"). */
enum tac_policy {
    POLICY_TAC = 0,     /* temperatures decide; SSD fetches whole bufs */
    POLICY_ANTI2,       /* DRAM and NVM are one memory: no temperatures */
    POLICY_ANTITUPLE,   /* only the read tuple moves up, never its buf */
    POLICY_TWOTIER,     /* DRAM and SSD only: the NVM tier is not used */
};

struct tac_state {
    enum tac_policy policy;
    struct nvm_region *nvm;     /* NULL without an NVM tier; set at init */
    struct ssd_store *ssd;      /* NULL without an SSD tier; set at init */
    size_t dram_free_wm;        /* bytes of DRAM the evictors keep free */
    size_t nvm_free_wm;         /* bytes of NVM kept free (for SSD later) */
    int obp_pct;                /* -o nvm_admission=obp:PCT; -1 = always */
    int evict_threads;
    double anti2_nvm_share;     /* NVM / (DRAM + NVM) by size (anti2) */
    struct tac_stats stats;
};

extern struct tac_state tac;

#define TAC_INCR(field) STATS_INCR(&tac.stats, field)
#define TAC_ADD(field, n) STATS_ADD(&tac.stats, field, n)

/* Pages of -m kept for meta tuples: data items may not take them (see
 * tac_init); the evictors count them as used. */
#define TAC_META_RESERVE_PAGES 2

/* Moves a DRAM item one tier down, to NVM or else SSD (item_tier_ops.demote and
 * the evictors' demote function): item lock held, item pinned.  A meta
 * tuple is moved to another DRAM chunk instead (the page mover).  Returns
 * false when the lower tier or the meta tuple could not be had. */
bool tac_demote(item *it, uint32_t hv);

/* -o ext_item_age (tac/age.c): moves this evictor's DRAM items unread for
 * that long to SSD.  Returns the number moved. */
int tac_age_round(int evictor, int nevictors);

/* anti2 (doc/design.md, "The data model") treats DRAM and NVM as one memory: an item entering
 * it, a set or a tuple read up from SSD, lands in NVM with probability
 * NVM / (DRAM + NVM) by configured size, in DRAM otherwise, whatever its
 * temperature.  True when this one goes to NVM; always false under the
 * other policies or without NVM.  Any thread. */
bool tac_anti2_to_nvm(void);

/* The NVM admission policy (-o nvm_admission): may a cold item evicted
 * from DRAM, or a new one that finds DRAM full, be written to NVM?  False
 * sends it to SSD instead.  Any thread. */
bool tac_nvm_admit(void);

/* Copies `it` (a DRAM or staging item) into NVM and returns its new,
 * unlinked meta tuple (refcount 1); NULL if NVM or DRAM lacks room.
 * `reserved`: the meta tuple may use the DRAM slab reserve (moves down
 * only: not sets, which free no DRAM, nor fetches). */
item *tac_nvm_store_copy(const item *it, int partition, bool reserved);
/* Copies the value of NVM meta tuple `meta` into dst (meta->nbytes bytes)
 * and checks the tuple: header bounds, key and lengths against meta,
 * checksum.  False, counted in nvm_read_errors and
 * tuple_checksum_failures, when it is damaged: the caller must not use dst
 * and unlinks meta.  Item lock held, meta pinned. */
bool tac_nvm_read_value(const item *meta, char *dst);
/* The same checks on the tuple where it lies: returns its clear key,
 * followed by its value, with its header in *hdr, and in *body (if not
 * NULL) where its body (what follows the header) lies in the NVM mapping;
 * NULL (counted) when it is damaged.  Without a tier key the key is in the
 * mapping, valid while meta pins the slot; with one it is in the thread's
 * scratch buffer (tac_tuple_open_scratch).  Item lock held, meta pinned. */
const char *tac_nvm_tuple_checked(const item *meta, struct tac_tuple_hdr *hdr,
                                  const char **body);
/* Whether a checked tuple (header hdr, clear key) is the one meta tuple
 * meta names: its key and, with a tier key, its write sequence. */
bool tac_tuple_owned(const item *meta, const struct tac_tuple_hdr *hdr,
                     const char *key);
/* Counts a tuple refused on read: tuple_auth_failures with a tier key
 * (its header, tag, key or sequence did not check), else
 * tuple_checksum_failures. */
void tac_tuple_refused(void);

/* ---- The NVM page mover (mover.c) ---- */
bool tac_nvm_mover_init(void);
void tac_nvm_mover_free(void);
/* Around every NVM insertion (slot allocation to tuple written): the
 * mover reads no slot of a page it drains before such writers are done. */
unsigned tac_nvm_write_begin(void);
void tac_nvm_write_end(unsigned token);
/* Class cls found no slot and no page (no SSD tier): asks the mover for a
 * page; true when it is emptying one or may find one, so that the caller
 * waits rather than drop a tuple. */
bool tac_nvm_mover_want(unsigned cls);
/* One round of the mover (evictor 0): the number of tuples moved, plus
 * one when a page was emptied. */
int tac_nvm_mover_step(void);
/* With an SSD: moves the coldest tuples of the NVM class (other than
 * need, 0 for none) holding the most pages down to SSD.  The number moved.
 * Evictor 0 only. */
int tac_nvm_spill(unsigned need);
/* Forgets and frees the NVM slot at ref (its meta tuple's last reference
 * went): in step with the mover's reads when the slot lies in the page it
 * drains.  Any thread. */
void tac_nvm_release_slot(uint64_t ref);

/* ---- Fetchers (fetch.c): move hot and warm items up (TaC 4.2, 5.4) ---- */
void tac_fetchers_start(void);
void tac_fetchers_stop(void);
/* Queues hot NVM meta tuple `meta` for a copy to DRAM (any thread, item
 * lock held; never blocks: a busy or full queue drops the request). */
void tac_fetch_nvm(const item *meta);
/* A warm or hot read of SSD meta tuple `meta`: queues its whole buf if the
 * buf is warm too, else its own tuple. */
void tac_fetch_ssd_buf(const item *meta);
/* Queues SSD meta tuple meta's own tuple (antituple, anti2). */
void tac_fetch_ssd_tuple(const item *meta);
/* Queues SSD meta tuple meta's own tuple for DRAM whatever its
 * temperature: -o ext_recache_rate's every Nth SSD read. */
void tac_fetch_ssd_recache(const item *meta);
/* A fetcher's read buffer: grown to the largest tuple or buf it reads. */
struct tac_iobuf {
    char *mem;
    size_t cap;
};
/* Moves the SSD tuple at ref (len bytes) of the key, if still there, up
 * (fetcher); with recache, to DRAM whatever its temperature. */
void tac_ssd_fetch_one(const char *key, size_t nkey, uint32_t hv,
                       uint64_t ref, size_t len, bool recache,
                       struct tac_iobuf *io);
/* Fetches the buf holding ref (fetcher thread): valid hot tuples go to
 * DRAM, warm ones to NVM, cold ones stay. */
void tac_ssd_fetch_buf(uint64_t ref, struct tac_iobuf *io);
/* Bytes of an SSD buf (for the fetchers' buffers). */
size_t tac_ssd_buf_size(void);

/* A transient item (refcount 1, outside -m) with the fields and key of
 * meta tuple `meta`, its value left to fill in; NULL when out of memory.
 * Caller holds the key's item lock. */
item *tac_transient_new(const item *meta);

/* ---- SSD tier (ssd_tier.c) ---- */

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
    int min = __atomic_load_n(&settings.ext_item_size, __ATOMIC_RELAXED);
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
/* The last reference to SSD meta tuple `meta` is gone. */
void tac_ssd_release(item *meta);
/* True while free NVM is below its watermark (evictors move NVM tails to
 * SSD then). */
bool tac_nvm_tight(void);
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

/* Crash recovery's journal (journal.c): a MAP_SHARED file beside the
 * restart state.  open maps (or creates) it for these tiers and tells
 * whether it describes the tier files as they were found (matched);
 * reset forgets what it holds; attach hands the NVM class map and the SSD
 * page table to the tiers, ties it to this run and reserves seq and CAS
 * ahead; close detaches and syncs it.  invalidate (a worker, item lock
 * held) and flush record what must never come back; dead tells recovery
 * whether a copy of key written with seq is covered by one.  tick
 * refreshes which records may be reused (any thread, now and then). */
bool tac_journal_open(const char *state_path);
/* A 64-bit hash of a key (never 0): the journal's records, and the
 * crash scan's table of sequences, are keyed by it. */
uint64_t tac_key_hash64(const char *key, size_t nkey);
bool tac_journal_matched(void);
void tac_journal_reset(void);
/* Every copy written with a seq up to seq counts as dead after a crash. */
void tac_journal_set_floor(uint64_t seq);
void tac_journal_attach(void);
void tac_journal_close(void);
const uint8_t *tac_journal_nvm_map(void);
const uint32_t *tac_journal_ssd_table(void);
uint64_t tac_journal_seq_reserved(void);
uint64_t tac_journal_cas_reserved(void);
void tac_journal_reserve_seq(uint64_t seq);
void tac_journal_invalidate(const char *key, size_t nkey);
/* The current version of key, with a copy in a lower tier, now expires at
 * unix_exptime (sooner than before): its copies come back no later. */
void tac_journal_shorten(const char *key, size_t nkey, uint64_t unix_exptime);
void tac_journal_flush(void);
/* on: no record is freed for reuse (a leftover restart state relies on
 * every record made since it was written; restart.c). */
void tac_journal_hold(bool on);
void tac_journal_tick(void);
/* Items indexed at the last tick before the file was last left (0: none
 * known): how large the crash scan's tables should start. */
uint64_t tac_journal_items_hint(void);
bool tac_journal_dead(const char *key, size_t nkey, uint64_t seq);
/* The same for a key whose tac_key_hash64 is h, and a hint that h's
 * bucket is looked up soon. */
bool tac_journal_dead_h(uint64_t h, uint64_t seq);
/* The same, and for a live copy lowers *exptime (unix time, 0: never) to
 * the shorter life the journal recorded for it, if any. */
bool tac_journal_check_h(uint64_t h, uint64_t seq, uint64_t *exptime);
void tac_journal_prefetch(uint64_t h);
uint64_t tac_journal_entries(void);
uint64_t tac_journal_overflows(void);

/* -o dram_log (dramlog.c): open maps the log beside the NVM file (false,
 * after printing why, when it cannot); start, from tac_restart_prepare,
 * keeps what a crash left for the replay or else starts empty; item and
 * tuple log a DRAM item's version (a new seq) or a tuple put into an SSD
 * buf (item lock of its key held); replay hands the recovery thread each
 * record left by a crash, as a checked tuple.  head and tail are
 * positions for the journal's invalidations (0 when off). */
bool tac_dramlog_open(void);
bool tac_dramlog_on(void);
/* The log holds what the last run wrote, and a crash start replays it. */
bool tac_dramlog_replayable(void);
void tac_dramlog_start(bool replay);
void tac_dramlog_close(void);
bool tac_dramlog_item(const item *it);
bool tac_dramlog_ordered(const item *it);
/* iov: the tuple's image as the tier holds it (n pieces, header first);
 * hv: its key's item_hash. */
void tac_dramlog_tuple(const struct tac_tuple_hdr *h, const struct iovec *iov,
                       int n, uint32_t hv);
void tac_dramlog_replay(void (*fn)(const char *tuple, void *arg), void *arg);
uint64_t tac_dramlog_head(void);
/* Below this position no record is left that an invalidation noted at a
 * head at or below it may still need (0: none yet). */
uint64_t tac_dramlog_clear(void);
struct stat_sink;
/* Its lines of `stats tiers` (none when off). */
void tac_dramlog_stats(struct stat_sink *s);
/* True while SSD meta tuple meta's buf is still in memory (not written). */
bool tac_ssd_unwritten(const item *meta);

/* An NVM slot about to be freed: its tuple is made unreadable first, so
 * that a crash scan never takes it for live. */
void tac_nvm_forget(uint64_t ref);

/* Graceful restart (restart.c), called by tier.c.  tac_restart_prepare,
 * once the tiers are open and before anything is allocated in them: reads
 * the state a graceful stop saved, hands the lower tiers back the space
 * it names, and sets CAS and the write sequence above the saved ones.
 * tac_restart_run starts bringing the items back in the background (the
 * server serves meanwhile).  tac_restart_save, at a stop with every other
 * thread stopped: writes the state file but its header, which
 * tac_restart_commit writes once the tiers are closed clean. */
void tac_restart_prepare(void);
void tac_restart_run(void);
void tac_restart_wait(void);
bool tac_restart_save(void);
void tac_restart_commit(bool nvm_clean, uint64_t ssd_generation);

/* Evictor threads (evict.c). */
void tac_evictors_start(void);
void tac_evictors_stop(void);
void tac_evictors_wake(int partition);
/* Partitions (DRAM) whose classes are short of free chunks right now. */
int tac_evict_backlog(void);
uint64_t tac_evict_backlog_bytes(void);

#endif

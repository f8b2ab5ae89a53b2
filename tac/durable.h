/*
 * tac/durable.h - durability: the journal of what must not come back (journal.c), the DRAM log (dramlog.c) and restart (restart.c).
 */
#ifndef TAC_DURABLE_H
#define TAC_DURABLE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/uio.h>

#include "engine/items.h"

struct stat_sink;
struct tac_tuple_hdr;

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
 * crash scan's table of sequences, are keyed by it.  It is a function of
 * the key's fingerprint (item_key_fp()), all a meta tuple keeps: the same
 * as tac_fp_hash64 of that. */
uint64_t tac_key_hash64(const char *key, size_t nkey);
uint64_t tac_fp_hash64(uint64_t fp);
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
/* The DRAM log's positions (dramlog.c registers them while it is on;
 * NULL, NULL: off). */
void tac_journal_set_log(uint64_t (*head)(void), uint64_t (*clear)(void));
/* Keys are named by their fingerprint fp (item_key_fp()). */
void tac_journal_invalidate(uint64_t fp);
/* The current version of key fp, with a copy in a lower tier, now expires
 * at unix_exptime (sooner than before): its copies come back no later. */
void tac_journal_shorten(uint64_t fp, uint64_t unix_exptime);
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
/* Whether a crash start's replay of the log is under way (any thread). */
bool tac_dramlog_replaying(void);
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


#endif

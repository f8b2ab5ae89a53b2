/*
 * lazy_lru.h - Lazy LRU access records and temperatures (doc/design.md, "The data model").
 *
 * Each item carries a 32-bit `access` field: bits 31..8 are `time` (the
 * low 24 bits of the server clock, seconds; wraps every ~194 days) and bits
 * 7..0 are `readCount`.  On each access
 *
 *     readCount = min(readCount / (now - time + 1) + 1, 2 * THR_hot)
 *     time      = now
 *
 * so frequent reads push readCount up and idle time decays it.  An item is
 * hot when readCount > THR_hot, warm when readCount > THR_warm, else cold.
 *
 * Defaults: THR_hot = 4, THR_warm = 1.  A freshly read item (readCount 1)
 * is cold; read twice within about a second it is warm; five or more reads
 * in quick succession make it hot.  With a lower tier the maintainer's
 * sampler (llru_sample, `stats temperature`) moves both to the shares of
 * items DRAM and NVM hold.
 *
 * Threads: llru_record_access() is called with the item lock held; the
 * field is read and written with relaxed atomics so samplers and LRU
 * threads may read it without that lock.  The thresholds are relaxed
 * atomics too.
 */
#ifndef LAZY_LRU_H
#define LAZY_LRU_H

#include <stdbool.h>
#include <stdint.h>

#include "engine/item_layout.h"

#define LLRU_TIME_BITS 24
#define LLRU_TIME_MASK ((1u << LLRU_TIME_BITS) - 1)
#define LLRU_COUNT_MASK 0xffu
#define LLRU_THR_HOT_DEFAULT 4
#define LLRU_THR_WARM_DEFAULT 1
/* readCount is 8 bits, so 2 * THR_hot must fit. */
#define LLRU_THR_HOT_MAX 127

enum llru_temp { LLRU_COLD = 0, LLRU_WARM = 1, LLRU_HOT = 2 };

/* Resets thresholds to their defaults. */
void llru_init(void);

/* New item: time = now, readCount = 0.  Caller owns the item. */
void llru_init_access(item *it, rel_time_t now);
/* Applies the access formula above.  Caller holds the item lock. */
void llru_record_access(item *it, rel_time_t now);
unsigned int llru_read_count(const item *it);
/* 24-bit time of the last recorded access. */
uint32_t llru_access_time(const item *it);
enum llru_temp llru_temperature(const item *it);

/* ---- Replacement rule (TaC 4.3; doc/design.md, "The data model") ---------------------------
 * Pure functions of the access field, `now` and the thresholds: no locks,
 * no other state.  The server's LRU threads and bench/lru-sim share them.
 *
 * Access side (worker): an item moves to its LRU head only when a read
 * raises its temperature class above the one it had cooled to (cold ->
 * warm, cold -> hot, warm -> hot).  A hot item read again stays where it
 * is, and so does a cold item read once: no LRU lock, no ring push.
 *
 * Eviction side (evictor / LRU thread, at the cold end): an item read at
 * least once since it was linked or last spared (readCount > 0) is moved
 * to the head instead of evicted, and its readCount becomes 0: exactly one
 * more lap unless it is read again (a CLOCK reference bit).
 *
 * Why readCount > 0 and not "warm or hot" alone: with one-second time
 * granularity an item read every few seconds always looks cold (its
 * readCount decays to 1 before the next read), so a temperature-only second
 * chance evicts it in insertion order (FIFO) even when strict LRU keeps it.
 * In bench/lru-sim (scrambled Zipf 0.99, 1M keys) that rule fell up to 1.1
 * points behind strict LRU at 200 k ops/s and 1.8 points at 20 k ops/s,
 * below sampled LRU (n = 10) in the 40 % cache.  Why one lap and not more
 * for warm and hot items (readCount halved per lap, tried too): that ran
 * up to 1.4 points *above* strict LRU at small sizes, no longer an
 * approximation of it, and at the server's lap times (seconds) a tail
 * item's readCount has decayed to cold anyway.  With one lap Lazy LRU is
 * 0.5-0.9 points above strict LRU at every size and rate tried
 * (bench/RESULTS.md, "Replacement policies").
 */

/* Records a read (the access formula; llru_record_access() is this without
 * the answer) and returns true when the item should move to its LRU head
 * now.  Caller holds the item lock. */
bool llru_access(item *it, rel_time_t now);
/* Temperature with readCount decayed to `now` as a read would decay it,
 * without recording one (llru_temperature() uses the stored readCount). */
enum llru_temp llru_temperature_at(const item *it, rel_time_t now);
/* For the item at an LRU's cold end: true = move it to the head instead of
 * evicting it; then its readCount has been cut as described above (unless
 * a concurrent read won: that read is kept).  The access time is never
 * changed.  Caller holds the LRU lock; the item lock is not needed. */
bool llru_second_chance(item *it);

/* ---- Bump rings and LRU threads (doc/design.md, "The data model") --------------------------
 * A worker never takes an LRU lock.  When llru_access() says a DRAM item
 * should move to its LRU head, the worker takes a reference on it and
 * pushes it onto its own ring (meta tuples are on no LRU: NVM ages by a
 * CLOCK over its slots, SSD by page).  Each ring has one producer (its
 * worker) and one consumer (the LRU thread), so pushes and pops are
 * lock-free.  A full ring drops the request: the item stays where it is
 * and lru_bumps_dropped counts it.  The LRU thread drains every ring in
 * batches and hands each batch to the apply function (items.c), which
 * relinks the items still on their LRU and drops the references.  The
 * reference is what keeps a queued item from being freed.
 */
#define LLRU_RING_SIZE 1024     /* power of two */
#define LLRU_BATCH 64

/* Called with a batch of referenced items (the LRU thread). */
typedef void (*llru_apply_fn)(item **items, unsigned int n);

/* Gives the calling thread its ring (workers, at start).  Threads without
 * one get false from llru_push(). */
void llru_rings_attach(void);
/* Pushes referenced item `it` onto the caller's ring; false when the ring
 * is full (counted as dropped), or the thread has no ring or the LRU
 * thread does not run (not counted); the caller keeps its reference then. */
bool llru_push(item *it);
/* True if the calling thread has a ring. */
bool llru_has_ring(void);
/* Starts the LRU thread. */
void llru_threads_start(llru_apply_fn apply);
/* Stops them after draining every ring (no pushes may follow). */
void llru_threads_stop(void);

unsigned int llru_thr_hot(void);
unsigned int llru_thr_warm(void);
/* Sets both thresholds; hot is clamped to [1, LLRU_THR_HOT_MAX] and warm
 * to [0, hot - 1]. */
void llru_set_thresholds(unsigned int hot, unsigned int warm);

/* ---- Threshold sampler (TaC 4.3) ---------------------------------------
 * Every -o temp_sample_interval seconds the maintainer reads the access
 * fields of a random sample of all items (-o temp_sample_size), each
 * readCount taken as a read now would leave it (decayed to now, plus 1),
 * since that is the value a read compares with the thresholds.  If DRAM holds a
 * share d of the sampled items and NVM a share n, THR_hot becomes the
 * smallest value that at most d of the sample exceeds, and THR_warm the
 * smallest that at most d + n exceeds: as many items are hot as DRAM can
 * hold, and as many warm as DRAM and NVM together.  Where the two meet,
 * THR_hot is raised to THR_warm + 1 (fewer hot items, both bounds kept).
 */

/* The rule above on a histogram of decayed readCounts (hist[v] = items
 * with readCount v, n in all); a share is a fraction in [0, 1]. */
void llru_thresholds_from(const uint64_t hist[LLRU_COUNT_MASK + 1], uint64_t n,
                          double hot_share, double warm_share,
                          unsigned int *hot, unsigned int *warm);
/* One sample of about `want` items (maintainer thread); sets the
 * thresholds and records them in the history.  Returns the items read. */
unsigned int llru_sample(unsigned int want, rel_time_t now);

struct stat_sink;
/* `stats temperature`: thresholds and the last samples (llru_init()
 * registers it). */
void llru_stats_temperature(struct stat_sink *sink);

#endif

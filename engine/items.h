/*
 * items.h - the item: its layout, its lifecycle, and the operations the
 * protocol layers run on it.
 *
 * Lifecycle.  item_alloc() returns an unlinked item with refcount 1 (the
 * caller's reference).  Linking adds the hash index's reference.  Every
 * lookup returns the item with one more reference that the caller drops with
 * item_release().  Memory goes back to slabs.c only when the item is unlinked
 * and its refcount reaches 0, so a reader (a zero-copy send, a copy) never
 * sees an item freed under it.
 *
 * Locks.  Functions named do_* are called with item_lock(hv) held for the
 * key's hash hv; all others take what they need.  The hash index (assoc.c)
 * is protected by the same item lock stripes.  The whole server's lock
 * order follows.
 */
/*
 * Lock order
 *
 * Every mutex of the server, by level, outermost first.  A lock may be
 * taken (blocking) only while holding locks of earlier levels; two locks of
 * one level are never held together unless a trylock below says so.  The
 * ThreadSanitizer stress run (scripts/test.sh) checks this dynamically.
 * There are no rwlocks or spinlocks; trylocks are listed below.
 *
 * Level 1: roots, taken with no other lock held, never nested together.
 *   expand_lock     assoc.c: resize state (maintainer)  -> item lock
 *   crawl_lock      items_core.c items_crawl_lock: crawler cursor (maintainer) -> LRU lock
 *   run_lock        slabs.c slab_run_lock: page mover and automove state (maintainer)
 *                   -> item lock by TRYLOCK (item_evict_chunk), then all
 *                   a demotion takes; -> slab partition lock, slab_drain.lock,
 *                   pages_lock, pool_lock; frees -> nvm partition lock,
 *                   ssd store->lock
 *   pool_start_lock ssd/io.c: SSD I/O pool started? -> the pool's bg lock
 *
 * Level 2
 *   item lock       item_lock.c item_locks_[hv & mask]: the hash chains of its
 *                   buckets (assoc.c) and exptime/cas/it_flags of their
 *                   items.  Stripes have no order among themselves: a
 *                   second stripe is only ever taken by trylock, through
 *                   an LRU lock (below).
 *
 * Level 3
 *   LRU lock        items_core.c items_lrus[class][partition].lock: that LRU's
 *                   links, head, tail, count, and the crawler placeholder
 *   writer lock     tac/ssd_int.h struct writer: one SSD writer's open buf
 *                   and page
 *   reuse_lock      nvm/alloc.c: one page search or drain pick at a time
 *
 * Level 4
 *   slab partition  slabs.c slab_classes[c].part[p].lock: its free list
 *                   and end region                    -> slab_drain.lock
 *   nvm partition   nvm/alloc.c classes[c].parts[p].lock: its slot stack
 *                   and end; also the drain bitmap of pages it owns
 *   ssdt.lock       tac/ssd_int.h: failed bufs, the write-failing state, the
 *                   synchronous-read rings          -> defrag's bg lock
 *
 * Level 5: leaves (no lock is taken while one is held)
 *   slabs.c slab_drain.lock (draining page's freemap), pages_lock (a class's
 *   page array), pool_lock (spare pages), map_lock (page_map leaves);
 *   tac/policy.c obp.lock (NVM admission window; trylock only); ssd/
 *   store->lock (pages, bufs list), wlock (write SQ and pending list),
 *   idle_lock (in-flight count reaching 0), ring done_lock (a ring's done
 *   list); every struct bg lock (bg.h: each evictor, the fetch queue,
 *   defrag, the SSD I/O pool queue, the SSD reaper, the SSD debug delay,
 *   the maintainer, the LRU lanes); and, never taken under another lock:
 *   lazy_lru.c hist_lock and sets_lock, thread.c init_lock and each
 *   worker's queue_lock, conn_registry.c conn_registry_lock.
 *
 * Edges.  item lock -> LRU lock (link, unlink, bump); slab partition
 * lock (a chunk allocated under the lock, as append/prepend, incr/decr,
 * staging sets, demotions and fetches do, or a last reference dropped
 * under it); pages_lock, pool_lock, map_lock (a new slab page for such an
 * allocation); nvm partition lock; writer lock; ssdt.lock; store->lock (an
 * SSD tuple read from a buf in memory, or released); done_lock, the I/O
 * pool's bg lock, idle_lock (an SSD read started); an evictor's bg lock
 * (wake); obp.lock and the fetch queue's bg lock (trylock).
 * LRU lock -> item lock (trylock); with that stripe the crawler frees the
 * item: -> slab partition lock, nvm partition lock.
 * writer lock -> sd.lock, store->lock, wlock, the I/O pool's bg lock,
 * idle_lock, defrag's bg lock.  store->lock and wlock are never held
 * together; nor are two LRU, two writer or two slab partition locks.
 * reuse_lock -> nvm partition lock.
 *
 * Trylocks against the order (on failure the work is skipped):
 *   LRU lock -> item lock        tail_take_locked, lru_pin_tail,
 *                                crawl_check_locked; so item lock ->
 *                                item lock only by trylock
 *   nvm partition -> reuse_lock  page_reuse, and under both another nvm
 *                                partition lock
 * Trylocks in order, so as never to wait: run_lock -> item lock; item
 * lock -> LRU lock (do_item_touch_access), -> obp.lock, -> fetch queue's
 * bg lock; with no lock held: item lock (llru_sample, fetch.c ssd_req),
 * reuse_lock (nvm_drain_begin).
 *
 * Sleeping and I/O.  No thread sleeps holding a lock, except on that
 * lock's own condition variable (bg.c, init_cond, idle_cond), and
 * pool_start_lock, held across pthread_create/pthread_join of the SSD
 * I/O pool threads (first use, shutdown).  Device I/O (pool pread/
 * pwrite, the reaper's io_uring_wait_cqe, read_sync's poll, fdatasync)
 * runs with no lock held.  Under locks there is only:
 *   - io_uring_submit of a buf write, under wlock, which a demotion,
 *     staging set or defrag reaches holding an item lock and a writer
 *     lock (the page mover: also run_lock);
 *   - io_uring_submit of a synchronous read (tac/ssd_read.c,
 *     ssdt_read_sync) where its caller holds an item lock; a worker's
 *     reads are queued under the item lock and submitted by its event
 *     loop with no lock held (ssd_ring_defer_submits);
 *   - write(2) to a ring's non-blocking eventfd, under done_lock (a
 *     read served from a buf in memory) or alone (a failed submit), and
 *     under the item lock when tac_read_value started that read; and to
 *     a worker's (worker_wake) under conn_registry_lock, when the
 *     connection-memory bound marks one of its connections;
 *   - fprintf(stderr) under sd.lock when writes start or stop failing,
 *     under a writer lock and an item lock when a submit fails at once;
 *     with -vv, under expand_lock;
 *   - NVM copies and checks under the item lock, with the emulated
 *     latency as a busy spin (no syscall), and pmem drains.
 * No callback runs under a lock: SSD write completions (write_done) run
 * on the reaper or a pool thread with no lock held and take sd.lock
 * (-> defrag's bg lock), then store->lock and idle_lock; read completions
 * run from ssd_ring_reap on their ring's thread with no lock held and
 * take item locks at level 2.  Not locks: refcounts pin items, and the
 * NVM mover polls its writer epochs (tac/mover.c), never waiting on them.
 */
#ifndef ITEMS_H
#define ITEMS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "engine/item_layout.h"
#include "engine/item_lock.h"
#include "base/settings.h"

/* Last access time (server clock); a compact item derives it from its
 * access field. */
rel_time_t item_time(const item *it);

/* Initializes the whole DRAM engine from settings: item locks, LRUs,
 * lazy_lru.c, slabs_init() and assoc_init(settings.hashpower_init).
 * Call once after option parsing, before any thread uses items.  Calling
 * it again discards every item (tests). */
void items_init(void);

/* Next CAS id (never 0).  Returns 0 when CAS is disabled. */
uint64_t item_next_cas(void);

/* The last CAS id handed out; item_cas_floor makes the next ones larger
 * than cas (a restart continues above what it recovered). */
uint64_t item_last_cas(void);
void item_cas_floor(uint64_t cas);
/* Crash recovery keeps CAS ids above any issued before a crash: once a CAS
 * id reaches the limit, fn(cas) runs (any thread, no lock held by items.c
 * but maybe the caller's item lock) and must raise the limit with
 * item_cas_set_limit after reserving ids past it durably.  fn is set
 * before threads start. */
void items_set_cas_reserve(void (*fn)(uint64_t cas));
void item_cas_set_limit(uint64_t limit);

/*
 * While a restart brings items back in the background (tac/durable/restart.c),
 * every write must beat the copy it finds later.  Between begin and end,
 * items.c notes each key that gets a new version linked or a delete
 * (found or not), and any flush_all; do_item_recovery_written, under the
 * key's item lock, then says whether the recovered copy must be skipped.
 * Keys are noted by a 64-bit fingerprint, so another key's write skips a
 * recovered copy only on a 64-bit collision.  If the notes cannot grow
 * (no memory), every later recovered copy is skipped: a miss, never a
 * stale value.
 */
void items_recovery_begin(void);
/* Called by the recovery thread: what it links itself is not a write. */
void items_recovery_self(void);
void items_recovery_end(void);
bool do_item_recovery_written(const char *key, size_t nkey, uint32_t hv);
/* The same for the key of fingerprint fp (item_key_fp()). */
bool do_item_recovery_written_fp(uint64_t fp);

/* True if an item of this size can ever be stored (fits -I and the
 * largest slab class). */
bool item_size_ok(size_t nkey, size_t nbytes);

/*
 * Allocates an unlinked item with refcount 1 and copies the key in.
 * nbytes includes the trailing "\r\n" the caller will write.  partition
 * is the caller's partition (worker id mod P).  Evicts from the LRU tail
 * when DRAM is full and evict_to_free is set.  Returns NULL when the item
 * is too large or memory cannot be found (-M).
 */
item *item_alloc(const char *key, size_t nkey, uint32_t flags,
                 rel_time_t exptime, size_t nbytes, int partition);

/* Drops one reference; frees the item when it is unlinked and unused. */
void item_release(item *it);

/*
 * Turns a reference to any item into a reference to an item holding its
 * value: a DRAM item comes back as is; for a meta tuple the tier policy
 * copies the value out of its tier into a transient item (ITEM_TRANSIENT,
 * outside -m, freed by its last item_release) and the reference to the
 * meta tuple is dropped.  NULL if the copy fails.  Call with the key's
 * item lock held (the copy reads the meta tuple's fields).  item_get() and
 * item_get_and_touch() already do this; code that reads values after a
 * do_item_get() must call it before item_unlock().
 */
item *item_value_take(item *it);

/* Why a lookup missed. */
enum item_miss { MISS_NONE = 0, MISS_NOT_FOUND, MISS_EXPIRED, MISS_FLUSHED };

/* How a lookup missed, as memcached's logs name it ("found" if it did not). */
static inline const char *item_miss_name(enum item_miss why, bool found)
{
    return found ? "found" : why == MISS_EXPIRED ? "expired"
                 : why == MISS_FLUSHED ? "flushed" : "not_found";
}

/* True if the item is past its exptime or older than flush_all. */
bool item_is_dead(const item *it, enum item_miss *why);

/*
 * Looks a key up.  Returns the item with a reference held, or NULL.
 * An expired or flushed item found on the way is unlinked (lazy reclaim)
 * and *why says so.  do_update records the access (time, lazy LRU access
 * field, ITEM_FETCHED / ITEM_ACTIVE).
 */
item *item_get(const char *key, size_t nkey, enum item_miss *why,
               bool do_update);

/* Sets a new exptime (touch) and records the access.  Returns the index's
 * item with a reference: possibly a meta tuple, so read only its metadata
 * (flags, CAS, key, sizes), never its value. */
item *item_get_and_touch(const char *key, size_t nkey, rel_time_t exptime,
                         enum item_miss *why);

/* True if the key is stored (and alive); reads no value. */
bool item_exists(const char *key, size_t nkey);

/*
 * Reads: one call for get, gets, gat, gats, touch and a write's old value.
 * The protocols take no item lock; items.c answers
 *   ITEM_HIT      *out holds a value-bearing item the caller releases (when
 *                 rq->value is false, the index's item itself, maybe a
 *                 meta tuple: read only its metadata);
 *   ITEM_MISS     *why says why;
 *   ITEM_PENDING  the value is in a lower tier that takes I/O (SSD): its
 *                 read has started, and wait->done(arg, got) runs later
 *                 on this thread with the value (got->value NULL: gone
 *                 meanwhile, or damaged), arg being what wait->prepare
 *                 returned;
 *   ITEM_NOMEM    no memory for a copy, or no waiter could be prepared and
 *                 the value is not in memory.
 * *clsid is the slab class of the item found (per-class stats), 0 on a
 * miss.  A touch sets the new exptime before anything is read.
 */
enum item_answer { ITEM_HIT = 1, ITEM_MISS, ITEM_PENDING, ITEM_NOMEM };

/*
 * What an asynchronous read got: `value`, an item holding the value, whose
 * reference the receiver owns (NULL: a miss), and `src`, the index's item
 * of the version that value belongs to, referenced by the sender until
 * done returns.  Every write links a new item, so while src stays pinned,
 * "src is still the key's item" means "value is still the key's value",
 * with or without CAS ids (-C).  A write that retries after *_NEED_VALUE
 * passes this back as `prior` (item_store_wait, item_add_delta).
 */
struct item_got {
    item *value;
    item *src;
};

struct item_waiter {
    void *reader;                       /* this thread's SSD reader */
    void *(*prepare)(void *ctx);        /* a context for done; NULL: no memory */
    void (*cancel)(void *arg);          /* the read did not start after all */
    void (*done)(void *arg, const struct item_got *got);
    void *ctx;
};

/*
 * The meta get's item side (mg): its flags that read or change the item,
 * in request order, run under the item lock; the protocol formats the
 * answers.  ttl is -1 for "never"; fetched and last access are as they were
 * before this request (its bump comes last).
 */
enum item_mg_op {
    MG_TOUCH = 1,       /* T: exptime = touch_exptime */
    MG_VIVIFY,          /* N: a created item gets vivify_exptime, and wins */
    MG_RECACHE,         /* R: win if the TTL left is below recache_time */
    MG_SIZE, MG_TTL, MG_CAS, MG_FLAGS, MG_LAST_ACCESS, MG_FETCHED,
};
#define ITEM_MG_OPS 24

struct item_mg {
    /* in */
    unsigned int nops;
    uint8_t op[ITEM_MG_OPS];
    rel_time_t touch_exptime, vivify_exptime, recache_time;
    bool vivify;                /* N: create an empty item on a miss */
    bool tokens;                /* mg: win tokens and stale items (W Z X) */
    bool set_cas;               /* ma E: the item takes this CAS first */
    uint64_t cas;
    int partition;              /* where a vivified item is allocated */
    /* out, on a hit */
    int64_t val[ITEM_MG_OPS];   /* answers of the reading ops */
    uint32_t nbytes;            /* value length, "\r\n" included */
    rel_time_t exptime;         /* after the ops (me) */
    uint8_t tier;               /* enum item_tier (me) */
    bool created;               /* in too: ma N created the item */
    bool ttl_set;
    bool token_sent;            /* Z: a win token was out before */
    bool stale;                 /* X */
    bool won;                   /* W: this request won the token */
};

struct item_read {
    const char *key;
    size_t nkey;
    bool bump;                  /* an access: LRU, fetched flags */
    bool touch;                 /* set exptime (gat, touch) */
    rel_time_t exptime;
    bool value;                 /* false: metadata only (touch) */
    const struct item_waiter *wait;     /* NULL: never ITEM_PENDING */
    struct item_mg *mg;         /* a meta get's flags, or NULL */
};

enum item_answer item_read(const struct item_read *rq, item **out,
                           enum item_miss *why, unsigned int *clsid);

enum store_op {
    STORE_SET = 1, STORE_ADD, STORE_REPLACE, STORE_APPEND, STORE_PREPEND,
    STORE_CAS
};

enum store_result {
    STORE_STORED = 1,
    STORE_NOT_STORED,   /* add on existing, replace/append/prepend on missing */
    STORE_EXISTS,       /* cas mismatch */
    STORE_NOT_FOUND,    /* cas on a missing key */
    STORE_NO_MEMORY,    /* append/prepend could not allocate */
    STORE_TOO_LARGE,    /* append/prepend result exceeds -I */
    STORE_NEED_VALUE,   /* append/prepend: the old value is on SSD; read it
                           (item_read, parked) and retry with what the read
                           got as `prior` */
    STORE_NEED_ROOM,    /* item_store_wait: no tier has room now, a lower
                           one will (evictors, defrag); retry later */
    STORE_WAIT_TIMEOUT, /* the caller waited -o store_wait_ms for room in
                           vain; answered as out of memory, counted apart */
};

/* memcached's names of a store's command and outcome (its logs, watch). */
static inline const char *store_op_name(enum store_op op)
{
    static const char *const names[] = { "null", "set", "add", "replace", "append",
                                         "prepend", "cas" };
    return (unsigned)op < sizeof(names) / sizeof(names[0]) ? names[op] : "na";
}
static inline const char *store_result_name(enum store_result r)
{
    switch (r) {
    case STORE_STORED: return "stored";
    case STORE_NOT_STORED: return "not_stored";
    case STORE_EXISTS: return "exists";
    case STORE_NOT_FOUND: return "not_found";
    case STORE_TOO_LARGE: return "too_large";
    default: return "no_memory";
    }
}

/*
 * Stores an allocated item whose value the caller has filled in.  For
 * STORE_CAS, req_cas is the client's CAS value; for other ops a non-zero
 * req_cas also has to match (meta ms with C).  On STORE_STORED *cas_out
 * gets the new CAS id (may be NULL).  The caller keeps its reference.
 */
enum store_result item_store(item *it, enum store_op op, uint64_t req_cas,
                             uint64_t *cas_out, int partition);
/* item_store for a caller that can wait (a connection parks the request,
 * conn_wait_room): STORE_NEED_ROOM when no tier has room for a staging
 * item now but a lower tier will make some.  The evictors have been woken.
 * prior: NULL, or for an append or prepend retried after STORE_NEED_VALUE,
 * what the read of the old value got; it serves as the old value while
 * its version is still the key's (else STORE_NEED_VALUE again). */
enum store_result item_store_wait(item *it, enum store_op op, uint64_t req_cas,
                                  uint64_t *cas_out, int partition,
                                  const struct item_got *prior);

enum delta_result {
    DELTA_OK = 1,
    DELTA_NON_NUMERIC,  /* stored value is not a decimal uint64 */
    DELTA_NO_MEMORY,
    DELTA_NOT_FOUND,
    DELTA_EXISTS,       /* req_cas given and mismatched */
    DELTA_NEED_VALUE,   /* as STORE_NEED_VALUE */
};

/* Takes one more reference to an item the caller already references. */
void item_ref(item *it);

/*
 * Held references.  refcount is 16 bits.  A reference that a client can
 * multiply and that outlives the request taking it (a queued reply's, a
 * parked SSD read's, an LRU bump's) is taken only while the count is below
 * ITEM_REFS_HELD_MAX: past it a reply sends a copy of the value
 * (item_copy), and a parked read or a bump is not started.  Every other
 * reference is a request's own, dropped before its worker takes another,
 * or a tier thread's, so the 4,095 counts left above the bound cover them
 * with room to spare (doc/design.md, "Bounded references").
 */
#define ITEM_REFS_HELD_MAX 0xF000
bool item_refs_crowded(const item *it);
/* A transient copy (refcount 1, malloc'd, outside -m) of a value-bearing
 * item the caller references; NULL on out of memory. */
item *item_copy(const item *it);
/* Bytes item_copy() allocates for it. */
size_t item_copy_size(const item *it);

/*
 * incr/decr.  incr wraps at 2^64; decr stops at 0 (memcached rules).
 * out receives the new value as decimal text, NUL-terminated (>= 21
 * bytes).  If req_cas is non-zero it must match.  *cas_out gets the new
 * CAS (may be NULL).  prior: as for item_store_wait (after DELTA_NEED_VALUE).
 */
enum delta_result item_add_delta(const char *key, size_t nkey, bool incr,
                                 uint64_t delta, uint64_t req_cas,
                                 char *out, uint64_t *cas_out, int partition,
                                 const struct item_got *prior);

enum delete_result { DELETE_OK = 1, DELETE_NOT_FOUND, DELETE_EXISTS,
                     DELETE_STALE };

/* Deletes a key; a non-zero req_cas must match.  *clsid (may be NULL)
 * gets the slab class of the item found, 0 if none. */
enum delete_result item_delete(const char *key, size_t nkey, uint64_t req_cas,
                               unsigned int *clsid);

/* md: a delete with the meta protocol's options.  With `stale` (md I) the
 * item stays, marked stale under a new CAS (cas if set_cas, else the next
 * one) so that the next mg wins the right to recache it; its win token is
 * cleared and, with new_ttl, it takes exptime (DELETE_STALE). */
struct item_md {
    bool has_cas;               /* C: req_cas must match */
    uint64_t req_cas;
    bool stale, new_ttl, set_cas;
    rel_time_t exptime;
    uint64_t cas;
};
enum delete_result item_delete_meta(const char *key, size_t nkey,
                                    const struct item_md *md,
                                    unsigned int *clsid);

/* ms I and E: with stale_if_older, a CAS older than the stored item's
 * still stores (as a set), but the new item is marked stale and keeps the
 * old TTL and win-token state; with set_cas the stored item takes `cas`.
 * Otherwise as item_store (no waiting for room); prior as for
 * item_store_wait. */
enum store_result item_store_meta(item *it, enum store_op op, uint64_t req_cas,
                                  uint64_t *cas_out, int partition,
                                  bool stale_if_older, bool set_cas,
                                  uint64_t cas, const struct item_got *prior);

/*
 * flush_all: every item last updated at or before `when` (server clock)
 * counts as dead once the clock reaches `when`.  when == 0 means now.
 */
void item_flush(rel_time_t when);

/* ---- Lower level: caller holds item_lock(hv). ------------------------ */

/* Lookup without the lock; same contract as item_get. */
item *do_item_get(const char *key, size_t nkey, uint32_t hv,
                  enum item_miss *why, bool do_update);
/* Links an item (assigns a fresh CAS unless keep_cas) into index + LRU. */
void do_item_link(item *it, uint32_t hv, bool keep_cas);
/* Unlinks from index + LRU and drops the index's reference. */
void do_item_unlink(item *it, uint32_t hv);
/* Atomically swaps old for new_it in the index (assigns new CAS). */
void do_item_replace(item *old, item *new_it, uint32_t hv);
/* Swaps in another copy of the same version (a tier move): new_it keeps
 * the CAS and access time it was given. */
void do_item_move(item *old, item *new_it, uint32_t hv);
/* Records an access: time, access field, FETCHED/ACTIVE, LRU bump. */
void do_item_touch_access(item *it);
/* item_store with the lock already held. */
enum store_result do_item_store(item *it, enum store_op op, uint64_t req_cas,
                                uint64_t *cas_out, uint32_t hv,
                                int partition);

/* ---- Slab page mover support. ----------------------------------------- */

/*
 * slabs.c's chunk evictor (slabs_set_chunk_evictor; items_init registers
 * it): called by the page mover for every used chunk of a page it is
 * emptying.  Never blocks: takes the item lock with trylock only, and
 * evicts only a linked item nobody else references.  The chunk returns to
 * slabs.c through slabs_free() when its last reference is dropped.  Call
 * with no lock held.
 */
enum chunk_evict_result item_evict_chunk(void *chunk);

/* Moves a locked, pinned item to a lower tier (item_tier_ops.demote,
 * items_demote_tail): true when it was kept there (`it` is unlinked then,
 * not counted as an eviction). */
typedef bool (*item_evict_hook_fn)(item *it, uint32_t hv);

/* ---- Lower tiers (the tier policy in tac/ plugs in here). ------------ */

struct item_tier_ops {
    /* Copies a meta tuple's value into a new transient item (refcount 1);
     * NULL on failure.  The caller holds a reference to the meta tuple. */
    item *(*materialize)(item *meta);
    /* Puts a staging item's value into a lower tier and returns an
     * unlinked meta tuple for it (refcount 1), or NULL when no tier has
     * room.  Called with the key's item lock held. */
    item *(*stage)(item *staging, int partition);
    /* The last reference to a meta tuple is gone: free its tuple. */
    void (*release)(item *meta);
    /* A DRAM allocation of class clsid failed in partition p. */
    void (*dram_pressure)(unsigned int clsid, int partition);
    /* Optional: true when a new item should skip DRAM and be staged to a
     * lower tier right away (tier_policy=anti2 places items without
     * regard to the tier).  Any thread. */
    bool (*skip_dram)(void);
    /* Starts an asynchronous read of a meta tuple's value with `reader`
     * (item_waiter.reader); done(arg, value) runs later on the reader's
     * thread.  False when it cannot start.  Item lock held, meta
     * referenced.  Optional: without it every value is materialized. */
    bool (*read_async)(void *reader, item *meta, const char *key, uint32_t hv,
                       void (*done)(void *arg, const struct item_got *got),
                       void *arg);
    /* Copies the keys of n meta tuples (metas[i]->nkey bytes each), read
     * from their tuples at refs[i] (their references when pinned), into
     * keys[i]; ok[i] false when that tuple is no longer the key's.  Reads
     * the device, many at once, and waits: for listings, never a
     * request's path.  metas pinned, item lock not held. */
    void (*keys_of)(size_t n, item *const *metas, const uint64_t *refs,
                    char (*keys)[KEY_MAX_LENGTH], bool *ok);
    /* Optional: a staging item found no room; true when a lower tier will
     * make some without a client's help (evictors demote, defrag
     * compacts, or a cache drops its coldest), false when every tier is
     * full for good (-M).  Any thread. */
    bool (*room_later)(void);
    /* Gives an item the page mover evicts from DRAM a chance to be kept in
     * a lower tier: called with item_lock(hv) held and `it` pinned,
     * before it is unlinked; true if it was kept (see item_evict_hook_fn). */
    bool (*demote)(item *it, uint32_t hv);
    /* Optional (crash recovery): the version of the key of fingerprint fp
     * (item_key_fp()) that has, or had, a copy in a lower tier is being
     * replaced, deleted or given a
     * shorter life: record it durably now, before the client hears, so
     * that a restart after a crash never brings that copy back.  Item
     * lock held. */
    void (*invalidate)(uint64_t fp);
    /* Optional (crash recovery): the version of this key that has, or
     * had, a copy in a lower tier now expires sooner (exptime): record it
     * durably now, before the client hears, so that a restart after a
     * crash brings that copy back with no longer a life.  It holds until
     * invalidate is called for the key.  Without it, invalidate is called
     * instead (the copy never comes back).  Item lock held. */
    void (*shorten)(uint64_t fp, rel_time_t exptime);
    /* Optional: flush_all ran (every copy written before is dead). */
    void (*flush)(void);
    /* Optional (-o dram_log): a version of a linked DRAM item (a store, an
     * in-place incr, a new exptime, a copy fetched up) is about to be
     * acknowledged: log it durably now.  With it set, invalidate is
     * called for every version replaced, deleted or given a shorter life,
     * not only those with a lower-tier copy.  Returns true when the
     * records of this version keep their order in the log: none is ever
     * copied above a record of a later version.  Item lock held. */
    bool (*logged)(const item *it);
    /* Optional (-o dram_log): whether logged(it) will return true for a
     * DRAM item about to be linked with a new CAS. */
    bool (*log_ordered)(const item *it);
    /* Optional: a client's read of a value found no item for the key
     * (hash hv), neither expired nor flushed: a lower tier that dropped
     * the key for room counts the miss as its own (miss_from_extstore).
     * Item lock held. */
    void (*read_missed)(uint32_t hv);
    /* Optional: a new version of the key (hash hv) is being linked: a
     * drop remembered for it no longer explains a miss.  Item lock held. */
    void (*key_stored)(uint32_t hv);
};

/* Registers the tier policy; NULL (the default) means DRAM only.  Called
 * before any worker runs. */
void items_set_tier_ops(const struct item_tier_ops *ops);
/* false: reads never move items and tails give no second chance, so each
 * LRU is a FIFO by link time (tier_policy=anti2).  Before threads start;
 * items_init() resets it to true. */
void items_set_lazy_lru(bool on);
/* Starts the Lazy LRU thread that applies the workers' queued LRU moves;
 * stop it after the workers. */
void items_lru_threads_start(void);
void items_lru_threads_stop(void);
bool items_tiered(void);

/*
 * Allocates an unlinked meta tuple (refcount 1) describing `src`: same key,
 * flags, exptime, nbytes, CAS, access time and fetch flags, pointing at
 * `ref` in `tier` (compact: on no LRU).  Never evicts
 * a live DRAM item to find room; NULL when DRAM has no chunk for it.
 * `reserved`: may take the slab reserve (slabs_alloc_ex).
 */
item *item_alloc_meta(const item *src, enum item_tier tier, uint64_t ref,
                      int partition, bool reserved);

/* A DRAM item (refcount 1) with staging item st's key, fields and value,
 * when DRAM has a free chunk for it now (no eviction); NULL otherwise.
 * The store of a value no lower tier took tries it before it waits. */
item *item_unstage(const item *st);

/*
 * A DRAM item for the value of meta tuple `meta` (a fetch moving it up):
 * key `key` (meta->nkey bytes, read from its tuple), same flags, exptime, size, CAS and access info, value left to the
 * caller; unlinked, refcount 1.  Takes a free chunk only (never evicts or
 * stages); NULL when DRAM has none, after waking the evictors.  Caller
 * holds meta's item lock.
 */
item *item_alloc_promote(const item *meta, const char *key, int partition);

/*
 * Moves up to `max` of the coldest unreferenced items of class clsid,
 * partition p, of DRAM's LRUs (meta tuples are on none), by
 * calling demote(it, hv) with the item locked and pinned;
 * demote publishes the new copy with do_item_move() and returns true, or
 * returns false to stop.  Dead items met on the way are reclaimed.
 * Returns the number of items moved or reclaimed.
 */
int items_demote_tail(unsigned int clsid, int p, int max,
                      item_evict_hook_fn demote);

/* Unlinks a live item that no tier can keep, counting it in `evictions`
 * (cache semantics).  Caller holds the item lock. */
void do_item_evict(item *it, uint32_t hv);

/* True when reading the value of `it` needs an asynchronous read (its
 * value is on SSD): item_read then answers ITEM_PENDING rather than
 * copy it (item_value_take). */
static inline bool item_value_async(const item *it)
{
    return (it->it_flags & ITEM_META) && it->tier == TIER_SSD;
}

/*
 * A lower tier's CLOCK hand (tac/nvm_clock.c) at the slot `ref`, whose
 * tuple header names `key`.  The slot may be free or being written: only
 * the key's meta tuple, found under its item lock (taken by trylock), says
 * the slot is its own.  If it is:
 *   - a dead item (expired, flushed) is unlinked: LOWER_FREED;
 *   - an item read since the hand last passed (llru_second_chance) stays
 *     for one more lap, its readCount cut: LOWER_SPARED;
 *   - any other goes to move(it, hv) (locked and pinned; publishes the new
 *     copy with do_item_move): LOWER_MOVED, or LOWER_KEPT when it could
 *     not; with move NULL it is evicted (cache semantics): LOWER_EVICTED.
 * A freed item's slot goes back with its meta tuple's last reference.
 */
enum lower_visit {
    LOWER_NOT_OWNED,    /* no linked meta tuple of `tier` points at ref */
    LOWER_BUSY,         /* the key's stripe was held */
    LOWER_FREED,        /* a dead item, reclaimed */
    LOWER_EVICTED,      /* a live item, dropped (move NULL) */
    LOWER_SPARED,
    LOWER_MOVED,
    LOWER_KEPT,
};
enum lower_visit items_lower_visit(enum item_tier tier, uint64_t ref,
                                   const char *key, size_t nkey,
                                   item_evict_hook_fn move);

/* ---- Background and stats. ------------------------------------------- */

/*
 * One bounded step of the expiry crawler: checks at most `budget` items
 * and unlinks the expired or flushed ones.  Returns the number checked;
 * the maintainer thread calls it periodically.
 */
int items_crawl_step(int budget);
/* With -o lru_maintainer or -o temporary_ttl (memcached's segmented LRU,
 * lru_seg.c): the maintainer's juggle of every class's queues, as
 * memcached's LRU maintainer does it; nothing otherwise.  Returns the
 * items it moved or dropped. */
unsigned int items_seg_juggle(void);
/* memcached's `lru mode flat|segmented` and `lru temp_ttl <ttl>` (on with
 * ttl, off): false when turning one on with a lower tier, which keeps the
 * Lazy LRU.  Off, the queues drain into COLD (TEMP as its items expire). */
bool items_seg_set_mode(bool segmented);
bool items_seg_set_temp(bool on, int ttl);
/* `lru_crawler crawl`: the maintainer steps the crawler at every tick
 * (items_crawl_rushed) until one whole cycle is done. */
void items_crawl_soon(void);
bool items_crawl_rushed(void);

/* What a key dump (lru_crawler metadump, stats cachedump) shows of an
 * item: valid only during the callback. */
struct item_view {
    const char *key;
    size_t nkey;
    int64_t exptime;            /* unix time; 0 = never */
    int64_t last_access;        /* unix time */
    uint64_t cas;
    bool fetched;
    unsigned int clsid;         /* slab class of the whole item in DRAM */
    size_t size;                /* bytes of the whole item */
    uint32_t value_len;         /* bytes of value, without "\r\n" */
    enum item_tier tier;        /* where its value lives */
};
/* Calls fn on every live item whose key hash falls in item lock stripe
 * `stripe` (0 .. ITEM_LOCK_COUNT - 1), any tier: on DRAM items holding
 * that stripe, on lower-tier items after it, once each key is read from
 * its tuple (the tier's keys_of: it may wait for the device), and only
 * those want (v without its key) takes, unless want is NULL.  fn must not
 * call into items.  Calling it for every stripe in turn visits
 * once each item that stays meanwhile, while the server runs on. */
void items_view_stripe(unsigned int stripe,
                       bool (*want)(const struct item_view *v, void *arg),
                       void (*fn)(const struct item_view *v, void *arg), void *arg);

/* DRAM held by the linked meta tuples of one lower tier (`stats tiers`,
 * <tier>_dram_bytes_per_item): how many, their slab chunks' bytes (chunk
 * rounding included) and their keys' bytes.  All 0 for TIER_DRAM. */
struct items_tier_dram {
    uint64_t metas;
    uint64_t chunk_bytes;
    uint64_t key_bytes;
};
void items_tier_dram(enum item_tier tier, struct items_tier_dram *out);

struct stat_sink;
/* `stats items`, `stats sizes` (items_init() registers them). */
void items_stats(struct stat_sink *sink);
void items_stats_sizes(struct stat_sink *sink);
/* Clears the per-class counters of `stats items` (`stats reset`; also
 * registered by items_init()). */
void items_stats_reset(void);

#endif

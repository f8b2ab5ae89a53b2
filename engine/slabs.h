/*
 * slabs.h - the DRAM slab allocator and its page mover (interface; see
 * slabs.c for design).
 *
 * slabs.c owns every DRAM page that holds items and meta tuples.  Memory is
 * cut into slab classes of growing chunk size (-n, -f); each class has P
 * partitions (-o partitions) with a free list and lock each.  Pages are
 * taken from the -m budget on demand, and the page mover hands a page from
 * one class to another (or back to the global pool) while the server runs.
 */
#ifndef SLABS_H
#define SLABS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

struct bg;

/* Builds the class table from settings (chunk_size, factor,
 * item_size_max, partitions, maxbytes, prealloc, slab_page_size).  Calling
 * it again frees every page (tests); no other thread may use slabs then. */
void slabs_init(void);

/* Class id for an item of `size` bytes, 0 if too large. */
unsigned int slabs_clsid(size_t size);
/* Chunk size of a class. */
size_t slabs_chunk_size(unsigned int clsid);
/* Number of classes in use (ids are 1..slabs_nclasses()). */
unsigned int slabs_nclasses(void);

/*
 * Takes a free chunk of class `clsid` from `partition`'s free list; when
 * empty, grabs a new page within -m (a pooled page first), then steals
 * from neighbouring partitions.  Returns NULL when the class has no free
 * chunk anywhere (the caller then evicts); that failure is counted for the
 * automover.  The chunk is zeroed only in its header, refcount is 0.
 */
void *slabs_alloc(unsigned int clsid, int partition);

/*
 * slabs_alloc that may also take pages from the reserve: the last
 * slabs_set_reserve() bytes of -m, which plain allocations leave alone.
 * The tier policy allocates meta tuples this way, so that moving an item
 * to a lower tier can always get its meta tuple and frees DRAM.
 */
void *slabs_alloc_ex(unsigned int clsid, int partition, bool reserved);
/* A chunk of class clsid only from what its partitions hold free or not
 * yet carved (no new page, no failure counted): the page mover's rescues
 * (a live item copied out of the page being drained).  NULL: none. */
void *slabs_alloc_spare(unsigned int clsid, int partition);
/* min_donor_chunk: classes whose chunks are this small (those meta tuples
 * live in) never give pages to refill the reserve. */
void slabs_set_reserve(size_t bytes, size_t min_donor_chunk);

/* Returns a chunk to the free list of (clsid, partition), or to the page
 * mover if its page is being drained. */
void slabs_free(void *ptr, unsigned int clsid, int partition);

/* Bytes of -m handed out as pages so far (pooled pages not included). */
size_t slabs_mem_malloced(void);

/* Number of partitions per class in use (settings.partitions, clamped). */
int slabs_npartitions(void);
/* The -m budget in bytes (0 = unlimited). */
size_t slabs_mem_limit(void);
/* cache_memlimit: a new limit for -m, in bytes.  A lower one than what is
 * in use drains pages (the page mover, with slab_reassign) until it holds;
 * false with -L (the memory is one preallocated block) or 0. */
bool slabs_adjust_mem_limit(size_t bytes);
/* Bytes of the meta-tuple-sized classes' chunks in use (slabs_set_reserve). */
size_t slabs_index_bytes(void);

/* Snapshot of one class (stats, tests).  used + free + free_end + moving
 * equals total_chunks when no allocation is in flight. */
struct slabs_class_info {
    size_t chunk_size;
    size_t page_size;
    unsigned int chunks_per_page;
    uint64_t total_pages;
    uint64_t total_chunks;
    uint64_t used_chunks;
    uint64_t free_chunks;       /* on free lists */
    uint64_t free_chunks_end;   /* never handed out yet */
    uint64_t moving_chunks;     /* free chunks of the page being drained */
    uint64_t alloc_fails;       /* slabs_alloc() returned NULL */
    bool movable;               /* its pages can be moved (see slabs.c) */
};
void slabs_class_info(unsigned int clsid, struct slabs_class_info *out);

struct stat_sink;
/* `stats slabs` (chunk sizes, pages, used/free chunks, per-class
 * command counters aggregated by stats.c); slabs_init() registers it. */
void slabs_stats(struct stat_sink *sink);

/* ---- Page mover. --------------------------------------------------------
 *
 * One move at a time.  slabs_reassign_start(), slabs_reassign_step() and
 * slabs_automove_step() belong to the mover's thread (the maintainer): they
 * serialize on the mover's own lock, may take a while (bounded by their
 * budget) and call the chunk evictor, so no worker and no code holding an
 * item, LRU or slab lock may call them.  slabs_reassign_request() and the
 * stats functions are cheap and callable from any thread.
 */

/* What the chunk evictor did with one used chunk of a draining page. */
enum chunk_evict_result {
    CHUNK_FREE,     /* the chunk holds no item (free, or freed meanwhile) */
    CHUNK_EVICTED,  /* its live item was evicted; the chunk is freed once
                       the last reference goes */
    CHUNK_RESCUED,  /* its item moved down a tier; freed likewise */
    CHUNK_RECLAIMED, /* its item was dead (expired or flushed) and was
                       unlinked; freed likewise */
    CHUNK_BUSY,     /* allocated but not linked yet, referenced by a reader,
                       or its stripe is busy: try again later */
};

/* The owner of the chunks' contents (items.c: item_evict_chunk) empties a
 * chunk for the mover.  Set before the mover runs; without one every
 * used chunk stays busy and moves are undone. */
void slabs_set_chunk_evictor(enum chunk_evict_result (*fn)(void *chunk));

/* Answers of slabs_reassign_request(), in `slabs reassign` terms. */
enum slabs_reassign_result {
    SLABS_REASSIGN_OK = 0,      /* queued; "OK" */
    SLABS_REASSIGN_RUNNING,     /* a move is running or queued; "BUSY ..." */
    SLABS_REASSIGN_BADCLASS,    /* unknown or unmovable class; "BADCLASS" */
    SLABS_REASSIGN_NOSPARE,     /* src has fewer than 2 pages; "NOSPARE" */
    SLABS_REASSIGN_SAME,        /* src == dst; "SAME" */
};

/*
 * Starts moving one page of class src to class dst (dst 0 = the global
 * pool: the page's bytes go back to -m for any class).  Picks src's page
 * with the fewest used chunks and marks it draining: its free chunks leave
 * the free lists, and no chunk of it is handed out again.  False if a move
 * is already running, a class is invalid or not movable, src == dst, or
 * src has fewer than 2 pages.  Mover thread only.
 */
bool slabs_reassign_start(unsigned int src, unsigned int dst);

/*
 * Advances the running move (starting a queued request first): visits at
 * most `budget` chunks of the draining page (a run of 64 already free
 * chunks costs 1), asking the chunk evictor to evict each one in use.
 * Completes the move when every chunk is free; undoes it after
 * SLABS_MOVE_MAX_PASSES passes over the page (a pass ends a step, so that
 * is at least that many steps).  Returns the budget used, 0 when idle.
 * Mover thread only.
 */
#define SLABS_MOVE_MAX_PASSES 100
int slabs_reassign_step(int budget);

/* Queues a move for the next slabs_reassign_step() (`slabs reassign`).
 * src 0 is memcached's global page pool: dst gets a pooled page or one of
 * the -m budget not yet spent at once, NOSPARE while less than two pages'
 * worth are left.  Any thread; never blocks on the mover. */
enum slabs_reassign_result slabs_reassign_request(unsigned int src,
                                                  unsigned int dst);

/*
 * The automove policy, one decision per call (the maintainer calls it
 * every ~50 ms, and slabs_reassign_step() to carry moves out).  Bounded:
 * O(classes x partitions) work, at most one move started.  See slabs.c.
 * Mover thread only.
 */
void slabs_automove_step(void);
/* Only the reserve half of slabs_automove_step: keeps the lower tiers'
 * reserve for meta tuples (slabs_set_reserve) refilled when automove is
 * off, since without it demotions stop once DRAM is full. */
void slabs_reserve_step(void);

/* Mover state and counters (tests, stats). */
struct slabs_mover_info {
    bool running;
    unsigned int src, dst;      /* of the running move */
    void *page;                 /* base of the page being drained */
    uint64_t moved;             /* moves completed (slabs_moved) */
    uint64_t moved_to_pool;     /* of which to the global pool */
    uint64_t aborted;           /* moves undone after too many passes */
    uint64_t evictions;         /* items evicted by the mover */
    uint64_t busy_items;        /* chunks found busy, retried later */
    uint64_t automoves;         /* moves started by the automover */
    uint64_t pool_pages;        /* pages in the global pool */
    /* Moves started, by cause. */
    uint64_t by_request;        /* `slabs reassign` */
    uint64_t by_automove;       /* memcached's automove rules */
    uint64_t by_reserve;        /* refilling the meta tuples' reserve */
    uint64_t by_demand;         /* a failing class, from free chunks */
    uint64_t by_watchdog;       /* slabs_watchdog_move */
    uint64_t repaid;            /* drains that paid back a borrowed page */
};
void slabs_mover_info(struct slabs_mover_info *out);

/* The tiers' watchdog (tac/evict.c) found stores waiting and nothing
 * moving: starts a move, whatever the automove rules say, for the class
 * that failed to allocate the most since the last automove tick, from the
 * class with the most free chunk bytes or else the biggest data class.
 * False when a move is running already or none can start. */
bool slabs_watchdog_move(void);

/* True when some class holds enough free chunks to give a page to a class
 * that needs one (the demand rule of slabs_reserve_step and
 * slabs_automove_step): a failed allocation will be served. */
bool slabs_has_spare(void);

/* Kicks.  The threads that act on allocation trouble (the maintainer's
 * page mover, the evictors) doze while the server is idle (base/bg.h).
 * A failed allocation, a page a class takes from -m or the pool, and a
 * `slabs reassign` request kick every registered group (bg_kick: one
 * atomic load each unless it dozes).  Up to 16 groups; any thread. */
void slabs_kick_add(struct bg *g);
void slabs_kick_remove(struct bg *g);
void slabs_kick(void);
/* A count that grows with every failed allocation and every page a class
 * takes (plus one while a `slabs reassign` request waits): the
 * maintainer's test for a quiet tick, and its check before it dozes.  Read with sequentially consistent loads, as it is bumped. */
uint64_t slabs_activity(void);

#endif

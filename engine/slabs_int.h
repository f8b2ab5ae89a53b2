/*
 * slabs_int.h - what the two halves of the DRAM slab allocator share: the
 * classes, pages and partitions (slabs.c: allocation, freeing, pages,
 * stats) and the move under way (slabs_mover.c: the page mover and
 * automove).  Not for use outside them.  The design and the lock order
 * are at the top of slabs.c.
 */
#ifndef SLABS_INT_H
#define SLABS_INT_H

#include <pthread.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "engine/item_layout.h"
#include "engine/slabs.h"

#define CHUNK_ALIGN 8

/* page_map: leaf tables of 2^MAP_LEAF_BITS pages; addresses above
 * 2^MAP_ADDR_BITS are not mapped (their pages are simply not movable). */
#define MAP_LEAF_BITS 14
#define MAP_ADDR_BITS 48

/* Automove (see slabs_automove_step): ticks of failed allocations that make
 * a class needy, failure-free ticks that make it a donor by demand, and the
 * free space (in pages x 2) that makes it a donor by the free rule. */
#define AUTOMOVE_HOT_TICKS 2
#define AUTOMOVE_QUIET_TICKS 20
#define AUTOMOVE_FREE_HALF_PAGES 5
/* Ticks a class must keep that much free before the free rule returns one
 * of its pages to the global pool (memcached looks over a window of
 * seconds, slab_automove_window). */
#define AUTOMOVE_FREE_TICKS 20
/* Yields a failed allocation waits for a class's first page (slabs_alloc_ex). */
#define FIRST_PAGE_SPINS 1000

enum page_state { PAGE_ACTIVE = 0, PAGE_DRAINING, PAGE_POOLED };

struct slab_page {
    char *base;                 /* fixed */
    uint32_t used;              /* atomic: chunks handed out, not freed */
    uint8_t state;              /* atomic; to and from DRAINING under
                                   drain.lock */
    bool mapped;                /* in page_map, hence movable; fixed */
    bool released;              /* pooled with its memory given back to the
                                   system (madvise); pool_lock */
    struct slab_page *pool_next; /* pool_lock */
};

struct slab_part {
    pthread_mutex_t lock;
    item *free_list;        /* lock */
    uint32_t nfree;         /* chunks on free_list; lock */
    char *end_ptr;          /* next uncarved chunk; lock */
    uint32_t end_free;      /* uncarved chunks left at end_ptr; lock */
} __attribute__((aligned(64)));

struct slab_class {
    size_t size;            /* chunk size; set at init */
    size_t page_size;       /* bytes per page of this class; set at init */
    unsigned int perslab;   /* chunks per page; set at init */
    bool movable;           /* set at init: see the top comment */
    uint64_t total_pages;   /* atomic */
    uint64_t used_chunks;   /* atomic: handed out, not yet freed */
    uint64_t alloc_fails;   /* atomic: slabs_alloc returned NULL */
    int want_part;          /* atomic: partition of the latest failure */
    bool grace_used;        /* atomic: first page granted over -m */
    bool grace_pending;     /* atomic: that page is being added */
    pthread_mutex_t pages_lock;
    struct slab_page **pages; /* pages_lock: every page, oldest first */
    size_t npages, pages_cap; /* pages_lock */
    uint64_t am_seen;       /* run_lock: alloc_fails at the last tick */
    uint64_t am_last;       /* run_lock: failures in the last tick */
    uint32_t am_hot;        /* run_lock: consecutive ticks with failures */
    uint32_t am_quiet;      /* run_lock: consecutive ticks without */
    uint32_t am_free_ticks; /* run_lock: consecutive ticks with the free
                               rule's spare chunks (automove_free_to_pool) */
    struct slab_part part[MAX_PARTITIONS];
};

/* The page being drained.  slab_drain_base mirrors slab_drain.page->base
 * for a lock-free first check; both change under slab_drain.lock. */
struct slab_drain {
    pthread_mutex_t lock;
    struct slab_page *page;     /* lock */
    uint64_t *freemap;          /* bit per chunk known free: set under lock,
                                   read by the mover with atomic loads */
    uint32_t nfree;             /* bits set; lock */
    unsigned int clsid;         /* src class; lock */
    unsigned int dst;           /* dst class, 0 = pool; lock */
    size_t size;                /* chunk size; lock */
};

/* The running move; slab_run_lock. */
struct slab_run {
    bool active;
    unsigned int src, dst;
    struct slab_page *page;
    unsigned int cursor;        /* next chunk index of this pass */
    unsigned int passes;
    struct slab_page *last_aborted;
};

/* Mover counters, relaxed atomics: field and `stats` name.  Gauges
 * (slab_reassign_running, slab_global_page_pool) are provided apart. */
#define MOVER_STATS_FIELDS(X) \
    X(moved,         "slabs_moved") \
    X(moved_to_pool, "slab_reassign_to_pool") \
    X(aborted,       "slab_reassign_aborted") \
    X(evictions,     "slab_reassign_evicted") \
    X(rescues,       "slab_reassign_rescues") \
    X(evictions_nomem, "slab_reassign_evictions_nomem") \
    X(inline_reclaim, "slab_reassign_inline_reclaim") \
    X(busy_items,    "slab_reassign_busy_items") \
    X(automoves,     "slab_automove_moves")
#define MOVER_FIELD(name, wire) uint64_t name;
struct slab_mover_stats {
    uint64_t running;
    MOVER_STATS_FIELDS(MOVER_FIELD)
    /* Moves by cause (slabs_mover_info; `stats tiers` shows them). */
    uint64_t by_request;    /* `slabs reassign` */
    uint64_t by_automove;   /* memcached's automove rules */
    uint64_t by_reserve;    /* refilling the meta tuples' reserve, or a
                               lowered limit */
    uint64_t by_demand;     /* a class that failed to allocate, from free
                               chunks (a lower tier configured) */
    uint64_t by_watchdog;   /* slabs_watchdog_move */
    uint64_t repaid;        /* drains that paid back a page borrowed past
                               -m (charge_page) */
};
#undef MOVER_FIELD

/* Defined in slabs.c. */
extern struct slab_class slab_classes[MAX_SLAB_CLASSES];
extern unsigned int slab_nclasses;      /* set at init */
extern int slab_npart;                  /* set at init */
extern size_t slab_mem_limit;           /* atomic: set at init and by
                                           slabs_adjust_mem_limit */
extern size_t slab_mem_malloced;        /* atomic */
extern size_t slab_std_page;            /* settings.slab_page_size; set at init */
extern char *slab_prealloc_base;        /* set at init */
extern uint64_t slab_pool_pages;        /* atomic; changed under the pool lock */
extern struct slab_drain slab_drain;
extern char *slab_drain_base;           /* atomic */
extern bool slab_borrowed;              /* atomic: a page is charged past -m
                                           for a drain (charge_page) */
extern pthread_mutex_t slab_run_lock;
extern bool slab_shrinking;             /* atomic, written under slab_run_lock:
                                           more is charged than a lowered limit
                                           (cache_memlimit) */
extern struct slab_run slab_run;
/* A queued `slabs reassign`: 0 = none, else 1 << 16 | src << 8 | dst. */
extern uint32_t slab_req_word;          /* atomic */
extern struct slab_mover_stats slab_mstats;
/* items.c's item_evict_chunk (slabs_set_chunk_evictor). */
extern enum chunk_evict_result (*slab_chunk_evictor)(void *chunk);
/* Bytes of -m only reserved allocations may take (slabs_set_reserve), and
 * the chunk size at or below which a class never donates to refill it. */
extern size_t slab_reserve_bytes;       /* atomic */
extern size_t slab_reserve_donor_min;   /* set before threads start */

/* slabs.c's page and partition primitives, for the mover (their comments
 * are at their code). */
char *slab_page_base_of(const void *p);
bool slab_index_class(const struct slab_class *c);
void slab_pool_put(struct slab_page *pg, bool released);
bool slab_class_add_page(struct slab_class *c, struct slab_page *pg);
void slab_class_remove_page(struct slab_class *c, struct slab_page *pg);
struct slab_page *slab_new_page(struct slab_class *c, bool reserved, bool *grace);
void slab_drain_mark_locked(const char *chunk);
void slab_chunk_push_locked(struct slab_part *sp, item *it);
void slab_part_install_locked(struct slab_class *c, struct slab_part *sp,
                              char *pg, unsigned int clsid);

#endif

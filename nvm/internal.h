/*
 * internal.h - struct nvm_region, shared by nvm/region.c (mapping, header,
 * access, latency) and nvm/alloc.c (slab allocator).  Not for use outside
 * nvm/.
 *
 * Locking: the partition locks (struct nvm_part.lock) and reuse_lock (one
 * page search or drain pick at a time).  reuse_lock is taken before
 * partition locks (nvm_drain_begin); page_reuse, holding a partition lock,
 * only trylocks reuse_lock and then a second partition lock.  Otherwise at
 * most one partition lock is held, and nothing outside nvm/ is taken under
 * any of them.  Fields marked "set at open" are written before
 * nvm_open returns and read-only afterwards.  Fields marked "atomic" are
 * accessed with __atomic builtins only (relaxed unless noted).
 */
#ifndef NVM_INTERNAL_H
#define NVM_INTERNAL_H

#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>

#include "nvm/format.h"
#include "nvm/nvm.h"

#define NVM_LOAD(p) __atomic_load_n((p), __ATOMIC_RELAXED)
#define NVM_STORE(p, v) __atomic_store_n((p), (v), __ATOMIC_RELAXED)
#define NVM_ADD(p, v) __atomic_add_fetch((p), (v), __ATOMIC_RELAXED)
#define NVM_SUB(p, v) __atomic_sub_fetch((p), (v), __ATOMIC_RELAXED)

/* One free list of one class.  Aligned so partitions do not share lines. */
struct nvm_part {
    pthread_mutex_t lock;
    uint64_t *stack;        /* free slot refs, LIFO; lock */
    uint64_t cap;           /* entries in stack; lock */
    uint64_t owned;         /* slots in pages this partition owns; lock */
    uint64_t end_ref;       /* next uncarved slot of the newest page; lock */
    uint64_t nfree;         /* entries on stack; lock + atomic */
    uint64_t end_free;      /* uncarved slots at end_ref; lock + atomic */
} __attribute__((aligned(64)));

struct nvm_class {
    uint64_t slot_size;     /* set at open */
    uint32_t per_page;      /* slots per page; set at open */
    uint64_t pages;         /* atomic */
    uint64_t used;          /* atomic: allocated, not yet freed */
    uint64_t steals;        /* atomic */
    uint64_t fails;         /* atomic */
    struct nvm_part *parts; /* [nparts]; set at open */
};

struct nvm_region {
    /* Mapping; set at open. */
    char *base;
    size_t mapped_len;      /* what mmap/pmem_map_file returned */
    size_t capacity;        /* bytes used as the region (<= mapped_len) */
    const char *backing;    /* static string */
    char *path;             /* malloc'd copy */
    bool is_pmem;
    bool is_anon;           /* numa:N: munmap, nothing to make durable */
    bool created;               /* nvm_open created the file: a failed
                                   open removes it */
    int numa_node;
    enum nvm_prev_state prev_state;
    uint64_t open_count;        /* of the header found (0: none), then written */
    unsigned read_ns, write_ns;
    uint64_t read_blocks;   /* atomic: blocks charged as read (read_ns != 0) */
    uint8_t key_check[16];      /* nvm_config.key_check */

    /* Geometry; set at open. */
    uint64_t page_size;
    uint64_t npages;
    unsigned nclasses;
    int nparts;
    struct nvm_class classes[NVM_MAX_CLASSES + 1];   /* [1..nclasses] */

    /* Pages. */
    uint64_t next_page;     /* atomic: pages [0, next_page) are handed out */
    uint8_t *page_class;    /* [npages]; atomic; 0 = not handed out */
    uint8_t *page_owner;    /* [npages]; atomic; owning partition */
    uint8_t *page_used;     /* [npages]; under the taker's partition lock:
                               may hold bytes of an earlier use (page_wipe) */
    uint64_t adopted_ahead; /* atomic: adopted pages at or past next_page */
    uint8_t *class_map;     /* atomic pointer: the caller's durable copy of
                               page_class (nvm_set_class_map), or NULL */
    uint64_t *adopted;      /* nvm_adopt's slot bitmap until nvm_adopt_done */

    /* Reuse of wholly free pages by another class (alloc.c, page_reuse). */
    pthread_mutex_t reuse_lock;     /* trylock: one search at a time */
    uint32_t *reuse_count;          /* [npages] scratch; reuse_lock */
    uint64_t reuse_after_ns;        /* atomic: no search before this */
    uint64_t pages_reused;          /* atomic */

    /* The page being emptied (alloc.c, "Draining a page").  drain_page is
     * written under its owner partition's lock, so a free of one of its
     * slots (which takes that lock) sees it; the rest is guarded by the
     * same lock. */
    uint64_t drain_page;            /* atomic; NVM_NO_PAGE when none */
    uint64_t drain_live;            /* its slots still allocated */
    uint64_t *drain_free;           /* bitmap of its free slots */
    size_t drain_words;             /* its length; set at open */
    uint64_t ready_page;            /* atomic: emptied, not yet taken */
    uint64_t pages_drained;         /* atomic */

    /* Stats. */
    uint64_t bytes_used;    /* atomic */
    uint64_t dram_bytes;    /* atomic: metadata malloc'd (stacks reserved) */
};

#define NVM_NO_PAGE UINT64_MAX

static inline uint64_t nvm_page_ref(const struct nvm_region *r, uint64_t page)
{
    return NVM_DATA_OFFSET + page * r->page_size;
}

/* alloc.c, called by nvm_open/nvm_close in region.c.
 * nvm_classes_init: fills classes[] from r->page_size, before mapping.
 * nvm_alloc_init: DRAM metadata for r->npages pages and r->nparts parts.
 * nvm_alloc_destroy: frees what nvm_alloc_init made (safe on a partial one). */
enum nvm_status nvm_classes_init(struct nvm_region *r, double factor,
                                 uint64_t slot_max);
enum nvm_status nvm_alloc_init(struct nvm_region *r);
void nvm_alloc_destroy(struct nvm_region *r);

#endif

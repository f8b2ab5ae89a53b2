/*
 * slabs.c - the DRAM slab allocator and its page mover.
 *
 * Owns: every DRAM page that holds items and meta tuples, the -m budget
 * (settings.maxbytes) they are charged against, the global pool of spare
 * pages, and the page mover with its automove policy.
 *
 * Design.  Chunk sizes grow geometrically: class 1 holds a header plus
 * settings.chunk_size bytes (-n), each next class is settings.factor (-f)
 * times larger, every size rounded up to 8 bytes; the last class is
 * exactly settings.item_size_max (-I).  A class's pages are
 * settings.slab_page_size bytes, except that a class whose chunk is bigger
 * than that gets pages of exactly one chunk.
 *
 * Each class has P partitions (settings.partitions, default the number of
 * worker threads, at most MAX_PARTITIONS).  A partition has its own lock,
 * free list and "end" region (the not yet carved tail of its newest page).
 * slabs_alloc() serves the requesting partition from its free list, then
 * its end region, then a new page charged to -m (which goes to that
 * partition), and only then steals one chunk from the neighbours p+1,
 * p+2, ... in turn.
 *
 * Memory limit: a page is granted while total page bytes stay within -m.
 * Like memcached, a class that has no page yet gets one even over -m, so a
 * tiny -m still works for every class in use; -m is then exceeded by at
 * most one page per class (each class gets this grace once).  With -L
 * (prealloc) one block of -m bytes is allocated up front and pages are
 * carved from it.
 *
 * Page mover.  When slab_page_size is a power of two, pages of its size are
 * allocated aligned to it, so a chunk's page is ptr & ~(page_size - 1), and
 * they are zeroed when created or re-carved (the mover reads the refcount
 * of chunks that were handed out, never garbage).  page_map, a two-level
 * radix table keyed by page number, leads from a chunk to its struct
 * slab_page (count of used chunks, state).  Such classes are "movable";
 * classes with one-chunk pages bigger than slab_page_size are not.
 * One move runs at a time:
 *   start  - pick src's page with the fewest used chunks, mark it draining
 *            (drain_base), then purge its chunks from every partition's
 *            free list and end region: they go to drain.freemap instead.
 *   drain  - from then on, a chunk of that page freed by slabs_free() or
 *            popped by slabs_alloc() is set aside in drain.freemap too.
 *   step   - slabs_reassign_step() asks item_evict_chunk() to evict every
 *            chunk not yet in the freemap; evicted chunks come back through
 *            slabs_free() when their last reference goes.  Busy chunks are
 *            retried on the next pass.
 *   finish - once all chunks are free the page is zeroed and becomes the
 *            end region of dst's most recently starved partition, or goes
 *            to the global pool (uncharged from -m, reused by new_page()
 *            before malloc).
 *   abort  - after SLABS_MOVE_MAX_PASSES passes the move is undone: the
 *            freemap's chunks go back on src's free lists, the page is
 *            active again and is skipped by the next pick.
 * Automove (slabs_automove_step), the reserve refill and the demand rule
 * that serves any failing class while a lower tier is configured
 * (automove_serve_demand_locked) are described above their code.
 *
 * Threads: any thread allocates and frees; the maintainer (or a test) runs
 * the mover.  Locks, outermost first:
 *   run_lock        mover state; held by the mover across item_evict_chunk,
 *                   never taken by workers or under any other lock
 *   item lock -> LRU lock   (items.c, reached through item_evict_chunk)
 *   part[p].lock    a partition's free list and end region
 *   drain.lock      the draining page's freemap (taken under part locks)
 * pages_lock, pool_lock and map_lock are leaves: a new page for an
 * allocation is made under the caller's locks (an item lock, and run_lock
 * for the mover).  The server's whole order is in items.h.
 */
#include "config.h"

#include <assert.h>
#include <pthread.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#include "item_layout.h"
#include "settings.h"
#include "slabs.h"
#include "stats.h"

/* items.c's item_evict_chunk (slabs_set_chunk_evictor). */
static enum chunk_evict_result (*chunk_evictor)(void *chunk);

void slabs_set_chunk_evictor(enum chunk_evict_result (*fn)(void *chunk))
{
    chunk_evictor = fn;
}

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

static struct slab_class classes[MAX_SLAB_CLASSES];
static unsigned int nclasses;       /* set at init */
static int npart;                   /* set at init */
static size_t mem_limit;            /* atomic: set at init and by
                                       slabs_adjust_mem_limit */
static size_t mem_malloced;         /* atomic */
static size_t std_page;             /* settings.slab_page_size; set at init */
static char *prealloc_base;         /* set at init */
static size_t prealloc_len;         /* set at init */
static size_t prealloc_used;        /* atomic: bytes carved from it */
static bool initialized;

/* page_map: the top level is set at init, leaves are published with
 * release stores under map_lock and read with acquire loads. */
static struct slab_page ***page_map;
static size_t map_top_n;            /* set at init */
static unsigned int page_shift;     /* set at init; 0 = mover disabled */
static pthread_mutex_t map_lock = PTHREAD_MUTEX_INITIALIZER;

/* Global pool of spare pages (all of std_page bytes, zeroed). */
static pthread_mutex_t pool_lock = PTHREAD_MUTEX_INITIALIZER;
static struct slab_page *pool_head;  /* pool_lock */
static uint64_t pool_pages;          /* atomic; changed under pool_lock */
static uint64_t pool_resident;       /* atomic: pooled pages still in memory */

/* The page being drained.  drain_base mirrors drain.page->base for a
 * lock-free first check; both change under drain.lock. */
static struct {
    pthread_mutex_t lock;
    struct slab_page *page;     /* lock */
    uint64_t *freemap;          /* bit per chunk known free: set under lock,
                                   read by the mover with atomic loads */
    uint32_t nfree;             /* bits set; lock */
    unsigned int clsid;         /* src class; lock */
    unsigned int dst;           /* dst class, 0 = pool; lock */
    size_t size;                /* chunk size; lock */
} drain = { .lock = PTHREAD_MUTEX_INITIALIZER };
static char *drain_base;            /* atomic */

/* The running move; run_lock. */
static pthread_mutex_t run_lock = PTHREAD_MUTEX_INITIALIZER;
static bool shrinking;      /* atomic, written under run_lock: more is charged
                               than a lowered limit (cache_memlimit) */
static struct {
    bool active;
    unsigned int src, dst;
    struct slab_page *page;
    unsigned int cursor;        /* next chunk index of this pass */
    unsigned int passes;
    struct slab_page *last_aborted;
} run;
/* A queued `slabs reassign`: 0 = none, else 1 << 16 | src << 8 | dst. */
static uint32_t req_word;           /* atomic */

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
static struct {
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
} mstats;
#undef MOVER_FIELD

static size_t align_up(size_t n)
{
    return (n + CHUNK_ALIGN - 1) & ~(size_t)(CHUNK_ALIGN - 1);
}

static size_t round_to_page(size_t n)
{
    return (n + std_page - 1) / std_page * std_page;
}

/* ---- Page map. ------------------------------------------------------- */

static char *page_base_of(const void *p)
{
    return (char *)((uintptr_t)p & ~(uintptr_t)(std_page - 1));
}

static struct slab_page *page_lookup(const void *p)
{
    if (page_shift == 0)
        return NULL;
    uintptr_t key = (uintptr_t)p >> page_shift;
    uintptr_t top = key >> MAP_LEAF_BITS;
    if (top >= map_top_n)
        return NULL;
    struct slab_page **leaf = __atomic_load_n(&page_map[top], __ATOMIC_ACQUIRE);
    if (leaf == NULL)
        return NULL;
    return __atomic_load_n(&leaf[key & ((1u << MAP_LEAF_BITS) - 1)],
                           __ATOMIC_ACQUIRE);
}

/* Enters an aligned page; false if it cannot be mapped. */
static bool map_insert(struct slab_page *pg)
{
    uintptr_t key = (uintptr_t)pg->base >> page_shift;
    uintptr_t top = key >> MAP_LEAF_BITS;
    if (page_shift == 0 || top >= map_top_n)
        return false;
    bool ok = true;
    pthread_mutex_lock(&map_lock);
    struct slab_page **leaf = page_map[top];
    if (leaf == NULL) {
        leaf = calloc((size_t)1 << MAP_LEAF_BITS, sizeof(*leaf));
        if (leaf != NULL)
            __atomic_store_n(&page_map[top], leaf, __ATOMIC_RELEASE);
        else
            ok = false;
    }
    if (ok)
        __atomic_store_n(&leaf[key & ((1u << MAP_LEAF_BITS) - 1)], pg,
                         __ATOMIC_RELEASE);
    pthread_mutex_unlock(&map_lock);
    return ok;
}

static void map_init(void)
{
    page_shift = 0;
    map_top_n = 0;
    size_t ps = (size_t)settings.slab_page_size;
    if (ps < 4096 || (ps & (ps - 1)) != 0)
        return;                         /* not a power of two: no mover */
    unsigned int shift = 0;
    while (((size_t)1 << shift) < ps)
        shift++;
    int top_bits = MAP_ADDR_BITS - (int)shift - MAP_LEAF_BITS;
    size_t n = (size_t)1 << (top_bits > 0 ? top_bits : 0);
    page_map = calloc(n, sizeof(*page_map));
    if (page_map == NULL)
        return;
    map_top_n = n;
    page_shift = shift;
}

/* ---- Init and teardown. ---------------------------------------------- */

static bool in_prealloc(const char *p)
{
    return prealloc_base != NULL && p >= prealloc_base &&
           p < prealloc_base + prealloc_len;
}

static void page_destroy(struct slab_page *pg)
{
    if (!in_prealloc(pg->base))
        free(pg->base);
    free(pg);
}

static void slabs_teardown(void)
{
    for (unsigned int i = 1; i <= nclasses; i++) {
        struct slab_class *c = &classes[i];
        for (size_t j = 0; j < c->npages; j++)
            page_destroy(c->pages[j]);
        free(c->pages);
        pthread_mutex_destroy(&c->pages_lock);
        for (int p = 0; p < MAX_PARTITIONS; p++)
            pthread_mutex_destroy(&c->part[p].lock);
    }
    while (pool_head != NULL) {
        struct slab_page *pg = pool_head;
        pool_head = pg->pool_next;
        page_destroy(pg);
    }
    for (size_t t = 0; t < map_top_n; t++)
        free(page_map[t]);
    free(page_map);
    page_map = NULL;
    free(drain.freemap);
    free(prealloc_base);
    prealloc_base = NULL;
}

static void init_class(unsigned int id, size_t size)
{
    struct slab_class *c = &classes[id];
    memset(c, 0, sizeof(*c));
    c->size = size;
    c->page_size = std_page;
    if (c->size > c->page_size)
        c->page_size = c->size;
    c->perslab = (unsigned int)(c->page_size / c->size);
    c->movable = page_shift != 0 && c->page_size == std_page;
    pthread_mutex_init(&c->pages_lock, NULL);
    for (int p = 0; p < MAX_PARTITIONS; p++)
        pthread_mutex_init(&c->part[p].lock, NULL);
}

#define META_FINE_MAX 128

static void build_classes(void)
{
    size_t max = align_up((size_t)settings.item_size_max);
    /* The smallest chunk holds a compact meta tuple's header plus -n bytes
     * of key (free chunks keep their list link in the core). */
    size_t size = align_up(ITEM_COMPACT_HDR + (size_t)settings.chunk_size);
    double factor = settings.factor > 1.0 ? settings.factor : 1.01;
    /* With an SSD tier most of DRAM may hold meta tuples of
     * ITEM_COMPACT_HDR + key bytes: classes step by CHUNK_ALIGN up to
     * META_FINE_MAX, so that one costs at most CHUNK_ALIGN - 1 bytes of
     * rounding for keys up to META_FINE_MAX - ITEM_COMPACT_HDR bytes.
     * Named with memcached's -o ext_path, the SSD tier keeps memcached's
     * classes instead (settings_finalize leaves -n at memcached's 48). */
    size_t fine_max = settings.ssd_path != NULL && settings.ext_path == NULL
                      ? META_FINE_MAX : 0;

    nclasses = 0;
    while (nclasses < MAX_SLAB_CLASSES - 2 && size < max &&
           (double)size <= (double)max / factor) {
        init_class(++nclasses, size);
        size_t next = align_up((size_t)((double)size * factor));
        if (size < fine_max)
            next = size + CHUNK_ALIGN;
        size = next > size ? next : size + CHUNK_ALIGN;
    }
    init_class(++nclasses, max);
}

static void prealloc_init(void)
{
    prealloc_len = round_to_page(mem_limit);
    void *p = NULL;
    if (page_shift != 0) {
        if (posix_memalign(&p, std_page, prealloc_len) != 0)
            p = NULL;
    } else {
        p = malloc(prealloc_len);
    }
    prealloc_base = p;
    if (prealloc_base == NULL && settings.verbose > 0)
        fprintf(stderr, "slabs: cannot preallocate %zu bytes; "
                "allocating pages on demand\n", prealloc_len);
}

static uint64_t stat_total_malloced(void);
static void slabs_stats_register(void);

void slabs_init(void)
{
    if (initialized)
        slabs_teardown();
    initialized = true;

    npart = settings.partitions > 0 ? settings.partitions
                                    : settings.num_threads;
    if (npart < 1)
        npart = 1;
    if (npart > MAX_PARTITIONS)
        npart = MAX_PARTITIONS;
    mem_limit = settings.maxbytes;
    mem_malloced = 0;
    /* memcached's test hook, read as memcached reads it in every build:
     * that many bytes count as handed out already (its t/64bit.t fakes a
     * 4 GB preallocation with it). */
    const char *fake = getenv("T_MEMD_INITIAL_MALLOC");
    if (fake != NULL)
        mem_malloced = (size_t)strtoull(fake, NULL, 10);
    shrinking = false;
    prealloc_used = 0;
    std_page = (size_t)settings.slab_page_size;
    pool_head = NULL;
    pool_pages = 0;
    pool_resident = 0;
    drain.page = NULL;
    drain.freemap = NULL;
    drain.nfree = 0;
    drain_base = NULL;
    memset(&run, 0, sizeof(run));
    memset(&mstats, 0, sizeof(mstats));
    req_word = 0;
    map_init();
    build_classes();

    if (settings.prealloc && mem_limit > 0)
        prealloc_init();
    slabs_stats_register();
    if (settings.verbose > 1) {
        for (unsigned int i = 1; i <= nclasses; i++)
            fprintf(stderr, "slab class %3u: chunk size %9zu perslab %7u\n",
                    i, classes[i].size, classes[i].perslab);
    }
}

int slabs_npartitions(void)
{
    return npart;
}

unsigned int slabs_clsid(size_t size)
{
    if (size == 0)
        return 0;
    /* Binary search over the ascending chunk sizes. */
    unsigned int lo = 1, hi = nclasses;
    if (hi == 0 || size > classes[hi].size)
        return 0;
    while (lo < hi) {
        unsigned int mid = (lo + hi) / 2;
        if (classes[mid].size >= size)
            hi = mid;
        else
            lo = mid + 1;
    }
    return lo;
}

size_t slabs_chunk_size(unsigned int clsid)
{
    return (clsid >= 1 && clsid <= nclasses) ? classes[clsid].size : 0;
}

unsigned int slabs_nclasses(void)
{
    return nclasses;
}

size_t slabs_mem_malloced(void)
{
    return __atomic_load_n(&mem_malloced, __ATOMIC_RELAXED);
}

size_t slabs_mem_limit(void)
{
    return __atomic_load_n(&mem_limit, __ATOMIC_RELAXED);
}

/* ---- Pages. ------------------------------------------------------------ */

/* Bytes of -m only reserved allocations may take (slabs_set_reserve). */
static size_t reserve_bytes;        /* atomic */
/* Classes with chunks this small never donate pages to refill it. */
static size_t reserve_donor_min;    /* set before threads start */

void slabs_set_reserve(size_t bytes, size_t min_donor_chunk)
{
    reserve_donor_min = min_donor_chunk;
    __atomic_store_n(&reserve_bytes, bytes, __ATOMIC_RELAXED);
}

/* A class too small to donate to the reserve: it holds meta tuples.  None
 * without a reserve. */
static bool index_class(const struct slab_class *c)
{
    return reserve_donor_min != 0 && c->size <= reserve_donor_min;
}

/* Bytes of the index classes' chunks in use.  Their pages would say less:
 * with a small -m, each class's first page is mostly free. */
size_t slabs_index_bytes(void)
{
    size_t n = 0;
    for (unsigned int i = 1; i <= nclasses; i++) {
        struct slab_class *c = &classes[i];
        if (index_class(c))
            n += (size_t)__atomic_load_n(&c->used_chunks, __ATOMIC_RELAXED) * c->size;
    }
    return n;
}

/* Charges one page to -m; false if the budget is spent (see top). */
static bool charge_page(struct slab_class *c, bool reserved, bool *grace)
{
    size_t cur = __atomic_load_n(&mem_malloced, __ATOMIC_RELAXED);
    size_t limit = __atomic_load_n(&mem_limit, __ATOMIC_RELAXED);
    size_t resv = __atomic_load_n(&reserve_bytes, __ATOMIC_RELAXED);
    if (limit != 0 && !reserved)
        limit = limit > resv ? limit - resv : 0;
    /* Draining pages down to a lowered limit moves their items down a tier,
     * which takes meta tuples (reserved): those may go past the limit
     * meanwhile, or the drain could never finish. */
    if (reserved && __atomic_load_n(&shrinking, __ATOMIC_RELAXED))
        limit = 0;
    for (;;) {
        if (limit != 0 && cur + c->page_size > limit) {
            /* Over budget: only a class without pages gets one, once. */
            bool no = false;
            if (__atomic_load_n(&c->total_pages, __ATOMIC_RELAXED) != 0 ||
                !__atomic_compare_exchange_n(&c->grace_used, &no, true,
                                             false, __ATOMIC_RELAXED,
                                             __ATOMIC_RELAXED))
                return false;
            __atomic_store_n(&c->grace_pending, true, __ATOMIC_RELAXED);
            *grace = true;
            __atomic_fetch_add(&mem_malloced, c->page_size, __ATOMIC_RELAXED);
            return true;
        }
        if (__atomic_compare_exchange_n(&mem_malloced, &cur,
                                        cur + c->page_size, false,
                                        __ATOMIC_RELAXED, __ATOMIC_RELAXED))
            return true;
    }
}

static char *page_memory(size_t len, bool aligned)
{
    if (prealloc_base != NULL) {
        size_t take = round_to_page(len);   /* keeps carvings aligned */
        size_t off = __atomic_fetch_add(&prealloc_used, take,
                                        __ATOMIC_RELAXED);
        if (off + take <= prealloc_len)
            return prealloc_base + off;
    }
    if (aligned) {
        void *p;
        return posix_memalign(&p, len, len) == 0 ? p : NULL;
    }
    return malloc(len);
}

/* A new page for class c, zeroed and mapped if c is movable. */
static struct slab_page *page_create(struct slab_class *c)
{
    struct slab_page *pg = calloc(1, sizeof(*pg));
    if (pg == NULL)
        return NULL;
    pg->base = page_memory(c->page_size, c->movable);
    if (pg->base == NULL) {
        free(pg);
        return NULL;
    }
    if (c->movable) {
        memset(pg->base, 0, c->page_size);
        pg->mapped = map_insert(pg);
    }
    return pg;
}

/* released: pg's memory was given back to the system (madvise). */
static void pool_put(struct slab_page *pg, bool released)
{
    __atomic_store_n(&pg->used, 0, __ATOMIC_RELAXED);
    __atomic_store_n(&pg->state, PAGE_POOLED, __ATOMIC_RELAXED);
    pthread_mutex_lock(&pool_lock);
    pg->pool_next = pool_head;
    pg->released = released;
    pool_head = pg;
    __atomic_fetch_add(&pool_pages, 1, __ATOMIC_RELAXED);
    if (!released)
        __atomic_fetch_add(&pool_resident, 1, __ATOMIC_RELAXED);
    pthread_mutex_unlock(&pool_lock);
}

static struct slab_page *pool_take(void)
{
    if (__atomic_load_n(&pool_pages, __ATOMIC_RELAXED) == 0)
        return NULL;
    pthread_mutex_lock(&pool_lock);
    struct slab_page *pg = pool_head;
    if (pg != NULL) {
        pool_head = pg->pool_next;
        pg->pool_next = NULL;
        __atomic_fetch_sub(&pool_pages, 1, __ATOMIC_RELAXED);
        if (!pg->released)
            __atomic_fetch_sub(&pool_resident, 1, __ATOMIC_RELAXED);
    }
    pthread_mutex_unlock(&pool_lock);
    if (pg != NULL)
        __atomic_store_n(&pg->state, PAGE_ACTIVE, __ATOMIC_RELAXED);
    return pg;
}

/* Adds pg to c's page list; false if the list cannot grow. */
static bool class_add_page(struct slab_class *c, struct slab_page *pg)
{
    bool ok = true;
    pthread_mutex_lock(&c->pages_lock);
    if (c->npages == c->pages_cap) {
        size_t cap = c->pages_cap ? c->pages_cap * 2 : 16;
        struct slab_page **np = realloc(c->pages, cap * sizeof(*np));
        if (np == NULL) {
            ok = false;
        } else {
            c->pages = np;
            c->pages_cap = cap;
        }
    }
    if (ok)
        c->pages[c->npages++] = pg;
    pthread_mutex_unlock(&c->pages_lock);
    if (ok)
        __atomic_fetch_add(&c->total_pages, 1, __ATOMIC_RELAXED);
    return ok;
}

static void class_remove_page(struct slab_class *c, struct slab_page *pg)
{
    pthread_mutex_lock(&c->pages_lock);
    for (size_t i = 0; i < c->npages; i++) {
        if (c->pages[i] == pg) {
            memmove(&c->pages[i], &c->pages[i + 1],
                    (c->npages - i - 1) * sizeof(c->pages[0]));
            c->npages--;
            break;
        }
    }
    pthread_mutex_unlock(&c->pages_lock);
    __atomic_fetch_sub(&c->total_pages, 1, __ATOMIC_RELAXED);
}

/* Gets a page for class c within -m: a pooled one, else a new one. */
static struct slab_page *new_page(struct slab_class *c, bool reserved,
                                  bool *grace)
{
    if (!charge_page(c, reserved, grace))
        return NULL;
    struct slab_page *pg = c->movable ? pool_take() : NULL;
    if (pg == NULL)
        pg = page_create(c);
    if (pg != NULL && !class_add_page(c, pg)) {
        if (pg->mapped)
            pool_put(pg, false); /* the map keeps pointing at it */
        else
            page_destroy(pg);
        pg = NULL;
    }
    if (pg == NULL)
        __atomic_fetch_sub(&mem_malloced, c->page_size, __ATOMIC_RELAXED);
    return pg;
}

/* ---- Draining (see the top comment). ---------------------------------- */

/* Records a free chunk of the draining page.  Caller holds drain.lock. */
static void drain_mark_locked(const char *chunk)
{
    size_t idx = (size_t)(chunk - drain.page->base) / drain.size;
    assert((size_t)(chunk - drain.page->base) % drain.size == 0);
    uint64_t bit = (uint64_t)1 << (idx % 64);
    assert((drain.freemap[idx / 64] & bit) == 0);
    __atomic_fetch_or(&drain.freemap[idx / 64], bit, __ATOMIC_RELAXED);
    drain.nfree++;
}

/*
 * Takes a free chunk for the mover if it lies in the draining page.
 * Called with the chunk's partition lock held: the mover purges each
 * partition after setting drain_base, so a chunk pushed without seeing it
 * is purged, and one that sees it is marked here.
 */
static bool drain_claim(const item *it)
{
    char *db = __atomic_load_n(&drain_base, __ATOMIC_RELAXED);
    if (db == NULL || page_shift == 0 || page_base_of(it) != db)
        return false;
    bool claimed = false;
    pthread_mutex_lock(&drain.lock);
    if (drain.page != NULL && drain.page->base == db) {
        drain_mark_locked((const char *)it);
        claimed = true;
    }
    pthread_mutex_unlock(&drain.lock);
    return claimed;
}

/* ---- Partitions. ------------------------------------------------------- */

/* Takes a chunk from a partition.  Caller holds sp->lock. */
static item *part_take_locked(struct slab_class *c, struct slab_part *sp)
{
    item *it;
    while ((it = sp->free_list) != NULL) {
        sp->free_list = it->h_next;
        sp->nfree--;
        if (!drain_claim(it))
            return it;
    }
    if (sp->end_free > 0) {
        it = (item *)sp->end_ptr;
        sp->end_ptr += c->size;
        sp->end_free--;
        return it;
    }
    return NULL;
}

static void chunk_push_locked(struct slab_part *sp, item *it)
{
    it->it_flags = ITEM_SLABBED;
    it->h_next = sp->free_list;
    sp->free_list = it;
    sp->nfree++;
}

/* Makes pg the end region of sp, carving what is left of the old one onto
 * the free list first.  Caller holds sp->lock. */
static void part_install_locked(struct slab_class *c, struct slab_part *sp,
                                char *pg, unsigned int clsid)
{
    while (sp->end_free > 0) {
        item *old = (item *)sp->end_ptr;
        old->slabs_clsid = (uint8_t)clsid;
        sp->end_ptr += c->size;
        sp->end_free--;
        chunk_push_locked(sp, old);
    }
    sp->end_ptr = pg;
    sp->end_free = c->perslab;
}

/* Installs a fresh page as sp's end region and takes its first chunk. */
static item *part_add_page(struct slab_class *c, struct slab_part *sp,
                           char *pg, unsigned int clsid)
{
    pthread_mutex_lock(&sp->lock);
    part_install_locked(c, sp, pg, clsid);
    item *it = part_take_locked(c, sp);
    pthread_mutex_unlock(&sp->lock);
    return it;
}

static item *part_take(struct slab_class *c, struct slab_part *sp)
{
    pthread_mutex_lock(&sp->lock);
    item *it = part_take_locked(c, sp);
    pthread_mutex_unlock(&sp->lock);
    return it;
}

void *slabs_alloc(unsigned int clsid, int partition)
{
    return slabs_alloc_ex(clsid, partition, false);
}

static void *chunk_hand_out(struct slab_class *c, item *it, unsigned int clsid, int p);

void *slabs_alloc_ex(unsigned int clsid, int partition, bool reserved)
{
    if (clsid < 1 || clsid > nclasses)
        return NULL;
    struct slab_class *c = &classes[clsid];
    int p = partition >= 0 ? partition % npart : 0;

    item *it = part_take(c, &c->part[p]);
    if (it == NULL) {
        bool grace = false;
        struct slab_page *pg = new_page(c, reserved, &grace);
        if (pg != NULL)
            it = part_add_page(c, &c->part[p], pg->base, clsid);
        if (grace)
            __atomic_store_n(&c->grace_pending, false, __ATOMIC_RELEASE);
    }
    for (int i = 1; it == NULL && i < npart; i++)
        it = part_take(c, &c->part[(p + i) % npart]);
    /* Another thread won the class's first page over -m (charge_page) and
     * is adding it: its chunks are about to appear in that thread's
     * partition.  Failing meanwhile would make a move down give up, and
     * could make a full NVM drop an item for want of a meta tuple. */
    for (int spin = 0; it == NULL && spin < FIRST_PAGE_SPINS &&
         __atomic_load_n(&c->grace_pending, __ATOMIC_ACQUIRE); spin++) {
        sched_yield();
        for (int i = 0; it == NULL && i < npart; i++)
            it = part_take(c, &c->part[(p + i) % npart]);
    }
    if (it == NULL) {
        __atomic_fetch_add(&c->alloc_fails, 1, __ATOMIC_RELAXED);
        __atomic_store_n(&c->want_part, p, __ATOMIC_RELAXED);
        return NULL;
    }
    return chunk_hand_out(c, it, clsid, p);
}

void *slabs_alloc_spare(unsigned int clsid, int partition)
{
    if (clsid < 1 || clsid > nclasses)
        return NULL;
    struct slab_class *c = &classes[clsid];
    int p = partition >= 0 ? partition % npart : 0;
    item *it = NULL;
    for (int i = 0; it == NULL && i < npart; i++)
        it = part_take(c, &c->part[(p + i) % npart]);
    return it != NULL ? chunk_hand_out(c, it, clsid, p) : NULL;
}

/* A chunk taken from a free list or end region, made ready to hand out. */
static void *chunk_hand_out(struct slab_class *c, item *it, unsigned int clsid, int p)
{
    /* Zero the header but refcount, which is already 0 and which the
     * mover may be reading atomically (item_evict_chunk); a chunk smaller
     * than a full header (compact meta tuples) only up to its end. */
    size_t rc = offsetof(item, refcount);
    size_t hdr = c->size < sizeof(*it) ? c->size : sizeof(*it);
    memset(it, 0, rc);
    memset((char *)it + rc + sizeof(it->refcount), 0,
           hdr - rc - sizeof(it->refcount));
    it->slabs_clsid = (uint8_t)clsid;
    it->partition = (uint8_t)p;
    __atomic_fetch_add(&c->used_chunks, 1, __ATOMIC_RELAXED);
    if (c->movable) {
        struct slab_page *pg = page_lookup(it);
        if (pg != NULL)
            __atomic_fetch_add(&pg->used, 1, __ATOMIC_RELAXED);
    }
    return it;
}

void slabs_free(void *ptr, unsigned int clsid, int partition)
{
    item *it = ptr;
    assert(clsid >= 1 && clsid <= nclasses);
    assert((it->it_flags & ITEM_SLABBED) == 0);
    struct slab_class *c = &classes[clsid];
    int p = partition >= 0 ? partition % npart : 0;
    struct slab_part *sp = &c->part[p];

    if (c->movable) {
        struct slab_page *pg = page_lookup(it);
        if (pg != NULL)
            __atomic_fetch_sub(&pg->used, 1, __ATOMIC_RELAXED);
    }
    __atomic_fetch_sub(&c->used_chunks, 1, __ATOMIC_RELAXED);
    pthread_mutex_lock(&sp->lock);
    if (!drain_claim(it)) {
        it->slabs_clsid = (uint8_t)clsid;
        chunk_push_locked(sp, it);
    }
    pthread_mutex_unlock(&sp->lock);
}

/* ---- Stats. -------------------------------------------------------------- */

/* Snapshot of one class, for stats and tests. */
void slabs_class_info(unsigned int clsid, struct slabs_class_info *out)
{
    memset(out, 0, sizeof(*out));
    if (clsid < 1 || clsid > nclasses)
        return;
    struct slab_class *c = &classes[clsid];
    out->chunk_size = c->size;
    out->chunks_per_page = c->perslab;
    out->page_size = c->page_size;
    out->movable = c->movable;
    out->total_pages = __atomic_load_n(&c->total_pages, __ATOMIC_RELAXED);
    out->total_chunks = out->total_pages * c->perslab;
    out->used_chunks = __atomic_load_n(&c->used_chunks, __ATOMIC_RELAXED);
    out->alloc_fails = __atomic_load_n(&c->alloc_fails, __ATOMIC_RELAXED);
    for (int p = 0; p < npart; p++) {
        pthread_mutex_lock(&c->part[p].lock);
        out->free_chunks += c->part[p].nfree;
        out->free_chunks_end += c->part[p].end_free;
        pthread_mutex_unlock(&c->part[p].lock);
    }
    pthread_mutex_lock(&drain.lock);
    if (drain.page != NULL && drain.clsid == clsid)
        out->moving_chunks = drain.nfree;
    pthread_mutex_unlock(&drain.lock);
}

void slabs_stats(struct stat_sink *sink)
{
    unsigned int active = 0;
    char key[64];
    struct thread_stats ts;

    stats_aggregate(&ts, NULL);
    for (unsigned int i = 1; i <= nclasses && i < MAX_SLAB_CLASSES; i++) {
        struct slabs_class_info ci;
        slabs_class_info(i, &ci);
        if (ci.total_pages == 0)
            continue;
        active++;
#define SLAB_STAT(name, fmt, val) \
        do { \
            snprintf(key, sizeof(key), "%u:%s", i, name); \
            stat_printf(sink, key, fmt, val); \
        } while (0)
        SLAB_STAT("chunk_size", "%zu", ci.chunk_size);
        SLAB_STAT("chunks_per_page", "%u", ci.chunks_per_page);
        SLAB_STAT("total_pages", "%llu", (unsigned long long)ci.total_pages);
        SLAB_STAT("total_chunks", "%llu", (unsigned long long)ci.total_chunks);
        SLAB_STAT("used_chunks", "%llu", (unsigned long long)ci.used_chunks);
        SLAB_STAT("free_chunks", "%llu", (unsigned long long)ci.free_chunks);
        SLAB_STAT("free_chunks_end", "%llu",
                  (unsigned long long)ci.free_chunks_end);
#undef SLAB_STAT
        stats_slab_class(sink, i, &ts.slab[i]);
    }
    stat_printf(sink, "active_slabs", "%u", active);
    stat_printf(sink, "total_malloced", "%zu", (size_t)stat_total_malloced());
}

/* ---- Page mover. ------------------------------------------------------ */

static enum slabs_reassign_result move_check(unsigned int src,
                                             unsigned int dst)
{
    if (src < 1 || src > nclasses || dst > nclasses ||
        !classes[src].movable || (dst != 0 && !classes[dst].movable))
        return SLABS_REASSIGN_BADCLASS;
    if (src == dst)
        return SLABS_REASSIGN_SAME;
    if (__atomic_load_n(&classes[src].total_pages, __ATOMIC_RELAXED) < 2)
        return SLABS_REASSIGN_NOSPARE;
    return SLABS_REASSIGN_OK;
}

/* src's mapped active page with the fewest used chunks, the oldest on a
 * tie; the last aborted page only if there is no other.  run_lock. */
static struct slab_page *move_pick_page(struct slab_class *c)
{
    struct slab_page *best = NULL;
    uint32_t best_used = UINT32_MAX;
    bool best_aborted = true;
    pthread_mutex_lock(&c->pages_lock);
    for (size_t i = 0; c->npages >= 2 && i < c->npages; i++) {
        struct slab_page *pg = c->pages[i];
        if (!pg->mapped ||
            __atomic_load_n(&pg->state, __ATOMIC_RELAXED) != PAGE_ACTIVE)
            continue;
        uint32_t u = __atomic_load_n(&pg->used, __ATOMIC_RELAXED);
        bool aborted = pg == run.last_aborted;
        if (best == NULL || (best_aborted && !aborted) ||
            (aborted == best_aborted && u < best_used)) {
            best = pg;
            best_used = u;
            best_aborted = aborted;
        }
    }
    pthread_mutex_unlock(&c->pages_lock);
    return best;
}

/* Moves the draining page's free chunks out of sp's free list and end
 * region.  One walk of sp's free list under its lock. */
static void move_purge_part(struct slab_class *c, struct slab_part *sp,
                            char *base)
{
    pthread_mutex_lock(&sp->lock);
    pthread_mutex_lock(&drain.lock);
    item **pp = &sp->free_list;
    while (*pp != NULL) {
        item *it = *pp;
        if (page_base_of(it) == base) {
            *pp = it->h_next;
            sp->nfree--;
            drain_mark_locked((char *)it);
        } else {
            pp = &it->h_next;
        }
    }
    if (sp->end_free > 0 && page_base_of(sp->end_ptr) == base) {
        for (; sp->end_free > 0; sp->end_free--, sp->end_ptr += c->size)
            drain_mark_locked(sp->end_ptr);
    }
    pthread_mutex_unlock(&drain.lock);
    pthread_mutex_unlock(&sp->lock);
}

static bool move_start_locked(unsigned int src, unsigned int dst)
{
    if (run.active || move_check(src, dst) != SLABS_REASSIGN_OK)
        return false;
    struct slab_class *c = &classes[src];
    struct slab_page *pg = move_pick_page(c);
    if (pg == NULL)
        return false;
    uint64_t *fm = calloc((c->perslab + 63) / 64, sizeof(*fm));
    if (fm == NULL)
        return false;

    pthread_mutex_lock(&drain.lock);
    drain.page = pg;
    drain.freemap = fm;
    drain.nfree = 0;
    drain.clsid = src;
    drain.dst = dst;
    drain.size = c->size;
    __atomic_store_n(&pg->state, PAGE_DRAINING, __ATOMIC_RELAXED);
    __atomic_store_n(&drain_base, pg->base, __ATOMIC_RELAXED);
    pthread_mutex_unlock(&drain.lock);
    for (int p = 0; p < npart; p++)
        move_purge_part(c, &c->part[p], pg->base);

    run.active = true;
    run.src = src;
    run.dst = dst;
    run.page = pg;
    run.cursor = 0;
    run.passes = 0;
    __atomic_store_n(&mstats.running, 1, __ATOMIC_RELAXED);
    return true;
}

bool slabs_reassign_start(unsigned int src, unsigned int dst)
{
    pthread_mutex_lock(&run_lock);
    bool ok = move_start_locked(src, dst);
    pthread_mutex_unlock(&run_lock);
    return ok;
}

/* Ends the drain; returns its freemap (the caller frees it).  run_lock. */
static uint64_t *move_end_drain(enum page_state state)
{
    pthread_mutex_lock(&drain.lock);
    uint64_t *fm = drain.freemap;
    __atomic_store_n(&drain_base, NULL, __ATOMIC_RELAXED);
    __atomic_store_n(&drain.page->state, state, __ATOMIC_RELAXED);
    drain.page = NULL;
    drain.freemap = NULL;
    drain.nfree = 0;
    pthread_mutex_unlock(&drain.lock);
    return fm;
}

static void move_done(void)
{
    run.active = false;
    run.page = NULL;
    __atomic_store_n(&mstats.running, 0, __ATOMIC_RELAXED);
}

/* Every chunk is free: the page goes to dst or to the pool.  run_lock. */
static void move_finish_locked(void)
{
    struct slab_page *pg = run.page;
    struct slab_class *src = &classes[run.src];
    free(move_end_drain(run.dst != 0 ? PAGE_ACTIVE : PAGE_POOLED));
    class_remove_page(src, pg);
    memset(pg->base, 0, std_page);
    __atomic_store_n(&pg->used, 0, __ATOMIC_RELAXED);

    struct slab_class *dst = run.dst != 0 ? &classes[run.dst] : NULL;
    if (dst != NULL && class_add_page(dst, pg)) {
        int p = __atomic_load_n(&dst->want_part, __ATOMIC_RELAXED) % npart;
        pthread_mutex_lock(&dst->part[p].lock);
        part_install_locked(dst, &dst->part[p], pg->base, run.dst);
        pthread_mutex_unlock(&dst->part[p].lock);
    } else {
        /* Below a lowered limit the page's memory goes back to the
         * system; the page stays pooled, zero when touched again. */
        bool release = __atomic_load_n(&shrinking, __ATOMIC_RELAXED);
        if (release)
            (void)madvise(pg->base, std_page, MADV_DONTNEED);
        pool_put(pg, release);
        __atomic_fetch_sub(&mem_malloced, std_page, __ATOMIC_RELAXED);
        STATS_INCR(&mstats, moved_to_pool);
    }
    STATS_INCR(&mstats, moved);
    run.last_aborted = NULL;
    move_done();
}

/* Gives up: the page's free chunks go back on src's free lists (spread
 * over the partitions) and it is active again.  run_lock. */
static void move_abort_locked(void)
{
    struct slab_page *pg = run.page;
    struct slab_class *c = &classes[run.src];
    uint64_t *fm = move_end_drain(PAGE_ACTIVE);
    for (int p = 0; p < npart; p++) {
        struct slab_part *sp = &c->part[p];
        pthread_mutex_lock(&sp->lock);
        for (unsigned int i = (unsigned int)p; i < c->perslab;
             i += (unsigned int)npart) {
            if ((fm[i / 64] & ((uint64_t)1 << (i % 64))) == 0)
                continue;
            item *it = (item *)(pg->base + (size_t)i * c->size);
            it->slabs_clsid = (uint8_t)run.src;
            it->partition = (uint8_t)p;
            chunk_push_locked(sp, it);
        }
        pthread_mutex_unlock(&sp->lock);
    }
    free(fm);
    STATS_INCR(&mstats, aborted);
    run.last_aborted = pg;
    move_done();
}

/* Bits of freemap word w that stand for chunks of the page. */
static uint64_t word_mask(unsigned int first, unsigned int perslab)
{
    unsigned int n = perslab - first;
    return n >= 64 ? ~(uint64_t)0 : ((uint64_t)1 << n) - 1;
}

/*
 * One stretch of the current pass: at most `budget` units, one per chunk
 * visited or per 64 free chunks skipped at once.  Ends at the end of a
 * pass.  No lock held but run_lock.  Returns the units used.
 */
static int move_sweep(int budget)
{
    struct slab_class *c = &classes[run.src];
    char *base = run.page->base;
    int used = 0;
    while (used < budget && run.cursor < c->perslab) {
        unsigned int i = run.cursor;
        uint64_t w = __atomic_load_n(&drain.freemap[i / 64], __ATOMIC_RELAXED);
        used++;
        if (i % 64 == 0 && w == word_mask(i, c->perslab)) {
            run.cursor += 64;
            continue;
        }
        run.cursor++;
        if (w & ((uint64_t)1 << (i % 64)))
            continue;
        void *chunk = base + (size_t)i * c->size;
        switch (chunk_evictor != NULL ? chunk_evictor(chunk) : CHUNK_BUSY) {
        case CHUNK_EVICTED:
            STATS_INCR(&mstats, evictions);
            STATS_INCR(&mstats, evictions_nomem);
            break;
        case CHUNK_RESCUED:
            STATS_INCR(&mstats, evictions);
            STATS_INCR(&mstats, rescues);
            break;
        case CHUNK_RECLAIMED:
            STATS_INCR(&mstats, evictions);
            STATS_INCR(&mstats, inline_reclaim);
            break;
        case CHUNK_BUSY:
            STATS_INCR(&mstats, busy_items);
            break;
        case CHUNK_FREE:
            /* Being allocated or being freed: its slabs_free (or a later
             * eviction) will settle it. */
            break;
        }
    }
    if (run.cursor >= c->perslab) {
        run.cursor = 0;
        run.passes++;
    }
    return used;
}

static bool move_drained(void)
{
    pthread_mutex_lock(&drain.lock);
    bool done = drain.nfree == classes[drain.clsid].perslab;
    pthread_mutex_unlock(&drain.lock);
    return done;
}

int slabs_reassign_step(int budget)
{
    if (budget < 1)
        budget = 1;
    pthread_mutex_lock(&run_lock);
    if (!run.active) {
        uint32_t w = __atomic_exchange_n(&req_word, 0, __ATOMIC_RELAXED);
        if (w != 0 && move_start_locked((w >> 8) & 0xff, w & 0xff))
            STATS_INCR(&mstats, by_request);
    }
    int used = 0;
    if (run.active) {
        if (!move_drained())
            used = move_sweep(budget);
        if (move_drained())
            move_finish_locked();
        else if (run.passes >= SLABS_MOVE_MAX_PASSES)
            move_abort_locked();
        if (used == 0)
            used = 1;
    }
    pthread_mutex_unlock(&run_lock);
    return used;
}

/* `slabs reassign 0 dst`: source 0 is memcached's global page pool, the
 * memory no class holds, which here is the pooled pages and the -m budget
 * not yet spent.  dst gets one page of it at once (there is nothing to
 * drain).  As memcached's pool keeps its last page, NOSPARE while less
 * than two pages are left. */
static enum slabs_reassign_result pool_give(unsigned int dst)
{
    if (dst == 0)
        return SLABS_REASSIGN_SAME;
    if (dst > nclasses || !classes[dst].movable)
        return SLABS_REASSIGN_BADCLASS;
    if (__atomic_load_n(&mstats.running, __ATOMIC_RELAXED) != 0)
        return SLABS_REASSIGN_RUNNING;
    size_t limit = __atomic_load_n(&mem_limit, __ATOMIC_RELAXED);
    size_t resv = __atomic_load_n(&reserve_bytes, __ATOMIC_RELAXED);
    size_t used = __atomic_load_n(&mem_malloced, __ATOMIC_RELAXED);
    if (limit != 0 ? used + resv + 2 * std_page > limit
                   : __atomic_load_n(&pool_pages, __ATOMIC_RELAXED) < 2)
        return SLABS_REASSIGN_NOSPARE;
    struct slab_class *c = &classes[dst];
    bool grace = false;
    struct slab_page *pg = new_page(c, false, &grace);
    if (pg != NULL) {
        int p = __atomic_load_n(&c->want_part, __ATOMIC_RELAXED) % npart;
        pthread_mutex_lock(&c->part[p].lock);
        part_install_locked(c, &c->part[p], pg->base, dst);
        pthread_mutex_unlock(&c->part[p].lock);
    }
    if (grace)
        __atomic_store_n(&c->grace_pending, false, __ATOMIC_RELEASE);
    if (pg == NULL)
        return SLABS_REASSIGN_NOSPARE;
    STATS_INCR(&mstats, moved);
    STATS_INCR(&mstats, by_request);
    return SLABS_REASSIGN_OK;
}

enum slabs_reassign_result slabs_reassign_request(unsigned int src,
                                                  unsigned int dst)
{
    if (src == 0)
        return pool_give(dst);
    enum slabs_reassign_result r = move_check(src, dst);
    if (r != SLABS_REASSIGN_OK)
        return r;
    if (__atomic_load_n(&mstats.running, __ATOMIC_RELAXED) != 0)
        return SLABS_REASSIGN_RUNNING;
    uint32_t expect = 0;
    uint32_t w = (uint32_t)1 << 16 | src << 8 | dst;
    if (!__atomic_compare_exchange_n(&req_word, &expect, w, false,
                                     __ATOMIC_RELAXED, __ATOMIC_RELAXED))
        return SLABS_REASSIGN_RUNNING;
    return SLABS_REASSIGN_OK;
}

/* ---- Automove. ------------------------------------------------------------
 *
 * Each tick (a call, ~50 ms) first records per class whether slabs_alloc
 * failed since the last tick (am_hot / am_quiet count consecutive ticks
 * with / without failures).  Then, only when no move is running or queued,
 * -m is set and spent and the pool is empty, it starts at most one move:
 *   needy class: movable, failed in the last AUTOMOVE_HOT_TICKS ticks; the
 *     one with the most failures in the last tick.
 *   donor, free rule (memcached automove=1): another movable class with at
 *     least 2 pages and AUTOMOVE_FREE_HALF_PAGES / 2 pages' worth of free
 *     chunks; the one with the most.
 *   donor, demand rule (fallback): another movable class with at least 2
 *     pages that has not failed for AUTOMOVE_QUIET_TICKS ticks; the one
 *     with the most pages.
 * Cost per tick: one pass over the classes, plus one lock of each
 * partition of each candidate donor for the free rule.
 */

static void automove_observe_locked(void)
{
    for (unsigned int i = 1; i <= nclasses; i++) {
        struct slab_class *c = &classes[i];
        uint64_t f = __atomic_load_n(&c->alloc_fails, __ATOMIC_RELAXED);
        c->am_last = f - c->am_seen;
        c->am_seen = f;
        if (c->am_last != 0) {
            c->am_hot++;
            c->am_quiet = 0;
        } else {
            c->am_hot = 0;
            if (c->am_quiet < UINT32_MAX)
                c->am_quiet++;
        }
    }
}

static uint64_t class_free_chunks(struct slab_class *c)
{
    uint64_t n = 0;
    for (int p = 0; p < npart; p++) {
        pthread_mutex_lock(&c->part[p].lock);
        n += c->part[p].nfree + c->part[p].end_free;
        pthread_mutex_unlock(&c->part[p].lock);
    }
    return n;
}

static unsigned int automove_pick_donor(unsigned int dst)
{
    unsigned int by_free = 0, by_demand = 0;
    uint64_t most_free = 0, most_pages = 0;
    for (unsigned int i = 1; i <= nclasses; i++) {
        struct slab_class *c = &classes[i];
        uint64_t pages = __atomic_load_n(&c->total_pages, __ATOMIC_RELAXED);
        if (i == dst || !c->movable || pages < 2)
            continue;
        uint64_t fr = class_free_chunks(c);
        if (fr * 2 >= (uint64_t)c->perslab * AUTOMOVE_FREE_HALF_PAGES &&
            fr / c->perslab >= most_free) {
            by_free = i;
            most_free = fr / c->perslab;
        }
        /* With a lower tier, a data class short of pages is the normal
         * state (its items move down); taking pages from the meta tuples'
         * classes for it would only starve the moves down. */
        if (c->am_quiet >= AUTOMOVE_QUIET_TICKS && pages > most_pages &&
            !index_class(c)) {
            by_demand = i;
            most_pages = pages;
        }
    }
    return by_free != 0 ? by_free : by_demand;
}

/*
 * With a reserve set (a lower tier is configured), keeps it available: when
 * the unassigned -m budget falls below the reserve, moves the page with the
 * fewest used chunks of the class with the most free chunk bytes back to
 * the global pool: a data class with at least a quarter of a page of free
 * chunks, or a meta tuple class with AUTOMOVE_FREE_HALF_PAGES / 2 pages'
 * worth (items leaving NVM for SSD free NVM meta tuples that the SSD ones,
 * a smaller class, cannot use; the drained page's meta tuples move to
 * other chunks of their class, which has room for them).  Without such a
 * class, the biggest data class gives a page.  Meta tuples take the
 * reserve; the items left in the drained page go to item_evict_chunk,
 * which lets a lower tier keep them (item_tier_ops.demote).
 * run_lock held.
 */
static bool automove_refill_reserve_locked(void)
{
    size_t resv = __atomic_load_n(&reserve_bytes, __ATOMIC_RELAXED);
    size_t limit = __atomic_load_n(&mem_limit, __ATOMIC_RELAXED);
    if (limit == 0 || run.active)
        return false;
    size_t used = __atomic_load_n(&mem_malloced, __ATOMIC_RELAXED);
    if (shrinking && used <= limit)
        __atomic_store_n(&shrinking, false, __ATOMIC_RELAXED);
    /* A lowered limit (cache_memlimit) drains pages the same way, down to
     * the new limit. */
    if (!shrinking && (resv == 0 || used + resv <= limit))
        return false;
    unsigned int donor = 0, biggest = 0;
    uint64_t most = 0, most_pages = 0;
    for (unsigned int i = 1; i <= nclasses; i++) {
        struct slab_class *c = &classes[i];
        uint64_t pages = __atomic_load_n(&c->total_pages, __ATOMIC_RELAXED);
        if (!c->movable || pages < 2)
            continue;
        uint64_t fr = class_free_chunks(c);
        bool index = index_class(c);
        bool spare = index
            ? fr * 2 >= (uint64_t)c->perslab * AUTOMOVE_FREE_HALF_PAGES
            : fr * 4 >= c->perslab;
        if (spare && fr * c->size > most) {
            donor = i;
            most = fr * c->size;
        }
        if (!index && pages > most_pages) {
            biggest = i;
            most_pages = pages;
        }
    }
    /* Without a class that has free chunks to spare (new items take each
     * chunk the evictors free), drain a page of the biggest data class:
     * its items move down on the reserve that is left. */
    if (donor == 0)
        donor = biggest;
    return donor != 0 && move_start_locked(donor, 0);
}

bool slabs_adjust_mem_limit(size_t bytes)
{
    if (prealloc_base != NULL || bytes == 0)
        return false;
    pthread_mutex_lock(&run_lock);
    __atomic_store_n(&mem_limit, bytes, __ATOMIC_RELAXED);
    /* limit_maxbytes in `stats` shows it, as memcached's does. */
    __atomic_store_n(&settings.maxbytes, bytes, __ATOMIC_RELAXED);
    __atomic_store_n(&shrinking, __atomic_load_n(&mem_malloced, __ATOMIC_RELAXED) > bytes,
                     __ATOMIC_RELAXED);
    pthread_mutex_unlock(&run_lock);
    return true;
}

/*
 * With a reserve set (a lower tier is configured), a class whose
 * allocation failed in each of the last AUTOMOVE_HOT_TICKS ticks while the
 * budget left to unreserved allocations is spent gets a page from the
 * class with the most free chunk bytes among those with
 * AUTOMOVE_FREE_HALF_PAGES / 2 pages' worth of free chunks that did not
 * fail in the last tick (the free rule of automove, without its wait for
 * -m to be spent to the last page: the reserve keeps unreserved
 * allocations two pages short of it).  This runs whatever -o slab_automove says: with a
 * lower tier a class that gets no page has no path down for what it
 * holds (doc/design.md, "Every class gets room").  run_lock held.
 */
static bool automove_serve_demand_locked(void)
{
    size_t resv = __atomic_load_n(&reserve_bytes, __ATOMIC_RELAXED);
    size_t limit = __atomic_load_n(&mem_limit, __ATOMIC_RELAXED);
    if (resv == 0 || limit == 0 || run.active ||
        __atomic_load_n(&req_word, __ATOMIC_RELAXED) != 0 ||
        __atomic_load_n(&mem_malloced, __ATOMIC_RELAXED) + std_page + resv <= limit)
        return false;
    unsigned int dst = 0;
    uint64_t most = 0;
    for (unsigned int i = 1; i <= nclasses; i++) {
        struct slab_class *c = &classes[i];
        if (c->movable && c->am_hot >= AUTOMOVE_HOT_TICKS && c->am_last > most) {
            dst = i;
            most = c->am_last;
        }
    }
    if (dst == 0)
        return false;
    unsigned int donor = 0;
    uint64_t most_bytes = 0;
    for (unsigned int i = 1; i <= nclasses; i++) {
        struct slab_class *c = &classes[i];
        if (i == dst || !c->movable || c->am_last != 0 ||
            __atomic_load_n(&c->total_pages, __ATOMIC_RELAXED) < 2)
            continue;
        uint64_t fr = class_free_chunks(c);
        if (fr * 2 >= (uint64_t)c->perslab * AUTOMOVE_FREE_HALF_PAGES &&
            fr * c->size > most_bytes) {
            donor = i;
            most_bytes = fr * c->size;
        }
    }
    return donor != 0 && move_start_locked(donor, dst);
}

bool slabs_has_spare(void)
{
    for (unsigned int i = 1; i <= nclasses; i++) {
        struct slab_class *c = &classes[i];
        if (c->movable && __atomic_load_n(&c->total_pages, __ATOMIC_RELAXED) >= 2 &&
            class_free_chunks(c) * 2 >= (uint64_t)c->perslab * AUTOMOVE_FREE_HALF_PAGES)
            return true;
    }
    return false;
}

bool slabs_watchdog_move(void)
{
    pthread_mutex_lock(&run_lock);
    bool started = false;
    size_t limit = __atomic_load_n(&mem_limit, __ATOMIC_RELAXED);
    if (!run.active && limit != 0) {
        /* The class that failed most recently, by its count of failures
         * since the last automove tick. */
        unsigned int dst = 0, donor = 0;
        uint64_t most = 0, most_bytes = 0, most_pages = 0;
        for (unsigned int i = 1; i <= nclasses; i++) {
            struct slab_class *c = &classes[i];
            uint64_t f = __atomic_load_n(&c->alloc_fails, __ATOMIC_RELAXED) - c->am_seen;
            if (c->movable && f > most) {
                dst = i;
                most = f;
            }
        }
        /* The cheapest page to free: the class with the most free chunk
         * bytes, else the data class with the most pages (its items move
         * down a tier). */
        unsigned int biggest = 0;
        for (unsigned int i = 1; dst != 0 && i <= nclasses; i++) {
            struct slab_class *c = &classes[i];
            uint64_t pages = __atomic_load_n(&c->total_pages, __ATOMIC_RELAXED);
            if (i == dst || !c->movable || pages < 2)
                continue;
            uint64_t fr = class_free_chunks(c);
            if (fr >= c->perslab / 4 && fr * c->size > most_bytes) {
                donor = i;
                most_bytes = fr * c->size;
            }
            if (!index_class(c) && pages > most_pages) {
                biggest = i;
                most_pages = pages;
            }
        }
        if (donor == 0)
            donor = biggest;
        started = donor != 0 && move_start_locked(donor, dst);
        if (started)
            STATS_INCR(&mstats, by_watchdog);
    }
    pthread_mutex_unlock(&run_lock);
    return started;
}

void slabs_reserve_step(void)
{
    pthread_mutex_lock(&run_lock);
    automove_observe_locked();
    if (automove_refill_reserve_locked()) {
        STATS_INCR(&mstats, automoves);
        STATS_INCR(&mstats, by_reserve);
    } else if (automove_serve_demand_locked()) {
        STATS_INCR(&mstats, automoves);
        STATS_INCR(&mstats, by_demand);
    }
    pthread_mutex_unlock(&run_lock);
}

/*
 * memcached's free rule, without a lower tier (the reserve rules above
 * return pages then): a movable class that has held at least
 * AUTOMOVE_FREE_HALF_PAGES / 2 pages' worth of free chunks for
 * AUTOMOVE_FREE_TICKS ticks in a row gives its emptiest page back to the
 * global pool, where any class's next page comes from.  The page's live
 * items are rescued into free chunks of their class (item_evict_chunk),
 * which that much free room holds.  One such move per tick at most, and
 * none while another move runs or waits.  run_lock held.
 */
static bool automove_free_to_pool_locked(void)
{
    if (__atomic_load_n(&reserve_bytes, __ATOMIC_RELAXED) != 0 || run.active ||
        __atomic_load_n(&req_word, __ATOMIC_RELAXED) != 0)
        return false;
    unsigned int donor = 0;
    uint64_t most = 0;
    for (unsigned int i = 1; i <= nclasses; i++) {
        struct slab_class *c = &classes[i];
        uint64_t pages = __atomic_load_n(&c->total_pages, __ATOMIC_RELAXED);
        bool spare = c->movable && pages >= 2 &&
            class_free_chunks(c) * 2 >= (uint64_t)c->perslab * AUTOMOVE_FREE_HALF_PAGES;
        c->am_free_ticks = spare ? c->am_free_ticks + 1 : 0;
        if (spare && c->am_free_ticks >= AUTOMOVE_FREE_TICKS && pages > most) {
            donor = i;
            most = pages;
        }
    }
    return donor != 0 && move_start_locked(donor, 0);
}

void slabs_automove_step(void)
{
    pthread_mutex_lock(&run_lock);
    automove_observe_locked();
    if (automove_refill_reserve_locked()) {
        STATS_INCR(&mstats, automoves);
        STATS_INCR(&mstats, by_reserve);
        pthread_mutex_unlock(&run_lock);
        return;
    }
    if (automove_serve_demand_locked()) {
        STATS_INCR(&mstats, automoves);
        STATS_INCR(&mstats, by_demand);
        pthread_mutex_unlock(&run_lock);
        return;
    }
    size_t limit = __atomic_load_n(&mem_limit, __ATOMIC_RELAXED);
    bool spent = limit != 0 &&
        __atomic_load_n(&mem_malloced, __ATOMIC_RELAXED) + std_page > limit;
    if (!run.active && __atomic_load_n(&req_word, __ATOMIC_RELAXED) == 0 &&
        spent && __atomic_load_n(&pool_pages, __ATOMIC_RELAXED) == 0) {
        unsigned int dst = 0;
        uint64_t most = 0;
        for (unsigned int i = 1; i <= nclasses; i++) {
            struct slab_class *c = &classes[i];
            if (c->movable && c->am_hot >= AUTOMOVE_HOT_TICKS &&
                c->am_last > most) {
                dst = i;
                most = c->am_last;
            }
        }
        unsigned int src = dst != 0 ? automove_pick_donor(dst) : 0;
        if (src != 0 && move_start_locked(src, dst)) {
            STATS_INCR(&mstats, automoves);
            STATS_INCR(&mstats, by_automove);
        }
    }
    if (automove_free_to_pool_locked()) {
        STATS_INCR(&mstats, automoves);
        STATS_INCR(&mstats, by_automove);
    }
    pthread_mutex_unlock(&run_lock);
}

/* ---- Mover stats. --------------------------------------------------------- */

void slabs_mover_info(struct slabs_mover_info *out)
{
    memset(out, 0, sizeof(*out));
    pthread_mutex_lock(&drain.lock);
    if (drain.page != NULL) {
        out->running = true;
        out->src = drain.clsid;
        out->dst = drain.dst;
        out->page = drain.page->base;
    }
    pthread_mutex_unlock(&drain.lock);
    out->moved = STATS_GET(&mstats, moved);
    out->moved_to_pool = STATS_GET(&mstats, moved_to_pool);
    out->aborted = STATS_GET(&mstats, aborted);
    out->evictions = STATS_GET(&mstats, evictions);
    out->busy_items = STATS_GET(&mstats, busy_items);
    out->automoves = STATS_GET(&mstats, automoves);
    out->by_request = STATS_GET(&mstats, by_request);
    out->by_automove = STATS_GET(&mstats, by_automove);
    out->by_reserve = STATS_GET(&mstats, by_reserve);
    out->by_demand = STATS_GET(&mstats, by_demand);
    out->by_watchdog = STATS_GET(&mstats, by_watchdog);
    out->pool_pages = __atomic_load_n(&pool_pages, __ATOMIC_RELAXED);
}

/* memcached's meaning: bytes of slab pages allocated, those handed out
 * under -m and those waiting in the global pool (unless a lowered limit
 * gave their memory back to the system). */
static uint64_t stat_total_malloced(void)
{
    return slabs_mem_malloced() +
           __atomic_load_n(&pool_resident, __ATOMIC_RELAXED) * std_page;
}

/* memcached's slab_chunk_max: the largest chunk of any class.  Items are
 * never split, so an item above it takes a class of its own size. */
static void slabs_settings(struct stat_sink *s)
{
    stat_printf(s, "slab_chunk_max", "%zu", (size_t)classes[nclasses].size);
}

/* `stats slabs`, and the allocator's and mover's lines of plain `stats`
 * (stats.c's table names them and says what they mean). */
static void slabs_stats_register(void)
{
    stats_register_section("slabs", slabs_stats);
    stats_register_section("settings", slabs_settings);
    stats_provide("total_malloced", stat_total_malloced);
    stats_provide_counter("slab_reassign_running", &mstats.running);
#define MOVER_PROVIDE(name, wire) stats_provide_counter(wire, &mstats.name);
    MOVER_STATS_FIELDS(MOVER_PROVIDE)
#undef MOVER_PROVIDE
    stats_provide_counter("slab_global_page_pool", &pool_pages);
}

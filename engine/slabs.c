/*
 * slabs.c - the DRAM slab allocator; its page mover is slabs_mover.c.
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

#include "base/bg.h"
#include "engine/item_layout.h"
#include "base/settings.h"
#include "engine/slabs.h"
#include "engine/slabs_int.h"
#include "base/stats.h"

/* items.c's item_evict_chunk (slabs_set_chunk_evictor). */
enum chunk_evict_result (*slab_chunk_evictor)(void *chunk);

void slabs_set_chunk_evictor(enum chunk_evict_result (*fn)(void *chunk))
{
    slab_chunk_evictor = fn;
}

/* The state slabs_int.h declares. */
struct slab_class slab_classes[MAX_SLAB_CLASSES];
unsigned int slab_nclasses;
int slab_npart;
size_t slab_mem_limit;
size_t slab_mem_malloced;
static uint64_t slab_pages_taken;      /* atomic: pages a class took (slabs_activity) */
size_t slab_std_page;
char *slab_prealloc_base;
uint64_t slab_pool_pages;
struct slab_drain slab_drain = { .lock = PTHREAD_MUTEX_INITIALIZER };
char *slab_drain_base;
bool slab_borrowed;
pthread_mutex_t slab_run_lock = PTHREAD_MUTEX_INITIALIZER;
bool slab_shrinking;
struct slab_run slab_run;
uint32_t slab_req_word;
struct slab_mover_stats slab_mstats;

static size_t prealloc_len;         /* set at init */
static size_t prealloc_used;        /* atomic: bytes carved from it */
static bool initialized;

/* page_map: the top level is set at init, leaves are published with
 * release stores under map_lock and read with acquire loads. */
static struct slab_page ***page_map;
static size_t map_top_n;            /* set at init */
static unsigned int page_shift;     /* set at init; 0 = mover disabled */
static pthread_mutex_t map_lock = PTHREAD_MUTEX_INITIALIZER;

/* Global pool of spare pages (all of slab_std_page bytes, zeroed). */
static pthread_mutex_t pool_lock = PTHREAD_MUTEX_INITIALIZER;
static struct slab_page *pool_head;  /* pool_lock */
static uint64_t pool_resident;       /* atomic: pooled pages still in memory */

static size_t align_up(size_t n)
{
    return (n + CHUNK_ALIGN - 1) & ~(size_t)(CHUNK_ALIGN - 1);
}

static size_t round_to_page(size_t n)
{
    return (n + slab_std_page - 1) / slab_std_page * slab_std_page;
}

/* ---- Page map. ------------------------------------------------------- */

char *slab_page_base_of(const void *p)
{
    return (char *)((uintptr_t)p & ~(uintptr_t)(slab_std_page - 1));
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
    return slab_prealloc_base != NULL && p >= slab_prealloc_base &&
           p < slab_prealloc_base + prealloc_len;
}

static void page_destroy(struct slab_page *pg)
{
    if (!in_prealloc(pg->base))
        free(pg->base);
    free(pg);
}

static void slabs_teardown(void)
{
    for (unsigned int i = 1; i <= slab_nclasses; i++) {
        struct slab_class *c = &slab_classes[i];
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
    free(slab_drain.freemap);
    free(slab_prealloc_base);
    slab_prealloc_base = NULL;
}

static void init_class(unsigned int id, size_t size)
{
    struct slab_class *c = &slab_classes[id];
    memset(c, 0, sizeof(*c));
    c->size = size;
    c->page_size = slab_std_page;
    if (c->size > c->page_size)
        c->page_size = c->size;
    c->perslab = (unsigned int)(c->page_size / c->size);
    c->movable = page_shift != 0 && c->page_size == slab_std_page;
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

    slab_nclasses = 0;
    while (slab_nclasses < MAX_SLAB_CLASSES - 2 && size < max &&
           (double)size <= (double)max / factor) {
        init_class(++slab_nclasses, size);
        size_t next = align_up((size_t)((double)size * factor));
        if (size < fine_max)
            next = size + CHUNK_ALIGN;
        size = next > size ? next : size + CHUNK_ALIGN;
    }
    init_class(++slab_nclasses, max);
}

static void prealloc_init(void)
{
    prealloc_len = round_to_page(slab_mem_limit);
    void *p = NULL;
    if (page_shift != 0) {
        if (posix_memalign(&p, slab_std_page, prealloc_len) != 0)
            p = NULL;
    } else {
        p = malloc(prealloc_len);
    }
    slab_prealloc_base = p;
    if (slab_prealloc_base == NULL && settings.verbose > 0)
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

    slab_npart = settings.partitions > 0 ? settings.partitions
                                    : settings.num_threads;
    if (slab_npart < 1)
        slab_npart = 1;
    if (slab_npart > MAX_PARTITIONS)
        slab_npart = MAX_PARTITIONS;
    slab_mem_limit = settings.maxbytes;
    slab_mem_malloced = 0;
    /* memcached's test hook, read as memcached reads it in every build:
     * that many bytes count as handed out already (its t/64bit.t fakes a
     * 4 GB preallocation with it). */
    const char *fake = getenv("T_MEMD_INITIAL_MALLOC");
    if (fake != NULL)
        slab_mem_malloced = (size_t)strtoull(fake, NULL, 10);
    slab_shrinking = false;
    prealloc_used = 0;
    slab_std_page = (size_t)settings.slab_page_size;
    pool_head = NULL;
    slab_pool_pages = 0;
    pool_resident = 0;
    slab_drain.page = NULL;
    slab_drain.freemap = NULL;
    slab_drain.nfree = 0;
    slab_drain_base = NULL;
    slab_borrowed = false;
    memset(&slab_run, 0, sizeof(slab_run));
    memset(&slab_mstats, 0, sizeof(slab_mstats));
    slab_req_word = 0;
    map_init();
    build_classes();

    if (settings.prealloc && slab_mem_limit > 0)
        prealloc_init();
    slabs_stats_register();
    if (settings.verbose > 1) {
        for (unsigned int i = 1; i <= slab_nclasses; i++)
            fprintf(stderr, "slab class %3u: chunk size %9zu perslab %7u\n",
                    i, slab_classes[i].size, slab_classes[i].perslab);
    }
}

int slabs_npartitions(void)
{
    return slab_npart;
}

unsigned int slabs_clsid(size_t size)
{
    if (size == 0)
        return 0;
    /* Binary search over the ascending chunk sizes. */
    unsigned int lo = 1, hi = slab_nclasses;
    if (hi == 0 || size > slab_classes[hi].size)
        return 0;
    while (lo < hi) {
        unsigned int mid = (lo + hi) / 2;
        if (slab_classes[mid].size >= size)
            hi = mid;
        else
            lo = mid + 1;
    }
    return lo;
}

size_t slabs_chunk_size(unsigned int clsid)
{
    return (clsid >= 1 && clsid <= slab_nclasses) ? slab_classes[clsid].size : 0;
}

unsigned int slabs_nclasses(void)
{
    return slab_nclasses;
}

size_t slabs_mem_malloced(void)
{
    return __atomic_load_n(&slab_mem_malloced, __ATOMIC_RELAXED);
}

size_t slabs_mem_limit(void)
{
    return __atomic_load_n(&slab_mem_limit, __ATOMIC_RELAXED);
}

/* ---- Pages. ------------------------------------------------------------ */

/* Bytes of -m only reserved allocations may take (slabs_set_reserve). */
size_t slab_reserve_bytes;        /* atomic */
/* Classes with chunks this small never donate pages to refill it. */
size_t slab_reserve_donor_min;    /* set before threads start */

void slabs_set_reserve(size_t bytes, size_t min_donor_chunk)
{
    slab_reserve_donor_min = min_donor_chunk;
    __atomic_store_n(&slab_reserve_bytes, bytes, __ATOMIC_RELAXED);
}

/* A class too small to donate to the reserve: it holds meta tuples.  None
 * without a reserve. */
bool slab_index_class(const struct slab_class *c)
{
    return slab_reserve_donor_min != 0 && c->size <= slab_reserve_donor_min;
}

/* Bytes of the index classes' chunks in use.  Their pages would say less:
 * with a small -m, each class's first page is mostly free. */
size_t slabs_index_bytes(void)
{
    size_t n = 0;
    for (unsigned int i = 1; i <= slab_nclasses; i++) {
        struct slab_class *c = &slab_classes[i];
        if (slab_index_class(c))
            n += (size_t)__atomic_load_n(&c->used_chunks, __ATOMIC_RELAXED) * c->size;
    }
    return n;
}

/* Charges one page to -m; false if the budget is spent (see top). */
static bool charge_page(struct slab_class *c, bool reserved, bool *grace)
{
    size_t cur = __atomic_load_n(&slab_mem_malloced, __ATOMIC_RELAXED);
    size_t limit = __atomic_load_n(&slab_mem_limit, __ATOMIC_RELAXED);
    size_t resv = __atomic_load_n(&slab_reserve_bytes, __ATOMIC_RELAXED);
    if (limit != 0 && !reserved)
        limit = limit > resv ? limit - resv : 0;
    /* Draining pages down to a lowered limit moves their items down a tier,
     * which takes meta tuples (reserved): those may go past the limit
     * meanwhile, or the drain could never finish. */
    if (reserved && __atomic_load_n(&slab_shrinking, __ATOMIC_RELAXED))
        limit = 0;
    for (;;) {
        if (limit != 0 && cur + c->page_size > limit) {
            /* A page being drained frees its chunks only once its items
             * are down a tier, and each takes a meta tuple (reserved).
             * With -m spent, those may borrow one page past it, which the
             * drained page pays back (move_finish_locked): a drain that
             * needs room to make room never waits on itself. */
            bool lent = false;
            if (reserved && __atomic_load_n(&slab_drain_base, __ATOMIC_RELAXED) != NULL &&
                __atomic_compare_exchange_n(&slab_borrowed, &lent, true, false,
                                            __ATOMIC_RELAXED, __ATOMIC_RELAXED)) {
                __atomic_fetch_add(&slab_mem_malloced, c->page_size, __ATOMIC_RELAXED);
                return true;
            }
            /* Over budget: only a class without pages gets one, once. */
            bool no = false;
            if (__atomic_load_n(&c->total_pages, __ATOMIC_RELAXED) != 0 ||
                !__atomic_compare_exchange_n(&c->grace_used, &no, true,
                                             false, __ATOMIC_RELAXED,
                                             __ATOMIC_RELAXED))
                return false;
            __atomic_store_n(&c->grace_pending, true, __ATOMIC_RELAXED);
            *grace = true;
            __atomic_fetch_add(&slab_mem_malloced, c->page_size, __ATOMIC_RELAXED);
            return true;
        }
        if (__atomic_compare_exchange_n(&slab_mem_malloced, &cur,
                                        cur + c->page_size, false,
                                        __ATOMIC_RELAXED, __ATOMIC_RELAXED))
            return true;
    }
}

static char *page_memory(size_t len, bool aligned)
{
    if (slab_prealloc_base != NULL) {
        size_t take = round_to_page(len);   /* keeps carvings aligned */
        size_t off = __atomic_fetch_add(&prealloc_used, take,
                                        __ATOMIC_RELAXED);
        if (off + take <= prealloc_len)
            return slab_prealloc_base + off;
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
void slab_pool_put(struct slab_page *pg, bool released)
{
    __atomic_store_n(&pg->used, 0, __ATOMIC_RELAXED);
    __atomic_store_n(&pg->state, PAGE_POOLED, __ATOMIC_RELAXED);
    pthread_mutex_lock(&pool_lock);
    pg->pool_next = pool_head;
    pg->released = released;
    pool_head = pg;
    __atomic_fetch_add(&slab_pool_pages, 1, __ATOMIC_RELAXED);
    if (!released)
        __atomic_fetch_add(&pool_resident, 1, __ATOMIC_RELAXED);
    pthread_mutex_unlock(&pool_lock);
}

static struct slab_page *pool_take(void)
{
    if (__atomic_load_n(&slab_pool_pages, __ATOMIC_RELAXED) == 0)
        return NULL;
    pthread_mutex_lock(&pool_lock);
    struct slab_page *pg = pool_head;
    if (pg != NULL) {
        pool_head = pg->pool_next;
        pg->pool_next = NULL;
        __atomic_fetch_sub(&slab_pool_pages, 1, __ATOMIC_RELAXED);
        if (!pg->released)
            __atomic_fetch_sub(&pool_resident, 1, __ATOMIC_RELAXED);
    }
    pthread_mutex_unlock(&pool_lock);
    if (pg != NULL)
        __atomic_store_n(&pg->state, PAGE_ACTIVE, __ATOMIC_RELAXED);
    return pg;
}

/* Adds pg to c's page list; false if the list cannot grow. */
bool slab_class_add_page(struct slab_class *c, struct slab_page *pg)
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

void slab_class_remove_page(struct slab_class *c, struct slab_page *pg)
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
struct slab_page *slab_new_page(struct slab_class *c, bool reserved,
                                  bool *grace)
{
    if (!charge_page(c, reserved, grace))
        return NULL;
    struct slab_page *pg = c->movable ? pool_take() : NULL;
    if (pg == NULL)
        pg = page_create(c);
    if (pg != NULL && !slab_class_add_page(c, pg)) {
        if (pg->mapped)
            slab_pool_put(pg, false); /* the map keeps pointing at it */
        else
            page_destroy(pg);
        pg = NULL;
    }
    if (pg == NULL)
        __atomic_fetch_sub(&slab_mem_malloced, c->page_size, __ATOMIC_RELAXED);
    return pg;
}

/* ---- Draining (see the top comment). ---------------------------------- */

/* Records a free chunk of the draining page.  Caller holds drain.lock. */
void slab_drain_mark_locked(const char *chunk)
{
    size_t idx = (size_t)(chunk - slab_drain.page->base) / slab_drain.size;
    assert((size_t)(chunk - slab_drain.page->base) % slab_drain.size == 0);
    uint64_t bit = (uint64_t)1 << (idx % 64);
    assert((slab_drain.freemap[idx / 64] & bit) == 0);
    __atomic_fetch_or(&slab_drain.freemap[idx / 64], bit, __ATOMIC_RELAXED);
    slab_drain.nfree++;
}

/*
 * Takes a free chunk for the mover if it lies in the draining page.
 * Called with the chunk's partition lock held: the mover purges each
 * partition after setting drain_base, so a chunk pushed without seeing it
 * is purged, and one that sees it is marked here.
 */
static bool drain_claim(const item *it)
{
    char *db = __atomic_load_n(&slab_drain_base, __ATOMIC_RELAXED);
    if (db == NULL || page_shift == 0 || slab_page_base_of(it) != db)
        return false;
    bool claimed = false;
    pthread_mutex_lock(&slab_drain.lock);
    if (slab_drain.page != NULL && slab_drain.page->base == db) {
        slab_drain_mark_locked((const char *)it);
        claimed = true;
    }
    pthread_mutex_unlock(&slab_drain.lock);
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

void slab_chunk_push_locked(struct slab_part *sp, item *it)
{
    it->it_flags = ITEM_SLABBED;
    it->h_next = sp->free_list;
    sp->free_list = it;
    sp->nfree++;
}

/* Makes pg the end region of sp, carving what is left of the old one onto
 * the free list first.  Caller holds sp->lock. */
void slab_part_install_locked(struct slab_class *c, struct slab_part *sp,
                                char *pg, unsigned int clsid)
{
    while (sp->end_free > 0) {
        item *old = (item *)sp->end_ptr;
        old->slabs_clsid = (uint8_t)clsid;
        sp->end_ptr += c->size;
        sp->end_free--;
        slab_chunk_push_locked(sp, old);
    }
    sp->end_ptr = pg;
    sp->end_free = c->perslab;
}

/* Installs a fresh page as sp's end region and takes its first chunk. */
static item *part_add_page(struct slab_class *c, struct slab_part *sp,
                           char *pg, unsigned int clsid)
{
    pthread_mutex_lock(&sp->lock);
    slab_part_install_locked(c, sp, pg, clsid);
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

/* While a page drains, a meta tuple class keeps as many free chunks as
 * the page has items left for the moves down that take them (reserved);
 * an unreserved allocation that would eat into them fails.  Else new keys
 * (a client's store to a lower tier, a restore) could take every chunk
 * the drain frees, and the drain would never finish. */
static bool drain_keeps(struct slab_class *c)
{
    char *db = __atomic_load_n(&slab_drain_base, __ATOMIC_RELAXED);
    if (db == NULL || !slab_index_class(c))
        return false;
    struct slab_page *pg = page_lookup(db);
    if (pg == NULL)
        return false;
    uint64_t live = __atomic_load_n(&pg->used, __ATOMIC_RELAXED);
    uint64_t total = __atomic_load_n(&c->total_pages, __ATOMIC_RELAXED) * c->perslab;
    uint64_t used = __atomic_load_n(&c->used_chunks, __ATOMIC_RELAXED);
    return used + live >= total;
}

void *slabs_alloc_ex(unsigned int clsid, int partition, bool reserved)
{
    if (clsid < 1 || clsid > slab_nclasses)
        return NULL;
    struct slab_class *c = &slab_classes[clsid];
    int p = partition >= 0 ? partition % slab_npart : 0;

    if (!reserved && drain_keeps(c)) {
        __atomic_fetch_add(&c->alloc_fails, 1, __ATOMIC_SEQ_CST);
        slabs_kick();
        return NULL;
    }
    item *it = part_take(c, &c->part[p]);
    if (it == NULL) {
        bool grace = false;
        struct slab_page *pg = slab_new_page(c, reserved, &grace);
        if (pg != NULL) {
            it = part_add_page(c, &c->part[p], pg->base, clsid);
            __atomic_fetch_add(&slab_pages_taken, 1, __ATOMIC_SEQ_CST);
            slabs_kick();
        }
        if (grace)
            __atomic_store_n(&c->grace_pending, false, __ATOMIC_RELEASE);
    }
    for (int i = 1; it == NULL && i < slab_npart; i++)
        it = part_take(c, &c->part[(p + i) % slab_npart]);
    /* Another thread won the class's first page over -m (charge_page) and
     * is adding it: its chunks are about to appear in that thread's
     * partition.  Failing meanwhile would make a move down give up, and
     * could make a full NVM drop an item for want of a meta tuple. */
    for (int spin = 0; it == NULL && spin < FIRST_PAGE_SPINS &&
         __atomic_load_n(&c->grace_pending, __ATOMIC_ACQUIRE); spin++) {
        sched_yield();
        for (int i = 0; it == NULL && i < slab_npart; i++)
            it = part_take(c, &c->part[(p + i) % slab_npart]);
    }
    if (it == NULL) {
        __atomic_fetch_add(&c->alloc_fails, 1, __ATOMIC_SEQ_CST);
        __atomic_store_n(&c->want_part, p, __ATOMIC_RELAXED);
        slabs_kick();
        return NULL;
    }
    return chunk_hand_out(c, it, clsid, p);
}

/* ---- Kicks: the threads that act on allocation trouble. ----------------- */

#define SLABS_KICK_MAX 16
static struct bg *kick_list[SLABS_KICK_MAX];   /* atomic slots */
static pthread_mutex_t kick_lock = PTHREAD_MUTEX_INITIALIZER;

void slabs_kick_add(struct bg *g)
{
    pthread_mutex_lock(&kick_lock);
    for (int i = 0; i < SLABS_KICK_MAX; i++) {
        if (__atomic_load_n(&kick_list[i], __ATOMIC_RELAXED) == NULL) {
            __atomic_store_n(&kick_list[i], g, __ATOMIC_RELEASE);
            break;
        }
    }
    pthread_mutex_unlock(&kick_lock);
}

void slabs_kick_remove(struct bg *g)
{
    pthread_mutex_lock(&kick_lock);
    for (int i = 0; i < SLABS_KICK_MAX; i++)
        if (__atomic_load_n(&kick_list[i], __ATOMIC_RELAXED) == g)
            __atomic_store_n(&kick_list[i], NULL, __ATOMIC_RELEASE);
    pthread_mutex_unlock(&kick_lock);
}

void slabs_kick(void)
{
    for (int i = 0; i < SLABS_KICK_MAX; i++) {
        struct bg *g = __atomic_load_n(&kick_list[i], __ATOMIC_ACQUIRE);
        if (g != NULL)
            bg_kick(g);
    }
}

uint64_t slabs_activity(void)
{
    uint64_t n = __atomic_load_n(&slab_pages_taken, __ATOMIC_SEQ_CST) +
                 (__atomic_load_n(&slab_req_word, __ATOMIC_SEQ_CST) != 0);
    for (unsigned int i = 1; i <= slab_nclasses; i++)
        n += __atomic_load_n(&slab_classes[i].alloc_fails, __ATOMIC_SEQ_CST);
    return n;
}

void *slabs_alloc_spare(unsigned int clsid, int partition)
{
    if (clsid < 1 || clsid > slab_nclasses)
        return NULL;
    struct slab_class *c = &slab_classes[clsid];
    int p = partition >= 0 ? partition % slab_npart : 0;
    item *it = NULL;
    for (int i = 0; it == NULL && i < slab_npart; i++)
        it = part_take(c, &c->part[(p + i) % slab_npart]);
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
    assert(clsid >= 1 && clsid <= slab_nclasses);
    assert((it->it_flags & ITEM_SLABBED) == 0);
    struct slab_class *c = &slab_classes[clsid];
    int p = partition >= 0 ? partition % slab_npart : 0;
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
        slab_chunk_push_locked(sp, it);
    }
    pthread_mutex_unlock(&sp->lock);
}

/* ---- Stats. -------------------------------------------------------------- */

/* Snapshot of one class, for stats and tests. */
void slabs_class_info(unsigned int clsid, struct slabs_class_info *out)
{
    memset(out, 0, sizeof(*out));
    if (clsid < 1 || clsid > slab_nclasses)
        return;
    struct slab_class *c = &slab_classes[clsid];
    out->chunk_size = c->size;
    out->chunks_per_page = c->perslab;
    out->page_size = c->page_size;
    out->movable = c->movable;
    out->total_pages = __atomic_load_n(&c->total_pages, __ATOMIC_RELAXED);
    out->total_chunks = out->total_pages * c->perslab;
    out->used_chunks = __atomic_load_n(&c->used_chunks, __ATOMIC_RELAXED);
    out->alloc_fails = __atomic_load_n(&c->alloc_fails, __ATOMIC_RELAXED);
    for (int p = 0; p < slab_npart; p++) {
        pthread_mutex_lock(&c->part[p].lock);
        out->free_chunks += c->part[p].nfree;
        out->free_chunks_end += c->part[p].end_free;
        pthread_mutex_unlock(&c->part[p].lock);
    }
    pthread_mutex_lock(&slab_drain.lock);
    if (slab_drain.page != NULL && slab_drain.clsid == clsid)
        out->moving_chunks = slab_drain.nfree;
    pthread_mutex_unlock(&slab_drain.lock);
}

void slabs_stats(struct stat_sink *sink)
{
    unsigned int active = 0;
    char key[64];
    struct thread_stats ts;

    stats_aggregate(&ts, NULL);
    for (unsigned int i = 1; i <= slab_nclasses && i < MAX_SLAB_CLASSES; i++) {
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

/* memcached's meaning: bytes of slab pages allocated, those handed out
 * under -m and those waiting in the global pool (unless a lowered limit
 * gave their memory back to the system). */
static uint64_t stat_total_malloced(void)
{
    return slabs_mem_malloced() +
           __atomic_load_n(&pool_resident, __ATOMIC_RELAXED) * slab_std_page;
}

/* memcached's slab_chunk_max: the largest chunk of any class.  Items are
 * never split, so an item above it takes a class of its own size. */
static void slabs_settings(struct stat_sink *s)
{
    stat_printf(s, "slab_chunk_max", "%zu", (size_t)slab_classes[slab_nclasses].size);
}

/* `stats slabs`, and the allocator's and mover's lines of plain `stats`
 * (stats.c's table names them and says what they mean). */
static void slabs_stats_register(void)
{
    stats_register_section("slabs", slabs_stats);
    stats_register_section("settings", slabs_settings);
    stats_provide("total_malloced", stat_total_malloced);
    stats_provide_counter("slab_reassign_running", &slab_mstats.running);
#define MOVER_PROVIDE(name, wire) stats_provide_counter(wire, &slab_mstats.name);
    MOVER_STATS_FIELDS(MOVER_PROVIDE)
#undef MOVER_PROVIDE
    stats_provide_counter("slab_global_page_pool", &slab_pool_pages);
}

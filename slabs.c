/*
 * slabs.c - the DRAM slab allocator.
 *
 * Owns: every DRAM page that holds items and meta tuples, and the -m
 * budget (settings.maxbytes) they are charged against.
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
 * free list and "end" region (the not yet carved tail of its newest page,
 * so a fresh page is not touched until used).  slabs_alloc() serves the
 * requesting partition from its free list, then its end region, then a new
 * page charged to -m (which goes to that partition), and only then steals
 * one chunk from the neighbours p+1, p+2, ... in turn.
 *
 * Memory limit: a page is granted while total page bytes stay within -m.
 * Like memcached, a class that has no page yet gets one even over -m, so a
 * tiny -m still works for every class in use; -m is then exceeded by at
 * most one page per class (each class gets this grace once).  With -L (prealloc) one block of -m bytes is malloc'd
 * up front and pages are carved from it.
 *
 * Threads: any thread.  Lock order: item lock -> partition LRU lock ->
 * slab partition lock (this file's locks are leaves; none is held while
 * taking another).  Per-class page lists are protected by pages_lock.
 */
#include "config.h"

#include <assert.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "items.h"
#include "memcached.h"
#include "slabs.h"
#include "stats.h"

#define CHUNK_ALIGN 8

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
    uint64_t total_pages;   /* atomic */
    uint64_t used_chunks;   /* atomic: handed out, not yet freed */
    bool grace_used;        /* atomic: first page granted over -m */
    pthread_mutex_t pages_lock;
    void **pages;           /* pages_lock: every page, for teardown */
    size_t npages, pages_cap; /* pages_lock */
    struct slab_part part[MAX_PARTITIONS];
};

static struct slab_class classes[MAX_SLAB_CLASSES];
static unsigned int nclasses;       /* set at init */
static int npart;                   /* set at init */
static size_t mem_limit;            /* set at init */
static size_t mem_malloced;         /* atomic */
static char *prealloc_base;         /* set at init */
static size_t prealloc_used;        /* atomic: bytes carved from it */
static bool initialized;

static size_t align_up(size_t n)
{
    return (n + CHUNK_ALIGN - 1) & ~(size_t)(CHUNK_ALIGN - 1);
}

static void slabs_teardown(void)
{
    for (unsigned int i = 1; i <= nclasses; i++) {
        struct slab_class *c = &classes[i];
        for (size_t j = 0; j < c->npages; j++) {
            char *pg = c->pages[j];
            if (prealloc_base == NULL || pg < prealloc_base ||
                pg >= prealloc_base + mem_limit)
                free(pg);
        }
        free(c->pages);
        pthread_mutex_destroy(&c->pages_lock);
        for (int p = 0; p < MAX_PARTITIONS; p++)
            pthread_mutex_destroy(&c->part[p].lock);
    }
    free(prealloc_base);
    prealloc_base = NULL;
}

static void init_class(unsigned int id, size_t size)
{
    struct slab_class *c = &classes[id];
    memset(c, 0, sizeof(*c));
    c->size = size;
    c->page_size = (size_t)settings.slab_page_size;
    if (c->size > c->page_size)
        c->page_size = c->size;
    c->perslab = (unsigned int)(c->page_size / c->size);
    pthread_mutex_init(&c->pages_lock, NULL);
    for (int p = 0; p < MAX_PARTITIONS; p++)
        pthread_mutex_init(&c->part[p].lock, NULL);
}

static void build_classes(void)
{
    size_t max = align_up((size_t)settings.item_size_max);
    size_t size = align_up(sizeof(item) + (size_t)settings.chunk_size);
    double factor = settings.factor > 1.0 ? settings.factor : 1.01;

    nclasses = 0;
    while (nclasses < MAX_SLAB_CLASSES - 2 && size < max &&
           (double)size <= (double)max / factor) {
        init_class(++nclasses, size);
        size_t next = align_up((size_t)((double)size * factor));
        size = next > size ? next : size + CHUNK_ALIGN;
    }
    init_class(++nclasses, max);
}

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
    prealloc_used = 0;
    build_classes();

    if (settings.prealloc && mem_limit > 0) {
        prealloc_base = malloc(mem_limit);
        if (prealloc_base == NULL && settings.verbose > 0)
            fprintf(stderr, "slabs: cannot preallocate %zu bytes; "
                    "allocating pages on demand\n", mem_limit);
    }
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
    return mem_limit;
}

/* Charges one page to -m; false if the budget is spent (see top). */
static bool charge_page(struct slab_class *c)
{
    size_t cur = __atomic_load_n(&mem_malloced, __ATOMIC_RELAXED);
    for (;;) {
        if (mem_limit != 0 && cur + c->page_size > mem_limit) {
            /* Over budget: only a class without pages gets one, once. */
            bool no = false;
            if (__atomic_load_n(&c->total_pages, __ATOMIC_RELAXED) != 0 ||
                !__atomic_compare_exchange_n(&c->grace_used, &no, true,
                                             false, __ATOMIC_RELAXED,
                                             __ATOMIC_RELAXED))
                return false;
            __atomic_fetch_add(&mem_malloced, c->page_size, __ATOMIC_RELAXED);
            return true;
        }
        if (__atomic_compare_exchange_n(&mem_malloced, &cur,
                                        cur + c->page_size, false,
                                        __ATOMIC_RELAXED, __ATOMIC_RELAXED))
            return true;
    }
}

static char *page_memory(size_t len)
{
    if (prealloc_base != NULL) {
        size_t off = __atomic_fetch_add(&prealloc_used, len, __ATOMIC_RELAXED);
        if (off + len <= mem_limit)
            return prealloc_base + off;
    }
    return malloc(len);
}

static bool record_page(struct slab_class *c, char *pg)
{
    bool ok = true;
    pthread_mutex_lock(&c->pages_lock);
    if (c->npages == c->pages_cap) {
        size_t cap = c->pages_cap ? c->pages_cap * 2 : 16;
        void **np = realloc(c->pages, cap * sizeof(*np));
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
    return ok;
}

/* Gets a new page for class c within -m; NULL if none. */
static char *new_page(struct slab_class *c)
{
    if (!charge_page(c))
        return NULL;
    char *pg = page_memory(c->page_size);
    if (pg != NULL && !record_page(c, pg)) {
        if (prealloc_base == NULL || pg < prealloc_base ||
            pg >= prealloc_base + mem_limit)
            free(pg);
        pg = NULL;
    }
    if (pg == NULL) {
        __atomic_fetch_sub(&mem_malloced, c->page_size, __ATOMIC_RELAXED);
        return NULL;
    }
    __atomic_fetch_add(&c->total_pages, 1, __ATOMIC_RELAXED);
    return pg;
}

/* Takes a chunk from a partition.  Caller holds sp->lock. */
static item *part_take_locked(struct slab_class *c, struct slab_part *sp)
{
    item *it = sp->free_list;
    if (it != NULL) {
        sp->free_list = it->next;
        sp->nfree--;
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
    it->prev = NULL;
    it->next = sp->free_list;
    sp->free_list = it;
    sp->nfree++;
}

/* Installs a fresh page as sp's end region and takes its first chunk. */
static item *part_add_page(struct slab_class *c, struct slab_part *sp,
                           char *pg, unsigned int clsid)
{
    pthread_mutex_lock(&sp->lock);
    /* Another thread may have installed a page meanwhile: carve what is
     * left of its end region onto the free list first. */
    while (sp->end_free > 0) {
        item *old = (item *)sp->end_ptr;
        old->slabs_clsid = (uint8_t)clsid;
        sp->end_ptr += c->size;
        sp->end_free--;
        chunk_push_locked(sp, old);
    }
    sp->end_ptr = pg;
    sp->end_free = c->perslab;
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
    if (clsid < 1 || clsid > nclasses)
        return NULL;
    struct slab_class *c = &classes[clsid];
    int p = partition >= 0 ? partition % npart : 0;

    item *it = part_take(c, &c->part[p]);
    if (it == NULL) {
        char *pg = new_page(c);
        if (pg != NULL)
            it = part_add_page(c, &c->part[p], pg, clsid);
    }
    for (int i = 1; it == NULL && i < npart; i++)
        it = part_take(c, &c->part[(p + i) % npart]);
    if (it == NULL)
        return NULL;

    memset(it, 0, sizeof(*it));
    it->slabs_clsid = (uint8_t)clsid;
    it->partition = (uint8_t)p;
    __atomic_fetch_add(&c->used_chunks, 1, __ATOMIC_RELAXED);
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

    it->slabs_clsid = (uint8_t)clsid;
    pthread_mutex_lock(&sp->lock);
    chunk_push_locked(sp, it);
    pthread_mutex_unlock(&sp->lock);
    __atomic_fetch_sub(&c->used_chunks, 1, __ATOMIC_RELAXED);
}

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
    out->total_pages = __atomic_load_n(&c->total_pages, __ATOMIC_RELAXED);
    out->total_chunks = out->total_pages * c->perslab;
    out->used_chunks = __atomic_load_n(&c->used_chunks, __ATOMIC_RELAXED);
    for (int p = 0; p < npart; p++) {
        pthread_mutex_lock(&c->part[p].lock);
        out->free_chunks += c->part[p].nfree;
        out->free_chunks_end += c->part[p].end_free;
        pthread_mutex_unlock(&c->part[p].lock);
    }
}

void slabs_stats(struct stat_sink *sink)
{
    unsigned int active = 0;
    char key[64];

    for (unsigned int i = 1; i <= nclasses; i++) {
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
    }
    stat_printf(sink, "active_slabs", "%u", active);
    stat_printf(sink, "total_malloced", "%zu", slabs_mem_malloced());
}

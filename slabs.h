/*
 * slabs.h - the DRAM slab allocator (interface; see slabs.c for design).
 *
 * slabs.c owns every DRAM page that holds items and meta tuples.  Memory is
 * cut into slab classes of growing chunk size (-n, -f); each class has P
 * partitions (-o partitions) with a free list and lock each.  Pages are
 * taken from the -m budget on demand.
 */
#ifndef SLABS_H
#define SLABS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* Builds the class table from settings (chunk_size, factor,
 * item_size_max, partitions, maxbytes, prealloc). */
void slabs_init(void);

/* Class id for an item of `size` bytes, 0 if too large. */
unsigned int slabs_clsid(size_t size);
/* Chunk size of a class. */
size_t slabs_chunk_size(unsigned int clsid);
/* Number of classes in use (ids are 1..slabs_nclasses()). */
unsigned int slabs_nclasses(void);

/*
 * Takes a free chunk of class `clsid` from `partition`'s free list; when
 * empty, grabs a new page within -m, then steals from neighbouring
 * partitions.  Returns NULL when the class has no free chunk anywhere
 * (the caller then evicts).  The chunk is zeroed only in its header.
 */
void *slabs_alloc(unsigned int clsid, int partition);

/* Returns a chunk to the free list of (clsid, partition). */
void slabs_free(void *ptr, unsigned int clsid, int partition);

/* Bytes of -m handed out as pages so far. */
size_t slabs_mem_malloced(void);

/* Number of partitions per class in use (settings.partitions, clamped). */
int slabs_npartitions(void);
/* The -m budget in bytes (0 = unlimited). */
size_t slabs_mem_limit(void);

/* Snapshot of one class (stats, tests).  used + free + free_end equals
 * total_chunks when no allocation is in flight. */
struct slabs_class_info {
    size_t chunk_size;
    size_t page_size;
    unsigned int chunks_per_page;
    uint64_t total_pages;
    uint64_t total_chunks;
    uint64_t used_chunks;
    uint64_t free_chunks;       /* on free lists */
    uint64_t free_chunks_end;   /* never handed out yet */
};
void slabs_class_info(unsigned int clsid, struct slabs_class_info *out);

struct stat_sink;
/* `stats slabs` (chunk sizes, pages, used/free chunks, per-class
 * command counters aggregated by stats.c). */
void slabs_stats(struct stat_sink *sink);

#endif

/*
 * nvm.h - the NVM tier: a byte-addressable region with a 256 B-aligned
 * slab allocator.  This header is the whole interface.
 *
 * A region is a file (on a DAX file system, tmpfs or an ordinary disk), a
 * device-dax character device, or anonymous memory bound to a NUMA node
 * (a CXL expander or a far socket).  Files and device-dax are mapped with
 * PMDK libpmem.  The region begins with a self-describing header (see
 * nvm/format.h); slots live in fixed-size pages after it.
 *
 * A slot is named by a reference: its byte offset in the region, always a
 * multiple of NVM_SLOT_ALIGN.  Reference 0 is never a slot (the header
 * lives there) and means "none".  References stay meaningful while the
 * region is open; they are 8 bytes, so a meta tuple can store one as is.
 *
 * All allocator metadata (free lists, the page -> class map, counters) is
 * kept in DRAM.  The allocator never writes to the mapping: allocating or
 * freeing a slot leaves its bytes untouched, so NVM write bandwidth goes to
 * tuples only.  The header is written at open and close, nowhere else.
 *
 * Threads: every function may be called from any thread at the same time,
 * except nvm_open and nvm_close, which must not race with any other call
 * on the same region.  Different threads may read and write different
 * slots concurrently; concurrent access to the same slot is the caller's
 * business (the cache pins a tuple with a reference count).
 *
 * This library includes no server header and uses no server global.
 */
#ifndef NVM_NVM_H
#define NVM_NVM_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define NVM_SLOT_ALIGN 256u          /* slot size and reference granule */
#define NVM_MAX_PARTITIONS 64
#define NVM_MAX_CLASSES 200          /* class ids are 1..nclasses */
#define NVM_DEFAULT_PAGE_SIZE (1024u * 1024u)
#define NVM_DEFAULT_FACTOR 1.25

struct nvm_region;                   /* opaque */

enum nvm_status {
    NVM_OK = 0,
    NVM_ERR_ARG,     /* bad configuration (size too small, bad path syntax...) */
    NVM_ERR_OPEN,    /* the backing path cannot be opened or created */
    NVM_ERR_MAP,     /* mmap/pmem_map_file/msync failed */
    NVM_ERR_NUMA,    /* NUMA node missing, without memory, or mbind failed */
    NVM_ERR_NOMEM,   /* DRAM for the allocator metadata, or space for the file */
    NVM_ERR_FORMAT,  /* the mapped region cannot hold a header and one page */
    NVM_ERR_NOT_OURS,/* the path holds data that is not a region of this
                        format and geometry (nvm_refusal says why) */
};

/* Static text for st; never NULL. */
const char *nvm_strerror(enum nvm_status st);

struct nvm_config {
    /* "numa:N" (anonymous memory bound to node N), a device-dax character
     * device (/dev/daxX.Y), or any other path: a file, created if absent. */
    const char *path;
    /* Bytes.  A file is created or resized to this size.  0 maps an existing
     * file or a whole device-dax as it is; numa:N needs a size. */
    size_t size;
    /* Emulated extra latency, in ns, per 256 B block touched by nvm_read /
     * nvm_write (and nvm_charge_*).  0 (default) costs nothing. */
    unsigned read_ns, write_ns;
    int partitions;      /* free-list partitions per class, 1..64; 0 = 1 */
    size_t slot_max;     /* largest slot needed; 0 = page_size */
    double factor;       /* slot size growth, > 1.0; 0 = 1.25 */
    size_t page_size;    /* multiple of 256; 0 = 1 MB; raised to fit slot_max */
    /* Format the path even when it holds something else: another format
     * version, another geometry, a damaged header or foreign data. */
    bool reformat;
    /* An opaque value kept in the header (the caller's encryption key
     * check; zeros for none): a region whose header holds another one is
     * refused like another geometry. */
    uint8_t key_check[16];
};

/*
 * Reads the header area of cfg->path before it changes a byte.  A path
 * that holds anything but a new file, zeros or a region of this format and
 * geometry (size, page size, class table) is refused with NVM_ERR_NOT_OURS,
 * unless cfg->reformat.  Then it maps the path and writes a new header; the
 * slots' bytes are left as they were, and the allocator starts with every
 * slot free until the caller adopts the ones it still trusts (nvm_adopt;
 * the old header is reported as nvm_info.prev_state and prev_open_count).  The header is marked
 * dirty until nvm_close.  cfg and cfg->path are copied; the caller may
 * free them.  On success *out owns the region; on failure *out is NULL and
 * errno holds the cause of the failing system call, if any.
 */
enum nvm_status nvm_open(const struct nvm_config *cfg, struct nvm_region **out);

/* After NVM_ERR_NOT_OURS on this thread: what the path holds, as a phrase
 * that follows the path ("holds data that is not ..."). */
const char *nvm_refusal(void);

/*
 * Makes every write durable (pmem_drain when is_pmem, msync for a non-pmem
 * file), clears the dirty flag, unmaps and frees r.  On pmem, writes made
 * by other threads must have been drained by those threads (nvm_drain).  If msync fails the
 * dirty flag stays set, so a future restart will reject the contents.
 * Every reference and pointer into r dies with it.  True when the region
 * was closed clean (its open count, nvm_info.open_count, is then what the
 * next open reports as prev_open_count); false for anonymous memory, a
 * failed msync and NULL (a no-op).
 */
bool nvm_close(struct nvm_region *r);

/* Closes r after a failed start: unmaps it and removes the file if
 * nvm_open created it, so that a start that fails leaves nothing behind. */
void nvm_abandon(struct nvm_region *r);

/* ---- Allocation ---------------------------------------------------------
 * Classes are numbered 1..nvm_nclasses(r).  Slot sizes start at 256 B,
 * each next class is max(prev + 256, prev * factor) rounded up to 256 B,
 * and the last class is slot_max rounded up to 256 B.  A class takes whole
 * pages.  A page changes class only once it holds no allocated slot: a
 * page of another class whose slots are all free, or one the caller's page
 * mover emptied (nvm_drain_begin below).
 *
 * nvm_alloc looks in the partition's free list, then the uncarved rest of
 * its newest page, then takes a new page for that partition (a never-used
 * page, an emptied one, or a wholly free page of another class), and only then
 * steals one slot from partitions partition+1, partition+2, ... in turn.
 * partition is taken modulo the partition count.  Returns 0 when size is
 * too large or the class has no free slot anywhere: the caller then evicts.
 * The slot's bytes are whatever was there before.
 */
uint64_t nvm_alloc(struct nvm_region *r, size_t size, int partition);
uint64_t nvm_alloc_class(struct nvm_region *r, unsigned cls, int partition);

/* Like nvm_alloc_class, but never takes a page: only a slot that is free
 * now, in any partition (the page mover's destination). */
uint64_t nvm_alloc_free_slot(struct nvm_region *r, unsigned cls, int partition);

/* Returns ref to the free list of the partition that owns its page.
 * Writes nothing to the mapping.  ref 0 is a no-op; ref must otherwise come
 * from nvm_alloc on r and not be freed twice. */
void nvm_free(struct nvm_region *r, uint64_t ref);

/* ---- Adopting slots (a restart) -----------------------------------------
 * A region opened on a cleanly closed file keeps its bytes, but the
 * allocator starts empty.  A restart that trusts a saved list of live
 * slots calls nvm_adopt for each (ref must be the start of a slot of class
 * cls: a page holds one class), then nvm_adopt_done once, which hands the
 * adopted pages' other slots to the free lists.  Both before any other
 * allocator call, on one thread.  nvm_adopt is false (and marks nothing)
 * for a ref that cannot be such a slot, was adopted already, or lies in a
 * page adopted for another class; nvm_adopt_done is false when DRAM for
 * the free lists ran out (those slots stay unused until a restart).
 */
bool nvm_adopt(struct nvm_region *r, uint64_t ref, unsigned cls);
bool nvm_adopt_done(struct nvm_region *r);

/* A copy of the page -> class map that outlives the process (crash
 * recovery reads it to know how each page is cut into slots): map has
 * nvm_npages() bytes, class 0 for a page no class holds.  This call fills
 * it from the allocator; from then on every change of a page's class is
 * stored there too, before any slot of the page is handed out.  NULL
 * detaches it.  Set before other threads use r. */
void nvm_set_class_map(struct nvm_region *r, uint8_t *map);
uint64_t nvm_npages(const struct nvm_region *r);

/* ---- Draining a page (the caller's page mover) --------------------------
 * When a class needs a page and none is free while other classes hold many
 * free slots, the caller can empty a page and so hand it over:
 *   nvm_drain_begin   picks the page, of a class other than need_cls with
 *                     more than one slot per page, with the fewest live
 *                     bytes whose live slots fit in its class's other free
 *                     slots (with spill, whether they fit or not: the
 *                     caller moves the rest to a lower tier).  No slot of
 *                     it is allocated again.  True while
 *                     a page is draining (this one or an earlier one);
 *                     false when none is, or none qualifies.
 *   nvm_drain_live    the page's slots still allocated (up to cap), for the
 *                     caller to copy elsewhere (nvm_alloc_free_slot) and
 *                     free.  Some may be slots being written or freed by
 *                     others: the caller checks each one it moves.
 *   nvm_draining      true until the last live slot is freed; the page is
 *                     then handed to the next class that needs one
 *                     (nvm_info.pages_drained counts them).
 *   nvm_drain_abort   gives the page's free slots back to its class; false
 *                     (and still draining) only when out of DRAM.
 * One page drains at a time; begin, live and abort are for one thread.
 */
bool nvm_drain_begin(struct nvm_region *r, unsigned need_cls, bool spill);
size_t nvm_drain_live(struct nvm_region *r, uint64_t *refs, size_t cap);
bool nvm_draining(const struct nvm_region *r);
/* True while ref lies in the page being drained. */
bool nvm_in_drain(const struct nvm_region *r, uint64_t ref);
bool nvm_drain_abort(struct nvm_region *r);

/* Smallest class whose slot holds size bytes; 0 when size > slot_max. */
unsigned nvm_class_of_size(const struct nvm_region *r, size_t size);
/* Class of the page holding ref; 0 when ref is not the start of a slot in
 * a page that was handed to a class. */
unsigned nvm_class_of_ref(const struct nvm_region *r, uint64_t ref);
unsigned nvm_nclasses(const struct nvm_region *r);
int nvm_partitions(const struct nvm_region *r);
/* Slot size of class cls; 0 when cls is out of range. */
size_t nvm_class_slot_size(const struct nvm_region *r, unsigned cls);
/* Slot size of the slot at ref; 0 when nvm_class_of_ref(r, ref) is 0. */
size_t nvm_slot_size(const struct nvm_region *r, uint64_t ref);

/* ---- Walking a class (a CLOCK hand) -------------------------------------
 * nvm_class_next: the slot of class cls that follows `ref` in address
 * order (ref 0: from the start), wrapping past the region's end to its
 * start, and then setting *wrapped.  0 when no page holds cls.  The slot
 * may be free, allocated or being written, and its page may change class
 * meanwhile: read it only with nvm_peek, and trust nothing read there.
 */
uint64_t nvm_class_next(const struct nvm_region *r, unsigned cls, uint64_t ref,
                        bool *wrapped);

/* ---- Access -------------------------------------------------------------
 * off + len must stay within the slot.
 */

/* Pointer to byte 0 of the slot inside the mapping (not a copy).  Valid
 * while the slot stays allocated and the region open.  Loads and stores
 * through it bypass latency emulation (see nvm_charge_*) and, on pmem,
 * are not durable until flushed by the caller. */
void *nvm_ptr(const struct nvm_region *r, uint64_t ref);

/* Copies len bytes from src into the slot at off: pmem_memcpy_nodrain when
 * is_pmem, memcpy otherwise; then charges write latency.  Not ordered or
 * durable until nvm_drain. */
void nvm_write(struct nvm_region *r, uint64_t ref, size_t off,
               const void *src, size_t len);

/* One drain per batch of nvm_write calls: pmem_drain when is_pmem, a store
 * fence otherwise.  Ordering only: a non-pmem file is made durable by
 * nvm_close (msync), never per write. */
void nvm_drain(struct nvm_region *r);

/* Copies up to len bytes at ref + off into dst, cut at the region's end,
 * and charges read latency; returns the bytes copied.  Unlike nvm_read it
 * asks nothing of the slot: for a reader that found ref by nvm_class_next
 * and may race with a write of the same bytes.  ThreadSanitizer is told
 * to ignore that race, so the caller must check whatever it copied
 * before it uses it. */
size_t nvm_peek(struct nvm_region *r, uint64_t ref, size_t off, void *dst,
                size_t len);

/* Copies len bytes at off of the slot into dst, then charges read latency. */
void nvm_read(struct nvm_region *r, uint64_t ref, size_t off,
              void *dst, size_t len);

/* Charge the emulated latency of touching [off, off+len) of the slot, for
 * callers that read or write through nvm_ptr (e.g. zero-copy sends). */
void nvm_charge_read(struct nvm_region *r, uint64_t ref, size_t off, size_t len);
void nvm_charge_write(struct nvm_region *r, uint64_t ref, size_t off, size_t len);

/* ---- Info and stats -----------------------------------------------------
 * Counters are relaxed atomics: each is exact, but a snapshot of several
 * may mix moments while other threads allocate.
 */

/* What the header at offset 0 said before nvm_open reformatted it. */
enum nvm_prev_state {
    NVM_PREV_NONE = 0,   /* new, anonymous, or only zeros in the header area */
    NVM_PREV_CLEAN,      /* closed cleanly by nvm_close */
    NVM_PREV_DIRTY,      /* still marked open: the previous owner crashed */
    NVM_PREV_OTHER,      /* anything else; formatted only with reformat */
};

struct nvm_info {
    const char *backing;   /* "pmem-file", "devdax", "file", "tmpfs-file" or
                              "numa"; static string */
    const char *path;      /* copy owned by r; valid until nvm_close */
    bool is_pmem;          /* pmem_is_pmem() over the whole mapping */
    int numa_node;         /* node of the first page; -1 if unknown */
    enum nvm_prev_state prev_state;
    uint64_t prev_open_count;   /* the header found: its open count (0: none) */
    uint64_t open_count;        /* this open's (written in the header) */
    size_t capacity;       /* mapped bytes, header included */
    size_t page_size;
    size_t data_offset;    /* offset of page 0 */
    uint64_t pages_total, pages_used;
    uint64_t pages_reused;  /* wholly free pages handed to another class */
    uint64_t pages_drained; /* pages emptied by a page mover (nvm_drain_*) */
    uint64_t slots_used;
    uint64_t bytes_used;   /* sum of allocated slot sizes */
    size_t dram_bytes;     /* DRAM held by the allocator metadata (reserved) */
    unsigned read_ns, write_ns;
    uint64_t read_blocks;  /* 256 B blocks charged as read; counted only
                              with read_ns != 0 */
    unsigned nclasses;
    int partitions;
};
void nvm_get_info(const struct nvm_region *r, struct nvm_info *out);

struct nvm_class_info {
    size_t slot_size;          /* 0 when cls is out of range (all zero then) */
    unsigned slots_per_page;
    uint64_t pages;            /* pages handed to this class */
    uint64_t slots_used;       /* allocated, not yet freed */
    uint64_t slots_free;       /* in free lists or uncarved in its pages */
    uint64_t steals;           /* slots taken from another partition */
    uint64_t alloc_fails;      /* nvm_alloc calls that returned 0 */
};
void nvm_class_info(const struct nvm_region *r, unsigned cls,
                    struct nvm_class_info *out);

/* Slots partition of cls can hand out without a new page (for watermarks).
 * 0 for a bad cls; partition is taken modulo the partition count. */
uint64_t nvm_free_slots(const struct nvm_region *r, unsigned cls, int partition);

/* Pages not yet handed to any class, or emptied and not yet taken. */
uint64_t nvm_free_pages(const struct nvm_region *r);

/* True when a class other than cls with one slot per page has a free
 * slot, so a wholly free page: an allocation of cls that failed may
 * succeed on a later try (page reuse backs off briefly and skips busy
 * partitions).  Lock-free. */
bool nvm_page_reusable(const struct nvm_region *r, unsigned cls);

#endif

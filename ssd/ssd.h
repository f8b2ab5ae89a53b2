/*
 * ssd.h - the SSD tier's storage engine: a page store on a file or block
 * device opened O_DIRECT, written in whole bufs and read asynchronously.
 * This header is the whole interface.
 *
 * Layout.  The first two 4 KiB blocks each hold a copy of the
 * self-describing header (magic, format version, generation, sizes, dirty
 * flag, checksum; see ssd/internal.h), so that a crash while one is
 * written leaves the other.  Pages follow them,
 * each page_size bytes, each cut into page_size / buf_size bufs.  A buf is
 * the unit of writing (one write per buf) and of whole-buf fetches.
 *
 * References.  A tuple is named by an 8-byte reference
 *     { page version:16 | page id:16 | offset in page:32 }
 * (ssd_ref_pack / ssd_ref_*).  Page versions start at 1 and skip 0, so the
 * reference 0 never names a tuple and means "none".  When a page is
 * reclaimed its version is bumped; ssd_ref_current() then says false for
 * every older reference into it.
 *
 * Page life: FREE -> OPEN (bufs being handed out / written) -> SEALED (every
 * buf written or released) -> FREE again once its live bytes reach 0.
 * Live bytes grow with ssd_buf_append and shrink with ssd_mark_dead.  All
 * page metadata lives in DRAM; nothing but whole bufs and the header block
 * is ever written to the device.
 *
 * I/O engines.  SSD_IO_URING (default): each ssd_ring owns an io_uring for
 * its reads; buf writes go through one store-wide io_uring whose
 * completions are reaped by an internal thread.  If io_uring_queue_init
 * fails the store falls back to SSD_IO_THREADS: a pool of threads doing
 * pread/pwrite, handing read completions back through the ring's eventfd.
 * The API and callback threads are the same for both engines.
 *
 * Threads: ssd_open/ssd_close must not race with any other call on the
 * store.  Every other store-level function may be called from any thread.
 * An ssd_ring belongs to the thread that created it: ssd_read, ssd_read_buf,
 * ssd_ring_reap and ssd_ring_destroy are called on that thread only, and
 * read callbacks run there, from ssd_ring_reap.  An ssd_buf is filled by
 * one thread at a time (its owner); ssd_buf_lookup may run concurrently.
 *
 * This library includes no server header and uses no server global.
 */
#ifndef SSD_SSD_H
#define SSD_SSD_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/uio.h>

#define SSD_BLOCK 4096u              /* O_DIRECT granule; read extents align to it */
#define SSD_TUPLE_ALIGN 8u           /* tuple starts inside a buf align to this */
/* Block packing (ssd_buf_appendv): a tuple of at most SSD_BLOCK bytes that
 * would cross a block boundary with fewer than SSD_PAD_MAX bytes left
 * before it starts at the boundary instead, so that reading it reads one
 * block, while the buf's padding stays within 1/SSD_PAD_SHARE of it. */
#define SSD_PAD_MAX 1024u
#define SSD_PAD_SHARE 8u
/* Defaults, measured with bench/ssd-bufsize.sh (bench/RESULTS.md, "SSD buf
 * and page size").  256 KB bufs are the smallest that reach full sequential
 * write bandwidth (1.9-2.8 GB/s here, the same as 1-4 MB; 64 KB gets about
 * half), while 4 KiB reads running next to the writer keep sub-millisecond
 * latency, which 1 MB and larger bufs lose.  8 MB pages (32 bufs) are read
 * whole by defrag in under 4 ms, leave a 1 GB file 127 pages to choose
 * from, and with 16-bit page ids still address 512 GB. */
#define SSD_DEFAULT_PAGE_SIZE (8u * 1024u * 1024u)
#define SSD_DEFAULT_BUF_SIZE (256u * 1024u)
#define SSD_DEFAULT_QUEUE_DEPTH 64u
#define SSD_DEFAULT_THREADS 4u
#define SSD_MAX_PAGES 65536u         /* 16-bit page id, over all files */
#define SSD_MAX_FILES 8u             /* files of one store (ssd_config.paths) */

struct ssd_store;                    /* opaque */
struct ssd_buf;                      /* opaque */
struct ssd_ring;                     /* opaque */

enum ssd_status {
    SSD_OK = 0,
    SSD_ERR_ARG,     /* bad configuration or argument (size too small...) */
    SSD_ERR_OPEN,    /* the path cannot be opened, created or sized */
    SSD_ERR_DIRECT,  /* the file system refuses O_DIRECT (tmpfs, /dev/shm) */
    SSD_ERR_NOMEM,   /* DRAM for metadata, bufs or requests */
    SSD_ERR_IO,      /* a read or write failed or came back short */
    SSD_ERR_URING,   /* io_uring setup failed and threads were not allowed */
    SSD_ERR_FULL,    /* no free page */
    SSD_ERR_NOSPACE, /* the tuple does not fit in the rest of the buf */
    SSD_ERR_STALE,   /* the reference's page was reclaimed (version changed) */
    SSD_ERR_NOT_OURS,/* the path holds data that is not a store of this
                        format and geometry (ssd_refusal says why) */
};

/* Static text for st; never NULL. */
const char *ssd_strerror(enum ssd_status st);

enum ssd_engine {
    SSD_IO_URING = 0,  /* default; falls back to threads if setup fails */
    SSD_IO_THREADS,    /* force the pread/pwrite thread pool */
};

struct ssd_config {
    /* A file (created if absent) or a block device. */
    const char *path;
    /* Bytes of pages.  A file is preallocated to this size plus the
     * header blocks (fallocate, else ftruncate); a device gives at most
     * its size.  0 uses the existing file's or device's size. */
    uint64_t size;
    /* Several files, when nfiles > 0 (path and size are then unused):
     * file k holds pages [first_k, first_k + pages_k), in the order given;
     * each has its own header naming its place in the set. */
    unsigned nfiles;
    const char *paths[SSD_MAX_FILES];
    uint64_t sizes[SSD_MAX_FILES];
    size_t page_size;     /* multiple of buf_size, <= 4 GB; 0 = 8 MB; the
                             largest tuple the store can take */
    size_t buf_size;      /* multiple of 4 KiB; 0 = 256 KB */
    enum ssd_engine engine;
    unsigned queue_depth; /* io_uring entries per ring; 0 = 64 */
    unsigned threads;     /* pool size for SSD_IO_THREADS; 0 = 4 */
    /* Format the path even when it holds something else: another format
     * version, another geometry, a damaged header or foreign data. */
    bool reformat;
    /* An opaque value kept in the header (the caller's encryption key
     * check; zeros for none): a store whose header holds another one is
     * refused like another geometry. */
    uint8_t key_check[16];
};

enum ssd_prev_state {
    SSD_PREV_NONE = 0,   /* new, or only zeros where the header goes */
    SSD_PREV_CLEAN,      /* our header, closed cleanly */
    SSD_PREV_DIRTY,      /* our header, not closed (crash) */
    SSD_PREV_OTHER,      /* anything else; formatted only with reformat */
};

struct ssd_info {
    enum ssd_engine engine;        /* engine actually in use */
    uint64_t size;                 /* bytes of the devices/files, summed
                                      (their header blocks included) */
    unsigned nfiles;               /* files of the store (1 or more) */
    size_t page_size, buf_size;
    unsigned npages, bufs_per_page;
    enum ssd_prev_state prev_state;
    uint64_t prev_generation;      /* of the header found (0: none) */
    uint64_t generation;           /* of the header this open wrote */
};

/*
 * Opens cfg->path O_DIRECT and reads the header area before it changes a
 * byte.  A path that holds something other than a new file, zeros or a
 * store of this format and geometry (size, page and buf size) is refused
 * with SSD_ERR_NOT_OURS, unless cfg->reformat.  Then it sizes the file and
 * writes a new header, marked dirty until ssd_close; the pages' bytes are
 * left as they were, and every page starts free until the caller adopts
 * the ones it still trusts (ssd_adopt_page; the old header is reported as
 * prev_state and prev_generation).  cfg and
 * cfg->path are copied.  On success *out owns the store; on failure *out
 * is NULL and errno holds the cause of the failing system call, if any.
 */
enum ssd_status ssd_open(const struct ssd_config *cfg, struct ssd_store **out);

/* After SSD_ERR_NOT_OURS on this thread: what the path holds, as a phrase
 * that follows the path ("holds data that is not ...").  After any failed
 * ssd_open: the path the failure is about ("" when about none). */
const char *ssd_refusal(void);
const char *ssd_refused_path(void);

/*
 * Waits for buf writes in flight, syncs, clears the dirty flag, closes
 * and frees s.  Every ring must have been destroyed and every buf
 * submitted (and, if its write failed, released) before.  Returns the
 * generation of the clean header written (what the next ssd_open reports
 * as prev_generation), or 0 when the header stays dirty (a failed sync or
 * write).  NULL is a no-op (0).
 */
uint64_t ssd_close(struct ssd_store *s);

void ssd_get_info(const struct ssd_store *s, struct ssd_info *out);

/* ---- References ---------------------------------------------------------- */

static inline uint64_t ssd_ref_pack(uint16_t version, uint16_t page,
                                    uint32_t offset)
{
    return ((uint64_t)version << 48) | ((uint64_t)page << 32) | offset;
}
static inline uint16_t ssd_ref_version(uint64_t ref) { return (uint16_t)(ref >> 48); }
static inline uint16_t ssd_ref_page(uint64_t ref) { return (uint16_t)(ref >> 32); }
static inline uint32_t ssd_ref_offset(uint64_t ref) { return (uint32_t)ref; }

/* True while ref's page still carries ref's version (the tuple may still be
 * live; it is certainly gone when false).  False for 0 and bad page ids. */
bool ssd_ref_current(const struct ssd_store *s, uint64_t ref);

/* ---- Pages ---------------------------------------------------------------
 * ssd_buf_open shares one store-wide open page between all writers.  A
 * caller that wants a page of its own (defrag packing a target page) takes
 * one with ssd_page_alloc, fills it through ssd_buf_open_page, and calls
 * ssd_page_finish when it will open no more bufs in it.
 */

/* Takes a free page (state OPEN; its version is not changed).  Returns the
 * page id, or -1 when no page is free. */
int ssd_page_alloc(struct ssd_store *s);

/* No more bufs will be opened in page (its unused slots stay empty); the
 * page seals once its bufs are all written or released. */
void ssd_page_finish(struct ssd_store *s, int page);

/* The oldest sealed page (the first opened of those sealed), for defrag;
 * -1 when no page is sealed.  *out gets its version and live bytes. */
struct ssd_page_info {
    uint16_t version;
    uint64_t live;
    uint64_t pad;       /* block packing's padding (a bound for an adopted page) */
    uint64_t seq;
};
int ssd_page_oldest(struct ssd_store *s, struct ssd_page_info *out);
/* The sealed page with the fewest live and padding bytes (the oldest of
 * those), the one whose re-packing wins the most space; -1 when none is
 * sealed. */
int ssd_page_emptiest(struct ssd_store *s, struct ssd_page_info *out);
/* Bytes written to buf slot `slot` of page (0 when it holds none) and, in
 * *ref, the reference of the slot's first byte (0 for a free page). */
uint32_t ssd_page_buf(struct ssd_store *s, int page, unsigned slot,
                      uint64_t *ref);

/* Reclaims sealed page `page` now if it still carries `version`, whatever
 * its live bytes (defrag, after dropping or moving every tuple it found
 * valid); every reference into it turns stale.  False if it was already
 * reclaimed or is not sealed. */
bool ssd_page_drop(struct ssd_store *s, int page, uint16_t version);

/* Subtracts len (a tuple larger than a buf: its whole slots) from the live
 * bytes of ref's page.  A sealed page whose
 * live bytes reach 0 is reclaimed at once: version bumped, page freed.
 * Returns false (and changes nothing) when ref is stale. */
bool ssd_mark_dead(struct ssd_store *s, uint64_t ref, size_t len);

/* ---- Export and adoption (a restart) -------------------------------------
 * A graceful stop saves, for each page in use, its version, seq and bufs
 * (ssd_page_export, on a quiescent store), and the live bytes its saved
 * index accounts for, each tuple counted as ssd_live_len(len).  The next
 * open on the cleanly closed file hands them back (ssd_adopt_page, as
 * SEALED pages, before any other call but ssd_get_info), then
 * ssd_adopt_done frees every page not adopted or adopted with no live
 * bytes.  buf_used and buf_first have bufs_per_page entries each.
 */
struct ssd_page_state {
    uint32_t page;
    uint16_t version;
    uint64_t seq;
    uint64_t live;
};
size_t ssd_live_len(const struct ssd_store *s, size_t len);
bool ssd_page_export(struct ssd_store *s, unsigned page,
                     struct ssd_page_state *out, uint32_t *buf_used,
                     uint32_t *buf_first);
/* False for a bad page, version, live count or buf table, or a page
 * adopted already.  An adopted page is pinned: defrag and the drop of the
 * oldest page never pick it (ssd_page_emptiest, ssd_page_oldest), for its
 * tuples may not be indexed yet, until ssd_page_unpin or ssd_unpin_all. */
bool ssd_adopt_page(struct ssd_store *s, const struct ssd_page_state *st,
                    const uint32_t *buf_used, const uint32_t *buf_first);
void ssd_adopt_done(struct ssd_store *s);
/* A tuple of len bytes at ref, found live by a scan of an adopted page:
 * its page's live bytes grow by ssd_live_len(len).  False when ref's page
 * is free or of another version. */
bool ssd_adopt_tuple(struct ssd_store *s, uint64_t ref, size_t len);
/* Releases the pin of an adopted page of that version and subtracts pin
 * from its live bytes (a scan that counted 1 live byte to keep the page
 * until it was read); a sealed page left with none is reclaimed. */
void ssd_page_unpin(struct ssd_store *s, unsigned page, uint16_t version, uint64_t pin);
/* Releases every pin: a restart has indexed what it will. */
void ssd_unpin_all(struct ssd_store *s);
/* Whether some page is still pinned (a restart is still indexing). */
bool ssd_any_pinned(struct ssd_store *s);
/* Waits until no buf write or device read is in flight. */
void ssd_wait_idle(struct ssd_store *s);

/* ---- The durable page table (crash recovery) ------------------------------
 * A copy of what each page holds that outlives the process: the caller
 * gives ssd_table_words() uint32 words (a MAP_SHARED file, say), laid out
 * per page as [version][open order][used of slot 0 .. bufs_per_page - 1]
 * (SSD_TABLE_HDR words before the slots; the open order is the page's seq,
 * low 32 bits).  A slot's
 * word is the bytes its buf holds (0: nothing written in this life of the
 * page) at the buf's first slot, and SSD_TABLE_CONT at the other slots of
 * a buf spanning several.  ssd_set_table fills it from the store; from then
 * on a slot's word is stored when its buf's write has completed, and a
 * reclaimed page's slots are cleared before its new version is stored.  A
 * restart after a crash reads only the bufs it names, so nothing of a
 * page's earlier lives is taken for current.  NULL detaches it.
 */
#define SSD_TABLE_CONT 0xffffffffu
#define SSD_TABLE_HDR 2u
size_t ssd_table_words(const struct ssd_store *s);
void ssd_set_table(struct ssd_store *s, uint32_t *table);
/* The seq of the page opened last, and the lowest seq of a page in use
 * (the clock's next value when none is): a page opened after a moment
 * holds nothing written before it but copies of tuples live then. */
uint64_t ssd_page_clock(struct ssd_store *s);
uint64_t ssd_oldest_page_seq(struct ssd_store *s);

/* ---- Write bufs ----------------------------------------------------------
 * Life of a buf: open -> append* -> submit -> callback.  On success the
 * library frees the buf after the callback returns (later reads go to the
 * device).  On failure the buf and its tuples stay readable (lookup and
 * ssd_read keep serving them from memory) until the caller calls
 * ssd_buf_release.  A buf never submitted is dropped with ssd_buf_release.
 */

/* Opens a buf bound to the next free buf slot of the store's open page,
 * taking a new page when needed.  SSD_ERR_FULL when no page is free. */
enum ssd_status ssd_buf_open(struct ssd_store *s, struct ssd_buf **out);
/* Same, but SSD_ERR_FULL rather than take one of the last keep_free free
 * pages (kept for a writer that frees space, such as defrag). */
enum ssd_status ssd_buf_open_keep(struct ssd_store *s, unsigned keep_free,
                                  struct ssd_buf **out);
/* Same, in a page obtained from ssd_page_alloc; SSD_ERR_FULL when that
 * page has no unused buf slot left. */
enum ssd_status ssd_buf_open_page(struct ssd_store *s, int page,
                                  struct ssd_buf **out);

/* A buf for one tuple of len bytes larger than buf_size: it spans
 * ceil(len / buf_size) consecutive slots of one page and takes a single
 * append.  page < 0 uses the shared open page (finished first, its last
 * slots left empty, when too few are left; keep_free as for
 * ssd_buf_open_keep), else a page from ssd_page_alloc (SSD_ERR_FULL when
 * it has too few slots left).  SSD_ERR_ARG when len exceeds page_size.
 * Reads, lookups and ssd_page_buf treat it as one buf: ssd_page_buf gives
 * its used length at its first slot and 0 at the others. */
enum ssd_status ssd_buf_open_large(struct ssd_store *s, int page,
                                   unsigned keep_free, size_t len,
                                   struct ssd_buf **out);

/* Appends len bytes at the next SSD_TUPLE_ALIGN boundary of the buf, or
 * at the next block boundary (block packing, SSD_PAD_MAX), and stores the
 * tuple's reference in *ref_out; the reference is usable at once.  The
 * bytes skipped before it are zero.  A tuple may straddle 4 KiB blocks
 * but never bufs: SSD_ERR_NOSPACE when it does not fit in what is left
 * (submit and open a new buf), SSD_ERR_ARG when len is 0 or after submit. */
enum ssd_status ssd_buf_append(struct ssd_buf *b, const void *data, size_t len,
                               uint64_t *ref_out);

/* ssd_buf_append of the concatenation of n pieces (one tuple). */
enum ssd_status ssd_buf_appendv(struct ssd_buf *b, const struct iovec *iov,
                                int n, uint64_t *ref_out);

/* Bytes appended so far (including alignment padding). */
size_t ssd_buf_used(const struct ssd_buf *b);

/* Where the next tuple of a buf image (mem, used bytes) lies, given that
 * the previous one ended at off: off rounded up to SSD_TUPLE_ALIGN, or
 * past the zero bytes that block packing put there.  Valid for callers
 * whose tuples never begin with 8 zero bytes. */
size_t ssd_buf_next(const char *mem, size_t used, size_t off);

/* status is SSD_OK or SSD_ERR_IO.  Runs on a library thread (the uring
 * write reaper or a pool thread); keep it short.  b stays valid until it
 * returns, and on failure until ssd_buf_release. */
typedef void (*ssd_write_cb)(void *arg, struct ssd_buf *b,
                             enum ssd_status status);

/* Writes the used part of b (rounded up to 4 KiB, padding zeroed) with one
 * write; a buf whose write failed may be submitted again (a retry).  The
 * caller must not append after this.  Returns SSD_OK once
 * queued (cb will run exactly once), else an error and cb never runs. */
enum ssd_status ssd_buf_submit(struct ssd_buf *b, ssd_write_cb cb, void *arg);

/* Drops a buf that was never submitted or whose write failed.  Its tuples
 * are not marked dead: the caller does that for the ones it gives up. */
void ssd_buf_release(struct ssd_buf *b);

/* A buf the caller owns and that is not in flight (unsubmitted, or its
 * write failed): its bytes (ssd_buf_used() of them; the pointer is valid
 * until ssd_buf_release or a successful resubmission) and the reference
 * of its first byte, to walk its tuples. */
const char *ssd_buf_data(const struct ssd_buf *b);
uint64_t ssd_buf_ref(const struct ssd_buf *b);

/* The errno of the most recent failed buf write (ENOSPC for a full file
 * system, EIO for a device error or a write of 0 bytes); 0 if none failed. */
int ssd_write_errno(const struct ssd_store *s);

/* If ref's buf is still in memory (unwritten, in flight, or failed),
 * returns a pointer to the tuple inside it, pins the buf and stores the pin
 * in *pin; the pointer stays valid until ssd_buf_unpin(*pin).  Returns NULL
 * (and no pin) when the tuple must be read from the device or ref is
 * stale.  len bytes must lie inside the buf. */
const void *ssd_buf_lookup(struct ssd_store *s, uint64_t ref, size_t len,
                           struct ssd_buf **pin);
void ssd_buf_unpin(struct ssd_buf *pin);

/* ---- Async reads ---------------------------------------------------------
 * data points at the first byte of the tuple (or of the buf, for
 * ssd_read_buf) inside a buffer owned by the ring; it is valid only until
 * the callback returns.  status: SSD_OK, SSD_ERR_IO, or SSD_ERR_STALE when
 * the page was reclaimed before or during the read (data is NULL then).
 * A read of a tuple still in an in-memory buf is served from that buf.
 */
typedef void (*ssd_read_cb)(void *arg, enum ssd_status status,
                            const char *data, size_t len);

/* One per thread; NULL with errno set on failure. */
struct ssd_ring *ssd_ring_create(struct ssd_store *s);
/* Waits for this ring's outstanding reads, running their callbacks, then
 * frees it.  NULL is a no-op. */
void ssd_ring_destroy(struct ssd_ring *r);
/* Non-blocking eventfd that becomes readable when callbacks are ready;
 * the caller watches it (libevent) and calls ssd_ring_reap.  Owned by the
 * ring: do not close it. */
int ssd_ring_eventfd(const struct ssd_ring *r);
/* Runs every ready callback; never blocks.  Returns how many ran.  Also
 * submits what ssd_ring_defer_submits held back. */
unsigned ssd_ring_reap(struct ssd_ring *r);
/* From now on ssd_read and ssd_read_buf queue their device reads without
 * submitting them: the first read after a submit calls kick(arg) once,
 * and the owner calls ssd_ring_submit soon after (its event loop, once a
 * pass), so that the reads of one pass go to the kernel in one system
 * call, made with no lock held.  Owner thread. */
void ssd_ring_defer_submits(struct ssd_ring *r, void (*kick)(void *arg),
                            void *arg);
/* Submits the reads queued since the last submit. */
void ssd_ring_submit(struct ssd_ring *r);
/* Reads not yet called back. */
unsigned ssd_ring_pending(const struct ssd_ring *r);
/* Device reads in flight on all rings of s: one relaxed load, for any
 * thread. */
uint64_t ssd_reads_in_flight(struct ssd_store *s);

/* Reads the 4 KiB-aligned extent covering [offset, offset + len) of ref.
 * SSD_OK: cb will run exactly once, from ssd_ring_reap.  Otherwise it
 * never runs (SSD_ERR_ARG for a bad range, SSD_ERR_STALE, SSD_ERR_NOMEM). */
enum ssd_status ssd_read(struct ssd_ring *r, uint64_t ref, size_t len,
                         ssd_read_cb cb, void *arg);
/* Reads the whole buf holding ref (any tuple in it; for a buf spanning
 * several slots, any offset inside it): cb gets the buf's first byte and
 * its used length, which may exceed buf_size. */
enum ssd_status ssd_read_buf(struct ssd_ring *r, uint64_t ref,
                             ssd_read_cb cb, void *arg);

/* ---- Statistics ----------------------------------------------------------
 * One line per counter: name, help.  Gauges and counters are relaxed
 * atomics read without a lock, so a snapshot is not a consistent cut.
 */
#define SSD_STATS_FIELDS(X) \
    X(pages_used,    "pages open or sealed") \
    X(pages_free,    "pages on the free list") \
    X(live_bytes,    "bytes of tuples not yet marked dead (whole slots for a tuple larger than a buf)") \
    X(bufs_written,  "buf writes completed successfully") \
    X(bytes_written, "bytes written by buf writes") \
    X(reads,         "ssd_read/ssd_read_buf calls accepted") \
    X(reads_mem,     "reads served from an in-memory buf") \
    X(read_submits,  "io_uring submissions of reads (one system call each)") \
    X(bytes_read,    "bytes read from the device") \
    X(pad_bytes,     "zero bytes appended so that a tuple does not cross a 4 KiB block") \
    X(inflight,      "device reads and writes in flight") \
    X(reads_inflight, "device reads in flight") \
    X(reclaimed,     "pages reclaimed (version bumped)") \
    X(page_allocs,   "pages taken off the free list") \
    X(io_errors,     "failed or short device reads and writes")

struct ssd_stats {
#define SSD_STATS_DECL(name, help) uint64_t name;
    SSD_STATS_FIELDS(SSD_STATS_DECL)
#undef SSD_STATS_DECL
};

void ssd_get_stats(const struct ssd_store *s, struct ssd_stats *out);
/* The file (index in ssd_config.paths) that holds page (the last file for
 * an id past the last page). */
unsigned ssd_page_file(const struct ssd_store *s, unsigned page);
/* One page's use, for `stats extstore`: its version (0 while free) and
 * the live bytes it holds. */
void ssd_page_usage(struct ssd_store *s, unsigned page, uint32_t *version, uint64_t *live);

#endif

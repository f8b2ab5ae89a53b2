/*
 * internal.h - private structures of the SSD library (the ssd .c files only).
 *
 * Lock order: store->lock -> (nothing).  store->wlock (write SQ), the
 * pool's bg lock (job queue), store->idle_lock and ring->done_lock are
 * leaves: no other lock is taken while holding one, and no callback runs
 * under any lock.  pool_start_lock (the pool's start and stop) is taken
 * first and held across the pool threads' creation and join.
 */
#ifndef SSD_INTERNAL_H
#define SSD_INTERNAL_H

#include <liburing.h>
#include <pthread.h>
#include <stdatomic.h>

#include "base/bg.h"
#include "ssd/ssd.h"

#define SSD_MAGIC "TACSSD\x00\x01"
#define SSD_FORMAT_VERSION 4u        /* 2: two header copies, generation, CRC32C;
                                        3: key_check; 4: the file's place in a
                                        set of files (file_index .. first_page) */
#define SSD_HDR_COPIES 2u            /* copy i in block i */
#define SSD_DATA_OFF ((uint64_t)SSD_HDR_COPIES * SSD_BLOCK)  /* pages follow */

/*
 * On-device header (little-endian host layout), written whole in each of
 * the first SSD_HDR_COPIES blocks: copy 0, fdatasync, copy 1, fdatasync.
 * A crash tears at most the copy being written, and the other one still
 * passes its checksum.  Of two valid copies the higher generation wins.
 * Version 1 had one copy and no checksum; its magic and version sit at the
 * same offsets, so it is recognized as another format version.
 */
struct ssd_disk_header {
    char magic[8];
    uint32_t version;
    uint32_t header_size;    /* sizeof(struct ssd_disk_header) */
    uint64_t generation;     /* one more at each header write */
    uint64_t size;
    uint64_t page_size;
    uint64_t buf_size;
    uint64_t data_off;
    uint32_t npages;
    uint32_t dirty;          /* 1 while open; 0 after a clean ssd_close */
    uint32_t file_index;     /* this file's place in the set, from 0 */
    uint32_t nfiles;         /* files in the set */
    uint64_t set_id;         /* random, the same in every file of a set */
    uint32_t first_page;     /* page id of this file's first page */
    uint32_t pad;            /* 0 */
    uint8_t key_check[16];   /* ssd_config.key_check */
    uint32_t checksum;       /* CRC32C of every byte before it */
    uint32_t reserved;       /* 0 */
};

enum page_state { PAGE_FREE = 0, PAGE_OPEN, PAGE_SEALED };

/* DRAM metadata of one page.  version is read without the lock
 * (ssd_ref_current, read completion); everything else: store->lock. */
struct ssd_page {
    _Atomic uint32_t version;   /* 1..65535 */
    enum page_state state;
    unsigned next_slot;         /* next buf slot to hand out */
    unsigned bufs_out;          /* handed out, not yet written or released */
    uint64_t live;              /* live bytes */
    uint64_t pad;               /* block packing's padding in its bufs; for
                                   an adopted page, a bound (ssd_adopt_page) */
    uint64_t seq;               /* order in which pages were opened */
    int next_free;              /* free list link, -1 ends */
    bool pinned;                /* adopted, not yet released by a restart */
    _Atomic uint32_t mem_bufs;  /* its bufs on store->bufs (changed under
                                   store->lock): 0 lets a read skip that
                                   lock (buf.c, page_has_mem_bufs) */
};

enum buf_state { BUF_FILLING = 0, BUF_INFLIGHT, BUF_FAILED };

struct ssd_buf {
    struct ssd_store *s;
    struct ssd_buf *next, *prev;   /* store->bufs list: store->lock */
    char *mem;                     /* cap bytes, 4 KiB aligned */
    size_t cap;                    /* nslots * buf_size */
    size_t used;
    size_t pad;                    /* block packing's padding so far */
    size_t wlen, wdone;            /* write length (rounded) and progress */
    uint64_t fpos;                 /* file offset of byte 0 */
    int fd;                        /* the file holding its page */
    unsigned page, slot;           /* first slot of the buf */
    unsigned nslots;               /* consecutive slots it spans (>= 1) */
    uint16_t version;
    enum buf_state state;
    atomic_uint refs;              /* 1 while registered + pins */
    ssd_write_cb cb;
    void *arg;
    struct ssd_buf *wpend_next;    /* store->wpend list: wlock */
};

/* One read request.  Owned by its ring from ssd_read to the callback. */
struct ssd_req {
    struct ssd_req *next;
    struct ssd_ring *ring;
    uint64_t ref;
    uint64_t fpos;           /* file offset of the extent */
    int fd;                  /* the file holding it */
    size_t xlen, done;       /* extent length, bytes read so far */
    size_t skip, len;        /* tuple start inside the extent, length */
    char *mem;               /* xlen bytes, 4 KiB aligned */
    bool small;              /* mem holds REQ_SMALL bytes: kept for reuse */
    ssd_read_cb cb;
    void *arg;
    enum ssd_status status;
    uint64_t due_ns;         /* debug hook: when a delayed completion is due */
};

struct ssd_ring {
    struct ssd_store *s;
    int efd;
    bool uring;
    struct io_uring ur;
    unsigned sq_inflight;             /* owner thread */
    unsigned pending;                 /* owner thread: not yet called back */
    struct ssd_req *backlog, *backlog_tail;   /* owner: not yet in the SQ */
    void (*kick)(void *arg);          /* owner: ssd_ring_defer_submits */
    void *kick_arg;
    bool kicked;                      /* owner: kick called, not yet submitted */
    struct ssd_req *spare;            /* owner: finished small requests */
    unsigned nspare;
    pthread_mutex_t done_lock;
    struct ssd_req *done, *done_tail; /* done_lock: completed elsewhere */
};

struct pool_job {
    struct pool_job *next;
    struct ssd_req *req;     /* a read, or */
    struct ssd_buf *buf;     /* a write */
};

/* One file of the store: pages [first_page, first_page + npages). */
struct ssd_file {
    int fd;
    char *path;
    uint64_t size;
    unsigned first_page, npages;
    bool created;                 /* this open created it (removed on failure) */
    enum ssd_prev_state prev_state;
    uint64_t prev_generation, set_id;   /* of the header found */
    int free_head;                /* its free pages; store lock */
};

struct ssd_store {
    struct ssd_file files[SSD_MAX_FILES];
    unsigned nfiles;
    unsigned next_file;           /* the file the next page comes from; lock */
    uint64_t set_id;              /* written in every file's header */
    uint64_t size;                /* of all files */
    size_t page_size, buf_size;
    unsigned npages, bufs_per_page;
    unsigned queue_depth, nthreads;
    enum ssd_engine engine;
    enum ssd_prev_state prev_state;
    uint8_t key_check[16];      /* ssd_config.key_check */
    uint64_t generation;        /* of the last header written (open, close) */
    uint64_t prev_generation;   /* of the header found at open (0: none) */

    pthread_mutex_t lock;
    uint32_t *table;              /* the caller's durable page table
                                     (ssd_set_table), or NULL; lock */
    struct ssd_page *pages;       /* npages */
    uint32_t *buf_used;           /* npages * bufs_per_page; lock */
    uint32_t *buf_first;          /* per slot: first slot of its buf; lock */
    int cur_page;                 /* shared open page, -1 none; lock */
    uint64_t page_seq;            /* last page seq handed out; lock for
                                     writes, atomic (ssd_page_clock) */
    struct ssd_buf *bufs;         /* in-memory bufs; lock */

    /* uring write path */
    bool wuring;
    struct io_uring wur;
    pthread_mutex_t wlock;        /* SQ of wur, and: */
    struct ssd_buf *wpend, *wpend_tail;   /* bufs the full SQ could not take */
    struct bg wreaper;            /* the completion thread */

    /* thread pool */
    pthread_mutex_t pool_start_lock;
    bool pool_started;            /* pool_start_lock */
    struct bg pool;               /* its lock guards the job queue: */
    struct pool_job *jobs, *jobs_tail;

    /* ssd_close waits on idle_cond for st_inflight to reach 0; the
     * request that takes it to 0 does so under idle_lock and signals. */
    pthread_mutex_t idle_lock;
    pthread_cond_t idle_cond;

    /* Debug builds: TAC_DEBUG_SSD_DELAY_MS holds every device read's
     * completion back this long (io.c), to test that no worker waits. */
    uint64_t debug_delay_ns;
    struct bg delay;              /* its lock guards: */
    struct ssd_req *delayed, *delayed_tail;

    _Atomic int write_errno;      /* errno of the last failed buf write */

#define SSD_STATS_ATOMIC(name, help) _Atomic uint64_t st_##name;
    SSD_STATS_FIELDS(SSD_STATS_ATOMIC)
#undef SSD_STATS_ATOMIC
};

#define ST_ADD(s, name, v) \
    atomic_fetch_add_explicit(&(s)->st_##name, (uint64_t)(v), memory_order_relaxed)
#define ST_SUB(s, name, v) \
    atomic_fetch_sub_explicit(&(s)->st_##name, (uint64_t)(v), memory_order_relaxed)

/* store.c */
/* The offset of page in its file, and that file's descriptor. */
uint64_t ssd_page_fpos(const struct ssd_store *s, unsigned page);
int ssd_page_fd(const struct ssd_store *s, unsigned page);
/* A buf of page finished (written or released): lock held. */
void do_page_buf_done(struct ssd_store *s, unsigned page);
/* Lock held.  Takes the next nslots consecutive buf slots of page (of the
 * shared open page when page < 0, opening a new one only while more than
 * keep_free pages are free; a shared page with too few slots left is
 * finished first).  Returns the page id, or -1 with *st set. */
int do_page_take_slot(struct ssd_store *s, int page, unsigned keep_free,
                      unsigned nslots, unsigned *slot, enum ssd_status *st);

/* Lock held: b's write succeeded; the durable table says so. */
void do_table_buf_written(struct ssd_store *s, const struct ssd_buf *b);

/* buf.c */
/* err: 0 on success, else the errno of the failed write (EIO for a
 * write that came back short). */
void ssd_buf_write_done(struct ssd_buf *b, int err);
void ssd_buf_unref(struct ssd_buf *b);
/* Copies [ref, ref+len) into dst when ref's buf is in memory; for
 * whole-buf reads copies at most cap bytes of the buf (a prefix ending at a
 * tuple boundary when it has grown since it was measured) and stores the
 * length copied. */
bool ssd_buf_copy_if_mem(struct ssd_store *s, uint64_t ref, size_t len,
                         bool whole, size_t cap, char *dst, size_t *used_out);
/* Lock held.  The first byte's offset in its page of the buf covering
 * offset `off` of page, and the bytes that buf holds now. */
size_t do_buf_extent(struct ssd_store *s, unsigned page, size_t off,
                     size_t *used);

/* A device read or buf write is over: st_inflight - 1.  The last touch of
 * s by the finishing request (ssd_close may free s right after). */
void ssd_inflight_done(struct ssd_store *s);

/* io.c */
int ssd_wuring_start(struct ssd_store *s);
void ssd_wuring_stop(struct ssd_store *s);
int ssd_wuring_submit(struct ssd_store *s, struct ssd_buf *b);
int ssd_pool_start(struct ssd_store *s);
void ssd_pool_stop(struct ssd_store *s);
int ssd_pool_push(struct ssd_store *s, struct ssd_req *req, struct ssd_buf *b);
/* Debug hook: starts the delay thread if TAC_DEBUG_SSD_DELAY_MS asks for
 * one (debug builds only); stops it. */
void ssd_delay_start(struct ssd_store *s);
void ssd_delay_stop(struct ssd_store *s);

#endif

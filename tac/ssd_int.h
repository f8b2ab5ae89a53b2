/*
 * tac/ssd_int.h - what the four files of the SSD tier share: the tier's
 * state (its writers, failed bufs, defrag thread and read rings), the
 * constants of its design, and the functions one file calls in another.
 * The files, each calling only those listed after it: ssd_tier.c (open,
 * start, stop, close, stats), ssd_defrag.c (defrag, reclaim, write
 * retries), ssd_read.c (reads for the workers and the fetchers, fetching
 * tuples up) and ssd_write.c (writing tuples into bufs, the tier's state,
 * the keys dropped for room).  The design: the top of ssd_write.c.  Not
 * for use outside them.
 */
#ifndef TAC_SSD_INT_H
#define TAC_SSD_INT_H

#include <pthread.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/uio.h>

#include "base/bg.h"
#include "engine/items.h"
#include "ssd/ssd.h"
#include "tac/internal.h"
#include "tac/ssd_tier.h"
#include "tac/tuple.h"

#define READ_MAX_TRIES 4
#define DEFRAG_IDLE_MS 20
/* Free pages this far above defrag's watermark or more: it dozes between
 * its 250 ms ticks (IDLE_BUF_MS / 4) instead of looking every
 * DEFRAG_IDLE_MS, and a writer opening a buf nearer kicks it. */
#define DEFRAG_NEAR_PAGES 2
#define IDLE_BUF_MS 1000
#define WRITE_RETRY_MIN_MS 10
#define WRITE_RETRY_MAX_MS 2000
#define FAILED_BUFS_MIN 16
#define DEFRAG_RESERVE_PAGES 2
#define GHOST_MIN (1u << 16)
#define GHOST_MAX (1u << 22)
#define GHOST_BYTES_PER_SLOT 16384     /* one slot per 16 KiB of SSD */

struct writer {
    pthread_mutex_t lock;
    struct ssd_buf *buf;        /* lock: the buf being filled, or NULL */
    int64_t last_put_ms;        /* lock: when a tuple last went into buf */
    bool own_pages;             /* defrag, low-TTL: fills pages of its own */
    bool keeps_reserve;         /* low-TTL: its pages leave the writers'
                                   reserve alone (DEFRAG_RESERVE_PAGES) */
    int page;                   /* lock: that page, or -1 */
};

struct ssd_tier_state {
    struct ssd_info info;
    unsigned free_wm;           /* free pages defrag keeps (atomic:
                                   compact_under_apply) */
    unsigned keep_free;         /* atomic: free pages the writers leave
                                   (DEFRAG_RESERVE_PAGES or 0; set by the
                                   defrag thread, keep_free_update) */
    bool unpinned;              /* defrag thread: no restart pin is left */
    bool index_drop;            /* atomic: a move down found no meta tuple
                                   while DRAM is all index
                                   (ssdt_index_full_ask) */
    bool index_drop_logged;     /* defrag thread */
    unsigned drop_ahead;        /* atomic: free pages from which a full SSD
                                   drops its oldest page without waiting for
                                   the writers to reach their reserve (set
                                   at open, 0 from compact_under_apply) */
    struct writer *writers;     /* evictors, then shared, then low-TTL,
                                   then defrag */
    int nwriters;
    struct bg defrag;           /* the defrag thread */
    bool defrag_running;
    pthread_mutex_t lock;       /* the fields below */
    struct ssd_buf **failed;    /* bufs whose write failed, oldest first */
    size_t nfailed, failed_cap;
    size_t failed_max;          /* the bound on nfailed (set at open) */
    bool failing;               /* the last write failed, not yet one
                                   succeeded: logged once each way */
    unsigned retry_ms;          /* defrag thread: current back-off */
    bool write_ok;              /* a retry succeeded since the last look */
    unsigned retries_inflight;  /* failed bufs submitted again, not back */
    struct ssd_ring **rings;    /* synchronous-read rings, closed at exit */
    size_t nrings, rings_cap;
};

extern struct ssd_tier_state ssdt;
extern unsigned long long ssdt_items;   /* atomic: SSD meta tuples */
/* The durability files' view of the tier (set at start, tier.c). */
extern struct tac_ssd_observer ssdt_observer;
extern __thread int ssdt_writer_slot;   /* evictor id, or -1 */
extern __thread struct ssd_ring *ssdt_sync_ring;
/* The keys dropped for room (ssd_write.c, above tac_ssd_read_missed). */
extern uint32_t *ssdt_ghosts;
extern uint32_t ssdt_ghost_mask;

void ssdt_ghost_add(uint32_t hv);
bool ssdt_page_nearly_full(const struct ssd_page_info *pi);
size_t ssdt_tuple_len(const item *meta);
void ssdt_defrag_wake(void);
/* A meta tuple for an SSD item could not be had: when DRAM is all index
 * (tac_dram_only_index), asks defrag to drop the oldest page. */
void ssdt_index_full_ask(void);
void ssdt_ghost_init(uint64_t ssd_bytes);
int64_t ssdt_now_ms(void);
unsigned ssdt_free_pages_now(void);
/* Free pages below which defrag re-packs: it starts before the writers
 * reach their reserve. */
unsigned ssdt_defrag_wm(void);
/* A writer opened a buf: kicks a dozing defrag thread once free pages come
 * within DEFRAG_NEAR_PAGES of its watermark. */
void ssdt_defrag_nudge(void);
struct writer *ssdt_defrag_writer(void);
void ssdt_failed_push(struct ssd_buf *b);
void ssdt_write_done(void *arg, struct ssd_buf *b, enum ssd_status st);
bool ssdt_writer_put(struct writer *w, const struct iovec *iov, int n,
                       uint64_t *ref);
void ssdt_writer_submit_locked(struct writer *w);
unsigned ssdt_writers_keep(void);
enum ssd_status ssdt_read_sync(uint64_t ref, size_t len, bool whole,
                                 struct tac_iobuf *io, size_t *got);
size_t ssdt_tuple_at(const char *mem, size_t used, size_t off);
size_t ssdt_tuple_next(const char *mem, size_t used, size_t off, size_t len);
void ssdt_defrag_main(struct bg *g, unsigned idx, void *arg);
#endif

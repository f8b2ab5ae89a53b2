/*
 * io.c - the I/O engines: per-thread read rings, the store-wide uring
 * write path, and the pread/pwrite thread pool.
 *
 * Owns: every io_uring, eventfd and pool thread of the library.
 *
 * Design.  A ring (one per worker thread) has an eventfd.  With io_uring
 * the eventfd is registered on the ring's own io_uring, so the kernel
 * signals it per completion; with the pool, a pool thread appends the
 * finished request to the ring's done list and writes the eventfd.  Reads
 * served from an in-memory buf go on the done list too, so every callback
 * runs from ssd_ring_reap on the owning thread.
 * io_uring reads: at most queue_depth SQEs in flight per ring; beyond that,
 * or when the SQ stays full after a submit, requests wait on a backlog that
 * each reap flushes.  A short read is resubmitted for the rest; -EAGAIN and
 * -EINTR are resubmitted; EOF and other errors complete with SSD_ERR_IO.
 * Buf writes with io_uring go through one store-wide ring; submitters
 * serialize on wlock and one reaper thread (a bg.h group) waits for
 * completions, resubmits short or -EAGAIN writes, and runs the write
 * callbacks.  A submitter never waits for room in the SQ: a buf that finds
 * it full joins a pending list that the reaper drains as completions come.
 * Pool: nthreads threads (a bg.h group) take jobs from one FIFO under the
 * group's lock; each job is one pread or pwrite loop.
 *
 * Threads: see ssd.h.  Ring functions on the owning thread only.
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include "config.h"             /* TAC_DEBUG_HOOKS */

#include <errno.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include "ssd/internal.h"
#include "base/util.h"

#define REAP_BATCH 32u
#define WRITE_STOP_TAG 1u        /* user_data of the reaper's stop NOP */

static void read_finished(struct ssd_store *s, struct ssd_req *q);

static void efd_signal(int efd)
{
    uint64_t one = 1;
    while (write(efd, &one, sizeof one) < 0 && errno == EINTR)
        ;
}

/* ---- uring write path ---------------------------------------------------- */

/* wlock held.  Queues the rest of b's write; submits. */
static int do_wuring_queue(struct ssd_store *s, struct ssd_buf *b)
{
    struct io_uring_sqe *sqe = io_uring_get_sqe(&s->wur);
    if (sqe == NULL) {                       /* SQ full: flush, retry */
        io_uring_submit(&s->wur);
        sqe = io_uring_get_sqe(&s->wur);
        if (sqe == NULL)
            return -EBUSY;
    }
    io_uring_prep_write(sqe, b->fd, b->mem + b->wdone,
                        (unsigned)(b->wlen - b->wdone), b->fpos + b->wdone);
    io_uring_sqe_set_data(sqe, b);
    int rc = io_uring_submit(&s->wur);
    /* -EAGAIN/-EBUSY: the SQE stays in the SQ and goes with the next
     * submit; anything else is a real failure. */
    return rc < 0 && rc != -EAGAIN && rc != -EBUSY ? rc : 0;
}

/* wlock held.  Appends b to the bufs waiting for room in the SQ. */
static void wpend_push(struct ssd_store *s, struct ssd_buf *b)
{
    b->wpend_next = NULL;
    if (s->wpend_tail != NULL)
        s->wpend_tail->wpend_next = b;
    else
        s->wpend = b;
    s->wpend_tail = b;
}

int ssd_wuring_submit(struct ssd_store *s, struct ssd_buf *b)
{
    /* A full SQ never makes the caller wait: the buf joins the pending
     * list, which the reaper moves into the SQ as completions free it
     * (in order: a buf never overtakes one that waits). */
    pthread_mutex_lock(&s->wlock);
    int rc = 0;
    if (s->wpend != NULL || (rc = do_wuring_queue(s, b)) == -EBUSY) {
        wpend_push(s, b);
        rc = 0;
    }
    pthread_mutex_unlock(&s->wlock);
    return rc;
}

/* Reaper: moves pending bufs into the SQ while it has room.  A buf whose
 * queueing fails for good is completed with the error, off the lock. */
static void wpend_flush(struct ssd_store *s)
{
    for (;;) {
        pthread_mutex_lock(&s->wlock);
        struct ssd_buf *b = s->wpend;
        int rc = b != NULL ? do_wuring_queue(s, b) : -EBUSY;
        if (rc != -EBUSY) {
            s->wpend = b->wpend_next;
            if (s->wpend == NULL)
                s->wpend_tail = NULL;
        }
        pthread_mutex_unlock(&s->wlock);
        if (rc == -EBUSY)
            return;
        if (rc < 0)
            ssd_buf_write_done(b, -rc);
    }
}

/* The reaper's wait for a completion is bounded, in case a pending list or
 * an SQE left unsubmitted (-EAGAIN) has no write in flight to complete:
 * REAPER_POLL_NS while either exists, else REAPER_IDLE_NS (a pending buf
 * joins the list only when the SQ is full, so writes are in flight and
 * their completions wake the reaper).  A stop wakes it with a no-op. */
#define REAPER_POLL_NS 100000000ll
#define REAPER_IDLE_NS 1000000000ll

static bool reaper_may_stall(struct ssd_store *s)
{
    pthread_mutex_lock(&s->wlock);
    bool may = s->wpend != NULL || io_uring_sq_ready(&s->wur) > 0;
    pthread_mutex_unlock(&s->wlock);
    return may;
}

static void wuring_reaper(struct bg *g, unsigned idx, void *arg)
{
    (void)idx;
    struct ssd_store *s = arg;
    while (bg_running(g)) {
        struct io_uring_cqe *cqe;
        long long wait = reaper_may_stall(s) ? REAPER_POLL_NS : REAPER_IDLE_NS;
        struct __kernel_timespec ts = { wait / 1000000000ll, wait % 1000000000ll };
        int rc = io_uring_wait_cqe_timeout(&s->wur, &cqe, &ts);
        if (rc == -ETIME || rc == -EINTR || rc == -EAGAIN) {
            wpend_flush(s);
            continue;
        }
        if (rc < 0)
            break;                         /* ring unusable: nothing to do */
        void *data = io_uring_cqe_get_data(cqe);
        int res = cqe->res;
        io_uring_cqe_seen(&s->wur, cqe);
        if ((uintptr_t)data == WRITE_STOP_TAG)
            continue;                      /* bg_running() says stop */
        struct ssd_buf *b = data;
        /* The buf's write fields were set before its SQE was queued under
         * wlock; taking wlock here makes that ordering visible to thread
         * checkers too (the kernel already orders SQE -> CQE). */
        pthread_mutex_lock(&s->wlock);
        bool again = res == -EAGAIN || res == -EINTR ||
                     (res > 0 && (b->wdone += (size_t)res) < b->wlen);
        bool ok = res > 0 && b->wdone == b->wlen;
        pthread_mutex_unlock(&s->wlock);
        int err = res < 0 ? -res : EIO;    /* EIO: a write of 0 bytes */
        if (again) {
            if (ssd_wuring_submit(s, b) == 0) {
                wpend_flush(s);
                continue;                  /* rest of the write resubmitted */
            }
            ok = false;
        }
        ssd_buf_write_done(b, ok ? 0 : err);
        wpend_flush(s);
    }
}

/* bg_stop's unblock hook: a NOP completion wakes the reaper at once (if
 * the SQ has no room, its poll timeout does). */
static void wuring_unblock(void *arg)
{
    struct ssd_store *s = arg;
    pthread_mutex_lock(&s->wlock);
    struct io_uring_sqe *sqe = io_uring_get_sqe(&s->wur);
    if (sqe != NULL) {
        io_uring_prep_nop(sqe);
        io_uring_sqe_set_data(sqe, (void *)(uintptr_t)WRITE_STOP_TAG);
        io_uring_submit(&s->wur);
    }
    pthread_mutex_unlock(&s->wlock);
}

int ssd_wuring_start(struct ssd_store *s)
{
    unsigned qd = s->queue_depth;
    if (io_uring_queue_init(qd, &s->wur, 0) < 0)
        return -1;
    bg_init(&s->wreaper, "tac-ssd-reap", wuring_unblock);
    if (!bg_start(&s->wreaper, 1, wuring_reaper, s)) {
        io_uring_queue_exit(&s->wur);
        return -1;
    }
    s->wuring = true;
    return 0;
}

void ssd_wuring_stop(struct ssd_store *s)
{
    bg_stop(&s->wreaper);
    io_uring_queue_exit(&s->wur);
    s->wuring = false;
}

/* ---- thread pool --------------------------------------------------------- */

static void ring_done_push(struct ssd_ring *r, struct ssd_req *q)
{
    q->next = NULL;
    pthread_mutex_lock(&r->done_lock);
    if (r->done_tail != NULL)
        r->done_tail->next = q;
    else
        r->done = q;
    r->done_tail = q;
    /* Signal under the lock: once the owner has taken done_lock in
     * ssd_ring_destroy, no pusher touches r again. */
    efd_signal(r->efd);
    pthread_mutex_unlock(&r->done_lock);
}

/* pread/pwrite until done; short transfers continue, EINTR/EAGAIN retry. */
static int rw_full(int fd, char *mem, size_t len, uint64_t pos, bool wr,
                   size_t *done)
{
    while (*done < len) {
        ssize_t n = wr ? pwrite(fd, mem + *done, len - *done, (off_t)(pos + *done))
                       : pread(fd, mem + *done, len - *done, (off_t)(pos + *done));
        if (n < 0 && (errno == EINTR || errno == EAGAIN))
            continue;
        if (n <= 0) {
            if (n == 0)
                errno = EIO;           /* no progress: not a full disk */
            return -1;
        }
        *done += (size_t)n;
    }
    return 0;
}

static void pool_main(struct bg *g, unsigned idx, void *arg)
{
    (void)idx;
    struct ssd_store *s = arg;
    for (;;) {
        bg_lock(g);
        while (s->jobs == NULL && bg_running(g))
            bg_wait_locked(g, BG_FOREVER);
        struct pool_job *j = s->jobs;
        if (j == NULL) {                   /* stopping and drained */
            bg_unlock(g);
            return;
        }
        s->jobs = j->next;
        if (s->jobs == NULL)
            s->jobs_tail = NULL;
        bg_unlock(g);

        if (j->buf != NULL) {
            struct ssd_buf *b = j->buf;
            int rc = rw_full(b->fd, b->mem, b->wlen, b->fpos, true, &b->wdone);
            int err = rc == 0 ? 0 : (errno != 0 ? errno : EIO);
            free(j);
            ssd_buf_write_done(b, err);
        } else {
            struct ssd_req *q = j->req;
            free(j);
            if (rw_full(q->fd, q->mem, q->xlen, q->fpos, false, &q->done) != 0)
                q->status = SSD_ERR_IO;
            read_finished(s, q);
        }
    }
}

int ssd_pool_push(struct ssd_store *s, struct ssd_req *req, struct ssd_buf *b)
{
    struct pool_job *j = calloc(1, sizeof *j);
    if (j == NULL)
        return -ENOMEM;
    j->req = req;
    j->buf = b;
    bg_lock(&s->pool);
    if (s->jobs_tail != NULL)
        s->jobs_tail->next = j;
    else
        s->jobs = j;
    s->jobs_tail = j;
    bg_wake_locked(&s->pool);
    bg_unlock(&s->pool);
    return 0;
}

int ssd_pool_start(struct ssd_store *s)
{
    pthread_mutex_lock(&s->pool_start_lock);
    int rc = 0;
    if (!s->pool_started) {
        if (bg_start(&s->pool, s->nthreads, pool_main, s))
            s->pool_started = true;
        else
            rc = -1;
    }
    pthread_mutex_unlock(&s->pool_start_lock);
    return rc;
}

void ssd_pool_stop(struct ssd_store *s)
{
    pthread_mutex_lock(&s->pool_start_lock);
    if (s->pool_started)
        bg_stop(&s->pool);             /* the members drain the queue first */
    s->pool_started = false;
    pthread_mutex_unlock(&s->pool_start_lock);
}

/* ---- debug hook: delayed completions ------------------------------------ */

/* A device read is done; debug builds may hold it back (ssd_delay_start)
 * before it reaches its ring's done list. */
static void read_finished(struct ssd_store *s, struct ssd_req *q)
{
    if (s->debug_delay_ns == 0) {
        ring_done_push(q->ring, q);
        return;
    }
    q->due_ns = util_now_ns() + s->debug_delay_ns;
    q->next = NULL;
    bg_lock(&s->delay);
    if (s->delayed_tail != NULL)
        s->delayed_tail->next = q;
    else
        s->delayed = q;
    s->delayed_tail = q;
    bg_wake_locked(&s->delay);
    bg_unlock(&s->delay);
}

#ifdef TAC_DEBUG_HOOKS
/* Hands each delayed read on when it is due (all share one delay, so the
 * FIFO is in due order); on stop, hands the rest on at once. */
static void delay_main(struct bg *g, unsigned idx, void *arg)
{
    (void)idx;
    struct ssd_store *s = arg;
    bg_lock(g);
    for (;;) {
        struct ssd_req *q = s->delayed;
        if (q == NULL) {
            if (!bg_running(g))
                break;
            bg_wait_locked(g, BG_FOREVER);
            continue;
        }
        uint64_t now = util_now_ns();
        if (q->due_ns > now && bg_running(g)) {
            bg_wait_locked(g, q->due_ns - now);
            continue;
        }
        s->delayed = q->next;
        if (s->delayed == NULL)
            s->delayed_tail = NULL;
        bg_unlock(g);
        ring_done_push(q->ring, q);
        bg_lock(g);
    }
    bg_unlock(g);
}
#endif

void ssd_delay_start(struct ssd_store *s)
{
#ifdef TAC_DEBUG_HOOKS
    const char *v = getenv("TAC_DEBUG_SSD_DELAY_MS");
    long ms = v != NULL ? strtol(v, NULL, 10) : 0;
    if (ms <= 0)
        return;
    bg_init(&s->delay, "tac-ssd-delay", NULL);
    if (!bg_start(&s->delay, 1, delay_main, s))
        return;
    s->debug_delay_ns = (uint64_t)ms * 1000000u;
    fprintf(stderr, "debug hook: every SSD read completion is held back %ld ms\n", ms);
#else
    (void)s;
#endif
}

void ssd_delay_stop(struct ssd_store *s)
{
    if (s->debug_delay_ns != 0)
        bg_stop(&s->delay);
}

/* ---- rings --------------------------------------------------------------- */

/*
 * A read ring runs its completions cooperatively (IORING_SETUP_COOP_TASKRUN,
 * Linux 5.19): a completion does not interrupt its thread with an IPI while
 * it runs; it is posted at that thread's next system call, or wakes it
 * when it sleeps (in epoll_wait, or in poll on the ring's eventfd), which
 * a worker that is serving requests makes many times a millisecond.  An
 * older kernel refuses the flag: the ring is made without it.
 */
static int ring_init_coop(struct io_uring *ur, unsigned depth)
{
#ifdef IORING_SETUP_COOP_TASKRUN
    struct io_uring_params p;
    memset(&p, 0, sizeof(p));
    p.flags = IORING_SETUP_COOP_TASKRUN;
    if (io_uring_queue_init_params(depth, ur, &p) == 0)
        return 0;
#endif
    return io_uring_queue_init(depth, ur, 0);
}

struct ssd_ring *ssd_ring_create(struct ssd_store *s)
{
    struct ssd_ring *r = calloc(1, sizeof *r);
    if (r == NULL)
        return NULL;
    r->s = s;
    pthread_mutex_init(&r->done_lock, NULL);
    r->efd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
    if (r->efd < 0)
        goto fail;
    if (s->engine == SSD_IO_URING && ring_init_coop(&r->ur, s->queue_depth) == 0) {
        if (io_uring_register_eventfd(&r->ur, r->efd) == 0) {
            r->uring = true;
            return r;
        }
        io_uring_queue_exit(&r->ur);
    }
    /* This ring falls back to the pool (started on first need). */
    if (ssd_pool_start(s) != 0)
        goto fail;
    return r;
fail: {
        int e = errno;
        if (r->efd >= 0)
            close(r->efd);
        pthread_mutex_destroy(&r->done_lock);
        free(r);
        errno = e;
        return NULL;
    }
}

int ssd_ring_eventfd(const struct ssd_ring *r)
{
    return r->efd;
}

unsigned ssd_ring_pending(const struct ssd_ring *r)
{
    return r->pending;
}

uint64_t ssd_reads_in_flight(struct ssd_store *s)
{
    return atomic_load_explicit(&s->st_reads_inflight, memory_order_relaxed);
}

/* Owner thread.  Queues q's remaining extent in the SQ, or on the backlog
 * when the ring is at depth or the SQ stays full.  Does not submit. */
static void ring_queue(struct ssd_ring *r, struct ssd_req *q)
{
    struct io_uring_sqe *sqe = NULL;
    if (r->backlog == NULL && r->sq_inflight < r->s->queue_depth) {
        sqe = io_uring_get_sqe(&r->ur);
        if (sqe == NULL) {
            ST_ADD(r->s, read_submits, 1);
            io_uring_submit(&r->ur);
            sqe = io_uring_get_sqe(&r->ur);
        }
    }
    if (sqe == NULL) {
        q->next = NULL;
        if (r->backlog_tail != NULL)
            r->backlog_tail->next = q;
        else
            r->backlog = q;
        r->backlog_tail = q;
        return;
    }
    io_uring_prep_read(sqe, q->fd, q->mem + q->done,
                       (unsigned)(q->xlen - q->done), q->fpos + q->done);
    io_uring_sqe_set_data(sqe, q);
    r->sq_inflight++;
}

static void ring_flush_backlog(struct ssd_ring *r)
{
    while (r->backlog != NULL && r->sq_inflight < r->s->queue_depth) {
        struct io_uring_sqe *sqe = io_uring_get_sqe(&r->ur);
        if (sqe == NULL) {
            ST_ADD(r->s, read_submits, 1);
            io_uring_submit(&r->ur);
            if ((sqe = io_uring_get_sqe(&r->ur)) == NULL)
                break;
        }
        struct ssd_req *q = r->backlog;
        r->backlog = q->next;
        if (r->backlog == NULL)
            r->backlog_tail = NULL;
        io_uring_prep_read(sqe, q->fd, q->mem + q->done,
                           (unsigned)(q->xlen - q->done), q->fpos + q->done);
        io_uring_sqe_set_data(sqe, q);
        r->sq_inflight++;
    }
    /* -EAGAIN/-EBUSY leave the SQEs queued: wake the owner so that its
     * next reap submits them again, since no completion will. */
    if (io_uring_sq_ready(&r->ur) != 0) {
        ST_ADD(r->s, read_submits, 1);
        if (io_uring_submit(&r->ur) < 0)
            efd_signal(r->efd);
    }
}

/* A read of up to two blocks, a tuple of up to 4 KiB that may cross a
 * block boundary, is the common one: each ring keeps up to REQ_SPARE such
 * requests with their buffers, so that a hit costs no allocation.  Owner
 * thread only (every request is freed where its callback runs). */
#define REQ_SMALL (2 * SSD_BLOCK)
#define REQ_SPARE 32

static struct ssd_req *req_get(struct ssd_ring *r, size_t xlen)
{
    struct ssd_req *q = r->spare;
    if (xlen <= REQ_SMALL && q != NULL) {
        r->spare = q->next;
        r->nspare--;
        char *mem = q->mem;
        memset(q, 0, sizeof(*q));
        q->mem = mem;
        q->small = true;
        return q;
    }
    q = calloc(1, sizeof(*q));
    void *mem = NULL;
    bool small = xlen <= REQ_SMALL;
    if (q == NULL || posix_memalign(&mem, SSD_BLOCK, small ? REQ_SMALL : xlen) != 0) {
        free(q);
        return NULL;
    }
    q->mem = mem;
    q->small = small;
    return q;
}

static void req_put(struct ssd_ring *r, struct ssd_req *q)
{
    if (q->small && r->nspare < REQ_SPARE) {
        q->next = r->spare;
        r->spare = q;
        r->nspare++;
        return;
    }
    free(q->mem);
    free(q);
}

static void req_complete(struct ssd_ring *r, struct ssd_req *q)
{
    struct ssd_store *s = r->s;
    const char *data = NULL;
    size_t len = 0;
    if (q->status == SSD_OK && !ssd_ref_current(s, q->ref))
        q->status = SSD_ERR_STALE;      /* reclaimed while we read */
    if (q->status == SSD_OK) {
        data = q->mem + q->skip;
        len = q->len;
    }
    r->pending--;
    q->cb(q->arg, q->status, data, len);
    req_put(r, q);
}

/* One CQE of a read; returns true when q is finished. */
static bool ring_handle_cqe(struct ssd_ring *r, struct ssd_req *q, int res)
{
    r->sq_inflight--;
    if (res == -EAGAIN || res == -EINTR) {
        ring_queue(r, q);
        return false;
    }
    if (res <= 0) {
        q->status = SSD_ERR_IO;
        return true;
    }
    q->done += (size_t)res;
    if (q->done < q->xlen) {            /* short read: ask for the rest */
        ring_queue(r, q);
        return false;
    }
    return true;
}

unsigned ssd_ring_reap(struct ssd_ring *r)
{
    struct ssd_store *s = r->s;
    unsigned ran = 0;
    uint64_t v;
    /* Clear the eventfd first, then drain: a completion arriving after
     * this read signals it again, so none is missed. */
    while (read(r->efd, &v, sizeof v) < 0 && errno == EINTR)
        ;
    if (r->uring) {
        struct io_uring_cqe *cqes[REAP_BATCH];
        unsigned n;
        while ((n = io_uring_peek_batch_cqe(&r->ur, cqes, REAP_BATCH)) > 0) {
            struct ssd_req *fin[REAP_BATCH];
            unsigned nfin = 0;
            for (unsigned i = 0; i < n; i++) {
                struct ssd_req *q = io_uring_cqe_get_data(cqes[i]);
                int res = cqes[i]->res;
                if (!ring_handle_cqe(r, q, res))
                    continue;                   /* resubmitted */
                if (s->debug_delay_ns != 0) {
                    read_finished(s, q);        /* counted from the done list */
                    continue;
                }
                if (q->status != SSD_OK)
                    ST_ADD(s, io_errors, 1);
                else
                    ST_ADD(s, bytes_read, q->xlen);
                ST_SUB(s, reads_inflight, 1);
                ssd_inflight_done(s);
                fin[nfin++] = q;
            }
            io_uring_cq_advance(&r->ur, n);
            for (unsigned i = 0; i < nfin; i++, ran++)
                req_complete(r, fin[i]);
        }
        ring_flush_backlog(r);
    }
    pthread_mutex_lock(&r->done_lock);
    struct ssd_req *q = r->done;
    r->done = r->done_tail = NULL;
    pthread_mutex_unlock(&r->done_lock);
    while (q != NULL) {
        struct ssd_req *next = q->next;
        if (q->xlen != 0) {             /* device read (pool) */
            ST_SUB(s, reads_inflight, 1);
            ssd_inflight_done(s);
            if (q->status != SSD_OK)
                ST_ADD(s, io_errors, 1);
            else
                ST_ADD(s, bytes_read, q->xlen);
        }
        req_complete(r, q);
        ran++;
        q = next;
    }
    return ran;
}

void ssd_ring_defer_submits(struct ssd_ring *r, void (*kick)(void *arg),
                            void *arg)
{
    r->kick = kick;
    r->kick_arg = arg;
    r->kicked = false;
}

void ssd_ring_submit(struct ssd_ring *r)
{
    r->kicked = false;
    if (!r->uring || io_uring_sq_ready(&r->ur) == 0)
        return;
    ST_ADD(r->s, read_submits, 1);
    if (io_uring_submit(&r->ur) < 0)
        efd_signal(r->efd);             /* the next reap retries */
}

void ssd_ring_destroy(struct ssd_ring *r)
{
    if (r == NULL)
        return;
    ssd_ring_submit(r);
    while (r->pending != 0) {
        struct pollfd pfd = { .fd = r->efd, .events = POLLIN };
        if (ssd_ring_reap(r) == 0 && r->pending != 0)
            (void)poll(&pfd, 1, 10);
    }
    pthread_mutex_lock(&r->done_lock);  /* wait out a pusher's signal */
    pthread_mutex_unlock(&r->done_lock);
    while (r->spare != NULL) {
        struct ssd_req *q = r->spare;
        r->spare = q->next;
        free(q->mem);
        free(q);
    }
    if (r->uring)
        io_uring_queue_exit(&r->ur);
    close(r->efd);
    pthread_mutex_destroy(&r->done_lock);
    free(r);
}

/* Builds and starts one read of [off, off + len) of ref's page, where
 * whole says the caller wants the whole used part of the buf covering
 * off (from that buf's first byte, which may lie in an earlier slot). */
static enum ssd_status ring_read(struct ssd_ring *r, uint64_t ref, size_t off,
                                 size_t len, bool whole, ssd_read_cb cb,
                                 void *arg)
{
    struct ssd_store *s = r->s;
    if (cb == NULL)
        return SSD_ERR_ARG;
    if (!ssd_ref_current(s, ref))
        return SSD_ERR_STALE;
    if (!whole && (len == 0 || len > s->page_size - off))
        return SSD_ERR_ARG;
    if (whole) {
        /* Sized now; a buf still filling may grow meanwhile, and then a
         * prefix of it (whole tuples) is what the caller gets. */
        pthread_mutex_lock(&s->lock);
        off = do_buf_extent(s, ssd_ref_page(ref), off, &len);
        pthread_mutex_unlock(&s->lock);
        ref = ssd_ref_pack(ssd_ref_version(ref), ssd_ref_page(ref),
                           (uint32_t)off);
    }
    size_t start = off / SSD_BLOCK * SSD_BLOCK;
    size_t end = (off + len + SSD_BLOCK - 1) / SSD_BLOCK * SSD_BLOCK;
    if (end == start)
        end = start + SSD_BLOCK;
    struct ssd_req *q = req_get(r, end - start);
    if (q == NULL)
        return SSD_ERR_NOMEM;
    q->ring = r;
    q->ref = ref;
    q->cb = cb;
    q->arg = arg;
    q->skip = off - start;
    q->len = len;
    ST_ADD(s, reads, 1);
    r->pending++;
    size_t used = 0;
    if (ssd_buf_copy_if_mem(s, ref, len, whole, len, q->mem + q->skip, &used)) {
        if (whole)
            q->len = used;
        ST_ADD(s, reads_mem, 1);
        ring_done_push(r, q);           /* xlen 0 marks a memory read */
        return SSD_OK;
    }
    q->fpos = ssd_page_fpos(s, ssd_ref_page(ref)) + start;
    q->fd = ssd_page_fd(s, ssd_ref_page(ref));
    q->xlen = end - start;
    ST_ADD(s, inflight, 1);
    ST_ADD(s, reads_inflight, 1);
    if (r->uring) {
        ring_queue(r, q);
        if (r->kick != NULL) {
            /* Submitted with the others of this pass (ssd_ring_submit). */
            if (!r->kicked) {
                r->kicked = true;
                r->kick(r->kick_arg);
            }
        } else {
            ST_ADD(s, read_submits, 1);
            if (io_uring_submit(&r->ur) < 0)
                efd_signal(r->efd);     /* the next reap retries */
        }
    } else if (ssd_pool_push(s, q, NULL) != 0) {
        ST_SUB(s, reads_inflight, 1);
        ssd_inflight_done(s);
        r->pending--;
        req_put(r, q);
        return SSD_ERR_NOMEM;
    }
    return SSD_OK;
}

enum ssd_status ssd_read(struct ssd_ring *r, uint64_t ref, size_t len,
                         ssd_read_cb cb, void *arg)
{
    return ring_read(r, ref, ssd_ref_offset(ref), len, false, cb, arg);
}

enum ssd_status ssd_read_buf(struct ssd_ring *r, uint64_t ref,
                             ssd_read_cb cb, void *arg)
{
    size_t bs = r->s->buf_size;
    return ring_read(r, ref, ssd_ref_offset(ref) / bs * bs, 0, true, cb, arg);
}

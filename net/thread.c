/*
 * thread.c - worker threads, connection hand-off and the maintainer thread.
 *
 * Design.  The listener (main thread, memcached.c) accepts a socket and
 * calls worker_dispatch_conn(), which queues it for the next worker in
 * round-robin order and wakes that worker through its eventfd.  The worker
 * creates the conn on its own event base; from then on only it touches the
 * connection.  Every worker also has a conn on each UDP socket (the kernel
 * hands each datagram to whichever worker reads first) and a one-second
 * timer that closes idle connections.
 *
 * The maintainer thread does the bounded background work: every tick a
 * step of hash table resizing, of the expiry crawler, and of the slab page
 * mover (with its automove policy).
 *
 * Threads and locks.  queue_lock protects a worker's hand-off queue and is
 * never held with any other lock.  workers[] is written before the workers
 * start and read-only afterwards.  conns_queued (atomic) counts the sockets
 * in all hand-off queues: the listener adds, the worker subtracts once
 * conn_new has counted the connection in curr_connections.
 */
#include "config.h"

#include <errno.h>
#include <sched.h>
#include <event2/event.h>
#include <event2/thread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <time.h>
#include <unistd.h>

#include "engine/assoc.h"
#include "base/bg.h"
#include "net/conn.h"
#include "net/conn_park.h"
#include "engine/items.h"
#include "engine/lazy_lru.h"
#include "engine/slabs.h"
#include "tac/tac.h"
#include "net/thread.h"
#include "base/util.h"

/* Work per maintainer tick (every MAINT_TICK_MS): buckets migrated by a
 * hash resize step, items checked by the expiry crawler. */
#define MAINT_TICK_MS 10
/* Between juggles of the segmented LRU's queues (lru_seg.c). */
#define MAINT_JUGGLE_MS 50
/* The maintainer dozes (ticks every MAINT_DOZE_MS) once its ticks have
 * found nothing to do for MAINT_QUIET_MS: no resize, no page move, no
 * juggled item, no failed allocation and no page taken (slabs_activity).
 * MAINT_QUIET_MS is ten times the automove rules' windows (slabs_int.h),
 * so a rule that an idle server's state satisfies fires before the doze.
 * A failed allocation, a page taken, `slabs reassign` and `lru_crawler
 * crawl` kick it awake (slabs_kick). */
#define MAINT_QUIET_MS 2000
#define MAINT_DOZE_MS 1000
#define MAINT_EXPAND_BUDGET 4096
#define MAINT_CRAWL_BUDGET 2000
#define MAINT_SLAB_MOVE_BUDGET 4096

struct conn_queue_item {
    struct conn_queue_item *next;
    int sfd;
    enum conn_transport transport;
    bool tls;
};

static struct worker *workers;
static int nworkers;
static int next_worker;              /* listener thread only */
static uint64_t conns_queued;        /* atomic: handed off, not yet conns */
static struct bg maint;
static int init_count;               /* protected by init_lock */
static pthread_mutex_t init_lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t init_cond = PTHREAD_COND_INITIALIZER;

int worker_count(void)
{
    return nworkers;
}

struct worker *worker_get(int i)
{
    return i >= 0 && i < nworkers ? &workers[i] : NULL;
}

static void worker_accept_queued(evutil_socket_t fd, short which, void *arg)
{
    struct worker *w = arg;
    uint64_t n;
    (void)which;
    if (read(fd, &n, sizeof(n)) < 0 && errno != EAGAIN)
        perror("eventfd read");
    for (;;) {
        pthread_mutex_lock(&w->queue_lock);
        struct conn_queue_item *q = w->queue_head;
        if (q) {
            w->queue_head = q->next;
            if (!w->queue_head)
                w->queue_tail = NULL;
        }
        pthread_mutex_unlock(&w->queue_lock);
        if (!q)
            break;
        conn *c = conn_new(q->sfd, q->transport, w);
        /* After conn_new: the listener's -c check sees it at least once. */
        __atomic_sub_fetch(&conns_queued, 1, __ATOMIC_SEQ_CST);
        if (c != NULL && q->tls && !conn_start_tls(c)) {
            fprintf(stderr, "cannot start TLS for fd %d\n", q->sfd);
            conn_close(c);
        } else if (!c) {
            fprintf(stderr, "cannot create connection for fd %d\n", q->sfd);
            close(q->sfd);
        } else if (settings.verbose > 1) {
            fprintf(stderr, "<%d new %s client connection\n", q->sfd,
                    q->transport == TRANSPORT_UNIX ? "unix" : "tcp");
        }
        free(q);
    }
    conn_mem_close_marked(w);
}

static void worker_idle_tick(evutil_socket_t fd, short which, void *arg)
{
    (void)fd;
    (void)which;
    conn_close_idle(arg);
}

/* The worker's SSD reads completed: run their callbacks, then drive the
 * connections whose parked responses they filled. */
static void worker_reap_reads(evutil_socket_t fd, short which, void *arg)
{
    struct worker *w = arg;
    (void)fd;
    (void)which;
    tac_reader_reap(w->reader);
    conn_run_ready(w);
}

/* The reads the worker's requests queued in this pass of its event loop go
 * to the kernel together, after the requests that were ready: one
 * io_uring_enter, made with no item lock held.  libevent runs an event
 * made active during a pass after the events already active. */
static void worker_submit_reads(evutil_socket_t fd, short which, void *arg)
{
    struct worker *w = arg;
    (void)fd;
    (void)which;
    tac_reader_submit(w->reader);
}

static void worker_kick_submit(void *arg)
{
    struct worker *w = arg;
    event_active(w->submit_event, EV_TIMEOUT, 0);
}

/* Creates the worker's SSD reader on its own thread (the ring belongs to
 * the thread that uses it). */
static void worker_setup_reader(struct worker *w)
{
    if (!tac_active())
        return;
    w->reader = tac_reader_new();
    if (w->reader == NULL)
        return;                     /* no SSD tier */
    w->reader_event = event_new(w->base, tac_reader_fd(w->reader),
                                EV_READ | EV_PERSIST, worker_reap_reads, w);
    w->submit_event = event_new(w->base, -1, 0, worker_submit_reads, w);
    if (w->reader_event == NULL || event_add(w->reader_event, NULL) != 0 ||
        w->submit_event == NULL) {
        fprintf(stderr, "cannot set up SSD reads for worker %d\n", w->id);
        exit(EXIT_FAILURE);
    }
    tac_reader_defer_submits(w->reader, worker_kick_submit, w);
}

/*
 * More workers than cores.  A worker whose connections always have the
 * next request ready never sleeps, and the kernel takes a core from a task
 * that does not sleep only at a scheduler tick: 4 ms at HZ=250.  Another
 * worker on the same core waits that long, and so do its clients and the
 * SSD completions that only it can collect (its ring's).  So when the
 * server has more workers than the cores it may run on (its CPU affinity
 * at start), a worker offers the core (sched_yield) after an event loop
 * pass once it has held it for a turn: WORKER_TURN_NS while device reads
 * are in flight, whose completions wait for their worker, and
 * WORKER_TURN_CALM_NS otherwise, when only other clients wait: there the
 * short turn cost about 6% of a fits-in-DRAM load's throughput, and a
 * 1 ms turn gained no more than 0.3 ms but doubled p99 (doc/design.md).
 * With a core per worker, the common set-up, nothing yields: each yield
 * there only handed the core to a client or a background thread, 20,000
 * times a second per worker under 16 non-pipelined connections, where
 * memcached switches about 8,000 times.
 */
#define WORKER_TURN_NS      100000u
#define WORKER_TURN_CALM_NS 300000u

static bool workers_outnumber_cores(void)
{
    cpu_set_t set;
    if (sched_getaffinity(0, sizeof(set), &set) != 0)
        return false;
    return settings.num_threads > CPU_COUNT(&set);
}

/*
 * Stopping a worker.  workers_stop() activates the worker's stop_event
 * (event_active is thread-safe); its callback, on the worker inside its own
 * loop, sets w->stopping and breaks the loop.  workers_stop() must not call
 * event_base_loopbreak() on the worker's base from the main thread: it only
 * sets a flag, which every entry to event_base_loop() clears, and it
 * notifies the base only while the loop runs.  A break that lands while the
 * worker is between two EVLOOP_ONCE passes below (after its look at the
 * flag, before the next pass begins), or before its first loop, is lost:
 * the worker then runs on (or sleeps in epoll_wait), and the main thread
 * waits in pthread_join forever.  An active event is not lost that way:
 * the next pass runs it.
 */
static void worker_stop_cb(evutil_socket_t fd, short which, void *arg)
{
    struct worker *w = arg;
    (void)fd;
    (void)which;
    w->stopping = true;
    event_base_loopbreak(w->base);      /* its own loop: honoured */
}

static void worker_loop(struct worker *w)
{
    if (!workers_outnumber_cores()) {
        while (!w->stopping && event_base_dispatch(w->base) == 0)
            ;
        return;
    }
    uint64_t turn = util_now_ns();
    while (!w->stopping) {
        if (event_base_loop(w->base, EVLOOP_ONCE) != 0)
            break;
        uint64_t held = util_now_ns() - turn;
        if (held >= WORKER_TURN_CALM_NS ||
            (held >= WORKER_TURN_NS && tac_reads_in_flight())) {
            STATS_INCR(&w->stats, worker_turns);
            sched_yield();
            turn = util_now_ns();       /* the core is ours again */
        }
    }
}

static void *worker_main(void *arg)
{
    struct worker *w = arg;
    worker_setup_reader(w);
    llru_rings_attach();

    pthread_mutex_lock(&init_lock);
    init_count++;
    pthread_cond_signal(&init_cond);
    pthread_mutex_unlock(&init_lock);

    worker_loop(w);
    conn_close_all(w);
    if (w->reader != NULL) {
        event_free(w->reader_event);
        tac_reader_defer_submits(w->reader, NULL, NULL);  /* no loop now */
        event_free(w->submit_event);
        tac_reader_free(w->reader);     /* waits for reads in flight */
        w->reader = NULL;
    }
    return NULL;
}

static void worker_setup(struct worker *w, int id)
{
    w->id = id;
    w->partition = id % settings.partitions;
    stats_add_worker(&w->stats);
    w->base = event_base_new();
    w->notify_fd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
    if (!w->base || w->notify_fd < 0) {
        fprintf(stderr, "cannot set up worker %d: %s\n", id, strerror(errno));
        exit(EXIT_FAILURE);
    }
    pthread_mutex_init(&w->queue_lock, NULL);
    w->notify_event = event_new(w->base, w->notify_fd, EV_READ | EV_PERSIST,
                                worker_accept_queued, w);
    w->stop_event = event_new(w->base, -1, 0, worker_stop_cb, w);
    bool ok = w->notify_event && w->stop_event &&
              event_add(w->notify_event, NULL) == 0;
    /* The idle-connection sweep, once a second; only with -o idle_timeout
     * (set at start only), so that an idle worker otherwise sleeps. */
    if (ok && settings.idle_timeout > 0) {
        struct event *idle = event_new(w->base, -1, EV_PERSIST, worker_idle_tick, w);
        struct timeval one_sec = { 1, 0 };
        ok = idle && event_add(idle, &one_sec) == 0;
    }
    if (!ok) {
        fprintf(stderr, "cannot set up events for worker %d\n", id);
        exit(EXIT_FAILURE);
    }
}

/* bg_doze's check: work came after the last tick looked. */
static bool maint_busy(void *arg)
{
    return slabs_activity() != *(uint64_t *)arg || items_crawl_rushed();
}

static void maintainer_main(struct bg *g, unsigned idx, void *arg)
{
    (void)idx;
    (void)arg;
    uint64_t ms = 1000000u;
    uint64_t crawl_ns = (uint64_t)settings.crawler_interval * 1000 * ms;
    uint64_t sample_ns = (uint64_t)settings.temp_sample_interval * 1000 * ms;
    uint64_t now = util_now_ns();
    uint64_t next_crawl = now, next_juggle = now, next_sample = now + sample_ns;
    uint64_t quiet_since = now, seen = slabs_activity();
    bool running = true;

    while (running) {
        bool worked = assoc_expand_step(MAINT_EXPAND_BUDGET);
        now = util_now_ns();
        bool rushed = items_crawl_rushed();
        if (__atomic_load_n(&settings.lru_crawler, __ATOMIC_RELAXED) &&
            (rushed || now >= next_crawl)) {
            items_crawl_step(MAINT_CRAWL_BUDGET);
            next_crawl = now + crawl_ns;
            worked |= rushed;
        }
        /* memcached's LRU maintainer, with -o lru_maintainer or
         * temporary_ttl. */
        if (now >= next_juggle) {
            worked |= items_seg_juggle() > 0;
            next_juggle = now + MAINT_JUGGLE_MS * ms;
        }
        if (settings.slab_reassign) {
            if (__atomic_load_n(&settings.slab_automove, __ATOMIC_RELAXED))
                slabs_automove_step();
            else
                slabs_reserve_step();
            worked |= slabs_reassign_step(MAINT_SLAB_MOVE_BUDGET) > 0;
        }
        /* The temperature thresholds matter only with a lower tier. */
        if (sample_ns > 0 && items_tiered() && now >= next_sample) {
            llru_sample((unsigned int)settings.temp_sample_size, mc_now());
            next_sample = now + sample_ns;
        }
        uint64_t act = slabs_activity();
        if (act != seen || worked) {
            seen = act;
            quiet_since = now;
        }
        if (now - quiet_since < MAINT_QUIET_MS * ms) {
            running = bg_tick(g, MAINT_TICK_MS * ms);
            continue;
        }
        uint64_t doze = MAINT_DOZE_MS * ms;
        if (__atomic_load_n(&settings.lru_crawler, __ATOMIC_RELAXED) &&
            next_crawl > now && next_crawl - now < doze)
            doze = next_crawl - now;
        running = bg_doze(g, doze, maint_busy, &seen);
    }
}

void workers_start(int nthreads, struct event_base *main_base)
{
    (void)main_base;
    nworkers = nthreads;
    workers = calloc(nthreads, sizeof(*workers));
    if (!workers) {
        fprintf(stderr, "out of memory starting workers\n");
        exit(EXIT_FAILURE);
    }
    for (int i = 0; i < nthreads; i++)
        worker_setup(&workers[i], i);
    items_lru_threads_start();
    for (int i = 0; i < nthreads; i++) {
        if (pthread_create(&workers[i].tid, NULL, worker_main, &workers[i]) != 0) {
            fprintf(stderr, "cannot create worker thread: %s\n", strerror(errno));
            exit(EXIT_FAILURE);
        }
        pthread_setname_np(workers[i].tid, "tac-worker");
    }
    pthread_mutex_lock(&init_lock);
    while (init_count < nthreads)
        pthread_cond_wait(&init_cond, &init_lock);
    pthread_mutex_unlock(&init_lock);

    bg_init(&maint, "tac-maint", NULL);
    slabs_kick_add(&maint);
    if (!bg_start(&maint, 1, maintainer_main, NULL)) {
        fprintf(stderr, "cannot create maintainer thread\n");
        exit(EXIT_FAILURE);
    }
}

void worker_dispatch_conn(int sfd, int transport, bool tls)
{
    struct conn_queue_item *q = malloc(sizeof(*q));
    if (!q) {
        close(sfd);
        return;
    }
    q->next = NULL;
    q->sfd = sfd;
    q->transport = transport;
    q->tls = tls;

    __atomic_add_fetch(&conns_queued, 1, __ATOMIC_SEQ_CST);
    struct worker *w = &workers[next_worker];
    next_worker = (next_worker + 1) % nworkers;
    pthread_mutex_lock(&w->queue_lock);
    if (w->queue_tail)
        w->queue_tail->next = q;
    else
        w->queue_head = q;
    w->queue_tail = q;
    pthread_mutex_unlock(&w->queue_lock);

    uint64_t one = 1;
    if (write(w->notify_fd, &one, sizeof(one)) != sizeof(one))
        perror("eventfd write");
}

uint64_t workers_conns_queued(void)
{
    return __atomic_load_n(&conns_queued, __ATOMIC_SEQ_CST);
}

/* Gives every worker a conn on a UDP socket.  Called before the workers'
 * loops handle any traffic; libevent's locking makes it safe anyway. */
void workers_add_udp(int sfd)
{
    for (int i = 0; i < nworkers; i++) {
        int fd = i == 0 ? sfd : dup(sfd);
        if (fd < 0 || !conn_new(fd, TRANSPORT_UDP, &workers[i])) {
            fprintf(stderr, "cannot add UDP socket to worker %d\n", i);
            exit(EXIT_FAILURE);
        }
    }
}

void workers_stop(void)
{
    slabs_kick_remove(&maint);
    bg_stop(&maint);
    for (int i = 0; i < nworkers; i++)
        event_active(workers[i].stop_event, EV_READ, 0);   /* worker_stop_cb */
    for (int i = 0; i < nworkers; i++) {
        pthread_join(workers[i].tid, NULL);
        event_free(workers[i].stop_event);
        workers[i].stop_event = NULL;
    }
    items_lru_threads_stop();
}

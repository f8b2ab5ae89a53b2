/*
 * worker.h - a worker thread as its connections see it: its event base,
 * stats, caches, connection lists and SSD reader.  thread.c starts and
 * stops the workers; conn.c and the protocols run on one and use only this.
 */
#ifndef WORKER_H
#define WORKER_H

#include <errno.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <unistd.h>

#include "base/stats.h"

struct event_base;
struct conn_queue_item;
struct resp;

struct worker {
    pthread_t tid;
    int id;                     /* 0 .. num_threads-1 */
    int partition;              /* id mod settings.partitions */
    struct event_base *base;
    int notify_fd;              /* eventfd: new connections queued */
    struct event *notify_event;
    pthread_mutex_t queue_lock; /* protects queue_head/tail */
    struct conn_queue_item *queue_head, *queue_tail;
    struct thread_stats stats;  /* written by this worker only */
    struct resp *resp_cache;    /* free resps, this worker only */
    int resp_cache_len;
    int resp_live;              /* resps queued on its connections */
    struct conn *conns;         /* this worker's connections */
    struct tac_reader *reader;  /* SSD reads; NULL without an SSD tier */
    struct event *submit_event; /* submits the reads a pass queued */
    struct event *reader_event;
    struct conn *ready;         /* conns with filled parked responses */
    struct event *stop_event;   /* activated by workers_stop */
    bool stopping;              /* set by stop_event's callback; this worker only */
};

/* Wakes a worker from any thread: it runs its hand-off queue and closes
 * connections marked by the connection-memory bound.  A write(2) to a
 * non-blocking eventfd: it never waits, and may be done under a lock. */
static inline void worker_wake(struct worker *w)
{
    uint64_t one = 1;
    if (w != NULL && write(w->notify_fd, &one, sizeof(one)) < 0 &&
        errno != EAGAIN)
        perror("eventfd write");
}

#endif

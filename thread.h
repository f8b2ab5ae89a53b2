/*
 * thread.h - worker threads.
 *
 * One listener thread accepts connections and hands each to a worker
 * (round robin) through the worker's queue and eventfd.  Each worker runs
 * its own libevent base and owns its connections outright.
 */
#ifndef THREAD_H
#define THREAD_H

#include <pthread.h>
#include <stdbool.h>

#include "stats.h"

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
    struct conn *conns;         /* this worker's connections */
    struct tac_reader *reader;  /* SSD reads; NULL without an SSD tier */
    struct event *reader_event;
    struct conn *ready;         /* conns with filled parked responses */
};

void workers_start(int nthreads, struct event_base *main_base);
/* Hands an accepted socket to the next worker. */
void worker_dispatch_conn(int sfd, int transport, int udp_port_unused);
/* Sockets handed to workers that are not yet connections (the listener
 * counts them against -c with curr_connections). */
uint64_t workers_conns_queued(void);
/* Gives every worker a connection on a UDP socket. */
void workers_add_udp(int sfd);
/* Asks every worker to close its connections and exit; waits. */
void workers_stop(void);

/* Wakes a worker from any thread: it runs its hand-off queue and closes
 * connections marked by the connection-memory bound. */
void worker_wake(struct worker *w);

int worker_count(void);
struct worker *worker_get(int i);

#endif

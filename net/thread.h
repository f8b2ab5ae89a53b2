/*
 * thread.h - worker threads.
 *
 * One listener thread accepts connections and hands each to a worker
 * (round robin) through the worker's queue and eventfd.  Each worker runs
 * its own libevent base and owns its connections outright.
 */
#ifndef THREAD_H
#define THREAD_H

#include <stdbool.h>
#include <stdint.h>

#include "net/worker.h"


void workers_start(int nthreads, struct event_base *main_base);
/* Hands an accepted socket to the next worker. */
/* Hands an accepted socket to the next worker; tls: it speaks TLS (-Z). */
void worker_dispatch_conn(int sfd, int transport, bool tls);
/* Sockets handed to workers that are not yet connections (the listener
 * counts them against -c with curr_connections). */
uint64_t workers_conns_queued(void);
/* Gives every worker a connection on a UDP socket. */
void workers_add_udp(int sfd);
/* Asks every worker to close its connections and exit; waits. */
void workers_stop(void);

int worker_count(void);
struct worker *worker_get(int i);

#endif

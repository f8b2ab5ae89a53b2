/*
 * conn_registry.h - every open connection, `stats conns` and the
 * connection-memory bound (conn_registry.c).
 *
 * Threads: any thread (the registry has its own lock).
 */
#ifndef CONN_REGISTRY_H
#define CONN_REGISTRY_H

#include "net/conn_types.h"

/* conn_registry.c: brings c's memory share up to date (and marks the
 * biggest holders for closing when the sum passes conn_mem_limit). */
void conn_mem_sync(conn *c);
/* conn_registry.c: c opened, closing (for `stats conns` and the memory
 * bound's victim search). */
void conn_registry_add(conn *c);
void conn_registry_remove(conn *c);

/* `stats conns` (main() registers it: conn.c has no init). */
struct stat_sink;
void conn_stats(struct stat_sink *sink);
/* Records a listening socket ("tcp:127.0.0.1:11211") for `stats conns`. */
void conn_stats_add_listener(int fd, const char *name);


/* Inline: every request passes through it several times.  Entering or
 * leaving nread changes c's memory share only by a value past the
 * allowance: with nothing held, a small one changes nothing. */
static inline void conn_set_state(conn *c, enum conn_state state)
{
    enum conn_state was = c->state;
    __atomic_store_n(&c->state, state, __ATOMIC_RELAXED);
    if ((was == conn_nread || state == conn_nread) &&
        (c->mem_held != 0 || conn_value_counted(c)))
        conn_mem_sync(c);
}

#endif

/*
 * conn_park.h - a parked response as conn.c and conn_park.c both see it
 * (conn_park.c owns it; conn.h has the interface the protocols use).
 *
 * Threads: the connection's worker only.
 */
#ifndef CONN_PARK_H
#define CONN_PARK_H

#include <stdbool.h>
#include <stddef.h>

#include "conn.h"

struct parked {
    struct parked *next;        /* the conn's list */
    conn *c;                    /* NULL once the conn closed */
    struct resp *r;             /* the placeholder */
    conn_fill_fn fill;
    void (*cleanup)(void *ctx); /* when fill will never run; may be NULL */
    bool ssd_read;              /* waits on an SSD read (read_parked) */
    _Alignas(max_align_t) char ctx[];
};

/* The connection closes: reads still in flight complete into nothing
 * (park_done frees them then). */
static inline void conn_park_orphan(conn *c)
{
    for (struct parked *p = c->parked; p != NULL; p = p->next)
        p->c = NULL;
}

#endif

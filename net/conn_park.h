/*
 * conn_park.h - requests answered later (conn_park.c): parked responses,
 * retries of a request that needs an SSD-resident old value, and stores
 * waiting for room.  The protocols and thread.c include it; conn.c does
 * not (it only orphans a closing connection's parked records).
 *
 * Threads: the connection's worker only.
 */
#ifndef CONN_PARK_H
#define CONN_PARK_H

#include <stdbool.h>
#include <stddef.h>

#include "net/conn.h"


/*
 * Parked responses (doc/design.md, "Workers never wait for the SSD").  A request that needs the value of an
 * SSD-resident item queues a placeholder in request order and goes on; the
 * read completes later on this worker, which then calls fill(c, value,
 * ctx): fill builds the request's response with the usual resp_new/out_*
 * calls, which land in the placeholder's position.  value is the item's
 * value as of the request (fill owns that reference) or NULL when it is
 * gone (answer a miss).  ctx (ctxlen bytes) is copied.  Responses after the
 * placeholder wait for it; past CONN_PARK_MAX placeholders the connection
 * stops reading requests.
 *
 * conn_read_item() is item_read() (items.h) with such a placeholder: on
 * ITEM_PENDING it is queued and fill runs when the value is back; every
 * other answer is the caller's to send now.
 */
enum item_answer conn_read_item(conn *c, struct item_read *rq,
                                conn_fill_fn fill, const void *ctx,
                                size_t ctxlen, struct item **out,
                                enum item_miss *why, unsigned int *clsid);
/* After ITEM_PENDING: the placeholder's own copy of ctx, which the caller
 * may still complete (fill runs later, on this thread). */
void *conn_read_item_ctx(conn *c);
/*
 * Retrying a request that needs an SSD-resident old value (append,
 * prepend, incr, decr got *_NEED_VALUE).  conn_retry() reads the key's
 * value, parking a placeholder as above, then runs fn(c, args) in
 * request order with c->prior set to what the read got (struct item_got,
 * items.h), which fn hands to item_add_delta, item_store_wait or
 * item_store_meta as their `prior`; fn answers the request, or calls conn_retry() again if the version
 * changed meanwhile (c->redo_tries counts).  No thread ever waits for the
 * read: when none can be parked (no memory) and the value is not in memory
 * either, the answer is SERVER_ERROR out of memory.  args (argslen bytes)
 * are copied; cleanup, if any, releases what they hold when the request is
 * dropped unanswered (the connection closed).  When no read is needed, fn
 * runs at once.
 *
 * conn_retry_nread() does this for the storage command whose value was
 * just read (c->item, c->nr, c->bin): the protocol's complete_nread hook
 * runs again, with c->prior set likewise.
 */
typedef void (*conn_retry_fn)(conn *c, void *args);
void conn_retry(conn *c, const char *key, size_t nkey, conn_retry_fn fn,
                void (*cleanup)(void *args), const void *args, size_t argslen);
void conn_retry_nread(conn *c);
/*
 * A store found no room in any tier, and a lower tier will make some
 * (*res is STORE_NEED_ROOM, from item_store_wait).  Parks the request:
 * a placeholder keeps its answer's place, later requests wait behind it
 * (the connection stops reading, so TCP pushes back), the worker serves
 * other connections, and a timer runs the protocol's complete_nread hook
 * again with the same value.  Its item counts against conn_mem_limit
 * meanwhile.  Returns true when parked (answer nothing now).  False when
 * *res was something else, or the store cannot wait: *res becomes
 * STORE_WAIT_TIMEOUT once -o store_wait_ms has passed since its first
 * wait (counted in store_wait_timeouts), or STORE_NO_MEMORY when it
 * cannot park (UDP, store_wait_ms 0, out of memory).
 */
bool conn_park_for_room(conn *c, enum store_result *res);  /* the NEED_ROOM case */
static inline bool conn_wait_room(conn *c, enum store_result *res)
{
    return *res == STORE_NEED_ROOM && conn_park_for_room(c, res);
}

/* Drives the connections whose parked responses were filled (thread.c,
 * after reaping the worker's reads). */
void conn_run_ready(struct worker *w);

#endif

/*
 * conn_resp.h - a connection's response queue (conn_resp.c): what a
 * request queues as its answer, in request order.
 *
 * Threads: the connection's worker only.
 */
#ifndef CONN_RESP_H
#define CONN_RESP_H

#include "net/conn_registry.h"

/* ---- Response queue (protocol side) ----------------------------------- */

/* Appends a new empty response; NULL on out of memory. */
/* True if the worker may queue n more responses under -o
 * read_buf_mem_limit; false counts in response_obj_oom. */
bool conn_resp_room(conn *c, int n);
struct resp *resp_new(conn *c);
/* Appends text to the response's buffer; false if it does not fit. */
bool resp_add_text(struct resp *r, const char *s, size_t len);
bool resp_printf(struct resp *r, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));
/* Adds an iovec to memory that stays valid until the resp is sent
 * (static text, or memory of an item/buffer the resp holds). */
bool resp_add_iov(struct resp *r, const void *buf, size_t len);
/* Hands the resp a reference to `it`; released after sending.  An item
 * with too many held references (items.h) is copied instead: the resp's
 * iovecs into it are moved to the copy and the caller's reference is
 * dropped.  False (nothing taken) when the resp holds its maximum or the
 * copy finds no memory. */
bool resp_hold_item(struct resp *r, struct item *it);
/* Hands the resp a malloc'd buffer and sends len bytes of it. */
bool resp_add_owned(struct resp *r, void *buf, size_t len);
/* A new response of c made of buf alone (malloc'd; the response frees it
 * once sent).  On failure buf is freed, nothing is queued, and false is
 * returned: the caller answers an error or closes. */
bool resp_give(conn *c, void *buf, size_t len);
/* Releases what a sent or dropped resp holds and returns it to the
 * worker's cache (conn.c's writer). */
void resp_free(struct worker *w, struct resp *r);

/*
 * Queues "str\r\n" as a whole response, unless c->noreply is set (then
 * nothing is sent and noreply is cleared).  On allocation failure the
 * connection is closed.
 */
void out_string(conn *c, const char *str);
/* Like out_string but always sent (errors clear noreply). */
void out_errstring(conn *c, const char *str);

/* Bytes of the response objects allocated (`response_obj_bytes`). */
uint64_t conn_resp_bytes(void);
#endif

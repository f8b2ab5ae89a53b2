/*
 * conn_resp.c - a connection's response queue: the responses its requests
 * queue (resp_new and the resp_add_* pieces, out_string), the items and
 * buffers they hold until sent, the worker's cache of response objects,
 * and memcached's read_buf_mem_limit bound on them (response_obj_oom).
 * conn.c writes the queue out and frees each response (resp_free).
 *
 * Threads: the connection's worker only; response_objs is a global gauge.
 */
#include "config.h"

#include <limits.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "net/conn_resp.h"
#include "engine/items.h"
#include "base/settings.h"
#include "base/stats.h"
#include "net/worker.h"

/* Response objects a worker keeps for reuse. */
#define RESP_CACHE_MAX 256

/*
 * -o read_buf_mem_limit, as memcached applies it to response objects: each
 * worker's share of the limit, less one 16 KB read buffer, bounds the
 * responses queued on its connections (at least one).  0: no bound.
 */
static int resp_limit(void)
{
    if (settings.read_buf_mem_limit == 0)
        return 0;
    size_t share = settings.read_buf_mem_limit /
                   (size_t)(settings.num_threads > 0 ? settings.num_threads : 1);
    size_t n = share > 16384 ? (share - 16384) / sizeof(struct resp) : 0;
    return n > 0 ? (n < INT_MAX ? (int)n : INT_MAX) : 1;
}

bool conn_resp_room(conn *c, int n)
{
    int limit = resp_limit();
    if (limit == 0 || c->thread->resp_live + n <= limit)
        return true;
    GSTATS_INCR(response_obj_oom);
    return false;
}

struct resp *resp_new(conn *c)
{
    struct worker *w = c->thread;
    if (!conn_resp_room(c, 1))
        return NULL;
    struct resp *r = w->resp_cache;
    if (r) {
        w->resp_cache = r->next;
        w->resp_cache_len--;
    } else {
        r = malloc(sizeof(*r));
        if (!r) {
            GSTATS_INCR(response_obj_oom);
            return NULL;
        }
        GSTATS_INCR(response_objs);
    }
    w->resp_live++;
    r->next = NULL;
    r->owner = c;
    r->held = 0;
    c->reply_bytes += sizeof(*r);
    r->iovcnt = 0;
    r->nitems = 0;
    r->owned_buf = NULL;
    r->wbytes = 0;
    r->skip = false;
    r->pending = false;
    if (c->resp_insert != NULL) {
        /* Filling a parked response: keep request order. */
        r->next = c->resp_insert->next;
        c->resp_insert->next = r;
        if (c->resp_tail == c->resp_insert)
            c->resp_tail = r;
        c->resp_insert = r;
        return r;
    }
    if (c->resp_tail)
        c->resp_tail->next = r;
    else
        c->resp_head = r;
    c->resp_tail = r;
    return r;
}

bool resp_give(conn *c, void *buf, size_t len)
{
    struct resp *r = resp_new(c);
    if (r != NULL && resp_add_owned(r, buf, len))
        return true;
    if (r != NULL)
        r->skip = true;
    free(buf);
    return false;
}

uint64_t conn_resp_bytes(void)
{
    return STATS_GET(&gstats, response_objs) * sizeof(struct resp);
}

void resp_free(struct worker *w, struct resp *r)
{
    r->owner->reply_bytes -= sizeof(*r) + r->held;
    for (int i = 0; i < r->nitems; i++)
        item_release(r->items[i]);
    free(r->owned_buf);
    w->resp_live--;
    if (w->resp_cache_len < RESP_CACHE_MAX) {
        r->next = w->resp_cache;
        w->resp_cache = r;
        w->resp_cache_len++;
    } else {
        free(r);
        GSTATS_DECR(response_objs);
    }
}

bool resp_add_iov(struct resp *r, const void *buf, size_t len)
{
    if (len == 0)
        return true;
    if (r->iovcnt > 0) {
        struct iovec *last = &r->iov[r->iovcnt - 1];
        if ((const char *)last->iov_base + last->iov_len == (const char *)buf) {
            last->iov_len += len;
            return true;
        }
    }
    if (r->iovcnt == RESP_IOV_MAX)
        return false;
    r->iov[r->iovcnt].iov_base = (void *)buf;
    r->iov[r->iovcnt].iov_len = len;
    r->iovcnt++;
    return true;
}

bool resp_add_text(struct resp *r, const char *s, size_t len)
{
    if (len > RESP_WBUF_SIZE - r->wbytes)
        return false;
    char *dst = r->wbuf + r->wbytes;
    memcpy(dst, s, len);
    if (!resp_add_iov(r, dst, len))
        return false;
    r->wbytes += len;
    return true;
}

bool resp_printf(struct resp *r, const char *fmt, ...)
{
    size_t room = RESP_WBUF_SIZE - r->wbytes;
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(r->wbuf + r->wbytes, room, fmt, ap);
    va_end(ap);
    if (n < 0 || (size_t)n >= room)
        return false;
    char *dst = r->wbuf + r->wbytes;
    if (!resp_add_iov(r, dst, (size_t)n))
        return false;
    r->wbytes += (size_t)n;
    return true;
}

static void resp_count(struct resp *r, size_t bytes)
{
    r->held += bytes;
    r->owner->reply_bytes += bytes;
}

bool resp_hold_item(struct resp *r, struct item *it)
{
    if (r->nitems == RESP_ITEMS_MAX)
        return false;
    if (item_refs_crowded(it)) {
        /* Items are never compact or meta tuples here: a reply holds a
         * value-bearing item. */
        item *copy = item_copy(it);
        if (copy == NULL)
            return false;
        const char *lo = (const char *)it;
        const char *hi = lo + item_copy_size(it);
        for (int i = 0; i < r->iovcnt; i++) {
            const char *b = r->iov[i].iov_base;
            if (b >= lo && b < hi)
                r->iov[i].iov_base = (char *)copy + (b - lo);
        }
        item_release(it);
        it = copy;
        GSTATS_INCR(reply_item_copies);
    }
    r->items[r->nitems++] = it;
    resp_count(r, item_copy_size(it));
    return true;
}

bool resp_add_owned(struct resp *r, void *buf, size_t len)
{
    if (r->owned_buf || !resp_add_iov(r, buf, len))
        return false;
    r->owned_buf = buf;
    resp_count(r, len);
    return true;
}

static void out_line(conn *c, const char *str)
{
    if (__atomic_load_n(&settings.verbose, __ATOMIC_RELAXED) > 1)
        fprintf(stderr, ">%d %s\n", c->sfd, str);
    struct resp *r = resp_new(c);
    size_t len = strlen(str);
    if (!r || !resp_add_text(r, str, len) || !resp_add_text(r, "\r\n", 2)) {
        conn_set_state(c, conn_closing);
        return;
    }
}

void out_string(conn *c, const char *str)
{
    if (c->noreply) {
        c->noreply = false;
        return;
    }
    out_line(c, str);
}

void out_errstring(conn *c, const char *str)
{
    c->noreply = false;
    out_line(c, str);
}


/*
 * proto_ascii.c - what the text protocol's two halves share: queueing a
 * reply line, writing a key (raw or base64), a store with memcached's CAS
 * rule, and the incr/decr hit counters.  proto_text.c (classic commands,
 * framing, dispatch) and proto_meta.c (meta commands) both stand on it.
 *
 * Threads: all functions run on the worker that owns the connection.
 */
#include "config.h"

#include <stdlib.h>
#include <string.h>

#include "net/conn_park.h"
#include "proto/proto_ascii.h"
#include "base/settings.h"
#include "engine/slabs.h"
#include "base/stats.h"
#include "base/watch.h"
#include "net/worker.h"

void ascii_out_buf(conn *c, const char *buf, size_t len, bool skip)
{
    struct resp *r = resp_new(c);
    if (r == NULL) {
        conn_set_state(c, conn_closing);
        return;
    }
    r->skip = skip;
    if (resp_add_text(r, buf, len))
        return;
    char *copy = malloc(len);
    if (copy == NULL || !resp_add_owned(r, copy, len)) {
        free(copy);
        r->skip = true;
        conn_set_state(c, conn_closing);
        return;
    }
    memcpy(copy, buf, len);
}


char *ascii_put_key(char *p, const char *key, size_t nkey, bool binary)
{
    if (!binary) {
        memcpy(p, key, nkey);
        return p + nkey;
    }
    return p + base64_encode((const unsigned char *)key, nkey,
                             (unsigned char *)p, BASE64_ENCODED_LEN(nkey));
}


enum store_result ascii_store(conn *c, item *it, enum store_op op,
                           uint64_t req_cas, uint64_t *cas_out)
{
    /* memcached: a cas whose unique is 0 (always, with -C) never matches;
     * the answer is EXISTS, or NOT_FOUND if the key is missing. */
    if (op == STORE_CAS && (req_cas == 0 || !settings.use_cas)) {
        return item_exists(ITEM_key(it), it->nkey) ? STORE_EXISTS
                                                   : STORE_NOT_FOUND;
    }
    return item_store_wait(it, op, req_cas, cas_out, c->thread->partition,
                           c->prior);
}

enum ascii_store_next ascii_store_after(conn *c, item *it, enum store_op op,
                                  enum store_result *ret)
{
    if (*ret == STORE_NEED_VALUE) {
        conn_retry_nread(c);            /* append/prepend to an SSD value */
        return ASCII_STORE_LATER;
    }
    if (conn_wait_room(c, ret))
        return ASCII_STORE_LATER;          /* answered once a tier has room */
    if (watch_on(WATCH_MUTATIONS))
        conn_watch_store(c, it, op, *ret);
    if (op == STORE_CAS) {
        if (*ret == STORE_STORED)
            SLAB_STATS_INCR(ASCII_STATS(c), it->slabs_clsid, cas_hits);
        else if (*ret == STORE_EXISTS)
            SLAB_STATS_INCR(ASCII_STATS(c), it->slabs_clsid, cas_badval);
        else if (*ret == STORE_NOT_FOUND)
            STATS_INCR(ASCII_STATS(c), cas_misses);
    }
    if ((*ret == STORE_NO_MEMORY || *ret == STORE_WAIT_TIMEOUT) &&
        op != STORE_APPEND && op != STORE_PREPEND) {
        if (*ret == STORE_NO_MEMORY)
            STATS_INCR(ASCII_STATS(c), store_no_memory);
        if (op == STORE_SET)
            item_delete(ITEM_key(it), it->nkey, 0, NULL);
        return ASCII_STORE_OOM;
    }
    return ASCII_STORE_ANSWER;
}

void ascii_count_delta_hit(conn *c, size_t nkey, const char *num, bool incr)
{
    /* item_add_delta does not report the item's class; it is the class
     * of an item holding the value just written. */
    unsigned int cls = slabs_clsid(item_make_size(nkey, strlen(num) + 2));
    if (incr)
        SLAB_STATS_INCR(ASCII_STATS(c), cls, incr_hits);
    else
        SLAB_STATS_INCR(ASCII_STATS(c), cls, decr_hits);
}

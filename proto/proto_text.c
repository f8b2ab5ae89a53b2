/*
 * proto_text.c - the memcached text protocol: line framing, tokenizing,
 * dispatch, and the classic commands (get/gets/gat/gats, the six storage
 * commands, incr/decr, delete, touch, flush_all, stats, version, verbosity,
 * quit, shutdown).  Meta commands (mg/ms/md/ma/mn/me) live in proto_meta.c.
 *
 * Design.  The network layer calls proto_text_try_command() while there are
 * unparsed bytes; each call handles one complete line and appends its
 * response(s) to the connection's queue, in request order.  Replies and
 * error strings match stock memcached 1.6.18 byte for byte (checked against
 * the real binary); where a reply depends on a quirk of memcached, the
 * quirk is reproduced and commented.  Values are sent zero-copy: the
 * response holds a reference on the item until it is written.
 *
 * A storage command allocates its item, points c->ritem at the value and
 * switches to conn_nread; the network layer fills the value and calls
 * proto_text_complete_nread(), which checks the "\r\n", stores and replies.
 *
 * Threads: all functions run on the worker that owns the connection.  The
 * item API takes its own locks; no lock is held across calls here.
 */
#include "config.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/crashpoint.h"
#include "net/auth.h"
#include "net/conn.h"
#include "net/conn_park.h"
#include "engine/items.h"
#include "base/settings.h"
#include "base/prefix_stats.h"
#include "proto/proto_ascii.h"
#include "proto/proto_dump.h"
#include "proto/proto_meta.h"
#include "proto/proto_text.h"
#include "engine/slabs.h"
#include "base/stats.h"
#include "net/tls.h"
#include "base/watch.h"
#include "net/worker.h"
#include "base/util.h"


/* A line without '\n' longer than this is refused (memcached: 2048),
 * unless it is a multi-key retrieval, which may be any length. */
#define PT_LINE_MAX 2048

/* ---- Small shared helpers ------------------------------------------- */

/* Appends static text to *rp, or to a new resp when *rp is full. */
static bool pt_add_static(conn *c, struct resp **rp, const char *s,
                          size_t len)
{
    if (*rp != NULL && resp_add_iov(*rp, s, len))
        return true;
    *rp = resp_new(c);
    return *rp != NULL && resp_add_iov(*rp, s, len);
}

/* Marks every response queued after `mark` as dropped. */
static void pt_cancel_since(conn *c, struct resp *mark)
{
    for (struct resp *r = mark ? mark->next : c->resp_head; r; r = r->next)
        r->skip = true;
}

/* memcached's set_noreply_maybe: the last token decides. */
static void pt_noreply_maybe(conn *c, struct util_token *tok, size_t ntok)
{
    if (ntok > 0 && strcmp(tok[ntok - 1].value, "noreply") == 0)
        c->noreply = true;
}

static void pt_count_miss_reason(conn *c, enum item_miss why)
{
    if (why == MISS_EXPIRED)
        STATS_INCR(ASCII_STATS(c), get_expired);
    else if (why == MISS_FLUSHED)
        STATS_INCR(ASCII_STATS(c), get_flushed);
}

/* ---- Retrieval ------------------------------------------------------ */

/* Queues the VALUE response of `it`, a value-bearing item whose reference
 * the response takes over.  False on OOM. */
static bool pt_send_value(conn *c, item *it, bool return_cas,
                          struct resp **cur)
{
    char hdr[KEY_MAX_LENGTH + 80];
    char *p = hdr;
    memcpy(p, "VALUE ", 6);
    memcpy(p + 6, ITEM_key(it), it->nkey);
    p += 6 + it->nkey;
    *p++ = ' ';
    p = util_u64toa(it->flags, p);
    *p++ = ' ';
    p = util_u64toa(it->nbytes - 2, p);
    if (return_cas) {
        *p++ = ' ';
        p = util_u64toa(it->cas, p);
    }
    *p++ = '\r';
    *p++ = '\n';

    struct resp *r = resp_new(c);
    if (r == NULL || !resp_add_text(r, hdr, (size_t)(p - hdr)) ||
        !resp_add_iov(r, ITEM_data(it), it->nbytes)) {
        item_release(it);
        return false;
    }
    if (!resp_hold_item(r, it)) {
        r->skip = true;
        item_release(it);
        return false;
    }
    *cur = r;
    return true;
}

struct pt_get_ctx {
    bool return_cas;
};

/* A parked get's value arrived from SSD (NULL: it is gone, a miss). */
static void pt_get_fill(conn *c, item *value, void *ctx)
{
    const struct pt_get_ctx *g = ctx;
    struct resp *cur = NULL;
    if (value != NULL && !pt_send_value(c, value, g->return_cas, &cur))
        out_errstring(c, "SERVER_ERROR out of memory writing get response");
}

/* Looks one key up and queues its VALUE response, or parks it while an
 * SSD-resident value is read.  False on OOM. */
static bool pt_get_one(conn *c, const char *key, size_t nkey,
                       rel_time_t exptime, bool touch, bool return_cas,
                       struct resp **cur)
{
    enum item_miss why = MISS_NONE;
    unsigned int clsid = 0;
    item *it = NULL;
    struct item_read rq = { .key = key, .nkey = nkey, .bump = true,
                            .touch = touch, .exptime = exptime, .value = true };
    struct pt_get_ctx g = { .return_cas = return_cas };
    bool parked = conn_read_item(c, &rq, pt_get_fill, &g, sizeof(g), &it,
                                 &why, &clsid) == ITEM_PENDING;
    conn_count_read(c, key, nkey, it, it != NULL || parked, touch, why, clsid);
    if (it == NULL && !parked)
        return true;
    if (parked) {
        *cur = NULL;            /* END must not join the placeholder */
        return true;
    }
    return pt_send_value(c, it, return_cas, cur);
}

/*
 * A get of many keys in pieces.  Once the responses a connection has queued
 * pass CONN_REPLY_PIECE bytes, or its parked reads CONN_PARK_MAX, the rest
 * of the line becomes a stream (conn_stream): each piece looks keys up
 * until the bound is reached again, and the next one runs when the
 * client has read what came before.  A client that sends one line naming a
 * key a million times and reads nothing holds a piece, not a million
 * references and responses.  The keys stay where they are, in the
 * connection's read buffer before rcurr: nothing is read into that buffer
 * while a stream runs (conn.h).  Tokens already split by util_tokenize end
 * in '\0', the others in ' ': both separate keys here.
 */
struct pt_get_stream {
    char *cur;              /* next key, or a separator before it */
    char *end;              /* the line's terminating '\0' */
    rel_time_t exptime;
    bool touch;
    bool return_cas;
};

static bool pt_get_piece_full(const conn *c)
{
    return c->reply_bytes >= CONN_REPLY_PIECE || c->npending >= CONN_PARK_MAX;
}

static inline bool pt_is_sep(char ch)
{
    return ch == ' ' || ch == '\0';
}

static enum conn_stream_step pt_get_more(conn *c, void *ctx)
{
    struct pt_get_stream *g = ctx;
    struct resp *cur = NULL;
    bool first = true;
    for (;;) {
        while (g->cur < g->end && pt_is_sep(*g->cur))
            g->cur++;
        if (g->cur == g->end) {
            if (!pt_add_static(c, &cur, "END\r\n", 5))
                out_errstring(c, "SERVER_ERROR out of memory writing get response");
            return STREAM_DONE;
        }
        /* At least one key a piece, whatever was queued before. */
        if (!first && pt_get_piece_full(c))
            return STREAM_PIECE;
        char *key = g->cur;
        while (g->cur < g->end && !pt_is_sep(*g->cur))
            g->cur++;
        *g->cur = '\0';        /* a separator or the line's own end */
        if (!pt_get_one(c, key, (size_t)(g->cur - key), g->exptime, g->touch,
                        g->return_cas, &cur)) {
            /* Earlier pieces are sent already: the error ends the reply. */
            out_errstring(c, "SERVER_ERROR out of memory writing get response");
            return STREAM_DONE;
        }
        first = false;
    }
}

/* The rest of a get line, from tok[i] on, as a stream; false (nothing
 * queued) when a key of it is too long, as memcached checks every key
 * before answering any. */
static bool pt_get_stream_rest(conn *c, struct util_token *tok, size_t ntok,
                               size_t i, char *rest, rel_time_t exptime,
                               bool touch, bool return_cas, bool *bad_key)
{
    *bad_key = false;
    char *from = tok[i].value;
    char *end = rest != NULL ? rest + strlen(rest)
                             : tok[ntok - 1].value + tok[ntok - 1].length;
    size_t run = 0;
    for (char *p = from; p < end; p++) {
        if (pt_is_sep(*p)) {
            run = 0;
        } else if (++run > KEY_MAX_LENGTH) {
            *bad_key = true;
            return false;
        }
    }
    struct pt_get_stream *g = malloc(sizeof(*g));
    if (g == NULL)
        return false;
    *g = (struct pt_get_stream){ .cur = from, .end = end, .exptime = exptime,
                                 .touch = touch, .return_cas = return_cas };
    conn_stream(c, pt_get_more, free, g);
    return true;
}

static void pt_process_get(conn *c, struct util_token *tok, size_t ntok,
                           char *rest, bool return_cas, bool touch)
{
    struct resp *mark = c->resp_tail;
    struct resp *cur = NULL;
    rel_time_t exptime = 0;
    size_t i = 1;
    /* UDP answers a datagram's requests at once, never in pieces (and a
     * datagram holds few keys). */
    bool pieces = c->transport != TRANSPORT_UDP;
    int nkeys = 0;

    if (touch) {
        int32_t e;
        if (!safe_strtol(tok[1].value, &e)) {
            out_string(c, "CLIENT_ERROR invalid exptime argument");
            return;
        }
        exptime = realtime(e);
        i = 2;
    }
    for (;;) {
        for (; i < ntok; i++) {
            if (tok[i].length > KEY_MAX_LENGTH) {
                pt_cancel_since(c, mark);
                out_string(c, "CLIENT_ERROR bad command line format");
                return;
            }
            /* memcached gives every key of a get a response object,
             * which -o read_buf_mem_limit bounds: so does this. */
            if (!conn_resp_room(c, ++nkeys))
                goto oom;
            if (pieces && i > 1 && pt_get_piece_full(c)) {
                bool bad_key;
                if (pt_get_stream_rest(c, tok, ntok, i, rest, exptime, touch,
                                       return_cas, &bad_key))
                    return;
                if (!bad_key)
                    goto oom;
                pt_cancel_since(c, mark);
                out_string(c, "CLIENT_ERROR bad command line format");
                return;
            }
            if (!pt_get_one(c, tok[i].value, tok[i].length, exptime, touch,
                            return_cas, &cur))
                goto oom;
        }
        if (rest == NULL)
            break;
        ntok = util_tokenize(rest, tok, ASCII_MAX_TOKENS, &rest);
        i = 0;
    }
    if (pt_add_static(c, &cur, "END\r\n", 5))
        return;
oom:
    pt_cancel_since(c, mark);
    out_errstring(c, "SERVER_ERROR out of memory writing get response");
}

/* ---- Storage -------------------------------------------------------- */

static void pt_process_update(conn *c, struct util_token *tok, size_t ntok,
                              enum store_op op)
{
    uint32_t flags;
    int32_t exptime, vlen;
    uint64_t req_cas = 0;

    pt_noreply_maybe(c, tok, ntok);
    if (tok[1].length > KEY_MAX_LENGTH ||
        !safe_strtoul(tok[2].value, &flags) ||
        !safe_strtol(tok[3].value, &exptime) ||
        !safe_strtol(tok[4].value, &vlen) ||
        (op == STORE_CAS && !safe_strtoull(tok[5].value, &req_cas)) ||
        vlen < 0 || vlen > INT32_MAX - 2) {
        out_string(c, "CLIENT_ERROR bad command line format");
        return;
    }
    size_t nbytes = (size_t)vlen + 2;
    item *it = item_alloc(tok[1].value, tok[1].length, flags,
                          realtime(exptime), nbytes, c->thread->partition);
    if (it == NULL) {
        if (!item_size_ok(tok[1].length, nbytes)) {
            STATS_INCR(&c->thread->stats, store_too_large);
            out_string(c, "SERVER_ERROR object too large for cache");
        } else {
            STATS_INCR(&c->thread->stats, store_no_memory);
            out_string(c, "SERVER_ERROR out of memory storing object");
        }
        c->sbytes = nbytes;
        conn_set_state(c, conn_swallow);
        /* A failed set must not leave the old value readable. */
        if (op == STORE_SET)
            item_delete(tok[1].value, tok[1].length, 0, NULL);
        return;
    }
    c->item = it;
    c->ritem = ITEM_data(it);
    c->rlbytes = nbytes;
    memset(&c->nr, 0, sizeof(c->nr));
    c->nr.cmd = ASCII_NREAD_CLASSIC | op;
    c->nr.req_cas = req_cas;
    c->nr.meta_flags = c->noreply ? ASCII_MS_NOREPLY : 0;
    conn_set_state(c, conn_nread);
}


/* memcached's store looks its key up first, and `watch fetchers` sees that
 * lookup as an item_get line before the store's line: so does this (only
 * while someone watches fetchers). */
static void pt_watch_store_lookup(conn *c, const item *it)
{
    enum item_miss why = MISS_NONE;
    item *old = item_get(ITEM_key(it), it->nkey, &why, false);
    conn_watch_get(c, ITEM_key(it), it->nkey, old, old != NULL, why,
                   old != NULL ? old->slabs_clsid : 0);
    if (old != NULL)
        item_release(old);
}

static void pt_complete_classic(conn *c, item *it)
{
    enum store_op op = ASCII_NREAD_OP(c->nr.cmd);
    struct thread_stats *ts = ASCII_STATS(c);

    c->noreply = (c->nr.meta_flags & ASCII_MS_NOREPLY) != 0;
    if (c->redo_tries == 0) {
        SLAB_STATS_INCR(ts, it->slabs_clsid, set_cmds);
        if (prefix_stats_on())
            prefix_stats_set(ITEM_key(it), it->nkey);
    }
    if (memcmp(ITEM_data(it) + it->nbytes - 2, "\r\n", 2) != 0) {
        out_string(c, "CLIENT_ERROR bad data chunk");
        return;
    }
    if (c->redo_tries == 0 && watch_on(WATCH_FETCHERS))
        pt_watch_store_lookup(c, it);
    enum store_result ret = ascii_store(c, it, op, c->nr.req_cas, NULL);
    switch (ascii_store_after(c, it, op, &ret)) {
    case ASCII_STORE_LATER:
        return;
    case ASCII_STORE_OOM:
        out_string(c, "SERVER_ERROR out of memory storing object");
        return;
    case ASCII_STORE_ANSWER:
        break;
    }
    switch (ret) {
    case STORE_STORED:
        out_string(c, "STORED");
        break;
    case STORE_EXISTS:
        out_string(c, "EXISTS");
        break;
    case STORE_NOT_FOUND:
        out_string(c, "NOT_FOUND");
        break;
    default:
        /* memcached answers NOT_STORED when append/prepend cannot
         * allocate or would exceed the item size limit. */
        out_string(c, "NOT_STORED");
        break;
    }
}

static void proto_text_complete_nread(conn *c)
{
    item *it = c->item;
    if (it == NULL) {
        conn_set_state(c, conn_new_cmd);
        return;
    }
    if (c->nr.cmd & ASCII_NREAD_META)
        proto_meta_complete_set(c);
    else
        pt_complete_classic(c, it);
    item_release(it);
    c->item = NULL;
    if (c->state != conn_closing)
        conn_set_state(c, conn_new_cmd);
}

static void proto_text_conn_cleanup(conn *c)
{
    if (c->item != NULL) {
        item_release(c->item);
        c->item = NULL;
    }
}

/* ---- incr/decr, delete, touch --------------------------------------- */

struct pt_arith_args {
    bool incr, noreply;
    uint64_t delta;
    size_t nkey;
    char key[KEY_MAX_LENGTH];
};

static void pt_arith_apply(conn *c, const struct pt_arith_args *a);

static void pt_arith_retry(conn *c, void *args)
{
    const struct pt_arith_args *a = args;
    c->noreply = a->noreply;
    pt_arith_apply(c, a);
}

static void pt_arith_apply(conn *c, const struct pt_arith_args *a)
{
    char out[32];
    bool incr = a->incr;
    switch (item_add_delta(a->key, a->nkey, incr, a->delta, 0, out,
                           NULL, c->thread->partition, c->prior)) {
    case DELTA_NEED_VALUE:
        conn_retry(c, a->key, a->nkey, pt_arith_retry, NULL, a, sizeof(*a));
        break;
    case DELTA_OK:
        ascii_count_delta_hit(c, a->nkey, out, incr);
        out_string(c, out);
        break;
    case DELTA_NON_NUMERIC:
        out_string(c, "CLIENT_ERROR cannot increment or decrement "
                      "non-numeric value");
        break;
    case DELTA_NO_MEMORY:
        out_string(c, "SERVER_ERROR out of memory");
        break;
    case DELTA_NOT_FOUND:
    default:
        if (incr)
            STATS_INCR(ASCII_STATS(c), incr_misses);
        else
            STATS_INCR(ASCII_STATS(c), decr_misses);
        out_string(c, "NOT_FOUND");
        break;
    }
}

static void pt_process_arith(conn *c, struct util_token *tok, size_t ntok,
                             bool incr)
{
    struct pt_arith_args a = { .incr = incr };

    pt_noreply_maybe(c, tok, ntok);
    if (tok[1].length > KEY_MAX_LENGTH) {
        out_string(c, "CLIENT_ERROR bad command line format");
        return;
    }
    if (!safe_strtoull(tok[2].value, &a.delta)) {
        out_string(c, "CLIENT_ERROR invalid numeric delta argument");
        return;
    }
    a.noreply = c->noreply;
    a.nkey = tok[1].length;
    memcpy(a.key, tok[1].value, a.nkey);
    pt_arith_apply(c, &a);
}

static void pt_process_delete(conn *c, struct util_token *tok, size_t ntok)
{
    if (ntok > 2) {
        /* memcached accepts a legacy hold time of exactly "0". */
        bool hold_zero = strcmp(tok[2].value, "0") == 0;
        pt_noreply_maybe(c, tok, ntok);
        bool valid = (ntok == 3 && (hold_zero || c->noreply)) ||
                     (ntok == 4 && hold_zero && c->noreply);
        if (!valid) {
            out_string(c, "CLIENT_ERROR bad command line format.  "
                          "Usage: delete <key> [noreply]");
            return;
        }
    }
    const char *key = tok[1].value;
    size_t nkey = tok[1].length;
    if (nkey > KEY_MAX_LENGTH) {
        out_string(c, "CLIENT_ERROR bad command line format");
        return;
    }
    unsigned int clsid;
    bool found = item_delete(key, nkey, 0, &clsid) == DELETE_OK;
    if (prefix_stats_on())
        prefix_stats_delete(key, nkey);
    if (found)
        SLAB_STATS_INCR(ASCII_STATS(c), clsid, delete_hits);
    else
        STATS_INCR(ASCII_STATS(c), delete_misses);
    out_string(c, found ? "DELETED" : "NOT_FOUND");
}

static void pt_process_touch(conn *c, struct util_token *tok, size_t ntok)
{
    int32_t exptime;

    pt_noreply_maybe(c, tok, ntok);
    if (tok[1].length > KEY_MAX_LENGTH) {
        out_string(c, "CLIENT_ERROR bad command line format");
        return;
    }
    if (!safe_strtol(tok[2].value, &exptime)) {
        out_string(c, "CLIENT_ERROR invalid exptime argument");
        return;
    }
    enum item_miss why = MISS_NONE;
    item *it = item_get_and_touch(tok[1].value, tok[1].length,
                                  realtime(exptime), &why);
    pt_count_miss_reason(c, why);
    STATS_INCR(ASCII_STATS(c), touch_cmds);
    if (it != NULL) {
        SLAB_STATS_INCR(ASCII_STATS(c), it->slabs_clsid, touch_hits);
        item_release(it);
        out_string(c, "TOUCHED");
    } else {
        STATS_INCR(ASCII_STATS(c), touch_misses);
        out_string(c, "NOT_FOUND");
    }
}

/* ---- Administrative commands ---------------------------------------- */

static void pt_process_flush_all(conn *c, struct util_token *tok, size_t ntok)
{
    int32_t exptime = 0;

    pt_noreply_maybe(c, tok, ntok);
    STATS_INCR(ASCII_STATS(c), flush_cmds);
    if (!settings.flush_enabled) {
        out_string(c, "CLIENT_ERROR flush_all not allowed");
        return;
    }
    if (ntok != (c->noreply ? 2u : 1u) &&
        !safe_strtol(tok[1].value, &exptime)) {
        out_string(c, "CLIENT_ERROR invalid exptime argument");
        return;
    }
    /* A zero or negative delay means now. */
    item_flush(exptime > 0 ? realtime(exptime) : 0);
    out_string(c, "OK");
}

static void pt_process_verbosity(conn *c, struct util_token *tok, size_t ntok)
{
    uint32_t level;

    pt_noreply_maybe(c, tok, ntok);
    if (!safe_strtoul(tok[1].value, &level)) {
        out_string(c, "CLIENT_ERROR bad command line format");
        return;
    }
    int v = level > ASCII_MAX_VERBOSITY ? ASCII_MAX_VERBOSITY : (int)level;
    __atomic_store_n(&settings.verbose, v, __ATOMIC_RELAXED);
    out_string(c, "OK");
}

/* cache_memlimit: validated like memcached; resizing -m at run time is
 * not supported by the slab allocator, so a valid request is refused. */
static void pt_process_memlimit(conn *c, struct util_token *tok, size_t ntok)
{
    uint32_t mb;

    pt_noreply_maybe(c, tok, ntok);
    if (!safe_strtoul(tok[1].value, &mb))
        out_string(c, "ERROR");
    else if (mb < 8)
        out_string(c, "MEMLIMIT_TOO_SMALL cannot set maxbytes to less "
                      "than 8m");
    else if (mb > 1000000000)
        out_string(c, "MEMLIMIT_ADJUST_FAILED input value is megabytes "
                      "not bytes");
    else if (slabs_adjust_mem_limit((size_t)mb << 20))
        out_string(c, "OK");
    else
        out_string(c, "MEMLIMIT_ADJUST_FAILED out of bounds or unable to "
                      "adjust");
}

static void pt_process_shutdown(conn *c, struct util_token *tok, size_t ntok)
{
    if (!settings.shutdown_command) {
        out_string(c, "ERROR: shutdown not enabled");
        return;
    }
    if (ntok == 1 || (ntok == 2 && strcmp(tok[1].value, "graceful") == 0)) {
        server_request_shutdown();
        conn_set_state(c, conn_closing);
        return;
    }
    out_string(c, "CLIENT_ERROR invalid shutdown mode");
}

static void pt_process_quit(conn *c)
{
    c->close_after_write = true;
    conn_set_state(c, conn_write);
}

/* Queues a malloc'd stats answer (NULL: out of memory), which the
 * response frees once sent. */
static void pt_send_stats(conn *c, char *buf, size_t len)
{
    if (buf == NULL || !resp_give(c, buf, len))
        out_errstring(c, "SERVER_ERROR out of memory writing stats");
}

static void pt_stats_detail(conn *c, struct util_token *tok, size_t ntok)
{
    const char *arg = ntok >= 3 ? tok[2].value : "";
    if (strcmp(arg, "on") == 0 || strcmp(arg, "off") == 0) {
        prefix_stats_enable(arg[1] == 'n');
        out_string(c, "OK");
    } else if (strcmp(arg, "dump") == 0) {
        size_t len;
        char *buf = prefix_stats_dump(&len);
        pt_send_stats(c, buf, len);
    } else {
        out_string(c, "CLIENT_ERROR usage: stats detail on|off|dump");
    }
}

static void pt_process_stats(conn *c, struct util_token *tok, size_t ntok)
{
    const char *sub = ntok >= 2 ? tok[1].value : NULL;

    if (sub != NULL && strcmp(sub, "reset") == 0) {
        stats_reset();
        out_string(c, "RESET");
        return;
    }
    if (sub != NULL && strcmp(sub, "detail") == 0) {
        pt_stats_detail(c, tok, ntok);
        return;
    }
    if (sub != NULL && strcmp(sub, "cachedump") == 0) {
        pt_stats_cachedump(c, tok, ntok);
        return;
    }
    struct stat_text text;
    struct stat_sink sink;
    stat_text_init(&text, &sink);
    bool known = stats_run(sub, &sink);
    size_t len = 0;
    char *buf = stat_text_finish(&text, &len);
    if (!known) {
        free(buf);
        out_string(c, "ERROR");
        return;
    }
    pt_send_stats(c, buf, len);
}

static void pt_process_version(conn *c)
{
    out_string(c, "VERSION " SERVER_VERSION);
}

/* ---- Dispatch -------------------------------------------------------- */

enum pt_cmd {
    CMD_GET, CMD_GETS, CMD_GAT, CMD_GATS, CMD_BGET,
    CMD_SET, CMD_ADD, CMD_REPLACE, CMD_APPEND, CMD_PREPEND, CMD_CAS,
    CMD_INCR, CMD_DECR, CMD_DELETE, CMD_TOUCH,
    CMD_FLUSH_ALL, CMD_VERSION, CMD_QUIT, CMD_SHUTDOWN, CMD_STATS,
    CMD_VERBOSITY, CMD_MEMLIMIT, CMD_SLABS, CMD_LRU_CRAWLER, CMD_LRU,
    CMD_EXTSTORE,
    CMD_WATCH,
    CMD_REFRESH_CERTS,
    CMD_DEBUG_CRASH_AT, CMD_DEBUG_CRASH_PASSES,
};

/* slabs reassign <src> <dst> | slabs automove <0|1|2> (memcached's
 * answers).  A reassign is queued for the page mover in the maintainer
 * thread. */
static void pt_process_slabs(conn *c, struct util_token *tok, size_t ntok)
{
    if (ntok == 4 && strcmp(tok[1].value, "reassign") == 0) {
        int32_t src, dst;
        if (!settings.slab_reassign) {
            out_errstring(c, "CLIENT_ERROR slab reassignment disabled");
            return;
        }
        if (!safe_strtol(tok[2].value, &src) || !safe_strtol(tok[3].value, &dst) ||
            src < 0 || dst < 0) {
            out_string(c, "CLIENT_ERROR bad command line format");
            return;
        }
        switch (slabs_reassign_request((unsigned)src, (unsigned)dst)) {
        case SLABS_REASSIGN_OK: out_string(c, "OK"); break;
        case SLABS_REASSIGN_RUNNING:
            out_string(c, "BUSY currently processing reassign request"); break;
        case SLABS_REASSIGN_BADCLASS:
            out_string(c, "BADCLASS invalid src or dst class id"); break;
        case SLABS_REASSIGN_NOSPARE:
            out_string(c, "NOSPARE source class has no spare pages"); break;
        case SLABS_REASSIGN_SAME:
            out_string(c, "SAME src and dst class are identical"); break;
        }
        return;
    }
    if (ntok == 3 && strcmp(tok[1].value, "automove") == 0) {
        uint32_t level;
        if (!safe_strtoul(tok[2].value, &level) || level > 2) {
            out_string(c, "CLIENT_ERROR bad command line format");
            return;
        }
        __atomic_store_n(&settings.slab_automove, (int)level, __ATOMIC_RELAXED);
        out_string(c, "OK");
        return;
    }
    out_string(c, "ERROR");
}

/* lru tune|mode|temp_ttl: memcached's run-time settings of its segmented
 * LRU (engine/lru_seg.c), with memcached's answers.  With a lower tier,
 * turning the segmented LRU or the TEMP queue on answers an error that
 * says why: the tiers keep the Lazy LRU. */
static void pt_process_lru(conn *c, struct util_token *tok, size_t ntok)
{
    pt_noreply_maybe(c, tok, ntok);
    const char *sub = tok[1].value;
    if (ntok >= 6 && strcmp(sub, "tune") == 0) {
        uint32_t hot, warm;
        double hot_factor, warm_factor;
        char *e1, *e2;
        errno = 0;
        hot_factor = strtod(tok[4].value, &e1);
        warm_factor = strtod(tok[5].value, &e2);
        if (!safe_strtoul(tok[2].value, &hot) || !safe_strtoul(tok[3].value, &warm) ||
            errno != 0 || e1 == tok[4].value || *e1 != '\0' ||
            e2 == tok[5].value || *e2 != '\0' ||
            !isfinite(hot_factor) || !isfinite(warm_factor)) {
            out_string(c, "ERROR");
        } else if ((uint64_t)hot + warm > 80) {
            out_string(c, "ERROR hot and warm pcts must not exceed 80");
        } else if (!(hot_factor > 0) || !(warm_factor > 0)) {
            out_string(c, "ERROR hot/warm age factors must be greater than 0");
        } else {
            __atomic_store_n(&settings.hot_lru_pct, (int)hot, __ATOMIC_RELAXED);
            __atomic_store_n(&settings.warm_lru_pct, (int)warm, __ATOMIC_RELAXED);
            __atomic_store(&settings.hot_max_factor, &hot_factor, __ATOMIC_RELAXED);
            __atomic_store(&settings.warm_max_factor, &warm_factor, __ATOMIC_RELAXED);
            out_string(c, "OK");
        }
    } else if (ntok >= 3 && strcmp(sub, "mode") == 0) {
        bool seg = strcmp(tok[2].value, "segmented") == 0;
        if (!seg && strcmp(tok[2].value, "flat") != 0)
            out_string(c, "ERROR");
        else if (!items_seg_set_mode(seg))
            out_string(c, "ERROR lru mode segmented has no meaning with a lower tier: "
                          "its Lazy LRU decides what moves down");
        else
            out_string(c, "OK");
    } else if (ntok >= 3 && strcmp(sub, "temp_ttl") == 0) {
        int32_t ttl;
        if (!safe_strtol(tok[2].value, &ttl))
            out_string(c, "ERROR");
        else if (!items_seg_set_temp(ttl >= 0, ttl))
            out_string(c, "ERROR lru temp_ttl has no meaning with a lower tier: "
                          "its Lazy LRU decides what moves down");
        else
            out_string(c, "OK");
    } else {
        out_string(c, "ERROR");
    }
}

/* extstore <setting> <value> [noreply]: memcached's run-time tuning of its
 * flash store, for the SSD tier's settings that have a meaning here
 * (settings.c's -o ext_* rows say which); the others are refused with the
 * reason.  Without an SSD tier there is no such command, as in a memcached
 * built without extstore. */
static void pt_process_extstore(conn *c, struct util_token *tok, size_t ntok)
{
    pt_noreply_maybe(c, tok, ntok);
    if (settings.ssd_path == NULL) {
        out_string(c, "ERROR");
        return;
    }
    const char *sub = tok[1].value, *arg = tok[2].value;
    char *end;
    errno = 0;
    if (strcmp(sub, "max_frag") == 0) {
        double v = strtod(arg, &end);
        if (errno != 0 || end == arg || *end != '\0' || !(v >= 0.0 && v <= 1.0)) {
            out_string(c, "ERROR");
            return;
        }
        __atomic_store(&settings.ext_max_frag, &v, __ATOMIC_RELAXED);
        out_string(c, "OK");
        return;
    }
    bool compact = strcmp(sub, "compact_under") == 0;
    int *field = strcmp(sub, "item_size") == 0 ? &settings.ext_item_size
               : strcmp(sub, "item_age") == 0 ? &settings.ext_item_age
               : strcmp(sub, "recache_rate") == 0 ? &settings.ext_recache_rate
               : strcmp(sub, "drop_under") == 0 ? &settings.ext_drop_under
               : strcmp(sub, "low_ttl") == 0 ? &settings.ext_low_ttl
               : NULL;
    bool unread = strcmp(sub, "drop_unread") == 0;
    if (field == NULL && !unread && !compact) {
        if (strcmp(sub, "max_sleep") == 0 || strcmp(sub, "free_memchunks") == 0)
            out_string(c, "ERROR extstore setting has no meaning here: there are no "
                          "write thread sleeps or item header chunks to tune");
        else
            out_string(c, "ERROR");
        return;
    }
    unsigned long v = strtoul(arg, &end, 10);
    if (errno != 0 || end == arg || *end != '\0' || arg[0] == '-' || v > (1UL << 30)) {
        out_string(c, "ERROR");
        return;
    }
    if (unread)
        __atomic_store_n(&settings.ext_drop_unread, v != 0, __ATOMIC_RELAXED);
    else if (compact) {
        settings_set_compact_under((int)v);
    }
    else
        __atomic_store_n(field, (int)v, __ATOMIC_RELAXED);
    out_string(c, "OK");
}

/* refresh_certs: -Z's certificate, key and CA files read again for new
 * connections, as memcached's. */
static void pt_refresh_certs(conn *c)
{
    char err[512], line[600];
    if (!settings.tls) {
        out_string(c, "CLIENT_ERROR TLS is not enabled (-Z)");
    } else if (tls_refresh(err, sizeof(err))) {
        out_string(c, "OK");
    } else {
        for (char *p = err; *p != '\0'; p++)
            if (*p == '\r' || *p == '\n')
                *p = ' ';
        snprintf(line, sizeof(line), "ERROR %s", err);
        out_string(c, line);
    }
}

/* Token counts (command included) each command accepts; a count outside
 * the range is answered "ERROR", as memcached does.  PT_ANY: no limit. */
#define PT_ANY 255
static const struct pt_cmd_def {
    const char *name;
    unsigned char len;      /* strlen(name) */
    enum pt_cmd cmd;
    unsigned char min, max;
} pt_cmds[] = {
#define PT_CMD(name, cmd, min, max) { name, sizeof(name) - 1, cmd, min, max }
    PT_CMD("get",            CMD_GET,       2, PT_ANY),
    PT_CMD("gets",           CMD_GETS,      2, PT_ANY),
    PT_CMD("gat",            CMD_GAT,       2, PT_ANY),
    PT_CMD("gats",           CMD_GATS,      2, PT_ANY),
    PT_CMD("bget",           CMD_BGET,      2, PT_ANY),
    PT_CMD("set",            CMD_SET,       5, 6),
    PT_CMD("add",            CMD_ADD,       5, 6),
    PT_CMD("replace",        CMD_REPLACE,   5, 6),
    PT_CMD("append",         CMD_APPEND,    5, 6),
    PT_CMD("prepend",        CMD_PREPEND,   5, 6),
    PT_CMD("cas",            CMD_CAS,       6, 7),
    PT_CMD("incr",           CMD_INCR,      3, 4),
    PT_CMD("decr",           CMD_DECR,      3, 4),
    PT_CMD("delete",         CMD_DELETE,    2, 4),
    PT_CMD("touch",          CMD_TOUCH,     3, 4),
    PT_CMD("flush_all",      CMD_FLUSH_ALL, 1, 3),
    PT_CMD("version",        CMD_VERSION,   1, PT_ANY),
    PT_CMD("quit",           CMD_QUIT,      1, PT_ANY),
    PT_CMD("shutdown",       CMD_SHUTDOWN,  1, PT_ANY),
    PT_CMD("stats",          CMD_STATS,     1, PT_ANY),
    PT_CMD("verbosity",      CMD_VERBOSITY, 2, 3),
    PT_CMD("cache_memlimit", CMD_MEMLIMIT,  2, 3),
    PT_CMD("slabs",          CMD_SLABS,     3, 4),
    PT_CMD("lru_crawler",    CMD_LRU_CRAWLER, 2, 3),
    PT_CMD("lru",            CMD_LRU,       2, PT_ANY),
    PT_CMD("extstore",       CMD_EXTSTORE,  3, 4),
    PT_CMD("watch",          CMD_WATCH,     1, PT_ANY),
    PT_CMD("refresh_certs",  CMD_REFRESH_CERTS, 1, 1),
#ifdef TAC_DEBUG_HOOKS
    PT_CMD("debug_crash_at", CMD_DEBUG_CRASH_AT, 2, 2),
    PT_CMD("debug_crash_passes", CMD_DEBUG_CRASH_PASSES, 1, 1),
#endif
#undef PT_CMD
};

static void pt_run(conn *c, enum pt_cmd cmd, struct util_token *tok,
                   size_t ntok, char *rest)
{
    static const enum store_op ops[] = {
        [CMD_SET] = STORE_SET, [CMD_ADD] = STORE_ADD,
        [CMD_REPLACE] = STORE_REPLACE, [CMD_APPEND] = STORE_APPEND,
        [CMD_PREPEND] = STORE_PREPEND, [CMD_CAS] = STORE_CAS,
    };
    switch (cmd) {
    case CMD_GET: case CMD_BGET:
        pt_process_get(c, tok, ntok, rest, false, false); break;
    case CMD_GETS: pt_process_get(c, tok, ntok, rest, true, false); break;
    case CMD_GAT:  pt_process_get(c, tok, ntok, rest, false, true); break;
    case CMD_GATS: pt_process_get(c, tok, ntok, rest, true, true); break;
    case CMD_SET: case CMD_ADD: case CMD_REPLACE: case CMD_APPEND:
    case CMD_PREPEND: case CMD_CAS:
        pt_process_update(c, tok, ntok, ops[cmd]); break;
    case CMD_INCR: pt_process_arith(c, tok, ntok, true); break;
    case CMD_DECR: pt_process_arith(c, tok, ntok, false); break;
    case CMD_DELETE: pt_process_delete(c, tok, ntok); break;
    case CMD_TOUCH: pt_process_touch(c, tok, ntok); break;
    case CMD_FLUSH_ALL: pt_process_flush_all(c, tok, ntok); break;
    case CMD_VERSION: pt_process_version(c); break;
    case CMD_QUIT: pt_process_quit(c); break;
    case CMD_SHUTDOWN: pt_process_shutdown(c, tok, ntok); break;
    case CMD_STATS: pt_process_stats(c, tok, ntok); break;
    case CMD_VERBOSITY: pt_process_verbosity(c, tok, ntok); break;
    case CMD_MEMLIMIT: pt_process_memlimit(c, tok, ntok); break;
    case CMD_SLABS: pt_process_slabs(c, tok, ntok); break;
    case CMD_LRU_CRAWLER: pt_lru_crawler(c, tok, ntok); break;
    case CMD_LRU: pt_process_lru(c, tok, ntok); break;
    case CMD_EXTSTORE: pt_process_extstore(c, tok, ntok); break;
    case CMD_REFRESH_CERTS: pt_refresh_certs(c); break;
    case CMD_DEBUG_CRASH_AT:
#ifdef TAC_DEBUG_HOOKS
        out_string(c, crash_point_arm(tok[1].value) ? "OK"
                      : "CLIENT_ERROR no such crash point (TAC_CRASH_LIST=1)");
#endif
        break;
    case CMD_DEBUG_CRASH_PASSES:
#ifdef TAC_DEBUG_HOOKS
        {
            char line[48];
            snprintf(line, sizeof(line), "PASSES %lu", crash_point_passes());
            out_string(c, line);
        }
#endif
        break;
    case CMD_WATCH: pt_watch(c, tok, ntok); break;
    }
}

/* Handles one NUL-terminated command line. */
static void pt_process_line(conn *c, char *line)
{
    struct util_token tok[ASCII_MAX_TOKENS];
    char *rest;
    size_t ntok = util_tokenize(line, tok, ASCII_MAX_TOKENS, &rest);

    /* No command is shorter than two bytes. */
    if (ntok == 0 || tok[0].length < 2) {
        out_string(c, "ERROR");
        return;
    }
    if (tok[0].value[0] == 'm' && tok[0].length == 2) {
        c->last_cmd = "meta";
        proto_meta_process(c, tok, ntok, rest);
        return;
    }
    for (size_t i = 0; i < sizeof(pt_cmds) / sizeof(pt_cmds[0]); i++) {
        const struct pt_cmd_def *d = &pt_cmds[i];
        if (d->len != tok[0].length || d->name[0] != tok[0].value[0] ||
            memcmp(tok[0].value, d->name, d->len) != 0)
            continue;
        c->last_cmd = d->name;
        /* More tokens than one tokenizer pass holds: memcached's count. */
        size_t n = rest != NULL ? ASCII_MAX_TOKENS + 1 : ntok;
        if (n < d->min || n > d->max)
            out_string(c, "ERROR");
        else
            pt_run(c, d->cmd, tok, ntok, rest);
        return;
    }
    /* An HTTP request line ("POST / HTTP/1.1"): a browser may have been
     * made to send cache commands in a request body.  Close at once, as
     * memcached does; nothing after this line is executed. */
    if (ntok >= 2 && rest == NULL &&
        strncmp(tok[ntok - 1].value, "HTTP/", 5) == 0) {
        if (__atomic_load_n(&settings.verbose, __ATOMIC_RELAXED) > 0)
            fprintf(stderr, "<%d HTTP request line: closing\n", c->sfd);
        c->close_reason = "error";      /* a protocol error, as memcached logs it */
        c->rcurr += c->rbytes;
        c->rbytes = 0;
        conn_set_state(c, conn_closing);
        return;
    }
    out_string(c, "ERROR");
}

/* True if a line that starts at p (len bytes so far) is a retrieval
 * command, which may legitimately be longer than PT_LINE_MAX. */
static bool pt_is_long_get(const char *p, size_t len)
{
    size_t i = 0;
    while (i < len && p[i] == ' ')
        i++;
    if (i > 100)
        return false;
    static const char *const names[] = { "get ", "gets ", "gat ", "gats " };
    for (size_t k = 0; k < 4; k++) {
        size_t n = strlen(names[k]);
        if (len - i >= n && memcmp(p + i, names[k], n) == 0)
            return true;
    }
    return false;
}

/*
 * -Y guessing.  A connection gets PT_AUTH_MAX_GUESSES refused passwords (a
 * `set` whose data is not a known "user password", or is not of that
 * form), as -S gets SASL_AUTH_MAX_FAILURES; the last one is answered and
 * the connection closed.  Other commands before authentication are refused
 * one by one (memcached's `CLIENT_ERROR unauthenticated`) and never run;
 * the PT_AUTH_MAX_REFUSALS-th refusal of any kind closes it too.  What
 * cannot be framed (no end of line within PT_LINE_MAX, a `set` line that
 * does not parse or announces more than PT_AUTH_DATA_MAX bytes, data not
 * ended by "\r\n") is refused and closes at once: nothing after it can be
 * told apart.  memcached allows any number of guesses on one connection.
 */
#define PT_AUTH_MAX_GUESSES 3
#define PT_AUTH_MAX_REFUSALS 16
#define PT_AUTH_DATA_MAX 1024

/* Answers `why`, drops the `used` bytes of the refused command (all that
 * was read when `close` is set) and closes when asked or when the bounds
 * are reached. */
static enum proto_result pt_auth_refuse(conn *c, const char *why, size_t used,
                                        bool guess, bool close)
{
    GSTATS_INCR(auth_errors);
    out_errstring(c, why);
    if (guess && ++c->auth_guesses >= PT_AUTH_MAX_GUESSES)
        close = true;
    if (++c->auth_refusals >= PT_AUTH_MAX_REFUSALS)
        close = true;
    if (close || used > c->rbytes)
        used = c->rbytes;
    c->rcurr += used;
    c->rbytes -= used;
    if (close)
        c->close_after_write = true;
    conn_set_state(c, conn_write);
    return PROTO_DONE;
}

/*
 * -Y: a connection is opened by memcached's handshake, `set <key> <flags>
 * <exptime> <bytes>` with "user password" as its data (the key and the
 * rest are not looked at).  A known pair is answered STORED and opens the
 * connection to every command; anything else is refused as above.
 */
static enum proto_result pt_authenticate(conn *c)
{
    char *el = memchr(c->rcurr, '\n', c->rbytes);
    if (el == NULL)
        return c->rbytes > PT_LINE_MAX
               ? pt_auth_refuse(c, "CLIENT_ERROR unauthenticated", 0, false, true)
               : PROTO_NEED_MORE;
    size_t linelen = (size_t)(el + 1 - c->rcurr);
    char line[PT_LINE_MAX + 1];
    if (linelen > PT_LINE_MAX)
        return pt_auth_refuse(c, "CLIENT_ERROR unauthenticated", 0, false, true);
    size_t n = linelen - 1;
    memcpy(line, c->rcurr, n);
    if (n > 0 && line[n - 1] == '\r')
        n--;
    line[n] = '\0';
    struct util_token tok[ASCII_MAX_TOKENS];
    char *rest;
    size_t ntok = util_tokenize(line, tok, ASCII_MAX_TOKENS, &rest);
    if (ntok == 0 || strcmp(tok[0].value, "set") != 0)
        return pt_auth_refuse(c, "CLIENT_ERROR unauthenticated", linelen, false, false);
    uint32_t nbytes = 0;
    if (ntok != 5 || rest != NULL || !safe_strtoul(tok[4].value, &nbytes) ||
        nbytes > PT_AUTH_DATA_MAX)
        return pt_auth_refuse(c, "CLIENT_ERROR unauthenticated", 0, true, true);
    if (c->rbytes < linelen + nbytes + 2)
        return PROTO_NEED_MORE;
    const char *data = c->rcurr + linelen;
    const char *space = memchr(data, ' ', nbytes);
    bool framed = data[nbytes] == '\r' && data[nbytes + 1] == '\n';
    size_t used = linelen + nbytes + 2;
    GSTATS_INCR(auth_cmds);
    if (!framed || space == NULL)
        return pt_auth_refuse(c, "CLIENT_ERROR bad authentication token format",
                              used, true, !framed);
    if (!auth_check_db(AUTH_DB_ASCII, data, (size_t)(space - data), space + 1,
                    nbytes - (size_t)(space - data) - 1))
        return pt_auth_refuse(c, "CLIENT_ERROR authentication failure", used, true, false);
    c->rcurr += used;
    c->rbytes -= used;
    c->authenticated = true;
    out_string(c, "STORED");
    return PROTO_DONE;
}

static enum proto_result proto_text_try_command(conn *c)
{
    if (c->rbytes == 0)
        return PROTO_NEED_MORE;
    if (!c->authenticated)
        return pt_authenticate(c);
    char *el = memchr(c->rcurr, '\n', c->rbytes);
    if (el == NULL) {
        if (c->rbytes > PT_LINE_MAX && !pt_is_long_get(c->rcurr, c->rbytes)) {
            out_errstring(c, "CLIENT_ERROR line too long");
            c->rcurr += c->rbytes;
            c->rbytes = 0;
            c->close_after_write = true;
            conn_set_state(c, conn_write);
            return PROTO_DONE;
        }
        return PROTO_NEED_MORE;
    }
    char *next = el + 1;
    if (el - c->rcurr > 1 && el[-1] == '\r')
        el--;
    *el = '\0';

    c->noreply = false;
    __atomic_store_n(&c->last_cmd_time, mc_now(), __ATOMIC_RELAXED);
    char *line = c->rcurr;
    if (__atomic_load_n(&settings.verbose, __ATOMIC_RELAXED) > 1)
        fprintf(stderr, "<%d %s\n", c->sfd, line);
    c->rbytes -= (size_t)(next - c->rcurr);
    c->rcurr = next;
    pt_process_line(c, line);
    if (c->close_after_write) {
        /* quit: nothing after it is parsed. */
        c->rcurr += c->rbytes;
        c->rbytes = 0;
    }
    return PROTO_DONE;
}

const struct conn_protocol_ops proto_text_ops = {
    .try_command = proto_text_try_command,
    .complete_nread = proto_text_complete_nread,
    .cleanup = proto_text_conn_cleanup,
};

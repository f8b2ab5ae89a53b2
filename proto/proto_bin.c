/*
 * proto_bin.c - memcached's binary protocol.
 *
 * Design.  A connection whose first byte is 0x80 speaks binary (conn.c
 * decides).  A request is a 24-byte header, then extras, key and value.
 * proto_bin_try_command() waits until header, extras and key are buffered,
 * validates the lengths for the opcode and runs the command; a value is
 * read straight into a new item (conn_nread) and finished in
 * proto_bin_complete_nread().  Quiet opcodes suppress success replies (and
 * misses for getq/getkq); errors are always sent, as memcached does.  A
 * header whose lengths do not add up, or a key over 250 bytes, gets an
 * error reply and the connection is closed after it.  A bad magic byte
 * closes the connection at once.
 *
 * Threads.  Runs on the connection's worker thread only.
 */
#include "config.h"

#include <arpa/inet.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "net/conn.h"
#include "net/conn_park.h"
#include "engine/items.h"
#include "base/prefix_stats.h"
#include "proto/proto_bin.h"
#include "net/sasl_auth.h"
#include "base/stats.h"
#include "base/watch.h"
#include "net/worker.h"

#define BIN_HEADER_LEN 24
#define BIN_REQ_MAGIC 0x80
#define BIN_RES_MAGIC 0x81

enum bin_opcode {
    OP_GET = 0x00, OP_SET = 0x01, OP_ADD = 0x02, OP_REPLACE = 0x03,
    OP_DELETE = 0x04, OP_INCREMENT = 0x05, OP_DECREMENT = 0x06,
    OP_QUIT = 0x07, OP_FLUSH = 0x08, OP_GETQ = 0x09, OP_NOOP = 0x0a,
    OP_VERSION = 0x0b, OP_GETK = 0x0c, OP_GETKQ = 0x0d, OP_APPEND = 0x0e,
    OP_PREPEND = 0x0f, OP_STAT = 0x10, OP_SETQ = 0x11, OP_ADDQ = 0x12,
    OP_REPLACEQ = 0x13, OP_DELETEQ = 0x14, OP_INCREMENTQ = 0x15,
    OP_DECREMENTQ = 0x16, OP_QUITQ = 0x17, OP_FLUSHQ = 0x18,
    OP_APPENDQ = 0x19, OP_PREPENDQ = 0x1a, OP_VERBOSITY = 0x1b,
    OP_TOUCH = 0x1c, OP_GAT = 0x1d, OP_GATQ = 0x1e, OP_GATK = 0x23,
    OP_GATKQ = 0x24, OP_SASL_LIST_MECHS = 0x20, OP_SASL_AUTH = 0x21,
    OP_SASL_STEP = 0x22,
};

enum bin_status {
    ST_SUCCESS = 0x00, ST_KEY_ENOENT = 0x01, ST_KEY_EEXISTS = 0x02,
    ST_E2BIG = 0x03, ST_EINVAL = 0x04, ST_NOT_STORED = 0x05,
    ST_DELTA_BADVAL = 0x06, ST_AUTH_ERROR = 0x20, ST_AUTH_CONTINUE = 0x21,
    ST_UNKNOWN_COMMAND = 0x81, ST_ENOMEM = 0x82,
};

/* ---- Byte order helpers ------------------------------------------------- */

static uint16_t rd16(const unsigned char *p) { return (uint16_t)(p[0] << 8 | p[1]); }
static uint32_t rd32(const unsigned char *p)
{
    return (uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 | (uint32_t)p[2] << 8 | p[3];
}
static uint64_t rd64(const unsigned char *p)
{
    return (uint64_t)rd32(p) << 32 | rd32(p + 4);
}
static void wr16(unsigned char *p, uint16_t v) { p[0] = v >> 8; p[1] = v & 0xff; }
static void wr32(unsigned char *p, uint32_t v)
{
    p[0] = v >> 24; p[1] = (v >> 16) & 0xff; p[2] = (v >> 8) & 0xff; p[3] = v & 0xff;
}
static void wr64(unsigned char *p, uint64_t v)
{
    wr32(p, (uint32_t)(v >> 32));
    wr32(p + 4, (uint32_t)v);
}

/* ---- Responses ---------------------------------------------------------- */

/* Starts a response with its header; extras and key bytes, when given, are
 * copied into the resp buffer.  The caller adds `bodylen - extlen - keylen`
 * more bytes.  Returns NULL (and closes the connection) on OOM. */
static struct resp *bin_response(conn *c, uint16_t status, const void *extras,
                                 uint8_t extlen, const void *key,
                                 uint16_t keylen, uint32_t bodylen, uint64_t cas)
{
    struct resp *r = resp_new(c);
    unsigned char hdr[BIN_HEADER_LEN];
    if (!r) {
        conn_set_state(c, conn_closing);
        return NULL;
    }
    hdr[0] = BIN_RES_MAGIC;
    hdr[1] = c->bin.opcode;
    wr16(hdr + 2, keylen);
    hdr[4] = extlen;
    hdr[5] = 0;
    wr16(hdr + 6, status);
    wr32(hdr + 8, bodylen);
    memcpy(hdr + 12, &c->bin.opaque, 4);
    wr64(hdr + 16, cas);
    if (!resp_add_text(r, (const char *)hdr, sizeof(hdr)) ||
        (extlen && !resp_add_text(r, extras, extlen)) ||
        (keylen && !resp_add_text(r, key, keylen))) {
        conn_set_state(c, conn_closing);
        return NULL;
    }
    return r;
}

static const char *bin_status_text(uint16_t status)
{
    switch (status) {
    case ST_KEY_ENOENT: return "Not found";
    case ST_KEY_EEXISTS: return "Data exists for key.";
    case ST_E2BIG: return "Too large.";
    case ST_EINVAL: return "Invalid arguments";
    case ST_NOT_STORED: return "Not stored.";
    case ST_DELTA_BADVAL: return "Non-numeric server-side value for incr or decr";
    case ST_AUTH_ERROR: return "Auth failure.";
    case ST_UNKNOWN_COMMAND: return "Unknown command";
    case ST_ENOMEM: return "Out of memory";
    default: return "";
    }
}

/* Errors are sent even for quiet opcodes.  swallow: value bytes to skip. */
static void bin_error(conn *c, uint16_t status, size_t swallow)
{
    const char *text = bin_status_text(status);
    size_t len = strlen(text);
    struct resp *r = bin_response(c, status, NULL, 0, NULL, 0, (uint32_t)len, 0);
    if (r && !resp_add_iov(r, text, len))
        conn_set_state(c, conn_closing);
    if (swallow > 0 && c->state != conn_closing) {
        c->sbytes = swallow;
        conn_set_state(c, conn_swallow);
    }
}

/* A success reply with no body; suppressed for quiet opcodes. */
static void bin_ok(conn *c, uint64_t cas)
{
    if (!c->bin.quiet)
        bin_response(c, ST_SUCCESS, NULL, 0, NULL, 0, 0, cas);
}

/* Answers a malformed request and closes the connection after it. */
static void bin_protocol_error(conn *c, uint16_t status)
{
    bin_error(c, status, 0);
    c->close_after_write = true;
    conn_set_state(c, conn_write);
}

/* ---- Commands ----------------------------------------------------------- */

/* The hit response of a get/gat/touch: `it` holds the value when
 * with_value (else only its metadata is sent); the response takes over the
 * reference. */
static void bin_send_hit(conn *c, item *it, bool with_key, bool with_value)
{
    unsigned char flags[4];
    wr32(flags, it->flags);
    uint32_t vlen = with_value ? it->nbytes - 2 : 0;
    uint16_t klen = with_key ? it->nkey : 0;
    /* Without its value, `it` may be a meta tuple, which has no key. */
    struct resp *r = bin_response(c, ST_SUCCESS, flags, 4, with_key ? ITEM_key(it) : NULL, klen,
                                  4 + klen + vlen, it->cas);
    if (!r || (vlen && !resp_add_iov(r, ITEM_data(it), vlen)) ||
        !resp_hold_item(r, it)) {
        item_release(it);
        conn_set_state(c, conn_closing);
    }
}

static void bin_send_miss(conn *c, const char *key, uint16_t nkey,
                          bool with_key)
{
    if (c->bin.quiet)
        return;
    if (with_key)
        bin_response(c, ST_KEY_ENOENT, NULL, 0, key, nkey, nkey, 0);
    else
        bin_error(c, ST_KEY_ENOENT, 0);
}

struct bin_get_ctx {
    __typeof__(((conn *)0)->bin) bin;   /* the request, for the header */
    bool with_key;
    uint16_t nkey;
    char key[KEY_MAX_LENGTH];
};

/* A parked get's value arrived from SSD (NULL: it is gone, a miss). */
static void bin_get_fill(conn *c, item *value, void *ctx)
{
    struct bin_get_ctx *g = ctx;
    __typeof__(c->bin) cur = c->bin;
    c->bin = g->bin;
    if (value != NULL)
        bin_send_hit(c, value, g->with_key, true);
    else
        bin_send_miss(c, g->key, g->nkey, g->with_key);
    c->bin = cur;
}

static void bin_get(conn *c, const char *key, uint16_t nkey,
                    const unsigned char *ext)
{
    uint8_t op = c->bin.opcode;
    bool touch = op == OP_TOUCH || op == OP_GAT || op == OP_GATQ ||
                 op == OP_GATK || op == OP_GATKQ;
    bool with_key = op == OP_GETK || op == OP_GETKQ || op == OP_GATK || op == OP_GATKQ;
    bool with_value = op != OP_TOUCH;
    enum item_miss why = MISS_NONE;
    unsigned int clsid = 0;
    item *it = NULL;

    struct item_read rq = { .key = key, .nkey = nkey, .bump = true,
                            .touch = touch, .value = with_value };
    if (touch)
        rq.exptime = realtime((int64_t)rd32(ext));
    struct bin_get_ctx g = { .bin = c->bin, .with_key = with_key, .nkey = nkey };
    memcpy(g.key, key, nkey);
    bool parked = conn_read_item(c, &rq, bin_get_fill, &g, sizeof(g), &it,
                                 &why, &clsid) == ITEM_PENDING;
    conn_count_read(c, key, nkey, it, it != NULL || parked, touch, why, clsid);
    if (it == NULL && !parked) {
        bin_send_miss(c, key, nkey, with_key);
        return;
    }
    if (!parked)
        bin_send_hit(c, it, with_key, with_value);
}

static enum store_op bin_store_op(uint8_t op)
{
    switch (op) {
    case OP_ADD: case OP_ADDQ: return STORE_ADD;
    case OP_REPLACE: case OP_REPLACEQ: return STORE_REPLACE;
    case OP_APPEND: case OP_APPENDQ: return STORE_APPEND;
    case OP_PREPEND: case OP_PREPENDQ: return STORE_PREPEND;
    default: return STORE_SET;
    }
}

/* set/add/replace/append/prepend: allocate and read the value. */
static void bin_update(conn *c, const char *key, uint16_t nkey,
                       const unsigned char *ext)
{
    /* bin_lengths_ok checked keylen + extlen <= bodylen.  The "\r\n" is
     * added in size_t: a 32-bit sum wraps for bodylen near 4 GB. */
    size_t vlen = (size_t)c->bin.bodylen - c->bin.keylen - c->bin.extlen;
    size_t nbytes;
    if (__builtin_add_overflow(vlen, (size_t)2, &nbytes))
        nbytes = SIZE_MAX;          /* refused as too large below */
    uint32_t flags = 0;
    int64_t exptime = 0;
    if (c->bin.extlen == 8) {
        flags = rd32(ext);
        exptime = (int64_t)rd32(ext + 4);
    }
    item *it = NULL;
    if (item_size_ok(nkey, nbytes))
        it = item_alloc(key, nkey, flags, realtime(exptime), nbytes,
                        c->thread->partition);
    if (!it) {
        if (!item_size_ok(nkey, nbytes)) {
            STATS_INCR(&c->thread->stats, store_too_large);
            bin_error(c, ST_E2BIG, vlen);
        } else {
            STATS_INCR(&c->thread->stats, store_no_memory);
            bin_error(c, ST_ENOMEM, vlen);
        }
        /* A failed set must not leave the old value readable. */
        if (bin_store_op(c->bin.opcode) == STORE_SET)
            item_delete(key, nkey, 0, NULL);
        return;
    }
    c->item = it;
    c->ritem = ITEM_data(it);
    c->rlbytes = vlen;
    c->nr.cmd = bin_store_op(c->bin.opcode);
    conn_set_state(c, conn_nread);
}

static void proto_bin_complete_nread(conn *c)
{
    item *it = c->item;
    enum store_op op = (enum store_op)c->nr.cmd;
    uint64_t cas = 0;

    memcpy(ITEM_data(it) + it->nbytes - 2, "\r\n", 2);
    if (c->redo_tries == 0) {
        SLAB_STATS_INCR(&c->thread->stats, it->slabs_clsid, set_cmds);
        if (prefix_stats_on())
            prefix_stats_set(ITEM_key(it), it->nkey);
    }
    if (op == STORE_SET && c->bin.cas)
        op = STORE_CAS;
    enum store_result res = item_store_wait(it, op, c->bin.cas, &cas,
                                            c->thread->partition, c->prior);
    if (res == STORE_NEED_VALUE)
        conn_retry_nread(c);        /* append/prepend to an SSD value */
    else if (!conn_wait_room(c, &res) && watch_on(WATCH_MUTATIONS))
        conn_watch_store(c, it, op, res);
    c->item = NULL;
    item_release(it);
    conn_set_state(c, conn_new_cmd);

    switch (res) {
    case STORE_NEED_VALUE:
    case STORE_NEED_ROOM:
        break;                      /* answered later, in its place */
    case STORE_STORED:
        bin_ok(c, cas);
        break;
    case STORE_EXISTS:
        bin_error(c, ST_KEY_EEXISTS, 0);
        break;
    case STORE_NOT_FOUND:
        bin_error(c, ST_KEY_ENOENT, 0);
        break;
    case STORE_TOO_LARGE:
        bin_error(c, ST_E2BIG, 0);
        break;
    case STORE_NO_MEMORY:
        if (op != STORE_APPEND && op != STORE_PREPEND)
            STATS_INCR(&c->thread->stats, store_no_memory);
        /* fall through */
    case STORE_WAIT_TIMEOUT:
        bin_error(c, ST_ENOMEM, 0);
        break;
    case STORE_NOT_STORED:
        if (op == STORE_ADD)
            bin_error(c, ST_KEY_EEXISTS, 0);
        else if (op == STORE_REPLACE)
            bin_error(c, ST_KEY_ENOENT, 0);
        else
            bin_error(c, ST_NOT_STORED, 0);
        break;
    }
}

static void bin_delete(conn *c, const char *key, uint16_t nkey)
{
    unsigned int clsid;
    if (prefix_stats_on())
        prefix_stats_delete(key, nkey);
    switch (item_delete(key, nkey, c->bin.cas, &clsid)) {
    case DELETE_OK:
    case DELETE_STALE:          /* (not from item_delete) */
        SLAB_STATS_INCR(&c->thread->stats, clsid, delete_hits);
        bin_ok(c, 0);
        break;
    case DELETE_EXISTS:
        bin_error(c, ST_KEY_EEXISTS, 0);
        break;
    case DELETE_NOT_FOUND:
        STATS_INCR(&c->thread->stats, delete_misses);
        bin_error(c, ST_KEY_ENOENT, 0);
        break;
    }
}

/* Creates the counter with its initial value (incr/decr miss). */
static void bin_delta_create(conn *c, const char *key, uint16_t nkey,
                             uint64_t initial, uint32_t exptime)
{
    char buf[24];
    int len = snprintf(buf, sizeof(buf), "%llu", (unsigned long long)initial);
    item *it = item_alloc(key, nkey, 0, realtime((int64_t)exptime), len + 2,
                          c->thread->partition);
    if (!it) {
        bin_error(c, ST_ENOMEM, 0);
        return;
    }
    memcpy(ITEM_data(it), buf, len);
    memcpy(ITEM_data(it) + len, "\r\n", 2);
    uint64_t cas = 0;
    enum store_result res = item_store(it, STORE_ADD, 0, &cas, c->thread->partition);
    item_release(it);
    if (res != STORE_STORED) {
        bin_error(c, ST_NOT_STORED, 0);
        return;
    }
    if (!c->bin.quiet) {
        unsigned char val[8];
        wr64(val, initial);
        struct resp *r = bin_response(c, ST_SUCCESS, NULL, 0, NULL, 0, 8, cas);
        if (r && !resp_add_text(r, (const char *)val, 8))
            conn_set_state(c, conn_closing);
    }
}

static void bin_delta(conn *c, const char *key, uint16_t nkey,
                      const unsigned char *ext);

/* An incr/decr whose old value is on SSD, run again once it is read. */
struct bin_delta_args {
    __typeof__(((conn *)0)->bin) bin;
    uint16_t nkey;
    unsigned char ext[20];
    char key[KEY_MAX_LENGTH];
};

static void bin_delta_retry(conn *c, void *args)
{
    struct bin_delta_args *a = args;
    __typeof__(c->bin) cur = c->bin;
    c->bin = a->bin;
    bin_delta(c, a->key, a->nkey, a->ext);
    c->bin = cur;
}

static void bin_delta(conn *c, const char *key, uint16_t nkey,
                      const unsigned char *ext)
{
    bool incr = c->bin.opcode == OP_INCREMENT || c->bin.opcode == OP_INCREMENTQ;
    uint64_t delta = rd64(ext);
    uint64_t initial = rd64(ext + 8);
    uint32_t exptime = rd32(ext + 16);
    char out[32];
    uint64_t cas = 0;
    struct thread_stats *ts = &c->thread->stats;

    switch (item_add_delta(key, nkey, incr, delta, c->bin.cas, out, &cas,
                           c->thread->partition, c->prior)) {
    case DELTA_NEED_VALUE: {
        struct bin_delta_args a = { .bin = c->bin, .nkey = nkey };
        memcpy(a.ext, ext, sizeof(a.ext));
        memcpy(a.key, key, nkey);
        conn_retry(c, key, nkey, bin_delta_retry, NULL, &a, sizeof(a));
        break;
    }
    case DELTA_OK: {
        if (incr)
            SLAB_STATS_INCR(ts, 0, incr_hits);
        else
            SLAB_STATS_INCR(ts, 0, decr_hits);
        if (c->bin.quiet)
            break;
        unsigned char val[8];
        wr64(val, strtoull(out, NULL, 10));
        struct resp *r = bin_response(c, ST_SUCCESS, NULL, 0, NULL, 0, 8, cas);
        if (r && !resp_add_text(r, (const char *)val, 8))
            conn_set_state(c, conn_closing);
        break;
    }
    case DELTA_NON_NUMERIC:
        bin_error(c, ST_DELTA_BADVAL, 0);
        break;
    case DELTA_NO_MEMORY:
        bin_error(c, ST_ENOMEM, 0);
        break;
    case DELTA_EXISTS:
        bin_error(c, ST_KEY_EEXISTS, 0);
        break;
    case DELTA_NOT_FOUND:
        if (exptime != 0xffffffffu) {
            bin_delta_create(c, key, nkey, initial, exptime);
        } else {
            if (incr)
                STATS_INCR(ts, incr_misses);
            else
                STATS_INCR(ts, decr_misses);
            bin_error(c, ST_KEY_ENOENT, 0);
        }
        break;
    }
}

static void bin_flush(conn *c, const unsigned char *ext)
{
    if (!settings.flush_enabled) {
        bin_error(c, ST_AUTH_ERROR, 0);
        return;
    }
    int64_t exptime = c->bin.extlen == 4 ? (int64_t)rd32(ext) : 0;
    item_flush(exptime > 0 ? realtime(exptime) : 0);
    STATS_INCR(&c->thread->stats, flush_cmds);
    bin_ok(c, 0);
}

/* Collects stats as binary packets in one growing buffer. */
struct bin_stat_buf {
    conn *c;
    unsigned char *buf;
    size_t len, cap;
    bool oom;
};

static void bin_stat_append(struct bin_stat_buf *b, const char *key, const char *val)
{
    size_t klen = key ? strlen(key) : 0, vlen = val ? strlen(val) : 0;
    size_t need = BIN_HEADER_LEN + klen + vlen;
    if (b->oom)
        return;
    if (b->len + need > b->cap) {
        size_t cap = b->cap ? b->cap * 2 : 4096;
        while (cap < b->len + need)
            cap *= 2;
        unsigned char *grown = realloc(b->buf, cap);
        if (!grown) {
            b->oom = true;
            return;
        }
        b->buf = grown;
        b->cap = cap;
    }
    unsigned char *p = b->buf + b->len;
    memset(p, 0, BIN_HEADER_LEN);
    p[0] = BIN_RES_MAGIC;
    p[1] = OP_STAT;
    wr16(p + 2, (uint16_t)klen);
    wr32(p + 8, (uint32_t)(klen + vlen));
    memcpy(p + 12, &b->c->bin.opaque, 4);
    if (klen)
        memcpy(p + BIN_HEADER_LEN, key, klen);
    if (vlen)
        memcpy(p + BIN_HEADER_LEN + klen, val, vlen);
    b->len += need;
}

static void bin_stat_emit(void *ctx, const char *key, const char *val)
{
    bin_stat_append(ctx, key, val);
}

static void bin_stat(conn *c, const char *key, uint16_t nkey)
{
    char sub[64];
    struct bin_stat_buf b = { .c = c };
    struct stat_sink sink = { bin_stat_emit, &b };

    if (nkey >= sizeof(sub)) {
        bin_error(c, ST_KEY_ENOENT, 0);
        return;
    }
    memcpy(sub, key, nkey);
    sub[nkey] = '\0';
    if (strcmp(sub, "reset") == 0) {
        stats_reset();
    } else if (strncmp(sub, "detail ", 7) == 0) {
        /* As memcached: on and off answer the bare terminator, dump one
         * "detailed" stat holding the text protocol's whole dump. */
        const char *arg = sub + 7;
        if (strcmp(arg, "on") == 0 || strcmp(arg, "off") == 0) {
            prefix_stats_enable(arg[1] == 'n');
        } else if (strcmp(arg, "dump") == 0) {
            size_t len;
            char *dump = prefix_stats_dump(&len);
            if (dump == NULL)
                b.oom = true;
            else
                bin_stat_append(&b, "detailed", dump);
            free(dump);
        } else {
            bin_error(c, ST_KEY_ENOENT, 0);
            return;
        }
    } else if (!stats_run(sub, &sink)) {
        free(b.buf);
        bin_error(c, ST_KEY_ENOENT, 0);
        return;
    }
    bin_stat_append(&b, NULL, NULL);
    if (b.oom) {
        free(b.buf);
        conn_set_state(c, conn_closing);
    } else if (!resp_give(c, b.buf, b.len)) {
        conn_set_state(c, conn_closing);
    }
}

/* Checks the header lengths an opcode requires.  Returns false for a
 * request memcached treats as a protocol error. */
static bool bin_lengths_ok(conn *c)
{
    uint8_t ext = c->bin.extlen;
    uint16_t key = c->bin.keylen;
    uint32_t body = c->bin.bodylen;

    switch (c->bin.opcode) {
    case OP_VERSION: case OP_NOOP: case OP_QUIT: case OP_QUITQ:
        return ext == 0 && key == 0 && body == 0;
    case OP_FLUSH: case OP_FLUSHQ:
        return key == 0 && body == ext && (ext == 0 || ext == 4);
    case OP_SET: case OP_SETQ: case OP_ADD: case OP_ADDQ:
    case OP_REPLACE: case OP_REPLACEQ:
        return ext == 8 && key != 0 && body >= (uint32_t)key + 8;
    case OP_GET: case OP_GETQ: case OP_GETK: case OP_GETKQ:
        return ext == 0 && key > 0 && body == key;
    case OP_DELETE: case OP_DELETEQ:
        return ext == 0 && key > 0 && body == key;
    case OP_INCREMENT: case OP_INCREMENTQ: case OP_DECREMENT: case OP_DECREMENTQ:
        return ext == 20 && key > 0 && body == (uint32_t)key + 20;
    case OP_APPEND: case OP_APPENDQ: case OP_PREPEND: case OP_PREPENDQ:
        return ext == 0 && key > 0;
    case OP_STAT:
        return ext == 0 && body == key;
    case OP_VERBOSITY:
        return ext == 4 && key == 0 && body == 4;
    case OP_TOUCH: case OP_GAT: case OP_GATQ: case OP_GATK: case OP_GATKQ:
        return ext == 4 && key != 0 && body == (uint32_t)key + 4;
    default:
        return true;
    }
}

static bool bin_is_quiet(uint8_t op)
{
    switch (op) {
    case OP_GETQ: case OP_GETKQ: case OP_SETQ: case OP_ADDQ: case OP_REPLACEQ:
    case OP_DELETEQ: case OP_INCREMENTQ: case OP_DECREMENTQ: case OP_QUITQ:
    case OP_FLUSHQ: case OP_APPENDQ: case OP_PREPENDQ: case OP_GATQ:
    case OP_GATKQ:
        return true;
    default:
        return false;
    }
}

/* Largest SASL request body taken: a PLAIN or CRAM-MD5 answer is far
 * smaller. */
#define BIN_SASL_MAX 4096

static bool bin_is_sasl(uint8_t op)
{
    return op == OP_SASL_LIST_MECHS || op == OP_SASL_AUTH || op == OP_SASL_STEP;
}

/* A response whose body is `len` bytes of text (copied). */
static void bin_text_response(conn *c, uint16_t status, const char *text, size_t len)
{
    struct resp *r = bin_response(c, status, NULL, 0, NULL, 0, (uint32_t)len, 0);
    if (r && len > 0 && !resp_add_text(r, text, len))
        conn_set_state(c, conn_closing);
}

/* -S: SASL_LIST_MECHS, SASL_AUTH (key: the mechanism) and SASL_STEP; the
 * request body, the client's data, is in the read buffer
 * (proto_bin_try_command waited for it). */
static void bin_sasl(conn *c, const char *key, uint16_t nkey)
{
    uint32_t vlen = c->bin.bodylen - c->bin.extlen - c->bin.keylen;
    const char *data = c->rcurr;
    c->rcurr += vlen;
    c->rbytes -= vlen;
    if (!settings.sasl) {
        bin_error(c, ST_UNKNOWN_COMMAND, 0);
        return;
    }
    if (c->sasl == NULL)
        c->sasl = sasl_auth_new();
    if (c->sasl == NULL) {
        bin_error(c, ST_AUTH_ERROR, 0);
        return;
    }
    const char *out;
    unsigned outlen;
    if (c->bin.opcode == OP_SASL_LIST_MECHS) {
        if (sasl_auth_mechs(c->sasl, &out, &outlen))
            bin_text_response(c, ST_SUCCESS, out, outlen);
        else
            bin_error(c, ST_AUTH_ERROR, 0);
        return;
    }
    GSTATS_INCR(auth_cmds);
    enum sasl_auth_result res = sasl_auth_step(
        c->sasl, c->bin.opcode == OP_SASL_AUTH ? key : NULL, nkey,
        data, vlen, &out, &outlen);
    switch (res) {
    case SASL_AUTH_OK:
        c->authenticated = true;
        bin_text_response(c, ST_SUCCESS, "Authenticated", 13);
        break;
    case SASL_AUTH_CONTINUE:
        bin_text_response(c, ST_AUTH_CONTINUE, out, outlen);
        break;
    case SASL_AUTH_FAIL:
        GSTATS_INCR(auth_errors);
        bin_error(c, ST_AUTH_ERROR, 0);
        break;
    case SASL_AUTH_CLOSE:
        /* The last failure allowed: answered, then closed; nothing the
         * client sent after it is run. */
        GSTATS_INCR(auth_errors);
        bin_error(c, ST_AUTH_ERROR, 0);
        c->rcurr += c->rbytes;
        c->rbytes = 0;
        c->close_after_write = true;
        break;
    }
}

static void bin_dispatch(conn *c, const unsigned char *ext, const char *key)
{
    uint16_t nkey = c->bin.keylen;

    switch (c->bin.opcode) {
    case OP_GET: case OP_GETQ: case OP_GETK: case OP_GETKQ:
    case OP_TOUCH: case OP_GAT: case OP_GATQ: case OP_GATK: case OP_GATKQ:
        c->last_cmd = "get";
        bin_get(c, key, nkey, ext);
        break;
    case OP_SET: case OP_SETQ: case OP_ADD: case OP_ADDQ:
    case OP_REPLACE: case OP_REPLACEQ: case OP_APPEND: case OP_APPENDQ:
    case OP_PREPEND: case OP_PREPENDQ:
        c->last_cmd = "set";
        bin_update(c, key, nkey, ext);
        break;
    case OP_DELETE: case OP_DELETEQ:
        c->last_cmd = "delete";
        bin_delete(c, key, nkey);
        break;
    case OP_INCREMENT: case OP_INCREMENTQ: case OP_DECREMENT: case OP_DECREMENTQ:
        c->last_cmd = "incr";
        bin_delta(c, key, nkey, ext);
        break;
    case OP_FLUSH: case OP_FLUSHQ:
        bin_flush(c, ext);
        break;
    case OP_NOOP:
        bin_ok(c, 0);
        conn_set_state(c, conn_write);
        break;
    case OP_VERSION: {
        size_t len = strlen(SERVER_VERSION);
        struct resp *r = bin_response(c, ST_SUCCESS, NULL, 0, NULL, 0, len, 0);
        if (r && !resp_add_iov(r, SERVER_VERSION, len))
            conn_set_state(c, conn_closing);
        break;
    }
    case OP_QUIT: case OP_QUITQ:
        bin_ok(c, 0);
        c->close_after_write = true;
        conn_set_state(c, c->bin.quiet ? conn_closing : conn_write);
        break;
    case OP_STAT:
        bin_stat(c, key, nkey);
        break;
    case OP_VERBOSITY:
        __atomic_store_n(&settings.verbose, (int)rd32(ext), __ATOMIC_RELAXED);
        bin_ok(c, 0);
        break;
    case OP_SASL_LIST_MECHS: case OP_SASL_AUTH: case OP_SASL_STEP:
        c->last_cmd = "sasl";
        bin_sasl(c, key, nkey);
        break;
    default:
        bin_error(c, ST_UNKNOWN_COMMAND,
                  c->bin.bodylen - c->bin.extlen - c->bin.keylen);
        break;
    }
}

static enum proto_result proto_bin_try_command(conn *c)
{
    const unsigned char *h = (const unsigned char *)c->rcurr;
    /* -Y authenticates text connections only; a binary one is closed, as
     * memcached closes it. */
    if (!c->authenticated && !settings.sasl) {
        conn_set_state(c, conn_closing);
        return PROTO_DONE;
    }
    /* Told at the first byte: text sent to a binary-only server (-B binary)
     * may never fill a header. */
    if (c->rbytes > 0 && h[0] != BIN_REQ_MAGIC) {
        if (settings.verbose)
            fprintf(stderr, "<%d invalid binary magic 0x%02x\n", c->sfd, h[0]);
        conn_set_state(c, conn_closing);
        return PROTO_DONE;
    }
    if (c->rbytes < BIN_HEADER_LEN)
        return PROTO_NEED_MORE;
    c->bin.opcode = h[1];
    c->bin.keylen = rd16(h + 2);
    c->bin.extlen = h[4];
    c->bin.bodylen = rd32(h + 8);
    memcpy(&c->bin.opaque, h + 12, 4);
    c->bin.cas = rd64(h + 16);
    c->bin.quiet = bin_is_quiet(c->bin.opcode);

    if ((uint32_t)c->bin.keylen + c->bin.extlen > c->bin.bodylen) {
        c->rcurr += BIN_HEADER_LEN;
        c->rbytes -= BIN_HEADER_LEN;
        bin_protocol_error(c, ST_UNKNOWN_COMMAND);
        return PROTO_DONE;
    }
    size_t head = BIN_HEADER_LEN + c->bin.extlen + c->bin.keylen;
    if (c->rbytes < head)
        return PROTO_NEED_MORE;
    /* A SASL request is taken whole: its body is the client's data. */
    size_t vlen = c->bin.bodylen - c->bin.extlen - c->bin.keylen;
    if (bin_is_sasl(c->bin.opcode) && vlen > BIN_SASL_MAX) {
        c->rcurr += head;
        c->rbytes -= head;
        bin_protocol_error(c, ST_EINVAL);
        return PROTO_DONE;
    }
    if (bin_is_sasl(c->bin.opcode) && c->rbytes < head + vlen)
        return PROTO_NEED_MORE;

    const unsigned char *ext = h + BIN_HEADER_LEN;
    const char *key = (const char *)ext + c->bin.extlen;
    c->rcurr += head;
    c->rbytes -= head;
    __atomic_store_n(&c->last_cmd_time, mc_now(), __ATOMIC_RELAXED);

    if (c->bin.keylen > KEY_MAX_LENGTH || !bin_lengths_ok(c)) {
        bin_protocol_error(c, ST_EINVAL);
        return PROTO_DONE;
    }
    /* -S: before authentication only SASL and VERSION, as memcached. */
    if (!c->authenticated && !bin_is_sasl(c->bin.opcode) &&
        c->bin.opcode != OP_VERSION) {
        GSTATS_INCR(auth_errors);
        bin_error(c, ST_AUTH_ERROR, vlen);
        return PROTO_DONE;
    }
    /* ext and key stay valid: rbuf is not touched until the next read. */
    bin_dispatch(c, ext, key);
    return PROTO_DONE;
}

static void proto_bin_cleanup(conn *c)
{
    sasl_auth_free(c->sasl);
    c->sasl = NULL;
}

const struct conn_protocol_ops proto_bin_ops = {
    .try_command = proto_bin_try_command,
    .complete_nread = proto_bin_complete_nread,
    .cleanup = proto_bin_cleanup,
};

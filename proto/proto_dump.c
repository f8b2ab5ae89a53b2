/*
 * proto_dump.c - the text protocol's key dumps, crawler commands and
 * watchers: `lru_crawler metadump|crawl|enable|disable|sleep|tocrawl`,
 * `stats cachedump` and `watch`, with memcached 1.6's answers.
 *
 * Design.  Both dumps walk the hash index one item lock stripe at a time
 * (items_view_stripe), so they see every tier (a meta tuple in DRAM
 * describes each NVM and SSD item) and never stop the server: a worker
 * waits at most for one stripe's items to be formatted.  A metadump can
 * be as large as the cache, so it is a stream (conn_stream): each piece
 * covers stripes until about DUMP_PIECE bytes are out, and the next is
 * made once the client has taken that one.  A cachedump is one response,
 * capped at memcached's 2 MB.
 *
 * Threads: all functions run on the worker that owns the connection.
 */
#include "config.h"

#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "net/conn.h"
#include "engine/items.h"
#include "proto/proto_ascii.h"
#include "proto/proto_dump.h"
#include "base/settings.h"
#include "engine/slabs.h"
#include "base/watch.h"

#define DUMP_PIECE (64 * 1024)          /* bytes per metadump piece */
#define CACHEDUMP_MAX (2 * 1024 * 1024) /* memcached's cap */

/* A growing text buffer. */
struct dump_buf {
    char *p;
    size_t len, cap;
    bool failed;                        /* out of memory */
};

static char *buf_room(struct dump_buf *b, size_t n)
{
    if (b->failed)
        return NULL;
    if (b->len + n > b->cap) {
        size_t cap = b->cap ? b->cap : 4096;
        while (cap < b->len + n)
            cap *= 2;
        char *p = realloc(b->p, cap);
        if (p == NULL) {
            b->failed = true;
            return NULL;
        }
        b->p = p;
        b->cap = cap;
    }
    return b->p + b->len;
}

static void buf_add(struct dump_buf *b, const char *s, size_t n)
{
    char *p = buf_room(b, n);
    if (p != NULL) {
        memcpy(p, s, n);
        b->len += n;
    }
}

/* Hands the buffer to a new response of c (an empty one is dropped);
 * false when that fails, after which the connection closes. */
static bool buf_send(conn *c, struct dump_buf *b)
{
    if (b->failed) {
        free(b->p);
        *b = (struct dump_buf){ 0 };
        return false;
    }
    if (b->len == 0) {
        free(b->p);
        *b = (struct dump_buf){ 0 };
        return true;
    }
    bool ok = resp_give(c, b->p, b->len);
    *b = (struct dump_buf){ 0 };
    if (!ok) {
        conn_set_state(c, conn_closing);
        return false;
    }
    return true;
}

/* The key URI-encoded, as memcached's metadump writes it. */
static void add_uri_key(struct dump_buf *b, const char *key, size_t nkey)
{
    char *p = buf_room(b, nkey * 3);
    if (p != NULL)
        b->len += (size_t)(util_uri_encode(key, nkey, p) - p);
}

static const char *tier_name(enum item_tier t)
{
    switch (t) {
    case TIER_NVM: return "nvm";
    case TIER_SSD: return "ssd";
    default:       return "dram";
    }
}

/* Which slab classes a dump covers: "all", "hash" or "1,3,10". */
static bool parse_classes(const char *arg, bool want[MAX_SLAB_CLASSES])
{
    if (strcmp(arg, "all") == 0 || strcmp(arg, "hash") == 0) {
        for (unsigned i = 0; i < MAX_SLAB_CLASSES; i++)
            want[i] = true;
        return true;
    }
    memset(want, 0, MAX_SLAB_CLASSES * sizeof(bool));
    char list[256];
    size_t n = strlen(arg);
    if (n == 0 || n >= sizeof(list))
        return false;
    memcpy(list, arg, n + 1);
    char *save = NULL;
    for (char *t = strtok_r(list, ",", &save); t != NULL; t = strtok_r(NULL, ",", &save)) {
        uint32_t id;
        if (!safe_strtoul(t, &id) || id == 0 || id >= MAX_SLAB_CLASSES)
            return false;
        want[id] = true;
    }
    return true;
}

/* ---- lru_crawler metadump ------------------------------------------------ */

struct metadump {
    bool want[MAX_SLAB_CLASSES];
    unsigned int stripe;                /* next to walk */
    struct dump_buf out;
};

static bool metadump_wants(const struct item_view *v, void *arg)
{
    const struct metadump *m = arg;
    return v->clsid < MAX_SLAB_CLASSES && m->want[v->clsid];
}

static void metadump_line(const struct item_view *v, void *arg)
{
    struct metadump *m = arg;
    if (!metadump_wants(v, m))
        return;
    buf_add(&m->out, "key=", 4);
    add_uri_key(&m->out, v->key, v->nkey);
    char line[192];
    int n = snprintf(line, sizeof(line),
                     " exp=%lld la=%lld cas=%llu fetch=%s cls=%u size=%zu tier=%s\n",
                     v->exptime != 0 ? (long long)v->exptime : -1LL,
                     (long long)v->last_access, (unsigned long long)v->cas,
                     v->fetched ? "yes" : "no", v->clsid, v->size, tier_name(v->tier));
    if (n > 0)
        buf_add(&m->out, line, (size_t)n < sizeof(line) ? (size_t)n : sizeof(line) - 1);
}

static enum conn_stream_step metadump_more(conn *c, void *ctx)
{
    struct metadump *m = ctx;
    while (m->stripe < ITEM_LOCK_COUNT && m->out.len < DUMP_PIECE && !m->out.failed)
        items_view_stripe(m->stripe++, metadump_wants, metadump_line, m);
    bool last = m->stripe >= ITEM_LOCK_COUNT;
    if (last)
        buf_add(&m->out, "END\r\n", 5);
    if (!buf_send(c, &m->out)) {
        conn_set_state(c, conn_closing);
        return STREAM_DONE;
    }
    return last ? STREAM_DONE : STREAM_PIECE;
}

static void metadump_free(void *ctx)
{
    struct metadump *m = ctx;
    free(m->out.p);
    free(m);
}

static void lru_crawler_metadump(conn *c, const char *arg)
{
    if (!settings.lru_crawler) {
        out_string(c, "CLIENT_ERROR lru crawler disabled");
        return;
    }
    if (!settings.dump_enabled) {
        out_string(c, "ERROR metadump not allowed");
        return;
    }
    if (c->transport == TRANSPORT_UDP) {
        out_string(c, "SERVER_ERROR metadump needs a stream connection");
        return;
    }
    /* memcached's rule: a dump streams alone, not behind answers of
     * commands pipelined before it that are still queued. */
    if (c->resp_head != NULL) {
        out_string(c, "ERROR cannot pipeline other commands before metadump");
        return;
    }
    struct metadump *m = calloc(1, sizeof(*m));
    if (m == NULL) {
        out_errstring(c, "SERVER_ERROR out of memory");
        return;
    }
    if (!parse_classes(arg, m->want)) {
        free(m);
        out_string(c, "BADCLASS invalid class id");
        return;
    }
    conn_stream(c, metadump_more, metadump_free, m);
}

/* ---- lru_crawler --------------------------------------------------------- */

void pt_lru_crawler(conn *c, struct util_token *tok, size_t ntok)
{
    const char *sub = tok[1].value;
    if (ntok == 3 && strcmp(sub, "metadump") == 0) {
        lru_crawler_metadump(c, tok[2].value);
    } else if (ntok == 3 && strcmp(sub, "crawl") == 0) {
        bool want[MAX_SLAB_CLASSES];
        if (!settings.lru_crawler)
            out_string(c, "CLIENT_ERROR lru crawler disabled");
        else if (!parse_classes(tok[2].value, want))
            out_string(c, "BADCLASS invalid class id");
        else {
            items_crawl_soon();
            out_string(c, "OK");
        }
    } else if (ntok == 3 && (strcmp(sub, "sleep") == 0 || strcmp(sub, "tocrawl") == 0)) {
        uint32_t v;
        bool sleep = sub[0] == 's';
        if (!safe_strtoul(tok[2].value, &v) || v > INT_MAX)
            out_string(c, "CLIENT_ERROR bad command line format");
        else if (sleep && v > 1000000)
            out_string(c, "CLIENT_ERROR sleep must be one second or less");
        else {
            __atomic_store_n(sleep ? &settings.lru_crawler_sleep
                                   : &settings.lru_crawler_tocrawl, (int)v, __ATOMIC_RELAXED);
            out_string(c, "OK");
        }
    } else if (ntok == 2 && (strcmp(sub, "enable") == 0 || strcmp(sub, "disable") == 0)) {
        bool on = sub[0] == 'e';
        /* memcached's answer when the crawler already is as asked. */
        if (settings.lru_crawler == on)
            out_string(c, on ? "ERROR failed to start lru crawler thread"
                             : "ERROR failed to stop lru crawler thread");
        else {
            __atomic_store_n(&settings.lru_crawler, on, __ATOMIC_RELAXED);
            out_string(c, "OK");
        }
    } else {
        out_string(c, "ERROR");
    }
}

/* ---- stats cachedump ----------------------------------------------------- */

struct cachedump {
    unsigned int clsid;
    uint32_t limit;                     /* 0: no limit but the cap */
    uint32_t shown;
    bool full;
    struct dump_buf out;
};

static bool cachedump_wants(const struct item_view *v, void *arg)
{
    const struct cachedump *d = arg;
    return v->clsid == d->clsid && !d->full;
}

static void cachedump_line(const struct item_view *v, void *arg)
{
    struct cachedump *d = arg;
    if (!cachedump_wants(v, d))
        return;
    char line[KEY_MAX_LENGTH + 64];
    int n = snprintf(line, sizeof(line), "ITEM %.*s [%u b; %lld s]\r\n", (int)v->nkey,
                     v->key, v->value_len, (long long)v->exptime);
    if (n <= 0 || (size_t)n >= sizeof(line) || d->out.len + (size_t)n > CACHEDUMP_MAX - 5) {
        d->full = true;
        return;
    }
    buf_add(&d->out, line, (size_t)n);
    if (++d->shown == d->limit)
        d->full = true;
}

void pt_stats_cachedump(conn *c, struct util_token *tok, size_t ntok)
{
    uint32_t id, limit;
    if (!settings.dump_enabled) {
        out_string(c, "CLIENT_ERROR stats cachedump not allowed");
        return;
    }
    if (ntok < 4) {
        out_string(c, "CLIENT_ERROR bad command line");
        return;
    }
    if (!safe_strtoul(tok[2].value, &id) || !safe_strtoul(tok[3].value, &limit)) {
        out_string(c, "CLIENT_ERROR bad command line format");
        return;
    }
    if (id >= MAX_SLAB_CLASSES) {
        out_string(c, "CLIENT_ERROR Illegal slab id");
        return;
    }
    struct cachedump d = { .clsid = id, .limit = limit };
    for (unsigned int s = 0; s < ITEM_LOCK_COUNT && !d.full; s++)
        items_view_stripe(s, cachedump_wants, cachedump_line, &d);
    buf_add(&d.out, "END\r\n", 5);
    if (d.out.failed) {
        free(d.out.p);
        out_errstring(c, "SERVER_ERROR out of memory writing stats");
        return;
    }
    buf_send(c, &d.out);
}

/* ---- watch --------------------------------------------------------------- */

#define WATCH_PIECE (64 * 1024)

static enum conn_stream_step watch_more(conn *c, void *ctx)
{
    char *buf = malloc(WATCH_PIECE);
    if (buf == NULL) {
        conn_set_state(c, conn_closing);
        return STREAM_DONE;
    }
    size_t n = watcher_read(ctx, buf, WATCH_PIECE);
    if (n == 0) {
        free(buf);
        return STREAM_IDLE;
    }
    if (!resp_give(c, buf, n)) {
        conn_set_state(c, conn_closing);
        return STREAM_DONE;
    }
    return STREAM_PIECE;
}

static void watch_free(void *ctx)
{
    watcher_free(ctx);
}

void pt_watch(conn *c, struct util_token *tok, size_t ntok)
{
    static const struct { const char *name; unsigned int kind; } streams[] = {
        { "fetchers", WATCH_FETCHERS }, { "mutations", WATCH_MUTATIONS },
        { "evictions", WATCH_EVICTIONS }, { "connevents", WATCH_CONNEVENTS },
        { "tiers", WATCH_TIERS },
        /* memcached's, not kept here */
        { "rawcmds", 0 }, { "sysevents", 0 }, { "deletions", 0 },
        { "proxyreqs", 0 }, { "proxyevents", 0 }, { "proxyuser", 0 },
    };
    if (!settings.watch_enabled) {
        out_string(c, "CLIENT_ERROR watch commands not allowed");
        return;
    }
    if (c->transport == TRANSPORT_UDP) {
        out_string(c, "SERVER_ERROR watch needs a stream connection");
        return;
    }
    unsigned int mask = ntok <= 1 ? WATCH_FETCHERS : 0;    /* memcached's default */
    for (size_t i = 1; i < ntok; i++) {
        size_t k = 0;
        while (k < sizeof(streams) / sizeof(streams[0]) &&
               strcmp(tok[i].value, streams[k].name) != 0)
            k++;
        if (k == sizeof(streams) / sizeof(streams[0])) {
            out_string(c, "ERROR");
            return;
        }
        if (streams[k].kind == 0) {
            char msg[96];
            snprintf(msg, sizeof(msg), "ERROR watch %s is not supported here", streams[k].name);
            out_string(c, msg);
            return;
        }
        mask |= streams[k].kind;
    }
    bool too_many;
    struct watcher *w = watcher_new(mask, &too_many);
    if (w == NULL) {
        /* memcached's replies; the connection stays open. */
        out_string(c, too_many ? "WATCHER_TOO_MANY log watcher limit reached"
                               : "WATCHER_FAILED failed to add log watcher");
        return;
    }
    out_string(c, "OK");
    conn_stream(c, watch_more, watch_free, w);
}

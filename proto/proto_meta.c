/*
 * proto_meta.c - memcached meta commands: mg (get), ms (set), md (delete),
 * ma (arithmetic), mn (no-op) and me (debug).
 *
 * Design.  A meta command is "<cm> <key> [datalen] <flag>*", each flag one
 * character with an optional token glued to it.  meta_preparse() validates
 * the flags once (duplicates, numbers, modes) exactly as memcached 1.6.18
 * does, including which error string wins when several are wrong; each
 * command then walks the flags again in request order to build its reply,
 * so returned flags come back in the order they were asked for.
 *
 * What a command does to the item (win tokens for N/R, stale marking for
 * md I and ms I, TTL updates, delayed LRU bumps so 'h' and 'l' report the
 * state before this request, vivify) happens in items.c under the item
 * lock: item_read with an item_mg for mg, ma and me, item_delete_meta for
 * md, item_store_meta for ms.  This file parses and formats only.
 *
 * Extension: the E flag (explicit CAS value, memcached >= 1.6.21) is
 * accepted by ms, ma and md; stock 1.6.18 rejects it as an invalid flag.
 *
 * Threads: runs on the connection's worker; takes no item lock itself.
 */
#include "config.h"

#include <stdio.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>

#include "net/conn.h"
#include "net/conn_park.h"
#include "engine/items.h"
#include "base/settings.h"
#include "base/prefix_stats.h"
#include "proto/proto_ascii.h"
#include "proto/proto_meta.h"
#include "base/stats.h"
#include "base/watch.h"
#include "net/worker.h"
#include "base/util.h"

/* memcached's MFLAG_MAX_OPT_LENGTH: token count incl. its terminal token. */
#define META_MAX_TOKENS 19

struct meta_req {
    bool has_error;
    bool locked;        /* needs the item lock (N T R l h) */
    bool vivify;        /* N */
    bool value;         /* v */
    bool set_stale;     /* I */
    bool no_reply;      /* q */
    bool no_update;     /* u */
    bool has_cas;       /* C */
    bool new_ttl;       /* T */
    bool key_binary;    /* b */
    bool has_explicit;  /* E */
    char mode;          /* M */
    rel_time_t exptime;
    rel_time_t autoviv_exptime;
    rel_time_t recache_time;
    uint32_t client_flags;
    uint64_t req_cas;
    uint64_t explicit_cas;
    uint64_t delta;
    uint64_t initial;
};

/* Reply line under construction; big enough for every flag at once. */
struct meta_line {
    char buf[1024];
    char *p;
};

static void ml_init(struct meta_line *m, const char *code)
{
    size_t n = strlen(code);
    memcpy(m->buf, code, n);
    m->p = m->buf + n;
}

static void ml_flag_u64(struct meta_line *m, char flag, uint64_t v)
{
    *m->p++ = ' ';
    *m->p++ = flag;
    m->p = util_u64toa(v, m->p);
}

static void ml_flag(struct meta_line *m, char flag)
{
    *m->p++ = ' ';
    *m->p++ = flag;
}

static void ml_token(struct meta_line *m, const struct util_token *t)
{
    *m->p++ = ' ';
    memcpy(m->p, t->value, t->length);
    m->p += t->length;
}

static void ml_key(struct meta_line *m, const char *key, size_t nkey,
                   bool binary)
{
    ml_flag(m, 'k');
    m->p = ascii_put_key(m->p, key, nkey, binary);
    if (binary)
        ml_flag(m, 'b');
}

static void ml_end(struct meta_line *m)
{
    *m->p++ = '\r';
    *m->p++ = '\n';
}

static size_t ml_len(const struct meta_line *m)
{
    return (size_t)(m->p - m->buf);
}

/* memcached prints a TTL as -1 (none) or exptime - now as uint32. */
/* The t flag: seconds left, -1 for never (item_mg's MG_TTL answer). */
static void ml_mg_ttl(struct meta_line *m, int64_t ttl)
{
    ml_flag(m, 't');
    if (ttl < 0) {
        memcpy(m->p, "-1", 2);
        m->p += 2;
    } else {
        m->p = util_u64toa((uint64_t)ttl, m->p);
    }
}

static bool meta_strtol_time(const char *s, rel_time_t *out)
{
    int32_t v;
    if (!safe_strtol(s, &v))
        return false;
    *out = realtime(v);
    return true;
}

/* One flag; false stops parsing (an unknown flag). */
static bool meta_parse_flag(struct util_token *key, const struct util_token *t,
                            struct meta_req *of, const char **errstr)
{
    const char *arg = t->value + 1;
    const char *bad_token = "CLIENT_ERROR bad token in command line format";
    size_t n;

    switch (t->value[0]) {
    case 'b':
        n = base64_decode((unsigned char *)key->value, key->length,
                          (unsigned char *)key->value, key->length);
        if (n == 0) {
            *errstr = "CLIENT_ERROR error decoding key";
            of->has_error = true;
        }
        key->length = n;
        of->key_binary = true;
        break;
    case 'N':
        of->locked = of->vivify = true;
        if (!meta_strtol_time(arg, &of->autoviv_exptime)) {
            *errstr = bad_token;
            of->has_error = true;
        }
        break;
    case 'T':
        of->locked = true;
        if (!meta_strtol_time(arg, &of->exptime)) {
            *errstr = bad_token;
            of->has_error = true;
        } else {
            of->new_ttl = true;
        }
        break;
    case 'R':
        of->locked = true;
        if (!meta_strtol_time(arg, &of->recache_time)) {
            *errstr = bad_token;
            of->has_error = true;
        }
        break;
    case 'l': case 'h':
        of->locked = true;
        break;
    case 'O': case 'P': case 'L': case 'k': case 's': case 't': case 'c':
    case 'f':
        break;
    case 'v': of->value = true; break;
    case 'u': of->no_update = true; break;
    case 'q': of->no_reply = true; break;
    case 'I': of->set_stale = true; break;
    case 'F':
        if (!safe_strtoul(arg, &of->client_flags))
            of->has_error = true;
        break;
    case 'C':
        if (!safe_strtoull(arg, &of->req_cas)) {
            *errstr = bad_token;
            of->has_error = true;
        } else {
            of->has_cas = true;
        }
        break;
    case 'E':
        if (!safe_strtoull(arg, &of->explicit_cas)) {
            *errstr = bad_token;
            of->has_error = true;
        } else {
            of->has_explicit = true;
        }
        break;
    case 'M':
        if (t->length != 2) {
            *errstr = "CLIENT_ERROR incorrect length for M token";
            of->has_error = true;
        } else {
            of->mode = t->value[1];
        }
        break;
    case 'J':
        if (!safe_strtoull(arg, &of->initial)) {
            *errstr = "CLIENT_ERROR invalid numeric initial value";
            of->has_error = true;
        }
        break;
    case 'D':
        if (!safe_strtoull(arg, &of->delta)) {
            *errstr = "CLIENT_ERROR invalid numeric delta value";
            of->has_error = true;
        }
        break;
    default:
        *errstr = "CLIENT_ERROR invalid flag";
        return false;
    }
    return true;
}

/*
 * Validates flags tok[start..ntok).  Decodes a base64 key in place.
 * Returns false with *errstr set (left as the caller's default for
 * errors memcached reports generically).
 */
static bool meta_preparse(struct util_token *tok, size_t start, size_t ntok,
                          struct meta_req *of, const char **errstr)
{
    unsigned char seen[127] = {0};
    for (size_t i = start; i < ntok; i++) {
        unsigned char o = (unsigned char)tok[i].value[0];
        if (o >= 127 || seen[o]) {
            *errstr = "CLIENT_ERROR duplicate flag";
            return false;
        }
        seen[o] = 1;
        if (!meta_parse_flag(&tok[1], &tok[i], of, errstr))
            return false;
    }
    return !of->has_error;
}

/* Every O token must fit; memcached counts the 'O' itself. */
static bool meta_opaque_ok(const struct util_token *tok, size_t start,
                           size_t ntok)
{
    for (size_t i = start; i < ntok; i++)
        if (tok[i].value[0] == 'O' && tok[i].length > ASCII_OPAQUE_MAX)
            return false;
    return true;
}

static size_t meta_effective_ntok(size_t ntok, const char *rest)
{
    return rest != NULL ? ASCII_MAX_TOKENS + 1 : ntok;
}

/* Sends text + optional zero-copy value as one response. */
static void meta_send(conn *c, struct meta_line *m, item *value_it,
                      bool skip)
{
    if (value_it == NULL) {
        ascii_out_buf(c, m->buf, ml_len(m), skip);
        return;
    }
    struct resp *r = resp_new(c);
    bool ok = r != NULL;
    if (ok && !resp_add_text(r, m->buf, ml_len(m))) {
        char *copy = malloc(ml_len(m));
        ok = copy != NULL && resp_add_owned(r, copy, ml_len(m));
        if (ok)
            memcpy(copy, m->buf, ml_len(m));
        else
            free(copy);
    }
    ok = ok && resp_add_iov(r, ITEM_data(value_it), value_it->nbytes) &&
         resp_hold_item(r, value_it);
    if (!ok) {
        if (r != NULL)
            r->skip = true;
        item_release(value_it);
        out_errstring(c, "SERVER_ERROR out of memory writing get response");
        return;
    }
    r->skip = skip;
}

/* ---- mg --------------------------------------------------------------- */

/* The item side of an mg: its flags that read or change the item, in
 * request order (items.c runs them under the item lock). */
static void mg_ops(struct item_mg *mg, struct util_token *tok, size_t ntok,
                   const struct meta_req *of)
{
    for (size_t i = 2; i < ntok && mg->nops < ITEM_MG_OPS; i++) {
        uint8_t op;
        switch (tok[i].value[0]) {
        case 'T': op = MG_TOUCH; break;
        case 'N': op = MG_VIVIFY; break;
        case 'R': op = MG_RECACHE; break;
        case 's': op = MG_SIZE; break;
        case 't': op = MG_TTL; break;
        case 'c': op = MG_CAS; break;
        case 'f': op = MG_FLAGS; break;
        case 'l': op = MG_LAST_ACCESS; break;
        case 'h': op = MG_FETCHED; break;
        default: continue;
        }
        mg->op[mg->nops++] = op;
    }
    mg->touch_exptime = of->exptime;
    mg->vivify_exptime = of->autoviv_exptime;
    mg->recache_time = of->recache_time;
    mg->vivify = of->vivify;
}

/* Hit: the flags of an mg reply, from what items.c answered. */
static void mg_hit_flags(struct meta_line *m, struct util_token *tok,
                         size_t ntok, const struct meta_req *of,
                         const struct item_mg *mg, const char *key,
                         size_t nkey)
{
    unsigned int j = 0;
    for (size_t i = 2; i < ntok; i++) {
        char f = tok[i].value[0];
        switch (f) {
        case 'T': case 'N': case 'R':
            j++;
            break;
        case 's': case 'c': case 'f': case 'l': case 'h':
            ml_flag_u64(m, f, (uint64_t)mg->val[j++]);
            break;
        case 't':
            ml_mg_ttl(m, mg->val[j++]);
            break;
        case 'O': ml_token(m, &tok[i]); break;
        case 'k': ml_key(m, key, nkey, of->key_binary); break;
        }
    }
}

/* The EN line of an mg miss. */
static void mg_miss_line(struct meta_line *m, struct util_token *tok,
                         size_t ntok, const char *key, size_t nkey,
                         const struct meta_req *of)
{
    ml_init(m, "EN");
    for (size_t i = 2; i < ntok; i++) {
        if (tok[i].value[0] == 'O')
            ml_token(m, &tok[i]);
        else if (tok[i].value[0] == 'k')
            ml_key(m, key, nkey, of->key_binary);
    }
    ml_end(m);
}

/* An mg whose value is being read from SSD: both possible answers, made
 * while the request was parsed. */
struct mg_park {
    size_t hit_len, miss_len;
    bool quiet;
    char hit[sizeof(((struct meta_line *)0)->buf)];
    char miss[sizeof(((struct meta_line *)0)->buf)];
};

static void mg_fill(conn *c, item *value, void *ctx)
{
    const struct mg_park *g = ctx;
    if (value == NULL) {
        ascii_out_buf(c, g->miss, g->miss_len, g->quiet);
        return;
    }
    struct meta_line m;
    memcpy(m.buf, g->hit, g->hit_len);
    m.p = m.buf + g->hit_len;
    meta_send(c, &m, value, false);
}

static void meta_get(conn *c, struct util_token *tok, size_t ntok, char *rest)
{
    struct meta_req of = {0};
    const char *errstr = "CLIENT_ERROR bad command line format";

    if (ntok < 2) {
        out_string(c, "ERROR");
        return;
    }
    if (tok[1].length > KEY_MAX_LENGTH) {
        out_errstring(c, "CLIENT_ERROR bad command line format");
        return;
    }
    if (meta_effective_ntok(ntok, rest) > META_MAX_TOKENS) {
        out_errstring(c, "CLIENT_ERROR options flags are too long");
        return;
    }
    if (!meta_preparse(tok, 2, ntok, &of, &errstr)) {
        out_errstring(c, errstr);
        return;
    }
    if (!meta_opaque_ok(tok, 2, ntok)) {
        out_errstring(c, "CLIENT_ERROR opaque token too long");
        return;
    }
    c->noreply = of.no_reply;
    const char *key = tok[1].value;
    size_t nkey = tok[1].length;

    enum item_miss why = MISS_NONE;
    unsigned int clsid = 0;
    item *it = NULL;
    struct item_mg mg = { .partition = c->thread->partition, .tokens = true };
    mg_ops(&mg, tok, ntok, &of);
    struct item_read rq = { .key = key, .nkey = nkey, .bump = !of.no_update,
                            .value = of.value, .mg = &mg };
    struct mg_park g;
    g.hit_len = g.miss_len = 0;
    g.quiet = false;
    enum item_answer a = conn_read_item(c, &rq, mg_fill, &g, sizeof(g), &it,
                                        &why, &clsid);
    bool found = !(a == ITEM_MISS && clsid == 0);
    conn_count_read(c, key, nkey, it, found, found && mg.ttl_set, why, clsid);
    struct meta_line m;
    if (!found) {
        mg_miss_line(&m, tok, ntok, key, nkey, &of);
        ascii_out_buf(c, m.buf, ml_len(&m), c->noreply);
        return;
    }
    if (of.value) {
        ml_init(&m, "VA ");
        m.p = util_u64toa(mg.nbytes - 2, m.p);
    } else {
        ml_init(&m, "HD");
    }
    mg_hit_flags(&m, tok, ntok, &of, &mg, key, nkey);
    if (mg.token_sent)
        ml_flag(&m, 'Z');
    if (mg.stale)
        ml_flag(&m, 'X');
    if (mg.won)
        ml_flag(&m, 'W');
    ml_end(&m);

    if (a == ITEM_PENDING) {
        /* Both possible answers go with the placeholder. */
        struct mg_park *p = conn_read_item_ctx(c);
        struct meta_line miss;
        mg_miss_line(&miss, tok, ntok, key, nkey, &of);
        p->hit_len = ml_len(&m);
        memcpy(p->hit, m.buf, p->hit_len);
        p->miss_len = ml_len(&miss);
        memcpy(p->miss, miss.buf, p->miss_len);
        p->quiet = c->noreply;
        return;
    }
    if (a != ITEM_HIT) {        /* no memory, or the copy found it damaged */
        out_errstring(c, "SERVER_ERROR out of memory writing get response");
        return;
    }
    if (of.value) {
        meta_send(c, &m, it, false);
    } else {
        item_release(it);
        ascii_out_buf(c, m.buf, ml_len(&m), false);
    }
}

/* ---- ms --------------------------------------------------------------- */

/* Refuses an ms after its length is known: the value is swallowed. */
static void ms_refuse(conn *c, const char *errstr, size_t nbytes)
{
    out_errstring(c, errstr);
    c->sbytes = nbytes;
    conn_set_state(c, conn_swallow);
}

static bool ms_mode_op(char mode, enum store_op *op)
{
    switch (mode) {
    case 0: case 'S': *op = STORE_SET; return true;
    case 'E': *op = STORE_ADD; return true;
    case 'A': *op = STORE_APPEND; return true;
    case 'P': *op = STORE_PREPEND; return true;
    case 'R': *op = STORE_REPLACE; return true;
    default: return false;
    }
}

/* Remembers what the reply needs until the value has been read. */
static void ms_stash(conn *c, struct util_token *tok, size_t ntok,
                     const struct meta_req *of, enum store_op op)
{
    memset(&c->nr, 0, sizeof(c->nr));
    c->nr.cmd = ASCII_NREAD_META | op;
    c->nr.req_cas = of->req_cas;
    c->nr.meta_flags = (of->no_reply ? ASCII_MS_NOREPLY : 0) |
                       (of->key_binary ? ASCII_MS_BINKEY : 0) |
                       (of->set_stale && op == STORE_CAS ? ASCII_MS_STALE : 0) |
                       (of->has_explicit ? ASCII_MS_EXPLICIT : 0);
    c->nr.meta_arg[1] = (int64_t)of->explicit_cas;
    uint64_t order = 0;
    int shift = 0;
    for (size_t i = 3; i < ntok; i++) {
        char f = tok[i].value[0];
        if (f != 'O' && f != 'k' && f != 'c')
            continue;
        order |= (uint64_t)(unsigned char)f << shift;
        shift += 8;
        if (f == 'O') {
            c->nr.opaque_len = (uint32_t)tok[i].length;
            memcpy(c->nr.opaque, tok[i].value, tok[i].length);
        }
    }
    c->nr.meta_arg[0] = (int64_t)order;
}

static void meta_set(conn *c, struct util_token *tok, size_t ntok, char *rest)
{
    struct meta_req of = {0};
    const char *errstr = "CLIENT_ERROR bad command line format";
    int32_t vlen;

    if (ntok < 2) {
        out_string(c, "ERROR");
        return;
    }
    if (tok[1].length > KEY_MAX_LENGTH || ntok == 2) {
        out_errstring(c, "CLIENT_ERROR bad command line format");
        return;
    }
    if (meta_effective_ntok(ntok, rest) > META_MAX_TOKENS) {
        out_errstring(c, "CLIENT_ERROR options flags too long");
        return;
    }
    if (!safe_strtol(tok[2].value, &vlen) || vlen < 0 ||
        vlen > INT32_MAX - 2) {
        out_errstring(c, "CLIENT_ERROR bad command line format");
        return;
    }
    size_t nbytes = (size_t)vlen + 2;
    if (!meta_preparse(tok, 3, ntok, &of, &errstr)) {
        ms_refuse(c, errstr, nbytes);
        return;
    }
    c->noreply = of.no_reply;
    bool opaque_ok = meta_opaque_ok(tok, 3, ntok);
    enum store_op op;
    if (!ms_mode_op(of.mode, &op)) {
        ms_refuse(c, "CLIENT_ERROR invalid mode for ms M token", nbytes);
        return;
    }
    if (!opaque_ok) {
        ms_refuse(c, "CLIENT_ERROR opaque token too long", nbytes);
        return;
    }
    /* A CAS value turns set and replace into cas. */
    if (of.has_cas && (op == STORE_SET || op == STORE_REPLACE))
        op = STORE_CAS;

    const char *key = tok[1].value;
    size_t nkey = tok[1].length;
    item *it = item_alloc(key, nkey, of.client_flags, of.exptime, nbytes,
                          c->thread->partition);
    if (it == NULL) {
        if (item_size_ok(nkey, nbytes))
            STATS_INCR(&c->thread->stats, store_no_memory);
        else
            STATS_INCR(&c->thread->stats, store_too_large);
        ms_refuse(c, item_size_ok(nkey, nbytes)
                         ? "SERVER_ERROR out of memory storing object"
                         : "SERVER_ERROR object too large for cache",
                  nbytes);
        /* Avoid stale data persisting because the new value failed. */
        item_delete(key, nkey, 0, NULL);
        return;
    }
    c->item = it;
    c->ritem = ITEM_data(it);
    c->rlbytes = nbytes;
    ms_stash(c, tok, ntok, &of, op);
    conn_set_state(c, conn_nread);
}

void proto_meta_complete_set(conn *c)
{
    item *it = c->item;
    enum store_op op = ASCII_NREAD_OP(c->nr.cmd);
    struct thread_stats *ts = ASCII_STATS(c);
    uint64_t cas = 0;

    c->noreply = (c->nr.meta_flags & ASCII_MS_NOREPLY) != 0;
    if (c->redo_tries == 0) {
        SLAB_STATS_INCR(ts, it->slabs_clsid, set_cmds);
        if (prefix_stats_on())
            prefix_stats_set(ITEM_key(it), it->nkey);
    }
    if (memcmp(ITEM_data(it) + it->nbytes - 2, "\r\n", 2) != 0) {
        out_errstring(c, "CLIENT_ERROR bad data chunk");
        return;
    }
    enum store_result ret;
    bool cas_never = op == STORE_CAS &&
                     (c->nr.req_cas == 0 || !settings.use_cas);
    if ((c->nr.meta_flags & (ASCII_MS_STALE | ASCII_MS_EXPLICIT)) && !cas_never)
        ret = item_store_meta(it, op, c->nr.req_cas, &cas, c->thread->partition,
                              (c->nr.meta_flags & ASCII_MS_STALE) != 0,
                              (c->nr.meta_flags & ASCII_MS_EXPLICIT) != 0,
                              (uint64_t)c->nr.meta_arg[1], c->prior);
    else
        ret = ascii_store(c, it, op, c->nr.req_cas, &cas);
    switch (ascii_store_after(c, it, op, &ret)) {
    case ASCII_STORE_LATER:
        return;
    case ASCII_STORE_OOM:
        out_errstring(c, "SERVER_ERROR out of memory storing object");
        return;
    case ASCII_STORE_ANSWER:
        break;
    }
    struct meta_line m;
    switch (ret) {
    case STORE_STORED: ml_init(&m, "HD"); break;
    case STORE_EXISTS: ml_init(&m, "EX"); break;
    case STORE_NOT_FOUND: ml_init(&m, "NF"); break;
    default: ml_init(&m, "NS"); break;
    }
    if (ret != STORE_STORED)
        cas = 0;
    for (uint64_t order = (uint64_t)c->nr.meta_arg[0]; order; order >>= 8) {
        char f = (char)(order & 0xff);
        if (f == 'O') {
            *m.p++ = ' ';
            memcpy(m.p, c->nr.opaque, c->nr.opaque_len);
            m.p += c->nr.opaque_len;
        } else if (f == 'k') {
            ml_key(&m, ITEM_key(it), it->nkey,
                   (c->nr.meta_flags & ASCII_MS_BINKEY) != 0);
        } else if (f == 'c') {
            ml_flag_u64(&m, 'c', cas);
        }
    }
    ml_end(&m);
    ascii_out_buf(c, m.buf, ml_len(&m), ret == STORE_STORED && c->noreply);
}

/* ---- md --------------------------------------------------------------- */

/* Appends the O and k flags a reply echoes regardless of the outcome. */
static void meta_echo_flags(struct meta_line *m, struct util_token *tok,
                            size_t ntok, const struct meta_req *of)
{
    for (size_t i = 2; i < ntok; i++) {
        if (tok[i].value[0] == 'O')
            ml_token(m, &tok[i]);
        else if (tok[i].value[0] == 'k')
            ml_key(m, tok[1].value, tok[1].length, of->key_binary);
    }
}

/* Shared front of md and ma: counts, flags, opaque.  False if answered. */
static bool meta_front(conn *c, struct util_token *tok, size_t ntok,
                       char *rest, struct meta_req *of)
{
    const char *errstr = "CLIENT_ERROR bad command line format";
    if (ntok < 2) {
        out_string(c, "ERROR");
        return false;
    }
    if (tok[1].length > KEY_MAX_LENGTH) {
        out_string(c, "CLIENT_ERROR bad command line format");
        return false;
    }
    if (meta_effective_ntok(ntok, rest) > META_MAX_TOKENS) {
        out_string(c, "CLIENT_ERROR options flags too long");
        return false;
    }
    if (!meta_preparse(tok, 2, ntok, of, &errstr)) {
        out_errstring(c, "CLIENT_ERROR invalid or duplicate flag");
        return false;
    }
    c->noreply = of->no_reply;
    return true;
}

static void meta_delete(conn *c, struct util_token *tok, size_t ntok,
                        char *rest)
{
    struct meta_req of = {0};
    if (!meta_front(c, tok, ntok, rest, &of))
        return;
    if (!meta_opaque_ok(tok, 2, ntok)) {
        out_errstring(c, "CLIENT_ERROR opaque token too long");
        return;
    }
    const char *key = tok[1].value;
    size_t nkey = tok[1].length;
    const char *code = "NF";
    bool skip = false;
    struct item_md md = { .has_cas = of.has_cas, .req_cas = of.req_cas,
                          .stale = of.set_stale, .new_ttl = of.new_ttl,
                          .exptime = of.exptime, .set_cas = of.has_explicit,
                          .cas = of.explicit_cas };
    unsigned int clsid;
    if (prefix_stats_on())
        prefix_stats_delete(key, nkey);
    switch (item_delete_meta(key, nkey, &md, &clsid)) {
    case DELETE_NOT_FOUND:
        STATS_INCR(ASCII_STATS(c), delete_misses);
        break;
    case DELETE_EXISTS:
        STATS_INCR(ASCII_STATS(c), delete_misses);
        code = "EX";
        break;
    case DELETE_OK:
        SLAB_STATS_INCR(ASCII_STATS(c), clsid, delete_hits);
        /* fall through */
    case DELETE_STALE:
        code = "HD";
        skip = c->noreply;
        break;
    }

    struct meta_line m;
    ml_init(&m, code);
    meta_echo_flags(&m, tok, ntok, &of);
    ml_end(&m);
    ascii_out_buf(c, m.buf, ml_len(&m), skip);
}

/* ---- ma --------------------------------------------------------------- */

/* ma N on a miss: stores the J value.  Returns the store result. */
static enum store_result ma_vivify(conn *c, const char *key, size_t nkey,
                                   uint64_t initial, char *numbuf)
{
    char *end = util_u64toa(initial, numbuf);
    *end = '\0';
    size_t vlen = (size_t)(end - numbuf);
    item *it = item_alloc(key, nkey, 0, 0, vlen + 2, c->thread->partition);
    if (it == NULL)
        return STORE_NO_MEMORY;
    memcpy(ITEM_data(it), numbuf, vlen);
    memcpy(ITEM_data(it) + vlen, "\r\n", 2);
    enum store_result ret = item_store(it, STORE_ADD, 0, NULL,
                                       c->thread->partition);
    item_release(it);
    return ret;
}

/* Success reply of ma: flags in request order, then the value. */
static void ma_reply(conn *c, struct util_token *tok, size_t ntok,
                     const struct meta_req *of, const char *num,
                     bool created, bool skip)
{
    const char *key = tok[1].value;
    size_t nkey = tok[1].length;
    struct meta_line m;
    size_t vlen = strlen(num);

    if (of->value) {
        ml_init(&m, "VA ");
        m.p = util_u64toa(vlen, m.p);
    } else {
        ml_init(&m, "HD");
    }
    /* The item side: E, then c t T N in request order, under its lock. */
    struct item_mg mg = { .set_cas = of->has_explicit, .cas = of->explicit_cas,
                          .touch_exptime = of->exptime,
                          .vivify_exptime = of->autoviv_exptime,
                          .created = created };
    for (size_t i = 2; i < ntok && mg.nops < ITEM_MG_OPS; i++) {
        switch (tok[i].value[0]) {
        case 'c': mg.op[mg.nops++] = MG_CAS; break;
        case 't': mg.op[mg.nops++] = MG_TTL; break;
        case 'T': mg.op[mg.nops++] = MG_TOUCH; break;
        case 'N': mg.op[mg.nops++] = MG_VIVIFY; break;
        }
    }
    struct item_read rq = { .key = key, .nkey = nkey, .mg = &mg };
    item *it = NULL;
    enum item_miss why;
    unsigned int clsid;
    bool found = item_read(&rq, &it, &why, &clsid) == ITEM_HIT;
    if (it != NULL)
        item_release(it);
    unsigned int j = 0;
    for (size_t i = 2; i < ntok; i++) {
        char f = tok[i].value[0];
        if (f == 'O') {
            ml_token(&m, &tok[i]);
        } else if (f == 'k') {
            ml_key(&m, key, nkey, of->key_binary);
        } else if (!found || (f != 'c' && f != 't' && f != 'T' && f != 'N')) {
            continue;
        } else if (f == 'c') {
            ml_flag_u64(&m, 'c', (uint64_t)mg.val[j++]);
        } else if (f == 't') {
            ml_mg_ttl(&m, mg.val[j++]);
        } else {
            j++;
        }
    }
    if (of->value) {
        ml_end(&m);
        memcpy(m.p, num, vlen);
        m.p += vlen;
    }
    ml_end(&m);
    ascii_out_buf(c, m.buf, ml_len(&m), skip);
}

/* An ma whose old value is on SSD: the request line, run again once the
 * value is read. */
struct ma_retry_args {
    size_t len;
    char line[ASCII_MAX_TOKENS * (KEY_MAX_LENGTH * 2 + 8)];
};

static void meta_arith(conn *c, struct util_token *tok, size_t ntok,
                       char *rest);

static void ma_retry(conn *c, void *args)
{
    struct ma_retry_args *a = args;
    struct util_token tok[ASCII_MAX_TOKENS];
    char *rest = NULL;
    a->line[a->len] = '\0';
    size_t ntok = util_tokenize(a->line, tok, ASCII_MAX_TOKENS, &rest);
    meta_arith(c, tok, ntok, rest);
}

/* Rebuilds the request line (the key as the client sent it: base64 again
 * if the b flag decoded it) and retries it once the value is read. */
static void ma_park(conn *c, struct util_token *tok, size_t ntok,
                    bool key_binary)
{
    struct ma_retry_args *a = malloc(sizeof(*a));
    if (a == NULL) {
        out_errstring(c, "SERVER_ERROR out of memory");
        return;
    }
    a->len = 0;
    for (size_t i = 0; i < ntok && a->len + tok[i].length * 2 + 8 < sizeof(a->line); i++) {
        if (i > 0)
            a->line[a->len++] = ' ';
        if (i == 1 && key_binary) {
            a->len += base64_encode((const unsigned char *)tok[i].value,
                                    tok[i].length,
                                    (unsigned char *)a->line + a->len,
                                    sizeof(a->line) - a->len);
            continue;
        }
        memcpy(a->line + a->len, tok[i].value, tok[i].length);
        a->len += tok[i].length;
    }
    conn_retry(c, tok[1].value, tok[1].length, ma_retry, NULL, a,
               offsetof(struct ma_retry_args, line) + a->len + 1);
    free(a);
}

static void meta_arith(conn *c, struct util_token *tok, size_t ntok,
                       char *rest)
{
    struct meta_req of = {0};
    of.delta = 1;
    if (!meta_front(c, tok, ntok, rest, &of))
        return;
    bool incr;
    switch (of.mode) {
    case 0: case 'I': case '+': incr = true; break;
    case 'D': case '-': incr = false; break;
    default:
        out_errstring(c, "CLIENT_ERROR invalid mode for ma M token");
        return;
    }
    if (!meta_opaque_ok(tok, 2, ntok)) {
        out_errstring(c, "CLIENT_ERROR opaque token too long");
        return;
    }
    const char *key = tok[1].value;
    size_t nkey = tok[1].length;
    char num[32];
    const char *code;

    switch (item_add_delta(key, nkey, incr, of.delta,
                           of.has_cas ? of.req_cas : 0, num, NULL,
                           c->thread->partition, c->prior)) {
    case DELTA_NEED_VALUE:
        ma_park(c, tok, ntok, of.key_binary);
        return;
    case DELTA_OK:
        ascii_count_delta_hit(c, nkey, num, incr);
        ma_reply(c, tok, ntok, &of, num, false, c->noreply);
        return;
    case DELTA_NON_NUMERIC:
        out_errstring(c, "CLIENT_ERROR cannot increment or decrement "
                         "non-numeric value");
        return;
    case DELTA_NO_MEMORY:
        out_errstring(c, "SERVER_ERROR out of memory");
        return;
    case DELTA_EXISTS:
        code = "EX";
        break;
    case DELTA_NOT_FOUND:
    default:
        if (of.vivify) {
            enum store_result sr = ma_vivify(c, key, nkey, of.initial, num);
            if (sr == STORE_STORED) {
                /* memcached does not hide this HD under q. */
                ma_reply(c, tok, ntok, &of, num, true, false);
                return;
            }
            if (sr == STORE_NO_MEMORY) {
                out_errstring(c, "SERVER_ERROR Out of memory allocating "
                                 "new item");
                return;
            }
            code = "NS";
            break;
        }
        if (incr)
            STATS_INCR(ASCII_STATS(c), incr_misses);
        else
            STATS_INCR(ASCII_STATS(c), decr_misses);
        code = "NF";
        break;
    }
    struct meta_line m;
    ml_init(&m, code);
    meta_echo_flags(&m, tok, ntok, &of);
    ml_end(&m);
    ascii_out_buf(c, m.buf, ml_len(&m), false);
}

/* ---- me, mn, dispatch -------------------------------------------------- */

static void meta_debug(conn *c, struct util_token *tok, size_t ntok)
{
    if (ntok < 2 || tok[1].length > KEY_MAX_LENGTH) {
        out_string(c, "CLIENT_ERROR bad command line format");
        return;
    }
    char *key = tok[1].value;
    size_t nkey = tok[1].length;
    bool binary = ntok >= 3 && tok[2].length == 1 && tok[2].value[0] == 'b';
    if (binary) {
        nkey = base64_decode((unsigned char *)key, nkey,
                             (unsigned char *)key, nkey);
        if (nkey == 0) {
            out_string(c, "CLIENT_ERROR bad command line format");
            return;
        }
    }
    STATS_INCR(ASCII_STATS(c), meta_cmds);
    /* The item itself, not its value: me reports where it is. */
    struct item_mg mg = { .nops = 3, .op = { MG_LAST_ACCESS, MG_CAS, MG_FETCHED } };
    struct item_read rq = { .key = key, .nkey = nkey, .mg = &mg };
    item *it = NULL;
    enum item_miss why;
    unsigned int clsid;
    if (item_read(&rq, &it, &why, &clsid) != ITEM_HIT) {
        out_string(c, "EN");
        return;
    }
    item_release(it);
    static const char *const tier_names[] = { "dram", "nvm", "ssd" };
    const char *tier = mg.tier < 3 ? tier_names[mg.tier] : "?";
    struct meta_line m;
    ml_init(&m, "ME ");
    m.p = ascii_put_key(m.p, key, nkey, binary);
    /* memcached prints now - exptime here (negative while alive). */
    int exp = mg.exptime == 0 ? -1 : (int)(mc_now() - mg.exptime);
    m.p += snprintf(m.p, sizeof(m.buf) - ml_len(&m),
                    " exp=%d la=%llu cas=%llu fetch=%s cls=%u size=%zu"
                    " tier=%s\r\n",
                    exp, (unsigned long long)mg.val[0],
                    (unsigned long long)mg.val[1], mg.val[2] ? "yes" : "no",
                    clsid, (size_t)item_make_size(nkey, mg.nbytes), tier);
    ascii_out_buf(c, m.buf, ml_len(&m), false);
}

void proto_meta_process(conn *c, struct util_token *tok, size_t ntok,
                        char *rest)
{
    switch (tok[0].value[1]) {
    case 'g': meta_get(c, tok, ntok, rest); break;
    case 's': meta_set(c, tok, ntok, rest); break;
    case 'd': meta_delete(c, tok, ntok, rest); break;
    case 'a': meta_arith(c, tok, ntok, rest); break;
    case 'e': meta_debug(c, tok, ntok); break;
    case 'n': out_string(c, "MN"); break;
    default: out_string(c, "ERROR"); break;
    }
}

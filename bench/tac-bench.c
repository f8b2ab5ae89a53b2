/*
 * tac-bench.c - YCSB-style load generator for memcached-compatible servers
 *               (text protocol), used to compare tac-memcached with stock
 *               memcached and memcached+extstore.
 *
 * Purpose
 *   Load a dataset of N records, then drive a timed closed-loop run of a
 *   YCSB core workload (A, B, C, D, F or a custom read/update/insert/rmw
 *   mix) and report throughput, latency percentiles per operation type,
 *   misses, wrong values and the server's per-tier stat deltas, as a human
 *   table and optionally as JSON (--json FILE).
 *
 * Design
 *   - T worker threads; each owns C/T connections (C = --conns) and drives
 *     them with its own epoll set (level-triggered).  Every connection keeps
 *     up to --depth requests in flight (pipelining): whenever responses come
 *     back, the freed slots are refilled and all new requests leave in one
 *     write().  Responses arrive in order, so each connection keeps a FIFO of
 *     what it sent (type, key, version, send time).
 *   - Latency = time the response was parsed - time the request was queued
 *     for sending.  One clock read per read() batch.  Per-thread log-linear
 *     histograms (HdrHistogram style: 128 linear sub-buckets per power of
 *     two, < 0.4% relative error, nanosecond unit, nothing sorted) are merged
 *     at the end.
 *   - Key choice: YCSB's scrambled Zipfian (Gray et al. zipfian over a huge
 *     item space, then FNV-1a-64 of the rank modulo the record count; for
 *     theta=0.99 the item space is 1e10 with YCSB's precomputed zeta),
 *     uniform, or "latest" (zipfian on recency over the acknowledged inserts,
 *     with incremental zeta like YCSB's SkewedLatestGenerator).  Keys are
 *     zero-padded hex record numbers of --key-size bytes (default 8).
 *   - Values: "<key> <ver:8 hex> <sum:16 hex> <filler>".  The filler is a
 *     deterministic function of (key, version); the checksum covers key,
 *     version, length and filler; the length is a function of (key,
 *     version) for distributed sizes.  A hit whose key, length or checksum
 *     does not match is counted as WRONG; END without a value is a MISS.
 *   - Inserts (workload D) take fresh record numbers from a shared counter;
 *     readers only pick numbers below the "acknowledged" limit (a ring of
 *     done-flags advanced under a mutex), so in-flight inserts are not read.
 *   - Read-modify-write (workload F): get, then a set of version+1 on the
 *     same connection; its latency spans both.
 *   - `stats` is read on a separate blocking connection before and after the
 *     run; numeric deltas of get_hits/get_misses/evictions and of any stat
 *     whose name starts with get_hits_, evict_, fetch_, ssd_ (plus nvm_,
 *     tier_, extstore_, get_extstore) are reported.
 *
 * Threads
 *   The main thread parses options, connects, shows the load progress bar,
 *   reads stats and times the phases; workers only touch their own
 *   connections, histograms and counters, except for the shared atomics
 *   (load cursor, insert counter, phase flags) and the ack ring mutex.
 *   Phases are separated with a pthread barrier.
 *
 * Client CPU cost is measured with getrusage() over the recorded interval
 * and reported (cores used, ns per op) so a run can tell whether the client
 * or the server was the bottleneck.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <inttypes.h>
#include <math.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <openssl/err.h>
#include <openssl/ssl.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <sys/types.h>
#include <time.h>
#include <unistd.h>

/* ------------------------------------------------------------------ */
/* small helpers                                                       */

static void die(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    fprintf(stderr, "tac-bench: ");
    vfprintf(stderr, fmt, ap);
    fprintf(stderr, "\n");
    va_end(ap);
    exit(2);
}

static inline uint64_t now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

static double cpu_seconds(void)
{
    struct rusage ru;
    getrusage(RUSAGE_SELF, &ru);
    return ru.ru_utime.tv_sec + ru.ru_utime.tv_usec / 1e6 +
           ru.ru_stime.tv_sec + ru.ru_stime.tv_usec / 1e6;
}

static void *xcalloc(size_t n, size_t sz)
{
    void *p = calloc(n, sz);
    if (!p)
        die("out of memory");
    return p;
}

static inline uint64_t mix64(uint64_t z)
{
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

/* xoshiro256** (Blackman & Vigna), seeded through splitmix64. */
typedef struct { uint64_t s[4]; } rng_t;

static inline uint64_t rotl(uint64_t x, int k) { return (x << k) | (x >> (64 - k)); }

static void rng_seed(rng_t *r, uint64_t seed)
{
    for (int i = 0; i < 4; i++) {
        seed += 0x9e3779b97f4a7c15ull;
        r->s[i] = mix64(seed);
    }
}

static inline uint64_t rng_next(rng_t *r)
{
    uint64_t *s = r->s;
    uint64_t res = rotl(s[1] * 5, 7) * 9, t = s[1] << 17;
    s[2] ^= s[0]; s[3] ^= s[1]; s[1] ^= s[2]; s[0] ^= s[3];
    s[2] ^= t; s[3] = rotl(s[3], 45);
    return res;
}

static inline double rng_double(rng_t *r) { return (rng_next(r) >> 11) * 0x1.0p-53; }

/* FNV-1a 64 over the 8 octets of v, low byte first (as YCSB's fnvhash64). */
static inline uint64_t fnv64(uint64_t v)
{
    uint64_t h = 0xcbf29ce484222325ull;
    for (int i = 0; i < 8; i++) {
        h ^= v & 0xff;
        h *= 1099511628211ull;
        v >>= 8;
    }
    int64_t s = (int64_t)h;
    return s < 0 ? (uint64_t)(-(s + 1)) + 1 : (uint64_t)s; /* |h| as a long */
}

/* ------------------------------------------------------------------ */
/* zipfian (Gray et al., "Quickly generating billion-record synthetic  */
/* databases"), as used by YCSB                                        */

#define YCSB_ITEM_COUNT 10000000000ull
#define YCSB_ZETAN_099 26.46902820178302

typedef struct {
    uint64_t n;       /* items the zeta was computed for */
    double theta, alpha, zetan, zeta2, eta, half_pow;
} zipf_t;

static double zeta_range(uint64_t from, uint64_t to, double theta)
{
    double s = 0;
    for (uint64_t i = from; i < to; i++)
        s += 1.0 / pow((double)(i + 1), theta);
    return s;
}

static void zipf_finish(zipf_t *z)
{
    z->alpha = 1.0 / (1.0 - z->theta);
    z->zeta2 = zeta_range(0, 2, z->theta);
    z->half_pow = 1.0 + pow(0.5, z->theta);
    z->eta = (1.0 - pow(2.0 / (double)z->n, 1.0 - z->theta)) / (1.0 - z->zeta2 / z->zetan);
}

static void zipf_init(zipf_t *z, uint64_t n, double theta, double zetan)
{
    z->n = n < 2 ? 2 : n;
    z->theta = theta;
    z->zetan = zetan > 0 ? zetan : zeta_range(0, z->n, theta);
    zipf_finish(z);
}

/* Grow the item count incrementally (latest distribution). */
static void zipf_grow(zipf_t *z, uint64_t n)
{
    if (n <= z->n)
        return;
    z->zetan += zeta_range(z->n, n, z->theta);
    z->n = n;
    zipf_finish(z);
}

static inline uint64_t zipf_next(zipf_t *z, rng_t *r)
{
    double u = rng_double(r), uz = u * z->zetan;
    if (uz < 1.0)
        return 0;
    if (uz < z->half_pow)
        return 1;
    uint64_t v = (uint64_t)((double)z->n * pow(z->eta * u - z->eta + 1.0, z->alpha));
    return v >= z->n ? z->n - 1 : v;
}

/* ------------------------------------------------------------------ */
/* log-linear histogram                                                */

#define H_SUB_BITS 8
#define H_HALF (1u << (H_SUB_BITS - 1))
#define H_BUCKETS (H_HALF * 44) /* values up to 2^50 ns */

typedef struct {
    uint64_t count, sum, min, max;
    uint64_t b[H_BUCKETS];
} hist_t;

static inline unsigned h_index(uint64_t v)
{
    if (v < (1u << H_SUB_BITS))
        return (unsigned)v;
    unsigned e = (63 - __builtin_clzll(v)) - (H_SUB_BITS - 1);
    unsigned i = e * H_HALF + (unsigned)(v >> e);
    return i < H_BUCKETS ? i : H_BUCKETS - 1;
}

static uint64_t h_value(unsigned i) /* middle of bucket i */
{
    if (i < (1u << H_SUB_BITS))
        return i;
    unsigned e = i / H_HALF - 1;
    uint64_t m = i - e * H_HALF;
    return (m << e) + ((1ull << e) >> 1);
}

static inline void h_add(hist_t *h, uint64_t v)
{
    h->b[h_index(v)]++;
    h->count++;
    h->sum += v;
    if (v > h->max)
        h->max = v;
    if (!h->min || v < h->min)
        h->min = v;
}

static void h_merge(hist_t *d, const hist_t *s)
{
    for (unsigned i = 0; i < H_BUCKETS; i++)
        d->b[i] += s->b[i];
    d->count += s->count;
    d->sum += s->sum;
    if (s->max > d->max)
        d->max = s->max;
    if (s->min && (!d->min || s->min < d->min))
        d->min = s->min;
}

static uint64_t h_pct(const hist_t *h, double p)
{
    if (!h->count)
        return 0;
    uint64_t want = (uint64_t)ceil(p / 100.0 * (double)h->count), acc = 0;
    if (want < 1)
        want = 1;
    for (unsigned i = 0; i < H_BUCKETS; i++) {
        acc += h->b[i];
        if (acc >= want) {
            uint64_t v = h_value(i);
            return v > h->max ? h->max : v;
        }
    }
    return h->max;
}

/* ------------------------------------------------------------------ */
/* configuration                                                       */

enum { OP_READ, OP_UPDATE, OP_INSERT, OP_RMW, OP_NTYPES, OP_LOAD = OP_NTYPES, OP_RMW_SET };
static const char *op_names[OP_NTYPES] = { "read", "update", "insert", "rmw" };
enum { DIST_ZIPF, DIST_UNIFORM, DIST_LATEST };
static const char *dist_names[] = { "zipfian", "uniform", "latest" };

static struct {
    char host[256], port[16];
    int threads, conns, depth;
    uint64_t records;
    double duration, warmup;
    char workload[16];
    double prop[OP_NTYPES];
    int dist;
    double theta;
    int key_size;
    int vsize_kind; /* 0 fixed, 1 uniform, 2 list */
    uint32_t vmin, vmax, vlist[32];
    int vlist_n;
    char vsize_spec[128];
    uint64_t seed;
    const char *json;
    bool no_load, load_only, no_stats, quiet, no_verify;
    bool tls;               /* --tls: every load connection speaks TLS */
    char stats_port[16];    /* --stats-port: stats over plain TCP on this port */
    char label[128];
} cfg;

static SSL_CTX *tls_ctx;    /* --tls; the server's certificate is not checked */

/* ------------------------------------------------------------------ */
/* values                                                              */

#define HDR_EXTRA 27 /* " %08x %016x " after the key */

static inline uint32_t value_size(uint64_t key, uint32_t ver)
{
    if (cfg.vsize_kind == 0)
        return cfg.vmin;
    uint64_t h = mix64(key * 0x9e3779b97f4a7c15ull ^ ((uint64_t)ver << 32 | 0x5bd1e995u));
    if (cfg.vsize_kind == 1)
        return cfg.vmin + (uint32_t)(h % (uint64_t)(cfg.vmax - cfg.vmin + 1));
    return cfg.vlist[h % (uint64_t)cfg.vlist_n];
}

static inline void key_str(char *dst, uint64_t k)
{
    static const char hx[] = "0123456789abcdef";
    for (int i = cfg.key_size - 1; i >= 0; i--) {
        dst[i] = hx[k & 15];
        k >>= 4;
    }
}

static uint64_t value_sum(uint64_t key, uint32_t ver, uint32_t len, const char *fill, size_t n)
{
    uint64_t h = mix64(key ^ ((uint64_t)ver << 40) ^ ((uint64_t)len << 20) ^ 0x7ac0ffee);
    size_t i = 0;
    for (; i + 8 <= n; i += 8) {
        uint64_t w;
        memcpy(&w, fill + i, 8);
        h = rotl((h ^ w) * 0x9e3779b97f4a7c15ull, 29);
    }
    for (; i < n; i++)
        h = (h ^ (uint8_t)fill[i]) * 0x100000001b3ull;
    return mix64(h);
}

static inline void put_hex(char *d, uint64_t v, int n)
{
    static const char hx[] = "0123456789abcdef";
    for (int i = n - 1; i >= 0; i--) {
        d[i] = hx[v & 15];
        v >>= 4;
    }
}

/* Write the value for (key, ver) of length len at dst. */
static void value_fill(char *dst, uint64_t key, uint32_t ver, uint32_t len)
{
    int k = cfg.key_size;
    char *fill = dst + k + HDR_EXTRA;
    size_t n = len - (size_t)(k + HDR_EXTRA), i = 0;
    uint64_t s = mix64(key * 31 + ver + 1);
    for (; i + 8 <= n; i += 8) {
        s += 0x9e3779b97f4a7c15ull;
        uint64_t w = (mix64(s) & 0x1f1f1f1f1f1f1f1full) | 0x4040404040404040ull;
        memcpy(fill + i, &w, 8);
    }
    for (; i < n; i++)
        fill[i] = (char)('a' + (i % 26));
    key_str(dst, key);
    dst[k] = ' ';
    put_hex(dst + k + 1, ver, 8);
    dst[k + 9] = ' ';
    put_hex(dst + k + 10, value_sum(key, ver, len, fill, n), 16);
    dst[k + 26] = ' ';
}

static inline int hexval(char c)
{
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    return -1;
}

static bool parse_hex(const char *s, int n, uint64_t *out)
{
    uint64_t v = 0;
    for (int i = 0; i < n; i++) {
        int d = hexval(s[i]);
        if (d < 0)
            return false;
        v = v << 4 | (uint64_t)d;
    }
    *out = v;
    return true;
}

/* Check a value read for key; returns true if right, sets *ver. */
static bool value_check(uint64_t key, const char *v, uint32_t len, uint32_t *ver)
{
    int k = cfg.key_size;
    char ks[256];
    uint64_t ve, sum;
    if (len < (uint32_t)(k + HDR_EXTRA))
        return false;
    key_str(ks, key);
    if (memcmp(v, ks, (size_t)k) != 0 || v[k] != ' ' || v[k + 9] != ' ' || v[k + 26] != ' ')
        return false;
    if (!parse_hex(v + k + 1, 8, &ve) || !parse_hex(v + k + 10, 16, &sum))
        return false;
    *ver = (uint32_t)ve;
    if (value_size(key, *ver) != len)
        return false;
    if (cfg.no_verify)
        return true;
    return value_sum(key, *ver, len, v + k + HDR_EXTRA, len - (size_t)(k + HDR_EXTRA)) == sum;
}

/* ------------------------------------------------------------------ */
/* shared state                                                        */

enum { PH_LOAD, PH_RUN, PH_DONE };
static atomic_int phase;
static atomic_int stop_issue;     /* stop sending new requests */
static atomic_int recording;      /* count completions */
static atomic_uint_fast64_t load_next, load_done;
static atomic_uint_fast64_t insert_next;
static atomic_uint_fast64_t acked_limit;   /* keys [0, acked_limit) exist */
static pthread_mutex_t ack_mu = PTHREAD_MUTEX_INITIALIZER;
#define ACK_RING (1u << 20)
static uint8_t *ack_ring;
static pthread_barrier_t bar;
static atomic_int fatal_errors;

static void ack_insert(uint64_t k)
{
    pthread_mutex_lock(&ack_mu);
    ack_ring[k & (ACK_RING - 1)] = 1;
    uint64_t lim = atomic_load(&acked_limit);
    while (ack_ring[lim & (ACK_RING - 1)]) {
        ack_ring[lim & (ACK_RING - 1)] = 0;
        lim++;
    }
    atomic_store(&acked_limit, lim);
    pthread_mutex_unlock(&ack_mu);
}

/* ------------------------------------------------------------------ */
/* connections and workers                                             */

typedef struct {
    uint8_t type;
    uint16_t tries;      /* load: times this set was refused and resent */
    uint32_t ver;
    uint64_t key, t_sent, t_start;
} req_t;

/* A load set the server refuses (SERVER_ERROR, e.g. while a tiered server
 * makes room) is resent, like a client would, this many times. */
#define LOAD_RETRIES 2000

typedef struct {
    int fd;
    SSL *ssl;            /* --tls */
    bool want_out, dead;
    char *rbuf, *wbuf;
    size_t rcap, rlen, roff, wcap, wlen, woff;
    req_t *q;            /* FIFO of in-flight requests */
    unsigned qhead, qn;
    req_t *defer;        /* RMW sets waiting to go out */
    unsigned ndefer;
} conn_t;

typedef struct {
    uint64_t ops[OP_NTYPES], hits, misses, wrong, errors, load_ok, load_err, load_retries;
    hist_t h[OP_NTYPES];
} tstats_t;

typedef struct {
    int id, epfd, nconn;
    conn_t *c;
    rng_t rng;
    zipf_t zipf, zlatest;
    uint32_t ver_ctr;
    tstats_t st;
    pthread_t tid;
} worker_t;

static worker_t *workers;
static size_t max_req_bytes;

static int connect_server(bool nonblock, const char *port)
{
    struct addrinfo hints = { 0 }, *res, *ai;
    hints.ai_socktype = SOCK_STREAM;
    int rc = getaddrinfo(cfg.host, port, &hints, &res);
    if (rc)
        die("resolve %s:%s: %s", cfg.host, cfg.port, gai_strerror(rc));
    int fd = -1;
    for (ai = res; ai; ai = ai->ai_next) {
        fd = socket(ai->ai_family, ai->ai_socktype, ai->ai_protocol);
        if (fd < 0)
            continue;
        if (connect(fd, ai->ai_addr, ai->ai_addrlen) == 0)
            break;
        close(fd);
        fd = -1;
    }
    freeaddrinfo(res);
    if (fd < 0)
        die("connect %s:%s: %s", cfg.host, port, strerror(errno));
    int one = 1;
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    if (nonblock)
        fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) | O_NONBLOCK);
    return fd;
}

/* --tls: the handshake, blocking, on a fresh socket. */
static SSL *tls_connect(int fd)
{
    SSL *ssl = SSL_new(tls_ctx);
    if (ssl == NULL || SSL_set_fd(ssl, fd) != 1 || SSL_connect(ssl) != 1) {
        ERR_print_errors_fp(stderr);
        die("TLS handshake with %s:%s failed", cfg.host, cfg.port);
    }
    return ssl;
}

/* write(2) or SSL_write; a TLS "want" is EAGAIN. */
static ssize_t conn_out(conn_t *c, const void *buf, size_t len)
{
    if (c->ssl == NULL)
        return write(c->fd, buf, len);
    size_t n = 0;
    if (SSL_write_ex(c->ssl, buf, len, &n) == 1)
        return (ssize_t)n;
    int e = SSL_get_error(c->ssl, 0);
    errno = e == SSL_ERROR_WANT_WRITE || e == SSL_ERROR_WANT_READ ? EAGAIN : EPIPE;
    return -1;
}

/* read(2) or SSL_read; a TLS "want" is EAGAIN, a closed session 0. */
static ssize_t conn_in(conn_t *c, void *buf, size_t len)
{
    if (c->ssl == NULL)
        return read(c->fd, buf, len);
    size_t n = 0;
    if (SSL_read_ex(c->ssl, buf, len, &n) == 1)
        return (ssize_t)n;
    int e = SSL_get_error(c->ssl, 0);
    if (e == SSL_ERROR_ZERO_RETURN)
        return 0;
    errno = e == SSL_ERROR_WANT_WRITE || e == SSL_ERROR_WANT_READ ? EAGAIN : ECONNRESET;
    return -1;
}

static uint64_t choose_key(worker_t *w)
{
    uint64_t lim = atomic_load_explicit(&acked_limit, memory_order_relaxed);
    if (lim == 0)
        lim = 1;
    switch (cfg.dist) {
    case DIST_UNIFORM:
        return rng_next(&w->rng) % lim;
    case DIST_LATEST:
        zipf_grow(&w->zlatest, lim);
        return lim - 1 - zipf_next(&w->zlatest, &w->rng) % lim;
    default: {
        uint64_t k = fnv64(zipf_next(&w->zipf, &w->rng)) % cfg.records;
        return k < lim ? k : k % lim;
    }
    }
}

static void q_push(conn_t *c, uint8_t type, uint64_t key, uint32_t ver, uint64_t t, uint64_t t0)
{
    req_t *r = &c->q[(c->qhead + c->qn) % (unsigned)cfg.depth];
    r->type = type; r->key = key; r->ver = ver; r->t_sent = t; r->t_start = t0;
    r->tries = 0;
    c->qn++;
}

static void emit_get(conn_t *c, uint64_t key)
{
    char *p = c->wbuf + c->wlen;
    memcpy(p, "get ", 4);
    key_str(p + 4, key);
    p += 4 + cfg.key_size;
    *p++ = '\r'; *p++ = '\n';
    c->wlen = (size_t)(p - c->wbuf);
}

static void emit_set(conn_t *c, uint64_t key, uint32_t ver)
{
    uint32_t len = value_size(key, ver);
    char *p = c->wbuf + c->wlen;
    memcpy(p, "set ", 4);
    key_str(p + 4, key);
    p += 4 + cfg.key_size;
    p += sprintf(p, " 0 0 %u\r\n", len);
    value_fill(p, key, ver, len);
    p += len;
    *p++ = '\r'; *p++ = '\n';
    c->wlen = (size_t)(p - c->wbuf);
}

static int pick_op(worker_t *w)
{
    double u = rng_double(&w->rng), acc = 0;
    for (int i = 0; i < OP_NTYPES; i++) {
        acc += cfg.prop[i];
        if (u < acc)
            return i;
    }
    return OP_READ;
}

/* Fill free pipeline slots with new requests. */
static void refill(worker_t *w, conn_t *c, uint64_t t)
{
    if (c->woff == c->wlen)
        c->woff = c->wlen = 0;
    while (c->qn < (unsigned)cfg.depth && c->wcap - c->wlen >= max_req_bytes) {
        if (c->ndefer) {
            req_t d = c->defer[--c->ndefer];
            if (d.type == OP_LOAD) {
                emit_set(c, d.key, 0);
                q_push(c, OP_LOAD, d.key, 0, t, d.t_start);
                c->q[(c->qhead + c->qn - 1) % (unsigned)cfg.depth].tries = d.tries;
                continue;
            }
            emit_set(c, d.key, d.ver);
            q_push(c, OP_RMW_SET, d.key, d.ver, t, d.t_start);
            continue;
        }
        if (atomic_load_explicit(&stop_issue, memory_order_relaxed))
            break;
        if (atomic_load_explicit(&phase, memory_order_relaxed) == PH_LOAD) {
            uint64_t k = atomic_fetch_add(&load_next, 1);
            if (k >= cfg.records)
                break;
            emit_set(c, k, 0);
            q_push(c, OP_LOAD, k, 0, t, t);
            continue;
        }
        int op = pick_op(w);
        uint64_t key;
        switch (op) {
        case OP_READ:
        case OP_RMW:
            key = choose_key(w);
            emit_get(c, key);
            q_push(c, (uint8_t)op, key, 0, t, t);
            break;
        case OP_UPDATE: {
            key = choose_key(w);
            uint32_t ver = ((uint32_t)(w->id + 1) << 24) | (++w->ver_ctr & 0xffffff);
            emit_set(c, key, ver);
            q_push(c, OP_UPDATE, key, ver, t, t);
            break;
        }
        case OP_INSERT:
            key = atomic_fetch_add(&insert_next, 1);
            emit_set(c, key, 0);
            q_push(c, OP_INSERT, key, 0, t, t);
            break;
        }
    }
}

static void conn_flush(worker_t *w, conn_t *c)
{
    while (c->woff < c->wlen) {
        ssize_t n = conn_out(c, c->wbuf + c->woff, c->wlen - c->woff);
        if (n > 0) {
            c->woff += (size_t)n;
            continue;
        }
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK))
            break;
        c->dead = true;
        atomic_fetch_add(&fatal_errors, 1);
        return;
    }
    bool want = c->woff < c->wlen;
    if (want != c->want_out) {
        struct epoll_event ev = { .events = EPOLLIN | (want ? EPOLLOUT : 0), .data.ptr = c };
        epoll_ctl(w->epfd, EPOLL_CTL_MOD, c->fd, &ev);
        c->want_out = want;
    }
}

static void complete(worker_t *w, conn_t *c, req_t *r, uint64_t t, int outcome)
{
    /* outcome: 0 ok/hit, 1 miss, 2 wrong, 3 error */
    bool rec = atomic_load_explicit(&recording, memory_order_relaxed);
    tstats_t *s = &w->st;
    switch (r->type) {
    case OP_LOAD:
        if (outcome == 3 && r->tries < LOAD_RETRIES && c->ndefer < (unsigned)cfg.depth) {
            c->defer[c->ndefer++] = (req_t){ .type = OP_LOAD, .key = r->key,
                                             .t_start = r->t_start,
                                             .tries = (uint16_t)(r->tries + 1) };
            s->load_retries++;
            return;
        }
        if (outcome == 0) s->load_ok++; else s->load_err++;
        atomic_fetch_add_explicit(&load_done, 1, memory_order_relaxed);
        return;
    case OP_INSERT:
        ack_insert(r->key);
        break;
    case OP_RMW:
        if (outcome == 3) break;
        /* queue the write half; latency is recorded when it completes */
        c->defer[c->ndefer++] = (req_t){ .type = OP_RMW_SET, .key = r->key,
                                         .ver = r->ver + 1, .t_start = r->t_start };
        if (rec) {
            if (outcome == 0) s->hits++;
            else if (outcome == 1) s->misses++;
            else if (outcome == 2) s->wrong++;
        }
        return;
    }
    if (!rec)
        return;
    int op = r->type == OP_RMW_SET ? OP_RMW : r->type;
    s->ops[op]++;
    h_add(&s->h[op], t - r->t_start);
    if (r->type == OP_READ) {
        if (outcome == 0) s->hits++;
        else if (outcome == 1) s->misses++;
        else if (outcome == 2) s->wrong++;
    }
    if (outcome == 3)
        s->errors++;
}

/* Parse complete responses in c->rbuf; returns false on protocol error. */
static bool parse(worker_t *w, conn_t *c, uint64_t t)
{
    for (;;) {
        char *p = c->rbuf + c->roff;
        size_t avail = c->rlen - c->roff;
        if (!avail)
            break;
        char *nl = memchr(p, '\n', avail);
        if (!nl)
            break;
        size_t ll = (size_t)(nl - p) + 1;
        if (c->qn == 0)
            return false;
        req_t *r = &c->q[c->qhead];
        int outcome;
        size_t used = ll;
        if (ll >= 6 && memcmp(p, "VALUE ", 6) == 0) {
            /* VALUE <key> <flags> <bytes>\r\n<data>\r\nEND\r\n */
            char *sp1 = memchr(p + 6, ' ', ll - 6);
            if (!sp1) return false;
            char *end;
            strtoul(sp1 + 1, &end, 10);
            unsigned long bytes = strtoul(end, &end, 10);
            size_t need = ll + bytes + 2 + 5;
            if (avail < need) {
                if (need > c->rcap) {
                    c->rcap = need * 2;
                    char *nb = realloc(c->rbuf, c->rcap);
                    if (!nb) die("out of memory");
                    c->rbuf = nb;
                }
                break;
            }
            char *data = p + ll;
            if (memcmp(data + bytes, "\r\nEND\r\n", 7) != 0)
                return false;
            uint64_t kk = r->key;
            char ks[256];
            key_str(ks, kk);
            uint32_t ver = 0;
            bool keyok = (size_t)(sp1 - (p + 6)) == (size_t)cfg.key_size &&
                         memcmp(p + 6, ks, (size_t)cfg.key_size) == 0;
            outcome = keyok && value_check(kk, data, (uint32_t)bytes, &ver) ? 0 : 2;
            r->ver = outcome == 0 ? ver : 0;
            used = need;
        } else if (ll == 5 && memcmp(p, "END\r\n", 5) == 0) {
            outcome = 1;
            r->ver = 0;
        } else if (ll == 8 && memcmp(p, "STORED\r\n", 8) == 0) {
            outcome = 0;
        } else {
            /* NOT_STORED, SERVER_ERROR, CLIENT_ERROR, ERROR ... */
            if (!cfg.quiet) {
                static atomic_int shown;
                if (atomic_fetch_add(&shown, 1) < 5)
                    fprintf(stderr, "tac-bench: server said: %.*s", (int)ll, p);
            }
            outcome = 3;
        }
        c->roff += used;
        c->qhead = (c->qhead + 1) % (unsigned)cfg.depth;
        c->qn--;
        complete(w, c, r, t, outcome);
    }
    if (c->roff == c->rlen)
        c->roff = c->rlen = 0;
    return true;
}

static void conn_read(worker_t *w, conn_t *c)
{
    for (;;) {
        if (c->roff && c->rcap - c->rlen < 65536) {
            memmove(c->rbuf, c->rbuf + c->roff, c->rlen - c->roff);
            c->rlen -= c->roff;
            c->roff = 0;
        }
        if (c->rcap == c->rlen) {
            c->rcap *= 2;
            char *nb = realloc(c->rbuf, c->rcap);
            if (!nb) die("out of memory");
            c->rbuf = nb;
        }
        ssize_t n = conn_in(c, c->rbuf + c->rlen, c->rcap - c->rlen);
        if (n > 0) {
            c->rlen += (size_t)n;
            if (!parse(w, c, now_ns())) {
                fprintf(stderr, "tac-bench: protocol error from server\n");
                c->dead = true;
                atomic_fetch_add(&fatal_errors, 1);
                return;
            }
            if ((size_t)n < 16384 && (c->ssl == NULL || SSL_pending(c->ssl) == 0))
                return; /* short read: socket most likely drained */
            continue;
        }
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK))
            return;
        if (!c->dead && atomic_load(&phase) != PH_DONE) {
            fprintf(stderr, "tac-bench: server closed a connection\n");
            atomic_fetch_add(&fatal_errors, 1);
        }
        c->dead = true;
        return;
    }
}

/* Drive the worker's connections until this phase has nothing in flight. */
static void drive(worker_t *w)
{
    struct epoll_event evs[64];
    uint64_t t = now_ns();
    for (int i = 0; i < w->nconn; i++) {
        refill(w, &w->c[i], t);
        conn_flush(w, &w->c[i]);
    }
    uint64_t drain_deadline = 0;
    for (;;) {
        unsigned inflight = 0;
        for (int i = 0; i < w->nconn; i++)
            if (!w->c[i].dead)
                inflight += w->c[i].qn + w->c[i].ndefer;
        bool stopping = atomic_load(&stop_issue) ||
                        (atomic_load(&phase) == PH_LOAD && atomic_load(&load_next) >= cfg.records);
        if (stopping && inflight == 0)
            break;
        if (atomic_load(&fatal_errors) && inflight == 0)
            break;
        if (stopping) {
            if (!drain_deadline)
                drain_deadline = now_ns() + 10ull * 1000000000ull;
            else if (now_ns() > drain_deadline) {
                fprintf(stderr, "tac-bench: %u requests unanswered at the end\n", inflight);
                break;
            }
        }
        int n = epoll_wait(w->epfd, evs, 64, 20);
        if (n <= 0)
            continue;
        for (int i = 0; i < n; i++) {
            conn_t *c = evs[i].data.ptr;
            if (c->dead)
                continue;
            if (evs[i].events & (EPOLLIN | EPOLLERR | EPOLLHUP))
                conn_read(w, c);
            if (c->dead) {
                epoll_ctl(w->epfd, EPOLL_CTL_DEL, c->fd, NULL);
                continue;
            }
            refill(w, c, now_ns());
            conn_flush(w, c);
        }
    }
}

static void *worker_main(void *arg)
{
    worker_t *w = arg;
    pthread_barrier_wait(&bar);          /* start load */
    if (!cfg.no_load)
        drive(w);
    pthread_barrier_wait(&bar);          /* load done */
    pthread_barrier_wait(&bar);          /* start run */
    if (!cfg.load_only)
        drive(w);
    return NULL;
}

/* ------------------------------------------------------------------ */
/* stats                                                               */

typedef struct { char name[96]; char val[64]; } stat_t;
typedef struct { stat_t *s; int n; } statset_t;

static statset_t read_stats(void)
{
    statset_t ss = { 0 };
    int fd = connect_server(false, cfg.stats_port[0] ? cfg.stats_port : cfg.port);
    struct timeval tv = { .tv_sec = 5 };
    setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
    if (write(fd, "stats\r\n", 7) != 7) {
        close(fd);
        return ss;
    }
    size_t cap = 1 << 16, len = 0;
    char *buf = xcalloc(1, cap + 1);
    for (;;) {
        if (len == cap) {
            cap *= 2;
            buf = realloc(buf, cap + 1);
            if (!buf) die("out of memory");
        }
        ssize_t n = read(fd, buf + len, cap - len);
        if (n <= 0)
            break;
        len += (size_t)n;
        if (len >= 5 && memcmp(buf + len - 5, "END\r\n", 5) == 0)
            break;
    }
    close(fd);
    buf[len] = 0;
    int cap_s = 256;
    ss.s = xcalloc((size_t)cap_s, sizeof(stat_t));
    for (char *line = strtok(buf, "\r\n"); line; line = strtok(NULL, "\r\n")) {
        char name[96], val[64];
        if (sscanf(line, "STAT %95s %63s", name, val) != 2)
            continue;
        if (ss.n == cap_s) {
            cap_s *= 2;
            ss.s = realloc(ss.s, (size_t)cap_s * sizeof(stat_t));
            if (!ss.s) die("out of memory");
        }
        snprintf(ss.s[ss.n].name, sizeof ss.s[ss.n].name, "%s", name);
        snprintf(ss.s[ss.n].val, sizeof ss.s[ss.n].val, "%s", val);
        ss.n++;
    }
    free(buf);
    return ss;
}

static const char *stat_get(const statset_t *ss, const char *name)
{
    for (int i = 0; i < ss->n; i++)
        if (!strcmp(ss->s[i].name, name))
            return ss->s[i].val;
    return NULL;
}

static bool stat_tracked(const char *n)
{
    static const char *exact[] = { "get_hits", "get_misses", "evictions", "get_extstore",
                                   "get_expired", "get_flushed", "curr_items", NULL };
    static const char *prefix[] = { "get_hits_", "evict_", "fetch_", "ssd_", "nvm_",
                                     "tier_", "extstore_", NULL };
    for (int i = 0; exact[i]; i++)
        if (!strcmp(n, exact[i]))
            return true;
    for (int i = 0; prefix[i]; i++)
        if (!strncmp(n, prefix[i], strlen(prefix[i])))
            return true;
    return false;
}

static bool is_int(const char *s)
{
    if (*s == '-') s++;
    if (!*s) return false;
    for (; *s; s++)
        if (*s < '0' || *s > '9')
            return false;
    return true;
}

/* ------------------------------------------------------------------ */
/* options                                                             */

static void set_workload(const char *w)
{
    memset(cfg.prop, 0, sizeof cfg.prop);
    snprintf(cfg.workload, sizeof cfg.workload, "%s", w);
    switch (w[0] | 0x20) {
    case 'a': cfg.prop[OP_READ] = 0.5; cfg.prop[OP_UPDATE] = 0.5; cfg.dist = DIST_ZIPF; break;
    case 'b': cfg.prop[OP_READ] = 0.95; cfg.prop[OP_UPDATE] = 0.05; cfg.dist = DIST_ZIPF; break;
    case 'c': cfg.prop[OP_READ] = 1.0; cfg.dist = DIST_ZIPF; break;
    case 'd': cfg.prop[OP_READ] = 0.95; cfg.prop[OP_INSERT] = 0.05; cfg.dist = DIST_LATEST; break;
    case 'f': cfg.prop[OP_READ] = 0.5; cfg.prop[OP_RMW] = 0.5; cfg.dist = DIST_ZIPF; break;
    default: die("unknown workload '%s' (A, B, C, D, F; or --read/--update/--insert/--rmw)", w);
    }
    if (w[1])
        die("unknown workload '%s'", w);
}

static void parse_vsize(const char *s)
{
    snprintf(cfg.vsize_spec, sizeof cfg.vsize_spec, "%s", s);
    if (!strncmp(s, "uniform:", 8)) {
        cfg.vsize_kind = 1;
        if (sscanf(s + 8, "%u-%u", &cfg.vmin, &cfg.vmax) != 2 &&
            sscanf(s + 8, "%u:%u", &cfg.vmin, &cfg.vmax) != 2)
            die("--value-size uniform:MIN-MAX");
        if (cfg.vmax < cfg.vmin)
            die("--value-size: max < min");
    } else if (!strncmp(s, "list:", 5)) {
        cfg.vsize_kind = 2;
        const char *p = s + 5;
        cfg.vmin = UINT32_MAX; cfg.vmax = 0;
        while (*p && cfg.vlist_n < 32) {
            uint32_t v = (uint32_t)strtoul(p, (char **)&p, 10);
            cfg.vlist[cfg.vlist_n++] = v;
            if (v < cfg.vmin) cfg.vmin = v;
            if (v > cfg.vmax) cfg.vmax = v;
            if (*p == ',') p++;
            else if (*p) die("--value-size list:A,B,C");
        }
        if (!cfg.vlist_n)
            die("--value-size list:A,B,C");
    } else {
        cfg.vsize_kind = 0;
        cfg.vmin = cfg.vmax = (uint32_t)strtoul(s, NULL, 10);
    }
}

static void usage(void)
{
    printf(
"usage: tac-bench [options]\n"
"  -s, --server HOST:PORT    server (default 127.0.0.1:11211)\n"
"  -t, --threads N           client threads (default 1)\n"
"  -c, --conns N             connections in total (default 4)\n"
"  -d, --depth N             pipeline depth per connection (default 8)\n"
"  -n, --records N           records loaded (default 100000)\n"
"  -T, --duration SEC        timed run (default 10)\n"
"      --warmup SEC          run this long before recording (default 1)\n"
"  -w, --workload A|B|C|D|F  YCSB core workload (default B)\n"
"      --read P --update P --insert P --rmw P\n"
"                            custom proportions (override the workload's)\n"
"      --dist zipfian|uniform|latest   key choice (default: the workload's)\n"
"      --theta X             zipfian skew (default 0.99)\n"
"  -k, --key-size N          key bytes (default 8)\n"
"  -v, --value-size SPEC     N | uniform:MIN-MAX | list:A,B,C (default 1000)\n"
"      --seed N              random seed (default: from the clock; printed)\n"
"      --json FILE           write results as JSON\n"
"      --label TEXT          name of the system, copied into the JSON\n"
"      --no-load             skip the load phase (data already there)\n"
"      --load-only           only load\n"
"      --no-stats            do not read server stats\n"
"      --tls                 speak TLS on every load connection (no certificate check)\n"
"      --stats-port PORT     read stats over plain TCP on PORT (with --tls: a notls port)\n"
"      --no-verify           check key/length/header only, not the checksum\n"
"  -q, --quiet               no progress output\n");
}

static double parse_prop(const char *s)
{
    double v = atof(s);
    if (v < 0)
        die("negative proportion");
    return v;
}

static void parse_args(int argc, char **argv)
{
    snprintf(cfg.host, sizeof cfg.host, "127.0.0.1");
    snprintf(cfg.port, sizeof cfg.port, "11211");
    cfg.threads = 1; cfg.conns = 4; cfg.depth = 8;
    cfg.records = 100000; cfg.duration = 10; cfg.warmup = 1;
    cfg.theta = 0.99; cfg.key_size = 8;
    parse_vsize("1000");
    set_workload("B");
    cfg.seed = now_ns() ^ ((uint64_t)getpid() << 32);
    double custom[OP_NTYPES] = { -1, -1, -1, -1 };
    int dist = -1;
    enum { O_WARM = 256, O_READ, O_UPD, O_INS, O_RMW, O_DIST, O_THETA, O_SEED, O_JSON,
           O_NOLOAD, O_LOADONLY, O_NOSTATS, O_NOVERIFY, O_LABEL, O_TLS, O_STATSPORT };
    static struct option lo[] = {
        { "server", 1, 0, 's' }, { "threads", 1, 0, 't' }, { "conns", 1, 0, 'c' },
        { "depth", 1, 0, 'd' }, { "records", 1, 0, 'n' }, { "duration", 1, 0, 'T' },
        { "warmup", 1, 0, O_WARM }, { "workload", 1, 0, 'w' }, { "read", 1, 0, O_READ },
        { "update", 1, 0, O_UPD }, { "insert", 1, 0, O_INS }, { "rmw", 1, 0, O_RMW },
        { "dist", 1, 0, O_DIST }, { "theta", 1, 0, O_THETA }, { "key-size", 1, 0, 'k' },
        { "value-size", 1, 0, 'v' }, { "seed", 1, 0, O_SEED }, { "json", 1, 0, O_JSON },
        { "label", 1, 0, O_LABEL }, { "no-load", 0, 0, O_NOLOAD },
        { "load-only", 0, 0, O_LOADONLY }, { "no-stats", 0, 0, O_NOSTATS },
        { "no-verify", 0, 0, O_NOVERIFY }, { "quiet", 0, 0, 'q' }, { "help", 0, 0, 'h' },
        { "tls", 0, 0, O_TLS }, { "stats-port", 1, 0, O_STATSPORT },
        { 0, 0, 0, 0 }
    };
    int o;
    while ((o = getopt_long(argc, argv, "s:t:c:d:n:T:w:k:v:qh", lo, NULL)) != -1) {
        switch (o) {
        case 's': {
            char *colon = strrchr(optarg, ':');
            if (colon) {
                snprintf(cfg.host, sizeof cfg.host, "%.*s", (int)(colon - optarg), optarg);
                snprintf(cfg.port, sizeof cfg.port, "%s", colon + 1);
            } else {
                snprintf(cfg.host, sizeof cfg.host, "%s", optarg);
            }
            break;
        }
        case 't': cfg.threads = atoi(optarg); break;
        case 'c': cfg.conns = atoi(optarg); break;
        case 'd': cfg.depth = atoi(optarg); break;
        case 'n': cfg.records = strtoull(optarg, NULL, 10); break;
        case 'T': cfg.duration = atof(optarg); break;
        case O_WARM: cfg.warmup = atof(optarg); break;
        case 'w': set_workload(optarg); break;
        case O_READ: custom[OP_READ] = parse_prop(optarg); break;
        case O_UPD: custom[OP_UPDATE] = parse_prop(optarg); break;
        case O_INS: custom[OP_INSERT] = parse_prop(optarg); break;
        case O_RMW: custom[OP_RMW] = parse_prop(optarg); break;
        case O_DIST:
            for (dist = 0; dist < 3 && strcmp(optarg, dist_names[dist]); dist++) ;
            if (dist == 3) die("--dist zipfian|uniform|latest");
            break;
        case O_THETA: cfg.theta = atof(optarg); break;
        case 'k': cfg.key_size = atoi(optarg); break;
        case 'v': parse_vsize(optarg); break;
        case O_SEED: cfg.seed = strtoull(optarg, NULL, 0); break;
        case O_JSON: cfg.json = optarg; break;
        case O_LABEL: snprintf(cfg.label, sizeof cfg.label, "%s", optarg); break;
        case O_NOLOAD: cfg.no_load = true; break;
        case O_LOADONLY: cfg.load_only = true; break;
        case O_NOSTATS: cfg.no_stats = true; break;
        case O_NOVERIFY: cfg.no_verify = true; break;
        case O_TLS: cfg.tls = true; break;
        case O_STATSPORT: snprintf(cfg.stats_port, sizeof cfg.stats_port, "%s", optarg); break;
        case 'q': cfg.quiet = true; break;
        case 'h': usage(); exit(0);
        default: usage(); exit(2);
        }
    }
    if (optind < argc)
        die("unexpected argument '%s'", argv[optind]);
    if (cfg.tls) {
        tls_ctx = SSL_CTX_new(TLS_client_method());
        if (tls_ctx == NULL)
            die("cannot make a TLS context");
        SSL_CTX_set_mode(tls_ctx, SSL_MODE_ENABLE_PARTIAL_WRITE |
                                  SSL_MODE_ACCEPT_MOVING_WRITE_BUFFER);
        if (cfg.stats_port[0] == '\0')
            cfg.no_stats = true;    /* stats are read in plain text */
    }
    bool any = false;
    for (int i = 0; i < OP_NTYPES; i++)
        any |= custom[i] >= 0;
    if (any) {
        snprintf(cfg.workload, sizeof cfg.workload, "custom");
        for (int i = 0; i < OP_NTYPES; i++)
            cfg.prop[i] = custom[i] >= 0 ? custom[i] : 0;
    }
    double sum = 0;
    for (int i = 0; i < OP_NTYPES; i++)
        sum += cfg.prop[i];
    if (sum <= 0)
        die("all proportions are zero");
    for (int i = 0; i < OP_NTYPES; i++)
        cfg.prop[i] /= sum;
    if (dist >= 0)
        cfg.dist = dist;
    if (cfg.threads < 1 || cfg.conns < cfg.threads || cfg.depth < 1)
        die("need threads >= 1, conns >= threads, depth >= 1");
    if (cfg.records < 1)
        die("--records must be >= 1");
    if (cfg.theta <= 0 || cfg.theta >= 1)
        die("--theta must be in (0, 1)");
    if (cfg.key_size < 1 || cfg.key_size > 250)
        die("--key-size must be 1..250");
    if (cfg.key_size < 16 && (cfg.records * 2 + 1000000) >> (4 * cfg.key_size))
        die("--key-size %d too small for %" PRIu64 " records (hex keys)", cfg.key_size, cfg.records);
    if (cfg.vmin < (uint32_t)(cfg.key_size + HDR_EXTRA))
        die("values must be at least key-size + %d = %d bytes (they carry key, version, checksum)",
            HDR_EXTRA, cfg.key_size + HDR_EXTRA);
    if (cfg.vmax > 64u << 20)
        die("values larger than 64 MB");
}

/* ------------------------------------------------------------------ */
/* main                                                                */

static void progress(uint64_t done, uint64_t total, double secs, bool tty, bool final)
{
    double pct = total ? 100.0 * (double)done / (double)total : 100;
    double rate = secs > 0 ? (double)done / secs : 0;
    if (tty) {
        int width = 40, fill = (int)(pct / 100 * width);
        char bar[64];
        for (int i = 0; i < width; i++)
            bar[i] = i < fill ? '#' : '.';
        bar[width] = 0;
        fprintf(stderr, "\rload [%s] %5.1f%% %" PRIu64 "/%" PRIu64 " %.0f sets/s%s", bar, pct,
                done, total, rate, final ? "\n" : "");
    } else {
        fprintf(stderr, "load: %5.1f%% %" PRIu64 "/%" PRIu64 " %.0f sets/s %.1fs\n", pct, done,
                total, rate, secs);
    }
    fflush(stderr);
}

static void sleep_s(double s)
{
    struct timespec ts = { .tv_sec = (time_t)s, .tv_nsec = (long)((s - floor(s)) * 1e9) };
    while (nanosleep(&ts, &ts) && errno == EINTR) ;
}

static void json_hist(FILE *f, const hist_t *h)
{
    fprintf(f, "{\"count\": %" PRIu64 ", \"mean_us\": %.3f, \"min_us\": %.3f, "
               "\"p50_us\": %.3f, \"p90_us\": %.3f, \"p99_us\": %.3f, \"p999_us\": %.3f, "
               "\"max_us\": %.3f}",
            h->count, h->count ? (double)h->sum / (double)h->count / 1e3 : 0, h->min / 1e3,
            h_pct(h, 50) / 1e3, h_pct(h, 90) / 1e3, h_pct(h, 99) / 1e3, h_pct(h, 99.9) / 1e3,
            h->max / 1e3);
}

static void json_str(FILE *f, const char *s)
{
    fputc('"', f);
    for (; *s; s++) {
        if (*s == '"' || *s == '\\') fputc('\\', f);
        if ((unsigned char)*s >= 0x20) fputc(*s, f);
    }
    fputc('"', f);
}

int main(int argc, char **argv)
{
    signal(SIGPIPE, SIG_IGN);
    parse_args(argc, argv);
    bool tty = isatty(2) && !cfg.quiet;

    size_t max_set = 4 + (size_t)cfg.key_size + 32 + cfg.vmax + 2;
    max_req_bytes = max_set;
    ack_ring = xcalloc(ACK_RING, 1);
    atomic_store(&acked_limit, cfg.no_load ? cfg.records : 0);
    atomic_store(&insert_next, cfg.records);

    if (!cfg.quiet)
        fprintf(stderr,
                "tac-bench: server %s:%s workload %s dist %s theta %.2f records %" PRIu64
                " key %d B value %s B threads %d conns %d depth %d seed %" PRIu64 "\n",
                cfg.host, cfg.port, cfg.workload, dist_names[cfg.dist], cfg.theta, cfg.records,
                cfg.key_size, cfg.vsize_spec, cfg.threads, cfg.conns, cfg.depth, cfg.seed);

    /* Zipfian over the YCSB item space (0.99: precomputed constant). */
    zipf_t zproto;
    if (fabs(cfg.theta - 0.99) < 1e-12)
        zipf_init(&zproto, YCSB_ITEM_COUNT, cfg.theta, YCSB_ZETAN_099);
    else
        zipf_init(&zproto, cfg.records, cfg.theta, 0);

    workers = xcalloc((size_t)cfg.threads, sizeof(worker_t));
    pthread_barrier_init(&bar, NULL, (unsigned)cfg.threads + 1);
    for (int i = 0; i < cfg.threads; i++) {
        worker_t *w = &workers[i];
        w->id = i;
        w->nconn = cfg.conns / cfg.threads + (i < cfg.conns % cfg.threads);
        w->c = xcalloc((size_t)w->nconn, sizeof(conn_t));
        rng_seed(&w->rng, cfg.seed * 0x100000001b3ull + (uint64_t)i);
        w->zipf = zproto;
        if (cfg.dist == DIST_LATEST)
            zipf_init(&w->zlatest, cfg.records, cfg.theta, 0);
        w->epfd = epoll_create1(0);
        for (int j = 0; j < w->nconn; j++) {
            conn_t *c = &w->c[j];
            c->fd = connect_server(!cfg.tls, cfg.port);
            if (cfg.tls) {
                c->ssl = tls_connect(c->fd);
                fcntl(c->fd, F_SETFL, fcntl(c->fd, F_GETFL) | O_NONBLOCK);
            }
            c->rcap = 2 * (max_set + 512) > 262144 ? 2 * (max_set + 512) : 262144;
            c->wcap = (size_t)cfg.depth * max_set;
            if (c->wcap > 4u << 20) c->wcap = 4u << 20;
            if (c->wcap < 2 * max_set) c->wcap = 2 * max_set;
            c->rbuf = xcalloc(1, c->rcap);
            c->wbuf = xcalloc(1, c->wcap);
            c->q = xcalloc((size_t)cfg.depth, sizeof(req_t));
            c->defer = xcalloc((size_t)cfg.depth, sizeof(req_t));
            struct epoll_event ev = { .events = EPOLLIN, .data.ptr = c };
            epoll_ctl(w->epfd, EPOLL_CTL_ADD, c->fd, &ev);
        }
        if (pthread_create(&w->tid, NULL, worker_main, w))
            die("pthread_create failed");
    }

    /* ---- load ---- */
    atomic_store(&phase, PH_LOAD);
    uint64_t t0 = now_ns();
    pthread_barrier_wait(&bar);
    double load_secs = 0;
    if (!cfg.no_load) {
        uint64_t last_print = 0;
        int last_decile = -1;
        for (;;) {
            uint64_t d = atomic_load(&load_done);
            double secs = (now_ns() - t0) / 1e9;
            if (d >= cfg.records || atomic_load(&fatal_errors))
                break;
            if (tty && now_ns() - last_print > 200000000ull) {
                progress(d, cfg.records, secs, true, false);
                last_print = now_ns();
            } else if (!tty && !cfg.quiet && (int)(d * 10 / cfg.records) > last_decile &&
                       now_ns() - last_print > 1000000000ull) {
                last_decile = (int)(d * 10 / cfg.records);
                progress(d, cfg.records, secs, false, false);
                last_print = now_ns();
            }
            sleep_s(0.02);
        }
    }
    pthread_barrier_wait(&bar); /* load done, all in flight answered */
    load_secs = (now_ns() - t0) / 1e9;
    uint64_t load_ok = 0, load_err = 0, load_retries = 0;
    for (int i = 0; i < cfg.threads; i++) {
        load_ok += workers[i].st.load_ok;
        load_err += workers[i].st.load_err;
        load_retries += workers[i].st.load_retries;
    }
    if (!cfg.no_load && !cfg.quiet)
        progress(load_ok + load_err, cfg.records, load_secs, tty, true);
    atomic_store(&acked_limit, cfg.records);
    if (atomic_load(&fatal_errors))
        die("connection failed during load");

    /* ---- run ---- */
    statset_t before = { 0 }, after = { 0 };
    atomic_store(&phase, PH_RUN);
    pthread_barrier_wait(&bar);
    double run_secs = 0, cpu = 0;
    if (!cfg.load_only) {
        sleep_s(cfg.warmup);
        /* stats bracket the recorded interval (a few ms of skew) */
        if (!cfg.no_stats)
            before = read_stats();
        double c0 = cpu_seconds();
        uint64_t r0 = now_ns();
        atomic_store(&recording, 1);
        uint64_t end = r0 + (uint64_t)(cfg.duration * 1e9);
        while (now_ns() < end && !atomic_load(&fatal_errors)) {
            double left = (end - now_ns()) / 1e9;
            if (tty)
                fprintf(stderr, "\rrun: %.0f s left   ", ceil(left));
            sleep_s(left > 0.25 ? 0.25 : left);
        }
        atomic_store(&recording, 0);
        run_secs = (now_ns() - r0) / 1e9;
        cpu = cpu_seconds() - c0;
        if (!cfg.no_stats)
            after = read_stats();
        atomic_store(&stop_issue, 1);
        if (tty)
            fprintf(stderr, "\r                  \r");
    }
    for (int i = 0; i < cfg.threads; i++)
        pthread_join(workers[i].tid, NULL);
    atomic_store(&phase, PH_DONE);

    /* ---- results ---- */
    tstats_t tot = { 0 };
    hist_t *all = xcalloc(1, sizeof(hist_t));
    for (int i = 0; i < cfg.threads; i++) {
        tstats_t *s = &workers[i].st;
        for (int j = 0; j < OP_NTYPES; j++) {
            tot.ops[j] += s->ops[j];
            h_merge(&tot.h[j], &s->h[j]);
            h_merge(all, &s->h[j]);
        }
        tot.hits += s->hits; tot.misses += s->misses; tot.wrong += s->wrong;
        tot.errors += s->errors;
    }
    uint64_t ops = all->count;
    double tput = run_secs > 0 ? ops / run_secs : 0;
    int nconn_err = atomic_load(&fatal_errors);

    printf("\n== tac-bench %s  workload %s  %s:%s  seed %" PRIu64 " ==\n",
           cfg.label[0] ? cfg.label : "", cfg.workload, cfg.host, cfg.port, cfg.seed);
    if (!cfg.no_load)
        printf("load: %" PRIu64 " records in %.2f s (%.0f sets/s), %" PRIu64 " errors, %"
               PRIu64 " resent after SERVER_ERROR\n",
               load_ok, load_secs, load_ok / (load_secs > 0 ? load_secs : 1), load_err,
               load_retries);
    if (!cfg.load_only) {
        printf("run: %.2f s, %" PRIu64 " ops, throughput %.0f ops/s\n", run_secs, ops, tput);
        printf("client cpu: %.2f cores, %.0f ns/op\n", run_secs > 0 ? cpu / run_secs : 0,
               ops ? cpu * 1e9 / ops : 0);
        printf("%-8s %10s %9s %9s %9s %9s %9s %9s\n", "op", "count", "mean_us", "p50_us",
               "p90_us", "p99_us", "p99.9_us", "max_us");
        for (int j = 0; j <= OP_NTYPES; j++) {
            const hist_t *h = j < OP_NTYPES ? &tot.h[j] : all;
            if (!h->count)
                continue;
            printf("%-8s %10" PRIu64 " %9.1f %9.1f %9.1f %9.1f %9.1f %9.1f\n",
                   j < OP_NTYPES ? op_names[j] : "all", h->count,
                   (double)h->sum / (double)h->count / 1e3, h_pct(h, 50) / 1e3,
                   h_pct(h, 90) / 1e3, h_pct(h, 99) / 1e3, h_pct(h, 99.9) / 1e3, h->max / 1e3);
        }
        printf("reads: hits %" PRIu64 "  misses %" PRIu64 "  wrong %" PRIu64 "  errors %" PRIu64
               "\n", tot.hits, tot.misses, tot.wrong, tot.errors);
        if (after.n) {
            printf("server stat deltas:\n");
            for (int i = 0; i < after.n; i++) {
                const char *b = stat_get(&before, after.s[i].name);
                if (!stat_tracked(after.s[i].name) || !is_int(after.s[i].val))
                    continue;
                long long d = atoll(after.s[i].val) - (b && is_int(b) ? atoll(b) : 0);
                printf("  %-28s %lld\n", after.s[i].name, d);
            }
        }
    }

    if (cfg.json) {
        FILE *f = fopen(cfg.json, "w");
        if (!f)
            die("cannot write %s: %s", cfg.json, strerror(errno));
        fprintf(f, "{\n  \"tool\": \"tac-bench\",\n  \"label\": ");
        json_str(f, cfg.label);
        fprintf(f, ",\n  \"server\": \"%s:%s\",\n  \"workload\": \"%s\",\n", cfg.host, cfg.port,
                cfg.workload);
        fprintf(f, "  \"proportions\": {\"read\": %.4f, \"update\": %.4f, \"insert\": %.4f, "
                   "\"rmw\": %.4f},\n", cfg.prop[0], cfg.prop[1], cfg.prop[2], cfg.prop[3]);
        fprintf(f, "  \"distribution\": \"%s\",\n  \"theta\": %.4f,\n  \"records\": %" PRIu64
                   ",\n  \"key_size\": %d,\n  \"value_size\": \"%s\",\n  \"threads\": %d,\n"
                   "  \"conns\": %d,\n  \"depth\": %d,\n  \"seed\": %" PRIu64 ",\n",
                dist_names[cfg.dist], cfg.theta, cfg.records, cfg.key_size, cfg.vsize_spec,
                cfg.threads, cfg.conns, cfg.depth, cfg.seed);
        fprintf(f, "  \"load\": {\"records\": %" PRIu64 ", \"seconds\": %.3f, \"errors\": %" PRIu64
                   ", \"resent\": %" PRIu64 "},\n", load_ok, load_secs, load_err, load_retries);
        fprintf(f, "  \"run_seconds\": %.3f,\n  \"warmup_seconds\": %.3f,\n  \"ops\": %" PRIu64
                   ",\n  \"throughput\": %.1f,\n", run_secs, cfg.warmup, ops, tput);
        fprintf(f, "  \"client_cpu_cores\": %.3f,\n  \"client_cpu_ns_per_op\": %.1f,\n",
                run_secs > 0 ? cpu / run_secs : 0, ops ? cpu * 1e9 / ops : 0);
        fprintf(f, "  \"hits\": %" PRIu64 ",\n  \"misses\": %" PRIu64 ",\n  \"wrong\": %" PRIu64
                   ",\n  \"errors\": %" PRIu64 ",\n  \"connection_errors\": %d,\n",
                tot.hits, tot.misses, tot.wrong, tot.errors, nconn_err);
        fprintf(f, "  \"latency\": {\n    \"all\": ");
        json_hist(f, all);
        for (int j = 0; j < OP_NTYPES; j++) {
            if (!tot.h[j].count)
                continue;
            fprintf(f, ",\n    \"%s\": ", op_names[j]);
            json_hist(f, &tot.h[j]);
        }
        fprintf(f, "\n  },\n  \"stats_delta\": {");
        bool first = true;
        for (int i = 0; i < after.n; i++) {
            const char *b = stat_get(&before, after.s[i].name);
            if (!stat_tracked(after.s[i].name) || !is_int(after.s[i].val))
                continue;
            long long d = atoll(after.s[i].val) - (b && is_int(b) ? atoll(b) : 0);
            fprintf(f, "%s\n    \"%s\": %lld", first ? "" : ",", after.s[i].name, d);
            first = false;
        }
        fprintf(f, "\n  },\n  \"stats_after\": {");
        first = true;
        for (int i = 0; i < after.n; i++) {
            if (!is_int(after.s[i].val))
                continue;
            fprintf(f, "%s\n    \"%s\": %s", first ? "" : ",", after.s[i].name, after.s[i].val);
            first = false;
        }
        fprintf(f, "\n  }\n}\n");
        fclose(f);
    }
    /* Sets the server refused during the load are reported above and show
     * up as misses; only a broken connection makes the run a failure. */
    return nconn_err ? 1 : 0;
}

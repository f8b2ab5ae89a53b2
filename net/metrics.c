/*
 * metrics.c - the stats as Prometheus text, over HTTP (metrics.h).
 *
 * Design.  One libevent HTTP server on the main event base answers
 * GET /metrics.  A scrape runs the same sections as `stats`, `stats tac`,
 * `stats settings`, `stats items`, `stats slabs` and `stats tiers` through a sink
 * that turns each numeric line into a sample:
 *   stats, stats tac
 *                  tac_<name> (a gauge), or tac_<name>_total for a counter
 *                  (stats.c's kind column); strings are left out but for
 *                  tac_version_info{version="..."} 1
 *   stats settings tac_setting_<name>, gauges, numeric values only
 *   stats items    tac_items_<name>{slab_class="N"}
 *   stats slabs    tac_slab_<name>{slab_class="N"}, and tac_slabs_<name>
 *                  for the totals
 *   stats tiers    tac_tier_<name>, untyped (memcached has no such names)
 * Samples of one family must be adjacent, so the scrape collects them,
 * sorts them by family (keeping their order within one) and writes each
 * family after its TYPE line.  A scrape costs what those `stats` commands
 * cost; nothing is kept between scrapes.
 *
 * Serving.  The port is a small HTTP/1.1 server of its own on the main
 * event base, not libevent's evhttp, so that every limit is this file's:
 *   - it binds the -o metrics_listen addresses only (127.0.0.1 by default),
 *     never the -l list;
 *   - one request per connection: the request line and headers are read
 *     (at most METRICS_HEAD_MAX bytes, no body is ever read), answered
 *     with "Connection: close", and the connection is closed when the
 *     answer is written;
 *   - each connection is closed -o metrics_timeout seconds after it was
 *     accepted, whatever it sent or still has to read: an absolute
 *     deadline, not an idle timeout that a byte every few seconds renews;
 *   - at -o metrics_max_conns open connections accepting pauses until one
 *     closes (the kernel's backlog holds the rest);
 *   - accept() failing for lack of descriptors (EMFILE, ENFILE) pauses
 *     accepting and retries every METRICS_RETRY_MS, as the cache port
 *     does (memcached.c); the log says so once when the shortage starts
 *     and once when it ends;
 *   - with -Y or -S (and -o metrics_auth=users, the default) a request is
 *     served only with HTTP basic authentication of one of their users:
 *     -Y's file, or -S's $MEMCACHED_SASL_PWDB or Cyrus SASL's password
 *     check (sasl_auth.c); else 401 with WWW-Authenticate.
 * All of it runs on the main thread; a scrape holds it for as long as the
 * `stats` commands take.
 */
#include "config.h"

#include <errno.h>
#include <event2/buffer.h>
#include <event2/bufferevent.h>
#include <event2/event.h>
#include <netdb.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "net/auth.h"
#include "net/metrics.h"
#include "net/sasl_auth.h"
#include "base/settings.h"
#include "base/stats.h"
#include "base/util.h"

enum sample_type { T_COUNTER, T_GAUGE, T_UNTYPED };

struct sample {
    char family[96];
    char label[24];         /* slab class, or "" */
    char value[48];
    enum sample_type type;
    size_t order;
};

struct scrape {
    struct sample *v;
    size_t n, cap;
    const char *section;
    bool oom;
    char version[64];
};

/* name with every byte Prometheus does not take in a name made '_'. */
static void put_name(char *out, size_t cap, const char *prefix, const char *name,
                     const char *suffix)
{
    int n = snprintf(out, cap, "%s%s%s", prefix, name, suffix);
    size_t len = n < 0 ? 0 : (size_t)n < cap ? (size_t)n : cap - 1;
    for (size_t i = strlen(prefix); i < len; i++) {
        char c = out[i];
        if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') ||
              (c >= '0' && c <= '9') || c == '_'))
            out[i] = '_';
    }
}

static bool numeric(const char *s)
{
    char *end;
    if (*s == '\0')
        return false;
    (void)strtod(s, &end);
    return *end == '\0';
}

static void add(struct scrape *sc, const char *family, const char *label,
                const char *value, enum sample_type type)
{
    if (sc->n == sc->cap) {
        size_t cap = sc->cap ? sc->cap * 2 : 512;
        struct sample *v = realloc(sc->v, cap * sizeof(*v));
        if (v == NULL) {
            sc->oom = true;
            return;
        }
        sc->v = v;
        sc->cap = cap;
    }
    struct sample *s = &sc->v[sc->n];
    snprintf(s->family, sizeof(s->family), "%s", family);
    snprintf(s->label, sizeof(s->label), "%s", label);
    snprintf(s->value, sizeof(s->value), "%s", value);
    s->type = type;
    s->order = sc->n++;
}

static bool in_list(const char *name, const char *const *list)
{
    for (; *list != NULL; list++)
        if (strcmp(name, *list) == 0)
            return true;
    return false;
}

/* Per class: what is a level, not a count of events. */
static const char *const item_gauges[] = {
    "number", "number_hot", "number_warm", "number_cold", "age", "age_hot",
    "age_warm", "mem_requested", "evicted_time", NULL,
};
static const char *const slab_counters[] = {
    "get_hits", "cmd_set", "delete_hits", "incr_hits", "decr_hits",
    "cas_hits", "cas_badval", "touch_hits", NULL,
};

static void general_line(struct scrape *sc, const char *key, const char *val)
{
    char fam[96];
    int kind = stats_general_kind(key);
    if (strcmp(key, "version") == 0)
        snprintf(sc->version, sizeof(sc->version), "%s", val);
    if (kind < 0 || kind == STAT_KIND_STRING || !numeric(val))
        return;
    bool counter = kind == STAT_KIND_COUNTER;
    put_name(fam, sizeof(fam), "tac_", key, counter ? "_total" : "");
    add(sc, fam, "", val, counter ? T_COUNTER : T_GAUGE);
}

/* "items:N:name" or "N:name" (slabs): the class and the name. */
static bool class_line(const char *key, char *cls, size_t cap, const char **name)
{
    const char *p = key;
    if (strncmp(p, "items:", 6) == 0)
        p += 6;
    size_t digits = strspn(p, "0123456789");
    if (digits == 0 || digits >= cap || p[digits] != ':')
        return false;
    memcpy(cls, p, digits);
    cls[digits] = '\0';
    *name = p + digits + 1;
    return true;
}

static void emit(void *ctx, const char *key, const char *val)
{
    struct scrape *sc = ctx;
    char fam[96], cls[16];
    const char *name;
    if (strcmp(sc->section, "general") == 0) {
        general_line(sc, key, val);
        return;
    }
    if (!numeric(val))
        return;
    if (strcmp(sc->section, "settings") == 0) {
        put_name(fam, sizeof(fam), "tac_setting_", key, "");
        add(sc, fam, "", val, T_GAUGE);
    } else if (strcmp(sc->section, "items") == 0) {
        if (!class_line(key, cls, sizeof(cls), &name))
            return;
        bool gauge = in_list(name, item_gauges);
        put_name(fam, sizeof(fam), "tac_items_", name, gauge ? "" : "_total");
        add(sc, fam, cls, val, gauge ? T_GAUGE : T_COUNTER);
    } else if (strcmp(sc->section, "slabs") == 0) {
        if (!class_line(key, cls, sizeof(cls), &name)) {
            put_name(fam, sizeof(fam), "tac_slabs_", key, "");
            add(sc, fam, "", val, T_GAUGE);
            return;
        }
        bool counter = in_list(name, slab_counters);
        put_name(fam, sizeof(fam), "tac_slab_", name, counter ? "_total" : "");
        add(sc, fam, cls, val, counter ? T_COUNTER : T_GAUGE);
    } else {
        put_name(fam, sizeof(fam), "tac_tier_", key, "");
        add(sc, fam, "", val, T_UNTYPED);
    }
}

static int by_family(const void *a, const void *b)
{
    const struct sample *x = a, *y = b;
    int c = strcmp(x->family, y->family);
    if (c != 0)
        return c;
    return x->order < y->order ? -1 : x->order > y->order;
}

static const char *const type_names[] = { "counter", "gauge", "untyped" };

/* The scrape as text; false for lack of memory. */
static bool render(struct evbuffer *out)
{
    static const struct { const char *section, *sub; } runs[] = {
        { "general", "" }, { "general", "tac" }, { "settings", "settings" }, { "items", "items" },
        { "slabs", "slabs" }, { "tiers", "tiers" },
    };
    struct scrape sc = { 0 };
    struct stat_sink sink = { emit, &sc };
    for (size_t i = 0; i < sizeof(runs) / sizeof(runs[0]); i++) {
        sc.section = runs[i].section;
        stats_run(runs[i].sub, &sink);
    }
    if (sc.oom) {
        free(sc.v);
        return false;
    }
    qsort(sc.v, sc.n, sizeof(*sc.v), by_family);
    evbuffer_add_printf(out, "# TYPE tac_version_info gauge\n"
                        "tac_version_info{version=\"%s\"} 1\n", sc.version);
    for (size_t i = 0; i < sc.n; i++) {
        const struct sample *s = &sc.v[i];
        if (i == 0 || strcmp(s->family, sc.v[i - 1].family) != 0)
            evbuffer_add_printf(out, "# TYPE %s %s\n", s->family, type_names[s->type]);
        if (s->label[0] != '\0')
            evbuffer_add_printf(out, "%s{slab_class=\"%s\"} %s\n", s->family, s->label,
                                s->value);
        else
            evbuffer_add_printf(out, "%s %s\n", s->family, s->value);
    }
    free(sc.v);
    return true;
}

/* ---- Serving ------------------------------------------------------------ */

#define METRICS_HEAD_MAX 8192       /* request line and headers, bytes */
#define METRICS_RETRY_MS 100        /* accept again after running out of fds */
#define METRICS_LISTENERS_MAX 16
#define METRICS_CRED_MAX 1024       /* decoded "user:password", bytes */

/* One open connection: its socket, and its deadline. */
struct mconn {
    struct mconn *prev, *next;
    struct bufferevent *bev;
    struct event *deadline;
};

static struct event_base *mbase;
static int listen_fd[METRICS_LISTENERS_MAX];
static struct event *listen_ev[METRICS_LISTENERS_MAX];
static int nlisten;
static bool listening;              /* listen events added */
static struct event *retry_ev;      /* METRICS_RETRY_MS after a failed accept */
static struct mconn *conns;
static uint64_t nconns;
static bool paused_full;            /* at metrics_max_conns */
static bool paused_short;           /* accept failed for lack of fds */
static bool fd_short;               /* that shortage lasts (for the log) */
static struct timespec short_since;
static bool auth_required;

/* `stats` lines (relaxed atomics; written on the main thread only). */
static uint64_t st_conns, st_auth_errors, st_timeouts, st_capped, st_short;

static void stat_add(uint64_t *v, int64_t d)
{
    __atomic_fetch_add(v, (uint64_t)d, __ATOMIC_RELAXED);
}

static void on_accept(evutil_socket_t lfd, short what, void *arg);

/* Adds or removes the listen events as the pauses say. */
static void listening_update(void)
{
    bool want = !paused_full && !paused_short;
    if (want == listening)
        return;
    listening = want;
    for (int i = 0; i < nlisten; i++)
        if ((want ? event_add(listen_ev[i], NULL) : event_del(listen_ev[i])) != 0)
            fprintf(stderr, "metrics port: cannot %s a listen event\n",
                    want ? "add" : "remove");
}

/* Accepts whatever waits, once the pauses are over. */
static void accept_pending(void)
{
    for (int i = 0; i < nlisten && listening; i++)
        on_accept(listen_fd[i], EV_READ, NULL);
}

static void conn_close(struct mconn *m)
{
    if (m->prev != NULL)
        m->prev->next = m->next;
    else
        conns = m->next;
    if (m->next != NULL)
        m->next->prev = m->prev;
    bufferevent_free(m->bev);           /* closes the socket */
    event_free(m->deadline);
    free(m);
    nconns--;
    stat_add(&st_conns, -1);
    if (paused_full && nconns < (uint64_t)settings.metrics_max_conns) {
        paused_full = false;
        listening_update();
    }
}

/* An answer, then the close once it is written. */
static void reply(struct mconn *m, int code, const char *reason,
                  const char *headers, struct evbuffer *body, bool head_only)
{
    struct evbuffer *out = bufferevent_get_output(m->bev);
    size_t len = body != NULL ? evbuffer_get_length(body) : 0;
    bufferevent_disable(m->bev, EV_READ);
    evbuffer_add_printf(out, "HTTP/1.1 %d %s\r\n"
                        "Content-Type: %s\r\n"
                        "Content-Length: %zu\r\n"
                        "Connection: close\r\n"
                        "%s\r\n",
                        code, reason,
                        code == 200 ? "text/plain; version=0.0.4; charset=utf-8"
                                    : "text/plain; charset=utf-8",
                        len, headers);
    if (body != NULL && !head_only)
        evbuffer_add_buffer(out, body);
    bufferevent_enable(m->bev, EV_WRITE);
}

static void reply_text(struct mconn *m, int code, const char *reason,
                       const char *headers, const char *text)
{
    struct evbuffer *b = evbuffer_new();
    if (b == NULL) {
        conn_close(m);
        return;
    }
    evbuffer_add_printf(b, "%s\n", text);
    reply(m, code, reason, headers, b, false);
    evbuffer_free(b);
}

/* The value of header `name` (its line's rest, spaces trimmed), or NULL.
 * head holds whole CRLF-ended lines, the request line first. */
static const char *header(const char *head, const char *end, const char *name,
                          size_t *vlen)
{
    size_t nlen = strlen(name);
    const char *p = memchr(head, '\n', (size_t)(end - head));
    while (p != NULL && p + 1 < end) {
        const char *line = p + 1;
        const char *eol = memchr(line, '\n', (size_t)(end - line));
        if (eol == NULL)
            return NULL;
        if ((size_t)(eol - line) > nlen && line[nlen] == ':' &&
            strncasecmp(line, name, nlen) == 0) {
            const char *v = line + nlen + 1, *ve = eol;
            while (v < ve && (*v == ' ' || *v == '\t'))
                v++;
            while (ve > v && (ve[-1] == '\r' || ve[-1] == ' ' || ve[-1] == '\t'))
                ve--;
            *vlen = (size_t)(ve - v);
            return v;
        }
        p = eol;
    }
    return NULL;
}

/* Whether the request may be served: no users to check, or HTTP basic
 * authentication of one of them. */
static bool authorized(const char *head, const char *end)
{
    if (!auth_required)
        return true;
    size_t vlen;
    const char *v = header(head, end, "Authorization", &vlen);
    if (v == NULL || vlen < 6 || strncasecmp(v, "Basic ", 6) != 0)
        return false;
    v += 6;
    vlen -= 6;
    while (vlen > 0 && *v == ' ') {
        v++;
        vlen--;
    }
    unsigned char cred[METRICS_CRED_MAX + 1];
    if (vlen == 0 || vlen > BASE64_ENCODED_LEN(METRICS_CRED_MAX))
        return false;
    size_t n = base64_decode((const unsigned char *)v, vlen, cred, METRICS_CRED_MAX);
    unsigned char *colon = n > 0 ? memchr(cred, ':', n) : NULL;
    if (colon == NULL || colon == cred)
        return false;
    /* Both NUL-terminated too, for Cyrus SASL. */
    *colon = '\0';
    cred[n] = '\0';
    const char *user = (const char *)cred, *pass = (const char *)colon + 1;
    size_t ulen = (size_t)(colon - cred), plen = n - ulen - 1;
    bool ok;
    if (settings.auth_file != NULL) {
        ok = auth_check_db(AUTH_DB_ASCII, user, ulen, pass, plen);
    } else {
        ok = sasl_auth_check_password(user, ulen, pass, plen);
    }
    return ok;
}

/* The request line and headers, end at their blank line. */
static void serve(struct mconn *m, const char *head, const char *end)
{
    /* "METHOD SP target SP HTTP/1.x" */
    const char *eol = memchr(head, '\r', (size_t)(end - head));
    const char *sp1 = eol ? memchr(head, ' ', (size_t)(eol - head)) : NULL;
    const char *target = sp1 ? sp1 + 1 : NULL;
    const char *sp2 = target ? memchr(target, ' ', (size_t)(eol - target)) : NULL;
    if (sp2 == NULL || sp1 == head || sp2 == target || memchr(head, '\0', (size_t)(end - head)) ||
        (size_t)(eol - sp2 - 1) != 8 || strncmp(sp2 + 1, "HTTP/1.", 7) != 0) {
        reply_text(m, 400, "Bad Request", "", "not an HTTP/1.x request");
        return;
    }
    if (!authorized(head, end)) {
        stat_add(&st_auth_errors, 1);
        reply_text(m, 401, "Unauthorized",
                   "WWW-Authenticate: Basic realm=\"tac-memcached\", charset=\"UTF-8\"\r\n",
                   "authentication required: a user of -Y or -S");
        return;
    }
    size_t mlen = (size_t)(sp1 - head);
    size_t plen = (size_t)(sp2 - target);
    const char *q = memchr(target, '?', plen);
    if (q != NULL)
        plen = (size_t)(q - target);
    if (plen != 8 || memcmp(target, "/metrics", 8) != 0) {
        reply_text(m, 404, "Not Found", "", "only /metrics is served here");
        return;
    }
    bool get = mlen == 3 && memcmp(head, "GET", 3) == 0;
    bool head_only = mlen == 4 && memcmp(head, "HEAD", 4) == 0;
    if (!get && !head_only) {
        reply_text(m, 405, "Method Not Allowed", "Allow: GET, HEAD\r\n", "GET /metrics");
        return;
    }
    struct evbuffer *out = evbuffer_new();
    if (out == NULL || !render(out)) {
        if (out != NULL)
            evbuffer_free(out);
        reply_text(m, 500, "Internal Server Error", "", "out of memory");
        return;
    }
    reply(m, 200, "OK", "", out, head_only);
    evbuffer_free(out);
}

static void on_read(struct bufferevent *bev, void *arg)
{
    struct mconn *m = arg;
    struct evbuffer *in = bufferevent_get_input(bev);
    struct evbuffer_ptr blank = evbuffer_search(in, "\r\n\r\n", 4, NULL);
    if (blank.pos < 0 || blank.pos + 4 > METRICS_HEAD_MAX) {
        if (blank.pos >= 0 || evbuffer_get_length(in) > METRICS_HEAD_MAX)
            reply_text(m, 431, "Request Header Fields Too Large", "",
                       "the request line and headers take at most 8192 bytes");
        return;
    }
    size_t len = (size_t)blank.pos + 4;
    const char *head = (const char *)evbuffer_pullup(in, (ev_ssize_t)len);
    if (head == NULL) {
        conn_close(m);
        return;
    }
    serve(m, head, head + len - 2);
}

/* The answer is written. */
static void on_written(struct bufferevent *bev, void *arg)
{
    (void)bev;
    conn_close(arg);
}

static void on_event(struct bufferevent *bev, short what, void *arg)
{
    (void)bev;
    if (what & (BEV_EVENT_EOF | BEV_EVENT_ERROR))
        conn_close(arg);
}

static void on_deadline(evutil_socket_t fd, short what, void *arg)
{
    (void)fd;
    (void)what;
    stat_add(&st_timeouts, 1);
    conn_close(arg);
}

static void conn_open(int fd)
{
    struct mconn *m = calloc(1, sizeof(*m));
    struct timeval life = { settings.metrics_timeout, 0 };
    if (m != NULL) {
        m->bev = bufferevent_socket_new(mbase, fd, BEV_OPT_CLOSE_ON_FREE);
        m->deadline = evtimer_new(mbase, on_deadline, m);
    }
    if (m == NULL || m->bev == NULL || m->deadline == NULL ||
        evtimer_add(m->deadline, &life) != 0) {
        if (m != NULL && m->bev != NULL)
            bufferevent_free(m->bev);
        else
            close(fd);
        if (m != NULL && m->deadline != NULL)
            event_free(m->deadline);
        free(m);
        return;
    }
    bufferevent_setcb(m->bev, on_read, on_written, on_event, m);
    bufferevent_enable(m->bev, EV_READ);
    m->next = conns;
    if (conns != NULL)
        conns->prev = m;
    conns = m;
    nconns++;
    stat_add(&st_conns, 1);
    if (nconns >= (uint64_t)settings.metrics_max_conns) {
        paused_full = true;
        stat_add(&st_capped, 1);
        listening_update();
    }
}

static void shortage_begin(void)
{
    if (fd_short)
        return;
    struct rlimit rl = { 0, 0 };
    getrlimit(RLIMIT_NOFILE, &rl);
    fd_short = true;
    clock_gettime(CLOCK_MONOTONIC, &short_since);
    stat_add(&st_short, 1);
    fprintf(stderr, "metrics port: too many open files (limit %lu, %llu metrics "
            "connections): accepting paused, retried every %d ms\n",
            (unsigned long)rl.rlim_cur, (unsigned long long)nconns, METRICS_RETRY_MS);
}

/* An accept found the backlog empty: descriptors are left. */
static void shortage_end(void)
{
    if (!fd_short)
        return;
    fd_short = false;
    struct timespec now;
    clock_gettime(CLOCK_MONOTONIC, &now);
    long long ms = (long long)(now.tv_sec - short_since.tv_sec) * 1000 +
                   (now.tv_nsec - short_since.tv_nsec) / 1000000;
    fprintf(stderr, "metrics port: accepting connections again after %lld ms\n", ms);
}

static void on_retry(evutil_socket_t fd, short what, void *arg)
{
    (void)fd;
    (void)what;
    (void)arg;
    paused_short = false;
    listening_update();
    accept_pending();
}

static void on_accept(evutil_socket_t lfd, short what, void *arg)
{
    (void)what;
    (void)arg;
    for (int i = 0; i < 16 && listening; i++) {
        int fd = accept4(lfd, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC);
        if (fd >= 0) {
            conn_open(fd);
            continue;
        }
        if (errno == EMFILE || errno == ENFILE) {
            struct timeval retry = { 0, METRICS_RETRY_MS * 1000 };
            shortage_begin();
            paused_short = true;
            listening_update();
            if (evtimer_add(retry_ev, &retry) != 0)
                fprintf(stderr, "metrics port: cannot add the retry timer\n");
        } else if (errno == EAGAIN || errno == EWOULDBLOCK) {
            shortage_end();
        } else if (errno == EINTR || errno == ECONNABORTED) {
            continue;
        }
        return;
    }
}

/* Binds every address host resolves to. */
static bool bind_host(const char *host)
{
    char port[8], name[128];
    size_t n = strlen(host);
    if (n >= 2 && host[0] == '[' && host[n - 1] == ']') {
        snprintf(name, sizeof(name), "%.*s", (int)(n - 2), host + 1);
        host = name;
    }
    snprintf(port, sizeof(port), "%d", settings.metrics_port);
    struct addrinfo hints = {
        .ai_flags = AI_PASSIVE, .ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM,
    };
    struct addrinfo *res = NULL;
    int rc = getaddrinfo(host, port, &hints, &res);
    if (rc != 0) {
        fprintf(stderr, "-o metrics_listen: %s: %s\n", host, gai_strerror(rc));
        return false;
    }
    bool ok = true;
    for (struct addrinfo *ai = res; ai != NULL && ok; ai = ai->ai_next) {
        if (nlisten == METRICS_LISTENERS_MAX) {
            fprintf(stderr, "-o metrics_listen: more than %d addresses\n",
                    METRICS_LISTENERS_MAX);
            ok = false;
            break;
        }
        int fd = socket(ai->ai_family, ai->ai_socktype | SOCK_NONBLOCK | SOCK_CLOEXEC,
                        ai->ai_protocol);
        int one = 1;
        if (fd >= 0) {
            setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
            if (ai->ai_family == AF_INET6)
                setsockopt(fd, IPPROTO_IPV6, IPV6_V6ONLY, &one, sizeof(one));
        }
        if (fd < 0 || bind(fd, ai->ai_addr, ai->ai_addrlen) != 0 ||
            listen(fd, 1024) != 0) {
            fprintf(stderr, "failed to listen on %s port %d for -o metrics_port: %s\n",
                    host, settings.metrics_port, strerror(errno));
            if (fd >= 0)
                close(fd);
            ok = false;
            break;
        }
        listen_fd[nlisten] = fd;
        listen_ev[nlisten] = event_new(mbase, fd, EV_READ | EV_PERSIST, on_accept, NULL);
        if (listen_ev[nlisten] == NULL) {
            close(fd);
            ok = false;
            break;
        }
        nlisten++;
    }
    freeaddrinfo(res);
    return ok;
}

bool metrics_start(struct event_base *base)
{
    stats_provide_counter("metrics_conns", &st_conns);
    stats_provide_counter("metrics_auth_errors", &st_auth_errors);
    stats_provide_counter("metrics_timeouts", &st_timeouts);
    stats_provide_counter("metrics_conns_capped", &st_capped);
    stats_provide_counter("metrics_listen_disabled_num", &st_short);
    if (settings.metrics_port == 0)
        return true;
    mbase = base;
    bool users = settings.auth_file != NULL || settings.sasl;
    auth_required = users && settings.metrics_auth == METRICS_AUTH_USERS;
    if (users && !auth_required)
        fprintf(stderr, "-o metrics_auth=none: -o metrics_port %d serves the stats "
                "to anyone, without the authentication %s asks on the cache port\n",
                settings.metrics_port, settings.sasl ? "-S" : "-Y");
    retry_ev = evtimer_new(base, on_retry, NULL);
    char *copy = strdup(settings.metrics_listen ? settings.metrics_listen : "127.0.0.1");
    bool ok = copy != NULL && retry_ev != NULL;
    char *save = NULL;
    for (char *tok = ok ? strtok_r(copy, "; ,", &save) : NULL; tok && ok;
         tok = strtok_r(NULL, "; ,", &save))
        ok = bind_host(tok);
    free(copy);
    if (ok && nlisten == 0) {
        fprintf(stderr, "-o metrics_listen: no address for -o metrics_port\n");
        ok = false;
    }
    if (ok)
        listening_update();
    return ok;
}

void metrics_stop(void)
{
    while (conns != NULL)
        conn_close(conns);
    for (int i = 0; i < nlisten; i++) {
        event_free(listen_ev[i]);
        close(listen_fd[i]);
    }
    nlisten = 0;
    listening = false;
    if (retry_ev != NULL)
        event_free(retry_ev);
    retry_ev = NULL;
}

/*
 * conn.c - the per-connection state machine: reading requests, queueing
 * responses and writing them back, for TCP, unix sockets and UDP.
 *
 * Design.  Each connection is driven by conn_drive(), a loop over
 * enum conn_state that runs until the socket would block.  Requests are
 * parsed straight out of rbuf by the protocol module; a storage value is
 * read directly into its item (conn_nread).  Every request appends its
 * responses to a queue (conn_resp.c; conn_park.c for the ones answered
 * later); the queue is written with one sendmsg() per batch
 * of iovecs after the parser runs out of complete requests or after
 * settings.reqs_per_event requests (then the connection yields so other
 * connections on the worker get their turn).  UDP requests arrive one per
 * datagram behind an 8-byte frame header; their responses are cut into
 * datagrams of at most UDP_MAX_PAYLOAD bytes, each with its own header.
 *
 * Connection memory.  One bound, settings.conn_mem_limit, covers what
 * connections hold beyond their fixed RBUF_INITIAL read buffer: read
 * buffers grown for long request lines or pipelined bytes, and the values
 * of stores still being read when past CONN_VALUE_ALLOWANCE (conn.h).
 * Each connection's share is c->mem_held; the sum is the gauge
 * conn_mem_bytes.  A growth that takes the sum past the bound marks the
 * connections holding the most (an incomplete request
 * by construction: a complete one is parsed before the buffer grows) for
 * closing until the marked bytes cover the excess; their workers close
 * them (conn_mem_close_marked) and count conn_mem_closed.  The bound is
 * therefore exceeded by at most the growth steps in flight.
 *
 * Threads.  A connection belongs to one worker thread and is touched only
 * by it.  The exceptions are `stats conns` and the connection-memory
 * victim search, which read the registry (conn_registry.c) under its lock;
 * the fields they read (state, last_cmd_time, mem_held) are written
 * atomically, and mem_close is the only field another thread writes.
 */
#include "config.h"

#include <arpa/inet.h>
#include <errno.h>
#include <event2/event.h>
#include <fcntl.h>
#include <limits.h>
#include <netinet/in.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/un.h>
#include <unistd.h>

#include "net/conn.h"
#include "base/watch.h"
#include "engine/items.h"
#include "base/prefix_stats.h"
#include "base/stats.h"
#include "net/tls.h"
#include "net/worker.h"
#include "base/util.h"

#define RBUF_INITIAL CONN_RBUF_INITIAL
#define RBUF_MAX CONN_RBUF_MAX
#define WRITE_IOV_MAX 128
#define UDP_HEADER_SIZE 8
#define UDP_MAX_PAYLOAD 1400
#define UDP_READ_SIZE 65536

/* ---- Connection memory: closing past the bound ---------------------------- */

static void conn_close_for_memory(conn *c)
{
    GSTATS_INCR(conn_mem_closed);
    if (settings.verbose > 0)
        fprintf(stderr, "<%d closing: holds %zu bytes (request or unsent "
                "responses) past conn_mem_limit\n", c->sfd, c->mem_held);
    c->close_reason = "error";
    conn_close(c);
}

void conn_mem_close_marked(struct worker *w)
{
    conn *c = w->conns;
    while (c) {
        conn *next = c->next_conn;
        if (__atomic_load_n(&c->mem_close, __ATOMIC_RELAXED))
            conn_close_for_memory(c);
        c = next;
    }
}

bool conn_start_tls(conn *c)
{
    c->tls = tls_new(c->sfd);
    return c->tls != NULL;
}

/* ---- Protocols ---------------------------------------------------------- */

static const struct conn_protocol_ops *protocols[PROTO_BINARY + 1];

void conn_set_protocol(enum conn_protocol p, const struct conn_protocol_ops *ops)
{
    protocols[p] = ops;
}

/* A connection still negotiating speaks text until its first byte says
 * otherwise. */
static const struct conn_protocol_ops *protocol_of(enum conn_protocol p)
{
    return protocols[p == PROTO_BINARY ? PROTO_BINARY : PROTO_TEXT];
}

void conn_complete_nread(conn *c, enum conn_protocol p)
{
    protocol_of(p)->complete_nread(c);
}

/* ---- Lifecycle ---------------------------------------------------------- */

static void conn_event_handler(evutil_socket_t fd, short which, void *arg);

static bool conn_update_event(conn *c, short flags)
{
    if (c->ev_flags == flags)
        return true;
    event_del(c->ev);
    if (event_assign(c->ev, c->thread->base, c->sfd, flags,
                     conn_event_handler, c) != 0)
        return false;
    c->ev_flags = flags;
    return event_add(c->ev, NULL) == 0;
}

static void conn_describe_peer(conn *c)
{
    struct sockaddr_storage ss;
    socklen_t len = sizeof(ss);

    if (c->transport == TRANSPORT_UNIX) {
        snprintf(c->peer_name, sizeof(c->peer_name), "unix:%s",
                 settings.socketpath ? settings.socketpath : "");
        memcpy(c->listen_name, c->peer_name, sizeof(c->listen_name));
        return;
    }
    if (c->transport == TRANSPORT_UDP) {
        snprintf(c->peer_name, sizeof(c->peer_name), "udp");
        return;
    }
    if (getpeername(c->sfd, (struct sockaddr *)&ss, &len) != 0)
        ss.ss_family = AF_UNSPEC;
    conn_format_addr(&ss, "tcp", c->peer_name, sizeof(c->peer_name));
    len = sizeof(ss);
    if (getsockname(c->sfd, (struct sockaddr *)&ss, &len) != 0)
        ss.ss_family = AF_UNSPEC;
    conn_format_addr(&ss, "tcp", c->listen_name, sizeof(c->listen_name));
}

void conn_watch_get(conn *c, const char *key, size_t nkey, const item *it,
                    bool found, enum item_miss why, unsigned int clsid)
{
    watch_item_get(key, nkey, item_miss_name(why, found), found ? clsid : 0, c->sfd,
                   it != NULL && it->nbytes >= 2 ? it->nbytes - 2 : 0);
}

void conn_count_read(conn *c, const char *key, size_t nkey, const item *it,
                     bool found, bool touch, enum item_miss why, unsigned int clsid)
{
    struct thread_stats *ts = &c->thread->stats;
    if (why == MISS_EXPIRED)
        STATS_INCR(ts, get_expired);
    else if (why == MISS_FLUSHED)
        STATS_INCR(ts, get_flushed);
    if (prefix_stats_on())
        prefix_stats_get(key, nkey, found);
    if (watch_on(WATCH_FETCHERS))
        conn_watch_get(c, key, nkey, it, found, why, clsid);
    if (touch) {
        STATS_INCR(ts, touch_cmds);
        if (found)
            SLAB_STATS_INCR(ts, clsid, touch_hits);
        else
            STATS_INCR(ts, touch_misses);
    } else {
        STATS_INCR(ts, get_cmds);
        if (found)
            SLAB_STATS_INCR(ts, clsid, get_hits);
        else
            STATS_INCR(ts, get_misses);
    }
}

void conn_watch_store(conn *c, const item *it, enum store_op op, enum store_result ret)
{
    watch_item_store(ITEM_key(it), it->nkey, store_result_name(ret), store_op_name(op),
                     it->exptime != 0 ? (int64_t)it->exptime - mc_now() : 0,
                     it->slabs_clsid, c->sfd, it->nbytes >= 2 ? it->nbytes - 2 : 0);
}

/* A connection opened or closed, for watch connevents: peer_name is
 * "<transport>:<host>:<port>" (the host of IPv6 has colons). */
static void conn_watch_event(conn *c, bool open, const char *reason)
{
    char host[64] = "unix";
    unsigned int port = 0;
    const char *transport = c->transport == TRANSPORT_UDP ? "udp"
                          : c->transport == TRANSPORT_UNIX ? "local" : "tcp";
    if (c->transport == TRANSPORT_TCP) {
        const char *first = strchr(c->peer_name, ':');
        const char *last = strrchr(c->peer_name, ':');
        if (first != NULL && last > first) {
            snprintf(host, sizeof(host), "%.*s", (int)(last - first - 1), first + 1);
            port = (unsigned int)strtoul(last + 1, NULL, 10);
        }
    }
    watch_conn_event(open, host, port, transport, reason, c->sfd);
}

void conn_format_addr(const struct sockaddr_storage *ss, const char *proto,
                      char *out, size_t outlen)
{
    char host[INET6_ADDRSTRLEN] = "?";
    int port = 0;
    if (ss->ss_family == AF_INET) {
        const struct sockaddr_in *in = (const struct sockaddr_in *)ss;
        inet_ntop(AF_INET, &in->sin_addr, host, sizeof(host));
        port = ntohs(in->sin_port);
    } else if (ss->ss_family == AF_INET6) {
        const struct sockaddr_in6 *in6 = (const struct sockaddr_in6 *)ss;
        inet_ntop(AF_INET6, &in6->sin6_addr, host, sizeof(host));
        port = ntohs(in6->sin6_port);
    }
    snprintf(out, outlen, "%s:%s:%d", proto, host, port);
}

conn *conn_new(int sfd, enum conn_transport transport, struct worker *w)
{
    conn *c = calloc(1, sizeof(*c));
    if (!c)
        return NULL;
    size_t rsize = transport == TRANSPORT_UDP ? UDP_READ_SIZE : RBUF_INITIAL;
    c->rbuf = malloc(rsize);
    c->ev = event_new(w->base, sfd, EV_READ | EV_PERSIST, conn_event_handler, c);
    if (!c->rbuf || !c->ev) {
        if (!c->rbuf)
            GSTATS_INCR(read_buf_oom);
        free(c->rbuf);
        if (c->ev)
            event_free(c->ev);
        free(c);
        return NULL;
    }
    c->sfd = sfd;
    c->authenticated = settings.auth_file == NULL && !settings.sasl;
    c->auth_guesses = 0;
    c->auth_refusals = 0;
    c->rsize = rsize;
    c->rcurr = c->rbuf;
    c->transport = transport;
    c->protocol = transport == TRANSPORT_UDP ? PROTO_TEXT
                : settings.protocol == PROTOCOL_ASCII ? PROTO_TEXT
                : settings.protocol == PROTOCOL_BINARY ? PROTO_BINARY
                : PROTO_NEGOTIATING;
    c->thread = w;
    c->state = transport == TRANSPORT_UDP ? conn_read : conn_new_cmd;
    c->ev_flags = EV_READ | EV_PERSIST;
    c->last_cmd_time = mc_now();
    c->last_cmd = "";
    conn_describe_peer(c);
    if (event_add(c->ev, NULL) != 0) {
        event_free(c->ev);
        free(c->rbuf);
        free(c);
        return NULL;
    }
    c->next_conn = w->conns;
    if (w->conns)
        w->conns->prev_conn = c;
    w->conns = c;
    if (transport != TRANSPORT_UDP) {
        GSTATS_INCR(curr_connections);
        GSTATS_INCR(total_connections);
    }
    GSTATS_INCR(connection_structures);
    GSTATS_ADD(read_buf_bytes, rsize);
    if (transport != TRANSPORT_UDP)
        conn_registry_add(c);
    if (transport != TRANSPORT_UDP && watch_on(WATCH_CONNEVENTS))
        conn_watch_event(c, true, NULL);
    return c;
}

static void conn_stream_end(conn *c)
{
    if (c->stream_free != NULL)
        c->stream_free(c->stream_ctx);
    if (c->stream_timer != NULL)
        event_free(c->stream_timer);
    c->stream_more = NULL;
    c->stream_free = NULL;
    c->stream_ctx = NULL;
    c->stream_timer = NULL;
}

void conn_stream(conn *c, enum conn_stream_step (*more)(conn *c, void *ctx),
                 void (*free_ctx)(void *ctx), void *ctx)
{
    conn_stream_end(c);
    c->stream_more = more;
    c->stream_free = free_ctx;
    c->stream_ctx = ctx;
}

static void conn_stream_wake(evutil_socket_t fd, short which, void *arg)
{
    (void)fd;
    (void)which;
    conn_drive(arg);
}

/* An idle stream: what the client sent is dropped (its end closes the
 * connection), and the stream is asked again after a while or when the
 * client sends more.  False: close. */
static bool conn_stream_idle(conn *c)
{
    char scratch[4096];
    for (;;) {
        ssize_t n = recv(c->sfd, scratch, sizeof(scratch), MSG_DONTWAIT);
        if (n > 0)
            continue;
        if (n == 0 || (errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR))
            return false;
        break;
    }
    if (c->stream_timer == NULL)
        c->stream_timer = evtimer_new(c->thread->base, conn_stream_wake, c);
    struct timeval tv = { 0, CONN_STREAM_IDLE_MS * 1000 };
    return c->stream_timer != NULL && evtimer_add(c->stream_timer, &tv) == 0 &&
           conn_update_event(c, EV_READ | EV_PERSIST);
}

/* Queues the stream's next piece; ends it after the last. */
static enum conn_stream_step conn_stream_next(conn *c)
{
    __atomic_store_n(&c->last_cmd_time, mc_now(), __ATOMIC_RELAXED); /* not idle */
    enum conn_stream_step step = c->stream_more(c, c->stream_ctx);
    if (step == STREAM_DONE)
        conn_stream_end(c);
    return step;
}

static void conn_release_queue(conn *c)
{
    while (c->resp_head) {
        struct resp *r = c->resp_head;
        c->resp_head = r->next;
        resp_free(c->thread, r);
    }
    c->resp_tail = NULL;
}

static void (*close_hook)(void);

void conn_set_close_hook(void (*fn)(void))
{
    close_hook = fn;
}

void conn_close(conn *c)
{
    struct worker *w = c->thread;

    if (c->transport != TRANSPORT_UDP && watch_on(WATCH_CONNEVENTS))
        conn_watch_event(c, false, c->close_reason ? c->close_reason : "normal");

    conn_registry_remove(c);
    event_del(c->ev);
    event_free(c->ev);
    if (c->item) {
        item_release(c->item);
        c->item = NULL;
    }
    for (size_t i = 0; i < sizeof(protocols) / sizeof(protocols[0]); i++)
        if (protocols[i] != NULL && protocols[i]->cleanup != NULL)
            protocols[i]->cleanup(c);
    /* Reads still in flight complete into nothing (conn_park.c). */
    for (struct parked *p = c->parked; p != NULL; p = p->next)
        p->c = NULL;
    if (c->ready) {
        for (conn **pp = &w->ready; *pp != NULL; pp = &(*pp)->ready_next)
            if (*pp == c) {
                *pp = c->ready_next;
                break;
            }
    }
    conn_stream_end(c);
    conn_release_queue(c);
    if (c->mem_held > 0)
        GSTATS_SUB(conn_mem_bytes, c->mem_held);
    if (c->prev_conn)
        c->prev_conn->next_conn = c->next_conn;
    else
        w->conns = c->next_conn;
    if (c->next_conn)
        c->next_conn->prev_conn = c->prev_conn;
    if (c->transport != TRANSPORT_UDP)
        GSTATS_DECR(curr_connections);
    GSTATS_DECR(connection_structures);
    GSTATS_SUB(read_buf_bytes, c->rsize);
    if (settings.verbose > 1)
        fprintf(stderr, "<%d connection closed.\n", c->sfd);
    tls_free(c->tls);
    free(c->tls_wbuf);
    close(c->sfd);
    free(c->rbuf);
    free(c);
    if (close_hook != NULL)
        close_hook();
}

/* Closes connections idle (waiting for a command) longer than
 * settings.idle_timeout.  Runs on the worker's own timer. */
void conn_close_idle(struct worker *w)
{
    if (settings.idle_timeout <= 0)
        return;
    rel_time_t now = mc_now();
    conn *c = w->conns;
    while (c) {
        conn *next = c->next_conn;
        bool idle = c->state == conn_read || c->state == conn_waiting ||
                    c->state == conn_new_cmd;
        if (c->transport != TRANSPORT_UDP && idle && c->rbytes == 0 &&
            !c->resp_head &&
            now - c->last_cmd_time > (rel_time_t)settings.idle_timeout) {
            if (settings.verbose > 1)
                fprintf(stderr, "<%d idle timeout\n", c->sfd);
            c->close_reason = "idle_timeout";
            __atomic_fetch_add(&gstats.idle_kicks, 1, __ATOMIC_RELAXED);
            conn_close(c);
        }
        c = next;
    }
}

/* Closes every connection of a worker (shutdown). */
void conn_close_all(struct worker *w)
{
    while (w->conns) {
        w->conns->close_reason = "shutdown";
        conn_close(w->conns);
    }
}

/* ---- Reading ------------------------------------------------------------ */

enum read_result { READ_DATA, READ_NO_DATA, READ_ERROR, READ_MEMORY };

/* Moves unparsed bytes to the front, and shrinks an oversized buffer that
 * has drained. */
static void conn_compact_rbuf(conn *c)
{
    if (c->rbytes == 0 && c->rsize > RBUF_INITIAL * 4) {
        char *small = malloc(RBUF_INITIAL);
        if (small) {
            GSTATS_SUB(read_buf_bytes, c->rsize - RBUF_INITIAL);
            free(c->rbuf);
            c->rbuf = small;
            c->rsize = RBUF_INITIAL;
            conn_mem_sync(c);
        }
    }
    if (c->rcurr != c->rbuf) {
        if (c->rbytes)
            memmove(c->rbuf, c->rcurr, c->rbytes);
        c->rcurr = c->rbuf;
    }
}

/* read(2), through the TLS session when there is one. */
static ssize_t conn_recv(conn *c, void *buf, size_t len)
{
    if (c->tls != NULL)
        return tls_read(c->tls, buf, len);
    return read(c->sfd, buf, len);
}

static enum read_result conn_read_network(conn *c)
{
    conn_compact_rbuf(c);
    if (c->rbytes == c->rsize) {
        if (c->rsize >= RBUF_MAX)
            return READ_MEMORY;
        char *grown = realloc(c->rbuf, c->rsize * 2);
        if (!grown) {
            GSTATS_INCR(read_buf_oom);
            return READ_MEMORY;
        }
        GSTATS_ADD(read_buf_bytes, c->rsize);
        c->rbuf = c->rcurr = grown;
        c->rsize *= 2;
        conn_mem_sync(c);
        if (__atomic_load_n(&c->mem_close, __ATOMIC_RELAXED))
            return READ_ERROR;
    }
    ssize_t n = conn_recv(c, c->rbuf + c->rbytes, c->rsize - c->rbytes);
    if (n > 0) {
        STATS_ADD(&c->thread->stats, bytes_read, n);
        c->rbytes += (size_t)n;
        return READ_DATA;
    }
    if (n == 0)
        return READ_ERROR;
    if (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR)
        return READ_NO_DATA;
    return READ_ERROR;
}

/* conn_nread / conn_swallow: copy or discard buffered bytes, then read the
 * socket.  Returns false when the machine must stop (blocked/closed). */
static bool conn_read_value(conn *c, bool swallow)
{
    size_t *want = swallow ? &c->sbytes : &c->rlbytes;
    if (*want == 0)
        return true;
    if (c->rbytes > 0) {
        size_t n = c->rbytes < *want ? c->rbytes : *want;
        if (!swallow) {
            memcpy(c->ritem, c->rcurr, n);
            c->ritem += n;
        }
        c->rcurr += n;
        c->rbytes -= n;
        *want -= n;
        return true;
    }
    if (c->transport == TRANSPORT_UDP) {
        /* A UDP request must fit its datagram. */
        conn_set_state(c, conn_new_cmd);
        if (c->item) {
            item_release(c->item);
            c->item = NULL;
        }
        *want = 0;
        return true;
    }
    ssize_t n;
    if (swallow) {
        conn_compact_rbuf(c);
        size_t room = c->rsize < *want ? c->rsize : *want;
        n = conn_recv(c, c->rbuf, room);
        if (n > 0)
            *want -= (size_t)n;
    } else {
        n = conn_recv(c, c->ritem, *want);
        if (n > 0) {
            c->ritem += n;
            *want -= (size_t)n;
        }
    }
    if (n > 0) {
        STATS_ADD(&c->thread->stats, bytes_read, n);
        return true;
    }
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR)) {
        if (!conn_update_event(c, EV_READ | EV_PERSIST))
            conn_set_state(c, conn_closing);
        return false;
    }
    conn_set_state(c, conn_closing);
    return true;
}

/* ---- Writing ------------------------------------------------------------ */

enum write_result { WRITE_COMPLETE, WRITE_INCOMPLETE, WRITE_SOFT_ERROR,
                    WRITE_HARD_ERROR,
                    WRITE_PARKED };   /* sent all up to a pending resp */

/* Drops sent bytes from the queue head, freeing finished responses. */
static void conn_advance_queue(conn *c, size_t sent)
{
    while (c->resp_head) {
        struct resp *r = c->resp_head;
        if (r->pending)
            return;
        bool done = true;
        for (int i = 0; i < r->iovcnt && !r->skip; i++) {
            struct iovec *v = &r->iov[i];
            if (v->iov_len == 0)
                continue;
            if (sent >= v->iov_len) {
                sent -= v->iov_len;
                v->iov_len = 0;
            } else {
                v->iov_base = (char *)v->iov_base + sent;
                v->iov_len -= sent;
                sent = 0;
                done = false;
                break;
            }
        }
        if (!done)
            return;
        c->resp_head = r->next;
        if (!c->resp_head)
            c->resp_tail = NULL;
        resp_free(c->thread, r);
    }
}

/* What is left to do after sending: nothing, more, or wait for a
 * pending resp at the head. */
static enum write_result conn_queue_state(const conn *c)
{
    if (c->resp_head == NULL)
        return WRITE_COMPLETE;
    return c->resp_head->pending ? WRITE_PARKED : WRITE_INCOMPLETE;
}

/* The head of the queue (iov) gathered into one TLS write of at most
 * ssl_wbuf_size, or exactly the bytes of a write to retry. */
static ssize_t conn_send_tls(conn *c, const struct iovec *iov, int n)
{
    size_t cap = (size_t)settings.ssl_wbuf_size * 1024;
    if (c->tls_wbuf == NULL && (c->tls_wbuf = malloc(cap)) == NULL) {
        errno = ENOMEM;
        return -1;
    }
    size_t len = 0;
    for (int i = 0; i < n && len < cap; i++) {
        size_t k = iov[i].iov_len < cap - len ? iov[i].iov_len : cap - len;
        memcpy(c->tls_wbuf + len, iov[i].iov_base, k);
        len += k;
    }
    size_t want = tls_write_len(c->tls, len);
    return tls_write(c->tls, c->tls_wbuf, want < len ? want : len);
}

static enum write_result conn_transmit_tcp(conn *c)
{
    struct iovec iov[WRITE_IOV_MAX];
    int n = 0;
    for (struct resp *r = c->resp_head; r && n < WRITE_IOV_MAX; r = r->next) {
        if (r->pending)
            break;
        if (r->skip)
            continue;
        for (int i = 0; i < r->iovcnt && n < WRITE_IOV_MAX; i++)
            if (r->iov[i].iov_len)
                iov[n++] = r->iov[i];
    }
    if (n == 0) {
        conn_advance_queue(c, 0);
        return conn_queue_state(c);
    }
    ssize_t sent;
    if (c->tls != NULL) {
        sent = conn_send_tls(c, iov, n);
    } else {
        struct msghdr msg = { .msg_iov = iov, .msg_iovlen = n };
        sent = sendmsg(c->sfd, &msg, MSG_NOSIGNAL);
    }
    if (sent > 0) {
        STATS_ADD(&c->thread->stats, bytes_written, sent);
        conn_advance_queue(c, (size_t)sent);
        conn_mem_sync(c);
        return conn_queue_state(c);
    }
    if (sent < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR))
        return WRITE_SOFT_ERROR;
    return WRITE_HARD_ERROR;
}

/* Sends the whole queue as UDP datagrams: each carries the 8-byte header
 * (request id, sequence number, datagram count, reserved) and up to
 * UDP_MAX_PAYLOAD - 8 bytes of the response stream. */
static void conn_transmit_udp(conn *c)
{
    const size_t chunk = UDP_MAX_PAYLOAD - UDP_HEADER_SIZE;
    size_t total = 0;
    for (struct resp *r = c->resp_head; r; r = r->next)
        for (int i = 0; i < r->iovcnt && !r->skip; i++)
            total += r->iov[i].iov_len;
    size_t ndgrams = (total + chunk - 1) / chunk;
    if (ndgrams == 0 || ndgrams > UINT16_MAX) {
        conn_release_queue(c);
        return;
    }
    char *stream = malloc(total);
    if (!stream) {
        conn_release_queue(c);
        return;
    }
    size_t off = 0;
    for (struct resp *r = c->resp_head; r; r = r->next)
        for (int i = 0; i < r->iovcnt && !r->skip; i++) {
            memcpy(stream + off, r->iov[i].iov_base, r->iov[i].iov_len);
            off += r->iov[i].iov_len;
        }
    conn_release_queue(c);

    for (size_t seq = 0; seq < ndgrams; seq++) {
        unsigned char hdr[UDP_HEADER_SIZE] = {
            c->udp_request_id >> 8, c->udp_request_id & 0xff,
            seq >> 8, seq & 0xff, ndgrams >> 8, ndgrams & 0xff, 0, 0,
        };
        size_t len = total - seq * chunk < chunk ? total - seq * chunk : chunk;
        struct iovec iov[2] = {
            { hdr, sizeof(hdr) }, { stream + seq * chunk, len },
        };
        struct msghdr msg = {
            .msg_name = &c->udp_peer, .msg_namelen = c->udp_peer_len,
            .msg_iov = iov, .msg_iovlen = 2,
        };
        ssize_t sent = sendmsg(c->sfd, &msg, MSG_NOSIGNAL);
        if (sent > 0)
            STATS_ADD(&c->thread->stats, bytes_written, sent);
    }
    free(stream);
}

/* Reads one datagram and strips its frame header.  Returns false when there
 * is nothing (more) to read. */
static bool conn_read_udp(conn *c)
{
    c->udp_peer_len = sizeof(c->udp_peer);
    ssize_t n = recvfrom(c->sfd, c->rbuf, c->rsize, 0,
                         (struct sockaddr *)&c->udp_peer, &c->udp_peer_len);
    if (n <= 0)
        return false;
    STATS_ADD(&c->thread->stats, bytes_read, n);
    if (n <= UDP_HEADER_SIZE) {
        c->rbytes = 0;
        return true;
    }
    const unsigned char *h = (const unsigned char *)c->rbuf;
    c->udp_request_id = (uint16_t)(h[0] << 8 | h[1]);
    uint16_t count = (uint16_t)(h[4] << 8 | h[5]);
    if (count > 1) {
        /* Multi-datagram requests are not supported, as in memcached. */
        c->rbytes = 0;
        return true;
    }
    c->rcurr = c->rbuf + UDP_HEADER_SIZE;
    c->rbytes = (size_t)n - UDP_HEADER_SIZE;
    /* Each datagram picks its protocol by its first byte, as a TCP
     * connection does; one that -B rules out is dropped. */
    bool binary = (unsigned char)c->rcurr[0] == 0x80;
    c->protocol = binary ? PROTO_BINARY : PROTO_TEXT;
    if ((binary && settings.protocol == PROTOCOL_ASCII) ||
        (!binary && settings.protocol == PROTOCOL_BINARY))
        c->rbytes = 0;
    return true;
}

/* Runs the requests of the current datagram until none is left or a
 * write waits for a value being read (a barrier: what follows must see
 * its result). */
static void udp_parse(conn *c)
{
    while ((c->rbytes > 0 || c->state == conn_nread) && c->barriers == 0) {
        if (c->state == conn_nread) {
            conn_read_value(c, false);
            if (c->state == conn_nread && c->rlbytes == 0)
                conn_complete_nread(c, c->protocol);
            continue;
        }
        if (c->state == conn_swallow) {
            c->rbytes = 0;
            break;
        }
        c->noreply = false;
        conn_set_state(c, conn_parse_cmd);
        if (protocols[c->protocol]->try_command(c) == PROTO_NEED_MORE) {
            c->rbytes = 0;              /* a request must fit its datagram */
            break;
        }
        if (c->state == conn_closing)
            break;
    }
}

/* Answers the current datagram once nothing of it waits: false while a
 * response is parked (an SSD read) or a barrier holds requests back.  The
 * socket is not read meanwhile (the next datagram's peer and request id
 * would overwrite this one's); park_done brings the conn back through
 * conn_run_ready. */
static bool udp_finish(conn *c)
{
    if (c->npending > 0 || c->barriers > 0) {
        conn_set_state(c, conn_parked);
        if (c->ev_flags != 0) {
            event_del(c->ev);
            c->ev_flags = 0;
        }
        return false;
    }
    if (c->item) {
        item_release(c->item);
        c->item = NULL;
    }
    if (c->resp_head)
        conn_transmit_udp(c);
    c->rbytes = 0;
    c->rcurr = c->rbuf;
    c->sbytes = 0;
    c->rlbytes = 0;
    c->udp_busy = false;
    conn_set_state(c, conn_read);
    if (c->ev_flags == 0 && !conn_update_event(c, EV_READ | EV_PERSIST))
        fprintf(stderr, "UDP: cannot watch the socket again\n");
    return true;
}

/* Runs every request of one datagram, then answers it; reads from an SSD
 * park as on TCP, and the next datagram waits for them. */
static void conn_drive_udp(conn *c)
{
    if (c->udp_busy) {
        udp_parse(c);                   /* what a barrier held back */
        if (!udp_finish(c))
            return;
    }
    for (int budget = 0; budget < 64 && conn_read_udp(c); budget++) {
        c->udp_busy = true;
        conn_set_state(c, conn_parse_cmd);
        udp_parse(c);
        if (!udp_finish(c))
            return;
    }
}

/* ---- The state machine -------------------------------------------------- */

static enum proto_result conn_try_command(conn *c)
{
    return protocol_of(c->protocol)->try_command(c);
}

/* After the queue is flushed: parse more if bytes are buffered, else wait. */
static void conn_after_write(conn *c)
{
    if (c->close_after_write)
        conn_set_state(c, conn_closing);
    else
        conn_set_state(c, conn_new_cmd);
}

/* One turn of conn_drive: the requests this turn may still parse, and
 * whether the parser waits for bytes not yet read. */
struct conn_turn {
    int nreqs;
    bool need_read;
};

/* Each step handles the state its name gives, and answers false when the
 * turn ends there (the connection waits for an event, or is closed). */

static bool conn_step_new_cmd(conn *c, struct conn_turn *t)
{
    c->noreply = false;
    bool can_parse = c->rbytes > 0 && !t->need_read &&
                     c->npending < CONN_PARK_MAX &&
                     c->barriers == 0 && !c->close_after_write &&
                     c->stream_more == NULL;
    if (can_parse && --t->nreqs >= 0) {
        conn_set_state(c, conn_parse_cmd);
    } else if ((c->resp_head && !c->resp_head->pending) ||
               (c->stream_more != NULL && c->resp_head == NULL)) {
        conn_set_state(c, conn_write);
    } else if (c->resp_head && (c->close_after_write ||
                                c->stream_more != NULL ||
                                c->barriers > 0 ||
                                c->npending >= CONN_PARK_MAX)) {
        /* Only pending responses are queued and no request may be read
         * now: wait for the reads (conn_run_ready). */
        conn_set_state(c, conn_parked);
    } else if (can_parse) {
        /* Budget spent: let other connections run, come back as soon as
         * the socket is writable. */
        STATS_INCR(&c->thread->stats, conn_yields);
        if (!conn_update_event(c, EV_WRITE | EV_PERSIST))
            conn_set_state(c, conn_closing);
        return false;
    } else {
        /* As memcached counts it: the turn ends with the request budget
         * spent, though nothing more is buffered. */
        if (--t->nreqs < 0)
            STATS_INCR(&c->thread->stats, conn_yields);
        conn_set_state(c, conn_waiting);
    }
    return true;
}

static bool conn_step_waiting(conn *c)
{
    /* Bytes a TLS session decrypted already: the socket may never wake us
     * for them. */
    if (c->tls != NULL && tls_pending(c->tls)) {
        conn_set_state(c, conn_read);
        return true;
    }
    if (!conn_update_event(c, EV_READ | EV_PERSIST)) {
        conn_set_state(c, conn_closing);
        return true;
    }
    conn_set_state(c, conn_read);
    return false;
}

static void conn_step_read(conn *c, struct conn_turn *t)
{
    switch (conn_read_network(c)) {
    case READ_DATA:
        t->need_read = false;
        conn_set_state(c, conn_parse_cmd);
        break;
    case READ_NO_DATA:
        conn_set_state(c, conn_waiting);
        break;
    case READ_MEMORY:
        out_errstring(c, "SERVER_ERROR out of memory reading request");
        c->close_after_write = true;
        c->rbytes = 0;
        conn_set_state(c, conn_write);
        break;
    case READ_ERROR:
        conn_set_state(c, conn_closing);
        break;
    }
}

static bool conn_step_parse(conn *c, struct conn_turn *t)
{
    if (c->protocol == PROTO_NEGOTIATING)
        c->protocol = (unsigned char)c->rcurr[0] == 0x80 ? PROTO_BINARY : PROTO_TEXT;
    __atomic_store_n(&c->last_cmd_time, mc_now(), __ATOMIC_RELAXED);
    enum proto_result pr = conn_try_command(c);
    conn_mem_sync(c);           /* the responses it queued */
    if (__atomic_load_n(&c->mem_close, __ATOMIC_RELAXED)) {
        conn_close_for_memory(c);
        return false;
    }
    if (pr == PROTO_NEED_MORE) {
        t->need_read = true;
        conn_set_state(c, c->resp_head ? conn_write : conn_waiting);
    } else if (c->state == conn_parse_cmd) {
        conn_set_state(c, conn_new_cmd);
    }
    return true;
}

static bool conn_step_swallow(conn *c)
{
    if (c->sbytes == 0) {
        conn_set_state(c, conn_new_cmd);
        return true;
    }
    /* A refused text value is answered once it is swallowed, as memcached
     * does: libmemcached, still writing the value when an early answer
     * arrives, may drop its connection and reconnect.  A binary one, or a
     * text one announced past twice -I, is answered at once: a client that
     * announced 4 GB may never send it all.  A full socket leaves the
     * answer queued until the swallow ends. */
    bool early = c->protocol == PROTO_BINARY || c->sbytes > 2 * (size_t)settings.item_size_max;
    if (early && c->rbytes == 0 &&
        c->resp_head && !c->resp_head->pending &&
        conn_transmit_tcp(c) == WRITE_HARD_ERROR) {
        conn_set_state(c, conn_closing);
        return true;
    }
    return conn_read_value(c, true);
}

/* The queue is out and a get streams on: its next piece, unless this
 * turn's budget is spent. */
static bool conn_step_stream(conn *c, struct conn_turn *t)
{
    if (--t->nreqs < 0) {
        /* A piece per request's worth of turn: let other connections run,
         * back when writable. */
        STATS_INCR(&c->thread->stats, conn_yields);
        if (!conn_update_event(c, EV_WRITE | EV_PERSIST))
            conn_set_state(c, conn_closing);
        return false;
    }
    enum conn_stream_step step = conn_stream_next(c);
    conn_mem_sync(c);
    if (__atomic_load_n(&c->mem_close, __ATOMIC_RELAXED)) {
        conn_close_for_memory(c);
        return false;
    }
    if (step != STREAM_IDLE)
        return true;
    if (!conn_stream_idle(c)) {
        conn_set_state(c, conn_closing);
        return true;
    }
    return false;               /* the timer or a read wakes it */
}

static bool conn_step_write(conn *c, struct conn_turn *t)
{
    switch (conn_transmit_tcp(c)) {
    case WRITE_COMPLETE:
        if (c->stream_more != NULL)
            return conn_step_stream(c, t);
        if (t->need_read && !c->close_after_write)
            conn_set_state(c, conn_waiting);
        else
            conn_after_write(c);
        break;
    case WRITE_INCOMPLETE:
        break;
    case WRITE_PARKED:
        /* Everything up to a pending response is out: go on reading
         * requests meanwhile. */
        conn_set_state(c, conn_new_cmd);
        break;
    case WRITE_SOFT_ERROR:
        if (!conn_update_event(c, EV_WRITE | EV_PERSIST))
            conn_set_state(c, conn_closing);
        return false;
    case WRITE_HARD_ERROR:
        conn_set_state(c, conn_closing);
        break;
    }
    return true;
}

void conn_drive(conn *c)
{
    struct conn_turn t = { .nreqs = settings.reqs_per_event, .need_read = false };

    if (c->transport == TRANSPORT_UDP) {
        conn_drive_udp(c);
        return;
    }
    /* Marked while this worker was busy elsewhere.  A mark set during this
     * call is this connection's own growth, which conn_read_network turns
     * into a close. */
    if (__atomic_load_n(&c->mem_close, __ATOMIC_RELAXED)) {
        conn_close_for_memory(c);
        return;
    }
    for (bool more = true; more;) {
        switch (c->state) {
        case conn_new_cmd:
            more = conn_step_new_cmd(c, &t);
            break;
        case conn_parked:
            /* No socket events until a parked response is filled. */
            if (c->ev_flags != 0) {
                event_del(c->ev);
                c->ev_flags = 0;
            }
            return;
        case conn_waiting:
            more = conn_step_waiting(c);
            break;
        case conn_read:
            conn_step_read(c, &t);
            break;
        case conn_parse_cmd:
            more = conn_step_parse(c, &t);
            break;
        case conn_nread:
            if (c->rlbytes == 0) {
                conn_complete_nread(c, c->protocol);
                if (c->state == conn_nread)
                    conn_set_state(c, conn_new_cmd);
            } else {
                more = conn_read_value(c, false);
            }
            break;
        case conn_swallow:
            more = conn_step_swallow(c);
            break;
        case conn_write:
            more = conn_step_write(c, &t);
            break;
        case conn_closing:
        default:
            conn_close(c);
            return;
        }
    }
}

static void conn_event_handler(evutil_socket_t fd, short which, void *arg)
{
    conn *c = arg;
    (void)fd;
    (void)which;
    if (c->state == conn_new_cmd && c->ev_flags & EV_WRITE) {
        /* Resuming after a yield. */
        if (!conn_update_event(c, EV_READ | EV_PERSIST)) {
            conn_close(c);
            return;
        }
    }
    conn_drive(c);
}

void server_request_shutdown(void)
{
    kill(getpid(), SIGINT);
}

/*
 * conn.h - a client connection: its read buffer, its queue of responses and
 * the interface between the network layer (conn.c, thread.c) and the
 * protocol parsers (proto_text.c with proto_meta.c, and proto_bin.c), which
 * register their hooks (conn_set_protocol).
 *
 * Threads: a connection belongs to one worker thread for its whole life;
 * nothing here is locked.  The protocol code runs on that worker.
 *
 * Reading.  The network layer fills rbuf; the parser consumes from rcurr
 * (rbytes bytes are unparsed).  A storage command whose value is not yet
 * fully in rbuf sets c->item/ritem/rlbytes and state conn_nread: the network
 * layer then copies the rest of rbuf and reads the socket straight into the
 * item, and calls the parser's complete_nread hook when rlbytes reaches 0.
 * conn_swallow discards c->sbytes bytes (a value that was refused).
 *
 * Writing.  Each request appends one or more `struct resp` to the queue, in
 * request order.  A resp holds iovecs pointing into its own small buffer,
 * into items it holds references to (zero-copy values) or into a malloc'd
 * buffer it owns.  The network layer sends ready responses from the head
 * and releases their references and buffers once written.
 */
#ifndef CONN_H
#define CONN_H

#include "net/conn_resp.h"

/*
 * A response too long to build at once (a key dump), or without end (a
 * watcher's log).  Whenever everything queued before it has been sent,
 * more(c, ctx) queues the next piece with resp_new and says STREAM_PIECE,
 * STREAM_IDLE (nothing now: asked again in CONN_STREAM_IDLE_MS, or when
 * the client sends something, which is read and dropped) or STREAM_DONE
 * (that was the last).  Meanwhile the connection reads no request.
 * free_ctx(ctx) runs when the stream has ended or the connection closes.
 */
#define CONN_STREAM_IDLE_MS 20
void conn_stream(conn *c, enum conn_stream_step (*more)(conn *c, void *ctx),
                 void (*free_ctx)(void *ctx), void *ctx);

/* The protocol's complete_nread hook for c's value just read (conn_park.c
 * runs it again for a store retried or resumed). */
void conn_complete_nread(conn *c, enum conn_protocol p);

/* ---- Network side (conn.c), called by thread.c ----------------------- */

/* Creates a connection on worker w's event base; NULL on failure (the
 * caller closes sfd). */
conn *conn_new(int sfd, enum conn_transport transport, struct worker *w);
void conn_close(conn *c);
/* fn runs (on the closing worker) after every connection close: the
 * listener resumes accepting when it had run out of descriptors. */
void conn_set_close_hook(void (*fn)(void));
/* Runs the state machine until the connection blocks or closes. */
void conn_drive(conn *c);
/* Closes connections idle longer than settings.idle_timeout. */
void conn_close_idle(struct worker *w);
void conn_close_all(struct worker *w);
/* Closes the worker's connections marked for holding the most memory past
 * settings.conn_mem_limit (after worker_wake()). */
void conn_mem_close_marked(struct worker *w);
/* For the `shutdown` command: stop the server gracefully. */
void server_request_shutdown(void);

/* ---- Protocols -------------------------------------------------------- */

/*
 * conn.c reads, frames values and writes; a protocol parses and answers.
 * Each protocol (proto_text.c with proto_meta.c, proto_bin.c) offers these
 * hooks, and main() registers them before any connection exists, so this
 * layer calls up into no protocol file by name.
 */
struct conn_protocol_ops {
    /* Parses and runs one command from c->rbuf (PROTO_NEED_MORE: read more). */
    enum proto_result (*try_command)(conn *c);
    /* The value of a storage command (c->item) has been read. */
    void (*complete_nread)(conn *c);
    /* Frees protocol state when any connection closes; may be NULL. */
    void (*cleanup)(conn *c);
};
void conn_set_protocol(enum conn_protocol p, const struct conn_protocol_ops *ops);

/* -Z: c (a TCP connection just made) speaks TLS from its first byte.
 * False when the session cannot be made; the caller closes c. */
bool conn_start_tls(conn *c);

/* watch: a get's and a store's log lines (watch.h), for this connection. */
void conn_watch_get(conn *c, const char *key, size_t nkey, const struct item *it,
                    bool found, enum item_miss why, unsigned int clsid);
void conn_watch_store(conn *c, const struct item *it, enum store_op op,
                      enum store_result ret);
/* A key read by a get, gat or touch of any protocol (found: a hit, or a
 * read parked for its value; clsid: the item's class): the worker's
 * get_expired/get_flushed, get or touch cmds, hits and misses, `stats
 * detail` and the watch line. */
void conn_count_read(conn *c, const char *key, size_t nkey, const struct item *it,
                     bool found, bool touch, enum item_miss why, unsigned int clsid);

/* Formats an address as "tcp:127.0.0.1:11211" (proto given). */
void conn_format_addr(const struct sockaddr_storage *ss, const char *proto,
                      char *out, size_t outlen);
#endif

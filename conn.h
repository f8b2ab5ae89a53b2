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

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/socket.h>
#include <sys/uio.h>

#include "items.h"
#include "settings.h"

struct item;
struct worker;

enum conn_state {
    conn_listening,   /* listener socket */
    conn_new_cmd,     /* between requests: reset per-request state */
    conn_waiting,     /* waiting for the socket to become readable */
    conn_read,        /* reading into rbuf */
    conn_parse_cmd,   /* parsing rbuf */
    conn_nread,       /* reading a value into c->ritem */
    conn_swallow,     /* discarding c->sbytes of refused value */
    conn_write,       /* sending the response queue */
    conn_closing,     /* close once the state machine sees it */
    conn_closed,
    conn_parked,      /* waiting for lower-tier reads before going on */
    conn_max_state
};

enum conn_protocol {
    PROTO_NEGOTIATING = 0,  /* first byte decides: 0x80 = binary */
    PROTO_TEXT,
    PROTO_BINARY,
};

enum conn_transport { TRANSPORT_TCP, TRANSPORT_UDP, TRANSPORT_UNIX };

/* Room for one response header line: "VALUE <250-byte key> <flags>
 * <bytes> <cas>\r\n" or a meta header with base64 key and flags. */
#define RESP_WBUF_SIZE 512
#define RESP_IOV_MAX 4
#define RESP_ITEMS_MAX 2

struct resp {
    struct resp *next;
    struct conn *owner;     /* whose reply_bytes count this resp */
    size_t held;            /* bytes of items and buffers it holds, as
                               counted in owner->reply_bytes */
    int iovcnt;
    struct iovec iov[RESP_IOV_MAX];
    struct item *items[RESP_ITEMS_MAX];  /* released after sending */
    int nitems;
    void *owned_buf;        /* free()d after sending */
    size_t wbytes;          /* bytes of wbuf used */
    bool skip;              /* quiet mode: dropped, never sent */
    bool pending;           /* a placeholder whose response is being read
                               from SSD (conn_read_item); sending stops
                               here until it is filled */
    char wbuf[RESP_WBUF_SIZE];
};

/* Parser result of proto_*_try_command(). */
enum proto_result {
    PROTO_NEED_MORE = 0,    /* no complete command in rbuf: read more */
    PROTO_DONE,             /* one command handled; check c->state */
};

/* What a pending storage value is for; proto-private details follow it. */
struct conn_nread_ctx {
    int cmd;                /* protocol-defined */
    uint64_t req_cas;
    uint32_t opaque_len;
    uint64_t meta_flags;    /* protocol-defined bitmap */
    char opaque[40];        /* meta O flag, echoed back */
    char ret_key[KEY_MAX_LENGTH * 2 + 4]; /* meta k flag / base64 key */
    int64_t meta_arg[8];    /* protocol-defined numeric args */
};

typedef struct conn conn;
/* What a stream's next piece was (conn_stream). */
enum conn_stream_step { STREAM_PIECE, STREAM_IDLE, STREAM_DONE };

struct conn {
    int sfd;
    enum conn_state state;
    enum conn_protocol protocol;
    enum conn_transport transport;
    struct worker *thread;

    /* read side */
    char *rbuf;
    char *rcurr;            /* first unparsed byte */
    size_t rsize;           /* allocated size of rbuf */
    size_t rbytes;          /* unparsed bytes from rcurr */

    /* value being read (conn_nread) */
    struct item *item;      /* referenced; released when done */
    char *ritem;            /* where the next value byte goes */
    size_t rlbytes;         /* value bytes still to read (incl "\r\n") */
    struct conn_nread_ctx nr;
    size_t sbytes;          /* conn_swallow: bytes to discard */

    /* write side */
    struct resp *resp_head;
    struct resp *resp_tail;
    bool noreply;           /* current request wants no reply */
    bool close_after_write; /* close once the queue is flushed */
    bool authenticated;     /* without -Y or -S from the start; with them,
                               after the client's user and password */
    uint8_t auth_guesses;   /* -Y: refused passwords (proto_text.c) */
    uint8_t auth_refusals;  /* -Y: every command refused before auth */
    void *sasl;             /* -S: the SASL exchange (sasl_auth.h) */
    struct tls_conn *tls;   /* -Z: the TLS session, NULL for plain text */
    char *tls_wbuf;         /* -Z: where a TLS write is gathered */
    unsigned npending;      /* pending resps (SSD reads in flight) */
    struct parked *parked;  /* their read contexts */
    struct resp *resp_insert; /* resp_new inserts after this, not at the
                                 tail, while a parked response is filled */
    bool ready;             /* on the worker's ready list */
    int redo_tries;         /* > 0 while conn_retry() runs a request again */
    const struct item_got *prior; /* while a parked fill or conn_retry()'s
                                      rerun of a request runs: what the read
                                      got (the items.c writes' `prior`);
                                      NULL otherwise */
    unsigned barriers;      /* conn_retry() requests waiting for a value:
                               later requests wait until they ran */
    conn *ready_next;

    /* stores parked for room (conn.c, "Stores waiting for room") */
    int64_t room_wait_start;   /* µs: the running store's first wait, or 0 */
    bool room_parked;          /* it parked again */
    bool room_timed_out;       /* it ran out of store_wait_ms */
    size_t room_held;          /* bytes of parked stores' items */

    /* connection memory (conn.c, "Connection memory") */
    size_t reply_bytes;     /* queued responses: their structs, the values
                               they pin or copied, their buffers */
    size_t mem_held;        /* this conn's share of conn_mem_bytes; written
                               by its worker, read under the registry lock */
    size_t mem_closable;    /* of it, what closing would win back: all but
                               room_held (a parked store is never a reason
                               to close); written and read like mem_held */
    bool mem_close;         /* set (atomic) by any thread under the
                               registry lock: close, it holds the most */

    /* binary protocol: the request being handled (proto_bin.c) */
    struct {
        uint8_t opcode;     /* as received (quiet variants included) */
        bool quiet;
        uint8_t extlen;
        uint16_t keylen;
        uint32_t bodylen;
        uint32_t opaque;    /* network byte order, echoed back */
        uint64_t cas;       /* host byte order */
    } bin;

    /* UDP */
    uint16_t udp_request_id;
    bool udp_busy;              /* a datagram's requests are not all answered */
    struct sockaddr_storage udp_peer;
    socklen_t udp_peer_len;

    /* a response made piece by piece (conn_stream) */
    enum conn_stream_step (*stream_more)(conn *c, void *ctx);
    void (*stream_free)(void *ctx);
    void *stream_ctx;
    struct event *stream_timer; /* wakes an idle stream */

    /* bookkeeping */
    rel_time_t last_cmd_time;
    const char *last_cmd;   /* name, for `stats conns` */
    const char *close_reason; /* watch connevents: NULL = "normal" */
    char peer_name[128];    /* "unix:" and a path of up to 107 bytes fit */
    char listen_name[128];   /* the local address it came in on ("" for UDP) */
    struct event *ev;       /* libevent event, owned by conn.c */
    short ev_flags;
    conn *next_conn;        /* worker's list of its connections */
    conn *prev_conn;
};

/* ---- Response queue (protocol side) ----------------------------------- */

/* Appends a new empty response; NULL on out of memory. */
/* True if the worker may queue n more responses under -o
 * read_buf_mem_limit; false counts in response_obj_oom. */
bool conn_resp_room(conn *c, int n);
struct resp *resp_new(conn *c);
/* Appends text to the response's buffer; false if it does not fit. */
bool resp_add_text(struct resp *r, const char *s, size_t len);
bool resp_printf(struct resp *r, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));
/* Adds an iovec to memory that stays valid until the resp is sent
 * (static text, or memory of an item/buffer the resp holds). */
bool resp_add_iov(struct resp *r, const void *buf, size_t len);
/* Hands the resp a reference to `it`; released after sending.  An item
 * with too many held references (items.h) is copied instead: the resp's
 * iovecs into it are moved to the copy and the caller's reference is
 * dropped.  False (nothing taken) when the resp holds its maximum or the
 * copy finds no memory. */
bool resp_hold_item(struct resp *r, struct item *it);
/* Hands the resp a malloc'd buffer and sends len bytes of it. */
bool resp_add_owned(struct resp *r, void *buf, size_t len);
/* A new response of c made of buf alone (malloc'd; the response frees it
 * once sent).  On failure buf is freed, nothing is queued, and false is
 * returned: the caller answers an error or closes. */
bool resp_give(conn *c, void *buf, size_t len);
/* Releases what a sent or dropped resp holds and returns it to the
 * worker's cache (conn.c's writer). */
void resp_free(struct worker *w, struct resp *r);

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

/*
 * Queues "str\r\n" as a whole response, unless c->noreply is set (then
 * nothing is sent and noreply is cleared).  On allocation failure the
 * connection is closed.
 */
void out_string(conn *c, const char *str);
/* Like out_string but always sent (errors clear noreply). */
void out_errstring(conn *c, const char *str);

/*
 * Parked responses (doc/design.md, "Workers never wait for the SSD").  A request that needs the value of an
 * SSD-resident item queues a placeholder in request order and goes on; the
 * read completes later on this worker, which then calls fill(c, value,
 * ctx): fill builds the request's response with the usual resp_new/out_*
 * calls, which land in the placeholder's position.  value is the item's
 * value as of the request (fill owns that reference) or NULL when it is
 * gone (answer a miss).  ctx (ctxlen bytes) is copied.  Responses after the
 * placeholder wait for it; past CONN_PARK_MAX placeholders the connection
 * stops reading requests.
 *
 * conn_read_item() is item_read() (items.h) with such a placeholder: on
 * ITEM_PENDING it is queued and fill runs when the value is back; every
 * other answer is the caller's to send now.
 */
#define CONN_PARK_MAX 64
typedef void (*conn_fill_fn)(conn *c, struct item *value, void *ctx);
enum item_answer conn_read_item(conn *c, struct item_read *rq,
                                conn_fill_fn fill, const void *ctx,
                                size_t ctxlen, struct item **out,
                                enum item_miss *why, unsigned int *clsid);
/* After ITEM_PENDING: the placeholder's own copy of ctx, which the caller
 * may still complete (fill runs later, on this thread). */
void *conn_read_item_ctx(conn *c);
/*
 * Retrying a request that needs an SSD-resident old value (append,
 * prepend, incr, decr got *_NEED_VALUE).  conn_retry() reads the key's
 * value, parking a placeholder as above, then runs fn(c, args) in
 * request order with c->prior set to what the read got (struct item_got,
 * items.h), which fn hands to item_add_delta, item_store_wait or
 * item_store_meta as their `prior`; fn answers the request, or calls conn_retry() again if the version
 * changed meanwhile (c->redo_tries counts).  No thread ever waits for the
 * read: when none can be parked (no memory) and the value is not in memory
 * either, the answer is SERVER_ERROR out of memory.  args (argslen bytes)
 * are copied; cleanup, if any, releases what they hold when the request is
 * dropped unanswered (the connection closed).  When no read is needed, fn
 * runs at once.
 *
 * conn_retry_nread() does this for the storage command whose value was
 * just read (c->item, c->nr, c->bin): the protocol's complete_nread hook
 * runs again, with c->prior set likewise.
 */
typedef void (*conn_retry_fn)(conn *c, void *args);
void conn_retry(conn *c, const char *key, size_t nkey, conn_retry_fn fn,
                void (*cleanup)(void *args), const void *args, size_t argslen);
void conn_retry_nread(conn *c);
/* The protocol's complete_nread hook for c's value just read (conn_park.c
 * runs it again for a store retried or resumed). */
void conn_complete_nread(conn *c, enum conn_protocol p);

/*
 * A store found no room in any tier, and a lower tier will make some
 * (*res is STORE_NEED_ROOM, from item_store_wait).  Parks the request:
 * a placeholder keeps its answer's place, later requests wait behind it
 * (the connection stops reading, so TCP pushes back), the worker serves
 * other connections, and a timer runs the protocol's complete_nread hook
 * again with the same value.  Its item counts against conn_mem_limit
 * meanwhile.  Returns true when parked (answer nothing now).  False when
 * *res was something else, or the store cannot wait: *res becomes
 * STORE_WAIT_TIMEOUT once -o store_wait_ms has passed since its first
 * wait (counted in store_wait_timeouts), or STORE_NO_MEMORY when it
 * cannot park (UDP, store_wait_ms 0, out of memory).
 */
bool conn_park_for_room(conn *c, enum store_result *res);  /* the NEED_ROOM case */
static inline bool conn_wait_room(conn *c, enum store_result *res)
{
    return *res == STORE_NEED_ROOM && conn_park_for_room(c, res);
}

/* Drives the connections whose parked responses were filled (thread.c,
 * after reaping the worker's reads). */
void conn_run_ready(struct worker *w);

/* ---- Connection control ---------------------------------------------- */

/* A value being read that fits in this much is part of a connection's
 * fixed cost, like its read buffer, and is not counted in mem_held. */
#define CONN_VALUE_ALLOWANCE (16 * 1024)
/* Likewise for queued responses: only reply_bytes past this count. */
#define CONN_REPLY_ALLOWANCE (64 * 1024)
/* A request whose responses hold more than this (a get of many keys)
 * goes on as a stream (conn_stream): the rest of it runs once what it
 * queued so far has been sent, so that a client that reads slowly holds
 * at most about this much per connection. */
#define CONN_REPLY_PIECE (256 * 1024)

/* The read buffer a connection starts with: part of its fixed cost. */
#define CONN_RBUF_INITIAL (16 * 1024)

/* conn_registry.c: brings c's memory share up to date (and marks the
 * biggest holders for closing when the sum passes conn_mem_limit). */
void conn_mem_sync(conn *c);
/* conn_registry.c: c opened, closing (for `stats conns` and the memory
 * bound's victim search). */
void conn_registry_add(conn *c);
void conn_registry_remove(conn *c);

/* True if c's item counts in its memory share while being read. */
static inline bool conn_value_counted(const conn *c)
{
    return c->item != NULL && ITEM_ntotal(c->item) > CONN_VALUE_ALLOWANCE;
}

/* Inline: every request passes through it several times.  Entering or
 * leaving nread changes c's memory share only by a value past the
 * allowance: with nothing held, a small one changes nothing. */
static inline void conn_set_state(conn *c, enum conn_state state)
{
    enum conn_state was = c->state;
    __atomic_store_n(&c->state, state, __ATOMIC_RELAXED);
    if ((was == conn_nread || state == conn_nread) &&
        (c->mem_held != 0 || conn_value_counted(c)))
        conn_mem_sync(c);
}

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

/* `stats conns` (main() registers it: conn.c has no init). */
struct stat_sink;
void conn_stats(struct stat_sink *sink);
/* -Z: c (a TCP connection just made) speaks TLS from its first byte.
 * False when the session cannot be made; the caller closes c. */
bool conn_start_tls(conn *c);

/* Bytes of the response objects allocated (`response_obj_bytes`). */
uint64_t conn_resp_bytes(void);
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
/* Records a listening socket ("tcp:127.0.0.1:11211") for `stats conns`. */
void conn_stats_add_listener(int fd, const char *name);

#endif

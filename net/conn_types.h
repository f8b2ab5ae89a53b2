/*
 * conn_types.h - what a client connection is made of: struct conn, its
 * queued responses (struct resp), its parked ones (struct parked), its
 * states and the bounds on what it may hold.  The files of the connection
 * layer stand on it from the bottom up: conn_registry.c (every connection,
 * and their memory), conn_resp.c (the response queue), conn.c (the state
 * machine), conn_park.c (requests answered later).  conn.h is what the
 * protocols and thread.c include.
 *
 * Threads: a connection belongs to one worker thread for its whole life.
 */
#ifndef CONN_TYPES_H
#define CONN_TYPES_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/socket.h>
#include <sys/uio.h>

#include "engine/items.h"
#include "base/settings.h"

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


/* A parked response (conn_park.c): its fill runs once what it waits on
 * is back; a closing connection sets c to NULL (conn.c). */
#define CONN_PARK_MAX 64
typedef void (*conn_fill_fn)(conn *c, struct item *value, void *ctx);
struct parked {
    struct parked *next;        /* the conn's list */
    conn *c;                    /* NULL once the conn closed */
    struct resp *r;             /* the placeholder */
    conn_fill_fn fill;
    void (*cleanup)(void *ctx); /* when fill will never run; may be NULL */
    bool ssd_read;              /* waits on an SSD read (read_parked) */
    _Alignas(max_align_t) char ctx[];
};

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

/* True if c's item counts in its memory share while being read. */
static inline bool conn_value_counted(const conn *c)
{
    return c->item != NULL && ITEM_ntotal(c->item) > CONN_VALUE_ALLOWANCE;
}

#endif

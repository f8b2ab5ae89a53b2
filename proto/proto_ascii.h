/*
 * proto_ascii.h - the text protocol's shared internals (proto_ascii.c):
 * nread commands, ms flags, limits and the helpers that proto_text.c and
 * proto_meta.c both use.  Not a public interface: conn.c sees only
 * proto_text_ops (proto_text.h).
 *
 * Threads: everything runs on the worker that owns the connection.
 */
#ifndef PROTO_ASCII_H
#define PROTO_ASCII_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "net/conn.h"
#include "engine/items.h"
#include "base/util.h"

/* Tokens per tokenizer pass (util_tokenize); memcached's MAX_TOKENS - 1. */
#define ASCII_MAX_TOKENS 23

/* What a pending value (conn_nread) is for: c->nr.cmd. */
enum ascii_nread_cmd {
    ASCII_NREAD_CLASSIC = 0x100,   /* | enum store_op */
    ASCII_NREAD_META    = 0x200,   /* | enum store_op */
};
#define ASCII_NREAD_OP(cmd) ((enum store_op)((cmd) & 0xff))

/* Bits in c->nr.meta_flags for a pending ms. */
#define ASCII_MS_NOREPLY   0x01    /* q */
#define ASCII_MS_BINKEY    0x02    /* b: return the key base64-encoded */
#define ASCII_MS_STALE     0x04    /* I with C: may store a stale value */
#define ASCII_MS_EXPLICIT  0x08    /* E: explicit CAS in meta_arg[1] */
/* c->nr.meta_arg[0] holds the return flags 'O','k','c' in request order,
 * one per byte from the low end. */

/* Meta opaque limit: the O token including its 'O'. */
#define ASCII_OPAQUE_MAX 32

/* Worker stats of the connection. */
#define ASCII_STATS(c) (&(c)->thread->stats)

/* Queues a copy of buf[0..len) as one response; errors close the conn. */
void ascii_out_buf(conn *c, const char *buf, size_t len, bool skip);

/* Appends base64 or raw key to p, returns the new end. */
char *ascii_put_key(char *p, const char *key, size_t nkey, bool binary);

/* item_store with memcached's rule that a zero or disabled CAS never
 * matches (EXISTS / NOT_FOUND). */
enum store_result ascii_store(conn *c, item *it, enum store_op op,
                           uint64_t req_cas, uint64_t *cas_out);

/* What follows a store, in both halves of the text protocol. */
enum ascii_store_next {
    ASCII_STORE_ANSWER,    /* answer *ret */
    ASCII_STORE_LATER,     /* a retry or a wait for room took the request over */
    ASCII_STORE_OOM,       /* answer SERVER_ERROR out of memory storing object */
};

/* After ascii_store (or item_store_meta) of it by op: hands an append or
 * prepend to an SSD value back for its value (STORE_NEED_VALUE), parks a
 * store that waits for room, writes the watch line and the CAS counters,
 * and turns a set, add, replace or cas that found every tier full, or
 * waited store_wait_ms in vain, into ASCII_STORE_OOM (counted; a failed set
 * deletes the old value, as memcached's failed allocation does).  An
 * append or prepend that fails so is answered as not stored. */
enum ascii_store_next ascii_store_after(conn *c, item *it, enum store_op op,
                                  enum store_result *ret);

/* Counts a successful incr/decr (incr_hits/decr_hits) for its class. */
void ascii_count_delta_hit(conn *c, size_t nkey, const char *num, bool incr);

/* Debug-level gate for the "verbosity" setting. */
#define ASCII_MAX_VERBOSITY 2

#endif

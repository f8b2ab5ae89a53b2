/*
 * proto_text.h - the memcached text protocol (classic and meta commands) as
 * conn.c's hooks; main() registers them with conn_set_protocol.
 */
#ifndef PROTO_TEXT_H
#define PROTO_TEXT_H

#include "net/conn.h"

extern const struct conn_protocol_ops proto_text_ops;

#endif

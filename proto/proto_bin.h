/*
 * proto_bin.h - memcached's binary protocol, as conn.c's hooks (main()
 * registers them with conn_set_protocol).
 */
#ifndef PROTO_BIN_H
#define PROTO_BIN_H

#include "net/conn.h"

extern const struct conn_protocol_ops proto_bin_ops;

#endif

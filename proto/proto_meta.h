/*
 * proto_meta.h - the meta commands (mg, ms, md, ma, mn, me), which
 * proto_text.c dispatches to after framing the line.
 *
 * Threads: everything runs on the worker that owns the connection.
 */
#ifndef PROTO_META_H
#define PROTO_META_H

#include <stddef.h>

#include "net/conn.h"
#include "base/util.h"

/* Meta dispatch for a 2-char command "m?"; tokens[0] is the command. */
void proto_meta_process(conn *c, struct util_token *tokens, size_t ntok,
                        char *rest);
/* Completes a pending ms once its value has been read. */
void proto_meta_complete_set(conn *c);

#endif

/*
 * proto_dump.h - the text protocol's key dumps, crawler commands and watch
 * (proto_dump.c): called by proto_text.c's dispatch with the tokenized
 * line.  Threads: the worker that owns the connection.
 */
#ifndef PROTO_DUMP_H
#define PROTO_DUMP_H

#include <stddef.h>

#include "net/conn.h"
#include "base/util.h"

/* lru_crawler metadump|crawl|enable|disable|sleep|tocrawl ... */
void pt_lru_crawler(conn *c, struct util_token *tok, size_t ntok);
/* watch [fetchers|mutations|evictions|connevents|tiers ...] */
void pt_watch(conn *c, struct util_token *tok, size_t ntok);
/* stats cachedump <class> <limit> */
void pt_stats_cachedump(conn *c, struct util_token *tok, size_t ntok);

#endif

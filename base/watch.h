/*
 * watch.h - memcached's `watch`: live log lines of what the server does,
 * streamed to the connections that asked (watch.c).  Lines are
 * "ts=<sec.usec> gid=<n> type=<event> ..." in memcached's formats, keys
 * URI-encoded.  Streams: fetchers (item_get), mutations (item_store),
 * evictions (eviction), connevents (conn_new, conn_close) and tiers
 * (tier_move: an item's value moved between DRAM, NVM and SSD).
 *
 * Every call site checks watch_on(kind) first: with no watcher it costs
 * one relaxed load.  Threads: any; the log is a ring under one mutex.
 */
#ifndef WATCH_H
#define WATCH_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

enum watch_kind {
    WATCH_FETCHERS = 1u << 0,
    WATCH_MUTATIONS = 1u << 1,
    WATCH_EVICTIONS = 1u << 2,
    WATCH_CONNEVENTS = 1u << 3,
    WATCH_TIERS = 1u << 4,
};

extern unsigned int watch_mask_;        /* streams some watcher wants */

static inline bool watch_on(unsigned int kind)
{
    return (__atomic_load_n(&watch_mask_, __ATOMIC_RELAXED) & kind) != 0;
}

/* Event lines.  status of a get: "found", "not_found", "flushed",
 * "expired"; of a store: "stored", "not_stored", "exists", "not_found",
 * "too_large", "no_memory". */
void watch_item_get(const char *key, size_t nkey, const char *status,
                    unsigned int clsid, int cfd, uint32_t value_len);
void watch_item_store(const char *key, size_t nkey, const char *status,
                      const char *cmd, int64_t ttl, unsigned int clsid, int cfd,
                      uint32_t value_len);
void watch_eviction(const char *key, size_t nkey, bool fetched, int64_t ttl,
                    int64_t idle, unsigned int clsid, uint32_t value_len);
void watch_conn_event(bool open, const char *rip, unsigned int rport,
                      const char *transport, const char *reason, int cfd);
void watch_tier_move(const char *key, size_t nkey, const char *from,
                     const char *to, unsigned int clsid, uint32_t value_len);

/* Watchers at once, as memcached's WATCHER_LIMIT. */
#define WATCH_MAX_WATCHERS 20

/* A watcher: from its registration on, the lines of the streams in mask.
 * NULL with *too_many set when WATCH_MAX_WATCHERS already watch (counted
 * in log_watchers_refused), NULL alone for lack of memory. */
struct watcher;
struct watcher *watcher_new(unsigned int mask, bool *too_many);
void watcher_free(struct watcher *w);
/* Appends the watcher's next lines to buf (at most about cap bytes);
 * returns the bytes added, 0 when there is nothing new.  Lines the ring
 * dropped before this watcher read them come out as one "skipped=<n>". */
size_t watcher_read(struct watcher *w, char *buf, size_t cap);

/* Hands the log's counters to `stats` (log_watchers, log_watcher_sent,
 * log_watcher_skipped, log_worker_written, log_watchers_refused). */
void watch_stats_register(void);

#endif

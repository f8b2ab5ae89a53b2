/*
 * stats.h - counters and the `stats` family.
 *
 * One line declares a counter: the X-macro lists below generate the
 * struct fields, `stats reset` and the per-thread aggregation.  One row of
 * stats.c's table declares a line of plain `stats` (name, type, how it is
 * read, meaning).  Per-thread counters are written only by their own worker
 * and read by whichever worker runs `stats`, so both sides use relaxed
 * atomics.  Engine-wide counters (items, bytes, evictions...) are relaxed
 * atomics in `gstats`, written by any thread.
 *
 * stats.c sits below the modules whose stats it prints: they register
 * their sub-commands, reset hooks and the values of their general lines
 * (the registry below), so stats.c calls none of them directly.
 */
#ifndef STATS_H
#define STATS_H

#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "base/settings.h"

/* Per worker thread, reset by `stats reset`. */
#define THREAD_STATS_FIELDS(X) \
    X(get_cmds)          \
    X(get_misses)        \
    X(get_expired)       \
    X(get_flushed)       \
    X(touch_cmds)        \
    X(touch_misses)      \
    X(delete_misses)     \
    X(incr_misses)       \
    X(decr_misses)       \
    X(cas_misses)        \
    X(store_too_large)   \
    X(store_no_memory)   \
    X(flush_cmds)        \
    X(meta_cmds)         \
    X(bytes_read)        \
    X(bytes_written)     \
    X(conn_yields)       \
    X(worker_turns)      \
    X(get_aborted_extstore)

/* Per worker and per slab class (`stats slabs`); summed for `stats`. */
#define SLAB_STATS_FIELDS(X) \
    X(get_hits)   \
    X(set_cmds)   \
    X(delete_hits) \
    X(incr_hits)  \
    X(decr_hits)  \
    X(cas_hits)   \
    X(cas_badval) \
    X(touch_hits)

#define STATS_DECLARE_FIELD(name) uint64_t name;

struct slab_stats {
    SLAB_STATS_FIELDS(STATS_DECLARE_FIELD)
};

struct thread_stats {
    THREAD_STATS_FIELDS(STATS_DECLARE_FIELD)
    struct slab_stats slab[MAX_SLAB_CLASSES];
};

/* Engine-wide gauges: current state, not cleared by `stats reset`. */
#define GLOBAL_GAUGE_FIELDS(X) \
    X(curr_items)        \
    X(bytes)             \
    X(curr_connections)  \
    X(connection_structures) \
    X(hash_bytes)        \
    X(conn_mem_bytes)    \
    X(accepting_conns)   \
    X(stores_waiting)    \
    X(response_objs)     \
    X(read_buf_bytes)

/* Engine-wide counters, cleared by `stats reset`. */
#define GLOBAL_COUNTER_FIELDS(X) \
    X(total_items)           \
    X(total_connections)     \
    X(rejected_connections)  \
    X(listen_disabled_num)   \
    X(time_in_listen_disabled_us) \
    X(conn_mem_closed)       \
    X(reply_item_copies)     \
    X(evictions)             \
    X(evicted_unfetched)     \
    X(evicted_active)        \
    X(reclaimed)             \
    X(expired_unfetched)     \
    X(crawler_reclaimed)     \
    X(crawler_items_checked) \
    X(lrutail_reflocked)     \
    X(direct_reclaims)       \
    X(lru_crawler_starts)    \
    X(read_buf_oom)          \
    X(response_obj_oom)      \
    X(auth_cmds)             \
    X(auth_errors)           \
    X(idle_kicks)            \
    X(lru_bumps_queued)      \
    X(lru_bumps_dropped)     \
    X(lru_bumps)             \
    X(moves_to_cold)         \
    X(moves_to_warm)         \
    X(lru_second_chances)    \
    X(outofmemory)           \
    X(store_waits)           \
    X(store_waits_done)      \
    X(store_wait_timeouts)

struct global_stats {
    GLOBAL_GAUGE_FIELDS(STATS_DECLARE_FIELD)
    GLOBAL_COUNTER_FIELDS(STATS_DECLARE_FIELD)
};

extern struct global_stats gstats;

#define STATS_ADD(ptr, field, n) \
    __atomic_fetch_add(&(ptr)->field, (uint64_t)(n), __ATOMIC_RELAXED)
#define STATS_SUB(ptr, field, n) \
    __atomic_fetch_sub(&(ptr)->field, (uint64_t)(n), __ATOMIC_RELAXED)
#define STATS_INCR(ptr, field) STATS_ADD(ptr, field, 1)
#define STATS_DECR(ptr, field) STATS_SUB(ptr, field, 1)
#define STATS_GET(ptr, field) __atomic_load_n(&(ptr)->field, __ATOMIC_RELAXED)
#define GSTATS_ADD(field, n) STATS_ADD(&gstats, field, n)
#define GSTATS_INCR(field) STATS_ADD(&gstats, field, 1)
#define GSTATS_DECR(field) STATS_SUB(&gstats, field, 1)
#define GSTATS_SUB(field, n) STATS_SUB(&gstats, field, n)
#define SLAB_STATS_INCR(ts, clsid, field) STATS_INCR(&(ts)->slab[(clsid)], field)

/*
 * Where stats go.  The text protocol emits "STAT key value\r\n" lines; the
 * binary protocol emits one packet per stat.  emit() is called once per
 * stat with NUL-terminated key and value.
 */
struct stat_sink {
    void (*emit)(void *ctx, const char *key, const char *val);
    void *ctx;
};

/* Formats the value and emits one stat. */
void stat_printf(struct stat_sink *sink, const char *key, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

/*
 * Sums every worker's counters into *out and, when totals is not NULL, the
 * per-class counters over every class into *totals.
 */
void stats_aggregate(struct thread_stats *out, struct slab_stats *totals);

/* The command counters of one slab class, "<clsid>:<name>", as `stats
 * slabs` shows them after the class's allocator lines. */
void stats_slab_class(struct stat_sink *sink, unsigned int clsid,
                      const struct slab_stats *ss);

/*
 * Runs `stats [sub]`: sub is NULL or "" for the general stats (stats.c's
 * table), else the sections registered under sub.  Returns false when no
 * section has that name (the caller answers with an error).  `stats reset`
 * is stats_reset().
 */
bool stats_run(const char *sub, struct stat_sink *sink);
void stats_reset(void);

/*
 * The registry.  stats.c calls no module above it: each module hands its
 * stats in here from its init function, before the workers start.
 * Registering the same thing twice changes nothing, so an init may run
 * again (the unit tests re-run items_init).
 */
typedef void (*stats_section_fn)(struct stat_sink *sink);
/* `stats <sub>` runs fn; sections sharing a sub run in registration
 * order (`stats settings`: the options, then the tiers').  sub is kept,
 * not copied: pass a string literal. */
void stats_register_section(const char *sub, stats_section_fn fn);
/* `stats reset` runs fn after clearing the counters stats.c holds. */
void stats_register_reset(void (*fn)(void));
/*
 * Gives the value of a general stat that stats.c's table reads from a
 * module (MODULE rows): fn returns it, or counter points at a uint64_t
 * read with a relaxed atomic load.  NULL withdraws it; a MODULE row that
 * no module provides is left out of `stats` (a tier that is not
 * configured).  A name that is not a MODULE row aborts at start-up: a
 * misspelt name would otherwise drop its line without a word.
 */
void stats_provide(const char *name, uint64_t (*fn)(void));
void stats_provide_counter(const char *name, const uint64_t *counter);
/* A STRING row's text (a static string). */
void stats_provide_text(const char *name, const char *(*fn)(void));

/* What a line of plain `stats` is (doc/stats.md's kind column): the
 * metrics endpoint types its samples with it.  -1 for a name that is not
 * a row. */
enum stat_kind { STAT_KIND_COUNTER, STAT_KIND_GAUGE, STAT_KIND_CONST, STAT_KIND_STRING };
int stats_general_kind(const char *name);
/* A worker's counters, summed by stats_aggregate() and cleared by `stats
 * reset`.  The worker must outlive every later `stats`. */
void stats_add_worker(struct thread_stats *ts);

/* A sink that appends text lines to a malloc'd buffer. */
struct stat_text {
    char *buf;
    size_t len, cap;
    bool oom;
};
void stat_text_init(struct stat_text *t, struct stat_sink *sink);
/* Appends "END\r\n"; returns the buffer (caller frees) or NULL on OOM. */
char *stat_text_finish(struct stat_text *t, size_t *len);

#endif

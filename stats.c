/*
 * stats.c - counters and every `stats` sub-command.
 *
 * Design.  Counters are declared once in the X-macro lists of stats.h;
 * this file walks those lists to aggregate, reset and print them, so a new
 * counter needs one line.  Output goes to a struct stat_sink, so the text
 * and binary protocols share the same names and values.
 *
 * Threads.  Any worker may run `stats`; it reads other workers' counters
 * with relaxed atomic loads.  `stats reset` stores zeros the same way; a
 * count racing with a reset may survive it, as in memcached.
 */
#include "config.h"

#include <event2/event.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <unistd.h>

#include "assoc.h"
#include "conn.h"
#include "items.h"
#include "lazy_lru.h"
#include "slabs.h"
#include "stats.h"
#include "tac/tac.h"
#include "thread.h"

struct global_stats gstats;

void stat_printf(struct stat_sink *sink, const char *key, const char *fmt, ...)
{
    char val[256];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(val, sizeof(val), fmt, ap);
    va_end(ap);
    sink->emit(sink->ctx, key, val);
}

/* ---- Text sink ---------------------------------------------------------- */

static void stat_text_append(struct stat_text *t, const char *s, size_t len)
{
    if (t->oom)
        return;
    if (t->len + len > t->cap) {
        size_t cap = t->cap ? t->cap * 2 : 4096;
        while (cap < t->len + len)
            cap *= 2;
        char *grown = realloc(t->buf, cap);
        if (!grown) {
            t->oom = true;
            return;
        }
        t->buf = grown;
        t->cap = cap;
    }
    memcpy(t->buf + t->len, s, len);
    t->len += len;
}

static void stat_text_emit(void *ctx, const char *key, const char *val)
{
    struct stat_text *t = ctx;
    stat_text_append(t, "STAT ", 5);
    stat_text_append(t, key, strlen(key));
    stat_text_append(t, " ", 1);
    stat_text_append(t, val, strlen(val));
    stat_text_append(t, "\r\n", 2);
}

void stat_text_init(struct stat_text *t, struct stat_sink *sink)
{
    memset(t, 0, sizeof(*t));
    sink->emit = stat_text_emit;
    sink->ctx = t;
}

char *stat_text_finish(struct stat_text *t, size_t *len)
{
    stat_text_append(t, "END\r\n", 5);
    if (t->oom) {
        free(t->buf);
        t->buf = NULL;
        return NULL;
    }
    *len = t->len;
    return t->buf;
}

/* ---- Aggregation -------------------------------------------------------- */

void stats_aggregate(struct thread_stats *out)
{
    memset(out, 0, sizeof(*out));
    for (int i = 0; i < worker_count(); i++) {
        struct thread_stats *ts = &worker_get(i)->stats;
#define SUM_FIELD(name) out->name += STATS_GET(ts, name);
        THREAD_STATS_FIELDS(SUM_FIELD)
        for (int c = 0; c < MAX_SLAB_CLASSES; c++) {
#define SUM_SLAB_FIELD(name) out->slab[c].name += STATS_GET(&ts->slab[c], name);
            SLAB_STATS_FIELDS(SUM_SLAB_FIELD)
        }
    }
}

/* Sum over slab classes of one per-class counter. */
static void stats_slab_totals(const struct thread_stats *ts, struct slab_stats *tot)
{
    memset(tot, 0, sizeof(*tot));
    for (int c = 0; c < MAX_SLAB_CLASSES; c++) {
#define SUM_TOTAL(name) tot->name += ts->slab[c].name;
        SLAB_STATS_FIELDS(SUM_TOTAL)
    }
}

void stats_reset(void)
{
    for (int i = 0; i < worker_count(); i++) {
        struct thread_stats *ts = &worker_get(i)->stats;
#define ZERO_FIELD(name) __atomic_store_n(&ts->name, 0, __ATOMIC_RELAXED);
        THREAD_STATS_FIELDS(ZERO_FIELD)
        for (int c = 0; c < MAX_SLAB_CLASSES; c++) {
#define ZERO_SLAB_FIELD(name) __atomic_store_n(&ts->slab[c].name, 0, __ATOMIC_RELAXED);
            SLAB_STATS_FIELDS(ZERO_SLAB_FIELD)
        }
    }
#define ZERO_GLOBAL(name) __atomic_store_n(&gstats.name, 0, __ATOMIC_RELAXED);
    GLOBAL_COUNTER_FIELDS(ZERO_GLOBAL)
    items_stats_reset();
    tac_stats_reset();
}

/* ---- `stats` ------------------------------------------------------------ */

static void stats_general(struct stat_sink *s)
{
    struct thread_stats ts;
    struct slab_stats tot;
    struct rusage usage;
    stats_aggregate(&ts);
    stats_slab_totals(&ts, &tot);
    getrusage(RUSAGE_SELF, &usage);
    rel_time_t now = mc_now();

    stat_printf(s, "pid", "%ld", (long)getpid());
    stat_printf(s, "uptime", "%u", now);
    stat_printf(s, "time", "%ld", (long)(process_started + now));
    stat_printf(s, "version", "%s", SERVER_VERSION);
    stat_printf(s, "libevent", "%s", event_get_version());
    stat_printf(s, "pointer_size", "%d", (int)(8 * sizeof(void *)));
    stat_printf(s, "rusage_user", "%ld.%06ld", (long)usage.ru_utime.tv_sec,
                (long)usage.ru_utime.tv_usec);
    stat_printf(s, "rusage_system", "%ld.%06ld", (long)usage.ru_stime.tv_sec,
                (long)usage.ru_stime.tv_usec);
    stat_printf(s, "max_connections", "%d", settings.maxconns);
    stat_printf(s, "curr_connections", "%llu",
                (unsigned long long)STATS_GET(&gstats, curr_connections));
    stat_printf(s, "total_connections", "%llu",
                (unsigned long long)STATS_GET(&gstats, total_connections));
    stat_printf(s, "rejected_connections", "%llu",
                (unsigned long long)STATS_GET(&gstats, rejected_connections));
    stat_printf(s, "connection_structures", "%llu",
                (unsigned long long)STATS_GET(&gstats, connection_structures));
    stat_printf(s, "cmd_get", "%llu", (unsigned long long)ts.get_cmds);
    stat_printf(s, "cmd_set", "%llu", (unsigned long long)tot.set_cmds);
    stat_printf(s, "cmd_flush", "%llu", (unsigned long long)ts.flush_cmds);
    stat_printf(s, "cmd_touch", "%llu", (unsigned long long)ts.touch_cmds);
    stat_printf(s, "cmd_meta", "%llu", (unsigned long long)ts.meta_cmds);
    stat_printf(s, "get_hits", "%llu", (unsigned long long)tot.get_hits);
    tac_stats_general(s);
    stat_printf(s, "get_misses", "%llu", (unsigned long long)ts.get_misses);
    stat_printf(s, "get_expired", "%llu", (unsigned long long)ts.get_expired);
    stat_printf(s, "get_flushed", "%llu", (unsigned long long)ts.get_flushed);
    stat_printf(s, "delete_misses", "%llu", (unsigned long long)ts.delete_misses);
    stat_printf(s, "delete_hits", "%llu", (unsigned long long)tot.delete_hits);
    stat_printf(s, "incr_misses", "%llu", (unsigned long long)ts.incr_misses);
    stat_printf(s, "incr_hits", "%llu", (unsigned long long)tot.incr_hits);
    stat_printf(s, "decr_misses", "%llu", (unsigned long long)ts.decr_misses);
    stat_printf(s, "decr_hits", "%llu", (unsigned long long)tot.decr_hits);
    stat_printf(s, "cas_misses", "%llu", (unsigned long long)ts.cas_misses);
    stat_printf(s, "cas_hits", "%llu", (unsigned long long)tot.cas_hits);
    stat_printf(s, "cas_badval", "%llu", (unsigned long long)tot.cas_badval);
    stat_printf(s, "touch_hits", "%llu", (unsigned long long)tot.touch_hits);
    stat_printf(s, "touch_misses", "%llu", (unsigned long long)ts.touch_misses);
    stat_printf(s, "store_too_large", "%llu", (unsigned long long)ts.store_too_large);
    stat_printf(s, "store_no_memory", "%llu", (unsigned long long)ts.store_no_memory);
    stat_printf(s, "bytes_read", "%llu", (unsigned long long)ts.bytes_read);
    stat_printf(s, "bytes_written", "%llu", (unsigned long long)ts.bytes_written);
    stat_printf(s, "limit_maxbytes", "%zu", settings.maxbytes);
    stat_printf(s, "accepting_conns", "%llu",
                (unsigned long long)STATS_GET(&gstats, accepting_conns));
    stat_printf(s, "listen_disabled_num", "%llu",
                (unsigned long long)STATS_GET(&gstats, listen_disabled_num));
    stat_printf(s, "time_in_listen_disabled_us", "%llu",
                (unsigned long long)STATS_GET(&gstats, time_in_listen_disabled_us));
    stat_printf(s, "threads", "%d", settings.num_threads);
    stat_printf(s, "conn_yields", "%llu", (unsigned long long)ts.conn_yields);
    assoc_stats(s);
    stat_printf(s, "malloc_fails", "0");
    stat_printf(s, "partitions", "%d", settings.partitions);
    stat_printf(s, "total_malloced", "%zu", slabs_mem_malloced());
#define PRINT_GLOBAL(name) \
    stat_printf(s, #name, "%llu", (unsigned long long)STATS_GET(&gstats, name));
    PRINT_GLOBAL(bytes)
    PRINT_GLOBAL(curr_items)
    PRINT_GLOBAL(total_items)
    PRINT_GLOBAL(expired_unfetched)
    PRINT_GLOBAL(evicted_unfetched)
    PRINT_GLOBAL(evicted_active)
    PRINT_GLOBAL(evictions)
    PRINT_GLOBAL(reclaimed)
    PRINT_GLOBAL(crawler_reclaimed)
    PRINT_GLOBAL(crawler_items_checked)
    PRINT_GLOBAL(lrutail_reflocked)
    PRINT_GLOBAL(lru_bumps_queued)
    PRINT_GLOBAL(lru_bumps_dropped)
    PRINT_GLOBAL(lru_bumps)
    PRINT_GLOBAL(lru_second_chances)
    PRINT_GLOBAL(outofmemory)
    PRINT_GLOBAL(store_waits)
    PRINT_GLOBAL(stores_waiting)
    PRINT_GLOBAL(store_waits_done)
    PRINT_GLOBAL(store_wait_timeouts)
    PRINT_GLOBAL(conn_mem_bytes)
    PRINT_GLOBAL(conn_mem_closed)
    slabs_mover_stats(s);
}

/* Wire name of a per-class counter (memcached calls set_cmds cmd_set). */
static const char *slab_field_name(const char *field)
{
    return strcmp(field, "set_cmds") == 0 ? "cmd_set" : field;
}

/* `stats slabs`: per class the allocator's view and the command counters of
 * items in that class, then the totals, in memcached's order. */
static void stats_slabs(struct stat_sink *s)
{
    struct thread_stats ts;
    char key[64];
    unsigned int active = 0;
    stats_aggregate(&ts);
    for (unsigned int c = 1; c <= slabs_nclasses() && c < MAX_SLAB_CLASSES; c++) {
        struct slabs_class_info info;
        slabs_class_info(c, &info);
        if (info.total_pages == 0)
            continue;
        active++;
#define PRINT_INFO(name, fmt, val) \
        snprintf(key, sizeof(key), "%u:%s", c, name); \
        stat_printf(s, key, fmt, val);
        PRINT_INFO("chunk_size", "%zu", info.chunk_size)
        PRINT_INFO("chunks_per_page", "%u", info.chunks_per_page)
        PRINT_INFO("total_pages", "%llu", (unsigned long long)info.total_pages)
        PRINT_INFO("total_chunks", "%llu", (unsigned long long)info.total_chunks)
        PRINT_INFO("used_chunks", "%llu", (unsigned long long)info.used_chunks)
        PRINT_INFO("free_chunks", "%llu", (unsigned long long)info.free_chunks)
        PRINT_INFO("free_chunks_end", "%llu", (unsigned long long)info.free_chunks_end)
        const struct slab_stats *ss = &ts.slab[c];
#define PRINT_SLAB_FIELD(name) \
        PRINT_INFO(slab_field_name(#name), "%llu", (unsigned long long)ss->name)
        SLAB_STATS_FIELDS(PRINT_SLAB_FIELD)
    }
    stat_printf(s, "active_slabs", "%u", active);
    stat_printf(s, "total_malloced", "%zu", slabs_mem_malloced());
}

/* `stats tiers`: one group of lines per storage tier.  Only DRAM exists
 * until the NVM and SSD tiers are configured. */
static void stats_tiers(struct stat_sink *s)
{
    struct thread_stats ts;
    struct slab_stats tot;
    stats_aggregate(&ts);
    stats_slab_totals(&ts, &tot);
    unsigned long long lower = tac_lower_hits();
    stat_printf(s, "tiers", "%s", tac_tiers_name());
    stat_printf(s, "dram_capacity", "%zu", settings.maxbytes);
    stat_printf(s, "dram_malloced", "%zu", slabs_mem_malloced());
    stat_printf(s, "dram_bytes", "%llu",
                (unsigned long long)STATS_GET(&gstats, bytes));
    unsigned long long items = STATS_GET(&gstats, curr_items);
    unsigned long long metas = tac_meta_tuples();
    stat_printf(s, "dram_items", "%llu", items > metas ? items - metas : 0);
    stat_printf(s, "get_hits_dram", "%llu",
                tot.get_hits > lower ? (unsigned long long)tot.get_hits - lower : 0);
    stat_printf(s, "evictions", "%llu",
                (unsigned long long)STATS_GET(&gstats, evictions));
    stat_printf(s, "thr_hot", "%u", llru_thr_hot());
    stat_printf(s, "thr_warm", "%u", llru_thr_warm());
    tac_stats_tiers(s);
}

bool stats_run(const char *sub, struct stat_sink *sink)
{
    if (!sub || !*sub)
        stats_general(sink);
    else if (strcmp(sub, "settings") == 0) {
        settings_stats(sink);
        tac_stats_settings(sink);
    }
    else if (strcmp(sub, "items") == 0)
        items_stats(sink);
    else if (strcmp(sub, "slabs") == 0)
        stats_slabs(sink);
    else if (strcmp(sub, "sizes") == 0)
        items_stats_sizes(sink);
    else if (strcmp(sub, "conns") == 0)
        conn_stats(sink);
    else if (strcmp(sub, "tiers") == 0)
        stats_tiers(sink);
    else if (strcmp(sub, "nvm") == 0)
        tac_stats_nvm(sink);
    else if (strcmp(sub, "temperature") == 0)
        llru_stats_temperature(sink);
    else
        return false;
    return true;
}

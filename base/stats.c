/*
 * stats.c - counters, the table of plain `stats`, and the registry that
 * runs every other `stats` sub-command.
 *
 * Design.  Counters are declared once in the X-macro lists of stats.h;
 * this file walks those lists to aggregate and reset them.  Each line of
 * plain `stats` is one row of general_stats[] below: name, type, how the
 * value is read, and its meaning, which doc/stats.md repeats word for word
 * (tests/integration/test_stats.py compares them).  `stats` walks the
 * table in order.  Values held by modules above this file (the slab
 * allocator, the hash table, the tiers) are MODULE rows: the module hands
 * in a reader at init with stats_provide().  The other sub-commands
 * (settings, items, slabs, tiers...) belong to their modules, which
 * register them with stats_register_section(); so this file includes no
 * module header and calls no module except through registered pointers.
 * Output goes to a struct stat_sink, so the text and binary protocols share
 * the same names and values.
 *
 * Threads.  Any worker may run `stats`; it reads other workers' counters
 * with relaxed atomic loads.  `stats reset` stores zeros the same way; a
 * count racing with a reset may survive it, as in memcached.  The registry
 * is written at start-up, before the workers run, and only read after.
 */
#include "config.h"

#include <event2/event.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <unistd.h>

#include "base/stats.h"

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

/* ---- Workers' counters -------------------------------------------------- */

static struct thread_stats **workers;
static int nworkers, workers_cap;

void stats_add_worker(struct thread_stats *ts)
{
    for (int i = 0; i < nworkers; i++)
        if (workers[i] == ts)
            return;
    if (nworkers == workers_cap) {
        int cap = workers_cap ? 2 * workers_cap : 16;
        struct thread_stats **grown = realloc(workers, cap * sizeof(*grown));
        if (grown == NULL) {
            fprintf(stderr, "out of memory registering worker stats\n");
            exit(EXIT_FAILURE);
        }
        workers = grown;
        workers_cap = cap;
    }
    workers[nworkers++] = ts;
}

void stats_aggregate(struct thread_stats *out, struct slab_stats *totals)
{
    memset(out, 0, sizeof(*out));
    for (int i = 0; i < nworkers; i++) {
        struct thread_stats *ts = workers[i];
#define SUM_FIELD(name) out->name += STATS_GET(ts, name);
        THREAD_STATS_FIELDS(SUM_FIELD)
#undef SUM_FIELD
        for (int c = 0; c < MAX_SLAB_CLASSES; c++) {
#define SUM_SLAB_FIELD(name) out->slab[c].name += STATS_GET(&ts->slab[c], name);
            SLAB_STATS_FIELDS(SUM_SLAB_FIELD)
#undef SUM_SLAB_FIELD
        }
    }
    if (totals == NULL)
        return;
    memset(totals, 0, sizeof(*totals));
    for (int c = 0; c < MAX_SLAB_CLASSES; c++) {
#define SUM_TOTAL(name) totals->name += out->slab[c].name;
        SLAB_STATS_FIELDS(SUM_TOTAL)
#undef SUM_TOTAL
    }
}

/* Wire name of a per-class counter (memcached calls set_cmds cmd_set). */
static const char *slab_field_name(const char *field)
{
    return strcmp(field, "set_cmds") == 0 ? "cmd_set" : field;
}

void stats_slab_class(struct stat_sink *sink, unsigned int clsid,
                      const struct slab_stats *ss)
{
    char key[64];
#define PRINT_SLAB_FIELD(name) \
    snprintf(key, sizeof(key), "%u:%s", clsid, slab_field_name(#name)); \
    stat_printf(sink, key, "%llu", (unsigned long long)ss->name);
    SLAB_STATS_FIELDS(PRINT_SLAB_FIELD)
#undef PRINT_SLAB_FIELD
}

/* ---- Registry ----------------------------------------------------------- */

/* Fixed sizes: the server registers about a dozen of each; running out is
 * a programming error, reported at start-up. */
#define MAX_SECTIONS 32
#define MAX_RESETS 8

static struct {
    const char *sub;
    stats_section_fn fn;
} sections[MAX_SECTIONS];
static int nsections;

static void (*resets[MAX_RESETS])(void);
static int nresets;

void stats_register_section(const char *sub, stats_section_fn fn)
{
    for (int i = 0; i < nsections; i++)
        if (sections[i].fn == fn && strcmp(sections[i].sub, sub) == 0)
            return;
    if (nsections == MAX_SECTIONS) {
        fprintf(stderr, "stats: too many sections (registering %s)\n", sub);
        abort();
    }
    sections[nsections].sub = sub;
    sections[nsections].fn = fn;
    nsections++;
}

void stats_register_reset(void (*fn)(void))
{
    for (int i = 0; i < nresets; i++)
        if (resets[i] == fn)
            return;
    if (nresets == MAX_RESETS) {
        fprintf(stderr, "stats: too many reset hooks\n");
        abort();
    }
    resets[nresets++] = fn;
}

void stats_reset(void)
{
    for (int i = 0; i < nworkers; i++) {
        struct thread_stats *ts = workers[i];
#define ZERO_FIELD(name) __atomic_store_n(&ts->name, 0, __ATOMIC_RELAXED);
        THREAD_STATS_FIELDS(ZERO_FIELD)
#undef ZERO_FIELD
        for (int c = 0; c < MAX_SLAB_CLASSES; c++) {
#define ZERO_SLAB_FIELD(name) __atomic_store_n(&ts->slab[c].name, 0, __ATOMIC_RELAXED);
            SLAB_STATS_FIELDS(ZERO_SLAB_FIELD)
#undef ZERO_SLAB_FIELD
        }
    }
#define ZERO_GLOBAL(name) __atomic_store_n(&gstats.name, 0, __ATOMIC_RELAXED);
    GLOBAL_COUNTER_FIELDS(ZERO_GLOBAL)
#undef ZERO_GLOBAL
    for (int i = 0; i < nresets; i++)
        resets[i]();
}

/* ---- The general stats table -------------------------------------------- */

/*
 * Types, as doc/stats.md's kind column names them:
 *   counter   grows from 0 at start; `stats reset` sets it back to 0
 *             unless its meaning says otherwise
 *   gauge     the current state; not reset
 *   constant  fixed while the server runs
 *   string    text, fixed while the server runs
 */
enum stat_type {
    STAT_COUNTER = STAT_KIND_COUNTER,
    STAT_GAUGE = STAT_KIND_GAUGE,
    STAT_CONST = STAT_KIND_CONST,
    STAT_STRING = STAT_KIND_STRING,
};

enum stat_src {
    SRC_GSTATS,     /* a uint64_t field of gstats */
    SRC_WORKERS,    /* a thread_stats field summed over the workers */
    SRC_CLASSES,    /* a slab_stats field summed over workers and classes */
    SRC_LOCAL,      /* formatted here: process facts and settings */
    SRC_MODULE,     /* a module's value, handed in with stats_provide() */
};

/* One walk's view of the counters, taken once so that every line of one
 * `stats` answer comes from the same sums. */
struct general_snap {
    struct thread_stats ts;
    struct slab_stats tot;
    struct rusage usage;
    rel_time_t now;
};

typedef void (*stat_local_fn)(const struct general_snap *g, char *val,
                              size_t len);

struct stat_row {
    const char *name;
    enum stat_type type;
    enum stat_src src;
    size_t off;             /* SRC_GSTATS, SRC_WORKERS, SRC_CLASSES */
    stat_local_fn local;    /* SRC_LOCAL */
    const char *doc;        /* doc/stats.md's meaning, word for word */
    bool (*shown)(void);    /* NULL, or false when memcached leaves it out */
};

/* Lines memcached prints only under some flags: the same flags here. */
static bool shown_idle_timeout(void)
{
    return settings.idle_timeout > 0;
}

static bool shown_slab_reassign(void)
{
    return settings.slab_reassign;
}

static bool shown_ssd_tier(void)
{
    return settings.ssd_path != NULL;
}

static bool shown_lru_crawler(void)
{
    return __atomic_load_n(&settings.lru_crawler, __ATOMIC_RELAXED);
}

static bool shown_lru_maintainer(void)
{
    /* memcached's no_modern stops its LRU maintainer too */
    return !settings_given("no_lru_maintainer") &&
           (settings_ignored_arg("no_modern") == NULL ||
            settings_given("lru_maintainer"));
}

static void local_pid(const struct general_snap *g, char *val, size_t len)
{
    (void)g;
    snprintf(val, len, "%ld", (long)getpid());
}

static void local_uptime(const struct general_snap *g, char *val, size_t len)
{
    snprintf(val, len, "%u", g->now);
}

static void local_time(const struct general_snap *g, char *val, size_t len)
{
    snprintf(val, len, "%ld", (long)(process_started + g->now));
}

static void local_version(const struct general_snap *g, char *val, size_t len)
{
    (void)g;
    snprintf(val, len, "%s", SERVER_VERSION);
}

static void local_libevent(const struct general_snap *g, char *val, size_t len)
{
    (void)g;
    snprintf(val, len, "%s", event_get_version());
}

static void local_pointer_size(const struct general_snap *g, char *val,
                               size_t len)
{
    (void)g;
    snprintf(val, len, "%d", (int)(8 * sizeof(void *)));
}

static void local_rusage_user(const struct general_snap *g, char *val,
                              size_t len)
{
    snprintf(val, len, "%ld.%06ld", (long)g->usage.ru_utime.tv_sec,
             (long)g->usage.ru_utime.tv_usec);
}

static void local_rusage_system(const struct general_snap *g, char *val,
                                size_t len)
{
    snprintf(val, len, "%ld.%06ld", (long)g->usage.ru_stime.tv_sec,
             (long)g->usage.ru_stime.tv_usec);
}

static void local_maxconns(const struct general_snap *g, char *val, size_t len)
{
    (void)g;
    snprintf(val, len, "%d", settings.maxconns);
}

static void local_maxbytes(const struct general_snap *g, char *val, size_t len)
{
    (void)g;
    snprintf(val, len, "%zu", __atomic_load_n(&settings.maxbytes, __ATOMIC_RELAXED));
}

static void local_threads(const struct general_snap *g, char *val, size_t len)
{
    (void)g;
    snprintf(val, len, "%d", settings.num_threads);
}

static void local_zero(const struct general_snap *g, char *val, size_t len)
{
    (void)g;
    snprintf(val, len, "0");
}

static void local_partitions(const struct general_snap *g, char *val,
                             size_t len)
{
    (void)g;
    snprintf(val, len, "%d", settings.partitions);
}

#define GSTATS(f)  .src = SRC_GSTATS, .off = offsetof(struct global_stats, f)
#define WORKERS(f) .src = SRC_WORKERS, .off = offsetof(struct thread_stats, f)
#define CLASSES(f) .src = SRC_CLASSES, .off = offsetof(struct slab_stats, f)
#define LOCAL(fn)  .src = SRC_LOCAL, .local = fn
#define MODULE     .src = SRC_MODULE
/* IF(shown_x, read): the line is printed only while shown_x() is true. */
#define IF(fn, read) read, .shown = fn
#define ROW(n, t, read, d) { .name = n, .type = STAT_##t, read, .doc = d }

/*
 * Plain `stats`, in output order: memcached's names in memcached's order,
 * tac-memcached's own beside their relatives.  A new line is one row here
 * and one row in doc/stats.md.
 */
static const struct stat_row general_stats[] = {
    ROW("pid", CONST, LOCAL(local_pid), "process id"),
    ROW("uptime", GAUGE, LOCAL(local_uptime), "seconds since start"),
    ROW("time", GAUGE, LOCAL(local_time),
        "current unix time, as the server clock sees it"),
    ROW("version", STRING, LOCAL(local_version), "server version"),
    ROW("libevent", STRING, LOCAL(local_libevent), "libevent version"),
    ROW("pointer_size", CONST, LOCAL(local_pointer_size),
        "bits in a pointer (64)"),
    ROW("rusage_user", COUNTER, LOCAL(local_rusage_user),
        "user CPU seconds of the process; not cleared by `stats reset`"),
    ROW("rusage_system", COUNTER, LOCAL(local_rusage_system),
        "system CPU seconds of the process; not cleared by `stats reset`"),
    ROW("max_connections", CONST, LOCAL(local_maxconns), "`-c`"),
    ROW("curr_connections", GAUGE, GSTATS(curr_connections),
        "open client connections"),
    ROW("total_connections", COUNTER, GSTATS(total_connections),
        "connections accepted"),
    ROW("rejected_connections", COUNTER, GSTATS(rejected_connections),
        "connections refused because `-c` was reached (connections still "
        "being handed to a worker count)"),
    ROW("connection_structures", GAUGE, GSTATS(connection_structures),
        "connection objects allocated (clients + UDP)"),
    ROW("response_obj_oom", COUNTER, GSTATS(response_obj_oom),
        "responses that could not be queued for lack of memory"),
    ROW("response_obj_count", GAUGE, GSTATS(response_objs),
        "response objects allocated: queued on connections or kept for reuse "
        "by the workers"),
    ROW("response_obj_bytes", GAUGE, MODULE, "bytes of those objects"),
    ROW("read_buf_count", GAUGE, GSTATS(connection_structures),
        "connection read buffers (one per connection object)"),
    ROW("read_buf_bytes", GAUGE, GSTATS(read_buf_bytes),
        "bytes of those buffers (16 KB each, 64 KB for UDP, more while a "
        "long request is read)"),
    ROW("read_buf_bytes_free", CONST, LOCAL(local_zero),
        "always 0: every connection owns its read buffer; none is pooled"),
    ROW("read_buf_oom", COUNTER, GSTATS(read_buf_oom),
        "read buffers that could not be allocated or grown (the connection "
        "is closed)"),
    ROW("reserved_fds", CONST, MODULE,
        "file descriptors kept back from `-c` for listeners, tier files and "
        "the workers"),
    ROW("cmd_get", COUNTER, WORKERS(get_cmds),
        "keys requested by get/gets/gat/gats/mg and binary gets"),
    ROW("cmd_set", COUNTER, CLASSES(set_cmds),
        "storage commands (set/add/replace/append/prepend/cas/ms)"),
    ROW("cmd_flush", COUNTER, WORKERS(flush_cmds), "flush_all commands"),
    ROW("cmd_touch", COUNTER, WORKERS(touch_cmds),
        "touch/gat/gats and binary touch/gat"),
    ROW("cmd_meta", COUNTER, WORKERS(meta_cmds), "meta commands"),
    ROW("get_hits", COUNTER, CLASSES(get_hits),
        "keys found, in any tier"),
    ROW("extstore_pages_used", GAUGE, MODULE,
        "SSD pages holding data: memcached's extstore name for `ssd_pages_used` (only with an SSD tier)"),
    ROW("extstore_pages_free", GAUGE, MODULE,
        "free SSD pages (`ssd_pages_free`) (only with an SSD tier)"),
    ROW("extstore_page_reclaims", COUNTER, MODULE,
        "SSD pages emptied and freed (`ssd_pages_reclaimed`) (only with an SSD tier); not cleared by `stats reset`"),
    ROW("extstore_objects_used", GAUGE, MODULE,
        "items whose value is on SSD (`ssd_items`) (only with an SSD tier)"),
    ROW("extstore_objects_read", COUNTER, MODULE,
        "values read from SSD (`ssd_reads`) (only with an SSD tier); not cleared by `stats reset`"),
    ROW("extstore_bytes_used", GAUGE, MODULE,
        "bytes of live values in SSD pages (`ssd_live_bytes`) (only with an SSD tier)"),
    ROW("extstore_bytes_written", COUNTER, MODULE,
        "bytes written to SSD (`ssd_bytes_written`) (only with an SSD tier); not cleared by `stats reset`"),
    ROW("extstore_bytes_read", COUNTER, MODULE,
        "bytes read from SSD (`ssd_bytes_read`) (only with an SSD tier); not cleared by `stats reset`"),
    ROW("extstore_bytes_fragmented", GAUGE, MODULE,
        "bytes of SSD pages in use that no live value holds (only with an SSD tier)"),
    ROW("extstore_limit_maxbytes", CONST, MODULE,
        "the SSD tier's size in bytes (only with an SSD tier)"),
    ROW("extstore_io_queue", GAUGE, MODULE,
        "SSD reads and writes in flight (only with an SSD tier)"),
    ROW("get_extstore", COUNTER, MODULE,
        "gets answered from the SSD tier (`get_hits_ssd`) (only with an SSD tier)"),
    ROW("get_aborted_extstore", COUNTER,
        IF(shown_ssd_tier, WORKERS(get_aborted_extstore)),
        "SSD reads whose request gave them up before they completed (a "
        "later key of the get was refused, or its reply ran out of memory): "
        "the value read is dropped (only with an SSD tier)"),
    ROW("get_oom_extstore", COUNTER, MODULE,
        "SSD reads not started for want of DRAM to hold the value "
        "(`ssd_reads_nomem`) (only with an SSD tier)"),
    ROW("recache_from_extstore", COUNTER, MODULE,
        "SSD items moved up to DRAM or NVM (`fetch_ssd_to_dram` + "
        "`fetch_ssd_to_nvm`) (only with an SSD tier)"),
    ROW("miss_from_extstore", COUNTER, MODULE,
        "gets that missed because the SSD had dropped the value: a key it "
        "dropped for room asked for again (`ssd_dropped_misses`), or a read "
        "whose tuple was gone by the time it ran (`ssd_read_misses`) (only "
        "with an SSD tier)"),
    ROW("badcrc_from_extstore", COUNTER, MODULE,
        "damaged tuples found on read (`tuple_checksum_failures`: NVM and SSD "
        "together) (only with an SSD tier)"),
    ROW("extstore_compact_lost", CONST, MODULE,
        "always 0: defrag moves every live tuple it keeps or, on a full SSD, "
        "drops whole pages (`extstore_page_evictions`) or unread items "
        "(`extstore_compact_skipped`) (only with an SSD tier)"),
    ROW("extstore_compact_rescues", COUNTER, MODULE,
        "tuples defrag re-packed (`ssd_defrag_moved`) (only with an SSD tier)"),
    ROW("extstore_compact_skipped", COUNTER, MODULE,
        "items a full SSD dropped from its oldest page with `ext_drop_unread` "
        "because they were not read again after their first read, while "
        "those that were moved on (`ssd_defrag_skipped`) (only with an SSD "
        "tier)"),
    ROW("extstore_page_allocs", COUNTER, MODULE,
        "SSD pages taken off the free list (`ssd_page_allocs`) (only with an "
        "SSD tier); not cleared by `stats reset`"),
    ROW("extstore_page_evictions", COUNTER, MODULE,
        "SSD pages whose items were dropped because the SSD was full or DRAM "
        "could index no more items (`ssd_pages_dropped`) (only with an SSD tier)"),
    ROW("extstore_objects_evicted", COUNTER, MODULE,
        "items dropped from the SSD (`ssd_items_dropped`) (only with an SSD tier)"),
    ROW("extstore_bytes_evicted", COUNTER, MODULE,
        "bytes of those items' tuples (`ssd_bytes_dropped`) (only with an SSD tier)"),
    ROW("extstore_objects_written", COUNTER, MODULE,
        "tuples written to SSD: moves down, sets that fell back to SSD, "
        "defrag (`ssd_tuples_written`) (only with an SSD tier)"),
    ROW("get_misses", COUNTER, WORKERS(get_misses), "keys not found"),
    ROW("get_expired", COUNTER, WORKERS(get_expired),
        "misses because the item had expired"),
    ROW("get_flushed", COUNTER, WORKERS(get_flushed),
        "misses because the item was invalidated by flush_all"),
    ROW("delete_misses", COUNTER, WORKERS(delete_misses),
        "deletes of a key not found"),
    ROW("delete_hits", COUNTER, CLASSES(delete_hits), "keys deleted"),
    ROW("incr_misses", COUNTER, WORKERS(incr_misses),
        "incr of a key not found"),
    ROW("incr_hits", COUNTER, CLASSES(incr_hits), "keys incremented"),
    ROW("decr_misses", COUNTER, WORKERS(decr_misses),
        "decr of a key not found"),
    ROW("decr_hits", COUNTER, CLASSES(decr_hits), "keys decremented"),
    ROW("cas_misses", COUNTER, WORKERS(cas_misses),
        "cas of a key not found"),
    ROW("cas_hits", COUNTER, CLASSES(cas_hits), "cas stored"),
    ROW("cas_badval", COUNTER, CLASSES(cas_badval),
        "cas refused because the CAS value did not match"),
    ROW("touch_hits", COUNTER, CLASSES(touch_hits), "keys touched"),
    ROW("touch_misses", COUNTER, WORKERS(touch_misses),
        "touches of a key not found"),
    ROW("store_too_large", COUNTER, WORKERS(store_too_large),
        "storage commands refused because the item exceeds `-I`"),
    ROW("store_no_memory", COUNTER, WORKERS(store_no_memory),
        "storage commands refused for lack of memory: every tier full for "
        "good (with `-M`: DRAM and NVM full and the SSD full or unwritable), "
        "`store_wait_ms` 0, or a UDP store; a store that waited in vain "
        "counts in `store_wait_timeouts` instead"),
    ROW("ssl_handshake_errors", COUNTER, MODULE,
        "TLS handshakes that failed (a bad or missing client certificate, a "
        "plain-text client, a version or cipher refused) (only with -Z); not "
        "cleared by `stats reset`"),
    ROW("ssl_new_sessions", COUNTER, MODULE,
        "TLS handshakes completed (only with -Z); not cleared by `stats reset`"),
    ROW("time_since_server_cert_refresh", GAUGE, MODULE,
        "seconds since the certificate was loaded or `refresh_certs` (only "
        "with -Z)"),
    ROW("auth_cmds", COUNTER, GSTATS(auth_cmds),
        "authentication attempts: `-Y`'s first `set`, `-S`'s SASL_AUTH and "
        "SASL_STEP"),
    ROW("auth_errors", COUNTER, GSTATS(auth_errors),
        "refused authentications, and commands refused before one"),
    ROW("idle_kicks", COUNTER, IF(shown_idle_timeout, GSTATS(idle_kicks)),
        "connections closed for being idle past `-o idle_timeout` (only "
        "with -o idle_timeout)"),
    ROW("bytes_read", COUNTER, WORKERS(bytes_read),
        "bytes read from the network"),
    ROW("bytes_written", COUNTER, WORKERS(bytes_written),
        "bytes written to the network"),
    ROW("limit_maxbytes", CONST, LOCAL(local_maxbytes), "`-m` in bytes"),
    ROW("accepting_conns", GAUGE, GSTATS(accepting_conns),
        "1 while the listener accepts, 0 while accepting is paused for lack "
        "of file descriptors"),
    ROW("listen_disabled_num", COUNTER, GSTATS(listen_disabled_num),
        "times accepting paused because accept failed for lack of file "
        "descriptors (it resumes when a connection closes, or within 0.1 s)"),
    ROW("time_in_listen_disabled_us", COUNTER,
        GSTATS(time_in_listen_disabled_us),
        "microseconds from running out of file descriptors to accepting "
        "with descriptors to spare, summed once each such shortage ends"),
    ROW("threads", CONST, LOCAL(local_threads), "`-t`"),
    ROW("conn_yields", COUNTER, WORKERS(conn_yields),
        "times a connection gave up its turn after `-R` requests"),
    ROW("hash_power_level", GAUGE, MODULE,
        "log2 of the hash table size"),
    ROW("hash_bytes", GAUGE, GSTATS(hash_bytes),
        "bytes used by the hash table"),
    ROW("hash_is_expanding", GAUGE, MODULE,
        "1 while an incremental resize runs"),
    ROW("slab_reassign_rescues", COUNTER, IF(shown_slab_reassign, MODULE),
        "items of pages being emptied that moved down a tier rather than "
        "being evicted; not cleared by `stats reset`"),
    ROW("slab_reassign_chunk_rescues", CONST, IF(shown_slab_reassign, LOCAL(local_zero)),
        "always 0: no item is split into chunks here"),
    ROW("slab_reassign_evictions_nomem", COUNTER, IF(shown_slab_reassign, MODULE),
        "live items of pages being emptied that were evicted (no lower tier); "
        "not cleared by `stats reset`"),
    ROW("slab_reassign_inline_reclaim", COUNTER, IF(shown_slab_reassign, MODULE),
        "expired or flushed items of pages being emptied, freed in place; "
        "not cleared by `stats reset`"),
    ROW("slab_reassign_busy_deletes", CONST, IF(shown_slab_reassign, LOCAL(local_zero)),
        "always 0: a busy item is retried (`slab_reassign_busy_items`), "
        "never deleted"),
    ROW("lru_crawler_running", GAUGE, IF(shown_lru_crawler, MODULE),
        "1 while an expiry crawl pass runs"),
    ROW("lru_crawler_starts", COUNTER, IF(shown_lru_crawler, GSTATS(lru_crawler_starts)),
        "expiry crawl passes started (by the timer or `lru_crawler crawl`)"),
    ROW("lru_maintainer_juggles", COUNTER, IF(shown_lru_maintainer, MODULE),
        "rounds of the LRU thread (Lazy LRU); not cleared by `stats reset`"),
    ROW("malloc_fails", CONST, LOCAL(local_zero),
        "always 0: memory is taken as slab pages, whose failures count in "
        "`outofmemory`"),
    ROW("log_worker_dropped", CONST, LOCAL(local_zero),
        "always 0: `watch` lines go to one ring that overwrites its oldest; "
        "what a watcher loses counts in `log_watcher_skipped`"),
    ROW("log_worker_written", COUNTER, MODULE,
        "`watch` lines written (only while someone watches); not cleared "
        "by `stats reset`"),
    ROW("log_watcher_skipped", COUNTER, MODULE,
        "`watch` lines a slow watcher lost (`skipped=`); not cleared by "
        "`stats reset`"),
    ROW("log_watcher_sent", COUNTER, MODULE,
        "`watch` lines handed to watchers; not cleared by `stats reset`"),
    ROW("log_watchers", GAUGE, MODULE, "connections running `watch`"),
    ROW("unexpected_napi_ids", CONST, LOCAL(local_zero),
        "always 0: connections are not steered by NAPI ID"),
    ROW("round_robin_fallback", CONST, LOCAL(local_zero),
        "always 0: connections are not steered by NAPI ID"),
    ROW("bytes", GAUGE, GSTATS(bytes),
        "bytes used by stored items (headers included)"),
    ROW("curr_items", GAUGE, GSTATS(curr_items),
        "items in the index (DRAM items + meta tuples of lower tiers)"),
    ROW("total_items", COUNTER, GSTATS(total_items), "items ever stored"),
    ROW("expired_unfetched", COUNTER, GSTATS(expired_unfetched),
        "items reclaimed after expiring without a read"),
    ROW("evicted_unfetched", COUNTER, GSTATS(evicted_unfetched),
        "items evicted without ever being read"),
    ROW("evicted_active", COUNTER, IF(shown_lru_maintainer, GSTATS(evicted_active)),
        "evicted items that had been read more than once"),
    ROW("evictions", COUNTER, GSTATS(evictions),
        "items dropped from DRAM or NVM to make room that went to no lower tier "
        "(not with `-M`); items a full SSD drops count in `extstore_objects_evicted`"),
    ROW("reclaimed", COUNTER, GSTATS(reclaimed),
        "expired items whose memory was reused"),
    ROW("crawler_reclaimed", COUNTER, GSTATS(crawler_reclaimed),
        "expired items reclaimed by the background crawler"),
    ROW("crawler_items_checked", COUNTER, GSTATS(crawler_items_checked),
        "items the crawler examined"),
    ROW("lrutail_reflocked", COUNTER, GSTATS(lrutail_reflocked),
        "LRU tail items skipped because a reader held them"),
    ROW("direct_reclaims", COUNTER, IF(shown_lru_maintainer, GSTATS(direct_reclaims)),
        "items a worker took from an LRU tail (expired, or evicted) to store "
        "a new one, for want of a free chunk"),
    ROW("moves_to_cold", COUNTER, IF(shown_lru_maintainer, GSTATS(moves_to_cold)),
        "with -o lru_maintainer (memcached's segmented LRU), items moved from "
        "HOT or WARM to COLD; 0 with the Lazy LRU, which has one queue per class"),
    ROW("moves_to_warm", COUNTER, IF(shown_lru_maintainer, GSTATS(moves_to_warm)),
        "with -o lru_maintainer, items moved to WARM: an item read twice, from "
        "COLD on its read or from HOT's tail; 0 with the Lazy LRU"),
    ROW("moves_within_lru", COUNTER, IF(shown_lru_maintainer, GSTATS(lru_bumps)),
        "items moved to the head of their LRU after a read (`lru_bumps`)"),
    ROW("lru_bumps_dropped", COUNTER, IF(shown_lru_maintainer, GSTATS(lru_bumps_dropped)),
        "such moves dropped because the worker's ring (1024) was full; the "
        "item stays where it is"),
    ROW("slab_reassign_running", GAUGE, IF(shown_slab_reassign, MODULE),
        "1 while the page mover is emptying a page"),
    ROW("slabs_moved", COUNTER, IF(shown_slab_reassign, MODULE),
        "pages moved from one slab class to another or to the pool; not "
        "cleared by `stats reset`"),
    ROW("slab_reassign_busy_items", COUNTER, IF(shown_slab_reassign, MODULE),
        "times an item in a page being emptied was busy and retried; not "
        "cleared by `stats reset`"),
    ROW("slab_global_page_pool", GAUGE, MODULE,
        "free pages in the global pool"),
};

/*
 * `stats tac`, in output order: tac-memcached's own general counters, the
 * ones memcached 1.6.18 does not print in plain `stats` (see doc/stats.md).
 * A new counter of this server's own is one row here and one row in
 * doc/stats.md's `stats tac` table.
 */
static const struct stat_row tac_stats[] = {
    ROW("get_hits_ssd", COUNTER, MODULE,
        "hits served from the SSD tier (only with an SSD tier)"),
    ROW("ssd_meta_tuple_bytes", CONST, MODULE,
        "DRAM bytes an SSD-resident item's meta tuple takes, whatever its "
        "key (56; 64 with tier_key; only with an SSD tier; see `stats tiers`)"),
    ROW("tuple_checksum_failures", COUNTER, MODULE,
        "NVM and SSD tuples found damaged when read back (only with a lower "
        "tier; see `stats tiers`)"),
    ROW("partitions", CONST, LOCAL(local_partitions),
        "LRU/free-list partitions per slab class (`-o partitions`)"),
    ROW("total_malloced", GAUGE, MODULE,
        "bytes of slab pages allocated: handed out under `-m`, and held in the "
        "global pool (`slab_global_page_pool`) unless a lowered `cache_memlimit` "
        "gave their memory back"),
    ROW("recovery_state", STRING, MODULE,
        "restart recovery: off (`-o recovery=off`), none (nothing to bring "
        "back), running, done or failed (see README, Restart)"),
    ROW("recovery_items", GAUGE, MODULE,
        "items the restart brought back so far"),
    ROW("recovery_bytes", GAUGE, MODULE,
        "value bytes of those items"),
    ROW("recovery_dropped", GAUGE, MODULE,
        "saved items or tuples dropped as damaged or unplaceable (no DRAM "
        "for them, a tier that no longer matches)"),
    ROW("recovery_stale", GAUGE, MODULE,
        "recovered copies skipped because their key was written, deleted or "
        "flushed during recovery, or because they expired while the server "
        "was down"),
    ROW("recovery_refused", GAUGE, MODULE,
        "saved records whose checksum held but whose contents did not: a "
        "value that does not end in CRLF, a length past `-I`, unknown "
        "flag bits or a negative time (dropped)"),
    ROW("recovery_seconds", GAUGE, MODULE,
        "seconds the restart's recovery took (so far, while running)"),
    ROW("lru_bumps_queued", COUNTER, GSTATS(lru_bumps_queued),
        "reads that raised an item's temperature class, queued on the "
        "worker's bump ring for its LRU thread (Lazy LRU: workers never take "
        "an LRU lock)"),
    ROW("lru_bumps", COUNTER, GSTATS(lru_bumps),
        "items the LRU thread moved to their LRU head"),
    ROW("lru_second_chances", COUNTER, GSTATS(lru_second_chances),
        "items at an LRU's cold end that were read since they were linked, "
        "moved to the head instead of being evicted or moved down (their "
        "readCount set to 0: one more lap unless read again)"),
    ROW("outofmemory", COUNTER, GSTATS(outofmemory),
        "allocations that failed (with `-M`, or nothing evictable)"),
    ROW("store_waits", COUNTER, GSTATS(store_waits),
        "stores that found no tier with room while a lower tier was making "
        "some (evictors moving items down, defrag compacting or, without "
        "`-M`, dropping the coldest SSD page), and parked on their "
        "connection to wait (`-o store_wait_ms`); the worker serves other "
        "connections meanwhile, and later requests on that connection are "
        "answered after it"),
    ROW("stores_waiting", GAUGE, GSTATS(stores_waiting),
        "stores parked for room now"),
    ROW("store_waits_done", COUNTER, GSTATS(store_waits_done),
        "parked stores that got room and were answered (normally every one "
        "of `store_waits`)"),
    ROW("store_wait_timeouts", COUNTER, GSTATS(store_wait_timeouts),
        "parked stores still without room after `store_wait_ms`, answered "
        "`SERVER_ERROR out of memory`; not in `store_no_memory`; should "
        "stay 0"),
    ROW("conn_mem_bytes", GAUGE, GSTATS(conn_mem_bytes),
        "bytes connections hold beyond their first 16 KB read buffer: read "
        "buffers grown for long request lines, values of stores still being "
        "read, and past 64 KB per connection the responses not yet sent "
        "(the values they pin or copied, their buffers) (bounded by "
        "`-o conn_mem_limit`)"),
    ROW("conn_mem_closed", COUNTER, GSTATS(conn_mem_closed),
        "connections closed because they held the most of `conn_mem_bytes` "
        "(an incomplete request, or responses the client does not read) "
        "while it was past `conn_mem_limit`"),
    ROW("reply_item_copies", COUNTER, GSTATS(reply_item_copies),
        "values sent from a copy because the item already had 61,440 "
        "references held by queued responses and parked reads (a key "
        "repeated in very many gets at once)"),
    ROW("worker_turns", COUNTER, WORKERS(worker_turns),
        "times a worker offered its core to the other threads "
        "(sched_yield) because the server has more workers than cores: "
        "after 0.1 ms of running while SSD reads are in flight, after 0.3 "
        "ms otherwise; 0 with a core per worker"),
    ROW("auth_failure_closes", COUNTER, MODULE,
        "connections closed after their third failed SASL attempt; not "
        "cleared by `stats reset`"),
    ROW("log_watchers_refused", COUNTER, MODULE,
        "`watch` commands refused with `WATCHER_TOO_MANY` because 20 "
        "connections were watching; not cleared by `stats reset`"),
    ROW("metrics_conns", GAUGE, MODULE,
        "open connections to the `-o metrics_port`"),
    ROW("metrics_auth_errors", COUNTER, MODULE,
        "`-o metrics_port` requests answered 401 for want of a user's "
        "authentication (with -Y or -S); not cleared by `stats reset`"),
    ROW("metrics_timeouts", COUNTER, MODULE,
        "`-o metrics_port` connections closed at `-o metrics_timeout` after "
        "they were accepted; not cleared by `stats reset`"),
    ROW("metrics_conns_capped", COUNTER, MODULE,
        "times the `-o metrics_port` stopped accepting at `-o "
        "metrics_max_conns` open connections; not cleared by `stats reset`"),
    ROW("metrics_listen_disabled_num", COUNTER, MODULE,
        "times the `-o metrics_port` stopped accepting for lack of file "
        "descriptors; not cleared by `stats reset`"),
    ROW("slab_reassign_to_pool", COUNTER, MODULE,
        "pages returned to the global pool (reusable by any class); not "
        "cleared by `stats reset`"),
    ROW("slab_reassign_aborted", COUNTER, MODULE,
        "moves given up because items stayed referenced; not cleared by "
        "`stats reset`"),
    ROW("slab_reassign_evicted", COUNTER, MODULE,
        "items taken out of pages being emptied (moved to a lower tier when "
        "one exists, otherwise evicted); not cleared by `stats reset`"),
    ROW("slab_automove_moves", COUNTER, MODULE,
        "moves started by the automove policy; not cleared by `stats "
        "reset`"),
};

#undef GSTATS
#undef WORKERS
#undef CLASSES
#undef LOCAL
#undef MODULE
#undef IF
#undef ROW

#define NGENERAL (sizeof(general_stats) / sizeof(general_stats[0]))
#define NTAC (sizeof(tac_stats) / sizeof(tac_stats[0]))

/* The reader of a MODULE row. */
struct stat_provided {
    uint64_t (*fn)(void);
    const uint64_t *counter;
    const char *(*text)(void);
};

static struct stat_provided general_provided[NGENERAL], tac_provided[NTAC];

static const struct stat_table {
    const struct stat_row *rows;
    size_t n;
    struct stat_provided *provided;
} stat_tables[] = {
    { general_stats, NGENERAL, general_provided },  /* `stats` */
    { tac_stats, NTAC, tac_provided },              /* `stats tac` */
};

static const struct stat_row *find_row(const char *name,
                                       struct stat_provided **prov)
{
    for (size_t t = 0; t < sizeof(stat_tables) / sizeof(stat_tables[0]); t++)
        for (size_t i = 0; i < stat_tables[t].n; i++)
            if (strcmp(stat_tables[t].rows[i].name, name) == 0) {
                if (prov != NULL)
                    *prov = &stat_tables[t].provided[i];
                return &stat_tables[t].rows[i];
            }
    return NULL;
}

static struct stat_provided *module_row(const char *name)
{
    struct stat_provided *p = NULL;
    const struct stat_row *r = find_row(name, &p);
    if (r == NULL || r->src != SRC_MODULE) {
        fprintf(stderr, "stats: %s is not a module's line of `stats`\n", name);
        abort();
    }
    return p;
}

void stats_provide(const char *name, uint64_t (*fn)(void))
{
    *module_row(name) = (struct stat_provided){ .fn = fn };
}

void stats_provide_text(const char *name, const char *(*fn)(void))
{
    *module_row(name) = (struct stat_provided){ .text = fn };
}

void stats_provide_counter(const char *name, const uint64_t *counter)
{
    *module_row(name) = (struct stat_provided){ .counter = counter };
}

int stats_general_kind(const char *name)
{
    const struct stat_row *r = find_row(name, NULL);
    return r != NULL ? (int)r->type : -1;
}

static uint64_t field_at(const void *base, size_t off)
{
    return __atomic_load_n((const uint64_t *)((const char *)base + off),
                           __ATOMIC_RELAXED);
}

static void stats_table(struct stat_sink *s, const struct stat_table *tab)
{
    struct general_snap g;
    stats_aggregate(&g.ts, &g.tot);
    getrusage(RUSAGE_SELF, &g.usage);
    g.now = mc_now();

    for (size_t i = 0; i < tab->n; i++) {
        const struct stat_row *r = &tab->rows[i];
        const struct stat_provided *p = &tab->provided[i];
        uint64_t v;
        if (r->shown != NULL && !r->shown())
            continue;
        switch (r->src) {
        case SRC_GSTATS:
            v = field_at(&gstats, r->off);
            break;
        case SRC_WORKERS:
            v = field_at(&g.ts, r->off);
            break;
        case SRC_CLASSES:
            v = field_at(&g.tot, r->off);
            break;
        case SRC_MODULE:
            if (p->counter != NULL)
                v = __atomic_load_n(p->counter, __ATOMIC_RELAXED);
            else if (p->fn != NULL)
                v = p->fn();
            else if (p->text != NULL) {
                s->emit(s->ctx, r->name, p->text());
                continue;
            } else
                continue;           /* its tier is not configured */
            break;
        case SRC_LOCAL: {
            char val[128];
            r->local(&g, val, sizeof(val));
            s->emit(s->ctx, r->name, val);
            continue;
        }
        default:
            continue;
        }
        stat_printf(s, r->name, "%llu", (unsigned long long)v);
    }
}

bool stats_run(const char *sub, struct stat_sink *sink)
{
    if (sub == NULL || *sub == '\0') {
        stats_table(sink, &stat_tables[0]);
        return true;
    }
    if (strcmp(sub, "tac") == 0) {
        stats_table(sink, &stat_tables[1]);
        return true;
    }
    bool known = false;
    for (int i = 0; i < nsections; i++) {
        if (strcmp(sections[i].sub, sub) == 0) {
            sections[i].fn(sink);
            known = true;
        }
    }
    return known;
}

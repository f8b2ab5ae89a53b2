/*
 * tac/ssd_tier.c - the SSD tier's life: opening its file, starting and
 * stopping its threads, closing it clean, and its statistics.  The tier
 * itself: ssd_write.c (design at its top), ssd_read.c, ssd_defrag.c.
 */
#include "config.h"
#include "base/crashpoint.h"

#include <errno.h>
#include <libgen.h>
#include <linux/magic.h>
#include <poll.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/vfs.h>
#include <time.h>

#include "base/bg.h"
#include "engine/lazy_lru.h"
#include "base/settings.h"
#include "nvm/nvm.h"
#include "ssd/ssd.h"
#include "tac/crypt.h"
#include "tac/fetch.h"
#include "tac/internal.h"
#include "tac/nvm_tier.h"
#include "tac/policy.h"
#include "tac/ssd_int.h"
#include "tac/ssd_tier.h"
#include "tac/tac.h"
#include "tac/tuple.h"
#include "base/util.h"
/* ---- Set-up ------------------------------------------------------------- */

/* True when path (or, for a file not yet created, its directory) is on
 * tmpfs: RAM, not a disk.  A block device is never refused. */
static bool on_tmpfs(const char *path)
{
    struct stat st;
    if (stat(path, &st) == 0 && S_ISBLK(st.st_mode))
        return false;
    char *copy = strdup(path);
    if (copy == NULL)
        return false;
    struct statfs fs;
    bool exists = stat(path, &st) == 0;
    int rc = statfs(exists ? path : dirname(copy), &fs);
    free(copy);
    return rc == 0 && fs.f_type == TMPFS_MAGIC;
}

/* The defrag watermark wm within its bounds: defrag works while fewer
 * pages are free.  At least 2 in cache mode, where the writers may keep
 * no page (defrag_main raises it to one above what they keep), and with
 * -M one above DEFRAG_RESERVE_PAGES: defrag must start before the writers
 * stop at its reserve.  At most half the pages unless an operator set it
 * (ssd_free_pages, compact_under), and then at most all but the defrag
 * reserve. */
static unsigned free_wm_bounded(unsigned wm, bool set)
{
    unsigned max = set ? ssdt.info.npages - DEFRAG_RESERVE_PAGES : ssdt.info.npages / 2;
    unsigned min = tac.cfg.evict_to_free ? 2 : DEFRAG_RESERVE_PAGES + 1;
    if (wm > max)
        wm = max;
    if (wm < min)
        wm = min;
    return wm;
}

/* `extstore compact_under N` (settings_set_compact_under): defrag works
 * while N or fewer SSD pages are free, within its bounds (at least 2, at
 * most all but defrag's reserve). */
static void compact_under_apply(unsigned pages)
{
    if (tac.ssd == NULL)
        return;
    unsigned wm = free_wm_bounded(pages + 1, true);
    __atomic_store_n(&ssdt.free_wm, wm, __ATOMIC_RELAXED);
    __atomic_store_n(&ssdt.drop_ahead, 0, __ATOMIC_RELAXED);    /* an operator's watermark */
    ssdt_defrag_wake();
}

/* The options were checked and parsed by settings.c. */
bool tac_ssd_open(void)
{
    if (tac.cfg.ssd_path == NULL)
        return true;
    struct ssd_config cfg = { 0 };
    const char *path = tac.cfg.ssd_file;
    cfg.engine = tac.cfg.ssd_io_engine == SSD_ENGINE_THREADS ? SSD_IO_THREADS
                                                              : SSD_IO_URING;
    _Static_assert(SETTINGS_SSD_FILES <= SSD_MAX_FILES, "every file fits");
    cfg.nfiles = tac.cfg.ssd_nfiles;
    for (unsigned k = 0; k < cfg.nfiles; k++) {
        cfg.paths[k] = tac.cfg.ssd_files[k];
        cfg.sizes[k] = tac.cfg.ssd_sizes[k];
        if (on_tmpfs(cfg.paths[k])) {
            fprintf(stderr, "cannot open the SSD tier at %s: it is on tmpfs, which "
                    "is memory; put the SSD file on a disk file system or use a "
                    "block device\n", cfg.paths[k]);
            return false;
        }
    }
    cfg.path = path;
    cfg.size = tac.cfg.ssd_size;
    cfg.page_size = (size_t)tac.cfg.ssd_page_size;
    cfg.buf_size = (size_t)tac.cfg.ssd_buf_size;
    cfg.threads = (unsigned)tac.cfg.ext_threads;      /* 0: the default */
    /* A tuple larger than a buf spans slots of one page: the page bounds
     * the largest tuple, so it grows with -I unless set. */
    size_t bs = cfg.buf_size ? cfg.buf_size : SSD_DEFAULT_BUF_SIZE;
    size_t need = tac_tuple_size(KEY_MAX_LENGTH, (size_t)tac.cfg.item_size_max + 2);
    need = (need + bs - 1) / bs * bs;
    if (cfg.page_size == 0 && need > SSD_DEFAULT_PAGE_SIZE)
        cfg.page_size = need;
    if (cfg.page_size != 0 && cfg.page_size < need && cfg.page_size % bs == 0) {
        fprintf(stderr, "-o ssd_page_size=%zu raised to %zu to hold the largest "
                "item (-I %zu with its key and header, in whole bufs)\n",
                cfg.page_size, need, (size_t)tac.cfg.item_size_max);
        cfg.page_size = need;
    }
    /* A page id has 16 bits: files larger than SSD_MAX_PAGES pages in all
     * take larger pages (whole bufs), rather than leaving the rest unused. */
    size_t ps = cfg.page_size ? cfg.page_size : SSD_DEFAULT_PAGE_SIZE;
    if (cfg.size / ps > SSD_MAX_PAGES) {
        size_t grown = (size_t)((cfg.size + SSD_MAX_PAGES - 1) / SSD_MAX_PAGES);
        grown = (grown + bs - 1) / bs * bs;
        fprintf(stderr, "SSD tier: pages of %zu bytes instead of %zu, so that %u pages "
                "cover its %zu bytes\n", grown, ps, SSD_MAX_PAGES, (size_t)cfg.size);
        cfg.page_size = grown;
    }
    cfg.reformat = tac.cfg.tier_reformat != 0;
    memcpy(cfg.key_check, tac_crypt_key_check(), sizeof(cfg.key_check));
    enum ssd_status st = ssd_open(&cfg, &tac.ssd);
    if (st == SSD_ERR_NOT_OURS) {
        tac_refuse_tier_file("ssd_path", ssd_refused_path(), ssd_refusal());
        return false;
    }
    if (st != SSD_OK) {
        fprintf(stderr, "cannot open the SSD tier at %s: %s", ssd_refused_path()[0] != '\0'
                ? ssd_refused_path() : tac.cfg.ssd_path, ssd_strerror(st));
        if (st == SSD_ERR_DIRECT)
            fprintf(stderr, " (tmpfs such as /dev/shm cannot do O_DIRECT; put "
                    "the SSD file on a disk file system)");
        else if (st == SSD_ERR_ARG)
            fprintf(stderr, " (page size must be a multiple of the buf size, "
                    "the buf size a multiple of 4k, and the file hold at least "
                    "4 pages)");
        else if (errno != 0)
            fprintf(stderr, " (%s)", strerror(errno));
        fputc('\n', stderr);
        return false;
    }
    ssd_get_info(tac.ssd, &ssdt.info);
    tac.ssd_buf_size = ssdt.info.buf_size;
    if (ssdt.info.npages == SSD_MAX_PAGES &&
        (uint64_t)ssdt.info.npages * ssdt.info.page_size +
        (ssdt.info.nfiles + 1ull) * ssdt.info.page_size < ssdt.info.size)
        fprintf(stderr, "SSD tier: only %u pages of %zu bytes of its %llu bytes are "
                "used (a larger -o ssd_page_size uses it all)\n", ssdt.info.npages,
                ssdt.info.page_size, (unsigned long long)ssdt.info.size);
    if (ssdt.info.npages < 4) {
        fprintf(stderr, "SSD tier too small: %u pages of %zu bytes; it needs "
                "at least 4 (use a larger file or a smaller ssd_page_size)\n",
                ssdt.info.npages, ssdt.info.page_size);
        ssd_close(tac.ssd);
        tac.ssd = NULL;
        return false;
    }
    if (cfg.engine == SSD_IO_URING && ssdt.info.engine == SSD_IO_THREADS)
        fprintf(stderr, "SSD tier: io_uring is unavailable here; using a "
                "pread/pwrite thread pool\n");
    unsigned wm = tac.cfg.ssd_free_pages > 0 ? (unsigned)tac.cfg.ssd_free_pages
                : tac.cfg.ext_compact_under > 0 ? (unsigned)tac.cfg.ext_compact_under + 1
                : ssdt.info.npages / 50;
    ssdt.free_wm = free_wm_bounded(wm, tac.cfg.ssd_free_pages > 0 ||
                                      tac.cfg.ext_compact_under > 0);
    ssdt.keep_free = DEFRAG_RESERVE_PAGES;    /* the defrag thread lowers it */
    /* A large SSD (150 pages or more, default watermark) drops ahead from
     * the watermark down: dropping a page takes a while (its bufs are read
     * and its items unlinked), and a fast writer must not catch up with
     * it.  A small one, or one whose watermark an operator set, drops only
     * when the writers take the last page they may (memcached's extstore
     * evicts its oldest page when a write finds none free). */
    bool wm_set = tac.cfg.ssd_free_pages > 0 || tac.cfg.ext_compact_under > 0;
    ssdt.drop_ahead = !wm_set && ssdt.info.npages / 50 >= 3 ? ssdt.free_wm - 1 : 0;
    settings_on_compact_under(compact_under_apply);
    ssdt_ghost_init((uint64_t)ssdt.info.npages * ssdt.info.page_size);
    ssdt.nwriters = tac.cfg.evict_threads + 3;
    ssdt.writers = calloc((size_t)ssdt.nwriters, sizeof(*ssdt.writers));
    if (ssdt.writers == NULL)
        return false;
    for (int i = 0; i < ssdt.nwriters; i++) {
        pthread_mutex_init(&ssdt.writers[i].lock, NULL);
        ssdt.writers[i].page = -1;
    }
    ssdt_defrag_writer()->own_pages = true;
    ssdt.writers[ssdt.nwriters - 2].own_pages = true;      /* low-TTL */
    ssdt.writers[ssdt.nwriters - 2].keeps_reserve = true;
    pthread_mutex_init(&ssdt.lock, NULL);
    bg_init(&ssdt.defrag, "tac-ssd-defrag", NULL);
    ssdt.failed_max = tac.cfg.maxbytes / 16 / ssdt.info.buf_size;
    if (ssdt.failed_max < FAILED_BUFS_MIN)
        ssdt.failed_max = FAILED_BUFS_MIN;
    if (tac.cfg.verbose)
        fprintf(stderr, "SSD tier: %s, %llu MB, %u pages of %zu KB, bufs of "
                "%zu KB, %s\n", tac.cfg.ssd_path,
                (unsigned long long)(ssdt.info.size >> 20), ssdt.info.npages,
                ssdt.info.page_size >> 10, ssdt.info.buf_size >> 10,
                ssdt.info.engine == SSD_IO_URING ? "io_uring" : "threads");
    return true;
}

void tac_ssd_start(void)
{
    if (tac.ssd == NULL)
        return;
    if (!bg_start(&ssdt.defrag, 1, ssdt_defrag_main, NULL)) {
        fprintf(stderr, "cannot start the SSD defrag thread\n");
        exit(EXIT_FAILURE);
    }
    ssdt.defrag_running = true;
}

void tac_ssd_stop(void)
{
    if (!ssdt.defrag_running)
        return;
    bg_stop(&ssdt.defrag);
    ssdt.defrag_running = false;
}

uint64_t tac_ssd_close(void)
{
    if (tac.ssd == NULL)
        return 0;
    for (size_t i = 0; i < ssdt.nrings; i++)
        ssd_ring_destroy(ssdt.rings[i]);
    free(ssdt.rings);
    for (int i = 0; i < ssdt.nwriters; i++) {
        if (ssdt.writers[i].buf != NULL)
            ssd_buf_release(ssdt.writers[i].buf);
    }
    free(ssdt.writers);
    /* Failed bufs are freed by ssd_close with the rest. */
    free(ssdt.failed);
    free(ssdt_ghosts);
    ssdt_ghosts = NULL;
    ssdt_ghost_mask = 0;
    uint64_t generation = ssd_close(tac.ssd);
    tac.ssd = NULL;
    memset(&ssdt, 0, sizeof(ssdt));
    return generation;
}

/* ---- Stats -------------------------------------------------------------- */

void tac_ssd_stats_tiers(struct stat_sink *s)
{
    if (tac.ssd == NULL)
        return;
    struct ssd_stats st;
    ssd_get_stats(tac.ssd, &st);
    stat_printf(s, "ssd_capacity", "%llu",
                (unsigned long long)ssdt.info.npages * ssdt.info.page_size);
    stat_printf(s, "ssd_items", "%llu", tac_ssd_items());
    stat_printf(s, "ssd_live_bytes", "%llu", (unsigned long long)st.live_bytes);
    stat_printf(s, "ssd_pages_used", "%llu", (unsigned long long)st.pages_used);
    stat_printf(s, "ssd_pages_free", "%llu", (unsigned long long)st.pages_free);
    stat_printf(s, "ssd_pages_total", "%u", ssdt.info.npages);
    stat_printf(s, "ssd_bufs_written", "%llu", (unsigned long long)st.bufs_written);
    stat_printf(s, "ssd_bytes_written", "%llu", (unsigned long long)st.bytes_written);
    stat_printf(s, "ssd_bytes_read", "%llu", (unsigned long long)st.bytes_read);
    stat_printf(s, "ssd_pad_bytes", "%llu", (unsigned long long)st.pad_bytes);
    stat_printf(s, "ssd_reads", "%llu", (unsigned long long)st.reads);
    stat_printf(s, "ssd_reads_mem", "%llu", (unsigned long long)st.reads_mem);
    stat_printf(s, "ssd_read_submits", "%llu", (unsigned long long)st.read_submits);
    stat_printf(s, "ssd_reads_inflight", "%llu", (unsigned long long)st.reads_inflight);
    stat_printf(s, "ssd_writes_inflight", "%llu",
                (unsigned long long)(st.inflight - st.reads_inflight));
    stat_printf(s, "ssd_pages_reclaimed", "%llu", (unsigned long long)st.reclaimed);
    stat_printf(s, "ssd_page_allocs", "%llu", (unsigned long long)st.page_allocs);
    stat_printf(s, "ssd_io_errors", "%llu", (unsigned long long)st.io_errors);
    pthread_mutex_lock(&ssdt.lock);
    size_t nfailed = ssdt.nfailed + ssdt.retries_inflight;
    bool failing = ssdt.failing;
    pthread_mutex_unlock(&ssdt.lock);
    stat_printf(s, "ssd_write_failing", "%d", failing ? 1 : 0);
    stat_printf(s, "ssd_failed_bufs", "%zu", nfailed);
    stat_printf(s, "ssd_failed_bytes", "%zu", nfailed * ssdt.info.buf_size);
    stat_printf(s, "ssd_failed_bytes_max", "%zu", ssdt.failed_max * ssdt.info.buf_size);
    stat_printf(s, "ssd_meta_tuple_bytes", "%zu", item_compact_size(0));
}

/* memcached's extstore names, in plain `stats` (stats.c's rows). */
static struct ssd_stats ext_now(void)
{
    struct ssd_stats st;
    ssd_get_stats(tac.ssd, &st);
    return st;
}
static uint64_t ext_pages_used(void) { return ext_now().pages_used; }
static uint64_t ext_pages_free(void) { return ext_now().pages_free; }
static uint64_t ext_page_reclaims(void) { return ext_now().reclaimed; }
static uint64_t ext_objects_used(void) { return tac_ssd_items(); }
static uint64_t ext_objects_read(void) { return ext_now().reads; }
static uint64_t ext_bytes_used(void) { return ext_now().live_bytes; }
static uint64_t ext_bytes_written(void) { return ext_now().bytes_written; }
static uint64_t ext_bytes_read(void) { return ext_now().bytes_read; }
static uint64_t ext_limit(void) { return (uint64_t)ssdt.info.npages * ssdt.info.page_size; }
static uint64_t ext_io_queue(void) { return ext_now().inflight; }
static uint64_t ext_page_allocs(void) { return ext_now().page_allocs; }
static uint64_t ext_none(void) { return 0; }
static uint64_t ext_oom(void) { return STATS_GET(&tac.stats, ssd_reads_nomem); }
#define TAC_GET(field) STATS_GET(&tac.stats, field)
static uint64_t ext_gets(void) { return TAC_GET(get_hits_ssd); }
static uint64_t ext_recache(void)
{
    return TAC_GET(fetch_ssd_to_dram) + TAC_GET(fetch_ssd_to_nvm);
}
static uint64_t ext_misses(void)
{
    return TAC_GET(ssd_read_misses) + TAC_GET(ssd_dropped_misses);
}
static uint64_t ext_badcrc(void) { return TAC_GET(tuple_checksum_failures); }
static uint64_t ext_rescues(void) { return TAC_GET(ssd_defrag_moved); }
static uint64_t ext_skipped(void) { return TAC_GET(ssd_defrag_skipped); }
static uint64_t ext_page_evictions(void) { return TAC_GET(ssd_pages_dropped); }
static uint64_t ext_objects_evicted(void) { return TAC_GET(ssd_items_dropped); }
static uint64_t ext_bytes_evicted(void) { return TAC_GET(ssd_bytes_dropped); }
static uint64_t ext_objects_written(void) { return TAC_GET(ssd_tuples_written); }
#undef TAC_GET
static uint64_t ext_fragmented(void)
{
    struct ssd_stats st = ext_now();
    uint64_t used = st.pages_used * ssdt.info.page_size;
    return used > st.live_bytes ? used - st.live_bytes : 0;
}

/* `stats extstore`: memcached's per-page lines (version 0 = free; there
 * are no buckets here). */
static void ext_section(struct stat_sink *s)
{
    if (tac.ssd == NULL)
        return;
    for (unsigned p = 0; p < ssdt.info.npages; p++) {
        uint32_t version;
        uint64_t live;
        ssd_page_usage(tac.ssd, p, &version, &live);
        char name[32];
        snprintf(name, sizeof(name), "%u:version", p);
        stat_printf(s, name, "%u", version);
        snprintf(name, sizeof(name), "%u:bytes", p);
        stat_printf(s, name, "%llu", (unsigned long long)live);
        snprintf(name, sizeof(name), "%u:bucket", p);
        stat_printf(s, name, "0");
        snprintf(name, sizeof(name), "%u:free_bucket", p);
        stat_printf(s, name, "0");
    }
}

void tac_ssd_stats_register(void)
{
    bool on = tac.ssd != NULL;
    static const struct { const char *name; uint64_t (*fn)(void); } rows[] = {
        { "extstore_pages_used", ext_pages_used },
        { "extstore_pages_free", ext_pages_free },
        { "extstore_page_reclaims", ext_page_reclaims },
        { "extstore_objects_used", ext_objects_used },
        { "extstore_objects_read", ext_objects_read },
        { "extstore_bytes_used", ext_bytes_used },
        { "extstore_bytes_written", ext_bytes_written },
        { "extstore_bytes_read", ext_bytes_read },
        { "extstore_bytes_fragmented", ext_fragmented },
        { "extstore_limit_maxbytes", ext_limit },
        { "extstore_io_queue", ext_io_queue },
        { "get_extstore", ext_gets },
        { "get_oom_extstore", ext_oom },
        { "recache_from_extstore", ext_recache },
        { "miss_from_extstore", ext_misses },
        { "badcrc_from_extstore", ext_badcrc },
        { "extstore_compact_lost", ext_none },
        { "extstore_compact_rescues", ext_rescues },
        { "extstore_compact_skipped", ext_skipped },
        { "extstore_page_allocs", ext_page_allocs },
        { "extstore_page_evictions", ext_page_evictions },
        { "extstore_objects_evicted", ext_objects_evicted },
        { "extstore_bytes_evicted", ext_bytes_evicted },
        { "extstore_objects_written", ext_objects_written },
    };
    for (size_t i = 0; i < sizeof(rows) / sizeof(rows[0]); i++)
        stats_provide(rows[i].name, on ? rows[i].fn : NULL);
    if (on)
        stats_register_section("extstore", ext_section);
}

void tac_ssd_stats_settings(struct stat_sink *s)
{
    if (tac.ssd == NULL) {
        stat_printf(s, "ssd_backing", "none");
        return;
    }
    stat_printf(s, "ssd_capacity", "%llu",
                (unsigned long long)ssdt.info.npages * ssdt.info.page_size);
    stat_printf(s, "ssd_page_size", "%zu", ssdt.info.page_size);
    stat_printf(s, "ssd_buf_size", "%zu", ssdt.info.buf_size);
    stat_printf(s, "ssd_io_engine", "%s",
                ssdt.info.engine == SSD_IO_URING ? "uring" : "threads");
    stat_printf(s, "ssd_free_pages", "%u", __atomic_load_n(&ssdt.free_wm, __ATOMIC_RELAXED));
}


/*
 * test_slabs.c - slab classes, -m accounting, partitions and stealing,
 * page alignment and the page mover on raw chunks (pool, dst class,
 * draining, give-up).
 */
#include "config.h"

#include <pthread.h>

#include "engine/items.h"
#include "base/settings.h"
#include "engine/slabs.h"
#include "base/stats.h"
#include "unit.h"

#define MB (1024 * 1024)

/* Collects stats as "key value\n" lines. */
struct capture {
    char buf[64 * 1024];
    size_t len;
};

static void capture_emit(void *ctx, const char *key, const char *val)
{
    struct capture *c = ctx;
    int n = snprintf(c->buf + c->len, sizeof(c->buf) - c->len, "%s %s\n",
                     key, val);
    if (n > 0 && c->len + (size_t)n < sizeof(c->buf))
        c->len += (size_t)n;
}

static const char *stat_find(struct capture *c, const char *key, char *out)
{
    char pat[128];
    snprintf(pat, sizeof(pat), "%s ", key);
    for (char *line = c->buf; line && *line; line = strchr(line, '\n')) {
        if (*line == '\n')
            line++;
        if (strncmp(line, pat, strlen(pat)) == 0) {
            sscanf(line + strlen(pat), "%127s", out);
            return out;
        }
    }
    return NULL;
}

static char *page_of(const void *p)
{
    return (char *)((uintptr_t)p & ~(uintptr_t)(MB - 1));
}

static void setup(size_t maxbytes, int partitions)
{
    settings_init();
    settings.maxbytes = maxbytes;
    settings.partitions = partitions;
    slabs_init();
    slabs_set_chunk_evictor(item_evict_chunk);     /* as items_init does */
}

static void test_class_sizes_default(void)
{
    setup(64 * MB, 1);
    unsigned int n = slabs_nclasses();
    CHECK(n > 10 && n < MAX_SLAB_CLASSES);
    CHECK_UEQ(slabs_chunk_size(1), (ITEM_COMPACT_HDR + 48 + 7) & ~7u);
    for (unsigned int i = 1; i <= n; i++) {
        size_t sz = slabs_chunk_size(i);
        CHECK_UEQ(sz % 8, 0);
        if (i > 1) {
            size_t prev = slabs_chunk_size(i - 1);
            CHECK(sz > prev);
            if (i < n)
                CHECK(sz <= (size_t)(prev * 1.25) + 8);
        }
    }
    CHECK_UEQ(slabs_chunk_size(n), (size_t)settings.item_size_max);
    CHECK_UEQ(slabs_chunk_size(n + 1), 0);
    /* clsid picks the smallest class that fits. */
    CHECK_UEQ(slabs_clsid(1), 1);
    CHECK_UEQ(slabs_clsid(slabs_chunk_size(1)), 1);
    CHECK_UEQ(slabs_clsid(slabs_chunk_size(1) + 1), 2);
    CHECK_UEQ(slabs_clsid(slabs_chunk_size(5)), 5);
    CHECK_UEQ(slabs_clsid((size_t)settings.item_size_max), n);
    CHECK_UEQ(slabs_clsid((size_t)settings.item_size_max + 1), 0);
    CHECK_UEQ(slabs_clsid(0), 0);
}

static void test_class_sizes_n_f(void)
{
    settings_init();
    settings.chunk_size = 100;
    settings.factor = 2.0;
    slabs_init();
    size_t c1 = (ITEM_COMPACT_HDR + 100 + 7) & ~(size_t)7;
    CHECK_UEQ(slabs_chunk_size(1), c1);
    CHECK_UEQ(slabs_chunk_size(2), c1 * 2);
    CHECK_UEQ(slabs_chunk_size(3), c1 * 4);
    /* 1 MB / ~2^k: about 13 classes. */
    CHECK(slabs_nclasses() >= 12 && slabs_nclasses() <= 14);

    /* Tiny factor: classes are still strictly growing and capped. */
    settings_init();
    settings.factor = 1.01;
    slabs_init();
    CHECK(slabs_nclasses() <= MAX_SLAB_CLASSES - 1);
    for (unsigned int i = 2; i <= slabs_nclasses(); i++)
        CHECK(slabs_chunk_size(i) > slabs_chunk_size(i - 1));
}

static void test_big_chunks_get_own_pages(void)
{
    settings_init();
    settings.item_size_max = 4 * MB;
    settings.maxbytes = 64 * MB;
    settings.partitions = 1;
    slabs_init();
    unsigned int last = slabs_nclasses();
    struct slabs_class_info ci;
    slabs_class_info(last, &ci);
    CHECK_UEQ(ci.chunk_size, 4 * MB);
    CHECK_UEQ(ci.page_size, 4 * MB);
    CHECK_UEQ(ci.chunks_per_page, 1);
    slabs_class_info(1, &ci);
    CHECK_UEQ(ci.page_size, MB);
    CHECK_UEQ(ci.chunks_per_page, MB / ci.chunk_size);

    void *a = slabs_alloc(last, 0);
    CHECK(a != NULL);
    CHECK_UEQ(slabs_mem_malloced(), 4 * MB);
    memset(ITEM_key((item *)a), 0xab, 4 * MB - sizeof(item));  /* usable */
    slabs_free(a, last, 0);
}

static void check_accounting(unsigned int clsid)
{
    struct slabs_class_info ci;
    slabs_class_info(clsid, &ci);
    CHECK_UEQ(ci.used_chunks + ci.free_chunks + ci.free_chunks_end,
              ci.total_chunks);
}

static void test_alloc_free_accounting(void)
{
    setup(64 * MB, 2);
    enum { N = 1000 };
    static item *got[N];
    struct slabs_class_info ci;
    for (int i = 0; i < N; i++) {
        got[i] = slabs_alloc(3, i % 2);
        CHECK(got[i] != NULL);
        CHECK_EQ(got[i]->slabs_clsid, 3);
        CHECK_EQ(got[i]->partition, i % 2);
        CHECK((got[i]->it_flags & ITEM_SLABBED) == 0);
        memset(ITEM_key(got[i]), 'x', slabs_chunk_size(3) - sizeof(item));
    }
    /* All distinct. */
    for (int i = 1; i < N; i++)
        CHECK(got[i] != got[i - 1]);
    slabs_class_info(3, &ci);
    CHECK_UEQ(ci.used_chunks, N);
    CHECK_UEQ(ci.total_pages, 2);           /* one per partition */
    CHECK_UEQ(slabs_mem_malloced(), 2 * MB);
    check_accounting(3);

    for (int i = 0; i < N; i += 2)
        slabs_free(got[i], 3, 0);
    slabs_class_info(3, &ci);
    CHECK_UEQ(ci.used_chunks, N / 2);
    CHECK_UEQ(ci.free_chunks, N / 2);
    check_accounting(3);
    /* Freed chunks are reused before new memory. */
    item *again = slabs_alloc(3, 0);
    CHECK(again == got[N - 2]);
    CHECK_UEQ(slabs_mem_malloced(), 2 * MB);
    slabs_free(again, 3, 0);
    for (int i = 1; i < N; i += 2)
        slabs_free(got[i], 3, 1);
    slabs_class_info(3, &ci);
    CHECK_UEQ(ci.used_chunks, 0);
    check_accounting(3);
}

static void test_memory_limit(void)
{
    setup(4 * MB, 1);
    struct slabs_class_info ci;
    slabs_class_info(1, &ci);
    uint64_t n = 0;
    while (n < 100000 && slabs_alloc(1, 0) != NULL)   /* bounded */
        n++;
    CHECK_UEQ(n, 4 * ci.chunks_per_page);
    CHECK_UEQ(slabs_mem_malloced(), 4 * MB);
    CHECK(slabs_mem_malloced() <= settings.maxbytes);
    /* Another class still gets its first page (memcached rule)... */
    void *b = slabs_alloc(10, 0);
    CHECK(b != NULL);
    CHECK_UEQ(slabs_mem_malloced(), 5 * MB);
    /* ...but not a second one. */
    slabs_class_info(10, &ci);
    for (uint64_t i = 1; i < ci.chunks_per_page; i++)
        CHECK(slabs_alloc(10, 0) != NULL);
    CHECK(slabs_alloc(10, 0) == NULL);
    CHECK_UEQ(slabs_mem_malloced(), 5 * MB);
}

static void test_tiny_m(void)
{
    setup(100 * 1024, 4);   /* -m smaller than one page */
    for (unsigned int c = 1; c <= 5; c++) {
        void *p = slabs_alloc(c, 0);
        CHECK(p != NULL);
    }
    CHECK_UEQ(slabs_mem_malloced(), 5 * MB);
}

static void test_partition_stealing(void)
{
    setup(2 * MB, 4);
    struct slabs_class_info ci;
    slabs_class_info(2, &ci);
    unsigned int per = ci.chunks_per_page;
    item *last0 = NULL, *last1 = NULL;
    for (unsigned int i = 0; i < per; i++) {
        last0 = slabs_alloc(2, 0);
        CHECK(last0 != NULL);
    }
    for (unsigned int i = 0; i < per; i++) {
        last1 = slabs_alloc(2, 1);
        CHECK(last1 != NULL);
    }
    slabs_class_info(2, &ci);
    CHECK_UEQ(ci.total_pages, 2);
    /* Memory is spent and every partition is empty. */
    CHECK(slabs_alloc(2, 2) == NULL);
    CHECK(slabs_alloc(2, 3) == NULL);
    /* A chunk freed in partition 1 is stolen by partition 2. */
    slabs_free(last1, 2, 1);
    item *s = slabs_alloc(2, 2);
    CHECK(s == last1);
    CHECK_EQ(s->partition, 2);
    /* Partition 3 steals from partition 0 (wrapping around). */
    slabs_free(last0, 2, 0);
    s = slabs_alloc(2, 3);
    CHECK(s == last0);
    CHECK(slabs_alloc(2, 3) == NULL);
    check_accounting(2);
}

static void test_partitions_clamped(void)
{
    setup(64 * MB, 1000);
    CHECK_EQ(slabs_npartitions(), MAX_PARTITIONS);
    settings_init();
    settings.partitions = 0;
    settings.num_threads = 3;
    slabs_init();
    CHECK_EQ(slabs_npartitions(), 3);
    /* Out-of-range partition numbers are folded in. */
    item *it = slabs_alloc(1, 7);
    CHECK(it != NULL);
    CHECK_EQ(it->partition, 1);
}

static void test_prealloc(void)
{
    settings_init();
    settings.maxbytes = 3 * MB;
    settings.prealloc = true;
    settings.partitions = 1;
    slabs_init();
    int n = 0;
    while (slabs_alloc(20, 0) != NULL)
        n++;
    struct slabs_class_info ci;
    slabs_class_info(20, &ci);
    CHECK_UEQ((uint64_t)n, 3 * ci.chunks_per_page);
    CHECK_UEQ(slabs_mem_malloced(), 3 * MB);
}

static void test_stats(void)
{
    setup(64 * MB, 1);
    CHECK(slabs_alloc(1, 0) != NULL);
    CHECK(slabs_alloc(1, 0) != NULL);
    static struct capture cap;
    cap.len = 0;
    cap.buf[0] = '\0';
    struct stat_sink sink = { capture_emit, &cap };
    slabs_stats(&sink);
    char v[128];
    char want[32];
    snprintf(want, sizeof(want), "%zu", slabs_chunk_size(1));
    CHECK_STR_EQ(stat_find(&cap, "1:chunk_size", v), want);
    CHECK_STR_EQ(stat_find(&cap, "1:total_pages", v), "1");
    CHECK_STR_EQ(stat_find(&cap, "1:used_chunks", v), "2");
    CHECK_STR_EQ(stat_find(&cap, "1:free_chunks", v), "0");
    CHECK(stat_find(&cap, "1:chunks_per_page", v) != NULL);
    CHECK(stat_find(&cap, "1:total_chunks", v) != NULL);
    CHECK(stat_find(&cap, "1:free_chunks_end", v) != NULL);
    CHECK(stat_find(&cap, "2:chunk_size", v) == NULL);
    CHECK_STR_EQ(stat_find(&cap, "active_slabs", v), "1");
    CHECK_STR_EQ(stat_find(&cap, "total_malloced", v), "1048576");
}

/* Threads allocate, stamp, verify and free chunks concurrently. */
struct mt_arg {
    int id;
    uint64_t rng;
};

static void *mt_worker(void *p)
{
    struct mt_arg *a = p;
    enum { KEEP = 64 };
    item *held[KEEP] = { 0 };
    for (int round = 0; round < 20000; round++) {
        int slot = (int)(unit_rand_r(&a->rng) % KEEP);
        unsigned int cls = 1 + (unsigned int)(slot % 4);
        if (held[slot] != NULL) {
            item *it = held[slot];
            CHECK_EQ(ITEM_key(it)[0], (char)(a->id * KEEP + slot));
            slabs_free(it, it->slabs_clsid, a->id);
            held[slot] = NULL;
        } else {
            item *it = slabs_alloc(cls, a->id);
            if (it == NULL)
                continue;
            ITEM_key(it)[0] = (char)(a->id * KEEP + slot);
            held[slot] = it;
        }
    }
    for (int i = 0; i < KEEP; i++)
        if (held[i] != NULL)
            slabs_free(held[i], held[i]->slabs_clsid, a->id);
    return NULL;
}

static void test_threads(void)
{
    setup(4 * MB, 4);
    pthread_t t[4];
    struct mt_arg args[4];
    for (int i = 0; i < 4; i++) {
        args[i].id = i;
        args[i].rng = unit_rand() | 1;
        pthread_create(&t[i], NULL, mt_worker, &args[i]);
    }
    for (int i = 0; i < 4; i++)
        pthread_join(t[i], NULL);
    for (unsigned int c = 1; c <= 4; c++) {
        struct slabs_class_info ci;
        slabs_class_info(c, &ci);
        CHECK_UEQ(ci.used_chunks, 0);
        check_accounting(c);
    }
    /* -m plus at most one grace page for each of the 4 classes. */
    CHECK(slabs_mem_malloced() <= 8 * MB);
}

/* ---- Page mover at the slab level (real items: test_mover.c). -------- */

static void check_accounting_moving(unsigned int clsid)
{
    struct slabs_class_info ci;
    slabs_class_info(clsid, &ci);
    CHECK_UEQ(ci.used_chunks + ci.free_chunks + ci.free_chunks_end +
              ci.moving_chunks, ci.total_chunks);
}

static void test_pages_aligned(void)
{
    setup(64 * MB, 2);
    for (unsigned int c = 1; c <= 10; c++) {
        struct slabs_class_info ci;
        slabs_class_info(c, &ci);
        CHECK(ci.movable);
        item *it = slabs_alloc(c, (int)c % 2);
        CHECK(it != NULL);
        /* The first chunk of a fresh page is the page itself. */
        CHECK(((uintptr_t)it & (MB - 1)) == 0);
        slabs_free(it, c, (int)c % 2);
    }
    /* One-chunk pages bigger than slab_page_size are not movable. */
    settings_init();
    settings.item_size_max = 4 * MB;
    settings.maxbytes = 64 * MB;
    slabs_init();
    struct slabs_class_info ci;
    slabs_class_info(slabs_nclasses(), &ci);
    CHECK(!ci.movable);
    CHECK(!slabs_reassign_start(slabs_nclasses(), 1));
    CHECK_EQ(slabs_reassign_request(slabs_nclasses(), 1),
             SLABS_REASSIGN_BADCLASS);
    /* -L: pages carved from the preallocated block are aligned too. */
    settings_init();
    settings.maxbytes = 3 * MB;
    settings.prealloc = true;
    slabs_init();
    for (unsigned int c = 1; c <= 3; c++) {
        void *p = slabs_alloc(c, 0);
        CHECK(p != NULL && ((uintptr_t)p & (MB - 1)) == 0);
    }
}

/* Fills `pages` pages of cls in partition 0; returns the chunks. */
static item **fill_class(unsigned int cls, unsigned int pages, size_t *n)
{
    struct slabs_class_info ci;
    slabs_class_info(cls, &ci);
    *n = (size_t)pages * ci.chunks_per_page;
    item **v = calloc(*n, sizeof(*v));
    CHECK(v != NULL);
    for (size_t i = 0; i < *n; i++) {
        v[i] = slabs_alloc(cls, 0);
        CHECK(v[i] != NULL);
    }
    return v;
}

static void test_move_free_page_to_pool(void)
{
    setup(4 * MB, 2);
    size_t n;
    item **v = fill_class(3, 3, &n);
    struct slabs_class_info ci;
    slabs_class_info(3, &ci);
    CHECK_UEQ(ci.total_pages, 3);
    CHECK_UEQ(slabs_mem_malloced(), 3 * MB);
    /* Empty the second page only: it is the least used one. */
    char *second = page_of(v[ci.chunks_per_page]);
    for (size_t i = 0; i < n; i++)
        if (page_of(v[i]) == second)
            slabs_free(v[i], 3, (int)(i % 2));

    CHECK(slabs_reassign_start(3, 0));
    struct slabs_mover_info mi;
    slabs_mover_info(&mi);
    CHECK(mi.running && mi.page == second);
    /* Its free chunks left the free lists at once. */
    slabs_class_info(3, &ci);
    CHECK_UEQ(ci.free_chunks, 0);
    CHECK_UEQ(ci.moving_chunks, ci.chunks_per_page);
    check_accounting_moving(3);
    CHECK(slabs_reassign_step(10) > 0);
    slabs_mover_info(&mi);
    CHECK(!mi.running);
    CHECK_UEQ(mi.moved, 1);
    CHECK_UEQ(mi.pool_pages, 1);
    CHECK_UEQ(slabs_mem_malloced(), 2 * MB);
    slabs_class_info(3, &ci);
    CHECK_UEQ(ci.total_pages, 2);
    CHECK_UEQ(ci.moving_chunks, 0);
    check_accounting_moving(3);

    /* Another class gets the pooled page back, zeroed, before any new
     * memory: the -m budget counts it again. */
    item *it = slabs_alloc(7, 1);
    CHECK((char *)it == second);
    CHECK_UEQ(it->refcount, 0);
    slabs_mover_info(&mi);
    CHECK_UEQ(mi.pool_pages, 0);
    CHECK_UEQ(slabs_mem_malloced(), 3 * MB);
    for (size_t i = 0; i < n; i++)
        if (page_of(v[i]) != second)
            slabs_free(v[i], 3, 0);
    slabs_free(it, 7, 1);
    free(v);
}

static void test_move_to_class_and_drain_frees(void)
{
    setup(2 * MB, 1);
    size_t n;
    item **v = fill_class(2, 2, &n);
    /* A few chunks of the first page stay used until the page drains. */
    char *first = page_of(v[0]);
    for (size_t i = 0; i < n; i++)
        if (page_of(v[i]) == first && i % 10 != 0)
            slabs_free(v[i], 2, 0);
    CHECK(slabs_reassign_start(2, 9));
    struct slabs_mover_info mi;
    slabs_mover_info(&mi);
    CHECK(mi.page == first && mi.dst == 9);
    /* A draining page's chunks are never handed out again... */
    item *x = slabs_alloc(2, 0);
    CHECK(x == NULL);
    /* ...and a chunk freed now goes to the mover. */
    struct slabs_class_info ci;
    slabs_class_info(2, &ci);
    uint64_t moving = ci.moving_chunks;
    slabs_free(v[0], 2, 0);
    slabs_class_info(2, &ci);
    CHECK_UEQ(ci.moving_chunks, moving + 1);
    CHECK_UEQ(ci.free_chunks, 0);
    check_accounting_moving(2);
    for (size_t i = 10; i < n; i += 10)
        if (page_of(v[i]) == first)
            slabs_free(v[i], 2, 0);
    CHECK(slabs_reassign_step(1000) > 0);
    slabs_mover_info(&mi);
    CHECK(!mi.running && mi.moved == 1 && mi.moved_to_pool == 0);
    /* Class 9 got the page without new memory and carves it. */
    size_t mal = slabs_mem_malloced();
    slabs_class_info(9, &ci);
    CHECK_UEQ(ci.total_pages, 1);
    CHECK_UEQ(ci.free_chunks_end, ci.chunks_per_page);
    item *y = slabs_alloc(9, 0);
    CHECK((char *)y == first);
    CHECK_UEQ(slabs_mem_malloced(), mal);
    check_accounting_moving(2);
    check_accounting_moving(9);
    slabs_free(y, 9, 0);
    free(v);
}

static void test_move_gives_up(void)
{
    setup(2 * MB, 2);
    size_t n;
    item **v = fill_class(4, 2, &n);
    /* Raw chunks look "being allocated" to item_evict_chunk (refcount 0):
     * the page never drains and the move is undone. */
    for (size_t i = 0; i < n; i += 2)
        slabs_free(v[i], 4, 0);
    struct slabs_class_info before;
    slabs_class_info(4, &before);
    CHECK(slabs_reassign_start(4, 0));
    int steps = 0;
    while (slabs_reassign_step(1 << 20) > 0)
        steps++;
    CHECK_EQ(steps, SLABS_MOVE_MAX_PASSES);
    struct slabs_mover_info mi;
    slabs_mover_info(&mi);
    CHECK(!mi.running && mi.aborted == 1 && mi.moved == 0);
    struct slabs_class_info ci;
    slabs_class_info(4, &ci);
    CHECK_UEQ(ci.total_pages, before.total_pages);
    CHECK_UEQ(ci.used_chunks, before.used_chunks);
    CHECK_UEQ(ci.free_chunks + ci.free_chunks_end,
              before.free_chunks + before.free_chunks_end);
    CHECK_UEQ(ci.moving_chunks, 0);
    /* The chunks went back and are handed out again, each once. */
    for (uint64_t i = 0; i < ci.free_chunks + ci.free_chunks_end; i++) {
        item *it = slabs_alloc(4, (int)(i % 2));
        CHECK(it != NULL && (it->it_flags & ITEM_SLABBED) == 0);
        it->it_flags = ITEM_SLABBED;        /* catches a double hand-out */
    }
    CHECK_UEQ(slabs_mem_malloced(), 2 * MB);
    free(v);
}

/* A page drains into the meta tuples' class while -m is spent and that
 * class has fewer free chunks than the page has items: the moves down
 * (reserved allocations) may borrow one page past -m, new keys
 * (unreserved) leave the drain its chunks, and the drained page pays the
 * borrowed one back.  Before, the drain waited on the room it was to make. */
static void test_drain_borrows_one_page(void)
{
    setup(4 * MB, 1);
    struct slabs_class_info ci;
    slabs_class_info(1, &ci);
    slabs_set_reserve(1 * MB, ci.chunk_size);
    const unsigned int perslab = ci.chunks_per_page;
    size_t nd, nm;
    item **d = fill_class(5, 2, &nd);
    item **m = fill_class(1, 1, &nm);
    CHECK(slabs_alloc(1, 0) == NULL);           /* the unreserved budget is spent */
    item **r = calloc(2 * (size_t)perslab, sizeof(*r));
    CHECK(r != NULL);
    size_t nr = 0;
    while ((r[nr] = slabs_alloc_ex(1, 0, true)) != NULL)
        nr++;
    CHECK_UEQ(nr, perslab);                     /* the reserve: one page */
    CHECK_UEQ(slabs_mem_malloced(), 4 * MB);

    /* The first data page keeps one item in 64; 8 meta chunks come free. */
    char *first = page_of(d[0]);
    size_t live = 0;
    for (size_t i = 0; i < nd; i++) {
        if (page_of(d[i]) != first)
            continue;
        if (i % 64 == 0)
            live++;
        else {
            slabs_free(d[i], 5, 0);
            d[i] = NULL;
        }
    }
    CHECK(live > 8);
    for (size_t i = 0; i < 8; i++)
        slabs_free(m[i], 1, 0);
    CHECK(slabs_reassign_start(5, 1));

    /* The 8 free chunks are the drain's. */
    CHECK(slabs_alloc(1, 0) == NULL);
    /* Its moves down take them, then a page past -m, and no second one. */
    for (nr = 0; (r[nr] = slabs_alloc_ex(1, 0, true)) != NULL; nr++)
        CHECK(nr < 2 * (size_t)perslab);
    CHECK_UEQ(nr, 8 + perslab);
    CHECK_UEQ(slabs_mem_malloced(), 5 * MB);
    slabs_class_info(1, &ci);
    CHECK_UEQ(ci.total_pages, 3);

    /* The items are down: the page drains and pays the borrowed page back. */
    for (size_t i = 0; i < nd; i++)
        if (d[i] != NULL && page_of(d[i]) == first) {
            slabs_free(d[i], 5, 0);
            d[i] = NULL;
        }
    while (slabs_reassign_step(1 << 20) > 0)
        ;
    struct slabs_mover_info mi;
    slabs_mover_info(&mi);
    CHECK(!mi.running && mi.moved == 1 && mi.repaid == 1 && mi.moved_to_pool == 1);
    CHECK_UEQ(slabs_mem_malloced(), 4 * MB);
    slabs_class_info(5, &ci);
    CHECK_UEQ(ci.total_pages, 1);
    slabs_class_info(1, &ci);
    CHECK_UEQ(ci.total_pages, 3);
    /* No drain: nothing is lent. */
    CHECK(slabs_alloc_ex(5, 0, true) == NULL);
    check_accounting_moving(1);
    check_accounting_moving(5);
    free(r);
    free(m);
    free(d);
}

int main(int argc, char **argv)
{
    unit_seed_init(argc, argv);
    RUN_TEST(test_class_sizes_default);
    RUN_TEST(test_class_sizes_n_f);
    RUN_TEST(test_big_chunks_get_own_pages);
    RUN_TEST(test_alloc_free_accounting);
    RUN_TEST(test_memory_limit);
    RUN_TEST(test_tiny_m);
    RUN_TEST(test_partition_stealing);
    RUN_TEST(test_partitions_clamped);
    RUN_TEST(test_prealloc);
    RUN_TEST(test_stats);
    RUN_TEST(test_threads);
    RUN_TEST(test_pages_aligned);
    RUN_TEST(test_move_free_page_to_pool);
    RUN_TEST(test_move_to_class_and_drain_frees);
    RUN_TEST(test_move_gives_up);
    RUN_TEST(test_drain_borrows_one_page);
    fprintf(stderr, "test_slabs: ok\n");
    return 0;
}

/*
 * test_nvm.c - unit tests for the NVM tier library (nvm/).
 *
 * Regions live in files under /dev/shm (tmpfs) and /tmp, and in anonymous
 * memory bound to NUMA node 0.  The tests cover the header format and its
 * dirty flag, class geometry, the allocator (exhaustion, reuse, partition
 * stealing, metadata kept out of the mapping), copies, latency emulation,
 * counters, every error status, and a multi-threaded run with verified
 * contents.  Random data comes from the printed seed (argv[1]/UNIT_SEED).
 */
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdbool.h>
#include <sys/stat.h>
#include <sys/statfs.h>
#include <time.h>

#include "nvm/format.h"
#include "nvm/nvm.h"
#include "unit.h"

#define KB 1024u
#define MB (1024u * 1024u)

static char shm_path[128], tmp_path[128], aux_path[128];

static struct nvm_config base_cfg(const char *path, size_t size)
{
    struct nvm_config c;
    memset(&c, 0, sizeof(c));
    c.path = path;
    c.size = size;
    c.partitions = 1;
    c.slot_max = 64 * KB;
    c.factor = 1.25;
    c.page_size = 256 * KB;
    c.reformat = true;      /* tests reuse paths with other geometries;
                               test_refusals checks the refusals */
    return c;
}

static struct nvm_region *open_ok(const struct nvm_config *c)
{
    struct nvm_region *r = NULL;
    enum nvm_status st = nvm_open(c, &r);
    if (st != NVM_OK)
        fprintf(stderr, "nvm_open(%s): %s (errno %d: %s)\n", c->path,
                nvm_strerror(st), errno, strerror(errno));
    CHECK_EQ(st, NVM_OK);
    CHECK(r != NULL);
    return r;
}

static void fill_random(void *buf, size_t len, uint64_t *rng)
{
    unsigned char *b = buf;
    for (size_t i = 0; i < len; i++)
        b[i] = (unsigned char)unit_rand_r(rng);
}

static struct nvm_header read_header(const char *path)
{
    struct nvm_header h;
    int fd = open(path, O_RDONLY);
    CHECK(fd >= 0);
    CHECK_EQ(pread(fd, &h, sizeof(h), 0), (ssize_t)sizeof(h));
    close(fd);
    return h;
}

static uint64_t elapsed_ns(const struct timespec *a, const struct timespec *b)
{
    return (uint64_t)(b->tv_sec - a->tv_sec) * 1000000000ull +
           (uint64_t)b->tv_nsec - (uint64_t)a->tv_nsec;
}

/* What nvm_info.backing should say for a file at path.  With
 * PMEM_IS_PMEM_FORCE=1 libpmem treats any mapping as pmem, which runs the
 * pmem_memcpy_nodrain / pmem_drain / pmem_persist paths on tmpfs. */
static const char *file_backing(const char *path)
{
    const char *force = getenv("PMEM_IS_PMEM_FORCE");
    struct statfs sfs;
    if (force != NULL && strcmp(force, "1") == 0)
        return "pmem-file";
    CHECK(statfs(path, &sfs) == 0);
    return sfs.f_type == 0x01021994 ? "tmpfs-file" : "file";
}

static int cmp_u64(const void *a, const void *b)
{
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return x < y ? -1 : x > y;
}

/* ---- Header and backings ----------------------------------------------- */

static void test_header_and_dirty_flag(void)
{
    struct nvm_config c = base_cfg(shm_path, 8 * MB);
    unlink(shm_path);
    struct nvm_region *r = open_ok(&c);
    struct nvm_info in;
    nvm_get_info(r, &in);
    CHECK_STR_EQ(in.backing, file_backing(shm_path));
    CHECK(in.is_pmem == (strcmp(in.backing, "pmem-file") == 0));
    CHECK_STR_EQ(in.path, shm_path);
    CHECK_EQ(in.prev_state, NVM_PREV_NONE);
    CHECK_UEQ(in.capacity, 8 * MB);
    CHECK_UEQ(in.data_offset, NVM_DATA_OFFSET);
    CHECK_UEQ(in.pages_total, (8 * MB - NVM_DATA_OFFSET) / (256 * KB));

    struct nvm_header h = read_header(shm_path);
    CHECK_MEM_EQ(h.magic, NVM_MAGIC, 8);
    CHECK_UEQ(h.version, NVM_FORMAT_VERSION);
    CHECK_UEQ(h.header_size, sizeof(h));
    CHECK_UEQ(h.flags & NVM_HDR_DIRTY, NVM_HDR_DIRTY);
    CHECK_UEQ(h.region_size, 8 * MB);
    CHECK_UEQ(h.page_size, 256 * KB);
    CHECK_UEQ(h.npages, in.pages_total);
    CHECK_UEQ(h.nclasses, nvm_nclasses(r));
    CHECK_UEQ(h.slot_size[1], 256);
    CHECK_UEQ(h.open_count, 1);
    CHECK(nvm_header_valid(&h));
    struct nvm_header bad = h;
    bad.page_size *= 2;
    CHECK(!nvm_header_valid(&bad));

    /* A copy taken while open looks like a crashed region. */
    unlink(aux_path);
    int in_fd = open(shm_path, O_RDONLY);
    int out_fd = open(aux_path, O_WRONLY | O_CREAT | O_TRUNC, 0600);
    CHECK(in_fd >= 0 && out_fd >= 0);
    static char buf[64 * KB];
    ssize_t n;
    while ((n = read(in_fd, buf, sizeof(buf))) > 0)
        CHECK_EQ(write(out_fd, buf, (size_t)n), n);
    close(in_fd);
    close(out_fd);
    nvm_close(r);

    h = read_header(shm_path);
    CHECK_UEQ(h.flags & NVM_HDR_DIRTY, 0);
    CHECK(nvm_header_valid(&h));

    r = open_ok(&c);
    nvm_get_info(r, &in);
    CHECK_EQ(in.prev_state, NVM_PREV_CLEAN);
    CHECK_UEQ(read_header(shm_path).open_count, 2);
    nvm_close(r);

    c.path = aux_path;
    r = open_ok(&c);
    nvm_get_info(r, &in);
    CHECK_EQ(in.prev_state, NVM_PREV_DIRTY);
    nvm_close(r);
    unlink(aux_path);

    /* size 0 maps an existing file as it is. */
    c.path = shm_path;
    c.size = 0;
    r = open_ok(&c);
    nvm_get_info(r, &in);
    CHECK_UEQ(in.capacity, 8 * MB);
    nvm_close(r);
    unlink(shm_path);
}

static struct nvm_header read_copy(const char *path, unsigned i)
{
    struct nvm_header h;
    int fd = open(path, O_RDONLY);
    CHECK(fd >= 0);
    CHECK_EQ(pread(fd, &h, sizeof(h), (off_t)i * NVM_HDR_COPY_STRIDE),
             (ssize_t)sizeof(h));
    close(fd);
    return h;
}

static void write_at(const char *path, off_t off, const void *b, size_t n)
{
    int fd = open(path, O_WRONLY);
    CHECK(fd >= 0);
    CHECK_EQ(pwrite(fd, b, n, off), (ssize_t)n);
    close(fd);
}

/* Opens c: NVM_OK (then closes it and checks prev_state), or the refusal,
 * whose phrase must hold want, with the file's size and header area as
 * they were. */
static void nvm_expect(const struct nvm_config *c, enum nvm_status want_st,
                       enum nvm_prev_state want_prev, const char *want)
{
    struct stat st0, st1;
    static unsigned char a0[NVM_DATA_OFFSET], a1[NVM_DATA_OFFSET];
    bool existed = stat(c->path, &st0) == 0;
    int fd = existed ? open(c->path, O_RDONLY) : -1;
    memset(a0, 0, sizeof(a0));
    if (fd >= 0) {
        CHECK(pread(fd, a0, sizeof(a0), 0) >= 0);
        close(fd);
    }
    struct nvm_region *r = NULL;
    CHECK_EQ(nvm_open(c, &r), want_st);
    if (want_st == NVM_OK) {
        struct nvm_info in;
        nvm_get_info(r, &in);
        CHECK_EQ(in.prev_state, want_prev);
        nvm_close(r);
        return;
    }
    CHECK(r == NULL);
    if (strstr(nvm_refusal(), want) == NULL)
        fprintf(stderr, "    refusal \"%s\" lacks \"%s\"\n", nvm_refusal(), want);
    CHECK(strstr(nvm_refusal(), want) != NULL);
    CHECK(existed && stat(c->path, &st1) == 0 && st1.st_size == st0.st_size);
    memset(a1, 0, sizeof(a1));
    fd = open(c->path, O_RDONLY);
    CHECK(fd >= 0 && pread(fd, a1, sizeof(a1), 0) >= 0);
    close(fd);
    CHECK_MEM_EQ(a0, a1, sizeof(a0));
}

static void test_refusals(void)
{
    struct nvm_config c = base_cfg(shm_path, 8 * MB);
    c.reformat = false;
    unlink(shm_path);

    /* A file of zeros is formatted; then it is ours and fits. */
    int fd = open(shm_path, O_RDWR | O_CREAT, 0600);
    CHECK(fd >= 0 && ftruncate(fd, 8 * MB) == 0);
    close(fd);
    nvm_expect(&c, NVM_OK, NVM_PREV_NONE, NULL);
    nvm_expect(&c, NVM_OK, NVM_PREV_CLEAN, NULL);

    /* Another geometry: size (the file is not resized), page size, and
     * the class table (another slot_max). */
    struct nvm_config g = c;
    g.size = 16 * MB;
    nvm_expect(&g, NVM_ERR_NOT_OURS, 0, "another geometry");
    g = c;
    g.page_size = 512 * KB;
    nvm_expect(&g, NVM_ERR_NOT_OURS, 0, "another geometry");
    g = c;
    g.slot_max = 128 * KB;
    nvm_expect(&g, NVM_ERR_NOT_OURS, 0, "slot classes");
    g = c;
    g.size = 0;                             /* as it is: fits */
    nvm_expect(&g, NVM_OK, NVM_PREV_CLEAN, NULL);

    /* One torn copy: the other serves, either way round; of two valid
     * copies the higher open count wins. */
    for (unsigned torn = 0; torn < 2; torn++) {
        struct nvm_header h = read_copy(shm_path, torn);
        h.npages ^= 4;
        write_at(shm_path, (off_t)torn * NVM_HDR_COPY_STRIDE, &h, sizeof(h));
        nvm_expect(&c, NVM_OK, NVM_PREV_CLEAN, NULL);
    }
    /* A copy from a later open (higher count) wins over an older one,
     * whichever slot holds it: here the later one says dirty. */
    struct nvm_header older = read_copy(shm_path, 0), newer;
    struct nvm_region *r = open_ok(&c);
    newer = read_copy(shm_path, 0);
    nvm_close(r);
    CHECK_UEQ(newer.open_count, older.open_count + 1);
    CHECK_UEQ(newer.flags & NVM_HDR_DIRTY, NVM_HDR_DIRTY);
    for (unsigned slot = 0; slot < 2; slot++) {
        write_at(shm_path, (off_t)slot * NVM_HDR_COPY_STRIDE, &newer, sizeof(newer));
        write_at(shm_path, (off_t)(1 - slot) * NVM_HDR_COPY_STRIDE, &older,
                 sizeof(older));
        nvm_expect(&c, NVM_OK, NVM_PREV_DIRTY, NULL);
        CHECK_UEQ(read_copy(shm_path, 1 - slot).open_count, newer.open_count + 1);
    }
    struct nvm_header h;

    /* Both copies damaged. */
    for (unsigned i = 0; i < 2; i++) {
        h = read_copy(shm_path, i);
        h.page_size ^= 256;
        write_at(shm_path, (off_t)i * NVM_HDR_COPY_STRIDE, &h, sizeof(h));
    }
    nvm_expect(&c, NVM_ERR_NOT_OURS, 0, "damaged");
    g = c;
    g.reformat = true;
    nvm_expect(&g, NVM_OK, NVM_PREV_OTHER, NULL);

    /* Another format version (version 1 had one copy at offset 0). */
    h = read_copy(shm_path, 0);
    h.version = 1;
    write_at(shm_path, 0, &h, sizeof(h));
    static const unsigned char zero[NVM_HDR_COPY_STRIDE];
    write_at(shm_path, NVM_HDR_COPY_STRIDE, zero, sizeof(zero));
    nvm_expect(&c, NVM_ERR_NOT_OURS, 0, "format version 1");

    /* Foreign data anywhere in the header area. */
    unsigned char junk[NVM_HDR_COPY_STRIDE];
    for (size_t i = 0; i < sizeof(junk); i++)
        junk[i] = (unsigned char)unit_rand();
    write_at(shm_path, 0, junk, sizeof(junk));
    nvm_expect(&c, NVM_ERR_NOT_OURS, 0, "not a tac-memcached NVM tier");
    write_at(shm_path, 0, zero, sizeof(zero));
    write_at(shm_path, NVM_DATA_OFFSET - 9, "extstore", 8);
    nvm_expect(&c, NVM_ERR_NOT_OURS, 0, "not a tac-memcached NVM tier");
    nvm_expect(&g, NVM_OK, NVM_PREV_OTHER, NULL);
    nvm_expect(&c, NVM_OK, NVM_PREV_CLEAN, NULL);

    /* Zeros in the header area but data further on: refused.  Zeros
     * throughout: formatted. */
    unlink(shm_path);
    fd = open(shm_path, O_RDWR | O_CREAT, 0600);
    CHECK(fd >= 0 && ftruncate(fd, 8 * MB) == 0);
    CHECK(pwrite(fd, "x", 1, NVM_DATA_OFFSET + 300 * KB) == 1);
    close(fd);
    nvm_expect(&c, NVM_ERR_NOT_OURS, 0, "not a tac-memcached NVM tier");
    fd = open(shm_path, O_RDWR);
    CHECK(fd >= 0 && pwrite(fd, "\0", 1, NVM_DATA_OFFSET + 300 * KB) == 1);
    close(fd);
    nvm_expect(&c, NVM_OK, NVM_PREV_NONE, NULL);

    /* A short foreign file: refused, not resized. */
    unlink(shm_path);
    fd = open(shm_path, O_RDWR | O_CREAT, 0600);
    CHECK(fd >= 0 && write(fd, "hello\n", 6) == 6);
    close(fd);
    nvm_expect(&c, NVM_ERR_NOT_OURS, 0, "not a tac-memcached NVM tier");
    unlink(shm_path);
}

static void test_tmp_file_backing(void)
{
    struct nvm_config c = base_cfg(tmp_path, 4 * MB);
    unlink(tmp_path);
    struct nvm_region *r = open_ok(&c);
    struct nvm_info in;
    nvm_get_info(r, &in);
    CHECK_STR_EQ(in.backing, file_backing(tmp_path));
    uint64_t ref = nvm_alloc(r, 1000, 0);
    CHECK(ref != 0);
    char w[1000], rd[1000];
    uint64_t rng = unit_rand() | 1;
    fill_random(w, sizeof(w), &rng);
    nvm_write(r, ref, 0, w, sizeof(w));
    nvm_drain(r);
    nvm_read(r, ref, 0, rd, sizeof(rd));
    CHECK_MEM_EQ(w, rd, sizeof(w));
    nvm_close(r);
    /* nvm_close made the data durable in the file. */
    int fd = open(tmp_path, O_RDONLY);
    CHECK(fd >= 0);
    CHECK_EQ(pread(fd, rd, sizeof(rd), (off_t)ref), (ssize_t)sizeof(rd));
    close(fd);
    CHECK_MEM_EQ(w, rd, sizeof(w));
    CHECK_UEQ(read_header(tmp_path).flags & NVM_HDR_DIRTY, 0);
    unlink(tmp_path);
}

static void test_numa_backing(void)
{
    struct nvm_config c = base_cfg("numa:0", 4 * MB);
    struct nvm_region *r = NULL;
    enum nvm_status st = nvm_open(&c, &r);
    if (st == NVM_ERR_NUMA && (errno == EPERM || errno == ENOSYS)) {
        fprintf(stderr, "    skipped: mbind not permitted here (%s)\n",
                strerror(errno));
        return;
    }
    CHECK_EQ(st, NVM_OK);
    struct nvm_info in;
    nvm_get_info(r, &in);
    CHECK_STR_EQ(in.backing, "numa");
    CHECK(!in.is_pmem);
    CHECK_EQ(in.numa_node, 0);
    CHECK_UEQ(in.capacity, 4 * MB);
    uint64_t ref = nvm_alloc(r, 3000, 0);
    CHECK(ref != 0);
    char w[3000], rd[3000];
    uint64_t rng = unit_rand() | 1;
    fill_random(w, sizeof(w), &rng);
    nvm_write(r, ref, 0, w, sizeof(w));
    nvm_drain(r);
    nvm_read(r, ref, 0, rd, sizeof(rd));
    CHECK_MEM_EQ(w, rd, sizeof(w));
    nvm_free(r, ref);
    nvm_close(r);
}

/* ---- Geometry and allocation --------------------------------------------- */

static void test_class_sizes(void)
{
    struct nvm_config c = base_cfg(shm_path, 4 * MB);
    c.slot_max = 100000;
    c.page_size = 0;                        /* default 1 MB */
    struct nvm_region *r = open_ok(&c);
    unsigned n = nvm_nclasses(r);
    CHECK(n > 5);
    CHECK_UEQ(nvm_class_slot_size(r, 1), 256);
    CHECK_UEQ(nvm_class_slot_size(r, n), 100096);   /* 100000 rounded up */
    CHECK_UEQ(nvm_class_slot_size(r, 0), 0);
    CHECK_UEQ(nvm_class_slot_size(r, n + 1), 0);
    for (unsigned k = 1; k <= n; k++) {
        size_t sz = nvm_class_slot_size(r, k);
        CHECK_UEQ(sz % NVM_SLOT_ALIGN, 0);
        if (k > 1) {
            size_t prev = nvm_class_slot_size(r, k - 1);
            CHECK(sz > prev);
            CHECK(k == n || sz >= prev * 1.25);
        }
        CHECK_UEQ(nvm_class_of_size(r, sz), k);
        CHECK_UEQ(nvm_class_of_size(r, sz - 1), k);
        if (k < n)
            CHECK_UEQ(nvm_class_of_size(r, sz + 1), k + 1);
        struct nvm_class_info ci;
        nvm_class_info(r, k, &ci);
        CHECK_UEQ(ci.slot_size, sz);
        CHECK_UEQ(ci.slots_per_page, MB / sz);
    }
    CHECK_UEQ(nvm_class_of_size(r, 0), 1);
    CHECK_UEQ(nvm_class_of_size(r, 100096 + 1), 0);
    CHECK_UEQ(nvm_alloc(r, 100096 + 1, 0), 0);
    nvm_close(r);

    /* page_size grows to fit slot_max. */
    c.slot_max = 3 * MB;
    c.size = 16 * MB;
    r = open_ok(&c);
    struct nvm_info in;
    nvm_get_info(r, &in);
    CHECK_UEQ(in.page_size, 3 * MB);
    CHECK_UEQ(nvm_class_slot_size(r, nvm_nclasses(r)), 3 * MB);
    nvm_close(r);
    unlink(shm_path);
}

static void test_alloc_until_full(void)
{
    struct nvm_config c = base_cfg(shm_path, 4 * MB);
    struct nvm_region *r = open_ok(&c);
    struct nvm_info in;
    nvm_get_info(r, &in);
    unsigned cls = nvm_class_of_size(r, 5000);
    size_t sz = nvm_class_slot_size(r, cls);
    uint64_t per_page = (256 * KB) / sz;
    uint64_t total = in.pages_total * per_page;
    uint64_t *refs = calloc(total, sizeof(*refs));
    CHECK(refs != NULL);

    for (uint64_t i = 0; i < total; i++) {
        refs[i] = nvm_alloc(r, 5000, 0);
        CHECK(refs[i] != 0);
        CHECK_UEQ(refs[i] % NVM_SLOT_ALIGN, 0);
        CHECK(refs[i] >= NVM_DATA_OFFSET);
        CHECK(refs[i] + sz <= in.capacity);
        CHECK_UEQ(nvm_class_of_ref(r, refs[i]), cls);
        CHECK_UEQ(nvm_slot_size(r, refs[i]), sz);
        if (i > 0)
            CHECK(refs[i] != refs[i - 1]);
    }
    /* Exactly at capacity: no slot in this class, no page for another. */
    CHECK_UEQ(nvm_alloc(r, 5000, 0), 0);
    CHECK_UEQ(nvm_alloc(r, 100, 0), 0);
    CHECK_UEQ(nvm_free_pages(r), 0);
    CHECK_UEQ(nvm_free_slots(r, cls, 0), 0);
    struct nvm_class_info ci;
    nvm_class_info(r, cls, &ci);
    CHECK_UEQ(ci.slots_used, total);
    CHECK_UEQ(ci.pages, in.pages_total);
    CHECK_UEQ(ci.alloc_fails, 1);

    /* No two slots overlap. */
    uint64_t *sorted = malloc(total * sizeof(*sorted));
    CHECK(sorted != NULL);
    memcpy(sorted, refs, total * sizeof(*sorted));
    qsort(sorted, total, sizeof(*sorted), cmp_u64);
    for (uint64_t i = 1; i < total; i++)
        CHECK(sorted[i] >= sorted[i - 1] + sz);
    free(sorted);

    /* Free + realloc: LIFO reuse of exactly the freed slots. */
    nvm_free(r, refs[7]);
    nvm_free(r, refs[3]);
    CHECK_UEQ(nvm_free_slots(r, cls, 0), 2);
    CHECK_UEQ(nvm_alloc(r, sz - 10, 0), refs[3]);
    CHECK_UEQ(nvm_alloc(r, sz, 0), refs[7]);
    CHECK_UEQ(nvm_alloc(r, 5000, 0), 0);

    for (uint64_t i = 0; i < total; i++)
        nvm_free(r, refs[i]);
    nvm_get_info(r, &in);
    CHECK_UEQ(in.slots_used, 0);
    CHECK_UEQ(in.bytes_used, 0);
    CHECK_UEQ(nvm_free_slots(r, cls, 0), total);
    nvm_free(r, 0);                         /* no-op */

    /* Every page belongs to the 5000 B class and all its slots are free:
     * another class takes whole free pages over (page_reuse), and the
     * 5000 B class keeps the rest, never a slot in a page it gave away. */
    unsigned small = nvm_class_of_size(r, 100);
    uint64_t sper = (256 * KB) / nvm_class_slot_size(r, small);
    uint64_t want = 2 * sper + 1;           /* three pages */
    uint64_t *srefs = calloc(want, sizeof(*srefs));
    CHECK(srefs != NULL);
    usleep(2000);       /* the fruitless search above holds reuse off 1 ms */
    for (uint64_t i = 0; i < want; i++) {
        srefs[i] = nvm_alloc(r, 100, 0);
        CHECK(srefs[i] != 0);
        CHECK_UEQ(nvm_class_of_ref(r, srefs[i]), small);
    }
    nvm_get_info(r, &in);
    CHECK_UEQ(in.pages_reused, 3);
    nvm_class_info(r, cls, &ci);
    CHECK_UEQ(ci.pages, in.pages_total - 3);
    CHECK_UEQ(nvm_free_slots(r, cls, 0), total - 3 * per_page);
    for (uint64_t i = 0; i < total - 3 * per_page; i++) {
        refs[i] = nvm_alloc(r, 5000, 0);
        CHECK(refs[i] != 0);
        CHECK_UEQ(nvm_class_of_ref(r, refs[i]), cls);
    }
    CHECK_UEQ(nvm_alloc(r, 5000, 0), 0);    /* no whole page of `small` is free */
    for (uint64_t i = 0; i < want; i++)
        nvm_free(r, srefs[i]);
    for (uint64_t i = 0; i < total - 3 * per_page; i++)
        nvm_free(r, refs[i]);
    nvm_get_info(r, &in);
    CHECK_UEQ(in.slots_used, 0);
    free(srefs);
    free(refs);
    nvm_close(r);
    unlink(shm_path);
}

/* The page mover's side: with every page in one class, partly used, a
 * page of another class comes only from draining one.  nvm_drain_begin
 * picks the page with the fewest live slots, nvm_drain_live lists exactly
 * them, none of its slots is handed out while it drains, and the free of
 * its last live slot hands it to the class that needs a page.  An abort
 * gives the free slots back. */
static void test_drain_page(void)
{
    struct nvm_config c = base_cfg(shm_path, 4 * MB);
    struct nvm_region *r = open_ok(&c);
    struct nvm_info in;
    nvm_get_info(r, &in);
    unsigned cls = nvm_class_of_size(r, 5000), small = nvm_class_of_size(r, 100);
    size_t sz = nvm_class_slot_size(r, cls);
    uint64_t per_page = (256 * KB) / sz, total = in.pages_total * per_page;
    uint64_t *refs = calloc(total, sizeof(*refs));
    CHECK(refs != NULL);
    unsigned char *fill = malloc(sz);
    CHECK(fill != NULL);
    memset(fill, 0xA5, sz);
    for (uint64_t i = 0; i < total; i++) {
        refs[i] = nvm_alloc(r, 5000, 0);
        CHECK(refs[i] != 0);
        nvm_write(r, refs[i], 0, fill, sz);     /* bytes a crash scan could read */
    }
    nvm_drain(r);
    CHECK(!nvm_drain_begin(r, small, false));      /* every slot is live */
    /* The page of refs[0] keeps 3 live slots, every other page half. */
    uint64_t page0 = (refs[0] - NVM_DATA_OFFSET) / (256 * KB), live0[3], n0 = 0;
    for (uint64_t i = 0; i < total; i++) {
        uint64_t pg = (refs[i] - NVM_DATA_OFFSET) / (256 * KB);
        bool keep = pg == page0 ? n0 < 3 : i % 2 == 0;
        if (keep && pg == page0)
            live0[n0++] = refs[i];
        if (!keep) {
            nvm_free(r, refs[i]);
            refs[i] = 0;
        }
    }
    CHECK_UEQ(n0, 3);
    usleep(2000);                           /* page_reuse's back-off */
    CHECK_UEQ(nvm_alloc(r, 100, 0), 0);     /* no page is wholly free */
    struct nvm_class_info ci;
    nvm_class_info(r, cls, &ci);
    uint64_t free_before = ci.slots_free;

    CHECK(nvm_drain_begin(r, small, false));
    CHECK(nvm_draining(r));
    uint64_t live[64];
    size_t n = nvm_drain_live(r, live, 64);
    CHECK_UEQ(n, 3);
    for (size_t i = 0; i < n; i++)
        CHECK_UEQ(live[i], live0[i]);
    nvm_class_info(r, cls, &ci);
    CHECK_UEQ(ci.slots_free, free_before - (per_page - 3));
    /* Move them: destinations never lie in the draining page. */
    for (size_t i = 0; i < n; i++) {
        uint64_t dst = nvm_alloc_free_slot(r, cls, 0);
        CHECK(dst != 0);
        CHECK((dst - NVM_DATA_OFFSET) / (256 * KB) != page0);
        for (uint64_t j = 0; j < total; j++)
            if (refs[j] == live[i])
                refs[j] = dst;
        nvm_free(r, live[i]);
        CHECK(nvm_draining(r) == (i + 1 < n));
    }
    nvm_get_info(r, &in);
    CHECK_UEQ(in.pages_drained, 1);
    CHECK_UEQ(nvm_free_pages(r), 1);
    uint64_t s = nvm_alloc(r, 100, 0);      /* the emptied page, now small's */
    CHECK(s != 0);
    CHECK_UEQ((s - NVM_DATA_OFFSET) / (256 * KB), page0);
    /* Handed to another class, it holds nothing of its earlier one. */
    const unsigned char *pg0 = nvm_ptr(r, NVM_DATA_OFFSET + page0 * 256 * KB);
    for (size_t b = 0; b < 256 * KB; b++)
        if (pg0[b] != 0) {
            CHECK_UEQ(b, 256 * KB);         /* reports the first byte left */
            break;
        }
    CHECK_UEQ(nvm_class_of_ref(r, s), small);
    CHECK_UEQ(nvm_free_pages(r), 0);

    /* Abort: the next drain's free slots go back to their class. */
    nvm_class_info(r, cls, &ci);
    free_before = ci.slots_free;
    CHECK(nvm_drain_begin(r, small, false));
    nvm_class_info(r, cls, &ci);
    CHECK(ci.slots_free < free_before);
    uint64_t still = nvm_drain_live(r, live, 64);
    CHECK(still > 0);
    uint64_t apage = (live[0] - NVM_DATA_OFFSET) / (256 * KB);
    CHECK(nvm_drain_abort(r));
    /* The abandoned page's free slots (copies moved out, or freed) have
     * their heads zeroed; its live slots are untouched. */
    for (uint64_t i = 0; i < per_page; i++) {
        uint64_t ref = NVM_DATA_OFFSET + apage * 256 * KB + i * sz;
        const unsigned char *slot = nvm_ptr(r, ref);
        bool is_live = false;
        for (uint64_t j = 0; j < still; j++)
            is_live |= live[j] == ref;
        size_t head = sz < NVM_SLOT_ALIGN ? sz : NVM_SLOT_ALIGN;
        for (size_t b = 0; b < head; b++)
            if (slot[b] != (is_live ? 0xA5 : 0)) {
                CHECK_UEQ(slot[b], is_live ? 0xA5 : 0);
                break;
            }
    }
    CHECK(!nvm_draining(r));
    nvm_class_info(r, cls, &ci);
    CHECK_UEQ(ci.slots_free, free_before);
    CHECK_UEQ(nvm_drain_live(r, live, 64), 0);

    nvm_free(r, s);
    for (uint64_t i = 0; i < total; i++)
        nvm_free(r, refs[i]);
    nvm_get_info(r, &in);
    CHECK_UEQ(in.slots_used, 0);
    free(refs);
    free(fill);
    nvm_close(r);
    unlink(shm_path);
}

static void test_class_and_ref_checks(void)
{
    struct nvm_config c = base_cfg(shm_path, 4 * MB);
    struct nvm_region *r = open_ok(&c);
    uint64_t a = nvm_alloc(r, 700, 0);      /* class of 768 */
    CHECK(a != 0);
    CHECK_UEQ(nvm_slot_size(r, a), 768);
    CHECK_UEQ(nvm_class_of_ref(r, 0), 0);
    CHECK_UEQ(nvm_class_of_ref(r, a + 256), 0);     /* inside a slot */
    CHECK_UEQ(nvm_class_of_ref(r, a + 1), 0);
    CHECK_UEQ(nvm_class_of_ref(r, a + 256 * KB), 0); /* page not handed out */
    CHECK_UEQ(nvm_class_of_ref(r, 1ull << 40), 0);
    CHECK_UEQ(nvm_slot_size(r, a + 256), 0);
    CHECK_UEQ(nvm_alloc_class(r, 0, 0), 0);
    CHECK_UEQ(nvm_alloc_class(r, nvm_nclasses(r) + 1, 0), 0);
    nvm_free(r, a);
    nvm_close(r);
    unlink(shm_path);
}

/* A CLOCK hand's walk: every slot of a class's pages in address order,
 * once per lap, with the wrap reported; other classes' pages skipped.
 * nvm_peek reads any slot, allocated or not, and stops at the region's
 * end. */
static void test_class_walk_and_peek(void)
{
    struct nvm_config c = base_cfg(shm_path, 4 * MB);
    struct nvm_region *r = open_ok(&c);
    unsigned cls = nvm_class_of_size(r, 1000);     /* 1024 B slots */
    unsigned other = nvm_class_of_size(r, 300);
    CHECK(cls != 0 && other != 0 && cls != other);
    bool wrapped = false;
    CHECK_UEQ(nvm_class_next(r, cls, 0, &wrapped), 0);   /* no page yet */
    CHECK_UEQ(nvm_class_next(r, 0, 0, &wrapped), 0);
    CHECK_UEQ(nvm_class_next(r, nvm_nclasses(r) + 1, 0, &wrapped), 0);
    /* Pages of cls, then one of another class, then cls again. */
    size_t per = 256 * KB / 1024;
    uint64_t first = nvm_alloc_class(r, cls, 0);
    for (size_t i = 1; i < per; i++)
        CHECK(nvm_alloc_class(r, cls, 0) != 0);
    CHECK(nvm_alloc_class(r, other, 0) != 0);
    uint64_t last = 0;
    for (size_t i = 0; i < per; i++)
        last = nvm_alloc_class(r, cls, 0);
    CHECK(last != 0);
    /* A lap from the start sees 2 * per slots of cls, in order. */
    uint64_t at = 0, prev = 0;
    size_t seen = 0;
    wrapped = false;
    for (;;) {
        at = nvm_class_next(r, cls, at, &wrapped);
        CHECK(at != 0);
        if (wrapped)
            break;
        CHECK_UEQ(nvm_class_of_ref(r, at), cls);
        CHECK(at > prev);
        prev = at;
        seen++;
    }
    CHECK_UEQ(seen, 2 * per);
    CHECK_UEQ(at, first);                   /* the wrap lands on the first slot */
    CHECK_UEQ(prev, last);
    /* A slot's bytes, free or not, through nvm_peek. */
    char w[64], got[64];
    memset(w, 'x', sizeof(w));
    nvm_write(r, first, 0, w, sizeof(w));
    nvm_free(r, first);
    memset(got, 0, sizeof(got));
    CHECK_UEQ(nvm_peek(r, first, 0, got, sizeof(got)), sizeof(got));
    CHECK(memcmp(got, w, sizeof(w)) == 0);
    struct nvm_info info;
    nvm_get_info(r, &info);
    CHECK_UEQ(nvm_peek(r, info.capacity - 16, 0, got, sizeof(got)), 16);
    CHECK_UEQ(nvm_peek(r, info.capacity, 0, got, sizeof(got)), 0);
    CHECK_UEQ(nvm_peek(r, 0, 0, got, sizeof(got)), 0);      /* the header */
    nvm_close(r);
    unlink(shm_path);
}

static void test_partition_stealing(void)
{
    /* 4 partitions, 2 pages of 4 slots of 64 KB. */
    struct nvm_config c = base_cfg(shm_path, NVM_DATA_OFFSET + 2 * 256 * KB);
    c.partitions = 4;
    struct nvm_region *r = open_ok(&c);
    CHECK_EQ(nvm_partitions(r), 4);
    unsigned cls = nvm_class_of_size(r, 64 * KB);
    CHECK_UEQ(nvm_class_slot_size(r, cls), 64 * KB);

    uint64_t p0 = nvm_alloc(r, 64 * KB, 0);         /* page 0 -> part 0 */
    CHECK_UEQ(nvm_free_slots(r, cls, 0), 3);
    uint64_t p1[4];
    for (int i = 0; i < 4; i++) {                   /* page 1 -> part 1 */
        p1[i] = nvm_alloc(r, 64 * KB, 1);
        CHECK(p1[i] != 0);
        CHECK_UEQ(p1[i] / (256 * KB), (p0 + 256 * KB) / (256 * KB));
    }
    CHECK_UEQ(nvm_free_pages(r), 0);
    CHECK_UEQ(nvm_free_slots(r, cls, 1), 0);

    /* Part 1 is starved and no page is left: it steals from part 0
     * (after finding 2 and 3 empty); part 5 means part 1 too. */
    uint64_t s = nvm_alloc(r, 64 * KB, 5);
    CHECK(s != 0);
    CHECK_UEQ((s - NVM_DATA_OFFSET) / (256 * KB), 0);   /* page 0 */
    CHECK_UEQ(nvm_free_slots(r, cls, 0), 2);
    struct nvm_class_info ci;
    nvm_class_info(r, cls, &ci);
    CHECK_UEQ(ci.steals, 1);
    CHECK_UEQ(ci.slots_free, 2);
    CHECK_UEQ(ci.pages, 2);

    /* A stolen slot goes home to the partition that owns its page. */
    nvm_free(r, s);
    CHECK_UEQ(nvm_free_slots(r, cls, 0), 3);
    CHECK_UEQ(nvm_free_slots(r, cls, 1), 0);
    nvm_free(r, p1[2]);
    CHECK_UEQ(nvm_free_slots(r, cls, 1), 1);
    CHECK_UEQ(nvm_alloc(r, 64 * KB, 1), p1[2]);     /* own list first */

    /* Partition 2 drains part 0 (p+2 = 0 after 3), then nothing is left. */
    for (int i = 0; i < 3; i++)
        CHECK(nvm_alloc(r, 64 * KB, 2) != 0);
    CHECK_UEQ(nvm_alloc(r, 64 * KB, 2), 0);
    nvm_class_info(r, cls, &ci);
    CHECK_UEQ(ci.steals, 4);
    CHECK_UEQ(ci.slots_used, 8);
    CHECK_UEQ(ci.slots_free, 0);
    nvm_close(r);
    unlink(shm_path);
}

/* ---- Access --------------------------------------------------------------- */

static void test_write_read_roundtrip(void)
{
    struct nvm_config c = base_cfg(shm_path, 64 * MB);
    c.partitions = 3;
    struct nvm_region *r = open_ok(&c);
    uint64_t rng = unit_rand() | 1;
    enum { N = 200 };
    uint64_t refs[N];
    size_t lens[N];
    static unsigned char data[N][64 * KB], back[64 * KB];

    for (int i = 0; i < N; i++) {
        lens[i] = 1 + unit_rand_r(&rng) % (64 * KB);
        refs[i] = nvm_alloc(r, lens[i], i);
        CHECK(refs[i] != 0);
        CHECK(nvm_slot_size(r, refs[i]) >= lens[i]);
        fill_random(data[i], lens[i], &rng);
        /* Write in two pieces at an unaligned split. */
        size_t cut = unit_rand_r(&rng) % (lens[i] + 1);
        nvm_write(r, refs[i], 0, data[i], cut);
        nvm_write(r, refs[i], cut, data[i] + cut, lens[i] - cut);
    }
    nvm_drain(r);
    for (int i = 0; i < N; i++) {
        nvm_read(r, refs[i], 0, back, lens[i]);
        CHECK_MEM_EQ(back, data[i], lens[i]);
        CHECK_MEM_EQ(nvm_ptr(r, refs[i]), data[i], lens[i]);
        size_t off = unit_rand_r(&rng) % lens[i];
        nvm_read(r, refs[i], off, back, lens[i] - off);
        CHECK_MEM_EQ(back, data[i] + off, lens[i] - off);
    }
    for (int i = 0; i < N; i++)
        nvm_free(r, refs[i]);
    nvm_close(r);
    unlink(shm_path);
}

/* The allocator keeps its metadata in DRAM: alloc and free leave every
 * byte of the mapping (header included) as it was. */
static void test_free_writes_nothing(void)
{
    enum { RSZ = 8 * MB };
    struct nvm_config c = base_cfg(shm_path, RSZ);
    c.partitions = 2;
    struct nvm_region *r = open_ok(&c);
    uint64_t rng = unit_rand() | 1;
    enum { N = 300 };
    uint64_t refs[N];
    unsigned char buf[2048];

    for (int i = 0; i < N; i++) {
        size_t len = 1 + unit_rand_r(&rng) % sizeof(buf);
        refs[i] = nvm_alloc(r, len, i);
        CHECK(refs[i] != 0);
        fill_random(buf, len, &rng);
        nvm_write(r, refs[i], 0, buf, len);
    }
    nvm_drain(r);
    unsigned char *before = malloc(RSZ), *after = malloc(RSZ);
    CHECK(before != NULL && after != NULL);
    int fd = open(shm_path, O_RDONLY);
    CHECK(fd >= 0);
    CHECK_EQ(pread(fd, before, RSZ, 0), (ssize_t)(RSZ));
    for (int i = 0; i < N; i += 2)
        nvm_free(r, refs[i]);
    for (int i = 0; i < N / 4; i++)         /* reuse without writing */
        CHECK(nvm_alloc(r, 1 + unit_rand_r(&rng) % sizeof(buf), i) != 0);
    for (int i = 1; i < N; i += 2)
        nvm_free(r, refs[i]);
    CHECK_EQ(pread(fd, after, RSZ, 0), (ssize_t)(RSZ));
    close(fd);
    CHECK_MEM_EQ(before, after, RSZ);
    free(before);
    free(after);
    nvm_close(r);
    unlink(shm_path);
}

static uint64_t time_read(struct nvm_region *r, uint64_t ref, size_t off,
                          size_t len)
{
    static char buf[4096];
    struct timespec a, b;
    clock_gettime(CLOCK_MONOTONIC, &a);
    nvm_read(r, ref, off, buf, len);
    clock_gettime(CLOCK_MONOTONIC, &b);
    return elapsed_ns(&a, &b);
}

static void test_latency_emulation(void)
{
    struct nvm_config c = base_cfg(shm_path, 2 * MB);
    c.read_ns = 2000;
    c.write_ns = 3000;
    struct nvm_region *r = open_ok(&c);
    struct nvm_info in;
    nvm_get_info(r, &in);
    CHECK_EQ(in.read_ns, 2000);
    CHECK_EQ(in.write_ns, 3000);
    uint64_t ref = nvm_alloc(r, 2048, 0);
    CHECK(ref != 0);

    CHECK(time_read(r, ref, 0, 1024) >= 8000);      /* 4 blocks */
    CHECK(time_read(r, ref, 200, 100) >= 4000);     /* crosses 256: 2 */
    CHECK(time_read(r, ref, 256, 256) >= 2000);     /* exactly 1 */
    CHECK(time_read(r, ref, 1, 1024) >= 10000);     /* 5 blocks */

    char w[1024] = { 0 };
    struct timespec a, b;
    clock_gettime(CLOCK_MONOTONIC, &a);
    nvm_write(r, ref, 0, w, sizeof(w));
    clock_gettime(CLOCK_MONOTONIC, &b);
    CHECK(elapsed_ns(&a, &b) >= 12000);
    clock_gettime(CLOCK_MONOTONIC, &a);
    nvm_charge_read(r, ref, 0, 512);
    clock_gettime(CLOCK_MONOTONIC, &b);
    CHECK(elapsed_ns(&a, &b) >= 4000);
    nvm_close(r);

    /* Off by default: the fastest of 1000 reads of 1 KB is far below the
     * 8 us that 4 emulated blocks would cost (the minimum ignores
     * preemption and sanitizer noise). */
    c.read_ns = c.write_ns = 0;
    r = open_ok(&c);
    ref = nvm_alloc(r, 2048, 0);
    uint64_t best = UINT64_MAX;
    for (int i = 0; i < 1000; i++) {
        uint64_t t = time_read(r, ref, 0, 1024);
        best = t < best ? t : best;
    }
    CHECK(best < 4000);
    nvm_close(r);
    unlink(shm_path);
}

/* ---- Stats ---------------------------------------------------------------- */

static void test_info_counters(void)
{
    struct nvm_config c = base_cfg(shm_path, 4 * MB);
    c.partitions = 2;
    struct nvm_region *r = open_ok(&c);
    struct nvm_info in;
    nvm_get_info(r, &in);
    CHECK_UEQ(in.pages_used, 0);
    CHECK_UEQ(in.slots_used, 0);
    CHECK_UEQ(in.bytes_used, 0);
    CHECK_UEQ(nvm_free_pages(r), in.pages_total);
    CHECK(in.dram_bytes > 0);
    CHECK_EQ(in.partitions, 2);
    CHECK_UEQ(in.nclasses, nvm_nclasses(r));

    uint64_t a = nvm_alloc(r, 300, 0);      /* 512 B class, part 0 */
    uint64_t b = nvm_alloc(r, 512, 1);      /* same class, part 1 */
    uint64_t d = nvm_alloc(r, 10000, 0);
    CHECK(a && b && d);
    unsigned c512 = nvm_class_of_size(r, 512);
    size_t big = nvm_slot_size(r, d);
    nvm_get_info(r, &in);
    CHECK_UEQ(in.pages_used, 3);
    CHECK_UEQ(nvm_free_pages(r), in.pages_total - 3);
    CHECK_UEQ(in.slots_used, 3);
    CHECK_UEQ(in.bytes_used, 512 + 512 + big);

    struct nvm_class_info ci;
    nvm_class_info(r, c512, &ci);
    CHECK_UEQ(ci.slot_size, 512);
    CHECK_UEQ(ci.slots_per_page, 256 * KB / 512);
    CHECK_UEQ(ci.pages, 2);
    CHECK_UEQ(ci.slots_used, 2);
    CHECK_UEQ(ci.slots_free, 2 * (256 * KB / 512) - 2);
    CHECK_UEQ(nvm_free_slots(r, c512, 0), 256 * KB / 512 - 1);
    CHECK_UEQ(nvm_free_slots(r, c512, 3), 256 * KB / 512 - 1);  /* 3 % 2 */
    CHECK_UEQ(ci.steals, 0);
    CHECK_UEQ(nvm_free_slots(r, 0, 0), 0);
    nvm_class_info(r, 0, &ci);
    CHECK_UEQ(ci.slot_size, 0);

    nvm_free(r, a);
    nvm_free(r, d);
    nvm_get_info(r, &in);
    CHECK_UEQ(in.slots_used, 1);
    CHECK_UEQ(in.bytes_used, 512);
    CHECK_UEQ(in.pages_used, 3);            /* pages stay with their class */
    nvm_free(r, b);
    nvm_close(r);
    unlink(shm_path);
}

/* ---- Errors --------------------------------------------------------------- */

static enum nvm_status open_status(const struct nvm_config *c)
{
    struct nvm_region *r = (struct nvm_region *)&r;    /* must be reset */
    enum nvm_status st = nvm_open(c, &r);
    if (st == NVM_OK)
        nvm_close(r);
    else
        CHECK(r == NULL);
    return st;
}

static void test_bad_inputs(void)
{
    struct nvm_config c = base_cfg(shm_path, 4 * MB);
    struct stat sb;

    unlink(shm_path);
    c.size = NVM_DATA_OFFSET + 256 * KB - 1;        /* no room for a page */
    CHECK_EQ(open_status(&c), NVM_ERR_ARG);
    CHECK(stat(shm_path, &sb) != 0);                /* nothing created */
    c.size = 4 * MB;

    c.path = "/dev/shm/no-such-dir-tac-nvm/region";
    CHECK_EQ(open_status(&c), NVM_ERR_OPEN);
    c.path = shm_path;
    c.size = 0;                                     /* must exist then */
    CHECK_EQ(open_status(&c), NVM_ERR_OPEN);
    c.path = "/dev/shm";                            /* a directory */
    CHECK_EQ(open_status(&c), NVM_ERR_OPEN);
    c.path = NULL;
    CHECK_EQ(open_status(&c), NVM_ERR_ARG);
    c.path = "";
    CHECK_EQ(open_status(&c), NVM_ERR_ARG);

    /* An existing file too small to format, mapped as it is. */
    int fd = open(shm_path, O_RDWR | O_CREAT | O_TRUNC, 0600);
    CHECK(fd >= 0);
    CHECK(ftruncate(fd, 64 * KB) == 0);
    close(fd);
    c.path = shm_path;
    CHECK_EQ(open_status(&c), NVM_ERR_FORMAT);
    unlink(shm_path);

    c.size = 4 * MB;
    c.path = "numa:99";
    CHECK_EQ(open_status(&c), NVM_ERR_NUMA);
    c.path = "numa:1023";
    CHECK_EQ(open_status(&c), NVM_ERR_NUMA);
    c.path = "numa:abc";
    CHECK_EQ(open_status(&c), NVM_ERR_ARG);
    c.path = "numa:-1";
    CHECK_EQ(open_status(&c), NVM_ERR_ARG);
    c.path = "numa:";
    CHECK_EQ(open_status(&c), NVM_ERR_ARG);
    c.path = "numa:0";
    c.size = 0;                                     /* needs a size */
    CHECK_EQ(open_status(&c), NVM_ERR_ARG);

    c = base_cfg(shm_path, 4 * MB);
    c.partitions = NVM_MAX_PARTITIONS + 1;
    CHECK_EQ(open_status(&c), NVM_ERR_ARG);
    c.partitions = -1;
    CHECK_EQ(open_status(&c), NVM_ERR_ARG);
    c = base_cfg(shm_path, 4 * MB);
    c.factor = 1.0;
    CHECK_EQ(open_status(&c), NVM_ERR_ARG);
    c.factor = 1.001;                               /* too many classes */
    CHECK_EQ(open_status(&c), NVM_ERR_ARG);
    c = base_cfg(shm_path, 4 * MB);
    c.page_size = 1000;                             /* not 256 B-aligned */
    CHECK_EQ(open_status(&c), NVM_ERR_ARG);
    CHECK(stat(shm_path, &sb) != 0);

    c = base_cfg(shm_path, 4 * MB);                 /* defaults */
    c.partitions = 0;
    c.factor = 0;
    c.slot_max = 0;
    c.page_size = 0;
    struct nvm_region *r = open_ok(&c);
    struct nvm_info in;
    nvm_get_info(r, &in);
    CHECK_EQ(in.partitions, 1);
    CHECK_UEQ(in.page_size, NVM_DEFAULT_PAGE_SIZE);
    CHECK_UEQ(nvm_class_slot_size(r, nvm_nclasses(r)), NVM_DEFAULT_PAGE_SIZE);
    nvm_close(r);
    unlink(shm_path);
    nvm_close(NULL);

    for (int st = NVM_OK; st <= NVM_ERR_FORMAT; st++)
        CHECK(nvm_strerror((enum nvm_status)st)[0] != '\0');
    CHECK(nvm_strerror((enum nvm_status)99) != NULL);
}

/* ---- Threads -------------------------------------------------------------- */

#define MT_THREADS 4
#define MT_LIVE 64
#define MT_OPS 20000

struct mt_arg {
    struct nvm_region *r;
    int id;
    uint64_t rng;
    uint64_t ok_allocs, full;
};

/* The content of a slot is a function of (seed, len), so any reader can
 * check it; the seed is stored in the first 8 bytes. */
static void mt_fill(unsigned char *buf, size_t len, uint64_t seed)
{
    uint64_t s = seed | 1;
    memcpy(buf, &seed, 8);
    for (size_t i = 8; i < len; i++)
        buf[i] = (unsigned char)unit_rand_r(&s);
}

static void *mt_worker(void *p)
{
    struct mt_arg *a = p;
    uint64_t refs[MT_LIVE] = { 0 }, seeds[MT_LIVE];
    size_t lens[MT_LIVE];
    static _Thread_local unsigned char want[8 * KB], got[8 * KB];

    for (int op = 0; op < MT_OPS; op++) {
        int k = (int)(unit_rand_r(&a->rng) % MT_LIVE);
        if (refs[k] != 0) {
            nvm_read(a->r, refs[k], 0, got, lens[k]);
            mt_fill(want, lens[k], seeds[k]);
            CHECK_MEM_EQ(got, want, lens[k]);
            nvm_free(a->r, refs[k]);
            refs[k] = 0;
            continue;
        }
        lens[k] = 8 + unit_rand_r(&a->rng) % (8 * KB - 8);
        /* Mostly the own partition, sometimes another (as an evictor). */
        int part = op % 8 ? a->id : (int)(unit_rand_r(&a->rng) % 8);
        refs[k] = nvm_alloc(a->r, lens[k], part);
        if (refs[k] == 0) {
            a->full++;
            continue;
        }
        a->ok_allocs++;
        seeds[k] = unit_rand_r(&a->rng);
        mt_fill(want, lens[k], seeds[k]);
        nvm_write(a->r, refs[k], 0, want, lens[k]);
        nvm_drain(a->r);
    }
    for (int k = 0; k < MT_LIVE; k++) {
        if (refs[k] == 0)
            continue;
        nvm_read(a->r, refs[k], 0, got, lens[k]);
        mt_fill(want, lens[k], seeds[k]);
        CHECK_MEM_EQ(got, want, lens[k]);
        nvm_free(a->r, refs[k]);
    }
    return NULL;
}

static void test_threads(void)
{
    /* Small enough that threads run out and steal; 4 partitions. */
    struct nvm_config c = base_cfg(shm_path, NVM_DATA_OFFSET + 24 * 64 * KB);
    c.partitions = MT_THREADS;
    c.page_size = 64 * KB;
    c.slot_max = 8 * KB;
    struct nvm_region *r = open_ok(&c);
    pthread_t t[MT_THREADS];
    struct mt_arg args[MT_THREADS];
    uint64_t allocs = 0, full = 0;

    for (int i = 0; i < MT_THREADS; i++) {
        args[i] = (struct mt_arg){ .r = r, .id = i, .rng = unit_rand() | 1 };
        CHECK(pthread_create(&t[i], NULL, mt_worker, &args[i]) == 0);
    }
    for (int i = 0; i < MT_THREADS; i++) {
        CHECK(pthread_join(t[i], NULL) == 0);
        allocs += args[i].ok_allocs;
        full += args[i].full;
    }
    CHECK(allocs > 0);
    struct nvm_info in;
    nvm_get_info(r, &in);
    CHECK_UEQ(in.slots_used, 0);
    CHECK_UEQ(in.bytes_used, 0);
    uint64_t steals = 0, pages = 0;
    for (unsigned k = 1; k <= nvm_nclasses(r); k++) {
        struct nvm_class_info ci;
        nvm_class_info(r, k, &ci);
        CHECK_UEQ(ci.slots_used, 0);
        CHECK_UEQ(ci.slots_free, ci.pages * ci.slots_per_page);
        steals += ci.steals;
        pages += ci.pages;
    }
    CHECK_UEQ(pages, in.pages_used);
    fprintf(stderr, "    %" PRIu64 " allocs, %" PRIu64 " full, %" PRIu64
            " steals\n", allocs, full, steals);
    nvm_close(r);
    unlink(shm_path);
}

/* Runs on exit(1) from a failed CHECK too. */
static void remove_test_files(void)
{
    unlink(shm_path);
    unlink(aux_path);
    unlink(tmp_path);
}

int main(int argc, char **argv)
{
    unit_seed_init(argc, argv);
    snprintf(shm_path, sizeof(shm_path), "/dev/shm/test_nvm.%d", (int)getpid());
    snprintf(aux_path, sizeof(aux_path), "/dev/shm/test_nvm.%d.copy",
             (int)getpid());
    snprintf(tmp_path, sizeof(tmp_path), "/tmp/test_nvm.%d", (int)getpid());
    atexit(remove_test_files);
    RUN_TEST(test_header_and_dirty_flag);
    RUN_TEST(test_refusals);
    RUN_TEST(test_tmp_file_backing);
    RUN_TEST(test_numa_backing);
    RUN_TEST(test_class_sizes);
    RUN_TEST(test_alloc_until_full);
    RUN_TEST(test_drain_page);
    RUN_TEST(test_class_and_ref_checks);
    RUN_TEST(test_class_walk_and_peek);
    RUN_TEST(test_partition_stealing);
    RUN_TEST(test_write_read_roundtrip);
    RUN_TEST(test_free_writes_nothing);
    RUN_TEST(test_latency_emulation);
    RUN_TEST(test_info_counters);
    RUN_TEST(test_bad_inputs);
    RUN_TEST(test_threads);
    fprintf(stderr, "test_nvm: ok\n");
    return 0;
}

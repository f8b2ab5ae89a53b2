/*
 * test_restart.c - the restart state file's records (tac/durable/) without
 * a server: what a graceful stop saves, the next start brings back.
 *
 * A child process plays the stopping server: it stores DRAM items of
 * every shape (keys of 8 to 250 bytes, values of 2 bytes to 200 KB, flags,
 * TTLs, kept item flags), saves the state (tac_restart_save) and commits
 * its header (tac_restart_commit), as a graceful stop does, and exits.
 * The parent then edits the file as a faulty writer could, each edit with
 * its chunk's checksum made to hold again:
 *   - one record's value loses its "\r\n";
 *   - one record carries a flag bit a save never writes;
 *   - one record's exptime lies before the epoch;
 * and starts as a restart does (tac_restart_prepare, _run, _wait).  Every
 * other key comes back with its value byte-exact, its flags, CAS and TTL;
 * the three edited ones are refused and counted (recovery_refused), and
 * nothing else is.  A state file whose header checksum fails is not used
 * at all.
 *
 * Keys, sizes and the edited records come from the printed seed (argv[1]
 * or UNIT_SEED).
 */
#include "config.h"

#include <fcntl.h>
#include <sys/wait.h>

#include "base/settings.h"
#include "base/util.h"
#include "engine/item_lock.h"
#include "engine/items.h"
#include "tac/durable.h"
#include "tac/durable/restart_int.h"
#include "tac/internal.h"
#include "unit.h"

#define MB (1024u * 1024u)
#define NKEYS 3000

static char state_path[128];
static uint32_t vlen[NKEYS];
static uint8_t klen[NKEYS];
static uint32_t ttl[NKEYS];

static void setup(void)
{
    settings_init();
    settings.maxbytes = 256 * MB;
    settings.item_size_max = 1 * MB;
    settings.memory_file = state_path;
    settings.recovery = 1;
    settings.partitions = 2;
    items_init();
    tac_config_load();
}

static int key_of(char *buf, uint32_t k)
{
    int n = snprintf(buf, 256, "restart-test:%05u:", k);
    for (; n < klen[k]; n++)
        buf[n] = (char)('a' + (k + (uint32_t)n) % 26);
    buf[n] = '\0';
    return n;
}

static void value_of(char *v, uint32_t len, uint32_t k)
{
    for (uint32_t i = 0; i + 2 < len; i++)
        v[i] = (char)('A' + (k * 31 + i * 7) % 26);
    v[len - 2] = '\r';
    v[len - 1] = '\n';
}

static void shapes(uint64_t seed)
{
    uint64_t rng = seed;
    for (uint32_t k = 0; k < NKEYS; k++) {
        klen[k] = (uint8_t)(19 + unit_rand_r(&rng) % (KEY_MAX_LENGTH - 19));
        uint64_t r = unit_rand_r(&rng) % 100;
        vlen[k] = r < 2 ? 2 : r < 60 ? 100 + (uint32_t)(unit_rand_r(&rng) % 1100)
                : r < 97 ? 1200 + (uint32_t)(unit_rand_r(&rng) % 20000)
                : 100000 + (uint32_t)(unit_rand_r(&rng) % 100000);
        ttl[k] = unit_rand_r(&rng) % 3 == 0 ? 3600 + k : 0;
    }
}

/* The child: stores, saves, commits, exits. */
static void child(void)
{
    setup();
    char key[256];
    char *v = malloc(256 * 1024);
    CHECK(v != NULL);
    for (uint32_t k = 0; k < NKEYS; k++) {
        int n = key_of(key, k);
        rel_time_t exp = ttl[k] != 0 ? mc_now() + ttl[k] : 0;
        item *it = item_alloc(key, (size_t)n, k * 3u, exp, vlen[k], 0);
        CHECK(it != NULL);
        value_of(ITEM_data(it), vlen[k], k);
        CHECK_EQ(item_store(it, STORE_SET, 0, NULL, 0), STORE_STORED);
        item_release(it);
    }
    CHECK(tac_restart_save());
    tac_restart_commit(false, 0);
    _exit(0);
}

/* Runs the child to its end: the state file is then written. */
static void run_child(void)
{
    pid_t pid = fork();
    CHECK(pid >= 0);
    if (pid == 0)
        child();
    int status;
    CHECK_EQ(waitpid(pid, &status, 0), pid);
    CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 0);
}

/* The file's records, in order: each with its offset, and its chunk's. */
struct rec_at {
    off_t chunk, rec;
    struct rs_rec r;
};

static size_t read_records(const char *buf, size_t len, struct rec_at *out, size_t max)
{
    size_t n = 0, off = RS_HDR_SIZE;
    for (;;) {
        struct rs_chunk c;
        CHECK(off + sizeof(c) <= len);
        memcpy(&c, buf + off, sizeof(c));
        if (c.len == 0)
            return n;
        CHECK_UEQ(c.crc, util_crc32c(0, buf + off + sizeof(c), c.len));
        size_t p = off + sizeof(c);
        for (uint32_t i = 0; i < c.count; i++) {
            CHECK(n < max);
            out[n].chunk = (off_t)off;
            out[n].rec = (off_t)p;
            memcpy(&out[n].r, buf + p, sizeof(out[n].r));
            p += sizeof(struct rs_rec) + out[n].r.nkey +
                 (out[n].r.tier == TIER_DRAM ? out[n].r.nbytes : 0);
            n++;
        }
        CHECK_EQ(p, off + sizeof(c) + c.len);
        off = p;
    }
}

static void fix_chunk_crc(char *buf, off_t chunk)
{
    struct rs_chunk c;
    memcpy(&c, buf + chunk, sizeof(c));
    c.crc = util_crc32c(0, buf + chunk + sizeof(c), c.len);
    memcpy(buf + chunk, &c, sizeof(c));
}

static char *slurp(size_t *len)
{
    int fd = open(state_path, O_RDONLY);
    CHECK(fd >= 0);
    off_t end = lseek(fd, 0, SEEK_END);
    CHECK(end > 0);
    char *buf = malloc((size_t)end);
    CHECK(buf != NULL);
    CHECK_EQ(pread(fd, buf, (size_t)end, 0), end);
    close(fd);
    *len = (size_t)end;
    return buf;
}

static void spill(const char *buf, size_t len)
{
    int fd = open(state_path, O_WRONLY | O_TRUNC);
    CHECK(fd >= 0);
    CHECK_EQ(write(fd, buf, len), (ssize_t)len);
    close(fd);
}

static uint32_t key_index(const char *key, size_t nkey)
{
    CHECK(nkey >= 19 && memcmp(key, "restart-test:", 13) == 0);
    return (uint32_t)strtoul(key + 13, NULL, 10);
}

static void test_records(void)
{
    run_child();

    size_t len;
    char *buf = slurp(&len);
    static struct rec_at recs[NKEYS];
    size_t n = read_records(buf, len, recs, NKEYS);
    CHECK_EQ(n, NKEYS);
    /* Every record as it was stored. */
    bool seen[NKEYS] = { false };
    for (size_t i = 0; i < n; i++) {
        const struct rs_rec *r = &recs[i].r;
        const char *key = buf + recs[i].rec + sizeof(*r);
        uint32_t k = key_index(key, r->nkey);
        CHECK(!seen[k]);
        seen[k] = true;
        CHECK_EQ(r->tier, TIER_DRAM);
        CHECK_EQ(r->nkey, klen[k]);
        CHECK_EQ(r->nbytes, vlen[k]);
        CHECK_EQ(r->flags, k * 3u);
        CHECK_EQ(r->exptime != 0, ttl[k] != 0);
        char *want = malloc(vlen[k]);
        value_of(want, vlen[k], k);
        CHECK_MEM_EQ(key + r->nkey, want, vlen[k]);
        free(want);
    }
    /* Three records edited, each chunk summed again. */
    uint64_t rng = unit_seed_value ^ 0x5eed;
    size_t bad[3];
    for (int j = 0; j < 3; j++) {
        bool again;
        do {
            bad[j] = (size_t)(unit_rand_r(&rng) % n);
            again = recs[bad[j]].r.nbytes < 2;
            for (int i = 0; i < j; i++)
                again |= bad[i] == bad[j];
        } while (again);
    }
    struct rs_rec *r0 = (struct rs_rec *)(buf + recs[bad[0]].rec);
    buf[recs[bad[0]].rec + (off_t)sizeof(*r0) + r0->nkey + r0->nbytes - 1] = 'x';
    struct rs_rec r1;
    memcpy(&r1, buf + recs[bad[1]].rec, sizeof(r1));
    r1.it_flags |= 0x8000;
    memcpy(buf + recs[bad[1]].rec, &r1, sizeof(r1));
    struct rs_rec r2;
    memcpy(&r2, buf + recs[bad[2]].rec, sizeof(r2));
    r2.exptime = -5;
    memcpy(buf + recs[bad[2]].rec, &r2, sizeof(r2));
    for (int j = 0; j < 3; j++)
        fix_chunk_crc(buf, recs[bad[j]].chunk);
    spill(buf, len);

    /* The next start. */
    setup();
    tac_restart_prepare();
    tac_restart_run();
    tac_restart_wait();
    bool refused[NKEYS] = { false };
    for (int j = 0; j < 3; j++)
        refused[key_index(buf + recs[bad[j]].rec + sizeof(struct rs_rec),
                          recs[bad[j]].r.nkey)] = true;
    char key[256];
    char *want = malloc(256 * 1024);
    CHECK(want != NULL);
    unsigned back = 0;
    for (uint32_t k = 0; k < NKEYS; k++) {
        int nk = key_of(key, k);
        enum item_miss why;
        item *it = item_get(key, (size_t)nk, &why, false);
        if (refused[k]) {
            CHECK(it == NULL);
            continue;
        }
        CHECK(it != NULL);
        back++;
        CHECK_EQ(it->nbytes, vlen[k]);
        CHECK_EQ(it->flags, k * 3u);
        value_of(want, vlen[k], k);
        CHECK_MEM_EQ(ITEM_data(it), want, vlen[k]);
        if (ttl[k] == 0) {
            CHECK_EQ(it->exptime, 0);
        } else {
            /* TTLs run on through the downtime: at most the stored one. */
            CHECK(it->exptime > mc_now() && it->exptime <= mc_now() + ttl[k] + 2);
        }
        item_release(it);
    }
    CHECK_EQ(back, NKEYS - 3);
    CHECK_EQ(__atomic_load_n(&rs.refused, __ATOMIC_RELAXED), 3);
    CHECK_EQ(__atomic_load_n(&rs.items, __ATOMIC_RELAXED), NKEYS - 3);
    free(want);
    free(buf);
}

/* A header whose checksum fails: the file is not used (and removed). */
static void test_bad_header(void)
{
    run_child();
    size_t len;
    char *buf = slurp(&len);
    struct rs_header h;
    memcpy(&h, buf, sizeof(h));
    CHECK_UEQ(h.checksum, rs_header_crc(&h));
    h.stop_time ^= 1;                   /* the sum no longer holds */
    memcpy(buf, &h, sizeof(h));
    spill(buf, len);
    free(buf);
    memset(&rs.items, 0, sizeof(rs.items));
    setup();
    tac_restart_prepare();
    tac_restart_run();
    tac_restart_wait();
    char key[256];
    int nk = key_of(key, 0);
    enum item_miss why;
    CHECK(item_get(key, (size_t)nk, &why, false) == NULL);
    CHECK(access(state_path, F_OK) != 0);
}

int main(int argc, char **argv)
{
    unit_seed_init(argc, argv);
    shapes(unit_seed_value);
    snprintf(state_path, sizeof(state_path), "/dev/shm/test-restart-%d.state", (int)getpid());
    unlink(state_path);
    RUN_TEST(test_records);
    RUN_TEST(test_bad_header);
    unlink(state_path);
    fprintf(stderr, "test_restart: ok\n");
    return 0;
}

/*
 * test_dramlog.c - the DRAM log (-o dram_log, tac/durable/dramlog.c) without a
 * server: what a crash leaves in it is replayed, through laps of cleaning.
 *
 * A child process plays the server: it opens an NVM region in a /dev/shm
 * file and the log beside it, stores items (linked in the index, as a
 * store links them) and logs each version as do_item_link does, then dies
 * with _exit, leaving the region dirty.  It writes about three times the
 * log's size over a small key space, so appends clean the tail: records
 * of replaced versions are dropped, the latest version of each key is
 * copied ahead.  The parent then opens the region and the log as a crash
 * start does and replays it: the newest record of every key holds the
 * version the child stored last, byte-exact, and no record holds a
 * version the child never wrote.  A clean close of the region is then
 * not replayed.
 *
 * Keys and value sizes come from the printed seed (argv[1] or UNIT_SEED).
 */
#include "config.h"

#include <sys/wait.h>

#include "engine/item_lock.h"
#include "engine/items.h"
#include "base/settings.h"
#include "tac/durable.h"
#include "tac/internal.h"
#include "tac/tuple.h"
#include "unit.h"
#include "unit_nvm.h"

#define MB (1024u * 1024u)
#define NKEYS 2000
#define WRITES 50000            /* ~1 KB each: about 3 laps of a 16 MB log */

static char nvm_path[128];
static uint32_t last_version[NKEYS];
static uint32_t value_len[NKEYS][4];    /* by version % 4, from the seed */

static struct nvm_region *nvm_up(void)
{
    return unit_nvm_up(nvm_path);
}

static void setup(void)
{
    settings_init();
    settings.maxbytes = 64 * MB;
    settings.item_size_max = 64 * 1024;
    settings.dram_log = 1;
    settings.dram_log_size = 16 * MB;   /* the smallest log */
    items_init();
    tac_config_load();
}

static int key_of(char *buf, uint32_t k)
{
    return snprintf(buf, 64, "dramlog-test-key:%08u:0123456789abcdef", k);
}

/* A value naming its key and version, then a pattern from both, then CRLF. */
static void value_of(char *v, uint32_t len, uint32_t k, uint32_t ver)
{
    int n = snprintf(v, len, "%u/%u/", k, ver);
    for (uint32_t i = (uint32_t)n; i + 2 < len; i++)
        v[i] = (char)('a' + (k * 7 + ver * 13 + i) % 26);
    v[len - 2] = '\r';
    v[len - 1] = '\n';
}

static uint32_t len_of(uint32_t k, uint32_t ver)
{
    return value_len[k][ver % 4];
}

/* The child: stores and logs, then dies without closing anything. */
static void child(uint64_t seed)
{
    setup();
    struct nvm_region *r = nvm_up();
    tac.nvm = r;
    CHECK(tac_dramlog_open());
    CHECK(tac_dramlog_on());
    tac_dramlog_start(false);
    uint64_t rng = seed;
    char key[64], *v = malloc(4096);
    CHECK(v != NULL);
    uint32_t version[NKEYS] = { 0 };
    for (uint32_t w = 0; w < WRITES; w++) {
        uint32_t k = (uint32_t)(unit_rand_r(&rng) % NKEYS);
        uint32_t ver = ++version[k];
        int nkey = key_of(key, k);
        uint32_t len = len_of(k, ver);
        item *it = item_alloc(key, (size_t)nkey, ver, 0, len, 0);
        CHECK(it != NULL);
        value_of(ITEM_data(it), len, k, ver);
        CHECK_EQ(item_store(it, STORE_SET, 0, NULL, 0), STORE_STORED);
        uint32_t hv = item_hash(key, (size_t)nkey);
        item_lock(hv);
        (void)tac_dramlog_item(it);
        item_unlock(hv);
        item_release(it);
    }
    _exit(0);
}

struct replayed {
    uint64_t seq[NKEYS];
    uint32_t version[NKEYS];
    uint64_t records, bad;
};

static void on_record(const char *tuple, void *arg)
{
    struct replayed *out = arg;
    struct tac_tuple_hdr h;
    memcpy(&h, tuple, sizeof(h));
    const char *key = tuple + sizeof(h), *value = key + h.nkey;
    unsigned k = 0, ver = 0;
    char want_key[64];
    out->records++;
    if (sscanf(value, "%u/%u/", &k, &ver) != 2 || k >= NKEYS || ver == 0 ||
        ver > last_version[k] || h.flags != ver ||
        key_of(want_key, k) != (int)h.nkey || memcmp(want_key, key, h.nkey) != 0 ||
        h.nbytes != len_of(k, ver)) {
        out->bad++;
        return;
    }
    char *want = malloc(h.nbytes);
    CHECK(want != NULL);
    value_of(want, h.nbytes, k, ver);
    if (memcmp(want, value, h.nbytes) != 0)
        out->bad++;
    free(want);
    if (h.seq > out->seq[k]) {
        out->seq[k] = h.seq;
        out->version[k] = ver;
    }
}

int main(int argc, char **argv)
{
    unit_seed_init(argc, argv);
    snprintf(nvm_path, sizeof(nvm_path), "/dev/shm/test-dramlog-%d.nvm", (int)getpid());
    uint64_t rng = unit_seed_value + 1;
    for (uint32_t k = 0; k < NKEYS; k++)
        for (int i = 0; i < 4; i++)
            value_len[k][i] = 200 + (uint32_t)(unit_rand_r(&rng) % 1800);
    /* The versions the child will write, drawn the same way. */
    uint64_t crng = unit_seed_value * 31 + 7;
    for (uint32_t w = 0; w < WRITES; w++)
        last_version[unit_rand_r(&crng) % NKEYS]++;

    pid_t pid = fork();
    CHECK(pid >= 0);
    if (pid == 0)
        child(unit_seed_value * 31 + 7);
    int status;
    CHECK_EQ(waitpid(pid, &status, 0), pid);
    CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 0);

    /* The crash start. */
    setup();
    struct nvm_region *r = nvm_up();
    tac.nvm = r;
    CHECK(tac_dramlog_open());
    CHECK(tac_dramlog_replayable());
    tac_dramlog_start(true);
    static struct replayed got;
    tac_dramlog_replay(on_record, &got);
    fprintf(stderr, "replayed %llu records\n", (unsigned long long)got.records);
    CHECK_EQ(got.bad, 0);
    uint32_t keys = 0;
    for (uint32_t k = 0; k < NKEYS; k++) {
        if (last_version[k] == 0)
            continue;
        keys++;
        if (got.version[k] != last_version[k])
            fprintf(stderr, "key %u: replayed version %u, last written %u\n",
                    k, got.version[k], last_version[k]);
        CHECK_EQ(got.version[k], last_version[k]);
    }
    /* Cleaning dropped what was replaced: far fewer records than writes. */
    CHECK(got.records >= keys);
    CHECK(got.records < WRITES / 2);
    tac_dramlog_close();
    nvm_close(r);

    /* A clean close: nothing to replay. */
    r = nvm_up();
    tac.nvm = r;
    CHECK(tac_dramlog_open());
    CHECK(!tac_dramlog_replayable());
    tac_dramlog_close();
    nvm_close(r);

    char path[160];
    snprintf(path, sizeof(path), "%s.dramlog", nvm_path);
    unlink(path);
    unlink(nvm_path);
    printf("test_dramlog: ok (%u keys, %llu records replayed)\n", keys,
           (unsigned long long)got.records);
    return 0;
}

/*
 * lru-sim.c - trace-driven simulator of the DRAM replacement policies
 * (TaC Fig. 12a): strict LRU, Lazy LRU, sampled LRU and ALRU.
 *
 * A seeded YCSB-style scrambled Zipfian trace (Gray et al.'s generator over
 * YCSB's item space, rank hashed with FNV-1a-64 modulo the key count, the
 * same key choice as bench/tac-bench; for a theta other than 0.99 the ranks
 * range over the key count, as YCSB has no precomputed zeta for it) is
 * replayed through each policy at
 * several cache sizes, counted in items.  A miss inserts the key, evicting
 * one item by the policy's rule when the cache is full.
 *
 * Policies:
 *   strict   every hit moves the item to the LRU head; evict the tail.
 *   lazy     Lazy LRU (doc/design.md, "The data model") with the server's own functions from
 *            lazy_lru.c: a hit calls llru_access() on the item's real
 *            access field and moves the item only when that says so (the
 *            move goes through a ring of -b entries drained in one batch,
 *            as the LRU thread drains the workers' rings); the eviction
 *            side asks llru_second_chance() about the tail item and moves
 *            it to the head instead of evicting it while that says yes.
 *   sampled/n  only every n-th access (a global counter over all accesses)
 *            moves the item it hits to the head; evict the tail.
 *   alru/k   no list (Redis's approximated LRU): each item keeps the time
 *            of its last access; to evict, sample k resident items
 *            uniformly and evict the least recently used of them.  The
 *            clock is the access index, exact: ALRU's best case (Redis's
 *            LRU clock ticks in seconds).
 *
 * Time: an access with index i happens at second T0 + i / ops_per_second
 * (-r).  Lazy LRU's readCount decays per second of idle time, so how many
 * accesses fall into one second decides which items look warm or hot: the
 * default of 200,000 gets/s is a busy but not saturated server (one
 * tac-memcached worker serves 375-540 k ops/s in bench/RESULTS.md).
 *
 * Every resident key owns a real `item` (items.h): the access field is the
 * one the server uses, the LRU links are its next/prev, the key number is
 * kept in `cas` and ALRU's last access and slot in `time` and `flags`.
 *
 * Hits are counted once the warm-up (-w, a share of the trace) is over and
 * the cache has filled; before it fills no policy evicts, so every policy
 * sees the same window at one size.
 *
 * Usage: bench/lru-sim [-k keys] [-a accesses] [-t theta] [-s seed]
 *        [-r ops_per_second] [-c pct,pct,...] [-n n,n,...] [-K k,k,...]
 *        [-b batch] [-H hot,warm] [-w warmup] [-j threads]
 */
#include "config.h"

#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "engine/items.h"
#include "engine/lazy_lru.h"

#define MAX_LIST 16
#define T0 1000u                    /* seconds on the server clock at i = 0 */

/* ---- options --------------------------------------------------------- */

static uint64_t opt_keys = 1000000;
static uint64_t opt_accesses = 10000000;
static double opt_theta = 0.99;
static uint64_t opt_seed = 1;
static uint64_t opt_ops = 200000;
static double opt_sizes[MAX_LIST] = { 1, 2, 5, 10, 20, 40 };
static int n_sizes = 6;
static double opt_n[MAX_LIST] = { 2, 10, 100 };
static int n_n = 3;
static double opt_k[MAX_LIST] = { 5 };
static int n_k = 1;
static unsigned int opt_batch = 64;
static unsigned int opt_hot = LLRU_THR_HOT_DEFAULT, opt_warm = LLRU_THR_WARM_DEFAULT;
static double opt_warmup = 0.1;
static int opt_threads = 2;

/* ---- random numbers and the trace ------------------------------------ */

static uint64_t splitmix(uint64_t *s)
{
    uint64_t z = (*s += 0x9e3779b97f4a7c15ULL);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    return z ^ (z >> 31);
}

static double rand_unit(uint64_t *s)
{
    return (double)(splitmix(s) >> 11) * (1.0 / 9007199254740992.0);
}

static uint64_t fnv1a64(uint64_t v)
{
    uint64_t h = 0xcbf29ce484222325ULL;
    for (int i = 0; i < 8; i++) {
        h ^= v & 0xff;
        h *= 0x100000001b3ULL;
        v >>= 8;
    }
    return h;
}

/* Gray et al., "Quickly generating billion-record synthetic databases". */
struct zipf {
    double n, theta, alpha, zetan, eta, half;
};

static void zipf_setup(struct zipf *z, uint64_t n, double theta)
{
    z->theta = theta;
    if (theta == 0.99) {
        /* YCSB's item space and its zeta(1e10, 0.99). */
        z->n = 1e10;
        z->zetan = 26.46902820178302;
    } else {
        z->n = (double)n;
        z->zetan = 0;
        for (uint64_t i = 1; i <= n; i++)
            z->zetan += 1.0 / pow((double)i, theta);
    }
    double zeta2 = 1.0 + 1.0 / pow(2.0, theta);
    z->alpha = 1.0 / (1.0 - theta);
    z->half = 1.0 + pow(0.5, theta);
    z->eta = (1.0 - pow(2.0 / z->n, 1.0 - theta)) / (1.0 - zeta2 / z->zetan);
}

static uint64_t zipf_rank(const struct zipf *z, uint64_t *rng)
{
    double u = rand_unit(rng), uz = u * z->zetan;
    if (uz < 1.0)
        return 0;
    if (uz < z->half)
        return 1;
    double v = z->n * pow(z->eta * u - z->eta + 1.0, z->alpha);
    return v >= z->n ? (uint64_t)z->n - 1 : (uint64_t)v;
}

static uint32_t *trace;

static void make_trace(void)
{
    struct zipf z;
    uint64_t rng = opt_seed;
    zipf_setup(&z, opt_keys, opt_theta);
    trace = malloc(opt_accesses * sizeof(*trace));
    if (trace == NULL) {
        perror("malloc trace");
        exit(1);
    }
    for (uint64_t i = 0; i < opt_accesses; i++)
        trace[i] = (uint32_t)(fnv1a64(zipf_rank(&z, &rng)) % opt_keys);
}

/* ---- one simulated cache ---------------------------------------------- */

enum policy { P_STRICT, P_LAZY, P_SAMPLED, P_ALRU };

struct job {
    enum policy policy;
    unsigned int param;         /* n for sampled, k for alru */
    double pct;
    uint64_t cap;               /* cache size in items */
    /* results */
    uint64_t counted, hits, moves, chances, evictions;
};

struct sim {
    struct job *j;
    item *pool;                 /* cap items */
    uint64_t used;
    item **where;               /* key -> resident item, or NULL */
    item head;                  /* LRU sentinel: head.next is the head */
    item **slots;               /* ALRU: resident items, dense */
    uint64_t rng;
    struct { item *it; uint32_t key; } *ring;   /* lazy: pending moves */
    unsigned int nring;
};

static inline void lru_unlink(item *it)
{
    it->prev->next = it->next;
    it->next->prev = it->prev;
}

static inline void lru_push_head(struct sim *s, item *it)
{
    it->prev = &s->head;
    it->next = s->head.next;
    s->head.next->prev = it;
    s->head.next = it;
}

static inline void lru_to_head(struct sim *s, item *it)
{
    if (s->head.next == it)
        return;
    lru_unlink(it);
    lru_push_head(s, it);
}

/* The LRU thread's batch: apply every queued move whose item is still the
 * one resident for its key. */
static void drain_ring(struct sim *s)
{
    for (unsigned int i = 0; i < s->nring; i++) {
        item *it = s->ring[i].it;
        if (s->where[s->ring[i].key] == it)
            lru_to_head(s, it);
    }
    s->nring = 0;
}

/* Chooses the victim; returns it unlinked from the policy's structures. */
static item *evict(struct sim *s, rel_time_t now)
{
    struct job *j = s->j;
    item *victim;
    if (j->policy == P_ALRU) {
        victim = NULL;
        for (unsigned int i = 0; i < j->param; i++) {
            item *c = s->slots[splitmix(&s->rng) % s->used];
            if (victim == NULL || c->time < victim->time)
                victim = c;
        }
        /* Fill its slot with the last one. */
        item *last = s->slots[s->used - 1];
        s->slots[victim->flags] = last;
        last->flags = victim->flags;
    } else {
        if (j->policy == P_LAZY) {
            /* Bounded like an evictor's walk; a second chance clears the
             * readCount, so the walk ends long before the bound. */
            for (uint64_t n = 0; n < s->used; n++) {
                item *t = s->head.prev;
                if (!llru_second_chance(t))
                    break;
                lru_to_head(s, t);
                j->chances++;
            }
        }
        victim = s->head.prev;
        lru_unlink(victim);
    }
    s->where[victim->cas] = NULL;
    s->used--;
    j->evictions++;
    return victim;
}

static void run_job(struct job *j)
{
    struct sim s;
    memset(&s, 0, sizeof(s));
    s.j = j;
    s.pool = calloc(j->cap, sizeof(item));
    s.where = calloc(opt_keys, sizeof(item *));
    if (j->policy == P_ALRU)
        s.slots = calloc(j->cap, sizeof(item *));
    if (j->policy == P_LAZY)
        s.ring = calloc(opt_batch, sizeof(*s.ring));
    if (s.pool == NULL || s.where == NULL ||
        (j->policy == P_ALRU && s.slots == NULL) ||
        (j->policy == P_LAZY && s.ring == NULL)) {
        perror("calloc");
        exit(1);
    }
    s.head.next = s.head.prev = &s.head;
    s.rng = opt_seed ^ 0x5bd1e995u ^ (j->cap << 8) ^ j->param;

    uint64_t warm = (uint64_t)(opt_warmup * (double)opt_accesses);
    uint64_t next_pool = 0, sample_ctr = 0;
    bool full = false;
    for (uint64_t i = 0; i < opt_accesses; i++) {
        uint32_t key = trace[i];
        rel_time_t now = T0 + (rel_time_t)(i / opt_ops);
        bool counting = full && i >= warm;
        if (counting)
            j->counted++;
        item *it = s.where[key];
        bool sampled_move = false;
        if (j->policy == P_SAMPLED && ++sample_ctr == j->param) {
            sample_ctr = 0;
            sampled_move = true;
        }
        if (it != NULL) {
            if (counting)
                j->hits++;
            switch (j->policy) {
            case P_STRICT:
                lru_to_head(&s, it);
                j->moves++;
                break;
            case P_LAZY:
                if (llru_access(it, now)) {
                    s.ring[s.nring].it = it;
                    s.ring[s.nring].key = key;
                    if (++s.nring == opt_batch)
                        drain_ring(&s);
                    j->moves++;
                }
                break;
            case P_SAMPLED:
                if (sampled_move) {
                    lru_to_head(&s, it);
                    j->moves++;
                }
                break;
            case P_ALRU:
                it->time = (rel_time_t)i;
                break;
            }
            continue;
        }
        /* Miss: insert, evicting first when full. */
        if (s.used == j->cap) {
            full = true;
            it = evict(&s, now);
        } else {
            it = &s.pool[next_pool++];
        }
        memset(it, 0, sizeof(*it));
        it->cas = key;
        it->tier = TIER_DRAM;
        llru_init_access(it, now);
        s.where[key] = it;
        if (j->policy == P_ALRU) {
            it->time = (rel_time_t)i;
            it->flags = (uint32_t)s.used;
            s.slots[s.used] = it;
        } else {
            lru_push_head(&s, it);
        }
        s.used++;
    }
    free(s.pool);
    free(s.where);
    free(s.slots);
    free(s.ring);
}

/* ---- driver ------------------------------------------------------------ */

static struct job *jobs;
static int njobs;
static int next_job;    /* atomic */

static void *worker(void *arg)
{
    (void)arg;
    for (;;) {
        int i = __atomic_fetch_add(&next_job, 1, __ATOMIC_RELAXED);
        if (i >= njobs)
            return NULL;
        run_job(&jobs[njobs - 1 - i]);     /* biggest caches first */
    }
}

static int parse_list(const char *s, double *out)
{
    int n = 0;
    char *end;
    while (*s != '\0' && n < MAX_LIST) {
        errno = 0;
        double v = strtod(s, &end);
        if (end == s || errno != 0 || v <= 0)
            return -1;
        out[n++] = v;
        s = *end == ',' ? end + 1 : end;
        if (*end != ',' && *end != '\0')
            return -1;
    }
    return n > 0 ? n : -1;
}

static void usage(const char *prog)
{
    fprintf(stderr,
            "usage: %s [options]\n"
            "  -k keys        distinct keys (default %" PRIu64 ")\n"
            "  -a accesses    trace length (default %" PRIu64 ")\n"
            "  -t theta       Zipf constant (default %.2f)\n"
            "  -s seed        trace seed (default %" PRIu64 ")\n"
            "  -r ops/s       accesses per simulated second (default %" PRIu64 ")\n"
            "  -c p,p,...     cache sizes, %% of keys (default 1,2,5,10,20,40)\n"
            "  -n n,n,...     sampled LRU: every n-th access moves (default 2,10,100)\n"
            "  -K k,k,...     ALRU: items sampled per eviction (default 5)\n"
            "  -b batch       Lazy LRU ring drained every batch moves (default %u)\n"
            "  -H hot,warm    THR_hot, THR_warm (default %u,%u)\n"
            "  -w share       warm-up share of the trace (default %.2f)\n"
            "  -j threads     worker threads (default %d)\n",
            prog, opt_keys, opt_accesses, opt_theta, opt_seed, opt_ops,
            opt_batch, opt_hot, opt_warm, opt_warmup, opt_threads);
    exit(2);
}

static double job_rate(const struct job *j)
{
    return j->counted ? 100.0 * (double)j->hits / (double)j->counted : 0;
}

int main(int argc, char **argv)
{
    int c;
    while ((c = getopt(argc, argv, "k:a:t:s:r:c:n:K:b:H:w:j:h")) != -1) {
        switch (c) {
        case 'k': opt_keys = strtoull(optarg, NULL, 10); break;
        case 'a': opt_accesses = strtoull(optarg, NULL, 10); break;
        case 't': opt_theta = atof(optarg); break;
        case 's': opt_seed = strtoull(optarg, NULL, 10); break;
        case 'r': opt_ops = strtoull(optarg, NULL, 10); break;
        case 'c': n_sizes = parse_list(optarg, opt_sizes); break;
        case 'n': n_n = parse_list(optarg, opt_n); break;
        case 'K': n_k = parse_list(optarg, opt_k); break;
        case 'b': opt_batch = (unsigned int)strtoul(optarg, NULL, 10); break;
        case 'H':
            if (sscanf(optarg, "%u,%u", &opt_hot, &opt_warm) != 2)
                usage(argv[0]);
            break;
        case 'w': opt_warmup = atof(optarg); break;
        case 'j': opt_threads = atoi(optarg); break;
        default: usage(argv[0]);
        }
    }
    if (optind != argc || opt_keys < 2 || opt_keys > UINT32_MAX ||
        opt_accesses < 1 || opt_accesses > UINT32_MAX || opt_ops < 1 ||
        opt_theta <= 0 || opt_theta >= 1 || n_sizes < 0 || n_n < 0 ||
        n_k < 0 || opt_batch < 1 || opt_warmup < 0 || opt_warmup >= 1 ||
        opt_threads < 1)
        usage(argv[0]);
    for (int i = 0; i < n_sizes; i++)
        if (opt_sizes[i] > 100)
            usage(argv[0]);

    llru_set_thresholds(opt_hot, opt_warm);
    opt_hot = llru_thr_hot();
    opt_warm = llru_thr_warm();

    struct timespec t0, t1, t2;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    make_trace();
    clock_gettime(CLOCK_MONOTONIC, &t1);

    int per_size = 2 + n_n + n_k;
    njobs = n_sizes * per_size;
    jobs = calloc((size_t)njobs, sizeof(*jobs));
    for (int si = 0; si < n_sizes; si++) {
        uint64_t cap = (uint64_t)(opt_sizes[si] / 100.0 * (double)opt_keys);
        if (cap < 1)
            cap = 1;
        struct job *row = &jobs[si * per_size];
        int x = 0;
        row[x++] = (struct job){ .policy = P_STRICT };
        row[x++] = (struct job){ .policy = P_LAZY };
        for (int i = 0; i < n_n; i++)
            row[x++] = (struct job){ .policy = P_SAMPLED, .param = (unsigned int)opt_n[i] };
        for (int i = 0; i < n_k; i++)
            row[x++] = (struct job){ .policy = P_ALRU, .param = (unsigned int)opt_k[i] };
        for (int i = 0; i < per_size; i++) {
            row[i].pct = opt_sizes[si];
            row[i].cap = cap;
        }
    }
    pthread_t tid[64];
    int nt = opt_threads < 64 ? opt_threads : 64;
    for (int i = 0; i < nt; i++)
        pthread_create(&tid[i], NULL, worker, NULL);
    for (int i = 0; i < nt; i++)
        pthread_join(tid[i], NULL);
    clock_gettime(CLOCK_MONOTONIC, &t2);

    printf("# lru-sim: %" PRIu64 " keys, %" PRIu64 " accesses, scrambled Zipf %.2f, "
           "seed %" PRIu64 ", %" PRIu64 " ops/s (%.1f s simulated), THR_hot %u, "
           "THR_warm %u, lazy batch %u, warm-up %.0f%%\n",
           opt_keys, opt_accesses, opt_theta, opt_seed, opt_ops,
           (double)opt_accesses / (double)opt_ops, opt_hot, opt_warm, opt_batch,
           100 * opt_warmup);
    printf("# hit %% over the counted accesses; moves = LRU head moves per 100 "
           "accesses (lazy: on access + second chances)\n");
    printf("| cache %% | items | counted |");
    printf(" strict | lazy | lazy-strict |");
    for (int i = 0; i < n_n; i++)
        printf(" sampled/%u |", (unsigned int)opt_n[i]);
    for (int i = 0; i < n_k; i++)
        printf(" alru/%u |", (unsigned int)opt_k[i]);
    printf(" moves strict | moves lazy |\n|---|---|---|---|---|---|");
    for (int i = 0; i < n_n + n_k; i++)
        printf("---|");
    printf("---|---|\n");
    for (int si = 0; si < n_sizes; si++) {
        struct job *row = &jobs[si * per_size];
        printf("| %g | %" PRIu64 " | %" PRIu64 " |", row[0].pct, row[0].cap,
               row[0].counted);
        printf(" %.2f | %.2f | %+.2f |", job_rate(&row[0]), job_rate(&row[1]),
               job_rate(&row[1]) - job_rate(&row[0]));
        for (int i = 2; i < per_size; i++)
            printf(" %.2f |", job_rate(&row[i]));
        printf(" %.1f | %.1f + %.1f |\n",
               100.0 * (double)row[0].moves / (double)opt_accesses,
               100.0 * (double)row[1].moves / (double)opt_accesses,
               100.0 * (double)row[1].chances / (double)opt_accesses);
    }
    printf("# trace %.1f s, simulation %.1f s (%d threads)\n",
           (double)(t1.tv_sec - t0.tv_sec) + (double)(t1.tv_nsec - t0.tv_nsec) / 1e9,
           (double)(t2.tv_sec - t1.tv_sec) + (double)(t2.tv_nsec - t1.tv_nsec) / 1e9,
           nt);
    free(trace);
    free(jobs);
    return 0;
}

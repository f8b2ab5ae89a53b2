/*
 * settings.c - default settings and the server clock.
 *
 * `settings` is filled by settings_init() and option parsing before any
 * thread starts.  The clock (current_time) is advanced once a second by the
 * listener thread and read everywhere with mc_now().
 */
#include "config.h"

#include <errno.h>
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/time.h>
#include <sysexits.h>
#include <unistd.h>

#include "memcached.h"
#include "stats.h"
#include "util.h"

struct settings settings;
rel_time_t current_time;
time_t process_started;

void settings_init(void)
{
    memset(&settings, 0, sizeof(settings));
    settings.maxbytes = 64 * 1024 * 1024;
    settings.maxconns = 1024;
    settings.port = 11211;
    settings.udpport = 0;
    settings.inter = NULL;
    settings.verbose = 0;
    settings.evict_to_free = true;
    settings.socketpath = NULL;
    settings.access = 0700;
    settings.factor = 1.25;
    settings.chunk_size = 48;       /* 24 with a lower tier, unless -n */
    settings.num_threads = 4;
    settings.partitions = 0;        /* 0 = same as num_threads */
    settings.reqs_per_event = 20;
    settings.use_cas = true;
    settings.backlog = 1024;
    settings.item_size_max = 1024 * 1024;
    settings.slab_page_size = SLAB_PAGE_SIZE;
    settings.idle_timeout = 0;
    settings.shutdown_command = false;
    settings.flush_enabled = true;
    settings.maxconns_fast = true;
    settings.hashpower_init = 16;
    settings.crawler_interval = 1;
    settings.temp_sample_interval = 5;
    settings.fetch_threads = -1;   /* -1 = as many as workers */
    settings.temp_sample_size = 2000;
    settings.store_wait_ms = 2000;
    settings.prefix_delimiter = ':';
    settings.slab_reassign = true;
    settings.slab_automove = 1;

    /* Start the clock at 2 so that "already expired" (1) is in the past. */
    process_started = time(NULL) - 2;
    current_time = 2;
}

void clock_update(void)
{
    struct timeval tv;
    gettimeofday(&tv, NULL);
    rel_time_t now = (rel_time_t)(tv.tv_sec - process_started);
    __atomic_store_n(&current_time, now, __ATOMIC_RELAXED);
}

rel_time_t realtime(int64_t exptime)
{
    if (exptime == 0)
        return 0;
    if (exptime < 0)
        return 1;
    if (exptime > REALTIME_MAXDELTA) {
        /* Absolute unix time.  One at or before our start is in the past. */
        if (exptime <= process_started)
            return 1;
        int64_t rel = exptime - process_started;
        return rel > UINT32_MAX ? UINT32_MAX : (rel_time_t)rel;
    }
    return (rel_time_t)(exptime + mc_now());
}

int64_t ttl_remaining(rel_time_t exptime)
{
    if (exptime == 0)
        return -1;
    rel_time_t now = mc_now();
    return exptime > now ? (int64_t)(exptime - now) : 0;
}

/* ---- Options ------------------------------------------------------------
 *
 * One table row declares an option: its short flag (0 for -o only), long
 * name, kind, the settings field, bounds, the name `stats settings` prints
 * and the -h text.  Parsing, -h and `stats settings` all walk this table.
 */

enum opt_kind {
    OPT_INT,        /* integer within [min, max] */
    OPT_MEGABYTES,  /* size_t, given in megabytes (-m) */
    OPT_SIZE,       /* int bytes with optional k/m/g suffix (-I) */
    OPT_BYTES,      /* size_t bytes with optional k/m/g suffix */
    OPT_DOUBLE,
    OPT_STRING,
    OPT_CHAR,
    OPT_OCTAL,
    OPT_SET,        /* bool set true, no argument */
    OPT_CLEAR,      /* bool set false, no argument */
    OPT_VERBOSE,    /* -v, repeatable */
    OPT_ACTION,     /* handled in settings_parse_args */
    OPT_IGNORED,    /* memcached option with no meaning here; accepted */
};

struct option_def {
    char short_flag;
    const char *name;
    enum opt_kind kind;
    size_t offset;
    double min, max;
    bool extended;          /* given as -o name=value */
    const char *stat_name;  /* NULL: not shown in stats settings */
    const char *arg;        /* argument placeholder in -h */
    const char *help;
};

#define S(field) offsetof(struct settings, field)
#define NOFIELD 0
static const struct option_def options[] = {
    { 'p', "port", OPT_INT, S(port), 0, 65535, false, "tcpport", "<num>",
      "TCP port to listen on (default: 11211, 0 is off)" },
    { 'U', "udp-port", OPT_INT, S(udpport), 0, 65535, false, "udpport", "<num>",
      "UDP port to listen on (default: 0, off)" },
    { 's', "unix-socket", OPT_STRING, S(socketpath), 0, 0, false, "domain_socket",
      "<file>", "UNIX socket to listen on (disables network support)" },
    { 'a', "unix-mask", OPT_OCTAL, S(access), 0, 0777, false, "umask", "<mask>",
      "access mask for UNIX socket, in octal (default: 700)" },
    { 'A', "enable-shutdown", OPT_SET, S(shutdown_command), 0, 0, false,
      "shutdown_command", NULL, "enable ascii \"shutdown\" command" },
    { 'l', "listen", OPT_STRING, S(inter), 0, 0, false, "inter", "<addr>",
      "interface(s) to listen on, comma separated (default: 127.0.0.1)" },
    { 'd', "daemon", OPT_SET, S(daemonize), 0, 0, false, NULL, NULL,
      "run as a daemon" },
    { 'r', "enable-coredumps", OPT_ACTION, NOFIELD, 0, 0, false, NULL, NULL,
      "maximize core file limit" },
    { 'u', "user", OPT_STRING, S(username), 0, 0, false, NULL, "<user>",
      "assume identity of <user> (only when run as root)" },
    { 'm', "memory-limit", OPT_MEGABYTES, S(maxbytes), 1, 1 << 30, false,
      "maxbytes", "<num>", "item memory in megabytes (default: 64)" },
    { 'M', "disable-evictions", OPT_CLEAR, S(evict_to_free), 0, 0, false,
      "evictions", NULL, "return error on memory exhausted instead of evicting" },
    { 'c', "conn-limit", OPT_INT, S(maxconns), 1, 1 << 20, false, "maxconns",
      "<num>", "max simultaneous connections (default: 1024); the start is\n"
      "                          refused when the open file limit cannot cover it" },
    { 'k', "lock-memory", OPT_SET, S(lock_memory), 0, 0, false, NULL, NULL,
      "lock down all paged memory" },
    { 'v', "verbose", OPT_VERBOSE, S(verbose), 0, 0, false, "verbosity", NULL,
      "verbose (print errors/warnings while in event loop); -vv also\n"
      "                          prints client commands and responses" },
    { 'h', "help", OPT_ACTION, NOFIELD, 0, 0, false, NULL, NULL,
      "print this help and exit" },
    { 'i', "license", OPT_ACTION, NOFIELD, 0, 0, false, NULL, NULL,
      "print the license and exit" },
    { 'V', "version", OPT_ACTION, NOFIELD, 0, 0, false, NULL, NULL,
      "print version and exit" },
    { 'P', "pidfile", OPT_STRING, S(pid_file), 0, 0, false, NULL, "<file>",
      "save PID in <file>, only used with -d option" },
    { 'f', "slab-growth-factor", OPT_DOUBLE, S(factor), 1.01, 100, false,
      "growth_factor", "<num>", "chunk size growth factor (default: 1.25)" },
    { 'n', "slab-min-size", OPT_INT, S(chunk_size), 1, 1 << 20, false,
      "chunk_size", "<bytes>", "min space used for key+value+flags (default: 48;\n"
      "                          24 with NVM, 8 with SSD, to fit meta tuples closely)" },
    { 'L', "enable-largepages", OPT_SET, S(prealloc), 0, 0, false, NULL, NULL,
      "preallocate all item memory at start" },
    { 'D', "delimiter", OPT_CHAR, S(prefix_delimiter), 0, 0, false,
      "stat_key_prefix", "<char>", "delimiter between key prefixes and IDs (default: ':')" },
    { 't', "threads", OPT_INT, S(num_threads), 1, 256, false, "num_threads",
      "<num>", "number of worker threads to use (default: 4)" },
    { 'R', "max-reqs-per-event", OPT_INT, S(reqs_per_event), 1, 1 << 20, false,
      "reqs_per_event", "<num>", "maximum number of requests per event (default: 20)" },
    { 'C', "disable-cas", OPT_CLEAR, S(use_cas), 0, 0, false, "cas_enabled",
      NULL, "disable use of CAS" },
    { 'b', "listen-backlog", OPT_INT, S(backlog), 1, 1 << 20, false,
      "tcp_backlog", "<num>", "set the backlog queue limit (default: 1024)" },
    { 'B', "protocol", OPT_IGNORED, NOFIELD, 0, 0, false, NULL, "<name>",
      "protocol: ascii, binary or auto (default: auto-negotiate)" },
    { 'I', "max-item-size", OPT_SIZE, S(item_size_max), 1024, 1 << 30, false,
      "item_size_max", "<num>", "max item size (default: 1m, min: 1k, max: 1024m)" },
    { 'F', "disable-flush-all", OPT_CLEAR, S(flush_enabled), 0, 0, false,
      "flush_enabled", NULL, "disable flush_all command" },
    { 'X', "disable-dumping", OPT_IGNORED, NOFIELD, 0, 0, false, NULL, NULL,
      "disable stats cachedump and lru_crawler metadump" },
    { 'W', "disable-watch", OPT_IGNORED, NOFIELD, 0, 0, false, NULL, NULL,
      "disable watch commands (live logging)" },
    { 'o', "extended", OPT_ACTION, NOFIELD, 0, 0, false, NULL, "<opts>",
      "comma separated list of extended options (below)" },

    /* -o name=value */
    { 0, "partitions", OPT_INT, S(partitions), 1, MAX_PARTITIONS, true,
      "partitions", "<num>", "LRU/free-list partitions per slab class (default: threads)" },
    { 0, "idle_timeout", OPT_INT, S(idle_timeout), 0, 1 << 30, true,
      "idle_timeout", "<secs>", "close connections idle this long (default: 0, off)" },
    { 0, "maxconns_fast", OPT_INT, S(maxconns_fast), 0, 1, true,
      "maxconns_fast", "<0|1>", "reject new connections past -c at once (default: 1)" },
    { 0, "hashpower", OPT_INT, S(hashpower_init), 12, 32, true,
      "hashpower_init", "<num>", "initial hash table size as a power of two (default: 16)" },
    { 0, "crawler_interval", OPT_INT, S(crawler_interval), 1, 3600, true,
      "crawler_interval", "<secs>", "seconds between expiry crawler steps (default: 1)" },
    { 0, "temp_sample_interval", OPT_INT, S(temp_sample_interval), 0, 3600, true,
      "temp_sample_interval", "<secs>", "seconds between samples that set the hot/warm\n"
      "                          thresholds, with a lower tier (default: 5, 0 = off)" },
    { 0, "temp_sample_size", OPT_INT, S(temp_sample_size), 10, 1000000, true,
      "temp_sample_size", "<items>", "items read per threshold sample (default: 2000)" },
    { 0, "slab_reassign", OPT_SET, S(slab_reassign), 0, 0, true, "slab_reassign",
      NULL, "let the page mover move slab pages between classes (default: on)" },
    { 0, "no_slab_reassign", OPT_CLEAR, S(slab_reassign), 0, 0, true, NULL,
      NULL, "keep slab pages in the class that first took them" },
    { 0, "slab_automove", OPT_INT, S(slab_automove), 0, 2, true, "slab_automove",
      "<0|1>", "move pages to classes that run short automatically (default: 1)" },
    { 0, "nvm_path", OPT_STRING, S(nvm_path), 0, 0, true, "nvm_path",
      "<path:size>", "NVM tier: a DAX file, /dev/daxX.Y, a plain file (emulation)\n"
      "                          or numa:N, and its size, e.g. /dev/shm/tac-nvm:4g" },
    { 0, "nvm_latency", OPT_STRING, S(nvm_latency), 0, 0, true, "nvm_latency",
      "<rd:wr>", "emulated NVM latency in ns per 256 B block read/written (default: 0:0)" },
    { 0, "evict_threads", OPT_INT, S(evict_threads), 0, 64, true,
      "evict_threads", "<num>", "threads moving cold items down a tier (default: half the cores)" },
    { 0, "tier_policy", OPT_STRING, S(tier_policy), 0, 0, true, NULL,
      "<mode>", "tac (default); for comparisons: anti2 (DRAM and NVM as one\n"
      "                          memory: no temperatures, a set or a read SSD item lands\n"
      "                          in DRAM or NVM at random, weighted by their sizes),\n"
      "                          antituple (no whole-buf fetch), twotier (no NVM)" },
    { 0, "nvm_admission", OPT_STRING, S(nvm_admission), 0, 0, true, NULL,
      "<always|obp:PCT>", "which cold items evicted from DRAM may go to NVM: always,\n"
      "                          or refuse (send them to SSD) while NVM is full and its\n"
      "                          (inserts + removals) / lookups over 8 s exceed PCT %\n"
      "                          (default: always)" },
    { 0, "fetch_threads", OPT_INT, S(fetch_threads), 0, 64, true,
      "fetch_threads", "<num>", "threads moving hot and warm items up a tier, with a\n"
      "                          lower tier (default: as many as -t; 0 = none)" },
    { 0, "dram_free_watermark", OPT_SIZE, S(dram_free_watermark), 0, 1 << 30, true,
      "dram_free_watermark", "<bytes>", "DRAM the evictors keep free (default: 2% of -m, at least 2m)" },
    { 0, "nvm_free_watermark", OPT_SIZE, S(nvm_free_watermark), 0, 1 << 30, true,
      "nvm_free_watermark", "<bytes>", "NVM the evictors keep free by moving tuples to SSD;\n"
      "                          only with an SSD tier (default: 1% of the tier)" },
    { 0, "ssd_path", OPT_STRING, S(ssd_path), 0, 0, true, "ssd_path",
      "<path:size>", "SSD tier: a file or block device (opened O_DIRECT, so not\n"
      "                          tmpfs) and its size, e.g. /var/lib/tac/ssd.dat:64g" },
    { 0, "ssd_page_size", OPT_SIZE, S(ssd_page_size), 0, 1 << 30, true, NULL,
      "<bytes>", "SSD page: the unit of reclaim and defrag; raised to hold\n"
      "                          the largest item, -I, in whole bufs (default: 8m)" },
    { 0, "ssd_buf_size", OPT_SIZE, S(ssd_buf_size), 0, 1 << 30, true, NULL,
      "<bytes>", "SSD buf: the unit of writing, a multiple of 4k (default: 256k)" },
    { 0, "ssd_io_engine", OPT_STRING, S(ssd_io_engine), 0, 0, true, NULL,
      "<uring|threads>", "SSD I/O: io_uring, or a pread/pwrite thread pool\n"
      "                          (default: uring, threads when io_uring is unavailable)" },
    { 0, "ssd_free_pages", OPT_INT, S(ssd_free_pages), 0, 65536, true, NULL,
      "<num>", "free SSD pages defrag keeps (default: 0 = auto: 2% of the\n"
      "                          pages, at least 3)" },
    { 0, "conn_mem_limit", OPT_BYTES, S(conn_mem_limit), 0, 1e15, true,
      "conn_mem_limit", "<bytes>", "memory all connections may hold beyond their first 16k\n"
      "                          read buffer (long request lines, values being read);\n"
      "                          past it the connection holding the most is closed\n"
      "                          (default: the larger of 64m and -m/8, and at least\n"
      "                          twice -I plus 16m)" },
    { 0, "store_wait_ms", OPT_INT, S(store_wait_ms), 0, 3600000, true,
      "store_wait_ms", "<ms>", "longest a store waits, parked on its connection, for a\n"
      "                          lower tier to make room before it is answered\n"
      "                          SERVER_ERROR out of memory; 0 answers at once\n"
      "                          (default: 2000)" },
    /* memcached tuning options that have no meaning here; accepted so that
     * existing command lines keep working. */
    { 0, "modern", OPT_IGNORED, NOFIELD, 0, 0, true, NULL, NULL, NULL },
    { 0, "no_modern", OPT_IGNORED, NOFIELD, 0, 0, true, NULL, NULL, NULL },

    { 0, "lru_crawler", OPT_IGNORED, NOFIELD, 0, 0, true, NULL, NULL, NULL },
    { 0, "no_lru_crawler", OPT_IGNORED, NOFIELD, 0, 0, true, NULL, NULL, NULL },
    { 0, "lru_maintainer", OPT_IGNORED, NOFIELD, 0, 0, true, NULL, NULL, NULL },
    { 0, "no_lru_maintainer", OPT_IGNORED, NOFIELD, 0, 0, true, NULL, NULL, NULL },
    { 0, "hash_algorithm", OPT_IGNORED, NOFIELD, 0, 0, true, NULL, NULL, NULL },
    { 0, "tail_repair_time", OPT_IGNORED, NOFIELD, 0, 0, true, NULL, NULL, NULL },
    { 0, "slab_chunk_max", OPT_IGNORED, NOFIELD, 0, 0, true, NULL, NULL, NULL },
};
#undef S
#define NOPTIONS (sizeof(options) / sizeof(options[0]))

static void *opt_field(const struct option_def *o)
{
    return (char *)&settings + o->offset;
}

static void die(const char *fmt, const char *a, const char *b)
{
    fprintf(stderr, fmt, a, b);
    fputc('\n', stderr);
    exit(EX_USAGE);
}

static void opt_apply(const struct option_def *o, const char *arg)
{
    char *end;
    double v = 0;
    const char *name = o->name;

    switch (o->kind) {
    case OPT_INT:
    case OPT_MEGABYTES:
    case OPT_DOUBLE:
        if (!arg)
            die("option '%s' needs a value%s", name, "");
        errno = 0;
        v = strtod(arg, &end);
        if (errno || end == arg || *end != '\0' ||
            (o->kind != OPT_DOUBLE && v != (double)(long long)v))
            die("option '%s': '%s' is not a number", name, arg);
        if (v < o->min || v > o->max)
            die("option '%s': %s is out of range", name, arg);
        if (o->kind == OPT_INT)
            *(int *)opt_field(o) = (int)v;
        else if (o->kind == OPT_MEGABYTES)
            *(size_t *)opt_field(o) = (size_t)v * 1024 * 1024;
        else
            *(double *)opt_field(o) = v;
        break;
    case OPT_SIZE:
    case OPT_BYTES: {
        uint64_t bytes;
        if (!arg || !util_parse_size(arg, &bytes))
            die("option '%s': '%s' is not a size (e.g. 512k, 1m)", name, arg ? arg : "");
        if ((double)bytes < o->min || (double)bytes > o->max)
            die("option '%s': %s is out of range", name, arg);
        if (o->kind == OPT_SIZE)
            *(int *)opt_field(o) = (int)bytes;
        else
            *(size_t *)opt_field(o) = (size_t)bytes;
        break;
    }
    case OPT_OCTAL:
        if (!arg)
            die("option '%s' needs a value%s", name, "");
        errno = 0;
        v = (double)strtol(arg, &end, 8);
        if (errno || end == arg || *end || v < o->min || v > o->max)
            die("option '%s': '%s' is not an octal mask", name, arg);
        *(int *)opt_field(o) = (int)v;
        break;
    case OPT_STRING:
        if (!arg)
            die("option '%s' needs a value%s", name, "");
        *(char **)opt_field(o) = strdup(arg);
        break;
    case OPT_CHAR:
        if (!arg || strlen(arg) != 1)
            die("option '%s' takes a single character, not '%s'", name, arg ? arg : "");
        *(char *)opt_field(o) = arg[0];
        break;
    case OPT_SET:
        *(bool *)opt_field(o) = true;
        break;
    case OPT_CLEAR:
        *(bool *)opt_field(o) = false;
        break;
    case OPT_VERBOSE:
        settings.verbose++;
        break;
    case OPT_IGNORED:
        break;
    case OPT_ACTION:
        break;
    }
}

/* -n given: keep it even with a lower tier. */
static bool chunk_size_given;

static const struct option_def *opt_find_extended(const char *name)
{
    for (size_t i = 0; i < NOPTIONS; i++)
        if (options[i].extended && strcmp(options[i].name, name) == 0)
            return &options[i];
    return NULL;
}

/* -o a=1,b,c=2 */
static void opt_apply_extended(const char *list)
{
    char *copy = strdup(list);
    char *save = NULL;
    for (char *tok = strtok_r(copy, ",", &save); tok; tok = strtok_r(NULL, ",", &save)) {
        char *val = strchr(tok, '=');
        if (val)
            *val++ = '\0';
        const struct option_def *o = opt_find_extended(tok);
        if (!o)
            die("Illegal suboption \"%s\"%s", tok, "");
        if (o->kind == OPT_IGNORED) {
            fprintf(stderr, "note: -o %s has no effect in tac-memcached\n", tok);
            continue;
        }
        opt_apply(o, val);
    }
    free(copy);
}

/* Prints "left  help", wrapping help to the next line when left is long. */
static void usage_line(const char *left, const char *help)
{
    if (strlen(left) >= 26)
        printf("%s\n%-26s%s\n", left, "", help);
    else
        printf("%-26s%s\n", left, help);
}

void settings_usage(void)
{
    printf("tac-memcached %s\n", SERVER_VERSION);
    for (size_t i = 0; i < NOPTIONS; i++) {
        const struct option_def *o = &options[i];
        if (o->extended || !o->help)
            continue;
        char left[64];
        snprintf(left, sizeof(left), "-%c, --%s%s%s", o->short_flag, o->name,
                 o->arg ? "=" : "", o->arg ? o->arg : "");
        usage_line(left, o->help);
    }
    printf("\nExtended options (-o name=value,...):\n");
    for (size_t i = 0; i < NOPTIONS; i++) {
        const struct option_def *o = &options[i];
        if (!o->extended || !o->help)
            continue;
        char left[64];
        snprintf(left, sizeof(left), "   - %s%s%s:", o->name,
                 o->arg ? "=" : "", o->arg ? o->arg : "");
        usage_line(left, o->help);
    }
    printf("   memcached tuning options (modern, lru_crawler, lru_maintainer, ...)\n"
           "   are accepted and have no effect.\n");
}

static void handle_action(char flag, const char *arg)
{
    switch (flag) {
    case 'h':
        settings_usage();
        exit(EXIT_SUCCESS);
    case 'V':
        printf("tac-memcached %s\n", SERVER_VERSION);
        exit(EXIT_SUCCESS);
    case 'i':
        printf("tac-memcached %s: see the LICENSE file of the source tree.\n",
               PACKAGE_VERSION);
        exit(EXIT_SUCCESS);
    case 'r': {
        struct rlimit rl = { RLIM_INFINITY, RLIM_INFINITY };
        if (setrlimit(RLIMIT_CORE, &rl) != 0) {
            getrlimit(RLIMIT_CORE, &rl);
            rl.rlim_cur = rl.rlim_max;
            setrlimit(RLIMIT_CORE, &rl);
        }
        break;
    }
    case 'o':
        opt_apply_extended(arg);
        break;
    }
}

void settings_parse_args(int argc, char **argv)
{
    struct option longopts[NOPTIONS + 1];
    char shortopts[NOPTIONS * 2 + 2];
    size_t nlong = 0, ns = 0;

    for (size_t i = 0; i < NOPTIONS; i++) {
        const struct option_def *o = &options[i];
        if (o->extended)
            continue;
        bool has_arg = o->kind != OPT_SET && o->kind != OPT_CLEAR &&
                       o->kind != OPT_VERBOSE &&
                       !(o->kind == OPT_ACTION && !o->arg) &&
                       !(o->kind == OPT_IGNORED && !o->arg);
        longopts[nlong++] = (struct option){ o->name,
            has_arg ? required_argument : no_argument, NULL, o->short_flag };
        shortopts[ns++] = o->short_flag;
        if (has_arg)
            shortopts[ns++] = ':';
    }
    longopts[nlong] = (struct option){ 0, 0, 0, 0 };
    shortopts[ns] = '\0';

    int ch;
    opterr = 0;
    while ((ch = getopt_long(argc, argv, shortopts, longopts, NULL)) != -1) {
        const struct option_def *o = NULL;
        for (size_t i = 0; i < NOPTIONS; i++)
            if (!options[i].extended && options[i].short_flag == ch)
                o = &options[i];
        if (!o) {
            fprintf(stderr, "Illegal argument \"%s\"\n",
                    optind > 0 && optind <= argc ? argv[optind - 1] : "?");
            fprintf(stderr, "Try -h for the list of options.\n");
            exit(EX_USAGE);
        }
        if (o->kind == OPT_ACTION)
            handle_action(o->short_flag, optarg);
        else
            opt_apply(o, optarg);
        if (o->short_flag == 'n')
            chunk_size_given = true;
    }
    if (optind < argc)
        die("unexpected argument \"%s\"%s; try -h", argv[optind], "");
}

bool settings_finalize(void)
{
    /* The default listen address, shown as such by `stats settings`. */
    if (settings.inter == NULL && settings.socketpath == NULL)
        settings.inter = strdup("127.0.0.1");
    if (settings.partitions == 0)
        settings.partitions = settings.num_threads;
    if (settings.fetch_threads < 0)
        settings.fetch_threads = settings.num_threads;
    if (settings.evict_threads == 0) {
        long cores = sysconf(_SC_NPROCESSORS_ONLN);
        settings.evict_threads = cores > 2 ? (int)(cores / 2) : 1;
    }
    if (settings.partitions > MAX_PARTITIONS)
        settings.partitions = MAX_PARTITIONS;
    if (settings.item_size_max > SLAB_PAGE_SIZE)
        settings.slab_page_size = settings.item_size_max;
    if ((size_t)settings.item_size_max > settings.maxbytes / 2) {
        fprintf(stderr, "Cannot set item size limit higher than 1/2 of memory max.\n");
        return false;
    }
    /* Lower tiers keep meta tuples in DRAM: small first classes.  With
     * SSD the first holds a compact meta tuple with an 8-byte key. */
    if (!chunk_size_given && settings.ssd_path != NULL)
        settings.chunk_size = 8;
    else if (!chunk_size_given && settings.nvm_path != NULL)
        settings.chunk_size = 24;
    /* One request may hold a whole value, or a read buffer grown to
     * CONN_RBUF_MAX for a long get line; the bound must let the largest
     * of each through, twice over. */
    size_t conn_floor = 2 * ((size_t)settings.item_size_max + CONN_RBUF_MAX);
    if (settings.conn_mem_limit == 0) {
        size_t v = (size_t)64 << 20;
        if (settings.maxbytes / 8 > v)
            v = settings.maxbytes / 8;
        settings.conn_mem_limit = v > conn_floor ? v : conn_floor;
    } else if (settings.conn_mem_limit < conn_floor) {
        fprintf(stderr, "conn_mem_limit must be at least twice (-I + 16m): %zu bytes\n",
                conn_floor);
        return false;
    }
    if (settings.chunk_size + 64 > settings.item_size_max) {
        fprintf(stderr, "slab minimum size (-n) is larger than the item size limit\n");
        return false;
    }
    return true;
}

void settings_stats(struct stat_sink *sink)
{
    for (size_t i = 0; i < NOPTIONS; i++) {
        const struct option_def *o = &options[i];
        if (!o->stat_name)
            continue;
        switch (o->kind) {
        case OPT_INT:
        case OPT_SIZE:
        case OPT_VERBOSE:
            stat_printf(sink, o->stat_name, "%d",
                        __atomic_load_n((int *)opt_field(o), __ATOMIC_RELAXED));
            break;
        case OPT_OCTAL:
            stat_printf(sink, o->stat_name, "%o", *(int *)opt_field(o));
            break;
        case OPT_MEGABYTES:
        case OPT_BYTES:
            stat_printf(sink, o->stat_name, "%zu", *(size_t *)opt_field(o));
            break;
        case OPT_DOUBLE:
            stat_printf(sink, o->stat_name, "%.2f", *(double *)opt_field(o));
            break;
        case OPT_STRING: {
            const char *s = *(char **)opt_field(o);
            stat_printf(sink, o->stat_name, "%s", s ? s : "NULL");
            break;
        }
        case OPT_CHAR:
            stat_printf(sink, o->stat_name, "%c", *(char *)opt_field(o));
            break;
        case OPT_SET:
            stat_printf(sink, o->stat_name, "%s", *(bool *)opt_field(o) ? "yes" : "no");
            break;
        case OPT_CLEAR:
            /* Shown the way memcached shows them: "evictions on". */
            if (strcmp(o->stat_name, "evictions") == 0)
                stat_printf(sink, o->stat_name, "%s", *(bool *)opt_field(o) ? "on" : "off");
            else
                stat_printf(sink, o->stat_name, "%s", *(bool *)opt_field(o) ? "yes" : "no");
            break;
        default:
            break;
        }
    }
    stat_printf(sink, "oldest", "0");
    stat_printf(sink, "binding_protocol", "auto-negotiate");
    stat_printf(sink, "slab_page_size", "%d", settings.slab_page_size);
}

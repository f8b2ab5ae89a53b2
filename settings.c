/*
 * settings.c - the option table, `settings` and the server clock.
 *
 * `settings` is filled from the option table below: settings_init() sets
 * every default, settings_parse_args() the command line, and
 * settings_finalize() the automatic values, all before any thread starts.
 * Nothing outside this file writes it afterwards (but see
 * settings_finalize for the two run-time tunables).  The clock
 * (current_time) is advanced once a second by the listener thread and read
 * everywhere with mc_now().
 */
#include "config.h"

#include <errno.h>
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/time.h>
#include <sysexits.h>
#include <unistd.h>

#include "settings.h"
#include "util.h"

struct settings settings;
rel_time_t current_time;
time_t process_started;

static void settings_defaults(void);

void settings_init(void)
{
    settings_defaults();

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
 * name, kind, the settings field, bounds, the name `stats settings` prints,
 * the -h text, its default and, where bounds are not enough, a check.
 * settings_init, parsing, settings_finalize, -h and `stats settings` all
 * walk this table; README.md's option list is the -h text, and
 * tests/integration/test_options.py holds the two together.
 *
 * A default is written as it would be on the command line and goes through
 * the same parsing and checks.  A row without one starts at zero: off,
 * none, or an automatic value that settings_finalize resolves (the help
 * text says which).
 */

enum opt_kind {
    OPT_INT,        /* integer within [min, max] */
    OPT_MEGABYTES,  /* size_t, given in megabytes (-m) */
    OPT_SIZE,       /* int bytes, a size as util_parse_size reads it (-I) */
    OPT_BYTES,      /* size_t bytes, likewise */
    OPT_DOUBLE,
    OPT_STRING,
    OPT_CHAR,
    OPT_OCTAL,
    OPT_CHOICE,     /* one of `choices`; its index is stored as an int */
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
    /* Below, set where a row needs them. */
    const char *def;        /* default, in command-line form; for OPT_SET
                               and OPT_CLEAR "on" or "off", the field's */
    /* Checks the stored value beyond min/max and fills the fields derived
     * from it; false means the value is refused with `expect`. */
    bool (*check)(const struct option_def *o);
    const char *expect;     /* what check accepts, for its error */
    const char *const *choices; /* OPT_CHOICE: the names, NULL-terminated */
    bool no_effect;         /* accepted for compatibility, does nothing */
    bool unlisted;          /* accepted, but -h does not name it */
};

/* Validators, below the table. */
static bool check_nvm_path(const struct option_def *o);
static bool check_ssd_path(const struct option_def *o);
static bool check_nvm_latency(const struct option_def *o);
static bool check_nvm_admission(const struct option_def *o);
static bool check_ssd_buf_size(const struct option_def *o);
static bool check_ext_path(const struct option_def *o);
static bool check_ext_page_size(const struct option_def *o);
static bool check_ext_wbuf_size(const struct option_def *o);

/* Choice names, indexed by enum settings_tier_policy and settings_ssd_engine. */
static const char *const tier_policies[] = {
    [TIER_POLICY_TAC] = "tac",
    [TIER_POLICY_ANTI2] = "anti2",
    [TIER_POLICY_ANTITUPLE] = "antituple",
    [TIER_POLICY_TWOTIER] = "twotier",
    NULL
};
static const char *const ssd_engines[] = {
    [SSD_ENGINE_URING] = "uring",
    [SSD_ENGINE_THREADS] = "threads",
    NULL
};
static const char *const protocols[] = {
    [PROTOCOL_AUTO] = "auto",
    [PROTOCOL_ASCII] = "ascii",
    [PROTOCOL_BINARY] = "binary",
    NULL
};
static const char *const no_yes[] = { "no", "yes", NULL };
static const char *const off_on[] = { "off", "on", NULL };
static const char *const metrics_auths[] = {
    [METRICS_AUTH_USERS] = "users",
    [METRICS_AUTH_NONE] = "none",
    NULL
};

/* The fields every row sets, in order; the rest are set by name. */
#define OPT(flag, nm, k, off, lo, hi, ext, stat, a, h)                      \
    .short_flag = (flag), .name = (nm), .kind = (k), .offset = (off),       \
    .min = (lo), .max = (hi), .extended = (ext), .stat_name = (stat),       \
    .arg = (a), .help = (h)
#define S(field) offsetof(struct settings, field)
#define NOFIELD 0
/* A memcached -o name with no meaning here (listed by name in -h). */
#define IGNORED(nm) { OPT(0, nm, OPT_IGNORED, NOFIELD, 0, 0, true, NULL, NULL, NULL) }
static const struct option_def options[] = {
    { OPT('p', "port", OPT_INT, S(port), -1, 65535, false, "tcpport", "<num>",
      "TCP port to listen on, 0 is off, -1 any free port"), .def = "11211" },
    { OPT('U', "udp-port", OPT_INT, S(udpport), -1, 65535, false, "udpport", "<num>",
      "UDP port to listen on, 0 is off, -1 any free port; given without -p it "
      "is the TCP port too, as in memcached"), .def = "0" },
    { OPT('s', "unix-socket", OPT_STRING, S(socketpath), 0, 0, false, "domain_socket",
      "<file>", "UNIX socket to listen on (disables network support)") },
    { OPT('a', "unix-mask", OPT_OCTAL, S(access), 0, 0777, false, "umask", "<mask>",
      "access mask for UNIX socket, in octal"), .def = "700" },
    { OPT('A', "enable-shutdown", OPT_SET, S(shutdown_command), 0, 0, false,
      "shutdown_command", NULL, "enable ascii \"shutdown\" command") },
    /* The default is resolved by settings_finalize: none with -s. */
    { OPT('l', "listen", OPT_STRING, S(inter), 0, 0, false, "inter", "<addr>",
      "interface(s) to listen on, comma separated; -l again adds (default: 127.0.0.1)") },
    { OPT('d', "daemon", OPT_SET, S(daemonize), 0, 0, false, NULL, NULL,
      "run as a daemon") },
    { OPT('r', "enable-coredumps", OPT_ACTION, NOFIELD, 0, 0, false, NULL, NULL,
      "maximize core file limit") },
    { OPT('u', "user", OPT_STRING, S(username), 0, 0, false, NULL, "<user>",
      "assume identity of <user> (only when run as root)") },
    { OPT('m', "memory-limit", OPT_MEGABYTES, S(maxbytes), 1, 1 << 30, false,
      "maxbytes", "<num>", "item memory in megabytes"), .def = "64" },
    { OPT('M', "disable-evictions", OPT_CLEAR, S(evict_to_free), 0, 0, false,
      "evictions", NULL, "return error on memory exhausted instead of evicting"),
      .def = "on" },
    { OPT('c', "conn-limit", OPT_INT, S(maxconns), 1, 1 << 20, false, "maxconns",
      "<num>", "max simultaneous connections; the start is refused when the "
      "open file limit cannot cover it"), .def = "1024" },
    { OPT('k', "lock-memory", OPT_SET, S(lock_memory), 0, 0, false, NULL, NULL,
      "lock down all paged memory") },
    { OPT('v', "verbose", OPT_VERBOSE, S(verbose), 0, 0, false, "verbosity", NULL,
      "verbose (print errors/warnings while in event loop); -vv also "
      "prints client commands and responses") },
    { OPT('h', "help", OPT_ACTION, NOFIELD, 0, 0, false, NULL, NULL,
      "print this help and exit") },
    { OPT('i', "license", OPT_ACTION, NOFIELD, 0, 0, false, NULL, NULL,
      "print the license and exit") },
    { OPT('V', "version", OPT_ACTION, NOFIELD, 0, 0, false, NULL, NULL,
      "print version and exit") },
    { OPT('P', "pidfile", OPT_STRING, S(pid_file), 0, 0, false, NULL, "<file>",
      "save PID in <file>, only used with -d option") },
    { OPT('Z', "enable-ssl", OPT_SET, S(tls), 0, 0, false, "ssl_enabled", NULL,
      "TLS on every TCP listener but those given as -l notls:<addr>; needs -o "
      "ssl_chain_cert; not with -U or -s") },
    { OPT('S', "enable-sasl", OPT_SET, S(sasl), 0, 0, false, NULL, NULL,
      "require SASL authentication (binary protocol only): users from "
      "$MEMCACHED_SASL_PWDB (user:password lines, PLAIN) or Cyrus SASL's "
      "memcached.conf in $SASL_CONF_PATH (sasldb: PLAIN, CRAM-MD5); not with -U") },
    { OPT('Y', "auth-file", OPT_STRING, S(auth_file), 0, 0, false, NULL, "<file>",
      "require ASCII authentication: <file> holds user:password lines; a "
      "connection's first command must be a set whose data is \"user "
      "password\"; reloaded on SIGHUP; not with -U or -B binary") },
    { OPT('e', "memory-file", OPT_STRING, S(memory_file), 0, 0, false,
      "memory_file", "<file>", "where a graceful stop saves the restart state "
      "(DRAM items, the lower tiers' index) and the next start reads it; "
      "default: <ssd file>.state, else <nvm file>.state, else none") },
    { OPT('f', "slab-growth-factor", OPT_DOUBLE, S(factor), 1.01, 100, false,
      "growth_factor", "<num>", "chunk size growth factor"), .def = "1.25" },
    /* With a lower tier settings_finalize lowers it unless given. */
    { OPT('n', "slab-min-size", OPT_INT, S(chunk_size), 1, 1 << 20, false,
      "chunk_size", "<bytes>", "min space used for key+value+flags; unless "
      "given, 24 with NVM and 8 with SSD (ssd_path), to fit meta tuples closely"),
      .def = "48" },
    { OPT('L', "enable-largepages", OPT_SET, S(prealloc), 0, 0, false, NULL, NULL,
      "preallocate all item memory at start") },
    { OPT('D', "delimiter", OPT_CHAR, S(prefix_delimiter), 0, 0, false,
      "stat_key_prefix", "<char>", "delimiter between key prefixes and IDs, "
      "for stats detail"), .def = ":" },
    { OPT('t', "threads", OPT_INT, S(num_threads), 1, 256, false, "num_threads",
      "<num>", "number of worker threads to use"), .def = "4" },
    { OPT('R', "max-reqs-per-event", OPT_INT, S(reqs_per_event), 1, 1 << 20, false,
      "reqs_per_event", "<num>", "maximum number of requests per event"),
      .def = "20" },
    { OPT('C', "disable-cas", OPT_CLEAR, S(use_cas), 0, 0, false, "cas_enabled",
      NULL, "disable use of CAS"), .def = "on" },
    { OPT('b', "listen-backlog", OPT_INT, S(backlog), 1, 1 << 20, false,
      "tcp_backlog", "<num>", "set the backlog queue limit"), .def = "1024" },
    /* Every connection negotiates its protocol by its first byte. */
    { OPT('B', "protocol", OPT_CHOICE, S(protocol), 0, 0, false, NULL, "<name>",
      "protocol: ascii, binary or auto (the first byte of each connection "
      "decides)"), .def = "auto", .choices = protocols },
    { OPT('I', "max-item-size", OPT_SIZE, S(item_size_max), 1024, 1 << 30, false,
      "item_size_max", "<num>", "max item size, 1k to 1024m"), .def = "1m" },
    { OPT('F', "disable-flush-all", OPT_CLEAR, S(flush_enabled), 0, 0, false,
      "flush_enabled", NULL, "disable flush_all command"), .def = "on" },
    { OPT('X', "disable-dumping", OPT_CLEAR, S(dump_enabled), 0, 0, false,
      "dump_enabled", NULL, "disable stats cachedump and lru_crawler metadump"),
      .def = "on" },
    { OPT('W', "disable-watch", OPT_CLEAR, S(watch_enabled), 0, 0, false, NULL, NULL,
      "disable watch commands (live logging)"), .def = "on" },
    { OPT('o', "extended", OPT_ACTION, NOFIELD, 0, 0, false, NULL, "<opts>",
      "comma separated list of extended options (below)") },

    /* -o name=value */
    { OPT(0, "partitions", OPT_INT, S(partitions), 1, MAX_PARTITIONS, true,
      "partitions", "<num>", "LRU/free-list partitions per slab class "
      "(default: threads)") },
    { OPT(0, "idle_timeout", OPT_INT, S(idle_timeout), 0, 1 << 30, true,
      "idle_timeout", "<secs>", "close connections idle this long, 0 is off"),
      .def = "0" },
    /* Past -c a connection is always turned away at once. */
    { OPT(0, "maxconns_fast", OPT_INT, S(maxconns_fast), 0, 1, true,
      "maxconns_fast", "<0|1>", "reject new connections past -c at once"),
      .def = "1", .no_effect = true },
    { OPT(0, "hashpower", OPT_INT, S(hashpower_init), 12, 32, true,
      "hashpower_init", "<num>", "initial hash table size as a power of two"),
      .def = "16" },
    { OPT(0, "crawler_interval", OPT_INT, S(crawler_interval), 1, 3600, true,
      "crawler_interval", "<secs>", "seconds between expiry crawler steps"),
      .def = "1" },
    { OPT(0, "temp_sample_interval", OPT_INT, S(temp_sample_interval), 0, 3600, true,
      "temp_sample_interval", "<secs>", "seconds between samples that set the "
      "hot/warm thresholds, with a lower tier; 0 is off"), .def = "5" },
    { OPT(0, "temp_sample_size", OPT_INT, S(temp_sample_size), 10, 1000000, true,
      "temp_sample_size", "<items>", "items read per threshold sample"),
      .def = "2000" },
    { OPT(0, "lru_crawler", OPT_SET, S(lru_crawler), 0, 0, true, "lru_crawler",
      NULL, "run the expiry crawler and answer lru_crawler crawl and metadump "
      "(lru_crawler enable|disable at run time)"), .def = "on" },
    { OPT(0, "no_lru_crawler", OPT_CLEAR, S(lru_crawler), 0, 0, true, NULL,
      NULL, "start with the expiry crawler off") },
    { OPT(0, "slab_reassign", OPT_SET, S(slab_reassign), 0, 0, true, "slab_reassign",
      NULL, "let the page mover move slab pages between classes"), .def = "on" },
    { OPT(0, "no_slab_reassign", OPT_CLEAR, S(slab_reassign), 0, 0, true, NULL,
      NULL, "keep slab pages in the class that first took them") },
    { OPT(0, "slab_automove", OPT_INT, S(slab_automove), 0, 2, true, "slab_automove",
      "<0|1>", "move pages to classes that run short automatically"),
      .def = "1" },
    { OPT(0, "no_slab_automove", OPT_ACTION, NOFIELD, 0, 0, true, NULL, NULL,
      "slab_automove=0") },
    { OPT(0, "nvm_path", OPT_STRING, S(nvm_path), 0, 0, true, "nvm_path",
      "<path:size>", "NVM tier: a DAX file, /dev/daxX.Y, a plain file "
      "(emulation) or numa:N, and its size, e.g. /dev/shm/tac-nvm:4g"),
      .check = check_nvm_path,
      .expect = "PATH:SIZE, e.g. /dev/shm/tac-nvm:4g or numa:1:16g" },
    { OPT(0, "nvm_latency", OPT_STRING, S(nvm_latency), 0, 0, true, "nvm_latency",
      "<rd:wr>", "emulated NVM latency in ns per 256 B block read/written "
      "(default: 0:0)"), .check = check_nvm_latency,
      .expect = "READ_NS:WRITE_NS, e.g. 300:1000" },
    { OPT(0, "evict_threads", OPT_INT, S(evict_threads), 0, 64, true,
      "evict_threads", "<num>", "threads moving cold items down a tier "
      "(default: half the cores)") },
    { OPT(0, "tier_policy", OPT_CHOICE, S(tier_policy), 0, 0, true, NULL,
      "<mode>", "tac; for comparisons: anti2 (DRAM and NVM as one memory: no "
      "temperatures, a set or a read SSD item lands in DRAM or NVM at random, "
      "weighted by their sizes), antituple (no whole-buf fetch), twotier (no "
      "NVM)"), .def = "tac", .choices = tier_policies },
    { OPT(0, "nvm_admission", OPT_STRING, S(nvm_admission), 0, 0, true, NULL,
      "<always|obp:PCT>", "which cold items evicted from DRAM may go to NVM: "
      "always, or refuse (send them to SSD) while NVM is full and its (inserts "
      "+ removals) / lookups over 8 s exceed PCT %"), .def = "always",
      .check = check_nvm_admission, .expect = "always or obp:PCT, e.g. obp:100" },
    { OPT(0, "fetch_threads", OPT_INT, S(fetch_threads), 0, 64, true,
      "fetch_threads", "<num>", "threads moving hot and warm items up a tier, "
      "with a lower tier (default: as many as -t; 0 = none)") },
    { OPT(0, "dram_free_watermark", OPT_SIZE, S(dram_free_watermark), 0, 1 << 30, true,
      "dram_free_watermark", "<bytes>", "DRAM the evictors keep free "
      "(default: 2% of -m, at least 2m)") },
    { OPT(0, "nvm_free_watermark", OPT_SIZE, S(nvm_free_watermark), 0, 1 << 30, true,
      "nvm_free_watermark", "<bytes>", "NVM the evictors keep free by moving "
      "tuples to SSD; only with an SSD tier (default: 1% of the tier)") },
    { OPT(0, "ssd_path", OPT_STRING, S(ssd_path), 0, 0, true, "ssd_path",
      "<path:size>", "SSD tier: a file or block device (opened O_DIRECT, so "
      "not tmpfs) and its size, e.g. /var/lib/tac/ssd.dat:64g"),
      .check = check_ssd_path,
      .expect = "PATH:SIZE, e.g. /var/lib/tac/ssd.dat:64g" },
    /* 0 leaves the page to the SSD tier, which raises its 8m to fit -I. */
    { OPT(0, "ssd_page_size", OPT_SIZE, S(ssd_page_size), 0, 1 << 30, true, NULL,
      "<bytes>", "SSD page: the unit of reclaim and defrag; raised to hold the "
      "largest item, -I, in whole bufs, and so that at most 65536 pages cover the "
      "file (an 800g file takes 12.5m pages) (default: 8m)") },
    { OPT(0, "ssd_buf_size", OPT_SIZE, S(ssd_buf_size), 4096, 1 << 30, true, NULL,
      "<bytes>", "SSD buf: the unit of writing, a multiple of 4k"),
      .def = "256k", .check = check_ssd_buf_size,
      .expect = "a multiple of 4k, e.g. 256k" },
    { OPT(0, "ssd_io_engine", OPT_CHOICE, S(ssd_io_engine), 0, 0, true, NULL,
      "<uring|threads>", "SSD I/O: io_uring, or a pread/pwrite thread pool; "
      "uring falls back to threads when io_uring is unavailable"),
      .def = "uring", .choices = ssd_engines },
    { OPT(0, "ssd_free_pages", OPT_INT, S(ssd_free_pages), 0, 65536, true, NULL,
      "<num>", "free SSD pages defrag keeps (default: 0 = auto: 2% of the "
      "pages, at least 3)") },
    /* memcached's extstore options, mapped onto the SSD tier in its units. */
    { OPT(0, "ext_path", OPT_STRING, S(ext_path), 0, 0, true, NULL, "<path:size>",
      "memcached's extstore file: the SSD tier's, as ssd_path (one file; an "
      "extstore file needs tier_reformat=yes once)"), .check = check_ext_path,
      .expect = "PATH:SIZE, e.g. /var/lib/tac/ssd.dat:64g" },
    { OPT(0, "ext_page_size", OPT_INT, S(ext_page_size), 1, 1024, true, NULL, "<mb>",
      "ssd_page_size in megabytes"), .check = check_ext_page_size,
      .expect = "megabytes, 1 to 1024" },
    { OPT(0, "ext_threads", OPT_INT, S(ext_threads), 1, 64, true, NULL, "<num>",
      "threads of the SSD's pread/pwrite pool, used with ssd_io_engine=threads "
      "or when io_uring is refused (default: 4)") },
    { OPT(0, "ext_item_size", OPT_INT, S(ext_item_size), 0, 1 << 30, true, NULL,
      "<bytes>", "values smaller than this never go to SSD: when the tiers above "
      "are full they are evicted instead (0: any size goes)"), .def = "0" },
    { OPT(0, "ext_item_age", OPT_INT, S(ext_item_age), 0, 1 << 30, true, NULL,
      "<secs>", "move DRAM items not read for this many seconds to the SSD tier "
      "even while DRAM has room, as memcached's extstore does (0: off, items "
      "move down only when DRAM runs short)"), .def = "0" },
    { OPT(0, "ext_recache_rate", OPT_INT, S(ext_recache_rate), 0, 1 << 30, true,
      NULL, "<num>", "besides moving warm and hot SSD items up, every "
      "Nth read of an SSD item read before moves it to DRAM, as memcached's "
      "extstore recaches (0: off; `extstore recache_rate` at run time)"),
      .def = "2000" },
    { OPT(0, "ext_max_frag", OPT_DOUBLE, S(ext_max_frag), 0, 1, true,
      NULL, "<ratio>", "defrag re-packs an SSD page less live than "
      "this; when every page is at least this live and space is needed, the "
      "oldest page is dropped instead (`extstore max_frag` at run time)"),
      .def = "0.9" },
    { OPT(0, "ext_compact_under", OPT_INT, S(ext_compact_under), 0, 65535, true,
      NULL, "<pages>", "defrag works while this many SSD pages or fewer are "
      "free: ssd_free_pages one more, within its bounds (`extstore "
      "compact_under` at run time)") },
    { OPT(0, "ext_drop_unread", OPT_SET, S(ext_drop_unread), 0, 0, true,
      NULL, NULL, "when a full SSD drops its oldest page, move the items "
      "on it read again after their first read, and drop only the others "
      "(`extstore drop_unread 0|1` at run time)") },
    { OPT(0, "ext_low_ttl", OPT_INT, S(ext_low_ttl), 0, 1 << 30, true,
      NULL, "<secs>", "an item that expires within this many seconds when it "
      "goes to SSD goes into SSD pages of their own, which empty as their "
      "items expire (0: off; `extstore low_ttl` at run time)"), .def = "0" },
    { OPT(0, "ext_drop_under", OPT_INT, S(ext_drop_under), 0, 65535, true,
      NULL, "<pages>", "with ext_drop_unread, that drop starts once this many "
      "SSD pages or fewer are free and no page is worth re-packing (0: when "
      "the last free page is taken; `extstore drop_under` at run time)"),
      .def = "0" },
    { OPT(0, "ext_wbuf_size", OPT_INT, S(ext_wbuf_size), 1, 1024, true, NULL, "<mb>",
      "ssd_buf_size in megabytes"), .check = check_ext_wbuf_size,
      .expect = "megabytes, 1 to 1024" },
    { OPT(0, "tier_reformat", OPT_CHOICE, S(tier_reformat), 0, 0, true,
      "tier_reformat", "<no|yes>", "format the NVM and SSD tier files even when "
      "they hold something else: another format version or size, a damaged "
      "header, or data that is not a tier (an extstore file, a mistyped path); "
      "what they hold is lost. Without it such a file stops the start"),
      .def = "no", .choices = no_yes },
    { OPT(0, "tier_key", OPT_STRING, S(tier_key), 0, 0, true, NULL, "<file>",
      "encrypt everything written to the NVM and SSD tier files and the "
      "files beside them (AES-256-GCM; see README, Encryption at rest) with "
      "the 32-byte key in this file (raw, or 64 hex digits; make one with "
      "head -c 32 /dev/urandom). A tier file written under another key, or "
      "without one, stops the start") },
    { OPT(0, "recovery", OPT_CHOICE, S(recovery), 0, 0, true,
      "recovery", "<on|off>", "on: bring back what a graceful stop saved "
      "(see README, Restart); off: start empty and format tier files of this "
      "format"), .def = "on", .choices = off_on },
    { OPT(0, "dram_log", OPT_CHOICE, S(dram_log), 0, 0, true, "dram_log",
      "<off|on>", "on: every acknowledged write to a DRAM item (and every "
      "item in an SSD buf not yet written) is also logged to a file beside "
      "the NVM file, so that it survives kill -9 (see README, Restart); "
      "needs a file-backed -o nvm_path"), .def = "off", .choices = off_on },
    { OPT(0, "dram_log_size", OPT_BYTES, S(dram_log_size), 0, 1e15, true,
      "dram_log_size", "<bytes>", "size of the -o dram_log file (default: "
      "twice -m, at least 16m)") },
    { OPT(0, "conn_mem_limit", OPT_BYTES, S(conn_mem_limit), 0, 1e15, true,
      "conn_mem_limit", "<bytes>", "memory all connections may hold beyond "
      "their first 16k read buffer (long request lines, values over 16k being "
      "read); past it the connection holding the most is closed (default: the "
      "larger of 64m and -m/8, and at least twice -I plus 16m)") },
    { OPT(0, "read_buf_mem_limit", OPT_MEGABYTES, S(read_buf_mem_limit), 0, 1 << 30,
      true, "read_buf_mem_limit", "<mb>", "memcached's limit on connection "
      "buffers, in megabytes: sets conn_mem_limit when that is not given (raised "
      "to its floor, with a note), and bounds the responses each worker queues "
      "to its share, as memcached does; 0 leaves the default") },
    { OPT(0, "metrics_port", OPT_INT, S(metrics_port), 0, 65535, true,
      "metrics_port", "<num>", "HTTP port serving the stats in Prometheus "
      "text format at /metrics, on the -o metrics_listen addresses; 0 is "
      "off"), .def = "0" },
    { OPT(0, "metrics_listen", OPT_STRING, S(metrics_listen), 0, 0, true,
      "metrics_listen", "<addr;...>", "addresses the -o metrics_port binds, "
      "separated by ';' (a comma ends the option's value); not the -l list"),
      .def = "127.0.0.1" },
    { OPT(0, "metrics_auth", OPT_CHOICE, S(metrics_auth), 0, 0, true,
      "metrics_auth", "<users|none>", "with -Y or -S: users serves "
      "-o metrics_port only to a request with HTTP basic authentication of "
      "one of their users; none serves anyone, and the start says so"),
      .def = "users", .choices = metrics_auths },
    { OPT(0, "metrics_max_conns", OPT_INT, S(metrics_max_conns), 1, 65536, true,
      "metrics_max_conns", "<num>", "most open -o metrics_port connections; "
      "at it, accepting waits for one to close"), .def = "64" },
    { OPT(0, "metrics_timeout", OPT_INT, S(metrics_timeout), 1, 3600, true,
      "metrics_timeout", "<s>", "a -o metrics_port connection is closed this "
      "many seconds after it was accepted, whatever it sent"), .def = "10" },
    { OPT(0, "ssl_chain_cert", OPT_STRING, S(ssl_chain_cert), 0, 0, true,
      "ssl_chain_cert", "<file>", "-Z: the server's certificate chain (PEM)") },
    { OPT(0, "ssl_key", OPT_STRING, S(ssl_key), 0, 0, true, "ssl_key", "<file>",
      "-Z: its private key (default: in ssl_chain_cert)") },
    { OPT(0, "ssl_keyformat", OPT_INT, S(ssl_keyformat), 1, 2, true, "ssl_keyformat",
      "<1|2>", "-Z: the key file's format: 1 PEM, 2 DER"), .def = "1" },
    { OPT(0, "ssl_verify_mode", OPT_INT, S(ssl_verify_mode), 0, 3, true,
      "ssl_verify_mode", "<0-3>", "-Z: client certificates: 0 not asked, 1 asked, "
      "2 required, 3 required at the first handshake only"), .def = "0" },
    { OPT(0, "ssl_ca_cert", OPT_STRING, S(ssl_ca_cert), 0, 0, true, "ssl_ca_cert",
      "<file>", "-Z: the CAs a client certificate must chain to (PEM)") },
    { OPT(0, "ssl_ciphers", OPT_STRING, S(ssl_ciphers), 0, 0, true, "ssl_ciphers",
      "<list>", "-Z: OpenSSL cipher list for TLS 1.2 and older") },
    { OPT(0, "ssl_min_version", OPT_INT, S(ssl_min_version), 0, 3, true, NULL,
      "<0-3>", "-Z: the oldest TLS version taken: 0 1.0, 1 1.1, 2 1.2, 3 1.3"),
      .def = "2" },
    { OPT(0, "ssl_wbuf_size", OPT_INT, S(ssl_wbuf_size), 1, 1024, true, "ssl_wbuf_size",
      "<kb>", "-Z: response bytes gathered into one TLS write, in kilobytes"),
      .def = "16" },
    { OPT(0, "ssl_session_cache", OPT_SET, S(ssl_session_cache), 0, 0, true,
      "ssl_session_cache", NULL, "-Z: keep sessions for resumption") },
    { OPT(0, "ssl_kernel_tls", OPT_SET, S(ssl_kernel_tls), 0, 0, true,
      "ssl_kernel_tls", NULL, "-Z: kernel TLS offload"), .no_effect = true },
    { OPT(0, "store_wait_ms", OPT_INT, S(store_wait_ms), 0, 3600000, true,
      "store_wait_ms", "<ms>", "longest a store waits, parked on its "
      "connection, for a lower tier to make room before it is answered "
      "SERVER_ERROR out of memory; 0 answers at once"), .def = "2000" },
    /* memcached tuning options that have no meaning here; accepted so that
     * existing command lines keep working. */
    IGNORED("modern"),
    IGNORED("no_modern"),
    IGNORED("lru_maintainer"),
    IGNORED("no_lru_maintainer"),
    IGNORED("hash_algorithm"),
    IGNORED("tail_repair_time"),
    IGNORED("slab_chunk_max"),
    IGNORED("no_maxconns_fast"),
    IGNORED("lru_crawler_sleep"),
    IGNORED("lru_crawler_tocrawl"),
    IGNORED("hot_lru_pct"),
    IGNORED("warm_lru_pct"),
    IGNORED("hot_max_factor"),
    IGNORED("warm_max_factor"),
    IGNORED("temporary_ttl"),
    IGNORED("watcher_logbuf_size"),
    IGNORED("worker_logbuf_size"),
    IGNORED("track_sizes"),
    IGNORED("no_hashexpand"),
    IGNORED("sock_cookie_id"),
    IGNORED("slab_automove_ratio"),
    IGNORED("slab_automove_window"),
    IGNORED("slab_automove_freeratio"),
    IGNORED("inline_ascii_resp"),
    IGNORED("no_inline_ascii_resp"),
    IGNORED("no_chunked_items"),
    IGNORED("ext_max_sleep"),
    IGNORED("ext_io_depth"),
    IGNORED("slab_sizes"),
    IGNORED("resp_obj_mem_limit"),
    /* Accepted, not named by -h: memcached's test suite reads a -h that
     * names it as "privileges can be dropped", which is not so here. */
    { OPT(0, "no_drop_privileges", OPT_IGNORED, NOFIELD, 0, 0, true, NULL, NULL,
      NULL), .unlisted = true },
    IGNORED("relaxed_privileges"),
};
#undef IGNORED
#undef S
#undef OPT
#define NOPTIONS (sizeof(options) / sizeof(options[0]))

/* Which rows the command line gave, for the automatic defaults and the
 * no-effect notes. */
static bool given[NOPTIONS];
/* What an OPT_IGNORED row was given ("yes" for a bare flag), shown under
 * memcached's `stats settings` name (mc_settings). */
static char *ignored_arg[NOPTIONS];
static int ext_paths;                   /* -o ext_path seen so often */

static void *opt_field(const struct option_def *o)
{
    return (char *)&settings + o->offset;
}

static bool opt_no_effect(const struct option_def *o)
{
    return o->kind == OPT_IGNORED || o->no_effect;
}

static const struct option_def *opt_by_name(const char *name)
{
    for (size_t i = 0; i < NOPTIONS; i++)
        if (strcmp(options[i].name, name) == 0)
            return &options[i];
    return NULL;
}

const char *settings_ignored_arg(const char *name)
{
    const struct option_def *o = opt_by_name(name);
    return o != NULL && o->kind == OPT_IGNORED ? ignored_arg[o - options] : NULL;
}

static bool opt_given(const char *name)
{
    const struct option_def *o = opt_by_name(name);
    return o != NULL && given[o - options];
}

static void die(const char *fmt, const char *a, const char *b)
{
    fprintf(stderr, fmt, a, b);
    fputc('\n', stderr);
    exit(EX_USAGE);
}

/* A value the option's own rules refuse: "-o name=value: expected ...",
 * as it was written. */
static void die_expected(const struct option_def *o, const char *arg,
                         const char *expect)
{
    if (o->extended)
        fprintf(stderr, "-o %s=%s: expected %s\n", o->name, arg, expect);
    else
        fprintf(stderr, "-%c %s: expected %s\n", o->short_flag, arg, expect);
    exit(EX_USAGE);
}

/* "expected tac, anti2, antituple or twotier" */
static void die_choice(const struct option_def *o, const char *arg)
{
    char list[256] = "";
    size_t n = 0;
    while (o->choices[n] != NULL)
        n++;
    for (size_t i = 0; i < n; i++) {
        const char *sep = i == 0 ? "" : i + 1 < n ? ", " : " or ";
        size_t len = strlen(list);
        snprintf(list + len, sizeof(list) - len, "%s%s", sep, o->choices[i]);
    }
    die_expected(o, arg, list);
}

/* The comma-separated list a with those entries of b it lacks appended,
 * newly allocated. */
static char *opt_list_join(const char *a, const char *b)
{
    size_t na = strlen(a);
    char *out = malloc(na + strlen(b) + 2);
    if (out == NULL)
        return NULL;
    memcpy(out, a, na + 1);
    for (const char *p = b; *p != '\0';) {
        size_t n = strcspn(p, ",");
        bool have = false;
        for (const char *q = out; *q != '\0' && !have;) {
            size_t m = strcspn(q, ",");
            have = m == n && memcmp(p, q, n) == 0;
            q += m + (q[m] == ',');
        }
        if (!have && n > 0) {
            size_t len = strlen(out);
            if (len > 0)
                out[len++] = ',';
            memcpy(out + len, p, n);
            out[len + n] = '\0';
        }
        p += n + (p[n] == ',');
    }
    return out;
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
        /* A 0|1 option given bare, as memcached takes maxconns_fast: 1;
         * and slab_automove, whose bare form is 1 in memcached too. */
        if (!arg && o->kind == OPT_INT && o->min == 0 &&
            (o->max == 1 || strcmp(o->name, "slab_automove") == 0))
            arg = "1";
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
    case OPT_STRING: {
        if (!arg)
            die("option '%s' needs a value%s", name, "");
        char **f = (char **)opt_field(o);
        char *was = *f != o->def ? *f : NULL;
        /* -l given again adds its addresses, as memcached's does; any
         * other string option given again replaces the earlier value. */
        *f = was != NULL && f == &settings.inter ? opt_list_join(was, arg) : strdup(arg);
        if (*f == NULL)
            die("option '%s': out of memory%s", name, "");
        free(was);
        break;
    }
    case OPT_CHAR:
        if (!arg || strlen(arg) != 1)
            die("option '%s' takes a single character, not '%s'", name, arg ? arg : "");
        *(char *)opt_field(o) = arg[0];
        break;
    case OPT_CHOICE: {
        if (!arg)
            die("option '%s' needs a value%s", name, "");
        int i = 0;
        while (o->choices[i] != NULL && strcmp(o->choices[i], arg) != 0)
            i++;
        if (o->choices[i] == NULL)
            die_choice(o, arg);
        *(int *)opt_field(o) = i;
        break;
    }
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
        free(ignored_arg[o - options]);
        ignored_arg[o - options] = strdup(arg ? arg : "yes");
        break;
    case OPT_ACTION:
        if (strcmp(o->name, "no_slab_automove") == 0)
            settings.slab_automove = 0;
        break;
    }
    if (o->check != NULL && !o->check(o))
        die_expected(o, arg, o->expect);
}

/* Every row's default, through the same parsing and checks as the command
 * line; the rest of `settings` is zero. */
static void settings_defaults(void)
{
    memset(&settings, 0, sizeof(settings));
    memset(given, 0, sizeof(given));
    ext_paths = 0;
    for (size_t i = 0; i < NOPTIONS; i++) {
        const struct option_def *o = &options[i];
        if (o->def == NULL)
            continue;
        if (o->kind == OPT_SET || o->kind == OPT_CLEAR) {
            *(bool *)opt_field(o) = strcmp(o->def, "on") == 0;
        } else if (o->kind == OPT_STRING) {
            /* The literal itself: settings_init may run again (unit tests),
             * and a copy would leak each time. */
            *(const char **)opt_field(o) = o->def;
            if (o->check != NULL && !o->check(o))
                die_expected(o, o->def, o->expect);
        } else {
            opt_apply(o, o->def);
        }
    }
    /* Not an option: settings_finalize raises it to -I. */
    settings.slab_page_size = SLAB_PAGE_SIZE;
    /* Set by commands only (memcached's defaults). */
    settings.lru_crawler_sleep = 100;
    settings.lru_crawler_tocrawl = 0;
}

/* ---- Validators: each parses its option's value into the fields derived
 * from it.  Only these and settings_finalize write those fields. */

/* "PATH:SIZE": the size follows the last colon, so "numa:0:1g" is node 0
 * with 1 GB. */
static bool split_path_size(const char *spec, char **path, size_t *size)
{
    const char *colon = strrchr(spec, ':');
    uint64_t bytes;
    if (colon == NULL || colon == spec || !util_parse_size(colon + 1, &bytes))
        return false;
    *path = strndup(spec, (size_t)(colon - spec));
    *size = (size_t)bytes;
    return *path != NULL;
}

/* Size 0 takes a whole device-dax. */
static bool check_nvm_path(const struct option_def *o)
{
    (void)o;
    free(settings.nvm_file);
    settings.nvm_file = NULL;
    return split_path_size(settings.nvm_path, &settings.nvm_file,
                           &settings.nvm_size);
}

static bool check_ssd_path(const struct option_def *o)
{
    (void)o;
    free(settings.ssd_file);
    settings.ssd_file = NULL;
    return split_path_size(settings.ssd_path, &settings.ssd_file,
                           &settings.ssd_size) && settings.ssd_size > 0;
}

/* A decimal number up to max; *end is left after it. */
static bool parse_uint(const char *s, unsigned long max, const char **end,
                       unsigned *out)
{
    char *e;
    if (*s < '0' || *s > '9')
        return false;
    errno = 0;
    unsigned long v = strtoul(s, &e, 10);
    if (errno || v > max)
        return false;
    *end = e;
    *out = (unsigned)v;
    return true;
}

/* "READ_NS:WRITE_NS", each at most a millisecond. */
static bool check_nvm_latency(const struct option_def *o)
{
    (void)o;
    const char *s = settings.nvm_latency, *end;
    unsigned rd, wr;
    if (!parse_uint(s, 1000000, &end, &rd) || *end != ':' ||
        !parse_uint(end + 1, 1000000, &end, &wr) || *end != '\0')
        return false;
    settings.nvm_read_ns = rd;
    settings.nvm_write_ns = wr;
    return true;
}

/* "always" (nvm_obp_pct -1) or "obp:PCT". */
static bool check_nvm_admission(const struct option_def *o)
{
    (void)o;
    const char *s = settings.nvm_admission, *end;
    unsigned pct;
    if (strcmp(s, "always") == 0) {
        settings.nvm_obp_pct = -1;
        return true;
    }
    if (strncmp(s, "obp:", 4) != 0 || !parse_uint(s + 4, 1000000, &end, &pct) ||
        *end != '\0')
        return false;
    settings.nvm_obp_pct = (int)pct;
    return true;
}

/* ext_path: the SSD tier's file, once. */
static bool check_ext_path(const struct option_def *o)
{
    if (++ext_paths > 1)
        die("-o ext_path: given twice; tac-memcached takes one SSD file%s%s",
            " (one ext_path or one ssd_path)", "");
    free(settings.ssd_path);
    settings.ssd_path = strdup(settings.ext_path);
    return settings.ssd_path != NULL && check_ssd_path(o);
}

/* ext_page_size and ext_wbuf_size: megabytes into the SSD tier's bytes. */
static bool check_ext_page_size(const struct option_def *o)
{
    (void)o;
    settings.ssd_page_size = settings.ext_page_size << 20;
    return true;
}

static bool check_ext_wbuf_size(const struct option_def *o)
{
    settings.ssd_buf_size = settings.ext_wbuf_size << 20;
    return check_ssd_buf_size(o);
}

/* O_DIRECT writes whole 4 KiB blocks. */
static bool check_ssd_buf_size(const struct option_def *o)
{
    (void)o;
    return settings.ssd_buf_size % 4096 == 0;
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
        const struct option_def *o = opt_by_name(tok);
        if (!o && strcmp(tok, "drop_privileges") == 0)
            die("-o %s is not supported yet: refusing to start rather than "
                "serve without what it asks for%s", tok, "");
        if (!o || !o->extended)
            die("Illegal suboption \"%s\"%s", tok, "");
        given[o - options] = true;
        opt_apply(o, val);
        /* memcached's no_modern turns off, at its place in the line (a
         * later option turns one back on), what this server has of its
         * "modern" defaults: the expiry crawler and the page mover. */
        if (strcmp(o->name, "no_modern") == 0) {
            settings.lru_crawler = false;
            settings.slab_reassign = false;
            settings.slab_automove = 0;
        }
    }
    free(copy);
}

/* ---- -h ------------------------------------------------------------------ */

#define HELP_COL 26     /* where help text starts */
#define HELP_WIDTH 90   /* the longest line -h prints */

/* Prints `text` from column `col` (the cursor is there), wrapped at word
 * boundaries to HELP_WIDTH, later lines indented to `indent`. */
static void print_wrapped(size_t col, size_t indent, const char *text)
{
    const char *p = text;
    while (*p) {
        const char *w = p;
        while (*w && *w != ' ')
            w++;
        size_t len = (size_t)(w - p);
        if (col > indent && col + 1 + len > HELP_WIDTH) {
            printf("\n%*s", (int)indent, "");
            col = indent;
        } else if (col > indent) {
            putchar(' ');
            col++;
        }
        printf("%.*s", (int)len, p);
        col += len;
        p = *w ? w + 1 : w;
    }
    putchar('\n');
}

/* "left  help (default: x)", the help on the next line when left is long. */
static void usage_row(const char *left, const struct option_def *o)
{
    char text[1024];
    size_t n = (size_t)snprintf(text, sizeof(text), "%s%s",
                                opt_no_effect(o) ? "(ignored) " : "", o->help);
    /* Flags are off unless given; a default is shown for values and for
     * -o switches, which may be on. */
    if (o->def != NULL && (o->arg != NULL || o->extended) && n < sizeof(text))
        n += (size_t)snprintf(text + n, sizeof(text) - n,
                              o->kind == OPT_CHAR ? " (default: '%s')" : " (default: %s)",
                              o->def);
    if (strlen(left) >= HELP_COL) {
        printf("%s\n%*s", left, HELP_COL, "");
    } else {
        printf("%-*s", HELP_COL, left);
    }
    print_wrapped(HELP_COL, HELP_COL, text);
}

void settings_usage(void)
{
    printf("tac-memcached %s\n", SERVER_VERSION);
    for (size_t i = 0; i < NOPTIONS; i++) {
        const struct option_def *o = &options[i];
        if (o->extended)
            continue;
        char left[64];
        snprintf(left, sizeof(left), "-%c, --%s%s%s", o->short_flag, o->name,
                 o->arg ? "=" : "", o->arg ? o->arg : "");
        usage_row(left, o);
    }
    printf("\nExtended options (-o name=value,...):\n");
    for (size_t i = 0; i < NOPTIONS; i++) {
        const struct option_def *o = &options[i];
        if (!o->extended || o->help == NULL)
            continue;
        char left[64];
        snprintf(left, sizeof(left), "   - %s%s%s:", o->name,
                 o->arg ? "=" : "", o->arg ? o->arg : "");
        usage_row(left, o);
    }
    /* The memcached tuning names, by name. */
    char names[1024] = "";
    for (size_t i = 0; i < NOPTIONS; i++) {
        const struct option_def *o = &options[i];
        if (!o->extended || o->help != NULL || o->unlisted)
            continue;
        size_t len = strlen(names);
        snprintf(names + len, sizeof(names) - len, "%s%s", len ? ", " : "", o->name);
    }
    printf("   ");
    char text[1200];
    snprintf(text, sizeof(text), "memcached tuning options, accepted and "
             "ignored: %s", names);
    print_wrapped(3, 3, text);
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
        given[o - options] = true;
        if (o->kind == OPT_ACTION)
            handle_action(o->short_flag, optarg);
        else
            opt_apply(o, optarg);
    }
    if (optind < argc)
        die("unexpected argument \"%s\"%s; try -h", argv[optind], "");

    /* Once per option, however often given. */
    for (size_t i = 0; i < NOPTIONS; i++) {
        const struct option_def *o = &options[i];
        if (!given[i] || !opt_no_effect(o))
            continue;
        if (o->extended)
            fprintf(stderr, "tac-memcached: -o %s is accepted for compatibility "
                    "and has no effect\n", o->name);
        else
            fprintf(stderr, "tac-memcached: -%c is accepted for compatibility "
                    "and has no effect\n", o->short_flag);
    }
}

/*
 * The automatic defaults and the checks that span options.  Runs once,
 * after parsing and before anything reads `settings`; after it `settings`
 * is read-only, with two exceptions that memcached also has: `verbosity`
 * sets settings.verbose and `slabs automove` sets settings.slab_automove
 * at run time (both atomic).
 */
bool settings_finalize(void)
{
    /* The default listen address, shown as such by `stats settings`. */
    if (settings.inter == NULL && settings.socketpath == NULL)
        settings.inter = strdup("127.0.0.1");
    /* memcached: -U without -p sets the TCP port too. */
    if (opt_given("udp-port") && settings.udpport != 0 && !opt_given("port"))
        settings.port = settings.udpport;
    /* memcached's -e keeps its items in FILE and their description in
     * FILE.meta.  This server's restart state is FILE alone, and a FILE it
     * cannot read is removed at start: a FILE.meta beside it says FILE is
     * memcached's (or that memcached's restart was half set up), so the
     * start is refused rather than lose it. */
    if (settings.memory_file != NULL) {
        size_t n = strlen(settings.memory_file) + sizeof(".meta");
        char *meta = malloc(n);
        struct stat st;
        bool found = meta != NULL &&
            (snprintf(meta, n, "%s.meta", settings.memory_file), lstat(meta, &st) == 0);
        if (found)
            fprintf(stderr, "-e %s: %s exists, memcached's restart metadata; this "
                    "server neither reads nor writes it (its restart state is %s "
                    "alone): remove it, or give -e another file\n",
                    settings.memory_file, meta, settings.memory_file);
        free(meta);
        if (found)
            return false;
    }
    if (opt_given("ext_path") && opt_given("ssd_path")) {
        fprintf(stderr, "-o ext_path and -o ssd_path both name the SSD tier's "
                "file; give one\n");
        return false;
    }
    if (opt_given("ext_compact_under") && opt_given("ssd_free_pages")) {
        fprintf(stderr, "-o ext_compact_under and -o ssd_free_pages both set the "
                "free SSD pages defrag keeps; give one\n");
        return false;
    }
    if ((opt_given("ext_page_size") && opt_given("ssd_page_size")) ||
        (opt_given("ext_wbuf_size") && opt_given("ssd_buf_size"))) {
        fprintf(stderr, "-o ext_page_size / ext_wbuf_size and ssd_page_size / "
                "ssd_buf_size set the same thing; give one of each\n");
        return false;
    }
    if (!settings.tls) {
        static const char *const tls_opts[] = {
            "ssl_chain_cert", "ssl_key", "ssl_keyformat", "ssl_verify_mode",
            "ssl_ca_cert", "ssl_ciphers", "ssl_min_version", "ssl_wbuf_size",
            "ssl_session_cache", "ssl_kernel_tls",
        };
        for (size_t i = 0; i < sizeof(tls_opts) / sizeof(tls_opts[0]); i++)
            if (opt_given(tls_opts[i])) {
                fprintf(stderr, "-o %s asks for TLS: give -Z too (without it "
                        "every connection would be plain text)\n", tls_opts[i]);
                return false;
            }
    }
    if (settings.tls && settings.ssl_chain_cert == NULL) {
        fprintf(stderr, "-Z: give the certificate with -o ssl_chain_cert=FILE (and "
                "ssl_key=FILE unless the key is in it)\n");
        return false;
    }
    if (settings.tls && settings.udpport != 0) {
        fprintf(stderr, "-Z: UDP has no TLS, so its requests would travel in plain "
                "text; give -U 0\n");
        return false;
    }
    if (settings.tls && settings.socketpath != NULL) {
        fprintf(stderr, "-Z: TLS is for TCP listeners; -s makes a UNIX socket only\n");
        return false;
    }
    if (settings.sasl && settings.udpport != 0) {
        fprintf(stderr, "-S: SASL cannot cover UDP, which has no connection to "
                "authenticate; give -U 0\n");
        return false;
    }
    if (settings.sasl && settings.auth_file != NULL) {
        fprintf(stderr, "-S and -Y: give one (SASL covers the binary protocol, "
                "-Y the text protocol)\n");
        return false;
    }
    if (settings.sasl && settings.protocol == PROTOCOL_ASCII) {
        fprintf(stderr, "-S: SASL needs the binary protocol; it cannot be used "
                "with -B ascii\n");
        return false;
    }
    if (settings.sasl)
        settings.protocol = PROTOCOL_BINARY;     /* as memcached: binary only */
    if (settings.auth_file != NULL && settings.udpport != 0) {
        fprintf(stderr, "-Y: ASCII authentication cannot cover UDP, which has no "
                "connection to authenticate; give -U 0\n");
        return false;
    }
    if (settings.auth_file != NULL && settings.protocol == PROTOCOL_BINARY) {
        fprintf(stderr, "-Y: ASCII authentication needs the text protocol; it "
                "cannot be used with -B binary\n");
        return false;
    }
    if (settings.partitions == 0)
        settings.partitions = settings.num_threads;
    if (!opt_given("fetch_threads"))
        settings.fetch_threads = settings.num_threads;
    if (settings.evict_threads == 0) {
        long cores = sysconf(_SC_NPROCESSORS_ONLN);
        settings.evict_threads = cores > 2 ? (int)(cores / 2) : 1;
    }
    if (settings.partitions > MAX_PARTITIONS)
        settings.partitions = MAX_PARTITIONS;
    if (settings.item_size_max > SLAB_PAGE_SIZE)
        settings.slab_page_size = settings.item_size_max;
    else
        settings.slab_page_size = SLAB_PAGE_SIZE;
    if ((size_t)settings.item_size_max > settings.maxbytes / 2) {
        fprintf(stderr, "Cannot set item size limit higher than 1/2 of memory max.\n");
        return false;
    }
    /* Lower tiers keep meta tuples in DRAM: small first classes.  With
     * SSD the first holds a compact meta tuple with an 8-byte key.  An
     * NVM path counts even under twotier, which drops it below.  An SSD
     * tier named with memcached's -o ext_path keeps memcached's classes
     * (its -n 48, no fine steps: slabs.c), so that a small item sits in
     * the class memcached would give it. */
    if (!opt_given("slab-min-size") && settings.ext_path == NULL) {
        if (settings.ssd_path != NULL)
            settings.chunk_size = 8;
        else if (settings.nvm_path != NULL)
            settings.chunk_size = 24;
    }
    if (settings.tier_policy == TIER_POLICY_TWOTIER && settings.nvm_path != NULL) {
        fprintf(stderr, "note: tier_policy=twotier: the NVM tier (%s) is not "
                "used\n", settings.nvm_path);
        settings.nvm_path = NULL;
        free(settings.nvm_file);
        settings.nvm_file = NULL;
        settings.nvm_size = 0;
    }
    if (settings.nvm_path == NULL && settings.nvm_latency != NULL)
        fprintf(stderr, "note: -o nvm_latency has no effect without "
                "-o nvm_path\n");
    if (settings.dram_log &&
        (settings.nvm_file == NULL || strncmp(settings.nvm_file, "numa:", 5) == 0)) {
        fprintf(stderr, "-o dram_log=on needs a file-backed NVM tier "
                "(-o nvm_path=FILE:SIZE): the log lives beside that file\n");
        return false;
    }
    if (settings.dram_log && !settings.recovery) {
        fprintf(stderr, "-o dram_log=on has no use with -o recovery=off\n");
        return false;
    }
    if (settings.ssd_path != NULL && settings.ssd_page_size != 0 &&
        settings.ssd_page_size % settings.ssd_buf_size != 0) {
        fprintf(stderr, "-o ssd_page_size=%d: expected a multiple of "
                "ssd_buf_size (%d)\n", settings.ssd_page_size,
                settings.ssd_buf_size);
        return false;
    }
    /* One request may hold a whole value, or a read buffer grown to
     * CONN_RBUF_MAX for a long get line; the bound must let the largest
     * of each through, twice over. */
    size_t conn_floor = 2 * ((size_t)settings.item_size_max + CONN_RBUF_MAX);
    if (settings.conn_mem_limit == 0 && settings.read_buf_mem_limit != 0) {
        settings.conn_mem_limit = settings.read_buf_mem_limit;
        if (settings.conn_mem_limit < conn_floor) {
            fprintf(stderr, "tac-memcached: -o read_buf_mem_limit raised to %zu "
                    "megabytes, twice (-I + 16m)\n", (conn_floor + (1u << 20) - 1) >> 20);
            settings.conn_mem_limit = conn_floor;
        }
    }
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

const char *settings_choice(const char *name)
{
    const struct option_def *o = opt_by_name(name);
    if (o == NULL || o->kind != OPT_CHOICE)
        return NULL;
    return o->choices[*(int *)opt_field(o)];
}

/*
 * memcached's `stats settings` names that no row above prints.  A row
 * with an option is a memcached option accepted with no effect (-h says
 * so): it shows what was given, scaled as memcached shows it, else
 * memcached's default.  A row without one is what holds here.  ext_* rows
 * appear only with an SSD tier, as memcached's appear only with extstore.
 */
static const struct {
    const char *name;
    const char *opt;        /* NULL: the value is fixed */
    const char *value;      /* fixed value, or memcached's default */
    int scale;              /* given value times this (0: as given) */
    bool ssd;
} mc_settings_rows[] = {
    { "slab_automove_ratio", "slab_automove_ratio", "0.80", 0, false },
    { "slab_automove_window", "slab_automove_window", "30", 0, false },
    { "tail_repair_time", NULL, "0", 0, false },
    { "hash_algorithm", NULL, "tac-mix64", 0, false },
    { "lru_maintainer_thread", NULL, "yes", 0, false },
    { "lru_segmented", NULL, "no", 0, false },
    { "hot_lru_pct", "hot_lru_pct", "20", 0, false },
    { "warm_lru_pct", "warm_lru_pct", "40", 0, false },
    { "hot_max_factor", "hot_max_factor", "0.20", 0, false },
    { "warm_max_factor", "warm_max_factor", "2.00", 0, false },
    { "temp_lru", NULL, "no", 0, false },
    { "temporary_ttl", "temporary_ttl", "61", 0, false },
    { "watcher_logbuf_size", "watcher_logbuf_size", "262144", 1024, false },
    { "worker_logbuf_size", "worker_logbuf_size", "65536", 1024, false },
    { "track_sizes", NULL, "no", 0, false },
    { "inline_ascii_response", NULL, "no", 0, false },
    { "ext_max_sleep", "ext_max_sleep", "1000000", 0, true },
    { "slab_automove_freeratio", "slab_automove_freeratio", "0.010", 0, false },
    { "num_napi_ids", NULL, "(null)", 0, false },
};

static void mc_settings(void (*out)(void *ctx, const char *name, const char *value),
                        void *ctx)
{
    char v[64];
    snprintf(v, sizeof(v), "%d", settings.num_threads);
    out(ctx, "num_threads_per_udp", v);
    static const char *const tls_names[] = { "tlsv1.0", "tlsv1.1", "tlsv1.2", "tlsv1.3" };
    out(ctx, "ssl_min_version", tls_names[settings.ssl_min_version]);
    out(ctx, "auth_enabled_sasl", settings.sasl ? "yes" : "no");
    out(ctx, "auth_enabled_ascii", settings.auth_file != NULL ? "yes" : "no");
    out(ctx, "tier_key", settings.tier_key != NULL ? "yes" : "no");
    if (settings.ssd_path != NULL) {
        snprintf(v, sizeof(v), "%d", settings.ssd_buf_size);
        out(ctx, "ext_wbuf_size", v);
        snprintf(v, sizeof(v), "%d", settings.ext_item_size);
        out(ctx, "ext_item_size", v);
        /* memcached shows its "off" as UINT_MAX */
        snprintf(v, sizeof(v), "%u", settings.ext_item_age > 0
                 ? (unsigned)settings.ext_item_age : 4294967295u);
        out(ctx, "ext_item_age", v);
        snprintf(v, sizeof(v), "%d",
                 __atomic_load_n(&settings.ext_recache_rate, __ATOMIC_RELAXED));
        out(ctx, "ext_recache_rate", v);
        snprintf(v, sizeof(v), "%d",
                 __atomic_load_n(&settings.ext_compact_under, __ATOMIC_RELAXED));
        out(ctx, "ext_compact_under", v);
        double frag;
        __atomic_load(&settings.ext_max_frag, &frag, __ATOMIC_RELAXED);
        snprintf(v, sizeof(v), "%.2f", frag);
        out(ctx, "ext_max_frag", v);
        out(ctx, "ext_drop_unread",
            __atomic_load_n(&settings.ext_drop_unread, __ATOMIC_RELAXED) ? "yes" : "no");
        snprintf(v, sizeof(v), "%d",
                 __atomic_load_n(&settings.ext_low_ttl, __ATOMIC_RELAXED));
        out(ctx, "ext_low_ttl", v);
        snprintf(v, sizeof(v), "%d",
                 __atomic_load_n(&settings.ext_drop_under, __ATOMIC_RELAXED));
        out(ctx, "ext_drop_under", v);
    }
    for (size_t i = 0; i < sizeof(mc_settings_rows) / sizeof(mc_settings_rows[0]); i++) {
        const char *val = mc_settings_rows[i].value;
        if (mc_settings_rows[i].ssd && settings.ssd_path == NULL)
            continue;
        const struct option_def *o = mc_settings_rows[i].opt != NULL
                                     ? opt_by_name(mc_settings_rows[i].opt) : NULL;
        const char *arg = o != NULL ? ignored_arg[o - options] : NULL;
        if (arg != NULL && mc_settings_rows[i].scale != 0) {
            snprintf(v, sizeof(v), "%lld", atoll(arg) * mc_settings_rows[i].scale);
            val = v;
        } else if (arg != NULL) {
            val = arg;
        }
        out(ctx, mc_settings_rows[i].name, val);
    }
}

static void (*compact_under_apply)(unsigned pages);

void settings_on_compact_under(void (*apply)(unsigned pages))
{
    compact_under_apply = apply;
}

void settings_set_compact_under(int pages)
{
    __atomic_store_n(&settings.ext_compact_under, pages, __ATOMIC_RELAXED);
    if (compact_under_apply != NULL)
        compact_under_apply((unsigned)pages);
}

void settings_each(void (*out)(void *ctx, const char *name, const char *value),
                   void *ctx)
{
    char v[64];
    for (size_t i = 0; i < NOPTIONS; i++) {
        const struct option_def *o = &options[i];
        if (!o->stat_name)
            continue;
        const char *str = v;
        switch (o->kind) {
        case OPT_INT:
        case OPT_SIZE:
        case OPT_VERBOSE:
            snprintf(v, sizeof(v), "%d",
                     __atomic_load_n((int *)opt_field(o), __ATOMIC_RELAXED));
            break;
        case OPT_OCTAL:
            snprintf(v, sizeof(v), "%o", *(int *)opt_field(o));
            break;
        case OPT_MEGABYTES:
        case OPT_BYTES:
            snprintf(v, sizeof(v), "%zu", *(size_t *)opt_field(o));
            break;
        case OPT_DOUBLE:
            snprintf(v, sizeof(v), "%.2f", *(double *)opt_field(o));
            break;
        case OPT_STRING:
            str = *(char **)opt_field(o);
            if (str == NULL)
                str = "NULL";
            break;
        case OPT_CHAR:
            snprintf(v, sizeof(v), "%c", *(char *)opt_field(o));
            break;
        case OPT_CHOICE:
            str = o->choices[*(int *)opt_field(o)];
            break;
        case OPT_SET:
            str = *(bool *)opt_field(o) ? "yes" : "no";
            break;
        case OPT_CLEAR:
            /* Shown the way memcached shows them: "evictions on". */
            if (strcmp(o->stat_name, "evictions") == 0)
                str = *(bool *)opt_field(o) ? "on" : "off";
            else
                str = *(bool *)opt_field(o) ? "yes" : "no";
            break;
        default:
            continue;
        }
        out(ctx, o->stat_name, str);
    }
    snprintf(v, sizeof(v), "%d", __atomic_load_n(&settings.lru_crawler_sleep, __ATOMIC_RELAXED));
    out(ctx, "lru_crawler_sleep", v);
    snprintf(v, sizeof(v), "%d", __atomic_load_n(&settings.lru_crawler_tocrawl, __ATOMIC_RELAXED));
    out(ctx, "lru_crawler_tocrawl", v);
    out(ctx, "detail_enabled",
        __atomic_load_n(&settings.detail_enabled, __ATOMIC_RELAXED) ? "yes" : "no");
    out(ctx, "oldest", "0");
    out(ctx, "binding_protocol", settings.protocol == PROTOCOL_ASCII ? "ascii"
                                 : settings.protocol == PROTOCOL_BINARY ? "binary"
                                 : "auto-negotiate");
    snprintf(v, sizeof(v), "%d", settings.slab_page_size);
    out(ctx, "slab_page_size", v);
    mc_settings(out, ctx);
}

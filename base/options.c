/*
 * base/options.c - the option table: every option the server takes, each in
 * one row, with the checks that parse a value into the fields derived from
 * it, and -h, printed from the table.  Parsing the command line and the
 * checks that span options are settings.c's.
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
#include "base/settings.h"
#include "base/settings_int.h"
#include "base/settings_int.h"
#include "base/util.h"

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
const struct option_def settings_options[] = {
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
      "given, 8 with NVM or SSD (ssd_path), so that the first class holds a meta tuple"),
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
    { OPT(0, "lru_maintainer", OPT_SET, S(lru_segmented), 0, 0, true, "lru_segmented",
      NULL, "memcached's segmented LRU: each slab class keeps HOT, WARM and "
      "COLD queues (moved between by the maintainer, evicted from COLD) "
      "instead of the Lazy LRU; not with a lower tier (ignored, with a note)") },
    { OPT(0, "no_lru_maintainer", OPT_CLEAR, S(lru_segmented), 0, 0, true, NULL,
      NULL, "keep the Lazy LRU (the default)") },
    { OPT(0, "hot_lru_pct", OPT_INT, S(hot_lru_pct), 1, 79, true, "hot_lru_pct",
      "<pct>", "lru_maintainer: the most HOT holds, in percent of its "
      "class's bytes"), .def = "20" },
    { OPT(0, "warm_lru_pct", OPT_INT, S(warm_lru_pct), 1, 79, true, "warm_lru_pct",
      "<pct>", "lru_maintainer: likewise for WARM (the two add up to 80 "
      "at most)"), .def = "40" },
    { OPT(0, "hot_max_factor", OPT_DOUBLE, S(hot_max_factor), 0.01, 1000, true,
      "hot_max_factor", "<x>", "lru_maintainer: an item older than this times "
      "COLD's oldest leaves HOT"), .def = "0.2" },
    { OPT(0, "warm_max_factor", OPT_DOUBLE, S(warm_max_factor), 0.01, 1000, true,
      "warm_max_factor", "<x>", "lru_maintainer: likewise for WARM"), .def = "2.0" },
    { OPT(0, "temporary_ttl", OPT_INT, S(temporary_ttl), 0, 1 << 30, true,
      "temporary_ttl", "<secs>", "given, memcached's TEMP LRU: an item stored "
      "with this many seconds or fewer to live goes to a queue of its class "
      "that nothing evicts from; it leaves as it expires. Not with a lower "
      "tier"),
      .def = "61" },
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
      "not tmpfs) and its size, e.g. /var/lib/tac/ssd.dat:64g; given again "
      "(up to 8 times), one more file of the tier, its pages spread over them"),
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
      "memcached's extstore file: a file of the SSD tier, as ssd_path (given "
      "again, one more file; an extstore file needs tier_reformat=yes once)"),
      .check = check_ext_path,
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
    IGNORED("hash_algorithm"),
    IGNORED("tail_repair_time"),
    IGNORED("slab_chunk_max"),
    IGNORED("no_maxconns_fast"),
    IGNORED("lru_crawler_sleep"),
    IGNORED("lru_crawler_tocrawl"),
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
const size_t settings_noptions = sizeof(settings_options) / sizeof(settings_options[0]);
_Static_assert(sizeof(settings_options) / sizeof(settings_options[0]) <= SETTINGS_MAX_OPTIONS,
               "SETTINGS_MAX_OPTIONS holds every row");

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

/* spec, an ssd_path or ext_path value, added to the SSD tier's files:
 * ssd_files and ssd_sizes (above 0), ssd_file the first, ssd_size their
 * sum, and ssd_path every spec given, joined with ','. */
static bool add_ssd_file(const char *opt, const char *spec)
{
    if (settings.ssd_nfiles == SETTINGS_SSD_FILES)
        settings_die("-o %s: given more than " "8" " times; the SSD tier takes at "
                     "most 8 files%s", opt, "");
    char *path;
    size_t size;
    if (!split_path_size(spec, &path, &size))
        return false;
    if (size == 0) {
        free(path);
        return false;
    }
    for (unsigned k = 0; k < settings.ssd_nfiles; k++)
        if (strcmp(settings.ssd_files[k], path) == 0)
            settings_die("-o %s: the file %s is given twice; each file of the "
                         "SSD tier is given once", opt, path);
    char *joined = NULL;
    if (settings_ssd_spec == NULL)
        joined = strdup(spec);
    else if (asprintf(&joined, "%s,%s", settings_ssd_spec, spec) < 0)
        joined = NULL;
    if (joined == NULL) {
        free(path);
        return false;
    }
    free(settings_ssd_spec);
    settings_ssd_spec = joined;
    free(settings.ssd_path);
    settings.ssd_path = strdup(joined);
    settings.ssd_files[settings.ssd_nfiles] = path;
    settings.ssd_sizes[settings.ssd_nfiles++] = size;
    settings.ssd_file = settings.ssd_files[0];
    settings.ssd_size += size;
    return settings.ssd_path != NULL;
}

/* ssd_path: a file of the SSD tier; given again, one more file. */
static bool check_ssd_path(const struct option_def *o)
{
    (void)o;
    char *spec = strdup(settings.ssd_path);
    bool ok = spec != NULL && add_ssd_file("ssd_path", spec);
    free(spec);
    return ok;
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

/* ext_path: a file of the SSD tier, as ssd_path. */
static bool check_ext_path(const struct option_def *o)
{
    (void)o;
    return add_ssd_file("ext_path", settings.ext_path);
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
    for (size_t i = 0; i < settings_noptions; i++) {
        const struct option_def *o = &settings_options[i];
        if (o->extended)
            continue;
        char left[64];
        snprintf(left, sizeof(left), "-%c, --%s%s%s", o->short_flag, o->name,
                 o->arg ? "=" : "", o->arg ? o->arg : "");
        usage_row(left, o);
    }
    printf("\nExtended options (-o name=value,...):\n");
    for (size_t i = 0; i < settings_noptions; i++) {
        const struct option_def *o = &settings_options[i];
        if (!o->extended || o->help == NULL)
            continue;
        char left[64];
        snprintf(left, sizeof(left), "   - %s%s%s:", o->name,
                 o->arg ? "=" : "", o->arg ? o->arg : "");
        usage_row(left, o);
    }
    /* The memcached tuning names, by name. */
    char names[1024] = "";
    for (size_t i = 0; i < settings_noptions; i++) {
        const struct option_def *o = &settings_options[i];
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

/*
 * settings.h - process-wide settings, the server clock and shared constants.
 *
 * Owns: `settings` (written once by option parsing in settings.c before any
 * thread starts, read-only afterwards except the few fields marked "atomic"),
 * and the process clock `current_time` (seconds since start, advanced by the
 * listener thread's clock event, read by every thread with mc_now()).
 *
 * This is not a god header: it holds only what every module needs.  Item,
 * slab, hash, connection and stats state live behind their own headers.
 */
#ifndef SETTINGS_H
#define SETTINGS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <time.h>

#define KEY_MAX_LENGTH 250
/* exptime values above this many seconds are absolute unix times. */
#define REALTIME_MAXDELTA (60 * 60 * 24 * 30)
#define MAX_SLAB_CLASSES 64
#define MAX_PARTITIONS 64
#define SLAB_PAGE_SIZE (1024 * 1024)

/*
 * What VERSION and `stats` report.  Clients read the memcached release out
 * of it to pick features (libmemcached treats 1.6+ differently), so it
 * leads with the memcached release whose behaviour this server follows,
 * then names this server's own version.
 */
#define MEMCACHED_COMPAT_VERSION "1.6.18"
#define SERVER_VERSION MEMCACHED_COMPAT_VERSION "-tac-" PACKAGE_VERSION

/* Seconds since process start, as the server clock sees them. */
typedef uint32_t rel_time_t;

/* A single request line may grow a connection's read buffer up to this. */
#define CONN_RBUF_MAX (16 * 1024 * 1024)
/* Files of the SSD tier (ssd_path / ext_path given so often); the SSD
 * library's SSD_MAX_FILES. */
#define SETTINGS_SSD_FILES 8

/* -o tier_policy */
enum settings_tier_policy {
    TIER_POLICY_TAC,
    TIER_POLICY_ANTI2,
    TIER_POLICY_ANTITUPLE,
    TIER_POLICY_TWOTIER,
};

/* -o ssd_io_engine */
/* -B: which protocols a connection may speak. */
enum settings_protocol { PROTOCOL_AUTO = 0, PROTOCOL_ASCII, PROTOCOL_BINARY };

/* -o metrics_auth, with -Y or -S: the users of those, or nobody. */
enum settings_metrics_auth { METRICS_AUTH_USERS = 0, METRICS_AUTH_NONE };

enum settings_ssd_engine {
    SSD_ENGINE_URING,
    SSD_ENGINE_THREADS,
};

struct settings {
    size_t maxbytes;        /* -m: DRAM for items and meta tuples */
    int maxconns;           /* -c */
    int port;               /* -p (0 = off) */
    int udpport;            /* -U (0 = off, the default) */
    char *inter;            /* -l: listen addresses, comma separated */
    int protocol;           /* -B: enum settings_protocol */
    int verbose;            /* -v (atomic: `verbosity` command writes it) */
    bool evict_to_free;     /* false with -M */
    char *socketpath;       /* -s */
    int access;             /* -a: unix socket mode */
    double factor;          /* -f: slab growth factor */
    int chunk_size;         /* -n: minimum space for key+value+flags */
    int num_threads;        /* -t */
    int partitions;         /* -o partitions (default = num_threads) */
    int reqs_per_event;     /* -R */
    bool use_cas;           /* false with -C */
    int backlog;            /* -b */
    int item_size_max;      /* -I */
    int slab_page_size;     /* bytes per slab page (1 MB, larger if -I is) */
    bool lock_memory;       /* -k */
    bool prealloc;          /* -L */
    int idle_timeout;       /* -o idle_timeout, seconds, 0 = off */
    bool shutdown_command;  /* -A */
    bool flush_enabled;     /* false with -F */
    bool daemonize;         /* -d */
    char *pid_file;         /* -P */
    char *auth_file;        /* -Y: ASCII authentication's user:password file */
    bool sasl;              /* -S: SASL authentication, binary protocol only */
    bool tls;               /* -Z: TLS on TCP listeners (tls.c) */
    char *ssl_chain_cert;   /* -o ssl_*: as memcached's */
    char *ssl_key;
    char *ssl_ca_cert;
    char *ssl_ciphers;
    int ssl_keyformat;      /* 1 PEM, 2 DER */
    int ssl_verify_mode;    /* 0-3 */
    int ssl_min_version;    /* 0-3: TLS 1.0-1.3 */
    int ssl_wbuf_size;      /* kilobytes */
    bool ssl_session_cache;
    bool ssl_kernel_tls;
    char *username;         /* -u */
    int maxconns_fast;      /* -o maxconns_fast: accepted, no effect */
    int hashpower_init;     /* -o hashpower */
    int crawler_interval;   /* -o crawler_interval: seconds between expiry crawls */
    bool lru_crawler;       /* -o lru_crawler / no_lru_crawler (atomic: the
                               `lru_crawler enable|disable` command writes it) */
    int lru_crawler_sleep;  /* `lru_crawler sleep`: shown, no effect (atomic) */
    int lru_crawler_tocrawl; /* `lru_crawler tocrawl`: shown, no effect (atomic) */
    /* memcached's segmented LRU (engine/lru_seg.c), DRAM only */
    bool lru_segmented;     /* -o lru_maintainer: HOT, WARM and COLD queues */
    int hot_lru_pct;        /* -o hot_lru_pct: HOT's share of a class's bytes */
    int warm_lru_pct;       /* -o warm_lru_pct: WARM's share */
    double hot_max_factor;  /* -o hot_max_factor: HOT's age bound / COLD's age */
    double warm_max_factor; /* -o warm_max_factor: WARM's likewise */
    bool temp_lru;          /* -o temporary_ttl given: the TEMP queue */
    int temporary_ttl;      /* -o temporary_ttl: seconds */
    bool dump_enabled;      /* false with -X: no key dumps */
    bool watch_enabled;     /* false with -W: no watch */
    char prefix_delimiter;  /* -D: ends a key's prefix for stats detail */
    bool detail_enabled;    /* stats detail on|off (atomic) */
    bool slab_reassign;     /* -o slab_reassign / no_slab_reassign */
    int slab_automove;      /* -o slab_automove=0|1 (atomic: `slabs automove`
                               writes it) */
    char *nvm_path;         /* -o nvm_path=PATH:SIZE (NULL = no NVM tier) */
    char *nvm_file;         /*   its PATH */
    size_t nvm_size;        /*   its SIZE in bytes (0 = a whole device) */
    char *nvm_latency;      /* -o nvm_latency=READ_NS:WRITE_NS (NULL = 0:0) */
    unsigned nvm_read_ns;   /*   READ_NS */
    unsigned nvm_write_ns;  /*   WRITE_NS */
    int evict_threads;      /* -o evict_threads (0 = half the cores) */
    int fetch_threads;      /* -o fetch_threads (default -t; 0 = none) */
    int tier_policy;        /* -o tier_policy: enum settings_tier_policy */
    char *nvm_admission;    /* -o nvm_admission=always|obp:PCT */
    int nvm_obp_pct;        /*   PCT, or -1 for always */
    int dram_free_watermark; /* -o dram_free_watermark, bytes (0 = auto) */
    int nvm_free_watermark; /* -o nvm_free_watermark, bytes (0 = auto) */
    char *ssd_path;         /* -o ssd_path=PATH:SIZE (NULL = no SSD tier);
                               given several times: each, joined with ',' */
    char *ssd_file;         /*   the first PATH */
    size_t ssd_size;        /*   the SIZEs in bytes, summed */
    unsigned ssd_nfiles;    /*   the files, in the order given: */
    char *ssd_files[SETTINGS_SSD_FILES];
    size_t ssd_sizes[SETTINGS_SSD_FILES];
    int ssd_page_size;      /* -o ssd_page_size, bytes (0 = default) */
    int ssd_buf_size;       /* -o ssd_buf_size, bytes */
    int ssd_io_engine;      /* -o ssd_io_engine: enum settings_ssd_engine */
    int ssd_free_pages;     /* -o ssd_free_pages (0 = auto) */
    char *ext_path;         /* -o ext_path (memcached's extstore): ssd_path;
                               the last given */
    int ext_page_size;      /* -o ext_page_size, megabytes: ssd_page_size */
    int ext_wbuf_size;      /* -o ext_wbuf_size, megabytes: ssd_buf_size */
    int ext_item_size;      /* -o ext_item_size: smallest value written to SSD */
    int ext_item_age;       /* -o ext_item_age: seconds unread before a DRAM
                               item moves to SSD regardless of room; 0 off */
    int ext_threads;        /* -o ext_threads: SSD thread pool size, 0 = default */
    int ext_compact_under;  /* -o ext_compact_under: ssd_free_pages - 1 */
    int ext_recache_rate;   /* -o ext_recache_rate: every Nth SSD read moves
                               its item to DRAM; 0 off (atomic: `extstore
                               recache_rate`) */
    double ext_max_frag;    /* -o ext_max_frag: share of a page live at which
                               defrag drops the oldest page instead of
                               re-packing (atomic: `extstore max_frag`) */
    bool ext_drop_unread;   /* -o ext_drop_unread: that drop moves the items
                               read again after their first read (atomic) */
    int ext_low_ttl;        /* -o ext_low_ttl: items expiring within this
                               many seconds go to SSD pages of their own
                               (atomic: `extstore low_ttl`); 0 off */
    int ext_drop_under;     /* -o ext_drop_under: with ext_drop_unread, free
                               pages at or under which that drop starts
                               (atomic: `extstore drop_under`) */
    int tier_reformat;      /* -o tier_reformat: 1 = format tier files that
                               hold something else */
    char *tier_key;         /* -o tier_key: key file sealing NVM and SSD */
    int recovery;           /* -o recovery: 1 = on (default), 0 = off */
    int dram_log;           /* -o dram_log: 1 = on, 0 = off (default) */
    size_t dram_log_size;   /* -o dram_log_size, bytes (0 = auto: 2x -m) */
    char *memory_file;      /* -e: the restart state file (NULL = default) */
    int temp_sample_interval; /* -o temp_sample_interval: seconds, 0 = off */
    int temp_sample_size;   /* -o temp_sample_size: items per sample */
    size_t conn_mem_limit;  /* -o conn_mem_limit, bytes (0 = auto until
                               settings_finalize) */
    size_t read_buf_mem_limit; /* -o read_buf_mem_limit (memcached's name,
                               megabytes), bytes; 0 = not given */
    int store_wait_ms;      /* -o store_wait_ms: longest wait for room */
    int metrics_port;       /* -o metrics_port: Prometheus endpoint, 0 = off */
    char *metrics_listen;   /* -o metrics_listen: its addresses, ';' separated */
    int metrics_auth;       /* -o metrics_auth: enum settings_metrics_auth */
    int metrics_max_conns;  /* -o metrics_max_conns: open connections at most */
    int metrics_timeout;    /* -o metrics_timeout: a connection's life, seconds */
};

extern struct settings settings;

/* The server clock, seconds since start; see mc_now(). */
extern rel_time_t current_time;
/* Unix time at which current_time was 0. */
extern time_t process_started;

static inline rel_time_t mc_now(void)
{
    return __atomic_load_n(&current_time, __ATOMIC_RELAXED);
}

/* Sets defaults into `settings`.  Called before option parsing. */
void settings_init(void);
/* What the command line gave a memcached option that is accepted and
 * ignored here ("yes" for a bare flag), or NULL: it was not given. */
const char *settings_ignored_arg(const char *name);
/* True if option `name` (its long name) was on the command line. */
bool settings_given(const char *name);

/*
 * Parses the command line (memcached's short and long flags, and -o
 * extended options) into `settings`.  Prints an error and exits on bad
 * input; handles -h and -V itself.
 */
void settings_parse_args(int argc, char **argv);
/* Fills derived defaults (partitions, page size) and checks limits.
 * Returns false after printing why the combination is invalid.  After it
 * `settings` is read-only but for verbose and slab_automove. */
bool settings_finalize(void);
/* The name of a choice option's value: "tac" for "tier_policy". */
const char *settings_choice(const char *name);
/* Prints the -h text. */
void settings_usage(void);

/* `stats settings`: out(ctx, name, value) for each option shown there, in
 * table order, then the fixed lines memcached also prints. */
/* `extstore compact_under N` at run time: sets ext_compact_under and
 * calls what the SSD tier registered (settings_on_compact_under) to apply
 * it, so that the text protocol reaches no tier code. */
void settings_on_compact_under(void (*apply)(unsigned pages));
void settings_set_compact_under(int pages);

void settings_each(void (*out)(void *ctx, const char *name, const char *value),
                   void *ctx);

/* Advances current_time from the wall clock.  Listener thread only. */
void clock_update(void);

/*
 * Converts a protocol exptime into server time, following memcached:
 *   0                  -> 0 (never expires)
 *   negative           -> already expired
 *   <= 30 days         -> relative to now
 *   > 30 days          -> absolute unix time
 */
rel_time_t realtime(int64_t exptime);

/* Inverse for reporting: remaining TTL in seconds, -1 if none. */
int64_t ttl_remaining(rel_time_t exptime);

#endif

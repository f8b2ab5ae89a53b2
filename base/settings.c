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

#include "base/settings.h"
#include "base/settings_int.h"
#include "base/util.h"

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


/* Which rows the command line gave, for the automatic defaults and the
 * no-effect notes. */
static bool given[SETTINGS_MAX_OPTIONS];
/* What an OPT_IGNORED row was given ("yes" for a bare flag), shown under
 * memcached's `stats settings` name (mc_settings). */
static char *ignored_arg[SETTINGS_MAX_OPTIONS];
char *settings_ssd_spec;                  /* every ssd_path / ext_path value */

static void *opt_field(const struct option_def *o)
{
    return (char *)&settings + o->offset;
}

static const struct option_def *opt_by_name(const char *name)
{
    for (size_t i = 0; i < settings_noptions; i++)
        if (strcmp(settings_options[i].name, name) == 0)
            return &settings_options[i];
    return NULL;
}

const char *settings_ignored_arg(const char *name)
{
    const struct option_def *o = opt_by_name(name);
    return o != NULL && o->kind == OPT_IGNORED ? ignored_arg[o - settings_options] : NULL;
}

static bool opt_given(const char *name)
{
    const struct option_def *o = opt_by_name(name);
    return o != NULL && given[o - settings_options];
}

bool settings_given(const char *name)
{
    return opt_given(name);
}

void settings_die(const char *fmt, const char *a, const char *b)
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
            settings_die("option '%s' needs a value%s", name, "");
        errno = 0;
        v = strtod(arg, &end);
        if (errno || end == arg || *end != '\0' ||
            (o->kind != OPT_DOUBLE && v != (double)(long long)v))
            settings_die("option '%s': '%s' is not a number", name, arg);
        if (v < o->min || v > o->max)
            settings_die("option '%s': %s is out of range", name, arg);
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
            settings_die("option '%s': '%s' is not a size (e.g. 512k, 1m)", name, arg ? arg : "");
        if ((double)bytes < o->min || (double)bytes > o->max)
            settings_die("option '%s': %s is out of range", name, arg);
        if (o->kind == OPT_SIZE)
            *(int *)opt_field(o) = (int)bytes;
        else
            *(size_t *)opt_field(o) = (size_t)bytes;
        break;
    }
    case OPT_OCTAL:
        if (!arg)
            settings_die("option '%s' needs a value%s", name, "");
        errno = 0;
        v = (double)strtol(arg, &end, 8);
        if (errno || end == arg || *end || v < o->min || v > o->max)
            settings_die("option '%s': '%s' is not an octal mask", name, arg);
        *(int *)opt_field(o) = (int)v;
        break;
    case OPT_STRING: {
        if (!arg)
            settings_die("option '%s' needs a value%s", name, "");
        char **f = (char **)opt_field(o);
        char *was = *f != o->def ? *f : NULL;
        /* -l given again adds its addresses, as memcached's does; any
         * other string option given again replaces the earlier value. */
        *f = was != NULL && f == &settings.inter ? opt_list_join(was, arg) : strdup(arg);
        if (*f == NULL)
            settings_die("option '%s': out of memory%s", name, "");
        free(was);
        break;
    }
    case OPT_CHAR:
        if (!arg || strlen(arg) != 1)
            settings_die("option '%s' takes a single character, not '%s'", name, arg ? arg : "");
        *(char *)opt_field(o) = arg[0];
        break;
    case OPT_CHOICE: {
        if (!arg)
            settings_die("option '%s' needs a value%s", name, "");
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
        free(ignored_arg[o - settings_options]);
        ignored_arg[o - settings_options] = strdup(arg ? arg : "yes");
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
    free(settings_ssd_spec);
    settings_ssd_spec = NULL;
    for (size_t i = 0; i < settings_noptions; i++) {
        const struct option_def *o = &settings_options[i];
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
            settings_die("-o %s is not supported yet: refusing to start rather than "
                "serve without what it asks for%s", tok, "");
        if (!o || !o->extended)
            settings_die("Illegal suboption \"%s\"%s", tok, "");
        given[o - settings_options] = true;
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
    struct option longopts[SETTINGS_MAX_OPTIONS + 1];
    char shortopts[SETTINGS_MAX_OPTIONS * 2 + 2];
    size_t nlong = 0, ns = 0;

    for (size_t i = 0; i < settings_noptions; i++) {
        const struct option_def *o = &settings_options[i];
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
        for (size_t i = 0; i < settings_noptions; i++)
            if (!settings_options[i].extended && settings_options[i].short_flag == ch)
                o = &settings_options[i];
        if (!o) {
            fprintf(stderr, "Illegal argument \"%s\"\n",
                    optind > 0 && optind <= argc ? argv[optind - 1] : "?");
            fprintf(stderr, "Try -h for the list of options.\n");
            exit(EX_USAGE);
        }
        given[o - settings_options] = true;
        if (o->kind == OPT_ACTION)
            handle_action(o->short_flag, optarg);
        else
            opt_apply(o, optarg);
    }
    if (optind < argc)
        settings_die("unexpected argument \"%s\"%s; try -h", argv[optind], "");

    /* Once per option, however often given. */
    for (size_t i = 0; i < settings_noptions; i++) {
        const struct option_def *o = &settings_options[i];
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
/* The listen address and port, and -e's file, checked against memcached's FILE.meta. */
static bool finalize_listen(void)
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
    return true;
}

/* Options that name the same thing twice: one of each pair may be given. */
static bool finalize_pairs(void)
{
    if (opt_given("ext_path") && opt_given("ssd_path")) {
        fprintf(stderr, "-o ext_path and -o ssd_path both name the SSD tier's "
                "files; give one of the two, once per file\n");
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
    return true;
}

/* TLS, SASL and ASCII authentication: what each needs and what it cannot cover. */
static bool finalize_security(void)
{
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
    return true;
}

/* Threads, partitions, the slab page size and -I against -m. */
static bool finalize_threads_and_sizes(void)
{
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
    return true;
}

/* The tiers: the first slab classes, twotier, the DRAM log and the SSD geometry. */
static bool finalize_tiers(void)
{
    /* Lower tiers keep meta tuples in DRAM: the first class holds one
     * exactly (ITEM_COMPACT_HDR and the key's 8-byte fingerprint).  An NVM
     * path counts even under twotier, which drops it below.  An SSD
     * tier named with memcached's -o ext_path keeps memcached's classes
     * (its -n 48, no fine steps: slabs.c), so that a small item sits in
     * the class memcached would give it. */
    if (!opt_given("slab-min-size") && settings.ext_path == NULL) {
        if (settings.ssd_path != NULL || settings.nvm_path != NULL)
            settings.chunk_size = 8;
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
    return true;
}

/* The memory connections may hold, and -n against -I. */
static bool finalize_connections(void)
{
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

/* memcached's segmented LRU and TEMP queue (engine/lru_seg.c): as memcached,
 * temporary_ttl given turns TEMP on, and no_modern keeps one queue.  With a
 * lower tier, the Lazy LRU's temperatures decide what moves down and up,
 * so both stay off there. */
static bool finalize_lru(void)
{
    settings.temp_lru = opt_given("temporary_ttl");
    if (settings_ignored_arg("no_modern") != NULL)
        settings.lru_segmented = false;
    if (settings.hot_lru_pct + settings.warm_lru_pct > 80) {
        fprintf(stderr, "hot_lru_pct + warm_lru_pct cannot be more than 80%%\n");
        return false;
    }
    if ((settings.lru_segmented || settings.temp_lru) &&
        (settings.nvm_path != NULL || settings.ssd_path != NULL)) {
        fprintf(stderr, "note: -o lru_maintainer and -o temporary_ttl have no "
                "effect with a lower tier: its Lazy LRU is kept\n");
        settings.lru_segmented = false;
        settings.temp_lru = false;
    }
    return true;
}

bool settings_finalize(void)
{
    return finalize_listen() && finalize_pairs() && finalize_security() &&
           finalize_threads_and_sizes() && finalize_tiers() && finalize_connections() &&
           finalize_lru();
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
    { "watcher_logbuf_size", "watcher_logbuf_size", "262144", 1024, false },
    { "worker_logbuf_size", "worker_logbuf_size", "65536", 1024, false },
    { "track_sizes", NULL, "no", 0, false },
    { "inline_ascii_response", NULL, "no", 0, false },
    { "ext_max_sleep", "ext_max_sleep", "1000000", 0, true },
    { "slab_automove_freeratio", "slab_automove_freeratio", "0.010", 0, false },
    { "num_napi_ids", NULL, "(null)", 0, false },
};

/* A run-time tunable's line (`extstore <name> <value>` writes it). */
static void out_tunable(void (*out)(void *ctx, const char *name, const char *value),
                        void *ctx, const char *name, const int *field)
{
    char v[16];
    snprintf(v, sizeof(v), "%d", __atomic_load_n(field, __ATOMIC_RELAXED));
    out(ctx, name, v);
}

static void mc_settings(void (*out)(void *ctx, const char *name, const char *value),
                        void *ctx)
{
    char v[64];
    snprintf(v, sizeof(v), "%d", settings.num_threads);
    out(ctx, "num_threads_per_udp", v);
    static const char *const tls_names[] = { "tlsv1.0", "tlsv1.1", "tlsv1.2", "tlsv1.3" };
    out(ctx, "ssl_min_version", tls_names[settings.ssl_min_version]);
    out(ctx, "auth_enabled_sasl", settings.sasl ? "yes" : "no");
    out(ctx, "temp_lru", __atomic_load_n(&settings.temp_lru, __ATOMIC_RELAXED) ? "yes" : "no");
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
        out_tunable(out, ctx, "ext_recache_rate", &settings.ext_recache_rate);
        out_tunable(out, ctx, "ext_compact_under", &settings.ext_compact_under);
        double frag;
        __atomic_load(&settings.ext_max_frag, &frag, __ATOMIC_RELAXED);
        snprintf(v, sizeof(v), "%.2f", frag);
        out(ctx, "ext_max_frag", v);
        out(ctx, "ext_drop_unread",
            __atomic_load_n(&settings.ext_drop_unread, __ATOMIC_RELAXED) ? "yes" : "no");
        out_tunable(out, ctx, "ext_low_ttl", &settings.ext_low_ttl);
        out_tunable(out, ctx, "ext_drop_under", &settings.ext_drop_under);
    }
    for (size_t i = 0; i < sizeof(mc_settings_rows) / sizeof(mc_settings_rows[0]); i++) {
        const char *val = mc_settings_rows[i].value;
        if (mc_settings_rows[i].ssd && settings.ssd_path == NULL)
            continue;
        const struct option_def *o = mc_settings_rows[i].opt != NULL
                                     ? opt_by_name(mc_settings_rows[i].opt) : NULL;
        const char *arg = o != NULL ? ignored_arg[o - settings_options] : NULL;
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
    for (size_t i = 0; i < settings_noptions; i++) {
        const struct option_def *o = &settings_options[i];
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
        case OPT_DOUBLE: {
            double d;       /* `lru tune` writes some at run time */
            __atomic_load((double *)opt_field(o), &d, __ATOMIC_RELAXED);
            snprintf(v, sizeof(v), "%.2f", d);
            break;
        }
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
        case OPT_SET:       /* `lru mode` writes lru_segmented */
            str = __atomic_load_n((bool *)opt_field(o), __ATOMIC_RELAXED) ? "yes" : "no";
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

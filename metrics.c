/*
 * metrics.c - the stats as Prometheus text, over HTTP (metrics.h).
 *
 * Design.  One libevent HTTP server on the main event base answers
 * GET /metrics.  A scrape runs the same sections as `stats`, `stats tac`,
 * `stats settings`, `stats items`, `stats slabs` and `stats tiers` through a sink
 * that turns each numeric line into a sample:
 *   stats, stats tac
 *                  tac_<name> (a gauge), or tac_<name>_total for a counter
 *                  (stats.c's kind column); strings are left out but for
 *                  tac_version_info{version="..."} 1
 *   stats settings tac_setting_<name>, gauges, numeric values only
 *   stats items    tac_items_<name>{slab_class="N"}
 *   stats slabs    tac_slab_<name>{slab_class="N"}, and tac_slabs_<name>
 *                  for the totals
 *   stats tiers    tac_tier_<name>, untyped (memcached has no such names)
 * Samples of one family must be adjacent, so the scrape collects them,
 * sorts them by family (keeping their order within one) and writes each
 * family after its TYPE line.  A scrape costs what those `stats` commands
 * cost; nothing is kept between scrapes.
 */
#include "config.h"

#include <event2/buffer.h>
#include <event2/event.h>
#include <event2/http.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "metrics.h"
#include "settings.h"
#include "stats.h"

enum sample_type { T_COUNTER, T_GAUGE, T_UNTYPED };

struct sample {
    char family[96];
    char label[24];         /* slab class, or "" */
    char value[48];
    enum sample_type type;
    size_t order;
};

struct scrape {
    struct sample *v;
    size_t n, cap;
    const char *section;
    bool oom;
    char version[64];
};

static struct evhttp *http;

/* name with every byte Prometheus does not take in a name made '_'. */
static void put_name(char *out, size_t cap, const char *prefix, const char *name,
                     const char *suffix)
{
    int n = snprintf(out, cap, "%s%s%s", prefix, name, suffix);
    size_t len = n < 0 ? 0 : (size_t)n < cap ? (size_t)n : cap - 1;
    for (size_t i = strlen(prefix); i < len; i++) {
        char c = out[i];
        if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') ||
              (c >= '0' && c <= '9') || c == '_'))
            out[i] = '_';
    }
}

static bool numeric(const char *s)
{
    char *end;
    if (*s == '\0')
        return false;
    (void)strtod(s, &end);
    return *end == '\0';
}

static void add(struct scrape *sc, const char *family, const char *label,
                const char *value, enum sample_type type)
{
    if (sc->n == sc->cap) {
        size_t cap = sc->cap ? sc->cap * 2 : 512;
        struct sample *v = realloc(sc->v, cap * sizeof(*v));
        if (v == NULL) {
            sc->oom = true;
            return;
        }
        sc->v = v;
        sc->cap = cap;
    }
    struct sample *s = &sc->v[sc->n];
    snprintf(s->family, sizeof(s->family), "%s", family);
    snprintf(s->label, sizeof(s->label), "%s", label);
    snprintf(s->value, sizeof(s->value), "%s", value);
    s->type = type;
    s->order = sc->n++;
}

static bool in_list(const char *name, const char *const *list)
{
    for (; *list != NULL; list++)
        if (strcmp(name, *list) == 0)
            return true;
    return false;
}

/* Per class: what is a level, not a count of events. */
static const char *const item_gauges[] = {
    "number", "number_hot", "number_warm", "number_cold", "age", "age_hot",
    "age_warm", "mem_requested", "evicted_time", NULL,
};
static const char *const slab_counters[] = {
    "get_hits", "cmd_set", "delete_hits", "incr_hits", "decr_hits",
    "cas_hits", "cas_badval", "touch_hits", NULL,
};

static void general_line(struct scrape *sc, const char *key, const char *val)
{
    char fam[96];
    int kind = stats_general_kind(key);
    if (strcmp(key, "version") == 0)
        snprintf(sc->version, sizeof(sc->version), "%s", val);
    if (kind < 0 || kind == STAT_KIND_STRING || !numeric(val))
        return;
    bool counter = kind == STAT_KIND_COUNTER;
    put_name(fam, sizeof(fam), "tac_", key, counter ? "_total" : "");
    add(sc, fam, "", val, counter ? T_COUNTER : T_GAUGE);
}

/* "items:N:name" or "N:name" (slabs): the class and the name. */
static bool class_line(const char *key, char *cls, size_t cap, const char **name)
{
    const char *p = key;
    if (strncmp(p, "items:", 6) == 0)
        p += 6;
    size_t digits = strspn(p, "0123456789");
    if (digits == 0 || digits >= cap || p[digits] != ':')
        return false;
    memcpy(cls, p, digits);
    cls[digits] = '\0';
    *name = p + digits + 1;
    return true;
}

static void emit(void *ctx, const char *key, const char *val)
{
    struct scrape *sc = ctx;
    char fam[96], cls[16];
    const char *name;
    if (strcmp(sc->section, "general") == 0) {
        general_line(sc, key, val);
        return;
    }
    if (!numeric(val))
        return;
    if (strcmp(sc->section, "settings") == 0) {
        put_name(fam, sizeof(fam), "tac_setting_", key, "");
        add(sc, fam, "", val, T_GAUGE);
    } else if (strcmp(sc->section, "items") == 0) {
        if (!class_line(key, cls, sizeof(cls), &name))
            return;
        bool gauge = in_list(name, item_gauges);
        put_name(fam, sizeof(fam), "tac_items_", name, gauge ? "" : "_total");
        add(sc, fam, cls, val, gauge ? T_GAUGE : T_COUNTER);
    } else if (strcmp(sc->section, "slabs") == 0) {
        if (!class_line(key, cls, sizeof(cls), &name)) {
            put_name(fam, sizeof(fam), "tac_slabs_", key, "");
            add(sc, fam, "", val, T_GAUGE);
            return;
        }
        bool counter = in_list(name, slab_counters);
        put_name(fam, sizeof(fam), "tac_slab_", name, counter ? "_total" : "");
        add(sc, fam, cls, val, counter ? T_COUNTER : T_GAUGE);
    } else {
        put_name(fam, sizeof(fam), "tac_tier_", key, "");
        add(sc, fam, "", val, T_UNTYPED);
    }
}

static int by_family(const void *a, const void *b)
{
    const struct sample *x = a, *y = b;
    int c = strcmp(x->family, y->family);
    if (c != 0)
        return c;
    return x->order < y->order ? -1 : x->order > y->order;
}

static const char *const type_names[] = { "counter", "gauge", "untyped" };

/* The scrape as text; false for lack of memory. */
static bool render(struct evbuffer *out)
{
    static const struct { const char *section, *sub; } runs[] = {
        { "general", "" }, { "general", "tac" }, { "settings", "settings" }, { "items", "items" },
        { "slabs", "slabs" }, { "tiers", "tiers" },
    };
    struct scrape sc = { 0 };
    struct stat_sink sink = { emit, &sc };
    for (size_t i = 0; i < sizeof(runs) / sizeof(runs[0]); i++) {
        sc.section = runs[i].section;
        stats_run(runs[i].sub, &sink);
    }
    if (sc.oom) {
        free(sc.v);
        return false;
    }
    qsort(sc.v, sc.n, sizeof(*sc.v), by_family);
    evbuffer_add_printf(out, "# TYPE tac_version_info gauge\n"
                        "tac_version_info{version=\"%s\"} 1\n", sc.version);
    for (size_t i = 0; i < sc.n; i++) {
        const struct sample *s = &sc.v[i];
        if (i == 0 || strcmp(s->family, sc.v[i - 1].family) != 0)
            evbuffer_add_printf(out, "# TYPE %s %s\n", s->family, type_names[s->type]);
        if (s->label[0] != '\0')
            evbuffer_add_printf(out, "%s{slab_class=\"%s\"} %s\n", s->family, s->label,
                                s->value);
        else
            evbuffer_add_printf(out, "%s %s\n", s->family, s->value);
    }
    free(sc.v);
    return true;
}

static void on_request(struct evhttp_request *req, void *arg)
{
    (void)arg;
    const char *path = evhttp_uri_get_path(evhttp_request_get_evhttp_uri(req));
    if (path == NULL || strcmp(path, "/metrics") != 0) {
        evhttp_send_error(req, HTTP_NOTFOUND, "only /metrics is served here");
        return;
    }
    if (evhttp_request_get_command(req) != EVHTTP_REQ_GET &&
        evhttp_request_get_command(req) != EVHTTP_REQ_HEAD) {
        evhttp_send_error(req, HTTP_BADMETHOD, "GET /metrics");
        return;
    }
    struct evbuffer *out = evbuffer_new();
    if (out == NULL || !render(out)) {
        if (out != NULL)
            evbuffer_free(out);
        evhttp_send_error(req, HTTP_INTERNAL, "out of memory");
        return;
    }
    evhttp_add_header(evhttp_request_get_output_headers(req), "Content-Type",
                      "text/plain; version=0.0.4; charset=utf-8");
    evhttp_send_reply(req, HTTP_OK, "OK", out);
    evbuffer_free(out);
}

/* The host part of one -l entry: "[::1]:11211" -> "::1", "10.0.0.1:11211"
 * -> "10.0.0.1", "notls:127.0.0.1:11212" -> "127.0.0.1". */
static void host_of(const char *entry, char *out, size_t cap)
{
    if (strncmp(entry, "notls:", 6) == 0)
        entry += 6;
    if (entry[0] == '[') {
        const char *close = strchr(entry, ']');
        size_t n = close ? (size_t)(close - entry - 1) : strlen(entry + 1);
        snprintf(out, cap, "%.*s", (int)n, entry + 1);
        return;
    }
    const char *colon = strchr(entry, ':');
    if (colon != NULL && strchr(colon + 1, ':') == NULL)
        snprintf(out, cap, "%.*s", (int)(colon - entry), entry);
    else
        snprintf(out, cap, "%s", entry);
}

bool metrics_start(struct event_base *base)
{
    if (settings.metrics_port == 0)
        return true;
    http = evhttp_new(base);
    if (http == NULL)
        return false;
    evhttp_set_max_headers_size(http, 8192);
    evhttp_set_max_body_size(http, 0);
    evhttp_set_timeout(http, 10);
    evhttp_set_gencb(http, on_request, NULL);
    const char *inter = settings.inter && !settings.socketpath ? settings.inter
                                                               : "127.0.0.1";
    char *copy = strdup(inter);
    char *save = NULL;
    bool ok = copy != NULL;
    for (char *tok = copy ? strtok_r(copy, ", ", &save) : NULL; tok && ok;
         tok = strtok_r(NULL, ", ", &save)) {
        char host[128];
        host_of(tok, host, sizeof(host));
        if (evhttp_bind_socket(http, host, (ev_uint16_t)settings.metrics_port) != 0) {
            fprintf(stderr, "failed to listen on %s port %d for -o metrics_port\n",
                    host, settings.metrics_port);
            ok = false;
        }
    }
    free(copy);
    return ok;
}

void metrics_stop(void)
{
    if (http != NULL)
        evhttp_free(http);
    http = NULL;
}

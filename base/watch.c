/*
 * watch.c - the log behind `watch` (watch.h).
 *
 * Design.  A ring of WATCH_SLOTS fixed-size lines under one mutex.  An
 * event is formatted into the next slot as it happens, only when some
 * watcher wants its stream (watch_mask_), and numbered (gid).  Each
 * watcher keeps the gid it reads next; a watcher that falls a whole ring
 * behind loses the oldest lines and is told how many.  memcached keeps a
 * buffer per worker and a logger thread; one ring is enough here, since
 * watching is a debugging aid and its cost falls only on a server being
 * watched.  As in memcached, at most WATCH_MAX_WATCHERS connections watch
 * at once: every event line is formatted under the one mutex and each
 * watcher copies each line, so watchers cost every request; one more is
 * refused (`WATCHER_TOO_MANY`, proto_dump.c) and counted.
 */
#include "config.h"

#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/time.h>

#include "base/stats.h"
#include "base/util.h"
#include "base/watch.h"

#define WATCH_SLOTS 8192
/* A line with a 250-byte key URI-encoded (750 bytes) and every field fits.
 * The ring is static: its pages are touched only once watched. */
#define WATCH_LINE 1024

struct slot {
    unsigned int kind;
    uint16_t len;
    char text[WATCH_LINE];
};

struct watcher {
    struct watcher *next;
    unsigned int mask;
    uint64_t next_gid;
};

unsigned int watch_mask_;

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static struct slot *ring;               /* allocated by the first watcher */
static uint64_t next_gid = 1;           /* lock */
static struct watcher *watchers;        /* lock */
/* `stats` lines (relaxed atomics, written under lock). */
static uint64_t nwatchers, lines_sent, lines_skipped, lines_written, refused;

static void update_mask_locked(void)
{
    unsigned int m = 0;
    for (struct watcher *w = watchers; w != NULL; w = w->next)
        m |= w->mask;
    __atomic_store_n(&watch_mask_, m, __ATOMIC_RELAXED);
}

struct watcher *watcher_new(unsigned int mask, bool *too_many)
{
    *too_many = false;
    struct watcher *w = calloc(1, sizeof(*w));
    if (w == NULL)
        return NULL;
    pthread_mutex_lock(&lock);
    if (__atomic_load_n(&nwatchers, __ATOMIC_RELAXED) >= WATCH_MAX_WATCHERS) {
        __atomic_fetch_add(&refused, 1, __ATOMIC_RELAXED);
        pthread_mutex_unlock(&lock);
        free(w);
        *too_many = true;
        return NULL;
    }
    if (ring == NULL)
        ring = calloc(WATCH_SLOTS, sizeof(*ring));
    if (ring == NULL) {
        pthread_mutex_unlock(&lock);
        free(w);
        return NULL;
    }
    w->mask = mask;
    w->next_gid = next_gid;
    w->next = watchers;
    watchers = w;
    __atomic_fetch_add(&nwatchers, 1, __ATOMIC_RELAXED);
    update_mask_locked();
    pthread_mutex_unlock(&lock);
    return w;
}

void watcher_free(struct watcher *w)
{
    if (w == NULL)
        return;
    pthread_mutex_lock(&lock);
    for (struct watcher **pp = &watchers; *pp != NULL; pp = &(*pp)->next)
        if (*pp == w) {
            *pp = w->next;
            __atomic_fetch_sub(&nwatchers, 1, __ATOMIC_RELAXED);
            break;
        }
    update_mask_locked();
    pthread_mutex_unlock(&lock);
    free(w);
}

size_t watcher_read(struct watcher *w, char *buf, size_t cap)
{
    size_t n = 0;
    pthread_mutex_lock(&lock);
    uint64_t oldest = next_gid > WATCH_SLOTS ? next_gid - WATCH_SLOTS : 1;
    if (w->next_gid < oldest) {
        n = (size_t)snprintf(buf, cap, "skipped=%llu\n",
                             (unsigned long long)(oldest - w->next_gid));
        __atomic_fetch_add(&lines_skipped, oldest - w->next_gid, __ATOMIC_RELAXED);
        w->next_gid = oldest;
    }
    for (; w->next_gid < next_gid; w->next_gid++) {
        const struct slot *s = &ring[w->next_gid % WATCH_SLOTS];
        if (!(s->kind & w->mask))
            continue;
        if (n + s->len > cap)
            break;
        memcpy(buf + n, s->text, s->len);
        n += s->len;
        __atomic_fetch_add(&lines_sent, 1, __ATOMIC_RELAXED);
    }
    pthread_mutex_unlock(&lock);
    return n;
}

/* Formats "ts=... gid=... " and the rest into the next slot. */
static void emit(unsigned int kind, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));

static void emit(unsigned int kind, const char *fmt, ...)
{
    struct timeval tv;
    gettimeofday(&tv, NULL);
    pthread_mutex_lock(&lock);
    if (ring == NULL || !(watch_mask_ & kind)) {
        pthread_mutex_unlock(&lock);
        return;
    }
    uint64_t gid = next_gid++;
    __atomic_fetch_add(&lines_written, 1, __ATOMIC_RELAXED);
    struct slot *s = &ring[gid % WATCH_SLOTS];
    int h = snprintf(s->text, WATCH_LINE, "ts=%lld.%06d gid=%llu ", (long long)tv.tv_sec,
                     (int)tv.tv_usec, (unsigned long long)gid);
    va_list ap;
    va_start(ap, fmt);
    int b = vsnprintf(s->text + h, WATCH_LINE - (size_t)h, fmt, ap);
    va_end(ap);
    size_t len = (size_t)h + (b > 0 ? (size_t)b : 0);
    if (len >= WATCH_LINE)
        len = WATCH_LINE - 1;
    s->text[len - 1] = '\n';            /* a cut line still ends */
    s->len = (uint16_t)len;
    s->kind = kind;
    pthread_mutex_unlock(&lock);
}

/* The key URI-encoded, cut at 250 bytes; out holds KEYBUF bytes. */
static const char *uri_key(const char *key, size_t nkey, char *out)
{
    *util_uri_encode(key, nkey > 250 ? 250 : nkey, out) = '\0';
    return out;
}

#define KEYBUF (250 * 3 + 1)

void watch_item_get(const char *key, size_t nkey, const char *status,
                    unsigned int clsid, int cfd, uint32_t value_len)
{
    char k[KEYBUF];
    emit(WATCH_FETCHERS, "type=item_get key=%s status=%s clsid=%u cfd=%d size=%u\n",
         uri_key(key, nkey, k), status, clsid, cfd, value_len);
}

void watch_item_store(const char *key, size_t nkey, const char *status,
                      const char *cmd, int64_t ttl, unsigned int clsid, int cfd,
                      uint32_t value_len)
{
    char k[KEYBUF];
    emit(WATCH_MUTATIONS,
         "type=item_store key=%s status=%s cmd=%s ttl=%lld clsid=%u cfd=%d size=%u\n",
         uri_key(key, nkey, k), status, cmd, (long long)ttl, clsid, cfd,
         value_len);
}

void watch_eviction(const char *key, size_t nkey, bool fetched, int64_t ttl,
                    int64_t idle, unsigned int clsid, uint32_t value_len)
{
    char k[KEYBUF];
    emit(WATCH_EVICTIONS, "type=eviction key=%s fetch=%s ttl=%lld la=%lld clsid=%u size=%u\n",
         uri_key(key, nkey, k), fetched ? "yes" : "no", (long long)ttl,
         (long long)idle, clsid, value_len);
}

void watch_conn_event(bool open, const char *rip, unsigned int rport,
                      const char *transport, const char *reason, int cfd)
{
    if (open)
        emit(WATCH_CONNEVENTS, "type=conn_new rip=%s rport=%u transport=%s cfd=%d\n",
             rip, rport, transport, cfd);
    else
        emit(WATCH_CONNEVENTS,
             "type=conn_close rip=%s rport=%u transport=%s reason=%s cfd=%d\n",
             rip, rport, transport, reason, cfd);
}

void watch_tier_move(const char *key, size_t nkey, const char *from,
                     const char *to, unsigned int clsid, uint32_t value_len)
{
    char k[KEYBUF];
    emit(WATCH_TIERS, "type=tier_move key=%s from=%s to=%s clsid=%u size=%u\n",
         uri_key(key, nkey, k), from, to, clsid, value_len);
}

void watch_stats_register(void)
{
    stats_provide_counter("log_watchers", &nwatchers);
    stats_provide_counter("log_watcher_sent", &lines_sent);
    stats_provide_counter("log_watcher_skipped", &lines_skipped);
    stats_provide_counter("log_worker_written", &lines_written);
    stats_provide_counter("log_watchers_refused", &refused);
}

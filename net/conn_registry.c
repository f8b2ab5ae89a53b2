/*
 * conn_registry.c - every open connection by its descriptor, for what looks
 * across them: `stats conns` (with the listening sockets first, as
 * memcached shows them) and the connection-memory bound, whose victim
 * search marks the connections holding the most past conn_mem_limit
 * (conn.c's workers then close their own marked ones).
 *
 * Threads: any thread; the registry and the listener list are under
 * conn_registry_lock, and the fields read from another worker's
 * connections (state, last_cmd_time, mem_closable, mem_close) are atomic.
 */
#include "config.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "net/conn_registry.h"
#include "engine/items.h"
#include "base/settings.h"
#include "base/stats.h"
#include "net/worker.h"

static pthread_mutex_t conn_registry_lock = PTHREAD_MUTEX_INITIALIZER;
static conn **conn_registry;        /* by fd; protected by conn_registry_lock */
static int conn_registry_size;

void conn_registry_add(conn *c)
{
    pthread_mutex_lock(&conn_registry_lock);
    if (c->sfd >= conn_registry_size) {
        int n = conn_registry_size ? conn_registry_size : 1024;
        while (n <= c->sfd)
            n *= 2;
        conn **grown = realloc(conn_registry, n * sizeof(*grown));
        if (grown) {
            memset(grown + conn_registry_size, 0,
                   (n - conn_registry_size) * sizeof(*grown));
            conn_registry = grown;
            conn_registry_size = n;
        }
    }
    if (c->sfd < conn_registry_size)
        conn_registry[c->sfd] = c;
    pthread_mutex_unlock(&conn_registry_lock);
}

void conn_registry_remove(conn *c)
{
    pthread_mutex_lock(&conn_registry_lock);
    if (c->sfd < conn_registry_size && conn_registry[c->sfd] == c)
        conn_registry[c->sfd] = NULL;
    pthread_mutex_unlock(&conn_registry_lock);
}

/* ---- Connection memory (conn_mem_limit) ------------------------------- */

static size_t conn_mem_holding(const conn *c)
{
    if (c->transport == TRANSPORT_UDP)
        return 0;
    size_t n = c->rsize > CONN_RBUF_INITIAL ? c->rsize - CONN_RBUF_INITIAL : 0;
    if (c->state == conn_nread && conn_value_counted(c))
        n += ITEM_ntotal(c->item);
    if (c->reply_bytes > CONN_REPLY_ALLOWANCE)
        n += c->reply_bytes - CONN_REPLY_ALLOWANCE;
    return n + c->room_held;
}

/* Marks the biggest holders for closing until the marked bytes cover the
 * excess over the bound, and wakes their workers.  Holds the registry lock
 * so that no marked connection is freed meanwhile.  Bytes of stores parked
 * for room do not count here: such a connection reads nothing more until
 * its store is done (TCP pushes back), and closing it would turn a wait
 * into a lost request. */
static void conn_mem_over(uint64_t used)
{
    uint64_t limit = settings.conn_mem_limit;
    pthread_mutex_lock(&conn_registry_lock);
    uint64_t marked = 0;
    for (int fd = 0; fd < conn_registry_size; fd++) {
        conn *v = conn_registry[fd];
        if (v && __atomic_load_n(&v->mem_close, __ATOMIC_RELAXED))
            marked += __atomic_load_n(&v->mem_closable, __ATOMIC_RELAXED);
    }
    while (used > limit + marked) {
        conn *victim = NULL;
        size_t most = 0;
        for (int fd = 0; fd < conn_registry_size; fd++) {
            conn *v = conn_registry[fd];
            if (!v || __atomic_load_n(&v->mem_close, __ATOMIC_RELAXED))
                continue;
            size_t held = __atomic_load_n(&v->mem_closable, __ATOMIC_RELAXED);
            if (held > most) {
                most = held;
                victim = v;
            }
        }
        if (victim == NULL)
            break;
        __atomic_store_n(&victim->mem_close, true, __ATOMIC_RELAXED);
        marked += most;
        worker_wake(victim->thread);    /* it closes its own marked ones */
    }
    pthread_mutex_unlock(&conn_registry_lock);
}

/* Brings c's share of conn_mem_bytes up to date. */
void conn_mem_sync(conn *c)
{
    size_t now = conn_mem_holding(c);
    size_t was = c->mem_held;
    __atomic_store_n(&c->mem_closable, now > c->room_held ? now - c->room_held : 0,
                     __ATOMIC_RELAXED);
    if (now == was)
        return;
    __atomic_store_n(&c->mem_held, now, __ATOMIC_RELAXED);
    if (now < was) {
        GSTATS_SUB(conn_mem_bytes, was - now);
        return;
    }
    uint64_t used = STATS_ADD(&gstats, conn_mem_bytes, now - was) + (now - was);
    if (used > settings.conn_mem_limit)
        conn_mem_over(used);
}

static const char *const state_names[conn_max_state] = {
    "conn_listening", "conn_new_cmd", "conn_waiting", "conn_read",
    "conn_parse_cmd", "conn_nread", "conn_swallow", "conn_write",
    "conn_closing", "conn_closed", "conn_parked",
};

/* Listening sockets, shown first by `stats conns` as memcached does.
 * Written by the main thread before the workers serve anything. */
#define LISTENERS_MAX 16
static struct { int fd; char name[80]; } listen_info[LISTENERS_MAX];
static int nlisten_info;

void conn_stats_add_listener(int fd, const char *name)
{
    pthread_mutex_lock(&conn_registry_lock);
    if (nlisten_info < LISTENERS_MAX) {
        listen_info[nlisten_info].fd = fd;
        snprintf(listen_info[nlisten_info].name,
                 sizeof(listen_info[nlisten_info].name), "%s", name);
        nlisten_info++;
    }
    pthread_mutex_unlock(&conn_registry_lock);
}

void conn_stats(struct stat_sink *sink)
{
    char key[64];
    rel_time_t now = mc_now();

    pthread_mutex_lock(&conn_registry_lock);
    for (int i = 0; i < nlisten_info; i++) {
        snprintf(key, sizeof(key), "%d:addr", listen_info[i].fd);
        stat_printf(sink, key, "%s", listen_info[i].name);
        snprintf(key, sizeof(key), "%d:state", listen_info[i].fd);
        stat_printf(sink, key, "conn_listening");
    }
    for (int fd = 0; fd < conn_registry_size; fd++) {
        conn *c = conn_registry[fd];
        if (!c)
            continue;
        enum conn_state st = __atomic_load_n(&c->state, __ATOMIC_RELAXED);
        rel_time_t last = __atomic_load_n(&c->last_cmd_time, __ATOMIC_RELAXED);
        snprintf(key, sizeof(key), "%d:addr", fd);
        stat_printf(sink, key, "%s", c->peer_name);
        if (c->listen_name[0] != '\0') {
            snprintf(key, sizeof(key), "%d:listen_addr", fd);
            stat_printf(sink, key, "%s", c->listen_name);
        }
        snprintf(key, sizeof(key), "%d:state", fd);
        stat_printf(sink, key, "%s", st < conn_max_state ? state_names[st] : "?");
        snprintf(key, sizeof(key), "%d:secs_since_last_cmd", fd);
        stat_printf(sink, key, "%u", now >= last ? now - last : 0);
    }
    pthread_mutex_unlock(&conn_registry_lock);
}


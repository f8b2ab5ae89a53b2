/*
 * bg.c - the background-thread helper (see bg.h).
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include "config.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "base/bg.h"
#include "base/util.h"

struct bg_start_arg {
    struct bg *g;
    unsigned idx;
};

void bg_init(struct bg *g, const char *name, void (*unblock)(void *arg))
{
    memset(g, 0, sizeof(*g));
    pthread_mutex_init(&g->lock, NULL);
    pthread_condattr_t ca;
    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    pthread_cond_init(&g->cond, &ca);
    pthread_condattr_destroy(&ca);
    g->name = name;
    g->unblock = unblock;
    g->inited = true;
}

static void *bg_main(void *p)
{
    struct bg_start_arg a = *(struct bg_start_arg *)p;
    free(p);
    a.g->body(a.g, a.idx, a.g->arg);
    return NULL;
}

bool bg_start(struct bg *g, unsigned n, bg_body_fn body, void *arg)
{
    g->tids = calloc(n, sizeof(*g->tids));
    if (g->tids == NULL)
        return false;
    g->body = body;
    g->arg = arg;
    __atomic_store_n(&g->stop, 0, __ATOMIC_RELEASE);
    for (unsigned i = 0; i < n; i++) {
        struct bg_start_arg *a = malloc(sizeof(*a));
        int rc = a == NULL ? ENOMEM : 0;
        if (a != NULL) {
            a->g = g;
            a->idx = i;
            rc = pthread_create(&g->tids[i], NULL, bg_main, a);
            if (rc != 0)
                free(a);
        }
        if (rc != 0) {
            bg_stop(g);
            errno = rc;
            return false;
        }
        pthread_mutex_lock(&g->lock);
        g->n = i + 1;
        pthread_mutex_unlock(&g->lock);
        char tname[16];
        if (n > 1)
            snprintf(tname, sizeof(tname), "%.10s-%u", g->name, i % 1000);
        else
            snprintf(tname, sizeof(tname), "%.15s", g->name);
        pthread_setname_np(g->tids[i], tname);
    }
    return true;
}

void bg_stop(struct bg *g)
{
    if (!g->inited || g->n == 0) {
        free(g->tids);
        g->tids = NULL;
        return;
    }
    pthread_mutex_lock(&g->lock);
    __atomic_store_n(&g->stop, 1, __ATOMIC_RELEASE);
    pthread_cond_broadcast(&g->cond);
    pthread_mutex_unlock(&g->lock);
    if (g->unblock != NULL)
        g->unblock(g->arg);
    for (unsigned i = 0; i < g->n; i++)
        pthread_join(g->tids[i], NULL);
    free(g->tids);
    g->tids = NULL;
    g->n = 0;
    g->wakes = 0;
    g->next_tick = 0;
}

bool bg_running(const struct bg *g)
{
    return !__atomic_load_n(&g->stop, __ATOMIC_ACQUIRE);
}

void bg_lock(struct bg *g)
{
    pthread_mutex_lock(&g->lock);
}

bool bg_trylock(struct bg *g)
{
    return pthread_mutex_trylock(&g->lock) == 0;
}

void bg_unlock(struct bg *g)
{
    pthread_mutex_unlock(&g->lock);
}

bool bg_wake_locked(struct bg *g)
{
    bool fresh = g->wakes == 0;
    if (g->wakes < (g->n > 0 ? g->n : 1))
        g->wakes++;
    pthread_cond_signal(&g->cond);
    return fresh;
}

bool bg_wake(struct bg *g)
{
    pthread_mutex_lock(&g->lock);
    bool fresh = bg_wake_locked(g);
    pthread_mutex_unlock(&g->lock);
    return fresh;
}

void bg_wake_all(struct bg *g)
{
    pthread_mutex_lock(&g->lock);
    g->wakes = g->n > 0 ? g->n : 1;
    pthread_cond_broadcast(&g->cond);
    pthread_mutex_unlock(&g->lock);
}

static struct timespec deadline_at(uint64_t ns)
{
    struct timespec ts = { (time_t)(ns / 1000000000u), (long)(ns % 1000000000u) };
    return ts;
}

/* Waits until woken (when take_wake), stopped or the monotonic time
 * `until` (UINT64_MAX: no limit).  Lock held. */
static void wait_until(struct bg *g, uint64_t until, bool take_wake)
{
    struct timespec ts = deadline_at(until);
    while (bg_running(g) && !(take_wake && g->wakes > 0)) {
        if (until == UINT64_MAX)
            pthread_cond_wait(&g->cond, &g->lock);
        else if (pthread_cond_timedwait(&g->cond, &g->lock, &ts) == ETIMEDOUT)
            break;
    }
    if (take_wake && g->wakes > 0)
        g->wakes--;
}

bool bg_wait_locked(struct bg *g, uint64_t ns)
{
    uint64_t until = UINT64_MAX;
    if (ns != BG_FOREVER) {
        uint64_t now = util_now_ns();
        until = ns > UINT64_MAX - 1 - now ? UINT64_MAX - 1 : now + ns;
    }
    wait_until(g, until, true);
    return bg_running(g);
}

bool bg_wait(struct bg *g, uint64_t ns)
{
    pthread_mutex_lock(&g->lock);
    bool running = bg_wait_locked(g, ns);
    pthread_mutex_unlock(&g->lock);
    return running;
}

bool bg_tick(struct bg *g, uint64_t period_ns)
{
    uint64_t now = util_now_ns();
    pthread_mutex_lock(&g->lock);
    if (g->next_tick == 0)
        g->next_tick = now + period_ns;
    else if (g->next_tick + period_ns < now)        /* far behind: no burst */
        g->next_tick = now;
    uint64_t until = g->next_tick;
    g->next_tick += period_ns;
    if (until > now)
        wait_until(g, until, false);
    bool running = bg_running(g);
    pthread_mutex_unlock(&g->lock);
    return running;
}

bool bg_doze(struct bg *g, uint64_t ns, bool (*busy)(void *arg), void *arg)
{
    __atomic_store_n(&g->dozing, 1, __ATOMIC_SEQ_CST);
    bool running = bg_running(g);
    if (running && (busy == NULL || !busy(arg)))
        running = bg_wait(g, ns);
    __atomic_store_n(&g->dozing, 0, __ATOMIC_SEQ_CST);
    return running;
}

void bg_kick(struct bg *g)
{
    if (__atomic_load_n(&g->dozing, __ATOMIC_SEQ_CST) &&
        __atomic_exchange_n(&g->dozing, 0, __ATOMIC_SEQ_CST))
        bg_wake(g);
}

bool bg_idle_wait(struct bg *g, uint64_t *wait_ns, bool worked,
                  uint64_t min_ns, uint64_t max_ns,
                  bool (*busy)(void *arg), void *arg)
{
    if (worked || *wait_ns < min_ns) {
        *wait_ns = min_ns;
        return bg_wait(g, min_ns);
    }
    *wait_ns = *wait_ns > max_ns / 2 ? max_ns : *wait_ns * 2;
    return bg_doze(g, *wait_ns, busy, arg);
}

/*
 * bg.h - the background-thread helper.  Every thread the server starts
 * besides the workers (maintainer, LRU lanes, evictors, fetchers, SSD
 * defrag, the SSD write reaper and the SSD I/O pool) is a member of a
 * struct bg: a group of one or more threads running one body, with one
 * mutex and one condition variable on CLOCK_MONOTONIC.
 *
 *   start  bg_start creates the threads (named, e.g. "tac-evict" in top -H).
 *   stop   bg_stop asks every member to stop, wakes them, runs the group's
 *          unblock hook (for a thread blocked outside the helper, such as
 *          in io_uring_wait_cqe) and joins them all.  A body returns once
 *          bg_running() is false or a wait says so.
 *   wake   bg_wake (or bg_wake_locked, lock held) sets a wake flag and
 *          signals one waiter; a wake that comes before the wait is kept, so
 *          none is lost between a body's look at its queue and its wait.
 *   wait   bg_wait sleeps until woken, stopped or a timeout; bg_tick sleeps
 *          to the next multiple of a period (no drift: a late round does
 *          not push the ones after it back).
 *   doze   a one-thread group whose rounds keep finding nothing to do
 *          sleeps longer (bg_idle_wait doubles its wait up to a cap;
 *          bg_doze sleeps one long wait).  While it dozes, bg_kick wakes
 *          it; at other times bg_kick costs its caller one atomic load, so
 *          a hot path may kick on every event that brings work.  Idle, the
 *          server's background threads so wake a few times a second, not
 *          a hundred (issue #40, item 5).
 *
 * The group's lock may guard the caller's own state too (a job queue):
 * bg_lock/bg_unlock, and bg_wait_locked with it held.  The lock is a leaf
 * (items.h, "Lock order"): it may be taken under an item lock, an SSD
 * writer lock, sd.lock or pool_start_lock, and nothing is taken while it
 * is held.
 *
 * This is the only code that sleeps on a timer.  Other waits are for
 * events: a worker's event loop, a condition variable, and poll() on an
 * SSD ring's eventfd by the fetchers and defrag (synchronous reads) and by
 * a ring's owner destroying it at exit.
 */
#ifndef BG_H
#define BG_H

#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>

#define BG_FOREVER UINT64_MAX

struct bg;
/* A member's body: idx is 0..n-1, arg what bg_start was given. */
typedef void (*bg_body_fn)(struct bg *g, unsigned idx, void *arg);

struct bg {
    pthread_mutex_t lock;
    pthread_cond_t cond;
    const char *name;
    bg_body_fn body;
    void *arg;
    void (*unblock)(void *arg);     /* optional; called by bg_stop */
    pthread_t *tids;
    unsigned n;                     /* threads started */
    unsigned wakes;                 /* pending wakes, at most n */
    int stop;                       /* atomic */
    uint64_t next_tick;             /* bg_tick's deadline (one-thread groups) */
    int dozing;                     /* atomic: in bg_doze, bg_kick wakes it */
    bool inited;
};

/* Sets up g (once, before any other call); unblock may be NULL. */
void bg_init(struct bg *g, const char *name, void (*unblock)(void *arg));

/* Starts n threads running body(g, idx, arg).  False (errno set, no
 * thread left running) if a thread could not be created. */
bool bg_start(struct bg *g, unsigned n, bg_body_fn body, void *arg);

/* Stops and joins every member; a no-op when none runs. */
void bg_stop(struct bg *g);

/* True until bg_stop is called. */
bool bg_running(const struct bg *g);

/* True if no wake was pending before (a waiter, if any, gets this one). */
bool bg_wake(struct bg *g);
void bg_wake_all(struct bg *g);

/* Sleeps up to ns nanoseconds (BG_FOREVER: until woken or stopped) unless
 * a wake is pending; consumes one wake.  Returns bg_running(). */
bool bg_wait(struct bg *g, uint64_t ns);

/* Sleeps until the next multiple of period_ns after the last tick (the
 * first call: now + period_ns), or until stopped; wakes do not cut a tick
 * short.  Returns bg_running(). */
bool bg_tick(struct bg *g, uint64_t period_ns);

/* Dozes up to ns nanoseconds: marks the thread dozing, then asks
 * busy(arg) (may be NULL) once more, so that work that came before the mark
 * and whose kick saw no mark is not slept over; sleeps unless busy says
 * there is work, a wake is pending or bg_kick comes.  The caller's work
 * and its check in busy must be published with sequentially consistent
 * atomics before bg_kick.  Returns bg_running(). */
bool bg_doze(struct bg *g, uint64_t ns, bool (*busy)(void *arg), void *arg);

/* Wakes g if it dozes (bg_doze); else a single atomic load. */
void bg_kick(struct bg *g);

/* The idle back-off of a round-based body.  *wait_ns is the caller's
 * state (0 at first).  A round that worked sets it to min_ns and waits
 * that (bg_wait); one that did not doubles it up to max_ns and waits that,
 * dozing once it is past min_ns.  Returns bg_running(). */
bool bg_idle_wait(struct bg *g, uint64_t *wait_ns, bool worked,
                  uint64_t min_ns, uint64_t max_ns,
                  bool (*busy)(void *arg), void *arg);

void bg_lock(struct bg *g);
bool bg_trylock(struct bg *g);      /* true if taken */
void bg_unlock(struct bg *g);
/* bg_wait and bg_wake with the group's lock already held. */
bool bg_wait_locked(struct bg *g, uint64_t ns);
bool bg_wake_locked(struct bg *g);

#endif

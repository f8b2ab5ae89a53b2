/*
 * test_bg.c - the background-thread helper: a wake sent before the wait is
 * not lost, a wait times out on its own, bg_tick keeps to its period
 * without drift, a group of threads drains a queue under the group's lock,
 * and bg_stop runs the unblock hook and joins every member.
 */
#include "config.h"

#include <pthread.h>

#include "base/bg.h"
#include "unit.h"
#include "base/util.h"

#define MS 1000000ull

static void test_wake_before_wait_is_kept(void)
{
    struct bg g;
    bg_init(&g, "t-wake", NULL);
    CHECK(bg_wake(&g));             /* no member yet: kept all the same */
    CHECK(!bg_wake(&g));            /* one pending already */
    uint64_t t0 = util_now_ns();
    CHECK(bg_wait(&g, 5000 * MS));  /* returns at once: the wake was kept */
    CHECK(util_now_ns() - t0 < 1000 * MS);
    t0 = util_now_ns();
    CHECK(bg_wait(&g, 50 * MS));    /* consumed: this one times out */
    uint64_t waited = util_now_ns() - t0;
    CHECK(waited >= 50 * MS && waited < 2000 * MS);
}

struct ticker {
    int ticks;
    uint64_t first, last;
};

static void tick_body(struct bg *g, unsigned idx, void *arg)
{
    (void)idx;
    struct ticker *t = arg;
    while (bg_tick(g, 20 * MS)) {
        uint64_t now = util_now_ns();
        int n = __atomic_load_n(&t->ticks, __ATOMIC_RELAXED);
        if (n == 0)
            t->first = now;
        t->last = now;
        __atomic_store_n(&t->ticks, n + 1, __ATOMIC_RELEASE);
        if (n + 1 == 3) {        /* a slow round: the next ticks catch up */
            uint64_t until = now + 30 * MS;
            while (util_now_ns() < until)
                ;
        }
    }
}

static void test_tick_keeps_its_period(void)
{
    struct bg g, pause;
    struct ticker t = { 0, 0, 0 };
    bg_init(&g, "t-tick", NULL);
    bg_init(&pause, "t-pause", NULL);
    CHECK(bg_start(&g, 1, tick_body, &t));
    uint64_t t0 = util_now_ns();
    while (util_now_ns() - t0 < 1000 * MS && __atomic_load_n(&t.ticks, __ATOMIC_ACQUIRE) < 21)
        bg_wait(&pause, 5 * MS);
    bg_stop(&g);
    CHECK(t.ticks >= 11);
    /* 20 ticks of 20 ms from the first: on schedule within 2 periods even
     * after the slow third round, so no drift piled up. */
    uint64_t span = t.last - t.first, want = (uint64_t)(t.ticks - 1) * 20 * MS;
    CHECK(span + 40 * MS >= want && span <= want + 40 * MS);
}

struct queue {
    int items, taken[4];
    unsigned unblocked;
};

static void queue_body(struct bg *g, unsigned idx, void *arg)
{
    struct queue *q = arg;
    for (;;) {
        bg_lock(g);
        while (q->items == 0 && bg_running(g))
            bg_wait_locked(g, BG_FOREVER);
        if (q->items == 0) {        /* stopped and drained */
            bg_unlock(g);
            return;
        }
        q->items--;
        q->taken[idx]++;
        bg_unlock(g);
    }
}

static void note_unblock(void *arg)
{
    struct queue *q = arg;
    __atomic_add_fetch(&q->unblocked, 1, __ATOMIC_RELAXED);
}

static void test_group_drains_a_queue_and_stops(void)
{
    struct bg g;
    struct queue q;
    memset(&q, 0, sizeof(q));
    bg_init(&g, "t-queue", note_unblock);
    CHECK(bg_start(&g, 4, queue_body, &q));
    for (int i = 0; i < 10000; i++) {
        bg_lock(&g);
        q.items++;
        bg_wake_locked(&g);
        bg_unlock(&g);
    }
    bg_lock(&g);
    q.items += 500;                 /* no wake: the stop must drain these */
    bg_unlock(&g);
    bg_stop(&g);                    /* joins all four */
    CHECK_EQ(q.items, 0);
    CHECK_EQ(q.taken[0] + q.taken[1] + q.taken[2] + q.taken[3], 10500);
    CHECK_UEQ(q.unblocked, 1);
    CHECK(!bg_running(&g));
    CHECK(!bg_wait(&g, BG_FOREVER));    /* a stopped group never sleeps */
    bg_stop(&g);                        /* twice: a no-op */
    CHECK_UEQ(q.unblocked, 1);
}

int main(void)
{
    RUN_TEST(test_wake_before_wait_is_kept);
    RUN_TEST(test_tick_keeps_its_period);
    RUN_TEST(test_group_drains_a_queue_and_stops);
    fprintf(stderr, "test_bg: ok\n");
    return 0;
}

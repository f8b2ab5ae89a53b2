/*
 * crashpoint.c - the named crash points' table and their trigger (see
 * crashpoint.h): parses TAC_CRASH_AT / TAC_CRASH_LIST, counts the passes of
 * the armed point and exits or sleeps at the chosen one.
 */
#include "base/crashpoint.h"

#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#ifdef TAC_DEBUG_HOOKS
static const char *const cp_names[CP_COUNT] = {
#define CRASH_POINT_NAME(n) #n,
    CRASH_POINT_LIST(CRASH_POINT_NAME)
#undef CRASH_POINT_NAME
};

int crash_point_armed = -1;
static unsigned long cp_at;             /* the pass that triggers, from 1 */
static unsigned long cp_delay_ms;       /* 0: _exit; else sleep and go on */
static unsigned long cp_passes;

void crash_point_pass(enum crash_point_id id)
{
    unsigned long n = __atomic_add_fetch(&cp_passes, 1, __ATOMIC_RELAXED);
    if (n != cp_at)
        return;
    if (cp_delay_ms > 0) {
        fprintf(stderr, "crash point %s: pass %lu: sleeping %lu ms\n",
                cp_names[id], n, cp_delay_ms);
        struct timespec ts = { (time_t)(cp_delay_ms / 1000),
                               (long)(cp_delay_ms % 1000) * 1000000L };
        while (nanosleep(&ts, &ts) != 0)
            ;
        return;
    }
    /* One write, no stdio lock: other threads may hold it. */
    char msg[96];
    int len = snprintf(msg, sizeof(msg), "crash point %s: pass %lu\n", cp_names[id], n);
    if (len > 0)
        (void)!write(2, msg, (size_t)len < sizeof(msg) ? (size_t)len : sizeof(msg) - 1);
    _exit(CRASH_POINT_EXIT);
}

bool crash_point_arm(const char *v)
{
    const char *colon = strchr(v, ':');
    size_t nlen = colon != NULL ? (size_t)(colon - v) : strlen(v);
    int id = -1;
    for (int i = 0; i < CP_COUNT; i++)
        if (strlen(cp_names[i]) == nlen && strncmp(cp_names[i], v, nlen) == 0)
            id = i;
    char *end = NULL;
    unsigned long at = colon != NULL ? strtoul(colon + 1, &end, 10) : 1;
    unsigned long delay = 0;
    if (end != NULL && *end == ',')
        delay = strtoul(end + 1, &end, 10);
    if (id < 0 || at == 0 || (end != NULL && *end != '\0'))
        return false;
    /* Disarmed while the count restarts, so no pass of the old arming
     * counts for the new one. */
    __atomic_store_n(&crash_point_armed, -1, __ATOMIC_SEQ_CST);
    __atomic_store_n(&cp_passes, 0, __ATOMIC_SEQ_CST);
    cp_at = at;
    cp_delay_ms = delay;
    __atomic_store_n(&crash_point_armed, id, __ATOMIC_SEQ_CST);
    fprintf(stderr, "debug hook: crash point %s armed at pass %lu%s\n",
            cp_names[id], at, delay > 0 ? " (delay)" : "");
    return true;
}

unsigned long crash_point_passes(void)
{
    return __atomic_load_n(&cp_passes, __ATOMIC_RELAXED);
}

void crash_point_init(void)
{
    const char *l = getenv("TAC_CRASH_LIST");
    if (l != NULL && *l != '\0' && strcmp(l, "0") != 0) {
        for (int i = 0; i < CP_COUNT; i++)
            printf("%s\n", cp_names[i]);
        exit(0);
    }
    const char *v = getenv("TAC_CRASH_AT");
    if (v != NULL && *v != '\0' && !crash_point_arm(v))
        fprintf(stderr, "TAC_CRASH_AT=%s: not NAME:N[,MS] with a point of "
                "TAC_CRASH_LIST=1; ignored\n", v);
}
#else
void crash_point_init(void)
{
}
#endif

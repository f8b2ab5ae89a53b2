/*
 * prefix_stats.c - per-prefix counters for `stats detail` (prefix_stats.h).
 *
 * A chained hash table of prefixes under one mutex, as memcached keeps
 * it: detail stats are a debugging aid, off by default, and cost a lock
 * per request only while on.  The table is bounded (PREFIX_MAX prefixes);
 * a new prefix past the bound is not counted, so a client sending random
 * prefixes cannot grow it without end.
 */
#include "config.h"

#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/hash.h"
#include "base/prefix_stats.h"

#define PREFIX_BUCKETS 256
#define PREFIX_MAX 65536

struct prefix {
    struct prefix *next;
    uint64_t gets, hits, sets, dels;
    size_t len;
    char name[];
};

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static struct prefix *table[PREFIX_BUCKETS];
static size_t count;

void prefix_stats_enable(bool on)
{
    __atomic_store_n(&settings.detail_enabled, on, __ATOMIC_RELAXED);
}

/* The key's prefix entry, made if new; NULL when the key has no delimiter
 * or the table is full.  Lock held. */
static struct prefix *find(const char *key, size_t nkey)
{
    const char *d = memchr(key, settings.prefix_delimiter, nkey);
    if (d == NULL)
        return NULL;
    size_t len = (size_t)(d - key);
    /* A binary key may hold any byte: a prefix that could break the dump's
     * lines is not counted. */
    for (size_t i = 0; i < len; i++)
        if ((unsigned char)key[i] <= ' ' || (unsigned char)key[i] == 0x7f)
            return NULL;
    uint32_t b = hash_key(key, len) % PREFIX_BUCKETS;
    for (struct prefix *p = table[b]; p != NULL; p = p->next)
        if (p->len == len && memcmp(p->name, key, len) == 0)
            return p;
    if (count >= PREFIX_MAX)
        return NULL;
    struct prefix *p = calloc(1, sizeof(*p) + len + 1);
    if (p == NULL)
        return NULL;
    memcpy(p->name, key, len);
    p->len = len;
    p->next = table[b];
    table[b] = p;
    count++;
    return p;
}

void prefix_stats_get(const char *key, size_t nkey, bool hit)
{
    pthread_mutex_lock(&lock);
    struct prefix *p = find(key, nkey);
    if (p != NULL) {
        p->gets++;
        p->hits += hit;
    }
    pthread_mutex_unlock(&lock);
}

void prefix_stats_set(const char *key, size_t nkey)
{
    pthread_mutex_lock(&lock);
    struct prefix *p = find(key, nkey);
    if (p != NULL)
        p->sets++;
    pthread_mutex_unlock(&lock);
}

void prefix_stats_delete(const char *key, size_t nkey)
{
    pthread_mutex_lock(&lock);
    struct prefix *p = find(key, nkey);
    if (p != NULL)
        p->dels++;
    pthread_mutex_unlock(&lock);
}

char *prefix_stats_dump(size_t *len)
{
    pthread_mutex_lock(&lock);
    size_t cap = 6;                     /* "END\r\n" and the NUL */
    for (unsigned b = 0; b < PREFIX_BUCKETS; b++)
        for (struct prefix *p = table[b]; p != NULL; p = p->next)
            cap += p->len + 128;        /* the words and four 20-digit numbers */
    char *buf = malloc(cap);
    size_t n = 0;
    for (unsigned b = 0; buf != NULL && b < PREFIX_BUCKETS; b++)
        for (struct prefix *p = table[b]; p != NULL; p = p->next)
            n += (size_t)snprintf(buf + n, cap - n,
                                  "PREFIX %.*s get %llu hit %llu set %llu del %llu\r\n",
                                  (int)p->len, p->name, (unsigned long long)p->gets,
                                  (unsigned long long)p->hits,
                                  (unsigned long long)p->sets,
                                  (unsigned long long)p->dels);
    pthread_mutex_unlock(&lock);
    if (buf != NULL) {
        memcpy(buf + n, "END\r\n", 6);        /* with its NUL: a C string too */
        *len = n + 5;
    }
    return buf;
}

void prefix_stats_clear(void)
{
    pthread_mutex_lock(&lock);
    for (unsigned b = 0; b < PREFIX_BUCKETS; b++) {
        while (table[b] != NULL) {
            struct prefix *p = table[b];
            table[b] = p->next;
            free(p);
        }
    }
    count = 0;
    pthread_mutex_unlock(&lock);
}

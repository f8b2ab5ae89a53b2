/*
 * prefix_stats.h - memcached's `stats detail`: get, hit, set and delete
 * counts per key prefix (the key up to the first -D delimiter, ':' by
 * default; a key without one is not counted).  Off until `stats detail
 * on`; the protocols call the record functions only while it is on.
 *
 * Threads: any worker; one mutex guards the table.
 */
#ifndef PREFIX_STATS_H
#define PREFIX_STATS_H

#include <stdbool.h>
#include <stddef.h>

#include "base/settings.h"

static inline bool prefix_stats_on(void)
{
    return __atomic_load_n(&settings.detail_enabled, __ATOMIC_RELAXED);
}

void prefix_stats_enable(bool on);
void prefix_stats_get(const char *key, size_t nkey, bool hit);
void prefix_stats_set(const char *key, size_t nkey);
void prefix_stats_delete(const char *key, size_t nkey);
/* The dump: "PREFIX <p> get <n> hit <n> set <n> del <n>\r\n" per prefix,
 * then "END\r\n", NUL-terminated (*len leaves the NUL out); malloc'd,
 * NULL when out of memory. */
char *prefix_stats_dump(size_t *len);
/* Forgets every prefix (tests). */
void prefix_stats_clear(void);

#endif

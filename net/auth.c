/*
 * auth.c - the password files: `-Y`'s, and $MEMCACHED_SASL_PWDB for `-S`
 * (auth.h).
 *
 * Design.  The file is read whole into one table of (user, password)
 * pairs.  A reload (SIGHUP) builds a new table and swaps it in under the
 * mutex; a file that cannot be read or holds a malformed line leaves the
 * old table in force and says why on stderr.  A check takes the mutex
 * too: it runs once per connection, so the lock costs nothing that
 * matters.  Passwords are compared in time independent of where they
 * differ.
 */
#include "config.h"

#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "net/auth.h"

#define AUTH_LINE_MAX 4096

struct auth_entry {
    char *user;
    char *pass;
    size_t ulen, plen;
};

struct auth_table {
    struct auth_entry *v;
    size_t n;
};

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static struct {
    struct auth_table users;            /* lock */
    const char *path;                   /* lock */
} dbs[AUTH_DB_COUNT];

static void table_free(struct auth_table *t)
{
    for (size_t i = 0; i < t->n; i++) {
        free(t->v[i].user);
        free(t->v[i].pass);
    }
    free(t->v);
    *t = (struct auth_table){ 0 };
}

/* One "user:password" line (end of line stripped) into t. */
static bool table_add(struct auth_table *t, const char *line, size_t len)
{
    const char *colon = memchr(line, ':', len);
    if (colon == NULL || colon == line || colon + 1 == line + len)
        return false;
    struct auth_entry *v = realloc(t->v, (t->n + 1) * sizeof(*v));
    if (v == NULL)
        return false;
    t->v = v;
    struct auth_entry *e = &t->v[t->n];
    e->ulen = (size_t)(colon - line);
    e->plen = len - e->ulen - 1;
    e->user = strndup(line, e->ulen);
    e->pass = strndup(colon + 1, e->plen);
    if (e->user == NULL || e->pass == NULL) {
        free(e->user);
        free(e->pass);
        return false;
    }
    t->n++;
    return true;
}

static bool table_read(const char *file, struct auth_table *t, char *err, size_t errlen)
{
    FILE *f = fopen(file, "r");
    if (f == NULL) {
        snprintf(err, errlen, "cannot open the password file %s: %s", file,
                 strerror(errno));
        return false;
    }
    char line[AUTH_LINE_MAX];
    unsigned lineno = 0;
    bool ok = true;
    while (ok && fgets(line, sizeof(line), f) != NULL) {
        lineno++;
        size_t len = strlen(line);
        if (len == sizeof(line) - 1 && line[len - 1] != '\n') {
            snprintf(err, errlen, "%s line %u: longer than %d bytes", file, lineno,
                     AUTH_LINE_MAX - 2);
            ok = false;
            break;
        }
        while (len > 0 && (line[len - 1] == '\n' || line[len - 1] == '\r'))
            len--;
        if (len == 0)
            continue;
        if (!table_add(t, line, len)) {
            snprintf(err, errlen, "%s line %u: expected user:password", file, lineno);
            ok = false;
        }
    }
    if (ok && ferror(f)) {
        snprintf(err, errlen, "cannot read the password file %s: %s", file,
                 strerror(errno));
        ok = false;
    }
    fclose(f);
    if (!ok)
        table_free(t);
    return ok;
}

bool auth_load_db(enum auth_db db, const char *file, char *err, size_t errlen)
{
    struct auth_table t = { 0 };
    if (!table_read(file, &t, err, errlen))
        return false;
    pthread_mutex_lock(&lock);
    struct auth_table old = dbs[db].users;
    dbs[db].users = t;
    dbs[db].path = file;
    pthread_mutex_unlock(&lock);
    table_free(&old);
    return true;
}

void auth_reload(void)
{
    for (int db = 0; db < AUTH_DB_COUNT; db++) {
        char err[512];
        pthread_mutex_lock(&lock);
        const char *file = dbs[db].path;
        pthread_mutex_unlock(&lock);
        if (file == NULL)
            continue;
        if (auth_load_db((enum auth_db)db, file, err, sizeof(err)))
            fprintf(stderr, "reloaded the password file %s\n", file);
        else
            fprintf(stderr, "%s; the users read before stay in force\n", err);
    }
}

/* Equal in time that depends on the lengths only. */
static bool same(const char *a, size_t alen, const char *b, size_t blen)
{
    unsigned char diff = alen != blen;
    size_t n = alen < blen ? alen : blen;
    for (size_t i = 0; i < n; i++)
        diff |= (unsigned char)(a[i] ^ b[i]);
    return diff == 0;
}

bool auth_check_db(enum auth_db db, const char *user, size_t ulen,
                   const char *pass, size_t plen)
{
    bool ok = false;
    pthread_mutex_lock(&lock);
    const struct auth_table *t = &dbs[db].users;
    for (size_t i = 0; i < t->n; i++) {
        const struct auth_entry *e = &t->v[i];
        if (e->ulen == ulen && memcmp(e->user, user, ulen) == 0)
            ok |= same(e->pass, e->plen, pass, plen);
    }
    pthread_mutex_unlock(&lock);
    return ok;
}

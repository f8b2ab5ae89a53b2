/*
 * auth.h - password files of "user:password" lines: ASCII
 * authentication's (`-Y FILE`, as memcached's: a connection's first
 * command must be a `set` whose data is "user password", proto_text.c)
 * and SASL's $MEMCACHED_SASL_PWDB (sasl_auth.c).  Any thread may check;
 * the main thread loads and reloads.
 */
#ifndef AUTH_H
#define AUTH_H

#include <stdbool.h>
#include <stddef.h>

enum auth_db { AUTH_DB_ASCII, AUTH_DB_SASL, AUTH_DB_COUNT };

/* Reads FILE as db's users.  False, with the reason in err, when it
 * cannot be read or a line is not user:password; the users in force
 * before stay. */
bool auth_load_db(enum auth_db db, const char *file, char *err, size_t errlen);

/* Reads every file loaded before again (SIGHUP); a failure is said on
 * stderr and changes nothing. */
void auth_reload(void);

/* Whether db has user with that password. */
bool auth_check_db(enum auth_db db, const char *user, size_t ulen,
                   const char *pass, size_t plen);

#endif

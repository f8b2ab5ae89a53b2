/*
 * auth.h - ASCII authentication (`-Y FILE`), as memcached's: FILE holds
 * "user:password" lines, and a connection's first command must be a
 * `set` whose data is "user password" (proto_text.c).  Any thread may
 * check; the main thread loads and reloads.
 */
#ifndef AUTH_H
#define AUTH_H

#include <stdbool.h>
#include <stddef.h>

/* Reads FILE as the users in force.  False, with the reason in err, when
 * it cannot be read or a line is not user:password; the users in force
 * before stay. */
bool auth_load(const char *file, char *err, size_t errlen);

/* Reads the file auth_load() last read again (SIGHUP); a failure is said
 * on stderr and changes nothing. */
void auth_reload(void);

/* Whether user has that password. */
bool auth_check(const char *user, size_t ulen, const char *pass, size_t plen);

#endif

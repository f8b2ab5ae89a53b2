/*
 * sasl_auth.h - SASL for the binary protocol (`-S`), as memcached's
 * (sasl_auth.c says where users and mechanisms come from).
 */
#ifndef SASL_AUTH_H
#define SASL_AUTH_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* At start, with -S.  False, with the reason in err, when SASL cannot
 * start or $MEMCACHED_SASL_PWDB cannot be read. */
bool sasl_auth_init(char *err, size_t errlen);

/* One connection's SASL state; NULL when it cannot be made. */
void *sasl_auth_new(void);
void sasl_auth_free(void *s);

/* The mechanisms offered, space separated (owned by s). */
bool sasl_auth_mechs(void *s, const char **out, unsigned *len);

/* Failed attempts a connection gets; the last is answered, then it closes. */
#define SASL_AUTH_MAX_FAILURES 3

/* SASL_AUTH_CLOSE: failed, and the connection has no attempt left. */
enum sasl_auth_result {
    SASL_AUTH_OK, SASL_AUTH_CONTINUE, SASL_AUTH_FAIL, SASL_AUTH_CLOSE
};

/* SASL_AUTH (mech given: the first step) or SASL_STEP (mech NULL) with
 * the client's data; *out (owned by s) is the server's answer. */
enum sasl_auth_result sasl_auth_step(void *s, const char *mech, size_t nmech,
                                     const char *in, unsigned inlen,
                                     const char **out, unsigned *outlen);

/* Whether user has that password, as PLAIN would check it: against
 * $MEMCACHED_SASL_PWDB, or Cyrus SASL's password check.  For the metrics
 * port's basic authentication, with -S (after sasl_auth_init). */
bool sasl_auth_check_password(const char *user, size_t ulen, const char *pass,
                              size_t plen);

/* Hands `auth_failure_closes` to `stats`. */
void sasl_auth_stats_register(void);

#endif

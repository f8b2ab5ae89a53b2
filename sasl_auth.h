/*
 * sasl_auth.h - SASL for the binary protocol (`-S`), as memcached's
 * (sasl_auth.c says where users and mechanisms come from).
 */
#ifndef SASL_AUTH_H
#define SASL_AUTH_H

#include <stdbool.h>
#include <stddef.h>

/* At start, with -S.  False, with the reason in err, when SASL cannot
 * start or $MEMCACHED_SASL_PWDB cannot be read. */
bool sasl_auth_init(char *err, size_t errlen);

/* One connection's SASL state; NULL when it cannot be made. */
void *sasl_auth_new(void);
void sasl_auth_free(void *s);

/* The mechanisms offered, space separated (owned by s). */
bool sasl_auth_mechs(void *s, const char **out, unsigned *len);

enum sasl_auth_result { SASL_AUTH_OK, SASL_AUTH_CONTINUE, SASL_AUTH_FAIL };

/* SASL_AUTH (mech given: the first step) or SASL_STEP (mech NULL) with
 * the client's data; *out (owned by s) is the server's answer. */
enum sasl_auth_result sasl_auth_step(void *s, const char *mech, size_t nmech,
                                     const char *in, unsigned inlen,
                                     const char **out, unsigned *outlen);

#endif

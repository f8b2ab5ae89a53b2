/*
 * sasl_auth.c - SASL for the binary protocol (`-S`), through Cyrus SASL
 * (sasl_auth.h).
 *
 * Design.  As memcached: the application name is "memcached", so an
 * existing memcached.conf in $SASL_CONF_PATH (mech_list, sasldb_path...)
 * configures this server unchanged, and $MEMCACHED_SASL_PWDB names a
 * user:password file checked for PLAIN (auth.c reads it, as it reads the
 * -Y file).  Without a configuration file the mechanisms offered are
 * PLAIN and CRAM-MD5, and anonymous ones never: a client must name a user.
 * Each connection has its own sasl_conn_t, made at its first SASL request
 * and freed when it closes.
 *
 * Guessing.  A connection gets SASL_AUTH_MAX_FAILURES failed attempts
 * (SASL_AUTH or SASL_STEP answered with an authentication error); the
 * last one is answered, then the connection is closed and counted in
 * `auth_failure_closes`.  A client that wants to guess again must
 * connect again.  (memcached allows any number on one connection; `-Y`
 * gets the same three, proto_text.c.)
 *
 * The metrics port checks its HTTP basic credentials against the same
 * users with sasl_auth_check_password.
 */
#include "config.h"

#include <sasl/sasl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "net/auth.h"
#include "net/sasl_auth.h"
#include "base/stats.h"

#define APP "memcached"

static bool have_pwdb;
static uint64_t failure_closes;         /* `stats`; relaxed atomics */

void sasl_auth_stats_register(void)
{
    stats_provide_counter("auth_failure_closes", &failure_closes);
}

/* PLAIN against $MEMCACHED_SASL_PWDB. */
static int check_pwdb(sasl_conn_t *conn, void *ctx, const char *user,
                      const char *pass, unsigned passlen, struct propctx *props)
{
    (void)conn;
    (void)ctx;
    (void)props;
    return auth_check_db(AUTH_DB_SASL, user, strlen(user), pass, passlen)
           ? SASL_OK : SASL_BADAUTH;
}

/* Options a configuration file has not set. */
static int get_option(void *ctx, const char *plugin, const char *option,
                      const char **result, unsigned *len)
{
    (void)ctx;
    (void)plugin;
    if (strcmp(option, "mech_list") == 0 && getenv("SASL_CONF_PATH") == NULL) {
        *result = have_pwdb ? "PLAIN" : "PLAIN CRAM-MD5";
        if (len != NULL)
            *len = (unsigned)strlen(*result);
        return SASL_OK;
    }
    return SASL_FAIL;
}

static int log_sasl(void *ctx, int level, const char *message)
{
    (void)ctx;
    if (level <= SASL_LOG_ERR)
        fprintf(stderr, "SASL: %s\n", message);
    return SASL_OK;
}

/* Cyrus SASL takes every callback as int (*)(void) and calls it by its
 * real type; the cast goes through void (*)(void), the generic one. */
#define SASL_FN(f) ((int (*)(void))(void (*)(void))(f))

static sasl_callback_t callbacks[] = {
    { SASL_CB_GETOPT, SASL_FN(get_option), NULL },
    { SASL_CB_LOG, SASL_FN(log_sasl), NULL },
    { SASL_CB_SERVER_USERDB_CHECKPASS, SASL_FN(check_pwdb), NULL },
    { SASL_CB_LIST_END, NULL, NULL },
};

bool sasl_auth_init(char *err, size_t errlen)
{
    const char *pwdb = getenv("MEMCACHED_SASL_PWDB");
    if (pwdb != NULL) {
        if (!auth_load_db(AUTH_DB_SASL, pwdb, err, errlen))
            return false;
        have_pwdb = true;
    } else {
        callbacks[2].id = SASL_CB_LIST_END;     /* no password file */
    }
    int rc = sasl_server_init(callbacks, APP);
    if (rc != SASL_OK) {
        snprintf(err, errlen, "-S: SASL would not start: %s",
                 sasl_errstring(rc, NULL, NULL));
        return false;
    }
    return true;
}

/* One connection's exchange.  Cyrus SASL must not be asked to step an
 * exchange that no SASL_AUTH started: it would follow a NULL mechanism. */
struct sasl_session {
    sasl_conn_t *conn;
    bool started;       /* a SASL_AUTH answered "continue"; a step may follow */
    unsigned failures;  /* failed attempts, up to SASL_AUTH_MAX_FAILURES */
};

void *sasl_auth_new(void)
{
    sasl_conn_t *conn = NULL;
    if (sasl_server_new(APP, NULL, NULL, NULL, NULL, NULL, 0, &conn) != SASL_OK)
        return NULL;
    sasl_security_properties_t sp = {
        .max_ssf = 0,
        .maxbufsize = 0,
        .security_flags = SASL_SEC_NOANONYMOUS,
    };
    struct sasl_session *s = calloc(1, sizeof(*s));
    if (s == NULL || sasl_setprop(conn, SASL_SEC_PROPS, &sp) != SASL_OK) {
        free(s);
        sasl_dispose(&conn);
        return NULL;
    }
    s->conn = conn;
    return s;
}

void sasl_auth_free(void *p)
{
    struct sasl_session *s = p;
    if (s == NULL)
        return;
    sasl_dispose(&s->conn);
    free(s);
}

bool sasl_auth_mechs(void *p, const char **out, unsigned *len)
{
    struct sasl_session *s = p;
    int count;
    return sasl_listmech(s->conn, NULL, "", " ", "", out, len, &count) == SASL_OK;
}

/* One more failed attempt: SASL_AUTH_CLOSE at the last one allowed. */
static enum sasl_auth_result failed(struct sasl_session *s)
{
    if (++s->failures < SASL_AUTH_MAX_FAILURES)
        return SASL_AUTH_FAIL;
    __atomic_fetch_add(&failure_closes, 1, __ATOMIC_RELAXED);
    return SASL_AUTH_CLOSE;
}

enum sasl_auth_result sasl_auth_step(void *p, const char *mech, size_t nmech,
                                     const char *in, unsigned inlen,
                                     const char **out, unsigned *outlen)
{
    struct sasl_session *s = p;
    int rc;
    *out = NULL;
    *outlen = 0;
    if (mech == NULL && !s->started)
        return failed(s);               /* a step with nothing to step */
    s->started = false;
    if (mech != NULL) {
        char name[64];
        if (nmech == 0 || nmech >= sizeof(name))
            return failed(s);
        memcpy(name, mech, nmech);
        name[nmech] = '\0';
        /* No data is no initial response (CRAM-MD5 starts with the
         * server's challenge), not an empty one. */
        rc = sasl_server_start(s->conn, name, inlen > 0 ? in : NULL, inlen, out, outlen);
    } else {
        rc = sasl_server_step(s->conn, in, inlen, out, outlen);
    }
    if (rc == SASL_OK)
        return SASL_AUTH_OK;
    if (rc == SASL_CONTINUE) {
        s->started = true;
        return SASL_AUTH_CONTINUE;
    }
    return failed(s);
}

bool sasl_auth_check_password(const char *user, size_t ulen, const char *pass,
                              size_t plen)
{
    if (have_pwdb)
        return auth_check_db(AUTH_DB_SASL, user, ulen, pass, plen);
    if (ulen > 255 || plen > 1024)
        return false;
    sasl_conn_t *conn = NULL;
    if (sasl_server_new(APP, NULL, NULL, NULL, NULL, NULL, 0, &conn) != SASL_OK)
        return false;
    int rc = sasl_checkpass(conn, user, (unsigned)ulen, pass, (unsigned)plen);
    sasl_dispose(&conn);
    return rc == SASL_OK;
}

/*
 * tls.c - TLS for client connections (`-Z`), through OpenSSL (tls.h).
 *
 * Design.  One SSL_CTX holds the certificate chain, the key, the CA list
 * for client certificates and the policy (verify mode, ciphers, minimum
 * version).  `refresh_certs` builds a new context from the same files and
 * swaps it in under a mutex: connections already open keep the context
 * they were made with (an SSL holds a reference to its SSL_CTX), new ones
 * take the new one, and a context that cannot be built leaves the old one
 * in force.  Each TLS connection is an SSL in accept state on its
 * non-blocking socket; tls_read and tls_write map OpenSSL's "want read"
 * and "want write" to EAGAIN, so conn.c drives TLS and plain connections
 * the same way.  A write that could not finish is retried with the same
 * bytes, as OpenSSL requires: conn.c rebuilds them from the head of the
 * unchanged queue, and tls_write keeps their length.
 */
#include "config.h"

#include <errno.h>
#include <openssl/err.h>
#include <openssl/ssl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "base/settings.h"
#include "base/stats.h"
#include "net/tls.h"

struct tls_conn {
    SSL *ssl;
    bool handshaken;
    size_t retry_len;       /* a write OpenSSL asked to retry: its length */
};

static pthread_mutex_t ctx_lock = PTHREAD_MUTEX_INITIALIZER;
static SSL_CTX *ctx;                    /* ctx_lock */
static time_t refreshed;                /* ctx_lock */
static uint64_t handshake_errors;       /* relaxed atomics */
static uint64_t new_sessions;

/* The last OpenSSL error as text (or what). */
static void ssl_error(char *err, size_t errlen, const char *what, const char *file)
{
    unsigned long e = ERR_get_error();
    char reason[256] = "";
    if (e != 0)
        ERR_error_string_n(e, reason, sizeof(reason));
    snprintf(err, errlen, "%s%s%s: %s", what, file ? " " : "", file ? file : "",
             reason[0] ? reason : "unknown OpenSSL error");
    ERR_clear_error();
}

static int min_version(void)
{
    static const int versions[] = { TLS1_VERSION, TLS1_1_VERSION, TLS1_2_VERSION,
                                    TLS1_3_VERSION };
    return versions[settings.ssl_min_version];
}

static int verify_flags(void)
{
    switch (settings.ssl_verify_mode) {
    case 1: return SSL_VERIFY_PEER;
    case 2: return SSL_VERIFY_PEER | SSL_VERIFY_FAIL_IF_NO_PEER_CERT;
    case 3: return SSL_VERIFY_PEER | SSL_VERIFY_FAIL_IF_NO_PEER_CERT |
                   SSL_VERIFY_CLIENT_ONCE;
    default: return SSL_VERIFY_NONE;
    }
}

/* A context from the files -o ssl_* name; NULL with the reason in err. */
static SSL_CTX *ctx_build(char *err, size_t errlen)
{
    SSL_CTX *c = SSL_CTX_new(TLS_server_method());
    if (c == NULL) {
        ssl_error(err, errlen, "cannot make a TLS context", NULL);
        return NULL;
    }
    int keytype = settings.ssl_keyformat == 2 ? SSL_FILETYPE_ASN1 : SSL_FILETYPE_PEM;
    bool ok = SSL_CTX_set_min_proto_version(c, min_version()) == 1;
    if (!ok)
        ssl_error(err, errlen, "-o ssl_min_version", NULL);
    if (ok && !(ok = SSL_CTX_use_certificate_chain_file(c, settings.ssl_chain_cert) == 1))
        ssl_error(err, errlen, "-o ssl_chain_cert", settings.ssl_chain_cert);
    const char *key = settings.ssl_key ? settings.ssl_key : settings.ssl_chain_cert;
    if (ok && !(ok = SSL_CTX_use_PrivateKey_file(c, key, keytype) == 1))
        ssl_error(err, errlen, "-o ssl_key", key);
    if (ok && !(ok = SSL_CTX_check_private_key(c) == 1))
        ssl_error(err, errlen, "-o ssl_key does not match -o ssl_chain_cert", key);
    if (ok && settings.ssl_ca_cert != NULL) {
        STACK_OF(X509_NAME) *names = SSL_load_client_CA_file(settings.ssl_ca_cert);
        if (!(ok = names != NULL &&
                   SSL_CTX_load_verify_locations(c, settings.ssl_ca_cert, NULL) == 1))
            ssl_error(err, errlen, "-o ssl_ca_cert", settings.ssl_ca_cert);
        if (names != NULL)
            SSL_CTX_set_client_CA_list(c, names);
    }
    if (ok && settings.ssl_ciphers != NULL &&
        !(ok = SSL_CTX_set_cipher_list(c, settings.ssl_ciphers) == 1))
        ssl_error(err, errlen, "-o ssl_ciphers", settings.ssl_ciphers);
    if (!ok) {
        SSL_CTX_free(c);
        return NULL;
    }
    SSL_CTX_set_verify(c, verify_flags(), NULL);
    SSL_CTX_set_mode(c, SSL_MODE_ENABLE_PARTIAL_WRITE |
                        SSL_MODE_ACCEPT_MOVING_WRITE_BUFFER);
    SSL_CTX_set_session_cache_mode(c, settings.ssl_session_cache
                                      ? SSL_SESS_CACHE_SERVER : SSL_SESS_CACHE_OFF);
    static const unsigned char sid[] = "tac-memcached";
    SSL_CTX_set_session_id_context(c, sid, sizeof(sid) - 1);
    return c;
}

static uint64_t stat_handshake_errors(void)
{
    return __atomic_load_n(&handshake_errors, __ATOMIC_RELAXED);
}

static uint64_t stat_new_sessions(void)
{
    return __atomic_load_n(&new_sessions, __ATOMIC_RELAXED);
}

static uint64_t stat_since_refresh(void)
{
    pthread_mutex_lock(&ctx_lock);
    time_t at = refreshed;
    pthread_mutex_unlock(&ctx_lock);
    time_t now = time(NULL);
    return now > at ? (uint64_t)(now - at) : 0;
}

bool tls_init(char *err, size_t errlen)
{
    SSL_CTX *c = ctx_build(err, errlen);
    if (c == NULL)
        return false;
    pthread_mutex_lock(&ctx_lock);
    ctx = c;
    refreshed = time(NULL);
    pthread_mutex_unlock(&ctx_lock);
    stats_provide("ssl_handshake_errors", stat_handshake_errors);
    stats_provide("ssl_new_sessions", stat_new_sessions);
    stats_provide("time_since_server_cert_refresh", stat_since_refresh);
    return true;
}

bool tls_refresh(char *err, size_t errlen)
{
    SSL_CTX *c = ctx_build(err, errlen);
    if (c == NULL)
        return false;
    pthread_mutex_lock(&ctx_lock);
    SSL_CTX *old = ctx;
    ctx = c;
    refreshed = time(NULL);
    pthread_mutex_unlock(&ctx_lock);
    SSL_CTX_free(old);          /* open connections hold their own reference */
    return true;
}

struct tls_conn *tls_new(int fd)
{
    struct tls_conn *t = calloc(1, sizeof(*t));
    if (t == NULL)
        return NULL;
    pthread_mutex_lock(&ctx_lock);
    t->ssl = ctx != NULL ? SSL_new(ctx) : NULL;
    pthread_mutex_unlock(&ctx_lock);
    if (t->ssl == NULL || SSL_set_fd(t->ssl, fd) != 1) {
        SSL_free(t->ssl);
        free(t);
        return NULL;
    }
    SSL_set_accept_state(t->ssl);
    return t;
}

void tls_free(struct tls_conn *t)
{
    if (t == NULL)
        return;
    SSL_free(t->ssl);
    free(t);
}

/* After an SSL_read or SSL_write that returned rc <= 0: -1 with errno
 * EAGAIN (try again when the socket is ready), 0 for a clean close, or -1
 * with EPROTO (the connection is lost). */
static ssize_t tls_result(struct tls_conn *t, int rc)
{
    int e = SSL_get_error(t->ssl, rc);
    switch (e) {
    case SSL_ERROR_WANT_READ:
    case SSL_ERROR_WANT_WRITE:
        errno = EAGAIN;
        return -1;
    case SSL_ERROR_ZERO_RETURN:
        return 0;
    default:
        if (!t->handshaken) {
            __atomic_fetch_add(&handshake_errors, 1, __ATOMIC_RELAXED);
            if (__atomic_load_n(&settings.verbose, __ATOMIC_RELAXED) > 0) {
                char reason[256] = "the peer closed the connection";
                unsigned long ee = ERR_peek_error();
                if (ee != 0)
                    ERR_error_string_n(ee, reason, sizeof(reason));
                fprintf(stderr, "<%d TLS handshake failed (%d): %s\n",
                        SSL_get_fd(t->ssl), e, reason);
            }
        }
        ERR_clear_error();
        errno = EPROTO;
        return -1;
    }
}

static void note_handshake(struct tls_conn *t)
{
    if (!t->handshaken && SSL_is_init_finished(t->ssl)) {
        t->handshaken = true;
        __atomic_fetch_add(&new_sessions, 1, __ATOMIC_RELAXED);
    }
}

ssize_t tls_read(struct tls_conn *t, void *buf, size_t len)
{
    size_t got = 0;
    ERR_clear_error();
    int rc = SSL_read_ex(t->ssl, buf, len, &got);
    note_handshake(t);
    if (rc == 1)
        return (ssize_t)got;
    return tls_result(t, rc);
}

size_t tls_write_len(const struct tls_conn *t, size_t len)
{
    return t->retry_len != 0 ? t->retry_len : len;
}

ssize_t tls_write(struct tls_conn *t, const void *buf, size_t len)
{
    size_t sent = 0;
    ERR_clear_error();
    int rc = SSL_write_ex(t->ssl, buf, len, &sent);
    note_handshake(t);
    if (rc == 1) {
        t->retry_len = 0;
        return (ssize_t)sent;
    }
    ssize_t r = tls_result(t, rc);
    if (r < 0 && errno == EAGAIN)
        t->retry_len = len;
    return r;
}

bool tls_pending(const struct tls_conn *t)
{
    return SSL_pending(t->ssl) > 0;
}


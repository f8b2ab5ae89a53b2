/*
 * tls.h - TLS for client connections (`-Z`, `-o ssl_*`), as memcached's
 * (tls.c says how contexts and connections are kept).
 */
#ifndef TLS_H
#define TLS_H

#include <stdbool.h>
#include <stddef.h>
#include <sys/types.h>

struct tls_conn;

/* At start, with -Z: the context from -o ssl_*.  False, with the reason
 * in err, when a file cannot be read or does not fit. */
bool tls_init(char *err, size_t errlen);

/* `refresh_certs`: the same files read again for new connections.  False,
 * with the reason in err, and the old context kept, when they do not do. */
bool tls_refresh(char *err, size_t errlen);

/* A server-side TLS session on the accepted, non-blocking socket fd; the
 * handshake runs within the first reads and writes.  NULL on failure. */
struct tls_conn *tls_new(int fd);
void tls_free(struct tls_conn *t);

/* As read(2) and write(2): bytes moved, 0 for a closed session (reads),
 * or -1 with errno EAGAIN (wait for the socket) or EPROTO (lost). */
ssize_t tls_read(struct tls_conn *t, void *buf, size_t len);
ssize_t tls_write(struct tls_conn *t, const void *buf, size_t len);

/* Whether decrypted bytes wait inside the session: the socket may stay
 * quiet, so the reader must not wait for it. */
bool tls_pending(const struct tls_conn *t);

/* How many of the len bytes queued the next tls_write must take: after a
 * write that has to be retried, exactly what it was given. */
size_t tls_write_len(const struct tls_conn *t, size_t len);

#endif
